//! The write cache (seed 004) at library level: writes durable in NVRAM on return, the hash
//! index rebuilt at open, the seed's destage trigger and each policy's victim, dm-writecache's
//! triggers, admission by ranges (bypass, write-through of cached blocks), tombstones, and the
//! error state after a backing-device failure. Crashes are the crash checker's
//! (crates/crashtest/src/target/cache/write, `nvstack crashtest --cache write`).

mod common;

use common::MemDisk;
use nvstack_core::blockdev::{BlockDevice, Durability};
use nvstack_nvcache::write::format::{Admit, DestagePolicy, Layout, Settings};
use nvstack_nvcache::write::{create, WriteCache};
use nvstack_pmem::crash::SimRegion;
use std::sync::Arc;

const S: usize = 512;

fn sector(tag: u8) -> Vec<u8> {
    (0..S).map(|i| (i as u8).wrapping_mul(7) ^ tag).collect()
}

/// A cache of `slots` 512-byte slots over a 16-block (128-sector) disk.
fn fresh(
    slots: u32,
    settings: Settings,
    admit: Admit,
) -> (Arc<SimRegion>, Arc<MemDisk>, WriteCache<SimRegion>) {
    let region = Arc::new(SimRegion::zeroed(Layout::new(slots, 512).region_bytes));
    let disk = Arc::new(MemDisk::new(17));
    create(&*region, &*disk, 512, settings, &admit).unwrap();
    let wc = WriteCache::open(region.clone(), disk.clone(), None).unwrap();
    (region, disk, wc)
}

fn read(wc: &WriteCache<SimRegion>, lba: u64) -> Vec<u8> {
    let mut b = vec![0u8; S];
    wc.read_blocks(lba, &mut b).unwrap();
    b
}

fn on_disk(disk: &MemDisk, lba: u64) -> Vec<u8> {
    let b = disk.block(lba / 8);
    let at = (lba % 8) as usize * S;
    b[at..at + S].to_vec()
}

#[test]
fn writes_are_cached_and_the_index_is_rebuilt_at_open() {
    let (region, disk, wc) = fresh(16, Settings::default(), Admit::All);
    assert_eq!(wc.caps().durability, Durability::OnReturn);
    wc.write_blocks(3, &[sector(1), sector(2)].concat())
        .unwrap();
    wc.write_blocks(3, &sector(9)).unwrap();
    assert_eq!(read(&wc, 3), sector(9));
    assert_eq!(read(&wc, 4), sector(2));
    assert_eq!(on_disk(&disk, 3), vec![0u8; S], "not destaged");
    let k = wc.stats();
    assert_eq!(
        (k.write_blocks, k.write_allocated, k.write_hits_committed),
        (3, 2, 1)
    );
    assert_eq!((k.read_blocks, k.read_hits), (2, 2));
    drop(wc);
    // No close, no flush: the NVRAM alone holds the blocks, and open finds them.
    let wc = WriteCache::open(region, disk.clone(), None).unwrap();
    assert_eq!(wc.cached_blocks(), 2);
    assert_eq!(read(&wc, 3), sector(9));
    wc.discard_blocks(4, 1).unwrap();
    assert_eq!(read(&wc, 4), vec![0u8; S], "a tombstone reads zeros");
    assert_eq!(wc.writeback().unwrap(), 2);
    assert_eq!(on_disk(&disk, 3), sector(9));
    assert_eq!(on_disk(&disk, 4), vec![0u8; S]);
    assert_eq!(wc.cached_blocks(), 0);
    assert_eq!(wc.stats().destaged_writeback, 2);
}

