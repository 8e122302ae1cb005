//! `nvstack bench`: what nvramdisk costs, measured in one run next to the best runnable peer
//! (PMDK's libpmemblk, a user-space Linux BTT) and the physical floor of the same stores on
//! the same memory.
//!
//! Suites (`--suite NAME`, several allowed; `all`):
//! - `peer`: 4 KiB random writes and reads, 1 and 2 threads: nvramdisk (both protocols)
//!   against libpmemblk and the raw floors (`floor-nt`, `floor-2fence`, `raw-read`).
//! - `ordering` (seed 000 Fig. 7, Tables 5-6): raw 8 B and 4 KiB store latency for every
//!   persist method user space has; 4 KiB writes under every ordering policy; per-range
//!   commit against global commit on 2 threads.
//! - `record` (Fig. 10): one atomic write of 4 KiB to 256 KiB, with and without the ordering
//!   guarantee, against one non-temporal copy + fence of the same size.
//! - `latency` (Fig. 15): throughput as the injected NVRAM latency goes from 1.0 to 3.0 x DRAM.
//! - `allocation` (Fig. 16): the static shadow pool against a persistent bitmap allocator.
//! - `multiblock`: atomic writes of 2 to 64 blocks against as many single-block writes and
//!   against one copy of the same bytes with two fences.
//! - `nvcache` (issue 19): UBJ's commit of 1 to 4096 dirty blocks (time and fences per commit,
//!   against the time of writing those blocks), and one 4 KiB write, durable write (write and
//!   commit) and read hit through UBJ against nvramdisk's fast protocol.
//! - `flash` (issue 21): page operations replayed per second on one core by NAND under the
//!   log-block FTL (target: at least 5 million) and the page-mapped FTL (flash.rs).
//!
//! Every row: random offsets uniform over the whole span (at least 1 GiB), generated before
//! timing; every image pre-faulted (and every block written once) before timing; every op
//! timed on its own; ops/s = ops / wall time. Each suite runs on `--dir` (default /dev/shm,
//! 4 KiB pages) and, as root, also on a tmpfs mounted with huge=always (2 MiB pages).
//! Nothing here asserts a time: tests check that every row is produced and well formed.

mod allocation;
mod devices;
mod flash;
mod latency;
mod mcsim;
pub mod measure;
mod multiblock;
mod nvcache;
mod ordering;
mod peer;
pub mod place;
mod plots;
// PMDK's libpmemblk loaded with dlopen: the only module of this crate with `unsafe`.
#[allow(unsafe_code)]
pub mod pmemblk;
mod record;
#[cfg(test)]
mod tests;

use nvstack_core::error::{Error, Result};
use nvstack_core::report::{fmt_count, render};
use nvstack_core::Progress;
use nvstack_pmem::latency::{measure_dram_latency, DramLatency};
use nvstack_pmem::{cpu, ordering as pmem_ordering};
use place::{ImageFile, Place};
use std::path::{Path, PathBuf};
use std::time::Instant;

pub use measure::Timing;

/// Block size of every nvramdisk row.
pub const BENCH_BLOCK_BYTES: u32 = 4096;
/// The smallest span random offsets cover in a real run (they must miss the caches).
pub const BENCH_SIZE_MIN: u64 = 1 << 30;
/// The smallest span a unit test accepts (the numbers then mean little).
pub const QUICK_TEST_SIZE_MIN: u64 = 64 << 20;
/// Untimed ops before each timed row, at most.
pub const WARMUP_OPS_MAX: u64 = 10_000;
/// Timed ops per row, at most.
pub const OPS_MAX: u64 = 100_000_000;
/// Timed 4 KiB ops per row by default, and with --quick.
pub const OPS_DEFAULT: u64 = 200_000;
pub const OPS_QUICK: u64 = 40_000;
/// Runs of each suite (the reported figures are per-row medians over them).
pub const REPEAT_DEFAULT: u32 = 3;
pub const REPEAT_MAX: u32 = 9;
/// Size of the huge-page tmpfs: the largest image of any suite plus room.
const HUGE_TMPFS_BYTES: u64 = 3 << 30;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Suite {
    Peer,
    Ordering,
    Record,
    Latency,
    Allocation,
    Multiblock,
    Nvcache,
    Flash,
    Mcsim,
}

