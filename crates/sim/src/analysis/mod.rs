//! The analyses of seed 002 section 2, over any trace: byte lifetimes (Figure 2), the fate of
//! written data (Table 2), net write traffic against NVRAM size under the omniscient policy
//! (Figure 3), replacement policies (Figure 4), the three cache models as memory is added
//! (Figures 5 and 6), NVRAM accesses and memory-bus traffic (section 2.6).
//!
//! Units: blocks of the trace's block size; "net write traffic" is the share of block writes
//! that reach the server, counting blocks still dirty at the end as written back (the paper's
//! pessimistic convention); "net total traffic" adds read misses and divides by all block
//! accesses. Every grid point is one [`cache::simulate`] run over the streamed trace; points
//! run in parallel (rayon), one trace reader each.
//!
//! This module holds the results' vocabulary ([`TraceSpec`], [`Point`], [`Lifetimes`],
//! [`LfsRow`]) that its children share: [`grid`] (the grids a sweep plan names), [`tables`]
//! (the text tables), [`figures`] (the SVG figures) and the sweep (every analysis over a plan,
//! [`sweep()`]), which uses the other three.

pub mod figures;
pub mod grid;
mod sweep;
pub mod tables;

/// The sweep's CSV, in [`crate::csv`] (here too, beside the results that make its rows).
pub use crate::csv::{csv_table, CsvRecord};
pub use sweep::{
    split_results, sweep, sweep_records, write_results, SweepPlan, SweepReport, Task, TaskResult,
    LFS_FSYNC_EVERY, SEEDS_MAX,
};

use crate::cache::{self, CacheConfig, CacheStats, Model, DELAYED_WRITEBACK_DEFAULT_S};
use crate::field::{Field, Invalid};
use crate::lfs::LfsRun;
use crate::trace::{self, BlockAccesses, Op, ReaderOptions, TraceFormat};
use nvstack_core::error::{Error, Result};
use nvstack_core::Progress;
use nvstack_policy::PolicyKind;
use rayon::prelude::*;
use rustc_hash::FxHashMap;
use std::path::PathBuf;

/// A trace and how to read it: everything needed to open it again for each run.
#[derive(Clone, Debug)]
pub struct TraceSpec {
    pub path: PathBuf,
    pub format: TraceFormat,
    pub block_bytes: u32,
    pub options: ReaderOptions,
}

impl TraceSpec {
    pub fn open(&self) -> Result<BlockAccesses> {
        let src = trace::open(&self.path, self.format, &self.options)?;
        Ok(BlockAccesses::new(src, self.block_bytes))
    }

    /// The file name, for tables and figure titles.
    pub fn name(&self) -> String {
        self.path.file_name().map_or_else(
            || self.path.display().to_string(),
            |n| n.to_string_lossy().into(),
        )
    }
}

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;
const S: u64 = 1_000_000_000;

/// The default NVRAM grid: 0, then 64 KiB to 64 MiB in powers of two.
pub fn nvram_grid_default() -> Vec<u64> {
    let mut v = vec![0];
    let mut x = 64 * KIB;
    while x <= 64 * MIB {
        v.push(x);
        x *= 2;
    }
    v
}

/// The volatile cache the paper's Figures 4 and 5 start from (Sprite clients averaged about
/// 7 MB of file cache).
pub const VOLATILE_BASE_BYTES: u64 = 8 * MIB;
/// Figure 6's second starting point.
pub const VOLATILE_BASE2_BYTES: u64 = 16 * MIB;
/// Seeds of the random policy in a sweep.
pub const RANDOM_SEEDS_DEFAULT: u64 = 5;
/// The most grid points one command runs (a typo in a list should not start a day-long run).
pub const POINTS_MAX: usize = 10_000;

