//! The figures of seed 004 from the replays, as data (the program prints them as tables,
//! `--json` and SVG): the lines against NVRAM size, their trends and ratios, ours beside the
//! seed's numbers, the hottest pages, the runs beyond the seed.

use super::changed::ChangedStats;
use super::engine::{AdmissionCheck, AdmitKind, DestagePolicy, Device, Mode, Outcome};
use super::fatcount::KindCounts;
use super::input::{HostTime, Input, OpCounts};
use nvstack_flash::ftl::FtlKind;
use std::path::PathBuf;

/// The seed's numbers (Sync-PostMark, log-block FTL, 0 against 128 KB of NVRAM).
pub const SEED_EXEC_S: (f64, f64) = (14_883.0, 1_096.0);
pub const SEED_ENERGY_J: (f64, f64) = (114.2, 7.9);

/// One replay, summarised.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Point {
    pub kib: u64,
    pub exec_s: f64,
    pub energy_j: f64,
    pub erase_mean: f64,
    pub erase_sd: f64,
    pub block_erases: u64,
    pub page_programs: u64,
    pub host_page_writes: u64,
    pub logical_writes_max: u32,
    pub physical_programs_max: u32,
    pub nvram_sector_writes: u64,
    pub destaged: u64,
    pub bypassed: u64,
    /// Sync-PostMark with a page cache for reads (engine.rs `PageCache`); the raw figure
    /// otherwise.
    pub page_cache_exec_s: f64,
    pub page_cache_energy_j: f64,
    pub page_reads: u64,
    pub switch_merges: u64,
    pub partial_merges: u64,
    pub full_merges: u64,
    pub merge_copies: u64,
    pub erase_max: u32,
    pub blocks_erased: u64,
}

fn point(o: &Outcome) -> Point {
    let f = &o.flash;
    Point {
        kib: o.job.nvram_bytes / 1024,
        exec_s: o.exec_ns as f64 * 1e-9,
        energy_j: f.energy_j,
        erase_mean: f.erase_mean,
        erase_sd: f.erase_sd,
        block_erases: f.block_erases,
        page_programs: f.page_programs,
        host_page_writes: f.stats.host_page_writes,
        logical_writes_max: f.logical_writes_max,
        physical_programs_max: f.physical_programs_max,
        nvram_sector_writes: o.nvram_sector_writes,
        destaged: o.destaged,
        bypassed: o.bypassed,
        page_cache_exec_s: o.page_cache.map_or(o.exec_ns, |c| c.exec_ns) as f64 * 1e-9,
        page_cache_energy_j: o.page_cache.map_or(f.energy_j, |c| c.energy_j),
        page_reads: f.page_reads,
        switch_merges: f.merges.switch,
        partial_merges: f.merges.partial,
        full_merges: f.merges.full,
        merge_copies: f.merges.copies,
        erase_max: f.erase_max,
        blocks_erased: o.blocks_erased,
    }
}

/// A named series of points against NVRAM size.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Line {
    pub name: String,
    pub points: Vec<Point>,
}

/// Whether each figure's quantity never rises with NVRAM size (log-block, LRW).
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Trends {
    /// Sync-PostMark's (flattened: the JSON keeps these keys at the top of `trends`).
    #[serde(flatten)]
    pub sync: LineTrends,
    pub async_exec_falls: bool,
    /// The same of the changed-sector view (`sync_changed`).
    pub changed: LineTrends,
}

/// Whether each quantity of a synchronous line never rises with NVRAM size.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct LineTrends {
    pub exec_falls: bool,
    pub energy_falls: bool,
    pub erase_mean_falls: bool,
    pub erase_sd_falls: bool,
    pub programs_fall: bool,
    pub page_cache_exec_falls: bool,
    pub page_cache_energy_falls: bool,
}

