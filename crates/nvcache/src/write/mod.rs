//! The write cache (NVFAT, seed 004, with dm-writecache's controls): dirty sectors held in
//! NVRAM, looked up by a hash index of block numbers, destaged to the backing device by a
//! policy (least recently written by default). An admitted write is durable and atomic when it
//! returns; a write the admission filter passes by goes to the backing device and is durable
//! after the next flush.
//!
//! Protocol (docs/format.md section 12, format version 2), `s` the write's sequence number:
//! - Write of one admitted block: its data and entry {block, s, CRC-32C over entry and data}
//!   go to a free slot (never in place: a torn sector is never the only copy); the clears of
//!   the copies the previous write replaced are stored; ONE fence. The copy it replaces is
//!   freed at once (reusable by the next write, which overwrites or clears its entry before
//!   its own fence). Recovery tells a cut write from a whole one by the CRC, and of a block's
//!   whole copies keeps the highest sequence number.
//! - Write of n > 1 blocks: the same stores (entries marked multi), fence, both commit words
//!   := s, fence: a crash before the commit word keeps none of them.
//! - Destage of a set of blocks: the outstanding clears stored and fenced first (an older
//!   copy's clear is durable before the newer copy's); write each to the backing device; flush
//!   it; clear the slots (reusable at once).
//! - A write to a block the filter passes by: if the block is cached, it is written into the
//!   cache as an admitted write (written through, never left stale); else to the backing
//!   device, durable after the next flush.
//! - Recovery: write/recover.rs's table; then a fence.

pub mod admit;
pub mod bugs;
pub(crate) mod destage;
pub mod entry;
pub mod format;
pub mod image;
pub mod inspect;
pub(crate) mod recover;
pub mod serve;

use crate::common::format::{encode_commit, LBA_MAX, SEQ_MAX};
use crate::write::bugs::Bug;
use crate::write::entry::{crc_of, Entry};
use crate::write::format::{
    Admit, Counters, DestagePolicy, Layout, Settings, Superblock, COMMIT_OFF, COUNTERS_BYTES,
    COUNTERS_OFF,
};
use nvstack_core::blockdev::{BlockDevice, Caps, Durability};
use nvstack_core::error::{Error, Result, FIELD};
use nvstack_pmem::Region;
use nvstack_policy::{Policy, PolicyKind, Touch, NEVER};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

/// The backing device's block size the label needs (one block at its end).
pub const BACKING_BLOCK_BYTES: u32 = 4096;

/// Most blocks of one write (`unit_blocks` is at most this).
const UNIT_MAX: usize = 64;

/// A cached block: the one slot holding its newest copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cached {
    pub lba: u64,
    pub tombstone: bool,
    /// The entry's sequence number, multi-block mark and CRC-32C (a read checks the data
    /// against it).
    pub seq: u64,
    pub multi: bool,
    pub crc: u32,
    /// When it was written (max-age counts from it; the open's time when max-age is off, so
    /// that a write reads no clock).
    pub written_at: Instant,
}

impl Cached {
    pub(crate) fn entry(&self) -> Entry {
        Entry {
            lba: self.lba,
            seq: self.seq,
            tombstone: self.tombstone,
            multi: self.multi,
        }
    }
}

/// The index's hasher: block numbers are not chosen to collide (the cache's user is the
/// machine's own file system), so one multiply and a fold replace SipHash's rounds, which
/// measured 8 % of a 512 B write.
#[derive(Clone, Copy, Default)]
pub(crate) struct LbaHasher(u64);

/// Contiguous blocks whose index entries sit together (a power of two).
const LBA_RUN: u64 = 16;

impl Hasher for LbaHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    /// Runs of `LBA_RUN` contiguous blocks hash to adjacent buckets (their entries share
    /// cache lines: a sequential write or destage misses once per run, not once per block),
    /// runs are scattered by the multiply, and each block of a run gets its own tag bits (the
    /// top seven, which the table compares first).
    fn write_u64(&mut self, n: u64) {
        let run = (self.0 ^ (n / LBA_RUN)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let run = run ^ (run >> 29);
        let within = n % LBA_RUN;
        self.0 = ((run & !(LBA_RUN - 1)) | within) ^ (within << 57);
    }
}

/// Block number -> the slot of its newest copy.
pub(crate) type Index = HashMap<u64, u32, BuildHasherDefault<LbaHasher>>;

/// Least recently written, kept lazily: the write order is a queue of (slot, stamp) and a
/// slot's current stamp (0: not in the order). Leaving the order stores the stamp alone, and a
/// write appends, so neither reads a line of a random slot (the linked list of
/// `nvstack_policy::Lrw` read three on every overwrite: cache misses on the write's path after
/// its fence); entries whose stamp is no longer current are skipped when a victim is sought.
/// The same order as `Lrw`'s.
pub(crate) struct LazyLrw {
    queue: std::collections::VecDeque<(u32, u64)>,
    stamp: Vec<u64>,
    next: u64,
}

impl LazyLrw {
    pub(crate) fn new(slots: u32) -> LazyLrw {
        LazyLrw {
            queue: std::collections::VecDeque::new(),
            stamp: vec![0; slots as usize],
            next: 0,
        }
    }

    fn written(&mut self, slot: u32) {
        self.next += 1;
        self.stamp[slot as usize] = self.next;
        self.queue.push_back((slot, self.next));
        // At most one live entry per slot: compacting when the queue holds twice the slots
        // costs O(1) a write, amortized.
        if self.queue.len() > 2 * self.stamp.len() {
            let stamp = &self.stamp;
            self.queue.retain(|&(s, t)| stamp[s as usize] == t);
        }
    }

    /// A store alone (no load of the slot's line).
    fn remove(&mut self, slot: u32) {
        self.stamp[slot as usize] = 0;
    }

    fn victim(&mut self) -> Option<u32> {
        while let Some(&(slot, t)) = self.queue.front() {
            if self.stamp[slot as usize] == t {
                return Some(slot);
            }
            self.queue.pop_front();
        }
        None
    }
}

/// The destage order: LRW (writes only) or one of the replacement policies (reads count).
pub(crate) enum Order {
    Lrw(LazyLrw),
    Other(Policy, u64),
}

