//! The log-block FTL's merges on hand-worked sequences with exact counts, and the page-mapped
//! FTL's garbage collection. Geometry: 4 pages a block, 8 blocks, 2 log blocks, 4 spare
//! blocks (so logical blocks 0..3, logical pages 0..15); free blocks are taken in order 0, 1, ...

use nvstack_flash::ftl::{Ftl, FtlConfig, FtlKind, Merges};
use nvstack_flash::geometry::Geometry;
use nvstack_flash::nand::{MemMedia, Nand};

const GEO: Geometry = Geometry {
    page_data_bytes: 512,
    page_spare_bytes: 16,
    pages_per_block: 4,
    blocks: 8,
    spare_blocks: 4,
};

fn ftl(kind: FtlKind) -> Ftl<MemMedia> {
    let cfg = FtlConfig {
        kind,
        log_blocks: 2,
    };
    cfg.validate(&GEO).unwrap();
    Ftl::new(Nand::new(GEO, MemMedia::new(&GEO)), cfg)
}

/// A page whose bytes say which write it was.
fn page(tag: u32) -> Vec<u8> {
    (0..512).map(|i| (tag as usize * 31 + i) as u8).collect()
}

/// Write `lpns` in order, the i-th write tagged `first_tag + i`.
fn writes(f: &mut Ftl<MemMedia>, lpns: &[u32], first_tag: u32) {
    for (i, &l) in lpns.iter().enumerate() {
        f.write(l, &page(first_tag + i as u32)).unwrap();
    }
}

fn counts(f: &Ftl<MemMedia>) -> (u64, u64, u64) {
    let c = f.counters();
    (c.reads, c.programs, c.erases)
}

fn expect_reads(f: &mut Ftl<MemMedia>, want: &[(u32, Option<u32>)]) {
    for &(lpn, tag) in want {
        let mut buf = vec![0u8; 512];
        let mapped = f.read(lpn, &mut buf).unwrap();
        match tag {
            Some(t) => assert!(mapped && buf == page(t), "lpn {lpn}: not write {t}"),
            None => assert!(
                !mapped && buf.iter().all(|&b| b == 0),
                "lpn {lpn} unwritten"
            ),
        }
    }
}

#[test]
fn switch_merge_promotes_a_full_in_place_log_without_copying() {
    let mut f = ftl(FtlKind::LogBlock);
    // 0..3 fill LBN 0's log (block 0) in place; the fifth write finds it full: switch (no old
    // data block, so nothing erased), then a new log (block 1) takes the write.
    writes(&mut f, &[0, 1, 2, 3, 0], 1);
    assert_eq!(counts(&f), (0, 5, 0));
    let m = f.merges();
    assert_eq!((m.switch, m.partial, m.full, m.copies), (1, 0, 0, 0));
    // 1, 2, 3 fill block 1 in place; the write of 2 switches again, erasing block 0.
    writes(&mut f, &[1, 2, 3, 2], 6);
    assert_eq!(counts(&f), (0, 9, 1));
    assert_eq!(f.merges().switch, 2);
    assert_eq!(f.counters().block_erases[..3], [1, 0, 0]);
    expect_reads(
        &mut f,
        &[
            (0, Some(5)),
            (1, Some(6)),
            (2, Some(9)),
            (3, Some(8)),
            (4, None),
        ],
    );
    assert_eq!(counts(&f).0, 4, "four mapped reads, one page read each");
}

#[test]
fn partial_merge_copies_the_rest_of_the_data_block_into_the_log() {
    let mut f = ftl(FtlKind::LogBlock);
    // LBN 0: data block 0 (by switch); its new log (block 1) holds 0, 1 in place.
    writes(&mut f, &[0, 1, 2, 3, 0, 1], 1);
    // LBN 1 takes the second log slot (block 2); LBN 2 needs one: the victim is LBN 0's log
    // (its last write is the oldest): partial merge, copying offsets 2 and 3 from block 0
    // (two reads, two programs), erasing block 0. LBN 2's log is block 3.
    writes(&mut f, &[4, 8], 7);
    assert_eq!(counts(&f), (2, 10, 1));
    let m = f.merges();
    assert_eq!((m.switch, m.partial, m.full, m.copies), (1, 1, 0, 2));
    assert_eq!(
        f.counters().page_programs[4..8],
        [1, 1, 1, 1],
        "block 1 is whole now"
    );
    expect_reads(
        &mut f,
        &[
            (0, Some(5)),
            (1, Some(6)),
            (2, Some(3)),
            (3, Some(4)),
            (4, Some(7)),
        ],
    );
    expect_reads(&mut f, &[(8, Some(8)), (5, None)]);
}

