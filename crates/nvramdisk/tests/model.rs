//! Model-based property test of the nvramdisk: random sequences of writes (contiguous and
//! scattered atomic), discards, reads, bad calls and close+reopen, checked step by step against
//! a plain in-memory model (a Vec of block contents, zeros where never written or discarded).
//!
//! The devices are tiny (64 to ~210 blocks, 1 to 4 lanes) so that shadow pages are recycled
//! constantly. Every configuration (protocol x ordering) runs as its own test.

use nvstack_core::blockdev::BlockDevice;
use nvstack_core::Error;
use nvstack_nvramdisk::{
    format_region, FormatOptions, Geometry, NvramDisk, OpenOptions, Protocol, ATOMIC_BLOCKS_MAX,
};
use nvstack_pmem::ordering::policy_by_name;
use nvstack_pmem::MmapRegion;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::sync::Arc;

/// Cases per configuration (PROPTEST_CASES overrides it).
const CASES: u32 = 512;

/// How the contents of a write are made.
#[derive(Clone, Debug)]
enum Fill {
    /// Pseudo-random bytes from a seed (distinct per block).
    Random(u64),
    /// All zeros: the block is still mapped afterwards.
    Zeros,
    /// One byte repeated.
    Byte(u8),
}

/// Calls that must fail and change nothing.
#[derive(Clone, Copy, Debug)]
enum BadKind {
    ReadPastEnd,
    ReadOverflow,
    ReadBadLen,
    ReadEmpty,
    WritePastEnd,
    WriteOverflow,
    WriteBadLen,
    WriteEmpty,
    Write65,
    AtomicOutOfRange,
    AtomicDuplicate,
    AtomicBadLen,
    AtomicEmpty,
    Atomic65,
    DiscardZero,
    DiscardPastEnd,
    DiscardOverflow,
}

const BAD_KINDS: [BadKind; 17] = [
    BadKind::ReadPastEnd,
    BadKind::ReadOverflow,
    BadKind::ReadBadLen,
    BadKind::ReadEmpty,
    BadKind::WritePastEnd,
    BadKind::WriteOverflow,
    BadKind::WriteBadLen,
    BadKind::WriteEmpty,
    BadKind::Write65,
    BadKind::AtomicOutOfRange,
    BadKind::AtomicDuplicate,
    BadKind::AtomicBadLen,
    BadKind::AtomicEmpty,
    BadKind::Atomic65,
    BadKind::DiscardZero,
    BadKind::DiscardPastEnd,
    BadKind::DiscardOverflow,
];

/// Positions are seeds, reduced modulo the device size when the case runs (the size is only
/// known then).
#[derive(Clone, Debug)]
enum Op {
    Write {
        at: u64,
        n: usize,
        fill: Fill,
    },
    Atomic {
        seeds: Vec<u64>,
        fill: Fill,
    },
    Discard {
        at: u64,
        n: u64,
    },
    /// A discard of 60 blocks up to the whole device: crosses the 64-block chunking.
    DiscardBig {
        at: u64,
        n: u64,
    },
    Read {
        at: u64,
        n: usize,
    },
    Flush,
    Reopen,
    Bad {
        kind: BadKind,
        a: u64,
        b: u64,
    },
}

