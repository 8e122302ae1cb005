//! The figures of seed 004 from the replays (`nvstack_lab::nvfat::report`): tables for people
//! and SVG.

// Per-page figures thin their points as `sim flash`'s do (the maximum of each run of pages).
use crate::sim::flash::peaks;
use nvstack_core::error::{Error, Result};
use nvstack_core::report::{fmt_count, render};
use nvstack_lab::nvfat::engine::Outcome;
use nvstack_lab::nvfat::report::{Line, LineTrends, Point, Ratios, Report};
use nvstack_plot::{LineChart, Scale, Series};
use std::path::{Path, PathBuf};

/// The write side's verdicts, as both sweeps print them.
fn describe(t: &LineTrends) -> String {
    format!(
        "time {}, energy {}, erase mean {}, erase sd {}, programs {}",
        t.exec_falls, t.energy_falls, t.erase_mean_falls, t.erase_sd_falls, t.programs_fall
    )
}

pub fn print(r: &Report) -> Result<()> {
    let h = &r.host;
    let q = &r.requests;
    crate::say!(
        "trace {}: {} reads ({} sectors), {} writes ({} sectors), {} flushes, {} discards",
        r.trace,
        fmt_count(q.reads as f64),
        fmt_count(q.read_blocks as f64),
        fmt_count(q.writes as f64),
        fmt_count(q.write_blocks as f64),
        q.flushes,
        q.discards
    )?;
    crate::say!(
        "host time {:.3} s ({}: run CPU {} s, device waits {:.3} s, trace span {:.3} s); \
         execution time = host time + the device time the application waits for",
        h.host_ns as f64 * 1e-9,
        h.source,
        h.run_cpu_ns
            .map_or("-".into(), |c| format!("{:.3}", c as f64 * 1e-9)),
        h.device_wait_ns as f64 * 1e-9,
        h.trace_span_ns as f64 * 1e-9
    )?;
    print_sweep(r)?;
    print_changed(r)?;
    print_comparison(r)?;
    print_hot(r)?;
    print_beyond(r)?;
    if let Some(a) = &r.admission {
        crate::say!(
            "\nFAT-metadata admission (independent FAT-layout counter, {} KiB run): {} of {} \
             metadata sector writes admitted ({:.3} %); {} file-data sector writes admitted; \
             {} directory sectors at the end",
            r.comparison.top_kib,
            fmt_count(a.caught as f64),
            fmt_count(a.metadata_writes as f64),
            a.caught_pct,
            fmt_count(a.admitted_data as f64),
            a.directory_sectors_at_end
        )?;
    }
    crate::say!("{} replays in {:.1} s", r.runs.len(), r.seconds)
}

fn print_sweep(r: &Report) -> Result<()> {
    crate::say!("\nFigures 4, 7, 8 (log-block FTL, LRW destage, FAT-metadata admission):")?;
    let mut cells = Vec::new();
    for (i, p) in r.sync.points.iter().enumerate() {
        let a = r.r#async.points.get(i);
        cells.push(vec![
            format!("{} KiB", p.kib),
            format!("{:.1}", p.exec_s),
            a.map_or("-".into(), |a| format!("{:.1}", a.exec_s)),
            format!("{:.1}", r.vfat_async.exec_s),
            format!("{:.3}", p.erase_mean),
            format!("{:.3}", p.erase_sd),
            format!("{:.3}", p.energy_j),
            a.map_or("-".into(), |a| format!("{:.3}", a.energy_j)),
            format!("{:.1}", p.page_cache_exec_s),
            format!("{:.3}", p.page_cache_energy_j),
            fmt_count(p.page_reads as f64),
            fmt_count(p.host_page_writes as f64),
            fmt_count(p.page_programs as f64),
            fmt_count(p.block_erases as f64),
        ]);
    }
    let hdr = [
        "NVRAM",
        "sync s",
        "async s",
        "VFAT async s",
        "erase mean",
        "erase sd",
        "sync J",
        "async J",
        "sync+pc s",
        "sync+pc J",
        "page reads",
        "FTL writes",
        "programs",
        "erases",
    ];
    let mut right = vec![true; hdr.len()];
    right[0] = false;
    crate::output::out(render(&hdr, &cells, &right).as_bytes())?;
    let t = &r.trends;
    crate::say!(
        "(sync+pc: Sync-PostMark with a page cache for reads, as the seed's VFAT read \
         through Linux's buffer cache; page reads: the raw sync run's flash page reads)\n\
         falls with NVRAM size (sync): {}; async time {}; sync+pc time {}, energy {}",
        describe(&t.sync),
        t.async_exec_falls,
        t.sync.page_cache_exec_falls,
        t.sync.page_cache_energy_falls
    )
}

