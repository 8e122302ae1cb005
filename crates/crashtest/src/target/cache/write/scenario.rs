//! The write cache's scenarios for the exhaustive tier, and its workload for the randomized
//! tier. A [`Recorder`] runs operations and keeps what the ordered oracle needs: an admitted
//! write is acknowledged when it returns, a bypassed one when the next flush returns (until
//! then it is in flight).

use super::{format_sim, WriteDevice};
use crate::oracle::{Expect, OpRecord};
use crate::target::cache::{read_checked, recorded, start_recording, CacheTrace, Recording};
use crate::target::{Recorded, RunningViolation, Workload};
use nvstack_core::error::Result;
use nvstack_nvcache::write::bugs::Bug;
use nvstack_nvcache::write::format::{Admit, Settings};
use nvstack_pmem::crash::SimRegion;
use std::collections::BTreeMap;

/// The exhaustive tier's scenarios, in the order they run (`--scenario NAME`).
pub const NAMES: [&str; 12] = [
    "write-1",
    "write-8",
    "overwrite",
    "destage-room",
    "watermark",
    "destage-runs",
    "destage-rewrite",
    "bypass",
    "cleaner",
    "discard",
    "discard-long",
    "writeback",
];

/// Runs operations on the write cache and keeps what the oracle expects of them.
pub struct Recorder<'a> {
    r: Recording<'a, WriteDevice>,
    /// Bypassed operations not yet covered by a flush (indices into `r.exp.ops`).
    unflushed: Vec<usize>,
}

impl<'a> Recorder<'a> {
    pub fn new(
        dev: &'a WriteDevice,
        region: &'a SimRegion,
        initial: BTreeMap<u64, Option<u64>>,
        version: u64,
    ) -> Recorder<'a> {
        Recorder {
            r: Recording::new(dev, region, initial, version),
            unflushed: Vec::new(),
        }
    }

    /// Run `f`, which makes `blocks` read as given: the blocks the cache takes are one atomic
    /// operation acknowledged on return, the others one acknowledged at the next flush.
    fn op(
        &mut self,
        name: &'static str,
        blocks: Vec<(u64, Option<u64>)>,
        f: impl FnOnce(&WriteDevice) -> Result<()>,
    ) -> Result<()> {
        let r = &mut self.r;
        let start = r.begin(name);
        let (taken, passed): (Vec<_>, Vec<_>) =
            blocks.iter().copied().partition(|b| r.dev.takes(b.0));
        f(r.dev)?;
        let ack = r.region.event_count();
        r.cur.extend(blocks.iter().copied());
        if !passed.is_empty() {
            self.unflushed.push(r.exp.ops.len());
            r.exp.ops.push(OpRecord {
                blocks: passed,
                atomic: false,
                start,
                ack: usize::MAX,
            });
        }
        r.exp.ops.push(OpRecord {
            blocks: taken,
            atomic: true,
            start,
            ack,
        });
        Ok(())
    }

    /// Write `n` blocks from `lba`, each a new version, as one write.
    pub fn write(&mut self, lba: u64, n: u64) -> Result<()> {
        let (data, blocks) = self.r.new_version(lba, n);
        self.op("write", blocks, |d| d.write_blocks(lba, &data))
    }

    pub fn discard(&mut self, lba: u64, n: u64) -> Result<()> {
        let blocks: Vec<_> = (lba..lba + n).map(|l| (l, None)).collect();
        if n <= u64::from(self.r.dev.unit_blocks()) {
            return self.op("discard", blocks, |d| d.discard_blocks(lba, n));
        }
        // Past the unit a discard is not atomic (as a longer write), and every block of it,
        // taken or not, is durable on return (the backing device is flushed before it).
        let r = &mut self.r;
        let start = r.begin("discard");
        r.dev.discard_blocks(lba, n)?;
        let ack = r.region.event_count();
        r.cur.extend(blocks.iter().copied());
        r.exp.ops.push(OpRecord {
            blocks,
            atomic: false,
            start,
            ack,
        });
        Ok(())
    }

    /// A flush: every bypassed write before it is acknowledged when it returns.
    pub fn flush(&mut self) -> Result<()> {
        self.op("flush", Vec::new(), |d| d.flush_blocks())?;
        let ack = self.r.region.event_count();
        for i in std::mem::take(&mut self.unflushed) {
            debug_assert_eq!(self.r.exp.ops[i].ack, usize::MAX, "acknowledged once");
            self.r.exp.ops[i].ack = ack;
        }
        Ok(())
    }

    pub fn writeback(&mut self) -> Result<()> {
        self.op("writeback", Vec::new(), |d| d.writeback().map(|_| ()))
    }

    /// A write-back during which (its first group chosen, the cache's lock free, before its
    /// copies are read, written back and cleared) block `lba`, being destaged, is written
    /// again: its new copy must stay cached.
    pub fn writeback_rewriting(&mut self, lba: u64) -> Result<()> {
        self.r.begin("writeback");
        let (data, blocks) = self.r.new_version(lba, 1);
        let (dev, region) = (self.r.dev, self.r.region);
        assert!(dev.takes(lba), "the block rewritten is cached");
        let mut write = (0, 0);
        dev.writeback_during(&mut || {
            let at = region.event_count();
            dev.write_blocks(lba, &data)?;
            write = (at, region.event_count());
            Ok(())
        })?;
        assert!(write.1 > write.0, "the write ran during the destage");
        let r = &mut self.r;
        r.marks.push((write.0, "write during the destage"));
        r.marks.push((write.1, "writeback: clears"));
        r.cur.extend(blocks.iter().copied());
        r.exp.ops.push(OpRecord {
            blocks,
            atomic: true,
            start: write.0,
            ack: write.1,
        });
        Ok(())
    }

    pub fn cleaner(&mut self) -> Result<()> {
        self.op("cleaner", Vec::new(), |d| d.set_cleaner(true))
    }

    /// Read `n` blocks and check them against what they should read now.
    pub fn read(&mut self, lba: u64, n: u64) -> Result<()> {
        let want = self.r.reads_now(lba, n);
        read_checked(self.r.dev, &want)?;
        // The blocks read are judged after every crash too.
        for (l, _) in want {
            self.r.exp.initial.entry(l).or_insert(None);
        }
        Ok(())
    }
}

