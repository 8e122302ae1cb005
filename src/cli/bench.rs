//! `nvstack bench`: the CLI front of nvstack::bench.

use crate::print_json;
use clap::Args;
use nvstack::bench::{self, BenchOptions};
use nvstack::error::Result;
use std::path::PathBuf;

#[derive(Args)]
pub struct BenchArgs {
    /// Directory for the benchmark images (a tmpfs: emulated NVRAM).
    #[arg(long, default_value = "/dev/shm")]
    dir: PathBuf,
    /// Device size; random LBAs are uniform over all of it (at least 1 GiB).
    #[arg(long, value_parser = crate::size_arg, default_value = "1GiB")]
    size: u64,
    /// Timed operations per row.
    #[arg(long, default_value_t = 200_000)]
    ops: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Emulated NVRAM latency for the nvramdisk rows, as a multiple of the DRAM store latency
    /// measured at start (1.0 to 3.0; each persisted line costs (m - 1) x L more).
    #[arg(long, default_value = "1.0", value_parser = latency_arg)]
    latency: f64,
    #[arg(long)]
    json: bool,
}

fn latency_arg(s: &str) -> std::result::Result<f64, String> {
    nvstack::pmem::latency::parse_multiple(s).map_err(|e| e.to_string())
}

pub fn run(a: BenchArgs) -> Result<i32> {
    let o = BenchOptions {
        dir: a.dir,
        size_bytes: a.size,
        ops: a.ops,
        seed: a.seed,
        progress: true,
        quick_test: false,
        latency_multiple: a.latency,
    };
    let r = bench::run(&o)?;
    if a.json {
        print_json(&r)?;
    } else {
        bench::print_table(&r);
    }
    Ok(0)
}
