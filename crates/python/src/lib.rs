//! `nvstack._native`: the Python extension module under the `nvstack` package (python/). It
//! binds the simulator's library (nvstack-sim) and the nvramdisk device (`device.rs`): every
//! function takes plain
//! values, runs with the GIL released (`Python::detach`), and returns the JSON object the
//! program's `--json` prints (the package parses it), so Python and the CLI share one
//! serializer. Errors become `BadInput` (a ValueError: exit 2 in the CLI), `EnvironmentFault`
//! (an OSError: exit 3) or `Finding` (a RuntimeError: exit 1).

mod device;

use nvstack_core::error::Error;
use nvstack_core::Progress;
use nvstack_policy::PolicyKind;
use nvstack_sim::analysis::grid::Grid;
use nvstack_sim::analysis::{
    self, csv_table, lifetimes, model_points, nvram_grid_default, nvram_size_points, policy_points,
    run_points, sweep_records, write_results, PointSpec, TaskResult, TraceSpec,
};
use nvstack_sim::cache::{CacheConfig, CacheReport, Model, DELAYED_WRITEBACK_DEFAULT_S};
use nvstack_sim::field::Invalid;
use nvstack_sim::lfs::{self, LfsConfig, LfsReport};
use nvstack_sim::trace::{self, BlockAccesses, Op, ReaderOptions, TraceFormat};
use pyo3::create_exception;
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::path::{Path, PathBuf};

create_exception!(
    _native,
    BadInput,
    PyValueError,
    "Bad input: an argument, a trace line, a grid file (the CLI's exit 2)."
);
create_exception!(
    _native,
    EnvironmentFault,
    PyOSError,
    "The environment failed: a file could not be read or written (the CLI's exit 3)."
);
create_exception!(
    _native,
    Finding,
    PyRuntimeError,
    "A finding (the CLI's exit 1)."
);

/// A workspace error as the Python exception of its exit code.
fn py_err(e: Error) -> PyErr {
    match e.exit_code() {
        2 => BadInput::new_err(e.to_string()),
        1 => Finding::new_err(e.to_string()),
        _ => EnvironmentFault::new_err(e.to_string()),
    }
}

/// A refused setting, naming the keyword argument (the library's field names are the
/// package's keywords: `nvram_bytes` is `nvram=`).
fn py_invalid(e: Invalid) -> PyErr {
    BadInput::new_err(e.render(&keyword))
}

fn keyword(f: nvstack_sim::field::Field) -> &'static str {
    use nvstack_sim::field::Field;
    match f {
        Field::NvramBytes | Field::NvramBlocks => "nvram",
        Field::VolatileBytes | Field::VolatileBlocks => "volatile",
        Field::BlockBytes => "block_size",
        Field::SegmentBytes => "segment_size",
        Field::MetadataBytes => "metadata_size",
        Field::SummaryBytes => "summary_size",
        Field::TimeoutNs => "timeout",
        Field::DelayedWritebackNs => "delayed_writeback",
        Field::DelaysNs => "delays_ns",
        other => other.name(),
    }
}

fn json(v: &impl serde::Serialize) -> PyResult<String> {
    serde_json::to_string(v).map_err(|e| EnvironmentFault::new_err(format!("json: {e}")))
}

/// The trace arguments every function takes, checked.
fn spec(
    path: PathBuf,
    format: &str,
    block_size: u32,
    skip_bad_lines: bool,
    interarrival_us: Option<u64>,
) -> PyResult<TraceSpec> {
    let format = TraceFormat::parse(format).ok_or_else(|| {
        let names: Vec<&str> = TraceFormat::ALL.iter().map(|f| f.name()).collect();
        BadInput::new_err(format!(
            "format '{format}': unknown (valid: {})",
            names.join(", ")
        ))
    })?;
    if !block_size.is_power_of_two() || !(512..=1 << 20).contains(&block_size) {
        return Err(BadInput::new_err(format!(
            "block_size {block_size}: must be a power of two from 512 to 1048576"
        )));
    }
    Ok(TraceSpec {
        path,
        format,
        block_bytes: block_size,
        options: ReaderOptions {
            skip_bad_lines,
            interarrival_ns: interarrival_us.map(|us| us.saturating_mul(1000)),
        },
    })
}

