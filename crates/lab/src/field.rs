//! Settings and inputs the lab refuses, naming the field of its plan, never a command-line
//! flag (ARCHITECTURE.md: library errors name fields): `nvstack` maps each [`Field`] to its
//! flag ([`LabError::render`]), Python would map it to its keyword. Shown as it is, a message
//! names the fields as the plan structs spell them (`nvram_kib`, `image`).

use nvstack_core::error::Error;
use std::fmt;

/// A field of a lab plan ([`crate::nvfat::Plan`], [`crate::nvfat::Job`],
/// [`crate::nvfat::input::Paths`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    /// The NVRAM sizes of the NVFAT sweep, KiB.
    NvramKib,
    /// One replay's NVRAM size, bytes.
    NvramBytes,
    /// The volume as it stood when the recording started.
    Image,
    /// The run record (elapsed and CPU seconds).
    Run,
}

impl Field {
    /// The field's name, as the plan structs spell it.
    pub fn name(self) -> &'static str {
        match self {
            Field::NvramKib => "nvram_kib",
            Field::NvramBytes => "nvram_bytes",
            Field::Image => "image",
            Field::Run => "run",
        }
    }
}

/// A refused setting or input: the field at fault and what is wrong (the text follows the
/// field's name as it is, so it starts with its own separator: " 100000: at most", ": give").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    pub field: Field,
    pub text: String,
}

impl Invalid {
    pub fn new(field: Field, text: impl Into<String>) -> Invalid {
        Invalid {
            field,
            text: text.into(),
        }
    }

    /// The message with the field spelled by `name` (a flag, for the program).
    pub fn render(&self, name: &dyn Fn(Field) -> &'static str) -> String {
        format!("{}{}", name(self.field), self.text)
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(&Field::name))
    }
}

impl From<Invalid> for Error {
    fn from(e: Invalid) -> Error {
        Error::bad(e)
    }
}

/// What a lab run returns when it fails: a refused field (bad input, exit 2, worded by the
/// caller), or any other error of the layers it joins, as they gave it.
#[derive(Debug)]
pub enum LabError {
    Invalid(Invalid),
    Other(Error),
}

pub type LabResult<T> = std::result::Result<T, LabError>;

impl LabError {
    /// The error with a refused field spelled by `name` (a flag, for the program).
    pub fn render(self, name: &dyn Fn(Field) -> &'static str) -> Error {
        match self {
            LabError::Invalid(i) => Error::bad(i.render(name)),
            LabError::Other(e) => e,
        }
    }
}

impl From<Error> for LabError {
    fn from(e: Error) -> LabError {
        LabError::Other(e)
    }
}

impl From<Invalid> for LabError {
    fn from(e: Invalid) -> LabError {
        LabError::Invalid(e)
    }
}

impl From<LabError> for Error {
    fn from(e: LabError) -> Error {
        e.render(&Field::name)
    }
}

impl fmt::Display for LabError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LabError::Invalid(i) => i.fmt(f),
            LabError::Other(e) => e.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_field_is_named_by_the_caller_or_by_its_field_name() {
        let e = Invalid::new(Field::NvramKib, " 100000: at most 65536");
        assert_eq!(e.to_string(), "nvram_kib 100000: at most 65536");
        assert_eq!(
            e.render(&|_| "--nvram-kib"),
            "--nvram-kib 100000: at most 65536"
        );
        let err: Error = LabError::from(e).into();
        assert_eq!(err.exit_code(), 2);
        let other = LabError::from(Error::env("no memory")).render(&|_| "--x");
        assert_eq!(
            (other.exit_code(), other.to_string()),
            (3, "no memory".into())
        );
    }
}
