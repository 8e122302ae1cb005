//! `nvstack.Device`: an nvramdisk image (the program's `format`, `write`, `read`, `discard`,
//! `check`). A write of up to the device's atomic unit is all-or-nothing across a crash; a
//! longer one is refused (as `nvstack write` without `--chunked`). Every range is checked
//! before the device is touched: an out-of-range LBA raises BadInput naming the device's size.

use crate::{json, py_err, BadInput};
use nvstack_core::blockdev::BlockDevice;
use nvstack_nvramdisk::format::FormatOptions;
use nvstack_nvramdisk::image::{self, Disk};
use nvstack_nvramdisk::layout::Protocol;
use nvstack_nvramdisk::OpenOptions;
use nvstack_stack::image::open_nvramdisk;
use nvstack_stack::Access;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::path::PathBuf;

#[pyclass]
pub struct Device {
    disk: Disk,
    path: PathBuf,
}

impl Device {
    fn range(&self, lba: u64, count: u64, what: &str) -> PyResult<()> {
        let blocks = self.disk.blocks();
        if count == 0 {
            return Err(BadInput::new_err(format!(
                "{what} of 0 blocks: give at least 1"
            )));
        }
        if lba.checked_add(count).is_none_or(|end| end > blocks) {
            return Err(BadInput::new_err(format!(
                "{what} of {count} blocks at LBA {lba} is out of range: the device has {blocks} blocks (LBA 0 to {})",
                blocks.saturating_sub(1)
            )));
        }
        Ok(())
    }
}

#[pymethods]
impl Device {
    /// Format an image file of `size` bytes (refuses an existing file unless `force`).
    #[staticmethod]
    #[pyo3(signature = (path, size, block_size=4096, lanes=None, protocol="fast", force=false))]
    fn format(
        py: Python<'_>,
        path: PathBuf,
        size: u64,
        block_size: u32,
        lanes: Option<u32>,
        protocol: &str,
        force: bool,
    ) -> PyResult<Device> {
        let d = FormatOptions::default();
        let fo = FormatOptions {
            block_bytes: block_size,
            lanes: lanes.unwrap_or(d.lanes),
            protocol: Protocol::parse(protocol).map_err(py_err)?,
            ..d
        };
        py.detach(|| image::format_image(&path, size, &fo, force))
            .map_err(py_err)?;
        Device::open(py, path)
    }

    /// Open an image (recovery runs first, as at every open).
    #[staticmethod]
    fn open(py: Python<'_>, path: PathBuf) -> PyResult<Device> {
        let disk = py
            .detach(|| open_nvramdisk(&path, OpenOptions::default(), Access::Write))
            .map_err(py_err)?;
        Ok(Device { disk, path })
    }

    /// The offline checker's report of an image (`nvstack check --json`); the image must not
    /// be open for writing.
    #[staticmethod]
    fn check_image(py: Python<'_>, path: PathBuf) -> PyResult<String> {
        let r = py
            .detach(|| nvstack_nvramdisk::check::check_image(&path))
            .map_err(py_err)?;
        json(&r)
    }

    #[getter]
    fn path(&self) -> String {
        self.path.display().to_string()
    }

    #[getter]
    fn block_size(&self) -> u32 {
        self.disk.block_bytes()
    }

    #[getter]
    fn blocks(&self) -> u64 {
        self.disk.blocks()
    }

    /// The atomic unit: most blocks one write lands all-or-nothing.
    #[getter]
    fn atomic_blocks(&self) -> u32 {
        self.disk.caps().atomic_blocks
    }

    /// `count` blocks from `lba`.
    fn read<'py>(&self, py: Python<'py>, lba: u64, count: u64) -> PyResult<Bound<'py, PyBytes>> {
        self.range(lba, count, "read")?;
        let n = usize::try_from(count * u64::from(self.block_size()))
            .map_err(|_| BadInput::new_err("read: too many blocks"))?;
        let mut buf = vec![0u8; n];
        py.detach(|| self.disk.read(lba, &mut buf))
            .map_err(py_err)?;
        Ok(PyBytes::new(py, &buf))
    }

    /// Write `data` (whole blocks, at most the atomic unit) at `lba`, atomically: durable on
    /// return.
    fn write(&self, py: Python<'_>, lba: u64, data: &[u8]) -> PyResult<()> {
        let b = self.block_size() as usize;
        if data.is_empty() || !data.len().is_multiple_of(b) {
            return Err(BadInput::new_err(format!(
                "write: data is {} bytes, not a positive multiple of the block size {b}",
                data.len()
            )));
        }
        let n = (data.len() / b) as u64;
        let unit = u64::from(self.atomic_blocks());
        if n > unit {
            return Err(BadInput::new_err(format!(
                "write: data is {n} blocks; one atomic write takes at most {unit}"
            )));
        }
        self.range(lba, n, "write")?;
        py.detach(|| self.disk.write(lba, data)).map_err(py_err)
    }

    /// Discard `count` blocks from `lba` (they read as zeros).
    fn discard(&self, py: Python<'_>, lba: u64, count: u64) -> PyResult<()> {
        self.range(lba, count, "discard")?;
        py.detach(|| self.disk.discard(lba, count)).map_err(py_err)
    }
}