fn model(name: &str) -> PyResult<Model> {
    Model::parse(name).ok_or_else(|| {
        let names: Vec<&str> = Model::ALL.iter().map(|m| m.name()).collect();
        BadInput::new_err(format!(
            "model '{name}': unknown (valid: {})",
            names.join(", ")
        ))
    })
}

fn policy(name: &str) -> PyResult<PolicyKind> {
    PolicyKind::parse(name).ok_or_else(|| {
        let names: Vec<&str> = PolicyKind::ALL.iter().map(|p| p.name()).collect();
        BadInput::new_err(format!(
            "policy '{name}': unknown (valid: {})",
            names.join(", ")
        ))
    })
}

/// Progress reported to a Python object with `start(label, total)`, `advance(n)` and
/// `finish()` (the package's tqdm bar); its errors are dropped (a bar must not stop a run).
struct PyProgress(Option<Py<PyAny>>);

impl PyProgress {
    fn call(&self, f: impl FnOnce(Python<'_>, &Py<PyAny>) -> PyResult<Py<PyAny>>) {
        if let Some(o) = &self.0 {
            Python::attach(|py| {
                let _ = f(py, o);
            });
        }
    }
}

impl Progress for PyProgress {
    fn start(&self, label: &str, steps_total: u64) {
        self.call(|py, o| o.call_method1(py, "start", (label, steps_total)));
    }
    fn advance(&self, steps: u64) {
        self.call(|py, o| o.call_method1(py, "advance", (steps,)));
    }
    fn finish(&self) {
        self.call(|py, o| o.call_method0(py, "finish"));
    }
}

/// `nvstack sim stat --json`: what a trace holds as the simulator reads it.
#[pyfunction]
#[pyo3(signature = (path, format, block_size=4096, skip_bad_lines=false, interarrival_us=None))]
fn stat(
    py: Python<'_>,
    path: PathBuf,
    format: &str,
    block_size: u32,
    skip_bad_lines: bool,
    interarrival_us: Option<u64>,
) -> PyResult<String> {
    let s = spec(path, format, block_size, skip_bad_lines, interarrival_us)?;
    let st = py
        .detach(|| trace::stat(&s.path, s.format, s.block_bytes, &s.options))
        .map_err(py_err)?;
    json(&st)
}

/// Columns of one chunk (time_ns, key, is_write, sync as bytes) and how many accesses they hold.
type Columns = (Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>, usize);

/// Up to `n` block accesses from `src` as little-endian columns; the first bad line's error.
fn read_chunk(src: &mut BlockAccesses, n: usize) -> nvstack_core::error::Result<Columns> {
    let (mut t, mut k, mut w, mut s) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut got = 0;
    while got < n {
        match src.next() {
            None => break,
            Some(Err(e)) => return Err(e),
            Some(Ok(a)) => {
                t.extend_from_slice(&a.time_ns.to_le_bytes());
                k.extend_from_slice(&a.key.to_le_bytes());
                w.push(u8::from(a.op == Op::Write));
                s.push(u8::from(a.sync));
                got += 1;
            }
        }
    }
    Ok((t, k, w, s, got))
}

/// A trace's block accesses, read in chunks of columns (the package makes NumPy arrays).
#[pyclass(unsendable)]
struct Reader {
    inner: Option<BlockAccesses>,
}

#[pymethods]
impl Reader {
    #[new]
    #[pyo3(signature = (path, format, block_size=4096, skip_bad_lines=false, interarrival_us=None))]
    fn new(
        path: PathBuf,
        format: &str,
        block_size: u32,
        skip_bad_lines: bool,
        interarrival_us: Option<u64>,
    ) -> PyResult<Reader> {
        let s = spec(path, format, block_size, skip_bad_lines, interarrival_us)?;
        Ok(Reader {
            inner: Some(s.open().map_err(py_err)?),
        })
    }

