//! The randomized tier: chains of cycles on an image of 1,024 blocks and 4 lanes. A cycle runs
//! 8 to 16 random operations (single and multi-block writes, discards, verified reads) on a
//! recording region, crashes at a random event with a random image of the fault model, runs
//! recovery, verifies every touched block, recovers again (recovery must be idempotent) and
//! carries the recovered image to the next cycle. One seed reproduces everything.

use super::oracle::{decode_block, BlockError, Expect, Finding};
use super::target::{CrashTarget, Labels, Shape, Workload};
use super::{Counters, Violation};
use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::Error;
use nvstack_pmem::crash::{CrashState, FaultModel, ImageSpace, SimEvent, SimRegion};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Blocks each cycle's operations stay within (a window, so that operations overlap).
pub const WINDOW_BLOCKS: u64 = 64;
/// Cycles per chain (one image carried from cycle to cycle).
pub const CHAIN_CYCLES: u64 = 64;
pub const OPS_MIN: usize = 8;
pub const OPS_MAX: usize = 16;

/// The randomized tier for one configuration of a target under one fault model.
pub struct RandomJob<T: CrashTarget> {
    pub config: T::Config,
    /// The fault model each cycle's crash image is drawn from.
    pub model: FaultModel,
    /// A seeded bug switched on in every open (recovery bugs also in recovery).
    pub bug: Option<T::Bug>,
    /// The run's seed: cycle c's workload and crash derive from it and c alone.
    pub seed: u64,
}

impl<T: CrashTarget> Clone for RandomJob<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: CrashTarget> Copy for RandomJob<T> {}

fn mix(a: u64, b: u64) -> u64 {
    let mut x = a ^ b.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Run the cycles of one chain, `chain` numbering it within the run. `cycles` limits the
/// cycles (replay). Returns the first violation, if any (boxed: it is rare and large).
pub fn run_chain<T: CrashTarget>(
    target: &T,
    job: &RandomJob<T>,
    chain: u64,
    cycles: u64,
    counters: &Counters,
) -> Result<(), Box<Violation>> {
    debug_assert!(
        cycles <= CHAIN_CYCLES,
        "a chain has at most CHAIN_CYCLES cycles"
    );
    let shape = target.random_shape();
    assert!(
        shape.blocks > WINDOW_BLOCKS,
        "the window fits in the region"
    );
    let (region, layout) = target
        .format(job.config, shape)
        .expect("format a fresh sim region");
    let mut carried = Chain {
        target,
        job,
        shape,
        labels: target.labels(job.config),
        layout,
        base: region.snapshot(),
        known: BTreeMap::new(),
        version: 0,
    };
    for c in 0..cycles {
        carried.cycle(chain * CHAIN_CYCLES + c, counters)?;
        counters.cycle();
    }
    Ok(())
}

/// One chain: the region's shape and labels, and what it carries from cycle to cycle.
struct Chain<'a, T: CrashTarget> {
    target: &'a T,
    job: &'a RandomJob<T>,
    shape: Shape,
    labels: Labels,
    layout: T::Layout,
    /// The durable image the next cycle starts from (the last cycle's twice-recovered one).
    base: Arc<Vec<u64>>,
    /// What each block durably holds, as far as the oracle knows (absent: never written).
    known: BTreeMap<u64, Option<u64>>,
    /// The last version written: every write gets a new one.
    version: u64,
}

/// The crash of one cycle: crash point `k`, what may have reached media there, and the image
/// drawn.
struct Crash {
    k: usize,
    state: CrashState,
    space: ImageSpace,
    choice: Vec<u16>,
}

/// Which cycle a violation belongs to, as the report names it.
#[derive(Clone, Copy)]
struct CycleId {
    model: FaultModel,
    labels: Labels,
    seed: u64,
    cycle: u64,
}

impl CycleId {
    fn violation(
        &self,
        what: String,
        lba: Option<u64>,
        image: String,
        step: usize,
    ) -> Box<Violation> {
        Box::new(Violation {
            fault: self.model,
            protocol: self.labels.protocol,
            ordering: self.labels.ordering,
            scenario: "random",
            seed: self.seed,
            step: self.cycle as usize,
            depth: 1,
            lba,
            what: format!("{what} (crash at event {step})"),
            image,
        })
    }

    /// A violation of the workload itself, at event `step`: no crash image is involved.
    fn running(&self, what: String, lba: Option<u64>, step: usize) -> Box<Violation> {
        self.violation(what, lba, String::new(), step)
    }
}

