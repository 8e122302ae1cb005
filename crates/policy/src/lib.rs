//! Replacement policies for an NVRAM cache (seed 002 section 2.5), over slot numbers
//! `0..capacity` that the cache owns. The simulator's models use them, and so will the device's
//! NVRAM cache layer: nothing here knows about traces.
//!
//! - `lru`: evict the least recently used (modified or accessed) slot.
//! - `random`: evict a slot chosen uniformly by a seeded generator. The resident slots are kept
//!   in a vector in insertion order, removed by swap-remove, and the victim is
//!   `members[rng.gen_range(0..len)]` from `SmallRng::seed_from_u64(seed)`: that is the whole
//!   definition, so a run is reproducible from its seed.
//! - `omniscient`: evict the slot whose next write is furthest in the future (Belady's MIN over
//!   writes, which the paper computed from its lifetime log). Slots never written again come
//!   first; ties among them go to the least recently used.
//!
//! - `clock`: the second-chance approximation of LRU: the resident slots form a ring in
//!   insertion order, an access sets a slot's reference bit, and the hand evicts the first slot
//!   without one, clearing (and passing over) those it finds set. One full turn at most.
//!
//! - `lrw` (lrw.rs): least recently written, a write cache's destage order (NVFAT, seed 004):
//!   only writes reorder; not a `PolicyKind` (it orders dirty data, not a replacement set).
//!
//! Every method is O(1) except omniscient's, which are O(log n) (an ordered set).

mod lrw;
pub use lrw::Lrw;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeSet;

/// "No slot" in the intrusive lists.
pub const NIL: u32 = u32::MAX;
/// The next-write index of a block that is never written again.
pub const NEVER: u64 = u64::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyKind {
    Lru,
    Random,
    Omniscient,
    Clock,
}

impl PolicyKind {
    /// Every policy, in the order the program lists them.
    pub const ALL: [PolicyKind; 4] = [
        PolicyKind::Lru,
        PolicyKind::Random,
        PolicyKind::Omniscient,
        PolicyKind::Clock,
    ];

    /// The policy named `name` (as [`PolicyKind::name`] spells it), if any.
    pub fn parse(name: &str) -> Option<PolicyKind> {
        PolicyKind::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The policy's name, as `--policy` and the JSON reports spell it.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Lru => "lru",
            PolicyKind::Random => "random",
            PolicyKind::Omniscient => "omniscient",
            PolicyKind::Clock => "clock",
        }
    }
}

/// What a policy may know about one access to a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Touch {
    /// The access's sequence number: strictly increasing over a run.
    pub seq: u64,
    /// The index of the block's next write access after this one, or [`NEVER`].
    pub next_write: u64,
}

/// A doubly linked list of slots threaded through two arrays: O(1) push, remove and
/// move-to-back, no allocation once the arrays have grown to the highest slot used. The front
/// is the oldest entry.
#[derive(Clone, Debug)]
pub struct SlotList {
    prev: Vec<u32>,
    next: Vec<u32>,
    head: u32,
    tail: u32,
    len: u32,
}

/// The empty list (head and tail NIL: a derived default of zeros would name slot 0).
impl Default for SlotList {
    fn default() -> SlotList {
        SlotList::new()
    }
}

