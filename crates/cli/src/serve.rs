//! `nvstack serve`: the device as one FUSE file, `DIR/disk`, for a loop device to attach.
//!
//! Without `--foreground` the command starts itself again as the daemon (in a process group
//! of its own, so a terminal's ^C does not reach it), waits until the daemon reports that
//! `DIR/disk` exists (or why it could not), prints that, and exits. The daemon reports on a
//! pipe as one line: `ready <what it did>` or `error <exit code> <message>`.

use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::{Error, Result};
use nvstack_export::file::BlockFile;
use nvstack_export::fuse::{self, DiskFs, FuseOptions, MountOptions, DISK_NAME};
use nvstack_export::powercut::{PowerCut, PowerCutSpec};
use nvstack_export::raw::RawDevice;
use nvstack_export::stats::ServeStats;
use nvstack_nvramdisk::disk::{NvramDisk, OpenOptions};
use nvstack_nvramdisk::image::{open_image, peek};
use nvstack_pmem::{Access, MmapRegion};
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
    /// Transactions: every write atomic and durable (the default).
    Nvramdisk,
    /// Plain copies into the region, no transactions: the baseline.
    Raw,
}

#[derive(clap::Args, Clone, Debug)]
pub struct ServeArgs {
    /// The image (an nvramdisk image; with --backend raw, any file of whole 4 KiB pages).
    pub image: PathBuf,
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
    #[arg(long, value_enum, default_value_t = Backend::Nvramdisk)]
    pub backend: Backend,
    /// Mirror the daemon's counters into this file (on tmpfs); it outlives the daemon.
    #[arg(long)]
    pub stats: Option<PathBuf>,
    /// The daemon's log (its stderr); default: discarded once daemonised.
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// Do not ask for FOPEN_PARALLEL_DIRECT_WRITES (to measure what it brings).
    #[arg(long)]
    pub no_parallel_writes: bool,
    /// Largest write FUSE may send, bytes (default and maximum: 63 blocks, the longest write
    /// that touches at most 64 blocks, one atomic device write, at any offset).
    #[arg(long, value_parser = crate::size_arg)]
    pub max_write: Option<u64>,
    /// With --backend raw: serve a file that holds an nvramdisk image (destroys it).
    #[arg(long)]
    pub force: bool,
    /// Testing only: run on the simulated region and cut power DELAY_MS after the daemon
    /// receives SIGUSR1, MODEL:SEED:DELAY_MS (see crates/export/src/powercut.rs).
    #[arg(long, hide = true)]
    pub power_cut: Option<String>,
    /// Internal: the daemon half of a daemonised serve (report readiness on stdout).
    #[arg(long, hide = true)]
    pub notify_stdout: bool,
}

pub fn serve(a: ServeArgs) -> Result<i32> {
    if a.threads == 0 || a.threads > THREADS_MAX {
        return Err(Error::bad(format!(
            "--threads {}: must be between 1 and {THREADS_MAX}",
            a.threads
        )));
    }
    if let Some(s) = &a.power_cut {
        let spec = PowerCutSpec::parse(s)?;
        if a.backend != Backend::Nvramdisk {
            return Err(Error::bad("--power-cut needs --backend nvramdisk"));
        }
        let _ = spec;
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

/// The device, what opening it did, and the power cut when running on the simulated region.
type Opened = (Arc<dyn BlockDevice>, String, Option<Arc<PowerCut>>);

fn open_backend(a: &ServeArgs) -> Result<Opened> {
    match (a.backend, &a.power_cut) {
        (Backend::Nvramdisk, None) => {
            let d = open_image(&a.image, OpenOptions::default())?;
            let rep = d.recovery_report().clone();
            let what = if rep.was_clean() {
                "clean".to_string()
            } else {
                format!("recovered: {} redone, {} undone", rep.redone, rep.undone)
            };
            Ok((Arc::new(d), what, None))
        }
        (Backend::Nvramdisk, Some(s)) => {
            let pc = PowerCut::load(&a.image, PowerCutSpec::parse(s)?)?;
            let d = NvramDisk::open(pc.region(), OpenOptions::default())?;
            Ok((
                Arc::new(d),
                format!("simulated region, power cut {s}"),
                Some(pc),
            ))
        }
        (Backend::Raw, _) => {
            if peek(&a.image).is_ok() && !a.force {
                return Err(Error::bad(format!(
                    "{}: holds an nvramdisk image; --backend raw would overwrite it (pass --force)",
                    a.image.display()
                )));
            }
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&a.image)
                .map_err(|e| Error::env(format!("{}: cannot open: {e}", a.image.display())))?;
            match f.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(Error::env(format!(
                        "{}: image is locked by another process (another nvstack command or \
                         daemon has it open)",
                        a.image.display()
                    )))
                }
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(Error::env(format!(
                        "{}: cannot lock: {e}",
                        a.image.display()
                    )))
                }
            }
            let r = MmapRegion::map_file(f, &a.image, Access::Shared)?;
            Ok((Arc::new(RawDevice::new(Arc::new(r))?), "raw".into(), None))
        }
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

