//! Deferral invariance: a stream whose entries are given as deferred and resolved at any legal
//! point (as late as the Rob allows, as early as possible, at random, in any order) gives the
//! same fetch cycles for every shared access, the same commit arrivals, finish and
//! instructions as a step-by-step reference that knows every time when it needs it.

use super::{Id, Rob};
use crate::config::{Config, Mode};
use std::collections::VecDeque;

/// An operation of a test stream. Ready times: `Private`, `Shared` after their fetch;
/// `Deferred` too but known to the Rob only later; `Commit` its delay after its arrival.
#[derive(Clone, Copy, Debug)]
enum T {
    Gap(u64),
    Private(u64),
    Shared(u64),
    Deferred(u64),
    Fence,
    Commit(u64),
    Bind,
}

/// What a run gave: each shared access's (and bind's) fetch cycle, each commit's arrival,
/// the finish cycle and the instructions.
#[derive(Debug, Default, PartialEq, Eq)]
struct Seen {
    fetches: Vec<u64>,
    arrivals: Vec<u64>,
    cycles: u64,
    instructions: u64,
}

/// The model one instruction at a time, every time known when needed.
struct Reference {
    rob: u64,
    fs: u32,
    rs: u32,
    next: u64,
    fetch_pos: u64,
    retire_pos: u64,
    /// Retirement cycle of instruction i at i modulo ROB.
    ring: Vec<u64>,
}

impl Reference {
    fn new(cfg: &Config) -> Reference {
        Reference {
            rob: u64::from(cfg.rob_entries),
            fs: cfg.fetch_width.trailing_zeros(),
            rs: cfg.retire_width.trailing_zeros(),
            next: 0,
            fetch_pos: 0,
            retire_pos: 0,
            ring: vec![0; cfg.rob_entries as usize],
        }
    }

    /// The next instruction's fetch position.
    fn fetch(&self) -> u64 {
        let slot = (self.next % self.rob) as usize;
        let room = if self.next >= self.rob {
            self.ring[slot] << self.fs
        } else {
            0
        };
        self.fetch_pos.max(room)
    }

    /// One instruction; `ready` gives its ready cycle from its fetch cycle and the cycle it
    /// would reach the head with retire width left. Returns that arrival cycle.
    fn instr(&mut self, serial: bool, ready: impl FnOnce(u64, u64) -> u64) -> u64 {
        let fetch_pos = self.fetch();
        let f = fetch_pos >> self.fs;
        let earliest = self.retire_pos.max((f + 1) << self.rs);
        let pos = earliest.max(ready(f, earliest >> self.rs) << self.rs);
        self.retire_pos = pos + 1;
        self.ring[(self.next % self.rob) as usize] = pos >> self.rs;
        self.fetch_pos = fetch_pos + 1;
        if serial {
            self.fetch_pos = self.fetch_pos.max((pos >> self.rs) << self.fs);
        }
        self.next += 1;
        earliest >> self.rs
    }

    fn run(cfg: &Config, ops: &[T]) -> Seen {
        let mut r = Reference::new(cfg);
        let mut seen = Seen::default();
        for &op in ops {
            if let T::Shared(_) | T::Deferred(_) | T::Bind = op {
                seen.fetches.push(r.fetch() >> r.fs);
            }
            match op {
                T::Gap(n) => (0..n).for_each(|_| _ = r.instr(false, |_, _| 0)),
                T::Private(l) | T::Shared(l) | T::Deferred(l) => _ = r.instr(false, |f, _| f + l),
                T::Fence => _ = r.instr(true, |_, _| 0),
                T::Commit(d) => seen.arrivals.push(r.instr(true, |_, a| a + d)),
                T::Bind => {}
            }
        }
        seen.cycles = if r.next == 0 {
            0
        } else {
            (r.retire_pos - 1) >> r.rs
        };
        seen.instructions = r.next;
        seen
    }
}

