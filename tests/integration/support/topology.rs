//! The netns fixture: a bridge and "containers" (network namespaces with one veth each on it),
//! with a dxdp pin directory of their own. IP addresses need no care for uniqueness: every
//! namespace has a network stack of its own, and the host side of the bridge has no address.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::Duration,
};

use super::{
    dxdp::{BPFFS, Dxdp},
    guards::{FirewallRule, LinkGuard, NetnsGuard, PinDir},
    host::{ethtool_features, host_iface_exists, host_ifindex},
    names::{iface_name, next_id},
    process::{must, wait_until},
};

/// A "container": a network namespace whose `eth0` is a veth whose host side is on the bridge.
#[derive(Clone, Debug)]
pub struct Node {
    pub netns: String,
    /// The container-side interface.
    pub ifname: String,
    /// The host-side veth, on the bridge.
    pub host_veth: String,
    pub mac: String,
    pub ipv4: String,
    pub ipv6: String,
}

impl Node {
    /// How dxdp names this endpoint on its command line: `netns:NAME`.
    pub fn spec(&self) -> String {
        format!("netns:{}", self.netns)
    }

    pub fn host_ifindex(&self) -> u32 {
        host_ifindex(&self.host_veth)
    }

    /// `ethtool -k eth0` inside the container.
    pub fn features(&self) -> BTreeMap<String, String> {
        ethtool_features(&self.netns, &self.ifname)
    }
}

/// A bridge, iptables rules that let it forward, containers on it and a dxdp pin directory, all
/// of this test's own. Dropping it removes everything in the order that works: the pin directory
/// (with `dxdp cleanup`, while the containers it may restore still exist), veths, namespaces,
/// firewall rules, the bridge.
pub struct Topology {
    pub id: String,
    pub bridge: String,
    pub nodes: Vec<Node>,
    pub dxdp: Dxdp,
    // Guards, dropped in this order.
    _pin_dir: PinDir,
    veths: Vec<LinkGuard>,
    namespaces: Vec<NetnsGuard>,
    _rules: Vec<FirewallRule>,
    _bridge: LinkGuard,
    n: u32,
}

impl Topology {
    /// A bridge with `count` containers (named `dxt-<pid>-<n>-<i>`, addressed 10.213.<n>.<i+1>/24
    /// and fd00:dd:<n>::<i+1>/64, MAC 02:dd:<n>:<pid>:00:<i+1>), able to reach each other through
    /// the bridge. Panics, having removed what it made, if any step fails.
    #[track_caller]
    pub fn new(count: usize) -> Self {
        assert!(count < 250);
        let n = next_id();
        let id = format!("dxt-{}-{n}", std::process::id());
        let pin_dir = PinDir::new(n);
        let bridge_name = iface_name();
        let bridge = LinkGuard::bridge(&bridge_name);
        let rules = vec![
            FirewallRule::accept_bridged("iptables", &bridge_name),
            FirewallRule::accept_bridged("ip6tables", &bridge_name),
        ];
        let mut topo = Self {
            id: id.clone(),
            bridge: bridge_name,
            nodes: Vec::new(),
            dxdp: Dxdp {
                pin_dir: pin_dir.path.clone(),
            },
            _pin_dir: pin_dir,
            veths: Vec::new(),
            namespaces: Vec::new(),
            _rules: rules,
            _bridge: bridge,
            n,
        };
        for i in 0..count {
            let netns = format!("{id}-{i}");
            topo.namespaces.push(NetnsGuard::create(&netns));
            let node = Node {
                netns,
                ifname: "eth0".to_owned(),
                host_veth: String::new(),
                mac: format!(
                    "02:dd:{:02x}:{:02x}:00:{:02x}",
                    n % 256,
                    std::process::id() % 256,
                    i + 1
                ),
                ipv4: format!("10.213.{}.{}", n % 256, i + 1),
                ipv6: format!("fd00:dd:{n:x}::{}", i + 1),
            };
            topo.nodes.push(node);
            topo.plug(i);
        }
        topo
    }

    /// Makes node `i`'s veth pair, with the node's MAC and addresses, and plugs it into the bridge.
    #[track_caller]
    fn plug(&mut self, i: usize) {
        let host = iface_name();
        let node = &self.nodes[i];
        let (ns, ifname) = (node.netns.clone(), node.ifname.clone());
        must(&[
            "ip", "link", "add", &host, "type", "veth", "peer", "name", &ifname, "netns", &ns,
        ]);
        self.veths.push(LinkGuard::adopt(&host));
        must(&["ip", "link", "set", &host, "master", &self.bridge, "up"]);
        let ip_ns = |args: &[&str]| {
            let mut argv = vec!["ip", "-n", &ns];
            argv.extend_from_slice(args);
            must(&argv);
        };
        ip_ns(&["link", "set", &ifname, "address", &node.mac]);
        ip_ns(&["addr", "add", &format!("{}/24", node.ipv4), "dev", &ifname]);
        // nodad: the address is usable at once instead of after duplicate address detection.
        let v6 = format!("{}/64", node.ipv6);
        ip_ns(&["addr", "add", &v6, "dev", &ifname, "nodad"]);
        ip_ns(&["link", "set", &ifname, "up"]);
        self.nodes[i].host_veth = host;
    }

    /// Deletes node `i`'s veth pair (as when a container's interface is torn down) and makes a
    /// new one with the same MAC and addresses, hence a new host ifindex. Returns the new node.
    #[track_caller]
    pub fn recreate_veth(&mut self, i: usize) -> Node {
        let old = self.nodes[i].host_veth.clone();
        must(&["ip", "link", "del", &old]);
        assert!(
            wait_until(Duration::from_secs(5), || !host_iface_exists(&old)),
            "{old} is still there after ip link del"
        );
        self.plug(i);
        self.nodes[i].clone()
    }

    pub fn node(&self, i: usize) -> &Node {
        &self.nodes[i]
    }

    /// Path of this topology's pin directory.
    pub fn pin_dir(&self) -> &Path {
        &self.dxdp.pin_dir
    }

    /// A path on bpffs next to (not inside) the pin directory, unique to this topology.
    pub fn scratch_pin_path(&self, what: &str) -> PathBuf {
        Path::new(BPFFS).join(format!(
            "dxdp-test-{}-{}-{what}",
            std::process::id(),
            self.n
        ))
    }
}
