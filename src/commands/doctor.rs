//! `dxdp doctor`: every precondition, checked, with what to do about a failure.
mod daemon;
mod host;
mod pinned;
mod rules;

use std::{fmt, path::Path, process::ExitCode};

use anyhow::Result;
use serde::Serialize;

use crate::{cli::DoctorArgs, datapath::Capacity, rcu};
use daemon::docker;
use host::{bpffs, capabilities, kernel};
use pinned::{overlay_sites, programs};
use rules::firewall;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
enum Verdict {
    Ok,
    Warn,
    Fail,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Ok => " ok ",
            Verdict::Warn => "warn",
            Verdict::Fail => "FAIL",
        })
    }
}

#[derive(Serialize)]
struct Check {
    verdict: Verdict,
    what: String,
    fix: Option<String>,
}

fn check(verdict: Verdict, what: impl Into<String>, fix: Option<&str>) -> Check {
    Check {
        verdict,
        what: what.into(),
        fix: fix.map(str::to_owned),
    }
}

/// `dxdp doctor --json`: the shape docs/json.md documents.
#[derive(Serialize)]
struct Report<'c> {
    schema: &'static str,
    /// The worst verdict: what the exit status says (fail: 1).
    verdict: Verdict,
    checks: &'c [Check],
}

pub fn run(pin_dir: &Path, capacity: Capacity, args: DoctorArgs) -> Result<ExitCode> {
    let mut checks = vec![
        kernel(),
        capabilities(),
        bpffs(pin_dir),
        host::rcu(&rcu::Switch::host()),
    ];
    let (docker, networks, ports) = docker();
    checks.extend(docker);
    checks.extend(firewall(&networks, &ports));
    checks.extend(programs(pin_dir, capacity));
    checks.extend(overlay_sites(pin_dir, capacity));
    let worst = checks
        .iter()
        .map(|c| c.verdict)
        .max()
        .unwrap_or(Verdict::Ok);
    if args.json {
        let report = Report {
            schema: "dxdp.doctor/1",
            verdict: worst,
            checks: &checks,
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for c in &checks {
            println!("[{}] {}", c.verdict, c.what);
            if let Some(fix) = &c.fix {
                println!("       fix: {fix}");
            }
        }
    }
    Ok(if worst == Verdict::Fail {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
