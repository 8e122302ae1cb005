//! The log-block FTL of Kim et al. (IEEE Trans. Consumer Electronics 48(2), 2002), the FTL
//! of seed 004: logical blocks map to data blocks (block-mapped: logical page `o` of a block
//! lives at page `o`), and writes go to a few log blocks (page-mapped: appended in order, a
//! per-log map from offset to page). A log block serves one logical block at a time.
//!
//! - **Writes.** A write to logical block L is appended to L's log block; L gets one when it has
//!   none (from the free blocks), and when all `log_blocks` are taken, a victim log block is
//!   merged first. Victim: the least recently written log block (the one whose last write is
//!   oldest), so a log still being filled is kept. A write to a full log block merges it first.
//!   A logical block that has no data block yet also starts in a log block: its first merge
//!   makes its data block.
//! - **Switch merge**: the log block holds every page of L, each at its own offset (written
//!   0, 1, ..., n-1): it becomes L's data block and the old data block is erased. No copy.
//! - **Partial merge**: the log holds offsets 0..k-1 in place and k < n: the pages k..n-1 that
//!   the data block holds are copied into the log block at their offsets, which then becomes
//!   the data block; the old one is erased.
//! - **Full merge**: otherwise: the newest copy of each offset (the log's, else the data
//!   block's) is copied into a free block at its offset, which becomes the data block; the old
//!   data block and the log block are erased.
//! - Free blocks are taken first-in first-out (an erased block goes to the back), which spreads
//!   erases without a wear-leveling policy of its own.
//!
//! Data blocks may have holes (offsets never written stay erased pages): a merge copies only
//! pages that hold data. Every page's spare area carries its logical page, whether it was
//! written as a log page, and a sequence number, so [`LogBlockFtl::rebuild`] recovers the
//! mapping from the pages alone, also after a crash in the middle of a merge (see there).

use super::{MergeKind, MergeStep, Merges};
use crate::nand::{Media, Nand, Oob, Scan};
use nvstack_core::error::{Error, Result};
use std::collections::VecDeque;

const NONE: u32 = u32::MAX;
const NO_PAGE: u16 = u16::MAX;

/// A log block and its page map.
struct LogBlock {
    pbn: u32,
    lbn: u32,
    /// Pages appended so far (the block's write pointer).
    used: u32,
    /// Every page appended so far holds its own offset (page i holds offset i).
    in_place: bool,
    /// Sequence number of the last write: the victim is the log with the smallest.
    last_write: u64,
    /// Offset -> page in this block holding its newest copy.
    map: Vec<u16>,
}

pub struct LogBlockFtl<M> {
    pub nand: Nand<M>,
    /// Per logical block: its data block, or NONE.
    data_block: Vec<u32>,
    /// Per logical block: which offsets its data block holds, `words` u64s each.
    present: Vec<u64>,
    words: usize,
    /// Per logical block: its log slot, or NONE.
    log_of: Vec<u32>,
    logs: Vec<Option<LogBlock>>,
    free: VecDeque<u32>,
    seq: u64,
    pub merges: Merges,
    scratch: Vec<u8>,
    /// Called at each step of a merge (tests stop a process there).
    pub hook: Option<Box<dyn FnMut(MergeStep) + Send>>,
}

