//! The promise under crashes: after a crash at any NVRAM event (store, flush, fence) of the
//! scenarios below, with NVRAM images drawn from fault model M1 (every pending word old or
//! new, in any combination) and the backing device at either extreme (every write since the
//! last flush kept, or all of them lost), recovery opens and the device reads exactly as it
//! stood after some commit k, where k is at least the last commit acknowledged before the
//! crash and at most the one in flight. A crash during that recovery (depth 2) is checked the
//! same way on a sample. The crash checker (`nvstack crashtest`) will carry the exhaustive and
//! randomized tiers; this test is the protocol's own, and it can fail: see
//! `a_seeded_commit_without_its_first_fence_is_caught`.

mod common;

use common::*;
use nvstack_nvcache::ubj::format::Layout;
use nvstack_nvcache::{Bug, Ubj};
use nvstack_pmem::crash::{CrashState, FaultModel, ImageSpace, SimEvent, SimRegion};
use nvstack_pmem::Region;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

const REGION: u64 = 1 << 20;
/// A region of few slots (29), for the scenario that fills the cache.
const SMALL_REGION: u64 = 128 << 10;
const BLOCKS: u64 = 300;
/// Images drawn per crash point (all of them when the space is smaller).
const IMAGES_PER_POINT: usize = 6;
/// Crash points inside data copies: one store in this many.
const DATA_STRIDE: usize = 61;

/// A scenario's run: what it did, and when (in NVRAM events) each commit began and returned.
struct Run {
    model: Model,
    /// (events before the commit began, events when it returned, its epoch).
    commits: Vec<(usize, usize, usize)>,
}

struct Rig {
    region: Arc<SimRegion>,
    disk: Arc<MemDisk>,
    ubj: Ubj<SimRegion>,
    run: Run,
    bug: Option<Bug>,
}

impl Rig {
    fn write(&mut self, lba: u64, tags: std::ops::Range<u64>) {
        let data: Vec<u8> = tags.flat_map(payload).collect();
        self.ubj.write_blocks(lba, &data).unwrap();
        self.run.model.write(lba, &data);
    }
    fn discard(&mut self, lba: u64, count: u64) {
        self.ubj.discard_blocks(lba, count).unwrap();
        self.run.model.discard(lba, count);
    }
    fn commit(&mut self) {
        let began = self.region.event_count();
        self.ubj.commit().unwrap();
        self.run.model.commit();
        let k = self.run.model.epochs.len() - 1;
        self.run.commits.push((began, self.region.event_count(), k));
    }
    fn read(&mut self, lba: u64) {
        let mut b = vec![0u8; B];
        self.ubj.read_blocks(lba, &mut b).unwrap();
    }
}

/// Set up with `setup` (not crashed), then record `scenario` and crash it everywhere; panics
/// naming the first crash the promise does not hold at.
fn check(name: &str, setup: impl FnOnce(&mut Rig), scenario: impl FnOnce(&mut Rig)) -> usize {
    check_seeded(name, REGION, None, setup, scenario).unwrap_or_else(|e| panic!("{e}"))
}

