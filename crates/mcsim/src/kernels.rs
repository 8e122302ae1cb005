//! Synthetic workloads after WHISPER's kinds (seed 003 Table III), since its traces are not
//! available: each thread updates a persistent structure of its own, flushing and fencing what
//! it writes as persistent code does, with a commit of its region every `commit_every`
//! updates. Loads to stores are near the paper's 1.96 : 1 (each kernel's mix is below).

use crate::trace::{Op, Workload};
use nvstack_core::error::{Error, Result};
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

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

/// Requests one hash-map update makes on Table II's machine (measured: 6.7); the bench's
/// workload is sized from it, and the bench checks its runs made enough.
pub const HASHMAP_REQUESTS_PER_UPDATE: u64 = 6;

impl KernelConfig {
    /// The speed measurements' workload (`nvstack bench --suite mcsim`, the `speed` and
    /// `rob_bound` examples): the hash-map kernel on every core of a machine of `cores`,
    /// committing every update, sized for at least about `requests` requests.
    pub fn hashmap_for_requests(cores: u32, requests: u64) -> KernelConfig {
        assert!(cores > 0, "a machine has cores");
        KernelConfig {
            kernel: Kernel::Hashmap,
            threads: cores,
            updates_per_thread: requests.div_ceil(HASHMAP_REQUESTS_PER_UPDATE * u64::from(cores)),
            ..KernelConfig::default()
        }
    }

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

/// `rng.gen_range(low..=high)` of rand 0.8 for one fixed range, its setup done once: the same
/// draws from the same stream (the `UniformInt::sample_single_inclusive` algorithm: the
/// widening multiply and the approximate rejection zone), so the workload stays the same
/// while a draw costs one multiply and a compare. A test checks it against `gen_range`.
#[derive(Clone, Copy, Debug)]
struct Draw {
    low: u64,
    range: u64,
    zone: u64,
}

impl Draw {
    /// Draws of 64-bit values (`gen_range` on `u64`: one `next_u64` an attempt).
    fn u64(low: u64, high: u64) -> Draw {
        assert!(low <= high, "a range of one value at least");
        let range = high - low + 1;
        assert!(range != 0, "the whole 64-bit range is not drawn here");
        Draw {
            low,
            range,
            zone: (range << range.leading_zeros()).wrapping_sub(1),
        }
    }

    /// Draws of 32-bit values (`gen_range` on `u32`: one `next_u32` an attempt).
    fn u32(low: u32, high: u32) -> Draw {
        assert!(low <= high, "a range of one value at least");
        let range = high - low + 1;
        assert!(range != 0, "the whole 32-bit range is not drawn here");
        Draw {
            low: low.into(),
            range: range.into(),
            zone: (range << range.leading_zeros()).wrapping_sub(1).into(),
        }
    }

    fn sample_u64(&self, rng: &mut SmallRng) -> u64 {
        loop {
            let wide = u128::from(rng.next_u64()) * u128::from(self.range);
            if wide as u64 <= self.zone {
                return self.low + (wide >> 64) as u64;
            }
        }
    }

    fn sample_u32(&self, rng: &mut SmallRng) -> u32 {
        loop {
            let wide = u64::from(rng.next_u32()) * self.range;
            if wide as u32 as u64 <= self.zone {
                return (self.low + (wide >> 32)) as u32;
            }
        }
    }
}

/// What makes a thread's addresses and gaps: its random stream and where its next node is.
#[derive(Clone)]
struct Gen {
    rng: SmallRng,
    base: u64,
    next_node: u64,
    /// A line of the index half (`gen_range(0..region / 128)`) and a gap's length.
    index_line: Draw,
    gap: Draw,
}

struct Thread {
    gen: Gen,
    updates: u64,
    /// Updates since the last commit due by `commit_every` (a count kept, not a division
    /// per update).
    since_commit: u64,
    /// The operations of the update being handed out (made whole, then read in order: a
    /// vector reused from update to update, where a deque pushed and popped each one).
    ops: Vec<Op>,
    /// How many of `ops` were handed out.
    taken: usize,
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
        let mean = cfg.gap_instructions;
        let threads = (0..u64::from(cfg.threads))
            .map(|t| Thread {
                gen: Gen {
                    rng: SmallRng::seed_from_u64(cfg.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ t),
                    // Regions are disjoint and far apart: threads share no line.
                    base: (t + 1) << 40,
                    next_node: 0,
                    index_line: Draw::u64(0, cfg.region_bytes / 2 / 64 - 1),
                    gap: Draw::u32(mean.div_ceil(2), mean + mean / 2),
                },
                updates: 0,
                since_commit: 0,
                ops: Vec::new(),
                taken: 0,
                bound: false,
            })
            .collect();
        Ok(KernelWorkload { cfg: *cfg, threads })
    }
}

