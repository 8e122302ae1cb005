//! SVG line charts for the simulator's and the benchmarks' `--plot` figures.
//!
//! One chart type only: lines with point markers, one per [`Series`], over linear or log
//! axes, with a title, axis labels, a grid and a legend. That covers every figure of the
//! papers we mirror (traffic against cache size, throughput against record size).
//!
//! Text needs no font feature: plotters' SVG backend writes `<text>` elements and leaves
//! glyphs to the viewer, and without `ttf`/`ab_glyph` plotters only estimates text widths,
//! which is all the layout needs. So nothing native (fontconfig, freetype) is built.
//!
//! Rules for awkward data, chosen so any finite input gives a valid figure:
//! - A point with a non-finite coordinate, or a negative one on a log axis, is not drawn;
//!   the legend panel then says how many points were left out.
//! - On a log axis a coordinate of exactly 0 (e.g. "no NVRAM") is drawn at an extra tick
//!   labelled "0", one tick step below the smallest positive tick.
//! - A linear y axis starts at 0 when no value is negative, so line heights compare across
//!   figures the way the papers' do; a linear x axis fits the data.
//! - With no drawable point at all, the figure still has its title and legend and says
//!   "no data" where the plot would be, so a run that produced nothing is visible rather
//!   than an error that stops the other figures.

use nvstack_core::error::{Error, Result};
use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::coord::CoordTranslate;
use plotters::drawing::DrawingAreaErrorKind;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::ops::Range;
use std::path::Path;

/// How an axis maps values to positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    Linear,
    /// Ticks at powers of 2, labelled as plain numbers.
    Log2,
    Log10,
    /// Log2 with ticks labelled as byte sizes (64 KiB, 1 MiB): cache and record sizes.
    Log2Bytes,
}

/// One line of a chart; points are joined in the order given.
#[derive(Clone, Debug, Default)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A line chart, written with [`LineChart::write_svg`].
#[derive(Clone, Debug)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_scale: Scale,
    pub y_scale: Scale,
    pub series: Vec<Series>,
}

/// Tick label for a byte size: "0", "512 B", "64 KiB", "1.5 MiB". Binary units, because
/// cache and record sizes are powers of two; non-finite input gives "?".
pub fn format_bytes_tick(v: f64) -> String {
    if !v.is_finite() {
        return "?".into();
    }
    if v == 0.0 {
        return "0".into();
    }
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let sign = if v < 0.0 { "-" } else { "" };
    let mut scaled = v.abs();
    let mut unit = 0;
    while scaled >= 1024.0 && unit + 1 < UNITS.len() {
        scaled /= 1024.0;
        unit += 1;
    }
    format!("{sign}{} {}", short_number(scaled), UNITS[unit])
}

/// A compact number: at most 3 decimals in the everyday range, else 3 significant digits
/// in exponent form, so no label can grow to hundreds of digits.
fn short_number(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 || (1e-3..1e6).contains(&a) {
        trim_zeros(format!("{v:.3}"))
    } else {
        exponent_form(v, 2)
    }
}

fn exponent_form(v: f64, decimals: usize) -> String {
    let s = format!("{v:.decimals$e}");
    match s.split_once('e') {
        Some((mantissa, exp)) => format!("{}e{exp}", trim_zeros(mantissa.to_string())),
        None => s,
    }
}

fn trim_zeros(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

// Layout, in pixels. Text sizes are what the viewer gets: plotters divides the size it is
// given by 1.24 when it writes font-size, so `font` multiplies it back.
const PLOT_WIDTH_PX: u32 = 640;
const MIN_HEIGHT_PX: u32 = 500;
const LEGEND_MIN_WIDTH_PX: u32 = 150;
const LEGEND_ROW_PX: i32 = 18;
const LEGEND_LINE_CHARS: usize = 40;
const LEGEND_TEXT_PX: f64 = 12.0;
// An average sans-serif glyph is about 0.55 em wide; over-estimating only wastes margin.
const CHAR_WIDTH_EM: f64 = 0.6;
// Bold ticks per axis: enough to read values off, few enough that labels do not collide.
const MAX_TICKS: i64 = 8;

fn font(px: f64) -> TextStyle<'static> {
    TextStyle::from(("sans-serif", px * 1.24).into_font())
}

