//! DRAM latency measurement and NVRAM latency injection (seed 000, section 7.6).
//!
//! What a persist of k lines costs on DRAM is modelled as L + (k - 1) x S: L the latency of one
//! persisted line (a round trip: the line goes out and the fence waits for it), S the time each
//! further line adds when it streams behind the first (the bandwidth term). Both are measured at
//! start. NVRAM with m times DRAM's latency is modelled as m times that cost, so a commit of k
//! lines is charged (m - 1) x (L + (k - 1) x S) more. (Charging L for every line would treat a
//! 4 KiB write as 64 round trips: 64 x L is ten times what DRAM takes to persist it.)

use super::cpu;
use std::time::{Duration, Instant};

/// What persisting costs on this DRAM.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct DramLatency {
    /// Median time of one 64-byte line written with non-temporal stores and fenced.
    pub line_ns: f64,
    /// What each further line of a 4 KiB persist adds: (4 KiB persist - one line) / 63.
    pub stream_ns_per_line: f64,
}

/// Measure [`DramLatency`] on a 64 MiB buffer (larger than the caches), random targets.
pub fn measure_dram_latency() -> DramLatency {
    let line_ns = measure_persist_ns(64);
    let block_ns = measure_persist_ns(4096);
    DramLatency {
        line_ns,
        stream_ns_per_line: ((block_ns - line_ns) / 63.0).max(0.0),
    }
}

/// Median time of one 64-byte line written with non-temporal stores and fenced, to random lines
/// of a 64 MiB buffer (larger than the caches): what one persisted line costs on this DRAM.
pub fn measure_dram_store_latency_ns() -> f64 {
    measure_persist_ns(64)
}

/// Median time to persist `bytes` (a multiple of 64, at most 4 KiB) with non-temporal stores
/// and one fence, at random `bytes`-aligned offsets of a pre-faulted 64 MiB buffer.
fn measure_persist_ns(bytes: usize) -> f64 {
    const BUF_BYTES: usize = 64 << 20;
    const SAMPLES: usize = 20_000;
    assert!(bytes.is_multiple_of(64) && (64..=4096).contains(&bytes));
    let mut buf = vec![0u8; BUF_BYTES + 64];
    let base = (buf.as_mut_ptr() as usize + 63) & !63;
    // Pre-fault.
    for i in (0..BUF_BYTES).step_by(4096) {
        // SAFETY: inside buf.
        unsafe { std::ptr::write_volatile((base + i) as *mut u8, 1) };
    }
    let src = vec![7u8; bytes];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut times = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let off = (x as usize % (BUF_BYTES / bytes)) * bytes;
        let t = Instant::now();
        // SAFETY: `bytes` bytes at a 64-byte aligned offset inside buf.
        unsafe { cpu::nt_copy((base + off) as *mut u8, src.as_ptr(), bytes) };
        cpu::sfence();
        times.push(t.elapsed().as_nanos() as u64);
    }
    drop(buf);
    times.sort_unstable();
    times[SAMPLES / 2] as f64
}

/// Extra delay per commit: (m - 1) x (L + (k - 1) x S) for a commit of k lines.
#[derive(Clone, Copy, Debug, Default)]
pub struct LatencyInjection {
    /// (m - 1) x L: charged once per commit that persists anything.
    pub extra_ns_first_line: f64,
    /// (m - 1) x S: charged for each further line of the commit.
    pub extra_ns_per_next_line: f64,
}

impl LatencyInjection {
    /// `multiple` of DRAM latency `dram`; 1.0 means no injection.
    pub fn new(multiple: f64, dram: DramLatency) -> LatencyInjection {
        assert!(
            (1.0..=3.0).contains(&multiple),
            "latency multiple {multiple} outside 1.0..=3.0"
        );
        LatencyInjection {
            extra_ns_first_line: (multiple - 1.0) * dram.line_ns,
            extra_ns_per_next_line: (multiple - 1.0) * dram.stream_ns_per_line,
        }
    }