#[test]
fn the_seeds_trigger_destages_the_least_recently_written_block_only() {
    let (_, disk, wc) = fresh(16, Settings::default(), Admit::All);
    // 15 blocks fill the cache (the 16th slot is the spare an overwrite lands in).
    for lba in 0..15 {
        wc.write_blocks(lba, &sector(lba as u8)).unwrap();
    }
    wc.write_blocks(0, &sector(100)).unwrap(); // block 0 is now the most recently written
    assert_eq!(wc.stats().destaged_room, 0, "an overwrite needs no room");
    for lba in 0..8 {
        let _ = read(&wc, 14 - lba); // reads do not reorder LRW
    }
    wc.write_blocks(40, &sector(40)).unwrap();
    wc.write_blocks(41, &sector(41)).unwrap();
    let k = wc.stats();
    assert_eq!(k.destaged_room, 2, "one block per new block");
    assert_eq!(k.writes_blocked_on_freelist, 2);
    assert!(
        !wc.is_cached(1) && !wc.is_cached(2),
        "the least recently written"
    );
    assert!(wc.is_cached(0) && wc.is_cached(3));
    assert_eq!(on_disk(&disk, 1), sector(1));
    assert_eq!(read(&wc, 1), sector(1), "read from the backing device");
}

#[test]
fn each_policy_picks_its_own_victim() {
    let victim = |policy| {
        let s = Settings {
            policy,
            ..Settings::default()
        };
        let (_, _, wc) = fresh(16, s, Admit::All);
        for lba in 0..15 {
            wc.write_blocks(lba, &sector(1)).unwrap();
        }
        let _ = read(&wc, 0); // a use for LRU and CLOCK, not a write for LRW
        wc.write_blocks(50, &sector(2)).unwrap();
        (0..15).find(|&l| !wc.is_cached(l))
    };
    assert_eq!(
        victim(DestagePolicy::Lrw),
        Some(0),
        "written least recently"
    );
    assert_eq!(
        victim(DestagePolicy::Lru),
        Some(1),
        "block 0 was read since"
    );
    assert_eq!(
        victim(DestagePolicy::Clock),
        Some(1),
        "block 0's second chance"
    );
    assert!(victim(DestagePolicy::Random).is_some());
}

#[test]
fn watermarks_destage_neighbours_together_and_max_age_and_the_cleaner_empty_the_cache() {
    let s = Settings {
        high_watermark_pct: 50,
        low_watermark_pct: 25,
        writeback_jobs: 2,
        ..Settings::default()
    };
    let (_, disk, wc) = fresh(16, s, Admit::All);
    wc.write_blocks(10, &[sector(1), sector(2), sector(3)].concat())
        .unwrap();
    wc.write_blocks(30, &sector(4).repeat(6)).unwrap();
    // 9 of 16 used: above 50 %. The victim (block 10) takes its neighbours 11 and 12 along.
    let k = wc.stats();
    assert!(k.destaged_watermark >= 5, "{k:?}");
    assert!(wc.cached_blocks() <= 4);
    assert!(!wc.is_cached(10) && !wc.is_cached(11) && !wc.is_cached(12));
    assert_eq!(on_disk(&disk, 12), sector(3));
    let s = Settings {
        max_age_ms: 1,
        ..Settings::default()
    };
    let (_, _, wc) = fresh(16, s, Admit::All);
    wc.write_blocks(1, &sector(1)).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    wc.tick(std::time::Instant::now()).unwrap();
    assert_eq!((wc.cached_blocks(), wc.stats().destaged_max_age), (0, 1));
    let (_, _, wc) = fresh(16, Settings::default(), Admit::All);
    wc.write_blocks(1, &sector(1)).unwrap();
    wc.set_cleaner(true).unwrap();
    wc.write_blocks(2, &sector(2)).unwrap(); // not cached: bypasses the cache
    assert_eq!(wc.cached_blocks(), 0, "the cleaner destaged block 1");
    assert_eq!(
        (wc.stats().write_bypass, wc.stats().destaged_cleaner),
        (1, 1)
    );
}

#[test]
fn ranges_admit_their_blocks_and_a_cached_block_is_never_left_stale() {
    let (_, disk, wc) = fresh(16, Settings::default(), Admit::one_range(0..8));
    assert_eq!(wc.caps().durability, Durability::OnFlush);
    wc.write_blocks(6, &[sector(1), sector(2), sector(3)].concat())
        .unwrap();
    assert!(wc.is_cached(6) && wc.is_cached(7) && !wc.is_cached(8));
    assert_eq!(
        on_disk(&disk, 8),
        sector(3),
        "bypassed to the backing device"
    );
    assert_eq!(wc.stats().write_bypass, 1);
    wc.set_cleaner(true).unwrap();
    wc.write_blocks(30, &sector(9)).unwrap(); // the cleaner empties the cache after it
    assert_eq!(read(&wc, 6), sector(1));
    assert_eq!(on_disk(&disk, 6), sector(1));
    wc.write_blocks(31, &sector(8)).unwrap(); // bypassed after the cleaner's last flush
    let log = disk.log.lock().unwrap().len();
    wc.flush_blocks().unwrap();
    assert!(
        disk.log.lock().unwrap().len() > log,
        "a flush reaches the backing device"
    );
}