/// The changed-sector view's sweep, beside the raw one above, and what it dropped.
fn print_changed(r: &Report) -> Result<()> {
    let (line, t) = (&r.sync_changed, &r.trends.changed);
    crate::say!(
        "\nThe same, changed-sector view (sync changed: only the sectors whose bytes a write \
         changed reach the device, as the seed's VFAT wrote its dirty buffers; docs/nvfat.md):"
    )?;
    let cells: Vec<Vec<String>> = line
        .points
        .iter()
        .map(|p| {
            vec![
                format!("{} KiB", p.kib),
                format!("{:.1}", p.exec_s),
                format!("{:.3}", p.erase_mean),
                format!("{:.3}", p.erase_sd),
                format!("{:.3}", p.energy_j),
                format!("{:.1}", p.page_cache_exec_s),
                format!("{:.3}", p.page_cache_energy_j),
                fmt_count(p.page_reads as f64),
                fmt_count(p.host_page_writes as f64),
                fmt_count(p.page_programs as f64),
                fmt_count(p.block_erases as f64),
                format!("{}/{}/{}", p.switch_merges, p.partial_merges, p.full_merges),
            ]
        })
        .collect();
    let hdr = [
        "NVRAM",
        "sync s",
        "erase mean",
        "erase sd",
        "sync J",
        "sync+pc s",
        "sync+pc J",
        "page reads",
        "FTL writes",
        "programs",
        "erases",
        "merges s/p/f",
    ];
    let mut right = vec![true; hdr.len()];
    right[0] = false;
    crate::output::out(render(&hdr, &cells, &right).as_bytes())?;
    print_changed_counts(r)?;
    crate::say!(
        "falls with NVRAM size (sync changed): {}; sync changed+pc time {}, energy {}",
        describe(t),
        t.page_cache_exec_falls,
        t.page_cache_energy_falls
    )
}

fn print_changed_counts(r: &Report) -> Result<()> {
    let v = &r.changed_view;
    let st = &v.stats;
    crate::say!(
        "sync changed drops {} of {} sector writes (bytes unchanged); {} of {} write \
         requests changed nothing (no device time; their host time kept, which is \
         conservative), {} were partly changed (written as their changed runs): {} \
         requests in the view",
        fmt_count(st.sectors_dropped as f64),
        fmt_count(st.sectors_written as f64),
        fmt_count(st.requests_unchanged as f64),
        fmt_count(st.write_requests as f64),
        fmt_count(st.requests_partly_changed as f64),
        fmt_count(st.runs as f64)
    )?;
    if let Some(k) = &v.raw_kinds {
        crate::say!(
            "independent counter (its own copy of the volume, {} KiB raw run): {} changed \
             sector writes; unchanged: FAT {} of {}, directory {} of {}, reserved {} of {}, \
             data {} of {}",
            r.comparison.top_kib,
            fmt_count(k.changed() as f64),
            fmt_count(k.fat_unchanged as f64),
            fmt_count(k.fat as f64),
            fmt_count(k.directory_unchanged as f64),
            fmt_count(k.directory as f64),
            fmt_count(k.reserved_unchanged as f64),
            fmt_count(k.reserved as f64),
            fmt_count(k.data_unchanged as f64),
            fmt_count(k.data as f64)
        )?;
    }
    if let Some(k) = &v.view_kinds {
        crate::say!(
            "the view's {} KiB run wrote {} sectors (FAT {}, directory {}, reserved {}, data \
             {}), {} of them unchanged by the independent counter",
            r.comparison.top_kib,
            fmt_count(k.written() as f64),
            fmt_count(k.fat as f64),
            fmt_count(k.directory as f64),
            fmt_count(k.reserved as f64),
            fmt_count(k.data as f64),
            k.unchanged()
        )?;
    }
    Ok(())
}

