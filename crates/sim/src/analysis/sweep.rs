//! The sweep: every analysis of seed 002 over a grid, for each trace of a plan, in parallel
//! (rayon): which runs reproduce which figure, the Figure 5 twin points, the LFS comparisons of
//! Tables 3 and 4, and the files they make (`sweep.csv`, `sweep.json`, `tables.txt`, the SVG
//! figures). `nvstack sim sweep` parses a [`SweepPlan`], calls [`sweep`] and prints the report.

use super::tables::{
    bus_table, fate_rows, fate_table, lfs_table, lifetimes_table, models_table, points_table,
    policies_table,
};
use super::{
    csv_table, delays_default_ns, lifetimes, model_points, nvram_size_points, policy_points,
    run_points, CsvRecord, Figure, Lifetimes, Point, PointSpec, TraceSpec, VOLATILE_BASE2_BYTES,
    VOLATILE_BASE_BYTES,
};
use crate::cache::Model;
use crate::field::{Field, Invalid};
use crate::figures;
use crate::lfs::{self, LfsConfig, LfsRun};
use nvstack_core::error::{Error, Result};
use nvstack_core::Progress;
use nvstack_policy::PolicyKind;
use rayon::prelude::*;
use std::path::{Path, PathBuf};

/// The most seeds of the random policy one sweep runs.
pub const SEEDS_MAX: u64 = 100;

/// What to sweep: the traces, the NVRAM grid, the random policy's seeds, and where the files go.
#[derive(Clone, Debug)]
pub struct SweepPlan {
    /// The traces; each runs through the whole grid.
    pub traces: Vec<TraceSpec>,
    /// NVRAM sizes, bytes (also the memory added in Figures 5 and 6).
    pub nvram_bytes: Vec<u64>,
    /// Seeds of the random policy: 1 to `seeds` (1 to [`SEEDS_MAX`]).
    pub seeds: u64,
    /// The folder for the files (created if missing; files in it are replaced).
    pub output: PathBuf,
}

/// What a sweep ran and wrote. Serialized as `sweep.json`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SweepReport {
    /// The trace files, as given.
    pub traces: Vec<String>,
    /// The NVRAM grid, bytes.
    pub nvram_bytes: Vec<u64>,
    /// Seeds of the random policy.
    pub seeds: u64,
    /// Wall time of the sweep.
    pub seconds: f64,
    /// Figure 2 (and Table 2's infinite cache), one per trace.
    pub lifetimes: Vec<Lifetimes>,
    /// Every cache run, each filed under its figure; Figure 5's twins last.
    pub points: Vec<Point>,
    /// Tables 3 and 4: one LFS comparison per trace and sync source.
    pub lfs: Vec<LfsRow>,
    /// The files written besides `sweep.json`, in order.
    pub files: Vec<PathBuf>,
    /// `tables.txt`'s text (every table of the sweep).
    #[serde(skip)]
    pub tables: String,
}

/// The sync sources of the sweep's LFS runs (Tables 3 and 4): the trace's own flags, then an
/// fsync after every N-th write request (the shared traces carry no sync flags).
pub const LFS_FSYNC_EVERY: [Option<u64>; 4] = [None, Some(1), Some(10), Some(100)];

/// One LFS comparison of the sweep: the paper's segment writer without and with a 512 KiB
/// buffer, for one trace and one sync source.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LfsRow {
    /// The trace's file name.
    pub trace: String,
    /// The added sync source: a sync after every N-th write request; None = the trace's flags.
    pub fsync_every: Option<u64>,
    /// Both runs and their comparison.
    #[serde(flatten)]
    pub run: LfsRun,
}

impl LfsRow {
    /// This comparison as a row of the sweep's CSV (kind `lfs`); `fsync_every` is `off` when
    /// the syncs come from the trace's own flags.
    pub fn csv_record(&self) -> CsvRecord {
        let mut r = CsvRecord::new("lfs");
        r.push("trace", &self.trace).push(
            "fsync_every",
            self.fsync_every
                .map_or_else(|| "off".to_string(), |n| n.to_string()),
        );
        self.run.csv_push(&mut r);
        r
    }
}