impl LineTrends {
    fn of(ps: &[Point]) -> LineTrends {
        LineTrends {
            exec_falls: falls(ps, |p| p.exec_s),
            energy_falls: falls(ps, |p| p.energy_j),
            erase_mean_falls: falls(ps, |p| p.erase_mean),
            erase_sd_falls: falls(ps, |p| p.erase_sd),
            programs_fall: falls(ps, |p| p.page_programs as f64),
            page_cache_exec_falls: falls(ps, |p| p.page_cache_exec_s),
            page_cache_energy_falls: falls(ps, |p| p.page_cache_energy_j),
        }
    }
}

/// A line's figures at 0 and at the largest size, and their ratios.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Ratios {
    pub exec_s: (f64, f64),
    pub exec_ratio: f64,
    pub energy_j: (f64, f64),
    pub energy_ratio: f64,
    pub erase_mean: (f64, f64),
    pub erase_sd: (f64, f64),
    pub erase_sd_ratio: f64,
    pub page_cache_exec_s: (f64, f64),
    pub page_cache_exec_ratio: f64,
    pub page_cache_energy_j: (f64, f64),
    pub page_cache_energy_ratio: f64,
}

impl Ratios {
    /// From a line's points (sorted by size; the first is 0 KiB).
    pub fn of(ps: &[Point]) -> Ratios {
        let (a, b) = (ps[0], *ps.last().expect("0 is always run"));
        Ratios {
            exec_s: (a.exec_s, b.exec_s),
            exec_ratio: a.exec_s / b.exec_s,
            energy_j: (a.energy_j, b.energy_j),
            energy_ratio: a.energy_j / b.energy_j,
            erase_mean: (a.erase_mean, b.erase_mean),
            erase_sd: (a.erase_sd, b.erase_sd),
            erase_sd_ratio: a.erase_sd / b.erase_sd.max(f64::MIN_POSITIVE),
            page_cache_exec_s: (a.page_cache_exec_s, b.page_cache_exec_s),
            page_cache_exec_ratio: a.page_cache_exec_s / b.page_cache_exec_s,
            page_cache_energy_j: (a.page_cache_energy_j, b.page_cache_energy_j),
            page_cache_energy_ratio: a.page_cache_energy_j / b.page_cache_energy_j,
        }
    }
}

/// The changed-sector view's writes: the pre-pass's counts (changed.rs) and the independent
/// counter's (fatcount.rs) in the raw run that checks the admission (every sector write of
/// the trace, by kind, and the unchanged ones: those the view drops) and in the view's.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct ChangedView {
    #[serde(flatten)]
    pub stats: ChangedStats,
    pub raw_kinds: Option<KindCounts>,
    pub view_kinds: Option<KindCounts>,
}

/// Ours beside the seed's, 0 against the largest size run.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Comparison {
    pub top_kib: u64,
    pub sync_exec_s: (f64, f64),
    pub sync_exec_ratio: f64,
    pub energy_j: (f64, f64),
    pub energy_ratio: f64,
    pub erase_sd: (f64, f64),
    pub erase_mean: (f64, f64),
    pub async_exec_s: (f64, f64),
    pub vfat_async_exec_s: f64,
    pub seed_exec_s: (f64, f64),
    pub seed_exec_ratio: f64,
    pub seed_energy_j: (f64, f64),
    pub seed_energy_ratio: f64,
    /// The same with a page cache for reads (engine.rs `PageCache`).
    pub page_cache_exec_s: (f64, f64),
    pub page_cache_exec_ratio: f64,
    pub page_cache_energy_j: (f64, f64),
    pub page_cache_energy_ratio: f64,
    /// The changed-sector view's.
    pub changed: Ratios,
}

