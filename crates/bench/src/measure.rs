//! Timing: every op timed on its own, on one or more threads, after an untimed warm-up.

use nvstack_core::error::Result;
use nvstack_core::Progress;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::Instant;

/// Threads one timed row may use (the machines this runs on have 2 cores; more is allowed
/// but says little).
pub const THREADS_MAX: usize = 16;
/// Progress updates every this many ops (an update is a locked instruction: keep them rare).
const PROGRESS_EVERY: usize = 8192;

/// Per-op latencies of one timed row.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// Timed ops (all threads) / wall time from the common start to the last thread's end.
    pub ops_per_sec: f64,
    pub median_ns: f64,
    pub p99_ns: f64,
    pub ops: u64,
}

/// Median and nearest-rank p99 of `lat`, and the rate over `wall_s`.
pub fn timing(mut lat: Vec<u64>, wall_s: f64) -> Timing {
    lat.sort_unstable();
    let n = lat.len();
    assert!(n > 0, "no timed ops");
    let median = if n % 2 == 1 {
        lat[n / 2] as f64
    } else {
        (lat[n / 2 - 1] + lat[n / 2]) as f64 / 2.0
    };
    let p99 = lat[((n * 99).div_ceil(100)).max(1) - 1] as f64;
    Timing {
        ops_per_sec: n as f64 / wall_s.max(1e-9),
        median_ns: median,
        p99_ns: p99,
        ops: n as u64,
    }
}

/// `n` uniform random values below `below`, from `seed` and `salt` (generated before timing).
pub fn random_indices(seed: u64, salt: u64, n: usize, below: u64) -> Vec<u64> {
    assert!(below > 0);
    let mut rng = SmallRng::seed_from_u64(seed ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    (0..n).map(|_| rng.gen_range(0..below)).collect()
}

/// One row's progress, reported through the caller's callback (`nvstack_core::Progress`): a
/// phase per row, started when the row knows its length.
pub struct Bar<'a> {
    progress: &'a dyn Progress,
    label: String,
    position: AtomicU64,
}

impl<'a> Bar<'a> {
    pub fn new(progress: &'a dyn Progress, label: String) -> Bar<'a> {
        Bar {
            progress,
            label,
            position: AtomicU64::new(0),
        }
    }
    /// The row's length is known: its phase starts.
    pub fn set_length(&self, steps_total: u64) {
        self.position.store(0, Ordering::Relaxed);
        self.progress.start(&self.label, steps_total);
    }
    pub fn inc(&self, steps: u64) {
        self.position.fetch_add(steps, Ordering::Relaxed);
        self.progress.advance(steps);
    }
    pub fn set_position(&self, position: u64) {
        let old = self.position.swap(position, Ordering::Relaxed);
        self.progress.advance(position.saturating_sub(old));
    }
    pub fn finish_and_clear(&self) {
        self.progress.finish();
    }
}

/// Run `op(i)` on `threads` threads. Thread `t` runs indices `t * per .. (t + 1) * per` where
/// `per = warmup + ops`: the first `warmup` untimed, the rest each timed on its own. All
/// threads start their timed part together (a barrier); the rate is all timed ops over the
/// time from that start to the last thread's end.
pub fn run_threads<F>(pb: &Bar, threads: usize, warmup: usize, ops: usize, op: F) -> Result<Timing>
where
    F: Fn(usize) -> Result<()> + Sync,
{
    assert!(
        (1..=THREADS_MAX).contains(&threads),
        "1 to {THREADS_MAX} threads"
    );
    assert!(ops > 0);
    let per = warmup + ops;
    pb.set_length((per * threads) as u64);
    let one = |t: usize, barrier: Option<&Barrier>| -> Result<(Vec<u64>, Instant, Instant)> {
        let base = t * per;
        for i in 0..warmup {
            op(base + i)?;
            if i % PROGRESS_EVERY == 0 {
                pb.inc(PROGRESS_EVERY.min(warmup - i) as u64);
            }
        }
        let mut lat = Vec::with_capacity(ops);
        if let Some(b) = barrier {
            b.wait();
        }
        let start = Instant::now();
        for i in warmup..per {
            let t0 = Instant::now();
            op(base + i)?;
            lat.push(t0.elapsed().as_nanos() as u64);
            if (i - warmup).is_multiple_of(PROGRESS_EVERY) {
                pb.inc(PROGRESS_EVERY.min(per - i) as u64);
            }
        }
        Ok((lat, start, Instant::now()))
    };
    let results: Vec<Result<(Vec<u64>, Instant, Instant)>> = if threads == 1 {
        vec![one(0, None)]
    } else {
        let barrier = Barrier::new(threads);
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let barrier = &barrier;
                    let one = &one;
                    s.spawn(move || one(t, Some(barrier)))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("benchmark thread panicked"))
                .collect()
        })
    };
    let mut lat = Vec::with_capacity(ops * threads);
    let mut start: Option<Instant> = None;
    let mut end: Option<Instant> = None;
    for r in results {
        let (l, s, e) = r?;
        lat.extend_from_slice(&l);
        start = Some(start.map_or(s, |x| x.min(s)));
        end = Some(end.map_or(e, |x| x.max(e)));
    }
    pb.finish_and_clear();
    let wall = match (start, end) {
        (Some(s), Some(e)) => e.duration_since(s).as_secs_f64(),
        _ => unreachable!("at least one thread ran"),
    };
    Ok(timing(lat, wall))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let t = timing((1..=100).rev().collect(), 1.0);
        assert_eq!(t.median_ns, 50.5);
        assert_eq!(t.p99_ns, 99.0);
        assert_eq!(t.ops_per_sec, 100.0);
        assert_eq!(t.ops, 100);
    }

    #[test]
    fn threads_cover_their_own_indices_once() {
        use std::sync::atomic::{AtomicU8, Ordering};
        let seen: Vec<AtomicU8> = (0..2 * (3 + 5)).map(|_| AtomicU8::new(0)).collect();
        let t = run_threads(
            &Bar::new(&nvstack_core::NoProgress, String::new()),
            2,
            3,
            5,
            |i| {
                seen[i].fetch_add(1, Ordering::Relaxed);
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(t.ops, 10);
        assert!(seen.iter().all(|s| s.load(Ordering::Relaxed) == 1));
    }

    #[test]
    fn an_error_stops_the_row() {
        let r = run_threads(
            &Bar::new(&nvstack_core::NoProgress, String::new()),
            2,
            0,
            4,
            |i| {
                if i == 5 {
                    Err(nvstack_core::error::Error::bad("boom"))
                } else {
                    Ok(())
                }
            },
        );
        assert!(r.is_err());
    }
}