impl SweepPlan {
    /// The grid's cache runs, in order: per trace, Figure 3; every model and policy over the
    /// 8 MiB volatile cache (Figures 4, 5, section 2.6); Figure 6's 16 MiB start for volatile
    /// and unified. Checks the plan: a bad seed count or size is refused before anything runs.
    pub fn jobs(&self) -> std::result::Result<Vec<(TraceSpec, PointSpec)>, Invalid> {
        if self.seeds == 0 || self.seeds > SEEDS_MAX {
            return Err(
                Invalid::new(Field::Seeds).text(format!(" {}: give 1 to {SEEDS_MAX}", self.seeds))
            );
        }
        if self.traces.is_empty() {
            return Err(Invalid::new(Field::Traces).text(": give at least one"));
        }
        for s in &self.traces {
            let b = s.block_bytes;
            if !b.is_power_of_two() || !(512..=1 << 20).contains(&b) {
                return Err(Invalid::new(Field::BlockBytes)
                    .text(format!(" {b}: must be a power of two from 512 to 1048576")));
            }
        }
        let grid = &self.nvram_bytes;
        let mut jobs: Vec<(TraceSpec, PointSpec)> = Vec::new();
        for s in &self.traces {
            let mut add = |ps: Vec<PointSpec>| jobs.extend(ps.into_iter().map(|p| (s.clone(), p)));
            add(nvram_size_points(s, grid)?);
            for m in [Model::WriteAside, Model::Unified] {
                add(policy_points(s, m, VOLATILE_BASE_BYTES, grid, self.seeds)?);
            }
            add(model_points(
                s,
                &[VOLATILE_BASE_BYTES],
                grid,
                &[Model::Volatile],
            )?);
            add(model_points(
                s,
                &[VOLATILE_BASE2_BYTES],
                grid,
                &[Model::Volatile, Model::Unified],
            )?);
        }
        Ok(jobs)
    }
}

/// Run the plan's grid, lifetimes and LFS comparisons, and write `sweep.csv`, `tables.txt`, the
/// figures and `sweep.json` into `plan.output`. Progress is reported in three phases labelled
/// `lifetimes`, `sweep` (the cache runs) and `lfs`. The first error stops the sweep.
pub fn sweep(plan: &SweepPlan, progress: &dyn Progress) -> Result<SweepReport> {
    let started = std::time::Instant::now();
    let jobs = plan.jobs()?;
    let out = &plan.output;
    std::fs::create_dir_all(out)
        .map_err(|e| Error::env(format!("output {}: cannot create: {e}", out.display())))?;
    let lifetimes_all = lifetimes_of(&plan.traces, progress)?;
    let mut points = run_points(&jobs, "sweep", progress)?;
    let lfs = lfs_rows(&plan.traces, progress)?;
    assert_eq!(points.len(), jobs.len(), "one point per job, in order");
    let twins = model_twins(&points);
    points.extend(twins);
    let mut files = Vec::new();
    let records: Vec<CsvRecord> = points
        .iter()
        .map(Point::csv_record)
        .chain(lifetimes_all.iter().flat_map(Lifetimes::csv_records))
        .chain(lfs.iter().map(LfsRow::csv_record))
        .collect();
    files.push(write(out, "sweep.csv", &csv_table(&records))?);
    let tables = tables_text(&plan.traces, &lifetimes_all, &points, &lfs);
    files.push(write(out, "tables.txt", &tables)?);
    files.extend(figures_of(out, &lifetimes_all, &points)?);
    let mut report = SweepReport {
        traces: plan
            .traces
            .iter()
            .map(|s| s.path.display().to_string())
            .collect(),
        nvram_bytes: plan.nvram_bytes.clone(),
        seeds: plan.seeds,
        seconds: 0.0,
        lifetimes: lifetimes_all,
        points,
        lfs,
        files,
        tables,
    };
    report.seconds = started.elapsed().as_secs_f64();
    let json =
        serde_json::to_string_pretty(&report).map_err(|e| Error::env(format!("json: {e}")))?;
    write(out, "sweep.json", &json)?;
    Ok(report)
}

