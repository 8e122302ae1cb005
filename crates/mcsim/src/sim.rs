//! The engine: cores with a re-order buffer over the cache hierarchy and the memory
//! controller, in virtual time (CPU cycles). docs/mcsim.md, "How the engine keeps time".
//!
//! Each core's re-order buffer is evaluated in closed form (`rob`). A core runs on alone
//! through everything private to it: plain instructions, fences, L1 and L2 hits (their times
//! follow from its ROB's recurrences, and no other core can change them). Its next shared
//! access (an access reaching L3, a flush, a bind, a commit reaching the controller) waits
//! until it is the earliest thing left anywhere: its time is the fetch cycle its ROB gives it
//! (a commit's: the cycle it reaches the ROB head). A read's completion is known when it
//! arrives (the controller, `mc`, places it at once), so a core waits on the memory system
//! only for a flush whose sub-queue has no room and for a commit: its ROB then cannot give
//! the time of what comes after, and the core has no time until the controller says when
//! the entry is done.
//!
//! At equal times the controller acts first, then the cores in core order.

use crate::cache::{Hierarchy, Served};
use crate::config::{Config, Mode};
use crate::event::Log;
use crate::mc::{Done, Input, Mc, McStats};
use crate::rob::{Id, Rob};
use crate::trace::{Op, OpBuffer, Workload};
use nvstack_core::error::{Error, Result};
use rustc_hash::FxHashMap;

/// What a run measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Report {
    pub mode: Mode,
    pub cores: u32,
    /// Cycles until the last core retired its last instruction.
    pub cycles: u64,
    pub instructions: u64,
    /// Instructions per cycle of the whole machine.
    pub ipc: f64,
    pub loads: u64,
    pub stores: u64,
    pub flushes: u64,
    /// Accesses served by L1, L2, L3 and memory.
    pub served: [u64; 4],
    pub mc: McStats,
    /// Mean cycles from a commit reaching the ROB head to its completion.
    pub commit_cycles_mean: f64,
    pub clock_mhz: u32,
}

impl Report {
    pub fn commit_ns_mean(&self) -> f64 {
        self.commit_cycles_mean * 1000.0 / f64::from(self.clock_mhz)
    }
}

/// A finished run: its report, the final memory contents (line -> version of the last store,
/// after every queued write and every dirty cached line reached memory) and the event log.
pub struct Outcome {
    pub report: Report,
    pub memory: FxHashMap<u64, u64>,
    pub log: Vec<Log>,
}

/// Run `work` on the machine `cfg`.
pub fn run(cfg: &Config, work: &mut dyn Workload) -> Result<Outcome> {
    check_threads(cfg, work)?;
    let mut sim = Sim::new(cfg, work);
    sim.go()?;
    Ok(sim.finish())
}

/// `run`, also returning every input of the controller in order: the requests that reached it
/// (the stream the bench replays on a peer simulator), commits and range bindings (what
/// `replay` replays on the controller alone). The run itself is the same.
pub fn run_recording(cfg: &Config, work: &mut dyn Workload) -> Result<(Outcome, Vec<Input>)> {
    check_threads(cfg, work)?;
    let mut sim = Sim::new(cfg, work);
    sim.mc.inputs = Some(Vec::new());
    sim.go()?;
    let inputs = sim.mc.inputs.take().unwrap_or_default();
    Ok((sim.finish(), inputs))
}

/// One operation of a core's program as the engine ran it, with the times the engine gave
/// it: the fetch cycle of a shared access (`UNTIMED` for a private one, an L1 or L2 hit whose
/// time the engine never needed), the cycle its data was back, a flush's acceptance, a
/// commit's arrival at the controller and its completion. An independent model of the core
/// replays these (tests/rob_replay.rs) and must find the same fetch cycles and arrivals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Gap(u32),
    /// A load or store: what served it and, for one served by memory, when its data was back.
    Access {
        served: Served,
        fetch: u64,
        ready: u64,
    },
    /// `ready`: None if accepted at once (a clean line, eADR, room in its sub-queue).
    Flush {
        fetch: u64,
        ready: Option<u64>,
    },
    Fence,
    /// When it reached the controller and when it was done.
    Commit {
        arrival: u64,
        done: u64,
    },
    Bind {
        fetch: u64,
    },
}

/// A time the engine did not need (a private access's fetch).
pub const UNTIMED: u64 = u64::MAX;

/// A core's program as run (`run_stepping`), its finish cycle and instructions.
#[derive(Clone, Debug, Default)]
pub struct CoreSteps {
    pub steps: Vec<Step>,
    pub finished_at: u64,
    pub instructions: u64,
}

