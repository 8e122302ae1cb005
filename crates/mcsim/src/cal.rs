//! The calendar controller: Figure 4's memory controller (a read queue, a write queue split
//! into sub-queues bound to address ranges, persistence credits per sub-queue synchronised by
//! query reads, commits that lock and drain their sub-queues) scheduled without passes.
//!
//! Every command holds its channel's bus for a burst; a read holds its unit for a read and a
//! burst, a write for a burst and a write. Reads go before queries, queries before writes:
//! - a read takes its slot when it arrives: the earliest time at or after its arrival (and
//!   after a place in the 64-entry read queue, if that is full) at which its unit is free
//!   and its channel's bus has a burst's gap between the commands already placed. Its
//!   completion is known at once, so no core waits to learn it;
//! - queries and writes are placed in time order, lazily: a channel's next command is decided
//!   at the earliest time something can go (a query that is due, or a write whose unit is
//!   free, in a bus gap), once every arrival before that time is known. A read placed in the
//!   meantime moves that time. Writes of one sub-queue issue in order, except that a write
//!   may pass older writes of other lines whose unit is busy; sub-queues are looked at in
//!   turn; a fine-grained sub-queue without credits issues nothing until a query refills it.
//!
//! So a read arriving while a write waits for its unit is never delayed by that write, and a
//! write waits for the reads placed on its unit: what the earlier controller (`mc`), which
//! decided at each pass among what had arrived, gave only to reads already queued.
//!
//! At equal times the controller acts before the cores, completions before commands, and
//! channels in order. Every action is O(sub-queues + units of a channel) at most: there is no
//! pass that issues nothing.

use crate::config::{Config, Mode};
use crate::event::Log;
use crate::mc::{Arrival, McStats};
use crate::ranges::Ranges;
use rustc_hash::FxHashMap;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// Finished writes folded into the final memory at once.
const WRITTEN_BATCH: usize = 1 << 16;

/// The engine's entry `token` is done at `t`: a flush's write was accepted, or a commit is
/// durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    pub token: u64,
    pub t: u64,
}

#[derive(Clone, Copy, Debug)]
struct Write {
    id: u64,
    line: u64,
    ch: u32,
    unit: u32,
    version: u64,
    /// The engine's entry waiting for it to enter its sub-queue (a flush), or None (posted).
    waiter: Option<u64>,
}

#[derive(Default)]
struct SubQueue {
    entries: VecDeque<Write>,
    /// The units of `entries`, a bit each.
    on: Vec<u64>,
    /// Writes that found the sub-queue full or locked, in arrival order.
    waiting: VecDeque<Write>,
    in_flight: u32,
    /// The controller's view of the credits, stale until a query returns.
    credits: u32,
    issued_since_query: u32,
    lock: Option<usize>,
    query_out: bool,
}

struct Commit {
    token: u64,
    queues: u32,
    /// Sub-queues whose part is not done yet.
    left: u32,
    arrived: u64,
    query_sent: bool,
}

/// One channel's data bus: the start of every command that may still hold it, in order.
#[derive(Default)]
struct Bus {
    starts: VecDeque<u64>,
}

impl Bus {
    /// The earliest time at or after `t` with a free burst.
    fn gap(&self, t: u64, burst: u64) -> u64 {
        let mut s = t;
        for &x in &self.starts {
            if x + burst <= s {
                continue;
            }
            if s + burst <= x {
                break;
            }
            s = x + burst;
        }
        s
    }

    fn take(&mut self, s: u64, burst: u64) {
        let i = self.starts.partition_point(|&x| x < s);
        debug_assert!(
            self.starts.get(i).is_none_or(|&x| s + burst <= x)
                && (i == 0 || self.starts[i - 1] + burst <= s),
            "a command takes a free burst"
        );
        self.starts.insert(i, s);
    }

    /// Forget commands over before `now` (arrivals and decisions come in time order).
    fn forget(&mut self, now: u64, burst: u64) {
        while self.starts.front().is_some_and(|&x| x + burst <= now) {
            self.starts.pop_front();
        }
    }
}

/// Query reads in flight and writes in flight, each taking the same time: both finish in the
/// order they were sent.
struct InFlight {
    queries: VecDeque<(u64, u32, u32)>,
    writes: VecDeque<(u64, u32, Write)>,
}

