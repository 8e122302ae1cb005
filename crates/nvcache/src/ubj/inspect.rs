//! `cache status` and `cache check`: a cache image read offline, never written. The image and
//! the backing file are opened under shared locks (a cache in use elsewhere is refused, exit 3);
//! the region is mapped as a private copy, and recovery's table (recover.rs) is applied to it
//! without storing its decisions, so the report says what the next open would do.

use crate::common::format::{decode_commit, COMMIT_OFF};
use crate::common::image::Validated;
use crate::ubj::format::{Counters, Layout, Settings, Superblock};
use crate::ubj::image::validate;
use crate::ubj::recover::{self, Found};
use nvstack_core::error::Result;
use nvstack_pmem::{Access, MmapRegion, Region};
use std::collections::HashMap;
use std::path::Path;

/// Slots per state as the table holds them. Clean blocks are not recorded in NVRAM (their
/// entries are zero), so a cache always opens with none: they count as free here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TableCensus {
    pub free: u32,
    /// Written after the last commit: the next open drops them.
    pub uncommitted: u32,
    pub frozen_up_to_date: u32,
    pub frozen_out_of_date: u32,
}

/// What the image and its backing file say.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Inspection {
    pub image: String,
    pub format_version: u32,
    pub slots: u32,
    pub cache_bytes: u64,
    /// Blocks the cache exports.
    pub blocks: u64,
    pub identity: String,
    pub settings: Settings,
    /// The committed epoch (the newest valid commit word), when one is valid.
    pub epoch: Option<u64>,
    pub census: TableCensus,
    /// Counters over the cache's life as of its last clean close (None: unreadable).
    pub counters: Option<Counters>,
    pub backing: Option<String>,
    pub backing_direct: bool,
    /// The last backing-device error the cache met (its writes were refused until reopened).
    pub last_backing_error: Option<crate::ubj::format::BackingError>,
    /// The backing label says the cache was detached: the backing file alone is the state.
    pub detached: bool,
    /// Damage: `check` exits 1 when there is any.
    pub findings: Vec<String>,
    /// What the next open would do, or would refuse to do, that is not damage.
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
    let layout = Layout::new(sb.slots);
    let mut r = Inspection {
        image: path.display().to_string(),
        format_version: crate::ubj::format::VERSION,
        slots: sb.slots,
        cache_bytes: layout.region_bytes,
        blocks: sb.blocks,
        identity: format!("{:032x}", sb.identity),
        settings: sb.settings,
        epoch: None,
        census: TableCensus::default(),
        counters: None,
        backing: None,
        backing_direct: false,
        last_backing_error: None,
        detached: false,
        findings: Vec::new(),
        notes: Vec::new(),
    };
    inspect_backing(&v, backing, &mut r)?;
    let Validated { file, .. } = v;
    let region = MmapRegion::map_file(file, path, Access::PrivateCopy)?;
    inspect_table(&region, &layout, &mut r);
    r.counters = Counters::decode(&crate::ubj::read_counters(&region));
    r.last_backing_error = crate::ubj::read_backing_error(&region);
    if r.counters.is_none() {
        r.notes.push(
            "the counters record is unreadable (a crash during a close): counting restarts".into(),
        );
    }
    Ok(r)
}

fn inspect_table<R: Region + ?Sized>(region: &R, layout: &Layout, r: &mut Inspection) {
    let words: Vec<Option<u64>> = COMMIT_OFF
        .iter()
        .map(|&off| decode_commit(region.load_u64(off)))
        .collect();
    if words[0] != words[1] && words.iter().all(Option::is_some) {
        r.notes.push(format!(
            "the commit words differ ({} and {}): a commit was cut between its stores; the \
             newer is the state",
            words[0].unwrap_or(0),
            words[1].unwrap_or(0)
        ));
    }
    match recover::scan(region, layout, false) {
        Ok(found) => {
            r.epoch = Some(found.epoch);
            r.census = census(&found, layout.slots);
            if r.census.uncommitted > 0 {
                r.notes.push(format!(
                    "{} slots were written after commit {}: the next open drops them",
                    r.census.uncommitted, found.epoch
                ));
            }
        }
        Err(e) => r.findings.push(e.to_string()),
    }
}

fn census(found: &Found, slots: u32) -> TableCensus {
    let mut newest: HashMap<u64, u64> = HashMap::new();
    for e in found.kept.iter().flatten() {
        let n = newest.entry(e.lba).or_insert(e.seq);
        *n = (*n).max(e.seq);
    }
    let mut c = TableCensus {
        uncommitted: found.dropped.len() as u32,
        ..Default::default()
    };
    for e in found.kept.iter().flatten() {
        if newest[&e.lba] == e.seq {
            c.frozen_up_to_date += 1;
        } else {
            c.frozen_out_of_date += 1;
        }
    }
    c.free = slots - c.uncommitted - c.frozen_up_to_date - c.frozen_out_of_date;
    c
}

/// The backing file's size and label (common::label::inspect_backing).
fn inspect_backing(
    v: &Validated<Superblock>,
    over: Option<&Path>,
    r: &mut Inspection,
) -> Result<()> {
    let seen = crate::common::label::inspect_backing(
        &v.path_record,
        over,
        (v.sb.identity, v.sb.blocks),
        &mut r.findings,
        &mut r.notes,
    )?;
    r.backing = seen.path;
    r.backing_direct = seen.direct;
    r.detached = seen.detached;
    Ok(())
}
