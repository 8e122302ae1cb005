//! scripts/bench-ubj.sh (issue 20's evaluation of UBJ under ext4) run for real on tiny sizes
//! (`--quick`: NVRAM 16 MiB, a 256 MiB backing file, fio on 8 MB, PostMark on 200 files):
//! every row it builds (a plain file, b and c UBJ, d ext4's journal on an nvramdisk, e the
//! kernel's loop device, f the write cache when this binary serves one) is set up, measured
//! and torn down, the JSON carries every ratio and byte count, and nothing the script made is
//! left behind (mounts, loop devices, daemons, files under /dev/shm and /var/tmp). No timing is
//! asserted: only that each run measured something and that the byte counts add up as each
//! row's design says. Bad arguments exit 2 naming the argument.
//!
//! Mounts: holds the one lock of tests/common/stack.rs and runs the script under `timeout`
//! (the script's own trap cleans up after a failure or the timeout's SIGTERM).

#[path = "common/stack.rs"]
mod stack;

use serde_json::Value;
use stack::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/bench-ubj.sh")
}

fn bench(secs: u64, args: &[&str]) -> Output {
    Command::new("timeout")
        .args(["-k", "20", &secs.to_string(), "bash"])
        .arg(script())
        .args(args)
        .env("NVSTACK_BIN", bin())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run bench-ubj.sh: {e}"))
}

/// The work directories the script names on stderr (its /dev/shm, backing and mount dirs).
fn work_dirs(stderr: &str) -> Vec<String> {
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix("bench-ubj: work directories "))
        .unwrap_or_else(|| panic!("bench-ubj named no work directories: {stderr}"));
    line.split_whitespace().map(String::from).collect()
}

fn assert_nothing_left(dirs: &[String]) {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let loops = ok(30, &["losetup", "-a"]);
    for d in dirs {
        assert!(!Path::new(d).exists(), "bench-ubj left {d}");
        assert!(
            !mounts.contains(d.as_str()),
            "bench-ubj left a mount on {d}"
        );
        // A served row's loop device sits on /run/nvstack/<id>/fuse/disk, <id> its mount path.
        let id = d.trim_start_matches('/').replace('/', "-");
        assert!(
            !loops.contains(d.as_str()) && !loops.contains(&id),
            "bench-ubj left a loop device on {d}: {loops}"
        );
        assert!(
            !Path::new("/run/nvstack").join(&id).exists(),
            "bench-ubj left /run/nvstack/{id}"
        );
    }
}

fn num(v: &Value, k: &str) -> f64 {
    v[k].as_f64()
        .unwrap_or_else(|| panic!("{k} missing or not a number in {v}"))
}

/// One grid entry's byte counts hold as its row's design says.
fn check_bytes(e: &Value) {
    let (row, w) = (e["row"].as_str().unwrap(), e["workload"].as_str().unwrap());
    let (back, dev, nv) = (
        num(e, "backing_bytes_per_app_byte"),
        num(e, "device_bytes_per_app_byte"),
        num(e, "nvram_bytes_per_app_byte"),
    );
    assert!(
        dev > 0.0,
        "row {row} {w}: ext4 sent nothing to its device: {e}"
    );
    match row {
        // No NVRAM: everything ext4 sent goes to the disk.
        "a" | "e" => assert!(nv == 0.0 && back > 0.0, "row {row} {w}: {e}"),
        // All of ext4's writes land in the NVRAM cache first.
        "b" | "c" | "f" => assert!(nv == dev, "row {row} {w}: {e}"),
        // The journal's share goes to the nvramdisk, the rest to the backing file.
        "d" => assert!(nv > 0.0 && nv < dev && back > 0.0, "row {row} {w}: {e}"),
        _ => panic!("unknown row {row}"),
    }
    if w == "fio-rand" {
        // fio fsyncs every 32 writes: every row's file system sends flushes to its device.
        assert!(
            num(e, "fs_device_flushes") > 0.0,
            "row {row} {w}: no flush: {e}"
        );
    }
    if row != "c" && w == "fio-rand" {
        // data=journal with fsyncs: every application byte reaches the journal before its
        // fsync returns (and home later), so ext4 sends at least as many bytes as the
        // application wrote. (Not so for PostMark: files deleted before a commit never do.)
        assert!(
            dev >= 1.0,
            "row {row} {w}: device bytes per app byte {dev}: {e}"
        );
    }
}