pub struct Cal {
    mode: Mode,
    ideal: bool,
    read_cycles: u64,
    write_cycles: u64,
    burst_cycles: u64,
    credits_max: u32,
    entries_max: usize,
    reads_max: usize,
    channels: u64,
    units_per_channel: u64,
    queues: Vec<SubQueue>,
    ranges: Ranges,
    /// Per unit, when it is free after every command placed on it.
    unit_free: Vec<u64>,
    /// Per channel, its units, a bit each.
    ch_units: Vec<Vec<u64>>,
    bus: Vec<Bus>,
    /// The issue times of the reads placed, while some may still be queued.
    read_issues: BinaryHeap<Reverse<u64>>,
    flight: InFlight,
    commits: Vec<Commit>,
    waiting_commits: Vec<(usize, u32)>,
    locked: u32,
    global_commit: Option<usize>,
    /// Per channel, the time of its next command (u64::MAX: none), valid unless `stale`.
    next_cmd: Vec<u64>,
    stale: Vec<bool>,
    /// The latest time the controller was told of or acted at.
    now: u64,
    next_write: u64,
    memory: FxHashMap<u64, u64>,
    written: Vec<(u64, u64)>,
    pub stats: McStats,
    pub log: Option<Vec<Log>>,
    pub arrivals: Option<Vec<Arrival>>,
}

impl Cal {
    pub fn new(cfg: &Config) -> Cal {
        let units = (cfg.channels * cfg.units_per_channel) as usize;
        let words = units.div_ceil(64);
        let queue = || SubQueue {
            credits: cfg.credits,
            on: vec![0; words],
            ..SubQueue::default()
        };
        let mut ch_units = vec![vec![0; words]; cfg.channels as usize];
        for u in 0..units {
            ch_units[u % cfg.channels as usize][u / 64] |= 1 << (u % 64);
        }
        let channels = cfg.channels as usize;
        Cal {
            mode: cfg.mode,
            ideal: cfg.ideal_memory,
            read_cycles: cfg.cycles(cfg.read_ns),
            write_cycles: cfg.cycles(cfg.write_ns),
            burst_cycles: cfg.cycles(cfg.burst_ns).max(1),
            credits_max: cfg.credits,
            entries_max: cfg.sub_queue_entries as usize,
            reads_max: cfg.read_queue_entries as usize,
            channels: cfg.channels.into(),
            units_per_channel: cfg.units_per_channel.into(),
            queues: (0..cfg.sub_queues).map(|_| queue()).collect(),
            ranges: Ranges::new(cfg.sub_queues, cfg.range_registers, cfg.line_bytes),
            unit_free: vec![0; units],
            ch_units,
            bus: (0..channels).map(|_| Bus::default()).collect(),
            read_issues: BinaryHeap::new(),
            flight: InFlight {
                queries: VecDeque::new(),
                writes: VecDeque::new(),
            },
            commits: Vec::new(),
            waiting_commits: Vec::new(),
            locked: 0,
            global_commit: None,
            next_cmd: vec![u64::MAX; channels],
            stale: vec![false; channels],
            now: 0,
            next_write: 0,
            memory: FxHashMap::default(),
            written: Vec::new(),
            stats: McStats::default(),
            log: cfg.log_events.then(Vec::new),
            arrivals: None,
        }
    }

    fn log(&mut self, entry: Log) {
        if let Some(log) = &mut self.log {
            log.push(entry);
        }
    }

    /// Lines interleave over channels, then over a channel's units.
    fn place_of(&self, line: u64) -> (u32, u32) {
        if self.channels.is_power_of_two() && self.units_per_channel.is_power_of_two() {
            let shift = self.channels.trailing_zeros();
            let ch = line & (self.channels - 1);
            let upc = (line >> shift) & (self.units_per_channel - 1);
            return (ch as u32, (ch + (upc << shift)) as u32);
        }
        let ch = line % self.channels;
        let unit = ch + self.channels * ((line / self.channels) % self.units_per_channel);
        (ch as u32, unit as u32)
    }

