//! Images: nvramdisk regions kept in files. Opening validates everything it can from the file
//! with ordinary reads (length, both superblock copies) before anything is mapped, so a short,
//! empty or foreign file gets a clear error and no SIGBUS, and nothing is ever written to a
//! file that failed validation. Every open takes a lock on the file: exclusive for writers,
//! shared for readers.

use super::disk::{NvramDisk, OpenOptions};
use super::format::{format_region, FormatOptions, SuperblockCopies};
use super::layout::{Superblock, SB_PAGE_BYTES};
use nvstack_core::error::{Error, Result};
use nvstack_pmem::mmap::allocate_file;
use nvstack_pmem::{Access, MmapRegion};
use std::fs::{File, OpenOptions as FsOpen};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

pub type Disk = NvramDisk<MmapRegion>;

pub(crate) fn lock(file: &File, path: &Path, exclusive: bool) -> Result<()> {
    nvstack_core::lock::lock_file(file, path, "image", exclusive)
}

/// Create and format a new image of `size` bytes. An existing file is refused unless `force`.
///
/// The new image is built in a temporary file beside the target and renamed over it only once
/// it is complete, so a format that fails (no space, say) leaves no half-made file and does not
/// destroy the image it was asked to replace. An existing image is locked first: one in use by
/// another process is never replaced.
pub fn format_image(path: &Path, size: u64, fo: &FormatOptions, force: bool) -> Result<Superblock> {
    // Validate the arguments before touching the file system.
    super::layout::Geometry::compute(size, fo.block_bytes, fo.lanes)?;
    nvstack_pmem::ordering::check_available(&fo.ordering)?;
    let _old = if path.exists() {
        if !force {
            return Err(Error::bad(format!(
                "{}: file exists, and force is off: an image is replaced only when asked",
                path.display()
            )));
        }
        let f = open_file(path, false)?;
        lock(&f, path, true)?;
        Some(f) // held until the new image has replaced it
    } else {
        None
    };
    let name = path
        .file_name()
        .ok_or_else(|| Error::bad(format!("{}: not a file name", path.display())))?;
    let tmp = path.with_file_name(format!(
        ".{}.nvstack-format-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    struct RemoveOnDrop<'a>(&'a Path, bool);
    impl Drop for RemoveOnDrop<'_> {
        fn drop(&mut self) {
            if self.1 {
                let _ = std::fs::remove_file(self.0);
            }
        }
    }
    let mut guard = RemoveOnDrop(&tmp, true);
    let file = FsOpen::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(|e| Error::env(format!("{}: cannot create: {e}", tmp.display())))?;
    lock(&file, &tmp, true)?;
    allocate_file(&file, path, size)?;
    let region = MmapRegion::map_file(file, path, Access::Shared)?;
    let sb = format_region(&region, fo)?;
    drop(region);
    std::fs::rename(&tmp, path).map_err(|e| {
        Error::env(format!(
            "{}: cannot move the new image into place: {e}",
            path.display()
        ))
    })?;
    guard.1 = false;
    Ok(sb)
}

/// The length of an open image file, refused when too short to hold both superblock copies.
/// (A length that is not a multiple of 4096 is left to the superblock, which names it:
/// "truncated", or "file has N bytes".)
pub(crate) fn image_len(file: &File, path: &Path) -> Result<u64> {
    let len = file
        .metadata()
        .map_err(|e| Error::env(format!("{}: cannot stat: {e}", path.display())))?
        .len();
    if len == 0 {
        return Err(Error::bad(format!(
            "{}: file is empty (0 bytes): not an nvstack image",
            path.display()
        )));
    }
    if len < 2 * SB_PAGE_BYTES {
        return Err(Error::bad(format!(
            "{}: file is {len} bytes, too small to be an nvstack image",
            path.display()
        )));
    }
    Ok(len)
}

/// Read both superblock copies of an open file with plain reads, and insist they agree.
fn validate_file(file: &File, path: &Path) -> Result<(Superblock, u64)> {
    let len = image_len(file, path)?;
    let sb = SuperblockCopies::read_file(file, path, len)?
        .agreed()
        .map_err(|e| Error::bad(format!("{}: {e}", path.display())))?;
    Ok((sb, len))
}

pub(crate) fn open_file(path: &Path, write: bool) -> Result<File> {
    nvstack_core::lock::open_file(path, write, "image")
}

/// Open an image for writing: exclusive lock, shared mapping, recovery runs on the media.
pub fn open_image(path: &Path, oo: OpenOptions) -> Result<Disk> {
    let file = open_file(path, true)?;
    lock(&file, path, true)?;
    validate_file(&file, path)?;
    let region = MmapRegion::map_file(file, path, Access::Shared)?;
    NvramDisk::open(Arc::new(region), oo)
}

/// Open an image file for writing without mapping it: exclusive lock, validated superblocks.
/// For layers that bring their own region (the power-cut tests load it into a simulated
/// region); the lock is held as long as the returned file is.
pub fn open_image_file(path: &Path) -> Result<(File, Superblock)> {
    let file = open_file(path, true)?;
    lock(&file, path, true)?;
    let (sb, _len) = validate_file(&file, path)?;
    Ok((file, sb))
}

/// Open an image for reading only: shared lock, private copy-on-write mapping, so recovery
/// runs in memory and nothing reaches the file.
pub fn open_image_readonly(path: &Path, oo: OpenOptions) -> Result<Disk> {
    let file = open_file(path, false)?;
    lock(&file, path, false)?;
    validate_file(&file, path)?;
    let region = MmapRegion::map_file(file, path, Access::PrivateCopy)?;
    NvramDisk::open(Arc::new(region), oo)
}

/// If exactly one superblock copy is damaged and the other intact, rewrite the damaged one
/// from the intact one. Returns what was repaired. Both damaged: an error, nothing written.
pub fn repair_superblock(path: &Path) -> Result<Option<String>> {
    let file = open_file(path, true)?;
    lock(&file, path, true)?;
    let len = image_len(&file, path)?;
    let copies = SuperblockCopies::read_file(&file, path, len)?;
    let Some((good, why)) = copies.repairable() else {
        return validate_file(&file, path).map(|_| None);
    };
    let damaged_offset = copies.offsets()[1 - good];
    file.write_all_at(&copies.bytes[good], damaged_offset)
        .and_then(|_| file.sync_all())
        .map_err(|e| Error::env(format!("{}: cannot write superblock: {e}", path.display())))?;
    Ok(Some(format!(
        "superblock copy {} (offset {damaged_offset}) was damaged ({why}); rewritten from the \
         intact copy",
        2 - good
    )))
}

/// Validate an image and return its superblock without mapping it (shared lock, plain
/// reads). Commands use it to check their arguments before opening the image for writing.
pub fn peek(path: &Path) -> Result<Superblock> {
    let file = open_file(path, false)?;
    lock(&file, path, false)?;
    validate_file(&file, path).map(|(sb, _)| sb)
}
