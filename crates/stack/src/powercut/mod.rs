//! Power cuts of a running stack (testing only).
//!
//! A process kill leaves every store in /dev/shm, so it cannot catch a missing flush or fence.
//! Here the device runs on the crash checker's simulated region instead of a mapping: the image
//! file is loaded into a [`SimRegion`] that logs every store, flush and fence. At the cut the
//! region's lock is taken (no thread can store, flush or fence after that instant, and any
//! acknowledgement already sent was for work whose fence is in the log), the log is replayed,
//! one crash image is drawn at random under the chosen fault model (M1: stores reach media only
//! by a flush or fence, in any subset per line; M2: also torn and garbage words, see
//! docs/crashtest.md), written over the image file, and the process ends at once with
//! [`POWER_CUT_EXIT`], running no destructor. The next start recovers from that image like a
//! machine that lost power.
//!
//! A cache image runs the same way with its backing file loaded as the region's tail
//! ([`PowerCut::load_cache`]): a simulated disk whose 512-byte sectors written since its last
//! flush (fdatasync) each hold their old or their new contents after the cut, any subset (the
//! disk model of the crash checker, nvstack_pmem::crash). Both files are written back from
//! the one crash image, so the cut is one instant of NVRAM and disk.
//!
//! The simulated region keeps the whole log in memory: use small images (tens of MiB) and short
//! workloads.

//!
//! The spec and the exit code are always built (a build without the feature parses a spec to
//! refuse it by name); the machinery ([`PowerCut`]) only with the feature `powercut`.

use nvstack_core::error::{Error, Result};
use nvstack_pmem::crash::FaultModel;

#[cfg(feature = "powercut")]
mod sim;
#[cfg(feature = "powercut")]
pub use sim::*;

/// The exit code of a process whose power was cut.
pub const POWER_CUT_EXIT: i32 = 86;

/// Images larger than this are refused: the simulated region copies the image into memory and
/// logs every store.
pub const POWER_CUT_IMAGE_BYTES_MAX: u64 = 1 << 30;

/// A power-cut specification: `MODEL:SEED:DELAY_MS` (for example `M2:7:150`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PowerCutSpec {
    pub model: FaultModel,
    pub seed: u64,
    pub delay_ms: u64,
}

impl PowerCutSpec {
    /// The spec as it was given: `MODEL:SEED:DELAY_MS`.
    pub fn text(&self) -> String {
        format!("{}:{}:{}", self.model.name(), self.seed, self.delay_ms)
    }

    pub fn parse(s: &str) -> Result<PowerCutSpec> {
        let bad = |why: &str| {
            Error::bad(format!(
                "power cut '{s}': {why} (expected MODEL:SEED:DELAY_MS, MODEL one of M0, M1, M2)"
            ))
        };
        let parts: Vec<&str> = s.split(':').collect();
        if parts.len() != 3 {
            return Err(bad("three fields separated by ':' are needed"));
        }
        let model = match FaultModel::parse(parts[0]) {
            Some(m @ (FaultModel::M0 | FaultModel::M1 | FaultModel::M2)) => m,
            _ => return Err(bad("unknown fault model")),
        };
        let seed = parts[1].parse::<u64>().map_err(|_| bad("bad seed"))?;
        let delay_ms = parts[2].parse::<u64>().map_err(|_| bad("bad delay"))?;
        if delay_ms > 3_600_000 {
            return Err(bad("delay over one hour"));
        }
        Ok(PowerCutSpec {
            model,
            seed,
            delay_ms,
        })
    }
}
