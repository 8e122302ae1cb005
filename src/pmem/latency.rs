//! DRAM latency measurement and NVRAM latency injection (seed 000, section 7.6).
//!
//! Injection adds (m - 1) x L per persisted cache line, where m is the multiple of DRAM latency
//! the emulated NVRAM has (1.0 to 3.0) and L is the DRAM store latency measured at start.

use super::cpu;
use std::time::{Duration, Instant};

/// Median time of one 64-byte line written with non-temporal stores and fenced, to random lines
/// of a 64 MiB buffer (larger than the caches): what one persisted line costs on this DRAM.
pub fn measure_dram_store_latency_ns() -> f64 {
    const BUF_BYTES: usize = 64 << 20;
    const SAMPLES: usize = 20_000;
    let mut buf = vec![0u8; BUF_BYTES + 64];
    let base = (buf.as_mut_ptr() as usize + 63) & !63;
    // Pre-fault.
    for i in (0..BUF_BYTES).step_by(4096) {
        // SAFETY: inside buf.
        unsafe { std::ptr::write_volatile((base + i) as *mut u8, 1) };
    }
    let line = [7u8; 64];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut times = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let off = (x as usize % (BUF_BYTES / 64)) * 64;
        let t = Instant::now();
        // SAFETY: a 64-byte aligned line inside buf.
        unsafe { cpu::nt_copy((base + off) as *mut u8, line.as_ptr(), 64) };
        cpu::sfence();
        times.push(t.elapsed().as_nanos() as u64);
    }
    drop(buf);
    times.sort_unstable();
    times[SAMPLES / 2] as f64
}

/// Extra delay per persisted line.
#[derive(Clone, Copy, Debug, Default)]
pub struct LatencyInjection {
    pub extra_ns_per_line: f64,
}

impl LatencyInjection {
    /// `multiple` of DRAM latency `dram_ns`; 1.0 means no injection.
    pub fn new(multiple: f64, dram_ns: f64) -> LatencyInjection {
        assert!(
            (1.0..=3.0).contains(&multiple),
            "latency multiple {multiple} outside 1.0..=3.0"
        );
        LatencyInjection {
            extra_ns_per_line: (multiple - 1.0) * dram_ns,
        }
    }

    pub fn is_off(&self) -> bool {
        self.extra_ns_per_line <= 0.0
    }

    /// The extra time owed for `lines` persisted lines.
    pub fn owed_ns(&self, lines: u64) -> u64 {
        if self.is_off() {
            return 0;
        }
        (self.extra_ns_per_line * lines as f64) as u64
    }

    /// Busy-wait for `lines` persisted lines (a sleep would be far too coarse). Returns the
    /// nanoseconds injected.
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
pub fn parse_multiple(text: &str) -> crate::error::Result<f64> {
    let m: f64 = text.trim().parse().map_err(|_| {
        crate::error::Error::bad(format!(
            "bad latency multiple '{text}': expected a number from 1.0 to 3.0"
        ))
    })?;
    if !(1.0..=3.0).contains(&m) {
        return Err(crate::error::Error::bad(format!(
            "latency multiple {m} out of range: NVRAM latency is given as 1.0 to 3.0 times DRAM"
        )));
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pmem::{CommitDomain, Method, MmapRegion};

    #[test]
    fn injection_is_m_minus_one_times_dram_per_line() {
        assert!(LatencyInjection::new(1.0, 90.0).is_off());
        let l = LatencyInjection::new(2.5, 100.0);
        assert_eq!(l.extra_ns_per_line, 150.0);
        assert!(parse_multiple("0.5").is_err());
        assert!(parse_multiple("3.5").is_err());
        assert!(parse_multiple("x").is_err());
        assert_eq!(parse_multiple("2").unwrap(), 2.0);
    }

    #[test]
    fn delay_covers_every_line_persisted_by_a_commit() {
        let r = MmapRegion::anonymous(1 << 16).unwrap();
        let mut d = CommitDomain::new(0, &[(0, 1 << 16)], LatencyInjection::new(2.0, 100.0));
        d.store(&r, Method::Nt, 0, &[1u8; 256]); // 4 lines
        d.store_u64(&r, Method::Nt, 4096, 9); // 1 line
        d.commit(&r);
        assert_eq!(d.stats().injected_ns, 500, "5 lines x (2.0 - 1) x 100 ns");
        d.commit(&r); // nothing pending: nothing owed
        assert_eq!(d.stats().injected_ns, 500);
        let mut off = CommitDomain::new(1, &[(0, 1 << 16)], LatencyInjection::default());
        off.store(&r, Method::Nt, 0, &[1u8; 64]);
        off.commit(&r);
        assert_eq!(off.stats().injected_ns, 0);
    }
}
