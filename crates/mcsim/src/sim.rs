//! The engine: cores with a re-order buffer over the cache hierarchy and the memory
//! controller, in virtual time (CPU cycles).
//!
//! Each core keeps a local clock. It runs ahead of the others as long as what it does is
//! private (instructions, L1 and L2 hits) and no completion still to come can change it: a
//! read's completion time is fixed when the controller issues it and is handed to the core
//! then, so only entries of unknown time (a read not yet issued, a flush not yet accepted,
//! a commit) make a core wait for the others, and only once its retire step can reach one.
//! An access to shared state (L3, the controller) happens only once every other actor's
//! clock has reached it, so the shared state sees accesses in time order. That keeps the
//! model exact while a core in a long private stretch costs one event, not one per cycle.

use crate::cache::{Hierarchy, Served};
use crate::config::{Config, Mode};
use crate::event::{Ev, Events, Log};
use crate::mc::{Arrival, Mc, McStats};
use crate::trace::{Op, OpBuffer, Workload};
use nvstack_core::error::{Error, Result};
use rustc_hash::FxHashMap;

/// `ready_at` of an entry waiting for the memory system.
const PENDING: u64 = u64::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Mem,
    /// A load or store that missed every cache: its line is read from memory.
    Read,
    Fence,
    /// A commit, sent to the controller when it reaches the ROB head.
    Commit {
        addr: u64,
        len: u64,
        sent: bool,
    },
}

/// A ROB entry that is not a plain instruction (plain ones are only counted).
#[derive(Clone, Copy, Debug)]
struct Entry {
    seq: u64,
    ready_at: u64,
    kind: Kind,
}

#[derive(Default)]
struct Core {
    /// The next cycle to simulate.
    t: u64,
    fetched: u64,
    retired: u64,
    entries: Rob,
    /// For each entry of unknown time, its number (`Rob`), at its seq modulo a power of two
    /// not below the ROB size: the instructions in the ROB have distinct seqs in a window of
    /// that size, so a completion finds its entry with one look, not a search.
    waiting: Vec<u64>,
    pending: u32,
    gap_left: u32,
    /// A fence or commit in the ROB: nothing after it is fetched until it retires.
    stalled: bool,
    /// The thread's operations not yet issued (an operation is consumed only once issued,
    /// so a core that stops before a shared access finds it again).
    ops: OpBuffer,
    trace_done: bool,
    finished_at: Option<u64>,
    sleeping: bool,
    /// This cycle's retire step is done and this much fetch width is left (a core can stop
    /// in the middle of a cycle, before a shared access).
    retired_at: Option<u64>,
    fetch_left: u32,
    stores: u64,
}

/// The ROB's entries in a ring of a power-of-two size not below the ROB's (each entry is an
/// instruction in the ROB). Entries are numbered in push order over the whole run; entry n
/// is at n modulo the size, so it is found by its number, and the ring needs no wrap tests.
#[derive(Default)]
struct Rob {
    buf: Box<[Entry]>,
    /// The number of the front entry and one past the back's.
    head: u64,
    tail: u64,
}

impl Rob {
    fn new(rob_entries: u32) -> Rob {
        let empty = Entry {
            seq: 0,
            ready_at: 0,
            kind: Kind::Mem,
        };
        Rob {
            buf: vec![empty; (rob_entries as usize).next_power_of_two()].into(),
            head: 0,
            tail: 0,
        }
    }

    #[inline]
    fn slot(&self, n: u64) -> usize {
        n as usize & (self.buf.len() - 1)
    }

    fn is_empty(&self) -> bool {
        self.head == self.tail
    }

    #[inline]
    fn front(&self) -> Option<&Entry> {
        (self.head != self.tail).then(|| &self.buf[self.slot(self.head)])
    }

    #[inline]
    fn front_mut(&mut self) -> Option<&mut Entry> {
        let i = self.slot(self.head);
        (self.head != self.tail).then(|| &mut self.buf[i])
    }

