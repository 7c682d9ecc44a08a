//! `dxdp watch`: level-triggered reconciliation of labeled containers against pinned links.
//! Docker events only say "look again"; the periodic resync heals whatever an event missed.
//!
//! Under systemd (`Type=notify`) the watch says `READY=1` once it runs its loop: after its first
//! reconcile, or after its first attempt to reach dockerd failed. Ready means the pinned state is
//! usable (programs upgraded, links adopted) and the loop is running; waiting for dockerd would
//! make `systemctl start dxdp` hang or fail while dockerd is down, and a restart would not bring
//! it back sooner (the unit only `Wants=` docker.service for the same reason). `WATCHDOG=1` is
//! sent from the select loop itself, so that a loop stuck in a reconcile stops the pings.
use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    path::{Path, PathBuf},
    process::ExitCode,
    sync::Arc,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context, Result};
use futures::{FutureExt, StreamExt};
use tokio::signal::unix::{SignalKind, signal};
use tracing::{debug, info, warn};

use super::runtime;
use crate::{
    cli::WatchArgs,
    datapath::{Capacity, Datapath, Origin},
    docker::{Container, Docker, endpoint_on},
    endpoint::Endpoint,
    firewall::{self, Ruleset},
    labels,
    metrics::{self, Metrics},
    netlink,
    netns::NetnsPath,
    plan::{self, Diagnostic, Level},
    reconcile::{
        self, Wanted,
        live::{Live, Resolved},
    },
    sd_notify::Notifier,
};

/// Container and network actions that can change which links should exist.
const RELEVANT: &[&str] = &[
    "start",
    "restart",
    "die",
    "stop",
    "kill",
    "destroy",
    "rename",
    "connect",
    "disconnect",
    "pause",
    "unpause",
    "update",
    "create",
];

const MAX_BACKOFF: Duration = Duration::from_secs(30);

pub fn run(pin_dir: &Path, capacity: Capacity, args: WatchArgs) -> Result<ExitCode> {
    let pin_dir = pin_dir.to_path_buf();
    runtime()?.block_on(watch(pin_dir, capacity, args))
}

