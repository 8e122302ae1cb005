//! A byte-addressed file over a block device: the data path of `nvstack serve`.
//!
//! Reads and writes come at any offset and length; the device takes whole blocks. A write is
//! turned into exactly one device write of the blocks it touches (the partial first and last
//! blocks are read, patched and written back with it), never split into pieces. What that one
//! write promises is what the device's [`Caps`] promise:
//!
//! - A device whose atomic unit is at least 2 blocks (nvramdisk: 64) makes every file write
//!   atomic: after a crash the file holds all of it or none of it. A write touching more blocks
//!   than the unit is refused (a split write would not be atomic).
//! - A device with a smaller unit (the raw backend: 0) makes no atomicity promise; a file write
//!   still touches at most [`PLAIN_WRITE_BLOCKS`] blocks, one device write.
//!
//! Either way the write is durable when the device says: on return, or at the next
//! [`BlockFile::flush`] ([`Durability`]).
//!
//! How many blocks a write touches depends on its alignment as well as its length: `len` bytes
//! starting `head` bytes into a block touch `ceil((head + len) / block)` blocks, so a write of
//! exactly 64 blocks' worth of bytes at an unaligned offset touches 65. The longest write that
//! touches at most [`BlockFile::write_blocks_max`] blocks (`U`) *at every offset* is therefore
//! `U - 1` blocks ([`BlockFile::write_bytes_max`]; `head <= block - 1` gives
//! `head + len <= U x block - 1`). FUSE is told that `max_write` (and the kernel never sends a
//! longer write), so every write the kernel sends is one device write: 63 blocks for nvramdisk.
//!
//! Concurrent writers to the same block must not lose each other's bytes through the
//! read-patch-write of a partial block, so every write holds the stripe locks of the blocks it
//! touches (taken in ascending stripe order, so two writers can never wait on each other in a
//! cycle). Reads take no lock: nvramdisk returns each block whole, old or new.

use crossbeam_utils::CachePadded;
use nvstack_core::blockdev::{BlockDevice, Caps, Durability};
use nvstack_core::error::{Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Stripe locks for partial-block writes. A power of two; more stripes than FUSE threads times
/// blocks per write keeps unrelated writers apart.
const STRIPES: usize = 1024;

/// Blocks one device discard covers at most (one long discard holds every stripe's lock for
/// its duration, so it is bounded: 1 GiB at 512-byte blocks).
const DISCARD_BLOCKS_MAX: u64 = 1 << 21;
const _: () = assert!(DISCARD_BLOCKS_MAX >= STRIPES as u64);

/// Blocks one file write touches at most on a device whose atomic unit is under 2 blocks (no
/// atomicity to keep): the same 64 as nvramdisk's unit, so the FUSE `max_write` is 63 blocks
/// on every backend.
pub const PLAIN_WRITE_BLOCKS: u64 = 64;
const _: () = assert!(PLAIN_WRITE_BLOCKS >= 2 && PLAIN_WRITE_BLOCKS as usize <= STRIPES);

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
    /// What the device promises (read once: caps are constant).
    caps: Caps,
    /// Blocks one file write touches at most: the atomic unit, or [`PLAIN_WRITE_BLOCKS`].
    write_blocks_max: u64,
    /// Each lock on its own 128 bytes (two cache lines; the adjacent-line prefetcher moves
    /// lines in pairs): packed, several locks shared a line, and writers of unrelated blocks
    /// bounced it between cores (the false sharing nvramdisk's stripes were padded against).
    /// The cost: 128 KiB for the 1 024 locks, once per served file.
    stripes: Vec<CachePadded<Mutex<()>>>,
    pub counters: FileCounters,
}

