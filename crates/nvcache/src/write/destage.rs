//! Destaging: the write cache's dirty blocks written back to the backing device, by trigger.
//! The seed's trigger (a new block finds no free slot: destage one) is always on;
//! dm-writecache's (watermarks, max-age, cleaner) are options, and with any of them on a
//! destaged block takes its cached contiguous neighbours along. `writeback_jobs` bounds the
//! blocks written between two backing flushes.
//!
//! A destage runs in groups of about `writeback_jobs` blocks (cut where a backing block
//! starts), each in three steps (docs/format.md 12.4): under the cache's lock, the group's
//! blocks are chosen into runs of contiguous blocks (one aligned buffer of whole backing
//! blocks per run, at most `RUN_BYTES_MAX`) and their slots pinned; without the lock, each
//! copy is read from its slot and checked against its CRC, each run goes to the backing
//! device in one write and the device is flushed; under the lock again, the slots are
//! unpinned, the outstanding clears of replaced copies are fenced and only the slots that
//! still hold the copy that was written are cleared (a block rewritten meanwhile keeps its new
//! copy). A pinned slot whose copy is replaced is held, not freed, until its pass unpins it:
//! no write lands in a slot a destage is reading. Writes go on while the backing device
//! works; one destage runs at a time, and a write that would reach the backing blocks it
//! writes (bypassed, or a long discard) waits for it.

use crate::write::bugs::Bug;
use crate::write::{Cached, Guard, WState, WriteCache};
use nvstack_core::error::{Error, Result};
use nvstack_pmem::Region;
use std::time::{Duration, Instant};

/// Why blocks were destaged (`status` counts each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// A new block found no free slot (the seed's trigger).
    Room,
    /// Used slots above the high watermark, until at most the low one.
    Watermark,
    /// Written longer ago than max-age.
    MaxAge,
    /// The cleaner is on: everything goes.
    Cleaner,
    /// `writeback` or `detach`: everything goes.
    Writeback,
}

/// Most neighbours one destaged block takes along (each side).
const NEIGHBOURS_MAX: u64 = 64;

/// Most bytes of one backing write of a destage: a run of contiguous cached blocks (and the
/// rest of its edge backing blocks) goes out in one write of at most this.
pub const RUN_BYTES_MAX: usize = 1 << 20;

/// Bytes of a run's buffer: the longest run, one more backing block where it starts and ends
/// inside one, and the slack that aligns it.
const RUN_BUF_BYTES: usize = RUN_BYTES_MAX + 3 * crate::write::BACKING_BLOCK_BYTES as usize;

/// Run buffers kept for the next destage (at most this many: the runs of two groups, one
/// written while the next is copied out, with room for groups longer than the served 2 MiB).
const RUN_BUFS_KEPT: usize = 32;

/// Contiguous cached blocks, chosen under the lock (their slots pinned: not reused while the
/// run is out), copied out and written without it.
struct Run {
    /// The run's first block.
    lba: u64,
    /// Each block's slot and its copy as chosen: the data read from the slot is checked
    /// against it, and the slot cleared after the flush only if it still holds it.
    copies: Vec<(u32, Cached)>,
    /// Whole backing blocks from the one holding `lba`, at `at` (4 KiB aligned: one pwrite,
    /// no copy); the sectors of the edge blocks outside the run are read at the write.
    buf: Vec<u8>,
    at: usize,
    len_bytes: usize,
}

/// Why a pass's work without the lock failed: a copy's data fails its CRC (damaged at rest,
/// never written back), or the backing device failed (the cache's error state).
enum Failed {
    Damaged(Error),
    Backing(Error),
}

/// One group of a destage: its runs, and the bypassed writes counted when it was chosen.
struct Pass {
    runs: Vec<Run>,
    bypassed_at_choice: u64,
    lbas: Vec<u64>,
    data_sectors: u64,
}

