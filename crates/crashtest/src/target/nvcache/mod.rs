//! nvcache's UBJ cache as a crash target. `Ubj` runs unchanged on one simulated region: its
//! NVRAM is the region's head ([`SimNvram`]) and its backing device the tail ([`SimDisk`]), a
//! simulated disk whose 512-byte sectors reach the platter in any subset until a disk flush
//! (nvstack_pmem::crash). So one crash point is one instant of both, and the checker's images
//! vary NVRAM words and backing sectors together. The oracle is the epoch promise
//! (`oracle::Epochs`): the device reads as after some commit between the last acknowledged and
//! the last begun. Scenarios and the randomized workload: scenario.rs.

pub mod scenario;

use super::{BugSpec, CrashTarget, Labels, OracleRules, Recorded, Shape};
use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::{Error, Result};
use nvstack_nvcache::common::format::COMMIT_OFF;
use nvstack_nvcache::ubj::format::{Layout, Settings, BLOCK_BYTES};
use nvstack_nvcache::{Bug, Ubj};
use nvstack_pmem::crash::{FaultModel, SimRegion};
use nvstack_pmem::Region;
use rand::rngs::SmallRng;
use rand::Rng;
use std::collections::BTreeSet;
use std::sync::Arc;

const B: u64 = BLOCK_BYTES as u64;

pub use nvstack_pmem::simdisk::{parts, SimDisk, SimNvram};

/// UBJ open on a simulated region.
pub type UbjDevice = Ubj<SimNvram>;

/// The one configuration: UBJ as built (its stores are all non-temporal, so M0, M1 and M2
/// allow the same NVRAM images).
#[derive(Clone, Copy, Debug)]
pub struct UbjConfig;

/// Where a formatted region keeps its parts.
pub struct UbjLayout {
    pub layout: Layout,
    /// Bytes of NVRAM: the disk starts here.
    pub nvram_bytes: u64,
}

/// What a recorded scenario keeps: (event index, operation) at the start of each operation.
pub struct UbjTrace {
    pub marks: Vec<(usize, &'static str)>,
}

/// The randomized tier's shape: 256 blocks in front of 64 slots, so that evictions, forced
/// commits and checkpoints come often.
pub const RANDOM_SHAPE: Shape = Shape {
    blocks: 256,
    block_bytes: BLOCK_BYTES,
    lanes: 1,
};
pub const RANDOM_SLOTS: u32 = 64;

/// Format a simulated region: `slots` slots of NVRAM, then `blocks` blocks of disk and its
/// label block. Returns it with its layout.
pub fn format_sim(
    slots: u32,
    blocks: u64,
    settings: Settings,
) -> Result<(Arc<SimRegion>, UbjLayout)> {
    let layout = Layout::new(slots);
    let nvram_bytes = layout.region_bytes;
    let region = Arc::new(SimRegion::zeroed(nvram_bytes + (blocks + 1) * B));
    let (nvram, disk) = parts(&region, nvram_bytes);
    nvstack_nvcache::create(&nvram, &disk, settings)?;
    debug_assert_eq!(disk.blocks(), blocks + 1);
    Ok((
        region,
        UbjLayout {
            layout,
            nvram_bytes,
        },
    ))
}

/// The NVRAM length of a formatted region, from its superblock.
fn nvram_bytes_of(region: &SimRegion) -> Result<u64> {
    let mut sb = [0u8; nvstack_nvcache::ubj::format::SB_BYTES];
    region.read(0, &mut sb);
    let sb = nvstack_nvcache::Superblock::decode(&sb)?;
    Ok(Layout::new(sb.slots).region_bytes)
}

/// Open UBJ on a formatted simulated region (recovery runs).
pub fn open_sim(
    region: Arc<SimRegion>,
    settings: Option<Settings>,
    bug: Option<Bug>,
) -> Result<UbjDevice> {
    let (nvram, disk) = parts(&region, nvram_bytes_of(&region)?);
    Ubj::open_seeded(Arc::new(nvram), Arc::new(disk), settings, bug)
}

/// UBJ, checked on simulated regions.
pub struct UbjTarget {
    bugs: Vec<BugSpec<Bug>>,
}

impl Default for UbjTarget {
    fn default() -> Self {
        UbjTarget::new()
    }
}

impl UbjTarget {
    /// The target, with nvcache's seeded-bug catalogue. Every bug's weakest model is M0: UBJ
    /// stores only non-temporal words (each old or new, unordered, under M0 too) and the
    /// backing model is the same under every model.
    pub fn new() -> UbjTarget {
        let bugs = Bug::ALL
            .iter()
            .map(|&bug| BugSpec {
                bug,
                name: bug.name(),
                what: bug.what(),
                protocol: LABELS.protocol,
                ordering: LABELS.ordering,
                weakest: FaultModel::M0,
                needs_depth2: false,
            })
            .collect();
        UbjTarget { bugs }
    }
}

const LABELS: Labels = Labels {
    protocol: "ubj",
    ordering: "nt",
};

impl CrashTarget for UbjTarget {
    type Config = UbjConfig;
    type Bug = Bug;
    type Device = UbjDevice;
    type Layout = UbjLayout;
    type Trace = UbjTrace;

    fn labels(&self, _: UbjConfig) -> Labels {
        LABELS
    }

    /// Unused for UBJ: the epoch oracle judges it (each scenario sets `Expect::epochs`).
    fn rules(&self) -> OracleRules {
        OracleRules {
            atomic_unit_blocks: u64::from(nvstack_nvcache::ubj::WRITE_BLOCKS_MAX),
            atomic_discard: true,
        }
    }

