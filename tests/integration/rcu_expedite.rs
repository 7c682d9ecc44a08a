//! `dxdp watch --expedite-rcu`: the kernel's host-wide RCU expedite switch
//! (`/sys/kernel/rcu_expedited`), turned on only while a pass attaches programs and put back
//! afterwards; a value the operator set left alone; a switch left on by a killed watch put back by
//! the next one (and reported by `dxdp doctor` until then); a switch that cannot be turned refused
//! at start. (How much it saves is the fleet benchmark's to show: `fleet::`.)

use std::{path::Path, time::Duration};

use crate::support::{
    DXDP, Dxdp, PinDir, RCU_EXPEDITED, RCU_MARKER, RcuSampler, RcuSwitchGuard, Spec, Watch, World,
    actual, expected, next_id, rcu_expedited, require_docker, require_privileges, run_for,
    set_rcu_expedited, start_all, wait_until, watch_once_with,
};

/// A fleet of `n` labeled containers in groups of four on a network of a private dockerd.
fn fleet(world: &mut World, n: usize) -> Vec<Spec> {
    let net = world.network("net", &[]);
    let specs: Vec<Spec> = (0..n)
        .map(|i| {
            Spec::grouped(
                format!("{}-c{i:02}", world.prefix),
                format!("{}-g{}", world.prefix, i / 4),
                &net,
            )
        })
        .collect();
    start_all(world, &specs, &net);
    specs
}

/// `watch --once --expedite-rcu` while the switch is sampled; returns (samples on, samples).
fn sampled_once(world: &World, pins: &PinDir) -> (usize, usize, Duration) {
    let sampler = RcuSampler::start();
    let (took, _) = watch_once_with(world, &pins.path, &["--expedite-rcu"]);
    let (on, samples) = sampler.stop();
    (on, samples, took)
}

#[test]
fn the_switch_is_on_only_while_a_pass_attaches() {
    if !require_docker() {
        return;
    }
    let _switch = RcuSwitchGuard::set(0);
    let mut world = World::private();
    let specs = fleet(&mut world, 12);
    let pins = PinDir::new(next_id());
    let dxdp = Dxdp {
        pin_dir: pins.path.clone(),
    };

    // A first reconcile attaches to twelve veths: the switch is on meanwhile, off after.
    let (on, samples, first) = sampled_once(&world, &pins);
    assert!(
        on > 0,
        "the switch was never seen on in {samples} samples over a first reconcile of {first:?}"
    );
    assert_eq!(rcu_expedited(), 0, "the switch was left on");
    assert!(!Path::new(RCU_MARKER).exists(), "{RCU_MARKER} was left");
    assert_eq!(actual(&dxdp.status()), expected(&specs));

    // A pass with nothing to attach leaves the host's switch alone.
    let (on, samples, steady) = sampled_once(&world, &pins);
    assert_eq!(
        on, 0,
        "a pass that attached nothing ({steady:?}) turned the switch on in {on} of {samples} samples"
    );
    drop(pins);

    // A switch the operator turned on stays on, and dxdp leaves no marker of its own.
    set_rcu_expedited(1);
    let pins = PinDir::new(next_id());
    let (_, samples, operators) = sampled_once(&world, &pins);
    assert_eq!(rcu_expedited(), 1, "the operator's setting was not kept");
    assert!(!Path::new(RCU_MARKER).exists(), "{RCU_MARKER} was written");
    let dxdp = Dxdp {
        pin_dir: pins.path.clone(),
    };
    assert_eq!(actual(&dxdp.status()), expected(&specs));
    eprintln!(
        "rcu_expedite: first reconcile of 12 containers with --expedite-rcu {first:?}, steady \
         {steady:?}, with the switch on already {operators:?} ({samples} samples)"
    );
}

#[test]
fn a_switch_left_on_by_a_killed_watch_is_put_back() {
    if !require_privileges() {
        return;
    }
    let _switch = RcuSwitchGuard::set(1);
    // What a watch SIGKILLed with the switch on leaves: its marker, naming a process that is
    // gone (pid, start time, the value it found).
    let mut gone = std::process::Command::new("true").spawn().expect("true");
    let pid = gone.id();
    gone.wait().expect("wait");
    std::fs::create_dir_all("/run/dxdp").expect("/run/dxdp");
    std::fs::write(RCU_MARKER, format!("{pid} 1 0\n")).expect("marker");

    // `dxdp doctor` tells the operator, and how to mend it.
    let pins = PinDir::new(next_id());
    let dxdp = Dxdp {
        pin_dir: pins.path.clone(),
    };
    let doctor = dxdp.run(&["doctor"]);
    assert!(
        doctor.stdout.contains(&format!(
            "[warn] {RCU_EXPEDITED} = 1, left on by dxdp pid {pid} that died"
        )) && doctor
            .stdout
            .contains("start `dxdp watch` (it puts the value back)"),
        "doctor does not report the switch left on: {doctor}"
    );

    // The next watch puts it back as it starts, before it even reaches dockerd (this one has
    // none to reach) and without --expedite-rcu.
    let mut watch = Watch::start_with_env(
        &dxdp,
        &[],
        &[("DOCKER_HOST", "unix:///run/dxdp-test-no-such-daemon.sock")],
    );
    let put_back = wait_until(Duration::from_secs(10), || {
        rcu_expedited() == 0 && !Path::new(RCU_MARKER).exists()
    });
    let log = watch.log_text();
    watch.terminate();
    assert!(
        put_back,
        "switch {}, marker {}: {log}",
        rcu_expedited(),
        Path::new(RCU_MARKER).exists()
    );
    assert!(
        log.contains(&format!("pid={pid}")) && log.contains("put /sys/kernel/rcu_expedited back"),
        "the watch did not say what it put back: {log}"
    );
    let doctor = dxdp.run(&["doctor"]);
    assert!(
        doctor.stdout.contains("[ ok ] RCU grace periods normal"),
        "{doctor}"
    );
}

#[test]
fn a_switch_that_cannot_be_turned_is_refused_at_start() {
    if !require_privileges() {
        return;
    }
    let _switch = RcuSwitchGuard::set(0);
    let pins = PinDir::new(next_id());
    let dir = pins.path.to_string_lossy().into_owned();
    // A mount namespace where /sys/kernel is read-only, as in an unprivileged container.
    let script = format!(
        "mount --bind /sys/kernel /sys/kernel && mount -o remount,bind,ro /sys/kernel && \
         exec {DXDP} --pin-dir {dir} watch --once --expedite-rcu"
    );
    let run = run_for(
        &[
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
        ],
        Duration::from_secs(30),
    );
    assert!(!run.success(), "started without a writable switch: {run}");
    assert!(
        run.stderr.contains(RCU_EXPEDITED)
            && run.stderr.contains("--expedite-rcu")
            && run.stderr.contains("leave --expedite-rcu out"),
        "the error does not name the file and the way out: {run}"
    );
    assert!(!pins.path.exists(), "the refused watch made {dir}");
    assert_eq!(rcu_expedited(), 0);
    assert!(!Path::new(RCU_MARKER).exists());
}
