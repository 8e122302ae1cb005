//! Workloads the exhaustive tier crashes: each runs once on a recording simulated region,
//! and the checker then crashes it at every event it logged.

use super::NvramTrace;
use crate::oracle::{block, Expect, OpRecord};
use crate::target::Recorded;
use nvstack_core::error::Result;
use nvstack_nvramdisk::bugs::SeededBug;
use nvstack_nvramdisk::{
    format_region, Action, Event, FormatOptions, Geometry, NvramDisk, OpenOptions, Phase, Protocol,
    Step,
};
use nvstack_pmem::crash::SimRegion;
use nvstack_pmem::ordering::OrderingPolicy;
use std::sync::{Arc, Condvar, Mutex};

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

/// Pause thread "lane-a" at its data persist until thread B's write is done.
#[derive(Default)]
struct TwoLaneGate {
    a_paused: Mutex<bool>,
    a_cv: Condvar,
    b_done: Mutex<bool>,
    b_cv: Condvar,
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
    let sb = format_region(&*region, &fo)?;
    let g = sb.geometry;
    let base = region.snapshot();
    region.start_recording();
    let marks: Arc<Mutex<Vec<(usize, Step, Phase)>>> = Arc::default();
    let gate: Arc<TwoLaneGate> = Arc::default();
    let hook = {
        let region = region.clone();
        let marks = marks.clone();
        let gate = gate.clone();
        Arc::new(move |e: &Event| {
            marks
                .lock()
                .unwrap()
                .push((region.event_count(), e.step, e.phase));
            if e.step == Step::Data
                && e.phase == Phase::Persisted
                && std::thread::current().name() == Some("lane-a")
            {
                let mut p = gate.a_paused.lock().unwrap();
                if !*p {
                    *p = true;
                    gate.a_cv.notify_all();
                    drop(p);
                    let mut done = gate.b_done.lock().unwrap();
                    while !*done {
                        done = gate.b_cv.wait(done).unwrap();
                    }
                }
            }
            Action::Continue
        })
    };
    let oo = OpenOptions {
        ordering: Some(ordering),
        hook: Some(hook),
        seeded_bug: bug,
        ..Default::default()
    };
    let dev = NvramDisk::open(region.clone(), oo.clone())?;
    let mut cx = Ctx {
        dev,
        oo,
        region: &region,
        exp: Expect::default(),
        version: 0,
        started: false,
        probes: vec![],
        g,
    };
    let start;
    match kind {
        Kind::Write1 => {
            cx.write(&[3])?;
            start = begin(&mut cx);
            cx.write(&[3])?;
        }
        Kind::Atomic2 => {
            cx.write(&[5])?;
            start = begin(&mut cx);
            cx.write(&[5, 40])?; // one block mapped before, one never written
        }
        Kind::Atomic64 => {
            for l in (0..64).step_by(2) {
                cx.write(&[l])?;
            }
            start = begin(&mut cx);
            let lbas: Vec<u64> = (0..64).collect();
            cx.write(&lbas)?;
        }
        Kind::Discard => {
            cx.write(&[7])?;
            start = begin(&mut cx);
            cx.discard(7, 1)?;
        }
        Kind::DiscardMulti => {
            cx.write(&[72])?;
            cx.write(&[74])?;
            start = begin(&mut cx);
            cx.discard(72, 3)?; // 73 was never written
        }
        Kind::OverwriteJustWritten => {
            cx.write(&[9])?;
            start = begin(&mut cx);
            cx.write(&[9])?;
            cx.write(&[9])?;
        }
        Kind::Neighbours => {
            cx.write(&[16])?;
            cx.write(&[17])?;
            start = begin(&mut cx);
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
            start = begin(&mut cx);
            cx.write(&[56, 57])?;
        }
        Kind::TwoLanes => {
            cx.write(&[20])?;
            cx.write(&[29])?;
            start = begin(&mut cx);
            two_lanes(&mut cx, &gate)?;
        }
    }
    let expect = std::mem::take(&mut cx.exp);
    let probes = std::mem::take(&mut cx.probes);
    drop(cx);
    let events = region.take_events();
    let marks = std::mem::take(&mut *marks.lock().unwrap());
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
                let r = dev.write_atomic(&[20], &block(20, va, bs));
                (r, region.event_count())
            })
            .expect("spawn");
        let mut p = gate.a_paused.lock().unwrap();
        while !*p {
            p = gate.a_cv.wait(p).unwrap();
        }
        drop(p);
        let b_start = region.event_count();
        let b = std::thread::Builder::new()
            .name("lane-b".into())
            // Another map line: writers of one line are serialised by its stripe lock.
            .spawn_scoped(s, || dev.write_atomic(&[29], &block(29, vb, bs)))
            .expect("spawn")
            .join()
            .expect("lane b");
        let b_ack = region.event_count();
        *gate.b_done.lock().unwrap() = true;
        gate.b_cv.notify_all();
        let (a_res, a_ack) = a.join().expect("lane a");
        (a_res.and(b), a_ack, b_start, b_ack)
    });
    a_res?;
    cx.record(vec![(20, Some(va))], false, a_start, a_ack);
    cx.record(vec![(29, Some(vb))], false, b_start, b_ack);
    Ok(())
}
