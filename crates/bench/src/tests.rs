//! Every suite, run small: each produces its rows, well formed, with its images deleted and its
//! figures written. Nothing here asserts a time (the machines are shared and noisy); the fence
//! counts come from the devices' own counters and are exact.

use super::*;

/// A small run of `suites` in a fresh directory under /dev/shm (4 KiB pages only).
fn quick(suites: Vec<Suite>) -> (tempfile::TempDir, BenchReport) {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let opts = BenchOptions {
        suites,
        dir: dir.path().to_path_buf(),
        size_bytes: QUICK_TEST_SIZE_MIN,
        ops: Some(400),
        quick: true,
        seed: 7,
        quick_test: true,
        huge: false,
        latency_multiple: 1.0,
        repeat: 1,
    };
    let r = run(&opts, &nvstack_core::NoProgress).unwrap();
    (dir, r)
}

/// One row's figures are positive and finite, its baseline found, its fields consistent.
fn assert_row_well_formed(row: &BenchResult) {
    let what = format!("{} {} {} x{}", row.suite, row.name, row.op, row.threads);
    for v in [row.ops_per_sec, row.median_ns, row.p99_ns, row.mb_per_sec] {
        assert!(v.is_finite() && v > 0.0, "{what}: {v}");
    }
    assert!(row.p99_ns >= row.median_ns, "{what}");
    assert!(row.op == "read" || row.op == "write", "{what}");
    assert!(row.block_bytes >= 8 && row.threads >= 1, "{what}");
    assert!(row.page_bytes >= 4096, "{what}: page size measured");
    assert!(
        !row.persist_method.is_empty(),
        "{what}: persist method named"
    );
    assert_eq!(row.x.is_some(), row.x_name.is_some(), "{what}");
    if let Some(b) = &row.baseline {
        let t = row
            .time_ratio
            .unwrap_or_else(|| panic!("{what}: no row {b} to compare"));
        assert!(t.is_finite() && t > 0.0, "{what}");
        assert!(row.throughput_ratio.unwrap() > 0.0, "{what}");
    }
    if row.name.starts_with("nvramdisk") {
        assert!(row.protocol.is_some() && row.ordering.is_some(), "{what}");
        assert_eq!(row.fences_per_op.is_some(), row.op == "write", "{what}");
    }
}

fn assert_well_formed(r: &BenchReport, dir: &Path) {
    assert!(!r.results.is_empty());
    for row in &r.results {
        assert_row_well_formed(row);
    }
    // The image files are gone.
    assert_eq!(
        std::fs::read_dir(dir).unwrap().count(),
        0,
        "images left behind"
    );
    let table = format_table(r);
    for row in &r.results {
        assert!(
            table.contains(&row.name),
            "{} missing from\n{table}",
            row.name
        );
    }
    // The JSON holds the fields scripts rely on.
    let v: serde_json::Value = serde_json::to_value(r).unwrap();
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), r.results.len());
    for key in [
        "suite",
        "name",
        "op",
        "block_bytes",
        "threads",
        "page_bytes",
        "protocol",
        "ordering",
        "persist_method",
        "ops_per_sec",
        "median_ns",
        "p99_ns",
    ] {
        assert!(rows.iter().all(|x| x.get(key).is_some()), "no {key}");
    }
    // The figures are written and are SVG.
    let plots = tempfile::tempdir().unwrap();
    let files = write_plots(r, plots.path()).unwrap();
    assert!(!files.is_empty());
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(text.contains("<svg"), "{}", f.display());
    }
}

fn names(r: &BenchReport, op: &str) -> Vec<String> {
    let mut v: Vec<String> = r
        .results
        .iter()
        .filter(|x| x.op == op)
        .map(|x| x.name.clone())
        .collect();
    v.sort();
    v.dedup();
    v
}