impl SlotList {
    pub fn new() -> SlotList {
        SlotList {
            prev: Vec::new(),
            next: Vec::new(),
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }

    pub fn len(&self) -> u32 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn front(&self) -> Option<u32> {
        (self.head != NIL).then_some(self.head)
    }

    /// Whether `slot` is linked (only meaningful for slots this list has seen).
    pub fn contains(&self, slot: u32) -> bool {
        let s = slot as usize;
        s < self.prev.len() && (self.prev[s] != NIL || self.head == slot)
    }

    fn grow(&mut self, slot: u32) {
        let need = slot as usize + 1;
        if self.prev.len() < need {
            self.prev.resize(need, NIL);
            self.next.resize(need, NIL);
        }
    }

    pub fn push_back(&mut self, slot: u32) {
        assert!(slot != NIL);
        self.grow(slot);
        debug_assert!(!self.contains(slot), "slot {slot} linked twice");
        let s = slot as usize;
        self.prev[s] = self.tail;
        self.next[s] = NIL;
        if self.tail == NIL {
            self.head = slot;
        } else {
            self.next[self.tail as usize] = slot;
        }
        self.tail = slot;
        self.len += 1;
    }

    pub fn remove(&mut self, slot: u32) {
        debug_assert!(self.contains(slot), "slot {slot} not linked");
        let s = slot as usize;
        let (p, n) = (self.prev[s], self.next[s]);
        if p == NIL {
            self.head = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.prev[s] = NIL;
        self.next[s] = NIL;
        self.len -= 1;
    }

    pub fn move_to_back(&mut self, slot: u32) {
        if self.tail != slot {
            self.remove(slot);
            self.push_back(slot);
        }
    }

    /// Front to back (tests and reports).
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        let mut cur = self.head;
        std::iter::from_fn(move || {
            if cur == NIL {
                return None;
            }
            let s = cur;
            cur = self.next[s as usize];
            Some(s)
        })
    }
}

/// The resident set of the random policy: a vector with O(1) swap-remove.
#[derive(Clone, Debug)]
struct RandomSet {
    members: Vec<u32>,
    /// Position of each slot in `members`, NIL when absent.
    pos: Vec<u32>,
    rng: SmallRng,
}

/// The omniscient policy's order: (next write, inverted last-use sequence, slot); the victim is
/// the greatest element.
#[derive(Clone, Debug)]
struct NextWriteSet {
    set: BTreeSet<(u64, u64, u32)>,
    /// The key each resident slot is filed under.
    key: Vec<Option<(u64, u64)>>,
}

#[derive(Clone, Debug)]
enum Inner {
    Lru(SlotList),
    Random(RandomSet),
    Omniscient(NextWriteSet),
    Clock(ClockRing),
}

/// CLOCK's ring (front: where the hand points) and reference bits, by slot.
#[derive(Clone, Debug)]
struct ClockRing {
    ring: SlotList,
    referenced: Vec<bool>,
}

/// A replacement policy over the slots of one cache.
#[derive(Clone, Debug)]
pub struct Policy {
    kind: PolicyKind,
    inner: Inner,
}

impl Policy {
    pub fn new(kind: PolicyKind, seed: u64) -> Policy {
        let inner = match kind {
            PolicyKind::Lru => Inner::Lru(SlotList::new()),
            PolicyKind::Random => Inner::Random(RandomSet {
                members: Vec::new(),
                pos: Vec::new(),
                rng: SmallRng::seed_from_u64(seed),
            }),
            PolicyKind::Omniscient => Inner::Omniscient(NextWriteSet {
                set: BTreeSet::new(),
                key: Vec::new(),
            }),
            PolicyKind::Clock => Inner::Clock(ClockRing {
                ring: SlotList::new(),
                referenced: Vec::new(),
            }),
        };
        Policy { kind, inner }
    }

    pub fn kind(&self) -> PolicyKind {
        self.kind
    }

