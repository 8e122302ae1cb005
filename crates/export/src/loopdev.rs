//! The loop device's request limit that keeps every block request one FUSE write.
//!
//! Why: a loop device hands each block request to `DIR/disk` as one direct write, and the
//! kernel's FUSE client cuts a direct write into several FUSE writes when it is longer than
//! `max_write` bytes or spans more than `max_pages` page slots. The pieces are sent one after
//! the other; if the daemon dies between two of them, the write returns the bytes done so far
//! and the loop device (Linux 6.18, `lo_complete_rq`: a short write is not retried) completes
//! the whole block request as a success. A completed write is then torn: its first piece on
//! the device, the rest old. Measured before this limit (issue 42): 2 completed writes torn at
//! exactly 32,256 bytes (63 sectors of 512 B, the write cache's `max_write`) in 10 kills.
//!
//! So `nvstack up` (and a user attaching by hand, from what `serve` prints) caps the loop
//! device's `queue/max_sectors_kb` at [`max_sectors_kb`]: the longest request that fits one
//! FUSE write at every alignment the block layer lets through.
//!
//! Page slots. The client counts one slot for every page of every segment of the request, so
//! a request of `R` bytes costs more slots than `R / 4096` when its memory is not page
//! aligned. The block layer lets through any segment whose address is 512-aligned (the loop
//! device's `dma_alignment` is 511) and whose length is a multiple of the logical block
//! size. Two bounds follow:
//! - every slot holds at least 512 bytes (page and segment edges fall on 512-byte
//!   boundaries): at most `R / 512` slots;
//! - a contiguous run of `L` bytes covers at most `L / 4096 + 1` pages, and there are at most
//!   `R / lbs` runs (each at least one logical block): at most `R / 4096 + R / lbs` slots.
//!
//! A request of `R` bytes is one FUSE write when `R <= max_write` and the smaller bound is at
//! most `max_pages`. The serve tests check the bound against the kernel: a request of the
//! limit at the worst alignment arrives as one FUSE write, one block more arrives as two.

use nvstack_core::error::{Error, Result};

/// The FUSE client's page size (x86-64 and arm64 with 4 KiB pages; the only size served).
pub const PAGE_BYTES: u64 = 4096;
/// The block layer's smallest unit and the loop device's DMA alignment plus one.
const SECTOR_BYTES: u64 = 512;

/// What the kernel and the daemon agreed at FUSE INIT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FuseLimits {
    /// The longest FUSE write, bytes.
    pub max_write_bytes: u64,
    /// The most page slots one FUSE request carries.
    pub max_pages: u64,
}

/// The most page slots a request of `request_bytes` can take behind a loop device with
/// logical blocks of `lbs_bytes` (see the module's comment for the two bounds).
pub fn page_slots_max(request_bytes: u64, lbs_bytes: u64) -> u64 {
    assert!(lbs_bytes >= SECTOR_BYTES && lbs_bytes.is_power_of_two());
    assert!(request_bytes.is_multiple_of(lbs_bytes));
    let by_sector = request_bytes / SECTOR_BYTES;
    let by_run = request_bytes.div_ceil(PAGE_BYTES) + request_bytes / lbs_bytes;
    by_sector.min(by_run)
}

/// The longest block request, bytes, that is one FUSE write at every alignment: a multiple
/// of the logical block and of 1 KiB (sysfs takes KiB), at least a page (sysfs's floor).
pub fn request_bytes_max(lbs_bytes: u64, fuse: FuseLimits) -> Result<u64> {
    if !(SECTOR_BYTES..=PAGE_BYTES).contains(&lbs_bytes) || !lbs_bytes.is_power_of_two() {
        return Err(Error::bad(format!(
            "loop logical block size {lbs_bytes}: must be 512, 1024, 2048 or 4096 bytes"
        )));
    }
    let step = lbs_bytes.max(1024);
    let mut best = 0;
    let mut r = step;
    while r <= fuse.max_write_bytes && page_slots_max(r, lbs_bytes) <= fuse.max_pages {
        best = r;
        r += step;
    }
    if best < PAGE_BYTES {
        return Err(Error::env(format!(
            "FUSE max_write {} bytes and max_pages {}: no request of a page or more fits one \
             FUSE write behind {lbs_bytes}-byte loop blocks (the loop device needs at least \
             max_sectors_kb 4)",
            fuse.max_write_bytes, fuse.max_pages
        )));
    }
    assert!(best <= fuse.max_write_bytes && best.is_multiple_of(lbs_bytes));
    Ok(best)
}