#[test]
fn a_backing_error_puts_the_cache_in_its_error_state_and_keeps_the_data() {
    let (_, disk, wc) = fresh(16, Settings::default(), Admit::All);
    wc.write_blocks(1, &sector(5)).unwrap();
    *disk.failing.lock().unwrap() = true;
    let e = wc.writeback().unwrap_err().to_string();
    assert!(e.contains("injected backing-device I/O error"), "{e}");
    assert!(wc.error().is_some());
    let e = wc.write_blocks(2, &sector(6)).unwrap_err().to_string();
    assert!(e.contains("error state"), "{e}");
    assert_eq!(read(&wc, 1), sector(5), "data kept");
}

/// Format version 2's write: a single block takes one fence, with nothing stored after it (a
/// store after the fence would drain when the lock is released); several blocks take two (the
/// commit word's). An overwrite's old slot is reused by the next write without a clear.
#[test]
fn a_single_block_write_takes_one_fence_and_stores_nothing_after_it() {
    use nvstack_pmem::crash::SimEvent;
    let (region, disk, wc) = fresh(32, Settings::default(), Admit::All);
    wc.write_blocks(3, &sector(1)).unwrap();
    for (lba, n, fences) in [(3, 1, 1), (4, 1, 1), (8, 4, 2), (3, 1, 1)] {
        let data: Vec<u8> = (0..n).flat_map(|i| sector(i as u8 + 9)).collect();
        region.start_recording();
        wc.write_blocks(lba, &data).unwrap();
        let ev = region.take_events();
        let fenced = ev.iter().filter(|e| matches!(e, SimEvent::Fence)).count();
        assert_eq!(fenced, fences, "{n} blocks at {lba}");
        assert!(
            matches!(ev.last(), Some(SimEvent::Fence)),
            "a store after the last fence"
        );
        assert_eq!(read(&wc, lba), sector(9));
    }
    drop(wc);
    let wc = WriteCache::open(region.clone(), disk.clone(), None).unwrap();
    assert_eq!(read(&wc, 3), sector(9));
    assert_eq!(read(&wc, 11), sector(12));
    assert_eq!(
        wc.recovered_entries(),
        1,
        "the replaced copy of block 3, whose clear was pending"
    );
}

#[test]
fn a_discard_punches_uncached_blocks_on_the_backing_device_and_tombstones_cached_ones() {
    // A cache of 16 slots and a discard of 127 sectors (mkfs discards whole devices): the
    // uncached sectors go to the backing device as whole-block discards plus zeroed edge
    // sectors, never through the cache, and the cached ones become tombstones.
    let (_region, disk, wc) = fresh(16, Settings::default(), Admit::All);
    for l in 0..128u64 {
        let mut bytes = disk.bytes.lock().unwrap();
        bytes[l as usize * S..(l as usize + 1) * S].copy_from_slice(&sector(l as u8));
    }
    wc.write_blocks(9, &sector(200)).unwrap();
    wc.write_blocks(70, &sector(201)).unwrap();
    disk.log.lock().unwrap().clear();
    wc.discard_blocks(1, 126).unwrap();
    for l in 1..127u64 {
        assert_eq!(read(&wc, l), vec![0u8; S], "sector {l} reads zeros");
    }
    assert_eq!(read(&wc, 0), sector(0), "before the range");
    assert_eq!(read(&wc, 127), sector(127), "after the range");
    let log = disk.log.lock().unwrap().clone();
    let discards: Vec<(u64, u64)> = log
        .iter()
        .filter_map(|op| match op {
            common::BackingOp::Discard { lba, count, .. } => Some((*lba, *count)),
            _ => None,
        })
        .collect();
    // Sectors 1..127 less the cached 9 and 70: whole blocks 2..8 and 9..15 (blocks 1 and 8
    // hold a cached sector), the rest zeroed sector by sector.
    assert_eq!(discards, vec![(2, 6), (9, 6)]);
    assert!(
        matches!(log.last(), Some(common::BackingOp::Flush { .. })),
        "the backing device is flushed before the discard returns: {log:?}"
    );
    assert_eq!(wc.cached_blocks(), 2, "the cached sectors are tombstones");
    assert_eq!(wc.stats().discarded_blocks, 126);
    assert_eq!(wc.writeback().unwrap(), 2);
    assert_eq!(on_disk(&disk, 9), vec![0u8; S]);
    assert_eq!(on_disk(&disk, 70), vec![0u8; S]);
    assert_eq!(on_disk(&disk, 0), sector(0));
}

