//! `nvstack serve`: the device as one FUSE file, `DIR/disk`, for a loop device to attach.
//!
//! Without `--foreground` the command starts itself again as the daemon (in a process group
//! of its own, so a terminal's ^C does not reach it), waits until the daemon reports that
//! `DIR/disk` exists (or why it could not), prints that, and exits. The daemon reports on a
//! pipe as one line: `ready <what it did>` or `error <exit code> <message>`.

use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::{Error, Result};
use nvstack_export::file::BlockFile;
use nvstack_export::fuse::{self, DiskFs, FuseOptions, MountOptions, Negotiated, DISK_NAME};
use nvstack_export::loopdev::{self, FuseLimits};
use nvstack_export::powercut::{PowerCut, PowerCutSpec};
use nvstack_export::raw::RawDevice;
use nvstack_export::stats::ServeStats;
use nvstack_nvcache::{FileDevice, ServedWc, Ticker, Ubj, WcDestager, WriteCache};
use nvstack_nvramdisk::disk::{NvramDisk, OpenOptions};
use nvstack_nvramdisk::image::{open_image, peek};
use nvstack_pmem::{Access, MmapRegion, Region};
use nvstack_sim::trace::nvstack::{RecordingDevice, TraceWriter};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

pub const THREADS_MAX: usize = 64;
/// How long `serve` waits for its daemon to come up (recovery of a large image included).
const READY_WAIT: Duration = Duration::from_secs(300);

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// Transactions: every write atomic and durable on return (an nvramdisk image).
    Nvramdisk,
    /// Plain copies into the region, no transactions: the baseline.
    Raw,
    /// A cache image over its backing file: UBJ (durable at the next fsync, a commit) or the
    /// write cache (admitted writes durable on return, bypassed ones at the next fsync).
    Cache,
    /// The plain backing file (--backing), O_DIRECT, durable at the next fsync (fdatasync):
    /// the baseline of a cache.
    DirectFile,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Nvramdisk => "nvramdisk",
            Backend::Raw => "raw",
            Backend::Cache => "cache",
            Backend::DirectFile => "direct-file",
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// The image: an nvramdisk image or a cache image (told apart by its superblock); with
    /// --backend raw, any file of whole 4 KiB pages; none with --backend direct-file.
    pub image: Option<PathBuf>,
    /// An existing empty directory; the device appears as DIR/disk.
    #[arg(long)]
    pub mountpoint: PathBuf,
    /// FUSE worker threads, each with its own /dev/fuse descriptor (1-64).
    #[arg(long, default_value_t = 4)]
    pub threads: usize,
    /// Stay in the foreground (default: daemonise once DIR/disk exists).
    #[arg(long)]
    pub foreground: bool,
    /// Write the daemon's pid here once it serves.
    #[arg(long)]
    pub pid_file: Option<PathBuf>,
    /// Default: the image's kind (nvramdisk or cache).
    #[arg(long, value_enum)]
    pub backend: Option<Backend>,
    /// A cache's backing file when it moved since create; with --backend direct-file, the
    /// file to serve.
    #[arg(long)]
    pub backing: Option<PathBuf>,
    /// A UBJ cache's settings for this run (default: those stored at create; a write cache
    /// always runs with its stored settings).
    #[command(flatten)]
    pub settings: crate::cache::SettingsArgs,
    /// Mirror the daemon's counters into this file (on tmpfs); it outlives the daemon.
    #[arg(long)]
    pub stats: Option<PathBuf>,
    /// The daemon's log (its stderr); default: discarded once daemonised.
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// Do not ask for FOPEN_PARALLEL_DIRECT_WRITES (to measure what it brings).
    #[arg(long)]
    pub no_parallel_writes: bool,
    /// A write cache: run with the settings stored at create as they are, so that an image
    /// made without watermarks destages by the seed's trigger alone (the one-block destage
    /// of NVFAT, what `nvstack sim nvfat` replays: one 512 B block per new block once full).
    /// Default: what the image leaves off is dm-writecache's (watermarks 50 % and 45 %, a
    /// destage thread ahead of the writes, 2 MiB between backing flushes).
    #[arg(long)]
    pub seed_destage: bool,
    /// Largest write FUSE may send, bytes (default and maximum: 63 blocks, the longest write
    /// that touches at most 64 blocks, one atomic device write, at any offset).
    #[arg(long, value_parser = crate::size_arg)]
    pub max_write: Option<u64>,
    /// With --backend raw: serve a file that holds an nvramdisk or cache image (destroys it);
    /// with --backend direct-file: a backing file whose cache is not detached.
    #[arg(long)]
    pub force: bool,
    /// Record every request the device finishes into FILE: nvstack's device trace
    /// (docs/format.md section 13), which `nvstack sim ... --format nvstack` reads. Closed when
    /// the daemon stops cleanly; a killed daemon's trace has no end line and readers refuse it.
    /// An existing FILE is refused without --force.
    #[arg(long, value_name = "FILE")]
    pub record_trace: Option<PathBuf>,
    /// With --record-trace: also log every write's bytes into FILE, in the trace's order
    /// (docs/format.md section 13.1), for replays that need the volume's contents (`nvstack sim
    /// nvfat`). An existing FILE is refused without --force.
    #[arg(long, value_name = "FILE", requires = "record_trace")]
    pub record_data: Option<PathBuf>,
    /// With --backend raw: the device's block size, 512 (disk sectors, for recording a FAT
    /// volume sector by sector) or 4096 (default).
    #[arg(long, value_name = "BYTES")]
    pub block_size: Option<u32>,
    /// Testing only: run on the simulated region and cut power DELAY_MS after the daemon
    /// receives SIGUSR1, MODEL:SEED:DELAY_MS (see crates/export/src/powercut.rs).
    #[arg(long, hide = true)]
    pub power_cut: Option<String>,
    /// Internal: the daemon half of a daemonised serve (report readiness on stdout).
    #[arg(long, hide = true)]
    pub notify_stdout: bool,
}