    /// Up to `n` block accesses as little-endian columns: time_ns (u64), key (u64), is_write
    /// (u8), sync (u8); None at the end. A bad line raises BadInput naming file and line.
    fn chunk<'py>(
        &mut self,
        py: Python<'py>,
        n: usize,
    ) -> PyResult<Option<[Bound<'py, PyBytes>; 4]>> {
        let Some(src) = self.inner.as_mut() else {
            return Ok(None);
        };
        // Parsing runs with the GIL released, like every other call into Rust.
        let (t, k, w, s, got) = match py.detach(|| read_chunk(src, n)) {
            Ok(c) => c,
            Err(e) => {
                self.inner = None;
                return Err(py_err(e));
            }
        };
        if got == 0 {
            self.inner = None;
            return Ok(None);
        }
        Ok(Some([
            PyBytes::new(py, &t),
            PyBytes::new(py, &k),
            PyBytes::new(py, &w),
            PyBytes::new(py, &s),
        ]))
    }

    /// (requests, read_bytes, write_bytes, skipped_lines) read so far.
    fn counts(&self) -> (u64, u64, u64, u64) {
        self.inner.as_ref().map_or((0, 0, 0, 0), |s| {
            (s.requests, s.read_bytes, s.write_bytes, s.skipped_lines())
        })
    }
}

/// `nvstack sim cache --json`: one cache model over a trace.
#[pyfunction]
#[pyo3(signature = (path, format, block_size, skip_bad_lines, interarrival_us, model_name, policy_name, volatile, nvram, delayed_writeback, seed))]
#[allow(clippy::too_many_arguments)]
fn cache_run(
    py: Python<'_>,
    path: PathBuf,
    format: &str,
    block_size: u32,
    skip_bad_lines: bool,
    interarrival_us: Option<u64>,
    model_name: &str,
    policy_name: &str,
    volatile: u64,
    nvram: u64,
    delayed_writeback: Option<&str>,
    seed: u64,
) -> PyResult<String> {
    let s = spec(path, format, block_size, skip_bad_lines, interarrival_us)?;
    let m = model(model_name)?;
    let b = u64::from(block_size);
    for (name, v) in [("volatile", volatile), ("nvram", nvram)] {
        if !v.is_multiple_of(b) {
            return Err(BadInput::new_err(format!(
                "{name} {v}: not a multiple of the block size ({b} bytes)"
            )));
        }
    }
    let week_s = 7 * 24 * 3600;
    let delayed_writeback_ns = match (m, delayed_writeback) {
        (Model::Volatile, None) => Some(DELAYED_WRITEBACK_DEFAULT_S * 1_000_000_000),
        (Model::Volatile, Some("off")) => None,
        (Model::Volatile, Some(text)) => match text.parse::<u64>() {
            Ok(secs) if secs <= week_s => Some(secs * 1_000_000_000),
            _ => {
                return Err(BadInput::new_err(format!(
                    "delayed_writeback '{text}': expected whole seconds (0 to {week_s}) or 'off'"
                )))
            }
        },
        (_, None) => None,
        (m, Some(_)) => {
            return Err(BadInput::new_err(format!(
                "delayed_writeback: the {} model has no delayed write-back (only model='volatile' takes it)",
                m.name()
            )))
        }
    };
    let cfg = CacheConfig {
        model: m,
        policy: policy(policy_name)?,
        volatile_blocks: volatile / b,
        nvram_blocks: nvram / b,
        delayed_writeback_ns,
        seed,
    };
    cfg.validate().map_err(py_invalid)?;
    let run = py
        .detach(|| nvstack_sim::cache::simulate(&|| s.open(), &cfg))
        .map_err(py_err)?;
    json(&CacheReport::new(&s.path, s.format, block_size, run))
}

