//! The results as a plain-text table: one row per configuration, each cell `median (min–max)`,
//! then each configuration's medians relative to the baseline's.
use super::{Metric, Results, stats::Spread};

/// Three significant digits or so: more would be noise at a few rounds of a few seconds.
fn decimals(v: f64) -> usize {
    match v.abs() {
        x if x >= 100.0 => 0,
        x if x >= 10.0 => 1,
        _ => 2,
    }
}

pub(crate) fn number(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.*}", decimals(v))
    } else {
        "n/a".to_owned()
    }
}

/// `median (min–max)`, or the lone value of a single round; the range takes the median's
/// precision so the three numbers line up by eye.
pub(crate) fn cell(spread: Option<Spread>) -> String {
    let Some(s) = spread else {
        return "n/a".to_owned();
    };
    if !s.median.is_finite() {
        return "n/a".to_owned();
    }
    let d = decimals(s.median);
    if s.is_single() {
        format!("{:.*}", d, s.median)
    } else {
        format!("{:.*} ({:.*}–{:.*})", d, s.median, d, s.min, d, s.max)
    }
}

pub(crate) fn ratio(r: Option<f64>) -> String {
    r.filter(|r| r.is_finite())
        .map_or_else(|| "n/a".to_owned(), |r| format!("{r:.2}x"))
}

/// Rows as columns: the first left-aligned, the rest right-aligned under their headers; an empty
/// row is a blank line.
pub(crate) fn align(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            let pad = widths[i].saturating_sub(cell.chars().count());
            if i == 0 {
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
            } else {
                // Numbers align right, under their header.
                line.push_str("   ");
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

pub fn render(results: &Results, rounds: u32) -> String {
    let baseline = results.baseline();
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut header = vec!["CONFIG".to_owned()];
    header.extend(Metric::ALL.iter().map(|m| m.header().to_owned()));
    rows.push(header);
    for (config, _) in &results.configs {
        let mut row = vec![config.name().to_owned()];
        row.extend(
            Metric::ALL
                .iter()
                .map(|m| cell(results.spread(*config, *m))),
        );
        rows.push(row);
    }
    if let Some(base) = baseline {
        rows.push(Vec::new());
        for (config, _) in results.configs.iter().filter(|(c, _)| *c != base) {
            let mut row = vec![format!("{config} vs {base}")];
            row.extend(
                Metric::ALL
                    .iter()
                    .map(|m| ratio(results.ratio(*config, *m))),
            );
            rows.push(row);
        }
    }
    let mut out = align(&rows);
    if let Some(base) = baseline {
        let spread = if rounds > 1 {
            format!("; ranges are min–max over {rounds} rounds")
        } else {
            String::new()
        };
        out.push_str(&format!(
            "\nmedians{spread}; ratios are median / {base} median: higher is better for \
             throughput, lower for RTT\n"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::{Config, Samples};

    #[test]
    fn cells_show_median_and_range() {
        assert_eq!(cell(Spread::of(&[21.34, 20.1, 22.04])), "21.3 (20.1–22.0)");
        assert_eq!(cell(Spread::of(&[812.4])), "812");
        assert_eq!(cell(Spread::of(&[1.234, 1.1])), "1.17 (1.10–1.23)");
        assert_eq!(cell(None), "n/a");
        assert_eq!(ratio(Some(1.4249)), "1.42x");
        assert_eq!(ratio(Some(f64::INFINITY)), "n/a");
    }

    #[test]
    fn one_row_per_config_and_ratios() {
        let mut results = Results::default();
        for (config, v) in [(Config::Bridge, 10.0), (Config::Tc, 15.0)] {
            let mut s = Samples::default();
            for m in Metric::ALL {
                s.push(m, v);
                s.push(m, v + 1.0);
            }
            results.configs.push((config, s));
        }
        let text = render(&results, 2);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("CONFIG") && lines[0].contains("RTT p99 µs"));
        assert!(lines[1].starts_with("bridge ") && lines[1].contains("10.5 (10.0–11.0)"));
        assert!(lines[2].starts_with("tc ") && lines[2].contains("15.5 (15.0–16.0)"));
        assert!(lines[3].is_empty());
        assert!(lines[4].starts_with("tc vs bridge") && lines[4].contains("1.48x"));
        assert!(!text.contains("bridge vs bridge"));
        assert!(text.contains("min–max over 2 rounds"));
        // Columns line up: every header ends where its cells end.
        let end = lines[0].find("TCP1 Gbit/s").unwrap() + "TCP1 Gbit/s".len();
        assert_eq!(lines[1].chars().nth(end - 1), Some(')'));
    }
}