    fn back_mut(&mut self) -> Option<&mut Entry> {
        let i = self.slot(self.tail.wrapping_sub(1));
        (self.head != self.tail).then(|| &mut self.buf[i])
    }

    fn pop_front(&mut self) {
        assert!(self.head != self.tail, "a pop takes an entry");
        self.head += 1;
    }

    /// Append `e`; its number.
    #[inline]
    fn push_back(&mut self, e: Entry) -> u64 {
        assert!(
            self.tail - self.head < self.buf.len() as u64,
            "the entries fit the ROB"
        );
        let (n, i) = (self.tail, self.slot(self.tail));
        self.buf[i] = e;
        self.tail += 1;
        n
    }

    /// The entries, front first.
    #[inline]
    fn iter(&self) -> impl Iterator<Item = &Entry> + '_ {
        (self.head..self.tail).map(|n| &self.buf[self.slot(n)])
    }

    /// Entry number `n`, still in the ring.
    #[inline]
    fn at(&mut self, n: u64) -> &mut Entry {
        assert!(self.head <= n && n < self.tail, "the entry is in the ROB");
        let i = self.slot(n);
        &mut self.buf[i]
    }
}

impl Core {
    /// The ROB entry `seq`, of unknown time when it was pushed (`waiting`).
    #[inline]
    fn waiting_entry(&mut self, seq: u64) -> &mut Entry {
        let mask = self.waiting.len() - 1;
        let e = self.entries.at(self.waiting[seq as usize & mask]);
        assert_eq!(e.seq, seq, "a completion names a ROB entry");
        e
    }
}

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

pub struct Sim<'w> {
    cfg: Config,
    work: &'w mut dyn Workload,
    cores: Vec<Core>,
    caches: Hierarchy,
    mc: Mc,
    ev: Events,
    line_shift: u32,
    counts: [u64; 3],
    /// Each core's program as run, with its times (`run_stepping`); None otherwise.
    rec: Option<Box<Recorder>>,
}

/// Run `work` on the machine `cfg`.
pub fn run(cfg: &Config, work: &mut dyn Workload) -> Result<Outcome> {
    check_threads(cfg, work)?;
    let mut sim = Sim::new(cfg, work);
    sim.go()?;
    Ok(sim.finish())
}

/// `run`, also returning every request that reached the controller, in arrival order (the
/// stream the bench replays on a peer simulator). The run itself is the same.
pub fn run_recording(cfg: &Config, work: &mut dyn Workload) -> Result<(Outcome, Vec<Arrival>)> {
    check_threads(cfg, work)?;
    let mut sim = Sim::new(cfg, work);
    sim.mc.arrivals = Some(Vec::new());
    sim.go()?;
    let arrivals = sim.mc.arrivals.take().unwrap_or_default();
    Ok((sim.finish(), arrivals))
}

/// `run`, also returning each core's program as it ran, with its times (`Step`): the stream
/// a closed-form ROB (`rob::Rob`) replays to be checked against the engine. The run itself
/// is the same.
pub fn run_stepping(cfg: &Config, work: &mut dyn Workload) -> Result<(Outcome, Vec<CoreSteps>)> {
    check_threads(cfg, work)?;
    let mut sim = Sim::new(cfg, work);
    sim.rec = Some(Box::new(Recorder {
        cores: (0..cfg.cores).map(|_| CoreSteps::default()).collect(),
        waiting: (0..cfg.cores).map(|_| FxHashMap::default()).collect(),
    }));
    sim.go()?;
    let mut rec = sim.rec.take().expect("recording");
    for (c, core) in sim.cores.iter().enumerate() {
        rec.cores[c].finished_at = core.finished_at.expect("every core finished");
        rec.cores[c].instructions = core.retired;
        assert!(rec.waiting[c].is_empty(), "every entry got its time");
    }
    Ok((sim.finish(), rec.cores))
}