/// The delays of Figure 2, from a millisecond (tpcc-small spans 136 ms) to a day.
pub fn delays_default_ns() -> Vec<u64> {
    let ms = 1_000_000;
    vec![
        ms,
        10 * ms,
        100 * ms,
        S,
        5 * S,
        30 * S,
        60 * S,
        300 * S,
        1800 * S,
        3600 * S,
        6 * 3600 * S,
        24 * 3600 * S,
    ]
}
/// At most this many delays in one lifetime pass (each costs 8 bytes per written block).
pub const DELAYS_MAX: usize = 16;

/// The delays a lifetime pass takes: 1 to [`DELAYS_MAX`] of them.
pub fn check_delays(delays_ns: &[u64]) -> std::result::Result<(), Invalid> {
    if delays_ns.is_empty() || delays_ns.len() > DELAYS_MAX {
        return Err(Invalid::new(Field::DelaysNs).text(format!(
            ": give 1 to {DELAYS_MAX} delays, not {}",
            delays_ns.len()
        )));
    }
    Ok(())
}

/// Figure 2 and Table 2 (infinite cache) in one pass.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Lifetimes {
    pub trace: String,
    pub block_accesses: u64,
    pub writes: u64,
    /// Blocks written at least once.
    pub distinct_written: u64,
    /// Writes whose block is written again later (the earlier data dies by overwrite).
    pub overwritten: u64,
    pub delays_ns: Vec<u64>,
    /// Per delay: writes whose data is overwritten within that delay of being written.
    pub died_within: Vec<u64>,
    /// Per delay: block write-backs when every dirty block is flushed exactly that long after it
    /// first became dirty, from a cache of infinite size (data flushed within the trace).
    pub flushed: Vec<u64>,
    /// Per delay: blocks dirty at the end (counted as written back in the net traffic).
    pub remaining: Vec<u64>,
    /// Per delay: (flushed + remaining) / writes.
    pub net_write_traffic: Vec<f64>,
}

/// One written block's state in [`lifetimes`]: its last write, and per delay the start of its
/// current dirty period.
struct LifeBlock {
    last_write_ns: u64,
    dirty_since_ns: [u64; DELAYS_MAX],
}

impl Lifetimes {
    /// Nothing counted yet, one column per delay.
    fn empty(spec: &TraceSpec, delays_ns: &[u64]) -> Lifetimes {
        let nd = delays_ns.len();
        Lifetimes {
            trace: spec.name(),
            block_accesses: 0,
            writes: 0,
            distinct_written: 0,
            overwritten: 0,
            delays_ns: delays_ns.to_vec(),
            died_within: vec![0; nd],
            flushed: vec![0; nd],
            remaining: vec![0; nd],
            net_write_traffic: vec![0.0; nd],
        }
    }

    /// A write at `t` to a block written before: the earlier data dies (within each delay it
    /// is younger than), and a dirty period that has reached its flush instant ends flushed,
    /// this write starting the next one.
    fn overwrite(&mut self, b: &mut LifeBlock, t: u64) {
        self.overwritten += 1;
        let life = t - b.last_write_ns;
        for (i, &d) in self.delays_ns.iter().enumerate() {
            if life <= d {
                self.died_within[i] += 1;
            }
            if t >= b.dirty_since_ns[i].saturating_add(d) {
                self.flushed[i] += 1;
                b.dirty_since_ns[i] = t;
            }
        }
        b.last_write_ns = t;
    }

    /// At the trace's end (`end_ns`): each block's last dirty period ends flushed if its
    /// instant has come, else remaining; then the net traffic per delay.
    fn finish(&mut self, blocks: &FxHashMap<u64, LifeBlock>, end_ns: u64) {
        self.distinct_written = blocks.len() as u64;
        for b in blocks.values() {
            for (i, &d) in self.delays_ns.iter().enumerate() {
                if b.dirty_since_ns[i].saturating_add(d) <= end_ns {
                    self.flushed[i] += 1;
                } else {
                    self.remaining[i] += 1;
                }
            }
        }
        for i in 0..self.delays_ns.len() {
            // Every dirty period ends flushed or remaining; absorbed writes are the rest.
            assert!(self.flushed[i] + self.remaining[i] <= self.writes);
            assert!(self.died_within[i] <= self.overwritten);
            self.net_write_traffic[i] = if self.writes == 0 {
                0.0
            } else {
                (self.flushed[i] + self.remaining[i]) as f64 / self.writes as f64
            };
        }
        assert_eq!(self.overwritten + self.distinct_written, self.writes);
    }
}

