//! `nvstack sim`: the trace-driven simulator's subcommands.

pub mod analyze;
pub mod blocks;
pub mod commit;
pub mod commit_record;
pub mod flash;
pub mod lfs;
pub mod nvfat;
pub mod stat;
pub mod values;

use clap::{Args, Subcommand};
use nvstack_core::error::{Error, Result};
use nvstack_core::size::format_size;
use nvstack_policy::PolicyKind;
use nvstack_sim::cache::{
    self, CacheConfig, CacheReport, CacheRun, Model, DELAYED_WRITEBACK_DEFAULT_S,
};
use nvstack_sim::field::{Field, Invalid};
use nvstack_sim::trace::{self, BlockAccesses, ReaderOptions, TraceFormat, BLOCK_BYTES_DEFAULT};
use std::path::PathBuf;

/// The trace arguments every subcommand shares.
#[derive(Args, Clone, Debug)]
pub struct TraceArgs {
    /// Trace file.
    #[arg(long)]
    pub trace: PathBuf,
    #[arg(long, value_parser = values::trace_format())]
    pub format: TraceFormat,
    /// Block size in bytes (a power of two, 512 to 1 MiB).
    #[arg(long, default_value_t = BLOCK_BYTES_DEFAULT)]
    pub block_size: u32,
    /// Skip malformed lines (and count them) instead of stopping with exit 2.
    #[arg(long)]
    pub skip_bad_lines: bool,
    /// fio iolog v2 only (it has no times): microseconds between requests.
    #[arg(long)]
    pub interarrival: Option<u64>,
}

impl TraceArgs {
    pub fn validate(&self) -> Result<()> {
        if !self.block_size.is_power_of_two() || !(512..=1 << 20).contains(&self.block_size) {
            return Err(Error::bad(format!(
                "--block-size {}: must be a power of two from 512 to 1048576",
                self.block_size
            )));
        }
        Ok(())
    }

    pub fn reader_options(&self) -> ReaderOptions {
        ReaderOptions {
            skip_bad_lines: self.skip_bad_lines,
            interarrival_ns: self.interarrival.map(|us| us.saturating_mul(1000)),
        }
    }

    /// Open the trace as a stream of block accesses.
    pub fn open(&self) -> Result<BlockAccesses> {
        self.validate()?;
        let src = trace::open(&self.trace, self.format, &self.reader_options())?;
        Ok(BlockAccesses::new(src, self.block_size))
    }
}

#[derive(Args)]
pub struct SimArgs {
    #[command(subcommand)]
    cmd: SimCmd,
}

