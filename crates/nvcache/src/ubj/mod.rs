//! UBJ (seed 001): the buffer cache is the journal. A slot holds one copy of one block in one of
//! the inventors' states; a commit freezes every dirty slot in place with a constant number of
//! fences; a write to a frozen block goes to a new slot; a checkpoint writes the newest frozen
//! copies to the backing device and frees the out-of-date ones.
//!
//! Protocol (docs/format.md, "nvcache: commit, checkpoint, recovery"), `k` the committed epoch:
//! - Write: the data and the entry {block, epoch k + 1} go to a free or clean slot, or in place
//!   to the block's dirty slot, with non-temporal stores and no fence.
//! - Commit: fence (every dirty slot's data and entry durable); both commit words := k + 1;
//!   fence. Two fences, whatever the number of blocks.
//! - Checkpoint: zero word 1 of every out-of-date slot, fence (a newer committed copy exists,
//!   and none may outlive its newer copy's entry); copy the chosen up-to-date slots to the
//!   backing device (a discard punches its hole), flush it; zero their word 1, fence. They
//!   become clean (or free when a dirty copy or a discard supersedes them).
//! - A slot freed by a checkpoint is reused only after that fence, so a new entry is never torn
//!   against an old committed one.
//! - Long discard (past the unit): the blocks no slot holds are discarded on the backing device
//!   and it is flushed; then the held ones become tombstones in one epoch; all under the lock.
//! - Recovery: recover.rs's table.

pub mod bugs;
pub mod format;
pub mod image;
pub mod inspect;
pub(crate) mod recover;

use crate::common::format::{encode_commit, Label, COMMIT_OFF, LBA_MAX, SEQ_MAX};
use crate::common::label::{check_label_names, check_region_holds, random_identity, write_label};
use crate::ubj::bugs::Bug;
use crate::ubj::format::{
    encode_entry, Entry, Layout, Settings, Superblock, BLOCK_BYTES, COUNTERS_BYTES, COUNTERS_OFF,
    SUPERBLOCK_OFF,
};
use nvstack_core::blockdev::{BlockDevice, Caps, Durability};
use nvstack_core::error::{Error, Result};
use nvstack_pmem::Region;
use nvstack_policy::{Policy, PolicyKind, Touch, NEVER};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

const B: usize = BLOCK_BYTES as usize;
/// Most blocks of one write (it lands whole in one epoch, so the cache must have room for it
/// after a full checkpoint: at most half the slots, and nvramdisk's unit).
pub const WRITE_BLOCKS_MAX: u32 = 64;

/// A slot's state in DRAM (the table in NVRAM holds only what recovery needs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotState {
    Free,
    /// The block's data as on the backing device; word 1 zero.
    Clean {
        lba: u64,
    },
    /// Written since the last commit; word 1 holds epoch k + 1.
    Dirty {
        lba: u64,
        tombstone: bool,
    },
    /// Committed in epoch `seq`; never changed in place, never evicted.
    Frozen {
        lba: u64,
        seq: u64,
        tombstone: bool,
    },
}

/// The copies of one block: at most one mutable (clean or dirty) and the newest frozen one.
#[derive(Clone, Copy, Debug, Default)]
struct Copies {
    current: Option<u32>,
    frozen: Option<u32>,
}

impl Copies {
    /// Whether a slot holds a copy of the block (dirty, clean or frozen).
    fn held(&self) -> bool {
        self.current.is_some() || self.frozen.is_some()
    }
}

/// This run's counters (`status` shows them over the cache's life: `lifetime`).
pub type Stats = crate::ubj::format::Counters;

/// Blocks per state, as `status` shows them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Census {
    pub free: u32,
    pub clean: u32,
    pub dirty: u32,
    pub frozen_up_to_date: u32,
    pub frozen_out_of_date: u32,
}

struct State {
    /// The last committed epoch.
    epoch: u64,
    slots: Vec<SlotState>,
    blocks: HashMap<u64, Copies>,
    free: Vec<u32>,
    dirty: Vec<u32>,
    /// Frozen out-of-date slots.
    stale: Vec<u32>,
    /// Clean slots, in the replacement policy's order.
    clean: Policy,
    touches: u64,
    /// When the oldest dirty block became dirty (autocommit-ms counts from it).
    dirty_since: Option<Instant>,
    /// When the last full checkpoint ended (checkpoint-ms counts from it).
    checkpointed_at: Instant,
    stats: Stats,
    /// Frozen slots, up to date and out of date: the watermarks' count, kept as slots change
    /// state instead of counted on every commit.
    frozen: usize,
    /// Set by a backing-device error: writes refused, data kept.
    error: Option<String>,
    /// The counters stored at the last clean close (None: absent or torn by a crash then).
    stored: Option<crate::ubj::format::Counters>,
}

/// A UBJ cache over `region` in front of `backing`.
pub struct Ubj<R: Region> {
    region: Arc<R>,
    backing: Arc<dyn BlockDevice>,
    layout: Layout,
    sb: Superblock,
    settings: Settings,
    state: Mutex<State>,
    /// A seeded bug (tests only show the checks can fail); None in every real use.
    bug: Option<Bug>,
    /// Entries recovery dropped at open (written after the last commit before a crash).
    dropped_at_open: usize,
    /// A serving daemon's counters (none in every other use).
    observer: std::sync::OnceLock<Arc<dyn crate::CacheObserver>>,
}

