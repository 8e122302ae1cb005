//! The write cache's rows of the nvcache suite (issue 22, item 5), in one run:
//!
//! - **A synchronous metadata write**: one 512-byte sector written into the write cache
//!   (`wc-write-512`, admit all: durable and atomic on return, one fence) against one
//!   512-byte block written to nvramdisk (`nvramdisk-fast-512`, fast protocol, durable on
//!   return), the same random sectors of the same span, one thread, each op timed on its own.
//!   The cache holds every sector of the span (no destage inside a timed call); its backing
//!   device is a null device no timed call touches. The target: at most 1.2x nvramdisk's time.
//! - **Write-backs of the four destage policies** on the shared traces (`shared/traces` beside the checkout, or `$NVSTACK_SHARED_TRACES`):
//!   every write of the trace replayed, sector by sector in its requests, into a 128 KiB write
//!   cache (the seed's largest) with the seed's trigger; the row's note gives the sectors
//!   destaged to the backing device (a null device that counts) and their share of the
//!   sectors written. Reads are skipped (a write cache's destages depend on writes only, and
//!   on reads only through LRU and CLOCK's use bits: those rows replay the reads too).

use crate::measure::{random_indices, timing, Bar};
use crate::place::{create_region, mapped_page_bytes};
use crate::{BenchResult, Ctx, Row, Suite, Target, Timing};
use nvstack_core::blockdev::{BlockDevice, Caps, Durability};
use nvstack_core::error::{Error, Result};
use nvstack_nvcache::write::format::{Admit, DestagePolicy, Layout, Settings};
use nvstack_nvcache::write::{create, WriteCache};
use nvstack_nvramdisk::layout::LANES_DEFAULT;
use nvstack_nvramdisk::{format_region, FormatOptions, Geometry, NvramDisk, OpenOptions};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

const SUITE: Suite = Suite::Nvcache;
const S: u64 = 512;
/// Sectors of the latency rows' span (4 MiB).
const SPAN_SECTORS: u64 = 8192;
const SALT: u64 = 0x2200;
/// The seed's largest cache.
const TRACE_CACHE_BYTES: u64 = 128 * 1024;
const TRACES: [&str; 2] = ["cloudPhysicsIO.csv", "tpcc-small.trace"];
/// Requests of each trace replayed with --quick, and in the crate's own tests.
const TRACE_REQUESTS_QUICK: usize = 20_000;
const TRACE_REQUESTS_TEST: usize = 500;

pub(super) fn run(ctx: &mut Ctx) -> Result<()> {
    latency_rows(ctx)?;
    trace_rows(ctx)
}

/// A backing device that stores nothing but its last block (the cache's label; every other
/// block reads zeros) and counts the bytes written to it.
struct NullDisk {
    blocks: u64,
    written_bytes: AtomicU64,
    label: std::sync::Mutex<Vec<u8>>,
}

impl BlockDevice for NullDisk {
    fn block_bytes(&self) -> u32 {
        4096
    }
    fn blocks(&self) -> u64 {
        self.blocks
    }
    fn caps(&self) -> Caps {
        Caps {
            atomic_blocks: 0,
            scattered: false,
            durability: Durability::OnFlush,
        }
    }
    fn read(&self, lba: u64, buf: &mut [u8]) -> Result<()> {
        buf.fill(0);
        if lba == self.blocks - 1 {
            let l = self.label.lock().expect("label lock");
            buf[..l.len()].copy_from_slice(&l);
        }
        Ok(())
    }
    fn write(&self, lba: u64, data: &[u8]) -> Result<()> {
        if lba == self.blocks - 1 {
            *self.label.lock().expect("label lock") = data.to_vec();
            return Ok(());
        }
        self.written_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        Ok(())
    }
    fn discard(&self, _lba: u64, _count: u64) -> Result<()> {
        Ok(())
    }
    fn flush(&self) -> Result<()> {
        Ok(())
    }
}

fn null_disk(sectors: u64) -> Arc<NullDisk> {
    Arc::new(NullDisk {
        blocks: sectors.div_ceil(8) + 1,
        written_bytes: AtomicU64::new(0),
        label: std::sync::Mutex::new(Vec::new()),
    })
}

