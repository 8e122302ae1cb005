//! SVG figures that mirror seed 002's: the same axes as the paper's Figures 2-6 and the
//! section 2.6 comparison, drawn from analysis results.

use super::{random_summary, Figure, Lifetimes, Point};
use crate::cache::Model;
use nvstack_core::error::Result;
use nvstack_plot::{LineChart, Scale, Series};
use nvstack_policy::PolicyKind;
use std::path::{Path, PathBuf};

fn pct(x: f64) -> f64 {
    100.0 * x
}

fn file(dir: &Path, name: &str, trace: Option<&str>) -> PathBuf {
    match trace {
        Some(t) => dir.join(format!("{name}-{}.svg", slug(t))),
        None => dir.join(format!("{name}.svg")),
    }
}

/// A file-name-safe form of a trace name.
pub fn slug(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Figure 2: net write traffic against the write-back delay (log x), one line per trace, and
/// the share of written data that dies within each delay.
pub fn fig2(dir: &Path, all: &[Lifetimes]) -> Result<Vec<PathBuf>> {
    let mut series = Vec::new();
    for l in all {
        let xs: Vec<f64> = l.delays_ns.iter().map(|&d| d as f64 / 1e9).collect();
        series.push(Series {
            name: format!("{}: net write traffic", l.trace),
            points: xs
                .iter()
                .zip(&l.net_write_traffic)
                .map(|(&x, &y)| (x, pct(y)))
                .collect(),
        });
        series.push(Series {
            name: format!("{}: written data dead within delay", l.trace),
            points: xs
                .iter()
                .zip(&l.died_within)
                .map(|(&x, &d)| {
                    (
                        x,
                        if l.writes == 0 {
                            0.0
                        } else {
                            100.0 * d as f64 / l.writes as f64
                        },
                    )
                })
                .collect(),
        });
    }
    let path = file(dir, "fig2-lifetimes", None);
    LineChart {
        title: "Byte lifetimes: write-back after a fixed delay, infinite cache (seed 002 Fig. 2)"
            .into(),
        x_label: "write-back delay (s)".into(),
        y_label: "% of block writes".into(),
        x_scale: Scale::Log10,
        y_scale: Scale::Linear,
        series,
    }
    .write_svg(&path)?;
    Ok(vec![path])
}

fn by_x(
    points: &[&Point],
    y: impl Fn(&Point) -> f64,
    x: impl Fn(&Point) -> u64,
) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = points.iter().map(|p| (x(p) as f64, y(p))).collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

fn traces(points: &[Point]) -> Vec<String> {
    let mut t: Vec<String> = Vec::new();
    for p in points {
        if !t.contains(&p.trace) {
            t.push(p.trace.clone());
        }
    }
    t
}

/// Figure 3: net write traffic against NVRAM size, omniscient write buffer, one line per trace.
pub fn fig3(dir: &Path, points: &[Point]) -> Result<Vec<PathBuf>> {
    let pts: Vec<&Point> = points
        .iter()
        .filter(|p| p.figure == Figure::NvramSize)
        .collect();
    if pts.is_empty() {
        return Ok(vec![]);
    }
    let series = traces(points)
        .into_iter()
        .map(|t| Series {
            points: by_x(
                &pts.iter()
                    .copied()
                    .filter(|p| p.trace == t)
                    .collect::<Vec<_>>(),
                |p| pct(p.stats.net_write_traffic),
                |p| p.nvram_bytes,
            ),
            name: t,
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    let path = file(dir, "fig3-omniscient", None);
    LineChart {
        title: "Omniscient replacement: net write traffic vs NVRAM size (seed 002 Fig. 3)".into(),
        x_label: "NVRAM size".into(),
        y_label: "net write traffic (% of block writes)".into(),
        x_scale: Scale::Log2Bytes,
        y_scale: Scale::Linear,
        series,
    }
    .write_svg(&path)?;
    Ok(vec![path])
}

/// Figure 4: LRU, random (mean over seeds) and omniscient, per trace.
pub fn fig4(dir: &Path, points: &[Point]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    // One chart per trace and NVRAM model: the sweep runs the policies under both.
    let cases = traces(points)
        .into_iter()
        .flat_map(|t| [Model::WriteAside, Model::Unified].map(|m| (t.clone(), m)));
    for (t, model) in cases {
        let pts: Vec<&Point> = points
            .iter()
            .filter(|p| p.figure == Figure::Policies && p.trace == t && p.model == model)
            .collect();
        if pts.is_empty() {
            continue;
        }
        let line = |pol: PolicyKind| {
            by_x(
                &pts.iter()
                    .copied()
                    .filter(|p| p.policy == pol)
                    .collect::<Vec<_>>(),
                |p| pct(p.stats.net_write_traffic),
                |p| p.nvram_bytes,
            )
        };
        let owned: Vec<Point> = pts.iter().map(|p| (*p).clone()).collect();
        let mut random: Vec<(f64, f64)> = random_summary(&owned)
            .into_iter()
            .map(|(_, _, _, n, mean, _, _)| (n as f64, pct(mean)))
            .collect();
        random.sort_by(|a, b| a.0.total_cmp(&b.0));
        let path = file(dir, &format!("fig4-policies-{}", model.name()), Some(&t));
        LineChart {
            title: format!(
                "{t}: replacement policies, {} model, {} volatile (seed 002 Fig. 4)",
                model.name(),
                nvstack_core::size::format_size(pts[0].volatile_bytes)
            ),
            x_label: "NVRAM size".into(),
            y_label: "net write traffic (% of block writes)".into(),
            x_scale: Scale::Log2Bytes,
            y_scale: Scale::Linear,
            series: vec![
                Series {
                    name: "LRU".into(),
                    points: line(PolicyKind::Lru),
                },
                Series {
                    name: "random (mean of seeds)".into(),
                    points: random,
                },
                Series {
                    name: "omniscient".into(),
                    points: line(PolicyKind::Omniscient),
                },
            ],
        }
        .write_svg(&path)?;
        out.push(path);
    }
    Ok(out)
}

/// Figures 5 and 6's line of model `m` from a volatile cache of `base` bytes: net total
/// traffic against the memory added.
fn model_series(pts: &[&Point], base: u64, m: Model) -> Series {
    Series {
        name: format!(
            "{}, {} volatile",
            m.name(),
            nvstack_core::size::format_size(base)
        ),
        points: by_x(
            &pts.iter()
                .copied()
                .filter(|p| p.base_volatile_bytes == base && p.model == m)
                .collect::<Vec<_>>(),
            |p| pct(p.stats.net_total_traffic),
            |p| p.added_bytes,
        ),
    }
}

/// Figures 5 and 6: net total traffic as memory is added, per trace; one chart per figure.
pub fn fig56(dir: &Path, points: &[Point]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for t in traces(points) {
        let pts: Vec<&Point> = points
            .iter()
            .filter(|p| p.figure == Figure::Models && p.trace == t && p.policy == PolicyKind::Lru)
            .collect();
        if pts.is_empty() {
            continue;
        }
        let mut bases: Vec<u64> = pts.iter().map(|p| p.base_volatile_bytes).collect();
        bases.sort();
        bases.dedup();
        // Figure 5: the three models from the smallest starting cache.
        let b0 = bases[0];
        let s5: Vec<Series> = [Model::Volatile, Model::WriteAside, Model::Unified]
            .into_iter()
            .map(|m| model_series(&pts, b0, m))
            .filter(|s| !s.points.is_empty())
            .collect();
        let path = file(dir, "fig5-models", Some(&t));
        LineChart {
            title: format!(
                "{t}: cache models, memory added to {} (seed 002 Fig. 5)",
                nvstack_core::size::format_size(b0)
            ),
            x_label: "memory added: volatile for volatile, NVRAM for the others".into(),
            y_label: "net total traffic (% of block accesses)".into(),
            x_scale: Scale::Log2Bytes,
            y_scale: Scale::Linear,
            series: s5,
        }
        .write_svg(&path)?;
        out.push(path);
        // Figure 6: volatile against unified from every starting cache.
        let s6: Vec<Series> = bases
            .iter()
            .flat_map(|&b| [Model::Volatile, Model::Unified].map(|m| (b, m)))
            .map(|(b, m)| model_series(&pts, b, m))
            .filter(|s| !s.points.is_empty())
            .collect();
        let path = file(dir, "fig6-memory", Some(&t));
        LineChart {
            title: format!("{t}: benefit of additional memory (seed 002 Fig. 6)"),
            x_label: "memory added".into(),
            y_label: "net total traffic (% of block accesses)".into(),
            x_scale: Scale::Log2Bytes,
            y_scale: Scale::Linear,
            series: s6,
        }
        .write_svg(&path)?;
        out.push(path);
    }
    Ok(out)
}

/// Section 2.6: NVRAM accesses and memory-bus blocks of write-aside and unified, per trace.
pub fn bus(dir: &Path, points: &[Point]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for t in traces(points) {
        let pts: Vec<&Point> = points
            .iter()
            .filter(|p| {
                p.figure == Figure::Models
                    && p.trace == t
                    && p.model != Model::Volatile
                    && p.nvram_bytes > 0
            })
            .collect();
        if pts.is_empty() {
            continue;
        }
        let base = pts.iter().map(|p| p.base_volatile_bytes).min().unwrap_or(0);
        let mut series = Vec::new();
        for m in [Model::WriteAside, Model::Unified] {
            let mp: Vec<&Point> = pts
                .iter()
                .copied()
                .filter(|p| p.model == m && p.base_volatile_bytes == base)
                .collect();
            let per_access = |x: u64, p: &Point| x as f64 / p.stats.block_accesses.max(1) as f64;
            series.push(Series {
                name: format!("{}: NVRAM accesses", m.name()),
                points: by_x(
                    &mp,
                    |p| per_access(p.stats.nvram_accesses, p),
                    |p| p.nvram_bytes,
                ),
            });
            series.push(Series {
                name: format!("{}: memory-bus blocks", m.name()),
                points: by_x(
                    &mp,
                    |p| per_access(p.stats.bus_blocks, p),
                    |p| p.nvram_bytes,
                ),
            });
        }
        let path = file(dir, "sec2.6-bus", Some(&t));
        LineChart {
            title: format!(
                "{t}: NVRAM accesses and memory-bus traffic, {} volatile (seed 002 section 2.6)",
                nvstack_core::size::format_size(base)
            ),
            x_label: "NVRAM size".into(),
            y_label: "blocks per block access".into(),
            x_scale: Scale::Log2Bytes,
            y_scale: Scale::Linear,
            series,
        }
        .write_svg(&path)?;
        out.push(path);
    }
    Ok(out)
}