/// `nvstack sim lfs --json`: the LFS segment writer without and with an NVRAM buffer.
#[pyfunction]
#[pyo3(signature = (path, format, block_size, skip_bad_lines, interarrival_us, segment_size, metadata_size, summary_size, nvram, fsync_every, timeout))]
#[allow(clippy::too_many_arguments)]
fn lfs_run(
    py: Python<'_>,
    path: PathBuf,
    format: &str,
    block_size: u32,
    skip_bad_lines: bool,
    interarrival_us: Option<u64>,
    segment_size: u64,
    metadata_size: u64,
    summary_size: u64,
    nvram: u64,
    fsync_every: Option<u64>,
    timeout: &str,
) -> PyResult<String> {
    let s = spec(path, format, block_size, skip_bad_lines, interarrival_us)?;
    let cfg = LfsConfig {
        block_bytes: block_size,
        segment_bytes: segment_size,
        metadata_bytes: metadata_size,
        summary_bytes: summary_size,
        nvram_bytes: nvram,
        timeout_ns: lfs::parse_timeout(timeout).map_err(py_invalid)?,
        fsync_every,
    };
    cfg.validate().map_err(py_invalid)?;
    let report = py
        .detach(|| -> nvstack_core::error::Result<LfsReport> {
            let mut src = s.open()?;
            let run = lfs::simulate(&mut src, &cfg)?;
            Ok(LfsReport::new(&s.path, s.format, cfg.clone(), &src, run))
        })
        .map_err(py_err)?;
    json(&report)
}

/// `nvstack sim lifetimes --json` (Figure 2).
#[pyfunction]
#[pyo3(signature = (path, format, block_size, skip_bad_lines, interarrival_us, delays_ns=None))]
fn lifetimes_run(
    py: Python<'_>,
    path: PathBuf,
    format: &str,
    block_size: u32,
    skip_bad_lines: bool,
    interarrival_us: Option<u64>,
    delays_ns: Option<Vec<u64>>,
) -> PyResult<String> {
    let s = spec(path, format, block_size, skip_bad_lines, interarrival_us)?;
    let delays = delays_ns.unwrap_or_else(analysis::delays_default_ns);
    analysis::check_delays(&delays).map_err(py_invalid)?;
    let l = py.detach(|| lifetimes(&s, &delays)).map_err(py_err)?;
    json(&l)
}

/// `nvstack sim fate --json` (Table 2): the infinite NVRAM, then the unified model over
/// `volatile` with each NVRAM size under `policy_name`.
#[pyfunction]
#[pyo3(signature = (path, format, block_size, skip_bad_lines, interarrival_us, volatile, nvram, policy_name, progress=None))]
#[allow(clippy::too_many_arguments)]
fn fate_run(
    py: Python<'_>,
    path: PathBuf,
    format: &str,
    block_size: u32,
    skip_bad_lines: bool,
    interarrival_us: Option<u64>,
    volatile: u64,
    nvram: Vec<u64>,
    policy_name: &str,
    progress: Option<Py<PyAny>>,
) -> PyResult<String> {
    use nvstack_sim::analysis::tables::{fate_jobs, fate_rows, FateReport};
    let s = spec(path, format, block_size, skip_bad_lines, interarrival_us)?;
    let jobs = fate_jobs(&s, volatile, &nvram, policy(policy_name)?).map_err(py_invalid)?;
    let bar = PyProgress(progress);
    let report = py
        .detach(|| -> nvstack_core::error::Result<FateReport> {
            let l = lifetimes(&s, &[u64::MAX])?;
            let points = run_points(&jobs, "fate", &bar)?;
            Ok(FateReport::new(&s, fate_rows(&s, &l, &points)))
        })
        .map_err(py_err)?;
    json(&report)
}

