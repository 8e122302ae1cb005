//! The client-cache models of seed 002 section 2.1, driven by block accesses in virtual time.
//!
//! Units: a block of `--block-size` bytes; every count is per block access. A read or write of a
//! block the cache does not hold is a miss and brings the block in (write-allocate; a write needs
//! no fill read because a partial write dirties the whole block). Server traffic is fills (read
//! misses) and write-backs; "net" traffic also counts the blocks still dirty at the end, as the
//! paper does ("all bytes left in the NVRAM at the end are eventually written back").
//!
//! ## volatile
//! One LRU cache of `volatile` blocks, clean or dirty. The least recently accessed block is
//! replaced whether clean or dirty, and written back at once if dirty. A cleaner runs every 5 s
//! of virtual time (ticks at `t0 + k * 5 s`, k >= 1, t0 the first access) and writes back every
//! block that became dirty more than `delayed_writeback` ago (strictly: `tick - dirtied > delay`);
//! a block re-written while dirty keeps the time it first became dirty, as Sprite ages its oldest
//! dirty data. Ticks due at or before an access run before it. A write flagged sync (blkparse
//! S/F, fio fsync) is written back as soon as it is made: the volatile cache cannot hold it.
//! With `delayed_writeback` off and no sync flags this is a plain write-back LRU cache.
//!
//! ## write-aside
//! The volatile LRU cache as above, but with no delayed write-back: every dirty block also has a
//! copy in the NVRAM (a set of at most `nvram` blocks, always a subset of the volatile cache),
//! which is only written, never read. A write puts the block in the volatile cache (evicting the
//! LRU block: written back and dropped from NVRAM if dirty) and then in the NVRAM; if the NVRAM is
//! full, the policy's victim is written back and leaves the NVRAM (its volatile copy stays,
//! clean). The NVRAM policy sees only writes (reads never reach the NVRAM). With no NVRAM, writes
//! are written through. Sync flags change nothing: NVRAM data is as durable as the server's.
//!
//! ## unified
//! A block lives in at most one memory. Dirty blocks live only in the NVRAM; clean blocks in
//! either. Writes go to the NVRAM (a clean volatile copy is invalidated). When the NVRAM must
//! make room, the policy's victim is written back if dirty, then compared with the volatile
//! cache: it takes a free volatile slot, or replaces the volatile LRU block if that one was
//! accessed less recently, or is dropped. A read miss fills a free volatile slot; else a free
//! NVRAM slot; else, if the NVRAM holds the least recently accessed block of both memories, the
//! NVRAM makes room (as above) and takes the block; else the volatile LRU block is dropped for
//! it. The volatile cache stays strictly LRU by access time (a block moved down from the NVRAM
//! keeps its access time). With no NVRAM, writes are written through and kept clean.
//!
//! ## NVRAM accesses and bus traffic (section 2.6)
//! `nvram_writes` counts blocks written into the NVRAM (application writes, and clean fills in
//! unified); `nvram_reads` blocks read out of it (reads served from it in unified, and a unified
//! block leaving it to be written back or moved down). Write-aside writes back from the
//! volatile copy, so it never reads the NVRAM. `bus_blocks` counts block copies on the client's
//! memory bus: every block delivered to or taken from the application, every fill, every
//! write-back, every extra copy into the NVRAM (write-aside) and every move between memories.

use crate::field::{Field, Invalid};
use crate::trace::{BlockAccess, BlockAccesses, Op};
use lru::{LruIndex, SeqOrder, Slots};
use nvstack_core::error::{Error, Result};
use nvstack_policy::{Policy, PolicyKind, SlotList, Touch, NEVER, NIL};
use rustc_hash::FxHashMap;

mod lru;

/// The cleaner's period (Sprite: every five seconds).
pub const CLEANER_PERIOD_NS: u64 = 5_000_000_000;
/// Sprite's delayed write-back.
pub const DELAYED_WRITEBACK_DEFAULT_S: u64 = 30;
/// The largest cache either memory may have, in blocks (4 TiB of 4 KiB blocks; slot numbers
/// are u32 and must stay below NIL). State grows with the blocks actually cached, never with
/// the configured size.
pub const CACHE_BLOCKS_MAX: u64 = 1 << 30;
/// The most block accesses an omniscient run takes (its next-write pass keeps 8 bytes each:
/// 8 GiB at this limit).
pub const OMNISCIENT_ACCESSES_MAX: u64 = 1 << 30;

