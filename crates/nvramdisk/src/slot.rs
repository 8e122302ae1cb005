//! What a lane's journal slot holds at open, classified once: recovery acts on the class and
//! `nvstack check` reports it, so the two can never disagree (docs/format.md 6.1 to 6.4, 8).
//!
//! # The cases
//!
//! Every slot falls in exactly one row per part (a paper slot has two parts, its replicas and
//! its intent, judged apart; a fast slot one). "Pending" is a crash state that recovery
//! finishes or cancels; "damage" is a state no crash produces, which stops the open (exit 1)
//! and which `check` lists as a finding.
//!
//! | case | what the slot holds | verdict | recovery does |
//! |---|---|---|---|
//! | F0 | fast: both copies' seq words 0 | clean | nothing |
//! | F1 | fast: a seq word set, no copy complete (count or CRC fails) | pending | retire the record: the crash came while it was written, so nothing of it was applied |
//! | F2 | fast: a complete copy, every entry a journaled entry of its LBA | pending | make every entry new where the map word is not (old, or torn by a write-back), then retire |
//! | F3 | fast: a complete copy with an entry that is not | damage | nothing: applying part would break all or nothing; the record stays as evidence |
//! | R0 | paper: L1 = L2 = NULL | clean | nothing (VPN is ignored) |
//! | R1 | paper: L1 = L2 = a valid LBA, VPN a journaled entry of it (the redo predicate) | pending | map[L1] := VPN (S6 to S8), then reset the replicas |
//! | R2 | paper: a replica set, the predicate false, a state a crash leaves | pending | reset the replicas, map untouched (S1 to S5, S9 to S11) |
//! | R3 | paper: under word-atomic journal stores, both replicas garbage (neither NULL nor an LBA), or equal valid LBAs under a VPN the predicate rejects | damage | nothing; the replicas stay as evidence |
//! | I0 | paper intent: commit word 0 | clean | nothing |
//! | I1 | the commit word matches a valid intent of journaled entries | pending | store every entry, then clear the commit word (I4 to I7) |
//! | I2 | the commit word matches a valid intent, an entry impossible | damage | nothing |
//! | I3 | the commit word matches no valid intent; the map holds none or all of the slot's intent (or no intent was ever written) | pending | clear the commit word, map untouched |
//! | I4 | as I3, but the map holds part of the slot's intent | damage | nothing |
//! | I5 | the commit word is set over an intent that fails its count or CRC | damage | nothing |
//!
//! R3 depends on the persist method: a crash leaves at most the one word being stored in an
//! unexpected state (Table 2's X, taken to be any value) only when journal stores are
//! word-atomic (non-temporal). Then both replicas can never be garbage at once, and L1 = L2
//! means VPN was persisted before them. A flushed journal line can be disturbed as a whole by
//! its write-back (seed 6.2), so under a flush method those states are crash states: R2.

use super::bugs::SeededBug;
use super::entry::Entry;
use super::journal::{
    fast_slot_busy, read_fast_record_with, read_paper_intent_body, RecordEntries, LBA_NULL,
    PAPER_INTENT, PAPER_INTENT_COMMIT, PAPER_L1, PAPER_L2, PAPER_VPN,
};
use super::layout::{Geometry, Protocol};
use nvstack_pmem::Region;

/// A fast slot (F0 to F3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FastCase {
    Idle,
    Torn,
    Redo { seq: u64, entries: RecordEntries },
    BadEntry { seq: u64, lba: u64, new: u64 },
}

/// A paper slot's replicas (R0 to R3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplicaCase {
    Idle,
    Redo {
        lba: u64,
        vpn: u64,
    },
    /// `applied`: a replica that is a valid LBA whose map entry already equals VPN (S9 to
    /// S11: the outcome is new), if any.
    Reset {
        l1: u64,
        l2: u64,
        applied: Option<u64>,
    },
    Impossible {
        vpn: u64,
        l1: u64,
        l2: u64,
    },
}

/// A paper slot's intent (I0 to I5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IntentState {
    /// I0: commit word 0.
    Idle,
    /// I1: recovery redoes it.
    Redo {
        commit: u64,
        entries: Vec<(u64, u64)>,
    },
    /// I2: damage.
    BadEntries { commit: u64 },
    /// I3: a commit word torn by a write-back (I3: the map holds none of the intent; I7: all
    /// of it) or a flipped bit in a clear commit word. `applied` of `n` entries of the slot's
    /// intent are in the map (0 or n; n = 0 when no intent was ever written in the slot).
    Cancel {
        commit: u64,
        applied: usize,
        n: usize,
    },
    /// I4: a committed update whose commit word was damaged midway, or a flipped commit word
    /// over a stale intent partly superseded. No crash produces it: damage.
    PartlyApplied {
        commit: u64,
        applied: usize,
        n: usize,
    },
    /// I5: an intent was written in this slot, so a crash never leaves this: damage.
    BadIntent { commit: u64 },
}

