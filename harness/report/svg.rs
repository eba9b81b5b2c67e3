//! Plain SVG plots for the report, written by hand: one distribution plot (a row per arm: every
//! sample as a dot, the p25–p75 box, the p50 bar, whiskers at p5 and p95) and one stacked bar
//! chart (a bar per arm, a segment per bucket).

use crate::packet::metrics::percentile_sorted;
use std::fmt::Write;

const WIDTH: f64 = 760.0;
const LEFT: f64 = 130.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 40.0;
const ROW: f64 = 48.0;
const AXIS: f64 = 44.0;
/// One colour per bucket / arm, in order (colour-blind-safe Okabe–Ito palette).
pub const COLOURS: [&str; 8] = [
    "#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000",
];

struct Canvas {
    body: String,
    height: f64,
}

impl Canvas {
    fn new(height: f64, title: &str) -> Self {
        let mut c = Canvas {
            body: String::new(),
            height,
        };
        c.text(WIDTH / 2.0, 22.0, "middle", 15.0, title);
        c
    }

    fn text(&mut self, x: f64, y: f64, anchor: &str, size: f64, s: &str) {
        let _ = writeln!(
            self.body,
            r#"<text x="{x:.1}" y="{y:.1}" text-anchor="{anchor}" font-size="{size}">{}</text>"#,
            escape(s)
        );
    }

    fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, stroke: &str, width: f64) {
        let _ = writeln!(
            self.body,
            r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" stroke="{stroke}" stroke-width="{width}"/>"#
        );
    }

    fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str, opacity: f64) {
        let _ = writeln!(
            self.body,
            r#"<rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{h:.1}" fill="{fill}" fill-opacity="{opacity}" stroke="{fill}"/>"#,
            w.max(0.0)
        );
    }

    fn dot(&mut self, x: f64, y: f64, fill: &str) {
        let _ = writeln!(
            self.body,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="2" fill="{fill}" fill-opacity="0.45"/>"#
        );
    }

    /// The x axis from 0 to `max` (in the unit of `label`), with ticks, at the bottom.
    fn x_axis(&mut self, max: f64, label: &str) {
        let y = self.height - AXIS;
        self.line(LEFT, y, WIDTH - RIGHT, y, "#333", 1.0);
        for tick in ticks(max) {
            let x = scale(tick, max);
            self.line(x, y, x, y + 5.0, "#333", 1.0);
            self.line(x, TOP, x, y, "#ddd", 0.5);
            self.text(x, y + 18.0, "middle", 11.0, &format_tick(tick));
        }
        self.text(
            (LEFT + WIDTH - RIGHT) / 2.0,
            self.height - 8.0,
            "middle",
            12.0,
            label,
        );
    }

    fn finish(self) -> String {
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{h}\" viewBox=\"0 0 {WIDTH} {h}\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n{}</svg>\n",
            self.body,
            h = self.height
        )
    }
}

fn scale(v: f64, max: f64) -> f64 {
    LEFT + (v / max) * (WIDTH - LEFT - RIGHT)
}

/// Round tick positions from 0 to at least `max`: steps of 1, 2 or 5 × 10^k, about 5 of them.
pub fn ticks(max: f64) -> Vec<f64> {
    if !(max.is_finite() && max > 0.0) {
        return vec![0.0];
    }
    let raw = max / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude);
    (0..)
        .map(|i| i as f64 * step)
        .take_while(|t| *t <= max * (1.0 + 1e-9))
        .collect()
}

