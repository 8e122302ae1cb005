//! The write cache (NVFAT, seed 004, with dm-writecache's controls): dirty sectors held in
//! NVRAM, looked up by a hash index of block numbers, destaged to the backing device by a
//! policy (least recently written by default). An admitted write is durable and atomic when it
//! returns; a write the admission filter passes by goes to the backing device and is durable
//! after the next flush.
//!
//! Protocol (docs/format.md section 12), `k` the commit word (the last write's sequence):
//! - Write of n admitted blocks (at most the unit): each block's data and entry {block, k + 1}
//!   go to a free slot (never in place: a torn sector is never the only copy); fence; both
//!   commit words := k + 1; fence. The slots of the copies they replace are then cleared (word
//!   1 := 0) without a fence; a cleared slot is reused only after some later fence.
//! - Destage of a set of blocks: fence when clears are outstanding (an older copy's clear is
//!   durable before the newer copy's); write each to the backing device; flush it; clear the
//!   slots (reused after the next fence).
//! - A write to a block the filter passes by: if the block is cached, it is written into the
//!   cache as an admitted write (written through, never left stale); else to the backing
//!   device, durable after the next flush.
//! - Recovery: recover.rs's table; of a block's committed copies the newest is kept and the
//!   others cleared (a crash between a write's commit and its clears); then a fence.

use crate::format::{encode_commit, encode_entry, Entry, Label, LBA_MAX, SEQ_MAX};
use crate::wbugs::WcBug;
use crate::wformat::{
    Admit, DestagePolicy, WcCounters, WcLayout, WcSettings, WcSuperblock, WC_COMMIT_OFF,
    WC_COUNTERS_BYTES, WC_COUNTERS_OFF,
};
use nvstack_core::blockdev::{BlockDevice, Caps, Durability};
use nvstack_core::error::{Error, Result};
use nvstack_pmem::Region;
use nvstack_policy::{Lrw, Policy, PolicyKind, Touch, NEVER};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// The backing device's block size the label needs (one block at its end).
pub const BACKING_BLOCK_BYTES: u32 = 4096;

/// A cached block: the one slot holding its newest copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cached {
    pub lba: u64,
    pub tombstone: bool,
    /// When it was written (max-age counts from it).
    pub written_at: Instant,
}

/// The destage order: LRW (writes only) or one of the replacement policies (reads count).
pub(crate) enum Order {
    Lrw(Lrw),
    Other(Policy, u64),
}