/// The backend `a` asks for, checked against its image and flags (bad input: exit 2).
pub fn backend_of(a: &ServeArgs) -> Result<Backend> {
    let kind = match &a.image {
        Some(p) => Some(crate::kind::kind(p)?),
        None => None,
    };
    let write_cache = kind == Some(crate::kind::Kind::WriteCache);
    if write_cache && !a.settings.is_empty() {
        return Err(Error::bad(format!(
            "{}: a write cache image: it is served with the settings stored at create (cache \
             settings such as --policy or --high-watermark are not taken by serve; make the \
             cache again with `nvstack cache create --cache write ...`)",
            a.image.as_deref().unwrap_or(Path::new("")).display()
        )));
    }
    let backend = match (a.backend, kind) {
        (Some(b), _) => b,
        (None, Some(crate::kind::Kind::Cache | crate::kind::Kind::WriteCache)) => Backend::Cache,
        (None, Some(_)) => Backend::Nvramdisk,
        (None, None) => {
            return Err(Error::bad(
                "no image: give IMAGE, or --backend direct-file --backing FILE",
            ))
        }
    };
    let cache_image = kind == Some(crate::kind::Kind::Cache) || write_cache;
    let image = a.image.as_deref().map(|p| p.display().to_string());
    match backend {
        Backend::DirectFile if a.image.is_some() => Err(Error::bad(format!(
            "--backend direct-file serves the --backing file; no IMAGE ({}) is read",
            image.unwrap_or_default()
        ))),
        Backend::DirectFile if a.backing.is_none() => Err(Error::bad(
            "--backend direct-file needs --backing FILE (the file to serve)",
        )),
        Backend::Nvramdisk if cache_image => Err(Error::bad(format!(
            "{}: a cache image, not an nvramdisk (omit --backend, or --backend cache)",
            image.unwrap_or_default()
        ))),
        Backend::Cache if !cache_image => Err(Error::bad(format!(
            "--backend cache: {} is not a cache image (nvstack cache create makes one)",
            image.unwrap_or_else(|| "no IMAGE given".into())
        ))),
        Backend::Nvramdisk | Backend::Raw if a.backing.is_some() => Err(Error::bad(format!(
            "--backing is for a cache image or --backend direct-file, not --backend {}",
            backend.name()
        ))),
        _ if backend != Backend::Cache && !a.settings.is_empty() => Err(Error::bad(format!(
            "cache settings (--autocommit, --checkpoint-ms, ...) are for a cache image, not \
             --backend {}",
            backend.name()
        ))),
        _ if backend != Backend::Raw && a.block_size.is_some() => Err(Error::bad(format!(
            "--block-size is for --backend raw, not --backend {}",
            backend.name()
        ))),
        _ => Ok(backend),
    }
}

pub fn serve(a: ServeArgs) -> Result<i32> {
    if a.threads == 0 || a.threads > THREADS_MAX {
        return Err(Error::bad(format!(
            "--threads {}: must be between 1 and {THREADS_MAX}",
            a.threads
        )));
    }
    let backend = backend_of(&a)?;
    if let Some(s) = &a.power_cut {
        PowerCutSpec::parse(s)?;
        if !matches!(backend, Backend::Nvramdisk | Backend::Cache) {
            return Err(Error::bad(
                "--power-cut needs an nvramdisk or a cache image",
            ));
        }
    }
    if !a.foreground {
        return daemonise(&a);
    }
    let notify = a.notify_stdout;
    match run_daemon(&a, notify) {
        Ok(code) => Ok(code),
        Err(e) if notify => {
            report(&format!(
                "error {} {}",
                e.exit_code(),
                one_line(&e.to_string())
            ));
            Ok(e.exit_code())
        }
        Err(e) => Err(e),
    }
}