// Okabe-Ito colours (safe for colour-blind readers), yellow left out as too pale on white.
const PALETTE: [RGBColor; 7] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
];
// Eight marker shapes against seven colours: every (colour, marker) pair differs up to 56
// series, and markers alone tell 8 apart in black and white.
const MARKER_KINDS: usize = 8;

fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Draws the marker of series `i` centred on `at` (a data or a pixel coordinate). Each
/// shape is its own element type, hence one `draw` per arm.
fn draw_marker<DB: DrawingBackend, CT: CoordTranslate>(
    area: &DrawingArea<DB, CT>,
    at: CT::From,
    i: usize,
) -> std::result::Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    CT::From: Clone,
{
    let c = colour(i);
    let fill = c.filled();
    let line = c.stroke_width(2);
    let e = EmptyElement::at(at);
    match i % MARKER_KINDS {
        0 => area.draw(&(e + Circle::new((0, 0), 4, fill))),
        1 => area.draw(&(e + Rectangle::new([(-4, -4), (4, 4)], line))),
        2 => area.draw(&(e + Polygon::new(vec![(0, -5), (5, 4), (-5, 4)], fill))),
        3 => area.draw(&(e + Cross::new((0, 0), 4, line))),
        4 => area.draw(&(e + Circle::new((0, 0), 4, line))),
        5 => area.draw(&(e + Rectangle::new([(-4, -4), (4, 4)], fill))),
        6 => area.draw(&(e + PathElement::new(vec![(-5, -4), (5, -4), (0, 5), (-5, -4)], line))),
        _ => area.draw(&(e + Polygon::new(vec![(0, -5), (5, 0), (0, 5), (-5, 0)], fill))),
    }
}

/// Whether a point can be placed on these axes (see the module rules).
fn drawable(scale: Scale, v: f64) -> bool {
    v.is_finite() && (scale == Scale::Linear || v >= 0.0)
}

/// One axis: where values go and which ticks it shows. Positions are computed in "display
/// space" (the value on a linear axis, its logarithm on a log axis).
struct Axis {
    scale: Scale,
    lo_t: f64,
    hi_t: f64,
    /// Display position of the "0" tick on a log axis, when some value is 0.
    zero_t: Option<f64>,
    ticks: Vec<f64>,
    minor_ticks: Vec<f64>,
    /// Tick spacing of a linear axis, which fixes how many decimals labels need.
    step: f64,
}

impl Axis {
    fn base(scale: Scale) -> f64 {
        match scale {
            Scale::Log10 => 10.0,
            _ => 2.0,
        }
    }

    /// `values` are the drawable values on this axis; `from_zero` asks for a 0 baseline.
    fn new(scale: Scale, values: &[f64], from_zero: bool) -> Axis {
        match scale {
            Scale::Linear => Axis::linear(values, from_zero),
            _ => Axis::log(scale, values),
        }
    }

    fn linear(values: &[f64], from_zero: bool) -> Axis {
        let data_min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let data_max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let (mut a, mut b) = if values.is_empty() {
            (0.0, 1.0)
        } else {
            (data_min, data_max)
        };
        if from_zero && a >= 0.0 {
            a = 0.0;
        }
        // Halves keep the span finite even for -f64::MAX..f64::MAX.
        let half_span = b / 2.0 - a / 2.0;
        let magnitude = a.abs().max(b.abs());
        // A flat line (or a span lost in rounding) gets room around it instead of a
        // zero-width axis that would divide by zero.
        if half_span <= magnitude * 1e-9 || half_span < 1e-290 {
            let c = a / 2.0 + b / 2.0;
            let half = if c.abs() > 1e-290 { c.abs() / 2.0 } else { 1.0 };
            a = c - half;
            b = c + half;
            if from_zero && data_min >= 0.0 {
                a = a.max(0.0);
            }
        }
        let step = nice_step((b / 2.0 - a / 2.0) / (MAX_TICKS as f64 / 2.0 - 1.0));
        let first = (a / step).floor();
        let last = (b / step).ceil();
        let nice_lo = first * step;
        let nice_hi = last * step;
        let lo_t = if nice_lo.is_finite() {
            nice_lo.min(a)
        } else {
            a
        };
        let hi_t = if nice_hi.is_finite() {
            nice_hi.max(b)
        } else {
            b
        };
        let count = ((last - first) as i64).clamp(0, 4 * MAX_TICKS);
        let ticks = (0..=count)
            .map(|i| (first + i as f64) * step)
            .filter(|t| t.is_finite() && *t >= lo_t && *t <= hi_t)
            .collect();
        Axis {
            scale: Scale::Linear,
            lo_t,
            hi_t,
            zero_t: None,
            ticks,
            minor_ticks: vec![],
            step,
        }
    }

