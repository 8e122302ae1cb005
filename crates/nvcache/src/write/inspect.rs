//! `cache check` of a write cache: the image read offline, never written (shared locks, the
//! region a private copy), recovery's table (write/recover.rs, V0 to V4, W1, W2) applied to
//! every slot without storing its decisions, and every damaged slot listed (the open stops at
//! the first), as UBJ's check does (ubj/inspect.rs).

use crate::write::format::{Admit, WcCounters, WcSettings, WC_VERSION};
use crate::write::image::validate;
use nvstack_core::error::Result;
use nvstack_pmem::{Access, MmapRegion};
use std::path::Path;

/// Slots by what recovery would do with them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct WcCensus {
    pub free: u32,
    /// Whole copies kept: the blocks cached after the next open.
    pub cached: u32,
    /// Writes a crash cut (V2) or multi-block writes in flight (V3): cleared at the next open.
    pub cut: u32,
    /// Older copies of a cached block (W1): cleared at the next open.
    pub replaced: u32,
    /// Damaged (V1) or inconsistent (W2) slots.
    pub damaged: u32,
}

/// What a write cache image and its backing file say.
#[derive(Clone, Debug, serde::Serialize)]
pub struct WcInspection {
    pub image: String,
    pub format_version: u32,
    pub sector_bytes: u32,
    pub slots: u32,
    /// Sectors the cache exports.
    pub blocks: u64,
    pub identity: String,
    pub settings: WcSettings,
    /// The admission record's name (None: unreadable, a finding).
    pub admit: Option<String>,
    /// The newest valid commit word (None: neither valid, a finding).
    pub commit: Option<u64>,
    pub census: WcCensus,
    /// The counters over the cache's life as of its last clean close (None: unreadable).
    pub counters: Option<WcCounters>,
    pub backing: Option<String>,
    pub backing_direct: bool,
    pub detached: bool,
    /// Damage: `check` exits 1 when there is any. One line per damaged slot.
    pub findings: Vec<String>,
    /// What the next open would do that is not damage.
    pub notes: Vec<String>,
}

impl WcInspection {
    pub fn consistent(&self) -> bool {
        self.findings.is_empty()
    }
}

/// Inspect `path` (and its backing file, or `backing` when given) without writing anything.
pub fn inspect_wc(path: &Path, backing: Option<&Path>) -> Result<WcInspection> {
    let v = validate(path, false)?;
    let sb = v.sb;
    let mut r = WcInspection {
        image: path.display().to_string(),
        format_version: WC_VERSION,
        sector_bytes: sb.sector_bytes,
        slots: sb.slots,
        blocks: sb.blocks,
        identity: format!("{:032x}", sb.identity),
        settings: sb.settings,
        admit: None,
        commit: None,
        census: WcCensus::default(),
        counters: None,
        backing: None,
        backing_direct: false,
        detached: false,
        findings: Vec::new(),
        notes: Vec::new(),
    };
    let seen = crate::common::label::inspect_backing(
        &v.path_record,
        backing,
        (sb.identity, sb.backing_blocks),
        &mut r.findings,
        &mut r.notes,
    )?;
    (r.backing, r.backing_direct, r.detached) = (seen.path, seen.direct, seen.detached);
    let region = MmapRegion::map_file(v.file, path, Access::PrivateCopy)?;
    inspect_table(&region, &sb.layout(), &mut r);
    match crate::write::read_admit(&region) {
        Ok(a) => r.admit = Some(Admit::name(&a)),
        Err(e) => r.findings.push(format!("admission record: {e}")),
    }
    r.counters = crate::write::read_wc_counters(&region);
    if r.counters.is_none() {
        r.notes.push(
            "the counters record is unreadable (a crash during a close): counting restarts".into(),
        );
    }
    Ok(r)
}

/// Recovery's walk over every slot: the census, each damaged slot a finding.
fn inspect_table(
    region: &MmapRegion,
    layout: &crate::write::format::WcLayout,
    r: &mut WcInspection,
) {
    let w = crate::write::recover::walk(region, layout, None);
    let cached = w.copies.iter().flatten().count() as u32;
    let cleared = w.clears.len() as u32;
    let damaged = w.findings.len() as u32;
    r.commit = w.commit;
    r.census = WcCensus {
        free: layout.slots.saturating_sub(cached + cleared + damaged),
        cached,
        cut: cleared - w.replaced,
        replaced: w.replaced,
        damaged,
    };
    assert!(cached + cleared <= layout.slots, "a slot is counted once");
    if cleared > 0 {
        r.notes.push(format!(
            "{} entries the next open clears: {} cut writes, {} replaced copies",
            cleared, r.census.cut, w.replaced
        ));
    }
    r.findings.extend(w.findings);
}
