//! `nvstack bench`: what one 4 KiB block costs through nvramdisk, next to the physical floor of
//! the same stores on the same memory, measured in one run.
//!
//! Rows (one thread, 4 KiB blocks, uniform random LBAs over a device of at least 1 GiB, the LBA
//! sequence generated from a seed before timing, every op timed on its own):
//!
//! - `nvramdisk-fast` / `nvramdisk-paper`, write and read: a formatted image of each protocol,
//!   every block written once first (so writes recycle shadow pages and reads copy real pages).
//! - `floor-nt`: a 4 KiB non-temporal copy and one fence at a random 4 KiB offset of a raw
//!   region: the least any durable 4 KiB write can cost.
//! - `floor-2fence`: the same, then an 8-byte non-temporal store to a random word of a separate
//!   8 MiB area and a second fence: the floor of any copy-then-commit-word protocol.
//! - `raw-read`: a 4 KiB copy out of a raw region at a random offset.
//!
//! Writes are compared with `floor-nt`, reads with `raw-read`. Only the [`Region`] API is
//! used: the floors issue exactly the instructions nvramdisk's persist methods issue.

use crate::blockdev::BlockDevice;
use crate::error::{Error, Result};
use crate::nvramdisk::{format_region, FormatOptions, NvramDisk, OpenOptions, Protocol};
use crate::pmem::latency::{measure_dram_store_latency_ns, LatencyInjection};
use crate::pmem::{cpu, Access, MmapRegion, Region};
use crate::report::{fmt_count, render};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// Block size of every row.
pub const BENCH_BLOCK_BYTES: u32 = 4096;
/// The smallest device a real run accepts (random LBAs must miss the caches).
pub const BENCH_SIZE_MIN: u64 = 1 << 30;
/// The smallest device a quick test accepts.
pub const QUICK_TEST_SIZE_MIN: u64 = 64 << 20;
/// Untimed ops before each timed row.
pub const WARMUP_OPS: u64 = 10_000;
/// The separate area of the raw region that floor-2fence's commit words go to.
pub const COMMIT_AREA_BYTES: u64 = 8 << 20;
const HUGE_PAGE_BYTES: u64 = 2 << 20;

const FAST_IMAGE: &str = "nvstack-bench-fast.img";
const PAPER_IMAGE: &str = "nvstack-bench-paper.img";
const RAW_IMAGE: &str = "nvstack-bench-raw.img";

#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Where the image files go (default /dev/shm: DRAM emulating NVRAM).
    pub dir: PathBuf,
    /// Size of each device (default 1 GiB; at least 1 GiB unless `quick_test`).
    pub size_bytes: u64,
    /// Timed ops per row.
    pub ops: u64,
    pub seed: u64,
    /// Progress bars on stderr.
    pub progress: bool,
    /// Tests only: allow devices down to 64 MiB (the numbers then mean little).
    pub quick_test: bool,
    /// Emulated NVRAM latency as a multiple of the measured DRAM latency (1.0 to 3.0, seed
    /// 000 section 7.6): every line an nvramdisk row persists costs (m - 1) x L more. The raw
    /// floors are never slowed: they stay the physical floor of this machine.
    pub latency_multiple: f64,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            dir: PathBuf::from("/dev/shm"),
            size_bytes: BENCH_SIZE_MIN,
            ops: 200_000,
            seed: 1,
            progress: false,
            quick_test: false,
            latency_multiple: 1.0,
        }
    }
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchRow {
    pub name: String,
    /// "write" or "read".
    pub op: &'static str,
    pub block_bytes: u32,
    pub threads: u32,
    pub protocol: Option<String>,
    pub ordering: Option<String>,
    /// The instructions that make (or read) one block.
    pub persist_method: String,
    /// Timed ops / wall time of the timed loop.
    pub ops_per_sec: f64,
    pub median_ns: f64,
    pub p99_ns: f64,
    /// median_ns / the median of `ratio_to` (a time ratio: 1.0 means as fast as the floor).
    pub ratio: f64,
    pub ratio_to: String,
}

/// One row set against another.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Comparison {
    pub row: String,
    pub to: String,
    /// Median latency of `row` / median latency of `to`.
    pub time_ratio: f64,
    /// Throughput of `to` / throughput of `row` (above 1: `row` is slower).
    pub throughput_ratio: f64,
}

