//! Plots of a size sweep: one SVG file with two panels side by side,
//! latency (µs) and bandwidth (GB/s) against message size, both axes
//! logarithmic, with the run's reference lines (cache-line floor, memcpy,
//! raw TCP ...) dashed.
//!
//! The drawing is plotters' SVG backend only: text is written as SVG
//! `<text>` elements whose width plotters estimates itself, so no font
//! file, fontconfig or other system library is involved.
//!
//! ```no_run
//! use std::path::Path;
//! use tandem_benches::plot::{write_svg, Figure, Series};
//!
//! let mut fig = Figure::new("tandem-perf pingpong");
//! fig.latency.push(Series::new("this run", vec![(8.0, 0.21), (1024.0, 0.35)]));
//! fig.bandwidth.push(Series::new("this run", vec![(8.0, 0.04), (1024.0, 2.9)]));
//! fig.latency_refs.push(("one-way cache line".into(), 0.06));
//! fig.bandwidth_refs.push(("memcpy 64M".into(), 11.5));
//! write_svg(Path::new("pingpong.svg"), &fig).unwrap();
//! ```
//!
//! A tool with `--plot FILE.svg` and `--compare A.json` options keeps a
//! [`PlotOpts`] beside its other options: [`PlotOpts::take`] while
//! parsing, [`PlotOpts::check`] after, [`PlotOpts::write`] once the
//! sweep is done.

use plotters::element::DashedPathElement;
use plotters::prelude::*;
use std::io;
use std::path::{Path, PathBuf};

/// `(message size in bytes, value)` points of a curve.
pub type Points = Vec<(f64, f64)>;

/// One curve: a label for the legend and `(message size in bytes, value)`
/// points, in any order (they are drawn sorted by size). Points that a
/// log scale cannot show (size or value zero, negative or not finite) are
/// left out.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The legend entry.
    pub label: String,
    /// `(size in bytes, value)`: µs on the latency panel, GB/s on the
    /// bandwidth panel.
    pub points: Points,
}

impl Series {
    /// A series labelled `label`.
    pub fn new(label: impl Into<String>, points: Points) -> Self {
        Series {
            label: label.into(),
            points,
        }
    }
}

/// What [`write_svg`] draws: a title, the series of each panel and
/// horizontal reference lines measured in the same run, each a legend
/// label (shown as given; include the value if it should be read off)
/// and a value in the panel's unit.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// The title above both panels.
    pub title: String,
    /// The latency panel's vertical axis (default `p50 latency (µs)`).
    pub latency_axis: String,
    /// The bandwidth panel's vertical axis (default `bandwidth (GB/s)`).
    pub bandwidth_axis: String,
    /// Curves of the latency panel, values in µs.
    pub latency: Vec<Series>,
    /// Curves of the bandwidth panel, values in GB/s (10^9 B/s).
    pub bandwidth: Vec<Series>,
    /// Dashed horizontal lines of the latency panel: `(label, µs)`.
    pub latency_refs: Vec<(String, f64)>,
    /// Dashed horizontal lines of the bandwidth panel: `(label, GB/s)`.
    pub bandwidth_refs: Vec<(String, f64)>,
}

impl Figure {
    /// An empty figure titled `title`, with the default axis descriptions.
    pub fn new(title: impl Into<String>) -> Self {
        Figure {
            title: title.into(),
            latency_axis: "p50 latency (µs)".into(),
            bandwidth_axis: "bandwidth (GB/s)".into(),
            latency: Vec::new(),
            bandwidth: Vec::new(),
            latency_refs: Vec::new(),
            bandwidth_refs: Vec::new(),
        }
    }
}

/// Width and height of the SVG, in pixels (each panel is half as wide).
const SIZE: (u32, u32) = (1400, 560);

/// Line colours, in order: series first, then reference lines.
const COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
    RGBColor(23, 190, 207),
    RGBColor(127, 127, 127),
];

fn other<E: std::fmt::Display>(e: E) -> io::Error {
    io::Error::other(e.to_string())
}

/// Writes `fig` to `path` as one SVG: the latency panel on the left, the
/// bandwidth panel on the right, message size along both horizontal axes
/// (ticks at powers of two, labelled `1 B`, `4 KiB`, `1 MiB` ...), both
/// axes logarithmic, a legend in each panel, reference lines dashed.
/// A panel without any drawable point still gets its axes.
///
/// # Errors
/// The error of writing `path`, or [`render_svg`]'s.
pub fn write_svg(path: &Path, fig: &Figure) -> io::Result<()> {
    std::fs::write(path, render_svg(fig)?)
}

