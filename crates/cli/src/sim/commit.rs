//! `nvstack sim commit*`: the committing simulator of seed 003 (nvstack-mcsim): one run, the
//! paper's Figs. 8-11 as tables (ours beside the paper's), JSON and SVG, and recording
//! nvramdisk's persistent-memory traffic as a trace.

use nvstack_core::error::{Error, Result};
use nvstack_mcsim::figures::{self, Plan, Point, Source};
use nvstack_mcsim::kernels::{Kernel, KernelConfig};
use nvstack_mcsim::{Config, Mode};
use std::path::PathBuf;

/// The machine's flags (Table II by default).
#[derive(clap::Args, Clone, Debug)]
pub struct MachineArgs {
    /// Cores (one workload thread each).
    #[arg(long, default_value_t = 16)]
    cores: u32,
    /// Re-order buffer entries per core.
    #[arg(long, default_value_t = 256)]
    rob: u32,
    /// Entries per write sub-queue (the write queue has 8 sub-queues).
    #[arg(long, default_value_t = 8)]
    sub_queue_entries: u32,
    /// Persistence credits per sub-queue.
    #[arg(long, default_value_t = 8)]
    credits: u32,
    /// PCM read latency, ns.
    #[arg(long, default_value_t = 55)]
    read_ns: u32,
    /// PCM write latency, ns.
    #[arg(long, default_value_t = 150)]
    write_ns: u32,
}

/// The synthetic kernels' flags.
#[derive(clap::Args, Clone, Debug)]
pub struct KernelArgs {
    /// Updates per thread.
    #[arg(long, default_value_t = 1000)]
    updates: u64,
    /// Plain instructions between memory operations (mean).
    #[arg(long, default_value_t = 20)]
    gap: u32,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

impl MachineArgs {
    fn config(&self, mode: Mode) -> Config {
        Config {
            mode,
            cores: self.cores,
            rob_entries: self.rob,
            sub_queue_entries: self.sub_queue_entries,
            credits: self.credits,
            read_ns: self.read_ns,
            write_ns: self.write_ns,
            ..Config::default()
        }
    }
}

impl KernelArgs {
    fn config(&self, commit_every: u64) -> KernelConfig {
        KernelConfig {
            updates_per_thread: self.updates,
            gap_instructions: self.gap,
            seed: self.seed,
            commit_every,
            ..KernelConfig::default()
        }
    }
}

/// The library names a configuration's fields; the program's flags are named otherwise.
fn flags(e: Error) -> Error {
    const MAP: [(&str, &str); 9] = [
        ("rob_entries = ", "--rob "),
        ("sub_queue_entries = ", "--sub-queue-entries "),
        ("credits = ", "--credits "),
        ("read_ns = ", "--read-ns "),
        ("write_ns = ", "--write-ns "),
        ("commit_every = ", "--commit-every "),
        ("gap_instructions = ", "--gap "),
        ("l3_per_core.bytes", "--cores (the shared L3 is 1 MiB per core: sets must be a power of two), l3_per_core.bytes"),
        ("cores = ", "--cores "),
    ];
    match e {
        Error::BadInput(mut m) => {
            for (field, flag) in MAP {
                m = m.replacen(field, flag, 1);
            }
            Error::BadInput(m)
        }
        other => other,
    }
}

#[derive(clap::Args)]
pub struct CommitArgs {
    /// How commits are made durable: global (PCOMMIT), fine (per sub-queue), adr, eadr.
    #[arg(long = "commit", value_name = "global|fine|adr|eadr", value_parser = parse_mode)]
    mode: Mode,
    /// A synthetic kernel: hashmap, btree, kv, tx (ignored with --trace).
    #[arg(long, value_parser = parse_kernel, default_value = "hashmap")]
    kernel: Kernel,
    /// A recorded trace (docs/mcsim.md) instead of a kernel: one thread per core.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// A commit of the thread's region after every N updates (kernels).
    #[arg(long, default_value_t = 1)]
    commit_every: u64,
    #[command(flatten)]
    machine: MachineArgs,
    #[command(flatten)]
    kernel_args: KernelArgs,
    #[arg(long)]
    json: bool,
}

fn parse_mode(s: &str) -> std::result::Result<Mode, String> {
    Mode::parse(s).map_err(|e| e.to_string())
}

fn parse_kernel(s: &str) -> std::result::Result<Kernel, String> {
    Kernel::parse(s).map_err(|e| e.to_string())
}

pub fn commit(a: CommitArgs) -> Result<i32> {
    let machine = a.machine.config(a.mode);
    let kernel = a.kernel_args.config(a.commit_every);
    let source = a
        .trace
        .clone()
        .map_or(Source::Kernel(a.kernel), Source::Trace);
    let run = || -> Result<nvstack_mcsim::Report> {
        machine.validate()?;
        kernel.validate()?;
        let mut w = figures::open(&source, &machine, &kernel)?;
        Ok(nvstack_mcsim::run(&machine, w.as_mut())?.report)
    };
    let r = run().map_err(flags)?;
    if a.json {
        return crate::print_json(&r).map(|_| 0);
    }
    let rows = [
        ("workload", source.name()),
        ("commit", r.mode.name().to_string()),
        ("cores", r.cores.to_string()),
        ("cycles", r.cycles.to_string()),
        ("instructions", r.instructions.to_string()),
        ("IPC (whole machine)", format!("{:.3}", r.ipc)),
        (
            "loads / stores / flushes",
            format!("{} / {} / {}", r.loads, r.stores, r.flushes),
        ),
        (
            "memory reads / writes",
            format!("{} / {}", r.mc.reads, r.mc.writes),
        ),
        ("commits", r.mc.commits.to_string()),
        ("time per commit (ns)", format!("{:.1}", r.commit_ns_mean())),
        ("credit synchronisations", r.mc.syncs.to_string()),
        (
            "  credit / commit query reads",
            format!("{} / {}", r.mc.credit_queries, r.mc.commit_queries),
        ),
        (
            "writes that waited outside a sub-queue",
            r.mc.writes_waited.to_string(),
        ),
    ];
    let rows: Vec<(&str, String)> = rows.into_iter().collect();
    crate::output::key_values(&rows).map(|_| 0)
}

/// Which of the paper's figures.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Figure {
    Ipc,
    Time,
    Frequency,
    Syncs,
}