/// The hottest logical pages (Figure 5's columns).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Hot {
    pub kib: u64,
    pub top: Vec<(u64, u32)>,
    pub logical_writes_max: u32,
    pub physical_programs_max: u32,
    pub pages_programmed_over_54: u64,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Report {
    pub trace: String,
    pub host: HostTime,
    pub requests: OpCounts,
    pub device: Device,
    pub sync: Line,
    /// Sync-PostMark in the changed-sector view (changed.rs), beside the raw `sync`.
    pub sync_changed: Line,
    pub changed_view: ChangedView,
    pub r#async: Line,
    pub vfat_async: Point,
    pub trends: Trends,
    pub comparison: Comparison,
    pub hot: Vec<Hot>,
    pub policies: Vec<Line>,
    pub admit_all: Option<Line>,
    pub page_ftl: Option<Line>,
    pub page_ftl_vfat_async: Option<Point>,
    pub admission: Option<AdmissionCheck>,
    pub seconds: f64,
    pub runs: Vec<Outcome>,
    pub figures: Vec<String>,
    /// The runs that kept per-page counts (Figures 5 and 6).
    #[serde(skip)]
    pub keep: Vec<Outcome>,
}

fn line(name: &str, runs: &[Outcome], f: impl Fn(&Outcome) -> bool) -> Line {
    let mut points: Vec<Point> = runs.iter().filter(|o| f(o)).map(point).collect();
    points.sort_by_key(|p| p.kib);
    Line {
        name: name.into(),
        points,
    }
}

fn falls(ps: &[Point], q: impl Fn(&Point) -> f64) -> bool {
    ps.windows(2).all(|w| q(&w[1]) <= q(&w[0]))
}

fn hot(o: &Outcome) -> Hot {
    let mut top: Vec<(u64, u32)> = o
        .logical_writes
        .iter()
        .enumerate()
        .map(|(i, &w)| (i as u64, w))
        .collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    top.truncate(5);
    Hot {
        kib: o.job.nvram_bytes / 1024,
        top,
        logical_writes_max: o.flash.logical_writes_max,
        physical_programs_max: o.flash.physical_programs_max,
        pages_programmed_over_54: o.page_programs.iter().filter(|&&p| p > 54).count() as u64,
    }
}

fn is_seed(o: &Outcome, mode: Mode) -> bool {
    o.job.mode == mode
        && o.job.ftl == FtlKind::LogBlock
        && o.job.policy == DestagePolicy::Lrw
        && o.job.admit == AdmitKind::FatMetadata
}

fn trends(ps: &[Point], asy: &[Point], changed: &[Point]) -> Trends {
    Trends {
        sync: LineTrends::of(ps),
        async_exec_falls: falls(asy, |p| p.exec_s),
        changed: LineTrends::of(changed),
    }
}

fn comparison(ps: &[Point], asy: &[Point], vfat: &Point, changed: &[Point]) -> Comparison {
    let r = Ratios::of(ps);
    let (afirst, alast) = (asy[0], *asy.last().expect("0 is always run"));
    Comparison {
        top_kib: ps.last().expect("0 is always run").kib,
        sync_exec_s: r.exec_s,
        sync_exec_ratio: r.exec_ratio,
        energy_j: r.energy_j,
        energy_ratio: r.energy_ratio,
        erase_sd: r.erase_sd,
        erase_mean: r.erase_mean,
        async_exec_s: (afirst.exec_s, alast.exec_s),
        vfat_async_exec_s: vfat.exec_s,
        seed_exec_s: SEED_EXEC_S,
        seed_exec_ratio: SEED_EXEC_S.0 / SEED_EXEC_S.1,
        seed_energy_j: SEED_ENERGY_J,
        seed_energy_ratio: SEED_ENERGY_J.0 / SEED_ENERGY_J.1,
        page_cache_exec_s: r.page_cache_exec_s,
        page_cache_exec_ratio: r.page_cache_exec_ratio,
        page_cache_energy_j: r.page_cache_energy_j,
        page_cache_energy_ratio: r.page_cache_energy_ratio,
        changed: Ratios::of(changed),
    }
}

/// Beyond the seed: a line per destage policy, `--admit all` and the page-mapped FTL (each
/// with the 0 KiB run), and the page-mapped FTL's VFAT baseline.
struct Beyond {
    policies: Vec<Line>,
    admit_all: Option<Line>,
    page_ftl: Option<Line>,
    page_ftl_vfat_async: Option<Point>,
}

