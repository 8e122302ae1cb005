//! Workloads the exhaustive tier crashes: each runs once on a recording simulated region,
//! and the checker then crashes it at every event it logged.

use super::NvramTrace;
use crate::oracle::{block, Expect, OpRecord, Promise};
use crate::target::Recorded;
use nvstack_core::error::{Error, Result};
use nvstack_nvramdisk::bugs::SeededBug;
use nvstack_nvramdisk::{
    format_region, Action, Event, FormatOptions, Geometry, Hook, NvramDisk, OpenOptions, Phase,
    Protocol, Step,
};
use nvstack_pmem::crash::SimRegion;
use nvstack_pmem::ordering::OrderingPolicy;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

/// Geometry of the exhaustive tier: small, so that every crash point is cheap.
pub const BLOCK_BYTES: u32 = 512;
pub const BLOCKS: u64 = 128;
pub const LANES: u32 = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Write1,
    Atomic2,
    Atomic64,
    Discard,
    DiscardMulti,
    OverwriteJustWritten,
    TwoLanes,
    Neighbours,
    RecordReuse,
}

pub const SCENARIOS: [(Kind, &str); 9] = [
    (Kind::Write1, "write-1"),
    (Kind::Atomic2, "atomic-2"),
    (Kind::Atomic64, "atomic-64"),
    (Kind::Discard, "discard"),
    (Kind::DiscardMulti, "discard-3"),
    (Kind::OverwriteJustWritten, "overwrite-just-written"),
    (Kind::TwoLanes, "two-lanes"),
    (Kind::Neighbours, "neighbours"),
    (Kind::RecordReuse, "record-reuse"),
];

/// A single-block write whose paper states are classified (Table 2): its block, its map
/// entry before and after, the lane's VPN, L1 and L2 words before, and its event span.
#[derive(Clone, Copy, Debug)]
pub struct Probe {
    pub lba: u64,
    pub old_entry: u64,
    pub new_entry: u64,
    pub slot_words_before: [u64; 3],
    pub lane: u32,
    pub start: usize,
    pub ack: usize,
}

struct Ctx<'a> {
    dev: NvramDisk<SimRegion>,
    oo: OpenOptions,
    region: &'a SimRegion,
    exp: Expect,
    version: u64,
    started: bool,
    probes: Vec<Probe>,
    g: Geometry,
}

impl Ctx<'_> {
    /// Close and reopen the device (recovery runs; volatile state starts afresh).
    fn reopen(&mut self) -> Result<()> {
        let r = self.dev.region().clone();
        self.dev = NvramDisk::open(r, self.oo.clone())?;
        Ok(())
    }

    fn write(&mut self, lbas: &[u64]) -> Result<()> {
        debug_assert!(!lbas.is_empty(), "a write covers a block at least");
        self.version += 1;
        let v = self.version;
        let bs = self.g.block_bytes as usize;
        let mut data = Vec::with_capacity(lbas.len() * bs);
        for &l in lbas {
            data.extend_from_slice(&block(l, v, bs));
        }
        let old_entry = self.region.peek(self.g.map_entry_off(lbas[0]) / 8);
        let slots: Vec<[u64; 3]> = (0..self.g.lanes).map(|l| self.slot_words(l)).collect();
        let start = self.region.event_count();
        self.dev.write_atomic(lbas, &data)?;
        let ack = self.region.event_count();
        self.record(
            lbas.iter().map(|&l| (l, Some(v))).collect(),
            lbas.len() > 1,
            start,
            ack,
        );
        if self.started && lbas.len() == 1 {
            let new_entry = self.region.peek(self.g.map_entry_off(lbas[0]) / 8);
            // The lane used is the one whose slot changed.
            let lane = (0..self.g.lanes)
                .find(|&l| self.slot_words(l) != slots[l as usize])
                .unwrap_or(0);
            self.probes.push(Probe {
                lba: lbas[0],
                old_entry,
                new_entry,
                slot_words_before: slots[lane as usize],
                lane,
                start,
                ack,
            });
        }
        Ok(())
    }

    fn slot_words(&self, lane: u32) -> [u64; 3] {
        let s = self.g.slot_off(lane) / 8;
        [
            self.region.peek(s),
            self.region.peek(s + 1),
            self.region.peek(s + 2),
        ]
    }

    fn discard(&mut self, lba: u64, count: u64) -> Result<()> {
        debug_assert!(count >= 1, "a discard covers a block at least");
        let start = self.region.event_count();
        self.dev.discard_blocks(lba, count)?;
        let ack = self.region.event_count();
        self.record(
            (lba..lba + count).map(|l| (l, None)).collect(),
            count > 1,
            start,
            ack,
        );
        Ok(())
    }

    fn record(&mut self, blocks: Vec<(u64, Option<u64>)>, atomic: bool, start: usize, ack: usize) {
        debug_assert!(start <= ack, "an operation returns after it starts");
        if self.started {
            self.exp.ops.push(OpRecord {
                blocks,
                atomic,
                start,
                ack,
            });
        } else {
            for (l, v) in blocks {
                self.exp.initial.insert(l, v);
            }
        }
    }
}

