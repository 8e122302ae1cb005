//! The mcsim suite (issue 24, item 5): how fast the committing simulator runs. A request is a
//! read or a write arriving at the simulated memory controller; a row runs the default machine
//! (Table II, 16 simulated cores) on the hash-map kernel, committing after every update, on one
//! host core, until at least 10^7 requests (10^6 with --quick) have arrived, and reports
//! requests per second of wall time. Each mode is a row; `fine` does the most controller work
//! (credits, query reads) and is the one the target is checked on.
//!
//! DRAMsim3 and DRAMSim2, the peers, are not built here, so no ratio to them is reported.

use super::measure::Timing;
use super::{BenchResult, Ctx, Row, Suite, Target};
use nvstack_core::error::Result;
use nvstack_mcsim::kernels::{Kernel, KernelConfig, KernelWorkload};
use nvstack_mcsim::{Config, Mode};
use std::time::Instant;

const SUITE: Suite = Suite::Mcsim;
const REQUESTS_MIN: u64 = 10_000_000;
const REQUESTS_MIN_QUICK: u64 = 1_000_000;
/// The target, requests per second on one core.
const TARGET_PER_S: f64 = 10e6;
/// Requests one hash-map update makes on the default machine (measured: 6.7); the run is
/// sized from it and then checked to have made enough.
const REQUESTS_PER_UPDATE: f64 = 6.0;

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
    for mode in [Mode::Fine, Mode::Global] {
        let machine = Config {
            mode,
            ..Config::default()
        };
        let updates = (need as f64 / REQUESTS_PER_UPDATE / f64::from(machine.cores)).ceil() as u64;
        let kc = KernelConfig {
            kernel: Kernel::Hashmap,
            threads: machine.cores,
            updates_per_thread: updates,
            ..KernelConfig::default()
        };
        let bar = ctx.bar(&format!("mcsim {}", mode.name()));
        let mut work = KernelWorkload::new(&kc)?;
        let start = Instant::now();
        let out = nvstack_mcsim::run(&machine, &mut work)?;
        let wall_s = start.elapsed().as_secs_f64();
        drop(bar);
        let requests = out.report.mc.reads + out.report.mc.writes;
        assert!(
            requests >= need,
            "the run is sized for {need} requests, made {requests}"
        );
        let per_request_ns = wall_s * 1e9 / requests as f64;
        let t = Timing {
            ops_per_sec: requests as f64 / wall_s,
            median_ns: per_request_ns,
            p99_ns: per_request_ns,
            ops: requests,
        };
        let note = format!(
            "{requests} requests ({} simulated cycles, IPC {:.2}) in {wall_s:.1} s on one core; median = p99 = \
             wall time per request; DRAMsim3/DRAMSim2 not measured here",
            out.report.cycles, out.report.ipc
        );
        let row = Row::new(SUITE, &format!("mcsim-{}", mode.name()), "request", 64, 1)
            .method("simulated")
            .note(note);
        ctx.push(row.timed(&t, 0));
    }
    Ok(())
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
