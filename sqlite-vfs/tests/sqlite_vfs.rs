//! The `nvstack` SQLite VFS (sqlite-vfs/, a loadable extension) driven through stock SQLite:
//! the `sqlite3` command-line tool and Debian's /usr/bin/python3 (tests/sqlite_vfs_child.py).
//! Nothing in this crate links SQLite.
//!
//! The extension is found through NVSTACK_SQLITE_EXT (scripts/test.sh sets it after building
//! the workspace); without it, it is built here with cargo. Regions live under /dev/shm in
//! unique temporary directories, databases in unique directories on the machine's disk; both
//! are removed when a test ends.
//!
//! - kill cycles: a child committing single-row transactions (WAL, synchronous=FULL) is
//!   SIGKILLed at random moments; after every kill, every transaction it reported committed
//!   is there and `PRAGMA integrity_check` is ok (also in the rollback journal modes);
//! - power cuts: the same with the region on the simulated region, power cut at a random
//!   instant, restarting from M1 and M2 crash images;
//! - no -wal or -journal file ever appears in the database's directory (WAL, DELETE, TRUNCATE,
//!   PERSIST), checked inside transactions;
//! - the `sqlite3` tool's `.load`; SQLITE_BUSY for a second process; SQLITE_FULL when the WAL
//!   outgrows a small region; bad URI parameters and foreign regions give clear errors.
//!
//! Every child process runs under a deadline ([`Watched`]: killed when it passes, and when
//! the test panics), so a hung child fails the test instead of hanging it.

use nvstack_test_support::Watched;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

const PYTHON: &str = "/usr/bin/python3";
const SQLITE3: &str = "sqlite3";
/// The deadline of a child that should end by itself (a check, an open, a workload).
const CHILD_LIMIT: Duration = Duration::from_secs(120);

/// Run `cmd` to its end under [`CHILD_LIMIT`], feeding it `input` on stdin; its output.
fn output(cmd: &mut Command, input: Option<&[u8]>) -> Output {
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut w = Watched::spawn(cmd, CHILD_LIMIT);
    let read = |r: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut b = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut b);
            }
            b
        })
    };
    let out = read(w.child.stdout.take().map(|r| Box::new(r) as _));
    let err = read(w.child.stderr.take().map(|r| Box::new(r) as _));
    if let (Some(mut i), Some(input)) = (w.child.stdin.take(), input) {
        let _ = i.write_all(input);
    }
    let status = w.wait();
    let o = Output {
        status,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    };
    if status.code().is_none() {
        panic!(
            "{cmd:?} did not end by itself within {:?} ({status})\nstdout: {}\nstderr: {}",
            w.limit,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    o
}

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The extension the tests load, built with the feature `powercut` (the URI parameter
/// powercut=): $NVSTACK_SQLITE_EXT, or built now. Missing: the test fails, never skips.
fn ext() -> &'static Path {
    &exts().0
}

/// The shipped extension (no feature `powercut`): $NVSTACK_SQLITE_EXT_SHIPPED, or built now.
fn shipped_ext() -> &'static Path {
    &exts().1
}

/// Both builds: from the environment (scripts/test.sh builds them), or built here one after
/// the other (one cargo output path, so the shipped one is copied aside first).
fn exts() -> &'static (PathBuf, PathBuf) {
    static EXTS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    EXTS.get_or_init(|| {
        let from_env = |var: &str| {
            std::env::var_os(var).map(|p| {
                let p = PathBuf::from(p);
                assert!(
                    p.is_file(),
                    "{var}={} is not a file (scripts/test.sh builds it)",
                    p.display()
                );
                p
            })
        };
        match (
            from_env("NVSTACK_SQLITE_EXT"),
            from_env("NVSTACK_SQLITE_EXT_SHIPPED"),
        ) {
            (Some(t), Some(s)) => (t, s),
            _ => build_both(),
        }
    })
}

fn build_ext(features: &[&str]) -> PathBuf {
    let status = Command::new(env!("CARGO"))
        .args(["build", "--release", "-p", "nvstack-sqlite"])
        .args(features)
        .current_dir(manifest())
        .status()
        .expect("run cargo to build the SQLite extension");
    assert!(
        status.success(),
        "cargo build -p nvstack-sqlite {features:?} failed"
    );
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest().join("../target"));
    let p = target.join("release/libnvstack_sqlite.so");
    assert!(p.is_file(), "{} is missing after the build", p.display());
    p
}