impl Gen {
    /// A line of the index (the region's lower half): every caller draws from that half.
    #[inline(always)]
    fn line(&mut self, half: u64) -> u64 {
        debug_assert_eq!(half / 64 - 1, self.index_line.range - 1);
        self.base + self.index_line.sample_u64(&mut self.rng) * 64
    }

    #[inline(always)]
    fn gap(&mut self, ops: &mut Vec<Op>, mean: u32) {
        let g = self.gap.sample_u32(&mut self.rng);
        debug_assert!(mean.div_ceil(2) <= g && g <= mean + mean / 2);
        ops.push(Op::Gap(g));
    }

    /// A fresh node from the region's upper half (the lower half is the index).
    #[inline(always)]
    fn node(&mut self, region: u64) -> u64 {
        // The region is a power of two (validated): a mask, not a division per node.
        debug_assert!(region.is_power_of_two());
        self.next_node = (self.next_node + 64) & (region / 2 - 1);
        self.base + region / 2 + self.next_node
    }

    #[inline(always)]
    fn load(&mut self, ops: &mut Vec<Op>, a: u64, gap: u32) {
        self.gap(ops, gap);
        ops.push(Op::Load(a));
    }

    /// A persistent store: store, flush, (the fence comes per update).
    #[inline(always)]
    fn store(&mut self, ops: &mut Vec<Op>, a: u64, gap: u32) {
        self.gap(ops, gap);
        ops.push(Op::Store(a));
        ops.push(Op::Flush(a));
    }
}

impl Gen {
    #[inline(always)]
    fn update(&mut self, ops: &mut Vec<Op>, cfg: &KernelConfig) {
        let (r, g) = (cfg.region_bytes, cfg.gap_instructions);
        let index = r / 2;
        match cfg.kernel {
            Kernel::Hashmap => {
                let bucket = self.line(index);
                self.load(ops, bucket, g);
                for _ in 0..3 {
                    let n = self.line(index);
                    self.load(ops, n, g);
                }
                let node = self.node(r);
                self.store(ops, node, g);
                self.store(ops, bucket, g);
            }
            Kernel::Btree => {
                for _ in 0..4 {
                    let n = self.line(index);
                    self.load(ops, n, g);
                }
                let leaf = self.line(index);
                self.store(ops, leaf, g);
                self.store(ops, leaf + 64, g);
                if self.rng.gen_ratio(1, 4) {
                    let parent = self.line(index);
                    self.store(ops, parent, g);
                }
            }
            Kernel::Kv => self.kv(ops, cfg),
            Kernel::Tx => {
                let log = self.node(r);
                for _ in 0..2 {
                    let rec = self.line(index);
                    self.load(ops, rec, g);
                }
                self.load(ops, log, g);
                self.store(ops, log, g);
                ops.push(Op::Fence);
                let rec = self.line(index);
                self.load(ops, rec, g);
                self.load(ops, rec + 64, g);
                self.store(ops, rec, g);
            }
        }
        ops.push(Op::Fence);
    }