#[derive(clap::Args)]
pub struct FigureArgs {
    /// A synthetic kernel (repeatable; default: all four unless --trace is given).
    #[arg(long = "kernel", value_parser = parse_kernel)]
    kernels: Vec<Kernel>,
    /// A recorded trace (repeatable): its commits are its own, whatever --commit-every says.
    #[arg(long = "trace")]
    traces: Vec<PathBuf>,
    /// Seeds averaged per point (kernels).
    #[arg(long, default_value_t = 3)]
    seeds: u64,
    /// A commit after every N updates (kernels; Fig. 10 runs 1, 10 and 100).
    #[arg(long, default_value_t = 1)]
    commit_every: u64,
    #[command(flatten)]
    machine: MachineArgs,
    #[command(flatten)]
    kernel_args: KernelArgs,
    /// Write the figure as SVG into this folder.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

impl Figure {
    fn title(self) -> &'static str {
        match self {
            Figure::Ipc => "IPC of global and fine-grained committing (seed 003 Fig. 8)",
            Figure::Time => "Time per commit (seed 003 Fig. 9)",
            Figure::Frequency => "IPC against commit frequency (seed 003 Fig. 10)",
            Figure::Syncs => "Credit synchronisations (seed 003 Fig. 11)",
        }
    }

    fn file(self) -> &'static str {
        match self {
            Figure::Ipc => "mcsim-fig8-ipc.svg",
            Figure::Time => "mcsim-fig9-commit-time.svg",
            Figure::Frequency => "mcsim-fig10-frequency.svg",
            Figure::Syncs => "mcsim-fig11-syncs.svg",
        }
    }

    /// The value a row compares, its column label, and the paper's result.
    fn value(self, p: &Point) -> f64 {
        match self {
            Figure::Ipc | Figure::Frequency => p.ipc,
            Figure::Time => p.commit_ns_mean,
            Figure::Syncs => p.syncs,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Figure::Ipc | Figure::Frequency => "IPC",
            Figure::Time => "ns per commit",
            Figure::Syncs => "credit synchronisations",
        }
    }

    fn paper(self) -> &'static str {
        match self {
            Figure::Ipc => "paper (WHISPER, 16 cores): fine/global 1.78x on average",
            Figure::Time => "paper: a fine-grained commit 60.4 % shorter (2.07x faster committing)",
            Figure::Frequency => {
                "paper: fine gains up to 100 % committing every update, 6.0 % every 100"
            }
            Figure::Syncs => "paper: fine-grained 2.4x the synchronisations of global on average",
        }
    }
}