/// Write `text` to `dir/name`; returns the path.
fn write(dir: &Path, name: &str, text: &str) -> Result<PathBuf> {
    let p = dir.join(name);
    std::fs::write(&p, text).map_err(|e| Error::env(format!("{}: {e}", p.display())))?;
    Ok(p)
}

/// Figure 2 for each trace (one pass each), as phase `lifetimes`.
fn lifetimes_of(specs: &[TraceSpec], progress: &dyn Progress) -> Result<Vec<Lifetimes>> {
    progress.start("lifetimes", specs.len() as u64);
    let r = specs
        .iter()
        .map(|s| {
            let l = lifetimes(s, &delays_default_ns());
            progress.advance(1);
            l
        })
        .collect::<Result<Vec<_>>>();
    progress.finish();
    r
}

/// Tables 3 and 4: each trace under each sync source of [`LFS_FSYNC_EVERY`], in parallel, as
/// phase `lfs`.
fn lfs_rows(specs: &[TraceSpec], progress: &dyn Progress) -> Result<Vec<LfsRow>> {
    let jobs: Vec<(&TraceSpec, Option<u64>)> = specs
        .iter()
        .flat_map(|s| LFS_FSYNC_EVERY.iter().map(move |&n| (s, n)))
        .collect();
    progress.start("lfs", jobs.len() as u64);
    let rows = jobs
        .par_iter()
        .map(|&(s, fsync_every)| {
            let cfg = LfsConfig {
                fsync_every,
                ..LfsConfig::paper(s.block_bytes)
            };
            let run = lfs::simulate(s.open()?, &cfg)?;
            progress.advance(1);
            Ok(LfsRow {
                trace: s.name(),
                fsync_every,
                run,
            })
        })
        .collect::<Result<Vec<_>>>();
    progress.finish();
    rows
}

/// The LRU runs of the policy grid are also Figure 5's NVRAM-model points: a twin of each,
/// filed under the model figure, so that every figure's filter finds its points.
fn model_twins(points: &[Point]) -> Vec<Point> {
    points
        .iter()
        .filter(|p| p.figure == Figure::Policies && p.policy == PolicyKind::Lru)
        .map(|p| Point {
            figure: Figure::Models,
            ..p.clone()
        })
        .collect()
}

/// The figures of the sweep, in the order they are listed: Figures 2 to 6, then section 2.6.
fn figures_of(out: &Path, lifetimes_all: &[Lifetimes], points: &[Point]) -> Result<Vec<PathBuf>> {
    let mut files = figures::fig2(out, lifetimes_all)?;
    files.extend(figures::fig3(out, points)?);
    files.extend(figures::fig4(out, points)?);
    files.extend(figures::fig56(out, points)?);
    files.extend(figures::bus(out, &models_lru(points))?);
    Ok(files)
}

/// The points of Figures 5 and 6 (LRU, filed under the model figure).
fn models_lru(points: &[Point]) -> Vec<Point> {
    points
        .iter()
        .filter(|p| p.figure == Figure::Models && p.policy == PolicyKind::Lru)
        .cloned()
        .collect()
}

