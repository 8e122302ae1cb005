//! UBJ under real software: ext4 (`data=ordered` and `data=journal`) and xfs on a UBJ cache
//! (NVRAM under /dev/shm) over a backing file on the machine's disk, through `nvstack serve`
//! (FUSE) and a loop device. The machinery (stack, workload, verifier, kill and power-cut
//! cycles) is tests/common/stack.rs, shared with the nvramdisk tests of tests/serve.rs.
//!
//! Each file system survives 20 SIGKILLs of the daemon and 10 power cuts (5 under M1, 5 under
//! M2 on the NVRAM; the backing file is the simulated region's disk, whose sectors written
//! since the last fdatasync each come back old or new at the cut): after each, journal
//! replay, a clean `e2fsck -fn` / `xfs_repair -n`, and every file whose fsync and directory
//! fsync returned reads back exact.
//!
//! Where the kills land is shown by the daemon's own counters (its stats file, words 8-13:
//! the cache's dirty blocks, and whether a checkpoint is running, stored at every change under
//! the cache's lock, so the file read after a SIGKILL shows the instant of death). The cache
//! is small (4 MiB, about 1,000 slots) and checkpoints every 50 ms, so that both states are
//! frequent by construction; each kill waits (after a random 150-700 ms) for its target
//! state: a checkpoint running with dirty blocks in the cache for every other kill, dirty
//! blocks for the others. At least 15 of 20 kills must land with dirty blocks and at least 5
//! during a checkpoint.

#[path = "common/stack.rs"]
mod stack;

use stack::*;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// The cache of the crash tests: small, so that checkpoints (watermark and timer) are frequent.
const NVRAM: &str = "4MiB";
const SETTINGS: &[&str] = &["--checkpoint-ms", "50"];
const KILLS: u32 = 20;
/// Power cuts per fault model (M1 and M2): 10 per file system.
const CUTS_PER_MODEL: u32 = 5;

/// Odd kill cycles wait for a running checkpoint (with dirty blocks), even ones for dirty
/// blocks.
fn targets_checkpoint(c: u32) -> bool {
    c % 2 == 1
}

fn ubj_survives(fs: &'static str, mount_opts: Option<&str>, seed: u64) {
    let _g = serial();
    require_environment();
    let t = Instant::now();
    // mkfs.xfs refuses file systems under 300 MB; the power cuts hold the backing file in
    // memory (the simulated region's disk), so ext4 runs smaller.
    let backing = if fs == "xfs" { "320MiB" } else { "96MiB" };
    let mut st = Stack::new_cache(fs, NVRAM, backing, SETTINGS);
    st.mount_opts = mount_opts.map(String::from);
    st.make_fs();
    let target = |c: u32, w: &[u64]| {
        if targets_checkpoint(c) {
            w[W_CHECKPOINTING] == 1 && w[W_DIRTY] > 0
        } else {
            w[W_DIRTY] > 0
        }
    };
    let plan = KillPlan {
        cycles: KILLS,
        power_cut: None,
        seed,
        target: &target,
        wait: Duration::from_millis(2000),
    };
    let (after, verified) = kill_cycles(&mut st, &plan);
    assert!(
        after.iter().all(|w| w[W_IS_CACHE] == 1),
        "not served as a cache"
    );
    let dirty = after.iter().filter(|w| w[W_DIRTY] > 0).count();
    let in_checkpoint = after.iter().filter(|w| w[W_CHECKPOINTING] == 1).count();
    let name = format!(
        "{fs}{}",
        mount_opts.map_or(String::new(), |o| format!(" {o}"))
    );
    eprintln!(
        "{name} on UBJ: {KILLS} kills, {dirty} with dirty blocks in the cache, {in_checkpoint} \
         during a checkpoint, {verified} fsynced files verified"
    );
    assert!(
        dirty >= 15,
        "{name}: only {dirty} of {KILLS} kills landed with dirty blocks in the cache"
    );
    assert!(
        in_checkpoint >= 5,
        "{name}: only {in_checkpoint} of {KILLS} kills landed during a checkpoint"
    );
    assert!(verified > 0, "{name}: no fsynced file was ever verified");
    for (model, s) in [("M1", seed + 1), ("M2", seed + 2)] {
        let plan = KillPlan {
            cycles: CUTS_PER_MODEL,
            power_cut: Some(model),
            seed: s,
            target: &|_, _| true,
            wait: Duration::ZERO,
        };
        let (after, verified) = kill_cycles(&mut st, &plan);
        let dirty = after.iter().filter(|w| w[W_DIRTY] > 0).count();
        let unsynced = after.iter().filter(|w| w[W_ACKED] > w[W_COVERED]).count();
        eprintln!(
            "{name} on UBJ, power cuts {model}: {CUTS_PER_MODEL} cuts, {dirty} with dirty \
             blocks, {unsynced} with acknowledged writes not yet fsynced, {verified} fsynced \
             files verified"
        );
        assert!(
            verified > 0,
            "{name} {model}: no fsynced file was ever verified"
        );
        assert!(
            unsynced * 2 > CUTS_PER_MODEL as usize,
            "{name} {model}: only {unsynced} of {CUTS_PER_MODEL} power cuts landed with \
             unfsynced acknowledged writes"
        );
    }
    // The cache checks clean after the last clean stop, with its counters stored.
    let status = ok(
        60,
        &[
            bin().to_str().unwrap(),
            "cache",
            "check",
            st.image.to_str().unwrap(),
        ],
    );
    assert!(status.contains("consistent"), "{status}");
    eprintln!("{name} on UBJ: {:.1} s", t.elapsed().as_secs_f64());
}