pub const SUITES: [Suite; 9] = [
    Suite::Peer,
    Suite::Ordering,
    Suite::Record,
    Suite::Latency,
    Suite::Allocation,
    Suite::Multiblock,
    Suite::Nvcache,
    Suite::Flash,
    Suite::Mcsim,
];

impl Suite {
    pub fn name(self) -> &'static str {
        match self {
            Suite::Peer => "peer",
            Suite::Ordering => "ordering",
            Suite::Record => "record",
            Suite::Latency => "latency",
            Suite::Allocation => "allocation",
            Suite::Multiblock => "multiblock",
            Suite::Nvcache => "nvcache",
            Suite::Flash => "flash",
            Suite::Mcsim => "mcsim",
        }
    }

    /// What the suite reproduces.
    pub fn what(self) -> &'static str {
        match self {
            Suite::Peer => "4 KiB random writes and reads against libpmemblk and the raw floors",
            Suite::Ordering => {
                "persist methods (seed 000 Fig. 7, Table 5), ordering policies (Table 6, Fig. 8), \
                 per-range vs global commit (seed 003)"
            }
            Suite::Record => "atomic write size 4 KiB to 256 KiB (seed 000 Fig. 10)",
            Suite::Latency => "NVRAM latency 1.0 to 3.0 x DRAM (seed 000 Fig. 15)",
            Suite::Allocation => {
                "static shadow pool vs a persistent bitmap allocator (seed 000 Fig. 16)"
            }
            Suite::Multiblock => "atomic writes of 2 to 64 blocks",
            Suite::Flash => {
                "NAND under the log-block and page-mapped FTLs: page ops replayed per second \
                 on one core (issue 21)"
            }
            Suite::Nvcache => {
                "UBJ: commit of 1 to 4096 dirty blocks (time, fences), 4 KiB write and read hit \
                 against nvramdisk (issue 19)"
            }
            Suite::Mcsim => "the committing simulator's speed: memory requests per second on one core (issue 24)",
        }
    }

    /// `name`, or "all" for every suite.
    pub fn parse_list(name: &str) -> Result<Vec<Suite>> {
        if name == "all" {
            return Ok(SUITES.to_vec());
        }
        SUITES
            .iter()
            .find(|s| s.name() == name)
            .map(|s| vec![*s])
            .ok_or_else(|| {
                Error::bad(format!(
                    "unknown suite '{name}': expected one of {}, all",
                    SUITES.map(|s| s.name()).join(", ")
                ))
            })
    }
}

#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub suites: Vec<Suite>,
    /// Where the image files go (default /dev/shm: DRAM emulating NVRAM).
    pub dir: PathBuf,
    /// The span random offsets are uniform over (default and minimum 1 GiB).
    pub size_bytes: u64,
    /// Timed 4 KiB ops per row (larger ops get proportionally fewer); None: the default for
    /// `quick` or not.
    pub ops: Option<u64>,
    /// Fewer ops and fewer points per suite: each suite in under 2 minutes.
    pub quick: bool,
    pub seed: u64,
    /// Tests only: allow spans down to 64 MiB.
    pub quick_test: bool,
    /// Also run on a huge-page tmpfs when root.
    pub huge: bool,
    /// Emulated NVRAM latency for the nvramdisk rows of the peer suite, as a multiple of the
    /// measured DRAM latency (1.0 to 3.0).
    pub latency_multiple: f64,
    /// Run each suite this many times (1 to REPEAT_MAX) and report per-row medians: the
    /// machines are shared and noisy, and a burst of noise then moves one run, not the figure.
    pub repeat: u32,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            suites: vec![Suite::Peer],
            dir: PathBuf::from("/dev/shm"),
            size_bytes: BENCH_SIZE_MIN,
            ops: None,
            quick: false,
            seed: 1,
            quick_test: false,
            repeat: REPEAT_DEFAULT,
            huge: true,
            latency_multiple: 1.0,
        }
    }
}

