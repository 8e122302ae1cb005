//! The weakest fault model that exposes each of nvramdisk's seeded bugs: a fact about the crash
//! model, so it lives with the checker, not in the device's catalogue
//! (nvstack_nvramdisk::bugs, which says what each mistake is and where it does harm).
//!
//! Why these models: under p4 every store is non-temporal, and for NT words M0 and M1 coincide
//! (each word lands or not, independently), so no p4 bug needs M1; M2 adds the disturbance of
//! flushed lines, which needs a flush ordering (p6-clwb). tests/seeded_bugs.rs checks each
//! entry: the bug's workload shows a violation first under this model (not under a weaker
//! one) with the catalogue's ordering, and the same workload without the bug shows none.

use nvstack_nvramdisk::bugs::SeededBug;
use nvstack_pmem::crash::FaultModel;

/// The weakest fault model expected to expose `bug` (M0 < M1 < M2). A match, not a table, so
/// that a bug added to the catalogue cannot compile without its model.
pub fn weakest_model(bug: SeededBug) -> FaultModel {
    use FaultModel::{M0, M2};
    use SeededBug::*;
    match bug {
        FastNoDataFence => M0,
        FastNoMapFence => M0,
        FastRecordNoFence => M0,
        FastNoRecordMulti => M0,
        FastRecordCrcUnchecked => M0,
        FastRecoveryOldOnly => M2,
        FastWordPathUnderFlush => M2,
        FastWriteInPlace => M0,
        DiscardNoFence => M0,
        PaperNoDataFence => M0,
        PaperReplicasOneStep => M2,
        PaperMapBeforeJournal => M2,
        PaperTrustOneReplica => M2,
        // The harm needs another lane to rewrite the block meanwhile, not a flushed line.
        PaperNoResetFence => M0,
        PaperIntentCommitNoFence => M0,
        PaperIntentClearBeforeMap => M0,
        RecoveryClearsBeforeMap => M0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvstack_nvramdisk::bugs::BUGS;
    use nvstack_pmem::ordering::policy_by_name;

    #[test]
    fn every_model_is_m0_or_m2_and_some_need_m2() {
        let models: Vec<FaultModel> = BUGS.iter().map(|b| weakest_model(b.bug)).collect();
        // No p4 bug can need M1 (see the module comment), and M3 is for media faults.
        assert!(models
            .iter()
            .all(|&m| m == FaultModel::M0 || m == FaultModel::M2));
        assert!(models.iter().filter(|&&m| m == FaultModel::M2).count() >= 3);
        // M2 only disturbs flushed lines: a bug that needs it is catalogued under an ordering
        // that flushes lines.
        for b in BUGS
            .iter()
            .filter(|b| weakest_model(b.bug) == FaultModel::M2)
        {
            let p = policy_by_name(b.ordering).expect("a catalogued ordering");
            assert!(
                [p.data, p.map, p.journal].iter().any(|m| !m.word_atomic()),
                "{}",
                b.name
            );
        }
    }
}
