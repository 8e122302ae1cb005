//! nvstack-pmem: persistent-memory regions and the ways to make stores durable.
//!
//! Everything above this module reaches persistent memory only through the [`Region`] trait
//! and the [`CommitDomain`]s built on it: no other layer touches raw pointers or issues flushes.
//! The crash checker's simulated region implements the same trait, so the device code it checks
//! is the code that runs.

// The only modules with `unsafe` in pmem: CPU instructions (persist, CRC-32C), mappings,
// timed stores.
#[allow(unsafe_code)]
pub mod cpu;
pub mod crash;
#[allow(unsafe_code)]
pub mod crc;
pub mod domain;
#[allow(unsafe_code)]
pub mod latency;
#[allow(unsafe_code)]
pub mod mmap;
pub mod ordering;
pub mod prefix;
pub mod record;
pub mod simdisk;
pub mod unordered;

pub use cpu::{FlushKind, LINE_BYTES};
pub use domain::{CommitDomain, DomainStats};
pub use mmap::{Access, MmapRegion};
pub use ordering::{Method, OrderingPolicy, RegionKind};
pub use prefix::Prefix;

/// A byte-addressable persistent-memory region.
///
/// Offsets are bytes from the region's start. Implementations assert every range is in
/// bounds: an out-of-range access is a bug in the caller, never something to clamp.
///
/// Durability model (what the crash checker simulates): a cached store (`write`, `store_u64`)
/// is durable only after a `flush` of its line followed by a `fence`; a non-temporal store
/// (`write_nt`, `store_u64_nt`) only after a `fence`. Until then any subset of the pending
/// 8-byte words may have reached media. Aligned 8-byte stores are single words.
pub trait Region: Send + Sync {
    /// Length in bytes.
    fn len(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copy bytes out of the region.
    fn read(&self, off: u64, dst: &mut [u8]);
    /// An atomic 8-byte load (acquire). `off` must be 8-byte aligned.
    fn load_u64(&self, off: u64) -> u64;
    /// Cached stores.
    fn write(&self, off: u64, src: &[u8]);
    /// An atomic 8-byte cached store (release). `off` must be 8-byte aligned.
    fn store_u64(&self, off: u64, v: u64);
    /// Non-temporal stores; `off` and `src.len()` must be multiples of 8.
    fn write_nt(&self, off: u64, src: &[u8]);
    /// One 8-byte non-temporal store. `off` must be 8-byte aligned.
    fn store_u64_nt(&self, off: u64, v: u64);
    /// Issue a line flush for every cache line overlapping [off, off+len).
    fn flush(&self, off: u64, len: u64, kind: FlushKind);
    /// Order everything this thread stored or flushed before any later store (sfence).
    fn fence(&self);
    /// Whether `flush(.., kind)` can run here. Real memory: whether this CPU has the
    /// instruction. A simulated region executes no instruction and models every kind.
    fn has_flush(&self, kind: FlushKind) -> bool {
        cpu::has_flush(kind)
    }
    /// A commit domain has just made [off, off+len) durable (its flushes and fence are done):
    /// the hook a recording region logs as a commit of that range (PersistentCommit, seed
    /// 003). It changes nothing in memory; a region that records nothing ignores it.
    fn committed(&self, _off: u64, _len: u64) {}
}

/// Number of 64-byte lines overlapping [off, off+len).
pub fn lines_spanned(off: u64, len: u64) -> u64 {
    if len == 0 {
        return 0;
    }
    let first = off / LINE_BYTES;
    let last = (off + len - 1) / LINE_BYTES;
    last - first + 1
}
