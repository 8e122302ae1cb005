//! `nvstack sim lfs`: the LFS segment writer of seed 002 section 3 over a trace, without and
//! with an NVRAM write buffer, side by side from one pass (the model: `nvstack_sim::lfs`).

use crate::sim::TraceArgs;
use nvstack_core::error::Result;
use nvstack_core::size::format_size;
use nvstack_sim::lfs::{self, Geometry, LfsConfig, LfsReport, LfsStats, TraceCounts};

#[derive(clap::Args)]
pub struct LfsArgs {
    #[command(flatten)]
    trace: TraceArgs,
    /// Segment size (a multiple of the block size; Sprite LFS: 512 KiB).
    #[arg(long, value_parser = crate::size_arg, default_value = "512KiB")]
    segment_size: u64,
    /// Metadata block size: every segment carries at least one (more when the data blocks'
    /// 4-byte addresses do not fit in one).
    #[arg(long, value_parser = crate::size_arg, default_value = "4KiB")]
    metadata_size: u64,
    /// Summary block size: one at the end of every segment.
    #[arg(long, value_parser = crate::size_arg, default_value = "512")]
    summary_size: u64,
    /// NVRAM write buffer of the "with buffer" run (a multiple of the block size; 0 = none).
    #[arg(long, value_parser = crate::size_arg, default_value = "512KiB")]
    nvram: u64,
    /// A sync after every N-th write request, besides the trace's own sync flags.
    #[arg(long, value_name = "N")]
    fsync_every: Option<u64>,
    /// Write pending data older than SECONDS (the cleaner runs every 5 s), or `off`.
    #[arg(long, value_name = "SECONDS|off", default_value = "30")]
    timeout: String,
    #[arg(long)]
    json: bool,
}

pub fn run(a: LfsArgs) -> Result<i32> {
    // Every argument is checked before the trace is opened, so a bad one names its flag.
    a.trace.validate()?;
    let cfg = LfsConfig {
        block_bytes: a.trace.block_size,
        segment_bytes: a.segment_size,
        metadata_bytes: a.metadata_size,
        summary_bytes: a.summary_size,
        nvram_bytes: a.nvram,
        timeout_ns: lfs::parse_timeout(&a.timeout).map_err(crate::sim::flags)?,
        fsync_every: a.fsync_every,
    };
    cfg.validate().map_err(crate::sim::flags)?;
    let mut src = a.trace.open()?;
    let run = lfs::simulate(&mut src, &cfg)?;
    let report = LfsReport::new(&a.trace.trace, a.trace.format, cfg, &src, run);
    if a.json {
        crate::print_json(&report)?;
    } else {
        print_table(&report)?;
    }
    Ok(0)
}

/// The run's settings and the trace's counts: one (label, value) line each.
fn head_lines(r: &LfsReport) -> Vec<(&'static str, String)> {
    let c = &r.config;
    let g: &Geometry = &r.run.geometry;
    let t: &TraceCounts = &r.run.counts;
    let timeout = match c.timeout_ns {
        Some(ns) => format!(
            "{} s (cleaner every {} s)",
            ns / 1_000_000_000,
            r.cleaner_period_s
        ),
        None => "off".to_string(),
    };
    let fsync = match c.fsync_every {
        Some(n) => format!("every {n} write requests, and the trace's sync flags"),
        None => "the trace's sync flags only".to_string(),
    };
    vec![
        ("trace", format!("{} ({})", r.trace, r.format.name())),
        (
            "segment",
            format!(
                "{} = {} data blocks of {} + metadata {} + summary {} (at most)",
                format_size(c.segment_bytes),
                g.segment_data_blocks,
                format_size(g.block_bytes),
                format_size(g.metadata_bytes * g.metadata_blocks(g.segment_data_blocks)),
                format_size(g.summary_bytes)
            ),
        ),
        ("timeout", timeout),
        ("syncs from", fsync),
        (
            "requests (skipped lines)",
            format!("{} ({})", r.requests, r.skipped_lines),
        ),
        (
            "block accesses (reads / writes)",
            format!(
                "{} ({} / {})",
                t.block_accesses, t.block_reads, t.block_writes
            ),
        ),
        (
            "write requests (flagged sync)",
            format!("{} ({})", t.write_requests, t.sync_requests_flagged),
        ),
        ("sync points", t.syncs.to_string()),
    ]
}

