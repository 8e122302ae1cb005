//! The memory controller of Figure 4: one read queue, a write queue split into sub-queues
//! bound to address ranges by range registers (the last sub-queue takes every other address),
//! persistence credits per sub-queue synchronised by query reads, and the NVM's units and
//! channel buses. Reads go before writes; writes of one sub-queue issue in order, except that
//! a write may pass older writes of other lines whose unit is busy.

use crate::config::{Config, Mode};
use crate::event::{Ev, Events, Log};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

/// A write: a flushed or evicted line with its data (the version of its last store).
#[derive(Clone, Copy, Debug)]
struct Write {
    id: u64,
    line: u64,
    /// The line's channel and unit, worked out once on arrival.
    ch: u32,
    unit: u32,
    version: u64,
    /// The core waiting for it to enter the queue (a flush), or None (posted).
    waiter: Option<(u32, u64)>,
}

#[derive(Default)]
struct SubQueue {
    entries: VecDeque<Write>,
    /// Writes that found the sub-queue full or locked, in arrival order.
    waiting: VecDeque<Write>,
    /// Writes issued to the NVM and not finished (the NVM side's taken credits).
    in_flight: u32,
    /// The controller's view of the credits, stale until a query returns.
    credits: u32,
    query_out: bool,
    issued_since_query: u32,
    /// The commit holding the sub-queue (index into `Mc::commits`).
    lock: Option<usize>,
    binds: u32,
}

struct Commit {
    core: u32,
    seq: u64,
    queues: u32,
    /// Sub-queues whose part is not done yet.
    left: u32,
    arrived: u64,
    started: bool,
    query_sent: bool,
}

struct Read {
    line: u64,
    ch: u32,
    unit: u32,
    core: u32,
    seq: u64,
}

/// A request arriving at the controller (after the caches): what a peer simulator replays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrival {
    /// CPU cycle of arrival.
    pub t: u64,
    pub line: u64,
    pub write: bool,
}

/// Counters of a run.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct McStats {
    pub reads: u64,
    pub writes: u64,
    pub posted_writes: u64,
    /// Query reads for credits that ran out.
    pub credit_queries: u64,
    /// Query reads polling a committing sub-queue.
    pub commit_queries: u64,
    /// Credit synchronisations as the paper counts them (Fig. 11): one per commit in global
    /// mode, one per query read in fine mode.
    pub syncs: u64,
    pub commits: u64,
    pub commit_cycles_total: u64,
    /// Writes that waited outside a full or locked sub-queue.
    pub writes_waited: u64,
}

pub(crate) struct Mc {
    mode: Mode,
    read_cycles: u64,
    write_cycles: u64,
    burst_cycles: u64,
    credits_max: u32,
    entries_max: usize,
    reads_max: usize,
    channels: u64,
    units_per_channel: u64,
    line_bytes: u64,
    range_registers: u32,
    queues: Vec<SubQueue>,
    reads: VecDeque<Read>,
    read_backlog: VecDeque<Read>,
    units: Vec<u64>,
    /// Per unit, the reads in the read queue and the writes in sub-queues that need it: a
    /// pass looks at a channel's queues only when one of its free units has something.
    reads_on: Counts,
    writes_on: Counts,
    /// Each unit's channel.
    unit_ch: Vec<u32>,
    bus: Vec<u64>,
    /// Bound ranges in lines, inclusive: (first, last, sub-queue).
    ranges: Vec<(u64, u64, u32)>,
    commits: Vec<Commit>,
    waiting_commits: Vec<usize>,
    global_commit: Option<usize>,
    /// Times a scheduling pass is already queued for (one pass per time).
    /// (A few times, sorted: a search and a short shift beat hashing here.)
    ticks: Vec<u64>,
    next_write: u64,
    pub memory: FxHashMap<u64, u64>,
    pub stats: McStats,
    pub log: Option<Vec<Log>>,
    /// A core's arrival asked for a pass at its time (`pass_if_asked`).
    asked: bool,
    /// Every request's arrival, when asked for (`sim::run_recording`).
    pub arrivals: Option<Vec<Arrival>>,
}

