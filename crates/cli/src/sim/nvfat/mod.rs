//! `nvstack sim nvfat`: seed 004's NVFAT experiment regenerated from a recording
//! (scripts/nvfat-record.sh): the flags parsed into `nvstack_lab::nvfat::Plan`, the sweep run
//! by the lab crate (the replay engine, the changed-sector view, the FAT counter, the figures
//! as data), and Figures 4 to 8 printed as tables, `--json` and SVG (`report.rs`).

mod report;

use clap::Args;
use nvstack_core::error::{Error, Result};
use nvstack_flash::geometry::LOG_BLOCKS_DEFAULT;
use nvstack_lab::field::Field;
use nvstack_lab::nvfat::{self, input, Plan, SWEEP_KIB};
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct NvfatArgs {
    /// The device trace (`serve --record-trace`, 512-byte sectors).
    #[arg(long)]
    trace: PathBuf,
    /// The data log (`serve --record-data`); default: `data` beside the trace.
    #[arg(long)]
    data: Option<PathBuf>,
    /// The volume as it stood when the recording started; default: `image` beside the trace.
    #[arg(long)]
    image: Option<PathBuf>,
    /// The run record (elapsed and CPU seconds); default: `run.json` beside the trace if it
    /// exists, else the trace's own times (its span minus the device's waits).
    #[arg(long)]
    run: Option<PathBuf>,
    /// NVRAM sizes to replay, KiB, comma-separated (default: the seed's 0,1,2,4,...,128).
    #[arg(long, value_delimiter = ',')]
    nvram_kib: Option<Vec<u64>>,
    /// Log blocks of the log-block FTL (the seed's 64).
    #[arg(long, default_value_t = LOG_BLOCKS_DEFAULT)]
    log_blocks: u32,
    /// One 512-byte NVRAM sector access, ns (default: 256 16-bit words at FM22L16-class
    /// FeRAM's 110 ns cycle).
    #[arg(long, default_value_t = 28_160)]
    nvram_sector_ns: u64,
    /// Only the seed's runs (skip the policies, `--admit all` and the page-mapped FTL).
    #[arg(long)]
    seed_only: bool,
    /// Check the write cache's FAT classification (kept up to date from the sectors each
    /// write changes) against a full walk of the volume after every write to a metadata
    /// sector; a difference stops the run with an error naming it. Slow (a full walk each).
    #[arg(long)]
    check_fat_walk: bool,
    #[arg(long)]
    json: bool,
    /// Write the figures (SVG) into this folder.
    #[arg(long)]
    plot: Option<PathBuf>,
}

fn beside(trace: &Path, name: &str) -> PathBuf {
    trace.parent().unwrap_or(Path::new(".")).join(name)
}

fn paths(a: &NvfatArgs) -> input::Paths {
    let run = a.run.clone().or_else(|| {
        let p = beside(&a.trace, "run.json");
        p.exists().then_some(p)
    });
    input::Paths {
        trace: a.trace.clone(),
        data: a.data.clone().unwrap_or_else(|| beside(&a.trace, "data")),
        image: a.image.clone().unwrap_or_else(|| beside(&a.trace, "image")),
        run,
    }
}

/// The flag `sim nvfat` sets each field of the lab's plan with.
fn flag(f: Field) -> &'static str {
    match f {
        Field::NvramKib | Field::NvramBytes => "--nvram-kib",
        Field::Image => "--image",
        Field::Run => "--run",
    }
}

pub fn run(a: NvfatArgs) -> Result<i32> {
    let plan = Plan {
        paths: paths(&a),
        nvram_kib: a.nvram_kib.clone().unwrap_or_else(|| SWEEP_KIB.to_vec()),
        log_blocks: a.log_blocks,
        nvram_sector_ns: a.nvram_sector_ns,
        seed_only: a.seed_only,
        check_fat_walk: a.check_fat_walk,
    };
    plan.check().map_err(|e| Error::bad(e.render(&flag)))?;
    let bars = crate::progress::Bars::new(crate::progress::Look::Sim, !a.json);
    let rep = nvfat::run(&plan, &bars).map_err(|e| e.render(&flag))?;
    let figures = match &a.plot {
        Some(dir) => report::figures(dir, &rep)?,
        None => Vec::new(),
    };
    if a.json {
        crate::print_json(&rep.with_figures(figures))?;
    } else {
        report::print(&rep)?;
        for f in &figures {
            crate::say!("figure: {}", f.display())?;
        }
    }
    Ok(0)
}
