//! The exhaustive tier: crash every scenario at every store, flush and fence, check every
//! image (or, past EAGER_IMAGES_MAX, the extremes, every single deviation and a sample), and
//! crash again inside recovery (depth 2).

use super::oracle::{Expect, Finding};
use super::target::{CrashTarget, Recorded};
use super::{Counters, Violation};
use nvstack_core::error::{Error, Result};
use nvstack_pmem::crash::{CrashState, FaultModel, ImageSpace, SimEvent, SimRegion};
use rayon::prelude::*;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};

/// Random samples per crash point whose image space exceeds EAGER_IMAGES_MAX.
pub const SAMPLES: usize = 64;
/// Depth-2 expansions per crash point (the first image whose recovery wrote something).
pub const DEPTH2_PER_POINT: usize = 1;
/// Crash points per parallel chunk of the exhaustive tier.
pub const CHUNK_POINTS: usize = 32;
/// Random images per depth-2 crash point whose line's space exceeds EAGER_IMAGES_MAX (below
/// that, every image of the line is checked).
pub const DEPTH2_SAMPLES: usize = 8;

/// One scenario of a target under one configuration and fault model.
pub struct Job<T: CrashTarget> {
    /// The scenario's index in `CrashTarget::scenarios`.
    pub scenario: usize,
    /// The scenario's name, for reports.
    pub name: &'static str,
    pub config: T::Config,
    /// The fault model images are drawn from.
    pub model: FaultModel,
    /// A seeded bug switched on in the workload (and in recovery, if a recovery bug).
    pub bug: Option<T::Bug>,
    /// The run's seed, mixed with each crash point's index.
    pub seed: u64,
    /// Also crash inside recovery.
    pub depth2: bool,
    /// Stop at the first violation (seeded-bug hunts).
    pub first_only: bool,
}

/// Recover `img` and judge it. Ok(true) when recovery wrote anything.
pub fn check_image<T: CrashTarget>(
    target: &T,
    img: Arc<SimRegion>,
    exp: &Expect,
    crash: usize,
    config: T::Config,
    bug: Option<T::Bug>,
) -> std::result::Result<bool, Finding> {
    let dev = target.recover(img, config, bug).map_err(|e| Finding {
        lba: None,
        what: format!("recovery refused the image: {e}"),
    })?;
    exp.verify(&dev, crash)?;
    Ok(target.recovery_did_work(&dev))
}

/// Run one job: every crash point of one scenario under one model. Returns true when the
/// recording holds no cached store and no flush: every store was non-temporal, so M0, M1 and
/// M2 allow exactly the same images (M0's line order and M2's disturbance only concern
/// cached lines), and the job's result stands for all three. Err (environment): the
/// scenario's workload itself failed. A workload whose own reads found a wrong block (an
/// `Error::Finding` while running, no crash involved) is a violation at its step 0.
pub fn run<T: CrashTarget>(target: &T, job: &Job<T>, counters: &Counters) -> Result<bool> {
    let recorded = target.record(job.scenario, job.config, job.bug);
    if let Err(Error::Finding(what)) = &recorded {
        let what = format!("while running (no crash): {what}");
        counters.violation(violation(target, job, 0, 1, None, what, String::new()));
        return Ok(false);
    }
    let rec = recorded.map_err(|e| {
        let l = target.labels(job.config);
        Error::env(format!(
            "{} ({} {}): the workload itself failed: {e}",
            job.name, l.protocol, l.ordering
        ))
    })?;
    assert!(
        rec.start <= rec.events.len(),
        "{}: the workload starts inside the log",
        job.name
    );
    // Crash points are checked in contiguous chunks, in parallel: each chunk starts from a
    // checkpoint of the replay and applies the events one by one (no per-point copies).
    let points = rec.events.len() - rec.start + 1;
    let chunk_len = chunk_points(target, points);
    let checkpoints = checkpoints(&rec, chunk_len);
    let found = AtomicBool::new(false);
    let expanded: Mutex<BTreeSet<String>> = Default::default();
    checkpoints.par_iter().for_each(|(first, cs0)| {
        let chunk = Chunk {
            target,
            job,
            rec: &rec,
            first: *first,
            last: (*first + chunk_len - 1).min(rec.events.len()),
        };
        chunk.check(cs0.clone(), counters, &found, &expanded);
    });
    // Disk events too: the disk's model is the same under M0, M1 and M2.
    let model_invariant = rec.events.iter().all(|e| {
        matches!(
            e,
            SimEvent::Store { nt: true, .. }
                | SimEvent::Fence
                | SimEvent::DiskStore { .. }
                | SimEvent::DiskFlush
        )
    });
    Ok(model_invariant)
}

