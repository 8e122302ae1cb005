//! The analyses as text tables, as `nvstack sim` prints them and the sweep writes them to
//! `tables.txt`: one function per figure or table of seed 002, over the points a grid ran.

use super::{random_summary, LfsRow, Lifetimes, Point, TraceSpec};
use crate::cache::Model;
use nvstack_core::report::{fmt_count, render};
use nvstack_core::size::format_size;
use nvstack_policy::PolicyKind;

/// A duration in its largest whole unit (`30s`, `5min`, `1d`), else in ns.
pub fn fmt_duration(ns: u64) -> String {
    let units: [(&str, u64); 5] = [
        ("d", 86_400_000_000_000),
        ("h", 3_600_000_000_000),
        ("min", 60_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
    ];
    for (u, m) in units {
        if ns >= m && ns.is_multiple_of(m) {
            return format!("{}{u}", ns / m);
        }
    }
    format!("{ns}ns")
}

/// A ratio as a percentage to one decimal (`12.5 %`).
pub fn pct(x: f64) -> String {
    format!("{:.1} %", 100.0 * x)
}

/// Figure 2 as text: per delay, the writes dead within it, flushed, remaining and the net
/// write traffic, under a line of trace-wide counts.
pub fn lifetimes_table(l: &Lifetimes) -> String {
    let rows: Vec<Vec<String>> = (0..l.delays_ns.len())
        .map(|i| {
            vec![
                fmt_duration(l.delays_ns[i]),
                pct(if l.writes == 0 {
                    0.0
                } else {
                    l.died_within[i] as f64 / l.writes as f64
                }),
                fmt_count(l.flushed[i] as f64),
                fmt_count(l.remaining[i] as f64),
                pct(l.net_write_traffic[i]),
            ]
        })
        .collect();
    format!(
        "{}: {} block writes, {} blocks written, {} writes overwritten later\n{}",
        l.trace,
        fmt_count(l.writes as f64),
        fmt_count(l.distinct_written as f64),
        fmt_count(l.overwritten as f64),
        render(
            &[
                "delay",
                "dead within",
                "flushed",
                "remaining",
                "net write traffic"
            ],
            &rows,
            &[false, true, true, true, true],
        )
    )
}

/// One row of Table 2: the fate of the block writes in one cache.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct FateRow {
    /// The cache, in words (`infinite NVRAM`, `lru 1MiB NVRAM + 8MiB volatile`).
    pub cache: String,
    /// Block writes.
    pub writes: u64,
    /// Writes absorbed by a later write to the same block.
    pub overwritten: u64,
    /// Block write-backs.
    pub written_back: u64,
    /// Blocks dirty at the end.
    pub remaining: u64,
}

/// Table 2 as `nvstack sim fate --json` prints it and the Python package's `nvstack.sim.fate`
/// returns it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FateReport {
    pub trace: String,
    pub write_bytes_note: &'static str,
    pub rows: Vec<FateRow>,
}

impl FateReport {
    pub fn new(s: &TraceSpec, rows: Vec<FateRow>) -> FateReport {
        FateReport {
            trace: s.name(),
            write_bytes_note: "counts are block writes; a partial-block write counts a whole block",
            rows,
        }
    }
}

/// Table 2's finite caches: the unified model over `volatile_bytes` with each NVRAM size, one
/// policy (its seed 1).
pub fn fate_jobs(
    s: &TraceSpec,
    volatile_bytes: u64,
    nvram: &[u64],
    policy: PolicyKind,
) -> Result<Vec<(TraceSpec, super::PointSpec)>, crate::field::Invalid> {
    let mut jobs = Vec::new();
    for &n in nvram {
        let mut ps = super::policy_points(s, Model::Unified, volatile_bytes, &[n], 1)?;
        ps.retain(|p| p.config.policy == policy);
        jobs.extend(ps.into_iter().map(|mut p| {
            p.figure = super::Figure::Fate;
            (s.clone(), p)
        }));
    }
    Ok(jobs)
}

/// Table 2's rows for `spec`: the infinite NVRAM of `l` first, then one per finite cache among
/// `points` (those of this trace).
pub fn fate_rows(s: &TraceSpec, l: &Lifetimes, points: &[Point]) -> Vec<FateRow> {
    let mut rows = vec![FateRow {
        cache: "infinite NVRAM".into(),
        writes: l.writes,
        overwritten: l.overwritten,
        written_back: 0,
        remaining: l.distinct_written,
    }];
    for p in points.iter().filter(|p| p.trace == s.name()) {
        rows.push(FateRow {
            cache: format!(
                "{} {} NVRAM + {} volatile",
                p.policy.name(),
                format_size(p.nvram_bytes),
                format_size(p.volatile_bytes)
            ),
            writes: p.stats.writes,
            overwritten: p.stats.overwrites_absorbed,
            written_back: p.stats.writebacks,
            remaining: p.stats.dirty_at_end,
        });
    }
    rows
}

