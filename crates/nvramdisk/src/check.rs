//! The offline checker (`nvstack check`). It maps the image privately, so nothing it does
//! (including recovery, which it runs in memory) ever reaches the file. It reports damage as
//! findings (exit 1) and an interrupted write that recovery will finish or cancel as pending
//! (consistent, exit 0).

use super::disk::{NvramDisk, OpenOptions};
use super::format::SuperblockCopies;
use super::image::{image_len, lock, open_file};
use super::layout::Geometry;
use super::slot::{classify, Classify, Verdict};
use nvstack_core::error::{Error, Result};
use nvstack_pmem::{Access, MmapRegion, Region};
use std::path::Path;
use std::sync::Arc;

#[derive(Debug, serde::Serialize)]
pub struct CheckReport {
    pub image: String,
    /// No findings.
    pub consistent: bool,
    /// Damage, one line each.
    pub findings: Vec<String>,
    /// Interrupted updates that recovery will redo or undo (not damage).
    pub pending_recovery: Vec<String>,
    pub superblock_copies: [String; 2],
    pub protocol: String,
    pub ordering: String,
    pub blocks: u64,
    pub pages: u64,
    pub mapped_blocks: u64,
    pub free_pages: u64,
}

/// What the classifier (slot.rs, the same table recovery acts on) says of every lane's slot
/// before recovery touches it: (pending, damage).
fn judge_slots<R: Region + ?Sized>(
    region: &R,
    geo: &Geometry,
    how: Classify,
) -> (Vec<String>, Vec<String>) {
    let (mut pending, mut damage) = (Vec::new(), Vec::new());
    for lane in 0..geo.lanes {
        for verdict in classify(region, geo, how, lane).verdicts(lane) {
            match verdict {
                Verdict::Pending(text) => pending.push(text),
                Verdict::Damage(text) => damage.push(text),
            }
        }
    }
    debug_assert!(pending.len() + damage.len() <= 2 * geo.lanes as usize);
    (pending, damage)
}

pub fn check_image(path: &Path) -> Result<CheckReport> {
    let file = open_file(path, false)?;
    lock(&file, path, false)?;
    let len = image_len(&file, path)?;
    let copies = SuperblockCopies::read_file(&file, path, len)?;
    let (sb, good, mut findings) = copies
        .intact()
        .map_err(|e| Error::bad(format!("{}: {e}", path.display())))?;
    let geo = sb.geometry;
    let region = MmapRegion::map_file(file, path, Access::PrivateCopy)?;
    // The mapping is private: make both copies the intact one so the device can open.
    region.write(copies.offsets()[1 - good], &copies.bytes[good]);
    let ordering =
        nvstack_pmem::ordering::policy_by_id(sb.ordering_id).expect("validated at decode");
    // The image's own journal method, as recovery judges it when opened without an override.
    let how = Classify {
        protocol: sb.protocol,
        journal_word_atomic: ordering.journal.word_atomic(),
        bug: None,
    };
    let (pending, slot_damage) = judge_slots(&region, &geo, how);
    findings.extend(slot_damage);
    let region = Arc::new(region);
    let options = OpenOptions {
        allow_damaged: true,
        ..Default::default()
    };
    let disk = NvramDisk::open(region.clone(), options)?;
    let recovery = disk.recovery_report();
    // The map is scanned after recovery: an entry torn mid-update that recovery redoes is a
    // crash state, not damage. Slot damage is listed by both, in the same words: once here.
    for damage in &recovery.damage {
        if !findings.contains(damage) {
            findings.push(damage.clone());
        }
    }
    assert_eq!(
        recovery.mapped_blocks + recovery.free_pages,
        geo.pages,
        "pages are mapped or free"
    );
    Ok(CheckReport {
        image: path.display().to_string(),
        consistent: findings.is_empty(),
        findings,
        pending_recovery: pending,
        superblock_copies: copies.describe(),
        protocol: sb.protocol.name().to_string(),
        ordering: disk.ordering().name.to_string(),
        blocks: geo.blocks,
        pages: geo.pages,
        mapped_blocks: recovery.mapped_blocks,
        free_pages: recovery.free_pages,
    })
}
