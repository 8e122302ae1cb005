//! Synthetic workloads after WHISPER's kinds (seed 003 Table III), since its traces are not
//! available: each thread updates a persistent structure of its own, flushing and fencing what
//! it writes as persistent code does, with a commit of its region every `commit_every`
//! updates. Loads to stores are near the paper's 1.96 : 1 (each kernel's mix is below).

use crate::trace::{Op, Workload};
use nvstack_core::error::{Error, Result};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::VecDeque;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kernel {
    /// Hash-map insert: read the bucket and two chain nodes and the key, write the new
    /// node and the bucket head (4 loads : 2 stores).
    Hashmap,
    /// B-tree insert: read a root-to-leaf path of four nodes, write the leaf and its
    /// parent's count when it splits one time in four (4 loads : 2 or 3 stores; ~1.8 : 1).
    Btree,
    /// Key-value get/put, half each: a get reads index and value (2 loads), a put reads
    /// the index and writes value and index (2 loads : 2 stores) - plus a version check.
    Kv,
    /// Transactional update with an undo log: read two records and the log head, log the old
    /// value, then write the record (5 loads : 2 stores, ~2.5 : 1 with the log).
    Tx,
}

impl Kernel {
    pub const ALL: [Kernel; 4] = [Kernel::Hashmap, Kernel::Btree, Kernel::Kv, Kernel::Tx];

    pub fn name(self) -> &'static str {
        match self {
            Kernel::Hashmap => "hashmap",
            Kernel::Btree => "btree",
            Kernel::Kv => "kv",
            Kernel::Tx => "tx",
        }
    }

    pub fn parse(s: &str) -> Result<Kernel> {
        Kernel::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| Error::bad(format!("kernel {s:?}: expected hashmap, btree, kv or tx")))
    }
}

/// A synthetic workload's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct KernelConfig {
    pub kernel: Kernel,
    pub threads: u32,
    pub updates_per_thread: u64,
    /// A commit of the thread's region after every N updates.
    pub commit_every: u64,
    /// Mean plain instructions between two memory operations.
    pub gap_instructions: u32,
    /// Each thread's persistent region.
    pub region_bytes: u64,
    pub seed: u64,
}

impl Default for KernelConfig {
    fn default() -> KernelConfig {
        KernelConfig {
            kernel: Kernel::Hashmap,
            threads: 16,
            updates_per_thread: 2_000,
            commit_every: 1,
            gap_instructions: 20,
            region_bytes: 8 << 20,
            seed: 1,
        }
    }
}

impl KernelConfig {
    pub fn validate(&self) -> Result<()> {
        let bad =
            |f: &str, v: u64, want: &str| Err(Error::bad(format!("{f} = {v}: must be {want}")));
        if !(1..=1024).contains(&self.threads) {
            return bad("threads", self.threads.into(), "1 to 1024");
        }
        if self.commit_every == 0 {
            return bad("commit_every", 0, "at least 1");
        }
        if !(1..=1_000_000).contains(&self.gap_instructions) {
            return bad(
                "gap_instructions",
                self.gap_instructions.into(),
                "1 to 1000000",
            );
        }
        if !(64 << 10..=1 << 40).contains(&self.region_bytes)
            || !self.region_bytes.is_power_of_two()
        {
            return bad(
                "region_bytes",
                self.region_bytes,
                "a power of two from 64 KiB to 1 TiB",
            );
        }
        Ok(())
    }
}

struct Thread {
    rng: SmallRng,
    base: u64,
    updates: u64,
    ops: VecDeque<Op>,
    next_node: u64,
    bound: bool,
}

/// The generator: each thread's operations are made an update at a time, never stored whole.
pub struct KernelWorkload {
    cfg: KernelConfig,
    threads: Vec<Thread>,
}

