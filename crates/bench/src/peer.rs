//! The peer suite: 4 KiB random writes and reads, 1 and 2 threads, nvramdisk (both protocols,
//! default ordering) against PMDK's libpmemblk on a pool of the same span on the same file
//! system, and against the raw floors:
//! - `floor-nt`: a 4 KiB non-temporal copy and one fence: the least any durable 4 KiB write
//!   can cost;
//! - `floor-2fence`: that copy, a fence, one 8-byte commit word persisted with the method the
//!   fast protocol's map uses (a random word of a separate 8 MiB area), a second fence: the
//!   floor of any copy-then-commit-word protocol;
//! - `floor-paper`: that copy, a fence, then six 8-byte words each persisted with its own
//!   fence (VPN, L1, L2 in a journal line; the map word; the two resets): the least any
//!   implementation of the paper's Table 2, step for step, can cost;
//! - `raw-read`: a 4 KiB copy out of the region;
//! - `raw-read-lookup`: one 8-byte load from a table of 8 bytes per block (a block map of the
//!   span's size), then the copy of the page that word names: the least a read through any
//!   block map costs when the map is not in the cache.

use super::devices::{bench_disk, payload, raw_region, store_word, RawRegion, COMMIT_AREA_BYTES};
use super::measure::{random_indices, run_threads};
use super::place::mapped_page_bytes;
use super::{find, BenchResult, Ctx, Row, RowKey, Suite, Target, BENCH_BLOCK_BYTES};
use crate::pmemblk::{persist_method_description, PmemBlkLib, PmemBlkPool};
use nvstack_core::error::{Error, Result};
use nvstack_nvramdisk::Protocol;
use nvstack_pmem::latency::LatencyInjection;
use nvstack_pmem::ordering::{Method, OrderingPolicy};
use nvstack_pmem::{ordering, Region};

const SUITE: Suite = Suite::Peer;
const THREADS: [usize; 2] = [1, 2];
const B: u64 = BENCH_BLOCK_BYTES as u64;

/// libpmemblk, loaded.
pub(super) struct Peer {
    lib: PmemBlkLib,
    pub persist_method: String,
}

/// Load libpmemblk (before any thread exists: it may set PMEM_IS_PMEM_FORCE=1), or say why not.
pub(super) fn load_peer(notes: &mut Vec<String>) -> Option<Peer> {
    match PmemBlkLib::load() {
        Ok(lib) => Some(Peer {
            lib,
            persist_method: persist_method_description().replace('\n', "; "),
        }),
        Err(e) => {
            notes.push(format!(
                "libpmemblk: not loaded ({e}): the peer rows are skipped, not faked"
            ));
            None
        }
    }
}

pub(super) fn run(ctx: &mut Ctx, peer: Option<&Peer>) -> Result<()> {
    floors(ctx, peer.is_some())?;
    if let Some(p) = peer {
        libpmemblk(ctx, p)?;
    }
    let write_base = if peer.is_some() {
        "libpmemblk"
    } else {
        "floor-2fence"
    };
    let latency = LatencyInjection::new(ctx.opts.latency_multiple, ctx.dram);
    for protocol in [Protocol::Fast, Protocol::Paper] {
        let d = bench_disk(ctx, protocol, None, latency)?;
        let name = format!("nvramdisk-{}", d.protocol);
        let buf = payload(ctx.opts.seed, B as usize);
        for threads in THREADS {
            let ops = ctx.ops(B);
            let warm = ctx.warmup(ops);
            let salt = u64::from(protocol.id()) << 8 | threads as u64;
            let lbas = random_indices(ctx.opts.seed, salt, (ops + warm) * threads, d.span_blocks);
            let before = d.disk.stats();
            let pb = ctx.bar(&format!("{name} write x{threads}"));
            let t = run_threads(&pb, threads, warm, ops, |i| {
                d.disk.write_atomic(&[lbas[i]], &buf)
            })?;
            let fences = d.fences_since(&before);
            let row = Row::new(SUITE, &name, "write", B, threads)
                .protocol(d.protocol)
                .ordering(d.ordering)
                .method(d.methods.clone())
                .baseline(write_base)
                .fences(fences)
                .timed(&t, d.page_bytes);
            ctx.push(row);

            let lbas = random_indices(
                ctx.opts.seed,
                salt | 0x80,
                (ops + warm) * threads,
                d.span_blocks,
            );
            let pb = ctx.bar(&format!("{name} read x{threads}"));
            let t = run_threads(&pb, threads, warm, ops, |i| {
                let mut out = [0u8; BENCH_BLOCK_BYTES as usize];
                d.disk.read_blocks(lbas[i], &mut out)?;
                std::hint::black_box(&mut out);
                Ok(())
            })?;
            let row = Row::new(SUITE, &name, "read", B, threads)
                .protocol(d.protocol)
                .ordering(d.ordering)
                .method("mirror load + memcpy 4 KiB + seqlock check")
                .baseline("raw-read")
                .timed(&t, d.page_bytes);
            ctx.push(row);
        }
    }
    Ok(())
}

