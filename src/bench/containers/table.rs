//! The results as a plain-text table: one row per configuration, each cell `median (min–max)`,
//! then each configuration's medians relative to the baseline's.
use super::{Metric, Results};
use crate::bench::table::{align, cell, ratio};

/// The table of every configuration's medians and ranges, and their ratios to the baseline.
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
             throughput and redis GETs, lower for RTT and ping-pong\n"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{super::Samples, *};
    use crate::bench::Config;

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
