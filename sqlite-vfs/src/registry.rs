//! The regions this process has open, each bound to the one database whose journals it holds.
//!
//! Several connections to one database in one process share the region (an image file can be
//! opened for writing once: its lock is exclusive); a second process gets SQLITE_BUSY. The
//! region closes, and its lock is released, when the last connection and the last journal
//! file using it are closed.

use crate::params::Params;
use crate::recording::{self, Recorder};
use crate::store::{FileKind, Store};
use crate::VfsError;
use libsqlite3_sys as sq;
use nvstack_core::blockdev::BlockDevice;
use nvstack_nvramdisk::image;
use nvstack_nvramdisk::FormatOptions;
#[cfg(feature = "powercut")]
use nvstack_stack::powercut::PowerCut;
use nvstack_stack::served::{Backend, ServeSpec};
use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// Regions one process may have open at once.
pub const REGIONS_MAX: usize = 64;

pub struct OpenRegion {
    /// Canonical path of the image file.
    pub path: PathBuf,
    /// The database (its full path name, as SQLite passes it) whose journals live here.
    pub db: String,
    pub size_bytes: u64,
    pub store: Store,
    /// Holds the image's lock (and the armed cut) in a power-cut run.
    #[cfg(feature = "powercut")]
    _powercut: Option<Arc<PowerCut>>,
    /// Writes the recorded trace when the region closes (declared last: it drops after the
    /// store, so the store's last traffic is in it).
    _recorder: Option<Recorder>,
}

static OPEN: Mutex<Vec<Weak<OpenRegion>>> = Mutex::new(Vec::new());

fn open_list() -> MutexGuard<'static, Vec<Weak<OpenRegion>>> {
    let mut g = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    g.retain(|w| w.strong_count() > 0);
    g
}

fn live(list: &[Weak<OpenRegion>]) -> impl Iterator<Item = Arc<OpenRegion>> + '_ {
    list.iter().filter_map(Weak::upgrade)
}

/// The canonical form of a path that may not exist yet (its directory must).
fn canonical(path: &Path) -> Result<PathBuf, VfsError> {
    if let Ok(p) = std::fs::canonicalize(path) {
        return Ok(p);
    }
    let name = path
        .file_name()
        .ok_or_else(|| VfsError::cantopen(format!("region {}: not a file name", path.display())))?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = std::fs::canonicalize(parent).map_err(|e| {
        VfsError::cantopen(format!(
            "region {}: its directory {} is not usable: {e}",
            path.display(),
            parent.display()
        ))
    })?;
    Ok(dir.join(name))
}

/// Map an nvstack error met while opening a region: a lock held elsewhere is SQLITE_BUSY.
fn open_error(path: &Path, e: nvstack_core::Error) -> VfsError {
    let msg = e.to_string();
    if msg.contains("locked by another process") {
        busy(path)
    } else if msg.contains(&path.display().to_string()) {
        VfsError::cantopen(msg)
    } else {
        VfsError::cantopen(format!("region {}: {msg}", path.display()))
    }
}

fn busy(path: &Path) -> VfsError {
    VfsError::new(
        sq::SQLITE_BUSY,
        format!(
            "region {} is in use by another process (its image is locked): one process at a \
             time may hold a database's journals",
            path.display()
        ),
    )
}

/// The region for the database `db` (opening, creating and formatting it as needed).
pub fn attach(db: &str, params: &Params) -> Result<Arc<OpenRegion>, VfsError> {
    debug_assert!(!db.is_empty(), "SQLite names the main database");
    let mut list = open_list();
    let path = canonical(&params.region)?;
    for r in live(&list) {
        if r.path == path {
            if r.db != db {
                return Err(VfsError::cantopen(format!(
                    "region {} holds the journals of {} in this process: one region serves \
                     one database",
                    path.display(),
                    r.db
                )));
            }
            check_size(&path, r.size_bytes, params)?;
            #[cfg(feature = "powercut")]
            if params.powercut.is_some() && r._powercut.is_none() {
                return Err(VfsError::cantopen(format!(
                    "powercut= given but region {} is already open without it",
                    path.display()
                )));
            }
            return Ok(r);
        }
        if r.db == db {
            return Err(VfsError::cantopen(format!(
                "database {db} is already open with region {} in this process, not {}",
                r.path.display(),
                path.display()
            )));
        }
    }
    if list.len() >= REGIONS_MAX {
        return Err(VfsError::cantopen(format!(
            "{REGIONS_MAX} regions are open in this process already"
        )));
    }
    let r = Arc::new(open_region(db, &path, params)?);
    list.push(Arc::downgrade(&r));
    debug_assert!(list.len() <= REGIONS_MAX);
    Ok(r)
}