#[derive(Subcommand)]
enum SimCmd {
    /// One cache model over a trace: misses, write-backs, dirty blocks at the end, NVRAM
    /// accesses (seed 002 section 2.1).
    Cache(CacheArgs),
    /// Write the block-level trace (one record per block access, the stream every model sees)
    /// for other simulators: libCacheSim's oracleGeneral binary format or CSV.
    Blocks(crate::sim::blocks::BlocksArgs),
    /// Byte lifetimes: net write traffic against a fixed write-back delay from an infinite
    /// cache (seed 002 Figure 2).
    Lifetimes(crate::sim::analyze::LifetimesArgs),
    /// The fate of written blocks: overwritten, written back, remaining (seed 002 Table 2).
    Fate(crate::sim::analyze::FateArgs),
    /// Net write traffic against NVRAM size, omniscient write buffer (seed 002 Figure 3).
    NvramSize(crate::sim::analyze::NvramSizeArgs),
    /// LRU against random against omniscient NVRAM replacement (seed 002 Figure 4).
    Policies(crate::sim::analyze::PoliciesArgs),
    /// Total traffic of the three models as memory is added (seed 002 Figures 5 and 6).
    Models(crate::sim::analyze::ModelsArgs),
    /// NVRAM accesses and memory-bus traffic of write-aside and unified (seed 002 section 2.6).
    Bus(crate::sim::analyze::BusArgs),
    /// Every analysis over a grid, in parallel: sweep.csv, sweep.json, tables and figures.
    Sweep(crate::sim::analyze::SweepArgs),
    /// LFS segment writes without and with an NVRAM write buffer: full and partial (sync,
    /// timeout) segments, disk write accesses, metadata overhead (seed 002 Tables 3 and 4).
    Lfs(crate::sim::lfs::LfsArgs),
    /// What a trace holds as the simulator reads it: requests, block accesses, distinct
    /// blocks, streams, time span, skipped lines.
    Stat(crate::sim::stat::StatArgs),
    /// A trace replayed on NAND under an FTL (seed 004): writes per logical and physical
    /// page, erase counts, merges, time and energy.
    Flash(crate::sim::flash::FlashSimArgs),
    /// Seed 004's NVFAT experiment from a recording (scripts/nvfat-record.sh): every NVRAM
    /// size replayed through the write cache onto NAND; Figures 4-8, the seed's numbers beside
    /// ours, destage policies, --admit all, the page-mapped FTL, the admission checked.
    Nvfat(crate::sim::nvfat::NvfatArgs),
    /// The committing simulator (seed 003): one run of a kernel or a recorded trace under
    /// global, fine-grained, ADR or eADR committing (docs/mcsim.md).
    Commit(crate::sim::commit::CommitArgs),
    /// IPC of global against fine-grained committing per workload (seed 003 Fig. 8).
    CommitIpc(crate::sim::commit::FigureArgs),
    /// Time per commit, global against fine-grained (seed 003 Fig. 9).
    CommitTime(crate::sim::commit::FigureArgs),
    /// IPC against commit frequency: every 1, 10, 100 updates (seed 003 Fig. 10).
    CommitFrequency(crate::sim::commit::FigureArgs),
    /// Credit synchronisations, global against fine-grained (seed 003 Fig. 11).
    CommitSyncs(crate::sim::commit::FigureArgs),
    /// Figs. 8, 9 and 11 from one run of their common grid: the three tables (and SVGs) of
    /// commit-ipc, commit-time and commit-syncs, one after another.
    CommitFigures(crate::sim::commit::FigureArgs),
    /// Record persistent-memory traffic as a trace for `sim commit`: nvramdisk's writes on
    /// several lanes, or the SQLite journal store (one database per core).
    CommitRecord(crate::sim::commit_record::RecordArgs),
}

pub fn run(a: SimArgs) -> Result<i32> {
    // Every command but the sweep reads its trace through TraceArgs, which has
    // --interarrival: a reader's words for that setting become the flag.
    let takes_interarrival = !matches!(a.cmd, SimCmd::Sweep(_));
    let result = dispatch(a);
    if takes_interarrival {
        result.map_err(reader_flags)
    } else {
        result.map_err(sweep_reader_flags)
    }
}

/// The sweep has no --interarrival: a fio v2 trace (no times) cannot be swept as it is.
fn sweep_reader_flags(e: Error) -> Error {
    match e {
        Error::BadInput(m) => Error::BadInput(m.replace(
            "it needs interarrival_ns (the time between requests)",
            "sim sweep takes no --interarrival: record a version 3 iolog, or run the analyses \
             one at a time with --interarrival",
        )),
        other => other,
    }
}

/// The trace readers name the reader setting `interarrival_ns` (the fio v2 reader needs it);
/// on the command line it is `--interarrival MICROSECONDS`.
fn reader_flags(e: Error) -> Error {
    match e {
        Error::BadInput(m) => Error::BadInput(
            m.replace(
                "it needs interarrival_ns",
                "pass --interarrival MICROSECONDS",
            )
            .replace("needs interarrival_ns", "needs --interarrival"),
        ),
        other => other,
    }
}

fn dispatch(a: SimArgs) -> Result<i32> {
    match a.cmd {
        SimCmd::Cache(a) => cache(a),
        SimCmd::Blocks(a) => crate::sim::blocks::run(a),
        SimCmd::Commit(a) => crate::sim::commit::commit(a),
        SimCmd::CommitIpc(a) => crate::sim::commit::figure(crate::sim::commit::Figure::Ipc, a),
        SimCmd::CommitTime(a) => crate::sim::commit::figure(crate::sim::commit::Figure::Time, a),
        SimCmd::CommitFrequency(a) => {
            crate::sim::commit::figure(crate::sim::commit::Figure::Frequency, a)
        }
        SimCmd::CommitSyncs(a) => crate::sim::commit::figure(crate::sim::commit::Figure::Syncs, a),
        SimCmd::CommitFigures(a) => crate::sim::commit::figures_shared(a),
        SimCmd::CommitRecord(a) => crate::sim::commit_record::run(a),
        SimCmd::Lifetimes(a) => crate::sim::analyze::lifetimes_cmd(a),
        SimCmd::Fate(a) => crate::sim::analyze::fate_cmd(a),
        SimCmd::NvramSize(a) => crate::sim::analyze::nvram_size_cmd(a),
        SimCmd::Policies(a) => crate::sim::analyze::policies_cmd(a),
        SimCmd::Models(a) => crate::sim::analyze::models_cmd(a),
        SimCmd::Bus(a) => crate::sim::analyze::bus_cmd(a),
        SimCmd::Sweep(a) => crate::sim::analyze::sweep_cmd(a),
        SimCmd::Lfs(a) => crate::sim::lfs::run(a),
        SimCmd::Stat(a) => crate::sim::stat::run(a),
        SimCmd::Flash(a) => crate::sim::flash::run(a),
        SimCmd::Nvfat(a) => crate::sim::nvfat::run(a),
    }
}

