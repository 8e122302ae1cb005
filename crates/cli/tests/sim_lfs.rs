//! `nvstack sim lfs` as a program: the real binary (`NVSTACK_BIN`, else the one cargo built)
//! on the shared tpcc-small trace and on small DiskSim traces written here whose answers are
//! worked out by hand, checking exit codes, the JSON document's fields and their consistency,
//! and that every bad argument exits 2 with a message naming its flag.

use serde_json::Value;
use std::path::PathBuf;

mod common;
use common::{json, run};

fn tpcc() -> PathBuf {
    nvstack_test_support::shared_trace("tpcc-small.trace")
}

fn u(v: &Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} missing or not a count in {v}"))
}

fn f(v: &Value, field: &str) -> f64 {
    v[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} missing or not a number in {v}"))
}

/// The bookkeeping every run's counts must satisfy.
fn check_run(s: &Value, block_bytes: u64, block_writes: u64, syncs: u64) {
    let partial = u(s, "partial_segments");
    assert_eq!(
        partial,
        u(s, "partial_sync") + u(s, "partial_timeout") + u(s, "partial_final")
    );
    assert_eq!(u(s, "full_segments") + partial, u(s, "disk_writes"));
    assert_eq!(u(s, "block_writes"), block_writes);
    assert_eq!(
        block_writes,
        u(s, "overwrites_absorbed") + u(s, "data_blocks_written")
    );
    assert_eq!(
        u(s, "data_bytes"),
        u(s, "data_blocks_written") * block_bytes
    );
    assert_eq!(
        u(s, "data_bytes"),
        u(s, "full_data_bytes") + u(s, "partial_data_bytes")
    );
    assert_eq!(
        u(s, "overhead_bytes"),
        u(s, "metadata_bytes") + u(s, "summary_bytes")
    );
    assert_eq!(
        u(s, "bytes_written"),
        u(s, "data_bytes") + u(s, "overhead_bytes")
    );
    assert_eq!(u(s, "syncs"), syncs);
    assert_eq!(
        syncs,
        u(s, "syncs_empty") + u(s, "syncs_held") + u(s, "partial_sync")
    );
    let writes = u(s, "disk_writes") as f64;
    if writes > 0.0 {
        let pct = 100.0 * partial as f64 / writes;
        assert!((f(s, "pct_partial") - pct).abs() < 1e-9);
        let pct_sync = 100.0 * u(s, "partial_sync") as f64 / writes;
        assert!((f(s, "pct_partial_sync") - pct_sync).abs() < 1e-9);
    }
    // Table 4's averages are null (the paper's NA) exactly when there is nothing to average.
    assert_eq!(s["kib_per_partial"].is_null(), partial == 0);
    assert_eq!(
        s["kib_per_sync_partial"].is_null(),
        u(s, "partial_sync") == 0
    );
    if partial > 0 {
        let kib = u(s, "partial_data_bytes") as f64 / 1024.0 / partial as f64;
        assert!((f(s, "kib_per_partial") - kib).abs() < 1e-9);
    }
}

#[test]
fn tpcc_small_with_a_half_megabyte_buffer() {
    let trace = tpcc();
    let v = json(&[
        "sim",
        "lfs",
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "disksim",
        "--fsync-every",
        "5",
        "--nvram",
        "512KiB",
        "--json",
    ]);
    // The trace's README: 6,999 requests, 2,618 writes; DiskSim has no sync flags, so the
    // syncs are exactly every 5th write request.
    assert_eq!(u(&v, "requests"), 6999);
    assert_eq!(u(&v, "write_requests"), 2618);
    assert_eq!(u(&v, "sync_requests_flagged"), 0);
    assert_eq!(u(&v, "syncs"), 2618 / 5);
    assert_eq!(u(&v, "block_bytes"), 4096);
    assert_eq!(u(&v, "segment_bytes"), 512 << 10);
    assert_eq!(u(&v, "nvram_bytes"), 512 << 10);
    assert_eq!(u(&v, "fsync_every"), 5);
    // 512 KiB - 4 KiB metadata - 512 B summary: 126 whole 4 KiB blocks.
    assert_eq!(u(&v["geometry"], "segment_data_blocks"), 126);
    let (bw, syncs) = (u(&v, "block_writes"), u(&v, "syncs"));
    assert_eq!(
        u(&v, "block_accesses"),
        u(&v, "block_reads") + bw,
        "every access is a read or a write"
    );
    let (a, b) = (&v["without_buffer"], &v["with_buffer"]);
    check_run(a, 4096, bw, syncs);
    check_run(b, 4096, bw, syncs);
    assert_eq!(u(a, "nvram_bytes"), 0);
    assert_eq!(u(b, "nvram_bytes"), 512 << 10);
    // A buffer of one segment never forces a partial before the end; it never adds disk
    // writes; without it, syncs every 5 writes of this trace force partial segments.
    assert_eq!(u(b, "partial_sync") + u(b, "partial_timeout"), 0);
    assert!(u(b, "disk_writes") <= u(a, "disk_writes"));
    assert!(u(a, "partial_sync") > 0);
    // The trace spans 136 ms: no 30-second timeout can fire.
    assert_eq!(u(a, "partial_timeout"), 0);
    let (wa, wb) = (u(a, "disk_writes") as f64, u(b, "disk_writes") as f64);
    assert!((f(&v, "disk_write_reduction_pct") - 100.0 * (wa - wb) / wa).abs() < 1e-9);
}