/// The loop device's `queue/max_sectors_kb` for `lbs_bytes` logical blocks.
pub fn max_sectors_kb(lbs_bytes: u64, fuse: FuseLimits) -> Result<u64> {
    Ok(request_bytes_max(lbs_bytes, fuse)? / 1024)
}

/// The sysfs file of a loop device's request limit (`/dev/loop3` -> its queue's file).
pub fn max_sectors_kb_path(dev: &str) -> Result<std::path::PathBuf> {
    let name = dev.strip_prefix("/dev/").unwrap_or(dev);
    if !name.starts_with("loop") || name.contains('/') {
        return Err(Error::bad(format!("{dev}: not a loop device")));
    }
    Ok(std::path::Path::new("/sys/block")
        .join(name)
        .join("queue/max_sectors_kb"))
}

/// Cap `dev`'s requests at `kb` KiB, and read it back: the kernel must hold exactly that.
pub fn set_max_sectors_kb(dev: &str, kb: u64) -> Result<()> {
    let p = max_sectors_kb_path(dev)?;
    std::fs::write(&p, format!("{kb}\n"))
        .map_err(|e| Error::env(format!("{}: cannot write {kb}: {e}", p.display())))?;
    let back = std::fs::read_to_string(&p)
        .map_err(|e| Error::env(format!("{}: cannot read: {e}", p.display())))?;
    if back.trim() != kb.to_string() {
        return Err(Error::env(format!(
            "{}: wrote {kb}, the kernel holds {}",
            p.display(),
            back.trim()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NVRAMDISK: FuseLimits = FuseLimits {
        max_write_bytes: 63 * 4096,
        max_pages: 63,
    };

    #[test]
    fn a_4k_device_takes_half_its_pages_in_requests() {
        // 63 slots, two per 4 KiB block at worst: 31 blocks.
        assert_eq!(request_bytes_max(4096, NVRAMDISK).unwrap(), 31 * 4096);
        assert_eq!(max_sectors_kb(4096, NVRAMDISK).unwrap(), 124);
        assert_eq!(page_slots_max(31 * 4096, 4096), 62);
        assert_eq!(page_slots_max(32 * 4096, 4096), 64);
    }

    #[test]
    fn a_512_byte_write_cache_is_bounded_by_its_slots_then_its_max_write() {
        // The seed's write cache: max_write 63 sectors, 32 slots (128 KiB of readahead).
        let wc = FuseLimits {
            max_write_bytes: 63 * 512,
            max_pages: 32,
        };
        assert_eq!(request_bytes_max(512, wc).unwrap(), 16 * 1024);
        // With 4 KiB loop blocks the max write binds first: 7 blocks, 28 KiB.
        assert_eq!(request_bytes_max(4096, wc).unwrap(), 28 * 1024);
        let wide = FuseLimits {
            max_pages: 256,
            ..wc
        };
        assert_eq!(request_bytes_max(512, wide).unwrap(), 31 * 1024);
    }

    #[test]
    fn a_limit_below_a_page_is_refused_naming_both_limits() {
        // A page of 4 KiB blocks takes two slots at the worst alignment.
        let tiny = FuseLimits {
            max_write_bytes: 4096,
            max_pages: 1,
        };
        let e = request_bytes_max(4096, tiny).unwrap_err().to_string();
        assert!(e.contains("max_pages 1"), "{e}");
        let two = FuseLimits {
            max_pages: 2,
            ..tiny
        };
        assert_eq!(request_bytes_max(4096, two).unwrap(), 4096);
        assert!(request_bytes_max(8192, NVRAMDISK).is_err());
        assert!(request_bytes_max(3000, NVRAMDISK).is_err());
    }

    #[test]
    fn the_sysfs_path_is_a_loop_devices_only() {
        assert_eq!(
            max_sectors_kb_path("/dev/loop7").unwrap(),
            std::path::Path::new("/sys/block/loop7/queue/max_sectors_kb")
        );
        assert!(max_sectors_kb_path("/dev/sda").is_err());
        assert!(max_sectors_kb_path("/dev/loop7/../sda").is_err());
    }
}