/// When the Rob's deferred entries are resolved.
#[derive(Clone, Copy, Debug)]
enum When {
    Late,
    Early,
    Random,
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// A deferred entry not resolved yet (its ready cycle), or a commit (its delay after arrival).
type Open = (Id, u64, bool);

/// Resolve what the Rob waits on; false if nothing.
fn resolve_asked(rob: &mut Rob, open: &mut VecDeque<Open>) -> bool {
    let Some(id) = rob.waiting_on() else {
        return false;
    };
    let at = open.iter().position(|o| o.0 == id).expect("an open id");
    let (_, t, commit) = open.remove(at).expect("found");
    let ready = if commit {
        rob.commit_arrival()
            .expect("a commit waited on has arrived")
            + t
    } else {
        t
    };
    rob.resolve(id, ready);
    true
}

/// Resolve some open entries now (`Early`: all that can be; `Random`: some, any order).
fn resolve_some(rob: &mut Rob, open: &mut VecDeque<Open>, when: When, x: &mut u64) {
    match when {
        When::Late => {}
        When::Early => {
            open.retain(|&(id, t, commit)| commit || (rob.resolve(id, t), false).1);
            // A commit as soon as its arrival is known.
            while rob.commit_arrival().is_some() && resolve_asked(rob, open) {}
        }
        When::Random => {
            while !open.is_empty() && xorshift(x).is_multiple_of(2) {
                let i = xorshift(x) as usize % open.len();
                if !open[i].2 {
                    let (id, t, _) = open.remove(i).expect("in range");
                    rob.resolve(id, t);
                } else if rob.waiting_on() == Some(open[i].0) {
                    resolve_asked(rob, open);
                }
            }
        }
    }
}

/// The stream through a Rob, deferred entries resolved `when`; known ones given as deferred
/// at random too (`x`).
fn run_rob(cfg: &Config, ops: &[T], when: When, mut x: u64) -> Seen {
    let mut rob = Rob::new(cfg);
    rob.log_arrivals();
    let mut open: VecDeque<Open> = VecDeque::new();
    let mut seen = Seen::default();
    for &op in ops {
        if let T::Shared(_) | T::Deferred(_) | T::Bind = op {
            let f = loop {
                if let Some(f) = rob.fetch_cycle() {
                    break f;
                }
                assert!(resolve_asked(&mut rob, &mut open), "a fetch waits on an id");
            };
            seen.fetches.push(f);
            if let T::Shared(l) | T::Deferred(l) = op {
                if matches!(op, T::Deferred(_)) || xorshift(&mut x).is_multiple_of(2) {
                    open.push_back((rob.entry_deferred(), f + l, false));
                } else {
                    rob.entry(l);
                }
            }
        }
        match op {
            T::Gap(n) => rob.gap(n),
            T::Private(l) => rob.entry(l),
            T::Fence => rob.fence(),
            T::Commit(d) => {
                let id = rob.commit();
                if !at_arrival(cfg) {
                    open.push_back((id, d, true));
                }
            }
            T::Shared(_) | T::Deferred(_) | T::Bind => {}
        }
        resolve_some(&mut rob, &mut open, when, &mut x);
    }
    while resolve_asked(&mut rob, &mut open) {}
    assert!(open.is_empty(), "every open entry was asked for");
    seen.arrivals = rob.arrivals().to_vec();
    seen.cycles = rob.cycles().expect("all resolved");
    seen.instructions = rob.instructions();
    seen
}

fn at_arrival(cfg: &Config) -> bool {
    cfg.ideal_memory || matches!(cfg.mode, Mode::Adr | Mode::Eadr)
}

/// A random stream: plain runs up to three ROBs, hits, shared and deferred accesses with
/// latencies up to a few hundred cycles, fences, commits (no delay when done at arrival).
fn stream(seed: u64, n: usize, rob: u64, delays: bool) -> Vec<T> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            let (kind, v) = (xorshift(&mut x) % 16, xorshift(&mut x));
            let latency = [0, 1, 4, 10, 40, 170, 400][(v % 7) as usize];
            match kind {
                0..=2 => T::Gap(v % (3 * rob + 1)),
                3..=4 => T::Gap(v % 4),
                5..=7 => T::Private(latency.min(10)),
                8..=9 => T::Shared(latency),
                10..=12 => T::Deferred(latency),
                13 => T::Fence,
                14 => T::Commit(if delays { latency } else { 0 }),
                _ => T::Bind,
            }
        })
        .collect()
}

/// (ROB entries, fetch width, retire width): Table II's, smaller and wider ones.
const MACHINES: [(u32, u32, u32); 6] = [
    (256, 4, 2),
    (32, 4, 2),
    (16, 2, 2),
    (64, 8, 4),
    (6, 4, 2),
    (12, 4, 4),
];

#[test]
fn deferral_changes_nothing() {
    let mut runs = 0;
    for (rob_entries, fetch_width, retire_width) in MACHINES {
        for mode in [Mode::Global, Mode::Adr] {
            let cfg = Config {
                mode,
                rob_entries,
                fetch_width,
                retire_width,
                ..Config::default()
            };
            for seed in 1..=40u64 {
                let n = if seed <= 30 { 60 } else { 2000 };
                let ops = stream(seed, n, u64::from(rob_entries), !at_arrival(&cfg));
                let want = Reference::run(&cfg, &ops);
                for when in [When::Late, When::Early, When::Random] {
                    let got = run_rob(&cfg, &ops, when, seed);
                    let machine = (rob_entries, fetch_width, retire_width, mode);
                    assert_eq!(got, want, "{machine:?} seed {seed} resolved {when:?}");
                    runs += 1;
                }
            }
        }
    }
    assert_eq!(runs, 6 * 2 * 40 * 3, "every run checked");
}

/// A Rob with nothing deferred never queues: every query answers at once.
#[test]
fn known_times_take_the_fast_path() {
    let cfg = Config {
        mode: Mode::Adr,
        ..Config::default()
    };
    let mut rob = Rob::new(&cfg);
    for op in stream(7, 5000, u64::from(cfg.rob_entries), false) {
        match op {
            T::Gap(n) => rob.gap(n),
            T::Private(l) | T::Shared(l) | T::Deferred(l) => rob.entry(l),
            T::Fence => rob.fence(),
            T::Commit(_) => {
                rob.commit();
                assert!(rob.commit_arrival().is_none(), "resolved at arrival");
            }
            T::Bind => {}
        }
        assert!(!rob.queued, "nothing queued");
        assert!(rob.fetch_cycle().is_some() && rob.waiting_on().is_none());
    }
}