impl Order {
    pub(crate) fn new(p: DestagePolicy, seed: u64, slots: u32) -> Order {
        let kind = match p {
            DestagePolicy::Lrw => return Order::Lrw(LazyLrw::new(slots)),
            DestagePolicy::Lru => PolicyKind::Lru,
            DestagePolicy::Clock => PolicyKind::Clock,
            DestagePolicy::Random => PolicyKind::Random,
        };
        Order::Other(Policy::new(kind, seed), 0)
    }

    fn next(touches: &mut u64) -> Touch {
        *touches += 1;
        Touch {
            seq: *touches,
            next_write: NEVER,
        }
    }

    pub(crate) fn inserted(&mut self, slot: u32) {
        match self {
            Order::Lrw(l) => l.written(slot),
            Order::Other(p, t) => p.insert(slot, Order::next(t)),
        }
    }

    fn read(&mut self, slot: u32) {
        if let Order::Other(p, t) = self {
            p.touch(slot, Order::next(t));
        }
    }

    pub(crate) fn remove(&mut self, slot: u32) {
        match self {
            Order::Lrw(l) => l.remove(slot),
            Order::Other(p, _) => p.remove(slot),
        }
    }

    pub(crate) fn victim(&mut self) -> Option<u32> {
        match self {
            Order::Lrw(l) => l.victim(),
            Order::Other(p, _) => p.victim(),
        }
    }
}

/// The cache's state, locked.
pub(crate) type Guard<'a> = MutexGuard<'a, WState>;

pub(crate) struct WState {
    /// The last write's sequence number.
    pub seq: u64,
    pub index: Index,
    pub slots: Vec<Option<Cached>>,
    pub free: Vec<u32>,
    /// Free slots whose entry is a replaced (older) copy not yet cleared: the next write
    /// stores their clears before its fence (or overwrites them), a destage before its own.
    pub pending_clears: Vec<u32>,
    pub order: Order,
    pub stats: Counters,
    pub stored: Option<Counters>,
    /// A bypassed write reached the backing device since its last flush.
    pub bypass_unflushed: bool,
    pub error: Option<String>,
    pub settings: Settings,
    pub admit: crate::write::admit::Admission,
    /// When the cache opened: every block's `written_at` while max-age is off.
    pub opened_at: Instant,
    /// Compare the FAT classification with a full walk after every metadata write (debug
    /// builds always; `set_fat_cross_check` otherwise).
    pub fat_cross_check: bool,
    /// Cross-checks made (each agreed: a difference is an error).
    pub fat_cross_checks: u64,
    /// The blocks destaged, in the order written back, while someone asked to see them
    /// (`set_destage_log`; a simulator replays them onto its flash model).
    pub destage_log: Option<Vec<u64>>,
    /// A backing block's bytes for a sector's read-modify-write (kept between them).
    pub block_buf: Vec<u8>,
    /// A destage is between its copy-out and its clears (its backing I/O runs without the
    /// lock): the backing blocks `lo..hi` it may write. Another destage, and a backing write
    /// into them (a bypassed write, a long discard), waits for `WriteCache::changed`.
    pub destaging: Option<(u64, u64)>,
    /// A destage thread serves the watermarks (`wserve::Destager`): a write past the high
    /// watermark wakes it instead of destaging itself.
    pub background: bool,
    /// The destage thread, parked until a write past the high watermark unparks it (None:
    /// it runs, or there is none).
    pub destager_parked: Option<std::thread::Thread>,
    /// Buffers of destaged runs, kept for the next destage (no page faults, no zeroing).
    pub run_bufs: Vec<Vec<u8>>,
    /// Slots a destage pass has chosen and reads without the lock: such a slot is not
    /// reused while pinned (its data stays the copy chosen).
    pub pinned: Vec<bool>,
    /// Slots freed while pinned (their copies replaced): free once the pass unpins them.
    pub held: Vec<u32>,
}

/// A write cache over `region` in front of `backing`.
pub struct WriteCache<R: Region> {
    pub(crate) region: Arc<R>,
    pub(crate) backing: Arc<dyn BlockDevice>,
    pub(crate) layout: Layout,
    pub(crate) sb: Superblock,
    pub(crate) state: Mutex<WState>,
    /// The destage thread wants the lock: writes let it in first (a write takes the lock for
    /// each unit, back to back, and an unfair mutex would hand it back to the writer).
    pub(crate) destage_wants_lock: std::sync::atomic::AtomicBool,
    /// Notified when a destage group ends (room made, the backing device free) and when a
    /// write crosses the high watermark with a destage thread running.
    pub(crate) changed: Condvar,
    pub(crate) bug: Option<Bug>,
    recovered: usize,
}

/// Write a new write cache into `region` over `backing` (its label into the last block).
pub fn create<R: Region>(
    region: &R,
    backing: &dyn BlockDevice,
    sector_bytes: u32,
    settings: Settings,
    admit: &Admit,
) -> Result<Superblock> {
    settings.validate()?;
    let bb = backing.block_bytes();
    if bb != BACKING_BLOCK_BYTES || backing.blocks() < 2 {
        return Err(Error::bad(format!(
            "backing device: {} blocks of {bb} bytes; the write cache needs 4096-byte blocks and \
             at least 2",
            backing.blocks()
        )));
    }
    if !crate::write::format::valid_sector(sector_bytes) {
        return Err(Error::bad(format!(
            "sector size {sector_bytes} B: 512 (the seed's) or 4096 (the backing device's block)"
        )));
    }
    let layout = Layout::fitting(region.len(), sector_bytes).ok_or_else(|| {
        Error::bad(format!(
            "cache size {} bytes: too small for {} slots",
            region.len(),
            crate::write::format::SLOTS_MIN
        ))
    })?;
    let backing_blocks = (backing.blocks() - 1).min(LBA_MAX / u64::from(bb / sector_bytes));
    let sb = Superblock {
        slots: layout.slots,
        sector_bytes,
        blocks: backing_blocks * u64::from(bb / sector_bytes),
        backing_block_bytes: bb,
        backing_blocks,
        identity: crate::common::label::random_identity(),
        settings,
    };
    if let Admit::Ranges(rs) = admit {
        Admit::ranges(rs.clone(), sb.blocks)?;
    }
    crate::common::label::write_label(backing, sb.identity, backing_blocks)?;
    let table = vec![0u8; (layout.data_off - crate::common::format::TABLE_OFF) as usize];
    region.write_nt(crate::common::format::TABLE_OFF, &table);
    for off in COMMIT_OFF {
        region.store_u64_nt(off, encode_commit(0));
    }
    region.write_nt(COUNTERS_OFF, &Counters::default().encode());
    region.write_nt(crate::write::format::ADMIT_OFF, &admit.encode());
    region.write_nt(0, &sb.encode());
    region.fence();
    Ok(sb)
}