#[test]
fn full_merge_copies_the_newest_of_each_offset_into_a_free_block() {
    let mut f = ftl(FtlKind::LogBlock);
    // LBN 0: data block 0; its log (block 1) holds 0 at page 0 and 2 at page 1: not in place.
    writes(&mut f, &[0, 1, 2, 3, 0, 2], 1);
    // LBN 1's log is block 2; LBN 2's write makes LBN 0's log the victim: full merge into
    // block 3 (offsets 0 and 2 from the log, 1 and 3 from block 0: four reads, four programs),
    // then blocks 0 and 1 erased. LBN 2's log is block 4.
    writes(&mut f, &[4, 8], 7);
    assert_eq!(counts(&f), (4, 12, 2));
    let m = f.merges();
    assert_eq!((m.switch, m.partial, m.full, m.copies), (1, 0, 1, 4));
    assert_eq!(f.counters().block_erases[..5], [1, 1, 0, 0, 0]);
    assert_eq!(
        f.counters().page_programs[12..16],
        [1, 1, 1, 1],
        "block 3 is the new data"
    );
    expect_reads(
        &mut f,
        &[
            (0, Some(5)),
            (1, Some(2)),
            (2, Some(6)),
            (3, Some(4)),
            (8, Some(8)),
        ],
    );
}

#[test]
fn a_full_log_out_of_place_is_fully_merged_before_the_next_write() {
    let mut f = ftl(FtlKind::LogBlock);
    // Four writes of lpn 0 fill block 0 out of place; the fifth merges it into block 1 (one
    // copy: the newest 0), erases block 0, and goes to a new log, block 2.
    writes(&mut f, &[0, 0, 0, 0, 0], 1);
    assert_eq!(counts(&f), (1, 6, 1));
    assert_eq!(
        f.merges(),
        Merges {
            full: 1,
            copies: 1,
            ..Merges::default()
        }
    );
    expect_reads(&mut f, &[(0, Some(5)), (1, None)]);
}

#[test]
fn greedy_gc_collects_the_blocks_with_fewest_valid_pages() {
    let mut f = ftl(FtlKind::Page);
    // Fill blocks 0-3 with lpns 0..15 (tags 1..16), then rewrite twelve of them into blocks
    // 4, 5, 6 (the last opened with two free blocks left, leaving one). Blocks 0-3 then hold
    // one valid page each (3, 7, 11, 15).
    writes(&mut f, &(0..16).collect::<Vec<_>>(), 1);
    writes(&mut f, &[0, 1, 2, 4, 5, 8, 9, 12, 6, 10, 13, 14], 17);
    assert_eq!(counts(&f), (0, 28, 0));
    // The next write needs a host block with one free left: greedy GC takes block 0 (one
    // valid page, lowest number among the ties), copies lpn 3 into the GC block (block 7),
    // erases block 0; still under two free, it takes block 1 the same way (lpn 7). The write
    // then goes to block 0.
    writes(&mut f, &[7], 29);
    assert_eq!(counts(&f), (2, 31, 2));
    let m = f.merges();
    assert_eq!((m.full, m.copies), (2, 2));
    assert_eq!(f.counters().block_erases[..3], [1, 1, 0]);
    assert_eq!(
        f.counters().page_programs[28..30],
        [1, 1],
        "the copies in block 7"
    );
    let mut want: Vec<(u32, Option<u32>)> = vec![(0, Some(17)), (3, Some(4)), (7, Some(29))];
    want.extend([
        (11, Some(12)),
        (15, Some(16)),
        (14, Some(28)),
        (6, Some(25)),
    ]);
    expect_reads(&mut f, &want);
}