const CLEAN: u64 = u64::MAX;

/// A client-cache model of section 2.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Model {
    Volatile,
    WriteAside,
    Unified,
}

impl Model {
    /// Every model, in the order the program lists them.
    pub const ALL: [Model; 3] = [Model::Volatile, Model::WriteAside, Model::Unified];

    /// The model named `name` (as [`Model::name`] spells it), if any.
    pub fn parse(name: &str) -> Option<Model> {
        Model::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The model's name, as `--model` and the JSON reports spell it.
    pub fn name(self) -> &'static str {
        match self {
            Model::Volatile => "volatile",
            Model::WriteAside => "write-aside",
            Model::Unified => "unified",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CacheConfig {
    pub model: Model,
    /// NVRAM replacement (the volatile cache is always LRU).
    pub policy: PolicyKind,
    pub volatile_blocks: u64,
    pub nvram_blocks: u64,
    /// Volatile model only: the cleaner's age threshold; None = no delayed write-back.
    pub delayed_writeback_ns: Option<u64>,
    pub seed: u64,
}

impl CacheConfig {
    /// The rules every configuration keeps, as errors naming the field at fault.
    pub fn validate(&self) -> std::result::Result<(), Invalid> {
        for (field, n) in [
            (Field::VolatileBlocks, self.volatile_blocks),
            (Field::NvramBlocks, self.nvram_blocks),
        ] {
            if n > CACHE_BLOCKS_MAX {
                return Err(Invalid::new(field).text(format!(
                    ": {n} blocks is more than the simulator's limit of {CACHE_BLOCKS_MAX}"
                )));
            }
        }
        match self.model {
            Model::Volatile => {
                if self.nvram_blocks != 0 {
                    return Err(Invalid::new(Field::Model)
                        .text(" volatile has no NVRAM: it requires ")
                        .mention(Field::NvramBlocks)
                        .text(" 0"));
                }
                if self.policy != PolicyKind::Lru {
                    return Err(Invalid::new(Field::Policy)
                        .text(format!(
                            " {}: the volatile model is LRU; ",
                            self.policy.name()
                        ))
                        .mention(Field::Policy)
                        .text(" chooses the NVRAM's replacement (write-aside, unified)"));
                }
            }
            Model::WriteAside | Model::Unified => {
                if self.policy == PolicyKind::Clock {
                    // The brute-force reference (reference.rs) has no CLOCK to check it against.
                    return Err(Invalid::new(Field::Policy).text(
                        " clock: the simulator models Baker's NVRAM policies (lru, random, \
                         omniscient); clock is the nvcache's clean-slot policy",
                    ));
                }
                if self.delayed_writeback_ns.is_some() {
                    return Err(Invalid::new(Field::DelayedWritebackNs)
                        .text(format!(
                            ": the {} model keeps dirty blocks in NVRAM and has no delayed write-back (only ",
                            self.model.name()
                        ))
                        .mention(Field::Model)
                        .text(" volatile takes it)"));
                }
            }
        }
        Ok(())
    }

    pub fn needs_next_writes(&self) -> bool {
        self.policy == PolicyKind::Omniscient && self.model != Model::Volatile
    }
}

/// What a run counted. Every count is in blocks.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CacheStats {
    pub block_accesses: u64,
    pub reads: u64,
    pub writes: u64,
    pub misses: u64,
    pub read_misses: u64,
    pub write_misses: u64,
    pub miss_ratio: f64,
    pub hits_volatile: u64,
    pub hits_nvram: u64,
    /// Blocks written to the server or disk during the run, for any reason below.
    pub writebacks: u64,
    /// ... because the volatile LRU replaced a dirty block.
    pub writebacks_eviction: u64,
    /// ... because the NVRAM replaced a dirty block.
    pub writebacks_replacement: u64,
    /// ... by the cleaner (delayed write-back).
    pub writebacks_cleaner: u64,
    /// ... because the write was synchronous (volatile model).
    pub writebacks_sync: u64,
    /// ... because there is no NVRAM to hold it (NVRAM models with `--nvram 0`).
    pub writebacks_through: u64,
    /// Writes to a block that was already dirty: the earlier data never leaves the cache.
    pub overwrites_absorbed: u64,
    /// Dirty blocks when the trace ends.
    pub dirty_at_end: u64,
    pub nvram_reads: u64,
    pub nvram_writes: u64,
    pub nvram_accesses: u64,
    /// Unified: blocks moved from the NVRAM down to the volatile cache.
    pub moves_to_volatile: u64,
    pub bus_blocks: u64,
    /// (writebacks + dirty_at_end) / writes.
    pub net_write_traffic: f64,
    /// (read_misses + writebacks + dirty_at_end) / block_accesses.
    pub net_total_traffic: f64,
}

/// Why a dirty block went back to the server: each has its own counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Writeback {
    Eviction,
    Replacement,
    Cleaner,
    Sync,
    Through,
}

impl CacheStats {
    /// A miss: a write's, or a read's, which also moves the block in from the disk (the fill).
    fn missed(&mut self, write: bool) {
        if write {
            self.write_misses += 1;
        } else {
            self.read_misses += 1;
            self.bus_blocks += 1;
        }
    }

