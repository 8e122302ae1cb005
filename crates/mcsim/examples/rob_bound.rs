//! A lower bound on the cost of the core model: the floor's functional work (workload and
//! caches, no controller) plus each core's re-order buffer evaluated by recurrences, O(1) per
//! operation and per run of plain instructions, instead of cycle by cycle.
//!
//! The model is the engine's (`sim.rs`) with the ideal memory: each cycle retires up to R
//! instructions in order, then fetches up to F in order. An instruction is fetched once the
//! one ROB places before it retired (in this cycle's retire step or earlier) and, after a
//! fence or a commit, once that retired; it is ready its latency after its fetch (plain, fence,
//! flush and commit: at once; L1, L2, L3 hits: their hit cycles; a read from memory: read_ns +
//! burst_ns) and retires no earlier than its ready cycle nor the cycle after its fetch.
//!
//! Times are kept as positions: a fetch at cycle c in slot s is c * F + s, a retirement
//! c * R + s, so in-order issue with a width is `max(previous + 1, width * bound)`. The last
//! ROB instructions' retirements are kept as segments of consecutive positions (first
//! instruction, count, position): a run of n plain instructions is one segment and O(1)
//! work (`Core::gap`), and within ROB instructions of the last fence or commit the ROB's
//! room needs no look at all. A core's finish (the engine's `cycles`) is its last retirement.
//!
//! `-- check` compares the recurrence with the engine (one core, ideal memory: there the
//! engine is this model exactly) and with a step-by-step recurrence, over every kernel,
//! several sizes and machines. `-- bound 3000000` is the bench's run (hash-map kernel,
//! 16 cores) through floor + recurrences; `-- floor 3000000` the same loop without them.

use nvstack_mcsim::cache::Hierarchy;
use nvstack_mcsim::floor::functional;
use nvstack_mcsim::kernels::{Kernel, KernelConfig, KernelWorkload};
use nvstack_mcsim::{Config, Floor, Op, VecWorkload, Workload};
use std::time::Instant;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Instructions `first..first + count` retire at positions `pos..pos + count`.
#[derive(Clone, Copy, Debug)]
struct Seg {
    first: u64,
    count: u64,
    pos: u64,
}

/// The widths and latencies a core's recurrences need.
#[derive(Clone, Copy)]
struct Shape {
    rob: u64,
    /// log2 of the fetch and retire widths: a position's cycle is a shift, not a division.
    fetch_shift: u32,
    retire_shift: u32,
    /// Ready this long after fetch, by what served the access (L1, L2, L3, memory).
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
        // The closed form for plain runs relies on both (see `Core::gap`).
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
}

/// Segments a core keeps room for (a power of two: a ring indexed without bounds checks).
const RING: usize = 1024;

/// One core's ROB, by recurrences.
struct Core {
    s: Shape,
    /// Instructions fetched: the next one's number.
    next: u64,
    /// The earliest position of the next fetch (after the last fetch, and after the
    /// retirement of the last fence or commit).
    fetch_pos: u64,
    /// The earliest position of the next retirement.
    retire_pos: u64,
    /// Instructions numbered below this need no look at the ROB's room: ROB after the last
    /// fence or commit (which retired before anything after it was fetched, and so did the
    /// instructions before it), or the first ROB.
    free_until: u64,
    /// Retirements of at least the last ROB instructions, oldest first: segments `head` to
    /// `tail` (numbered over the run, at their number modulo the ring's power-of-two size).
    segs: Box<[Seg; RING]>,
    head: u64,
    tail: u64,
}

impl Core {
    fn new(s: Shape) -> Core {
        // Segments hold an instruction or more, and those before instruction next - ROB
        // leave before a run's own (two at most) are pushed.
        assert!(
            2 * s.rob + 4 <= RING as u64,
            "the ring holds two ROBs of segments"
        );
        let empty = Seg {
            first: 0,
            count: 0,
            pos: 0,
        };
        Core {
            s,
            next: 0,
            fetch_pos: 0,
            retire_pos: 0,
            free_until: s.rob,
            segs: Box::new([empty; RING]),
            head: 0,
            tail: 0,
        }
    }

    #[inline]
    fn seg(&self, n: u64) -> &Seg {
        &self.segs[n as usize % RING]
    }