/// The gate of `two-lanes`: lane A pauses at its data persist until lane B's write is done,
/// and the scenario's thread waits for lane A to pause before it starts lane B.
#[derive(Default)]
struct TwoLaneGate {
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Default)]
struct GateState {
    /// Lane A reached its data persist and paused there (once).
    a_paused: bool,
    /// Lane A's thread is over: its write returned, or it panicked.
    a_over: bool,
    /// Lane B is done (or failed): lane A may go on.
    b_done: bool,
}

/// How long either side of the gate waits for the other. A write of one block takes
/// microseconds; only a lane that will never signal gets near this, and then the wait ends with
/// an error naming the lane instead of hanging the checker.
const GATE_WAIT_MAX: Duration = Duration::from_secs(60);

impl TwoLaneGate {
    /// Lane A, in its hook at its data persist: pause (the first time only) until B is done.
    fn pause_a(&self) {
        let mut s = crate::lock(&self.state);
        if s.a_paused {
            return;
        }
        s.a_paused = true;
        self.changed.notify_all();
        let (s, waited) = self
            .changed
            .wait_timeout_while(s, GATE_WAIT_MAX, |s| !s.b_done)
            .unwrap_or_else(PoisonError::into_inner);
        // A panic, not an error: this runs in the device's hook. Its message names the lane.
        assert!(
            s.b_done && !waited.timed_out(),
            "two-lanes: lane B was not done within {GATE_WAIT_MAX:?}"
        );
    }

    /// Lane A's thread is over: the scenario's thread no longer waits for a pause.
    fn a_over(&self) {
        crate::lock(&self.state).a_over = true;
        self.changed.notify_all();
    }

    /// The scenario's thread: wait until lane A pauses. Err if it ended or stalled first.
    fn wait_a_paused(&self) -> Result<()> {
        let s = crate::lock(&self.state);
        let (s, waited) = self
            .changed
            .wait_timeout_while(s, GATE_WAIT_MAX, |s| !s.a_paused && !s.a_over)
            .unwrap_or_else(PoisonError::into_inner);
        if s.a_paused {
            return Ok(());
        }
        Err(Error::env(if waited.timed_out() {
            format!("two-lanes: lane A did not reach its data persist within {GATE_WAIT_MAX:?}")
        } else {
            "two-lanes: lane A's write ended without pausing at its data persist".to_string()
        }))
    }

    /// Lane B is done (or failed): let lane A go on.
    fn b_done(&self) {
        crate::lock(&self.state).b_done = true;
        self.changed.notify_all();
    }
}

/// Sets `a_over` when lane A's thread ends, by return or by panic, so that the scenario's
/// thread never waits for a pause that cannot come.
struct AOver<'a>(&'a TwoLaneGate);

impl Drop for AOver<'_> {
    fn drop(&mut self) {
        self.0.a_over();
    }
}

