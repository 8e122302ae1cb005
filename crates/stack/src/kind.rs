//! Which kind of image a file is, told apart by its first eight bytes (each format's magic),
//! and its shape read from its superblock without opening it. Each kind's facts are its impl
//! in `kinds/` (the one place outside the formats' own crates that knows the magics:
//! `scripts/check-layers.sh` fails on another); here the questions asked of any image.

pub use crate::spec::{Kind, Promise, Shape};
use nvstack_core::error::{Error, Result};
use std::io::Read;
use std::path::Path;

impl Kind {
    /// An image of this kind, as a phrase ("a UBJ cache image").
    pub fn name(self) -> &'static str {
        self.ops().name()
    }

    /// Either cache (an image with a backing file).
    pub fn is_cache(self) -> bool {
        self.ops().as_cache().is_some()
    }

    /// Whether a run may override a cache's stored settings (false for an nvramdisk, which
    /// has none, and for a cache that runs with what create stored).
    pub fn takes_run_settings(self) -> bool {
        self.ops()
            .as_cache()
            .is_some_and(|c| c.takes_run_settings())
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
    Ok(Kind::ALL.into_iter().find(|k| k.ops().claims(magic)))
}

/// Refuse an nvramdisk image where a cache is expected; `reader` names what reads it.
pub fn expect_cache(path: &Path, reader: &str) -> Result<()> {
    match identify(path)? {
        Some(k) if !k.is_cache() => Err(Error::bad(format!(
            "{}: {}, not a cache ({reader})",
            path.display(),
            k.name()
        ))),
        _ => Ok(()),
    }
}

/// Refuse an image of another kind where an nvramdisk is expected; `reader` names what reads
/// a cache instead.
pub fn expect_nvramdisk(path: &Path, reader: &str) -> Result<()> {
    let (p, k) = match identify(path)? {
        Some(k) if k != Kind::Nvramdisk => (path.display(), k),
        _ => return Ok(()),
    };
    Err(Error::bad(if k.is_cache() {
        format!("{p}: {}, not an nvramdisk; {reader}", k.name())
    } else {
        format!("{p}: {}, not an nvramdisk", k.name())
    }))
}

/// The shape of the image at `path`. A file of no known kind is read as an nvramdisk image,
/// whose superblock check names what is wrong.
pub fn peek(path: &Path) -> Result<Shape> {
    // No known magic: the nvramdisk's superblock check names what is wrong.
    let kind = identify(path)?.unwrap_or(Kind::Nvramdisk);
    let shape = kind.ops().peek(path)?;
    assert_eq!(shape.kind, kind, "each kind peeks its own");
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
    match identify(image)?.and_then(|k| k.ops().as_cache()) {
        Some(c) => c.backing_of(image, over),
        None => Err(Error::bad(format!(
            "{}: not a cache image (no backing file)",
            image.display()
        ))),
    }
}

/// The kind of the cache image at `image`: a file of no known kind is read as UBJ, whose own
/// check names what is wrong; another kind of image is refused, named.
pub(crate) fn cache_kind(image: &Path) -> Result<Kind> {
    match identify(image)? {
        Some(k) if k.is_cache() => Ok(k),
        None => Ok(Kind::Ubj),
        Some(k) => Err(Error::bad(format!(
            "{}: {}, not a cache image",
            image.display(),
            k.name()
        ))),
    }
}

/// The settings a UBJ cache image stores (what it runs with unless a run overrides them).
pub fn stored_ubj_settings(image: &Path) -> Result<nvstack_nvcache::Settings> {
    Ok(nvstack_nvcache::ubj::image::peek(image)?.settings)
}
