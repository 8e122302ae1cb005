//! nvstack-flash: NAND flash under an FTL, as a block device and as a replay engine (issue 21).
//!
//! - [`geometry`]: the chip's shape and datasheet constants (every one a field), time and
//!   energy per operation (E = V x I x t).
//! - [`nand`]: the chip: pages programmed once per erase and in ascending order within a block
//!   (a broken rule panics, naming it), counts per page and block; where the bytes live
//!   ([`nand::Media`]: nowhere, memory, or the state file).
//! - [`ftl`]: the FTLs behind one type: [`ftl::logblock`], the log-block FTL of Kim et al.
//!   (switch, partial and full merges), and [`ftl::page`], a page-mapped FTL with greedy garbage
//!   collection.
//! - [`file`]: the state file (docs/format.md section 11) and [`device`]: the
//!   [`nvstack_core::blockdev::BlockDevice`] over it, its mapping rebuilt from the spare areas at
//!   open.
//! - [`replay`]: a block trace replayed in virtual time: writes per logical block and per
//!   physical page, erase counts, time and energy.
//!
//! It knows no trace format and no command line: the program feeds it requests.

pub mod device;
pub mod file;
pub mod ftl;
pub mod geometry;
pub mod nand;
pub mod replay;