fn build_both() -> (PathBuf, PathBuf) {
    let built = build_ext(&[]);
    let shipped = built.with_file_name("shipped").join("libnvstack_sqlite.so");
    std::fs::create_dir_all(shipped.parent().unwrap()).unwrap();
    std::fs::copy(&built, &shipped).unwrap();
    (build_ext(&["--features", "powercut"]), shipped)
}

fn child_script() -> PathBuf {
    manifest().join("tests/sqlite_vfs_child.py")
}

/// A database directory on the machine's disk and a region directory under /dev/shm, both
/// unique and removed on drop.
struct Scratch {
    db_dir: tempfile::TempDir,
    shm_dir: tempfile::TempDir,
}

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let db_dir = tempfile::Builder::new()
            .prefix(&format!("nvstack-vfs-{tag}-"))
            .tempdir_in(std::env::temp_dir())
            .expect("temporary database directory");
        let shm_dir = tempfile::Builder::new()
            .prefix(&format!("nvstack-vfs-{tag}-"))
            .tempdir_in("/dev/shm")
            .expect("temporary directory under /dev/shm");
        Scratch { db_dir, shm_dir }
    }
    fn db(&self) -> String {
        self.db_dir.path().join("test.db").display().to_string()
    }
    fn region(&self) -> String {
        self.shm_dir.path().join("region.img").display().to_string()
    }
}

fn child(db: &str, region: &str, mode: &str, args: &[&str]) -> Command {
    let mut c = Command::new(PYTHON);
    c.arg(child_script())
        .arg(ext())
        .arg(db)
        .arg(region)
        .arg(mode)
        .args(args);
    c
}