/// The grid of one analysis, by the CLI subcommand's name, with its settings.
#[allow(clippy::too_many_arguments)]
fn analysis_points(
    s: &TraceSpec,
    which: &str,
    model_name: &str,
    volatile: &[u64],
    sizes: Option<Vec<u64>>,
    seeds: u64,
) -> PyResult<Vec<PointSpec>> {
    let grid = sizes.unwrap_or_else(nvram_grid_default);
    let one_volatile = || -> PyResult<u64> {
        match volatile {
            [v] => Ok(*v),
            _ => Err(BadInput::new_err(format!(
                "{which}: give one volatile size"
            ))),
        }
    };
    let r = match which {
        "nvram-size" => nvram_size_points(s, &grid),
        "policies" => {
            let m = model(model_name)?;
            if m == Model::Volatile {
                return Err(BadInput::new_err(
                    "model 'volatile' has no NVRAM policy: use write-aside or unified",
                ));
            }
            if seeds == 0 || seeds > analysis::SEEDS_MAX {
                return Err(BadInput::new_err(format!("seeds {seeds}: give 1 to 100")));
            }
            policy_points(s, m, one_volatile()?, &grid, seeds)
        }
        "models" => model_points(s, volatile, &grid, &Model::ALL),
        "bus" => model_points(
            s,
            &[one_volatile()?],
            &grid,
            &[Model::WriteAside, Model::Unified],
        ),
        other => return Err(BadInput::new_err(format!("analysis '{other}': unknown"))),
    };
    r.map_err(py_invalid)
}

/// `nvstack sim nvram-size|policies|models|bus --json`: the analysis's grid of cache runs, in
/// parallel, reported to `progress`.
#[pyfunction]
#[pyo3(signature = (path, format, block_size, skip_bad_lines, interarrival_us, which, model_name, volatile, sizes, seeds, progress=None))]
#[allow(clippy::too_many_arguments)]
fn analysis_run(
    py: Python<'_>,
    path: PathBuf,
    format: &str,
    block_size: u32,
    skip_bad_lines: bool,
    interarrival_us: Option<u64>,
    which: &str,
    model_name: &str,
    volatile: Vec<u64>,
    sizes: Option<Vec<u64>>,
    seeds: u64,
    progress: Option<Py<PyAny>>,
) -> PyResult<String> {
    let s = spec(path, format, block_size, skip_bad_lines, interarrival_us)?;
    let points = analysis_points(&s, which, model_name, &volatile, sizes, seeds)?;
    let jobs: Vec<(TraceSpec, PointSpec)> = points.into_iter().map(|p| (s.clone(), p)).collect();
    let bar = PyProgress(progress);
    let out = py
        .detach(|| run_points(&jobs, which, &bar))
        .map_err(py_err)?;
    json(&out)
}

/// A grid file's text, read from `file` (for messages), trace paths relative to `dir`.
fn grid(text: &str, file: &str, dir: &str) -> PyResult<Grid> {
    Grid::parse(text, Path::new(file), Path::new(dir)).map_err(py_err)
}

/// The tasks of a grid: each task's parameters as (name, value) pairs, in task order.
#[pyfunction]
fn grid_tasks(text: &str, file: &str, dir: &str) -> PyResult<Vec<Vec<(String, String)>>> {
    let g = grid(text, file, dir)?;
    let tasks = g
        .plan(PathBuf::new())
        .tasks()
        .map_err(|e| py_err(g.refused(&e)))?;
    Ok(tasks
        .iter()
        .map(|t| {
            t.params()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect()
        })
        .collect())
}

/// Run task `index` of a grid (on whatever machine calls it): its result as JSON.
#[pyfunction]
fn run_task(py: Python<'_>, text: &str, file: &str, dir: &str, index: usize) -> PyResult<String> {
    let g = grid(text, file, dir)?;
    let tasks = g
        .plan(PathBuf::new())
        .tasks()
        .map_err(|e| py_err(g.refused(&e)))?;
    let t = tasks.get(index).ok_or_else(|| {
        BadInput::new_err(format!("task {index}: the grid has {} tasks", tasks.len()))
    })?;
    let r = py.detach(|| t.run()).map_err(py_err)?;
    json(&r)
}

