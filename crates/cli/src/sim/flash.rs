//! `nvstack sim flash`: a block trace replayed in virtual time on NAND under an FTL
//! (`nvstack_lab::flash_replay`: the simulator's trace readers feeding flash's replay): writes
//! per logical page and per physical page, erase counts, merges, time and energy, as a table,
//! `--json`, and with `--plot DIR` three SVG figures after seed 004's Figures 5 to 7.

use crate::flash::{describe, histogram_table, GeometryArgs};
use clap::Args;
use nvstack_core::error::{Error, Result};
use nvstack_flash::replay::{erase_histogram, Replay, ReplayReport};
use nvstack_lab::flash_replay::{replay_trace, Replayed};
use nvstack_plot::{LineChart, Scale, Series};
use nvstack_sim::trace::{ReaderOptions, TraceFormat};
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct FlashSimArgs {
    /// Trace file.
    #[arg(long)]
    trace: PathBuf,
    #[arg(long, value_parser = crate::sim::values::trace_format())]
    format: TraceFormat,
    /// Skip malformed lines (and count them) instead of stopping with exit 2.
    #[arg(long)]
    skip_bad_lines: bool,
    /// fio iolog version 2 only (it has no times): microseconds between requests.
    #[arg(long)]
    interarrival: Option<u64>,
    #[command(flatten)]
    geometry: GeometryArgs,
    #[arg(long)]
    json: bool,
    /// Write the figures (SVG) into this folder.
    #[arg(long)]
    plot: Option<PathBuf>,
}

#[derive(serde::Serialize)]
struct FlashSimReport {
    trace: String,
    format: TraceFormat,
    skipped_lines: u64,
    #[serde(flatten)]
    replay: ReplayReport,
    /// `erase_histogram[k]`: blocks erased k times.
    erase_histogram: Vec<u64>,
    figures: Vec<String>,
}

pub fn run(a: FlashSimArgs) -> Result<i32> {
    let h = a.geometry.header()?;
    let opts = ReaderOptions {
        skip_bad_lines: a.skip_bad_lines,
        interarrival_ns: a.interarrival.map(|us| us.saturating_mul(1000)),
    };
    let chip = (h.geo, h.ftl, h.timing);
    let Replayed {
        replay,
        skipped_lines,
    } = replay_trace(&a.trace, a.format, &opts, chip)?;
    let figures = match &a.plot {
        Some(dir) => figures(dir, &replay)?,
        None => Vec::new(),
    };
    let report = FlashSimReport {
        trace: a.trace.display().to_string(),
        format: a.format,
        skipped_lines,
        replay: replay.report(),
        erase_histogram: erase_histogram(&replay.counters().block_erases),
        figures: figures.iter().map(|p| p.display().to_string()).collect(),
    };
    if a.json {
        crate::print_json(&report)?;
    } else {
        print_table(&report, &h)?;
    }
    Ok(0)
}

fn print_table(r: &FlashSimReport, h: &nvstack_flash::file::Header) -> Result<()> {
    let p = &r.replay;
    let (s, m) = (&p.stats, &p.merges);
    let rows: Vec<(&str, String)> = vec![
        ("trace", format!("{} ({})", r.trace, r.format.name())),
        ("device", describe(h)),
        (
            "requests (reads / writes)",
            format!(
                "{} ({} / {})",
                s.requests, s.read_requests, s.write_requests
            ),
        ),
        (
            "requests wrapped past the end",
            s.wrapped_requests.to_string(),
        ),
        ("skipped lines", r.skipped_lines.to_string()),
        (
            "host page reads / writes",
            format!("{} / {}", s.host_page_reads, s.host_page_writes),
        ),
        (
            "partial-page writes read first",
            s.partial_page_reads.to_string(),
        ),
        (
            "logical pages written (max writes one)",
            format!("{} ({})", p.logical_pages_written, p.logical_writes_max),
        ),
        (
            "NAND page reads / programs / block erases",
            format!(
                "{} / {} / {}",
                p.page_reads, p.page_programs, p.block_erases
            ),
        ),
        (
            "max programs of one physical page",
            p.physical_programs_max.to_string(),
        ),
        (
            "write amplification",
            format!("{:.3}", p.write_amplification),
        ),
        (
            "merges switch / partial / full",
            format!(
                "{} / {} / {} ({} pages copied)",
                m.switch, m.partial, m.full, m.copies
            ),
        ),
        (
            "erases per block",
            format!(
                "mean {:.3}, sd {:.3}, max {}",
                p.erase_mean, p.erase_sd, p.erase_max
            ),
        ),
        ("device time", format!("{:.6} s", p.time_ns as f64 * 1e-9)),
        ("energy", format!("{:.6} J", p.energy_j)),
    ];
    crate::output::key_values(&rows)?;
    histogram_table(&r.erase_histogram)?;
    for f in &r.figures {
        crate::say!("figure: {f}")?;
    }
    Ok(())
}

/// At most this many points a figure: per-page counts are shown as the maximum of each run of
/// consecutive pages, so a hot page stays visible.
const POINTS_MAX: usize = 1024;

pub(crate) fn peaks(xs: &[u32]) -> Vec<(f64, f64)> {
    let width = xs.len().div_ceil(POINTS_MAX).max(1);
    xs.chunks(width)
        .enumerate()
        .map(|(i, c)| ((i * width) as f64, f64::from(*c.iter().max().unwrap_or(&0))))
        .collect()
}

fn figures(dir: &Path, r: &Replay) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::env(format!("--plot {}: cannot create: {e}", dir.display())))?;
    let c = r.counters();
    let hist = erase_histogram(&c.block_erases);
    let charts = [
        (
            "flash-logical-writes.svg",
            "Writes per logical page seen by the FTL (seed 004 Fig. 5)",
            "logical page",
            "host writes (max over neighbouring pages)",
            peaks(&r.logical_writes),
        ),
        (
            "flash-physical-programs.svg",
            "Programs per physical page (seed 004 Fig. 6)",
            "physical page",
            "programs (max over neighbouring pages)",
            peaks(&c.page_programs),
        ),
        (
            "flash-erases.svg",
            "Erase counts per block (seed 004 Fig. 7)",
            "erase count",
            "blocks",
            hist.iter()
                .enumerate()
                .map(|(k, &n)| (k as f64, n as f64))
                .collect(),
        ),
    ];
    let name = r.report().ftl.kind.name();
    let mut out = Vec::new();
    for (file, title, x, y, points) in charts {
        let path = dir.join(file);
        LineChart {
            title: title.into(),
            x_label: x.into(),
            y_label: y.into(),
            x_scale: Scale::Linear,
            y_scale: Scale::Linear,
            series: vec![Series {
                name: name.into(),
                points,
            }],
        }
        .write_svg(&path)?;
        out.push(path);
    }
    Ok(out)
}
