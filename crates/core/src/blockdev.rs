//! The one interface that joins the layers: every device (nvramdisk, the raw baseline, and later
//! the caches and the flash model) is a `BlockDevice`, so any layer can stack on any other.
//!
//! A layer stacked on a device must know what the device promises, not which device it is, so
//! every device states its promises in [`Caps`] (the model is foyer's `Device::caps()`):
//!
//! - **The atomic unit** ([`Caps::atomic_blocks`]): a write of at most this many blocks is
//!   all-or-nothing across a crash. nvramdisk: 64. A plain device whose blocks are whole after a
//!   crash: 1. The raw backend, whose blocks a crash can tear: 0.
//! - **Durability** ([`Caps::durability`]): a completed write is durable when it returns
//!   ([`Durability::OnReturn`]: nvramdisk, the raw backend) or only once a later
//!   [`BlockDevice::flush`] returns ([`Durability::OnFlush`]: a write-back cache, a plain file).
//! - **The scattered atomic write** ([`Caps::scattered`]): [`BlockDevice::write_scattered`]
//!   writes up to the atomic unit of *distinct, not necessarily adjacent* blocks all-or-nothing
//!   (the SQLite journal store puts its directory block and a file's data blocks in one). A
//!   device without it says `scattered: false` and keeps the default method, which refuses.
//!
//! A write longer than the atomic unit is either refused (nvramdisk never splits a write, since
//! a split write is not atomic) or taken whole without the promise (the raw backend);
//! [`write_chunked`] writes any length as consecutive writes of at most the unit.

use crate::error::{Error, Result};

/// When a completed write survives a power cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Durable when the write (or discard) returns; `flush` has nothing left to make durable.
    OnReturn,
    /// Durable only once a later `flush` returns: a crash may lose writes that returned since
    /// the last flush (each still whole, up to the atomic unit).
    OnFlush,
}

/// What a device promises to the layer stacked on it (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// The atomic unit, in blocks: one write of `1..=atomic_blocks` blocks is all-or-nothing
    /// across a crash. 0: not even one block (a crash may leave a block half old, half new).
    pub atomic_blocks: u32,
    /// Whether [`BlockDevice::write_scattered`] writes up to `atomic_blocks` distinct blocks
    /// all-or-nothing. False: it refuses every call.
    pub scattered: bool,
    /// When a completed write is durable.
    pub durability: Durability,
}

impl Caps {
    /// Whether one write of `blocks` blocks is all-or-nothing (never for 0 blocks).
    pub fn is_atomic(&self, blocks: u64) -> bool {
        blocks >= 1 && blocks <= u64::from(self.atomic_blocks)
    }
}

pub trait BlockDevice: Send + Sync {
    /// Bytes per block, fixed at format time.
    fn block_bytes(&self) -> u32;
    /// Number of logical blocks.
    fn blocks(&self) -> u64;
    /// What the device promises: its atomic unit, when a write is durable, and whether it
    /// writes scattered blocks atomically. Constant for the device's lifetime.
    fn caps(&self) -> Caps;
    /// Read whole blocks starting at `lba` into `buf` (a multiple of the block size).
    fn read(&self, lba: u64, buf: &mut [u8]) -> Result<()>;
    /// Write whole blocks starting at `lba`: all-or-nothing when they are at most the atomic
    /// unit, durable as [`Caps::durability`] says. A device may refuse a write longer than its
    /// unit (nvramdisk does; see [`write_chunked`]).
    fn write(&self, lba: u64, data: &[u8]) -> Result<()>;
    /// Write `lbas.len()` distinct blocks (`data` holds them whole, in the same order), all or
    /// nothing, durable as [`Caps::durability`] says; at most [`Caps::atomic_blocks`] of them.
    ///
    /// Only devices whose caps say `scattered: true` implement it; the default refuses (an
    /// invalid request, exit code 2), so a layer that needs it checks the caps when it opens
    /// and never reaches this.
    fn write_scattered(&self, lbas: &[u64], data: &[u8]) -> Result<()> {
        debug_assert!(
            !self.caps().scattered,
            "a scattered device must implement it"
        );
        Err(Error::bad(format!(
            "a scattered write of {} blocks ({} bytes): this device has no scattered atomic \
             write",
            lbas.len(),
            data.len()
        )))
    }
    /// Forget `count` blocks starting at `lba`: they read as zeros afterwards.
    fn discard(&self, lba: u64, count: u64) -> Result<()>;
    /// Make everything written so far durable (a no-op for devices whose writes are durable
    /// when they return).
    fn flush(&self) -> Result<()>;
}

