//! Advisory locks on the files commands open (design brief: every command locks the image it
//! opens, shared for readers and exclusive for writers). A lock held elsewhere is an
//! environment error (exit 3) naming the file.

use crate::error::{Error, Result};
use std::fs::{File, TryLockError};
use std::path::Path;

/// Open `path` to read (and to write, if `write`); `what` names it for people ("image"). A
/// missing file is bad input (exit 2), anything else the environment (exit 3).
pub fn open_file(path: &Path, write: bool, what: &str) -> Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(write)
        .open(path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::bad(format!("{}: no such {what}", path.display()))
            } else {
                Error::env(format!("{}: cannot open: {e}", path.display()))
            }
        })
}

/// Lock `file` (`what` names it for people: "image", "backing file"), without waiting.
pub fn lock_file(file: &File, path: &Path, what: &str, exclusive: bool) -> Result<()> {
    let r = if exclusive {
        file.try_lock()
    } else {
        file.try_lock_shared()
    };
    match r {
        Ok(()) => Ok(()),
        Err(TryLockError::WouldBlock) => Err(Error::env(format!(
            "{}: {what} is locked by another process (another nvstack command or daemon has \
             it open{})",
            path.display(),
            if exclusive { "" } else { " for writing" }
        ))),
        Err(TryLockError::Error(e)) => {
            Err(Error::env(format!("{}: cannot lock: {e}", path.display())))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_share_and_a_writer_excludes() {
        let path = std::env::temp_dir().join(format!("nvstack-lock-{}", std::process::id()));
        let open = || File::create(&path).unwrap();
        let (a, b) = (open(), open());
        lock_file(&a, &path, "image", false).unwrap();
        lock_file(&b, &path, "image", false).unwrap();
        drop(b);
        let c = open();
        let e = lock_file(&c, &path, "image", true).unwrap_err();
        assert!(e.to_string().contains("image is locked"), "{e}");
        assert_eq!(e.exit_code(), 3);
        drop(a);
        lock_file(&c, &path, "image", true).unwrap();
        let e = lock_file(&open(), &path, "backing file", false).unwrap_err();
        assert!(e.to_string().contains("open for writing"), "{e}");
        std::fs::remove_file(&path).unwrap();
    }
}
