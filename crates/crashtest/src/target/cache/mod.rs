//! nvcache's caches as crash targets: one target, [`CacheTarget`], generic over what differs
//! between the kinds ([`SimCache`], one impl per kind: `ubj/`, `write/`).
//!
//! A cache runs unchanged on one simulated region: its NVRAM is the region's head
//! ([`SimNvram`]) and its backing device the tail ([`SimDisk`]), a simulated disk whose
//! 512-byte sectors reach the platter in any subset until a disk flush (nvstack_pmem::crash).
//! So one crash point is one instant of both, and the checker's images vary NVRAM words and
//! backing sectors together.
//!
//! What every kind shares lives here: one configuration; a catalogue of seeded bugs each
//! exposed under M0 (a cache stores only non-temporal words, each old or new and unordered
//! under M0 already, and the backing model is the same under every model); steps named by
//! the operation a crash interrupted (no protocol states); media faults on the slot table and
//! the commit words; the skip of crash points no image reads; and the recording of a scenario
//! ([`Recording`]). What a kind gives: how to format and open its image on the region, its
//! seeded bugs, its scenarios and randomized workload (its `scenario.rs`), and its promise
//! (the oracle its recorder's expectations are judged by).

pub mod ubj;
pub mod write;

use super::{BugSpec, CrashTarget, Labels, Recorded, RunningViolation, Shape, Workload};
use crate::oracle::{block, decode_block, Expect, Promise};
use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::{Error, Result};
use nvstack_nvcache::common::format::{COMMIT_OFF, LBA_MAX};
use nvstack_pmem::crash::{FaultModel, SimRegion};
use rand::rngs::SmallRng;
use rand::Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::marker::PhantomData;
use std::sync::Arc;

pub use nvstack_pmem::simdisk::{parts, SimDisk, SimNvram};

/// What differs between the kinds of cache: implemented by each kind's device as it runs on a
/// simulated region (`Ubj<SimNvram>`, `WriteCache<SimNvram>`). A third kind is crash-checked
/// by one more impl and its scenarios.
pub trait SimCache: BlockDevice + Sized + 'static {
    /// The kind's seeded bug.
    type Bug: Copy + PartialEq + Send + Sync + 'static;
    /// The report's names of the kind's one configuration.
    const LABELS: Labels;
    /// The exhaustive tier's scenarios, by name, in the order they run.
    const SCENARIOS: &'static [&'static str];
    /// The randomized tier's region: small, so that the cache's own triggers come often.
    const RANDOM_SHAPE: Shape;
    /// The seeded bugs, in catalogue order.
    const BUGS: &'static [Self::Bug];

    /// A bug's name (`--seeded-bug NAME`) and its mistake in a sentence.
    fn bug_text(bug: Self::Bug) -> (&'static str, &'static str);
    /// The bug acts in recovery (every recovery the checker runs), not only in the workload.
    fn bug_in_recovery(bug: Self::Bug) -> bool;
    /// What the kind promises after a crash, for a workload that starts with the blocks
    /// reading `initial`: the oracle its recorders' expectations are judged by.
    fn promise(initial: &BTreeMap<u64, Option<u64>>) -> Promise;

    /// Format a fresh region of the randomized tier's shape (`blocks` blocks): returns it
    /// with its slot table.
    fn format_random(blocks: u64) -> Result<(Arc<SimRegion>, SlotTable)>;
    /// Open a formatted region under the settings it holds, recovery included, with `bug`
    /// switched on.
    fn open_sim(region: Arc<SimRegion>, bug: Option<Self::Bug>) -> Result<Self>;
    /// The recovery at open stored something (a redo or a drop): the checker then also
    /// crashes inside that recovery (depth 2).
    fn recovery_did_work(&self) -> bool;

    /// Run scenario `index` of `SCENARIOS` once on a recording region.
    fn record(index: usize, bug: Option<Self::Bug>) -> Result<Recorded<CacheTrace>>;
    /// The randomized tier's workload of one cycle (`CrashTarget::random_workload`).
    fn random_workload(
        &self,
        region: &SimRegion,
        w: Workload<'_>,
    ) -> std::result::Result<Expect, RunningViolation>;
}

