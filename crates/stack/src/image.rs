//! An image opened for one command (`nvstack write`, `read`, `discard`, and whatever else runs
//! a few requests and exits): any kind, read-only or for writing, closed so that what was
//! written is durable and the cache's counters are stored.

use crate::kind::{identify, Kind};
use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::Result;
use nvstack_nvramdisk::image::Disk;
use nvstack_nvramdisk::OpenOptions;
use std::path::{Path, PathBuf};

/// Whether the command writes. Read-only opens recover nothing on the image (an nvramdisk's
/// recovery runs in memory; a cache's image is not written).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    ReadOnly,
    Write,
}

enum Opened {
    Nvramdisk(Box<Disk>),
    Ubj(nvstack_nvcache::ubj::image::Opened),
    WriteCache(nvstack_nvcache::write::image::WcOpened),
}

/// An opened image of any kind.
pub struct Image {
    opened: Opened,
    access: Access,
}

impl Image {
    /// Open the image at `path`; a cache over its recorded backing file, or `backing` when it
    /// moved. A file of no known kind is opened as an nvramdisk, whose check names the fault.
    pub fn open(path: &Path, access: Access, backing: Option<&Path>) -> Result<Image> {
        use nvstack_nvcache::ubj::image as ubj;
        use nvstack_nvcache::write::image as wc;
        let kind = identify(path)?.unwrap_or(Kind::Nvramdisk);
        let opened = match (kind, access) {
            (Kind::Ubj, Access::Write) => Opened::Ubj(ubj::open_image(path, backing, None)?),
            (Kind::Ubj, Access::ReadOnly) => Opened::Ubj(ubj::open_readonly(path, backing)?),
            (Kind::WriteCache, Access::Write) => {
                Opened::WriteCache(wc::open_wc_image(path, backing, None)?)
            }
            (Kind::WriteCache, Access::ReadOnly) => {
                Opened::WriteCache(wc::open_wc_readonly(path, backing)?)
            }
            (Kind::Nvramdisk, Access::Write) => Opened::Nvramdisk(Box::new(
                nvstack_nvramdisk::image::open_image(path, OpenOptions::default())?,
            )),
            (Kind::Nvramdisk, Access::ReadOnly) => Opened::Nvramdisk(Box::new(
                nvstack_nvramdisk::image::open_image_readonly(path, OpenOptions::default())?,
            )),
        };
        Ok(Image { opened, access })
    }

    pub fn kind(&self) -> Kind {
        match self.opened {
            Opened::Nvramdisk(_) => Kind::Nvramdisk,
            Opened::Ubj(_) => Kind::Ubj,
            Opened::WriteCache(_) => Kind::WriteCache,
        }
    }

    pub fn device(&self) -> &dyn BlockDevice {
        match &self.opened {
            Opened::Nvramdisk(d) => &**d,
            Opened::Ubj(c) => &*c.cache,
            Opened::WriteCache(c) => &*c.cache,
        }
    }

    /// The nvramdisk, when the image is one (its recovery report, superblock, hooks).
    pub fn nvramdisk(&self) -> Option<&Disk> {
        match &self.opened {
            Opened::Nvramdisk(d) => Some(d),
            _ => None,
        }
    }

    /// The UBJ cache, when the image is one (its census, checkpoint, detach).
    pub fn ubj(&self) -> Option<&std::sync::Arc<nvstack_nvcache::ubj::image::UbjImage>> {
        match &self.opened {
            Opened::Ubj(c) => Some(&c.cache),
            _ => None,
        }
    }

    /// The write cache, when the image is one (its writeback, detach, counters).
    pub fn write_cache(&self) -> Option<&std::sync::Arc<nvstack_nvcache::write::image::WcImage>> {
        match &self.opened {
            Opened::WriteCache(c) => Some(&c.cache),
            _ => None,
        }
    }

    /// A cache's backing file (the one it opened over); None for an nvramdisk.
    pub fn backing(&self) -> Option<&PathBuf> {
        match &self.opened {
            Opened::Nvramdisk(_) => None,
            Opened::Ubj(c) => Some(&c.backing),
            Opened::WriteCache(c) => Some(&c.backing),
        }
    }

    /// Close after writing: a cache flushes (UBJ commits: its writes are durable at the next
    /// flush; the write cache flushes its bypassed writes) and stores its counters; an
    /// nvramdisk's writes were durable on return. Returns UBJ's epoch after the commit.
    pub fn close_written(self) -> Result<Option<u64>> {
        assert_eq!(self.access, Access::Write, "only a writer's close commits");
        let epoch = match self.opened {
            Opened::Nvramdisk(_) => None,
            Opened::WriteCache(c) => {
                c.cache.flush()?;
                c.cache.save_counters();
                None
            }
            Opened::Ubj(c) => {
                c.cache.flush()?;
                c.cache.save_counters();
                Some(c.cache.epoch())
            }
        };
        Ok(epoch)
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
