//! Type-dependent ordering (seed 000, section 6 and Table 6): one persist method per region
//! kind. User space can issue two of the paper's five methods: MNT (non-temporal stores +
//! sfence) and MCF (cached stores + a line flush + sfence, with clflush, clflushopt or clwb).
//! MWT (write-through), MUC (uncachable) and MWC (write-combining) need page attributes that
//! only the kernel can set: they are not offered, and not faked.

use super::cpu::{self, FlushKind};
use nvstack_core::error::{Error, Result};

/// How a store is made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Method {
    /// MNT: non-temporal stores, then sfence. Touches only the words written (no write
    /// disturbance of neighbouring words, seed section 6.2).
    Nt,
    /// MCF: cached stores, a line flush, then sfence. The whole line is written back, so a
    /// power cut during the write-back may disturb any word of the line.
    Flush(FlushKind),
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Nt => "nt",
            Method::Flush(k) => k.name(),
        }
    }

    /// True when an aligned 8-byte store persisted this way can only ever be old or new on
    /// media: non-temporal stores touch their own words only, while a line write-back can
    /// tear any word of the line.
    pub fn word_atomic(self) -> bool {
        matches!(self, Method::Nt)
    }
}

/// The three region kinds of nvramdisk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegionKind {
    Data,
    Map,
    Journal,
}

/// One persist method per region kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct OrderingPolicy {
    pub name: &'static str,
    /// On-media id (superblock byte).
    pub id: u8,
    pub data: Method,
    pub map: Method,
    pub journal: Method,
}

impl OrderingPolicy {
    pub fn method(&self, kind: RegionKind) -> Method {
        match kind {
            RegionKind::Data => self.data,
            RegionKind::Map => self.map,
            RegionKind::Journal => self.journal,
        }
    }
}

const NT: Method = Method::Nt;
const CF: Method = Method::Flush(FlushKind::Clflush);
const CFO: Method = Method::Flush(FlushKind::Clflushopt);
const CWB: Method = Method::Flush(FlushKind::Clwb);

/// The presets, after Table 6 as far as user space can express it.
pub const POLICIES: [OrderingPolicy; 5] = [
    // P4: MNT everywhere.
    OrderingPolicy {
        name: "p4",
        id: 4,
        data: NT,
        map: NT,
        journal: NT,
    },
    // P3 = MNT data, MWT map, MNT journal. MWT needs a write-through page attribute; its
    // user-space stand-in is an 8-byte non-temporal store to the map word, which writes only
    // that word, as write-through would. The instructions are therefore those of p4; the name
    // is kept so results line up with the paper's Table 6.
    OrderingPolicy {
        name: "p3-nt",
        id: 3,
        data: NT,
        map: NT,
        journal: NT,
    },
    // P6: MCF everywhere, with the paper's clflush.
    OrderingPolicy {
        name: "p6",
        id: 6,
        data: CF,
        map: CF,
        journal: CF,
    },
    OrderingPolicy {
        name: "p6-clflushopt",
        id: 7,
        data: CFO,
        map: CFO,
        journal: CFO,
    },
    OrderingPolicy {
        name: "p6-clwb",
        id: 8,
        data: CWB,
        map: CWB,
        journal: CWB,
    },
];

/// The default, and why: non-temporal stores are the fastest method for 4 KiB blocks (seed
/// Fig. 7b, and our `nvstack bench`), and the only user-space method under which a map-word
/// store cannot disturb its neighbours (seed 6.2). Provisional until the crash checker and the
/// benchmark suites confirm it.
pub const DEFAULT_POLICY: &str = "p4";

pub fn policy_names() -> Vec<&'static str> {
    POLICIES.iter().map(|p| p.name).collect()
}

pub fn policy_by_name(name: &str) -> Result<OrderingPolicy> {
    let p = POLICIES
        .iter()
        .find(|p| p.name == name)
        .copied()
        .ok_or_else(|| {
            Error::bad(format!(
                "unknown ordering '{name}': expected one of {} (write-through, uncachable and \
             write-combining need kernel page attributes and are not available in user space)",
                policy_names().join(", ")
            ))
        })?;
    // Whether the CPU can run it is checked where a region is opened or formatted
    // (check_available_on): the crash checker's simulated region runs every policy.
    Ok(p)
}

pub fn policy_by_id(id: u8) -> Option<OrderingPolicy> {
    POLICIES.iter().find(|p| p.id == id).copied()
}

/// Refuse a policy whose flush instruction this CPU lacks.
pub fn check_available(p: &OrderingPolicy) -> Result<()> {
    check_with(p, cpu::has_flush)
}

/// Refuse a policy whose flush instruction `region` cannot run (real memory: this CPU lacks
/// it; a simulated region models every kind).
pub fn check_available_on<R: super::Region + ?Sized>(p: &OrderingPolicy, region: &R) -> Result<()> {
    check_with(p, |k| region.has_flush(k))
}

fn check_with(p: &OrderingPolicy, has: impl Fn(FlushKind) -> bool) -> Result<()> {
    for m in [p.data, p.map, p.journal] {
        if let Method::Flush(k) = m {
            if !has(k) {
                return Err(Error::env(format!(
                    "ordering '{}' needs {} but this CPU does not have it",
                    p.name,
                    k.name()
                )));
            }
        }
    }
    Ok(())
}

/// The flush policy (p6 family) with the best flush instruction this CPU has: clwb, else
/// clflushopt, else clflush. Tests of the flush path on real memory use it.
pub fn best_flush_policy() -> &'static str {
    match cpu::best_flush() {
        FlushKind::Clwb => "p6-clwb",
        FlushKind::Clflushopt => "p6-clflushopt",
        FlushKind::Clflush => "p6",
    }
}