fn print_comparison(r: &Report) -> Result<()> {
    let c = &r.comparison;
    crate::say!(
        "\nOurs beside the seed's (Sync-PostMark, 0 KiB against {} KiB):",
        c.top_kib
    )?;
    // The seed's two values, printed with the precision the seed gives them (whole
    // seconds, tenths of a joule), and their ratio.
    let seed_exec = (c.seed_exec_s, 0, c.seed_exec_ratio);
    let seed_energy = (c.seed_energy_j, 1, c.seed_energy_ratio);
    // The JSON keeps the raw ratios flat under their first names; the rows are built from
    // the same `Ratios` as the view's.
    let raw = Ratios::of(&r.sync.points);
    let mut cells = ratio_rows(RAW_LABELS, &raw, seed_exec, seed_energy);
    cells.push(vec![
        "Async-PostMark time".into(),
        format!("{:.1} s -> {:.1} s", c.async_exec_s.0, c.async_exec_s.1),
        format!("VFAT {:.1} s", c.vfat_async_exec_s),
        "NVFAT beats VFAT by 32.5 % at 128 KB".into(),
        "-".into(),
    ]);
    cells.extend(ratio_rows(
        CHANGED_LABELS,
        &c.changed,
        seed_exec,
        seed_energy,
    ));
    let hdr = ["quantity", "ours", "ratio", "seed", "seed ratio"];
    crate::output::out(render(&hdr, &cells, &[false, true, true, true, true]).as_bytes())
}