/// `tables.txt`: Figure 2 per trace, Table 2 per trace, Figures 3 to 6, section 2.6, and
/// Tables 3 and 4.
fn tables_text(
    specs: &[TraceSpec],
    lifetimes_all: &[Lifetimes],
    points: &[Point],
    lfs: &[LfsRow],
) -> String {
    let mut tables = String::new();
    for l in lifetimes_all {
        tables.push_str(&format!(
            "== Figure 2: byte lifetimes ==\n{}\n",
            lifetimes_table(l)
        ));
    }
    for s in specs {
        tables.push_str(&fate_text(s, lifetimes_all, points));
    }
    let f3: Vec<Point> = points
        .iter()
        .filter(|p| p.figure == Figure::NvramSize)
        .cloned()
        .collect();
    tables.push_str(&points_table(
        "== Figure 3: omniscient write buffer, net write traffic ==",
        &f3,
        &[
            "trace",
            "nvram",
            "writes",
            "writebacks",
            "dirty at end",
            "net write",
        ],
    ));
    for m in [Model::Unified, Model::WriteAside] {
        let f4: Vec<Point> = points
            .iter()
            .filter(|p| p.model == m && p.figure == Figure::Policies)
            .cloned()
            .collect();
        tables.push_str(&format!(
            "\n== Figure 4: policies, {} model, 8MiB volatile, net write traffic ==\n{}",
            m.name(),
            policies_table(&f4)
        ));
    }
    tables.push_str(&models_text(&models_lru(points)));
    tables.push_str(&format!(
        "\n== Tables 3 and 4: LFS segments without / with a 512KiB NVRAM buffer ==\n{}",
        lfs_table(lfs)
    ));
    tables
}

/// Table 2 for trace `s`: its infinite cache, then the unified LRU caches of 128 KiB, 1 MiB and
/// 8 MiB NVRAM (the paper's rows) among the policy points.
fn fate_text(s: &TraceSpec, lifetimes_all: &[Lifetimes], points: &[Point]) -> String {
    let l = lifetimes_all
        .iter()
        .find(|l| l.trace == s.name())
        .expect("one lifetime pass per trace");
    let fate_points: Vec<Point> = points
        .iter()
        .filter(|p| {
            p.trace == s.name()
                && p.figure == Figure::Policies
                && p.model == Model::Unified
                && p.policy == PolicyKind::Lru
                && [128 * 1024, 1 << 20, 8 << 20].contains(&p.nvram_bytes)
        })
        .cloned()
        .collect();
    format!(
        "== Table 2 ==\n{}\n",
        fate_table(&s.name(), &fate_rows(s, l, &fate_points))
    )
}