fn run_daemon(a: &ServeArgs, notify: bool) -> Result<i32> {
    check_mountpoint(&a.mountpoint)?;
    // A loop device on the image itself writes it behind the daemon's back (it takes no lock).
    let loops = loops_backed_by(&a.image);
    if !loops.is_empty() {
        return Err(Error::env(format!(
            "{}: a loop device is attached to the image itself ({}); detach it first \
             (`losetup -d`)",
            a.image.display(),
            loops.join(", ")
        )));
    }
    let (dev, what, power_cut) = open_backend(a)?;
    let file = Arc::new(BlockFile::new(dev));
    // The FUSE max_write the device's capabilities allow (63 blocks for nvramdisk and raw).
    let limit_max = file.write_bytes_max();
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
    let stats = Arc::new(ServeStats::new(a.stats.as_deref())?);
    let opts = FuseOptions {
        parallel_direct_writes: !a.no_parallel_writes,
        max_write_bytes: max_write as u32,
    };
    let uid =
        std::fs::metadata("/proc/self").map_or(0, |m| std::os::unix::fs::MetadataExt::uid(&m));
    let gid =
        std::fs::metadata("/proc/self").map_or(0, |m| std::os::unix::fs::MetadataExt::gid(&m));
    let fs = DiskFs::new(file.clone(), stats.clone(), opts, uid, gid);
    let mount_opts = MountOptions {
        fs_name: format!("nvstack:{}", a.image.display()),
        threads: a.threads,
    };
    let mut session = fuse::mount(fs, &a.mountpoint, &mount_opts)?;
    let mut unmounter = session.unmounter();
    let mountpoint = a.mountpoint.clone();
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGUSR1,
    ])
    .map_err(|e| Error::env(format!("cannot install signal handlers: {e}")))?;
    let cut_on_signal = power_cut.clone();
    let cut_stats = stats.clone();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if sig == signal_hook::consts::SIGUSR1 {
                    // Power-cut runs: the delay starts now (the test sends SIGUSR1 once its
                    // workload runs, so no cut lands in its recovery checks).
                    if let Some(pc) = &cut_on_signal {
                        eprintln!("nvstack serve: power cut armed");
                        let st = cut_stats.clone();
                        pc.arm_with(move || {
                            // After the delay, the first instant (within 300 ms) at which
                            // acknowledged writes wait for an fsync (the cut must find writes
                            // in flight, like the kill tests' SIGKILL), and the counters
                            // stop there: nothing is acknowledged after the cut.
                            let (s, hit) = st.freeze_when(
                                |s| s.acked_not_fsynced() > 0,
                                Duration::from_millis(300),
                            );
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
    if let Some(p) = &a.pid_file {
        std::fs::write(p, format!("{}\n", std::process::id()))
            .map_err(|e| Error::env(format!("{}: cannot write pid file: {e}", p.display())))?;
    }
    let msg = format!(
        "serving {} ({}, {} bytes, {what}) at {}/{DISK_NAME}: pid {}, {} threads, max write {} bytes{}",
        a.image.display(),
        match a.backend {
            Backend::Nvramdisk => "nvramdisk",
            Backend::Raw => "raw",
        },
        file.size_bytes(),
        a.mountpoint.display(),
        std::process::id(),
        a.threads,
        max_write,
        if opts.parallel_direct_writes {
            ", parallel direct writes"
        } else {
            ""
        }
    );
    if notify {
        report(&format!("ready {msg}"));
    } else {
        crate::say!("{msg}")?;
    }
    eprintln!("nvstack serve: {msg}");
    let ran = session.run();
    if let Some(pc) = &power_cut {
        pc.write_back_all()?;
    }
    let s = stats.snapshot();
    eprintln!(
        "nvstack serve: unmounted; {} writes, {} fsyncs, {} discards",
        s.writes_acked, s.fsyncs, s.discards
    );
    if let Some(p) = &a.pid_file {
        let _ = std::fs::remove_file(p);
    }
    ran.map_err(|e| Error::env(format!("FUSE session ended with an error: {e}")))?;
    Ok(0)
}
