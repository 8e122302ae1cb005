//! The one interface that joins the layers: every device (nvramdisk, and later the caches and
//! the simulator's models) is a `BlockDevice`, so any layer can stack on any other.

use crate::error::Result;

pub trait BlockDevice: Send + Sync {
    /// Bytes per block, fixed at format time.
    fn block_bytes(&self) -> u32;
    /// Number of logical blocks.
    fn blocks(&self) -> u64;
    /// Read whole blocks starting at `lba` into `buf` (a multiple of the block size).
    fn read(&self, lba: u64, buf: &mut [u8]) -> Result<()>;
    /// Write whole blocks starting at `lba`; durable (and, up to the device's atomic limit,
    /// all-or-nothing) when it returns.
    fn write(&self, lba: u64, data: &[u8]) -> Result<()>;
    /// Forget `count` blocks starting at `lba`: they read as zeros afterwards.
    fn discard(&self, lba: u64, count: u64) -> Result<()>;
    /// Make everything written so far durable (a no-op for devices whose writes are durable
    /// when they return).
    fn flush(&self) -> Result<()>;
}