impl Order {
    pub(crate) fn new(p: DestagePolicy, seed: u64) -> Order {
        let kind = match p {
            DestagePolicy::Lrw => return Order::Lrw(Lrw::new()),
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

pub(crate) struct WState {
    /// The last committed write's sequence number (the commit word).
    pub seq: u64,
    pub index: HashMap<u64, u32>,
    pub slots: Vec<Option<Cached>>,
    pub free: Vec<u32>,
    /// Slots whose clear is stored but not yet fenced: reusable after the next fence.
    pub cleared: Vec<u32>,
    pub order: Order,
    pub stats: WcCounters,
    pub stored: Option<WcCounters>,
    /// A bypassed write reached the backing device since its last flush.
    pub bypass_unflushed: bool,
    pub error: Option<String>,
    pub settings: WcSettings,
    pub admit: crate::admit::Admission,
}

/// A write cache over `region` in front of `backing`.
pub struct WriteCache<R: Region> {
    pub(crate) region: Arc<R>,
    pub(crate) backing: Arc<dyn BlockDevice>,
    pub(crate) layout: WcLayout,
    pub(crate) sb: WcSuperblock,
    pub(crate) state: Mutex<WState>,
    pub(crate) bug: Option<WcBug>,
    recovered: usize,
}

/// Write a new write cache into `region` over `backing` (its label into the last block).
pub fn create_wc<R: Region>(
    region: &R,
    backing: &dyn BlockDevice,
    sector_bytes: u32,
    settings: WcSettings,
    admit: &Admit,
) -> Result<WcSuperblock> {
    settings.validate()?;
    let bb = backing.block_bytes();
    if bb != BACKING_BLOCK_BYTES || backing.blocks() < 2 {
        return Err(Error::bad(format!(
            "backing device: {} blocks of {bb} bytes; the write cache needs 4096-byte blocks and \
             at least 2",
            backing.blocks()
        )));
    }
    if !crate::wformat::valid_sector(sector_bytes) {
        return Err(Error::bad(format!(
            "sector size {sector_bytes} B: 512 (the seed's) or 4096 (the backing device's block)"
        )));
    }
    let layout = WcLayout::fitting(region.len(), sector_bytes).ok_or_else(|| {
        Error::bad(format!(
            "cache size {} bytes: too small for {} slots",
            region.len(),
            crate::format::SLOTS_MIN
        ))
    })?;
    let backing_blocks = (backing.blocks() - 1).min(LBA_MAX / u64::from(bb / sector_bytes));
    let sb = WcSuperblock {
        slots: layout.slots,
        sector_bytes,
        blocks: backing_blocks * u64::from(bb / sector_bytes),
        backing_block_bytes: bb,
        backing_blocks,
        identity: crate::ubj::random_identity(),
        settings,
    };
    if let Admit::Ranges(rs) = admit {
        Admit::ranges(rs.clone(), sb.blocks)?;
    }
    let label = Label {
        identity: sb.identity,
        blocks: backing_blocks,
        detached: false,
    };
    backing.write(backing_blocks, &label.encode())?;
    backing.flush()?;
    let table = vec![0u8; (layout.data_off - crate::format::TABLE_OFF) as usize];
    region.write_nt(crate::format::TABLE_OFF, &table);
    for off in WC_COMMIT_OFF {
        region.store_u64_nt(off, encode_commit(0));
    }
    region.write_nt(WC_COUNTERS_OFF, &WcCounters::default().encode());
    region.write_nt(crate::wformat::WC_ADMIT_OFF, &admit.encode());
    region.write_nt(0, &sb.encode());
    region.fence();
    Ok(sb)
}

impl<R: Region> WriteCache<R> {
    /// Open a write cache: check the superblock and the backing label, then recover.
    pub fn open(
        region: Arc<R>,
        backing: Arc<dyn BlockDevice>,
        over: Option<WcSettings>,
    ) -> Result<WriteCache<R>> {
        WriteCache::open_seeded(region, backing, over, None)
    }

    /// Open with a seeded bug switched on (crash tests only).
    pub fn open_seeded(
        region: Arc<R>,
        backing: Arc<dyn BlockDevice>,
        over: Option<WcSettings>,
        bug: Option<WcBug>,
    ) -> Result<WriteCache<R>> {
        let sb = read_superblock(&*region)?;
        let layout = sb.layout();
        if region.len() < layout.region_bytes {
            return Err(Error::bad(format!(
                "write cache image: {} bytes, its superblock needs {}",
                region.len(),
                layout.region_bytes
            )));
        }
        check_label(&sb, &*backing)?;
        let settings = over.unwrap_or(sb.settings);
        settings.validate()?;
        let admit = read_admit(&*region)?;
        let (state, recovered) = crate::wrecover::recover(&*region, &layout, settings, bug)?;
        let wc = WriteCache {
            region,
            backing,
            layout,
            sb,
            state: Mutex::new(state),
            bug,
            recovered,
        };
        {
            let mut st = wc.lock();
            st.admit = match crate::admit::Admission::from_ranges(&admit) {
                Some(a) => a,
                None => crate::admit::Admission::Fat(wc.walk_fat(&mut st)?),
            };
            wc.assert_invariants(&st);
        }
        Ok(wc)
    }

    pub fn superblock(&self) -> &WcSuperblock {
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

    pub fn settings(&self) -> WcSettings {
        self.lock().settings
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

    pub fn stats(&self) -> WcCounters {
        self.lock().stats
    }

    /// Counters over the cache's life (stored at the last clean close plus this run's), and
    /// whether the stored ones were readable.
    pub fn lifetime(&self) -> (WcCounters, bool) {
        let st = self.lock();
        (
            st.stored.unwrap_or_default().plus(&st.stats),
            st.stored.is_some(),
        )
    }

    /// Store the lifetime counters (a clean close): one record and one fence.
    pub fn save_counters(&self) {
        let (life, _) = self.lifetime();
        self.region.write_nt(WC_COUNTERS_OFF, &life.encode());
        self.region.fence();
    }

    /// dm-writecache's `clear_stats` message: the lifetime counters restart from zero.
    pub fn clear_stats(&self) {
        let mut st = self.lock();
        st.stats = WcCounters::default();
        st.stored = Some(WcCounters::default());
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
    pub fn admission(&self) -> crate::admit::Admission {
        self.lock().admit.clone()
    }

    /// Walk the FAT volume through the cache's own read path.
    pub(crate) fn walk_fat(&self, st: &mut WState) -> Result<crate::fat::FatMap> {
        let s = u64::from(self.sb.sector_bytes);
        let mut read = |off: u64, buf: &mut [u8]| -> Result<()> {
            let first = off / s;
            let last = (off + buf.len() as u64).div_ceil(s);
            let mut tmp = vec![0u8; ((last - first) * s) as usize];
            if last > self.sb.blocks {
                return Err(Error::bad(format!(
                    "--admit fat-metadata: the volume names bytes past the device's end \
                     (offset {off})"
                )));
            }
            for (i, chunk) in tmp.chunks_mut(s as usize).enumerate() {
                self.read_locked(st, first + i as u64, chunk, false)?;
            }
            let at = (off - first * s) as usize;
            buf.copy_from_slice(&tmp[at..at + buf.len()]);
            Ok(())
        };
        crate::fat::FatMap::build(&mut read, s, self.sb.blocks)
    }

    /// The DRAM state agrees with itself (debug builds walk every slot).
    pub(crate) fn assert_invariants(&self, st: &WState) {
        assert!(st.seq <= SEQ_MAX);
        assert_eq!(st.slots.len(), self.layout.slots as usize);
        if cfg!(debug_assertions) {
            let used = st.slots.iter().filter(|s| s.is_some()).count();
            assert_eq!(used, st.index.len(), "every used slot is indexed");
            assert_eq!(
                used + st.free.len() + st.cleared.len(),
                st.slots.len(),
                "a slot is used, free or cleared"
            );
            for (&lba, &slot) in &st.index {
                assert_eq!(st.slots[slot as usize].map(|c| c.lba), Some(lba));
            }
        }
    }
}

fn read_superblock<R: Region + ?Sized>(region: &R) -> Result<WcSuperblock> {
    let min = WcLayout::new(crate::format::SLOTS_MIN, 512).region_bytes;
    if region.len() < min {
        return Err(Error::bad("not a write cache image (too short)"));
    }
    let mut b = [0u8; crate::wformat::WC_SB_BYTES];
    region.read(0, &mut b);
    WcSuperblock::decode(&b)
}

pub(crate) fn read_admit<R: Region + ?Sized>(region: &R) -> Result<Admit> {
    let mut b = vec![0u8; crate::wformat::WC_ADMIT_BYTES];
    region.read(crate::wformat::WC_ADMIT_OFF, &mut b);
    Admit::decode(&b)
}

pub(crate) fn read_wc_counters<R: Region + ?Sized>(region: &R) -> Option<WcCounters> {
    let mut b = [0u8; WC_COUNTERS_BYTES];
    region.read(WC_COUNTERS_OFF, &mut b);
    WcCounters::decode(&b)
}

/// The backing device's label names this cache, which is not detached.
fn check_label(sb: &WcSuperblock, backing: &dyn BlockDevice) -> Result<()> {
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
    let mut b = vec![0u8; sb.backing_block_bytes as usize];
    backing.read(sb.backing_blocks, &mut b)?;
    let label = Label::decode(&b)?;
    if label.identity != sb.identity || label.blocks != sb.backing_blocks {
        return Err(Error::bad(format!(
            "backing device belongs to another cache (label identity {:032x}, this cache \
             {:032x})",
            label.identity, sb.identity
        )));
    }
    if label.detached {
        return Err(Error::bad(
            "backing device was detached from this cache: it alone is the state now",
        ));
    }
    Ok(())
}

/// Small helpers of the protocol.
impl<R: Region> WriteCache<R> {
    pub(crate) fn store_entry(&self, slot: u32, e: Entry) {
        let [w0, w1] = encode_entry(slot, e);
        let off = self.layout.entry_off(slot);
        self.region.store_u64_nt(off, w0);
        self.region.store_u64_nt(off + 8, w1);
    }

    /// Clear a slot's entry (word 1: one atomic store); reusable after the next fence.
    pub(crate) fn clear_slot(&self, st: &mut WState, slot: u32) {
        self.region.store_u64_nt(self.layout.entry_off(slot) + 8, 0);
        let c = st.slots[slot as usize].take().expect("a used slot");
        let removed = st.index.remove(&c.lba);
        debug_assert_eq!(removed, Some(slot));
        st.order.remove(slot);
        if self.bug == Some(WcBug::ReuseBeforeFence) {
            st.free.push(slot); // Seeded bug: reusable before the clear is fenced
        } else {
            st.cleared.push(slot);
        }
    }

    /// Fence: every store so far is durable, so cleared slots may be reused.
    pub(crate) fn fence(&self, st: &mut WState) {
        self.region.fence();
        let cleared = std::mem::take(&mut st.cleared);
        st.free.extend(cleared);
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
        self.check_range(lba, data.len())?;
        let s = self.sb.sector_bytes as usize;
        let unit = self.unit_blocks() as usize * s;
        for (i, chunk) in data.chunks(unit).enumerate() {
            let at = lba + (i * unit / s) as u64;
            let blocks: Vec<Option<&[u8]>> = chunk.chunks(s).map(Some).collect();
            self.write_unit(at, &blocks)?;
        }
        Ok(())
    }

    /// Discard blocks: cached or admitted ones become tombstones (read as zeros, durable on
    /// return, punched or zeroed on the backing device at destage); the others are zeroed on
    /// the backing device (durable after the next flush).
    pub fn discard_blocks(&self, lba: u64, count: u64) -> Result<()> {
        let bytes = usize::try_from(count)
            .ok()
            .and_then(|c| c.checked_mul(self.sb.sector_bytes as usize));
        self.check_range(lba, bytes.ok_or_else(|| Error::bad("discard too long"))?)?;
        let unit = u64::from(self.unit_blocks());
        let mut at = lba;
        while at < lba + count {
            let n = unit.min(lba + count - at);
            self.write_unit(at, &vec![None; n as usize])?;
            self.lock().stats.discarded_blocks += n;
            at += n;
        }
        Ok(())
    }

    /// One unit: bypassed blocks to the backing device, the others into the cache together.
    fn write_unit(&self, lba: u64, blocks: &[Option<&[u8]>]) -> Result<()> {
        debug_assert!(blocks.len() <= self.unit_blocks() as usize);
        let mut st = self.lock();
        self.writable(&st)?;
        let mut cached: Vec<(u64, Option<&[u8]>)> = Vec::new();
        for (i, &b) in blocks.iter().enumerate() {
            let l = lba + i as u64;
            st.stats.write_blocks += 1;
            // Seeded bug bypass-keeps-cached-copy: a cached block the filter would pass by
            // goes to the backing device, its cached copy left in place.
            let passed_by = st.settings.cleaner || !st.admit.admits(l);
            let buggy = self.bug == Some(WcBug::BypassKeepsCachedCopy) && passed_by;
            if self.takes_locked(&st, l) && !buggy {
                cached.push((l, b));
            } else {
                st.stats.write_bypass += 1;
                self.backing_write_sector(&mut st, l, b)?;
                st.bypass_unflushed = true;
            }
        }
        let metadata = (lba..lba + blocks.len() as u64).any(|l| st.admit.admits(l));
        if !cached.is_empty() {
            let new = cached
                .iter()
                .filter(|b| !st.index.contains_key(&b.0))
                .count();
            self.make_room(&mut st, new, cached.len())?;
            self.commit_write(&mut st, &cached);
        }
        if metadata && matches!(st.admit, crate::admit::Admission::Fat(_)) {
            // The FAT or a directory changed: walk again (a new directory is admitted from
            // now on). A volume the walk cannot read keeps the last classification.
            if let Ok(m) = self.walk_fat(&mut st) {
                st.admit = crate::admit::Admission::Fat(m);
            }
        }
        self.after_write(&mut st)
    }

    /// Store `blocks` in new slots, fence, commit, fence; then clear the copies they replace.
    fn commit_write(&self, st: &mut WState, blocks: &[(u64, Option<&[u8]>)]) {
        let seq = st.seq + 1;
        assert!(seq <= SEQ_MAX, "sequence numbers exhausted");
        let mut placed = Vec::with_capacity(blocks.len());
        for &(lba, data) in blocks {
            let slot = st.free.pop().expect("make_room left a free slot");
            let e = Entry {
                lba,
                seq,
                tombstone: data.is_none(),
            };
            if self.bug == Some(WcBug::EntryBeforeData) {
                self.store_entry(slot, e); // Seeded bug: the data comes after the commit
            } else {
                if let Some(d) = data {
                    self.region.write_nt(self.layout.data_off(slot), d);
                }
                self.store_entry(slot, e);
            }
            placed.push((slot, e));
        }
        self.fence(st);
        for off in WC_COMMIT_OFF {
            self.region.store_u64_nt(off, encode_commit(seq));
        }
        if self.bug != Some(WcBug::CommitUnfenced) {
            self.fence(st);
        }
        if self.bug == Some(WcBug::EntryBeforeData) {
            self.fence(st);
            for (&(_, data), &(slot, _)) in blocks.iter().zip(&placed) {
                if let Some(d) = data {
                    self.region.write_nt(self.layout.data_off(slot), d); // Seeded bug
                }
            }
            self.fence(st);
        }
        st.seq = seq;
        self.install(st, &placed);
    }

    /// The committed copies replace the old ones in DRAM; the old slots are cleared.
    fn install(&self, st: &mut WState, placed: &[(u32, Entry)]) {
        let now = Instant::now();
        for &(slot, e) in placed {
            if st.index.contains_key(&e.lba) {
                st.stats.write_hits_committed += 1;
                let old = st.index[&e.lba];
                self.clear_slot(st, old);
            } else {
                st.stats.write_allocated += 1;
            }
            st.slots[slot as usize] = Some(Cached {
                lba: e.lba,
                tombstone: e.tombstone,
                written_at: now,
            });
            st.index.insert(e.lba, slot);
            st.order.inserted(slot);
        }
        self.assert_invariants(st);
    }

    /// Make room for a unit of `total` blocks of which `new` are not cached. Blocks are held
    /// in at most `slots - 1` slots: the spare one lets an overwrite land (copy-on-write)
    /// without a destage. A new block that finds no room destages one block (the seed's
    /// trigger; with dm-writecache's triggers on, with its neighbours); cleared slots are
    /// reused after a fence.
    fn make_room(&self, st: &mut WState, new: usize, total: usize) -> Result<()> {
        assert!(
            total <= self.layout.slots as usize / 2,
            "a unit fits the cache"
        );
        let capacity = self.layout.slots as usize - 1;
        let mut blocked = false;
        loop {
            let full = st.index.len() + new > capacity;
            if !full && st.free.len() >= total {
                break;
            }
            if !st.cleared.is_empty() && !full {
                self.fence(st);
                continue;
            }
            blocked = true;
            let before = st.index.len();
            self.destage_victims(st, 1, crate::wdestage::Trigger::Room)?;
            assert!(st.index.len() < before, "a destage frees a block");
        }
        if blocked {
            st.stats.writes_blocked_on_freelist += 1;
        }
        Ok(())
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
            let mut buf = vec![0u8; self.sb.backing_block_bytes as usize];
            self.backing.read(blk, &mut buf).and_then(|_| {
                match data {
                    Some(d) => buf[at..at + s].copy_from_slice(d),
                    None => buf[at..at + s].fill(0),
                }
                self.backing.write(blk, &buf)
            })
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
        match st.slots[slot as usize] {
            Some(Cached {
                tombstone: true, ..
            }) => buf.fill(0),
            _ => self.region.read(self.layout.data_off(slot), buf),
        }
        Ok(())
    }

    fn backing_read_sector(&self, lba: u64, buf: &mut [u8]) -> Result<()> {
        let s = self.sb.sector_bytes as usize;
        let spb = (self.sb.backing_block_bytes as usize / s) as u64;
        if spb == 1 {
            return self.backing.read(lba, buf);
        }
        let mut b = vec![0u8; self.sb.backing_block_bytes as usize];
        self.backing.read(lba / spb, &mut b)?;
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