/// Persist work nvramdisk did per timed write (from its own counters).
#[derive(Clone, Debug, serde::Serialize)]
pub struct PersistCounts {
    pub protocol: String,
    pub fences_per_write: f64,
    pub nt_lines_per_write: f64,
    pub lines_flushed_per_write: f64,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchReport {
    pub rows: Vec<BenchRow>,
    pub comparisons: Vec<Comparison>,
    pub persist_counts: Vec<PersistCounts>,
    /// Median cost of one persisted 64-byte line on this DRAM.
    pub dram_store_latency_ns: f64,
    /// The injected NVRAM latency multiple (1.0: none) and the extra ns per persisted line.
    pub latency_multiple: f64,
    pub injected_ns_per_line: f64,
    /// Page size of the image mappings (2 MiB when tmpfs backs them with huge pages).
    pub page_bytes: u64,
    /// Type and mount point of the file system holding the images.
    pub file_system: String,
    /// What backs the mappings (EmulatedTmpfs, DaxMapSync).
    pub backing: String,
    /// Ordering policy of the nvramdisk rows and its method per region kind.
    pub ordering: String,
    pub persist_methods: String,
    /// The non-temporal copy loop in use.
    pub nt_copy: String,
    pub size_bytes: u64,
    /// Logical blocks of the nvramdisk devices.
    pub device_blocks: u64,
    pub ops: u64,
    pub warmup_ops: u64,
    pub seed: u64,
    pub seconds: f64,
}

/// Per-op latencies of one timed loop.
struct Timing {
    ops_per_sec: f64,
    median_ns: f64,
    p99_ns: f64,
}

fn timing(mut lat: Vec<u64>, wall_s: f64) -> Timing {
    lat.sort_unstable();
    let n = lat.len();
    assert!(n > 0, "no timed ops");
    let median = if n % 2 == 1 {
        lat[n / 2] as f64
    } else {
        (lat[n / 2 - 1] + lat[n / 2]) as f64 / 2.0
    };
    // Nearest rank.
    let p99 = lat[((n * 99).div_ceil(100)).max(1) - 1] as f64;
    Timing {
        ops_per_sec: n as f64 / wall_s.max(1e-9),
        median_ns: median,
        p99_ns: p99,
    }
}

/// Deletes the image files when dropped, on success and on error alike.
struct Images(Vec<PathBuf>);

impl Drop for Images {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Create `path` with `len` bytes actually allocated (tmpfs would otherwise SIGBUS on a page
/// it cannot allocate): a full file system gives a clean error here, not a crash later.
fn create_image(path: &Path, len: u64, needed_total: u64, dir: &Path) -> Result<File> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(|e| Error::env(format!("{}: cannot create: {e}", path.display())))?;
    let no_space = |e: std::io::Error| {
        Error::env(format!(
            "{}: cannot allocate {} bytes ({e}): the benchmark needs {needed_total} bytes \
             ({} MiB) free in {}; pass a directory with more room or a smaller size",
            path.display(),
            len,
            needed_total >> 20,
            dir.display()
        ))
    };
    crate::pmem::mmap::allocate_file(&f, path, len)
        .map_err(|e| no_space(std::io::Error::other(e.to_string())))?;
    Ok(f)
}

fn map_image(file: File, path: &Path) -> Result<Arc<MmapRegion>> {
    Ok(Arc::new(MmapRegion::map_file(file, path, Access::Shared)?))
}

/// (file system type, mount point, options) of the mount holding `dir`, from /proc/mounts.
fn mount_of(dir: &Path) -> Option<(String, String, String)> {
    let dir = std::fs::canonicalize(dir).ok()?;
    let text = std::fs::read_to_string("/proc/mounts").ok()?;
    let mut best: Option<(String, String, String)> = None;
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 {
            continue;
        }
        let mnt = f[1].replace("\\040", " ").replace("\\011", "\t");
        if dir.starts_with(&mnt) && best.as_ref().is_none_or(|b| mnt.len() >= b.1.len()) {
            best = Some((f[2].to_string(), mnt, f[3].to_string()));
        }
    }
    best
}

/// Page size of the mapping of `path` in this process, from /proc/self/smaps: 2 MiB when any
/// of it is mapped with huge pages, else the kernel page size.
fn mapped_page_bytes(path: &Path) -> Option<u64> {
    let path = std::fs::canonicalize(path).ok()?;
    let want = path.to_str()?;
    let text = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    let mut kernel_page = None;
    let mut pmd_kb = 0u64;
    for line in text.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if !first.ends_with(':') {
            inside = line.trim_end().ends_with(want);
            continue;
        }
        if !inside {
            continue;
        }
        let kb = || {
            line.split_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<u64>().ok())
        };
        match first {
            "KernelPageSize:" => kernel_page = kb().map(|k| k * 1024),
            "ShmemPmdMapped:" | "FilePmdMapped:" => pmd_kb += kb().unwrap_or(0),
            _ => {}
        }
    }
    if pmd_kb > 0 {
        Some(HUGE_PAGE_BYTES)
    } else {
        kernel_page
    }
}

