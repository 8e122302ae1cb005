//! The checker through its library API: a plan in, a report out. Small plans only (one
//! scenario, a few hundred cycles): the program's full runs are tested in
//! crates/cli/tests/crashtest.rs.

use nvstack_core::error::Error;
use nvstack_core::{NoProgress, Progress};
use nvstack_crashtest::{
    replay, run, CrashTarget, Layer, NvramTarget, Plan, ReplayPlan, UbjTarget, WriteTarget,
};
use nvstack_nvramdisk::Protocol;
use nvstack_pmem::crash::FaultModel;
use std::sync::atomic::{AtomicU64, Ordering};

fn small_plan() -> Plan {
    Plan {
        protocol: Some(Protocol::Fast),
        scenario: Some("write-1".to_string()),
        threads: 2,
        ..Plan::default()
    }
}

#[test]
fn a_small_clean_plan_checks_crash_points_and_finds_nothing() {
    let r = run(&small_plan(), &NoProgress).expect("the plan runs");
    assert!(r.crash_points > 0, "no crash point checked");
    assert!(
        r.images_checked >= r.crash_points,
        "an image per crash point at least"
    );
    assert!(r.images_run > 0);
    assert_eq!(r.violations, 0, "{:?}", r.violation_details);
    assert!(r.violation_details.is_empty());
    // fast, p4, M0 M1 M2: one exhaustive row each.
    assert_eq!(r.rows.len(), 3);
    for (row, model) in r.rows.iter().zip(["M0", "M1", "M2"]) {
        assert_eq!(
            (row.protocol, row.ordering, row.fault),
            ("fast", "p4", model)
        );
        assert_eq!(row.tier, "exhaustive");
        assert!(row.crash_points > 0, "{row:?}");
    }
    assert!(
        r.states_covered.iter().any(|s| s == "fast:F1"),
        "{:?}",
        r.states_covered
    );
    assert!(r.seeded_bug.is_none());
    assert_eq!((r.threads, r.seed), (2, 1));
}

/// Both caches go through one generic target: each is clean on a scenario and on random
/// cycles (every model of the exhaustive tier and M3's media faults), and catches a seeded bug
/// under M0. (The full runs are crates/cli/tests/crashtest_ubj.rs and crashtest_wcache.rs.)
#[test]
fn both_caches_run_through_the_generic_target() {
    let caches = [
        (
            Layer::Ubj,
            "ubj",
            UbjTarget::new().scenarios()[0],
            "commit-word-unfenced",
        ),
        (
            Layer::Write,
            "write",
            WriteTarget::new().scenarios()[0],
            "commit-unfenced",
        ),
    ];
    for (layer, label, scenario, bug) in caches {
        let plan = Plan {
            layer,
            protocol: None,
            scenario: Some(scenario.to_string()),
            threads: 2,
            ..Plan::default()
        };
        let r = run(&plan, &NoProgress).expect("the plan runs");
        assert_eq!(r.violations, 0, "{label}: {:?}", r.violation_details);
        assert!(r.crash_points > 0 && r.points_equivalent > 0, "{label}");
        assert!(r.rows.iter().all(|row| row.protocol == label), "{label}");
        let random = Plan {
            random_cycles: Some(64),
            fault: Some(FaultModel::M3),
            ..plan.clone()
        };
        let r = run(&random, &NoProgress).expect("the plan runs");
        assert_eq!(r.violations, 0, "{label}: {:?}", r.violation_details);
        assert_eq!((r.cycles, r.media_faults), (64, 64), "{label}");
        let buggy = Plan {
            seeded_bug: Some(bug.to_string()),
            ..plan
        };
        let b = run(&buggy, &NoProgress).expect("the plan runs").seeded_bug;
        let b = b.expect("a seeded-bug result");
        assert_eq!(
            (b.caught, b.caught_under),
            (true, Some("M0")),
            "{label} {bug}"
        );
    }
}

/// Counts what the driver reports, as a drawn bar would.
#[derive(Default)]
struct Count {
    phases: AtomicU64,
    total: AtomicU64,
    done: AtomicU64,
}

impl Progress for Count {
    fn start(&self, _label: &str, steps_total: u64) {
        self.phases.fetch_add(1, Ordering::Relaxed);
        self.total.fetch_add(steps_total, Ordering::Relaxed);
    }
    fn advance(&self, steps: u64) {
        self.done.fetch_add(steps, Ordering::Relaxed);
    }
    fn finish(&self) {}
}