/// The backing writes and flushes the disk saw since `clock_by`.
fn backing_ops(disk: &MemDisk) -> (Vec<(u64, usize)>, usize) {
    let log = disk.log.lock().unwrap();
    let writes = log
        .iter()
        .filter_map(|op| match op {
            common::BackingOp::Write { lba, data, .. } => Some((*lba, data.len())),
            _ => None,
        })
        .collect();
    let flushes = log
        .iter()
        .filter(|op| matches!(op, common::BackingOp::Flush { .. }))
        .count();
    (writes, flushes)
}

#[test]
fn a_destage_writes_each_run_of_contiguous_blocks_in_one_backing_write() {
    let (region, disk, wc) = fresh(64, Settings::default(), Admit::All);
    // Sectors around the runs, on the backing device only: the runs' edge blocks keep them.
    disk.write(0, &sector(0xA0).repeat(8)).unwrap();
    disk.write(1, &sector(0xA1).repeat(8)).unwrap();
    wc.write_blocks(
        3,
        &(3..13)
            .map(|t| sector(t as u8))
            .collect::<Vec<_>>()
            .concat(),
    )
    .unwrap();
    wc.write_blocks(30, &[sector(30), sector(31), sector(32)].concat())
        .unwrap();
    disk.clock_by(&region);
    assert_eq!(wc.writeback().unwrap(), 13);
    let (writes, flushes) = backing_ops(&disk);
    // Blocks 3..13 span backing blocks 0 and 1; 30..33 span blocks 3 and 4: two runs,
    // two writes.
    assert_eq!(writes, vec![(0, 8192), (3, 8192)], "one write per run");
    assert_eq!(flushes, 1, "one flush for the group");
    for l in 3..13 {
        assert_eq!(on_disk(&disk, l), sector(l as u8), "sector {l}");
    }
    assert_eq!(
        on_disk(&disk, 2),
        sector(0xA0),
        "the edge's other sectors kept"
    );
    assert_eq!(
        on_disk(&disk, 13),
        sector(0xA1),
        "the edge's other sectors kept"
    );
    assert_eq!(on_disk(&disk, 32), sector(32));
    assert_eq!(wc.cached_blocks(), 0);
    assert_eq!(wc.stats().backing_bytes_written, 13 * S as u64);
}

#[test]
fn a_block_rewritten_during_its_destage_keeps_its_new_copy() {
    let (region, disk, wc) = fresh(16, Settings::default(), Admit::All);
    wc.write_blocks(3, &[sector(1), sector(2), sector(3)].concat())
        .unwrap();
    let n = wc
        .writeback_during(&mut || wc.write_blocks(4, &sector(9)))
        .unwrap();
    assert_eq!(n, 3);
    assert_eq!(on_disk(&disk, 4), sector(2), "the copy written back");
    assert!(wc.is_cached(4) && !wc.is_cached(3) && !wc.is_cached(5));
    assert_eq!(read(&wc, 4), sector(9), "the newer copy stays cached");
    drop(wc);
    let wc = WriteCache::open(region, disk, None).unwrap();
    assert_eq!(
        wc.recovered_entries(),
        0,
        "the replaced copy's clear was fenced"
    );
    assert_eq!(read(&wc, 4), sector(9));
    assert_eq!(read(&wc, 3), sector(1));
}

