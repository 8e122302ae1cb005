//! The mcsim suite (issue 24, item 5): how fast the committing simulator runs. A request is a
//! read or a write arriving at the simulated memory controller; a row runs the default machine
//! (Table II, 16 simulated cores) on the hash-map kernel, committing after every update, on one
//! host core, until at least 10^7 requests (10^6 with --quick) have arrived, and reports
//! requests per second of wall time (its note adds requests per CPU-second of the running
//! thread, which a shared host does not inflate). Each mode is a row; `fine` does the most
//! controller work (credits, query reads) and is the one the target is checked on. Each mode's
//! run then runs again untimed, recording its controller's inputs, and `mcsim-MODE-controller`
//! times them replayed on the memory controller alone (`nvstack_mcsim::replay`, the same
//! controller run again): the way the peers run, so the like-for-like comparison with them.
//! Two rows bound the full run from below: `mcsim-ideal` times the same run with no memory
//! controller at all (`Config::ideal_memory`: what the cores, caches and events cost alone),
//! and `mcsim-floor` runs the same workload's functional work alone (generator and caches, no
//! timing): the part of a request's cost no engine can avoid.
//!
//! The peers are DRAMsim3 (github:umd-memsys/DRAMsim3) and DRAMSim2 (github:umd-memsys/
//! DRAMSim2, the simulator the paper extended), each in its own trace-driven mode, when
//! `NVSTACK_DRAMSIM3` names its `dramsim3main` and `NVSTACK_DRAMSIM2` its `DRAMSim`
//! (scripts/bench-mcsim.sh builds both from source on demand): the fine row's recording has every
//! request reaching our controller, the suite writes them as a trace (address, READ or WRITE,
//! arrival in the peer's DRAM cycles), and each peer replays the same requests on its PCM
//! configuration (`mcsim/dramsim3-pcm.ini`, `mcsim/dramsim2-pcm.ini`: DDR4 and DDR3 with Table
//! II's PCM read and write times). The fastest peer that served every request is the baseline
//! of our timed rows and of the other peer's (the throughput ratio is ours / its, per request):
//! a peer runs until the last arrival plus a drain, and again with longer drains if requests
//! remain while it still serves them (`mcsim/peers.rs`). Without a variable its peer is not run,
//! and the notes say it was not measured.

use super::measure::Timing;
use super::{BenchResult, Ctx, Row, Suite, Target};
use nvstack_core::error::Result;
use nvstack_mcsim::kernels::{KernelConfig, KernelWorkload};
use nvstack_mcsim::{Config, Input, Mode};
use peers::{Kind, PeerRun};
use std::path::PathBuf;
use std::time::Instant;

mod dramsim2;
mod dramsim3;
mod peers;

