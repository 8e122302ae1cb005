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
//! The recurrences are the library's `nvstack_mcsim::rob::Rob` (positions, segments of
//! retirements, O(1) work per operation and per run of plain instructions); here every
//! ready time is known at fetch, so it takes its fast path throughout. A core's finish (the
//! engine's `cycles`) is its last retirement.
//!
//! `-- check` compares the recurrence with the engine (one core, ideal memory: there the
//! engine is this model exactly) and with a step-by-step recurrence, over every kernel,
//! several sizes and machines. `-- bound 3000000` is the bench's run (hash-map kernel,
//! 16 cores) through floor + recurrences; `-- floor 3000000` the same loop without them.

use nvstack_mcsim::cache::Hierarchy;
use nvstack_mcsim::floor::functional;
use nvstack_mcsim::kernels::{Kernel, KernelConfig, KernelWorkload};
use nvstack_mcsim::rob::Rob;
use nvstack_mcsim::{Config, Floor, Op, VecWorkload, Workload};
use std::time::Instant;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The widths the step-by-step check needs (log2 of the fetch and retire widths).
#[derive(Clone, Copy)]
struct Shape {
    rob: u64,
    fetch_shift: u32,
    retire_shift: u32,
}

impl Shape {
    fn new(cfg: &Config) -> Shape {
        Shape {
            rob: u64::from(cfg.rob_entries),
            fetch_shift: cfg.fetch_width.trailing_zeros(),
            retire_shift: cfg.retire_width.trailing_zeros(),
        }
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
    rob: Rob,
    served_cycles: [u64; 4],
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
                    let cycles = self.served_cycles[level as usize];
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
                    if let Op::Fence = op {
                        self.rob.fence();
                    } else {
                        // Done at its arrival (the ideal memory): the ROB resolves it alone.
                        self.rob.commit();
                    }
                    if let Some(s) = self.steps.as_mut().filter(|_| STEPS) {
                        let retired = s.entry(0);
                        s.fetch_pos = s.fetch_pos.max(retired << s.s.fetch_shift);
                    }
                }
            }
            Op::Bind { .. } => {}
        }
        if let Some(s) = self.steps.as_ref().filter(|_| STEPS) {
            p.apart += u64::from((s.fetch_pos, s.retire_pos) != self.rob.positions());
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
            rob: Rob::new(cfg),
            served_cycles: Rob::new(cfg).served_cycles(),
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
    p.cycles = (done.iter_mut())
        .map(|l| l.rob.cycles().expect("nothing deferred"))
        .max()
        .unwrap_or(0);
    p.instructions = done.iter().map(|l| l.rob.instructions()).sum();
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