/// One pass over the trace: lifetimes of block writes and net write traffic against a fixed
/// write-back delay from an infinite cache. A block first dirtied at `s` is flushed at `s + d`;
/// a write at or after that instant starts a new dirty period, an earlier one is absorbed.
/// Memory: one entry per written block with one word per delay.
pub fn lifetimes(spec: &TraceSpec, delays_ns: &[u64]) -> Result<Lifetimes> {
    check_delays(delays_ns)?;
    let mut blocks: FxHashMap<u64, LifeBlock> = FxHashMap::default();
    let mut out = Lifetimes::empty(spec, delays_ns);
    let mut end_ns = 0;
    for a in spec.open()? {
        let a = a?;
        out.block_accesses += 1;
        end_ns = a.time_ns;
        if a.op != Op::Write {
            continue;
        }
        out.writes += 1;
        let t = a.time_ns;
        match blocks.get_mut(&a.key) {
            None => {
                blocks.insert(
                    a.key,
                    LifeBlock {
                        last_write_ns: t,
                        dirty_since_ns: [t; DELAYS_MAX],
                    },
                );
            }
            Some(b) => out.overwrite(b, t),
        }
    }
    out.finish(&blocks, end_ns);
    Ok(out)
}

/// Which figure or table a grid point belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Figure {
    /// Table 2 with finite caches.
    Fate,
    /// Figure 3: omniscient, write-only NVRAM buffer.
    NvramSize,
    /// Figure 4: policies in the unified model.
    Policies,
    /// Figures 5 and 6 (and section 2.6): models as memory is added.
    Models,
}

impl Figure {
    pub fn name(self) -> &'static str {
        match self {
            Figure::Fate => "fate",
            Figure::NvramSize => "nvram-size",
            Figure::Policies => "policies",
            Figure::Models => "models",
        }
    }
}

/// One configuration to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PointSpec {
    pub figure: Figure,
    pub config: CacheConfig,
    /// The memory added on top of the starting volatile cache (the x axis of Figures 5, 6).
    pub base_volatile_bytes: u64,
    pub added_bytes: u64,
    /// Reads are left out (the omniscient write buffer of Figure 3).
    pub writes_only: bool,
}

/// One run's result, flat, as the sweep's CSV and JSON rows.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Point {
    pub trace: String,
    pub figure: Figure,
    pub model: Model,
    pub policy: PolicyKind,
    pub seed: u64,
    pub block_bytes: u32,
    pub volatile_bytes: u64,
    pub nvram_bytes: u64,
    pub base_volatile_bytes: u64,
    pub added_bytes: u64,
    pub writes_only: bool,
    pub delayed_writeback_s: Option<u64>,
    #[serde(flatten)]
    pub stats: CacheStats,
}