/// Run scenario `kind` once, recording everything after format.
pub fn record(
    kind: Kind,
    protocol: Protocol,
    ordering: OrderingPolicy,
    bug: Option<SeededBug>,
) -> Result<Recorded<NvramTrace>> {
    let len = Geometry::region_bytes_for(BLOCKS, BLOCK_BYTES, LANES)?;
    let region = Arc::new(SimRegion::zeroed(len));
    let fo = FormatOptions {
        block_bytes: BLOCK_BYTES,
        lanes: LANES,
        protocol,
        ordering,
    };
    let g = format_region(&*region, &fo)?.geometry;
    let base = region.snapshot();
    region.start_recording();
    let marks: Marks = Arc::default();
    let gate: Arc<TwoLaneGate> = Arc::default();
    let oo = OpenOptions {
        ordering: Some(ordering),
        hook: Some(recording_hook(&region, &marks, &gate)),
        seeded_bug: bug,
        ..Default::default()
    };
    let dev = NvramDisk::open(region.clone(), oo.clone())?;
    let mut cx = Ctx {
        dev,
        oo,
        region: &region,
        exp: Expect::new(Default::default(), Promise::PerOperation(super::RULES)),
        version: 0,
        started: false,
        probes: vec![],
        g,
    };
    let start = run_workload(&mut cx, kind, &gate)?;
    // The device closes before the log is taken: whatever it stores on its way out counts.
    let Ctx {
        dev,
        exp: expect,
        probes,
        ..
    } = cx;
    drop(dev);
    let events = region.take_events();
    debug_assert!(start <= events.len(), "the workload starts inside the log");
    debug_assert!(
        !expect.ops.is_empty(),
        "a workload runs an operation at least"
    );
    debug_assert!(
        expect.ops.iter().all(|op| op.start >= start),
        "the workload's operations start after its first crash point"
    );
    let marks = std::mem::take(&mut *crate::lock(&marks));
    Ok(Recorded {
        base,
        events,
        start,
        expect,
        trace: NvramTrace {
            marks,
            geometry: g,
            probes,
        },
    })
}

/// (event index, step, phase) of every protocol event, as the hook sees them.
type Marks = Arc<Mutex<Vec<(usize, Step, Phase)>>>;

/// The hook every scenario opens with: it marks each protocol event with the log's length
/// (to name states), and pauses lane A of `two-lanes` at its data persist.
fn recording_hook(region: &Arc<SimRegion>, marks: &Marks, gate: &Arc<TwoLaneGate>) -> Hook {
    let (region, marks, gate) = (region.clone(), marks.clone(), gate.clone());
    Arc::new(move |e: &Event| {
        crate::lock(&marks).push((region.event_count(), e.step, e.phase));
        if e.step == Step::Data
            && e.phase == Phase::Persisted
            && std::thread::current().name() == Some("lane-a")
        {
            gate.pause_a();
        }
        Action::Continue
    })
}

/// The setup, then the workload of scenario `kind`. Returns the event index where the
/// workload starts (the first crash point).
fn run_workload(cx: &mut Ctx<'_>, kind: Kind, gate: &TwoLaneGate) -> Result<usize> {
    let start;
    match kind {
        Kind::Write1 => {
            cx.write(&[3])?;
            start = begin(cx);
            cx.write(&[3])?;
        }
        Kind::Atomic2 => {
            cx.write(&[5])?;
            start = begin(cx);
            cx.write(&[5, 40])?; // one block mapped before, one never written
        }
        Kind::Atomic64 => {
            for l in (0..64).step_by(2) {
                cx.write(&[l])?;
            }
            start = begin(cx);
            let lbas: Vec<u64> = (0..64).collect();
            cx.write(&lbas)?;
        }
        Kind::Discard => {
            cx.write(&[7])?;
            start = begin(cx);
            cx.discard(7, 1)?;
        }
        Kind::DiscardMulti => {
            cx.write(&[72])?;
            cx.write(&[74])?;
            start = begin(cx);
            cx.discard(72, 3)?; // 73 was never written
        }
        Kind::OverwriteJustWritten => {
            cx.write(&[9])?;
            start = begin(cx);
            cx.write(&[9])?;
            cx.write(&[9])?;
        }
        Kind::Neighbours => {
            cx.write(&[16])?;
            cx.write(&[17])?;
            start = begin(cx);
            cx.write(&[16])?;
            cx.write(&[17])?; // same map line as 16
        }
        Kind::RecordReuse => {
            // A multi-block record, then overwrites that move its blocks to other pages (the
            // record's pages are freed and reused), then a reopen (sequence numbers start
            // again) and a new multi-block write on the same lane: at no crash point may the
            // retired record come back to life.
            cx.write(&[48, 49])?;
            cx.write(&[48])?;
            cx.write(&[49])?;
            cx.write(&[50])?;
            cx.reopen()?;
            start = begin(cx);
            cx.write(&[56, 57])?;
        }
        Kind::TwoLanes => {
            cx.write(&[20])?;
            cx.write(&[29])?;
            start = begin(cx);
            two_lanes(cx, gate)?;
        }
    }
    Ok(start)
}

