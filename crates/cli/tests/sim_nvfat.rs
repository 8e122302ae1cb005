//! `nvstack sim nvfat` on a real recording: scripts/nvfat-record.sh runs a short PostMark (50
//! files, 200 transactions) on an 8 MiB FAT volume made by mkfs.fat, driven by fusefat on a
//! device `nvstack serve --backend raw --block-size 512` records; the sweep's trends and the
//! FAT-metadata admission (against the independent counter) are asserted, and bad recordings
//! and flags are refused with exit 2 by the real binary. Needs FUSE, fusefat, postmark and
//! dosfstools (scripts/deps.sh installs them).

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{f, json, run, u};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn refused(args: &[&str], what: &str) {
    let r = run(args);
    assert_eq!(r.code, 2, "{}: {}{}", r.what, r.stdout, r.stderr);
    assert!(
        r.stderr.contains(what),
        "{}: wanted '{what}' in: {}",
        r.what,
        r.stderr
    );
}

fn need(tool: &str) {
    let ok = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "{tool} is missing: run `bash scripts/deps.sh` (it installs fusefat, postmark, dosfstools)"
    );
}

/// A short real recording into `dir/rec`.
fn record(dir: &Path) -> PathBuf {
    for t in [
        "fusefat",
        "postmark",
        "mkfs.fat",
        "fsck.fat",
        "fusermount",
        "fusermount3",
    ] {
        need(t);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/nvfat-record.sh");
    let out = dir.join("rec");
    let o = Command::new("timeout")
        .args(["120", "bash", s(&script), s(&out), "50", "200", "8"])
        .env("NVSTACK_BIN", common::bin())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "nvfat-record.sh: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let runrec: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    assert_eq!(runrec["fsck_exit"], 0, "fsck.fat -n found damage: {runrec}");
    out
}

fn sizes(v: &Value, line: &str) -> Vec<(u64, f64, f64, f64, f64)> {
    v[line]["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                u(p, "kib"),
                f(p, "exec_s"),
                f(p, "energy_j"),
                f(p, "erase_mean"),
                f(p, "erase_sd"),
            )
        })
        .collect()
}

#[test]
fn a_recorded_postmark_replays_with_the_seeds_trends_and_bad_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let rec = record(dir.path());
    let trace = rec.join("trace");
    let plots = dir.path().join("plots");
    let v = json(&[
        "sim",
        "nvfat",
        "--trace",
        s(&trace),
        "--json",
        "--plot",
        s(&plots),
        "--check-fat-walk",
    ]);
    let sync = sizes(&v, "sync");
    let kib: Vec<u64> = sync.iter().map(|p| p.0).collect();
    assert_eq!(kib, vec![0, 1, 2, 4, 8, 16, 32, 64, 128]);
    // Each quantity never rises with the NVRAM size, and falls overall.
    for w in sync.windows(2) {
        assert!(
            w[1].1 <= w[0].1 && w[1].2 <= w[0].2 && w[1].3 <= w[0].3,
            "{sync:?}"
        );
    }
    let (first, last) = (sync[0], sync[sync.len() - 1]);
    assert!(first.1 > last.1 && first.2 > last.2, "{sync:?}");
    assert!(last.4 < first.4, "erase sd: {sync:?}");
    assert!(v["trends"]["exec_falls"].as_bool().unwrap());
    // The admission catches at least 99 % of the metadata writes the independent counter sees.
    let a = &v["admission"];
    assert!(u(a, "metadata_writes") > 1000, "{a}");
    assert!(f(a, "caught_pct") >= 99.0, "{a}");
    // The write cache's FAT classification, kept up to date from the sectors each write
    // changed, agreed with a full walk after every change (a difference fails the run).
    let checks: u64 = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| u(o, "fat_walk_checks"))
        .sum();
    assert!(checks > 10, "{checks} cross-checks");
    // With a page cache for reads, the energy falls too.
    let c = &v["comparison"];
    assert!(f(c, "page_cache_energy_ratio") > 1.0, "{c}");
    // Every write is accounted for: at 0 KiB all reach the FTL; with NVRAM the FTL sees the
    // bypassed and destaged ones.
    let writes = u(&v["requests"], "write_blocks");
    let runs = v["runs"].as_array().unwrap();
    for o in runs.iter().filter(|o| o["mode"] == "sync") {
        let ftl = u(&o["flash"], "host_page_writes");
        assert_eq!(
            ftl,
            u(o, "bypassed") + u(o, "destaged") + if u(o, "nvram_bytes") == 0 { writes } else { 0 },
            "{o}"
        );
        assert_eq!(
            u(o, "nvram_sector_writes") + u(o, "bypassed"),
            if u(o, "nvram_bytes") == 0 { 0 } else { writes }
        );
    }
    changed_view(&v, writes);
    for fig in [
        "nvfat-fig4-time.svg",
        "nvfat-fig5-ftl-writes.svg",
        "nvfat-fig6-flash-programs.svg",
        "nvfat-fig7-erases.svg",
        "nvfat-fig8-energy.svg",
    ] {
        let svg = std::fs::read_to_string(plots.join(fig)).unwrap();
        assert!(svg.starts_with("<svg"), "{fig}");
    }
    // The changed-sector view's lines beside the raw ones in Figures 4, 7 and 8.
    for fig in [
        "nvfat-fig4-time.svg",
        "nvfat-fig7-erases.svg",
        "nvfat-fig8-energy.svg",
    ] {
        let svg = std::fs::read_to_string(plots.join(fig)).unwrap();
        assert!(svg.contains("changed sectors"), "{fig}");
    }
    refusals(dir.path(), &rec);
}