fn policy_kind(settings: &Settings) -> PolicyKind {
    match settings.policy {
        crate::ubj::format::PolicyName::Lru => PolicyKind::Lru,
        crate::ubj::format::PolicyName::Random => PolicyKind::Random,
        crate::ubj::format::PolicyName::Clock => PolicyKind::Clock,
    }
}

/// Write a new cache's superblock, commit words (epoch 0) and empty table into `region`, and
/// its label into `backing`'s last block. The caller has checked `--force`.
pub fn create<R: Region>(
    region: &R,
    backing: &dyn BlockDevice,
    settings: Settings,
) -> Result<Superblock> {
    settings.validate()?;
    if backing.block_bytes() != BLOCK_BYTES || backing.blocks() < 2 {
        return Err(Error::bad(format!(
            "backing device: {} blocks of {} bytes; nvcache needs 4096-byte blocks and at \
             least 2",
            backing.blocks(),
            backing.block_bytes()
        )));
    }
    let layout = Layout::fitting(region.len()).ok_or_else(|| {
        Error::bad(format!(
            "cache size {} bytes: too small for {} slots",
            region.len(),
            crate::ubj::format::SLOTS_MIN
        ))
    })?;
    let blocks = (backing.blocks() - 1).min(LBA_MAX);
    let sb = Superblock {
        slots: layout.slots,
        blocks,
        identity: random_identity(),
        settings,
    };
    write_label(backing, sb.identity, blocks)?;
    region.write_nt(
        crate::ubj::format::TABLE_OFF,
        &vec![0u8; (layout.data_off - crate::ubj::format::TABLE_OFF) as usize],
    );
    for off in COMMIT_OFF {
        region.store_u64_nt(off, encode_commit(0));
    }
    region.write_nt(
        COUNTERS_OFF,
        &crate::ubj::format::Counters::default().encode(),
    );
    region.write_nt(SUPERBLOCK_OFF, &sb.encode());
    region.fence();
    Ok(sb)
}

impl<R: Region> Ubj<R> {
    /// Open a cache: check the superblock and the backing label, then recover.
    pub fn open(
        region: Arc<R>,
        backing: Arc<dyn BlockDevice>,
        over: Option<Settings>,
    ) -> Result<Ubj<R>> {
        Ubj::open_seeded(region, backing, over, None)
    }

