//! A block trace replayed in virtual time on NAND under an FTL (`nvstack sim flash`): the
//! simulator's trace readers feeding `nvstack_flash::replay`, which know nothing of each other
//! (flash depends on core alone, the simulator on no device crate).

use nvstack_core::error::Result;
use nvstack_flash::ftl::FtlConfig;
use nvstack_flash::geometry::{Geometry, Timing};
use nvstack_flash::replay::Replay;
use nvstack_sim::trace::{self, Op, ReaderOptions, TraceFormat};
use std::path::Path;

/// A finished replay and what the reader skipped.
pub struct Replayed {
    pub replay: Replay,
    /// Malformed lines skipped (only with `ReaderOptions::skip_bad_lines`).
    pub skipped_lines: u64,
}

/// Every request of the trace at `path` replayed on a new chip of `geo` under `ftl`.
pub fn replay_trace(
    path: &Path,
    format: TraceFormat,
    opts: &ReaderOptions,
    (geo, ftl, timing): (Geometry, FtlConfig, Timing),
) -> Result<Replayed> {
    let mut replay = Replay::new(geo, ftl, timing)?;
    let mut src = trace::open(path, format, opts)?;
    let mut requests = 0u64;
    for req in src.by_ref() {
        let r = req?;
        replay.request(r.op == Op::Write, r.offset_bytes, r.size_bytes)?;
        requests += 1;
    }
    // Every request read reached the FTL (the replay counts them itself).
    assert_eq!(replay.report().stats.requests, requests);
    Ok(Replayed {
        skipped_lines: src.skipped_lines(),
        replay,
    })
}
