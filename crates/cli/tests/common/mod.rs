//! Running the program, for the test files that include this module (`mod common;`): the
//! simulator's and the crash checker's. One runner, so that every run is held to the same
//! rules: it ends on its own (no signal) and never panics, whatever its exit code.
//!
//! The binary is `NVSTACK_BIN` (scripts/test.sh: the release build, as these runs are
//! compute-heavy), else the one cargo built for the tests. tests/cli.rs keeps its own runner: it
//! feeds stdin, reads binary stdout, and always runs cargo's build (the test profile, debug
//! assertions on).

use serde_json::Value;
use std::process::Command;

pub fn bin() -> String {
    std::env::var("NVSTACK_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_nvstack").to_string())
}

/// One finished run of the program.
pub struct Run {
    /// `nvstack ARGS`, for messages.
    pub what: String,
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Stdout as one JSON document; anything else fails the test, showing both streams.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "{}: stdout is not JSON ({e}): {}\n{}",
                self.what, self.stdout, self.stderr
            )
        })
    }
}

/// Run `nvstack ARGS` with stdin closed. A signal (no exit code) or a panic message fails the
/// test whatever the code.
pub fn run(args: &[&str]) -> Run {
    let what = format!("nvstack {}", args.join(" "));
    let o = Command::new(bin())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {}: {e}", bin()));
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    let code = o
        .status
        .code()
        .unwrap_or_else(|| panic!("{what}: killed by a signal ({}): {stderr}", o.status));
    assert!(!stderr.contains("panicked"), "{what}: panicked: {stderr}");
    Run {
        what,
        code,
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr,
    }
}

/// `nvstack ARGS`, which must exit 0: its stdout as JSON.
pub fn json(args: &[&str]) -> Value {
    let r = run(args);
    assert_eq!(r.code, 0, "{}: {}", r.what, r.stderr);
    r.json()
}

/// Field `field` of a JSON report as an integer; a missing or wrong field fails the test.
#[allow(dead_code)] // not every test file reads reports
pub fn u(v: &Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("no integer '{field}' in {v}"))
}

/// Field `field` of a JSON report as a number; a missing or wrong field fails the test.
#[allow(dead_code)] // not every test file reads reports
pub fn f(v: &Value, field: &str) -> f64 {
    v[field]
        .as_f64()
        .unwrap_or_else(|| panic!("no number '{field}' in {v}"))
}