/// A scenario's cache: slots, settings and admission.
fn shape(name: &str) -> (u32, Settings, Admit) {
    let dm = Settings {
        high_watermark_pct: 50,
        low_watermark_pct: 25,
        writeback_jobs: 2,
        ..Settings::default()
    };
    let runs = Settings {
        writeback_jobs: 8,
        ..Settings::default()
    };
    match name {
        "destage-room" => (16, Settings::default(), Admit::All),
        "destage-runs" => (32, runs, Admit::All),
        "watermark" => (16, dm, Admit::All),
        "bypass" | "cleaner" => (16, Settings::default(), Admit::one_range(0..64)),
        _ => (32, Settings::default(), Admit::All),
    }
}

/// Record scenario `index` of NAMES: format, its setup, then its workload from event `start`.
pub fn record(index: usize, bug: Option<Bug>) -> Result<Recorded<CacheTrace>> {
    let name = NAMES[index];
    let (slots, settings, admit) = shape(name);
    let (region, _) = format_sim(slots, 128, settings, &admit)?;
    let (base, dev) = start_recording::<WriteDevice>(&region, bug)?;
    let mut r = Recorder::new(&dev, &region, BTreeMap::new(), 0);
    setup(&mut r, name)?;
    r.flush()?; // the setup's bypassed writes are durable: the workload starts settled
    let start = region.event_count();
    let mut w = Recorder::new(&dev, &region, r.r.cur.clone(), r.r.version);
    workload(&mut w, name)?;
    Ok(recorded(w.r.finish(), dev, &region, base, start))
}