    fn log(scale: Scale, values: &[f64]) -> Axis {
        let base = Axis::base(scale);
        // Exponents whose powers are finite and non-zero, so every tick label is a number.
        let (min_exp, max_exp) = if base == 10.0 {
            (-323, 308)
        } else {
            (-1074, 1023)
        };
        let has_zero = values.contains(&0.0);
        let (mut lo, mut hi) = Axis::log_range(base, values);
        // log10(1000) can come out as 2.9999999999999996; an exact power should be a tick.
        let snap = |t: f64| {
            if (t - t.round()).abs() < 1e-9 {
                t.round()
            } else {
                t
            }
        };
        let mut e_lo = snap(lo).floor() as i64;
        let mut e_hi = snap(hi).ceil() as i64;
        if e_lo == e_hi {
            e_lo -= 1;
            e_hi += 1;
        }
        let span = e_hi - e_lo;
        let stride = [1, 2, 4, 5, 10, 20, 50, 100, 200, 500]
            .into_iter()
            .find(|k| (span + k - 1) / k <= MAX_TICKS)
            .unwrap_or(1000);
        // Ticks on multiples of the stride: with bytes and a stride of 2 or 10 they land
        // on whole KiB, MiB, GiB.
        e_lo = e_lo.div_euclid(stride) * stride;
        e_hi = -((-e_hi).div_euclid(stride) * stride);
        lo = lo.min(e_lo as f64);
        hi = hi.max(e_hi as f64);
        let power = |e: i64| base.powf(e as f64);
        let mut ticks: Vec<f64> = (e_lo..=e_hi)
            .step_by(stride as usize)
            .filter(|e| (min_exp..=max_exp).contains(e))
            .map(power)
            .collect();
        let minor_ticks = Axis::log_minor_ticks(base, (e_lo, e_hi), stride, (min_exp, max_exp));
        let mut zero_t = None;
        if has_zero {
            let z = (e_lo - stride) as f64;
            zero_t = Some(z);
            lo = z;
            ticks.insert(0, 0.0);
        }
        Axis {
            scale,
            lo_t: lo,
            hi_t: hi,
            zero_t,
            ticks,
            minor_ticks,
            step: 1.0,
        }
    }

    /// The logarithms of the smallest and largest positive values; (0, 1) when there is none.
    fn log_range(base: f64, values: &[f64]) -> (f64, f64) {
        let positive: Vec<f64> = values.iter().copied().filter(|&v| v > 0.0).collect();
        let log_of = |v: f64| v.log(base);
        if positive.is_empty() {
            (0.0, 1.0)
        } else {
            let min_t = positive
                .iter()
                .copied()
                .map(log_of)
                .fold(f64::INFINITY, f64::min);
            let max_t = positive
                .iter()
                .copied()
                .map(log_of)
                .fold(f64::NEG_INFINITY, f64::max);
            (min_t, max_t)
        }
    }

