//! `nvstack sim lifetimes|fate|nvram-size|policies|models|bus|sweep`: the analyses of seed 002
//! section 2, each a table, `--json` and `--plot DIR` (SVG figures with the paper's axes).

use crate::progress::{Bars, Look};
use crate::sim::{flags, TraceArgs};
use clap::Args;
use nvstack_core::error::{Error, Result};
use nvstack_core::size::{format_size, parse_size};
use nvstack_policy::PolicyKind;
use nvstack_sim::analysis::grid::Grid;
use nvstack_sim::analysis::tables::{
    bus_table, fate_jobs, fate_rows, fate_table, lifetimes_table, models_table, points_table,
    policies_table, FateReport,
};
use nvstack_sim::analysis::{
    check_delays, delays_default_ns, lifetimes, model_points, nvram_grid_default,
    nvram_size_points, policy_points, run_points, sweep, Point, PointSpec, SweepPlan, TraceSpec,
    RANDOM_SEEDS_DEFAULT, SEEDS_MAX,
};
use nvstack_sim::cache::Model;
use nvstack_sim::figures;
use nvstack_sim::trace::{ReaderOptions, TraceFormat, BLOCK_BYTES_DEFAULT};
use std::path::{Path, PathBuf};

/// A comma-separated list of SIZEs (a newtype: clap takes a bare `Vec` for a repeated flag).
#[derive(Clone, Debug)]
pub struct Sizes(pub Vec<u64>);

/// A comma-separated list of durations.
#[derive(Clone, Debug)]
pub struct Durations(pub Vec<u64>);

pub fn size_list(s: &str) -> std::result::Result<Sizes, String> {
    size_vec(s).map(Sizes)
}

fn size_vec(s: &str) -> std::result::Result<Vec<u64>, String> {
    let v: std::result::Result<Vec<u64>, String> = s
        .split(',')
        .map(|x| parse_size(x).map_err(|e| e.to_string()))
        .collect();
    let v = v?;
    if v.is_empty() || v.len() > 64 {
        return Err("give 1 to 64 sizes".into());
    }
    Ok(v)
}

/// One duration: a number with a unit ms, s, min, h or d.
fn duration_ns(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let units: [(&str, u64); 5] = [
        ("ms", 1_000_000),
        ("min", 60_000_000_000),
        ("s", 1_000_000_000),
        ("h", 3_600_000_000_000),
        ("d", 86_400_000_000_000),
    ];
    for (u, mult) in units {
        if let Some(n) = t.strip_suffix(u) {
            if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) {
                if let Some(v) = n.parse::<u64>().ok().and_then(|n| n.checked_mul(mult)) {
                    return Ok(v);
                }
            }
            break;
        }
    }
    Err(format!(
        "bad duration '{s}': expected a whole number with ms, s, min, h or d (e.g. 30s)"
    ))
}

fn duration_list(s: &str) -> std::result::Result<Durations, String> {
    s.split(',')
        .map(duration_ns)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map(Durations)
}

fn spec(t: &TraceArgs) -> Result<TraceSpec> {
    t.validate()?;
    Ok(TraceSpec {
        path: t.trace.clone(),
        format: t.format,
        block_bytes: t.block_size,
        options: t.reader_options(),
    })
}

/// `--plot DIR`: created if missing (figures in it are replaced).
fn plot_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::env(format!("--plot {}: cannot create: {e}", dir.display())))
}

/// Runs `jobs` in parallel with a bar labelled `label` (the library reports, the CLI draws).
fn run_grid(jobs: Vec<(TraceSpec, PointSpec)>, label: &str) -> Result<Vec<Point>> {
    run_points(&jobs, label, &Bars::new(Look::Sim, true))
}

fn say_plots(paths: &[PathBuf]) -> Result<()> {
    for p in paths {
        eprintln!("wrote {}", p.display());
    }
    Ok(())
}

// ---------------------------------------------------------------- lifetimes (Figure 2)

#[derive(Args)]
pub struct LifetimesArgs {
    #[command(flatten)]
    trace: TraceArgs,
    /// Write-back delays (ms, s, min, h, d), comma-separated. Default 1ms to 1d.
    #[arg(long, value_parser = duration_list)]
    delays: Option<Durations>,
    #[arg(long)]
    json: bool,
    #[arg(long)]
    plot: Option<PathBuf>,
}