    /// A request's arrival at `t`: time only moves on, and it is recorded when asked for.
    fn arrive(&mut self, t: u64, line: u64, write: bool) {
        assert!(
            t >= self.now,
            "the controller hears of requests in time order"
        );
        debug_assert!(
            self.next_action() >= t,
            "the controller acted up to the arrival first"
        );
        self.now = t;
        if let Some(a) = &mut self.arrivals {
            a.push(Arrival { t, line, write });
        }
    }

    /// Every channel's next command may have moved.
    fn touch_all(&mut self) {
        self.stale.iter_mut().for_each(|s| *s = true);
    }

    pub fn bind(&mut self, addr: u64, len: u64) {
        self.ranges.bind(addr, len);
    }

    /// A read arriving at `t`: it takes its slot now, and its data is back at the time
    /// returned.
    pub fn read(&mut self, t: u64, line: u64) -> u64 {
        self.stats.reads += 1;
        self.arrive(t, line, false);
        if self.ideal {
            self.log(Log::ReadIssued { line, t });
            return t + self.read_cycles + self.burst_cycles;
        }
        while self.read_issues.peek().is_some_and(|r| r.0 <= t) {
            self.read_issues.pop();
        }
        // A full read queue: this read enters when the first queued one issues.
        let enters = if self.read_issues.len() >= self.reads_max {
            self.read_issues.pop().map_or(t, |r| r.0)
        } else {
            t
        };
        let (ch, unit) = self.place_of(line);
        let (ch, unit) = (ch as usize, unit as usize);
        let burst = self.burst_cycles;
        self.bus[ch].forget(t, burst);
        let s = self.bus[ch].gap(enters.max(self.unit_free[unit]), burst);
        self.bus[ch].take(s, burst);
        let done = s + self.read_cycles + burst;
        self.unit_free[unit] = done;
        self.read_issues.push(Reverse(s));
        self.stale[ch] = true;
        self.log(Log::ReadIssued { line, t: s });
        assert!(s >= t && done > s, "a read issues at or after its arrival");
        done
    }
}

// Writes.
impl Cal {
    /// A write arrives at `t` (`waiter`: the engine's flush entry, None if posted); true if
    /// it entered its sub-queue at once (otherwise `Done` names the waiter when it does).
    pub fn write(&mut self, t: u64, line: u64, version: u64, waiter: Option<u64>) -> bool {
        self.stats.writes += 1;
        self.stats.posted_writes += u64::from(waiter.is_none());
        self.arrive(t, line, true);
        self.next_write += 1;
        let (ch, unit) = self.place_of(line);
        let w = Write {
            id: self.next_write,
            line,
            ch,
            unit,
            version,
            waiter,
        };
        let q = self.ranges.queue_of(line) as usize;
        if self.ideal {
            // Accepted at once and in memory a burst and a write later: every write takes
            // the same time, so they land in arrival order.
            self.log(Log::WriteAccepted {
                id: w.id,
                q: q as u32,
                t,
            });
            let done = t + self.burst_cycles + self.write_cycles;
            self.log(Log::WriteDone { id: w.id, t: done });
            self.land(line, version);
            return true;
        }
        let sq = &self.queues[q];
        let room =
            sq.lock.is_none() && sq.waiting.is_empty() && sq.entries.len() < self.entries_max;
        if room {
            self.enqueue(t, q, w);
        } else {
            self.queues[q].waiting.push_back(w);
            self.stats.writes_waited += 1;
        }
        room
    }

    /// Write `w` enters sub-queue `q`, after every write in it.
    fn enqueue(&mut self, t: u64, q: usize, w: Write) {
        let sq = &mut self.queues[q];
        assert!(
            sq.lock.is_none() && sq.entries.len() < self.entries_max,
            "a write enters an unlocked sub-queue with room"
        );
        sq.entries.push_back(w);
        sq.on[w.unit as usize / 64] |= 1 << (w.unit % 64);
        // Any channel: the sub-queue's queries (credits, a global drain) may be due now.
        self.touch_all();
        self.log(Log::WriteAccepted {
            id: w.id,
            q: q as u32,
            t,
        });
    }

