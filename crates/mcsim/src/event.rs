//! The event queue of the discrete-event engine, and the log the tests check properties on.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Something that happens at a time. At equal times completions come first, then the memory
/// controller's scheduling, then the cores in core-number order: a core sees everything that
/// happened by its cycle, and of two cores reaching the controller or L3 in the same cycle the
/// lower-numbered one goes first (whatever order they yielded in).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Ev {
    /// A read's data is back while its core may be asleep: the core wakes if it is (as at
    /// every completion). The entry's time was set when the read issued (`Events::read_issued`);
    /// for a core that is awake when its read issues this event is not queued at all.
    ReadDone { core: u32 },
    /// A flush's write entered its sub-queue.
    Accepted { core: u32, seq: u64 },
    /// A write finished at the NVM.
    WriteDone {
        q: u32,
        id: u64,
        line: u64,
        version: u64,
    },
    /// A query read returned the NVM side's credits of sub-queue `q` (`q == u32::MAX`: the
    /// one synchronisation of a global commit).
    QueryDone { q: u32, answer: u32 },
    /// A commit is durable.
    CommitDone { core: u32, seq: u64 },
    /// The controller may issue something.
    Tick,
    /// A core continues from its local time.
    CoreRun(u32),
}

impl Ev {
    fn class(&self) -> u8 {
        match self {
            Ev::Tick => 1,
            Ev::CoreRun(_) => 2,
            _ => 0,
        }
    }
}

/// Bits of a key below the time: 2 for the class, then the order within the class (the push
/// order; a core's number for a core), then the slot.
const SLOT_BITS: u32 = 22;
const SEQ_BITS: u32 = 64 - 2 - SLOT_BITS;

/// The queue: a binary heap of packed keys (time, class, push order, slot), 16 bytes each,
/// with the events themselves in a slab whose slots are reused, so a push or pop moves a
/// key, not an event, and allocates nothing once the slab has grown to the run's need.
///
/// The earliest key is kept outside the heap (`front`) when it was pushed ahead of
/// everything in it: most events (a scheduling pass at the current time, a core yielding to
/// nobody) are popped right after their push, and those then never enter the heap. Every
/// key is still unique and compared whole, so the order is the heap's alone.
#[derive(Default)]
pub(crate) struct Events {
    front: Option<u128>,
    heap: BinaryHeap<Reverse<u128>>,
    slab: Vec<Ev>,
    free: Vec<u32>,
    seq: u64,
    /// Reads the controller issued since the engine last looked: (core, ROB entry, the
    /// time the data is back). A read's completion time is fixed when it issues, so the
    /// engine hands it to the core at once instead of queueing an event for it.
    pub reads: Vec<(u32, u64, u64)>,
}

impl Events {
    pub fn push(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        assert!(self.seq < 1 << SEQ_BITS, "fewer than 2^40 events in a run");
        let slot = match self.free.pop() {
            Some(s) => {
                self.slab[s as usize] = ev;
                s
            }
            None => {
                self.slab.push(ev);
                (self.slab.len() - 1) as u32
            }
        };
        assert!(slot < 1 << SLOT_BITS, "fewer than 2^22 events pending");
        // Cores at one time go in core-number order (at most one of each is queued).
        let order = match ev {
            Ev::CoreRun(c) => u64::from(c),
            _ => self.seq,
        };
        let low = (u64::from(ev.class()) << 62) | (order << SLOT_BITS) | u64::from(slot);
        let key = (u128::from(t) << 64) | u128::from(low);
        match self.front {
            // Earlier than the front: the front goes into the heap, this key is the new one.
            Some(f) if key < f => {
                self.heap.push(Reverse(f));
                self.front = Some(key);
            }
            Some(_) => self.heap.push(Reverse(key)),
            None if self.heap.peek().is_none_or(|Reverse(h)| key < *h) => self.front = Some(key),
            None => self.heap.push(Reverse(key)),
        }
    }

