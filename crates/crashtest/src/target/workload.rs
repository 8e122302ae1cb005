//! The randomized tier's workloads, as a target runs them (`CrashTarget::random_workload`):
//! what a cycle hands the target ([`Workload`]), and the per-operation workload a layer
//! durable on return uses ([`per_operation`], nvramdisk's). The cache targets run their own
//! operations through [`Workload::run_random_ops`] (target/cache/).

use crate::oracle::{block, decode_block, Expect, OpRecord, OracleRules, Promise};
use nvstack_core::blockdev::BlockDevice;
use nvstack_core::error::Result;
use nvstack_pmem::crash::SimRegion;
use rand::rngs::SmallRng;
use rand::Rng;
use std::collections::BTreeMap;

/// What a layer's randomized workload of one cycle gets (`CrashTarget::random_workload`).
pub struct Workload<'a> {
    /// What each block durably holds at the cycle's start (absent: never written, zeros).
    pub known: &'a BTreeMap<u64, Option<u64>>,
    /// The cycle's window of blocks: `window` to `window + window_blocks - 1`.
    pub window: u64,
    pub window_blocks: u64,
    /// Operations to run.
    pub ops: usize,
    /// The last version written: every write takes a new one.
    pub version: &'a mut u64,
    pub rng: &'a mut SmallRng,
}

/// A violation of the running device (no crash involved), at event index `step`.
#[derive(Debug)]
pub struct RunningViolation {
    pub what: String,
    pub lba: Option<u64>,
    pub step: usize,
}

impl Workload<'_> {
    /// The randomized loop the cache targets share: `ops` operations, each of a kind drawn
    /// from 0..100 and of 1 to 8 blocks when the kind is below `long_below` (the writes), else
    /// 1 to 4, at a random LBA of the window (the draws in that order, so a seed replays the
    /// same run); `op(kind, lba, n)` runs one. An error it returns is a violation at `lba`.
    pub fn run_random_ops(
        &mut self,
        region: &SimRegion,
        long_below: i32,
        mut op: impl FnMut(i32, u64, u64) -> Result<()>,
    ) -> std::result::Result<(), RunningViolation> {
        for _ in 0..self.ops {
            let kind = self.rng.gen_range(0..100);
            let n = if kind < long_below {
                self.rng.gen_range(1..=8)
            } else {
                self.rng.gen_range(1..=4)
            };
            let lba = self.window + self.rng.gen_range(0..=self.window_blocks - n);
            op(kind, lba, n).map_err(|e| RunningViolation {
                what: format!("while running: {e}"),
                lba: Some(lba),
                step: region.event_count(),
            })?;
        }
        Ok(())
    }
}

/// Blocks a discard or a read covers at most.
const SPAN_BLOCKS_MAX: u64 = 4;
/// Draws allowed to find the distinct blocks of one atomic write (at most 8 of a window of 64:
/// each draw repeats a block with probability at most 7/64, so a working generator never
/// needs this many; past it the generator is broken, not the device).
const DISTINCT_DRAWS_MAX: usize = 1024;

/// The randomized workload of a layer whose operations are durable when they return, judged
/// by [`Promise::PerOperation`] under `rules`: single-block writes (40 %), atomic writes of 2
/// to 8 distinct blocks by `write_atomic` (20 %), discards of 1 to 4 blocks (10 %) and verified
/// reads of 1 to 4 (30 %), in the window, drawn in that order from `w.rng`.
pub fn per_operation<D: BlockDevice>(
    device: &D,
    region: &SimRegion,
    w: Workload<'_>,
    rules: OracleRules,
    write_atomic: impl Fn(&[u64], &[u8]) -> Result<()>,
) -> std::result::Result<Expect, RunningViolation> {
    assert!(
        rules.atomic_unit_blocks >= 1,
        "a write of one block is atomic"
    );
    debug_assert!(
        w.window_blocks > SPAN_BLOCKS_MAX,
        "a span fits in the window"
    );
    let mut ops = Ops {
        dev: device,
        region,
        known: w.known,
        rules,
        block_bytes: device.block_bytes() as usize,
        window: w.window,
        window_blocks: w.window_blocks,
        exp: Expect::new(BTreeMap::new(), Promise::PerOperation(rules)),
    };
    let rng = w.rng;
    for _ in 0..w.ops {
        let kind = rng.gen_range(0..100);
        if kind < 40 {
            *w.version += 1;
            ops.write_one(*w.version, rng)?;
        } else if kind < 60 {
            *w.version += 1;
            ops.write_atomic(*w.version, rng, &write_atomic)?;
        } else if kind < 70 {
            ops.discard(rng)?;
        } else {
            ops.read(rng)?;
        }
    }
    debug_assert!(
        ops.exp.ops.len() <= w.ops,
        "one record per operation at most"
    );
    Ok(ops.exp)
}

/// The operations of one cycle's per-operation workload, in its window: each records what the
/// oracle expects of it, or fails as a violation of the running device.
struct Ops<'a, D> {
    dev: &'a D,
    region: &'a SimRegion,
    known: &'a BTreeMap<u64, Option<u64>>,
    rules: OracleRules,
    block_bytes: usize,
    window: u64,
    window_blocks: u64,
    exp: Expect,
}

/// A violation of the running device at event `step`.
fn running(what: String, lba: u64, step: usize) -> RunningViolation {
    RunningViolation {
        what,
        lba: Some(lba),
        step,
    }
}

