//! One core's re-order buffer in closed form, for an engine that drives many cores in global
//! time order and learns some entries' ready times only later, from the memory system.
//!
//! The model is the engine's (`sim.rs`): each cycle retires up to R instructions in order,
//! then fetches up to F in order. An instruction is fetched once the one ROB places before it
//! retired (in this cycle's retire step or earlier) and, after a fence or a commit, once that
//! retired. It retires no earlier than the cycle after its fetch nor its ready cycle: its
//! fetch plus its latency (plain, fence: 0; L1, L2, L3 hits: their hit cycles), or a cycle
//! given later ([`Rob::resolve`]) for a deferred entry (a read the controller has not issued,
//! a flush waiting for room) or a commit (done when the controller says; it reaches the
//! controller in the first cycle it is the ROB head with retire width left).
//!
//! Times are positions: a fetch at cycle c in slot s is c * F + s, a retirement c * R + s,
//! so in-order issue with a width is `max(previous + 1, width * bound)`. Retirements of the
//! last ROB instructions are kept as segments of consecutive positions, so a run of n plain
//! instructions is O(1) work (`gap`); see the `rob_bound` example, whose recurrences these
//! are.
//!
//! Deferral: instructions are split in three stretches, by number:
//! - `0..retired`: fetch and retirement known (the segments).
//! - `retired..fetched` (`inflight`): fetch known; retirement waits for the front item, a
//!   deferred entry not resolved yet (everything behind it retires in order after it).
//! - `fetched..next` (`pending`): accepted, not fetched: the next needs the retirement of the
//!   instruction ROB places before it, or of a fence or commit, which is not known yet.
//!
//! With nothing deferred the two queues stay empty and every operation is the example's
//! arithmetic at once (the fast path). Otherwise operations queue and are evaluated when a
//! query needs them (`settle`): each item is fetched once and retired once, so the cost stays
//! O(1) amortised per operation. The queues are rings that grow only past their largest
//! backlog so far: no allocation in steady state.
//!
//! How an engine drives it: before each shared access (L3, controller, bind) it asks
//! [`Rob::fetch_cycle`]; `None` means the answer waits on a deferred entry
//! ([`Rob::waiting_on`]); the engine resolves that one when the memory system decides, then
//! asks again. Private operations (plain runs, L1/L2 hits, fences) are accepted at any time.

use crate::config::{Config, Mode};
use std::collections::VecDeque;

/// A deferred entry or a commit, named for [`Rob::resolve`]. Ids count up from 0 per ROB in
/// program order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id(pub u64);

/// A ready time not known yet.
const UNKNOWN: u64 = u64::MAX;

/// Instructions `first..first + count` retire at positions `pos..pos + count`.
#[derive(Clone, Copy, Debug)]
struct Seg {
    first: u64,
    count: u64,
    pos: u64,
}

/// The widths and latencies a core's recurrences need.
#[derive(Clone, Copy, Debug)]
struct Shape {
    rob: u64,
    /// log2 of the fetch and retire widths: a position's cycle is a shift, not a division.
    fetch_shift: u32,
    retire_shift: u32,
    /// Ready this long after fetch, by what served the access (L1, L2, L3, ideal memory).
    served_cycles: [u64; 4],
}

impl Shape {
    fn new(cfg: &Config) -> Shape {
        let (fetch, retire) = (cfg.fetch_width, cfg.retire_width);
        let rob = u64::from(cfg.rob_entries);
        assert!(
            fetch.is_power_of_two() && retire.is_power_of_two(),
            "widths are powers of two (Table II's are)"
        );
        // The closed form for plain runs relies on both (see `Rob::gap_now`).
        assert!(fetch >= retire, "fetch is at least as wide as retire");
        assert!(
            rob + 1 >= 3 * u64::from(retire),
            "the ROB holds several retire widths"
        );
        Shape {
            rob,
            fetch_shift: fetch.trailing_zeros(),
            retire_shift: retire.trailing_zeros(),
            served_cycles: [
                u64::from(cfg.l1.hit_cycles),
                u64::from(cfg.l2.hit_cycles),
                u64::from(cfg.l3_per_core.hit_cycles),
                cfg.cycles(cfg.read_ns) + cfg.cycles(cfg.burst_ns).max(1),
            ],
        }
    }

