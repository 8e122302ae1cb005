//! `nvstack sim lifetimes|fate|nvram-size|policies|models|bus|sweep`: the analyses of seed 002
//! section 2, each a table, `--json` and `--plot DIR` (SVG figures with the paper's axes).

use crate::sim::TraceArgs;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use nvstack_core::error::{Error, Result};
use nvstack_core::report::{fmt_count, render};
use nvstack_core::size::{format_size, parse_size};
use nvstack_policy::PolicyKind;
use nvstack_sim::analysis::{
    csv_table, delays_default_ns, lifetimes, model_points, nvram_grid_default, nvram_size_points,
    policy_points, random_summary, run_points, CsvRecord, Figure, Lifetimes, Point, PointSpec,
    TraceSpec, RANDOM_SEEDS_DEFAULT, VOLATILE_BASE2_BYTES, VOLATILE_BASE_BYTES,
};
use nvstack_sim::cache::Model;
use nvstack_sim::figures;
use nvstack_sim::lfs::{self, LfsConfig, LfsRun};
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

fn fmt_duration(ns: u64) -> String {
    let units: [(&str, u64); 5] = [
        ("d", 86_400_000_000_000),
        ("h", 3_600_000_000_000),
        ("min", 60_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
    ];
    for (u, m) in units {
        if ns >= m && ns.is_multiple_of(m) {
            return format!("{}{u}", ns / m);
        }
    }
    format!("{ns}ns")
}

fn pct(x: f64) -> String {
    format!("{:.1} %", 100.0 * x)
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

fn progress(n: usize, label: &str) -> ProgressBar {
    let pb = ProgressBar::new(n as u64);
    pb.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} runs, {elapsed}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    pb.set_message(label.to_string());
    pb
}

fn run_grid(jobs: Vec<(TraceSpec, PointSpec)>, label: &str) -> Result<Vec<Point>> {
    let pb = progress(jobs.len(), label);
    let r = run_points(&jobs, &|| pb.inc(1));
    pb.finish_and_clear();
    r
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

fn lifetimes_table(l: &Lifetimes) -> String {
    let rows: Vec<Vec<String>> = (0..l.delays_ns.len())
        .map(|i| {
            vec![
                fmt_duration(l.delays_ns[i]),
                pct(if l.writes == 0 {
                    0.0
                } else {
                    l.died_within[i] as f64 / l.writes as f64
                }),
                fmt_count(l.flushed[i] as f64),
                fmt_count(l.remaining[i] as f64),
                pct(l.net_write_traffic[i]),
            ]
        })
        .collect();
    format!(
        "{}: {} block writes, {} blocks written, {} writes overwritten later\n{}",
        l.trace,
        fmt_count(l.writes as f64),
        fmt_count(l.distinct_written as f64),
        fmt_count(l.overwritten as f64),
        render(
            &[
                "delay",
                "dead within",
                "flushed",
                "remaining",
                "net write traffic"
            ],
            &rows,
            &[false, true, true, true, true],
        )
    )
}

pub fn lifetimes_cmd(a: LifetimesArgs) -> Result<i32> {
    let s = spec(&a.trace)?;
    let delays = a.delays.map_or_else(delays_default_ns, |d| d.0);
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

#[derive(serde::Serialize)]
struct FateRow {
    cache: String,
    writes: u64,
    overwritten: u64,
    written_back: u64,
    remaining: u64,
}

#[derive(serde::Serialize)]
struct FateReport {
    trace: String,
    write_bytes_note: &'static str,
    rows: Vec<FateRow>,
}

fn fate_rows(s: &TraceSpec, l: &Lifetimes, points: &[Point]) -> Vec<FateRow> {
    let mut rows = vec![FateRow {
        cache: "infinite NVRAM".into(),
        writes: l.writes,
        overwritten: l.overwritten,
        written_back: 0,
        remaining: l.distinct_written,
    }];
    for p in points.iter().filter(|p| p.trace == s.name()) {
        rows.push(FateRow {
            cache: format!(
                "{} {} NVRAM + {} volatile",
                p.policy.name(),
                format_size(p.nvram_bytes),
                format_size(p.volatile_bytes)
            ),
            writes: p.stats.writes,
            overwritten: p.stats.overwrites_absorbed,
            written_back: p.stats.writebacks,
            remaining: p.stats.dirty_at_end,
        });
    }
    rows
}

fn fate_table(trace: &str, rows: &[FateRow]) -> String {
    let p = |x: u64, of: u64| {
        if of == 0 {
            "-".to_string()
        } else {
            format!(
                "{} ({:.1} %)",
                fmt_count(x as f64),
                100.0 * x as f64 / of as f64
            )
        }
    };
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.cache.clone(),
                p(r.overwritten, r.writes),
                p(r.written_back, r.writes),
                p(r.remaining, r.writes),
                fmt_count(r.writes as f64),
            ]
        })
        .collect();
    format!(
        "{trace}: fate of block writes (seed 002 Table 2)\n{}",
        render(
            &[
                "cache",
                "overwritten (absorbed)",
                "written back",
                "remaining at end",
                "block writes"
            ],
            &cells,
            &[false, true, true, true, true],
        )
    )
}