impl<D: BlockDevice> Ops<'_, D> {
    /// Before an operation touches block `lba`: what it held, if this workload had not
    /// touched it yet.
    fn note_initial(&mut self, lba: u64) {
        self.exp
            .initial
            .entry(lba)
            .or_insert_with(|| self.known.get(&lba).copied().flatten());
    }

    /// The operation begun at event `start` returned: record it for the oracle.
    fn done(&mut self, blocks: Vec<(u64, Option<u64>)>, atomic: bool, start: usize) {
        let ack = self.region.event_count();
        debug_assert!(start <= ack, "an operation returns after it starts");
        debug_assert!(
            blocks
                .iter()
                .all(|b| (self.window..self.window + self.window_blocks).contains(&b.0)),
            "operations stay in the window"
        );
        self.exp.ops.push(OpRecord {
            blocks,
            atomic,
            start,
            ack,
        });
    }

    /// A single-block write of `version`.
    fn write_one(
        &mut self,
        version: u64,
        rng: &mut SmallRng,
    ) -> std::result::Result<(), RunningViolation> {
        let start = self.region.event_count();
        let l = self.window + rng.gen_range(0..self.window_blocks);
        self.note_initial(l);
        self.dev
            .write(l, &block(l, version, self.block_bytes))
            .map_err(|e| running(format!("write failed: {e}"), l, start))?;
        self.done(vec![(l, Some(version))], false, start);
        Ok(())
    }

    /// An atomic write of `version` to 2 to 8 distinct blocks.
    fn write_atomic(
        &mut self,
        version: u64,
        rng: &mut SmallRng,
        write_atomic: impl Fn(&[u64], &[u8]) -> Result<()>,
    ) -> std::result::Result<(), RunningViolation> {
        let start = self.region.event_count();
        let n = rng.gen_range(2..=8);
        let lbas = self.distinct_blocks(n, rng);
        let mut data = Vec::with_capacity(n * self.block_bytes);
        for &l in &lbas {
            self.note_initial(l);
            data.extend_from_slice(&block(l, version, self.block_bytes));
        }
        write_atomic(&lbas, &data)
            .map_err(|e| running(format!("atomic write failed: {e}"), lbas[0], start))?;
        let atomic = self.rules.atomic(n as u64, false);
        self.done(
            lbas.iter().map(|&l| (l, Some(version))).collect(),
            atomic,
            start,
        );
        Ok(())
    }

    /// `n` distinct blocks of the window, drawn at random.
    fn distinct_blocks(&self, n: usize, rng: &mut SmallRng) -> Vec<u64> {
        debug_assert!(
            n as u64 <= self.window_blocks,
            "the window holds {n} blocks"
        );
        let mut lbas: Vec<u64> = Vec::with_capacity(n);
        for _ in 0..DISTINCT_DRAWS_MAX {
            if lbas.len() == n {
                break;
            }
            let l = self.window + rng.gen_range(0..self.window_blocks);
            if !lbas.contains(&l) {
                lbas.push(l);
            }
        }
        assert_eq!(
            lbas.len(),
            n,
            "{n} distinct blocks of {} not found in {DISTINCT_DRAWS_MAX} draws",
            self.window_blocks
        );
        lbas
    }

    /// A discard of 1 to 4 blocks (atomic if more than one, under the layer's rules).
    fn discard(&mut self, rng: &mut SmallRng) -> std::result::Result<(), RunningViolation> {
        let start = self.region.event_count();
        let l = self.window + rng.gen_range(0..self.window_blocks - SPAN_BLOCKS_MAX);
        let n = rng.gen_range(1..=SPAN_BLOCKS_MAX);
        for x in l..l + n {
            self.note_initial(x);
        }
        self.dev
            .discard(l, n)
            .map_err(|e| running(format!("discard failed: {e}"), l, start))?;
        let atomic = self.rules.atomic(n, true);
        self.done((l..l + n).map(|x| (x, None)).collect(), atomic, start);
        Ok(())
    }

    /// A read of 1 to 4 blocks while nothing is in flight: each must return the latest
    /// acknowledged value.
    fn read(&mut self, rng: &mut SmallRng) -> std::result::Result<(), RunningViolation> {
        let start = self.region.event_count();
        let l = self.window + rng.gen_range(0..self.window_blocks - SPAN_BLOCKS_MAX);
        let n = rng.gen_range(1..=SPAN_BLOCKS_MAX as usize);
        let bs = self.block_bytes;
        let mut buf = vec![0u8; n * bs];
        self.dev
            .read(l, &mut buf)
            .map_err(|e| running(format!("read failed: {e}"), l, start))?;
        for (i, b) in buf.chunks_exact(bs).enumerate() {
            let x = l + i as u64;
            let want = self.latest(x);
            let got = decode_block(x, b)
                .map_err(|w| running(format!("read while running: {w}"), x, start))?;
            if got != want {
                return Err(running(
                    format!("read while running returned {got:?}, expected {want:?}"),
                    x,
                    start,
                ));
            }
        }
        Ok(())
    }

    /// What block `lba` holds now: the last operation's value for it, else what it held.
    fn latest(&self, lba: u64) -> Option<u64> {
        self.exp
            .ops
            .iter()
            .rev()
            .find_map(|o| o.blocks.iter().find(|b| b.0 == lba).map(|b| b.1))
            .unwrap_or_else(|| self.known.get(&lba).copied().flatten())
    }
}