    /// Unlabelled ticks between the labelled powers `e_lo..=e_hi`: the skipped powers when
    /// the stride is 2 to 10, or 2..9 times each power of ten when every power is labelled.
    /// Only exponents in the given range, whose powers are finite and non-zero.
    fn log_minor_ticks(
        base: f64,
        (e_lo, e_hi): (i64, i64),
        stride: i64,
        (min_exp, max_exp): (i64, i64),
    ) -> Vec<f64> {
        let power = |e: i64| base.powf(e as f64);
        let mut minor_ticks = Vec::new();
        if stride > 1 && stride <= 10 {
            minor_ticks = (e_lo..=e_hi)
                .filter(|e| e % stride != 0 && (min_exp..=max_exp).contains(e))
                .map(power)
                .collect();
        } else if stride == 1 && base == 10.0 {
            for e in (e_lo..e_hi).filter(|e| (min_exp..max_exp).contains(e)) {
                minor_ticks.extend((2..=9).map(|m| m as f64 * power(e)));
            }
        }
        minor_ticks
    }

    /// Room at both ends, so markers on the first and last ticks are not cut by the frame.
    fn padded(mut self) -> Axis {
        let pad = (self.hi_t / 2.0 - self.lo_t / 2.0) * 0.06;
        let (lo, hi) = (self.lo_t - pad, self.hi_t + pad);
        if lo.is_finite() {
            self.lo_t = lo;
        }
        if hi.is_finite() {
            self.hi_t = hi;
        }
        self
    }

    fn display(&self, v: f64) -> f64 {
        match self.scale {
            Scale::Linear => v,
            _ if v > 0.0 => v.log(Axis::base(self.scale)),
            _ => self.zero_t.unwrap_or(self.lo_t),
        }
    }

    /// Whether every positive tick's exponent lies in `exponents`: an axis labels all its
    /// powers as plain numbers (0.5, 1024) or all as powers (2^20), never a mix.
    fn plain_powers(&self, exponents: std::ops::RangeInclusive<f64>) -> bool {
        let base = Axis::base(self.scale);
        self.ticks
            .iter()
            .filter(|&&t| t > 0.0)
            .all(|&t| exponents.contains(&t.log(base).round()))
    }

    fn label(&self, v: f64) -> String {
        match self.scale {
            _ if self.scale != Scale::Linear && v <= 0.0 => "0".into(),
            Scale::Linear => linear_label(v, self.step),
            Scale::Log2Bytes => format_bytes_tick(v),
            Scale::Log2 if self.plain_powers(-3.0..=16.0) => short_number(v),
            Scale::Log2 => format!("2^{}", v.log2().round()),
            Scale::Log10 if self.plain_powers(-3.0..=6.0) => short_number(v),
            Scale::Log10 => format!("1e{}", v.log10().round()),
        }
    }
}

/// 1, 2 or 5 times a power of ten, at least `raw`: steps people read without arithmetic.
fn nice_step(raw: f64) -> f64 {
    let raw = if raw.is_finite() && raw > 0.0 {
        raw
    } else {
        1.0
    };
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|&s| s >= raw * (1.0 - 1e-12) && s.is_finite() && s > 0.0)
        .unwrap_or(raw)
}

/// A linear tick label with as many decimals as the tick step needs, so 0.5 steps read
/// "0.5" and not "0.5000000001"; exponent form for very large or small magnitudes.
fn linear_label(v: f64, step: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let step_exp = step.abs().log10().floor();
    if v.abs() >= 1e6 || step.abs() < 1e-4 {
        let digits = (v.abs().log10().floor() - step_exp).clamp(0.0, 15.0) as usize;
        exponent_form(v, digits)
    } else {
        let decimals = (-step_exp).clamp(0.0, 15.0) as usize;
        trim_zeros(format!("{v:.decimals$}"))
    }
}

