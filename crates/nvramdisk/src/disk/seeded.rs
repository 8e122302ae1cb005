//! The seeded bugs' deviations from the write path (bugs.rs has the catalogue): each a
//! deliberate protocol mistake that the crash checker must catch. They live here, out of the
//! write path's way; the write path reaches them through one branch on `self.bug`, and each
//! deviation is marked `// Seeded bug NAME:`. (Recovery's and the classifier's deviations are
//! marked the same way in recover.rs and slot.rs.)

use super::{lock, Lane, NvramDisk};
use crate::bugs::SeededBug;
use crate::entry::Entry;
use crate::hooks::{Phase, Step};
use crate::layout::Protocol;
use nvstack_core::error::Result;
use nvstack_pmem::{CommitDomain, Method, Region};

impl<R: Region> NvramDisk<R> {
    /// The Data step of the seeded bugs that change it. Ok(true): done here, without the
    /// step's commit (so without its Persisted event); Ok(false): the normal step runs (on
    /// `pages`, which a bug may have changed).
    #[cold]
    #[inline(never)]
    pub(super) fn seeded_data_step(
        &self,
        lane: &mut Lane,
        lbas: &[u64],
        data: &[u8],
        pages: &mut [u32],
    ) -> Result<bool> {
        let region = &*self.region;
        let block_bytes = self.geo.block_bytes as usize;
        let fast = self.sb.protocol == Protocol::Fast;
        if self.seeded(SeededBug::FastWriteInPlace) && fast {
            // Seeded bug fast-write-in-place: a mapped block gets its current page as its
            // "shadow" page (the one taken for it goes back to the free list unused), so the
            // Data step overwrites the only copy of the old contents; the map entry is still
            // updated (generation + 1, same page). Unmapped blocks keep their shadow page.
            for (page, &lba) in pages.iter_mut().zip(lbas) {
                let raw = region.load_u64(self.geo.map_entry_off(lba));
                if let Ok(Entry {
                    vpn: Some(current), ..
                }) = Entry::decode(lba, raw)
                {
                    if (current as u64) < self.geo.pages {
                        lock(&self.free).push(*page);
                        *page = current;
                    }
                }
            }
            return Ok(false);
        }
        let unflushed = match self.bug {
            Some(SeededBug::FastNoDataFence) if fast => false,
            Some(SeededBug::PaperNoDataFence) if !fast => true,
            _ => return Ok(false),
        };
        for (i, &lba) in lbas.iter().enumerate() {
            let offset = self.geo.page_off(pages[i]);
            let source = &data[i * block_bytes..(i + 1) * block_bytes];
            if unflushed {
                // Seeded bug paper-no-data-fence: plain cached stores that the lane's domain
                // never hears of, so no commit ever flushes them: the shadow page is not
                // persisted before the journal (nor after). Dropping only the data commit
                // would be harmless: the VPN step's commit, which comes before anything
                // names the page, would persist the data.
                region.write(offset, source);
            } else {
                // Seeded bug fast-no-data-fence: stored as usual but not committed, so the
                // data is still pending when the map store is issued.
                lane.domain
                    .store(region, self.ordering.data, offset, source);
            }
            self.signal(Step::Data, Phase::Stored, offset, block_bytes as u64, lba)?;
        }
        Ok(true)
    }

    /// The paper single-block steps under a seeded bug: `steps` is the correct sequence
    /// (VPN, L1, L2, Map, ResetL1, ResetL2); the bug reorders it or drops commits. A
    /// Persisted event fires only where a commit ran, named after the step it follows.
    pub(super) fn paper_steps_seeded(
        &self,
        d: &mut CommitDomain,
        lba: u64,
        steps: &[(Step, Method, u64, u64); 6],
    ) -> Result<()> {
        let r = &*self.region;
        const ALL: [bool; 6] = [true; 6];
        let (order, commit): ([usize; 6], [bool; 6]) = match self.bug {
            // Seeded bug paper-replicas-one-step: L1, L2 and the map entry stored with no
            // commit between them, one commit after all three.
            Some(SeededBug::PaperReplicasOneStep) => {
                ([0, 1, 2, 3, 4, 5], [true, false, false, true, true, true])
            }
            // Seeded bug paper-map-before-journal: the map entry first (persisted), then VPN,
            // L1, L2 (each persisted), then the resets.
            Some(SeededBug::PaperMapBeforeJournal) => ([3, 0, 1, 2, 4, 5], ALL),
            // Seeded bug paper-no-reset-fence: the resets are stored, never committed.
            Some(SeededBug::PaperNoResetFence) => {
                ([0, 1, 2, 3, 4, 5], [true, true, true, true, false, false])
            }
            _ => ([0, 1, 2, 3, 4, 5], ALL),
        };
        for i in order {
            let (step, method, off, v) = steps[i];
            d.store_u64(r, method, off, v);
            self.signal(step, Phase::Stored, off, 8, lba)?;
            if commit[i] {
                d.commit(r);
                self.signal(step, Phase::Persisted, off, 8, lba)?;
            }
        }
        Ok(())
    }

    /// [`NvramDisk::give_back`] under a seeded bug. Seeded bug fast-write-in-place: a page
    /// written in place is still mapped, so it does not go back.
    #[cold]
    pub(super) fn give_back_seeded(&self, lbas: &[u64], pages: &[u32]) {
        let region = &*self.region;
        for (&page, &lba) in pages.iter().zip(lbas) {
            let mapped = Entry::decode(lba, region.load_u64(self.geo.map_entry_off(lba)))
                .is_ok_and(|entry| entry.vpn == Some(page));
            if !mapped {
                lock(&self.free).push(page);
            }
        }
    }
}
