//! A grouped bar chart of the results, normalised to the baseline (bridge = 1.0), as a
//! self-contained SVG: one group per metric, one bar per configuration.
//!
//! Normalising puts Gbit/s, kpps and µs on one axis; the absolute numbers are in the table and
//! the JSON, so the chart only has to show who wins and by how much.
use std::fmt::Write;

use super::{Metric, Results};
use crate::bench::Config;

pub(crate) struct Group {
    pub(crate) label: String,
    /// A second, smaller line under the label.
    pub(crate) note: Option<String>,
}

pub(crate) struct Series {
    pub(crate) name: String,
    pub(crate) color: &'static str,
    /// One value per group; `None` draws no bar (no data, or no baseline to divide by).
    pub(crate) values: Vec<Option<f64>>,
}

pub struct Chart {
    pub title: String,
    pub subtitle: String,
    pub baseline: String,
    pub(crate) groups: Vec<Group>,
    pub(crate) series: Vec<Series>,
}

pub(crate) fn color(config: Config) -> &'static str {
    match config {
        Config::Bridge => "#8c8c8c",
        Config::Tc => "#1f77b4",
        Config::Xdp => "#ff7f0e",
        Config::Loopback => "#2ca02c",
    }
}

pub fn chart(results: &Results, title: String, subtitle: String) -> Chart {
    let baseline = results
        .baseline()
        .map_or_else(|| "baseline".to_owned(), |c| c.name().to_owned());
    Chart {
        title,
        subtitle,
        groups: Metric::ALL
            .iter()
            .map(|m| Group {
                label: format!("{} ({})", m.short(), m.unit()),
                note: Some(
                    if m.lower_is_better() {
                        "lower is better"
                    } else {
                        "higher is better"
                    }
                    .to_owned(),
                ),
            })
            .collect(),
        series: results
            .configs
            .iter()
            .map(|(config, _)| Series {
                name: config.name().to_owned(),
                color: color(*config),
                values: Metric::ALL
                    .iter()
                    .map(|m| results.ratio(*config, *m))
                    .collect(),
            })
            .collect(),
        baseline,
    }
}

const LEFT: f64 = 64.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 78.0;
const PLOT_H: f64 = 260.0;
const BAR_W: f64 = 22.0;
const GROUP_GAP: f64 = 30.0;

/// A round step giving at most eight gridlines up to `max`.
fn step_for(max: f64) -> f64 {
    [0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0]
        .into_iter()
        .find(|s| max / s <= 8.0)
        .unwrap_or(max / 8.0)
}