impl<R: Region> WriteCache<R> {
    /// Open a write cache: check the superblock and the backing label, then recover.
    pub fn open(
        region: Arc<R>,
        backing: Arc<dyn BlockDevice>,
        over: Option<Settings>,
    ) -> Result<WriteCache<R>> {
        WriteCache::open_seeded(region, backing, over, None)
    }

    /// Open with a seeded bug switched on (crash tests only).
    pub fn open_seeded(
        region: Arc<R>,
        backing: Arc<dyn BlockDevice>,
        over: Option<Settings>,
        bug: Option<Bug>,
    ) -> Result<WriteCache<R>> {
        let sb = read_superblock(&*region)?;
        let layout = sb.layout();
        crate::common::label::check_region_holds(
            region.len(),
            layout.region_bytes,
            "write cache image",
        )?;
        check_label(&sb, &*backing)?;
        let settings = over.unwrap_or(sb.settings);
        settings.validate()?;
        let admit = read_admit(&*region)?;
        let (state, recovered) = crate::write::recover::recover(&*region, &layout, settings, bug)?;
        let wc = WriteCache {
            region,
            backing,
            layout,
            sb,
            state: Mutex::new(state),
            changed: Condvar::new(),
            destage_wants_lock: std::sync::atomic::AtomicBool::new(false),
            bug,
            recovered,
        };
        {
            let mut st = wc.lock();
            st.admit = match crate::write::admit::Admission::from_ranges(&admit) {
                Some(a) => a,
                None => crate::write::admit::Admission::Fat(Box::new(wc.walk_fat(&mut st)?)),
            };
            wc.assert_invariants(&st);
        }
        Ok(wc)
    }

    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    pub fn region(&self) -> &Arc<R> {
        &self.region
    }

    /// Entries recovery at open cleared (uncommitted or superseded at a crash).
    pub fn recovered_entries(&self) -> usize {
        self.recovered
    }

    /// The admission stored at create (the FAT classification in force: `admission`).
    pub fn admit_record(&self) -> Result<Admit> {
        read_admit(&*self.region)
    }

    pub fn settings(&self) -> Settings {
        self.lock().settings
    }

    /// Run with the settings a served cache runs with (`Settings::served`: dm-writecache's
    /// watermarks and a bounded writeback where the image leaves them off), for this open.
    pub fn use_served_defaults(&self) {
        let mut st = self.lock();
        st.settings = st.settings.served(self.sb.sector_bytes);
    }

    /// dm-writecache's `cleaner` message: take no new blocks, and destage everything at the
    /// next write or timer tick.
    pub fn set_cleaner(&self, on: bool) -> Result<()> {
        let mut st = self.lock();
        self.writable(&st)?;
        st.settings.cleaner = on;
        Ok(())
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, WState> {
        // A panic while the lock was held leaves DRAM state the NVRAM may not match: refuse.
        self.state
            .lock()
            .expect("write cache state poisoned by an earlier panic")
    }

    /// The lock for a destage: writes waiting for it let it in first.
    pub(crate) fn lock_for_destage(&self) -> Guard<'_> {
        use std::sync::atomic::Ordering;
        self.destage_wants_lock.store(true, Ordering::Release);
        let g = self.lock();
        self.destage_wants_lock.store(false, Ordering::Release);
        g
    }

