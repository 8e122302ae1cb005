//! nvcache: an NVRAM cache tier in front of a slower block device (design brief, "nvcache").
//!
//! UBJ (seed 001, Lee, Bahn and Noh, FAST 2013): the buffer cache that is also the journal. The
//! promise, checked by the crash tests: after a crash at any instant the device reads exactly as
//! it stood after some commit k, where k is at least the last commit acknowledged before the
//! crash. A write is durable after the next flush (a commit), not on return.
//!
//! The write cache (seed 004, NVFAT, with dm-writecache's controls; write/mod.rs): an
//! admitted write is durable and atomic in NVRAM when it returns; blocks are destaged to the
//! backing device by a policy (least recently written by default).

pub mod cache;
pub mod common;
pub mod ubj;
pub mod write;

pub use cache::{Cache, CacheKind, CacheObserver, Closed};
pub use common::backing::FileDevice;
pub use common::ticker::{Tick, Ticker};
pub use ubj::bugs::Bug;
pub use ubj::format::{Settings, Superblock};
pub use ubj::{create, Census, Live, Observer, SlotState, Stats, Ubj};
pub use write::bugs::WcBug;
pub use write::destage::Trigger;
pub use write::serve::{ServedWc, WcDestager, WcLive, WcObserver};
pub use write::{create_wc, WriteCache};
