//! The stack: the one library that opens any nvstack image. An API boundary (ARCHITECTURE.md):
//! the program, the SQLite extension and the Python module open images only through it, and
//! only it dispatches on an image's kind.
//!
//! - [`kind`]: identify an image by its magic, and [`kind::peek`] its shape (blocks, block size,
//!   the unit one write lands whole in, and what a write promises) without opening it.
//! - [`image`]: an image of any kind opened for one command (read-only or for writing), closed
//!   so that what was written is durable and a cache's counters are stored.
//! - [`served`]: a device opened to be served by a transport: any backend (nvramdisk, a cache
//!   with its ticker and destage thread, the raw baseline, the direct backing file).
//! - [`cache`]: a cache's verbs whichever its kind (status, check, writeback, detach,
//!   clear-stats), each answering a [`Report`] that a front end prints.
//! - `kinds` (private): the table, one impl per kind; a new kind is a file there and one arm.
//! - [`raw`]: the region as plain blocks with no transactions (the raw baseline).
//! - [`powercut`] (testing only; the machinery with the feature `powercut`): run a device on
//!   the crash checker's simulated region and cut its power, for whole-stack power-cut tests.
//!
//! It speaks no transport: FUSE (and any later ublk or io_uring transport) lives in
//! `nvstack-export`, which depends on this crate (`scripts/check-layers.sh` enforces both).

pub mod cache;
pub mod image;
pub mod kind;
mod kinds;
pub mod powercut;
pub mod raw;
pub mod report;
pub mod served;
mod spec;

pub use image::{Access, Image};
pub use kind::{identify, peek, Kind, Promise, Shape};
pub use report::Report;
pub use served::{Backend, ServeSpec, Served, ServedCache};

#[cfg(test)]
mod tests;