/// Each scenario's setup: the cache's starting state.
fn setup(r: &mut Recorder<'_>, name: &str) -> Result<()> {
    match name {
        "overwrite" => r.write(5, 1),
        "destage-room" => (0..2).try_for_each(|i| r.write(i * 8, 8)),
        "watermark" => r.write(20, 4),
        "destage-runs" => {
            r.write(3, 10)?; // two backing blocks, both partly covered
            r.write(20, 4)?; // inside one backing block
            r.write(30, 3) // across two
        }
        "destage-rewrite" => {
            r.write(8, 4)?;
            r.write(9, 1) // a replaced copy's clear pending
        }
        "bypass" => r.write(70, 1),
        "cleaner" => r.write(3, 2),
        "discard" => r.write(10, 2),
        "discard-long" => {
            r.write(70, 4)?;
            r.writeback()?; // on the backing device only
            r.write(10, 2) // cached
        }
        "writeback" => r.write(1, 4),
        _ => Ok(()),
    }
}

/// Each scenario's workload: what the exhaustive tier crashes at every event.
fn workload(r: &mut Recorder<'_>, name: &str) -> Result<()> {
    match name {
        "write-1" => r.write(3, 1),
        "write-8" => r.write(0, 8),
        "overwrite" => {
            r.write(5, 1)?; // a new slot; the old copy's slot cleared
            r.write(6, 1)?; // reuses no slot before a fence
            r.read(5, 2)
        }
        "destage-room" => {
            r.write(40, 1)?; // no room: the least recently written block is destaged
            r.write(41, 2)?;
            r.read(0, 2)
        }
        "watermark" => {
            r.write(24, 6)?; // above 50 %: destaged to 25 %, neighbours together, 2 a flush
            r.read(20, 10)
        }
        "destage-runs" => {
            // Groups of 8 blocks, each in runs of contiguous blocks (one backing write each,
            // the edge blocks' other sectors rewritten as they are), flushed, then cleared.
            r.writeback()?;
            r.read(0, 40)
        }
        "destage-rewrite" => {
            r.writeback_rewriting(10)?; // written again during its destage: stays cached
            r.read(8, 4)
        }
        "bypass" => {
            r.write(71, 1)?; // bypassed: durable at the flush
            r.write(3, 1)?; // admitted: durable now
            r.flush()?;
            r.write(70, 1)?; // bypassed, never flushed
            r.read(70, 2)
        }
        "cleaner" => {
            r.cleaner()?;
            r.write(3, 1)?; // cached: written into the cache, then destaged by the cleaner
            r.write(9, 1)?; // not cached: bypasses the cache
            r.read(3, 2)
        }
        "discard" => {
            r.discard(10, 3)?; // two cached blocks and an admitted one: tombstones
            r.writeback()?; // zeroed on the backing device
            r.read(10, 3)
        }
        "discard-long" => {
            // Past the unit (64): not atomic; the cached blocks become tombstones, the others
            // are discarded on the backing device directly, which is flushed before return.
            r.discard(4, 100)?;
            r.read(8, 6)?;
            r.read(68, 8)
        }
        "writeback" => {
            r.write(2, 1)?; // the old copy's clear is outstanding
            r.writeback()?;
            r.read(1, 4)
        }
        other => unreachable!("scenario {other}"),
    }
}

/// The randomized tier's settings and admission: dm-writecache's watermarks (destaging with
/// neighbours, two blocks between backing flushes) and the first 192 sectors admitted, the
/// rest bypassing the cache.
pub fn random_setup() -> (Settings, Admit) {
    let s = Settings {
        high_watermark_pct: 50,
        low_watermark_pct: 25,
        writeback_jobs: 2,
        ..Settings::default()
    };
    (s, Admit::one_range(0..192))
}

/// The randomized tier's workload: writes of 1 to 8 blocks, discards and verified reads of 1
/// to 4, flushes and write-backs, in the cycle's window (partly outside the admitted range).
pub fn random_workload(
    dev: &WriteDevice,
    region: &SimRegion,
    mut w: Workload<'_>,
) -> std::result::Result<Expect, RunningViolation> {
    debug_assert!(random_setup().0.validate().is_ok());
    let mut r = Recorder::new(dev, region, w.known.clone(), *w.version);
    w.run_random_ops(region, 40, |kind, lba, n| match kind {
        0..40 => r.write(lba, n),
        40..50 => r.discard(lba, n),
        50..75 => r.read(lba, n),
        75..92 => r.flush(),
        _ => r.writeback(),
    })?;
    *w.version = r.r.version;
    Ok(r.r.exp)
}
