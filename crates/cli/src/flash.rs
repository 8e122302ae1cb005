//! `nvstack flash create|stat`: a NAND state file under an FTL (crates/flash, docs/flash.md),
//! and the geometry flags `nvstack sim flash` shares.

use crate::{print_json, say};
use clap::{Args, Subcommand};
use nvstack_core::error::{Error, Result};
use nvstack_core::size::format_size;
use nvstack_flash::device;
use nvstack_flash::file::{Header, Saved};
use nvstack_flash::ftl::{FtlConfig, FtlKind};
use nvstack_flash::geometry::{
    Field, Geometry, Timing, LOG_BLOCKS_DEFAULT, SPARE_BLOCKS_BEYOND_LOGS,
};
use nvstack_flash::nand::mean_sd;
use nvstack_flash::replay::erase_histogram;
use std::path::{Path, PathBuf};

/// The chip and FTL flags (`flash create`, `sim flash`).
#[derive(Args, Clone, Debug)]
pub struct GeometryArgs {
    /// Page data bytes: a power of two from 512 to 16384 (512: the small-block default
    /// class; larger: a large-block part of 64 pages a block).
    #[arg(long, default_value_t = 512)]
    pub page_size: u32,
    /// Spare (out-of-band) bytes a page (default 16, or 1/32 of a large page).
    #[arg(long)]
    pub spare_size: Option<u32>,
    /// Pages per block (default 32, or 64 for a large page).
    #[arg(long)]
    pub pages_per_block: Option<u32>,
    /// Blocks (default: 64 MiB of pages).
    #[arg(long)]
    pub blocks: Option<u32>,
    /// Blocks kept out of the logical space (default: log blocks + 2).
    #[arg(long)]
    pub spare_blocks: Option<u32>,
    /// Log blocks of the log-block FTL.
    #[arg(long, default_value_t = LOG_BLOCKS_DEFAULT)]
    pub log_blocks: u32,
    /// The FTL: log-block (Kim et al.) or page (page-mapped, greedy GC).
    #[arg(long, default_value = "log-block", value_parser = ftl_kind)]
    pub ftl: FtlKind,
}

fn ftl_kind(s: &str) -> std::result::Result<FtlKind, String> {
    FtlKind::parse(s).ok_or_else(|| format!("'{s}': expected log-block or page"))
}

/// The flag that sets each field.
pub fn flag(f: Field) -> &'static str {
    match f {
        Field::PageDataBytes => "--page-size",
        Field::PageSpareBytes => "--spare-size",
        Field::PagesPerBlock => "--pages-per-block",
        Field::Blocks => "--blocks",
        Field::SpareBlocks => "--spare-blocks",
        Field::LogBlocks => "--log-blocks",
    }
}

impl GeometryArgs {
    /// The header these flags describe, checked (a refusal names the flag, exit 2).
    pub fn header(&self) -> Result<Header> {
        let base = if self.page_size <= 512 {
            Geometry::SMALL_BLOCK
        } else {
            Geometry::large_block(self.page_size)
        };
        let geo = Geometry {
            page_data_bytes: self.page_size,
            page_spare_bytes: self.spare_size.unwrap_or(base.page_spare_bytes),
            pages_per_block: self.pages_per_block.unwrap_or(base.pages_per_block),
            blocks: self.blocks.unwrap_or(base.blocks),
            spare_blocks: self
                .spare_blocks
                .unwrap_or(self.log_blocks.saturating_add(SPARE_BLOCKS_BEYOND_LOGS)),
        };
        let ftl = FtlConfig {
            kind: self.ftl,
            log_blocks: self.log_blocks,
        };
        ftl.validate(&geo).map_err(|e| {
            let defaulted = e.field == Field::SpareBlocks && self.spare_blocks.is_none();
            let why = if defaulted {
                " (--spare-blocks defaults to --log-blocks + 2)"
            } else {
                ""
            };
            Error::bad(format!("{}{why}", e.render(&flag)))
        })?;
        Ok(Header {
            geo,
            ftl,
            timing: Timing::for_geometry(&geo),
        })
    }
}

/// One line for people: "64 MiB of NAND (4096 blocks of 32 pages of 512 + 16 bytes), ...".
pub fn describe(h: &Header) -> String {
    let g = &h.geo;
    let ftl = match h.ftl.kind {
        FtlKind::LogBlock => format!("log-block FTL, {} log blocks", h.ftl.log_blocks),
        FtlKind::Page => "page-mapped FTL, greedy GC".to_string(),
    };
    format!(
        "{} of NAND ({} blocks of {} pages of {} + {} bytes, {} spare blocks), {ftl}; {} logical",
        format_size(g.pages() * u64::from(g.page_data_bytes)),
        g.blocks,
        g.pages_per_block,
        g.page_data_bytes,
        g.page_spare_bytes,
        g.spare_blocks,
        format_size(g.logical_pages() * u64::from(g.page_data_bytes)),
    )
}

