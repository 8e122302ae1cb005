//! `sim`: the trace-driven simulator (seed 002, Baker et al.). Real block traces drive the
//! same replacement policies the device's NVRAM cache uses, in virtual time taken from the
//! trace, and count what the paper counts.
//!
//! - [`trace`]: readers for real trace formats, streamed into requests and block accesses.
//! - Replacement policies come from `nvstack_policy` (LRU, random, omniscient), shared with nvcache.
//! - [`cache`]: the client-cache models of section 2.1 (volatile, write-aside, unified).
//! - [`analysis`]: the section-2 analyses (Figures 2-6, Table 2, section 2.6) as grids of runs.
//! - [`lfs`]: the section-3 LFS segment writer without and with an NVRAM write buffer (Tables 3, 4).
//! - [`figures`] (in [`analysis`], re-exported here): SVG figures with the paper's axes.
//! - [`field`]: settings refused, naming the configuration's fields ([`field::Invalid`]).
//! - [`csv`]: the sweep's CSV rows of several kinds, shared by the analyses and the LFS model.

pub mod analysis;
pub mod cache;
pub mod csv;
pub mod field;
pub mod lfs;
pub mod trace;

pub use analysis::figures;

#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;
