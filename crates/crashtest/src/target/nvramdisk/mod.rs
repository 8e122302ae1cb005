//! nvramdisk as a crash target: `NvramDisk<SimRegion>` runs unchanged on the simulated region;
//! the scenarios drive it (scenario.rs), its protocol step events name the states (fast F0-F4,
//! R1-R5; paper S0-S11 from the values, Table 2), and the seeded bugs come from its catalogue
//! (nvstack_nvramdisk::bugs), each with the weakest fault model that exposes it (weakest.rs).

pub mod scenario;
pub mod weakest;

use super::workload::{self, RunningViolation, Workload};
use super::{BugSpec, CrashTarget, Labels, Recorded, Shape};
use crate::oracle::{Expect, OracleRules};
use nvstack_core::error::Result;
use nvstack_nvramdisk::bugs::{self, SeededBug};
use nvstack_nvramdisk::journal::LBA_NULL;
use nvstack_nvramdisk::{
    format_region, FormatOptions, Geometry, NvramDisk, OpenOptions, Phase, Protocol, Step,
    ATOMIC_BLOCKS_MAX,
};
use nvstack_pmem::crash::SimRegion;
use nvstack_pmem::ordering::OrderingPolicy;
use nvstack_pmem::Region;
use rand::rngs::SmallRng;
use rand::Rng;
use scenario::{Probe, SCENARIOS};
use std::collections::BTreeSet;
use std::sync::Arc;

/// One configuration of nvramdisk: a row of the report.
#[derive(Clone, Copy, Debug)]
pub struct NvramConfig {
    /// The journaling protocol the region is formatted with.
    pub protocol: Protocol,
    /// The ordering policy every open uses.
    pub ordering: OrderingPolicy,
}

/// What a recorded nvramdisk scenario keeps for naming states.
pub struct NvramTrace {
    /// (event index, step, phase) at every protocol event.
    pub marks: Vec<(usize, Step, Phase)>,
    /// The region's layout, to find a lane's slot and a block's map entry.
    pub geometry: Geometry,
    /// The single-block writes whose paper states are classified.
    pub probes: Vec<Probe>,
}

/// Scenario names, in SCENARIOS' order.
const SCENARIO_NAMES: [&str; SCENARIOS.len()] = [
    SCENARIOS[0].1,
    SCENARIOS[1].1,
    SCENARIOS[2].1,
    SCENARIOS[3].1,
    SCENARIOS[4].1,
    SCENARIOS[5].1,
    SCENARIOS[6].1,
    SCENARIOS[7].1,
    SCENARIOS[8].1,
];

/// Region shape of the randomized tier: 1,024 blocks, so that random windows overlap little.
pub const RANDOM_SHAPE: Shape = Shape {
    blocks: 1024,
    block_bytes: 512,
    lanes: 4,
};

/// nvramdisk's promise: every operation durable on return, a write or discard of up to 64
/// blocks all-or-nothing.
pub const RULES: OracleRules = OracleRules {
    atomic_unit_blocks: ATOMIC_BLOCKS_MAX as u64,
    atomic_discard: true,
};

/// nvramdisk, checked on simulated regions.
pub struct NvramTarget {
    bugs: Vec<BugSpec<SeededBug>>,
}

impl Default for NvramTarget {
    fn default() -> Self {
        NvramTarget::new()
    }
}

impl NvramTarget {
    /// The target, with nvramdisk's seeded-bug catalogue.
    pub fn new() -> NvramTarget {
        let bugs = bugs::BUGS
            .iter()
            .map(|b| BugSpec {
                bug: b.bug,
                name: b.name,
                what: b.what,
                protocol: b.protocol.name(),
                ordering: b.ordering,
                weakest: weakest::weakest_model(b.bug),
                needs_depth2: b.needs_depth2,
            })
            .collect();
        NvramTarget { bugs }
    }

    fn options(config: NvramConfig, bug: Option<SeededBug>) -> OpenOptions {
        OpenOptions {
            ordering: Some(config.ordering),
            seeded_bug: bug,
            ..Default::default()
        }
    }
}

impl CrashTarget for NvramTarget {
    type Config = NvramConfig;
    type Bug = SeededBug;
    type Device = NvramDisk<SimRegion>;
    type Layout = Geometry;
    type Trace = NvramTrace;

    fn labels(&self, c: NvramConfig) -> Labels {
        Labels {
            protocol: c.protocol.name(),
            ordering: c.ordering.name,
        }
    }

    fn format(&self, c: NvramConfig, shape: Shape) -> Result<(SimRegion, Geometry)> {
        let len = Geometry::region_bytes_for(shape.blocks, shape.block_bytes, shape.lanes)?;
        let region = SimRegion::zeroed(len);
        let fo = FormatOptions {
            block_bytes: shape.block_bytes,
            lanes: shape.lanes,
            protocol: c.protocol,
            ordering: c.ordering,
        };
        let g = format_region(&region, &fo)?.geometry;
        Ok((region, g))
    }