impl<T: CrashTarget> Chain<'_, T> {
    /// One cycle: the workload, the crash, a media fault under M3, recovery and the oracle,
    /// recovery again (idempotence), and the carry. Every random choice comes from the cycle's
    /// seed, drawn in this order.
    fn cycle(&mut self, cycle: u64, counters: &Counters) -> Result<(), Box<Violation>> {
        let seed = mix(self.job.seed, cycle);
        let mut rng = SmallRng::seed_from_u64(seed);
        let id = CycleId {
            model: self.job.model,
            labels: self.labels,
            seed: self.job.seed,
            cycle,
        };
        // 1. The workload, recorded.
        let region = Arc::new(SimRegion::from_base(self.base.clone()));
        region.start_recording();
        let exp = self.workload(&region, &id, &mut rng)?;
        let events = region.take_events();
        // 2. The crash: a random event, a random image of the model.
        let crash = self.crash(&events, seed, &mut rng);
        counters.image();
        if self.job.model == FaultModel::M3 {
            counters.media_fault(self.media_fault(&exp, &crash, &id, &mut rng)?);
        }
        // 3. Recovery and the oracle; then recovery again on the recovered image, which must
        // change nothing a reader sees (recovery is idempotent).
        let img = Arc::new(crash.space.image(&crash.choice));
        let first = recover_and_read(self.target, &img, &exp, self.job, &crash, &id)?;
        let again = Arc::new(SimRegion::from_base(img.snapshot()));
        let second = recover_and_read(self.target, &again, &exp, self.job, &crash, &id)?;
        if first != second {
            return Err(id.violation(
                "recovery is not idempotent: a second recovery reads differently".into(),
                None,
                crash.space.describe(&crash.choice),
                crash.k,
            ));
        }
        // 4. Carry the recovered image (everything durable) and what it reads forward.
        self.known.extend(first);
        let base = again.snapshot();
        debug_assert_eq!(
            base.len(),
            self.base.len(),
            "recovery keeps the region's size"
        );
        self.base = base;
        Ok(())
    }

    /// Open the device on `region` (recording) and run 8 to 16 random operations in a random
    /// window of it. Returns what the oracle expects of them.
    fn workload(
        &mut self,
        region: &Arc<SimRegion>,
        id: &CycleId,
        rng: &mut SmallRng,
    ) -> Result<Expect, Box<Violation>> {
        let dev = self
            .target
            .open(region.clone(), self.job.config, self.job.bug)
            .map_err(|e| id.running(format!("open before the workload failed: {e}"), None, 0))?;
        let n_ops = rng.gen_range(OPS_MIN..=OPS_MAX);
        // Work on a window of blocks so that operations overlap.
        let window = rng.gen_range(0..self.shape.blocks - WINDOW_BLOCKS);
        let w = Workload {
            known: &self.known,
            window,
            window_blocks: WINDOW_BLOCKS,
            ops: n_ops,
            version: &mut self.version,
            rng,
        };
        let exp = self
            .target
            .random_workload(&dev, region, w)
            .map_err(|v| id.running(v.what, v.lba, v.step))?;
        // The device goes before the log is taken: whatever it stores on its way out counts.
        drop(dev);
        Ok(exp)
    }

    /// Crash at a random event of `events` and draw one image of the model there.
    fn crash(&self, events: &[SimEvent], seed: u64, rng: &mut SmallRng) -> Crash {
        let mut k = rng.gen_range(0..=events.len());
        // No crash inside a disk sector's write: move on to the sector's end.
        while k > 0 && !events[k - 1].is_crash_point_after() {
            k += 1;
        }
        let mut cs = CrashState::new(self.base.clone());
        for e in &events[..k] {
            cs.apply(e);
        }
        debug_assert_eq!(cs.applied, k, "crash point k follows event k");
        let space = ImageSpace::new(&cs, self.job.model, seed);
        let choice: Vec<u16> = space
            .slots
            .iter()
            .map(|s| rng.gen_range(0..s.options.len()) as u16)
            .collect();
        Crash {
            k,
            state: cs,
            space,
            choice,
        }
    }

    /// M3: a media fault on top of the crash image, which nvstack must detect or repair and
    /// never return.
    fn media_fault(
        &self,
        exp: &Expect,
        crash: &Crash,
        id: &CycleId,
        rng: &mut SmallRng,
    ) -> Result<MediaOutcome, Box<Violation>> {
        let faulty = crash.space.image(&crash.choice);
        // Words still pending at the crash are not on media yet: never a fault's target.
        let pending: BTreeSet<u64> = crash.state.pending_words().collect();
        let what =
            self.target
                .inject_media_fault(&faulty, &self.layout, &exp.touched(), &pending, rng);
        judge_media_fault(self.target, Arc::new(faulty), exp, crash.k, self.job).map_err(|w| {
            id.violation(
                format!("media fault ({what}) not detected: {w}"),
                None,
                crash.space.describe(&crash.choice),
                crash.k,
            )
        })
    }
}