#[derive(Args)]
pub struct CacheArgs {
    #[command(flatten)]
    trace: TraceArgs,
    #[arg(long, value_parser = values::model())]
    model: Model,
    /// NVRAM replacement policy (the volatile cache is always LRU).
    #[arg(long, value_parser = values::policy(), default_value = "lru")]
    policy: PolicyKind,
    /// Volatile cache size (a multiple of the block size).
    #[arg(long, value_parser = crate::size_arg)]
    volatile: u64,
    /// NVRAM size (a multiple of the block size; 0 for the volatile model).
    #[arg(long, value_parser = crate::size_arg)]
    nvram: u64,
    /// Volatile model: write back blocks dirty for more than SECONDS (the cleaner runs every
    /// 5 s), or `off`. Default 30.
    #[arg(long, value_name = "SECONDS|off")]
    delayed_writeback: Option<String>,
    /// Seed of the random policy.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long)]
    json: bool,
}

/// The flag `nvstack sim` sets each configuration field with.
pub fn flag(field: Field) -> &'static str {
    match field {
        Field::BlockBytes => "--block-size",
        Field::SegmentBytes => "--segment-size",
        Field::MetadataBytes => "--metadata-size",
        Field::SummaryBytes => "--summary-size",
        Field::NvramBytes | Field::NvramBlocks => "--nvram",
        Field::VolatileBytes | Field::VolatileBlocks => "--volatile",
        Field::FsyncEvery => "--fsync-every",
        Field::TimeoutNs => "--timeout",
        Field::Model => "--model",
        Field::Policy => "--policy",
        Field::DelayedWritebackNs => "--delayed-writeback",
        Field::DelaysNs => "--delays",
        Field::Seeds => "--seeds",
        Field::Traces => "--trace",
    }
}

/// A setting the library refused, as bad input (exit 2) naming the flags the user typed.
pub fn flags(e: Invalid) -> Error {
    Error::bad(e.render(&flag))
}

/// Bytes to blocks; a size that is not a whole number of blocks is refused, never rounded.
pub fn size_in_blocks(flag: &str, bytes: u64, block_bytes: u32) -> Result<u64> {
    let b = u64::from(block_bytes);
    if !bytes.is_multiple_of(b) {
        return Err(Error::bad(format!(
            "{flag} {bytes}: not a multiple of the block size ({b} bytes)"
        )));
    }
    Ok(bytes / b)
}

/// `--delayed-writeback SECONDS|off` for `model`: None = off.
pub fn delayed_writeback(model: Model, arg: Option<&str>) -> Result<Option<u64>> {
    let parse = |s: &str| -> Result<Option<u64>> {
        if s == "off" {
            return Ok(None);
        }
        match s.parse::<u64>() {
            Ok(secs) if secs <= DELAYED_WRITEBACK_MAX_S => Ok(Some(secs * 1_000_000_000)),
            _ => Err(Error::bad(format!(
                "--delayed-writeback '{s}': expected whole seconds (0 to {DELAYED_WRITEBACK_MAX_S}) or 'off'"
            ))),
        }
    };
    match (model, arg) {
        (Model::Volatile, None) => Ok(Some(DELAYED_WRITEBACK_DEFAULT_S * 1_000_000_000)),
        (Model::Volatile, Some(s)) => parse(s),
        (_, None) => Ok(None),
        (m, Some(_)) => Err(Error::bad(format!(
            "--delayed-writeback: the {} model keeps dirty blocks in NVRAM and has no delayed write-back (only --model volatile takes it)",
            m.name()
        ))),
    }
}

/// A week: longer than any trace here; a larger delay is a typo, not a setting.
pub const DELAYED_WRITEBACK_MAX_S: u64 = 7 * 24 * 3600;