/// `run`, also returning each core's program as it ran, with its times (`Step`). The run
/// itself is the same.
pub fn run_stepping(cfg: &Config, work: &mut dyn Workload) -> Result<(Outcome, Vec<CoreSteps>)> {
    check_threads(cfg, work)?;
    let mut sim = Sim::new(cfg, work);
    sim.rec = Some(Box::new(Recorder {
        cores: (0..cfg.cores).map(|_| CoreSteps::default()).collect(),
        waiting: (0..cfg.cores).map(|_| FxHashMap::default()).collect(),
    }));
    sim.lanes.iter_mut().for_each(|l| l.rob.log_arrivals());
    sim.go()?;
    let mut rec = sim.rec.take().expect("recording");
    for (c, lane) in sim.lanes.iter_mut().enumerate() {
        let core = &mut rec.cores[c];
        core.finished_at = lane
            .rob
            .cycles()
            .expect("every entry is resolved at the end");
        core.instructions = lane.rob.instructions();
        assert!(rec.waiting[c].is_empty(), "every entry got its time");
        // Every commit's arrival, in order (those done at arrival never reach the engine).
        let mut arrivals = lane.rob.arrivals().iter();
        for step in &mut core.steps {
            if let Step::Commit { arrival, done } = step {
                *arrival = *arrivals.next().expect("a commit arrived");
                *done = (*done).max(*arrival);
            }
        }
    }
    Ok((sim.finish(), rec.cores))
}

/// What `run_stepping` keeps while the run goes: the steps, and for each entry still waiting
/// for its time the index of its step (by core, by ROB id).
struct Recorder {
    cores: Vec<CoreSteps>,
    waiting: Vec<FxHashMap<u64, usize>>,
}

impl Sim<'_> {
    /// Record core `c`'s private operation `op` (not an access: `private_access` records
    /// those); `id`: a commit's entry, whose times come later.
    fn note_private(&mut self, c: usize, op: Op, id: Option<Id>) {
        let step = match op {
            Op::Gap(n) => Step::Gap(n),
            Op::Fence => Step::Fence,
            Op::Commit { .. } => Step::Commit {
                arrival: 0,
                done: 0,
            },
            _ => return,
        };
        self.note(c, step, id);
    }

    /// Record `step` of core `c` (if recording); `id`: its entry, whose time comes later.
    #[inline]
    fn note(&mut self, c: usize, step: Step, id: Option<Id>) {
        if let Some(rec) = self.rec.as_mut() {
            let steps = &mut rec.cores[c].steps;
            if let Some(id) = id {
                let fresh = rec.waiting[c].insert(id.0, steps.len()).is_none();
                assert!(fresh, "one entry waits per id");
            }
            steps.push(step);
        }
    }

    /// Core `c`'s entry `id` got its time `t` (a flush accepted, a commit done).
    #[inline]
    fn note_time(&mut self, c: usize, id: Id, t: u64) {
        let Some(rec) = self.rec.as_mut() else {
            return;
        };
        let i = rec.waiting[c].remove(&id.0).expect("a recorded entry");
        match &mut rec.cores[c].steps[i] {
            Step::Flush { ready, .. } => *ready = Some(t),
            Step::Commit { done, .. } => *done = t,
            other => unreachable!("{other:?} waits for no time"),
        }
    }
}

pub(crate) fn check_threads(cfg: &Config, work: &dyn Workload) -> Result<()> {
    cfg.validate()?;
    if work.threads() != cfg.cores as usize {
        return Err(Error::bad(format!(
            "the workload has {} threads but the machine {} cores: one thread per core",
            work.threads(),
            cfg.cores
        )));
    }
    Ok(())
}

/// The data of core `core`'s `n`th store: it names the core and the store's place in that
/// core's program, so the final memory of two runs compares whatever the interleaving of
/// cores (and the functional floor writes the same).
pub(crate) fn store_data(core: usize, n: u64) -> u64 {
    debug_assert!(
        n > 0 && n < 1 << 40,
        "a store count fits below the core's bits"
    );
    ((core as u64 + 1) << 40) | n
}

/// A core's key when it has no time: waiting on the memory system, or finished.
const NO_TIME: u64 = u64::MAX;

/// The bits of a token (a deferred entry named to the controller) that hold its ROB id.
const TOKEN_ID_BITS: u32 = 48;