/// Recover `img` in place (recovery's stores land in it) and judge every touched block.
fn recover_and_read<T: CrashTarget>(
    target: &T,
    img: &Arc<SimRegion>,
    exp: &Expect,
    job: &RandomJob<T>,
    crash: &Crash,
    id: &CycleId,
) -> Result<BTreeMap<u64, Option<u64>>, Box<Violation>> {
    let violation = |what: String, lba: Option<u64>| {
        id.violation(what, lba, crash.space.describe(&crash.choice), crash.k)
    };
    let dev = target
        .recover(img.clone(), job.config, job.bug)
        .map_err(|e| violation(format!("recovery refused the image: {e}"), None))?;
    let mut buf = vec![0u8; dev.block_bytes() as usize];
    let touched = exp.touched();
    let mut got = BTreeMap::new();
    for &l in &touched {
        dev.read(l, &mut buf)
            .map_err(|e| violation(format!("read failed: {e}"), Some(l)))?;
        let v = decode_block(l, &buf).map_err(|w| violation(w.to_string(), Some(l)))?;
        got.insert(l, v);
    }
    debug_assert_eq!(got.len(), touched.len(), "every touched block judged");
    exp.judge(&got, crash.k)
        .map_err(|f| violation(f.what, f.lba))?;
    Ok(got)
}

/// How a media fault came out.
#[derive(Clone, Copy, Debug)]
pub enum MediaOutcome {
    /// Recovery refused the image, naming the damage.
    DetectedAtOpen,
    /// A read of an affected block failed, naming the damage.
    DetectedOnRead,
    /// Every block read back is one the oracle allows (the fault hit nothing in use, or
    /// recovery repaired it).
    NoEffect,
}

/// How a media fault went undetected: recovery or a read failed without naming the damage,
/// or a block read back is one the oracle does not allow. The texts are the report's.
#[derive(Debug, thiserror::Error)]
pub enum Undetected {
    #[error("recovery failed without naming damage: {0}")]
    OpenFailed(Error),
    #[error("read of LBA {lba} failed without naming damage: {error}")]
    ReadFailed { lba: u64, error: Error },
    #[error("LBA {lba} {error}")]
    BadBlock { lba: u64, error: BlockError },
    #[error("LBA {:?} {}", .0.lba, .0.what)]
    NotAllowed(Finding),
}

/// Recover an image carrying a media fault: the damage must be reported, or have no effect
/// on what reads return. Err says how it went undetected.
fn judge_media_fault<T: CrashTarget>(
    target: &T,
    img: Arc<SimRegion>,
    exp: &Expect,
    k: usize,
    job: &RandomJob<T>,
) -> Result<MediaOutcome, Undetected> {
    // No seeded bug here: the fault, not a deliberate mistake, is what is judged.
    let dev = match target.open(img, job.config, None) {
        Ok(d) => d,
        Err(Error::Finding(_)) | Err(Error::BadInput(_)) => {
            return Ok(MediaOutcome::DetectedAtOpen)
        }
        Err(e) => return Err(Undetected::OpenFailed(e)),
    };
    let bs = dev.block_bytes() as usize;
    let mut buf = vec![0u8; bs];
    let mut got = BTreeMap::new();
    let mut detected = false;
    for l in exp.touched() {
        match dev.read(l, &mut buf) {
            Err(Error::Finding(_)) => detected = true,
            Err(error) => return Err(Undetected::ReadFailed { lba: l, error }),
            Ok(()) => {
                let v = decode_block(l, &buf)
                    .map_err(|error| Undetected::BadBlock { lba: l, error })?;
                got.insert(l, v);
            }
        }
    }
    exp.judge(&got, k).map_err(Undetected::NotAllowed)?;
    Ok(if detected {
        MediaOutcome::DetectedOnRead
    } else {
        MediaOutcome::NoEffect
    })
}