#[derive(Clone, Debug)]
struct Case {
    lanes: u32,
    block_bytes: u32,
    target_blocks: u64,
    ops: Vec<Op>,
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn fill_bytes(fill: &Fill, len: usize) -> Vec<u8> {
    match fill {
        Fill::Zeros => vec![0; len],
        Fill::Byte(v) => vec![*v; len],
        Fill::Random(seed) => {
            let mut s = *seed;
            let mut out = Vec::with_capacity(len + 8);
            while out.len() < len {
                out.extend_from_slice(&splitmix(&mut s).to_le_bytes());
            }
            out.truncate(len);
            out
        }
    }
}

/// The smallest region that gives at least `target` blocks.
fn region_len(block_bytes: u32, lanes: u32, target: u64) -> u64 {
    Geometry::region_bytes_for(target, block_bytes, lanes).expect("valid geometry")
}

fn fill_strategy() -> impl Strategy<Value = Fill> {
    prop_oneof![
        6 => any::<u64>().prop_map(Fill::Random),
        1 => Just(Fill::Zeros),
        1 => any::<u8>().prop_map(Fill::Byte),
    ]
}

/// Half the positions fall in the first 16 blocks, so that blocks are overwritten often.
fn at_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![0..16u64, any::<u64>()]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (at_strategy(), 1..=8usize, fill_strategy())
            .prop_map(|(at, n, fill)| Op::Write { at, n, fill }),
        5 => (prop::collection::vec(at_strategy(), 2..=8), fill_strategy())
            .prop_map(|(seeds, fill)| Op::Atomic { seeds, fill }),
        3 => (at_strategy(), 1..=10u64).prop_map(|(at, n)| Op::Discard { at, n }),
        1 => (any::<u64>(), any::<u64>()).prop_map(|(at, n)| Op::DiscardBig { at, n }),
        6 => (at_strategy(), 1..=8usize).prop_map(|(at, n)| Op::Read { at, n }),
        1 => Just(Op::Flush),
        1 => Just(Op::Reopen),
        3 => (0..BAD_KINDS.len(), any::<u64>(), any::<u64>())
            .prop_map(|(k, a, b)| Op::Bad { kind: BAD_KINDS[k], a, b }),
    ]
}

fn case_strategy() -> impl Strategy<Value = Case> {
    (
        1..=4u32,
        prop_oneof![Just(512u32), Just(4096u32)],
        64..=200u64,
        prop::collection::vec(op_strategy(), 1..=60),
    )
        .prop_map(|(lanes, block_bytes, target_blocks, ops)| Case {
            lanes,
            block_bytes,
            target_blocks,
            ops,
        })
}

/// The reference: one entry per block, None when it reads as zeros without a page (never
/// written, or discarded), Some(contents) when it is mapped (even if the contents are zeros).
struct Model {
    blocks: Vec<Option<Vec<u8>>>,
    block_bytes: usize,
}

impl Model {
    fn expected(&self, lba: u64) -> Vec<u8> {
        match &self.blocks[lba as usize] {
            Some(d) => d.clone(),
            None => vec![0; self.block_bytes],
        }
    }
    fn mapped(&self) -> u64 {
        self.blocks.iter().filter(|b| b.is_some()).count() as u64
    }
}

type Dev = NvramDisk<MmapRegion>;

/// Expected values of the device counters since the last open.
#[derive(Default)]
struct Counters {
    writes: u64,
    blocks_written: u64,
    discards: u64,
}

fn check_counters(dev: &Dev, c: &Counters, when: &str) -> Result<(), TestCaseError> {
    let s = dev.stats();
    prop_assert_eq!(s.writes, c.writes, "writes counter {}", when);
    prop_assert_eq!(
        s.blocks_written,
        c.blocks_written,
        "blocks_written counter {}",
        when
    );
    prop_assert_eq!(s.discards, c.discards, "discards counter {}", when);
    Ok(())
}

/// Read the whole device in one call and compare every block with the model.
fn check_all(dev: &Dev, model: &Model, when: &str) -> Result<(), TestCaseError> {
    let b = model.block_bytes;
    let n = model.blocks.len();
    let mut buf = vec![0xa5u8; n * b];
    dev.read(0, &mut buf)
        .map_err(|e| TestCaseError::fail(format!("{when}: full read: {e}")))?;
    for lba in 0..n {
        let got = &buf[lba * b..(lba + 1) * b];
        if got != model.expected(lba as u64).as_slice() {
            return Err(TestCaseError::fail(format!(
                "{when}: block {lba} differs from the model (model: {}, got first bytes {:02x?})",
                if model.blocks[lba].is_some() {
                    "mapped"
                } else {
                    "zeros"
                },
                &got[..16]
            )));
        }
    }
    Ok(())
}