/// One operation of a core's program as the engine ran it. Fetch cycles are those of the
/// fetch step that took it; a ready cycle is the first cycle whose retire step could see the
/// entry ready: the engine's completion time, or, if the core's clock had already passed it
/// (it ran ahead while the entry was beyond its retire step's reach, or a later actor of
/// the same cycle made the completion), the first cycle it had not retired in yet. (In the
/// replay tests the second case happens but never changes a retirement: recording the raw
/// completion times passes them too.)
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

/// A core's program as run (`run_stepping`), its finish cycle and instructions.
#[derive(Clone, Debug, Default)]
pub struct CoreSteps {
    pub steps: Vec<Step>,
    pub finished_at: u64,
    pub instructions: u64,
}

/// What `run_stepping` keeps while the run goes: the steps, and for each entry still waiting
/// for its time the index of its step (by core, by ROB seq).
struct Recorder {
    cores: Vec<CoreSteps>,
    waiting: Vec<FxHashMap<u64, usize>>,
}

impl Sim<'_> {
    /// Record `step` of core `c` (if recording); `seq`: the entry whose time comes later.
    #[inline]
    fn note(&mut self, c: usize, step: Step, seq: Option<u64>) {
        if let Some(rec) = self.rec.as_mut() {
            let steps = &mut rec.cores[c].steps;
            if let Some(seq) = seq {
                let fresh = rec.waiting[c].insert(seq, steps.len()).is_none();
                assert!(fresh, "one entry waits per seq");
            }
            steps.push(step);
        }
    }

    /// Core `c`'s entry `seq` got its time `t` (read back, flush accepted, commit arrived or
    /// done: `arrived` says which for a commit).
    #[inline]
    fn note_time(&mut self, c: usize, seq: u64, t: u64, arrived: bool) {
        let Some(rec) = self.rec.as_mut() else {
            return;
        };
        let ran = self.cores[c].retired_at.map_or(0, |r| r + 1);
        let ready = t.max(ran);
        let waiting = &mut rec.waiting[c];
        let i = if arrived {
            waiting[&seq]
        } else {
            waiting.remove(&seq).expect("a waiting entry")
        };
        match &mut rec.cores[c].steps[i] {
            Step::Access { ready: r, .. } => *r = ready,
            Step::Flush { ready: r, .. } => *r = Some(ready),
            Step::Commit { arrival, .. } if arrived => *arrival = t,
            Step::Commit { done, .. } => *done = ready,
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

impl<'w> Sim<'w> {
    fn new(cfg: &Config, work: &'w mut dyn Workload) -> Sim<'w> {
        let mut ev = Events::default();
        let cores = (0..cfg.cores)
            .map(|_| Core {
                fetch_left: cfg.fetch_width,
                waiting: vec![0; (cfg.rob_entries as usize).next_power_of_two()],
                entries: Rob::new(cfg.rob_entries),
                ..Core::default()
            })
            .collect();
        for c in 0..cfg.cores {
            ev.push(0, Ev::CoreRun(c));
        }
        Sim {
            cfg: cfg.clone(),
            work,
            cores,
            caches: Hierarchy::new(cfg),
            mc: Mc::new(cfg),
            ev,
            line_shift: cfg.line_bytes.trailing_zeros(),
            counts: [0; 3],
            rec: None,
        }
    }

    fn go(&mut self) -> Result<()> {
        while let Some((t, e)) = self.ev.pop() {
            match e {
                Ev::CoreRun(c) => self.run_core(c as usize)?,
                Ev::Tick => self.mc.schedule(t, &mut self.ev),
                Ev::ReadDone { core } => self.wake(t, core as usize),
                Ev::Accepted { core, seq } | Ev::CommitDone { core, seq } => {
                    self.complete(t, core as usize, seq)
                }
                Ev::WriteDone {
                    q,
                    id,
                    line,
                    version,
                } => self.mc.write_done(t, q, id, line, version),
                Ev::QueryDone { q, answer } => self.mc.query_done(t, q, answer, &mut self.ev),
            }
            self.deliver_reads();
            self.mc.pass_if_due(t, &mut self.ev);
            self.deliver_reads();
        }
        assert!(
            self.mc.idle(),
            "the event queue empties only when the controller is idle"
        );
        assert!(
            self.cores.iter().all(|c| c.finished_at.is_some()),
            "every core ran its trace to the end"
        );
        Ok(())
    }

    /// A ROB entry's wait is over at `t`; a core asleep on it continues.
    fn complete(&mut self, t: u64, c: usize, seq: u64) {
        let core = &mut self.cores[c];
        let e = core.waiting_entry(seq);
        assert_eq!(e.ready_at, PENDING, "an entry completes once");
        e.ready_at = t;
        core.pending -= 1;
        self.note_time(c, seq, t, false);
        self.wake(t, c);
    }

    /// The reads the controller issued since the last look: each entry gets its completion
    /// time at once, so the core need not wait for an event to know it (see `must_sync`). A
    /// core asleep now is woken at that time as before (`Ev::ReadDone`); one that falls
    /// asleep later gets its wake-up then (`advance`).
    #[inline]
    fn deliver_reads(&mut self) {
        if !self.ev.reads.is_empty() {
            self.deliver_issued_reads();
        }
    }

    #[inline(never)]
    fn deliver_issued_reads(&mut self) {
        while let Some((c, seq, done)) = self.ev.reads.pop() {
            let core = &mut self.cores[c as usize];
            let e = core.waiting_entry(seq);
            assert!(
                e.ready_at == PENDING && e.kind == Kind::Read,
                "a read issues once"
            );
            e.ready_at = done;
            core.pending -= 1;
            let sleeping = core.sleeping;
            self.note_time(c as usize, seq, done, false);
            let core = &mut self.cores[c as usize];
            if sleeping && core.pending == 0 && seq == core.retired {
                // It sleeps on this read, its head and only unknown entry: whatever wakes it
                // before `done` finds the head still waiting and it sleeps again, so it
                // continues at `done` (or its clock) as the completion's own event would have.
                self.wake(done, c as usize);
            } else if core.sleeping {
                self.ev.push(done, Ev::ReadDone { core: c });
            }
        }
    }

    /// Something completed at `t` for core `c`: if it sleeps, it continues at `t` (a
    /// completion wakes a sleeping core whether or not it is the one the core waits on).
    fn wake(&mut self, t: u64, c: usize) {
        let core = &mut self.cores[c];
        if core.sleeping {
            // It slept after its cycle t - 1 at the latest: what it did there can complete
            // at t - 1 (the controller acts after the cores at equal times).
            assert!(
                core.t <= t + 1,
                "a sleeping core's clock never passes what wakes it"
            );
            core.sleeping = false;
            core.t = core.t.max(t);
            self.ev.push(core.t, Ev::CoreRun(c as u32));
        }
    }

    /// Run core `c` from its clock while it can; then it is queued at its clock, asleep
    /// (waiting on the memory system) or finished.
    fn run_core(&mut self, c: usize) -> Result<()> {
        loop {
            let t = self.cores[c].t;
            // Past the horizon a core goes on only while no completion still to come can
            // change what it does in this cycle.
            if self.must_sync(c, t) && self.ev.blocks(t, c as u32) {
                self.ev.push(t, Ev::CoreRun(c as u32));
                return Ok(());
            }
            if self.cores[c].retired_at != Some(t) {
                self.retire(c, t);
                self.cores[c].retired_at = Some(t);
            }
            if !self.fetch(c, t)? {
                self.ev.push(t, Ev::CoreRun(c as u32));
                return Ok(());
            }
            let core = &mut self.cores[c];
            if core.trace_done && core.fetched == core.retired {
                core.finished_at = Some(t);
                return Ok(());
            }
            if !self.advance(c) {
                return Ok(());
            }
        }
    }

    /// Whether what core `c` does in its cycle `t` can depend on a completion still to come:
    /// its retire step (up to R entries in order, stopping at the first not ready) reaches an
    /// entry whose completion time is unknown, or that entry becomes the ROB head (on which
    /// `advance` decides to sleep). Only then must every earlier actor have run first.
    /// Otherwise the core sees only entries whose times it knows and may run ahead.
    fn must_sync(&self, c: usize, t: u64) -> bool {
        let core = &self.cores[c];
        if core.pending == 0 {
            return false;
        }
        let mut budget = u64::from(self.cfg.retire_width);
        let mut pos = core.retired;
        for e in core.entries.iter() {
            let plain = e.seq - pos;
            if plain > budget {
                return false;
            }
            if e.ready_at == PENDING {
                return true;
            }
            if e.ready_at > t || plain == budget {
                return false;
            }
            budget -= plain + 1;
            pos = e.seq + 1;
        }
        unreachable!("a core with a pending entry has it in its ROB")
    }

    /// Move core `c` to the next cycle where something can happen; false if it sleeps.
    fn advance(&mut self, c: usize) -> bool {
        let (rob, fetch, retire) = (
            u64::from(self.cfg.rob_entries),
            self.cfg.fetch_width,
            self.cfg.retire_width,
        );
        let core = &mut self.cores[c];
        core.t += 1;
        core.fetch_left = fetch;
        let can_fetch = !core.stalled && !core.trace_done && core.fetched - core.retired < rob;
        let head = core
            .entries
            .front()
            .filter(|e| e.seq == core.retired)
            .copied();
        match head {
            // Fetch is blocked and the head waits for memory: sleep until it completes.
            Some(e)
                if e.ready_at == PENDING
                    && !can_fetch
                    && !matches!(e.kind, Kind::Commit { sent: false, .. }) =>
            {
                core.sleeping = true;
                // The core is in step with the others here: its head, of unknown time, was
                // within reach of this cycle's retire step or entered the ROB through a shared
                // access (`must_sync`, `fetch`). Any completion wakes a sleeping core, and the
                // cycle it then runs moves the clock it resumes from, so reads known to be back
                // at core.t or later still wake it then, as each read's completion event did
                // when it was queued (the earliest is enough: at it the core runs a cycle and,
                // still waiting, falls asleep again). Not needed when the head is a read and
                // nothing else is unknown: its issue wakes the core at its completion
                // (`deliver_issued_reads`).
                let back = core
                    .entries
                    .iter()
                    .filter(|e| e.kind == Kind::Read && e.ready_at != PENDING)
                    .map(|e| e.ready_at)
                    .filter(|&r| r >= core.t)
                    .min();
                let wakes_on_issue = e.kind == Kind::Read && core.pending == 1;
                if let Some(r) = back.filter(|_| !wakes_on_issue) {
                    self.ev.push(r, Ev::ReadDone { core: c as u32 });
                }
                return false;
            }
            // Fetch is blocked and the head is ready later: skip the cycles between (nothing
            // can be retired or fetched before the head retires, whatever completes).
            Some(e) if !can_fetch && e.ready_at != PENDING && e.ready_at > core.t => {
                core.t = e.ready_at;
            }
            // A long run of plain instructions through a full ROB: R retire and R enter per
            // cycle, so k cycles are done at once.
            None if core.entries.is_empty()
                && !core.stalled
                && core.fetched - core.retired == rob =>
            {
                let k = u64::from(core.gap_left / retire).saturating_sub(1);
                core.retired += k * u64::from(retire);
                core.fetched += k * u64::from(retire);
                core.gap_left -= (k * u64::from(retire)) as u32;
                core.t += k;
            }
            _ => plain_cycles(core, rob, fetch, retire),
        }
        true
    }
}

/// Do at once the cycles from `core.t` on in which the core only moves plain instructions,
/// the same number each cycle: its retire step takes exactly `rr` (R while more than R plain
/// instructions precede the first entry, or none while that entry is the head and known to be
/// ready later) and its fetch step exactly `ff` (F from a gap while the ROB keeps room, or
/// none while fetch is stalled). In such a cycle no entry of unknown time is reached
/// (`must_sync` is false), nothing shared is touched, the core does not finish, and `advance`
/// takes none of its special cases (the ROB stays below full while fetching), so k of them
/// are k times the same arithmetic.
fn plain_cycles(core: &mut Core, rob: u64, fetch: u32, retire: u32) {
    let (f, r) = (u64::from(fetch), u64::from(retire));
    let occ = core.fetched - core.retired;
    let fetching = !core.stalled && !core.trace_done;
    let (rr, k_retire) = match core.entries.front() {
        // All plain: R retire each cycle while more than R are in (fetching adds F >= R).
        None if fetching && occ >= r => (r, u64::MAX),
        None if !fetching && occ > r => (r, (occ - 1) / r),
        Some(e) if e.seq - core.retired > r => (r, (e.seq - core.retired - 1) / r),
        Some(e) if e.seq == core.retired && e.ready_at != PENDING && e.ready_at > core.t => {
            (0, e.ready_at - core.t)
        }
        _ => return,
    };
    let k = if fetching {
        if f < rr || core.gap_left < fetch {
            return;
        }
        // The ROB after cycle i's fetch holds occ + (i + 1)(F - rr): below full, so fetch
        // keeps its full width and `advance` its plain case.
        let k_room = match f - rr {
            0 if occ < rob => u64::MAX,
            0 => 0,
            grow => (rob - 1).saturating_sub(occ) / grow,
        };
        k_retire.min(u64::from(core.gap_left / fetch)).min(k_room)
    } else {
        k_retire
    };
    let ff = if fetching { f } else { 0 };
    core.retired += k * rr;
    core.fetched += k * ff;
    core.gap_left -= (k * ff) as u32;
    core.t += k;
    assert!(
        k == 0 || ff == 0 || core.fetched - core.retired < rob,
        "plain cycles that fetch leave the ROB below full"
    );
}

// One cycle of a core: retire, then fetch.
impl Sim<'_> {
    /// Retire up to retire_width instructions in order; a commit at the head is sent to the
    /// controller (its flushes, retired before it, are all in the write queue).
    fn retire(&mut self, c: usize, t: u64) {
        let mut budget = u64::from(self.cfg.retire_width);
        while budget > 0 {
            let core = &mut self.cores[c];
            let head = core.entries.front().map_or(core.fetched, |e| e.seq);
            let plain = head - core.retired;
            if plain > 0 {
                let n = plain.min(budget);
                core.retired += n;
                budget -= n;
                continue;
            }
            let Some(e) = core.entries.front_mut() else {
                break;
            };
            if let Kind::Commit {
                addr,
                len,
                sent: false,
            } = e.kind
            {
                e.kind = Kind::Commit {
                    addr,
                    len,
                    sent: true,
                };
                let seq = e.seq;
                self.note_time(c, seq, t, true);
                if self.mc.commit(t, c as u32, seq, addr, len) {
                    self.note_time(c, seq, t, false);
                    self.cores[c].pending -= 1;
                    let head = self.cores[c].entries.front_mut().expect("the commit");
                    head.ready_at = t;
                }
                self.mc.pass_if_asked(t, &mut self.ev);
                self.deliver_reads();
                continue;
            }
            if e.ready_at > t {
                break;
            }
            if matches!(e.kind, Kind::Fence | Kind::Commit { .. }) {
                core.stalled = false;
            }
            core.entries.pop_front();
            core.retired += 1;
            budget -= 1;
        }
    }

    /// Fetch up to the width left this cycle. False if the core must stop before a shared
    /// access: its clock has reached another actor's.
    fn fetch(&mut self, c: usize, t: u64) -> Result<bool> {
        let rob = u64::from(self.cfg.rob_entries);
        loop {
            let core = &mut self.cores[c];
            let space = rob - (core.fetched - core.retired);
            if core.fetch_left == 0 || space == 0 || core.stalled || core.trace_done {
                return Ok(true);
            }
            if core.gap_left > 0 {
                let n = core.gap_left.min(core.fetch_left).min(space as u32);
                core.gap_left -= n;
                core.fetch_left -= n;
                core.fetched += u64::from(n);
                continue;
            }
            let Some(op) = core.ops.peek(self.work, c)? else {
                core.trace_done = true;
                return Ok(true);
            };
            if let Op::Gap(n) = op {
                // Private, and touches nothing the controller or the queue look at.
                core.gap_left = n;
                core.ops.consume();
                self.note(c, Step::Gap(n), None);
                continue;
            }
            // The queue look first: it is cheaper than the tag scans, and both only read.
            if self.ev.blocks(t, c as u32) && self.is_shared(c, op) {
                return Ok(false);
            }
            self.cores[c].ops.consume();
            self.issue(c, t, op);
            self.mc.pass_if_asked(t, &mut self.ev);
            self.deliver_reads();
        }
    }

    /// Whether `op` touches state other cores share (L3, the controller).
    fn is_shared(&self, c: usize, op: Op) -> bool {
        match op {
            Op::Load(a) | Op::Store(a) => !self.caches.is_private(c, a >> self.line_shift),
            Op::Flush(_) | Op::Bind { .. } => true,
            Op::Gap(_) | Op::Fence | Op::Commit { .. } => false,
        }
    }

    fn push_entry(&mut self, c: usize, ready_at: u64, kind: Kind) -> u64 {
        let core = &mut self.cores[c];
        let seq = core.fetched;
        let n = core.entries.push_back(Entry {
            seq,
            ready_at,
            kind,
        });
        if ready_at == PENDING {
            let mask = core.waiting.len() - 1;
            core.waiting[seq as usize & mask] = n;
        }
        core.pending += u32::from(ready_at == PENDING);
        core.fetched += 1;
        core.fetch_left -= 1;
        seq
    }

    fn issue(&mut self, c: usize, t: u64, op: Op) {
        match op {
            Op::Gap(n) => self.cores[c].gap_left = n,
            Op::Load(a) | Op::Store(a) => self.access(c, t, op, a >> self.line_shift),
            Op::Flush(a) => self.flush(c, t, a >> self.line_shift),
            Op::Fence => {
                self.push_entry(c, t, Kind::Fence);
                self.cores[c].stalled = true;
                self.note(c, Step::Fence, None);
            }
            Op::Commit { addr, len } => {
                let seq = self.push_entry(
                    c,
                    PENDING,
                    Kind::Commit {
                        addr,
                        len,
                        sent: false,
                    },
                );
                self.cores[c].stalled = true;
                let (arrival, done) = (PENDING, PENDING);
                self.note(c, Step::Commit { arrival, done }, Some(seq));
            }
            Op::Bind { addr, len } => {
                self.mc.bind(addr, len);
                self.note(c, Step::Bind { fetch: t }, None);
            }
        }
    }

    fn access(&mut self, c: usize, t: u64, op: Op, line: u64) {
        let version = if let Op::Store(_) = op {
            self.counts[1] += 1;
            self.cores[c].stores += 1;
            store_data(c, self.cores[c].stores)
        } else {
            self.counts[0] += 1;
            0
        };
        let served = self.caches.access(c, line, version);
        let hit_cycles = |l: &crate::config::CacheLevel| u64::from(l.hit_cycles);
        let ready_at = match served {
            Served::L1 => t + hit_cycles(&self.cfg.l1),
            Served::L2 => t + hit_cycles(&self.cfg.l2),
            Served::L3 => t + hit_cycles(&self.cfg.l3_per_core),
            Served::Memory => PENDING,
        };
        let kind = if served == Served::Memory {
            Kind::Read
        } else {
            Kind::Mem
        };
        let seq = self.push_entry(c, ready_at, kind);
        let step = Step::Access {
            served,
            fetch: t,
            ready: ready_at,
        };
        self.note(c, step, (served == Served::Memory).then_some(seq));
        if served == Served::Memory && self.cfg.ideal_memory {
            let done = self.mc.ideal_read(t, line);
            self.ev.read_issued(done, c as u32, seq);
        } else if served == Served::Memory {
            self.mc.read(t, c as u32, seq, line);
        }
        self.post_writebacks(t);
    }

    /// Dirty lines leaving L3 go to the write queue; no core waits for them.
    fn post_writebacks(&mut self, t: u64) {
        for (line, version) in std::mem::take(&mut self.caches.writebacks) {
            self.mc.write(t, line, version, None);
        }
    }

    /// clwb: a dirty line's data goes to the write queue and the flush completes when it is
    /// accepted (at once under eADR, whose caches are persistent: the write is posted).
    fn flush(&mut self, c: usize, t: u64, line: u64) {
        self.counts[2] += 1;
        let at_once = Step::Flush {
            fetch: t,
            ready: None,
        };
        let Some(version) = self.caches.flush(c, line) else {
            self.push_entry(c, t, Kind::Mem);
            self.note(c, at_once, None);
            return;
        };
        if self.cfg.mode == Mode::Eadr {
            self.push_entry(c, t, Kind::Mem);
            self.note(c, at_once, None);
            self.mc.write(t, line, version, None);
            return;
        }
        let seq = self.push_entry(c, PENDING, Kind::Mem);
        self.note(c, at_once, Some(seq));
        if self.mc.write(t, line, version, Some((c as u32, seq))) {
            if let Some(rec) = self.rec.as_mut() {
                // Accepted at once: its step keeps `ready: None`.
                rec.waiting[c].remove(&seq);
            }
            let core = &mut self.cores[c];
            core.entries.back_mut().expect("just pushed").ready_at = t;
            core.pending -= 1;
        }
    }
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

impl Sim<'_> {
    fn finish(mut self) -> Outcome {
        let cycles = self
            .cores
            .iter()
            .filter_map(|c| c.finished_at)
            .max()
            .unwrap_or(0);
        let instructions: u64 = self.cores.iter().map(|c| c.retired).sum();
        // What is still cached dirty reaches memory at the end (it would by eviction), so
        // the final contents do not depend on how full the caches were.
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
        Outcome {
            report,
            memory: std::mem::take(self.mc.memory()),
            log: self.mc.log.take().unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod rob_tests {
    use super::{Entry, Kind, Rob};
    use std::collections::VecDeque;

    /// The ring against a VecDeque over many wraps: the same entries in the same order, and
    /// each found again by the number its push returned.
    #[test]
    fn ring_matches_a_deque() {
        let mut rob = Rob::new(6); // a ring of 8
        let mut deque: VecDeque<(u64, Entry)> = VecDeque::new();
        let mut x = 12345u64;
        for seq in 0..10_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if deque.len() < 6 && (!x.is_multiple_of(3) || deque.is_empty()) {
                let e = Entry {
                    seq,
                    ready_at: x,
                    kind: Kind::Read,
                };
                deque.push_back((rob.push_back(e), e));
            } else {
                rob.pop_front();
                deque.pop_front();
            }
            if !deque.is_empty() {
                let (n, e) = deque[x as usize % deque.len()];
                assert_eq!(rob.at(n).seq, e.seq, "an entry found by its number");
            }
            let seqs: Vec<u64> = rob.iter().map(|e| e.seq).collect();
            let want: Vec<u64> = deque.iter().map(|(_, e)| e.seq).collect();
            assert_eq!(seqs, want, "the same entries, front first");
            assert_eq!(rob.front().map(|e| e.seq), want.first().copied());
        }
    }
}
