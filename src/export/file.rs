//! A byte-addressed file over a block device: the data path of `nvstack serve`.
//!
//! Reads and writes come at any offset and length; the device takes whole blocks. A write is
//! turned into one device write of the blocks it touches (the partial first and last blocks
//! are read, patched and written back with it), so a write that touches at most
//! [`ATOMIC_BLOCKS_MAX`] blocks is atomic and durable when it returns: after a crash the file
//! holds all of it or none of it. FUSE is told to send writes of at most that many blocks, so
//! every write the kernel sends is atomic. A longer write (only possible when a caller uses
//! this type directly) is split into atomic pieces in ascending order.
//!
//! Concurrent writers to the same block must not lose each other's bytes through the
//! read-patch-write of a partial block, so every write holds the stripe locks of the blocks it
//! touches (taken in ascending stripe order, so two writers can never wait on each other in a
//! cycle). Reads take no lock: nvramdisk returns each block whole, old or new.

use crate::blockdev::BlockDevice;
use crate::error::{Error, Result};
use crate::nvramdisk::layout::ATOMIC_BLOCKS_MAX;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Stripe locks for partial-block writes. A power of two; more stripes than FUSE threads times
/// blocks per write keeps unrelated writers apart.
const STRIPES: usize = 1024;

/// Counters a daemon reports (and the kill tests read).
#[derive(Debug, Default)]
pub struct FileCounters {
    pub reads: AtomicU64,
    pub writes: AtomicU64,
    pub write_bytes: AtomicU64,
    /// Writes whose blocks were only partly covered (read-modify-write).
    pub partial_writes: AtomicU64,
    pub discards: AtomicU64,
    pub flushes: AtomicU64,
}

pub struct BlockFile {
    dev: Arc<dyn BlockDevice>,
    block_bytes: u64,
    size_bytes: u64,
    stripes: Vec<Mutex<()>>,
    pub counters: FileCounters,
}

impl BlockFile {
    pub fn new(dev: Arc<dyn BlockDevice>) -> BlockFile {
        let block_bytes = dev.block_bytes() as u64;
        assert!(block_bytes.is_power_of_two() && block_bytes >= 512);
        let size_bytes = dev
            .blocks()
            .checked_mul(block_bytes)
            .expect("device size fits in u64");
        BlockFile {
            dev,
            block_bytes,
            size_bytes,
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            counters: FileCounters::default(),
        }
    }

    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    pub fn block_bytes(&self) -> u64 {
        self.block_bytes
    }

    /// The largest write that is one atomic device write whatever its alignment.
    pub fn atomic_write_bytes_max(&self) -> u64 {
        ATOMIC_BLOCKS_MAX as u64 * self.block_bytes
    }

