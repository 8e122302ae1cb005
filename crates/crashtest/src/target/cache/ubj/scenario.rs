//! UBJ's scenarios for the exhaustive tier, and its workload for the randomized tier. A
//! [`Recorder`] runs operations on the cache and keeps the epoch oracle's states: after each
//! operation the cache's counters say whether a commit came before it (forced by a full
//! cache: the state before the operation) or after it (autocommit or a flush: the state after),
//! so every commit's state is exact.

use super::{format_sim, UbjDevice, RANDOM_SLOTS};
use crate::oracle::{Epochs, Expect, OpRecord, Promise, Punch};
use crate::target::cache::{read_checked, recorded, start_recording, CacheTrace, Recording};
use crate::target::{Recorded, RunningViolation, Workload};
use nvstack_core::error::Result;
use nvstack_nvcache::ubj::format::{PolicyName, Settings};
use nvstack_nvcache::Bug;
use nvstack_pmem::crash::SimRegion;
use std::collections::BTreeMap;

/// The exhaustive tier's scenarios, in the order they run (`--scenario NAME`).
pub const NAMES: [&str; 10] = [
    "write-1",
    "write-64",
    "overwrite-frozen",
    "overwrite-dirty",
    "checkpoint",
    "evict-clean",
    "discard",
    "discard-long",
    "full",
    "autocommit",
];

/// Settings of a scenario: commits only when asked (autocommit 0 and no timer), unless the
/// scenario is about the other triggers.
fn settings(autocommit_blocks: u32) -> Settings {
    Settings {
        autocommit_blocks,
        autocommit_ms: 0,
        high_watermark_pct: 90,
        low_watermark_pct: 80,
        checkpoint_ms: 0,
        policy: PolicyName::Lru,
    }
}

/// The randomized tier's settings: autocommit at 8 dirty blocks, dm-writecache's watermarks.
pub fn random_settings() -> Settings {
    Settings {
        autocommit_blocks: 8,
        autocommit_ms: 0,
        ..Settings::default()
    }
}

/// Runs operations on UBJ and keeps what the oracle expects of them, the commits' states
/// included.
pub struct Recorder<'a> {
    r: Recording<'a, UbjDevice>,
}

