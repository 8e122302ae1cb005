//! The exhaustive tier: crash every scenario at every store, flush and fence, check every
//! image (or, past EAGER_IMAGES_MAX, the extremes, every single deviation and a sample), and
//! crash again inside recovery (depth 2).

use super::oracle::{Expect, Finding};
use super::scenario::{self, Kind, Probe, Recorded};
use super::{Counters, Violation};
use nvstack_nvramdisk::bugs::{self, SeededBug};
use nvstack_nvramdisk::disk::{read_fast_record, LBA_NULL};
use nvstack_nvramdisk::{NvramDisk, OpenOptions, Phase, Protocol, Step};
use nvstack_pmem::crash::{CrashState, FaultModel, ImageSpace, SimEvent, SimRegion};
use nvstack_pmem::ordering::OrderingPolicy;
use rayon::prelude::*;
use std::collections::BTreeSet;
use std::sync::Arc;

/// Random samples per crash point whose image space exceeds EAGER_IMAGES_MAX.
pub const SAMPLES: usize = 64;
/// Depth-2 expansions per crash point (the first image whose recovery wrote something).
pub const DEPTH2_PER_POINT: usize = 1;
/// Crash points per parallel chunk of the exhaustive tier.
pub const CHUNK_POINTS: usize = 32;
/// Random images per depth-2 crash point whose line's space exceeds EAGER_IMAGES_MAX (below
/// that, every image of the line is checked).
pub const DEPTH2_SAMPLES: usize = 8;

pub struct Job {
    pub kind: Kind,
    pub name: &'static str,
    pub protocol: Protocol,
    pub ordering: OrderingPolicy,
    pub model: FaultModel,
    pub bug: Option<SeededBug>,
    pub seed: u64,
    pub depth2: bool,
    /// Stop at the first violation (seeded-bug hunts).
    pub first_only: bool,
}

/// The recovery a checked image gets: the correct one, unless the seeded bug is in recovery.
fn recovery_bug(bug: Option<SeededBug>) -> Option<SeededBug> {
    bug.filter(|b| b.in_recovery())
}

/// Recover `img` and judge it. Ok(true) when recovery wrote anything.
pub fn check_image(
    img: Arc<SimRegion>,
    exp: &Expect,
    crash: usize,
    ordering: OrderingPolicy,
    bug: Option<SeededBug>,
) -> Result<bool, Finding> {
    let oo = OpenOptions {
        ordering: Some(ordering),
        seeded_bug: recovery_bug(bug),
        ..Default::default()
    };
    let dev = NvramDisk::open(img, oo).map_err(|e| Finding {
        lba: None,
        what: format!("recovery refused the image: {e}"),
    })?;
    exp.verify(&dev, crash)?;
    Ok(!dev.recovery_report().was_clean())
}

/// Name the protocol state an image is in, from the values it holds (paper: Table 2) or the
/// step the crash interrupted (fast: docs/format.md 6.3 and 6.4).
fn state_of(rec: &Recorded, protocol: Protocol, crash: usize, img: &SimRegion) -> Option<String> {
    match protocol {
        Protocol::Paper => {
            let p = rec
                .probes
                .iter()
                .find(|p| p.start < crash && crash <= p.ack)?;
            Some(paper_state(&rec.geometry, p, img))
        }
        Protocol::Fast => {
            let (_, step, phase) = rec.marks.iter().rev().find(|m| m.0 <= crash)?;
            let op = rec
                .expect
                .ops
                .iter()
                .find(|o| o.start < crash && crash <= o.ack)?;
            let record_path = rec
                .marks
                .iter()
                .any(|m| m.0 > op.start && m.0 <= op.ack && m.1 == Step::Record);
            let _ = img;
            Some(
                match (step, phase, record_path) {
                    (Step::Data, Phase::Stored, _) => "F1",
                    (Step::Data, Phase::Persisted, _) => "F2",
                    (Step::Map, Phase::Stored, false) => "F3",
                    (Step::Map, Phase::Persisted, false) => "F4",
                    (Step::Record, Phase::Stored, _) => "R1",
                    (Step::Record, Phase::Persisted, _) => "R2",
                    (Step::Map, Phase::Stored, true) => "R3",
                    (Step::Map, Phase::Persisted, true) => "R4",
                    (Step::RecordClear, Phase::Stored, _) => "R5",
                    (Step::RecordClear, Phase::Persisted, _) => "F0",
                    _ => return None,
                }
                .to_string(),
            )
        }
    }
}

