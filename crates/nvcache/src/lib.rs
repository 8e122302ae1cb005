//! nvcache: an NVRAM cache tier in front of a slower block device (design brief, "nvcache").
//!
//! UBJ (seed 001, Lee, Bahn and Noh, FAST 2013): the buffer cache that is also the journal. The
//! promise, checked by the crash tests: after a crash at any instant the device reads exactly as
//! it stood after some commit k, where k is at least the last commit acknowledged before the
//! crash. A write is durable after the next flush (a commit), not on return.
//!
//! The write cache (seed 004, NVFAT, with dm-writecache's controls; writecache.rs): an
//! admitted write is durable and atomic in NVRAM when it returns; blocks are destaged to the
//! backing device by a policy (least recently written by default).

pub mod admit;
pub mod backing;
pub mod bugs;
pub mod fat;
pub mod format;
pub mod image;
pub mod inspect;
mod recover;
#[allow(unsafe_code)]
mod sys;
pub mod ubj;
pub mod wbugs;
mod wdestage;
pub mod wentry;
pub mod wformat;
pub mod wimage;
mod wrecover;
pub mod writecache;
pub mod wserve;

pub use backing::FileDevice;
pub use bugs::Bug;
pub use format::{Settings, Superblock};
pub use ubj::{create, Census, Live, Observer, SlotState, Stats, Timers, Ubj};
pub use wbugs::WcBug;
pub use wdestage::Trigger;
pub use writecache::{create_wc, WriteCache};
pub use wserve::{ServedWc, WcDestager, WcLive, WcObserver, WcTimer};