fn one_line(s: &str) -> String {
    s.replace('\n', " ")
}

/// The daemon's report line on stdout (ignored if the parent is gone).
fn report(line: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}").and_then(|_| o.flush());
}

fn daemonise(a: &ServeArgs) -> Result<i32> {
    let exe = std::env::current_exe()
        .map_err(|e| Error::env(format!("cannot find the nvstack executable: {e}")))?;
    let stderr = match &a.log {
        Some(p) => Stdio::from(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| Error::env(format!("{}: cannot open log: {e}", p.display())))?,
        ),
        None => Stdio::null(),
    };
    let mut cmd = Command::new(exe);
    cmd.args(std::env::args_os().skip(1))
        .arg("--foreground")
        .arg("--notify-stdout")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr);
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd
        .spawn()
        .map_err(|e| Error::env(format!("cannot start the daemon: {e}")))?;
    let out = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(out).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = match rx.recv_timeout(READY_WAIT) {
        Ok(l) => l,
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::env(format!(
                "the daemon did not report within {} s; stopped it",
                READY_WAIT.as_secs()
            )));
        }
    };
    let line = line.trim_end();
    if let Some(msg) = line.strip_prefix("ready ") {
        crate::say!("{msg}")?;
        return Ok(0);
    }
    let status = child.wait().ok();
    if let Some(rest) = line.strip_prefix("error ") {
        let (code, msg) = rest.split_once(' ').unwrap_or((rest, ""));
        return Err(match code {
            "1" => Error::finding(msg),
            "2" => Error::bad(msg),
            _ => Error::env(msg),
        });
    }
    Err(Error::env(format!(
        "the daemon ended without reporting ({})",
        status.map_or("unknown status".into(), |s| s.to_string())
    )))
}

/// Is `dir` a mount point? (Its device differs from its parent's, or it is listed.)
/// The canonical path of `dir`. A dead FUSE mount cannot be resolved (ENOTCONN): then its
/// parent is resolved and the name joined.
pub fn resolve(dir: &Path) -> Result<PathBuf> {
    match std::fs::canonicalize(dir) {
        Ok(c) => Ok(c),
        Err(e) => {
            let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
                return Err(Error::env(format!("{}: {e}", dir.display())));
            };
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            std::fs::canonicalize(parent)
                .map(|p| p.join(name))
                .map_err(|_| Error::env(format!("{}: {e}", dir.display())))
        }
    }
}

pub fn is_mount_point(dir: &Path) -> Result<bool> {
    let canon = resolve(dir)?;
    let info = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| Error::env(format!("/proc/self/mountinfo: {e}")))?;
    let want = canon.to_string_lossy();
    Ok(info.lines().any(|l| {
        l.split(' ')
            .nth(4)
            .is_some_and(|m| unescape_mount_path(m) == want)
    }))
}

