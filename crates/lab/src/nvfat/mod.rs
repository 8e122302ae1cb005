//! Seed 004's NVFAT experiment regenerated from a recording (scripts/nvfat-record.sh: PostMark
//! on a FAT16 volume through fusefat on a served device): every NVRAM size of the seed's sweep
//! replayed in virtual time through nvcache's write cache onto NAND under an FTL, Figures 4 to
//! 8 as data (`report.rs`), the seed's numbers beside ours, the destage policies, file data
//! admitted too, the page-mapped FTL, and the FAT-metadata admission checked against an
//! independent counter (docs/nvfat.md). `nvstack sim nvfat` parses its flags into a [`Plan`],
//! calls [`run`] and prints the [`Report`].
//!
//! It joins three parts the layering keeps apart (the simulator's trace reader and volatile
//! model, nvcache, flash): the simulator may not depend on device crates and nvcache and flash
//! know no trace, so the join lives here, above them.

pub mod changed;
pub mod engine;
pub mod fatcount;
pub mod input;
pub mod report;

use crate::field::{Field, Invalid, LabResult};
pub use engine::{AdmitKind, DestagePolicy, Device, Job, Mode, Outcome};
use nvstack_core::error::{Error, Result};
use nvstack_core::Progress;
use nvstack_flash::ftl::FtlKind;
use nvstack_flash::geometry::{Geometry, Timing, SPARE_BLOCKS_BEYOND_LOGS};
use rayon::prelude::*;
pub use report::Report;

/// The seed's sweep, KiB of NVRAM (0: no write cache).
pub const SWEEP_KIB: [u64; 9] = [0, 1, 2, 4, 8, 16, 32, 64, 128];

/// The largest NVRAM size of a sweep, KiB (64 MiB).
pub const NVRAM_KIB_MAX: u64 = 64 * 1024;

/// One sweep over a recording.
#[derive(Clone, Debug)]
pub struct Plan {
    pub paths: input::Paths,
    /// NVRAM sizes to replay, KiB; must hold 0 (the baseline every ratio is taken against).
    pub nvram_kib: Vec<u64>,
    /// Log blocks of the log-block FTL (the seed's 64).
    pub log_blocks: u32,
    /// One 512-byte NVRAM sector access, ns.
    pub nvram_sector_ns: u64,
    /// Only the seed's runs (no other policies, no `AdmitKind::All`, no page-mapped FTL).
    pub seed_only: bool,
    /// Check the write cache's FAT classification against a full walk after every write to a
    /// metadata sector (slow).
    pub check_fat_walk: bool,
}

impl Plan {
    /// Refuse sizes the sweep cannot run, naming the field.
    pub fn check(&self) -> std::result::Result<(), Invalid> {
        let kib = &self.nvram_kib;
        if kib.is_empty() {
            return Err(Invalid::new(Field::NvramKib, ": give at least one size"));
        }
        for &k in kib {
            if k > NVRAM_KIB_MAX {
                return Err(Invalid::new(
                    Field::NvramKib,
                    format!(" {k}: at most {NVRAM_KIB_MAX} (64 MiB)"),
                ));
            }
        }
        if !kib.contains(&0) {
            return Err(Invalid::new(
                Field::NvramKib,
                ": the sweep needs 0 (the VFAT baseline every ratio is taken against)",
            ));
        }
        Ok(())
    }
}

/// The flash: the volume's pages on small-block NAND (the seed's K9F1208 class) with the
/// FTL's spare blocks beside them, as the seed's 32 MB partition of its 64 MB chip.
pub fn device(plan: &Plan, sectors: u64) -> Result<Device> {
    let g = Geometry::SMALL_BLOCK;
    let spare = plan.log_blocks + SPARE_BLOCKS_BEYOND_LOGS;
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
        log_blocks: plan.log_blocks,
        nvram_sector_ns: plan.nvram_sector_ns,
        delayed_writeback_ns: nvstack_sim::cache::DELAYED_WRITEBACK_DEFAULT_S * 1_000_000_000,
        volatile_blocks: 2 * sectors,
        check_fat_walk: plan.check_fat_walk,
    })
}

/// Beyond the seed at `b` bytes of NVRAM: the page-mapped FTL, and with NVRAM the other
/// destage policies and `AdmitKind::All`.
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

/// Every replay of a sweep over `kib`, the VFAT baseline first.
pub fn jobs(kib: &[u64], seed_only: bool) -> Vec<Job> {
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

/// The sweep: the recording read, every job replayed in parallel (rayon), the report.
pub fn run(plan: &Plan, progress: &dyn Progress) -> LabResult<Report> {
    plan.check()?;
    let started = std::time::Instant::now();
    let input = input::load(&plan.paths)?;
    let dev = device(plan, input.header.blocks)?;
    let jobs = jobs(&plan.nvram_kib, plan.seed_only);
    // One pre-pass, shared by every run of the view.
    let view = changed::Changed::derive(&input);
    progress.start("nvfat", jobs.len() as u64);
    let outcomes: Vec<Outcome> = jobs
        .par_iter()
        .map(|&j| {
            let o = engine::run(&input, j, dev, Some(&view));
            progress.advance(1);
            o
        })
        .collect::<LabResult<Vec<_>>>()?;
    progress.finish();
    Ok(Report::new(
        &input,
        dev,
        view.stats,
        outcomes,
        started.elapsed(),
    ))
}

#[cfg(test)]
mod tests;