impl Point {
    /// This run as a row of the sweep's CSV (kind `cache`): the JSON object's fields, in its
    /// order.
    pub fn csv_record(&self) -> CsvRecord {
        let s = &self.stats;
        let dw = self
            .delayed_writeback_s
            .map_or_else(|| "off".to_string(), |v| v.to_string());
        let mut r = CsvRecord::new("cache");
        r.push("trace", &self.trace)
            .push("figure", self.figure.name())
            .push("model", self.model.name())
            .push("policy", self.policy.name())
            .push("seed", self.seed)
            .push("block_bytes", self.block_bytes)
            .push("volatile_bytes", self.volatile_bytes)
            .push("nvram_bytes", self.nvram_bytes)
            .push("base_volatile_bytes", self.base_volatile_bytes)
            .push("added_bytes", self.added_bytes)
            .push("writes_only", self.writes_only)
            .push("delayed_writeback_s", dw)
            .push("block_accesses", s.block_accesses)
            .push("reads", s.reads)
            .push("writes", s.writes)
            .push("misses", s.misses)
            .push("read_misses", s.read_misses)
            .push("write_misses", s.write_misses)
            .real("miss_ratio", s.miss_ratio)
            .push("hits_volatile", s.hits_volatile)
            .push("hits_nvram", s.hits_nvram)
            .push("writebacks", s.writebacks)
            .push("writebacks_eviction", s.writebacks_eviction)
            .push("writebacks_replacement", s.writebacks_replacement)
            .push("writebacks_cleaner", s.writebacks_cleaner)
            .push("writebacks_sync", s.writebacks_sync)
            .push("writebacks_through", s.writebacks_through)
            .push("overwrites_absorbed", s.overwrites_absorbed)
            .push("dirty_at_end", s.dirty_at_end)
            .push("nvram_reads", s.nvram_reads)
            .push("nvram_writes", s.nvram_writes)
            .push("nvram_accesses", s.nvram_accesses)
            .push("moves_to_volatile", s.moves_to_volatile)
            .push("bus_blocks", s.bus_blocks)
            .real("net_write_traffic", s.net_write_traffic)
            .real("net_total_traffic", s.net_total_traffic);
        r
    }
}

impl Lifetimes {
    /// One row of the sweep's CSV per write-back delay (kind `lifetime`, Figure 2): the
    /// trace-wide counts, then that delay's entry of each per-delay list (`delay_ns` is the
    /// delay itself).
    pub fn csv_records(&self) -> Vec<CsvRecord> {
        (0..self.delays_ns.len())
            .map(|i| {
                let mut r = CsvRecord::new("lifetime");
                r.push("trace", &self.trace)
                    .push("block_accesses", self.block_accesses)
                    .push("writes", self.writes)
                    .push("distinct_written", self.distinct_written)
                    .push("overwritten", self.overwritten)
                    .push("delay_ns", self.delays_ns[i])
                    .push("died_within", self.died_within[i])
                    .push("flushed", self.flushed[i])
                    .push("remaining", self.remaining[i])
                    .real("net_write_traffic", self.net_write_traffic[i]);
                r
            })
            .collect()
    }
}

/// One LFS comparison of the sweep: the paper's segment writer without and with a 512 KiB
/// buffer, for one trace and one sync source.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct LfsRow {
    /// The trace's file name.
    pub trace: String,
    /// The added sync source: a sync after every N-th write request; None = the trace's flags.
    pub fsync_every: Option<u64>,
    /// Both runs and their comparison.
    #[serde(flatten)]
    pub run: LfsRun,
}

impl LfsRow {
    /// This comparison as a row of the sweep's CSV (kind `lfs`); `fsync_every` is `off` when
    /// the syncs come from the trace's own flags.
    pub fn csv_record(&self) -> CsvRecord {
        let mut r = CsvRecord::new("lfs");
        r.push("trace", &self.trace).push(
            "fsync_every",
            self.fsync_every
                .map_or_else(|| "off".to_string(), |n| n.to_string()),
        );
        self.run.csv_push(&mut r);
        r
    }
}

/// `bytes` of `field` as blocks of the trace's size; a size that is not a whole number of
/// blocks is refused, never rounded.
fn blocks(spec: &TraceSpec, bytes: u64, field: Field) -> std::result::Result<u64, Invalid> {
    let b = u64::from(spec.block_bytes);
    if !bytes.is_multiple_of(b) {
        return Err(Invalid::new(field).text(format!(
            " {bytes}: not a multiple of the block size ({b} bytes)"
        )));
    }
    Ok(bytes / b)
}