    /// The cycle the last instruction retired (0 with none), where the engine finishes.
    fn cycles(&self) -> u64 {
        if self.next == 0 {
            0
        } else {
            (self.retire_pos - 1) >> self.s.retire_shift
        }
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

    /// An instruction ready `cycles` after its fetch; the cycle it retires.
    #[inline(always)]
    fn entry(&mut self, cycles: u64) -> u64 {
        let i = self.next;
        let fetch_pos = self.fetch_pos.max(self.room_pos(i));
        let fetched = fetch_pos >> self.s.fetch_shift;
        self.fetch_pos = fetch_pos + 1;
        let pos = (self.retire_pos).max((fetched + cycles.max(1)) << self.s.retire_shift);
        self.retire_pos = pos + 1;
        self.push(i, 1, pos);
        self.next += 1;
        pos >> self.s.retire_shift
    }

    /// A fence or a commit (done at once: the ideal memory): nothing after it is fetched
    /// before it retires.
    #[inline(always)]
    fn serial(&mut self) {
        let retired = self.entry(0);
        self.fetch_pos = self.fetch_pos.max(retired << self.s.fetch_shift);
        // Later instructions wait for no one before this one: only its segment stays.
        self.free_until = self.next - 1 + self.s.rob;
        self.head = self.tail - 1;
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
    fn gap(&mut self, n: u64) {
        if n == 0 {
            return;
        }
        let k = self.next;
        let first_pos = self.fetch_pos.max(self.room_pos(k));
        let fetched = first_pos >> self.s.fetch_shift;
        let pos = (self.retire_pos).max((fetched + 1) << self.s.retire_shift);
        self.push(k, n, pos);
        self.retire_pos = pos + n;
        self.next += n;
        let last = k + n - 1;
        let last_pos = (first_pos + n - 1).max(self.room_max(k + 1, last));
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

/// The same model one instruction at a time (a ring of the last ROB retirement cycles):
/// the check of `Core::gap`'s closed form.
struct Steps {
    s: Shape,
    next: u64,
    fetch_pos: u64,
    retire_pos: u64,
    ring: Vec<u64>,
}

impl Steps {
    fn new(s: Shape) -> Steps {
        Steps {
            s,
            next: 0,
            fetch_pos: 0,
            retire_pos: 0,
            ring: vec![0; s.rob as usize],
        }
    }

    fn entry(&mut self, cycles: u64) -> u64 {
        let i = self.next;
        let slot = (i % self.s.rob) as usize;
        let room = if i >= self.s.rob {
            self.ring[slot] << self.s.fetch_shift
        } else {
            0
        };
        let fetch_pos = self.fetch_pos.max(room);
        self.fetch_pos = fetch_pos + 1;
        let ready = (fetch_pos >> self.s.fetch_shift) + cycles.max(1);
        let pos = self.retire_pos.max(ready << self.s.retire_shift);
        self.retire_pos = pos + 1;
        self.ring[slot] = pos >> self.s.retire_shift;
        self.next += 1;
        pos >> self.s.retire_shift
    }

    fn cycles(&self) -> u64 {
        if self.next == 0 {
            0
        } else {
            (self.retire_pos - 1) >> self.s.retire_shift
        }
    }
}

/// A thread: its operations a batch at a time, its store count and its ROB.
struct Lane {
    core: usize,
    ops: Vec<Op>,
    at: usize,
    stores: u64,
    rob: Core,
    steps: Option<Steps>,
}

/// What a pass counted.
#[derive(Debug, Default, PartialEq, Eq)]
struct Pass {
    /// The floor's counts: operations, requests, accesses served per level.
    floor: Floor,
    /// The last core's finish (the engine's `cycles`), its instructions, and the same by
    /// steps (when asked).
    cycles: u64,
    instructions: u64,
    steps: Option<(u64, u64)>,
    /// Operations after which the recurrences' next fetch or retire position differed from
    /// the step-by-step one's.
    apart: u64,
}

impl Lane {
    #[inline]
    fn take(&mut self, work: &mut dyn Workload) -> Res<Option<Op>> {
        if self.at == self.ops.len() {
            self.at = 0;
            if !work.next_batch(self.core, &mut self.ops)? {
                return Ok(None);
            }
        }
        self.at += 1;
        Ok(Some(self.ops[self.at - 1]))
    }

    /// The floor's turn (`floor::functional`, and the gap's prefetch) and, if `timed`, the ROB's.
    #[inline]
    fn turn<const TIMED: bool, const STEPS: bool>(
        &mut self,
        op: Op,
        caches: &mut Hierarchy,
        shift: u32,
        p: &mut Pass,
    ) {
        let c = self.core;
        let served = functional(op, c, &mut self.stores, caches, shift, &mut p.floor);
        match op {
            Op::Load(_) | Op::Store(_) => {
                if let (true, Some(level)) = (TIMED, served) {
                    let cycles = self.rob.s.served_cycles[level as usize];
                    self.rob.entry(cycles);
                    if let Some(s) = self.steps.as_mut().filter(|_| STEPS) {
                        s.entry(cycles);
                    }
                }
            }
            Op::Flush(_) => {
                // Accepted at once: the ideal memory takes every write.
                if TIMED {
                    self.rob.entry(0);
                    if let Some(s) = self.steps.as_mut().filter(|_| STEPS) {
                        s.entry(0);
                    }
                }
            }
            Op::Gap(n) => {
                if let Some(Op::Load(a) | Op::Store(a)) = self.ops.get(self.at) {
                    caches.prefetch(c, a >> shift);
                }
                if TIMED {
                    self.rob.gap(u64::from(n));
                    if let Some(s) = self.steps.as_mut().filter(|_| STEPS) {
                        (0..n).for_each(|_| _ = s.entry(0));
                    }
                }
            }
            Op::Fence | Op::Commit { .. } => {
                if TIMED {
                    self.rob.serial();
                    if let Some(s) = self.steps.as_mut().filter(|_| STEPS) {
                        let retired = s.entry(0);
                        s.fetch_pos = s.fetch_pos.max(retired << s.s.fetch_shift);
                    }
                }
            }
            Op::Bind { .. } => {}
        }
        if let Some(s) = self.steps.as_ref().filter(|_| STEPS) {
            p.apart +=
                u64::from((s.fetch_pos, s.retire_pos) != (self.rob.fetch_pos, self.rob.retire_pos));
        }
    }
}

/// The floor's loop (threads take turns one operation at a time) with, if `timed`, each
/// core's ROB by recurrences, and, if `steps`, also step by step.
fn pass(cfg: &Config, work: &mut dyn Workload, timed: bool, steps: bool) -> Res<Pass> {
    assert_eq!(work.threads(), cfg.cores as usize, "a thread per core");
    let shape = Shape::new(cfg);
    let mut caches = Hierarchy::new(cfg);
    let shift = cfg.line_bytes.trailing_zeros();
    let mut lanes: Vec<Lane> = (0..work.threads())
        .map(|core| Lane {
            core,
            ops: Vec::new(),
            at: 0,
            stores: 0,
            rob: Core::new(shape),
            steps: steps.then(|| Steps::new(shape)),
        })
        .collect();
    let mut done: Vec<Lane> = Vec::new();
    let mut p = Pass::default();
    while !lanes.is_empty() {
        let mut i = 0;
        while i < lanes.len() {
            let Some(op) = lanes[i].take(work)? else {
                done.push(lanes.remove(i));
                continue;
            };
            p.floor.ops += 1;
            let lane = &mut lanes[i];
            match (timed, steps) {
                (true, true) => lane.turn::<true, true>(op, &mut caches, shift, &mut p),
                (true, false) => lane.turn::<true, false>(op, &mut caches, shift, &mut p),
                _ => lane.turn::<false, false>(op, &mut caches, shift, &mut p),
            }
            i += 1;
        }
    }
    p.floor.served = caches.hits;
    p.cycles = done.iter().map(|l| l.rob.cycles()).max().unwrap_or(0);
    p.instructions = done.iter().map(|l| l.rob.next).sum();
    if steps {
        let st = done.iter().filter_map(|l| l.steps.as_ref());
        let cycles = st.clone().map(Steps::cycles).max().unwrap_or(0);
        p.steps = Some((cycles, st.map(|s| s.next).sum()));
    }
    Ok(p)
}

/// (ROB entries, fetch width, retire width) of the machines checked: Table II's, and smaller
/// or wider ones.
const MACHINES: [(u32, u32, u32); 6] = [
    (256, 4, 2),
    (32, 4, 2),
    (16, 2, 2),
    (64, 8, 4),
    (6, 4, 2),
    (12, 4, 4),
];

/// One core with the ideal memory running `work()`: whether the engine's cycles,
/// instructions and served accesses equal the recurrences' and the steps', and the
/// recurrences' positions the steps' after every operation. Prints a line.
fn compare(machine: &Config, what: &str, work: &dyn Fn() -> Res<Box<dyn Workload>>) -> Res<bool> {
    let out = nvstack_mcsim::run(machine, &mut *work()?)?;
    let p = pass(machine, &mut *work()?, true, true)?;
    let r = &out.report;
    let same = r.cycles == p.cycles
        && r.instructions == p.instructions
        && p.steps == Some((p.cycles, p.instructions))
        && r.served == p.floor.served
        && p.apart == 0;
    println!(
        "{} rob {} F {} R {} {what}: engine cycles {} instructions {}; recurrence {} {}; steps {:?}; apart {}",
        if same { "same" } else { "DIFFERENT" },
        machine.rob_entries, machine.fetch_width, machine.retire_width,
        r.cycles, r.instructions, p.cycles, p.instructions, p.steps, p.apart
    );
    Ok(same)
}

/// A random stream of every kind of operation (runs of 0 to 3 ROBs of plain instructions,
/// accesses over a region a few times L1, flushes, fences, commits, binds).
fn random_ops(seed: u64, n: usize, rob: u32) -> Vec<Op> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..n)
        .map(|_| {
            let (kind, v) = (next() % 16, next());
            let addr = (v % (256 << 10)) & !7;
            match kind {
                0..=4 => Op::Gap((v % (3 * u64::from(rob) + 1)) as u32),
                5 => Op::Gap((v % 4) as u32),
                6..=9 => Op::Load(addr),
                10..=11 => Op::Store(addr),
                12 => Op::Flush(addr),
                13 => Op::Fence,
                14 => Op::Commit { addr, len: 4096 },
                _ => Op::Bind { addr, len: 4096 },
            }
        })
        .collect()
}

/// The engine against the recurrences on one core with the ideal memory, over every
/// kernel, gap settings, sizes up to `updates_max` updates, machines, and random streams.
pub fn check(updates_max: u64) -> Res<()> {
    // The matrix's settings of `speed`, and runs of plain instructions longer than the ROB.
    let settings: [(u32, u64, u64); 5] = [
        (20, 1, 8 << 20),
        (3, 4, 256 << 10),
        (60, 2, 1 << 20),
        (1, 1, 8 << 20),
        (700, 16, 8 << 20),
    ];
    let (mut runs, mut bad) = (0, 0);
    for (rob_entries, fetch_width, retire_width) in MACHINES {
        let machine = Config {
            cores: 1,
            ideal_memory: true,
            rob_entries,
            fetch_width,
            retire_width,
            ..Config::default()
        };
        for kernel in Kernel::ALL {
            for (gap_instructions, commit_every, region_bytes) in settings {
                for updates_per_thread in [1, 37, 1000, updates_max] {
                    let kc = KernelConfig {
                        kernel,
                        threads: 1,
                        updates_per_thread,
                        gap_instructions,
                        commit_every,
                        region_bytes,
                        ..KernelConfig::default()
                    };
                    let what = format!("{kernel:?} gap {gap_instructions} every {commit_every} region {region_bytes} updates {updates_per_thread}");
                    let work =
                        || -> Res<Box<dyn Workload>> { Ok(Box::new(KernelWorkload::new(&kc)?)) };
                    runs += 1;
                    bad += u32::from(!compare(&machine, &what, &work)?);
                }
            }
        }
        for seed in 1..=20 {
            let n = if seed <= 10 { 50 } else { 20_000 };
            let ops = random_ops(seed, n, rob_entries);
            let work =
                || -> Res<Box<dyn Workload>> { Ok(Box::new(VecWorkload::new(vec![ops.clone()]))) };
            runs += 1;
            bad += u32::from(!compare(
                &machine,
                &format!("random seed {seed} ops {n}"),
                &work,
            )?);
        }
    }
    println!("{runs} runs, {bad} different");
    if bad > 0 {
        return Err(format!("{bad} of {runs} runs differ").into());
    }
    Ok(())
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let what = args.get(1).map_or("bound", |s| s.as_str());
    let requests: u64 = args.get(2).map_or(Ok(3_000_000), |s| s.parse())?;
    if what == "check" {
        return check(requests);
    }
    let timed = match what {
        "bound" => true,
        "floor" => false,
        _ => return Err(format!("{what}: expected check, bound or floor").into()),
    };
    let machine = Config {
        ideal_memory: true,
        ..Config::default()
    };
    let mut work =
        KernelWorkload::new(&KernelConfig::hashmap_for_requests(machine.cores, requests))?;
    let start = Instant::now();
    let p = pass(&machine, &mut work, timed, false)?;
    let wall_s = start.elapsed().as_secs_f64();
    let n = p.floor.requests();
    println!(
        "{n} requests ({what}) in {wall_s:.2} s: {:.0} req/s, {:.1} ns a request; ops {} cycles {} instructions {} served {:?}",
        n as f64 / wall_s,
        wall_s * 1e9 / n as f64,
        p.floor.ops,
        p.cycles,
        p.instructions,
        p.floor.served
    );
    Ok(())
}