fn row<'a>(r: &'a BenchReport, name: &str, op: &str, threads: u32) -> &'a BenchResult {
    r.results
        .iter()
        .find(|x| x.name == name && x.op == op && x.threads == threads)
        .unwrap_or_else(|| panic!("no row {name} {op} x{threads}"))
}

#[test]
fn peer_suite() {
    // Without the peer this test would check only the floors and pass: it fails instead.
    crate::pmemblk::required_for_test();
    let (dir, r) = quick(vec![Suite::Peer]);
    assert_well_formed(&r, dir.path());
    assert!(
        !r.notes.iter().any(|n| n.contains("libpmemblk: not loaded")),
        "{:?}",
        r.notes
    );
    let want = [
        "floor-2fence",
        "floor-nt",
        "floor-paper",
        "libpmemblk",
        "nvramdisk-fast",
        "nvramdisk-paper",
    ];
    assert_eq!(names(&r, "write"), want);
    for name in &want {
        for threads in [1, 2] {
            row(&r, name, "write", threads);
        }
    }
    // The protocols' fence counts (docs/format.md 6.5), one 4 KiB block per write.
    assert_eq!(
        row(&r, "nvramdisk-fast", "write", 1).fences_per_op,
        Some(2.0)
    );
    assert_eq!(
        row(&r, "nvramdisk-paper", "write", 1).fences_per_op,
        Some(7.0)
    );
    let reads = names(&r, "read");
    assert!(reads.contains(&"raw-read".to_string()), "{reads:?}");
    assert!(reads.contains(&"raw-read-lookup".to_string()), "{reads:?}");
    assert_eq!(
        row(&r, "raw-read-lookup", "read", 1).baseline.as_deref(),
        Some("raw-read")
    );
    assert!(reads.contains(&"nvramdisk-fast".to_string()), "{reads:?}");
    assert!(reads.contains(&"libpmemblk".to_string()), "{reads:?}");
    // Every write and read is 4 KiB; the targets are computed from this run's rows.
    assert!(r.results.iter().all(|x| x.block_bytes == 4096));
    assert!(!r.targets.is_empty());
    for t in &r.targets {
        assert!(t.measured.is_finite() && t.measured > 0.0, "{t:?}");
        assert_eq!(
            t.met,
            if t.bound == "at least" {
                t.measured >= t.limit
            } else {
                t.measured <= t.limit
            }
        );
    }
    assert!(r.libpmemblk_persist_method.is_some());
}

#[test]
fn ordering_suite() {
    let (dir, r) = quick(vec![Suite::Ordering]);
    assert_well_formed(&r, dir.path());
    // Raw stores of 8 B and 4 KiB, and 4 KiB writes under every policy.
    let sizes: Vec<u64> = r.results.iter().map(|x| x.block_bytes).collect();
    assert!(sizes.contains(&8) && sizes.contains(&4096));
    use nvstack_pmem::ordering::{check_available, POLICIES};
    for p in POLICIES.iter().filter(|p| check_available(p).is_ok()) {
        assert!(
            r.results
                .iter()
                .any(|x| x.ordering.as_deref() == Some(p.name)),
            "no row under ordering policy {}",
            p.name
        );
    }
    // Per-range commit against global commit on 2 threads.
    assert!(r.results.iter().any(|x| x.threads == 2));
}

#[test]
fn record_suite() {
    let (dir, r) = quick(vec![Suite::Record]);
    assert_well_formed(&r, dir.path());
    let mut sizes: Vec<u64> = r.results.iter().map(|x| x.block_bytes).collect();
    sizes.dedup();
    assert_eq!(sizes.first(), Some(&4096));
    assert_eq!(sizes.last(), Some(&(256 << 10)));
    for name in ["nvramdisk-fast", "floor-nt"] {
        assert!(r
            .results
            .iter()
            .any(|x| x.name == name && x.block_bytes == 256 << 10));
    }
    // A 256 KiB atomic write is 64 blocks in one transaction: the fast protocol's record path,
    // 4 fences (docs/format.md 6.5).
    let big = r
        .results
        .iter()
        .find(|x| x.name == "nvramdisk-fast" && x.block_bytes == 256 << 10)
        .unwrap();
    assert_eq!(big.fences_per_op, Some(4.0));
    // Without the ordering guarantee nothing is fenced.
    let async_row = r
        .results
        .iter()
        .find(|x| x.name == "nvramdisk-fast-async" && x.block_bytes == 4096)
        .unwrap();
    assert_eq!(async_row.fences_per_op, Some(0.0));
}

