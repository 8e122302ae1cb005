//! Both FTLs against a brute-force reference (a map from logical page to its last write) on
//! random sequences: every read returns the last write; every counter is recomputed from a log
//! of the chip's operations (which also checks the chip's rules on its own, without the
//! model's assertions); and a crash after any operation of the log, rebuilt from the spare
//! areas alone, reads every acknowledged write (the one in flight may be old or new).

use nvstack_core::error::Result;
use nvstack_flash::ftl::{Ftl, FtlConfig, FtlKind, Merges};
use nvstack_flash::geometry::Geometry;
use nvstack_flash::nand::{Media, MemMedia, Nand, Oob, Scan};
use proptest::prelude::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

const GEO: Geometry = Geometry {
    page_data_bytes: 512,
    page_spare_bytes: 16,
    pages_per_block: 4,
    blocks: 10,
    spare_blocks: 5,
};

#[derive(Clone, Debug)]
enum Logged {
    Program(u32, u32, Oob),
    Read(u32),
    Erase(u32),
}

/// Memory media that logs every operation (the tag is the page's first four bytes).
struct Recorder {
    mem: MemMedia,
    log: Arc<Mutex<Vec<Logged>>>,
}

impl Media for Recorder {
    fn program(&mut self, ppn: u32, data: &[u8], oob: Oob) -> Result<()> {
        let tag = u32::from_le_bytes(data[..4].try_into().unwrap());
        self.log
            .lock()
            .unwrap()
            .push(Logged::Program(ppn, tag, oob));
        self.mem.program(ppn, data, oob)
    }
    fn read(&mut self, ppn: u32, data: &mut [u8]) -> Result<()> {
        self.log.lock().unwrap().push(Logged::Read(ppn));
        self.mem.read(ppn, data)
    }
    fn erase(&mut self, block: u32) -> Result<()> {
        self.log.lock().unwrap().push(Logged::Erase(block));
        self.mem.erase(block)
    }
    fn scan(&mut self, ppn: u32) -> Result<Scan> {
        self.mem.scan(ppn)
    }
}

fn page(tag: u32) -> Vec<u8> {
    let mut p = vec![(tag % 251) as u8; 512];
    p[..4].copy_from_slice(&tag.to_le_bytes());
    p
}

fn read_tag<M: Media>(f: &mut Ftl<M>, lpn: u32) -> Option<u32> {
    let mut buf = vec![0u8; 512];
    let mapped = f.read(lpn, &mut buf).unwrap();
    if !mapped {
        assert!(buf.iter().all(|&b| b == 0), "an unmapped page reads zeros");
        return None;
    }
    let tag = u32::from_le_bytes(buf[..4].try_into().unwrap());
    assert_eq!(buf, page(tag), "lpn {lpn}: a whole page of one write");
    Some(tag)
}

/// The counters recomputed from the log, and the chip's rules checked on the log alone.
fn recount(log: &[Logged], f: &Ftl<Recorder>) {
    let mut reads = vec![0u32; GEO.pages() as usize];
    let mut programs = vec![0u32; GEO.pages() as usize];
    let mut erases = vec![0u32; GEO.blocks as usize];
    let mut next = vec![0u32; GEO.blocks as usize];
    let ppb = GEO.pages_per_block;
    for op in log {
        match *op {
            Logged::Program(ppn, _, _) => {
                let (b, p) = ((ppn / ppb) as usize, ppn % ppb);
                assert!(p >= next[b], "page {ppn}: programmed twice or out of order");
                next[b] = p + 1;
                programs[ppn as usize] += 1;
            }
            Logged::Read(ppn) => reads[ppn as usize] += 1,
            Logged::Erase(b) => {
                next[b as usize] = 0;
                erases[b as usize] += 1;
            }
        }
    }
    let c = f.counters();
    assert_eq!(c.page_reads, reads);
    assert_eq!(c.page_programs, programs);
    assert_eq!(c.block_erases, erases);
    assert_eq!(c.reads, reads.iter().map(|&x| u64::from(x)).sum::<u64>());
    assert_eq!(
        c.programs,
        programs.iter().map(|&x| u64::from(x)).sum::<u64>()
    );
    assert_eq!(c.erases, erases.iter().map(|&x| u64::from(x)).sum::<u64>());
}

/// One host write: its page, its tag, the log length when it began and when it returned.
struct Ack {
    lpn: u32,
    tag: u32,
    begun: usize,
    done: usize,
}

/// The chip as it was after the first `k` operations of the log, rebuilt.
fn crash_after(log: &[Logged], k: usize, cfg: FtlConfig) -> Ftl<MemMedia> {
    let mut mem = MemMedia::new(&GEO);
    for op in &log[..k] {
        match *op {
            Logged::Program(ppn, tag, oob) => mem.program(ppn, &page(tag), oob).unwrap(),
            Logged::Erase(b) => mem.erase(b).unwrap(),
            Logged::Read(_) => {}
        }
    }
    Ftl::rebuild(Nand::new(GEO, mem), cfg, Merges::default()).unwrap()
}

