//! `nvstack flash create|stat` and `nvstack sim flash` with the real binary: the default
//! device, refusals with exit 2 naming the flag or the damage (the file left as it was), and a
//! replay of the shared tpcc-small trace whose counts are checked against the trace itself and
//! against each other (programs = host writes + copies; time and energy from the counts).

use serde_json::Value;
use std::os::unix::fs::FileExt;
use std::path::Path;

mod common;
use common::{f, json, run, u};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `nvstack ARGS` must exit 2 with `what` in its message.
fn refused(args: &[&str], what: &str) {
    let r = run(args);
    assert_eq!(r.code, 2, "{}: {}{}", r.what, r.stdout, r.stderr);
    assert!(r.stderr.contains(what), "{}: {}", r.what, r.stderr);
}

#[test]
fn create_and_stat_the_default_device() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("f.img");
    let r = run(&["flash", "create", s(&img)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("4096 blocks of 32 pages of 512 + 16 bytes"),
        "{}",
        r.stdout
    );
    let v = json(&["flash", "stat", s(&img), "--json"]);
    let g = &v["geometry"];
    assert_eq!(
        (
            u(g, "page_data_bytes"),
            u(g, "page_spare_bytes"),
            u(g, "pages_per_block")
        ),
        (512, 16, 32)
    );
    assert_eq!((u(g, "blocks"), u(g, "spare_blocks")), (4096, 66));
    assert_eq!(v["ftl"]["kind"], "log-block");
    assert_eq!(u(&v["ftl"], "log_blocks"), 64);
    assert_eq!((u(&v, "page_programs"), u(&v, "block_erases")), (0, 0));
    assert_eq!(v["erase_histogram"], serde_json::json!([4096]));
    let text = run(&["flash", "stat", s(&img)]);
    assert!(
        text.stdout.contains("erase count   blocks"),
        "{}",
        text.stdout
    );
    // Large-block and page-mapped variants.
    let big = dir.path().join("big.img");
    let r = run(&[
        "flash",
        "create",
        s(&big),
        "--page-size",
        "4096",
        "--ftl",
        "page",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = json(&["flash", "stat", s(&big), "--json"]);
    assert_eq!(
        (
            u(&v["geometry"], "pages_per_block"),
            u(&v["geometry"], "blocks")
        ),
        (64, 256)
    );
    assert_eq!(v["ftl"]["kind"], "page");
    // Every page size the command accepts has a default geometry that fits.
    for size in ["1024", "2048", "8192", "16384"] {
        let f = dir.path().join(format!("p{size}.img"));
        let r = run(&["flash", "create", s(&f), "--page-size", size]);
        assert_eq!(r.code, 0, "--page-size {size}: {}", r.stderr);
    }
}

#[test]
fn bad_geometry_existing_files_and_damage_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("f.img");
    let p = s(&img);
    for size in ["1000", "256", "32768"] {
        refused(
            &["flash", "create", p, "--page-size", size],
            &format!("--page-size {size}: must be a power of two"),
        );
    }
    assert!(!img.exists(), "a refused create makes no file");
    refused(
        &["flash", "create", p, "--blocks", "10"],
        "--spare-blocks 66: leaves no logical block",
    );
    refused(
        &["flash", "create", p, "--spare-blocks", "10"],
        "--spare-blocks 10: the log-block FTL needs at least 66",
    );
    refused(
        &["flash", "create", p, "--pages-per-block", "48"],
        "--pages-per-block 48",
    );
    refused(
        &["flash", "create", p, "--spare-size", "8"],
        "--spare-size 8",
    );
    refused(
        &["flash", "create", p, "--ftl", "hybrid"],
        "expected log-block or page",
    );
    assert_eq!(run(&["flash", "create", p, "--blocks", "256"]).code, 0);
    let before = std::fs::read(&img).unwrap();
    refused(
        &["flash", "create", p],
        "exists (pass --force to replace it)",
    );
    assert_eq!(
        std::fs::read(&img).unwrap(),
        before,
        "a refused create changes nothing"
    );
    assert_eq!(
        run(&["flash", "create", p, "--force", "--blocks", "512"]).code,
        0
    );
    assert_eq!(
        u(&json(&["flash", "stat", p, "--json"])["geometry"], "blocks"),
        512
    );
    let file = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    file.write_all_at(&[0x55], 30).unwrap();
    refused(
        &["flash", "stat", p],
        "the header is damaged (checksum mismatch)",
    );
    refused(
        &["flash", "stat", s(&dir.path().join("none"))],
        "cannot open",
    );
}

/// Pages (of 512 bytes) the shared trace's reads and writes touch, from the trace itself:
/// `time device lsa sectors type`, type 0 a write.
fn tpcc_pages() -> (u64, u64, u64) {
    let text =
        std::fs::read_to_string(nvstack_test_support::shared_trace("tpcc-small.trace")).unwrap();
    let (mut reads, mut writes, mut requests) = (0, 0, 0);
    for line in text.lines() {
        let f: Vec<u64> = line
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        requests += 1;
        if f[4] == 0 {
            writes += f[3];
        } else {
            reads += f[3];
        }
    }
    (requests, reads, writes)
}

fn replay(ftl: &str, plot: Option<&Path>) -> Value {
    let trace = nvstack_test_support::shared_trace("tpcc-small.trace");
    let mut args = vec![
        "sim",
        "flash",
        "--trace",
        s(&trace),
        "--format",
        "disksim",
        "--json",
        "--ftl",
        ftl,
    ];
    args.extend(["--blocks", "512", "--log-blocks", "8"]);
    if let Some(d) = plot {
        args.extend(["--plot", s(d)]);
    }
    json(&args)
}

#[test]
fn sim_flash_replays_a_real_trace_and_its_counts_agree() {
    let (requests, read_pages, write_pages) = tpcc_pages();
    let dir = tempfile::tempdir().unwrap();
    for ftl in ["log-block", "page"] {
        let v = replay(ftl, Some(dir.path()));
        assert_eq!(u(&v, "requests"), requests, "{ftl}");
        assert_eq!(
            (u(&v, "host_page_reads"), u(&v, "host_page_writes")),
            (read_pages, write_pages)
        );
        let copies = u(&v["merges"], "copies");
        assert_eq!(
            u(&v, "page_programs"),
            write_pages + copies,
            "{ftl}: writes and copies"
        );
        assert!(u(&v, "page_reads") <= read_pages + copies, "{ftl}");
        assert!(
            u(&v, "block_erases") > 0,
            "{ftl}: a 16 MiB device under this trace erases"
        );
        let hist: Vec<u64> = v["erase_histogram"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        assert_eq!(
            hist.iter().sum::<u64>(),
            512,
            "{ftl}: every block in the histogram"
        );
        let weighted: u64 = hist.iter().enumerate().map(|(k, n)| k as u64 * n).sum();
        assert_eq!(weighted, u(&v, "block_erases"), "{ftl}");
        // Time and energy from the counts and the reported timing (E = V x I x t).
        let t = &v["timing"];
        let bus_ns = (528 * u(t, "transfer_ps_per_byte")).div_ceil(1000);
        let (r, p, e) = (
            u(&v, "page_reads"),
            u(&v, "page_programs"),
            u(&v, "block_erases"),
        );
        let (rt, pt, et) = (
            u(t, "read_ns") + bus_ns,
            bus_ns + u(t, "program_ns"),
            u(t, "erase_ns"),
        );
        assert_eq!(u(&v, "time_ns"), r * rt + p * pt + e * et, "{ftl}");
        let watts = f(t, "supply_mv") * 1e-3 * f(t, "program_ua") * 1e-6;
        let joules = watts * (r * rt + p * pt + e * et) as f64 * 1e-9;
        assert!(
            (f(&v, "energy_j") - joules).abs() < 1e-9 * joules.max(1.0),
            "{ftl}: {joules}"
        );
        for fig in [
            "flash-logical-writes.svg",
            "flash-physical-programs.svg",
            "flash-erases.svg",
        ] {
            let svg = std::fs::read_to_string(dir.path().join(fig)).unwrap();
            assert!(svg.starts_with("<svg") && svg.contains(ftl), "{fig}");
        }
    }
}

/// With 4 KiB pages the trace's unaligned 8 KiB requests cover pages in part: each such page
/// that already holds data is read before it is programmed.
#[test]
fn sim_flash_large_pages_read_partly_written_pages_first() {
    let trace = nvstack_test_support::shared_trace("tpcc-small.trace");
    let text = std::fs::read_to_string(&trace).unwrap();
    let (mut pages, mut partial) = (0u64, 0u64);
    for line in text.lines() {
        let f: Vec<u64> = line
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        if f[4] != 0 {
            continue;
        }
        let (start, end) = (f[2] * 512, (f[2] + f[3]) * 512);
        for page in start / 4096..=(end - 1) / 4096 {
            pages += 1;
            partial += u64::from(start > page * 4096 || end < (page + 1) * 4096);
        }
    }
    let v = json(&[
        "sim",
        "flash",
        "--trace",
        s(&trace),
        "--format",
        "disksim",
        "--json",
        "--page-size",
        "4096",
    ]);
    assert_eq!(u(&v, "host_page_writes"), pages);
    let reads_first = u(&v, "partial_page_reads");
    assert!(
        reads_first > 0 && reads_first <= partial,
        "{reads_first} of {partial} partial pages"
    );
    assert_eq!(u(&v["geometry"], "pages_per_block"), 64);
}

#[test]
fn sim_flash_bad_lines_and_settings_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("bad.trace");
    std::fs::write(&trace, "0 0 8 8 0\n1 0 x 8 0\n").unwrap();
    let t = s(&trace);
    refused(
        &["sim", "flash", "--trace", t, "--format", "disksim"],
        "bad.trace:2",
    );
    let v = json(&[
        "sim",
        "flash",
        "--trace",
        t,
        "--format",
        "disksim",
        "--skip-bad-lines",
        "--json",
    ]);
    assert_eq!(
        (
            u(&v, "requests"),
            u(&v, "skipped_lines"),
            u(&v, "host_page_writes")
        ),
        (1, 1, 8)
    );
    refused(
        &[
            "sim",
            "flash",
            "--trace",
            t,
            "--format",
            "disksim",
            "--page-size",
            "3000",
        ],
        "--page-size 3000",
    );
}
