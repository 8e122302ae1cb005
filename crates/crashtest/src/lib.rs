//! The crash checker (`nvstack crashtest`): the device runs unchanged on a simulated region
//! that logs every store, flush and fence; the checker crashes it at every point (exhaustive
//! tier) or at random points of random workloads (randomized tier), builds the post-crash
//! images a fault model allows, runs the real recovery on each, and judges every touched block
//! with the oracle of the layer's promise (`oracle::Promise`: per operation, epochs, ordered).
//! docs/crashtest.md describes the models, tiers and reports.
//!
//! The entry points are [`run`] (a [`Plan`] in, a [`Report`] out, progress through
//! `nvstack_core::Progress`) and [`replay`]. The checker drives a [`CrashTarget`], the layer
//! under test; [`NvramTarget`] is nvramdisk's, and [`CacheTarget`] nvcache's caches'
//! ([`UbjTarget`], [`WriteTarget`]).

pub mod driver;
pub mod exhaustive;
pub mod oracle;
pub mod random;
pub mod target;

pub use driver::{
    replay, run, BugResult, Layer, Orderings, Plan, PlanError, Replay, ReplayLine, ReplayPlan,
    Report, Row,
};
pub use target::cache::{CacheTarget, UbjTarget, WriteTarget};
pub use target::nvramdisk::NvramTarget;
pub use target::CrashTarget;

use nvstack_pmem::crash::FaultModel;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Lock one of the checker's mutexes, taking the guard back if the lock is poisoned.
///
/// Sound because no critical section of the checker can stop half-way: each makes one push,
/// insert, sum or store on its value (counters, the states seen, the violations kept, a time,
/// the states expanded at depth 2, the scenario's marks; the two-lanes gate sets its flags
/// before it waits) and runs no device code. A poisoned lock therefore still guards a whole
/// value. The panic that poisoned it is not hidden: rayon and `std::thread::scope` raise it
/// again in the caller.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Violations kept in full in a report (all are counted).
pub const VIOLATIONS_KEPT: usize = 50;

/// A violation the oracle found, as the report gives it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Violation {
    pub fault: FaultModel,
    /// The configuration's labels (`CrashTarget::labels`).
    pub protocol: &'static str,
    pub ordering: &'static str,
    pub scenario: &'static str,
    pub seed: u64,
    /// The crash point (event index), or the cycle for the randomized tier.
    pub step: usize,
    /// 1: a crash in the workload; 2: a second crash inside recovery.
    pub depth: u8,
    pub lba: Option<u64>,
    pub what: String,
    /// Which pending words reached media, and with which value (the garbage named).
    pub image: String,
}

/// Counters shared by every worker thread of a run.
#[derive(Default)]
pub struct Counters {
    pub crash_points: AtomicU64,
    /// Images judged, per model (an image shared by M0, M1 and M2 counts under each).
    pub images_checked: AtomicU64,
    /// Recoveries actually run and judged (each shared image once): the work done.
    pub images_run: AtomicU64,
    pub depth2_images: AtomicU64,
    pub cycles: AtomicU64,
    pub points_exhaustive: AtomicU64,
    pub points_sampled: AtomicU64,
    /// Crash points skipped as equivalent to the one before (`CrashTarget::skip_unread_points`);
    /// counted in `crash_points` too.
    pub points_equivalent: AtomicU64,
    /// Sum over sampled points of checked/possible (for the covered fraction), in 1e-9 units.
    sampled_fraction_nano: AtomicU64,
    pub violations: AtomicU64,
    pub first_violation_images: AtomicU64,
    pub first_violation_points: AtomicU64,
    /// When the first violation was found.
    pub first_violation_at: Mutex<Option<std::time::Instant>>,
    kept: Mutex<Vec<Violation>>,
    states: Mutex<BTreeSet<(String, String)>>,
    pub images_possible: Mutex<u128>,
    /// M3: media faults injected, and how they came out.
    pub media_faults: AtomicU64,
    pub media_detected_at_open: AtomicU64,
    pub media_detected_on_read: AtomicU64,
    pub media_no_effect: AtomicU64,
}

