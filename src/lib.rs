//! nvstack: a transactional block device and NVRAM caches on persistent memory.
//!
//! Layers, bottom up (see ARCHITECTURE.md): [`pmem`] regions and persist methods,
//! [`nvramdisk`] the transactional block device, joined to everything above by the
//! [`blockdev::BlockDevice`] trait.

pub mod bench;
pub mod blockdev;
pub mod crashtest;
pub mod error;
pub mod export;
pub mod nvramdisk;
pub mod peer;
pub mod plot;
pub mod pmem;
pub mod report;
pub mod sim;
pub mod size;

pub use error::{Error, Result};
