//! The oracle: what each block may read after a crash. It knows nothing of the protocols:
//! only which operations were in flight or acknowledged at the crash point, and what the layer
//! promises of them ([`Promise`]). Each promise has its judge in a module of its own
//! (`per_operation.rs`, `epochs.rs`, `ordered.rs`), which uses the types here and nothing of
//! the others; `block.rs` makes and decodes the blocks all of them judge.

mod block;
mod epochs;
mod ordered;
mod per_operation;

pub use block::{block, decode_block, fill_block, BlockError};
pub use epochs::{Epochs, Punch};
pub use per_operation::OracleRules;

use nvstack_core::blockdev::BlockDevice;
use std::collections::BTreeMap;

/// One operation of a workload as the oracle sees it.
#[derive(Clone, Debug)]
pub struct OpRecord {
    /// Blocks and what the operation makes them (None: discarded, reads zeros).
    pub blocks: Vec<(u64, Option<u64>)>,
    /// All blocks together or none (writes of several blocks; each discard chunk).
    pub atomic: bool,
    /// Event index when it started and when it returned (acknowledged).
    pub start: usize,
    pub ack: usize,
}

/// What a layer promises of its blocks after a crash: the oracle that judges it. The layer
/// chooses it (its recorder builds the workload's [`Expect`] with it).
#[derive(Clone, Debug)]
pub enum Promise {
    /// Every operation is durable when it returns; one in flight is all old or all new, and
    /// together if atomic under the rules (nvramdisk).
    PerOperation(OracleRules),
    /// Durable at commits only: the device reads as after one commit between the last
    /// acknowledged and the last begun (nvcache UBJ). The operations then only name the blocks
    /// touched.
    Epochs(Epochs),
    /// Each operation durable at its own acknowledgement, judged per block in program order:
    /// a block reads its last acknowledged value or a later one (the write cache: admitted
    /// writes on return, bypassed ones at the next flush).
    Ordered,
}

/// The expectations of one workload: what the blocks held before it, its operations, and the
/// promise they are judged by.
#[derive(Clone, Debug)]
pub struct Expect {
    /// What each block held, durably, before the workload.
    pub initial: BTreeMap<u64, Option<u64>>,
    pub ops: Vec<OpRecord>,
    pub promise: Promise,
}

/// A violation found by the oracle.
#[derive(Clone, Debug)]
pub struct Finding {
    pub lba: Option<u64>,
    pub what: String,
}

impl Expect {
    /// A workload not yet run, from `initial`, judged by `promise`.
    pub fn new(initial: BTreeMap<u64, Option<u64>>, promise: Promise) -> Expect {
        Expect {
            initial,
            ops: Vec::new(),
            promise,
        }
    }

    /// Every block the workload or its setup touched.
    pub fn touched(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.initial.keys().copied().collect();
        for op in &self.ops {
            v.extend(op.blocks.iter().map(|b| b.0));
        }
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Whether an operation or a commit starts or ends at event index `k` (where what the
    /// oracle allows changes).
    pub fn boundary_at(&self, k: usize) -> bool {
        self.ops.iter().any(|o| o.start == k || o.ack == k)
            || matches!(&self.promise, Promise::Epochs(e) if e.boundary_at(k))
    }

    /// Check a recovered device against the crash at event index `crash`.
    pub fn verify<D: BlockDevice>(&self, dev: &D, crash: usize) -> Result<(), Finding> {
        let bs = dev.block_bytes() as usize;
        let mut buf = vec![0u8; bs];
        let mut got: BTreeMap<u64, Option<u64>> = BTreeMap::new();
        for lba in self.touched() {
            dev.read(lba, &mut buf).map_err(|e| Finding {
                lba: Some(lba),
                what: format!("read failed: {e}"),
            })?;
            let v = self.decode_after(lba, &buf, crash).map_err(|w| Finding {
                lba: Some(lba),
                what: w.to_string(),
            })?;
            got.insert(lba, v);
        }
        self.judge(&got, crash)
    }

    /// Block `lba` as read back after a crash at event index `crash`: its version (None:
    /// zeros), or under the epoch promise, for a block a long discard was punching, the
    /// version its old sectors carry (`Epochs::partly_punched`); Err says why it is neither.
    pub fn decode_after(
        &self,
        lba: u64,
        buf: &[u8],
        crash: usize,
    ) -> Result<Option<u64>, BlockError> {
        let decoded = decode_block(lba, buf);
        match &self.promise {
            Promise::Epochs(e) => decoded.or_else(|w| e.partly_punched(lba, buf, crash).ok_or(w)),
            Promise::PerOperation(_) | Promise::Ordered => decoded,
        }
    }

    /// Judge what was read back after a crash at event index `crash`, by the promise.
    pub fn judge(&self, got: &BTreeMap<u64, Option<u64>>, crash: usize) -> Result<(), Finding> {
        debug_assert!(
            self.ops.iter().all(|op| op.start <= op.ack),
            "an operation returns after it starts"
        );
        match &self.promise {
            Promise::PerOperation(rules) => {
                per_operation::judge(rules, &self.initial, &self.ops, got, crash)
            }
            Promise::Epochs(epochs) => epochs.judge(got, crash),
            Promise::Ordered => ordered::judge(&self.initial, &self.ops, got, crash),
        }
    }
}

/// A block's value as the reports word it.
fn show(v: Option<u64>) -> String {
    match v {
        None => "zeros".into(),
        Some(v) => format!("version {v}"),
    }
}
