//! A device opened to be served (by FUSE today, by any transport): any backend, and for a cache
//! its background threads (the ticker; the write cache's destage thread) started with it and
//! stopped before its close, so that nothing runs after the counters are stored.
//!
//! Transports (`nvstack-export`) take a [`Served`] and speak their protocol over `dev`; this
//! crate speaks none.

use crate::kind::{identify, Kind};
use crate::raw::{RawDevice, RAW_BLOCK_BYTES};
use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::{Error, Result};
use nvstack_nvcache::{Cache, Closed, FileDevice, ServedWc, Ticker, Ubj, WcDestager, WriteCache};
use nvstack_pmem::{Access, MmapRegion, Region};
use std::any::Any;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// What serves the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Transactions: every write atomic and durable on return (an nvramdisk image).
    Nvramdisk,
    /// Plain copies into the region, no transactions: the baseline.
    Raw,
    /// A cache image over its backing file: UBJ (durable at the next flush, a commit) or the
    /// write cache (admitted writes durable on return, bypassed ones at the next flush).
    Cache,
    /// The plain backing file, O_DIRECT, durable at the next flush (fdatasync): the baseline
    /// of a cache.
    DirectFile,
}

impl Backend {
    pub const ALL: [Backend; 4] = [
        Backend::Nvramdisk,
        Backend::Raw,
        Backend::Cache,
        Backend::DirectFile,
    ];

    /// The backend named `name` (as [`Backend::name`] spells it).
    pub fn from_name(name: &str) -> Option<Backend> {
        Backend::ALL.into_iter().find(|b| b.name() == name)
    }

    /// What it serves, in a line.
    pub fn about(self) -> &'static str {
        match self {
            Backend::Nvramdisk => {
                "transactions: every write atomic and durable on return (an nvramdisk image)"
            }
            Backend::Raw => "plain copies into the region, no transactions: the baseline",
            Backend::Cache => {
                "a cache image over its backing file: UBJ (durable at the next fsync) or the \
                 write cache (admitted writes durable on return)"
            }
            Backend::DirectFile => {
                "the plain backing file, O_DIRECT, durable at the next fsync: the baseline of \
                 a cache"
            }
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Backend::Nvramdisk => "nvramdisk",
            Backend::Raw => "raw",
            Backend::Cache => "cache",
            Backend::DirectFile => "direct-file",
        }
    }

    /// The backend an image of `kind` is served by unless asked otherwise.
    pub fn of_kind(kind: Option<Kind>) -> Backend {
        match kind {
            Some(k) if k.is_cache() => Backend::Cache,
            _ => Backend::Nvramdisk,
        }
    }
}

/// What to open. `image` is the image (none for the direct file); `backing` a cache's backing
/// file when it moved since create, or the direct file itself.
#[derive(Clone, Debug, Default)]
pub struct ServeSpec<'a> {
    pub image: Option<&'a Path>,
    pub backing: Option<&'a Path>,
    /// A UBJ cache's settings for this run (None: those stored at create).
    pub ubj_settings: Option<nvstack_nvcache::Settings>,
    /// A write cache runs with its stored settings as they are (the seed's one-block destage
    /// when it has no watermarks) instead of dm-writecache's defaults for what it leaves off.
    pub seed_destage: bool,
    /// The raw backend's block size (512 or 4096; default 4096).
    pub raw_block_bytes: Option<u32>,
    /// Testing only: run on the simulated region and cut power as the spec says (refused by
    /// a build without the feature `powercut`).
    pub power_cut: Option<crate::powercut::PowerCutSpec>,
}

/// A served cache (either kind, through the library's contract) and its threads.
pub struct ServedCache {
    pub cache: Arc<dyn Cache>,
    threads: Mutex<Vec<Box<dyn Any + Send>>>,
}

impl ServedCache {
    fn new(cache: Arc<dyn Cache>, threads: Vec<Box<dyn Any + Send>>) -> Self {
        ServedCache {
            cache,
            threads: Mutex::new(threads),
        }
    }

    /// Stop the threads (each joins on drop, in the order started), then close the cache.
    pub fn close(&self) -> Result<Closed> {
        self.threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.cache.close()
    }
}

/// The device, what opening it did (a phrase for the serve line), the power cut when running
/// on the simulated region, and the cache when it is one.
pub struct Served {
    pub dev: Arc<dyn BlockDevice>,
    pub what: String,
    #[cfg(feature = "powercut")]
    pub power_cut: Option<Arc<crate::powercut::PowerCut>>,
    pub cache: Option<ServedCache>,
}

impl Served {
    fn plain(dev: Arc<dyn BlockDevice>, what: String) -> Self {
        Served {
            dev,
            what,
            #[cfg(feature = "powercut")]
            power_cut: None,
            cache: None,
        }
    }
}