    /// The position of the first fetch slot of the cycle retirement position `pos` is in.
    #[inline]
    fn fetch_start(&self, retire_pos: u64) -> u64 {
        (retire_pos >> self.retire_shift) << self.fetch_shift
    }

    /// The first retirement position of the cycle after the one fetch position `pos` is in.
    #[inline]
    fn after_fetch(&self, fetch_pos: u64) -> u64 {
        ((fetch_pos >> self.fetch_shift) + 1) << self.retire_shift
    }
}

/// Segments a core keeps room for (a power of two: a ring indexed by a mask).
const RING: usize = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `n` plain instructions.
    Gap,
    /// Ready `latency` after its fetch, or, with an id, at the cycle resolved for it.
    Entry,
    Fence,
    Commit,
}

/// A queued operation. `fetch_pos` is its first instruction's fetch position once fetched.
#[derive(Clone, Copy, Debug)]
struct Item {
    kind: Kind,
    n: u64,
    latency: u64,
    id: Option<u64>,
    fetch_pos: u64,
}

impl Item {
    fn new(kind: Kind, n: u64, latency: u64, id: Option<u64>) -> Item {
        Item {
            kind,
            n,
            latency,
            id,
            fetch_pos: UNKNOWN,
        }
    }
}

/// One core's ROB (module doc).
pub struct Rob {
    s: Shape,
    /// Commits are done at their arrival (ADR, eADR, the ideal memory): they resolve alone.
    commits_at_arrival: bool,
    /// Instructions accepted: the next one's number.
    next: u64,
    /// Something is queued (`inflight` or `pending`). Without, `fetched` and `retired` are
    /// `next` and the fast path does not keep them (one flag to test, fewer stores).
    queued: bool,
    /// Something was queued or resolved since the last `settle`, which evaluates as far as it
    /// can: without, another finds nothing more to do.
    changed: bool,
    /// Instructions whose fetch position is known, and the earliest position of the next
    /// fetch (after the last fetch, and after the retirement of the last fence or commit).
    fetched: u64,
    fetch_pos: u64,
    /// The last fetched item is a fence or commit not yet retired: nothing more is fetched.
    serial_waits: bool,
    /// Instructions whose retirement is known, and the earliest position of the next.
    retired: u64,
    retire_pos: u64,
    /// Instructions numbered below this need no look at the ROB's room: ROB after the last
    /// fence or commit (which retired before anything after it was fetched, and so did the
    /// instructions before it), or the first ROB.
    free_until: u64,
    /// Retirements of at least the instructions `fetched - ROB..retired`, oldest first:
    /// segments `head` to `tail` (numbered over the run, at their number modulo RING).
    segs: Box<[Seg; RING]>,
    head: u64,
    tail: u64,
    /// Items fetched and not retired (`retired..fetched`), then items not fetched.
    inflight: VecDeque<Item>,
    pending: VecDeque<Item>,
    /// Ready cycles of ids `ready_base..`, UNKNOWN until resolved; the front leaves when its
    /// item retires.
    readies: VecDeque<u64>,
    ready_base: u64,
    /// Each commit's arrival at the controller, in order, when asked for (checks).
    arrivals: Option<Vec<u64>>,
}

