//! The event queue of the discrete-event engine, and the log the tests check properties on.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

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

/// Cycles the calendar holds in buckets. An event further ahead waits in a heap until the
/// window reaches its time (at Table II a write's completion, about 420 cycles ahead, is the
/// longest usual wait).
const WINDOW: u64 = 1024;
const WORDS: usize = (WINDOW / 64) as usize;

/// The events of one cycle in the order they are taken: completions in push order, then the
/// cores in core-number order. (Scheduling passes, which come between, are kept apart: see
/// `Events::passes`.)
#[derive(Default)]
struct Bucket {
    done: VecDeque<Ev>,
    /// Sorted.
    cores: Vec<u32>,
}

impl Bucket {
    fn is_empty(&self) -> bool {
        self.done.is_empty() && self.cores.is_empty()
    }

    fn push(&mut self, ev: Ev) {
        match ev {
            Ev::Tick => unreachable!("passes are not kept in buckets"),
            Ev::CoreRun(c) => {
                let i = self.cores.partition_point(|&x| x <= c);
                self.cores.insert(i, c);
            }
            _ => self.done.push_back(ev),
        }
    }

    fn pop(&mut self) -> Option<Ev> {
        if let Some(e) = self.done.pop_front() {
            return Some(e);
        }
        (!self.cores.is_empty()).then(|| Ev::CoreRun(self.cores.remove(0)))
    }

    /// Whether something here comes before core `core` at this bucket's time.
    fn before_core(&self, core: u32) -> bool {
        !self.done.is_empty() || self.cores.first().is_some_and(|&c| c < core)
    }
}

/// The queue: a calendar of one bucket a cycle over the window [base, base + WINDOW), base
/// being the time of the last event taken, with a bit a bucket telling which hold events, so
/// a push or pop is an append or a take at a known place plus a short bit scan, not a heap
/// sift. Events beyond the window wait in a heap ordered by (time, class, push order or core
/// number) and move into their bucket as soon as the window covers their time: before
/// anything can be pushed there directly, so a bucket's completions stay in push order and
/// the order is exactly the one a single heap of those keys would give.
pub(crate) struct Events {
    base: u64,
    /// The earliest bucket holding events (u64::MAX: none).
    next: u64,
    buckets: Vec<Bucket>,
    occupied: [u64; WORDS],
    far: BinaryHeap<Reverse<(u64, u8, u64, Ev)>>,
    seq: u64,
    /// The times of the queued scheduling passes, latest first (the controller asks for one
    /// a time; usually one or two are queued, rarely more than three), and the earliest of
    /// them (u64::MAX: none). A pass is taken from here when it is due before the earliest
    /// bucket, or at that bucket's time with no completion in it: cheaper than a bucket's
    /// bookkeeping, and its order (after completions, before cores) is kept by that test.
    passes: Vec<u64>,
    pass: u64,
    /// Reads the controller issued since the engine last looked: (core, ROB entry, the
    /// time the data is back). A read's completion time is fixed when it issues, so the
    /// engine hands it to the core at once instead of queueing an event for it.
    pub reads: Vec<(u32, u64, u64)>,
}

impl Default for Events {
    fn default() -> Events {
        Events {
            base: 0,
            next: u64::MAX,
            buckets: (0..WINDOW).map(|_| Bucket::default()).collect(),
            occupied: [0; WORDS],
            far: BinaryHeap::new(),
            seq: 0,
            passes: Vec::new(),
            pass: u64::MAX,
            reads: Vec::new(),
        }
    }
}

impl Events {
    pub fn push(&mut self, t: u64, ev: Ev) {
        assert!(
            t >= self.base,
            "nothing is queued before the last event taken"
        );
        if ev == Ev::Tick {
            return self.ask_pass(t);
        }
        if t < self.base + WINDOW {
            self.put(t, ev);
            return;
        }
        self.seq += 1;
        // Cores at one time go in core-number order (at most one of each is queued).
        let order = match ev {
            Ev::CoreRun(c) => u64::from(c),
            _ => self.seq,
        };
        self.far.push(Reverse((t, ev.class(), order, ev)));
    }

