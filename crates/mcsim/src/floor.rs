//! The floor of a run's cost: the model's functional work alone, with no timing. Every
//! thread's operations are generated and its loads, stores and flushes pass through Table II's
//! cache hierarchy, which decides which of them become requests at the memory controller
//! (misses, dirty L3 victims, flushes of dirty lines). No engine, controller or ROB: what is
//! left is what any engine of this model must do per request, so the bench suite shows it
//! beside the timed rows (docs/mcsim.md, "Speed").
//!
//! Threads take turns one operation at a time, in core order. On one core this is the timed
//! run's access order, so the counts are the run's exactly (a test checks it); on several the
//! shared L3 sees another interleaving than the timed run's, so counts differ slightly.

use crate::cache::{Hierarchy, Served};
use crate::config::Config;
use crate::trace::{Op, OpBuffer, Workload};
use nvstack_core::error::Result;

/// What the functional pass counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Floor {
    /// Operations taken from the workload.
    pub ops: u64,
    /// Reads reaching the controller (accesses served by memory).
    pub reads: u64,
    /// Writes reaching the controller (dirty flushes and dirty L3 victims).
    pub writes: u64,
    /// Accesses served by L1, L2, L3 and memory.
    pub served: [u64; 4],
}

impl Floor {
    /// Requests at the controller: reads and writes, as a timed run counts them.
    pub fn requests(&self) -> u64 {
        self.reads + self.writes
    }
}

/// A thread's operations taken from the workload a batch at a time (one call per update
/// of a kernel instead of one per operation), and its stores so far.
struct Lane {
    core: usize,
    ops: OpBuffer,
    stores: u64,
}

impl Lane {
    /// The thread's next operation, or None at its end.
    #[inline]
    fn take(&mut self, work: &mut dyn Workload) -> Result<Option<Op>> {
        let op = self.ops.peek(work, self.core)?;
        if op.is_some() {
            self.ops.consume();
        }
        Ok(op)
    }

    /// The thread's turn with `op`: its functional work, or, on a gap, a prefetch of the sets
    /// its next access will scan (that access comes a round of turns from now).
    #[inline]
    fn turn(&mut self, op: Op, caches: &mut Hierarchy, shift: u32, f: &mut Floor) {
        if let Op::Gap(_) = op {
            if let Some(Op::Load(a) | Op::Store(a)) = self.ops.buffered() {
                caches.prefetch(self.core, a >> shift);
            }
        }
        functional(op, self.core, &mut self.stores, caches, shift, f);
    }
}

/// Core `core`'s functional work on `op`, the floor's for one operation (also what
/// `examples/rob_bound.rs` times): a load or a store through the caches, a flush; the
/// requests it makes are counted in `f`. `stores` is the core's store count so far (a store's
/// data names its core and count, as in a timed run). Returns the level that served a load or
/// a store.
#[inline]
pub fn functional(
    op: Op,
    core: usize,
    stores: &mut u64,
    caches: &mut Hierarchy,
    shift: u32,
    f: &mut Floor,
) -> Option<Served> {
    match op {
        Op::Load(a) | Op::Store(a) => {
            let version = if let Op::Store(_) = op {
                *stores += 1;
                crate::sim::store_data(core, *stores)
            } else {
                0
            };
            let served = caches.access(core, a >> shift, version);
            f.reads += u64::from(served == Served::Memory);
            f.writes += caches.writebacks.len() as u64;
            caches.writebacks.clear();
            Some(served)
        }
        Op::Flush(a) => {
            f.writes += u64::from(caches.flush(core, a >> shift).is_some());
            None
        }
        Op::Gap(_) | Op::Fence | Op::Commit { .. } | Op::Bind { .. } => None,
    }
}

/// Generate `work`'s operations and filter them through `cfg`'s caches, with no timing.
pub fn floor(cfg: &Config, work: &mut dyn Workload) -> Result<Floor> {
    crate::sim::check_threads(cfg, work)?;
    let mut caches = Hierarchy::new(cfg);
    let shift = cfg.line_bytes.trailing_zeros();
    // The live threads' lanes, in core order (a finished thread's lane leaves).
    let mut lanes: Vec<Lane> = (0..work.threads())
        .map(|core| Lane {
            core,
            ops: OpBuffer::default(),
            stores: 0,
        })
        .collect();
    let mut f = Floor::default();
    while !lanes.is_empty() {
        let mut i = 0;
        while i < lanes.len() {
            let lane = &mut lanes[i];
            let Some(op) = lane.take(work)? else {
                lanes.remove(i);
                continue;
            };
            f.ops += 1;
            lane.turn(op, &mut caches, shift, &mut f);
            i += 1;
        }
    }
    f.served = caches.hits;
    Ok(f)
}
