//! The offline checker (`nvstack check`). It maps the image privately, so nothing it does
//! (including recovery, which it runs in memory) ever reaches the file. It reports damage as
//! findings (exit 1) and an interrupted write that recovery will finish or cancel as pending
//! (consistent, exit 0).

use super::disk::{
    fast_slot_busy, paper_intent_state, paper_redo_target, read_fast_record, IntentState,
    NvramDisk, OpenOptions, LBA_NULL, PAPER_L1, PAPER_L2, PAPER_VPN,
};
use super::entry::Entry;
use super::layout::{Geometry, Protocol, Superblock, SB_PAGE_BYTES, SB_USED_BYTES};
use nvstack_core::error::{Error, Result};
use nvstack_pmem::{Access, MmapRegion, Region};
use std::fs::{File, TryLockError};
use std::os::unix::fs::FileExt;
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

fn entry_valid(g: &Geometry, lba: u64, raw: u64) -> bool {
    lba < g.blocks
        && Entry::decode(lba, raw).is_ok_and(|e| e.vpn.is_none_or(|v| (v as u64) < g.pages))
}

/// Check one lane's journal slot before recovery touches it.
fn check_slot<R: Region + ?Sized>(
    r: &R,
    g: &Geometry,
    protocol: Protocol,
    journal_word_atomic: bool,
    lane: u32,
    findings: &mut Vec<String>,
    pending: &mut Vec<String>,
) {
    let slot = g.slot_off(lane);
    match protocol {
        Protocol::Paper => {
            let vpn = r.load_u64(slot + PAPER_VPN);
            let l1 = r.load_u64(slot + PAPER_L1);
            let l2 = r.load_u64(slot + PAPER_L2);
            let garbage = |l: u64| l != LBA_NULL && l >= g.blocks;
            // With word-atomic journal stores (non-temporal) a crash leaves at most the one
            // field being written corrupt (Table 2's X), so these states mean damage. A
            // flushed journal line can be disturbed as a whole (seed 6.2): then they are
            // crash states, and recovery cancels them.
            let impossible = (garbage(l1) && garbage(l2))
                || (l1 != LBA_NULL && l2 != LBA_NULL && !garbage(l1) && !garbage(l2) && l1 != l2)
                || (l1 == l2 && l1 < g.blocks && paper_redo_target(g, vpn, l1, l2).is_none());
            if let Some(lba) = paper_redo_target(g, vpn, l1, l2) {
                pending.push(format!(
                    "lane {lane}: write of LBA {lba} journaled (L1 = L2): recovery will redo it"
                ));
            } else if impossible && journal_word_atomic {
                findings.push(format!(
                    "journal record of lane {lane}: VPN {vpn:#x}, L1 {l1:#x}, L2 {l2:#x} is no state of Table 2 (with non-temporal journal stores no crash produces it)"
                ));
            } else if l1 != LBA_NULL || l2 != LBA_NULL {
                pending.push(format!(
                    "lane {lane}: interrupted journal update (L1 {l1:#x}, L2 {l2:#x}): recovery will reset it"
                ));
            }
            // The same classification as recovery's (docs/format.md 6.2).
            match paper_intent_state(r, g, slot) {
                IntentState::Idle => {}
                IntentState::Redo { entries, .. } => pending.push(format!(
                    "lane {lane}: committed intent of {} blocks: recovery will redo it",
                    entries.len()
                )),
                IntentState::Cancel { commit, .. } => pending.push(format!(
                    "lane {lane}: intent commit word {commit:#x} matches no valid intent (a torn or flipped commit word): recovery will cancel it"
                )),
                IntentState::BadEntries { .. } => findings.push(format!(
                    "intent of lane {lane}: committed, but an entry names an LBA or page out of range"
                )),
                IntentState::PartlyApplied { commit, applied, n } => findings.push(format!(
                    "intent of lane {lane}: commit word {commit:#x} matches no valid intent, but the map holds {applied} of the {n} entries of the intent in the slot"
                )),
                IntentState::BadIntent { commit } => findings.push(format!(
                    "intent of lane {lane}: commit word {commit:#x} set but the intent fails its checksum"
                )),
            }
        }
        Protocol::Fast => {
            if !fast_slot_busy(r, slot) {
                return;
            }
            match read_fast_record(r, slot) {
                None => pending.push(format!(
                    "lane {lane}: incomplete record (interrupted while written): recovery will discard it"
                )),
                Some((seq, entries)) => {
                    let bad: Vec<_> =
                        entries.iter().filter(|&&(lba, _, new)| !entry_valid(g, lba, new)).collect();
                    if let Some(&&(lba, _, new)) = bad.first() {
                        findings.push(format!(
                            "journal record of lane {lane} (seq {seq}): checksum holds but entry for LBA {lba} ({new:#x}) is out of range or invalid"
                        ));
                    } else {
                        pending.push(format!(
                            "lane {lane}: record {seq} of {} blocks: recovery applies the entries still holding their old value",
                            entries.len()
                        ));
                    }
                }
            }
        }
    }
}