/// The SVG text [`write_svg`] writes.
///
/// # Errors
/// An error of kind [`io::ErrorKind::Other`] with the plotting library's
/// message if drawing fails.
pub fn render_svg(fig: &Figure) -> io::Result<String> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(other)?;
        let root = root.titled(&fig.title, ("sans-serif", 22)).map_err(other)?;
        let (left, right) = root.split_horizontally(SIZE.0 / 2);
        // Latency rises with size above its floors, bandwidth towards its
        // ceilings: the legends go where the curves usually are not.
        panel(
            &left,
            SeriesLabelPosition::UpperLeft,
            &fig.latency_axis,
            &fig.latency,
            &fig.latency_refs,
        )?;
        panel(
            &right,
            SeriesLabelPosition::LowerRight,
            &fig.bandwidth_axis,
            &fig.bandwidth,
            &fig.bandwidth_refs,
        )?;
        root.present().map_err(other)?;
    }
    Ok(out)
}

/// The points of `s` a log-log plot can show, sorted by size.
fn drawable(s: &Series) -> Vec<(f64, f64)> {
    let ok = |v: f64| v.is_finite() && v > 0.0;
    let mut p: Vec<(f64, f64)> = s
        .points
        .iter()
        .copied()
        .filter(|&(x, y)| ok(x) && ok(y))
        .collect();
    p.sort_by(|a, b| a.0.total_cmp(&b.0));
    p
}

/// `(lo, hi)` of `values` (positive, finite) widened by `pad` on each
/// side on a log scale; `default` when there are none.
fn log_range(values: impl Iterator<Item = f64>, pad: f64, default: (f64, f64)) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if lo > hi {
        return default;
    }
    // At least a factor of 4 from bottom to top, so there are ticks.
    let (lo, hi) = if hi / lo < 4.0 {
        let mid = (lo * hi).sqrt();
        (mid / 2.0, mid * 2.0)
    } else {
        (lo, hi)
    };
    (lo / pad, hi * pad)
}

/// Ticks of the size axis: powers of two whose exponents are multiples of
/// a step (1, 2, 4, 10 or 20) chosen for at most 8 labels; every power of
/// two for the light grid.
fn size_ticks(lo: f64, hi: f64) -> (Vec<f64>, Vec<f64>) {
    let (a, b) = (lo.log2().ceil() as i32, hi.log2().floor() as i32);
    let exps: Vec<i32> = (a..=b).collect();
    let step = [1, 2, 4, 10, 20]
        .into_iter()
        .find(|&s| exps.iter().filter(|e| *e % s == 0).count() <= 8)
        .unwrap_or(40);
    let bold = exps
        .iter()
        .filter(|e| *e % step == 0)
        .map(|&e| 2f64.powi(e))
        .collect();
    let light = if exps.len() <= 64 {
        exps.iter().map(|&e| 2f64.powi(e)).collect()
    } else {
        Vec::new()
    };
    (bold, light)
}

/// Ticks of a value axis: 1-2-5 per decade, or only the decades when that
/// is too many, or 1..9 per decade when too few; 1..9 per decade for the
/// light grid.
fn value_ticks(lo: f64, hi: f64) -> (Vec<f64>, Vec<f64>) {
    let (a, b) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let with = |mantissas: &[f64]| -> Vec<f64> {
        (a..=b)
            .flat_map(|e| mantissas.iter().map(move |m| m * 10f64.powi(e)))
            .filter(|v| *v >= lo && *v <= hi)
            .collect()
    };
    let all: Vec<f64> = (1..10).map(f64::from).collect();
    let mut bold = with(&[1.0, 2.0, 5.0]);
    if bold.len() > 12 {
        bold = with(&[1.0]);
        let mut step = 1;
        while bold.len().div_ceil(step) > 12 {
            step += 1;
        }
        bold = bold.into_iter().step_by(step).collect();
    } else if bold.len() < 3 {
        bold = with(&all);
    }
    let light = if b - a <= 12 { with(&all) } else { Vec::new() };
    (bold, light)
}

/// A message size for an axis label: `1 B`, `512 B`, `4 KiB`, `1.5 MiB`,
/// `1 GiB` (binary units, at most three significant digits).
pub fn size_label(bytes: f64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes;
    let mut i = 0;
    while v.abs() >= 1024.0 && i + 1 < units.len() {
        v /= 1024.0;
        i += 1;
    }
    format!("{} {}", value_label(v), units[i])
}