fn config(
    spec: &TraceSpec,
    model: Model,
    policy: PolicyKind,
    seed: u64,
    volatile_bytes: u64,
    nvram_bytes: u64,
) -> std::result::Result<CacheConfig, Invalid> {
    let c = CacheConfig {
        model,
        policy,
        volatile_blocks: blocks(spec, volatile_bytes, Field::VolatileBytes)?,
        nvram_blocks: blocks(spec, nvram_bytes, Field::NvramBytes)?,
        delayed_writeback_ns: (model == Model::Volatile).then_some(DELAYED_WRITEBACK_DEFAULT_S * S),
        seed,
    };
    c.validate()?;
    Ok(c)
}

/// Figure 3: the omniscient policy on the trace's writes alone, an NVRAM of each size.
pub fn nvram_size_points(
    spec: &TraceSpec,
    nvram: &[u64],
) -> std::result::Result<Vec<PointSpec>, Invalid> {
    nvram
        .iter()
        .map(|&n| {
            Ok(PointSpec {
                figure: Figure::NvramSize,
                config: config(spec, Model::Unified, PolicyKind::Omniscient, 1, 0, n)?,
                base_volatile_bytes: 0,
                added_bytes: n,
                writes_only: true,
            })
        })
        .collect()
}

/// Figure 4: the unified model over a volatile cache, each policy (random with `seeds` seeds).
pub fn policy_points(
    spec: &TraceSpec,
    model: Model,
    volatile_bytes: u64,
    nvram: &[u64],
    seeds: u64,
) -> std::result::Result<Vec<PointSpec>, Invalid> {
    let mut v = Vec::new();
    for &n in nvram {
        let mut runs = vec![(PolicyKind::Lru, 1), (PolicyKind::Omniscient, 1)];
        runs.extend((1..=seeds).map(|s| (PolicyKind::Random, s)));
        for (p, seed) in runs {
            v.push(PointSpec {
                figure: Figure::Policies,
                config: config(spec, model, p, seed, volatile_bytes, n)?,
                base_volatile_bytes: volatile_bytes,
                added_bytes: n,
                writes_only: false,
            });
        }
    }
    Ok(v)
}

/// Figures 5 and 6: from each starting volatile size, add memory: volatile memory to the
/// volatile model (with its 30 s delayed write-back), NVRAM to the NVRAM models (LRU).
pub fn model_points(
    spec: &TraceSpec,
    bases: &[u64],
    added: &[u64],
    models: &[Model],
) -> std::result::Result<Vec<PointSpec>, Invalid> {
    let mut v = Vec::new();
    for &base in bases {
        for &x in added {
            for &m in models {
                let (vol, nv) = match m {
                    Model::Volatile => (
                        base.checked_add(x).ok_or_else(|| {
                            Invalid::new(Field::VolatileBytes)
                                .text(format!(" {base} + {x}: size overflow"))
                        })?,
                        0,
                    ),
                    _ => (base, x),
                };
                v.push(PointSpec {
                    figure: Figure::Models,
                    config: config(spec, m, PolicyKind::Lru, 1, vol, nv)?,
                    base_volatile_bytes: base,
                    added_bytes: x,
                    writes_only: false,
                });
            }
        }
    }
    Ok(v)
}

/// Run one point.
pub fn run_point(spec: &TraceSpec, p: &PointSpec) -> Result<Point> {
    let run = cache::simulate_with(&|| spec.open(), &p.config, p.writes_only)?;
    let c = &p.config;
    let b = u64::from(spec.block_bytes);
    Ok(Point {
        trace: spec.name(),
        figure: p.figure,
        model: c.model,
        policy: c.policy,
        seed: c.seed,
        block_bytes: spec.block_bytes,
        volatile_bytes: c.volatile_blocks * b,
        nvram_bytes: c.nvram_blocks * b,
        base_volatile_bytes: p.base_volatile_bytes,
        added_bytes: p.added_bytes,
        writes_only: p.writes_only,
        delayed_writeback_s: c.delayed_writeback_ns.map(|ns| ns / S),
        stats: run.stats,
    })
}