#[test]
fn latency_suite() {
    let (dir, r) = quick(vec![Suite::Latency]);
    assert_well_formed(&r, dir.path());
    let xs: Vec<f64> = r.results.iter().filter_map(|x| x.x).collect();
    assert!(xs.contains(&1.0) && xs.contains(&3.0), "{xs:?}");
    assert!(r.dram_store_latency_ns > 0.0);
    // A pmem suite's header: its span, DRAM, flush and place; the host CPU line is the
    // simulator suite's.
    let table = format_table(&r);
    for line in ["\nspan ", "\ncpu flush ", "\nran on "] {
        assert!(table.contains(line), "no '{}' in\n{table}", line.trim());
    }
    assert!(!table.contains("\nhost cpu "), "{table}");
}

#[test]
fn allocation_suite() {
    let (dir, r) = quick(vec![Suite::Allocation]);
    assert_well_formed(&r, dir.path());
    let names = names(&r, "write");
    assert_eq!(names.len(), 2, "{names:?}");
    let sizes: Vec<u64> = r.results.iter().map(|x| x.block_bytes).collect();
    assert!(sizes.contains(&4096) && sizes.contains(&(1 << 20)));
}

#[test]
fn multiblock_suite() {
    let (dir, r) = quick(vec![Suite::Multiblock]);
    assert_well_formed(&r, dir.path());
    let xs: Vec<f64> = r.results.iter().filter_map(|x| x.x).collect();
    assert!(xs.contains(&2.0) && xs.contains(&64.0), "{xs:?}");
    for name in [
        "nvramdisk-fast-atomic",
        "nvramdisk-fast-singles",
        "floor-copy-2fence",
    ] {
        assert!(r.results.iter().any(|x| x.name == name), "no {name}");
    }
    // One transaction of n >= 2 blocks: the record path's 4 fences; n single writes: 2n
    // (docs/format.md 6.5).
    for x in r
        .results
        .iter()
        .filter(|x| x.name.starts_with("nvramdisk-fast"))
    {
        let n = x.x.unwrap();
        let want = if x.name.ends_with("atomic") {
            4.0
        } else {
            2.0 * n
        };
        assert_eq!(x.fences_per_op, Some(want), "{} x{n}", x.name);
    }
}

