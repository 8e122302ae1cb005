//! The simulator's command-line contract, with the real binary (`NVSTACK_BIN`, else the one
//! cargo built): `sim cache` on hand-made DiskSim traces whose answers are worked out by hand and
//! on the shared tpcc-small trace, its `--json` fields and their consistency, every bad argument
//! exiting 2 with a message naming what is wrong, `sim lifetimes` by hand, and a small
//! `sim sweep` that must write every table, CSV row and figure.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{bin, f, json, run, u};

fn tpcc() -> String {
    nvstack_test_support::shared_trace("tpcc-small.trace")
        .to_string_lossy()
        .into_owned()
}

/// A DiskSim trace (`time_ns device lsa sectors type`, type 0 write, 1 read) in a temp dir.
fn disksim(dir: &tempfile::TempDir, lines: &[(u64, u64, u64, u8)]) -> String {
    let p = dir.path().join("hand.trace");
    let text: String = lines
        .iter()
        .map(|(t, lsa, sectors, ty)| format!("{t} 0 {lsa} {sectors} {ty}\n"))
        .collect();
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

/// A plain write-back LRU cache of two 4 KiB blocks (`--model volatile --nvram 0
/// --delayed-writeback off`), worked out by hand. A block is 8 sectors.
#[test]
fn plain_lru_by_hand() {
    let dir = tempfile::tempdir().unwrap();
    let trace = disksim(
        &dir,
        &[
            (0, 0, 8, 0),   // write 0: miss                          cache [0d]
            (1, 8, 8, 1),   // read 1: miss                           cache [0d 1]
            (2, 0, 8, 1),   // read 0: hit                            cache [1 0d]
            (3, 16, 8, 0),  // write 2: miss, evicts clean 1          cache [0d 2d]
            (4, 24, 16, 0), // write 3, 4: misses, evict 0d and 2d   cache [3d 4d]  2 write-backs
            (5, 25, 1, 1),  // read 3 (one sector): hit               cache [4d 3d]
            (6, 100, 0, 0), // size 0: touches nothing
            (7, 39, 2, 0),  // write 4 (hit), then 5: miss, evicts 3d cache [4d 5d]  1 write-back
        ],
    );
    let v = json(&[
        "sim",
        "cache",
        "--trace",
        &trace,
        "--format",
        "disksim",
        "--model",
        "volatile",
        "--volatile",
        "8KiB",
        "--nvram",
        "0",
        "--delayed-writeback",
        "off",
        "--json",
    ]);
    let got: Vec<u64> = [
        "requests",
        "block_accesses",
        "reads",
        "writes",
        "misses",
        "read_misses",
        "write_misses",
        "hits_volatile",
        "writebacks",
        "writebacks_eviction",
        "dirty_at_end",
        "nvram_accesses",
    ]
    .iter()
    .map(|k| u(&v, k))
    .collect();
    assert_eq!(got, [8, 9, 3, 6, 6, 1, 5, 3, 3, 3, 2, 0], "{v}");
    assert!((f(&v, "miss_ratio") - 6.0 / 9.0).abs() < 1e-12, "{v}");

    // Six blocks hold all six distinct blocks (0 to 5): every first touch misses, nothing is
    // evicted, the second write of block 4 absorbs its first, and the five written blocks (0, 2,
    // 3, 4, 5) are dirty at the end.
    let v = json(&[
        "sim",
        "cache",
        "--trace",
        &trace,
        "--format",
        "disksim",
        "--model",
        "volatile",
        "--volatile",
        "24KiB",
        "--nvram",
        "0",
        "--json",
    ]);
    assert_eq!(
        (
            u(&v, "misses"),
            u(&v, "writebacks"),
            u(&v, "dirty_at_end"),
            u(&v, "overwrites_absorbed")
        ),
        (6, 0, 5, 1),
        "{v}"
    );
}

/// The `--json` contract on the shared tpcc-small trace (counts from shared/traces/README.md
/// expanded to 4 KiB blocks), and the fields' consistency for every model.
#[test]
fn tpcc_json_fields_for_every_model() {
    let t = tpcc();
    for (model, policy, nvram) in [
        ("volatile", "lru", "0"),
        ("write-aside", "lru", "1MiB"),
        ("unified", "random", "1MiB"),
        ("unified", "omniscient", "1MiB"),
    ] {
        let v = json(&[
            "sim",
            "cache",
            "--trace",
            &t,
            "--format",
            "disksim",
            "--model",
            model,
            "--policy",
            policy,
            "--volatile",
            "1MiB",
            "--nvram",
            nvram,
            "--json",
        ]);
        let ctx = format!("{model}/{policy}: {v}");
        assert_eq!(u(&v, "requests"), 6999, "{ctx}");
        assert_eq!(u(&v, "block_accesses"), 20669, "{ctx}");
        assert_eq!(u(&v, "reads"), 12674, "{ctx}");
        assert_eq!(u(&v, "writes"), 7995, "{ctx}");
        let misses = u(&v, "misses");
        assert_eq!(
            misses,
            u(&v, "read_misses") + u(&v, "write_misses"),
            "{ctx}"
        );
        assert!(misses <= 20669, "{ctx}");
        assert!(
            (f(&v, "miss_ratio") - misses as f64 / 20669.0).abs() < 1e-12,
            "{ctx}"
        );
        // Every block write ends absorbed by a later write, written back, or dirty at the end.
        assert_eq!(
            u(&v, "overwrites_absorbed") + u(&v, "writebacks") + u(&v, "dirty_at_end"),
            7995,
            "{ctx}"
        );
        let nv = u(&v, "nvram_accesses");
        assert_eq!(nv, u(&v, "nvram_reads") + u(&v, "nvram_writes"), "{ctx}");
        if model == "volatile" {
            assert_eq!(nv, 0, "{ctx}");
        } else {
            // Every write goes to the NVRAM in both NVRAM models.
            assert!(u(&v, "nvram_writes") >= 7995, "{ctx}");
        }
    }
}

#[test]
fn bad_arguments_exit_2_naming_what_is_wrong() {
    let t = tpcc();
    let base = ["sim", "cache", "--trace", &t, "--format", "disksim"];
    for (extra, says) in [
        (
            &["--model", "volatile", "--volatile", "5000", "--nvram", "0"][..],
            "--volatile 5000: not a multiple of the block size",
        ),
        (
            &[
                "--model",
                "unified",
                "--volatile",
                "8KiB",
                "--nvram",
                "6KiB",
            ][..],
            "--nvram 6144: not a multiple of the block size",
        ),
        (
            &[
                "--model",
                "volatile",
                "--volatile",
                "8KiB",
                "--nvram",
                "4KiB",
            ][..],
            "requires --nvram 0",
        ),
        (
            &[
                "--model",
                "volatile",
                "--volatile",
                "8KiB",
                "--nvram",
                "0",
                "--policy",
                "random",
            ][..],
            "--policy random",
        ),
        (
            &[
                "--model",
                "unified",
                "--volatile",
                "8KiB",
                "--nvram",
                "8KiB",
                "--delayed-writeback",
                "10",
            ][..],
            "--delayed-writeback",
        ),
        (
            &[
                "--model",
                "write-aside",
                "--volatile",
                "8KiB",
                "--nvram",
                "8KiB",
                "--delayed-writeback",
                "off",
            ][..],
            "--delayed-writeback",
        ),
        (
            &[
                "--model",
                "volatile",
                "--volatile",
                "8KiB",
                "--nvram",
                "0",
                "--delayed-writeback",
                "soon",
            ][..],
            "--delayed-writeback 'soon'",
        ),
        (
            &["--model", "lfu", "--volatile", "8KiB", "--nvram", "0"][..],
            "--model",
        ),
        (
            &["--model", "volatile", "--volatile", "8KB", "--nvram", "0"][..],
            "--volatile",
        ),
    ] {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let o = run(&args);
        assert_eq!(o.code, 2, "{args:?}: {}", o.stderr);
        assert!(o.stderr.contains(says), "{args:?}: {}", o.stderr);
        assert!(o.stdout.is_empty(), "{args:?}: {}", o.stdout);
    }
    let o = run(&[
        "sim",
        "cache",
        "--trace",
        "/nonexistent/trace",
        "--format",
        "disksim",
        "--model",
        "volatile",
        "--volatile",
        "8KiB",
        "--nvram",
        "0",
    ]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("/nonexistent/trace"), "{}", o.stderr);
    for args in [
        &[
            "sim",
            "lifetimes",
            "--trace",
            &t,
            "--format",
            "disksim",
            "--delays",
            "5x",
        ][..],
        &[
            "sim",
            "nvram-size",
            "--trace",
            &t,
            "--format",
            "disksim",
            "--nvram",
            "1MiB,3000",
        ][..],
        &[
            "sim",
            "sweep",
            "--trace",
            "no-format",
            "--output",
            "/tmp/unused",
        ][..],
        &[
            "sim",
            "sweep",
            "--trace",
            "x.csv:vscsi",
            "--output",
            "/tmp/unused",
        ][..],
        &["sim", "sweep", "--seeds", "0", "--output", "/tmp/unused"][..],
    ] {
        let o = run(args);
        assert_eq!(o.code, 2, "{args:?}: {}", o.stderr);
        assert!(!o.stderr.is_empty(), "{args:?}");
    }
    assert!(
        !Path::new("/tmp/unused").exists(),
        "a bad sweep made its folder"
    );
}

/// Byte lifetimes by hand: block A written at 0 s and 2 s, B at 3 s and 100 s, C at 10 s; the
/// trace ends at 100 s. With delay d a version dies within d if it is overwritten less than d
/// after it was written, is flushed if it lives past d before the trace ends, and remains
/// otherwise.
#[test]
fn lifetimes_by_hand() {
    let dir = tempfile::tempdir().unwrap();
    const S: u64 = 1_000_000_000;
    let trace = disksim(
        &dir,
        &[
            (0, 0, 8, 0),
            (2 * S, 0, 8, 0),
            (3 * S, 8, 8, 0),
            (10 * S, 16, 8, 0),
            (10 * S, 16, 8, 1),
            (100 * S, 8, 8, 0),
        ],
    );
    let v = json(&[
        "sim",
        "lifetimes",
        "--trace",
        &trace,
        "--format",
        "disksim",
        "--delays",
        "1s,5s,200s",
        "--json",
    ]);
    assert_eq!(u(&v, "block_accesses"), 6, "{v}");
    assert_eq!(u(&v, "writes"), 5, "{v}");
    assert_eq!(u(&v, "distinct_written"), 3, "{v}");
    assert_eq!(u(&v, "overwritten"), 2, "{v}");
    let list = |k: &str| -> Vec<u64> {
        v[k].as_array()
            .unwrap_or_else(|| panic!("no '{k}' in {v}"))
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect()
    };
    assert_eq!(list("delays_ns"), [S, 5 * S, 200 * S]);
    assert_eq!(list("died_within"), [0, 1, 2], "{v}");
    assert_eq!(list("flushed"), [4, 3, 0], "{v}");
    assert_eq!(list("remaining"), [1, 1, 3], "{v}");
    let net: Vec<f64> = v["net_write_traffic"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(net, [1.0, 0.8, 0.6], "{v}");
}

fn svgs(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "svg"))
        .collect();
    v.sort();
    for p in &v {
        let text = std::fs::read_to_string(p).unwrap();
        assert!(text.contains("<svg") && text.contains("</svg>"), "{p:?}");
        assert!(
            text.contains("<polyline") || text.contains("<path"),
            "{p:?}"
        );
    }
    v
}

