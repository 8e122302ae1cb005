//! Profiling aid: the bench suite's run (hash-map kernel, Table II, 16 cores) at a chosen size.
//! `cargo run --release -p nvstack-mcsim --example speed -- fine 1000000` prints requests per
//! second; `-- floor 1000000` runs the functional work alone (workload and caches, no timing).
//! `nvstack bench --suite mcsim` is the measurement of record.

use nvstack_mcsim::kernels::{Kernel, KernelConfig, KernelWorkload};
use nvstack_mcsim::{Config, Mode};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let what = args.get(1).map_or("fine", |s| s.as_str());
    let requests: u64 = args.get(2).map_or(Ok(1_000_000), |s| s.parse())?;
    let functional = what == "floor";
    let mode = if functional {
        Mode::Fine
    } else {
        Mode::parse(what)?
    };
    let machine = Config {
        mode,
        ..Config::default()
    };
    let kc = KernelConfig {
        kernel: Kernel::Hashmap,
        threads: machine.cores,
        updates_per_thread: requests.div_ceil(6 * u64::from(machine.cores)),
        ..KernelConfig::default()
    };
    let mut work = KernelWorkload::new(&kc)?;
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