    /// A block written back: counted in all, under its cause, and as one block on the bus
    /// (`finish` asserts the causes add up to all).
    fn wrote_back(&mut self, why: Writeback) {
        self.writebacks += 1;
        self.bus_blocks += 1;
        *match why {
            Writeback::Eviction => &mut self.writebacks_eviction,
            Writeback::Replacement => &mut self.writebacks_replacement,
            Writeback::Cleaner => &mut self.writebacks_cleaner,
            Writeback::Sync => &mut self.writebacks_sync,
            Writeback::Through => &mut self.writebacks_through,
        } += 1;
    }

    pub(crate) fn finish(&mut self) {
        self.misses = self.read_misses + self.write_misses;
        self.nvram_accesses = self.nvram_reads + self.nvram_writes;
        let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        self.miss_ratio = ratio(self.misses, self.block_accesses);
        self.net_write_traffic = ratio(self.writebacks + self.dirty_at_end, self.writes);
        self.net_total_traffic = ratio(
            self.read_misses + self.writebacks + self.dirty_at_end,
            self.block_accesses,
        );
        // Pair assertions: every access is a read or a write, hit or miss, and every block
        // write ends as exactly one of absorbed, written back, or still dirty.
        assert_eq!(self.reads + self.writes, self.block_accesses);
        assert_eq!(
            self.hits_volatile + self.hits_nvram + self.misses,
            self.block_accesses
        );
        assert_eq!(
            self.writebacks,
            self.writebacks_eviction
                + self.writebacks_replacement
                + self.writebacks_cleaner
                + self.writebacks_sync
                + self.writebacks_through
        );
        assert_eq!(
            self.writes,
            self.overwrites_absorbed + self.writebacks + self.dirty_at_end,
            "a block write was lost or counted twice"
        );
    }
}

/// `v[i] = x`, growing `v` with `fill` up to `i`: per-slot state grows with the slots taken.
fn set<T: Clone>(v: &mut Vec<T>, i: u32, x: T, fill: T) {
    let i = i as usize;
    if v.len() <= i {
        v.resize(i + 1, fill);
    }
    v[i] = x;
}

struct Volatile {
    delay_ns: Option<u64>,
    origin_ns: Option<u64>,
    cache: LruIndex<SlotList>,
    dirty_since: Vec<u64>,
    /// Dirty slots in the order they became dirty (the cleaner's queue).
    dirty: SlotList,
    /// The keys written back, in order, when a caller asked for them ([`Cache::log_writebacks`]).
    log: Option<Vec<u64>>,
}

impl Volatile {
    fn new(cfg: &CacheConfig) -> Volatile {
        Volatile {
            delay_ns: cfg.delayed_writeback_ns,
            origin_ns: None,
            cache: LruIndex::new(cfg.volatile_blocks),
            dirty_since: Vec::new(),
            dirty: SlotList::new(),
            log: None,
        }
    }

    fn logged(&mut self, key: u64) {
        if let Some(l) = self.log.as_mut() {
            l.push(key);
        }
    }

    /// Dirty slot `slot`, holding `key`, is written back for `why`: clean afterwards (and still
    /// cached, unless an eviction has just freed it).
    fn write_back(&mut self, slot: u32, key: u64, why: Writeback, s: &mut CacheStats) {
        debug_assert!(self.dirty_since[slot as usize] != CLEAN);
        self.dirty.remove(slot);
        self.dirty_since[slot as usize] = CLEAN;
        self.logged(key);
        s.wrote_back(why);
    }