impl Rob {
    /// An empty ROB of machine `cfg`'s widths, size and hit times.
    pub fn new(cfg: &Config) -> Rob {
        let s = Shape::new(cfg);
        // Segments hold an instruction or more, and those before `fetched - ROB` leave before
        // a run's own (two at most) are pushed.
        assert!(
            2 * s.rob + 4 <= RING as u64,
            "the ring holds two ROBs of segments"
        );
        let empty = Seg {
            first: 0,
            count: 0,
            pos: 0,
        };
        let queue = (s.rob as usize).next_power_of_two();
        Rob {
            s,
            commits_at_arrival: cfg.ideal_memory || matches!(cfg.mode, Mode::Adr | Mode::Eadr),
            next: 0,
            queued: false,
            changed: false,
            fetched: 0,
            fetch_pos: 0,
            serial_waits: false,
            retired: 0,
            retire_pos: 0,
            free_until: s.rob,
            segs: Box::new([empty; RING]),
            head: 0,
            tail: 0,
            inflight: VecDeque::with_capacity(queue),
            pending: VecDeque::with_capacity(queue),
            readies: VecDeque::with_capacity(queue),
            ready_base: 0,
            arrivals: None,
        }
    }

    /// Keep every commit's arrival cycle (`arrivals`), for checks.
    pub fn log_arrivals(&mut self) {
        self.arrivals = Some(Vec::new());
    }

    /// The commits' arrival cycles so far, in program order (with `log_arrivals`).
    pub fn arrivals(&self) -> &[u64] {
        self.arrivals.as_deref().unwrap_or(&[])
    }

    /// Ready cycles after fetch of an access served by L1, L2, L3 and the ideal memory.
    pub fn served_cycles(&self) -> [u64; 4] {
        self.s.served_cycles
    }

    /// Instructions accepted (all retire eventually: the engine's `instructions` per core).
    pub fn instructions(&self) -> u64 {
        self.next
    }

    /// The cycle the last instruction retires (0 with none): where the engine's core
    /// finishes. None while a deferred entry it depends on is not resolved.
    pub fn cycles(&mut self) -> Option<u64> {
        self.settle();
        if self.queued {
            return None;
        }
        assert!(self.inflight.is_empty() && self.pending.is_empty());
        Some(self.cycles_so_far())
    }

    fn cycles_so_far(&self) -> u64 {
        if self.next == 0 {
            0
        } else {
            (self.retire_pos - 1) >> self.s.retire_shift
        }
    }

    /// The next fetch and retirement positions (the example's step-by-step check compares
    /// them; meaningful with nothing queued).
    pub fn positions(&self) -> (u64, u64) {
        (self.fetch_pos, self.retire_pos)
    }

    /// Whether nothing waits on a deferred entry: every operation is evaluated at once.
    #[inline(always)]
    fn is_settled(&self) -> bool {
        !self.queued
    }

    /// Queue `item`: from the fast path, the instruction counts start from `next`. Out of
    /// line: the fast path stays small where it is inlined.
    #[inline(never)]
    fn enqueue(&mut self, item: Item) {
        assert!(item.n > 0, "an item holds instructions");
        if !self.queued {
            debug_assert!(self.inflight.is_empty() && self.pending.is_empty());
            (self.fetched, self.retired, self.queued) = (self.next, self.next, true);
        }
        self.changed = true;
        self.next += item.n;
        if item.kind == Kind::Gap {
            if let Some(b) = self.pending.back_mut().filter(|b| b.kind == Kind::Gap) {
                b.n += item.n;
                return;
            }
        }
        self.pending.push_back(item);
    }

    /// `n` plain instructions.
    #[inline(always)]
    pub fn gap(&mut self, n: u64) {
        if n == 0 {
            return;
        }
        if self.is_settled() {
            return self.gap_now(n);
        }
        self.enqueue(Item::new(Kind::Gap, n, 0, None));
    }

    /// An entry ready `latency` cycles after its fetch (an access served by a cache, a flush
    /// accepted at once).
    #[inline(always)]
    pub fn entry(&mut self, latency: u64) {
        if self.is_settled() {
            self.entry_now(latency);
            return;
        }
        self.enqueue(Item::new(Kind::Entry, 1, latency, None));
    }