/// Write any number of whole blocks starting at `lba` as consecutive device writes of at most
/// the atomic unit (of one block when the device has none), in ascending order. Each write is
/// all-or-nothing as the device's caps promise; the whole is not: a crash of a device durable
/// on return leaves a prefix of the writes done.
/// The byte offset of `bytes` at block `lba` of a device of `blocks` blocks of `block_bytes`,
/// or a BadInput error naming what is wrong: not whole blocks, or past the end. Every device
/// checks a request with it before touching its media.
pub fn extent(blocks: u64, block_bytes: u32, lba: u64, bytes: usize) -> Result<u64> {
    let bb = u64::from(block_bytes);
    assert!(bb > 0, "a device has blocks of at least one byte");
    if !(bytes as u64).is_multiple_of(bb) {
        return Err(crate::error::Error::bad(format!(
            "{bytes} bytes is not whole {bb}-byte blocks"
        )));
    }
    let n = bytes as u64 / bb;
    if lba.checked_add(n).is_none_or(|e| e > blocks) {
        return Err(crate::error::Error::bad(format!(
            "blocks [{lba}, +{n}) past the end of the {blocks}-block device"
        )));
    }
    Ok(lba * bb)
}

pub fn write_chunked(dev: &dyn BlockDevice, lba: u64, data: &[u8]) -> Result<()> {
    let block_bytes = dev.block_bytes() as usize;
    assert!(block_bytes > 0, "a device has blocks of at least one byte");
    let chunk_blocks = dev.caps().atomic_blocks.max(1) as usize;
    let chunk_bytes = block_bytes * chunk_blocks;
    for (i, chunk) in data.chunks(chunk_bytes).enumerate() {
        dev.write(lba + (i * chunk_blocks) as u64, chunk)?;
    }
    Ok(())
}

/// Blocks in memory with the promises it is given: a device for simulations and tests, whose
/// bytes are kept only as long as the value lives (so its `flush` has nothing to do). Each call
/// takes one lock: a simulation drives it from one thread, where the lock is never contended.
pub struct MemDevice {
    block_bytes: u32,
    blocks: u64,
    caps: Caps,
    bytes: std::sync::Mutex<Vec<u8>>,
}

impl MemDevice {
    /// `blocks` zeroed blocks of `block_bytes`, promising `caps`.
    pub fn new(block_bytes: u32, blocks: u64, caps: Caps) -> Result<MemDevice> {
        assert!(block_bytes > 0, "a device has blocks of at least one byte");
        let len = blocks
            .checked_mul(u64::from(block_bytes))
            .and_then(|b| usize::try_from(b).ok())
            .ok_or_else(|| {
                Error::bad(format!(
                    "{blocks} blocks of {block_bytes} bytes: too large for memory"
                ))
            })?;
        Ok(MemDevice {
            block_bytes,
            blocks,
            caps,
            bytes: std::sync::Mutex::new(vec![0; len]),
        })
    }

