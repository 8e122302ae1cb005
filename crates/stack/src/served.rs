//! A device opened to be served (by FUSE today, by any transport): any backend, and for a cache
//! its background threads (the ticker; the write cache's destage thread) started with it and
//! stopped before its close, so that nothing runs after the counters are stored.
//!
//! Transports (`nvstack-export`) take a [`Served`] and speak their protocol over `dev`; this
//! crate speaks none.

use crate::kind::{identify, Kind};
use crate::raw::{RawDevice, RAW_BLOCK_BYTES};
pub use crate::spec::{Backend, ServeSpec, Served, ServedCache};
use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::{Error, Result};
use nvstack_nvcache::FileDevice;
use nvstack_pmem::{Access, MmapRegion};
use std::path::Path;
use std::sync::Arc;

impl Backend {
    /// The backend an image of `kind` is served by unless asked otherwise.
    pub fn of_kind(kind: Option<Kind>) -> Backend {
        kind.map_or(Backend::Nvramdisk, |k| k.ops().backend())
    }

    /// The one kind of image this backend serves (nvramdisk, flash); None for the cache
    /// backend (either cache: the image says which) and for those that serve no image kind.
    pub fn kind_served(self) -> Option<Kind> {
        Kind::ALL
            .into_iter()
            .find(|k| !k.is_cache() && k.ops().backend() == self)
    }

    /// The kind `image` is served as by this backend, if it serves a kind of image.
    fn kind_for(self, image: &Path) -> Result<Option<Kind>> {
        match self {
            Backend::Cache => crate::kind::cache_kind(image).map(Some),
            b => Ok(b.kind_served()),
        }
    }
}

/// Open what `spec` names with `backend`.
pub fn open(backend: Backend, spec: &ServeSpec) -> Result<Served> {
    if backend == Backend::DirectFile {
        let p = spec.backing.ok_or_else(|| {
            Error::bad("the direct file: no backing file given (the file to serve)")
        })?;
        return open_direct_file(p);
    }
    let image = spec
        .image
        .ok_or_else(|| Error::bad(format!("backend {}: no image given", backend.name())))?;
    if let Some(cut) = spec.power_cut {
        return open_power_cut(backend, image, spec, cut);
    }
    match backend.kind_for(image)? {
        Some(kind) => kind.ops().serve(image, spec),
        None => {
            assert_eq!(backend, Backend::Raw, "the direct file is served above");
            open_raw(image, spec.raw_block_bytes)
        }
    }
}

#[cfg(feature = "powercut")]
/// Open `image` for serving with `backend` on the simulated region, power cut armed by the
/// caller ([`PowerCut::arm`]): an nvramdisk image alone, a cache with its backing file.
fn open_power_cut(
    backend: Backend,
    image: &Path,
    spec: &ServeSpec,
    cut: crate::powercut::PowerCutSpec,
) -> Result<Served> {
    let kind = match backend.kind_for(image)? {
        Some(kind) => kind,
        None => {
            return Err(Error::bad(format!(
                "backend {}: no power-cut run (nvramdisk and cache images only)",
                backend.name()
            )))
        }
    };
    kind.ops().serve_power_cut(image, spec, cut)
}

#[cfg(not(feature = "powercut"))]
fn open_power_cut(
    _: Backend,
    image: &Path,
    _: &ServeSpec,
    cut: crate::powercut::PowerCutSpec,
) -> Result<Served> {
    Err(Error::bad(format!(
        "{}: power cut {}: testing only, and this build has no power-cut machinery (the \
         feature `powercut` of nvstack-stack)",
        image.display(),
        cut.text()
    )))
}

/// The label of the file at `path` when it is a cache's backing file that is not detached
/// (its newest data may be only in that cache's NVRAM): the cache's identity.
pub fn live_cache_backing(path: &Path) -> Result<Option<u128>> {
    let dev = FileDevice::open_readonly(path)?;
    let mut last = vec![0u8; 4096];
    dev.read(dev.blocks() - 1, &mut last)?;
    Ok(nvstack_nvcache::common::format::Label::decode(&last)
        .ok()
        .filter(|l| !l.detached)
        .map(|l| l.identity))
}

/// The plain backing file (the caller refuses a live cache's: [`live_cache_backing`]).
fn open_direct_file(p: &Path) -> Result<Served> {
    let dev = FileDevice::open(p)?;
    let what = format!(
        "direct file{}",
        if dev.direct() {
            ", O_DIRECT"
        } else {
            ", buffered (no O_DIRECT here)"
        }
    );
    Ok(Served::plain(Arc::new(dev), what))
}

/// What an image file holds that serving it raw would destroy, if anything.
pub fn holds_an_image(img: &Path) -> Result<Option<&'static str>> {
    Ok(match identify(img)? {
        Some(k) => Some(k.name()),
        None if nvstack_nvramdisk::image::peek(img).is_ok() => Some(Kind::Nvramdisk.name()),
        None => None,
    })
}

/// Any file of whole pages as plain blocks (the caller refuses an image without force:
/// [`holds_an_image`]), locked exclusively.
fn open_raw(img: &Path, block_bytes: Option<u32>) -> Result<Served> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(img)
        .map_err(|e| Error::env(format!("{}: cannot open: {e}", img.display())))?;
    match f.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            return Err(Error::env(format!(
                "{}: image is locked by another process (another nvstack command or daemon \
                 has it open)",
                img.display()
            )))
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(Error::env(format!("{}: cannot lock: {e}", img.display())))
        }
    }
    let r = MmapRegion::map_file(f, img, Access::Shared)?;
    let dev = RawDevice::with_block_bytes(Arc::new(r), block_bytes.unwrap_or(RAW_BLOCK_BYTES))?;
    Ok(Served::plain(Arc::new(dev), "raw".into()))
}
