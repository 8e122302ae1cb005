//! Write cache images: the region kept in a file (as UBJ's, image.rs), with the backing file's
//! absolute path recorded inside it (docs/format.md 12.2). Everything plain reads can validate
//! is validated before anything is mapped; a refused open or create changes nothing. Every
//! open locks the image and the backing file (exclusive for writers, shared for readers).

use crate::common::backing::FileDevice;
use crate::common::format::{decode_path, encode_path};
use crate::common::image::{
    claim_existing, open_cache, prepare_backing, read_first_block, Validated,
};
use crate::write::format::{Admit, Layout, Settings, Superblock, PATH_BYTES, PATH_OFF, SLOTS_MIN};
use crate::write::{create, WriteCache};
use nvstack_core::error::{Error, Result, FIELD};
use nvstack_pmem::{MmapRegion, Region};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A write cache on a mapped image file.
pub type WriteCacheImage = WriteCache<MmapRegion>;

/// What `create_image` makes.
pub struct CreateOptions<'a> {
    /// Bytes of NVRAM: the image file's length.
    pub size: u64,
    pub sector_bytes: u32,
    pub backing: &'a Path,
    /// Create the backing file exporting this many bytes (plus one 4 KiB label block).
    pub backing_size: Option<u64>,
    pub settings: Settings,
    pub admit: Admit,
    pub force: bool,
}

/// An opened write cache and the backing file it opened over.
pub struct Opened {
    pub cache: Arc<WriteCacheImage>,
    pub backing: PathBuf,
}

/// Create a write cache image and label its backing file (created when absent).
pub fn create_image(path: &Path, o: &CreateOptions) -> Result<(Superblock, PathBuf, bool)> {
    o.settings.validate()?;
    if !crate::write::format::valid_sector(o.sector_bytes) {
        return Err(Error::invalid(
            "sector_bytes",
            format!(
                "{FIELD} {}: 512 (the seed's) or 4096 (the backing device's block)",
                o.sector_bytes
            ),
        ));
    }
    if !o.size.is_multiple_of(4096) || Layout::fitting(o.size, o.sector_bytes).is_none() {
        return Err(Error::bad(format!(
            "cache size {} bytes: must be a multiple of 4096 holding at least {SLOTS_MIN} slots \
             of {} bytes and their table (at least {} bytes)",
            o.size,
            o.sector_bytes,
            Layout::new(SLOTS_MIN, o.sector_bytes)
                .region_bytes
                .div_ceil(4096)
                * 4096
        )));
    }
    let _old = claim_existing(path, o.force)?;
    let (backing, created) = prepare_backing(o.backing, o.backing_size, o.force)?;
    let abs = std::fs::canonicalize(o.backing)
        .map_err(|e| Error::env(format!("{}: {e}", o.backing.display())))?;
    let made = build(path, o, &backing, &abs);
    if made.is_err() && created {
        drop(backing);
        let _ = std::fs::remove_file(o.backing);
    }
    Ok((made?, abs, created))
}

fn build(path: &Path, o: &CreateOptions, backing: &FileDevice, abs: &Path) -> Result<Superblock> {
    let record = encode_path(&abs.to_string_lossy())?;
    if record.len() > PATH_BYTES {
        return Err(Error::bad(format!(
            "backing path {}: longer than the {} bytes a write cache image records",
            abs.display(),
            PATH_BYTES - 8
        )));
    }
    crate::common::image::build_in_place(path, o.size, |region| {
        region.write_nt(PATH_OFF, &record);
        create(region, backing, o.sector_bytes, o.settings, &o.admit)
    })
}

pub(crate) fn validate(path: &Path, write: bool) -> Result<Validated<Superblock>> {
    let (file, len, block) = read_first_block(path, write, "a write cache image")?;
    let named = |e: Error| Error::bad(format!("{}: {e}", path.display()));
    let sb = Superblock::decode(&block).map_err(named)?;
    let need = sb.layout().region_bytes;
    if len < need {
        return Err(named(Error::bad(format!(
            "{len} bytes, but its superblock's {} slots need {need} (a truncated copy?)",
            sb.slots
        ))));
    }
    let path_record = decode_path(&block[PATH_OFF as usize..]).map(PathBuf::from);
    Ok(Validated {
        file,
        sb,
        path_record,
    })
}

/// Open a write cache for writing (exclusive locks, the region mapped shared, recovery run).
pub fn open_image(
    path: &Path,
    backing: Option<&Path>,
    settings: Option<Settings>,
) -> Result<Opened> {
    let (cache, backing) = open_cache(path, validate(path, true)?, backing, true, |r, d| {
        WriteCache::open(r, d, settings)
    })?;
    Ok(Opened { cache, backing })
}

/// Open a write cache for reading: shared locks, a private copy of the region (recovery stays
/// in memory), the backing file read-only.
pub fn open_readonly(path: &Path, backing: Option<&Path>) -> Result<Opened> {
    let (cache, backing) = open_cache(path, validate(path, false)?, backing, false, |r, d| {
        WriteCache::open(r, d, None)
    })?;
    Ok(Opened { cache, backing })
}

/// Validate an image with plain reads (shared lock) and return its superblock.
pub fn peek(path: &Path) -> Result<Superblock> {
    Ok(validate(path, false)?.sb)
}
