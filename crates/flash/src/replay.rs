//! A block trace replayed in virtual time on the chip with no bytes kept ([`NoMedia`]): what
//! seed 004 reports of its FTL: writes per logical page as the FTL sees them, writes per
//! physical page, erase counts (mean and standard deviation), device time and energy.
//!
//! Requests arrive as (read or write, byte offset, bytes); the caller reads the trace. Rules:
//! - A request touches the pages [offset / P, (offset + bytes - 1) / P] (P = page data bytes);
//!   0 bytes touch nothing.
//! - Addresses beyond the device wrap around (page number modulo the logical pages), so a
//!   trace of a larger disk still lands on the modelled chip; such requests are counted
//!   (`wrapped_requests`) so the report says how much of the trace was folded.
//! - A write that covers part of a page is a read-modify-write: the page's current copy (if
//!   any) is read, then the whole page programmed (`partial_page_reads`).

use crate::ftl::{Ftl, FtlConfig, Merges};
use crate::geometry::{Geometry, Timing};
use crate::nand::{mean_sd, Nand, NoMedia};
use nvstack_core::error::Result;

/// A replay in progress.
pub struct Replay {
    ftl: Ftl<NoMedia>,
    geo: Geometry,
    timing: Timing,
    cfg: FtlConfig,
    page_bytes: u64,
    logical_pages: u64,
    /// Host writes per logical page (seed 004 Figure 5).
    pub logical_writes: Vec<u32>,
    pub stats: ReplayStats,
}

/// What the host asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReplayStats {
    pub requests: u64,
    pub read_requests: u64,
    pub write_requests: u64,
    pub wrapped_requests: u64,
    pub host_page_reads: u64,
    pub host_page_writes: u64,
    pub partial_page_reads: u64,
}

/// The outcome, for tables and JSON.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ReplayReport {
    pub geometry: Geometry,
    pub ftl: FtlConfig,
    pub timing: Timing,
    pub logical_bytes: u64,
    #[serde(flatten)]
    pub stats: ReplayStats,
    pub page_reads: u64,
    pub page_programs: u64,
    pub block_erases: u64,
    pub merges: Merges,
    /// NAND programs per host page write.
    pub write_amplification: f64,
    pub erase_mean: f64,
    pub erase_sd: f64,
    pub erase_max: u32,
    pub logical_pages_written: u64,
    pub logical_writes_max: u32,
    pub physical_programs_max: u32,
    pub time_ns: u64,
    pub energy_j: f64,
}

impl Replay {
    /// A fresh erased chip under `cfg`. Refusals name the field.
    pub fn new(geo: Geometry, cfg: FtlConfig, timing: Timing) -> Result<Replay> {
        cfg.validate(&geo)?;
        Ok(Replay {
            ftl: Ftl::new(Nand::new(geo, NoMedia), cfg),
            page_bytes: u64::from(geo.page_data_bytes),
            logical_pages: geo.logical_pages(),
            logical_writes: vec![0; geo.logical_pages() as usize],
            stats: ReplayStats::default(),
            geo,
            timing,
            cfg,
        })
    }

    /// One request.
    pub fn request(&mut self, write: bool, offset_bytes: u64, size_bytes: u64) -> Result<()> {
        self.stats.requests += 1;
        if write {
            self.stats.write_requests += 1;
        } else {
            self.stats.read_requests += 1;
        }
        if size_bytes == 0 {
            return Ok(());
        }
        let p = self.page_bytes;
        let first = offset_bytes / p;
        let last = (offset_bytes + size_bytes - 1) / p;
        if last >= self.logical_pages {
            self.stats.wrapped_requests += 1;
        }
        for page in first..=last {
            let lpn = (page % self.logical_pages) as u32;
            if !write {
                self.ftl.read(lpn, &mut [])?;
                self.stats.host_page_reads += 1;
                continue;
            }
            let covered_from = offset_bytes.max(page * p);
            let covered_to = (offset_bytes + size_bytes).min((page + 1) * p);
            if covered_to - covered_from < p && self.ftl.read(lpn, &mut [])? {
                self.stats.partial_page_reads += 1;
            }
            self.ftl.write(lpn, &[])?;
            self.logical_writes[lpn as usize] += 1;
            self.stats.host_page_writes += 1;
        }
        Ok(())
    }

