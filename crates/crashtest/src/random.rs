//! The randomized tier: chains of cycles on an image of 1,024 blocks and 4 lanes. A cycle runs
//! 8 to 16 random operations (single and multi-block writes, discards, verified reads) on a
//! recording region, crashes at a random event with a random image of the fault model, runs
//! recovery, verifies every touched block, recovers again (recovery must be idempotent) and
//! carries the recovered image to the next cycle. One seed reproduces everything.

use super::oracle::{block, decode_block, BlockError, Expect, Finding, OpRecord};
use super::target::{CrashTarget, OracleRules};
use super::{Counters, Violation};
use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::Error;
use nvstack_pmem::crash::{CrashState, FaultModel, ImageSpace, SimRegion};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
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

/// Run the cycles of one chain, `chain` numbering it within the run. `upto` limits the
/// cycles (replay). Returns the first violation, if any (boxed: it is rare and large).
pub fn run_chain<T: CrashTarget>(
    target: &T,
    job: &RandomJob<T>,
    chain: u64,
    cycles: u64,
    counters: &Counters,
) -> Result<(), Box<Violation>> {
    let shape = target.random_shape();
    assert!(
        shape.blocks > WINDOW_BLOCKS,
        "the window fits in the region"
    );
    let rules = target.rules();
    assert!(
        rules.atomic_unit_blocks >= 1,
        "a write of one block is atomic"
    );
    let labels = target.labels(job.config);
    let (region, layout) = target
        .format(job.config, shape)
        .expect("format a fresh sim region");
    let mut base = region.snapshot();
    // What each block durably holds, as far as the oracle knows (absent: never written).
    let mut known: BTreeMap<u64, Option<u64>> = BTreeMap::new();
    let mut version = 0u64;
    for c in 0..cycles {
        let cycle = chain * CHAIN_CYCLES + c;
        let seed = mix(job.seed, cycle);
        let mut rng = SmallRng::seed_from_u64(seed);
        let viol = |what: String, lba: Option<u64>, image: String, step: usize| {
            Box::new(Violation {
                fault: job.model,
                protocol: labels.protocol,
                ordering: labels.ordering,
                scenario: "random",
                seed: job.seed,
                step: cycle as usize,
                depth: 1,
                lba,
                what: format!("{what} (crash at event {step})"),
                image,
            })
        };
        // 1. The workload, recorded.
        let region = Arc::new(SimRegion::from_base(base.clone()));
        region.start_recording();
        let dev = target
            .open(region.clone(), job.config, job.bug)
            .map_err(|e| {
                viol(
                    format!("open before the workload failed: {e}"),
                    None,
                    String::new(),
                    0,
                )
            })?;
        let mut exp = Expect::default();
        let n_ops = rng.gen_range(OPS_MIN..=OPS_MAX);
        let bs = shape.block_bytes as usize;
        // Work on a window of blocks so that operations overlap.
        let window = rng.gen_range(0..shape.blocks - WINDOW_BLOCKS);
        let mut buf = vec![0u8; bs * 8];
        for _ in 0..n_ops {
            let kind = rng.gen_range(0..100);
            let start = region.event_count();
            if kind < 40 {
                let l = window + rng.gen_range(0..64);
                version += 1;
                exp.initial
                    .entry(l)
                    .or_insert_with(|| known.get(&l).copied().flatten());
                dev.write(l, &block(l, version, bs)).map_err(|e| {
                    viol(format!("write failed: {e}"), Some(l), String::new(), start)
                })?;
                exp.ops.push(OpRecord {
                    blocks: vec![(l, Some(version))],
                    atomic: false,
                    start,
                    ack: region.event_count(),
                });
            } else if kind < 60 {
                let n = rng.gen_range(2..=8);
                let mut lbas: Vec<u64> = Vec::new();
                while lbas.len() < n {
                    let l = window + rng.gen_range(0..64);
                    if !lbas.contains(&l) {
                        lbas.push(l);
                    }
                }
                version += 1;
                let mut data = Vec::with_capacity(n * bs);
                for &l in &lbas {
                    exp.initial
                        .entry(l)
                        .or_insert_with(|| known.get(&l).copied().flatten());
                    data.extend_from_slice(&block(l, version, bs));
                }
                target.write_atomic(&dev, &lbas, &data).map_err(|e| {
                    viol(
                        format!("atomic write failed: {e}"),
                        Some(lbas[0]),
                        String::new(),
                        start,
                    )
                })?;
                exp.ops.push(OpRecord {
                    blocks: lbas.iter().map(|&l| (l, Some(version))).collect(),
                    atomic: atomic(&rules, n as u64, false),
                    start,
                    ack: region.event_count(),
                });
            } else if kind < 70 {
                let l = window + rng.gen_range(0..60);
                let n = rng.gen_range(1..=4u64);
                for x in l..l + n {
                    exp.initial
                        .entry(x)
                        .or_insert_with(|| known.get(&x).copied().flatten());
                }
                dev.discard(l, n).map_err(|e| {
                    viol(
                        format!("discard failed: {e}"),
                        Some(l),
                        String::new(),
                        start,
                    )
                })?;
                exp.ops.push(OpRecord {
                    blocks: (l..l + n).map(|x| (x, None)).collect(),
                    atomic: atomic(&rules, n, true),
                    start,
                    ack: region.event_count(),
                });
            } else {
                // A read while nothing is in flight must return the latest acknowledged value.
                let l = window + rng.gen_range(0..60);
                let n = rng.gen_range(1..=4usize);
                dev.read(l, &mut buf[..n * bs]).map_err(|e| {
                    viol(format!("read failed: {e}"), Some(l), String::new(), start)
                })?;
                for i in 0..n {
                    let x = l + i as u64;
                    let want = exp
                        .ops
                        .iter()
                        .rev()
                        .find_map(|o| o.blocks.iter().find(|b| b.0 == x).map(|b| b.1))
                        .unwrap_or_else(|| known.get(&x).copied().flatten());
                    let got = decode_block(x, &buf[i * bs..(i + 1) * bs]).map_err(|w| {
                        viol(
                            format!("read while running: {w}"),
                            Some(x),
                            String::new(),
                            start,
                        )
                    })?;
                    if got != want {
                        return Err(viol(
                            format!("read while running returned {got:?}, expected {want:?}"),
                            Some(x),
                            String::new(),
                            start,
                        ));
                    }
                }
            }
        }
        drop(dev);
        let events = region.take_events();
        // 2. The crash: a random event, a random image of the model.
        let k = rng.gen_range(0..=events.len());
        let mut cs = CrashState::new(base.clone());
        for e in &events[..k] {
            cs.apply(e);
        }
        let space = ImageSpace::new(&cs, job.model, seed);
        let choice: Vec<u16> = space
            .slots
            .iter()
            .map(|s| rng.gen_range(0..s.options.len()) as u16)
            .collect();
        counters.image();
        if job.model == FaultModel::M3 {
            // A media fault on top of the crash: nvstack must detect it, never return it.
            let faulty = space.image(&choice);
            let pending: std::collections::BTreeSet<u64> = cs.pending_words().collect();
            let what =
                target.inject_media_fault(&faulty, &layout, &exp.touched(), &pending, &mut rng);
            match judge_media_fault(target, Arc::new(faulty), &exp, k, job) {
                Ok(outcome) => counters.media_fault(outcome),
                Err(w) => {
                    return Err(viol(
                        format!("media fault ({what}) not detected: {w}"),
                        None,
                        space.describe(&choice),
                        k,
                    ))
                }
            }
        }
        let img = Arc::new(space.image(&choice));
        // 3. Recovery and the oracle; then recovery again on the recovered image, which must
        // change nothing a reader sees (recovery is idempotent).
        let first = recover_and_read(target, &img, &exp, k, job, &space, &choice, &viol)?;
        let again = Arc::new(SimRegion::from_base(img.snapshot()));
        let second = recover_and_read(target, &again, &exp, k, job, &space, &choice, &viol)?;
        if first != second {
            return Err(viol(
                "recovery is not idempotent: a second recovery reads differently".into(),
                None,
                space.describe(&choice),
                k,
            ));
        }
        for (l, v) in first {
            known.insert(l, v);
        }
        // Carry the recovered image (everything durable) forward.
        base = again.snapshot();
        counters.cycle();
    }
    Ok(())
}