    /// The lock for a write: after the destage thread, when it waits for it.
    fn lock_for_write(&self) -> Guard<'_> {
        while self
            .destage_wants_lock
            .load(std::sync::atomic::Ordering::Acquire)
        {
            std::thread::yield_now();
        }
        self.lock()
    }

    /// Unpark the destage thread if it is parked.
    pub(crate) fn wake_destager(&self, st: &mut WState) {
        if let Some(t) = st.destager_parked.take() {
            t.unpark();
        }
    }

    /// Wait for `changed` (the lock released meanwhile).
    pub(crate) fn wait_changed<'a>(&'a self, g: Guard<'a>) -> Guard<'a> {
        self.changed
            .wait(g)
            .expect("write cache state poisoned by an earlier panic")
    }

    pub(crate) fn sectors_per_backing_block(&self) -> u64 {
        u64::from(self.sb.backing_block_bytes / self.sb.sector_bytes)
    }

    pub fn stats(&self) -> Counters {
        self.lock().stats
    }

    /// Counters over the cache's life (stored at the last clean close plus this run's), and
    /// whether the stored ones were readable.
    pub fn lifetime(&self) -> (Counters, bool) {
        let st = self.lock();
        (
            st.stored.unwrap_or_default().plus(&st.stats),
            st.stored.is_some(),
        )
    }

    /// A clean close: the clears of replaced copies still pending stored (so that recovery
    /// at the next open finds nothing to clear) and the lifetime counters stored; one fence.
    pub fn save_counters(&self) {
        let mut st = self.wait_destage(self.lock());
        self.store_pending_clears(&mut st);
        let life = st.stored.unwrap_or_default().plus(&st.stats);
        self.region.write_nt(COUNTERS_OFF, &life.encode());
        self.fence(&mut st);
    }

    /// dm-writecache's `clear_stats` message: the lifetime counters restart from zero.
    pub fn clear_stats(&self) {
        let mut st = self.lock();
        st.stats = Counters::default();
        st.stored = Some(Counters::default());
        drop(st);
        self.save_counters();
    }

    /// Blocks held in the cache (each holds one slot).
    pub fn cached_blocks(&self) -> u64 {
        self.lock().index.len() as u64
    }

    /// Whether `lba` has a copy in the cache.
    pub fn is_cached(&self, lba: u64) -> bool {
        self.lock().index.contains_key(&lba)
    }

    /// Whether a write to `lba` goes to the cache now (admitted, or cached, and not refused
    /// by the cleaner).
    pub fn takes(&self, lba: u64) -> bool {
        let st = self.lock();
        self.takes_locked(&st, lba)
    }

    pub(crate) fn takes_locked(&self, st: &WState, lba: u64) -> bool {
        st.index.contains_key(&lba) || (!st.settings.cleaner && st.admit.admits(lba))
    }

    pub fn error(&self) -> Option<String> {
        self.lock().error.clone()
    }

    pub fn unit_blocks(&self) -> u32 {
        self.sb.unit_blocks()
    }

    /// The admission in force (the FAT classification is rebuilt at open and after every
    /// metadata write).
    pub fn admission(&self) -> crate::write::admit::Admission {
        self.lock().admit.clone()
    }

    /// Walk the FAT volume through the cache's own read path.
    pub(crate) fn walk_fat(&self, st: &mut WState) -> Result<crate::write::admit::fat::FatMap> {
        let mut read = |off: u64, buf: &mut [u8]| self.fat_read(st, off, buf);
        crate::write::admit::fat::FatMap::build(
            &mut read,
            u64::from(self.sb.sector_bytes),
            self.sb.blocks,
        )
    }

    /// Bytes of the volume at `off` through the cache's read path (not counted as reads).
    fn fat_read(&self, st: &mut WState, off: u64, buf: &mut [u8]) -> Result<()> {
        let s = u64::from(self.sb.sector_bytes);
        let first = off / s;
        let last = (off + buf.len() as u64).div_ceil(s);
        if last > self.sb.blocks {
            return Err(Error::invalid(
                "admit",
                format!(
                    "{FIELD} fat-metadata: the volume names bytes past the device's end \
                     (offset {off})"
                ),
            ));
        }
        if off.is_multiple_of(s) && buf.len().is_multiple_of(s as usize) {
            for (i, chunk) in buf.chunks_mut(s as usize).enumerate() {
                self.read_locked(st, first + i as u64, chunk, false)?;
            }
            return Ok(());
        }
        let mut tmp = vec![0u8; ((last - first) * s) as usize];
        for (i, chunk) in tmp.chunks_mut(s as usize).enumerate() {
            self.read_locked(st, first + i as u64, chunk, false)?;
        }
        let at = (off - first * s) as usize;
        buf.copy_from_slice(&tmp[at..at + buf.len()]);
        Ok(())
    }

    /// Blocks `lba..` were written with `blocks`: bring the FAT classification up to date
    /// (fat.rs walks again only when a followed FAT entry, a directory's subdirectories or
    /// the boot sector changed). A volume the walk cannot read keeps the last classification
    /// and is walked again at the next write.
    fn refresh_fat(&self, st: &mut WState, lba: u64, blocks: &[Option<&[u8]>]) -> Result<()> {
        let crate::write::admit::Admission::Fat(m) = &mut st.admit else {
            return Ok(());
        };
        let end = lba + blocks.len() as u64;
        let metadata = (lba..end).any(|l| m.admits(l));
        for (i, &b) in blocks.iter().enumerate() {
            m.note_write(lba + i as u64, b);
        }
        // The cross-check follows every metadata write, also those found to change nothing.
        let check = metadata && (st.fat_cross_check || cfg!(debug_assertions));
        if m.is_stale() {
            let mut m = match std::mem::replace(&mut st.admit, crate::write::admit::Admission::All)
            {
                crate::write::admit::Admission::Fat(m) => m,
                _ => unreachable!("matched above"),
            };
            let done = {
                let mut read = |off: u64, buf: &mut [u8]| self.fat_read(st, off, buf);
                m.refresh(&mut read)
            };
            st.admit = crate::write::admit::Admission::Fat(m);
            if done.is_err() {
                return Ok(());
            }
        }
        if check {
            self.cross_check_fat(st, lba)?;
        }
        Ok(())
    }

    /// The pair assertion of the incremental classification: a full walk gives the same (a
    /// volume a full walk cannot read is not compared: both keep their last classification).
    fn cross_check_fat(&self, st: &mut WState, lba: u64) -> Result<()> {
        let Ok(full) = self.walk_fat(st) else {
            return Ok(());
        };
        st.fat_cross_checks += 1;
        let crate::write::admit::Admission::Fat(m) = &st.admit else {
            return Ok(());
        };
        match m.differs_from(&full) {
            None => Ok(()),
            Some(d) => Err(Error::env(format!(
                "the FAT classification kept up to date after the write at block {lba} differs \
                 from a full walk: {d}"
            ))),
        }
    }

    /// Record the blocks destaged from now on, in the order they are written back
    /// (`take_destaged` hands them over); off again with `false`.
    pub fn set_destage_log(&self, on: bool) {
        self.lock().destage_log = on.then(Vec::new);
    }

    /// Move the blocks destaged since the last call to the end of `out` (none when the log
    /// is off).
    pub fn take_destaged(&self, out: &mut Vec<u64>) {
        if let Some(log) = self.lock().destage_log.as_mut() {
            out.append(log);
        }
    }

    /// Cross-check the FAT classification against a full walk after every metadata write
    /// (slow: a full walk each; debug builds always do).
    pub fn set_fat_cross_check(&self, on: bool) {
        self.lock().fat_cross_check = on;
    }

    /// Cross-checks of the FAT classification made so far (all agreed).
    pub fn fat_cross_checks(&self) -> u64 {
        self.lock().fat_cross_checks
    }

    /// The DRAM state agrees with itself (debug builds walk every slot).
    pub(crate) fn assert_invariants(&self, st: &WState) {
        assert!(st.seq <= SEQ_MAX);
        assert_eq!(st.slots.len(), self.layout.slots as usize);
        if cfg!(debug_assertions) {
            let used = st.slots.iter().filter(|s| s.is_some()).count();
            assert_eq!(used, st.index.len(), "every used slot is indexed");
            assert_eq!(
                used + st.free.len() + st.held.len(),
                st.slots.len(),
                "a slot is used, free, or held for a destage"
            );
            for &p in &st.pending_clears {
                assert!(
                    st.slots[p as usize].is_none(),
                    "a pending clear is of a free slot"
                );
            }
            for (&lba, &slot) in &st.index {
                assert_eq!(st.slots[slot as usize].map(|c| c.lba), Some(lba));
            }
        }
    }
}

