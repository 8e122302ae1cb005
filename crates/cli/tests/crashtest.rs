//! The crash checker, through the real binary: the default exhaustive run is clean and covers
//! the protocols' states, a million randomized crash-recover-verify cycles are clean, media
//! faults (M3) are detected, every seeded bug is caught under its weakest model, the paper's
//! write-disturbance hazard shows with cache-line flushes and not with non-temporal stores,
//! a violation replays from its seed, and bad arguments are refused.
//!
//! These runs are compute-heavy: scripts/test.sh points NVSTACK_BIN at the release binary it
//! has just built (the test profile keeps debug assertions on and is 2-3 times slower).

use serde_json::Value;

mod common;
use common::{json, run};

fn states(v: &Value) -> Vec<String> {
    v["states_covered"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn default_exhaustive_run_is_clean_and_covers_the_states() {
    let v = json(&["crashtest", "--json"]);
    assert_eq!(v["violations"], 0);
    for k in [
        "crash_points",
        "images_checked",
        "violation_details",
        "states_covered",
        "images_per_sec",
        "threads",
        "seed",
    ] {
        assert!(!v[k].is_null(), "missing {k}");
    }
    assert!(
        v["crash_points"].as_u64().unwrap() > 20_000,
        "{}",
        v["crash_points"]
    );
    assert!(v["images_checked"].as_u64().unwrap() > 1_000_000);
    assert!(
        v["depth2_images"].as_u64().unwrap() > 10_000,
        "crashes inside recovery"
    );
    // Every crash point of every scenario, both protocols, M0-M2.
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 6);
    for row in rows {
        assert!(row["crash_points"].as_u64().unwrap() > 1000, "{row}");
        assert_eq!(row["violations"], 0, "{row}");
    }
    let s = states(&v);
    for st in ["F0", "F1", "F2", "F3", "F4", "R1", "R2", "R3", "R4", "R5"] {
        assert!(
            s.contains(&format!("fast:{st}")),
            "fast state {st} not covered: {s:?}"
        );
    }
    // With all-non-temporal stores the corrupt-field states of Table 2 cannot arise; the
    // others all do.
    for st in ["S0", "S2", "S4", "S6", "S8", "S10", "S0'"] {
        assert!(
            s.contains(&format!("paper:{st}")),
            "paper state {st} not covered: {s:?}"
        );
    }
}

#[test]
fn flushed_orderings_reach_the_corrupt_field_states_of_table_2() {
    // Under p6-clwb and M2 a flushed line can be garbage: the X states of Table 2 appear.
    let r = run(&[
        "crashtest",
        "--protocol",
        "paper",
        "--ordering",
        "p6-clwb",
        "--fault",
        "M2",
        "--scenario",
        "write-1",
        "--json",
    ]);
    let v = r.json();
    let s = states(&v);
    for st in [
        "S0", "S1", "S2", "S3", "S4", "S5", "S6", "S7", "S8", "S9", "S10", "S11",
    ] {
        assert!(
            s.contains(&format!("paper:{st}")),
            "paper state {st} not covered under p6-clwb/M2: {s:?}"
        );
    }
}

#[test]
fn a_million_randomized_cycles_are_clean() {
    // 500,000 cycles per protocol.
    let v = json(&["crashtest", "--random-cycles", "500000", "--json"]);
    assert_eq!(v["violations"], 0);
    assert!(
        v["cycles"].as_u64().unwrap() >= 1_000_000,
        "{}",
        v["cycles"]
    );
}

#[test]
fn media_faults_are_detected_never_returned_as_data() {
    let v = json(&[
        "crashtest",
        "--random-cycles",
        "30000",
        "--fault",
        "M3",
        "--json",
    ]);
    assert_eq!(v["violations"], 0);
    let faults = v["media_faults"].as_u64().unwrap();
    let detected = v["media_detected_at_open"].as_u64().unwrap()
        + v["media_detected_on_read"].as_u64().unwrap();
    assert!(faults >= 50_000, "{faults}");
    assert!(
        detected > faults / 4,
        "only {detected} of {faults} detected"
    );
}

#[test]
fn every_seeded_bug_is_caught_under_its_weakest_model() {
    let list = run(&["crashtest", "--seeded-bug", "list", "--json"]);
    let bugs: Vec<Value> = serde_json::from_str(&list.stdout).unwrap();
    assert!(bugs.len() >= 15);
    assert!(bugs.iter().filter(|b| b["weakest"] == "M2").count() >= 3);
    let mut failures = Vec::new();
    for b in &bugs {
        let name = b["name"].as_str().unwrap();
        let r = run(&["crashtest", "--seeded-bug", name, "--json"]);
        let v = r.json();
        let sb = &v["seeded_bug"];
        if r.code != 1 || sb["caught"] != true || sb["caught_under"] != b["weakest"] {
            failures.push(format!(
                "{name}: exit {}, caught {}, under {} (expected {})",
                r.code, sb["caught"], sb["caught_under"], b["weakest"]
            ));
        } else {
            eprintln!(
                "{name}: caught under {} after {:.2} s, {} crash points, {} images",
                sb["caught_under"],
                sb["seconds_to_first"].as_f64().unwrap_or(0.0),
                sb["crash_points_to_first"],
                sb["images_to_first"]
            );
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn the_papers_hazard_shows_with_flushes_and_not_with_non_temporal_stores() {
    let base = [
        "crashtest",
        "--protocol",
        "paper",
        "--fault",
        "M2",
        "--scenario",
        "neighbours",
        "--json",
    ];
    let mut p6 = base.to_vec();
    p6.extend(["--ordering", "p6"]);
    let r = run(&p6);
    let v = r.json();
    assert_eq!(r.code, 1);
    // A write of LBA 16 or 17 corrupts another entry of their map line.
    let hit = v["violation_details"].as_array().unwrap().iter().any(|d| {
        let w = d["what"].as_str().unwrap_or("");
        (18..24).any(|l| w.contains(&format!("map entry of LBA {l} is corrupt")))
    });
    assert!(
        hit,
        "no corrupted neighbouring entry reported: {}",
        v["violation_details"]
    );
    let r = run(&base);
    assert_eq!(
        r.code, 0,
        "with non-temporal map writes nothing is lost: {}",
        r.stdout
    );
}

#[test]
fn a_violation_replays_from_its_seed() {
    let r = run(&[
        "crashtest",
        "--random-cycles",
        "640",
        "--protocol",
        "fast",
        "--seeded-bug",
        "fast-no-map-fence",
        "--seed",
        "7",
        "--json",
    ]);
    let v = r.json();
    assert_eq!(r.code, 1);
    let d = &v["violation_details"][0];
    let step = d["step"].as_u64().unwrap();
    let rr = run(&[
        "crashtest",
        "--replay",
        &format!("7:{step}"),
        "--protocol",
        "fast",
        "--seeded-bug",
        "fast-no-map-fence",
    ]);
    assert_eq!(rr.code, 1, "{}", rr.stdout);
    assert!(
        rr.stdout.contains(&format!("VIOLATION at cycle {step}")),
        "{}",
        rr.stdout
    );
}

#[test]
fn bad_arguments_are_refused() {
    for args in [
        vec!["crashtest", "--fault", "M9"],
        vec!["crashtest", "--seeded-bug", "no-such-bug"],
        vec!["crashtest", "--fault", "M3"],
        vec!["crashtest", "--ordering", "p5"],
        vec!["crashtest", "--replay", "x"],
        vec!["crashtest", "--scenario", "nope"],
        vec!["crashtest", "--threads", "0"],
    ] {
        let r = run(&args);
        assert_eq!(r.code, 2, "{args:?}: {} {}", r.stdout, r.stderr);
        assert!(!r.stderr.trim().is_empty(), "{args:?}: no message");
    }
}
