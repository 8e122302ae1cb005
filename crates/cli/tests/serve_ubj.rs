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
//! state: a checkpoint running with dirty blocks in the cache for every third kill, dirty
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

/// Kill cycles 1, 4, 7, ... wait for a running checkpoint (with dirty blocks), the others for
/// dirty blocks.
fn targets_checkpoint(c: u32) -> bool {
    c % 3 == 1
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
        wait: Duration::from_millis(1500),
    };
    let (after, verified) = kill_cycles(&mut st, &plan);
    assert!(after.iter().all(|w| w[W_IS_CACHE] == 1), "not served as a cache");
    let dirty = after.iter().filter(|w| w[W_DIRTY] > 0).count();
    let in_checkpoint = after.iter().filter(|w| w[W_CHECKPOINTING] == 1).count();
    let name = format!("{fs}{}", mount_opts.map_or(String::new(), |o| format!(" {o}")));
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
