//! Line charts as standalone SVG files (`plan --svg`): axes with round ticks, a legend, solid or
//! dashed lines, and colours that follow the viewer's dark or light setting.

use std::fmt::Write as _;

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Line {
    /// Its name in the legend.
    pub label: String,
    /// Its points, x ascending.
    pub points: Vec<(f64, f64)>,
    /// Drawn dashed.
    pub dashed: bool,
}

const W: f64 = 720.0;
const H: f64 = 400.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const COLORS: &[&str] = &["#2563eb", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6"];

/// Round tick values from 0 to at least `max`: 1, 2 or 5 times a power of ten apart.
fn ticks(max: f64) -> Vec<f64> {
    let max = if max > 0.0 && max.is_finite() {
        max
    } else {
        1.0
    };
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let n = (max / step).ceil() as usize;
    (0..=n).map(|i| i as f64 * step).collect()
}

fn label(v: f64) -> String {
    if v == v.trunc() {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A chart of `lines` as an SVG document.
pub fn chart(title: &str, x_label: &str, y_label: &str, lines: &[Line]) -> String {
    let max = |f: fn(&(f64, f64)) -> f64| {
        lines
            .iter()
            .flat_map(|l| l.points.iter().map(f))
            .fold(0.0f64, f64::max)
    };
    let (xt, yt) = (ticks(max(|p| p.0)), ticks(max(|p| p.1)));
    let (xmax, ymax) = (*xt.last().unwrap_or(&1.0), *yt.last().unwrap_or(&1.0));
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let x = |v: f64| LEFT + v / xmax * pw;
    let y = |v: f64| TOP + ph - v / ymax * ph;
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {W} {H}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <style>text{{fill:#1b1b1f}} .grid{{stroke:#dcdce2}} .axis{{stroke:#6b6b76}} .bg{{fill:#fff}}\n\
         @media (prefers-color-scheme: dark){{text{{fill:#e6e6ea}} .grid{{stroke:#2e3038}} .bg{{fill:#1b1c22}}}}</style>\n\
         <rect class=\"bg\" width=\"{W}\" height=\"{H}\"/>\n\
         <text x=\"{LEFT}\" y=\"22\" font-size=\"14\" font-weight=\"bold\">{}</text>\n",
        escape(title)
    );
    for v in &xt {
        let _ = writeln!(
            s,
            "<line class=\"grid\" x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"{TOP}\" y2=\"{1:.1}\"/>\
             <text x=\"{0:.1}\" y=\"{2:.1}\" text-anchor=\"middle\">{3}</text>",
            x(*v),
            TOP + ph,
            TOP + ph + 16.0,
            label(*v)
        );
    }
    for v in &yt {
        let _ = writeln!(
            s,
            "<line class=\"grid\" x1=\"{LEFT}\" x2=\"{0:.1}\" y1=\"{1:.1}\" y2=\"{1:.1}\"/>\
             <text x=\"{2:.1}\" y=\"{3:.1}\" text-anchor=\"end\">{4}</text>",
            LEFT + pw,
            y(*v),
            LEFT - 6.0,
            y(*v) + 4.0,
            label(*v)
        );
    }
    let _ = writeln!(
        s,
        "<line class=\"axis\" x1=\"{LEFT}\" x2=\"{LEFT}\" y1=\"{TOP}\" y2=\"{0:.1}\"/>\
         <line class=\"axis\" x1=\"{LEFT}\" x2=\"{1:.1}\" y1=\"{0:.1}\" y2=\"{0:.1}\"/>\
         <text x=\"{2:.1}\" y=\"{3:.1}\" text-anchor=\"middle\">{4}</text>\
         <text transform=\"translate(16 {5:.1}) rotate(-90)\" text-anchor=\"middle\">{6}</text>",
        TOP + ph,
        LEFT + pw,
        LEFT + pw / 2.0,
        H - 10.0,
        escape(x_label),
        TOP + ph / 2.0,
        escape(y_label)
    );
    for (i, l) in lines.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points: Vec<String> = l
            .points
            .iter()
            .map(|(a, b)| format!("{:.1},{:.1}", x(*a), y(*b)))
            .collect();
        let dash = if l.dashed {
            " stroke-dasharray=\"6 4\""
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"{dash} points=\"{}\"/>\
             <line x1=\"{2:.1}\" x2=\"{3:.1}\" y1=\"{1:.1}\" y2=\"{1:.1}\" stroke=\"{color}\" stroke-width=\"2\"{dash}/>\
             <text x=\"{4:.1}\" y=\"{5:.1}\">{6}</text>",
            points.join(" "),
            TOP + 12.0 + 16.0 * i as f64,
            LEFT + 12.0,
            LEFT + 36.0,
            LEFT + 42.0,
            TOP + 16.0 + 16.0 * i as f64,
            escape(&l.label)
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_maximum() {
        assert_eq!(ticks(9.0), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(ticks(100.0), vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]);
        assert_eq!(*ticks(0.37).last().unwrap(), 0.4);
        assert_eq!(
            ticks(0.0),
            vec![0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0]
        );
    }

    #[test]
    fn a_chart_places_its_points_inside_the_plot() {
        let l = Line {
            label: "a<b".into(),
            points: vec![(0.0, 0.0), (10.0, 50.0)],
            dashed: true,
        };
        let s = chart("t", "x", "y", &[l]);
        assert!(s.starts_with("<svg") && s.ends_with("</svg>\n"));
        assert!(s.contains("a&lt;b"));
        assert!(s.contains("points=\"70.0,350.0 700.0,40.0\""), "{s}");
        assert!(s.contains("stroke-dasharray"));
    }
}
