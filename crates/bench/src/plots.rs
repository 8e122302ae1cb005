//! `--plot DIR`: one SVG per suite and page size, mirroring the seed figure it reproduces
//! (same axes): peer (Fig. 9's IOPS against threads), ordering (Fig. 7: store latency against
//! size per persist method), record (Fig. 10: bandwidth against record size), latency
//! (Fig. 15: normalised throughput against NVRAM latency), allocation (Fig. 16: bandwidth
//! against write size), multiblock (latency against blocks per write), nvcache (UBJ's commit
//! latency against dirty blocks, beside the time of writing them; its fences per commit).

use super::{BenchReport, BenchResult};
use nvstack_core::error::Result;
use nvstack_plot::{LineChart, Scale, Series};
use std::path::{Path, PathBuf};

struct Fig {
    suite: &'static str,
    op: &'static str,
    file: &'static str,
    title: &'static str,
    x_label: &'static str,
    y_label: &'static str,
    x_scale: Scale,
    y_scale: Scale,
    x: fn(&BenchResult) -> Option<f64>,
    y: fn(&BenchResult) -> Option<f64>,
    /// Which rows belong on it (beyond suite and op).
    keep: fn(&BenchResult) -> bool,
}

fn all(_: &BenchResult) -> bool {
    true
}

const FIGS: [Fig; 10] = [
    Fig {
        suite: "peer",
        op: "write",
        file: "peer-write",
        title: "4 KiB random writes: nvramdisk, libpmemblk and the floors",
        x_label: "threads",
        y_label: "ops/s",
        x_scale: Scale::Linear,
        y_scale: Scale::Linear,
        x: |r| Some(f64::from(r.threads)),
        y: |r| Some(r.ops_per_sec),
        keep: all,
    },
    Fig {
        suite: "peer",
        op: "read",
        file: "peer-read",
        title: "4 KiB random reads: nvramdisk, libpmemblk and a raw copy",
        x_label: "threads",
        y_label: "ops/s",
        x_scale: Scale::Linear,
        y_scale: Scale::Linear,
        x: |r| Some(f64::from(r.threads)),
        y: |r| Some(r.ops_per_sec),
        keep: all,
    },
    Fig {
        suite: "ordering",
        op: "write",
        file: "ordering-fig7",
        title: "Store latency per persist method (seed 000 Fig. 7)",
        x_label: "store size",
        y_label: "median latency (ns)",
        x_scale: Scale::Log2Bytes,
        y_scale: Scale::Log10,
        x: |r| Some(r.block_bytes as f64),
        y: |r| Some(r.median_ns),
        keep: |r| r.protocol.is_none() && r.threads == 1 && !r.name.ends_with("-commit"),
    },
    Fig {
        suite: "record",
        op: "write",
        file: "record-fig10",
        title: "Random write bandwidth against record size (seed 000 Fig. 10)",
        x_label: "record size",
        y_label: "MB/s",
        x_scale: Scale::Log2Bytes,
        y_scale: Scale::Linear,
        x: |r| r.x,
        y: |r| Some(r.mb_per_sec),
        keep: all,
    },
    Fig {
        suite: "latency",
        op: "write",
        file: "latency-fig15",
        title: "Normalised 4 KiB write throughput against NVRAM latency (seed 000 Fig. 15)",
        x_label: "NVRAM latency (x DRAM)",
        y_label: "throughput / throughput at 1.0x",
        x_scale: Scale::Linear,
        y_scale: Scale::Linear,
        x: |r| r.x,
        y: |r| r.throughput_ratio,
        keep: all,
    },
    Fig {
        suite: "allocation",
        op: "write",
        file: "allocation-fig16",
        title: "Static shadow pool vs persistent bitmap allocator (seed 000 Fig. 16)",
        x_label: "write size",
        y_label: "MB/s",
        x_scale: Scale::Log2Bytes,
        y_scale: Scale::Linear,
        x: |r| r.x,
        y: |r| Some(r.mb_per_sec),
        keep: all,
    },
    Fig {
        suite: "multiblock",
        op: "write",
        file: "multiblock",
        title: "Atomic multi-block writes against single writes and a 2-fence copy",
        x_label: "blocks per write",
        y_label: "median latency (ns)",
        x_scale: Scale::Log2,
        y_scale: Scale::Log10,
        x: |r| r.x,
        y: |r| Some(r.median_ns),
        keep: all,
    },
    Fig {
        suite: "nvcache",
        op: "write",
        file: "nvcache-commit",
        title: "UBJ: commit of n dirty blocks against writing them",
        x_label: "dirty blocks per commit",
        y_label: "median latency (ns)",
        x_scale: Scale::Log2,
        y_scale: Scale::Log10,
        x: |r| r.x,
        y: |r| Some(r.median_ns),
        keep: |r| r.x.is_some(),
    },
    Fig {
        suite: "nvcache",
        op: "write",
        file: "nvcache-fences",
        title: "UBJ: fences per commit against dirty blocks",
        x_label: "dirty blocks per commit",
        y_label: "fences per commit",
        x_scale: Scale::Log2,
        y_scale: Scale::Linear,
        x: |r| r.x,
        y: |r| r.fences_per_op,
        keep: |r| r.name == "ubj-commit",
    },
    Fig {
        suite: "ordering",
        op: "read",
        file: "ordering-loads",
        title: "Load latency (seed 000 Fig. 7, reads)",
        x_label: "load size",
        y_label: "median latency (ns)",
        x_scale: Scale::Log2Bytes,
        y_scale: Scale::Log10,
        x: |r| Some(r.block_bytes as f64),
        y: |r| Some(r.median_ns),
        keep: all,
    },
];

fn page_tag(b: u64) -> String {
    if b >= 1 << 20 {
        format!("{}m", b >> 20)
    } else {
        format!("{}k", b >> 10)
    }
}

pub(super) fn write_all(r: &BenchReport, dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for f in &FIGS {
        let rows: Vec<&BenchResult> = r
            .results
            .iter()
            .filter(|x| x.suite == f.suite && x.op == f.op && (f.keep)(x))
            .collect();
        let pages = super::page_sizes(rows.iter().copied());
        for page in pages {
            let mut series: Vec<Series> = Vec::new();
            for x in rows.iter().filter(|x| x.page_bytes == page) {
                let (Some(px), Some(py)) = ((f.x)(x), (f.y)(x)) else {
                    continue;
                };
                let key = match (&x.ordering, f.suite) {
                    (Some(o), "ordering") => format!("{} {o}", x.name),
                    _ => x.name.clone(),
                };
                match series.iter_mut().find(|s| s.name == key) {
                    Some(s) => s.points.push((px, py)),
                    None => series.push(Series {
                        name: key,
                        points: vec![(px, py)],
                    }),
                }
            }
            if series.is_empty() {
                continue;
            }
            for s in series.iter_mut() {
                s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
            }
            let path = dir.join(format!("{}-{}.svg", f.file, page_tag(page)));
            LineChart {
                title: format!("{} ({} pages)", f.title, page_tag(page)),
                x_label: f.x_label.into(),
                y_label: f.y_label.into(),
                x_scale: f.x_scale,
                y_scale: f.y_scale,
                series,
            }
            .write_svg(&path)?;
            out.push(path);
        }
    }
    Ok(out)
}
