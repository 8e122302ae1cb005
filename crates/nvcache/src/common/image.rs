//! The image layer both caches share: an NVRAM region kept in a file (DRAM emulating NVRAM
//! under /dev/shm, or a file on a DAX file system) with the absolute path of its backing file
//! recorded inside it (docs/format.md 10.3), so that every command needs only the image.
//!
//! As for nvramdisk images, everything plain reads can validate (length, superblock, path
//! record) is validated before anything is mapped, and a refused open or create changes
//! nothing. Every open locks: the image and the backing file exclusively for writers, shared
//! for readers (`inspect`, and `open_readonly`, whose recovery runs in a private copy). Each
//! cache's own image module (ubj/image.rs, write/image.rs) builds on these steps.

use crate::common::backing::FileDevice;
use crate::common::format::Label;
use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::{Error, Result, FIELD};
use nvstack_core::lock::{lock_file, open_file};
use nvstack_pmem::mmap::allocate_file;
use nvstack_pmem::{Access, MmapRegion};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Bytes of a backing block (the label's block).
const B: u64 = crate::common::format::LABEL_BYTES as u64;

/// Refuse an existing image without `force`; with it, lock the old one (never replace an
/// image another process has open).
pub(crate) fn claim_existing(path: &Path, force: bool) -> Result<Option<File>> {
    if !path.exists() {
        return Ok(None);
    }
    if !force {
        return Err(Error::invalid(
            "force",
            format!(
                "{}: file exists; pass {FIELD} to replace it",
                path.display()
            ),
        ));
    }
    let f = open_file(path, true, "image")?;
    lock_file(&f, path, "image", true)?;
    Ok(Some(f))
}

/// Open (or create) the backing file for a new cache, refusing to overwrite what its last
/// block holds unless it is zeros or a detached cache's label.
pub(crate) fn prepare_backing(
    p: &Path,
    backing_size: Option<u64>,
    force: bool,
) -> Result<(FileDevice, bool)> {
    if !p.exists() {
        let size = backing_size.ok_or_else(|| {
            Error::invalid(
                "backing_size",
                format!(
                    "{}: no such backing file; give {FIELD} to create it",
                    p.display()
                ),
            )
        })?;
        if size == 0 || !size.is_multiple_of(B) {
            return Err(Error::bad(format!(
                "backing size {size} bytes: must be a positive multiple of 4096"
            )));
        }
        let f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(p)
            .map_err(|e| Error::env(format!("{}: cannot create: {e}", p.display())))?;
        let sized = f.set_len(size + B);
        drop(f);
        let dev = sized
            .map_err(|e| Error::env(format!("{}: cannot size: {e}", p.display())))
            .and_then(|_| FileDevice::open(p));
        if dev.is_err() {
            let _ = std::fs::remove_file(p);
        }
        return Ok((dev?, true));
    }
    let dev = FileDevice::open(p)?;
    if let Some(size) = backing_size {
        if dev.blocks() * B != size + B {
            return Err(Error::invalid(
                "backing_size",
                format!(
                    "{}: {} bytes, but {FIELD} {size} needs {} (the device and one label \
                     block)",
                    p.display(),
                    dev.blocks() * B,
                    size + B
                ),
            ));
        }
    }
    if !force {
        check_last_block_free(&dev)?;
    }
    Ok((dev, false))
}

fn check_last_block_free(dev: &FileDevice) -> Result<()> {
    let last = dev.blocks() - 1;
    let mut b = vec![0u8; B as usize];
    dev.read(last, &mut b)?;
    let p = dev.path().display();
    match Label::decode(&b) {
        Ok(l) if l.detached => Ok(()),
        Ok(l) => Err(Error::invalid(
            "force",
            format!(
                "{p}: it is the backing file of another cache (identity {:032x}, not \
                 detached): its newest data may be only in that cache's NVRAM; detach that \
                 cache first, or pass {FIELD}",
                l.identity
            ),
        )),
        Err(_) if b.iter().all(|&x| x == 0) => Ok(()),
        Err(_) => Err(Error::invalid(
            "force",
            format!(
                "{p}: its last block (block {last}) holds data, and the cache keeps its label \
                 there; pass {FIELD} to overwrite it, or make the file 4096 bytes longer"
            ),
        )),
    }
}

/// Make a new image of `size` bytes at `path` (either kind: `init` writes its region) in a
/// locked temporary file beside it, renamed into place only when `init` succeeded: a refused
/// create leaves no file and an old image (claimed by the caller) untouched.
pub(crate) fn build_in_place<T>(
    path: &Path,
    size: u64,
    init: impl FnOnce(&MmapRegion) -> Result<T>,
) -> Result<T> {
    let name = path
        .file_name()
        .ok_or_else(|| Error::bad(format!("{}: not a file name", path.display())))?;
    let tmp = path.with_file_name(format!(
        ".{}.nvstack-create-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(|e| Error::env(format!("{}: cannot create: {e}", tmp.display())))?;
    let made = (|| {
        lock_file(&file, &tmp, "image", true)?;
        allocate_file(&file, path, size)?;
        let region = MmapRegion::map_file(file, path, Access::Shared)?;
        let out = init(&region)?;
        drop(region);
        std::fs::rename(&tmp, path).map_err(|e| {
            Error::env(format!(
                "{}: cannot move the new image into place: {e}",
                path.display()
            ))
        })?;
        Ok(out)
    })();
    if made.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    made
}

/// An image file validated with plain reads: its superblock (`S`: UBJ's or the write
/// cache's) and its backing path.
pub(crate) struct Validated<S> {
    pub file: File,
    pub sb: S,
    /// The recorded backing path, or what is wrong with its record.
    pub path_record: Result<PathBuf>,
}

/// The steps validating either kind of image starts with: open and lock the file, check that
/// it holds at least its first block, and read that block (superblock and path record).
/// `kind` names the image in the refusal; errors are returned as they are (the caller adds
/// the path). Returns the file, its length and the block.
pub(crate) fn read_first_block(
    path: &Path,
    write: bool,
    kind: &str,
) -> Result<(File, u64, Vec<u8>)> {
    let file = open_file(path, write, "image")?;
    lock_file(&file, path, "image", write)?;
    let len = file
        .metadata()
        .map_err(|e| Error::env(format!("{}: cannot stat: {e}", path.display())))?
        .len();
    if len < B {
        return Err(Error::bad(format!(
            "{}: {len} bytes: not {kind}",
            path.display()
        )));
    }
    let mut block = vec![0u8; B as usize];
    file.read_exact_at(&mut block, 0)
        .map_err(|e| Error::env(format!("{}: cannot read: {e}", path.display())))?;
    Ok((file, len, block))
}

pub(crate) fn backing_path<S>(v: &Validated<S>, over: Option<&Path>) -> Result<PathBuf> {
    match (over, &v.path_record) {
        (Some(p), _) => Ok(p.to_path_buf()),
        (None, Ok(p)) => Ok(p.clone()),
        (None, Err(e)) => Err(Error::invalid(
            "backing",
            format!("{e}; name the backing file with {FIELD}"),
        )),
    }
}

/// A validated image's region and backing file (`over` replaces the recorded path), opened
/// for writing (the backing file locked exclusively, the region mapped shared) or for reading
/// (shared lock, read-only, the region a private copy: recovery stays in memory).
pub(crate) fn open_parts<S>(
    path: &Path,
    v: Validated<S>,
    over: Option<&Path>,
    write: bool,
) -> Result<(Arc<MmapRegion>, Arc<FileDevice>, PathBuf)> {
    let bpath = backing_path(&v, over)?;
    let (dev, access) = match write {
        true => (FileDevice::open(&bpath)?, Access::Shared),
        false => (FileDevice::open_readonly(&bpath)?, Access::PrivateCopy),
    };
    let region = MmapRegion::map_file(v.file, path, access)?;
    Ok((Arc::new(region), Arc::new(dev), bpath))
}

/// [`open_parts`], then the cache's own open (`open`, recovery included) on them; its error
/// names both files.
pub(crate) fn open_cache<S, C>(
    path: &Path,
    v: Validated<S>,
    over: Option<&Path>,
    write: bool,
    open: impl FnOnce(Arc<MmapRegion>, Arc<FileDevice>) -> Result<C>,
) -> Result<(Arc<C>, PathBuf)> {
    let (region, dev, bpath) = open_parts(path, v, over, write)?;
    let cache = open(region, dev)
        .map_err(|e| e.context(format!("{} over {}", path.display(), bpath.display())))?;
    Ok((Arc::new(cache), bpath))
}
