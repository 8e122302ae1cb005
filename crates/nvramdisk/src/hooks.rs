//! Injectable stop points. Every store and every persist of every protocol step reports an
//! [`Event`]; a hook may pause there (interleaving tests) or stop the write as if the power
//! failed (stop-point tests, the demo). With no hook installed an event costs one branch.

use std::sync::Arc;

/// A protocol step (docs/format.md names them the same way).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Step {
    /// Block contents written into the shadow page(s).
    Data,
    /// Paper: the journal's VPN field (the new map entry).
    JournalVpn,
    /// Paper: LBA replica 1.
    JournalL1,
    /// Paper: LBA replica 2.
    JournalL2,
    /// Either protocol: the mapping-table entry (the checkpoint).
    Map,
    /// Paper: L1 reset to NULL.
    ResetL1,
    /// Paper: L2 reset to NULL.
    ResetL2,
    /// Paper, multi-block: the intent record (entries and checksum).
    IntentRecord,
    /// Paper, multi-block: the intent's commit word set.
    IntentCommit,
    /// Paper, multi-block: the intent's commit word cleared.
    IntentClear,
    /// Fast: the checksummed redo record.
    Record,
    /// Fast: the record's sequence word cleared (fenced before the write returns).
    RecordClear,
    /// A reader between its map lookup and its copy of the page.
    ReadLookup,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Phase {
    /// The store was issued (not yet durable).
    Stored,
    /// The store was persisted (its commit's fence returned).
    Persisted,
}

#[derive(Clone, Copy, Debug)]
pub struct Event {
    pub step: Step,
    pub phase: Phase,
    /// The bytes this step stored (for a hook that writes garbage into them).
    pub off: u64,
    pub len: u64,
    /// The logical block concerned (the first, for multi-block steps).
    pub lba: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Continue,
    /// Abandon the write here, as if power failed: nothing after this point happens, every
    /// other thread's operation in flight stops at its next step too, and the device refuses
    /// further I/O until it is reopened (which recovers).
    Stop,
}

pub type Hook = Arc<dyn Fn(&Event) -> Action + Send + Sync>;