    fn clean_due(&mut self, now_ns: u64, s: &mut CacheStats) {
        let (Some(delay), Some(origin)) = (self.delay_ns, self.origin_ns) else {
            return;
        };
        while let Some(slot) = self.dirty.front() {
            let since = self.dirty_since[slot as usize];
            debug_assert!(since != CLEAN && since >= origin);
            // The first tick strictly more than `delay` after the block became dirty.
            let after = since.saturating_add(delay);
            let tick = origin.saturating_add(
                ((after - origin) / CLEANER_PERIOD_NS + 1).saturating_mul(CLEANER_PERIOD_NS),
            );
            if tick > now_ns {
                break;
            }
            self.write_back(slot, self.cache.key(slot), Writeback::Cleaner, s);
        }
    }

    fn access(&mut self, a: &BlockAccess, t: Touch, s: &mut CacheStats) {
        self.origin_ns.get_or_insert(a.time_ns);
        self.clean_due(a.time_ns, s);
        let write = a.op == Op::Write;
        s.bus_blocks += 1; // to or from the application
        let slot = match self.cache.get(a.key) {
            Some(slot) => {
                s.hits_volatile += 1;
                self.cache.touch(slot, t.seq);
                slot
            }
            None => {
                s.missed(write);
                if self.cache.cap_blocks() == 0 {
                    if write {
                        self.logged(a.key);
                        s.wrote_back(Writeback::Through);
                    }
                    return;
                }
                self.insert(a.key, t.seq, s)
            }
        };
        if write {
            self.written(slot, a, s);
        }
    }

    /// A slot for a missed block, clean, the most recent; when the cache is full, the least
    /// recently used block leaves first (written back if dirty).
    fn insert(&mut self, key: u64, seq: u64, s: &mut CacheStats) -> u32 {
        if let Some((victim, victim_key)) = self.cache.make_room() {
            if self.dirty_since[victim as usize] != CLEAN {
                self.write_back(victim, victim_key, Writeback::Eviction, s);
            }
        }
        let slot = self.cache.insert(key, seq);
        set(&mut self.dirty_since, slot, CLEAN, CLEAN);
        slot
    }

    /// A write to a cached slot: it becomes dirty (or was: an overwrite absorbed); a sync
    /// write goes back at once.
    fn written(&mut self, slot: u32, a: &BlockAccess, s: &mut CacheStats) {
        let si = slot as usize;
        if self.dirty_since[si] == CLEAN {
            self.dirty_since[si] = a.time_ns;
            self.dirty.push_back(slot);
        } else {
            s.overwrites_absorbed += 1;
        }
        if a.sync {
            self.write_back(slot, a.key, Writeback::Sync, s);
        }
    }

    fn dirty_blocks(&self) -> u64 {
        u64::from(self.dirty.len())
    }
}

struct WriteAside {
    cache: LruIndex<SlotList>,
    /// The NVRAM slot holding the dirty copy of a volatile slot, or NIL (clean).
    nv_of: Vec<u32>,
    nslots: Slots,
    /// The volatile slot each NVRAM slot copies.
    v_of: Vec<u32>,
    policy: Policy,
}

impl WriteAside {
    fn new(cfg: &CacheConfig) -> WriteAside {
        WriteAside {
            cache: LruIndex::new(cfg.volatile_blocks),
            nv_of: Vec::new(),
            nslots: Slots::new(cfg.nvram_blocks),
            v_of: Vec::new(),
            policy: Policy::new(cfg.policy, cfg.seed),
        }
    }

    fn drop_nvram_copy(&mut self, vslot: u32) {
        let n = self.nv_of[vslot as usize];
        assert!(n != NIL && self.v_of[n as usize] == vslot);
        self.policy.remove(n);
        self.nslots.give(n);
        self.v_of[n as usize] = NIL;
        self.nv_of[vslot as usize] = NIL;
    }

    fn access(&mut self, a: &BlockAccess, t: Touch, s: &mut CacheStats) {
        let write = a.op == Op::Write;
        s.bus_blocks += 1; // to or from the application
        let vslot = match self.cache.get(a.key) {
            Some(v) => {
                s.hits_volatile += 1;
                self.cache.touch(v, t.seq);
                Some(v)
            }
            None => {
                s.missed(write);
                if self.cache.cap_blocks() == 0 {
                    None
                } else {
                    Some(self.insert(a.key, t.seq, s))
                }
            }
        };
        if !write {
            return;
        }
        let Some(v) = vslot else {
            // No volatile cache to hold even a copy: the write goes straight to the server.
            s.wrote_back(Writeback::Through);
            return;
        };
        self.written(v, t, s);
    }

