//! The nvcache suite (issue 19, item 5): what UBJ (nvstack_nvcache, seed 001) costs, measured
//! in one run next to nvramdisk.
//!
//! - **Commit of n dirty blocks**, n = 1, 2, 4, ..., 4096 (1024 with --quick): `ubj-commit`
//!   times `commit()` alone and counts its fences from the cache's own counter (the protocol
//!   promises two, whatever n: the suite's targets check that from these rows). Its baseline
//!   `ubj-write-blocks` times writing the same n blocks (their data and entries stored with
//!   non-temporal stores and no fence: they persist at the commit's first fence), so a reader
//!   sees commit cost against data cost. The cache holds 16 times the largest n, with
//!   autocommit off and the high watermark at 100 %: nothing commits or checkpoints inside a
//!   timed call (each timed call checks that it did not). A checkpoint between commits,
//!   untimed, frees the out-of-date copies before the next n blocks would not fit.
//! - **One 4 KiB block against nvramdisk** (fast protocol, default format options) on the same
//!   span and the same random blocks: `ubj-read-hit` (every block of the span cached clean
//!   first, by read misses), `ubj-write-commit` (a write and a commit: durable on return, the
//!   fair comparison with nvramdisk's write) and `ubj-write` (returns before durability: the
//!   block is durable at the next commit), each with baseline `nvramdisk-fast`. The cache has
//!   twice the span's blocks (a 2 GiB image for the default span), so that the writes' copies
//!   of frozen blocks find room without a checkpoint.
//!
//! The cache image goes on the place (`--dir`, pre-faulted), as every suite's images do. The
//! backing device is a `FileDevice` on a disk (the temporary directory, or ./target when that
//! is a memory file system): no timed call touches it, only the untimed checkpoints and the
//! read misses that fill the cache. Every op here is timed on its own on one thread; ops/s is
//! timed ops over the sum of their own times, since untimed checkpoints come between them.

use super::devices::{bench_disk, payload};
use super::measure::{random_indices, timing, Bar};
use super::place::{create_region, mapped_page_bytes, mount_of, ImageFile};
use super::{BenchResult, Ctx, Row, Suite, Target, Timing, BENCH_BLOCK_BYTES};
use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::{Error, Result};
use nvstack_nvcache::ubj::format::{Layout, PolicyName, Settings};
use nvstack_nvcache::{create, FileDevice, Ubj};
use nvstack_nvramdisk::Protocol;
use nvstack_pmem::latency::LatencyInjection;
use nvstack_pmem::MmapRegion;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

mod sustain;
mod write;

const SUITE: Suite = Suite::Nvcache;
const B: u64 = BENCH_BLOCK_BYTES as u64;
/// Dirty blocks per commit: powers of two to 4096 (the range), 1024 with --quick.
const BLOCKS: [u64; 13] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096];
const BLOCKS_QUICK: usize = 11;
/// Cache slots per block of the largest commit: that many such commits between checkpoints.
const SLOTS_PER_BLOCK: u64 = 16;
/// Fewest timed commits per n (a median and a p99 need some; large n would otherwise get few).
const COMMITS_MIN: u64 = 100;
/// Nothing commits or checkpoints on its own: autocommit off (a write that would need a commit
/// fails instead of committing), the high watermark at 100 % (frozen slots never exceed it).
const SETTINGS: Settings = Settings {
    autocommit_blocks: 0,
    autocommit_ms: 0,
    high_watermark_pct: 100,
    low_watermark_pct: 99,
    checkpoint_ms: 0,
    policy: PolicyName::Lru,
};
/// Every UBJ row says this (the report's note says where the backing device is).
const BACKING_UNTIMED: &str = "no timed call touches the backing device";

pub(super) fn run(ctx: &mut Ctx) -> Result<()> {
    commit_rows(ctx)?;
    ubj_block_rows(ctx)?;
    nvramdisk_rows(ctx)?;
    write::run(ctx)?;
    sustain::run(ctx)
}