/// One timed row.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchResult {
    pub suite: &'static str,
    /// What ran: `nvramdisk-fast`, `nvramdisk-paper`, `libpmemblk`, `floor-nt`, ...
    pub name: String,
    /// `read` or `write`.
    pub op: &'static str,
    /// Bytes one op moves.
    pub block_bytes: u64,
    pub threads: u32,
    /// Page size of the mapping the row ran on (measured from /proc/self/smaps).
    pub page_bytes: u64,
    pub protocol: Option<String>,
    pub ordering: Option<String>,
    /// The instructions that make (or read) one op.
    pub persist_method: String,
    pub ops_per_sec: f64,
    pub median_ns: f64,
    pub p99_ns: f64,
    /// MB/s (10^6 bytes) moved: ops_per_sec x block_bytes.
    pub mb_per_sec: f64,
    /// The figure's x for suites that sweep a parameter (record bytes, latency multiple,
    /// blocks per write), and what it is.
    pub x: Option<f64>,
    pub x_name: Option<&'static str>,
    /// The row this one is compared with (same suite, op, size, threads, page size and x).
    pub baseline: Option<String>,
    /// median_ns / the baseline's median_ns (1.0: as fast as the baseline).
    pub time_ratio: Option<f64>,
    /// ops_per_sec / the baseline's ops_per_sec (above 1.0: faster than the baseline).
    pub throughput_ratio: Option<f64>,
    /// Fences per op, from the device's own counters (nvramdisk rows).
    pub fences_per_op: Option<f64>,
    /// How many times the suite ran; ops_per_sec, median_ns, p99_ns and fences_per_op are
    /// the medians over the runs.
    pub repeats: u32,
    /// This row's median_ns in each run, in run order (the spread behind the median).
    pub median_ns_runs: Vec<f64>,
    /// What a reader must know to read the row (what is durable when the op returns, which
    /// state the block was in, what ran untimed between ops); printed under the table.
    pub note: Option<String>,
}

/// A row under construction.
pub(crate) struct Row {
    r: BenchResult,
}

impl Row {
    pub fn new(
        suite: Suite,
        name: &str,
        op: &'static str,
        block_bytes: u64,
        threads: usize,
    ) -> Row {
        Row {
            r: BenchResult {
                suite: suite.name(),
                name: name.to_string(),
                op,
                block_bytes,
                threads: threads as u32,
                page_bytes: 0,
                protocol: None,
                ordering: None,
                persist_method: String::new(),
                ops_per_sec: 0.0,
                median_ns: 0.0,
                p99_ns: 0.0,
                mb_per_sec: 0.0,
                x: None,
                x_name: None,
                baseline: None,
                time_ratio: None,
                throughput_ratio: None,
                fences_per_op: None,
                repeats: 1,
                median_ns_runs: Vec::new(),
                note: None,
            },
        }
    }
    pub fn protocol(mut self, p: &str) -> Row {
        self.r.protocol = Some(p.to_string());
        self
    }
    pub fn ordering(mut self, o: &str) -> Row {
        self.r.ordering = Some(o.to_string());
        self
    }
    pub fn method(mut self, m: impl Into<String>) -> Row {
        self.r.persist_method = m.into();
        self
    }
    pub fn x(mut self, name: &'static str, v: f64) -> Row {
        self.r.x = Some(v);
        self.r.x_name = Some(name);
        self
    }
    pub fn baseline(mut self, name: &str) -> Row {
        self.r.baseline = Some(name.to_string());
        self
    }
    pub fn fences(mut self, f: f64) -> Row {
        self.r.fences_per_op = Some(f);
        self
    }
    pub fn note(mut self, n: impl Into<String>) -> Row {
        self.r.note = Some(n.into());
        self
    }
    pub fn timed(mut self, t: &Timing, page_bytes: u64) -> BenchResult {
        self.r.ops_per_sec = t.ops_per_sec;
        self.r.median_ns = t.median_ns;
        self.r.p99_ns = t.p99_ns;
        self.r.mb_per_sec = t.ops_per_sec * self.r.block_bytes as f64 / 1e6;
        self.r.page_bytes = page_bytes;
        self.r.median_ns_runs = vec![t.median_ns];
        self.r
    }
}

/// A target of the issue this suite answers, checked against this run's figures.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Target {
    pub suite: &'static str,
    pub page_bytes: u64,
    pub what: String,
    pub measured: f64,
    /// "at least", "at most" or "exactly".
    pub bound: &'static str,
    pub limit: f64,
    pub met: bool,
}

impl Target {
    /// `row`'s rate over `base`'s, at least `limit`; None when either row did not run (a
    /// target is checked only against figures of this run).
    pub fn rate_at_least(
        suite: Suite,
        page_bytes: u64,
        what: &str,
        (row, base): (Option<&BenchResult>, Option<&BenchResult>),
        limit: f64,
    ) -> Option<Target> {
        let measured = row?.ops_per_sec / base?.ops_per_sec;
        Some(Target {
            suite: suite.name(),
            page_bytes,
            what: what.to_string(),
            measured,
            bound: "at least",
            limit,
            met: measured >= limit,
        })
    }