impl Ranged for Axis {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let t = self.display(*v);
        let frac = (t / 2.0 - self.lo_t / 2.0) / (self.hi_t / 2.0 - self.lo_t / 2.0);
        // Off-range values stay near the frame instead of overflowing the pixel type.
        let frac = if frac.is_finite() {
            frac.clamp(-0.5, 1.5)
        } else {
            0.0
        };
        let px = f64::from(limit.0) + frac * (f64::from(limit.1) - f64::from(limit.0));
        px.round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        let ticks = if hint.weight().allow_light_points() {
            &self.minor_ticks
        } else {
            &self.ticks
        };
        let every = ticks.len().div_ceil(hint.max_num_points().max(1)).max(1);
        ticks.iter().copied().step_by(every).collect()
    }

    fn range(&self) -> Range<f64> {
        let value = |t: f64| match self.scale {
            Scale::Linear => t,
            _ => Axis::base(self.scale).powf(t),
        };
        value(self.lo_t)..value(self.hi_t)
    }
}

impl ValueFormatter<f64> for Axis {
    fn format(v: &f64) -> String {
        short_number(*v)
    }

    fn format_ext(&self, v: &f64) -> String {
        self.label(*v)
    }
}

/// Greedy word wrap for legend names; a word longer than a line is split.
fn wrap(text: &str, width_chars: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let mut word: Vec<char> = word.chars().collect();
        loop {
            let used = line.chars().count();
            let gap = usize::from(used > 0);
            if used + gap + word.len() <= width_chars {
                if gap == 1 {
                    line.push(' ');
                }
                line.extend(word.iter());
                break;
            }
            if used > 0 {
                lines.push(std::mem::take(&mut line));
                continue;
            }
            let rest = word.split_off(width_chars);
            lines.push(word.iter().collect());
            word = rest;
        }
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

impl LineChart {
    /// Writes the chart as an SVG file (about 800x500; wider for long legend names).
    /// Errors: the file cannot be written (e.g. its directory does not exist).
    pub fn write_svg(&self, path: &Path) -> Result<()> {
        let svg = self
            .render_svg()
            .map_err(|e| Error::env(format!("cannot draw figure {}: {e}", path.display())))?;
        std::fs::write(path, svg)
            .map_err(|e| Error::env(format!("cannot write figure {}: {e}", path.display())))
    }

    /// The SVG document. Drawn into memory first, so a failed write leaves no partial file
    /// behind plotters' back and the I/O error is ours to report.
    fn render_svg(&self) -> std::result::Result<String, Box<dyn std::error::Error>> {
        let ok = |(x, y): &(f64, f64)| drawable(self.x_scale, *x) && drawable(self.y_scale, *y);
        let points = || {
            self.series
                .iter()
                .flat_map(|s| s.points.iter())
                .filter(|p| ok(p))
        };
        let xs: Vec<f64> = points().map(|p| p.0).collect();
        let ys: Vec<f64> = points().map(|p| p.1).collect();
        let total: usize = self.series.iter().map(|s| s.points.len()).sum();
        let left_out = total - xs.len();

        let legend: Vec<Vec<String>> = self
            .series
            .iter()
            .map(|s| wrap(&s.name, LEGEND_LINE_CHARS))
            .collect();
        let widest = legend
            .iter()
            .flatten()
            .map(|l| l.chars().count())
            .max()
            .unwrap_or(0);
        let text_width_px = (widest as f64 * LEGEND_TEXT_PX * CHAR_WIDTH_EM).ceil() as u32;
        let legend_width_px = (text_width_px + 60).max(LEGEND_MIN_WIDTH_PX);
        let rows = legend.iter().map(Vec::len).sum::<usize>() as u32 + 4;
        let width_px = PLOT_WIDTH_PX + legend_width_px;
        let height_px = MIN_HEIGHT_PX.max(80 + rows * LEGEND_ROW_PX as u32);

        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (width_px, height_px)).into_drawing_area();
            root.fill(&WHITE)?;
            // Shrink a long title rather than let it run off the figure.
            let title_chars = self.title.chars().count().max(1) as f64;
            let title_px =
                (f64::from(width_px - 20) / (title_chars * CHAR_WIDTH_EM)).clamp(9.0, 18.0);
            let body = root.titled(&self.title, font(title_px))?;
            let (plot_area, legend_area) = body.split_horizontally(PLOT_WIDTH_PX);

            if xs.is_empty() {
                self.draw_no_data(&plot_area)?;
            } else {
                self.draw_plot(&plot_area, &xs, &ys)?;
            }
            self.draw_legend(&legend_area, &legend, left_out)?;
            root.present()?;
        }
        Ok(svg)
    }

    fn draw_plot<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, plotters::coord::Shift>,
        xs: &[f64],
        ys: &[f64],
    ) -> std::result::Result<(), Box<dyn std::error::Error>>
    where
        DB::ErrorType: 'static,
    {
        let x_axis = Axis::new(self.x_scale, xs, false).padded();
        let y_axis = Axis::new(self.y_scale, ys, true).padded();
        let mut chart = ChartBuilder::on(area)
            .margin(10)
            .x_label_area_size(50)
            .y_label_area_size(75)
            .build_cartesian_2d(x_axis, y_axis)?;
        chart
            .configure_mesh()
            .x_labels(2 * MAX_TICKS as usize)
            .y_labels(2 * MAX_TICKS as usize)
            .x_desc(self.x_label.as_str())
            .y_desc(self.y_label.as_str())
            .label_style(font(12.0))
            .axis_desc_style(font(14.0))
            .bold_line_style(RGBColor(200, 200, 200).stroke_width(1))
            .light_line_style(RGBColor(235, 235, 235).stroke_width(1))
            .draw()?;
        for (i, s) in self.series.iter().enumerate() {
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .copied()
                .filter(|&(x, y)| drawable(self.x_scale, x) && drawable(self.y_scale, y))
                .collect();
            chart.draw_series(LineSeries::new(
                pts.iter().copied(),
                colour(i).stroke_width(2),
            ))?;
            let plotting = chart.plotting_area();
            for p in pts {
                draw_marker(plotting, p, i)?;
            }
        }
        Ok(())
    }

    fn draw_no_data<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, plotters::coord::Shift>,
    ) -> std::result::Result<(), Box<dyn std::error::Error>>
    where
        DB::ErrorType: 'static,
    {
        let (w, h) = area.dim_in_pixel();
        let (w, h) = (w as i32, h as i32);
        area.draw(&Rectangle::new(
            [(10, 10), (w - 10, h - 10)],
            RGBColor(200, 200, 200),
        ))?;
        let centred = font(16.0).pos(Pos::new(HPos::Center, VPos::Center));
        area.draw_text("no data", &centred, (w / 2, h / 2))?;
        Ok(())
    }

    fn draw_legend<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, plotters::coord::Shift>,
        legend: &[Vec<String>],
        left_out: usize,
    ) -> std::result::Result<(), Box<dyn std::error::Error>>
    where
        DB::ErrorType: 'static,
    {
        let text = font(LEGEND_TEXT_PX).pos(Pos::new(HPos::Left, VPos::Center));
        let mut y = 20;
        for (i, lines) in legend.iter().enumerate() {
            let row_y = y + LEGEND_ROW_PX / 2;
            area.draw(&PathElement::new(
                vec![(8, row_y), (36, row_y)],
                colour(i).stroke_width(2),
            ))?;
            draw_marker(area, (22, row_y), i)?;
            for line in lines {
                area.draw_text(line, &text, (44, y + LEGEND_ROW_PX / 2))?;
                y += LEGEND_ROW_PX;
            }
        }
        if left_out > 0 {
            y += LEGEND_ROW_PX / 2;
            let note = font(11.0).pos(Pos::new(HPos::Left, VPos::Center));
            let plural = if left_out == 1 { "point" } else { "points" };
            for line in [
                format!("{left_out} {plural} not drawn:"),
                "non-finite, or negative".to_string(),
                "on a log axis".to_string(),
            ] {
                area.draw_text(&line, &note, (8, y + LEGEND_ROW_PX / 2))?;
                y += LEGEND_ROW_PX;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap()
    }

    /// Well-formed enough for a viewer: one svg root, and no number that is not a number.
    fn check_svg(svg: &str) {
        let trimmed = svg.trim();
        assert!(
            trimmed.starts_with("<svg"),
            "{}",
            &trimmed[..trimmed.len().min(80)]
        );
        assert!(trimmed.ends_with("</svg>"));
        assert_eq!(svg.matches("<svg").count(), 1);
        assert_eq!(svg.matches("<text").count(), svg.matches("</text>").count());
        for bad in ["NaN", "inf", "?"] {
            assert!(!svg.contains(bad), "SVG contains {bad}");
        }
    }

    fn sizes_chart() -> LineChart {
        let sizes = [0.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0];
        let line = |f: fn(f64) -> f64| sizes.iter().map(|&x| (x, f(x))).collect::<Vec<_>>();
        LineChart {
            title: "Net write traffic vs NVRAM size".into(),
            x_label: "NVRAM size".into(),
            y_label: "net write traffic (%)".into(),
            x_scale: Scale::Log2Bytes,
            y_scale: Scale::Linear,
            series: vec![
                Series {
                    name: "LRU".into(),
                    points: line(|x| 100.0 / (1.0 + x / 1e6)),
                },
                Series {
                    name: "random".into(),
                    points: line(|x| 100.0 / (1.0 + x / 2e6)),
                },
                Series {
                    name: "omniscient".into(),
                    points: line(|x| 90.0 / (1.0 + x / 5e5)),
                },
            ],
        }
    }

    #[test]
    fn log2_chart_with_zero_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fig.svg");
        sizes_chart().write_svg(&path).unwrap();
        let svg = read(&path);
        check_svg(&svg);
        for text in [
            "LRU",
            "random",
            "omniscient",
            "NVRAM size",
            "net write traffic (%)",
            "Net write traffic vs NVRAM size",
            ">\n0\n<",
            "64 KiB",
            "1 MiB",
            "16 MiB",
        ] {
            assert!(svg.contains(text), "missing {text:?}");
        }
        assert!(!svg.contains("not drawn"));
    }

    #[test]
    fn log2_plain_numbers_and_log10() {
        let dir = tempfile::tempdir().unwrap();
        // Wide ranges label every tick as a power, narrow ones every tick as a plain number.
        for (scale, max, want, unwanted) in [
            (Scale::Log2, 1000.0, ">\n1024\n<", ">\n2^"),
            (Scale::Log10, 1000.0, ">\n1000\n<", ">\n1e"),
            (Scale::Log2, 3e7, ">\n2^24\n<", ">\n1\n<"),
            (Scale::Log10, 3e7, ">\n1e8\n<", ">\n1\n<"),
        ] {
            let path = dir.path().join("fig.svg");
            let chart = LineChart {
                x_scale: scale,
                y_scale: scale,
                series: vec![Series {
                    name: "s".into(),
                    points: vec![(1.0, 1.0), (max, 2.0 * max)],
                }],
                ..sizes_chart()
            };
            chart.write_svg(&path).unwrap();
            let svg = read(&path);
            check_svg(&svg);
            assert!(svg.contains(want), "{scale:?} to {max}: missing {want:?}");
            assert!(
                !svg.contains(unwanted),
                "{scale:?} to {max}: has {unwanted:?}"
            );
        }
    }

    #[test]
    fn linear_chart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("throughput.svg");
        let chart = LineChart {
            title: "Throughput".into(),
            x_label: "record size (bytes)".into(),
            y_label: "throughput (MiB/s)".into(),
            x_scale: Scale::Linear,
            y_scale: Scale::Linear,
            series: vec![
                Series {
                    name: "nvramdisk".into(),
                    points: vec![(512.0, 10.5), (4096.0, 80.25)],
                },
                Series {
                    name: "raw pmem".into(),
                    points: vec![(512.0, 20.0), (4096.0, 120.0)],
                },
            ],
        };
        chart.write_svg(&path).unwrap();
        let svg = read(&path);
        check_svg(&svg);
        for text in [
            "nvramdisk",
            "raw pmem",
            "record size (bytes)",
            "throughput (MiB/s)",
            ">\n0\n<",
        ] {
            assert!(svg.contains(text), "missing {text:?}");
        }
    }

    #[test]
    fn empty_charts_say_no_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("empty.svg");
        let mut chart = LineChart {
            series: vec![],
            ..sizes_chart()
        };
        chart.write_svg(&path).unwrap();
        let svg = read(&path);
        check_svg(&svg);
        assert!(svg.contains("no data"));
        chart.series = vec![
            Series {
                name: "LRU".into(),
                points: vec![],
            },
            Series::default(),
        ];
        chart.write_svg(&path).unwrap();
        let svg = read(&path);
        check_svg(&svg);
        assert!(svg.contains("no data") && svg.contains("LRU"));
    }

    #[test]
    fn awkward_values_never_make_nan() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("edge.svg");
        let sets: Vec<Vec<(f64, f64)>> = vec![
            vec![(0.0, 0.0)],
            vec![(5.0, 5.0)],
            vec![(-f64::MAX, -f64::MAX), (f64::MAX, f64::MAX)],
            vec![(f64::MIN_POSITIVE, 1e-320), (f64::MAX, 1e308)],
            vec![(1.0, 1.0), (1.0 + 1e-15, 1.0 + 1e-15)],
            vec![(1e-300, -3.0), (2e-300, 7.0)],
            vec![
                (1.0, f64::NAN),
                (f64::INFINITY, 2.0),
                (-1.0, 3.0),
                (2.0, 4.0),
            ],
        ];
        let scales = [Scale::Linear, Scale::Log2, Scale::Log10, Scale::Log2Bytes];
        for points in &sets {
            for x_scale in scales {
                for y_scale in scales {
                    let chart = LineChart {
                        x_scale,
                        y_scale,
                        series: vec![Series {
                            name: "s".into(),
                            points: points.clone(),
                        }],
                        ..sizes_chart()
                    };
                    chart.write_svg(&path).unwrap();
                    let svg = read(&path);
                    check_svg(&svg);
                }
            }
        }
        // The NaN, the infinity and (on a log x axis) the negative x are reported.
        let chart = LineChart {
            x_scale: Scale::Log2,
            series: vec![Series {
                name: "s".into(),
                points: sets[6].clone(),
            }],
            ..sizes_chart()
        };
        chart.write_svg(&path).unwrap();
        assert!(read(&path).contains("3 points not drawn"));
    }

    #[test]
    fn many_series_and_long_names_fit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("many.svg");
        let series = (0..20)
            .map(|i| Series {
                name: format!("trace{i}: written data dead within the write-back delay & more"),
                points: vec![(1.0, i as f64), (2.0, i as f64 + 1.0)],
            })
            .collect();
        LineChart {
            series,
            ..sizes_chart()
        }
        .write_svg(&path)
        .unwrap();
        let svg = read(&path);
        check_svg(&svg);
        assert!(svg.contains("&amp; more"));
    }

    #[test]
    fn unwritable_path_is_an_environment_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing-dir").join("fig.svg");
        let err = sizes_chart().write_svg(&path).unwrap_err();
        assert!(matches!(err, Error::Environment(_)));
        assert!(err.to_string().contains("missing-dir"), "{err}");
    }

    #[test]
    fn byte_ticks() {
        assert_eq!(format_bytes_tick(0.0), "0");
        assert_eq!(format_bytes_tick(512.0), "512 B");
        assert_eq!(format_bytes_tick(65536.0), "64 KiB");
        assert_eq!(format_bytes_tick(1048576.0), "1 MiB");
        assert_eq!(format_bytes_tick(1.5 * 1048576.0), "1.5 MiB");
        assert_eq!(format_bytes_tick(-2048.0), "-2 KiB");
        assert_eq!(format_bytes_tick(f64::NAN), "?");
        assert!(format_bytes_tick(f64::MAX).len() < 20);
    }

    #[test]
    fn wrap_splits_words_and_long_words() {
        assert_eq!(wrap("a bb ccc", 4), vec!["a bb", "ccc"]);
        assert_eq!(wrap("abcdefghij", 4), vec!["abcd", "efgh", "ij"]);
        assert_eq!(wrap("", 4), vec![""]);
    }
}
