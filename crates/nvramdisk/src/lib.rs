//! nvramdisk: a transactional block device on a pmem region (seed 000): shadow pages, a
//! mapping table, per-lane journal slots, and type-dependent ordering. Two write protocols,
//! chosen at format time: the paper's (Table 2) and nvstack's fast one. docs/format.md is the
//! specification.

pub mod bitmap;
pub mod bugs;
pub mod check;
pub mod disk;
pub mod entry;
pub mod format;
pub mod hooks;
pub mod image;
pub mod journal;
pub mod layout;
pub mod slot;
mod sync;

pub use disk::{DiskStats, NvramDisk, OpenOptions, RecoveryReport};
pub use format::{format_region, FormatOptions};
pub use hooks::{Action, Event, Hook, Phase, Step};
pub use layout::{Geometry, Protocol, Superblock, ATOMIC_BLOCKS_MAX};
/// The chunked write moved next to the trait (it serves every device); still reachable here.
pub use nvstack_core::blockdev::write_chunked;