/// What one thread count's floors share: the region, the block written, the counts and the
/// salt that makes each floor's random offsets its own.
struct FloorRun<'a> {
    raw: &'a RawRegion,
    buf: &'a [u8],
    blocks: u64,
    threads: usize,
    ops: usize,
    warm: usize,
    n: usize,
    salt: u64,
}

fn floors(ctx: &mut Ctx, with_peer: bool) -> Result<()> {
    let raw = raw_region(ctx, 0)?;
    let blocks = raw.span / B;
    let buf = payload(ctx.opts.seed, B as usize);
    // The commit word goes with the method the fast protocol's map uses by default.
    let policy = ordering::policy_by_name(ordering::DEFAULT_POLICY)?;
    assert!(
        blocks * 8 <= COMMIT_AREA_BYTES - 4096,
        "lookup table fits the area"
    );
    for threads in THREADS {
        let ops = ctx.ops(B);
        let warm = ctx.warmup(ops);
        let f = FloorRun {
            raw: &raw,
            buf: &buf,
            blocks,
            threads,
            ops,
            warm,
            n: (ops + warm) * threads,
            salt: 0x100 | threads as u64,
        };
        floor_commit_word(ctx, &f, policy.map)?;
        floor_paper(ctx, &f, &policy, with_peer)?;
        floor_reads(ctx, &f)?;
    }
    Ok(())
}

/// floor-nt and floor-2fence: the copy alone, then the copy and one commit word (`word`,
/// the method of the fast protocol's map).
fn floor_commit_word(ctx: &mut Ctx, f: &FloorRun, word: Method) -> Result<()> {
    let r = &*f.raw.region;
    let offs = random_indices(ctx.opts.seed, f.salt, f.n, f.blocks);
    let pb = ctx.bar(&format!("floor-nt x{}", f.threads));
    let t = run_threads(&pb, f.threads, f.warm, f.ops, |i| {
        r.write_nt(offs[i] * B, f.buf);
        r.fence();
        Ok(())
    })?;
    let row = Row::new(SUITE, "floor-nt", "write", B, f.threads)
        .method("nt 4 KiB + sfence")
        .timed(&t, f.raw.page_bytes);
    ctx.push(row);

    let offs = random_indices(ctx.opts.seed, f.salt | 0x10, f.n, f.blocks);
    let words = random_indices(ctx.opts.seed, f.salt | 0x20, f.n, COMMIT_AREA_BYTES / 8);
    let pb = ctx.bar(&format!("floor-2fence x{}", f.threads));
    let t = run_threads(&pb, f.threads, f.warm, f.ops, |i| {
        r.write_nt(offs[i] * B, f.buf);
        r.fence();
        store_word(r, word, f.raw.span + words[i] * 8, i as u64);
        r.fence();
        Ok(())
    })?;
    let row = Row::new(SUITE, "floor-2fence", "write", B, f.threads)
        .method(format!("nt 4 KiB + sfence + {} 8 B + sfence", word.name()))
        .timed(&t, f.raw.page_bytes);
    ctx.push(row);
    Ok(())
}

