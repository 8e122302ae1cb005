//! `nvstack bench`: the CLI front of nvstack_bench.

use crate::print_json;
use crate::progress::{Bars, Look};
use clap::Args;
use nvstack_bench::{self as bench, BenchOptions, Suite};
use nvstack_core::error::{Error, Result};
use std::path::PathBuf;

#[derive(Args)]
pub struct BenchArgs {
    /// Suite to run: peer, ordering, record, latency, allocation, multiblock, nvcache, flash, mcsim,
    /// or all (may be repeated). Without --suite: the peer suite, --quick.
    #[arg(long, value_name = "NAME")]
    suite: Vec<String>,
    /// Fewer ops and fewer points: each suite in under 2 minutes.
    #[arg(long)]
    quick: bool,
    /// Directory for the benchmark images (a tmpfs: emulated NVRAM).
    #[arg(long, default_value = "/dev/shm")]
    dir: PathBuf,
    /// Span random offsets are uniform over (at least 1 GiB).
    #[arg(long, value_parser = crate::size_arg, default_value = "1GiB")]
    size: u64,
    /// Timed 4 KiB operations per row (larger operations get proportionally fewer); default
    /// 200000, or 40000 with --quick.
    #[arg(long)]
    ops: Option<u64>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Emulated NVRAM latency for the peer suite's nvramdisk rows, as a multiple of the DRAM
    /// cost measured at start (1.0 to 3.0; a commit of k lines costs (m - 1) x (L + (k - 1) x S)
    /// more, L one persisted line, S each further line).
    #[arg(long, default_value = "1.0", value_parser = latency_arg)]
    latency: f64,
    /// Run each suite this many times and report per-row medians (1 to 9).
    #[arg(long, default_value_t = nvstack_bench::REPEAT_DEFAULT)]
    repeat: u32,
    /// Do not also run on a huge-page tmpfs (which needs root).
    #[arg(long)]
    no_huge: bool,
    /// Write one SVG figure per suite and page size into DIR.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// One JSON document on stdout (progress on stderr).
    #[arg(long)]
    json: bool,
}

fn latency_arg(s: &str) -> std::result::Result<f64, String> {
    nvstack_pmem::latency::parse_multiple(s).map_err(|e| e.to_string())
}

pub fn run(a: BenchArgs) -> Result<i32> {
    let (suites, quick) = if a.suite.is_empty() {
        (vec![Suite::Peer], true)
    } else {
        let mut v: Vec<Suite> = Vec::new();
        for name in &a.suite {
            for s in Suite::parse_list(name)? {
                if !v.contains(&s) {
                    v.push(s);
                }
            }
        }
        (v, a.quick)
    };
    let o = BenchOptions {
        suites,
        dir: a.dir,
        size_bytes: a.size,
        ops: a.ops,
        quick,
        seed: a.seed,
        quick_test: false,
        huge: !a.no_huge,
        latency_multiple: a.latency,
        repeat: a.repeat,
    };
    let r = bench::run(&o, &Bars::new(Look::Bench, true)).map_err(bench_flags)?;
    if let Some(dir) = &a.plot {
        let files = bench::write_plots(&r, dir)?;
        for f in files {
            eprintln!("wrote {}", f.display());
        }
    }
    if a.json {
        print_json(&r)?;
    } else {
        bench::print_table(&r);
    }
    Ok(0)
}

/// The bench library names its options' fields; on the command line they are flags.
fn bench_flags(e: Error) -> Error {
    let flags = |m: String| {
        m.replace("(dir)", "(--dir)")
            .replace("smaller span (size_bytes)", "smaller --size")
    };
    match e {
        Error::BadInput(m) => Error::BadInput(flags(m)),
        Error::Environment(m) => Error::Environment(flags(m)),
        other => other,
    }
}