    pub fn len(&self) -> u32 {
        match &self.inner {
            Inner::Lru(l) => l.len(),
            Inner::Random(r) => r.members.len() as u32,
            Inner::Omniscient(o) => o.set.len() as u32,
            Inner::Clock(c) => c.ring.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A slot becomes resident (it was just accessed).
    pub fn insert(&mut self, slot: u32, t: Touch) {
        match &mut self.inner {
            Inner::Lru(l) => l.push_back(slot),
            Inner::Clock(c) => {
                c.ring.push_back(slot);
                if c.referenced.len() <= slot as usize {
                    c.referenced.resize(slot as usize + 1, false);
                }
                c.referenced[slot as usize] = false;
            }
            Inner::Random(r) => {
                let s = slot as usize;
                if r.pos.len() <= s {
                    r.pos.resize(s + 1, NIL);
                }
                assert!(r.pos[s] == NIL, "slot {slot} inserted twice");
                r.pos[s] = r.members.len() as u32;
                r.members.push(slot);
            }
            Inner::Omniscient(o) => {
                let s = slot as usize;
                if o.key.len() <= s {
                    o.key.resize(s + 1, None);
                }
                assert!(o.key[s].is_none(), "slot {slot} inserted twice");
                let k = (t.next_write, u64::MAX - t.seq);
                o.key[s] = Some(k);
                o.set.insert((k.0, k.1, slot));
            }
        }
    }

    /// A resident slot was accessed again.
    pub fn touch(&mut self, slot: u32, t: Touch) {
        match &mut self.inner {
            Inner::Lru(l) => l.move_to_back(slot),
            Inner::Random(_) => {}
            Inner::Clock(c) => {
                assert!(
                    c.ring.contains(slot),
                    "touch of a slot that is not resident"
                );
                c.referenced[slot as usize] = true;
            }
            Inner::Omniscient(o) => {
                let s = slot as usize;
                let old = o.key[s].expect("touch of a slot that is not resident");
                let removed = o.set.remove(&(old.0, old.1, slot));
                assert!(removed);
                let k = (t.next_write, u64::MAX - t.seq);
                o.key[s] = Some(k);
                o.set.insert((k.0, k.1, slot));
            }
        }
    }

    /// A resident slot leaves (evicted, moved or invalidated).
    pub fn remove(&mut self, slot: u32) {
        match &mut self.inner {
            Inner::Lru(l) => l.remove(slot),
            Inner::Clock(c) => {
                c.ring.remove(slot);
                c.referenced[slot as usize] = false;
            }
            Inner::Random(r) => {
                let s = slot as usize;
                let p = r.pos[s];
                assert!(p != NIL, "remove of a slot that is not resident");
                r.members.swap_remove(p as usize);
                if let Some(&moved) = r.members.get(p as usize) {
                    r.pos[moved as usize] = p;
                }
                r.pos[s] = NIL;
            }
            Inner::Omniscient(o) => {
                let s = slot as usize;
                let k = o.key[s]
                    .take()
                    .expect("remove of a slot that is not resident");
                let removed = o.set.remove(&(k.0, k.1, slot));
                assert!(removed);
            }
        }
    }

    /// The slot to evict next; None when nothing is resident. `random` draws from its generator
    /// on every call, so call this only when a slot will be evicted.
    pub fn victim(&mut self) -> Option<u32> {
        match &mut self.inner {
            Inner::Lru(l) => l.front(),
            Inner::Random(r) => {
                if r.members.is_empty() {
                    return None;
                }
                let i = r.rng.gen_range(0..r.members.len());
                Some(r.members[i])
            }
            Inner::Omniscient(o) => o.set.last().map(|&(_, _, s)| s),
            Inner::Clock(c) => {
                // The hand passes each referenced slot once, clearing its bit: within one turn
                // plus one step it finds a slot without one.
                for _ in 0..=c.ring.len() {
                    let s = c.ring.front()?;
                    if !c.referenced[s as usize] {
                        return Some(s);
                    }
                    c.referenced[s as usize] = false;
                    c.ring.move_to_back(s);
                }
                unreachable!("a full turn clears every reference bit")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(seq: u64, next_write: u64) -> Touch {
        Touch { seq, next_write }
    }

    #[test]
    fn slot_list_keeps_order_through_moves_and_removes() {
        let mut l = SlotList::new();
        for s in [3, 1, 4, 0] {
            l.push_back(s);
        }
        l.move_to_back(1);
        l.remove(4);
        assert_eq!(l.iter().collect::<Vec<_>>(), vec![3, 0, 1]);
        assert_eq!(l.front(), Some(3));
        assert!(l.contains(0) && !l.contains(4));
        l.remove(3);
        l.remove(0);
        l.remove(1);
        assert!(l.is_empty() && l.front().is_none());
    }

    #[test]
    fn lru_evicts_least_recently_touched() {
        let mut p = Policy::new(PolicyKind::Lru, 0);
        p.insert(0, t(1, NEVER));
        p.insert(1, t(2, NEVER));
        p.insert(2, t(3, NEVER));
        p.touch(0, t(4, NEVER));
        assert_eq!(p.victim(), Some(1));
        p.remove(1);
        assert_eq!(p.victim(), Some(2));
    }

    #[test]
    fn omniscient_evicts_furthest_next_write_then_oldest() {
        let mut p = Policy::new(PolicyKind::Omniscient, 0);
        p.insert(0, t(1, 10));
        p.insert(1, t(2, 50));
        p.insert(2, t(3, 20));
        assert_eq!(p.victim(), Some(1));
        p.touch(1, t(4, 5));
        assert_eq!(p.victim(), Some(2));
        // Two slots never written again: the older one goes first.
        p.touch(0, t(5, NEVER));
        p.touch(2, t(6, NEVER));
        assert_eq!(p.victim(), Some(0));
        p.remove(0);
        assert_eq!(p.victim(), Some(2));
    }

    #[test]
    fn random_is_reproducible_and_only_picks_residents() {
        let run = |seed| {
            let mut p = Policy::new(PolicyKind::Random, seed);
            let mut picks = Vec::new();
            for s in 0..8 {
                p.insert(s, t(u64::from(s), NEVER));
            }
            for _ in 0..6 {
                let v = p.victim().unwrap();
                picks.push(v);
                p.remove(v);
            }
            assert_eq!(p.len(), 2);
            picks
        };
        let a = run(7);
        assert_eq!(a, run(7));
        let mut sorted = a.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 6, "a removed slot was picked again: {a:?}");
        assert_ne!(a, run(8), "two seeds gave the same six picks");
    }

    #[test]
    fn every_policy_name_parses_back() {
        for p in PolicyKind::ALL {
            assert_eq!(PolicyKind::parse(p.name()), Some(p));
        }
        assert_eq!(PolicyKind::parse("LRU"), None);
        assert_eq!(PolicyKind::parse(""), None);
    }

    #[test]
    fn clock_gives_referenced_slots_a_second_chance() {
        let mut p = Policy::new(PolicyKind::Clock, 0);
        for s in 0..4 {
            p.insert(s, t(s as u64, NEVER));
        }
        assert_eq!(p.victim(), Some(0), "nothing referenced: the oldest");
        p.touch(0, t(10, NEVER));
        p.touch(1, t(11, NEVER));
        assert_eq!(
            p.victim(),
            Some(2),
            "0 and 1 passed over, their bits cleared"
        );
        p.remove(2);
        assert_eq!(p.victim(), Some(3));
        p.remove(3);
        assert_eq!(
            p.victim(),
            Some(0),
            "0 and 1 lost their bits on the first turn"
        );
        for s in [0, 1] {
            p.touch(s, t(20, NEVER));
        }
        assert_eq!(
            p.victim(),
            Some(0),
            "all referenced: one full turn, then the first"
        );
        p.remove(0);
        p.remove(1);
        assert_eq!(p.victim(), None);
        assert_eq!(PolicyKind::parse("clock"), Some(PolicyKind::Clock));
    }
}
