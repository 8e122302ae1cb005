//! The raw backend of `nvstack serve --backend raw`: the region as a flat array of blocks,
//! written with plain non-temporal copies and one fence per write, with no map, no shadow
//! pages and no journal. Durable when a write returns, but not atomic: a crash mid-write can
//! leave a block half old, half new. It exists as the baseline that isolates what nvramdisk's
//! transactions cost on the same export path (same daemon, same FUSE options, same loop
//! device).

use nvstack_core::blockdev::{BlockDevice, Caps, Durability};
use nvstack_core::error::{Error, Result, FIELD};
use nvstack_pmem::Region;
use std::sync::Arc;

pub const RAW_BLOCK_BYTES: u32 = 4096;

/// Block sizes the raw backend serves: 512 (a disk sector: seed 004's FAT experiment records
/// what a FAT file system writes sector by sector) or 4096 (the default, nvramdisk's page).
pub const RAW_BLOCK_BYTES_CHOICES: [u32; 2] = [512, RAW_BLOCK_BYTES];

pub struct RawDevice<R: Region> {
    region: Arc<R>,
    blocks: u64,
    block_bytes: u32,
}

impl<R: Region> RawDevice<R> {
    /// The whole region, in 4096-byte blocks (a trailing partial block is not used).
    pub fn new(region: Arc<R>) -> Result<RawDevice<R>> {
        RawDevice::with_block_bytes(region, RAW_BLOCK_BYTES)
    }

    /// The whole region in blocks of `block_bytes` (one of [`RAW_BLOCK_BYTES_CHOICES`]).
    pub fn with_block_bytes(region: Arc<R>, block_bytes: u32) -> Result<RawDevice<R>> {
        if !RAW_BLOCK_BYTES_CHOICES.contains(&block_bytes) {
            return Err(Error::invalid(
                "raw_block_bytes",
                format!("{FIELD} {block_bytes}: 512 or 4096"),
            ));
        }
        let blocks = region.len() / u64::from(block_bytes);
        if blocks == 0 {
            return Err(Error::bad(format!(
                "region of {} bytes holds no {block_bytes}-byte block",
                region.len()
            )));
        }
        Ok(RawDevice {
            region,
            blocks,
            block_bytes,
        })
    }

    fn range(&self, lba: u64, bytes: usize) -> Result<u64> {
        nvstack_core::blockdev::extent(self.blocks, self.block_bytes, lba, bytes)
    }
}

impl<R: Region> BlockDevice for RawDevice<R> {
    fn block_bytes(&self) -> u32 {
        self.block_bytes
    }
    fn blocks(&self) -> u64 {
        self.blocks
    }
    /// No atomic unit, not even one block (a crash mid-copy can leave a block half old, half
    /// new), so no scattered write; durable on return (each write ends with a fence).
    fn caps(&self) -> Caps {
        Caps {
            atomic_blocks: 0,
            scattered: false,
            durability: Durability::OnReturn,
        }
    }
    fn read(&self, lba: u64, buf: &mut [u8]) -> Result<()> {
        let off = self.range(lba, buf.len())?;
        self.region.read(off, buf);
        Ok(())
    }
    fn write(&self, lba: u64, data: &[u8]) -> Result<()> {
        let off = self.range(lba, data.len())?;
        self.region.write_nt(off, data);
        self.region.fence();
        Ok(())
    }
    fn discard(&self, lba: u64, count: u64) -> Result<()> {
        let bb = u64::from(self.block_bytes);
        let bytes = count
            .checked_mul(bb)
            .and_then(|b| usize::try_from(b).ok())
            .ok_or_else(|| Error::bad(format!("discard of {count} blocks is too large")))?;
        let off = self.range(lba, bytes)?;
        let zeros = vec![0u8; bb as usize];
        for i in 0..count {
            self.region.write_nt(off + i * bb, &zeros);
        }
        self.region.fence();
        Ok(())
    }
    fn flush(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvstack_pmem::MmapRegion;

    fn raw(blocks: u64) -> RawDevice<MmapRegion> {
        let r = MmapRegion::anonymous(blocks * RAW_BLOCK_BYTES as u64).unwrap();
        RawDevice::new(Arc::new(r)).unwrap()
    }

    #[test]
    fn promises_durability_on_return_and_no_atomicity() {
        let d = raw(8);
        let caps = d.caps();
        assert_eq!(caps.atomic_blocks, 0);
        assert!(!caps.is_atomic(1), "a crash can tear a raw block");
        assert!(!caps.scattered);
        assert_eq!(caps.durability, Durability::OnReturn);
        // No scattered write: refused, and nothing written.
        let e = d
            .write_scattered(&[1, 5], &[7u8; 2 * RAW_BLOCK_BYTES as usize])
            .unwrap_err();
        assert_eq!(e.exit_code(), 2, "{e}");
        let mut back = vec![1u8; 8 * RAW_BLOCK_BYTES as usize];
        d.read(0, &mut back).unwrap();
        assert!(
            back.iter().all(|&b| b == 0),
            "a refused write reached the region"
        );
        // A write longer than any unit is taken whole (no unit to refuse it by).
        let data: Vec<u8> = (0..8 * RAW_BLOCK_BYTES).map(|i| (i % 251) as u8).collect();
        d.write(0, &data).unwrap();
        d.read(0, &mut back).unwrap();
        assert!(back == data);
    }

    #[test]
    fn serves_512_byte_sectors_and_refuses_other_sizes() {
        let r = Arc::new(MmapRegion::anonymous(8192).unwrap());
        let d = RawDevice::with_block_bytes(r.clone(), 512).unwrap();
        assert_eq!((d.block_bytes(), d.blocks()), (512, 16));
        d.write(3, &[9u8; 512]).unwrap();
        let mut b = vec![0u8; 1024];
        d.read(2, &mut b).unwrap();
        assert!(b[..512].iter().all(|&x| x == 0) && b[512..].iter().all(|&x| x == 9));
        d.discard(3, 1).unwrap();
        d.read(3, &mut b[..512]).unwrap();
        assert!(b[..512].iter().all(|&x| x == 0));
        let e = RawDevice::with_block_bytes(r, 1024).err().unwrap();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("512 or 4096"), "{e}");
    }
}
