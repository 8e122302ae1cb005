//! `nvstack`: the command-line program. Exit codes (design brief): 0 ok, 1 a finding, 2 bad
//! input, 3 environment. Errors go to stderr as one line naming what is wrong.

mod bench;
mod blocks;
mod cache;
mod crashtest;
mod demo;
mod flash;
mod info;
mod output;
mod progress;
mod serve;
mod sim;
mod up;

use clap::{Parser, Subcommand, ValueEnum};
use nvstack_core::error::{Error, Result};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "nvstack",
    version,
    about = "A transactional block device on persistent memory (NVRAM)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ProtocolArg {
    Fast,
    Paper,
}

fn size_arg(s: &str) -> std::result::Result<u64, String> {
    nvstack_core::size::parse_size(s).map_err(|e| e.to_string())
}

#[derive(Subcommand)]
enum Cmd {
    /// Create and format an image (refuses an existing file without --force).
    Format {
        image: PathBuf,
        /// Region size: bytes, or with a KiB, MiB or GiB suffix.
        #[arg(long, value_parser = size_arg)]
        size: u64,
        #[arg(long, default_value_t = 4096)]
        block_size: u32,
        /// Lanes (concurrent writers), each with its own journal slot and shadow pages.
        #[arg(long, default_value_t = nvstack_nvramdisk::layout::LANES_DEFAULT)]
        lanes: u32,
        #[arg(long, value_enum, default_value_t = ProtocolArg::Fast)]
        protocol: ProtocolArg,
        /// Persist-method policy: p4, p3-nt, p6, p6-clflushopt, p6-clwb.
        #[arg(long, default_value = nvstack_pmem::ordering::DEFAULT_POLICY)]
        ordering: String,
        /// Overwrite an existing file.
        #[arg(long)]
        force: bool,
    },
    /// Without IMAGE: what this CPU offers and what nvstack picks. With IMAGE: its format.
    Info {
        image: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Write blocks from stdin (or --input): atomically, up to 64 blocks.
    Write {
        image: PathBuf,
        #[arg(long)]
        lba: u64,
        #[arg(long)]
        input: Option<PathBuf>,
        /// Accept more than 64 blocks, written as consecutive atomic chunks of 64.
        #[arg(long)]
        chunked: bool,
    },
    /// Read blocks to stdout (or --output).
    Read {
        image: PathBuf,
        #[arg(long)]
        lba: u64,
        #[arg(long)]
        count: u64,
        #[arg(long)]
        output: Option<PathBuf>,
    },
    /// Discard blocks: they read as zeros afterwards.
    Discard {
        image: PathBuf,
        #[arg(long)]
        lba: u64,
        #[arg(long)]
        count: u64,
    },
    /// Verify an image offline (exit 1 on any damage; never writes).
    Check {
        image: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Recover an image in place: finish or cancel interrupted writes, repair a damaged
    /// superblock copy from the intact one.
    Recover { image: PathBuf },
    /// A UBJ cache (NVRAM) in front of a backing file: create, status, writeback, detach, check.
    Cache(cache::CacheArgs),
    /// Crash-check the device: simulated persistent memory, fault models M0-M3, every crash
    /// point (--exhaustive, the default) or random crash-recover-verify cycles.
    Crashtest(crashtest::CrashArgs),
    /// Measure 4 KiB random writes and reads against the raw floors (one run, ratios).
    Bench(bench::BenchArgs),
    /// Serve the device as one FUSE file, DIR/disk (for a loop device); daemonises.
    Serve(serve::ServeArgs),
    /// One command from an image to a mounted file system: serve, loop device, mkfs, mount.
    Up(up::UpArgs),
    /// Undo `up`: unmount, detach the loop device, stop the daemon.
    Down(up::DownArgs),
    /// Trace-driven simulation (Baker et al.): client caches with NVRAM, the LFS write buffer.
    Sim(sim::SimArgs),
    /// NAND flash under an FTL (log-block or page-mapped) in a state file: create, stat.
    Flash(flash::FlashArgs),
    /// The main job: format an emulated NVRAM region under /dev/shm, write and read blocks,
    /// cut writes mid-protocol, recover, check, and print a short report.
    Demo {
        /// Image to use (default: a new file under /dev/shm, removed afterwards).
        #[arg(long)]
        image: Option<PathBuf>,
        #[arg(long, value_parser = size_arg, default_value = "256MiB")]
        size: u64,
        #[arg(long)]
        json: bool,
    },
}

fn main() {
    let cli = Cli::parse();
    let code = match run(cli) {
        Ok(code) => code,
        Err(e) => {
            let e = e.name_fields(&flag_of);
            eprintln!("nvstack: {e}");
            e.exit_code()
        }
    };
    std::process::exit(code);
}

/// The flag that sets a library's field (`Error::Invalid` names fields; the program says its
/// flags). One table for every command: a field has one flag (the design brief's rule).
fn flag_of(field: &'static str) -> Option<&'static str> {
    Some(match field {
        "force" => "--force",
        "backing" => "--backing",
        "backing_size" => "--backing-size",
        "sector_bytes" => "--sector",
        "admit" => "--admit",
        "high_watermark_pct" => "--high-watermark",
        "low_watermark_pct" => "--low-watermark",
        "raw_block_bytes" => "--block-size",
        _ => return None,
    })
}

fn run(cli: Cli) -> Result<i32> {
    match cli.cmd {
        Cmd::Serve(a) => serve::serve(a),
        Cmd::Up(a) => up::up(a),
        Cmd::Down(a) => up::down(a),
        Cmd::Sim(a) => sim::run(a),
        Cmd::Flash(a) => flash::run(a),
        Cmd::Format {
            image,
            size,
            block_size,
            lanes,
            protocol,
            ordering,
            force,
        } => blocks::format(&image, size, block_size, lanes, protocol, &ordering, force),
        Cmd::Info { image: None, json } => info::host(json),
        Cmd::Info {
            image: Some(p),
            json,
        } => info::image(&p, json),
        Cmd::Write {
            image,
            lba,
            input,
            chunked,
        } => blocks::write(&image, lba, input.as_deref(), chunked),
        Cmd::Read {
            image,
            lba,
            count,
            output,
        } => blocks::read(&image, lba, count, output.as_deref()),
        Cmd::Discard { image, lba, count } => blocks::discard(&image, lba, count),
        Cmd::Check { image, json } => blocks::check(&image, json),
        Cmd::Recover { image } => blocks::recover(&image),
        Cmd::Bench(args) => bench::run(args),
        Cmd::Cache(args) => cache::run(args),
        Cmd::Crashtest(args) => crashtest::run(args),
        Cmd::Demo { image, size, json } => demo::run(image, size, json),
    }
}

/// Print a JSON document on stdout.
pub fn print_json<T: serde::Serialize>(v: &T) -> Result<()> {
    let s = serde_json::to_string_pretty(v).map_err(|e| Error::env(format!("json: {e}")))?;
    output::out(format!("{s}\n").as_bytes())
}
