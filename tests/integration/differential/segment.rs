//! Where the link topology's containers meet: the network's [`Segment`] (a bridge network of the
//! host's, or a Swarm overlay network) and the namespace holding its bridge, a [`Crossing`] (the
//! host's, or the overlay's sandbox), where Docker's path is observed and filtered.

use std::{collections::BTreeMap, net::IpAddr, path::PathBuf};

use super::case::{Family, WIRE_MTU};
use crate::support::{FirewallRule, Swarm, World, must, netns_of, run, sandbox_netns, sandbox_of};

/// The network the three containers share, and so the bridge Docker's path crosses.
pub trait Segment: Sized {
    /// The test that runs the topology on this segment: its name goes into the rerun line.
    const TEST: &'static str;
    /// The network's MTU, B's and C's: what a full-size case fills.
    const MTU: u16;
    /// The chain where a case's rule filters Docker's path, in the bridge's namespace.
    const CHAIN: &'static str;

    /// What the network needs before it is made (a swarm, for an overlay); made before the
    /// test's world and dropped after it.
    fn prepare() -> Self;
    /// Makes the network in `world`: its name, and the namespace file of the one holding its
    /// bridge (`None`: the host's).
    fn network(&self, world: &mut World) -> (String, Option<PathBuf>);
}

/// A dual-stack user-defined bridge network of the host's; its rules are the host's
/// DOCKER-USER chain.
pub struct Bridge;

impl Segment for Bridge {
    const TEST: &'static str = "differential::links_match_the_bridge";
    const MTU: u16 = WIRE_MTU;
    const CHAIN: &'static str = "DOCKER-USER";

    fn prepare() -> Self {
        Self
    }

    fn network(&self, world: &mut World) -> (String, Option<PathBuf>) {
        (world.network_v6("links", true, &[]), None)
    }
}

/// A dual-stack attachable overlay network (an IPv4 subnet of the test's, an IPv6 one of the
/// swarm's choosing) on a one-node swarm the test makes (and leaves):
/// the containers' veths end on `br0` in the network's sandbox namespace, whose FORWARD chain
/// filters bridged frames (br_netfilter), and whose VXLAN device sets the network's MTU.
pub struct Overlay {
    _swarm: Swarm,
}

/// An overlay network's MTU: the VXLAN device's, 50 bytes of encapsulation below 1500.
pub const OVERLAY_MTU: u16 = 1450;

impl Segment for Overlay {
    const TEST: &'static str = "differential::overlay_links_match_the_overlay_bridge";
    const MTU: u16 = OVERLAY_MTU;
    const CHAIN: &'static str = "FORWARD";

    fn prepare() -> Self {
        Self {
            _swarm: Swarm::init(),
        }
    }

    fn network(&self, world: &mut World) -> (String, Option<PathBuf>) {
        // IPv6 from the swarm's own pool: an IPv6 subnet of the test's makes Docker 28's swarm
        // allocator fail ("cannot find address pool for poolID:…/invalid Prefix"), and no
        // container can attach.
        let net = world.network(
            "overlay",
            &["--ipv6", "--driver", "overlay", "--attachable"],
        );
        let sandbox = sandbox_netns(&sandbox_of(&net));
        (net, Some(sandbox))
    }
}

/// The namespace that holds the network's bridge: the host's, or an overlay's sandbox.
pub struct Crossing {
    /// Its namespace file.
    pub netns: PathBuf,
    /// `nsenter --net=NETNS` for a sandbox's; nothing for the host's.
    within: Vec<String>,
}

/// An interface of the bridge's namespace.
pub struct Interface {
    pub name: String,
    pub mac: String,
    /// The bridge it is a port of.
    pub master: Option<String>,
}

impl Crossing {
    pub fn new(netns: Option<PathBuf>) -> Self {
        match netns {
            None => Self {
                netns: netns_of(std::process::id()),
                within: Vec::new(),
            },
            Some(netns) => Self {
                within: vec!["nsenter".to_owned(), format!("--net={}", netns.display())],
                netns,
            },
        }
    }

    /// `argv` to run in the namespace.
    pub fn argv(&self, argv: &[&str]) -> Vec<String> {
        let mut full = self.within.clone();
        full.extend(argv.iter().map(|a| (*a).to_owned()));
        full
    }

    /// `ip -j ARGS…` in the namespace, parsed.
    #[track_caller]
    fn ip_json(&self, args: &[&str]) -> Vec<serde_json::Value> {
        let mut argv = vec!["ip", "-j"];
        argv.extend_from_slice(args);
        let out = must(&self.argv(&argv));
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("ip -j {args:?}: {e}: {out}"))
    }

    /// The namespace's interfaces by ifindex.
    #[track_caller]
    pub fn interfaces(&self) -> BTreeMap<u64, Interface> {
        self.ip_json(&["link", "show"])
            .iter()
            .filter_map(|link| {
                let text = |key: &str| link[key].as_str().map(str::to_owned);
                Some((
                    link["ifindex"].as_u64()?,
                    Interface {
                        name: text("ifname")?,
                        mac: text("address").unwrap_or_default(),
                        master: text("master"),
                    },
                ))
            })
            .collect()
    }

    /// The global addresses of `dev`, both families.
    #[track_caller]
    pub fn addresses(&self, dev: &str) -> Vec<IpAddr> {
        self.ip_json(&["addr", "show", "dev", dev, "scope", "global"])
            .iter()
            .flat_map(|link| link["addr_info"].as_array().cloned().unwrap_or_default())
            .filter_map(|info| info["local"].as_str()?.parse().ok())
            .collect()
    }

    /// A DROP of `spec` at the head of `chain` of `tool`, in the namespace.
    #[track_caller]
    pub fn rule(&self, tool: &'static str, chain: &str, spec: &[&str]) -> FirewallRule {
        if self.within.is_empty() {
            FirewallRule::insert(tool, chain, spec)
        } else {
            FirewallRule::insert_in(&self.netns, tool, chain, spec)
        }
    }

    /// Whether br_netfilter hands the namespace's bridged frames of `family` to its
    /// iptables/ip6tables (`net.bridge.bridge-nf-call-ip(6)tables`, per namespace).
    pub fn filters(&self, family: Family) -> bool {
        let switch = match family {
            Family::V4 => "/proc/sys/net/bridge/bridge-nf-call-iptables",
            Family::V6 => "/proc/sys/net/bridge/bridge-nf-call-ip6tables",
        };
        run(&self.argv(&["cat", switch])).stdout.trim() == "1"
    }
}
