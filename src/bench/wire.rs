//! `bench-ingress --wire` and `bench-egress --wire`: a veth pair from the outside namespace
//! straight into the container's, the reference no path through the host can beat. Docker's
//! path and the fast path both cross the NIC and then the container's veth; the wire crosses one
//! veth and nothing else, so its figures are what this machine gives a client and a server with
//! no host in between (the applications, both TCP stacks, the container's own netfilter, and
//! the vCPUs' wake-ups).
use std::{
    net::Ipv4Addr,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use super::measure::{in_netns, run_bounded};

/// The wire's IPv4 subnet: the server's end takes its first host address, the client's the
/// second.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct WireSubnet {
    pub network: Ipv4Addr,
    pub prefix_len: u8,
}

impl WireSubnet {
    /// `A.B.C.D/LEN`, an IPv4 network with room for two hosts (LEN at most 30) and no host bits
    /// set.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (addr, len) = text
            .split_once('/')
            .ok_or_else(|| format!("{text:?}: give an IPv4 subnet as A.B.C.D/LEN"))?;
        let network: Ipv4Addr = addr
            .parse()
            .map_err(|_| format!("{text:?}: {addr:?} is not an IPv4 address"))?;
        let prefix_len: u8 =
            len.parse().ok().filter(|l| *l <= 30).ok_or_else(|| {
                format!("{text:?}: the length must be 0 to 30 (two host addresses)")
            })?;
        let host_bits = host_bits(prefix_len);
        if u32::from(network) & host_bits != 0 {
            return Err(format!(
                "{text:?}: host bits are set; the network is {}/{prefix_len}",
                Ipv4Addr::from(u32::from(network) & !host_bits)
            ));
        }
        Ok(Self {
            network,
            prefix_len,
        })
    }

    pub fn server_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.network) + 1)
    }

    pub fn client_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.network) + 2)
    }

    fn contains(&self, addr: Ipv4Addr) -> bool {
        u32::from(addr) & !host_bits(self.prefix_len) == u32::from(self.network)
    }
}

/// The bits of an IPv4 address under a `prefix_len` netmask that name the host.
fn host_bits(prefix_len: u8) -> u32 {
    u32::MAX.checked_shr(u32::from(prefix_len)).unwrap_or(0)
}

impl std::fmt::Display for WireSubnet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix_len)
    }
}

