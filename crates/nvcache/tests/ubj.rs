//! UBJ's states and transitions, its costs and its refusals, on a simulated region.

mod common;

use common::*;
use nvstack_core::blockdev::{BlockDevice, Durability};
use nvstack_core::error::Error;
use nvstack_nvcache::ubj::format::Settings;
use nvstack_nvcache::{create, Census, Ubj};
use nvstack_pmem::crash::SimRegion;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

const REGION: u64 = 1 << 20; // 1 MiB: 250 slots

fn read(u: &Ubj<SimRegion>, lba: u64) -> Vec<u8> {
    let mut b = vec![0u8; B];
    u.read_blocks(lba, &mut b).unwrap();
    b
}

fn reopen(region: &Arc<SimRegion>, disk: &Arc<MemDisk>) -> Ubj<SimRegion> {
    // What survives a crash with nothing in flight: the region as stored.
    let r = Arc::new(SimRegion::from_base(region.snapshot()));
    Ubj::open(r, disk.clone(), None).unwrap()
}

#[test]
fn states_follow_the_inventors_table() {
    let (_r, disk, u) = fresh(REGION, 1000, settings_off());
    u.write_blocks(5, &payload(1)).unwrap();
    assert_eq!(u.census().dirty, 1);
    u.write_blocks(5, &payload(2)).unwrap();
    assert_eq!(
        u.census(),
        Census {
            free: u.census().free,
            dirty: 1,
            ..Census::default()
        },
        "dirty: in place"
    );
    u.commit().unwrap();
    assert_eq!(u.census().frozen_up_to_date, 1);
    assert_eq!(read(&u, 5), payload(2), "a frozen block serves reads");
    u.write_blocks(5, &payload(3)).unwrap();
    let c = u.census();
    assert_eq!(
        (c.dirty, c.frozen_up_to_date),
        (1, 1),
        "a write to a frozen block: copy-on-write"
    );
    assert_eq!(read(&u, 5), payload(3), "the newest copy serves reads");
    u.commit().unwrap();
    let c = u.census();
    assert_eq!((c.frozen_up_to_date, c.frozen_out_of_date), (1, 1));
    u.checkpoint().unwrap();
    let c = u.census();
    assert_eq!(
        (c.clean, c.frozen_up_to_date, c.frozen_out_of_date),
        (1, 0, 0)
    );
    assert_eq!(
        disk.block(5),
        payload(3),
        "checkpoint wrote the newest copy back"
    );
    u.write_blocks(5, &payload(4)).unwrap();
    assert_eq!(
        (u.census().clean, u.census().dirty),
        (0, 1),
        "a clean block: in place"
    );
}

#[test]
fn a_commit_costs_two_fences_whatever_its_size() {
    let (_r, _d, u) = fresh(4 << 20, 5000, settings_off());
    for n in [1u64, 8, 64] {
        for i in 0..n {
            u.write_blocks(1000 + i * 3, &payload(i)).unwrap();
        }
        let before = u.stats().fences;
        u.commit().unwrap();
        assert_eq!(u.stats().fences - before, 2, "{n} blocks");
    }
    let before = u.stats();
    u.commit().unwrap();
    assert_eq!(u.stats(), before, "nothing dirty: nothing to do");
}

#[test]
fn reopen_keeps_committed_and_drops_uncommitted() {
    let (r, disk, u) = fresh(REGION, 1000, settings_off());
    u.write_blocks(1, &payload(1)).unwrap();
    u.write_blocks(2, &payload(2)).unwrap();
    u.commit().unwrap();
    u.write_blocks(1, &payload(11)).unwrap();
    u.write_blocks(3, &payload(3)).unwrap();
    u.discard_blocks(2, 1).unwrap();
    let v = reopen(&r, &disk);
    assert_eq!(
        (read(&v, 1), read(&v, 2), read(&v, 3)),
        (payload(1), payload(2), vec![0; B])
    );
    assert_eq!(v.census().dirty, 0);
    u.commit().unwrap();
    let v = reopen(&r, &disk);
    assert_eq!(
        (read(&v, 1), read(&v, 2), read(&v, 3)),
        (payload(11), vec![0; B], payload(3))
    );
    assert_eq!(
        v.census().frozen_out_of_date,
        2,
        "blocks 1's and 2's older copies are out of date"
    );
    v.checkpoint().unwrap();
    assert_eq!(disk.block(1), payload(11));
    assert_eq!(
        disk.block(2),
        vec![0; B],
        "the discard punched the backing block"
    );
}

