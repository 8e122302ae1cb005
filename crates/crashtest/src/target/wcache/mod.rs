//! nvcache's write cache (seed 004, NVFAT) as a crash target. Like UBJ (target/nvcache), it
//! runs unchanged on one simulated region: its NVRAM is the region's head and its backing
//! device a simulated disk in the tail, whose 512-byte sectors reach the platter in any subset
//! until a disk flush. The cache's sectors are 512 bytes over 4 KiB backing blocks, so every
//! destage and bypassed write is a read-modify-write of a backing block.
//!
//! The oracle is the ordered one (ordered.rs): an admitted write is acknowledged durable when
//! it returns, a bypassed one when the next flush returns; a block never reads older than its
//! last acknowledged write, and an admitted write of several blocks is all or nothing.

pub mod scenario;

use super::nvcache::{parts, SimNvram};
use super::{BugSpec, CrashTarget, Labels, OracleRules, Recorded, Shape};
use nvstack_core::error::{Error, Result};
use nvstack_nvcache::write::format::{Admit, WcLayout, WcSettings, WcSuperblock};
use nvstack_nvcache::{WcBug, WriteCache};
use nvstack_pmem::crash::{FaultModel, SimRegion};
use nvstack_pmem::Region;
use rand::rngs::SmallRng;
use std::collections::BTreeSet;
use std::sync::Arc;

/// The cache's sector (the seed's).
pub const SECTOR: u32 = 512;
const BACKING_BLOCK: u64 = 4096;

/// The write cache open on a simulated region.
pub type WcDevice = WriteCache<SimNvram>;

/// The one configuration: the write cache as built.
#[derive(Clone, Copy, Debug)]
pub struct WcConfig;

/// Where a formatted region keeps its parts.
pub struct WcSimLayout {
    pub layout: WcLayout,
}

/// What a recorded scenario keeps: (event index, operation) at the start of each operation.
pub struct WcTrace {
    pub marks: Vec<(usize, &'static str)>,
}

/// The randomized tier's shape: 256 sectors behind 32 slots, so that destages are frequent.
pub const RANDOM_SHAPE: Shape = Shape {
    blocks: 256,
    block_bytes: SECTOR,
    lanes: 1,
};
pub const RANDOM_SLOTS: u32 = 32;

/// The randomized tier's settings and admission: dm-writecache's watermarks (destaging with
/// neighbours, two blocks between backing flushes) and the first 192 sectors admitted, the
/// rest bypassing the cache.
pub fn random_setup() -> (WcSettings, Admit) {
    let s = WcSettings {
        high_watermark_pct: 50,
        low_watermark_pct: 25,
        writeback_jobs: 2,
        ..WcSettings::default()
    };
    (s, Admit::one_range(0..192))
}

/// Format a simulated region: `slots` slots of NVRAM, then `sectors` sectors of disk (whole
/// 4 KiB backing blocks) and its label block.
pub fn format_sim(
    slots: u32,
    sectors: u64,
    settings: WcSettings,
    admit: &Admit,
) -> Result<(Arc<SimRegion>, WcSimLayout)> {
    let layout = WcLayout::new(slots, SECTOR);
    let nvram_bytes = layout.region_bytes.div_ceil(BACKING_BLOCK) * BACKING_BLOCK;
    let backing_blocks = sectors * u64::from(SECTOR) / BACKING_BLOCK;
    let region = Arc::new(SimRegion::zeroed(
        nvram_bytes + (backing_blocks + 1) * BACKING_BLOCK,
    ));
    let (nvram, disk) = parts(&region, nvram_bytes);
    let sb = nvstack_nvcache::create_wc(&nvram, &disk, SECTOR, settings, admit)?;
    debug_assert_eq!(sb.slots, slots);
    Ok((region, WcSimLayout { layout }))
}

/// Open the write cache on a formatted simulated region (recovery runs).
pub fn open_sim(
    region: Arc<SimRegion>,
    settings: Option<WcSettings>,
    bug: Option<WcBug>,
) -> Result<WcDevice> {
    let mut b = [0u8; nvstack_nvcache::write::format::WC_SB_BYTES];
    region.read(0, &mut b);
    let sb = WcSuperblock::decode(&b)?;
    let nvram_bytes = sb.layout().region_bytes.div_ceil(BACKING_BLOCK) * BACKING_BLOCK;
    let (nvram, disk) = parts(&region, nvram_bytes);
    WriteCache::open_seeded(Arc::new(nvram), Arc::new(disk), settings, bug)
}

/// The write cache, checked on simulated regions.
pub struct WcTarget {
    bugs: Vec<BugSpec<WcBug>>,
}

impl Default for WcTarget {
    fn default() -> Self {
        WcTarget::new()
    }
}

const LABELS: Labels = Labels {
    protocol: "write",
    ordering: "nt",
};

impl WcTarget {
    /// The target, with the write cache's seeded bugs. Every bug's weakest model is M0: the
    /// cache stores only non-temporal words and the backing model is the same under all.
    pub fn new() -> WcTarget {
        let bugs = WcBug::ALL
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
        WcTarget { bugs }
    }
}

impl CrashTarget for WcTarget {
    type Config = WcConfig;
    type Bug = WcBug;
    type Device = WcDevice;
    type Layout = WcSimLayout;
    type Trace = WcTrace;

