//! The write cache's scenarios for the exhaustive tier, and its workload for the randomized
//! tier. A [`Recorder`] runs operations and keeps what the ordered oracle needs: an admitted
//! write is acknowledged when it returns, a bypassed one when the next flush returns (until
//! then it is in flight).

use super::{format_sim, open_sim, random_setup, WcDevice, WcTrace, SECTOR};
use crate::oracle::{block, Expect, OpRecord};
use crate::target::{check_read_blocks, Recorded, RunningViolation, Workload};
use nvstack_core::error::Result;
use nvstack_nvcache::write::format::{Admit, WcSettings};
use nvstack_nvcache::WcBug;
use nvstack_pmem::crash::SimRegion;
use std::collections::BTreeMap;

const S: usize = SECTOR as usize;

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

/// Runs operations and keeps what the oracle expects of them.
pub struct Recorder<'a> {
    dev: &'a WcDevice,
    region: &'a SimRegion,
    /// What every block the recorder knows reads now (absent: zeros).
    cur: BTreeMap<u64, Option<u64>>,
    pub exp: Expect,
    version: u64,
    /// Bypassed operations not yet covered by a flush (indices into `exp.ops`).
    unflushed: Vec<usize>,
    pub marks: Vec<(usize, &'static str)>,
}

impl<'a> Recorder<'a> {
    pub fn new(
        dev: &'a WcDevice,
        region: &'a SimRegion,
        initial: BTreeMap<u64, Option<u64>>,
        version: u64,
    ) -> Recorder<'a> {
        Recorder {
            dev,
            region,
            cur: initial.clone(),
            exp: Expect {
                initial,
                ops: Vec::new(),
                epochs: None,
                ordered: true,
            },
            version,
            unflushed: Vec::new(),
            marks: Vec::new(),
        }
    }

    /// Run `f`, which makes `blocks` read as given: the blocks the cache takes are one atomic
    /// operation acknowledged on return, the others one acknowledged at the next flush.
    fn op(
        &mut self,
        name: &'static str,
        blocks: Vec<(u64, Option<u64>)>,
        f: impl FnOnce(&WcDevice) -> Result<()>,
    ) -> Result<()> {
        let start = self.region.event_count();
        self.marks.push((start, name));
        let (taken, passed): (Vec<_>, Vec<_>) =
            blocks.iter().copied().partition(|b| self.dev.takes(b.0));
        f(self.dev)?;
        let ack = self.region.event_count();
        self.cur.extend(blocks.iter().copied());
        if !passed.is_empty() {
            self.unflushed.push(self.exp.ops.len());
            self.exp.ops.push(OpRecord {
                blocks: passed,
                atomic: false,
                start,
                ack: usize::MAX,
            });
        }
        self.exp.ops.push(OpRecord {
            blocks: taken,
            atomic: true,
            start,
            ack,
        });
        Ok(())
    }

    /// Write `n` blocks from `lba`, each a new version, as one write.
    pub fn write(&mut self, lba: u64, n: u64) -> Result<()> {
        self.version += 1;
        let v = self.version;
        let data: Vec<u8> = (lba..lba + n).flat_map(|l| block(l, v, S)).collect();
        let blocks = (lba..lba + n).map(|l| (l, Some(v))).collect();
        self.op("write", blocks, |d| d.write_blocks(lba, &data))
    }

    pub fn discard(&mut self, lba: u64, n: u64) -> Result<()> {
        let blocks: Vec<_> = (lba..lba + n).map(|l| (l, None)).collect();
        if n <= u64::from(self.dev.unit_blocks()) {
            return self.op("discard", blocks, |d| d.discard_blocks(lba, n));
        }
        // Past the unit a discard is not atomic (as a longer write), and every block of it,
        // taken or not, is durable on return (the backing device is flushed before it).
        let start = self.region.event_count();
        self.marks.push((start, "discard"));
        self.dev.discard_blocks(lba, n)?;
        let ack = self.region.event_count();
        self.cur.extend(blocks.iter().copied());
        self.exp.ops.push(OpRecord {
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
        let ack = self.region.event_count();
        for i in std::mem::take(&mut self.unflushed) {
            self.exp.ops[i].ack = ack;
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
        let start = self.region.event_count();
        self.marks.push((start, "writeback"));
        self.version += 1;
        let v = self.version;
        let data = block(lba, v, S);
        let (dev, region) = (self.dev, self.region);
        assert!(dev.takes(lba), "the block rewritten is cached");
        let mut write = (0, 0);
        dev.writeback_during(&mut || {
            let at = region.event_count();
            dev.write_blocks(lba, &data)?;
            write = (at, region.event_count());
            Ok(())
        })?;
        assert!(write.1 > write.0, "the write ran during the destage");
        self.marks.push((write.0, "write during the destage"));
        self.marks.push((write.1, "writeback: clears"));
        self.cur.insert(lba, Some(v));
        self.exp.ops.push(OpRecord {
            blocks: vec![(lba, Some(v))],
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
        let want: Vec<(u64, Option<u64>)> = (lba..lba + n)
            .map(|l| (l, self.cur.get(&l).copied().unwrap_or(None)))
            .collect();
        let mut buf = vec![0u8; n as usize * S];
        self.dev.read_blocks(lba, &mut buf)?;
        check_read_blocks(&want, &buf, S)?;
        // The blocks read are judged after every crash too.
        for (l, _) in want {
            self.exp.initial.entry(l).or_insert(None);
        }
        Ok(())
    }
}

/// A scenario's cache: slots, settings and admission.
fn shape(name: &str) -> (u32, WcSettings, Admit) {
    let dm = WcSettings {
        high_watermark_pct: 50,
        low_watermark_pct: 25,
        writeback_jobs: 2,
        ..WcSettings::default()
    };
    let runs = WcSettings {
        writeback_jobs: 8,
        ..WcSettings::default()
    };
    match name {
        "destage-room" => (16, WcSettings::default(), Admit::All),
        "destage-runs" => (32, runs, Admit::All),
        "watermark" => (16, dm, Admit::All),
        "bypass" | "cleaner" => (16, WcSettings::default(), Admit::one_range(0..64)),
        _ => (32, WcSettings::default(), Admit::All),
    }
}

/// Record scenario `index` of NAMES: format, its setup, then its workload from event `start`.
pub fn record(index: usize, bug: Option<WcBug>) -> Result<Recorded<WcTrace>> {
    let name = NAMES[index];
    let (slots, settings, admit) = shape(name);
    let (region, _) = format_sim(slots, 128, settings, &admit)?;
    let base = region.snapshot();
    region.start_recording();
    let dev = open_sim(region.clone(), None, bug)?;
    let mut r = Recorder::new(&dev, &region, BTreeMap::new(), 0);
    setup(&mut r, name)?;
    r.flush()?; // the setup's bypassed writes are durable: the workload starts settled
    let start = region.event_count();
    let mut w = Recorder::new(&dev, &region, r.cur.clone(), r.version);
    workload(&mut w, name)?;
    let (expect, marks) = (w.exp, w.marks);
    drop(dev);
    Ok(Recorded {
        base,
        events: region.take_events(),
        start,
        expect,
        trace: WcTrace { marks },
    })
}

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

/// The randomized tier's workload: writes of 1 to 8 blocks, discards and verified reads of 1
/// to 4, flushes and write-backs, in the cycle's window (partly outside the admitted range).
pub fn random_workload(
    dev: &WcDevice,
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
    *w.version = r.version;
    Ok(r.exp)
}
