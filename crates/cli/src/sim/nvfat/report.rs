//! The figures of seed 004 from the replays: tables for people, `--json`, SVG.

use super::changed::ChangedStats;
use super::engine::{AdmissionCheck, AdmitKind, Device, Mode, Outcome};
use super::fatcount::KindCounts;
use super::input::{HostTime, Input, OpCounts};
use nvstack_core::error::{Error, Result};
use nvstack_core::report::{fmt_count, render};
use nvstack_flash::ftl::FtlKind;
use nvstack_nvcache::write::format::DestagePolicy;
use nvstack_plot::{LineChart, Scale, Series};
use std::path::{Path, PathBuf};

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

    /// The write side's verdicts, as both sweeps print them.
    fn describe(&self) -> String {
        format!(
            "time {}, energy {}, erase mean {}, erase sd {}, programs {}",
            self.exec_falls,
            self.energy_falls,
            self.erase_mean_falls,
            self.erase_sd_falls,
            self.programs_fall
        )
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
    fn of(ps: &[Point]) -> Ratios {
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
    #[serde(skip)]
    keep: Vec<Outcome>,
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

    pub fn print(&self) -> Result<()> {
        let h = &self.host;
        let q = &self.requests;
        crate::say!(
            "trace {}: {} reads ({} sectors), {} writes ({} sectors), {} flushes, {} discards",
            self.trace,
            fmt_count(q.reads as f64),
            fmt_count(q.read_blocks as f64),
            fmt_count(q.writes as f64),
            fmt_count(q.write_blocks as f64),
            q.flushes,
            q.discards
        )?;
        crate::say!(
            "host time {:.3} s ({}: run CPU {} s, device waits {:.3} s, trace span {:.3} s); \
             execution time = host time + the device time the application waits for",
            h.host_ns as f64 * 1e-9,
            h.source,
            h.run_cpu_ns
                .map_or("-".into(), |c| format!("{:.3}", c as f64 * 1e-9)),
            h.device_wait_ns as f64 * 1e-9,
            h.trace_span_ns as f64 * 1e-9
        )?;
        self.print_sweep()?;
        self.print_changed()?;
        self.print_comparison()?;
        self.print_hot()?;
        self.print_beyond()?;
        if let Some(a) = &self.admission {
            crate::say!(
                "\nFAT-metadata admission (independent FAT-layout counter, {} KiB run): {} of {} \
                 metadata sector writes admitted ({:.3} %); {} file-data sector writes admitted; \
                 {} directory sectors at the end",
                self.comparison.top_kib,
                fmt_count(a.caught as f64),
                fmt_count(a.metadata_writes as f64),
                a.caught_pct,
                fmt_count(a.admitted_data as f64),
                a.directory_sectors_at_end
            )?;
        }
        crate::say!("{} replays in {:.1} s", self.runs.len(), self.seconds)
    }

    fn print_sweep(&self) -> Result<()> {
        crate::say!("\nFigures 4, 7, 8 (log-block FTL, LRW destage, FAT-metadata admission):")?;
        let mut cells = Vec::new();
        for (i, p) in self.sync.points.iter().enumerate() {
            let a = self.r#async.points.get(i);
            cells.push(vec![
                format!("{} KiB", p.kib),
                format!("{:.1}", p.exec_s),
                a.map_or("-".into(), |a| format!("{:.1}", a.exec_s)),
                format!("{:.1}", self.vfat_async.exec_s),
                format!("{:.3}", p.erase_mean),
                format!("{:.3}", p.erase_sd),
                format!("{:.3}", p.energy_j),
                a.map_or("-".into(), |a| format!("{:.3}", a.energy_j)),
                format!("{:.1}", p.page_cache_exec_s),
                format!("{:.3}", p.page_cache_energy_j),
                fmt_count(p.page_reads as f64),
                fmt_count(p.host_page_writes as f64),
                fmt_count(p.page_programs as f64),
                fmt_count(p.block_erases as f64),
            ]);
        }
        let hdr = [
            "NVRAM",
            "sync s",
            "async s",
            "VFAT async s",
            "erase mean",
            "erase sd",
            "sync J",
            "async J",
            "sync+pc s",
            "sync+pc J",
            "page reads",
            "FTL writes",
            "programs",
            "erases",
        ];
        let mut right = vec![true; hdr.len()];
        right[0] = false;
        crate::output::out(render(&hdr, &cells, &right).as_bytes())?;
        let t = &self.trends;
        crate::say!(
            "(sync+pc: Sync-PostMark with a page cache for reads, as the seed's VFAT read \
             through Linux's buffer cache; page reads: the raw sync run's flash page reads)\n\
             falls with NVRAM size (sync): {}; async time {}; sync+pc time {}, energy {}",
            t.sync.describe(),
            t.async_exec_falls,
            t.sync.page_cache_exec_falls,
            t.sync.page_cache_energy_falls
        )
    }

    /// The changed-sector view's sweep, beside the raw one above, and what it dropped.
    fn print_changed(&self) -> Result<()> {
        let (line, t) = (&self.sync_changed, &self.trends.changed);
        crate::say!(
            "\nThe same, changed-sector view (sync changed: only the sectors whose bytes a write \
             changed reach the device, as the seed's VFAT wrote its dirty buffers; docs/nvfat.md):"
        )?;
        let cells: Vec<Vec<String>> = line
            .points
            .iter()
            .map(|p| {
                vec![
                    format!("{} KiB", p.kib),
                    format!("{:.1}", p.exec_s),
                    format!("{:.3}", p.erase_mean),
                    format!("{:.3}", p.erase_sd),
                    format!("{:.3}", p.energy_j),
                    format!("{:.1}", p.page_cache_exec_s),
                    format!("{:.3}", p.page_cache_energy_j),
                    fmt_count(p.page_reads as f64),
                    fmt_count(p.host_page_writes as f64),
                    fmt_count(p.page_programs as f64),
                    fmt_count(p.block_erases as f64),
                    format!("{}/{}/{}", p.switch_merges, p.partial_merges, p.full_merges),
                ]
            })
            .collect();
        let hdr = [
            "NVRAM",
            "sync s",
            "erase mean",
            "erase sd",
            "sync J",
            "sync+pc s",
            "sync+pc J",
            "page reads",
            "FTL writes",
            "programs",
            "erases",
            "merges s/p/f",
        ];
        let mut right = vec![true; hdr.len()];
        right[0] = false;
        crate::output::out(render(&hdr, &cells, &right).as_bytes())?;
        self.print_changed_counts()?;
        crate::say!(
            "falls with NVRAM size (sync changed): {}; sync changed+pc time {}, energy {}",
            t.describe(),
            t.page_cache_exec_falls,
            t.page_cache_energy_falls
        )
    }

    fn print_changed_counts(&self) -> Result<()> {
        let v = &self.changed_view;
        let st = &v.stats;
        crate::say!(
            "sync changed drops {} of {} sector writes (bytes unchanged); {} of {} write \
             requests changed nothing (no device time; their host time kept, which is \
             conservative), {} were partly changed (written as their changed runs): {} \
             requests in the view",
            fmt_count(st.sectors_dropped as f64),
            fmt_count(st.sectors_written as f64),
            fmt_count(st.requests_unchanged as f64),
            fmt_count(st.write_requests as f64),
            fmt_count(st.requests_partly_changed as f64),
            fmt_count(st.runs as f64)
        )?;
        if let Some(k) = &v.raw_kinds {
            crate::say!(
                "independent counter (its own copy of the volume, {} KiB raw run): {} changed \
                 sector writes; unchanged: FAT {} of {}, directory {} of {}, reserved {} of {}, \
                 data {} of {}",
                self.comparison.top_kib,
                fmt_count(k.changed() as f64),
                fmt_count(k.fat_unchanged as f64),
                fmt_count(k.fat as f64),
                fmt_count(k.directory_unchanged as f64),
                fmt_count(k.directory as f64),
                fmt_count(k.reserved_unchanged as f64),
                fmt_count(k.reserved as f64),
                fmt_count(k.data_unchanged as f64),
                fmt_count(k.data as f64)
            )?;
        }
        if let Some(k) = &v.view_kinds {
            crate::say!(
                "the view's {} KiB run wrote {} sectors (FAT {}, directory {}, reserved {}, data \
                 {}), {} of them unchanged by the independent counter",
                self.comparison.top_kib,
                fmt_count(k.written() as f64),
                fmt_count(k.fat as f64),
                fmt_count(k.directory as f64),
                fmt_count(k.reserved as f64),
                fmt_count(k.data as f64),
                k.unchanged()
            )?;
        }
        Ok(())
    }

    fn print_comparison(&self) -> Result<()> {
        let c = &self.comparison;
        crate::say!(
            "\nOurs beside the seed's (Sync-PostMark, 0 KiB against {} KiB):",
            c.top_kib
        )?;
        // The seed's two values, printed with the precision the seed gives them (whole
        // seconds, tenths of a joule), and their ratio.
        let seed_exec = (c.seed_exec_s, 0, c.seed_exec_ratio);
        let seed_energy = (c.seed_energy_j, 1, c.seed_energy_ratio);
        // The JSON keeps the raw ratios flat under their first names; the rows are built from
        // the same `Ratios` as the view's.
        let raw = Ratios::of(&self.sync.points);
        let mut cells = ratio_rows(RAW_LABELS, &raw, seed_exec, seed_energy);
        cells.push(vec![
            "Async-PostMark time".into(),
            format!("{:.1} s -> {:.1} s", c.async_exec_s.0, c.async_exec_s.1),
            format!("VFAT {:.1} s", c.vfat_async_exec_s),
            "NVFAT beats VFAT by 32.5 % at 128 KB".into(),
            "-".into(),
        ]);
        cells.extend(ratio_rows(
            CHANGED_LABELS,
            &c.changed,
            seed_exec,
            seed_energy,
        ));
        let hdr = ["quantity", "ours", "ratio", "seed", "seed ratio"];
        crate::output::out(render(&hdr, &cells, &[false, true, true, true, true]).as_bytes())
    }

    fn print_hot(&self) -> Result<()> {
        crate::say!("\nFigures 5 and 6 (Sync-PostMark): the hottest logical pages and programs per physical page")?;
        let cells: Vec<Vec<String>> = self
            .hot
            .iter()
            .map(|h| {
                vec![
                    format!("{} KiB", h.kib),
                    h.top
                        .iter()
                        .map(|(l, w)| format!("{l}:{w}"))
                        .collect::<Vec<_>>()
                        .join(" "),
                    fmt_count(f64::from(h.logical_writes_max)),
                    fmt_count(f64::from(h.physical_programs_max)),
                    fmt_count(h.pages_programmed_over_54 as f64),
                ]
            })
            .collect();
        let hdr = [
            "NVRAM",
            "hottest LBNs (lbn:writes)",
            "max writes/LBN",
            "max programs/page",
            "pages > 54 programs",
        ];
        crate::output::out(render(&hdr, &cells, &[false, false, true, true, true]).as_bytes())
    }

    fn print_beyond(&self) -> Result<()> {
        let mut lines: Vec<&Line> = self.policies.iter().collect();
        lines.extend(self.admit_all.iter());
        lines.extend(self.page_ftl.iter());
        if lines.is_empty() {
            return Ok(());
        }
        crate::say!(
            "\nBeyond the seed (Sync-PostMark): destage policies, --admit all, the page-mapped FTL"
        )?;
        let mut cells = Vec::new();
        for l in lines {
            for p in &l.points {
                cells.push(vec![
                    l.name.clone(),
                    format!("{} KiB", p.kib),
                    format!("{:.1}", p.exec_s),
                    format!("{:.3}", p.energy_j),
                    format!("{:.3}", p.erase_sd),
                    fmt_count(p.page_programs as f64),
                    fmt_count(p.destaged as f64),
                ]);
            }
        }
        let hdr = [
            "run", "NVRAM", "time s", "energy J", "erase sd", "programs", "destaged",
        ];
        let mut right = vec![true; hdr.len()];
        right[0] = false;
        right[1] = false;
        crate::output::out(render(&hdr, &cells, &right).as_bytes())?;
        if let Some(v) = &self.page_ftl_vfat_async {
            crate::say!(
                "page-mapped FTL, VFAT Async-PostMark: {:.1} s, {:.3} J",
                v.exec_s,
                v.energy_j
            )?;
        }
        Ok(())
    }
}

/// Per-page figures thin their points as `sim flash`'s do (the maximum of each run of pages).
use crate::sim::flash::peaks;

/// The x position of a size: its step of the seed's axis (0, 1, 2, 4, ... KiB evenly spaced).
fn step(kib: u64) -> f64 {
    if kib == 0 {
        0.0
    } else {
        (kib as f64).log2() + 1.0
    }
}

fn series(name: &str, ps: &[Point], q: impl Fn(&Point) -> f64) -> Series {
    Series {
        name: name.into(),
        points: ps.iter().map(|p| (step(p.kib), q(p))).collect(),
    }
}

const X_LABEL: &str = "NVRAM size (step: 0 = none, k = 2^(k-1) KiB; 8 = 128 KiB)";

fn chart(title: &str, x: &str, y: &str, y_scale: Scale, series: Vec<Series>) -> LineChart {
    LineChart {
        title: title.into(),
        x_label: x.into(),
        y_label: y.into(),
        x_scale: Scale::Linear,
        y_scale,
        series,
    }
}

fn flat(name: &str, ps: &[Point], v: f64) -> Series {
    Series {
        name: name.into(),
        points: ps.iter().map(|p| (step(p.kib), v)).collect(),
    }
}

/// The changed-sector view's lines of Figures 4, 7 and 8 (in that order).
fn changed_series(c: &[Point], figs: [&mut Vec<Series>; 3]) {
    let [time, erases, energy] = figs;
    time.push(series("NVFAT Sync-PostMark, changed sectors", c, |p| {
        p.exec_s
    }));
    time.push(series(
        "NVFAT Sync-PostMark, changed + page cache",
        c,
        |p| p.page_cache_exec_s,
    ));
    erases.push(series("mean, changed sectors", c, |p| p.erase_mean));
    erases.push(series("standard deviation, changed sectors", c, |p| {
        p.erase_sd
    }));
    energy.push(series("Sync-PostMark, changed sectors", c, |p| p.energy_j));
    energy.push(series("Sync-PostMark, changed + page cache", c, |p| {
        p.page_cache_energy_j
    }));
}

/// Figures 4, 7 and 8: the raw lines, and the changed-sector view's beside them.
fn sweep_charts(r: &Report) -> Vec<(&'static str, LineChart)> {
    let (s, a) = (&r.sync.points, &r.r#async.points);
    let c = &r.sync_changed.points;
    let mut time = vec![
        series("NVFAT Sync-PostMark", s, |p| p.exec_s),
        flat("VFAT Sync-PostMark", s, s[0].exec_s),
        series("NVFAT Sync-PostMark, page cache", s, |p| {
            p.page_cache_exec_s
        }),
        flat("VFAT Sync-PostMark, page cache", s, s[0].page_cache_exec_s),
        series("NVFAT Async-PostMark", a, |p| p.exec_s),
        flat("VFAT Async-PostMark", s, r.vfat_async.exec_s),
    ];
    let mut erases = vec![
        series("mean", s, |p| p.erase_mean),
        series("standard deviation", s, |p| p.erase_sd),
    ];
    let mut energy = vec![
        series("Sync-PostMark", s, |p| p.energy_j),
        series("Sync-PostMark, page cache", s, |p| p.page_cache_energy_j),
        series("Async-PostMark", a, |p| p.energy_j),
    ];
    changed_series(c, [&mut time, &mut erases, &mut energy]);
    vec![
        (
            "nvfat-fig4-time.svg",
            chart(
                "Execution time against NVRAM size (seed 004 Fig. 4)",
                X_LABEL,
                "execution time (s)",
                Scale::Log10,
                time,
            ),
        ),
        (
            "nvfat-fig7-erases.svg",
            chart(
                "Erase count per block against NVRAM size (seed 004 Fig. 7)",
                X_LABEL,
                "erases per block",
                Scale::Linear,
                erases,
            ),
        ),
        (
            "nvfat-fig8-energy.svg",
            chart(
                "Flash energy against NVRAM size (seed 004 Fig. 8)",
                X_LABEL,
                "energy (J)",
                Scale::Linear,
                energy,
            ),
        ),
    ]
}

/// Beyond the seed: every policy, `--admit all` and the page-mapped FTL (none: no chart).
fn beyond_chart(r: &Report) -> Option<(&'static str, LineChart)> {
    if r.policies.is_empty() {
        return None;
    }
    let ss: Vec<Series> = r
        .policies
        .iter()
        .chain(r.admit_all.iter())
        .chain(r.page_ftl.iter())
        .map(|l| series(&l.name, &l.points, |p| p.energy_j))
        .collect();
    Some((
        "nvfat-beyond-energy.svg",
        chart(
            "Beyond the seed: flash energy (Sync-PostMark)",
            X_LABEL,
            "energy (J)",
            Scale::Linear,
            ss,
        ),
    ))
}

/// Figures 5 and 6: per logical block and per physical page, without and with the most NVRAM.
fn per_page_charts(r: &Report) -> Vec<(&'static str, LineChart)> {
    let per_page = |f: &dyn Fn(&Outcome) -> &[u32]| -> Vec<Series> {
        r.keep
            .iter()
            .map(|o| Series {
                name: if o.job.nvram_bytes == 0 {
                    "VFAT (no NVRAM)".into()
                } else {
                    format!("NVFAT {} KiB", o.job.nvram_bytes / 1024)
                },
                points: peaks(f(o)),
            })
            .collect()
    };
    vec![
        (
            "nvfat-fig5-ftl-writes.svg",
            chart(
                "Writes per logical block seen by the FTL, Sync-PostMark (seed 004 Fig. 5)",
                "logical block number",
                "writes (max over neighbouring blocks)",
                Scale::Linear,
                per_page(&|o| &o.logical_writes),
            ),
        ),
        (
            "nvfat-fig6-flash-programs.svg",
            chart(
                "Programs per physical page, Sync-PostMark (seed 004 Fig. 6)",
                "physical page",
                "programs (max over neighbouring pages)",
                Scale::Linear,
                per_page(&|o| &o.page_programs),
            ),
        ),
    ]
}

pub fn figures(dir: &Path, r: &Report) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::env(format!("--plot {}: cannot create: {e}", dir.display())))?;
    let mut charts = sweep_charts(r);
    charts.extend(beyond_chart(r));
    charts.extend(per_page_charts(r));
    let mut out = Vec::new();
    for (file, c) in charts {
        let p = dir.join(file);
        c.write_svg(&p)?;
        out.push(p);
    }
    Ok(out)
}