fn read_superblock<R: Region + ?Sized>(region: &R) -> Result<Superblock> {
    let min = Layout::new(crate::write::format::SLOTS_MIN, 512).region_bytes;
    if region.len() < min {
        return Err(Error::bad("not a write cache image (too short)"));
    }
    let mut b = [0u8; crate::write::format::SB_BYTES];
    region.read(0, &mut b);
    Superblock::decode(&b)
}

pub(crate) fn read_admit<R: Region + ?Sized>(region: &R) -> Result<Admit> {
    let mut b = vec![0u8; crate::write::format::ADMIT_BYTES];
    region.read(crate::write::format::ADMIT_OFF, &mut b);
    Admit::decode(&b)
}

pub(crate) fn read_counters<R: Region + ?Sized>(region: &R) -> Option<Counters> {
    let mut b = [0u8; COUNTERS_BYTES];
    region.read(COUNTERS_OFF, &mut b);
    Counters::decode(&b)
}

/// The backing device's label names this cache, which is not detached.
fn check_label(sb: &Superblock, backing: &dyn BlockDevice) -> Result<()> {
    if backing.block_bytes() != sb.backing_block_bytes || backing.blocks() != sb.backing_blocks + 1
    {
        return Err(Error::bad(format!(
            "backing device: {} blocks of {} bytes, but this write cache was created over {} \
             blocks of {} bytes (and a label block)",
            backing.blocks(),
            backing.block_bytes(),
            sb.backing_blocks,
            sb.backing_block_bytes
        )));
    }
    crate::common::label::check_label_names(
        backing,
        sb.backing_block_bytes as usize,
        sb.identity,
        sb.backing_blocks,
    )
}

/// Small helpers of the protocol.
impl<R: Region> WriteCache<R> {
    /// Store a slot's entry (one 32-byte non-temporal store, half a line). Pair assertion
    /// (debug builds): the CRC stored is the one the data stored gives.
    pub(crate) fn store_entry(&self, slot: u32, e: &Entry, crc: u32) {
        let off = self.layout.entry_off(slot);
        self.region
            .write_nt(off, &crate::write::entry::encode(slot, e, crc));
        if cfg!(debug_assertions) && !e.tombstone && self.bug.is_none() {
            let mut d = vec![0u8; self.sb.sector_bytes as usize];
            self.region.read(self.layout.data_off(slot), &mut d);
            debug_assert_eq!(crc, crc_of(slot, e, Some(&d)), "slot {slot}'s data");
        }
    }

    /// Free a slot now and clear its entry (the sequence word: one atomic store). Reusable at
    /// once: a copy that lands over it is whole only when its own CRC says so.
    pub(crate) fn clear_slot(&self, st: &mut WState, slot: u32) {
        self.region.store_u64_nt(self.layout.entry_off(slot) + 8, 0);
        self.forget_slot(st, slot);
        st.pending_clears.retain(|&p| p != slot);
        st.free.push(slot);
    }

    /// Take a used slot out of the DRAM state (index, order).
    fn forget_slot(&self, st: &mut WState, slot: u32) {
        let c = st.slots[slot as usize].take().expect("a used slot");
        let removed = st.index.remove(&c.lba);
        debug_assert_eq!(removed, Some(slot));
        st.order.remove(slot);
    }

    /// A copy replaced by a newer one (the index names the new slot already): its slot is
    /// free at once (its clear pending). Only stores touch the old slot's lines (no load waits
    /// on a miss after the write's fence).
    fn replace_slot(&self, st: &mut WState, lba: u64, old: u32) {
        debug_assert_eq!(st.slots[old as usize].map(|c| c.lba), Some(lba));
        st.slots[old as usize] = None;
        st.order.remove(old);
        if st.pinned[old as usize] {
            st.held.push(old); // A destage reads it: free when it is done.
        } else {
            st.free.push(old);
        }
        st.pending_clears.push(old);
    }

    /// Store the clears the last write left pending (no fence: the caller's next one).
    pub(crate) fn store_pending_clears(&self, st: &mut WState) {
        // Emptied in place: the vector keeps its capacity (no allocation per write).
        for &slot in &st.pending_clears {
            debug_assert!(st.slots[slot as usize].is_none());
            self.region.store_u64_nt(self.layout.entry_off(slot) + 8, 0);
        }
        st.pending_clears.clear();
    }

    /// Fence: every store so far is durable.
    pub(crate) fn fence(&self, _st: &mut WState) {
        self.region.fence();
    }

    pub(crate) fn writable(&self, st: &WState) -> Result<()> {
        match &st.error {
            Some(e) => Err(Error::env(format!(
                "the write cache is in its error state after a backing-device error ({e}): \
                 writes are refused, the data is kept"
            ))),
            None => Ok(()),
        }
    }

    pub(crate) fn check_range(&self, lba: u64, bytes: usize) -> Result<u64> {
        let sector = self.sb.sector_bytes as usize;
        if !bytes.is_multiple_of(sector) {
            return Err(Error::bad(format!(
                "{bytes} bytes: not a whole number of {sector}-byte blocks"
            )));
        }
        let n = (bytes / sector) as u64;
        if lba.checked_add(n).is_none_or(|end| end > self.sb.blocks) {
            return Err(Error::bad(format!(
                "blocks {lba}..{}: beyond the device's {} blocks",
                lba.saturating_add(n),
                self.sb.blocks
            )));
        }
        Ok(n)
    }
}

/// The write path.
impl<R: Region> WriteCache<R> {
    /// Write whole blocks: each unit (at most `unit_blocks`) of admitted blocks lands whole and
    /// durable before the next begins; blocks passed by go to the backing device.
    pub fn write_blocks(&self, lba: u64, data: &[u8]) -> Result<()> {
        let s = self.sb.sector_bytes as usize;
        if data.len() == s && lba < self.sb.blocks {
            // One block (a metadata write): checked without a division, no 64-entry arrays
            // to set up.
            return self.write_unit::<1>(lba, &[Some(data)]);
        }
        self.check_range(lba, data.len())?;
        let unit = self.unit_blocks() as usize * s;
        let mut blocks: [Option<&[u8]>; UNIT_MAX] = [None; UNIT_MAX];
        for (i, chunk) in data.chunks(unit).enumerate() {
            let at = lba + (i * unit / s) as u64;
            let n = chunk.len() / s;
            for (b, d) in blocks.iter_mut().zip(chunk.chunks(s)) {
                *b = Some(d);
            }
            self.write_unit::<UNIT_MAX>(at, &blocks[..n])?;
        }
        Ok(())
    }