/// The slot of a copy replaced while its destage reads it without the lock is held, not
/// reused: a write landing there would make the destage read another block's data (its CRC
/// check then refuses the destage). Here the rewrite frees block 4's slot and the next new
/// block would take it (the most recently freed slot comes first).
#[test]
fn a_slot_being_destaged_is_not_reused_by_a_write_meanwhile() {
    let (region, disk, wc) = fresh(16, Settings::default(), Admit::All);
    wc.write_blocks(3, &[sector(1), sector(2), sector(3)].concat())
        .unwrap();
    let n = wc
        .writeback_during(&mut || {
            wc.write_blocks(4, &sector(9))?;
            wc.write_blocks(11, &sector(0x11))
        })
        .unwrap();
    assert_eq!(n, 3);
    for (lba, v) in [(3, 1), (4, 2), (5, 3)] {
        assert_eq!(on_disk(&disk, lba), sector(v), "block {lba} written back");
    }
    assert!(wc.is_cached(4) && wc.is_cached(11) && !wc.is_cached(3));
    assert_eq!(read(&wc, 4), sector(9));
    assert_eq!(read(&wc, 11), sector(0x11));
    // Every slot free again or used: a held slot was freed when its pass ended.
    for b in 20..33 {
        wc.write_blocks(b, &sector(b as u8)).unwrap();
    }
    assert_eq!(wc.cached_blocks(), 15);
    assert_eq!(
        wc.stats().destaged_room,
        0,
        "15 blocks fit 16 slots: none leaked"
    );
    drop(wc);
    let wc = WriteCache::open(region, disk, None).unwrap();
    assert_eq!(read(&wc, 4), sector(9));
    assert_eq!(read(&wc, 11), sector(0x11));
    assert_eq!(read(&wc, 32), sector(32));
}

#[test]
fn a_clean_close_leaves_nothing_for_recovery_to_clear() {
    let (region, disk, wc) = fresh(16, Settings::default(), Admit::All);
    for t in 0..4 {
        // Each overwrite leaves the replaced copies' clears pending.
        wc.write_blocks(5, &[sector(t), sector(t + 10)].concat())
            .unwrap();
    }
    wc.save_counters();
    drop(wc);
    let wc = WriteCache::open(region, disk, None).unwrap();
    assert_eq!(wc.recovered_entries(), 0);
    assert_eq!((read(&wc, 5), read(&wc, 6)), (sector(3), sector(13)));
}

/// A served cache's destage thread and a writer racing it: rewrites of blocks being destaged
/// (their slots held while the thread reads them) and new blocks while few slots are free.
/// No write may take a held slot (it would overwrite a copy being written back), none may
/// find no free slot after room was made, and every block reads as last written.
#[test]
fn a_writer_racing_the_destage_thread_loses_nothing_and_takes_no_held_slot() {
    use nvstack_nvcache::write::serve::{Destager, Served};
    let settings = Settings::default().served(S as u32);
    let (_region, _disk, wc) = fresh(48, settings, Admit::All);
    let served = Arc::new(Served::new(Arc::new(wc)));
    let destager = Destager::start(&served).expect("the served settings' watermarks");
    let mut model = vec![None; 120];
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for i in 0..20_000u32 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Runs of 1 to 4 blocks over 120: most writes replace a cached copy.
        let (lba, n) = ((x % 117) as usize, 1 + (x >> 32) as usize % 4);
        let tag = (i % 251) as u8;
        let data: Vec<u8> = (0..n).flat_map(|k| sector(tag ^ k as u8)).collect();
        served.write(lba as u64, &data).unwrap();
        for k in 0..n {
            model[lba + k] = Some(tag ^ k as u8);
        }
    }
    drop(destager);
    let wc = served.cache();
    let destaged = wc.stats().destaged_watermark;
    assert!(destaged > 1000, "the thread destaged {destaged} blocks");
    for (lba, tag) in model.iter().enumerate() {
        let want = tag.map_or_else(|| vec![0u8; S], sector);
        assert_eq!(read(wc, lba as u64), want, "block {lba}");
    }
}
