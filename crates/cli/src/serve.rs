//! `nvstack serve`: the device as one FUSE file, `DIR/disk`, for a loop device to attach.
//!
//! Without `--foreground` the command starts itself again as the daemon (in a process group
//! of its own, so a terminal's ^C does not reach it), waits until the daemon reports that
//! `DIR/disk` exists (or why it could not), prints that, and exits. The daemon reports on a
//! pipe as one line: `ready <what it did>` or `error <exit code> <message>`.

use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::{Error, Result};
use nvstack_export::daemon::{self, Daemon, Opened, PowerCutArm};
use nvstack_export::file::BlockFile;
use nvstack_export::fuse::{self, DiskFs, FuseOptions, MountOptions, Negotiated, DISK_NAME};
use nvstack_export::loopdev::{self, FuseLimits};
use nvstack_sim::trace::nvstack::{RecordingDevice, TraceWriter};
use nvstack_stack::powercut::PowerCutSpec;
use nvstack_stack::{Kind, ServeSpec};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

pub const THREADS_MAX: usize = 64;
/// How long `serve` waits for its daemon to come up (recovery of a large image included).
const READY_WAIT: Duration = Duration::from_secs(300);

pub use nvstack_stack::Backend;

/// `--backend`'s values: the stack's backends, by name, each with its line of help.
pub fn backend_values() -> impl clap::builder::TypedValueParser<Value = Backend> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new(Backend::ALL.map(|b| PossibleValue::new(b.name()).help(b.about())))
        .map(|name| Backend::from_name(&name).expect("one of the listed values"))
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
    #[arg(long, value_parser = backend_values())]
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
        Some(p) => Some(nvstack_stack::identify(p)?),
        None => None,
    };
    let fixed_settings = kind
        .flatten()
        .is_some_and(|k| k.is_cache() && !k.takes_run_settings());
    if fixed_settings && !a.settings.is_empty() {
        return Err(Error::bad(format!(
            "{}: {}: it is served with the settings stored at create (cache settings such as \
             --policy or --high-watermark are not taken by serve; make the cache again with \
             `nvstack cache create ...`)",
            a.image.as_deref().unwrap_or(Path::new("")).display(),
            kind.flatten().map_or("", |k| k.name())
        )));
    }
    let backend = match (a.backend, kind) {
        (Some(b), _) => b,
        (None, Some(k)) => Backend::of_kind(k),
        (None, None) => {
            return Err(Error::bad(
                "no image: give IMAGE, or --backend direct-file --backing FILE",
            ))
        }
    };
    let cache_image = kind.flatten().is_some_and(Kind::is_cache);
    let image = a.image.as_deref().map(|p| p.display().to_string());
    match backend {
        Backend::DirectFile if a.image.is_some() => Err(Error::bad(format!(
            "--backend direct-file serves the --backing file; no IMAGE ({}) is read",
            image.unwrap_or_default()
        ))),
        Backend::DirectFile if a.backing.is_none() => Err(Error::bad(
            "--backend direct-file needs --backing FILE (the file to serve)",
        )),
        Backend::Cache if !cache_image => Err(Error::bad(format!(
            "--backend cache: {} is not a cache image (nvstack cache create makes one)",
            image.unwrap_or_else(|| "no IMAGE given".into())
        ))),
        Backend::Nvramdisk | Backend::Flash if Backend::of_kind(kind.flatten()) != backend => Err(
            wrong_kind(&image.unwrap_or_default(), kind.flatten(), backend),
        ),
        Backend::Nvramdisk | Backend::Raw | Backend::Flash if a.backing.is_some() => {
            Err(Error::bad(format!(
                "--backing is for a cache image or --backend direct-file, not --backend {}",
                backend.name()
            )))
        }
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

/// An image served by the backend of another kind: say what it is and which backend serves it.
fn wrong_kind(image: &str, kind: Option<Kind>, backend: Backend) -> Error {
    let served_kind = backend
        .kind_served()
        .expect("a backend of one kind serves that kind");
    Error::bad(format!(
        "{image}: {}, not {} (omit --backend, or --backend {})",
        kind.map_or("no nvstack image", Kind::name),
        served_kind.name(),
        Backend::of_kind(kind).name()
    ))
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

/// A UBJ image's settings for this run: the stored ones with the command line's over them,
/// or None (the stored ones as they are).
fn settings_over(a: &ServeArgs, image: &Path) -> Result<Option<nvstack_nvcache::Settings>> {
    if a.settings.is_empty() {
        return Ok(None);
    }
    let stored = nvstack_stack::kind::stored_ubj_settings(image)?;
    a.settings.apply(stored).map(Some)
}

/// Open what `a` asks for through the stack, after the refusals that --force lifts.
fn open_backend(a: &ServeArgs, backend: Backend) -> Result<Opened> {
    match (backend, a.force) {
        (Backend::DirectFile, false) => refuse_live_backing(a)?,
        (Backend::Raw, false) => refuse_raw_over_image(a)?,
        _ => {}
    }
    let ubj_settings = match (backend, a.image.as_deref()) {
        (Backend::Cache, Some(img)) => settings_over(a, img)?,
        _ => None,
    };
    let spec = ServeSpec {
        image: a.image.as_deref(),
        backing: a.backing.as_deref(),
        ubj_settings,
        seed_destage: a.seed_destage,
        raw_block_bytes: a.block_size,
        power_cut: a
            .power_cut
            .as_deref()
            .map(PowerCutSpec::parse)
            .transpose()?,
    };
    daemon::open(backend, &spec)
}

/// The plain backing file is refused when it is a live cache's (its newest data may be only
/// in that cache's NVRAM).
fn refuse_live_backing(a: &ServeArgs) -> Result<()> {
    let p = a.backing.as_deref().expect("checked by backend_of");
    match nvstack_stack::served::live_cache_backing(p)? {
        Some(identity) => Err(Error::bad(format!(
            "{}: the backing file of a cache (identity {identity:032x}) that is not detached: \
             its newest data may be only in the cache's NVRAM; serve the cache image, detach it \
             (`nvstack cache detach`), or pass --force",
            p.display()
        ))),
        None => Ok(()),
    }
}

/// An image served raw would be overwritten.
fn refuse_raw_over_image(a: &ServeArgs) -> Result<()> {
    let img = a.image.as_deref().expect("checked by backend_of");
    match nvstack_stack::served::holds_an_image(img)? {
        Some(what) => Err(Error::bad(format!(
            "{}: holds {what}; --backend raw would overwrite it (pass --force)",
            img.display()
        ))),
        None => Ok(()),
    }
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
        (Backend::Cache, Some(img)) => {
            Some(nvstack_stack::kind::backing_of(img, a.backing.as_deref())?)
        }
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

/// The thread that answers signals: SIGUSR1 arms the power cut (if any), SIGINT and SIGTERM
/// unmount, which ends the session.
fn spawn_signal_thread(
    mut unmounter: fuse::Unmounter,
    mountpoint: PathBuf,
    power_cut: Option<PowerCutArm>,
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
                    // The cut's delay starts now: the test sends SIGUSR1 once its workload
                    // runs, so no cut lands in its recovery checks.
                    if let Some(pc) = &power_cut {
                        pc.arm(|line| eprintln!("nvstack serve: {line}"));
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

/// After the session: closes the daemon (the cache, a power-cut region's write-back), closes
/// the trace, reports the counters and removes the pid file.
fn shut_down(a: &ServeArgs, daemon: &mut Daemon, trace: Option<&TraceWriter>) -> Result<()> {
    daemon.close(&mut |line| eprintln!("nvstack serve: {line}"))?;
    if let (Some(t), Some(p)) = (trace, &a.record_trace) {
        let n = t.close()?;
        eprintln!("nvstack serve: trace {}: {n} requests", p.display());
    }
    let s = daemon.stats().snapshot();
    eprintln!(
        "nvstack serve: unmounted; {} writes, {} fsyncs, {} discards",
        s.writes_acked, s.fsyncs, s.discards
    );
    if let Some(p) = &a.pid_file {
        let _ = std::fs::remove_file(p);
    }
    Ok(())
}

/// The daemon: the device opened (wrapped to record a trace, its limits checked), then its
/// live state published and its counters created, served through FUSE until unmounted.
fn run_daemon(a: &ServeArgs, notify: bool) -> Result<i32> {
    let backend = check_paths(a)?;
    let opened = open_backend(a, backend)?;
    let (dev, trace) = recording(a, opened.dev().clone())?;
    let file = Arc::new(BlockFile::new(dev));
    let max_write = max_write_of(a, &file)?;
    let mut daemon = opened.publish(a.stats.as_deref())?;
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
    let (fs, negotiated) = DiskFs::new(file.clone(), daemon.stats().clone(), opts, uid, gid);
    let mount_opts = MountOptions {
        fs_name: format!("nvstack:{}", served_name.display()),
        threads: a.threads,
    };
    let mut session = fuse::mount(fs, &a.mountpoint, &mount_opts)?;
    spawn_signal_thread(
        session.unmounter(),
        a.mountpoint.clone(),
        daemon.power_cut(),
    )?;
    if let Some(p) = &a.pid_file {
        std::fs::write(p, format!("{}\n", std::process::id()))
            .map_err(|e| Error::env(format!("{}: cannot write pid file: {e}", p.display())))?;
    }
    let ready = Ready {
        backend,
        served_name,
        what: daemon.what().to_string(),
        file: file.clone(),
        mountpoint: a.mountpoint.clone(),
        threads: a.threads,
        parallel_direct_writes: opts.parallel_direct_writes,
        notify,
    };
    report_when_agreed(ready, negotiated, session.unmounter())?;
    let ran = session.run();
    shut_down(a, &mut daemon, trace.as_deref())?;
    ran.map_err(|e| Error::env(format!("FUSE session ended with an error: {e}")))?;
    Ok(0)
}