    fn put(&mut self, t: u64, ev: Ev) {
        let i = (t % WINDOW) as usize;
        self.buckets[i].push(ev);
        self.occupied[i / 64] |= 1 << (i % 64);
        self.next = self.next.min(t);
    }

    /// Queue a scheduling pass at `t` unless one is queued for then already.
    pub fn ask_pass(&mut self, t: u64) {
        if let Err(i) = self.passes.binary_search_by(|x| t.cmp(x)) {
            self.passes.insert(i, t);
            self.pass = self.pass.min(t);
        }
    }

    /// Whether a scheduling pass is queued for `now`, the time of the last event taken (the
    /// earliest queued pass, as none is before `now`).
    pub fn pass_now(&self, now: u64) -> bool {
        debug_assert!(
            self.pass >= now,
            "no pass is queued before the last event taken"
        );
        self.pass == now
    }

    /// The controller issued `core`'s read `seq`; its data is back at `done`.
    pub fn read_issued(&mut self, done: u64, core: u32, seq: u64) {
        self.reads.push((core, seq, done));
    }

    /// The time of the earliest bucket holding events.
    fn first_near(&self) -> Option<u64> {
        let start = (self.base % WINDOW) as usize;
        let (w0, bit) = (start / 64, start % 64);
        // The first word from `start` on, then the others in turn, then the first word's
        // bits below `start` (the window's last cycles).
        let mut idx = None;
        let head = self.occupied[w0] & (!0u64 << bit);
        if head != 0 {
            idx = Some(w0 * 64 + head.trailing_zeros() as usize);
        } else {
            for k in 1..=WORDS {
                let w = (w0 + k) % WORDS;
                let word = if k == WORDS {
                    self.occupied[w] & ((1u64 << bit) - 1)
                } else {
                    self.occupied[w]
                };
                if word != 0 {
                    idx = Some(w * 64 + word.trailing_zeros() as usize);
                    break;
                }
            }
        }
        idx.map(|i| self.base + (i as u64 + WINDOW - start as u64) % WINDOW)
    }

    /// Move the window to start at `t`: far events it now covers enter their buckets, in
    /// the heap's order.
    fn slide(&mut self, t: u64) {
        self.base = t;
        while let Some(&Reverse((ft, _, _, ev))) = self.far.peek() {
            if ft >= t + WINDOW {
                break;
            }
            self.far.pop();
            self.put(ft, ev);
        }
    }

    pub fn pop(&mut self) -> Option<(u64, Ev)> {
        // Far events all lie beyond the window, so after every near one.
        let t = match self.next {
            u64::MAX => self.far.peek().map_or(u64::MAX, |r| r.0 .0),
            t => t,
        };
        // A pass comes after the completions of its time, before its cores.
        if self.pass < t {
            return Some(self.pop_pass());
        }
        if t == u64::MAX {
            return None;
        }
        if self.pass == t && self.buckets[(t % WINDOW) as usize].done.is_empty() {
            return Some(self.pop_pass());
        }
        self.slide(t);
        let i = (t % WINDOW) as usize;
        let ev = self.buckets[i]
            .pop()
            .expect("an occupied bucket holds an event");
        if self.buckets[i].is_empty() {
            self.occupied[i / 64] &= !(1 << (i % 64));
            self.next = self.first_near().unwrap_or(u64::MAX);
        }
        debug_assert_eq!(Some(self.next), self.first_near().or(Some(u64::MAX)));
        Some((t, ev))
    }

    /// The earliest pass, due now.
    fn pop_pass(&mut self) -> (u64, Ev) {
        let t = self.passes.pop().expect("a pass is queued");
        self.pass = self.passes.last().copied().unwrap_or(u64::MAX);
        debug_assert!(self.pass >= t, "passes are kept latest first");
        self.slide(t);
        (t, Ev::Tick)
    }