fn time_each(
    pb: &Bar,
    warm: usize,
    ops: usize,
    mut op: impl FnMut(usize) -> Result<()>,
) -> Result<Timing> {
    pb.set_length((warm + ops) as u64);
    let mut lat = Vec::with_capacity(ops);
    for i in 0..warm + ops {
        let t0 = Instant::now();
        op(i)?;
        let ns = t0.elapsed().as_nanos() as u64;
        if i >= warm {
            lat.push(ns);
        }
    }
    pb.finish_and_clear();
    let timed_s = lat.iter().sum::<u64>() as f64 / 1e9;
    Ok(timing(lat, timed_s))
}

fn latency_rows(ctx: &mut Ctx) -> Result<()> {
    let (ops, warm) = (ctx.ops(S), ctx.warmup(ctx.ops(S)));
    let lbas = random_indices(ctx.opts.seed, SALT, ops + warm, SPAN_SECTORS);
    let buf = crate::devices::payload(ctx.opts.seed, S as usize);
    // The write cache: every sector of the span fits (plus the spare slot).
    let slots = u32::try_from(SPAN_SECTORS + 64).expect("small");
    let image = ctx.image("wc-512");
    let region = create_region(image.path(), Layout::new(slots, 512).region_bytes)?;
    let disk = null_disk(SPAN_SECTORS);
    create(&*region, &*disk, 512, Settings::default(), &Admit::All)?;
    let wc = WriteCache::open(region, disk.clone(), None)?;
    let t = time_each(&ctx.bar("wc write 512"), warm, ops, |i| {
        wc.write_blocks(lbas[i], &buf)
    })?;
    if wc.stats().destaged() != 0 || disk.written_bytes.load(Ordering::Relaxed) != 0 {
        return Err(Error::env("nvcache suite: a timed write destaged"));
    }
    let row = Row::new(SUITE, "wc-write-512", "write", S, 1)
        .protocol("write-cache")
        .method("nt 512 B + nt 32 B entry (CRC-32C over entry and data) + sfence")
        .baseline("nvramdisk-fast-512")
        .note("durable and atomic on return (admit all); the backing device untouched")
        .timed(&t, mapped_page_bytes(image.path()).unwrap_or(0));
    ctx.push(row);
    // nvramdisk with 512-byte blocks, the same sectors.
    let nimage = ctx.image("nvramdisk-512");
    let bytes = Geometry::region_bytes_for(SPAN_SECTORS, 512, LANES_DEFAULT)?;
    let nregion = create_region(nimage.path(), bytes)?;
    let fo = FormatOptions {
        block_bytes: 512,
        ..Default::default()
    };
    format_region(&*nregion, &fo)?;
    let d = NvramDisk::open(nregion, OpenOptions::default())?;
    let before = d.stats();
    let t = time_each(&ctx.bar("nvramdisk write 512"), warm, ops, |i| {
        d.write_atomic(&[lbas[i]], &buf)
    })?;
    let after = d.stats();
    let fences = (after.persist.fences - before.persist.fences) as f64
        / (after.writes - before.writes).max(1) as f64;
    let row = Row::new(SUITE, "nvramdisk-fast-512", "write", S, 1)
        .protocol("fast")
        .ordering(d.ordering().name)
        .method("nvramdisk fast protocol, one block")
        .fences(fences)
        .note("durable on return")
        .timed(&t, mapped_page_bytes(nimage.path()).unwrap_or(0));
    ctx.push(row);
    Ok(())
}

/// The shared traces: `$NVSTACK_SHARED_TRACES` (as the Python tests name it), else
/// `shared/traces` beside the checkout this crate was built from.
fn traces_dir() -> std::path::PathBuf {
    std::env::var_os("NVSTACK_SHARED_TRACES")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces")
        })
}

/// One trace's writes (and reads) as (write, first sector, sectors), read by the simulator's
/// trace readers (which check every line).
fn load_trace(name: &str) -> Result<Vec<(bool, u64, u64)>> {
    use nvstack_sim::trace::{self, Op, ReaderOptions, TraceFormat};
    let path = traces_dir().join(name);
    let format = if name.ends_with(".csv") {
        TraceFormat::Cloudphysics
    } else {
        TraceFormat::Disksim
    };
    trace::open(&path, format, &ReaderOptions::default())?
        .map(|r| r.map(|q| (q.op == Op::Write, q.offset_bytes / S, q.size_bytes / S)))
        .collect()
}

