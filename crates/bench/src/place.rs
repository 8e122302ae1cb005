//! Where a suite runs: a directory on a memory file system, and the page size its mappings
//! get. Every suite runs on the directory given (default /dev/shm: 4 KiB pages) and, as root,
//! also on a tmpfs mounted with `huge=always` (2 MiB pages, as a DAX mapping of real
//! persistent memory gives), mounted for the run and unmounted after it.

use nvstack_core::error::{Error, Result};
use nvstack_pmem::{Access, MmapRegion};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

pub const HUGE_PAGE_BYTES: u64 = 2 << 20;

/// A directory the images of a suite go to.
pub struct Place {
    pub dir: PathBuf,
    /// "tmpfs at /dev/shm" or similar, from /proc/mounts.
    pub file_system: String,
    /// True for the huge-page tmpfs this run mounted.
    pub huge: bool,
    _mount: Option<TmpfsMount>,
}

impl Place {
    pub fn label(&self) -> String {
        if self.huge {
            format!("{} (huge=always)", self.file_system)
        } else {
            self.file_system.clone()
        }
    }
}

/// A tmpfs this process mounted; unmounted (lazily, so nothing can keep it busy) and its
/// mount point removed when dropped, on errors too.
struct TmpfsMount {
    dir: PathBuf,
}

impl Drop for TmpfsMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// True when this process runs as root (the owner of /proc/self).
pub fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The places to run on: `dir`, then (when `huge` and root) a huge-page tmpfs of
/// `huge_bytes`. Why a place was left out goes to `notes`.
pub fn places(
    dir: &Path,
    huge: bool,
    huge_bytes: u64,
    notes: &mut Vec<String>,
) -> Result<Vec<Place>> {
    if !dir.is_dir() {
        return Err(Error::env(format!(
            "{}: not a directory (bench puts its image files there)",
            dir.display()
        )));
    }
    let mut out = vec![Place {
        dir: dir.to_path_buf(),
        file_system: describe_mount(dir),
        huge: false,
        _mount: None,
    }];
    if !huge {
        notes.push("2 MiB pages: not run (--no-huge)".into());
        return Ok(out);
    }
    if !is_root() {
        notes.push(
            "2 MiB pages: not run: mounting a tmpfs with huge=always needs root (run as root to \
             measure with the page size a DAX mapping gives)"
                .into(),
        );
        return Ok(out);
    }
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
        .unwrap_or_default();
    if thp.contains("[deny]") {
        notes.push("2 MiB pages: not run: shmem huge pages are denied by the kernel".into());
        return Ok(out);
    }
    match mount_huge(huge_bytes) {
        Ok(m) => out.push(Place {
            dir: m.dir.clone(),
            file_system: describe_mount(&m.dir),
            huge: true,
            _mount: Some(m),
        }),
        Err(e) => notes.push(format!("2 MiB pages: not run: {e}")),
    }
    Ok(out)
}

fn mount_huge(bytes: u64) -> std::result::Result<TmpfsMount, String> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir =
        std::env::temp_dir().join(format!("nvstack-bench-huge-{}-{nanos}", std::process::id()));
    std::fs::create_dir(&dir).map_err(|e| format!("{}: cannot create: {e}", dir.display()))?;
    let out = Command::new("mount")
        .args(["-t", "tmpfs", "-o"])
        .arg(format!("huge=always,size={bytes},mode=0700"))
        .arg("nvstack-bench")
        .arg(&dir)
        .output();
    match out {
        Ok(o) if o.status.success() => Ok(TmpfsMount { dir }),
        Ok(o) => {
            let _ = std::fs::remove_dir(&dir);
            Err(format!(
                "mount -t tmpfs -o huge=always failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ))
        }
        Err(e) => {
            let _ = std::fs::remove_dir(&dir);
            Err(format!("cannot run mount: {e}"))
        }
    }
}

/// (file system type, mount point, options) of the mount holding `dir`, from /proc/mounts.
pub fn mount_of(dir: &Path) -> Option<(String, String, String)> {
    let dir = std::fs::canonicalize(dir).ok()?;
    let text = std::fs::read_to_string("/proc/mounts").ok()?;
    let mut best: Option<(String, String, String)> = None;
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 {
            continue;
        }
        let mnt = f[1].replace("\\040", " ").replace("\\011", "\t");
        if dir.starts_with(&mnt) && best.as_ref().is_none_or(|b| mnt.len() >= b.1.len()) {
            best = Some((f[2].to_string(), mnt, f[3].to_string()));
        }
    }
    best
}

fn describe_mount(dir: &Path) -> String {
    match mount_of(dir) {
        Some((ty, mnt, _)) => format!("{ty} at {mnt}"),
        None => format!("{} (file system unknown)", dir.display()),
    }
}

/// Page size of this process's mapping of `path`, from /proc/self/smaps: 2 MiB when any of
/// it is mapped with huge pages, else the kernel page size. None when it is not mapped.
pub fn mapped_page_bytes(path: &Path) -> Option<u64> {
    let path = std::fs::canonicalize(path).ok()?;
    let want = path.to_str()?;
    let text = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    let mut found = false;
    let mut kernel_page = None;
    let mut pmd_kb = 0u64;
    for line in text.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if !first.ends_with(':') {
            inside = line.trim_end().ends_with(want);
            found |= inside;
            continue;
        }
        if !inside {
            continue;
        }
        let kb = || {
            line.split_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<u64>().ok())
        };
        match first {
            "KernelPageSize:" => kernel_page = kb().map(|k| k * 1024),
            "ShmemPmdMapped:" | "FilePmdMapped:" => pmd_kb += kb().unwrap_or(0),
            _ => {}
        }
    }
    if !found {
        return None;
    }
    if pmd_kb > 0 {
        Some(HUGE_PAGE_BYTES)
    } else {
        kernel_page
    }
}

/// An image file of a suite, deleted when dropped (on errors too): each device's image is
/// gone before the next one is made, so a place needs room for one at a time.
pub struct ImageFile(PathBuf);

impl ImageFile {
    pub fn new(dir: &Path, name: &str) -> ImageFile {
        ImageFile(dir.join(format!("nvstack-bench-{}-{name}.img", std::process::id())))
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ImageFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Create `path` with `len` bytes allocated (tmpfs would otherwise SIGBUS on a page it cannot
/// allocate: a full file system gives a clean error here, not a crash later) and map it,
/// pre-faulted.
pub fn create_region(path: &Path, len: u64) -> Result<Arc<MmapRegion>> {
    let f = create_file(path, len)?;
    Ok(Arc::new(MmapRegion::map_file(f, path, Access::Shared)?))
}

fn create_file(path: &Path, len: u64) -> Result<File> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(|e| Error::env(format!("{}: cannot create: {e}", path.display())))?;
    nvstack_pmem::mmap::allocate_file(&f, path, len).map_err(|e| {
        Error::env(format!(
            "{}: cannot allocate {} MiB ({e}): choose a directory with more room (dir) or a \
             smaller span (size_bytes)",
            path.display(),
            len >> 20
        ))
    })?;
    Ok(f)
}