#[test]
fn mcsim_suite() {
    let (_dir, r) = quick(vec![Suite::Mcsim]);
    let names: Vec<&str> = r.results.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "mcsim-fine",
            "mcsim-fine-controller",
            "mcsim-global",
            "mcsim-global-controller",
            "mcsim-ideal",
            "mcsim-floor"
        ]
    );
    // The controller rows replay their run's requests: as many, and the commits with them.
    for (run, replay) in [(0, 1), (2, 3)] {
        let (run, replay) = (&r.results[run], &r.results[replay]);
        let requests = run.note.as_deref().and_then(|n| n.split(' ').next());
        let requests = requests.expect("the run's note starts with its requests");
        let note = replay.note.as_deref().unwrap_or_default();
        let replayed = format!("run's {requests} requests and ");
        assert!(requests.parse::<u64>().is_ok_and(|n| n > 0), "{run:?}");
        assert!(note.contains(&replayed), "{replayed} in {replay:?}");
        assert!(note.contains("controller alone"), "{replay:?}");
    }
    let ideal = &r.results[4];
    assert!(
        ideal
            .note
            .as_deref()
            .is_some_and(|n| n.contains("no memory controller")),
        "{ideal:?}"
    );
    for row in &r.results {
        assert!(
            row.ops_per_sec.is_finite() && row.ops_per_sec > 0.0,
            "{row:?}"
        );
        assert!(
            row.note.as_deref().is_some_and(|n| n.contains("requests")),
            "{row:?}"
        );
    }
    assert_eq!(
        r.targets.len(),
        1,
        "the speed target is checked on the fine row"
    );
    assert_eq!(r.targets[0].limit, 10e6);
    // Only what applies to the simulator: the host CPU, not the pmem suites' span, DRAM
    // persist cost, flush instructions or place.
    let table = format_table(&r);
    assert!(table.contains("\nhost cpu "), "{table}");
    assert!(table.contains("(simulated: no mapping) =="), "{table}");
    for line in [
        "span ",
        "DRAM:",
        "cpu flush ",
        "ran on ",
        "page size unknown",
    ] {
        assert!(!table.contains(line), "'{line}' in\n{table}");
    }
}

/// The commit sweep: every n of the quick points, each commit row beside the row that wrote
/// its blocks, and two fences per commit whatever n (the cache's own counter).
fn assert_commit_sweep(r: &BenchReport) {
    let commits: Vec<&BenchResult> = r
        .results
        .iter()
        .filter(|x| x.name == "ubj-commit")
        .collect();
    let ns: Vec<f64> = commits.iter().map(|x| x.x.unwrap()).collect();
    let want: Vec<f64> = (0..=10).map(|k| f64::from(1u32 << k)).collect();
    assert_eq!(ns, want);
    for c in &commits {
        let n = c.x.unwrap();
        assert_eq!(c.fences_per_op, Some(2.0), "{n} blocks");
        assert_eq!(
            c.baseline.as_deref(),
            Some("ubj-write-blocks"),
            "{n} blocks"
        );
        assert!(
            c.time_ratio.is_some(),
            "{n} blocks: no write row to compare"
        );
        assert_eq!(c.block_bytes, n as u64 * 4096);
    }
    let writes = r.results.iter().filter(|x| x.name == "ubj-write-blocks");
    assert_eq!(writes.clone().count(), want.len());
    // Writes fence nothing: their blocks persist at the commit's first fence.
    assert!(writes.into_iter().all(|x| x.fences_per_op == Some(0.0)));
}

/// The write cache's rows: its 512 B write beside nvramdisk's, and the four destage policies
/// on each shared trace, each against lrw, each saying what it destaged.
fn assert_write_cache_rows(r: &BenchReport) {
    // Sustained writes through a full write cache and UBJ, each against the backing file's
    // own O_DIRECT writes of the same requests in the same run.
    for pattern in ["seq", "rand"] {
        let floor = format!("backing-odirect-{pattern}");
        row(r, &floor, "write", 1);
        for dev in ["wc512", "wc4k", "ubj"] {
            let x = row(r, &format!("{dev}-sustained-{pattern}"), "write", 1);
            assert_eq!(x.baseline.as_deref(), Some(floor.as_str()));
            assert!(x.throughput_ratio.is_some(), "{dev} {pattern}");
            assert!(x.note.as_deref().unwrap().contains("no FUSE"));
        }
    }
    let w = row(r, "wc-write-512", "write", 1);
    assert_eq!(w.baseline.as_deref(), Some("nvramdisk-fast-512"));
    assert!(w.time_ratio.is_some() && w.block_bytes == 512);
    for stem in ["cloudphysicsio", "tpcc"] {
        for p in ["lrw", "lru", "clock", "random"] {
            let x = row(r, &format!("wc-{stem}-{p}"), "write", 1);
            assert!(
                x.note.as_deref().unwrap().contains("destaged"),
                "{stem} {p}"
            );
            assert!(x.time_ratio.is_some(), "{stem} {p}");
        }
    }
}

