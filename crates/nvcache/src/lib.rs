//! nvcache: an NVRAM cache tier in front of a slower block device (design brief, "nvcache").
//!
//! UBJ (seed 001, Lee, Bahn and Noh, FAST 2013): the buffer cache that is also the journal. The
//! promise, checked by the crash tests: after a crash at any instant the device reads exactly as
//! it stood after some commit k, where k is at least the last commit acknowledged before the
//! crash. A write is durable after the next flush (a commit), not on return.

pub mod backing;
pub mod bugs;
pub mod format;
pub mod image;
pub mod inspect;
mod recover;
#[allow(unsafe_code)]
mod sys;
pub mod ubj;

pub use backing::FileDevice;
pub use bugs::Bug;
pub use format::{Settings, Superblock};
pub use ubj::{create, Census, Live, Observer, SlotState, Stats, Timers, Ubj};