impl Mc {
    pub fn new(cfg: &Config) -> Mc {
        let units = (cfg.channels * cfg.units_per_channel) as usize;
        let queue = || SubQueue {
            credits: cfg.credits,
            ..SubQueue::default()
        };
        Mc {
            mode: cfg.mode,
            read_cycles: cfg.cycles(cfg.read_ns),
            write_cycles: cfg.cycles(cfg.write_ns),
            burst_cycles: cfg.cycles(cfg.burst_ns).max(1),
            credits_max: cfg.credits,
            entries_max: cfg.sub_queue_entries as usize,
            reads_max: cfg.read_queue_entries as usize,
            channels: cfg.channels.into(),
            units_per_channel: cfg.units_per_channel.into(),
            line_bytes: cfg.line_bytes.into(),
            range_registers: cfg.range_registers,
            queues: (0..cfg.sub_queues).map(|_| queue()).collect(),
            reads: VecDeque::new(),
            read_backlog: VecDeque::new(),
            units: vec![0; units],
            reads_on: Counts::new(units),
            writes_on: Counts::new(units),
            unit_ch: (0..units as u32).map(|u| u % cfg.channels).collect(),
            bus: vec![0; cfg.channels as usize],
            ranges: Vec::new(),
            commits: Vec::new(),
            waiting_commits: Vec::new(),
            global_commit: None,
            ticks: Vec::new(),
            next_write: 0,
            memory: FxHashMap::default(),
            stats: McStats::default(),
            log: cfg.log_events.then(Vec::new),
            asked: false,
            arrivals: None,
        }
    }

    fn log(&mut self, entry: Log) {
        if let Some(log) = &mut self.log {
            log.push(entry);
        }
    }

    fn channel(&self, line: u64) -> usize {
        if self.channels.is_power_of_two() {
            return (line & (self.channels - 1)) as usize;
        }
        (line % self.channels) as usize
    }

    fn unit(&self, line: u64) -> usize {
        if self.channels.is_power_of_two() && self.units_per_channel.is_power_of_two() {
            let shift = self.channels.trailing_zeros();
            let upc = (line >> shift) & (self.units_per_channel - 1);
            return ((line & (self.channels - 1)) + (upc << shift)) as usize;
        }
        (line % self.channels + self.channels * ((line / self.channels) % self.units_per_channel))
            as usize
    }

    fn unregistered(&self) -> u32 {
        self.queues.len() as u32 - 1
    }

    /// PersistenceMalloc: bind the range to the bindable sub-queue with the fewest ranges
    /// (the OS's "lowest utilisation"); when every register is taken it stays unregistered.
    pub fn bind(&mut self, addr: u64, len: u64) {
        let (first, last) = (addr / self.line_bytes, (addr + len - 1) / self.line_bytes);
        let q = (0..self.unregistered())
            .filter(|&q| self.queues[q as usize].binds < self.range_registers)
            .min_by_key(|&q| self.queues[q as usize].binds);
        if let Some(q) = q {
            self.queues[q as usize].binds += 1;
            self.ranges.push((first, last, q));
        }
    }

    pub fn queue_of(&self, line: u64) -> u32 {
        let hit = self
            .ranges
            .iter()
            .find(|(f, l, _)| (*f..=*l).contains(&line));
        hit.map_or(self.unregistered(), |r| r.2)
    }

    /// The sub-queues a commit of [addr, addr+len) must drain: those of the bound ranges it
    /// overlaps, and the unregistered one unless one bound range covers it whole.
    pub fn queues_of_range(&self, addr: u64, len: u64) -> u32 {
        let (first, last) = (addr / self.line_bytes, (addr + len - 1) / self.line_bytes);
        let mut mask = 0;
        let mut covered = false;
        for &(f, l, q) in &self.ranges {
            if f <= last && first <= l {
                mask |= 1 << q;
                covered |= f <= first && last <= l;
            }
        }
        if !covered {
            mask |= 1 << self.unregistered();
        }
        mask
    }

