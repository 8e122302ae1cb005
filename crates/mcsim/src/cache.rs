//! The cache hierarchy of Table II: private L1 and L2 per core and one shared L3, each
//! write-back, write-allocate and LRU within a set. A core's dirty data for a line lives in
//! one of its levels at most: a fill moves it up to L1 and a dirty victim moves it down, so a
//! flush finds it once. Coherence between cores is not modelled (the workloads share no
//! written lines; where a trace's threads do write one line, each core's copy is its own).
//!
//! Only tags live in the sets: a way is one word, line + 1 with a dirty bit, so L3's 16-way
//! set is two host cache lines instead of four (the sets of all levels: 2.6 MiB of host
//! memory for Table II's 16 cores instead of 5.1 MiB). The dirty data itself (which store
//! wrote the line last) is kept in one map for the whole hierarchy, by line and holder (a
//! core for its private levels, or L3), holding exactly the dirty copies, so a dirty line
//! moving between a core's L1 and L2 moves only its bit. Persistent code flushes what it
//! writes, so the map stays small. Hits, misses, victims and writebacks are those of
//! (tag, data) pairs in the ways (a test compares the two on random accesses).

use crate::config::{CacheLevel, Config};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Where an access was served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    L1,
    L2,
    L3,
    Memory,
}

/// A way's dirty bit: above any line + 1 (lines are addresses over 8 at least, so < 2^61).
const DIRTY: u64 = 1 << 63;

/// One set-associative cache of tags. Each set keeps its ways in recency order, most recent
/// first (a hit moves to the front, the last way is the victim), so no ages are stored.
struct Cache {
    set_mask: u64,
    ways: usize,
    /// line + 1 per way (0 = empty), with `DIRTY` set while this level holds the line dirty.
    /// The sets start at `first`, a host cache line's boundary, so that a set spans as few
    /// host lines as it can (L3's 16 ways: two, not three) and a prefetch of each brings it.
    tags: Vec<u64>,
    first: usize,
}

/// Words in a host cache line (64 bytes on the hosts this runs on; a guess elsewhere only
/// costs speed).
const HOST_LINE_WORDS: usize = 8;

impl Cache {
    fn new(level: &CacheLevel, line_bytes: u32, scale: u64) -> Cache {
        let lines = (level.bytes * scale / u64::from(line_bytes)) as usize;
        let ways = level.ways as usize;
        let sets = (lines / ways) as u64;
        assert!(sets.is_power_of_two(), "validated: sets are a power of two");
        assert!((1..=64).contains(&ways), "validated: 1 to 64 ways");
        let tags = vec![0; lines + HOST_LINE_WORDS];
        // Words to skip to a host line's start (the vector is 8-byte aligned at least).
        let misaligned = tags.as_ptr().addr() / 8 % HOST_LINE_WORDS;
        Cache {
            set_mask: sets - 1,
            ways,
            tags,
            first: (HOST_LINE_WORDS - misaligned) % HOST_LINE_WORDS,
        }
    }

    #[inline(always)]
    fn set(&self, line: u64) -> std::ops::Range<usize> {
        let base = self.first + (line & self.set_mask) as usize * self.ways;
        base..base + self.ways
    }

    /// The slot holding `line`, if any.
    #[inline(always)]
    fn position(&self, line: u64) -> Option<usize> {
        let set = self.set(line);
        let at = scan(&self.tags[set.clone()], line + 1)?;
        Some(set.start + at)
    }

    /// The slot holding `line`, made most recently used (moved to the set's front).
    #[inline(always)]
    fn find(&mut self, line: u64) -> Option<usize> {
        // The set computed once (the compiler cannot reuse it across the scan: the tags'
        // buffer might, for all it knows, hold this struct's fields).
        let set = self.set(line);
        let at = scan(&self.tags[set.clone()], line + 1)?;
        if at > 0 {
            self.tags[set.start..=set.start + at].rotate_right(1);
        }
        Some(set.start)
    }

    /// Put `line` in (it must be absent) at the front, dirty or not; returns the line
    /// pushed out if it was dirty (its data stays in the map, for the caller to move).
    #[inline(always)]
    fn insert(&mut self, line: u64, dirty: bool) -> Option<u64> {
        let set = self.set(line);
        let tag = (line + 1) | if dirty { DIRTY } else { 0 };
        let last = push_front(&mut self.tags[set], tag);
        (last & DIRTY != 0).then(|| (last & !DIRTY) - 1)
    }

    /// Make `line` dirty here, inserting it if absent; returns a dirty victim, if any.
    #[inline(always)]
    fn put_dirty(&mut self, line: u64) -> Option<u64> {
        match self.find(line) {
            Some(slot) => {
                self.tags[slot] |= DIRTY;
                None
            }
            None => self.insert(line, true),
        }
    }