    /// `row`'s median time over `base`'s, at most `limit`; None when either row did not run.
    pub fn time_at_most(
        suite: Suite,
        page_bytes: u64,
        what: &str,
        (row, base): (Option<&BenchResult>, Option<&BenchResult>),
        limit: f64,
    ) -> Option<Target> {
        let measured = row?.median_ns / base?.median_ns;
        Some(Target {
            suite: suite.name(),
            page_bytes,
            what: what.to_string(),
            measured,
            bound: "at most",
            limit,
            met: measured <= limit,
        })
    }

    /// A figure of this run that is not a ratio of two rows (a count), at most `limit`.
    pub fn at_most(suite: Suite, page_bytes: u64, what: &str, measured: f64, limit: f64) -> Target {
        Target {
            suite: suite.name(),
            page_bytes,
            what: what.to_string(),
            measured,
            bound: "at most",
            limit,
            met: measured <= limit,
        }
    }

    /// A count of this run that must equal `limit` (fences per commit: a protocol's promise).
    pub fn exactly(suite: Suite, page_bytes: u64, what: &str, measured: f64, limit: f64) -> Target {
        Target {
            bound: "exactly",
            met: measured == limit,
            ..Target::at_most(suite, page_bytes, what, measured, limit)
        }
    }
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct PlaceInfo {
    pub file_system: String,
    pub huge: bool,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchReport {
    pub suites: Vec<Suite>,
    pub results: Vec<BenchResult>,
    pub targets: Vec<Target>,
    pub places: Vec<PlaceInfo>,
    /// Why something was not run (no libpmemblk, not root, ...).
    pub notes: Vec<String>,
    /// Median cost of one persisted 64-byte line on this DRAM.
    pub dram_store_latency_ns: f64,
    /// What each further line of a 4 KiB persist adds (the bandwidth term of the latency
    /// model, pmem::latency).
    pub dram_stream_ns_per_line: f64,
    /// Persist instructions this CPU offers and the non-temporal copy loop in use.
    pub cpu_flush: String,
    pub nt_copy: String,
    /// nvramdisk's default ordering and its method per region kind.
    pub default_ordering: String,
    /// What libpmemblk persists with (when loaded).
    pub libpmemblk_persist_method: Option<String>,
    pub span_bytes: u64,
    /// The host's CPU model and logical CPUs (what the simulator suite's speed depends on).
    pub host_cpu: String,
    pub ops: u64,
    pub quick: bool,
    pub seed: u64,
    pub seconds: f64,
}

/// What a suite gets: the options, the place it runs on, and where its rows go.
pub(crate) struct Ctx<'a> {
    pub opts: &'a BenchOptions,
    pub place: &'a Place,
    pub results: Vec<BenchResult>,
    pub targets: Vec<Target>,
    pub notes: Vec<String>,
    pub dram: DramLatency,
    /// Where each row reports its progress.
    pub progress: &'a dyn Progress,
}

impl<'a> Ctx<'a> {
    /// Timed ops for a row whose op moves `bytes` (fewer for larger ops, at least 500).
    pub fn ops(&self, bytes: u64) -> usize {
        let base = self.base_ops();
        let scaled = base.saturating_mul(4096) / bytes.max(4096);
        scaled.max(500.min(base)) as usize
    }
    pub fn base_ops(&self) -> u64 {
        self.opts.ops.unwrap_or(if self.opts.quick {
            OPS_QUICK
        } else {
            OPS_DEFAULT
        })
    }
    pub fn warmup(&self, ops: usize) -> usize {
        (ops / 4).min(WARMUP_OPS_MAX as usize)
    }
    pub fn bar(&self, label: &str) -> measure::Bar<'a> {
        let tag = if self.place.huge { " [2M]" } else { "" };
        measure::Bar::new(self.progress, format!("{label}{tag}"))
    }
    pub fn push(&mut self, r: BenchResult) {
        self.results.push(r);
    }
    /// A new image file on this place, deleted when dropped.
    pub fn image(&self, name: &str) -> ImageFile {
        ImageFile::new(&self.place.dir, name)
    }
    pub fn span(&self) -> u64 {
        self.opts.size_bytes
    }
}

