//! `nvstack sim commit-record`: persistent code's traffic recorded as a trace for the
//! committing simulator (`nvstack_lab::record`). `--workload nvramdisk`: nvramdisk's writes on
//! several lanes, one thread per core; `--workload sqlite`: the SQLite journal store, one
//! database per core. This file parses the flags, opens the output and says what it did.

use nvstack_core::error::{Error, Result};
use nvstack_lab::record;
use nvstack_nvramdisk::Protocol;
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct RecordArgs {
    /// What to record: nvramdisk (block writes on lanes) or sqlite (the journal store).
    #[arg(long, default_value = "nvramdisk")]
    workload: String,
    /// nvramdisk's write protocol: fast or paper (nvramdisk workload).
    #[arg(long, default_value = "fast")]
    protocol: String,
    /// Threads (lanes, or SQLite databases), one per simulated core.
    #[arg(long, default_value_t = 16)]
    pub threads: u32,
    /// Per thread: 4 KiB writes (nvramdisk) or single-row transactions (sqlite).
    #[arg(long, default_value_t = 200)]
    pub writes: u64,
    /// Instructions charged per region call (the code around it).
    #[arg(long, default_value_t = 20)]
    call_instructions: u32,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The nvstack SQLite extension (sqlite workload; default $NVSTACK_SQLITE_EXT, else
    /// libnvstack_sqlite.so beside this program).
    #[arg(long)]
    pub sqlite_ext: Option<PathBuf>,
    /// The trace file to write.
    #[arg(long)]
    pub output: PathBuf,
    /// Replace --output if it exists.
    #[arg(long)]
    force: bool,
}

/// The output file, created; an existing one only with --force.
pub fn create_output(a: &RecordArgs) -> Result<std::fs::File> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true);
    if a.force {
        o.create(true).truncate(true);
    } else {
        o.create_new(true);
    }
    o.open(&a.output).map_err(|e| {
        let why = if e.kind() == std::io::ErrorKind::AlreadyExists {
            "it exists (add --force to replace it)".to_string()
        } else {
            e.to_string()
        };
        Error::bad(format!("--output {}: {why}", a.output.display()))
    })
}

pub fn run(a: RecordArgs) -> Result<i32> {
    let protocol = Protocol::parse(&a.protocol).map_err(|e| e.context("--protocol"))?;
    if !(1..=64).contains(&a.threads) || a.writes == 0 || a.writes > 1_000_000 {
        return Err(Error::bad(
            "--threads must be 1 to 64 and --writes 1 to 1000000",
        ));
    }
    if !["nvramdisk", "sqlite"].contains(&a.workload.as_str()) {
        return Err(Error::bad(format!(
            "--workload {:?}: expected nvramdisk or sqlite",
            a.workload
        )));
    }
    if a.output.exists() && !a.force {
        return Err(Error::bad(format!(
            "--output {}: it exists (add --force to replace it)",
            a.output.display()
        )));
    }
    let open = || create_output(&a);
    let mut out = if a.workload == "sqlite" {
        record::sqlite::record_sqlite(&extension(&a)?, a.threads, a.writes, open)?
    } else {
        let plan = record::NvramdiskPlan {
            protocol,
            threads: a.threads,
            writes: a.writes,
            call_instructions: a.call_instructions,
            seed: a.seed,
        };
        record::record_nvramdisk(&plan, open)?
    };
    out.flush()
        .map_err(|e| Error::env(format!("--output {}: {e}", a.output.display())))?;
    crate::say!(
        "recorded {} threads x {} {} into {}",
        a.threads,
        a.writes,
        if a.workload == "sqlite" {
            "SQLite transactions".to_string()
        } else {
            format!("writes ({})", protocol.name())
        },
        a.output.display()
    )?;
    Ok(0)
}

/// The extension: --sqlite-ext, else $NVSTACK_SQLITE_EXT, else libnvstack_sqlite.so beside
/// this program (where `cargo build --release` puts both).
fn extension(a: &RecordArgs) -> Result<PathBuf> {
    let path = match (&a.sqlite_ext, std::env::var_os("NVSTACK_SQLITE_EXT")) {
        (Some(p), _) => p.clone(),
        (None, Some(p)) => PathBuf::from(p),
        (None, None) => std::env::current_exe()
            .map_err(|e| Error::env(format!("where is this program: {e}")))?
            .with_file_name("libnvstack_sqlite.so"),
    };
    if !path.is_file() {
        return Err(Error::bad(format!(
            "--sqlite-ext {}: no such file (build it with cargo build --release -p \
             nvstack-sqlite, or set NVSTACK_SQLITE_EXT)",
            path.display()
        )));
    }
    Ok(path)
}
