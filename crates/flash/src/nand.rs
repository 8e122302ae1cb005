//! The NAND chip: pages programmed once per erase, in ascending order within a block, blocks
//! erased whole; and what each operation counts. Where the bytes live is a [`Media`]: none
//! (the simulator counts and keeps no data), memory (tests), or a file (the block device).
//!
//! The chip's two rules are one invariant per block, its write pointer `next_page`: a page may
//! be programmed only at or above it (so never twice, and never below a page already
//! programmed), and programming page p moves it to p + 1. Skipping forward is allowed, as
//! datasheets allow ("addressing should be done in sequential order in a block": a page left
//! out stays erased until the block is erased). An erase sets it back to 0. A program that
//! breaks it is a bug in the FTL above, so it panics, naming the block and both pages.

use crate::geometry::Geometry;
use nvstack_core::error::Result;

/// What the FTL writes in a page's spare area besides the data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Oob {
    /// The logical page whose data this is.
    pub lpn: u32,
    /// Written as a log page (log-block FTL) rather than a data-block page.
    pub log: bool,
    /// The FTL's program sequence number: of two copies of a logical page, the higher is newer.
    pub seq: u64,
}

/// A page as the scan at open finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scan {
    /// Never programmed since the last erase (all 0xFF).
    Erased,
    /// Programmed, but its checksum fails: a program cut short (never acknowledged).
    Torn,
    Valid(Oob),
}

/// Where pages live. Every method is told only physical addresses the [`Nand`] has checked.
pub trait Media {
    fn program(&mut self, ppn: u32, data: &[u8], oob: Oob) -> Result<()>;
    /// Read a page's data into `data` (page-sized, or empty when the caller wants no bytes).
    fn read(&mut self, ppn: u32, data: &mut [u8]) -> Result<()>;
    fn erase(&mut self, block: u32) -> Result<()>;
    /// The page's spare area, for rebuilding the mapping at open.
    fn scan(&mut self, ppn: u32) -> Result<Scan>;
}

/// No bytes at all: the simulator's media (counts only; a scan finds every page erased).
#[derive(Default)]
pub struct NoMedia;

impl Media for NoMedia {
    fn program(&mut self, _: u32, _: &[u8], _: Oob) -> Result<()> {
        Ok(())
    }
    fn read(&mut self, _: u32, _: &mut [u8]) -> Result<()> {
        Ok(())
    }
    fn erase(&mut self, _: u32) -> Result<()> {
        Ok(())
    }
    fn scan(&mut self, _: u32) -> Result<Scan> {
        Ok(Scan::Erased)
    }
}

/// Pages in memory with their spare areas (tests and the reference model's checks).
pub struct MemMedia {
    page_bytes: usize,
    pages_per_block: u32,
    data: Vec<u8>,
    oob: Vec<Option<Oob>>,
}

impl MemMedia {
    pub fn new(geo: &Geometry) -> MemMedia {
        let pages = geo.pages() as usize;
        MemMedia {
            page_bytes: geo.page_data_bytes as usize,
            pages_per_block: geo.pages_per_block,
            data: vec![0xff; pages * geo.page_data_bytes as usize],
            oob: vec![None; pages],
        }
    }
}

impl Media for MemMedia {
    fn program(&mut self, ppn: u32, data: &[u8], oob: Oob) -> Result<()> {
        let at = ppn as usize * self.page_bytes;
        if !data.is_empty() {
            self.data[at..at + self.page_bytes].copy_from_slice(data);
        }
        self.oob[ppn as usize] = Some(oob);
        Ok(())
    }
    fn read(&mut self, ppn: u32, data: &mut [u8]) -> Result<()> {
        if !data.is_empty() {
            let at = ppn as usize * self.page_bytes;
            data.copy_from_slice(&self.data[at..at + self.page_bytes]);
        }
        Ok(())
    }
    fn erase(&mut self, block: u32) -> Result<()> {
        let first = (block * self.pages_per_block) as usize;
        let n = self.pages_per_block as usize;
        self.data[first * self.page_bytes..(first + n) * self.page_bytes].fill(0xff);
        self.oob[first..first + n].fill(None);
        Ok(())
    }
    fn scan(&mut self, ppn: u32) -> Result<Scan> {
        Ok(self.oob[ppn as usize].map_or(Scan::Erased, Scan::Valid))
    }
}

/// Counts of operations, per physical page and block and in total.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub page_reads: Vec<u32>,
    pub page_programs: Vec<u32>,
    pub block_erases: Vec<u32>,
    pub reads: u64,
    pub programs: u64,
    pub erases: u64,
}

impl Counters {
    pub fn new(geo: &Geometry) -> Counters {
        Counters {
            page_reads: vec![0; geo.pages() as usize],
            page_programs: vec![0; geo.pages() as usize],
            block_erases: vec![0; geo.blocks as usize],
            ..Counters::default()
        }
    }

    /// Mean and population standard deviation of the erase count per block (seed 004 Fig. 7).
    pub fn erase_mean_sd(&self) -> (f64, f64) {
        mean_sd(&self.block_erases)
    }
}

