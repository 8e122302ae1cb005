//! Issue 6: our plain LRU cache (`sim cache --model volatile --nvram 0 --delayed-writeback off`)
//! must miss exactly as often as libCacheSim's LRU on the same block-level trace.
//!
//! `nvstack sim blocks` writes the stream of block accesses every model sees as a libCacheSim
//! oracleGeneral trace (obj_id = block key, obj_size = the block size); crates/cli/tests/libcachesim_lru.py
//! replays it through `libcachesim.LRU(cache_size = the same bytes)` (no object metadata counted;
//! libCacheSim's get never looks at the op, so reads and writes are both plain accesses) and
//! prints the miss counts, both from libCacheSim's C++ `process_trace` and from a Python loop
//! of `cache.get` that counts them as integers. Every count must equal our `misses` exactly; so
//! must the misses of the default mode with dirty tracking (30 s delayed write-back): the
//! cleaner writes blocks back but never evicts them.
//!
//! The oracleGeneral records' `next_access_vtime` (which LRU ignores) is checked too: the script
//! recomputes it from the obj_ids, and libCacheSim's Belady, which reads it, must miss exactly as
//! often as an optimal replacement the script computes on its own.
//!
//! libCacheSim comes from PyPI (`libcachesim`): scripts/deps.sh makes a venv with it under
//! target/ and scripts/test.sh points NVSTACK_LIBCACHESIM_PYTHON at its python. Without that
//! variable, or if its python cannot import libcachesim, the tests fail naming what to install:
//! they never pass without the comparison.

use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

const MISSING: &str = "libcachesim is needed for the exact LRU comparison: run scripts/test.sh \
     (scripts/deps.sh makes a venv with PyPI's libcachesim==0.3.5 under target/) or set \
     NVSTACK_LIBCACHESIM_PYTHON to a python that can `import libcachesim`";

/// Straight to the process's stderr, past the test harness's capture, so CI logs show it.
fn note(msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{msg}");
}

/// The python that can import libcachesim; missing, the test fails saying what to install.
fn libcachesim_python() -> PathBuf {
    let Some(p) = std::env::var_os("NVSTACK_LIBCACHESIM_PYTHON") else {
        panic!("{MISSING} (NVSTACK_LIBCACHESIM_PYTHON is not set)");
    };
    let p = PathBuf::from(p);
    let ok = Command::new(&p)
        .args(["-c", "import libcachesim"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(ok, "{MISSING} ({} cannot import libcachesim)", p.display());
    p
}

use nvstack_test_support::shared_trace;

/// Run a command; it must succeed; its stdout as JSON.
fn run_json(cmd: &mut Command) -> Value {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{cmd:?}: stdout is not JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("no integer {k} in {v}"))
}

fn our_misses(trace: &Path, format: &str, cache_bytes: u64, delayed: &str) -> (u64, u64) {
    let v = common::json(&[
        "sim",
        "cache",
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        format,
        "--model",
        "volatile",
        "--policy",
        "lru",
        "--volatile",
        &cache_bytes.to_string(),
        "--nvram",
        "0",
        "--delayed-writeback",
        delayed,
        "--json",
    ]);
    (u(&v, "misses"), u(&v, "block_accesses"))
}

/// Write the block-level trace of `trace` in `out_format`; returns its block accesses.
fn write_blocks(trace: &Path, format: &str, out: &Path, out_format: &str) -> u64 {
    let v = common::json(&[
        "sim",
        "blocks",
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        format,
        "--output",
        out.to_str().unwrap(),
        "--out-format",
        out_format,
        "--json",
    ]);
    u(&v, "block_accesses")
}

/// libCacheSim's LRU misses for each size, checked against its own integer loop.
fn libcachesim_misses(
    py: &Path,
    blocks: &Path,
    out_format: &str,
    sizes: &[u64],
) -> (u64, Vec<u64>) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/libcachesim_lru.py");
    let list = sizes
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let mut cmd = Command::new(py);
    cmd.arg(script).args([
        "--trace",
        blocks.to_str().unwrap(),
        "--trace-format",
        out_format,
        "--cache-bytes",
        &list,
        "--exact",
    ]);
    if out_format == "oracle-general" {
        cmd.arg("--check-next-access");
    }
    let v = run_json(&mut cmd);
    if out_format == "oracle-general" {
        // The script exits 1 on a mismatch; this is belt and braces.
        for b in v["belady"].as_array().expect("belady") {
            assert_eq!(u(b, "belady_misses"), u(b, "opt_misses"), "{b}");
        }
    }
    let results = v["results"].as_array().expect("results");
    assert_eq!(results.len(), sizes.len());
    let misses = results
        .iter()
        .zip(sizes)
        .map(|(r, &s)| {
            assert_eq!(u(r, "cache_bytes"), s);
            assert_eq!(u(r, "misses"), u(r, "misses_exact"), "{r}");
            u(r, "misses")
        })
        .collect();
    (u(&v, "requests"), misses)
}

fn compare(name: &str, format: &str, accesses: u64, sizes: &[u64], out_formats: &[&str]) {
    let py = libcachesim_python();
    let trace = shared_trace(name);
    let dir = tempfile::tempdir().unwrap();
    let ours: Vec<(u64, u64, u64)> = sizes
        .iter()
        .map(|&s| {
            let (plain, n) = our_misses(&trace, format, s, "off");
            assert_eq!(n, accesses, "{name}: block accesses");
            let (dirty, _) = our_misses(&trace, format, s, "30");
            (s, plain, dirty)
        })
        .collect();
    for of in out_formats {
        let blocks = dir.path().join(format!("blocks.{of}"));
        assert_eq!(write_blocks(&trace, format, &blocks, of), accesses);
        let (requests, lcs) = libcachesim_misses(&py, &blocks, of, sizes);
        assert_eq!(requests, accesses, "{name}: libCacheSim's request count");
        let mut report = format!(
            "{name} ({accesses} block accesses, libCacheSim reading {of}):\n  {:>12} {:>12} {:>12} {:>16}\n",
            "cache bytes", "ours plain", "ours dirty", "libCacheSim LRU"
        );
        for ((s, plain, dirty), l) in ours.iter().zip(&lcs) {
            report.push_str(&format!("  {s:>12} {plain:>12} {dirty:>12} {l:>16}\n"));
        }
        note(&report);
        for ((s, plain, dirty), l) in ours.iter().zip(&lcs) {
            assert_eq!(
                plain, l,
                "{name}, {s}-byte cache: our LRU misses vs libCacheSim's"
            );
            assert_eq!(
                dirty, plain,
                "{name}, {s}-byte cache: delayed write-back changed the misses"
            );
        }
    }
}

#[test]
fn lru_misses_equal_libcachesim_on_cloudphysics() {
    compare(
        "cloudPhysicsIO.csv",
        "cloudphysics",
        1_141_869,
        &[1 << 20, 16 << 20, 256 << 20],
        &["oracle-general"],
    );
}

#[test]
fn lru_misses_equal_libcachesim_on_tpcc() {
    // Both output formats: the CSV must give libCacheSim the same stream as the binary one.
    compare(
        "tpcc-small.trace",
        "disksim",
        20_669,
        &[256 << 10, 4 << 20, 64 << 20],
        &["oracle-general", "csv"],
    );
}