fn paper_state(g: &nvstack_nvramdisk::Geometry, p: &Probe, img: &SimRegion) -> String {
    let s = g.slot_off(p.lane) / 8;
    let (vpn, l1, l2) = (img.peek(s), img.peek(s + 1), img.peek(s + 2));
    let m = img.peek(g.map_entry_off(p.lba) / 8);
    let v = if vpn == p.new_entry {
        'n'
    } else if vpn == p.slot_words_before[0] {
        'p'
    } else {
        'X'
    };
    let l = |x: u64| {
        if x == LBA_NULL {
            '0'
        } else if x == p.lba {
            'l'
        } else {
            'X'
        }
    };
    let mm = if m == p.old_entry {
        'o'
    } else if m == p.new_entry {
        'n'
    } else {
        'X'
    };
    let name = match (v, l(l1), l(l2), mm) {
        ('p', '0', '0', 'o') => "S0",
        ('X', '0', '0', 'o') => "S1",
        ('n', '0', '0', 'o') => "S2",
        ('n', 'X', '0', 'o') => "S3",
        ('n', 'l', '0', 'o') => "S4",
        ('n', 'l', 'X', 'o') => "S5",
        ('n', 'l', 'l', 'o') => "S6",
        ('n', 'l', 'l', 'X') => "S7",
        ('n', 'l', 'l', 'n') => "S8",
        ('n', 'X', 'l', 'n') => "S9",
        ('n', '0', 'l', 'n') => "S10",
        ('n', '0', 'X', 'n') => "S11",
        ('n', '0', '0', 'n') => "S0'",
        _ => return format!("other<{v}{}{}{mm}>", l(l1), l(l2)),
    };
    name.to_string()
}