/// A directory on a disk for the backing file: the temporary directory unless it is a memory
/// file system, else ./target (cargo's, when run from the checkout), else the current one.
pub(crate) fn backing_dir() -> PathBuf {
    let tmp = std::env::temp_dir();
    if !in_memory(&tmp) {
        return tmp;
    }
    let target = PathBuf::from("target");
    if target.is_dir() {
        target
    } else {
        PathBuf::from(".")
    }
}

fn in_memory(dir: &Path) -> bool {
    mount_of(dir).is_some_and(|(ty, ..)| ty == "tmpfs" || ty == "ramfs")
}

/// A UBJ cache of `slots` slots on the place, over a sparse backing file of `blocks` blocks
/// (and its label) on a disk. Dropped in field order: the cache, then both files.
struct BenchUbj {
    ubj: Ubj<MmapRegion>,
    page_bytes: u64,
    slots: u64,
    _image: ImageFile,
    _backing: ImageFile,
}

fn bench_ubj(ctx: &mut Ctx, slots: u64, blocks: u64) -> Result<BenchUbj> {
    let slots = u32::try_from(slots).map_err(|_| Error::bad("nvcache suite: span too large"))?;
    let image = ctx.image("ubj");
    let region = create_region(image.path(), Layout::new(slots).region_bytes)?;
    let dir = backing_dir();
    let backing = ImageFile::new(&dir, "ubj-backing");
    let path = backing.path();
    // Sparse: a disk block is taken only by what a checkpoint writes back.
    std::fs::File::create(path)
        .and_then(|f| f.set_len((blocks + 1) * B))
        .map_err(|e| Error::env(format!("{}: cannot create: {e}", path.display())))?;
    let dev = FileDevice::open(path)?;
    ctx.notes.push(backing_note(&dir, dev.direct()));
    let dev: Arc<dyn BlockDevice> = Arc::new(dev);
    create(&*region, &*dev, SETTINGS)?;
    let ubj = Ubj::open(region, dev, None)?;
    Ok(BenchUbj {
        page_bytes: mapped_page_bytes(image.path()).unwrap_or(0),
        slots: u64::from(ubj.superblock().slots),
        ubj,
        _image: image,
        _backing: backing,
    })
}

fn backing_note(dir: &Path, direct: bool) -> String {
    let shown = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let fs = mount_of(dir).map_or_else(|| "file system unknown".into(), |(ty, ..)| ty);
    format!(
        "nvcache: the backing device is a FileDevice on {} ({fs}, {}); {BACKING_UNTIMED}: \
         checkpoints and the read misses that fill the cache run between timed calls",
        shown.display(),
        if direct { "O_DIRECT" } else { "buffered" },
    )
}

/// One UBJ call timed: its nanoseconds and the fences it made. A commit or checkpoint the call
/// made of its own (a forced one) is an error: the suite's room accounting would be wrong.
fn ubj_call(u: &Ubj<MmapRegion>, f: impl FnOnce() -> Result<()>) -> Result<(u64, u64)> {
    let before = u.stats();
    let t0 = Instant::now();
    f()?;
    let ns = t0.elapsed().as_nanos() as u64;
    let after = u.stats();
    if after.checkpoints != before.checkpoints || after.commits_forced != before.commits_forced {
        return Err(Error::env(
            "nvcache suite: a checkpoint or forced commit ran inside a timed call",
        ));
    }
    Ok((ns, after.fences - before.fences))
}

/// Run `op(i)` for `warm` untimed then `ops` timed indices; `op` times itself (returning its
/// nanoseconds and fences), so untimed work may sit between ops. Returns the timing and the
/// fences per timed op.
fn time_each(
    pb: &Bar,
    warm: usize,
    ops: usize,
    mut op: impl FnMut(usize) -> Result<(u64, u64)>,
) -> Result<(Timing, f64)> {
    pb.set_length((warm + ops) as u64);
    let mut lat = Vec::with_capacity(ops);
    let mut fences = 0;
    for i in 0..warm + ops {
        let (ns, f) = op(i)?;
        if i >= warm {
            lat.push(ns);
            fences += f;
        }
        if i % 1024 == 0 {
            pb.set_position(i as u64);
        }
    }
    pb.finish_and_clear();
    let timed_s = lat.iter().sum::<u64>() as f64 / 1e9;
    Ok((timing(lat, timed_s), fences as f64 / ops as f64))
}