/// `check` with a seeded bug on in the scenario and in every recovery: Err names the first
/// crash the promise does not hold at.
fn check_seeded(
    name: &str,
    region_bytes: u64,
    bug: Option<Bug>,
    setup: impl FnOnce(&mut Rig),
    scenario: impl FnOnce(&mut Rig),
) -> Result<usize, String> {
    let (region, disk, _) = fresh(region_bytes, BLOCKS, settings_off());
    let ubj = Ubj::open_seeded(region.clone(), disk.clone(), None, bug).unwrap();
    let run = Run {
        model: Model::new(),
        commits: Vec::new(),
    };
    let mut rig = Rig {
        region,
        disk,
        ubj,
        run,
        bug,
    };
    setup(&mut rig);
    rig.region.fence();
    // The setup's uncommitted writes are not the scenario's to keep: epochs before it count.
    let base = rig.region.snapshot();
    let disk_start = rig.disk.bytes.lock().unwrap().clone();
    rig.disk.clock_by(&rig.region);
    rig.region.start_recording();
    let from_epoch = rig.run.model.epochs.len() - 1;
    scenario(&mut rig);
    let events = rig.region.take_events();
    let log = rig.disk.log.lock().unwrap().clone();
    let mut cs = CrashState::new(base.clone());
    let mut images = 0;
    let data_word = Layout::new(rig.ubj.superblock().slots).data_off / 8;
    let mut disks: HashMap<(usize, bool), Arc<MemDisk>> = HashMap::new();
    for i in 0..=events.len() {
        if i > 0 {
            cs.apply(&events[i - 1]);
        }
        // Inside a block's data copy (512 stores), every DATA_STRIDE-th store: the copy's
        // words are independent, and the checks at the fences see them all pending.
        let in_data = matches!(events.get(i.wrapping_sub(1)), Some(SimEvent::Store { word, .. }) if *word >= data_word);
        if in_data && i % DATA_STRIDE != 0 {
            continue;
        }
        let (lo, hi) = allowed(&rig.run, from_epoch, i);
        let space = ImageSpace::new(&cs, FaultModel::M1, i as u64);
        let choices = pick(&space, i as u64);
        for flushed_only in [false, true] {
            let upto = backing_upto(&log, i, flushed_only);
            let disk = disks
                .entry((upto, flushed_only))
                .or_insert_with(|| {
                    Arc::new(MemDisk::from_bytes(backing_at(
                        &disk_start,
                        &log,
                        i,
                        flushed_only,
                    )))
                })
                .clone();
            for (c, choice) in choices.iter().enumerate() {
                let image = Arc::new(space.image(choice));
                let what = format!(
                    "{name}: crash at event {i} of {} ({:?}), image {c}, backing {}",
                    events.len(),
                    events.get(i.wrapping_sub(1)),
                    if flushed_only {
                        "flushed only"
                    } else {
                        "all writes"
                    }
                );
                let epochs = Epochs {
                    model: &rig.run.model,
                    lo,
                    hi,
                    bug: rig.bug,
                };
                verify(&image, &disk, &epochs, &what)?;
                if c == 0 && i % 97 == 0 {
                    images += depth_two(&image, &disk, &epochs, &what)?;
                }
                images += 1;
            }
        }
    }
    Ok(images)
}

/// What a crash may show: the model's epochs lo..=hi; `bug` is on in recovery too.
struct Epochs<'a> {
    model: &'a Model,
    lo: usize,
    hi: usize,
    bug: Option<Bug>,
}

/// Every image when there are at most IMAGES_PER_POINT; otherwise nothing durable beyond the
/// base, everything latest, and IMAGES_PER_POINT seeded random ones (each pending word old or
/// new independently).
fn pick(space: &ImageSpace, seed: u64) -> Vec<Vec<u16>> {
    if space.size() <= IMAGES_PER_POINT as u128 {
        return space.choices(0, seed).0;
    }
    let none = vec![0u16; space.slots.len()];
    let latest = space
        .slots
        .iter()
        .map(|s| (s.options.len() - 1) as u16)
        .collect();
    let mut out = vec![none, latest];
    out.extend((0..IMAGES_PER_POINT as u64).map(|k| space.random_choice(seed * 131 + k)));
    out
}

/// The epochs a crash after `i` events may show: from the last acknowledged commit to the one
/// in flight.
fn allowed(run: &Run, from_epoch: usize, i: usize) -> (usize, usize) {
    let acked = run
        .commits
        .iter()
        .filter(|c| c.1 <= i)
        .map(|c| c.2)
        .max()
        .unwrap_or(from_epoch);
    let began = run
        .commits
        .iter()
        .filter(|c| c.0 < i)
        .map(|c| c.2)
        .max()
        .unwrap_or(from_epoch);
    (acked, began.max(acked))
}

