//! Recovery (docs/format.md 6.7): act on each lane's slot as `slot::classify` classifies it
//! (the case table is in slot.rs), then scan the map and rebuild the free pages. Every rule
//! persists its map stores before it clears the journal state that triggers it, and repeating
//! it is harmless, so a crash during recovery is recovered by the next open.

use super::{lock, Lane, NvramDisk, RecoveryReport};
use crate::bugs::SeededBug;
use crate::entry::Entry;
use crate::journal::{
    retire_record, RecordEntries, LBA_NULL, PAPER_INTENT_COMMIT, PAPER_L1, PAPER_L2,
};
use crate::layout::Geometry;
use crate::slot::{classify, Classify, FastCase, IntentState, ReplicaCase, SlotState, Verdict};
use nvstack_core::error::{Error, Result};
use nvstack_pmem::Region;

/// A damaged map lists at most this many findings.
pub const FINDINGS_MAX: usize = 100;
/// Damage findings named in the error that stops an open (`check` lists them all).
const DAMAGE_NAMED_MAX: usize = 3;

impl<R: Region> NvramDisk<R> {
    /// Finish or cancel each lane's in-flight update, then rebuild the free pages as the pool
    /// minus the mapped pages. Damage stops the open unless it allows damage (`check`).
    pub(super) fn recover(&mut self) -> Result<RecoveryReport> {
        let mut report = RecoveryReport::default();
        let how = Classify {
            protocol: self.sb.protocol,
            journal_word_atomic: self.ordering.journal.word_atomic(),
            bug: self.bug,
        };
        for lane in self.lanes.iter() {
            let mut lane = lock(lane);
            match classify(&*self.region, &self.geo, how, lane.id) {
                SlotState::Fast(case) => self.recover_fast(&mut lane, case, &mut report),
                SlotState::Paper { replicas, intent } => {
                    self.recover_replicas(&mut lane, replicas, &mut report);
                    self.recover_intent(&mut lane, intent, &mut report);
                }
            }
        }
        // At most one redo or undo per part of a slot (paper: replicas and intent).
        debug_assert!(report.redone + report.undone <= 2 * u64::from(self.geo.lanes));
        let scan = scan_map(&*self.region, &self.geo);
        report.damage.extend(scan.findings.iter().cloned());
        if !report.damage.is_empty() && !self.allow_damaged {
            let named = &report.damage[..report.damage.len().min(DAMAGE_NAMED_MAX)];
            let more = if report.damage.len() > DAMAGE_NAMED_MAX {
                "; ..."
            } else {
                ""
            };
            return Err(Error::finding(format!(
                "image damaged: {}{more}: run `nvstack check`",
                named.join("; ")
            )));
        }
        self.rebuild_free(&scan, &mut report);
        Ok(report)
    }

    /// F0 to F3.
    fn recover_fast(&self, lane: &mut Lane, case: FastCase, report: &mut RecoveryReport) {
        let (region, id) = (&*self.region, lane.id);
        let slot = self.geo.slot_off(id);
        match case {
            FastCase::Idle => return,
            FastCase::BadEntry { .. } => {
                report.damage.push(damage_text(case.verdict(id)));
                return; // the record stays as evidence
            }
            FastCase::Torn => {
                report.undone += 1;
                report
                    .actions
                    .push(format!("lane {id}: torn record discarded"));
            }
            FastCase::Redo { seq, entries } => {
                lane.seq = seq;
                if self.redo_record(lane, seq, &entries, report) {
                    return; // seeded: already retired
                }
            }
        }
        retire_record(&mut lane.domain, region, self.ordering.journal, slot);
        lane.domain.commit(region);
        debug_assert!(
            !crate::journal::fast_slot_busy(region, slot),
            "record retired"
        );
    }

