//! Views of one simulated region as a cache's two devices, so that one crash point is one
//! instant of both: the head is the NVRAM ([`SimNvram`], a [`Region`]) and the tail a disk
//! ([`SimDisk`], a `BlockDevice` of 4 KiB blocks written as 512-byte sectors that are durable
//! only after its flush: [`SimRegion::disk_write`] and [`SimRegion::disk_flush`]). Used by the
//! crash checker's UBJ target and by the serve daemon's power cuts of a cache image.

use crate::crash::SimRegion;
use crate::prefix::Prefix;
use crate::Region;
use nvstack_core::blockdev::{BlockDevice, Caps, Durability};
use nvstack_core::error::{Error, Result};
use std::sync::Arc;

/// The disk's block size (a cache's, nvcache's `BLOCK_BYTES`).
pub const BLOCK_BYTES: u32 = 4096;
const B: u64 = BLOCK_BYTES as u64;

/// The NVRAM part of a simulated region: its first bytes (bounds checked by [`Prefix`]).
pub type SimNvram = Prefix<SimRegion>;

/// The backing device: whole 4 KiB blocks in the region's tail, written as sectors that are
/// durable only after `flush` (a disk's write cache); a discard writes zeros (a punched hole).
pub struct SimDisk {
    region: Arc<SimRegion>,
    off: u64,
    blocks: u64,
}

impl SimDisk {
    fn at(&self, lba: u64, bytes: usize) -> Result<u64> {
        let off = nvstack_core::blockdev::extent(self.blocks, BLOCK_BYTES, lba, bytes)
            .map_err(|e| e.context("sim disk"))?;
        Ok(self.off + off)
    }
}

impl BlockDevice for SimDisk {
    fn block_bytes(&self) -> u32 {
        BLOCK_BYTES
    }
    fn blocks(&self) -> u64 {
        self.blocks
    }
    fn caps(&self) -> Caps {
        Caps {
            atomic_blocks: 0,
            scattered: false,
            durability: Durability::OnFlush,
        }
    }
    fn read(&self, lba: u64, buf: &mut [u8]) -> Result<()> {
        let off = self.at(lba, buf.len())?;
        self.region.read(off, buf);
        Ok(())
    }
    fn write(&self, lba: u64, data: &[u8]) -> Result<()> {
        let off = self.at(lba, data.len())?;
        self.region.disk_write(off, data);
        Ok(())
    }
    fn discard(&self, lba: u64, count: u64) -> Result<()> {
        let bytes = usize::try_from(count * B).map_err(|_| Error::bad("discard too long"))?;
        let off = self.at(lba, bytes)?;
        self.region.disk_write(off, &vec![0u8; bytes]);
        Ok(())
    }
    fn flush(&self) -> Result<()> {
        self.region.disk_flush();
        Ok(())
    }
}

/// The NVRAM and the disk of a region whose NVRAM is `nvram_bytes` long.
pub fn parts(region: &Arc<SimRegion>, nvram_bytes: u64) -> (SimNvram, SimDisk) {
    assert!(nvram_bytes < region.len() && nvram_bytes.is_multiple_of(B));
    let nvram = Prefix::new(region.clone(), nvram_bytes);
    let disk = SimDisk {
        region: region.clone(),
        off: nvram_bytes,
        blocks: (region.len() - nvram_bytes) / B,
    };
    (nvram, disk)
}