#[test]
fn a_long_discard_punches_what_the_cache_does_not_hold_and_tombstones_the_rest() {
    // mkfs discards the whole device: 900 blocks past a unit, of which the cache holds three
    // (one frozen, one dirty, one clean). Those three become tombstones; the rest goes to the
    // backing device as two discards and a flush, taking no slot and making no commit.
    let (r, disk, u) = fresh(REGION, 1000, settings_off());
    for lba in [400, 950] {
        disk.write(lba, &payload(lba)).unwrap(); // on the backing device alone
    }
    u.write_blocks(5, &payload(5)).unwrap();
    u.commit().unwrap();
    u.checkpoint().unwrap(); // on the backing device, and cached clean
    u.write_blocks(10, &payload(10)).unwrap();
    u.commit().unwrap(); // 10 frozen
    u.write_blocks(20, &payload(20)).unwrap(); // 20 dirty
    let held = [5, 10, 20];
    assert!(held.iter().all(|&l| u.holds(l)) && !u.holds(400));
    let before = (u.stats(), u.census());
    disk.log.lock().unwrap().clear();
    u.discard_blocks(0, 900).unwrap();
    let ops = disk.log.lock().unwrap().clone();
    let punched: Vec<(u64, u64)> = ops
        .iter()
        .filter_map(|o| match o {
            BackingOp::Discard { lba, count, .. } => Some((*lba, *count)),
            _ => None,
        })
        .collect();
    assert_eq!(
        punched,
        [(0, 5), (6, 4), (11, 9), (21, 879)],
        "the runs between held blocks"
    );
    assert!(
        matches!(ops.last(), Some(BackingOp::Flush { .. })),
        "{ops:?}"
    );
    assert_eq!(u.stats().commits, before.0.commits, "no commit");
    let census = u.census();
    assert_eq!(census.dirty, 3, "a tombstone per held block, no other slot");
    assert_eq!(
        census.clean + 1,
        before.1.clean,
        "5's clean slot became its tombstone"
    );
    assert_eq!(read(&u, 400), vec![0; B]);
    assert_eq!(read(&u, 950), payload(950), "past the discard");
    // Durable on return: a crash now loses the tombstones (not committed) but not the punches.
    let v = reopen(&r, &disk);
    assert_eq!((read(&v, 400), read(&v, 5)), (vec![0; B], payload(5)));
    assert_eq!(read(&v, 10), payload(10), "the frozen copy, committed");
    u.commit().unwrap();
    let v = reopen(&r, &disk);
    for lba in [5, 10, 20, 400] {
        assert_eq!(read(&v, lba), vec![0; B], "block {lba}");
    }
}

#[test]
fn misses_fill_clean_slots_that_the_policy_replaces() {
    let (_r, disk, u) = fresh(REGION, 1000, settings_off());
    let slots = u.superblock().slots as u64;
    for lba in 0..slots + 10 {
        disk.write(lba, &payload(lba + 100)).unwrap();
    }
    for lba in 0..slots + 10 {
        assert_eq!(read(&u, lba), payload(lba + 100));
    }
    assert_eq!(u.stats().read_misses, slots + 10);
    assert_eq!(
        u.census().clean as u64,
        slots,
        "every slot holds a clean block"
    );
    assert_eq!(read(&u, slots + 9), payload(slots + 109));
    assert_eq!(
        u.stats().read_hits,
        1,
        "the newest block is still cached (LRU)"
    );
    let _ = read(&u, 0);
    assert_eq!(u.stats().read_misses, slots + 11, "the oldest was replaced");
}

#[test]
fn a_full_cache_commits_and_checkpoints_so_a_write_never_fails() {
    let s = Settings {
        autocommit_blocks: 0,
        ..Settings::default()
    };
    let (r, disk, u) = fresh(REGION, 5000, s);
    let slots = u.superblock().slots as u64;
    for lba in 0..3 * slots {
        u.write_blocks(lba, &payload(lba)).unwrap();
    }
    assert!(u.stats().commits_forced >= 2, "{:?}", u.stats());
    u.commit().unwrap();
    let v = reopen(&r, &disk);
    for lba in (0..3 * slots).step_by(7) {
        assert_eq!(read(&v, lba), payload(lba), "block {lba}");
    }
}

