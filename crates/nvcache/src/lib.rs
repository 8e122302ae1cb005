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

pub mod common;
pub mod ubj;
pub mod write;

pub use common::backing::FileDevice;
pub use common::live::{CacheKind, CacheObserver, Live};
pub use common::ticker::{Tick, Ticker};
pub use ubj::bugs::Bug;
pub use ubj::format::{Settings, Superblock};
pub use ubj::{create, Census, SlotState, Stats, Ubj};
pub use write::WriteCache;

// The contract both caches keep when served (the crate root holds it: both trees implement it,
// and it names their types, so it sits above them, not beside them).
//
// The contract both caches keep when a program serves them (`nvstack serve`, `up`): timed
// triggers driven by one [`Ticker`](crate::common::ticker::Ticker), one observer told the live
// state, write back, detach, and a clean close that returns what it did as data (the program
// words it). A third kind of cache implements this trait in its own tree and is served with
// no change to the program's serve loop.

use crate::write::format::Counters;
use nvstack_core::error::Result;
use std::sync::Arc;

/// What a clean close did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closed {
    /// A final commit at `epoch`; the counters over the cache's life, as stored.
    Ubj { epoch: u64, life: Stats },
    /// The backing device flushed; `cached_blocks` stay in NVRAM; the counters over the
    /// cache's life, as stored.
    Write { cached_blocks: u64, life: Counters },
}

/// A cache as served.
pub trait Cache: Tick {
    fn kind(&self) -> CacheKind;
    /// Set the observer (once) and tell it the state now; false if one was already set.
    fn observe(&self, o: Arc<dyn CacheObserver>) -> bool;
    /// Write what the cache holds back to the backing device and flush it; returns the
    /// blocks written back. UBJ writes its committed (frozen) blocks back (a checkpoint: what
    /// is not yet committed stays, as the user's transaction has not ended); the write cache
    /// writes every cached block back and empties.
    fn writeback(&self) -> Result<u64>;
    /// `writeback`, then the backing label says detached: the backing device alone is the
    /// whole state from now on. Returns the blocks written back.
    fn detach(&self) -> Result<u64>;
    /// Bytes written to the backing device over the cache's life (what a writeback cost).
    fn backing_bytes_written(&self) -> u64;
    /// Store the lifetime counters in the image (after a verb run offline).
    fn save_counters(&self);
    /// Zero the lifetime counters (dm-writecache's clear_stats message); refused, as bad
    /// input, by a cache that keeps no such counters for a user to clear.
    fn clear_stats(&self) -> Result<()>;
    /// The end of a clean serve: what must be durable made so, the counters stored. Nothing is
    /// written back that a trigger would not have.
    fn close(&self) -> Result<Closed>;
}

impl Closed {
    /// What the close did, in a sentence (the serve daemon's last line about the cache).
    pub fn describe(&self) -> String {
        match self {
            Closed::Ubj { epoch, life: k } => format!(
                "final commit at epoch {epoch}; counters stored ({} commits, {} checkpoints, {} \
                 bytes written by the user, {} to the backing file over the cache's life); no \
                 checkpoint (`nvstack cache writeback` writes everything back)",
                k.commits, k.checkpoints, k.user_bytes_written, k.backing_bytes_written
            ),
            Closed::Write {
                cached_blocks,
                life: k,
            } => format!(
                "backing device flushed; counters stored ({} blocks written, {} bypassed, {} \
                 destaged, {} bytes written to the backing file over the cache's life); \
                 {cached_blocks} blocks stay cached in NVRAM, not written back (`nvstack cache \
                 writeback` or `detach` writes them back)",
                k.write_blocks,
                k.write_bypass,
                k.destaged_room
                    + k.destaged_watermark
                    + k.destaged_max_age
                    + k.destaged_cleaner
                    + k.destaged_writeback,
                k.backing_bytes_written
            ),
        }
    }
}
