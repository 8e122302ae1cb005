//! What the checker needs from the layer it checks: [`CrashTarget`]. The tiers, fault models,
//! counters and reports are the checker's; formatting a region, opening it (recovery runs), the
//! workloads, the seeded bugs and the rules a block obeys after a crash are the layer's.
//!
//! nvramdisk fills it in ([`nvramdisk::NvramTarget`]); a new layer (the coming nvcache UBJ
//! buffer cache) is crash-checked by implementing it too: it names its own scenarios, the
//! states they pass through, the media faults it must detect, its seeded bugs, and its oracle
//! rules. The device crates never depend on the checker: the implementations live here.

pub mod nvcache;
pub mod nvramdisk;
pub mod wcache;

use crate::oracle::Expect;
use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::{Error, Result};
use nvstack_pmem::crash::{FaultModel, SimEvent, SimRegion};
use rand::rngs::SmallRng;
use rand::Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// A cache target's atomic write: blocks must be contiguous (the caches' unit), written by
/// one `write` from the first. `who` names the cache in the refusal.
pub(crate) fn write_contiguous(
    lbas: &[u64],
    data: &[u8],
    who: &str,
    write: impl FnOnce(u64, &[u8]) -> Result<()>,
) -> Result<()> {
    let contiguous = lbas.windows(2).all(|w| w[1] == w[0] + 1);
    if lbas.is_empty() || !contiguous {
        return Err(nvstack_core::error::Error::bad(format!(
            "{who} writes contiguous blocks"
        )));
    }
    write(lbas[0], data)
}

/// A cache target's step at a crash point: the name of the last mark at or before it
/// ("setup" before the first).
pub(crate) fn step_of_marks(marks: &[(usize, &'static str)], crash: usize) -> String {
    let m = marks.iter().rev().find(|m| m.0 <= crash);
    m.map_or("setup", |m| m.1).to_string()
}

/// The size of a simulated region a tier formats: small, so that each crash point is cheap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Blocks the device exports.
    pub blocks: u64,
    /// Bytes per block.
    pub block_bytes: u32,
    /// Concurrent writers the layer provides for (nvramdisk: journal lanes).
    pub lanes: u32,
}

/// What the oracle may expect of a layer's multi-block operations after a crash. The rest of
/// the oracle's rules (`oracle::Expect::judge`) hold for every target: a block reads zeros or a
/// version some operation wrote to it, never torn or another block's; and an operation is
/// durable once it returned (a layer that is durable only after a flush, as the coming UBJ
/// cache, needs the oracle to learn flushes first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OracleRules {
    /// Largest number of blocks one write covers all-or-nothing (64 for nvramdisk; 1 for a
    /// layer without atomic multi-block writes). An operation in flight over 2 to this many
    /// blocks reads all old or all new after a crash, together.
    pub atomic_unit_blocks: u64,
    /// A discard of several blocks (within the atomic unit) is all-or-nothing too.
    pub atomic_discard: bool,
}

/// The report's names of one configuration: the `protocol` and `ordering` columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Labels {
    /// The `protocol` column (nvramdisk: fast or paper).
    pub protocol: &'static str,
    /// The `ordering` column (nvramdisk: the ordering policy's name).
    pub ordering: &'static str,
}

/// One seeded bug of the catalogue: a deliberate mistake the checker must catch.
/// Serialized as `nvstack crashtest --seeded-bug list --json` prints it.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct BugSpec<B> {
    /// The switch the target's `open` takes.
    pub bug: B,
    /// Its name (`--seeded-bug NAME`).
    pub name: &'static str,
    /// The mistake, in a sentence.
    pub what: &'static str,
    /// The configuration under which the mistake can do harm (its labels).
    pub protocol: &'static str,
    pub ordering: &'static str,
    /// The weakest fault model expected to expose it (M0 < M1 < M2).
    pub weakest: FaultModel,
    /// Only a crash inside recovery (depth 2) exposes it.
    pub needs_depth2: bool,
}