#[test]
fn progress_counts_every_job_and_every_cycle() {
    let scenarios = NvramTarget::new().scenarios().len() as u64;
    let c = Count::default();
    let plan = Plan {
        fault: Some(FaultModel::M0),
        ..small_plan()
    };
    run(&plan, &c).expect("the plan runs");
    // Jobs filtered out by the scenario still count as done.
    assert_eq!(c.phases.load(Ordering::Relaxed), 1);
    assert_eq!(c.total.load(Ordering::Relaxed), scenarios);
    assert_eq!(c.done.load(Ordering::Relaxed), scenarios);

    let c = Count::default();
    let plan = Plan {
        random_cycles: Some(100),
        ..small_plan()
    };
    let r = run(&plan, &c).expect("the plan runs");
    assert_eq!(r.cycles, 100);
    assert_eq!(r.crash_points, 0, "random only: no exhaustive tier");
    assert_eq!(c.phases.load(Ordering::Relaxed), 1);
    assert_eq!(c.done.load(Ordering::Relaxed), 100);
}

#[test]
fn a_seeded_bug_is_caught_under_its_weakest_model() {
    let target = NvramTarget::new();
    let bug = target
        .bugs()
        .iter()
        .find(|b| b.name == "fast-no-map-fence")
        .expect("in the catalogue");
    let plan = Plan {
        protocol: None,
        scenario: None,
        seeded_bug: Some(bug.name.to_string()),
        ..small_plan()
    };
    let r = run(&plan, &NoProgress).expect("the plan runs");
    let b = r.seeded_bug.expect("a seeded-bug result");
    assert!(b.caught, "{} not caught", bug.name);
    assert_eq!(b.caught_under, Some(bug.weakest.name()));
    assert_eq!(b.expected_weakest, bug.weakest.name());
    assert!(r.violations > 0);
    assert!(b.crash_points_to_first.is_some_and(|n| n > 0));
    // The bug's protocol and ordering, and the run stops with the model that caught it.
    assert!(r.rows.iter().all(|row| row.protocol == bug.protocol));
    assert_eq!(r.rows.last().map(|row| row.fault), Some(bug.weakest.name()));
}

#[test]
fn a_replay_of_a_clean_seed_passes_and_a_violation_replays() {
    let clean = replay(&ReplayPlan {
        plan: small_plan(),
        seed: 1,
        cycle: 70,
    })
    .expect("the replay runs");
    assert_eq!(clean.lines.len(), 1);
    assert_eq!(clean.violations(), 0, "{:?}", clean.lines);

    let buggy = Plan {
        random_cycles: Some(640),
        seed: 7,
        seeded_bug: Some("fast-no-map-fence".to_string()),
        scenario: None,
        ..small_plan()
    };
    let r = run(&buggy, &NoProgress).expect("the plan runs");
    let v = r.violation_details.first().expect("the bug is caught");
    let again = replay(&ReplayPlan {
        plan: buggy.clone(),
        seed: 7,
        cycle: v.step as u64,
    })
    .expect("the replay runs");
    assert_eq!(again.violations(), 1);
    let w = again.lines[0].violation.as_ref().expect("replayed");
    assert_eq!((w.step, &w.what), (v.step, &v.what));
}

/// The message of a BadInput error, or a panic naming what came instead.
fn bad_input(plan: &Plan) -> String {
    match run(plan, &NoProgress) {
        Err(Error::BadInput(m)) => m,
        Err(e) => panic!("expected BadInput, got {e:?}"),
        Ok(r) => panic!(
            "expected BadInput, the plan ran: {} violations",
            r.violations
        ),
    }
}

#[test]
fn a_bad_plan_is_bad_input_naming_the_field() {
    for threads in [0, 257] {
        let m = bad_input(&Plan {
            threads,
            ..small_plan()
        });
        assert!(m.starts_with("threads"), "{m}");
    }
    let m = bad_input(&Plan {
        fault: Some(FaultModel::M3),
        ..small_plan()
    });
    assert!(m.contains("fault") && m.contains("random_cycles"), "{m}");
    let m = bad_input(&Plan {
        fault: Some(FaultModel::M3),
        random_cycles: Some(10),
        exhaustive: true,
        ..small_plan()
    });
    assert!(m.contains("fault"), "{m}");
    let m = bad_input(&Plan {
        scenario: Some("nope".to_string()),
        ..small_plan()
    });
    assert!(m.starts_with("scenario 'nope'"), "{m}");
    let m = bad_input(&Plan {
        seeded_bug: Some("no-such-bug".to_string()),
        ..small_plan()
    });
    assert!(m.starts_with("seeded_bug 'no-such-bug'"), "{m}");
    // replay checks its plan the same way.
    match replay(&ReplayPlan {
        plan: Plan {
            threads: 0,
            ..small_plan()
        },
        seed: 1,
        cycle: 0,
    }) {
        Err(Error::BadInput(m)) => assert!(m.starts_with("threads"), "{m}"),
        other => panic!("expected BadInput, got {other:?}"),
    }
}
