//! Exports: the ways unmodified software reaches an nvstack device.
//!
//! - [`file`]: a byte-addressed file over a `BlockDevice` (any offset and length, each write
//!   one device write, atomic and durable as the device's capabilities say): the data path of
//!   `nvstack serve`.
//! - [`fuse`]: that file served through FUSE as `DIR/disk`, for a loop device to attach.
//! - [`loopdev`]: the loop device's request limit that keeps each block request one FUSE
//!   write (a completed block write never torn by a daemon's death between two pieces).
//! - [`stats`]: the daemon's counters, mirrored to tmpfs so they outlive a SIGKILL, and a
//!   served cache's live state, published for `cache status` (stale entries swept).
//! - [`daemon`]: the transport-neutral half of a serve daemon: the device opened through
//!   `nvstack-stack`, its live state published, its counters, the power cut armed, the close
//!   in order. A transport (FUSE here; ublk or io_uring later) serves the daemon's device.
//!
//! What is served comes from `nvstack-stack` (any image opened, the raw baseline, the power-cut
//! runs, with the feature `powercut`); this crate is the transports and the daemon around them.

pub mod daemon;
pub mod file;
pub mod fuse;
pub mod loopdev;
pub mod stats;
