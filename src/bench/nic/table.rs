//! The side-by-side table of the routes.

use super::{Direction, Metric, Results, Route};
use crate::bench::table;

/// The side-by-side table: one row per metric, Docker's path and the fast path (and the wire,
/// if measured) as `median (min–max)`, their ratios to Docker's (and the fast path's to the
/// wire's) and the goals.
pub fn render(results: &Results, rounds: u32) -> String {
    let wire = results.has_wire();
    let direction = results.direction;
    let mut header = vec!["WORKLOAD", "UNIT", "DOCKER", "FAST"];
    if wire {
        header.push("WIRE");
    }
    header.push("FAST/DOCKER");
    if wire {
        header.extend(["WIRE/DOCKER", "FAST/WIRE"]);
    }
    header.push("GOAL");
    let mut rows = vec![header.into_iter().map(str::to_owned).collect::<Vec<_>>()];
    for m in Metric::ALL {
        let mut goals = Vec::new();
        if let Some(g) = results.goal(m) {
            goals.push(format!(
                "{} {g:.2}x {}{}",
                if m.lower_is_better() { "≤" } else { "≥" },
                verdict(results.met(m)),
                match results.rounds_meeting_goal(m) {
                    Some((met, of)) if of > 1 => format!(", in {met} of {of} rounds"),
                    _ => String::new(),
                }
            ));
        }
        if let Some(g) = direction.wire_goal(m).filter(|_| wire) {
            goals.push(format!("wire ≥ {g:.2}x {}", verdict(results.wire_met(m))));
        }
        let mut row = vec![
            m.label(direction).to_owned(),
            m.unit().to_owned(),
            table::cell(results.spread(Route::Docker, m)),
            table::cell(results.spread(Route::Fast, m)),
        ];
        if wire {
            row.push(table::cell(results.spread(Route::Wire, m)));
        }
        row.push(table::ratio(results.ratio(m)));
        if wire {
            row.push(table::ratio(results.over_docker(Route::Wire, m)));
            row.push(table::ratio(results.fast_over_wire(m)));
        }
        row.push(goals.join("; "));
        rows.push(row);
    }
    let ranges = if rounds > 1 {
        format!(
            "; ranges are min–max over {rounds} rounds; a goal is judged on the medians' ratio, \
             and each round's own ratio is counted against it"
        )
    } else {
        String::new()
    };
    let wire_note = match (wire, direction) {
        (false, _) => "",
        (true, Direction::Ingress) => {
            "\nWIRE is a veth from the client namespace straight into the container's, no host \
             in between: no path through the NIC can beat it"
        }
        (true, Direction::Egress) => {
            "\nWIRE is a veth from the container straight into the servers' namespace, no host \
             in between: no path through the NIC can beat it"
        }
    };
    format!(
        "{}\nmedians{ranges}; FAST/DOCKER is the fast path's median over Docker's: higher is \
         better for rates, lower for latency{wire_note}\n",
        table::align(&rows)
    )
}

fn verdict(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "missed",
        None => "n/a",
    }
}