    /// Ask for a scheduling pass at `t`, unless one is already queued for then.
    fn tick(&mut self, t: u64, ev: &mut Events) {
        if let Err(i) = self.ticks.binary_search(&t) {
            self.ticks.insert(i, t);
            ev.push(t, Ev::Tick);
        }
    }

    pub fn read(&mut self, now: u64, core: u32, seq: u64, line: u64) {
        self.stats.reads += 1;
        if let Some(a) = &mut self.arrivals {
            a.push(Arrival {
                t: now,
                line,
                write: false,
            });
        }
        let r = Read {
            line,
            ch: self.channel(line) as u32,
            unit: self.unit(line) as u32,
            core,
            seq,
        };
        if self.reads.len() < self.reads_max {
            self.reads_on.add(r.unit);
            self.reads.push_back(r);
        } else {
            self.read_backlog.push_back(r);
        }
        self.asked = true;
    }

    /// A write arrives; true if it entered its sub-queue at once.
    pub fn write(&mut self, now: u64, line: u64, version: u64, waiter: Option<(u32, u64)>) -> bool {
        self.stats.writes += 1;
        if let Some(a) = &mut self.arrivals {
            a.push(Arrival {
                t: now,
                line,
                write: true,
            });
        }
        self.stats.posted_writes += u64::from(waiter.is_none());
        self.next_write += 1;
        let w = Write {
            id: self.next_write,
            line,
            ch: self.channel(line) as u32,
            unit: self.unit(line) as u32,
            version,
            waiter,
        };
        let q = self.queue_of(line);
        let sq = &mut self.queues[q as usize];
        let room =
            sq.lock.is_none() && sq.waiting.is_empty() && sq.entries.len() < self.entries_max;
        if room {
            sq.entries.push_back(w);
            self.writes_on.add(w.unit);
            self.log(Log::WriteAccepted {
                id: w.id,
                q,
                t: now,
            });
        } else {
            sq.waiting.push_back(w);
            self.stats.writes_waited += 1;
        }
        self.asked = true;
        room
    }

    /// The pass a core's arrival asked for (`read`, `write`, `commit`), run at once. A core
    /// reaches the controller at `now` only when nothing else is due before it (no event
    /// before `now`, no completion or pass at `now`, no lower-numbered core at `now`), so a
    /// pass queued at `now` would be the next event and would see exactly this state: running
    /// it here gives the same timeline without the event, and without the core yielding to it.
    pub fn pass_if_asked(&mut self, now: u64, ev: &mut Events) {
        if std::mem::take(&mut self.asked) {
            self.schedule(now, ev);
        }
    }

    /// Move waiting writes into sub-queue `q` while it has room and is not locked.
    fn admit(&mut self, now: u64, q: usize, ev: &mut Events) {
        while self.queues[q].lock.is_none() && self.queues[q].entries.len() < self.entries_max {
            let Some(w) = self.queues[q].waiting.pop_front() else {
                break;
            };
            self.queues[q].entries.push_back(w);
            self.writes_on.add(w.unit);
            self.log(Log::WriteAccepted {
                id: w.id,
                q: q as u32,
                t: now,
            });
            if let Some((core, seq)) = w.waiter {
                ev.push(now, Ev::Accepted { core, seq });
            }
        }
    }
}