const SUITE: Suite = Suite::Mcsim;
const REQUESTS_MIN: u64 = 10_000_000;
const REQUESTS_MIN_QUICK: u64 = 1_000_000;
/// The target, requests per second on one core.
const TARGET_PER_S: f64 = 10e6;
pub(super) fn run(ctx: &mut Ctx) -> Result<()> {
    // The simulator maps no image: the page size of the place changes nothing, so it runs once.
    if ctx.place.huge {
        return Ok(());
    }
    // The crate's own tests run it tiny: they check rows, never a speed.
    let need = match (ctx.opts.quick_test, ctx.opts.quick) {
        (true, _) => 20_000,
        (false, true) => REQUESTS_MIN_QUICK,
        (false, false) => REQUESTS_MIN,
    };
    let peers: Vec<(Kind, PathBuf)> = Kind::ALL
        .into_iter()
        .filter_map(|k| std::env::var_os(k.env()).map(|p| (k, PathBuf::from(p))))
        .collect();
    let mut arrivals = Vec::new();
    for mode in [Mode::Fine, Mode::Global] {
        let bar = ctx.bar(&format!("mcsim {}", mode.name()));
        let machine = Config {
            mode,
            ..Config::default()
        };
        let (requests, wall_s, note) = run_ours(&machine, need)?;
        drop(bar);
        let row = Row::new(SUITE, &format!("mcsim-{}", mode.name()), "request", 64, 1)
            .method("simulated")
            .note(note);
        ctx.push(row.timed(&timing(requests, wall_s), 0));
        // The same run again, untimed, keeping its controller's inputs (the run is
        // deterministic: the same requests), for the controller row and the peers.
        let bar = ctx.bar(&format!("mcsim {} recording", mode.name()));
        let (out, inputs) = nvstack_mcsim::run_recording(&machine, &mut hashmap(&machine, need)?)?;
        drop(bar);
        let recorded = out.report.mc.reads + out.report.mc.writes;
        assert_eq!(recorded, requests, "a run records what it timed");
        ctx.push(controller_row(ctx, &machine, &inputs, requests)?);
        if mode == Mode::Fine && !peers.is_empty() {
            // The requests the peers replay: the fine run's reads and writes.
            arrivals = inputs.iter().filter_map(Input::arrival).collect();
        }
    }
    ctx.push(ideal_row(ctx, need)?);
    ctx.push(floor_row(ctx, need)?);
    let mut runs = Vec::new();
    for (kind, program) in &peers {
        let bar = ctx.bar(&format!("mcsim {}", kind.name()));
        let run = peers::run_peer(*kind, program, &arrivals, &Config::default())?;
        drop(bar);
        let row = Row::new(SUITE, kind.name(), "request", 64, 1)
            .method(format!("{} trace-driven", kind.title()))
            .note(run.note());
        ctx.push(row.timed(&timing(run.served, run.wall_s), 0));
        runs.push(run);
    }
    compare(ctx, &runs);
    Ok(())
}

/// The baseline of our timed rows, and of every other peer's row: the fastest peer that
/// served every request (the best peer measured). A peer that left requests unserved is
/// nobody's baseline: a ratio over a replay that did less work than ours would flatter us.
fn compare(ctx: &mut Ctx, runs: &[PeerRun]) {
    let best = best_peer(runs);
    for run in runs.iter().filter(|r| !r.all_served()) {
        ctx.notes.push(format!(
            "mcsim: no ratio to {}: it served {} of the {} requests (its row)",
            run.kind.title(),
            run.served,
            run.requests
        ));
    }
    let unset: Vec<String> = Kind::ALL
        .into_iter()
        .filter(|k| runs.iter().all(|r| r.kind != *k))
        .map(|k| {
            format!(
                "{} not measured: {} unset (scripts/bench-mcsim.sh)",
                k.title(),
                k.env()
            )
        })
        .collect();
    let mut clause = match best {
        Some(b) => format!(
            "baseline: {} replaying the fine run's requests, the fastest peer that served them all",
            b.kind.title()
        ),
        None if runs.is_empty() => String::new(),
        None => "not compared: no peer served every request".into(),
    };
    for u in unset {
        clause = if clause.is_empty() {
            u
        } else {
            format!("{clause}; {u}")
        };
    }
    let peer_row = |name: &str| Kind::ALL.iter().any(|k| k.name() == name);
    for r in ctx.results.iter_mut().filter(|r| r.suite == SUITE.name()) {
        let ours = matches!(
            r.name.as_str(),
            "mcsim-fine" | "mcsim-global" | "mcsim-fine-controller" | "mcsim-global-controller"
        );
        if ours {
            r.note = r.note.take().map(|n| format!("{n}; {clause}"));
        }
        match best {
            Some(b) if ours || (peer_row(&r.name) && r.name != b.kind.name()) => {
                r.baseline = Some(b.kind.name().to_string());
            }
            _ => {}
        }
    }
}

/// The fastest peer run that served every request.
fn best_peer(runs: &[PeerRun]) -> Option<&PeerRun> {
    runs.iter()
        .filter(|r| r.all_served())
        .max_by(|a, b| a.per_s().total_cmp(&b.per_s()))
}

