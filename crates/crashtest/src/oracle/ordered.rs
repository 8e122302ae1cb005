//! The ordered promise ([`Promise::Ordered`](super::Promise), the write cache): a layer whose
//! writes become durable at different times (an admitted write on return, a bypassed one at
//! the next completed flush). Operations are taken in program order, each with the event at
//! which it was acknowledged durable:
//!
//! - a block reads the value of its last operation acknowledged by the crash (the initial
//!   value if none), or the value of a later operation on it that had started: never an older
//!   value than its last durable write, never a value no operation wrote;
//! - an atomic operation in flight is all or nothing: its blocks read its value (or a later
//!   one) all together, or none of them does.

use super::{show, Finding, OpRecord};
use std::collections::BTreeMap;

/// Judge what was read back after a crash at event index `crash`.
pub(super) fn judge(
    initial: &BTreeMap<u64, Option<u64>>,
    ops: &[OpRecord],
    got: &BTreeMap<u64, Option<u64>>,
    crash: usize,
) -> Result<(), Finding> {
    let e = Ops { initial, ops };
    for (&lba, &g) in got {
        let allowed = e.allowed(lba, crash);
        if !allowed.contains(&g) {
            let want: Vec<String> = allowed.iter().map(|&v| show(v)).collect();
            return Err(Finding {
                lba: Some(lba),
                what: format!(
                    "reads {} but may only read {} (its last durable write, then later ones \
                     in flight)",
                    show(g),
                    want.join(" or ")
                ),
            });
        }
    }
    for (i, op) in e.ops.iter().enumerate() {
        let in_flight = op.start <= crash && crash < op.ack;
        if in_flight && op.atomic && op.blocks.len() > 1 {
            e.atomic(i, op, got, crash)?;
        }
    }
    Ok(())
}

/// A workload's operations in program order, and what their blocks held before.
struct Ops<'a> {
    initial: &'a BTreeMap<u64, Option<u64>>,
    ops: &'a [OpRecord],
}

impl Ops<'_> {
    /// The values `lba` may read: its last durable value, then every later started one.
    fn allowed(&self, lba: u64, crash: usize) -> Vec<Option<u64>> {
        let mut allowed = vec![self.initial.get(&lba).copied().unwrap_or(None)];
        for op in self.ops {
            if op.start > crash {
                break; // program order: no later operation had started
            }
            for &(l, v) in &op.blocks {
                if l != lba {
                    continue;
                }
                if op.ack <= crash {
                    allowed.clear();
                }
                allowed.push(v);
            }
        }
        allowed
    }

    /// Operation `i`, atomic and in flight: its blocks are all at-or-after it, or all before it.
    fn atomic(
        &self,
        i: usize,
        op: &OpRecord,
        got: &BTreeMap<u64, Option<u64>>,
        crash: usize,
    ) -> Result<(), Finding> {
        let (mut after, mut before) = (0, 0);
        for &(l, _) in &op.blocks {
            let Some(&g) = got.get(&l) else { continue };
            let mut later = Vec::new();
            let mut earlier = vec![self.initial.get(&l).copied().unwrap_or(None)];
            for (j, o) in self
                .ops
                .iter()
                .enumerate()
                .filter(|(_, o)| o.start <= crash)
            {
                for &(_, v) in o.blocks.iter().filter(|b| b.0 == l) {
                    if j < i {
                        earlier.push(v);
                    } else {
                        later.push(v);
                    }
                }
            }
            match (later.contains(&g), earlier.contains(&g)) {
                (true, false) => after += 1,
                (false, true) => before += 1,
                _ => {} // both (the same value) or neither (judged per block)
            }
        }
        if after > 0 && before > 0 {
            return Err(Finding {
                lba: op.blocks.first().map(|b| b.0),
                what: format!(
                    "atomic operation on {} blocks is torn: {after} of them new, {before} old",
                    op.blocks.len()
                ),
            });
        }
        Ok(())
    }
}
