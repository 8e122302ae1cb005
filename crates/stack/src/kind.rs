//! Which kind of image a file is, told apart by its first eight bytes (each format's magic),
//! and its shape read from its superblock without opening it. The one place outside the
//! formats' own crates that knows the magics (`scripts/check-layers.sh` fails on another).

use nvstack_core::error::{Error, Result};
use std::io::Read;
use std::path::Path;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A transactional block device on persistent memory (seed 002).
    Nvramdisk,
    /// A UBJ cache: the NVRAM buffer cache that is also the journal (seed 001).
    Ubj,
    /// A write cache in front of a disk (seed 004's NVRAM write cache, dm-writecache's role).
    WriteCache,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Nvramdisk => "an nvramdisk image",
            Kind::Ubj => "a UBJ cache image",
            Kind::WriteCache => "a write cache image",
        }
    }

    /// Either cache (an image with a backing file).
    pub fn is_cache(self) -> bool {
        matches!(self, Kind::Ubj | Kind::WriteCache)
    }
}

/// The kind of the image at `path`, or None when its first eight bytes are no nvstack magic
/// (the format's own open then names what is wrong). A missing file is bad input (exit 2).
pub fn identify(path: &Path) -> Result<Option<Kind>> {
    let mut f = std::fs::File::open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::bad(format!("{}: no such image", path.display()))
        } else {
            Error::env(format!("{}: cannot open: {e}", path.display()))
        }
    })?;
    let mut magic = [0u8; 8];
    if f.read_exact(&mut magic).is_err() {
        return Ok(None);
    }
    Ok(if magic == nvstack_nvramdisk::layout::MAGIC {
        Some(Kind::Nvramdisk)
    } else if u64::from_le_bytes(magic) == nvstack_nvcache::ubj::format::MAGIC {
        Some(Kind::Ubj)
    } else if u64::from_le_bytes(magic) == nvstack_nvcache::write::format::WC_MAGIC {
        Some(Kind::WriteCache)
    } else {
        None
    })
}

/// Refuse an nvramdisk image where a cache is expected; `reader` names what reads it.
pub fn expect_cache(path: &Path, reader: &str) -> Result<()> {
    match identify(path)? {
        Some(Kind::Nvramdisk) => Err(Error::bad(format!(
            "{}: an nvramdisk image, not a cache ({reader})",
            path.display()
        ))),
        _ => Ok(()),
    }
}

/// Refuse a cache image where an nvramdisk is expected; `reader` names what reads it.
pub fn expect_nvramdisk(path: &Path, reader: &str) -> Result<()> {
    match identify(path)? {
        Some(k) if k.is_cache() => Err(Error::bad(format!(
            "{}: {}, not an nvramdisk; {reader}",
            path.display(),
            k.name()
        ))),
        _ => Ok(()),
    }
}

/// What one write of an image's device lands as, so that a caller can word it and cut
/// requests to fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Promise {
    /// Atomic and durable when it returns, up to `unit_blocks` (nvramdisk).
    AtomicOnReturn,
    /// Whole in one epoch, durable at the next flush (a commit), up to `unit_blocks` (UBJ).
    WholeAtFlush,
    /// Admitted blocks durable when it returns, the others at the next flush (write cache).
    AdmittedOnReturn,
}

/// An image's device as its superblock describes it, read without opening (no recovery, no
/// lock beyond a shared one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub kind: Kind,
    pub blocks: u64,
    pub block_bytes: u32,
    /// Most blocks one write lands as its promise says.
    pub unit_blocks: u64,
    pub promise: Promise,
}

/// The shape of the image at `path`. A file of no known kind is read as an nvramdisk image,
/// whose superblock check names what is wrong.
pub fn peek(path: &Path) -> Result<Shape> {
    let shape = match identify(path)? {
        Some(Kind::Ubj) => {
            let sb = nvstack_nvcache::ubj::image::peek(path)?;
            Shape {
                kind: Kind::Ubj,
                blocks: sb.blocks,
                block_bytes: nvstack_nvcache::ubj::format::BLOCK_BYTES,
                unit_blocks: sb.unit_blocks().into(),
                promise: Promise::WholeAtFlush,
            }
        }
        Some(Kind::WriteCache) => {
            let sb = nvstack_nvcache::write::image::peek_wc(path)?;
            Shape {
                kind: Kind::WriteCache,
                blocks: sb.blocks,
                block_bytes: sb.sector_bytes,
                unit_blocks: sb.unit_blocks().into(),
                promise: Promise::AdmittedOnReturn,
            }
        }
        Some(Kind::Nvramdisk) | None => {
            let sb = nvstack_nvramdisk::image::peek(path)?;
            Shape {
                kind: Kind::Nvramdisk,
                blocks: sb.geometry.blocks,
                block_bytes: sb.geometry.block_bytes,
                unit_blocks: nvstack_nvramdisk::ATOMIC_BLOCKS_MAX as u64,
                promise: Promise::AtomicOnReturn,
            }
        }
    };
    assert!(
        shape.blocks > 0 && shape.unit_blocks > 0,
        "validated superblocks"
    );
    assert!(shape.block_bytes.is_power_of_two() && shape.block_bytes >= 512);
    Ok(shape)
}

/// A cache image's backing file: the one recorded at create, or `over` when it moved (checked
/// against the image's label either way when the cache opens).
pub fn backing_of(image: &Path, over: Option<&Path>) -> Result<std::path::PathBuf> {
    match identify(image)? {
        Some(Kind::WriteCache) => nvstack_nvcache::write::serve::wc_backing_of(image, over),
        Some(Kind::Ubj) => nvstack_nvcache::ubj::image::backing_of(image, over),
        _ => Err(Error::bad(format!(
            "{}: not a cache image (no backing file)",
            image.display()
        ))),
    }
}

/// The settings a UBJ cache image stores (what it runs with unless a run overrides them).
pub fn stored_ubj_settings(image: &Path) -> Result<nvstack_nvcache::Settings> {
    Ok(nvstack_nvcache::ubj::image::peek(image)?.settings)
}