fn check_size(path: &Path, actual: u64, params: &Params) -> Result<(), VfsError> {
    match params.region_size_bytes {
        Some(want) if want != actual => Err(VfsError::cantopen(format!(
            "region {} is {actual} bytes, not region_size={want}: pass its real size, or \
             another path to create a new region",
            path.display()
        ))),
        _ => Ok(()),
    }
}

fn open_region(db: &str, path: &Path, params: &Params) -> Result<OpenRegion, VfsError> {
    debug_assert!(path.is_absolute(), "regions are keyed by canonical paths");
    debug_assert!(!db.is_empty());
    if !path.exists() {
        let Some(size) = params.region_size_bytes else {
            return Err(VfsError::cantopen(format!(
                "region {} does not exist: add region_size=SIZE (e.g. 64MiB) to create it",
                path.display()
            )));
        };
        if let Err(e) = image::format_image(path, size, &FormatOptions::default(), false) {
            // Another process may have created it meanwhile: then open that one.
            if !path.exists() {
                return Err(open_error(path, e));
            }
        }
    }
    let size_bytes = std::fs::metadata(path)
        .map_err(|e| VfsError::cantopen(format!("region {}: {e}", path.display())))?
        .len();
    check_size(path, size_bytes, params)?;
    // A lock held by another process is SQLITE_BUSY: probe it with a descriptor of our own
    // (flock locks belong to open file descriptions), then let the real open take it.
    if let Ok(f) = File::open(path) {
        if let Err(TryLockError::WouldBlock) = f.try_lock() {
            return Err(busy(path));
        }
    }
    let (dev, _powercut, recorder) = open_device(path, params)?;
    let store = Store::open(dev).map_err(|e| open_error(path, e))?;
    #[cfg(feature = "powercut")]
    if let Some(pc) = &_powercut {
        pc.arm();
    }
    if let Some(r) = &recorder {
        // Format, recovery and the store's open are setup, not the database's traffic.
        r.start();
    }
    Ok(OpenRegion {
        path: path.to_path_buf(),
        db: db.to_string(),
        size_bytes,
        store,
        #[cfg(feature = "powercut")]
        _powercut,
        _recorder: recorder,
    })
}

/// The power cut armed at the open (a build with the feature `powercut`; the shipped
/// extension has none, and refuses powercut= at the open).
#[cfg(feature = "powercut")]
type Cut = Option<Arc<PowerCut>>;
#[cfg(not(feature = "powercut"))]
type Cut = ();

type Device = (Arc<dyn BlockDevice>, Cut, Option<Recorder>);

/// The region's device: the image opened by the stack (in a power-cut run on the simulated
/// region), or recorded (record=).
fn open_device(path: &Path, params: &Params) -> Result<Device, VfsError> {
    if let Some(out) = &params.record {
        let (dev, rec) = recording::open(path, out)?;
        return Ok((dev, Cut::default(), Some(rec)));
    }
    #[cfg(not(feature = "powercut"))]
    if let Some(cut) = params.powercut {
        return Err(VfsError::cantopen(format!(
            "URI parameter powercut={}: testing only; this build of the extension has no \
             power-cut machinery (the tests build it with the feature `powercut`)",
            cut.text()
        )));
    }
    let spec = ServeSpec {
        image: Some(path),
        power_cut: params.powercut,
        ..ServeSpec::default()
    };
    let served =
        nvstack_stack::served::open(Backend::Nvramdisk, &spec).map_err(|e| open_error(path, e))?;
    #[cfg(feature = "powercut")]
    let cut = served.power_cut;
    #[cfg(not(feature = "powercut"))]
    let cut = ();
    Ok((served.dev, cut, None))
}

/// Which stored file `name` would be, and the region holding it: `name` is an open
/// database's name followed by `-wal`, `-journal` or `-mj...` (a super-journal).
pub fn journal_of(name: &str) -> Option<(Arc<OpenRegion>, FileKind)> {
    let list = open_list();
    for r in live(&list) {
        let Some(rest) = name.strip_prefix(r.db.as_str()) else {
            continue;
        };
        let kind = match rest {
            "-wal" => FileKind::Wal,
            "-journal" => FileKind::MainJournal,
            s if s.starts_with("-mj") => FileKind::SuperJournal,
            _ => continue,
        };
        return Some((r, kind));
    }
    None
}

/// Every open region's store counters (the `nvstack_stats()` SQL function), as JSON.
pub fn stats_json() -> String {
    let list = open_list();
    let rows: Vec<serde_json::Value> = live(&list)
        .map(|r| {
            let files: Vec<serde_json::Value> = r
                .store
                .files()
                .iter()
                .map(|f| serde_json::json!({"kind": f.kind.name(), "size_bytes": f.size_bytes}))
                .collect();
            serde_json::json!({
                "region": r.path.display().to_string(),
                "db": r.db,
                "stats": r.store.stats(),
                "files": files,
                "free_bytes": r.store.free_bytes(),
            })
        })
        .collect();
    serde_json::Value::Array(rows).to_string()
}