pub fn check_image(path: &Path) -> Result<CheckReport> {
    let file = File::open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::bad(format!("{}: no such image", path.display()))
        } else {
            Error::env(format!("{}: cannot open: {e}", path.display()))
        }
    })?;
    match file.try_lock_shared() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            return Err(Error::env(format!(
                "{}: image is locked by another process (open for writing)",
                path.display()
            )))
        }
        Err(TryLockError::Error(e)) => {
            return Err(Error::env(format!("{}: cannot lock: {e}", path.display())))
        }
    }
    let len = file
        .metadata()
        .map_err(|e| Error::env(format!("{}: {e}", path.display())))?
        .len();
    // A length that is not a multiple of 4096 is left to the superblock, which names it
    // ("truncated", or "file has N bytes").
    if len < 2 * SB_PAGE_BYTES {
        return Err(Error::bad(format!(
            "{}: file is {len} bytes: not an nvstack image",
            path.display()
        )));
    }
    let mut copies = [vec![0u8; SB_USED_BYTES], vec![0u8; SB_USED_BYTES]];
    let offs = [0, len - SB_PAGE_BYTES];
    for (c, &off) in copies.iter_mut().zip(&offs) {
        file.read_exact_at(c, off)
            .map_err(|e| Error::bad(format!("{}: cannot read superblock: {e}", path.display())))?;
    }
    let decoded: Vec<_> = copies.iter().map(|c| Superblock::decode(c, len)).collect();
    let mut findings = Vec::new();
    let describe = |i: usize| match &decoded[i] {
        Ok(_) => format!("copy {} (offset {}): ok", i + 1, offs[i]),
        Err(e) => format!("copy {} (offset {}): {e}", i + 1, offs[i]),
    };
    let sb_copies = [describe(0), describe(1)];
    let (sb, good) = match (&decoded[0], &decoded[1]) {
        (Err(e1), Err(_)) => {
            return Err(Error::bad(format!(
                "{}: no valid superblock copy: {e1}",
                path.display()
            )))
        }
        (Ok(a), Ok(b)) => {
            if a != b {
                findings.push("the two superblock copies are valid but disagree".to_string());
            }
            (*a, 0)
        }
        (Ok(a), Err(e)) => {
            findings.push(format!(
                "superblock copy 2 (offset {}) is damaged: {e}",
                offs[1]
            ));
            (*a, 0)
        }
        (Err(e), Ok(b)) => {
            findings.push(format!("superblock copy 1 (offset 0) is damaged: {e}"));
            (*b, 1)
        }
    };
    let g = sb.geometry;
    let region = MmapRegion::map_file(file, path, Access::PrivateCopy)?;
    // The mapping is private: make both copies the intact one so the device can open.
    region.write(offs[1 - good], &copies[good]);
    let mut pending = Vec::new();
    let ordering =
        nvstack_pmem::ordering::policy_by_id(sb.ordering_id).expect("validated at decode");
    let journal_word_atomic = ordering.journal.word_atomic();
    for lane in 0..g.lanes {
        check_slot(
            &region,
            &g,
            sb.protocol,
            journal_word_atomic,
            lane,
            &mut findings,
            &mut pending,
        );
    }
    let region = Arc::new(region);
    let disk = NvramDisk::open(
        region.clone(),
        OpenOptions {
            allow_damaged: true,
            ..Default::default()
        },
    )?;
    let rep = disk.recovery_report().clone();
    // The map is scanned after recovery: an entry torn mid-update that recovery redoes is
    // a crash state, not damage.
    for d in &rep.damage {
        if !findings.contains(d) {
            findings.push(d.clone());
        }
    }
    assert_eq!(
        rep.mapped_blocks + rep.free_pages,
        g.pages,
        "pages are mapped or free"
    );
    Ok(CheckReport {
        image: path.display().to_string(),
        consistent: findings.is_empty(),
        findings,
        pending_recovery: pending,
        superblock_copies: sb_copies,
        protocol: sb.protocol.name().to_string(),
        ordering: disk.ordering().name.to_string(),
        blocks: g.blocks,
        pages: g.pages,
        mapped_blocks: rep.mapped_blocks,
        free_pages: rep.free_pages,
    })
}