impl<R: Region> WriteCache<R> {
    /// Wait until no destage is between its copy-out and its clears.
    pub(crate) fn wait_destage<'a>(&'a self, mut g: Guard<'a>) -> Guard<'a> {
        while g.destaging.is_some() {
            g = self.wait_changed(g);
        }
        g
    }

    /// Whether blocks `from..to` share a backing block with the destage in flight (a backing
    /// write there now could be overwritten by its read-modify-write).
    pub(crate) fn backing_busy(&self, st: &WState, from: u64, to: u64) -> bool {
        let spb = self.sectors_per_backing_block();
        st.destaging
            .is_some_and(|(lo, hi)| from / spb < hi && lo < to.div_ceil(spb))
    }

    /// Destage `n` victims of the policy (with their neighbours when dm-writecache's triggers
    /// are on), once no other destage is in flight.
    pub(crate) fn destage_victims<'a>(
        &'a self,
        g: Guard<'a>,
        n: usize,
        why: Trigger,
    ) -> Result<Guard<'a>> {
        let mut g = self.wait_destage(g);
        let lbas = self.pick_victims(&mut g, n);
        self.destage(g, &lbas, why)
    }

    /// `n` victims of the policy and (dm-writecache's triggers on) their cached contiguous
    /// neighbours, sorted. Victims are distinct blocks (a block's one current copy is in the
    /// order once), so runs of them are extended at their edges only: a sequential workload
    /// probes the index twice per run, not once per block and side.
    fn pick_victims(&self, st: &mut WState, n: usize) -> Vec<u64> {
        let mut lbas = Vec::with_capacity(n);
        let mut picked = Vec::with_capacity(n);
        for _ in 0..n {
            let Some(slot) = st.order.victim() else { break };
            // Out of the order while picking, so that the next pick is another block.
            st.order.remove(slot);
            picked.push(slot);
            lbas.push(st.slots[slot as usize].expect("a victim is used").lba);
        }
        // Back in, so that clearing each slot removes it once.
        for slot in picked {
            st.order.inserted(slot);
        }
        lbas.sort_unstable();
        debug_assert!(lbas.windows(2).all(|w| w[0] < w[1]), "victims are distinct");
        if st.settings.dm_triggers() {
            let extra = neighbours(st, &lbas);
            lbas.extend_from_slice(&extra);
            lbas.sort_unstable();
        }
        debug_assert!(lbas.windows(2).all(|w| w[0] < w[1]), "each block once");
        lbas
    }

    /// Write `lbas` (cached, sorted) back in groups of `writeback_jobs`: each group copied out,
    /// written in runs and the backing device flushed without the lock, then the slots still
    /// holding the copies written cleared. Returns the lock (held again).
    pub(crate) fn destage<'a>(
        &'a self,
        g: Guard<'a>,
        lbas: &[u64],
        why: Trigger,
    ) -> Result<Guard<'a>> {
        self.destage_with(g, lbas, why, None)
    }

    /// `destage`, running `during` (once) once the first group is chosen, lock free: before
    /// its copies are read, written back and cleared.
    fn destage_with<'a>(
        &'a self,
        g: Guard<'a>,
        lbas: &[u64],
        why: Trigger,
        mut during: Option<&mut dyn FnMut() -> Result<()>>,
    ) -> Result<Guard<'a>> {
        let mut g = self.wait_destage(g);
        let (Some(&first), Some(&last)) = (lbas.first(), lbas.last()) else {
            return Ok(g);
        };
        let spb = self.sectors_per_backing_block();
        g.destaging = Some((first / spb, last / spb + 1));
        let jobs = match g.settings.writeback_jobs {
            0 => lbas.len(),
            j => j as usize,
        };
        if g.background && during.is_none() && lbas.len() > jobs {
            return self.destage_pipelined(g, lbas, jobs, why);
        }
        for group in groups(lbas, jobs, spb) {
            let mut pass = self.choose(&mut g, group);
            drop(g);
            // The hook runs in the window where the chosen copies are out of the lock: before
            // they are read from their slots, written back and cleared.
            let hook = during.take().map_or(Ok(()), |f| f());
            let done = self.unlocked(&mut pass);
            g = self.lock_for_destage();
            let cleared = self.cleared(&mut g, pass, done, why).and(hook);
            if cleared.is_err() {
                self.end_destage(&mut g);
                return cleared.map(|_| g);
            }
        }
        self.end_destage(&mut g);
        self.assert_invariants(&g);
        Ok(g)
    }

    /// The destage thread's `destage` of several groups: each group's backing write and
    /// flush run on a scoped thread while this one clears the group before it and copies out
    /// the next (the per-group order is `destage`'s: copy out, write and flush, clear; the
    /// backing writes stay one group at a time, in order, since adjacent groups may share an
    /// edge backing block).
    fn destage_pipelined<'a>(
        &'a self,
        g: Guard<'a>,
        lbas: &[u64],
        jobs: usize,
        why: Trigger,
    ) -> Result<Guard<'a>> {
        let (mut g, done) = std::thread::scope(|sc| {
            let mut g = g;
            let mut in_flight: Option<std::thread::ScopedJoinHandle<'_, _>> = None;
            for group in groups(lbas, jobs, self.sectors_per_backing_block()) {
                let mut pass = self.choose(&mut g, group);
                drop(g);
                // Copied out here, while the group before is written.
                let copied = self.copy_pass(&mut pass);
                let before = in_flight
                    .take()
                    .map(|h| h.join().expect("the destage's backing I/O does not panic"));
                in_flight = Some(sc.spawn(move || {
                    let r =
                        copied.and_then(|()| self.write_pass(&mut pass).map_err(Failed::Backing));
                    (pass, r)
                }));
                g = self.lock_for_destage();
                if let Some((pass, r)) = before {
                    if let Err(e) = self.cleared(&mut g, pass, r, why) {
                        return (g, Err(e));
                    }
                }
            }
            drop(g);
            let last = in_flight.map(|h| h.join().expect("the destage's backing I/O"));
            g = self.lock_for_destage();
            let done = match last {
                Some((pass, r)) => self.cleared(&mut g, pass, r, why),
                None => Ok(()),
            };
            (g, done)
        });
        self.end_destage(&mut g);
        done.map(|()| g)
    }

    /// A group's work without the lock ended: its slots unpinned, then its clears (or the
    /// error: a backing device's puts the cache in its error state).
    fn cleared(
        &self,
        st: &mut WState,
        pass: Pass,
        done: std::result::Result<(), Failed>,
        why: Trigger,
    ) -> Result<()> {
        self.unpin(st, &pass);
        match done {
            Err(Failed::Backing(e)) => return Err(self.backing_failed(st, e)),
            Err(Failed::Damaged(e)) => return Err(e),
            Ok(()) => {}
        }
        self.clear_pass(st, pass, why)?;
        self.changed.notify_all();
        Ok(())
    }

    fn end_destage(&self, st: &mut WState) {
        st.destaging = None;
        self.changed.notify_all();
    }

    /// Under the lock: the group's blocks still cached, chosen into runs of contiguous
    /// blocks, each with a buffer; their slots pinned (a copy replaced meanwhile frees its slot
    /// only when the pass is done, so the slot's data stays the copy chosen).
    fn choose(&self, st: &mut WState, group: &[u64]) -> Pass {
        let run_max = RUN_BYTES_MAX / self.sb.sector_bytes as usize;
        let spb = self.sectors_per_backing_block();
        let mut pass = Pass {
            runs: Vec::new(),
            bypassed_at_choice: st.stats.write_bypass,
            lbas: Vec::with_capacity(group.len()),
            data_sectors: 0,
        };
        assert!(
            group.windows(2).all(|w| w[0] < w[1]),
            "a destage's blocks are sorted, each once"
        );
        // Each block's slot, found once (the index is probed for nothing else here).
        let cached: Vec<(u64, u32)> = group
            .iter()
            .filter_map(|&l| st.index.get(&l).map(|&slot| (l, slot)))
            .collect();
        let mut i = 0;
        while i < cached.len() {
            let mut j = i + 1;
            while j < cached.len() && cached[j].0 == cached[j - 1].0 + 1 && j - i < run_max {
                j += 1;
            }
            // A long run is cut where a backing block starts, so that the next one needs no
            // edge read (a synchronous read of the backing device, for sectors it holds).
            if j - i == run_max && j < cached.len() && cached[j].0 == cached[j - 1].0 + 1 {
                let over = (cached[j].0 % spb) as usize;
                if over < j - i {
                    j -= over;
                }
            }
            let run = self.choose_run(st, &cached[i..j], &mut pass);
            pass.runs.push(run);
            i = j;
        }
        pass
    }

    /// One run of contiguous blocks: its copies pinned, a buffer of whole backing blocks.
    fn choose_run(&self, st: &mut WState, lbas: &[(u64, u32)], pass: &mut Pass) -> Run {
        let spb = self.sectors_per_backing_block();
        let (lba, end) = (lbas[0].0, lbas[lbas.len() - 1].0 + 1);
        assert_eq!(end - lba, lbas.len() as u64, "a run is contiguous");
        let blocks = end.div_ceil(spb) - lba / spb;
        let len_bytes = blocks as usize * self.sb.backing_block_bytes as usize;
        // A buffer of the pool (no page to fault in or zero again): every byte of the window
        // is written before the backing write, by a copy, a tombstone's zeros or an edge read.
        let buf = st
            .run_bufs
            .pop()
            .unwrap_or_else(|| vec![0u8; RUN_BUF_BYTES]);
        let at = buf
            .as_ptr()
            .align_offset(crate::write::BACKING_BLOCK_BYTES as usize);
        assert!(at + len_bytes <= buf.len(), "a run fits its buffer");
        let mut copies = Vec::with_capacity(lbas.len());
        for &(l, slot) in lbas {
            let c = st.slots[slot as usize].expect("a cached block's slot is used");
            debug_assert_eq!(c.lba, l, "the index names the block's slot");
            debug_assert!(!st.pinned[slot as usize], "one pass pins a slot");
            st.pinned[slot as usize] = true;
            copies.push((slot, c));
            pass.lbas.push(l);
            pass.data_sectors += u64::from(!c.tombstone);
        }
        Run {
            lba,
            copies,
            buf,
            at,
            len_bytes,
        }
    }

    /// Under the lock again: the pass's slots unpinned, and the slots freed while pinned
    /// (their copies replaced meanwhile) free from now on.
    fn unpin(&self, st: &mut WState, pass: &Pass) {
        for &(slot, _) in pass.runs.iter().flat_map(|r| &r.copies) {
            debug_assert!(st.pinned[slot as usize]);
            st.pinned[slot as usize] = false;
        }
        let WState {
            held, free, pinned, ..
        } = st;
        held.retain(|&slot| {
            let still = pinned[slot as usize];
            if !still {
                free.push(slot);
            }
            still
        });
    }

    /// Without the lock: the pass copied out (`copy_pass`), then written.
    fn unlocked(&self, pass: &mut Pass) -> std::result::Result<(), Failed> {
        self.copy_pass(pass)?;
        self.write_pass(pass).map_err(Failed::Backing)
    }

    /// Without the lock: the pass's copies read from their pinned slots into the runs'
    /// buffers, each checked against its entry's CRC (damaged data is never written back); a
    /// tombstone is zeros.
    fn copy_pass(&self, pass: &mut Pass) -> std::result::Result<(), Failed> {
        let s = self.sb.sector_bytes as usize;
        let spb = self.sectors_per_backing_block();
        for run in &mut pass.runs {
            let base = run.lba / spb * spb;
            for (slot, c) in &run.copies {
                let o = run.at + (c.lba - base) as usize * s;
                let into = &mut run.buf[o..o + s];
                if c.tombstone {
                    into.fill(0);
                } else {
                    self.read_slot_data(c, *slot, into)
                        .map_err(Failed::Damaged)?;
                }
            }
        }
        Ok(())
    }

    /// Without the cache's lock: each run's edge backing blocks completed from the device (the
    /// sectors outside the run rewritten with the bytes they hold), the run written in one
    /// write, then the device flushed.
    fn write_pass(&self, pass: &mut Pass) -> Result<()> {
        let s = self.sb.sector_bytes as usize;
        let spb = self.sectors_per_backing_block();
        let bb = self.sb.backing_block_bytes as usize;
        for run in &mut pass.runs {
            let first_blk = run.lba / spb;
            let end = run.lba + run.copies.len() as u64;
            let last_blk = (end - 1) / spb;
            let head = (run.lba % spb) as usize * s;
            let tail = (end - last_blk * spb) as usize * s;
            let window = &mut run.buf[run.at..run.at + run.len_bytes];
            let mut edge = [0u8; crate::write::BACKING_BLOCK_BYTES as usize];
            if head > 0 {
                self.backing.read(first_blk, &mut edge[..bb])?;
                window[..head].copy_from_slice(&edge[..head]);
            }
            if tail < bb {
                if last_blk != first_blk || head == 0 {
                    self.backing.read(last_blk, &mut edge[..bb])?;
                }
                let o = (last_blk - first_blk) as usize * bb;
                window[o + tail..o + bb].copy_from_slice(&edge[tail..bb]);
            }
            self.backing.write(first_blk, window)?;
        }
        // Seeded bug freed-before-backing-flush: the flush comes after the clears.
        if self.bug != Some(Bug::FreedBeforeBackingFlush) {
            self.backing.flush()?;
        }
        Ok(())
    }

    /// Under the lock again: the clears of replaced copies fenced first (an older copy's clear
    /// is durable before a newer copy's), then each slot cleared that still holds the copy
    /// written. A block rewritten during the write keeps its new copy (its slot is not that
    /// one, or holds a later sequence number).
    fn clear_pass(&self, st: &mut WState, pass: Pass, why: Trigger) -> Result<()> {
        if !st.pending_clears.is_empty() && self.bug != Some(Bug::StaleClearUnfenced) {
            self.store_pending_clears(st);
            self.fence(st);
        }
        for &(slot, copy) in pass.runs.iter().flat_map(|r| &r.copies) {
            let (lba, seq) = (copy.lba, copy.seq);
            let same = st.slots[slot as usize].is_some_and(|c| c.seq == seq && c.lba == lba);
            if same {
                self.clear_slot(st, slot);
            } else if self.bug == Some(Bug::DestageClearsRewritten) {
                let now = st.index[&lba];
                self.clear_slot(st, now); // Seeded bug: the newer copy cleared
            }
        }
        if self.bug == Some(Bug::FreedBeforeBackingFlush) {
            self.fence(st); // Seeded bug: freed, then flushed
            self.backing
                .flush()
                .map_err(|e| self.backing_failed(st, e))?;
        }
        // A bypassed write made during the backing I/O may not be covered by its flush.
        if st.stats.write_bypass == pass.bypassed_at_choice {
            st.bypass_unflushed = false;
        }
        st.stats.backing_bytes_written += pass.data_sectors * u64::from(self.sb.sector_bytes);
        if let Some(log) = st.destage_log.as_mut() {
            log.extend_from_slice(&pass.lbas);
        }
        self.count(st, why, pass.lbas.len() as u64);
        for run in pass.runs {
            if st.run_bufs.len() < RUN_BUFS_KEPT {
                st.run_bufs.push(run.buf);
            }
        }
        Ok(())
    }

    fn count(&self, st: &mut WState, why: Trigger, n: u64) {
        let c = &mut st.stats;
        match why {
            Trigger::Room => c.destaged_room += n,
            Trigger::Watermark => c.destaged_watermark += n,
            Trigger::MaxAge => c.destaged_max_age += n,
            Trigger::Cleaner => c.destaged_cleaner += n,
            Trigger::Writeback => c.destaged_writeback += n,
        }
    }

    /// Destage every cached block.
    pub(crate) fn destage_all<'a>(&'a self, g: Guard<'a>, why: Trigger) -> Result<Guard<'a>> {
        let g = self.wait_destage(g);
        let mut lbas: Vec<u64> = g.index.keys().copied().collect();
        lbas.sort_unstable();
        self.destage(g, &lbas, why)
    }

    /// Whether used slots are above the high watermark (false when it is off).
    pub(crate) fn above_high(&self, st: &WState) -> bool {
        let h = usize::from(st.settings.high_watermark_pct);
        h > 0 && st.index.len() * 100 > self.layout.slots as usize * h
    }

    /// Destage victims until used slots are at most the low watermark.
    pub(crate) fn destage_to_low<'a>(&'a self, mut g: Guard<'a>) -> Result<Guard<'a>> {
        let low = self.layout.slots as usize * usize::from(g.settings.low_watermark_pct) / 100;
        while g.index.len() > low && g.error.is_none() {
            let before = g.index.len();
            g = self.destage_victims(g, before - low, Trigger::Watermark)?;
            // Writes go on during the backing I/O: when they kept pace with the pass, the
            // next write past the high watermark starts another.
            if g.index.len() >= before {
                break;
            }
        }
        Ok(g)
    }

    /// After a write: the watermarks (a destage thread, when one runs, is woken instead),
    /// max-age and the cleaner.
    pub(crate) fn after_write<'a>(&'a self, mut g: Guard<'a>) -> Result<()> {
        if self.above_high(&g) {
            if g.background {
                self.wake_destager(&mut g);
            } else {
                g = self.destage_to_low(g)?;
            }
        }
        // The clock is read only when a timed trigger is on (a write reads none otherwise).
        let s = g.settings;
        if s.cleaner || s.max_age_ms > 0 {
            drop(self.timed(g, Instant::now())?);
        }
        Ok(())
    }

    /// The timed triggers due at `now`: max-age and the cleaner.
    fn timed<'a>(&'a self, g: Guard<'a>, now: Instant) -> Result<Guard<'a>> {
        if g.settings.cleaner && !g.index.is_empty() {
            return self.destage_all(g, Trigger::Cleaner);
        }
        let age = g.settings.max_age_ms;
        if age == 0 {
            return Ok(g);
        }
        let limit = Duration::from_millis(u64::from(age));
        let mut old: Vec<u64> = g
            .slots
            .iter()
            .flatten()
            .filter(|c| now.duration_since(c.written_at) >= limit)
            .map(|c| c.lba)
            .collect();
        old.sort_unstable();
        self.destage(g, &old, Trigger::MaxAge)
    }

    /// Act on the timed triggers (a timer thread calls this); a cache in its error state does
    /// nothing.
    pub fn tick(&self, now: Instant) -> Result<()> {
        let g = self.lock();
        if g.error.is_some() {
            return Ok(());
        }
        self.timed(g, now).map(drop)
    }

    /// How often a timer thread should call `tick` (None: no timed trigger is on).
    pub fn tick_period(&self) -> Option<Duration> {
        let s = self.settings();
        match (s.cleaner, s.max_age_ms) {
            (true, _) => Some(Duration::from_millis(100)),
            (false, 0) => None,
            (false, a) => Some(Duration::from_millis(u64::from(a / 4).max(1))),
        }
    }

    /// dm-writecache's `flush` message: write every cached block back (the cache empties).
    pub fn writeback(&self) -> Result<u64> {
        let g = self.lock();
        self.writable(&g)?;
        let g = self.wait_destage(g);
        let n = g.index.len() as u64;
        let mut g = self.destage_all(g, Trigger::Writeback)?;
        self.fence(&mut g);
        Ok(n)
    }

    /// `writeback`, running `during` once the first group is chosen, with the cache's lock
    /// free (before its copies are read from their slots, written back and cleared): the crash
    /// checker rewrites a block being destaged there, and a test reuses the slot it frees.
    pub fn writeback_during(&self, during: &mut dyn FnMut() -> Result<()>) -> Result<u64> {
        let g = self.lock();
        self.writable(&g)?;
        let g = self.wait_destage(g);
        let n = g.index.len() as u64;
        let mut lbas: Vec<u64> = g.index.keys().copied().collect();
        lbas.sort_unstable();
        let mut g = self.destage_with(g, &lbas, Trigger::Writeback, Some(during))?;
        self.fence(&mut g);
        Ok(n)
    }

    /// Write everything back, then label the backing device detached: it alone is the whole
    /// state from now on.
    pub fn detach(&self) -> Result<u64> {
        let n = self.writeback()?;
        let label = crate::common::format::Label {
            identity: self.sb.identity,
            blocks: self.sb.backing_blocks,
            detached: true,
        };
        self.backing
            .write(self.sb.backing_blocks, &label.encode())?;
        self.backing.flush()?;
        Ok(n)
    }
}

