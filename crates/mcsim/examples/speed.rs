//! Requests per second of the engine on one host core, without the program around it:
//! `cargo run --release -p nvstack-mcsim --example speed -- fine|global|adr|eadr UPDATES`
//! (hash-map kernel, Table II, 16 cores, a commit every update; prints requests, CPU-side
//! wall seconds and requests per second). `nvstack bench --suite mcsim` is the measurement
//! the docs cite; this is the quick loop for work on the engine.

use nvstack_mcsim::kernels::{KernelConfig, KernelWorkload};
use nvstack_mcsim::{Config, Mode};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let mode = match args.get(1).map(String::as_str) {
        Some("global") => Mode::Global,
        Some("adr") => Mode::Adr,
        Some("eadr") => Mode::Eadr,
        Some("fine") | None => Mode::Fine,
        Some(m) => return Err(format!("mode {m:?}: expected fine, global, adr or eadr").into()),
    };
    let updates: u64 = match args.get(2) {
        Some(s) => s.parse().map_err(|e| format!("updates {s:?}: {e}"))?,
        None => 10_000,
    };
    let machine = Config {
        mode,
        ..Config::default()
    };
    let kc = KernelConfig {
        threads: machine.cores,
        updates_per_thread: updates,
        ..KernelConfig::default()
    };
    let mut work = KernelWorkload::new(&kc)?;
    let start = Instant::now();
    let out = nvstack_mcsim::run(&machine, &mut work)?;
    let wall_s = start.elapsed().as_secs_f64();
    let requests = out.report.mc.reads + out.report.mc.writes;
    println!(
        "{} requests in {wall_s:.2} s: {:.0} req/s (cycles {}, IPC {:.4})",
        requests,
        requests as f64 / wall_s,
        out.report.cycles,
        out.report.ipc
    );
    Ok(())
}
