//! `nvstack sim blocks`: write a trace's block-level stream (one record per block access, exactly
//! the stream every cache model sees) in a format libCacheSim reads, so that its results can be
//! compared with ours access for access (issue 6). The formats and their writers are
//! `nvstack_sim::trace::libcachesim`; this command checks `--output`, writes into a file beside
//! it and renames that over it at the end, so an existing file is replaced whole and a failed run
//! leaves no half-written output.

use crate::sim::TraceArgs;
use clap::Args;
use nvstack_core::error::{Error, Result};
use nvstack_sim::trace::libcachesim::{self, BlocksCount, OutFormat, WriteError};
use nvstack_sim::trace::{BlockAccess, TraceFormat};
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct BlocksArgs {
    #[command(flatten)]
    trace: TraceArgs,
    /// Output file (replaced if it exists).
    #[arg(long)]
    output: PathBuf,
    /// Output format.
    #[arg(long, value_parser = crate::sim::values::out_format(), default_value = "oracle-general")]
    out_format: OutFormat,
    #[arg(long)]
    json: bool,
}

#[derive(serde::Serialize)]
struct BlocksReport {
    trace: String,
    format: TraceFormat,
    block_bytes: u32,
    output: String,
    out_format: OutFormat,
    requests: u64,
    skipped_lines: u64,
    #[serde(flatten)]
    count: BlocksCount,
}

pub fn run(a: BlocksArgs) -> Result<i32> {
    a.trace.validate()?;
    let tmp = temp_path(&a.output)?;
    let dir = match a.output.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(Error::bad(format!(
            "--output {}: {} is not a directory",
            a.output.display(),
            dir.display()
        )));
    }
    if a.output.is_dir() {
        return Err(Error::bad(format!(
            "--output {}: is a directory",
            a.output.display()
        )));
    }
    if same_file(&a.output, &a.trace.trace) {
        return Err(Error::bad(format!(
            "--output {}: is the trace being read (--trace)",
            a.output.display()
        )));
    }
    let mut src = a.trace.open()?;
    let written =
        write_to(&tmp, &a.output, a.out_format, a.trace.block_size, &mut src).and_then(|count| {
            std::fs::rename(&tmp, &a.output).map_err(|e| {
                Error::env(format!(
                    "--output {}: cannot replace: {e}",
                    a.output.display()
                ))
            })?;
            Ok(count)
        });
    let count = match written {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    let report = BlocksReport {
        trace: a.trace.trace.display().to_string(),
        format: a.trace.format,
        block_bytes: a.trace.block_size,
        output: a.output.display().to_string(),
        out_format: a.out_format,
        requests: src.requests,
        skipped_lines: src.skipped_lines(),
        count,
    };
    if a.json {
        crate::print_json(&report)?;
    } else {
        print_table(&report)?;
    }
    Ok(0)
}

/// A file beside `output` to write into before the rename.
fn temp_path(output: &Path) -> Result<PathBuf> {
    let name = match output.file_name() {
        Some(n) if !output.as_os_str().to_string_lossy().ends_with('/') => n,
        _ => {
            return Err(Error::bad(format!(
                "--output {}: not a file path",
                output.display()
            )))
        }
    };
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".nvstack-{}.tmp", std::process::id()));
    Ok(output.with_file_name(tmp_name))
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// Write `accesses` to `tmp` (named `output` in messages) in `fmt`.
fn write_to(
    tmp: &Path,
    output: &Path,
    fmt: OutFormat,
    block_bytes: u32,
    accesses: &mut dyn Iterator<Item = Result<BlockAccess>>,
) -> Result<BlocksCount> {
    let io = |e: std::io::Error| Error::env(format!("--output {}: {e}", output.display()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(tmp)
        .map_err(io)?;
    libcachesim::write_file(&file, fmt, block_bytes, accesses).map_err(|e| match e {
        WriteError::Output(e) => io(e),
        WriteError::Input(e) => e,
    })
}

fn print_table(r: &BlocksReport) -> Result<()> {
    let c = &r.count;
    let rows: Vec<(&str, String)> = vec![
        ("trace", format!("{} ({})", r.trace, r.format.name())),
        (
            "output",
            format!(
                "{} ({}, {} bytes)",
                r.output,
                r.out_format.name(),
                c.output_bytes
            ),
        ),
        ("block size", format!("{} bytes", r.block_bytes)),
        ("requests", r.requests.to_string()),
        ("skipped lines", r.skipped_lines.to_string()),
        ("block accesses", c.block_accesses.to_string()),
        ("reads / writes", format!("{} / {}", c.reads, c.writes)),
        (
            "distinct blocks",
            c.distinct_blocks
                .map_or_else(|| "-".to_string(), |d| d.to_string()),
        ),
        (
            "time origin",
            c.time_origin_ns
                .map_or_else(|| "-".to_string(), |t| format!("{t} ns (time 0)")),
        ),
    ];
    crate::output::key_values(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_path_is_beside_the_output() {
        let t = temp_path(Path::new("/x/y/out.og")).unwrap();
        assert_eq!(t.parent(), Some(Path::new("/x/y")));
        assert!(t
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(".out.og.nvstack-"));
        assert_eq!(temp_path(Path::new("/")).unwrap_err().exit_code(), 2);
        assert_eq!(temp_path(Path::new("dir/")).unwrap_err().exit_code(), 2);
    }
}
