//! `nvstack sim stat`: what a trace holds, as the simulator reads it (the counting is
//! `nvstack_sim::trace::stat`): a table, or `--json`.

use clap::Args;
use nvstack_core::error::Result;
use nvstack_sim::trace::{self, TraceStat};

#[derive(Args)]
pub struct StatArgs {
    #[command(flatten)]
    trace: crate::sim::TraceArgs,
    #[arg(long)]
    json: bool,
}

pub fn run(a: StatArgs) -> Result<i32> {
    a.trace.validate()?;
    let t = &a.trace;
    let stat = trace::stat(&t.trace, t.format, t.block_size, &t.reader_options())?;
    if a.json {
        crate::print_json(&stat)?;
    } else {
        print_table(&stat)?;
    }
    Ok(0)
}

fn time_text(ns: Option<u64>) -> String {
    match ns {
        Some(ns) => format!("{}.{:09} s", ns / 1_000_000_000, ns % 1_000_000_000),
        None => "-".to_string(),
    }
}

fn print_table(s: &TraceStat) -> Result<()> {
    let span = match (s.first_time_ns, s.last_time_ns) {
        (Some(a), Some(b)) => time_text(Some(b - a)),
        _ => "-".to_string(),
    };
    let rows: Vec<(&str, String)> = vec![
        ("trace", format!("{} ({})", s.trace, s.format.name())),
        ("block size", format!("{} bytes", s.block_bytes)),
        (
            "requests (reads / writes)",
            format!(
                "{} ({} / {})",
                s.requests, s.read_requests, s.write_requests
            ),
        ),
        ("sync writes", s.sync_writes.to_string()),
        (
            "bytes read / written",
            format!("{} / {}", s.read_bytes, s.write_bytes),
        ),
        ("block accesses", s.block_accesses.to_string()),
        (
            "  by reads / by writes",
            format!("{} / {}", s.reads, s.writes),
        ),
        ("distinct blocks", s.distinct_blocks.to_string()),
        ("  written", s.distinct_written_blocks.to_string()),
        ("streams", s.streams.to_string()),
        ("first time", time_text(s.first_time_ns)),
        ("last time", time_text(s.last_time_ns)),
        ("span", span),
        ("skipped lines", s.skipped_lines.to_string()),
    ];
    crate::output::key_values(&rows)
}