/// The one configuration of a cache: the cache as built.
#[derive(Clone, Copy, Debug)]
pub struct CacheConfig;

/// What a recorded scenario keeps: (event index, operation) at the start of each operation.
pub struct CacheTrace {
    pub marks: Vec<(usize, &'static str)>,
}

/// A cache of kind `C`, checked on simulated regions.
pub struct CacheTarget<C: SimCache> {
    bugs: Vec<BugSpec<C::Bug>>,
    /// The kind is a type, never a value held (`fn` keeps the target `Sync` whatever it is).
    kind: PhantomData<fn() -> C>,
}

/// UBJ (seed 001), checked on simulated regions.
pub type UbjTarget = CacheTarget<ubj::UbjDevice>;
/// The write cache (seed 004), checked on simulated regions.
pub type WriteTarget = CacheTarget<write::WriteDevice>;

impl<C: SimCache> Default for CacheTarget<C> {
    fn default() -> Self {
        CacheTarget::new()
    }
}

impl<C: SimCache> CacheTarget<C> {
    /// The target, with the kind's seeded-bug catalogue, every bug's weakest model M0.
    pub fn new() -> CacheTarget<C> {
        let bugs = C::BUGS
            .iter()
            .map(|&bug| {
                let (name, what) = C::bug_text(bug);
                BugSpec {
                    bug,
                    name,
                    what,
                    protocol: C::LABELS.protocol,
                    ordering: C::LABELS.ordering,
                    weakest: FaultModel::M0,
                    needs_depth2: false,
                }
            })
            .collect();
        CacheTarget {
            bugs,
            kind: PhantomData,
        }
    }
}

impl<C: SimCache> CrashTarget for CacheTarget<C> {
    type Config = CacheConfig;
    type Bug = C::Bug;
    type Device = C;
    type Layout = SlotTable;
    type Trace = CacheTrace;

    fn labels(&self, _: CacheConfig) -> Labels {
        C::LABELS
    }

    fn format(&self, _: CacheConfig, shape: Shape) -> Result<(SimRegion, SlotTable)> {
        assert_eq!(
            shape.block_bytes,
            C::RANDOM_SHAPE.block_bytes,
            "{}: a cache's block size is its own",
            C::LABELS.protocol
        );
        let (region, table) = C::format_random(shape.blocks)?;
        let region = Arc::try_unwrap(region).map_err(|_| Error::env("sim region still shared"))?;
        Ok((region, table))
    }

    fn open(&self, region: Arc<SimRegion>, _: CacheConfig, bug: Option<C::Bug>) -> Result<C> {
        C::open_sim(region, bug)
    }

    fn recover(&self, region: Arc<SimRegion>, _: CacheConfig, bug: Option<C::Bug>) -> Result<C> {
        C::open_sim(region, bug.filter(|&b| C::bug_in_recovery(b)))
    }

    fn recovery_did_work(&self, device: &C) -> bool {
        device.recovery_did_work()
    }

    fn scenarios(&self) -> &'static [&'static str] {
        C::SCENARIOS
    }

    fn random_shape(&self) -> Shape {
        C::RANDOM_SHAPE
    }

    fn record(
        &self,
        index: usize,
        _: CacheConfig,
        bug: Option<C::Bug>,
    ) -> Result<Recorded<CacheTrace>> {
        C::record(index, bug)
    }

    /// A cache names no states beyond its operations (`step_at`).
    fn state_of(
        &self,
        _: &Recorded<CacheTrace>,
        _: CacheConfig,
        _: usize,
        _: &SimRegion,
    ) -> Option<String> {
        None
    }

    /// The operation the crash interrupted: the last mark at or before it ("setup" before
    /// the first).
    fn step_at(&self, rec: &Recorded<CacheTrace>, crash: usize) -> String {
        let m = rec.trace.marks.iter().rev().find(|m| m.0 <= crash);
        m.map_or("setup", |m| m.1).to_string()
    }