    fn format(&self, _: UbjConfig, shape: Shape) -> Result<(SimRegion, UbjLayout)> {
        assert_eq!(shape.block_bytes, BLOCK_BYTES, "UBJ has 4 KiB blocks");
        let (region, layout) = format_sim(RANDOM_SLOTS, shape.blocks, scenario::random_settings())?;
        let region = Arc::try_unwrap(region).map_err(|_| Error::env("sim region still shared"))?;
        Ok((region, layout))
    }

    fn open(&self, region: Arc<SimRegion>, _: UbjConfig, bug: Option<Bug>) -> Result<UbjDevice> {
        open_sim(region, Some(scenario::random_settings()), bug)
    }

    fn recover(&self, region: Arc<SimRegion>, _: UbjConfig, bug: Option<Bug>) -> Result<UbjDevice> {
        open_sim(region, None, bug.filter(|&b| self.bug_in_recovery(b)))
    }

    fn recovery_did_work(&self, device: &UbjDevice) -> bool {
        device.dropped_at_open() > 0
    }

    /// One write of contiguous blocks (UBJ's unit lands whole in one epoch).
    fn write_atomic(&self, device: &UbjDevice, lbas: &[u64], data: &[u8]) -> Result<()> {
        super::write_contiguous(lbas, data, "UBJ", |l, d| device.write_blocks(l, d))
    }

    fn scenarios(&self) -> &'static [&'static str] {
        &scenario::NAMES
    }

    fn random_shape(&self) -> Shape {
        RANDOM_SHAPE
    }

    fn record(&self, index: usize, _: UbjConfig, bug: Option<Bug>) -> Result<Recorded<UbjTrace>> {
        scenario::record(index, bug)
    }

    /// UBJ names no states beyond its operations (`step_at`).
    fn state_of(
        &self,
        _: &Recorded<UbjTrace>,
        _: UbjConfig,
        _: usize,
        _: &SimRegion,
    ) -> Option<String> {
        None
    }

    fn step_at(&self, rec: &Recorded<UbjTrace>, crash: usize) -> String {
        super::step_of_marks(&rec.trace.marks, crash)
    }

    fn inject_media_fault(
        &self,
        image: &SimRegion,
        layout: &UbjLayout,
        touched: &[u64],
        pending: &BTreeSet<u64>,
        rng: &mut SmallRng,
    ) -> String {
        let l = &layout.layout;
        let table = Table {
            slots: l.slots,
            entry_off: &|s| l.entry_off(s),
            words: 2,
        };
        media_fault(image, &table, touched, pending, rng)
    }

    fn bugs(&self) -> &[BugSpec<Bug>] {
        &self.bugs
    }

    fn bug_in_recovery(&self, bug: Bug) -> bool {
        matches!(bug, Bug::RecoveryKeepsUncommitted | Bug::RecoveryOldestCopy)
    }

    fn random_workload(
        &self,
        device: &UbjDevice,
        region: &SimRegion,
        w: super::Workload<'_>,
    ) -> Option<std::result::Result<crate::oracle::Expect, super::RunningViolation>> {
        Some(scenario::random_workload(device, region, w))
    }

    fn skip_unread_points(&self) -> bool {
        true
    }

    /// Every subset of up to 12 pending words or sectors (4,096 images); beyond, a sample.
    /// UBJ's pending words are independent of one another (non-temporal entry and commit
    /// words, whole backing sectors), so the single deviations from both extremes that every
    /// sample holds already vary each one alone.
    fn eager_images_max(&self) -> u128 {
        1 << 12
    }
}

/// A slot table as a media fault sees it: word 0 of an entry holds its block (48 bits), word
/// 1 is zero in a slot holding no copy.
pub(crate) struct Table<'a> {
    pub slots: u32,
    pub entry_off: &'a dyn Fn(u32) -> u64,
    /// Words of one entry (each one a target).
    pub words: u64,
}

/// Flip one bit of a durable metadata word: an entry word of a slot holding a touched block,
/// or a commit word. UBJ must refuse the image (entries and commit words check themselves), or
/// read as if nothing happened (the other commit word covers a damaged one). The write cache
/// (target/wcache) shares it with its own table (its commit words are UBJ's).
pub(crate) fn media_fault(
    img: &SimRegion,
    layout: &Table<'_>,
    touched: &[u64],
    pending: &BTreeSet<u64>,
    rng: &mut SmallRng,
) -> String {
    let in_use: Vec<u32> = (0..layout.slots)
        .filter(|&s| {
            let w1 = img.peek((layout.entry_off)(s) / 8 + 1);
            let lba =
                img.peek((layout.entry_off)(s) / 8) & nvstack_nvcache::common::format::LBA_MAX;
            w1 != 0 && touched.contains(&lba)
        })
        .collect();
    for _ in 0..64 {
        let (word, what) = if !in_use.is_empty() && rng.gen_range(0..4) > 0 {
            let s = in_use[rng.gen_range(0..in_use.len())];
            let half = rng.gen_range(0..layout.words);
            (
                (layout.entry_off)(s) / 8 + half,
                format!("bit flip in word {half} of slot {s}'s entry"),
            )
        } else {
            let c = rng.gen_range(0..2);
            (
                COMMIT_OFF[c] / 8,
                format!("bit flip in commit word {}", c + 1),
            )
        };
        if pending.contains(&word) {
            continue;
        }
        let bit = 1u64 << rng.gen_range(0..64);
        img.poke(word, img.peek(word) ^ bit);
        return what;
    }
    "none (no durable target)".into()
}