    /// Open with a seeded bug switched on (crash tests only).
    pub fn open_seeded(
        region: Arc<R>,
        backing: Arc<dyn BlockDevice>,
        over: Option<Settings>,
        bug: Option<Bug>,
    ) -> Result<Ubj<R>> {
        let mut sb_bytes = [0u8; crate::ubj::format::SB_BYTES];
        if region.len() < Layout::new(crate::ubj::format::SLOTS_MIN).region_bytes {
            return Err(Error::bad("not an nvcache image (too short)"));
        }
        region.read(SUPERBLOCK_OFF, &mut sb_bytes);
        let sb = Superblock::decode(&sb_bytes)?;
        let layout = Layout::new(sb.slots);
        check_region_holds(region.len(), layout.region_bytes, "nvcache image")?;
        check_label(&sb, &*backing)?;
        let settings = over.unwrap_or(sb.settings);
        settings.validate()?;
        let (state, dropped_at_open) = recover_state(&*region, &layout, &settings, bug)?;
        let ubj = Ubj {
            region,
            backing,
            layout,
            sb,
            settings,
            state: Mutex::new(state),
            bug,
            dropped_at_open,
            observer: std::sync::OnceLock::new(),
        };
        ubj.assert_invariants(&ubj.lock());
        Ok(ubj)
    }

    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    /// Entries the recovery at open dropped (uncommitted at a crash): it stored something.
    pub fn dropped_at_open(&self) -> usize {
        self.dropped_at_open
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn region(&self) -> &Arc<R> {
        &self.region
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while the lock was held leaves DRAM state the NVRAM may not match: refuse.
        self.state
            .lock()
            .expect("nvcache state poisoned by an earlier panic")
    }

    pub fn stats(&self) -> Stats {
        self.lock().stats
    }

    /// Tell `o` the live state now and at every change from now on (one observer per cache;
    /// false when one is already set).
    pub fn observe(&self, o: Arc<dyn crate::CacheObserver>) -> bool {
        let st = self.lock();
        let set = self.observer.set(o).is_ok();
        self.notify(&st, false);
        set
    }

    fn notify(&self, st: &State, checkpointing: bool) {
        if let Some(o) = self.observer.get() {
            o.changed(&crate::Live {
                dirty_blocks: st.dirty.len() as u64,
                held_slots: st.frozen as u64,
                commits: st.stats.commits,
                checkpoints: st.stats.checkpoints,
                writing_back: checkpointing,
                ..crate::Live::new(crate::CacheKind::Ubj)
            });
        }
    }

    /// The counters over the cache's life: those stored at the last clean close plus this
    /// run's, and whether the stored ones were readable.
    pub fn lifetime(&self) -> (Stats, bool) {
        let st = self.lock();
        let stored = st.stored.unwrap_or_default();
        (stored.plus(&st.stats), st.stored.is_some())
    }

    /// Store the lifetime counters (a clean close; calling it again stores the same sums).
    /// One record and one fence, outside every commit: a crash here tears only the counters.
    pub fn save_counters(&self) {
        let (life, _) = self.lifetime();
        self.region.write_nt(COUNTERS_OFF, &life.encode());
        self.region.fence();
    }

    /// Restart the lifetime counters from zero (dm-writecache's `clear_stats` message, for
    /// UBJ's counters), stored at once.
    pub fn clear_stats(&self) {
        let mut st = self.lock();
        st.stats = Stats::default();
        st.stored = Some(Stats::default());
        drop(st);
        self.save_counters();
        let (life, readable) = self.lifetime();
        assert!(
            readable && life == Stats::default(),
            "the counters restart from zero"
        );
    }

    /// Store the backing-device error record (one record, one fence; outside every commit).
    fn store_error(&self, epoch: u64, message: &str) {
        let unix_secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let rec = crate::ubj::format::BackingError {
            epoch,
            unix_secs,
            message: message.to_string(),
        };
        self.region
            .write_nt(crate::ubj::format::ERROR_OFF, &rec.encode());
        self.region.fence();
    }

    /// The last backing-device error stored in the image, if any.
    pub fn last_backing_error(&self) -> Option<crate::ubj::format::BackingError> {
        read_backing_error(&*self.region)
    }

    pub fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    pub fn error(&self) -> Option<String> {
        self.lock().error.clone()
    }

    pub fn census(&self) -> Census {
        let st = self.lock();
        let mut c = Census::default();
        for (slot, s) in st.slots.iter().enumerate() {
            match s {
                SlotState::Free => c.free += 1,
                SlotState::Clean { .. } => c.clean += 1,
                SlotState::Dirty { .. } => c.dirty += 1,
                SlotState::Frozen { .. } if st.stale.contains(&(slot as u32)) => {
                    c.frozen_out_of_date += 1
                }
                SlotState::Frozen { .. } => c.frozen_up_to_date += 1,
            }
        }
        c
    }

    /// The DRAM state agrees with itself (debug builds walk every slot).
    fn assert_invariants(&self, st: &State) {
        assert!(st.epoch <= SEQ_MAX);
        assert_eq!(st.slots.len(), self.layout.slots as usize);
        if cfg!(debug_assertions) {
            let clean = st
                .slots
                .iter()
                .filter(|s| matches!(s, SlotState::Clean { .. }));
            assert_eq!(
                clean.count(),
                st.clean.len() as usize,
                "clean slots are the policy's"
            );
            let frozen = st
                .slots
                .iter()
                .filter(|s| matches!(s, SlotState::Frozen { .. }));
            assert_eq!(frozen.count(), st.frozen, "the frozen count is kept");
            for (&lba, c) in &st.blocks {
                if let Some(s) = c.current {
                    let here = st.slots[s as usize];
                    assert!(
                        matches!(here, SlotState::Clean { lba: l } | SlotState::Dirty { lba: l, .. } if l == lba),
                        "{here:?}"
                    );
                }
                if let Some(s) = c.frozen {
                    let here = st.slots[s as usize];
                    assert!(
                        matches!(here, SlotState::Frozen { lba: l, .. } if l == lba),
                        "{here:?}"
                    );
                    assert!(
                        !st.stale.contains(&s),
                        "the newest frozen copy is not stale"
                    );
                }
            }
        }
    }
}

/// The backing device's label names this cache and the cache is not detached.
fn check_label(sb: &Superblock, backing: &dyn BlockDevice) -> Result<()> {
    if backing.block_bytes() != BLOCK_BYTES || backing.blocks() != sb.blocks + 1 {
        return Err(Error::bad(format!(
            "backing device: {} blocks of {} bytes, but this cache was created over {} \
             blocks of 4096 bytes (and a label block)",
            backing.blocks(),
            backing.block_bytes(),
            sb.blocks
        )));
    }
    check_label_names(backing, B, sb.identity, sb.blocks)
}

/// Build the DRAM state from the table (recover.rs decides; this stores its decisions).
fn recover_state<R: Region + ?Sized>(
    region: &R,
    layout: &Layout,
    settings: &Settings,
    bug: Option<Bug>,
) -> Result<(State, usize)> {
    let found = recover::scan(region, layout, bug == Some(Bug::RecoveryKeepsUncommitted))?;
    for &slot in &found.dropped {
        region.store_u64_nt(layout.entry_off(slot) + 8, 0);
    }
    region.fence();
    let mut st = State {
        epoch: found.epoch,
        slots: vec![SlotState::Free; layout.slots as usize],
        blocks: HashMap::new(),
        free: Vec::new(),
        dirty: Vec::new(),
        stale: Vec::new(),
        clean: Policy::new(policy_kind(settings), found.epoch ^ 0x5eed),
        touches: 0,
        dirty_since: None,
        checkpointed_at: Instant::now(),
        stats: Stats::default(),
        frozen: 0,
        error: None,
        stored: crate::ubj::format::Counters::decode(&read_counters(region)),
    };
    for (slot, kept) in found.kept.iter().enumerate() {
        let slot = slot as u32;
        let Some(e) = *kept else {
            st.free.push(slot);
            continue;
        };
        st.frozen += 1;
        st.slots[slot as usize] = SlotState::Frozen {
            lba: e.lba,
            seq: e.seq,
            tombstone: e.tombstone,
        };
        let copies = st.blocks.entry(e.lba).or_default();
        // Seeded bug recovery-oldest-copy: the older copy wins.
        let oldest_wins = bug == Some(Bug::RecoveryOldestCopy);
        match copies.frozen {
            Some(o) if (frozen_seq(&st.slots[o as usize]) > e.seq) != oldest_wins => {
                st.stale.push(slot)
            }
            Some(o) => {
                st.stale.push(o);
                copies.frozen = Some(slot);
            }
            None => copies.frozen = Some(slot),
        }
    }
    st.free.reverse(); // pop() hands out low slots first
    Ok((st, found.dropped.len()))
}

/// The backing-error record of `region`, if one was stored whole.
pub(crate) fn read_backing_error<R: Region + ?Sized>(
    region: &R,
) -> Option<crate::ubj::format::BackingError> {
    let mut b = [0u8; crate::ubj::format::ERROR_BYTES];
    region.read(crate::ubj::format::ERROR_OFF, &mut b);
    crate::ubj::format::BackingError::decode(&b)
}

/// The counters record's bytes.
pub(crate) fn read_counters<R: Region + ?Sized>(region: &R) -> [u8; COUNTERS_BYTES] {
    let mut b = [0u8; COUNTERS_BYTES];
    region.read(COUNTERS_OFF, &mut b);
    b
}

/// `slot`, the clean or dirty copy of `lba`, leaves the cache: the block forgets it (and is
/// forgotten itself when no frozen copy remains), and the slot is free.
fn release_current(st: &mut State, lba: u64, slot: u32) {
    let copies = st
        .blocks
        .get_mut(&lba)
        .expect("a cached slot's block is mapped");
    assert_eq!(copies.current, Some(slot));
    copies.current = None;
    if copies.frozen.is_none() {
        st.blocks.remove(&lba);
    }
    st.slots[slot as usize] = SlotState::Free;
    st.free.push(slot);
}

/// The next access's place in the clean slots' recency order.
fn next_touch(st: &mut State) -> Touch {
    st.touches += 1;
    Touch {
        seq: st.touches,
        next_write: NEVER,
    }
}

fn frozen_seq(s: &SlotState) -> u64 {
    match s {
        SlotState::Frozen { seq, .. } => *seq,
        other => unreachable!("not frozen: {other:?}"),
    }
}

impl<R: Region> Ubj<R> {
    fn store_entry(&self, slot: u32, e: Entry) {
        let [w0, w1] = encode_entry(slot, e);
        let off = self.layout.entry_off(slot);
        self.region.store_u64_nt(off, w0);
        self.region.store_u64_nt(off + 8, w1);
    }

