//! An on-demand shadow-page allocator for comparison with the static pool (seed 000 section
//! 7.7, Fig. 16): one bit per data page in a separate persistent region; a write finds free
//! pages by scanning from a cursor, sets their bits and persists them (non-temporal 8-byte
//! stores and a fence) before its data step; the pages a write frees are cleared and persisted
//! after its commit. Every write pays for allocation, as with a general-purpose allocator.
//!
//! Benchmarks only (`nvstack bench --suite allocation`): recovery never reads the bitmap (it
//! rebuilds the free pages from the map, as it always does), so the bitmap is not part of the
//! image format.

use nvstack_core::error::{Error, Result};
use nvstack_pmem::Region;
use std::sync::Arc;

type Lock<T> = spin::mutex::SpinMutex<T, spin::relax::Yield>;

pub struct BitmapAllocator {
    region: Arc<dyn Region>,
    pages: u64,
    /// The word the next scan starts at.
    cursor: Lock<u64>,
}

impl BitmapAllocator {
    /// Bytes of region a bitmap for `pages` pages needs.
    pub fn region_bytes(pages: u64) -> u64 {
        pages.div_ceil(64) * 8
    }

    /// A bitmap over `pages` pages in `region`, with exactly the pages `is_free` says are
    /// free clear, persisted.
    pub fn new(region: Arc<dyn Region>, pages: u64, is_free: impl Fn(u32) -> bool) -> Result<Self> {
        let need = Self::region_bytes(pages);
        if region.len() < need {
            return Err(Error::bad(format!(
                "bitmap region of {} bytes is too small: {pages} pages need {need}",
                region.len()
            )));
        }
        for w in 0..pages.div_ceil(64) {
            let mut bits = 0u64;
            for b in 0..64 {
                let p = w * 64 + b;
                if p >= pages || !is_free(p as u32) {
                    bits |= 1 << b; // pages past the end are never handed out
                }
            }
            region.store_u64_nt(w * 8, bits);
        }
        region.fence();
        Ok(BitmapAllocator {
            region,
            pages,
            cursor: Lock::new(0),
        })
    }

    /// Take `out.len()` free pages: set their bits, persisted. There are always enough (the
    /// device's shadow-pool invariant); a full scan without them is a bug.
    pub fn take(&self, out: &mut [u32]) {
        let r = &*self.region;
        let words = self.pages.div_ceil(64);
        let mut cursor = self.cursor.lock();
        let mut got = 0;
        let mut scanned = 0;
        while got < out.len() {
            assert!(
                scanned <= words,
                "bitmap allocator: no free page (pool invariant broken)"
            );
            let w = *cursor;
            let mut bits = r.load_u64(w * 8);
            let mut changed = false;
            while bits != u64::MAX && got < out.len() {
                let b = (!bits).trailing_zeros() as u64;
                bits |= 1 << b;
                out[got] = (w * 64 + b) as u32;
                got += 1;
                changed = true;
            }
            if changed {
                r.store_u64_nt(w * 8, bits);
            }
            if bits == u64::MAX {
                *cursor = (w + 1) % words;
                scanned += 1;
            }
        }
        r.fence();
        debug_assert!(out.iter().all(|&p| (p as u64) < self.pages));
    }

    /// Clear the bits of `pages`, persisted.
    pub fn free(&self, pages: &[u32]) {
        if pages.is_empty() {
            return;
        }
        let r = &*self.region;
        let _cursor = self.cursor.lock();
        for &p in pages {
            assert!((p as u64) < self.pages, "freeing page {p} out of range");
            let off = (p as u64 / 64) * 8;
            let bits = r.load_u64(off);
            assert!(bits & (1 << (p % 64)) != 0, "page {p} freed twice");
            r.store_u64_nt(off, bits & !(1 << (p % 64)));
        }
        r.fence();
    }

    /// Free pages now (a full count, for tests).
    pub fn free_count(&self) -> u64 {
        let r = &*self.region;
        (0..self.pages.div_ceil(64))
            .map(|w| u64::from(r.load_u64(w * 8).count_zeros()))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvstack_pmem::MmapRegion;

    #[test]
    fn takes_only_free_pages_and_frees_them_back() {
        let pages = 200;
        let region: Arc<dyn Region> = Arc::new(MmapRegion::anonymous(4096).unwrap());
        let a = BitmapAllocator::new(region, pages, |p| p % 3 == 0).unwrap();
        assert_eq!(
            a.free_count(),
            (0..200).filter(|p| p % 3 == 0).count() as u64
        );
        let mut out = [0u32; 10];
        a.take(&mut out);
        assert!(out.iter().all(|p| p % 3 == 0), "{out:?}");
        let mut sorted = out.to_vec();
        sorted.dedup();
        assert_eq!(sorted.len(), 10, "distinct pages");
        let before = a.free_count();
        a.free(&out[..4]);
        assert_eq!(a.free_count(), before + 4);
        // Take everything that is left: all free pages, none twice, then nothing more.
        let left = a.free_count() as usize;
        let mut rest = vec![0u32; left];
        a.take(&mut rest);
        rest.sort_unstable();
        rest.dedup();
        assert_eq!(rest.len(), left);
        assert_eq!(a.free_count(), 0);
    }

    #[test]
    fn a_small_region_is_refused() {
        let region: Arc<dyn Region> = Arc::new(MmapRegion::anonymous(4096).unwrap());
        assert!(BitmapAllocator::new(region, 4096 * 8 + 1, |_| true).is_err());
    }
}
