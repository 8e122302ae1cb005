//! The stack's vocabulary, below every module that acts: the kinds of image, a device's shape
//! and promise, how a command opens an image, and what a serve asks for and answers. Types
//! only (and their constructors), so that the kinds' table (`kinds/`) and the modules that use
//! it (`kind`, `image`, `served`, `cache`) import them without a circle.

use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::Result;
use nvstack_nvcache::{Cache, Closed};
use std::any::Any;
use std::path::Path;
use std::sync::{Arc, Mutex};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A transactional block device on persistent memory (seed 002).
    Nvramdisk,
    /// A UBJ cache: the NVRAM buffer cache that is also the journal (seed 001).
    Ubj,
    /// A write cache in front of a disk (seed 004's NVRAM write cache, dm-writecache's role).
    WriteCache,
    /// A NAND flash state file under its FTL (seed 004's flash: crates/flash).
    Flash,
}

/// What one write of an image's device lands as, so that a caller can word it and cut
/// requests to fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Promise {
    /// Atomic and durable when it returns, up to `unit_blocks` (nvramdisk).
    AtomicOnReturn,
    /// Whole in one epoch, durable at the next flush (a commit), up to `unit_blocks` (UBJ).
    WholeAtFlush,
    /// Admitted blocks durable when it returns, the others at the next flush (write cache).
    AdmittedOnReturn,
    /// Each block (a NAND page, one pwrite) whole, durable at the next flush (flash).
    PageAtFlush,
}

/// An image's device as its superblock describes it, read without opening (no recovery, no
/// lock beyond a shared one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub kind: Kind,
    pub blocks: u64,
    pub block_bytes: u32,
    /// Most blocks one write lands as its promise says.
    pub unit_blocks: u64,
    pub promise: Promise,
}

/// Whether the command writes. Read-only opens recover nothing on the image (an nvramdisk's
/// recovery runs in memory; a cache's image is not written).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    ReadOnly,
    Write,
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
    pub(crate) fn new(cache: Arc<dyn Cache>, threads: Vec<Box<dyn Any + Send>>) -> Self {
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
    pub(crate) fn plain(dev: Arc<dyn BlockDevice>, what: String) -> Self {
        Served {
            dev,
            what,
            #[cfg(feature = "powercut")]
            power_cut: None,
            cache: None,
        }
    }

    pub(crate) fn cache(dev: Arc<dyn BlockDevice>, cache: ServedCache, what: String) -> Self {
        Served {
            cache: Some(cache),
            ..Served::plain(dev, what)
        }
    }

    /// A run on the power cut's simulated region; `what` is what opening it did, ending with
    /// ", " when not empty.
    #[cfg(feature = "powercut")]
    pub(crate) fn power_cut(
        dev: Arc<dyn BlockDevice>,
        pc: Arc<crate::powercut::PowerCut>,
        cache: Option<ServedCache>,
        what: String,
    ) -> Self {
        assert!(what.is_empty() || what.ends_with(", "), "a phrase to go on");
        let what = format!("{what}simulated region, power cut {}", pc.spec().text());
        Served {
            dev,
            what,
            power_cut: Some(pc),
            cache,
        }
    }
}

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
    /// A NAND flash state file under its FTL: each page durable at the next flush.
    Flash,
}

impl Backend {
    pub const ALL: [Backend; 5] = [
        Backend::Nvramdisk,
        Backend::Raw,
        Backend::Cache,
        Backend::DirectFile,
        Backend::Flash,
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
            Backend::Flash => {
                "a NAND flash state file under its FTL: each page durable at the next fsync"
            }
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Backend::Nvramdisk => "nvramdisk",
            Backend::Raw => "raw",
            Backend::Cache => "cache",
            Backend::DirectFile => "direct-file",
            Backend::Flash => "flash",
        }
    }
}