    #[inline(always)]
    fn kv(&mut self, ops: &mut Vec<Op>, cfg: &KernelConfig) {
        let (r, g) = (cfg.region_bytes, cfg.gap_instructions);
        let slot = self.line(r / 2);
        self.load(ops, slot, g);
        self.load(ops, slot + 64, g);
        if self.rng.gen_bool(0.5) {
            let value = self.line(r / 2);
            self.load(ops, value, g);
        } else {
            let value = self.node(r);
            self.load(ops, slot + 128, g);
            self.store(ops, value, g);
            self.store(ops, slot, g);
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
        if th.taken == th.ops.len() {
            if !th.bound {
                th.bound = true;
                return Ok(Some(Op::Bind {
                    addr: th.gen.base,
                    len: cfg.region_bytes,
                }));
            }
            if th.updates == cfg.updates_per_thread {
                return Ok(None);
            }
            th.refill(&cfg);
        }
        let op = th.ops[th.taken];
        th.taken += 1;
        Ok(Some(op))
    }

    /// What is left of the update being handed out, or the next update whole: its vector is
    /// swapped with the caller's, not copied.
    fn next_batch(&mut self, thread: usize, ops: &mut Vec<Op>) -> Result<bool> {
        let th = &mut self.threads[thread];
        ops.clear();
        if th.taken < th.ops.len() {
            // An update partly handed out by `next`: the rest of it.
            ops.extend_from_slice(&th.ops[th.taken..]);
            th.taken = th.ops.len();
            return Ok(true);
        }
        if !th.bound || th.updates == self.cfg.updates_per_thread {
            // The thread's first operation (its region's binding), or its end.
            ops.extend(self.next(thread)?);
            return Ok(!ops.is_empty());
        }
        th.refill(&self.cfg);
        std::mem::swap(&mut th.ops, ops);
        th.ops.clear();
        th.taken = 0;
        assert!(!ops.is_empty(), "an update has operations");
        Ok(true)
    }
}

impl Thread {
    /// The next update's operations, with the commit that follows it when one is due. Out of
    /// line: once in 16 operations, and `next`'s common path then saves no registers.
    #[inline(never)]
    fn refill(&mut self, cfg: &KernelConfig) {
        assert!(self.updates < cfg.updates_per_thread, "an update is left");
        self.ops.clear();
        self.taken = 0;
        // The generator's state worked on in a local copy: stores to the vector cannot reach
        // it, so the random stream's state stays in registers through the update.
        let mut gen = self.gen.clone();
        gen.update(&mut self.ops, cfg);
        self.gen = gen;
        self.updates += 1;
        self.since_commit += 1;
        let due = self.since_commit == cfg.commit_every;
        if due {
            self.since_commit = 0;
        }
        debug_assert_eq!(due, self.updates.is_multiple_of(cfg.commit_every));
        if due || self.updates == cfg.updates_per_thread {
            self.ops.push(Op::Commit {
                addr: self.gen.base,
                len: cfg.region_bytes,
            });
        }
        assert!(!self.ops.is_empty(), "an update has operations");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `next_batch` hands out `next`'s stream, for every kernel, also when the two are mixed.
    #[test]
    fn batches_are_the_stream_of_next() {
        for kernel in Kernel::ALL {
            let kc = KernelConfig {
                kernel,
                threads: 2,
                updates_per_thread: 50,
                commit_every: 3,
                ..KernelConfig::default()
            };
            let (mut one, mut batched) = (
                KernelWorkload::new(&kc).unwrap(),
                KernelWorkload::new(&kc).unwrap(),
            );
            for t in 0..2 {
                let mut want = Vec::new();
                while let Some(op) = one.next(t).unwrap() {
                    want.push(op);
                }
                let (mut got, mut buf) = (Vec::new(), Vec::new());
                // Every third call takes one operation, mid-update too.
                for call in 0.. {
                    if call % 3 == 2 {
                        match batched.next(t).unwrap() {
                            Some(op) => got.push(op),
                            None => break,
                        }
                    } else if batched.next_batch(t, &mut buf).unwrap() {
                        assert!(!buf.is_empty());
                        got.extend_from_slice(&buf);
                    } else {
                        break;
                    }
                }
                assert_eq!(got, want, "{kernel:?} thread {t}");
                assert!(!batched.next_batch(t, &mut buf).unwrap() && buf.is_empty());
            }
        }
    }

    /// `Draw` gives `gen_range`'s values from the same stream: the workloads depend on it.
    #[test]
    fn draws_are_gen_ranges() {
        let mut pick = SmallRng::seed_from_u64(7);
        for _ in 0..200 {
            let seed = pick.next_u64();
            let (lo, hi) = (pick.gen_range(0..1000u64), pick.gen_range(0..1u64 << 40));
            let (a, b) = (
                &mut SmallRng::seed_from_u64(seed),
                &mut SmallRng::seed_from_u64(seed),
            );
            let (d64, d32) = (Draw::u64(lo, lo + hi), Draw::u32(lo as u32, lo as u32 + 37));
            for _ in 0..500 {
                assert_eq!(d64.sample_u64(a), b.gen_range(lo..=lo + hi));
                assert_eq!(d32.sample_u32(a), b.gen_range(lo as u32..=lo as u32 + 37));
            }
            let d = Draw::u32(1 + lo as u32 % 20, 2 + lo as u32 % 20 * 3);
            let range = (d.low as u32)..=(d.low + d.range - 1) as u32;
            assert_eq!(d.sample_u32(a), b.gen_range(range));
        }
    }
}