    #[inline]
    fn open(
        &self,
        region: Arc<SimRegion>,
        c: NvramConfig,
        bug: Option<SeededBug>,
    ) -> Result<Self::Device> {
        NvramDisk::open(region, Self::options(c, bug))
    }

    #[inline]
    fn recover(
        &self,
        region: Arc<SimRegion>,
        c: NvramConfig,
        bug: Option<SeededBug>,
    ) -> Result<Self::Device> {
        NvramDisk::open(region, Self::options(c, bug.filter(|b| b.in_recovery())))
    }

    #[inline]
    fn recovery_did_work(&self, device: &Self::Device) -> bool {
        !device.recovery_report().was_clean()
    }

    /// The per-operation workload under nvramdisk's rules, its atomic writes scattered.
    fn random_workload(
        &self,
        device: &Self::Device,
        region: &SimRegion,
        w: Workload<'_>,
    ) -> std::result::Result<Expect, RunningViolation> {
        workload::per_operation(device, region, w, RULES, |lbas, data| {
            device.write_atomic(lbas, data)
        })
    }

    fn scenarios(&self) -> &'static [&'static str] {
        &SCENARIO_NAMES
    }

    fn random_shape(&self) -> Shape {
        RANDOM_SHAPE
    }

    fn record(
        &self,
        index: usize,
        c: NvramConfig,
        bug: Option<SeededBug>,
    ) -> Result<Recorded<NvramTrace>> {
        assert!(index < SCENARIOS.len(), "scenario {index} out of range");
        scenario::record(SCENARIOS[index].0, c.protocol, c.ordering, bug)
    }

    fn state_of(
        &self,
        rec: &Recorded<NvramTrace>,
        c: NvramConfig,
        crash: usize,
        img: &SimRegion,
    ) -> Option<String> {
        state_of(rec, c.protocol, crash, img)
    }

    fn step_at(&self, rec: &Recorded<NvramTrace>, crash: usize) -> String {
        let m = rec.trace.marks.iter().rev().find(|m| m.0 <= crash);
        format!("{:?}", m.map(|m| (m.1, m.2)))
    }

    fn inject_media_fault(
        &self,
        img: &SimRegion,
        g: &Geometry,
        touched: &[u64],
        pending: &BTreeSet<u64>,
        rng: &mut SmallRng,
    ) -> String {
        media_fault(img, g, touched, pending, rng)
    }

    fn bugs(&self) -> &[BugSpec<SeededBug>] {
        &self.bugs
    }

    fn bug_in_recovery(&self, bug: SeededBug) -> bool {
        bug.in_recovery()
    }
}

/// Name the protocol state an image is in, from the values it holds (paper: Table 2) or the
/// step the crash interrupted (fast: docs/format.md 6.3 and 6.4).
fn state_of(
    rec: &Recorded<NvramTrace>,
    protocol: Protocol,
    crash: usize,
    img: &SimRegion,
) -> Option<String> {
    let t = &rec.trace;
    match protocol {
        Protocol::Paper => {
            let p = t
                .probes
                .iter()
                .find(|p| p.start < crash && crash <= p.ack)?;
            Some(paper_state(&t.geometry, p, img))
        }
        Protocol::Fast => {
            let (_, step, phase) = t.marks.iter().rev().find(|m| m.0 <= crash)?;
            let op = rec
                .expect
                .ops
                .iter()
                .find(|o| o.start < crash && crash <= o.ack)?;
            let record_path = t
                .marks
                .iter()
                .any(|m| m.0 > op.start && m.0 <= op.ack && m.1 == Step::Record);
            Some(
                match (step, phase, record_path) {
                    (Step::Data, Phase::Stored, _) => "F1",
                    (Step::Data, Phase::Persisted, _) => "F2",
                    (Step::Map, Phase::Stored, false) => "F3",
                    (Step::Map, Phase::Persisted, false) => "F4",
                    (Step::Record, Phase::Stored, _) => "R1",
                    (Step::Record, Phase::Persisted, _) => "R2",
                    (Step::Map, Phase::Stored, true) => "R3",
                    (Step::Map, Phase::Persisted, true) => "R4",
                    (Step::RecordClear, Phase::Stored, _) => "R5",
                    (Step::RecordClear, Phase::Persisted, _) => "F0",
                    _ => return None,
                }
                .to_string(),
            )
        }
    }
}