    /// A volatile slot for a missed block, the most recent; when the cache is full, the least
    /// recently used block leaves first (its NVRAM copy written back, if any).
    fn insert(&mut self, key: u64, seq: u64, s: &mut CacheStats) -> u32 {
        if let Some((victim, _)) = self.cache.make_room() {
            if self.nv_of[victim as usize] != NIL {
                self.drop_nvram_copy(victim);
                s.wrote_back(Writeback::Eviction);
            }
        }
        let v = self.cache.insert(key, seq);
        set(&mut self.nv_of, v, NIL, NIL);
        v
    }

    /// A write to volatile slot `v`: its NVRAM copy is overwritten, or one is made (the
    /// policy's victim written back when the NVRAM is full); with no NVRAM, written through.
    fn written(&mut self, v: u32, t: Touch, s: &mut CacheStats) {
        let n = self.nv_of[v as usize];
        if n != NIL {
            s.overwrites_absorbed += 1;
            s.nvram_writes += 1;
            s.bus_blocks += 1;
            self.policy.touch(n, t);
            return;
        }
        if self.nslots.cap() == 0 {
            s.wrote_back(Writeback::Through);
            return;
        }
        if self.nslots.full() {
            let victim = self.policy.victim().expect("a full NVRAM has a victim");
            let vv = self.v_of[victim as usize];
            self.drop_nvram_copy(vv);
            s.wrote_back(Writeback::Replacement);
        }
        let n = self.nslots.take();
        set(&mut self.v_of, n, v, NIL);
        self.nv_of[v as usize] = n;
        self.policy.insert(n, t);
        s.nvram_writes += 1;
        s.bus_blocks += 1;
    }

    fn dirty_blocks(&self) -> u64 {
        self.nslots.used()
    }
}

struct Unified {
    /// Clean blocks only, ordered by last access: a block moved down from the NVRAM keeps its
    /// access time, so it may enter older than the blocks already there.
    volatile: LruIndex<SeqOrder>,
    /// Ordered by last access (blocks enter the NVRAM only when accessed, so a list
    /// suffices); the policy may order them differently.
    nvram: LruIndex<SlotList>,
    nseq: Vec<u64>,
    ndirty: Vec<bool>,
    policy: Policy,
    dirty: u64,
}

impl Unified {
    fn new(cfg: &CacheConfig) -> Unified {
        Unified {
            volatile: LruIndex::new(cfg.volatile_blocks),
            nvram: LruIndex::new(cfg.nvram_blocks),
            nseq: Vec::new(),
            ndirty: Vec::new(),
            policy: Policy::new(cfg.policy, cfg.seed),
            dirty: 0,
        }
    }

    /// The volatile cache's least recently accessed block: (its last access, its slot).
    fn volatile_lru(&self) -> Option<(u64, u32)> {
        let v = self.volatile.least_recent()?;
        Some((self.volatile.recency().seq(v), v))
    }

    /// Make room in a full NVRAM: the policy's victim is written back if dirty, then moved
    /// down to the volatile cache if that has room or holds an older block.
    fn nvram_evict(&mut self, s: &mut CacheStats) {
        let n = self.policy.victim().expect("a full NVRAM has a victim");
        let ni = n as usize;
        let seq = self.nseq[ni];
        self.policy.remove(n);
        let key = self.nvram.remove(n);
        let was_dirty = self.ndirty[ni];
        if was_dirty {
            self.ndirty[ni] = false;
            self.dirty -= 1;
            s.wrote_back(Writeback::Replacement);
        }
        let move_down = if self.volatile.cap_blocks() == 0 {
            false
        } else if !self.volatile.full() {
            true
        } else {
            let (lru_seq, lru) = self.volatile_lru().expect("a full cache has an LRU block");
            if lru_seq < seq {
                self.volatile.remove(lru);
                true
            } else {
                false
            }
        };
        if was_dirty || move_down {
            s.nvram_reads += 1;
        }
        if move_down {
            self.volatile.insert(key, seq);
            s.moves_to_volatile += 1;
            s.bus_blocks += 1;
        }
    }