#[test]
fn nvcache_suite() {
    let (dir, r) = quick(vec![Suite::Nvcache]);
    assert_well_formed(&r, dir.path());
    // The shared traces are found (beside the checkout): no replay was skipped.
    assert!(
        !r.notes.iter().any(|n| n.contains("skipped")),
        "{:?}",
        r.notes
    );
    assert_eq!(
        leftovers(&nvcache::backing_dir()),
        0,
        "backing file left behind"
    );
    assert_commit_sweep(&r);
    // One block through UBJ, each row against nvramdisk's of the same op in the same run.
    for (name, op, fences) in [
        ("ubj-read-hit", "read", None),
        ("ubj-write", "write", Some(0.0)),
        ("ubj-write-commit", "write", Some(2.0)),
    ] {
        let x = row(&r, name, op, 1);
        assert_eq!(x.baseline.as_deref(), Some("nvramdisk-fast"), "{name}");
        assert!(
            x.time_ratio.is_some(),
            "{name}: no nvramdisk row to compare"
        );
        assert_eq!(x.fences_per_op, fences, "{name}");
        assert!(x.note.is_some(), "{name}: what is durable, said");
    }
    assert_eq!(
        row(&r, "nvramdisk-fast", "write", 1).fences_per_op,
        Some(2.0)
    );
    // The targets computed from the commit rows are counts: both met. The write cache's are a
    // time ratio and a throughput ratio, present but not asserted (tests never assert a
    // timing).
    let t: Vec<&Target> = r.targets.iter().filter(|t| t.suite == "nvcache").collect();
    assert_eq!(t.len(), 5, "{t:?}");
    assert!(t
        .iter()
        .any(|t| t.what.contains("sustained") && t.limit == 0.8));
    assert!(
        t.iter()
            .filter(|t| t.what.contains("fences"))
            .all(|t| t.met),
        "{t:?}"
    );
    assert!(
        t.iter()
            .any(|t| t.what.contains("write cache") && t.limit == 1.2),
        "{t:?}"
    );
    assert_write_cache_rows(&r);
    assert!(format_table(&r).contains("exactly 2.00"));
}

#[test]
fn nvcache_targets_fail_when_fences_vary_with_n_or_leave_two() {
    let t = Timing {
        ops_per_sec: 1.0,
        median_ns: 1.0,
        p99_ns: 1.0,
        ops: 1,
    };
    let rows = |fences: [f64; 3]| -> Vec<BenchResult> {
        [1.0, 64.0, 4096.0]
            .iter()
            .zip(fences)
            .map(|(&n, f)| {
                Row::new(Suite::Nvcache, "ubj-commit", "write", 4096, 1)
                    .x("blocks", n)
                    .fences(f)
                    .timed(&t, 4096)
            })
            .collect()
    };
    let met = |fences| -> Vec<bool> {
        nvcache::targets(&rows(fences))
            .iter()
            .map(|t| t.met)
            .collect()
    };
    assert_eq!(met([2.0, 2.0, 2.0]), [true, true]);
    assert_eq!(met([2.0, 2.0, 3.0]), [false, false], "grows with n");
    assert_eq!(
        met([1.0, 1.0, 1.0]),
        [true, false],
        "constant, but a fence short"
    );
    assert_eq!(met([1.0, 2.0, 2.0]), [false, false]);
}

/// The bench's files in `dir` (named nvstack-bench-PID-...).
fn leftovers(dir: &Path) -> usize {
    let mine = format!("nvstack-bench-{}-", std::process::id());
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().starts_with(&mine))
        })
        .count()
}

