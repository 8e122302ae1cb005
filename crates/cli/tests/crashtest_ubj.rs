//! The crash checker on nvcache's UBJ cache (`nvstack crashtest --cache ubj`), through the
//! real binary: its NVRAM and its backing device crash together, the backing sectors written
//! since the last flush in any subset. The exhaustive tier is clean over every scenario, the
//! randomized tier is clean under M0 to M2 and detects M3's media faults, every seeded bug is
//! caught under its weakest model (M0), and flags that name nvramdisk's configurations are
//! refused.
//!
//! Compute-heavy: scripts/test.sh points NVSTACK_BIN at the release binary.

use serde_json::Value;

mod common;
use common::{json, run};

#[test]
fn ubj_exhaustive_tier_is_clean_over_every_scenario() {
    let v = json(&["crashtest", "--cache", "ubj", "--json"]);
    assert_eq!(v["violations"], 0, "{:#}", v["violation_details"]);
    let rows = v["rows"].as_array().unwrap();
    let faults: Vec<&str> = rows.iter().map(|r| r["fault"].as_str().unwrap()).collect();
    assert_eq!(faults, ["M0", "M1", "M2"], "{rows:?}");
    assert!(rows.iter().all(|r| r["protocol"] == "ubj"));
    // Every store, flush, fence and sector of ten scenarios, most of them allowing the same
    // executions as the point before; the rest checked, in full up to 4,096 images.
    let points = v["crash_points"].as_u64().unwrap();
    let equivalent = v["points_equivalent"].as_u64().unwrap();
    assert!(points > 50_000, "{points}");
    assert!(
        equivalent > 0 && equivalent < points,
        "{equivalent} of {points}"
    );
    assert!(v["points_exhaustive"].as_u64().unwrap() > 300);
    assert!(
        v["points_sampled"].as_u64().unwrap() > 0,
        "write-64 has large spaces"
    );
    let f = v["fraction_covered_at_sampled_points"].as_f64().unwrap();
    assert!(f > 0.0 && f < 1.0, "{f}");
    assert!(
        v["depth2_images"].as_u64().unwrap() > 0,
        "recovery crashed at depth 2"
    );
}

#[test]
fn ubj_randomized_tier_is_clean_and_media_faults_are_detected() {
    for fault in ["M0", "M1", "M2"] {
        let v = json(&[
            "crashtest",
            "--cache",
            "ubj",
            "--random-cycles",
            "1000",
            "--fault",
            fault,
            "--json",
        ]);
        assert_eq!(v["violations"], 0, "{fault}: {:#}", v["violation_details"]);
        assert!(v["cycles"].as_u64().unwrap() >= 1000, "{fault}");
    }
    let v = json(&[
        "crashtest",
        "--cache",
        "ubj",
        "--random-cycles",
        "2000",
        "--fault",
        "M3",
        "--json",
    ]);
    assert_eq!(v["violations"], 0, "{:#}", v["violation_details"]);
    let faults = v["media_faults"].as_u64().unwrap();
    let detected = v["media_detected_at_open"].as_u64().unwrap();
    assert!(faults >= 2000, "{faults}");
    assert!(
        detected > faults / 4,
        "only {detected} of {faults} detected"
    );
}

/// The scenario that exercises each bug (a full run catches each too, later: the scenarios
/// run in order and write-64 is the longest).
const EXPOSED_BY: [(&str, &str); 12] = [
    ("commit-before-data-fence", "write-1"),
    ("commit-word-unfenced", "write-1"),
    ("stale-freed-before-commit", "overwrite-frozen"),
    ("write-frozen-in-place", "overwrite-frozen"),
    ("clean-before-backing-flush", "checkpoint"),
    ("stale-clear-unfenced", "checkpoint"),
    ("discard-not-punched", "discard"),
    ("stale-reused-uncleared", "checkpoint"),
    ("recovery-keeps-uncommitted", "write-1"),
    ("recovery-oldest-copy", "overwrite-frozen"),
    ("evict-dirty", "full"),
    ("long-discard-unflushed", "discard-long"),
];

#[test]
fn every_ubj_seeded_bug_is_caught_under_its_weakest_model() {
    let list = run(&[
        "crashtest",
        "--cache",
        "ubj",
        "--seeded-bug",
        "list",
        "--json",
    ]);
    assert_eq!(list.code, 0, "{}", list.stderr);
    let bugs: Vec<Value> = serde_json::from_str(&list.stdout).unwrap();
    assert!(bugs.len() >= 10, "{}", bugs.len());
    let mut failures = Vec::new();
    for b in &bugs {
        let name = b["name"].as_str().unwrap();
        let Some(&(_, scenario)) = EXPOSED_BY.iter().find(|e| e.0 == name) else {
            failures.push(format!("{name}: no scenario named for it in this test"));
            continue;
        };
        let r = run(&[
            "crashtest",
            "--cache",
            "ubj",
            "--seeded-bug",
            name,
            "--scenario",
            scenario,
            "--json",
        ]);
        let v = r.json();
        let sb = &v["seeded_bug"];
        if r.code != 1 || sb["caught"] != true || sb["caught_under"] != b["weakest"] {
            failures.push(format!(
                "{name} ({scenario}): exit {}, caught {}, under {} (expected {})",
                r.code, sb["caught"], sb["caught_under"], b["weakest"]
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn nvramdisk_flags_and_unknown_names_are_refused_for_ubj() {
    for (args, says) in [
        (
            &["--protocol", "fast"][..],
            "--protocol names an nvramdisk configuration",
        ),
        (
            &["--ordering", "p6"],
            "--ordering names an nvramdisk configuration",
        ),
        (&["--scenario", "atomic-2"], "unknown scenario 'atomic-2'"),
        (&["--seeded-bug", "torn-map-entry"], "unknown seeded bug"),
        (&["--fault", "M3"], "M3 is for random runs only"),
    ] {
        let mut a = vec!["crashtest", "--cache", "ubj"];
        a.extend_from_slice(args);
        let r = run(&a);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(says), "{args:?}: {}", r.stderr);
    }
}