/// What a layer's own randomized workload gets (`CrashTarget::random_workload`).
pub struct Workload<'a> {
    /// What each block durably holds at the cycle's start (absent: never written, zeros).
    pub known: &'a BTreeMap<u64, Option<u64>>,
    /// The cycle's window of blocks: `window` to `window + window_blocks - 1`.
    pub window: u64,
    pub window_blocks: u64,
    /// Operations to run.
    pub ops: usize,
    /// The last version written: every write takes a new one.
    pub version: &'a mut u64,
    pub rng: &'a mut SmallRng,
}

/// Blocks read while running (`buf`, blocks of `block_bytes`) against what they should read
/// (`want`, in order): Err(Finding) names the first wrong one (the cache targets' reads).
pub fn check_read_blocks(
    want: &[(u64, Option<u64>)],
    buf: &[u8],
    block_bytes: usize,
) -> Result<()> {
    for ((l, w), b) in want.iter().zip(buf.chunks(block_bytes)) {
        let got = crate::oracle::decode_block(*l, b)
            .map_err(|e| Error::finding(format!("block {l}: {e}")))?;
        if got != *w {
            return Err(Error::finding(format!(
                "block {l} reads {got:?} while running, not {w:?}"
            )));
        }
    }
    Ok(())
}

impl Workload<'_> {
    /// The randomized loop the cache targets share: `ops` operations, each of a kind drawn
    /// from 0..100 and of 1 to 8 blocks when the kind is below `long_below` (the writes), else
    /// 1 to 4, at a random LBA of the window (the draws in that order, so a seed replays the
    /// same run); `op(kind, lba, n)` runs one. An error it returns is a violation at `lba`.
    pub fn run_random_ops(
        &mut self,
        region: &SimRegion,
        long_below: i32,
        mut op: impl FnMut(i32, u64, u64) -> Result<()>,
    ) -> std::result::Result<(), RunningViolation> {
        for _ in 0..self.ops {
            let kind = self.rng.gen_range(0..100);
            let n = if kind < long_below {
                self.rng.gen_range(1..=8)
            } else {
                self.rng.gen_range(1..=4)
            };
            let lba = self.window + self.rng.gen_range(0..=self.window_blocks - n);
            op(kind, lba, n).map_err(|e| RunningViolation {
                what: format!("while running: {e}"),
                lba: Some(lba),
                step: region.event_count(),
            })?;
        }
        Ok(())
    }
}

/// A violation of the running device (no crash involved), at event index `step`.
#[derive(Debug)]
pub struct RunningViolation {
    pub what: String,
    pub lba: Option<u64>,
    pub step: usize,
}

/// A scenario run once on a recording region: what the exhaustive tier crashes.
pub struct Recorded<Tr> {
    /// The durable image when recording began (nothing pending).
    pub base: Arc<Vec<u64>>,
    /// Every store, flush and fence from then on, in order: crash point k follows event k.
    pub events: Vec<SimEvent>,
    /// The first event of the workload proper (crash points run from here to the end).
    pub start: usize,
    /// What each touched block may read at each crash point.
    pub expect: Expect,
    /// What the layer keeps to name the states crash points fall in.
    pub trace: Tr,
}

/// The contract a layer fills in to be crash-checked. The checker calls every method from
/// several threads at once, and calls `recover` in its hot loop (once per image): the tiers
/// are generic over the target, so nothing here goes through a `dyn`.
pub trait CrashTarget: Sync {
    /// One configuration: a row of the report (nvramdisk: protocol and ordering policy).
    type Config: Copy + Send + Sync;
    /// A seeded bug (see [`CrashTarget::bugs`]).
    type Bug: Copy + PartialEq + Send + Sync;
    /// The layer open on a simulated region.
    type Device: BlockDevice;
    /// What `format` learns of the layout (nvramdisk: its geometry), for `inject_media_fault`.
    type Layout: Send + Sync;
    /// What `record` keeps to name states (nvramdisk: protocol step events and probes).
    type Trace: Send + Sync;

    /// The report's names of `config`.
    fn labels(&self, config: Self::Config) -> Labels;
    /// The rules the oracle applies to this layer's blocks.
    fn rules(&self) -> OracleRules;

