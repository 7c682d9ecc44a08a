//! The addresses a case's [`Source`] kind stands for on a topology with an [`Outside`] NIC, and
//! what keeps every answer to them inside the test: a veth of the test's whose far end sits
//! alone in a namespace ("not behind the NIC"), routes of their own for the link-local,
//! multicast and martian sources, and neighbours nobody answers for. The exposed-port and the
//! outbound topologies both send from these.

use std::net::IpAddr;

use super::case::{Family, Source};
use crate::support::{LinkGuard, NetnsGuard, Outside, iface_name, must, run};

/// A MAC nobody has: the neighbour of the addresses that answer nobody.
const NOBODY: &str = "02:00:5e:10:ee:02";

pub struct Sources {
    /// The outside fixture's number, which the addresses carry.
    k: u32,
    /// The NIC's addresses (IPv4, IPv6).
    host: (IpAddr, IpAddr),
    /// The outside namespace's own IPv4 address (the IPv4-mapped martian maps it).
    outside: String,
    /// Another container's addresses on the container network.
    other: (IpAddr, IpAddr),
    /// Where the addresses "not behind the NIC" lead; the routes and neighbours go with it.
    _sink: Sink,
}

/// A veth of the test's whose far end sits up and alone in a namespace of its own, with no
/// address: what is routed there answers nobody.
pub struct Sink {
    /// The host's end.
    pub iface: String,
    // Dropped before the namespace, which takes the pair's other end with it.
    _iface: LinkGuard,
    _ns: NetnsGuard,
}

impl Sink {
    /// A sink in a namespace named `ns`.
    pub fn new(ns: &str) -> Self {
        let ns = NetnsGuard::create(ns);
        let iface = iface_name();
        let far_end = iface_name();
        must(&[
            "ip", "link", "add", &iface, "type", "veth", "peer", "name", &far_end, "netns",
            &ns.name,
        ]);
        let guard = LinkGuard::adopt(&iface);
        must(&["ip", "-n", &ns.name, "link", "set", &far_end, "up"]);
        must(&["ip", "link", "set", &iface, "up"]);
        Self {
            iface,
            _iface: guard,
            _ns: ns,
        }
    }
}

impl Sources {
    /// Routes the sources that are not the client's through `out`'s NIC or a veth of their
    /// own; `other` is another container's pair of addresses.
    pub fn new(prefix: &str, out: &Outside, other: (IpAddr, IpAddr)) -> Self {
        let k = out.k;
        // Addresses "not behind the NIC" live behind another veth of the test's, whose far end
        // sits alone in a namespace with no address: what goes there answers nobody. The
        // link-local and multicast sources and the class E "martian" get routes of their own,
        // through the NIC or that veth, so that no answer on either path follows the host's
        // default route out of the machine. All of them go with the interfaces.
        let sink = Sink::new(&format!("{prefix}-sink{k}"));
        let elsewhere = sink.iface.clone();
        must(&[
            "ip",
            "addr",
            "add",
            &format!("10.240.{k}.1/24"),
            "dev",
            &elsewhere,
        ]);
        must(&[
            "ip",
            "-6",
            "addr",
            "add",
            &format!("fd00:240:{k:x}::1/64"),
            "dev",
            &elsewhere,
            "nodad",
        ]);
        for (route, dev) in [
            (format!("169.254.236.{k}/32"), &out.nic),
            (format!("239.255.236.{k}/32"), &out.nic),
            (format!("240.236.{k}.9/32"), &elsewhere),
            (format!("0.236.{k}.9/32"), &elsewhere),
            (format!("::ffff:{}/128", out.client_addr), &elsewhere),
        ] {
            must(&["ip", "route", "add", &route, "dev", dev]);
        }
        // The one route not of this fixture's own: `replace`, should another run hold it.
        must(&["ip", "-6", "route", "replace", "::/128", "dev", &elsewhere]);
        // Neighbours nobody answers for would, 3 s later, draw "address unreachable" errors
        // into the container, in some later case's window: these are known, to a MAC nobody
        // has, so that what goes to them is dropped at once and silently.
        for (addr, dev) in [
            (format!("10.240.{k}.9"), &elsewhere),
            (format!("fd00:240:{k:x}::9"), &elsewhere),
            (format!("240.236.{k}.9"), &elsewhere),
            (format!("0.236.{k}.9"), &elsewhere),
            ("::".to_owned(), &elsewhere),
            (format!("::ffff:{}", out.client_addr), &elsewhere),
            (format!("169.254.236.{k}"), &out.nic),
        ] {
            must(&[
                "ip",
                "neigh",
                "replace",
                &addr,
                "lladdr",
                NOBODY,
                "dev",
                dev,
                "nud",
                "permanent",
            ]);
        }
        let parse = |text: &str| -> IpAddr { text.parse().expect("the NIC's address") };
        Self {
            k,
            host: (parse(&out.host_addr), parse(&out.host_addr6)),
            outside: out.client_addr.clone(),
            other,
            _sink: sink,
        }
    }

