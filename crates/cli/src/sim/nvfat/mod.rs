//! `nvstack sim nvfat`: seed 004's NVFAT experiment regenerated from a recording
//! (scripts/nvfat-record.sh: PostMark on a FAT16 volume through fusefat on a served device):
//! every NVRAM size of the seed's sweep replayed in virtual time through nvcache's write cache
//! onto NAND under an FTL, Figures 4 to 8 as tables, `--json` and SVG, the seed's numbers
//! beside ours, the destage policies, file data admitted too, the page-mapped FTL, and the
//! FAT-metadata admission checked against an independent counter (docs/nvfat.md).
//!
//! The program joins the three parts (the simulator's trace reader, nvcache, flash): the
//! simulator may not depend on device crates (scripts/check-layers.sh), as `sim flash`.

mod changed;
mod engine;
mod fatcount;
mod input;
mod report;

use clap::Args;
use engine::{AdmitKind, Device, Job, Mode, Outcome};
use nvstack_core::error::{Error, Result};
use nvstack_core::Progress;
use nvstack_flash::ftl::FtlKind;
use nvstack_flash::geometry::{Geometry, Timing, LOG_BLOCKS_DEFAULT, SPARE_BLOCKS_BEYOND_LOGS};
use nvstack_nvcache::write::format::DestagePolicy;
use rayon::prelude::*;
use std::path::{Path, PathBuf};

/// The seed's sweep, KiB of NVRAM (0: no write cache).
pub const SWEEP_KIB: [u64; 9] = [0, 1, 2, 4, 8, 16, 32, 64, 128];

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

/// The flash: the volume's pages on small-block NAND (the seed's K9F1208 class) with the
/// FTL's spare blocks beside them, as the seed's 32 MB partition of its 64 MB chip.
fn device(a: &NvfatArgs, sectors: u64) -> Result<Device> {
    let g = Geometry::SMALL_BLOCK;
    let spare = a.log_blocks + SPARE_BLOCKS_BEYOND_LOGS;
    let logical = sectors.div_ceil(u64::from(g.pages_per_block));
    let geometry = Geometry {
        blocks: u32::try_from(logical + u64::from(spare))
            .map_err(|_| Error::bad("the trace's device is too large for the flash model"))?,
        spare_blocks: spare,
        ..g
    };
    Ok(Device {
        geometry,
        timing: Timing::SMALL_BLOCK,
        log_blocks: a.log_blocks,
        nvram_sector_ns: a.nvram_sector_ns,
        delayed_writeback_ns: nvstack_sim::cache::DELAYED_WRITEBACK_DEFAULT_S * 1_000_000_000,
        volatile_blocks: 2 * sectors,
        check_fat_walk: a.check_fat_walk,
    })
}

fn check_sizes(kib: &[u64]) -> Result<()> {
    if kib.is_empty() {
        return Err(Error::bad("--nvram-kib: give at least one size"));
    }
    for &k in kib {
        if k > 64 * 1024 {
            return Err(Error::bad(format!(
                "--nvram-kib {k}: at most 65536 (64 MiB)"
            )));
        }
    }
    if !kib.contains(&0) {
        return Err(Error::bad(
            "--nvram-kib: the sweep needs 0 (the VFAT baseline every ratio is taken against)",
        ));
    }
    Ok(())
}

/// Beyond the seed at `b` bytes of NVRAM: the page-mapped FTL, and with NVRAM the other
/// destage policies and `--admit all`.
fn beyond_jobs(base: Job, b: u64, out: &mut Vec<Job>) {
    out.push(Job {
        nvram_bytes: b,
        ftl: FtlKind::Page,
        ..base
    });
    if b == 0 {
        return;
    }
    for p in [
        DestagePolicy::Lru,
        DestagePolicy::Clock,
        DestagePolicy::Random,
    ] {
        out.push(Job {
            nvram_bytes: b,
            policy: p,
            ..base
        });
    }
    out.push(Job {
        nvram_bytes: b,
        admit: AdmitKind::All,
        ..base
    });
}

fn jobs(kib: &[u64], seed_only: bool) -> Vec<Job> {
    let base = Job {
        mode: Mode::Sync,
        nvram_bytes: 0,
        policy: DestagePolicy::Lrw,
        admit: AdmitKind::FatMetadata,
        ftl: FtlKind::LogBlock,
        keep_pages: false,
        check_admission: false,
    };
    let top = kib.iter().copied().max().unwrap_or(0);
    let mut out = vec![Job {
        mode: Mode::VfatAsync,
        ..base
    }];
    for &k in kib {
        let b = k * 1024;
        let keep = k == 0 || k == top;
        out.push(Job {
            nvram_bytes: b,
            keep_pages: keep,
            check_admission: k == top && k > 0,
            ..base
        });
        // The changed-sector view (changed.rs), beside the raw run, never instead of it.
        out.push(Job {
            mode: Mode::SyncChanged,
            nvram_bytes: b,
            check_admission: k == top && k > 0,
            ..base
        });
        out.push(Job {
            mode: Mode::Async,
            nvram_bytes: b,
            ..base
        });
        if !seed_only {
            beyond_jobs(base, b, &mut out);
        }
    }
    if !seed_only {
        out.push(Job {
            mode: Mode::VfatAsync,
            ftl: FtlKind::Page,
            ..base
        });
    }
    out
}

pub fn run(a: NvfatArgs) -> Result<i32> {
    let kib = a.nvram_kib.clone().unwrap_or_else(|| SWEEP_KIB.to_vec());
    check_sizes(&kib)?;
    let started = std::time::Instant::now();
    let bars = crate::progress::Bars::new(crate::progress::Look::Sim, !a.json);
    let input = input::load(&paths(&a))?;
    let dev = device(&a, input.header.blocks)?;
    let jobs = jobs(&kib, a.seed_only);
    // One pre-pass, shared by every run of the view.
    let view = changed::Changed::derive(&input);
    bars.start("nvfat", jobs.len() as u64);
    let outcomes: Vec<Outcome> = jobs
        .par_iter()
        .map(|&j| {
            let o = engine::run(&input, j, dev, Some(&view));
            bars.advance(1);
            o
        })
        .collect::<Result<Vec<_>>>()?;
    bars.finish();
    let rep = report::Report::new(&input, dev, view.stats, outcomes, started.elapsed());
    let figures = match &a.plot {
        Some(dir) => report::figures(dir, &rep)?,
        None => Vec::new(),
    };
    if a.json {
        crate::print_json(&rep.with_figures(figures))?;
    } else {
        rep.print()?;
        for f in &figures {
            crate::say!("figure: {}", f.display())?;
        }
    }
    Ok(0)
}
