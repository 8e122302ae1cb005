//! nvcache's UBJ cache (seed 001) as a crash target: its image on a simulated region (NVRAM,
//! then the backing disk of 4 KiB blocks), its seeded bugs, and its promise, the epochs
//! (`oracle::Epochs`): the device reads as after some commit between the last acknowledged
//! and the last begun. Scenarios and the randomized workload: scenario.rs.

pub mod scenario;

use super::{parts, CacheTrace, SimCache, SimNvram, SlotTable};
use crate::oracle::{Epochs, Expect, Promise};
use crate::target::{Labels, Recorded, RunningViolation, Shape, Workload};
use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::Result;
use nvstack_nvcache::ubj::format::{Layout, Settings, BLOCK_BYTES, ENTRY_BYTES, SB_BYTES};
use nvstack_nvcache::{Bug, Superblock, Ubj};
use nvstack_pmem::crash::SimRegion;
use nvstack_pmem::Region;
use std::collections::BTreeMap;
use std::sync::Arc;

/// UBJ open on a simulated region.
pub type UbjDevice = Ubj<SimNvram>;

/// The randomized tier's slots: 64 behind 256 blocks, so that evictions, forced commits and
/// checkpoints come often.
pub const RANDOM_SLOTS: u32 = 64;

/// Format a simulated region: `slots` slots of NVRAM, then `blocks` blocks of disk and its
/// label block. Returns it with its slot table.
pub fn format_sim(
    slots: u32,
    blocks: u64,
    settings: Settings,
) -> Result<(Arc<SimRegion>, SlotTable)> {
    let layout = Layout::new(slots);
    let nvram_bytes = layout.region_bytes;
    let region = Arc::new(SimRegion::zeroed(
        nvram_bytes + (blocks + 1) * u64::from(BLOCK_BYTES),
    ));
    let (nvram, disk) = parts(&region, nvram_bytes);
    nvstack_nvcache::create(&nvram, &disk, settings)?;
    debug_assert_eq!(disk.blocks(), blocks + 1);
    let table = SlotTable::new(slots, |s| layout.entry_off(s), ENTRY_BYTES / 8);
    Ok((region, table))
}

impl SimCache for UbjDevice {
    type Bug = Bug;
    const LABELS: Labels = Labels {
        protocol: "ubj",
        ordering: "nt",
    };
    const SCENARIOS: &'static [&'static str] = &scenario::NAMES;
    const RANDOM_SHAPE: Shape = Shape {
        blocks: 256,
        block_bytes: BLOCK_BYTES,
        lanes: 1,
    };
    const BUGS: &'static [Bug] = &Bug::ALL;

    fn bug_text(bug: Bug) -> (&'static str, &'static str) {
        (bug.name(), bug.what())
    }

    fn bug_in_recovery(bug: Bug) -> bool {
        matches!(bug, Bug::RecoveryKeepsUncommitted | Bug::RecoveryOldestCopy)
    }

    /// Durable at commits: the epochs, from commit 0 reading `initial`.
    fn promise(initial: &BTreeMap<u64, Option<u64>>) -> Promise {
        Promise::Epochs(Epochs::starting_at(initial.clone()))
    }

    fn format_random(blocks: u64) -> Result<(Arc<SimRegion>, SlotTable)> {
        format_sim(RANDOM_SLOTS, blocks, scenario::random_settings())
    }

    /// The NVRAM's length comes from its superblock; the settings are the image's own.
    fn open_sim(region: Arc<SimRegion>, bug: Option<Bug>) -> Result<UbjDevice> {
        let mut sb = [0u8; SB_BYTES];
        region.read(0, &mut sb);
        let sb = Superblock::decode(&sb)?;
        let (nvram, disk) = parts(&region, Layout::new(sb.slots).region_bytes);
        Ubj::open_seeded(Arc::new(nvram), Arc::new(disk), None, bug)
    }

    /// It dropped uncommitted entries.
    fn recovery_did_work(&self) -> bool {
        self.dropped_at_open() > 0
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