/// Recover `image` over `disk` and read every block the model ever wrote: some epoch in
/// lo..=hi must match them all.
fn verify(
    image: &Arc<SimRegion>,
    disk: &Arc<MemDisk>,
    e: &Epochs,
    what: &str,
) -> Result<(), String> {
    let (model, lo, hi) = (e.model, e.lo, e.hi);
    let ubj = Ubj::open_seeded(image.clone(), disk.clone(), None, e.bug)
        .map_err(|err| format!("{what}: recovery refused: {err}"))?;
    let lbas: BTreeSet<u64> = model
        .epochs
        .iter()
        .flat_map(|e| e.keys().copied())
        .collect();
    let mut got = Vec::new();
    for &lba in &lbas {
        let mut b = vec![0u8; B];
        ubj.read_blocks(lba, &mut b).unwrap();
        got.push((lba, b));
    }
    let matches = |k: usize| got.iter().all(|(lba, b)| *b == model.at(k, *lba));
    if (lo..=hi).any(matches) {
        return Ok(());
    }
    Err(format!(
        "{what}: the device matches no epoch in {lo}..={hi}: {}",
        describe(&got, model, lo, hi)
    ))
}

fn describe(got: &[(u64, Vec<u8>)], model: &Model, lo: usize, hi: usize) -> String {
    let mut s = String::new();
    for (lba, b) in got {
        let ks: Vec<usize> = (0..model.epochs.len())
            .filter(|&k| model.at(k, *lba) == *b)
            .collect();
        if !ks.iter().any(|k| (lo..=hi).contains(k)) {
            s += &format!("block {lba} reads as epochs {ks:?}; ");
        }
    }
    s
}

/// Crash recovery itself at each of its events (durable image only) and recover again.
fn depth_two(
    image: &Arc<SimRegion>,
    disk: &Arc<MemDisk>,
    e: &Epochs,
    what: &str,
) -> Result<usize, String> {
    let first = Arc::new(SimRegion::from_base(image.snapshot()));
    first.start_recording();
    let recovered = Ubj::open_seeded(first.clone(), disk.clone(), None, e.bug);
    drop(recovered.map_err(|err| format!("{what}: {err}"))?);
    let events: Vec<SimEvent> = first.take_events();
    let mut cs = CrashState::new(image.snapshot());
    for (j, ev) in events.iter().enumerate() {
        cs.apply(ev);
        let again = Arc::new(SimRegion::from_base(cs.durable_image()));
        verify(
            &again,
            disk,
            e,
            &format!("{what}; recovery crashed at its event {j}"),
        )?;
    }
    Ok(events.len())
}

#[test]
fn write_and_commit_of_one_and_of_64_blocks() {
    let n = check(
        "one block",
        |_| {},
        |r| {
            r.write(7, 1..2);
            r.commit();
        },
    );
    let m = check(
        "64 blocks",
        |_| {},
        |r| {
            r.write(100, 0..64);
            r.commit();
        },
    );
    assert!(
        n >= 100 && m > 10 * n,
        "images checked: one block {n}, 64 blocks {m}"
    );
}

#[test]
fn overwrite_of_a_frozen_block_and_a_commit_over_an_older_frozen_copy() {
    check(
        "overwrite frozen",
        |r| {
            r.write(3, 1..2);
            r.write(4, 2..3);
            r.commit();
        },
        |r| {
            r.write(3, 10..11);
            r.write(4, 20..21);
            r.write(3, 11..12);
            r.commit();
            r.write(3, 12..13);
            r.commit();
        },
    );
}

#[test]
fn a_checkpoint_of_several_blocks_with_out_of_date_copies() {
    check(
        "checkpoint",
        |r| {
            for i in 0..6 {
                r.write(10 + i, i..i + 1);
            }
            r.commit();
            r.write(10, 50..51);
            r.write(12, 52..53);
            r.commit();
            r.write(11, 60..61); // dirty across the checkpoint
        },
        |r| {
            r.ubj.checkpoint().unwrap();
            r.write(13, 70..71);
            r.commit();
        },
    );
}

