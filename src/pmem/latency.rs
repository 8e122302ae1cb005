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

    /// Busy-wait for `lines` persisted lines (a sleep would be far too coarse).
    pub fn delay(&self, lines: u64) {
        if self.is_off() || lines == 0 {
            return;
        }
        let d = Duration::from_nanos((self.extra_ns_per_line * lines as f64) as u64);
        let t = Instant::now();
        while t.elapsed() < d {
            std::hint::spin_loop();
        }
    }
}