/// floor-paper: the copy, then the paper's six words each with its own fence.
fn floor_paper(
    ctx: &mut Ctx,
    f: &FloorRun,
    policy: &OrderingPolicy,
    with_peer: bool,
) -> Result<()> {
    let r = &*f.raw.region;
    let word = policy.map;
    // floor-paper's journal words, one line per thread at the end of the commit area; the
    // lookup table (8 bytes per block) at its start.
    let journal_line = |t: usize| f.raw.span + COMMIT_AREA_BYTES - 4096 + t as u64 * 64;
    let offs = random_indices(ctx.opts.seed, f.salt | 0x40, f.n, f.blocks);
    let words = random_indices(ctx.opts.seed, f.salt | 0x50, f.n, COMMIT_AREA_BYTES / 8);
    let per = f.ops + f.warm;
    let pb = ctx.bar(&format!("floor-paper x{}", f.threads));
    let t = run_threads(&pb, f.threads, f.warm, f.ops, |i| {
        let line = journal_line(i / per);
        r.write_nt(offs[i] * B, f.buf);
        r.fence();
        for (off, v) in [(line, offs[i]), (line + 8, i as u64), (line + 16, i as u64)] {
            store_word(r, policy.journal, off, v);
            r.fence();
        }
        store_word(r, word, f.raw.span + words[i] * 8, i as u64);
        r.fence();
        for off in [line + 8, line + 16] {
            store_word(r, policy.journal, off, u64::MAX);
            r.fence();
        }
        Ok(())
    })?;
    let mut row = Row::new(SUITE, "floor-paper", "write", B, f.threads).method(format!(
        "nt 4 KiB + sfence + 6 x ({} 8 B + sfence)",
        policy.journal.name()
    ));
    if with_peer {
        // Whether the paper's protocol can reach the peer at all, in the same run.
        row = row.baseline("libpmemblk");
    }
    let row = row.timed(&t, f.raw.page_bytes);
    ctx.push(row);
    Ok(())
}

/// raw-read and raw-read-lookup: the read floors.
fn floor_reads(ctx: &mut Ctx, f: &FloorRun) -> Result<()> {
    let r = &*f.raw.region;
    let offs = random_indices(ctx.opts.seed, f.salt | 0x30, f.n, f.blocks);
    let pb = ctx.bar(&format!("raw-read x{}", f.threads));
    let t = run_threads(&pb, f.threads, f.warm, f.ops, |i| {
        let mut out = [0u8; BENCH_BLOCK_BYTES as usize];
        r.read(offs[i] * B, &mut out);
        std::hint::black_box(&mut out);
        Ok(())
    })?;
    let row = Row::new(SUITE, "raw-read", "read", B, f.threads)
        .method("memcpy 4 KiB")
        .timed(&t, f.raw.page_bytes);
    ctx.push(row);

    let lbas = random_indices(ctx.opts.seed, f.salt | 0x60, f.n, f.blocks);
    let pb = ctx.bar(&format!("raw-read-lookup x{}", f.threads));
    let t = run_threads(&pb, f.threads, f.warm, f.ops, |i| {
        // The page depends on the loaded word, as a map entry's page does.
        let w = r.load_u64(f.raw.span + lbas[i] * 8);
        let page = (w ^ lbas[i].wrapping_mul(0x9e37_79b9_7f4a_7c15)) % f.blocks;
        let mut out = [0u8; BENCH_BLOCK_BYTES as usize];
        r.read(page * B, &mut out);
        std::hint::black_box(&mut out);
        Ok(())
    })?;
    let row = Row::new(SUITE, "raw-read-lookup", "read", B, f.threads)
        .method("8 B table load + memcpy 4 KiB")
        .baseline("raw-read")
        .timed(&t, f.raw.page_bytes);
    ctx.push(row);
    Ok(())
}

