//! The whole stack with real kernel parts: `nvstack serve` (FUSE) -> loop device -> ext4/xfs.
//!
//! Needs root, /dev/fuse, loop devices, e2fsprogs, xfsprogs and Debian's /usr/bin/python3
//! (scripts/test.sh installs them). Every test that mounts holds one lock, so they run one at
//! a time; every external command runs under `timeout` (the workload, which runs until it is
//! killed, under a deadline of its own); names come from mktemp-style unique directories; a
//! guard unmounts, detaches and stops everything on the way out, pass or fail, and another
//! kills the workload.

use nvstack_test_support::Watched;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static MOUNTS: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    MOUNTS.lock().unwrap_or_else(|e| e.into_inner())
}

fn bin() -> PathBuf {
    std::env::var_os("NVSTACK_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_nvstack")))
}

fn require_environment() {
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
fn sh(secs: u64, args: &[&str]) -> Output {
    Command::new("timeout")
        .arg("-k")
        .arg("5")
        .arg(secs.to_string())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {args:?}: {e}"))
}

fn ok(secs: u64, args: &[&str]) -> String {
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

fn is_mounted(dir: &Path) -> bool {
    let want = std::fs::canonicalize(dir).unwrap_or(dir.to_path_buf());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(want.to_str().unwrap()))
}

fn unique_dir(base: &str, tag: &str) -> PathBuf {
    tempfile::Builder::new()
        .prefix(&format!("nvstack-test-{tag}-"))
        .tempdir_in(base)
        .unwrap()
        .keep()
}

/// One served image, its loop device and its mounted file system; torn down on drop.
struct Stack {
    shm: PathBuf,
    tmp: PathBuf,
    image: PathBuf,
    fuse: PathBuf,
    mnt: PathBuf,
    stats: PathBuf,
    pid_file: PathBuf,
    log: PathBuf,
    loop_dev: Option<String>,
    fs: &'static str,
}

impl Stack {
    fn new(fs: &'static str, size: &str) -> Stack {
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
        };
        std::fs::create_dir_all(&s.fuse).unwrap();
        std::fs::create_dir_all(&s.mnt).unwrap();
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

    fn serve_cmd(&self, extra: &[&str]) -> Output {
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

    fn serve(&self, extra: &[&str]) {
        let o = self.serve_cmd(extra);
        assert!(
            o.status.success(),
            "serve failed: {}{}",
            String::from_utf8_lossy(&o.stderr),
            self.log_text()
        );
        assert!(self.fuse.join("disk").exists());
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn daemon_pid(&self) -> Option<u32> {
        std::fs::read_to_string(&self.pid_file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .filter(|p| Path::new(&format!("/proc/{p}")).exists())
    }

    fn attach(&mut self) -> String {
        let dev = ok(
            30,
            &[
                "losetup",
                "--find",
                "--show",
                "--sector-size",
                "4096",
                self.fuse.join("disk").to_str().unwrap(),
            ],
        );
        self.loop_dev = Some(dev.clone());
        dev
    }

    fn dev(&self) -> &str {
        self.loop_dev.as_deref().expect("attached")
    }

    fn mkfs(&self) {
        match self.fs {
            "ext4" => ok(120, &["mkfs.ext4", "-q", "-F", self.dev()]),
            _ => ok(120, &["mkfs.xfs", "-q", "-f", self.dev()]),
        };
    }

    fn mount(&self) {
        ok(60, &["mount", self.dev(), self.mnt.to_str().unwrap()]);
    }

    fn umount(&self) {
        if is_mounted(&self.mnt) {
            let o = sh(60, &["umount", self.mnt.to_str().unwrap()]);
            if !o.status.success() {
                sh(30, &["umount", "-l", self.mnt.to_str().unwrap()]);
            }
        }
    }

    fn detach(&mut self) {
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
    fn stop(&self) {
        self.stop_by_signal("TERM", 15);
    }

    /// Send SIGTERM or SIGINT to the daemon (which must run); it must unmount cleanly and end.
    fn stop_by_signal(&self, name: &str, number: i32) {
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
    fn stop_quietly(&self) {
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
    fn clean_after_death(&mut self) {
        self.umount();
        self.detach();
        if is_mounted(&self.fuse) {
            ok(30, &["umount", "-l", self.fuse.to_str().unwrap()]);
        }
    }

    /// Replay the journal, then the read-only check must be clean.
    fn replay_and_check(&self) {
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
        let _ = std::fs::remove_dir(&self.fuse);
        let _ = std::fs::remove_dir(&self.mnt);
        let _ = std::fs::remove_dir(&self.tmp);
    }
}

fn wait_gone(pid: u32) {
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
const WORKLOAD_LIMIT: Duration = Duration::from_secs(180);

/// Writes files into the mounted file system until it fails or is killed. Every eighth file
/// is fsynced, then its directory (the others are only pushed to the device); only then is it appended (and fsynced) to the manifest,
/// which lives outside the stack. Old files are never touched.
const WORKLOAD: &str = r#"
import hashlib, os, random, signal, sys
# A last resort if the test process itself dies: SIGALRM ends the workload.
signal.alarm(300)
root, manifest, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
rnd = random.Random(seed)
dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
m = open(manifest, "a")
i = 0
try:
    while True:
        i += 1
        name = "s%d_%d" % (seed, i)
        data = rnd.randbytes(rnd.randint(1, 192 * 1024))
        fd = os.open(os.path.join(root, name), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        os.write(fd, data)
        if i % 8 != 0:
            # Start writeback without waiting for it: the daemon acknowledges these
            # writes, and no fsync covers them until a later file's fsync.
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        else:
            os.fsync(fd)
            os.fsync(dfd)
            m.write("%s %d %s\n" % (name, len(data), hashlib.sha256(data).hexdigest()))
            m.flush()
            os.fsync(m.fileno())
        os.close(fd)
except OSError:
    pass
"#;

/// Every file in the manifest has exactly its recorded contents; prints how many.
const VERIFY: &str = r#"
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

fn python(script: &str, args: &[&str]) -> Command {
    let mut c = Command::new("/usr/bin/python3");
    c.arg("-c").arg(script).args(args);
    c
}

fn verify_and_clear(st: &Stack, manifest: &Path) -> usize {
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

fn read_stats(p: &Path) -> (u64, u64, u64) {
    let b = std::fs::read(p).unwrap();
    let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
    assert_eq!(&b[..8], b"NVSTATS1");
    // writes acked, fsync-covered, fsyncs
    (w(4), w(6), w(5))
}

/// Word 3 of the stats file: writes made durable (counted before each reply).
fn durable_writes(p: &Path) -> u64 {
    let b = std::fs::read(p).unwrap();
    assert_eq!(&b[..8], b"NVSTATS1");
    u64::from_le_bytes(b[24..32].try_into().unwrap())
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }
}

/// Kill cycles: the daemon is SIGKILLed (or its power cut) while the workload writes.
/// Returns (cycles, cycles that landed with acknowledged writes no fsync had covered,
/// fsynced files verified).
fn kill_cycles(
    fs: &'static str,
    cycles: u32,
    power_cut: Option<&str>,
    seed: u64,
) -> (u32, u32, usize) {
    // mkfs.xfs refuses file systems under 300 MB; ext4 power cuts run smaller (the simulated
    // region holds the image and logs every store in memory).
    let size = match (fs, power_cut) {
        ("xfs", _) => "320MiB",
        (_, Some(_)) => "96MiB",
        _ => "256MiB",
    };
    let mut st = Stack::new(fs, size);
    let manifest = st.shm.join("manifest");
    std::fs::write(&manifest, "").unwrap();
    st.serve(&[]);
    st.attach();
    st.mkfs();
    st.stop_after_clean_setup();
    let mut rng = Rng(seed | 1);
    let (mut landed, mut verified) = (0, 0);
    for c in 0..cycles {
        let cut = power_cut.map(|m| {
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
        verified += verify_and_clear(&st, &manifest);
        let mut workload = Watched::spawn(
            python(
                WORKLOAD,
                &[
                    st.mnt.to_str().unwrap(),
                    manifest.to_str().unwrap(),
                    &(seed * 1000 + c as u64).to_string(),
                ],
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
            WORKLOAD_LIMIT,
        );
        let pid = st.daemon_pid().expect("daemon running");
        match cut {
            None => {
                // A random moment, then the first instant (within 300 ms) at which the
                // daemon has acknowledged writes that no fsync covers: the kill must find
                // writes in flight, not an idle file system. The count is read again after
                // the kill, from the daemon's own counters.
                // The killer is started beforehand and waits on a pipe: a shell builtin
                // `kill` runs microseconds after the go, where forking `kill` takes
                // milliseconds, long enough for an fsync to cover the writes seen in flight.
                let mut killer = Command::new("sh")
                    .arg("-c")
                    .arg(format!("read go && kill -KILL {pid}"))
                    .stdin(Stdio::piped())
                    .spawn()
                    .unwrap();
                std::thread::sleep(Duration::from_millis(rng.range(150, 700)));
                let t = Instant::now();
                while t.elapsed() < Duration::from_millis(300) {
                    let (acked, covered, _) = read_stats(&st.stats);
                    if acked > covered {
                        break;
                    }
                    std::thread::sleep(Duration::from_micros(100));
                }
                killer.stdin.take().unwrap().write_all(b"go\n").unwrap();
                assert!(killer.wait().unwrap().success(), "kill failed");
            }
            Some(_) => {
                std::thread::sleep(Duration::from_millis(30));
                ok(10, &["kill", "-USR1", &pid.to_string()]);
                // Power goes at the daemon's own instant; wait for it.
                let t = Instant::now();
                while Path::new(&format!("/proc/{pid}")).exists()
                    && t.elapsed() < Duration::from_secs(60)
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
                assert!(
                    st.log_text().contains("power cut"),
                    "the daemon ended without a power cut:\n{}",
                    st.log_text()
                );
            }
        }
        wait_gone(pid);
        let (acked, covered, fsyncs) = read_stats(&st.stats);
        eprintln!(
            "{fs} cycle {c}: {acked} writes acknowledged, {covered} covered by {fsyncs} fsyncs"
        );
        if acked > covered {
            landed += 1;
        }
        // Reaped before the unmount: a live workload would keep the file system busy.
        workload.kill();
        st.clean_after_death();
    }
    // Final recovery and check after the last kill.
    st.serve(&[]);
    st.attach();
    st.replay_and_check();
    st.mount();
    verified += verify_and_clear(&st, &manifest);
    (cycles, landed, verified)
}

impl Stack {
    /// After mkfs: unmount nothing (not mounted), detach and stop cleanly.
    fn stop_after_clean_setup(&mut self) {
        self.detach();
        self.stop();
    }
}

#[test]
fn ext4_survives_daemon_kills() {
    let _g = serial();
    require_environment();
    let (cycles, landed, verified) = kill_cycles("ext4", 20, None, 11);
    eprintln!("ext4: {cycles} kills, {landed} with acknowledged writes not yet fsynced, {verified} fsynced files verified");
    assert!(
        landed >= 15,
        "only {landed} of {cycles} kills landed with unfsynced acknowledged writes"
    );
    assert!(verified > 0, "no fsynced file was ever verified");
}

#[test]
fn xfs_survives_daemon_kills() {
    let _g = serial();
    require_environment();
    let (cycles, landed, verified) = kill_cycles("xfs", 20, None, 23);
    eprintln!("xfs: {cycles} kills, {landed} with acknowledged writes not yet fsynced, {verified} fsynced files verified");
    assert!(
        landed >= 15,
        "only {landed} of {cycles} kills landed with unfsynced acknowledged writes"
    );
    assert!(verified > 0, "no fsynced file was ever verified");
}

/// Power cuts per fault model per file system.
const POWER_CUTS: u32 = 10;

#[test]
fn ext4_survives_power_cuts_m1_m2() {
    let _g = serial();
    require_environment();
    for (model, seed) in [("M1", 5), ("M2", 6)] {
        let (cycles, landed, verified) = kill_cycles("ext4", POWER_CUTS, Some(model), seed);
        eprintln!(
            "ext4 power cuts {model}: {cycles} cuts, {landed} with acknowledged writes not yet \
             fsynced, {verified} fsynced files verified"
        );
        assert!(
            landed * 2 > cycles,
            "ext4 {model}: only {landed} of {cycles} power cuts landed with unfsynced \
             acknowledged writes"
        );
        assert!(
            verified > 0,
            "no fsynced file was ever verified under {model}"
        );
    }
}

#[test]
fn xfs_survives_power_cuts_m1_m2() {
    let _g = serial();
    require_environment();
    for (model, seed) in [("M1", 7), ("M2", 8)] {
        let (cycles, landed, verified) = kill_cycles("xfs", POWER_CUTS, Some(model), seed);
        eprintln!(
            "xfs power cuts {model}: {cycles} cuts, {landed} with acknowledged writes not yet \
             fsynced, {verified} fsynced files verified"
        );
        assert!(
            landed * 2 > cycles,
            "xfs {model}: only {landed} of {cycles} power cuts landed with unfsynced \
             acknowledged writes"
        );
        assert!(
            verified > 0,
            "no fsynced file was ever verified under {model}"
        );
    }
}

/// Byte-level semantics of DIR/disk: unaligned reads and writes, the end of the file,
/// discard through fallocate (fstrim), SIGINT unmounts.
#[test]
fn serve_file_semantics_and_discard() {
    let _g = serial();
    require_environment();
    let mut st = Stack::new("ext4", "64MiB");
    st.serve(&["--threads", "2"]);
    let disk = st.fuse.join("disk");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&disk)
        .unwrap();
    let size = f.metadata().unwrap().len();
    assert!(size > 60 << 20 && size.is_multiple_of(4096));
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + 3) as u8).collect();
    f.write_all_at(&data, 4093).unwrap();
    f.write_all_at(&[0xAB; 3], 4095).unwrap();
    let mut back = vec![0u8; 10_010];
    f.read_exact_at(&mut back, 4090).unwrap();
    assert_eq!(&back[..3], &[0, 0, 0]);
    assert_eq!(&back[3..5], &data[..2]);
    assert_eq!(&back[5..8], &[0xAB; 3]);
    assert_eq!(&back[8..10_003], &data[5..]);
    // A 256 KiB write at an unaligned offset would touch 65 blocks: the kernel (told a
    // max_write of 63 blocks) sends it as several writes, each one atomic.
    // Counted by writes made durable: a write is counted durable before its reply, but
    // acknowledged only after it, so the acknowledged count may still lag here.
    let durable0 = durable_writes(&st.stats);
    let long: Vec<u8> = (0..262_144u32).map(|i| (i % 253) as u8).collect();
    f.write_all_at(&long, (5 << 20) + 4093).unwrap();
    let durable1 = durable_writes(&st.stats);
    assert!(
        durable1 - durable0 >= 2,
        "a 262,144-byte write at offset 4093 reached the daemon as {} write(s)",
        durable1 - durable0
    );
    let mut back_long = vec![0u8; long.len()];
    f.read_exact_at(&mut back_long, (5 << 20) + 4093).unwrap();
    assert!(
        back_long == long,
        "the long unaligned write did not read back"
    );
    assert!(!st.log_text().contains("refused"), "{}", st.log_text());
    // The last byte, then past the end.
    f.write_all_at(&[9], size - 1).unwrap();
    let mut one = [0u8; 8];
    assert_eq!(f.read_at(&mut one, size - 1).unwrap(), 1);
    assert_eq!(one[0], 9);
    assert_eq!(f.read_at(&mut one, size).unwrap(), 0);
    assert!(
        f.write_at(&[1, 2], size - 1).is_err(),
        "a write past the end must fail"
    );
    f.sync_all().unwrap();
    drop(f);
    // Through a loop device and ext4: fstrim reaches the daemon as discards.
    st.attach();
    st.mkfs();
    st.mount();
    let big = st.mnt.join("big");
    std::fs::write(&big, vec![0x5A; 8 << 20]).unwrap();
    ok(30, &["sync"]);
    std::fs::remove_file(&big).unwrap();
    ok(30, &["sync"]);
    let before = std::fs::read(&st.stats).unwrap();
    let discards_before = u64::from_le_bytes(before[56..64].try_into().unwrap());
    ok(60, &["fstrim", st.mnt.to_str().unwrap()]);
    let after = std::fs::read(&st.stats).unwrap();
    let discards_after = u64::from_le_bytes(after[56..64].try_into().unwrap());
    assert!(
        discards_after > discards_before,
        "fstrim sent no discard to the daemon"
    );
    st.umount();
    st.detach();
    // SIGINT unmounts cleanly (no lazy detach) and the daemon ends.
    st.stop_by_signal("INT", 2);
    // The image is clean afterwards.
    ok(
        60,
        &[bin().to_str().unwrap(), "check", st.image.to_str().unwrap()],
    );
}

/// SIGTERM unmounts cleanly, also after the file was used through a loop device and ext4;
/// `--backend raw` serves a plain file through the same path: data written through DIR/disk
/// (unaligned, across blocks, a maximal write) reads back through it, sits at the same offsets
/// of the image file (plain blocks, no map), survives a restart, and ext4 on it checks clean.
#[test]
fn raw_backend_serves_and_sigterm_unmounts() {
    let _g = serial();
    require_environment();
    let mut st = Stack::new("ext4", "64MiB");
    let size: u64 = 64 << 20;
    // A plain file of zeros, not an nvramdisk image (no --force needed).
    std::fs::remove_file(&st.image).unwrap();
    std::fs::File::create(&st.image)
        .unwrap()
        .set_len(size)
        .unwrap();
    st.serve(&["--backend", "raw", "--threads", "2"]);
    assert!(st.log_text().contains("(raw, "), "{}", st.log_text());
    let max_write = 63 * 4096;
    let pattern = |len: usize, k: u8| -> Vec<u8> {
        (0..len)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3] ^ k)
            .collect()
    };
    let pieces: Vec<(u64, Vec<u8>)> = vec![
        (4093, pattern(10_000, 1)),
        (1 << 20, pattern(4096, 2)),
        ((2 << 20) + 4093, pattern(max_write, 3)),
        ((8 << 20) + 1, pattern(1, 4)),
        (size - 5000, pattern(5000, 5)),
    ];
    let read_all = |what: &str| {
        let f = std::fs::File::open(st.fuse.join("disk")).unwrap();
        assert_eq!(f.metadata().unwrap().len(), size);
        for (off, data) in &pieces {
            let mut back = vec![0u8; data.len()];
            f.read_exact_at(&mut back, *off).unwrap();
            assert!(
                &back == data,
                "{what}: {} bytes at {off} differ",
                data.len()
            );
        }
    };
    {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(st.fuse.join("disk"))
            .unwrap();
        for (off, data) in &pieces {
            f.write_all_at(data, *off).unwrap();
        }
        f.sync_all().unwrap();
    }
    read_all("through the FUSE file");
    let img = std::fs::File::open(&st.image).unwrap();
    for (off, data) in &pieces {
        let mut back = vec![0u8; data.len()];
        img.read_exact_at(&mut back, *off).unwrap();
        assert!(
            &back == data,
            "{} bytes at {off} not in the image file",
            data.len()
        );
    }
    drop(img);
    let (acked, _, _) = read_stats(&st.stats);
    assert!(acked >= pieces.len() as u64, "{acked} writes acknowledged");
    st.stop();
    st.serve(&["--backend", "raw"]);
    read_all("after a restart");
    // ext4 through a loop device on the raw backend; SIGTERM after the loop let go.
    st.attach();
    st.mkfs();
    st.mount();
    let data = pattern(3 << 20, 6);
    std::fs::write(st.mnt.join("f"), &data).unwrap();
    st.umount();
    ok(120, &["e2fsck", "-fn", st.dev()]);
    st.mount();
    assert!(std::fs::read(st.mnt.join("f")).unwrap() == data);
    st.umount();
    st.detach();
    st.stop();
}

fn sha(p: &Path) -> String {
    ok(60, &["sha256sum", p.to_str().unwrap()])
}

fn expect_exit(o: &Output, code: i32, needle: &str) {
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

/// Unclean leftovers: clear errors with exit code 3, no hang, the image untouched.
#[test]
fn unclean_leftovers_are_refused() {
    let _g = serial();
    require_environment();
    let mut st = Stack::new("ext4", "64MiB");
    let b = bin();
    let b = b.to_str().unwrap();
    let img = st.image.to_str().unwrap().to_string();
    // A missing mount point.
    let missing = st.tmp.join("does-not-exist");
    let o = sh(
        30,
        &[b, "serve", &img, "--mountpoint", missing.to_str().unwrap()],
    );
    expect_exit(&o, 3, "does-not-exist");
    let o = sh(
        30,
        &[
            b,
            "up",
            "--image",
            &img,
            "--mount",
            missing.to_str().unwrap(),
        ],
    );
    expect_exit(&o, 3, "does-not-exist");
    // A loop device attached to the image itself.
    let h0 = sha(&st.image);
    let l = ok(30, &["losetup", "--find", "--show", &img]);
    let o = st.serve_cmd(&[]);
    ok(30, &["losetup", "-d", &l]);
    expect_exit(&o, 3, "loop device is attached");
    assert_eq!(sha(&st.image), h0, "a refused serve changed the image");
    // Served by another daemon.
    st.serve(&[]);
    let other = st.tmp.join("other");
    std::fs::create_dir_all(&other).unwrap();
    let o = sh(
        30,
        &[b, "serve", &img, "--mountpoint", other.to_str().unwrap()],
    );
    expect_exit(&o, 3, "locked");
    assert!(!is_mounted(&other));
    // A stale mount: the daemon is killed, its FUSE mount stays behind.
    let pid = st.daemon_pid().unwrap();
    ok(10, &["kill", "-KILL", &pid.to_string()]);
    wait_gone(pid);
    assert!(
        is_mounted(&st.fuse),
        "a killed daemon's mount should linger"
    );
    let h1 = sha(&st.image);
    let o = st.serve_cmd(&[]);
    expect_exit(&o, 3, "already mounted");
    assert_eq!(sha(&st.image), h1, "a refused serve changed the image");
    ok(30, &["umount", "-l", st.fuse.to_str().unwrap()]);
    let _ = std::fs::remove_dir(&other);
    // up/down: up twice is refused; after a daemon kill, down still cleans everything.
    st.serve(&[]);
    st.stop();
    let up_mnt = st.tmp.join("up");
    std::fs::create_dir_all(&up_mnt).unwrap();
    let up = |extra: &[&str]| {
        let mut a = vec![
            b,
            "up",
            "--image",
            &img,
            "--mount",
            up_mnt.to_str().unwrap(),
        ];
        a.extend_from_slice(extra);
        sh(180, &a)
    };
    let o = up(&[]);
    assert!(
        o.status.success(),
        "up: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = up(&[]);
    expect_exit(&o, 3, "already mounted");
    let state = std::fs::read_to_string(format!(
        "/run/nvstack/{}/state.json",
        std::fs::canonicalize(&up_mnt)
            .unwrap()
            .to_str()
            .unwrap()
            .trim_matches('/')
            .replace('/', "-")
    ))
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&state).unwrap();
    let dpid = v["daemon_pid"].as_u64().unwrap();
    ok(10, &["kill", "-KILL", &dpid.to_string()]);
    wait_gone(dpid as u32);
    let o = sh(120, &[b, "down", "--mount", up_mnt.to_str().unwrap()]);
    assert!(
        o.status.success(),
        "down after a kill: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!is_mounted(&up_mnt));
    let o = sh(30, &[b, "down", "--mount", up_mnt.to_str().unwrap()]);
    expect_exit(&o, 3, "nothing is up");
    // The image still serves and recovers.
    let o = up(&[]);
    assert!(
        o.status.success(),
        "up again: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = sh(120, &[b, "down", "--mount", up_mnt.to_str().unwrap()]);
    assert!(
        o.status.success(),
        "down: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let _ = std::fs::remove_dir(&up_mnt);
    st.loop_dev = None;
}

/// Bad arguments: exit 2 with a message, nothing mounted.
#[test]
fn serve_bad_arguments() {
    let _g = serial();
    require_environment();
    let st = Stack::new("ext4", "16MiB");
    let b = bin();
    let b = b.to_str().unwrap();
    let img = st.image.to_str().unwrap();
    let fuse = st.fuse.to_str().unwrap();
    for (args, needle) in [
        (vec!["--threads", "0"], "--threads"),
        (vec!["--threads", "65"], "--threads"),
        (vec!["--max-write", "1000"], "--max-write"),
        (vec!["--max-write", "1GiB"], "--max-write"),
        (vec!["--power-cut", "M7:1:1"], "fault model"),
        (vec!["--power-cut", "M1:x:1"], "seed"),
        (vec!["--backend", "raw"], "--force"),
    ] {
        let mut a = vec![b, "serve", img, "--mountpoint", fuse];
        a.extend_from_slice(&args);
        let o = sh(30, &a);
        expect_exit(&o, 2, needle);
        assert!(!is_mounted(&st.fuse), "{args:?} mounted something");
    }
    let junk = st.shm.join("junk");
    std::fs::File::create(&junk)
        .unwrap()
        .write_all(&[7u8; 8192])
        .unwrap();
    let o = sh(
        30,
        &[b, "serve", junk.to_str().unwrap(), "--mountpoint", fuse],
    );
    expect_exit(&o, 2, "junk");
    let o = sh(
        30,
        &[b, "up", "--image", img, "--size", "32MiB", "--mount", fuse],
    );
    expect_exit(&o, 2, "not the");
}
