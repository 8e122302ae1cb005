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

#[cfg(test)]
mod tests {
    use super::*;
    use nvstack_flash::ftl::FtlKind;
    use nvstack_sim::trace::nvstack::Tally;

    #[test]
    fn every_request_of_the_trace_reaches_the_chip_and_a_bad_line_is_refused_by_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.trace");
        let mut text = "nvstack-trace 1 block_bytes=512 blocks=1024\n".to_string();
        let mut tally = Tally::default();
        // Page 5 written twice and read once, page 6 read before anything was written there.
        for line in ["10 1 W 5 1", "20 1 W 5 1", "30 1 R 5 1", "40 1 R 6 1"] {
            tally.add(line.as_bytes());
            text += &format!("{line}\n");
        }
        text += &format!("{}\n", tally.end_line());
        std::fs::write(&path, &text).unwrap();
        let chip = (
            Geometry::SMALL_BLOCK,
            FtlConfig {
                kind: FtlKind::LogBlock,
                log_blocks: 64,
            },
            Timing::SMALL_BLOCK,
        );
        let opts = ReaderOptions::default();
        let r = replay_trace(&path, TraceFormat::Nvstack, &opts, chip).unwrap();
        let rep = r.replay.report();
        assert_eq!((rep.stats.requests, rep.stats.write_requests), (4, 2));
        assert_eq!(
            (rep.page_programs, rep.page_reads, rep.block_erases),
            (2, 1, 0)
        );
        assert_eq!((r.replay.logical_writes[5], r.skipped_lines), (2, 0));
        std::fs::write(&path, text.replace("20 1 W 5 1", "20 1 W five 1")).unwrap();
        let e = replay_trace(&path, TraceFormat::Nvstack, &opts, chip)
            .err()
            .unwrap();
        assert!(e.to_string().contains("t.trace:3:"), "{e}");
    }
}
