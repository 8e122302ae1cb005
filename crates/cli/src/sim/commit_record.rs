//! `nvstack sim commit-record`: persistent code's traffic, recorded per thread by pmem's
//! recording region, written as a trace for the committing simulator. `--workload nvramdisk`:
//! nvramdisk's writes on several lanes, one thread per core, each writing random blocks of
//! its own LBA slice (the format and recovery before the threads start are not recorded).
//! `--workload sqlite`: the SQLite journal store, one database per core (`commit_sqlite`).

use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::{Error, Result};
use nvstack_mcsim::{Op, TraceWriter};
use nvstack_nvramdisk::{format_region, FormatOptions, Geometry, NvramDisk, OpenOptions, Protocol};
use nvstack_pmem::record::{Recorded, RecordingRegion};
use nvstack_pmem::MmapRegion;
use rand::{Rng, SeedableRng};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

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

const BLOCK: u32 = 4096;
/// Blocks per thread's LBA slice.
const SLICE_BLOCKS: u64 = 1024;

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
    if a.workload == "sqlite" {
        crate::sim::commit_sqlite::record(&a)?;
    } else {
        record_nvramdisk(&a, protocol)?;
    }
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

fn record_nvramdisk(a: &RecordArgs, protocol: Protocol) -> Result<()> {
    let blocks = SLICE_BLOCKS * u64::from(a.threads);
    let bytes = Geometry::region_bytes_for(blocks, BLOCK, a.threads)?;
    let region = Arc::new(RecordingRegion::new(
        MmapRegion::anonymous(bytes)?,
        a.call_instructions,
    ));
    let fo = FormatOptions {
        protocol,
        lanes: a.threads,
        block_bytes: BLOCK,
        ..FormatOptions::default()
    };
    format_region(&*region, &fo)?;
    let disk = NvramDisk::open(region.clone(), OpenOptions::default())?;
    region.take();
    std::thread::scope(|s| {
        let disk = &disk;
        let handles: Vec<_> = (0..u64::from(a.threads))
            .map(|t| {
                s.spawn(move || -> Result<()> {
                    let mut rng = rand::rngs::SmallRng::seed_from_u64(a.seed ^ (t << 32));
                    let data = vec![t as u8; BLOCK as usize];
                    for _ in 0..a.writes {
                        disk.write(t * SLICE_BLOCKS + rng.gen_range(0..SLICE_BLOCKS), &data)?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| {
            h.join()
                .map_err(|_| Error::env("a writer thread panicked"))?
        })
    })?;
    let logs = region.take();
    write_trace(a, bytes, logs)
}

fn op(r: Recorded) -> Op {
    match r {
        Recorded::Gap(n) => Op::Gap(n),
        Recorded::Load(a) => Op::Load(a),
        Recorded::Store(a) => Op::Store(a),
        Recorded::Flush(a) => Op::Flush(a),
        Recorded::Fence => Op::Fence,
        Recorded::Commit { off, len } => Op::Commit { addr: off, len },
        Recorded::Bind { off, len } => Op::Bind { addr: off, len },
    }
}

/// The region is one allocation; the OS spreads it over the 7 bindable sub-queues in equal
/// slices (thread 0 binds them first), so commits of different areas lock different
/// sub-queues. Threads are interleaved in chunks so the reader's buffers stay small.
fn write_trace(a: &RecordArgs, bytes: u64, logs: Vec<Vec<Recorded>>) -> Result<()> {
    let file = create_output(a)?;
    let mut w = TraceWriter::new(std::io::BufWriter::new(file), logs.len())?;
    let slice = bytes.div_ceil(7).next_multiple_of(64);
    for i in 0..7 {
        let addr = i * slice;
        if addr < bytes {
            w.op(
                0,
                Op::Bind {
                    addr,
                    len: slice.min(bytes - addr),
                },
            )?;
        }
    }
    let mut at = vec![0usize; logs.len()];
    while at.iter().zip(&logs).any(|(i, l)| *i < l.len()) {
        for (t, log) in logs.iter().enumerate() {
            let end = (at[t] + 256).min(log.len());
            for &r in &log[at[t]..end] {
                w.op(t, op(r))?;
            }
            at[t] = end;
        }
    }
    let mut out = w.finish()?;
    out.flush()
        .map_err(|e| Error::env(format!("--output {}: {e}", a.output.display())))
}
