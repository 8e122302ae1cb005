//! What the checker needs from the layer it checks: [`CrashTarget`]. The tiers, fault models,
//! counters and reports are the checker's; formatting a region, opening it (recovery runs), the
//! workloads, the seeded bugs and the promise a block's reads keep after a crash
//! (`oracle::Promise`, chosen by the layer's recorders) are the layer's.
//!
//! nvramdisk fills it in ([`nvramdisk::NvramTarget`], durable per operation); nvcache's caches
//! share one generic implementation ([`cache::CacheTarget`], one small impl per kind: UBJ,
//! durable at commits, and the write cache, durable per write in program order). A new layer
//! is crash-checked by implementing it too: it names its own scenarios, the states they pass
//! through, the media faults it must detect, its seeded bugs, and records its workloads under
//! its promise. The device crates never depend on the checker: the implementations live here.

pub mod cache;
pub mod nvramdisk;
pub mod workload;

pub use workload::{RunningViolation, Workload};

use crate::oracle::Expect;
use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::Result;
use nvstack_pmem::crash::{FaultModel, SimEvent, SimRegion};
use rand::rngs::SmallRng;
use std::collections::BTreeSet;
use std::sync::Arc;

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

    /// The randomized tier's workload of one cycle on `device` (recording on `region`):
    /// `w.ops` operations in the window, and the oracle's expectations of them under the
    /// layer's promise. A layer durable on return runs [`workload::per_operation`] with its
    /// rules; the caches run their own operations. Err: the running device itself was wrong.
    fn random_workload(
        &self,
        device: &Self::Device,
        region: &SimRegion,
        w: Workload<'_>,
    ) -> std::result::Result<Expect, RunningViolation>;

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
