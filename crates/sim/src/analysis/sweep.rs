//! The sweep: every analysis of seed 002 over a grid, for each trace of a plan, in parallel
//! (rayon): which runs reproduce which figure, the Figure 5 twin points, the LFS comparisons of
//! Tables 3 and 4, and the files they make (`sweep.csv`, `sweep.json`, `tables.txt`, the SVG
//! figures). `nvstack sim sweep` parses a [`SweepPlan`], calls [`sweep`] and prints the report.

use super::figures;
use super::tables::{
    bus_table, fate_rows, fate_table, lfs_table, lifetimes_table, models_table, points_table,
    policies_table,
};
use super::{
    delays_default_ns, lifetimes, model_points, nvram_size_points, policy_points, run_points,
    Figure, LfsRow, Lifetimes, Point, PointSpec, TraceSpec, VOLATILE_BASE2_BYTES,
    VOLATILE_BASE_BYTES,
};
use crate::cache::Model;
use crate::csv::{csv_table, CsvRecord};
use crate::field::{Field, Invalid};
use crate::lfs::{self, LfsConfig};
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
    std::fs::create_dir_all(&plan.output).map_err(|e| {
        Error::env(format!(
            "output {}: cannot create: {e}",
            plan.output.display()
        ))
    })?;
    let lifetimes_all = lifetimes_of(&plan.traces, progress)?;
    let points = run_points(&jobs, "sweep", progress)?;
    let lfs = lfs_rows(&plan.traces, progress)?;
    assert_eq!(points.len(), jobs.len(), "one point per job, in order");
    write_report(
        plan,
        lifetimes_all,
        points,
        lfs,
        started.elapsed().as_secs_f64(),
    )
}

/// One unit of a sweep that runs on its own: a task of a distributed sweep (the Python
/// package's `nvstack.sweep` runs each on a core or a cluster's worker). [`SweepPlan::tasks`]
/// lists them; their results, in that order, make the same files as [`sweep`]
/// ([`write_results`]).
#[derive(Clone, Debug)]
pub enum Task {
    /// One cache run of the grid.
    Cache(TraceSpec, PointSpec),
    /// Figure 2 for one trace.
    Lifetimes(TraceSpec),
    /// One LFS comparison: a trace and a sync source.
    Lfs(TraceSpec, Option<u64>),
}

/// What a [`Task`] computed; serialized (JSON) to travel from a worker.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TaskResult {
    Cache(Point),
    Lifetimes(Lifetimes),
    /// Boxed: an LFS comparison is several times the size of a cache run.
    Lfs(Box<LfsRow>),
}

impl SweepPlan {
    /// Every task of the plan, in the order [`write_results`] takes their results: the cache
    /// runs of [`SweepPlan::jobs`], the lifetime passes (one per trace), then the LFS
    /// comparisons (each trace under each of [`LFS_FSYNC_EVERY`]).
    pub fn tasks(&self) -> std::result::Result<Vec<Task>, Invalid> {
        let mut tasks: Vec<Task> = self
            .jobs()?
            .into_iter()
            .map(|(s, p)| Task::Cache(s, p))
            .collect();
        tasks.extend(self.traces.iter().cloned().map(Task::Lifetimes));
        for s in &self.traces {
            tasks.extend(LFS_FSYNC_EVERY.iter().map(|&n| Task::Lfs(s.clone(), n)));
        }
        Ok(tasks)
    }
}

impl Task {
    /// Run the task (in the calling thread).
    pub fn run(&self) -> Result<TaskResult> {
        Ok(match self {
            Task::Cache(s, p) => TaskResult::Cache(super::run_point(s, p)?),
            Task::Lifetimes(s) => TaskResult::Lifetimes(lifetimes(s, &delays_default_ns())?),
            Task::Lfs(s, fsync_every) => TaskResult::Lfs(Box::new(lfs_row(s, *fsync_every)?)),
        })
    }

