//! The harness proper: a topology is a plug ([`Topology`]) that can put itself on Docker's path
//! or on dxdp's and send one case; the runner sends each case both ways, compares what every
//! observer saw, and reports each difference with the case, its seed and how to rerun it.

use std::{
    collections::BTreeMap,
    fmt,
    time::{Duration, Instant},
};

/// What each observer saw of one case on one path: observer name -> normalised lines, sorted
/// (the order in which a namespace's stack answers is not part of the promise).
pub type Observation = BTreeMap<&'static str, Vec<String>>;

/// A difference the promise allows, with why.
pub struct Allowance {
    pub name: &'static str,
    pub reason: &'static str,
}

/// One topology under test: Docker's path and dxdp's on the same namespaces and containers.
pub trait Topology {
    type Case: fmt::Display;

    /// The test that runs this topology: its name goes into the reproduction line.
    const TEST: &'static str;
    /// What the observers leave out because the fast path differs there by design.
    const NORMALISED: &'static [Allowance];

    /// Case `index` of the run with `seed`, a function of the two alone.
    fn case(&self, seed: u64, index: u64) -> Self::Case;
    /// Docker's path only (dxdp's programs out of the way), as `case` wants it (a rule it
    /// needs on both paths, say).
    fn make_dockers(&mut self, case: &Self::Case);
    /// dxdp's fast path in place, as `case` wants it (a datapath, say).
    fn make_fast(&mut self, case: &Self::Case);
    /// Sends one case on the path in place and returns what every observer saw.
    fn exercise(&mut self, case: &Self::Case) -> Observation;
    /// Whether a difference on `observer` is an expected one for this case.
    fn allowed(
        &self,
        case: &Self::Case,
        observer: &str,
        docker: &[String],
        fast: &[String],
    ) -> Option<&'static Allowance>;
    /// What the fast path's counters and the receiving stack say now, printed beside a
    /// difference: where a packet went that one path lost (a topology may have nothing).
    fn evidence(&self) -> Vec<String> {
        Vec::new()
    }
}

/// How many cases: a count, and a time after which no new case starts.
pub struct Budget {
    pub first: u64,
    pub cases: u64,
    pub time: Duration,
}

pub struct Difference {
    pub case: String,
    pub index: u64,
    pub observer: &'static str,
    pub docker: Vec<String>,
    pub fast: Vec<String>,
    /// What the observer saw on a second run of the case right after, (Docker's, dxdp's),
    /// where it differed again; `None` where both paths were alike then.
    pub again: Option<(Vec<String>, Vec<String>)>,
    /// The fast path's and the receiver's state after the second run ([`Topology::evidence`]).
    pub evidence: Vec<String>,
}

