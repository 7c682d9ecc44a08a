//! `dxdp watch`: level-triggered reconciliation of labeled containers against pinned links.
//! An event says "look again at this container" (a pass scoped to it); the periodic resync
//! looks at everything and heals whatever an event missed. The passes are the library's
//! [`crate::engine`]; this loop only feeds it events, kernel notices and resync ticks, and
//! answers signals, systemd and the metrics server.
//!
//! Under systemd (`Type=notify`) the watch says `READY=1` once it runs its loop: after its first
//! reconcile, or after its first attempt to reach dockerd failed. Ready means the pinned state is
//! usable (programs upgraded, links adopted) and the loop is running; waiting for dockerd would
//! make `systemctl start dxdp` hang or fail while dockerd is down, and a restart would not bring
//! it back sooner (the unit only `Wants=` docker.service for the same reason). `WATCHDOG=1` is
//! sent from the select loop itself, so that a loop stuck in a reconcile stops the pings.
use std::{
    path::{Path, PathBuf},
    process::ExitCode,
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::Result;
use futures::{FutureExt, StreamExt};
use tokio::signal::unix::{SignalKind, signal};
use tracing::{info, warn};

use super::runtime;
use crate::{
    choice::Origin,
    cli::WatchArgs,
    datapath::{Capacity, Datapath, ExistingConnections, Unlocked},
    docker::Docker,
    engine::{
        Engine, Outcome, RealHost, Which,
        notice_batch::NoticeBatch,
        notices::{self, Notice, Notices},
    },
    metrics::{self, Metrics},
    rcu,
    sd_notify::Notifier,
};

const MAX_BACKOFF: Duration = Duration::from_secs(30);

pub fn run(pin_dir: &Path, capacity: Capacity, args: WatchArgs) -> Result<ExitCode> {
    let pin_dir = pin_dir.to_path_buf();
    runtime()?.block_on(watch(pin_dir, capacity, args))
}

async fn watch(pin_dir: PathBuf, capacity: Capacity, args: WatchArgs) -> Result<ExitCode> {
    // Two malloc arenas, not one per thread that ever allocated: a long-running watch keeps
    // each arena's free pages (at 200 containers that was about 15 MB of RSS).
    // SAFETY: mallopt only tunes the allocator; called before the watch's threads allocate.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut backoff = Duration::from_secs(1);
    info!(pin_dir = %pin_dir.display(), resync_secs = args.resync, "dxdp watch starting");
    let switch = rcu::Switch::host();
    if args.expedite_rcu {
        switch.check()?;
    }
    // A watch killed while it had the switch on left it on: put it back, with or without the
    // flag this time.
    match switch.recover() {
        Ok(Some(holder)) => warn!(
            pid = holder.pid,
            "put /sys/kernel/rcu_expedited back to {}: a dxdp that turned it on died before it could",
            holder.previous
        ),
        Ok(None) => {}
        Err(err) => warn!("{err:#}"),
    }
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
    // The pinned state must be usable before the watch says it is ready: a pin directory it
    // could not create or open (no bpffs, a mount a sandbox made read-only) ends the watch
    // here, where a service manager sees the start fail, rather than leaving a watch that
    // reports ready and links nothing; nothing is created here. An upgraded
    // binary also swaps its programs into the running attachments here, before anything else;
    // the first pass takes the state opened here, unlocked, rather than loading it again.
    let startup_dir = pin_dir.clone();
    let opened = tokio::task::spawn_blocking(move || -> Result<Option<Unlocked>> {
        if startup_dir.exists() {
            let mut datapath = Datapath::open(&startup_dir, capacity)?;
            datapath.upgrade_programs()?;
            Ok(Some(datapath.unlock()))
        } else {
            Datapath::check_usable(&startup_dir)?;
            Ok(None)
        }
    })
    .await??;
    let mut engine = Engine::new(
        RealHost::new(pin_dir.clone(), capacity, args.expedite_rcu)
            .with_ingress_nics(args.ingress_nics.clone())
            .with_egress_nic(args.egress_nic.clone()),
        Arc::clone(&stats),
    )
    .with_links(opened);
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
    // A MAC that moves or a rule that appears is acted on within a second, not at the resync.
    let mut notices = match notices::listen() {
        Ok(notices) => Some(notices),
        Err(err) => {
            warn!("{err:#}; MAC and firewall changes are caught by the resync only");
            None
        }
    };
    let mut soon = NoticeBatch::default();
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
        let reconciled = engine.reconcile(&docker, Which::All).await;
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
        // A task of another node that goes makes no event here: its links follow the poll.
        let mut remote = tokio::time::interval(crate::engine::REMOTE_POLL);
        remote.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        remote.tick().await;
        loop {
            tokio::select! {
                event = events.next() => match event {
                    Some(Ok(event)) => {
                        let Some(mut which) = engine.scope_of(&event) else {
                            continue;
                        };
                        // A burst (compose up) becomes one reconcile, about all it names.
                        while let Some(Some(Ok(more))) = events.next().now_or_never() {
                            if let Some(also) = engine.scope_of(&more) {
                                which.merge(also);
                            }
                        }
                        let outcome = engine.reconcile(&docker, which).await;
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
                Some(notice) = next_notice(&mut notices) => {
                    soon.note(notice, &engine);
                    while let Some(more) = notices.as_mut().and_then(|n| n.try_next()) {
                        soon.note(more, &engine);
                    }
                }
                _ = soon.due() => {
                    let which = soon.take(&mut engine);
                    let outcome = engine.reconcile(&docker, which).await;
                    notify.status(&status_line(outcome.as_ref(), &connection));
                }
                _ = remote.tick() => {
                    if let Some(which) = engine.poll_remote(&docker).await {
                        let outcome = engine.reconcile(&docker, which).await;
                        notify.status(&status_line(outcome.as_ref(), &connection));
                    }
                }
                _ = resync.tick() => {
                    // A stream can stall silently; a failing ping means reconnect.
                    if let Err(err) = docker.ping().await {
                        warn!("dockerd does not answer: {err:#}; reconnecting");
                        notify.status("dockerd does not answer; reconnecting");
                        break;
                    }
                    let outcome = engine.resync(&docker).await;
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

/// The next kernel notice, or never when they are not followed.
async fn next_notice(notices: &mut Option<Notices>) -> Option<Notice> {
    match notices {
        Some(notices) => notices.next().await,
        None => std::future::pending().await,
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
            "{}, {}; {connection}",
            counted(o.links, "link", "links"),
            counted(o.containers, "running container", "running containers")
        ),
        None => format!("the last reconcile failed (see the log); {connection}"),
    }
}

/// `1 link`, `2 links`.
fn counted(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
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
    notify.stopping("stopping; removing the links and exposures the watch made");
    let pin_dir = pin_dir.to_path_buf();
    let (removed, unexposed) = tokio::task::spawn_blocking(move || -> Result<(usize, usize)> {
        let mut datapath = Datapath::open(&pin_dir, capacity)?;
        let mut removed = remove_watch_links(&mut datapath)?;
        let mut exposed: Vec<u32> = datapath
            .exposed()?
            .iter()
            .filter(|p| p.origin == Origin::Watch)
            .map(|p| p.veth_ifindex)
            .collect();
        exposed.dedup();
        for &veth in &exposed {
            datapath.unexpose(veth, ExistingConnections::Drain)?;
        }
        // The watch's links in each live overlay sandbox (same node, and its halves across
        // nodes), removed from inside it.
        for site in crate::overlay::sites(&pin_dir) {
            let Some(sandbox) = site.sandbox else {
                continue;
            };
            removed += sandbox
                .run(|| remove_watch_links(&mut Datapath::open(&site.pin_dir, capacity)?))?;
        }
        Ok((removed, exposed.len()))
    })
    .await??;
    info!(
        removed,
        unexposed, "dxdp watch stopping; removed the links and exposures it made"
    );
    Ok(ExitCode::SUCCESS)
}

struct AbortOnDrop(tokio::task::JoinHandle<Result<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Removes the links the watch made (not hand-made ones) from `datapath`; how many.
fn remove_watch_links(datapath: &mut Datapath) -> Result<usize> {
    let ours: Vec<(u32, u32)> = datapath
        .links()?
        .iter()
        .filter(|l| l.origin == Origin::Watch)
        .map(|l| (l.low_ifindex, l.high_ifindex))
        .collect();
    Ok(datapath.remove_links(&ours)?.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_line_counts_in_words_that_agree() {
        let line = |links, containers| {
            status_line(Some(&Outcome { containers, links }), "dockerd API 1.51")
        };
        assert_eq!(line(1, 1), "1 link, 1 running container; dockerd API 1.51");
        assert_eq!(
            line(0, 2),
            "0 links, 2 running containers; dockerd API 1.51"
        );
    }
}
