//! `nvstack sim stat`: what a trace holds, as the simulator reads it: requests, block accesses,
//! distinct blocks, streams, the time span and the lines skipped. A first look at a trace before
//! simulating it, and a check that a reader reads it as its documentation says.

use clap::Args;
use nvstack_core::error::Result;
use nvstack_sim::trace::{self, block_range, Op, TraceFormat};
use rustc_hash::FxHashSet;

#[derive(Args)]
pub struct StatArgs {
    #[command(flatten)]
    trace: crate::sim::TraceArgs,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, serde::Serialize)]
struct TraceStat {
    trace: String,
    format: TraceFormat,
    block_bytes: u32,
    requests: u64,
    read_requests: u64,
    write_requests: u64,
    /// Writes flagged sync (blkparse S/F, fio fsync/fdatasync).
    sync_writes: u64,
    read_bytes: u64,
    write_bytes: u64,
    block_accesses: u64,
    /// Block accesses by reads and by writes.
    reads: u64,
    writes: u64,
    distinct_blocks: u64,
    distinct_written_blocks: u64,
    streams: u64,
    first_time_ns: Option<u64>,
    last_time_ns: Option<u64>,
    skipped_lines: u64,
}

pub fn run(a: StatArgs) -> Result<i32> {
    a.trace.validate()?;
    let stat = stat(&a.trace)?;
    if a.json {
        crate::print_json(&stat)?;
    } else {
        print_table(&stat)?;
    }
    Ok(0)
}

fn stat(t: &crate::sim::TraceArgs) -> Result<TraceStat> {
    let mut src = trace::open(&t.trace, t.format, &t.reader_options())?;
    let mut s = TraceStat {
        trace: t.trace.display().to_string(),
        format: t.format,
        block_bytes: t.block_size,
        requests: 0,
        read_requests: 0,
        write_requests: 0,
        sync_writes: 0,
        read_bytes: 0,
        write_bytes: 0,
        block_accesses: 0,
        reads: 0,
        writes: 0,
        distinct_blocks: 0,
        distinct_written_blocks: 0,
        streams: 0,
        first_time_ns: None,
        last_time_ns: None,
        skipped_lines: 0,
    };
    let mut blocks = FxHashSet::default();
    let mut written = FxHashSet::default();
    let mut streams = FxHashSet::default();
    for req in src.by_ref() {
        let req = req?;
        s.requests += 1;
        s.first_time_ns.get_or_insert(req.time_ns);
        s.last_time_ns = Some(req.time_ns);
        streams.insert(req.stream);
        let range = block_range(&req, t.block_size, &t.trace)?;
        let n = range.end - range.start;
        s.block_accesses += n;
        match req.op {
            Op::Read => {
                s.read_requests += 1;
                s.read_bytes += req.size_bytes;
                s.reads += n;
                blocks.extend(range);
            }
            Op::Write => {
                s.write_requests += 1;
                s.write_bytes += req.size_bytes;
                s.writes += n;
                s.sync_writes += u64::from(req.sync);
                for key in range {
                    blocks.insert(key);
                    written.insert(key);
                }
            }
        }
    }
    s.skipped_lines = src.skipped_lines();
    s.distinct_blocks = blocks.len() as u64;
    s.distinct_written_blocks = written.len() as u64;
    s.streams = streams.len() as u64;
    Ok(s)
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
    let w = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (k, v) in rows {
        out.push_str(&format!("{k:<w$}  {v}\n"));
    }
    crate::output::out(out.as_bytes())
}