/// Write `data` (n blocks from block 0) in the cache's largest writes.
fn write_from_zero(u: &Ubj<MmapRegion>, data: &[u8]) -> Result<()> {
    let unit = u.unit_blocks() as usize * B as usize;
    for (k, chunk) in data.chunks(unit).enumerate() {
        u.write_blocks((k * unit) as u64 / B, chunk)?;
    }
    Ok(())
}

fn commit_rows(ctx: &mut Ctx) -> Result<()> {
    let ns: &[u64] = if ctx.opts.quick {
        &BLOCKS[..BLOCKS_QUICK]
    } else {
        &BLOCKS
    };
    let n_max = *ns.last().expect("points");
    let c = bench_ubj(ctx, SLOTS_PER_BLOCK * n_max, n_max)?;
    let buf = payload(ctx.opts.seed, (n_max * B) as usize);
    for &n in ns {
        let base = ctx.base_ops();
        let commits = (base / n).max(COMMITS_MIN.min(base)) as usize;
        let warm = ctx.warmup(commits);
        let data = &buf[..(n * B) as usize];
        let (write, commit) = commit_point(ctx, &c, n, data, (warm, commits))?;
        let row = |name, method: String, note: &str| {
            Row::new(SUITE, name, "write", n * B, 1)
                .protocol("ubj")
                .method(method)
                .x("blocks", n as f64)
                .note(format!("{note}; {BACKING_UNTIMED}"))
        };
        let w = row(
            "ubj-write-blocks",
            format!("{n} x (nt 4 KiB + nt entry)"),
            "the n blocks written (each clean or frozen: in place or copied), stored with no \
             fence: durable at the commit's first fence",
        );
        ctx.push(w.fences(write.1).timed(&write.0, c.page_bytes));
        let cm = row(
            "ubj-commit",
            "sfence + 2 nt commit words + sfence".into(),
            "commit() alone, n dirty blocks frozen in place (size: the bytes it makes \
             durable); a checkpoint between commits, untimed, makes room",
        );
        let cm = cm.baseline("ubj-write-blocks").fences(commit.1);
        ctx.push(cm.timed(&commit.0, c.page_bytes));
    }
    Ok(())
}

/// Time writing n blocks and committing them, `warm` untimed then `commits` timed times.
/// Returns (write, commit) timings with their fences per op.
fn commit_point(
    ctx: &Ctx,
    c: &BenchUbj,
    n: u64,
    data: &[u8],
    (warm, commits): (usize, usize),
) -> Result<((Timing, f64), (Timing, f64))> {
    let u = &c.ubj;
    // From a checkpoint on, commit k holds k x n slots (each commit after the first copies the
    // n frozen blocks): `room` commits fit before the next checkpoint.
    let room = c.slots / n;
    let mut since = room;
    let mut commit_lat = Vec::with_capacity(commits);
    let mut commit_fences = 0;
    let pb = ctx.bar(&format!("ubj commit x{n}"));
    let write = time_each(&pb, warm, commits, |i| {
        if since == room {
            u.checkpoint()?; // untimed: frees the out-of-date copies
            since = 0;
        }
        since += 1;
        let w = ubj_call(u, || write_from_zero(u, data))?;
        let (ns, fences) = ubj_call(u, || u.commit())?;
        if i >= warm {
            commit_lat.push(ns);
            commit_fences += fences;
        }
        Ok(w)
    })?;
    let timed_s = commit_lat.iter().sum::<u64>() as f64 / 1e9;
    let commit = timing(commit_lat, timed_s);
    Ok((write, (commit, commit_fences as f64 / commits as f64)))
}

