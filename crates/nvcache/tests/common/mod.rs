//! Shared by the UBJ tests: an in-memory backing device that notes, for each write and flush,
//! how many NVRAM events preceded it (so that a crash at NVRAM event i can be given the backing
//! contents of that instant), a reference model of the promise, and a small builder.
#![allow(dead_code)]

use nvstack_core::blockdev::{BlockDevice, Caps, Durability};
use nvstack_core::error::{Error, Result};
use nvstack_nvcache::ubj::format::{Settings, BLOCK_BYTES};
use nvstack_nvcache::{create, Ubj};
use nvstack_pmem::crash::SimRegion;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

pub const B: usize = BLOCK_BYTES as usize;

/// One backing-device operation and the NVRAM event count when it happened.
#[derive(Clone, Debug)]
pub enum BackingOp {
    Write { at: usize, lba: u64, data: Vec<u8> },
    Discard { at: usize, lba: u64, count: u64 },
    Flush { at: usize },
}

pub struct MemDisk {
    pub bytes: Mutex<Vec<u8>>,
    pub log: Mutex<Vec<BackingOp>>,
    clock: Mutex<Option<Arc<SimRegion>>>,
    /// When set, every write fails (an I/O error of the backing device).
    pub failing: Mutex<bool>,
}

impl MemDisk {
    pub fn new(blocks: u64) -> MemDisk {
        MemDisk::from_bytes(vec![0; blocks as usize * B])
    }
    pub fn from_bytes(bytes: Vec<u8>) -> MemDisk {
        MemDisk {
            bytes: Mutex::new(bytes),
            log: Mutex::new(Vec::new()),
            clock: Mutex::new(None),
            failing: Mutex::new(false),
        }
    }
    /// Note NVRAM event counts of `region` beside every later operation.
    pub fn clock_by(&self, region: &Arc<SimRegion>) {
        *self.clock.lock().unwrap() = Some(region.clone());
        self.log.lock().unwrap().clear();
    }
    fn now(&self) -> usize {
        self.clock
            .lock()
            .unwrap()
            .as_ref()
            .map_or(0, |r| r.event_count())
    }
    pub fn block(&self, lba: u64) -> Vec<u8> {
        let at = lba as usize * B;
        self.bytes.lock().unwrap()[at..at + B].to_vec()
    }
}

impl BlockDevice for MemDisk {
    fn block_bytes(&self) -> u32 {
        BLOCK_BYTES
    }
    fn blocks(&self) -> u64 {
        (self.bytes.lock().unwrap().len() / B) as u64
    }
    fn caps(&self) -> Caps {
        Caps {
            atomic_blocks: 0,
            scattered: false,
            durability: Durability::OnFlush,
        }
    }
    fn read(&self, lba: u64, buf: &mut [u8]) -> Result<()> {
        let at = lba as usize * B;
        buf.copy_from_slice(&self.bytes.lock().unwrap()[at..at + buf.len()]);
        Ok(())
    }
    fn write(&self, lba: u64, data: &[u8]) -> Result<()> {
        if *self.failing.lock().unwrap() {
            return Err(Error::env("injected backing-device I/O error"));
        }
        let at = lba as usize * B;
        self.bytes.lock().unwrap()[at..at + data.len()].copy_from_slice(data);
        let op = BackingOp::Write {
            at: self.now(),
            lba,
            data: data.to_vec(),
        };
        self.log.lock().unwrap().push(op);
        Ok(())
    }
    fn discard(&self, lba: u64, count: u64) -> Result<()> {
        let at = lba as usize * B;
        self.bytes.lock().unwrap()[at..at + count as usize * B].fill(0);
        let op = BackingOp::Discard {
            at: self.now(),
            lba,
            count,
        };
        self.log.lock().unwrap().push(op);
        Ok(())
    }
    fn flush(&self) -> Result<()> {
        let op = BackingOp::Flush { at: self.now() };
        self.log.lock().unwrap().push(op);
        Ok(())
    }
}

