//! The write cache (NVFAT, seed 004) under real software, through `nvstack serve` (FUSE):
//!
//! - **FAT16 with FAT-metadata admission, 20 daemon SIGKILLs.** A 32 MiB FAT16 volume (mkfs.fat,
//!   512-byte sectors) on a backing file on the machine's disk, a 64 KiB write cache (NVFAT's
//!   range is 1-128 KB; 104 slots of 512 B, so destages for room are frequent) with `--admit
//!   fat-metadata --max-age 300` under /dev/shm. mtools (mcopy, mdel) drive the served file
//!   `DIR/disk` directly (this kernel has no vfat to mount). After a random 150-700 ms of
//!   copying, the daemon gets SIGKILL at the next boundary between mtools commands: right after
//!   an mcopy or mdel returned (its data not yet flushed) or right after the fsync that follows
//!   it. Not inside one mtools command: FAT has no journal and mtools writes a file's directory
//!   entry before its FAT chain (strace of mcopy: data, directory sector, then the FATs), so a
//!   command cut in between leaves a volume fsck.fat repairs on any device, cached or not. After
//!   each kill: restart (recovery), `fsck.fat -n` clean, and every command that returned is
//!   there exactly: the files of every mcopy byte for byte, those of every mdel gone. A daemon
//!   kill loses no acknowledged write (admitted ones are durable in NVRAM on return, bypassed
//!   ones were written to the backing file, whose page cache outlives the daemon), so this
//!   holds for the command before the kill's fsync too. At the end `nvstack cache detach`, and
//!   the backing file alone is a clean FAT volume (`fsck.fat -n`) with every file. The stats
//!   file (words 8-21) read after each kill must show cached (dirty) blocks in at least 15 of
//!   the 20 kills; destages for room and by max-age must have happened.
//! - **ext4 on a write cache (`--admit all`, 4 KiB sectors), power cuts M1 and M2 and kills**,
//!   through the machinery of tests/common/stack.rs: the backing file is the simulated
//!   region's disk (sectors written since its last fdatasync come back old or new at the cut);
//!   after each death, journal replay, `e2fsck -fn` clean, every fsynced file exact.
//! - **Bad input**: a missing or resized backing file, settings given to serve, `up --admit
//!   fat-metadata`, the write cache's flags with `--cache ubj`: refused with a message naming
//!   it, nothing mounted.

#[path = "common/stack.rs"]
mod stack;

use stack::*;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const FAT_BYTES: u64 = 32 << 20;
const NVRAM_FAT: &str = "64KiB";
const KILLS: u32 = 20;
const DIRS: [&str; 3] = ["d0", "d1", "d2"];

fn require_fat_tools() {
    for t in ["mkfs.fat", "fsck.fat", "mcopy", "mmd", "mdel", "sync"] {
        let found = Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {t}"))
            .output()
            .unwrap()
            .status
            .success();
        assert!(
            found,
            "{t} not found: scripts/deps.sh installs dosfstools and mtools"
        );
    }
}

/// An mtools command under `timeout` (mtools' geometry check skipped: an image file has none).
fn mt_ok(secs: u64, args: &[&str]) {
    let mut a = vec!["env", "MTOOLS_SKIP_CHECK=1"];
    a.extend_from_slice(args);
    ok(secs, &a);
}

/// A FAT16 volume of [`FAT_BYTES`] (512-byte sectors) on a new backing file, one 4 KiB block
/// longer for the cache's label, and a write cache over it admitting the FAT's metadata.
fn fat_stack() -> Stack {
    let st = Stack::with_disk("fat");
    let back = st.backing();
    let f = std::fs::File::create(&back).unwrap();
    f.set_len(FAT_BYTES).unwrap();
    ok(
        60,
        &[
            "mkfs.fat",
            "-F",
            "16",
            "-S",
            "512",
            "-n",
            "NVSTACK",
            back.to_str().unwrap(),
        ],
    );
    f.set_len(FAT_BYTES + 4096).unwrap();
    drop(f);
    ok(
        60,
        &[
            bin().to_str().unwrap(),
            "cache",
            "create",
            st.image.to_str().unwrap(),
            "--size",
            NVRAM_FAT,
            "--cache",
            "write",
            "--admit",
            "fat-metadata",
            "--max-age",
            "300",
            "--backing",
            back.to_str().unwrap(),
        ],
    );
    st
}