#[test]
fn with_autocommit_off_a_full_cache_refuses_instead_of_splitting_a_transaction() {
    let (_r, _d, u) = fresh(REGION, 5000, settings_off());
    let slots = u.superblock().slots as u64;
    let mut refused = None;
    for lba in 0..slots + 1 {
        if let Err(e) = u.write_blocks(lba, &payload(lba)) {
            refused = Some((lba, e));
            break;
        }
    }
    let (lba, e) = refused.expect("a write past the slots is refused");
    assert_eq!(lba, slots);
    assert!(matches!(e, Error::NoSpace(_)), "{e}");
    assert_eq!(
        u.stats().commits,
        0,
        "nothing was committed behind the caller's back"
    );
    u.commit().unwrap();
    u.write_blocks(lba, &payload(lba)).unwrap();
}

#[test]
fn autocommit_cuts_an_epoch_after_n_blocks_and_a_write_lands_whole() {
    let s = Settings {
        autocommit_blocks: 8,
        ..Settings::default()
    };
    let (_r, _d, u) = fresh(REGION, 5000, s);
    for i in 0..7 {
        u.write_blocks(i, &payload(i)).unwrap();
    }
    assert_eq!(u.epoch(), 0);
    let data: Vec<u8> = (10..14).flat_map(payload).collect();
    u.write_blocks(10, &data).unwrap();
    assert_eq!(u.epoch(), 1, "the write that reached 8 committed, whole");
    assert_eq!(u.census().dirty, 0);
}

#[test]
fn checkpoints_keep_frozen_slots_under_the_watermark() {
    let s = Settings {
        autocommit_blocks: 16,
        ..Settings::default()
    };
    let (_r, _d, u) = fresh(REGION, 5000, s);
    let slots = u.superblock().slots;
    for lba in 0..u64::from(slots) * 2 {
        u.write_blocks(lba, &payload(lba)).unwrap();
        let c = u.census();
        let frozen = c.frozen_up_to_date + c.frozen_out_of_date;
        assert!(frozen * 100 <= slots * 50, "{frozen} frozen of {slots}");
    }
    assert!(u.stats().checkpoints > 0);
}

#[test]
fn a_backing_error_puts_the_cache_in_its_error_state_and_keeps_the_data() {
    let (r, disk, u) = fresh(REGION, 1000, settings_off());
    u.write_blocks(9, &payload(9)).unwrap();
    u.commit().unwrap();
    *disk.failing.lock().unwrap() = true;
    assert!(matches!(u.checkpoint(), Err(Error::Environment(_))));
    assert!(u.error().is_some());
    let stored = u
        .last_backing_error()
        .expect("the error is stored in the image");
    assert_eq!(stored.epoch, 1);
    assert_eq!(Some(stored.message.clone()), u.error());
    assert!(u.write_blocks(1, &payload(1)).is_err(), "writes refused");
    assert!(u.detach().is_err(), "detach refused");
    assert_eq!(read(&u, 9), payload(9), "data kept");
    *disk.failing.lock().unwrap() = false;
    let v = reopen(&r, &disk);
    assert_eq!(read(&v, 9), payload(9));
    assert!(v.error().is_none(), "a reopened cache tries again");
    assert_eq!(
        v.last_backing_error(),
        Some(stored),
        "and still shows what happened"
    );
}

#[test]
fn the_device_says_durable_on_flush_and_a_flush_commits() {
    let (_r, _d, u) = fresh(REGION, 1000, settings_off());
    assert_eq!(u.caps().durability, Durability::OnFlush);
    assert_eq!(u.caps().atomic_blocks, 64);
    u.write(3, &payload(3)).unwrap();
    u.flush().unwrap();
    assert_eq!(u.epoch(), 1);
}

