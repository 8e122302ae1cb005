//! Figure 4's memory controller (a read queue, a write queue split into sub-queues bound to
//! address ranges, persistence credits per sub-queue synchronised by query reads, commits that
//! lock and drain their sub-queues), scheduled on a calendar instead of in passes.
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
//! write waits for the reads placed on its unit: what the controller before this one (until
//! 2026-11-27), which decided at each pass among what had arrived, gave only to reads already
//! queued (docs/mcsim.md, "What the calendar changed").
//!
//! At equal times the controller acts before the cores, completions before commands, and
//! channels in order. Every action is O(sub-queues + units of a channel) at most: there is no
//! pass that issues nothing.
//!
//! What reaches the controller is its vocabulary, [`Input`] (`mc/input.rs`): recorded when
//! asked, so that [`mod@crate::replay`] can replay a run's inputs on the controller alone.

use crate::config::{Config, Mode};
use crate::event::Log;
use crate::ranges::Ranges;
use rustc_hash::FxHashMap;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

mod input;
pub use input::Input;

/// Times dropped from the front of a `Times` before they are cleared out.
const TIMES_DROPPED_MAX: usize = 64;

/// Finished writes folded into the final memory at once.
const WRITTEN_BATCH: usize = 1 << 16;

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

/// The engine's entry `token` is done at `t`: a flush's write was accepted, or a commit is
/// durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Done {
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
    /// Writes that found the sub-queue full or locked, in arrival order.
    waiting: VecDeque<Write>,
    /// Writes issued to the NVM and not finished (the NVM side's taken credits).
    in_flight: u32,
    /// The controller's view of the credits, stale until a query returns.
    credits: u32,
    /// Writes issued since the last query was sent (its answer does not count them).
    issued_since_query: u32,
    /// The commit holding the sub-queue (index into `Mc::commits`).
    lock: Option<usize>,
}

/// A commit at the controller, from its arrival until it is durable.
struct Commit {
    /// Its number in arrival order (the log names it by this).
    number: u64,
    /// The engine's commit entry, named in `Done` when durable.
    token: u64,
    /// The sub-queues it locks and drains, a bit each.
    queues: u32,
    /// Sub-queues whose part is not done yet.
    left: u32,
    /// Its arrival cycle: its time per commit (Fig. 9) counts from here.
    arrived: u64,
    /// Global: its one synchronisation read has gone out.
    query_sent: bool,
}

/// Times in increasing order, few at once (a channel's commands that may still hold its
/// bus): kept in a vector from `head` on, added near the
/// back and taken from the front, so no step moves more than the few later than a new one.
#[derive(Default)]
struct Times {
    v: Vec<u64>,
    head: usize,
}

impl Times {
    #[inline]
    fn live(&self) -> &[u64] {
        &self.v[self.head..]
    }

    /// Add `x` after every time not later.
    #[inline]
    fn add(&mut self, x: u64) {
        // The times dropped are cleared out now and then, not at every add.
        if self.head >= TIMES_DROPPED_MAX {
            self.v.drain(..self.head);
            self.head = 0;
        }
        // Pushed at the back and moved down past the later ones (few: no call to move them).
        self.v.push(x);
        let mut i = self.v.len() - 1;
        while i > self.head && self.v[i - 1] > x {
            self.v[i] = self.v[i - 1];
            i -= 1;
        }
        self.v[i] = x;
        debug_assert!(self.live().is_sorted(), "times stay in order");
    }

    /// Drop the first times while `done` holds for them.
    #[inline]
    fn drop_while(&mut self, done: impl Fn(u64) -> bool) {
        while self.head < self.v.len() && done(self.v[self.head]) {
            self.head += 1;
        }
    }
}

/// One channel's data bus: the start of every command that may still hold it.
#[derive(Default)]
struct Bus {
    starts: Times,
}

