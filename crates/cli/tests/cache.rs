//! `nvstack cache` with the real binary: a cache created over a backing file on disk, a real
//! ext4 image written through it, written back and detached, and the backing file then mounted
//! by the kernel with no nvstack in between; and every kind of bad input refused with the
//! design brief's exit code, changing nothing.

mod common;

use common::run;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A scratch directory on the disk (the backing files want O_DIRECT) and one under /dev/shm
/// (the emulated NVRAM), both removed at the end.
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

/// `nvstack ARGS`, which must exit `code`; returns stdout and stderr together.
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
        "--size",
        "1MiB",
        "--cache",
        "ubj",
        "--backing",
        s(backing),
    ];
    args.extend_from_slice(extra);
    expect(0, &args)
}

fn status(img: &Path) -> serde_json::Value {
    common::json(&["cache", "status", s(img), "--json"])
}

/// A real ext4 image of `bytes` holding `files` files of random data (mkfs.ext4 -d).
fn ext4_image(dir: &Path, bytes: u64, files: usize) -> PathBuf {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..files {
        let data: Vec<u8> = (0..50_000 + i * 7_000)
            .map(|j| (j * 31 + i * 7) as u8)
            .collect();
        std::fs::write(src.join(format!("f{i}")), data).unwrap();
    }
    let img = dir.join("fs.img");
    File::create(&img).unwrap().set_len(bytes).unwrap();
    let out = Command::new("timeout")
        .args(["60", "mkfs.ext4", "-q", "-F", "-b", "4096", "-d"])
        .args([&src, &img])
        .output()
        .unwrap();
    assert!(out.status.success(), "mkfs.ext4: {out:?}");
    img
}

/// Unmounts on drop (the test may fail between mount and umount).
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("timeout")
            .args(["30", "umount"])
            .arg(&self.0)
            .status();
    }
}

#[test]
fn ext4_through_the_cache_then_detached_mounts_without_nvstack() {
    let t = Scratch::new();
    let (img, backing) = (t.image("c.img"), t.backing("b.img"));
    let out = create(&img, &backing, &["--backing-size", "16MiB"]);
    assert!(out.contains("(created)"), "{out}");
    assert_eq!(
        std::fs::metadata(&backing).unwrap().len(),
        16 * 1024 * 1024 + 4096
    );
    let st = status(&img);
    let slots = st["slots"].as_u64().unwrap();
    assert_eq!(st["census"]["free"].as_u64(), Some(slots));
    assert_eq!(st["epoch"].as_u64(), Some(0));
    assert_eq!(st["settings"]["policy"], "lru");

    let fs = ext4_image(t.disk.path(), 16 * 1024 * 1024, 6);
    expect(
        0,
        &[
            "write",
            s(&img),
            "--lba",
            "0",
            "--input",
            s(&fs),
            "--chunked",
        ],
    );
    let st = status(&img);
    assert!(st["epoch"].as_u64().unwrap() > 1, "{st}");
    let k = &st["counters"];
    assert_eq!(k["user_bytes_written"].as_u64(), Some(16 * 1024 * 1024));
    assert!(
        k["checkpoints"].as_u64().unwrap() > 0,
        "16 MiB through 1 MiB of NVRAM checkpoints: {st}"
    );
    let through = t.disk.path().join("through");
    expect(
        0,
        &[
            "read",
            s(&img),
            "--lba",
            "0",
            "--count",
            "4096",
            "--output",
            s(&through),
        ],
    );
    assert!(std::fs::read(&through).unwrap() == std::fs::read(&fs).unwrap());

    let frozen = st["census"]["frozen_up_to_date"].as_u64().unwrap();
    assert!(frozen > 0, "the last blocks are still only in NVRAM: {st}");
    let out = expect(0, &["cache", "writeback", s(&img)]);
    assert!(
        out.contains(&format!("wrote back {frozen} blocks")),
        "{out}"
    );
    assert_eq!(
        status(&img)["census"]["frozen_up_to_date"].as_u64(),
        Some(0)
    );
    expect(0, &["cache", "detach", s(&img)]);
    let st = status(&img);
    assert_eq!(st["detached"], true, "{st}");
    let out = expect(2, &["cache", "writeback", s(&img)]);
    assert!(out.contains("detached"), "{out}");

    // The kernel reads the backing file alone: every file whole.
    let mnt = t.disk.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let m = Command::new("timeout")
        .args(["30", "mount", "-o", "loop,ro", "-t", "ext4"])
        .args([&backing, &mnt])
        .output()
        .unwrap();
    assert!(m.status.success(), "mount: {m:?}");
    let _m = Mounted(mnt.clone());
    for i in 0..6 {
        let want = std::fs::read(t.disk.path().join(format!("src/f{i}"))).unwrap();
        assert!(
            std::fs::read(mnt.join(format!("f{i}"))).unwrap() == want,
            "f{i}"
        );
    }
}