/// One row per row of a run, its figures the medians over the runs (a suite produces the same
/// rows in the same order every run).
fn merge_runs(runs: Vec<Vec<BenchResult>>) -> Vec<BenchResult> {
    let mut runs = runs.into_iter();
    let Some(mut merged) = runs.next() else {
        return Vec::new();
    };
    let rest: Vec<Vec<BenchResult>> = runs.collect();
    for (j, row) in merged.iter_mut().enumerate() {
        let others: Vec<&BenchResult> = rest.iter().map(|run| &run[j]).collect();
        for o in &others {
            assert!(
                o.name == row.name
                    && o.op == row.op
                    && o.block_bytes == row.block_bytes
                    && o.threads == row.threads
                    && o.page_bytes == row.page_bytes
                    && o.x == row.x,
                "runs of a suite produce the same rows in the same order"
            );
        }
        let all: Vec<&BenchResult> = std::iter::once(&*row).chain(others).collect();
        let med = |f: &dyn Fn(&BenchResult) -> f64| median(all.iter().map(|r| f(r)).collect());
        let ops_per_sec = med(&|r| r.ops_per_sec);
        let median_ns = med(&|r| r.median_ns);
        let p99_ns = med(&|r| r.p99_ns);
        let fences = row
            .fences_per_op
            .map(|_| med(&|r| r.fences_per_op.unwrap_or(0.0)));
        // Ratios a suite set itself (against a row link_baselines cannot match): their medians.
        let time_ratio = row
            .time_ratio
            .map(|_| med(&|r| r.time_ratio.unwrap_or(f64::NAN)));
        let throughput_ratio = row
            .throughput_ratio
            .map(|_| med(&|r| r.throughput_ratio.unwrap_or(f64::NAN)));
        let runs_ns: Vec<f64> = all.iter().map(|r| r.median_ns).collect();
        row.repeats = all.len() as u32;
        row.ops_per_sec = ops_per_sec;
        row.median_ns = median_ns;
        row.p99_ns = p99_ns;
        row.mb_per_sec = ops_per_sec * row.block_bytes as f64 / 1e6;
        row.fences_per_op = fences;
        row.time_ratio = time_ratio;
        row.throughput_ratio = throughput_ratio;
        row.median_ns_runs = runs_ns;
    }
    merged
}

/// The median of `v` (the mean of the middle two for an even count).
fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty(), "median of nothing");
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Fill in time_ratio and throughput_ratio from each row's baseline.
fn link_baselines(rows: &mut [BenchResult]) {
    let snapshot = rows.to_vec();
    for r in rows.iter_mut() {
        let Some(b) = &r.baseline else { continue };
        let base = snapshot.iter().find(|o| {
            &o.name == b
                && o.suite == r.suite
                && o.op == r.op
                && o.block_bytes == r.block_bytes
                && o.threads == r.threads
                && o.page_bytes == r.page_bytes
                && o.x == r.x
        });
        if let Some(o) = base {
            r.time_ratio = Some(r.median_ns / o.median_ns);
            r.throughput_ratio = Some(r.ops_per_sec / o.ops_per_sec);
        }
    }
}

/// The page sizes `rows` ran on, ascending, each once.
pub(crate) fn page_sizes<'a>(rows: impl IntoIterator<Item = &'a BenchResult>) -> Vec<u64> {
    let mut pages: Vec<u64> = rows.into_iter().map(|r| r.page_bytes).collect();
    pages.sort_unstable();
    pages.dedup();
    pages
}

/// Which rows of a suite a target compares: everything but the row's name.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RowKey<'k> {
    pub suite: Suite,
    pub op: &'k str,
    pub block_bytes: u64,
    pub threads: u32,
    pub page_bytes: u64,
    pub x: Option<f64>,
}

/// The row named `name` that matches `key`.
pub(crate) fn find<'a>(
    rows: &'a [BenchResult],
    key: &RowKey,
    name: &str,
) -> Option<&'a BenchResult> {
    rows.iter().find(|r| {
        r.suite == key.suite.name()
            && r.name == name
            && r.op == key.op
            && r.block_bytes == key.block_bytes
            && r.threads == key.threads
            && r.page_bytes == key.page_bytes
            && r.x == key.x
    })
}