fn results(list: &[String]) -> PyResult<Vec<TaskResult>> {
    list.iter()
        .enumerate()
        .map(|(i, r)| {
            serde_json::from_str(r)
                .map_err(|e| BadInput::new_err(format!("result {i}: not a task result: {e}")))
        })
        .collect()
}

/// `sweep.csv`'s text from every task's result, in task order.
#[pyfunction]
fn sweep_csv(text: &str, file: &str, dir: &str, task_results: Vec<String>) -> PyResult<String> {
    let g = grid(text, file, dir)?;
    let (l, p, f) = analysis::split_results(&g.plan(PathBuf::new()), results(&task_results)?)
        .map_err(py_err)?;
    Ok(csv_table(&sweep_records(&l, &p, &f)))
}

/// One task's own rows (no Figure 5 twins) as CSV: what a sweep with failed tasks keeps.
#[pyfunction]
fn task_csv(result: String) -> PyResult<String> {
    let r = results(&[result])?.remove(0);
    let records = match &r {
        TaskResult::Cache(p) => vec![p.csv_record()],
        TaskResult::Lifetimes(l) => l.csv_records(),
        TaskResult::Lfs(f) => vec![f.csv_record()],
    };
    Ok(csv_table(&records))
}

/// A SIZE: a byte count or a number with a KiB, MiB or GiB suffix (as the CLI reads it).
#[pyfunction]
fn parse_size(text: &str) -> PyResult<u64> {
    nvstack_core::size::parse_size(text).map_err(py_err)
}

/// Write the files `nvstack sim sweep` writes (sweep.csv, sweep.json, tables.txt, figures)
/// into `output` from every task's result, in task order; returns the files written.
#[pyfunction]
fn write_sweep(
    py: Python<'_>,
    text: &str,
    file: &str,
    dir: &str,
    task_results: Vec<String>,
    output: PathBuf,
    seconds: f64,
) -> PyResult<Vec<String>> {
    let g = grid(text, file, dir)?;
    let plan = g.plan(output.clone());
    let r = results(&task_results)?;
    let report = py
        .detach(|| write_results(&plan, r, seconds))
        .map_err(py_err)?;
    let mut files: Vec<String> = report
        .files
        .iter()
        .map(|f| f.display().to_string())
        .collect();
    files.push(output.join("sweep.json").display().to_string());
    Ok(files)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("BadInput", py.get_type::<BadInput>())?;
    m.add("EnvironmentFault", py.get_type::<EnvironmentFault>())?;
    m.add("Finding", py.get_type::<Finding>())?;
    m.add_class::<Reader>()?;
    m.add_class::<device::Device>()?;
    for f in [
        wrap_pyfunction!(stat, m)?,
        wrap_pyfunction!(cache_run, m)?,
        wrap_pyfunction!(lfs_run, m)?,
        wrap_pyfunction!(lifetimes_run, m)?,
        wrap_pyfunction!(analysis_run, m)?,
        wrap_pyfunction!(fate_run, m)?,
        wrap_pyfunction!(grid_tasks, m)?,
        wrap_pyfunction!(run_task, m)?,
        wrap_pyfunction!(sweep_csv, m)?,
        wrap_pyfunction!(write_sweep, m)?,
        wrap_pyfunction!(task_csv, m)?,
        wrap_pyfunction!(parse_size, m)?,
    ] {
        m.add_function(f)?;
    }
    let models: Vec<&str> = Model::ALL.iter().map(|x| x.name()).collect();
    let policies: Vec<&str> = PolicyKind::ALL.iter().map(|x| x.name()).collect();
    let formats: Vec<&str> = TraceFormat::ALL.iter().map(|x| x.name()).collect();
    m.add("MODELS", models)?;
    m.add("POLICIES", policies)?;
    m.add("FORMATS", formats)?;
    Ok(())
}
