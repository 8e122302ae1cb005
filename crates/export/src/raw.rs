//! The raw backend of `nvstack serve --backend raw`: the region as a flat array of blocks,
//! written with plain non-temporal copies and one fence per write, with no map, no shadow
//! pages and no journal. Durable when a write returns, but not atomic: a crash mid-write can
//! leave a block half old, half new. It exists as the baseline that isolates what nvramdisk's
//! transactions cost on the same export path (same daemon, same FUSE options, same loop
//! device).

use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::{Error, Result};
use nvstack_pmem::Region;
use std::sync::Arc;

pub const RAW_BLOCK_BYTES: u32 = 4096;

pub struct RawDevice<R: Region> {
    region: Arc<R>,
    blocks: u64,
}

impl<R: Region> RawDevice<R> {
    /// The whole region, in 4096-byte blocks (a trailing partial block is not used).
    pub fn new(region: Arc<R>) -> Result<RawDevice<R>> {
        let blocks = region.len() / RAW_BLOCK_BYTES as u64;
        if blocks == 0 {
            return Err(Error::bad(format!(
                "region of {} bytes holds no {RAW_BLOCK_BYTES}-byte block",
                region.len()
            )));
        }
        Ok(RawDevice { region, blocks })
    }

    fn range(&self, lba: u64, bytes: usize) -> Result<u64> {
        let bb = RAW_BLOCK_BYTES as u64;
        if !(bytes as u64).is_multiple_of(bb) {
            return Err(Error::bad(format!(
                "{bytes} bytes is not whole {bb}-byte blocks"
            )));
        }
        let n = bytes as u64 / bb;
        if lba.checked_add(n).is_none_or(|e| e > self.blocks) {
            return Err(Error::bad(format!(
                "blocks [{lba}, +{n}) past the end of the {}-block device",
                self.blocks
            )));
        }
        Ok(lba * bb)
    }
}

impl<R: Region> BlockDevice for RawDevice<R> {
    fn block_bytes(&self) -> u32 {
        RAW_BLOCK_BYTES
    }
    fn blocks(&self) -> u64 {
        self.blocks
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
        let bytes = count
            .checked_mul(RAW_BLOCK_BYTES as u64)
            .and_then(|b| usize::try_from(b).ok())
            .ok_or_else(|| Error::bad(format!("discard of {count} blocks is too large")))?;
        let off = self.range(lba, bytes)?;
        let zeros = vec![0u8; RAW_BLOCK_BYTES as usize];
        for i in 0..count {
            self.region
                .write_nt(off + i * RAW_BLOCK_BYTES as u64, &zeros);
        }
        self.region.fence();
        Ok(())
    }
    fn flush(&self) -> Result<()> {
        Ok(())
    }
}