fn unescape_mount_path(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// The mount point must exist, be a directory, and not be mounted on already.
pub fn check_mountpoint(dir: &Path) -> Result<()> {
    let md = std::fs::metadata(dir).map_err(|e| {
        if e.raw_os_error() == Some(libc::ENOTCONN) {
            Error::env(format!(
                "mount point {}: a stale FUSE mount is already mounted there, its daemon gone \
                 (`nvstack down --mount ...`, or `umount -l {}`)",
                dir.display(),
                dir.display()
            ))
        } else {
            Error::env(format!(
                "mount point {}: {e} (create it first)",
                dir.display()
            ))
        }
    })?;
    if !md.is_dir() {
        return Err(Error::env(format!(
            "mount point {}: not a directory",
            dir.display()
        )));
    }
    if is_mount_point(dir)? {
        return Err(Error::env(format!(
            "mount point {}: something is already mounted there (a stale nvstack serve? \
             `nvstack down --mount ...` or `umount {}` first)",
            dir.display(),
            dir.display()
        )));
    }
    Ok(())
}

/// A served cache (either kind, through the library's contract): its ticker and (a write
/// cache) its destage thread, stopped before the close so that nothing runs after the
/// counters are stored.
struct ServedCache {
    cache: Arc<dyn nvstack_nvcache::Cache>,
    threads: std::sync::Mutex<Vec<Box<dyn std::any::Any + Send>>>,
}

impl ServedCache {
    fn new(
        cache: Arc<dyn nvstack_nvcache::Cache>,
        threads: Vec<Box<dyn std::any::Any + Send>>,
    ) -> Self {
        ServedCache {
            cache,
            threads: std::sync::Mutex::new(threads),
        }
    }

    fn observe(&self, stats: Arc<ServeStats>) {
        self.cache.observe(stats);
    }

    /// The threads stopped, then the cache's close, worded.
    fn close(&self) -> Result<String> {
        self.threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        Ok(closed_what(&self.cache.close()?))
    }
}

/// What a clean close did, in a sentence.
fn closed_what(c: &nvstack_nvcache::Closed) -> String {
    match c {
        nvstack_nvcache::Closed::Ubj { epoch, life: k } => format!(
            "final commit at epoch {epoch}; counters stored ({} commits, {} checkpoints, {} \
             bytes written by the user, {} to the backing file over the cache's life); no \
             checkpoint (`nvstack cache writeback` writes everything back)",
            k.commits, k.checkpoints, k.user_bytes_written, k.backing_bytes_written
        ),
        nvstack_nvcache::Closed::Write {
            cached_blocks,
            life: k,
        } => format!(
            "backing device flushed; counters stored ({} blocks written, {} bypassed, {} \
             destaged, {} bytes written to the backing file over the cache's life); \
             {cached_blocks} blocks stay cached in NVRAM, not written back (`nvstack cache \
             writeback` or `detach` writes them back)",
            k.write_blocks,
            k.write_bypass,
            k.destaged_room
                + k.destaged_watermark
                + k.destaged_max_age
                + k.destaged_cleaner
                + k.destaged_writeback,
            k.backing_bytes_written
        ),
    }
}

fn served_cache<R: Region + 'static>(ubj: Arc<Ubj<R>>) -> (Arc<dyn BlockDevice>, ServedCache) {
    let threads: Vec<Box<dyn std::any::Any + Send>> = Ticker::start(&ubj)
        .into_iter()
        .map(|t| Box::new(t) as Box<dyn std::any::Any + Send>)
        .collect();
    (ubj.clone(), ServedCache::new(ubj, threads))
}

fn cache_opened_what<R: Region>(u: &Ubj<R>) -> String {
    match u.dropped_at_open() {
        0 => format!("UBJ cache, epoch {}", u.epoch()),
        n => format!(
            "UBJ cache, epoch {}, recovered: {n} uncommitted entries dropped",
            u.epoch()
        ),
    }
}

/// The device, what opening it did, the power cut when running on the simulated region, and
/// the cache when it is one.
struct Served {
    dev: Arc<dyn BlockDevice>,
    what: String,
    power_cut: Option<Arc<PowerCut>>,
    cache: Option<ServedCache>,
}

impl Served {
    fn plain(dev: Arc<dyn BlockDevice>, what: String, power_cut: Option<Arc<PowerCut>>) -> Self {
        Served {
            dev,
            what,
            power_cut,
            cache: None,
        }
    }
}

fn settings_over(a: &ServeArgs, image: &Path) -> Result<Option<nvstack_nvcache::Settings>> {
    if a.settings.is_empty() {
        return Ok(None);
    }
    let stored = nvstack_nvcache::ubj::image::peek(image)?.settings;
    a.settings.apply(stored).map(Some)
}

fn open_cache(a: &ServeArgs, image: &Path) -> Result<Served> {
    let over = settings_over(a, image)?;
    if let Some(s) = &a.power_cut {
        if crate::kind::kind(image)? == crate::kind::Kind::WriteCache {
            return open_write_cache_cut(a, image, s);
        }
        let pc = PowerCut::load_cache(image, a.backing.as_deref(), PowerCutSpec::parse(s)?)?;
        let (nvram, disk) = pc.cache_devices().expect("a cache run has both parts");
        let ubj = Ubj::open(Arc::new(nvram), Arc::new(disk), over)?;
        let what = format!(
            "{}, simulated region, power cut {s}",
            cache_opened_what(&ubj)
        );
        let (dev, cache) = served_cache(Arc::new(ubj));
        return Ok(Served {
            dev,
            what,
            power_cut: Some(pc),
            cache: Some(cache),
        });
    }
    if crate::kind::kind(image)? == crate::kind::Kind::WriteCache {
        return open_write_cache(a, image);
    }
    let o = nvstack_nvcache::ubj::image::open_image(image, a.backing.as_deref(), over)?;
    let what = format!(
        "{} over {}",
        cache_opened_what(&o.cache),
        o.backing.display()
    );
    let (dev, cache) = served_cache(o.cache);
    Ok(Served {
        dev,
        what,
        power_cut: None,
        cache: Some(cache),
    })
}

