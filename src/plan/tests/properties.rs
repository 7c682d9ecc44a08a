//! Properties over generated snapshots: the plan does not depend on the order it is given.
use super::*;
use proptest::prelude::*;

#[test]
fn order_independence_reversed() {
    let mut input = vec![
        compose(
            c("a1", &en(&[(GROUP, "web"), (PEERS, "db,ghost")])),
            "a",
            "web",
        ),
        compose(c("a2", &en(&[(GROUP, "web")])), "a", "web"),
        compose(c("adb", &[]), "a", "db"),
        c("x", &en(&[(PEERS, "y"), (DATAPATH, "tc")])),
        c("y", &en(&[(PEERS, "x"), (DATAPATH, "xdp")])),
        on(
            c("z", &en(&[(PEERS, "x")])),
            vec![bridge("n1"), bridge("n0")],
        ),
    ];
    let forward = links_from_labels(&input);
    input.reverse();
    assert_eq!(links_from_labels(&input), forward);
    assert_eq!(pairs(&forward), ["a1-a2", "a1-adb", "x-z"]);
}

fn arb_container(i: usize) -> impl Strategy<Value = ContainerView> {
    let names: Vec<String> = (0..8).map(|k| format!("c{k}")).collect();
    let pools = [
        bridge("n1"),
        bridge("n2"),
        net("n3", "bridge", false),
        net("n4", "macvlan", true),
    ];
    (
        prop::option::of(prop::sample::select(vec!["true", "false", "nope"])),
        prop::sample::subsequence(names, 0..3),
        prop::sample::subsequence(vec!["g", "h"], 0..=2),
        prop::sample::select(vec![None, Some("tc"), Some("xdp"), Some("auto")]),
        prop::option::weighted(0.2, prop::sample::select(vec!["n1", "n2"])),
        prop::option::of((
            prop::sample::select(vec!["p", "q"]),
            prop::sample::select(vec!["s", "t"]),
        )),
        prop::sample::subsequence(pools.to_vec(), 0..=4),
        prop::bool::weighted(0.85),
    )
        .prop_map(
            move |(enable, peers, groups, dp, network, proj, nets, running)| {
                let mut l: Vec<(&str, String)> = Vec::new();
                if let Some(e) = enable {
                    l.push((ENABLE, e.to_owned()));
                }
                if !peers.is_empty() {
                    l.push((PEERS, peers.join(",")));
                }
                if !groups.is_empty() {
                    l.push((GROUP, groups.join(",")));
                }
                if let Some(d) = dp {
                    l.push((DATAPATH, d.to_owned()));
                }
                if let Some(n) = network {
                    l.push((NETWORK, n.to_owned()));
                }
                let pairs: Vec<(&str, &str)> = l.iter().map(|(k, v)| (*k, v.as_str())).collect();
                let mut view = on(c(&format!("c{i}"), &pairs), nets);
                view.running = running;
                if let Some((p, s)) = proj {
                    view = compose(view, p, s);
                }
                view
            },
        )
}

fn arb_snapshot() -> impl Strategy<Value = Vec<ContainerView>> {
    (1usize..=8).prop_flat_map(|n| (0..n).map(arb_container).collect::<Vec<_>>())
}

proptest! {
    #[test]
    fn order_independence_shuffled(
        (input, shuffled) in arb_snapshot()
            .prop_flat_map(|v| (Just(v.clone()), Just(v).prop_shuffle()))
    ) {
        let expected = links_from_labels(&input);
        prop_assert_eq!(links_from_labels(&shuffled), expected.clone());
        for l in &expected.links {
            prop_assert!(l.a < l.b);
        }
    }
}