/// Table 2 as text: what became of the block writes in each cache.
pub fn fate_table(trace: &str, rows: &[FateRow]) -> String {
    let p = |x: u64, of: u64| {
        if of == 0 {
            "-".to_string()
        } else {
            format!(
                "{} ({:.1} %)",
                fmt_count(x as f64),
                100.0 * x as f64 / of as f64
            )
        }
    };
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.cache.clone(),
                p(r.overwritten, r.writes),
                p(r.written_back, r.writes),
                p(r.remaining, r.writes),
                fmt_count(r.writes as f64),
            ]
        })
        .collect();
    format!(
        "{trace}: fate of block writes (seed 002 Table 2)\n{}",
        render(
            &[
                "cache",
                "overwritten (absorbed)",
                "written back",
                "remaining at end",
                "block writes"
            ],
            &cells,
            &[false, true, true, true, true],
        )
    )
}

/// Grid points as a table of the columns named in `cols` (see the match for the names), under
/// `title`.
pub fn points_table(title: &str, points: &[Point], cols: &[&str]) -> String {
    let cells: Vec<Vec<String>> = points
        .iter()
        .map(|p| {
            cols.iter()
                .map(|c| match *c {
                    "trace" => p.trace.clone(),
                    "model" => p.model.name().to_string(),
                    "policy" => p.policy.name().to_string(),
                    "seed" => p.seed.to_string(),
                    "volatile" => format_size(p.volatile_bytes),
                    "nvram" => format_size(p.nvram_bytes),
                    "added" => format_size(p.added_bytes),
                    "writes" => fmt_count(p.stats.writes as f64),
                    "writebacks" => fmt_count(p.stats.writebacks as f64),
                    "dirty at end" => fmt_count(p.stats.dirty_at_end as f64),
                    "read misses" => fmt_count(p.stats.read_misses as f64),
                    "net write" => pct(p.stats.net_write_traffic),
                    "net total" => pct(p.stats.net_total_traffic),
                    "NVRAM acc" => fmt_count(p.stats.nvram_accesses as f64),
                    "bus blocks" => fmt_count(p.stats.bus_blocks as f64),
                    _ => unreachable!("unknown column {c}"),
                })
                .collect()
        })
        .collect();
    let right: Vec<bool> = cols
        .iter()
        .map(|c| !matches!(*c, "trace" | "model" | "policy"))
        .collect();
    format!("{title}\n{}", render(cols, &cells, &right))
}

/// Figure 4 as text: per trace and NVRAM size, net write traffic under LRU, random (mean and
/// range over the seeds) and omniscient.
pub fn policies_table(points: &[Point]) -> String {
    let mut sizes: Vec<(String, u64)> = points
        .iter()
        .map(|p| (p.trace.clone(), p.nvram_bytes))
        .collect();
    sizes.sort();
    sizes.dedup();
    let rnd = random_summary(points);
    let cells: Vec<Vec<String>> = sizes
        .iter()
        .map(|(t, n)| {
            let get = |pol: PolicyKind| {
                points
                    .iter()
                    .find(|p| &p.trace == t && p.nvram_bytes == *n && p.policy == pol)
                    .map_or("-".to_string(), |p| pct(p.stats.net_write_traffic))
            };
            let r = rnd
                .iter()
                .find(|r| &r.0 == t && r.3 == *n)
                .map_or("-".to_string(), |r| {
                    format!("{} ({:.1}-{:.1})", pct(r.4), 100.0 * r.5, 100.0 * r.6)
                });
            vec![
                t.clone(),
                format_size(*n),
                get(PolicyKind::Lru),
                r,
                get(PolicyKind::Omniscient),
            ]
        })
        .collect();
    render(
        &[
            "trace",
            "nvram",
            "LRU",
            "random mean (min-max)",
            "omniscient",
        ],
        &cells,
        &[false, true, true, true, true],
    )
}

