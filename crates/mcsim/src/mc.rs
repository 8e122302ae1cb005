//! The memory controller of Figure 4: one read queue, a write queue split into sub-queues
//! bound to address ranges by range registers (the last sub-queue takes every other address),
//! persistence credits per sub-queue synchronised by query reads, and the NVM's units and
//! channel buses. Reads go before writes; writes of one sub-queue issue in order, except that
//! a write may pass older writes of other lines whose unit is busy.

use crate::config::{Config, Mode};
use crate::event::{Ev, Events, Log};
use crate::ranges::Ranges;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

/// Finished writes folded into the final memory at once.
const WRITTEN_BATCH: usize = 1 << 16;

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
    /// The units of `entries`, a bit each: a pass skips a sub-queue with nothing on a free
    /// unit of its channel without looking at its entries.
    on: Vec<u64>,
    /// Writes that found the sub-queue full or locked, in arrival order.
    waiting: VecDeque<Write>,
    /// Writes issued to the NVM and not finished (the NVM side's taken credits).
    in_flight: u32,
    /// The controller's view of the credits, stale until a query returns.
    credits: u32,
    issued_since_query: u32,
    /// The commit holding the sub-queue (index into `Mc::commits`).
    lock: Option<usize>,
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

/// A query a pass can send: for a global commit (its index), polling a committing
/// sub-queue, or for the credits of a sub-queue that ran out.
enum Query {
    Global(usize),
    Poll(usize),
    Credits(usize),
}

struct Read {
    line: u64,
    ch: u32,
    unit: u32,
    core: u32,
    seq: u64,
    /// Its place in the read queue's arrival order (entering from the backlog counts).
    order: u64,
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
    queues: Vec<SubQueue>,
    /// The read queue, a FIFO per unit: the oldest read a channel can issue is the oldest
    /// (lowest `order`) head among its free units, the one a scan of a single FIFO of every
    /// read would find first.
    reads: Vec<VecDeque<Read>>,
    reads_len: usize,
    read_order: u64,
    read_backlog: VecDeque<Read>,
    units: Vec<u64>,
    /// The units busy at the time of the current (or last) pass, `units[u] > now`, a bit
    /// each, and the earliest time one of them frees: only a pass at or after it clears bits.
    busy: Vec<u64>,
    busy_until: u64,
    /// Per channel, its units, a bit each.
    ch_units: Vec<Vec<u64>>,
    /// The sub-queues locked or out of credits, a bit each: the only ones a query can be
    /// due for (`note_query` keeps it), and per channel the sub-queues that query on it.
    query_cands: u32,
    ch_queues: Vec<u32>,
    /// The sub-queues with a query out, a bit each.
    queries_out: u32,
    /// Per unit, the reads in the read queue and the writes in sub-queues that need it: a
    /// pass looks at a channel's queues only when one of its free units has something.
    reads_on: Counts,
    writes_on: Counts,
    bus: Vec<u64>,
    ranges: Ranges,
    commits: Vec<Commit>,
    /// Commits waiting to start, in arrival order: (index, sub-queues).
    waiting_commits: Vec<(usize, u32)>,
    /// The sub-queues a commit holds, a bit each.
    locked: u32,
    global_commit: Option<usize>,
    next_write: u64,
    /// The final memory (line -> version) as of the last `memory()`, and the finished
    /// writes since, in completion order: a push per write, folded in batches (the map's
    /// inserts in a tight loop, the list's size bounded).
    memory: FxHashMap<u64, u64>,
    written: Vec<(u64, u64)>,
    pub stats: McStats,
    pub log: Option<Vec<Log>>,
    /// A core's arrival asked for a pass at its time (`pass_if_asked`).
    asked: bool,
    /// A completion asked for a pass at its own time and none is queued for then: the engine
    /// runs it once the last completion of that time is done (`pass_if_due`), where the
    /// queued pass would have run, without the event.
    due: bool,
    /// Every request's arrival, when asked for (`sim::run_recording`).
    pub arrivals: Option<Vec<Arrival>>,
    /// `Config::ideal_memory`: no controller; reads are timed at arrival (`ideal_read`),
    /// writes and commits are done at once.
    ideal: bool,
}