    /// An entry whose ready cycle comes later (`resolve`): a read the controller has yet to
    /// issue, a flush waiting for room in its sub-queue.
    pub fn entry_deferred(&mut self) -> Id {
        let id = self.new_id();
        debug_assert!(
            self.readies[self.readies.len() - 1] == UNKNOWN,
            "a fresh id"
        );
        self.enqueue(Item::new(Kind::Entry, 1, 0, Some(id.0)));
        id
    }

    /// A fence: nothing after it is fetched before it retires.
    #[inline(always)]
    pub fn fence(&mut self) {
        if self.is_settled() {
            self.serial_now();
            return;
        }
        self.enqueue(Item::new(Kind::Fence, 1, 0, None));
    }

    /// A commit: nothing after it is fetched before it retires; it reaches the controller in
    /// the first cycle it is the ROB head with retire width left (`commit_arrival`) and
    /// retires once done (`resolve`; at its arrival in ADR, eADR and the ideal memory, where
    /// it resolves alone).
    #[inline(always)]
    pub fn commit(&mut self) -> Id {
        if self.is_settled() && self.commits_at_arrival {
            // Known at once: resolved at its arrival, which `serial_now` computes.
            debug_assert!(self.readies.is_empty(), "nothing unresolved when settled");
            let id = Id(self.ready_base);
            self.ready_base += 1;
            let arrival = self.serial_now();
            if let Some(a) = self.arrivals.as_mut() {
                a.push(arrival);
            }
            return id;
        }
        self.commit_queued()
    }

    #[inline(never)]
    fn commit_queued(&mut self) -> Id {
        let id = self.new_id();
        self.enqueue(Item::new(Kind::Commit, 1, 0, Some(id.0)));
        id
    }

    /// The id the next deferred entry or commit will have.
    pub fn next_id(&self) -> Id {
        Id(self.ready_base + self.readies.len() as u64)
    }

    fn new_id(&mut self) -> Id {
        let id = self.next_id();
        self.readies.push_back(UNKNOWN);
        id
    }

    /// Deferred entry or commit `id` is ready at `ready_cycle`: it retires no earlier (nor
    /// before the cycle after its fetch; a commit nor before its arrival).
    pub fn resolve(&mut self, id: Id, ready_cycle: u64) {
        assert!(
            id.0 >= self.ready_base,
            "an id resolves once, before it retires"
        );
        let slot = &mut self.readies[(id.0 - self.ready_base) as usize];
        assert_eq!(*slot, UNKNOWN, "an id resolves once");
        assert!(ready_cycle != UNKNOWN, "a ready cycle is a cycle");
        *slot = ready_cycle;
        self.changed = true;
    }
}

// Queries: each evaluates what it needs of the queued operations first.
impl Rob {
    /// The cycle the next instruction would be fetched (a shared access or a bind happens
    /// then), or None while that depends on a deferred entry not resolved (`waiting_on`):
    /// the ROB's room, a fence's or commit's retirement, or an instruction queued before it.
    pub fn fetch_cycle(&mut self) -> Option<u64> {
        self.settle();
        if !self.queued {
            let i = self.next;
            return Some(self.fetch_pos.max(self.room_pos(i)) >> self.s.fetch_shift);
        }
        if !self.pending.is_empty() || self.serial_waits {
            return None;
        }
        let i = self.fetched;
        if i >= self.retired + self.s.rob {
            return None;
        }
        assert_eq!(
            i, self.next,
            "with nothing pending every instruction is fetched"
        );
        assert!(!self.serial_waits, "a fence or commit waits only inflight");
        Some(self.fetch_pos.max(self.room_pos(i)) >> self.s.fetch_shift)
    }

    /// The deferred entry or commit everything not yet evaluated waits on: the oldest one not
    /// resolved. None when all is evaluated.
    pub fn waiting_on(&mut self) -> Option<Id> {
        self.settle();
        let Some(front) = self.inflight.front() else {
            assert!(
                self.pending.is_empty(),
                "fetching stops only behind inflight"
            );
            return None;
        };
        let id = front
            .id
            .expect("retirement stops only at a deferred entry or commit");
        debug_assert_eq!(id, self.ready_base, "the oldest id is the front's");
        Some(Id(id))
    }