impl BlockFile {
    /// The file over `dev`: its size is the device's, its promises the device's caps.
    pub fn new(dev: Arc<dyn BlockDevice>) -> BlockFile {
        let block_bytes = dev.block_bytes() as u64;
        assert!(block_bytes.is_power_of_two() && block_bytes >= 512);
        let size_bytes = dev
            .blocks()
            .checked_mul(block_bytes)
            .expect("device size fits in u64");
        let caps = dev.caps();
        let write_blocks_max = if caps.atomic_blocks >= 2 {
            u64::from(caps.atomic_blocks)
        } else {
            PLAIN_WRITE_BLOCKS
        };
        // One write's stripe locks must be distinct stripes (see lock_blocks).
        assert!(write_blocks_max >= 2 && write_blocks_max as usize <= STRIPES);
        BlockFile {
            dev,
            block_bytes,
            size_bytes,
            caps,
            write_blocks_max,
            stripes: (0..STRIPES)
                .map(|_| CachePadded::new(Mutex::new(())))
                .collect(),
            counters: FileCounters::default(),
        }
    }

    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    pub fn block_bytes(&self) -> u64 {
        self.block_bytes
    }

    /// The device's promises.
    pub fn caps(&self) -> Caps {
        self.caps
    }

    /// Whether every write the file takes is all-or-nothing (the device's atomic unit is at
    /// least 2 blocks, so it covers [`BlockFile::write_blocks_max`]).
    pub fn is_atomic(&self) -> bool {
        self.caps.is_atomic(self.write_blocks_max)
    }

    /// Whether a write is durable when it returns (else at the next [`BlockFile::flush`]).
    pub fn is_durable_on_return(&self) -> bool {
        self.caps.durability == Durability::OnReturn
    }

    /// Blocks one write may touch: the device's atomic unit when it is at least 2 blocks
    /// (64 for nvramdisk), else [`PLAIN_WRITE_BLOCKS`].
    pub fn write_blocks_max(&self) -> u64 {
        self.write_blocks_max
    }

    /// The longest whole-block length that is one device write whatever its alignment:
    /// [`BlockFile::write_blocks_max`] less one block (a write of that length touches at most
    /// `write_blocks_max` blocks at any offset; the exact bound is one byte more, and two
    /// bytes more touch one block too many at the last offset of a block). Atomic when
    /// [`BlockFile::is_atomic`]. This is the FUSE `max_write` of `nvstack serve`.
    pub fn write_bytes_max(&self) -> u64 {
        (self.write_blocks_max - 1) * self.block_bytes
    }

