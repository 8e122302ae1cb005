//! A region with no ordering guarantee: stores are issued as the policy asks (non-temporal
//! stores stay non-temporal, so the data path moves the same bytes the same way), but flushes
//! and fences do nothing. Nothing written through it is ever known to be durable; it exists to
//! measure what the ordering guarantee costs (seed 000 Fig. 10, "NVRAMDISK-async"): the same
//! device code, with the persist points taken out.

use super::{FlushKind, Region};

pub struct Unordered<R: Region>(pub R);

impl<R: Region> Region for Unordered<R> {
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn read(&self, off: u64, dst: &mut [u8]) {
        self.0.read(off, dst)
    }
    fn load_u64(&self, off: u64) -> u64 {
        self.0.load_u64(off)
    }
    fn write(&self, off: u64, src: &[u8]) {
        self.0.write(off, src)
    }
    fn store_u64(&self, off: u64, v: u64) {
        self.0.store_u64(off, v)
    }
    fn write_nt(&self, off: u64, src: &[u8]) {
        self.0.write_nt(off, src)
    }
    fn store_u64_nt(&self, off: u64, v: u64) {
        self.0.store_u64_nt(off, v)
    }
    fn flush(&self, _off: u64, _len: u64, _kind: FlushKind) {}
    fn fence(&self) {}
    /// Flushes do nothing here, so any kind "runs".
    fn has_flush(&self, _kind: FlushKind) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MmapRegion;

    #[test]
    fn stores_land_and_persists_do_nothing() {
        let r = Unordered(MmapRegion::anonymous(1 << 16).unwrap());
        r.write_nt(64, &[7u8; 64]);
        r.store_u64_nt(0, 42);
        r.flush(0, 128, FlushKind::Clflush);
        r.fence();
        assert_eq!(r.load_u64(0), 42);
        let mut b = [0u8; 64];
        r.read(64, &mut b);
        assert_eq!(b, [7u8; 64]);
        assert_eq!(r.len(), 1 << 16);
    }
}