/// A value for an axis label: three significant digits at most, no
/// trailing zeros (`0.05`, `2.5`, `200`, `12300`), exponent notation
/// below 0.001 and from 10^6.
pub fn value_label(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    if !(1e-3..1e6).contains(&a) {
        return format!("{v:.1e}").replace(".0e", "e");
    }
    let digits = (2 - a.log10().floor() as i32).max(0) as usize;
    let s = format!("{v:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    legend_at: SeriesLabelPosition,
    axis: &str,
    series: &[Series],
    refs: &[(String, f64)],
) -> io::Result<()> {
    let curves: Vec<(&str, Vec<(f64, f64)>)> = series
        .iter()
        .map(|s| (s.label.as_str(), drawable(s)))
        .collect();
    let refs: Vec<&(String, f64)> = refs
        .iter()
        .filter(|(_, v)| v.is_finite() && *v > 0.0)
        .collect();
    let (x0, x1) = log_range(
        curves.iter().flat_map(|(_, p)| p.iter().map(|q| q.0)),
        2f64.powf(0.3),
        (1.0, 1024.0),
    );
    let (y0, y1) = log_range(
        curves
            .iter()
            .flat_map(|(_, p)| p.iter().map(|q| q.1))
            .chain(refs.iter().map(|r| r.1)),
        1.4,
        (1.0, 10.0),
    );
    let (xb, xl) = size_ticks(x0, x1);
    let (yb, yl) = value_ticks(y0, y1);
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (x0..x1)
                .log_scale()
                .with_key_points(xb)
                .with_light_points(xl),
            (y0..y1)
                .log_scale()
                .with_key_points(yb)
                .with_light_points(yl),
        )
        .map_err(other)?;
    chart
        .configure_mesh()
        .x_desc("message size")
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .y_desc(axis)
        .x_label_formatter(&|v| size_label(*v))
        .y_label_formatter(&|v| value_label(*v))
        .light_line_style(BLACK.mix(0.05))
        .bold_line_style(BLACK.mix(0.2))
        .draw()
        .map_err(other)?;
    let mut colours = COLOURS.iter().cycle();
    let mut labelled = false;
    for (label, points) in &curves {
        let c = *colours.next().expect("cycle");
        let anno = chart
            .draw_series(LineSeries::new(points.iter().copied(), c.stroke_width(2)))
            .map_err(other)?;
        if !label.is_empty() {
            labelled = true;
            anno.label(*label).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
            });
        }
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 3, c.filled())))
            .map_err(other)?;
    }
    for (label, v) in refs {
        let c = *colours.next().expect("cycle");
        let style = c.stroke_width(2);
        let anno = chart
            .draw_series(DashedLineSeries::new(vec![(x0, *v), (x1, *v)], 8, 5, style))
            .map_err(other)?;
        if !label.is_empty() {
            labelled = true;
            anno.label(label.as_str()).legend(move |(x, y)| {
                DashedPathElement::new(vec![(x, y), (x + 20, y)], 5, 3, style)
            });
        }
    }
    if labelled {
        chart
            .configure_series_labels()
            .position(legend_at)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK.mix(0.4))
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(other)?;
    }
    Ok(())
}

/// `(size, p50_us)` and `(size, bandwidth)` points of a JSON array as
/// `tandem-perf --json` prints it: objects with `"size"`, `"p50_us"` and a
/// bandwidth in GB/s, `"gbps"` (pingpong, bw) or else `"busbw"`
/// (collectives, rows `{"size","p50_us","algbw","busbw","wrong"}`). Other
/// fields are ignored.
///
/// # Errors
/// A message if `text` is not JSON or not an array, or a row has no
/// numeric `"size"`, `"p50_us"`, or `"gbps"` or `"busbw"`.
pub fn parse_json_series(text: &str) -> Result<(Points, Points), String> {
    let doc: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let rows = doc
        .as_array()
        .ok_or("expected a JSON array of rows (the output of tandem-perf --json)")?;
    let mut lat = Vec::with_capacity(rows.len());
    let mut bw = Vec::with_capacity(rows.len());
    for (i, row) in rows.iter().enumerate() {
        let num = |key: &str| row.get(key).and_then(serde_json::Value::as_f64);
        let size = num("size").ok_or(format!("row {i}: no numeric \"size\""))?;
        let p50 = num("p50_us").ok_or(format!("row {i}: no numeric \"p50_us\""))?;
        let gbps = num("gbps")
            .or_else(|| num("busbw"))
            .ok_or(format!("row {i}: neither \"gbps\" nor \"busbw\""))?;
        lat.push((size, p50));
        bw.push((size, gbps));
    }
    Ok((lat, bw))
}