/// A write cache to serve: the device (the cache reporting its state) and its served half.
fn served_wc<R: Region + 'static>(
    cache: Arc<WriteCache<R>>,
    seed_destage: bool,
) -> (String, Arc<dyn BlockDevice>, ServedCache) {
    if !seed_destage {
        cache.use_served_defaults();
    }
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
    let what = format!("{what}, destage: {}", destage_what(&cache.settings()));
    let served = Arc::new(ServedWc::new(cache));
    // Stopped in this order at the close: the ticker, then the destage thread.
    let mut threads: Vec<Box<dyn std::any::Any + Send>> = Vec::new();
    if let Some(t) = Ticker::start(&served) {
        threads.push(Box::new(t));
    }
    if let Some(d) = WcDestager::start(&served) {
        threads.push(Box::new(d));
    }
    (what, served.clone(), ServedCache::new(served, threads))
}

/// How a served write cache destages (the serve line says it).
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

fn open_write_cache(a: &ServeArgs, image: &Path) -> Result<Served> {
    let o = nvstack_nvcache::write::image::open_wc_image(image, a.backing.as_deref(), None)?;
    let (what, dev, cache) = served_wc(o.cache, a.seed_destage);
    Ok(Served {
        dev,
        what: format!("{what} over {}", o.backing.display()),
        power_cut: None,
        cache: Some(cache),
    })
}

/// A write cache on the simulated region (NVRAM and backing file), power cut armed.
fn open_write_cache_cut(a: &ServeArgs, image: &Path, spec: &str) -> Result<Served> {
    let pc = PowerCut::load_write_cache(image, a.backing.as_deref(), PowerCutSpec::parse(spec)?)?;
    let (nvram, disk) = pc.cache_devices().expect("a cache run has both parts");
    let wc = WriteCache::open(Arc::new(nvram), Arc::new(disk), None)?;
    let (what, dev, cache) = served_wc(Arc::new(wc), a.seed_destage);
    Ok(Served {
        dev,
        what: format!("{what}, simulated region, power cut {spec}"),
        power_cut: Some(pc),
        cache: Some(cache),
    })
}

/// The plain backing file, refused when it is a live cache's (its newest data may be only in
/// that cache's NVRAM) unless --force.
fn open_direct_file(a: &ServeArgs) -> Result<Served> {
    let p = a.backing.as_deref().expect("checked by backend_of");
    let dev = FileDevice::open(p)?;
    let mut last = vec![0u8; 4096];
    dev.read(dev.blocks() - 1, &mut last)?;
    if let Ok(l) = nvstack_nvcache::common::format::Label::decode(&last) {
        if !l.detached && !a.force {
            return Err(Error::bad(format!(
                "{}: the backing file of a cache (identity {:032x}) that is not detached: its \
                 newest data may be only in the cache's NVRAM; serve the cache image, detach it \
                 (`nvstack cache detach`), or pass --force",
                p.display(),
                l.identity
            )));
        }
    }
    let what = format!(
        "direct file{}",
        if dev.direct() {
            ", O_DIRECT"
        } else {
            ", buffered (no O_DIRECT here)"
        }
    );
    Ok(Served::plain(Arc::new(dev), what, None))
}

fn open_backend(a: &ServeArgs, backend: Backend) -> Result<Served> {
    let image = a.image.as_deref();
    match (backend, &a.power_cut, image) {
        (Backend::DirectFile, _, _) => open_direct_file(a),
        (_, _, None) => Err(Error::bad("no IMAGE given")),
        (Backend::Cache, _, Some(img)) => open_cache(a, img),
        (Backend::Nvramdisk, None, Some(img)) => {
            let d = open_image(img, OpenOptions::default())?;
            let rep = d.recovery_report().clone();
            let what = if rep.was_clean() {
                "clean".to_string()
            } else {
                format!("recovered: {} redone, {} undone", rep.redone, rep.undone)
            };
            Ok(Served::plain(Arc::new(d), what, None))
        }
        (Backend::Nvramdisk, Some(s), Some(img)) => {
            let pc = PowerCut::load(img, PowerCutSpec::parse(s)?)?;
            let d = NvramDisk::open(pc.region(), OpenOptions::default())?;
            Ok(Served::plain(
                Arc::new(d),
                format!("simulated region, power cut {s}"),
                Some(pc),
            ))
        }
        (Backend::Raw, _, Some(img)) => open_raw(a, img),
    }
}

fn open_raw(a: &ServeArgs, img: &Path) -> Result<Served> {
    let holds = if crate::kind::kind(img)? == crate::kind::Kind::Cache {
        Some("a cache image")
    } else if crate::kind::kind(img)? == crate::kind::Kind::WriteCache {
        Some("a write cache image")
    } else if peek(img).is_ok() {
        Some("an nvramdisk image")
    } else {
        None
    };
    if let (Some(what), false) = (holds, a.force) {
        return Err(Error::bad(format!(
            "{}: holds {what}; --backend raw would overwrite it (pass --force)",
            img.display()
        )));
    }
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
    let bb = a.block_size.unwrap_or(nvstack_export::raw::RAW_BLOCK_BYTES);
    let dev = RawDevice::with_block_bytes(Arc::new(r), bb)
        .map_err(|e| Error::bad(format!("--block-size {bb}: {e}")))?;
    Ok(Served::plain(Arc::new(dev), "raw".into(), None))
}