fn beyond(runs: &[Outcome]) -> Beyond {
    let sync_of = |p: DestagePolicy| {
        line(&format!("sync, {}", p.name()), runs, move |o| {
            o.job.mode == Mode::Sync
                && o.job.ftl == FtlKind::LogBlock
                && o.job.admit == AdmitKind::FatMetadata
                && (o.job.policy == p || o.job.nvram_bytes == 0)
        })
    };
    let policies: Vec<Line> = [
        DestagePolicy::Lrw,
        DestagePolicy::Lru,
        DestagePolicy::Clock,
        DestagePolicy::Random,
    ]
    .into_iter()
    .map(sync_of)
    .filter(|l| l.points.len() > 1)
    .collect();
    let admit_all = line("sync, --admit all", runs, |o| {
        o.job.mode == Mode::Sync
            && o.job.ftl == FtlKind::LogBlock
            && o.job.policy == DestagePolicy::Lrw
            && (o.job.admit == AdmitKind::All || o.job.nvram_bytes == 0)
    });
    let page = line("sync, page-mapped FTL", runs, |o| {
        o.job.mode == Mode::Sync && o.job.ftl == FtlKind::Page
    });
    Beyond {
        policies,
        admit_all: (admit_all.points.len() > 1).then_some(admit_all),
        page_ftl: (!page.points.is_empty()).then_some(page),
        page_ftl_vfat_async: runs
            .iter()
            .find(|o| o.job.mode == Mode::VfatAsync && o.job.ftl == FtlKind::Page)
            .map(point),
    }
}

impl Report {
    pub fn new(
        input: &Input,
        device: Device,
        view: ChangedStats,
        runs: Vec<Outcome>,
        took: std::time::Duration,
    ) -> Report {
        let sync = line("NVFAT Sync-PostMark", &runs, |o| is_seed(o, Mode::Sync));
        let changed = line("NVFAT Sync-PostMark, changed sectors", &runs, |o| {
            is_seed(o, Mode::SyncChanged)
        });
        let asy = line("NVFAT Async-PostMark", &runs, |o| is_seed(o, Mode::Async));
        let vfat = runs
            .iter()
            .find(|o| is_seed(o, Mode::VfatAsync))
            .map(point)
            .expect("the VFAT run is always made");
        let kinds = |m: Mode| runs.iter().filter(|o| is_seed(o, m)).find_map(|o| o.kinds);
        let keep: Vec<Outcome> = runs
            .iter()
            .filter(|o| !o.logical_writes.is_empty())
            .cloned()
            .collect();
        let b = beyond(&runs);
        Report {
            trace: input.trace.display().to_string(),
            host: input.host.clone(),
            requests: input.counts,
            device,
            trends: trends(&sync.points, &asy.points, &changed.points),
            comparison: comparison(&sync.points, &asy.points, &vfat, &changed.points),
            changed_view: ChangedView {
                stats: view,
                raw_kinds: kinds(Mode::Sync),
                view_kinds: kinds(Mode::SyncChanged),
            },
            hot: keep.iter().map(hot).collect(),
            policies: b.policies,
            admit_all: b.admit_all,
            page_ftl: b.page_ftl,
            page_ftl_vfat_async: b.page_ftl_vfat_async,
            admission: runs
                .iter()
                .filter(|o| is_seed(o, Mode::Sync))
                .find_map(|o| o.admission),
            seconds: took.as_secs_f64(),
            sync,
            sync_changed: changed,
            r#async: asy,
            vfat_async: vfat,
            runs,
            figures: Vec::new(),
            keep,
        }
    }

    pub fn with_figures(mut self, f: Vec<PathBuf>) -> Report {
        self.figures = f.iter().map(|p| p.display().to_string()).collect();
        self
    }
}