/// Fill the cache with every block of the span, clean, by reading it (read misses of a sparse
/// backing file: no disk I/O).
fn fill_clean(ctx: &Ctx, c: &BenchUbj, span_blocks: u64) -> Result<()> {
    let pb = ctx.bar("ubj fill (read misses)");
    pb.set_length(span_blocks);
    let mut buf = vec![0u8; (64 * B) as usize];
    let mut lba = 0;
    while lba < span_blocks {
        let k = (span_blocks - lba).min(64);
        c.ubj.read_blocks(lba, &mut buf[..(k * B) as usize])?;
        lba += k;
        pb.set_position(lba);
    }
    pb.finish_and_clear();
    Ok(())
}

/// The salts of the random blocks: the UBJ rows and nvramdisk's take the same blocks.
const SALT_WRITE: u64 = 0x900;
const SALT_READ: u64 = 0x901;
const SALT_WRITE_COMMIT: u64 = 0x902;

fn ubj_block_rows(ctx: &mut Ctx) -> Result<()> {
    let span_blocks = ctx.span() / B;
    // Twice the span: the span cached clean, and as many slots again for the copies the
    // writes make (a write to a frozen block goes to a new slot) before a checkpoint must
    // free some (see Room).
    let c = bench_ubj(ctx, 2 * span_blocks, span_blocks)?;
    fill_clean(ctx, &c, span_blocks)?;
    let u = &c.ubj;
    let buf = payload(ctx.opts.seed, B as usize);
    let (ops, warm) = (ctx.ops(B), ctx.warmup(ctx.ops(B)));
    let seed = ctx.opts.seed;
    let lbas = |salt| random_indices(seed, salt, ops + warm, span_blocks);

    let rd = lbas(SALT_READ);
    let misses = u.stats().read_misses;
    let t = time_each(&ctx.bar("ubj read-hit"), warm, ops, |i| {
        let mut out = [0u8; B as usize];
        let r = ubj_call(u, || u.read_blocks(rd[i], &mut out));
        std::hint::black_box(&mut out);
        r
    })?;
    if u.stats().read_misses != misses {
        return Err(Error::env("nvcache suite: a read of the hit row missed"));
    }
    let note = "every block of the span cached clean before timing; a hit also touches the LRU";
    ctx.push(ubj_row(
        "ubj-read-hit",
        "read",
        "lookup + memcpy 4 KiB",
        note,
        t,
        &c,
    ));

    let mut room = Room::new(c.slots);
    let wc = lbas(SALT_WRITE_COMMIT);
    let t = time_each(&ctx.bar("ubj write+commit"), warm, ops, |i| {
        room.take(u)?;
        ubj_call(u, || u.write_blocks(wc[i], &buf).and_then(|()| u.commit()))
    })?;
    let note = "write + commit(): durable on return, as nvramdisk's write is; each block clean \
                (written in place) or frozen (copied)";
    let method = "nt 4 KiB + nt entry + sfence + 2 nt commit words + sfence";
    ctx.push(ubj_row("ubj-write-commit", "write", method, note, t, &c));

    let wr = lbas(SALT_WRITE);
    let t = time_each(&ctx.bar("ubj write"), warm, ops, |i| {
        room.take(u)?;
        ubj_call(u, || u.write_blocks(wr[i], &buf))
    })?;
    let note = "returns before durability (no fence: durable at the next commit); each block \
                clean or dirty (written in place) or frozen (copied)";
    ctx.push(ubj_row(
        "ubj-write",
        "write",
        "nt 4 KiB + nt entry",
        note,
        t,
        &c,
    ));
    Ok(())
}

/// Slots the timed writes may still take. A write of one block takes at most one slot that
/// only a checkpoint frees (its dirty copy, frozen at the commit; a clean slot is evicted when
/// no slot is free): when all but one are taken, a commit and a checkpoint, untimed, free
/// them, so none is forced inside a timed call. With the default ops none is needed.
struct Room {
    left: u64,
    slots: u64,
}

impl Room {
    fn new(slots: u64) -> Room {
        Room {
            left: slots - 1,
            slots,
        }
    }

    fn take(&mut self, u: &Ubj<MmapRegion>) -> Result<()> {
        if self.left == 0 {
            u.commit()?;
            u.checkpoint()?;
            self.left = self.slots - 1;
        }
        self.left -= 1;
        Ok(())
    }
}