/// Crash points per chunk. Small chunks: the costly crash points (records, map stores) cluster,
/// so many small chunks balance the threads; one replay clone per chunk stays cheap. But a
/// chunk's first point is always checked (the point before it is another chunk's): when
/// equivalent points are skipped, few long chunks (four per thread) keep that cost small.
fn chunk_points<T: CrashTarget>(target: &T, points: usize) -> usize {
    debug_assert!(points >= 1, "a recording has a crash point at least");
    let len = if target.skip_unread_points() {
        points
            .div_ceil(4 * rayon::current_num_threads())
            .max(CHUNK_POINTS)
    } else {
        CHUNK_POINTS
    };
    len.min(points)
}

/// Crash points `first` to `last` of a job's recording, checked in order by one thread.
struct Chunk<'a, T: CrashTarget> {
    target: &'a T,
    job: &'a Job<T>,
    rec: &'a Recorded<T::Trace>,
    first: usize,
    last: usize,
}

impl<T: CrashTarget> Chunk<'_, T> {
    /// Check every crash point of the chunk, starting from `cs` (the replay at `first`);
    /// sets `found` on a violation and stops early once it is set for a first-only job.
    fn check(
        &self,
        mut cs: CrashState,
        counters: &Counters,
        found: &AtomicBool,
        expanded: &Mutex<BTreeSet<String>>,
    ) {
        let (rec, job) = (self.rec, self.job);
        let mut durable: Option<(u64, Arc<Vec<u64>>)> = None;
        // The words the images of the last point checked read, as a bitmap (when skipping).
        let mut last_reads: Option<Vec<u64>> = None;
        for k in self.first..=self.last {
            if k > self.first {
                cs.apply(&rec.events[k - 1]);
            }
            debug_assert_eq!(cs.applied, k, "crash point k follows event k");
            if job.first_only && found.load(AtomicOrdering::Relaxed) {
                return;
            }
            // No crash inside a disk sector's write (a disk writes a sector whole).
            if k > rec.start && !rec.events[k - 1].is_crash_point_after() {
                continue;
            }
            if last_reads
                .as_ref()
                .is_some_and(|r| equivalent_to_last(rec, &cs, k, r))
            {
                counters.equivalent_point();
                continue;
            }
            // The durable image changes only when a word becomes durable: reuse it until then.
            let base = match &durable {
                Some((g, b)) if *g == cs.durable_gen => b.clone(),
                _ => {
                    let b = cs.durable_image();
                    durable = Some((cs.durable_gen, b.clone()));
                    b
                }
            };
            let point = Point {
                target: self.target,
                job,
                rec,
                k,
            };
            let (violated, reads) = point.check(&cs, base, counters, expanded);
            if violated {
                found.store(true, AtomicOrdering::Relaxed);
            }
            last_reads = self.target.skip_unread_points().then_some(reads);
        }
    }
}

/// Whether crash point `k` allows the same executions as the last point checked, whose images
/// read `reads` (`CrashTarget::skip_unread_points`): event k - 1 stored only words none of
/// them loaded (a non-temporal word outside any line with cached stores, or a disk sector),
/// and what the oracle allows does not change at k.
fn equivalent_to_last<Tr>(rec: &Recorded<Tr>, cs: &CrashState, k: usize, reads: &[u64]) -> bool {
    debug_assert!(k >= 1, "the first crash point is always checked");
    if rec.expect.boundary_at(k) {
        return false;
    }
    let read = |w: u64| {
        reads
            .get((w / 64) as usize)
            .is_some_and(|b| b & 1 << (w % 64) != 0)
    };
    match rec.events[k - 1] {
        SimEvent::Store { word, nt: true, .. } => {
            !read(word) && !cs.line_has_cached_stores(word / 8)
        }
        SimEvent::DiskStore { word, .. } => {
            let first = word - word % nvstack_pmem::crash::SECTOR_WORDS;
            !(first..=word).any(read)
        }
        _ => false,
    }
}

/// Replay `rec` once, keeping the crash state at the first point of every chunk of
/// `chunk_len` crash points (points run from `rec.start` to the end of the log).
fn checkpoints<Tr>(rec: &Recorded<Tr>, chunk_len: usize) -> Vec<(usize, CrashState)> {
    debug_assert!(chunk_len >= 1, "a chunk holds a crash point");
    let points = rec.events.len() - rec.start + 1;
    let mut checkpoints: Vec<(usize, CrashState)> = Vec::with_capacity(points.div_ceil(chunk_len));
    let mut cs = CrashState::new(rec.base.clone());
    for (i, e) in rec.events.iter().enumerate() {
        if i >= rec.start && (i - rec.start).is_multiple_of(chunk_len) {
            checkpoints.push((i, cs.clone()));
        }
        cs.apply(e);
    }
    if (rec.events.len() - rec.start).is_multiple_of(chunk_len) {
        checkpoints.push((rec.events.len(), cs));
    }
    // Together the chunks cover every crash point once.
    debug_assert_eq!(checkpoints.len(), points.div_ceil(chunk_len));
    debug_assert!(checkpoints.iter().all(|(i, cs)| cs.applied == *i));
    checkpoints
}

