//! Subcommands of the `nvstack` program.

pub mod bench;
pub mod blocks;
pub mod crashtest;
pub mod demo;
pub mod info;
pub mod serve;
pub mod sim;
pub mod sim_analyze;
pub mod sim_blocks;
pub mod sim_lfs;
pub mod sim_stat;
pub mod up;

use nvstack::error::{Error, Result};
use std::io::Write;

/// Write to stdout; a closed pipe is an environment error, never a panic.
pub fn out(bytes: &[u8]) -> Result<()> {
    let mut o = std::io::stdout().lock();
    o.write_all(bytes)
        .and_then(|_| o.flush())
        .map_err(|e| Error::env(format!("stdout: {e}")))
}

/// Print a line to stdout.
#[macro_export]
macro_rules! say {
    ($($t:tt)*) => { $crate::cli::out(format!("{}\n", format_args!($($t)*)).as_bytes()) };
}
