//! Progress of long-running library work (the crash checker, simulator sweeps, benchmarks),
//! reported through a callback the caller draws: the `nvstack` program with indicatif, Python
//! with tqdm, tests with nothing. A library never draws progress itself.
//!
//! A run reports one phase at a time: `start` (a label and a number of steps), any number of
//! `advance` and `message` calls, then `finish`. Calls may come from several threads at once.

/// Receives progress reports. Every method must be cheap: workers call `advance` often.
pub trait Progress: Send + Sync {
    /// A new phase of `steps_total` steps named `label` (0 steps: a phase of unknown length).
    fn start(&self, label: &str, steps_total: u64);
    /// `steps` more steps done in the current phase.
    fn advance(&self, steps: u64);
    /// What runs now (e.g. "fast p4 M1 write-1"); shown beside the bar.
    fn message(&self, _text: &str) {}
    /// The current phase is over.
    fn finish(&self);
}

/// Reports nothing: for tests, `--json` runs and callers that draw no progress.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&self, _label: &str, _steps_total: u64) {}
    fn advance(&self, _steps: u64) {}
    fn finish(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Counts steps; what a caller's bar would show.
    struct Count(AtomicU64);
    impl Progress for Count {
        fn start(&self, _label: &str, _steps_total: u64) {
            self.0.store(0, Ordering::Relaxed);
        }
        fn advance(&self, steps: u64) {
            self.0.fetch_add(steps, Ordering::Relaxed);
        }
        fn finish(&self) {}
    }

    #[test]
    fn a_trait_object_counts_from_several_threads() {
        let c = Count(AtomicU64::new(7));
        let p: &dyn Progress = &c;
        p.start("t", 8);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| p.advance(2));
            }
        });
        p.message("done");
        p.finish();
        assert_eq!(c.0.load(Ordering::Relaxed), 8);
        NoProgress.start("x", 1);
        NoProgress.advance(1);
        NoProgress.finish();
    }
}
