//! nvstack-lab: the experiments that join layers the crate graph keeps apart, as a library
//! above them (rust-analyzer's `ide`, foyer's `hybrid`): the program parses arguments, calls
//! these and prints their reports; Python can call them too.
//!
//! - [`nvfat`]: seed 004's NVFAT replay (the simulator's trace reader and volatile model,
//!   nvcache's write cache, flash's replay), its changed-sector view, its independent FAT
//!   counter and the figures as data.
//! - [`flash_replay`]: a block trace read by the simulator's readers replayed on NAND under an
//!   FTL (`nvstack sim flash`).
//! - [`record`]: persistent code's traffic (nvramdisk on N threads, the SQLite journal store)
//!   recorded as a trace for the committing simulator (`nvstack sim commit-record`).
//!
//! API boundary: everything here returns data; errors name the plan's fields ([`field`]),
//! never a flag. Nothing here parses arguments, draws progress or prints.

pub mod field;
pub mod flash_replay;
pub mod nvfat;
pub mod record;
