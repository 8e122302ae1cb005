//! The allocation suite (seed 000 section 7.7, Fig. 16): writes of 4 KiB to 1 MiB at random
//! aligned offsets through nvramdisk (fast protocol, default ordering), with shadow pages from
//! the static pre-allocated pool (`static-pool`, the baseline) or from an on-demand persistent
//! bitmap allocator whose bits are set and persisted for every page a write takes and cleared
//! and persisted for every page it frees (`bitmap-allocator`, nvramdisk/bitmap.rs). Writes of
//! more than 64 blocks go as consecutive atomic chunks of 64.

use super::devices::{bench_disk, payload, BenchDisk};
use super::measure::{random_indices, run_threads};
use super::place::create_region;
use super::{Ctx, Row, Suite};
use nvstack_core::error::Result;
use nvstack_nvramdisk::bitmap::BitmapAllocator;
use nvstack_nvramdisk::{write_chunked, OpenOptions, Protocol};
use nvstack_pmem::latency::LatencyInjection;
use nvstack_pmem::Region;
use std::sync::Arc;

const SUITE: Suite = Suite::Allocation;
const SIZES: [u64; 5] = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20];
const SIZES_QUICK: [u64; 3] = [4 << 10, 64 << 10, 1 << 20];

pub(super) fn run(ctx: &mut Ctx) -> Result<()> {
    let buf = payload(ctx.opts.seed, *SIZES.last().unwrap() as usize);
    let d = bench_disk(ctx, Protocol::Fast, None, LatencyInjection::default())?;
    rows(
        ctx,
        &d,
        "static-pool",
        "static pre-allocated shadow pool",
        None,
        &buf,
    )?;
    // The same device reopened with the bitmap allocator (set up from its free pages).
    let file = ctx.image("bitmap");
    let pages = d.disk.geometry().pages;
    let bitmap: Arc<dyn Region> = create_region(
        file.path(),
        BitmapAllocator::region_bytes(pages).next_multiple_of(4096),
    )?;
    let d = d.reopen_with(OpenOptions {
        page_bitmap: Some(bitmap),
        ..Default::default()
    })?;
    rows(
        ctx,
        &d,
        "bitmap-allocator",
        "persistent bitmap: bits set + nt + sfence per write, cleared + nt + sfence per free",
        Some("static-pool"),
        &buf,
    )?;
    Ok(())
}

fn rows(
    ctx: &mut Ctx,
    d: &BenchDisk,
    name: &str,
    how: &str,
    baseline: Option<&str>,
    buf: &[u8],
) -> Result<()> {
    let sizes: &[u64] = if ctx.opts.quick { &SIZES_QUICK } else { &SIZES };
    let b = d.disk.geometry().block_bytes as u64;
    for &size in sizes {
        let n = size / b;
        let ops = ctx.ops(size);
        let warm = ctx.warmup(ops);
        let starts = random_indices(ctx.opts.seed, 0x700 ^ size, ops + warm, d.span_blocks / n);
        let data = &buf[..size as usize];
        let pb = ctx.bar(&format!("{name} {}K", size >> 10));
        let t = run_threads(&pb, 1, warm, ops, |i| {
            write_chunked(&d.disk, starts[i] * n, data)
        })?;
        let mut row = Row::new(SUITE, name, "write", size, 1)
            .protocol(d.protocol)
            .ordering(d.ordering)
            .method(format!("{} + {how}", d.methods))
            .x("write_bytes", size as f64);
        if let Some(base) = baseline {
            row = row.baseline(base);
        }
        ctx.push(row.timed(&t, d.page_bytes));
    }
    Ok(())
}
