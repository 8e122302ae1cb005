//! The whole stack with real kernel parts: `nvstack serve` (FUSE) -> loop device -> ext4/xfs.
//!
//! Needs root, /dev/fuse, loop devices, e2fsprogs, xfsprogs and Debian's /usr/bin/python3
//! (scripts/test.sh installs them). Every test that mounts holds one lock, so they run one at
//! a time; every external command runs under `timeout` (the workload, which runs until it is
//! killed, under a deadline of its own); names come from mktemp-style unique directories; a
//! guard unmounts, detaches and stops everything on the way out, pass or fail, and another
//! kills the workload.

#[path = "common/stack.rs"]
mod stack;

use stack::*;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Kill cycles of an nvramdisk stack: the daemon is SIGKILLed (or its power cut) while the
/// workload writes, at the first instant (within 300 ms of a random moment) at which it has
/// acknowledged writes that no fsync covers. Returns (cycles, cycles that landed with
/// acknowledged writes no fsync had covered, fsynced files verified).
fn kill_cycles(
    fs: &'static str,
    cycles: u32,
    power_cut: Option<&str>,
    seed: u64,
) -> (u32, u32, usize) {
    // mkfs.xfs refuses file systems under 300 MB; ext4 power cuts run smaller (the simulated
    // region holds the image and logs every store in memory).
    let size = match (fs, power_cut) {
        ("xfs", _) => "320MiB",
        (_, Some(_)) => "96MiB",
        _ => "256MiB",
    };
    let mut st = Stack::new(fs, size);
    st.make_fs();
    let plan = KillPlan {
        cycles,
        power_cut,
        seed,
        target: &|_, w| w[W_ACKED] > w[W_COVERED],
        wait: std::time::Duration::from_millis(300),
    };
    let (after, verified) = stack::kill_cycles(&mut st, &plan);
    let landed = after.iter().filter(|w| w[W_ACKED] > w[W_COVERED]).count() as u32;
    (cycles, landed, verified)
}

#[test]
fn ext4_survives_daemon_kills() {
    let _g = serial();
    require_environment();
    let (cycles, landed, verified) = kill_cycles("ext4", 20, None, 11);
    eprintln!("ext4: {cycles} kills, {landed} with acknowledged writes not yet fsynced, {verified} fsynced files verified");
    assert!(
        landed >= 15,
        "only {landed} of {cycles} kills landed with unfsynced acknowledged writes"
    );
    assert!(verified > 0, "no fsynced file was ever verified");
}

#[test]
fn xfs_survives_daemon_kills() {
    let _g = serial();
    require_environment();
    let (cycles, landed, verified) = kill_cycles("xfs", 20, None, 23);
    eprintln!("xfs: {cycles} kills, {landed} with acknowledged writes not yet fsynced, {verified} fsynced files verified");
    assert!(
        landed >= 15,
        "only {landed} of {cycles} kills landed with unfsynced acknowledged writes"
    );
    assert!(verified > 0, "no fsynced file was ever verified");
}

/// Power cuts per fault model per file system.
const POWER_CUTS: u32 = 10;

#[test]
fn ext4_survives_power_cuts_m1_m2() {
    let _g = serial();
    require_environment();
    for (model, seed) in [("M1", 5), ("M2", 6)] {
        let (cycles, landed, verified) = kill_cycles("ext4", POWER_CUTS, Some(model), seed);
        eprintln!(
            "ext4 power cuts {model}: {cycles} cuts, {landed} with acknowledged writes not yet \
             fsynced, {verified} fsynced files verified"
        );
        assert!(
            landed * 2 > cycles,
            "ext4 {model}: only {landed} of {cycles} power cuts landed with unfsynced \
             acknowledged writes"
        );
        assert!(
            verified > 0,
            "no fsynced file was ever verified under {model}"
        );
    }
}