    fn bytes(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        // A poisoned lock only means a caller panicked mid-copy: the bytes are still bytes.
        self.bytes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Write `data` at byte `off`, in place (no whole-block rule: a simulation writes one
    /// sector of a larger block this way), or a BadInput error if it reaches past the end.
    pub fn write_at(&self, off: u64, data: &[u8]) -> Result<()> {
        let mut b = self.bytes();
        let end = off.checked_add(data.len() as u64);
        let Some(end) = end.filter(|&e| e <= b.len() as u64) else {
            return Err(Error::bad(format!(
                "bytes [{off}, +{}) past the end of the {}-byte device",
                data.len(),
                b.len()
            )));
        };
        b[off as usize..end as usize].copy_from_slice(data);
        Ok(())
    }
}

impl BlockDevice for MemDevice {
    fn block_bytes(&self) -> u32 {
        self.block_bytes
    }
    fn blocks(&self) -> u64 {
        self.blocks
    }
    fn caps(&self) -> Caps {
        self.caps
    }
    fn read(&self, lba: u64, buf: &mut [u8]) -> Result<()> {
        let at = extent(self.blocks, self.block_bytes, lba, buf.len())? as usize;
        buf.copy_from_slice(&self.bytes()[at..at + buf.len()]);
        Ok(())
    }
    fn write(&self, lba: u64, data: &[u8]) -> Result<()> {
        let at = extent(self.blocks, self.block_bytes, lba, data.len())? as usize;
        self.bytes()[at..at + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn discard(&self, lba: u64, count: u64) -> Result<()> {
        let bytes = count
            .checked_mul(u64::from(self.block_bytes))
            .and_then(|b| usize::try_from(b).ok())
            .ok_or_else(|| Error::bad("discard too long"))?;
        let at = extent(self.blocks, self.block_bytes, lba, bytes)? as usize;
        self.bytes()[at..at + bytes].fill(0);
        Ok(())
    }
    fn flush(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_are_whole_blocks_inside_the_device() {
        assert_eq!(extent(10, 512, 3, 1024).unwrap(), 1536);
        assert_eq!(
            extent(10, 512, 10, 0).unwrap(),
            5120,
            "an empty request at the end"
        );
        assert!(extent(10, 512, 9, 1024)
            .unwrap_err()
            .to_string()
            .contains("past the end"));
        assert!(extent(10, 512, 0, 100)
            .unwrap_err()
            .to_string()
            .contains("whole 512-byte"));
        assert!(extent(10, 512, u64::MAX, 512).is_err(), "no overflow");
    }
    use std::sync::Mutex;

    /// Blocks in memory with the caps it is given; records each write as (first LBA, blocks).
    struct Memory {
        caps: Caps,
        bytes: Mutex<Vec<u8>>,
        writes: Mutex<Vec<(u64, u64)>>,
    }

    const BLOCK_BYTES: usize = 16;

    impl Memory {
        fn new(blocks: usize, caps: Caps) -> Memory {
            Memory {
                caps,
                bytes: Mutex::new(vec![0; blocks * BLOCK_BYTES]),
                writes: Mutex::new(Vec::new()),
            }
        }
    }

    impl BlockDevice for Memory {
        fn block_bytes(&self) -> u32 {
            BLOCK_BYTES as u32
        }
        fn blocks(&self) -> u64 {
            (self.bytes.lock().unwrap().len() / BLOCK_BYTES) as u64
        }
        fn caps(&self) -> Caps {
            self.caps
        }
        fn read(&self, lba: u64, buf: &mut [u8]) -> Result<()> {
            let at = lba as usize * BLOCK_BYTES;
            buf.copy_from_slice(&self.bytes.lock().unwrap()[at..at + buf.len()]);
            Ok(())
        }
        fn write(&self, lba: u64, data: &[u8]) -> Result<()> {
            let blocks = (data.len() / BLOCK_BYTES) as u64;
            if blocks > u64::from(self.caps.atomic_blocks.max(1)) {
                return Err(Error::bad("longer than the unit"));
            }
            self.writes.lock().unwrap().push((lba, blocks));
            let at = lba as usize * BLOCK_BYTES;
            self.bytes.lock().unwrap()[at..at + data.len()].copy_from_slice(data);
            Ok(())
        }
        fn discard(&self, _lba: u64, _count: u64) -> Result<()> {
            Ok(())
        }
        fn flush(&self) -> Result<()> {
            Ok(())
        }
    }

    fn caps(atomic_blocks: u32) -> Caps {
        Caps {
            atomic_blocks,
            scattered: false,
            durability: Durability::OnFlush,
        }
    }

    #[test]
    fn is_atomic_is_one_to_the_unit() {
        let c = caps(64);
        assert!(!c.is_atomic(0));
        assert!(c.is_atomic(1) && c.is_atomic(64));
        assert!(!c.is_atomic(65));
        assert!(caps(1).is_atomic(1) && !caps(1).is_atomic(2));
        assert!(
            !caps(0).is_atomic(1),
            "a unit of 0 promises not even one block"
        );
    }

    #[test]
    fn write_chunked_writes_units_in_order_and_lands_whole() {
        for (unit, expect) in [
            (4u32, vec![(2u64, 4u64), (6, 4), (10, 2)]),
            (1, (2..12).map(|l| (l, 1)).collect()),
            (0, (2..12).map(|l| (l, 1)).collect()),
        ] {
            let dev = Memory::new(16, caps(unit));
            let data: Vec<u8> = (0..10 * BLOCK_BYTES).map(|i| i as u8 ^ 0x5a).collect();
            write_chunked(&dev, 2, &data).unwrap();
            assert_eq!(*dev.writes.lock().unwrap(), expect, "unit {unit}");
            let mut back = vec![0u8; data.len()];
            dev.read(2, &mut back).unwrap();
            assert_eq!(back, data, "unit {unit}");
        }
        let dev = Memory::new(4, caps(4));
        write_chunked(&dev, 0, &[]).unwrap();
        assert!(dev.writes.lock().unwrap().is_empty(), "no data, no write");
    }

    #[test]
    fn the_default_scattered_write_refuses_and_writes_nothing() {
        let dev = Memory::new(4, caps(4));
        let e = dev
            .write_scattered(&[0, 2], &[1u8; 2 * BLOCK_BYTES])
            .unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("no scattered atomic write"), "{e}");
        assert!(dev.writes.lock().unwrap().is_empty());
        assert!(dev.bytes.lock().unwrap().iter().all(|&b| b == 0));
    }

    #[test]
    fn a_memory_device_keeps_its_blocks_and_refuses_past_its_end() {
        let dev = MemDevice::new(16, 4, caps(1)).unwrap();
        assert_eq!(
            (dev.blocks(), dev.block_bytes(), dev.caps()),
            (4, 16, caps(1))
        );
        dev.write(1, &[5; 32]).unwrap();
        dev.write_at(17, &[9; 2]).unwrap();
        let mut b = [0u8; 48];
        dev.read(0, &mut b).unwrap();
        assert_eq!(&b[..16], &[0; 16]);
        assert_eq!((b[16], b[17], b[18], b[19]), (5, 9, 9, 5));
        dev.discard(2, 1).unwrap();
        dev.read(0, &mut b).unwrap();
        assert_eq!(&b[32..48], &[0; 16], "a discarded block reads as zeros");
        assert_eq!(b[31], 5, "its neighbour is kept");
        assert!(dev.write(3, &[0; 32]).is_err());
        assert!(dev.write_at(63, &[0; 2]).is_err());
        assert!(dev.write_at(u64::MAX, &[0; 2]).is_err(), "no overflow");
        assert!(dev.discard(0, u64::MAX).is_err());
        assert!(MemDevice::new(16, u64::MAX, caps(1)).is_err());
    }
}
