//! What the device tests share: a small geometry, tagged pages, and reading a tag back.

use nvstack_core::blockdev::BlockDevice;
use nvstack_flash::device::FlashDevice;
use nvstack_flash::file::Header;
use nvstack_flash::ftl::{FtlConfig, FtlKind};
use nvstack_flash::geometry::{Geometry, Timing};

/// 48 blocks of 8 pages, 6 spare (4 log blocks and two merge targets): 336 logical pages.
pub const GEO: Geometry = Geometry {
    page_data_bytes: 512,
    page_spare_bytes: 16,
    pages_per_block: 8,
    blocks: 48,
    spare_blocks: 6,
};

pub fn header(kind: FtlKind) -> Header {
    Header {
        geo: GEO,
        ftl: FtlConfig {
            kind,
            log_blocks: 4,
        },
        timing: Timing::SMALL_BLOCK,
    }
}

pub fn page(tag: u32) -> Vec<u8> {
    let mut p: Vec<u8> = (0..512).map(|i| (tag as usize * 7 + i) as u8).collect();
    p[..4].copy_from_slice(&tag.to_le_bytes());
    p
}

/// The tag a page holds, None for zeros; a page that is neither fails.
pub fn tag_of(dev: &FlashDevice, lpn: u64) -> Option<u32> {
    let mut buf = vec![0u8; 512];
    dev.read(lpn, &mut buf).unwrap();
    if buf.iter().all(|&b| b == 0) {
        return None;
    }
    let tag = u32::from_le_bytes(buf[..4].try_into().unwrap());
    assert_eq!(buf, page(tag), "lpn {lpn}: a whole page of one write");
    Some(tag)
}