impl Bus {
    /// The earliest time at or after `t` with a free burst.
    #[inline]
    fn gap(&self, t: u64, burst: u64) -> u64 {
        let mut s = t;
        for &x in self.starts.live() {
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

    /// A command takes the burst from `s`, placed at `now` (arrivals and decisions come in
    /// time order, so what was over before `now` is forgotten).
    fn take(&mut self, s: u64, burst: u64, now: u64) {
        debug_assert_eq!(self.gap(s, burst), s, "a command takes a free burst");
        self.starts.drop_while(|x| x + burst <= now);
        self.starts.add(s);
    }
}

/// Query reads in flight and writes in flight, each taking the same time: both finish in the
/// order they were sent.
struct InFlight {
    queries: VecDeque<(u64, u32, u32)>,
    writes: VecDeque<(u64, u32, Write)>,
}

pub(crate) struct Mc {
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
    /// Both are powers of two (Table II's are): a line's place is masks and a shift.
    pow2_places: bool,
    queues: Vec<SubQueue>,
    ranges: Ranges,
    /// The units with a queued write that may issue (credits allowing), with counts.
    ready: Counts,
    /// Per unit, when it is free after every command placed on it.
    unit_free: Vec<u64>,
    /// Per channel, its units, a bit each: channel ch's words are `ch * words..`.
    ch_units: Vec<u64>,
    bus: Vec<Bus>,
    /// The issue times of the reads placed, while some may still be queued.
    read_issues: BinaryHeap<Reverse<u64>>,
    flight: InFlight,
    /// The commits at the controller, in slots reused once done (`free_commits`): a core
    /// has one commit out at most, so the slots stay as many as the cores.
    commits: Vec<Commit>,
    free_commits: Vec<usize>,
    /// Commits that reached the controller (waiting ones included): the next one's number.
    commits_arrived: u64,
    /// The slots' bound: one commit out per core.
    commits_max: usize,
    waiting_commits: Vec<(usize, u32)>,
    locked: u32,
    global_commit: Option<usize>,
    /// The sub-queues, a bit each: with writes queued; out of credits (fine-grained); with a
    /// part of a commit not done (fine-grained); with a query out. What decides whether a
    /// query is due and which sub-queues may issue, without a look at the sub-queues.
    nonempty: u32,
    no_credits: u32,
    parts_left: u32,
    queries_out: u32,
    /// Per channel, its sub-queues' queries (sub-queue q queries on channel q mod channels).
    ch_queues: Vec<u32>,
    /// Writes in flight, all sub-queues (a global commit's drain).
    in_flight: u32,
    /// Per channel, the time of its next command (u64::MAX: none) and the unit it uses
    /// (u32::MAX: a query), valid unless its bit in `stale` is set (channels are at most 64).
    next_cmd: Vec<(u64, u32)>,
    stale: u64,
    all_channels: u64,
    /// `next_action`'s answer, valid while `next_known`: nothing stale and no completion
    /// added or taken since.
    next: u64,
    next_known: bool,
    /// The latest time the controller was told of or acted at.
    now: u64,
    next_write: u64,
    memory: FxHashMap<u64, u64>,
    written: Vec<(u64, u64)>,
    pub stats: McStats,
    pub log: Option<Vec<Log>>,
    /// Every input, in order, when asked for (what `replay` replays).
    pub inputs: Option<Vec<Input>>,
}

impl Mc {
    pub fn new(cfg: &Config) -> Mc {
        let units = (cfg.channels * cfg.units_per_channel) as usize;
        let queue = || SubQueue {
            credits: cfg.credits,
            ..SubQueue::default()
        };
        let channels = cfg.channels as usize;
        assert!(
            (1..=64).contains(&channels),
            "validated: a channel is a bit of a word"
        );
        let (ch_units, ch_queues) = channel_sets(cfg);
        let all = u32::MAX >> (32 - cfg.sub_queues);
        Mc {
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
            pow2_places: cfg.channels.is_power_of_two() && cfg.units_per_channel.is_power_of_two(),
            queues: (0..cfg.sub_queues).map(|_| queue()).collect(),
            ranges: Ranges::new(cfg.sub_queues, cfg.range_registers, cfg.line_bytes),
            ready: Counts::new(units),
            unit_free: vec![0; units],
            ch_units,
            bus: (0..channels).map(|_| Bus::default()).collect(),
            read_issues: BinaryHeap::new(),
            flight: InFlight {
                queries: VecDeque::new(),
                writes: VecDeque::new(),
            },
            commits: Vec::new(),
            free_commits: Vec::new(),
            commits_arrived: 0,
            commits_max: cfg.cores as usize,
            waiting_commits: Vec::new(),
            locked: 0,
            global_commit: None,
            nonempty: 0,
            no_credits: if cfg.mode == Mode::Fine && cfg.credits == 0 {
                all
            } else {
                0
            },
            parts_left: 0,
            queries_out: 0,
            ch_queues,
            in_flight: 0,
            next_cmd: vec![(u64::MAX, 0); channels],
            stale: 0,
            all_channels: u64::MAX >> (64 - channels),
            next: u64::MAX,
            next_known: true,
            now: 0,
            next_write: 0,
            memory: FxHashMap::default(),
            written: Vec::new(),
            stats: McStats::default(),
            log: cfg.log_events.then(Vec::new),
            inputs: None,
        }
    }

    /// The event log so far (empty unless `Config::log_events`), in time order: entries are
    /// pushed when decided, which is not always the order of their times.
    pub fn take_log(&mut self) -> Vec<Log> {
        let mut log = self.log.take().unwrap_or_default();
        log.sort_by_key(Log::time);
        log
    }

    fn log(&mut self, entry: Log) {
        if let Some(log) = &mut self.log {
            log.push(entry);
        }
    }

    /// Lines interleave over channels, then over a channel's units.
    #[inline]
    fn place_of(&self, line: u64) -> (u32, u32) {
        if self.pow2_places {
            let shift = self.channels.trailing_zeros();
            let ch = line & (self.channels - 1);
            let upc = (line >> shift) & (self.units_per_channel - 1);
            return (ch as u32, (ch + (upc << shift)) as u32);
        }
        let ch = line % self.channels;
        let unit = ch + self.channels * ((line / self.channels) % self.units_per_channel);
        (ch as u32, unit as u32)
    }

    /// The engine tells the controller of something at `t` (a request, a commit): time only
    /// moves on, and the controller has done everything due before it.
    fn hear_at(&mut self, t: u64) {
        assert!(
            t >= self.now,
            "the controller hears of things in time order"
        );
        debug_assert!(
            self.next_action() >= t,
            "the controller acted up to what it hears first"
        );
        self.now = t;
    }

    /// An input at `t`, recorded when asked for.
    fn arrive(&mut self, t: u64, input: Input) {
        self.hear_at(t);
        if let Some(inputs) = &mut self.inputs {
            inputs.push(input);
        }
    }

    /// Channel `ch`'s next command may have moved.
    fn mark(&mut self, ch: usize) {
        self.stale |= 1 << ch;
        self.next_known = false;
    }

    /// Every channel's next command may have moved.
    fn touch_all(&mut self) {
        self.stale = self.all_channels;
        self.next_known = false;
    }

    /// Sub-queue `q`'s query may be due now or no longer (on channel q mod channels), and so
    /// may a global commit's (on channel 0).
    fn touch_queries(&mut self, q: usize) {
        self.mark(q % self.next_cmd.len());
        if self.global_commit.is_some() {
            self.mark(0);
        }
    }

    /// PersistenceMalloc at `t`: `len` bytes at `addr` bound to a sub-queue.
    pub fn bind(&mut self, t: u64, addr: u64, len: u64) {
        if let Some(inputs) = &mut self.inputs {
            inputs.push(Input::Bind { t, addr, len });
        }
        self.ranges.bind(addr, len);
    }

    /// A read arriving at `t`: it takes its slot now, and its data is back at the time
    /// returned.
    pub fn read(&mut self, t: u64, line: u64) -> u64 {
        self.stats.reads += 1;
        self.arrive(t, Input::Read { t, line });
        if self.ideal {
            self.log(Log::ReadIssued { line, t });
            return t + self.read_cycles + self.burst_cycles;
        }
        // Reads issued by `t` have left the queue; the heap holds them until it might be full.
        if self.read_issues.len() >= self.reads_max {
            while self.read_issues.peek().is_some_and(|r| r.0 <= t) {
                self.read_issues.pop();
            }
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
        let s = self.bus[ch].gap(enters.max(self.unit_free[unit]), burst);
        self.bus[ch].take(s, burst, t);
        let done = s + self.read_cycles + burst;
        self.unit_free[unit] = done;
        if s > t {
            // Queued until `s`; one issued at its arrival never counts against the queue.
            self.read_issues.push(Reverse(s));
        }
        // The channel's next command stays where it was unless this read took its bus burst
        // or its unit: a read only takes room, so nothing earlier became possible.
        let (next, next_unit) = self.next_cmd[ch];
        if next != u64::MAX && (next_unit == unit as u32 || (s < next + burst && next < s + burst))
        {
            self.mark(ch);
        }
        self.log(Log::ReadIssued { line, t: s });
        assert!(s >= t && done > s, "a read issues at or after its arrival");
        done
    }
}

// Writes.
impl Mc {
    /// A write arrives at `t` (`waiter`: the engine's flush entry, None if posted); true if
    /// it entered its sub-queue at once (otherwise `Done` names the waiter when it does).
    pub fn write(&mut self, t: u64, line: u64, version: u64, waiter: Option<u64>) -> bool {
        self.stats.writes += 1;
        self.stats.posted_writes += u64::from(waiter.is_none());
        let input = Input::Write {
            t,
            line,
            version,
            waiter,
        };
        self.arrive(t, input);
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
        if self.issuing_queue(q) {
            self.ready.add(w.unit);
        }
        let was_empty = self.nonempty & (1 << q) == 0;
        self.nonempty |= 1 << q;
        // Its channel may issue it; a sub-queue that was empty may need a query now (out of
        // credits) or no longer (polling), and a global drain is not over.
        self.mark(w.ch as usize);
        if was_empty {
            self.touch_queries(q);
        }
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
        let can = |w: &Write| w.ch as usize == ch && self.unit_free[w.unit as usize] <= t;
        for q in ones(0, self.issuing().into()) {
            // The ring's two halves scanned as slices: no wrap test per entry.
            let (front, back) = self.queues[q].entries.as_slices();
            let i = front
                .iter()
                .position(can)
                .or_else(|| back.iter().position(can).map(|i| front.len() + i));
            if let Some(i) = i {
                return Some((q, i));
            }
        }
        None
    }

    /// The earliest time a write of channel `ch` finds its unit free, and that unit
    /// (u64::MAX: none queued that may issue).
    fn write_ready(&self, ch: usize) -> (u64, u32) {
        let mut best = (u64::MAX, 0);
        let words = self.ready.bits.len();
        let mine = &self.ch_units[ch * words..(ch + 1) * words];
        for (w, (&word, &unit_bits)) in self.ready.bits.iter().zip(mine).enumerate() {
            // In increasing unit order: the lowest unit wins a tie.
            for u in ones(w, word & unit_bits) {
                let free = self.unit_free[u];
                if free < best.0 {
                    best = (free, u as u32);
                }
            }
        }
        debug_assert!(
            best.0 == u64::MAX || self.pick_write(ch, best.0).is_some() && self.issuing() != 0,
            "a write of an issuing sub-queue is on the unit"
        );
        best
    }

    /// Whether sub-queue `q`'s writes may issue as far as credits go.
    fn issuing_queue(&self, q: usize) -> bool {
        self.no_credits & (1 << q) == 0
    }

    /// The sub-queues that may issue a write: with writes queued and, fine-grained, credits.
    fn issuing(&self) -> u32 {
        self.nonempty & !self.no_credits
    }

    fn issue_write(&mut self, t: u64, ch: usize, q: usize, i: usize, out: &mut Vec<Done>) {
        let entries = &mut self.queues[q].entries;
        let w = if i == 0 {
            entries.pop_front()
        } else {
            entries.remove(i)
        }
        .expect("picked");
        self.ready.remove(w.unit);
        let sq = &mut self.queues[q];
        let emptied = sq.entries.is_empty();
        sq.in_flight += 1;
        let mut out_of_credits = false;
        if self.mode == Mode::Fine {
            sq.credits -= 1;
            sq.issued_since_query += 1;
            out_of_credits = sq.credits == 0;
            assert!(
                sq.in_flight <= self.credits_max,
                "credits bound the writes in flight"
            );
        }
        self.in_flight += 1;
        self.nonempty &= !(u32::from(emptied) << q);
        self.no_credits |= u32::from(out_of_credits) << q;
        // This channel's bus and unit moved, and the sub-queue's query may be due (out of
        // credits, or empty while committing); out of credits, its writes on any channel
        // may issue no longer.
        self.mark(ch);
        if emptied || out_of_credits {
            self.touch_queries(q);
        }
        if out_of_credits {
            // Its queued writes may issue no longer.
            for e in &self.queues[q].entries {
                self.ready.remove(e.unit);
            }
            self.touch_all();
        }
        let done = t + self.burst_cycles + self.write_cycles;
        assert!(
            self.unit_free[w.unit as usize] <= t,
            "a write issues on a free unit"
        );
        self.unit_free[w.unit as usize] = done;
        self.bus[ch].take(t, self.burst_cycles, t);
        self.flight.writes.push_back((done, q as u32, w));
        self.next_known = false;
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
        self.in_flight -= 1;
        if self.in_flight == 0 && self.global_commit.is_some() {
            self.mark(0); // the drain may be over
        }
        self.land(w.line, w.version);
        self.log(Log::WriteDone { id: w.id, t });
    }
}

/// Per channel, its units (a bit each, `units.div_ceil(64)` words a channel) and the
/// sub-queues that query on it (sub-queue q on channel q mod channels).
fn channel_sets(cfg: &Config) -> (Vec<u64>, Vec<u32>) {
    let channels = cfg.channels as usize;
    let units = channels * cfg.units_per_channel as usize;
    let words = units.div_ceil(64);
    let mut ch_units = vec![0; words * channels];
    for u in 0..units {
        ch_units[(u % channels) * words + u / 64] |= 1 << (u % 64);
    }
    let mut ch_queues = vec![0; channels];
    for q in 0..cfg.sub_queues {
        ch_queues[q as usize % channels] |= 1 << q;
    }
    (ch_units, ch_queues)
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
impl Mc {
    /// A commit reaches the controller at `t` (its core's commit instruction is at the ROB
    /// head: every flush before it has entered the write queue). True if it is done at once;
    /// otherwise `Done` names `token` when it is.
    pub fn commit(&mut self, t: u64, token: u64, addr: u64, len: u64) -> bool {
        let input = Input::Commit {
            t,
            token,
            addr,
            len,
        };
        self.arrive(t, input);
        self.stats.commits += 1;
        let queues = match self.mode {
            _ if self.ideal => return true,
            Mode::Adr | Mode::Eadr => return true,
            Mode::Global => (1u32 << self.queues.len()) - 1,
            Mode::Fine => self.ranges.queues_of_range(addr, len),
        };
        let c = Commit {
            number: self.commits_arrived,
            token,
            queues,
            left: queues,
            arrived: t,
            query_sent: false,
        };
        self.commits_arrived += 1;
        let idx = match self.free_commits.pop() {
            Some(idx) => {
                self.commits[idx] = c;
                idx
            }
            None => {
                assert!(
                    self.commits.len() < self.commits_max,
                    "a core has one commit at the controller at most"
                );
                self.commits.push(c);
                self.commits.len() - 1
            }
        };
        self.waiting_commits.push((idx, queues));
        self.start_commits(t);
        false
    }

    /// Commits at the controller and not done.
    pub fn commits_open(&self) -> usize {
        self.commits.len() - self.free_commits.len()
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
            } else {
                self.parts_left |= queues;
            }
            self.log(Log::CommitStart {
                commit: self.commits[idx].number,
                queues,
                t,
            });
            self.touch_all();
        }
    }

    fn finish_commit(&mut self, t: u64, idx: usize, out: &mut Vec<Done>) {
        let c = &self.commits[idx];
        assert!(c.left == 0, "a commit is done only when every part is");
        let (token, queues, number) = (c.token, c.queues, c.number);
        self.stats.commit_cycles_total += t - c.arrived;
        self.log(Log::CommitDone { commit: number, t });
        // Its slot is free for the next commit to arrive (its sub-queues are unlocked below).
        self.free_commits.push(idx);
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
            if !self.commits[idx].query_sent && self.nonempty == 0 && self.in_flight == 0 {
                return Some(u32::MAX);
            }
        }
        if self.mode != Mode::Fine {
            return None;
        }
        let polling = self.parts_left & !self.nonempty;
        let starved = self.no_credits & self.nonempty;
        let due = (polling | starved) & self.ch_queues[ch] & !self.queries_out;
        debug_assert!(
            ones(0, due.into()).all(|q| {
                let sq = &self.queues[q];
                let part = sq
                    .lock
                    .is_some_and(|i| self.commits[i].left & (1 << q) != 0);
                (part && sq.entries.is_empty()) || (sq.credits == 0 && !sq.entries.is_empty())
            }),
            "the bits name the sub-queues whose query is due"
        );
        (due != 0).then(|| due.trailing_zeros())
    }

    fn send_query(&mut self, t: u64, ch: usize, q: u32) {
        let answer = match self.queues.get_mut(q as usize) {
            Some(sq) => {
                let polling = sq.lock.is_some() && sq.entries.is_empty();
                sq.issued_since_query = 0;
                self.queries_out |= 1 << q;
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
        self.mark(ch);
        self.bus[ch].take(t, self.burst_cycles, t);
        let back = t + self.read_cycles + self.burst_cycles;
        self.flight.queries.push_back((back, q, answer));
        self.next_known = false;
        self.log(Log::Query { q, t });
    }

    /// A query read returned at `t`: the credits it carries are the NVM side's at its sending.
    fn query_done(&mut self, t: u64, q: u32, answer: u32, out: &mut Vec<Done>) {
        if q == u32::MAX {
            let idx = self.global_commit.expect("a global query has its commit");
            self.commits[idx].left = 0;
            return self.finish_commit(t, idx, out);
        }
        self.queries_out &= !(1 << q);
        let sq = &mut self.queues[q as usize];
        sq.credits = answer.saturating_sub(sq.issued_since_query);
        let settled =
            answer == self.credits_max && sq.issued_since_query == 0 && sq.entries.is_empty();
        let (refilled, lock) = (sq.credits > 0, sq.lock);
        // Its query may be due again, on its channel.
        self.mark(q as usize % self.next_cmd.len());
        if refilled && self.no_credits & (1 << q) != 0 {
            // Its writes, on any channel, may issue again.
            self.touch_all();
            self.no_credits &= !(1 << q);
            // Its queued writes may issue again.
            for e in &self.queues[q as usize].entries {
                self.ready.add(e.unit);
            }
        }
        if let (Some(idx), true) = (lock, settled) {
            let c = &mut self.commits[idx];
            if c.left & (1 << q) != 0 {
                c.left &= !(1 << q);
                self.parts_left &= !(1 << q);
                let number = c.number;
                self.log(Log::CommitPart {
                    commit: number,
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
impl Mc {
    /// The time of channel `ch`'s next command from `self.now` on (u64::MAX: none) and the
    /// unit it uses (u32::MAX: a query).
    fn command_time(&self, ch: usize) -> (u64, u32) {
        let now = self.now;
        let (ready, unit) = if self.pick_query(ch).is_some() {
            (now, u32::MAX)
        } else {
            self.write_ready(ch)
        };
        if ready == u64::MAX {
            return (u64::MAX, 0);
        }
        (self.bus[ch].gap(ready.max(now), self.burst_cycles), unit)
    }

    /// The time of the controller's next action (u64::MAX: nothing to do until a request
    /// arrives). No request may arrive before the last one: the engine asks before each.
    #[inline]
    pub fn next_action(&mut self) -> u64 {
        if !self.next_known {
            self.next = self.find_next();
            self.next_known = true;
        }
        self.next
    }

    fn find_next(&mut self) -> u64 {
        let mut t = u64::MAX;
        if let Some(&(d, ..)) = self.flight.writes.front() {
            t = d;
        }
        if let Some(&(d, ..)) = self.flight.queries.front() {
            t = t.min(d);
        }
        for ch in ones(0, self.stale) {
            self.next_cmd[ch] = self.command_time(ch);
        }
        self.stale = 0;
        for (ch, &(c, _)) in self.next_cmd.iter().enumerate() {
            // What is not marked stale has not moved (the marks are the cache's invariant).
            debug_assert_eq!(
                self.next_cmd[ch],
                self.command_time(ch),
                "channel {ch}'s next command is where it was found"
            );
            t = t.min(c);
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
        // Whatever the step does, a completion is taken or a command placed.
        self.next_known = false;
        if self.flight.writes.front().is_some_and(|w| w.0 == t) {
            let (_, q, w) = self.flight.writes.pop_front().expect("a write");
            return self.write_done(t, q, w);
        }
        if self.flight.queries.front().is_some_and(|w| w.0 == t) {
            let (_, q, answer) = self.flight.queries.pop_front().expect("a query");
            return self.query_done(t, q, answer, out);
        }
        let ch = (0..self.next_cmd.len())
            .find(|&ch| self.next_cmd[ch].0 == t)
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
            "a request leaves a unit it was counted on"
        );
        self.count[u] -= 1;
        if self.count[u] == 0 {
            self.bits[u / 64] &= !(1 << (u % 64));
        }
    }
}
