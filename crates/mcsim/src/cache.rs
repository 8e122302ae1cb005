//! The cache hierarchy of Table II: private L1 and L2 per core and one shared L3, each
//! write-back, write-allocate and LRU within a set. A line's dirty data lives in exactly one
//! level: a fill moves it up to L1 and a dirty victim moves it down, so a flush finds it once.
//! Coherence between cores is not modelled (the workloads share no written lines).

use crate::config::{CacheLevel, Config};

/// Where an access was served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    L1,
    L2,
    L3,
    Memory,
}

/// One way of a set: `tag` is line + 1 (0 = empty), `version` the data of a dirty line (which
/// store wrote it last), 0 when clean. Tag and data side by side: a set is one run of memory.
#[derive(Clone, Copy, Default)]
struct Slot {
    tag: u64,
    version: u64,
}

/// One set-associative cache. Each set keeps its ways in recency order, most recent first
/// (a hit moves to the front, the last way is the victim), so no ages are stored.
struct Cache {
    set_mask: u64,
    ways: usize,
    slots: Vec<Slot>,
}

/// A line leaving a cache, with its data if dirty.
type Victim = Option<(u64, u64)>;

impl Cache {
    fn new(level: &CacheLevel, line_bytes: u32, scale: u64) -> Cache {
        let lines = (level.bytes * scale / u64::from(line_bytes)) as usize;
        let ways = level.ways as usize;
        let sets = (lines / ways) as u64;
        assert!(sets.is_power_of_two(), "validated: sets are a power of two");
        Cache {
            set_mask: sets - 1,
            ways,
            slots: vec![Slot::default(); lines],
        }
    }

    fn set(&self, line: u64) -> std::ops::Range<usize> {
        let base = (line & self.set_mask) as usize * self.ways;
        base..base + self.ways
    }

    fn position(&self, line: u64) -> Option<usize> {
        let set = self.set(line);
        let i = self.slots[set.clone()]
            .iter()
            .position(|s| s.tag == line + 1)?;
        Some(set.start + i)
    }

    /// The slot holding `line`, made most recently used (moved to the set's front).
    fn find(&mut self, line: u64) -> Option<usize> {
        let at = self.position(line)?;
        let start = self.set(line).start;
        self.slots[start..=at].rotate_right(1);
        Some(start)
    }

    /// Put `line` in (it must be absent) at the front; returns the dirty victim, if any.
    fn insert(&mut self, line: u64, version: u64) -> Victim {
        let set = self.set(line);
        let last = self.slots[set.end - 1];
        let victim = (last.tag != 0 && last.version != 0).then(|| (last.tag - 1, last.version));
        self.slots[set.clone()].rotate_right(1);
        self.slots[set.start] = Slot {
            tag: line + 1,
            version,
        };
        victim
    }

    /// Make `line` dirty with `version` here, inserting it if absent.
    fn put_dirty(&mut self, line: u64, version: u64) -> Victim {
        match self.find(line) {
            Some(slot) => {
                self.slots[slot].version = version;
                None
            }
            None => self.insert(line, version),
        }
    }

    fn contains(&self, line: u64) -> bool {
        self.position(line).is_some()
    }

    /// Whether inserting `line` would push out a dirty line.
    fn would_evict_dirty(&self, line: u64) -> bool {
        let last = self.slots[self.set(line).end - 1];
        last.tag != 0 && last.version != 0
    }

    /// Take the dirty data of `line` (it stays, clean).
    fn take(&mut self, line: u64) -> u64 {
        match self.position(line) {
            Some(slot) => std::mem::take(&mut self.slots[slot].version),
            None => 0,
        }
    }

    /// Take the dirty data of the line in `slot` (it stays, clean).
    fn take_at(&mut self, slot: usize) -> u64 {
        std::mem::take(&mut self.slots[slot].version)
    }