    fn labels(&self, _: WcConfig) -> Labels {
        LABELS
    }

    /// Unused: the ordered oracle judges it (each scenario sets `Expect::ordered`).
    fn rules(&self) -> OracleRules {
        OracleRules {
            atomic_unit_blocks: 64,
            atomic_discard: true,
        }
    }

    fn format(&self, _: WcConfig, shape: Shape) -> Result<(SimRegion, WcSimLayout)> {
        assert_eq!(
            shape.block_bytes, SECTOR,
            "the write cache has 512 B sectors"
        );
        let (s, admit) = random_setup();
        let (region, layout) = format_sim(RANDOM_SLOTS, shape.blocks, s, &admit)?;
        let region = Arc::try_unwrap(region).map_err(|_| Error::env("sim region still shared"))?;
        Ok((region, layout))
    }

    fn open(&self, region: Arc<SimRegion>, _: WcConfig, bug: Option<WcBug>) -> Result<WcDevice> {
        open_sim(region, None, bug)
    }

    fn recover(&self, region: Arc<SimRegion>, _: WcConfig, bug: Option<WcBug>) -> Result<WcDevice> {
        open_sim(region, None, bug.filter(|b| b.in_recovery()))
    }

    fn recovery_did_work(&self, device: &WcDevice) -> bool {
        device.recovered_entries() > 0
    }

    fn write_atomic(&self, device: &WcDevice, lbas: &[u64], data: &[u8]) -> Result<()> {
        super::write_contiguous(lbas, data, "the write cache", |l, d| {
            device.write_blocks(l, d)
        })
    }

    fn scenarios(&self) -> &'static [&'static str] {
        &scenario::NAMES
    }

    fn random_shape(&self) -> Shape {
        RANDOM_SHAPE
    }

    fn record(&self, index: usize, _: WcConfig, bug: Option<WcBug>) -> Result<Recorded<WcTrace>> {
        scenario::record(index, bug)
    }

    fn state_of(
        &self,
        _: &Recorded<WcTrace>,
        _: WcConfig,
        _: usize,
        _: &SimRegion,
    ) -> Option<String> {
        None
    }

    fn step_at(&self, rec: &Recorded<WcTrace>, crash: usize) -> String {
        super::step_of_marks(&rec.trace.marks, crash)
    }

    fn inject_media_fault(
        &self,
        image: &SimRegion,
        layout: &WcSimLayout,
        touched: &[u64],
        pending: &BTreeSet<u64>,
        rng: &mut SmallRng,
    ) -> String {
        // Every entry word (four, docs/format.md 12.5) carries its own check bits and the
        // commit words are UBJ's: UBJ's media fault applies with the write cache's table.
        let l = &layout.layout;
        let table = super::nvcache::Table {
            slots: l.slots,
            entry_off: &|s| l.entry_off(s),
            words: 4,
        };
        super::nvcache::media_fault(image, &table, touched, pending, rng)
    }

    fn bugs(&self) -> &[BugSpec<WcBug>] {
        &self.bugs
    }

    fn bug_in_recovery(&self, bug: WcBug) -> bool {
        bug.in_recovery()
    }

    fn random_workload(
        &self,
        device: &WcDevice,
        region: &SimRegion,
        w: super::Workload<'_>,
    ) -> Option<std::result::Result<crate::oracle::Expect, super::RunningViolation>> {
        Some(scenario::random_workload(device, region, w))
    }

    fn skip_unread_points(&self) -> bool {
        true
    }

    /// Every subset of up to 12 pending words or sectors; beyond, a sample (as UBJ's).
    fn eager_images_max(&self) -> u128 {
        1 << 12
    }
}