    /// The cycle the oldest unresolved commit reaches the controller, once everything before
    /// it retired (its own resolution waits for this); None otherwise.
    pub fn commit_arrival(&mut self) -> Option<u64> {
        self.settle();
        let front = self.inflight.front()?;
        (front.kind == Kind::Commit).then(|| {
            assert!(
                front.latency != UNKNOWN,
                "a commit at the front has arrived"
            );
            front.latency
        })
    }

    /// Evaluate what the resolved ready cycles allow now (the queries do so anyway): an
    /// engine that holds a core's operations back while it waits on an entry returns it to
    /// the fast path this way before it gives it more.
    pub fn settle_now(&mut self) {
        self.settle();
    }

    /// Evaluate queued operations as far as the resolved ready cycles allow.
    #[inline]
    fn settle(&mut self) {
        if self.is_settled() || !self.changed {
            return;
        }
        self.changed = false;
        loop {
            while self.retire_front() {}
            // Retirement stopped at an entry not resolved: what is fetched now waits behind
            // it, and the room and serialisation that limit fetching stay as they are.
            let blocked = !self.inflight.is_empty();
            let mut fetched = false;
            while self.fetch_front() {
                fetched = true;
            }
            if blocked || !fetched {
                break;
            }
        }
        self.queued = !(self.inflight.is_empty() && self.pending.is_empty());
        assert!(
            self.retired <= self.fetched && self.fetched <= self.next,
            "retired, fetched and accepted instructions in order"
        );
    }

    /// Retire the front inflight item if its ready cycle is known; false otherwise.
    fn retire_front(&mut self) -> bool {
        let Some(&it) = self.inflight.front() else {
            return false;
        };
        let (rs, fs) = (self.s.retire_shift, self.s.fetch_shift);
        assert!(it.fetch_pos != UNKNOWN, "an inflight item was fetched");
        let earliest = self.retire_pos.max(self.s.after_fetch(it.fetch_pos));
        let ready = match (it.kind, it.id) {
            (Kind::Entry, None) => (it.fetch_pos >> fs) + it.latency,
            (Kind::Commit, Some(id)) => {
                // Everything before it retired: it is the head from position `earliest`,
                // with retire width left in that cycle. `latency` keeps the arrival.
                let arrival = earliest >> rs;
                if it.latency == UNKNOWN {
                    self.inflight[0].latency = arrival;
                    if let Some(a) = self.arrivals.as_mut() {
                        a.push(arrival);
                    }
                }
                if self.commits_at_arrival {
                    arrival
                } else {
                    self.readies[(id - self.ready_base) as usize]
                }
            }
            (_, Some(id)) => self.readies[(id - self.ready_base) as usize],
            (_, None) => 0,
        };
        if ready == UNKNOWN {
            return false;
        }
        // The memory system answers after the question: a read, flush or commit is ready no
        // earlier than its fetch (a commit than its arrival).
        let after = if it.kind == Kind::Commit {
            earliest >> rs
        } else {
            it.fetch_pos >> fs
        };
        assert!(
            it.id.is_none() || ready >= after,
            "ready after fetch and arrival"
        );
        let pos = earliest.max(ready << rs);
        self.push(self.retired, it.n, pos);
        self.retire_pos = pos + it.n;
        self.retired += it.n;
        self.inflight.pop_front();
        if let Some(id) = it.id {
            assert_eq!(id, self.ready_base, "ids retire in order");
            self.readies.pop_front();
            self.ready_base += 1;
        }
        if matches!(it.kind, Kind::Fence | Kind::Commit) {
            self.serial_retired(pos);
        }
        true
    }