    /// Move waiting writes into sub-queue `q` while it has room and is not locked.
    fn admit(&mut self, t: u64, q: usize, out: &mut Vec<Done>) {
        while self.queues[q].lock.is_none() && self.queues[q].entries.len() < self.entries_max {
            let Some(w) = self.queues[q].waiting.pop_front() else {
                break;
            };
            self.enqueue(t, q, w);
            if let Some(token) = w.waiter {
                out.push(Done { token, t });
            }
        }
    }

    fn land(&mut self, line: u64, version: u64) {
        self.written.push((line, version));
        if self.written.len() == WRITTEN_BATCH {
            self.memory();
        }
    }

    /// The first write on channel `ch` that can go at `t`: sub-queues in turn, each in order,
    /// skipping a write whose unit is busy (an older write of its line has the same unit, so
    /// a write never passes one of its own line).
    fn pick_write(&self, ch: usize, t: u64) -> Option<(usize, usize)> {
        let fine = self.mode == Mode::Fine;
        for (q, sq) in self.queues.iter().enumerate() {
            if fine && sq.credits == 0 {
                continue;
            }
            let i = sq
                .entries
                .iter()
                .position(|w| w.ch as usize == ch && self.unit_free[w.unit as usize] <= t);
            if let Some(i) = i {
                return Some((q, i));
            }
        }
        None
    }

    /// The earliest time a write of channel `ch` finds its unit free (u64::MAX: none queued
    /// that may issue).
    fn write_ready(&self, ch: usize) -> u64 {
        let fine = self.mode == Mode::Fine;
        let mut t = u64::MAX;
        for sq in &self.queues {
            if fine && sq.credits == 0 {
                continue;
            }
            for (w, word) in sq.on.iter().enumerate() {
                for u in ones(w, word & self.ch_units[ch][w]) {
                    t = t.min(self.unit_free[u]);
                }
            }
        }
        t
    }

    fn issue_write(&mut self, t: u64, ch: usize, q: usize, i: usize, out: &mut Vec<Done>) {
        let w = self.queues[q].entries.remove(i).expect("picked");
        let sq = &mut self.queues[q];
        if sq.entries.iter().all(|o| o.unit != w.unit) {
            sq.on[w.unit as usize / 64] &= !(1 << (w.unit % 64));
        }
        sq.in_flight += 1;
        if self.mode == Mode::Fine {
            sq.credits -= 1;
            sq.issued_since_query += 1;
            assert!(
                sq.in_flight <= self.credits_max,
                "credits bound the writes in flight"
            );
        }
        let done = t + self.burst_cycles + self.write_cycles;
        assert!(
            self.unit_free[w.unit as usize] <= t,
            "a write issues on a free unit"
        );
        self.unit_free[w.unit as usize] = done;
        self.bus[ch].take(t, self.burst_cycles);
        self.flight.writes.push_back((done, q as u32, w));
        self.log(Log::WriteIssued {
            id: w.id,
            q: q as u32,
            t,
        });
        self.admit(t, q, out);
    }

    fn write_done(&mut self, t: u64, q: u32, w: Write) {
        let sq = &mut self.queues[q as usize];
        assert!(
            sq.in_flight > 0,
            "a write finishes only after it was issued"
        );
        sq.in_flight -= 1;
        self.land(w.line, w.version);
        self.log(Log::WriteDone { id: w.id, t });
    }
}

/// The units in word `w` of a unit set, in increasing order.
fn ones(w: usize, word: u64) -> impl Iterator<Item = usize> {
    let mut rest = word;
    std::iter::from_fn(move || {
        if rest == 0 {
            return None;
        }
        let b = rest.trailing_zeros() as usize;
        rest &= rest - 1;
        Some(w * 64 + b)
    })
}

// Commits and queries.
impl Cal {
    /// A commit reaches the controller at `t` (its core's commit instruction is at the ROB
    /// head: every flush before it has entered the write queue). True if it is done at once;
    /// otherwise `Done` names `token` when it is.
    pub fn commit(&mut self, t: u64, token: u64, addr: u64, len: u64) -> bool {
        assert!(
            t >= self.now,
            "the controller hears of commits in time order"
        );
        debug_assert!(
            self.next_action() >= t,
            "the controller acted up to the commit first"
        );
        self.now = t;
        self.stats.commits += 1;
        let queues = match self.mode {
            _ if self.ideal => return true,
            Mode::Adr | Mode::Eadr => return true,
            Mode::Global => (1u32 << self.queues.len()) - 1,
            Mode::Fine => self.ranges.queues_of_range(addr, len),
        };
        self.commits.push(Commit {
            token,
            queues,
            left: queues,
            arrived: t,
            query_sent: false,
        });
        self.waiting_commits.push((self.commits.len() - 1, queues));
        self.start_commits(t);
        false
    }

