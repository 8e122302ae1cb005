//! The one system call std does not offer: fallocate(2) to punch a hole (a discard reaching the
//! backing file). This module alone in nvcache may use `unsafe` (allowed at its declaration).

use std::fs::File;
use std::os::fd::AsRawFd;

/// Deallocate `len` bytes at `off` of `file`, keeping its size; reads of them return zeros.
pub(crate) fn punch_hole(file: &File, off: u64, len: u64) -> std::io::Result<()> {
    let (off, len) = (i64::try_from(off), i64::try_from(len));
    let (Ok(off), Ok(len)) = (off, len) else {
        return Err(std::io::Error::from(std::io::ErrorKind::InvalidInput));
    };
    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    // SAFETY: fallocate only reads its integer arguments; the descriptor is open for the whole
    // call because `file` is borrowed.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), mode, off, len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
