//! The controller's inputs ([`Input`]): what reaches it in a run, in order, each at the cycle
//! it arrives. The controller records them when asked; [`mod@crate::replay`] replays them.

use super::Arrival;

/// One input of the controller, at CPU cycle `t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// A read of `line` (an L3 miss).
    Read { t: u64, line: u64 },
    /// A write of `line` carrying `version`; `waiter` names the flush waiting for it to enter
    /// its sub-queue (None: a write-back, posted).
    Write {
        t: u64,
        line: u64,
        version: u64,
        waiter: Option<u64>,
    },
    /// PersistentCommit of `len` bytes at `addr`, by the engine's entry `token`.
    Commit {
        t: u64,
        token: u64,
        addr: u64,
        len: u64,
    },
    /// PersistenceMalloc: `len` bytes at `addr` bound to a sub-queue.
    Bind { t: u64, addr: u64, len: u64 },
}

impl Input {
    /// The cycle it reaches the controller.
    pub fn t(&self) -> u64 {
        match *self {
            Input::Read { t, .. }
            | Input::Write { t, .. }
            | Input::Commit { t, .. }
            | Input::Bind { t, .. } => t,
        }
    }

    /// A read or a write: the request a peer simulator replays.
    pub fn arrival(&self) -> Option<Arrival> {
        match *self {
            Input::Read { t, line } => Some(Arrival {
                t,
                line,
                write: false,
            }),
            Input::Write { t, line, .. } => Some(Arrival {
                t,
                line,
                write: true,
            }),
            Input::Commit { .. } | Input::Bind { .. } => None,
        }
    }
}
