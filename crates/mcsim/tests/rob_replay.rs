//! The engine's cores are closed-form ROBs (`rob::Rob`) whose deferred entries (a read whose
//! slot the controller has not placed, a flush waiting for room, a commit) are resolved when
//! the controller says. This replays each core's program as the engine ran it with the real
//! controller (`sim::run_stepping`: what served each access, the cycle of each shared access,
//! the ready cycle of each deferred entry, each commit's arrival) on a fresh `Rob`, resolving
//! the deferred entries as late as the Rob allows (when it asks), as early as possible, and at
//! random points between: it must give the same fetch cycle for every shared access (L3,
//! controller, bind) and for every private access whose time the engine needed, the same
//! commit arrivals, finish cycle and instructions. So the engine's answers do not depend on
//! when the controller's answers reached a core, and the times it recorded are the ones its
//! cores ran on. The Rob itself is checked against a reference that steps one instruction at
//! a time (`rob/tests.rs`); before the engine ran on it, this test replayed the cycle-stepped
//! engine's runs on it exactly (commit 18ead09).

use nvstack_mcsim::cache::Served;
use nvstack_mcsim::kernels::{Kernel, KernelConfig, KernelWorkload};
use nvstack_mcsim::rob::{Id, Rob};
use nvstack_mcsim::sim::{run_stepping, CoreSteps, Step, UNTIMED};
use nvstack_mcsim::{Config, Mode, Op, VecWorkload, Workload};
use std::collections::VecDeque;

/// When deferred entries are resolved.
#[derive(Clone, Copy, Debug)]
enum When {
    /// Only when the Rob cannot answer without them.
    Late,
    /// Right after they are pushed.
    Early,
    /// Now and then, in any order (xorshift seed).
    Random(u64),
}

/// What the replays checked.
#[derive(Debug, Default)]
struct Tally {
    runs: u64,
    cores: u64,
    shared: u64,
    private: u64,
    deferred: u64,
    commits: u64,
    instructions: u64,
}

/// A deferred entry or commit not resolved yet: its id, ready cycle and, for a commit, its
/// arrival.
type Open = (Id, u64, Option<u64>);

/// Resolve what the Rob waits on (checking a commit's arrival); false if it waits on nothing.
fn resolve_asked(rob: &mut Rob, open: &mut VecDeque<Open>) -> Result<bool, String> {
    let Some(id) = rob.waiting_on() else {
        return Ok(false);
    };
    let at = open
        .iter()
        .position(|o| o.0 == id)
        .ok_or("waits on an id given")?;
    let (_, ready, arrival) = open.remove(at).expect("found");
    if arrival.is_some() && rob.commit_arrival() != arrival {
        return Err(format!(
            "commit arrival {:?}, engine {arrival:?}",
            rob.commit_arrival()
        ));
    }
    rob.resolve(id, ready);
    Ok(true)
}

/// The Rob's fetch cycle for the next instruction, resolving as asked; it must be `want`.
fn expect_fetch(rob: &mut Rob, open: &mut VecDeque<Open>, want: u64) -> Result<(), String> {
    loop {
        if let Some(f) = rob.fetch_cycle() {
            return (f == want)
                .then_some(())
                .ok_or(format!("fetch cycle {f}, engine {want}"));
        }
        if !resolve_asked(rob, open)? {
            return Err("no fetch cycle and nothing to resolve".into());
        }
    }
}

fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Replay one core's steps on a Rob, resolving `when`.
fn replay(cfg: &Config, core: &CoreSteps, when: When, t: &mut Tally) -> Result<(), String> {
    let mut rob = Rob::new(cfg);
    rob.log_arrivals();
    let hit = rob.served_cycles();
    let at_arrival = cfg.ideal_memory || matches!(cfg.mode, Mode::Adr | Mode::Eadr);
    let mut open: VecDeque<Open> = VecDeque::new();
    let mut arrivals = Vec::new();
    let mut x = match when {
        When::Random(seed) => seed | 1,
        _ => 1,
    };
    for (k, step) in core.steps.iter().enumerate() {
        let at = |e: String| format!("step {k} {step:?}: {e}");
        match *step {
            Step::Gap(n) => rob.gap(n.into()),
            Step::Access { served, fetch, .. } if served == Served::L1 || served == Served::L2 => {
                // Private: checked too when the engine needed its time and the Rob knows it
                // without resolving anything.
                if let (true, Some(f)) = (fetch != UNTIMED, rob.fetch_cycle()) {
                    t.private += 1;
                    (f == fetch)
                        .then_some(())
                        .ok_or(at(format!("private fetch {f}")))?;
                }
                rob.entry(hit[served as usize]);
            }
            Step::Access {
                fetch,
                ready,
                served,
            } => {
                expect_fetch(&mut rob, &mut open, fetch).map_err(at)?;
                t.shared += 1;
                if served == Served::L3 {
                    rob.entry(hit[2]);
                } else {
                    open.push_back((rob.entry_deferred(), ready, None));
                    t.deferred += 1;
                }
            }
            Step::Flush { fetch, ready } => {
                expect_fetch(&mut rob, &mut open, fetch).map_err(at)?;
                t.shared += 1;
                match ready {
                    None => rob.entry(0),
                    Some(r) => {
                        open.push_back((rob.entry_deferred(), r, None));
                        t.deferred += 1;
                    }
                }
            }
            Step::Fence => rob.fence(),
            Step::Commit { arrival, done } => {
                let id = rob.commit();
                arrivals.push(arrival);
                if !at_arrival {
                    open.push_back((id, done, Some(arrival)));
                }
            }
            Step::Bind { fetch } => {
                expect_fetch(&mut rob, &mut open, fetch).map_err(at)?;
                t.shared += 1;
            }
        }
        match when {
            When::Late => {}
            When::Early => {
                while let Some((id, ready, _)) = open.pop_front() {
                    rob.resolve(id, ready);
                }
            }
            When::Random(_) => {
                while !open.is_empty() && next(&mut x).is_multiple_of(3) {
                    let i = next(&mut x) as usize % open.len();
                    let (id, ready, _) = open.remove(i).expect("in range");
                    rob.resolve(id, ready);
                }
            }
        }
    }
    while resolve_asked(&mut rob, &mut open)? {}
    let (cycles, n) = (rob.cycles(), rob.instructions());
    if cycles != Some(core.finished_at) || n != core.instructions {
        return Err(format!(
            "finish {cycles:?} instructions {n}, engine {} {}",
            core.finished_at, core.instructions
        ));
    }
    if rob.arrivals() != arrivals {
        return Err("commit arrivals differ".into());
    }
    t.commits += arrivals.len() as u64;
    t.instructions += n;
    Ok(())
}

/// Run `work` on `cfg` through the engine, then replay every core three ways.
fn check(cfg: &Config, what: &str, work: &mut dyn Workload, t: &mut Tally) {
    let (out, cores) = run_stepping(cfg, work).expect("the engine runs");
    assert_eq!(cores.len(), cfg.cores as usize, "a record per core");
    let finish = cores.iter().map(|c| c.finished_at).max().unwrap_or(0);
    assert_eq!(finish, out.report.cycles, "{what}: the engine's cycles");
    t.runs += 1;
    for (c, core) in cores.iter().enumerate() {
        for when in [When::Late, When::Early, When::Random(c as u64 * 7 + 3)] {
            if let Err(e) = replay(cfg, core, when, t) {
                panic!("{what}: core {c}, resolved {when:?}: {e}");
            }
        }
        t.cores += 1;
    }
}

/// A random stream of every kind of operation (plain runs up to three ROBs, accesses over a
/// region a few times L2, flushes, fences, commits, binds).
fn random_ops(seed: u64, n: usize, rob: u32) -> Vec<Op> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            let (kind, v) = (next(&mut x) % 16, next(&mut x));
            let addr = (v % (1 << 20)) & !7;
            match kind {
                0..=3 => Op::Gap((v % (3 * u64::from(rob) + 1)) as u32),
                4..=5 => Op::Gap((v % 4) as u32),
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

/// Every mode with the controller (and the ideal memory), 1 and 16 cores, every kernel and
/// random streams.
#[test]
fn rob_replays_the_engine_exactly() {
    let mut t = Tally::default();
    let machines = Mode::ALL
        .map(|m| (m, false))
        .into_iter()
        .chain([(Mode::Fine, true)]);
    for (mode, ideal_memory) in machines {
        for cores in [1u32, 16] {
            let cfg = Config {
                mode,
                cores,
                ideal_memory,
                ..Config::default()
            };
            let updates = if cores == 1 { 4000 } else { 300 };
            for kernel in Kernel::ALL {
                for (gap_instructions, commit_every) in [(20, 1), (3, 4)] {
                    let kc = KernelConfig {
                        kernel,
                        threads: cores,
                        updates_per_thread: updates,
                        gap_instructions,
                        commit_every,
                        region_bytes: 1 << 20,
                        ..KernelConfig::default()
                    };
                    let mut work = KernelWorkload::new(&kc).expect("a kernel");
                    let what = format!("{mode:?} ideal {ideal_memory} cores {cores} {kernel:?} gap {gap_instructions}");
                    check(&cfg, &what, &mut work, &mut t);
                }
            }
            for seed in 1..=3 {
                let ops = (0..cores)
                    .map(|c| random_ops(seed * 100 + u64::from(c), 3000, cfg.rob_entries))
                    .collect();
                let what =
                    format!("{mode:?} ideal {ideal_memory} cores {cores} random seed {seed}");
                check(&cfg, &what, &mut VecWorkload::new(ops), &mut t);
            }
        }
    }
    eprintln!("replayed: {t:?}");
    assert!(
        t.shared > 10_000 && t.deferred > 1_000 && t.commits > 1_000,
        "{t:?}"
    );
}