    /// How [`BlockFile::write_blocks_max`] is named in messages: "the atomic limit" when the
    /// file is atomic, "the write limit" otherwise.
    pub fn limit_name(&self) -> &'static str {
        if self.is_atomic() {
            "the atomic limit"
        } else {
            "the write limit"
        }
    }

    /// How many blocks `len` bytes at `offset` touch (0 for an empty range).
    pub fn blocks_touched(&self, offset: u64, len: u64) -> u64 {
        if len == 0 {
            return 0;
        }
        let bb = self.block_bytes;
        (offset.saturating_add(len) - 1) / bb - offset / bb + 1
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

    /// Write `data` at `offset` as one device write (atomic and durable as the device's caps
    /// say; see the module comment). A write that touches more than
    /// [`BlockFile::write_blocks_max`] blocks is refused (splitting it would not be one write),
    /// as is writing past the end of the file (the file has the device's fixed size) or a write
    /// that starts inside and runs past it.
    pub fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        offset
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
        let blocks = self.blocks_touched(offset, data.len() as u64);
        if blocks > self.write_blocks_max {
            return Err(Error::bad(format!(
                "write of {} bytes at offset {offset} touches {blocks} blocks, more than the \
                 {} of one {}write (at most {} bytes at any offset)",
                data.len(),
                self.write_blocks_max,
                if self.is_atomic() { "atomic " } else { "" },
                self.write_bytes_max()
            )));
        }
        self.counters.writes.fetch_add(1, Ordering::Relaxed);
        self.counters
            .write_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        self.write_piece(offset, data)
    }

    /// One device write covering `[offset, offset + data.len())`.
    fn write_piece(&self, offset: u64, data: &[u8]) -> Result<()> {
        let bb = self.block_bytes;
        let first = offset / bb;
        let last = (offset + data.len() as u64 - 1) / bb;
        let blocks = last - first + 1;
        assert!(
            blocks <= self.write_blocks_max,
            "one device write of {blocks} blocks"
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
        // Discards under the stripe locks of their blocks, so a concurrent partial write cannot
        // resurrect a block mid-discard: at most write_blocks_max blocks at a time, or, for a
        // long discard (mkfs discards the whole device), up to DISCARD_BLOCKS_MAX at a time
        // under every stripe's lock. Why long ones: the device may then take its own fast path
        // (the write cache discards uncached blocks on its backing device directly).
        let mut b = first_whole;
        while b < end_whole {
            let left = end_whole - b;
            let (n, locked) = if left >= STRIPES as u64 {
                (left.min(DISCARD_BLOCKS_MAX), STRIPES as u64)
            } else {
                let n = left.min(self.write_blocks_max);
                (n, n)
            };
            let _locks = self.lock_blocks(b, locked);
            self.dev.discard(b, n)?;
            b += n;
        }
        if end > end_whole * bb {
            self.write_at(end_whole * bb, &vec![0u8; (end - end_whole * bb) as usize])?;
        }
        Ok(())
    }

    /// Make everything written durable (already true for a device durable on return, such as
    /// nvramdisk; the device decides).
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
    use nvstack_nvramdisk::ATOMIC_BLOCKS_MAX;
    use nvstack_nvramdisk::{FormatOptions, NvramDisk, OpenOptions};
    use nvstack_pmem::MmapRegion;
    use nvstack_test_support::device::TestDevice;
    use proptest::prelude::*;

    fn file(blocks_bytes: u32) -> BlockFile {
        let size = 8 << 20;
        let r = Arc::new(MmapRegion::anonymous(size).unwrap());
        let fo = FormatOptions {
            block_bytes: blocks_bytes,
            lanes: 2,
            ..Default::default()
        };
        nvstack_nvramdisk::format_region(&*r, &fo).unwrap();
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

    /// No two stripe locks share a 128-byte block (a pair of cache lines: the adjacent-line
    /// prefetcher moves lines in pairs), so writers of unrelated blocks never bounce a line.
    #[test]
    fn stripe_locks_never_share_a_pair_of_cache_lines() {
        let f = file(4096);
        let addr = |i: usize| std::ptr::from_ref(&f.stripes[i]).addr();
        for i in 0..STRIPES {
            assert_eq!(addr(i) % 128, 0, "stripe {i} is not 128-byte aligned");
            if i > 0 {
                assert!(
                    addr(i) - addr(i - 1) >= 128,
                    "stripes {} and {i} are {} bytes apart",
                    i - 1,
                    addr(i) - addr(i - 1)
                );
            }
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

    fn counting_file(block_bytes: u32) -> (BlockFile, Arc<TestDevice>) {
        let f = file(block_bytes);
        let c = Arc::new(TestDevice::new(f.dev.clone()));
        (BlockFile::new(c.clone()), c)
    }

    /// The FUSE `max_write` (`write_bytes_max`) at every alignment within a block,
    /// 4093 included (the offset at which a 64-block write would touch 65 blocks), is exactly
    /// one device write of at most 64 blocks, and lands whole.
    #[test]
    fn a_maximal_write_at_any_alignment_is_one_device_write() {
        for bb in [4096u32, 512] {
            let (f, dev) = counting_file(bb);
            let bb = bb as u64;
            let max = f.write_bytes_max();
            assert_eq!(max, (ATOMIC_BLOCKS_MAX as u64 - 1) * bb);
            assert!(f.is_atomic() && f.is_durable_on_return());
            let mut heads: Vec<u64> = vec![0, 1, bb / 2, bb - 3, bb - 1];
            if bb == 4096 {
                heads.push(4093);
            }
            for (i, head) in heads.into_iter().enumerate() {
                let offset = (3 + i as u64 * 100) * bb + head;
                let data: Vec<u8> = (0..max).map(|k| (k % 249) as u8 ^ i as u8).collect();
                dev.writes().clear();
                f.write_at(offset, &data).unwrap();
                let writes = dev.writes().clone();
                assert_eq!(
                    writes.len(),
                    1,
                    "block {bb}, head {head}: {} bytes became device writes {writes:?}",
                    data.len()
                );
                let (lba, n) = writes[0];
                assert_eq!(lba, offset / bb);
                assert!(n <= ATOMIC_BLOCKS_MAX as u64, "{n} blocks in one write");
                assert_eq!(n, f.blocks_touched(offset, max));
                let mut back = vec![0u8; data.len()];
                f.read_at(offset, &mut back).unwrap();
                assert!(back == data, "block {bb}, head {head}: contents differ");
            }
        }
    }

    /// A write touching 65 blocks (64 blocks' worth at an unaligned offset, what a 256 KiB
    /// max_write let the kernel send; one byte past an aligned 64-block span; the 63-block
    /// max_write plus two bytes at the last offset of a block) is refused, with no device
    /// write: splitting it would not be atomic.
    #[test]
    fn a_write_touching_more_than_64_blocks_is_refused_not_split() {
        let (f, dev) = counting_file(4096);
        let bb = f.block_bytes();
        let span = ATOMIC_BLOCKS_MAX as u64 * bb;
        let before = vec![0x77u8; (span + 2 * bb) as usize];
        f.write_at(0, &before[..span as usize]).unwrap();
        f.write_at(span, &before[span as usize..]).unwrap();
        dev.writes().clear();
        assert_eq!(f.blocks_touched(4093, span), 65);
        let max = f.write_bytes_max();
        for (offset, len) in [(4093, span), (0, span + 1), (bb - 1, max + 2), (1, 300_000)] {
            let e = f.write_at(offset, &vec![1u8; len as usize]).unwrap_err();
            assert!(e.to_string().contains("atomic"), "{e}");
        }
        assert!(
            dev.writes().is_empty(),
            "a refused write reached the device"
        );
        let mut back = vec![0u8; before.len()];
        f.read_at(0, &mut back).unwrap();
        assert!(back == before, "a refused write changed the file");
        // A whole aligned 64-block write is still one atomic write.
        f.write_at(0, &vec![2u8; span as usize]).unwrap();
        assert_eq!(*dev.writes(), vec![(0, 64)]);
    }

    /// Over a device with no atomic unit (the raw backend) the file makes no atomicity
    /// promise, but one write still touches at most 64 blocks (a FUSE `max_write` of 63): a
    /// maximal unaligned write is one device write, a longer one is refused, untouched.
    #[test]
    fn a_plain_device_takes_64_block_writes_without_the_atomic_promise() {
        let r = Arc::new(MmapRegion::anonymous(4 << 20).unwrap());
        let raw = Arc::new(nvstack_stack::raw::RawDevice::new(r).unwrap());
        let dev = Arc::new(TestDevice::new(raw));
        let f = BlockFile::new(dev.clone());
        let bb = f.block_bytes();
        assert!(!f.is_atomic() && f.is_durable_on_return());
        assert_eq!(f.write_blocks_max(), PLAIN_WRITE_BLOCKS);
        assert_eq!(f.write_bytes_max(), 63 * bb);
        assert_eq!(f.limit_name(), "the write limit");
        let data: Vec<u8> = (0..f.write_bytes_max()).map(|k| (k % 241) as u8).collect();
        f.write_at(bb + 4093, &data).unwrap();
        assert_eq!(*dev.writes(), vec![(1, 64)]);
        let mut back = vec![0u8; data.len()];
        f.read_at(bb + 4093, &mut back).unwrap();
        assert!(back == data, "contents differ");
        let e = f.write_at(4093, &vec![1u8; 64 * bb as usize]).unwrap_err();
        assert!(
            e.to_string().contains("more than the 64 of one write"),
            "{e}"
        );
        assert_eq!(dev.writes().len(), 1, "a refused write reached the device");
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