impl<M: Media> LogBlockFtl<M> {
    /// A fresh FTL on an erased chip with `log_blocks` log blocks.
    pub fn new(nand: Nand<M>, log_blocks: u32) -> LogBlockFtl<M> {
        let geo = nand.geo;
        let lbns = geo.logical_blocks() as usize;
        let words = (geo.pages_per_block as usize).div_ceil(64);
        assert!(
            geo.spare_blocks >= log_blocks + crate::geometry::SPARE_BLOCKS_BEYOND_LOGS,
            "the spare blocks hold the log blocks and two merge targets"
        );
        LogBlockFtl {
            data_block: vec![NONE; lbns],
            present: vec![0; lbns * words],
            words,
            log_of: vec![NONE; lbns],
            logs: (0..log_blocks).map(|_| None).collect(),
            free: (0..geo.blocks).collect(),
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

    fn split(&self, lpn: u32) -> (usize, u32) {
        assert!(
            u64::from(lpn) < self.nand.geo.logical_pages(),
            "logical page {lpn} beyond the device"
        );
        ((lpn / self.ppb()) as usize, lpn % self.ppb())
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn has(&self, lbn: usize, off: u32) -> bool {
        self.present[lbn * self.words + off as usize / 64] & (1 << (off % 64)) != 0
    }

    fn set_present(&mut self, lbn: usize, off: u32) {
        self.present[lbn * self.words + off as usize / 64] |= 1 << (off % 64);
    }

    fn step(&mut self, s: MergeStep) {
        if let Some(h) = self.hook.as_mut() {
            h(s);
        }
    }

    /// Write one logical page (`data` is page-sized, or empty when the media keeps no bytes).
    pub fn write(&mut self, lpn: u32, data: &[u8]) -> Result<()> {
        let (lbn, off) = self.split(lpn);
        let slot = self.log_for_write(lbn)?;
        let seq = self.next_seq();
        let lb = self.logs[slot]
            .as_mut()
            .expect("log_for_write returns a live slot");
        let page = lb.used;
        let oob = Oob {
            lpn,
            log: true,
            seq,
        };
        self.nand.program(lb.pbn, page, data, oob)?;
        lb.map[off as usize] = page as u16;
        lb.in_place &= page == off;
        lb.used += 1;
        lb.last_write = seq;
        Ok(())
    }

    /// Read one logical page into `buf` (zeros when never written); whether it was mapped.
    pub fn read(&mut self, lpn: u32, buf: &mut [u8]) -> Result<bool> {
        let (lbn, off) = self.split(lpn);
        if let Some(lb) = self.log_of(lbn) {
            let page = lb.map[off as usize];
            if page != NO_PAGE {
                let pbn = lb.pbn;
                self.nand.read(pbn, u32::from(page), buf)?;
                return Ok(true);
            }
        }
        if self.has(lbn, off) {
            self.nand.read(self.data_block[lbn], off, buf)?;
            return Ok(true);
        }
        buf.fill(0);
        Ok(false)
    }

    fn log_of(&self, lbn: usize) -> Option<&LogBlock> {
        match self.log_of[lbn] {
            NONE => None,
            s => self.logs[s as usize].as_ref(),
        }
    }

    /// The slot of `lbn`'s log block with room for one more page.
    fn log_for_write(&mut self, lbn: usize) -> Result<usize> {
        let slot = self.log_of[lbn];
        if slot != NONE {
            let lb = self.logs[slot as usize]
                .as_ref()
                .expect("log_of names live slots");
            if lb.used < self.ppb() {
                return Ok(slot as usize);
            }
            self.merge(slot as usize)?;
        }
        self.new_log(lbn)
    }

    fn new_log(&mut self, lbn: usize) -> Result<usize> {
        let slot = match self.logs.iter().position(Option::is_none) {
            Some(s) => s,
            None => {
                let victim = self.victim();
                self.merge(victim)?;
                victim
            }
        };
        let pbn = self.take_free()?;
        self.logs[slot] = Some(LogBlock {
            pbn,
            lbn: lbn as u32,
            used: 0,
            in_place: true,
            last_write: 0,
            map: vec![NO_PAGE; self.ppb() as usize],
        });
        self.log_of[lbn] = slot as u32;
        Ok(slot)
    }

    /// The least recently written log block.
    fn victim(&self) -> usize {
        let (slot, _) = self
            .logs
            .iter()
            .enumerate()
            .filter_map(|(i, l)| l.as_ref().map(|l| (i, l.last_write)))
            .min_by_key(|&(_, t)| t)
            .expect("a victim is chosen only when every slot is taken");
        slot
    }

    fn take_free(&mut self) -> Result<u32> {
        let b = self.free.pop_front().ok_or_else(|| {
            Error::finding("flash: no free block (the spare blocks are fewer than the FTL needs)")
        })?;
        assert_eq!(self.nand.next_page(b), 0, "a free block is erased");
        Ok(b)
    }

    fn release(&mut self, block: u32) -> Result<()> {
        self.nand.erase(block)?;
        self.free.push_back(block);
        Ok(())
    }

    /// Copy page `src_page` of `src` to page `dst_page` of `dst` as a data page of `lpn`.
    fn copy(&mut self, src: u32, src_page: u32, dst: u32, dst_page: u32, lpn: u32) -> Result<()> {
        self.nand.read(src, src_page, &mut self.scratch)?;
        let seq = self.next_seq();
        let oob = Oob {
            lpn,
            log: false,
            seq,
        };
        self.nand.program(dst, dst_page, &self.scratch, oob)?;
        self.merges.copies += 1;
        Ok(())
    }

    /// Merge the log block in `slot` with its data block (switch, partial or full).
    fn merge(&mut self, slot: usize) -> Result<()> {
        let lb = self.logs[slot]
            .take()
            .expect("a merge takes a live log block");
        self.log_of[lb.lbn as usize] = NONE;
        if lb.in_place && lb.used == self.ppb() {
            self.switch_merge(lb)
        } else if lb.in_place {
            self.partial_merge(lb)
        } else {
            self.full_merge(lb)
        }
    }

    fn switch_merge(&mut self, lb: LogBlock) -> Result<()> {
        let lbn = lb.lbn as usize;
        let old = std::mem::replace(&mut self.data_block[lbn], lb.pbn);
        for off in 0..self.ppb() {
            self.set_present(lbn, off);
        }
        self.step(MergeStep::BeforeErase(MergeKind::Switch));
        if old != NONE {
            self.release(old)?;
        }
        self.merges.switch += 1;
        Ok(())
    }

    fn partial_merge(&mut self, lb: LogBlock) -> Result<()> {
        let lbn = lb.lbn as usize;
        let old = self.data_block[lbn];
        let base = lb.lbn * self.ppb();
        for off in lb.used..self.ppb() {
            if old != NONE && self.has(lbn, off) {
                self.copy(old, off, lb.pbn, off, base + off)?;
                self.step(MergeStep::Copied(MergeKind::Partial));
            }
        }
        // The offsets the log wrote join those just copied; nothing else is present.
        let keep: Vec<bool> = (0..self.ppb())
            .map(|o| o < lb.used || self.has(lbn, o))
            .collect();
        self.present[lbn * self.words..(lbn + 1) * self.words].fill(0);
        for (off, _) in keep.iter().enumerate().filter(|(_, &k)| k) {
            self.set_present(lbn, off as u32);
        }
        self.data_block[lbn] = lb.pbn;
        self.step(MergeStep::BeforeErase(MergeKind::Partial));
        if old != NONE {
            self.release(old)?;
        }
        self.merges.partial += 1;
        Ok(())
    }

    fn full_merge(&mut self, lb: LogBlock) -> Result<()> {
        let lbn = lb.lbn as usize;
        let old = self.data_block[lbn];
        let new = self.take_free()?;
        let base = lb.lbn * self.ppb();
        for off in 0..self.ppb() {
            let src = match lb.map[off as usize] {
                NO_PAGE if old != NONE && self.has(lbn, off) => (old, off),
                NO_PAGE => continue,
                page => (lb.pbn, u32::from(page)),
            };
            self.copy(src.0, src.1, new, off, base + off)?;
            self.set_present(lbn, off);
            self.step(MergeStep::Copied(MergeKind::Full));
        }
        self.data_block[lbn] = new;
        self.step(MergeStep::BeforeErase(MergeKind::Full));
        if old != NONE {
            self.release(old)?;
            self.step(MergeStep::Erased(MergeKind::Full));
        }
        self.release(lb.pbn)?;
        self.merges.full += 1;
        Ok(())
    }
}

/// What the scan at open found in one block.
#[derive(Default)]
struct BlockScan {
    /// Valid pages: (page, oob).
    pages: Vec<(u32, Oob)>,
    /// One past the highest page that is not erased (valid or torn).
    next_page: u32,
    torn: bool,
}

impl BlockScan {
    fn last(&self) -> Option<&Oob> {
        self.pages.last().map(|(_, o)| o)
    }
    fn min_seq(&self) -> u64 {
        self.pages.iter().map(|(_, o)| o.seq).min().unwrap_or(0)
    }
    fn max_seq(&self) -> u64 {
        self.pages.iter().map(|(_, o)| o.seq).max().unwrap_or(0)
    }
    /// Every page below the write pointer is valid and holds its own offset.
    fn in_place(&self, ppb: u32) -> bool {
        !self.torn
            && self.pages.len() as u32 == self.next_page
            && self.pages.iter().all(|(p, o)| o.lpn % ppb == *p)
    }
    /// Every valid page holds its own offset (a data block, holes allowed).
    fn positions_match(&self, ppb: u32) -> bool {
        self.pages.iter().all(|(p, o)| o.lpn % ppb == *p)
    }
}

impl<M: Media> LogBlockFtl<M> {
    /// The FTL of a chip that holds data: the mapping rebuilt from every page's spare area.
    ///
    /// Each block belongs to the logical block its pages name, as a data block or a log block
    /// by the role of its highest valid page (a partial merge's copies are data pages, so a
    /// log block promoted by one reads as a data block). A logical block is taken as it is
    /// when it has at most one data block and one log block, the data block's pages are at
    /// their offsets, and the data block is older than the log (its newest sequence number
    /// below the log's oldest): the state between operations. Anything else is a merge cut
    /// short (a second data block being filled, a log not yet erased after its data was
    /// copied): it is finished by a recovery merge, which copies the newest copy of each offset
    /// among all of the logical block's pages into a free block and erases the rest. Every
    /// write acknowledged before the crash is the newest copy of its page, so it survives. A
    /// lone log block whose pages are all in place becomes the data block (as a switch would).
    /// Torn pages (checksum failures: programs cut short, never acknowledged) are ignored;
    /// blocks holding only torn pages are erased. The scan's reads are not counted.
    pub fn rebuild(nand: Nand<M>, log_blocks: u32, merges: Merges) -> Result<LogBlockFtl<M>> {
        let mut ftl = LogBlockFtl::new(nand, log_blocks);
        ftl.merges = merges;
        let scans = ftl.scan_blocks()?;
        ftl.free.clear();
        let mut by_lbn: Vec<Vec<u32>> = vec![Vec::new(); ftl.data_block.len()];
        let mut garbage = Vec::new();
        for (b, s) in scans.iter().enumerate() {
            ftl.nand.set_next_page(b as u32, s.next_page);
            ftl.seq = ftl.seq.max(s.max_seq() + 1);
            match s.last() {
                Some(o) => {
                    let lbn = (o.lpn / ftl.ppb()) as usize;
                    if lbn >= by_lbn.len() {
                        return Err(Error::bad(format!(
                            "flash: block {b} holds logical page {} beyond the device",
                            o.lpn
                        )));
                    }
                    by_lbn[lbn].push(b as u32)
                }
                None if s.next_page == 0 => ftl.free.push_back(b as u32),
                None => garbage.push(b as u32),
            }
        }
        for b in garbage {
            ftl.release(b)?;
        }
        let mut recover = Vec::new();
        for (lbn, blocks) in by_lbn.iter().enumerate() {
            if !ftl.adopt(lbn, blocks, &scans) {
                recover.push(lbn);
            }
        }
        for lbn in recover {
            ftl.recovery_merge(lbn, &by_lbn[lbn], &scans)?;
        }
        Ok(ftl)
    }

    fn scan_blocks(&mut self) -> Result<Vec<BlockScan>> {
        let ppb = self.ppb();
        let mut scans = Vec::with_capacity(self.nand.geo.blocks as usize);
        for b in 0..self.nand.geo.blocks {
            let mut s = BlockScan::default();
            for p in 0..ppb {
                match self.nand.media.scan(b * ppb + p)? {
                    Scan::Erased => continue,
                    Scan::Torn => s.torn = true,
                    Scan::Valid(o) => s.pages.push((p, o)),
                }
                s.next_page = p + 1;
            }
            scans.push(s);
        }
        Ok(scans)
    }

    /// Take a logical block's blocks as they are, when they form a state between operations.
    fn adopt(&mut self, lbn: usize, blocks: &[u32], scans: &[BlockScan]) -> bool {
        let ppb = self.ppb();
        let role = |b: &u32| {
            scans[*b as usize]
                .last()
                .expect("grouped blocks have pages")
                .log
        };
        let data: Vec<u32> = blocks.iter().copied().filter(|b| !role(b)).collect();
        let logs: Vec<u32> = blocks.iter().copied().filter(role).collect();
        if data.len() > 1 || logs.len() > 1 {
            return false;
        }
        let mut data = data.first().copied();
        let mut log = logs.first().copied();
        if let (None, Some(g)) = (data, log) {
            if scans[g as usize].in_place(ppb) {
                (data, log) = (Some(g), None);
            }
        }
        if let Some(d) = data {
            let ds = &scans[d as usize];
            let older = log.is_none_or(|g| ds.max_seq() < scans[g as usize].min_seq());
            if !ds.positions_match(ppb) || ds.torn || !older {
                return false;
            }
            self.data_block[lbn] = d;
            for (p, _) in &ds.pages {
                self.set_present(lbn, *p);
            }
        }
        match log {
            None => true,
            Some(g) => self.adopt_log(lbn, g, &scans[g as usize]),
        }
    }

    fn adopt_log(&mut self, lbn: usize, g: u32, s: &BlockScan) -> bool {
        let Some(slot) = self.logs.iter().position(Option::is_none) else {
            return false;
        };
        let ppb = self.ppb();
        let mut map = vec![NO_PAGE; ppb as usize];
        let mut newest = vec![0u64; ppb as usize];
        for (p, o) in &s.pages {
            let off = (o.lpn % ppb) as usize;
            if o.seq > newest[off] {
                newest[off] = o.seq;
                map[off] = *p as u16;
            }
        }
        self.logs[slot] = Some(LogBlock {
            pbn: g,
            lbn: lbn as u32,
            used: s.next_page,
            in_place: s.in_place(ppb),
            last_write: s.max_seq(),
            map,
        });
        self.log_of[lbn] = slot as u32;
        true
    }

    /// Finish a merge cut short: the newest copy of each offset into a free block.
    fn recovery_merge(&mut self, lbn: usize, blocks: &[u32], scans: &[BlockScan]) -> Result<()> {
        let ppb = self.ppb();
        let mut newest: Vec<Option<(u32, u32, u64)>> = vec![None; ppb as usize];
        for &b in blocks {
            for (p, o) in &scans[b as usize].pages {
                let slot = &mut newest[(o.lpn % ppb) as usize];
                if slot.is_none_or(|(_, _, s)| o.seq > s) {
                    *slot = Some((b, *p, o.seq));
                }
            }
        }
        let new = self.take_free()?;
        self.present[lbn * self.words..(lbn + 1) * self.words].fill(0);
        for (off, src) in newest.iter().enumerate() {
            if let Some((b, p, _)) = *src {
                self.copy(b, p, new, off as u32, lbn as u32 * ppb + off as u32)?;
                self.set_present(lbn, off as u32);
            }
        }
        self.data_block[lbn] = new;
        for &b in blocks {
            self.release(b)?;
        }
        self.merges.recovery += 1;
        Ok(())
    }

    /// Blocks in use as data blocks and as log blocks, and free blocks (for reports).
    pub fn block_use(&self) -> (u64, u64, u64) {
        let data = self.data_block.iter().filter(|&&b| b != NONE).count() as u64;
        let logs = self.logs.iter().filter(|l| l.is_some()).count() as u64;
        (data, logs, self.free.len() as u64)
    }
}