/// Run one job: every crash point of one scenario under one model. Returns true when the
/// recording holds no cached store and no flush: every store was non-temporal, so M0, M1 and
/// M2 allow exactly the same images (M0's line order and M2's disturbance only concern
/// cached lines), and the job's result stands for all three.
pub fn run(job: &Job, counters: &Counters) -> Result<bool, String> {
    let rec = scenario::record(job.kind, job.protocol, job.ordering, job.bug).map_err(|e| {
        format!(
            "{} ({} {}): the workload itself failed: {e}",
            job.name,
            job.protocol.name(),
            job.ordering.name
        )
    })?;
    // Crash points are checked in contiguous chunks, in parallel: each chunk starts from a
    // checkpoint of the replay and applies the events one by one (no per-point copies).
    let points = rec.events.len() - rec.start + 1;
    // Small chunks: the costly crash points (records, map stores) cluster, so many small
    // chunks balance the threads; one replay clone per chunk stays cheap.
    let chunk_len = CHUNK_POINTS.min(points);
    let mut checkpoints: Vec<(usize, CrashState)> = Vec::with_capacity(points.div_ceil(chunk_len));
    let mut cs = CrashState::new(rec.base.clone());
    for (i, e) in rec.events.iter().enumerate() {
        if i >= rec.start && (i - rec.start) % chunk_len == 0 {
            checkpoints.push((i, cs.clone()));
        }
        cs.apply(e);
    }
    if (rec.events.len() - rec.start) % chunk_len == 0 {
        checkpoints.push((rec.events.len(), cs));
    }
    let found = std::sync::atomic::AtomicBool::new(false);
    let expanded: std::sync::Mutex<BTreeSet<String>> = Default::default();
    checkpoints.par_iter().for_each(|(first, cs0)| {
        let mut cs = cs0.clone();
        let mut durable: Option<(u64, Arc<Vec<u64>>)> = None;
        let last = (*first + chunk_len - 1).min(rec.events.len());
        for k in *first..=last {
            if k > *first {
                cs.apply(&rec.events[k - 1]);
            }
            if job.first_only && found.load(std::sync::atomic::Ordering::Relaxed) {
                return;
            }
            let base = match &durable {
                Some((g, b)) if *g == cs.durable_gen => b.clone(),
                _ => {
                    let b = cs.durable_image();
                    durable = Some((cs.durable_gen, b.clone()));
                    b
                }
            };
            if check_point(job, &rec, k, &cs, base, counters, &expanded) {
                found.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
    });
    let model_invariant = rec
        .events
        .iter()
        .all(|e| matches!(e, SimEvent::Store { nt: true, .. } | SimEvent::Fence));
    Ok(model_invariant)
}

/// Check every image of one crash point that can matter. Lazily: only the pending words that
/// recovery or the oracle actually read are varied. Starting from "nothing pending reached
/// media", the set of varied words grows by every pending word some checked image read,
/// until a round reads nothing new. A word no checked image reads cannot change any outcome
/// (an execution that never loads it is the same whatever it holds), so a final round
/// enumerated in full covers every image of the model. Returns true on a violation.
fn check_point(
    job: &Job,
    rec: &Recorded,
    k: usize,
    cs: &CrashState,
    base: Arc<Vec<u64>>,
    counters: &Counters,
    expanded: &std::sync::Mutex<BTreeSet<String>>,
) -> bool {
    let seed = job.seed ^ (k as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let space = ImageSpace::with_base(cs, job.model, seed, base);
    let slot_of = space.slot_of_word();
    let mut relevant: BTreeSet<usize> = BTreeSet::new();
    let mut depth2_left = DEPTH2_PER_POINT;
    let mut violated = false;
    loop {
        let keep: Vec<usize> = relevant.iter().copied().collect();
        let sub = space.restrict(&keep);
        let (choices, exhaustive) = sub.choices(SAMPLES, seed);
        let mut grew = false;
        for c in &choices {
            let img = sub.image(c);
            let st = state_of(rec, job.protocol, k, &img);
            if let Some(st) = &st {
                counters.state(job.protocol, st);
            }
            img.track_reads();
            let img = Arc::new(img);
            counters.image();
            let verdict = check_image(img.clone(), &rec.expect, k, job.ordering, job.bug);
            // Both lists are sorted by word: merge them.
            let read = img.words_read();
            let (mut a, mut b) = (0, 0);
            while a < read.len() && b < slot_of.len() {
                match read[a].cmp(&slot_of[b].0) {
                    std::cmp::Ordering::Less => a += 1,
                    std::cmp::Ordering::Greater => b += 1,
                    std::cmp::Ordering::Equal => {
                        grew |= relevant.insert(slot_of[b].1);
                        a += 1;
                        b += 1;
                    }
                }
            }
            match verdict {
                Ok(did_work) => {
                    // Crash inside recovery once per protocol state of the job (recovery
                    // behaves alike within a state), or per step where no state is named.
                    let key = st.unwrap_or_else(|| {
                        let m = rec.marks.iter().rev().find(|m| m.0 <= k);
                        format!("{:?}", m.map(|m| (m.1, m.2)))
                    });
                    if did_work
                        && job.depth2
                        && depth2_left > 0
                        && expanded.lock().unwrap().insert(key)
                    {
                        depth2_left -= 1;
                        if let Err(v) = depth2(job, rec, &sub, c, k, counters) {
                            counters.violation(v);
                            violated = true;
                        }
                    }
                }
                Err(f) => {
                    counters.violation(violation(job, k, 1, f.lba, f.what, sub.describe(c)));
                    violated = true;
                }
            }
            if violated && job.first_only {
                counters.crash_point(sub.size(), choices.len() as u128, exhaustive);
                return true;
            }
        }
        if !grew {
            counters.crash_point(sub.size(), choices.len() as u128, exhaustive);
            return violated;
        }
    }
}

/// Crash inside the recovery of one image: at every recovery event, with at most one line in
/// flight, then recover again and judge.
fn depth2(
    job: &Job,
    rec: &Recorded,
    space: &ImageSpace,
    c: &[u16],
    k: usize,
    counters: &Counters,
) -> Result<(), Violation> {
    let img = Arc::new(space.image(c));
    let base = img.snapshot();
    img.start_recording();
    let oo = OpenOptions {
        ordering: Some(job.ordering),
        seeded_bug: recovery_bug(job.bug),
        ..Default::default()
    };
    drop(NvramDisk::open(img.clone(), oo));
    let events: Vec<SimEvent> = img.take_events();
    let mut cs = CrashState::new(base);
    let mut line_in_flight = None;
    for (j, e) in events.iter().enumerate() {
        cs.apply(e);
        if j + 1 == events.len() {
            break; // the final state is a completed recovery, checked at depth 1
        }
        // At most one line in flight: the line recovery stored to last may have reached media
        // in any part; everything else pending has not.
        if let SimEvent::Store { word, .. } = e {
            line_in_flight = Some(word / 8);
        }
        let Some(line) = line_in_flight else { continue };
        let sp = ImageSpace::new(&cs, job.model, job.seed ^ j as u64);
        let idx: Vec<usize> = sp
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.options.iter().flatten().all(|(w, _)| w / 8 == line))
            .map(|(i, _)| i)
            .collect();
        let sub = sp.restrict(&idx);
        let (choices, _) = sub.choices(DEPTH2_SAMPLES, job.seed ^ line);
        for c2 in &choices {
            counters.image();
            counters.depth2_image();
            if let Err(f) = check_image(
                Arc::new(sub.image(c2)),
                &rec.expect,
                k,
                job.ordering,
                job.bug,
            ) {
                return Err(violation(
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
                ));
            }
        }
    }
    Ok(())
}

fn violation(
    job: &Job,
    k: usize,
    depth: u8,
    lba: Option<u64>,
    what: String,
    image: String,
) -> Violation {
    Violation {
        fault: job.model,
        protocol: job.protocol,
        ordering: job.ordering.name,
        scenario: job.name,
        seed: job.seed,
        step: k,
        depth,
        lba,
        what,
        image,
    }
}

/// The jobs of a run.
pub fn jobs(
    protocols: &[Protocol],
    orderings: &[OrderingPolicy],
    models: &[FaultModel],
    bug: Option<SeededBug>,
    seed: u64,
    first_only: bool,
) -> Vec<Job> {
    let mut v = Vec::new();
    for &p in protocols {
        for &o in orderings {
            for &m in models {
                for (kind, name) in scenario::SCENARIOS {
                    v.push(Job {
                        kind,
                        name,
                        protocol: p,
                        ordering: o,
                        model: m,
                        bug,
                        seed,
                        depth2: true,
                        first_only,
                    });
                }
            }
        }
    }
    let _ = bugs::BUGS.len();
    v
}

/// Fast-record helper for reports (whether an image holds a complete record on `lane`).
pub fn record_valid(img: &SimRegion, g: &nvstack_nvramdisk::Geometry, lane: u32) -> bool {
    read_fast_record(img, g.slot_off(lane)).is_some()
}
