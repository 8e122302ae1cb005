//! Profiling aid: the bench suite's run (hash-map kernel, Table II, 16 cores) at a chosen size.
//! `cargo run --release -p nvstack-mcsim --example speed -- fine 1000000` prints requests per
//! second; `-- floor 1000000` runs the functional work alone (workload and caches, no timing);
//! `-- ideal 1000000` times the run with `Config::ideal_memory` (no controller);
//! `-- controller-fine 1000000` times the run's inputs replayed on the controller alone.
//! `-- digest 100000` runs every mode with the controller's event log on and prints a digest
//! of the log and of the final memory beside the report's figures: two builds that print the
//! same lines ran the same timeline (how a change meant to keep the model is checked).
//! `-- matrix 3000` does the same over 256 small machines (four kernels, 1 to 16 cores, four
//! gap, commit and region settings, four modes), N updates shared by the threads: corners the
//! bench's run does not reach (one core, short gaps, a small region).
//! `nvstack bench --suite mcsim` is the measurement of record.

use nvstack_mcsim::kernels::{Kernel, KernelConfig, KernelWorkload};
use nvstack_mcsim::{Config, Mode};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let what = args.get(1).map_or("fine", |s| s.as_str());
    let requests: u64 = args.get(2).map_or(Ok(1_000_000), |s| s.parse())?;
    if what == "digest" {
        return digest(requests);
    }
    if what == "matrix" {
        return matrix(requests);
    }
    if let Some(mode) = what.strip_prefix("controller-") {
        return controller(Mode::parse(mode)?, requests);
    }
    let functional = what == "floor";
    let ideal_memory = what == "ideal";
    let mode = if functional || ideal_memory {
        Mode::Fine
    } else {
        Mode::parse(what)?
    };
    let machine = Config {
        mode,
        ideal_memory,
        ..Config::default()
    };
    let mut work =
        KernelWorkload::new(&KernelConfig::hashmap_for_requests(machine.cores, requests))?;
    let start = Instant::now();
    if functional {
        let f = nvstack_mcsim::floor(&machine, &mut work)?;
        let wall_s = start.elapsed().as_secs_f64();
        let n = f.requests();
        println!(
            "{n} requests (floor: no timing) in {wall_s:.2} s: {:.0} req/s; served {:?}",
            n as f64 / wall_s,
            f.served
        );
        return Ok(());
    }
    let out = nvstack_mcsim::run(&machine, &mut work)?;
    let wall_s = start.elapsed().as_secs_f64();
    let r = &out.report;
    let n = r.mc.reads + r.mc.writes;
    println!(
        "{} requests in {wall_s:.2} s: {:.0} req/s; cycles {} ipc {:.4} syncs {} commit_cycles {:.2}",
        n,
        n as f64 / wall_s,
        r.cycles,
        r.ipc,
        r.mc.syncs,
        r.commit_cycles_mean
    );
    Ok(())
}

/// The run's inputs replayed on the controller alone (what the bench's controller rows time):
/// recorded untimed, then the replay timed, `REPEAT` times (default 1) for profiling.
fn controller(mode: Mode, requests: u64) -> Result<(), Box<dyn std::error::Error>> {
    let machine = Config {
        mode,
        ..Config::default()
    };
    let mut work =
        KernelWorkload::new(&KernelConfig::hashmap_for_requests(machine.cores, requests))?;
    let (out, inputs) = nvstack_mcsim::run_recording(&machine, &mut work)?;
    let repeat: u32 = std::env::var("REPEAT").map_or(Ok(1), |r| r.parse())?;
    let start = Instant::now();
    let mut served = 0;
    for _ in 0..repeat {
        let r = nvstack_mcsim::replay(&machine, &inputs)?;
        assert_eq!(r.stats.syncs, out.report.mc.syncs, "the run's controller");
        served += r.stats.reads + r.stats.writes;
    }
    let wall_s = start.elapsed().as_secs_f64();
    println!(
        "{served} requests ({} inputs a replay, {repeat} replays) on the controller alone in \
         {wall_s:.2} s: {:.0} req/s",
        inputs.len(),
        served as f64 / wall_s
    );
    Ok(())
}

/// Every mode with the event log on: the report's figures and digests of the log and the
/// final memory (sorted by line), one line a mode.
fn digest(requests: u64) -> Result<(), Box<dyn std::error::Error>> {
    use std::hash::{Hash, Hasher};
    for mode in [Mode::Fine, Mode::Global, Mode::Adr, Mode::Eadr] {
        let machine = Config {
            mode,
            log_events: true,
            ..Config::default()
        };
        let mut work =
            KernelWorkload::new(&KernelConfig::hashmap_for_requests(machine.cores, requests))?;
        let out = nvstack_mcsim::run(&machine, &mut work)?;
        let log = log_digest(&out.log);
        let mut memory: Vec<(u64, u64)> = out.memory.into_iter().collect();
        memory.sort_unstable();
        let mut mem = rustc_hash::FxHasher::default();
        memory.hash(&mut mem);
        let r = &out.report;
        println!(
            "{mode:?}: requests {} cycles {} instructions {} syncs {} commit_cycles {:.4} served {:?} log {} entries {:016x} memory {} lines {:016x}",
            r.mc.reads + r.mc.writes,
            r.cycles,
            r.instructions,
            r.mc.syncs,
            r.commit_cycles_mean,
            r.served,
            out.log.len(),
            log,
            memory.len(),
            mem.finish()
        );
    }
    Ok(())
}

/// A digest of the controller's event log.
fn log_digest(log: &[nvstack_mcsim::Log]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = rustc_hash::FxHasher::default();
    for entry in log {
        format!("{entry:?}").hash(&mut h);
    }
    h.finish()
}

/// `digest`'s check over 256 small machines: a line a run.
fn matrix(updates: u64) -> Result<(), Box<dyn std::error::Error>> {
    let settings: [(u32, u64, u64); 4] = [
        (20, 1, 8 << 20),
        (3, 4, 256 << 10),
        (60, 2, 1 << 20),
        (1, 1, 8 << 20),
    ];
    for kernel in Kernel::ALL {
        for cores in [1u32, 2, 8, 16] {
            for (gap, every, region) in settings {
                for mode in [Mode::Fine, Mode::Global, Mode::Adr, Mode::Eadr] {
                    let machine = Config {
                        mode,
                        cores,
                        log_events: true,
                        ..Config::default()
                    };
                    let kc = KernelConfig {
                        kernel,
                        threads: cores,
                        updates_per_thread: updates / u64::from(cores),
                        gap_instructions: gap,
                        commit_every: every,
                        region_bytes: region,
                        ..KernelConfig::default()
                    };
                    let out = nvstack_mcsim::run(&machine, &mut KernelWorkload::new(&kc)?)?;
                    let r = &out.report;
                    println!(
                        "{kernel:?} {cores} {gap} {every} {region} {mode:?}: cycles {} instructions {} syncs {} commit_cycles {:.4} served {:?} log {} {:016x}",
                        r.cycles, r.instructions, r.mc.syncs, r.commit_cycles_mean, r.served, out.log.len(), log_digest(&out.log)
                    );
                }
            }
        }
    }
    Ok(())
}