/// One crash point `k` of a job's recording.
struct Point<'a, T: CrashTarget> {
    target: &'a T,
    job: &'a Job<T>,
    rec: &'a Recorded<T::Trace>,
    k: usize,
}

/// The lazy enumeration at one crash point: which slots are varied so far.
struct Lazy {
    /// (word, slot) for every word the point's space can change, sorted by word.
    slot_of: Vec<(u64, usize)>,
    /// The slots varied: those of every pending word a checked image read.
    relevant: BTreeSet<usize>,
    /// Depth-2 expansions this point may still make.
    depth2_left: usize,
    /// Every word any image of the point read, as a bitmap (for
    /// `CrashTarget::skip_unread_points`).
    reads: Vec<u64>,
}

impl Lazy {
    /// Vary the slot of every word in `read` (ascending) the space can change. True when
    /// that adds a slot.
    fn note_reads(&mut self, read: &[u64]) -> bool {
        debug_assert!(read.is_sorted(), "words read come in ascending order");
        let slot_of = &self.slot_of;
        let mut grew = false;
        // Both lists are sorted by word: merge them.
        let (mut a, mut b) = (0, 0);
        while a < read.len() && b < slot_of.len() {
            match read[a].cmp(&slot_of[b].0) {
                std::cmp::Ordering::Less => a += 1,
                std::cmp::Ordering::Greater => b += 1,
                std::cmp::Ordering::Equal => {
                    grew |= self.relevant.insert(slot_of[b].1);
                    a += 1;
                    b += 1;
                }
            }
        }
        grew
    }
}

/// How one image came out.
struct Checked {
    /// It (or a crash inside its recovery) broke the oracle's rules.
    violated: bool,
    /// It read a pending word of a slot not varied yet.
    grew: bool,
}

