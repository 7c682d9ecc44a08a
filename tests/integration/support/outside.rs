//! The outside world of published ports: a client namespace behind a veth "NIC" whose host end
//! holds the address Docker publishes on; every packet of a test stays between the two. Used by
//! the ingress tests and the differential harness.

use std::time::Duration;

use super::{
    guards::{LinkGuard, NetnsGuard},
    names::{iface_name, next_id},
    process::{Run, in_ns, must, run_for},
    traffic::FORGE,
    world::World,
};

/// A client namespace behind a veth "NIC": `host_addr` on the host end, `client_addr` in the
/// namespace, routed to each other. 10.236.<k>.0/24 (and fd00:236:<k>::/64) is this fixture's:
/// the ingress and differential tests use it.
pub struct Outside {
    pub nic: String,
    /// The pair's far end, in `ns`.
    pub peer: String,
    pub host_addr: String,
    pub client_addr: String,
    /// fd00:236:<k>::1 and ::2, the same pair's IPv6 addresses.
    pub host_addr6: String,
    pub client_addr6: String,
    /// The fixture's number: 10.236.<k>.0/24; other addresses a test routes through its NIC
    /// may use it too.
    pub k: u32,
    // Dropped before the namespace, which takes the pair's other end with it.
    _link: LinkGuard,
    pub ns: NetnsGuard,
}

impl Outside {
    pub fn new(world: &World) -> Self {
        let k = free_k();
        let ns = NetnsGuard::create(&format!("{}-out{k}", world.prefix));
        let nic = iface_name();
        let peer = iface_name();
        must(&[
            "ip", "link", "add", &nic, "type", "veth", "peer", "name", &peer, "netns", &ns.name,
        ]);
        let link = LinkGuard::adopt(&nic);
        let host_addr = format!("10.236.{k}.1");
        let client_addr = format!("10.236.{k}.2");
        must(&["ip", "addr", "add", &format!("{host_addr}/24"), "dev", &nic]);
        must(&["ip", "link", "set", &nic, "up"]);
        let ip_ns = |args: &[&str]| {
            let mut argv = vec!["ip", "-n", &ns.name];
            argv.extend_from_slice(args);
            must(&argv);
        };
        ip_ns(&["addr", "add", &format!("{client_addr}/24"), "dev", &peer]);
        let host_addr6 = format!("fd00:236:{k:x}::1");
        let client_addr6 = format!("fd00:236:{k:x}::2");
        let client6 = format!("{client_addr6}/64");
        must(&[
            "ip",
            "-6",
            "addr",
            "add",
            &format!("{host_addr6}/64"),
            "dev",
            &nic,
            "nodad",
        ]);
        ip_ns(&["-6", "addr", "add", &client6, "dev", &peer, "nodad"]);
        ip_ns(&["link", "set", &peer, "up"]);
        Self {
            nic,
            peer,
            host_addr,
            client_addr,
            host_addr6,
            client_addr6,
            k,
            ns,
            _link: link,
        }
    }

    /// The MTU of the pair's far end, the most the client's link takes.
    pub fn set_peer_mtu(&self, mtu: u32) {
        let mtu = mtu.to_string();
        must(&[
            "ip",
            "-n",
            &self.ns.name,
            "link",
            "set",
            &self.peer,
            "mtu",
            &mtu,
        ]);
    }

    /// `argv` in the client namespace, bounded in time.
    pub fn run(&self, argv: &[&str], timeout: Duration) -> Run {
        run_for(&in_ns(&self.ns.name, argv), timeout)
    }

    /// `forge.py MODE` from the client namespace: `count` forged connections from `from` to
    /// `to`:`port`, put straight onto the far end of the NIC, addressed to the NIC's MAC.
    pub fn forge(&self, mode: &str, from: &str, to: &str, port: u16, count: usize) {
        let nic_mac = std::fs::read_to_string(format!("/sys/class/net/{}/address", self.nic))
            .expect("the NIC's MAC");
        // Any source MAC: the forger's own.
        let forger_mac = "02:00:5e:10:00:01";
        let (port, count) = (port.to_string(), count.to_string());
        let argv = [
            "python3",
            FORGE,
            mode,
            &self.peer,
            nic_mac.trim(),
            forger_mac,
            from,
            to,
            &port,
            &count,
        ];
        self.run(&argv, Duration::from_secs(20)).assert_success();
    }

    /// `forge.py too-big` from the client namespace: an ICMP "fragmentation needed" (IPv4) or
    /// "packet too big" (IPv6) of `mtu` from `from` to `published`'s address, about a reply from
    /// `published` to `client`, as a router on the way would send it.
    pub fn forge_too_big(&self, from: &str, published: (&str, u16), client: (&str, u16), mtu: u16) {
        let nic_mac = std::fs::read_to_string(format!("/sys/class/net/{}/address", self.nic))
            .expect("the NIC's MAC");
        let (sport, dport, mtu) = (
            published.1.to_string(),
            client.1.to_string(),
            mtu.to_string(),
        );
        let argv = [
            "python3",
            FORGE,
            "too-big",
            &self.peer,
            nic_mac.trim(),
            "02:00:5e:10:00:01",
            from,
            published.0,
            &sport,
            client.0,
            &dport,
            &mtu,
        ];
        self.run(&argv, Duration::from_secs(10)).assert_success();
    }
}

/// A number for 10.236.<k>.0/24 that no interface on the host holds now. Spread by the test
/// process's pid, as `World`'s subnets are: test processes of other worktrees run beside this
/// one and make the same fixture.
fn free_k() -> u32 {
    let start = std::process::id() * 7 + next_id() * 13;
    (0..250)
        .map(|i| (start + i) % 250 + 1)
        .find(|k| {
            must(&[
                "ip",
                "-o",
                "addr",
                "show",
                "to",
                &format!("10.236.{k}.0/24"),
            ])
            .trim()
            .is_empty()
        })
        .expect("a free 10.236.<k>.0/24")
}

/// `argv` in a container's network namespace (the host's tools; the image has none).
pub fn in_container(pid: u32, argv: &[&str]) -> Vec<String> {
    let target = pid.to_string();
    ["nsenter", "-t", &target, "-n"]
        .iter()
        .map(|s| (*s).to_owned())
        .chain(argv.iter().map(|s| (*s).to_owned()))
        .collect()
}