    /// Start, in arrival order, every waiting commit whose sub-queues are all free: a commit
    /// waits only for commits holding one of its own sub-queues.
    fn start_commits(&mut self, t: u64) {
        let mut i = 0;
        while i < self.waiting_commits.len() {
            let (idx, queues) = self.waiting_commits[i];
            if queues & self.locked != 0 {
                i += 1;
                continue;
            }
            self.waiting_commits.remove(i);
            self.locked |= queues;
            for q in ones(0, queues.into()) {
                assert!(
                    self.queues[q].lock.is_none(),
                    "a commit starts on free sub-queues"
                );
                self.queues[q].lock = Some(idx);
            }
            if self.mode == Mode::Global {
                self.global_commit = Some(idx);
            }
            self.log(Log::CommitStart {
                commit: idx as u64,
                queues,
                t,
            });
            self.touch_all();
        }
    }

    fn finish_commit(&mut self, t: u64, idx: usize, out: &mut Vec<Done>) {
        let c = &self.commits[idx];
        assert!(c.left == 0, "a commit is done only when every part is");
        let (token, queues) = (c.token, c.queues);
        self.stats.commit_cycles_total += t - c.arrived;
        self.log(Log::CommitDone {
            commit: idx as u64,
            t,
        });
        out.push(Done { token, t });
        if self.global_commit == Some(idx) {
            self.global_commit = None;
        }
        for q in ones(0, queues.into()) {
            self.queues[q].lock = None;
            self.locked &= !(1 << q);
            self.admit(t, q, out);
        }
        self.start_commits(t);
    }

    /// The query due on channel `ch`, if any: a global commit's once every sub-queue is
    /// drained (on channel 0), a poll of a committing sub-queue that is empty, or the credits
    /// of a sub-queue that ran out with writes queued (sub-queue q queries on channel q mod
    /// channels). `Some(u32::MAX)` is the global one.
    fn pick_query(&self, ch: usize) -> Option<u32> {
        if let (Some(idx), 0) = (self.global_commit, ch) {
            let drained = |s: &SubQueue| s.entries.is_empty() && s.in_flight == 0;
            if !self.commits[idx].query_sent && self.queues.iter().all(drained) {
                return Some(u32::MAX);
            }
        }
        if self.mode != Mode::Fine {
            return None;
        }
        let step = self.channels as usize;
        (ch..self.queues.len()).step_by(step).find_map(|q| {
            let sq = &self.queues[q];
            let polling = sq
                .lock
                .is_some_and(|idx| self.commits[idx].left & (1 << q) != 0)
                && sq.entries.is_empty();
            let starved = sq.credits == 0 && !sq.entries.is_empty();
            (!sq.query_out && (polling || starved)).then_some(q as u32)
        })
    }

    fn send_query(&mut self, t: u64, ch: usize, q: u32) {
        let answer = match self.queues.get_mut(q as usize) {
            Some(sq) => {
                let polling = sq.lock.is_some() && sq.entries.is_empty();
                sq.issued_since_query = 0;
                sq.query_out = true;
                if polling {
                    self.stats.commit_queries += 1;
                } else {
                    self.stats.credit_queries += 1;
                }
                self.credits_max - sq.in_flight
            }
            None => {
                let idx = self.global_commit.expect("a global query has its commit");
                self.commits[idx].query_sent = true;
                0
            }
        };
        self.stats.syncs += 1;
        self.bus[ch].take(t, self.burst_cycles);
        let back = t + self.read_cycles + self.burst_cycles;
        self.flight.queries.push_back((back, q, answer));
        self.log(Log::Query { q, t });
    }