/// Loop devices whose backing file is `file` (from /sys/block/loop*/loop/backing_file).
pub fn loops_backed_by(file: &Path) -> Vec<String> {
    let Ok(canon) = std::fs::canonicalize(file) else {
        return Vec::new();
    };
    let Ok(rd) = std::fs::read_dir("/sys/block") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if !name.starts_with("loop") {
            continue;
        }
        if let Ok(b) = std::fs::read_to_string(e.path().join("loop/backing_file")) {
            if Path::new(b.trim()) == canon {
                out.push(format!("/dev/{name}"));
            }
        }
    }
    out.sort();
    out
}

/// Refuse a loop device attached to a file the daemon serves: it would write it behind the
/// daemon's back (a loop device takes no lock).
fn check_no_loop(file: &Path, what: &str) -> Result<()> {
    let loops = loops_backed_by(file);
    if loops.is_empty() {
        return Ok(());
    }
    Err(Error::env(format!(
        "{}: a loop device is attached to the {what} itself ({}); detach it first \
         (`losetup -d`)",
        file.display(),
        loops.join(", ")
    )))
}

/// A recording's output file, refused if it exists unless `force`.
fn create_record_file(
    path: &Path,
    flag: &str,
    force: bool,
) -> Result<Box<dyn std::io::Write + Send>> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true);
    if force {
        o.create(true).truncate(true);
    } else {
        o.create_new(true);
    }
    let f = o.open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => Error::bad(format!(
            "{flag} {}: exists; pass --force to replace it",
            path.display()
        )),
        _ => Error::env(format!("{flag} {}: cannot create: {e}", path.display())),
    })?;
    Ok(Box::new(std::io::BufWriter::with_capacity(1 << 20, f)))
}

/// The device to serve and the trace it records into, if any.
type Recording = (Arc<dyn BlockDevice>, Option<Arc<TraceWriter>>);

/// The device to serve: `dev` itself, or `dev` recording into `--record-trace FILE`.
fn recording(a: &ServeArgs, dev: Arc<dyn BlockDevice>) -> Result<Recording> {
    let Some(path) = &a.record_trace else {
        return Ok((dev, None));
    };
    let out = create_record_file(path, "--record-trace", a.force)?;
    let t = Arc::new(TraceWriter::new(out, dev.block_bytes(), dev.blocks())?);
    if let Some(p) = &a.record_data {
        t.log_data(
            create_record_file(p, "--record-data", a.force)?,
            dev.block_bytes(),
        )?;
    }
    let rec: Arc<dyn BlockDevice> = Arc::new(RecordingDevice::new(dev, t.clone()));
    Ok((rec, Some(t)))
}

/// Checks the paths before anything opens: the backend fits the arguments, the mountpoint is
/// usable, and neither the image nor its backing file is attached to a loop device (writing
/// under a loop device's page cache would corrupt it).
fn check_paths(a: &ServeArgs) -> Result<Backend> {
    let backend = backend_of(a)?;
    check_mountpoint(&a.mountpoint)?;
    if let Some(img) = &a.image {
        check_no_loop(img, "image")?;
    }
    let backing = match (backend, &a.image) {
        (Backend::Cache, Some(img)) if crate::kind::kind(img)? == crate::kind::Kind::WriteCache => {
            Some(nvstack_nvcache::write::serve::wc_backing_of(
                img,
                a.backing.as_deref(),
            )?)
        }
        (Backend::Cache, Some(img)) => Some(nvstack_nvcache::ubj::image::backing_of(
            img,
            a.backing.as_deref(),
        )?),
        _ => a.backing.clone(),
    };
    if let Some(b) = &backing {
        check_no_loop(b, "backing file")?;
    }
    Ok(backend)
}

/// The FUSE max_write: `--max-write` or the longest the device's capabilities allow (63
/// blocks for nvramdisk and raw), refused when it could not be atomic.
fn max_write_of(a: &ServeArgs, file: &BlockFile) -> Result<u64> {
    let limit_max = file.write_bytes_max();
    if limit_max < 4096 {
        return Err(Error::bad(format!(
            "the device's atomic unit is {} blocks of {} bytes: FUSE needs writes of at least \
             4096 bytes, and one longer than {limit_max} bytes would not be atomic (a write \
             cache with --admit all: make it with more slots, its unit being min(64, slots / 2))",
            file.write_blocks_max(),
            file.block_bytes()
        )));
    }
    let max_write = a.max_write.unwrap_or(limit_max);
    if max_write < 4096 || max_write > limit_max {
        return Err(Error::bad(format!(
            "--max-write {max_write}: must be between 4096 and {limit_max} bytes ({} blocks: \
             a longer write would touch more than {} blocks, {}, at an unaligned offset)",
            file.write_blocks_max() - 1,
            file.write_blocks_max(),
            file.limit_name()
        )));
    }
    Ok(max_write)
}

