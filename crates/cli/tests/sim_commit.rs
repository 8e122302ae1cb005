//! The committing simulator's command-line contract, with the real binary: `sim commit` on a
//! kernel and on traces recorded from nvramdisk in both protocols (`sim commit-record`), its
//! `--json` fields, the four figure commands as tables, JSON and SVG (and Figs. 8, 9 and 11
//! from one shared run), and bad input exiting 2
//! with a message naming what is wrong.

mod common;
use common::{json, run};

fn num(v: &serde_json::Value, path: &[&str]) -> f64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_f64()
        .unwrap_or_else(|| panic!("no number at {path:?} in {v}"))
}

const SMALL: [&str; 4] = ["--cores", "4", "--updates", "60"];

#[test]
fn one_run_reports_what_it_counted() {
    let mut args = vec![
        "sim", "commit", "--commit", "fine", "--kernel", "btree", "--json",
    ];
    args.extend(SMALL);
    let v = json(&args);
    assert_eq!(v["mode"], "fine");
    // 4 threads x 60 updates, a commit after each.
    assert_eq!(num(&v, &["mc", "commits"]), 240.0);
    assert!(
        num(&v, &["ipc"]) > 0.0 && num(&v, &["mc", "syncs"]) >= 240.0,
        "{v}"
    );
    let text = run(&[
        "sim",
        "commit",
        "--commit",
        "eadr",
        "--cores",
        "4",
        "--updates",
        "60",
    ]);
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(
        text.stdout.contains("time per commit (ns)") && text.stdout.contains("eadr"),
        "{}",
        text.stdout
    );
}

#[test]
fn nvramdisk_traces_in_both_protocols() {
    let dir = tempfile::tempdir().unwrap();
    for protocol in ["fast", "paper"] {
        let trace = dir.path().join(format!("nvramdisk-{protocol}.trace"));
        let t = trace.to_str().unwrap();
        let r = run(&[
            "sim",
            "commit-record",
            "--protocol",
            protocol,
            "--threads",
            "4",
            "--writes",
            "20",
            "--output",
            t,
        ]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let mut commits = Vec::new();
        for mode in ["global", "fine"] {
            let v = json(&[
                "sim", "commit", "--commit", mode, "--cores", "4", "--trace", t, "--json",
            ]);
            assert!(
                num(&v, &["stores"]) >= 4.0 * 20.0 * 64.0,
                "every block's 64 lines are stored: {v}"
            );
            commits.push(num(&v, &["mc", "commits"]));
        }
        assert!(
            commits[0] >= 80.0 && commits[0] == commits[1],
            "{protocol}: the same commits in both modes: {commits:?}"
        );
        // A trace of 4 threads does not run on 16 cores.
        let r = run(&["sim", "commit", "--commit", "fine", "--trace", t]);
        assert_eq!(r.code, 2);
        assert!(
            r.stderr.contains("4 threads but the machine 16 cores"),
            "{}",
            r.stderr
        );
    }
}

#[test]
fn sqlite_journal_store_trace() {
    // Four real SQLite processes (the sqlite3 tool with the extension of NVSTACK_SQLITE_EXT),
    // each committing 10 transactions whose WAL is in the journal store, recorded and merged.
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("sqlite.trace");
    let t = trace.to_str().unwrap();
    let record = [
        "sim",
        "commit-record",
        "--workload",
        "sqlite",
        "--threads",
        "4",
        "--writes",
        "10",
        "--output",
        t,
    ];
    let r = run(&record);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let text = std::fs::read_to_string(&trace).unwrap();
    assert!(
        text.starts_with("nvstack-mctrace 1 threads 4\n"),
        "{text:.80}"
    );
    for thread in 0..4 {
        assert!(
            text.contains(&format!("\n{thread} C ")),
            "thread {thread} committed through its lanes' commit domains"
        );
    }
    let mut commits = Vec::new();
    for mode in ["global", "fine"] {
        let v = json(&[
            "sim", "commit", "--commit", mode, "--cores", "4", "--trace", t, "--json",
        ]);
        assert!(num(&v, &["stores"]) > 0.0 && num(&v, &["ipc"]) > 0.0, "{v}");
        commits.push(num(&v, &["mc", "commits"]));
    }
    assert!(
        commits[0] >= 40.0 && commits[0] == commits[1],
        "at least a commit per transaction, the same in both modes: {commits:?}"
    );
    // Through a figure, beside a kernel.
    let v = json(&[
        "sim",
        "commit-ipc",
        "--cores",
        "4",
        "--updates",
        "20",
        "--seeds",
        "1",
        "--kernel",
        "kv",
        "--trace",
        t,
        "--json",
    ]);
    assert!(v.to_string().contains("\"sqlite\""), "{v}");
    // The trace is not overwritten without --force; an unknown workload is refused.
    let again = run(&record);
    assert_eq!(again.code, 2, "{}", again.stderr);
    assert!(again.stderr.contains("add --force"), "{}", again.stderr);
    let mut forced = record.to_vec();
    forced.push("--force");
    assert_eq!(run(&forced).code, 0);
    let mut bad = record.to_vec();
    bad[3] = "postgres";
    let r = run(&bad);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("--workload \"postgres\""), "{}", r.stderr);
}