    /// F2: make every entry new. A valid record is always one in flight (its clear is fenced
    /// before the write returns), so each entry is old, new, or torn by a line write-back.
    /// Returns true when a seeded bug already retired the record.
    fn redo_record(
        &self,
        lane: &mut Lane,
        seq: u64,
        entries: &RecordEntries,
        report: &mut RecoveryReport,
    ) -> bool {
        let (region, geo, id) = (&*self.region, &self.geo, lane.id);
        let domain = &mut lane.domain;
        let retired_first = self.seeded(SeededBug::RecoveryClearsBeforeMap);
        if retired_first {
            // Seeded bug recovery-clears-before-map: the record is retired, durably, before
            // its map stores are issued.
            retire_record(domain, region, self.ordering.journal, geo.slot_off(id));
            domain.commit(region);
        }
        let old_only = self.seeded(SeededBug::FastRecoveryOldOnly);
        let mut applied = 0;
        for &(lba, old, new) in entries {
            let offset = geo.map_entry_off(lba);
            let current = region.load_u64(offset);
            // Seeded bug fast-recovery-old-only: apply only where the map still holds `old`,
            // so a torn word stays torn.
            let apply = if old_only {
                current == old
            } else {
                current != new
            };
            if apply {
                domain.store_u64(region, self.ordering.map, offset, new);
                applied += 1;
            }
        }
        domain.commit(region);
        debug_assert!(
            old_only
                || entries
                    .iter()
                    .all(|&(lba, _, new)| { region.load_u64(geo.map_entry_off(lba)) == new })
        );
        if applied > 0 {
            report.redone += 1;
            report.actions.push(format!(
                "lane {id}: redo record {seq}, {applied} of {} entries applied",
                entries.len()
            ));
        }
        retired_first
    }

    /// R0 to R3: redo (R1), then reset whichever replica is set (R1, R2).
    fn recover_replicas(&self, lane: &mut Lane, case: ReplicaCase, report: &mut RecoveryReport) {
        let (region, id) = (&*self.region, lane.id);
        let domain = &mut lane.domain;
        match case {
            ReplicaCase::Idle => return,
            ReplicaCase::Impossible { .. } => {
                report.damage.push(damage_text(case.verdict(id)));
                return; // the replicas stay as evidence
            }
            ReplicaCase::Redo { lba, vpn } => {
                // S6 to S8 (both replicas intact): map[lba] := VPN, which also repairs S7's
                // torn entry.
                domain.store_u64(region, self.ordering.map, self.geo.map_entry_off(lba), vpn);
                domain.commit(region);
                report.redone += 1;
                report
                    .actions
                    .push(format!("lane {id}: redo, map[{lba}] := {vpn:#x}"));
            }
            ReplicaCase::Reset { l1, l2, applied } => {
                report.undone += 1;
                report.actions.push(match applied {
                    Some(lba) => format!(
                        "lane {id}: reset replicas (L1 {l1:#x}, L2 {l2:#x}); map[{lba}] already holds the journaled entry (S9-S11)"
                    ),
                    None => format!(
                        "lane {id}: undo (L1 {l1:#x}, L2 {l2:#x}): replicas reset, map left as it was (S1-S5)"
                    ),
                });
            }
        }
        let slot = self.geo.slot_off(id);
        for replica in [PAPER_L1, PAPER_L2] {
            if region.load_u64(slot + replica) != LBA_NULL {
                domain.store_u64(region, self.ordering.journal, slot + replica, LBA_NULL);
                domain.commit(region);
            }
        }
        debug_assert_eq!(region.load_u64(slot + PAPER_L2), LBA_NULL, "replicas reset");
    }

    /// I0 to I5.
    fn recover_intent(&self, lane: &mut Lane, case: IntentState, report: &mut RecoveryReport) {
        let (region, id) = (&*self.region, lane.id);
        let commit_offset = self.geo.slot_off(id) + PAPER_INTENT_COMMIT;
        let domain = &mut lane.domain;
        match case {
            IntentState::Idle => return,
            IntentState::Redo { ref entries, .. } => {
                for &(lba, new) in entries {
                    let offset = self.geo.map_entry_off(lba);
                    domain.store_u64(region, self.ordering.map, offset, new);
                }
                domain.commit(region);
                report.redone += 1;
                let count = entries.len();
                report
                    .actions
                    .push(format!("lane {id}: redo intent of {count} blocks"));
            }
            // A commit word that matches no valid intent committed nothing that is not
            // already durable: before it was persisted nothing of its intent was applied, and
            // once the clear is persisted the map is.
            IntentState::Cancel { commit, applied, n } => {
                report.undone += 1;
                report.actions.push(format!(
                    "lane {id}: intent commit word {commit:#x} matches no valid intent: cancelled (commit word reset), map left as it was{}",
                    match (applied, n) {
                        (_, 0) => String::new(),
                        (0, n) => format!(" (none of the {n} entries of the intent in the slot applied)"),
                        (_, n) => format!(" (it already holds all {n} entries of the intent in the slot)"),
                    }
                ));
            }
            // No crash leaves these: damage, left in place as evidence, nothing applied.
            IntentState::BadEntries { .. }
            | IntentState::PartlyApplied { .. }
            | IntentState::BadIntent { .. } => {
                report.damage.push(damage_text(case.verdict(id)));
                return;
            }
        }
        domain.store_u64(region, self.ordering.journal, commit_offset, 0);
        domain.commit(region);
        debug_assert_eq!(region.load_u64(commit_offset), 0, "commit word cleared");
    }