/// Whether an operation on `blocks` blocks is all-or-nothing under the target's rules.
fn atomic(rules: &OracleRules, blocks: u64, discard: bool) -> bool {
    blocks > 1 && blocks <= rules.atomic_unit_blocks && (!discard || rules.atomic_discard)
}

/// Recover `img` in place (recovery's stores land in it) and judge every touched block.
#[allow(clippy::too_many_arguments)]
fn recover_and_read<T: CrashTarget>(
    target: &T,
    img: &Arc<SimRegion>,
    exp: &Expect,
    k: usize,
    job: &RandomJob<T>,
    space: &ImageSpace,
    choice: &[u16],
    viol: &dyn Fn(String, Option<u64>, String, usize) -> Box<Violation>,
) -> Result<BTreeMap<u64, Option<u64>>, Box<Violation>> {
    let dev = target
        .recover(img.clone(), job.config, job.bug)
        .map_err(|e| {
            viol(
                format!("recovery refused the image: {e}"),
                None,
                space.describe(choice),
                k,
            )
        })?;
    let bs = dev.block_bytes() as usize;
    let mut buf = vec![0u8; bs];
    let mut got = BTreeMap::new();
    for l in exp.touched() {
        dev.read(l, &mut buf).map_err(|e| {
            viol(
                format!("read failed: {e}"),
                Some(l),
                space.describe(choice),
                k,
            )
        })?;
        let v = decode_block(l, &buf)
            .map_err(|w| viol(w.to_string(), Some(l), space.describe(choice), k))?;
        got.insert(l, v);
    }
    exp.judge(&got, k)
        .map_err(|f| viol(f.what, f.lba, space.describe(choice), k))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomicity_follows_the_targets_rules() {
        let nvram = OracleRules {
            atomic_unit_blocks: 64,
            atomic_discard: true,
        };
        assert!(!atomic(&nvram, 1, false), "one block: nothing to tear");
        assert!(atomic(&nvram, 8, false));
        assert!(atomic(&nvram, 3, true));
        assert!(!atomic(&nvram, 65, false), "past the unit");
        let plain = OracleRules {
            atomic_unit_blocks: 1,
            atomic_discard: false,
        };
        assert!(!atomic(&plain, 2, false));
        assert!(!atomic(&plain, 2, true));
    }
}
