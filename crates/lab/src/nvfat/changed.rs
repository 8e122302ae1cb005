//! The changed-sector view (`sync-changed` runs): Sync-PostMark as a file system that writes
//! only the sectors whose bytes it changed, as the seed's in-kernel VFAT did (Linux writes back
//! dirty 512-byte buffer heads: the FAT sectors whose entries changed, in every FAT copy, and
//! the directory sectors changed), where fusefat rewrites both FATs whole at every FAT update
//! (docs/nvfat.md section 4).
//!
//! Derived once, before the replays, from the recording alone: a shadow of the volume as the
//! driver sees it (the image the recording started from, every write applied in trace order)
//! says, for each sector a write request carries, whether its bytes differ from the volume's
//! bytes at that point of the trace. A request keeps only its runs of changed sectors (a
//! partly changed multi-sector request is split into them, in order); a request with nothing
//! changed is dropped and costs no device time, but the host time before it stays (the trace's
//! gap, spent by fusefat computing the unchanged sectors: conservative, a driver that knew they
//! were clean would not have spent it). Reads, flushes and discards are the trace's.
//!
//! Dropping a sector whose bytes equal the volume's leaves every later state of the volume the
//! same, so the write cache's FAT classification and the independent counter see the same
//! volume in both runs. The dropped sectors' kinds are counted by the independent counter
//! (`fatcount.rs`, on its own copy of the volume, in the raw run that checks the admission).

use super::input::{Input, SECTOR_BYTES};
use nvstack_sim::trace::nvstack::DeviceOp;

/// A run of changed sectors inside one write request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SectorRun {
    /// Sectors from the request's first.
    pub offset: u32,
    pub sectors: u32,
}

/// What the pre-pass found (its own counts; the kinds come from the independent counter).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ChangedStats {
    pub write_requests: u64,
    /// Requests with no changed sector: no device time in the view.
    pub requests_unchanged: u64,
    /// Requests of which only some sectors changed (written as their changed runs).
    pub requests_partly_changed: u64,
    /// Write requests the view makes (the changed runs).
    pub runs: u64,
    pub sectors_written: u64,
    pub sectors_changed: u64,
    pub sectors_dropped: u64,
}

/// Every write request's changed runs, in trace order.
pub struct Changed {
    /// Request `w`'s runs are `runs[first[w]..first[w + 1]]`.
    first: Vec<u32>,
    runs: Vec<SectorRun>,
    pub stats: ChangedStats,
}

/// The runs of sectors of `bytes` (at `lba`) that differ from `shadow`, which takes them.
fn changed_runs(shadow: &mut [u8], lba: u64, bytes: &[u8], out: &mut Vec<SectorRun>) {
    let s = SECTOR_BYTES as usize;
    let base = lba as usize * s;
    let mut open: Option<SectorRun> = None;
    for (i, sector) in bytes.chunks(s).enumerate() {
        let at = base + i * s;
        let differs = shadow[at..at + s] != *sector;
        if differs {
            shadow[at..at + s].copy_from_slice(sector);
            match open.as_mut() {
                Some(r) => r.sectors += 1,
                None => {
                    open = Some(SectorRun {
                        offset: i as u32,
                        sectors: 1,
                    })
                }
            }
        } else if let Some(r) = open.take() {
            out.push(r);
        }
    }
    out.extend(open);
}

impl Changed {
    /// The view of a recording (one pass over its writes, against a shadow of the volume).
    pub fn derive(input: &Input) -> Changed {
        let mut shadow = input.image.clone();
        let mut first = Vec::with_capacity(input.counts.writes as usize + 1);
        let mut runs = Vec::new();
        let mut st = ChangedStats::default();
        for ev in input.events.iter().filter(|e| e.op == DeviceOp::Write) {
            first.push(runs.len() as u32);
            let at = ev.data_off as usize;
            let bytes = &input.data[at..at + (ev.blocks * SECTOR_BYTES) as usize];
            let before = runs.len();
            changed_runs(&mut shadow, ev.lba, bytes, &mut runs);
            let made = &runs[before..];
            let changed: u64 = made.iter().map(|r| u64::from(r.sectors)).sum();
            st.write_requests += 1;
            st.requests_unchanged += u64::from(made.is_empty());
            st.requests_partly_changed += u64::from(changed > 0 && changed < ev.blocks);
            st.runs += made.len() as u64;
            st.sectors_written += ev.blocks;
            st.sectors_changed += changed;
        }
        first.push(runs.len() as u32);
        assert_eq!(first.len() as u64, st.write_requests + 1);
        assert_eq!(runs.len() as u64, st.runs);
        st.sectors_dropped = st.sectors_written - st.sectors_changed;
        Changed {
            first,
            runs,
            stats: st,
        }
    }

    /// The changed runs of the `w`-th write request of the trace (empty: nothing changed).
    pub fn runs(&self, w: usize) -> &[SectorRun] {
        &self.runs[self.first[w] as usize..self.first[w + 1] as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(offset: u32, sectors: u32) -> SectorRun {
        SectorRun { offset, sectors }
    }

    #[test]
    fn only_the_changed_sectors_are_kept_in_runs_and_the_shadow_follows() {
        let s = SECTOR_BYTES as usize;
        let mut shadow = vec![0u8; 8 * s];
        let mut out = Vec::new();
        // Sectors 1..5 written; 2 and 4 change.
        let mut w = vec![0u8; 4 * s];
        w[s] = 1;
        w[3 * s + 7] = 2;
        changed_runs(&mut shadow, 1, &w, &mut out);
        assert_eq!(out, vec![run(1, 1), run(3, 1)]);
        assert_eq!((shadow[2 * s], shadow[4 * s + 7]), (1, 2));
        // The same bytes again: nothing changed.
        out.clear();
        changed_runs(&mut shadow, 1, &w, &mut out);
        assert!(out.is_empty());
        // Every sector changed: one run, the whole request.
        out.clear();
        changed_runs(&mut shadow, 0, &vec![9u8; 3 * s], &mut out);
        assert_eq!(out, vec![run(0, 3)]);
        // The last sectors changed: the run ends with the request.
        out.clear();
        let mut w = vec![9u8; 3 * s];
        w[2 * s] = 5;
        changed_runs(&mut shadow, 0, &w, &mut out);
        assert_eq!(out, vec![run(2, 1)]);
    }
}