    /// The address `source` stands for in `client`'s family, `client` being the address the
    /// case's own traffic comes from.
    pub fn address(&self, source: Source, client: IpAddr) -> IpAddr {
        let k = self.k;
        let v4 = client.is_ipv4();
        let pick = |pair: (IpAddr, IpAddr)| if v4 { pair.0 } else { pair.1 };
        let text = match (source, v4) {
            (Source::Client, _) => return client,
            (Source::HostNic, _) => return pick(self.host),
            (Source::OtherContainer, _) => return pick(self.other),
            (Source::Martian(n), true) => [
                "127.0.0.9".to_owned(),
                format!("0.236.{k}.9"),
                format!("240.236.{k}.9"),
            ][n as usize % 3]
                .clone(),
            (Source::Martian(n), false) => [
                "::1".to_owned(),
                "::".to_owned(),
                format!("::ffff:{}", self.outside),
            ][n as usize % 3]
                .clone(),
            (Source::LinkLocal, true) => format!("169.254.236.{k}"),
            (Source::LinkLocal, false) => format!("fe80::236:{k:x}"),
            (Source::Multicast, true) => format!("239.255.236.{k}"),
            (Source::Multicast, false) => format!("ff0e::236:{k:x}"),
            (Source::Broadcast(n), true) => {
                ["255.255.255.255".to_owned(), format!("10.236.{k}.255")][n as usize % 2].clone()
            }
            (Source::Broadcast(_), false) => "ff02::1".to_owned(),
            (Source::NotViaNic, true) => format!("10.240.{k}.9"),
            (Source::NotViaNic, false) => format!("fd00:240:{k:x}::9"),
        };
        text.parse().expect("a source address")
    }

    /// No source a case uses may route out of the host's own interfaces: every answer must
    /// stay within what the test made. `clients` are the case's own addresses (IPv4, IPv6).
    pub fn assert_stay_here(&self, clients: (IpAddr, IpAddr)) {
        let mut default_devs = Vec::new();
        for family in ["-4", "-6"] {
            let routes = must(&["ip", family, "route", "show", "default"]);
            default_devs.extend(
                routes
                    .split_whitespace()
                    .skip_while(|w| *w != "dev")
                    .nth(1)
                    .map(str::to_owned),
            );
        }
        let kinds = [
            Source::Client,
            Source::Martian(0),
            Source::Martian(1),
            Source::Martian(2),
            Source::HostNic,
            Source::OtherContainer,
            Source::LinkLocal,
            Source::Multicast,
            Source::Broadcast(0),
            Source::Broadcast(1),
            Source::NotViaNic,
        ];
        for family in [Family::V4, Family::V6] {
            let client = match family {
                Family::V4 => clients.0,
                Family::V6 => clients.1,
            };
            for kind in kinds {
                let addr = self.address(kind, client).to_string();
                let route = run(&["ip", "route", "get", &addr]);
                // Multicast, broadcast and IPv6 link-local destinations are never forwarded:
                // an answer to them stays on the container's own link.
                let link_only = route.stdout.starts_with("multicast ")
                    || route.stdout.starts_with("broadcast ")
                    || addr.starts_with("fe80:");
                for dev in default_devs.iter().filter(|_| !link_only) {
                    assert!(
                        !(route.success() && route.stdout.contains(&format!("dev {dev} "))),
                        "source {addr} ({kind:?}) would be answered through {dev}: {route}"
                    );
                }
            }
        }
    }
}