    /// Free a slot's entry (word 1 alone: one atomic store).
    fn clear_entry(&self, slot: u32) {
        self.region.store_u64_nt(self.layout.entry_off(slot) + 8, 0);
    }

    fn fence(&self, st: &mut State) {
        self.region.fence();
        st.stats.fences += 1;
    }

    fn writable(&self, st: &State) -> Result<()> {
        match &st.error {
            Some(e) => Err(Error::env(format!(
                "nvcache is in its error state after a backing-device error ({e}): writes are \
                 refused, the data is kept"
            ))),
            None => Ok(()),
        }
    }

    fn check_range(&self, lba: u64, bytes: usize) -> Result<u64> {
        if !bytes.is_multiple_of(B) {
            return Err(Error::bad(format!(
                "{bytes} bytes: not a whole number of 4096-byte blocks"
            )));
        }
        let n = (bytes / B) as u64;
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
impl<R: Region> Ubj<R> {
    /// Write whole blocks; they land in one epoch (durable at the next commit).
    pub fn write_blocks(&self, lba: u64, data: &[u8]) -> Result<()> {
        let n = self.check_range(lba, data.len())?;
        if n > u64::from(self.unit_blocks()) {
            return Err(Error::bad(format!(
                "a write of {n} blocks: at most {} land in one epoch",
                self.unit_blocks()
            )));
        }
        let mut st = self.lock();
        self.writable(&st)?;
        self.make_room(&mut st, lba..lba + n)?;
        for (i, block) in data.chunks(B).enumerate() {
            self.write_one(&mut st, lba + i as u64, Some(block));
        }
        st.stats.user_bytes_written += data.len() as u64;
        let done = self.after_write(&mut st);
        self.notify(&st, false);
        done
    }

    /// Discard blocks: they read as zeros. Up to a unit (`unit_blocks`), as a write: tombstones
    /// that land whole in one epoch (durable at the next commit), their backing holes punched
    /// at checkpoint. Longer, not atomic: the blocks whose data is on the backing device alone
    /// are discarded there at once, and the backing device is flushed before the call
    /// returns, so they read as zeros after any crash from then on (a crash during the call
    /// may leave any of them old, or part old); the blocks the cache holds a copy of become
    /// tombstones in one epoch, as a write's blocks do. All under the lock. Why: mkfs
    /// discards the whole device, and a tombstone a block passed every block of it through
    /// the slots, their commits and checkpoints (docs/format.md 10.7: `up` with ext4 on
    /// 32 GiB took 19.4 s, now 0.50 s).
    pub fn discard_blocks(&self, lba: u64, count: u64) -> Result<()> {
        let bytes = usize::try_from(count).ok().and_then(|c| c.checked_mul(B));
        self.check_range(lba, bytes.ok_or_else(|| Error::bad("discard too long"))?)?;
        let mut st = self.lock();
        self.writable(&st)?;
        if count <= u64::from(self.unit_blocks()) {
            return self.tombstones(&mut st, lba..lba + count);
        }
        let held = self.discard_unheld(&mut st, lba, count)?;
        // At most as many as the cache has slots: room for them all after a full checkpoint.
        self.tombstones(&mut st, held.into_iter())
    }

    /// Tombstones for `lbas`, landing whole in one epoch as a write's blocks do (room made
    /// first: a forced commit comes before any of them, an autocommit after all).
    fn tombstones(&self, st: &mut State, lbas: impl Iterator<Item = u64> + Clone) -> Result<()> {
        self.make_room(st, lbas.clone())?;
        for b in lbas {
            self.write_one(st, b, None);
        }
        let done = self.after_write(st);
        self.notify(st, false);
        done
    }

    /// A long discard's blocks of which the cache holds no copy, discarded on the backing
    /// device in runs, which is then flushed; returns the blocks it holds, in order, for the
    /// caller's tombstones. Under the caller's lock, held on to the tombstones: no write
    /// caches one of the others, and the whole discard is one step to every other caller.
    fn discard_unheld(&self, st: &mut State, lba: u64, count: u64) -> Result<Vec<u64>> {
        let end = lba + count;
        let held = held_in(&st.blocks, lba..end);
        let mut runs = Vec::new();
        let mut at = lba;
        for &next in held.iter().chain(std::iter::once(&end)) {
            if next > at {
                runs.push((at, next - at));
            }
            at = next + 1;
        }
        if runs.is_empty() {
            return Ok(held); // every block held: nothing to punch or flush
        }
        let punch = || -> Result<()> {
            for &(from, n) in &runs {
                self.backing.discard(from, n)?;
            }
            if self.bug == Some(Bug::LongDiscardUnflushed) {
                return Ok(()); // Seeded bug: returns with the discards not yet durable
            }
            self.backing.flush()
        };
        punch().map_err(|e| self.backing_failed(st, "discard", e))?;
        debug_assert!(
            runs.iter().map(|r| r.1).sum::<u64>() + held.len() as u64 == count,
            "every block is punched or held"
        );
        Ok(held)
    }

    /// A backing-device error: the cache enters its error state (writes refused, nothing in
    /// NVRAM changed, so the data stays); the error to return names `what` failed.
    fn backing_failed(&self, st: &mut State, what: &str, e: Error) -> Error {
        st.error = Some(e.to_string());
        self.store_error(st.epoch, &e.to_string());
        Error::env(format!("nvcache {what}: backing device: {e}"))
    }

    /// Whether the cache holds a copy of block `lba` (dirty, clean or frozen): a long discard
    /// makes it a tombstone rather than discarding it on the backing device.
    pub fn holds(&self, lba: u64) -> bool {
        let st = self.lock();
        st.blocks.get(&lba).is_some_and(Copies::held)
    }

    /// Blocks one write may carry.
    pub fn unit_blocks(&self) -> u32 {
        self.sb.unit_blocks()
    }

    /// One block into its dirty slot (in place), its clean slot (in place, now dirty) or a new
    /// slot (copy-on-write when a frozen copy exists). `None` writes a discard.
    fn write_one(&self, st: &mut State, lba: u64, data: Option<&[u8]>) {
        let copies = st.blocks.get(&lba).copied().unwrap_or_default();
        let slot = match copies.current {
            Some(s) => s,
            None => st.free.pop().expect("make_room left a free slot"),
        };
        if let (Some(Bug::WriteFrozenInPlace), Some(f), Some(d)) = (self.bug, copies.frozen, data) {
            self.region.write_nt(self.layout.data_off(f), d); // Seeded bug: no copy-on-write
        }
        let was = st.slots[slot as usize];
        assert!(
            !matches!(was, SlotState::Frozen { .. }),
            "a frozen slot is never written"
        );
        if let SlotState::Clean { .. } = was {
            st.clean.remove(slot);
        }
        if let Some(d) = data {
            self.region.write_nt(self.layout.data_off(slot), d);
        }
        let tombstone = data.is_none();
        if !matches!(was, SlotState::Dirty { tombstone: t, .. } if t == tombstone) {
            let seq = st.epoch + 1;
            self.store_entry(
                slot,
                Entry {
                    lba,
                    seq,
                    tombstone,
                },
            );
        }
        if !matches!(was, SlotState::Dirty { .. }) {
            st.dirty.push(slot);
            st.dirty_since.get_or_insert_with(Instant::now);
        }
        st.slots[slot as usize] = SlotState::Dirty { lba, tombstone };
        st.blocks.entry(lba).or_default().current = Some(slot);
    }

    fn after_write(&self, st: &mut State) -> Result<()> {
        let limit = self.settings.autocommit_blocks;
        if limit > 0 && st.dirty.len() >= limit as usize {
            self.commit_locked(st)?;
        }
        Ok(())
    }

    /// Make sure every block of `lbas` without a mutable copy can get a slot, without splitting
    /// the write across epochs: a commit (and a checkpoint) happens before any of it is written.
    fn make_room(&self, st: &mut State, lbas: impl Iterator<Item = u64> + Clone) -> Result<()> {
        // Counted again after every step: an eviction may take one of the write's own blocks.
        let needed = |st: &State| {
            lbas.clone()
                .filter(|l| st.blocks.get(l).is_none_or(|c| c.current.is_none()))
                .count()
        };
        while st.free.len() < needed(st) {
            if let Some(victim) = st.clean.victim() {
                self.evict(st, victim);
                continue;
            }
            if self.bug == Some(Bug::EvictDirty) && !st.dirty.is_empty() {
                self.seeded_drop_dirty(st);
                continue;
            }
            if !st.dirty.is_empty() {
                if self.settings.autocommit_blocks == 0 && self.settings.autocommit_ms == 0 {
                    return Err(Error::NoSpace(format!(
                        "the cache is full of dirty and frozen blocks and autocommit is off: \
                         a commit now would split the caller's transaction ({} dirty)",
                        st.dirty.len()
                    )));
                }
                st.stats.commits_forced += 1;
                self.commit_locked(st)?;
            }
            self.checkpoint_locked(st, usize::MAX)?;
            let room = st.free.len() + st.clean.len() as usize;
            assert!(room >= lbas.clone().count(), "a full checkpoint frees room");
        }
        Ok(())
    }

    /// A clean slot leaves the cache (its word 1 is already zero and durable).
    fn evict(&self, st: &mut State, slot: u32) {
        let SlotState::Clean { lba } = st.slots[slot as usize] else {
            unreachable!("the policy holds only clean slots")
        };
        st.clean.remove(slot);
        release_current(st, lba, slot);
    }
}

/// Commit and checkpoint.
impl<R: Region> Ubj<R> {
    /// Freeze every dirty slot: two fences, whatever their number.
    pub fn commit(&self) -> Result<()> {
        let mut st = self.lock();
        self.writable(&st)?;
        self.commit_locked(&mut st)
    }

    fn commit_locked(&self, st: &mut State) -> Result<()> {
        if st.dirty.is_empty() {
            return Ok(());
        }
        let seq = st.epoch + 1;
        assert!(seq <= SEQ_MAX, "epochs exhausted");
        // Fence 1: every dirty slot's data and entry are durable before the commit word names
        // their epoch.
        if self.bug != Some(Bug::CommitBeforeDataFence) {
            self.fence(st);
        }
        if self.bug == Some(Bug::StaleFreedBeforeCommit) {
            self.seeded_free_stale_early(st);
        }
        for off in COMMIT_OFF {
            self.region.store_u64_nt(off, encode_commit(seq));
        }
        if self.bug != Some(Bug::CommitWordUnfenced) {
            self.fence(st);
        }
        st.epoch = seq;
        st.frozen += st.dirty.len();
        for slot in std::mem::take(&mut st.dirty) {
            let SlotState::Dirty { lba, tombstone } = st.slots[slot as usize] else {
                unreachable!("the dirty list holds dirty slots")
            };
            st.slots[slot as usize] = SlotState::Frozen {
                lba,
                seq,
                tombstone,
            };
            let copies = st
                .blocks
                .get_mut(&lba)
                .expect("a dirty slot's block is mapped");
            if let Some(old) = copies.frozen.replace(slot) {
                st.stale.push(old);
            }
            copies.current = None;
        }
        st.stats.commits += 1;
        st.dirty_since = None;
        self.assert_invariants(st);
        self.notify(st, false);
        self.after_commit(st)
    }

    fn after_commit(&self, st: &mut State) -> Result<()> {
        let slots = self.layout.slots as usize;
        let frozen = st.frozen;
        if frozen * 100 > slots * usize::from(self.settings.high_watermark_pct) {
            let low = slots * usize::from(self.settings.low_watermark_pct) / 100;
            let up_to_date = frozen - st.stale.len();
            self.checkpoint_locked(st, up_to_date.saturating_sub(low))?;
        }
        Ok(())
    }

    /// Write back every committed block (commits nothing: dirty blocks stay dirty).
    pub fn checkpoint(&self) -> Result<()> {
        let mut st = self.lock();
        self.writable(&st)?;
        self.checkpoint_locked(&mut st, usize::MAX)
    }

    /// Free every out-of-date slot, then write the `count` oldest up-to-date frozen blocks back.
    fn checkpoint_locked(&self, st: &mut State, count: usize) -> Result<()> {
        self.notify(st, true);
        let done = self.checkpoint_steps(st, count);
        self.notify(st, false);
        done
    }

    fn checkpoint_steps(&self, st: &mut State, count: usize) -> Result<()> {
        let stale = std::mem::take(&mut st.stale);
        st.frozen -= stale.len();
        for &slot in &stale {
            if self.bug != Some(Bug::StaleReusedUncleared) {
                self.clear_entry(slot);
            }
        }
        let mut chosen: Vec<(u64, u32)> = st
            .blocks
            .values()
            .filter_map(|c| c.frozen)
            .map(|s| (frozen_seq(&st.slots[s as usize]), s))
            .collect();
        chosen.sort_unstable();
        chosen.truncate(count);
        st.frozen -= chosen.len();
        // Out-of-date copies go before any newer copy's entry is zeroed.
        if self.bug != Some(Bug::StaleClearUnfenced) {
            self.fence(st);
        }
        for slot in stale {
            st.slots[slot as usize] = SlotState::Free;
            st.free.push(slot);
        }
        self.write_back(st, &chosen)?;
        for &(_, slot) in &chosen {
            self.clear_entry(slot);
        }
        self.fence(st);
        if self.bug == Some(Bug::CleanBeforeBackingFlush) && !chosen.is_empty() {
            self.backing.flush()?; // Seeded bug: the flush write_back skipped, after the clear
        }
        for &(_, slot) in &chosen {
            self.unfreeze(st, slot);
        }
        st.stats.checkpoints += 1;
        if count == usize::MAX {
            st.checkpointed_at = Instant::now();
        }
        self.assert_invariants(st);
        Ok(())
    }

    /// Copy frozen slots to the backing device and flush it; an error puts the cache in its
    /// error state (nothing in NVRAM changes, so the data stays).
    fn write_back(&self, st: &mut State, chosen: &[(u64, u32)]) -> Result<()> {
        let mut buf = vec![0u8; B];
        let mut step = || -> Result<u64> {
            let mut bytes = 0;
            for &(_, slot) in chosen {
                let SlotState::Frozen { lba, tombstone, .. } = st.slots[slot as usize] else {
                    unreachable!("chosen slots are frozen")
                };
                if tombstone && self.bug == Some(Bug::DiscardNotPunched) {
                    // Seeded bug: no hole punched.
                } else if tombstone {
                    self.backing.discard(lba, 1)?;
                } else {
                    self.region.read(self.layout.data_off(slot), &mut buf);
                    self.backing.write(lba, &buf)?;
                    bytes += B as u64;
                }
            }
            if !chosen.is_empty() && self.bug != Some(Bug::CleanBeforeBackingFlush) {
                self.backing.flush()?;
            }
            Ok(bytes)
        };
        match step() {
            Ok(bytes) => {
                st.stats.backing_bytes_written += bytes;
                Ok(())
            }
            Err(e) => Err(self.backing_failed(st, "checkpoint", e)),
        }
    }

    /// A written-back frozen slot becomes clean, or free when a dirty copy or a discard
    /// supersedes it.
    fn unfreeze(&self, st: &mut State, slot: u32) {
        let SlotState::Frozen { lba, tombstone, .. } = st.slots[slot as usize] else {
            unreachable!("chosen slots are frozen")
        };
        let copies = st
            .blocks
            .get_mut(&lba)
            .expect("a frozen slot's block is mapped");
        assert_eq!(copies.frozen, Some(slot));
        copies.frozen = None;
        if copies.current.is_none() && !tombstone {
            copies.current = Some(slot);
            st.slots[slot as usize] = SlotState::Clean { lba };
            let t = next_touch(st);
            st.clean.insert(slot, t);
        } else {
            if copies.current.is_none() {
                st.blocks.remove(&lba);
            }
            st.slots[slot as usize] = SlotState::Free;
            st.free.push(slot);
        }
    }
}

/// The blocks of `range` with a copy in the cache, in order: by probing each block or by
/// walking the map, whichever is shorter (a whole-device discard, or a short one).
fn held_in(blocks: &HashMap<u64, Copies>, range: std::ops::Range<u64>) -> Vec<u64> {
    let n = range.end - range.start;
    if n <= blocks.len() as u64 {
        return range
            .filter(|l| blocks.get(l).is_some_and(Copies::held))
            .collect();
    }
    let mut v: Vec<u64> = blocks
        .iter()
        .filter(|(l, c)| range.contains(l) && c.held())
        .map(|(&l, _)| l)
        .collect();
    v.sort_unstable();
    v
}

/// The read path.
impl<R: Region> Ubj<R> {
    /// Read whole blocks: the newest copy of each (dirty, clean or frozen), else the backing
    /// device's, which is then cached clean when a slot is free or clean.
    pub fn read_blocks(&self, lba: u64, out: &mut [u8]) -> Result<()> {
        self.check_range(lba, out.len())?;
        let mut st = self.lock();
        for (i, buf) in out.chunks_mut(B).enumerate() {
            self.read_one(&mut st, lba + i as u64, buf)?;
        }
        Ok(())
    }

    fn read_one(&self, st: &mut State, lba: u64, buf: &mut [u8]) -> Result<()> {
        let copies = st.blocks.get(&lba).copied().unwrap_or_default();
        if let Some(slot) = copies.current.or(copies.frozen) {
            st.stats.read_hits += 1;
            match st.slots[slot as usize] {
                SlotState::Dirty {
                    tombstone: true, ..
                }
                | SlotState::Frozen {
                    tombstone: true, ..
                } => buf.fill(0),
                SlotState::Clean { .. } => {
                    let t = next_touch(st);
                    st.clean.touch(slot, t);
                    self.region.read(self.layout.data_off(slot), buf);
                }
                _ => self.region.read(self.layout.data_off(slot), buf),
            }
            return Ok(());
        }
        st.stats.read_misses += 1;
        self.backing.read(lba, buf)?;
        if st.free.is_empty() {
            let Some(victim) = st.clean.victim() else {
                return Ok(()); // nothing to replace: served from the backing device uncached
            };
            self.evict(st, victim);
        }
        let slot = st.free.pop().expect("a slot was freed");
        self.region.write_nt(self.layout.data_off(slot), buf);
        st.slots[slot as usize] = SlotState::Clean { lba };
        st.blocks.entry(lba).or_default().current = Some(slot);
        let t = next_touch(st);
        st.clean.insert(slot, t);
        Ok(())
    }
}

impl<R: Region> Ubj<R> {
    /// Commit, write everything back, and label the backing device detached: it alone is the
    /// whole state from now on (and this cache can no longer open over it).
    pub fn detach(&self) -> Result<()> {
        let mut st = self.lock();
        self.writable(&st)?;
        self.commit_locked(&mut st)?;
        self.checkpoint_locked(&mut st, usize::MAX)?;
        let label = Label {
            identity: self.sb.identity,
            blocks: self.sb.blocks,
            detached: true,
        };
        self.backing.write(self.sb.blocks, &label.encode())?;
        self.backing.flush()
    }
}

impl<R: Region> BlockDevice for Ubj<R> {
    fn block_bytes(&self) -> u32 {
        BLOCK_BYTES
    }
    fn blocks(&self) -> u64 {
        self.sb.blocks
    }
    fn caps(&self) -> Caps {
        Caps {
            atomic_blocks: self.unit_blocks(),
            scattered: false,
            durability: Durability::OnFlush,
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
    /// A flush is a commit.
    fn flush(&self) -> Result<()> {
        self.commit()
    }
}

/// The seeded bugs' deviations that take more than a line (bugs.rs).
impl<R: Region> Ubj<R> {
    /// Seeded bug stale-freed-before-commit: the older frozen copy of every dirty block is
    /// freed before the commit word names the newer one.
    fn seeded_free_stale_early(&self, st: &State) {
        for &slot in &st.dirty {
            let SlotState::Dirty { lba, .. } = st.slots[slot as usize] else {
                unreachable!("the dirty list holds dirty slots")
            };
            if let Some(old) = st.blocks.get(&lba).and_then(|c| c.frozen) {
                self.clear_entry(old);
            }
        }
    }

    /// Seeded bug evict-dirty: a dirty block leaves the cache as if it were clean.
    fn seeded_drop_dirty(&self, st: &mut State) {
        let slot = st.dirty.remove(0);
        let SlotState::Dirty { lba, .. } = st.slots[slot as usize] else {
            unreachable!("the dirty list holds dirty slots")
        };
        self.clear_entry(slot);
        release_current(st, lba, slot);
    }
}

/// The timed triggers: `--autocommit-ms` (commit when the oldest dirty block is that old) and
/// `--checkpoint-ms` (write everything frozen back that often).
impl<R: Region> Ubj<R> {
    /// Act on the timed triggers that are due at `now`; a cache in its error state does nothing.
    pub fn tick(&self, now: Instant) -> Result<()> {
        let mut st = self.lock();
        if st.error.is_some() {
            return Ok(());
        }
        let ms = |v: u32| Duration::from_millis(u64::from(v));
        let a = self.settings.autocommit_ms;
        if a > 0
            && st
                .dirty_since
                .is_some_and(|t| now.duration_since(t) >= ms(a))
        {
            self.commit_locked(&mut st)?;
        }
        let c = self.settings.checkpoint_ms;
        if c > 0 && st.frozen > 0 && now.duration_since(st.checkpointed_at) >= ms(c) {
            self.checkpoint_locked(&mut st, usize::MAX)?;
        }
        Ok(())
    }

    /// How often a timer thread should call `tick` (None: no timed trigger is on): a quarter
    /// of the shortest period, so a trigger fires at most 25 % late.
    pub fn tick_period(&self) -> Option<Duration> {
        let periods = [self.settings.autocommit_ms, self.settings.checkpoint_ms];
        let shortest = periods.into_iter().filter(|&p| p > 0).min()?;
        Some(Duration::from_millis(u64::from(shortest / 4).max(1)))
    }
}

impl<R: Region + 'static> crate::common::ticker::Tick for Ubj<R> {
    fn tick(&self, now: Instant) -> Result<()> {
        Ubj::tick(self, now)
    }
    fn tick_period(&self) -> Option<Duration> {
        Ubj::tick_period(self)
    }
}

/// UBJ as served: `writeback` is a checkpoint (the committed blocks written back), `close` a
/// final commit with the counters stored.
impl<R: Region + 'static> crate::Cache for Ubj<R> {
    fn kind(&self) -> crate::CacheKind {
        crate::CacheKind::Ubj
    }
    fn observe(&self, o: Arc<dyn crate::CacheObserver>) -> bool {
        Ubj::observe(self, o)
    }
    fn writeback(&self) -> Result<u64> {
        let n = self.census().frozen_up_to_date;
        self.checkpoint()?;
        Ok(u64::from(n))
    }
    fn detach(&self) -> Result<u64> {
        let n = self.census().frozen_up_to_date;
        Ubj::detach(self)?;
        Ok(u64::from(n))
    }
    fn backing_bytes_written(&self) -> u64 {
        self.stats().backing_bytes_written
    }
    fn save_counters(&self) {
        Ubj::save_counters(self)
    }
    fn clear_stats(&self) -> Result<()> {
        Ubj::clear_stats(self);
        Ok(())
    }
    fn close(&self) -> Result<crate::Closed> {
        self.commit()?;
        self.save_counters();
        let (life, _) = self.lifetime();
        Ok(crate::Closed::Ubj {
            epoch: self.epoch(),
            life,
        })
    }
}
