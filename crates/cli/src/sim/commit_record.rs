//! `nvstack sim commit-record`: nvramdisk's writes on several lanes, recorded per thread by
//! pmem's recording region, written as a trace for the committing simulator. One thread per
//! core, each writing random blocks of its own LBA slice; the format and recovery before the
//! threads start are not recorded.

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
    /// nvramdisk's write protocol: fast or paper.
    #[arg(long, default_value = "fast")]
    protocol: String,
    /// Threads (lanes), one per simulated core.
    #[arg(long, default_value_t = 16)]
    threads: u32,
    /// 4 KiB writes per thread.
    #[arg(long, default_value_t = 200)]
    writes: u64,
    /// Instructions charged per region call (the code around it).
    #[arg(long, default_value_t = 20)]
    call_instructions: u32,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The trace file to write (replaced).
    #[arg(long)]
    output: PathBuf,
}

const BLOCK: u32 = 4096;
/// Blocks per thread's LBA slice.
const SLICE_BLOCKS: u64 = 1024;

pub fn run(a: RecordArgs) -> Result<i32> {
    let protocol = Protocol::parse(&a.protocol).map_err(|e| e.context("--protocol"))?;
    if !(1..=64).contains(&a.threads) || a.writes == 0 || a.writes > 1_000_000 {
        return Err(Error::bad(
            "--threads must be 1 to 64 and --writes 1 to 1000000",
        ));
    }
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
    write_trace(&a, bytes, logs)?;
    crate::say!(
        "recorded {} threads x {} writes ({}) into {}",
        a.threads,
        a.writes,
        protocol.name(),
        a.output.display()
    )?;
    Ok(0)
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
    let file = std::fs::File::create(&a.output)
        .map_err(|e| Error::env(format!("--output {}: {e}", a.output.display())))?;
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