/// One slot's classification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotState {
    Fast(FastCase),
    Paper {
        replicas: ReplicaCase,
        intent: IntentState,
    },
}

/// What `check` says of a case: the verdict and its one text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pending(String),
    Damage(String),
}

/// A value a journal may legitimately hold for `lba`'s map entry: the LBA is in range and the
/// word decodes as an entry of it with generation >= 1 (every update moves the generation
/// past 0, "never written") and a page in range.
pub fn journaled_entry_ok(geo: &Geometry, lba: u64, raw: u64) -> bool {
    lba < geo.blocks
        && Entry::decode(lba, raw)
            .is_ok_and(|e| e.gen != 0 && e.vpn.is_none_or(|v| (v as u64) < geo.pages))
}

/// The paper protocol's redo predicate: L1 = L2 = a valid LBA and the VPN field holds a
/// journaled entry for it.
pub fn paper_redo_target(geo: &Geometry, vpn: u64, l1: u64, l2: u64) -> Option<u64> {
    (l1 == l2 && journaled_entry_ok(geo, l1, vpn)).then_some(l1)
}

/// How to classify: the image's journal persist method, and the seeded bug (recovery only;
/// `check` passes None).
#[derive(Clone, Copy, Debug)]
pub struct Classify {
    pub protocol: Protocol,
    pub journal_word_atomic: bool,
    pub bug: Option<SeededBug>,
}

/// Classify lane `lane`'s slot (the table above).
pub fn classify<R: Region + ?Sized>(
    region: &R,
    geo: &Geometry,
    how: Classify,
    lane: u32,
) -> SlotState {
    let slot = geo.slot_off(lane);
    match how.protocol {
        Protocol::Fast => SlotState::Fast(fast_case(region, geo, slot, how.bug)),
        Protocol::Paper => SlotState::Paper {
            replicas: replica_case(region, geo, slot, how),
            intent: paper_intent_state(region, geo, slot),
        },
    }
}

fn fast_case<R: Region + ?Sized>(
    region: &R,
    geo: &Geometry,
    slot: u64,
    bug: Option<SeededBug>,
) -> FastCase {
    if !fast_slot_busy(region, slot) {
        return FastCase::Idle;
    }
    // Seeded bug fast-record-crc-unchecked: the checksum is not checked.
    let check_crc = bug != Some(SeededBug::FastRecordCrcUnchecked);
    let Some((seq, entries)) = read_fast_record_with(region, slot, check_crc) else {
        return FastCase::Torn;
    };
    debug_assert!(seq != 0 && !entries.is_empty(), "a complete record");
    match entries
        .iter()
        .find(|&&(lba, _, new)| !journaled_entry_ok(geo, lba, new))
    {
        Some(&(lba, _, new)) => FastCase::BadEntry { seq, lba, new },
        None => FastCase::Redo { seq, entries },
    }
}

fn replica_case<R: Region + ?Sized>(
    region: &R,
    geo: &Geometry,
    slot: u64,
    how: Classify,
) -> ReplicaCase {
    let vpn = region.load_u64(slot + PAPER_VPN);
    let l1 = region.load_u64(slot + PAPER_L1);
    let l2 = region.load_u64(slot + PAPER_L2);
    if l1 == LBA_NULL && l2 == LBA_NULL {
        return ReplicaCase::Idle;
    }
    debug_assert!(how.protocol == Protocol::Paper);
    let target = if how.bug == Some(SeededBug::PaperTrustOneReplica) {
        // Seeded bug paper-trust-one-replica: redo on L1 alone, L2 ignored.
        journaled_entry_ok(geo, l1, vpn).then_some(l1)
    } else {
        paper_redo_target(geo, vpn, l1, l2)
    };
    if let Some(lba) = target {
        return ReplicaCase::Redo { lba, vpn };
    }
    let garbage = |l: u64| l != LBA_NULL && l >= geo.blocks;
    let valid = |l: u64| l != LBA_NULL && l < geo.blocks;
    // Two different valid LBAs are not here: S5 and S9 leave one replica as X, any value, a
    // valid LBA included (the stop-point tests reach S5 with L2 torn to 0, which is LBA 0).
    let impossible = (garbage(l1) && garbage(l2)) || (l1 == l2 && valid(l1));
    if impossible && how.journal_word_atomic {
        return ReplicaCase::Impossible { vpn, l1, l2 };
    }
    let applied = [l1, l2]
        .into_iter()
        .find(|&l| valid(l) && region.load_u64(geo.map_entry_off(l)) == vpn);
    debug_assert!(applied.is_none_or(|lba| lba == l1 || lba == l2));
    ReplicaCase::Reset { l1, l2, applied }
}