/// Arms the power cut on SIGUSR1 (the delay starts now: the test sends SIGUSR1 once its
/// workload runs, so no cut lands in its recovery checks).
fn arm_power_cut(pc: &Arc<PowerCut>, stats: &Arc<ServeStats>) {
    eprintln!("nvstack serve: power cut armed");
    let st = stats.clone();
    pc.arm_with(move || {
        // After the delay, the first instant (within 300 ms) at which acknowledged writes
        // wait for an fsync (the cut must find writes in flight, like the kill tests'
        // SIGKILL), and the counters stop there: nothing is acknowledged after the cut.
        let (s, hit) = st.freeze_when(|s| s.acked_not_fsynced() > 0, Duration::from_millis(300));
        eprintln!(
            "nvstack serve: power cut: counters frozen at {} writes \
             acknowledged, {} covered by fsyncs{}",
            s.writes_acked,
            s.fsync_covered,
            if hit {
                ""
            } else {
                " (no unfsynced write within 300 ms)"
            }
        );
    });
}

/// The thread that answers signals: SIGUSR1 arms the power cut (if any), SIGINT and SIGTERM
/// unmount, which ends the session.
fn spawn_signal_thread(
    mut unmounter: fuse::Unmounter,
    mountpoint: PathBuf,
    power_cut: Option<Arc<PowerCut>>,
    stats: Arc<ServeStats>,
) -> Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGUSR1,
    ])
    .map_err(|e| Error::env(format!("cannot install signal handlers: {e}")))?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if sig == signal_hook::consts::SIGUSR1 {
                    if let Some(pc) = &power_cut {
                        arm_power_cut(pc, &stats);
                    }
                    continue;
                }
                eprintln!(
                    "nvstack serve: signal {sig}: unmounting {}",
                    mountpoint.display()
                );
                if let Err(e) = unmounter.unmount() {
                    // Busy: a loop device still holds DIR/disk. Detach the mount now; the
                    // daemon goes on serving the open file and ends when it is closed.
                    eprintln!(
                        "nvstack serve: unmount {}: {e}; detaching lazily, the daemon ends \
                         when the last user (a loop device?) closes {DISK_NAME}",
                        mountpoint.display()
                    );
                    let _ = Command::new("umount").arg("-l").arg(&mountpoint).status();
                }
                break;
            }
        })
        .map_err(|e| Error::env(format!("cannot start the signal thread: {e}")))?;
    Ok(())
}

/// The line that says what is served, where and how, and how to attach a loop device so that
/// every block request is one FUSE write (crates/export/src/loopdev.rs says why).
fn ready_message(r: &Ready, limits: &FuseLimits) -> String {
    let block_bytes = r.file.block_bytes();
    let attach = match loopdev::max_sectors_kb(block_bytes, *limits) {
        Ok(kb) => format!(
            "loop device: losetup --sector-size {block_bytes} and max_sectors_kb {kb} (echo {kb} \
             > /sys/block/loopN/queue/max_sectors_kb), so that no block request is split"
        ),
        Err(e) => format!("loop device: none can be attached safely ({e})"),
    };
    format!(
        "serving {} ({}, {} bytes, {}; durable {}) at {}/{DISK_NAME}: pid {}, {} threads, \
         max write {} bytes, max pages {}{}; {attach}",
        r.served_name.display(),
        r.backend.name(),
        r.file.size_bytes(),
        r.what,
        if r.file.is_durable_on_return() {
            "when a write returns"
        } else {
            "at the next fsync"
        },
        r.mountpoint.display(),
        std::process::id(),
        r.threads,
        limits.max_write_bytes,
        limits.max_pages,
        if r.parallel_direct_writes {
            ", parallel direct writes"
        } else {
            ""
        }
    )
}

/// What the ready line tells, gathered before the session runs.
struct Ready {
    backend: Backend,
    served_name: PathBuf,
    what: String,
    file: Arc<BlockFile>,
    mountpoint: PathBuf,
    threads: usize,
    parallel_direct_writes: bool,
    notify: bool,
}

/// The kernel's INIT must arrive within this (it is sent at mount and answered as soon as
/// the session runs).
const INIT_WAIT: Duration = Duration::from_secs(30);

