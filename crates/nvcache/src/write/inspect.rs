//! `cache check` of a write cache: the image read offline, never written (shared locks, the
//! region a private copy), recovery's table (write/recover.rs, V0 to V4, W1, W2) applied to
//! every slot without storing its decisions, and every damaged slot listed (the open stops at
//! the first), as UBJ's check does (ubj/inspect.rs).

use crate::write::format::{Admit, Counters, Settings, VERSION};
use crate::write::image::validate;
use crate::write::WriteCache;
use nvstack_core::error::Result;
use nvstack_pmem::{Access, MmapRegion, Region};
use std::path::Path;

/// Slots by what recovery would do with them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Census {
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
pub struct Inspection {
    pub image: String,
    pub format_version: u32,
    pub sector_bytes: u32,
    pub slots: u32,
    /// Sectors the cache exports.
    pub blocks: u64,
    pub identity: String,
    pub settings: Settings,
    /// The admission record's name (None: unreadable, a finding).
    pub admit: Option<String>,
    /// The newest valid commit word (None: neither valid, a finding).
    pub commit: Option<u64>,
    pub census: Census,
    /// The counters over the cache's life as of its last clean close (None: unreadable).
    pub counters: Option<Counters>,
    pub backing: Option<String>,
    pub backing_direct: bool,
    pub detached: bool,
    /// Damage: `check` exits 1 when there is any. One line per damaged slot.
    pub findings: Vec<String>,
    /// What the next open would do that is not damage.
    pub notes: Vec<String>,
}

impl Inspection {
    pub fn consistent(&self) -> bool {
        self.findings.is_empty()
    }
}

/// Inspect `path` (and its backing file, or `backing` when given) without writing anything.
pub fn inspect(path: &Path, backing: Option<&Path>) -> Result<Inspection> {
    let v = validate(path, false)?;
    let sb = v.sb;
    let mut r = Inspection {
        image: path.display().to_string(),
        format_version: VERSION,
        sector_bytes: sb.sector_bytes,
        slots: sb.slots,
        blocks: sb.blocks,
        identity: format!("{:032x}", sb.identity),
        settings: sb.settings,
        admit: None,
        commit: None,
        census: Census::default(),
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
    r.counters = crate::write::read_counters(&region);
    if r.counters.is_none() {
        r.notes.push(
            "the counters record is unreadable (a crash during a close): counting restarts".into(),
        );
    }
    Ok(r)
}

/// Recovery's walk over every slot: the census, each damaged slot a finding.
fn inspect_table(region: &MmapRegion, layout: &crate::write::format::Layout, r: &mut Inspection) {
    let w = crate::write::recover::walk(region, layout, None);
    let cached = w.copies.iter().flatten().count() as u32;
    let cleared = w.clears.len() as u32;
    let damaged = w.findings.len() as u32;
    r.commit = w.commit;
    r.census = Census {
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

/// dm-writecache's 14 status fields, named and ordered as in its documentation, then the
/// destages by trigger.
#[derive(serde::Serialize)]
pub struct Status {
    pub image: String,
    pub backing: String,
    pub sector_bytes: u32,
    pub settings: Settings,
    pub admit: String,
    pub admitted_ranges: Vec<[u64; 2]>,
    /// The 14 fields.
    pub error: u64,
    pub blocks: u64,
    pub free_blocks: u64,
    pub writeback_blocks: u64,
    pub read_blocks: u64,
    pub read_hits: u64,
    pub write_blocks: u64,
    pub write_hits_uncommitted: u64,
    pub write_hits_committed: u64,
    pub write_bypass: u64,
    pub write_allocated: u64,
    pub writes_blocked_on_freelist: u64,
    pub flushes: u64,
    pub discarded_blocks: u64,
    /// Blocks destaged, by trigger.
    pub destaged: Destaged,
    pub backing_bytes_written: u64,
    /// The counters record was readable (false: a crash during a close; counting restarted).
    pub counters_readable: bool,
}

#[derive(serde::Serialize)]
pub struct Destaged {
    pub room: u64,
    pub watermark: u64,
    pub max_age: u64,
    pub cleaner: u64,
    pub writeback: u64,
}

/// A write cache's status (`nvstack cache status`): dm-writecache's 14 fields, the destages
/// by trigger and the settings, from a cache opened read-only.
pub fn status_of<R: Region>(c: &WriteCache<R>, image: &Path, backing: &Path) -> Result<Status> {
    let sb = *c.superblock();
    let (k, readable): (Counters, bool) = c.lifetime();
    let admit = c.admit_record()?;
    assert!(
        c.cached_blocks() <= u64::from(sb.slots),
        "no more cached blocks than slots"
    );
    Ok(Status {
        image: image.display().to_string(),
        backing: backing.display().to_string(),
        sector_bytes: sb.sector_bytes,
        settings: c.settings(),
        admit: admit.name(),
        admitted_ranges: match admit {
            Admit::All => Vec::new(),
            _ => c
                .admission()
                .ranges()
                .iter()
                .map(|r| [r.start, r.end])
                .collect(),
        },
        error: u64::from(c.error().is_some()),
        blocks: u64::from(sb.slots),
        free_blocks: u64::from(sb.slots) - c.cached_blocks(),
        writeback_blocks: 0,
        read_blocks: k.read_blocks,
        read_hits: k.read_hits,
        write_blocks: k.write_blocks,
        write_hits_uncommitted: k.write_hits_uncommitted,
        write_hits_committed: k.write_hits_committed,
        write_bypass: k.write_bypass,
        write_allocated: k.write_allocated,
        writes_blocked_on_freelist: k.writes_blocked_on_freelist,
        flushes: k.flushes,
        discarded_blocks: k.discarded_blocks,
        destaged: Destaged {
            room: k.destaged_room,
            watermark: k.destaged_watermark,
            max_age: k.destaged_max_age,
            cleaner: k.destaged_cleaner,
            writeback: k.destaged_writeback,
        },
        backing_bytes_written: k.backing_bytes_written,
        counters_readable: readable,
    })
}