pub fn lifetimes_cmd(a: LifetimesArgs) -> Result<i32> {
    let s = spec(&a.trace)?;
    let delays = a.delays.map_or_else(delays_default_ns, |d| d.0);
    check_delays(&delays).map_err(flags)?;
    let l = lifetimes(&s, &delays)?;
    if let Some(d) = &a.plot {
        plot_dir(d)?;
        say_plots(&figures::fig2(d, std::slice::from_ref(&l))?)?;
    }
    if a.json {
        crate::print_json(&l)?;
    } else {
        crate::output::out(lifetimes_table(&l).as_bytes())?;
    }
    Ok(0)
}

// ---------------------------------------------------------------- fate (Table 2)

#[derive(Args)]
pub struct FateArgs {
    #[command(flatten)]
    trace: TraceArgs,
    /// Volatile cache of the finite rows (unified model).
    #[arg(long, value_parser = crate::size_arg, default_value = "8MiB")]
    volatile: u64,
    /// NVRAM sizes of the finite rows, comma-separated (the first row is always an infinite
    /// NVRAM).
    #[arg(long, value_parser = size_list, default_value = "128KiB,1MiB,8MiB")]
    nvram: Sizes,
    #[arg(long, value_parser = crate::sim::values::policy(), default_value = "lru")]
    policy: PolicyKind,
    #[arg(long)]
    json: bool,
    #[arg(long)]
    plot: Option<PathBuf>,
}

pub fn fate_cmd(a: FateArgs) -> Result<i32> {
    let s = spec(&a.trace)?;
    let l = lifetimes(&s, &[u64::MAX])?;
    let jobs = fate_jobs(&s, a.volatile, &a.nvram.0, a.policy).map_err(flags)?;
    let points = run_grid(jobs, "fate")?;
    let rows = fate_rows(&s, &l, &points);
    if let Some(d) = &a.plot {
        plot_dir(d)?;
        let path = d.join(format!("table2-fate-{}.txt", figures::slug(&s.name())));
        std::fs::write(&path, fate_table(&s.name(), &rows))
            .map_err(|e| Error::env(format!("{}: {e}", path.display())))?;
        say_plots(&[path])?;
    }
    if a.json {
        crate::print_json(&FateReport::new(&s, rows))?;
    } else {
        crate::output::out(fate_table(&s.name(), &rows).as_bytes())?;
    }
    Ok(0)
}

// ---------------------------------------------------------------- grids (Figures 3-6, 2.6)

#[derive(Args)]
pub struct NvramSizeArgs {
    #[command(flatten)]
    trace: TraceArgs,
    /// NVRAM sizes, comma-separated (default 0 and 64KiB to 64MiB in powers of two).
    #[arg(long, value_parser = size_list)]
    nvram: Option<Sizes>,
    #[arg(long)]
    json: bool,
    #[arg(long)]
    plot: Option<PathBuf>,
}

pub fn nvram_size_cmd(a: NvramSizeArgs) -> Result<i32> {
    let s = spec(&a.trace)?;
    let grid = a.nvram.map_or_else(nvram_grid_default, |s| s.0);
    let jobs = nvram_size_points(&s, &grid)
        .map_err(flags)?
        .into_iter()
        .map(|p| (s.clone(), p))
        .collect();
    let points = run_grid(jobs, "nvram-size")?;
    if let Some(d) = &a.plot {
        plot_dir(d)?;
        say_plots(&figures::fig3(d, &points)?)?;
    }
    if a.json {
        crate::print_json(&points)?;
    } else {
        crate::output::out(
            points_table(
                &format!(
                    "{}: omniscient NVRAM write buffer (writes only), net write traffic (seed 002 Fig. 3)",
                    s.name()
                ),
                &points,
                &["nvram", "writes", "writebacks", "dirty at end", "net write"],
            )
            .as_bytes(),
        )?;
    }
    Ok(0)
}

#[derive(Args)]
pub struct PoliciesArgs {
    #[command(flatten)]
    trace: TraceArgs,
    #[arg(long, value_parser = crate::sim::values::model(), default_value = "unified")]
    model: Model,
    /// The volatile cache beside the NVRAM.
    #[arg(long, value_parser = crate::size_arg, default_value = "8MiB")]
    volatile: u64,
    #[arg(long, value_parser = size_list)]
    nvram: Option<Sizes>,
    /// Seeds of the random policy (1..=N).
    #[arg(long, default_value_t = RANDOM_SEEDS_DEFAULT)]
    seeds: u64,
    #[arg(long)]
    json: bool,
    #[arg(long)]
    plot: Option<PathBuf>,
}