    /// Discard blocks. Up to one unit, atomically as a write: cached or admitted blocks become
    /// tombstones (read as zeros, durable on return, punched or zeroed on the backing device
    /// at destage), the others are zeroed on the backing device (durable after the next
    /// flush). Longer (not atomic, as a longer write): cached blocks become tombstones, the
    /// others are discarded on the backing device directly, which is then flushed (durable on
    /// return). Why: mkfs discards the whole device, and a tombstone per sector would pass
    /// millions of sectors through the cache and its destager.
    pub fn discard_blocks(&self, lba: u64, count: u64) -> Result<()> {
        let bytes = usize::try_from(count)
            .ok()
            .and_then(|c| c.checked_mul(self.sb.sector_bytes as usize));
        self.check_range(lba, bytes.ok_or_else(|| Error::bad("discard too long"))?)?;
        if count <= u64::from(self.unit_blocks()) {
            self.write_unit::<UNIT_MAX>(lba, &vec![None; count as usize])?;
            self.lock().stats.discarded_blocks += count;
            return Ok(());
        }
        let cached = self.discard_uncached(lba, count)?;
        for &l in &cached {
            // Tombstones one by one: there are at most as many as the cache has slots.
            self.write_unit::<1>(l, &[None])?;
        }
        let mut st = self.lock();
        st.stats.discarded_blocks += count;
        debug_assert!(cached.len() as u64 <= count);
        Ok(())
    }

    /// The uncached blocks of `lba..lba + count` discarded on the backing device (whole
    /// backing blocks punched, the sectors of a partly covered one zeroed), the backing
    /// device flushed; returns the cached blocks, in order, for their tombstones.
    fn discard_uncached(&self, lba: u64, count: u64) -> Result<Vec<u64>> {
        let end = lba + count;
        let mut st = self.lock();
        while self.backing_busy(&st, lba, end) {
            st = self.wait_changed(st);
        }
        self.writable(&st)?;
        // The cached blocks of the range: by probing each block or by walking the index,
        // whichever is shorter (a whole-device discard over a full cache, or a short one).
        let cached: Vec<u64> = if count <= st.index.len() as u64 {
            (lba..end).filter(|l| st.index.contains_key(l)).collect()
        } else {
            let mut c: Vec<u64> = st
                .index
                .keys()
                .copied()
                .filter(|l| (lba..end).contains(l))
                .collect();
            c.sort_unstable();
            c
        };
        let mut at = lba;
        for &next in cached.iter().chain(std::iter::once(&end)) {
            if next > at {
                self.backing_discard_run(&mut st, at, next)?;
            }
            at = next + 1;
        }
        // Seeded bug long-discard-unflushed: the discard returns with the backing device's
        // discards not yet durable.
        if self.bug != Some(Bug::LongDiscardUnflushed) {
            self.backing
                .flush()
                .map_err(|e| self.backing_failed(&mut st, e))?;
        }
        if matches!(st.admit, crate::write::admit::Admission::Fat(_))
            && (lba..end).any(|l| st.admit.admits(l))
        {
            // FAT metadata became zeros: classify again, as after a write.
            if let Ok(m) = self.walk_fat(&mut st) {
                st.admit = crate::write::admit::Admission::Fat(Box::new(m));
            }
        }
        Ok(cached)
    }

    /// Sectors `from..to`, none cached, discarded on the backing device.
    fn backing_discard_run(&self, st: &mut WState, from: u64, to: u64) -> Result<()> {
        assert!(from < to);
        let spb = u64::from(self.sb.backing_block_bytes / self.sb.sector_bytes);
        let (first, last) = (from.div_ceil(spb), to / spb);
        if first >= last {
            for l in from..to {
                self.backing_write_sector(st, l, None)?;
            }
            return Ok(());
        }
        for l in (from..first * spb).chain(last * spb..to) {
            self.backing_write_sector(st, l, None)?;
        }
        self.backing
            .discard(first, last - first)
            .map_err(|e| self.backing_failed(st, e))
    }

    /// One unit: bypassed blocks to the backing device, the others into the cache together.
    /// `N`: the most blocks `blocks` holds (1 or UNIT_MAX), the size of its stack arrays.
    fn write_unit<const N: usize>(&self, lba: u64, blocks: &[Option<&[u8]>]) -> Result<()> {
        assert!(blocks.len() <= N.min(self.unit_blocks() as usize));
        let mut st = self.room_for_unit(self.lock_for_write(), lba, blocks)?;
        let mut cached: [(u64, Option<&[u8]>); N] = [(0, None); N];
        let mut n = 0;
        for (i, &b) in blocks.iter().enumerate() {
            let l = lba + i as u64;
            st.stats.write_blocks += 1;
            if self.goes_to_cache(&st, l) {
                cached[n] = (l, b);
                n += 1;
            } else {
                st.stats.write_bypass += 1;
                self.backing_write_sector(&mut st, l, b)?;
                st.bypass_unflushed = true;
            }
        }
        if n > 0 {
            self.commit_write::<N>(&mut st, &cached[..n]);
        }
        // The FAT or a directory may have changed: a new directory is admitted from now on.
        self.refresh_fat(&mut st, lba, blocks)?;
        self.after_write(st)
    }

    /// Whether a write to `lba` goes into the cache (admitted, or cached: written through,
    /// never left stale) or past it to the backing device.
    fn goes_to_cache(&self, st: &WState, l: u64) -> bool {
        let passed_by = st.settings.cleaner || !st.admit.admits(l);
        // Seeded bug bypass-keeps-cached-copy: a cached block the filter would pass by goes
        // to the backing device, its cached copy left in place.
        let buggy = self.bug == Some(Bug::BypassKeepsCachedCopy) && passed_by;
        !buggy && (!passed_by || st.index.contains_key(&l))
    }

