//! One error type for the whole stack. Every variant maps to one exit code of the design
//! brief's table, so the CLI never has to guess: 1 a finding, 2 bad input, 3 environment.

use std::fmt;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Damage or a violation found (check, crash test, a corrupt map entry on read).
    #[error("{0}")]
    Finding(String),
    /// A bad argument, a foreign or unreadable image, a bad size, a bad trace line.
    #[error("{0}")]
    BadInput(String),
    /// Something outside nvstack: a missing tool, a lock held by another process, mmap failure.
    #[error("{0}")]
    Environment(String),
    /// No room for a write without breaking a promise (a UBJ cache full of dirty and frozen
    /// blocks with autocommit off: a commit would split the caller's transaction). ENOSPC.
    #[error("{0}")]
    NoSpace(String),
    /// A write interrupted on purpose at an injected stop point (tests and the demo only).
    #[error("write interrupted at injected stop point {0}")]
    Stopped(u64),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Finding(_) => 1,
            Error::BadInput(_) => 2,
            Error::Environment(_) | Error::NoSpace(_) | Error::Stopped(_) => 3,
        }
    }

    pub fn bad(msg: impl fmt::Display) -> Error {
        Error::BadInput(msg.to_string())
    }

    pub fn env(msg: impl fmt::Display) -> Error {
        Error::Environment(msg.to_string())
    }

    pub fn finding(msg: impl fmt::Display) -> Error {
        Error::Finding(msg.to_string())
    }

    /// The same error (and exit code) with `what` said first: "what: message".
    pub fn context(self, what: impl fmt::Display) -> Error {
        match self {
            Error::Finding(m) => Error::Finding(format!("{what}: {m}")),
            Error::BadInput(m) => Error::BadInput(format!("{what}: {m}")),
            Error::Environment(m) => Error::Environment(format!("{what}: {m}")),
            Error::NoSpace(m) => Error::NoSpace(format!("{what}: {m}")),
            Error::Stopped(n) => Error::Stopped(n),
        }
    }
}