// Commits.
impl Mc {
    /// A commit reaches the controller (the core's commit instruction is at its ROB head, so
    /// every flush before it has entered the write queue). True if it is done at once.
    pub fn commit(&mut self, now: u64, core: u32, seq: u64, addr: u64, len: u64) -> bool {
        self.stats.commits += 1;
        let queues = match self.mode {
            Mode::Adr | Mode::Eadr => return true,
            Mode::Global => (1u32 << self.queues.len()) - 1,
            Mode::Fine => self.queues_of_range(addr, len),
        };
        let c = Commit {
            core,
            seq,
            queues,
            left: queues,
            arrived: now,
            started: false,
            query_sent: false,
        };
        self.commits.push(c);
        self.waiting_commits.push(self.commits.len() - 1);
        // A pass follows only if a commit started (one that waits changes nothing to issue).
        self.asked = self.start_commits(now);
        false
    }

    /// Start, in arrival order, every waiting commit whose sub-queues are all free: a commit
    /// waits only for commits holding one of its own sub-queues. True if one started: the
    /// caller then runs or asks for the pass that follows.
    fn start_commits(&mut self, now: u64) -> bool {
        let mut started = false;
        let mut i = 0;
        while i < self.waiting_commits.len() {
            let idx = self.waiting_commits[i];
            let queues = self.commits[idx].queues;
            let free = (0..self.queues.len())
                .all(|q| queues & (1 << q) == 0 || self.queues[q].lock.is_none());
            if !free {
                i += 1;
                continue;
            }
            self.waiting_commits.remove(i);
            for q in (0..self.queues.len()).filter(|q| queues & (1 << q) != 0) {
                self.queues[q].lock = Some(idx);
            }
            self.commits[idx].started = true;
            if self.mode == Mode::Global {
                self.global_commit = Some(idx);
            }
            self.log(Log::CommitStart {
                commit: idx as u64,
                queues,
                t: now,
            });
            started = true;
        }
        started
    }

    fn finish_commit(&mut self, now: u64, idx: usize, ev: &mut Events) {
        let c = &self.commits[idx];
        assert!(
            c.left == 0 && c.started,
            "a commit is done only when every part is"
        );
        let (core, seq, queues, arrived) = (c.core, c.seq, c.queues, c.arrived);
        self.stats.commit_cycles_total += now - arrived;
        self.log(Log::CommitDone {
            commit: idx as u64,
            t: now,
        });
        ev.push(now, Ev::CommitDone { core, seq });
        if self.global_commit == Some(idx) {
            self.global_commit = None;
        }
        for q in (0..self.queues.len()).filter(|q| queues & (1 << q) != 0) {
            self.queues[q].lock = None;
            self.admit(now, q, ev);
        }
        // The pass at `now` is asked for below whether or not one started.
        self.start_commits(now);
        self.tick(now, ev);
    }

    /// A query read returned: the credits it carries are the NVM side's at its sending.
    pub fn query_done(&mut self, now: u64, q: u32, answer: u32, ev: &mut Events) {
        if q == u32::MAX {
            let idx = self
                .global_commit
                .expect("a global query belongs to the running global commit");
            self.commits[idx].left = 0;
            return self.finish_commit(now, idx, ev);
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
                    t: now,
                });
                if self.commits[idx].left == 0 {
                    self.finish_commit(now, idx, ev);
                }
            }
        }
        self.tick(now, ev);
    }

    pub fn write_done(
        &mut self,
        now: u64,
        q: u32,
        id: u64,
        line: u64,
        version: u64,
        ev: &mut Events,
    ) {
        let sq = &mut self.queues[q as usize];
        assert!(
            sq.in_flight > 0,
            "a write finishes only after it was issued"
        );
        sq.in_flight -= 1;
        self.memory.insert(line, version);
        self.log(Log::WriteDone { id, t: now });
        self.tick(now, ev);
    }
}

// Scheduling.
impl Mc {
    /// Issue what can be issued at `now`, channel by channel: reads first, then the queries
    /// commits and credits need, then writes; ask for the next pass when a resource frees.
    pub fn schedule(&mut self, now: u64, ev: &mut Events) {
        if let Ok(i) = self.ticks.binary_search(&now) {
            self.ticks.remove(i);
        }
        for ch in 0..self.bus.len() {
            while self.bus[ch] <= now {
                if !(self.issue_read(now, ch, ev)
                    || self.issue_query(now, ch, ev)
                    || self.issue_write(now, ch, ev))
                {
                    break;
                }
            }
        }
        let next = self.next_free(now);
        if next != u64::MAX {
            self.tick(next, ev);
        }
    }

