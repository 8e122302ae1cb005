//! The flash suite (issue 21, item 5): page operations of a block trace replayed per second
//! on one core, by nvstack_flash's replay in virtual time (no bytes kept), on the seed's
//! device (64 MiB small-block NAND, 64 log blocks), for the log-block FTL (the target:
//! at least 5 million page operations a second) and the page-mapped FTL.
//!
//! The workload is generated before timing, with the run's seed: 30 % reads uniform over the
//! device; writes half in sequential runs of 64 pages from random starts (file data), 40 %
//! over a hot set of 1,024 pages (file-system metadata, seed 004's hot sectors), 10 % uniform
//! (what costs a log-block FTL a full merge each). Every logical page is written once, untimed,
//! first. The ops are timed in batches of 1,024 (one op is too short for the clock); median
//! and p99 are of the batches' time per op. A page operation is one host page read or write;
//! the NAND operations they cause (merge copies and erases included) are in each row's note.
//! MQSim, the best-known SSD simulator, was not built or measured here.

use super::{BenchResult, Ctx, Row, Suite, Target, Timing};
use nvstack_core::error::Result;
use nvstack_flash::ftl::{FtlConfig, FtlKind};
use nvstack_flash::geometry::{Geometry, Timing as ChipTiming, LOG_BLOCKS_DEFAULT};
use nvstack_flash::replay::Replay;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::time::Instant;

const SUITE: Suite = Suite::Flash;
const BATCH: usize = 1024;
/// Replayed page operations per timed row for each op of the other suites' rows (they time
/// 4 KiB device ops, a thousand times longer than one replayed page op).
const OPS_PER_BENCH_OP: u64 = 25;
/// The target, page operations per second.
pub const TARGET_OPS_PER_SEC: f64 = 5e6;

pub(super) fn run(ctx: &mut Ctx) -> Result<()> {
    if ctx.place.huge {
        // Replay touches no image: one run on the first place says everything.
        return Ok(());
    }
    let ops = (ctx.base_ops() * OPS_PER_BENCH_OP) as usize;
    let geo = Geometry::SMALL_BLOCK;
    let work = workload(ctx.opts.seed, ops, geo.logical_pages() as u32);
    for kind in [FtlKind::LogBlock, FtlKind::Page] {
        let row = replay_row(ctx, kind, geo, &work)?;
        ctx.push(row);
    }
    Ok(())
}

/// (write, logical page) for each op.
fn workload(seed: u64, ops: usize, pages: u32) -> Vec<(bool, u32)> {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0xf1a5);
    let mut cursor = 0u32;
    (0..ops)
        .map(|i| {
            let r: u32 = rng.gen_range(0..100);
            if r < 30 {
                return (false, rng.gen_range(0..pages));
            }
            let lpn = match r {
                30..=64 => {
                    if i % 64 == 0 {
                        cursor = rng.gen_range(0..pages);
                    }
                    cursor = (cursor + 1) % pages;
                    cursor
                }
                65..=92 => rng.gen_range(0..1024.min(pages)),
                _ => rng.gen_range(0..pages),
            };
            (true, lpn)
        })
        .collect()
}

fn replay_row(
    ctx: &Ctx,
    kind: FtlKind,
    geo: Geometry,
    work: &[(bool, u32)],
) -> Result<BenchResult> {
    let cfg = FtlConfig {
        kind,
        log_blocks: LOG_BLOCKS_DEFAULT,
    };
    let page = u64::from(geo.page_data_bytes);
    let mut r = Replay::new(geo, cfg, ChipTiming::SMALL_BLOCK)?;
    for lpn in 0..geo.logical_pages() {
        r.request(true, lpn * page, page)?;
    }
    let before = r.counters().clone();
    let bar = ctx.bar(&format!("flash {}", kind.name()));
    bar.set_length(work.len() as u64);
    let mut per_op = Vec::with_capacity(work.len() / BATCH + 1);
    let start = Instant::now();
    for (i, batch) in work.chunks(BATCH).enumerate() {
        let t = Instant::now();
        for &(write, lpn) in batch {
            r.request(write, u64::from(lpn) * page, page)?;
        }
        per_op.push(t.elapsed().as_nanos() as f64 / batch.len() as f64);
        bar.set_position(((i + 1) * BATCH).min(work.len()) as u64);
    }
    let wall_s = start.elapsed().as_secs_f64();
    let c = r.counters();
    let nand =
        (c.reads - before.reads) + (c.programs - before.programs) + (c.erases - before.erases);
    per_op.sort_by(f64::total_cmp);
    let timing = Timing {
        ops_per_sec: work.len() as f64 / wall_s.max(1e-9),
        median_ns: per_op[per_op.len() / 2],
        p99_ns: per_op[(per_op.len() * 99).div_ceil(100).max(1) - 1],
        ops: work.len() as u64,
    };
    let note = format!(
        "replay in virtual time of {} host page ops (30 % reads; writes sequential, hot and \
         uniform), one core; they caused {} NAND page reads, programs and block erases ({:.1} \
         million a second); MQSim not built or measured here",
        work.len(),
        nand,
        nand as f64 / wall_s.max(1e-9) / 1e6
    );
    Ok(
        Row::new(SUITE, &format!("flash-{}", kind.name()), "replay", page, 1)
            .method("nvstack_flash::replay (no bytes kept)")
            .note(note)
            .timed(&timing, 0),
    )
}

/// The target: the log-block FTL replays at least 5 million page ops a second.
pub(super) fn targets(rows: &[BenchResult]) -> Vec<Target> {
    rows.iter()
        .filter(|r| r.suite == SUITE.name() && r.name == "flash-log-block")
        .map(|r| Target {
            bound: "at least",
            met: r.ops_per_sec >= TARGET_OPS_PER_SEC,
            ..Target::at_most(
                SUITE,
                r.page_bytes,
                "log-block FTL page ops replayed per second",
                r.ops_per_sec,
                TARGET_OPS_PER_SEC,
            )
        })
        .collect()
}