/// Run many points in parallel (rayon), reported to `progress` as one phase named `label` of
/// one step per point. Results keep the order of `jobs`. The first error stops the run.
pub fn run_points(
    jobs: &[(TraceSpec, PointSpec)],
    label: &str,
    progress: &dyn Progress,
) -> Result<Vec<Point>> {
    if jobs.len() > POINTS_MAX {
        return Err(Error::bad(format!(
            "{} grid points: at most {POINTS_MAX} in one run",
            jobs.len()
        )));
    }
    progress.start(label, jobs.len() as u64);
    let points = jobs
        .par_iter()
        .map(|(spec, p)| {
            let r = run_point(spec, p);
            progress.advance(1);
            r
        })
        .collect();
    progress.finish();
    points
}

/// Mean, min and max of the random policy over its seeds, per (trace, model, nvram).
pub fn random_summary(points: &[Point]) -> Vec<(String, Model, u64, u64, f64, f64, f64)> {
    let mut groups: Vec<(String, Model, u64, u64, Vec<f64>)> = Vec::new();
    for p in points.iter().filter(|p| p.policy == PolicyKind::Random) {
        match groups.iter_mut().find(|g| {
            g.0 == p.trace && g.1 == p.model && g.2 == p.volatile_bytes && g.3 == p.nvram_bytes
        }) {
            Some(g) => g.4.push(p.stats.net_write_traffic),
            None => groups.push((
                p.trace.clone(),
                p.model,
                p.volatile_bytes,
                p.nvram_bytes,
                vec![p.stats.net_write_traffic],
            )),
        }
    }
    groups
        .into_iter()
        .map(|(t, m, v, n, xs)| {
            let mean = xs.iter().sum::<f64>() / xs.len() as f64;
            let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
            let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (t, m, v, n, mean, min, max)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn spec_of(lines: &str) -> (tempfile::NamedTempFile, TraceSpec) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        write!(f, "{lines}").unwrap();
        let spec = TraceSpec {
            path: f.path().to_path_buf(),
            format: TraceFormat::Disksim,
            block_bytes: 4096,
            options: ReaderOptions::default(),
        };
        (f, spec)
    }

    #[test]
    fn lifetimes_by_hand() {
        // DiskSim lines: time_ns device sector sectors type(0 write). Block 0 = sectors 0-7.
        // Block 0 written at 0 s, 2 s, 10 s; block 1 written at 1 s; block 0 read at 20 s.
        let (_f, spec) = spec_of(
            "0 0 0 8 0\n1000000000 0 8 8 0\n2000000000 0 0 8 0\n10000000000 0 0 8 0\n20000000000 0 0 8 1\n",
        );
        let l = lifetimes(&spec, &[S, 5 * S, 100 * S]).unwrap();
        assert_eq!(
            (
                l.block_accesses,
                l.writes,
                l.distinct_written,
                l.overwritten
            ),
            (5, 4, 2, 2)
        );
        // Lifetimes of overwritten data: 2 s (0 -> 2) and 8 s (2 -> 10).
        assert_eq!(l.died_within, vec![0, 1, 2]);
        // d = 1 s: block 0 flushed at 1 (write at 2 starts anew), at 3 (write at 10 anew), at
        // 11 (before the end at 20); block 1 flushed at 2. 4 flushes, nothing remaining.
        // d = 5 s: block 0 dirty 0..5 absorbs the write at 2, flushed at 5; the write at 10
        // starts anew, flushed at 15; block 1 flushed at 6: 3 flushes.
        // d = 100 s: nothing flushed within the trace; 2 blocks remain.
        assert_eq!(l.flushed, vec![4, 3, 0]);
        assert_eq!(l.remaining, vec![0, 0, 2]);
        assert!((l.net_write_traffic[1] - 0.75).abs() < 1e-12);
        assert!(lifetimes(&spec, &[]).is_err());
    }
}
