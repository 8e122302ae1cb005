//! The paper's evaluation (seed 003 Figs. 8-11) as grids of runs: workloads x modes x commit
//! frequencies x seeds, run in parallel, averaged over seeds.

use crate::config::{Config, Mode};
use crate::kernels::{Kernel, KernelConfig, KernelWorkload};
use crate::sim::{run, Report};
use crate::trace::{TraceReader, Workload};
use nvstack_core::error::{Error, Result};
use rayon::prelude::*;
use std::path::PathBuf;

/// A workload of the grid: a synthetic kernel (its commit frequency set per point) or a
/// recorded trace (its commits are its own).
#[derive(Clone, Debug)]
pub enum Source {
    Kernel(Kernel),
    Trace(PathBuf),
}

impl Source {
    pub fn name(&self) -> String {
        match self {
            Source::Kernel(k) => k.name().to_string(),
            Source::Trace(p) => p
                .file_stem()
                .map_or("trace".into(), |s| s.to_string_lossy().into_owned()),
        }
    }
}

/// What to run. `kernel` gives the kernels' shape (threads = the machine's cores).
#[derive(Clone, Debug)]
pub struct Plan {
    pub machine: Config,
    pub kernel: KernelConfig,
    pub sources: Vec<Source>,
    pub modes: Vec<Mode>,
    pub commit_every: Vec<u64>,
    pub seeds: u64,
}

/// One point: means over the seeds.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Point {
    pub workload: String,
    pub mode: Mode,
    pub commit_every: u64,
    pub ipc: f64,
    pub commit_ns_mean: f64,
    pub syncs: f64,
    pub commits: f64,
    pub reads: f64,
    pub writes: f64,
    pub loads: f64,
    pub stores: f64,
}

/// Open a source as a workload for `machine` (a trace file is streamed).
pub fn open(src: &Source, machine: &Config, kernel: &KernelConfig) -> Result<Box<dyn Workload>> {
    match src {
        Source::Kernel(k) => {
            let kc = KernelConfig {
                kernel: *k,
                threads: machine.cores,
                ..*kernel
            };
            Ok(Box::new(KernelWorkload::new(&kc)?))
        }
        Source::Trace(path) => {
            let f = std::fs::File::open(path)
                .map_err(|e| Error::bad(format!("{}: {e}", path.display())))?;
            Ok(Box::new(TraceReader::new(
                std::io::BufReader::new(f),
                &path.display().to_string(),
            )?))
        }
    }
}

/// Run every point of the plan, in parallel.
pub fn grid(plan: &Plan) -> Result<Vec<Point>> {
    plan.machine.validate()?;
    plan.kernel.validate()?;
    if plan.seeds == 0
        || plan.sources.is_empty()
        || plan.modes.is_empty()
        || plan.commit_every.is_empty()
    {
        return Err(Error::bad(
            "a grid needs at least one seed, workload, mode and commit frequency",
        ));
    }
    let mut jobs = Vec::new();
    for (si, src) in plan.sources.iter().enumerate() {
        // A trace's commits are its own: one frequency, one seed (it has no randomness).
        let (everies, seeds) = match src {
            Source::Kernel(_) => (plan.commit_every.clone(), plan.seeds),
            Source::Trace(_) => (vec![0], 1),
        };
        for &mode in &plan.modes {
            for &every in &everies {
                jobs.extend((0..seeds).map(|seed| (si, mode, every, seed)));
            }
        }
    }
    // Traces first: a trace's run is several kernel runs long, and one started last would
    // leave the other threads idle at the end. The reports are put back in the jobs' order,
    // so the averages (and the tables) are summed in the same order whatever ran first.
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&i| matches!(plan.sources[jobs[i].0], Source::Kernel(_)));
    let ran: Vec<(usize, Report)> = order
        .par_iter()
        .map(|&i| Ok((i, run_job(plan, jobs[i])?)))
        .collect::<Result<_>>()?;
    let mut slots: Vec<Option<Report>> = vec![None; jobs.len()];
    for (i, r) in ran {
        slots[i] = Some(r);
    }
    let reports = jobs
        .iter()
        .zip(slots)
        .map(|(&(si, mode, every, _), r)| ((si, mode, every), r.expect("every job ran")))
        .collect();
    Ok(average(plan, reports))
}

/// One run of the grid: source `si` in `mode`, committing every `every` updates, seed `seed`.
fn run_job(plan: &Plan, (si, mode, every, seed): (usize, Mode, u64, u64)) -> Result<Report> {
    let machine = Config {
        mode,
        log_events: false,
        ..plan.machine.clone()
    };
    let kernel = KernelConfig {
        commit_every: every.max(1),
        seed: plan.kernel.seed + seed,
        ..plan.kernel
    };
    let mut w = open(&plan.sources[si], &machine, &kernel)?;
    Ok(run(&machine, w.as_mut())?.report)
}

fn average(plan: &Plan, reports: Vec<((usize, Mode, u64), Report)>) -> Vec<Point> {
    let mut points: Vec<Point> = Vec::new();
    let mut key_of = Vec::new();
    for (key, r) in reports {
        let i = key_of.iter().position(|k| *k == key).unwrap_or_else(|| {
            key_of.push(key);
            points.push(Point {
                workload: plan.sources[key.0].name(),
                mode: key.1,
                commit_every: key.2,
                ipc: 0.0,
                commit_ns_mean: 0.0,
                syncs: 0.0,
                commits: 0.0,
                reads: 0.0,
                writes: 0.0,
                loads: 0.0,
                stores: 0.0,
            });
            points.len() - 1
        });
        let n = if key.2 == 0 { 1.0 } else { plan.seeds as f64 };
        let p = &mut points[i];
        p.ipc += r.ipc / n;
        p.commit_ns_mean += r.commit_ns_mean() / n;
        p.syncs += r.mc.syncs as f64 / n;
        p.commits += r.mc.commits as f64 / n;
        p.reads += r.mc.reads as f64 / n;
        p.writes += r.mc.writes as f64 / n;
        p.loads += r.loads as f64 / n;
        p.stores += r.stores as f64 / n;
    }
    points
}