fn format_tick(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A row per arm of `(arm, values)` in `unit` (values already scaled to it).
pub fn distribution_plot(title: &str, unit: &str, rows: &[(String, Vec<f64>)]) -> String {
    let height = TOP + ROW * rows.len().max(1) as f64 + AXIS;
    let mut c = Canvas::new(height, title);
    let max = rows
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(0.0, f64::max)
        * 1.05;
    c.x_axis(max, unit);
    for (i, (arm, values)) in rows.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let mid = TOP + ROW * (i as f64 + 0.5);
        c.text(LEFT - 8.0, mid + 4.0, "end", 12.0, arm);
        let mut sorted = values.clone();
        sorted.sort_by(f64::total_cmp);
        let q = |p| percentile_sorted(&sorted, p);
        let (Some(p5), Some(p25), Some(p50), Some(p75), Some(p95)) =
            (q(0.05), q(0.25), q(0.5), q(0.75), q(0.95))
        else {
            c.text(LEFT + 8.0, mid + 4.0, "start", 12.0, "no samples");
            continue;
        };
        // Dots spread over the row in a fixed pattern (no randomness: the file is reproducible).
        for (k, v) in values.iter().enumerate() {
            let offset = ((k * 7) % 13) as f64 / 12.0 - 0.5;
            c.dot(scale(*v, max), mid + offset * ROW * 0.6, colour);
        }
        c.line(scale(p5, max), mid, scale(p95, max), mid, colour, 1.0);
        let half = ROW * 0.22;
        c.rect(
            scale(p25, max),
            mid - half,
            scale(p75, max) - scale(p25, max),
            2.0 * half,
            colour,
            0.2,
        );
        c.line(
            scale(p50, max),
            mid - half,
            scale(p50, max),
            mid + half,
            colour,
            2.5,
        );
    }
    c.finish()
}

/// A stacked bar per arm: `(arm, segment values)`, segments named by `segments`.
pub fn stacked_bars(
    title: &str,
    unit: &str,
    segments: &[&str],
    bars: &[(String, Vec<f64>)],
) -> String {
    let legend = 28.0;
    let height = TOP + legend + ROW * bars.len().max(1) as f64 + AXIS;
    let mut c = Canvas::new(height, title);
    for (i, name) in segments.iter().enumerate() {
        let x = LEFT + i as f64 * 85.0;
        c.rect(x, TOP - 4.0, 10.0, 10.0, COLOURS[i % COLOURS.len()], 1.0);
        c.text(x + 14.0, TOP + 5.0, "start", 11.0, name);
    }
    let max = bars
        .iter()
        .map(|(_, v)| v.iter().sum::<f64>())
        .fold(0.0, f64::max)
        * 1.05;
    c.x_axis(max, unit);
    for (i, (arm, values)) in bars.iter().enumerate() {
        let mid = TOP + legend + ROW * (i as f64 + 0.5);
        c.text(LEFT - 8.0, mid + 4.0, "end", 12.0, arm);
        let mut start = 0.0;
        for (k, v) in values.iter().enumerate() {
            let (x0, x1) = (scale(start, max), scale(start + v, max));
            c.rect(
                x0,
                mid - ROW * 0.3,
                x1 - x0,
                ROW * 0.6,
                COLOURS[k % COLOURS.len()],
                0.85,
            );
            start += v;
        }
    }
    c.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(ticks(10.0), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(ticks(0.9), [0.0, 0.2, 0.4, 0.6000000000000001, 0.8]);
        assert_eq!(ticks(0.0), [0.0]);
        assert_eq!(format_tick(0.6000000000000001), "0.6");
    }

    #[test]
    fn a_distribution_plot_draws_every_sample_and_escapes_names() {
        let svg = distribution_plot(
            "TTFT",
            "ms",
            &[("a<b".into(), vec![1.0, 2.0, 3.0]), ("c".into(), vec![])],
        );
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<circle").count(), 3);
        assert!(svg.contains("a&lt;b") && svg.contains("no samples"));
    }

    #[test]
    fn stacked_bars_draw_a_segment_per_bucket() {
        let svg = stacked_bars(
            "buckets",
            "ms",
            &["queue", "prefill"],
            &[("x".into(), vec![1.0, 2.0]), ("y".into(), vec![0.5, 0.5])],
        );
        // Two legend swatches, two segments per bar, one background.
        assert_eq!(svg.matches("<rect").count(), 1 + 2 + 4);
    }
}