    /// The task's parameters as (name, value), named as the result rows name them: what a
    /// report of a failed task shows.
    pub fn params(&self) -> Vec<(&'static str, String)> {
        match self {
            Task::Cache(s, p) => {
                let c = &p.config;
                let b = u64::from(s.block_bytes);
                vec![
                    ("kind", "cache".into()),
                    ("trace", s.name()),
                    ("figure", p.figure.name().into()),
                    ("model", c.model.name().into()),
                    ("policy", c.policy.name().into()),
                    ("seed", c.seed.to_string()),
                    ("block_bytes", s.block_bytes.to_string()),
                    ("volatile_bytes", (c.volatile_blocks * b).to_string()),
                    ("nvram_bytes", (c.nvram_blocks * b).to_string()),
                    ("writes_only", p.writes_only.to_string()),
                ]
            }
            Task::Lifetimes(s) => vec![("kind", "lifetime".into()), ("trace", s.name())],
            Task::Lfs(s, n) => vec![
                ("kind", "lfs".into()),
                ("trace", s.name()),
                (
                    "fsync_every",
                    n.map_or_else(|| "off".to_string(), |n| n.to_string()),
                ),
            ],
        }
    }
}

/// The results of [`SweepPlan::tasks`], in order, split by kind (checked against the tasks).
pub fn split_results(
    plan: &SweepPlan,
    results: Vec<TaskResult>,
) -> Result<(Vec<Lifetimes>, Vec<Point>, Vec<LfsRow>)> {
    let tasks = plan.tasks()?;
    if tasks.len() != results.len() {
        return Err(Error::bad(format!(
            "{} results for {} tasks",
            results.len(),
            tasks.len()
        )));
    }
    let (mut l, mut p, mut f) = (Vec::new(), Vec::new(), Vec::new());
    for (i, (t, r)) in tasks.iter().zip(results).enumerate() {
        match (t, r) {
            (Task::Cache(..), TaskResult::Cache(x)) => p.push(x),
            (Task::Lifetimes(_), TaskResult::Lifetimes(x)) => l.push(x),
            (Task::Lfs(..), TaskResult::Lfs(x)) => f.push(*x),
            (t, _) => {
                return Err(Error::bad(format!(
                    "result {i}: not the result of task {:?}",
                    t.params()
                )))
            }
        }
    }
    Ok((l, p, f))
}

/// Write the files of [`sweep`] from the results of [`SweepPlan::tasks`] run elsewhere, in
/// order; `seconds` is the sweep's wall time.
pub fn write_results(
    plan: &SweepPlan,
    results: Vec<TaskResult>,
    seconds: f64,
) -> Result<SweepReport> {
    let (l, p, f) = split_results(plan, results)?;
    std::fs::create_dir_all(&plan.output).map_err(|e| {
        Error::env(format!(
            "output {}: cannot create: {e}",
            plan.output.display()
        ))
    })?;
    write_report(plan, l, p, f, seconds)
}

/// The rows of `sweep.csv`, in its order: the cache runs with Figure 5's twins last, the
/// lifetime points, the LFS comparisons. `points` are the grid's runs, without twins.
pub fn sweep_records(
    lifetimes_all: &[Lifetimes],
    points: &[Point],
    lfs: &[LfsRow],
) -> Vec<CsvRecord> {
    points
        .iter()
        .chain(model_twins(points).iter())
        .map(Point::csv_record)
        .chain(lifetimes_all.iter().flat_map(Lifetimes::csv_records))
        .chain(lfs.iter().map(LfsRow::csv_record))
        .collect()
}

/// Write every file of the sweep from its results: `sweep.csv`, `tables.txt`, the figures and
/// `sweep.json`.
fn write_report(
    plan: &SweepPlan,
    lifetimes_all: Vec<Lifetimes>,
    mut points: Vec<Point>,
    lfs: Vec<LfsRow>,
    seconds: f64,
) -> Result<SweepReport> {
    let out = &plan.output;
    let mut files = Vec::new();
    let records = sweep_records(&lifetimes_all, &points, &lfs);
    files.push(write(out, "sweep.csv", &csv_table(&records))?);
    let twins = model_twins(&points);
    points.extend(twins);
    let tables = tables_text(&plan.traces, &lifetimes_all, &points, &lfs);
    files.push(write(out, "tables.txt", &tables)?);
    files.extend(figures_of(out, &lifetimes_all, &points)?);
    let report = SweepReport {
        traces: plan
            .traces
            .iter()
            .map(|s| s.path.display().to_string())
            .collect(),
        nvram_bytes: plan.nvram_bytes.clone(),
        seeds: plan.seeds,
        seconds,
        lifetimes: lifetimes_all,
        points,
        lfs,
        files,
        tables,
    };
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
            let row = lfs_row(s, fsync_every);
            progress.advance(1);
            row
        })
        .collect::<Result<Vec<_>>>();
    progress.finish();
    rows
}

