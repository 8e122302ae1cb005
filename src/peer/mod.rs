//! Peers: other systems benchmarked side by side with nvstack, loaded at run time.
//!
//! A peer is never linked at build time: nvstack builds and its tests pass on a machine that
//! lacks the peer's library, and a peer's tests skip (saying so) when it is absent.
//!
//! - [`pmemblk`]: PMDK's libpmemblk, a user-space BTT (block translation table) giving
//!   power-fail atomic block writes on a memory-mapped file, loaded with `dlopen`. This module is
//!   the only place outside `src/pmem/` with `unsafe`, each block with a `// SAFETY:` comment.

pub mod pmemblk;
