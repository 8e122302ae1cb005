//! nvcache's write cache (seed 004, NVFAT) as a crash target: its image on a simulated
//! region (NVRAM, then the backing disk), its seeded bugs, and its promise, the ordered one
//! (`oracle::Promise::Ordered`): an admitted write is acknowledged durable when it returns, a
//! bypassed one when the next flush returns; a block never reads older than its last
//! acknowledged write, and an admitted write of several blocks is all or nothing.
//!
//! The cache's sectors are 512 bytes over 4 KiB backing blocks, so every destage and bypassed
//! write is a read-modify-write of a backing block. Scenarios and the randomized workload:
//! scenario.rs.

pub mod scenario;

use super::{parts, CacheTrace, SimCache, SimNvram, SlotTable};
use crate::oracle::{Expect, Promise};
use crate::target::{Labels, Recorded, RunningViolation, Shape, Workload};
use nvstack_core::error::Result;
use nvstack_nvcache::write::bugs::Bug;
use nvstack_nvcache::write::entry::ENTRY_BYTES;
use nvstack_nvcache::write::format::{Admit, Layout, Settings, Superblock, SB_BYTES};
use nvstack_nvcache::WriteCache;
use nvstack_pmem::crash::SimRegion;
use nvstack_pmem::Region;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The cache's sector (the seed's).
pub const SECTOR_BYTES: u32 = 512;
/// The backing device's block: the NVRAM part ends on one, so the disk's blocks align.
const BACKING_BLOCK_BYTES: u64 = 4096;

/// The write cache open on a simulated region.
pub type WriteDevice = WriteCache<SimNvram>;

/// The randomized tier's slots: 32 behind 256 sectors, so that destages are frequent.
pub const RANDOM_SLOTS: u32 = 32;

/// Bytes of NVRAM a region of `layout` gives the cache: the disk starts at the next backing
/// block.
fn nvram_bytes(layout: &Layout) -> u64 {
    layout.region_bytes.div_ceil(BACKING_BLOCK_BYTES) * BACKING_BLOCK_BYTES
}

/// Format a simulated region: `slots` slots of NVRAM, then `sectors` sectors of disk (whole
/// 4 KiB backing blocks) and its label block. Returns it with its slot table.
pub fn format_sim(
    slots: u32,
    sectors: u64,
    settings: Settings,
    admit: &Admit,
) -> Result<(Arc<SimRegion>, SlotTable)> {
    let layout = Layout::new(slots, SECTOR_BYTES);
    let nvram_bytes = nvram_bytes(&layout);
    let backing_blocks = sectors * u64::from(SECTOR_BYTES) / BACKING_BLOCK_BYTES;
    let region = Arc::new(SimRegion::zeroed(
        nvram_bytes + (backing_blocks + 1) * BACKING_BLOCK_BYTES,
    ));
    let (nvram, disk) = parts(&region, nvram_bytes);
    let sb = nvstack_nvcache::write::create(&nvram, &disk, SECTOR_BYTES, settings, admit)?;
    debug_assert_eq!(sb.slots, slots);
    // Every entry word (four, docs/format.md 12.5) carries its own check bits.
    let table = SlotTable::new(slots, |s| layout.entry_off(s), ENTRY_BYTES / 8);
    Ok((region, table))
}

impl SimCache for WriteDevice {
    type Bug = Bug;
    const LABELS: Labels = Labels {
        protocol: "write",
        ordering: "nt",
    };
    const SCENARIOS: &'static [&'static str] = &scenario::NAMES;
    const RANDOM_SHAPE: Shape = Shape {
        blocks: 256,
        block_bytes: SECTOR_BYTES,
        lanes: 1,
    };
    const BUGS: &'static [Bug] = &Bug::ALL;

    fn bug_text(bug: Bug) -> (&'static str, &'static str) {
        (bug.name(), bug.what())
    }

    fn bug_in_recovery(bug: Bug) -> bool {
        bug.in_recovery()
    }

    /// Durable per write, at different times: judged in program order.
    fn promise(_: &BTreeMap<u64, Option<u64>>) -> Promise {
        Promise::Ordered
    }

    fn format_random(sectors: u64) -> Result<(Arc<SimRegion>, SlotTable)> {
        let (settings, admit) = scenario::random_setup();
        format_sim(RANDOM_SLOTS, sectors, settings, &admit)
    }

    /// The NVRAM's length comes from the superblock; the settings are the image's own.
    fn open_sim(region: Arc<SimRegion>, bug: Option<Bug>) -> Result<WriteDevice> {
        let mut b = [0u8; SB_BYTES];
        region.read(0, &mut b);
        let sb = Superblock::decode(&b)?;
        let (nvram, disk) = parts(&region, nvram_bytes(&sb.layout()));
        WriteCache::open_seeded(Arc::new(nvram), Arc::new(disk), None, bug)
    }

    /// It found entries to take back.
    fn recovery_did_work(&self) -> bool {
        self.recovered_entries() > 0
    }

    fn record(index: usize, bug: Option<Bug>) -> Result<Recorded<CacheTrace>> {
        scenario::record(index, bug)
    }

    fn random_workload(
        &self,
        region: &SimRegion,
        w: Workload<'_>,
    ) -> std::result::Result<Expect, RunningViolation> {
        scenario::random_workload(self, region, w)
    }
}