/// The suite's workload: the hash-map kernel on `machine`'s cores, sized for `need` requests.
fn hashmap(machine: &Config, need: u64) -> Result<KernelWorkload> {
    KernelWorkload::new(&KernelConfig::hashmap_for_requests(machine.cores, need))
}

/// One timed run of ours, sized for `need` requests: the requests made, the wall time and a
/// note.
fn run_ours(machine: &Config, need: u64) -> Result<(u64, f64, String)> {
    let mut work = hashmap(machine, need)?;
    let cpu_start_ns = thread_cpu_ns();
    let start = Instant::now();
    let out = nvstack_mcsim::run(machine, &mut work)?;
    let wall_s = start.elapsed().as_secs_f64();
    let requests = out.report.mc.reads + out.report.mc.writes;
    let cpu = cpu_note(cpu_start_ns, requests);
    assert!(
        requests >= need,
        "the run is sized for {need} requests, made {requests}"
    );
    let note = format!(
        "{requests} requests ({} simulated cycles, IPC {:.2}) in {wall_s:.1} s on one core{cpu}; \
         median = p99 = wall time per request",
        out.report.cycles, out.report.ipc,
    );
    Ok((requests, wall_s, note))
}

/// The controller row: the run's inputs (its requests, commits and range bindings, at the
/// cycles the run gave them) replayed on the memory controller alone, as the peers replay the
/// requests: the like-for-like measure beside them. The replay is that run's controller (the
/// same counters, checked here; tests/replay.rs checks the event log too).
fn controller_row(
    ctx: &Ctx,
    machine: &Config,
    inputs: &[Input],
    requests: u64,
) -> Result<BenchResult> {
    let name = format!("mcsim-{}-controller", machine.mode.name());
    let bar = ctx.bar(&name);
    let cpu_start_ns = thread_cpu_ns();
    let start = Instant::now();
    let replayed = nvstack_mcsim::replay(machine, inputs)?;
    let wall_s = start.elapsed().as_secs_f64();
    drop(bar);
    let s = &replayed.stats;
    assert_eq!(
        s.reads + s.writes,
        requests,
        "the replay is the run's controller: the same requests"
    );
    let note = format!(
        "the mcsim-{} run's {requests} requests and {} commits replayed on the memory \
         controller alone (as the peers replay the fine run's requests; ours also keeps the \
         credits and sends {} query reads) in {wall_s:.2} s on one core{}; median = p99 = wall \
         time per request",
        machine.mode.name(),
        s.commits,
        s.credit_queries + s.commit_queries,
        cpu_note(cpu_start_ns, requests),
    );
    let row = Row::new(SUITE, &name, "request", 64, 1)
        .method("simulated, controller alone")
        .note(note);
    Ok(row.timed(&timing(requests, wall_s), 0))
}

/// The ideal row: the timed run with no memory controller (`Config::ideal_memory`: reads back
/// an unloaded read's time after they arrive, writes and commits done at once). What it costs
/// per request is what the cores, the caches and the event queue cost alone: a bound that no
/// controller, however cheap, takes a timed row below.
fn ideal_row(ctx: &Ctx, need: u64) -> Result<BenchResult> {
    let bar = ctx.bar("mcsim ideal");
    let machine = Config {
        ideal_memory: true,
        ..Config::default()
    };
    let (requests, wall_s, note) = run_ours(&machine, need)?;
    drop(bar);
    let row = Row::new(SUITE, "mcsim-ideal", "request", 64, 1)
        .method("simulated, no controller")
        .note(format!(
            "{note}; no memory controller (reads back {} + {} ns after they arrive, writes and \
             commits at once): the cores, caches and events alone, the bound of the timed rows",
            machine.read_ns, machine.burst_ns
        ));
    Ok(row.timed(&timing(requests, wall_s), 0))
}