#[test]
fn open_refuses_a_wrong_or_detached_backing_device_and_a_foreign_image() {
    let (r, disk, u) = fresh(REGION, 1000, settings_off());
    let other = Arc::new(MemDisk::new(1001));
    create(&SimRegion::zeroed(REGION), &*other, settings_off()).unwrap();
    let img = || Arc::new(SimRegion::from_base(r.snapshot()));
    let msg =
        |res: nvstack_core::error::Result<Ubj<SimRegion>>| res.err().expect("refused").to_string();
    assert!(msg(Ubj::open(img(), other, None)).contains("another cache"));
    assert!(msg(Ubj::open(img(), Arc::new(MemDisk::new(1002)), None)).contains("blocks"));
    assert!(msg(Ubj::open(img(), Arc::new(MemDisk::new(1001)), None)).contains("no nvcache label"));
    let zero = Arc::new(SimRegion::zeroed(REGION));
    assert!(msg(Ubj::open(zero, disk.clone(), None)).contains("not an nvcache image"));
    u.write_blocks(4, &payload(4)).unwrap();
    u.detach().unwrap();
    assert_eq!(disk.block(4), payload(4), "detach wrote everything back");
    assert!(msg(Ubj::open(img(), disk.clone(), None)).contains("detached"));
}

#[test]
fn open_refuses_a_damaged_committed_entry_naming_its_slot() {
    let (r, disk, u) = fresh(REGION, 1000, settings_off());
    u.write_blocks(4, &payload(4)).unwrap();
    u.commit().unwrap();
    // Slot 0's entry: word 1 (epoch and check bits) at 8192 + 8; flip a check bit.
    let w = (8192 + 8) / 8;
    r.poke(w, r.peek(w) ^ 1 << 60);
    let e = Ubj::open(Arc::new(SimRegion::from_base(r.snapshot())), disk, None)
        .err()
        .unwrap();
    assert!(e.to_string().contains("slot 0"), "{e}");
}

/// A random mix of writes, discards, reads, commits, checkpoints and reopens against the
/// model: reads always see the newest write; a reopen shows exactly the last commit.
#[test]
fn random_operations_match_the_model() {
    for seed in 0..6u64 {
        let s = Settings {
            autocommit_blocks: 0,
            high_watermark_pct: 30,
            low_watermark_pct: 10,
            ..Settings::default()
        };
        let (mut r, disk, u) = fresh(REGION, 400, s);
        let mut u = u;
        let mut m = Model::new();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        for step in 0..3000u64 {
            let lba = rng.gen_range(0..400u64);
            match rng.gen_range(0..100) {
                0..=49 => {
                    let n = rng.gen_range(1..=4u64).min(400 - lba);
                    let data: Vec<u8> = (0..n).flat_map(|i| payload(step * 8 + i)).collect();
                    u.write_blocks(lba, &data).unwrap();
                    m.write(lba, &data);
                }
                50..=54 => {
                    u.discard_blocks(lba, 1).unwrap();
                    m.discard(lba, 1);
                }
                55..=84 => assert_eq!(
                    read(&u, lba),
                    m.now.get(&lba).cloned().unwrap_or(vec![0; B]),
                    "seed {seed} step {step}"
                ),
                85..=94 => {
                    u.commit().unwrap();
                    m.commit();
                }
                95..=97 => u.checkpoint().unwrap(),
                _ => {
                    drop(u);
                    r = Arc::new(SimRegion::from_base(r.snapshot()));
                    u = Ubj::open(r.clone(), disk.clone(), None).unwrap();
                    m.now = m.epochs.last().unwrap().clone();
                }
            }
        }
        assert_eq!(u.stats().commits_forced, 0, "autocommit is off");
    }
}

/// Over a real backing file (O_DIRECT, fdatasync): after detach the file alone holds the data,
/// and its last block is the label.
#[test]
fn detach_leaves_the_whole_state_in_the_backing_file() {
    use nvstack_nvcache::FileDevice;
    use nvstack_pmem::mmap::MmapRegion;
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("ubj-detach-{}.img", std::process::id()));
    std::fs::File::create(&path)
        .unwrap()
        .set_len(101 * B as u64)
        .unwrap();
    let region = Arc::new(MmapRegion::anonymous(REGION).unwrap());
    let disk = Arc::new(FileDevice::open(&path).unwrap());
    create(&*region, &*disk, Settings::default()).unwrap();
    let u = Ubj::open(region, disk, None).unwrap();
    for lba in 0..100 {
        u.write_blocks(lba, &payload(lba)).unwrap();
    }
    u.detach().unwrap();
    drop(u);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    for lba in 0..100usize {
        assert_eq!(
            bytes[lba * B..(lba + 1) * B],
            payload(lba as u64)[..],
            "block {lba}"
        );
    }
    let label = nvstack_nvcache::common::format::Label::decode(&bytes[100 * B..]).unwrap();
    assert!(label.detached && label.blocks == 100);
}

