//! A page-mapped FTL with greedy garbage collection: the second scheme, so the log-block FTL
//! can be compared with one that maps every page.
//!
//! Host writes are appended to one open block, garbage collection's copies to another (so hot
//! and copied data do not mix). When fewer than two free blocks remain before a host block is
//! opened, garbage collection runs: the victim is the closed block with the fewest valid pages
//! (greedy; ties go to the lowest block number), its valid pages are copied, and it is erased.
//! Closed blocks sit in one ordered set per valid count, so the victim is found without a scan
//! of every block.
//! Free blocks are taken first-in first-out. The spare area carries the logical page and a
//! sequence number; [`PageFtl::rebuild`] keeps each logical page's newest copy.

use super::{MergeKind, MergeStep, Merges};
use crate::nand::{Media, Nand, Oob, Scan};
use nvstack_core::error::{Error, Result};
use std::collections::{BTreeSet, VecDeque};

const NONE: u32 = u32::MAX;

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    Open,
    Closed,
}

pub struct PageFtl<M> {
    pub nand: Nand<M>,
    l2p: Vec<u32>,
    p2l: Vec<u32>,
    valid: Vec<u32>,
    state: Vec<State>,
    /// Closed blocks by valid count: `closed[v]` holds the closed blocks with v valid pages.
    closed: Vec<BTreeSet<u32>>,
    free: VecDeque<u32>,
    host: u32,
    gc: u32,
    seq: u64,
    pub merges: Merges,
    scratch: Vec<u8>,
    pub hook: Option<Box<dyn FnMut(MergeStep) + Send>>,
}

impl<M: Media> PageFtl<M> {
    pub fn new(nand: Nand<M>) -> PageFtl<M> {
        let geo = nand.geo;
        PageFtl {
            l2p: vec![NONE; geo.logical_pages() as usize],
            p2l: vec![NONE; geo.pages() as usize],
            valid: vec![0; geo.blocks as usize],
            state: vec![State::Free; geo.blocks as usize],
            closed: vec![BTreeSet::new(); geo.pages_per_block as usize + 1],
            free: (0..geo.blocks).collect(),
            host: NONE,
            gc: NONE,
            seq: 1,
            merges: Merges::default(),
            scratch: vec![0; geo.page_data_bytes as usize],
            hook: None,
            nand,
        }
    }

    fn ppb(&self) -> u32 {
        self.nand.geo.pages_per_block
    }

    pub fn read(&mut self, lpn: u32, buf: &mut [u8]) -> Result<bool> {
        let ppn = self.l2p[lpn as usize];
        if ppn == NONE {
            buf.fill(0);
            return Ok(false);
        }
        let ppb = self.ppb();
        self.nand.read(ppn / ppb, ppn % ppb, buf)?;
        Ok(true)
    }

    pub fn write(&mut self, lpn: u32, data: &[u8]) -> Result<()> {
        assert!(
            u64::from(lpn) < self.nand.geo.logical_pages(),
            "logical page {lpn} beyond the device"
        );
        if self.host == NONE || self.nand.next_page(self.host) == self.ppb() {
            self.close(self.host);
            while self.free.len() < 2 {
                self.collect()?;
            }
            self.host = self.open()?;
        }
        let host = self.host;
        self.place(host, lpn, data)
    }

    /// Program `lpn` at the next page of `block` and make it the current copy.
    fn place(&mut self, block: u32, lpn: u32, data: &[u8]) -> Result<()> {
        self.seq += 1;
        let page = self.nand.next_page(block);
        let oob = Oob {
            lpn,
            log: false,
            seq: self.seq,
        };
        self.nand.program(block, page, data, oob)?;
        let ppn = block * self.ppb() + page;
        self.invalidate(lpn);
        self.l2p[lpn as usize] = ppn;
        self.p2l[ppn as usize] = lpn;
        self.valid[block as usize] += 1;
        Ok(())
    }

    fn invalidate(&mut self, lpn: u32) {
        let old = self.l2p[lpn as usize];
        if old != NONE {
            self.p2l[old as usize] = NONE;
            let block = (old / self.ppb()) as usize;
            let closed = self.state[block] == State::Closed;
            if closed {
                self.closed[self.valid[block] as usize].remove(&(block as u32));
            }
            self.valid[block] -= 1;
            if closed {
                self.closed[self.valid[block] as usize].insert(block as u32);
            }
        }
    }

    fn close(&mut self, block: u32) {
        if block != NONE {
            self.state[block as usize] = State::Closed;
            self.closed[self.valid[block as usize] as usize].insert(block);
        }
    }

