//! The record-size suite (seed 000 Fig. 10): one atomic write of 4 KiB to 256 KiB at a random
//! aligned offset, by nvramdisk with its ordering guarantee (`nvramdisk-fast`) and without it
//! (`nvramdisk-fast-async`: the same code on a region whose flushes and fences do nothing,
//! never durable), against one non-temporal copy + fence of the same size (`floor-nt`, the
//! baseline) and a plain cached copy (`memcpy`, the ramdisk stand-in, not durable).
//!
//! Each record size runs on a freshly formatted image filled in 64-block writes, so that a
//! row measures its own write size and not the fragmentation the previous row left: a
//! single-block write gives its block a page from anywhere, so after smaller writes the
//! shadow pages of an n-block write are scattered, and n scattered 4 KiB non-temporal copies
//! take 1.6 to 2 times one copy of the same bytes on 4 KiB pages (1.1 to 1.4 times on 2 MiB
//! pages; measured). On a fresh image the pages a write frees are adjacent, and so are the
//! shadow pages of the next write of that size.

use super::devices::{bench_disk, bench_disk_with, payload, raw_region, BenchDisk};
use super::measure::{random_indices, run_threads};
use super::{find, BenchResult, Ctx, Row, RowKey, Suite, Target, BENCH_BLOCK_BYTES};
use nvstack_core::error::Result;
use nvstack_nvramdisk::Protocol;
use nvstack_pmem::latency::LatencyInjection;
use nvstack_pmem::unordered::Unordered;
use nvstack_pmem::Region;

const SUITE: Suite = Suite::Record;
const B: u64 = BENCH_BLOCK_BYTES as u64;
const SIZES: [u64; 7] = [
    4 << 10,
    8 << 10,
    16 << 10,
    32 << 10,
    64 << 10,
    128 << 10,
    256 << 10,
];
const SIZES_QUICK: [u64; 4] = [4 << 10, 16 << 10, 64 << 10, 256 << 10];

fn sizes(ctx: &Ctx) -> &'static [u64] {
    if ctx.opts.quick {
        &SIZES_QUICK
    } else {
        &SIZES
    }
}

pub(super) fn run(ctx: &mut Ctx) -> Result<()> {
    let raw = raw_region(ctx, 0)?;
    let r = &*raw.region;
    let buf = payload(ctx.opts.seed, *SIZES.last().unwrap() as usize);
    for &size in sizes(ctx) {
        let ops = ctx.ops(size);
        let warm = ctx.warmup(ops);
        let slots = raw.span / size;
        let offs = random_indices(ctx.opts.seed, 0x300 ^ size, ops + warm, slots);
        let data = &buf[..size as usize];
        let pb = ctx.bar(&format!("floor-nt {}K", size >> 10));
        let t = run_threads(&pb, 1, warm, ops, |i| {
            r.write_nt(offs[i] * size, data);
            r.fence();
            Ok(())
        })?;
        let row = Row::new(SUITE, "floor-nt", "write", size, 1)
            .method("nt copy + sfence")
            .x("record_bytes", size as f64)
            .timed(&t, raw.page_bytes);
        ctx.push(row);
        let pb = ctx.bar(&format!("memcpy {}K", size >> 10));
        let t = run_threads(&pb, 1, warm, ops, |i| {
            r.write(offs[i] * size, data);
            Ok(())
        })?;
        let row = Row::new(SUITE, "memcpy", "write", size, 1)
            .method("cached copy, not durable (ramdisk)")
            .x("record_bytes", size as f64)
            .baseline("floor-nt")
            .timed(&t, raw.page_bytes);
        ctx.push(row);
    }
    drop(raw);
    for &size in sizes(ctx) {
        let d = bench_disk(ctx, Protocol::Fast, None, LatencyInjection::default())?;
        disk_row(ctx, &d, "nvramdisk-fast", &buf, size)?;
        drop(d);
        let d = bench_disk_with(
            ctx,
            Protocol::Fast,
            None,
            LatencyInjection::default(),
            |m| {
                std::sync::Arc::new(Unordered(
                    std::sync::Arc::try_unwrap(m)
                        .unwrap_or_else(|_| unreachable!("a fresh region has one owner")),
                ))
            },
        )?;
        disk_row(ctx, &d, "nvramdisk-fast-async", &buf, size)?;
    }
    Ok(())
}

fn disk_row<R: Region>(
    ctx: &mut Ctx,
    d: &BenchDisk<R>,
    name: &str,
    buf: &[u8],
    size: u64,
) -> Result<()> {
    let unordered = name.ends_with("async");
    let n = size / B;
    let ops = ctx.ops(size);
    let warm = ctx.warmup(ops);
    let starts = random_indices(ctx.opts.seed, 0x310 ^ size, ops + warm, d.span_blocks / n);
    let data = &buf[..size as usize];
    let pb = ctx.bar(&format!("{name} {}K", size >> 10));
    let before = d.disk.stats();
    let t = run_threads(&pb, 1, warm, ops, |i| {
        nvstack_core::blockdev::BlockDevice::write(&d.disk, starts[i] * n, data)
    })?;
    // The device counts the fences its protocol asks for; the unordered region turns
    // them into nothing, so none is issued.
    let fences = if unordered {
        0.0
    } else {
        d.fences_since(&before)
    };
    let method = if unordered {
        "same stores, no flush, no fence: not durable".to_string()
    } else {
        d.methods.clone()
    };
    let row = Row::new(SUITE, name, "write", size, 1)
        .protocol(d.protocol)
        .ordering(if unordered { "none" } else { d.ordering })
        .method(method)
        .x("record_bytes", size as f64)
        .baseline("floor-nt")
        .fences(fences)
        .timed(&t, d.page_bytes);
    ctx.push(row);
    Ok(())
}

/// 256 KiB atomic write: at most 1.15 x the non-temporal copy of the same size.
pub(super) fn targets(rows: &[BenchResult]) -> Vec<Target> {
    let size = 256 << 10;
    let pages = super::page_sizes(rows);
    let mut out = Vec::new();
    for page in pages {
        let x = Some(size as f64);
        let get = |name: &str| {
            find(
                rows,
                &RowKey {
                    suite: SUITE,
                    op: "write",
                    block_bytes: size,
                    threads: 1,
                    page_bytes: page,
                    x,
                },
                name,
            )
        };
        out.extend(Target::time_at_most(
            SUITE,
            page,
            "256 KiB atomic write median / nt copy + fence",
            (get("nvramdisk-fast"), get("floor-nt")),
            1.15,
        ));
    }
    out
}
