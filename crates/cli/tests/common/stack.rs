//! The whole stack with real kernel parts, shared by tests/serve.rs (nvramdisk) and
//! tests/serve_ubj.rs (a UBJ cache): a served image, its loop device and file system (a guard
//! tears everything down), the workload that fsyncs and records files, the verifier, and the
//! kill and power-cut cycles.
//!
//! Needs root, /dev/fuse, loop devices, e2fsprogs, xfsprogs and Debian's /usr/bin/python3
//! (scripts/test.sh installs them). Every test that mounts holds one lock, so they run one at
//! a time; every external command runs under `timeout` (the workload, which runs until it is
//! killed, under a deadline of its own); names come from mktemp-style unique directories.
//!
//! Included by path (`#[path = "common/stack.rs"] mod stack;`), not through common/mod.rs, so
//! the other test files do not compile it; each of the two uses most of it, not all.
#![allow(dead_code)]

use nvstack_test_support::Watched;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static MOUNTS: Mutex<()> = Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    MOUNTS.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn bin() -> PathBuf {
    std::env::var_os("NVSTACK_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_nvstack")))
}

pub fn require_environment() {
    assert!(
        std::fs::metadata("/proc/self")
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
            .unwrap_or(false),
        "tests/serve.rs needs root (FUSE mounts, loop devices): run scripts/test.sh as root"
    );
    assert!(Path::new("/dev/fuse").exists(), "/dev/fuse is missing");
    for t in [
        "mkfs.ext4",
        "e2fsck",
        "mkfs.xfs",
        "xfs_repair",
        "losetup",
        "fstrim",
        "timeout",
    ] {
        assert!(
            Command::new("sh")
                .arg("-c")
                .arg(format!("command -v {t}"))
                .output()
                .unwrap()
                .status
                .success(),
            "{t} not found: scripts/test.sh installs e2fsprogs, xfsprogs, util-linux"
        );
    }
    assert!(
        Path::new("/usr/bin/python3").exists(),
        "/usr/bin/python3 missing"
    );
}

/// Run under `timeout`; returns the output whatever the status.
pub fn sh(secs: u64, args: &[&str]) -> Output {
    Command::new("timeout")
        .arg("-k")
        .arg("5")
        .arg(secs.to_string())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {args:?}: {e}"))
}