/// Reports ready once INIT has agreed the limits (the loop device's limit depends on them),
/// or the error; with no INIT in time, unmounts, which ends the session.
fn report_when_agreed(
    r: Ready,
    negotiated: Negotiated,
    mut unmounter: fuse::Unmounter,
) -> Result<()> {
    std::thread::Builder::new()
        .name("nvstack-ready".into())
        .spawn(move || {
            let line = match negotiated.recv_timeout(INIT_WAIT) {
                Ok(Ok(limits)) => {
                    let msg = ready_message(&r, &limits);
                    eprintln!("nvstack serve: {msg}");
                    if !r.notify {
                        let _ = crate::say!("{msg}");
                        return;
                    }
                    format!("ready {msg}")
                }
                Ok(Err(e)) => format!("error 3 FUSE INIT failed: {}", one_line(&e)),
                Err(_) => {
                    let _ = unmounter.unmount();
                    format!(
                        "error 3 the kernel sent no FUSE INIT within {} s",
                        INIT_WAIT.as_secs()
                    )
                }
            };
            if line.starts_with("error ") {
                eprintln!("nvstack serve: {line}");
            }
            if r.notify {
                report(&line);
            }
        })
        .map_err(|e| Error::env(format!("cannot start the ready thread: {e}")))?;
    Ok(())
}

/// After the session: closes the cache, writes back a power-cut region, closes the trace,
/// reports the counters and removes the pid file.
fn shut_down(
    a: &ServeArgs,
    served: &Served,
    trace: Option<&TraceWriter>,
    stats: &ServeStats,
) -> Result<()> {
    if let Some(c) = &served.cache {
        let done = c.close()?;
        eprintln!("nvstack serve: {done}");
    }
    if let Some(pc) = &served.power_cut {
        pc.write_back_all()?;
    }
    if let (Some(t), Some(p)) = (trace, &a.record_trace) {
        let n = t.close()?;
        eprintln!("nvstack serve: trace {}: {n} requests", p.display());
    }
    let s = stats.snapshot();
    eprintln!(
        "nvstack serve: unmounted; {} writes, {} fsyncs, {} discards",
        s.writes_acked, s.fsyncs, s.discards
    );
    if let Some(p) = &a.pid_file {
        let _ = std::fs::remove_file(p);
    }
    Ok(())
}

fn run_daemon(a: &ServeArgs, notify: bool) -> Result<i32> {
    let backend = check_paths(a)?;
    let served = open_backend(a, backend)?;
    let (dev, trace) = recording(a, served.dev.clone())?;
    let file = Arc::new(BlockFile::new(dev));
    let max_write = max_write_of(a, &file)?;
    // A served cache's live state is always published (`cache status` reads it); the entry
    // goes at a clean stop, with `_live`.
    let (_live, stats_file) = match (&served.cache, a.image.as_deref()) {
        (Some(_), Some(img)) => {
            let (guard, file) = nvstack_export::stats::publish_live(img, a.stats.as_deref())?;
            (Some(guard), Some(file))
        }
        _ => (None, a.stats.clone()),
    };
    let stats = Arc::new(ServeStats::new(stats_file.as_deref())?);
    if let Some(c) = &served.cache {
        c.observe(stats.clone());
    }
    let served_name = a
        .image
        .as_deref()
        .or(a.backing.as_deref())
        .expect("an image or a backing file")
        .to_path_buf();
    let opts = FuseOptions {
        parallel_direct_writes: !a.no_parallel_writes,
        max_write_bytes: max_write as u32,
    };
    let uid =
        std::fs::metadata("/proc/self").map_or(0, |m| std::os::unix::fs::MetadataExt::uid(&m));
    let gid =
        std::fs::metadata("/proc/self").map_or(0, |m| std::os::unix::fs::MetadataExt::gid(&m));
    let (fs, negotiated) = DiskFs::new(file.clone(), stats.clone(), opts, uid, gid);
    let mount_opts = MountOptions {
        fs_name: format!("nvstack:{}", served_name.display()),
        threads: a.threads,
    };
    let mut session = fuse::mount(fs, &a.mountpoint, &mount_opts)?;
    spawn_signal_thread(
        session.unmounter(),
        a.mountpoint.clone(),
        served.power_cut.clone(),
        stats.clone(),
    )?;
    if let Some(p) = &a.pid_file {
        std::fs::write(p, format!("{}\n", std::process::id()))
            .map_err(|e| Error::env(format!("{}: cannot write pid file: {e}", p.display())))?;
    }
    let ready = Ready {
        backend,
        served_name,
        what: served.what.clone(),
        file: file.clone(),
        mountpoint: a.mountpoint.clone(),
        threads: a.threads,
        parallel_direct_writes: opts.parallel_direct_writes,
        notify,
    };
    report_when_agreed(ready, negotiated, session.unmounter())?;
    let ran = session.run();
    shut_down(a, &served, trace.as_deref(), &stats)?;
    ran.map_err(|e| Error::env(format!("FUSE session ended with an error: {e}")))?;
    Ok(0)
}