impl<T: CrashTarget> Point<'_, T> {
    /// Check every image of the crash point that can matter. Lazily: only the pending words
    /// that recovery or the oracle actually read are varied. Starting from "nothing pending
    /// reached media", the set of varied words grows by every pending word some checked image
    /// read, until a round reads nothing new. A word no checked image reads cannot change any
    /// outcome (an execution that never loads it is the same whatever it holds), so a final
    /// round enumerated in full covers every image of the model. Returns true on a violation.
    fn check(
        &self,
        cs: &CrashState,
        base: Arc<Vec<u64>>,
        counters: &Counters,
        expanded: &Mutex<BTreeSet<String>>,
    ) -> (bool, Vec<u64>) {
        let seed = self.job.seed ^ (self.k as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let space = ImageSpace::with_base(cs, self.job.model, seed, base);
        let mut lazy = Lazy {
            slot_of: space.slot_of_word(),
            relevant: BTreeSet::new(),
            depth2_left: DEPTH2_PER_POINT,
            reads: Vec::new(),
        };
        let mut violated = false;
        // Every round but the last varies at least one more slot: at most slots + 1 rounds.
        for _ in 0..=space.slots.len() {
            let keep: Vec<usize> = lazy.relevant.iter().copied().collect();
            let sub = space.restrict(&keep);
            let (choices, exhaustive) =
                sub.choices_upto(self.target.eager_images_max(), SAMPLES, seed);
            debug_assert!(!choices.is_empty(), "every space has an image");
            let mut grew = false;
            for c in &choices {
                let checked = self.check_choice(&sub, c, &mut lazy, counters, expanded);
                grew |= checked.grew;
                violated |= checked.violated;
                if violated && self.job.first_only {
                    counters.crash_point(sub.size(), choices.len() as u128, exhaustive);
                    return (true, lazy.reads);
                }
            }
            if !grew {
                counters.crash_point(sub.size(), choices.len() as u128, exhaustive);
                return (violated, lazy.reads);
            }
        }
        unreachable!(
            "crash point {}: a round varied no new slot of {} and went on",
            self.k,
            space.slots.len()
        )
    }

    /// Check image `c` of `sub`: name its state, recover and judge it, note the pending words
    /// it read, and crash inside its recovery if that is the point's (or the state's) first
    /// recovery that did work.
    fn check_choice(
        &self,
        sub: &ImageSpace,
        c: &[u16],
        lazy: &mut Lazy,
        counters: &Counters,
        expanded: &Mutex<BTreeSet<String>>,
    ) -> Checked {
        let (job, rec, k, target) = (self.job, self.rec, self.k, self.target);
        let img = sub.image(c);
        let st = target.state_of(rec, job.config, k, &img);
        if let Some(st) = &st {
            counters.state(target.labels(job.config).protocol, st);
        }
        img.track_reads();
        let img = Arc::new(img);
        counters.image();
        let verdict = check_image(target, img.clone(), &rec.expect, k, job.config, job.bug);
        let grew = lazy.note_reads(&img.words_read());
        if target.skip_unread_points() {
            let bits = img.read_bitmap();
            lazy.reads.resize(bits.len().max(lazy.reads.len()), 0);
            for (a, b) in lazy.reads.iter_mut().zip(bits) {
                *a |= b;
            }
        }
        let violated = match verdict {
            // Crash inside recovery once per protocol state of the job (recovery behaves
            // alike within a state), or per step where no state is named.
            Ok(did_work) if did_work && job.depth2 && lazy.depth2_left > 0 => {
                let key = st.unwrap_or_else(|| target.step_at(rec, k));
                if crate::lock(expanded).insert(key) {
                    lazy.depth2_left -= 1;
                    self.depth2(sub, c, counters)
                        .map_err(|v| counters.violation(*v))
                        .is_err()
                } else {
                    false
                }
            }
            Ok(_) => false,
            Err(f) => {
                let what = violation(target, job, k, 1, f.lba, f.what, sub.describe(c));
                counters.violation(what);
                true
            }
        };
        Checked { violated, grew }
    }

    /// Crash inside the recovery of one image: at every recovery event, with at most one line
    /// in flight, then recover again and judge.
    fn depth2(
        &self,
        space: &ImageSpace,
        c: &[u16],
        counters: &Counters,
    ) -> std::result::Result<(), Box<Violation>> {
        let (job, rec, k, target) = (self.job, self.rec, self.k, self.target);
        debug_assert!(
            job.depth2,
            "only a job that crashes inside recovery expands"
        );
        let img = Arc::new(space.image(c));
        let base = img.snapshot();
        img.start_recording();
        drop(target.recover(img.clone(), job.config, job.bug));
        let events: Vec<SimEvent> = img.take_events();
        let mut cs = CrashState::new(base);
        let mut line_in_flight = None;
        for (j, e) in events.iter().enumerate() {
            cs.apply(e);
            debug_assert_eq!(
                cs.applied,
                j + 1,
                "recovery's crash point j follows its event j"
            );
            if j + 1 == events.len() {
                break; // the final state is a completed recovery, checked at depth 1
            }
            // At most one line in flight: the line recovery stored to last may have reached
            // media in any part; everything else pending has not.
            if let SimEvent::Store { word, .. } = e {
                line_in_flight = Some(word / 8);
            }
            let Some(line) = line_in_flight else { continue };
            let sp = ImageSpace::new(&cs, job.model, job.seed ^ j as u64);
            let sub = sp.restrict(&line_slots(&sp, line));
            let (choices, _) = sub.choices(DEPTH2_SAMPLES, job.seed ^ line);
            for c2 in &choices {
                counters.image();
                counters.depth2_image();
                let img2 = Arc::new(sub.image(c2));
                if let Err(f) = check_image(target, img2, &rec.expect, k, job.config, job.bug) {
                    return Err(Box::new(violation(
                        target,
                        job,
                        k,
                        2,
                        f.lba,
                        format!("{} (crash at recovery event {j})", f.what),
                        format!(
                            "{}; then in recovery: {}",
                            space.describe(c),
                            sub.describe(c2)
                        ),
                    )));
                }
            }
        }
        Ok(())
    }
}

/// The slots of `space` whose every option changes words of `line` only.
fn line_slots(space: &ImageSpace, line: u64) -> Vec<usize> {
    space
        .slots
        .iter()
        .enumerate()
        .filter(|(_, s)| s.options.iter().flatten().all(|(w, _)| w / 8 == line))
        .map(|(i, _)| i)
        .collect()
}

fn violation<T: CrashTarget>(
    target: &T,
    job: &Job<T>,
    k: usize,
    depth: u8,
    lba: Option<u64>,
    what: String,
    image: String,
) -> Violation {
    let l = target.labels(job.config);
    Violation {
        fault: job.model,
        protocol: l.protocol,
        ordering: l.ordering,
        scenario: job.name,
        seed: job.seed,
        step: k,
        depth,
        lba,
        what,
        image,
    }
}

/// The jobs of one configuration under one model: every scenario of the target, in order.
pub fn jobs<T: CrashTarget>(
    target: &T,
    config: T::Config,
    model: FaultModel,
    bug: Option<T::Bug>,
    seed: u64,
    first_only: bool,
) -> Vec<Job<T>> {
    target
        .scenarios()
        .iter()
        .enumerate()
        .map(|(scenario, &name)| Job {
            scenario,
            name,
            config,
            model,
            bug,
            seed,
            depth2: true,
            first_only,
        })
        .collect()
}
