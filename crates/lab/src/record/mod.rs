//! Persistent code's traffic, recorded per thread by pmem's recording region, written as a
//! trace for the committing simulator (`nvstack sim commit-record`): nvramdisk's writes on
//! several lanes, one thread per core, each writing random blocks of its own LBA slice (the
//! format and recovery before the threads start are not recorded); the SQLite journal store,
//! one database per core (`sqlite.rs`).
//!
//! The trace's output is opened by the caller's `open`, called only once the recording is
//! done (a failed recording leaves no file); the finished writer is handed back, flushed.

pub mod sqlite;

use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::{Error, Result};
use nvstack_mcsim::{Op, TraceWriter};
use nvstack_nvramdisk::{format_region, FormatOptions, Geometry, NvramDisk, OpenOptions, Protocol};
use nvstack_pmem::record::{Recorded, RecordingRegion};
use nvstack_pmem::MmapRegion;
use rand::{Rng, SeedableRng};
use std::io::{BufWriter, Write};
use std::sync::Arc;

/// One nvramdisk recording.
#[derive(Clone, Copy, Debug)]
pub struct NvramdiskPlan {
    pub protocol: Protocol,
    /// Threads (lanes), one per simulated core.
    pub threads: u32,
    /// 4 KiB writes per thread.
    pub writes: u64,
    /// Instructions charged per region call (the code around it).
    pub call_instructions: u32,
    pub seed: u64,
}

const BLOCK_BYTES: u32 = 4096;
/// Blocks per thread's LBA slice.
const SLICE_BLOCKS: u64 = 1024;

/// Record `plan` and write its trace to the writer `open` gives.
pub fn record_nvramdisk<W: Write>(
    plan: &NvramdiskPlan,
    open: impl FnOnce() -> Result<W>,
) -> Result<BufWriter<W>> {
    assert!(plan.threads >= 1, "a recording has at least one thread");
    let blocks = SLICE_BLOCKS * u64::from(plan.threads);
    let bytes = Geometry::region_bytes_for(blocks, BLOCK_BYTES, plan.threads)?;
    let region = Arc::new(RecordingRegion::new(
        MmapRegion::anonymous(bytes)?,
        plan.call_instructions,
    ));
    let fo = FormatOptions {
        protocol: plan.protocol,
        lanes: plan.threads,
        block_bytes: BLOCK_BYTES,
        ..FormatOptions::default()
    };
    format_region(&*region, &fo)?;
    let disk = NvramDisk::open(region.clone(), OpenOptions::default())?;
    region.take();
    std::thread::scope(|s| {
        let disk = &disk;
        let handles: Vec<_> = (0..u64::from(plan.threads))
            .map(|t| {
                s.spawn(move || -> Result<()> {
                    let mut rng = rand::rngs::SmallRng::seed_from_u64(plan.seed ^ (t << 32));
                    let data = vec![t as u8; BLOCK_BYTES as usize];
                    for _ in 0..plan.writes {
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
    assert_eq!(
        logs.len(),
        plan.threads as usize,
        "one log per writer thread"
    );
    write_trace(open()?, bytes, logs)
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
fn write_trace<W: Write>(out: W, bytes: u64, logs: Vec<Vec<Recorded>>) -> Result<BufWriter<W>> {
    let mut w = TraceWriter::new(BufWriter::new(out), logs.len())?;
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
    w.finish()
}