#[test]
fn timed_triggers_commit_and_checkpoint_on_their_own() {
    let s = Settings {
        autocommit_blocks: 0,
        autocommit_ms: 40,
        checkpoint_ms: 0,
        ..Settings::default()
    };
    let (_r, _d, u) = fresh(REGION, 1000, s);
    let u = Arc::new(u);
    let t0 = std::time::Instant::now();
    u.write_blocks(1, &payload(1)).unwrap();
    u.tick(t0).unwrap();
    assert_eq!(u.epoch(), 0, "not yet due");
    u.tick(t0 + std::time::Duration::from_millis(41)).unwrap();
    assert_eq!(u.epoch(), 1, "due: committed");
    // The thread does the same on its own.
    let timers = nvstack_nvcache::Ticker::start(&u).expect("a timed trigger is on");
    u.write_blocks(2, &payload(2)).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while u.epoch() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the timer thread never committed"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    drop(timers);
    let c = Settings {
        checkpoint_ms: 30,
        ..s
    };
    let (_r, disk, v) = fresh(REGION, 1000, c);
    v.write_blocks(3, &payload(3)).unwrap();
    v.commit().unwrap();
    v.tick(std::time::Instant::now() + std::time::Duration::from_millis(31))
        .unwrap();
    assert_eq!(disk.block(3), payload(3), "checkpoint-ms wrote it back");
    let off = Settings {
        autocommit_ms: 0,
        checkpoint_ms: 0,
        ..s
    };
    let (_r, _d, w) = fresh(REGION, 1000, off);
    assert!(
        nvstack_nvcache::Ticker::start(&Arc::new(w)).is_none(),
        "no timed trigger: no thread"
    );
}

/// Four writers (each write 8 blocks stamped with one tag) and a committer at once; after a
/// reopen every 8-block group holds one write whole: a write never straddles two epochs.
#[test]
fn concurrent_writes_land_whole_in_one_epoch() {
    let s = Settings {
        autocommit_blocks: 24,
        ..Settings::default()
    };
    let (r, disk, u) = fresh(REGION, 64, s);
    let u = Arc::new(u);
    let stamp = |tag: u64| -> Vec<u8> { (0..8).flat_map(|_| payload(tag)).collect() };
    std::thread::scope(|scope| {
        for t in 0..4u64 {
            let u = u.clone();
            scope.spawn(move || {
                for i in 0..400u64 {
                    let group = (i * 7 + t) % 8;
                    u.write_blocks(group * 8, &stamp(t << 32 | i)).unwrap();
                }
            });
        }
        let c = u.clone();
        scope.spawn(move || {
            for _ in 0..200 {
                c.commit().unwrap();
                std::thread::yield_now();
            }
        });
    });
    let v = reopen(&r, &disk);
    for group in 0..8u64 {
        let mut b = vec![0u8; 8 * B];
        v.read_blocks(group * 8, &mut b).unwrap();
        let first = &b[..B];
        assert!(
            b.chunks(B).all(|c| c == first),
            "group {group} mixes writes"
        );
    }
}

/// Every clean-slot policy keeps serving the right data while it replaces blocks.
#[test]
fn every_clean_slot_policy_replaces_and_serves_the_right_blocks() {
    use nvstack_nvcache::ubj::format::PolicyName;
    for policy in [PolicyName::Lru, PolicyName::Clock, PolicyName::Random] {
        let (_r, disk, u) = fresh(
            REGION,
            1000,
            Settings {
                policy,
                ..settings_off()
            },
        );
        for lba in 0..1000 {
            disk.write(lba, &payload(lba + 7)).unwrap();
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for _ in 0..5000 {
            let lba = rng.gen_range(0..1000u64);
            assert_eq!(read(&u, lba), payload(lba + 7), "{policy:?} block {lba}");
        }
        let st = u.stats();
        assert!(
            st.read_hits > 0 && st.read_misses > 1000,
            "{policy:?} {st:?}"
        );
        assert_eq!(u.census().clean, u.superblock().slots, "{policy:?}");
    }
}