#[derive(Args)]
pub struct FlashArgs {
    #[command(subcommand)]
    cmd: FlashCmd,
}

#[derive(Subcommand)]
enum FlashCmd {
    /// Create a state file: every page erased (refuses an existing file without --force).
    Create {
        file: PathBuf,
        #[command(flatten)]
        geometry: GeometryArgs,
        #[arg(long)]
        force: bool,
    },
    /// The saved counters: operations, merges, wear (an erase-count histogram), time, energy.
    Stat {
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(a: FlashArgs) -> Result<i32> {
    match a.cmd {
        FlashCmd::Create {
            file,
            geometry,
            force,
        } => {
            let h = geometry.header()?;
            device::create(&file, h, force)?;
            say!("created {}: {}", file.display(), describe(&h))?;
            Ok(0)
        }
        FlashCmd::Stat { file, json } => stat(&file, json),
    }
}

#[derive(serde::Serialize)]
struct StatReport {
    file: String,
    geometry: Geometry,
    ftl: FtlConfig,
    timing: Timing,
    host_page_reads: u64,
    host_page_writes: u64,
    page_reads: u64,
    page_programs: u64,
    block_erases: u64,
    merges: nvstack_flash::ftl::Merges,
    erase_mean: f64,
    erase_sd: f64,
    erase_max: u32,
    /// `erase_histogram[k]`: blocks erased k times.
    erase_histogram: Vec<u64>,
    time_ns: u64,
    energy_j: f64,
}

fn stat_report(path: &Path, h: &Header, s: &Saved) -> StatReport {
    let c = &s.counters;
    let (erase_mean, erase_sd) = mean_sd(&c.block_erases);
    StatReport {
        file: path.display().to_string(),
        geometry: h.geo,
        ftl: h.ftl,
        timing: h.timing,
        host_page_reads: s.host_reads,
        host_page_writes: s.host_writes,
        page_reads: c.reads,
        page_programs: c.programs,
        block_erases: c.erases,
        merges: s.merges,
        erase_mean,
        erase_sd,
        erase_max: c.block_erases.iter().copied().max().unwrap_or(0),
        erase_histogram: erase_histogram(&c.block_erases),
        time_ns: h.timing.time_ns(&h.geo, c.reads, c.programs, c.erases),
        energy_j: h.timing.energy_j(&h.geo, c.reads, c.programs, c.erases),
    }
}

fn stat(path: &Path, json: bool) -> Result<i32> {
    let (h, saved) = device::inspect(path)?;
    let r = stat_report(path, &h, &saved);
    if json {
        print_json(&r)?;
        return Ok(0);
    }
    let m = &r.merges;
    let rows: Vec<(&str, String)> = vec![
        ("file", r.file.clone()),
        ("device", describe(&h)),
        (
            "host page reads / writes",
            format!("{} / {}", r.host_page_reads, r.host_page_writes),
        ),
        (
            "NAND page reads / programs / block erases",
            format!(
                "{} / {} / {}",
                r.page_reads, r.page_programs, r.block_erases
            ),
        ),
        (
            "merges switch / partial / full / recovery",
            format!(
                "{} / {} / {} / {} ({} pages copied)",
                m.switch, m.partial, m.full, m.recovery, m.copies
            ),
        ),
        (
            "erases per block",
            format!(
                "mean {:.3}, sd {:.3}, max {}",
                r.erase_mean, r.erase_sd, r.erase_max
            ),
        ),
        ("device time", format!("{:.6} s", r.time_ns as f64 * 1e-9)),
        ("energy", format!("{:.6} J", r.energy_j)),
    ];
    crate::output::key_values(&rows)?;
    histogram_table(&r.erase_histogram)?;
    Ok(0)
}

/// The erase-count histogram, at most 16 rows (counts grouped into equal ranges).
pub fn histogram_table(hist: &[u64]) -> Result<()> {
    let width = hist.len().div_ceil(16).max(1);
    let mut text = String::from("erase count   blocks\n");
    for (i, chunk) in hist.chunks(width).enumerate() {
        let (lo, hi) = (i * width, i * width + chunk.len() - 1);
        let label = if lo == hi {
            lo.to_string()
        } else {
            format!("{lo}-{hi}")
        };
        text.push_str(&format!("{label:>11}   {}\n", chunk.iter().sum::<u64>()));
    }
    crate::output::out(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_maps_to_a_flag_of_the_command() {
        let cmd = GeometryArgs::augment_args(clap::Command::new("t"));
        let longs: Vec<String> = cmd
            .get_arguments()
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .collect();
        for f in [
            Field::PageDataBytes,
            Field::PageSpareBytes,
            Field::PagesPerBlock,
            Field::Blocks,
            Field::SpareBlocks,
            Field::LogBlocks,
        ] {
            assert!(longs.iter().any(|l| l == flag(f)), "{f:?}");
        }
    }
}