/// The changed-sector view (`sync-changed` runs): it writes exactly the sectors whose bytes
/// changed as the independent counter (its own copy of the volume, in the raw run that checks
/// the admission) counts them, never more than the raw run at the same size, no unchanged
/// sector (the same counter in the view's run), and its quantities never rise with size.
fn changed_view(v: &Value, writes: u64) {
    let kinds = ["fat", "directory", "reserved", "data"];
    let view = &v["changed_view"];
    let raw = &view["raw_kinds"];
    let written: u64 = kinds.iter().map(|k| u(raw, k)).sum();
    let unchanged: u64 = kinds
        .iter()
        .map(|k| u(raw, &format!("{k}_unchanged")))
        .sum();
    assert_eq!(written, writes, "{view}");
    let changed = written - unchanged;
    // fusefat rewrites both FATs whole: most FAT sector writes change nothing.
    assert!(
        unchanged > 0 && u(raw, "fat_unchanged") * 2 > u(raw, "fat"),
        "{view}"
    );
    assert_eq!(u(view, "sectors_changed"), changed, "{view}");
    assert_eq!(u(view, "sectors_dropped"), unchanged, "{view}");
    let mine = &view["view_kinds"];
    let view_written: u64 = kinds.iter().map(|k| u(mine, k)).sum();
    let view_unchanged: u64 = kinds
        .iter()
        .map(|k| u(mine, &format!("{k}_unchanged")))
        .sum();
    assert_eq!((view_written, view_unchanged), (changed, 0), "{view}");
    let runs = v["runs"].as_array().unwrap();
    let raw_ftl_of = |bytes: u64| {
        let o = runs
            .iter()
            .find(|o| {
                o["mode"] == "sync"
                    && u(o, "nvram_bytes") == bytes
                    && o["policy"] == "lrw"
                    && o["admit"] == "fat-metadata"
                    && o["ftl"] == "log-block"
            })
            .unwrap_or_else(|| panic!("no raw sync run of {bytes} bytes"));
        u(&o["flash"], "host_page_writes")
    };
    let mut seen = 0;
    for o in runs.iter().filter(|o| o["mode"] == "sync-changed") {
        let bytes = u(o, "nvram_bytes");
        let ftl = u(&o["flash"], "host_page_writes");
        let raw_ftl = raw_ftl_of(bytes);
        assert!(ftl <= raw_ftl, "{bytes} bytes: {ftl} > raw {raw_ftl}");
        if bytes == 0 {
            assert_eq!(ftl, changed, "{o}");
        } else {
            assert_eq!(u(o, "nvram_sector_writes") + u(o, "bypassed"), changed);
            assert_eq!(ftl, u(o, "bypassed") + u(o, "destaged"), "{o}");
        }
        seen += 1;
    }
    assert_eq!(seen, 9, "a sync-changed run per size");
    let ch = sizes(v, "sync_changed");
    for w in ch.windows(2) {
        assert!(
            w[1].1 <= w[0].1 && w[1].2 <= w[0].2 && w[1].3 <= w[0].3 && w[1].4 <= w[0].4,
            "sync changed: {ch:?}"
        );
    }
    let pc: Vec<(f64, f64)> = v["sync_changed"]["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (f(p, "page_cache_exec_s"), f(p, "page_cache_energy_j")))
        .collect();
    for w in pc.windows(2) {
        assert!(
            w[1].0 <= w[0].0 && w[1].1 <= w[0].1,
            "sync changed + pc: {pc:?}"
        );
    }
    let t = &v["trends"]["changed"];
    assert!(t["energy_falls"].as_bool().unwrap(), "{t}");
}

/// Damaged or mismatched recordings and bad flags: exit 2, naming the fault.
fn refusals(dir: &Path, rec: &Path) {
    let trace = rec.join("trace");
    let t = s(&trace);
    refused(
        &["sim", "nvfat", "--trace", t, "--nvram-kib", "8,16"],
        "needs 0",
    );
    refused(
        &["sim", "nvfat", "--trace", t, "--nvram-kib", "0,100000"],
        "at most 65536",
    );
    let missing = dir.join("nothing");
    refused(
        &["sim", "nvfat", "--trace", t, "--data", s(&missing)],
        "cannot open the data log",
    );
    // The data log cut short: no trailer.
    let data = std::fs::read(rec.join("data")).unwrap();
    let cut = dir.join("cut.data");
    std::fs::write(&cut, &data[..data.len() - 7]).unwrap();
    refused(
        &["sim", "nvfat", "--trace", t, "--data", s(&cut)],
        "trailer",
    );
    // A changed byte of data: the checksum.
    let mut bad = data.clone();
    bad[100] ^= 0xFF;
    let changed = dir.join("changed.data");
    std::fs::write(&changed, &bad).unwrap();
    refused(
        &["sim", "nvfat", "--trace", t, "--data", s(&changed)],
        "do not match",
    );
    // An image of another size.
    let img = dir.join("small.img");
    std::fs::write(&img, vec![0u8; 4096]).unwrap();
    refused(
        &["sim", "nvfat", "--trace", t, "--image", s(&img)],
        "not the volume",
    );
    // A trace cut short (a killed daemon): no end line.
    let text = std::fs::read_to_string(&trace).unwrap();
    let short = dir.join("short.trace");
    let lines: Vec<&str> = text.lines().collect();
    std::fs::write(&short, lines[..lines.len() - 1].join("\n") + "\n").unwrap();
    refused(
        &[
            "sim",
            "nvfat",
            "--trace",
            s(&short),
            "--data",
            s(&rec.join("data")),
            "--image",
            s(&rec.join("image")),
        ],
        "end",
    );
    // A trace of 4 KiB blocks.
    let big = dir.join("big.trace");
    std::fs::write(
        &big,
        "nvstack-trace 1 block_bytes=4096 blocks=16\nend 0 00000000\n",
    )
    .unwrap();
    refused(&["sim", "nvfat", "--trace", s(&big)], "512-byte sectors");
    // A run record that is not one.
    let runj = dir.join("run.json");
    std::fs::write(&runj, "{\"elapsed_s\": -1, \"cpu_s\": {}}").unwrap();
    refused(
        &["sim", "nvfat", "--trace", t, "--run", s(&runj)],
        "elapsed_s must be positive",
    );
    // serve: a block size raw does not serve, and one for another backend.
    let mnt = dir.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let shm = tempfile::Builder::new()
        .prefix("nvfat-test")
        .tempfile_in("/dev/shm")
        .unwrap();
    shm.as_file().set_len(1 << 20).unwrap();
    refused(
        &[
            "serve",
            s(shm.path()),
            "--backend",
            "raw",
            "--block-size",
            "1024",
            "--mountpoint",
            s(&mnt),
            "--foreground",
        ],
        "512 or 4096",
    );
    let r = run(&[
        "serve",
        s(shm.path()),
        "--record-data",
        s(&dir.join("d")),
        "--mountpoint",
        s(&mnt),
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("--record-trace"), "{}", r.stderr);
}
