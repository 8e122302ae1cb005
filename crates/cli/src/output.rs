//! Output for people: stdout that never panics on a closed pipe, `say!`, JSON documents.

use nvstack_core::error::{Error, Result};
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
    ($($t:tt)*) => { $crate::output::out(format!("{}\n", format_args!($($t)*)).as_bytes()) };
}