    /// The lock, once the unit finds room and its bypassed blocks' backing blocks are not
    /// being destaged. Blocks are held in at most `slots - 1` slots: the spare one lets an
    /// overwrite land (copy-on-write) without a destage. A new block that finds no room
    /// destages one block (the seed's trigger; with dm-writecache's triggers on, with its
    /// neighbours), or waits for the destage in flight to free some.
    fn room_for_unit<'a>(
        &'a self,
        mut st: Guard<'a>,
        lba: u64,
        blocks: &[Option<&[u8]>],
    ) -> Result<Guard<'a>> {
        let slots = self.layout.slots as usize;
        assert!(blocks.len() <= slots / 2, "a unit fits the cache");
        let mut blocked = false;
        loop {
            self.writable(&st)?;
            // With room for every block of the unit (free slots, not counting those held for
            // a destage, and the spare), and none bypassing, the index is not probed here: its
            // cache misses overlap the stores' drain after the fence instead.
            let room_for_all = blocks.len() < st.free.len();
            let (mut total, mut new, mut busy) = (0, 0, false);
            for l in lba..lba + blocks.len() as u64 {
                if room_for_all && !st.settings.cleaner && st.admit.admits(l) {
                    continue;
                }
                if self.goes_to_cache(&st, l) {
                    total += 1;
                    new += usize::from(!st.index.contains_key(&l));
                } else {
                    busy |= self.backing_busy(&st, l, l + 1);
                }
            }
            let full = st.index.len() + new > slots - 1 || st.free.len() < total;
            if !full && !busy {
                break;
            }
            blocked |= full;
            // With a destage thread past the high watermark, the thread makes the room (in
            // long runs, one flush per group) while the write waits; a room destage here would
            // flush the backing device for a handful of blocks.
            let thread_makes_room = st.background && self.above_high(&st);
            if busy || st.destaging.is_some() || thread_makes_room {
                if thread_makes_room {
                    self.wake_destager(&mut st);
                }
                st = self.wait_changed(st);
                continue;
            }
            // Writes go on during the destage's backing I/O (and a victim rewritten meanwhile
            // stays cached): the loop looks at the room again after each.
            st = self.destage_victims(st, 1, crate::write::destage::Trigger::Room)?;
        }
        if blocked {
            st.stats.writes_blocked_on_freelist += 1;
        }
        Ok(st)
    }

    /// Store `blocks` in new slots with the previous write's clears; fence (a multi-block
    /// write: then its commit words, fence); then the copies they replace are freed.
    fn commit_write<const N: usize>(&self, st: &mut WState, blocks: &[(u64, Option<&[u8]>)]) {
        let seq = st.seq + 1;
        assert!(seq <= SEQ_MAX, "sequence numbers exhausted");
        let multi = blocks.len() > 1;
        let mut placed = [(0u32, 0u32); N];
        for (i, &(lba, data)) in blocks.iter().enumerate() {
            let slot = self.take_slot(st, lba);
            let e = Entry {
                lba,
                seq,
                tombstone: data.is_none(),
                multi,
            };
            // The data's stores are issued before the CRC is computed (from the caller's
            // buffer): the CRC's time overlaps their drain, which the fence waits for. Their
            // order before the fence does not matter (any subset may reach media first).
            // Seeded bug entry-before-data: the data comes after a fence.
            if let Some(d) = data.filter(|_| self.bug != Some(Bug::EntryBeforeData)) {
                self.region.write_nt(self.layout.data_off(slot), d);
            }
            // Seeded bug checksum-skips-data: the CRC covers the entry alone.
            let covered = data.filter(|_| self.bug != Some(Bug::ChecksumSkipsData));
            let crc = crc_of(slot, &e, covered);
            self.store_entry(slot, &e, crc);
            placed[i] = (slot, crc);
        }
        self.store_pending_clears(st);
        self.commit_fences(st, seq, multi);
        if self.bug == Some(Bug::EntryBeforeData) {
            for (&(_, data), &(slot, _)) in blocks.iter().zip(&placed) {
                if let Some(d) = data {
                    self.region.write_nt(self.layout.data_off(slot), d); // Seeded bug
                }
            }
            self.fence(st);
        }
        st.seq = seq;
        self.install(st, blocks, &placed[..blocks.len()], multi);
    }

    /// The write's fences: one for a single block; for several, one, both commit words :=
    /// `seq`, another (the commit word says the write's entries are all whole).
    fn commit_fences(&self, st: &mut WState, seq: u64, multi: bool) {
        // Seeded bug commit-unfenced: the write returns before the fence that commits it.
        let unfenced = self.bug == Some(Bug::CommitUnfenced);
        if !unfenced || multi {
            self.fence(st);
        }
        if multi {
            for off in COMMIT_OFF {
                self.region.store_u64_nt(off, encode_commit(seq));
            }
            if !unfenced {
                self.fence(st);
            }
        }
    }

    /// A free slot for a new copy of `lba` (never the slot of its current copy: a torn sector
    /// must not be the block's only copy). A slot whose clear is pending needs none: the new
    /// entry lands over it in the same fence.
    fn take_slot(&self, st: &mut WState, lba: u64) -> u32 {
        if self.bug == Some(Bug::ReuseBeforeFence) {
            if let Some(&old) = st.index.get(&lba) {
                return old; // Seeded bug: the new copy lands in place
            }
        }
        let slot = st.free.pop().expect("make_room left a free slot");
        if let Some(i) = st.pending_clears.iter().position(|&p| p == slot) {
            st.pending_clears.swap_remove(i);
        }
        slot
    }

    /// The new copies replace the old ones in DRAM; the old slots are free at once, their
    /// clears pending (stored by the next write or destage, before its fence).
    fn install(
        &self,
        st: &mut WState,
        blocks: &[(u64, Option<&[u8]>)],
        placed: &[(u32, u32)],
        multi: bool,
    ) {
        let written_at = match st.settings.max_age_ms {
            0 => st.opened_at,
            _ => Instant::now(),
        };
        for (&(lba, data), &(slot, crc)) in blocks.iter().zip(placed) {
            // One probe of the index: the new slot in, the old one (if any) out.
            match st.index.insert(lba, slot) {
                Some(old) if old == slot => st.order.remove(slot), // seeded bug: in place
                Some(old) => {
                    st.stats.write_hits_committed += 1;
                    self.replace_slot(st, lba, old);
                }
                None => st.stats.write_allocated += 1,
            }
            st.slots[slot as usize] = Some(Cached {
                lba,
                tombstone: data.is_none(),
                seq: st.seq,
                multi,
                crc,
                written_at,
            });
            st.order.inserted(slot);
        }
        self.assert_invariants(st);
    }

    /// Write one sector to the backing device (a read-modify-write of its backing block when
    /// sectors are smaller); `None` zeroes it (a whole backing block is punched).
    pub(crate) fn backing_write_sector(
        &self,
        st: &mut WState,
        lba: u64,
        data: Option<&[u8]>,
    ) -> Result<()> {
        let s = self.sb.sector_bytes as usize;
        let spb = (self.sb.backing_block_bytes as usize / s) as u64;
        let (blk, at) = (lba / spb, (lba % spb) as usize * s);
        let done = if spb == 1 {
            match data {
                Some(d) => self.backing.write(lba, d),
                None => self.backing.discard(lba, 1),
            }
        } else {
            // The state's block buffer: a destage or bypass of one sector neither allocates
            // nor clears one (the read fills it whole).
            let mut buf = std::mem::take(&mut st.block_buf);
            buf.resize(self.sb.backing_block_bytes as usize, 0);
            let done = self.backing.read(blk, &mut buf).and_then(|_| {
                match data {
                    Some(d) => buf[at..at + s].copy_from_slice(d),
                    None => buf[at..at + s].fill(0),
                }
                self.backing.write(blk, &buf)
            });
            st.block_buf = buf;
            done
        };
        if data.is_some() {
            st.stats.backing_bytes_written += s as u64;
        }
        done.map_err(|e| self.backing_failed(st, e))
    }

    /// A backing-device error puts the cache in its error state (writes refused, data kept).
    pub(crate) fn backing_failed(&self, st: &mut WState, e: Error) -> Error {
        st.error = Some(e.to_string());
        Error::env(format!("write cache: backing device: {e}"))
    }
}

