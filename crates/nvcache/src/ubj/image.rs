//! UBJ cache images (docs/format.md 10.3): create one over its backing file, validate it with
//! plain reads, open it for writing or reading (common/image.rs's steps).

use crate::common::backing::FileDevice;
use crate::common::format::{decode_path, encode_path};
use crate::common::image::{
    backing_path, build_in_place, claim_existing, open_cache, prepare_backing, read_first_block,
    Validated,
};
use crate::ubj::format::{Layout, Settings, Superblock, BLOCK_BYTES, PATH_OFF, SLOTS_MIN};
use crate::ubj::{self, Ubj};
use nvstack_core::error::{Error, Result};
use nvstack_pmem::{MmapRegion, Region};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const B: u64 = BLOCK_BYTES as u64;

/// A UBJ cache on a mapped image file.
pub type UbjImage = Ubj<MmapRegion>;

/// What `create_image` makes.
pub struct CreateOptions<'a> {
    /// Bytes of NVRAM: the image file's length.
    pub size: u64,
    pub backing: &'a Path,
    /// Create the backing file exporting this many bytes (the file is one block longer: the
    /// label); with an existing file, its size must be this plus that block.
    pub backing_size: Option<u64>,
    pub settings: Settings,
    /// Replace an existing image; overwrite the last block of a backing file that holds data
    /// or another cache's label.
    pub force: bool,
}

/// What `create_image` made.
pub struct Created {
    pub superblock: Superblock,
    /// The backing file's absolute path, as recorded in the image.
    pub backing: PathBuf,
    pub backing_created: bool,
}

/// An opened cache and the backing file it opened over.
pub struct Opened {
    pub cache: Arc<UbjImage>,
    pub backing: PathBuf,
}

/// Create a cache image and label its backing file (created when absent and sized by
/// `backing_size`). An existing image is refused unless `force`, and so is a backing file
/// whose last block (where the label goes) holds data or a live cache's label.
pub fn create_image(path: &Path, o: &CreateOptions) -> Result<Created> {
    o.settings.validate()?;
    check_region_size(o.size)?;
    let _old = claim_existing(path, o.force)?; // held until the new image replaces it
    let (backing, created) = prepare_backing(o.backing, o.backing_size, o.force)?;
    let abs = std::fs::canonicalize(o.backing)
        .map_err(|e| Error::env(format!("{}: {e}", o.backing.display())))?;
    let made = build_image(path, o, &backing, &abs);
    if made.is_err() && created {
        drop(backing);
        let _ = std::fs::remove_file(o.backing);
    }
    Ok(Created {
        superblock: made?,
        backing: abs,
        backing_created: created,
    })
}

fn check_region_size(size: u64) -> Result<()> {
    if !size.is_multiple_of(B) {
        return Err(Error::bad(format!(
            "cache size {size} bytes: not a multiple of 4096"
        )));
    }
    if Layout::fitting(size).is_none() {
        return Err(Error::bad(format!(
            "cache size {size} bytes: too small for {SLOTS_MIN} slots of 4096 bytes and their \
             table (at least {} bytes)",
            Layout::new(SLOTS_MIN).region_bytes
        )));
    }
    Ok(())
}

/// Build the image in a temporary file beside `path` and rename it into place when whole.
fn build_image(
    path: &Path,
    o: &CreateOptions,
    backing: &FileDevice,
    abs: &Path,
) -> Result<Superblock> {
    let record = encode_path(&abs.to_string_lossy())?;
    build_in_place(path, o.size, |region| {
        region.write_nt(PATH_OFF, &record);
        ubj::create(region, backing, o.settings)
    })
}

pub(crate) fn validate(path: &Path, write: bool) -> Result<Validated<Superblock>> {
    let (file, len, block) = read_first_block(path, write, "an nvcache image")?;
    let named = |e: Error| Error::bad(format!("{}: {e}", path.display()));
    let sb = Superblock::decode(&block).map_err(named)?;
    let need = Layout::new(sb.slots).region_bytes;
    if len < need || !len.is_multiple_of(B) {
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

/// Open a cache for writing: the image and its backing file locked exclusively, the region
/// mapped shared, recovery run on it. `backing` overrides the recorded path (a moved file;
/// its label must still name this cache); `settings` overrides the stored ones for this run.
pub fn open_image(
    path: &Path,
    backing: Option<&Path>,
    settings: Option<Settings>,
) -> Result<Opened> {
    let (cache, backing) = open_cache(path, validate(path, true)?, backing, true, |r, d| {
        Ubj::open(r, d, settings)
    })?;
    Ok(Opened { cache, backing })
}

/// Open a cache for reading: shared locks, a private copy of the region (recovery and the
/// blocks a read caches stay in memory), the backing file read-only.
pub fn open_readonly(path: &Path, backing: Option<&Path>) -> Result<Opened> {
    let (cache, backing) = open_cache(path, validate(path, false)?, backing, false, |r, d| {
        Ubj::open(r, d, None)
    })?;
    Ok(Opened { cache, backing })
}

/// The backing file a cache image names (`over` when given), validating the image with plain
/// reads under a shared lock (the serve daemon's power-cut runs load both files themselves).
pub fn backing_of(path: &Path, over: Option<&Path>) -> Result<PathBuf> {
    backing_path(&validate(path, false)?, over)
}

/// Validate an image with plain reads under a shared lock and return its superblock (commands
/// check their arguments against it before opening for writing).
pub fn peek(path: &Path) -> Result<Superblock> {
    Ok(validate(path, false)?.sb)
}