/// `lbas` (sorted) in groups of about `jobs` blocks, each cut where a backing block starts
/// (or where the blocks are not contiguous): adjacent groups then share no backing block
/// unless it is only partly cached, and no run needs an edge read for blocks of the group
/// before it (at most `spb - 1` blocks more per group).
fn groups(lbas: &[u64], jobs: usize, spb: u64) -> impl Iterator<Item = &[u64]> {
    assert!(jobs > 0 && spb > 0);
    let mut rest = lbas;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = jobs.min(rest.len());
        while end < rest.len() && !rest[end].is_multiple_of(spb) && rest[end] == rest[end - 1] + 1 {
            end += 1;
        }
        let (group, after) = rest.split_at(end);
        rest = after;
        Some(group)
    })
}

/// The cached blocks contiguous with the runs of `lbas` (sorted, distinct), at most
/// `NEIGHBOURS_MAX` on each side of a run, never into the next run, each block once.
fn neighbours(st: &WState, lbas: &[u64]) -> Vec<u64> {
    let mut out = Vec::new();
    // The first block no run has reached yet: a run's down-walk stops where the run before
    // it walked up to, so no block is taken twice.
    let mut floor = 0;
    let mut i = 0;
    while i < lbas.len() {
        let mut j = i + 1;
        while j < lbas.len() && lbas[j] == lbas[j - 1] + 1 {
            j += 1;
        }
        let (first, last) = (lbas[i], lbas[j - 1]);
        let ceiling = lbas.get(j).copied().unwrap_or(u64::MAX);
        let mut down = first;
        while down > floor && first - down < NEIGHBOURS_MAX && st.index.contains_key(&(down - 1)) {
            down -= 1;
            out.push(down);
        }
        let mut up = last + 1;
        while up < ceiling && up - last <= NEIGHBOURS_MAX && st.index.contains_key(&up) {
            out.push(up);
            up += 1;
        }
        floor = up;
        i = j;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::groups;

    #[test]
    fn groups_are_cut_where_a_backing_block_starts_or_the_blocks_part() {
        let lbas: Vec<u64> = (3..30).chain(40..43).chain([50]).collect();
        let cut: Vec<&[u64]> = groups(&lbas, 4, 8).collect();
        // 3..7 would end inside backing block 0: the group runs on to block 8; likewise a
        // group of 4 from 8 runs on to 16.
        let upto = |a: u64, b: u64| (a..b).collect::<Vec<_>>();
        assert_eq!(cut[0], &upto(3, 8)[..]);
        assert_eq!(cut[1], &upto(8, 16)[..]);
        assert_eq!(cut[2], &upto(16, 24)[..]);
        assert_eq!(cut[3], &upto(24, 30)[..], "cut where the blocks part");
        assert_eq!(cut[4], &[40, 41, 42, 50][..], "apart blocks need no cut");
        assert_eq!(cut.concat(), lbas, "every block once, in order");
        // Sectors the size of a backing block: plain chunks.
        let plain: Vec<&[u64]> = groups(&lbas, 4, 1).collect();
        assert!(plain
            .iter()
            .all(|g| g.len() == 4 || g.len() == lbas.len() % 4));
    }
}