    /// Fetch the front pending item, or as much of a plain run as the ROB's known room allows;
    /// false if nothing can be.
    fn fetch_front(&mut self) -> bool {
        let Some(&it) = self.pending.front() else {
            return false;
        };
        let i = self.fetched;
        // Room for instruction i is the retirement of i - ROB (free_until never exceeds this).
        let limit = self.retired + self.s.rob;
        debug_assert!(self.free_until <= limit, "free room is known room");
        if self.serial_waits || i >= limit {
            return false;
        }
        assert!(
            it.fetch_pos == UNKNOWN && it.n > 0,
            "an item is fetched once"
        );
        let first = self.fetch_pos.max(self.room_pos(i));
        let mut item = it;
        item.fetch_pos = first;
        item.latency = if it.kind == Kind::Commit {
            UNKNOWN // its arrival, once known
        } else {
            it.latency
        };
        if it.kind == Kind::Gap {
            // As `gap_now`, over the instructions whose room is known.
            let count = it.n.min(limit - i);
            let last = (first + count - 1).max(self.room_max(i + 1, i + count - 1));
            self.fetch_pos = last + 1;
            item.n = count;
            if count < it.n {
                self.pending[0].n -= count;
            } else {
                self.pending.pop_front();
            }
        } else {
            self.fetch_pos = first + 1;
            self.pending.pop_front();
            self.serial_waits = matches!(it.kind, Kind::Fence | Kind::Commit);
        }
        self.fetched += item.n;
        self.inflight.push_back(item);
        true
    }

    /// A fence or commit retired at `pos`: nothing after it was fetched before, and later
    /// instructions wait for no one before it (only its segment stays).
    fn serial_retired(&mut self, pos: u64) {
        assert!(self.queued, "the fast path has `serial_now`");
        assert_eq!(
            self.fetched, self.retired,
            "nothing after a serial is fetched"
        );
        self.fetch_pos = self.fetch_pos.max(self.s.fetch_start(pos));
        self.free_until = self.retired - 1 + self.s.rob;
        self.head = self.tail - 1;
        self.serial_waits = false;
    }
}

// The fast path (nothing queued) and the segments: the `rob_bound` example's recurrences.
impl Rob {
    #[inline]
    fn seg(&self, n: u64) -> &Seg {
        &self.segs[n as usize % RING]
    }

    #[inline]
    fn push(&mut self, first: u64, count: u64, pos: u64) {
        assert!(count > 0, "a segment holds instructions");
        if self.tail > self.head {
            let b = &mut self.segs[(self.tail - 1) as usize % RING];
            debug_assert_eq!(b.first + b.count, first, "segments follow each other");
            if b.pos + b.count == pos {
                b.count += count;
                return;
            }
        }
        assert!(
            self.tail - self.head < RING as u64,
            "the segments fit the ring"
        );
        self.segs[self.tail as usize % RING] = Seg { first, count, pos };
        self.tail += 1;
    }

    /// The position at which instruction `i` may be fetched at the earliest for the ROB's
    /// sake: the start of the cycle instruction i - ROB retired in. Older segments leave.
    #[inline]
    fn room_pos(&mut self, i: u64) -> u64 {
        if i < self.free_until {
            return 0;
        }
        let y = i - self.s.rob;
        debug_assert!(!self.queued || y < self.retired, "i - ROB has retired");
        while self.head < self.tail {
            let f = *self.seg(self.head);
            if f.first + f.count > y {
                debug_assert!(f.first <= y, "the instruction ROB places back is kept");
                return self.s.fetch_start(f.pos + y - f.first);
            }
            self.head += 1;
        }
        unreachable!("instruction i - ROB has retired")
    }