/// Bytes of a file, to show a refused command changed nothing.
fn bytes(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap()
}

#[test]
fn bad_create_arguments_are_refused_and_change_nothing() {
    let t = Scratch::new();
    let (img, backing) = (t.image("c.img"), t.backing("b.img"));
    let base = [
        "cache",
        "create",
        s(&img),
        "--cache",
        "ubj",
        "--backing",
        s(&backing),
    ];
    let with = |extra: &[&'static str]| -> Vec<&str> {
        let mut v = base.to_vec();
        v.extend_from_slice(extra);
        v
    };
    let out = expect(2, &with(&["--size", "1MiB"]));
    assert!(
        out.contains("no such backing file; give --backing-size"),
        "{out}"
    );
    for (extra, says) in [
        (
            &["--size", "20KiB", "--backing-size", "1MiB"][..],
            "too small",
        ),
        (
            &["--size", "1000000", "--backing-size", "1MiB"],
            "multiple of 4096",
        ),
        (
            &["--size", "1MiB", "--backing-size", "1000"],
            "multiple of 4096",
        ),
        (
            &[
                "--size",
                "1MiB",
                "--backing-size",
                "1MiB",
                "--high-watermark",
                "40",
                "--low-watermark",
                "45",
            ],
            "low-watermark 45",
        ),
        (
            &[
                "--size",
                "1MiB",
                "--backing-size",
                "1MiB",
                "--autocommit",
                "off",
                "--autocommit-blocks",
                "8",
            ],
            "contradicts",
        ),
        (
            &[
                "--size",
                "1MiB",
                "--backing-size",
                "1MiB",
                "--high-watermark",
                "101",
            ],
            "1 to 100",
        ),
    ] {
        let out = expect(2, &with(extra));
        assert!(out.contains(says), "{extra:?}: {out}");
        assert!(!img.exists() && !backing.exists(), "{extra:?} left a file");
    }
    let out = expect(
        2,
        &[
            "cache",
            "create",
            s(&img),
            "--size",
            "1MiB",
            "--cache",
            "write",
            "--backing",
            s(&backing),
        ],
    );
    // The write cache (tests/wcache.rs) refuses a missing backing file the same way.
    assert!(out.contains("no such backing file"), "{out}");
    assert!(!img.exists() && !backing.exists());

    // A backing file whose last block holds data, another cache's backing file, a wrong size.
    std::fs::write(&backing, vec![7u8; 64 * 4096]).unwrap();
    let out = expect(2, &with(&["--size", "1MiB"]));
    assert!(out.contains("last block (block 63) holds data"), "{out}");
    assert!(bytes(&backing) == vec![7u8; 64 * 4096] && !img.exists());
    let out = expect(2, &with(&["--size", "1MiB", "--backing-size", "1MiB"]));
    assert!(
        out.contains("--backing-size 1048576 needs 1052672"),
        "{out}"
    );
    create(&img, &backing, &["--force"]);
    let before = (bytes(&img), bytes(&backing));
    let out = expect(2, &with(&["--size", "1MiB"]));
    assert!(out.contains("file exists; pass --force"), "{out}");
    let other = t.image("other.img");
    let out = expect(
        2,
        &[
            "cache",
            "create",
            s(&other),
            "--size",
            "1MiB",
            "--cache",
            "ubj",
            "--backing",
            s(&backing),
        ],
    );
    assert!(out.contains("backing file of another cache"), "{out}");
    assert!((bytes(&img), bytes(&backing)) == before && !other.exists());
}