fn cache(a: CacheArgs) -> Result<i32> {
    a.trace.validate()?;
    let cfg = CacheConfig {
        model: a.model,
        policy: a.policy,
        volatile_blocks: size_in_blocks("--volatile", a.volatile, a.trace.block_size)?,
        nvram_blocks: size_in_blocks("--nvram", a.nvram, a.trace.block_size)?,
        delayed_writeback_ns: delayed_writeback(a.model, a.delayed_writeback.as_deref())?,
        seed: a.seed,
    };
    cfg.validate().map_err(flags)?;
    let run = cache::simulate(&|| a.trace.open(), &cfg)?;
    if a.json {
        crate::print_json(&CacheReport::new(
            &a.trace.trace,
            a.trace.format,
            a.trace.block_size,
            run,
        ))?;
    } else {
        print_cache_table(&a, &run)?;
    }
    Ok(0)
}

fn print_cache_table(a: &CacheArgs, run: &CacheRun) -> Result<()> {
    let s = &run.stats;
    let pct = |x: f64| format!("{:.2} %", 100.0 * x);
    let dw = match run.config.delayed_writeback_ns {
        Some(ns) => format!("{} s", ns / 1_000_000_000),
        None => "off".to_string(),
    };
    let rows: Vec<(&str, String)> = vec![
        (
            "trace",
            format!("{} ({})", a.trace.trace.display(), a.trace.format.name()),
        ),
        (
            "cache",
            format!(
                "{} / {} policy / volatile {} / NVRAM {} / delayed write-back {}",
                a.model.name(),
                a.policy.name(),
                format_size(a.volatile),
                format_size(a.nvram),
                dw
            ),
        ),
        ("requests", run.requests.to_string()),
        ("skipped lines", run.skipped_lines.to_string()),
        ("block accesses", s.block_accesses.to_string()),
        ("reads / writes", format!("{} / {}", s.reads, s.writes)),
        (
            "misses (read / write)",
            format!("{} ({} / {})", s.misses, s.read_misses, s.write_misses),
        ),
        ("miss ratio", pct(s.miss_ratio)),
        (
            "hits (volatile / NVRAM)",
            format!("{} / {}", s.hits_volatile, s.hits_nvram),
        ),
        ("write-backs", s.writebacks.to_string()),
        (
            "  eviction / replacement / cleaner / sync / through",
            format!(
                "{} / {} / {} / {} / {}",
                s.writebacks_eviction,
                s.writebacks_replacement,
                s.writebacks_cleaner,
                s.writebacks_sync,
                s.writebacks_through
            ),
        ),
        ("overwrites absorbed", s.overwrites_absorbed.to_string()),
        ("dirty at end", s.dirty_at_end.to_string()),
        ("net write traffic", pct(s.net_write_traffic)),
        ("net total traffic", pct(s.net_total_traffic)),
        (
            "NVRAM accesses (reads / writes)",
            format!(
                "{} ({} / {})",
                s.nvram_accesses, s.nvram_reads, s.nvram_writes
            ),
        ),
        ("moves NVRAM -> volatile", s.moves_to_volatile.to_string()),
        ("memory-bus blocks", s.bus_blocks.to_string()),
    ];
    crate::output::key_values(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field the library can refuse maps to a flag some `nvstack sim` command takes.
    #[test]
    fn every_field_maps_to_a_flag_of_the_program() {
        let sim = SimArgs::augment_args(clap::Command::new("sim"));
        let longs: Vec<String> = sim
            .get_subcommands()
            .flat_map(|c| c.get_arguments())
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .collect();
        let fields = [
            Field::BlockBytes,
            Field::SegmentBytes,
            Field::MetadataBytes,
            Field::SummaryBytes,
            Field::NvramBytes,
            Field::NvramBlocks,
            Field::VolatileBytes,
            Field::VolatileBlocks,
            Field::FsyncEvery,
            Field::TimeoutNs,
            Field::Model,
            Field::Policy,
            Field::DelayedWritebackNs,
            Field::DelaysNs,
            Field::Seeds,
            Field::Traces,
        ];
        for f in fields {
            assert!(longs.iter().any(|l| l == flag(f)), "{f:?}: no {}", flag(f));
        }
        let e = flags(Invalid::new(Field::NvramBytes).text(" 1000: not a multiple"));
        assert_eq!(e.exit_code(), 2);
        assert_eq!(e.to_string(), "--nvram 1000: not a multiple");
    }
}
