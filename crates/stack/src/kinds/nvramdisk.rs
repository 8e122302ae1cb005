//! An nvramdisk image (seed 002): a transactional block device on persistent memory, every
//! write atomic and durable when it returns. No backing file: not a cache.

use super::{ImageKind, Opened};
use crate::spec::{Access, Backend, Kind, Promise, Shape};
use crate::spec::{ServeSpec, Served};
use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::Result;
use nvstack_nvramdisk::image::Disk;
use nvstack_nvramdisk::OpenOptions;
use std::any::Any;
use std::path::Path;
use std::sync::Arc;

pub(crate) struct Nvramdisk;

pub(crate) static NVRAMDISK: Nvramdisk = Nvramdisk;

impl ImageKind for Nvramdisk {
    fn kind(&self) -> Kind {
        Kind::Nvramdisk
    }

    fn name(&self) -> &'static str {
        "an nvramdisk image"
    }

    fn claims(&self, magic: [u8; 8]) -> bool {
        magic == nvstack_nvramdisk::layout::MAGIC
    }

    fn backend(&self) -> Backend {
        Backend::Nvramdisk
    }

    fn peek(&self, path: &Path) -> Result<Shape> {
        let sb = nvstack_nvramdisk::image::peek(path)?;
        Ok(Shape {
            kind: Kind::Nvramdisk,
            blocks: sb.geometry.blocks,
            block_bytes: sb.geometry.block_bytes,
            unit_blocks: nvstack_nvramdisk::ATOMIC_BLOCKS_MAX as u64,
            promise: Promise::AtomicOnReturn,
        })
    }

    fn open(&self, path: &Path, access: Access, _: Option<&Path>) -> Result<Box<dyn Opened>> {
        let o = OpenOptions::default();
        Ok(Box::new(match access {
            Access::Write => nvstack_nvramdisk::image::open_image(path, o)?,
            Access::ReadOnly => nvstack_nvramdisk::image::open_image_readonly(path, o)?,
        }))
    }

    fn serve(&self, path: &Path, _: &ServeSpec) -> Result<Served> {
        let d = nvstack_nvramdisk::image::open_image(path, OpenOptions::default())?;
        let rep = d.recovery_report().clone();
        let what = if rep.was_clean() {
            "clean".to_string()
        } else {
            format!("recovered: {} redone, {} undone", rep.redone, rep.undone)
        };
        Ok(Served::plain(Arc::new(d), what))
    }

    #[cfg(feature = "powercut")]
    fn serve_power_cut(
        &self,
        path: &Path,
        _: &ServeSpec,
        cut: crate::powercut::PowerCutSpec,
    ) -> Result<Served> {
        let pc = crate::powercut::PowerCut::load(path, cut)?;
        let d = nvstack_nvramdisk::NvramDisk::open(pc.region(), Default::default())?;
        Ok(Served::power_cut(Arc::new(d), pc, None, String::new()))
    }
}

impl Opened for Disk {
    fn device(&self) -> &dyn BlockDevice {
        self
    }

    /// Every write was durable when it returned: nothing to do.
    fn close_written(&self) -> Result<Option<u64>> {
        Ok(None)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