    #[inline(always)]
    fn contains(&self, line: u64) -> bool {
        self.position(line).is_some()
    }

    /// Whether inserting `line` would push out a dirty line.
    fn would_evict_dirty(&self, line: u64) -> bool {
        self.tags[self.set(line).end - 1] & DIRTY != 0
    }

    /// Clear the dirty bit of the way in `slot`; whether it was set.
    #[inline(always)]
    fn clean_at(&mut self, slot: usize) -> bool {
        let was = self.tags[slot] & DIRTY != 0;
        self.tags[slot] &= !DIRTY;
        was
    }

    /// Clear `line`'s dirty bit here (it stays, clean); whether it was dirty here.
    #[inline(always)]
    fn clean(&mut self, line: u64) -> bool {
        self.position(line).is_some_and(|slot| self.clean_at(slot))
    }
}

/// The way of `set` holding `key` (a line + 1), dirty or not. Table II's sets (4, 8 and 16
/// ways) are scanned at a width known to the compiler, unrolled: a scan is most of a
/// request's host instructions, and most scans miss, reading every way.
#[inline(always)]
fn scan(set: &[u64], key: u64) -> Option<usize> {
    debug_assert!(key & DIRTY == 0, "a key is a line + 1, below the dirty bit");
    match set.len() {
        4 => scan_n::<4>(set, key),
        8 => scan_n::<8>(set, key),
        16 => scan_n::<16>(set, key),
        _ => set.iter().position(|&t| same_line(t, key)),
    }
}

#[inline(always)]
fn scan_n<const N: usize>(set: &[u64], key: u64) -> Option<usize> {
    let set: &[u64; N] = set.try_into().expect("a set of N ways");
    set.iter().position(|&t| same_line(t, key))
}

/// Whether the way `tag` holds `key`: equal but for the dirty bit (shifted out).
#[inline(always)]
fn same_line(tag: u64, key: u64) -> bool {
    (tag ^ key) << 1 == 0
}

/// Shift `set`'s ways one back, `tag` in front; returns the way shifted out. At Table II's
/// widths the move is a few register copies instead of a call to memmove.
#[inline(always)]
fn push_front(set: &mut [u64], tag: u64) -> u64 {
    match set.len() {
        4 => push_front_n::<4>(set, tag),
        8 => push_front_n::<8>(set, tag),
        16 => push_front_n::<16>(set, tag),
        _ => {
            let last = set[set.len() - 1];
            set.rotate_right(1);
            set[0] = tag;
            last
        }
    }
}

#[inline(always)]
fn push_front_n<const N: usize>(set: &mut [u64], tag: u64) -> u64 {
    let set: &mut [u64; N] = set.try_into().expect("a set of N ways");
    let last = set[N - 1];
    set.copy_within(0..N - 1, 1);
    set[0] = tag;
    last
}

/// The dirty map's holder of L3's copies (cores are numbered below 1024).
const L3: u32 = u32::MAX;

/// A cheap hasher for line numbers (the dirty map is on every store's path): one multiply,
/// folded so that the high bits it mixes reach the low bits the table indexes by.
#[derive(Default)]
struct LineHasher(u64);

impl Hasher for LineHasher {
    fn finish(&self) -> u64 {
        let h = self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^ (h >> 29)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).rotate_left(5);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 ^= n;
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = self.0.rotate_left(16) ^ u64::from(n);
    }
}