pub fn fate_cmd(a: FateArgs) -> Result<i32> {
    let s = spec(&a.trace)?;
    let l = lifetimes(&s, &[u64::MAX])?;
    let jobs = a
        .nvram
        .0
        .iter()
        .map(|&n| {
            let mut ps = policy_points(&s, Model::Unified, a.volatile, &[n], 1)?;
            ps.retain(|p| p.config.policy == a.policy);
            Ok(ps.into_iter().map(|mut p| {
                p.figure = Figure::Fate;
                (s.clone(), p)
            }))
        })
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .flatten()
        .collect();
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
        crate::print_json(&FateReport {
            trace: s.name(),
            write_bytes_note: "counts are block writes; a partial-block write counts a whole block",
            rows,
        })?;
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

fn points_table(title: &str, points: &[Point], cols: &[&str]) -> String {
    let cells: Vec<Vec<String>> = points
        .iter()
        .map(|p| {
            cols.iter()
                .map(|c| match *c {
                    "trace" => p.trace.clone(),
                    "model" => p.model.name().to_string(),
                    "policy" => p.policy.name().to_string(),
                    "seed" => p.seed.to_string(),
                    "volatile" => format_size(p.volatile_bytes),
                    "nvram" => format_size(p.nvram_bytes),
                    "added" => format_size(p.added_bytes),
                    "writes" => fmt_count(p.stats.writes as f64),
                    "writebacks" => fmt_count(p.stats.writebacks as f64),
                    "dirty at end" => fmt_count(p.stats.dirty_at_end as f64),
                    "read misses" => fmt_count(p.stats.read_misses as f64),
                    "net write" => pct(p.stats.net_write_traffic),
                    "net total" => pct(p.stats.net_total_traffic),
                    "NVRAM acc" => fmt_count(p.stats.nvram_accesses as f64),
                    "bus blocks" => fmt_count(p.stats.bus_blocks as f64),
                    _ => unreachable!("unknown column {c}"),
                })
                .collect()
        })
        .collect();
    let right: Vec<bool> = cols
        .iter()
        .map(|c| !matches!(*c, "trace" | "model" | "policy"))
        .collect();
    format!("{title}\n{}", render(cols, &cells, &right))
}

pub fn nvram_size_cmd(a: NvramSizeArgs) -> Result<i32> {
    let s = spec(&a.trace)?;
    let grid = a.nvram.map_or_else(nvram_grid_default, |s| s.0);
    let jobs = nvram_size_points(&s, &grid)?
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

fn policies_table(points: &[Point]) -> String {
    let mut sizes: Vec<(String, u64)> = points
        .iter()
        .map(|p| (p.trace.clone(), p.nvram_bytes))
        .collect();
    sizes.sort();
    sizes.dedup();
    let rnd = random_summary(points);
    let cells: Vec<Vec<String>> = sizes
        .iter()
        .map(|(t, n)| {
            let get = |pol: PolicyKind| {
                points
                    .iter()
                    .find(|p| &p.trace == t && p.nvram_bytes == *n && p.policy == pol)
                    .map_or("-".to_string(), |p| pct(p.stats.net_write_traffic))
            };
            let r = rnd
                .iter()
                .find(|r| &r.0 == t && r.3 == *n)
                .map_or("-".to_string(), |r| {
                    format!("{} ({:.1}-{:.1})", pct(r.4), 100.0 * r.5, 100.0 * r.6)
                });
            vec![
                t.clone(),
                format_size(*n),
                get(PolicyKind::Lru),
                r,
                get(PolicyKind::Omniscient),
            ]
        })
        .collect();
    render(
        &[
            "trace",
            "nvram",
            "LRU",
            "random mean (min-max)",
            "omniscient",
        ],
        &cells,
        &[false, true, true, true, true],
    )
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
    let jobs = policy_points(&s, a.model, a.volatile, &grid, a.seeds)?
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

fn models_table(points: &[Point]) -> String {
    let mut keys: Vec<(String, u64, u64)> = points
        .iter()
        .map(|p| (p.trace.clone(), p.base_volatile_bytes, p.added_bytes))
        .collect();
    keys.sort();
    keys.dedup();
    let cells: Vec<Vec<String>> = keys
        .iter()
        .map(|(t, b, x)| {
            let get = |m: Model| {
                points
                    .iter()
                    .find(|p| {
                        &p.trace == t
                            && p.base_volatile_bytes == *b
                            && p.added_bytes == *x
                            && p.model == m
                    })
                    .map_or("-".to_string(), |p| pct(p.stats.net_total_traffic))
            };
            vec![
                t.clone(),
                format_size(*b),
                format_size(*x),
                get(Model::Volatile),
                get(Model::WriteAside),
                get(Model::Unified),
            ]
        })
        .collect();
    render(
        &[
            "trace",
            "start",
            "added",
            "volatile",
            "write-aside",
            "unified",
        ],
        &cells,
        &[false, true, true, true, true, true],
    )
}

pub fn models_cmd(a: ModelsArgs) -> Result<i32> {
    let s = spec(&a.trace)?;
    let added = a.added.map_or_else(nvram_grid_default, |s| s.0);
    let jobs = model_points(
        &s,
        &a.volatile.0,
        &added,
        &[Model::Volatile, Model::WriteAside, Model::Unified],
    )?
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

fn bus_table(points: &[Point]) -> String {
    let mut keys: Vec<(String, u64, u64)> = points
        .iter()
        .filter(|p| p.model != Model::Volatile)
        .map(|p| (p.trace.clone(), p.volatile_bytes, p.nvram_bytes))
        .collect();
    // One row per (trace, volatile, NVRAM): the points of the two models are not adjacent.
    keys.sort();
    keys.dedup();
    let cells: Vec<Vec<String>> = keys
        .iter()
        .map(|(t, v, n)| {
            let get = |m: Model| {
                points.iter().find(|p| {
                    &p.trace == t && p.volatile_bytes == *v && p.nvram_bytes == *n && p.model == m
                })
            };
            let (wa, un) = (get(Model::WriteAside), get(Model::Unified));
            let f = |p: Option<&Point>, g: fn(&Point) -> u64| {
                p.map_or("-".to_string(), |p| fmt_count(g(p) as f64))
            };
            let ratio = |g: fn(&Point) -> u64| match (wa, un) {
                (Some(w), Some(u)) if g(w) > 0 => format!("{:.2}", g(u) as f64 / g(w) as f64),
                _ => "-".to_string(),
            };
            vec![
                t.clone(),
                format_size(*v),
                format_size(*n),
                f(wa, |p| p.stats.nvram_accesses),
                f(un, |p| p.stats.nvram_accesses),
                ratio(|p| p.stats.nvram_accesses),
                f(wa, |p| p.stats.bus_blocks),
                f(un, |p| p.stats.bus_blocks),
                ratio(|p| p.stats.bus_blocks),
            ]
        })
        .collect();
    render(
        &[
            "trace",
            "volatile",
            "nvram",
            "NVRAM acc. write-aside",
            "NVRAM acc. unified",
            "unified/w-a",
            "bus write-aside",
            "bus unified",
            "unified/w-a",
        ],
        &cells,
        &[false, true, true, true, true, true, true, true, true],
    )
}

pub fn bus_cmd(a: BusArgs) -> Result<i32> {
    let s = spec(&a.trace)?;
    let jobs = model_points(
        &s,
        &[a.volatile],
        &a.nvram.0,
        &[Model::WriteAside, Model::Unified],
    )?
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

#[derive(serde::Serialize)]
struct SweepReport {
    traces: Vec<String>,
    nvram_bytes: Vec<u64>,
    seeds: u64,
    seconds: f64,
    lifetimes: Vec<Lifetimes>,
    points: Vec<Point>,
    lfs: Vec<LfsRow>,
    files: Vec<PathBuf>,
}

/// The sync sources of the sweep's LFS runs (Tables 3 and 4): the trace's own flags, then an
/// fsync after every N-th write request (the shared traces carry no sync flags).
const LFS_FSYNC_EVERY: [Option<u64>; 4] = [None, Some(1), Some(10), Some(100)];

/// One LFS comparison of the sweep: the paper's segment writer without and with a 512 KiB
/// buffer, for one trace and one sync source.
#[derive(serde::Serialize)]
struct LfsRow {
    trace: String,
    fsync_every: Option<u64>,
    #[serde(flatten)]
    run: LfsRun,
}

impl LfsRow {
    /// This comparison as a row of the sweep's CSV (kind `lfs`); `fsync_every` is `off` when
    /// the syncs come from the trace's own flags.
    fn csv_record(&self) -> CsvRecord {
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

fn lfs_rows(specs: &[TraceSpec]) -> Result<Vec<LfsRow>> {
    use rayon::prelude::*;
    let jobs: Vec<(&TraceSpec, Option<u64>)> = specs
        .iter()
        .flat_map(|s| LFS_FSYNC_EVERY.iter().map(move |&n| (s, n)))
        .collect();
    let pb = progress(jobs.len(), "lfs");
    let rows = jobs
        .par_iter()
        .map(|&(s, fsync_every)| {
            let cfg = LfsConfig {
                fsync_every,
                ..LfsConfig::paper(s.block_bytes)
            };
            let run = lfs::simulate(s.open()?, &cfg)?;
            pb.inc(1);
            Ok(LfsRow {
                trace: s.name(),
                fsync_every,
                run,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    pb.finish_and_clear();
    Ok(rows)
}

fn lfs_table(rows: &[LfsRow]) -> String {
    let opt = |x: Option<f64>| x.map_or("NA".to_string(), |v| format!("{v:.1}"));
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let (a, b) = (&r.run.without_buffer, &r.run.with_buffer);
            vec![
                r.trace.clone(),
                r.fsync_every
                    .map_or("trace flags".to_string(), |n| format!("every {n} writes")),
                fmt_count(r.run.counts.syncs as f64),
                format!("{} / {}", a.disk_writes, b.disk_writes),
                format!("{:.2} / {:.2}", a.pct_partial, b.pct_partial),
                format!("{:.2} / {:.2}", a.pct_partial_sync, b.pct_partial_sync),
                format!("{} / {}", opt(a.kib_per_partial), opt(b.kib_per_partial)),
                format!(
                    "{:.2} / {:.2}",
                    a.pct_partial_overhead, b.pct_partial_overhead
                ),
                format!("{:.1} %", r.run.disk_write_reduction_pct),
            ]
        })
        .collect();
    render(
        &[
            "trace",
            "syncs from",
            "syncs",
            "disk writes",
            "% partial",
            "% partial sync",
            "KiB/partial",
            "% lost to partials",
            "saved",
        ],
        &cells,
        &[false, false, true, true, true, true, true, true, true],
    )
}

fn parse_trace_arg(s: &str, block_size: u32) -> Result<TraceSpec> {
    let (file, fmt) = s.rsplit_once(':').ok_or_else(|| {
        Error::bad(format!(
            "--trace '{s}': expected FILE:FORMAT, e.g. trace.csv:msr"
        ))
    })?;
    let format = TraceFormat::parse(fmt).ok_or_else(|| {
        Error::bad(format!(
            "--trace '{s}': unknown format '{fmt}' (cloudphysics, disksim, msr, blkparse, fio)"
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
    let started = std::time::Instant::now();
    if !a.block_size.is_power_of_two() || !(512..=1 << 20).contains(&a.block_size) {
        return Err(Error::bad(format!(
            "--block-size {}: must be a power of two from 512 to 1048576",
            a.block_size
        )));
    }
    if a.seeds == 0 || a.seeds > 100 {
        return Err(Error::bad(format!("--seeds {}: give 1 to 100", a.seeds)));
    }
    let specs: Vec<TraceSpec> = if a.traces.is_empty() {
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
            .collect::<Result<_>>()?
    } else {
        a.traces
            .iter()
            .map(|t| parse_trace_arg(t, a.block_size))
            .collect::<Result<_>>()?
    };
    let grid = a.nvram.clone().map_or_else(nvram_grid_default, |s| s.0);
    std::fs::create_dir_all(&a.output).map_err(|e| {
        Error::env(format!(
            "--output {}: cannot create: {e}",
            a.output.display()
        ))
    })?;
    // The grid: Figure 3; every model and policy over the 8 MiB volatile cache (Figures 4, 5,
    // section 2.6); Figure 6's 16 MiB start for volatile and unified.
    let mut jobs: Vec<(TraceSpec, PointSpec)> = Vec::new();
    for s in &specs {
        let mut add = |ps: Vec<PointSpec>| jobs.extend(ps.into_iter().map(|p| (s.clone(), p)));
        add(nvram_size_points(s, &grid)?);
        for m in [Model::WriteAside, Model::Unified] {
            add(policy_points(s, m, VOLATILE_BASE_BYTES, &grid, a.seeds)?);
        }
        add(model_points(
            s,
            &[VOLATILE_BASE_BYTES],
            &grid,
            &[Model::Volatile],
        )?);
        add(model_points(
            s,
            &[VOLATILE_BASE2_BYTES],
            &grid,
            &[Model::Volatile, Model::Unified],
        )?);
    }
    let lifetimes_all: Vec<Lifetimes> = {
        let pb = progress(specs.len(), "lifetimes");
        let r = specs
            .iter()
            .map(|s| {
                let l = lifetimes(s, &delays_default_ns());
                pb.inc(1);
                l
            })
            .collect::<Result<Vec<_>>>()?;
        pb.finish_and_clear();
        r
    };
    let mut points = run_grid(jobs, "sweep")?;
    let lfs = lfs_rows(&specs)?;
    // The LRU runs of the policy grid are also Figure 5's NVRAM-model points: file a twin of
    // each under the model figure so every figure's filter finds its points.
    let twins: Vec<Point> = points
        .iter()
        .filter(|p| p.figure == Figure::Policies && p.policy == PolicyKind::Lru)
        .map(|p| Point {
            figure: Figure::Models,
            ..p.clone()
        })
        .collect();
    points.extend(twins);

    let mut files = Vec::new();
    let out = &a.output;
    let write = |name: &str, text: String, files: &mut Vec<PathBuf>| -> Result<()> {
        let p = out.join(name);
        std::fs::write(&p, text).map_err(|e| Error::env(format!("{}: {e}", p.display())))?;
        files.push(p);
        Ok(())
    };
    // Every result in one CSV: the cache runs, the lifetime points (one per trace and delay)
    // and the LFS comparisons, told apart by `kind`, over the union of their columns.
    let records: Vec<CsvRecord> = points
        .iter()
        .map(Point::csv_record)
        .chain(lifetimes_all.iter().flat_map(Lifetimes::csv_records))
        .chain(lfs.iter().map(LfsRow::csv_record))
        .collect();
    write("sweep.csv", csv_table(&records), &mut files)?;
    let mut tables = String::new();
    for l in &lifetimes_all {
        tables.push_str(&format!(
            "== Figure 2: byte lifetimes ==\n{}\n",
            lifetimes_table(l)
        ));
    }
    for s in &specs {
        let l = lifetimes_all
            .iter()
            .find(|l| l.trace == s.name())
            .expect("one per trace");
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
        tables.push_str(&format!(
            "== Table 2 ==\n{}\n",
            fate_table(&s.name(), &fate_rows(s, l, &fate_points))
        ));
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
    let f56: Vec<Point> = points
        .iter()
        .filter(|p| p.figure == Figure::Models && p.policy == PolicyKind::Lru)
        .cloned()
        .collect();
    tables.push_str(&format!(
        "\n== Figures 5 and 6: net total traffic as memory is added ==\n{}",
        models_table(&f56)
    ));
    tables.push_str(&format!(
        "\n== Section 2.6: NVRAM accesses and memory-bus blocks ==\n{}",
        bus_table(
            &f56.iter()
                .filter(|p| p.base_volatile_bytes == VOLATILE_BASE_BYTES)
                .cloned()
                .collect::<Vec<_>>()
        )
    ));
    tables.push_str(&format!(
        "\n== Tables 3 and 4: LFS segments without / with a 512KiB NVRAM buffer ==\n{}",
        lfs_table(&lfs)
    ));
    write("tables.txt", tables.clone(), &mut files)?;
    files.extend(figures::fig2(out, &lifetimes_all)?);
    files.extend(figures::fig3(out, &points)?);
    files.extend(figures::fig4(out, &points)?);
    files.extend(figures::fig56(out, &points)?);
    files.extend(figures::bus(out, &f56)?);
    let report = SweepReport {
        traces: specs.iter().map(|s| s.path.display().to_string()).collect(),
        nvram_bytes: grid,
        seeds: a.seeds,
        seconds: started.elapsed().as_secs_f64(),
        lifetimes: lifetimes_all,
        points,
        lfs,
        files: files.clone(),
    };
    let json =
        serde_json::to_string_pretty(&report).map_err(|e| Error::env(format!("json: {e}")))?;
    let jp = out.join("sweep.json");
    std::fs::write(&jp, &json).map_err(|e| Error::env(format!("{}: {e}", jp.display())))?;
    if a.json {
        crate::output::out(format!("{json}\n").as_bytes())?;
    } else {
        crate::output::out(tables.as_bytes())?;
        eprintln!(
            "sweep: {} runs over {} traces in {:.1} s; wrote {} and {} more files in {}",
            report.points.len(),
            specs.len(),
            report.seconds,
            jp.display(),
            files.len(),
            out.display()
        );
    }
    Ok(0)
}