pub fn render(chart: &Chart) -> String {
    let n_series = chart.series.len().max(1) as f64;
    let group_w = n_series * BAR_W + GROUP_GAP;
    let plot_w = (chart.groups.len() as f64 * group_w).max(360.0);
    let width = LEFT + plot_w + RIGHT;
    let legend_y = TOP + PLOT_H + 62.0;
    let height = legend_y + 30.0;
    let peak = chart
        .series
        .iter()
        .flat_map(|s| s.values.iter().flatten())
        .copied()
        .filter(|v| v.is_finite())
        .fold(1.0_f64, f64::max);
    let step = step_for(peak * 1.12);
    let y_max = ((peak * 1.12) / step).ceil() * step;
    let y = |v: f64| TOP + PLOT_H - (v / y_max) * PLOT_H;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif">"#
    );
    let _ = writeln!(
        s,
        r#"<rect x="0" y="0" width="{width:.0}" height="{height:.0}" fill="white"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="26" font-size="16" font-weight="bold" text-anchor="middle">{}</text>"#,
        width / 2.0,
        escape(&chart.title)
    );
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="46" font-size="11" fill="#555" text-anchor="middle">{}</text>"##,
        width / 2.0,
        escape(&chart.subtitle)
    );

    // Gridlines and the y axis, in multiples of the baseline.
    let mut tick = 0.0;
    while tick <= y_max + step / 2.0 {
        let ty = y(tick);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT:.1}" y1="{ty:.1}" x2="{:.1}" y2="{ty:.1}" stroke="#e4e4e4"/>"##,
            LEFT + plot_w
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end">{tick:.2}x</text>"#,
            LEFT - 6.0,
            ty + 3.5
        );
        tick += step;
    }
    let _ = writeln!(
        s,
        r#"<text x="14" y="{:.1}" font-size="11" text-anchor="middle" transform="rotate(-90 14 {:.1})">{}</text>"#,
        TOP + PLOT_H / 2.0,
        TOP + PLOT_H / 2.0,
        escape(&format!("relative to {}", chart.baseline))
    );

    for (g, group) in chart.groups.iter().enumerate() {
        let gx = LEFT + g as f64 * group_w + GROUP_GAP / 2.0;
        for (i, series) in chart.series.iter().enumerate() {
            let Some(v) = series
                .values
                .get(g)
                .copied()
                .flatten()
                .filter(|v| v.is_finite())
            else {
                continue;
            };
            let bx = gx + i as f64 * BAR_W;
            let top = y(v.max(0.0));
            let _ = writeln!(
                s,
                r#"<rect x="{:.1}" y="{top:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{}</title></rect>"#,
                bx + 1.0,
                BAR_W - 2.0,
                (TOP + PLOT_H - top).max(0.0),
                series.color,
                escape(&format!("{} {}: {v:.2}x", series.name, group.label))
            );
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" font-size="9" text-anchor="middle">{v:.2}</text>"#,
                bx + BAR_W / 2.0,
                top - 3.0
            );
        }
        let cx = gx + n_series * BAR_W / 2.0;
        let _ = writeln!(
            s,
            r#"<text x="{cx:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text>"#,
            TOP + PLOT_H + 18.0,
            escape(&group.label)
        );
        if let Some(note) = &group.note {
            let _ = writeln!(
                s,
                r##"<text x="{cx:.1}" y="{:.1}" font-size="9" fill="#777" text-anchor="middle">{}</text>"##,
                TOP + PLOT_H + 31.0,
                escape(note)
            );
        }
    }

    // The baseline drawn over the bars, so that 1.0 stays visible where bars cover it.
    let _ = writeln!(
        s,
        r##"<line x1="{LEFT:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#333" stroke-dasharray="5,4"/>"##,
        y(1.0),
        LEFT + plot_w,
        y(1.0)
    );
    let _ = writeln!(
        s,
        r##"<line x1="{LEFT:.1}" y1="{TOP:.1}" x2="{LEFT:.1}" y2="{:.1}" stroke="#333"/>"##,
        TOP + PLOT_H
    );
    let _ = writeln!(
        s,
        r##"<line x1="{LEFT:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#333"/>"##,
        TOP + PLOT_H,
        LEFT + plot_w,
        TOP + PLOT_H
    );

    // Legend, centred under the plot.
    let entry_w = 110.0;
    let mut lx = LEFT + (plot_w - entry_w * chart.series.len() as f64).max(0.0) / 2.0;
    for series in &chart.series {
        let _ = writeln!(
            s,
            r#"<rect x="{lx:.1}" y="{:.1}" width="12" height="12" fill="{}"/>"#,
            legend_y - 10.0,
            series.color
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{legend_y:.1}" font-size="12">{}</text>"#,
            lx + 17.0,
            escape(&series.name)
        );
        lx += entry_w;
    }
    s.push_str("</svg>\n");
    s
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::containers::Samples;

    /// Checks tags nest and close, attribute quotes pair up and every `&` starts an entity:
    /// enough to catch what hand-written XML gets wrong, without an XML crate.
    fn assert_well_formed(xml: &str) {
        let mut open: Vec<String> = Vec::new();
        let mut rest = xml;
        while let Some(start) = rest.find('<') {
            check_text(&rest[..start]);
            let end = rest[start..].find('>').expect("unclosed tag") + start;
            let tag = &rest[start + 1..end];
            assert_eq!(tag.matches('"').count() % 2, 0, "unpaired quote in <{tag}>");
            assert!(!tag.contains('<'), "'<' inside <{tag}>");
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(
                    open.pop().as_deref(),
                    Some(name.trim()),
                    "mismatched </{name}>"
                );
            } else if !tag.ends_with('/') {
                let name = tag.split_whitespace().next().expect("empty tag");
                open.push(name.to_owned());
            }
            check_text(tag);
            rest = &rest[end + 1..];
        }
        check_text(rest);
        assert!(open.is_empty(), "unclosed: {open:?}");
    }

    fn check_text(text: &str) {
        for (i, _) in text.match_indices('&') {
            let entity = &text[i..];
            assert!(
                ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;", "&#"]
                    .iter()
                    .any(|e| entity.starts_with(e)),
                "bare & in {text:?}"
            );
        }
    }

    fn results() -> Results {
        let mut results = Results::default();
        for (config, v) in [
            (Config::Bridge, 10.0),
            (Config::Tc, 14.0),
            (Config::Xdp, 12.0),
            (Config::Loopback, 30.0),
        ] {
            let mut s = Samples::default();
            for m in Metric::ALL {
                s.push(m, v);
            }
            results.configs.push((config, s));
        }
        results
    }

    #[test]
    fn renders_well_formed_svg_with_every_config() {
        let svg = render(&chart(
            &results(),
            "dxdp bench <a> & \"b\"".into(),
            "3 rounds × 3 s".into(),
        ));
        assert!(svg.starts_with("<svg"));
        assert_well_formed(&svg);
        for config in Config::ALL {
            assert!(
                svg.contains(&format!(">{}</text>", config.name())),
                "{config}"
            );
        }
        assert!(svg.contains("&lt;a&gt; &amp; &quot;b&quot;"));
        // Normalised: tc is 1.40 of the bridge, loopback 3.00, bridge itself 1.00.
        assert!(svg.contains(">1.40</text>") && svg.contains(">3.00</text>"));
        assert!(svg.contains(">1.00</text>"));
        for m in Metric::ALL {
            assert!(svg.contains(m.short()), "{m:?}");
        }
    }

    #[test]
    fn missing_values_draw_no_bar() {
        let mut chart = chart(&results(), "t".into(), "s".into());
        let bars = |c: &Chart| render(c).matches("<title>").count();
        let all = 4 * Metric::ALL.len();
        assert_eq!(bars(&chart), all);
        chart.series[1].values[0] = None;
        chart.series[2].values[3] = Some(f64::NAN);
        assert_eq!(bars(&chart), all - 2);
        assert_well_formed(&render(&chart));
    }

    #[test]
    fn steps_are_round() {
        assert_eq!(step_for(1.12), 0.25);
        assert_eq!(step_for(3.4), 0.5);
        assert_eq!(step_for(9.0), 2.0);
    }
}