/// Every core's L1 and L2 and the shared L3.
pub struct Hierarchy {
    l1: Vec<Cache>,
    l2: Vec<Cache>,
    l3: Cache,
    /// The data of every dirty copy, by line and holder: a core's number for its L1 and L2
    /// (one of the two at most holds it dirty), `L3` for L3. Cores may write the same line
    /// (coherence is not modelled), so each holder's copy keeps its own data.
    dirty: HashMap<(u64, u32), u64, BuildHasherDefault<LineHasher>>,
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
            dirty: HashMap::default(),
            writebacks: Vec::new(),
            hits: [0; 4],
        }
    }

    /// A load (`version` 0) or a store (`version` the store's data) of `line` by `core`.
    pub fn access(&mut self, core: usize, line: u64, version: u64) -> Served {
        let mine = (line, core as u32);
        if let Some(slot) = self.l1[core].find(line) {
            if version != 0 {
                self.l1[core].tags[slot] |= DIRTY;
                self.dirty.insert(mine, version);
            }
            self.hits[0] += 1;
            return Served::L1;
        }
        // The line's dirty bit, if a lower level has it, moves up into L1 with it; from the
        // shared L3 its data changes hands, from L3's copy to this core's.
        let (served, was_dirty) = if let Some(slot) = self.l2[core].find(line) {
            (Served::L2, self.l2[core].clean_at(slot))
        } else if let Some(slot) = self.l3.find(line) {
            let was = self.l3.clean_at(slot);
            if was {
                let v = self.take_dirty((line, L3));
                self.dirty.insert(mine, v);
            }
            (Served::L3, was)
        } else {
            self.fill_lower(core, line);
            (Served::Memory, false)
        };
        self.hits[served as usize] += 1;
        if version != 0 {
            self.dirty.insert(mine, version);
        }
        if let Some(l) = self.l1[core].insert(line, version != 0 || was_dirty) {
            self.evict_to_l2(core, l);
        }
        served
    }

    /// `access` if it stays within `core`'s private caches (`is_private`): where it was
    /// served, or None, changing nothing, if it would reach L3. One scan of L1 for the
    /// common case, an L1 hit, instead of `is_private`'s and then `access`'s.
    #[inline]
    pub fn access_private(&mut self, core: usize, line: u64, version: u64) -> Option<Served> {
        if let Some(slot) = self.l1[core].find(line) {
            if version != 0 {
                self.l1[core].tags[slot] |= DIRTY;
                self.dirty.insert((line, core as u32), version);
            }
            self.hits[0] += 1;
            return Some(Served::L1);
        }
        if self.l1[core].would_evict_dirty(line) || !self.l2[core].contains(line) {
            return None;
        }
        let served = self.access(core, line, version);
        debug_assert_eq!(served, Served::L2, "a private access past L1 is an L2 hit");
        Some(served)
    }

    /// A line read from memory is also kept, clean, in L2 and L3.
    fn fill_lower(&mut self, core: usize, line: u64) {
        if let Some(l) = self.l3.insert(line, false) {
            self.write_back(l);
        }
        if let Some(l) = self.l2[core].insert(line, false) {
            self.evict_to_l3(core, l);
        }
    }

    fn evict_to_l2(&mut self, core: usize, line: u64) {
        if let Some(l) = self.l2[core].put_dirty(line) {
            self.evict_to_l3(core, l);
        }
    }

    /// `core`'s dirty `line` leaves its L2 for L3 (replacing L3's data if L3 has it dirty).
    fn evict_to_l3(&mut self, core: usize, line: u64) {
        let v = self.take_dirty((line, core as u32));
        self.dirty.insert((line, L3), v);
        if let Some(l) = self.l3.put_dirty(line) {
            self.write_back(l);
        }
    }

    /// A dirty line leaves L3, and the hierarchy, with its data.
    fn write_back(&mut self, line: u64) {
        let version = self.take_dirty((line, L3));
        self.writebacks.push((line, version));
    }

    fn take_dirty(&mut self, key: (u64, u32)) -> u64 {
        let version = self.dirty.remove(&key);
        version.expect("a line with a dirty bit has its data in the map")
    }

    /// Whether an access of `line` by `core` stays within its private caches: an L1 hit, or
    /// an L2 hit whose fill pushes no dirty line out of L1 (which could reach L3).
    pub fn is_private(&self, core: usize, line: u64) -> bool {
        self.l1[core].contains(line)
            || (self.l2[core].contains(line) && !self.l1[core].would_evict_dirty(line))
    }

    /// clwb: the line's dirty data (it stays cached, clean), or None if no level has it dirty.
    pub fn flush(&mut self, core: usize, line: u64) -> Option<u64> {
        if self.l1[core].clean(line) || self.l2[core].clean(line) {
            Some(self.take_dirty((line, core as u32)))
        } else {
            self.l3.clean(line).then(|| self.take_dirty((line, L3)))
        }
    }

    /// Ask the host for the sets an access of `line` by `core` will scan, ahead of it. The
    /// sets start at host line boundaries, so each is one host line (L3's: two) at Table II's
    /// widths; wider ones are brought in part.
    #[inline]
    pub fn prefetch(&self, core: usize, line: u64) {
        let (l1, l2) = (&self.l1[core], &self.l2[core]);
        crate::host::warm(&l1.tags[l1.set(line).start]);
        crate::host::warm(&l2.tags[l2.set(line).start]);
        self.prefetch_shared(line);
    }

    /// `prefetch` of L3's set alone (an access that found L1 and L2 has just read theirs).
    #[inline]
    pub fn prefetch_shared(&self, line: u64) {
        let set = self.l3.set(line);
        crate::host::warm(&self.l3.tags[set.start]);
        crate::host::warm(&self.l3.tags[set.end - 1]);
    }

    /// Every dirty line still cached (the end of a run).
    pub fn dirty_lines(&self) -> Vec<(u64, u64)> {
        self.dirty.iter().map(|(&(l, _), &v)| (l, v)).collect()
    }
}

#[cfg(test)]
mod tests;
