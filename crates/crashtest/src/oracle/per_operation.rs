//! The per-operation promise ([`Promise::PerOperation`](super::Promise), nvramdisk): every
//! operation is durable once it returned, and one in flight at the crash reads all old or all
//! new (together, if atomic); nothing else changes.

use super::{show, Finding, OpRecord};
use std::collections::BTreeMap;

/// What a layer durable on return promises of its multi-block operations after a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OracleRules {
    /// Largest number of blocks one write covers all-or-nothing (64 for nvramdisk; 1 for a
    /// layer without atomic multi-block writes). An operation in flight over 2 to this many
    /// blocks reads all old or all new after a crash, together.
    pub atomic_unit_blocks: u64,
    /// A discard of several blocks (within the atomic unit) is all-or-nothing too.
    pub atomic_discard: bool,
}

impl OracleRules {
    /// Whether an operation on `blocks` blocks (a discard if `discard`) is all-or-nothing.
    pub fn atomic(&self, blocks: u64, discard: bool) -> bool {
        blocks > 1 && blocks <= self.atomic_unit_blocks && (!discard || self.atomic_discard)
    }
}

/// Judge what was read back after a crash at event index `crash`. The rules: an acknowledged
/// write survives; an operation in flight at the crash is all old or all new (together, if
/// atomic); nothing else changes.
pub(super) fn judge(
    rules: &OracleRules,
    initial: &BTreeMap<u64, Option<u64>>,
    ops: &[OpRecord],
    got: &BTreeMap<u64, Option<u64>>,
    crash: usize,
) -> Result<(), Finding> {
    // The recorder marks an operation atomic only within the layer's promise.
    debug_assert!(
        ops.iter()
            .all(|op| !op.atomic || op.blocks.len() as u64 <= rules.atomic_unit_blocks),
        "an atomic operation fits the layer's atomic unit"
    );
    let at = AtCrash::new(initial, ops, crash);
    at.judge_blocks(got)?;
    at.judge_atomic(got)
}

/// What the blocks may hold after a crash at one event index.
struct AtCrash<'a> {
    /// Each block's value once every operation acknowledged by the crash is applied.
    settled: BTreeMap<u64, Option<u64>>,
    /// The operations started and not yet acknowledged at the crash.
    in_flight: Vec<&'a OpRecord>,
    /// The value an operation in flight writes to each of its blocks.
    allowed_new: BTreeMap<u64, Option<u64>>,
}

impl<'a> AtCrash<'a> {
    /// What the blocks may hold after a crash at event index `crash`.
    fn new(initial: &BTreeMap<u64, Option<u64>>, ops: &'a [OpRecord], crash: usize) -> Self {
        // Per block: the value after the last acknowledged op, and the in-flight candidate.
        let mut settled: BTreeMap<u64, Option<u64>> = initial.clone();
        let mut in_flight: Vec<&OpRecord> = Vec::new();
        for op in ops {
            if op.ack <= crash {
                for &(l, v) in &op.blocks {
                    settled.insert(l, v);
                }
            } else if op.start <= crash {
                in_flight.push(op);
            }
        }
        let mut allowed_new: BTreeMap<u64, Option<u64>> = BTreeMap::new();
        for op in &in_flight {
            for &(l, v) in &op.blocks {
                allowed_new.insert(l, v);
            }
        }
        debug_assert!(
            in_flight
                .iter()
                .all(|op| op.start <= crash && crash < op.ack),
            "in flight: started, not yet acknowledged"
        );
        AtCrash {
            settled,
            in_flight,
            allowed_new,
        }
    }

    /// The value each block held before any operation in flight.
    fn old(&self, lba: u64) -> Option<u64> {
        self.settled.get(&lba).copied().unwrap_or(None)
    }

    /// Each block reads its settled (old) value, or the new value of an operation in flight.
    fn judge_blocks(&self, got: &BTreeMap<u64, Option<u64>>) -> Result<(), Finding> {
        for (&lba, &g) in got {
            let old = self.old(lba);
            let new = self.allowed_new.get(&lba);
            if g == old || new.is_some_and(|&n| n == g) {
                continue;
            }
            return Err(Finding {
                lba: Some(lba),
                what: match new {
                    Some(n) => format!(
                        "reads {} but may only read {} (old) or {} (new, in flight)",
                        show(g),
                        show(old),
                        show(*n)
                    ),
                    None => format!(
                        "reads {} but must read {} (acknowledged or untouched)",
                        show(g),
                        show(old)
                    ),
                },
            });
        }
        Ok(())
    }

    /// An atomic operation in flight reads all old or all new, together. Blocks whose new
    /// value equals the old one say nothing about the side and do not count.
    fn judge_atomic(&self, got: &BTreeMap<u64, Option<u64>>) -> Result<(), Finding> {
        for op in self
            .in_flight
            .iter()
            .filter(|o| o.atomic && o.blocks.len() > 1)
        {
            let sides: Vec<bool> = op
                .blocks
                .iter()
                .filter_map(|&(l, n)| {
                    let g = *got.get(&l)?;
                    (self.old(l) != n).then_some(g == n)
                })
                .collect();
            let new = sides.iter().filter(|&&s| s).count();
            let old = sides.len() - new;
            if new > 0 && old > 0 {
                return Err(Finding {
                    lba: op.blocks.first().map(|b| b.0),
                    what: format!(
                        "atomic operation on {} blocks is torn: {new} of them new, {old} old",
                        op.blocks.len(),
                    ),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NVRAM: OracleRules = OracleRules {
        atomic_unit_blocks: 64,
        atomic_discard: true,
    };

    #[test]
    fn atomicity_follows_the_layers_rules() {
        assert!(!NVRAM.atomic(1, false), "one block: nothing to tear");
        assert!(NVRAM.atomic(8, false));
        assert!(NVRAM.atomic(3, true));
        assert!(!NVRAM.atomic(65, false), "past the unit");
        let plain = OracleRules {
            atomic_unit_blocks: 1,
            atomic_discard: false,
        };
        assert!(!plain.atomic(2, false));
        assert!(!plain.atomic(2, true));
    }

    #[test]
    fn judge_rules() {
        let initial = BTreeMap::from([(1, Some(1)), (2, None)]);
        let ops = [OpRecord {
            blocks: vec![(1, Some(2)), (2, Some(2))],
            atomic: true,
            start: 10,
            ack: 20,
        }];
        let judge = |a: Option<u64>, b: Option<u64>, crash: usize| {
            judge(
                &NVRAM,
                &initial,
                &ops,
                &BTreeMap::from([(1, a), (2, b)]),
                crash,
            )
        };
        assert!(judge(Some(1), None, 5).is_ok());
        assert!(
            judge(Some(2), None, 5).is_err(),
            "nothing in flight before the op starts"
        );
        assert!(judge(Some(2), Some(2), 15).is_ok());
        assert!(judge(Some(1), None, 15).is_ok());
        assert!(judge(Some(2), None, 15).is_err(), "torn atomic write");
        assert!(judge(Some(1), None, 20).is_err(), "acknowledged write lost");
        assert!(judge(Some(2), Some(2), 25).is_ok());
    }
}