#[test]
fn the_table_names_both_runs() {
    let trace = tpcc();
    let o = run(&[
        "sim",
        "lfs",
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "disksim",
        "--fsync-every",
        "8",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    for want in [
        "without buffer",
        "with buffer",
        "disk write accesses",
        "Table 3",
        "Table 4",
        "512KiB",
    ] {
        assert!(o.stdout.contains(want), "no '{want}' in\n{}", o.stdout);
    }
}

/// A DiskSim trace in a temporary directory: (time_ns, first 4 KiB block, blocks) writes.
fn disksim(dir: &tempfile::TempDir, name: &str, writes: &[(u64, u64, u64)]) -> PathBuf {
    let p = dir.path().join(name);
    let text: String = writes
        .iter()
        .map(|&(t, block, n)| format!("{t} 0 {} {} 0\n", block * 8, n * 8))
        .collect();
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn hand_worked_syncs_end_to_end() {
    // 32 KiB segments of 4 KiB blocks: 32768 - 4096 - 512 = 28160 bytes, 6 data blocks.
    // A sync after every write request. Requests: {0,1,2}, {0}, {10,11}, {20..=26}.
    // Without a buffer: sync partials {0,1,2}, {0}, {10,11}; 20..=25 fill a full segment;
    // the last sync writes {26}: 5 disk writes, 1 full, 4 sync partials, 13 data blocks.
    // With 16 KiB (4 blocks) of NVRAM: {0,1,2} held, {0,1,2} (0 absorbed) held,
    // {0,1,2,10,11} = 5 > 4 forces a partial; the full segment; {26} held, and is the final
    // flush: 3 disk writes, 1 full, 1 sync partial, 1 final, 12 data blocks. 40 % saved.
    let dir = tempfile::tempdir().unwrap();
    let t = disksim(
        &dir,
        "syncs.trace",
        &[(0, 0, 3), (1, 0, 1), (2, 10, 2), (3, 20, 7)],
    );
    let v = json(&[
        "sim",
        "lfs",
        "--trace",
        t.to_str().unwrap(),
        "--format",
        "disksim",
        "--segment-size",
        "32KiB",
        "--nvram",
        "16KiB",
        "--fsync-every",
        "1",
        "--json",
    ]);
    let (a, b) = (&v["without_buffer"], &v["with_buffer"]);
    check_run(a, 4096, 13, 4);
    check_run(b, 4096, 13, 4);
    let c = |s: &Value| {
        [
            "disk_writes",
            "full_segments",
            "partial_sync",
            "partial_timeout",
            "partial_final",
            "data_blocks_written",
        ]
        .map(|k| u(s, k))
    };
    assert_eq!(c(a), [5, 1, 4, 0, 0, 13]);
    assert_eq!(c(b), [3, 1, 1, 0, 1, 12]);
    assert_eq!((u(b, "syncs_held"), u(b, "overwrites_absorbed")), (3, 1));
    // Without: 5 segments of 4096 + 512 overhead; 4 partials hold 3+1+2+1 = 7 blocks.
    assert_eq!(u(a, "overhead_bytes"), 5 * 4608);
    assert_eq!(u(a, "partial_overhead_bytes"), 4 * 4608);
    assert_eq!(f(a, "kib_per_sync_partial"), 7.0);
    assert_eq!(f(&v, "disk_write_reduction_pct"), 40.0);
}

#[test]
fn hand_worked_timeout_end_to_end() {
    // Default 512 KiB segments and 30 s timeout, no syncs. Writes of block 1 at 0 s, block 2
    // at 2 s, block 3 at 35 s. Cleaner ticks at 5, 10, ... s: the first strictly more than
    // 30 s after 0 s is 35 s, due before the write at 35 s: a timeout partial {1,2}; {3} is the
    // final flush. With 4 KiB of NVRAM block 1 is durable and block 2 ages from 2 s: the tick
    // at 35 s still fires. With 8 KiB everything pending is durable: one final {1,2,3}.
    let dir = tempfile::tempdir().unwrap();
    let s = 1_000_000_000u64;
    let t = disksim(
        &dir,
        "timeout.trace",
        &[(0, 1, 1), (2 * s, 2, 1), (35 * s, 3, 1)],
    );
    let run = |nvram: &str, timeout: &str| {
        json(&[
            "sim",
            "lfs",
            "--trace",
            t.to_str().unwrap(),
            "--format",
            "disksim",
            "--nvram",
            nvram,
            "--timeout",
            timeout,
            "--json",
        ])
    };
    let v = run("4KiB", "30");
    assert_eq!(u(&v["without_buffer"], "partial_timeout"), 1);
    assert_eq!(u(&v["without_buffer"], "partial_final"), 1);
    assert_eq!(u(&v["with_buffer"], "partial_timeout"), 1);
    assert_eq!(u(&v["without_buffer"], "partial_timeout_data_bytes"), 8192);
    let v = run("8KiB", "30");
    assert_eq!(u(&v["without_buffer"], "disk_writes"), 2);
    assert_eq!(u(&v["with_buffer"], "disk_writes"), 1);
    assert_eq!(u(&v["with_buffer"], "partial_final_data_bytes"), 3 * 4096);
    assert_eq!(f(&v, "disk_write_reduction_pct"), 50.0);
    let v = run("0", "off");
    assert!(v["timeout_ns"].is_null());
    assert_eq!(u(&v["without_buffer"], "disk_writes"), 1);
    assert_eq!(v["without_buffer"], {
        let mut w = v["with_buffer"].clone();
        w["nvram_bytes"] = 0.into();
        w
    });
}

#[test]
fn bad_arguments_exit_2_naming_the_flag() {
    let trace = tpcc();
    let base = [
        "sim",
        "lfs",
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "disksim",
    ];
    let cases: &[(&[&str], &str)] = &[
        (&["--segment-size", "100000"], "--segment-size"),
        (&["--segment-size", "8KiB"], "--segment-size"),
        (&["--segment-size", "0"], "--segment-size"),
        (&["--segment-size", "2GiB"], "--segment-size"),
        (&["--segment-size", "12XB"], "--segment-size"),
        (&["--metadata-size", "0"], "--metadata-size"),
        (&["--metadata-size", "1MiB"], "--metadata-size"),
        (&["--summary-size", "1MiB"], "--summary-size"),
        (&["--summary-size=-1"], "--summary-size"),
        (&["--nvram", "1000"], "--nvram"),
        (&["--nvram", "2048GiB"], "--nvram"),
        (&["--fsync-every", "0"], "--fsync-every"),
        (&["--fsync-every=-3"], "--fsync-every"),
        (&["--timeout", "1.5"], "--timeout"),
        (&["--timeout", "999999999"], "--timeout"),
        (&["--block-size", "1000"], "--block-size"),
        (&["--block-size", "8192", "--nvram", "4KiB"], "--nvram"),
    ];
    for (extra, flag) in cases {
        let args: Vec<&str> = base.iter().chain(extra.iter()).copied().collect();
        let o = run(&args);
        assert_eq!(o.code, 2, "{extra:?}: exit {} ({})", o.code, o.stderr);
        assert!(
            o.stderr.contains(flag),
            "{extra:?}: the message does not name {flag}: {}",
            o.stderr
        );
    }
    // A trace line the reader refuses is bad input too, named with its line number.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.trace");
    std::fs::write(&p, "0 0 0 8 0\n1 0 0 8 7\n").unwrap();
    let o = run(&[
        "sim",
        "lfs",
        "--trace",
        p.to_str().unwrap(),
        "--format",
        "disksim",
    ]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains(":2"), "{}", o.stderr);
}