async fn watch(pin_dir: PathBuf, capacity: Capacity, args: WatchArgs) -> Result<ExitCode> {
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut reported = BTreeSet::new();
    let mut backoff = Duration::from_secs(1);
    info!(pin_dir = %pin_dir.display(), resync_secs = args.resync, "dxdp watch starting");
    let stats = Arc::new(Metrics::default());
    let _server = match args.metrics {
        Some(addr) => {
            let server = tokio::spawn(metrics::serve(
                addr,
                Arc::clone(&stats),
                pin_dir.clone(),
                capacity,
            ));
            // A bind failure shows up at once, not at the first scrape.
            tokio::time::sleep(Duration::from_millis(50)).await;
            if server.is_finished() {
                server.await??;
                None
            } else {
                Some(AbortOnDrop(server))
            }
        }
        None => None,
    };
    // An upgraded binary swaps its programs into the running attachments before anything else.
    let upgrade_dir = pin_dir.clone();
    tokio::task::spawn_blocking(move || -> Result<()> {
        if upgrade_dir.exists() {
            Datapath::open(&upgrade_dir, capacity)?.upgrade_programs()?;
        }
        Ok(())
    })
    .await??;
    let watcher = Watcher {
        pin_dir: pin_dir.clone(),
        capacity,
        stats: Arc::clone(&stats),
    };
    let mut notify = if args.once {
        Notifier::disabled()
    } else {
        Notifier::from_env()
    };
    // Ticks only wake the loop up; the ping itself is sent by the loop, between its steps.
    let mut watchdog = notify.watchdog_interval().map(|every| {
        let mut interval = tokio::time::interval(every);
        // After a long reconcile, one ping at once, not a burst of the missed ones.
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        interval
    });
    let mut ready = false;
    let mut connects = 0u64;
    loop {
        notify.watchdog();
        let docker = match Docker::connect().await {
            Ok(docker) => docker,
            Err(err) => {
                stats.docker_connected(false);
                // Links keep working without dockerd (live-restore keeps containers running).
                warn!("{err:#}; retrying in {}s", backoff.as_secs());
                let status = format!(
                    "dockerd unreachable, retrying in {}s; links stay in place",
                    backoff.as_secs()
                );
                if ready {
                    notify.status(&status);
                } else {
                    notify.ready(&status);
                    ready = true;
                }
                let sleep = tokio::time::sleep(backoff);
                tokio::pin!(sleep);
                loop {
                    tokio::select! {
                        _ = &mut sleep => break,
                        _ = tick(&mut watchdog) => notify.watchdog(),
                        _ = sigterm.recv() => return finish(&pin_dir, capacity, args.cleanup, &mut notify).await,
                        _ = sigint.recv() => return finish(&pin_dir, capacity, args.cleanup, &mut notify).await,
                    }
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        backoff = Duration::from_secs(1);
        stats.docker_connected(true);
        connects += 1;
        // Also after every reconnect, so that an operator sees the watch caught up with dockerd.
        info!(api = %docker.api_version(), engine = %docker.describe(), "connected to dockerd");
        let connection = if connects == 1 {
            format!("dockerd API {}", docker.api_version())
        } else {
            format!(
                "dockerd API {}, reconnected {} times",
                docker.api_version(),
                connects - 1
            )
        };
        // Events since just before the listing are replayed, so a container started between
        // the listing and the stream's first poll is not missed.
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs().saturating_sub(1));
        let mut events = Box::pin(docker.events_since(since));
        let reconciled = watcher.reconcile(&docker, &mut reported).await;
        if args.once {
            // A one-shot run (cron, scripts) reports a failed reconcile in its exit status.
            return Ok(if reconciled.is_some() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            });
        }
        let status = status_line(reconciled.as_ref(), &connection);
        if ready {
            notify.status(&status);
        } else {
            notify.ready(&status);
            ready = true;
        }
        let mut resync = tokio::time::interval(Duration::from_secs(args.resync));
        resync.tick().await;
        loop {
            tokio::select! {
                event = events.next() => match event {
                    Some(Ok(action)) => {
                        if !is_relevant(&action) {
                            continue;
                        }
                        debug!(action, "docker event");
                        // A burst (compose up) becomes one reconcile.
                        while let Some(Some(Ok(_))) = events.next().now_or_never() {}
                        let outcome = watcher.reconcile(&docker, &mut reported).await;
                        notify.status(&status_line(outcome.as_ref(), &connection));
                    }
                    Some(Err(err)) => {
                        warn!("docker event stream failed: {err:#}; reconnecting");
                        notify.status("docker event stream failed; reconnecting");
                        break;
                    }
                    None => {
                        warn!("docker event stream ended; reconnecting");
                        notify.status("docker event stream ended; reconnecting");
                        break;
                    }
                },
                _ = resync.tick() => {
                    // A stream can stall silently; a failing ping means reconnect.
                    if let Err(err) = docker.ping().await {
                        warn!("dockerd does not answer: {err:#}; reconnecting");
                        notify.status("dockerd does not answer; reconnecting");
                        break;
                    }
                    let outcome = watcher.reconcile(&docker, &mut reported).await;
                    notify.status(&status_line(outcome.as_ref(), &connection));
                }
                // Sent between the loop's steps: a step that never returns (a reconcile stuck
                // in the kernel or on dockerd) stops the pings, and systemd restarts the watch.
                _ = tick(&mut watchdog) => notify.watchdog(),
                _ = sigterm.recv() => return finish(&pin_dir, capacity, args.cleanup, &mut notify).await,
                _ = sigint.recv() => return finish(&pin_dir, capacity, args.cleanup, &mut notify).await,
            }
        }
    }
}

/// Waits for the next watchdog tick, or forever without a watchdog.
async fn tick(watchdog: &mut Option<tokio::time::Interval>) {
    match watchdog {
        Some(interval) => {
            interval.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// The service's STATUS= line after a reconcile.
fn status_line(outcome: Option<&Outcome>, connection: &str) -> String {
    match outcome {
        Some(o) => format!(
            "{} links, {} running containers; {connection}",
            o.links, o.containers
        ),
        None => format!("the last reconcile failed (see the log); {connection}"),
    }
}

fn is_relevant(action: &str) -> bool {
    let verb = action.split(':').next().unwrap_or(action).trim();
    RELEVANT.contains(&verb)
}

async fn finish(
    pin_dir: &Path,
    capacity: Capacity,
    cleanup: bool,
    notify: &mut Notifier,
) -> Result<ExitCode> {
    if !cleanup {
        notify.stopping("stopping; links stay in place");
        info!("dxdp watch stopping; links stay in place");
        return Ok(ExitCode::SUCCESS);
    }
    notify.stopping("stopping; removing the links the watch made");
    let pin_dir = pin_dir.to_path_buf();
    let removed = tokio::task::spawn_blocking(move || -> Result<usize> {
        let mut datapath = Datapath::open(&pin_dir, capacity)?;
        let mut removed = 0;
        for link in datapath.links()? {
            if link.origin == Origin::Watch {
                datapath.remove(link.low_ifindex, link.high_ifindex)?;
                removed += 1;
            }
        }
        Ok(removed)
    })
    .await??;
    info!(removed, "dxdp watch stopping; removed the links it made");
    Ok(ExitCode::SUCCESS)
}

struct AbortOnDrop(tokio::task::JoinHandle<Result<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

struct Watcher {
    pin_dir: PathBuf,
    capacity: Capacity,
    stats: Arc<Metrics>,
}

impl Watcher {
    /// Returns what the reconcile found, or `None` if it failed; a failure is logged.
    async fn reconcile(
        &self,
        docker: &Docker,
        reported: &mut BTreeSet<Diagnostic>,
    ) -> Option<Outcome> {
        let started = Instant::now();
        let result = reconcile(docker, &self.pin_dir, self.capacity, reported).await;
        self.stats.reconciled(started.elapsed(), result.is_ok());
        match result {
            Ok(outcome) => {
                self.stats.firewall_refused(outcome.firewall_refused);
                self.stats.refused(&outcome.refused, outcome.malformed);
                debug!(
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    containers = outcome.containers,
                    links = outcome.links,
                    "reconciled"
                );
                Some(outcome)
            }
            Err(err) => {
                warn!("reconcile failed: {err:#}");
                None
            }
        }
    }
}

struct Outcome {
    containers: usize,
    links: usize,
    firewall_refused: usize,
    /// Pairs the rules refused, by reason (the firewall's are `firewall_refused`).
    refused: BTreeMap<&'static str, usize>,
    /// Containers whose labels do not parse.
    malformed: usize,
}

async fn reconcile(
    docker: &Docker,
    pin_dir: &Path,
    capacity: Capacity,
    reported: &mut BTreeSet<Diagnostic>,
) -> Result<Outcome> {
    let containers = docker.running().await?;
    let views: Vec<_> = containers.iter().map(|c| c.view.clone()).collect();
    let plan = plan::plan(&views);
    let pin_dir = pin_dir.to_path_buf();
    let count = containers.len();
    let applied =
        tokio::task::spawn_blocking(move || apply(&pin_dir, capacity, &containers, &plan.links))
            .await
            .context("reconcile task panicked")??;
    // Label problems and firewall refusals are logged together, each once while it holds.
    let firewall_refused = applied.refused.len();
    let mut diagnostics = plan.diagnostics;
    diagnostics.extend(applied.refused);
    report_new(&diagnostics, reported);
    Ok(Outcome {
        containers: count,
        links: applied.links,
        firewall_refused,
        refused: plan.refused,
        malformed: plan.malformed,
    })
}

/// Logs each diagnostic once while it holds, so a resync does not repeat them every time.
fn report_new(diagnostics: &[Diagnostic], reported: &mut BTreeSet<Diagnostic>) {
    let current: BTreeSet<Diagnostic> = diagnostics.iter().cloned().collect();
    for d in current.difference(reported) {
        match d.level {
            Level::Warn => warn!(container = %d.container, "{}", d.message),
            Level::Info => info!(container = %d.container, "{}", d.message),
        }
    }
    *reported = current;
}

/// What one apply did: the links pinned after it, and the pairs a firewall rule kept apart.
struct Applied {
    links: usize,
    refused: Vec<Diagnostic>,
}

fn apply(
    pin_dir: &Path,
    capacity: Capacity,
    containers: &[Container],
    links: &BTreeSet<plan::DesiredLink>,
) -> Result<Applied> {
    let host = netlink::interfaces(&NetnsPath::host())?;
    // Read once per reconcile, and only when a pair needs it. A ruleset that cannot be read
    // fails the reconcile, which then changes nothing.
    let mut rules: Option<Ruleset> = None;
    let mut refused = Vec::new();
    let by_id: HashMap<&str, &Container> =
        containers.iter().map(|c| (c.view.id.as_str(), c)).collect();
    // A container in a group takes part in several links: enter its namespace once, not once
    // per link (at 200 containers this halves the reconcile).
    let mut found: HashMap<(&str, &str), Result<Endpoint>> = HashMap::new();
    let mut wanted = Vec::new();
    for link in links {
        let (Some(a), Some(b)) = (by_id.get(link.a.as_str()), by_id.get(link.b.as_str())) else {
            continue;
        };
        let net = link.network_id.as_str();
        for c in [a, b] {
            found
                .entry((c.view.id.as_str(), net))
                .or_insert_with(|| endpoint_on(c, net, &host));
        }
        match (
            &found[&(a.view.id.as_str(), net)],
            &found[&(b.view.id.as_str(), net)],
        ) {
            (Ok(ea), Ok(eb)) => {
                let (ea, eb) = (ea.clone(), eb.clone());
                let network = a
                    .attachment(&link.network_id)
                    .map(|att| att.network.name.clone())
                    .unwrap_or_default();
                let bypass = [a, b]
                    .iter()
                    .all(|c| labels::bypasses_firewall(&c.view.labels));
                if !bypass {
                    let rules = match rules.as_mut() {
                        Some(rules) => rules,
                        None => rules.insert(
                            Ruleset::read().context("cannot read the host's firewall rules")?,
                        ),
                    };
                    let blockers = rules.between(&ea, &eb);
                    if !blockers.is_empty() {
                        let (x, y) = (ea.host_ifindex, eb.host_ifindex);
                        let pair = (x.min(y), x.max(y));
                        refused.push((
                            pair,
                            Diagnostic {
                                container: a.view.name.clone(),
                                level: Level::Warn,
                                message: firewall::refusal(
                                    &a.view.name,
                                    &b.view.name,
                                    &ea.bridge_name,
                                    &blockers,
                                    "label both containers dxdp.firewall=bypass",
                                ),
                            },
                        ));
                        continue;
                    }
                }
                let kind = link.datapath.resolve();
                let (x, y) = (ea.host_ifindex, eb.host_ifindex);
                wanted.push(Wanted::new(
                    x,
                    y,
                    kind,
                    Resolved {
                        a: ea,
                        b: eb,
                        network,
                    },
                ));
            }
            // A container that just stopped or is still starting: the next event catches up.
            // A permission problem will not heal by itself: say so loudly.
            (Err(err), _) | (_, Err(err)) if permission_denied(err) => {
                warn!(a = %a.view.name, b = %b.view.name, "cannot link: {err:#}")
            }
            (Err(err), _) | (_, Err(err)) => {
                debug!(a = %a.view.name, b = %b.view.name, "not linkable yet: {err:#}")
            }
        }
    }
    let mut datapath = Datapath::open(pin_dir, capacity)?;
    datapath.collect_garbage(&host)?;
    let mut table = Live {
        datapath,
        host: &host,
    };
    let applied = reconcile::apply(&mut table, &wanted)?;
    for w in &applied.completed {
        warn!(a = %w.link.a.label, b = %w.link.b.label, "link lacked an attachment; completed it");
    }
    for (w, err) in &applied.failed {
        let Resolved { a, b, network } = &w.link;
        warn!(a = %a.label, b = %b.label, network = %network, "cannot link: {err:#}");
    }
    // Fail closed: a rule that appeared after the link was made takes the link away.
    for pair in &applied.removed {
        if let Some((_, d)) = refused.iter().find(|(p, _)| p == pair) {
            warn!(container = %d.container, "removed a link: {}", d.message);
        }
    }
    Ok(Applied {
        links: applied.links,
        refused: refused.into_iter().map(|(_, d)| d).collect(),
    })
}

fn permission_denied(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied)
    })
}