fn validate(opts: &BenchOptions) -> Result<()> {
    let min = if opts.quick_test {
        QUICK_TEST_SIZE_MIN
    } else {
        BENCH_SIZE_MIN
    };
    if opts.size_bytes < min {
        return Err(Error::bad(format!(
            "bench size {} bytes is below the minimum of {} MiB: random blocks must be spread \
             over more memory than the caches hold",
            opts.size_bytes,
            min >> 20
        )));
    }
    if !opts.size_bytes.is_multiple_of(1 << 20) {
        return Err(Error::bad(format!(
            "bench size {} bytes is not a multiple of 1 MiB",
            opts.size_bytes
        )));
    }
    if opts.size_bytes > 64 << 30 {
        return Err(Error::bad(format!(
            "bench size {} bytes is more than 64 GiB",
            opts.size_bytes
        )));
    }
    if !(1.0..=3.0).contains(&opts.latency_multiple) {
        return Err(Error::bad(format!(
            "latency multiple {} out of range: NVRAM latency is given as 1.0 to 3.0 times DRAM",
            opts.latency_multiple
        )));
    }
    if let Some(ops) = opts.ops {
        if ops == 0 || ops > OPS_MAX {
            return Err(Error::bad(format!(
                "bench ops {ops} out of range: 1 to {OPS_MAX} per row"
            )));
        }
    }
    if opts.suites.is_empty() {
        return Err(Error::bad("no suite selected"));
    }
    if !(1..=REPEAT_MAX).contains(&opts.repeat) {
        return Err(Error::bad(format!(
            "bench repeat {} out of range: 1 to {REPEAT_MAX} runs of each suite",
            opts.repeat
        )));
    }
    Ok(())
}

fn run_suite(suite: Suite, ctx: &mut Ctx, peer: Option<&peer::Peer>) -> Result<()> {
    match suite {
        Suite::Peer => peer::run(ctx, peer),
        Suite::Ordering => ordering::run(ctx),
        Suite::Record => record::run(ctx),
        Suite::Latency => latency::run(ctx),
        Suite::Allocation => allocation::run(ctx),
        Suite::Multiblock => multiblock::run(ctx),
        Suite::Nvcache => nvcache::run(ctx),
        Suite::Flash => flash::run(ctx),
        Suite::Mcsim => mcsim::run(ctx),
    }
}

/// The targets a suite checks against this run's (merged) rows.
fn suite_targets(suite: Suite, rows: &[BenchResult]) -> Vec<Target> {
    match suite {
        Suite::Peer => peer::targets(rows),
        Suite::Record => record::targets(rows),
        Suite::Multiblock => multiblock::targets(rows),
        Suite::Nvcache => nvcache::targets(rows),
        Suite::Flash => flash::targets(rows),
        Suite::Mcsim => mcsim::targets(rows),
        Suite::Ordering | Suite::Latency | Suite::Allocation => Vec::new(),
    }
}

/// One suite on one place, `--repeat` times, its runs merged into `ctx.results` (each row's
/// median of runs) and its baselines linked; returns its targets, the suite's own first.
fn suite_on_place(ctx: &mut Ctx, suite: Suite, peer: Option<&peer::Peer>) -> Result<Vec<Target>> {
    let mut runs = Vec::new();
    for _ in 0..ctx.opts.repeat {
        run_suite(suite, ctx, peer)?;
        runs.push(std::mem::take(&mut ctx.results));
    }
    ctx.results = merge_runs(runs);
    link_baselines(&mut ctx.results);
    let t = suite_targets(suite, &ctx.results);
    let mut targets = std::mem::take(&mut ctx.targets);
    targets.extend(t);
    Ok(targets)
}

/// The nvramdisk's default ordering policy and the method of each of its writes.
fn default_ordering_label() -> Result<String> {
    let o = pmem_ordering::policy_by_name(pmem_ordering::DEFAULT_POLICY)?;
    Ok(format!(
        "{} (data {}, map {}, journal {})",
        o.name,
        o.data.name(),
        o.map.name(),
        o.journal.name()
    ))
}