    fn issue_read(&mut self, now: u64, ch: usize, ev: &mut Events) -> bool {
        if !self.ready_on(&self.reads_on, now, ch) {
            return false;
        }
        let units = &self.units;
        let pick = self
            .reads
            .iter()
            .position(|r| r.ch as usize == ch && units[r.unit as usize] <= now);
        let Some(i) = pick else { return false };
        let r = self.reads.remove(i).expect("picked");
        self.reads_on.remove(r.unit);
        if let Some(b) = self.read_backlog.pop_front() {
            self.reads_on.add(b.unit);
            self.reads.push_back(b);
        }
        let u = r.unit as usize;
        self.units[u] = now + self.read_cycles + self.burst_cycles;
        self.bus[ch] = now + self.burst_cycles;
        self.log(Log::ReadIssued {
            line: r.line,
            t: now,
        });
        ev.read_issued(self.units[u], r.core, r.seq);
        true
    }

    /// The query a sub-queue needs now on channel `ch` (sub-queue q queries on channel
    /// q mod channels; a global commit on channel 0).
    fn issue_query(&mut self, now: u64, ch: usize, ev: &mut Events) -> bool {
        let back = now + self.read_cycles + self.burst_cycles;
        if let (Some(idx), 0) = (self.global_commit, ch) {
            let drained = self
                .queues
                .iter()
                .all(|s| s.entries.is_empty() && s.in_flight == 0);
            if drained && !self.commits[idx].query_sent {
                self.commits[idx].query_sent = true;
                return self.send_query(now, ch, u32::MAX, 0, back, ev);
            }
        }
        if self.mode != Mode::Fine {
            return false;
        }
        for q in (ch..self.queues.len()).step_by(self.bus.len()) {
            let sq = &self.queues[q];
            let polling = sq
                .lock
                .is_some_and(|idx| self.commits[idx].left & (1 << q) != 0)
                && sq.entries.is_empty();
            let starved = sq.credits == 0 && !sq.entries.is_empty();
            if !sq.query_out && (polling || starved) {
                let answer = self.credits_max - self.queues[q].in_flight;
                if polling {
                    self.stats.commit_queries += 1;
                } else {
                    self.stats.credit_queries += 1;
                }
                return self.send_query(now, ch, q as u32, answer, back, ev);
            }
        }
        false
    }

    fn send_query(
        &mut self,
        now: u64,
        ch: usize,
        q: u32,
        answer: u32,
        back: u64,
        ev: &mut Events,
    ) -> bool {
        if let Some(sq) = self.queues.get_mut(q as usize) {
            sq.query_out = true;
            sq.issued_since_query = 0;
        }
        self.stats.syncs += 1;
        self.bus[ch] = now + self.burst_cycles;
        self.log(Log::Query { q, t: now });
        ev.push(back, Ev::QueryDone { q, answer });
        true
    }
}

impl Mc {
    /// The first write on channel `ch` that can go now: sub-queues in turn, each in order,
    /// skipping a write whose unit is busy or that an older write of its line precedes. In
    /// fine mode a sub-queue without credits issues nothing until a query refills them.
    fn pick_write(&self, now: u64, ch: usize) -> Option<(usize, usize)> {
        if !self.ready_on(&self.writes_on, now, ch) {
            return None;
        }
        for (q, sq) in self.queues.iter().enumerate() {
            if self.mode == Mode::Fine && sq.credits == 0 {
                continue;
            }
            for (i, w) in sq.entries.iter().enumerate() {
                if w.ch as usize != ch || self.units[w.unit as usize] > now {
                    continue;
                }
                if sq.entries.iter().take(i).all(|o| o.line != w.line) {
                    return Some((q, i));
                }
            }
        }
        None
    }