pub fn ok(secs: u64, args: &[&str]) -> String {
    let o = sh(secs, args);
    assert!(
        o.status.success(),
        "{args:?} failed ({}): {}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

pub fn is_mounted(dir: &Path) -> bool {
    let want = std::fs::canonicalize(dir).unwrap_or(dir.to_path_buf());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(want.to_str().unwrap()))
}

pub fn unique_dir(base: &str, tag: &str) -> PathBuf {
    tempfile::Builder::new()
        .prefix(&format!("nvstack-test-{tag}-"))
        .tempdir_in(base)
        .unwrap()
        .keep()
}

/// One served image, its loop device and its mounted file system; torn down on drop.
pub struct Stack {
    pub shm: PathBuf,
    pub tmp: PathBuf,
    pub image: PathBuf,
    pub fuse: PathBuf,
    pub mnt: PathBuf,
    pub stats: PathBuf,
    pub pid_file: PathBuf,
    pub log: PathBuf,
    pub loop_dev: Option<String>,
    pub fs: &'static str,
    /// A cache's backing file lives here (on the machine's disk), removed on drop.
    pub disk_dir: Option<PathBuf>,
    /// `mount -o` options of the file system (data=journal, ...).
    pub mount_opts: Option<String>,
}

impl Stack {
    /// The directories and names, no image yet.
    fn dirs(fs: &'static str) -> Stack {
        let shm = unique_dir("/dev/shm", fs);
        let tmp = unique_dir("/tmp", fs);
        let s = Stack {
            image: shm.join("img"),
            stats: shm.join("stats"),
            pid_file: shm.join("pid"),
            log: shm.join("serve.log"),
            fuse: tmp.join("fuse"),
            mnt: tmp.join("mnt"),
            shm,
            tmp,
            loop_dev: None,
            fs,
            disk_dir: None,
            mount_opts: None,
        };
        std::fs::create_dir_all(&s.fuse).unwrap();
        std::fs::create_dir_all(&s.mnt).unwrap();
        s
    }

    /// An nvramdisk image of `size` under /dev/shm.
    pub fn new(fs: &'static str, size: &str) -> Stack {
        let s = Stack::dirs(fs);
        ok(
            60,
            &[
                bin().to_str().unwrap(),
                "format",
                s.image.to_str().unwrap(),
                "--size",
                size,
            ],
        );
        s
    }

    /// A UBJ cache image of `nvram` bytes under /dev/shm over a new backing file of `backing`
    /// bytes on the machine's disk (/var/tmp), created with `settings`.
    pub fn new_cache(fs: &'static str, nvram: &str, backing: &str, settings: &[&str]) -> Stack {
        Stack::new_cache_of("ubj", fs, nvram, backing, settings)
    }

    /// The same with a write cache (`--cache write`).
    pub fn new_write_cache(
        fs: &'static str,
        nvram: &str,
        backing: &str,
        settings: &[&str],
    ) -> Stack {
        Stack::new_cache_of("write", fs, nvram, backing, settings)
    }

    fn new_cache_of(
        mode: &str,
        fs: &'static str,
        nvram: &str,
        backing: &str,
        settings: &[&str],
    ) -> Stack {
        let s = Stack::with_disk(fs);
        let mut args = vec![
            bin().to_str().unwrap().to_string(),
            "cache".into(),
            "create".into(),
            s.image.to_str().unwrap().into(),
            "--size".into(),
            nvram.into(),
            "--cache".into(),
            mode.into(),
            "--backing".into(),
            s.backing().to_str().unwrap().into(),
            "--backing-size".into(),
            backing.into(),
        ];
        args.extend(settings.iter().map(|a| a.to_string()));
        let refs: Vec<&str> = args.iter().map(|a| a.as_str()).collect();
        ok(60, &refs);
        s
    }

    /// The directories, and a directory for a backing file on the machine's disk.
    pub fn with_disk(fs: &'static str) -> Stack {
        let mut s = Stack::dirs(fs);
        s.disk_dir = Some(unique_dir("/var/tmp", fs));
        s
    }

    /// The cache's backing file.
    pub fn backing(&self) -> PathBuf {
        self.disk_dir
            .as_ref()
            .expect("a cache stack")
            .join("backing")
    }

    pub fn serve_cmd(&self, extra: &[&str]) -> Output {
        let mut args = vec![
            bin().to_str().unwrap().to_string(),
            "serve".into(),
            self.image.to_str().unwrap().into(),
            "--mountpoint".into(),
            self.fuse.to_str().unwrap().into(),
            "--pid-file".into(),
            self.pid_file.to_str().unwrap().into(),
            "--stats".into(),
            self.stats.to_str().unwrap().into(),
            "--log".into(),
            self.log.to_str().unwrap().into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let refs: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        sh(120, &refs)
    }

    pub fn serve(&self, extra: &[&str]) {
        let o = self.serve_cmd(extra);
        assert!(
            o.status.success(),
            "serve failed: {}{}",
            String::from_utf8_lossy(&o.stderr),
            self.log_text()
        );
        assert!(self.fuse.join("disk").exists());
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn daemon_pid(&self) -> Option<u32> {
        std::fs::read_to_string(&self.pid_file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .filter(|p| Path::new(&format!("/proc/{p}")).exists())
    }

    /// A loop device of 4 KiB sectors over DIR/disk, its requests capped as `nvstack up`
    /// caps them (each one FUSE write: crates/export/src/loopdev.rs).
    pub fn attach(&mut self) -> String {
        self.attach_sectors(4096, true)
    }

    /// A loop device of `sector_bytes` sectors; `limit`: cap its requests as `up` does.
    pub fn attach_sectors(&mut self, sector_bytes: u64, limit: bool) -> String {
        self.attach_with(sector_bytes, limit, false)
    }

    /// The same, in the loop device's direct-I/O mode when `direct_io`.
    pub fn attach_with(&mut self, sector_bytes: u64, limit: bool, direct_io: bool) -> String {
        let disk = self.fuse.join("disk");
        let sectors = sector_bytes.to_string();
        let mut args = vec!["losetup", "--find", "--show", "--sector-size", &sectors];
        if direct_io {
            args.push("--direct-io=on");
        }
        args.push(disk.to_str().unwrap());
        let dev = ok(30, &args);
        self.loop_dev = Some(dev.clone());
        // Set either way: a loop device keeps the limit of its last attachment.
        let kb = if limit {
            nvstack_export::loopdev::max_sectors_kb(sector_bytes, self.fuse_limits())
                .expect("a loop limit")
        } else {
            let p = nvstack_export::loopdev::max_sectors_kb_path(&dev).unwrap();
            let hw = p.with_file_name("max_hw_sectors_kb");
            std::fs::read_to_string(hw).unwrap().trim().parse().unwrap()
        };
        nvstack_export::loopdev::set_max_sectors_kb(&dev, kb).expect("max_sectors_kb set");
        dev
    }

    /// What the daemon's FUSE INIT agreed (its stats file, words 22 and 23).
    pub fn fuse_limits(&self) -> nvstack_export::loopdev::FuseLimits {
        let s = nvstack_export::stats::read_stats_file(&self.stats).expect("the stats file");
        assert!(s.fuse.max_pages > 0, "INIT agreed no limits: {s:?}");
        nvstack_export::loopdev::FuseLimits {
            max_write_bytes: s.fuse.max_write_bytes,
            max_pages: s.fuse.max_pages,
        }
    }

    pub fn dev(&self) -> &str {
        self.loop_dev.as_deref().expect("attached")
    }

    pub fn mkfs(&self) {
        match self.fs {
            "ext4" => ok(120, &["mkfs.ext4", "-q", "-F", self.dev()]),
            _ => ok(120, &["mkfs.xfs", "-q", "-f", self.dev()]),
        };
    }

    pub fn mount(&self) {
        match &self.mount_opts {
            Some(o) => ok(
                60,
                &["mount", "-o", o, self.dev(), self.mnt.to_str().unwrap()],
            ),
            None => ok(60, &["mount", self.dev(), self.mnt.to_str().unwrap()]),
        };
    }

    pub fn umount(&self) {
        if is_mounted(&self.mnt) {
            let o = sh(60, &["umount", self.mnt.to_str().unwrap()]);
            if !o.status.success() {
                sh(30, &["umount", "-l", self.mnt.to_str().unwrap()]);
            }
        }
    }

    pub fn detach(&mut self) {
        if let Some(d) = self.loop_dev.take() {
            sh(30, &["losetup", "-d", &d]);
            // Detach completes asynchronously; wait until the loop lets go.
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(20) {
                let b = std::fs::read_to_string(format!(
                    "/sys/block/{}/loop/backing_file",
                    d.trim_start_matches("/dev/")
                ));
                if b.is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Stop the daemon with SIGTERM and require a clean end: the daemon unmounted DIR by
    /// itself (no lazy detach, neither its own fallback nor ours) and ended.
    pub fn stop(&self) {
        self.stop_by_signal("TERM", 15);
    }

    /// Send SIGTERM or SIGINT to the daemon (which must run); it must unmount cleanly and end.
    pub fn stop_by_signal(&self, name: &str, number: i32) {
        let pid = self.daemon_pid().expect("a daemon to stop");
        let from = self.log_text().len();
        ok(10, &["kill", &format!("-{name}"), &pid.to_string()]);
        wait_gone(pid);
        let log = self.log_text();
        let log = log.get(from..).unwrap_or("");
        assert!(
            !is_mounted(&self.fuse),
            "SIG{name} left the FUSE mount {} behind; daemon log: {log}",
            self.fuse.display()
        );
        assert!(
            log.contains(&format!("signal {number}: unmounting")),
            "the daemon did not log SIG{name}: {log}"
        );
        assert!(
            !log.contains("detaching lazily"),
            "SIG{name} did not unmount cleanly (lazy detach): {log}"
        );
        assert!(
            log.contains("unmounted;"),
            "the daemon's session did not end after SIG{name}: {log}"
        );
    }

    /// For the guard: SIGTERM if a daemon runs, wait (bounded, no assertion), and detach
    /// whatever mount is left lazily.
    pub fn stop_quietly(&self) {
        if let Some(pid) = self.daemon_pid() {
            sh(10, &["kill", "-TERM", &pid.to_string()]);
            let t = Instant::now();
            while Path::new(&format!("/proc/{pid}")).exists()
                && t.elapsed() < Duration::from_secs(30)
            {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if is_mounted(&self.fuse) {
            sh(30, &["umount", "-l", self.fuse.to_str().unwrap()]);
        }
    }

    /// After the daemon died (killed or power cut): unmount the file system, detach the loop
    /// device, and detach the dead FUSE mount.
    pub fn clean_after_death(&mut self) {
        self.umount();
        self.detach();
        if is_mounted(&self.fuse) {
            ok(30, &["umount", "-l", self.fuse.to_str().unwrap()]);
        }
    }

    /// Replay the journal, then the read-only check must be clean.
    pub fn replay_and_check(&self) {
        match self.fs {
            "ext4" => {
                let o = sh(120, &["e2fsck", "-E", "journal_only", "-y", self.dev()]);
                let code = o.status.code().unwrap_or(-1);
                assert!(
                    code == 0 || code == 1,
                    "journal replay failed ({code}): {}",
                    String::from_utf8_lossy(&o.stdout)
                );
                let o = sh(120, &["e2fsck", "-fn", self.dev()]);
                assert!(
                    o.status.success(),
                    "e2fsck -fn after replay: {}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
            }
            _ => {
                self.mount();
                self.umount();
                let o = sh(300, &["xfs_repair", "-n", self.dev()]);
                assert!(
                    o.status.success(),
                    "xfs_repair -n after replay: {}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
            }
        }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.umount();
        self.detach();
        self.stop_quietly();
        let _ = std::fs::remove_dir_all(&self.shm);
        if let Some(d) = &self.disk_dir {
            let _ = std::fs::remove_dir_all(d);
        }
        let _ = std::fs::remove_dir(&self.fuse);
        let _ = std::fs::remove_dir(&self.mnt);
        let _ = std::fs::remove_dir(&self.tmp);
    }
}

pub fn wait_gone(pid: u32) {
    let t = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() && t.elapsed() < Duration::from_secs(30) {
        // A zombie child of ours would never go: the daemon is not our child (it was
        // started by `serve`, which exited), so /proc/<pid> disappears when it ends.
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "daemon {pid} did not end"
    );
}

/// The workload's deadline: it is killed after every cycle, long before.
pub const WORKLOAD_LIMIT: Duration = Duration::from_secs(180);

/// Writes files into the mounted file system until it fails or is killed. Every eighth file
/// is fsynced, then its directory (the others are only pushed to the device); only then is it
/// appended (and fsynced) to the manifest, which lives outside the stack. Fsynced files are
/// never touched again.
///
/// Two rules keep the manifest honest: a file is recorded only when every byte of it was
/// written (`os.write` may write less than asked, without an error, when the file system
/// fills: a short file recorded with its full length would read as a lost write), and the
/// file system is never let fill up: below a quarter free, the oldest files that were never
/// fsynced are deleted first (a full file system would also end the workload early, so the
/// kill would find it idle).
pub const WORKLOAD: &str = r#"
import collections, hashlib, os, random, signal, sys
# A last resort if the test process itself dies: SIGALRM ends the workload.
signal.alarm(300)
root, manifest, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
rnd = random.Random(seed)
dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
m = open(manifest, "a")
unsynced = collections.deque()
def room():
    v = os.statvfs(root)
    while v.f_bavail * 4 < v.f_blocks and unsynced:
        os.unlink(os.path.join(root, unsynced.popleft()))
        v = os.statvfs(root)
    return v.f_bavail * 4 >= v.f_blocks
def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
i = 0
try:
    while room():
        i += 1
        name = "s%d_%d" % (seed, i)
        data = rnd.randbytes(rnd.randint(1, 192 * 1024))
        fd = os.open(os.path.join(root, name), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        write_all(fd, data)
        if i % 8 != 0:
            # Start writeback without waiting for it: the daemon acknowledges these
            # writes, and no fsync covers them until a later file's fsync.
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            unsynced.append(name)
        else:
            os.fsync(fd)
            os.fsync(dfd)
            m.write("%s %d %s\n" % (name, len(data), hashlib.sha256(data).hexdigest()))
            m.flush()
            os.fsync(m.fileno())
        os.close(fd)
    print("workload: the file system is three quarters full of fsynced files", file=sys.stderr)
except OSError as e:
    print("workload ended: %s" % e, file=sys.stderr)
"#;

/// Every file in the manifest has exactly its recorded contents; prints how many.
pub const VERIFY: &str = r#"
import hashlib, os, sys
root, manifest = sys.argv[1], sys.argv[2]
bad, n = [], 0
for line in open(manifest):
    name, size, digest = line.split()
    n += 1
    p = os.path.join(root, name)
    try:
        data = open(p, "rb").read()
    except OSError as e:
        bad.append("%s: %s" % (name, e)); continue
    if len(data) != int(size) or hashlib.sha256(data).hexdigest() != digest:
        bad.append("%s: %d bytes, expected %s" % (name, len(data), size))
for b in bad:
    print("BAD", b)
print("checked", n)
sys.exit(1 if bad else 0)
"#;

pub fn python(script: &str, args: &[&str]) -> Command {
    let mut c = Command::new("/usr/bin/python3");
    c.arg("-c").arg(script).args(args);
    c
}

pub fn verify_and_clear(st: &Stack, manifest: &Path) -> usize {
    let o = sh(
        300,
        &[
            "/usr/bin/python3",
            "-c",
            VERIFY,
            st.mnt.to_str().unwrap(),
            manifest.to_str().unwrap(),
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    if !o.status.success() {
        let log = st.log_text();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        let dmesg = sh(10, &["dmesg"]);
        let d = String::from_utf8_lossy(&dmesg.stdout).to_string();
        let dtail: Vec<&str> = d.lines().rev().take(20).collect();
        panic!(
            "verify failed ({}; 124 or a signal: timed out): fsynced files lost or wrong after \
             recovery:\n{out}\n{}\ndaemon log (last lines, newest \
             first):\n{}\nkernel (newest first):\n{}",
            o.status,
            String::from_utf8_lossy(&o.stderr),
            tail.join("\n"),
            dtail.join("\n")
        );
    }
    let n: usize = out
        .lines()
        .last()
        .and_then(|l| l.strip_prefix("checked "))
        .and_then(|s| s.parse().ok())
        .expect("verify prints a count");
    // Start the next cycle with an empty file system (so it never fills up).
    for e in std::fs::read_dir(&st.mnt).unwrap().flatten() {
        let p = e.path();
        if e.file_name().to_string_lossy().starts_with('s') {
            std::fs::remove_file(p).unwrap();
        }
    }
    ok(60, &["sync", "-f", st.mnt.to_str().unwrap()]);
    std::fs::write(manifest, "").unwrap();
    n
}

pub fn read_stats(p: &Path) -> (u64, u64, u64) {
    let b = std::fs::read(p).unwrap();
    let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
    assert_eq!(&b[..8], b"NVSTATS1");
    // writes acked, fsync-covered, fsyncs
    (w(4), w(6), w(5))
}

/// Word 3 of the stats file: writes made durable (counted before each reply).
pub fn durable_writes(p: &Path) -> u64 {
    let b = std::fs::read(p).unwrap();
    assert_eq!(&b[..8], b"NVSTATS1");
    u64::from_le_bytes(b[24..32].try_into().unwrap())
}

pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }
}

/// Words of the daemon's stats file (crates/export/src/stats.rs, version 4): 0 magic .. 25.
pub const STATS_WORDS: usize = 26;
pub const W_ACKED: usize = 4;
pub const W_FSYNCS: usize = 5;
pub const W_COVERED: usize = 6;
/// The cache's kind: 1 UBJ, 2 write cache.
pub const W_IS_CACHE: usize = 8;
pub const W_DIRTY: usize = 9;
pub const W_COMMITS: usize = 11;
pub const W_CHECKPOINTS: usize = 12;
pub const W_CHECKPOINTING: usize = 13;
/// A write cache's used slots (word 10), destages by trigger (14-18: room, watermark,
/// max-age, cleaner, writeback), bypassed blocks (19).
pub const W_USED_SLOTS: usize = 10;
pub const W_DESTAGED_ROOM: usize = 14;
pub const W_DESTAGED_MAX_AGE: usize = 16;
pub const W_BYPASSED: usize = 19;

/// Every word of the stats file (the daemon may be dead).
pub fn stats_words(p: &Path) -> Vec<u64> {
    let b = std::fs::read(p).unwrap();
    assert_eq!(&b[..8], b"NVSTATS1");
    let w: Vec<u64> = (0..STATS_WORDS)
        .map(|i| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap()))
        .collect();
    assert_eq!(w[1], 4, "stats file version");
    w
}

/// How the cycles of [`kill_cycles`] kill the daemon.
pub struct KillPlan<'a> {
    pub cycles: u32,
    /// `M1` or `M2`: power cuts (`--power-cut`) instead of SIGKILLs.
    pub power_cut: Option<&'a str>,
    pub seed: u64,
    /// After the random delay, a SIGKILL waits (at most `wait`) for the first instant at which
    /// this holds of the stats words; given the cycle's number.
    pub target: &'a dyn Fn(u32, &[u64]) -> bool,
    pub wait: Duration,
}

/// Run the plan's cycles on `st`, whose file system is made ([`Stack::make_fs`]) and which is
/// not served: serve (recovery), attach, replay the journal and check, mount, verify every
/// fsynced file, run the workload, kill the daemon or cut its power; a last recovery and
/// check after the last cycle. Returns the stats words read after each death and the
/// fsynced files verified.
pub fn kill_cycles(st: &mut Stack, plan: &KillPlan) -> (Vec<Vec<u64>>, usize) {
    let manifest = st.shm.join("manifest");
    std::fs::write(&manifest, "").unwrap();
    let mut rng = Rng(plan.seed | 1);
    let (mut after, mut verified) = (Vec::new(), 0);
    for c in 0..plan.cycles {
        let cut = plan.power_cut.map(|m| {
            // The cut comes this long after the daemon gets SIGUSR1, sent once the workload
            // runs (never during the recovery checks).
            format!("{m}:{}:{}", rng.next() % 1000, rng.range(50, 900))
        });
        match &cut {
            Some(spec) => st.serve(&["--power-cut", spec]),
            None => st.serve(&[]),
        }
        st.attach();
        st.replay_and_check();
        st.mount();
        verified += verify_and_clear(st, &manifest);
        let mut workload = Watched::spawn(
            python(
                WORKLOAD,
                &[
                    st.mnt.to_str().unwrap(),
                    manifest.to_str().unwrap(),
                    &(plan.seed * 1000 + c as u64).to_string(),
                ],
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
            WORKLOAD_LIMIT,
        );
        let pid = st.daemon_pid().expect("daemon running");
        match cut {
            None => kill_at_target(st, pid, &mut rng, plan, c),
            Some(_) => cut_power(st, pid),
        }
        wait_gone(pid);
        let w = stats_words(&st.stats);
        eprintln!(
            "{} cycle {c}: {} writes acknowledged, {} covered by {} fsyncs; cache: {} dirty \
             blocks, {} commits, {} checkpoints, checkpoint running {}",
            st.fs,
            w[W_ACKED],
            w[W_COVERED],
            w[W_FSYNCS],
            w[W_DIRTY],
            w[W_COMMITS],
            w[W_CHECKPOINTS],
            w[W_CHECKPOINTING]
        );
        after.push(w);
        // Reaped before the unmount: a live workload would keep the file system busy.
        workload.kill();
        st.clean_after_death();
    }
    // Final recovery and check after the last kill.
    st.serve(&[]);
    st.attach();
    st.replay_and_check();
    st.mount();
    verified += verify_and_clear(st, &manifest);
    st.umount();
    st.detach();
    st.stop();
    (after, verified)
}

/// A random moment, then the first instant (within the plan's wait) at which the target
/// holds: the kill must find the state the test asks for, not an idle file system. When the
/// words show it, the daemon is stopped (SIGSTOP) and the words read again while it cannot
/// change them: still there, SIGKILL; gone (a commit came between the read and the stop),
/// SIGCONT and look again. Why: a UBJ commit clears the dirty blocks within microseconds of an
/// fsync, faster than a signal follows a read. The signals come from one shell started
/// beforehand that reads them from a pipe (a builtin `kill` runs microseconds after the word,
/// forking `kill` takes milliseconds).
fn kill_at_target(st: &Stack, pid: u32, rng: &mut Rng, plan: &KillPlan, c: u32) {
    let mut killer = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "while read sig; do kill -$sig {pid}; [ $sig = KILL ] && exit 0; done"
        ))
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to = killer.stdin.take().unwrap();
    std::thread::sleep(Duration::from_millis(rng.range(150, 700)));
    let t = Instant::now();
    while t.elapsed() < plan.wait {
        if (plan.target)(c, &stats_words(&st.stats)) {
            to.write_all(b"STOP\n").unwrap();
            wait_stopped(pid);
            if (plan.target)(c, &stats_words(&st.stats)) {
                break;
            }
            to.write_all(b"CONT\n").unwrap();
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    to.write_all(b"KILL\n").unwrap();
    drop(to);
    assert!(killer.wait().unwrap().success(), "kill failed");
}

/// Wait (at most 2 s) until every thread of `pid` is stopped.
fn wait_stopped(pid: u32) {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(2) {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return;
        };
        let all = tasks.flatten().all(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            // The state follows the command name's closing parenthesis.
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            state.starts_with('T') || state.starts_with('t')
        });
        if all {
            return;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// Arm the daemon's power cut (SIGUSR1) and wait for it to end with one.
fn cut_power(st: &Stack, pid: u32) {
    std::thread::sleep(Duration::from_millis(30));
    ok(10, &["kill", "-USR1", &pid.to_string()]);
    // Power goes at the daemon's own instant; wait for it.
    let t = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() && t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        st.log_text().contains("power cut"),
        "the daemon ended without a power cut:\n{}",
        st.log_text()
    );
}

impl Stack {
    /// Serve, attach, make the file system, then detach and stop cleanly.
    pub fn make_fs(&mut self) {
        self.serve(&[]);
        self.attach();
        self.mkfs();
        self.detach();
        self.stop();
    }
}

pub fn sha(p: &Path) -> String {
    ok(60, &["sha256sum", p.to_str().unwrap()])
}

pub fn expect_exit(o: &Output, code: i32, needle: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        o.status.code(),
        Some(code),
        "expected exit {code}, got {}: {err}",
        o.status
    );
    assert!(
        err.contains(needle),
        "message should mention '{needle}': {err}"
    );
}