fn paper_state(g: &Geometry, p: &Probe, img: &SimRegion) -> String {
    debug_assert!(p.lane < g.lanes, "the probe's lane is one of the region's");
    debug_assert!(p.lba < g.blocks, "the probe's block is one of the region's");
    let s = g.slot_off(p.lane) / 8;
    let (vpn, l1, l2) = (img.peek(s), img.peek(s + 1), img.peek(s + 2));
    let m = img.peek(g.map_entry_off(p.lba) / 8);
    let v = if vpn == p.new_entry {
        'n'
    } else if vpn == p.slot_words_before[0] {
        'p'
    } else {
        'X'
    };
    let l = |x: u64| {
        if x == LBA_NULL {
            '0'
        } else if x == p.lba {
            'l'
        } else {
            'X'
        }
    };
    let mm = if m == p.old_entry {
        'o'
    } else if m == p.new_entry {
        'n'
    } else {
        'X'
    };
    let name = match (v, l(l1), l(l2), mm) {
        ('p', '0', '0', 'o') => "S0",
        ('X', '0', '0', 'o') => "S1",
        ('n', '0', '0', 'o') => "S2",
        ('n', 'X', '0', 'o') => "S3",
        ('n', 'l', '0', 'o') => "S4",
        ('n', 'l', 'X', 'o') => "S5",
        ('n', 'l', 'l', 'o') => "S6",
        ('n', 'l', 'l', 'X') => "S7",
        ('n', 'l', 'l', 'n') => "S8",
        ('n', 'X', 'l', 'n') => "S9",
        ('n', '0', 'l', 'n') => "S10",
        ('n', '0', 'X', 'n') => "S11",
        ('n', '0', '0', 'n') => "S0'",
        _ => return format!("other<{v}{}{}{mm}>", l(l1), l(l2)),
    };
    name.to_string()
}

/// Inject one media fault into durable metadata of `img`: a bit flip in a touched block's map
/// entry, another entry's word written into one (a misdirected write), a bit flip in a
/// superblock copy, or in a journal slot (idle or holding an update in flight). Words still
/// pending at the crash are not targets (they are not yet on media). Returns a description.
fn media_fault(
    img: &SimRegion,
    g: &Geometry,
    touched: &[u64],
    pending: &BTreeSet<u64>,
    rng: &mut SmallRng,
) -> String {
    // Draws until one names a durable word the fault changes: bounded, and almost always
    // the first (only a pending word or a misdirected write onto itself is drawn again).
    for _ in 0..FAULT_DRAWS_MAX {
        let Some((word, value, what)) = fault_target(img, g, touched, rng) else {
            continue;
        };
        if pending.contains(&word) || img.peek(word) == value {
            continue;
        }
        img.poke(word, value);
        debug_assert_eq!(img.peek(word), value);
        return what;
    }
    "none (no durable target)".into()
}

/// Draws of a media fault's target before giving up (the fault is then "none").
const FAULT_DRAWS_MAX: usize = 64;

/// One random media fault: (word, the value it would take, what it is), or None for a
/// misdirected write drawn onto its own entry.
fn fault_target(
    img: &SimRegion,
    g: &Geometry,
    touched: &[u64],
    rng: &mut SmallRng,
) -> Option<(u64, u64, String)> {
    // The superblock's word index below is taken modulo a page: copy 2 starts on one.
    debug_assert!(
        g.sb2_off.is_multiple_of(4096),
        "superblock copy 2 is page-aligned"
    );
    let bit = 1u64 << rng.gen_range(0..64);
    let target = match rng.gen_range(0..4) {
        0 if !touched.is_empty() => {
            let l = touched[rng.gen_range(0..touched.len())];
            let w = g.map_entry_off(l) / 8;
            (
                w,
                img.peek(w) ^ bit,
                format!("bit flip in the map entry of LBA {l}"),
            )
        }
        1 if touched.len() > 1 => {
            let a = touched[rng.gen_range(0..touched.len())];
            let b = touched[rng.gen_range(0..touched.len())];
            if a == b {
                return None;
            }
            let w = g.map_entry_off(a) / 8;
            (
                w,
                img.peek(g.map_entry_off(b) / 8),
                format!("misdirected write: LBA {b}'s map entry written into LBA {a}'s"),
            )
        }
        2 => {
            let copy = rng.gen_range(0..2u64);
            let w = copy * (g.sb2_off / 8) + rng.gen_range(0..16);
            (
                w,
                img.peek(w) ^ bit,
                format!("bit flip in superblock copy {} word {}", copy + 1, w % 512),
            )
        }
        _ => {
            // Any of the slot's first 40 words: the fast record's first copy (header and
            // entries), the paper replicas, commit word and intent body; busy or idle.
            let lane = rng.gen_range(0..g.lanes);
            let w = g.slot_off(lane) / 8 + rng.gen_range(0..40u64);
            (
                w,
                img.peek(w) ^ bit,
                format!(
                    "bit flip in the journal slot of lane {lane}, word {}",
                    w - g.slot_off(lane) / 8
                ),
            )
        }
    };
    debug_assert!(
        target.0 < img.len() / 8,
        "the fault's word is in the region"
    );
    Some(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_names_follow_the_scenarios() {
        let t = NvramTarget::new();
        assert_eq!(t.scenarios().len(), SCENARIOS.len());
        for (i, (_, name)) in SCENARIOS.iter().enumerate() {
            assert_eq!(t.scenarios()[i], *name);
        }
        assert_eq!(t.bugs().len(), bugs::BUGS.len());
        assert!(t.bugs().iter().all(|b| bugs::by_name(b.name).is_some()));
    }
}