fn reopen_and_check(
    region: &Arc<MmapRegion>,
    model: &Model,
    when: &str,
) -> Result<Dev, TestCaseError> {
    let dev = NvramDisk::open(region.clone(), OpenOptions::default())
        .map_err(|e| TestCaseError::fail(format!("{when}: reopen failed: {e}")))?;
    let rep = dev.recovery_report().clone();
    prop_assert!(
        rep.was_clean(),
        "{}: recovery after a clean close did work: {:?}",
        when,
        rep
    );
    prop_assert!(
        rep.actions.is_empty(),
        "{}: recovery actions after a clean close: {:?}",
        when,
        rep
    );
    prop_assert_eq!(
        rep.mapped_blocks,
        model.mapped(),
        "{}: mapped blocks after reopen (model holds {} written-and-not-discarded blocks)",
        when,
        model.mapped()
    );
    prop_assert_eq!(
        rep.mapped_blocks + rep.free_pages,
        dev.geometry().pages,
        "{}: pages are mapped or free",
        when
    );
    check_all(&dev, model, when)?;
    Ok(dev)
}

/// Issue one bad call. Every one of them must be refused.
fn bad_call(dev: &Dev, kind: BadKind, a: u64, x: u64) -> nvstack_core::Result<()> {
    let blocks = dev.blocks();
    let b = dev.block_bytes() as usize;
    let small = (x % 8 + 1) as usize; // 1..=8 blocks
    match kind {
        BadKind::ReadPastEnd => {
            // Starts inside or just past the end, ends past it.
            let lba = blocks + 1 - small as u64 + a % (small as u64 + 2);
            let mut buf = vec![0u8; small * b];
            dev.read(lba, &mut buf)
        }
        BadKind::ReadOverflow => {
            let mut buf = vec![0u8; 2 * b];
            dev.read(u64::MAX - (a % 2), &mut buf)
        }
        BadKind::ReadBadLen => {
            let len = small * b + 1 + (a as usize % (b - 1));
            let mut buf = vec![0u8; len];
            dev.read(a % blocks.saturating_sub(16).max(1), &mut buf)
        }
        BadKind::ReadEmpty => dev.read(a % blocks, &mut []),
        BadKind::WritePastEnd => {
            let lba = blocks + 1 - small as u64 + a % (small as u64 + 2);
            dev.write(lba, &fill_bytes(&Fill::Random(x), small * b))
        }
        BadKind::WriteOverflow => {
            dev.write(u64::MAX - (a % 2), &fill_bytes(&Fill::Random(x), 2 * b))
        }
        BadKind::WriteBadLen => {
            let len = if a & 1 == 0 {
                small * b - 1 - (x as usize % (b - 1))
            } else {
                small * b + 8
            };
            dev.write(a % 8, &fill_bytes(&Fill::Random(x), len))
        }
        BadKind::WriteEmpty => dev.write(a % blocks, &[]),
        BadKind::Write65 => {
            let n = ATOMIC_BLOCKS_MAX + 1 + (a % 2) as usize;
            dev.write(0, &fill_bytes(&Fill::Random(x), n * b))
        }
        BadKind::AtomicOutOfRange => {
            let mut lbas: Vec<u64> = (0..small as u64).map(|i| (a + i * 7) % blocks).collect();
            lbas.sort_unstable();
            lbas.dedup();
            let bad = if x & 1 == 0 { blocks + x % 5 } else { u64::MAX };
            let pos = (x as usize) % (lbas.len() + 1);
            lbas.insert(pos, bad);
            dev.write_atomic(&lbas, &fill_bytes(&Fill::Random(x), lbas.len() * b))
        }
        BadKind::AtomicDuplicate => {
            let mut lbas: Vec<u64> = (0..small as u64 + 1)
                .map(|i| (a + i * 5) % blocks)
                .collect();
            lbas.sort_unstable();
            lbas.dedup();
            let dup = lbas[(x as usize) % lbas.len()];
            let pos = (x as usize / 7) % (lbas.len() + 1);
            lbas.insert(pos, dup);
            dev.write_atomic(&lbas, &fill_bytes(&Fill::Random(x), lbas.len() * b))
        }
        BadKind::AtomicBadLen => {
            let lbas: Vec<u64> = (0..small as u64 + 1)
                .map(|i| (a % 8 + i * 3) % blocks)
                .collect();
            let len = match x % 3 {
                0 => (lbas.len() - 1) * b,
                1 => (lbas.len() + 1) * b,
                _ => lbas.len() * b - 8,
            };
            dev.write_atomic(&lbas, &fill_bytes(&Fill::Random(x), len))
        }
        BadKind::AtomicEmpty => dev.write_atomic(&[], &[]),
        BadKind::Atomic65 => {
            // 65 distinct LBAs when the device has that many (else some are out of range).
            let lbas: Vec<u64> = (0..ATOMIC_BLOCKS_MAX as u64 + 1)
                .map(|i| (a + i) % blocks.max(65))
                .collect();
            dev.write_atomic(&lbas, &fill_bytes(&Fill::Random(x), lbas.len() * b))
        }
        BadKind::DiscardZero => dev.discard(a % blocks, 0),
        BadKind::DiscardPastEnd => {
            let n = x % 10 + 1;
            dev.discard(blocks + 1 - n + a % 3, n)
        }
        BadKind::DiscardOverflow => dev.discard(u64::MAX - (a % 4), 8),
    }
}