    /// Whether something must happen before core `core`'s cycle `t`: an event before `t`, a
    /// completion or scheduling pass at `t`, or a lower-numbered core at `t`.
    pub fn blocks(&self, t: u64, core: u32) -> bool {
        if self.pass <= t {
            return true;
        }
        match self.next {
            h if h == t => self.buckets[(t % WINDOW) as usize].before_core(core),
            u64::MAX => self
                .far
                .peek()
                .is_some_and(|&Reverse((ft, class, order, _))| {
                    ft < t || (ft == t && (class < 2 || order < u64::from(core)))
                }),
            h => h < t,
        }
    }

    /// Whether a completion at `t`, the time of the last event taken, is still queued (all of
    /// that time's events are in its bucket: the window starts there).
    pub fn completion_at(&self, t: u64) -> bool {
        debug_assert_eq!(t, self.base, "asked at the time of the last event taken");
        !self.buckets[(t % WINDOW) as usize].done.is_empty()
    }

    /// The earliest pending time: nothing can happen before it.
    #[cfg(test)]
    pub fn horizon(&self) -> u64 {
        let far = self.far.peek().map_or(u64::MAX, |r| r.0 .0).min(self.pass);
        self.first_near().map_or(far, |t| t.min(far))
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

    /// Pops match a plain sort of (time, class, push order or core number) on random pushes
    /// interleaved with pops, `ahead` drawing how far after the last pop each push lands.
    fn pops_match_a_sort(seed: u64, ahead: impl Fn(&mut SmallRng) -> u64) {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut ev = Events::default();
        let mut model: Vec<(u64, u8, u64, Ev)> = Vec::new();
        let (mut now, mut order) = (0u64, 0u64);
        for _ in 0..20_000 {
            if rng.gen_bool(0.55) || model.is_empty() {
                let t = now + ahead(&mut rng);
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
                // One pass a time: a second one asked for a time is the same pass.
                let again = e == Ev::Tick && model.iter().any(|m| m.0 == t && m.3 == Ev::Tick);
                if !again {
                    model.push((t, e.class(), within, e));
                }
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

    #[test]
    fn pops_keep_the_order_within_the_window() {
        pops_match_a_sort(7, |rng| rng.gen_range(0..4u64));
    }

    /// The controller's passes: one a time, after that time's completions and before its
    /// cores, also beyond the window and with nothing else queued.
    #[test]
    fn passes_are_one_a_time_between_completions_and_cores() {
        let mut ev = Events::default();
        let done = Ev::Accepted { core: 0, seq: 1 };
        ev.push(5, Ev::CoreRun(0));
        ev.ask_pass(5);
        ev.push(5, done);
        ev.ask_pass(5);
        ev.ask_pass(3 * WINDOW);
        ev.push(3 * WINDOW + 1, done);
        assert!(ev.blocks(5, 0) && ev.horizon() == 5);
        assert_eq!(ev.pop(), Some((5, done)));
        assert!(ev.pass_now(5) && !ev.completion_at(5));
        assert_eq!(ev.pop(), Some((5, Ev::Tick)));
        assert!(!ev.pass_now(5) && !ev.blocks(5, 0));
        assert_eq!(ev.pop(), Some((5, Ev::CoreRun(0))));
        assert_eq!(ev.horizon(), 3 * WINDOW);
        assert_eq!(ev.pop(), Some((3 * WINDOW, Ev::Tick)));
        assert_eq!(ev.pop(), Some((3 * WINDOW + 1, done)));
        assert_eq!(ev.pop(), None);
    }

    /// Events beyond the window wait in the heap and join their buckets in order, also where
    /// the window wraps around its buckets.
    #[test]
    fn pops_keep_the_order_beyond_the_window() {
        pops_match_a_sort(11, |rng| {
            if rng.gen_bool(0.1) {
                WINDOW - 2 + rng.gen_range(0..4u64) * (WINDOW / 2)
            } else {
                rng.gen_range(0..4u64)
            }
        });
    }
}