    fn nvram_insert(&mut self, key: u64, t: Touch, dirty: bool, s: &mut CacheStats) {
        // A block lives in at most one memory.
        debug_assert_eq!(self.volatile.get(key), None);
        let n = self.nvram.insert(key, t.seq);
        set(&mut self.nseq, n, t.seq, 0);
        set(&mut self.ndirty, n, dirty, false);
        if dirty {
            self.dirty += 1;
        }
        self.policy.insert(n, t);
        s.nvram_writes += 1;
    }

    fn access(&mut self, a: &BlockAccess, t: Touch, s: &mut CacheStats) {
        let write = a.op == Op::Write;
        s.bus_blocks += 1; // to or from the application
        if let Some(n) = self.nvram.get(a.key) {
            debug_assert_eq!(self.volatile.get(a.key), None);
            self.nvram_hit(n, write, t, s);
        } else if let Some(v) = self.volatile.get(a.key) {
            s.hits_volatile += 1;
            if write {
                // The clean volatile copy is superseded; the new data goes to the NVRAM.
                self.volatile.remove(v);
                self.write_to_nvram(a.key, t, s);
            } else {
                self.volatile.touch(v, t.seq);
            }
        } else if write {
            s.write_misses += 1;
            self.write_to_nvram(a.key, t, s);
        } else {
            s.read_misses += 1;
            s.bus_blocks += 1; // the fill
            self.read_fill(a.key, t, s);
        }
    }

    fn nvram_hit(&mut self, n: u32, write: bool, t: Touch, s: &mut CacheStats) {
        let ni = n as usize;
        s.hits_nvram += 1;
        self.policy.touch(n, t);
        self.nvram.touch(n, t.seq);
        self.nseq[ni] = t.seq;
        if write {
            s.nvram_writes += 1;
            if self.ndirty[ni] {
                s.overwrites_absorbed += 1;
            } else {
                self.ndirty[ni] = true;
                self.dirty += 1;
            }
        } else {
            s.nvram_reads += 1;
        }
    }

    fn write_to_nvram(&mut self, key: u64, t: Touch, s: &mut CacheStats) {
        if self.nvram.cap_blocks() == 0 {
            s.wrote_back(Writeback::Through);
            // Kept as a clean block where a clean block may live.
            self.place_clean_in_volatile(key, t.seq);
            return;
        }
        if self.nvram.full() {
            self.nvram_evict(s);
        }
        self.nvram_insert(key, t, true, s);
    }

    fn place_clean_in_volatile(&mut self, key: u64, seq: u64) {
        if self.volatile.cap_blocks() == 0 {
            return;
        }
        // A clean block leaves with nothing to settle.
        let _ = self.volatile.make_room();
        self.volatile.insert(key, seq);
    }

    fn read_fill(&mut self, key: u64, t: Touch, s: &mut CacheStats) {
        if self.volatile.cap_blocks() > 0 && !self.volatile.full() {
            self.volatile.insert(key, t.seq);
            return;
        }
        if self.nvram.cap_blocks() == 0 {
            self.place_clean_in_volatile(key, t.seq);
            return;
        }
        if !self.nvram.full() {
            self.nvram_insert(key, t, false, s);
            return;
        }
        let nvram_oldest = self.nseq[self.nvram.least_recent().expect("full NVRAM") as usize];
        let nvram_holds_lru = match self.volatile_lru() {
            None => true,
            Some((vseq, _)) => nvram_oldest < vseq,
        };
        if nvram_holds_lru {
            self.nvram_evict(s);
            // The victim may have moved down into the volatile cache; the new block still goes
            // to the NVRAM, where room was made.
            self.nvram_insert(key, t, false, s);
        } else {
            self.place_clean_in_volatile(key, t.seq);
        }
    }
}

enum ModelState {
    Volatile(Volatile),
    WriteAside(WriteAside),
    Unified(Unified),
}

/// One cache being simulated.
pub struct Cache {
    state: ModelState,
    stats: CacheStats,
    seq: u64,
}

impl Cache {
    pub fn new(cfg: &CacheConfig) -> Result<Cache> {
        cfg.validate()?;
        let state = match cfg.model {
            Model::Volatile => ModelState::Volatile(Volatile::new(cfg)),
            Model::WriteAside => ModelState::WriteAside(WriteAside::new(cfg)),
            Model::Unified => ModelState::Unified(Unified::new(cfg)),
        };
        Ok(Cache {
            state,
            stats: CacheStats::default(),
            seq: 0,
        })
    }