impl Mc {
    pub fn new(cfg: &Config) -> Mc {
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
        let mut ch_queues = vec![0; cfg.channels as usize];
        for q in 0..cfg.sub_queues {
            ch_queues[(q % cfg.channels) as usize] |= 1 << q;
        }
        let out_of_credits = if cfg.credits == 0 { u32::MAX } else { 0 };
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
            queues: (0..cfg.sub_queues).map(|_| queue()).collect(),
            reads: (0..units).map(|_| VecDeque::new()).collect(),
            reads_len: 0,
            read_order: 0,
            read_backlog: VecDeque::new(),
            units: vec![0; units],
            busy: vec![0; words],
            busy_until: u64::MAX,
            ch_units,
            query_cands: out_of_credits & (u32::MAX >> (32 - cfg.sub_queues)),
            ch_queues,
            queries_out: 0,
            reads_on: Counts::new(units),
            writes_on: Counts::new(units),
            bus: vec![0; cfg.channels as usize],
            ranges: Ranges::new(cfg.sub_queues, cfg.range_registers, cfg.line_bytes),
            commits: Vec::new(),
            waiting_commits: Vec::new(),
            locked: 0,
            global_commit: None,
            due: false,
            next_write: 0,
            memory: FxHashMap::default(),
            written: Vec::new(),
            stats: McStats::default(),
            log: cfg.log_events.then(Vec::new),
            asked: false,
            arrivals: None,
            ideal: cfg.ideal_memory,
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

    /// PersistenceMalloc (`Ranges::bind`).
    pub fn bind(&mut self, addr: u64, len: u64) {
        self.ranges.bind(addr, len);
    }

    pub fn queue_of(&self, line: u64) -> u32 {
        self.ranges.queue_of(line)
    }

    /// Ask for a pass at `now`, the time of the completion being handled: it comes after
    /// every completion at `now` and before the cores, so it is left to `pass_if_due`.
    fn tick_now(&mut self) {
        self.due = true;
    }

    /// The pass a completion at `now` asked for (`tick_now`), run once no other completion
    /// at `now` is queued: a queued pass at `now` would be the next event and would see
    /// exactly this state. While one is, the pass waits for it (it comes before the pass).
    /// If a pass is queued for `now` already, that one is it (one pass a time).
    pub fn pass_if_due(&mut self, now: u64, ev: &mut Events) {
        if self.due && !ev.completion_at(now) {
            self.due = false;
            if !ev.pass_now(now) {
                self.schedule(now, ev);
            }
        }
    }

    /// A request's arrival, recorded when asked for (`sim::run_recording`).
    #[inline]
    fn arrived(&mut self, t: u64, line: u64, write: bool) {
        if let Some(a) = &mut self.arrivals {
            a.push(Arrival { t, line, write });
        }
    }

    /// A read under `Config::ideal_memory`, counted and recorded as any read: its data is
    /// back a read and a burst after it arrives (no queue, unit or bus). The time returned.
    pub fn ideal_read(&mut self, now: u64, line: u64) -> u64 {
        assert!(
            self.ideal,
            "only the ideal memory times a read at its arrival"
        );
        self.stats.reads += 1;
        self.arrived(now, line, false);
        self.log(Log::ReadIssued { line, t: now });
        let done = now + self.read_cycles + self.burst_cycles;
        debug_assert!(done > now, "a read takes time");
        done
    }

    pub fn read(&mut self, now: u64, core: u32, seq: u64, line: u64) {
        assert!(!self.ideal, "the ideal memory's reads are ideal_read's");
        self.stats.reads += 1;
        self.arrived(now, line, false);
        let r = Read {
            line,
            ch: self.channel(line) as u32,
            unit: self.unit(line) as u32,
            core,
            seq,
            order: 0,
        };
        if self.reads_len < self.reads_max {
            self.enqueue_read(r);
        } else {
            self.read_backlog.push_back(r);
        }
        self.asked = true;
    }

    /// `r` enters the read queue, after every read in it.
    fn enqueue_read(&mut self, mut r: Read) {
        assert!(self.reads_len < self.reads_max, "the read queue has room");
        self.read_order += 1;
        r.order = self.read_order;
        self.reads_on.add(r.unit);
        self.reads[r.unit as usize].push_back(r);
        self.reads_len += 1;
    }

    /// Write `w` enters sub-queue `q`, after every write in it.
    fn enqueue_write(&mut self, now: u64, q: usize, w: Write) {
        let sq = &mut self.queues[q];
        assert!(
            sq.entries.len() < self.entries_max,
            "the sub-queue has room"
        );
        sq.entries.push_back(w);
        sq.on[w.unit as usize / 64] |= 1 << (w.unit % 64);
        self.writes_on.add(w.unit);
        self.log(Log::WriteAccepted {
            id: w.id,
            q: q as u32,
            t: now,
        });
    }

    /// A write arrives; true if it entered its sub-queue at once.
    pub fn write(&mut self, now: u64, line: u64, version: u64, waiter: Option<(u32, u64)>) -> bool {
        self.stats.writes += 1;
        self.arrived(now, line, true);
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
        if self.ideal {
            self.ideal_write(now, w);
            return true;
        }
        let q = self.queue_of(line);
        let sq = &mut self.queues[q as usize];
        let room =
            sq.lock.is_none() && sq.waiting.is_empty() && sq.entries.len() < self.entries_max;
        if room {
            self.enqueue_write(now, q as usize, w);
        } else {
            sq.waiting.push_back(w);
            self.stats.writes_waited += 1;
        }
        self.asked = true;
        room
    }

    /// A write under `Config::ideal_memory`: accepted at once, in memory a burst and a write
    /// later. Every write takes that same time, so writes land in arrival order: the list of
    /// finished writes is appended at once (no event), and the final memory is the same.
    fn ideal_write(&mut self, now: u64, w: Write) {
        debug_assert!(
            self.ideal && !self.asked,
            "no pass is ever asked of the ideal memory"
        );
        if self.log.is_some() {
            let q = self.queue_of(w.line);
            let done = now + self.burst_cycles + self.write_cycles;
            self.log(Log::WriteAccepted {
                id: w.id,
                q,
                t: now,
            });
            self.log(Log::WriteDone { id: w.id, t: done });
        }
        self.written.push((w.line, w.version));
        if self.written.len() == WRITTEN_BATCH {
            self.memory();
        }
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
            self.enqueue_write(now, q, w);
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
            _ if self.ideal => return true,
            Mode::Adr | Mode::Eadr => return true,
            Mode::Global => (1u32 << self.queues.len()) - 1,
            Mode::Fine => self.ranges.queues_of_range(addr, len),
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
        self.waiting_commits.push((self.commits.len() - 1, queues));
        // A pass follows only if a commit started (one that waits changes nothing to issue).
        self.asked = self.start_commits(now);
        false
    }

    /// Sub-queue `q`'s lock or credits changed: keep its bit of `query_cands`.
    fn note_query(&mut self, q: usize) {
        let sq = &self.queues[q];
        if sq.lock.is_some() || sq.credits == 0 {
            self.query_cands |= 1 << q;
        } else {
            self.query_cands &= !(1 << q);
        }
    }

    /// Start, in arrival order, every waiting commit whose sub-queues are all free: a commit
    /// waits only for commits holding one of its own sub-queues. True if one started: the
    /// caller then runs or asks for the pass that follows.
    fn start_commits(&mut self, now: u64) -> bool {
        let mut started = false;
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
                self.note_query(q);
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
        for q in ones(0, queues.into()) {
            self.queues[q].lock = None;
            self.locked &= !(1 << q);
            self.note_query(q);
            self.admit(now, q, ev);
        }
        // The pass at `now` is asked for below whether or not one started.
        self.start_commits(now);
        self.tick_now();
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
        self.queries_out &= !(1 << q);
        sq.credits = answer.saturating_sub(sq.issued_since_query);
        let settled =
            answer == self.credits_max && sq.issued_since_query == 0 && sq.entries.is_empty();
        self.note_query(q as usize);
        if let (Some(idx), true) = (self.queues[q as usize].lock, settled) {
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
        self.tick_now();
    }

    pub fn write_done(&mut self, now: u64, q: u32, id: u64, line: u64, version: u64) {
        let sq = &mut self.queues[q as usize];
        assert!(
            sq.in_flight > 0,
            "a write finishes only after it was issued"
        );
        sq.in_flight -= 1;
        self.written.push((line, version));
        if self.written.len() == WRITTEN_BATCH {
            self.memory();
        }
        self.log(Log::WriteDone { id, t: now });
        self.tick_now();
    }
}

// Scheduling.
impl Mc {
    /// Issue what can be issued at `now`, channel by channel: reads first, then the queries
    /// commits and credits need, then writes; ask for the next pass when a resource frees.
    pub fn schedule(&mut self, now: u64, ev: &mut Events) {
        self.refresh_busy(now);
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
            debug_assert!(next > now, "a pass asks for a later one");
            ev.ask_pass(next);
        }
    }

    fn issue_read(&mut self, now: u64, ch: usize, ev: &mut Events) -> bool {
        let Some(u) = self.oldest_read(ch) else {
            return false;
        };
        let r = self.reads[u]
            .pop_front()
            .expect("a unit with reads has a head");
        assert!(
            r.ch as usize == ch && self.units[u] <= now,
            "the picked read's channel and unit are free"
        );
        self.reads_on.remove(r.unit);
        self.reads_len -= 1;
        if let Some(b) = self.read_backlog.pop_front() {
            self.enqueue_read(b);
        }
        self.occupy(u, now + self.read_cycles + self.burst_cycles);
        self.bus[ch] = now + self.burst_cycles;
        self.log(Log::ReadIssued {
            line: r.line,
            t: now,
        });
        ev.read_issued(self.units[u], r.core, r.seq);
        true
    }

    /// The unit of the oldest queued read on channel `ch` whose unit is free: the lowest
    /// `order` among the heads of the free units' FIFOs.
    fn oldest_read(&self, ch: usize) -> Option<usize> {
        let mut pick = None;
        let mut oldest = u64::MAX;
        for w in 0..self.busy.len() {
            for u in ones(w, self.free_in(self.reads_on.bits[w], ch, w)) {
                let order = self.reads[u][0].order;
                if order < oldest {
                    oldest = order;
                    pick = Some(u);
                }
            }
        }
        pick
    }

    /// The query a sub-queue needs now on channel `ch` (sub-queue q queries on channel
    /// q mod channels; a global commit on channel 0).
    fn issue_query(&mut self, now: u64, ch: usize, ev: &mut Events) -> bool {
        let back = now + self.read_cycles + self.burst_cycles;
        match self.pick_query(ch) {
            None => false,
            Some(Query::Global(idx)) => {
                self.commits[idx].query_sent = true;
                self.send_query(now, ch, u32::MAX, 0, back, ev)
            }
            Some(query @ (Query::Poll(q) | Query::Credits(q))) => {
                if matches!(query, Query::Poll(_)) {
                    self.stats.commit_queries += 1;
                } else {
                    self.stats.credit_queries += 1;
                }
                let answer = self.credits_max - self.queues[q].in_flight;
                self.send_query(now, ch, q as u32, answer, back, ev)
            }
        }
    }

    /// The query due on channel `ch`, if any.
    fn pick_query(&self, ch: usize) -> Option<Query> {
        if let (Some(idx), 0) = (self.global_commit, ch) {
            let drained = |s: &SubQueue| s.entries.is_empty() && s.in_flight == 0;
            if !self.commits[idx].query_sent && self.queues.iter().all(drained) {
                return Some(Query::Global(idx));
            }
        }
        if self.mode != Mode::Fine {
            return None;
        }
        debug_assert!(
            (0..self.queues.len()).all(|q| {
                let sq = &self.queues[q];
                (self.query_cands >> q & 1 != 0) == (sq.lock.is_some() || sq.credits == 0)
            }),
            "the query candidates are the sub-queues locked or out of credits"
        );
        let cands = self.query_cands & self.ch_queues[ch] & !self.queries_out;
        ones(0, cands.into()).find_map(|q| {
            let sq = &self.queues[q];
            let polling = sq
                .lock
                .is_some_and(|idx| self.commits[idx].left & (1 << q) != 0)
                && sq.entries.is_empty();
            let starved = sq.credits == 0 && !sq.entries.is_empty();
            match (polling, starved) {
                (true, _) => Some(Query::Poll(q)),
                (false, true) => Some(Query::Credits(q)),
                (false, false) => None,
            }
        })
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
            sq.issued_since_query = 0;
            self.queries_out |= 1 << q;
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
    fn pick_write(&self, ch: usize) -> Option<(usize, usize)> {
        if !self.ready_on(self.writes_on.bits.iter().copied(), ch) {
            return None;
        }
        for (q, sq) in self.queues.iter().enumerate() {
            if (self.mode == Mode::Fine && sq.credits == 0)
                || !self.ready_on(sq.on.iter().copied(), ch)
            {
                continue;
            }
            // An older write of the same line has the same channel and unit, so it would
            // be found first: the first write on `ch` with a free unit has none before it.
            let i = sq
                .entries
                .iter()
                .position(|w| w.ch as usize == ch && !self.is_busy(w.unit as usize))
                .expect("a free unit of the channel has a write in this sub-queue");
            debug_assert!(
                sq.entries
                    .iter()
                    .take(i)
                    .all(|o| o.line != sq.entries[i].line),
                "no older write of its line precedes the picked write"
            );
            return Some((q, i));
        }
        None
    }

    fn issue_write(&mut self, now: u64, ch: usize, ev: &mut Events) -> bool {
        let Some((q, i)) = self.pick_write(ch) else {
            return false;
        };
        let w = self.queues[q].entries.remove(i).expect("picked");
        self.writes_on.remove(w.unit);
        let sq = &mut self.queues[q];
        if sq.entries.iter().all(|o| o.unit != w.unit) {
            sq.on[w.unit as usize / 64] &= !(1 << (w.unit % 64));
        }
        sq.in_flight += 1;
        assert!(
            sq.in_flight <= self.credits_max || self.mode != Mode::Fine,
            "credits bound the writes in flight"
        );
        if self.mode == Mode::Fine {
            sq.credits -= 1;
            sq.issued_since_query += 1;
            self.note_query(q);
        }
        let u = w.unit as usize;
        let done = now + self.burst_cycles + self.write_cycles;
        self.occupy(u, done);
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
}

// The units' busy set.
impl Mc {
    /// Bring the busy set to `now`: clear the bits of units free by then. Passes come in
    /// time order, and only an issue makes a unit busy (`occupy`).
    fn refresh_busy(&mut self, now: u64) {
        if now >= self.busy_until {
            let mut until = u64::MAX;
            for w in 0..self.busy.len() {
                for u in ones(w, self.busy[w]) {
                    if self.units[u] <= now {
                        self.busy[w] &= !(1 << (u % 64));
                    } else {
                        until = until.min(self.units[u]);
                    }
                }
            }
            self.busy_until = until;
        }
        debug_assert!(
            (0..self.units.len()).all(|u| self.is_busy(u) == (self.units[u] > now)),
            "a unit is in the busy set exactly when it is busy at the pass's time"
        );
    }

    /// Unit `u` is busy until `until` (after the pass's time).
    fn occupy(&mut self, u: usize, until: u64) {
        self.units[u] = until;
        self.busy[u / 64] |= 1 << (u % 64);
        self.busy_until = self.busy_until.min(until);
    }

    fn is_busy(&self, u: usize) -> bool {
        self.busy[u / 64] & (1 << (u % 64)) != 0
    }

    /// Of word `w` of a unit set, the units that are channel `ch`'s and free now.
    fn free_in(&self, word: u64, ch: usize, w: usize) -> u64 {
        word & self.ch_units[ch][w] & !self.busy[w]
    }

    /// Whether a free unit of channel `ch` is in `on` (the units with a queued request): if
    /// not, no scan of the queue can find one to issue.
    fn ready_on(&self, on: impl IntoIterator<Item = u64>, ch: usize) -> bool {
        on.into_iter()
            .enumerate()
            .any(|(w, word)| self.free_in(word, ch, w) != 0)
    }

    /// The earliest later time a queued read or write finds its channel and unit free (per
    /// unit with something queued, the later of its unit's and its channel's free times), or
    /// a query its channel's bus (any bus while a sub-queue is locked or starved).
    fn next_free(&self, now: u64) -> u64 {
        // Locked, or out of credits with writes queued.
        let querying = ones(0, self.query_cands.into()).any(|q| {
            let s = &self.queues[q];
            s.lock.is_some() || !s.entries.is_empty()
        });
        let mut next = u64::MAX;
        for ch in 0..self.bus.len() {
            let bus = self.bus[ch];
            // A request on a busy unit waits for the later of its unit and the bus: it
            // cannot beat a bus that frees after `now`.
            let t = if bus > now && (querying || self.ready_on(self.work(), ch)) {
                bus
            } else {
                self.busy_work_until(now, ch).max(bus)
            };
            next = next.min(t);
        }
        next
    }

    /// The units with a queued read or write, a word each.
    fn work(&self) -> impl Iterator<Item = u64> + '_ {
        let (r, w) = (&self.reads_on.bits, &self.writes_on.bits);
        r.iter().zip(w).map(|(r, w)| r | w)
    }

    /// The earliest time a busy unit of channel `ch` with a queued request frees (u64::MAX:
    /// none).
    fn busy_work_until(&self, now: u64, ch: usize) -> u64 {
        let mut until = u64::MAX;
        for (w, work) in self.work().enumerate() {
            for u in ones(w, work & self.ch_units[ch][w] & self.busy[w]) {
                until = until.min(self.units[u]);
            }
        }
        assert!(until > now, "a busy unit frees after the pass");
        until
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

    /// Nothing queued, in flight or committing: the run can end.
    pub fn idle(&self) -> bool {
        self.reads_len == 0
            && self
                .queues
                .iter()
                .all(|s| s.entries.is_empty() && s.waiting.is_empty() && s.in_flight == 0)
            && self.waiting_commits.is_empty()
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

/// Requests queued per unit, with a bit per unit that has any.
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
}

#[cfg(test)]
mod tests;
