//! `nvstack cache ... --cache write` with the real binary: a write cache created over a
//! backing file on disk, written, read, written back, detached (the backing file alone then
//! holds everything); `status` prints dm-writecache's 14 fields in its documentation's order;
//! FAT-aware admission on a real FAT16 volume made by mkfs.fat and changed with mtools; and bad
//! input (a format version 1 image among it) refused with exit 2, changing nothing.

mod common;

use common::run;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Scratch {
    disk: tempfile::TempDir,
    shm: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        Scratch {
            disk: tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap(),
            shm: tempfile::tempdir_in("/dev/shm").unwrap(),
        }
    }
    fn image(&self, name: &str) -> PathBuf {
        self.shm.path().join(name)
    }
    fn backing(&self, name: &str) -> PathBuf {
        self.disk.path().join(name)
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn expect(code: i32, args: &[&str]) -> String {
    let r = run(args);
    assert_eq!(r.code, code, "{}: {}{}", r.what, r.stdout, r.stderr);
    format!("{}{}", r.stdout, r.stderr)
}

fn create(img: &Path, backing: &Path, extra: &[&str]) -> String {
    let mut args = vec![
        "cache",
        "create",
        s(img),
        "--cache",
        "write",
        "--backing",
        s(backing),
    ];
    args.extend_from_slice(extra);
    if !extra.contains(&"--size") {
        args.extend_from_slice(&["--size", "64KiB"]);
    }
    expect(0, &args)
}

fn status(img: &Path) -> serde_json::Value {
    common::json(&["cache", "status", s(img), "--json"])
}

fn pattern(seed: u8, bytes: usize) -> Vec<u8> {
    (0..bytes)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

#[test]
fn writes_are_cached_destaged_written_back_and_detached() {
    let t = Scratch::new();
    let (img, backing) = (t.image("c.img"), t.backing("b.img"));
    let out = create(&img, &backing, &["--backing-size", "1MiB"]);
    assert!(
        out.contains("slots of 512 B") && out.contains("policy lrw"),
        "{out}"
    );
    let input = t.backing("in");
    let data = pattern(1, 3 * 512);
    std::fs::write(&input, &data).unwrap();
    expect(0, &["write", s(&img), "--lba", "10", "--input", s(&input)]);
    let read = run(&["read", s(&img), "--lba", "10", "--count", "3"]);
    assert_eq!(read.code, 0);
    let v = status(&img);
    assert_eq!(v["write_blocks"], 3);
    assert_eq!(v["write_allocated"], 3);
    assert_eq!(
        v["free_blocks"].as_u64().unwrap() + 3,
        v["blocks"].as_u64().unwrap()
    );
    // The text status: dm-writecache's 14 fields, named and in its documentation's order.
    let text = expect(0, &["cache", "status", s(&img)]);
    let names = [
        "error",
        "blocks",
        "free_blocks",
        "writeback_blocks",
        "read_blocks",
        "read_hits",
        "write_blocks",
        "write_hits_uncommitted",
        "write_hits_committed",
        "write_bypass",
        "write_allocated",
        "writes_blocked_on_freelist",
        "flushes",
        "discarded_blocks",
    ];
    let mut at = 0;
    for (i, n) in names.iter().enumerate() {
        let line = format!("{:>2}. {n} ", i + 1);
        let found = text[at..]
            .find(&line)
            .unwrap_or_else(|| panic!("{line:?} in\n{text}"));
        at += found + line.len();
    }
    assert!(text.contains("destaged"), "{text}");
    // The backing file does not hold the blocks yet: they are only in NVRAM.
    let on_disk = std::fs::read(&backing).unwrap();
    assert_ne!(&on_disk[10 * 512..13 * 512], &data[..]);
    let out = expect(0, &["cache", "writeback", s(&img)]);
    assert!(out.contains("wrote back 3 blocks"), "{out}");
    let v = status(&img);
    assert_eq!(v["destaged"]["writeback"], 3);
    assert_eq!(v["free_blocks"], v["blocks"]);
    let on_disk = std::fs::read(&backing).unwrap();
    assert_eq!(&on_disk[10 * 512..13 * 512], &data[..]);
    expect(0, &["cache", "clear-stats", s(&img)]);
    assert_eq!(status(&img)["write_blocks"], 0);
    // Overwrite, then detach: the backing file alone holds the newest data.
    let data2 = pattern(2, 512);
    std::fs::write(&input, &data2).unwrap();
    expect(0, &["write", s(&img), "--lba", "11", "--input", s(&input)]);
    expect(0, &["cache", "check", s(&img)]);
    let out = expect(0, &["cache", "detach", s(&img)]);
    assert!(out.contains("detached"), "{out}");
    let on_disk = std::fs::read(&backing).unwrap();
    assert_eq!(&on_disk[11 * 512..12 * 512], &data2[..]);
    let out = expect(2, &["read", s(&img), "--lba", "0", "--count", "1"]);
    assert!(out.contains("detached"), "{out}");
}

#[test]
fn the_seeds_trigger_destages_one_block_per_new_block_and_watermarks_destage_more() {
    let t = Scratch::new();
    let (img, backing) = (t.image("c.img"), t.backing("b.img"));
    // 20 KiB: 16 slots of 512 B after their table (the data starts 4 KiB aligned at 12 KiB).
    let out = create(
        &img,
        &backing,
        &["--size", "20KiB", "--backing-size", "1MiB"],
    );
    assert!(out.contains("16 slots"), "{out}");
    let input = t.backing("in");
    for lba in 0..20u64 {
        std::fs::write(&input, pattern(lba as u8, 512)).unwrap();
        expect(
            0,
            &[
                "write",
                s(&img),
                "--lba",
                &lba.to_string(),
                "--input",
                s(&input),
            ],
        );
    }
    let v = status(&img);
    // 15 blocks fill 16 slots (one is the spare an overwrite lands in).
    assert_eq!(
        v["destaged"]["room"], 5,
        "one block for each of the last five"
    );
    assert_eq!(v["free_blocks"], 1);
    assert_eq!(v["writes_blocked_on_freelist"], 5);
    for lba in 0..20u64 {
        let r = run(&["read", s(&img), "--lba", &lba.to_string(), "--count", "1"]);
        assert_eq!(r.code, 0);
    }
    let img2 = t.image("d.img");
    let backing2 = t.backing("b2.img");
    let args = [
        "--size",
        "20KiB",
        "--backing-size",
        "1MiB",
        "--high-watermark",
        "50",
        "--low-watermark",
        "25",
        "--writeback-jobs",
        "2",
        "--policy",
        "clock",
    ];
    let out = create(&img2, &backing2, &args);
    assert!(out.contains("above 50 % used down to 25 %"), "{out}");
    std::fs::write(&input, pattern(9, 8 * 512)).unwrap();
    expect(0, &["write", s(&img2), "--lba", "0", "--input", s(&input)]);
    assert_eq!(
        status(&img2)["destaged"]["watermark"],
        0,
        "8 of 16: at 50 %"
    );
    std::fs::write(&input, pattern(10, 512)).unwrap();
    expect(0, &["write", s(&img2), "--lba", "20", "--input", s(&input)]);
    // 9 used of 16 is above 50 %: down to at most 25 % (4); the victim (block 0, CLOCK's
    // first) takes its cached neighbours 1 to 7 along.
    let v = status(&img2);
    assert_eq!(v["destaged"]["watermark"], 8, "{v:#}");
    assert_eq!(v["destaged"]["room"], 0, "{v:#}");
    assert_eq!(v["free_blocks"], 15, "{v:#}");
}

#[test]
fn bad_input_is_refused_with_exit_2_changing_nothing() {
    let t = Scratch::new();
    let (img, backing) = (t.image("c.img"), t.backing("b.img"));
    let base = [
        "cache",
        "create",
        s(&img),
        "--size",
        "64KiB",
        "--cache",
        "write",
        "--backing",
        s(&backing),
        "--backing-size",
        "1MiB",
    ];
    for (extra, says) in [
        (&["--sector", "1024"][..], "--sector 1024"),
        (&["--admit", "5..3"], "--admit 5..3"),
        (&["--admit", "lots"], "expected all, fat-metadata"),
        (
            &["--admit", "all", "--admit", "0..4"],
            "expected all, fat-metadata",
        ),
        (&["--admit", "0..99999"], "inside the device's 2048 blocks"),
        (&["--autocommit-ms", "5"], "--autocommit-ms is UBJ's"),
        (
            &["--low-watermark", "10"],
            "--low-watermark 10 % without a high watermark",
        ),
        (
            &["--high-watermark", "40", "--low-watermark", "40"],
            "must be below",
        ),
        (
            &["--admit", "fat-metadata"],
            "needs an existing backing file",
        ),
    ] {
        let mut a = base.to_vec();
        a.extend_from_slice(extra);
        let out = expect(2, &a);
        assert!(out.contains(says), "{extra:?}: {out}");
        assert!(!img.exists() && !backing.exists(), "{extra:?} left a file");
    }
    let mut small = base.to_vec();
    small[4] = "4KiB";
    let out = expect(2, &small);
    assert!(out.contains("at least 2 slots"), "{out}");
    assert!(!img.exists() && !backing.exists());
    let ubj = [
        "cache",
        "create",
        s(&img),
        "--size",
        "1MiB",
        "--cache",
        "ubj",
        "--backing",
        s(&backing),
        "--backing-size",
        "1MiB",
    ];
    for (extra, says) in [
        (&["--sector", "512"][..], "--sector is the write cache's"),
        (&["--policy", "lrw"], "--policy lrw is the write cache's"),
    ] {
        let mut a = ubj.to_vec();
        a.extend_from_slice(extra);
        let out = expect(2, &a);
        assert!(out.contains(says), "{extra:?}: {out}");
        assert!(!img.exists(), "{extra:?}");
    }
    create(&img, &backing, &["--backing-size", "1MiB"]);
    let before = std::fs::read(&img).unwrap();
    let out = expect(2, &base[..base.len() - 2]);
    assert!(out.contains("file exists; pass --force"), "{out}");
    let out = expect(2, &["read", s(&img), "--lba", "2048", "--count", "1"]);
    assert!(out.contains("out of range"), "{out}");
    assert_eq!(std::fs::read(&img).unwrap(), before, "nothing changed");
    // An image of format version 1 (the two-fence protocol) is refused, saying what to do.
    let mut v1 = before.clone();
    v1[8..12].copy_from_slice(&1u32.to_le_bytes());
    std::fs::write(&img, &v1).unwrap();
    for cmd in [
        &["cache", "status", s(&img)][..],
        &["read", s(&img), "--lba", "0", "--count", "1"],
    ] {
        let out = expect(2, cmd);
        assert!(
            out.contains("write cache format version 1") && out.contains("cache detach"),
            "{cmd:?}: {out}"
        );
    }
    assert_eq!(std::fs::read(&img).unwrap(), v1, "nothing changed");
    let (u, ub) = (t.image("u.img"), t.backing("u.img"));
    expect(
        0,
        &[
            "cache",
            "create",
            s(&u),
            "--size",
            "1MiB",
            "--cache",
            "ubj",
            "--backing",
            s(&ub),
            "--backing-size",
            "1MiB",
        ],
    );
    // clear-stats zeroes UBJ's lifetime counters too (the same verb through the contract).
    let input = t.backing("u.in");
    std::fs::write(&input, pattern(2, 8192)).unwrap();
    expect(0, &["write", s(&u), "--lba", "0", "--input", s(&input)]);
    let before = common::json(&["cache", "status", s(&u), "--json"]);
    assert!(
        before["counters"]["user_bytes_written"].as_u64().unwrap() > 0,
        "{before}"
    );
    let out = expect(0, &["cache", "clear-stats", s(&u)]);
    assert!(out.contains("counters cleared"), "{out}");
    let after = common::json(&["cache", "status", s(&u), "--json"]);
    for field in ["user_bytes_written", "commits", "read_hits"] {
        assert_eq!(after["counters"][field], 0, "{field}: {after}");
    }
}

fn tool(cmd: &str, args: &[&str]) {
    let o = Command::new("timeout")
        .arg("60")
        .arg(cmd)
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Copy `vol` (the whole device, as `nvstack read` gave it) back into the cache: every run of
/// sectors that differs from `old` is one `nvstack write --chunked`.
fn write_changes(img: &Path, old: &[u8], vol: &[u8], scratch: &Path) {
    let n = vol.len() / 512;
    let differs = |i: usize| old[i * 512..(i + 1) * 512] != vol[i * 512..(i + 1) * 512];
    let mut i = 0;
    while i < n {
        if !differs(i) {
            i += 1;
            continue;
        }
        let start = i;
        while i < n && differs(i) {
            i += 1;
        }
        let f = scratch.join("run");
        std::fs::write(&f, &vol[start * 512..i * 512]).unwrap();
        let lba = start.to_string();
        expect(
            0,
            &[
                "write",
                s(img),
                "--lba",
                &lba,
                "--input",
                s(&f),
                "--chunked",
            ],
        );
    }
}

#[test]
fn fat_metadata_admission_follows_a_real_fat16_volume_changed_with_mtools() {
    let t = Scratch::new();
    let (img, backing) = (t.image("c.img"), t.backing("fat.img"));
    tool("mkfs.fat", &["-F", "16", "-C", s(&backing), "16384"]);
    let f = std::fs::OpenOptions::new()
        .append(true)
        .open(&backing)
        .unwrap();
    f.set_len(16384 * 1024 + 4096).unwrap(); // the label's block
    drop(f);
    let out = create(
        &img,
        &backing,
        &["--size", "256KiB", "--admit", "fat-metadata"],
    );
    assert!(out.contains("admit fat-metadata"), "{out}");
    let v = status(&img);
    let ranges = v["admitted_ranges"].as_array().unwrap().clone();
    assert_eq!(
        ranges.len(),
        1,
        "reserved sectors, both FATs, the root: {ranges:?}"
    );
    assert_eq!(ranges[0][0], 0);
    // Change the volume with mtools (on a copy read through the cache), write it back.
    let vol = t.backing("vol.img");
    let blocks = (16384 * 2).to_string();
    let r = run(&[
        "read",
        s(&img),
        "--lba",
        "0",
        "--count",
        &blocks,
        "--output",
        s(&vol),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let old = std::fs::read(&vol).unwrap();
    let file = t.backing("f.bin");
    std::fs::write(&file, pattern(7, 40_000)).unwrap();
    tool("mmd", &["-i", s(&vol), "::/sub"]);
    tool("mcopy", &["-i", s(&vol), s(&file), "::/sub/f.bin"]);
    write_changes(&img, &old, &std::fs::read(&vol).unwrap(), t.disk.path());
    let v = status(&img);
    let after = v["admitted_ranges"].as_array().unwrap();
    let sectors = |rs: &[serde_json::Value]| -> u64 {
        rs.iter()
            .map(|r| r[1].as_u64().unwrap() - r[0].as_u64().unwrap())
            .sum()
    };
    // mkfs.fat -F 16 of 16 MiB: 4 reserved sectors, two FATs of 32, a root of 32; clusters of
    // 4 sectors. The new directory is the first cluster, right after the root.
    assert_eq!(sectors(&ranges), 100, "{ranges:?}");
    assert_eq!(
        sectors(after),
        104,
        "the new directory's cluster is admitted: {after:?}"
    );
    assert!(
        v["write_bypass"].as_u64().unwrap() > 0,
        "file data bypassed: {v:#}"
    );
    assert!(
        v["write_allocated"].as_u64().unwrap() > 0,
        "metadata cached: {v:#}"
    );
    // After detach the backing file alone is a clean volume holding the file.
    expect(0, &["cache", "detach", s(&img)]);
    tool("fsck.fat", &["-n", s(&backing)]);
    let back = t.backing("back.bin");
    tool("mcopy", &["-i", s(&backing), "::/sub/f.bin", s(&back)]);
    assert_eq!(std::fs::read(&back).unwrap(), pattern(7, 40_000));
}

#[test]
fn fat_metadata_admission_refuses_a_partition_table() {
    let t = Scratch::new();
    let (img, backing) = (t.image("c.img"), t.backing("mbr.img"));
    let mut b = vec![0u8; 2 * 1024 * 1024 + 4096];
    b[446 + 4] = 0x0e; // a FAT16 LBA partition
    b[510] = 0x55;
    b[511] = 0xAA;
    std::fs::write(&backing, &b).unwrap();
    let out = expect(
        2,
        &[
            "cache",
            "create",
            s(&img),
            "--size",
            "64KiB",
            "--cache",
            "write",
            "--backing",
            s(&backing),
            "--admit",
            "fat-metadata",
        ],
    );
    assert!(out.contains("partition table"), "{out}");
    assert!(!img.exists());
    assert_eq!(std::fs::read(&backing).unwrap(), b, "unchanged");
}

/// Flip bit 0 of the 8-byte word at `off` of `path`.
fn flip(path: &Path, off: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut w = [0u8; 8];
    f.read_exact_at(&mut w, off).unwrap();
    w[0] ^= 1;
    f.write_all_at(&w, off).unwrap();
}

/// The exit-code contract (1 a finding, 2 bad input, 3 the environment) for the write cache's
/// `check` and open: damage is a finding naming the slot; a missing backing file is bad input
/// and an unreadable one (a socket: no open(2) reads it, even root's) an environment error,
/// each naming the file, never "DAMAGED".
#[test]
fn damage_is_a_finding_and_a_missing_or_unreadable_backing_file_is_named() {
    let t = Scratch::new();
    let (img, backing) = (t.image("c.img"), t.backing("b.img"));
    create(&img, &backing, &["--backing-size", "1MiB"]);
    let input = t.backing("in");
    std::fs::write(&input, pattern(2, 3 * 512)).unwrap();
    expect(0, &["write", s(&img), "--lba", "10", "--input", s(&input)]);
    expect(0, &["cache", "check", s(&img)]);
    let missing = t.backing("no-such-file");
    for verb in ["check", "status", "writeback"] {
        let out = expect(2, &["cache", verb, s(&img), "--backing", s(&missing)]);
        assert!(
            out.contains(s(&missing)) && out.contains("no such backing file"),
            "{verb}: {out}"
        );
        assert!(!out.contains("DAMAGED"), "{verb}: {out}");
    }
    let sock = t.backing("sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    for verb in ["check", "status", "writeback"] {
        let out = expect(3, &["cache", verb, s(&img), "--backing", s(&sock)]);
        assert!(
            out.contains(s(&sock)) && !out.contains("DAMAGED"),
            "{verb}: {out}"
        );
    }
    // Damage at rest: a flipped bit of the sequence word of slot 0's entry (docs/format.md
    // 12.5: entries of 32 bytes from offset 8192).
    let before = std::fs::read(&img).unwrap();
    flip(&img, 8192 + 8);
    flip(&img, 8192 + 32 + 8);
    // The check lists every damaged slot (the open stops at the first).
    let out = expect(1, &["cache", "check", s(&img)]);
    assert!(out.contains("result       DAMAGED"), "{out}");
    let damage: Vec<&str> = out.lines().filter(|l| l.starts_with("DAMAGE ")).collect();
    assert_eq!(damage.len(), 2, "{out}");
    assert!(
        damage[0].contains("slot 0") && damage[1].contains("slot 1"),
        "{out}"
    );
    let r = run(&["cache", "check", s(&img), "--json"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let v = r.json();
    assert_eq!(v["census"]["damaged"], 2, "{v:#}");
    assert_eq!(v["census"]["cached"], 1, "{v:#}");
    assert_eq!(v["findings"].as_array().unwrap().len(), 2, "{v:#}");
    for args in [
        &["cache", "writeback", s(&img)][..],
        &["read", s(&img), "--lba", "10", "--count", "1"],
    ] {
        let out = expect(1, args);
        assert!(
            out.contains("slot 0") && out.contains("damaged at rest"),
            "{args:?}: {out}"
        );
    }
    let mut after = std::fs::read(&img).unwrap();
    after[8192 + 8] ^= 1;
    after[8192 + 32 + 8] ^= 1;
    assert!(after == before, "a refused open changed nothing");
}