    fn inject_media_fault(
        &self,
        image: &SimRegion,
        table: &SlotTable,
        touched: &[u64],
        pending: &BTreeSet<u64>,
        rng: &mut SmallRng,
    ) -> String {
        table.media_fault(image, touched, pending, rng)
    }

    fn bugs(&self) -> &[BugSpec<C::Bug>] {
        &self.bugs
    }

    fn bug_in_recovery(&self, bug: C::Bug) -> bool {
        C::bug_in_recovery(bug)
    }

    fn random_workload(
        &self,
        device: &C,
        region: &SimRegion,
        w: Workload<'_>,
    ) -> std::result::Result<Expect, RunningViolation> {
        device.random_workload(region, w)
    }

    fn skip_unread_points(&self) -> bool {
        true
    }

    /// Every subset of up to 12 pending words or sectors (4,096 images); beyond, a sample.
    /// A cache's pending words are independent of one another (non-temporal entry and commit
    /// words, whole backing sectors), so the single deviations from both extremes that every
    /// sample holds already vary each one alone.
    fn eager_images_max(&self) -> u128 {
        1 << 12
    }
}

/// A cache's slot table as a media fault sees it: word 0 of an entry holds its block (48
/// bits), word 1 is zero in a slot holding no copy; every entry word checks itself. Both
/// kinds keep their commit words at `COMMIT_OFF`.
pub struct SlotTable {
    /// The byte offset of each slot's entry in the region.
    pub entry_off: Vec<u64>,
    /// Words of one entry (each one a target).
    pub words: u64,
}

impl SlotTable {
    /// The table of `slots` slots whose entries lie at `entry_off(slot)`, `words` words each.
    pub fn new(slots: u32, entry_off: impl Fn(u32) -> u64, words: u64) -> SlotTable {
        debug_assert!(words >= 2, "an entry holds its block and its state");
        SlotTable {
            entry_off: (0..slots).map(entry_off).collect(),
            words,
        }
    }

    /// Flip one bit of a durable metadata word: an entry word of a slot holding a touched
    /// block, or a commit word. The cache must refuse the image (entries and commit words check
    /// themselves), or read as if nothing happened (the other commit word covers a damaged
    /// one). Returns what was done.
    fn media_fault(
        &self,
        img: &SimRegion,
        touched: &[u64],
        pending: &BTreeSet<u64>,
        rng: &mut SmallRng,
    ) -> String {
        let in_use: Vec<usize> = (0..self.entry_off.len())
            .filter(|&s| {
                let w1 = img.peek(self.entry_off[s] / 8 + 1);
                let lba = img.peek(self.entry_off[s] / 8) & LBA_MAX;
                w1 != 0 && touched.contains(&lba)
            })
            .collect();
        for _ in 0..64 {
            let (word, what) = if !in_use.is_empty() && rng.gen_range(0..4) > 0 {
                let s = in_use[rng.gen_range(0..in_use.len())];
                let half = rng.gen_range(0..self.words);
                (
                    self.entry_off[s] / 8 + half,
                    format!("bit flip in word {half} of slot {s}'s entry"),
                )
            } else {
                let c = rng.gen_range(0..2);
                (
                    COMMIT_OFF[c] / 8,
                    format!("bit flip in commit word {}", c + 1),
                )
            };
            // A word still pending at the crash is not on media yet.
            if pending.contains(&word) {
                continue;
            }
            let bit = 1u64 << rng.gen_range(0..64);
            img.poke(word, img.peek(word) ^ bit);
            return what;
        }
        "none (no durable target)".into()
    }
}

/// What both kinds' recorders keep while they run operations on a cache: what every block
/// reads now, the oracle's expectations under the kind's promise, the last version written,
/// and where each operation began. A kind's recorder (its `scenario.rs`) wraps one and adds
/// how its operations become durable.
pub struct Recording<'a, C> {
    pub dev: &'a C,
    pub region: &'a SimRegion,
    /// What every block the recorder knows reads now (absent: zeros).
    pub cur: BTreeMap<u64, Option<u64>>,
    pub exp: Expect,
    pub version: u64,
    pub marks: Vec<(usize, &'static str)>,
}

