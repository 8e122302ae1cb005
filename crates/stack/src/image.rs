//! An image opened for one command (`nvstack write`, `read`, `discard`, and whatever else runs
//! a few requests and exits): any kind, read-only or for writing, closed so that what was
//! written is durable and the cache's counters are stored.

use crate::kind::{identify, Kind};
use crate::kinds::Opened;
pub use crate::spec::Access;
use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::Result;
use nvstack_nvcache::Cache;
use nvstack_nvramdisk::image::Disk;
use nvstack_nvramdisk::OpenOptions;
use std::path::Path;
use std::sync::Arc;

/// An opened image of any kind.
pub struct Image {
    opened: Box<dyn Opened>,
    kind: Kind,
    access: Access,
}

impl Image {
    /// Open the image at `path`; a cache over its recorded backing file, or `backing` when it
    /// moved. A file of no known kind is opened as an nvramdisk, whose check names the fault.
    pub fn open(path: &Path, access: Access, backing: Option<&Path>) -> Result<Image> {
        let kind = identify(path)?.unwrap_or(Kind::Nvramdisk);
        let opened = kind.ops().open(path, access, backing)?;
        assert_eq!(
            opened.backing().is_some(),
            kind.is_cache(),
            "a cache, and only a cache, opens over a backing file"
        );
        Ok(Image {
            opened,
            kind,
            access,
        })
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub fn device(&self) -> &dyn BlockDevice {
        self.opened.device()
    }

    /// The nvramdisk, when the image is one (its recovery report, superblock, hooks).
    pub fn nvramdisk(&self) -> Option<&Disk> {
        self.opened.as_any().downcast_ref::<Disk>()
    }

    /// The UBJ cache, when the image is one (its census, checkpoint).
    pub fn ubj(&self) -> Option<&Arc<nvstack_nvcache::ubj::image::UbjImage>> {
        let o = self.opened.as_any();
        o.downcast_ref::<nvstack_nvcache::ubj::image::Opened>()
            .map(|o| &o.cache)
    }

    /// The write cache, when the image is one (its counters, admission).
    pub fn write_cache(&self) -> Option<&Arc<nvstack_nvcache::write::image::WriteCacheImage>> {
        let o = self.opened.as_any();
        o.downcast_ref::<nvstack_nvcache::write::image::Opened>()
            .map(|o| &o.cache)
    }

    /// A cache through the library's contract (writeback, detach, counters); None for an
    /// nvramdisk.
    pub fn cache(&self) -> Option<Arc<dyn Cache>> {
        self.opened.cache()
    }

    /// A cache's backing file (the one it opened over); None for an nvramdisk.
    pub fn backing(&self) -> Option<&Path> {
        self.opened.backing()
    }

    /// Close after writing: a cache flushes (UBJ commits: its writes are durable at the next
    /// flush; the write cache flushes its bypassed writes) and stores its counters; an
    /// nvramdisk's writes were durable on return. Returns UBJ's epoch after the commit.
    pub fn close_written(self) -> Result<Option<u64>> {
        assert_eq!(self.access, Access::Write, "only a writer's close commits");
        self.opened.close_written()
    }
}

/// An nvramdisk image validated, locked exclusively and mapped, for a caller that instruments
/// the region before opening the device on it (the SQLite extension's recorded runs).
pub fn map_nvramdisk(path: &Path) -> Result<nvstack_pmem::MmapRegion> {
    let (file, sb) = nvstack_nvramdisk::image::open_image_file(path)?;
    let mapped = nvstack_pmem::MmapRegion::map_file(file, path, nvstack_pmem::Access::Shared)?;
    use nvstack_pmem::Region;
    assert!(
        mapped.len() >= sb.geometry.blocks * u64::from(sb.geometry.block_bytes),
        "a validated image holds its blocks"
    );
    Ok(mapped)
}

/// An nvramdisk image opened with `options` (hooks, a read-only open), for a caller that
/// drives the disk itself (the demo's stop points, `nvstack info`).
pub fn open_nvramdisk(path: &Path, options: OpenOptions, access: Access) -> Result<Disk> {
    match access {
        Access::Write => nvstack_nvramdisk::image::open_image(path, options),
        Access::ReadOnly => nvstack_nvramdisk::image::open_image_readonly(path, options),
    }
}
