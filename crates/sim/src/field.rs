//! Settings the simulator refuses, naming the field of the configuration, never a command-line
//! flag: the library cannot know how its caller spells a setting. `nvstack` maps each [`Field`]
//! to its flag ([`Invalid::render`]); Python would map it to its keyword. Shown as it is (the
//! [`std::fmt::Display`] form, or converted into [`Error::BadInput`]), a message names the
//! fields as the configuration structs spell them (`nvram_bytes`, `segment_bytes`).

use nvstack_core::error::Error;
use std::fmt;

/// A setting of one of the simulator's configurations ([`crate::cache::CacheConfig`],
/// [`crate::lfs::LfsConfig`], the analyses' grids and [`crate::analysis::SweepPlan`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    /// The block size, bytes.
    BlockBytes,
    /// The LFS segment size, bytes.
    SegmentBytes,
    /// The LFS metadata block size, bytes.
    MetadataBytes,
    /// The LFS summary block size, bytes.
    SummaryBytes,
    /// An NVRAM size, bytes.
    NvramBytes,
    /// An NVRAM size, blocks.
    NvramBlocks,
    /// A volatile cache size, bytes.
    VolatileBytes,
    /// A volatile cache size, blocks.
    VolatileBlocks,
    /// The LFS run's added sync source (a sync after every N-th write request).
    FsyncEvery,
    /// The LFS write timeout.
    TimeoutNs,
    /// The cache model.
    Model,
    /// The NVRAM replacement policy.
    Policy,
    /// The volatile model's delayed write-back.
    DelayedWritebackNs,
    /// The write-back delays of a lifetime pass.
    DelaysNs,
    /// The number of seeds of the random policy.
    Seeds,
    /// The traces of a sweep.
    Traces,
}

impl Field {
    /// The field's name, as the configuration structs spell it.
    pub fn name(self) -> &'static str {
        match self {
            Field::BlockBytes => "block_bytes",
            Field::SegmentBytes => "segment_bytes",
            Field::MetadataBytes => "metadata_bytes",
            Field::SummaryBytes => "summary_bytes",
            Field::NvramBytes => "nvram_bytes",
            Field::NvramBlocks => "nvram_blocks",
            Field::VolatileBytes => "volatile_bytes",
            Field::VolatileBlocks => "volatile_blocks",
            Field::FsyncEvery => "fsync_every",
            Field::TimeoutNs => "timeout_ns",
            Field::Model => "model",
            Field::Policy => "policy",
            Field::DelayedWritebackNs => "delayed_writeback_ns",
            Field::DelaysNs => "delays_ns",
            Field::Seeds => "seeds",
            Field::Traces => "traces",
        }
    }
}

/// A piece of an [`Invalid`]'s message: words, or a mention of a field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// Words, shown as they are.
    Text(String),
    /// A field, shown as the reader of the message knows it.
    Field(Field),
}

/// A setting refused: the field at fault and a message that starts with it and may mention
/// other fields (e.g. "model volatile has no NVRAM: it requires nvram_blocks 0").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    /// The field at fault.
    pub field: Field,
    /// The message, a field mention first.
    pub parts: Vec<Part>,
}

impl Invalid {
    /// A message about `field`, which it starts by naming.
    pub fn new(field: Field) -> Invalid {
        Invalid {
            field,
            parts: vec![Part::Field(field)],
        }
    }

    /// The message goes on with `words`.
    pub fn text(mut self, words: impl Into<String>) -> Invalid {
        self.parts.push(Part::Text(words.into()));
        self
    }

    /// The message goes on by naming `field`.
    pub fn mention(mut self, field: Field) -> Invalid {
        self.parts.push(Part::Field(field));
        self
    }

    /// The message with every field shown as `name` spells it (a flag, a keyword).
    pub fn render(&self, name: &dyn Fn(Field) -> &'static str) -> String {
        assert_eq!(self.parts.first(), Some(&Part::Field(self.field)));
        let mut s = String::new();
        for p in &self.parts {
            match p {
                Part::Text(t) => s.push_str(t),
                Part::Field(f) => s.push_str(name(*f)),
            }
        }
        s
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(&Field::name))
    }
}

impl std::error::Error for Invalid {}

/// A refused setting is bad input (exit 2), its message naming the configuration's fields.
impl From<Invalid> for Error {
    fn from(e: Invalid) -> Error {
        Error::bad(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_names_fields_as_the_reader_knows_them() {
        let e = Invalid::new(Field::Model)
            .text(" volatile has no NVRAM: it requires ")
            .mention(Field::NvramBlocks)
            .text(" 0");
        assert_eq!(
            e.to_string(),
            "model volatile has no NVRAM: it requires nvram_blocks 0"
        );
        let flag = |f: Field| match f {
            Field::Model => "--model",
            Field::NvramBlocks => "--nvram",
            _ => "?",
        };
        assert_eq!(
            e.render(&flag),
            "--model volatile has no NVRAM: it requires --nvram 0"
        );
        let err = Error::from(e);
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().starts_with("model volatile"));
    }
}