/// One LFS comparison: trace `s` under the paper's segment writer, syncs from the trace's
/// flags or after every `fsync_every`-th write request.
fn lfs_row(s: &TraceSpec, fsync_every: Option<u64>) -> Result<LfsRow> {
    let cfg = LfsConfig {
        fsync_every,
        ..LfsConfig::paper(s.block_bytes)
    };
    Ok(LfsRow {
        trace: s.name(),
        fsync_every,
        run: lfs::simulate(s.open()?, &cfg)?,
    })
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

    /// A JSON object's keys with nested objects flattened as `object_field` (how the CSV
    /// names them).
    fn flat_keys(v: &serde_json::Value) -> Vec<String> {
        let mut keys = Vec::new();
        for (k, x) in v.as_object().unwrap() {
            match x.as_object() {
                Some(_) => keys.extend(flat_keys(x).into_iter().map(|n| format!("{k}_{n}"))),
                None => keys.push(k.clone()),
            }
        }
        keys.sort();
        keys
    }

    /// The record's columns but `kind`, sorted (serde_json's objects sort their keys).
    fn columns(r: &CsvRecord) -> Vec<String> {
        let mut c: Vec<String> = r.cells.iter().skip(1).map(|(c, _)| c.clone()).collect();
        c.sort();
        c
    }

    /// The row schema: each kind's CSV columns are its JSON object's fields, in order (the
    /// Python package's DataFrames are built from the same records).
    #[test]
    fn csv_rows_and_json_objects_have_the_same_fields() {
        let dir = tempfile::tempdir().unwrap();
        let plan = SweepPlan {
            traces: vec![tiny_trace(dir.path())],
            nvram_bytes: vec![0, 8192],
            seeds: 1,
            output: dir.path().join("out"),
        };
        let r = sweep(&plan, &nvstack_core::NoProgress).unwrap();
        for p in &r.points {
            let json = serde_json::to_value(p).unwrap();
            assert_eq!(columns(&p.csv_record()), flat_keys(&json));
        }
        for f in &r.lfs {
            let json = serde_json::to_value(f).unwrap();
            assert_eq!(columns(&f.csv_record()), flat_keys(&json));
        }
        let l = &r.lifetimes[0];
        let json_keys: Vec<String> = flat_keys(&serde_json::to_value(l).unwrap())
            .into_iter()
            .map(|k| {
                if k == "delays_ns" {
                    "delay_ns".into()
                } else {
                    k
                }
            })
            .collect();
        let mut json_keys = json_keys;
        json_keys.sort();
        for rec in l.csv_records() {
            assert_eq!(columns(&rec), json_keys);
        }
    }

    /// The tasks of a plan, run one at a time and their results sent through JSON, make the
    /// same files as the sweep.
    #[test]
    fn tasks_run_apart_write_what_the_sweep_writes() {
        let dir = tempfile::tempdir().unwrap();
        let mut plan = SweepPlan {
            traces: vec![tiny_trace(dir.path())],
            nvram_bytes: vec![0, 8192],
            seeds: 2,
            output: dir.path().join("whole"),
        };
        let whole = sweep(&plan, &nvstack_core::NoProgress).unwrap();
        let tasks = plan.tasks().unwrap();
        assert_eq!(tasks.len(), 24 + 1 + LFS_FSYNC_EVERY.len());
        let results: Vec<TaskResult> = tasks
            .iter()
            .map(|t| {
                let json = serde_json::to_string(&t.run().unwrap()).unwrap();
                serde_json::from_str(&json).unwrap()
            })
            .collect();
        plan.output = dir.path().join("apart");
        let apart = write_results(&plan, results.clone(), 0.0).unwrap();
        assert_eq!(apart.tables, whole.tables);
        assert_eq!(apart.files.len(), whole.files.len());
        for f in &whole.files {
            let name = f.file_name().unwrap();
            let b = std::fs::read(dir.path().join("apart").join(name)).unwrap();
            assert_eq!(std::fs::read(f).unwrap(), b, "{name:?}");
        }
        let mut short = results.clone();
        short.pop();
        assert!(write_results(&plan, short, 0.0).is_err());
        let mut swapped = results;
        swapped.swap(0, 24);
        let e = write_results(&plan, swapped, 0.0).unwrap_err();
        assert!(e.to_string().contains("result 0"), "{e}");
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