/// Figures 5 and 6 as text: per trace, starting size and memory added, the net total traffic
/// of each model.
pub fn models_table(points: &[Point]) -> String {
    let mut keys: Vec<(String, u64, u64)> = points
        .iter()
        .map(|p| (p.trace.clone(), p.base_volatile_bytes, p.added_bytes))
        .collect();
    keys.sort();
    keys.dedup();
    let cells: Vec<Vec<String>> = keys
        .iter()
        .map(|(t, b, x)| {
            let get = |m: Model| {
                points
                    .iter()
                    .find(|p| {
                        &p.trace == t
                            && p.base_volatile_bytes == *b
                            && p.added_bytes == *x
                            && p.model == m
                    })
                    .map_or("-".to_string(), |p| pct(p.stats.net_total_traffic))
            };
            vec![
                t.clone(),
                format_size(*b),
                format_size(*x),
                get(Model::Volatile),
                get(Model::WriteAside),
                get(Model::Unified),
            ]
        })
        .collect();
    render(
        &[
            "trace",
            "start",
            "added",
            "volatile",
            "write-aside",
            "unified",
        ],
        &cells,
        &[false, true, true, true, true, true],
    )
}

/// Section 2.6 as text: NVRAM accesses and memory-bus blocks of write-aside and unified, and
/// their ratio.
pub fn bus_table(points: &[Point]) -> String {
    let mut keys: Vec<(String, u64, u64)> = points
        .iter()
        .filter(|p| p.model != Model::Volatile)
        .map(|p| (p.trace.clone(), p.volatile_bytes, p.nvram_bytes))
        .collect();
    // One row per (trace, volatile, NVRAM): the points of the two models are not adjacent.
    keys.sort();
    keys.dedup();
    let cells: Vec<Vec<String>> = keys
        .iter()
        .map(|(t, v, n)| {
            let get = |m: Model| {
                points.iter().find(|p| {
                    &p.trace == t && p.volatile_bytes == *v && p.nvram_bytes == *n && p.model == m
                })
            };
            let (wa, un) = (get(Model::WriteAside), get(Model::Unified));
            let f = |p: Option<&Point>, g: fn(&Point) -> u64| {
                p.map_or("-".to_string(), |p| fmt_count(g(p) as f64))
            };
            let ratio = |g: fn(&Point) -> u64| match (wa, un) {
                (Some(w), Some(u)) if g(w) > 0 => format!("{:.2}", g(u) as f64 / g(w) as f64),
                _ => "-".to_string(),
            };
            vec![
                t.clone(),
                format_size(*v),
                format_size(*n),
                f(wa, |p| p.stats.nvram_accesses),
                f(un, |p| p.stats.nvram_accesses),
                ratio(|p| p.stats.nvram_accesses),
                f(wa, |p| p.stats.bus_blocks),
                f(un, |p| p.stats.bus_blocks),
                ratio(|p| p.stats.bus_blocks),
            ]
        })
        .collect();
    render(
        &[
            "trace",
            "volatile",
            "nvram",
            "NVRAM acc. write-aside",
            "NVRAM acc. unified",
            "unified/w-a",
            "bus write-aside",
            "bus unified",
            "unified/w-a",
        ],
        &cells,
        &[false, true, true, true, true, true, true, true, true],
    )
}

/// Tables 3 and 4 as text: each LFS comparison without / with the NVRAM buffer.
pub fn lfs_table(rows: &[LfsRow]) -> String {
    let opt = |x: Option<f64>| x.map_or("NA".to_string(), |v| format!("{v:.1}"));
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let (a, b) = (&r.run.without_buffer, &r.run.with_buffer);
            vec![
                r.trace.clone(),
                r.fsync_every
                    .map_or("trace flags".to_string(), |n| format!("every {n} writes")),
                fmt_count(r.run.counts.syncs as f64),
                format!("{} / {}", a.disk_writes, b.disk_writes),
                format!("{:.2} / {:.2}", a.pct_partial, b.pct_partial),
                format!("{:.2} / {:.2}", a.pct_partial_sync, b.pct_partial_sync),
                format!("{} / {}", opt(a.kib_per_partial), opt(b.kib_per_partial)),
                format!(
                    "{:.2} / {:.2}",
                    a.pct_partial_overhead, b.pct_partial_overhead
                ),
                format!("{:.1} %", r.run.disk_write_reduction_pct),
            ]
        })
        .collect();
    render(
        &[
            "trace",
            "syncs from",
            "syncs",
            "disk writes",
            "% partial",
            "% partial sync",
            "KiB/partial",
            "% lost to partials",
            "saved",
        ],
        &cells,
        &[false, false, true, true, true, true, true, true, true],
    )
}
