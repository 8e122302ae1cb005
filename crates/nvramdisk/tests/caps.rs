//! What nvramdisk promises through the `BlockDevice` trait: its capabilities, its scattered
//! atomic write reached through the trait object, and the chunked write helper.

use nvstack_core::blockdev::{write_chunked, BlockDevice, Durability};
use nvstack_nvramdisk::{format_region, FormatOptions, NvramDisk, OpenOptions, ATOMIC_BLOCKS_MAX};
use nvstack_pmem::MmapRegion;
use std::sync::Arc;

fn device() -> Arc<dyn BlockDevice> {
    let r = Arc::new(MmapRegion::anonymous(4 << 20).unwrap());
    let fo = FormatOptions {
        lanes: 2,
        ..Default::default()
    };
    format_region(&*r, &fo).unwrap();
    Arc::new(NvramDisk::open(r, OpenOptions::default()).unwrap())
}

#[test]
fn caps_are_64_atomic_blocks_scattered_and_durable_on_return() {
    let d = device();
    let caps = d.caps();
    assert_eq!(caps.atomic_blocks as usize, ATOMIC_BLOCKS_MAX);
    assert_eq!(caps.atomic_blocks, 64);
    assert!(caps.scattered);
    assert_eq!(caps.durability, Durability::OnReturn);
    assert!(caps.is_atomic(64) && !caps.is_atomic(65));
}

#[test]
fn the_scattered_write_through_the_trait_is_the_atomic_write() {
    let d = device();
    let b = d.block_bytes() as usize;
    let lbas = [40u64, 3, 17];
    let data: Vec<u8> = (0..3 * b).map(|i| (i / b) as u8 + 1).collect();
    d.write_scattered(&lbas, &data).unwrap();
    for (i, &lba) in lbas.iter().enumerate() {
        let mut back = vec![0u8; b];
        d.read(lba, &mut back).unwrap();
        assert!(back.iter().all(|&x| x == i as u8 + 1), "LBA {lba}");
    }
    // More than the atomic unit, or an LBA twice: refused as invalid, nothing written.
    let many: Vec<u64> = (100..100 + ATOMIC_BLOCKS_MAX as u64 + 1).collect();
    let e = d
        .write_scattered(&many, &vec![9u8; many.len() * b])
        .unwrap_err();
    assert_eq!(e.exit_code(), 2, "{e}");
    let e = d.write_scattered(&[5, 5], &vec![9u8; 2 * b]).unwrap_err();
    assert_eq!(e.exit_code(), 2, "{e}");
    let mut back = vec![1u8; b];
    for lba in [5u64, 100, 164] {
        d.read(lba, &mut back).unwrap();
        assert!(
            back.iter().all(|&x| x == 0),
            "LBA {lba} written by a refused write"
        );
    }
}

#[test]
fn write_chunked_takes_more_than_the_unit_that_write_refuses() {
    let d = device();
    let b = d.block_bytes() as usize;
    let blocks = 2 * ATOMIC_BLOCKS_MAX + 5;
    let data: Vec<u8> = (0..blocks * b).map(|i| (i % 251) as u8).collect();
    let e = d.write(7, &data).unwrap_err();
    assert!(e.to_string().contains("atomic limit"), "{e}");
    write_chunked(&*d, 7, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    d.read(7, &mut back).unwrap();
    assert!(back == data, "chunked write did not land whole");
}