/// Run the selected suites on every place and return the report. Image files are removed
/// and the huge-page tmpfs unmounted before returning, on errors too.
pub fn run(opts: &BenchOptions, progress: &dyn Progress) -> Result<BenchReport> {
    validate(opts)?;
    let started = Instant::now();
    let mut notes = Vec::new();
    // Load the peer before any thread exists (it may set PMEM_IS_PMEM_FORCE).
    let peer = if opts.suites.contains(&Suite::Peer) {
        peer::load_peer(&mut notes)
    } else {
        None
    };
    let places = place::places(&opts.dir, opts.huge, HUGE_TMPFS_BYTES, &mut notes)?;
    let dram = measure_dram_latency();
    let mut results = Vec::new();
    let mut targets = Vec::new();
    for suite in &opts.suites {
        for pl in &places {
            let mut ctx = Ctx {
                opts,
                place: pl,
                results: Vec::new(),
                targets: Vec::new(),
                notes: Vec::new(),
                dram,
                progress,
            };
            targets.extend(suite_on_place(&mut ctx, *suite, peer.as_ref())?);
            for n in ctx.notes.drain(..) {
                if !notes.contains(&n) {
                    notes.push(n);
                }
            }
            results.append(&mut ctx.results);
        }
    }
    Ok(BenchReport {
        suites: opts.suites.clone(),
        results,
        targets,
        places: places
            .iter()
            .map(|p| PlaceInfo {
                file_system: p.label(),
                huge: p.huge,
            })
            .collect(),
        notes,
        dram_store_latency_ns: dram.line_ns,
        dram_stream_ns_per_line: dram.stream_ns_per_line,
        cpu_flush: cpu::best_flush().name().to_string(),
        nt_copy: cpu::nt_copy_name().to_string(),
        default_ordering: default_ordering_label()?,
        libpmemblk_persist_method: peer.as_ref().map(|p| p.persist_method.clone()),
        span_bytes: opts.size_bytes,
        host_cpu: host_cpu(),
        ops: opts
            .ops
            .unwrap_or(if opts.quick { OPS_QUICK } else { OPS_DEFAULT }),
        quick: opts.quick,
        seed: opts.seed,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Write each suite's figures into `dir` (created if missing); returns the files written.
pub fn write_plots(r: &BenchReport, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::env(format!("{}: cannot create: {e}", dir.display())))?;
    plots::write_all(r, dir)
}

/// The page size a suite's section and targets name: the simulator suite maps nothing, so
/// its rows' page size of 0 means "no mapping", not "unknown".
fn page_label_of(suite: &str, b: u64) -> String {
    if suite == Suite::Mcsim.name() {
        assert_eq!(b, 0, "the simulator suite maps no image");
        "simulated: no mapping".into()
    } else {
        page_label(b)
    }
}

fn page_label(b: u64) -> String {
    if b >= 1 << 20 {
        format!("{} MiB pages", b >> 20)
    } else if b > 0 {
        format!("{} KiB pages", b >> 10)
    } else {
        "page size unknown".into()
    }
}

fn bytes_label(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else if b >= 1024 && b.is_multiple_of(1024) {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} B")
    }
}

fn ratio(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.2}"))
}

/// One row of a suite's table.
fn row_cells(x: &BenchResult) -> Vec<String> {
    vec![
        x.name.clone(),
        x.op.to_string(),
        bytes_label(x.block_bytes),
        x.x.map_or_else(|| "-".into(), |v| format!("{v}")),
        x.threads.to_string(),
        x.persist_method.clone(),
        fmt_count(x.ops_per_sec),
        format!("{:.0}", x.mb_per_sec),
        format!("{:.0}", x.median_ns),
        format!("{:.0}", x.p99_ns),
        ratio(x.fences_per_op),
        x.baseline.clone().unwrap_or_else(|| "-".into()),
        ratio(x.time_ratio),
        ratio(x.throughput_ratio),
    ]
}

/// The report as aligned text tables: one per suite and page size, then the targets.
pub fn format_table(r: &BenchReport) -> String {
    let mut s = suite_tables(r);
    s.push_str(&targets_table(r));
    s.push_str(&footer(r));
    s
}

/// One table per suite and page size, each followed by its rows' notes.
fn suite_tables(r: &BenchReport) -> String {
    let mut s = String::new();
    let header = [
        "row",
        "op",
        "size",
        "x",
        "thr",
        "persist",
        "ops/s",
        "MB/s",
        "median ns",
        "p99 ns",
        "fences",
        "vs",
        "time x",
        "thrpt x",
    ];
    let right = [
        false, false, true, true, true, false, true, true, true, true, true, false, true, true,
    ];
    for suite in &r.suites {
        let pages = page_sizes(r.results.iter().filter(|x| x.suite == suite.name()));
        for page in pages {
            s.push_str(&format!(
                "== {}: {} ({}) ==\n",
                suite.name(),
                suite.what(),
                page_label_of(suite.name(), page)
            ));
            let cells: Vec<Vec<String>> = r
                .results
                .iter()
                .filter(|x| x.suite == suite.name() && x.page_bytes == page)
                .map(row_cells)
                .collect();
            s.push_str(&render(&header, &cells, &right));
            s.push_str(&row_notes(r, suite.name(), page));
            s.push('\n');
        }
    }
    s
}