impl<'a, C: SimCache> Recording<'a, C> {
    /// Start from `initial`, what the device reads now (and durably), versions after
    /// `version`.
    pub fn new(
        dev: &'a C,
        region: &'a SimRegion,
        initial: BTreeMap<u64, Option<u64>>,
        version: u64,
    ) -> Recording<'a, C> {
        Recording {
            dev,
            region,
            cur: initial.clone(),
            exp: Expect::new(initial.clone(), C::promise(&initial)),
            version,
            marks: Vec::new(),
        }
    }

    /// Operation `name` begins: its first event index, marked for `step_at`.
    pub fn begin(&mut self, name: &'static str) -> usize {
        let start = self.region.event_count();
        self.marks.push((start, name));
        start
    }

    /// `n` blocks from `lba`, each at a new version: the bytes to write and what the blocks
    /// read once written.
    pub fn new_version(&mut self, lba: u64, n: u64) -> (Vec<u8>, Vec<(u64, Option<u64>)>) {
        self.version += 1;
        let v = self.version;
        let bs = self.dev.block_bytes() as usize;
        let data: Vec<u8> = (lba..lba + n).flat_map(|l| block(l, v, bs)).collect();
        debug_assert_eq!(data.len(), n as usize * bs, "whole blocks");
        (data, (lba..lba + n).map(|l| (l, Some(v))).collect())
    }

    /// What `n` blocks from `lba` read now.
    pub fn reads_now(&self, lba: u64, n: u64) -> Vec<(u64, Option<u64>)> {
        (lba..lba + n)
            .map(|l| (l, self.cur.get(&l).copied().unwrap_or(None)))
            .collect()
    }

    /// The recording done, the device still open: the expectations and the marks.
    pub fn finish(self) -> (Expect, Vec<(usize, &'static str)>) {
        (self.exp, self.marks)
    }
}

/// Read the blocks `want` names (contiguous, in order) from `dev` and check them against
/// what they should read now: Err(Finding) names the first wrong one.
pub fn read_checked<D: BlockDevice>(dev: &D, want: &[(u64, Option<u64>)]) -> Result<()> {
    let Some(&(first, _)) = want.first() else {
        return Ok(());
    };
    debug_assert!(
        want.windows(2).all(|w| w[1].0 == w[0].0 + 1),
        "a read covers contiguous blocks"
    );
    let bs = dev.block_bytes() as usize;
    let mut buf = vec![0u8; want.len() * bs];
    dev.read(first, &mut buf)?;
    for ((l, w), b) in want.iter().zip(buf.chunks(bs)) {
        let got = decode_block(*l, b).map_err(|e| Error::finding(format!("block {l}: {e}")))?;
        if got != *w {
            return Err(Error::finding(format!(
                "block {l} reads {got:?} while running, not {w:?}"
            )));
        }
    }
    Ok(())
}

/// Start recording a scenario on `region`, freshly formatted: the durable image now (nothing
/// pending), and the cache opened on it with `bug`.
pub fn start_recording<C: SimCache>(
    region: &Arc<SimRegion>,
    bug: Option<C::Bug>,
) -> Result<(Arc<Vec<u64>>, C)> {
    let base = region.snapshot();
    region.start_recording();
    Ok((base, C::open_sim(region.clone(), bug)?))
}

/// The scenario recorded on `region` from `base`: its workload's expectations and marks
/// (`Recording::finish`), from event `start` on. The device closes first: whatever it
/// stores on its way out counts.
pub fn recorded<C: SimCache>(
    (expect, marks): (Expect, Vec<(usize, &'static str)>),
    dev: C,
    region: &SimRegion,
    base: Arc<Vec<u64>>,
    start: usize,
) -> Recorded<CacheTrace> {
    debug_assert!(
        expect.ops.iter().all(|op| op.start >= start),
        "the workload's operations start after its first crash point"
    );
    drop(dev);
    let events = region.take_events();
    debug_assert!(start <= events.len(), "the workload starts inside the log");
    Recorded {
        base,
        events,
        start,
        expect,
        trace: CacheTrace { marks },
    }
}
