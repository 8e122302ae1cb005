//! `nvstack up` and `nvstack down`: the one-command path from an image to a mounted file
//! system, and back.
//!
//! `up` creates (or reuses) the image, serves it (`nvstack serve`, daemonised) at
//! `/run/nvstack/<id>/fuse/disk`, attaches a loop device to that file with the device's block
//! size as its sector size (so every kernel I/O is whole blocks and no write needs a
//! read-modify-write), makes the file system when the device has none, and mounts it. Each
//! step is printed; if one fails, the steps already done are undone. What was done is kept in
//! `/run/nvstack/<id>/state.json`, which `down` reads to undo it all in reverse. `<id>` is the
//! canonical mount path with `/` turned into `-`.

use super::serve::{backend_values, check_mountpoint, is_mount_point, Backend};
use nvstack_core::error::{Error, Result};
use nvstack_nvramdisk::image::format_image;
use nvstack_nvramdisk::FormatOptions;
use nvstack_stack::Kind;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub const STATE_ROOT: &str = "/run/nvstack";
const DAEMON_STOP_WAIT: Duration = Duration::from_secs(20);
const SIZE_DEFAULT_BYTES: u64 = 1 << 30;

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum FsKind {
    Ext4,
    Xfs,
}

impl FsKind {
    fn name(self) -> &'static str {
        match self {
            FsKind::Ext4 => "ext4",
            FsKind::Xfs => "xfs",
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct UpArgs {
    /// The image: reused when it exists, created (under /dev/shm, say) when it does not (none
    /// with --backend direct-file).
    #[arg(long)]
    pub image: Option<PathBuf>,
    /// Size of a new image (default 1GiB; for a cache, its NVRAM); for an existing one it must
    /// match.
    #[arg(long, value_parser = crate::size_arg)]
    pub size: Option<u64>,
    /// Make a new image a cache of this mode over --backing (an existing cache image is
    /// served as one without it).
    #[arg(long, value_enum)]
    pub cache: Option<crate::cache::CacheMode>,
    /// A cache's backing file (created when absent, with --backing-size); with --backend
    /// direct-file, the file to serve.
    #[arg(long)]
    pub backing: Option<PathBuf>,
    /// Size of a new backing file (it gets one more 4 KiB block, the cache's label).
    #[arg(long, value_parser = crate::size_arg)]
    pub backing_size: Option<u64>,
    /// A cache's settings: stored when the cache is created, and given to the daemon.
    #[command(flatten)]
    pub settings: crate::cache::SettingsArgs,
    /// A new write cache's own settings (--cache write), as for `nvstack cache create`.
    #[command(flatten)]
    pub write: crate::cache::write::WriteArgs,
    /// File system to make when the device has none.
    #[arg(long, value_enum, default_value_t = FsKind::Ext4)]
    pub fs: FsKind,
    /// Where to mount it (an existing empty directory).
    #[arg(long)]
    pub mount: PathBuf,
    /// Options for mount -o (data=journal, commit=5, ...).
    #[arg(long)]
    pub mount_options: Option<String>,
    /// Default: a cache with --cache or a cache image, else nvramdisk.
    #[arg(long, value_parser = backend_values())]
    pub backend: Option<Backend>,
    /// FUSE threads of the daemon.
    #[arg(long, default_value_t = 4)]
    pub threads: usize,
    /// Attach the loop device with direct I/O (no page cache for the loop's backing file).
    #[arg(long)]
    pub loop_direct_io: bool,
}

#[derive(clap::Args, Debug)]
pub struct DownArgs {
    /// The mount point given to `nvstack up`.
    #[arg(long)]
    pub mount: PathBuf,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct UpState {
    pub version: u32,
    pub mount: PathBuf,
    pub image: PathBuf,
    pub backend: String,
    pub fs: FsKind,
    pub fuse_dir: PathBuf,
    pub loop_dev: Option<String>,
    pub daemon_pid: Option<u32>,
    pub stats: PathBuf,
    pub log: PathBuf,
    pub mounted: bool,
    /// A cache's backing file, or the file served by direct-file.
    #[serde(default)]
    pub backing: Option<PathBuf>,
    #[serde(default)]
    pub mount_options: Option<String>,
}

pub fn state_dir(mount: &Path) -> Result<PathBuf> {
    let canon = super::serve::resolve(mount)?;
    let id = canon.to_string_lossy().trim_matches('/').replace('/', "-");
    let id = if id.is_empty() { "root".into() } else { id };
    Ok(Path::new(STATE_ROOT).join(id))
}

fn run(cmd: &mut Command, what: &str) -> Result<String> {
    let out = cmd
        .output()
        .map_err(|e| Error::env(format!("{what}: cannot run: {e}")))?;
    if !out.status.success() {
        return Err(Error::env(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn need_tool(tool: &str, package: &str) -> Result<()> {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()));
    if found {
        Ok(())
    } else {
        Err(Error::env(format!(
            "{tool} not found: install the Debian package {package}"
        )))
    }
}

/// Loop devices attached to `file`, from `losetup -j`.
fn loops_on(file: &Path) -> Result<Vec<String>> {
    let out = run(Command::new("losetup").arg("-j").arg(file), "losetup -j")?;
    Ok(out
        .lines()
        .filter_map(|l| l.split(':').next())
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect())
}

fn pid_alive(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| {
            let c = String::from_utf8_lossy(&c);
            c.contains("nvstack") && c.contains("serve")
        })
        .unwrap_or(false)
}

fn save(dir: &Path, st: &UpState) -> Result<()> {
    let p = dir.join("state.json");
    let tmp = dir.join("state.json.tmp");
    let s = serde_json::to_string_pretty(st).expect("state serialises");
    std::fs::write(&tmp, s)
        .and_then(|_| std::fs::rename(&tmp, &p))
        .map_err(|e| Error::env(format!("{}: cannot write: {e}", p.display())))
}

fn load(dir: &Path) -> Result<Option<UpState>> {
    let p = dir.join("state.json");
    match std::fs::read_to_string(&p) {
        Ok(s) => serde_json::from_str(&s).map(Some).map_err(|e| {
            Error::env(format!(
                "{}: unreadable state ({e}); remove it by hand after checking mounts and loops",
                p.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::env(format!("{}: {e}", p.display()))),
    }
}

/// The write cache's flags: for a new write cache only, and no FAT admission (`up` mounts
/// ext4 or xfs; a FAT volume is served with `nvstack serve` and used through DIR/disk).
fn check_write_args(a: &UpArgs, image_kind: Option<Kind>) -> Result<()> {
    let new_write_cache =
        image_kind.is_none() && matches!(a.cache, Some(crate::cache::CacheMode::Write));
    if a.write.admits_fat() {
        return Err(Error::bad(
            "--admit fat-metadata: `up` mounts ext4 or xfs, and this kernel has no vfat to \
             mount a FAT volume; create the cache with `nvstack cache create --cache write \
             --admit fat-metadata`, serve it with `nvstack serve`, and use DIR/disk with mtools",
        ));
    }
    if new_write_cache {
        return Ok(());
    }
    let fixed = image_kind.filter(|k| k.is_cache() && !k.takes_run_settings());
    if let (Some(k), false) = (fixed, a.settings.is_empty()) {
        return Err(Error::bad(format!(
            "{}: {}: an existing one is served with the settings stored at create; omit the \
             cache settings",
            a.image.as_deref().expect("an image").display(),
            k.name()
        )));
    }
    a.write.refuse_for_ubj().map_err(|e| {
        Error::bad(format!(
            "{e}: the write cache's flags are for a new write cache (--cache write and an \
             --image that does not exist yet)"
        ))
    })
}

/// The backend `up` serves, its flags checked (bad input: exit 2, before anything is done).
fn up_backend(a: &UpArgs) -> Result<Backend> {
    let image_kind = match &a.image {
        Some(p) if p.exists() => nvstack_stack::identify(p)?,
        _ => None,
    };
    let image_is_cache = image_kind.is_some_and(Kind::is_cache);
    check_write_args(a, image_kind)?;
    let b = match a.backend {
        Some(b) => b,
        None if a.cache.is_some() => Backend::Cache,
        None => Backend::of_kind(image_kind),
    };
    let bad = |m: String| Err(Error::bad(m));
    match b {
        Backend::DirectFile if a.backing.is_none() => {
            bad("--backend direct-file needs --backing FILE".into())
        }
        Backend::DirectFile if a.image.is_some() || a.cache.is_some() || a.size.is_some() => bad(
            "--backend direct-file serves the --backing file alone: no --image, --cache or \
             --size"
                .into(),
        ),
        Backend::DirectFile => Ok(b),
        _ if a.image.is_none() => bad(format!("--backend {} needs --image", b.name())),
        Backend::Cache if !image_is_cache && a.cache.is_none() => bad(
            "a new cache image needs --cache ubj (and --backing FILE, --backing-size SIZE)".into(),
        ),
        Backend::Cache if !image_is_cache && a.backing.is_none() => {
            bad("a new cache image needs --backing FILE (its backing file)".into())
        }
        Backend::Cache => Ok(b),
        Backend::Flash if image_kind.is_none() => bad(format!(
            "--backend flash serves an existing state file (nvstack flash create makes one), \
             not {}",
            a.image.as_deref().expect("checked").display()
        )),
        _ if image_is_cache => bad(format!(
            "{}: a cache image, not for --backend {} (omit --backend)",
            a.image.as_deref().expect("checked").display(),
            b.name()
        )),
        _ if a.cache.is_some() => bad(format!("--cache contradicts --backend {}", b.name())),
        _ if a.backing.is_some() || a.backing_size.is_some() => bad(format!(
            "--backing and --backing-size are for a cache or --backend direct-file, not \
             --backend {}",
            b.name()
        )),
        _ if !a.settings.is_empty() => bad(format!(
            "cache settings (--autocommit, --checkpoint-ms, ...) are for a cache, not --backend \
             {}",
            b.name()
        )),
        _ => Ok(b),
    }
}

/// The programs `up` runs are installed, and the kernel has FUSE.
fn check_tools(a: &UpArgs) -> Result<()> {
    for (tool, pkg) in [
        ("losetup", "mount"),
        ("blkid", "util-linux"),
        ("mount", "mount"),
        (
            if a.fs == FsKind::Ext4 {
                "mkfs.ext4"
            } else {
                "mkfs.xfs"
            },
            if a.fs == FsKind::Ext4 {
                "e2fsprogs"
            } else {
                "xfsprogs"
            },
        ),
    ] {
        need_tool(tool, pkg)?;
    }
    if !Path::new("/dev/fuse").exists() {
        return Err(Error::env("/dev/fuse is missing: the kernel has no FUSE"));
    }
    Ok(())
}

/// Refuses a mount point that is already up (its state file exists).
fn check_not_up(a: &UpArgs, dir: &Path) -> Result<()> {
    if let Some(st) = load(dir)? {
        return Err(Error::env(format!(
            "{} is already up according to {} (daemon pid {}{}, loop {}): run `nvstack down \
             --mount {}` first",
            a.mount.display(),
            dir.join("state.json").display(),
            st.daemon_pid.map_or("none".into(), |p| p.to_string()),
            if st.daemon_pid.is_some_and(pid_alive) {
                ", running"
            } else {
                ", not running"
            },
            st.loop_dev.as_deref().unwrap_or("none"),
            a.mount.display()
        )));
    }
    Ok(())
}

/// The directory the daemon mounts on, created under `dir`; refused while a stale daemon's
/// mount is still on it.
fn make_fuse_dir(dir: &Path) -> Result<PathBuf> {
    let fuse_dir = dir.join("fuse");
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::env(format!("{}: cannot create: {e}", dir.display())))?;
    if is_mount_point(&fuse_dir)? {
        return Err(Error::env(format!(
            "{} is still mounted (a stale daemon?): `umount -l {}` first",
            fuse_dir.display(),
            fuse_dir.display()
        )));
    }
    std::fs::create_dir_all(&fuse_dir)
        .map_err(|e| Error::env(format!("{}: cannot create: {e}", fuse_dir.display())))?;
    Ok(fuse_dir)
}

/// The state recorded for `down` before anything is started: nothing attached or mounted yet.
fn new_state(a: &UpArgs, backend: Backend, dir: &Path, fuse_dir: PathBuf) -> UpState {
    UpState {
        version: 1,
        mount: std::fs::canonicalize(&a.mount).unwrap_or(a.mount.clone()),
        image: {
            let p = a.image.as_ref().or(a.backing.as_ref()).expect("checked");
            std::fs::canonicalize(p).unwrap_or(p.clone())
        },
        backend: backend.name().into(),
        fs: a.fs,
        fuse_dir,
        loop_dev: None,
        daemon_pid: None,
        // On tmpfs, where the daemon maps it (/run need not be tmpfs).
        stats: Path::new("/dev/shm").join(format!(
            "nvstack-{}.stats",
            dir.file_name().map_or("up".into(), |n| n.to_string_lossy())
        )),
        log: dir.join("serve.log"),
        mounted: false,
        backing: a.backing.clone(),
        mount_options: a.mount_options.clone(),
    }
}

pub fn up(a: UpArgs) -> Result<i32> {
    let backend = up_backend(&a)?;
    check_tools(&a)?;
    check_mountpoint(&a.mount)?;
    let dir = state_dir(&a.mount)?;
    check_not_up(&a, &dir)?;
    // The image: reuse or create.
    let created = prepare_image(&a, backend)?;
    let fuse_dir = make_fuse_dir(&dir)?;
    let mut st = new_state(&a, backend, &dir, fuse_dir);
    if let Some(what) = created {
        crate::say!("image: {what}")?;
    } else if backend == Backend::DirectFile {
        crate::say!("file: serving {} directly", st.image.display())?;
    } else {
        crate::say!("image: reusing {}", st.image.display())?;
    }
    match bring_up(&a, backend, &dir, &mut st) {
        Ok(()) => {
            crate::say!(
                "up: {} on {} ({} over {} over {})",
                st.fs.name(),
                st.mount.display(),
                st.loop_dev.as_deref().unwrap_or("?"),
                st.fuse_dir.join("disk").display(),
                st.image.display()
            )?;
            Ok(0)
        }
        Err(e) => {
            eprintln!("nvstack up: {e}; undoing what was done");
            let _ = tear_down(&dir, &st);
            Err(e)
        }
    }
}

fn prepare_image(a: &UpArgs, backend: Backend) -> Result<Option<String>> {
    let Some(image) = a.image.as_deref() else {
        return Ok(None); // direct-file: the backing file must exist (serve opens it)
    };
    if image.exists() {
        let len = std::fs::metadata(image)
            .map_err(|e| Error::env(format!("{}: {e}", image.display())))?
            .len();
        if let Some(s) = a.size {
            if s != len {
                return Err(Error::bad(format!(
                    "{}: exists with {len} bytes, not the {s} asked for (omit --size to reuse it, \
                     or remove it)",
                    image.display()
                )));
            }
        }
        if matches!(backend, Backend::Nvramdisk | Backend::Flash) {
            nvstack_stack::peek(image)?;
        }
        return Ok(None);
    }
    let size = a.size.unwrap_or(SIZE_DEFAULT_BYTES);
    match backend {
        Backend::Cache => create_cache(a, image, size).map(Some),
        Backend::DirectFile => unreachable!("direct-file has no image"),
        Backend::Flash => unreachable!("refused by up_backend: flash serves an existing file"),
        Backend::Nvramdisk => {
            let sb = format_image(image, size, &FormatOptions::default(), false)?;
            Ok(Some(format!(
                "formatted {} ({} blocks of {} B)",
                image.display(),
                sb.geometry.blocks,
                sb.geometry.block_bytes
            )))
        }
        Backend::Raw => {
            if size == 0 || !size.is_multiple_of(4096) {
                return Err(Error::bad(format!(
                    "--size {size}: a raw region must be a positive multiple of 4096 bytes"
                )));
            }
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(image)
                .map_err(|e| Error::env(format!("{}: cannot create: {e}", image.display())))?;
            nvstack_pmem::mmap::allocate_file(&f, image, size)?;
            Ok(Some(format!(
                "created raw region {} ({size} bytes)",
                image.display()
            )))
        }
    }
}

/// A new cache image over `a.backing` (created when absent), with `a.settings` stored.
fn create_cache(a: &UpArgs, image: &Path, size: u64) -> Result<String> {
    let backing = a.backing.as_deref().expect("checked by up_backend");
    match a.cache.expect("checked by up_backend") {
        crate::cache::CacheMode::Ubj => {}
        crate::cache::CacheMode::Write => {
            return crate::cache::write::create_for_up(
                image,
                size,
                backing,
                a.backing_size,
                &a.settings,
                &a.write,
            )
        }
    }
    let o = nvstack_nvcache::ubj::image::CreateOptions {
        size,
        backing,
        backing_size: a.backing_size,
        settings: a.settings.apply(nvstack_nvcache::Settings::default())?,
        force: false,
    };
    let c = nvstack_nvcache::ubj::image::create_image(image, &o)?;
    Ok(format!(
        "created UBJ cache {} ({} slots) over {}{} ({} blocks)",
        image.display(),
        c.superblock.slots,
        c.backing.display(),
        if c.backing_created { ", created" } else { "" },
        c.superblock.blocks
    ))
}

/// The device's block size, read before the daemon takes the image's lock: the loop device's
/// sector size.
fn block_bytes_of(backend: Backend, st: &UpState) -> Result<u32> {
    Ok(match backend {
        Backend::Nvramdisk | Backend::Cache | Backend::Flash => {
            nvstack_stack::peek(&st.image)?.block_bytes
        }
        Backend::Raw => nvstack_stack::raw::RAW_BLOCK_BYTES,
        Backend::DirectFile => nvstack_nvcache::ubj::format::BLOCK_BYTES,
    })
}

/// Starts `nvstack serve` on the image and records its pid.
fn start_daemon(
    a: &UpArgs,
    backend: Backend,
    exe: PathBuf,
    dir: &Path,
    st: &mut UpState,
) -> Result<()> {
    // A cache that runs with the settings stored at create (the write cache) was given them
    // there.
    let fixed_settings = backend == Backend::Cache
        && nvstack_stack::identify(&st.image)?.is_some_and(|k| !k.takes_run_settings());
    let pid_file = dir.join("serve.pid");
    let mut serve = Command::new(exe);
    serve.arg("serve");
    if let Some(image) = &a.image {
        serve.arg(image);
    }
    if let Some(b) = &a.backing {
        serve.arg("--backing").arg(b);
    }
    if !fixed_settings {
        serve.args(a.settings.to_args());
    }
    serve
        .arg("--mountpoint")
        .arg(&st.fuse_dir)
        .arg("--threads")
        .arg(a.threads.to_string())
        .arg("--pid-file")
        .arg(&pid_file)
        .arg("--stats")
        .arg(&st.stats)
        .arg("--log")
        .arg(&st.log)
        .arg("--backend")
        .arg(&st.backend);
    let msg = run(&mut serve, "nvstack serve").map_err(|e| match e {
        // The daemon refused its arguments (exit 2): bad input, not the environment.
        Error::Environment(m) if m.contains("(exit status: 2)") => Error::bad(m),
        e => e,
    })?;
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| Error::env(format!("{}: no pid written", pid_file.display())))?;
    st.daemon_pid = Some(pid);
    save(dir, st)?;
    crate::say!("serve: {msg}")?;
    Ok(())
}

/// Attaches a loop device to the daemon's DIR/disk, with sectors of the device's block size
/// and requests capped so that each is one FUSE write (crates/export/src/loopdev.rs: a longer
/// request is cut into several, and a daemon dying between two pieces leaves a completed
/// block write torn), and records it.
fn attach_loop(a: &UpArgs, dir: &Path, st: &mut UpState, block_bytes: u32) -> Result<String> {
    let kb = loop_limit_of(&st.stats, block_bytes)?;
    let disk = st.fuse_dir.join("disk");
    let mut losetup = Command::new("losetup");
    losetup
        .arg("--find")
        .arg("--show")
        .arg("--sector-size")
        .arg(block_bytes.to_string());
    if a.loop_direct_io {
        losetup.arg("--direct-io=on");
    }
    let dev = run(losetup.arg(&disk), "losetup")?;
    st.loop_dev = Some(dev.clone());
    save(dir, st)?;
    // Before any request: nothing reaches the device until the file system is made.
    nvstack_export::loopdev::set_max_sectors_kb(&dev, kb)?;
    crate::say!(
        "loop: {dev} attached to {} (sector size {block_bytes}, max_sectors_kb {kb}: every \
         request one FUSE write)",
        disk.display()
    )?;
    Ok(dev)
}

/// The loop device's request limit for `block_bytes` sectors, from what the daemon's FUSE
/// INIT agreed (its stats file; the daemon reports ready only after INIT).
fn loop_limit_of(stats: &Path, block_bytes: u32) -> Result<u64> {
    let s = nvstack_export::stats::read_stats_file(stats)?;
    let limits = nvstack_export::loopdev::FuseLimits {
        max_write_bytes: s.fuse.max_write_bytes,
        max_pages: s.fuse.max_pages,
    };
    if limits.max_pages == 0 {
        return Err(Error::env(format!(
            "{}: the daemon reported ready before FUSE INIT agreed its limits",
            stats.display()
        )));
    }
    nvstack_export::loopdev::max_sectors_kb(u64::from(block_bytes), limits)
}

/// Makes the file system on `dev` unless it already holds one; then `st.fs` names the one
/// found, which is what gets mounted.
fn ensure_fs(a: &UpArgs, st: &mut UpState, dev: &str) -> Result<()> {
    // blkid -p exits 2 when it finds no signature.
    let probe = Command::new("blkid")
        .args(["-p", "-o", "value", "-s", "TYPE", dev])
        .output()
        .map_err(|e| Error::env(format!("blkid: cannot run: {e}")))?;
    let found = String::from_utf8_lossy(&probe.stdout).trim().to_string();
    if found.is_empty() {
        let mut mkfs = Command::new(format!("mkfs.{}", a.fs.name()));
        match a.fs {
            FsKind::Ext4 => mkfs.args(["-q", "-F"]),
            FsKind::Xfs => mkfs.args(["-q", "-f"]),
        };
        run(mkfs.arg(dev), &format!("mkfs.{}", a.fs.name()))?;
        crate::say!("mkfs: made {} on {dev}", a.fs.name())?;
    } else {
        if found != a.fs.name() {
            crate::say!("mkfs: {dev} already holds {found}; mounting that")?;
        } else {
            crate::say!("mkfs: {dev} already holds {found}; kept")?;
        }
        st.fs = match found.as_str() {
            "xfs" => FsKind::Xfs,
            _ => FsKind::Ext4,
        };
    }
    Ok(())
}

fn bring_up(a: &UpArgs, backend: Backend, dir: &Path, st: &mut UpState) -> Result<()> {
    let exe = std::env::current_exe()
        .map_err(|e| Error::env(format!("cannot find the nvstack executable: {e}")))?;
    let block_bytes = block_bytes_of(backend, st)?;
    start_daemon(a, backend, exe, dir, st)?;
    let dev = attach_loop(a, dir, st, block_bytes)?;
    ensure_fs(a, st, &dev)?;
    let mut mount = Command::new("mount");
    if let Some(o) = &a.mount_options {
        mount.arg("-o").arg(o);
    }
    run(
        mount.arg(&dev).arg(&st.mount),
        &format!("mount {dev} {}", st.mount.display()),
    )?;
    st.mounted = true;
    save(dir, st)?;
    crate::say!("mount: {dev} on {}", st.mount.display())?;
    Ok(())
}

pub fn down(a: DownArgs) -> Result<i32> {
    let dir = state_dir(&a.mount)?;
    let Some(st) = load(&dir)? else {
        return Err(Error::env(format!(
            "nothing is up at {}: no state in {}",
            a.mount.display(),
            dir.display()
        )));
    };
    tear_down(&dir, &st)?;
    crate::say!("down: {}", st.mount.display())?;
    Ok(0)
}

/// Undo, in reverse, whatever `st` records; stop at the first step that cannot be undone
/// (a busy mount), leaving the state file for a later `down`.
fn tear_down(dir: &Path, st: &UpState) -> Result<()> {
    if is_mount_point(&st.mount)? {
        run(
            Command::new("umount").arg(&st.mount),
            &format!("umount {}", st.mount.display()),
        )
        .map_err(|e| Error::env(format!("{e} (is something using it?)")))?;
        crate::say!("umount: {}", st.mount.display())?;
    }
    if let Some(dev) = &st.loop_dev {
        let disk = st.fuse_dir.join("disk");
        let attached = std::fs::read_to_string(format!(
            "/sys/block/{}/loop/backing_file",
            dev.trim_start_matches("/dev/")
        ))
        .map(|b| Path::new(b.trim()) == disk)
        .unwrap_or(false);
        if attached {
            run(Command::new("losetup").arg("-d").arg(dev), "losetup -d")?;
            // Detach is asynchronous: wait until the loop lets go of the file.
            let t = Instant::now();
            while loops_on(&disk).is_ok_and(|l| !l.is_empty()) && t.elapsed() < DAEMON_STOP_WAIT {
                std::thread::sleep(Duration::from_millis(50));
            }
            crate::say!("loop: {dev} detached")?;
        }
    }
    if let Some(pid) = st.daemon_pid {
        if pid_alive(pid) {
            run(
                Command::new("kill").arg("-TERM").arg(pid.to_string()),
                "kill -TERM",
            )?;
            let t = Instant::now();
            while pid_alive(pid) && t.elapsed() < DAEMON_STOP_WAIT {
                std::thread::sleep(Duration::from_millis(50));
            }
            if pid_alive(pid) {
                return Err(Error::env(format!(
                    "the daemon (pid {pid}) did not stop within {} s",
                    DAEMON_STOP_WAIT.as_secs()
                )));
            }
            crate::say!(
                "serve: daemon {pid} stopped{}",
                if st.backend == Backend::Cache.name() {
                    " (its clean stop made every acknowledged write durable: a UBJ cache by a \
                     final commit, a write cache by a flush of its backing file; nothing is \
                     written back: `nvstack cache writeback` does that)"
                } else {
                    ""
                }
            )?;
        }
    }
    if is_mount_point(&st.fuse_dir)? {
        // The daemon died without unmounting (killed): detach the dead mount.
        run(
            Command::new("umount").arg("-l").arg(&st.fuse_dir),
            "umount -l",
        )?;
        crate::say!("serve: stale FUSE mount {} detached", st.fuse_dir.display())?;
    }
    let _ = std::fs::remove_file(&st.stats);
    std::fs::remove_dir_all(dir)
        .map_err(|e| Error::env(format!("{}: cannot remove the state: {e}", dir.display())))?;
    Ok(())
}