    /// The controller issued `core`'s read `seq`; its data is back at `done`.
    pub fn read_issued(&mut self, done: u64, core: u32, seq: u64) {
        self.reads.push((core, seq, done));
    }

    /// The earliest key, front or heap.
    fn head(&self) -> Option<u128> {
        self.front.or_else(|| self.heap.peek().map(|Reverse(k)| *k))
    }

    pub fn pop(&mut self) -> Option<(u64, Ev)> {
        let key = match self.front.take() {
            Some(k) => k,
            None => self.heap.pop()?.0,
        };
        let slot = (key as u32) & ((1 << SLOT_BITS) - 1);
        self.free.push(slot);
        Some(((key >> 64) as u64, self.slab[slot as usize]))
    }

    /// Whether something must happen before core `core`'s cycle `t`: an event before `t`, a
    /// completion or scheduling pass at `t`, or a lower-numbered core at `t`.
    pub fn blocks(&self, t: u64, core: u32) -> bool {
        let mine = (u128::from(t) << 64) | (2 << 62) | (u128::from(core) << SLOT_BITS);
        self.head().is_some_and(|key| key < mine)
    }

    /// The earliest pending time: nothing can happen before it.
    #[cfg(test)]
    pub fn horizon(&self) -> u64 {
        self.head().map_or(u64::MAX, |key| (key >> 64) as u64)
    }
}

/// What the memory controller did, in the order it did it (`Config::log_events`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Log {
    WriteAccepted {
        id: u64,
        q: u32,
        t: u64,
    },
    WriteIssued {
        id: u64,
        q: u32,
        t: u64,
    },
    WriteDone {
        id: u64,
        t: u64,
    },
    /// A commit locked its sub-queues (`queues` a bit set).
    CommitStart {
        commit: u64,
        queues: u32,
        t: u64,
    },
    /// Sub-queue `q`'s part of a commit is done: its credits came back full.
    CommitPart {
        commit: u64,
        q: u32,
        t: u64,
    },
    CommitDone {
        commit: u64,
        t: u64,
    },
    /// A query read sent for sub-queue `q` (`u32::MAX`: a global commit's).
    Query {
        q: u32,
        t: u64,
    },
    /// A read issued to memory.
    ReadIssued {
        line: u64,
        t: u64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// The front slot changes where keys wait, never the order: pops match a plain sort of
    /// (time, class, push order or core number) on random pushes interleaved with pops.
    #[test]
    fn front_slot_keeps_the_heap_order() {
        let mut rng = SmallRng::seed_from_u64(7);
        let mut ev = Events::default();
        let mut model: Vec<(u64, u8, u64, Ev)> = Vec::new();
        let (mut now, mut order) = (0u64, 0u64);
        for _ in 0..20_000 {
            if rng.gen_bool(0.55) || model.is_empty() {
                let t = now + rng.gen_range(0..4u64);
                let e = match rng.gen_range(0..3) {
                    0 => Ev::Tick,
                    1 => Ev::CoreRun(rng.gen_range(0..4)),
                    _ => Ev::Accepted {
                        core: 0,
                        seq: order,
                    },
                };
                order += 1;
                ev.push(t, e);
                let within = match e {
                    Ev::CoreRun(c) => u64::from(c),
                    _ => order,
                };
                model.push((t, e.class(), within, e));
                continue;
            }
            model.sort_by_key(|m| std::cmp::Reverse((m.0, m.1, m.2)));
            let (t, class, _, e) = model.pop().expect("not empty");
            assert_eq!(ev.horizon(), t);
            let core = match e {
                Ev::CoreRun(c) => c,
                _ => 0,
            };
            assert!(ev.blocks(t, 4) == (class < 2 || core < 4) && ev.blocks(t + 1, 0));
            assert!(!ev.blocks(t, core) || class < 2);
            assert_eq!(ev.pop(), Some((t, e)));
            now = t;
        }
    }
}