/// Classify a paper slot's intent (I0 to I5).
pub fn paper_intent_state<R: Region + ?Sized>(
    region: &R,
    geo: &Geometry,
    slot: u64,
) -> IntentState {
    let commit = region.load_u64(slot + PAPER_INTENT_COMMIT);
    if commit == 0 {
        return IntentState::Idle;
    }
    let Some((crc, entries)) = read_paper_intent_body(region, slot) else {
        // An intent area never written (format zeroes it) holds nothing to apply.
        if region.load_u64(slot + PAPER_INTENT) == 0 {
            return IntentState::Cancel {
                commit,
                applied: 0,
                n: 0,
            };
        }
        return IntentState::BadIntent { commit };
    };
    if commit as u32 == crc {
        return if entries
            .iter()
            .all(|&(lba, new)| journaled_entry_ok(geo, lba, new))
        {
            IntentState::Redo { commit, entries }
        } else {
            IntentState::BadEntries { commit }
        };
    }
    let n = entries.len();
    let applied = entries
        .iter()
        .filter(|&&(lba, new)| lba < geo.blocks && region.load_u64(geo.map_entry_off(lba)) == new)
        .count();
    debug_assert!(applied <= n);
    if applied == 0 || applied == n {
        IntentState::Cancel { commit, applied, n }
    } else {
        IntentState::PartlyApplied { commit, applied, n }
    }
}

impl FastCase {
    /// The case's verdict for lane `lane` (None: clean).
    pub fn verdict(&self, lane: u32) -> Option<Verdict> {
        Some(match self {
            FastCase::Idle => return None,
            FastCase::Torn => Verdict::Pending(format!(
                "lane {lane}: incomplete record (interrupted while written): recovery will discard it"
            )),
            FastCase::Redo { seq, entries } => Verdict::Pending(format!(
                "lane {lane}: record {seq} of {} blocks: recovery makes new every entry not yet holding its new value (torn words included)",
                entries.len()
            )),
            FastCase::BadEntry { seq, lba, new } => Verdict::Damage(format!(
                "journal record of lane {lane} (seq {seq}): checksum holds but the entry for LBA {lba} ({new:#x}) is out of range or no journaled entry"
            )),
        })
    }
}

impl ReplicaCase {
    pub fn verdict(&self, lane: u32) -> Option<Verdict> {
        Some(match self {
            ReplicaCase::Idle => return None,
            ReplicaCase::Redo { lba, .. } => Verdict::Pending(format!(
                "lane {lane}: write of LBA {lba} journaled (L1 = L2): recovery will redo it"
            )),
            ReplicaCase::Reset { l1, l2, .. } => Verdict::Pending(format!(
                "lane {lane}: interrupted journal update (L1 {l1:#x}, L2 {l2:#x}): recovery will reset it"
            )),
            ReplicaCase::Impossible { vpn, l1, l2 } => Verdict::Damage(format!(
                "journal record of lane {lane}: VPN {vpn:#x}, L1 {l1:#x}, L2 {l2:#x} is no state of Table 2 (with non-temporal journal stores no crash produces it)"
            )),
        })
    }
}

impl IntentState {
    pub fn verdict(&self, lane: u32) -> Option<Verdict> {
        Some(match self {
            IntentState::Idle => return None,
            IntentState::Redo { entries, .. } => Verdict::Pending(format!(
                "lane {lane}: committed intent of {} blocks: recovery will redo it",
                entries.len()
            )),
            IntentState::Cancel { commit, .. } => Verdict::Pending(format!(
                "lane {lane}: intent commit word {commit:#x} matches no valid intent (a torn or flipped commit word): recovery will cancel it"
            )),
            IntentState::BadEntries { .. } => Verdict::Damage(format!(
                "intent of lane {lane}: committed, but an entry names an LBA or page out of range"
            )),
            IntentState::PartlyApplied { commit, applied, n } => Verdict::Damage(format!(
                "intent of lane {lane}: commit word {commit:#x} matches no valid intent, but the map holds {applied} of the {n} entries of the intent in the slot"
            )),
            IntentState::BadIntent { commit } => Verdict::Damage(format!(
                "intent of lane {lane}: commit word {commit:#x} set but the intent fails its checksum"
            )),
        })
    }
}

impl SlotState {
    /// Every verdict of the slot, in the order recovery acts (paper: replicas, then intent).
    pub fn verdicts(&self, lane: u32) -> Vec<Verdict> {
        match self {
            SlotState::Fast(case) => case.verdict(lane).into_iter().collect(),
            SlotState::Paper { replicas, intent } => {
                let verdicts = [replicas.verdict(lane), intent.verdict(lane)];
                verdicts.into_iter().flatten().collect()
            }
        }
    }
}