/// The observers of `docker` and `fast` (one case's two runs) that differ where `topology`
/// allows no difference, with what each path saw, and the allowances that excused the rest.
#[allow(clippy::type_complexity)]
fn compare<T: Topology>(
    topology: &T,
    case: &T::Case,
    docker: &Observation,
    fast: &Observation,
) -> (
    Vec<(&'static str, Vec<String>, Vec<String>)>,
    Vec<&'static Allowance>,
) {
    let (mut unexplained, mut allowed) = (Vec::new(), Vec::new());
    for (observer, seen) in docker {
        let other = fast.get(observer).cloned().unwrap_or_default();
        if *seen == other {
            continue;
        }
        match topology.allowed(case, observer, seen, &other) {
            Some(allowance) => allowed.push(allowance),
            None => unexplained.push((*observer, seen.clone(), other)),
        }
    }
    (unexplained, allowed)
}

pub struct Report {
    pub seed: u64,
    pub cases: u64,
    pub elapsed: Duration,
    pub differences: Vec<Difference>,
    /// Allowance name -> how many cases it excused.
    pub allowed: BTreeMap<&'static str, u64>,
}

/// Sends cases `budget.first..` of `seed` through both paths of `topology`.
pub fn run<T: Topology>(topology: &mut T, seed: u64, budget: &Budget) -> Report {
    for allowance in T::NORMALISED {
        eprintln!("not compared: {}: {}", allowance.name, allowance.reason);
    }
    let started = Instant::now();
    let mut report = Report {
        seed,
        cases: 0,
        elapsed: Duration::ZERO,
        differences: Vec::new(),
        allowed: BTreeMap::new(),
    };
    for index in budget.first..budget.first + budget.cases {
        if started.elapsed() >= budget.time {
            break;
        }
        let case = topology.case(seed, index);
        topology.make_dockers(&case);
        let docker = topology.exercise(&case);
        topology.make_fast(&case);
        let fast = topology.exercise(&case);
        report.cases += 1;
        if std::env::var_os("DXDP_DIFF_VERBOSE").is_some() {
            eprintln!("case {index}: {case}\n  Docker's: {docker:?}\n  dxdp's:   {fast:?}");
            for line in topology.evidence() {
                eprintln!("  after it: {line}");
            }
        }
        let (unexplained, allowed) = compare(topology, &case, &docker, &fast);
        for allowance in allowed {
            *report.allowed.entry(allowance.name).or_default() += 1;
        }
        if unexplained.is_empty() {
            continue;
        }
        // Once more both ways, before anything else runs: whether the difference is the
        // case's own or the moment's (a case that differed once in CI matched in every rerun
        // by hand). It counts the same either way.
        topology.make_dockers(&case);
        let docker_again = topology.exercise(&case);
        topology.make_fast(&case);
        let fast_again = topology.exercise(&case);
        let evidence = topology.evidence();
        let (again, _) = compare(topology, &case, &docker_again, &fast_again);
        for (observer, docker, fast) in unexplained {
            let difference = Difference {
                case: case.to_string(),
                index,
                observer,
                docker,
                fast,
                again: again
                    .iter()
                    .find(|(o, ..)| *o == observer)
                    .map(|(_, d, f)| (d.clone(), f.clone())),
                evidence: evidence.clone(),
            };
            eprintln!("{}", difference.show::<T>(seed));
            report.differences.push(difference);
        }
    }
    report.elapsed = started.elapsed();
    report
}

impl Difference {
    /// The difference, both sides, and one line that reruns the case.
    pub fn show<T: Topology>(&self, seed: u64) -> String {
        let side = |lines: &[String]| {
            if lines.is_empty() {
                "      (nothing)\n".to_owned()
            } else {
                lines.iter().map(|l| format!("      {l}\n")).collect()
            }
        };
        let again = match &self.again {
            None => "    a second run right after: alike on both paths\n".to_owned(),
            Some((docker, fast)) => format!(
                "    a second run right after: different again; Docker's path saw:\n{}    \
                 dxdp's path saw:\n{}",
                side(docker),
                side(fast)
            ),
        };
        let evidence: String = self
            .evidence
            .iter()
            .map(|l| format!("    after it: {l}\n"))
            .collect();
        format!(
            "DIFFERENCE seed {seed} case {}, observer {}: {}\n    Docker's path saw:\n{}    \
             dxdp's path saw:\n{}{again}{evidence}    rerun: {}",
            self.index,
            self.observer,
            self.case,
            side(&self.docker),
            side(&self.fast),
            rerun(T::TEST, seed, self.index),
        )
    }
}

/// The command that reruns case `index` of `seed` alone.
pub fn rerun(test: &str, seed: u64, index: u64) -> String {
    format!(
        "DXDP_DIFF_SEED={seed} DXDP_DIFF_FIRST={index} DXDP_DIFF_CASES=1 cargo test --release \
         --test integration -- --test-threads=1 --nocapture --exact {test}"
    )
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {}: {} cases in {:.1} s, {} differences",
            self.seed,
            self.cases,
            self.elapsed.as_secs_f64(),
            self.differences.len()
        )?;
        if !self.allowed.is_empty() {
            let allowed: Vec<String> = self
                .allowed
                .iter()
                .map(|(name, n)| format!("{name} ×{n}"))
                .collect();
            write!(f, "; allowed: {}", allowed.join(", "))?;
        }
        Ok(())
    }
}
