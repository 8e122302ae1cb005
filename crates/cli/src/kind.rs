//! Which kind of image a file is, told apart by its first eight bytes (each format's magic), so
//! that a command given the other kind says so instead of "bad magic".

use nvstack_core::error::{Error, Result};
use std::io::Read;
use std::path::Path;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Nvramdisk,
    Cache,
    /// A write cache image (nvcache's write cache, seed 004).
    WriteCache,
    /// Anything else (the format's own open names what is wrong).
    Other,
}

pub fn kind(path: &Path) -> Result<Kind> {
    let mut f = std::fs::File::open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::bad(format!("{}: no such image", path.display()))
        } else {
            Error::env(format!("{}: cannot open: {e}", path.display()))
        }
    })?;
    let mut magic = [0u8; 8];
    if f.read_exact(&mut magic).is_err() {
        return Ok(Kind::Other);
    }
    Ok(if magic == nvstack_nvramdisk::layout::MAGIC {
        Kind::Nvramdisk
    } else if u64::from_le_bytes(magic) == nvstack_nvcache::ubj::format::MAGIC {
        Kind::Cache
    } else if u64::from_le_bytes(magic) == nvstack_nvcache::write::format::WC_MAGIC {
        Kind::WriteCache
    } else {
        Kind::Other
    })
}

/// Refuse an nvramdisk image where a cache is expected.
pub fn expect_cache(path: &Path) -> Result<()> {
    match kind(path)? {
        Kind::Nvramdisk => Err(Error::bad(format!(
            "{}: an nvramdisk image, not a cache (nvstack info and nvstack check read it)",
            path.display()
        ))),
        _ => Ok(()),
    }
}

/// Refuse a cache image where an nvramdisk is expected, naming the command that reads it.
pub fn expect_nvramdisk(path: &Path, instead: &str) -> Result<()> {
    match kind(path)? {
        Kind::Cache | Kind::WriteCache => Err(Error::bad(format!(
            "{}: an nvcache image, not an nvramdisk; {instead}",
            path.display()
        ))),
        _ => Ok(()),
    }
}