    /// An instruction ready `cycles` after its fetch, fetched and retired at once; the cycle
    /// it retires.
    #[inline(always)]
    fn entry_now(&mut self, cycles: u64) -> u64 {
        debug_assert!(self.is_settled(), "the fast path has nothing queued");
        let i = self.next;
        let fetch_pos = self.fetch_pos.max(self.room_pos(i));
        let fetched = fetch_pos >> self.s.fetch_shift;
        self.fetch_pos = fetch_pos + 1;
        let pos = (self.retire_pos).max((fetched + cycles.max(1)) << self.s.retire_shift);
        debug_assert!(
            pos >> self.s.retire_shift > fetched,
            "retired after its fetch"
        );
        self.retire_pos = pos + 1;
        self.push(i, 1, pos);
        self.next += 1;
        pos >> self.s.retire_shift
    }

    /// A fence or a commit done at its arrival, at once; the cycle it retires (and arrives:
    /// ready at once, it is the head with retire width left in that cycle).
    #[inline(always)]
    fn serial_now(&mut self) -> u64 {
        let retired = self.entry_now(0);
        // As `serial_retired`, with `next` for the instructions retired.
        self.fetch_pos = self.fetch_pos.max(retired << self.s.fetch_shift);
        self.free_until = self.next - 1 + self.s.rob;
        self.head = self.tail - 1;
        retired
    }

    /// A run of `n` plain instructions, in O(segments) not O(n).
    ///
    /// Retirement: plain instruction j retires at max(the next retire slot, fetch_j + 1).
    /// Only the run's first can wait for its fetch: a later one either shares its fetch
    /// cycle with the one before (which retires after that cycle), or opens a cycle the
    /// F >= R instructions before it filled (they retire no earlier than it opens, so over at
    /// least one cycle), or was held back by the ROB (ROB + 1 instructions from j - ROB to j
    /// retire over (ROB + 1) / R cycles or more, so fetch_j + 1 <= retire_{j-ROB} + 2 is
    /// passed). So the run retires at consecutive positions: one segment.
    ///
    /// Fetch: position_j = max(position_{j-1} + 1, room_j), so the last one's is
    /// max(first + n - 1, max over j of room_j + (last - j)) (`room_max`).
    #[inline(always)]
    fn gap_now(&mut self, n: u64) {
        debug_assert!(self.is_settled() && n > 0, "the fast path, a run");
        let k = self.next;
        let first_pos = self.fetch_pos.max(self.room_pos(k));
        let pos = (self.retire_pos).max(self.s.after_fetch(first_pos));
        self.push(k, n, pos);
        self.retire_pos = pos + n;
        self.next += n;
        let last = k + n - 1;
        let last_pos = (first_pos + n - 1).max(self.room_max(k + 1, last));
        debug_assert!(last_pos >= first_pos + n - 1, "a run fetches in order");
        self.fetch_pos = last_pos + 1;
    }

    /// max over j in lo..=hi of room_pos(j) + (hi - j), without moving the segments. Within
    /// a segment room_pos(j) - j is largest at the last j whose retirement opens a cycle
    /// (each cycle adds F to room_pos and R to j, F >= R), or at the first if none does.
    #[inline]
    fn room_max(&self, lo: u64, hi: u64) -> u64 {
        let rob = self.s.rob;
        if hi < self.free_until || lo > hi {
            return 0;
        }
        let (ylo, yhi) = (lo.saturating_sub(rob), hi - rob);
        debug_assert!(!self.queued || yhi < self.retired, "the room is known");
        let r_mask = (1u64 << self.s.retire_shift) - 1;
        let mut best = 0;
        for n in self.head..self.tail {
            let s = self.seg(n);
            if s.first > yhi {
                break;
            }
            let end = s.first + s.count - 1;
            if end < ylo {
                continue;
            }
            let (a, b) = (ylo.max(s.first), yhi.min(end));
            let pb = s.pos + (b - s.first);
            let y = b.checked_sub(pb & r_mask).filter(|&y| y >= a).unwrap_or(a);
            let room = self.s.fetch_start(s.pos + (y - s.first));
            best = best.max(room + (yhi - y));
        }
        best
    }
}

#[cfg(test)]
mod tests;