    /// Format a fresh simulated region of `shape` under `config`.
    fn format(&self, config: Self::Config, shape: Shape) -> Result<(SimRegion, Self::Layout)>;
    /// Open `region` under `config`, recovery included, with `bug` switched on in the
    /// workload and in recovery.
    fn open(
        &self,
        region: Arc<SimRegion>,
        config: Self::Config,
        bug: Option<Self::Bug>,
    ) -> Result<Self::Device>;
    /// Open a crash image: recovery runs, with `bug` only if it is a recovery bug
    /// (`bug_in_recovery`). Err: recovery refused the image.
    fn recover(
        &self,
        region: Arc<SimRegion>,
        config: Self::Config,
        bug: Option<Self::Bug>,
    ) -> Result<Self::Device>;
    /// Recovery of `device` wrote something (a redo or undo): the checker then also crashes
    /// inside that recovery (depth 2).
    fn recovery_did_work(&self, device: &Self::Device) -> bool;
    /// Write `data` to `lbas` as one atomic operation (at most `rules().atomic_unit_blocks`).
    fn write_atomic(&self, device: &Self::Device, lbas: &[u64], data: &[u8]) -> Result<()>;

    /// The exhaustive tier's workloads, by name (`--scenario`), in the order they run.
    fn scenarios(&self) -> &'static [&'static str];
    /// The region shape of the randomized tier.
    fn random_shape(&self) -> Shape;
    /// Run scenario `index` of `scenarios()` once on a recording region, from right after
    /// format, with its setup's results as the oracle's initial values.
    fn record(
        &self,
        index: usize,
        config: Self::Config,
        bug: Option<Self::Bug>,
    ) -> Result<Recorded<Self::Trace>>;
    /// Name the protocol state `image` is in at crash point `crash` (collected in the
    /// report's `states_covered`), if the layer names one there.
    fn state_of(
        &self,
        rec: &Recorded<Self::Trace>,
        config: Self::Config,
        crash: usize,
        image: &SimRegion,
    ) -> Option<String>;
    /// A key for the step the crash interrupted, where `state_of` names none: the checker
    /// crashes inside recovery once per state or step of a scenario.
    fn step_at(&self, rec: &Recorded<Self::Trace>, crash: usize) -> String;
    /// Damage one durable metadata word of `image` (never a word in `pending`, not yet on
    /// media) related to the `touched` blocks, as a media fault; returns what was done.
    fn inject_media_fault(
        &self,
        image: &SimRegion,
        layout: &Self::Layout,
        touched: &[u64],
        pending: &BTreeSet<u64>,
        rng: &mut SmallRng,
    ) -> String;

    /// The seeded bugs' catalogue.
    fn bugs(&self) -> &[BugSpec<Self::Bug>];
    /// The bug is in recovery: it acts in every recovery the checker runs, not only in the
    /// workload.
    fn bug_in_recovery(&self, bug: Self::Bug) -> bool;

    /// The randomized tier's workload of one cycle on `device` (recording on `region`), when
    /// the layer has its own; None (the default): the generic one of random.rs, whose writes
    /// are durable on return.
    fn random_workload(
        &self,
        _device: &Self::Device,
        _region: &SimRegion,
        _w: Workload<'_>,
    ) -> Option<std::result::Result<Expect, RunningViolation>> {
        None
    }

    /// Let the exhaustive tier skip a crash point equivalent to the one before it: the event
    /// between them is a non-temporal store (or a disk sector) that no image checked at the
    /// earlier point read, in a line without cached stores, at no operation's start or end.
    /// No execution loads that word, so both points allow the same executions. Off by default.
    fn skip_unread_points(&self) -> bool {
        false
    }

    /// The exhaustive tier enumerates every image of a crash point's space up to this many,
    /// and samples beyond (the extremes, every single deviation from each, and
    /// `exhaustive::SAMPLES` random images), reporting the covered fraction.
    fn eager_images_max(&self) -> u128 {
        nvstack_pmem::crash::EAGER_IMAGES_MAX
    }
}