pub fn policies_cmd(a: PoliciesArgs) -> Result<i32> {
    if a.model == Model::Volatile {
        return Err(Error::bad(
            "--model volatile has no NVRAM policy: use write-aside or unified",
        ));
    }
    if a.seeds == 0 || a.seeds > 100 {
        return Err(Error::bad(format!("--seeds {}: give 1 to 100", a.seeds)));
    }
    let s = spec(&a.trace)?;
    let grid = a.nvram.map_or_else(nvram_grid_default, |s| s.0);
    let jobs = policy_points(&s, a.model, a.volatile, &grid, a.seeds)
        .map_err(flags)?
        .into_iter()
        .map(|p| (s.clone(), p))
        .collect();
    let points = run_grid(jobs, "policies")?;
    if let Some(d) = &a.plot {
        plot_dir(d)?;
        say_plots(&figures::fig4(d, &points)?)?;
    }
    if a.json {
        crate::print_json(&points)?;
    } else {
        crate::output::out(
            format!(
                "{}: net write traffic by NVRAM policy, {} model, {} volatile (seed 002 Fig. 4)\n{}",
                s.name(),
                a.model.name(),
                format_size(a.volatile),
                policies_table(&points)
            )
            .as_bytes(),
        )?;
    }
    Ok(0)
}

#[derive(Args)]
pub struct ModelsArgs {
    #[command(flatten)]
    trace: TraceArgs,
    /// Starting volatile cache sizes (Figure 5 uses the first, Figure 6 all).
    #[arg(long, value_parser = size_list, default_value = "8MiB,16MiB")]
    volatile: Sizes,
    /// Memory added: volatile memory for the volatile model, NVRAM for the others.
    #[arg(long, value_parser = size_list)]
    added: Option<Sizes>,
    #[arg(long)]
    json: bool,
    #[arg(long)]
    plot: Option<PathBuf>,
}

pub fn models_cmd(a: ModelsArgs) -> Result<i32> {
    let s = spec(&a.trace)?;
    let added = a.added.map_or_else(nvram_grid_default, |s| s.0);
    let jobs = model_points(
        &s,
        &a.volatile.0,
        &added,
        &[Model::Volatile, Model::WriteAside, Model::Unified],
    )
    .map_err(flags)?
    .into_iter()
    .map(|p| (s.clone(), p))
    .collect();
    let points = run_grid(jobs, "models")?;
    if let Some(d) = &a.plot {
        plot_dir(d)?;
        say_plots(&figures::fig56(d, &points)?)?;
    }
    if a.json {
        crate::print_json(&points)?;
    } else {
        crate::output::out(
            format!(
                "{}: net total traffic (read misses + write-backs + dirty at end, % of block accesses) as memory is added (seed 002 Figs. 5, 6)\n{}",
                s.name(),
                models_table(&points)
            )
            .as_bytes(),
        )?;
    }
    Ok(0)
}

#[derive(Args)]
pub struct BusArgs {
    #[command(flatten)]
    trace: TraceArgs,
    #[arg(long, value_parser = crate::size_arg, default_value = "8MiB")]
    volatile: u64,
    #[arg(long, value_parser = size_list, default_value = "1MiB,8MiB")]
    nvram: Sizes,
    #[arg(long)]
    json: bool,
    #[arg(long)]
    plot: Option<PathBuf>,
}

pub fn bus_cmd(a: BusArgs) -> Result<i32> {
    let s = spec(&a.trace)?;
    let jobs = model_points(
        &s,
        &[a.volatile],
        &a.nvram.0,
        &[Model::WriteAside, Model::Unified],
    )
    .map_err(flags)?
    .into_iter()
    .map(|p| (s.clone(), p))
    .collect();
    let points = run_grid(jobs, "bus")?;
    if let Some(d) = &a.plot {
        plot_dir(d)?;
        say_plots(&figures::bus(d, &points)?)?;
    }
    if a.json {
        crate::print_json(&points)?;
    } else {
        crate::output::out(
            format!(
                "{}: NVRAM accesses and memory-bus blocks (seed 002 section 2.6; paper: unified makes 2 to 2.5x the NVRAM accesses, and at least 25 % less bus traffic)\n{}",
                s.name(),
                bus_table(&points)
            )
            .as_bytes(),
        )?;
    }
    Ok(0)
}

// ---------------------------------------------------------------- sweep