/// Open what `spec` names with `backend`.
pub fn open(backend: Backend, spec: &ServeSpec) -> Result<Served> {
    if backend == Backend::DirectFile {
        let p = spec.backing.ok_or_else(|| {
            Error::bad("the direct file: no backing file given (the file to serve)")
        })?;
        return open_direct_file(p);
    }
    let image = spec
        .image
        .ok_or_else(|| Error::bad(format!("backend {}: no image given", backend.name())))?;
    if let Some(cut) = spec.power_cut {
        return open_power_cut(backend, image, spec, cut);
    }
    match backend {
        Backend::Cache => open_cache(image, spec),
        Backend::Nvramdisk => open_nvramdisk(image),
        Backend::Raw => open_raw(image, spec.raw_block_bytes),
        Backend::DirectFile => unreachable!("served above"),
    }
}

#[cfg(feature = "powercut")]
/// Open `image` for serving with `backend` on the simulated region, power cut armed by the
/// caller ([`PowerCut::arm`]): an nvramdisk image alone, a cache with its backing file.
fn open_power_cut(
    backend: Backend,
    image: &Path,
    spec: &ServeSpec,
    cut: crate::powercut::PowerCutSpec,
) -> Result<Served> {
    let what = |w: &str| format!("{w}simulated region, power cut {}", cut.text());
    let (pc, dev, cache, what) = match (backend, identify(image)?) {
        (Backend::Nvramdisk, _) => {
            let pc = crate::powercut::PowerCut::load(image, cut)?;
            let d = nvstack_nvramdisk::NvramDisk::open(pc.region(), Default::default())?;
            let dev: Arc<dyn BlockDevice> = Arc::new(d);
            (pc, dev, None, what(""))
        }
        (Backend::Cache, Some(Kind::WriteCache)) => {
            let pc = crate::powercut::PowerCut::load_write_cache(image, spec.backing, cut)?;
            let (nvram, disk) = pc.cache_devices().expect("a cache run has both parts");
            let wc = WriteCache::open(Arc::new(nvram), Arc::new(disk), None)?;
            let (w, dev, cache) = served_wc(Arc::new(wc), spec.seed_destage);
            (pc, dev, Some(cache), what(&format!("{w}, ")))
        }
        (Backend::Cache, _) => {
            let pc = crate::powercut::PowerCut::load_cache(image, spec.backing, cut)?;
            let (nvram, disk) = pc.cache_devices().expect("a cache run has both parts");
            let ubj = Ubj::open(Arc::new(nvram), Arc::new(disk), spec.ubj_settings)?;
            let w = ubj_opened_what(&ubj);
            let (dev, cache) = served_ubj(Arc::new(ubj));
            (pc, dev, Some(cache), what(&format!("{w}, ")))
        }
        (b, _) => {
            return Err(Error::bad(format!(
                "backend {}: no power-cut run (nvramdisk and cache images only)",
                b.name()
            )))
        }
    };
    Ok(Served {
        dev,
        what,
        power_cut: Some(pc),
        cache,
    })
}

#[cfg(not(feature = "powercut"))]
fn open_power_cut(
    _: Backend,
    image: &Path,
    _: &ServeSpec,
    cut: crate::powercut::PowerCutSpec,
) -> Result<Served> {
    Err(Error::bad(format!(
        "{}: power cut {}: testing only, and this build has no power-cut machinery (the \
         feature `powercut` of nvstack-stack)",
        image.display(),
        cut.text()
    )))
}

fn open_nvramdisk(image: &Path) -> Result<Served> {
    let d = nvstack_nvramdisk::image::open_image(image, nvstack_nvramdisk::OpenOptions::default())?;
    let rep = d.recovery_report().clone();
    let what = if rep.was_clean() {
        "clean".to_string()
    } else {
        format!("recovered: {} redone, {} undone", rep.redone, rep.undone)
    };
    Ok(Served::plain(Arc::new(d), what))
}

fn open_cache(image: &Path, spec: &ServeSpec) -> Result<Served> {
    if identify(image)? == Some(Kind::WriteCache) {
        let o = nvstack_nvcache::write::image::open_wc_image(image, spec.backing, None)?;
        let (what, dev, cache) = served_wc(o.cache, spec.seed_destage);
        return Ok(Served {
            what: format!("{what} over {}", o.backing.display()),
            cache: Some(cache),
            ..Served::plain(dev, String::new())
        });
    }
    let o = nvstack_nvcache::ubj::image::open_image(image, spec.backing, spec.ubj_settings)?;
    let what = format!("{} over {}", ubj_opened_what(&o.cache), o.backing.display());
    let (dev, cache) = served_ubj(o.cache);
    Ok(Served {
        cache: Some(cache),
        ..Served::plain(dev, what)
    })
}

/// UBJ served: its ticker (timed commits and checkpoints) started.
fn served_ubj<R: Region + 'static>(ubj: Arc<Ubj<R>>) -> (Arc<dyn BlockDevice>, ServedCache) {
    let threads: Vec<Box<dyn Any + Send>> = Ticker::start(&ubj)
        .into_iter()
        .map(|t| Box::new(t) as Box<dyn Any + Send>)
        .collect();
    (ubj.clone(), ServedCache::new(ubj, threads))
}

