//! Exports: the ways unmodified software reaches an nvstack device.
//!
//! - [`file`]: a byte-addressed file over a `BlockDevice` (any offset and length, each write
//!   one device write, atomic and durable as the device's capabilities say): the data path of
//!   `nvstack serve`.
//! - [`fuse`]: that file served through FUSE as `DIR/disk`, for a loop device to attach.
//! - [`loopdev`]: the loop device's request limit that keeps each block request one FUSE
//!   write (a completed block write never torn by a daemon's death between two pieces).
//! - [`raw`]: the region as plain blocks with no transactions (the `--backend raw` baseline).
//! - [`stats`]: the daemon's counters, mirrored to tmpfs so they outlive a SIGKILL.
//! - [`powercut`]: run a device on the simulated region and cut power at a random instant,
//!   leaving a crash image drawn from a fault model (whole-stack power-cut tests); a cache
//!   image runs with its backing file as the region's disk.

pub mod file;
pub mod fuse;
pub mod loopdev;
pub mod powercut;
pub mod raw;
pub mod stats;
