//! nvstack-core: what every nvstack crate shares and nothing else. The error type and its exit
//! codes, SIZE arguments, tables for people, progress reporting ([`progress::Progress`]), and the [`blockdev::BlockDevice`] trait that joins
//! the layers. It knows no device, no command line and no file format.

pub mod blockdev;
pub mod error;
pub mod lock;
pub mod progress;
pub mod report;
pub mod size;

pub use error::{Error, Result};
pub use progress::{NoProgress, Progress};