fn check_crash(log: &[Logged], acks: &[Ack], k: usize, cfg: FtlConfig) {
    let mut f = crash_after(log, k, cfg);
    let lpns = GEO.logical_pages() as u32;
    for lpn in 0..lpns {
        let acked = acks.iter().rev().find(|a| a.lpn == lpn && a.done <= k);
        let in_flight = acks
            .iter()
            .find(|a| a.lpn == lpn && a.begun < k && a.done > k);
        let got = read_tag(&mut f, lpn);
        let ok =
            got == acked.map(|a| a.tag) || (in_flight.is_some() && got == in_flight.map(|a| a.tag));
        assert!(
            ok,
            "crash after op {k}: lpn {lpn} reads {got:?}, acknowledged {:?}",
            acked.map(|a| a.tag)
        );
    }
    // The rebuilt FTL goes on working: rewrite everything and read it back.
    for lpn in 0..lpns {
        f.write(lpn, &page(1_000_000 + lpn)).unwrap();
    }
    for lpn in 0..lpns {
        assert_eq!(
            read_tag(&mut f, lpn),
            Some(1_000_000 + lpn),
            "after recovery"
        );
    }
}

fn run(kind: FtlKind, log_blocks: u32, ops: &[(bool, u32)], crash_points: &[usize]) {
    let cfg = FtlConfig { kind, log_blocks };
    cfg.validate(&GEO).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let media = Recorder {
        mem: MemMedia::new(&GEO),
        log: log.clone(),
    };
    let mut f = Ftl::new(Nand::new(GEO, media), cfg);
    let lpns = GEO.logical_pages() as u32;
    let mut model: HashMap<u32, u32> = HashMap::new();
    let mut acks = Vec::new();
    let (mut host_writes, mut mapped_reads) = (0u64, 0u64);
    for (i, &(write, l)) in ops.iter().enumerate() {
        let lpn = l % lpns;
        if write {
            let begun = log.lock().unwrap().len();
            f.write(lpn, &page(i as u32 + 1)).unwrap();
            model.insert(lpn, i as u32 + 1);
            acks.push(Ack {
                lpn,
                tag: i as u32 + 1,
                begun,
                done: log.lock().unwrap().len(),
            });
            host_writes += 1;
        } else {
            let got = read_tag(&mut f, lpn);
            assert_eq!(
                got,
                model.get(&lpn).copied(),
                "lpn {lpn}: not the last write"
            );
            mapped_reads += u64::from(got.is_some());
        }
    }
    let log = log.lock().unwrap().clone();
    recount(&log, &f);
    let m = f.merges();
    assert_eq!(
        f.counters().programs,
        host_writes + m.copies,
        "programs: writes and copies"
    );
    assert_eq!(
        f.counters().reads,
        mapped_reads + m.copies,
        "reads: mapped reads and copies"
    );
    for &c in crash_points {
        check_crash(&log, &acks, c % (log.len() + 1), cfg);
    }
}

fn ops() -> impl Strategy<Value = Vec<(bool, u32)>> {
    // Mostly writes, skewed to a few hot pages so that every merge kind occurs.
    prop::collection::vec(
        (prop::bool::weighted(0.8), prop_oneof![0u32..6, 0u32..1000]),
        1..400,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn log_block_ftl_matches_the_reference(
        log_blocks in 1u32..=3,
        ops in ops(),
        crashes in prop::collection::vec(0usize..10_000, 4),
    ) {
        run(FtlKind::LogBlock, log_blocks, &ops, &crashes);
    }

    #[test]
    fn page_ftl_matches_the_reference(
        ops in ops(),
        crashes in prop::collection::vec(0usize..10_000, 4),
    ) {
        run(FtlKind::Page, 0, &ops, &crashes);
    }
}

/// Every merge kind occurs in the sequences the property tests draw (so they test them).
#[test]
fn the_random_sequences_reach_every_merge_kind() {
    let mut seen = Merges::default();
    let mut rng = 12345u64;
    for _ in 0..20 {
        let cfg = FtlConfig {
            kind: FtlKind::LogBlock,
            log_blocks: 2,
        };
        let mut f = Ftl::new(Nand::new(GEO, MemMedia::new(&GEO)), cfg);
        for i in 0..300u32 {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = (rng >> 33) as u32;
            let lpn = if r.is_multiple_of(5) {
                r % 20
            } else {
                (r / 7) % 6
            };
            f.write(lpn, &page(i)).unwrap();
        }
        let m = f.merges();
        seen.switch += m.switch;
        seen.partial += m.partial;
        seen.full += m.full;
    }
    assert!(
        seen.switch > 0 && seen.partial > 0 && seen.full > 0,
        "{seen:?}"
    );
}