/// The comparison table's labels of a line's five rows (time, energy, time and energy with
/// the page cache, erases), raw and in the changed-sector view.
const RAW_LABELS: [&str; 5] = [
    "execution time",
    "flash energy",
    "time, page cache",
    "energy, page cache",
    "erase count mean / sd",
];
const CHANGED_LABELS: [&str; 5] = [
    "time, changed",
    "energy, changed",
    "time, changed + pc",
    "energy, changed + pc",
    "erase mean / sd, changed",
];

/// A line's rows of the comparison table, beside the seed's.
fn ratio_rows(
    labels: [&str; 5],
    r: &Ratios,
    seed_exec: ((f64, f64), usize, f64),
    seed_energy: ((f64, f64), usize, f64),
) -> Vec<Vec<String>> {
    let [time, energy, pc_time, pc_energy, erases] = labels;
    vec![
        seed_row(time, "s", 1, r.exec_s, r.exec_ratio, seed_exec),
        seed_row(energy, "J", 3, r.energy_j, r.energy_ratio, seed_energy),
        seed_row(
            pc_time,
            "s",
            1,
            r.page_cache_exec_s,
            r.page_cache_exec_ratio,
            seed_exec,
        ),
        seed_row(
            pc_energy,
            "J",
            3,
            r.page_cache_energy_j,
            r.page_cache_energy_ratio,
            seed_energy,
        ),
        vec![
            erases.into(),
            format!(
                "{:.2}/{:.2} -> {:.2}/{:.2}",
                r.erase_mean.0, r.erase_sd.0, r.erase_mean.1, r.erase_sd.1
            ),
            format!("sd {:.2}x", r.erase_sd_ratio),
            "both fall (Fig. 7)".into(),
            "-".into(),
        ],
    ]
}

/// One row of the comparison table: ours from and to (with `prec` decimals) and the ratio,
/// beside the seed's values (with their own decimals) and ratio.
fn seed_row(
    label: &str,
    unit: &str,
    prec: usize,
    ours: (f64, f64),
    ratio: f64,
    seed: ((f64, f64), usize, f64),
) -> Vec<String> {
    let ((from, to), seed_prec, seed_ratio) = seed;
    vec![
        label.into(),
        format!(
            "{from:.prec$} {unit} -> {to:.prec$} {unit}",
            from = ours.0,
            to = ours.1
        ),
        format!("{ratio:.2}x"),
        format!("{from:.seed_prec$} {unit} -> {to:.seed_prec$} {unit}"),
        format!("{seed_ratio:.1}x"),
    ]
}