#[test]
fn xfs_survives_power_cuts_m1_m2() {
    let _g = serial();
    require_environment();
    for (model, seed) in [("M1", 7), ("M2", 8)] {
        let (cycles, landed, verified) = kill_cycles("xfs", POWER_CUTS, Some(model), seed);
        eprintln!(
            "xfs power cuts {model}: {cycles} cuts, {landed} with acknowledged writes not yet \
             fsynced, {verified} fsynced files verified"
        );
        assert!(
            landed * 2 > cycles,
            "xfs {model}: only {landed} of {cycles} power cuts landed with unfsynced \
             acknowledged writes"
        );
        assert!(
            verified > 0,
            "no fsynced file was ever verified under {model}"
        );
    }
}

/// Byte-level semantics of DIR/disk: unaligned reads and writes, the end of the file,
/// discard through fallocate (fstrim), SIGINT unmounts.
#[test]
fn serve_file_semantics_and_discard() {
    let _g = serial();
    require_environment();
    let mut st = Stack::new("ext4", "64MiB");
    st.serve(&["--threads", "2"]);
    let disk = st.fuse.join("disk");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&disk)
        .unwrap();
    let size = f.metadata().unwrap().len();
    assert!(size > 60 << 20 && size.is_multiple_of(4096));
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + 3) as u8).collect();
    f.write_all_at(&data, 4093).unwrap();
    f.write_all_at(&[0xAB; 3], 4095).unwrap();
    let mut back = vec![0u8; 10_010];
    f.read_exact_at(&mut back, 4090).unwrap();
    assert_eq!(&back[..3], &[0, 0, 0]);
    assert_eq!(&back[3..5], &data[..2]);
    assert_eq!(&back[5..8], &[0xAB; 3]);
    assert_eq!(&back[8..10_003], &data[5..]);
    // A 256 KiB write at an unaligned offset would touch 65 blocks: the kernel (told a
    // max_write of 63 blocks) sends it as several writes, each one atomic.
    // Counted by writes made durable: a write is counted durable before its reply, but
    // acknowledged only after it, so the acknowledged count may still lag here.
    let durable0 = durable_writes(&st.stats);
    let long: Vec<u8> = (0..262_144u32).map(|i| (i % 253) as u8).collect();
    f.write_all_at(&long, (5 << 20) + 4093).unwrap();
    let durable1 = durable_writes(&st.stats);
    assert!(
        durable1 - durable0 >= 2,
        "a 262,144-byte write at offset 4093 reached the daemon as {} write(s)",
        durable1 - durable0
    );
    let mut back_long = vec![0u8; long.len()];
    f.read_exact_at(&mut back_long, (5 << 20) + 4093).unwrap();
    assert!(
        back_long == long,
        "the long unaligned write did not read back"
    );
    assert!(!st.log_text().contains("refused"), "{}", st.log_text());
    // The last byte, then past the end.
    f.write_all_at(&[9], size - 1).unwrap();
    let mut one = [0u8; 8];
    assert_eq!(f.read_at(&mut one, size - 1).unwrap(), 1);
    assert_eq!(one[0], 9);
    assert_eq!(f.read_at(&mut one, size).unwrap(), 0);
    assert!(
        f.write_at(&[1, 2], size - 1).is_err(),
        "a write past the end must fail"
    );
    f.sync_all().unwrap();
    drop(f);
    // Through a loop device and ext4: fstrim reaches the daemon as discards.
    st.attach();
    st.mkfs();
    st.mount();
    let big = st.mnt.join("big");
    std::fs::write(&big, vec![0x5A; 8 << 20]).unwrap();
    ok(30, &["sync"]);
    std::fs::remove_file(&big).unwrap();
    ok(30, &["sync"]);
    let before = std::fs::read(&st.stats).unwrap();
    let discards_before = u64::from_le_bytes(before[56..64].try_into().unwrap());
    ok(60, &["fstrim", st.mnt.to_str().unwrap()]);
    let after = std::fs::read(&st.stats).unwrap();
    let discards_after = u64::from_le_bytes(after[56..64].try_into().unwrap());
    assert!(
        discards_after > discards_before,
        "fstrim sent no discard to the daemon"
    );
    st.umount();
    st.detach();
    // SIGINT unmounts cleanly (no lazy detach) and the daemon ends.
    st.stop_by_signal("INT", 2);
    // The image is clean afterwards.
    ok(
        60,
        &[bin().to_str().unwrap(), "check", st.image.to_str().unwrap()],
    );
}