#[test]
fn bad_options_are_refused() {
    let bad = [
        BenchOptions {
            size_bytes: 256 << 20,
            ..Default::default()
        },
        BenchOptions {
            size_bytes: (1 << 30) + 4096,
            ..Default::default()
        },
        BenchOptions {
            ops: Some(0),
            ..Default::default()
        },
        BenchOptions {
            latency_multiple: 3.5,
            ..Default::default()
        },
        BenchOptions {
            suites: Vec::new(),
            ..Default::default()
        },
        BenchOptions {
            repeat: 0,
            ..Default::default()
        },
        BenchOptions {
            repeat: REPEAT_MAX + 1,
            ..Default::default()
        },
    ];
    for o in bad {
        assert!(
            matches!(run(&o, &nvstack_core::NoProgress), Err(Error::BadInput(_))),
            "{o:?}"
        );
    }
    assert!(Suite::parse_list("nope").is_err());
    assert_eq!(Suite::parse_list("all").unwrap().len(), SUITES.len());
}

#[test]
fn repeated_runs_report_per_row_medians() {
    let row = |name: &str, median: f64, ops: f64, fences: Option<f64>| {
        let t = Timing {
            ops_per_sec: ops,
            median_ns: median,
            p99_ns: median * 2.0,
            ops: 100,
        };
        let mut r = Row::new(Suite::Peer, name, "write", 4096, 1);
        if let Some(f) = fences {
            r = r.fences(f);
        }
        r.timed(&t, 4096)
    };
    let runs = vec![
        vec![row("a", 100.0, 10.0, Some(2.0)), row("b", 7.0, 1.0, None)],
        vec![row("a", 300.0, 30.0, Some(2.0)), row("b", 5.0, 3.0, None)],
        vec![row("a", 200.0, 20.0, Some(4.0)), row("b", 9.0, 2.0, None)],
    ];
    let mut runs = runs;
    for (k, run) in runs.iter_mut().enumerate() {
        // A ratio the suite set itself (the latency and ordering suites do).
        run[1].time_ratio = Some([1.5, 0.5, 1.0][k]);
    }
    let m = merge_runs(runs);
    assert_eq!(m[1].time_ratio, Some(1.0));
    assert_eq!(m.len(), 2);
    assert_eq!((m[0].name.as_str(), m[0].repeats), ("a", 3));
    assert_eq!(m[0].median_ns, 200.0);
    assert_eq!(m[0].p99_ns, 400.0);
    assert_eq!(m[0].ops_per_sec, 20.0);
    assert_eq!(m[0].mb_per_sec, 20.0 * 4096.0 / 1e6);
    assert_eq!(m[0].fences_per_op, Some(2.0));
    assert_eq!(m[0].median_ns_runs, vec![100.0, 300.0, 200.0]);
    assert_eq!(m[1].median_ns, 7.0);
    assert_eq!(m[0].time_ratio, None);
    assert_eq!(m[1].fences_per_op, None);
    assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
}

#[test]
fn flash_suite() {
    let (_dir, r) = quick(vec![Suite::Flash]);
    let names: Vec<&str> = r.results.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(names, ["flash-log-block", "flash-page"]);
    for row in &r.results {
        for v in [row.ops_per_sec, row.median_ns, row.p99_ns] {
            assert!(v.is_finite() && v > 0.0, "{}: {v}", row.name);
        }
        assert!(row.p99_ns >= row.median_ns, "{}", row.name);
        let note = row.note.as_deref().unwrap();
        assert!(note.contains("10000 host page ops"), "{note}");
        assert!(note.contains("MQSim not built or measured"), "{note}");
    }
    // The target, checked against the log-block row of this run (met or not).
    let t: Vec<&Target> = r.targets.iter().filter(|t| t.suite == "flash").collect();
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].measured, r.results[0].ops_per_sec);
    assert_eq!(
        (t[0].bound, t[0].limit),
        ("at least", flash::TARGET_OPS_PER_SEC)
    );
    assert!(format_table(&r).contains("log-block FTL page ops replayed per second"));
}
