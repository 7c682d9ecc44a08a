//! Promise 5: a container started while the watch starts is linked at once, without a resync.

use super::*;

#[test]
fn a_container_started_while_the_watch_starts_is_linked_without_waiting_for_a_resync() {
    if !require_docker() {
        return;
    }
    let rounds = if soak() { 12 } else { 4 };
    let mut rng = Rng::seeded("start-up race");
    let mut world = World::private();
    let net = world.network("net", &[]);
    let group = format!("{}-g", world.prefix);
    let args = member(&net, &group, &[]);
    let anchor = world.run("anchor", &strs(&args), &[]);
    let mut delays = Vec::new();
    for round in 0..rounds {
        let name = format!("{}-b{round}", world.prefix);
        let mut argv: Vec<String> = ["run", "-d", "--name", &name].map(str::to_owned).to_vec();
        argv.extend(args.iter().cloned());
        argv.push(support::IMAGE.to_owned());
        world.track(&name);
        // Even rounds: the watch first, then at once `docker run`. Odd rounds: `docker run`
        // first, the watch a few milliseconds later, while the container is being created.
        let (watch, returned) = if round % 2 == 0 {
            let watch = world.watch(&["--resync", "300"]);
            world.docker_ok(&strs(&argv));
            (watch, Instant::now())
        } else {
            let cli = world.cli.clone();
            let argv2 = argv.clone();
            let run = thread::spawn(move || {
                let r = cli.run(&strs(&argv2));
                (r, Instant::now())
            });
            thread::sleep(Duration::from_millis(rng.below(40)));
            let watch = world.watch(&["--resync", "300"]);
            let (r, at) = run.join().expect("docker run");
            r.assert_success();
            (watch, at)
        };
        let expected = mesh(&[anchor.clone(), name.clone()]);
        let linked = wait_until(Duration::from_secs(5), || {
            named_links(&world.dxdp.status()) == expected
        });
        let delay = returned.elapsed();
        assert!(
            linked,
            "round {round}: {name} not linked within 5 s of `docker run`\n{}",
            watch.log_text()
        );
        delays.push(delay);
        drop(watch);
        world.remove(&[name]);
    }
    eprintln!(
        "start-up race: {rounds} containers started with the watch, linked after {:?}",
        delays
    );
}