    fn open(&mut self) -> Result<u32> {
        let b = self.free.pop_front().ok_or_else(|| {
            Error::finding("flash: no free block (the spare blocks are fewer than the FTL needs)")
        })?;
        assert_eq!(self.nand.next_page(b), 0, "a free block is erased");
        self.state[b as usize] = State::Open;
        Ok(b)
    }

    /// One garbage collection: the closed block with the fewest valid pages is copied out
    /// and erased.
    fn collect(&mut self) -> Result<()> {
        let victim = self
            .closed
            .iter_mut()
            .find_map(|set| set.pop_first())
            .ok_or_else(|| Error::finding("flash: garbage collection found no closed block"))?;
        // Out of the sets while it is copied: its valid count falls to 0 on the way.
        self.state[victim as usize] = State::Free;
        assert!(
            self.valid[victim as usize] < self.ppb(),
            "greedy GC makes progress: some closed block has an invalid page (the spare \
             blocks guarantee it)"
        );
        let ppb = self.ppb();
        for page in 0..ppb {
            let ppn = victim * ppb + page;
            let lpn = self.p2l[ppn as usize];
            if lpn == NONE {
                continue;
            }
            if self.gc == NONE || self.nand.next_page(self.gc) == ppb {
                self.close(self.gc);
                self.gc = self.open()?;
            }
            self.nand.read(victim, page, &mut self.scratch)?;
            let scratch = std::mem::take(&mut self.scratch);
            let placed = self.place(self.gc, lpn, &scratch);
            self.scratch = scratch;
            placed?;
            self.merges.copies += 1;
            if let Some(h) = self.hook.as_mut() {
                h(MergeStep::Copied(MergeKind::Full));
            }
        }
        assert_eq!(
            self.valid[victim as usize], 0,
            "a collected block holds no valid page"
        );
        if let Some(h) = self.hook.as_mut() {
            h(MergeStep::BeforeErase(MergeKind::Full));
        }
        self.nand.erase(victim)?;
        self.state[victim as usize] = State::Free;
        self.free.push_back(victim);
        self.merges.full += 1;
        Ok(())
    }

    /// The FTL of a chip that holds data: each logical page's newest valid copy is current;
    /// blocks with any non-erased page are closed, the others free, and the two partly written
    /// blocks with the most room are open again (GC, then host). Torn pages are ignored. The
    /// scan's reads are not counted.
    pub fn rebuild(nand: Nand<M>, merges: Merges) -> Result<PageFtl<M>> {
        let mut ftl = PageFtl::new(nand);
        ftl.merges = merges;
        ftl.free.clear();
        let ppb = ftl.ppb();
        let mut newest = vec![0u64; ftl.l2p.len()];
        for b in 0..ftl.nand.geo.blocks {
            let mut next = 0;
            for p in 0..ppb {
                match ftl.nand.media.scan(b * ppb + p)? {
                    Scan::Erased => continue,
                    Scan::Torn => {}
                    Scan::Valid(o) => ftl.adopt(b * ppb + p, o, &mut newest)?,
                }
                next = p + 1;
            }
            ftl.nand.set_next_page(b, next);
            if next == 0 {
                ftl.free.push_back(b);
            } else {
                ftl.close(b);
            }
        }
        ftl.reopen_partial_blocks();
        Ok(ftl)
    }

    /// After a crash the free blocks may be exhausted (a collection had just opened its block
    /// and not yet erased its victim), so the collection that runs first must copy into room
    /// it already has: the partly written block with the most room becomes the GC block again
    /// (it has at least the room the cut collection had left), the next the host block.
    fn reopen_partial_blocks(&mut self) {
        let ppb = self.ppb();
        let mut partial: Vec<u32> = (0..self.nand.geo.blocks)
            .filter(|&b| self.state[b as usize] == State::Closed && self.nand.next_page(b) < ppb)
            .collect();
        partial.sort_by_key(|&b| (self.nand.next_page(b), b));
        for (slot, b) in partial.into_iter().take(2).enumerate() {
            self.closed[self.valid[b as usize] as usize].remove(&b);
            self.state[b as usize] = State::Open;
            if slot == 0 {
                self.gc = b;
            } else {
                self.host = b;
            }
        }
    }

    fn adopt(&mut self, ppn: u32, o: Oob, newest: &mut [u64]) -> Result<()> {
        let Some(best) = newest.get_mut(o.lpn as usize) else {
            return Err(Error::bad(format!(
                "flash: page {ppn} holds logical page {} beyond the device",
                o.lpn
            )));
        };
        self.seq = self.seq.max(o.seq + 1);
        if o.seq > *best {
            *best = o.seq;
            self.invalidate(o.lpn);
            self.l2p[o.lpn as usize] = ppn;
            self.p2l[ppn as usize] = o.lpn;
            let block = (ppn / self.ppb()) as usize;
            self.valid[block] += 1;
        }
        Ok(())
    }
}