    /// One block access. `next_write` is the index of this block's next write access (from
    /// [`next_writes`]), or [`NEVER`]; only the omniscient policy reads it.
    #[inline]
    pub fn access(&mut self, a: &BlockAccess, next_write: u64) {
        self.seq += 1;
        let s = &mut self.stats;
        s.block_accesses += 1;
        match a.op {
            Op::Read => s.reads += 1,
            Op::Write => s.writes += 1,
        }
        let t = Touch {
            seq: self.seq,
            next_write,
        };
        match &mut self.state {
            ModelState::Volatile(m) => m.access(a, t, s),
            ModelState::WriteAside(m) => m.access(a, t, s),
            ModelState::Unified(m) => m.access(a, t, s),
        }
    }

    /// Keep the keys the volatile model writes back (eviction, cleaner, sync, write-through),
    /// for a caller that replays them on a device (`nvstack sim nvfat`). Other models refuse.
    pub fn log_writebacks(&mut self) -> Result<()> {
        match &mut self.state {
            ModelState::Volatile(m) => {
                m.log = Some(Vec::new());
                Ok(())
            }
            _ => Err(Error::bad(
                "write-back logging is for the volatile model only",
            )),
        }
    }

    /// The counts so far (the finishing counts come from [`Cache::finish`]).
    pub fn stats(&self) -> &CacheStats {
        &self.stats
    }

    /// The keys written back since the last call (empty unless logging).
    pub fn take_writebacks(&mut self) -> Vec<u64> {
        match &mut self.state {
            ModelState::Volatile(Volatile { log: Some(l), .. }) => std::mem::take(l),
            _ => Vec::new(),
        }
    }

    /// The keys still dirty, oldest first (what an unmount would write back).
    pub fn dirty_keys(&self) -> Vec<u64> {
        match &self.state {
            ModelState::Volatile(m) => m.dirty.iter().map(|slot| m.cache.key(slot)).collect(),
            _ => Vec::new(),
        }
    }

    pub fn finish(mut self) -> CacheStats {
        self.stats.dirty_at_end = match &self.state {
            ModelState::Volatile(m) => m.dirty_blocks(),
            ModelState::WriteAside(m) => m.dirty_blocks(),
            ModelState::Unified(m) => m.dirty,
        };
        self.stats.finish();
        self.stats
    }
}

/// For each access, the index of the same block's next write access after it, or [`NEVER`].
pub fn next_writes(accesses: &[(u64, bool)]) -> Vec<u64> {
    let mut b = NextWrites::default();
    for &(key, write) in accesses {
        b.push(key, write);
    }
    b.finish()
}

/// [`next_writes`] in one forward pass over a streamed trace, keeping one integer per access
/// (the answer) and one map entry per block: the accesses themselves are never stored.
///
/// How: until a block's next write is seen, its waiting accesses form a chain threaded through
/// the answer vector (each waiting slot holds the index of the previous waiting access of the
/// same block, [`NEVER`] ending the chain; the map holds the newest). A write of the block
/// walks the chain, replacing every link with its own index, then starts a new chain of one.
/// Every access is resolved once, so the pass is O(accesses).
#[derive(Default)]
pub struct NextWrites {
    next: Vec<u64>,
    /// Per block: the newest access still waiting for the block's next write.
    waiting: FxHashMap<u64, u64>,
}

impl NextWrites {
    pub fn len(&self) -> u64 {
        self.next.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.next.is_empty()
    }

    pub fn push(&mut self, key: u64, write: bool) {
        let i = self.next.len() as u64;
        assert!(i < NEVER, "access index collides with the NEVER sentinel");
        let newest = self.waiting.insert(key, i);
        if write {
            if let Some(head) = newest {
                self.resolve(head, i);
            }
            self.next.push(NEVER);
        } else {
            self.next.push(newest.unwrap_or(NEVER));
        }
    }

    /// Set every access of the chain from `head` to `value`.
    fn resolve(&mut self, head: u64, value: u64) {
        let mut at = head;
        loop {
            let link = self.next[at as usize];
            // A chain only links back to older waiting accesses.
            assert!(link == NEVER || link < at, "chain link {link} at {at}");
            self.next[at as usize] = value;
            if link == NEVER {
                break;
            }
            at = link;
        }
    }