/// Rows of (workload or N, global, fine), in the grid's order.
fn rows(fig: Figure, points: &[Point]) -> Vec<(String, f64, f64)> {
    let mut rows: Vec<(String, f64, f64)> = Vec::new();
    let workloads = points
        .iter()
        .map(|p| &p.workload)
        .collect::<std::collections::HashSet<_>>()
        .len();
    for p in points {
        let key = if fig == Figure::Frequency {
            p.commit_every.to_string()
        } else {
            p.workload.clone()
        };
        let i = rows.iter().position(|r| r.0 == key).unwrap_or_else(|| {
            rows.push((key, 0.0, 0.0));
            rows.len() - 1
        });
        // Fig. 10 averages the workloads at each frequency.
        let share = if fig == Figure::Frequency {
            workloads as f64
        } else {
            1.0
        };
        match p.mode {
            Mode::Global => rows[i].1 += fig.value(p) / share,
            _ => rows[i].2 += fig.value(p) / share,
        }
    }
    rows
}

/// The grid a figure runs. Figs. 8, 9 and 11 run the same one (one commit frequency), Fig.
/// 10 runs the kernels at three.
fn plan(fig: Figure, a: &FigureArgs) -> Result<Plan> {
    let mut sources: Vec<Source> = a.kernels.iter().map(|k| Source::Kernel(*k)).collect();
    if sources.is_empty() && a.traces.is_empty() {
        sources = Kernel::ALL.iter().map(|k| Source::Kernel(*k)).collect();
    }
    if fig == Figure::Frequency && !a.traces.is_empty() {
        return Err(Error::bad(
            "sim commit-frequency runs kernels only: a trace's commits are its own (drop --trace)",
        ));
    }
    sources.extend(a.traces.iter().cloned().map(Source::Trace));
    let plan = Plan {
        machine: a.machine.config(Mode::Fine),
        kernel: a.kernel_args.config(a.commit_every),
        sources,
        modes: vec![Mode::Global, Mode::Fine],
        commit_every: if fig == Figure::Frequency {
            vec![1, 10, 100]
        } else {
            vec![a.commit_every]
        },
        seeds: a.seeds,
    };
    Ok(plan)
}

pub fn figure(fig: Figure, a: FigureArgs) -> Result<i32> {
    let points = figures::grid(&plan(fig, &a)?).map_err(flags)?;
    let rows = rows(fig, &points);
    if let Some(dir) = &a.plot {
        plot(fig, &rows, dir)?;
    }
    if a.json {
        let doc =
            serde_json::json!({ "figure": fig.title(), "points": points, "paper": fig.paper() });
        return crate::print_json(&doc).map(|_| 0);
    }
    print_table(fig, &rows)
}