#[test]
fn ext4_ordered_on_ubj_survives_kills_and_power_cuts() {
    ubj_survives("ext4", None, 31);
}

#[test]
fn ext4_data_journal_on_ubj_survives_kills_and_power_cuts() {
    ubj_survives("ext4", Some("data=journal"), 41);
}

#[test]
fn xfs_on_ubj_survives_kills_and_power_cuts() {
    ubj_survives("xfs", None, 51);
}

/// `nvstack cache status IMAGE --json`'s counters (stored at the last clean close).
fn counters(image: &Path) -> serde_json::Value {
    let out = ok(
        60,
        &[
            bin().to_str().unwrap(),
            "cache",
            "status",
            image.to_str().unwrap(),
            "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["counters"].clone()
}

fn word(v: &serde_json::Value, f: &str) -> u64 {
    v[f].as_u64()
        .unwrap_or_else(|| panic!("no integer '{f}' in {v}"))
}

/// A cache served through DIR/disk: an fsync is a commit (the live counters show it), writes
/// read back and survive a restart, a clean stop makes a final commit and stores the counters
/// that `cache status` shows.
#[test]
fn a_cache_serves_commits_on_fsync_and_stores_its_counters() {
    let _g = serial();
    require_environment();
    let st = Stack::new_cache("ext4", "8MiB", "64MiB", &["--autocommit", "off"]);
    st.serve(&["--threads", "2"]);
    assert!(st.log_text().contains("(cache, "), "{}", st.log_text());
    assert!(st.log_text().contains("durable at the next fsync"));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(st.fuse.join("disk"))
        .unwrap();
    assert_eq!(f.metadata().unwrap().len(), 64 << 20);
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    f.write_all_at(&data, (3 << 20) + 4093).unwrap();
    let w = stats_words(&st.stats);
    assert_eq!(w[W_IS_CACHE], 1);
    assert!(w[W_DIRTY] > 0, "written, not yet committed: {w:?}");
    let commits = w[W_COMMITS];
    f.sync_all().unwrap();
    let w = stats_words(&st.stats);
    assert_eq!(
        w[W_DIRTY], 0,
        "the fsync committed every dirty block: {w:?}"
    );
    assert_eq!(w[W_COMMITS], commits + 1, "one fsync, one commit: {w:?}");
    let mut back = vec![0u8; data.len()];
    f.read_exact_at(&mut back, (3 << 20) + 4093).unwrap();
    assert!(back == data, "read back through the cache");
    drop(f);
    st.stop();
    assert!(st.log_text().contains("final commit"), "{}", st.log_text());
    let k = counters(&st.image);
    assert!(word(&k, "commits") >= 1, "{k}");
    assert!(word(&k, "user_bytes_written") >= data.len() as u64, "{k}");
    st.serve(&[]);
    let f = std::fs::File::open(st.fuse.join("disk")).unwrap();
    f.read_exact_at(&mut back, (3 << 20) + 4093).unwrap();
    assert!(back == data, "after a restart");
    drop(f);
    st.stop();
}

fn up_args<'a>(b: &'a str, mnt: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![b, "up", "--mount", mnt];
    a.extend_from_slice(extra);
    a
}

/// `up` with a cache (create, serve, loop, mkfs, mount with options) and `down`; leftovers of
/// a killed daemon exit 3; the detached backing file served plain (`--backend direct-file`).
#[test]
fn up_and_down_with_a_cache_and_the_direct_file() {
    let _g = serial();
    require_environment();
    let mut st = Stack::new_cache("ext4", "8MiB", "64MiB", &[]);
    let b = bin();
    let b = b.to_str().unwrap();
    let img = st.shm.join("up.img");
    let back = st.disk_dir.clone().unwrap().join("up.backing");
    let (img_s, back_s) = (img.to_str().unwrap(), back.to_str().unwrap());
    let mnt = st.mnt.to_str().unwrap().to_string();
    let create = [
        "--image",
        img_s,
        "--size",
        "8MiB",
        "--cache",
        "ubj",
        "--backing",
        back_s,
        "--backing-size",
        "128MiB",
        "--checkpoint-ms",
        "100",
        "--fs",
        "ext4",
        "--mount-options",
        "data=journal",
    ];
    let o = sh(180, &up_args(b, &mnt, &create));
    assert!(
        o.status.success(),
        "up: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let said = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        said.contains("created UBJ cache") && said.contains("made ext4"),
        "{said}"
    );
    assert!(is_mounted(&st.mnt));
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(mounts.contains("data=journal"), "{mounts}");
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 13) as u8).collect();
    std::fs::write(st.mnt.join("f"), &data).unwrap();
    let o = sh(120, &[b, "down", "--mount", &mnt]);
    assert!(
        o.status.success(),
        "down: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("final commit"));
    let k = counters(&img);
    assert!(word(&k, "user_bytes_written") >= data.len() as u64, "{k}");
    // mkfs discarded all 32,768 blocks: on the backing file, not through the 2,048 slots as a
    // tombstone a block, which autocommit would have committed every 64 (580 commits and 282
    // checkpoints before docs/format.md 10.7's long discard; 6 and 0 with it).
    assert!(word(&k, "commits") < 100, "{k}");
    // Reused: served as a cache without --cache; a killed daemon's leftovers exit 3.
    let reuse = ["--image", img_s, "--fs", "ext4"];
    let o = sh(180, &up_args(b, &mnt, &reuse));
    assert!(
        o.status.success(),
        "up again: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(std::fs::read(st.mnt.join("f")).unwrap() == data);
    let o = sh(30, &up_args(b, &mnt, &reuse));
    expect_exit(&o, 3, "already mounted");
    let state = std::fs::read_to_string(format!(
        "/run/nvstack/{}/state.json",
        mnt.trim_matches('/').replace('/', "-")
    ))
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&state).unwrap();
    let pid = v["daemon_pid"].as_u64().unwrap();
    assert_eq!(v["backend"], "cache");
    ok(10, &["kill", "-KILL", &pid.to_string()]);
    wait_gone(pid as u32);
    let o = sh(120, &[b, "down", "--mount", &mnt]);
    assert!(
        o.status.success(),
        "down after a kill: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!is_mounted(&st.mnt));
    // Detached, the backing file alone holds the file system: served plain.
    ok(120, &[b, "cache", "detach", img_s]);
    let o = sh(
        180,
        &up_args(b, &mnt, &["--backend", "direct-file", "--backing", back_s]),
    );
    assert!(
        o.status.success(),
        "up direct-file: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        std::fs::read(st.mnt.join("f")).unwrap() == data,
        "on the plain file"
    );
    let o = sh(120, &[b, "down", "--mount", &mnt]);
    assert!(
        o.status.success(),
        "down: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    // A killed cache daemon's stale FUSE mount: serve refuses it (exit 3), image unchanged.
    st.serve(&[]);
    let pid = st.daemon_pid().unwrap();
    ok(10, &["kill", "-KILL", &pid.to_string()]);
    wait_gone(pid);
    let h = sha(&st.image);
    let o = st.serve_cmd(&[]);
    expect_exit(&o, 3, "already mounted");
    assert_eq!(sha(&st.image), h, "a refused serve changed the image");
    ok(30, &["umount", "-l", st.fuse.to_str().unwrap()]);
    // A loop device on the backing file itself.
    let l = ok(
        30,
        &[
            "losetup",
            "--find",
            "--show",
            st.backing().to_str().unwrap(),
        ],
    );
    let o = st.serve_cmd(&[]);
    ok(30, &["losetup", "-d", &l]);
    expect_exit(&o, 3, "loop device is attached");
    st.loop_dev = None;
}

/// Bad arguments of serve and up with caches and the direct file: exit 2 naming what is
/// wrong, nothing mounted.
#[test]
fn ubj_serve_and_up_bad_arguments() {
    let _g = serial();
    require_environment();
    let st = Stack::new_cache("ext4", "8MiB", "64MiB", &[]);
    let b = bin();
    let b = b.to_str().unwrap();
    let img = st.image.to_str().unwrap();
    let fuse = st.fuse.to_str().unwrap();
    let back = st.backing();
    let back = back.to_str().unwrap();
    let disk = st.shm.join("nv.img");
    ok(
        60,
        &[b, "format", disk.to_str().unwrap(), "--size", "16MiB"],
    );
    let disk = disk.to_str().unwrap();
    let m = ["--mountpoint", fuse];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["serve", "--backend", "direct-file"], "--backing"),
        (
            vec!["serve", img, "--backend", "direct-file", "--backing", back],
            "no IMAGE",
        ),
        (
            vec!["serve", "--backend", "direct-file", "--backing", back],
            "not detached",
        ),
        (
            vec!["serve", img, "--backend", "nvramdisk"],
            "a UBJ cache image, not an nvramdisk image (omit --backend, or --backend cache)",
        ),
        (
            vec!["serve", disk, "--backend", "cache"],
            "not a cache image",
        ),
        (vec!["serve", disk, "--backing", back], "--backing"),
        (
            vec!["serve", disk, "--checkpoint-ms", "5"],
            "cache settings",
        ),
        (vec!["serve", img, "--backend", "raw"], "--force"),
        (
            vec![
                "serve",
                img,
                "--high-watermark",
                "40",
                "--low-watermark",
                "60",
            ],
            "watermark",
        ),
        (
            vec![
                "serve",
                "--backend",
                "direct-file",
                "--backing",
                back,
                "--power-cut",
                "M1:1:1",
            ],
            "--power-cut",
        ),
        (vec!["serve"], "no image"),
    ];
    for (args, needle) in &cases {
        let mut a = vec![b];
        a.extend_from_slice(args);
        a.extend_from_slice(&m);
        let o = sh(30, &a);
        expect_exit(&o, 2, needle);
        assert!(!is_mounted(&st.fuse), "{args:?} mounted something");
    }
    let new_img = st.shm.join("new.img");
    let new_img = new_img.to_str().unwrap();
    let up_cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--image", new_img, "--cache", "ubj"], "--backing"),
        (vec!["--image", disk, "--backing", back], "--backing"),
        (vec!["--backend", "direct-file"], "--backing"),
        (
            vec![
                "--backend",
                "direct-file",
                "--backing",
                back,
                "--image",
                img,
            ],
            "no --image",
        ),
        (vec!["--image", img, "--backend", "raw"], "a cache image"),
        (
            vec!["--image", disk, "--checkpoint-ms", "5"],
            "cache settings",
        ),
        (
            vec![
                "--image",
                new_img,
                "--size",
                "8MiB",
                "--cache",
                "ubj",
                "--backing",
                back,
            ],
            "another cache",
        ),
    ];
    for (args, needle) in &up_cases {
        let o = sh(60, &up_args(b, fuse, args));
        expect_exit(&o, 2, needle);
        assert!(!is_mounted(&st.fuse), "up {args:?} mounted something");
        assert!(
            !Path::new(new_img).exists(),
            "up {args:?} left an image behind"
        );
    }
}