struct Lane {
    ops: OpBuffer,
    stores: u64,
    rob: Rob,
    /// A commit fetched and not yet at the controller: its ROB id and range.
    commit: Option<(Id, u64, u64)>,
    /// A commit at the controller and not done: the core takes no operation until it is.
    /// Nothing after a commit is fetched before it retires, so what follows waits anyway,
    /// and taken after its resolution it runs on the ROB's fast path instead of queueing.
    sent: Option<Id>,
    trace_done: bool,
}

struct Sim<'w> {
    cfg: Config,
    work: &'w mut dyn Workload,
    lanes: Vec<Lane>,
    /// Per core, the time of its next shared access (NO_TIME: none known).
    keys: Turns,
    caches: Hierarchy,
    mc: Mc,
    line_shift: u32,
    /// Loads, stores and flushes.
    counts: [u64; 3],
    /// Commits are done when they reach the controller (ADR, eADR, the ideal memory).
    commits_at_arrival: bool,
    done: Vec<Done>,
    /// Each core's program as run, with its times (`run_stepping`); None otherwise.
    rec: Option<Box<Recorder>>,
}

impl<'w> Sim<'w> {
    fn new(cfg: &Config, work: &'w mut dyn Workload) -> Sim<'w> {
        let cores = cfg.cores as usize;
        assert!(cores < 1 << (64 - TOKEN_ID_BITS), "a token names its core");
        Sim {
            cfg: cfg.clone(),
            work,
            lanes: (0..cores)
                .map(|_| Lane {
                    ops: OpBuffer::default(),
                    stores: 0,
                    rob: Rob::new(cfg),
                    commit: None,
                    sent: None,
                    trace_done: false,
                })
                .collect(),
            keys: Turns::new(cores),
            caches: Hierarchy::new(cfg),
            mc: Mc::new(cfg),
            line_shift: cfg.line_bytes.trailing_zeros(),
            counts: [0; 3],
            commits_at_arrival: cfg.ideal_memory || matches!(cfg.mode, Mode::Adr | Mode::Eadr),
            done: Vec::new(),
            rec: None,
        }
    }

    fn go(&mut self) -> Result<()> {
        for c in 0..self.lanes.len() {
            let key = self.advance(c)?;
            self.keys.set(c, key);
        }
        loop {
            let (t, c) = self.keys.first();
            let m = self.mc.next_action();
            if m != NO_TIME && m <= t {
                self.mc.step(&mut self.done);
                self.resolve()?;
                continue;
            }
            if t == NO_TIME {
                break;
            }
            self.act(c, t);
            let key = self.advance(c)?;
            self.keys.set(c, key);
        }
        assert!(
            self.mc.idle(),
            "the controller is idle once nothing is left"
        );
        assert!(
            self.lanes
                .iter()
                .all(|l| l.trace_done && l.commit.is_none() && l.sent.is_none()),
            "every core ran its trace to the end"
        );
        Ok(())
    }

    /// The entries the controller finished: each core waiting on one may go on.
    fn resolve(&mut self) -> Result<()> {
        while let Some(d) = self.done.pop() {
            let c = (d.token >> TOKEN_ID_BITS) as usize;
            let id = Id(d.token & ((1 << TOKEN_ID_BITS) - 1));
            let lane = &mut self.lanes[c];
            lane.rob.resolve(id, d.t);
            if lane.sent == Some(id) {
                lane.sent = None;
                // Back to the fast path before what follows the commit is taken.
                lane.rob.settle_now();
            }
            self.note_time(c, id, d.t);
            let key = self.advance(c)?;
            self.keys.set(c, key);
        }
        Ok(())
    }

    fn token(c: usize, id: Id) -> u64 {
        let id = id.0;
        assert!(id < 1 << TOKEN_ID_BITS, "a ROB id fits its token");
        ((c as u64) << TOKEN_ID_BITS) | id
    }

    /// Run core `c` through its private operations; the time of its next shared access
    /// (NO_TIME: it waits on the memory system, or is done).
    fn advance(&mut self, c: usize) -> Result<u64> {
        loop {
            let lane = &mut self.lanes[c];
            if lane.trace_done || lane.sent.is_some() {
                return Ok(NO_TIME);
            }
            if let Some((id, ..)) = lane.commit {
                // It reaches the controller once everything before it retired: once it is
                // the oldest entry not resolved (an earlier commit, sent, may still be).
                let first = lane.rob.waiting_on() == Some(id);
                let arrival = lane.rob.commit_arrival().filter(|_| first);
                return Ok(arrival.unwrap_or(NO_TIME));
            }
            let Some(op) = lane.ops.peek(self.work, c)? else {
                lane.trace_done = true;
                return Ok(NO_TIME);
            };
            let waits = match op {
                Op::Gap(n) => {
                    lane.rob.gap(u64::from(n));
                    None
                }
                Op::Fence => {
                    lane.rob.fence();
                    None
                }
                // A commit done at its arrival (ADR, eADR, the ideal memory) resolves in the
                // ROB alone; the controller only counts it.
                Op::Commit { .. } if self.commits_at_arrival => {
                    lane.rob.commit();
                    self.mc.stats.commits += 1;
                    None
                }
                Op::Commit { addr, len } => {
                    let id = lane.rob.commit();
                    lane.commit = Some((id, addr, len));
                    Some(id)
                }
                Op::Load(a) | Op::Store(a) => {
                    if !self.private_access(c, op, a) {
                        // L1's and L2's sets were just read.
                        self.caches.prefetch_shared(a >> self.line_shift);
                        return Ok(self.lanes[c].rob.fetch_cycle().unwrap_or(NO_TIME));
                    }
                    None
                }
                Op::Flush(a) => {
                    self.caches.prefetch(c, a >> self.line_shift);
                    return Ok(lane.rob.fetch_cycle().unwrap_or(NO_TIME));
                }
                Op::Bind { .. } => {
                    return Ok(lane.rob.fetch_cycle().unwrap_or(NO_TIME));
                }
            };
            if self.rec.is_some() {
                self.note_private(c, op, waits);
            }
            self.lanes[c].ops.consume();
        }
    }

    /// Core `c`'s shared access at `t`, its earliest.
    fn act(&mut self, c: usize, t: u64) {
        if let Some((id, addr, len)) = self.lanes[c].commit.take() {
            let at_once = self.mc.commit(t, Self::token(c, id), addr, len);
            assert!(!at_once, "only commits that wait reach the controller");
            self.lanes[c].sent = Some(id);
            return;
        }
        let lane = &mut self.lanes[c];
        let op = lane
            .ops
            .buffered()
            .expect("a core with a time has its access");
        lane.ops.consume();
        match op {
            Op::Load(a) | Op::Store(a) => self.shared_access(c, op, a, t),
            Op::Flush(a) => self.flush(c, t, a >> self.line_shift),
            Op::Bind { addr, len } => {
                self.mc.bind(t, addr, len);
                self.note(c, Step::Bind { fetch: t }, None);
            }
            Op::Gap(_) | Op::Fence | Op::Commit { .. } => unreachable!("private operations"),
        }
    }

    /// The store's data (0 for a load), counted.
    fn version(&mut self, c: usize, op: Op) -> u64 {
        if let Op::Store(_) = op {
            self.counts[1] += 1;
            let lane = &mut self.lanes[c];
            lane.stores += 1;
            store_data(c, lane.stores)
        } else {
            self.counts[0] += 1;
            0
        }
    }

    /// A load or a store that stays in core `c`'s L1 or L2, done; false (nothing done) if it
    /// would reach L3.
    #[inline]
    fn private_access(&mut self, c: usize, op: Op, a: u64) -> bool {
        let line = a >> self.line_shift;
        // The store's data is named only if it is done here (counted once).
        let probe = if let Op::Store(_) = op {
            store_data(c, self.lanes[c].stores + 1)
        } else {
            0
        };
        let Some(served) = self.caches.access_private(c, line, probe) else {
            return false;
        };
        let version = self.version(c, op);
        debug_assert_eq!(version, probe, "the data stored is the one probed");
        let l = if served == Served::L1 {
            &self.cfg.l1
        } else {
            &self.cfg.l2
        };
        self.lanes[c].rob.entry(u64::from(l.hit_cycles));
        self.note_access(c, served, UNTIMED, UNTIMED);
        true
    }

    /// Record core `c`'s access (if recording): what served it, its fetch and ready cycles.
    #[inline]
    fn note_access(&mut self, c: usize, served: Served, fetch: u64, ready: u64) {
        let step = Step::Access {
            served,
            fetch,
            ready,
        };
        self.note(c, step, None);
    }

    /// A load or a store reaching L3 at `t`: an L3 hit, or a read placed by the controller.
    fn shared_access(&mut self, c: usize, op: Op, a: u64, t: u64) {
        let line = a >> self.line_shift;
        let version = self.version(c, op);
        // An L2 hit is shared when its fill pushes a dirty line out of L1 (towards L3).
        let served = self.caches.access(c, line, version);
        let latency = match served {
            Served::L2 => u64::from(self.cfg.l2.hit_cycles),
            Served::L3 => u64::from(self.cfg.l3_per_core.hit_cycles),
            Served::Memory => self.mc.read(t, line) - t,
            Served::L1 => unreachable!("an L1 hit is private"),
        };
        self.lanes[c].rob.entry(latency);
        self.note_access(c, served, t, t + latency);
        // Dirty lines pushed out of L3 go to the write queue; no core waits for them.
        for i in 0..self.caches.writebacks.len() {
            let (line, version) = self.caches.writebacks[i];
            self.mc.write(t, line, version, None);
        }
        self.caches.writebacks.clear();
    }

    /// clwb: a dirty line's data goes to the write queue and the flush completes when it is
    /// accepted (at once under eADR, whose caches are persistent: the write is posted).
    fn flush(&mut self, c: usize, t: u64, line: u64) {
        self.counts[2] += 1;
        let at_once = Step::Flush {
            fetch: t,
            ready: None,
        };
        let rob = &mut self.lanes[c].rob;
        let Some(version) = self.caches.flush(c, line) else {
            rob.entry(0);
            return self.note(c, at_once, None);
        };
        if self.cfg.mode == Mode::Eadr {
            rob.entry(0);
            self.mc.write(t, line, version, None);
            return self.note(c, at_once, None);
        }
        // Named by the id its entry takes if it must wait; accepted at once, it is an entry
        // ready at its fetch, which keeps the ROB on its fast path.
        let id = rob.next_id();
        if self.mc.write(t, line, version, Some(Self::token(c, id))) {
            self.lanes[c].rob.entry(0);
            self.note(c, at_once, None);
        } else {
            let deferred = self.lanes[c].rob.entry_deferred();
            assert_eq!(deferred, id, "the flush's entry has the id it was named by");
            self.note(c, at_once, Some(id));
        }
    }

    fn finish(mut self) -> Outcome {
        let cycles = self
            .lanes
            .iter_mut()
            .map(|l| l.rob.cycles().expect("every entry is resolved at the end"))
            .max()
            .unwrap_or(0);
        let instructions: u64 = self.lanes.iter().map(|l| l.rob.instructions()).sum();
        for (line, version) in self.caches.dirty_lines() {
            let newer = self.mc.memory().get(&line).is_none_or(|&v| v < version);
            if newer {
                self.mc.memory().insert(line, version);
            }
        }
        let stats = self.mc.stats.clone();
        let committed = stats.commits.max(1) as f64;
        let report = Report {
            mode: self.cfg.mode,
            cores: self.cfg.cores,
            cycles,
            instructions,
            ipc: if cycles == 0 {
                0.0
            } else {
                instructions as f64 / cycles as f64
            },
            loads: self.counts[0],
            stores: self.counts[1],
            flushes: self.counts[2],
            served: self.caches.hits,
            commit_cycles_mean: stats.commit_cycles_total as f64 / committed,
            mc: stats,
            clock_mhz: self.cfg.clock_mhz,
        };
        let log = self.mc.take_log();
        Outcome {
            report,
            memory: std::mem::take(self.mc.memory()),
            log,
        }
    }
}

/// The cores' times in a tournament tree: the earliest (lowest number first at equal times)
/// is at the root, and a core's new time costs log2(cores) comparisons, not a scan of all.
/// A node holds a time and a core in one word, the time above `CORE_BITS` bits of core, so
/// the order of words is the order of (time, core).
struct Turns {
    /// Node i (from 1) holds the lesser of nodes 2i and 2i + 1; leaves are `half..2 half`.
    tree: Vec<u64>,
    half: usize,
}

const CORE_BITS: u32 = 10;

impl Turns {
    fn new(cores: usize) -> Turns {
        assert!(cores <= 1 << CORE_BITS, "a core's number fits its bits");
        let half = cores.next_power_of_two().max(2);
        Turns {
            tree: vec![u64::MAX; 2 * half],
            half,
        }
    }

    /// Core `core`'s time is `key` (NO_TIME: none).
    #[inline]
    fn set(&mut self, core: usize, key: u64) {
        let word = if key == NO_TIME {
            u64::MAX
        } else {
            assert!(
                key < 1 << (64 - CORE_BITS),
                "a time fits above the core's bits"
            );
            (key << CORE_BITS) | core as u64
        };
        let mut i = self.half + core;
        self.tree[i] = word;
        while i > 1 {
            let least = self.tree[i].min(self.tree[i ^ 1]);
            i /= 2;
            self.tree[i] = least;
        }
    }

    /// The earliest core's time (NO_TIME: none has one) and number.
    #[inline]
    fn first(&self) -> (u64, usize) {
        let word = self.tree[1];
        if word == u64::MAX {
            return (NO_TIME, 0);
        }
        (word >> CORE_BITS, (word & ((1 << CORE_BITS) - 1)) as usize)
    }
}
