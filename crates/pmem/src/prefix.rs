//! The first `len` bytes of a region as a region of their own: the write cache sizes itself by
//! its region's length, so a simulation gives it exactly the bytes it asked for (a mapping is
//! whole pages; a crash-checked cache's NVRAM is the head of one simulated region whose tail is
//! its disk, `simdisk.rs`). Every access is checked against the prefix, overflow-safe.

use crate::{FlushKind, Region};
use std::sync::Arc;

/// The first `len` bytes of `inner`.
pub struct Prefix<R: Region> {
    inner: Arc<R>,
    len: u64,
}

impl<R: Region> Prefix<R> {
    /// The first `len` bytes of `inner` (at most its length).
    pub fn new(inner: Arc<R>, len: u64) -> Prefix<R> {
        assert!(
            len <= inner.len(),
            "a prefix of {len} bytes of a {}-byte region",
            inner.len()
        );
        Prefix { inner, len }
    }

    /// The region the prefix is a view of.
    pub fn inner(&self) -> &Arc<R> {
        &self.inner
    }

    /// An access of `n` bytes at `off` inside the prefix, or a panic naming it: an out-of-range
    /// access is a bug of the caller (the `Region` contract), never clamped.
    fn check(&self, off: u64, n: usize) {
        assert!(
            off.checked_add(n as u64).is_some_and(|e| e <= self.len),
            "access {off}+{n} past the prefix's {} bytes",
            self.len
        );
    }
}

impl<R: Region> Region for Prefix<R> {
    fn len(&self) -> u64 {
        self.len
    }
    fn read(&self, off: u64, dst: &mut [u8]) {
        self.check(off, dst.len());
        self.inner.read(off, dst)
    }
    fn load_u64(&self, off: u64) -> u64 {
        self.check(off, 8);
        self.inner.load_u64(off)
    }
    fn write(&self, off: u64, src: &[u8]) {
        self.check(off, src.len());
        self.inner.write(off, src)
    }
    fn store_u64(&self, off: u64, v: u64) {
        self.check(off, 8);
        self.inner.store_u64(off, v)
    }
    fn write_nt(&self, off: u64, src: &[u8]) {
        self.check(off, src.len());
        self.inner.write_nt(off, src)
    }
    fn store_u64_nt(&self, off: u64, v: u64) {
        self.check(off, 8);
        self.inner.store_u64_nt(off, v)
    }
    // Flushes are not checked: a flush names lines, and a line may reach past the prefix.
    fn flush(&self, off: u64, len: u64, kind: FlushKind) {
        self.inner.flush(off, len, kind)
    }
    fn fence(&self) {
        self.inner.fence()
    }
    fn has_flush(&self, kind: FlushKind) -> bool {
        self.inner.has_flush(kind)
    }
    fn committed(&self, off: u64, len: u64) {
        self.inner.committed(off, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MmapRegion;

    fn prefix(len: u64) -> Prefix<MmapRegion> {
        Prefix::new(Arc::new(MmapRegion::anonymous(4096).unwrap()), len)
    }

    #[test]
    fn a_prefix_reads_and_writes_its_region_and_is_its_length() {
        let p = prefix(1000);
        assert_eq!(p.len(), 1000);
        p.write(992, &[7; 8]);
        p.store_u64(0, 42);
        let mut b = [0u8; 8];
        p.inner().read(992, &mut b);
        assert_eq!(b, [7; 8], "the bytes are the region's");
        assert_eq!(p.load_u64(0), 42);
    }

    #[test]
    fn an_access_past_the_prefix_panics_even_when_the_end_overflows() {
        for (off, n) in [(993u64, 8usize), (1000, 1), (u64::MAX - 3, 8)] {
            let r = std::panic::catch_unwind(|| prefix(1000).write(off, &vec![0; n]));
            assert!(r.is_err(), "{off}+{n} accepted");
        }
        let r = std::panic::catch_unwind(|| prefix(1000).load_u64(u64::MAX - 7));
        assert!(r.is_err(), "an overflowing load accepted");
    }
}