    /// Free pages = pool - mapped pages, handed out from low page numbers first.
    fn rebuild_free(&self, scan: &MapScan, report: &mut RecoveryReport) {
        let pages = self.geo.pages;
        debug_assert!(scan.mapped <= pages);
        let mut free: Vec<u32> = Vec::with_capacity((pages - scan.mapped) as usize);
        for page in 0..pages as usize {
            if scan.used[page / 64] & (1 << (page % 64)) == 0 {
                free.push(page as u32);
            }
        }
        // Pop from the end: start with low page numbers (better locality for small images).
        free.reverse();
        report.mapped_blocks = scan.mapped;
        report.free_pages = free.len() as u64;
        assert_eq!(
            report.mapped_blocks + report.free_pages,
            pages,
            "pages are either mapped or free"
        );
        *lock(&self.free) = free;
    }
}

/// The text of a damage verdict (the classifier's, shared with `check`).
fn damage_text(verdict: Option<Verdict>) -> String {
    match verdict {
        Some(Verdict::Damage(text)) => text,
        other => unreachable!("a damage case has a damage verdict, not {other:?}"),
    }
}

/// The result of one pass over the mapping table.
pub struct MapScan {
    /// Bitmap of pages referenced by the map.
    pub used: Vec<u64>,
    pub mapped: u64,
    /// Every entry that fails its check bits, names a page past the end, or names a page
    /// another entry names too.
    pub findings: Vec<String>,
}

pub fn scan_map<R: Region + ?Sized>(region: &R, geo: &Geometry) -> MapScan {
    let mut used = vec![0u64; (geo.pages as usize).div_ceil(64)];
    let mut mapped = 0u64;
    let mut findings = Vec::new();
    for lba in 0..geo.blocks {
        if findings.len() > FINDINGS_MAX {
            findings.truncate(FINDINGS_MAX);
            findings.push(format!(
                "more than {FINDINGS_MAX} findings: stopped listing"
            ));
            break;
        }
        let raw = region.load_u64(geo.map_entry_off(lba));
        let Ok(entry) = Entry::decode(lba, raw) else {
            findings.push(format!(
                "map entry of LBA {lba} is corrupt ({raw:#018x} fails its check bits)"
            ));
            continue;
        };
        let Some(page) = entry.vpn else { continue };
        if page as u64 >= geo.pages {
            findings.push(format!(
                "map entry of LBA {lba} names page {page}, past the last page {}",
                geo.pages - 1
            ));
            continue;
        }
        let (word, bit) = (page as usize / 64, 1u64 << (page % 64));
        if used[word] & bit != 0 {
            findings.push(mapped_twice(region, geo, lba, page));
            continue;
        }
        used[word] |= bit;
        mapped += 1;
    }
    debug_assert!(mapped <= geo.blocks && findings.len() <= FINDINGS_MAX + 1);
    MapScan {
        used,
        mapped,
        findings,
    }
}