fn begin(cx: &mut Ctx<'_>) -> usize {
    cx.started = true;
    cx.region.event_count()
}

/// Two writes in flight at once on two lanes: A stops after persisting its data, B (another
/// map line) runs to completion, then A finishes.
fn two_lanes(cx: &mut Ctx<'_>, gate: &TwoLaneGate) -> Result<()> {
    cx.version += 1;
    let va = cx.version;
    cx.version += 1;
    let vb = cx.version;
    let bs = cx.g.block_bytes as usize;
    let dev = &cx.dev;
    let region = cx.region;
    let a_start = region.event_count();
    let (a_res, a_ack, b_start, b_ack) = std::thread::scope(|s| {
        let a = std::thread::Builder::new()
            .name("lane-a".into())
            .spawn_scoped(s, || {
                let _over = AOver(gate);
                let r = dev.write_atomic(&[20], &block(20, va, bs));
                (r, region.event_count())
            })
            .expect("spawn");
        if let Err(e) = gate.wait_a_paused() {
            gate.b_done(); // a lane A that did pause after all must not wait for B
            drop(a.join());
            return Err(e);
        }
        let b_start = region.event_count();
        let b = std::thread::Builder::new()
            .name("lane-b".into())
            // Another map line: writers of one line are serialised by its stripe lock.
            .spawn_scoped(s, || dev.write_atomic(&[29], &block(29, vb, bs)))
            .expect("spawn")
            .join();
        let b_ack = region.event_count();
        // Release lane A before looking at B's outcome: if B panicked, the scope still joins
        // A, which must not be left waiting.
        gate.b_done();
        let b = b.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        let (a_res, a_ack) = a.join().expect("lane a");
        Ok((a_res.and(b), a_ack, b_start, b_ack))
    })?;
    debug_assert!(
        a_start <= b_start && b_start <= b_ack && b_ack <= a_ack,
        "B runs entirely inside A's write"
    );
    a_res?;
    cx.record(vec![(20, Some(va))], false, a_start, a_ack);
    cx.record(vec![(29, Some(vb))], false, b_start, b_ack);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvstack_pmem::ordering::policy_by_name;

    #[test]
    fn two_lanes_runs_b_inside_a_and_a_lane_that_never_pauses_is_an_error() {
        let p4 = policy_by_name("p4").expect("p4");
        for protocol in [Protocol::Fast, Protocol::Paper] {
            let rec = record(Kind::TwoLanes, protocol, p4, None).expect("two-lanes records");
            let [a, b] = &rec.expect.ops[..] else {
                panic!("two operations expected: {:?}", rec.expect.ops)
            };
            assert!(a.start <= b.start && b.ack <= a.ack, "{a:?} {b:?}");
        }
        // Lane A's thread ends without pausing: the scenario's thread is told, not left waiting.
        let gate = TwoLaneGate::default();
        std::thread::scope(|s| {
            s.spawn(|| drop(AOver(&gate)));
            let e = gate.wait_a_paused().expect_err("lane A never paused");
            assert!(e.to_string().contains("without pausing"), "{e}");
        });
    }
}