/// A sweep over tpcc-small on a small grid writes the CSV (every result: cache runs, lifetime
/// points, LFS comparisons), the JSON, the tables of every analysis, and every figure.
#[test]
fn a_small_sweep_writes_every_table_and_figure() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sweep");
    let trace = format!("{}:disksim", tpcc());
    let o = run(&[
        "sim",
        "sweep",
        "--trace",
        &trace,
        "--nvram",
        "0,64KiB,1MiB",
        "--seeds",
        "2",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    for title in [
        "Figure 2",
        "Table 2",
        "Figure 3",
        "Figure 4",
        "Figures 5 and 6",
        "Section 2.6",
        "Tables 3 and 4",
    ] {
        assert!(o.stdout.contains(title), "no {title} in:\n{}", o.stdout);
    }
    let tables = std::fs::read_to_string(out.join("tables.txt")).unwrap();
    assert_eq!(tables, o.stdout);
    // Within a table every row is one configuration: no row twice.
    for section in tables.split("\n== ") {
        let mut rows: Vec<&str> = section
            .lines()
            .filter(|l| l.starts_with("tpcc-small.trace "))
            .collect();
        let n = rows.len();
        rows.sort();
        rows.dedup();
        assert_eq!(rows.len(), n, "a row repeats in:\n{section}");
    }

    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("sweep.json")).unwrap()).unwrap();
    let points = v["points"].as_array().unwrap();
    let csv = std::fs::read_to_string(out.join("sweep.csv")).unwrap();
    check_sweep_csv(&csv, &v);
    // Per NVRAM size: Figure 3 (1 run); Figure 4 for two models x (lru, omniscient, 2 seeds of
    // random), each LRU run filed a second time under Figures 5; the volatile model at 8 MiB
    // and volatile + unified at 16 MiB for Figures 5 and 6.
    let per_size = 1 + 2 * 4 + 2 + 1 + 2;
    assert_eq!(points.len(), 3 * per_size, "{}", points.len());
    let lfs = v["lfs"].as_array().unwrap();
    assert_eq!(lfs.len(), 4);
    for r in lfs {
        let (a, b) = (&r["without_buffer"], &r["with_buffer"]);
        assert!(u(b, "disk_writes") <= u(a, "disk_writes"), "{r}");
    }
    let figs = svgs(&out);
    let names: Vec<String> = figs
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for want in [
        "fig2-lifetimes.svg",
        "fig3-omniscient.svg",
        "fig4-policies-unified-tpcc-small_trace.svg",
        "fig4-policies-write-aside-tpcc-small_trace.svg",
        "fig5-models-tpcc-small_trace.svg",
        "fig6-memory-tpcc-small_trace.svg",
        "sec2.6-bus-tpcc-small_trace.svg",
    ] {
        assert!(names.iter().any(|n| n == want), "no {want} in {names:?}");
    }
}

