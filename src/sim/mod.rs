//! `sim`: the trace-driven simulator (seed 002, Baker et al.). Real block traces drive the
//! same replacement policies the device's NVRAM cache uses, in virtual time taken from the
//! trace, and count what the paper counts.
//!
//! - [`trace`]: readers for real trace formats, streamed into requests and block accesses.
//! - [`policy`]: NVRAM replacement policies (LRU, random, omniscient), reusable by nvcache.
//! - [`cache`]: the client-cache models of section 2.1 (volatile, write-aside, unified).

pub mod cache;
pub mod policy;
pub mod trace;

#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;
