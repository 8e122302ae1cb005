//! Seeded bugs: deliberate protocol mistakes behind a runtime switch that only the crash
//! checker sets (`nvstack crashtest --seeded-bug NAME`). They live in the release binary so
//! that the checker is shown to catch each with its generic oracle, under the weakest fault
//! model that exposes it. With no bug selected each costs one branch on an `Option`.
//!
//! This is the device's side of the catalogue: what each mistake is and under which protocol
//! and ordering it can do harm. Which fault model exposes it is a fact about the crash model,
//! kept by the checker (nvstack-crashtest, `target::nvramdisk::weakest`), so the device
//! knows nothing of the crash model.

use super::layout::Protocol;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum SeededBug {
    FastNoDataFence,
    FastNoMapFence,
    FastRecordNoFence,
    FastNoRecordMulti,
    FastRecordCrcUnchecked,
    FastRecoveryOldOnly,
    FastWordPathUnderFlush,
    FastWriteInPlace,
    DiscardNoFence,
    PaperNoDataFence,
    PaperReplicasOneStep,
    PaperMapBeforeJournal,
    PaperTrustOneReplica,
    PaperNoResetFence,
    PaperIntentCommitNoFence,
    PaperIntentClearBeforeMap,
    RecoveryClearsBeforeMap,
}

/// What a seeded bug is, and where the checker should catch it.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct BugInfo {
    pub bug: SeededBug,
    pub name: &'static str,
    pub what: &'static str,
    pub protocol: Protocol,
    /// The ordering policy under which the mistake can do harm.
    pub ordering: &'static str,
    /// Only a crash inside recovery (depth 2) exposes it.
    pub needs_depth2: bool,
}

const fn b(
    bug: SeededBug,
    name: &'static str,
    what: &'static str,
    protocol: Protocol,
    ordering: &'static str,
    needs_depth2: bool,
) -> BugInfo {
    BugInfo {
        bug,
        name,
        what,
        protocol,
        ordering,
        needs_depth2,
    }
}

use Protocol::{Fast, Paper};
use SeededBug::*;

/// The catalogue. nvstack-crashtest's tests/seeded_bugs.rs checks each entry: the bug changes
/// what reaches the region, its workload shows a violation under `ordering` (first under the
/// checker's weakest model for it), and the same workload without the bug shows none.
pub const BUGS: [BugInfo; 17] = [
    b(FastNoDataFence, "fast-no-data-fence", "fast: the fence between the data and the map entry is missing", Fast, "p4", false),
    b(FastNoMapFence, "fast-no-map-fence", "fast: the write returns before the map entry is fenced", Fast, "p4", false),
    b(FastRecordNoFence, "fast-record-no-fence", "fast: no fence between the redo record and the map stores", Fast, "p4", false),
    b(FastNoRecordMulti, "fast-no-record-multi", "fast: a multi-block write stores its map entries with no redo record", Fast, "p4", false),
    b(FastRecordCrcUnchecked, "fast-record-crc-unchecked", "fast: recovery applies a record without checking its checksum", Fast, "p4", false),
    b(FastRecoveryOldOnly, "fast-recovery-old-only", "fast: recovery applies a record entry only where the map still holds the old value (no repair of a torn word)", Fast, "p6-clwb", false),
    b(FastWordPathUnderFlush, "fast-word-path-under-flush", "fast: single-block writes skip the record even when the map is written back by line flushes", Fast, "p6-clwb", false),
    b(FastWriteInPlace, "fast-write-in-place", "fast: the new data overwrites the block's current page instead of a shadow page", Fast, "p4", false),
    b(DiscardNoFence, "discard-no-fence", "a discard returns before its map entry is fenced", Fast, "p4", false),
    b(PaperNoDataFence, "paper-no-data-fence", "paper: the shadow page is written with cached stores that are never flushed, so it is not persisted before the journal (nor after)", Paper, "p4", false),
    b(PaperReplicasOneStep, "paper-replicas-one-step", "paper: L1, L2 and the map entry are persisted in one step", Paper, "p6-clwb", false),
    b(PaperMapBeforeJournal, "paper-map-before-journal", "paper: the map entry is updated before the journal", Paper, "p6-clwb", false),
    b(PaperTrustOneReplica, "paper-trust-one-replica", "paper: recovery redoes from L1 alone, without comparing L2", Paper, "p6-clwb", false),
    b(PaperNoResetFence, "paper-no-reset-fence", "paper: the replica resets are not persisted before the write returns (harm needs another lane to rewrite the block meanwhile)", Paper, "p6-clwb", false),
    b(PaperIntentCommitNoFence, "paper-intent-commit-no-fence", "paper: no fence between the intent's commit word and the map stores (one fence persists both)", Paper, "p4", false),
    b(PaperIntentClearBeforeMap, "paper-intent-clear-before-map", "paper: the intent's commit word is cleared before the map entries are persisted", Paper, "p4", false),
    b(RecoveryClearsBeforeMap, "recovery-clears-before-map", "fast: recovery clears the record before its map stores are persisted", Fast, "p4", true),
];

impl SeededBug {
    /// The bug is in recovery (it must also act when the checker recovers an image).
    pub fn in_recovery(self) -> bool {
        matches!(
            self,
            SeededBug::FastRecordCrcUnchecked
                | SeededBug::FastRecoveryOldOnly
                | SeededBug::PaperTrustOneReplica
                | SeededBug::RecoveryClearsBeforeMap
        )
    }
}

pub fn by_name(name: &str) -> Option<BugInfo> {
    BUGS.iter().find(|b| b.name == name).copied()
}

pub fn info(bug: SeededBug) -> BugInfo {
    *BUGS
        .iter()
        .find(|b| b.bug == bug)
        .expect("every bug is listed")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_is_consistent() {
        assert!(BUGS.len() >= 15);
        for (i, x) in BUGS.iter().enumerate() {
            assert_eq!(by_name(x.name).map(|y| y.bug), Some(x.bug));
            assert!(BUGS[..i].iter().all(|y| y.bug != x.bug && y.name != x.name));
            assert!(nvstack_pmem::ordering::POLICIES
                .iter()
                .any(|p| p.name == x.ordering));
        }
    }
}