/// The read path.
impl<R: Region> WriteCache<R> {
    /// Read whole blocks: a cached block from NVRAM, the others from the backing device.
    pub fn read_blocks(&self, lba: u64, out: &mut [u8]) -> Result<()> {
        self.check_range(lba, out.len())?;
        let s = self.sb.sector_bytes as usize;
        let mut st = self.lock();
        for (i, buf) in out.chunks_mut(s).enumerate() {
            self.read_locked(&mut st, lba + i as u64, buf, true)?;
        }
        Ok(())
    }

    /// One block; `count`: a read from above (counted, and a hit moves an LRU/CLOCK slot).
    pub(crate) fn read_locked(
        &self,
        st: &mut WState,
        lba: u64,
        buf: &mut [u8],
        count: bool,
    ) -> Result<()> {
        if count {
            st.stats.read_blocks += 1;
        }
        let Some(slot) = st.index.get(&lba).copied() else {
            return self.backing_read_sector(lba, buf);
        };
        if count {
            st.stats.read_hits += 1;
            st.order.read(slot);
        }
        let c = st.slots[slot as usize].expect("an indexed slot is used");
        if c.tombstone {
            buf.fill(0);
            return Ok(());
        }
        self.read_slot_data(&c, slot, buf)
    }

    /// Read a cached copy's data and check it against its entry's CRC (the pair assertion
    /// after a read): damage at rest is an error naming the slot, never data returned.
    pub(crate) fn read_slot_data(&self, c: &Cached, slot: u32, buf: &mut [u8]) -> Result<()> {
        self.region.read(self.layout.data_off(slot), buf);
        let covered = (self.bug != Some(Bug::ChecksumSkipsData)).then_some(&*buf);
        if crc_of(slot, &c.entry(), covered) != c.crc {
            return Err(Error::finding(format!(
                "write cache slot {slot} (block {}): its data fails the entry's checksum \
                 (damaged at rest)",
                c.lba
            )));
        }
        Ok(())
    }

    fn backing_read_sector(&self, lba: u64, buf: &mut [u8]) -> Result<()> {
        let s = self.sb.sector_bytes as usize;
        let spb = (self.sb.backing_block_bytes as usize / s) as u64;
        if spb == 1 {
            return self.backing.read(lba, buf);
        }
        let mut block = [0u8; BACKING_BLOCK_BYTES as usize];
        let b = &mut block[..self.sb.backing_block_bytes as usize];
        self.backing.read(lba / spb, b)?;
        let at = (lba % spb) as usize * s;
        buf.copy_from_slice(&b[at..at + s]);
        Ok(())
    }

    /// A flush makes bypassed writes durable (admitted ones already are).
    pub fn flush_blocks(&self) -> Result<()> {
        let mut st = self.lock();
        st.stats.flushes += 1;
        if st.bypass_unflushed {
            self.backing
                .flush()
                .map_err(|e| self.backing_failed(&mut st, e))?;
            st.bypass_unflushed = false;
        }
        Ok(())
    }
}

impl<R: Region> BlockDevice for WriteCache<R> {
    fn block_bytes(&self) -> u32 {
        self.sb.sector_bytes
    }
    fn blocks(&self) -> u64 {
        self.sb.blocks
    }
    /// Every write durable and atomic on return when everything is admitted; with a filter,
    /// bypassed writes are durable after the next flush and a write that mixes both is not
    /// atomic as a whole.
    fn caps(&self) -> Caps {
        if self.lock().admit.is_all() {
            Caps {
                atomic_blocks: self.unit_blocks(),
                scattered: false,
                durability: Durability::OnReturn,
            }
        } else {
            Caps {
                atomic_blocks: u32::from(self.sb.sector_bytes == 512),
                scattered: false,
                durability: Durability::OnFlush,
            }
        }
    }
    fn read(&self, lba: u64, buf: &mut [u8]) -> Result<()> {
        self.read_blocks(lba, buf)
    }
    fn write(&self, lba: u64, data: &[u8]) -> Result<()> {
        self.write_blocks(lba, data)
    }
    fn discard(&self, lba: u64, count: u64) -> Result<()> {
        self.discard_blocks(lba, count)
    }
    fn flush(&self) -> Result<()> {
        self.flush_blocks()
    }
}
