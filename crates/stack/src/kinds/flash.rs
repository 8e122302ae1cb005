//! A NAND flash state file (seed 004's flash, crates/flash): the FTL over its pages as a block
//! device, a block being one page. Each page is programmed with one pwrite (a write that
//! returned survives a process kill); a power cut keeps what a flush (fdatasync) covered. No
//! backing file: not a cache.

use super::{ImageKind, Opened};
use crate::spec::{Access, Backend, Kind, Promise, Shape};
use crate::spec::{ServeSpec, Served};
use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::Result;
use nvstack_flash::device::{FlashDevice, Latency};
use std::any::Any;
use std::path::Path;
use std::sync::Arc;

pub(crate) struct Flash;

pub(crate) static FLASH: Flash = Flash;

impl ImageKind for Flash {
    fn kind(&self) -> Kind {
        Kind::Flash
    }

    fn name(&self) -> &'static str {
        "a flash state file"
    }

    fn claims(&self, magic: [u8; 8]) -> bool {
        &magic == nvstack_flash::file::MAGIC
    }

    fn backend(&self) -> Backend {
        Backend::Flash
    }

    fn peek(&self, path: &Path) -> Result<Shape> {
        let (h, _) = nvstack_flash::device::inspect(path)?;
        Ok(Shape {
            kind: Kind::Flash,
            blocks: h.geo.logical_pages(),
            block_bytes: h.geo.page_data_bytes,
            unit_blocks: 1,
            promise: Promise::PageAtFlush,
        })
    }

    /// The chip's datasheet time is counted, not slept: a command runs at the host's speed.
    fn open(&self, path: &Path, access: Access, _: Option<&Path>) -> Result<Box<dyn Opened>> {
        Ok(Box::new(match access {
            Access::Write => FlashDevice::open(path, Latency::Counted)?,
            Access::ReadOnly => FlashDevice::open_readonly(path, Latency::Counted)?,
        }))
    }

    fn serve(&self, path: &Path, _: &ServeSpec) -> Result<Served> {
        let dev = FlashDevice::open(path, Latency::Counted)?;
        let h = dev.header();
        let what = format!(
            "flash, {} FTL, {} B pages, chip time counted",
            h.ftl.kind.name(),
            h.geo.page_data_bytes
        );
        Ok(Served::plain(Arc::new(dev), what))
    }

    #[cfg(feature = "powercut")]
    fn serve_power_cut(
        &self,
        path: &Path,
        _: &ServeSpec,
        cut: crate::powercut::PowerCutSpec,
    ) -> Result<Served> {
        Err(nvstack_core::error::Error::bad(format!(
            "{}: power cut {}: the power-cut runs model NVRAM (the crash checker's region), not \
             NAND; a flash state file has none",
            path.display(),
            cut.text()
        )))
    }
}

impl Opened for FlashDevice {
    fn device(&self) -> &dyn BlockDevice {
        self
    }

    /// The pages made durable (fdatasync) and the counters saved.
    fn close_written(&self) -> Result<Option<u64>> {
        self.flush()?;
        Ok(None)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