fn trace_rows(ctx: &mut Ctx) -> Result<()> {
    for name in TRACES {
        let trace = match load_trace(name) {
            Ok(t) => t,
            Err(e) => {
                ctx.notes
                    .push(format!("nvcache: trace {name} skipped: {e}"));
                continue;
            }
        };
        // --quick replays the first requests only (the test build checks every slot per write).
        let keep = match (ctx.opts.quick_test, ctx.opts.quick) {
            (true, _) => TRACE_REQUESTS_TEST,
            (false, true) => TRACE_REQUESTS_QUICK,
            (false, false) => trace.len(),
        };
        let trace = &trace[..keep.min(trace.len())];
        for policy in DestagePolicy::ALL {
            let row = replay(ctx, name, trace, policy)?;
            ctx.push(row);
        }
    }
    Ok(())
}

fn replay(
    ctx: &Ctx,
    name: &str,
    trace: &[(bool, u64, u64)],
    policy: DestagePolicy,
) -> Result<BenchResult> {
    let end = trace.iter().map(|r| r.1 + r.2).max().unwrap_or(1);
    let disk = null_disk(end);
    let layout = Layout::fitting(TRACE_CACHE_BYTES, 512).expect("128 KiB holds 16 slots");
    let image = ctx.image("wc-trace");
    let region = create_region(image.path(), layout.region_bytes)?;
    let s = Settings {
        policy,
        ..Settings::default()
    };
    create(&*region, &*disk, 512, s, &Admit::All)?;
    let wc = WriteCache::open(region, disk.clone(), None)?;
    let zeros = vec![0u8; 64 * S as usize];
    let mut buf = vec![0u8; 64 * S as usize];
    let pb = ctx.bar(&format!("wc {name} {}", policy.name()));
    pb.set_length(trace.len() as u64);
    let mut lat = Vec::new();
    for &(write, lba, n) in trace {
        for at in (lba..lba + n).step_by(64) {
            let k = (lba + n - at).min(64) as usize * S as usize;
            let t0 = Instant::now();
            if write {
                wc.write_blocks(at, &zeros[..k])?;
            } else {
                wc.read_blocks(at, &mut buf[..k])?;
            }
            lat.push(t0.elapsed().as_nanos() as u64);
        }
    }
    pb.finish_and_clear();
    let k = wc.stats();
    let share = k.destaged_room as f64 / k.write_blocks.max(1) as f64;
    let timed_s = lat.iter().sum::<u64>() as f64 / 1e9;
    let t = timing(lat, timed_s);
    let stem = name.split(['.', '-']).next().unwrap_or(name).to_lowercase();
    let row = Row::new(
        SUITE,
        &format!("wc-{stem}-{}", policy.name()),
        "write",
        S,
        1,
    )
    .protocol("write-cache")
    .method(format!("{name}, {} slots of 512 B", layout.slots))
    .baseline(&format!("wc-{stem}-lrw"))
    .note(format!(
        "{name} ({} requests): {} sectors written, {} destaged ({:.1} %) by the seed's \
             trigger, policy {}",
        trace.len(),
        k.write_blocks,
        k.destaged_room,
        100.0 * share,
        policy.name()
    ));
    Ok(row.timed(&t, mapped_page_bytes(image.path()).unwrap_or(0)))
}

/// The synchronous metadata write: at most 1.2x nvramdisk's single-block write; sustained
/// writes through a full write cache (wsustain.rs).
pub(super) fn targets(rows: &[BenchResult]) -> Vec<Target> {
    let mut out = Vec::new();
    for page in crate::page_sizes(rows) {
        let find = |n: &str| {
            rows.iter()
                .find(|r| r.suite == SUITE.name() && r.name == n && r.page_bytes == page)
        };
        out.extend(Target::time_at_most(
            SUITE,
            page,
            "a synchronous 512 B write into the write cache over nvramdisk's 512 B write",
            (find("wc-write-512"), find("nvramdisk-fast-512")),
            1.2,
        ));
        out.extend(super::sustain::page_targets(page, &find));
    }
    out
}