#[derive(Args)]
pub struct SweepArgs {
    /// A grid file (TOML: traces, formats, NVRAM sizes, seeds; docs/sim.md section 3) instead
    /// of the flags below, which are the default grid.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["traces", "nvram", "seeds", "block_size"])]
    grid: Option<PathBuf>,
    /// Traces as FILE:FORMAT, repeated (default: the two shared traces in --shared).
    #[arg(long = "trace", value_name = "FILE:FORMAT")]
    traces: Vec<String>,
    /// Where the shared traces are (cloudPhysicsIO.csv, tpcc-small.trace).
    #[arg(long, default_value = "../shared/traces")]
    shared: PathBuf,
    #[arg(long, default_value_t = BLOCK_BYTES_DEFAULT)]
    block_size: u32,
    /// NVRAM sizes (and memory added in Figures 5 and 6).
    #[arg(long, value_parser = size_list)]
    nvram: Option<Sizes>,
    #[arg(long, default_value_t = RANDOM_SEEDS_DEFAULT)]
    seeds: u64,
    /// Folder for sweep.csv (every result, a `kind` column telling cache runs, lifetime points
    /// and LFS comparisons apart), sweep.json, the tables and the figures (created; files
    /// replaced).
    #[arg(long)]
    output: PathBuf,
    #[arg(long)]
    json: bool,
}

fn parse_trace_arg(s: &str, block_size: u32) -> Result<TraceSpec> {
    let (file, fmt) = s.rsplit_once(':').ok_or_else(|| {
        Error::bad(format!(
            "--trace '{s}': expected FILE:FORMAT, e.g. trace.csv:msr"
        ))
    })?;
    let format = TraceFormat::parse(fmt).ok_or_else(|| {
        Error::bad(format!(
            "--trace '{s}': unknown format '{fmt}' ({})",
            TraceFormat::ALL.map(|f| f.name()).join(", ")
        ))
    })?;
    Ok(TraceSpec {
        path: PathBuf::from(file),
        format,
        block_bytes: block_size,
        options: ReaderOptions::default(),
    })
}

pub fn sweep_cmd(a: SweepArgs) -> Result<i32> {
    if let Some(file) = &a.grid {
        let grid = Grid::read(file)?;
        return sweep_plan(&a, grid.plan(a.output.clone()), |e| grid.refused(&e));
    }
    if !a.block_size.is_power_of_two() || !(512..=1 << 20).contains(&a.block_size) {
        return Err(Error::bad(format!(
            "--block-size {}: must be a power of two from 512 to 1048576",
            a.block_size
        )));
    }
    if a.seeds == 0 || a.seeds > SEEDS_MAX {
        return Err(Error::bad(format!(
            "--seeds {}: give 1 to {SEEDS_MAX}",
            a.seeds
        )));
    }
    let plan = SweepPlan {
        traces: sweep_traces(&a)?,
        nvram_bytes: a.nvram.clone().map_or_else(nvram_grid_default, |s| s.0),
        seeds: a.seeds,
        output: a.output.clone(),
    };
    sweep_plan(&a, plan, flags)
}

/// Run `plan` (from the flags or a grid file); `refused` words a setting the plan refuses.
fn sweep_plan(
    a: &SweepArgs,
    plan: SweepPlan,
    refused: impl Fn(nvstack_sim::field::Invalid) -> Error,
) -> Result<i32> {
    std::fs::create_dir_all(&plan.output).map_err(|e| {
        Error::env(format!(
            "--output {}: cannot create: {e}",
            plan.output.display()
        ))
    })?;
    plan.jobs().map_err(refused)?;
    let report = sweep(&plan, &Bars::new(Look::Sim, true))?;
    if a.json {
        crate::print_json(&report)?;
    } else {
        crate::output::out(report.tables.as_bytes())?;
        eprintln!(
            "sweep: {} runs over {} traces in {:.1} s; wrote {} and {} more files in {}",
            report.points.len(),
            plan.traces.len(),
            report.seconds,
            plan.output.join("sweep.json").display(),
            report.files.len(),
            plan.output.display()
        );
    }
    Ok(0)
}

/// The traces of `--trace FILE:FORMAT`, else the two shared traces in `--shared`.
fn sweep_traces(a: &SweepArgs) -> Result<Vec<TraceSpec>> {
    if !a.traces.is_empty() {
        return a
            .traces
            .iter()
            .map(|t| parse_trace_arg(t, a.block_size))
            .collect();
    }
    let shared = [
        ("cloudPhysicsIO.csv", TraceFormat::Cloudphysics),
        ("tpcc-small.trace", TraceFormat::Disksim),
    ];
    shared
        .iter()
        .map(|(f, fmt)| {
            let path = a.shared.join(f);
            if !path.is_file() {
                return Err(Error::bad(format!(
                    "{}: not found (give --shared DIR or --trace FILE:FORMAT)",
                    path.display()
                )));
            }
            Ok(TraceSpec {
                path,
                format: *fmt,
                block_bytes: a.block_size,
                options: ReaderOptions::default(),
            })
        })
        .collect()
}