impl<'a> Recorder<'a> {
    /// Start from `initial`, the committed state (the device reads it now).
    pub fn new(
        dev: &'a UbjDevice,
        region: &'a SimRegion,
        initial: BTreeMap<u64, Option<u64>>,
        version: u64,
    ) -> Recorder<'a> {
        Recorder {
            r: Recording::new(dev, region, initial, version),
        }
    }

    /// Run `f`, which makes `blocks` read as given, and learn the commits it made.
    fn op(
        &mut self,
        name: &'static str,
        blocks: Vec<(u64, Option<u64>)>,
        f: impl FnOnce(&UbjDevice) -> Result<()>,
    ) -> Result<()> {
        let r = &mut self.r;
        let start = r.begin(name);
        let (epoch0, forced0) = (r.dev.epoch(), r.dev.stats().commits_forced);
        f(r.dev)?;
        let ack = r.region.event_count();
        let forced = r.dev.stats().commits_forced - forced0;
        let commits = r.dev.epoch() - epoch0;
        assert!(
            forced <= 1 && commits >= forced && commits - forced <= 1,
            "{name}: {commits} commits, {forced} forced"
        );
        let ep = epochs(&mut r.exp);
        if forced == 1 {
            ep.states.push(r.cur.clone());
            ep.commits.push((start, ack));
        }
        r.cur.extend(blocks.iter().copied());
        if commits > forced {
            ep.states.push(r.cur.clone());
            ep.commits.push((start, ack));
        }
        r.exp.ops.push(OpRecord {
            blocks,
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

    /// Discard `n` blocks from `lba`. Past the unit, the blocks the cache holds no copy of are
    /// discarded on the backing device outside every epoch: the oracle's punches.
    pub fn discard(&mut self, lba: u64, n: u64) -> Result<()> {
        let blocks = (lba..lba + n).map(|l| (l, None)).collect();
        let dev = self.r.dev;
        let long = n > u64::from(dev.unit_blocks());
        let unheld: Vec<u64> = (lba..lba + n).filter(|&l| long && !dev.holds(l)).collect();
        self.op("discard", blocks, |d| d.discard_blocks(lba, n))?;
        let op = self.r.exp.ops.last().expect("the discard's record");
        let (start, ack) = (op.start, op.ack);
        let ep = epochs(&mut self.r.exp);
        ep.punched
            .extend(unheld.into_iter().map(|lba| Punch { lba, start, ack }));
        Ok(())
    }

    pub fn commit(&mut self) -> Result<()> {
        self.op("commit", Vec::new(), |d| d.commit())
    }

    pub fn checkpoint(&mut self) -> Result<()> {
        self.op("checkpoint", Vec::new(), |d| d.checkpoint())
    }

    /// Read `n` blocks and check them against what they should read now: Err(Finding) names
    /// the first wrong one. The blocks are then judged after every crash too.
    pub fn read(&mut self, lba: u64, n: u64) -> Result<()> {
        let want = self.r.reads_now(lba, n);
        let check = want.clone();
        self.op("read", want, |d| read_checked(d, &check))
    }
}

/// The promise a UBJ recorder keeps: the epochs.
fn epochs(exp: &mut Expect) -> &mut Epochs {
    match &mut exp.promise {
        Promise::Epochs(e) => e,
        other => unreachable!("UBJ is judged by its epochs, not {other:?}"),
    }
}

/// Record scenario `index` of NAMES: format, its setup, then its workload from event `start`.
pub fn record(index: usize, bug: Option<Bug>) -> Result<Recorded<CacheTrace>> {
    let (slots, autocommit) = match NAMES[index] {
        "write-64" => (128, 0),
        "evict-clean" | "discard-long" | "full" => (16, 0),
        "autocommit" => (32, 4),
        _ => (32, 0),
    };
    let full = NAMES[index] == "full";
    // A full cache must be able to force a commit: autocommit on, at a count never reached.
    let (region, _) = format_sim(slots, 128, settings(if full { 1000 } else { autocommit }))?;
    let (base, dev) = start_recording::<UbjDevice>(&region, bug)?;
    let mut r = Recorder::new(&dev, &region, BTreeMap::new(), 0);
    setup(&mut r, NAMES[index])?;
    // The workload's oracle starts from the setup's committed state.
    let start = region.event_count();
    let mut w = Recorder::new(&dev, &region, r.r.cur.clone(), r.r.version);
    workload(&mut w, NAMES[index])?;
    Ok(recorded(w.r.finish(), dev, &region, base, start))
}

/// Each scenario's setup: its committed starting state (commits and checkpoints included).
fn setup(r: &mut Recorder<'_>, name: &str) -> Result<()> {
    match name {
        "overwrite-frozen" => {
            r.write(5, 2)?;
            r.commit()
        }
        "checkpoint" => {
            r.write(1, 4)?;
            r.commit()?;
            r.write(2, 2)?;
            r.commit()
        }
        "evict-clean" => {
            r.write(0, 8)?;
            r.commit()?;
            r.checkpoint()?;
            r.read(20, 8)
        }
        "discard" => {
            r.write(10, 4)?;
            r.commit()?;
            r.checkpoint()?;
            r.write(12, 1)?;
            r.commit()
        }
        "discard-long" => {
            r.write(18, 2)?;
            r.commit()?;
            r.checkpoint()?;
            r.read(30, 14)?; // the cache is full
            r.read(12, 6)?; // misses that evict 18 and 19: on the backing device alone
            r.write(10, 2)?;
            r.commit() // 10 and 11 frozen
        }
        _ => Ok(()),
    }
}

/// Each scenario's workload: what the exhaustive tier crashes at every event.
fn workload(r: &mut Recorder<'_>, name: &str) -> Result<()> {
    match name {
        "write-1" => {
            r.write(3, 1)?;
            r.commit()
        }
        "write-64" => {
            r.write(0, 64)?;
            r.commit()
        }
        "overwrite-frozen" => {
            r.write(5, 1)?; // copy-on-write beside the frozen copy
            r.commit()?; // a commit while an older frozen copy exists
            r.write(6, 1)?;
            r.commit()
        }
        "overwrite-dirty" => {
            r.write(7, 1)?;
            r.write(7, 1)?; // in place: the block is dirty
            r.write(8, 2)?;
            r.commit()
        }
        "checkpoint" => {
            r.checkpoint()?; // out-of-date copies freed, four blocks written back
            r.write(3, 1)?; // in place into a clean slot
            r.commit()
        }
        "evict-clean" => {
            r.read(30, 4)?; // misses that evict clean blocks
            r.write(0, 2)?;
            r.commit()
        }
        "discard" => {
            r.discard(10, 3)?; // two clean blocks and a frozen one
            r.commit()?;
            r.checkpoint() // the backing holes are punched
        }
        "discard-long" => {
            // Past the unit (8 blocks with 16 slots): the blocks held (10 frozen, 11 dirty,
            // 12..18 clean) become tombstones; 18 and 19 are discarded on the backing device,
            // which is flushed before the call returns.
            r.write(11, 1)?; // dirty beside its frozen copy
            r.discard(10, 10)?;
            r.read(16, 4)?;
            r.commit()
        }
        "full" => {
            r.write(0, 8)?;
            r.write(8, 8)?;
            r.write(16, 8)?; // no room: a forced commit and a full checkpoint first
            r.commit()
        }
        "autocommit" => {
            r.write(0, 2)?;
            r.write(2, 3)?; // five dirty blocks: autocommit after the write
            r.write(9, 1)?;
            r.commit()
        }
        other => unreachable!("scenario {other}"),
    }
}

/// The randomized tier's workload: writes of 1 to 8 blocks, discards and verified reads of 1
/// to 4, commits and checkpoints, in the cycle's window; evictions, forced commits and
/// watermark checkpoints come from the small cache (RANDOM_SLOTS).
pub fn random_workload(
    dev: &UbjDevice,
    region: &SimRegion,
    mut w: Workload<'_>,
) -> std::result::Result<Expect, RunningViolation> {
    debug_assert!(
        u64::from(RANDOM_SLOTS) / 2 >= 8,
        "a write of 8 fits one epoch"
    );
    let mut r = Recorder::new(dev, region, w.known.clone(), *w.version);
    w.run_random_ops(region, 35, |kind, lba, n| match kind {
        0..35 => r.write(lba, n),
        35..45 => r.discard(lba, n),
        45..70 => r.read(lba, n),
        70..90 => r.commit(),
        _ => r.checkpoint(),
    })?;
    *w.version = r.r.version;
    Ok(r.r.exp)
}