/// One CSV line's cells (a cell may be quoted, with `""` for a quote).
fn csv_cells(line: &str) -> Vec<String> {
    let mut cells = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                cells.last_mut().unwrap().push('"');
            }
            ('"', _) => quoted = !quoted,
            (',', false) => cells.push(String::new()),
            _ => cells.last_mut().unwrap().push(c),
        }
    }
    assert!(!quoted, "unterminated quote in {line}");
    cells
}

/// A JSON object's scalar fields, a nested object's fields named `object_field`.
fn flat_json(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) {
    for (k, x) in v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
    {
        let name = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}_{k}")
        };
        if x.is_object() {
            flat_json(&name, x, out);
        } else {
            out.push((name, x.clone()));
        }
    }
}

/// A CSV cell holds the JSON value: the same integer, string or boolean, a real to six
/// decimals, `off` or `NA` for null.
fn cell_matches(cell: &str, want: &Value) -> bool {
    match want {
        Value::Null => cell == "off" || cell == "NA",
        Value::Bool(b) => cell == b.to_string(),
        Value::String(s) => cell == s,
        Value::Number(n) if n.is_u64() => cell == n.to_string(),
        Value::Number(n) => cell
            .parse::<f64>()
            .is_ok_and(|c| (c - n.as_f64().unwrap()).abs() <= 1e-6),
        _ => false,
    }
}