/// Mean and population standard deviation of `xs` (0, 0 when empty).
pub fn mean_sd(xs: &[u32]) -> (f64, f64) {
    if xs.is_empty() {
        return (0.0, 0.0);
    }
    let n = xs.len() as f64;
    let mean = xs.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
    let var = xs
        .iter()
        .map(|&x| (f64::from(x) - mean).powi(2))
        .sum::<f64>()
        / n;
    (mean, var.sqrt())
}

/// The chip: its media, each block's write pointer, and the counters.
pub struct Nand<M> {
    pub geo: Geometry,
    pub media: M,
    /// Per block: the lowest page that may still be programmed before the next erase.
    next_page: Vec<u16>,
    pub counters: Counters,
}

impl<M: Media> Nand<M> {
    /// A chip whose every block is erased.
    pub fn new(geo: Geometry, media: M) -> Nand<M> {
        assert!(
            geo.validate().is_ok(),
            "a Nand is built from a valid geometry"
        );
        Nand {
            next_page: vec![0; geo.blocks as usize],
            counters: Counters::new(&geo),
            geo,
            media,
        }
    }

    pub fn ppb(&self) -> u32 {
        self.geo.pages_per_block
    }

    /// The block's write pointer (pages below it are programmed or were skipped).
    pub fn next_page(&self, block: u32) -> u32 {
        u32::from(self.next_page[block as usize])
    }

    /// After a scan at open: the block's pointer as its highest non-erased page says.
    pub fn set_next_page(&mut self, block: u32, page: u32) {
        assert!(page <= self.ppb(), "a write pointer is within its block");
        self.next_page[block as usize] = page as u16;
    }

    /// Program page `page` of `block`. Panics when the chip's rule is broken: a page is
    /// programmed once per erase, pages in ascending order.
    pub fn program(&mut self, block: u32, page: u32, data: &[u8], oob: Oob) -> Result<()> {
        let next = self.next_page(block);
        assert!(
            page < self.ppb() && page >= next,
            "NAND rule broken: block {block} page {page} programmed while the block's next \
             programmable page is {next} (a page is programmed once per erase, pages in \
             ascending order)"
        );
        let ppn = block * self.ppb() + page;
        self.media.program(ppn, data, oob)?;
        self.next_page[block as usize] = (page + 1) as u16;
        self.counters.page_programs[ppn as usize] += 1;
        self.counters.programs += 1;
        Ok(())
    }

    pub fn read(&mut self, block: u32, page: u32, data: &mut [u8]) -> Result<()> {
        assert!(page < self.ppb(), "a page within its block");
        let ppn = block * self.ppb() + page;
        self.media.read(ppn, data)?;
        self.counters.page_reads[ppn as usize] += 1;
        self.counters.reads += 1;
        Ok(())
    }

    pub fn erase(&mut self, block: u32) -> Result<()> {
        self.media.erase(block)?;
        self.next_page[block as usize] = 0;
        self.counters.block_erases[block as usize] += 1;
        self.counters.erases += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chip() -> Nand<MemMedia> {
        let geo = Geometry {
            blocks: 4,
            spare_blocks: 2,
            ..Geometry::SMALL_BLOCK
        };
        Nand::new(geo, MemMedia::new(&geo))
    }

    fn oob(lpn: u32) -> Oob {
        Oob {
            lpn,
            log: false,
            seq: u64::from(lpn),
        }
    }

    #[test]
    fn programs_go_up_skip_forward_and_counts_are_per_page() {
        let mut n = chip();
        let page = vec![7u8; 512];
        n.program(1, 0, &page, oob(0)).unwrap();
        n.program(1, 5, &page, oob(5)).unwrap();
        assert_eq!(n.next_page(1), 6);
        let mut back = vec![0u8; 512];
        n.read(1, 5, &mut back).unwrap();
        assert_eq!(back, page);
        n.read(1, 3, &mut back).unwrap();
        assert!(
            back.iter().all(|&b| b == 0xff),
            "a skipped page reads erased"
        );
        assert_eq!(n.counters.page_programs[32 + 5], 1);
        assert_eq!(n.counters.page_reads[32 + 3], 1);
        n.erase(1).unwrap();
        assert_eq!(n.next_page(1), 0);
        n.program(1, 0, &page, oob(0)).unwrap();
        assert_eq!(n.counters.page_programs[32], 2);
        assert_eq!((n.counters.programs, n.counters.erases), (3, 1));
        assert_eq!(n.counters.block_erases, vec![0, 1, 0, 0]);
    }

    #[test]
    #[should_panic(expected = "programmed once per erase")]
    fn a_page_programmed_twice_is_caught() {
        let mut n = chip();
        n.program(2, 3, &[], oob(3)).unwrap();
        n.program(2, 3, &[], oob(3)).unwrap();
    }

    #[test]
    #[should_panic(expected = "pages in ascending order")]
    fn a_page_programmed_below_one_already_programmed_is_caught() {
        let mut n = chip();
        n.program(0, 4, &[], oob(4)).unwrap();
        n.program(0, 2, &[], oob(2)).unwrap();
    }

    #[test]
    fn mean_and_sd_of_erase_counts() {
        assert_eq!(mean_sd(&[]), (0.0, 0.0));
        let (m, s) = mean_sd(&[1, 3]);
        assert_eq!((m, s), (2.0, 1.0));
    }
}