fn ubj_row(
    name: &str,
    op: &'static str,
    method: &str,
    note: &str,
    (t, fences): (Timing, f64),
    c: &BenchUbj,
) -> BenchResult {
    let mut row = Row::new(SUITE, name, op, B, 1)
        .protocol("ubj")
        .method(method)
        .baseline("nvramdisk-fast")
        .note(format!("{note}; {BACKING_UNTIMED}"));
    if op == "write" {
        row = row.fences(fences);
    }
    row.timed(&t, c.page_bytes)
}

/// nvramdisk (fast protocol, default format options) on the same span, the same blocks and
/// the same timing loop.
fn nvramdisk_rows(ctx: &mut Ctx) -> Result<()> {
    let d = bench_disk(ctx, Protocol::Fast, None, LatencyInjection::default())?;
    let name = format!("nvramdisk-{}", d.protocol);
    let buf = payload(ctx.opts.seed, B as usize);
    let (ops, warm) = (ctx.ops(B), ctx.warmup(ctx.ops(B)));
    let (seed, span_blocks) = (ctx.opts.seed, d.span_blocks);
    let lbas = |salt| random_indices(seed, salt, ops + warm, span_blocks);
    let timed = |f: &mut dyn FnMut() -> Result<()>| -> Result<(u64, u64)> {
        let t0 = Instant::now();
        f()?;
        Ok((t0.elapsed().as_nanos() as u64, 0))
    };
    let wr = lbas(SALT_WRITE);
    let before = d.disk.stats();
    let (t, _) = time_each(&ctx.bar(&format!("{name} write")), warm, ops, |i| {
        timed(&mut || d.disk.write_atomic(&[wr[i]], &buf))
    })?;
    let row = Row::new(SUITE, &name, "write", B, 1)
        .protocol(d.protocol)
        .ordering(d.ordering)
        .method(d.methods.clone())
        .fences(d.fences_since(&before))
        .note("durable on return")
        .timed(&t, d.page_bytes);
    ctx.push(row);
    let rd = lbas(SALT_READ);
    let (t, _) = time_each(&ctx.bar(&format!("{name} read")), warm, ops, |i| {
        let mut out = [0u8; B as usize];
        let r = timed(&mut || d.disk.read_blocks(rd[i], &mut out));
        std::hint::black_box(&mut out);
        r
    })?;
    let row = Row::new(SUITE, &name, "read", B, 1)
        .protocol(d.protocol)
        .ordering(d.ordering)
        .method("mirror load + memcpy 4 KiB + seqlock check")
        .timed(&t, d.page_bytes);
    ctx.push(row);
    Ok(())
}

/// Fences per commit, from this run's `ubj-commit` rows: constant in n, and the protocol's two.
pub(super) fn targets(rows: &[BenchResult]) -> Vec<Target> {
    let mut out = write::targets(rows);
    for page in super::page_sizes(rows) {
        let commits: Vec<&BenchResult> = rows
            .iter()
            .filter(|r| r.suite == SUITE.name() && r.name == "ubj-commit" && r.page_bytes == page)
            .collect();
        let fences: Vec<f64> = commits.iter().filter_map(|r| r.fences_per_op).collect();
        let n_max = commits.iter().filter_map(|r| r.x).fold(0.0, f64::max);
        let (Some(lo), Some(hi)) = (
            fences.iter().copied().reduce(f64::min),
            fences.iter().copied().reduce(f64::max),
        ) else {
            continue;
        };
        out.push(Target::at_most(
            SUITE,
            page,
            &format!(
                "fences per commit: most minus fewest over n = 1 to {n_max} blocks (constant \
                 in n)"
            ),
            hi - lo,
            0.0,
        ));
        // Farthest from two, on either side: a commit with a fence missing fails too.
        let worst = if (hi - 2.0).abs() >= (lo - 2.0).abs() {
            hi
        } else {
            lo
        };
        out.push(Target::exactly(
            SUITE,
            page,
            "fences per commit, the figure farthest from the protocol's two",
            worst,
            2.0,
        ));
    }
    out
}
