//! The LRU mechanics every client-cache model shares: which slot holds a key, the slots in
//! order of last access, slot numbers handed out up to the memory's capacity, and the least
//! recent slot found and evicted. What a slot holds besides its key (dirty since when, an
//! NVRAM copy, a dirty bit) stays with each model, in vectors indexed by the same slot numbers:
//! the models differ in that state, not in these mechanics.

use super::set;
use nvstack_policy::SlotList;
use rustc_hash::FxHashMap;
use std::collections::BTreeSet;

/// Slot numbers handed out up to a capacity, reused after release.
#[derive(Clone, Debug)]
pub(super) struct Slots {
    cap: u64,
    used: u64,
    next: u32,
    free: Vec<u32>,
}

impl Slots {
    pub(super) fn new(cap: u64) -> Slots {
        Slots {
            cap,
            used: 0,
            next: 0,
            free: Vec::new(),
        }
    }

    pub(super) fn cap(&self) -> u64 {
        self.cap
    }

    pub(super) fn used(&self) -> u64 {
        self.used
    }

    pub(super) fn full(&self) -> bool {
        self.used == self.cap
    }

    /// The most recently released number first: a slot freed and taken again at once (an
    /// eviction for a miss) keeps its number, and the slot vectors stay as short as the peak.
    pub(super) fn take(&mut self) -> u32 {
        assert!(self.used < self.cap);
        self.used += 1;
        self.free.pop().unwrap_or_else(|| {
            self.next += 1;
            self.next - 1
        })
    }

    pub(super) fn give(&mut self, s: u32) {
        assert!(self.used > 0);
        assert!(s < self.next);
        self.used -= 1;
        self.free.push(s);
    }
}

/// Slots in order of last access, oldest first. `seq` is the access's sequence number.
pub(super) trait Recency: Default {
    /// `slot`, just taken, enters the order as accessed at `seq`.
    fn push(&mut self, slot: u32, seq: u64);
    /// `slot` is accessed again, at `seq`: the newest of all.
    fn touch(&mut self, slot: u32, seq: u64);
    fn remove(&mut self, slot: u32);
    fn oldest(&self) -> Option<u32>;
}

/// Where a slot enters only at its own access, the order is that of entry and touch: a list,
/// newest at the back, O(1) throughout. The sequence numbers are then implied.
impl Recency for SlotList {
    fn push(&mut self, slot: u32, _seq: u64) {
        self.push_back(slot);
    }

    fn touch(&mut self, slot: u32, _seq: u64) {
        self.move_to_back(slot);
    }

    fn remove(&mut self, slot: u32) {
        SlotList::remove(self, slot);
    }

    fn oldest(&self) -> Option<u32> {
        self.front()
    }
}

/// Where a slot may enter older than others (the unified model's volatile cache: a block moved
/// down from the NVRAM keeps its last access time), slots filed by (last access, slot).
#[derive(Clone, Debug, Default)]
pub(super) struct SeqOrder {
    /// The last access of each slot in the order (stale for a slot not in it).
    seq: Vec<u64>,
    order: BTreeSet<(u64, u32)>,
}

impl SeqOrder {
    /// The last access of `slot`, which is in the order.
    pub(super) fn seq(&self, slot: u32) -> u64 {
        let seq = self.seq[slot as usize];
        debug_assert!(self.order.contains(&(seq, slot)));
        seq
    }
}

impl Recency for SeqOrder {
    fn push(&mut self, slot: u32, seq: u64) {
        set(&mut self.seq, slot, seq, 0);
        let fresh = self.order.insert((seq, slot));
        assert!(fresh, "slot {slot} ordered twice");
    }

    fn touch(&mut self, slot: u32, seq: u64) {
        debug_assert!(seq > self.seq[slot as usize], "time runs forward");
        self.remove(slot);
        self.push(slot, seq);
    }

    fn remove(&mut self, slot: u32) {
        let removed = self.order.remove(&(self.seq[slot as usize], slot));
        assert!(removed, "slot {slot} not ordered");
    }

    fn oldest(&self) -> Option<u32> {
        self.order.first().map(|&(_, slot)| slot)
    }
}

/// One memory of a model, as LRU sees it: key -> slot, the slots' recency, the slot numbers.
/// Every slot taken is mapped and ordered, every slot free is neither.
#[derive(Clone, Debug)]
pub(super) struct LruIndex<R: Recency> {
    slot_of: FxHashMap<u64, u32>,
    slots: Slots,
    /// The key each slot holds (stale in a free slot).
    key: Vec<u64>,
    recency: R,
}

impl<R: Recency> LruIndex<R> {
    pub(super) fn new(cap_blocks: u64) -> LruIndex<R> {
        LruIndex {
            slot_of: FxHashMap::default(),
            slots: Slots::new(cap_blocks),
            key: Vec::new(),
            recency: R::default(),
        }
    }

    pub(super) fn cap_blocks(&self) -> u64 {
        self.slots.cap()
    }

    pub(super) fn full(&self) -> bool {
        self.slots.full()
    }

    pub(super) fn recency(&self) -> &R {
        &self.recency
    }

    #[inline]
    pub(super) fn get(&self, key: u64) -> Option<u32> {
        self.slot_of.get(&key).copied()
    }

    /// The key `slot` holds (the slot is taken).
    pub(super) fn key(&self, slot: u32) -> u64 {
        let key = self.key[slot as usize];
        debug_assert_eq!(self.slot_of.get(&key), Some(&slot));
        key
    }

    pub(super) fn touch(&mut self, slot: u32, seq: u64) {
        self.recency.touch(slot, seq);
    }

    pub(super) fn least_recent(&self) -> Option<u32> {
        self.recency.oldest()
    }

    /// A slot for `key`, which no slot holds, accessed at `seq`; the memory has room.
    pub(super) fn insert(&mut self, key: u64, seq: u64) -> u32 {
        let slot = self.slots.take();
        set(&mut self.key, slot, key, 0);
        let held = self.slot_of.insert(key, slot);
        assert_eq!(held, None, "key {key} in two slots");
        self.recency.push(slot, seq);
        slot
    }

    /// `slot` leaves: out of the order, its key unmapped, its number free. Returns its key.
    pub(super) fn remove(&mut self, slot: u32) -> u64 {
        self.recency.remove(slot);
        let key = self.key[slot as usize];
        let removed = self.slot_of.remove(&key);
        assert_eq!(removed, Some(slot));
        self.slots.give(slot);
        key
    }

    /// Room for one more block: when the memory is full, its least recent slot leaves and is
    /// returned with its key, for the model to settle the slot's own state (write it back).
    pub(super) fn make_room(&mut self) -> Option<(u32, u64)> {
        assert!(
            self.cap_blocks() > 0,
            "a memory of no blocks never takes one"
        );
        if !self.full() {
            return None;
        }
        let victim = self.least_recent().expect("a full cache has an LRU block");
        Some((victim, self.remove(victim)))
    }
}