    fn dirty_lines(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.slots
            .iter()
            .filter(|s| s.tag != 0 && s.version != 0)
            .map(|s| (s.tag - 1, s.version))
    }
}

/// Every core's L1 and L2 and the shared L3.
pub struct Hierarchy {
    l1: Vec<Cache>,
    l2: Vec<Cache>,
    l3: Cache,
    /// Dirty lines pushed out of L3, to be written to memory by the caller.
    pub writebacks: Vec<(u64, u64)>,
    pub hits: [u64; 4],
}

impl Hierarchy {
    pub fn new(cfg: &Config) -> Hierarchy {
        let cores = cfg.cores as usize;
        Hierarchy {
            l1: (0..cores)
                .map(|_| Cache::new(&cfg.l1, cfg.line_bytes, 1))
                .collect(),
            l2: (0..cores)
                .map(|_| Cache::new(&cfg.l2, cfg.line_bytes, 1))
                .collect(),
            l3: Cache::new(&cfg.l3_per_core, cfg.line_bytes, u64::from(cfg.cores)),
            writebacks: Vec::new(),
            hits: [0; 4],
        }
    }

    /// A load (`version` 0) or a store (`version` the store's data) of `line` by `core`.
    pub fn access(&mut self, core: usize, line: u64, version: u64) -> Served {
        if let Some(slot) = self.l1[core].find(line) {
            if version != 0 {
                self.l1[core].slots[slot].version = version;
            }
            self.hits[0] += 1;
            return Served::L1;
        }
        // The line's dirty data, if a lower level has it, moves up into L1 with it.
        let (served, data) = if let Some(slot) = self.l2[core].find(line) {
            (Served::L2, self.l2[core].take_at(slot))
        } else if let Some(slot) = self.l3.find(line) {
            (Served::L3, self.l3.take_at(slot))
        } else {
            self.fill_lower(core, line);
            (Served::Memory, 0)
        };
        self.hits[served as usize] += 1;
        let v = if version != 0 { version } else { data };
        if let Some((l, v)) = self.l1[core].insert(line, v) {
            self.evict_to_l2(core, l, v);
        }
        served
    }

    /// A line read from memory is also kept, clean, in L2 and L3.
    fn fill_lower(&mut self, core: usize, line: u64) {
        if let Some((l, v)) = self.l3.insert(line, 0) {
            self.writebacks.push((l, v));
        }
        if let Some((l, v)) = self.l2[core].insert(line, 0) {
            self.evict_to_l3(l, v);
        }
    }

    fn evict_to_l2(&mut self, core: usize, line: u64, version: u64) {
        if let Some((l, v)) = self.l2[core].put_dirty(line, version) {
            self.evict_to_l3(l, v);
        }
    }

    fn evict_to_l3(&mut self, line: u64, version: u64) {
        if let Some(victim) = self.l3.put_dirty(line, version) {
            self.writebacks.push(victim);
        }
    }

    /// Whether an access of `line` by `core` stays within its private caches: an L1 hit, or
    /// an L2 hit whose fill pushes no dirty line out of L1 (which could reach L3).
    pub fn is_private(&self, core: usize, line: u64) -> bool {
        self.l1[core].contains(line)
            || (self.l2[core].contains(line) && !self.l1[core].would_evict_dirty(line))
    }

    /// clwb: the line's dirty data (it stays cached, clean), or None if no level has it dirty.
    pub fn flush(&mut self, core: usize, line: u64) -> Option<u64> {
        let v = self.l1[core].take(line);
        let v = if v != 0 { v } else { self.l2[core].take(line) };
        let v = if v != 0 { v } else { self.l3.take(line) };
        (v != 0).then_some(v)
    }

    /// Every dirty line still cached (the end of a run).
    pub fn dirty_lines(&self) -> Vec<(u64, u64)> {
        let private = self.l1.iter().chain(&self.l2);
        private
            .chain(std::iter::once(&self.l3))
            .flat_map(|c| c.dirty_lines())
            .collect()
    }
}