    /// A query read returned at `t`: the credits it carries are the NVM side's at its sending.
    fn query_done(&mut self, t: u64, q: u32, answer: u32, out: &mut Vec<Done>) {
        if q == u32::MAX {
            let idx = self.global_commit.expect("a global query has its commit");
            self.commits[idx].left = 0;
            return self.finish_commit(t, idx, out);
        }
        let sq = &mut self.queues[q as usize];
        sq.query_out = false;
        sq.credits = answer.saturating_sub(sq.issued_since_query);
        let settled =
            answer == self.credits_max && sq.issued_since_query == 0 && sq.entries.is_empty();
        if let (Some(idx), true) = (sq.lock, settled) {
            let c = &mut self.commits[idx];
            if c.left & (1 << q) != 0 {
                c.left &= !(1 << q);
                self.log(Log::CommitPart {
                    commit: idx as u64,
                    q,
                    t,
                });
                if self.commits[idx].left == 0 {
                    self.finish_commit(t, idx, out);
                }
            }
        }
    }
}

// The calendar: what happens next, and doing it.
impl Cal {
    /// The time of channel `ch`'s next command from `self.now` on (u64::MAX: none).
    fn command_time(&mut self, ch: usize) -> u64 {
        let now = self.now;
        let ready = if self.pick_query(ch).is_some() {
            now
        } else {
            self.write_ready(ch)
        };
        if ready == u64::MAX {
            return u64::MAX;
        }
        self.bus[ch].forget(now, self.burst_cycles);
        self.bus[ch].gap(ready.max(now), self.burst_cycles)
    }

    /// The time of the controller's next action (u64::MAX: nothing to do until a request
    /// arrives). No request may arrive before the last one: the engine asks before each.
    pub fn next_action(&mut self) -> u64 {
        let mut t = u64::MAX;
        if let Some(&(d, ..)) = self.flight.writes.front() {
            t = d;
        }
        if let Some(&(d, ..)) = self.flight.queries.front() {
            t = t.min(d);
        }
        for ch in 0..self.next_cmd.len() {
            if self.stale[ch] {
                self.next_cmd[ch] = self.command_time(ch);
                self.stale[ch] = false;
            }
            t = t.min(self.next_cmd[ch]);
        }
        debug_assert!(
            t >= self.now,
            "the controller's next action is not in the past"
        );
        t
    }

    /// Do the controller's next action (at `next_action()`): a completion first, then the lowest
    /// channel's command. What it finishes for the engine is pushed on `out`.
    pub fn step(&mut self, out: &mut Vec<Done>) {
        let t = self.next_action();
        assert!(t != u64::MAX, "a step has something to do");
        self.now = t;
        self.touch_all();
        if self.flight.writes.front().is_some_and(|w| w.0 == t) {
            let (_, q, w) = self.flight.writes.pop_front().expect("a write");
            return self.write_done(t, q, w);
        }
        if self.flight.queries.front().is_some_and(|w| w.0 == t) {
            let (_, q, answer) = self.flight.queries.pop_front().expect("a query");
            return self.query_done(t, q, answer, out);
        }
        let ch = (0..self.next_cmd.len())
            .find(|&ch| self.next_cmd[ch] == t)
            .expect("a channel's command is due");
        if let Some(q) = self.pick_query(ch) {
            return self.send_query(t, ch, q);
        }
        let (q, i) = self
            .pick_write(ch, t)
            .expect("a channel's command time finds a write to issue");
        self.issue_write(t, ch, q, i, out);
    }

    /// Nothing queued, in flight or committing: the run can end.
    pub fn idle(&self) -> bool {
        self.flight.writes.is_empty()
            && self.flight.queries.is_empty()
            && self.waiting_commits.is_empty()
            && self.global_commit.is_none()
            && self
                .queues
                .iter()
                .all(|s| s.entries.is_empty() && s.waiting.is_empty() && s.lock.is_none())
    }

    /// The memory's contents: per line written, the version of the write that finished
    /// last (a later completion overwrites an earlier one, as it would in the NVM).
    pub fn memory(&mut self) -> &mut FxHashMap<u64, u64> {
        self.memory.reserve(self.written.len());
        for (line, version) in self.written.drain(..) {
            self.memory.insert(line, version);
        }
        &mut self.memory
    }
}

#[cfg(test)]
mod tests;
