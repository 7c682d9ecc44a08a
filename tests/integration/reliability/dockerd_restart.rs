//! Promise 3: the watch survives dockerd going away and coming back (with and without
//! live-restore).

use super::*;

#[test]
fn the_watch_survives_dockerd_stopping_and_relinks_when_it_is_back() {
    if !require_docker() {
        return;
    }
    let mut world = World::private();
    let net = world.network("net", &[]);
    let group = format!("{}-g", world.prefix);
    let args = member(
        &net,
        &group,
        &["--restart", "always", "--stop-timeout", "1"],
    );
    let a = world.run("a", &strs(&args), &[]);
    let b = world.run("b", &strs(&args), &[]);
    let mut watch = world.watch(&["--resync", "2"]);
    let first =
        wait_linked_via_current_veths(&world, &watch, &a, &b, &net, Duration::from_secs(10));
    assert!(wait_until(Duration::from_secs(5), || connects(&watch) == 1));

    // Without live-restore, stopping dockerd stops the containers.
    let stop_took = world.stop_daemon();
    thread::sleep(Duration::from_millis(500));
    let down = snapshot(&world.dxdp);
    let down_for = Duration::from_secs(4);
    let t_down = Instant::now();
    while t_down.elapsed() < down_for {
        assert!(
            watch.alive(),
            "the watch died without dockerd:\n{}",
            watch.log_text()
        );
        assert_eq!(
            snapshot(&world.dxdp),
            down,
            "the watch changed the pinned state while dockerd was down:\n{}",
            watch.log_text()
        );
        thread::sleep(Duration::from_millis(250));
    }
    let log = watch.log_text();
    assert!(
        log.contains("cannot reach dockerd") && log.contains("retrying"),
        "the watch does not say it lost dockerd:\n{log}"
    );

    // Back (with live-restore from now on): the containers restart with new veths.
    let start_took = world.start_daemon(true);
    let back = Instant::now();
    let relinked = {
        assert!(
            wait_until(Duration::from_secs(30), || {
                world
                    .docker(&["inspect", "-f", "{{.State.Running}}", &a, &b])
                    .stdout
                    == "true\ntrue\n"
            }),
            "the containers did not restart"
        );
        wait_linked_via_current_veths(&world, &watch, &a, &b, &net, Duration::from_secs(30))
    };
    let relink_delay = back.elapsed();
    assert!(
        relink_delay <= Duration::from_secs(30),
        "relinked {relink_delay:?} after dockerd was back"
    );
    assert_ne!(
        (relinked.low_ifindex, relinked.high_ifindex),
        (first.low_ifindex, first.high_ifindex),
        "the restarted containers have new veths"
    );
    assert!(
        connects(&watch) >= 2,
        "no reconnect logged:\n{}",
        watch.log_text()
    );
    assert_consistent(&world.dxdp, Some(&watch));
    let ip_b = world.ip(&b, &net);
    assert_eq!(docker_ping(&world, &a, &ip_b, 50, "0.01"), (50, 50));

    // With live-restore, the containers outlive dockerd: links and traffic stay.
    let pid_a = world.pid(&a).to_string();
    world.stop_daemon();
    let during = world.dxdp.status();
    let link0 = link_between(&during, &a, &b)
        .cloned()
        .expect("still linked");
    assert_eq!(
        (
            link0.low_ifindex,
            link0.high_ifindex,
            link0.created_unix_secs
        ),
        (
            relinked.low_ifindex,
            relinked.high_ifindex,
            relinked.created_unix_secs
        )
    );
    let ping = run(&[
        "nsenter", "-t", &pid_a, "-n", "ping", "-q", "-n", "-c", "200", "-i", "0.005", "-W", "1",
        &ip_b,
    ]);
    assert_eq!(ping_counts(&ping.stdout), Some((200, 200)), "{ping}");
    thread::sleep(Duration::from_secs(2));
    assert!(watch.alive(), "the watch died:\n{}", watch.log_text());
    let later = world.dxdp.status();
    let link1 = link_between(&later, &a, &b).cloned().expect("still linked");
    assert_eq!(link1.created_unix_secs, link0.created_unix_secs);
    assert!(
        link1.low_to_high.packets >= link0.low_to_high.packets + 200
            && link1.high_to_low.packets >= link0.high_to_low.packets + 200,
        "the link did not carry the pings while dockerd was down: {link0:?} -> {link1:?}"
    );
    world.start_daemon(true);
    assert!(
        wait_until(Duration::from_secs(30), || connects(&watch) >= 3),
        "no reconnect within 30 s:\n{}",
        watch.log_text()
    );
    thread::sleep(Duration::from_millis(2500));
    let after = world.dxdp.status();
    let link2 = link_between(&after, &a, &b).cloned().expect("still linked");
    assert_eq!(
        (
            link2.low_ifindex,
            link2.high_ifindex,
            link2.created_unix_secs
        ),
        (
            link0.low_ifindex,
            link0.high_ifindex,
            link0.created_unix_secs
        ),
        "the link was rebuilt after a live-restore restart of dockerd"
    );
    assert_consistent(&world.dxdp, Some(&watch));
    assert!(
        !watch.log_text().contains("panicked"),
        "{}",
        watch.log_text()
    );
    eprintln!(
        "dockerd: stopped in {stop_took:?}, down {:?}, started in {start_took:?}; relinked \
         {relink_delay:?} after it was back; links and pings kept through a live-restore restart",
        down_for
    );
}