    pub fn counters(&self) -> &crate::nand::Counters {
        self.ftl.counters()
    }

    pub fn report(&self) -> ReplayReport {
        let c = self.ftl.counters();
        let (erase_mean, erase_sd) = mean_sd(&c.block_erases);
        let s = self.stats;
        ReplayReport {
            geometry: self.geo,
            ftl: self.cfg,
            timing: self.timing,
            logical_bytes: self.logical_pages * self.page_bytes,
            stats: s,
            page_reads: c.reads,
            page_programs: c.programs,
            block_erases: c.erases,
            merges: self.ftl.merges(),
            write_amplification: if s.host_page_writes == 0 {
                0.0
            } else {
                c.programs as f64 / s.host_page_writes as f64
            },
            erase_mean,
            erase_sd,
            erase_max: c.block_erases.iter().copied().max().unwrap_or(0),
            logical_pages_written: self.logical_writes.iter().filter(|&&w| w > 0).count() as u64,
            logical_writes_max: self.logical_writes.iter().copied().max().unwrap_or(0),
            physical_programs_max: c.page_programs.iter().copied().max().unwrap_or(0),
            time_ns: self
                .timing
                .time_ns(&self.geo, c.reads, c.programs, c.erases),
            energy_j: self
                .timing
                .energy_j(&self.geo, c.reads, c.programs, c.erases),
        }
    }
}

/// Blocks per erase count: `hist[k]` blocks were erased k times.
pub fn erase_histogram(block_erases: &[u32]) -> Vec<u64> {
    let max = block_erases.iter().copied().max().unwrap_or(0) as usize;
    let mut hist = vec![0u64; max + 1];
    for &e in block_erases {
        hist[e as usize] += 1;
    }
    hist
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ftl::FtlKind;

    fn small() -> Replay {
        let geo = Geometry {
            pages_per_block: 4,
            blocks: 8,
            spare_blocks: 4,
            ..Geometry::SMALL_BLOCK
        };
        let cfg = FtlConfig {
            kind: FtlKind::LogBlock,
            log_blocks: 2,
        };
        Replay::new(geo, cfg, Timing::SMALL_BLOCK).unwrap()
    }

    #[test]
    fn requests_become_pages_partial_writes_read_first_and_addresses_wrap() {
        let mut r = small();
        // Bytes 256..1280: pages 0 (part), 1 (whole), 2 (part); none mapped yet: no reads.
        r.request(true, 256, 1024).unwrap();
        assert_eq!(
            (r.stats.host_page_writes, r.stats.partial_page_reads),
            (3, 0)
        );
        // Part of page 1 again: it is mapped, so it is read first.
        r.request(true, 512 + 10, 10).unwrap();
        assert_eq!(
            (r.stats.host_page_writes, r.stats.partial_page_reads),
            (4, 1)
        );
        assert_eq!(r.counters().reads, 1);
        // Page 16 + 3 wraps to logical page 3 (16 logical pages).
        r.request(false, 19 * 512, 512).unwrap();
        r.request(true, 0, 0).unwrap();
        assert_eq!(r.stats.wrapped_requests, 1);
        assert_eq!(r.logical_writes[..4], [1, 2, 1, 0]);
        let rep = r.report();
        assert_eq!((rep.stats.requests, rep.stats.read_requests), (4, 1));
        assert_eq!(rep.page_programs, 4);
        assert_eq!(rep.logical_pages_written, 3);
        assert_eq!(rep.time_ns, Timing::SMALL_BLOCK.time_ns(&r.geo, 1, 4, 0));
    }

    #[test]
    fn the_erase_histogram_counts_blocks_per_erase_count() {
        assert_eq!(erase_histogram(&[0, 2, 2, 1, 0, 0]), vec![3, 1, 2]);
        assert_eq!(erase_histogram(&[]), vec![0]);
    }
}