/// Damage only: find the earlier owner of `page` by scanning again (bounded by FINDINGS_MAX).
fn mapped_twice<R: Region + ?Sized>(region: &R, geo: &Geometry, lba: u64, page: u32) -> String {
    let first = (0..lba).find(|&earlier| {
        Entry::decode(earlier, region.load_u64(geo.map_entry_off(earlier)))
            .is_ok_and(|entry| entry.vpn == Some(page))
    });
    match first {
        Some(earlier) => format!("page {page} is mapped twice: by LBA {earlier} and LBA {lba}"),
        None => format!("page {page} is mapped twice (LBA {lba} and an earlier one)"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::OpenOptions;
    use super::*;
    use crate::format::{format_region, FormatOptions};
    use crate::hooks::{Action, Event, Hook, Phase, Step};
    use crate::journal::read_paper_intent;
    use crate::layout::Protocol;
    use nvstack_pmem::MmapRegion;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    const BS: usize = 512;

    fn paper_region() -> Arc<MmapRegion> {
        let len = Geometry::region_bytes_for(64, BS as u32, 2).expect("geometry");
        let region = Arc::new(MmapRegion::anonymous(len).expect("anonymous region"));
        let fo = FormatOptions {
            block_bytes: BS as u32,
            lanes: 2,
            protocol: Protocol::Paper,
            ..Default::default()
        };
        format_region(&*region, &fo).expect("format");
        region
    }

    /// A 4-block write of `fill` over LBAs 0..4 stopped (a power failure) at the second map
    /// store: the commit word is durable and two of the four map entries are new.
    fn stopped_in_map(region: &Arc<MmapRegion>, fill: u8) {
        let seen = Arc::new(AtomicUsize::new(0));
        let s = seen.clone();
        let hook: Hook = Arc::new(move |e: &Event| {
            if e.step == Step::Map
                && e.phase == Phase::Stored
                && s.fetch_add(1, Ordering::SeqCst) == 1
            {
                Action::Stop
            } else {
                Action::Continue
            }
        });
        let dev = NvramDisk::open(
            region.clone(),
            OpenOptions {
                hook: Some(hook),
                ..Default::default()
            },
        )
        .expect("open");
        let r = dev.write_atomic(&[0, 1, 2, 3], &vec![fill; 4 * BS]);
        assert!(r.is_err(), "the write was not stopped");
    }

    fn contents(region: &Arc<MmapRegion>) -> Vec<u8> {
        let dev = NvramDisk::open(region.clone(), OpenOptions::default()).expect("open");
        let mut buf = vec![0u8; 4 * BS];
        dev.read_blocks(0, &mut buf).expect("read");
        buf
    }

    /// The stop point leaves a committed intent half applied; recovery redoes it. A flipped
    /// bit in its (durable) commit word must not turn that into a cancel that leaves the
    /// write torn: a high bit keeps the CRC half, so the intent is still committed; a low bit
    /// breaks the match, and with the map holding part of the intent that is damage.
    #[test]
    fn flipped_committed_commit_word_is_never_a_torn_write() {
        for bit in [40u32, 3] {
            let region = paper_region();
            {
                let dev = NvramDisk::open(region.clone(), OpenOptions::default()).expect("open");
                dev.write_atomic(&[0, 1, 2, 3], &vec![0x11; 4 * BS])
                    .expect("write");
            }
            stopped_in_map(&region, 0x22);
            let g = Geometry::compute(region.len(), BS as u32, 2).expect("geometry");
            let slot = (0..2)
                .map(|lane| g.slot_off(lane))
                .find(|&s| region.load_u64(s + PAPER_INTENT_COMMIT) != 0)
                .expect("a slot with a set commit word");
            let commit = region.load_u64(slot + PAPER_INTENT_COMMIT);
            let new = |l: u64| region.load_u64(g.map_entry_off(l));
            let entries = read_paper_intent(&*region, slot).expect("committed").1;
            let applied = entries.iter().filter(|&&(l, n)| new(l) == n).count();
            assert_eq!(applied, 2, "two of the four map entries stored");
            region.store_u64(slot + PAPER_INTENT_COMMIT, commit ^ (1 << bit));
            let opened = NvramDisk::open(region.clone(), OpenOptions::default());
            if bit >= 32 {
                let dev = opened.expect("a committed intent is redone");
                assert_eq!(dev.recovery_report().redone, 1);
                drop(dev);
                assert_eq!(contents(&region), vec![0x22; 4 * BS]);
            } else {
                let Err(e) = opened else {
                    panic!("a half-applied intent under a broken commit word was accepted")
                };
                let msg = e.to_string();
                assert!(msg.contains("matches no valid intent"), "{msg}");
                assert!(msg.contains("holds 2 of the 4 entries"), "{msg}");
            }
        }
    }
}