/// Page size when smaps cannot tell: 2 MiB when tmpfs is mounted (or forced) huge, else 4 KiB.
fn page_bytes_from_mount(fs: Option<&(String, String, String)>) -> u64 {
    let forced = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
        .is_ok_and(|s| s.contains("[force]"));
    let huge = fs.is_some_and(|(ty, _, opts)| {
        ty == "tmpfs"
            && opts
                .split(',')
                .any(|o| o == "huge=always" || o == "huge=within_size")
    });
    if huge || forced {
        HUGE_PAGE_BYTES
    } else {
        4096
    }
}

fn bar(opts: &BenchOptions, label: &str, len: u64) -> ProgressBar {
    if !opts.progress {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(
        "{prefix:<28} [{bar:32}] {pos:>9}/{len:9} {per_sec:>14} {elapsed:>4}",
    )
    .map(|s| s.progress_chars("=> "))
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    pb.set_style(style);
    pb.set_prefix(label.to_string());
    pb
}

/// Run `op(i)` for `warmup` untimed then `ops` timed indices, timing every op on its own;
/// `before_timing` runs between the two.
fn measure<F: FnMut(usize) -> Result<()>, G: FnOnce()>(
    opts: &BenchOptions,
    label: &str,
    warmup: usize,
    ops: usize,
    mut op: F,
    before_timing: G,
) -> Result<Timing> {
    let pb = bar(opts, label, (warmup + ops) as u64);
    for i in 0..warmup {
        op(i)?;
        if i % 8192 == 0 {
            pb.set_position(i as u64);
        }
    }
    let mut lat = Vec::with_capacity(ops);
    before_timing();
    let t0 = Instant::now();
    for i in warmup..warmup + ops {
        let t = Instant::now();
        op(i)?;
        lat.push(t.elapsed().as_nanos() as u64);
        if i % 8192 == 0 {
            pb.set_position(i as u64);
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    pb.set_position((warmup + ops) as u64);
    pb.finish();
    Ok(timing(lat, wall))
}

fn random_indices(seed: u64, salt: u64, n: usize, below: u64) -> Vec<u64> {
    let mut rng = SmallRng::seed_from_u64(seed ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    (0..n).map(|_| rng.gen_range(0..below)).collect()
}

fn row(
    name: &str,
    op: &'static str,
    protocol: Option<&str>,
    ordering: Option<&str>,
    persist_method: String,
    t: &Timing,
) -> BenchRow {
    BenchRow {
        name: name.to_string(),
        op,
        block_bytes: BENCH_BLOCK_BYTES,
        threads: 1,
        protocol: protocol.map(str::to_string),
        ordering: ordering.map(str::to_string),
        persist_method,
        ops_per_sec: t.ops_per_sec,
        median_ns: t.median_ns,
        p99_ns: t.p99_ns,
        ratio: 1.0,
        ratio_to: String::new(),
    }
}

/// The raw-region rows: floor-nt, floor-2fence, raw-read.
fn raw_rows(
    opts: &BenchOptions,
    region: &MmapRegion,
    data_bytes: u64,
    buf: &[u8],
) -> Result<Vec<BenchRow>> {
    let b = BENCH_BLOCK_BYTES as u64;
    let blocks = data_bytes / b;
    let warm = WARMUP_OPS.min(opts.ops) as usize;
    let n = warm + opts.ops as usize;
    let mut rows = Vec::new();

    let offs = random_indices(opts.seed, 1, n, blocks);
    let t = measure(
        opts,
        "floor-nt write",
        warm,
        n - warm,
        |i| {
            region.write_nt(offs[i] * b, buf);
            region.fence();
            Ok(())
        },
        || (),
    )?;
    rows.push(row(
        "floor-nt",
        "write",
        None,
        None,
        "nt 4 KiB + sfence".into(),
        &t,
    ));

    let offs = random_indices(opts.seed, 2, n, blocks);
    let words = random_indices(opts.seed, 3, n, COMMIT_AREA_BYTES / 8);
    let t = measure(
        opts,
        "floor-2fence write",
        warm,
        n - warm,
        |i| {
            region.write_nt(offs[i] * b, buf);
            region.fence();
            region.store_u64_nt(data_bytes + words[i] * 8, i as u64);
            region.fence();
            Ok(())
        },
        || (),
    )?;
    rows.push(row(
        "floor-2fence",
        "write",
        None,
        None,
        "nt 4 KiB + sfence + nt 8 B + sfence".into(),
        &t,
    ));

    let offs = random_indices(opts.seed, 4, n, blocks);
    let mut out = vec![0u8; b as usize];
    let t = measure(
        opts,
        "raw-read",
        warm,
        n - warm,
        |i| {
            region.read(offs[i] * b, &mut out);
            std::hint::black_box(&mut out);
            Ok(())
        },
        || (),
    )?;
    rows.push(row(
        "raw-read",
        "read",
        None,
        None,
        "memcpy 4 KiB".into(),
        &t,
    ));
    Ok(rows)
}

/// Format `region` with `protocol`, fill it, and time writes then reads.
fn disk_rows(
    opts: &BenchOptions,
    region: Arc<MmapRegion>,
    protocol: Protocol,
    buf: &[u8],
    latency: LatencyInjection,
) -> Result<(Vec<BenchRow>, PersistCounts, u64)> {
    let fo = FormatOptions {
        protocol,
        ..Default::default()
    };
    format_region(&*region, &fo)?;
    let disk = NvramDisk::open(
        region,
        OpenOptions {
            latency,
            ..Default::default()
        },
    )?;
    let blocks = disk.blocks();
    let pname = protocol.name();
    let name = format!("nvramdisk-{pname}");
    let o = disk.ordering();
    let methods = format!(
        "data {} + map {} + journal {}",
        o.data.name(),
        o.map.name(),
        o.journal.name()
    );

    // Pre-fill: every block mapped, every page touched.
    let pb = bar(opts, &format!("{name} pre-fill"), blocks);
    for lba in 0..blocks {
        disk.write(lba, buf)?;
        if lba % 8192 == 0 {
            pb.set_position(lba);
        }
    }
    pb.set_position(blocks);
    pb.finish();

    let warm = WARMUP_OPS.min(opts.ops) as usize;
    let n = warm + opts.ops as usize;
    let salt = u64::from(protocol.id()) << 8;
    let mut rows = Vec::new();

    let lbas = random_indices(opts.seed, salt | 1, n, blocks);
    let mut before = disk.stats();
    let t = measure(
        opts,
        &format!("{name} write"),
        warm,
        n - warm,
        |i| disk.write(lbas[i], buf),
        || before = disk.stats(),
    )?;
    let after = disk.stats();
    let w = (after.writes - before.writes).max(1) as f64;
    let p = |a: u64, b: u64| (a - b) as f64 / w;
    let counts = PersistCounts {
        protocol: pname.to_string(),
        fences_per_write: p(after.persist.fences, before.persist.fences),
        nt_lines_per_write: p(after.persist.nt_lines, before.persist.nt_lines),
        lines_flushed_per_write: p(after.persist.lines_flushed, before.persist.lines_flushed),
    };
    rows.push(row(&name, "write", Some(pname), Some(o.name), methods, &t));

    let lbas = random_indices(opts.seed, salt | 2, n, blocks);
    let mut out = vec![0u8; BENCH_BLOCK_BYTES as usize];
    let t = measure(
        opts,
        &format!("{name} read"),
        warm,
        n - warm,
        |i| {
            disk.read_blocks(lbas[i], &mut out)?;
            std::hint::black_box(&mut out);
            Ok(())
        },
        || (),
    )?;
    rows.push(row(
        &name,
        "read",
        Some(pname),
        Some(o.name),
        "map load + memcpy 4 KiB + seqlock check".into(),
        &t,
    ));
    Ok((rows, counts, blocks))
}

fn validate(opts: &BenchOptions) -> Result<()> {
    let min = if opts.quick_test {
        QUICK_TEST_SIZE_MIN
    } else {
        BENCH_SIZE_MIN
    };
    if opts.size_bytes < min {
        return Err(Error::bad(format!(
            "bench size {} bytes is below the minimum of {} MiB: random 4 KiB blocks must be \
             spread over more memory than the caches hold",
            opts.size_bytes,
            min >> 20
        )));
    }
    if !opts.size_bytes.is_multiple_of(4096) {
        return Err(Error::bad(format!(
            "bench size {} bytes is not a multiple of 4096",
            opts.size_bytes
        )));
    }
    if !(1.0..=3.0).contains(&opts.latency_multiple) {
        return Err(Error::bad(format!(
            "latency multiple {} out of range: NVRAM latency is given as 1.0 to 3.0 times DRAM",
            opts.latency_multiple
        )));
    }
    if opts.ops == 0 {
        return Err(Error::bad("bench ops must be at least 1"));
    }
    if opts.ops > 100_000_000 {
        return Err(Error::bad(format!(
            "bench ops {} is more than 100000000 per row",
            opts.ops
        )));
    }
    if !opts.dir.is_dir() {
        return Err(Error::env(format!(
            "{}: not a directory (bench puts its image files there)",
            opts.dir.display()
        )));
    }
    Ok(())
}

fn find<'a>(rows: &'a [BenchRow], name: &str, op: &str) -> Option<&'a BenchRow> {
    rows.iter().find(|r| r.name == name && r.op == op)
}

fn compare(rows: &[BenchRow], row: (&str, &str), to: (&str, &str)) -> Option<Comparison> {
    let a = find(rows, row.0, row.1)?;
    let b = find(rows, to.0, to.1)?;
    Some(Comparison {
        row: format!("{} {}", a.name, a.op),
        to: format!("{} {}", b.name, b.op),
        time_ratio: a.median_ns / b.median_ns,
        throughput_ratio: b.ops_per_sec / a.ops_per_sec,
    })
}

/// Run every row once and return the report. The image files are removed before returning,
/// on errors too.
pub fn run(opts: &BenchOptions) -> Result<BenchReport> {
    validate(opts)?;
    let started = Instant::now();
    let size = opts.size_bytes;
    let raw_len = size + COMMIT_AREA_BYTES;
    let needed = 2 * size + raw_len;
    let raw_path = opts.dir.join(RAW_IMAGE);
    let fast_path = opts.dir.join(FAST_IMAGE);
    let paper_path = opts.dir.join(PAPER_IMAGE);
    let _cleanup = Images(vec![
        raw_path.clone(),
        fast_path.clone(),
        paper_path.clone(),
    ]);

    let dram = measure_dram_store_latency_ns();
    let latency = LatencyInjection::new(opts.latency_multiple, dram);

    // Allocate all three up front: a short file system fails now, before any timing.
    let raw_file = create_image(&raw_path, raw_len, needed, &opts.dir)?;
    let fast_file = create_image(&fast_path, size, needed, &opts.dir)?;
    let paper_file = create_image(&paper_path, size, needed, &opts.dir)?;

    let mut buf = vec![0u8; BENCH_BLOCK_BYTES as usize];
    SmallRng::seed_from_u64(opts.seed).fill(&mut buf[..]);

    let mount = mount_of(&opts.dir);
    let raw = map_image(raw_file, &raw_path)?;
    let backing = format!("{:?}", raw.backing());
    let page_bytes =
        mapped_page_bytes(&raw_path).unwrap_or_else(|| page_bytes_from_mount(mount.as_ref()));
    let mut raw_rows = raw_rows(opts, &raw, size, &buf)?;
    drop(raw);
    let _ = std::fs::remove_file(&raw_path);

    let (fast_rows, fast_counts, blocks) = disk_rows(
        opts,
        map_image(fast_file, &fast_path)?,
        Protocol::Fast,
        &buf,
        latency,
    )?;
    let _ = std::fs::remove_file(&fast_path);
    let (paper_rows, paper_counts, _) = disk_rows(
        opts,
        map_image(paper_file, &paper_path)?,
        Protocol::Paper,
        &buf,
        latency,
    )?;
    let _ = std::fs::remove_file(&paper_path);

    let ordering = fast_rows[0].ordering.clone().unwrap_or_default();
    let persist_methods = fast_rows[0].persist_method.clone();
    let raw_read = raw_rows.pop().expect("raw-read row");
    let mut rows = Vec::new();
    rows.push(fast_rows[0].clone());
    rows.push(paper_rows[0].clone());
    rows.extend(raw_rows);
    rows.push(fast_rows[1].clone());
    rows.push(paper_rows[1].clone());
    rows.push(raw_read);
    let floor = find(&rows, "floor-nt", "write").map_or(f64::NAN, |r| r.median_ns);
    let read_floor = find(&rows, "raw-read", "read").map_or(f64::NAN, |r| r.median_ns);
    for r in rows.iter_mut() {
        let (base, to) = if r.op == "write" {
            (floor, "floor-nt")
        } else {
            (read_floor, "raw-read")
        };
        r.ratio = r.median_ns / base;
        r.ratio_to = to.to_string();
    }
    let comparisons = [
        (("nvramdisk-fast", "write"), ("floor-nt", "write")),
        (("nvramdisk-paper", "write"), ("floor-nt", "write")),
        (("floor-2fence", "write"), ("floor-nt", "write")),
        (("nvramdisk-fast", "write"), ("floor-2fence", "write")),
        (("nvramdisk-paper", "write"), ("nvramdisk-fast", "write")),
        (("nvramdisk-fast", "read"), ("raw-read", "read")),
        (("nvramdisk-paper", "read"), ("raw-read", "read")),
        (("nvramdisk-paper", "read"), ("nvramdisk-fast", "read")),
    ]
    .iter()
    .filter_map(|&(a, b)| compare(&rows, a, b))
    .collect();

    let file_system = match &mount {
        Some((ty, mnt, _)) => format!("{ty} at {mnt}"),
        None => "unknown".to_string(),
    };
    Ok(BenchReport {
        rows,
        comparisons,
        persist_counts: vec![fast_counts, paper_counts],
        dram_store_latency_ns: dram,
        latency_multiple: opts.latency_multiple,
        injected_ns_per_line: latency.extra_ns_per_line,
        page_bytes,
        file_system,
        backing,
        ordering,
        persist_methods,
        nt_copy: cpu::nt_copy_name().to_string(),
        size_bytes: size,
        device_blocks: blocks,
        ops: opts.ops,
        warmup_ops: WARMUP_OPS.min(opts.ops),
        seed: opts.seed,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The report as aligned text tables.
pub fn format_table(r: &BenchReport) -> String {
    let header = [
        "row",
        "op",
        "block",
        "thr",
        "persist",
        "ops/s",
        "median ns",
        "p99 ns",
        "time x",
        "thrpt x",
        "vs",
    ];
    let right = [
        false, false, true, true, false, true, true, true, true, true, false,
    ];
    let cells: Vec<Vec<String>> = r
        .rows
        .iter()
        .map(|row| {
            let base = find(&r.rows, &row.ratio_to, row.op);
            let thr = base.map_or(f64::NAN, |b| b.ops_per_sec / row.ops_per_sec);
            vec![
                row.name.clone(),
                row.op.to_string(),
                row.block_bytes.to_string(),
                row.threads.to_string(),
                row.persist_method.clone(),
                fmt_count(row.ops_per_sec),
                format!("{:.0}", row.median_ns),
                format!("{:.0}", row.p99_ns),
                format!("{:.2}", row.ratio),
                format!("{thr:.2}"),
                row.ratio_to.clone(),
            ]
        })
        .collect();
    let mut s = render(&header, &cells, &right);
    s.push('\n');
    let cells: Vec<Vec<String>> = r
        .comparisons
        .iter()
        .map(|c| {
            vec![
                c.row.clone(),
                "vs".into(),
                c.to.clone(),
                format!("{:.2}", c.time_ratio),
                format!("{:.2}", c.throughput_ratio),
            ]
        })
        .collect();
    s.push_str(&render(
        &["comparison", "", "", "time x", "thrpt x"],
        &cells,
        &[false, false, false, true, true],
    ));
    s.push('\n');
    let cells: Vec<Vec<String>> = r
        .persist_counts
        .iter()
        .map(|p| {
            vec![
                format!("nvramdisk-{}", p.protocol),
                format!("{:.2}", p.fences_per_write),
                format!("{:.2}", p.nt_lines_per_write),
                format!("{:.2}", p.lines_flushed_per_write),
            ]
        })
        .collect();
    s.push_str(&render(
        &["per write", "fences", "nt lines", "lines flushed"],
        &cells,
        &[false, true, true, true],
    ));
    s.push('\n');
    let page = if r.page_bytes >= 1 << 20 {
        format!("{} MiB", r.page_bytes >> 20)
    } else {
        format!("{} KiB", r.page_bytes >> 10)
    };
    if r.latency_multiple > 1.0 {
        s.push_str(&format!(
            "NVRAM latency injected into the nvramdisk rows: {:.2} x DRAM, +{:.0} ns per persisted line (floors not slowed)\n",
            r.latency_multiple, r.injected_ns_per_line
        ));
    }
    s.push_str(&format!(
        "time x = median latency / median of `vs`; thrpt x = ops/s of `vs` / ops/s of the row\n\
         device {} MiB ({} blocks of {} B), {} timed ops per row after {} warm-up ops, seed {}, \
         1 thread, uniform random LBAs\n\
         DRAM store latency {:.0} ns per persisted 64 B line; page size {page}; {} ({})\n\
         ordering {} ({}); nt copy {}; total {:.1} s\n",
        r.size_bytes >> 20,
        r.device_blocks,
        BENCH_BLOCK_BYTES,
        r.ops,
        r.warmup_ops,
        r.seed,
        r.dram_store_latency_ns,
        r.file_system,
        r.backing,
        r.ordering,
        r.persist_methods,
        r.nt_copy,
        r.seconds,
    ));
    s
}

/// Print [`format_table`] to stdout.
pub fn print_table(r: &BenchReport) {
    print!("{}", format_table(r));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_bench_produces_every_row() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let opts = BenchOptions {
            dir: dir.path().to_path_buf(),
            size_bytes: QUICK_TEST_SIZE_MIN,
            ops: 2000,
            seed: 7,
            progress: false,
            quick_test: true,
            latency_multiple: 1.5,
        };
        let r = run(&opts).unwrap();
        assert_eq!(r.latency_multiple, 1.5);
        assert!(r.injected_ns_per_line > 0.0, "1.5 x DRAM injects latency");
        let want = [
            ("nvramdisk-fast", "write"),
            ("nvramdisk-paper", "write"),
            ("floor-nt", "write"),
            ("floor-2fence", "write"),
            ("nvramdisk-fast", "read"),
            ("nvramdisk-paper", "read"),
            ("raw-read", "read"),
        ];
        assert_eq!(r.rows.len(), want.len());
        for (name, op) in want {
            let row = find(&r.rows, name, op).unwrap_or_else(|| panic!("no row {name} {op}"));
            for v in [row.ops_per_sec, row.median_ns, row.p99_ns, row.ratio] {
                assert!(v.is_finite() && v > 0.0, "{name} {op}: {v}");
            }
            assert!(row.p99_ns >= row.median_ns, "{name} {op}");
            assert_eq!(row.block_bytes, 4096);
        }
        assert!(r.comparisons.iter().all(|c| c.time_ratio.is_finite()));
        assert!(r.dram_store_latency_ns > 0.0);
        assert!(r.page_bytes >= 4096);
        assert_eq!(r.persist_counts.len(), 2);
        // The protocols' fence counts (docs/format.md 6.5), from the devices' own counters.
        let fences: Vec<f64> = r
            .persist_counts
            .iter()
            .map(|p| p.fences_per_write)
            .collect();
        assert_eq!(
            fences,
            vec![2.0, 7.0],
            "fast then paper, one 4 KiB block per write"
        );
        // The image files are gone.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let table = format_table(&r);
        assert!(table.contains("floor-2fence"), "{table}");
        serde_json::to_string(&r).unwrap();
    }

    #[test]
    fn small_sizes_are_refused_outside_tests() {
        let opts = BenchOptions {
            size_bytes: 256 << 20,
            ..Default::default()
        };
        assert!(matches!(run(&opts), Err(Error::BadInput(_))));
    }

    #[test]
    fn percentiles() {
        let t = timing((1..=100).rev().collect(), 1.0);
        assert_eq!(t.median_ns, 50.5);
        assert_eq!(t.p99_ns, 99.0);
        assert_eq!(t.ops_per_sec, 100.0);
    }
}