impl Counters {
    pub fn crash_point(&self, possible: u128, checked: u128, exhaustive: bool) {
        debug_assert!(
            !exhaustive || checked == possible,
            "a point enumerated in full checks every image ({checked} of {possible})"
        );
        debug_assert!(checked >= 1, "a crash point checks an image at least");
        self.crash_points.fetch_add(1, Ordering::Relaxed);
        let mut g = lock(&self.images_possible);
        *g = g.saturating_add(possible);
        drop(g);
        if exhaustive {
            self.points_exhaustive.fetch_add(1, Ordering::Relaxed);
        } else {
            self.points_sampled.fetch_add(1, Ordering::Relaxed);
            let f = (checked as f64 / possible as f64 * 1e9) as u64;
            self.sampled_fraction_nano.fetch_add(f, Ordering::Relaxed);
        }
    }
    /// A crash point that allows the same executions as the one before it.
    pub fn equivalent_point(&self) {
        self.crash_points.fetch_add(1, Ordering::Relaxed);
        self.points_equivalent.fetch_add(1, Ordering::Relaxed);
    }
    pub fn media_fault(&self, o: random::MediaOutcome) {
        self.media_faults.fetch_add(1, Ordering::Relaxed);
        let c = match o {
            random::MediaOutcome::DetectedAtOpen => &self.media_detected_at_open,
            random::MediaOutcome::DetectedOnRead => &self.media_detected_on_read,
            random::MediaOutcome::NoEffect => &self.media_no_effect,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
    pub fn image(&self) {
        self.images_checked.fetch_add(1, Ordering::Relaxed);
        self.images_run.fetch_add(1, Ordering::Relaxed);
    }
    pub fn depth2_image(&self) {
        self.depth2_images.fetch_add(1, Ordering::Relaxed);
    }
    pub fn cycle(&self) {
        self.cycles.fetch_add(1, Ordering::Relaxed);
    }
    /// Note that `name`, a state of configuration label `protocol`, was seen.
    pub fn state(&self, protocol: &str, name: &str) {
        let key = (protocol.to_string(), name.to_string());
        let mut s = lock(&self.states);
        if !s.contains(&key) {
            s.insert(key);
        }
    }
    pub fn violation(&self, v: Violation) {
        if self.violations.fetch_add(1, Ordering::Relaxed) == 0 {
            *lock(&self.first_violation_at) = Some(std::time::Instant::now());
            self.first_violation_images.store(
                self.images_checked.load(Ordering::Relaxed),
                Ordering::Relaxed,
            );
            self.first_violation_points
                .store(self.crash_points.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        let mut k = lock(&self.kept);
        if k.len() < VIOLATIONS_KEPT {
            k.push(v);
        }
        debug_assert!(k.len() <= VIOLATIONS_KEPT);
    }
    pub fn kept(&self) -> Vec<Violation> {
        lock(&self.kept).clone()
    }
    pub fn states(&self) -> Vec<(String, String)> {
        lock(&self.states).iter().cloned().collect()
    }
    /// Add `f` (a sum of per-point fractions) to the sampled-fraction total.
    pub fn add_sampled_fraction(&self, f: f64) {
        self.sampled_fraction_nano
            .fetch_add((f * 1e9) as u64, Ordering::Relaxed);
    }

    /// Mean fraction of the image space checked at the sampled crash points (1.0 if none).
    pub fn sampled_fraction(&self) -> f64 {
        let n = self.points_sampled.load(Ordering::Relaxed);
        if n == 0 {
            1.0
        } else {
            self.sampled_fraction_nano.load(Ordering::Relaxed) as f64 / 1e9 / n as f64
        }
    }
}
