//! Exports: the ways unmodified software reaches an nvstack device.
//!
//! - [`file`]: a byte-addressed file over a `BlockDevice` (any offset and length, each write
//!   one device write, atomic and durable as the device's capabilities say): the data path of
//!   `nvstack serve`.
//! - [`fuse`]: that file served through FUSE as `DIR/disk`, for a loop device to attach.
//! - [`loopdev`]: the loop device's request limit that keeps each block request one FUSE
//!   write (a completed block write never torn by a daemon's death between two pieces).
//! - [`stats`]: the daemon's counters, mirrored to tmpfs so they outlive a SIGKILL.
//!
//! What is served comes from `nvstack-stack` (any image opened, the raw baseline, the power-cut
//! runs); this crate is the transports and what a daemon publishes.

pub mod file;
pub mod fuse;
pub mod loopdev;
pub mod stats;
