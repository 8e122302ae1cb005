//! The block device over its state file: data and counters across reopen, every kind of bad
//! input refused with its message, a torn page ignored. (The kill test is tests/kill.rs: a
//! process of its own, so that no other test's thread holds a lock a fork could inherit.)

mod common;

use common::{header, page, tag_of};
use nvstack_core::blockdev::BlockDevice;
use nvstack_flash::device::{self, FlashDevice, Latency};
use nvstack_flash::file::HEADER_BYTES;
use nvstack_flash::ftl::FtlKind;
use std::os::unix::fs::FileExt;
use std::path::Path;

#[test]
fn data_and_counters_survive_a_reopen_for_both_ftls() {
    for kind in [FtlKind::LogBlock, FtlKind::Page] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("flash.img");
        device::create(&path, header(kind), false).unwrap();
        let dev = FlashDevice::open(&path, Latency::Counted).unwrap();
        assert_eq!((dev.block_bytes(), dev.blocks()), (512, 42 * 8));
        for i in 0..2000u32 {
            let lpn = u64::from(i * 7 % 50);
            dev.write(lpn, &page(i)).unwrap();
        }
        dev.write(100, &[page(5000), page(5001)].concat()).unwrap();
        dev.discard(101, 1).unwrap();
        dev.flush().unwrap();
        let before = dev.saved();
        assert!(
            before.merges.full + before.merges.switch > 0,
            "{kind:?}: merges ran"
        );
        drop(dev);
        let dev = FlashDevice::open(&path, Latency::Counted).unwrap();
        assert_eq!(
            dev.saved().counters,
            before.counters,
            "{kind:?}: counters reopened"
        );
        for lpn in 0..50u64 {
            let last = (0..2000u32).rev().find(|i| u64::from(i * 7 % 50) == lpn);
            assert_eq!(tag_of(&dev, lpn), last, "{kind:?}: lpn {lpn}");
        }
        assert_eq!(tag_of(&dev, 100), Some(5000));
        assert_eq!(tag_of(&dev, 101), None, "a discarded page reads zeros");
        assert_eq!(tag_of(&dev, 102), None);
    }
}

#[test]
fn injected_latency_counts_the_same_operations() {
    let dir = tempfile::tempdir().unwrap();
    let mut saved = Vec::new();
    for latency in [Latency::Counted, Latency::Injected] {
        let path = dir.path().join(format!("{latency:?}"));
        device::create(&path, header(FtlKind::LogBlock), false).unwrap();
        let dev = FlashDevice::open(&path, latency).unwrap();
        for i in 0..40u32 {
            dev.write(u64::from(i % 9), &page(i)).unwrap();
        }
        saved.push(dev.saved().counters);
    }
    assert_eq!(saved[0], saved[1]);
}

fn expect_bad(path: &Path, what: &str) {
    let e = FlashDevice::open(path, Latency::Counted)
        .err()
        .expect("refused");
    assert_eq!(e.exit_code(), 2, "{e}");
    assert!(e.to_string().contains(what), "{e}");
    let e = device::inspect(path).expect_err("refused");
    assert!(e.to_string().contains(what), "{e}");
}

#[test]
fn bad_geometry_and_damaged_files_are_refused_naming_what() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let mut h = header(FtlKind::LogBlock);
    h.geo.page_data_bytes = 1000;
    let e = device::create(&path, h, false).unwrap_err();
    assert!(e.to_string().contains("page_data_bytes 1000"), "{e}");
    h = header(FtlKind::LogBlock);
    h.ftl.log_blocks = 5;
    let e = device::create(&path, h, false).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("spare_blocks 6: the log-block FTL needs at least 7"),
        "{e}"
    );
    device::create(&path, header(FtlKind::LogBlock), false).unwrap();
    let e = device::create(&path, header(FtlKind::LogBlock), false).unwrap_err();
    assert!(e.to_string().contains("exists (pass `force`"), "{e}");
    device::create(&path, header(FtlKind::Page), true).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let slot = header(FtlKind::Page).layout().slot_bytes;
    // One damaged counter slot: the other is used.
    f.write_all_at(&[0xaa], HEADER_BYTES + 20).unwrap();
    drop(FlashDevice::open(&path, Latency::Counted).unwrap());
    // Both damaged (the open above saved into slot 0): refused.
    f.write_all_at(&[0xaa], HEADER_BYTES + 20).unwrap();
    f.write_all_at(&[0xaa], HEADER_BYTES + slot + 20).unwrap();
    expect_bad(&path, "both counter slots are damaged");
    f.write_all_at(&[0x7f], 17).unwrap();
    expect_bad(&path, "the header is damaged (checksum mismatch)");
    f.write_all_at(b"X", 0).unwrap();
    expect_bad(&path, "not an nvstack flash state file");
    device::create(&path, header(FtlKind::Page), true).unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    f.set_len(len - 1).unwrap();
    expect_bad(&path, "truncated or extended");
}

#[test]
fn a_torn_page_is_ignored_and_the_older_copy_reads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let h = header(FtlKind::LogBlock);
    device::create(&path, h, false).unwrap();
    let dev = FlashDevice::open(&path, Latency::Counted).unwrap();
    dev.write(3, &page(1)).unwrap();
    dev.write(3, &page(2)).unwrap();
    drop(dev);
    // The second write is page 1 of the first log block (block 0): damage its data, as a
    // program cut short would leave it.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&[0u8; 8], h.layout().pages_offset + 528 + 100)
        .unwrap();
    let dev = FlashDevice::open(&path, Latency::Counted).unwrap();
    assert_eq!(tag_of(&dev, 3), Some(1));
    dev.write(3, &page(3)).unwrap();
    assert_eq!(tag_of(&dev, 3), Some(3), "writes go on past the torn page");
}