/// Figures 5 and 6, then section 2.6 over the 8 MiB start, from the LRU model points `f56`.
fn models_text(f56: &[Point]) -> String {
    let bus: Vec<Point> = f56
        .iter()
        .filter(|p| p.base_volatile_bytes == VOLATILE_BASE_BYTES)
        .cloned()
        .collect();
    format!(
        "\n== Figures 5 and 6: net total traffic as memory is added ==\n{}\n== Section 2.6: NVRAM accesses and memory-bus blocks ==\n{}",
        models_table(f56),
        bus_table(&bus)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{ReaderOptions, TraceFormat};
    use std::sync::Mutex;

    /// Records each phase as (label, steps announced, steps advanced).
    #[derive(Default)]
    struct Phases(Mutex<Vec<(String, u64, u64)>>);

    impl Progress for Phases {
        fn start(&self, label: &str, steps_total: u64) {
            self.0
                .lock()
                .unwrap()
                .push((label.to_string(), steps_total, 0));
        }
        fn advance(&self, steps: u64) {
            self.0.lock().unwrap().last_mut().unwrap().2 += steps;
        }
        fn finish(&self) {}
    }

    /// A DiskSim trace of writes and reads over 6 blocks, 1 s apart.
    fn tiny_trace(dir: &Path) -> TraceSpec {
        let mut text = String::new();
        for i in 0..40u64 {
            let sector = (i * 7 % 6) * 8;
            let op = u64::from(i % 3 == 0);
            text.push_str(&format!("{} 0 {sector} 8 {op}\n", i * 1_000_000_000));
        }
        let path = dir.join("tiny.trace");
        std::fs::write(&path, text).unwrap();
        TraceSpec {
            path,
            format: TraceFormat::Disksim,
            block_bytes: 4096,
            options: ReaderOptions::default(),
        }
    }

    #[test]
    fn a_tiny_sweep_runs_every_kind_of_row_and_writes_every_file() {
        let dir = tempfile::tempdir().unwrap();
        let plan = SweepPlan {
            traces: vec![tiny_trace(dir.path())],
            nvram_bytes: vec![0, 8192],
            seeds: 2,
            output: dir.path().join("out"),
        };
        // Per NVRAM size: Figure 3 (1), two models x (LRU, omniscient, 2 random seeds) (8),
        // volatile from 8 MiB (1), volatile and unified from 16 MiB (2).
        let jobs = plan.jobs().unwrap();
        assert_eq!(jobs.len(), 2 * (1 + 8 + 1 + 2));
        let phases = Phases::default();
        let r = sweep(&plan, &phases).unwrap();
        let want = [("lifetimes", 1, 1), ("sweep", 24, 24), ("lfs", 4, 4)];
        let got = phases.0.lock().unwrap().clone();
        assert_eq!(got, want.map(|(l, n, d)| (l.to_string(), n, d)));
        // The LRU policy runs are filed again under Figure 5: one per model and size.
        let of = |f: Figure| r.points.iter().filter(|p| p.figure == f).count();
        assert_eq!(r.points.len(), 24 + 4);
        assert_eq!(of(Figure::NvramSize), 2);
        assert_eq!(of(Figure::Policies), 16);
        assert_eq!(of(Figure::Models), 6 + 4);
        assert_eq!((r.lifetimes.len(), r.lfs.len()), (1, LFS_FSYNC_EVERY.len()));
        assert_eq!((r.seeds, r.nvram_bytes.clone()), (2, vec![0, 8192]));
        let csv = std::fs::read_to_string(plan.output.join("sweep.csv")).unwrap();
        for kind in ["cache", "lifetime", "lfs"] {
            assert!(
                csv.lines().any(|l| l.starts_with(&format!("{kind},"))),
                "{kind}"
            );
        }
        assert_eq!(csv.lines().count(), 1 + 28 + delays_default_ns().len() + 4);
        for title in [
            "Figure 2",
            "Table 2",
            "Figure 3",
            "Figure 4",
            "Figures 5 and 6",
            "Tables 3 and 4",
        ] {
            assert!(r.tables.contains(title), "no {title} in tables");
        }
        assert_eq!(std::fs::read_to_string(&r.files[1]).unwrap(), r.tables);
        assert!(r.files.iter().all(|f| f.is_file()), "{:?}", r.files);
        assert!(r
            .files
            .iter()
            .any(|f| f.extension().is_some_and(|e| e == "svg")));
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(plan.output.join("sweep.json")).unwrap())
                .unwrap();
        assert_eq!(json["points"].as_array().unwrap().len(), 28);
        assert!(json.get("tables").is_none());
    }

    #[test]
    fn a_bad_plan_runs_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let good = SweepPlan {
            traces: vec![tiny_trace(dir.path())],
            nvram_bytes: vec![0],
            seeds: 1,
            output: dir.path().join("out"),
        };
        let mut odd_block = good.clone();
        odd_block.traces[0].block_bytes = 1000;
        for (bad, field) in [
            (
                SweepPlan {
                    seeds: 0,
                    ..good.clone()
                },
                Field::Seeds,
            ),
            (
                SweepPlan {
                    seeds: SEEDS_MAX + 1,
                    ..good.clone()
                },
                Field::Seeds,
            ),
            (
                SweepPlan {
                    traces: vec![],
                    ..good.clone()
                },
                Field::Traces,
            ),
            (
                SweepPlan {
                    nvram_bytes: vec![1000],
                    ..good.clone()
                },
                Field::NvramBytes,
            ),
            (odd_block, Field::BlockBytes),
        ] {
            assert_eq!(bad.jobs().unwrap_err().field, field);
            let e = sweep(&bad, &nvstack_core::NoProgress).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{e}");
            assert!(e.to_string().starts_with(field.name()), "{e}");
            assert!(!bad.output.exists(), "{e}: the output was made");
        }
    }
}