/// Figs. 8, 9 and 11 from one run of their common grid: each table (and SVG) exactly as its
/// own command prints it, one after another, for a third of the simulation.
pub fn figures_shared(a: FigureArgs) -> Result<i32> {
    const SHARED: [Figure; 3] = [Figure::Ipc, Figure::Time, Figure::Syncs];
    let points = figures::grid(&plan(Figure::Ipc, &a)?).map_err(flags)?;
    if let Some(dir) = &a.plot {
        for fig in SHARED {
            plot(fig, &rows(fig, &points), dir)?;
        }
    }
    if a.json {
        let doc = serde_json::json!({
            "figures": SHARED.map(Figure::title),
            "points": points,
            "paper": SHARED.map(Figure::paper),
        });
        return crate::print_json(&doc).map(|_| 0);
    }
    for fig in SHARED {
        print_table(fig, &rows(fig, &points))?;
    }
    Ok(0)
}

fn print_table(fig: Figure, rows: &[(String, f64, f64)]) -> Result<i32> {
    let first = if fig == Figure::Frequency {
        "commit every N"
    } else {
        "workload"
    };
    let ratio = match fig {
        Figure::Time => "fine shorter by",
        _ => "fine / global",
    };
    let w = rows
        .iter()
        .map(|r| r.0.len())
        .chain([first.len(), 4])
        .max()
        .unwrap_or(0);
    let mut out = format!(
        "{}\n{:<w$}  {:>14}  {:>14}  {:>15}\n",
        fig.title(),
        first,
        "global",
        "fine",
        ratio
    );
    let fmt = |v: f64| {
        if fig == Figure::Ipc || fig == Figure::Frequency {
            format!("{v:.3}")
        } else {
            format!("{v:.1}")
        }
    };
    let cmp = |g: f64, f: f64| match fig {
        Figure::Time => format!("{:.1} %", 100.0 * (1.0 - f / g)),
        _ => format!("{:.2}x", f / g),
    };
    for (k, g, f) in rows {
        out.push_str(&format!(
            "{k:<w$}  {:>14}  {:>14}  {:>15}\n",
            fmt(*g),
            fmt(*f),
            cmp(*g, *f)
        ));
    }
    if fig != Figure::Frequency && rows.len() > 1 {
        let n = rows.len() as f64;
        let (g, f) = rows
            .iter()
            .fold((0.0, 0.0), |(g, f), r| (g + r.1 / n, f + r.2 / n));
        out.push_str(&format!(
            "{:<w$}  {:>14}  {:>14}  {:>15}\n",
            "mean",
            fmt(g),
            fmt(f),
            cmp(g, f)
        ));
    }
    out.push_str(&format!(
        "({}; {}. Ours: synthetic kernels after WHISPER's kinds or recorded nvstack traces on the \
         model of docs/mcsim.md, not WHISPER on DRAMSim2, so magnitudes differ; the direction is what compares.)\n",
        fig.label(),
        fig.paper()
    ));
    crate::output::out(out.as_bytes()).map(|_| 0)
}

fn plot(fig: Figure, rows: &[(String, f64, f64)], dir: &std::path::Path) -> Result<()> {
    use nvstack_plot::{LineChart, Scale, Series};
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::env(format!("--plot {}: {e}", dir.display())))?;
    let x = |i: usize, k: &str| {
        if fig == Figure::Frequency {
            k.parse().unwrap_or(0.0)
        } else {
            i as f64 + 1.0
        }
    };
    let series = |name: &str, pick: fn(&(String, f64, f64)) -> f64| Series {
        name: name.into(),
        points: rows
            .iter()
            .enumerate()
            .map(|(i, r)| (x(i, &r.0), pick(r)))
            .collect(),
    };
    let names: Vec<String> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| format!("{} {}", i + 1, r.0))
        .collect();
    LineChart {
        title: fig.title().into(),
        x_label: if fig == Figure::Frequency {
            "commit every N updates".into()
        } else {
            format!("workload ({})", names.join(", "))
        },
        y_label: fig.label().into(),
        x_scale: if fig == Figure::Frequency {
            Scale::Log10
        } else {
            Scale::Linear
        },
        y_scale: Scale::Linear,
        series: vec![series("global", |r| r.1), series("fine", |r| r.2)],
    }
    .write_svg(&dir.join(fig.file()))
}