/// The targets' table, if any target was checked.
fn targets_table(r: &BenchReport) -> String {
    let mut s = String::new();
    if !r.targets.is_empty() {
        let cells: Vec<Vec<String>> = r
            .targets
            .iter()
            .map(|t| {
                vec![
                    t.suite.to_string(),
                    page_label_of(t.suite, t.page_bytes),
                    t.what.clone(),
                    format!("{:.2}", t.measured),
                    format!("{} {:.2}", t.bound, t.limit),
                    if t.met { "met" } else { "MISSED" }.to_string(),
                ]
            })
            .collect();
        s.push_str(&render(
            &["target", "pages", "what", "measured", "bound", ""],
            &cells,
            &[false, false, false, true, false, false],
        ));
        s.push('\n');
    }
    s
}

/// The host's CPU model (the first `model name` of /proc/cpuinfo) and its logical CPUs.
fn host_cpu() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = text
        .lines()
        .find_map(|l| {
            let (key, value) = l.split_once(':')?;
            (key.trim() == "model name").then(|| value.trim().to_string())
        })
        .unwrap_or_else(|| "model unknown".into());
    format!("{model}, {cpus} logical CPUs")
}

/// What the columns mean, the run's settings and machine, its notes and its duration.
fn footer(r: &BenchReport) -> String {
    let mut s = String::new();
    s.push_str(
        "time x = median latency / the baseline's (vs); thrpt x = ops/s / the baseline's; \
         fences = fences per op, from the device's own counters\n",
    );
    // The simulator suite maps no image and persists nothing: the span, the DRAM persist
    // cost, the flush instructions and the places apply to the other suites only; the
    // simulator's speed depends on the host CPU.
    if r.suites.iter().any(|s| *s != Suite::Mcsim) {
        s.push_str(&pmem_header(r));
    }
    if r.suites.contains(&Suite::Mcsim) {
        s.push_str(&format!("host cpu {}\n", r.host_cpu));
    }
    for n in &r.notes {
        s.push_str(&format!("note: {n}\n"));
    }
    s.push_str(&format!("total {:.1} s\n", r.seconds));
    s
}

/// The pmem suites' settings and machine: span, DRAM persist cost, flush instructions, places.
fn pmem_header(r: &BenchReport) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "span {} (random offsets uniform over it), {} timed 4 KiB ops per row{}, seed {}; \
         DRAM: {:.0} ns to persist one 64 B line, {:.1} ns per further line of a 4 KiB persist\n\
         cpu flush {}, nt copy {}; nvramdisk default ordering {}\n",
        bytes_label(r.span_bytes),
        r.ops,
        if r.quick { " (--quick)" } else { "" },
        r.seed,
        r.dram_store_latency_ns,
        r.dram_stream_ns_per_line,
        r.cpu_flush,
        r.nt_copy,
        r.default_ordering,
    ));
    if let Some(m) = &r.libpmemblk_persist_method {
        s.push_str(&format!("libpmemblk persists with: {m}\n"));
    }
    for p in &r.places {
        s.push_str(&format!("ran on {}\n", p.file_system));
    }
    s
}

/// The notes of a suite's rows on one page size, each row name once.
fn row_notes(r: &BenchReport, suite: &str, page: u64) -> String {
    let mut seen: Vec<(&str, &str)> = Vec::new();
    let mut s = String::new();
    for x in r
        .results
        .iter()
        .filter(|x| x.suite == suite && x.page_bytes == page)
    {
        let Some(n) = &x.note else { continue };
        if !seen.contains(&(x.name.as_str(), n.as_str())) {
            seen.push((&x.name, n));
            s.push_str(&format!("  {}: {n}\n", x.name));
        }
    }
    s
}

/// Print [`format_table`] to stdout.
pub fn print_table(r: &BenchReport) {
    print!("{}", format_table(r));
}