fn run_case(protocol: Protocol, ordering: &str, case: &Case) -> Result<(), TestCaseError> {
    let ordering = policy_by_name(ordering).expect("ordering checked by the caller");
    let len = region_len(case.block_bytes, case.lanes, case.target_blocks);
    let geo = Geometry::compute(len, case.block_bytes, case.lanes).expect("geometry");
    prop_assert!(
        geo.blocks >= 64,
        "region sizing gave only {} blocks",
        geo.blocks
    );
    let region = Arc::new(MmapRegion::anonymous(len).expect("anonymous region"));
    format_region(
        &*region,
        &FormatOptions {
            block_bytes: case.block_bytes,
            lanes: case.lanes,
            protocol,
            ordering,
        },
    )
    .expect("format");
    let mut dev = NvramDisk::open(region.clone(), OpenOptions::default()).expect("open");
    let blocks = dev.blocks();
    prop_assert_eq!(blocks, geo.blocks);
    prop_assert_eq!(dev.recovery_report().mapped_blocks, 0);
    let b = case.block_bytes as usize;
    let mut model = Model {
        blocks: vec![None; blocks as usize],
        block_bytes: b,
    };
    let mut counters = Counters::default();

    for (step, op) in case.ops.iter().enumerate() {
        let when = format!("op {step} ({op:?})");
        match op {
            Op::Write { at, n, fill } => {
                let n = *n as u64;
                let lba = at % (blocks - n + 1);
                let data = fill_bytes(fill, n as usize * b);
                dev.write(lba, &data)
                    .map_err(|e| TestCaseError::fail(format!("{when}: {e}")))?;
                for i in 0..n as usize {
                    model.blocks[lba as usize + i] = Some(data[i * b..(i + 1) * b].to_vec());
                }
                counters.writes += 1;
                counters.blocks_written += n;
            }
            Op::Atomic { seeds, fill } => {
                let mut lbas: Vec<u64> = Vec::with_capacity(seeds.len());
                for s in seeds {
                    let mut l = s % blocks;
                    while lbas.contains(&l) {
                        l = (l + 1) % blocks;
                    }
                    lbas.push(l);
                }
                // Each block gets distinct contents (Random seeds differ per call).
                let data = fill_bytes(fill, lbas.len() * b);
                dev.write_atomic(&lbas, &data)
                    .map_err(|e| TestCaseError::fail(format!("{when} lbas {lbas:?}: {e}")))?;
                for (i, &l) in lbas.iter().enumerate() {
                    model.blocks[l as usize] = Some(data[i * b..(i + 1) * b].to_vec());
                }
                counters.writes += 1;
                counters.blocks_written += lbas.len() as u64;
            }
            Op::Discard { at, n } | Op::DiscardBig { at, n } => {
                let n = if matches!(op, Op::DiscardBig { .. }) {
                    60 + n % (blocks - 59)
                } else {
                    *n
                };
                let lba = at % (blocks - n + 1);
                dev.discard(lba, n)
                    .map_err(|e| TestCaseError::fail(format!("{when}: {e}")))?;
                for l in lba..lba + n {
                    model.blocks[l as usize] = None;
                }
                counters.discards += 1;
            }
            Op::Read { at, n } => {
                let n = *n as u64;
                let lba = at % (blocks - n + 1);
                let mut buf = vec![0x5au8; n as usize * b];
                dev.read(lba, &mut buf)
                    .map_err(|e| TestCaseError::fail(format!("{when}: {e}")))?;
                for i in 0..n {
                    let got = &buf[i as usize * b..(i as usize + 1) * b];
                    prop_assert!(
                        got == model.expected(lba + i).as_slice(),
                        "{}: block {} differs from the model",
                        when,
                        lba + i
                    );
                }
            }
            Op::Flush => {
                dev.flush()
                    .map_err(|e| TestCaseError::fail(format!("{when}: {e}")))?;
            }
            Op::Reopen => {
                drop(dev);
                dev = reopen_and_check(&region, &model, &when)?;
                counters = Counters::default();
            }
            Op::Bad { kind, a, b: x } => {
                let before = dev.stats();
                match bad_call(&dev, *kind, *a, *x) {
                    Ok(()) => {
                        return Err(TestCaseError::fail(format!(
                            "{when}: bad call was accepted"
                        )))
                    }
                    Err(Error::BadInput(_)) => {}
                    Err(e) => {
                        return Err(TestCaseError::fail(format!(
                            "{when}: refused, but not as bad input: {e:?}"
                        )))
                    }
                }
                let after = dev.stats();
                prop_assert_eq!(
                    after.persist.stores,
                    before.persist.stores,
                    "{}: stores issued",
                    when
                );
                prop_assert_eq!(after.reads, before.reads, "{}: reads counter", when);
                check_counters(&dev, &counters, &when)?;
                check_all(&dev, &model, &when)?;
            }
        }
    }
    check_counters(&dev, &counters, "at the end")?;
    check_all(&dev, &model, "at the end, before closing")?;
    drop(dev);
    let dev = reopen_and_check(&region, &model, "final reopen")?;
    // And the device still works after the final reopen.
    let data = fill_bytes(&Fill::Random(7), b);
    dev.write(blocks - 1, &data)
        .map_err(|e| TestCaseError::fail(format!("final write: {e}")))?;
    model.blocks[blocks as usize - 1] = Some(data);
    check_all(&dev, &model, "after the final write")?;
    Ok(())
}

