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

/// Print rows of "name  value" with the names padded to the longest: the key-value tables of
/// `sim cache`, `sim stat` and `sim blocks`.
pub fn key_values(rows: &[(&str, String)]) -> Result<()> {
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut text = String::new();
    for (k, v) in rows {
        text.push_str(&format!("{k:<width$}  {v}\n"));
    }
    out(text.as_bytes())
}

/// Print a line to stdout.
#[macro_export]
macro_rules! say {
    ($($t:tt)*) => { $crate::output::out(format!("{}\n", format_args!($($t)*)).as_bytes()) };
}