    /// Read up to `buf.len()` bytes at `offset`; returns the bytes read (short at the end of
    /// the file, 0 at or past it).
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        if offset >= self.size_bytes || buf.is_empty() {
            return Ok(0);
        }
        let n = (buf.len() as u64).min(self.size_bytes - offset) as usize;
        let buf = &mut buf[..n];
        self.counters.reads.fetch_add(1, Ordering::Relaxed);
        let bb = self.block_bytes;
        let first = offset / bb;
        let last = (offset + n as u64 - 1) / bb;
        let head = (offset % bb) as usize;
        if head == 0 && (n as u64).is_multiple_of(bb) {
            // Aligned: straight into the caller's buffer.
            self.dev.read(first, buf)?;
            return Ok(n);
        }
        let mut tmp = vec![0u8; ((last - first + 1) * bb) as usize];
        self.dev.read(first, &mut tmp)?;
        buf.copy_from_slice(&tmp[head..head + n]);
        Ok(n)
    }

    /// Write `data` at `offset`: atomic and durable on return when it touches at most
    /// [`ATOMIC_BLOCKS_MAX`] blocks. Writing past the end of the file is refused (the file has
    /// the device's fixed size), as is a write that starts inside and runs past it.
    pub fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= self.size_bytes)
            .ok_or_else(|| {
                Error::bad(format!(
                    "write of {} bytes at offset {offset} runs past the end of the {}-byte device",
                    data.len(),
                    self.size_bytes
                ))
            })?;
        if data.is_empty() {
            return Ok(());
        }
        self.counters.writes.fetch_add(1, Ordering::Relaxed);
        self.counters
            .write_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        let bb = self.block_bytes;
        // Pieces of at most ATOMIC_BLOCKS_MAX blocks, cut at block boundaries.
        let piece_bytes = self.atomic_write_bytes_max();
        let mut at = offset;
        while at < end {
            let piece_end = ((at / bb) * bb + piece_bytes).min(end);
            let lo = (at - offset) as usize;
            let hi = (piece_end - offset) as usize;
            self.write_piece(at, &data[lo..hi])?;
            at = piece_end;
        }
        Ok(())
    }

    /// One atomic device write covering `[offset, offset + data.len())`.
    fn write_piece(&self, offset: u64, data: &[u8]) -> Result<()> {
        let bb = self.block_bytes;
        let first = offset / bb;
        let last = (offset + data.len() as u64 - 1) / bb;
        let blocks = last - first + 1;
        assert!(
            blocks <= ATOMIC_BLOCKS_MAX as u64,
            "piece of {blocks} blocks"
        );
        let _locks = self.lock_blocks(first, blocks);
        let head = (offset % bb) as usize;
        let aligned = head == 0 && (data.len() as u64).is_multiple_of(bb);
        if aligned {
            return self.dev.write(first, data);
        }
        self.counters.partial_writes.fetch_add(1, Ordering::Relaxed);
        let mut tmp = vec![0u8; (blocks * bb) as usize];
        // Only the first and last blocks need their old contents.
        self.dev.read(first, &mut tmp[..bb as usize])?;
        if blocks > 1 {
            let off = ((blocks - 1) * bb) as usize;
            self.dev.read(last, &mut tmp[off..])?;
        }
        tmp[head..head + data.len()].copy_from_slice(data);
        self.dev.write(first, &tmp)
    }

    /// Make `[offset, offset + len)` read as zeros: whole blocks are discarded (their pages
    /// return to the free pool), the partial edges are written with zeros. Past the end of
    /// the file is refused.
    pub fn punch_hole(&self, offset: u64, len: u64) -> Result<()> {
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= self.size_bytes)
            .ok_or_else(|| {
                Error::bad(format!(
                    "hole of {len} bytes at offset {offset} runs past the end of the {}-byte device",
                    self.size_bytes
                ))
            })?;
        if len == 0 {
            return Ok(());
        }
        self.counters.discards.fetch_add(1, Ordering::Relaxed);
        let bb = self.block_bytes;
        let first_whole = offset.div_ceil(bb);
        let end_whole = end / bb;
        if first_whole >= end_whole {
            // Inside one or two blocks: zeros.
            return self.write_at(offset, &vec![0u8; len as usize]);
        }
        if offset < first_whole * bb {
            self.write_at(offset, &vec![0u8; (first_whole * bb - offset) as usize])?;
        }
        // Discards of at most STRIPES blocks at a time under their stripe locks, so a
        // concurrent partial write cannot resurrect a block mid-discard.
        let mut b = first_whole;
        while b < end_whole {
            let n = (end_whole - b).min(ATOMIC_BLOCKS_MAX as u64);
            let _locks = self.lock_blocks(b, n);
            self.dev.discard(b, n)?;
            b += n;
        }
        if end > end_whole * bb {
            self.write_at(end_whole * bb, &vec![0u8; (end - end_whole * bb) as usize])?;
        }
        Ok(())
    }

    /// Make everything written durable (for nvramdisk already true; the device decides).
    pub fn flush(&self) -> Result<()> {
        self.counters.flushes.fetch_add(1, Ordering::Relaxed);
        self.dev.flush()
    }

    fn lock_blocks(&self, first: u64, blocks: u64) -> Vec<MutexGuard<'_, ()>> {
        assert!(blocks as usize <= STRIPES);
        let mut idx: Vec<usize> = (first..first + blocks)
            .map(|b| (b as usize) & (STRIPES - 1))
            .collect();
        idx.sort_unstable();
        idx.dedup();
        idx.into_iter()
            .map(|i| self.stripes[i].lock().unwrap_or_else(|e| e.into_inner()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvramdisk::disk::{FormatOptions, NvramDisk, OpenOptions};
    use crate::pmem::MmapRegion;
    use proptest::prelude::*;

    fn file(blocks_bytes: u32) -> BlockFile {
        let size = 8 << 20;
        let r = Arc::new(MmapRegion::anonymous(size).unwrap());
        let fo = FormatOptions {
            block_bytes: blocks_bytes,
            lanes: 2,
            ..Default::default()
        };
        crate::nvramdisk::disk::format_region(&*r, &fo).unwrap();
        let d = NvramDisk::open(r, OpenOptions::default()).unwrap();
        BlockFile::new(Arc::new(d))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Any sequence of unaligned writes, holes and reads matches a plain byte array.
        #[test]
        fn matches_a_byte_array(ops in proptest::collection::vec(
            (0u8..3, 0u64..(1 << 20), 1usize..20_000, any::<u8>()), 1..40)) {
            let f = file(4096);
            let size = f.size_bytes();
            let mut model = vec![0u8; size as usize];
            for (kind, off, len, fill) in ops {
                let off = off % size;
                let len = (len as u64).min(size - off) as usize;
                match kind {
                    0 => {
                        let data: Vec<u8> = (0..len).map(|i| fill.wrapping_add(i as u8)).collect();
                        f.write_at(off, &data).unwrap();
                        model[off as usize..off as usize + len].copy_from_slice(&data);
                    }
                    1 => {
                        f.punch_hole(off, len as u64).unwrap();
                        model[off as usize..off as usize + len].fill(0);
                    }
                    _ => {
                        let mut buf = vec![0u8; len];
                        let n = f.read_at(off, &mut buf).unwrap();
                        prop_assert_eq!(n, len);
                        prop_assert_eq!(&buf[..], &model[off as usize..off as usize + len]);
                    }
                }
            }
            let mut all = vec![0u8; size as usize];
            prop_assert_eq!(f.read_at(0, &mut all).unwrap(), size as usize);
            prop_assert!(all == model, "final contents differ");
        }
    }

    #[test]
    fn refuses_past_the_end_and_reads_short() {
        let f = file(512);
        let size = f.size_bytes();
        assert!(f.write_at(size - 1, &[1, 2]).is_err());
        assert!(f.write_at(u64::MAX, &[1]).is_err());
        assert!(f.punch_hole(size, 1).is_err());
        f.write_at(size - 1, &[7]).unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(f.read_at(size - 1, &mut buf).unwrap(), 1);
        assert_eq!(buf[0], 7);
        assert_eq!(f.read_at(size, &mut buf).unwrap(), 0);
    }

    #[test]
    fn long_writes_are_split_into_atomic_pieces() {
        let f = file(512);
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        f.write_at(100, &data).unwrap();
        let mut back = vec![0u8; data.len()];
        f.read_at(100, &mut back).unwrap();
        assert!(back == data);
    }

    #[test]
    fn concurrent_partial_writes_to_one_block_lose_nothing() {
        let f = Arc::new(file(4096));
        // Eight threads each own every eighth byte of the first two blocks.
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let f = f.clone();
                s.spawn(move || {
                    for round in 0..200u64 {
                        for i in (t..8192).step_by(8 * 97) {
                            f.write_at(i, &[(round as u8) ^ (t as u8 + 1)]).unwrap();
                        }
                    }
                });
            }
        });
        let mut buf = vec![0u8; 8192];
        f.read_at(0, &mut buf).unwrap();
        for t in 0..8u64 {
            for i in (t..8192).step_by(8 * 97) {
                assert_eq!(buf[i as usize], 199u8 ^ (t as u8 + 1), "byte {i} lost");
            }
        }
    }
}