/// SIGTERM unmounts cleanly, also after the file was used through a loop device and ext4;
/// `--backend raw` serves a plain file through the same path: data written through DIR/disk
/// (unaligned, across blocks, a maximal write) reads back through it, sits at the same offsets
/// of the image file (plain blocks, no map), survives a restart, and ext4 on it checks clean.
#[test]
fn raw_backend_serves_and_sigterm_unmounts() {
    let _g = serial();
    require_environment();
    let mut st = Stack::new("ext4", "64MiB");
    let size: u64 = 64 << 20;
    // A plain file of zeros, not an nvramdisk image (no --force needed).
    std::fs::remove_file(&st.image).unwrap();
    std::fs::File::create(&st.image)
        .unwrap()
        .set_len(size)
        .unwrap();
    st.serve(&["--backend", "raw", "--threads", "2"]);
    assert!(st.log_text().contains("(raw, "), "{}", st.log_text());
    let max_write = 63 * 4096;
    let pattern = |len: usize, k: u8| -> Vec<u8> {
        (0..len)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3] ^ k)
            .collect()
    };
    let pieces: Vec<(u64, Vec<u8>)> = vec![
        (4093, pattern(10_000, 1)),
        (1 << 20, pattern(4096, 2)),
        ((2 << 20) + 4093, pattern(max_write, 3)),
        ((8 << 20) + 1, pattern(1, 4)),
        (size - 5000, pattern(5000, 5)),
    ];
    let read_all = |what: &str| {
        let f = std::fs::File::open(st.fuse.join("disk")).unwrap();
        assert_eq!(f.metadata().unwrap().len(), size);
        for (off, data) in &pieces {
            let mut back = vec![0u8; data.len()];
            f.read_exact_at(&mut back, *off).unwrap();
            assert!(
                &back == data,
                "{what}: {} bytes at {off} differ",
                data.len()
            );
        }
    };
    {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(st.fuse.join("disk"))
            .unwrap();
        for (off, data) in &pieces {
            f.write_all_at(data, *off).unwrap();
        }
        f.sync_all().unwrap();
    }
    read_all("through the FUSE file");
    let img = std::fs::File::open(&st.image).unwrap();
    for (off, data) in &pieces {
        let mut back = vec![0u8; data.len()];
        img.read_exact_at(&mut back, *off).unwrap();
        assert!(
            &back == data,
            "{} bytes at {off} not in the image file",
            data.len()
        );
    }
    drop(img);
    let (acked, _, _) = read_stats(&st.stats);
    assert!(acked >= pieces.len() as u64, "{acked} writes acknowledged");
    st.stop();
    st.serve(&["--backend", "raw"]);
    read_all("after a restart");
    // ext4 through a loop device on the raw backend; SIGTERM after the loop let go.
    st.attach();
    st.mkfs();
    st.mount();
    let data = pattern(3 << 20, 6);
    std::fs::write(st.mnt.join("f"), &data).unwrap();
    st.umount();
    ok(120, &["e2fsck", "-fn", st.dev()]);
    st.mount();
    assert!(std::fs::read(st.mnt.join("f")).unwrap() == data);
    st.umount();
    st.detach();
    st.stop();
}