fn check_grid(v: &Value, workloads: &[&str]) {
    let grid = v["grid"].as_array().expect("grid");
    let mut rows = vec!["a", "b", "c", "d", "e"];
    if grid.iter().any(|e| e["row"] == "f") {
        rows.push("f");
    }
    for w in workloads {
        for r in &rows {
            let e = grid
                .iter()
                .find(|e| e["workload"] == *w && e["row"] == *r)
                .unwrap_or_else(|| panic!("no row {r} for {w} in {v}"));
            assert!(num(e, "median") > 0.0, "row {r} {w} measured nothing: {e}");
            assert_eq!(e["runs"].as_array().unwrap().len(), 1, "{e}");
            assert!(num(e, "vs_a") > 0.0 && num(e, "b_vs_this") > 0.0, "{e}");
            if *r == "a" {
                assert_eq!(num(e, "vs_a"), 1.0, "{e}");
            }
            check_bytes(e);
        }
    }
}

fn check_summary(v: &Value, workloads: &[&str]) {
    let s = &v["summary"][0];
    assert_eq!(s["commit_s"], 1, "--quick runs ext4 commit=1 s: {s}");
    for w in workloads {
        assert!(num(&s["b_vs_a"], w) > 0.0, "b/a {w} missing: {s}");
        assert!(num(&s["b_vs_d"], w) > 0.0, "b/d {w} missing: {s}");
    }
    assert!(num(s, "b_vs_a_mean") > 0.0, "{s}");
    assert!(s["b_vs_a_best_workload"].is_string(), "{s}");
    let ac = v["autocommit"].as_array().expect("autocommit");
    assert_eq!(
        ac.len(),
        workloads.len(),
        "one sweep entry per workload: {v}"
    );
    for e in ac {
        assert_eq!(e["autocommit_ms"], 100, "{e}");
        assert!(num(e, "median") > 0.0, "{e}");
    }
}

#[test]
fn quick_run_measures_every_row_and_leaves_nothing() {
    let _g = serial();
    require_environment();
    for t in ["fio", "postmark", "mke2fs"] {
        ok(10, &["sh", "-c", &format!("command -v {t}")]);
    }
    let workloads = ["fio-rand", "postmark"];
    let o = bench(
        300,
        &[
            "--quick",
            "--json",
            "--workloads",
            "fio-rand,postmark",
            "--autocommit-ms",
            "100",
        ],
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    let dirs = work_dirs(&stderr);
    assert_eq!(dirs.len(), 4, "{stderr}");
    assert_nothing_left(&dirs);
    assert!(
        o.status.success(),
        "bench-ubj failed ({}): {stderr}",
        o.status
    );
    let v: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\n{stderr}"));
    check_grid(&v, &workloads);
    check_summary(&v, &workloads);
}

#[test]
fn bad_arguments_exit_2_naming_the_argument() {
    let cases: &[(&[&str], &str)] = &[
        (&["--rows", "a,z"], "'z'"),
        (&["--rounds", "0"], "--rounds 0"),
        (&["--commit", "1,x"], "--commit"),
        (&["--autocommit-ms", "100,-1"], "--autocommit-ms"),
        (&["--workloads", "iozone"], "iozone"),
        (&["--fio-size", "10"], "--fio-size"),
        (&["--frobnicate"], "--frobnicate"),
        (&["--rounds"], "--rounds needs a value"),
    ];
    for (args, needle) in cases {
        let o = bench(60, args);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("work directories"),
            "{args:?} got as far as making its directories: {stderr}"
        );
    }
}
