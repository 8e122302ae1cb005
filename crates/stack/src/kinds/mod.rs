//! The table of image kinds: everything the stack does that depends on an image's kind, one
//! impl per kind, one file each. Identify (by magic), peek, open for a command, serve (with the
//! cache's threads), a power-cut run, and a cache's backing file, status and check as reports.
//!
//! A new kind of image is one file here (its [`ImageKind`] impl, and a [`CacheKind`] impl
//! when it is a cache) and one arm in [`Kind::ops`]; nothing outside this crate dispatches on
//! kind (`scripts/check-layers.sh` fails on a `Kind::` variant named elsewhere).

use crate::report::Report;
use crate::spec::{Access, Backend, Kind, Shape};
use crate::spec::{ServeSpec, Served};
use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::{Error, Result};
use nvstack_nvcache::Cache;
use std::any::Any;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub(crate) mod flash;
pub(crate) mod nvramdisk;
pub(crate) mod ubj;
pub(crate) mod write;

/// One kind of image.
pub(crate) trait ImageKind: Sync {
    fn kind(&self) -> Kind;
    /// An image of this kind, as a phrase ("a UBJ cache image").
    fn name(&self) -> &'static str;
    /// Whether an image's first eight bytes are this kind's magic.
    fn claims(&self, magic: [u8; 8]) -> bool;
    /// The backend that serves an image of this kind unless asked otherwise.
    fn backend(&self) -> Backend;
    /// The device as the superblock describes it, read without opening (no recovery).
    fn peek(&self, path: &Path) -> Result<Shape>;
    /// Open for one command; a cache over its recorded backing file, or `backing`.
    fn open(&self, path: &Path, access: Access, backing: Option<&Path>) -> Result<Box<dyn Opened>>;
    /// Open to be served, with the cache's threads started.
    fn serve(&self, path: &Path, spec: &ServeSpec) -> Result<Served>;
    /// Open on the simulated region, power cut armed by the caller (testing only).
    #[cfg(feature = "powercut")]
    fn serve_power_cut(
        &self,
        path: &Path,
        spec: &ServeSpec,
        cut: crate::powercut::PowerCutSpec,
    ) -> Result<Served>;
    /// The cache half, when this kind is a cache (an image over a backing file).
    fn as_cache(&self) -> Option<&dyn CacheKind> {
        None
    }
}

/// What a kind of cache adds: its backing file, and its reports (the program prints them).
pub(crate) trait CacheKind: Sync {
    /// The library's name for this cache (what its served figures say they are).
    fn cache_kind(&self) -> nvstack_nvcache::CacheKind;
    /// The backing file: the one recorded at create, or `over` when it moved.
    fn backing_of(&self, image: &Path, over: Option<&Path>) -> Result<PathBuf>;
    /// Blocks per state, counters, settings (offline; never writes).
    fn status(&self, image: &Path, backing: Option<&Path>) -> Result<Report>;
    /// Every slot and the label verified offline; damage is a finding.
    fn check(&self, image: &Path, backing: Option<&Path>) -> Result<Report>;
    /// Whether a run may override the stored settings (UBJ's serve takes `--autocommit`
    /// and the rest; the write cache runs with what create stored).
    fn takes_run_settings(&self) -> bool;
    /// The superblock's fields as JSON, read with plain reads (no lock: a daemon holds it),
    /// for a live status.
    fn stored_json(&self, image: &Path) -> Result<serde_json::Value>;
    /// A served cache's rows (what it is, its settings, its live figures), the superblock
    /// read with plain reads.
    fn live_rows(&self, image: &Path, live: &nvstack_nvcache::Live, out: &mut Report)
        -> Result<()>;
}

/// An image opened for one command, whichever the kind.
pub(crate) trait Opened: Send + Sync {
    fn device(&self) -> &dyn BlockDevice;
    /// A cache's backing file; None for a kind with none.
    fn backing(&self) -> Option<&Path> {
        None
    }
    /// A cache through the library's contract; None for a kind that is no cache.
    fn cache(&self) -> Option<Arc<dyn Cache>> {
        None
    }
    /// Make what was written durable and store the counters; UBJ's epoch after its commit.
    fn close_written(&self) -> Result<Option<u64>>;
    /// The kind's own type, for the typed accessors of `crate::Image`.
    fn as_any(&self) -> &dyn Any;
}

/// An image's first 4096 bytes by a plain read: no lock (a daemon may hold it) and no check
/// (the caller decodes and checks them).
fn first_block(image: &Path) -> Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(image)
        .map_err(|e| Error::env(format!("{}: cannot open: {e}", image.display())))?;
    let mut block = vec![0u8; 4096];
    f.read_exact_at(&mut block, 0)
        .map_err(|e| Error::env(format!("{}: cannot read: {e}", image.display())))?;
    Ok(block)
}

fn json<T: serde::Serialize>(v: &T) -> Result<serde_json::Value> {
    serde_json::to_value(v).map_err(|e| Error::env(format!("json: {e}")))
}

impl Kind {
    /// Every kind, in the order `crate::identify` asks them.
    pub const ALL: [Kind; 4] = [Kind::Nvramdisk, Kind::Ubj, Kind::WriteCache, Kind::Flash];

    /// This kind's impl: the one arm a new kind adds.
    pub(crate) fn ops(self) -> &'static dyn ImageKind {
        let ops: &'static dyn ImageKind = match self {
            Kind::Nvramdisk => &nvramdisk::NVRAMDISK,
            Kind::Ubj => &ubj::UBJ,
            Kind::WriteCache => &write::WRITE_CACHE,
            Kind::Flash => &flash::FLASH,
        };
        assert_eq!(ops.kind(), self, "the table's arm is the kind's own impl");
        ops
    }
}
