//! Destaging: the write cache's dirty blocks written back to the backing device, by trigger.
//! The seed's trigger (a new block finds no free slot: destage one) is always on;
//! dm-writecache's (watermarks, max-age, cleaner) are options, and with any of them on a
//! destaged block takes its cached contiguous neighbours along. `writeback_jobs` bounds the
//! blocks written between two backing flushes.

use crate::wbugs::WcBug;
use crate::writecache::{WState, WriteCache};
use nvstack_core::error::Result;
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

impl<R: Region> WriteCache<R> {
    /// Destage `n` victims of the policy (with their neighbours when dm-writecache's triggers
    /// are on).
    pub(crate) fn destage_victims(&self, st: &mut WState, n: usize, why: Trigger) -> Result<()> {
        let mut lbas = Vec::new();
        let mut picked = Vec::new();
        for _ in 0..n {
            let Some(slot) = st.order.victim() else { break };
            // Out of the order while picking, so that the next pick is another block.
            st.order.remove(slot);
            picked.push(slot);
            let lba = st.slots[slot as usize].expect("a victim is used").lba;
            if !lbas.contains(&lba) {
                lbas.push(lba);
            }
            if st.settings.dm_triggers() {
                self.neighbours(st, lba, &mut lbas);
            }
        }
        // Back in, so that clearing each slot removes it once.
        for slot in picked {
            st.order.inserted(slot);
        }
        lbas.sort_unstable();
        self.destage(st, &lbas, why)
    }

    /// Cached contiguous neighbours of `lba`, on both sides.
    fn neighbours(&self, st: &mut WState, lba: u64, out: &mut Vec<u64>) {
        let mut up = lba + 1;
        while up <= lba + NEIGHBOURS_MAX && st.index.contains_key(&up) && !out.contains(&up) {
            out.push(up);
            up += 1;
        }
        let mut down = lba;
        while down > 0 && lba - down < NEIGHBOURS_MAX {
            down -= 1;
            if !st.index.contains_key(&down) || out.contains(&down) {
                break;
            }
            out.push(down);
        }
    }

    /// Write `lbas` (cached, sorted) back in groups of `writeback_jobs`: each group written,
    /// the backing device flushed, then the group's slots cleared.
    pub(crate) fn destage(&self, st: &mut WState, lbas: &[u64], why: Trigger) -> Result<()> {
        if lbas.is_empty() {
            return Ok(());
        }
        // An older copy's clear must be durable before its newer copy's clear is: the clears
        // the last write left pending are stored and fenced first.
        if !st.pending_clears.is_empty() && self.bug != Some(WcBug::StaleClearUnfenced) {
            self.store_pending_clears(st);
            self.fence(st);
        }
        let jobs = match st.settings.writeback_jobs {
            0 => lbas.len(),
            j => j as usize,
        };
        let mut block = [0u8; crate::writecache::BACKING_BLOCK_BYTES as usize];
        let buf = &mut block[..self.sb.sector_bytes as usize];
        for group in lbas.chunks(jobs) {
            for &lba in group {
                let slot = st.index[&lba];
                let c = st.slots[slot as usize].expect("a cached block's slot is used");
                if c.tombstone {
                    self.backing_write_sector(st, lba, None)?;
                } else {
                    self.read_slot_data(&c, slot, buf)?;
                    self.backing_write_sector(st, lba, Some(buf))?;
                }
            }
            if self.bug == Some(WcBug::FreedBeforeBackingFlush) {
                for &lba in group {
                    let slot = st.index[&lba];
                    self.clear_slot(st, slot); // Seeded bug: freed before the flush
                }
                self.fence(st);
            }
            self.backing
                .flush()
                .map_err(|e| self.backing_failed(st, e))?;
            st.bypass_unflushed = false;
            if self.bug != Some(WcBug::FreedBeforeBackingFlush) {
                for &lba in group {
                    let slot = st.index[&lba];
                    self.clear_slot(st, slot);
                }
            }
            if let Some(log) = st.destage_log.as_mut() {
                log.extend_from_slice(group);
            }
            self.count(st, why, group.len() as u64);
        }
        self.assert_invariants(st);
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
    pub(crate) fn destage_all(&self, st: &mut WState, why: Trigger) -> Result<()> {
        let mut lbas: Vec<u64> = st.index.keys().copied().collect();
        lbas.sort_unstable();
        self.destage(st, &lbas, why)
    }

    /// After a write: the watermarks, max-age and the cleaner.
    pub(crate) fn after_write(&self, st: &mut WState) -> Result<()> {
        let s = st.settings;
        if s.high_watermark_pct > 0 {
            let slots = self.layout.slots as usize;
            let used = st.index.len();
            if used * 100 > slots * usize::from(s.high_watermark_pct) {
                let low = slots * usize::from(s.low_watermark_pct) / 100;
                while st.index.len() > low {
                    let before = st.index.len();
                    self.destage_victims(st, st.index.len() - low, Trigger::Watermark)?;
                    assert!(st.index.len() < before, "a destage frees a block");
                }
            }
        }
        // The clock is read only when a timed trigger is on (a write reads none otherwise).
        if s.cleaner || s.max_age_ms > 0 {
            return self.timed(st, Instant::now());
        }
        Ok(())
    }

    /// The timed triggers due at `now`: max-age and the cleaner.
    fn timed(&self, st: &mut WState, now: Instant) -> Result<()> {
        if st.settings.cleaner && !st.index.is_empty() {
            return self.destage_all(st, Trigger::Cleaner);
        }
        let age = st.settings.max_age_ms;
        if age == 0 {
            return Ok(());
        }
        let limit = Duration::from_millis(u64::from(age));
        let mut old: Vec<u64> = st
            .slots
            .iter()
            .flatten()
            .filter(|c| now.duration_since(c.written_at) >= limit)
            .map(|c| c.lba)
            .collect();
        old.sort_unstable();
        self.destage(st, &old, Trigger::MaxAge)
    }

    /// Act on the timed triggers (a timer thread calls this); a cache in its error state does
    /// nothing.
    pub fn tick(&self, now: Instant) -> Result<()> {
        let mut st = self.lock();
        if st.error.is_some() {
            return Ok(());
        }
        self.timed(&mut st, now)
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
        let mut st = self.lock();
        self.writable(&st)?;
        let n = st.index.len() as u64;
        self.destage_all(&mut st, Trigger::Writeback)?;
        self.fence(&mut st);
        Ok(n)
    }

    /// Write everything back, then label the backing device detached: it alone is the whole
    /// state from now on.
    pub fn detach(&self) -> Result<u64> {
        let n = self.writeback()?;
        let label = crate::format::Label {
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