#[test]
fn figures_as_tables_json_and_svg() {
    let dir = tempfile::tempdir().unwrap();
    let plots = dir.path().to_str().unwrap();
    for (cmd, file, head) in [
        ("commit-ipc", "mcsim-fig8-ipc.svg", "Fig. 8"),
        ("commit-time", "mcsim-fig9-commit-time.svg", "Fig. 9"),
        ("commit-frequency", "mcsim-fig10-frequency.svg", "Fig. 10"),
        ("commit-syncs", "mcsim-fig11-syncs.svg", "Fig. 11"),
    ] {
        let mut args = vec![
            "sim", cmd, "--seeds", "1", "--kernel", "kv", "--kernel", "tx", "--plot", plots,
        ];
        args.extend(SMALL);
        let r = run(&args);
        assert_eq!(r.code, 0, "{cmd}: {}", r.stderr);
        assert!(
            r.stdout.contains(head) && r.stdout.contains("paper"),
            "{cmd}: {}",
            r.stdout
        );
        let svg = std::fs::read_to_string(dir.path().join(file)).unwrap();
        assert!(svg.contains("<svg") && svg.contains("fine"), "{file}");
        args.retain(|a| *a != "--plot" && *a != plots);
        args.push("--json");
        let v = json(&args);
        let points = v["points"].as_array().expect("points");
        let per_mode = if cmd == "commit-frequency" { 6 } else { 2 };
        assert_eq!(points.len(), 2 * per_mode, "{cmd}: {v}");
    }
}

/// `sim commit-figures` runs the grid of Figs. 8, 9 and 11 once: its output is the three
/// commands' tables byte for byte, one after another, and it writes their three SVGs.
#[test]
fn shared_figures_print_the_three_tables() {
    let dir = tempfile::tempdir().unwrap();
    let plots = dir.path().to_str().unwrap();
    let mut base = vec!["--seeds", "2", "--kernel", "hashmap", "--kernel", "tx"];
    base.extend(SMALL);
    let mut alone = String::new();
    for cmd in ["commit-ipc", "commit-time", "commit-syncs"] {
        let mut args = vec!["sim", cmd];
        args.extend(&base);
        let r = run(&args);
        assert_eq!(r.code, 0, "{cmd}: {}", r.stderr);
        alone.push_str(&r.stdout);
    }
    let mut args = vec!["sim", "commit-figures", "--plot", plots];
    args.extend(&base);
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, alone);
    for file in [
        "mcsim-fig8-ipc.svg",
        "mcsim-fig9-commit-time.svg",
        "mcsim-fig11-syncs.svg",
    ] {
        let svg = std::fs::read_to_string(dir.path().join(file)).unwrap();
        assert!(svg.contains("<svg") && svg.contains("fine"), "{file}");
    }
    let mut args = vec!["sim", "commit-figures", "--json"];
    args.extend(&base);
    let v = json(&args);
    assert_eq!(v["figures"].as_array().map(Vec::len), Some(3), "{v}");
    assert_eq!(v["points"].as_array().map(Vec::len), Some(4), "{v}");
}

#[test]
fn bad_input_exits_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.trace");
    std::fs::write(&bad, "nvstack-mctrace 1 threads 1\n0 G 5\n0 Q 1\n").unwrap();
    let bad = bad.to_str().unwrap();
    let missing = dir.path().join("missing.trace");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["sim", "commit", "--commit", "pcommit"],
            "expected global, fine, adr or eadr",
        ),
        (
            vec!["sim", "commit", "--commit", "fine", "--kernel", "queue"],
            "expected hashmap, btree, kv or tx",
        ),
        (
            vec!["sim", "commit", "--commit", "fine", "--credits", "0"],
            "--credits 0",
        ),
        (
            vec!["sim", "commit", "--commit", "fine", "--cores", "3"],
            "--cores",
        ),
        (
            vec!["sim", "commit", "--commit", "fine", "--commit-every", "0"],
            "--commit-every 0",
        ),
        (
            vec![
                "sim", "commit", "--commit", "fine", "--cores", "1", "--trace", bad,
            ],
            "line 3: unknown operation \"Q\"",
        ),
        (
            vec![
                "sim",
                "commit",
                "--commit",
                "fine",
                "--trace",
                missing.to_str().unwrap(),
            ],
            "missing.trace",
        ),
        (
            vec!["sim", "commit-frequency", "--trace", bad],
            "a trace's commits are its own",
        ),
        (
            vec!["sim", "commit-ipc", "--seeds", "0"],
            "at least one seed",
        ),
        (
            vec![
                "sim",
                "commit-record",
                "--protocol",
                "slow",
                "--output",
                "/nonexistent/x",
            ],
            "--protocol",
        ),
    ];
    for (args, want) in cases {
        let r = run(&args);
        assert_eq!(r.code, 2, "{}: {}", r.what, r.stderr);
        assert!(
            r.stderr.contains(want),
            "{}: {:?} should contain {want:?}",
            r.what,
            r.stderr
        );
        assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    }
}