/// sweep.csv holds every result of sweep.json: one `cache` row per point, one `lifetime` row
/// per trace and write-back delay (Figure 2), one `lfs` row per LFS comparison (Tables 3 and
/// 4), in that order. Every row has the header's column count; a row's non-empty cells are
/// exactly its kind's columns (the JSON object's fields, nested objects' as `object_field`, a
/// lifetime's per-delay lists one entry per row, `delays_ns` as `delay_ns`), and each holds the
/// JSON's value.
fn check_sweep_csv(csv: &str, v: &Value) {
    let mut lines = csv.lines();
    let header = csv_cells(lines.next().expect("a header"));
    assert_eq!(header[0], "kind", "{header:?}");
    let mut sorted = header.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), header.len(), "a column twice: {header:?}");
    let rows: Vec<Vec<String>> = lines.map(csv_cells).collect();
    for r in &rows {
        assert_eq!(r.len(), header.len(), "{r:?}");
    }

    // What each row should hold, from the JSON.
    let mut want: Vec<(&str, Vec<(String, Value)>)> = Vec::new();
    for p in v["points"].as_array().unwrap() {
        let mut f = Vec::new();
        flat_json("", p, &mut f);
        want.push(("cache", f));
    }
    for l in v["lifetimes"].as_array().unwrap() {
        let delays = l["delays_ns"].as_array().unwrap().len();
        assert!(delays > 0, "{l}");
        for i in 0..delays {
            let f = l
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, x)| match x.as_array() {
                    Some(a) => {
                        assert_eq!(a.len(), delays, "{k} in {l}");
                        let k = if k == "delays_ns" { "delay_ns" } else { k };
                        (k.to_string(), a[i].clone())
                    }
                    None => (k.clone(), x.clone()),
                })
                .collect();
            want.push(("lifetime", f));
        }
    }
    for r in v["lfs"].as_array().unwrap() {
        let mut f = Vec::new();
        flat_json("", r, &mut f);
        want.push(("lfs", f));
    }
    assert_eq!(rows.len(), want.len(), "CSV rows against JSON results");
    for kind in ["cache", "lifetime", "lfs"] {
        assert!(
            rows.iter().any(|r| r[0] == kind),
            "no {kind} row in sweep.csv"
        );
    }
    for (row, (kind, fields)) in rows.iter().zip(&want) {
        assert_eq!(row[0], *kind, "{row:?}");
        let mut filled: Vec<&str> = header
            .iter()
            .zip(row)
            .skip(1)
            .filter(|(_, c)| !c.is_empty())
            .map(|(h, _)| h.as_str())
            .collect();
        filled.sort();
        let mut names: Vec<&str> = fields.iter().map(|(k, _)| k.as_str()).collect();
        names.sort();
        assert_eq!(
            filled, names,
            "{kind} row's filled columns against its JSON fields"
        );
        for (k, x) in fields {
            let at = header.iter().position(|h| h == k).unwrap();
            assert!(
                cell_matches(&row[at], x),
                "{kind} row, column {k}: CSV {} but JSON {x}",
                row[at]
            );
        }
    }
}