/// Two caches A and B; A's image and backing file, and their bytes.
fn two_caches(t: &Scratch) -> (PathBuf, PathBuf, PathBuf) {
    let (a, ab) = (t.image("a.img"), t.backing("a.bk"));
    let (b, bb) = (t.image("b.img"), t.backing("b.bk"));
    create(&a, &ab, &["--backing-size", "1MiB"]);
    create(&b, &bb, &["--backing-size", "1MiB"]);
    let data = vec![0x5au8; 3 * 4096];
    let input = t.disk.path().join("in");
    std::fs::write(&input, data).unwrap();
    expect(0, &["write", s(&a), "--lba", "2", "--input", s(&input)]);
    (a, ab, bb)
}

#[test]
fn wrong_backing_files_and_wrong_kinds_are_refused_and_change_nothing() {
    let t = Scratch::new();
    let (a, ab, bb) = two_caches(&t);
    let snapshot = || (bytes(&a), bytes(&ab), bytes(&bb));
    let before = snapshot();
    let out = expect(2, &["cache", "writeback", s(&a), "--backing", s(&bb)]);
    assert!(out.contains("belongs to another cache"), "{out}");
    let out = expect(1, &["cache", "check", s(&a), "--backing", s(&bb)]);
    assert!(
        out.contains("DAMAGE") && out.contains("another cache"),
        "{out}"
    );
    expect(2, &["write", s(&a), "--lba", "0", "--input", s(&bb)]);
    assert!(snapshot() == before);

    // The backing file grew by a block: its size no longer matches.
    let f = std::fs::OpenOptions::new().write(true).open(&ab).unwrap();
    f.set_len(before.1.len() as u64 + 4096).unwrap();
    let out = expect(2, &["cache", "detach", s(&a)]);
    assert!(out.contains("created over 256 blocks"), "{out}");
    expect(1, &["cache", "check", s(&a)]);
    f.set_len(before.1.len() as u64).unwrap();
    expect(0, &["cache", "check", s(&a)]);

    // An nvramdisk image where a cache is expected, and the reverse.
    let disk = t.image("disk.img");
    expect(0, &["format", s(&disk), "--size", "8MiB"]);
    for cmd in ["status", "check", "writeback", "detach"] {
        let out = expect(2, &["cache", cmd, s(&disk)]);
        assert!(
            out.contains("an nvramdisk image, not a cache"),
            "{cmd}: {out}"
        );
    }
    for args in [
        vec!["check", s(&a)],
        vec!["recover", s(&a)],
        vec!["info", s(&a)],
    ] {
        let out = expect(2, &args);
        assert!(
            out.contains("cache image, not an nvramdisk"),
            "{args:?}: {out}"
        );
    }
    // A foreign file and a truncated image.
    let junk = t.image("junk");
    std::fs::write(&junk, vec![1u8; 8192]).unwrap();
    let out = expect(2, &["cache", "status", s(&junk)]);
    assert!(out.contains("not an nvcache image"), "{out}");
    let short = t.image("short");
    std::fs::write(&short, &before.0[..16384]).unwrap();
    let out = expect(2, &["cache", "check", s(&short)]);
    assert!(out.contains("truncated"), "{out}");
    assert!(snapshot() == before);
}

#[test]
fn locked_images_and_backing_files_are_refused_with_exit_3() {
    let t = Scratch::new();
    let (a, ab, _) = two_caches(&t);
    for (held, what) in [(&a, "image is locked"), (&ab, "backing file is locked")] {
        let f = File::open(held).unwrap();
        f.lock().unwrap(); // exclusive: as a serving daemon holds it
        for cmd in ["status", "check", "writeback", "detach"] {
            let out = expect(3, &["cache", cmd, s(&a)]);
            assert!(out.contains(what), "{cmd}: {out}");
        }
        expect(3, &["read", s(&a), "--lba", "0", "--count", "1"]);
        drop(f);
        let f = File::open(held).unwrap();
        f.lock_shared().unwrap(); // a reader: status and check share it, writers may not
        expect(0, &["cache", "status", s(&a)]);
        expect(0, &["cache", "check", s(&a)]);
        let out = expect(3, &["cache", "writeback", s(&a)]);
        assert!(out.contains(what), "{out}");
    }
}

