//! The crash checker on nvcache's write cache (`nvstack crashtest --cache write`), through the
//! real binary: its NVRAM and its backing device crash together (the backing sectors written
//! since the last flush in any subset), also in the middle of a destage. The exhaustive tier
//! is clean over every scenario, the randomized tier is clean under M0 to M2 and detects M3's
//! media faults, and every seeded bug is caught under its weakest model (M0).
//!
//! Compute-heavy: scripts/test.sh points NVSTACK_BIN at the release binary.

use serde_json::Value;

mod common;
use common::{json, run};

#[test]
fn write_cache_exhaustive_tier_is_clean_over_every_scenario() {
    let v = json(&["crashtest", "--cache", "write", "--json"]);
    assert_eq!(v["violations"], 0, "{:#}", v["violation_details"]);
    let rows = v["rows"].as_array().unwrap();
    let faults: Vec<&str> = rows.iter().map(|r| r["fault"].as_str().unwrap()).collect();
    assert_eq!(faults, ["M0", "M1", "M2"], "{rows:?}");
    assert!(rows.iter().all(|r| r["protocol"] == "write"));
    let points = v["crash_points"].as_u64().unwrap();
    let equivalent = v["points_equivalent"].as_u64().unwrap();
    assert!(points > 3_000, "{points}");
    assert!(
        equivalent > 0 && equivalent < points,
        "{equivalent} of {points}"
    );
    assert!(v["points_exhaustive"].as_u64().unwrap() > 300);
    assert!(
        v["depth2_images"].as_u64().unwrap() > 0,
        "recovery crashed at depth 2"
    );
}

#[test]
fn write_cache_randomized_tier_is_clean_and_media_faults_are_detected() {
    for fault in ["M0", "M1", "M2"] {
        let v = json(&[
            "crashtest",
            "--cache",
            "write",
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
        "write",
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

/// The scenario that exercises each bug. (entry-before-data shows in write-8: a single-block
/// write's checksum covers its data, so there the mistake is harmless.)
const EXPOSED_BY: [(&str, &str); 13] = [
    ("entry-before-data", "write-8"),
    ("commit-unfenced", "write-1"),
    ("freed-before-backing-flush", "watermark"),
    ("bypass-keeps-cached-copy", "cleaner"),
    ("stale-clear-unfenced", "writeback"),
    ("reuse-before-fence", "overwrite"),
    ("wc-recovery-keeps-uncommitted", "write-8"),
    ("wc-recovery-oldest-copy", "overwrite"),
    ("checksum-skips-data", "write-1"),
    ("wc-recovery-skips-checksum", "write-1"),
    ("wc-recovery-first-copy", "overwrite"),
    ("long-discard-unflushed", "discard-long"),
    ("destage-clears-rewritten", "destage-rewrite"),
];

#[test]
fn every_write_cache_seeded_bug_is_caught_under_its_weakest_model() {
    let list = run(&[
        "crashtest",
        "--cache",
        "write",
        "--seeded-bug",
        "list",
        "--json",
    ]);
    assert_eq!(list.code, 0, "{}", list.stderr);
    let bugs: Vec<Value> = serde_json::from_str(&list.stdout).unwrap();
    assert_eq!(bugs.len(), EXPOSED_BY.len(), "{}", list.stdout);
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
            "write",
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
fn nvramdisk_flags_and_unknown_names_are_refused_for_the_write_cache() {
    for (args, says) in [
        (
            &["--protocol", "fast"][..],
            "--protocol names an nvramdisk configuration",
        ),
        (&["--scenario", "write-64"], "unknown scenario 'write-64'"),
        (&["--seeded-bug", "evict-dirty"], "unknown seeded bug"),
    ] {
        let mut a = vec!["crashtest", "--cache", "write"];
        a.extend_from_slice(args);
        let r = run(&a);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(says), "{args:?}: {}", r.stderr);
    }
}