fn print_hot(r: &Report) -> Result<()> {
    crate::say!("\nFigures 5 and 6 (Sync-PostMark): the hottest logical pages and programs per physical page")?;
    let cells: Vec<Vec<String>> = r
        .hot
        .iter()
        .map(|h| {
            vec![
                format!("{} KiB", h.kib),
                h.top
                    .iter()
                    .map(|(l, w)| format!("{l}:{w}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                fmt_count(f64::from(h.logical_writes_max)),
                fmt_count(f64::from(h.physical_programs_max)),
                fmt_count(h.pages_programmed_over_54 as f64),
            ]
        })
        .collect();
    let hdr = [
        "NVRAM",
        "hottest LBNs (lbn:writes)",
        "max writes/LBN",
        "max programs/page",
        "pages > 54 programs",
    ];
    crate::output::out(render(&hdr, &cells, &[false, false, true, true, true]).as_bytes())
}

fn print_beyond(r: &Report) -> Result<()> {
    let mut lines: Vec<&Line> = r.policies.iter().collect();
    lines.extend(r.admit_all.iter());
    lines.extend(r.page_ftl.iter());
    if lines.is_empty() {
        return Ok(());
    }
    crate::say!(
        "\nBeyond the seed (Sync-PostMark): destage policies, --admit all, the page-mapped FTL"
    )?;
    let mut cells = Vec::new();
    for l in lines {
        for p in &l.points {
            cells.push(vec![
                l.name.clone(),
                format!("{} KiB", p.kib),
                format!("{:.1}", p.exec_s),
                format!("{:.3}", p.energy_j),
                format!("{:.3}", p.erase_sd),
                fmt_count(p.page_programs as f64),
                fmt_count(p.destaged as f64),
            ]);
        }
    }
    let hdr = [
        "run", "NVRAM", "time s", "energy J", "erase sd", "programs", "destaged",
    ];
    let mut right = vec![true; hdr.len()];
    right[0] = false;
    right[1] = false;
    crate::output::out(render(&hdr, &cells, &right).as_bytes())?;
    if let Some(v) = &r.page_ftl_vfat_async {
        crate::say!(
            "page-mapped FTL, VFAT Async-PostMark: {:.1} s, {:.3} J",
            v.exec_s,
            v.energy_j
        )?;
    }
    Ok(())
}

/// The x position of a size: its step of the seed's axis (0, 1, 2, 4, ... KiB evenly spaced).
fn step(kib: u64) -> f64 {
    if kib == 0 {
        0.0
    } else {
        (kib as f64).log2() + 1.0
    }
}

fn series(name: &str, ps: &[Point], q: impl Fn(&Point) -> f64) -> Series {
    Series {
        name: name.into(),
        points: ps.iter().map(|p| (step(p.kib), q(p))).collect(),
    }
}

const X_LABEL: &str = "NVRAM size (step: 0 = none, k = 2^(k-1) KiB; 8 = 128 KiB)";

fn chart(title: &str, x: &str, y: &str, y_scale: Scale, series: Vec<Series>) -> LineChart {
    LineChart {
        title: title.into(),
        x_label: x.into(),
        y_label: y.into(),
        x_scale: Scale::Linear,
        y_scale,
        series,
    }
}

fn flat(name: &str, ps: &[Point], v: f64) -> Series {
    Series {
        name: name.into(),
        points: ps.iter().map(|p| (step(p.kib), v)).collect(),
    }
}

/// The changed-sector view's lines of Figures 4, 7 and 8 (in that order).
fn changed_series(c: &[Point], figs: [&mut Vec<Series>; 3]) {
    let [time, erases, energy] = figs;
    time.push(series("NVFAT Sync-PostMark, changed sectors", c, |p| {
        p.exec_s
    }));
    time.push(series(
        "NVFAT Sync-PostMark, changed + page cache",
        c,
        |p| p.page_cache_exec_s,
    ));
    erases.push(series("mean, changed sectors", c, |p| p.erase_mean));
    erases.push(series("standard deviation, changed sectors", c, |p| {
        p.erase_sd
    }));
    energy.push(series("Sync-PostMark, changed sectors", c, |p| p.energy_j));
    energy.push(series("Sync-PostMark, changed + page cache", c, |p| {
        p.page_cache_energy_j
    }));
}

/// Figures 4, 7 and 8: the raw lines, and the changed-sector view's beside them.
fn sweep_charts(r: &Report) -> Vec<(&'static str, LineChart)> {
    let (s, a) = (&r.sync.points, &r.r#async.points);
    let c = &r.sync_changed.points;
    let mut time = vec![
        series("NVFAT Sync-PostMark", s, |p| p.exec_s),
        flat("VFAT Sync-PostMark", s, s[0].exec_s),
        series("NVFAT Sync-PostMark, page cache", s, |p| {
            p.page_cache_exec_s
        }),
        flat("VFAT Sync-PostMark, page cache", s, s[0].page_cache_exec_s),
        series("NVFAT Async-PostMark", a, |p| p.exec_s),
        flat("VFAT Async-PostMark", s, r.vfat_async.exec_s),
    ];
    let mut erases = vec![
        series("mean", s, |p| p.erase_mean),
        series("standard deviation", s, |p| p.erase_sd),
    ];
    let mut energy = vec![
        series("Sync-PostMark", s, |p| p.energy_j),
        series("Sync-PostMark, page cache", s, |p| p.page_cache_energy_j),
        series("Async-PostMark", a, |p| p.energy_j),
    ];
    changed_series(c, [&mut time, &mut erases, &mut energy]);
    vec![
        (
            "nvfat-fig4-time.svg",
            chart(
                "Execution time against NVRAM size (seed 004 Fig. 4)",
                X_LABEL,
                "execution time (s)",
                Scale::Log10,
                time,
            ),
        ),
        (
            "nvfat-fig7-erases.svg",
            chart(
                "Erase count per block against NVRAM size (seed 004 Fig. 7)",
                X_LABEL,
                "erases per block",
                Scale::Linear,
                erases,
            ),
        ),
        (
            "nvfat-fig8-energy.svg",
            chart(
                "Flash energy against NVRAM size (seed 004 Fig. 8)",
                X_LABEL,
                "energy (J)",
                Scale::Linear,
                energy,
            ),
        ),
    ]
}

/// Beyond the seed: every policy, `--admit all` and the page-mapped FTL (none: no chart).
fn beyond_chart(r: &Report) -> Option<(&'static str, LineChart)> {
    if r.policies.is_empty() {
        return None;
    }
    let ss: Vec<Series> = r
        .policies
        .iter()
        .chain(r.admit_all.iter())
        .chain(r.page_ftl.iter())
        .map(|l| series(&l.name, &l.points, |p| p.energy_j))
        .collect();
    Some((
        "nvfat-beyond-energy.svg",
        chart(
            "Beyond the seed: flash energy (Sync-PostMark)",
            X_LABEL,
            "energy (J)",
            Scale::Linear,
            ss,
        ),
    ))
}

/// Figures 5 and 6: per logical block and per physical page, without and with the most NVRAM.
fn per_page_charts(r: &Report) -> Vec<(&'static str, LineChart)> {
    let per_page = |f: &dyn Fn(&Outcome) -> &[u32]| -> Vec<Series> {
        r.keep
            .iter()
            .map(|o| Series {
                name: if o.job.nvram_bytes == 0 {
                    "VFAT (no NVRAM)".into()
                } else {
                    format!("NVFAT {} KiB", o.job.nvram_bytes / 1024)
                },
                points: peaks(f(o)),
            })
            .collect()
    };
    vec![
        (
            "nvfat-fig5-ftl-writes.svg",
            chart(
                "Writes per logical block seen by the FTL, Sync-PostMark (seed 004 Fig. 5)",
                "logical block number",
                "writes (max over neighbouring blocks)",
                Scale::Linear,
                per_page(&|o| &o.logical_writes),
            ),
        ),
        (
            "nvfat-fig6-flash-programs.svg",
            chart(
                "Programs per physical page, Sync-PostMark (seed 004 Fig. 6)",
                "physical page",
                "programs (max over neighbouring pages)",
                Scale::Linear,
                per_page(&|o| &o.page_programs),
            ),
        ),
    ]
}

pub fn figures(dir: &Path, r: &Report) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::env(format!("--plot {}: cannot create: {e}", dir.display())))?;
    let mut charts = sweep_charts(r);
    charts.extend(beyond_chart(r));
    charts.extend(per_page_charts(r));
    let mut out = Vec::new();
    for (file, c) in charts {
        let p = dir.join(file);
        c.write_svg(&p)?;
        out.push(p);
    }
    Ok(out)
}

/// The comparison table's labels of a line's five rows (time, energy, time and energy with
/// the page cache, erases), raw and in the changed-sector view.
const RAW_LABELS: [&str; 5] = [
    "execution time",
    "flash energy",
    "time, page cache",
    "energy, page cache",
    "erase count mean / sd",
];
const CHANGED_LABELS: [&str; 5] = [
    "time, changed",
    "energy, changed",
    "time, changed + pc",
    "energy, changed + pc",
    "erase mean / sd, changed",
];

/// A line's rows of the comparison table, beside the seed's.
fn ratio_rows(
    labels: [&str; 5],
    r: &Ratios,
    seed_exec: ((f64, f64), usize, f64),
    seed_energy: ((f64, f64), usize, f64),
) -> Vec<Vec<String>> {
    let [time, energy, pc_time, pc_energy, erases] = labels;
    vec![
        seed_row(time, "s", 1, r.exec_s, r.exec_ratio, seed_exec),
        seed_row(energy, "J", 3, r.energy_j, r.energy_ratio, seed_energy),
        seed_row(
            pc_time,
            "s",
            1,
            r.page_cache_exec_s,
            r.page_cache_exec_ratio,
            seed_exec,
        ),
        seed_row(
            pc_energy,
            "J",
            3,
            r.page_cache_energy_j,
            r.page_cache_energy_ratio,
            seed_energy,
        ),
        vec![
            erases.into(),
            format!(
                "{:.2}/{:.2} -> {:.2}/{:.2}",
                r.erase_mean.0, r.erase_sd.0, r.erase_mean.1, r.erase_sd.1
            ),
            format!("sd {:.2}x", r.erase_sd_ratio),
            "both fall (Fig. 7)".into(),
            "-".into(),
        ],
    ]
}

/// One row of the comparison table: ours from and to (with `prec` decimals) and the ratio,
/// beside the seed's values (with their own decimals) and ratio.
fn seed_row(
    label: &str,
    unit: &str,
    prec: usize,
    ours: (f64, f64),
    ratio: f64,
    seed: ((f64, f64), usize, f64),
) -> Vec<String> {
    let ((from, to), seed_prec, seed_ratio) = seed;
    vec![
        label.into(),
        format!(
            "{from:.prec$} {unit} -> {to:.prec$} {unit}",
            from = ours.0,
            to = ours.1
        ),
        format!("{ratio:.2}x"),
        format!("{from:.seed_prec$} {unit} -> {to:.seed_prec$} {unit}"),
        format!("{seed_ratio:.1}x"),
    ]
}