#[test]
fn a_damaged_committed_entry_is_found_by_check_and_refused_by_open() {
    let t = Scratch::new();
    let (a, _, _) = two_caches(&t);
    let st = status(&a);
    assert_eq!(st["census"]["frozen_up_to_date"].as_u64(), Some(3), "{st}");
    // Slot 0 holds the first committed block: flip a bit of its epoch word (docs/format.md
    // 10.5: entries of 16 bytes from offset 8192; word 1 is the epoch and check bits).
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&a)
        .unwrap();
    let mut w = [0u8; 8];
    f.read_exact_at(&mut w, 8192 + 8).unwrap();
    w[6] ^= 0x10;
    f.write_all_at(&w, 8192 + 8).unwrap();
    let before = bytes(&a);
    let out = expect(1, &["cache", "check", s(&a)]);
    assert!(out.contains("DAMAGE") && out.contains("slot 0"), "{out}");
    assert!(out.contains("result       DAMAGED"), "{out}");
    let st = status(&a);
    assert!(
        st["findings"][0].as_str().unwrap().contains("check bits"),
        "{st}"
    );
    // An open refused for damage is a finding too (exit 1), as nvramdisk's is.
    let out = expect(1, &["cache", "writeback", s(&a)]);
    assert!(out.contains("slot 0"), "{out}");
    assert!(bytes(&a) == before, "a refused open wrote nothing");
}

/// A backing file that cannot be opened is the error it is, naming the file, never damage:
/// missing, exit 2; unreadable (a socket: no open(2) reads it, even root's), exit 3.
#[test]
fn a_missing_or_unreadable_backing_file_is_named_not_damage() {
    let t = Scratch::new();
    let (a, _, _) = two_caches(&t);
    let missing = t.backing("no-such-file");
    let sock = t.backing("sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    for (file, code, says) in [(&missing, 2, "no such backing file"), (&sock, 3, "sock")] {
        for verb in ["check", "status", "writeback"] {
            let out = expect(code, &["cache", verb, s(&a), "--backing", s(file)]);
            assert!(
                out.contains(s(file)) && out.contains(says) && !out.contains("DAMAGE"),
                "{verb}: {out}"
            );
        }
    }
    expect(0, &["cache", "check", s(&a)]);
}

#[test]
fn a_write_beyond_one_epoch_needs_chunked_and_settings_are_stored() {
    let t = Scratch::new();
    let (img, backing) = (t.image("c.img"), t.backing("b.img"));
    create(
        &img,
        &backing,
        &[
            "--backing-size",
            "4MiB",
            "--autocommit",
            "off",
            "--policy",
            "clock",
            "--checkpoint-ms",
            "500",
        ],
    );
    let st = status(&img);
    let set = &st["settings"];
    assert_eq!(set["autocommit_blocks"], 0);
    assert_eq!(set["autocommit_ms"], 0);
    assert_eq!(set["policy"], "clock");
    assert_eq!(set["checkpoint_ms"], 500);
    let out = expect(0, &["cache", "status", s(&img)]);
    assert!(
        out.contains("autocommit off (only a flush commits)"),
        "{out}"
    );
    let input = t.disk.path().join("in");
    std::fs::write(&input, vec![1u8; 65 * 4096]).unwrap();
    let out = expect(2, &["write", s(&img), "--lba", "0", "--input", s(&input)]);
    assert!(
        out.contains("one whole (one-epoch) write takes at most 64"),
        "{out}"
    );
    let out = expect(
        2,
        &[
            "write",
            s(&img),
            "--lba",
            "1000",
            "--input",
            s(&input),
            "--chunked",
        ],
    );
    assert!(out.contains("out of range"), "{out}");
    expect(
        0,
        &[
            "write",
            s(&img),
            "--lba",
            "0",
            "--input",
            s(&input),
            "--chunked",
        ],
    );
    expect(0, &["discard", s(&img), "--lba", "0", "--count", "2"]);
    let out = Command::new(common::bin())
        .args(["read", s(&img), "--lba", "0", "--count", "3"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        out.stdout[..8192].iter().all(|&b| b == 0) && out.stdout[8192..].iter().all(|&b| b == 1)
    );
    assert_eq!(
        status(&img)["epoch"],
        2,
        "a write (both chunks in one epoch: autocommit is off) and a discard"
    );
}