/// [`parse_json_series`] of the file at `path`; errors name the file.
///
/// # Errors
/// The file cannot be read, or [`parse_json_series`] refuses it; the
/// message starts with the path.
pub fn read_json_series(path: &Path) -> Result<(Points, Points), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse_json_series(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The latency and bandwidth series of an earlier run's `--json` file,
/// both labelled by the file's stem (`runs/before.json` -> `before`).
///
/// # Errors
/// As [`read_json_series`].
pub fn json_file_series(path: &Path) -> Result<(Series, Series), String> {
    let (lat, bw) = read_json_series(path)?;
    let label = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    Ok((Series::new(label.clone(), lat), Series::new(label, bw)))
}

/// The `--plot FILE.svg` and `--compare A.json` options of a sweep tool,
/// kept beside its other options.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlotOpts {
    /// `--plot FILE.svg`: where to draw this run.
    pub plot: Option<PathBuf>,
    /// `--compare A.json`, in order: earlier runs to overlay.
    pub compare: Vec<PathBuf>,
}

impl PlotOpts {
    /// Takes `flag` if it is `--plot` or `--compare`, reading its value
    /// with `value(flag)`; `Ok(false)` (nothing read) for any other flag.
    ///
    /// # Errors
    /// `--plot` given twice, or `value`'s error.
    pub fn take(
        &mut self,
        flag: &str,
        value: impl FnOnce(&str) -> Result<String, String>,
    ) -> Result<bool, String> {
        match flag {
            "--plot" => {
                if self.plot.is_some() {
                    return Err("--plot given twice".into());
                }
                self.plot = Some(value(flag)?.into());
            }
            "--compare" => self.compare.push(value(flag)?.into()),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Errors for options that make no sense together: `--compare`
    /// without `--plot`. Reads no file (see [`PlotOpts::compare_series`]).
    ///
    /// # Errors
    /// `--compare` without `--plot`.
    pub fn check(&self) -> Result<(), String> {
        if !self.compare.is_empty() && self.plot.is_none() {
            return Err("--compare needs --plot FILE.svg".into());
        }
        Ok(())
    }

    /// The `--compare` files' series, in order ([`json_file_series`]);
    /// call it early as well to fail before a long run on a bad file.
    ///
    /// # Errors
    /// The first file [`json_file_series`] cannot read.
    pub fn compare_series(&self) -> Result<Vec<(Series, Series)>, String> {
        self.compare.iter().map(|p| json_file_series(p)).collect()
    }

    /// With `--plot`: appends the `--compare` series to `fig` (after the
    /// ones already there) and writes it; returns the file written.
    /// Without `--plot`: nothing, `Ok(None)`.
    ///
    /// # Errors
    /// A `--compare` file that cannot be read
    /// ([`compare_series`](Self::compare_series)), or the SVG cannot be
    /// written; the message names the file.
    pub fn write(&self, mut fig: Figure) -> Result<Option<&Path>, String> {
        let Some(path) = &self.plot else {
            return Ok(None);
        };
        for (lat, bw) in self.compare_series()? {
            fig.latency.push(lat);
            fig.bandwidth.push(bw);
        }
        write_svg(path, &fig).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Some(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system's temporary one.
    fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tandem-plot-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn sweep_fig() -> Figure {
        let sizes: Vec<f64> = (0..=26).map(|e| 2f64.powi(e)).collect();
        let lat = |base: f64| -> Vec<(f64, f64)> {
            sizes.iter().map(|&s| (s, base + s / 10e3)).collect()
        };
        let mut fig = Figure::new("test & <sweep>");
        fig.latency.push(Series::new("this run", lat(0.2)));
        fig.latency.push(Series::new("before", lat(0.3)));
        let bw = |l: Vec<(f64, f64)>| l.into_iter().map(|(s, us)| (s, s / us / 1e3)).collect();
        fig.bandwidth.push(Series::new("this run", bw(lat(0.2))));
        fig.bandwidth.push(Series::new("before", bw(lat(0.3))));
        fig.latency_refs.push(("one-way cache line".into(), 0.05));
        fig.bandwidth_refs.push(("memcpy 64 MiB".into(), 11.0));
        fig
    }

    #[test]
    fn svg_is_well_formed() {
        let dir = temp_dir("svg");
        let path = dir.join("f.svg");
        write_svg(&path, &sweep_fig()).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let doc = roxmltree::Document::parse(&text).expect("well-formed XML");
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        let texts: Vec<&str> = doc
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text())
            .map(str::trim)
            .collect();
        for want in [
            "test & <sweep>",
            "1 B",
            "1 MiB",
            "this run",
            "before",
            "memcpy 64 MiB",
        ] {
            assert!(texts.contains(&want), "no text {want:?} in {texts:?}");
        }
        let lines = doc
            .descendants()
            .filter(|n| n.has_tag_name("polyline") || n.has_tag_name("path"))
            .count();
        assert!(lines >= 4, "{lines} lines");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn empty_and_degenerate_figures_render() {
        let mut fig = Figure::new("empty");
        render_svg(&fig).unwrap();
        fig.latency.push(Series::new(
            "",
            vec![(0.0, 1.0), (8.0, 0.3), (8.0, f64::NAN)],
        ));
        fig.bandwidth.push(Series::new("zero", vec![(0.0, 0.0)]));
        fig.bandwidth_refs.push(("negative".into(), -1.0));
        let text = render_svg(&fig).unwrap();
        roxmltree::Document::parse(&text).expect("well-formed XML");
    }

    #[test]
    fn labels() {
        assert_eq!(size_label(1.0), "1 B");
        assert_eq!(size_label(512.0), "512 B");
        assert_eq!(size_label(4096.0), "4 KiB");
        assert_eq!(size_label(1536.0 * 1024.0), "1.5 MiB");
        assert_eq!(size_label(2f64.powi(30)), "1 GiB");
        assert_eq!(value_label(0.05), "0.05");
        assert_eq!(value_label(2.5), "2.5");
        assert_eq!(value_label(200.0), "200");
        assert_eq!(value_label(0.123456), "0.123");
        assert_eq!(value_label(1e7), "1e7");
        let (bold, _) = size_ticks(1.0, 2f64.powi(26));
        assert_eq!(bold.first(), Some(&1.0));
        assert!(bold.len() <= 8);
        let (bold, _) = value_ticks(0.04, 2e4);
        assert!((3..=12).contains(&bold.len()), "{bold:?}");
    }

    #[test]
    fn json_rows() {
        let (lat, bw) = parse_json_series(
            r#"[{"size": 1, "p50_us": 0.2, "p99_us": 0.3, "gbps": 0.005},
                {"size": 1024, "p50_us": 0.5, "p99_us": 0.7, "gbps": 2.048}]"#,
        )
        .unwrap();
        assert_eq!(lat, vec![(1.0, 0.2), (1024.0, 0.5)]);
        assert_eq!(bw, vec![(1.0, 0.005), (1024.0, 2.048)]);
        let (lat, bw) = parse_json_series(
            r#"[{"size": 8, "p50_us": 3.5, "algbw": 0.002, "busbw": 0.003, "wrong": 0}]"#,
        )
        .unwrap();
        assert_eq!((lat, bw), (vec![(8.0, 3.5)], vec![(8.0, 0.003)]));
        assert_eq!(parse_json_series("[]").unwrap(), (vec![], vec![]));
        assert!(parse_json_series(r#"{"c2c_rtt_ns": 1}"#).is_err());
        assert!(parse_json_series(r#"[{"size": 8, "p50_us": 3.5}]"#)
            .unwrap_err()
            .contains("gbps"));
        assert!(parse_json_series("[{").is_err());
    }

    #[test]
    fn opts() {
        let mut o = PlotOpts::default();
        let v = |s: &'static str| move |_: &str| Ok::<_, String>(s.to_string());
        assert!(o.take("--compare", v("a.json")).unwrap());
        assert!(o.check().is_err());
        assert!(o.take("--plot", v("p.svg")).unwrap());
        assert!(o.take("--plot", v("q.svg")).is_err());
        assert!(!o.take("--json", v("x")).unwrap());
        o.check().unwrap();
        assert_eq!(o.plot.as_deref(), Some(Path::new("p.svg")));
        assert_eq!(o.compare, vec![PathBuf::from("a.json")]);

        let dir = temp_dir("opts");
        let json = dir.join("before.json");
        std::fs::write(&json, r#"[{"size": 64, "p50_us": 0.4, "gbps": 0.16}]"#).unwrap();
        let o = PlotOpts {
            plot: Some(dir.join("p.svg")),
            compare: vec![json],
        };
        let written = o.write(sweep_fig()).unwrap().unwrap();
        let text = std::fs::read_to_string(written).unwrap();
        roxmltree::Document::parse(&text).unwrap();
        assert_eq!(PlotOpts::default().write(sweep_fig()), Ok(None));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