fn libpmemblk(ctx: &mut Ctx, p: &Peer) -> Result<()> {
    let span_blocks = ctx.span() / B;
    let file = ctx.image("libpmemblk");
    let path = file.path().to_path_buf();
    // libpmemblk keeps about 2 % for its BTT metadata: ask for 1/16 more than the span.
    let pool_bytes = ctx.span() + ctx.span() / 16 + (16 << 20);
    let pool = PmemBlkPool::create(&p.lib, &path, B as usize, pool_bytes)
        .map_err(|e| Error::env(format!("libpmemblk: {e}")))?;
    if pool.nblock() < span_blocks {
        return Err(Error::env(format!(
            "libpmemblk: a pool of {pool_bytes} bytes holds {} blocks, fewer than the span's {span_blocks}",
            pool.nblock()
        )));
    }
    let buf = payload(ctx.opts.seed, B as usize);
    // Pre-fault: every block of the span written once.
    let pb = ctx.bar("libpmemblk pre-fill");
    pb.set_length(span_blocks);
    for lba in 0..span_blocks {
        pool.write(lba, &buf)
            .map_err(|e| Error::env(format!("libpmemblk: {e}")))?;
        if lba % 8192 == 0 {
            pb.set_position(lba);
        }
    }
    pb.finish_and_clear();
    let page_bytes = mapped_page_bytes(&path).unwrap_or(0);
    let method = "libpmem (see below)";
    for threads in THREADS {
        let ops = ctx.ops(B);
        let warm = ctx.warmup(ops);
        let n = (ops + warm) * threads;
        let salt = 0x200 | threads as u64;
        let lbas = random_indices(ctx.opts.seed, salt, n, span_blocks);
        let pb = ctx.bar(&format!("libpmemblk write x{threads}"));
        let t = run_threads(&pb, threads, warm, ops, |i| {
            pool.write(lbas[i], &buf)
                .map_err(|e| Error::env(format!("libpmemblk: {e}")))
        })?;
        let row = Row::new(SUITE, "libpmemblk", "write", B, threads)
            .protocol("btt")
            .method(method)
            .baseline("floor-2fence")
            .timed(&t, page_bytes);
        ctx.push(row);

        let lbas = random_indices(ctx.opts.seed, salt | 0x80, n, span_blocks);
        let pb = ctx.bar(&format!("libpmemblk read x{threads}"));
        let t = run_threads(&pb, threads, warm, ops, |i| {
            let mut out = [0u8; BENCH_BLOCK_BYTES as usize];
            pool.read(lbas[i], &mut out)
                .map_err(|e| Error::env(format!("libpmemblk: {e}")))?;
            std::hint::black_box(&mut out);
            Ok(())
        })?;
        let row = Row::new(SUITE, "libpmemblk", "read", B, threads)
            .protocol("btt")
            .method(method)
            .baseline("raw-read")
            .timed(&t, page_bytes);
        ctx.push(row);
    }
    drop(pool);
    drop(file);
    Ok(())
}

/// The suite's row `name` doing `op` with `threads` threads on pages of `page_bytes`.
fn peer_row<'a>(
    rows: &'a [BenchResult],
    page_bytes: u64,
    name: &str,
    op: &str,
    threads: u32,
) -> Option<&'a BenchResult> {
    let key = RowKey {
        suite: SUITE,
        op,
        block_bytes: B,
        threads,
        page_bytes,
        x: None,
    };
    find(rows, &key, name)
}

/// The targets, 1 thread, per page size.
pub(super) fn targets(rows: &[BenchResult]) -> Vec<Target> {
    let mut out = Vec::new();
    let pages = super::page_sizes(rows);
    for page in pages {
        let get_t = |name: &str, op: &str, threads: u32| peer_row(rows, page, name, op, threads);
        let get = |name: &str, op: &str| get_t(name, op, 1);
        let fast_w = get("nvramdisk-fast", "write");
        let paper_w = get("nvramdisk-paper", "write");
        let blk_w = get("libpmemblk", "write");
        let fast_r = get("nvramdisk-fast", "read");
        let huge = page >= super::place::HUGE_PAGE_BYTES;
        let at_least =
            |what: &str, rows, limit| Target::rate_at_least(SUITE, page, what, rows, limit);
        let at_most =
            |what: &str, rows, limit| Target::time_at_most(SUITE, page, what, rows, limit);
        out.extend(at_least(
            "fast write ops/s / libpmemblk (1 thread)",
            (fast_w, blk_w),
            if huge { 1.6 } else { 1.4 },
        ));
        out.extend(at_most(
            "fast write median / floor-2fence (1 thread)",
            (fast_w, get("floor-2fence", "write")),
            1.15,
        ));
        out.extend(at_least(
            "paper write ops/s / libpmemblk (1 thread)",
            (paper_w, blk_w),
            1.0,
        ));
        out.extend(at_least(
            "paper write ops/s / libpmemblk (2 threads)",
            (
                get_t("nvramdisk-paper", "write", 2),
                get_t("libpmemblk", "write", 2),
            ),
            1.0,
        ));
        // Where the paper's rate is bounded: its seven persists cost at least floor-paper.
        out.extend(at_most(
            "paper write median / floor-paper, its own floor (1 thread)",
            (paper_w, get("floor-paper", "write")),
            1.15,
        ));
        out.extend(at_most(
            "fast read median / raw 4 KiB copy (1 thread)",
            (fast_r, get("raw-read", "read")),
            1.15,
        ));
        // Where the read is bounded: one dependent load from a block map not in the cache.
        out.extend(at_most(
            "fast read median / raw-read-lookup, its own floor (1 thread)",
            (fast_r, get("raw-read-lookup", "read")),
            1.15,
        ));
    }
    out
}