/// Run a child to completion; its JSON lines.
fn run(db: &str, region: &str, mode: &str, args: &[&str]) -> Vec<Value> {
    let out = output(&mut child(db, region, mode, args), None);
    assert!(
        out.status.success(),
        "child {mode} {args:?} failed: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    json_lines(&out.stdout)
}

fn json_lines(b: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(b)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad child line {l:?}: {e}")))
        .collect()
}

/// Journal files must never reach the file system.
fn assert_no_journal_files(names: &[Value], context: &str) {
    for n in names {
        let n = n.as_str().expect("file name");
        assert!(
            !(n.contains("-wal") || n.contains("-journal") || n.contains("-mj")),
            "{context}: journal file {n} appeared in the database directory"
        );
    }
}

/// What one committing child did before it died.
struct Cycle {
    start: i64,
    committed: Vec<i64>,
    listings: usize,
    /// The region held a journal or WAL with content when the child opened the database:
    /// SQLite recovered from it.
    recovered: bool,
    status: std::process::ExitStatus,
}

/// Run a committing child (pausing `pace_us` after each commit) until it dies: killed
/// (SIGKILL) after `kill_after`, or, when `kill_after` is None, until it ends by itself (a
/// power cut) within a minute.
fn commit_cycle(
    s: &Scratch,
    journal_mode: &str,
    extra: &str,
    pace_us: u64,
    kill_after: Option<Duration>,
) -> Cycle {
    let pace = pace_us.to_string();
    // Killed by the test (or its power cut) long before the deadline.
    let mut ch = Watched::spawn(
        child(
            &s.db(),
            &s.region(),
            "commit",
            &[journal_mode, extra, &pace],
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped()),
        Duration::from_secs(90),
    );
    let stdout = ch.child.stdout.take().expect("stdout");
    let stderr = ch.child.stderr.take().expect("stderr");
    let seen = Arc::new(Mutex::new((None::<i64>, Vec::new(), 0usize, false)));
    let s2 = seen.clone();
    let db = s.db();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                // A line cut short by the kill: nothing was reported by it.
                continue;
            };
            let mut g = s2.lock().unwrap();
            if let Some(id) = v.get("committed").and_then(Value::as_i64) {
                g.1.push(id);
            } else if let Some(id) = v.get("start").and_then(Value::as_i64) {
                g.0 = Some(id);
                // A journal or WAL with content in the region before SQLite opened it.
                g.3 = has_content(&v["at_open"]);
            } else if let Some(f) = v.get("files").and_then(Value::as_array) {
                assert_no_journal_files(f, &format!("{db} inside a transaction"));
                g.2 += 1;
            }
        }
    });
    let err_reader = std::thread::spawn(move || {
        let mut e = String::new();
        let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut e);
        e
    });
    let status = match kill_after {
        Some(d) => {
            // The delay counts from the child's start line (the database open), not from the
            // spawn: Python's start-up alone can take longer than the delay on a loaded machine,
            // and a kill before the first commit checks nothing.
            let t0 = Instant::now();
            while seen.lock().unwrap().0.is_none()
                && ch.try_wait().is_none()
                && t0.elapsed() < Duration::from_secs(30)
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(d);
            ch.kill() // SIGKILL, and reaped: the region's lock is free again
        }
        None => {
            let t0 = Instant::now();
            loop {
                if let Some(st) = ch.try_wait() {
                    break st;
                }
                if t0.elapsed() > Duration::from_secs(60) {
                    ch.kill();
                    panic!("the power cut did not end the child within a minute");
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    };
    reader.join().expect("stdout reader");
    let err = err_reader.join().expect("stderr reader");
    let g = seen.lock().unwrap();
    let start = g.0.unwrap_or_else(|| {
        // Killed before it opened the database (python start-up is slow): nothing to check.
        assert!(
            g.1.is_empty(),
            "commits reported before the start line; stderr: {err}"
        );
        -1
    });
    if kill_after.is_none() {
        assert!(
            status.code() == Some(nvstack_stack::powercut::POWER_CUT_EXIT),
            "child ended with {status}, not the power-cut exit code; stderr: {err}"
        );
    }
    Cycle {
        start,
        committed: g.1.clone(),
        listings: g.2,
        recovered: g.3,
        status,
    }
}

/// Open the database after a crash (recovery runs) and check it: every reported commit is
/// there, the ids are exactly 1..=max (no hole: a lost commit would leave one), and the
/// integrity check passes. Returns whether the region held a journal or WAL with content to
/// recover from.
fn check_db(s: &Scratch, reported: &BTreeSet<i64>, context: &str) -> bool {
    let out = run(&s.db(), &s.region(), "check", &[]);
    let doc = &out[0];
    let ids: Vec<i64> = doc["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|v| v.as_i64().expect("id"))
        .collect();
    assert_eq!(doc["integrity"], "ok", "{context}: integrity_check");
    let present: BTreeSet<i64> = ids.iter().copied().collect();
    let missing: Vec<_> = reported.difference(&present).take(10).collect();
    assert!(
        missing.is_empty(),
        "{context}: committed transactions lost: {missing:?} (of {} reported)",
        reported.len()
    );
    let max = ids.last().copied().unwrap_or(0);
    assert_eq!(
        ids.len() as i64,
        max,
        "{context}: ids are not exactly 1..={max}"
    );
    assert_no_journal_files(doc["files"].as_array().expect("files"), context);
    assert_no_journal_files(out[1]["closed_files"].as_array().expect("files"), context);
    has_content(&doc["at_open"])
}

/// A journal or WAL with content in a child's `at_open` list.
fn has_content(files: &Value) -> bool {
    files.as_array().is_some_and(|fs| {
        fs.iter()
            .any(|f| f["size_bytes"].as_u64().is_some_and(|n| n > 0))
    })
}

/// Create the database (WAL) and its region (16 MiB).
fn create(s: &Scratch) {
    let out = output(
        &mut child(&s.db(), &s.region(), "open", &["&region_size=16MiB"]),
        None,
    );
    let v = json_lines(&out.stdout);
    assert_eq!(v[0]["ok"], true, "create: {v:?}");
}

fn kill_cycles(tag: &str, modes: &[&str], cycles: usize, seed: u64) {
    let s = Scratch::new(tag);
    create(&s);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut reported = BTreeSet::new();
    let (mut landed, mut listings, mut recovered) = (0, 0, 0);
    for i in 0..cycles {
        let mode = modes[i % modes.len()];
        let delay = Duration::from_millis(rng.gen_range(60..400));
        let c = commit_cycle(&s, mode, "", 0, Some(delay));
        assert!(!c.status.success(), "the child was killed");
        let context = format!("{tag} cycle {i} ({mode}, killed after {delay:?}, seed {seed})");
        if c.start >= 0 {
            // The child read the database first: everything reported so far was there.
            let max_before = reported.iter().next_back().copied().unwrap_or(0);
            assert!(
                c.start > max_before,
                "{context}: started at id {} but {max_before} was committed",
                c.start
            );
        }
        if !c.committed.is_empty() {
            landed += 1;
        }
        listings += c.listings;
        reported.extend(c.committed);
        // After every kill: the check opens the database first, so it is the one that
        // recovers from what the kill left in the region (the next committing child then
        // finds it recovered).
        let journal_left = check_db(&s, &reported, &context);
        recovered += usize::from(journal_left || c.recovered);
    }
    eprintln!(
        "{tag}: {cycles} kills, {landed} after a commit, {recovered} restarts recovering a \
         journal from the region, {} commits reported, all present",
        reported.len()
    );
    assert!(
        recovered * 2 >= cycles,
        "{tag}: only {recovered} of {cycles} restarts found a journal to recover"
    );
    assert!(
        landed * 4 >= cycles * 3,
        "{tag}: only {landed} of {cycles} kills landed after a commit"
    );
    assert!(
        listings > 0,
        "{tag}: no listing was taken inside a transaction"
    );
    assert!(
        reported.len() > 100,
        "{tag}: only {} commits",
        reported.len()
    );
}

#[test]
fn kill_cycles_wal() {
    kill_cycles("kill-wal", &["wal"], 20, 0x5157);
}

#[test]
fn kill_cycles_rollback_journal() {
    kill_cycles(
        "kill-rollback",
        &["delete", "truncate", "persist"],
        9,
        0xDE1E7E,
    );
}

fn power_cuts(model: &str, cycles: usize, seed: u64) {
    let s = Scratch::new(&format!("cut-{model}"));
    create(&s);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut reported = BTreeSet::new();
    let (mut landed, mut recovered) = (0, 0);
    for i in 0..cycles {
        let cut_seed: u64 = rng.gen();
        let delay_ms: u64 = rng.gen_range(100..400);
        let extra = format!("&powercut={model}:{cut_seed}:{delay_ms}");
        // Paced to a few hundred commits: the simulated region logs every store in memory.
        let c = commit_cycle(&s, "wal", &extra, 200, None);
        let context = format!("power cut {model} cycle {i} ({extra})");
        assert!(
            c.start >= 0,
            "{context}: the child never opened the database"
        );
        let max_before = reported.iter().next_back().copied().unwrap_or(0);
        assert!(
            c.start > max_before,
            "{context}: a commit vanished before the cut"
        );
        if !c.committed.is_empty() {
            landed += 1;
        }
        reported.extend(c.committed);
        recovered += usize::from(check_db(&s, &reported, &context));
    }
    eprintln!(
        "power cuts {model}: {cycles} cuts, {landed} after a commit, {recovered} leaving a WAL \
         to recover, {} commits reported, all present",
        reported.len()
    );
    assert!(
        recovered * 2 >= cycles,
        "{model}: only {recovered} of {cycles} cuts left a WAL to recover"
    );
    assert!(
        landed * 4 >= cycles * 3,
        "{model}: only {landed} of {cycles} cuts landed after a commit"
    );
}

#[test]
fn power_cuts_m1() {
    power_cuts("M1", 10, 0xC0FFEE);
}

#[test]
fn power_cuts_m2() {
    power_cuts("M2", 10, 0xBEEF);
}

#[test]
fn no_journal_file_reaches_the_file_system() {
    for mode in ["wal", "delete", "truncate", "persist"] {
        let s = Scratch::new(&format!("files-{mode}"));
        let out = run(
            &s.db(),
            &format!("{}&region_size=32MiB", s.region()),
            "workload",
            &[mode, "40"],
        );
        let d = &out[0];
        assert_eq!(d["journal_mode"], mode);
        assert_eq!(d["count"], 200);
        assert_eq!(d["integrity"], "ok");
        assert_no_journal_files(d["seen"].as_array().expect("seen"), mode);
        let stats = &d["stats"][0]["stats"];
        assert!(
            stats["writes"].as_u64().expect("writes") > 100,
            "{mode}: the journal went through the store: {stats}"
        );
        // Whatever else is in the directory is the database and the wal-index.
        let names: Vec<String> = std::fs::read_dir(s.db_dir.path())
            .expect("list the database directory")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.iter().all(|n| n == "test.db"),
            "{mode}: after close: {names:?}"
        );
    }
}

fn sqlite3_cli(script: &str) -> (String, String, bool) {
    let out = output(&mut Command::new(SQLITE3), Some(script.as_bytes()));
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.success(),
    )
}

#[test]
fn sqlite3_cli_loads_the_extension() {
    let s = Scratch::new("cli");
    let uri = format!(
        "file:{}?vfs=nvstack&region={}&region_size=16MiB",
        s.db(),
        s.region()
    );
    let (out, err, ok) = sqlite3_cli(&format!(
        ".load {}\n.open {uri}\npragma journal_mode=wal;\ncreate table t(x);\n\
         insert into t values(1),(2),(3);\nbegin;\ninsert into t values(4);\n\
         select json_extract(nvstack_stats(), '$[0].files[0].kind');\ncommit;\n\
         select sum(x) from t;\n",
        ext().display()
    ));
    assert!(ok, "sqlite3 failed: {err}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["wal", "wal", "10"],
        "{err}"
    );
    // A second run sees the data; the first left no journal behind.
    let (out, err, ok) = sqlite3_cli(&format!(
        ".load {}\n.open {uri}\nselect sum(x) from t;\npragma integrity_check;\n",
        ext().display()
    ));
    assert!(ok, "sqlite3 failed: {err}");
    assert_eq!(out.lines().collect::<Vec<_>>(), ["10", "ok"], "{err}");
    // Errors reach the tool's log (`.log stderr`) with the reason; the generic entry point
    // loads too.
    let (_out, err, _ok) = sqlite3_cli(&format!(
        ".log stderr\n.load {} sqlite3_extension_init\n.open file:{}?vfs=nvstack\nselect 1;\n",
        ext().display(),
        s.db()
    ));
    assert!(
        err.contains("nvstack: vfs=nvstack needs the URI parameter region=PATH"),
        "{err}"
    );
}

fn open_error(db: &str, region: &str, extra: &str) -> Value {
    let out = run(db, region, "open", &[extra]);
    assert!(out[0].get("ok").is_none(), "open succeeded: {out:?}");
    out[0].clone()
}

#[test]
fn a_second_process_gets_busy() {
    let s = Scratch::new("busy");
    // Under a deadline: if it hangs, it is killed and its stdout closes.
    let mut holder = Watched::spawn(
        child(&s.db(), &s.region(), "hold", &["&region_size=16MiB"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped()),
        CHILD_LIMIT,
    );
    let mut line = String::new();
    BufReader::new(holder.child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("holder's first line");
    assert!(line.contains("ready"), "holder: {line}");
    let e = open_error(&s.db(), &s.region(), "");
    assert_eq!(e["code"], 5, "SQLITE_BUSY expected: {e}");
    assert!(
        e["nvstack"]
            .as_str()
            .expect("message")
            .contains("is in use by another process"),
        "{e}"
    );
    drop(holder.child.stdin.take()); // the holder closes the database and exits
    assert!(holder.wait().success());
    let out = run(&s.db(), &s.region(), "open", &[""]);
    assert_eq!(out[0]["ok"], true, "after the holder left: {out:?}");
}

#[test]
fn a_wal_outgrowing_the_region_gets_full() {
    let s = Scratch::new("full");
    let out = run(
        &s.db(),
        &format!("{}&region_size=4MiB", s.region()),
        "fill",
        &[],
    );
    let d = &out[0];
    assert_eq!(d["full"], true, "{d}");
    assert_eq!(d["code"], 13, "SQLITE_FULL expected: {d}");
    assert!(
        d["nvstack"]
            .as_str()
            .expect("message")
            .contains("journal store full"),
        "{d}"
    );
    assert_eq!(
        d["before"], d["after"],
        "the failed transaction rolled back"
    );
    assert_eq!(d["integrity"], "ok");
}

#[test]
fn bad_parameters_and_regions_get_clear_errors() {
    let s = Scratch::new("bad");
    let db = s.db();
    let region = s.region();
    let cases: Vec<(String, String, &str)> = vec![
        (
            String::new(),
            String::new(),
            "needs the URI parameter region=PATH",
        ),
        (
            region.clone(),
            "&region_size=12parsecs".into(),
            "region_size=12parsecs",
        ),
        (
            region.clone(),
            String::new(),
            "does not exist: add region_size",
        ),
        (
            region.clone(),
            "&region_size=16MiB&powercut=M7:1:1".into(),
            "powercut=M7:1:1",
        ),
        (
            s.db_dir.path().join("on-disk.img").display().to_string(),
            "&region_size=16MiB".into(),
            "tmpfs",
        ),
        (
            "/dev/shm/no-such-dir-nvstack/r.img".into(),
            "&region_size=16MiB".into(),
            "is not usable",
        ),
    ];
    for (r, extra, needle) in &cases {
        let e = open_error(&db, r, extra);
        assert_eq!(
            e["code"], 14,
            "SQLITE_CANTOPEN expected for {r}{extra}: {e}"
        );
        let msg = e["nvstack"].as_str().expect("message");
        assert!(msg.contains(needle), "{r}{extra}: {msg}");
    }
    // A region of the wrong size, a foreign file, an nvstack image holding something else.
    let out = run(&db, &region, "open", &["&region_size=16MiB"]);
    assert_eq!(out[0]["ok"], true);
    let e = open_error(&db, &region, "&region_size=32MiB");
    assert!(
        e["nvstack"]
            .as_str()
            .unwrap()
            .contains("is 16777216 bytes, not region_size=33554432"),
        "{e}"
    );
    let foreign = s.shm_dir.path().join("foreign.img");
    std::fs::write(&foreign, vec![0x5Au8; 4 << 20]).expect("write a foreign file");
    let e = open_error(&db, &foreign.display().to_string(), "");
    assert!(
        e["nvstack"]
            .as_str()
            .unwrap()
            .contains("not an nvstack image"),
        "{e}"
    );
    let other = s.shm_dir.path().join("other.img");
    let fo = nvstack_nvramdisk::FormatOptions::default();
    nvstack_nvramdisk::image::format_image(&other, 16 << 20, &fo, false).expect("format");
    {
        use nvstack_core::blockdev::BlockDevice;
        // Another test thread's child process may hold the new image's lock for an instant:
        // a fork inherits the mapping format_image had open, until the child execs.
        let open = || nvstack_nvramdisk::image::open_image(&other, Default::default());
        let mut d = open();
        for _ in 0..100 {
            match &d {
                Err(e) if e.to_string().contains("locked") => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    d = open();
                }
                _ => break,
            }
        }
        let d = d.expect("open");
        d.write(0, &vec![0x33u8; 4096]).expect("write block 0");
    }
    let e = open_error(&db, &other.display().to_string(), "");
    assert!(e["nvstack"].as_str().unwrap().contains("bad magic"), "{e}");
    let again = std::fs::read(&other).expect("read the image back");
    assert!(
        again.len() == 16 << 20,
        "a refused region is left as it was"
    );
    // A journal left on the file system by a run without the VFS is not ignored.
    std::fs::write(format!("{db}-journal"), b"hot").expect("write a stale journal");
    let e = open_error(&db, &region, "");
    assert!(
        e["nvstack"]
            .as_str()
            .unwrap()
            .contains("-journal exists on the file system"),
        "{e}"
    );
}

/// The shipped extension (built without the feature `powercut`) refuses powercut= with
/// SQLITE_CANTOPEN, naming it, opens the same region without it, and does not link the
/// power-cut machinery at all (no symbol of `nvstack_stack::powercut::sim` in the library),
/// while the test build does.
#[test]
fn the_shipped_extension_refuses_powercut_and_links_no_power_cut_machinery() {
    let s = Scratch::new("shipped");
    let (db, region) = (s.db(), s.region());
    let shipped = |extra: &str| {
        let mut c = Command::new(PYTHON);
        c.arg(child_script())
            .arg(shipped_ext())
            .arg(&db)
            .arg(&region)
            .arg("open")
            .arg(extra);
        let out = output(&mut c, None);
        assert!(out.status.success(), "child failed: {out:?}");
        json_lines(&out.stdout)
    };
    let out = shipped("&region_size=16MiB&powercut=M2:1:100");
    assert!(out[0].get("ok").is_none(), "powercut= opened: {out:?}");
    assert_eq!(out[0]["code"], 14, "SQLITE_CANTOPEN expected: {out:?}");
    let msg = out[0]["nvstack"].as_str().expect("message");
    assert!(
        msg.contains("powercut=M2:1:100") && msg.contains("no power-cut machinery"),
        "{msg}"
    );
    let out = shipped("&region_size=16MiB");
    assert!(out[0].get("ok").is_some(), "the plain open failed: {out:?}");
    // The machinery's module path, as it appears in the library's symbol names.
    let linked = |p: &Path| {
        let bytes = std::fs::read(p).unwrap();
        bytes.windows(12).any(|w| w == b"powercut3sim")
    };
    assert!(
        linked(ext()),
        "the test build has no power-cut symbols: the probe is wrong"
    );
    assert!(
        !linked(shipped_ext()),
        "{} links the power-cut machinery",
        shipped_ext().display()
    );
}
