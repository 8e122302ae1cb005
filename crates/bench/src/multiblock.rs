//! The multi-block suite: one atomic write of 2 to 64 contiguous blocks at a random aligned
//! LBA (`nvramdisk-fast-atomic`, `nvramdisk-paper-atomic`), against as many single-block
//! writes to the same blocks, each atomic alone (`nvramdisk-fast-singles`), and against one
//! non-temporal copy of the same bytes, a fence, one commit word and a second fence
//! (`floor-copy-2fence`, the baseline: the least an all-or-nothing commit can cost).
//!
//! Each block count runs on a freshly formatted image filled in 64-block writes (see the
//! record suite for why: a row measures its own write size, not the page scatter the previous
//! row's writes left behind).

use super::devices::{bench_disk, payload, raw_region, store_word, COMMIT_AREA_BYTES};
use super::measure::{random_indices, run_threads};
use super::{find, BenchResult, Ctx, Row, RowKey, Suite, Target, BENCH_BLOCK_BYTES};
use nvstack_core::error::Result;
use nvstack_nvramdisk::{Protocol, ATOMIC_BLOCKS_MAX};
use nvstack_pmem::latency::LatencyInjection;
use nvstack_pmem::{ordering, Region};

const SUITE: Suite = Suite::Multiblock;
const B: u64 = BENCH_BLOCK_BYTES as u64;
const BLOCKS: [u64; 6] = [2, 4, 8, 16, 32, 64];
const BLOCKS_QUICK: [u64; 3] = [2, 16, 64];

fn counts(ctx: &Ctx) -> &'static [u64] {
    if ctx.opts.quick {
        &BLOCKS_QUICK
    } else {
        &BLOCKS
    }
}

pub(super) fn run(ctx: &mut Ctx) -> Result<()> {
    let buf = payload(ctx.opts.seed, ATOMIC_BLOCKS_MAX * B as usize);
    floor_rows(ctx, &buf)?;
    for protocol in [Protocol::Fast, Protocol::Paper] {
        for &n in counts(ctx) {
            atomic_rows(ctx, protocol, n, &buf)?;
        }
    }
    Ok(())
}

/// floor-copy-2fence for every block count, on a raw region dropped before the disks are made.
fn floor_rows(ctx: &mut Ctx, buf: &[u8]) -> Result<()> {
    let raw = raw_region(ctx, 0)?;
    let r = &*raw.region;
    let word = ordering::policy_by_name(ordering::DEFAULT_POLICY)?.map;
    for &n in counts(ctx) {
        let size = n * B;
        let ops = ctx.ops(size);
        let warm = ctx.warmup(ops);
        let offs = random_indices(ctx.opts.seed, 0x400 ^ n, ops + warm, raw.span / size);
        let words = random_indices(ctx.opts.seed, 0x410 ^ n, ops + warm, COMMIT_AREA_BYTES / 8);
        let data = &buf[..size as usize];
        let pb = ctx.bar(&format!("floor-copy-2fence x{n}"));
        let t = run_threads(&pb, 1, warm, ops, |i| {
            r.write_nt(offs[i] * size, data);
            r.fence();
            store_word(r, word, raw.span + words[i] * 8, i as u64);
            r.fence();
            Ok(())
        })?;
        let row = Row::new(SUITE, "floor-copy-2fence", "write", size, 1)
            .method(format!("nt copy + sfence + {} 8 B + sfence", word.name()))
            .x("blocks", n as f64)
            .timed(&t, raw.page_bytes);
        ctx.push(row);
    }
    drop(raw);
    Ok(())
}

/// One `n`-block atomic write on a fresh disk of `protocol`; with the fast protocol, also
/// the same blocks as `n` single-block writes on that disk.
fn atomic_rows(ctx: &mut Ctx, protocol: Protocol, n: u64, buf: &[u8]) -> Result<()> {
    let d = bench_disk(ctx, protocol, None, LatencyInjection::default())?;
    let size = n * B;
    let ops = ctx.ops(size);
    let warm = ctx.warmup(ops);
    let starts = random_indices(ctx.opts.seed, 0x420 ^ n, ops + warm, d.span_blocks / n);
    let data = &buf[..size as usize];
    let lbas = [0u64; ATOMIC_BLOCKS_MAX];
    let name = format!("nvramdisk-{}-atomic", d.protocol);
    let pb = ctx.bar(&format!("{name} x{n}"));
    let before = d.disk.stats();
    let t = run_threads(&pb, 1, warm, ops, |i| {
        let mut l = lbas;
        for (k, x) in l[..n as usize].iter_mut().enumerate() {
            *x = starts[i] * n + k as u64;
        }
        d.disk.write_atomic(&l[..n as usize], data)
    })?;
    let fences = d.fences_since(&before);
    let row = Row::new(SUITE, &name, "write", size, 1)
        .protocol(d.protocol)
        .ordering(d.ordering)
        .method(d.methods.clone())
        .x("blocks", n as f64)
        .baseline("floor-copy-2fence")
        .fences(fences)
        .timed(&t, d.page_bytes);
    ctx.push(row);
    if protocol != Protocol::Fast {
        return Ok(());
    }
    let pb = ctx.bar(&format!("nvramdisk-fast-singles x{n}"));
    let before = d.disk.stats();
    let t = run_threads(&pb, 1, warm, ops, |i| {
        for k in 0..n {
            let off = (k * B) as usize;
            d.disk
                .write_atomic(&[starts[i] * n + k], &data[off..off + B as usize])?;
        }
        Ok(())
    })?;
    // fences_since counts per device write: one op here is n of them.
    let fences = d.fences_since(&before) * n as f64;
    let row = Row::new(SUITE, "nvramdisk-fast-singles", "write", size, 1)
        .protocol(d.protocol)
        .ordering(d.ordering)
        .method(format!("{n} single-block writes"))
        .x("blocks", n as f64)
        .baseline("floor-copy-2fence")
        .fences(fences)
        .timed(&t, d.page_bytes);
    ctx.push(row);
    Ok(())
}

/// 16-block atomic write: at most 1.2 x a 64 KiB copy with two fences.
pub(super) fn targets(rows: &[BenchResult]) -> Vec<Target> {
    let pages = super::page_sizes(rows);
    let mut out = Vec::new();
    for page in pages {
        let get = |name: &str| {
            find(
                rows,
                &RowKey {
                    suite: SUITE,
                    op: "write",
                    block_bytes: 16 * B,
                    threads: 1,
                    page_bytes: page,
                    x: Some(16.0),
                },
                name,
            )
        };
        out.extend(Target::time_at_most(
            SUITE,
            page,
            "16-block atomic write median / 64 KiB copy with two fences",
            (get("nvramdisk-fast-atomic"), get("floor-copy-2fence")),
            1.2,
        ));
    }
    out
}
