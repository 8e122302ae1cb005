//! nvstack-sqlite: a loadable SQLite extension that registers the VFS `nvstack`, which keeps a
//! database's WAL and rollback journal on an nvramdisk (emulated NVRAM under /dev/shm, or a DAX
//! file) while the database file stays on the ordinary file system.
//!
//! ```text
//! sqlite3> .load /path/to/libnvstack_sqlite.so
//! sqlite3> .open file:app.db?vfs=nvstack&region=/dev/shm/app.region&region_size=64MiB
//! ```
//!
//! The VFS wraps SQLite's `unix` VFS. The main database file, temporary files and the
//! shared-memory wal-index stay with `unix` (every method of the main file is passed through
//! to it). Files SQLite opens with `SQLITE_OPEN_WAL`, `SQLITE_OPEN_MAIN_JOURNAL` or
//! `SQLITE_OPEN_SUPER_JOURNAL` live in the region's journal store
//! (`crate::store`): each write is one atomic nvramdisk write, durable when it
//! returns, so xSync on them does nothing.
//!
//! URI parameters (on the database's `file:` URI):
//! - `region=PATH`: the region image (created and formatted when missing; reused when present).
//! - `region_size=SIZE`: its size (a byte count or KiB/MiB/GiB); needed to create it, checked
//!   against it otherwise.
//! - `powercut=MODEL:SEED:DELAY_MS`: **testing only**. The region runs on the crash checker's
//!   simulated region and, DELAY_MS after the database opens, power is cut: a crash image drawn
//!   under fault model MODEL (M0, M1, M2) is written over the image file and the process exits
//!   with code 86 (`nvstack_stack::powercut`; only in a build with the feature `powercut`: the
//!   shipped extension refuses it with SQLITE_CANTOPEN).
//! - `record=PATH`: **measurement only**. The region's persistent-memory traffic is recorded
//!   (pmem's `RecordingRegion`) from the database's open on and written to PATH, which must
//!   not exist, as a committing-simulator trace when the region closes (`crate::recording`).
//!
//! One region serves one database; one process at a time holds it (a second process gets
//! SQLITE_BUSY). Errors are reported with `sqlite3_log` and by the SQL function
//! `nvstack_last_error()`; `nvstack_stats()` returns the store counters as JSON.
//!
//! Only `ffi` contains `unsafe`.

#[allow(unsafe_code)]
mod ffi;
pub mod params;
pub mod recording;
pub mod registry;
pub mod store;

use std::sync::Mutex;

/// An error for SQLite: the result code to return and a message for the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VfsError {
    pub code: i32,
    pub msg: String,
}

impl VfsError {
    pub fn new(code: i32, msg: impl Into<String>) -> VfsError {
        VfsError {
            code,
            msg: msg.into(),
        }
    }
    pub fn cantopen(msg: impl Into<String>) -> VfsError {
        VfsError::new(libsqlite3_sys::SQLITE_CANTOPEN, msg)
    }
}

/// Longest message kept for `nvstack_last_error()`.
const LAST_ERROR_BYTES_MAX: usize = 4096;

static LAST_ERROR: Mutex<Option<String>> = Mutex::new(None);

/// Remember `msg` as this process's last nvstack error.
pub fn set_last_error(msg: &str) {
    let mut kept = msg.to_string();
    if kept.len() > LAST_ERROR_BYTES_MAX {
        // The last char boundary at or below the limit: at most 3 bytes back (a UTF-8 char
        // takes at most 4), and 0 always is one.
        let cut = (0..=LAST_ERROR_BYTES_MAX)
            .rev()
            .find(|&at| kept.is_char_boundary(at))
            .unwrap_or(0);
        kept.truncate(cut);
    }
    debug_assert!(kept.len() <= LAST_ERROR_BYTES_MAX && msg.starts_with(&kept));
    *LAST_ERROR.lock().unwrap_or_else(|e| e.into_inner()) = Some(kept);
}

pub fn last_error() -> Option<String> {
    LAST_ERROR.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A long message is kept up to the limit, cut at a char boundary.
    #[test]
    fn last_error_is_cut_at_a_char_boundary() {
        set_last_error("short");
        assert_eq!(last_error().as_deref(), Some("short"));
        // 'é' takes 2 bytes: the limit falls inside the last one that would fit.
        let long = format!("x{}", "é".repeat(LAST_ERROR_BYTES_MAX));
        set_last_error(&long);
        let kept = last_error().unwrap();
        assert_eq!(kept.len(), LAST_ERROR_BYTES_MAX - 1);
        assert!(long.starts_with(&kept));
    }
}