    pub fn is_off(&self) -> bool {
        self.extra_ns_first_line <= 0.0 && self.extra_ns_per_next_line <= 0.0
    }

    /// The extra time owed for a commit that persists `lines` lines.
    pub fn owed_ns(&self, lines: u64) -> u64 {
        if self.is_off() || lines == 0 {
            return 0;
        }
        (self.extra_ns_first_line + self.extra_ns_per_next_line * (lines - 1) as f64) as u64
    }

    /// Busy-wait for a commit of `lines` persisted lines (a sleep would be far too coarse).
    /// Returns the nanoseconds injected.
    pub fn delay(&self, lines: u64) -> u64 {
        let ns = self.owed_ns(lines);
        if ns == 0 {
            return 0;
        }
        let d = Duration::from_nanos(ns);
        let t = Instant::now();
        while t.elapsed() < d {
            std::hint::spin_loop();
        }
        ns
    }
}

/// Parse and validate a latency multiple from the command line (1.0 to 3.0, seed 7.6).
pub fn parse_multiple(text: &str) -> nvstack_core::error::Result<f64> {
    let m: f64 = text.trim().parse().map_err(|_| {
        nvstack_core::error::Error::bad(format!(
            "bad latency multiple '{text}': expected a number from 1.0 to 3.0"
        ))
    })?;
    if !(1.0..=3.0).contains(&m) {
        return Err(nvstack_core::error::Error::bad(format!(
            "latency multiple {m} out of range: NVRAM latency is given as 1.0 to 3.0 times DRAM"
        )));
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CommitDomain, Method, MmapRegion};

    #[test]
    fn injection_is_m_minus_one_times_the_dram_cost() {
        let dram = DramLatency {
            line_ns: 100.0,
            stream_ns_per_line: 10.0,
        };
        assert!(LatencyInjection::new(1.0, dram).is_off());
        let l = LatencyInjection::new(2.5, dram);
        assert_eq!(l.extra_ns_first_line, 150.0);
        assert_eq!(l.extra_ns_per_next_line, 15.0);
        assert_eq!(l.owed_ns(0), 0);
        assert_eq!(l.owed_ns(1), 150);
        assert_eq!(l.owed_ns(64), 150 + 63 * 15);
        assert!(parse_multiple("0.5").is_err());
        assert!(parse_multiple("3.5").is_err());
        assert!(parse_multiple("x").is_err());
        assert_eq!(parse_multiple("2").unwrap(), 2.0);
    }

    #[test]
    fn measured_dram_costs_are_positive() {
        let d = measure_dram_latency();
        assert!(d.line_ns > 0.0 && d.stream_ns_per_line >= 0.0, "{d:?}");
    }

    #[test]
    fn delay_covers_every_line_persisted_by_a_commit() {
        let r = MmapRegion::anonymous(1 << 16).unwrap();
        let dram = DramLatency {
            line_ns: 100.0,
            stream_ns_per_line: 10.0,
        };
        let mut d = CommitDomain::new(0, &[(0, 1 << 16)], LatencyInjection::new(2.0, dram));
        d.store(&r, Method::Nt, 0, &[1u8; 256]); // 4 lines
        d.store_u64(&r, Method::Nt, 4096, 9); // 1 line
        d.commit(&r);
        assert_eq!(
            d.stats().injected_ns,
            140,
            "one commit of 5 lines: (2.0 - 1) x (100 + 4 x 10) ns"
        );
        d.commit(&r); // nothing pending: nothing owed
        assert_eq!(d.stats().injected_ns, 140);
        let mut off = CommitDomain::new(1, &[(0, 1 << 16)], LatencyInjection::default());
        off.store(&r, Method::Nt, 0, &[1u8; 64]);
        off.commit(&r);
        assert_eq!(off.stats().injected_ns, 0);
    }
}