fn fsck_clean(path: &Path, when: &str) {
    let o = sh(120, &["fsck.fat", "-n", path.to_str().unwrap()]);
    assert!(
        o.status.success(),
        "fsck.fat -n {} {when}: {}{}",
        path.display(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// What the volume must hold: every file an mcopy that returned wrote, none an mdel that
/// returned removed.
#[derive(Default)]
struct Model {
    files: BTreeMap<String, Vec<u8>>,
    deleted: BTreeSet<String>,
}

/// Every file of the FAT volume in `image`, by lower-case path (mcopy -s of the whole tree).
fn files_of(image: &Path, scratch: &Path) -> BTreeMap<String, Vec<u8>> {
    let out = scratch.join("out");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir(&out).unwrap();
    mt_ok(
        300,
        &[
            "mcopy",
            "-s",
            "-n",
            "-i",
            image.to_str().unwrap(),
            "::/*",
            out.to_str().unwrap(),
        ],
    );
    let mut found = BTreeMap::new();
    for d in DIRS {
        let Ok(rd) = std::fs::read_dir(out.join(d)) else {
            continue;
        };
        for e in rd.flatten() {
            let name = format!("{d}/{}", e.file_name().to_string_lossy().to_lowercase());
            found.insert(name, std::fs::read(e.path()).unwrap());
        }
    }
    std::fs::remove_dir_all(&out).unwrap();
    found
}

/// The volume holds the model exactly (no other file); returns the files checked.
fn verify(image: &Path, scratch: &Path, m: &Model, when: &str) -> usize {
    let found = files_of(image, scratch);
    for (name, want) in &m.files {
        let got = found
            .get(name)
            .unwrap_or_else(|| panic!("{when}: {name} is missing"));
        assert!(
            got == want,
            "{when}: {name} differs ({} bytes, {} expected)",
            got.len(),
            want.len()
        );
    }
    for name in found.keys() {
        assert!(
            m.files.contains_key(name),
            "{when}: {name} is there but was never copied, or was deleted ({})",
            if m.deleted.contains(name) {
                "deleted"
            } else {
                "unknown"
            }
        );
    }
    m.files.len()
}

/// One mtools command of the workload: copy a new file (every sixth: delete an old one).
/// Updates the model once the command returned.
fn step(st: &Stack, m: &mut Model, rng: &mut Rng, k: u64) {
    let disk = st.fuse.join("disk");
    let disk = disk.to_str().unwrap();
    if k % 6 == 5 && !m.files.is_empty() {
        let names: Vec<String> = m.files.keys().cloned().collect();
        let name = names[(rng.next() % names.len() as u64) as usize].clone();
        mt_ok(60, &["mdel", "-i", disk, &format!("::/{name}")]);
        m.files.remove(&name);
        m.deleted.insert(name);
        return;
    }
    let name = format!("{}/f{k:05}.bin", DIRS[(k % DIRS.len() as u64) as usize]);
    let len = rng.range(1, 48 << 10) as usize;
    let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
    let src = st.tmp.join("src");
    std::fs::write(&src, &data).unwrap();
    mt_ok(
        60,
        &[
            "mcopy",
            "-i",
            disk,
            src.to_str().unwrap(),
            &format!("::/{name}"),
        ],
    );
    // The stack's drop removes its directory only when empty (never recursively: a mount may
    // still sit under it), so the source file goes now.
    std::fs::remove_file(&src).unwrap();
    m.files.insert(name, data);
}

/// Copy until the cycle's random moment has passed, then SIGKILL the daemon at the next
/// boundary of the cycle's kind (after a command, or after the fsync that follows it).
fn copy_then_kill(st: &Stack, m: &mut Model, rng: &mut Rng, k: &mut u64) -> Vec<u64> {
    let pid = st.daemon_pid().expect("daemon running");
    let mut killer = Command::new("sh")
        .arg("-c")
        .arg(format!("read go && kill -KILL {pid}"))
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let kill_at = Instant::now() + Duration::from_millis(rng.range(150, 700));
    let before_fsync = rng.next().is_multiple_of(2);
    let disk = st.fuse.join("disk");
    loop {
        step(st, m, rng, *k);
        *k += 1;
        let due = Instant::now() >= kill_at;
        if due && before_fsync {
            break;
        }
        ok(30, &["sync", disk.to_str().unwrap()]);
        if due {
            break;
        }
    }
    killer.stdin.take().unwrap().write_all(b"go\n").unwrap();
    assert!(killer.wait().unwrap().success(), "kill failed");
    wait_gone(pid);
    stats_words(&st.stats)
}

#[test]
fn fat_on_the_write_cache_survives_daemon_kills_and_detaches_complete() {
    let _g = serial();
    require_environment();
    require_fat_tools();
    let t = Instant::now();
    let mut st = fat_stack();
    st.fs = "fat";
    // The seed's one-block destage (NVFAT's): the cache fills and each new block destages one.
    st.serve(&["--seed-destage"]);
    let disk = st.fuse.join("disk");
    for d in DIRS {
        mt_ok(
            60,
            &["mmd", "-i", disk.to_str().unwrap(), &format!("::/{d}")],
        );
    }
    ok(30, &["sync", disk.to_str().unwrap()]);
    let (mut m, mut rng, mut k) = (Model::default(), Rng(0x05ee_dfa7), 0u64);
    let (mut dirty, mut room, mut max_age, mut verified) = (0, 0, 0, 0);
    for c in 0..KILLS {
        let w = copy_then_kill(&st, &mut m, &mut rng, &mut k);
        assert_eq!(w[W_IS_CACHE], 2, "not served as a write cache");
        eprintln!(
            "fat cycle {c}: {} files; at the kill {} blocks cached, {} slots used, destaged \
             {} for room and {} by max-age, {} blocks bypassed",
            m.files.len(),
            w[W_DIRTY],
            w[W_USED_SLOTS],
            w[W_DESTAGED_ROOM],
            w[W_DESTAGED_MAX_AGE],
            w[W_BYPASSED]
        );
        dirty += usize::from(w[W_DIRTY] > 0);
        room += w[W_DESTAGED_ROOM];
        max_age += w[W_DESTAGED_MAX_AGE];
        st.clean_after_death();
        st.serve(&["--seed-destage"]);
        fsck_clean(&disk, &format!("after kill {c}"));
        verified += verify(&disk, &st.tmp, &m, &format!("after kill {c}"));
    }
    st.stop();
    let image = st.image.to_str().unwrap().to_string();
    let check = ok(60, &[bin().to_str().unwrap(), "cache", "check", &image]);
    assert!(
        check.contains(" 0 entries recovery would clear"),
        "a clean stop left entries to clear: {check}"
    );
    ok(120, &[bin().to_str().unwrap(), "cache", "detach", &image]);
    let back = st.backing();
    fsck_clean(&back, "(the backing file alone, after detach)");
    let n = verify(&back, &st.tmp, &m, "the backing file alone, after detach");
    eprintln!(
        "FAT16 on the write cache: {KILLS} kills, {dirty} with cached blocks, {room} blocks \
         destaged for room and {max_age} by max-age before the kills, {verified} file checks \
         after kills, {n} files on the detached backing file; {:.0} s",
        t.elapsed().as_secs_f64()
    );
    assert!(
        dirty >= 15,
        "only {dirty} of {KILLS} kills landed with cached blocks"
    );
    assert!(room > 0, "no destage for room: the cache never filled");
    assert!(max_age > 0, "the timer never destaged by max-age");
    assert!(n >= 20, "only {n} files on the volume at the end");
}

#[test]
fn ext4_on_the_write_cache_survives_power_cuts_and_kills() {
    let _g = serial();
    require_environment();
    let t = Instant::now();
    let settings = ["--sector", "4096", "--max-age", "200"];
    let mut st = Stack::new_write_cache("ext4", "4MiB", "96MiB", &settings);
    st.make_fs();
    let target = |_: u32, w: &[u64]| w[W_DIRTY] > 0;
    let kills = KillPlan {
        cycles: 4,
        power_cut: None,
        seed: 31,
        target: &target,
        wait: Duration::from_millis(2000),
    };
    let (after, verified) = kill_cycles(&mut st, &kills);
    assert!(after.iter().all(|w| w[W_IS_CACHE] == 2));
    let dirty = after.iter().filter(|w| w[W_DIRTY] > 0).count();
    eprintln!("ext4 on the write cache: 4 kills, {dirty} with cached blocks, {verified} verified");
    assert!(
        dirty >= 3,
        "only {dirty} of 4 kills landed with cached blocks"
    );
    assert!(verified > 0, "no fsynced file was ever verified");
    for (model, seed) in [("M1", 32), ("M2", 33)] {
        let plan = KillPlan {
            cycles: 3,
            power_cut: Some(model),
            seed,
            target: &|_, _| true,
            wait: Duration::ZERO,
        };
        let (after, verified) = kill_cycles(&mut st, &plan);
        let unsynced = after.iter().filter(|w| w[W_ACKED] > w[W_COVERED]).count();
        eprintln!(
            "ext4 on the write cache, power cuts {model}: 3 cuts, {unsynced} with acknowledged \
             writes not yet fsynced, {verified} fsynced files verified"
        );
        assert!(verified > 0, "{model}: no fsynced file was ever verified");
    }
    // kill_cycles ends with a clean stop (SIGTERM) of a cache served with the default
    // destage: nothing is left for recovery to clear.
    let check = ok(
        60,
        &[
            bin().to_str().unwrap(),
            "cache",
            "check",
            st.image.to_str().unwrap(),
        ],
    );
    assert!(
        check.contains(" 0 entries recovery would clear"),
        "a clean stop left entries to clear: {check}"
    );
    eprintln!(
        "ext4 on the write cache: {:.0} s",
        t.elapsed().as_secs_f64()
    );
}

fn serve_refused(st: &Stack, extra: &[&str], code: i32, needle: &str) {
    let o = st.serve_cmd(extra);
    expect_exit(&o, code, needle);
    assert!(!is_mounted(&st.fuse), "a refused serve left a mount");
}

#[test]
fn bad_input_is_refused() {
    let _g = serial();
    require_environment();
    let st = Stack::new_write_cache("bad", "1MiB", "16MiB", &[]);
    let back = st.backing();
    let moved = back.with_extension("moved");
    std::fs::rename(&back, &moved).unwrap();
    serve_refused(&st, &[], 2, back.to_str().unwrap());
    std::fs::rename(&moved, &back).unwrap();
    // 4 KiB shorter: the label (the last block) is gone.
    let f = std::fs::OpenOptions::new().write(true).open(&back).unwrap();
    let len = f.metadata().unwrap().len();
    let mut label = vec![0u8; 4096];
    std::os::unix::fs::FileExt::read_exact_at(
        &std::fs::File::open(&back).unwrap(),
        &mut label,
        len - 4096,
    )
    .unwrap();
    f.set_len(len - 4096).unwrap();
    serve_refused(&st, &[], 2, "label");
    f.set_len(len + 4096).unwrap();
    serve_refused(&st, &[], 2, "label");
    f.set_len(len).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &label, len - 4096).unwrap();
    drop(f);
    serve_refused(&st, &["--policy", "lru"], 2, "settings stored at create");
    serve_refused(
        &st,
        &["--backend", "nvramdisk"],
        2,
        "a write cache image, not an nvramdisk image",
    );
    // The cache still serves after all that.
    st.serve(&[]);
    st.stop();
    let mnt = st.mnt.to_str().unwrap();
    let img = st.shm.join("new.img");
    let img = img.to_str().unwrap();
    let b = bin();
    let up = |extra: &[&str]| {
        let mut a = vec![b.to_str().unwrap(), "up", "--image", img, "--size", "1MiB"];
        a.extend_from_slice(extra);
        a.extend_from_slice(&["--mount", mnt]);
        sh(60, &a)
    };
    let newback = st.shm.join("new.back");
    let newback = newback.to_str().unwrap();
    let o = up(&[
        "--cache",
        "write",
        "--admit",
        "fat-metadata",
        "--backing",
        newback,
    ]);
    expect_exit(&o, 2, "vfat");
    let o = up(&["--cache", "ubj", "--max-age", "100", "--backing", newback]);
    expect_exit(&o, 2, "--max-age");
    assert!(!Path::new(img).exists() && !Path::new(newback).exists());
    assert!(!is_mounted(&st.mnt));
}

/// `serve` as the Stack runs it, without `--stats`.
fn serve_without_stats(st: &Stack) {
    let o = sh(
        120,
        &[
            bin().to_str().unwrap(),
            "serve",
            st.image.to_str().unwrap(),
            "--mountpoint",
            st.fuse.to_str().unwrap(),
            "--pid-file",
            st.pid_file.to_str().unwrap(),
            "--log",
            st.log.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "serve failed: {}", st.log_text());
}

/// `cache status` on a served cache, either kind (issue 43 item 3): the daemon's live figures
/// with `"live": true` and its pid, whether it runs with `--stats` or not (it always publishes
/// them); after a clean stop the offline status again.
#[test]
fn cache_status_on_a_served_cache_shows_the_daemons_live_figures() {
    let _g = serial();
    require_environment();
    let nv = bin();
    let nv = nv.to_str().unwrap();
    for kind in ["ubj", "write"] {
        let st = match kind {
            "ubj" => Stack::new_cache("live", "4MiB", "16MiB", &[]),
            _ => Stack::new_write_cache("live", "1MiB", "16MiB", &[]),
        };
        let img = st.image.to_str().unwrap();
        for with_stats in [true, false] {
            let how = format!("{kind}, --stats {with_stats}");
            if with_stats {
                st.serve(&[]);
            } else {
                serve_without_stats(&st);
            }
            let pid = st.daemon_pid().expect("a daemon");
            let disk = std::fs::OpenOptions::new()
                .write(true)
                .open(st.fuse.join("disk"))
                .unwrap();
            disk.write_all_at(&vec![0x5a; 64 << 10], 0).unwrap();
            disk.sync_all().unwrap();
            drop(disk); // an open file would hold the mount at the stop
            let out = ok(30, &[nv, "cache", "status", img, "--json"]);
            let v: serde_json::Value = serde_json::from_str(&out).unwrap();
            assert_eq!(v["live"], true, "{how}: {v:#}");
            assert_eq!(v["pid"], u64::from(pid), "{how}: {v:#}");
            assert_eq!(v["kind"], kind, "{how}: {v:#}");
            assert!(v["daemon"]["fsyncs"].as_u64().unwrap() >= 1, "{how}: {v:#}");
            let live = match kind {
                "ubj" => v["cache"]["commits"].as_u64().unwrap(),
                _ => v["cache"]["dirty_blocks"].as_u64().unwrap() / 128,
            };
            assert!(
                live >= 1,
                "{how}: the write is not in the live figures: {v:#}"
            );
            assert!(
                v["superblock"]["slots"].as_u64().unwrap() > 0,
                "{how}: {v:#}"
            );
            let text = ok(30, &[nv, "cache", "status", img]);
            assert!(text.contains(&format!("daemon pid {pid}")), "{how}: {text}");
            st.stop();
            let out = ok(30, &[nv, "cache", "status", img, "--json"]);
            let v: serde_json::Value = serde_json::from_str(&out).unwrap();
            assert!(v.get("live").is_none(), "{how}: live after the stop: {v:#}");
        }
    }
}
