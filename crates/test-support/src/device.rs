//! A counting and failing `BlockDevice` for tests: it wraps a real device, records every write
//! it is asked for, and can fail every n-th one before it reaches the device. The export's
//! tests count the device writes a file write becomes; the SQLite store's tests check that a
//! failed device write changes nothing.

use nvstack_core::blockdev::{BlockDevice, Caps};
use nvstack_core::error::{Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The message of an injected failure (an environment error, exit code 3).
pub const INJECTED: &str = "injected device failure";

/// A device that passes everything to `inner` (its caps included) and records each write.
pub struct TestDevice {
    inner: Arc<dyn BlockDevice>,
    /// Contiguous writes that reached `inner`: (first LBA, blocks).
    writes: Mutex<Vec<(u64, u64)>>,
    /// Scattered writes that reached `inner`: their LBAs.
    scattered: Mutex<Vec<Vec<u64>>>,
    /// Writes asked for (contiguous and scattered, failed ones included).
    asked: AtomicU64,
    /// Fail the n-th, 2n-th, ... write asked for; 0: never.
    fail_every: u64,
}

impl TestDevice {
    /// Records every write and fails none.
    pub fn new(inner: Arc<dyn BlockDevice>) -> TestDevice {
        TestDevice::failing_every(inner, 0)
    }

    /// Records every write and fails every `fail_every`-th one asked for (contiguous and
    /// scattered counted together), before it touches `inner`; 0 fails none.
    pub fn failing_every(inner: Arc<dyn BlockDevice>, fail_every: u64) -> TestDevice {
        TestDevice {
            inner,
            writes: Mutex::new(Vec::new()),
            scattered: Mutex::new(Vec::new()),
            asked: AtomicU64::new(0),
            fail_every,
        }
    }

    /// The contiguous writes that reached the device, as (first LBA, blocks), oldest first.
    pub fn writes(&self) -> MutexGuard<'_, Vec<(u64, u64)>> {
        self.writes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The scattered writes that reached the device, as their LBAs, oldest first.
    pub fn scattered_writes(&self) -> MutexGuard<'_, Vec<Vec<u64>>> {
        self.scattered.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Count the write asked for; `Err` when it is one to fail.
    fn ask(&self) -> Result<()> {
        let n = self.asked.fetch_add(1, Ordering::Relaxed) + 1;
        if self.fail_every != 0 && n.is_multiple_of(self.fail_every) {
            return Err(Error::env(INJECTED));
        }
        Ok(())
    }

    fn blocks_in(&self, data: &[u8]) -> u64 {
        data.len() as u64 / u64::from(self.inner.block_bytes())
    }
}

impl BlockDevice for TestDevice {
    fn block_bytes(&self) -> u32 {
        self.inner.block_bytes()
    }
    fn blocks(&self) -> u64 {
        self.inner.blocks()
    }
    fn caps(&self) -> Caps {
        self.inner.caps()
    }
    fn read(&self, lba: u64, buf: &mut [u8]) -> Result<()> {
        self.inner.read(lba, buf)
    }
    fn write(&self, lba: u64, data: &[u8]) -> Result<()> {
        self.ask()?;
        self.writes().push((lba, self.blocks_in(data)));
        self.inner.write(lba, data)
    }
    fn write_scattered(&self, lbas: &[u64], data: &[u8]) -> Result<()> {
        self.ask()?;
        assert_eq!(self.blocks_in(data), lbas.len() as u64, "one block per LBA");
        self.scattered_writes().push(lbas.to_vec());
        self.inner.write_scattered(lbas, data)
    }
    fn discard(&self, lba: u64, count: u64) -> Result<()> {
        self.inner.discard(lba, count)
    }
    fn flush(&self) -> Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvstack_core::blockdev::Durability;

    /// Four blocks of 8 bytes in memory, atomic up to 2 blocks, scattered.
    struct Memory(Mutex<[u8; 32]>);

    impl BlockDevice for Memory {
        fn block_bytes(&self) -> u32 {
            8
        }
        fn blocks(&self) -> u64 {
            4
        }
        fn caps(&self) -> Caps {
            Caps {
                atomic_blocks: 2,
                scattered: true,
                durability: Durability::OnFlush,
            }
        }
        fn read(&self, lba: u64, buf: &mut [u8]) -> Result<()> {
            let at = lba as usize * 8;
            buf.copy_from_slice(&self.0.lock().unwrap()[at..at + buf.len()]);
            Ok(())
        }
        fn write(&self, lba: u64, data: &[u8]) -> Result<()> {
            let at = lba as usize * 8;
            self.0.lock().unwrap()[at..at + data.len()].copy_from_slice(data);
            Ok(())
        }
        fn write_scattered(&self, lbas: &[u64], data: &[u8]) -> Result<()> {
            for (lba, block) in lbas.iter().zip(data.chunks(8)) {
                self.write(*lba, block)?;
            }
            Ok(())
        }
        fn discard(&self, _lba: u64, _count: u64) -> Result<()> {
            Ok(())
        }
        fn flush(&self) -> Result<()> {
            Ok(())
        }
    }

    #[test]
    fn records_writes_passes_caps_and_fails_every_nth() {
        let inner: Arc<dyn BlockDevice> = Arc::new(Memory(Mutex::new([0; 32])));
        let dev = TestDevice::failing_every(inner.clone(), 3);
        assert_eq!(dev.caps(), inner.caps());
        dev.write(1, &[1; 16]).unwrap();
        dev.write_scattered(&[0, 3], &[2; 16]).unwrap();
        let e = dev.write(2, &[3; 8]).unwrap_err();
        assert!(
            e.to_string().contains(INJECTED) && e.exit_code() == 3,
            "{e}"
        );
        dev.write(2, &[4; 8]).unwrap();
        assert_eq!(*dev.writes(), vec![(1, 2), (2, 1)]);
        assert_eq!(*dev.scattered_writes(), vec![vec![0, 3]]);
        let mut back = [0u8; 32];
        dev.read(0, &mut back).unwrap();
        let want: Vec<u8> = [[2u8; 8], [1; 8], [4; 8], [2; 8]].concat();
        assert_eq!(back.to_vec(), want, "the failed write reached nothing");
        let never = TestDevice::new(inner);
        for lba in 0..4 {
            never.write(lba, &[9; 8]).unwrap();
        }
        assert_eq!(never.writes().len(), 4);
    }
}