    pub fn finish(mut self) -> Vec<u64> {
        let heads: Vec<u64> = self.waiting.values().copied().collect();
        for head in heads {
            self.resolve(head, NEVER);
        }
        self.next
    }
}

/// What `simulate` returns: the counts, and what was read.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CacheRun {
    pub config: CacheConfig,
    pub requests: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub skipped_lines: u64,
    pub stats: CacheStats,
}

/// Run one cache over a trace. `open` opens the trace afresh: the omniscient policy reads it
/// twice (its next-write pass, then the simulation), every other configuration once.
pub fn simulate(open: &dyn Fn() -> Result<BlockAccesses>, cfg: &CacheConfig) -> Result<CacheRun> {
    simulate_with(open, cfg, false)
}

/// [`simulate`], with the trace's reads left out when `writes_only` (an NVRAM write buffer that
/// never sees reads, as in the paper's Figure 3).
pub fn simulate_with(
    open: &dyn Fn() -> Result<BlockAccesses>,
    cfg: &CacheConfig,
    writes_only: bool,
) -> Result<CacheRun> {
    let keep =
        |a: &Result<BlockAccess>| !writes_only || a.as_ref().map_or(true, |a| a.op == Op::Write);
    let mut cache = Cache::new(cfg)?;
    let next = if cfg.needs_next_writes() {
        let mut b = NextWrites::default();
        for a in open()?.filter(keep) {
            let a = a?;
            if b.len() >= OMNISCIENT_ACCESSES_MAX {
                return Err(Error::bad(format!(
                    "the omniscient policy takes at most {OMNISCIENT_ACCESSES_MAX} block accesses"
                )));
            }
            b.push(a.key, a.op == Op::Write);
        }
        Some(b.finish())
    } else {
        None
    };
    let mut src = open()?;
    let changed = |src: &BlockAccesses| {
        Error::bad(format!(
            "{}: the trace changed between the two passes",
            src.path().display()
        ))
    };
    let mut i = 0usize;
    while let Some(a) = src.next() {
        if !keep(&a) {
            continue;
        }
        let a = a?;
        let nw = match &next {
            Some(n) => match n.get(i) {
                Some(&nw) => nw,
                None => return Err(changed(&src)),
            },
            None => NEVER,
        };
        cache.access(&a, nw);
        i += 1;
    }
    if next.as_ref().is_some_and(|n| n.len() != i) {
        return Err(changed(&src));
    }
    Ok(CacheRun {
        config: cfg.clone(),
        requests: src.requests,
        read_bytes: src.read_bytes,
        write_bytes: src.write_bytes,
        skipped_lines: src.skipped_lines(),
        stats: cache.finish(),
    })
}

/// One cache run as `nvstack sim cache --json` prints it and the Python package's
/// `nvstack.sim.cache` returns it: the settings, the trace's counts and the statistics.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CacheReport {
    pub trace: String,
    pub format: crate::trace::TraceFormat,
    pub block_bytes: u32,
    pub model: Model,
    pub policy: PolicyKind,
    pub volatile_bytes: u64,
    pub nvram_bytes: u64,
    pub delayed_writeback_s: Option<u64>,
    pub seed: u64,
    pub requests: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub skipped_lines: u64,
    #[serde(flatten)]
    pub stats: CacheStats,
}

impl CacheReport {
    /// The report of `run` over `trace` (read as `format` in blocks of `block_bytes`).
    pub fn new(
        trace: &std::path::Path,
        format: crate::trace::TraceFormat,
        block_bytes: u32,
        run: CacheRun,
    ) -> CacheReport {
        let c = &run.config;
        let b = u64::from(block_bytes);
        CacheReport {
            trace: trace.display().to_string(),
            format,
            block_bytes,
            model: c.model,
            policy: c.policy,
            volatile_bytes: c.volatile_blocks * b,
            nvram_bytes: c.nvram_blocks * b,
            delayed_writeback_s: c.delayed_writeback_ns.map(|ns| ns / 1_000_000_000),
            seed: c.seed,
            requests: run.requests,
            read_bytes: run.read_bytes,
            write_bytes: run.write_bytes,
            skipped_lines: run.skipped_lines,
            stats: run.stats,
        }
    }
}