/// `--plot DIR` of an analysis writes its figure; the `--json` of nvram-size is one point per
/// size and net write traffic never rises with the omniscient buffer's size.
#[test]
fn an_analysis_plots_and_reports_json() {
    let dir = tempfile::tempdir().unwrap();
    let t = tpcc();
    let plots = dir.path().join("plots");
    let v = json(&[
        "sim",
        "nvram-size",
        "--trace",
        &t,
        "--format",
        "disksim",
        "--nvram",
        "0,64KiB,1MiB,16MiB",
        "--json",
        "--plot",
        plots.to_str().unwrap(),
    ]);
    let text = v.to_string();
    assert!(!svgs(&plots).is_empty(), "no figure in {plots:?}");
    let points = v
        .as_array()
        .unwrap_or_else(|| panic!("no points in {text}"));
    assert_eq!(points.len(), 4, "{text}");
    let net: Vec<f64> = points
        .iter()
        .map(|p| p["net_write_traffic"].as_f64().unwrap())
        .collect();
    assert!((net[0] - 1.0).abs() < 1e-12, "{net:?}");
    assert!(net.windows(2).all(|w| w[1] <= w[0]), "{net:?}");
}

/// A trace is streamed, never loaded: over a 61 MB trace of 3 million requests on 64 blocks,
/// `stat`, `cache` (volatile, with its cleaner), `lifetimes` and `lfs` each run with their
/// address space limited to 32 MiB (`ulimit -v`), less than the file, and far less than 3
/// million accesses kept at even 16 bytes each.
#[test]
fn a_long_trace_runs_in_memory_proportional_to_its_blocks() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.trace");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    for i in 0..3_000_000u64 {
        writeln!(w, "{} 0 {} 8 {}", i * 1000, (i % 64) * 8, i % 2).unwrap();
    }
    w.into_inner().unwrap().sync_all().unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(size > 60_000_000, "{size}");
    let p = path.to_str().unwrap();
    for args in [
        format!("sim stat --trace {p} --format disksim"),
        format!(
            "sim cache --trace {p} --format disksim --model volatile --volatile 1MiB --nvram 0"
        ),
        format!("sim lifetimes --trace {p} --format disksim"),
        format!("sim lfs --trace {p} --format disksim --fsync-every 7"),
    ] {
        let o = Command::new("bash")
            .arg("-c")
            .arg(format!("ulimit -v 32768 && exec \"$0\" {args} --json"))
            .arg(bin())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{args}: {stderr}");
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["block_accesses"].as_u64(), Some(3_000_000), "{args}: {v}");
    }
}