/// A flash state file is a kind of image of its own (issue 43: one arm in the stack's table):
/// served on its backend (each page durable at the next fsync, no atomicity past a page),
/// written through FUSE, kept across a restart, read by `nvstack read`; an nvramdisk's
/// commands and backend refuse it, naming it.
#[test]
fn a_flash_state_file_serves_on_its_own_backend() {
    let _g = serial();
    require_environment();
    let st = Stack::new("ext4", "64MiB");
    let (nv, img) = (bin(), st.image.to_str().unwrap().to_string());
    let nv = nv.to_str().unwrap();
    std::fs::remove_file(&st.image).unwrap();
    ok(60, &[nv, "flash", "create", &img]);
    let o = sh(30, &[nv, "info", &img]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("a flash state file, not an nvramdisk"),
        "{o:?}"
    );
    st.serve(&[]);
    assert!(st.log_text().contains("(flash, "), "{}", st.log_text());
    let pattern =
        |len: usize, k: u8| -> Vec<u8> { (0..len).map(|i| (i % 253) as u8 ^ k).collect() };
    let pieces: Vec<(u64, Vec<u8>)> = vec![(1000, pattern(70_000, 1)), (5 << 20, pattern(512, 2))];
    {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(st.fuse.join("disk"))
            .unwrap();
        for (off, data) in &pieces {
            f.write_all_at(data, *off).unwrap();
        }
        f.sync_all().unwrap();
    }
    st.stop();
    st.serve(&[]);
    let f = std::fs::File::open(st.fuse.join("disk")).unwrap();
    for (off, data) in &pieces {
        let mut back = vec![0u8; data.len()];
        f.read_exact_at(&mut back, *off).unwrap();
        assert!(
            &back == data,
            "{} bytes at {off} after a restart",
            data.len()
        );
    }
    drop(f);
    st.stop();
    // The page at 5 MiB, read by the program from the state file itself.
    let out = st.fuse.with_file_name("page.bin");
    let lba = (5u64 << 20) / 512;
    ok(
        60,
        &[
            nv,
            "read",
            &img,
            "--lba",
            &lba.to_string(),
            "--count",
            "1",
            "--output",
            out.to_str().unwrap(),
        ],
    );
    assert!(std::fs::read(&out).unwrap() == pieces[1].1);
    std::fs::remove_file(&out).unwrap();
    let o = sh(
        30,
        &[
            nv,
            "serve",
            &img,
            "--backend",
            "nvramdisk",
            "--mountpoint",
            st.fuse.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("a flash state file, not an nvramdisk image"),
        "{o:?}"
    );
}

/// Unclean leftovers: clear errors with exit code 3, no hang, the image untouched.
#[test]
fn unclean_leftovers_are_refused() {
    let _g = serial();
    require_environment();
    let mut st = Stack::new("ext4", "64MiB");
    let b = bin();
    let b = b.to_str().unwrap();
    let img = st.image.to_str().unwrap().to_string();
    // A missing mount point.
    let missing = st.tmp.join("does-not-exist");
    let o = sh(
        30,
        &[b, "serve", &img, "--mountpoint", missing.to_str().unwrap()],
    );
    expect_exit(&o, 3, "does-not-exist");
    let o = sh(
        30,
        &[
            b,
            "up",
            "--image",
            &img,
            "--mount",
            missing.to_str().unwrap(),
        ],
    );
    expect_exit(&o, 3, "does-not-exist");
    // A loop device attached to the image itself.
    let h0 = sha(&st.image);
    let l = ok(30, &["losetup", "--find", "--show", &img]);
    let o = st.serve_cmd(&[]);
    ok(30, &["losetup", "-d", &l]);
    expect_exit(&o, 3, "loop device is attached");
    assert_eq!(sha(&st.image), h0, "a refused serve changed the image");
    // Served by another daemon.
    st.serve(&[]);
    let other = st.tmp.join("other");
    std::fs::create_dir_all(&other).unwrap();
    let o = sh(
        30,
        &[b, "serve", &img, "--mountpoint", other.to_str().unwrap()],
    );
    expect_exit(&o, 3, "locked");
    assert!(!is_mounted(&other));
    // A stale mount: the daemon is killed, its FUSE mount stays behind.
    let pid = st.daemon_pid().unwrap();
    ok(10, &["kill", "-KILL", &pid.to_string()]);
    wait_gone(pid);
    assert!(
        is_mounted(&st.fuse),
        "a killed daemon's mount should linger"
    );
    let h1 = sha(&st.image);
    let o = st.serve_cmd(&[]);
    expect_exit(&o, 3, "already mounted");
    assert_eq!(sha(&st.image), h1, "a refused serve changed the image");
    ok(30, &["umount", "-l", st.fuse.to_str().unwrap()]);
    let _ = std::fs::remove_dir(&other);
    // up/down: up twice is refused; after a daemon kill, down still cleans everything.
    st.serve(&[]);
    st.stop();
    let up_mnt = st.tmp.join("up");
    std::fs::create_dir_all(&up_mnt).unwrap();
    let up = |extra: &[&str]| {
        let mut a = vec![
            b,
            "up",
            "--image",
            &img,
            "--mount",
            up_mnt.to_str().unwrap(),
        ];
        a.extend_from_slice(extra);
        sh(180, &a)
    };
    let o = up(&[]);
    assert!(
        o.status.success(),
        "up: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = up(&[]);
    expect_exit(&o, 3, "already mounted");
    let state = std::fs::read_to_string(format!(
        "/run/nvstack/{}/state.json",
        std::fs::canonicalize(&up_mnt)
            .unwrap()
            .to_str()
            .unwrap()
            .trim_matches('/')
            .replace('/', "-")
    ))
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&state).unwrap();
    // up caps the loop device's requests at the limit the daemon's FUSE INIT gives (every
    // request one FUSE write; tests/serve_torn.rs proves the limit against the kernel).
    let dev = v["loop_dev"].as_str().unwrap();
    let stats = Path::new(v["stats"].as_str().unwrap());
    let agreed = nvstack_export::stats::read_stats_file(stats).unwrap().fuse;
    let kb = std::fs::read_to_string(nvstack_export::loopdev::max_sectors_kb_path(dev).unwrap());
    assert_eq!(kb.unwrap().trim(), agreed.loop_max_sectors_kb.to_string());
    assert_eq!(
        (
            agreed.max_write_bytes,
            agreed.max_pages,
            agreed.loop_max_sectors_kb
        ),
        (63 * 4096, 63, 124),
        "nvramdisk's 4 KiB blocks: 63 a FUSE write, 31 a loop request"
    );
    let dpid = v["daemon_pid"].as_u64().unwrap();
    ok(10, &["kill", "-KILL", &dpid.to_string()]);
    wait_gone(dpid as u32);
    let o = sh(120, &[b, "down", "--mount", up_mnt.to_str().unwrap()]);
    assert!(
        o.status.success(),
        "down after a kill: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!is_mounted(&up_mnt));
    let o = sh(30, &[b, "down", "--mount", up_mnt.to_str().unwrap()]);
    expect_exit(&o, 3, "nothing is up");
    // The image still serves and recovers.
    let o = up(&[]);
    assert!(
        o.status.success(),
        "up again: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = sh(120, &[b, "down", "--mount", up_mnt.to_str().unwrap()]);
    assert!(
        o.status.success(),
        "down: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let _ = std::fs::remove_dir(&up_mnt);
    st.loop_dev = None;
}

/// Bad arguments: exit 2 with a message, nothing mounted.
#[test]
fn serve_bad_arguments() {
    let _g = serial();
    require_environment();
    let st = Stack::new("ext4", "16MiB");
    let b = bin();
    let b = b.to_str().unwrap();
    let img = st.image.to_str().unwrap();
    let fuse = st.fuse.to_str().unwrap();
    for (args, needle) in [
        (vec!["--threads", "0"], "--threads"),
        (vec!["--threads", "65"], "--threads"),
        (vec!["--max-write", "1000"], "--max-write"),
        (vec!["--max-write", "1GiB"], "--max-write"),
        (vec!["--power-cut", "M7:1:1"], "fault model"),
        (vec!["--power-cut", "M1:x:1"], "seed"),
        (vec!["--backend", "raw"], "--force"),
    ] {
        let mut a = vec![b, "serve", img, "--mountpoint", fuse];
        a.extend_from_slice(&args);
        let o = sh(30, &a);
        expect_exit(&o, 2, needle);
        assert!(!is_mounted(&st.fuse), "{args:?} mounted something");
    }
    let junk = st.shm.join("junk");
    std::fs::File::create(&junk)
        .unwrap()
        .write_all(&[7u8; 8192])
        .unwrap();
    let o = sh(
        30,
        &[b, "serve", junk.to_str().unwrap(), "--mountpoint", fuse],
    );
    expect_exit(&o, 2, "junk");
    let o = sh(
        30,
        &[b, "up", "--image", img, "--size", "32MiB", "--mount", fuse],
    );
    expect_exit(&o, 2, "not the");
}

/// `serve --record-trace`: every request the device finished, in nvstack's device trace
/// (docs/format.md section 13), closed at a clean stop and read back by the simulator; an
/// existing trace is not overwritten without --force.
#[test]
fn record_trace_lists_the_requests_and_is_not_overwritten() {
    let _g = serial();
    require_environment();
    let st = Stack::new("ext4", "64MiB");
    let trace = st.shm.join("device.trace");
    let t = trace.to_str().unwrap();
    st.serve(&["--record-trace", t]);
    {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(st.fuse.join("disk"))
            .unwrap();
        // Whole aligned blocks: one device write of blocks 5..15 and one read of 0..3.
        f.write_all_at(&[0x5a; 10 * 4096], 5 * 4096).unwrap();
        let mut back = [0u8; 3 * 4096];
        f.read_exact_at(&mut back, 0).unwrap();
        f.sync_all().unwrap();
    }
    st.stop();
    let text = std::fs::read_to_string(&trace).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("nvstack-trace 1 block_bytes=4096 blocks="),
        "{text}"
    );
    let fields = |l: &&str| l.split(' ').skip(2).collect::<Vec<_>>().join(" ");
    let body: Vec<String> = lines[1..lines.len() - 1].iter().map(fields).collect();
    let covered = |op: &str| -> Vec<u64> {
        let mut v: Vec<u64> = body
            .iter()
            .filter(|l| l.starts_with(op))
            .flat_map(|l| {
                let n: Vec<u64> = l[2..].split(' ').map(|x| x.parse().unwrap()).collect();
                n[0]..n[0] + n[1]
            })
            .collect();
        v.sort_unstable();
        v
    };
    assert_eq!(covered("W"), (5..15).collect::<Vec<_>>(), "{text}");
    assert_eq!(covered("R"), (0..3).collect::<Vec<_>>(), "{text}");
    assert!(
        body.iter().any(|l| l == "F 0 0"),
        "the fsync is a flush: {text}"
    );
    let end = lines[lines.len() - 1];
    assert!(end.starts_with(&format!("end {} ", body.len())), "{text}");
    let stat = ok(
        30,
        &[
            bin().to_str().unwrap(),
            "sim",
            "stat",
            "--trace",
            t,
            "--format",
            "nvstack",
            "--json",
        ],
    );
    let stat: serde_json::Value = serde_json::from_str(&stat).unwrap();
    assert_eq!(stat["write_bytes"], 40960, "{stat}");
    assert_eq!(stat["read_bytes"], 3 * 4096, "{stat}");
    // Serving again onto the same trace is refused before anything is mounted.
    let again = st.serve_cmd(&["--record-trace", t]);
    expect_exit(&again, 2, "exists; pass --force");
    assert!(!is_mounted(&st.fuse));
    assert_eq!(
        std::fs::read_to_string(&trace).unwrap(),
        text,
        "the trace was changed"
    );
}