fn ubj_opened_what<R: Region>(u: &Ubj<R>) -> String {
    match u.dropped_at_open() {
        0 => format!("UBJ cache, epoch {}", u.epoch()),
        n => format!(
            "UBJ cache, epoch {}, recovered: {n} uncommitted entries dropped",
            u.epoch()
        ),
    }
}

/// A write cache served: dm-writecache's destage defaults unless `seed_destage`, its ticker
/// and destage thread started. Returns what it is (a phrase), the device and the served half.
fn served_wc<R: Region + 'static>(
    cache: Arc<WriteCache<R>>,
    seed_destage: bool,
) -> (String, Arc<dyn BlockDevice>, ServedCache) {
    if !seed_destage {
        cache.use_served_defaults();
    }
    let what = wc_opened_what(&cache);
    let served = Arc::new(ServedWc::new(cache));
    // Stopped in this order at the close: the ticker, then the destage thread.
    let mut threads: Vec<Box<dyn Any + Send>> = Vec::new();
    if let Some(t) = Ticker::start(&served) {
        threads.push(Box::new(t));
    }
    if let Some(d) = WcDestager::start(&served) {
        threads.push(Box::new(d));
    }
    (what, served.clone(), ServedCache::new(served, threads))
}

fn wc_opened_what<R: Region>(cache: &WriteCache<R>) -> String {
    let sb = *cache.superblock();
    let admit = cache
        .admit_record()
        .map_or_else(|e| format!("unreadable ({e})"), |a| a.name());
    let what = format!(
        "write cache, {} B sectors, admit {admit}{}, {} blocks cached{}{}",
        sb.sector_bytes,
        if admit == "all" {
            ""
        } else {
            " (admitted blocks durable when written, the others at the next fsync)"
        },
        cache.cached_blocks(),
        match cache.recovered_entries() {
            0 => String::new(),
            n => format!(", recovered: {n} entries cleared"),
        },
        match cache.tick_period() {
            Some(p) => format!(", timer every {} ms", p.as_millis()),
            None => String::new(),
        }
    );
    format!("{what}, destage: {}", destage_what(&cache.settings()))
}

/// How a served write cache destages.
fn destage_what(s: &nvstack_nvcache::write::format::WcSettings) -> String {
    match s.high_watermark_pct {
        0 => "the seed's one-block destage (a new block that finds no room destages one)".into(),
        h => format!(
            "watermarks {h} % / {} % by a destage thread, runs of up to 1 MiB, {} blocks per \
             backing flush",
            s.low_watermark_pct, s.writeback_jobs
        ),
    }
}

/// The label of the file at `path` when it is a cache's backing file that is not detached
/// (its newest data may be only in that cache's NVRAM): the cache's identity.
pub fn live_cache_backing(path: &Path) -> Result<Option<u128>> {
    let dev = FileDevice::open_readonly(path)?;
    let mut last = vec![0u8; 4096];
    dev.read(dev.blocks() - 1, &mut last)?;
    Ok(nvstack_nvcache::common::format::Label::decode(&last)
        .ok()
        .filter(|l| !l.detached)
        .map(|l| l.identity))
}

/// The plain backing file (the caller refuses a live cache's: [`live_cache_backing`]).
fn open_direct_file(p: &Path) -> Result<Served> {
    let dev = FileDevice::open(p)?;
    let what = format!(
        "direct file{}",
        if dev.direct() {
            ", O_DIRECT"
        } else {
            ", buffered (no O_DIRECT here)"
        }
    );
    Ok(Served::plain(Arc::new(dev), what))
}

/// What an image file holds that serving it raw would destroy, if anything.
pub fn holds_an_image(img: &Path) -> Result<Option<&'static str>> {
    Ok(match identify(img)? {
        Some(k) => Some(k.name()),
        None if nvstack_nvramdisk::image::peek(img).is_ok() => Some(Kind::Nvramdisk.name()),
        None => None,
    })
}

/// Any file of whole pages as plain blocks (the caller refuses an image without force:
/// [`holds_an_image`]), locked exclusively.
fn open_raw(img: &Path, block_bytes: Option<u32>) -> Result<Served> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(img)
        .map_err(|e| Error::env(format!("{}: cannot open: {e}", img.display())))?;
    match f.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            return Err(Error::env(format!(
                "{}: image is locked by another process (another nvstack command or daemon \
                 has it open)",
                img.display()
            )))
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(Error::env(format!("{}: cannot lock: {e}", img.display())))
        }
    }
    let r = MmapRegion::map_file(f, img, Access::Shared)?;
    let dev = RawDevice::with_block_bytes(Arc::new(r), block_bytes.unwrap_or(RAW_BLOCK_BYTES))?;
    Ok(Served::plain(Arc::new(dev), "raw".into()))
}
