//! The table and the JSON of the pps measurement.

use serde::Serialize;

use super::{Drops, FRAME_SIZES, PpsResults, Receiver, Sample, Series};
use crate::bench::{Config, stats::Spread, table};

/// The table: a row per frame size and configuration, the XDP receiver beside the stack.
pub fn render(results: &PpsResults, rounds: u32) -> String {
    let mut header = vec![format!("{:<7} CONFIG", "FRAME")];
    for receiver in Receiver::ALL {
        header.extend([
            format!("{}: OFFERED Mpps", receiver.heading()),
            "DELIVERED Mpps".to_owned(),
            "%".to_owned(),
            "DROPPED AT".to_owned(),
        ]);
    }
    let mut rows: Vec<Vec<String>> = vec![header];
    for size in FRAME_SIZES {
        for (config, found) in &results.configs {
            let mut row = vec![format!("{:<7} {config}", format!("{size} B"))];
            for receiver in Receiver::ALL {
                match found.get(size, receiver) {
                    Some(series) => row.extend([
                        table::cell(series.spread(Sample::offered_mpps)),
                        table::cell(series.spread(Sample::delivered_mpps)),
                        series
                            .spread(Sample::delivered_percent)
                            .map_or_else(|| "n/a".to_owned(), |s| table::number(s.median)),
                        dropped_at(series),
                    ]),
                    None => row.extend(std::iter::repeat_n("n/a".to_owned(), 4)),
                }
            }
            rows.push(row);
        }
    }
    let mut out = table::align(&rows);
    let refused = results
        .live_frames_refused
        .as_ref()
        .map(|why| format!(" (the kernel refused XDP live frames: {why})"))
        .unwrap_or_default();
    let spread = if rounds > 1 {
        format!(" (min–max over {rounds} rounds)")
    } else {
        String::new()
    };
    out.push_str(&format!(
        "\nframes of 64 and 1500 B {}{refused}; medians{spread}; % is \
         delivered / offered; DROPPED AT: the counter that rose most, as a share of all frames \
         offered. XDP RX and AF_XDP APP (an application reading an AF_XDP socket on B's interface, \
         copy mode) are n/a for tc: bpf_redirect_peer enters B past its driver's XDP hook\n",
        results.generator.describe()
    ));
    out
}

fn dropped_at(series: &Series) -> String {
    let offered = series.offered();
    match series.dropped().largest() {
        Some((place, n)) if offered > 0 => {
            format!(
                "{}% {place}",
                table::number(n as f64 * 100.0 / offered as f64)
            )
        }
        _ => "-".to_owned(),
    }
}

/// The JSON of one configuration: each series with its samples and the medians of its rates.
#[derive(Serialize)]
pub struct JsonConfig {
    name: Config,
    series: Vec<JsonSeries>,
    #[serde(skip_serializing_if = "Option::is_none")]
    redirected_packets: Option<u64>,
}

#[derive(Serialize)]
struct JsonSeries {
    frame_bytes: usize,
    receiver: Receiver,
    offered_mpps: Option<Spread>,
    delivered_mpps: Option<Spread>,
    delivered_percent: Option<Spread>,
    dropped: Drops,
    samples: Vec<Sample>,
}

pub fn json_configs(results: &PpsResults) -> Vec<JsonConfig> {
    results
        .configs
        .iter()
        .map(|(config, found)| JsonConfig {
            name: *config,
            series: found
                .series
                .iter()
                .map(|s| JsonSeries {
                    frame_bytes: s.frame_bytes,
                    receiver: s.receiver,
                    offered_mpps: s.spread(Sample::offered_mpps),
                    delivered_mpps: s.spread(Sample::delivered_mpps),
                    delivered_percent: s.spread(Sample::delivered_percent),
                    dropped: s.dropped(),
                    samples: s.samples.clone(),
                })
                .collect(),
            redirected_packets: found.redirected_packets,
        })
        .collect()
}