/// The floor row: the same workload's functional work alone (the kernel generator and the
/// cache hierarchy deciding which accesses become requests), no timing. What it costs per
/// request is what any engine of this model pays before it keeps time.
fn floor_row(ctx: &Ctx, need: u64) -> Result<BenchResult> {
    let bar = ctx.bar("mcsim floor");
    let machine = Config::default();
    let mut work = hashmap(&machine, need)?;
    let cpu_start_ns = thread_cpu_ns();
    let start = Instant::now();
    let f = nvstack_mcsim::floor(&machine, &mut work)?;
    let wall_s = start.elapsed().as_secs_f64();
    let cpu = cpu_note(cpu_start_ns, f.requests());
    drop(bar);
    let note = format!(
        "{} requests ({} reads, {} writes) from {} operations in {wall_s:.1} s on one core{cpu}; \
         the functional work alone (kernel generator and caches, no timing): the floor of \
         the timed rows; median = p99 = wall time per request",
        f.requests(),
        f.reads,
        f.writes,
        f.ops
    );
    let row = Row::new(SUITE, "mcsim-floor", "request", 64, 1)
        .method("functional, untimed")
        .note(note);
    Ok(row.timed(&timing(f.requests(), wall_s), 0))
}

/// "; N requests per CPU-second (S s ...)" from the thread's CPU time since `cpu_start_ns`.
fn cpu_note(cpu_start_ns: Option<u64>, requests: u64) -> String {
    match (cpu_start_ns, thread_cpu_ns()) {
        (Some(a), Some(b)) if b > a => {
            let cpu_s = (b - a) as f64 / 1e9;
            format!(
                "; {:.0} requests per CPU-second ({cpu_s:.1} s of this thread's CPU time)",
                requests as f64 / cpu_s
            )
        }
        _ => "; CPU time not measured (no /proc/thread-self/schedstat)".into(),
    }
}

/// This thread's CPU time so far, in ns (the scheduler's own account: the first field of
/// /proc/thread-self/schedstat). On a shared host the wall time counts other programs' turns
/// on the core too; the CPU time is what the simulator itself used.
fn thread_cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

fn timing(requests: u64, wall_s: f64) -> Timing {
    let per_request_ns = wall_s * 1e9 / requests as f64;
    Timing {
        ops_per_sec: requests as f64 / wall_s,
        median_ns: per_request_ns,
        p99_ns: per_request_ns,
        ops: requests,
    }
}

pub(super) fn targets(rows: &[BenchResult]) -> Vec<Target> {
    let fine = rows
        .iter()
        .find(|r| r.suite == SUITE.name() && r.name == "mcsim-fine");
    fine.map(|r| Target {
        suite: SUITE.name(),
        page_bytes: r.page_bytes,
        what: "simulated memory requests per second on one core".into(),
        measured: r.ops_per_sec,
        bound: "at least",
        limit: TARGET_PER_S,
        met: r.ops_per_sec >= TARGET_PER_S,
    })
    .into_iter()
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer_run(kind: Kind, served: u64, wall_s: f64) -> PeerRun {
        PeerRun {
            kind,
            requests: 10,
            cycles: 0,
            drain_cycles: 0,
            runs: 1,
            served,
            epochs: Vec::new(),
            wall_s,
            cpu_s: None,
        }
    }

    #[test]
    fn the_baseline_is_the_fastest_peer_that_served_all() {
        let slow = peer_run(Kind::Dramsim3, 10, 2.0);
        let fast = peer_run(Kind::Dramsim2, 10, 1.0);
        let runs = [slow, fast];
        assert_eq!(best_peer(&runs).map(|r| r.kind), Some(Kind::Dramsim2));
        // Faster, but it left requests unserved: no baseline.
        let runs = [
            peer_run(Kind::Dramsim3, 10, 2.0),
            peer_run(Kind::Dramsim2, 9, 0.1),
        ];
        assert_eq!(best_peer(&runs).map(|r| r.kind), Some(Kind::Dramsim3));
        let runs = [peer_run(Kind::Dramsim2, 9, 0.1)];
        assert!(best_peer(&runs).is_none());
        assert!(best_peer(&[]).is_none());
    }
}