/// The backing contents at NVRAM event `i`: `start` plus the logged operations before it; with
/// `flushed_only`, only those covered by a flush before `i` (the two extremes of a disk that
/// keeps or loses its unflushed writes).
pub fn backing_at(start: &[u8], log: &[BackingOp], i: usize, flushed_only: bool) -> Vec<u8> {
    let upto = backing_upto(log, i, flushed_only);
    let mut bytes = start.to_vec();
    for op in &log[..upto] {
        match op {
            BackingOp::Write { lba, data, .. } => {
                let at = *lba as usize * B;
                bytes[at..at + data.len()].copy_from_slice(data);
            }
            BackingOp::Discard { lba, count, .. } => {
                let at = *lba as usize * B;
                bytes[at..at + *count as usize * B].fill(0);
            }
            BackingOp::Flush { .. } => {}
        }
    }
    bytes
}

/// How many logged operations the backing contents at NVRAM event `i` include.
pub fn backing_upto(log: &[BackingOp], i: usize, flushed_only: bool) -> usize {
    let before = |at: usize| at <= i;
    if flushed_only {
        log.iter()
            .rposition(|op| matches!(op, BackingOp::Flush { at } if before(*at)))
            .map_or(0, |p| p + 1)
    } else {
        log.iter().take_while(|op| before(op_at(op))).count()
    }
}

fn op_at(op: &BackingOp) -> usize {
    match op {
        BackingOp::Write { at, .. } | BackingOp::Discard { at, .. } | BackingOp::Flush { at } => {
            *at
        }
    }
}

/// The promise's reference: the device's contents after each acknowledged commit.
#[derive(Clone, Default)]
pub struct Model {
    /// Contents now (writes since the last commit included); absent blocks are zero.
    pub now: BTreeMap<u64, Vec<u8>>,
    /// Contents after commit k, for k = 0, 1, ...
    pub epochs: Vec<BTreeMap<u64, Vec<u8>>>,
}

impl Model {
    pub fn new() -> Model {
        Model {
            now: BTreeMap::new(),
            epochs: vec![BTreeMap::new()],
        }
    }
    pub fn write(&mut self, lba: u64, data: &[u8]) {
        for (i, b) in data.chunks(B).enumerate() {
            self.now.insert(lba + i as u64, b.to_vec());
        }
    }
    pub fn discard(&mut self, lba: u64, count: u64) {
        for b in lba..lba + count {
            self.now.insert(b, vec![0; B]);
        }
    }
    pub fn commit(&mut self) {
        self.epochs.push(self.now.clone());
    }
    /// The block as epoch `k` left it.
    pub fn at(&self, k: usize, lba: u64) -> Vec<u8> {
        self.epochs[k]
            .get(&lba)
            .cloned()
            .unwrap_or_else(|| vec![0; B])
    }
}

pub fn payload(tag: u64) -> Vec<u8> {
    (0..B)
        .map(|i| (tag.wrapping_mul(31).wrapping_add(i as u64 * 7) >> 2) as u8 ^ tag as u8)
        .collect()
}

pub fn settings_off() -> Settings {
    Settings {
        autocommit_blocks: 0,
        autocommit_ms: 0,
        ..Settings::default()
    }
}

/// A cache of `slots`-ish slots over a backing device of `blocks` blocks (plus its label).
pub fn fresh(
    region_bytes: u64,
    blocks: u64,
    settings: Settings,
) -> (Arc<SimRegion>, Arc<MemDisk>, Ubj<SimRegion>) {
    let region = Arc::new(SimRegion::zeroed(region_bytes));
    let disk = Arc::new(MemDisk::new(blocks + 1));
    create(&*region, &*disk, settings).expect("create");
    let ubj = Ubj::open(region.clone(), disk.clone(), None).expect("open");
    (region, disk, ubj)
}
