//! `nvstack sim stat` as a program: the real binary (`NVSTACK_BIN`, else the one cargo built)
//! on the real traces and the samples, its exit codes and messages. The readers themselves are
//! tested in crates/sim/tests/sim_trace.rs.

use nvstack_test_support::{sample_trace as data, shared_trace as shared};
use std::path::PathBuf;

mod common;
use common::{json, run};

/// Writes `text` to a file `name` in a fresh directory.
fn file(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    (dir, p)
}

/// Runs `nvstack sim stat ARGS`: exit code, stdout, stderr.
fn stat(args: &[&str]) -> (i32, String, String) {
    let r = run(&[&["sim", "stat"], args].concat());
    (r.code, r.stdout, r.stderr)
}

/// Runs `nvstack sim stat ARGS`, which must exit 0: its stdout as JSON.
fn stat_json(args: &[&str]) -> serde_json::Value {
    json(&[&["sim", "stat"], args].concat())
}

#[test]
fn cli_stat_of_the_real_traces() {
    let p = shared("cloudPhysicsIO.csv");
    let v = stat_json(&[
        "--trace",
        p.to_str().unwrap(),
        "--format",
        "cloudphysics",
        "--json",
    ]);
    for (k, want) in [
        ("requests", 113_872u64),
        ("block_accesses", 1_141_869),
        ("reads", 485_700),
        ("writes", 656_169),
        ("distinct_blocks", 269_210),
        ("distinct_written_blocks", 208_696),
        ("first_time_ns", 5_633_898_000_000_000),
        ("last_time_ns", 5_641_098_000_000_000),
        ("skipped_lines", 0),
    ] {
        assert_eq!(v[k].as_u64(), Some(want), "{k}: {v}");
    }
    assert_eq!(v["format"], "cloudphysics");
    let p = shared("tpcc-small.trace");
    let (code, out, err) = stat(&["--trace", p.to_str().unwrap(), "--format", "disksim"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("20669") && out.contains("20422") && out.contains("7859"),
        "{out}"
    );
}

#[test]
fn cli_a_bad_line_exits_2_naming_file_line_and_problem() {
    let (_dir, p) = file(
        "bad.csv",
        "version,time,op,size,lbn\n1,5,2a,512,7\n1,5,2b,512,7\n1,6,28,512,7\n",
    );
    let ps = p.to_str().unwrap();
    let (code, out, err) = stat(&["--trace", ps, "--format", "cloudphysics"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains(&format!(
            "{ps}:3: field 'op' is '2b': expected 2a (write) or 28 (read)"
        )),
        "{err}"
    );
    let v = stat_json(&[
        "--trace",
        ps,
        "--format",
        "cloudphysics",
        "--skip-bad-lines",
        "--json",
    ]);
    assert_eq!(
        (v["requests"].as_u64(), v["skipped_lines"].as_u64()),
        (Some(2), Some(1))
    );
    let (code, out, _) = stat(&[
        "--trace",
        ps,
        "--format",
        "cloudphysics",
        "--skip-bad-lines",
    ]);
    assert_eq!(code, 0);
    assert!(
        out.lines()
            .any(|l| l.starts_with("skipped lines") && l.ends_with(" 1")),
        "{out}"
    );
}

#[test]
fn cli_a_missing_file_exits_2() {
    let (code, _, err) = stat(&["--trace", "/nonexistent/trace.csv", "--format", "msr"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("/nonexistent/trace.csv"), "{err}");
}

#[test]
fn cli_fio_v2_needs_interarrival() {
    let p = data("fio-v2.iolog");
    let ps = p.to_str().unwrap();
    let (code, _, err) = stat(&["--trace", ps, "--format", "fio"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--interarrival"), "{err}");
    let v = stat_json(&[
        "--trace",
        ps,
        "--format",
        "fio",
        "--interarrival",
        "100",
        "--json",
    ]);
    assert_eq!(v["requests"].as_u64(), Some(16));
    assert_eq!(v["sync_writes"].as_u64(), Some(12));
    assert_eq!(v["last_time_ns"].as_u64(), Some(1_500_000));
}

#[test]
fn cli_stat_of_the_samples() {
    for (name, format, requests, streams) in [
        ("sample.blkparse", "blkparse", 53, 2),
        ("sample.msr.csv", "msr", 8, 3),
        ("fio-v3-two-files.iolog", "fio", 16, 2),
    ] {
        let p = data(name);
        let v = stat_json(&["--trace", p.to_str().unwrap(), "--format", format, "--json"]);
        assert_eq!(
            (v["requests"].as_u64(), v["streams"].as_u64()),
            (Some(requests), Some(streams)),
            "{name}"
        );
    }
}