/// The statistics, one (label, (without buffer, with buffer)) row each.
fn stat_rows(r: &LfsReport) -> Vec<(&'static str, (String, String))> {
    let (a, b) = (&r.run.without_buffer, &r.run.with_buffer);
    let kib = |x: Option<f64>| x.map_or("NA".to_string(), |k| format!("{k:.1}"));
    let pct = |x: f64| format!("{x:.2} %");
    let pct_opt = |x: Option<f64>| x.map_or("NA".to_string(), |p| format!("{p:.2} %"));
    let row = |f: &dyn Fn(&LfsStats) -> String| (f(a), f(b));
    vec![
        (
            "NVRAM write buffer",
            row(&|s| {
                if s.nvram_bytes == 0 {
                    "none".to_string()
                } else {
                    format_size(s.nvram_bytes)
                }
            }),
        ),
        ("disk write accesses", row(&|s| s.disk_writes.to_string())),
        ("  full segments", row(&|s| s.full_segments.to_string())),
        (
            "  partial: sync / timeout / final",
            row(&|s| {
                format!(
                    "{} / {} / {}",
                    s.partial_sync, s.partial_timeout, s.partial_final
                )
            }),
        ),
        (
            "syncs held in NVRAM / with nothing pending",
            row(&|s| format!("{} / {}", s.syncs_held, s.syncs_empty)),
        ),
        ("% segments partial (Table 3)", row(&|s| pct(s.pct_partial))),
        (
            "% segments partial due to sync",
            row(&|s| pct(s.pct_partial_sync)),
        ),
        (
            "KiB data per partial (Table 4)",
            row(&|s| kib(s.kib_per_partial)),
        ),
        (
            "KiB data per sync partial",
            row(&|s| kib(s.kib_per_sync_partial)),
        ),
        (
            "overwrites absorbed (blocks)",
            row(&|s| s.overwrites_absorbed.to_string()),
        ),
        ("data written (bytes)", row(&|s| s.data_bytes.to_string())),
        (
            "metadata + summary (bytes)",
            row(&|s| s.overhead_bytes.to_string()),
        ),
        (
            "partial-segment overhead, % of written",
            row(&|s| pct(s.pct_partial_overhead)),
        ),
        (
            "overhead, % of a partial segment",
            row(&|s| pct_opt(s.pct_overhead_per_partial)),
        ),
    ]
}

fn print_table(r: &LfsReport) -> Result<()> {
    let head = head_lines(r);
    let rows = stat_rows(r);
    let w = head
        .iter()
        .map(|(k, _)| k.len())
        .chain(rows.iter().map(|(k, _)| k.len()))
        .max()
        .unwrap_or(0);
    let w1 = rows
        .iter()
        .map(|(_, (x, _))| x.len())
        .chain(std::iter::once("without buffer".len()))
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for (k, v) in head {
        out.push_str(&format!("{k:<w$}  {v}\n"));
    }
    out.push('\n');
    out.push_str(&format!(
        "{:<w$}  {:>w1$}  {}\n",
        "", "without buffer", "with buffer"
    ));
    for (k, (x, y)) in rows {
        out.push_str(&format!("{k:<w$}  {x:>w1$}  {y}\n"));
    }
    out.push('\n');
    out.push_str(&format!(
        "{:<w$}  {:.2} %\n",
        "disk write accesses saved by the buffer", r.run.disk_write_reduction_pct
    ));
    crate::output::out(out.as_bytes())
}