#[test]
fn eviction_of_a_clean_block_and_a_discard() {
    check(
        "evict and discard",
        |r| {
            let slots = r.ubj.superblock().slots as u64;
            r.write(0, 0..1);
            r.write(1, 1..2);
            r.commit();
            r.ubj.checkpoint().unwrap();
            for lba in 2..slots + 1 {
                r.read(lba); // fills every slot with clean blocks
            }
        },
        |r| {
            r.write(299, 9..10); // evicts a clean block
            r.discard(1, 1);
            r.discard(0, 2);
            r.commit();
            r.ubj.checkpoint().unwrap();
        },
    );
}

#[test]
#[should_panic(expected = "no fence: crash at event")]
fn a_seeded_commit_without_its_first_fence_is_caught() {
    // Not a seeded bug of the library yet: the harness is shown to fail by a scenario whose
    // "commit" is the commit word alone, stored with no fence after the data.
    check(
        "no fence",
        |_| {},
        |r| {
            r.write(7, 1..2);
            let began = r.region.event_count();
            for off in nvstack_nvcache::common::format::COMMIT_OFF {
                r.region
                    .store_u64_nt(off, nvstack_nvcache::common::format::encode_commit(1));
            }
            r.region.fence();
            r.run.model.commit();
            r.run.commits.push((began, r.region.event_count(), 1));
        },
    );
}

/// One scenario that exercises every step a seeded bug can break: commits over older frozen
/// copies, a discard, a checkpoint with out-of-date copies, slot reuse after it, and writes in
/// flight at the end.
fn every_step(r: &mut Rig) {
    r.write(3, 30..31);
    r.write(4, 40..41);
    r.commit();
    r.write(3, 31..32);
    r.discard(4, 1);
    r.write(5, 50..51);
    r.commit();
    r.ubj.checkpoint().unwrap();
    r.write(6, 60..61);
    r.write(3, 32..33);
    r.commit();
    r.write(7, 70..71);
}

fn seed_for_every_step(r: &mut Rig) {
    r.write(3, 1..2);
    r.write(4, 2..3);
    r.commit();
    r.ubj.checkpoint().unwrap(); // so that the discard of block 4 has backing data to punch
}

#[test]
fn the_protocol_without_bugs_passes_the_scenario_every_bug_fails() {
    check("every step", seed_for_every_step, every_step);
}

/// A cache full of dirty blocks: the next write must not drop one (seeded bug evict-dirty).
fn full_of_dirty(r: &mut Rig) {
    let slots = u64::from(r.ubj.superblock().slots);
    for lba in 0..slots + 2 {
        let data = payload(lba + 500);
        if r.ubj.write_blocks(lba, &data).is_ok() {
            r.run.model.write(lba, &data);
        }
    }
    r.commit();
}

#[test]
fn every_seeded_bug_is_caught() {
    let mut missed = Vec::new();
    for bug in Bug::ALL {
        if bug == Bug::LongDiscardUnflushed {
            // A long discard's punches lie outside every epoch, which this test's model does
            // not know: the crash checker's discard-long scenario, whose oracle does, catches
            // it (crates/cli/tests/crashtest_ubj.rs).
            continue;
        }
        let res = if bug == Bug::EvictDirty {
            check_seeded(bug.name(), SMALL_REGION, Some(bug), |_| {}, full_of_dirty)
        } else {
            check_seeded(
                bug.name(),
                REGION,
                Some(bug),
                seed_for_every_step,
                every_step,
            )
        };
        match res {
            Err(e) => eprintln!("caught {}: {}", bug.name(), &e[..e.len().min(300)]),
            Ok(images) => missed.push(format!("{} ({images} images)", bug.name())),
        }
    }
    assert!(missed.is_empty(), "seeded bugs not caught: {missed:?}");
    let full = check_seeded("full, no bug", SMALL_REGION, None, |_| {}, full_of_dirty);
    assert!(full.is_ok(), "{full:?}");
}
