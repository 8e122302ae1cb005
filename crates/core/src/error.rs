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
    /// Bad input that names one of the caller's fields (exit 2, as `BadInput`). `message`
    /// holds [`FIELD`] wherever the field is named: shown as the field's own name (in
    /// backticks) by a library's caller, and as a flag by the program, which renders it with
    /// [`Error::name_fields`]. Libraries say what is wrong in their own terms; only the
    /// program knows its flags.
    #[error("{}", .message.replace(FIELD, &format!("`{field}`")))]
    Invalid {
        field: &'static str,
        message: String,
    },
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

/// Where an [`Error::Invalid`] message names its field.
pub const FIELD: &str = "{field}";

impl Error {
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Finding(_) => 1,
            Error::BadInput(_) | Error::Invalid { .. } => 2,
            Error::Environment(_) | Error::NoSpace(_) | Error::Stopped(_) => 3,
        }
    }

    pub fn bad(msg: impl fmt::Display) -> Error {
        Error::BadInput(msg.to_string())
    }

    /// Bad input naming `field`; `message` says [`FIELD`] where the field is named.
    pub fn invalid(field: &'static str, message: impl fmt::Display) -> Error {
        let message = message.to_string();
        assert!(
            message.contains(FIELD),
            "an Invalid message names its field: {message}"
        );
        Error::Invalid { field, message }
    }

    /// An `Invalid` error as the program says it: the field named by `name` (its flag), or by
    /// its own name when `name` has none; any other error unchanged.
    pub fn name_fields(self, name: &dyn Fn(&'static str) -> Option<&'static str>) -> Error {
        match self {
            Error::Invalid { field, message } => {
                let said = name(field).map_or_else(|| format!("`{field}`"), str::to_string);
                Error::BadInput(message.replace(FIELD, &said))
            }
            other => other,
        }
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
            Error::Invalid { field, message } => Error::Invalid {
                field,
                message: format!("{what}: {message}"),
            },
            Error::Environment(m) => Error::Environment(format!("{what}: {m}")),
            Error::NoSpace(m) => Error::NoSpace(format!("{what}: {m}")),
            Error::Stopped(n) => Error::Stopped(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_field_is_named_by_the_library_and_flagged_by_the_program() {
        let e = Error::invalid(
            "high_watermark_pct",
            format!("{FIELD} 150 %: must be 1 to 100"),
        );
        assert_eq!(e.exit_code(), 2);
        assert_eq!(
            e.to_string(),
            "`high_watermark_pct` 150 %: must be 1 to 100"
        );
        let e = e.context("img");
        let flagged = e.name_fields(&|f| (f == "high_watermark_pct").then_some("--high-watermark"));
        assert!(matches!(flagged, Error::BadInput(_)));
        assert_eq!(
            flagged.to_string(),
            "img: --high-watermark 150 %: must be 1 to 100"
        );
        // A field the program has no flag for keeps its own name; other errors pass unchanged.
        let e = Error::invalid("force", format!("x exists; replacing it takes {FIELD}"));
        assert_eq!(
            e.name_fields(&|_| None).to_string(),
            "x exists; replacing it takes `force`"
        );
        let e = Error::env("no memory").name_fields(&|_| Some("--x"));
        assert_eq!((e.exit_code(), e.to_string()), (3, "no memory".to_string()));
    }
}