fn run_config(protocol: Protocol, ordering: &str) {
    // p4 and `best_flush_policy()` run on every x86-64 CPU: a policy that does not resolve is
    // a failure, never a skip that would count as passed.
    if let Err(e) = policy_by_name(ordering) {
        panic!("{protocol:?}/{ordering}: {e}");
    }
    let config = Config {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(CASES),
        failure_persistence: None,
        // A failing case names the configuration; shrinking stays bounded.
        max_shrink_iters: 4096,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let result = runner.run(&case_strategy(), |case| run_case(protocol, ordering, &case));
    if let Err(e) = result {
        panic!("{protocol:?} with ordering {ordering}: {e}");
    }
}

#[test]
fn model_fast_p4() {
    run_config(Protocol::Fast, "p4");
}

#[test]
fn model_fast_p6_best_flush() {
    run_config(Protocol::Fast, nvstack_pmem::ordering::best_flush_policy());
}

#[test]
fn model_paper_p4() {
    run_config(Protocol::Paper, "p4");
}

#[test]
fn model_paper_p6_best_flush() {
    run_config(Protocol::Paper, nvstack_pmem::ordering::best_flush_policy());
}

/// The sizing helper covers the whole requested range (so the cases really are small).
#[test]
fn region_sizing_gives_small_devices() {
    for lanes in 1..=4 {
        for bb in [512u32, 4096] {
            for target in [64u64, 100, 200] {
                let g = Geometry::compute(region_len(bb, lanes, target), bb, lanes).unwrap();
                assert!(
                    g.blocks >= target && g.blocks <= target + 16,
                    "lanes {lanes} block {bb} target {target}: {} blocks",
                    g.blocks
                );
            }
        }
    }
}