/// What the bench calls the namespaces at the wire's two ends, for its messages: the
/// client's, then the server's ("client", "container" for `bench-ingress`).
pub type EndNames = [&'static str; 2];

/// The veth pair while the bench runs; deleted when dropped (one end takes the other with it),
/// also after an error or Ctrl-C.
pub struct Wire {
    client_ns: PathBuf,
    pub subnet: WireSubnet,
}

/// Both ends' name, each in its own namespace.
const END: &str = "dxbench-wire";
const IP_LIMIT: Duration = Duration::from_secs(10);

impl Wire {
    /// Lays the pair between the two namespaces, after checking that neither has an address in
    /// `subnet` or an interface of the wire's name (another run's, or the operator's).
    pub fn lay(
        client_ns: &Path,
        server_ns: &Path,
        names: EndNames,
        subnet: WireSubnet,
    ) -> Result<Self> {
        for (ns, whose) in [(client_ns, names[0]), (server_ns, names[1])] {
            let links = ipv4_addrs(ns)?;
            for (ifname, addrs) in &links {
                if let Some(addr) = addrs.iter().find(|a| subnet.contains(**a)) {
                    bail!(
                        "--wire {subnet}: the {whose} namespace already has {addr} on {ifname}; \
                         give a subnet neither namespace uses"
                    );
                }
                if ifname == END {
                    bail!(
                        "the {whose} namespace already has an interface {END} (another bench's \
                         wire, or a leftover: ip -n NS link del {END})"
                    );
                }
            }
        }
        let server = server_ns.display().to_string();
        ip(
            client_ns,
            &[
                "link", "add", END, "type", "veth", "peer", "name", END, "netns", &server,
            ],
        )?;
        // From here on, dropping the wire deletes the pair.
        let wire = Self {
            client_ns: client_ns.to_owned(),
            subnet,
        };
        let len = subnet.prefix_len;
        for (ns, ifname, addr) in [
            (server_ns, END, subnet.server_addr()),
            (client_ns, END, subnet.client_addr()),
        ] {
            ip(
                ns,
                &["addr", "add", &format!("{addr}/{len}"), "dev", ifname],
            )?;
            ip(ns, &["link", "set", ifname, "up"])?;
        }
        Ok(wire)
    }
}

impl Drop for Wire {
    fn drop(&mut self) {
        if let Err(e) = ip(&self.client_ns, &["link", "del", END]) {
            eprintln!("warning: could not delete the bench's wire: {e:#}");
        }
    }
}

/// `ip ARGS` in `ns`, failing with its stderr.
fn ip(ns: &Path, args: &[&str]) -> Result<()> {
    let mut cmd = in_netns(ns, "ip");
    cmd.args(args);
    let out = run_bounded(cmd, IP_LIMIT, "ip")?;
    if !out.status.success() {
        bail!(
            "ip {} in {}: {}",
            args.join(" "),
            ns.display(),
            out.stderr.trim()
        );
    }
    Ok(())
}

/// Every interface of `ns` with its IPv4 addresses.
pub(crate) fn ipv4_addrs(ns: &Path) -> Result<Vec<(String, Vec<Ipv4Addr>)>> {
    let mut cmd = in_netns(ns, "ip");
    cmd.args(["-j", "addr", "show"]);
    let out = run_bounded(cmd, IP_LIMIT, "ip addr")?;
    if !out.status.success() {
        bail!("ip addr show in {}: {}", ns.display(), out.stderr.trim());
    }
    parse_ipv4_addrs(&out.stdout).with_context(|| format!("`ip -j addr` in {}", ns.display()))
}

fn parse_ipv4_addrs(json: &str) -> Result<Vec<(String, Vec<Ipv4Addr>)>> {
    let links: Vec<serde_json::Value> = serde_json::from_str(json)?;
    Ok(links
        .iter()
        .filter_map(|link| {
            let ifname = link.get("ifname")?.as_str()?.to_owned();
            let addrs = link
                .get("addr_info")
                .and_then(|a| a.as_array())
                .into_iter()
                .flatten()
                .filter(|a| a.get("family").and_then(|f| f.as_str()) == Some("inet"))
                .filter_map(|a| a.get("local")?.as_str()?.parse().ok())
                .collect();
            Some((ifname, addrs))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subnet_gives_the_server_its_first_host_and_the_client_its_second() {
        let s = WireSubnet::parse("10.237.2.0/30").unwrap();
        assert_eq!(s.server_addr(), Ipv4Addr::new(10, 237, 2, 1));
        assert_eq!(s.client_addr(), Ipv4Addr::new(10, 237, 2, 2));
        assert!(s.contains(Ipv4Addr::new(10, 237, 2, 3)));
        assert!(!s.contains(Ipv4Addr::new(10, 237, 2, 4)));
        assert_eq!(s.to_string(), "10.237.2.0/30");
        assert!(
            WireSubnet::parse("0.0.0.0/0")
                .unwrap()
                .contains(Ipv4Addr::BROADCAST)
        );
    }

    #[test]
    fn a_subnet_without_room_or_with_host_bits_is_refused_with_the_fix() {
        let err = WireSubnet::parse("10.237.2.0/31").unwrap_err();
        assert!(err.contains("0 to 30"), "{err}");
        let err = WireSubnet::parse("10.237.2.1/30").unwrap_err();
        assert!(err.contains("the network is 10.237.2.0/30"), "{err}");
        assert!(WireSubnet::parse("10.237.2.0").is_err());
        assert!(WireSubnet::parse("fd00::/64").is_err());
    }

    #[test]
    fn ipv4_addresses_and_bare_interfaces_are_read_from_ip_json() {
        let json = r#"[{"ifindex":1,"ifname":"lo","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8},{"family":"inet6","local":"::1","prefixlen":128}]},
                       {"ifindex":2,"ifname":"dxbench-wire","addr_info":[]}]"#;
        assert_eq!(
            parse_ipv4_addrs(json).unwrap(),
            vec![
                ("lo".to_owned(), vec![Ipv4Addr::LOCALHOST]),
                ("dxbench-wire".to_owned(), vec![])
            ]
        );
    }
}
