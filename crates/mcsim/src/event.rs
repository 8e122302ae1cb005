//! The memory controller's event log: what the tests check the model's properties on.

/// What the memory controller did, in the order it did it (`Config::log_events`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Log {
    WriteAccepted {
        id: u64,
        q: u32,
        t: u64,
    },
    WriteIssued {
        id: u64,
        q: u32,
        t: u64,
    },
    WriteDone {
        id: u64,
        t: u64,
    },
    /// A commit locked its sub-queues (`queues` a bit set).
    CommitStart {
        commit: u64,
        queues: u32,
        t: u64,
    },
    /// Sub-queue `q`'s part of a commit is done: its credits came back full.
    CommitPart {
        commit: u64,
        q: u32,
        t: u64,
    },
    CommitDone {
        commit: u64,
        t: u64,
    },
    /// A query read sent for sub-queue `q` (`u32::MAX`: a global commit's).
    Query {
        q: u32,
        t: u64,
    },
    /// A read issued to memory.
    ReadIssued {
        line: u64,
        t: u64,
    },
}

impl Log {
    /// When it happened.
    pub fn time(&self) -> u64 {
        match *self {
            Log::WriteAccepted { t, .. }
            | Log::WriteIssued { t, .. }
            | Log::WriteDone { t, .. }
            | Log::CommitStart { t, .. }
            | Log::CommitPart { t, .. }
            | Log::CommitDone { t, .. }
            | Log::Query { t, .. }
            | Log::ReadIssued { t, .. } => t,
        }
    }
}