impl KernelWorkload {
    pub fn new(cfg: &KernelConfig) -> Result<KernelWorkload> {
        cfg.validate()?;
        let threads = (0..u64::from(cfg.threads))
            .map(|t| Thread {
                rng: SmallRng::seed_from_u64(cfg.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ t),
                // Regions are disjoint and far apart: threads share no line.
                base: (t + 1) << 40,
                updates: 0,
                ops: VecDeque::new(),
                next_node: 0,
                bound: false,
            })
            .collect();
        Ok(KernelWorkload { cfg: *cfg, threads })
    }
}

impl Thread {
    fn line(&mut self, region: u64) -> u64 {
        self.base + (self.rng.gen_range(0..region / 64) * 64)
    }

    fn gap(&mut self, mean: u32) {
        let g = self.rng.gen_range(mean.div_ceil(2)..=mean + mean / 2);
        self.ops.push_back(Op::Gap(g));
    }

    /// A fresh node from the region's upper half (the lower half is the index).
    fn node(&mut self, region: u64) -> u64 {
        self.next_node = (self.next_node + 64) % (region / 2);
        self.base + region / 2 + self.next_node
    }

    fn load(&mut self, a: u64, gap: u32) {
        self.gap(gap);
        self.ops.push_back(Op::Load(a));
    }

    /// A persistent store: store, flush, (the fence comes per update).
    fn store(&mut self, a: u64, gap: u32) {
        self.gap(gap);
        self.ops.push_back(Op::Store(a));
        self.ops.push_back(Op::Flush(a));
    }
}

impl Thread {
    fn update(&mut self, cfg: &KernelConfig) {
        let (r, g) = (cfg.region_bytes, cfg.gap_instructions);
        let index = r / 2;
        match cfg.kernel {
            Kernel::Hashmap => {
                let bucket = self.line(index);
                self.load(bucket, g);
                for _ in 0..3 {
                    let n = self.line(index);
                    self.load(n, g);
                }
                let node = self.node(r);
                self.store(node, g);
                self.store(bucket, g);
            }
            Kernel::Btree => {
                for _ in 0..4 {
                    let n = self.line(index);
                    self.load(n, g);
                }
                let leaf = self.line(index);
                self.store(leaf, g);
                self.store(leaf + 64, g);
                if self.rng.gen_ratio(1, 4) {
                    let parent = self.line(index);
                    self.store(parent, g);
                }
            }
            Kernel::Kv => self.kv(cfg),
            Kernel::Tx => {
                let log = self.node(r);
                for _ in 0..2 {
                    let rec = self.line(index);
                    self.load(rec, g);
                }
                self.load(log, g);
                self.store(log, g);
                self.ops.push_back(Op::Fence);
                let rec = self.line(index);
                self.load(rec, g);
                self.load(rec + 64, g);
                self.store(rec, g);
            }
        }
        self.ops.push_back(Op::Fence);
    }

    fn kv(&mut self, cfg: &KernelConfig) {
        let (r, g) = (cfg.region_bytes, cfg.gap_instructions);
        let slot = self.line(r / 2);
        self.load(slot, g);
        self.load(slot + 64, g);
        if self.rng.gen_bool(0.5) {
            let value = self.line(r / 2);
            self.load(value, g);
        } else {
            let value = self.node(r);
            self.load(slot + 128, g);
            self.store(value, g);
            self.store(slot, g);
        }
    }
}

impl Workload for KernelWorkload {
    fn threads(&self) -> usize {
        self.threads.len()
    }

    fn next(&mut self, thread: usize) -> Result<Option<Op>> {
        let cfg = self.cfg;
        let th = &mut self.threads[thread];
        if !th.bound {
            th.bound = true;
            return Ok(Some(Op::Bind {
                addr: th.base,
                len: cfg.region_bytes,
            }));
        }
        if th.ops.is_empty() && th.updates < cfg.updates_per_thread {
            th.update(&cfg);
            th.updates += 1;
            if th.updates.is_multiple_of(cfg.commit_every) || th.updates == cfg.updates_per_thread {
                th.ops.push_back(Op::Commit {
                    addr: th.base,
                    len: cfg.region_bytes,
                });
            }
        }
        Ok(th.ops.pop_front())
    }
}