    fn issue_write(&mut self, now: u64, ch: usize, ev: &mut Events) -> bool {
        let Some((q, i)) = self.pick_write(now, ch) else {
            return false;
        };
        let w = self.queues[q].entries.remove(i).expect("picked");
        self.writes_on.remove(w.unit);
        let sq = &mut self.queues[q];
        sq.in_flight += 1;
        assert!(
            sq.in_flight <= self.credits_max || self.mode != Mode::Fine,
            "credits bound the writes in flight"
        );
        if self.mode == Mode::Fine {
            sq.credits -= 1;
            sq.issued_since_query += 1;
        }
        let u = w.unit as usize;
        let done = now + self.burst_cycles + self.write_cycles;
        self.units[u] = done;
        self.bus[ch] = now + self.burst_cycles;
        self.log(Log::WriteIssued {
            id: w.id,
            q: q as u32,
            t: now,
        });
        ev.push(
            done,
            Ev::WriteDone {
                q: q as u32,
                id: w.id,
                line: w.line,
                version: w.version,
            },
        );
        self.admit(now, q, ev);
        true
    }

    /// Whether a free unit of channel `ch` has a queued request (`count` per unit): if not,
    /// no scan of the queue can find one to issue.
    fn ready_on(&self, count: &Counts, now: u64, ch: usize) -> bool {
        count
            .units()
            .any(|u| self.unit_ch[u] as usize == ch && self.units[u] <= now)
    }

    /// The earliest later time a queued read or write finds its channel and unit free: per
    /// unit with something queued, the later of its unit's and its channel's free times.
    fn next_free(&self, now: u64) -> u64 {
        let mut next = u64::MAX;
        let mut consider = |t: u64| {
            if t > now && t < next {
                next = t;
            }
        };
        for u in self.reads_on.units().chain(self.writes_on.units()) {
            consider(self.bus[self.unit_ch[u] as usize].max(self.units[u]));
        }
        let querying = self
            .queues
            .iter()
            .any(|s| s.lock.is_some() || (s.credits == 0 && !s.entries.is_empty()));
        // A query waits for its channel's bus, too.
        if querying {
            for &b in &self.bus {
                consider(b);
            }
        }
        next
    }

    /// Nothing queued, in flight or committing: the run can end.
    pub fn idle(&self) -> bool {
        self.reads.is_empty()
            && self
                .queues
                .iter()
                .all(|s| s.entries.is_empty() && s.waiting.is_empty() && s.in_flight == 0)
            && self.waiting_commits.is_empty()
    }
}

/// Requests queued per unit, with a bit per unit that has any, so the units with work are
/// found a word (64 units) at a time.
struct Counts {
    count: Vec<u32>,
    bits: Vec<u64>,
}

impl Counts {
    fn new(units: usize) -> Counts {
        Counts {
            count: vec![0; units],
            bits: vec![0; units.div_ceil(64)],
        }
    }

    fn add(&mut self, unit: u32) {
        let u = unit as usize;
        self.count[u] += 1;
        self.bits[u / 64] |= 1 << (u % 64);
    }

    fn remove(&mut self, unit: u32) {
        let u = unit as usize;
        assert!(
            self.count[u] > 0,
            "a request leaves a unit it was queued on"
        );
        self.count[u] -= 1;
        if self.count[u] == 0 {
            self.bits[u / 64] &= !(1 << (u % 64));
        }
    }

    /// The units with something queued, in increasing order.
    fn units(&self) -> impl Iterator<Item = usize> + '_ {
        self.bits.iter().enumerate().flat_map(|(w, &word)| {
            let mut rest = word;
            std::iter::from_fn(move || {
                if rest == 0 {
                    return None;
                }
                let b = rest.trailing_zeros() as usize;
                rest &= rest - 1;
                Some(w * 64 + b)
            })
        })
    }
}
