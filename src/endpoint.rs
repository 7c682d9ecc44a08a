//! What a user names as one end of a link, and the interfaces it turns out to be.
use std::{fmt, net::IpAddr, str::FromStr};

use anyhow::{Context, Result, anyhow, bail};

use crate::{
    netlink::{self, Interface, MacAddr, format_mac},
    netns::{NetnsError, NetnsPath},
};

/// One end of a link as written on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndpointSpec {
    /// `netns:NAME[:IFACE]`, a namespace under /run/netns.
    Netns { name: String, iface: Option<String> },
    /// `pid:PID[:IFACE]`, the namespace of a running process.
    Pid { pid: u32, iface: Option<String> },
    /// `container:REF` or a bare `REF`: a Docker container by name, ID prefix or compose service.
    Container { reference: String },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "endpoint {}: {reason}; write netns:NAME[:IFACE], pid:PID[:IFACE] or a container name",
    shortened_debug(.input)
)]
pub struct EndpointParseError {
    pub(crate) input: String,
    pub(crate) reason: String,
}

const IFNAMSIZ: usize = 16;

/// How much of a bad argument an error shows: enough to recognise it.
const SHOWN_CHARS: usize = 64;

/// `input` as an error shows it: whole when short, else its first characters and its length.
pub fn shortened(input: &str) -> String {
    match input.char_indices().nth(SHOWN_CHARS) {
        None => input.to_owned(),
        Some((end, _)) => format!("{}…({} bytes)", &input[..end], input.len()),
    }
}

/// [`shortened`], quoted as `{:?}` quotes a short one.
fn shortened_debug(input: &str) -> String {
    match input.char_indices().nth(SHOWN_CHARS) {
        None => format!("{input:?}"),
        Some((end, _)) => format!("{:?}…({} bytes)", &input[..end], input.len()),
    }
}

impl FromStr for EndpointSpec {
    type Err = EndpointParseError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let fail = |reason: &str| EndpointParseError {
            input: input.to_owned(),
            reason: reason.to_owned(),
        };
        if input.is_empty() {
            return Err(fail("empty"));
        }
        let (kind, rest) = input.split_once(':').unwrap_or(("container", input));
        let (target, iface) = match rest.split_once(':') {
            Some((target, iface)) => (target, Some(iface)),
            None => (rest, None),
        };
        if let Some(iface) = iface
            && (iface.is_empty()
                || iface.len() >= IFNAMSIZ
                || iface.contains(['/', ':', ' '])
                || iface == "."
                || iface == "..")
        {
            return Err(fail(
                "interface name must be 1-15 characters without '/', ':' or spaces",
            ));
        }
        let iface = iface.map(str::to_owned);
        match kind {
            "netns" => {
                if target.is_empty() || target.contains('/') || target == "." || target == ".." {
                    return Err(fail("namespace name must be a plain name under /run/netns"));
                }
                Ok(Self::Netns {
                    name: target.to_owned(),
                    iface,
                })
            }
            "pid" => {
                let pid = target
                    .parse::<u32>()
                    .ok()
                    .filter(|pid| *pid > 0)
                    .ok_or_else(|| fail("PID must be a positive number"))?;
                Ok(Self::Pid { pid, iface })
            }
            "container" => {
                if iface.is_some() {
                    return Err(fail("a container endpoint takes no interface"));
                }
                if !valid_container_ref(target) {
                    return Err(fail("container names are [A-Za-z0-9][A-Za-z0-9_.-]*"));
                }
                Ok(Self::Container {
                    reference: target.trim_start_matches('/').to_owned(),
                })
            }
            _ => Err(fail("unknown endpoint kind before ':'")),
        }
    }
}

fn valid_container_ref(name: &str) -> bool {
    let name = name.strip_prefix('/').unwrap_or(name);
    let mut chars = name.chars();
    name.len() <= 128
        && chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

impl fmt::Display for EndpointSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let iface = |i: &Option<String>| i.as_ref().map(|i| format!(":{i}")).unwrap_or_default();
        match self {
            Self::Netns { name, iface: i } => write!(f, "netns:{name}{}", iface(i)),
            Self::Pid { pid, iface: i } => write!(f, "pid:{pid}{}", iface(i)),
            Self::Container { reference } => write!(f, "{reference}"),
        }
    }
}

/// A container-side interface and the host-side veth that carries its traffic to the bridge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// How the user or Docker names it; shown by `status`.
    pub label: String,
    pub netns: NetnsPath,
    pub netns_ino: u64,
    pub ifname: String,
    pub ifindex: u32,
    pub mac: MacAddr,
    pub host_ifname: String,
    pub host_ifindex: u32,
    pub bridge_ifindex: u32,
    pub bridge_name: String,
    /// The container interface's addresses, link-local ones included.
    pub addrs: Vec<IpAddr>,
    /// A Swarm task on another node, reached through this overlay's VXLAN device (named
    /// `host_ifname`): `host_ifindex` is then its endpoint id in the pinned maps, not an
    /// interface, and there is no namespace or container interface of its own here.
    pub tunnel_ifindex: Option<u32>,
}

impl Endpoint {
    /// Resolves a netns or pid endpoint spec.
    pub fn resolve_local(spec: &EndpointSpec, host: &[Interface]) -> Result<Self> {
        let (netns, iface) = match spec {
            EndpointSpec::Netns { name, iface } => (NetnsPath::named(name), iface),
            EndpointSpec::Pid { pid, iface } => (NetnsPath::of_pid(*pid), iface),
            EndpointSpec::Container { .. } => bail!("{spec} is a container; ask Docker for it"),
        };
        locate(spec.to_string(), netns, iface.as_deref(), None, host)
            .map_err(EndpointError::into_inner)
    }
}

/// Why an endpoint was not found: what a pass does next depends on which.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// Its namespace may not be entered or read (this process lacks a privilege): it will not
    /// heal by itself, so the pass says so loudly.
    #[error(transparent)]
    Denied(anyhow::Error),
    /// Not there as the container engine said: a container that just stopped or is still
    /// starting, or a restart whose events were lost; the next event or resync catches up.
    #[error(transparent)]
    Missing(anyhow::Error),
}

impl EndpointError {
    /// The error as it was found, for callers that only report it.
    pub fn into_inner(self) -> anyhow::Error {
        match self {
            Self::Denied(err) | Self::Missing(err) => err,
        }
    }

    /// A namespace that could not be opened, about endpoint `label` where one is named.
    fn of_netns(err: NetnsError, label: Option<&str>) -> Self {
        let denied = matches!(err, NetnsError::Denied { .. });
        let err = anyhow::Error::new(err);
        let err = match label {
            Some(label) => err.context(format!("endpoint {label}")),
            None => err,
        };
        if denied {
            Self::Denied(err)
        } else {
            Self::Missing(err)
        }
    }
}

/// Finds, inside `netns`, the veth named `iface` (or carrying `mac`, or else the only one) whose
/// host-side peer hangs on a bridge in the host namespace described by `host`.
pub(crate) fn locate(
    label: String,
    netns: NetnsPath,
    iface: Option<&str>,
    mac: Option<MacAddr>,
    host: &[Interface],
) -> Result<Endpoint, EndpointError> {
    let netns_ino = netns
        .inode()
        .map_err(|err| EndpointError::of_netns(err, Some(&label)))?;
    let host_ino = NetnsPath::host()
        .inode()
        .map_err(|err| EndpointError::of_netns(err, None))?;
    if netns_ino == host_ino {
        return Err(EndpointError::Missing(anyhow!(
            "endpoint {label} is in the host's own network namespace; dxdp links containers \
             attached to a bridge by a veth"
        )));
    }
    locate_inside(label, netns, netns_ino, iface, mac, host).map_err(EndpointError::Missing)
}

/// [`locate`] once the namespace is known to be another's than the host's.
fn locate_inside(
    label: String,
    netns: NetnsPath,
    netns_ino: u64,
    iface: Option<&str>,
    mac: Option<MacAddr>,
    host: &[Interface],
) -> Result<Endpoint> {
    let inside = netlink::interfaces(&netns).with_context(|| format!("endpoint {label}"))?;
    let wanted = |i: &&Interface| {
        iface.is_none_or(|name| i.name == name) && mac.is_none_or(|mac| i.mac == Some(mac))
    };
    let candidates: Vec<_> = inside
        .iter()
        .filter(wanted)
        .filter_map(|i| bridged_peer(i, host).map(|(peer, bridge)| (i, peer, bridge)))
        .collect();
    let (inner, peer, bridge) = match candidates.as_slice() {
        [one] => *one,
        [] => {
            let what = match (iface, mac) {
                (Some(name), _) => format!("interface {name}"),
                (None, Some(mac)) => format!("an interface with MAC {}", format_mac(&mac)),
                (None, None) => "an interface".to_owned(),
            };
            bail!(
                "endpoint {label}: {what} whose veth peer is on a bridge of the host was not found \
                 in {netns}"
            )
        }
        many => {
            let names: Vec<_> = many.iter().map(|(i, ..)| i.name.as_str()).collect();
            bail!(
                "endpoint {label} has several bridged veths ({}); name one as {label}:IFACE",
                names.join(", ")
            )
        }
    };
    let addrs =
        netlink::addresses(&netns, inner.index).with_context(|| format!("endpoint {label}"))?;
    let Some(mac) = inner.mac else {
        bail!("endpoint {label}: {} has no MAC address", inner.name);
    };
    Ok(Endpoint {
        label,
        netns,
        netns_ino,
        ifname: inner.name.clone(),
        ifindex: inner.index,
        mac,
        host_ifname: peer.name.clone(),
        host_ifindex: peer.index,
        bridge_ifindex: bridge.index,
        bridge_name: bridge.name.clone(),
        addrs,
        tunnel_ifindex: None,
    })
}

/// The host-side veth of a container-side veth and the bridge it is enslaved to. Both ends must
/// point at each other, so an ifindex that merely collides across namespaces does not match.
fn bridged_peer<'h>(
    inner: &Interface,
    host: &'h [Interface],
) -> Option<(&'h Interface, &'h Interface)> {
    if !inner.is_veth() || inner.peer_netnsid.is_none() {
        return None;
    }
    let peer_index = inner.peer_index?;
    let peer = host
        .iter()
        .find(|h| h.index == peer_index && h.is_veth() && h.peer_index == Some(inner.index))?;
    let bridge = host
        .iter()
        .find(|h| Some(h.index) == peer.master && h.is_bridge())?;
    Some((peer, bridge))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<EndpointSpec, EndpointParseError> {
        s.parse()
    }

    #[test]
    fn a_huge_endpoint_is_shown_shortened_in_its_error() {
        let huge = "a".repeat(100_000);
        let err = parse(&huge).expect_err("too long for a container name");
        let shown = err.to_string();
        assert!(shown.len() < 300, "{} bytes: {shown}", shown.len());
        assert!(shown.contains("100000 bytes"), "{shown}");
        assert_eq!(shortened("web"), "web");
        let e = parse("web$").expect_err("bad name");
        assert!(e.to_string().starts_with("endpoint \"web$\": "), "{e}");
    }

    #[test]
    fn parses_each_kind() {
        assert_eq!(
            parse("netns:red").unwrap(),
            EndpointSpec::Netns {
                name: "red".into(),
                iface: None
            }
        );
        assert_eq!(
            parse("netns:red:eth1").unwrap(),
            EndpointSpec::Netns {
                name: "red".into(),
                iface: Some("eth1".into())
            }
        );
        assert_eq!(
            parse("pid:42:eth0").unwrap(),
            EndpointSpec::Pid {
                pid: 42,
                iface: Some("eth0".into())
            }
        );
        assert_eq!(
            parse("web-1").unwrap(),
            EndpointSpec::Container {
                reference: "web-1".into()
            }
        );
        assert_eq!(
            parse("container:/web").unwrap(),
            EndpointSpec::Container {
                reference: "web".into()
            }
        );
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "",
            "netns:",
            "netns:../etc",
            "netns:a/b",
            "netns:red:",
            "netns:red:waytoolonginterfacename",
            "pid:abc",
            "pid:0",
            "pid:-1",
            "box:red",
            "container:web:eth0",
            "-web",
            "we b",
        ] {
            let err = parse(bad).expect_err(bad);
            assert_eq!(err.input, bad);
            assert!(err.to_string().contains("write netns:NAME"), "{err}");
        }
    }

    #[test]
    fn display_round_trips() {
        for s in ["netns:red", "netns:red:eth1", "pid:7", "pid:7:e0", "web"] {
            assert_eq!(parse(s).unwrap().to_string(), s);
        }
    }

    fn veth(
        index: u32,
        name: &str,
        peer: u32,
        netnsid: Option<i32>,
        master: Option<u32>,
    ) -> Interface {
        Interface {
            index,
            name: name.into(),
            mac: Some([2, 0, 0, 0, 0, index as u8]),
            kind: Some("veth".into()),
            peer_index: Some(peer),
            peer_netnsid: netnsid,
            master,
            xdp_prog_id: None,
            up: true,
        }
    }

    #[test]
    fn bridged_peer_needs_both_ends_and_a_bridge() {
        let bridge = Interface {
            kind: Some("bridge".into()),
            peer_index: None,
            ..veth(3, "br0", 0, None, None)
        };
        let host = vec![bridge.clone(), veth(10, "vh", 2, Some(0), Some(3))];
        let inner = veth(2, "eth0", 10, Some(0), None);
        let (peer, br) = bridged_peer(&inner, &host).unwrap();
        assert_eq!((peer.name.as_str(), br.name.as_str()), ("vh", "br0"));
        // The host veth points back at another ifindex: a collision, not our peer.
        let host_other = vec![bridge.clone(), veth(10, "vh", 5, Some(0), Some(3))];
        assert!(bridged_peer(&inner, &host_other).is_none());
        // Not on a bridge.
        let host_loose = vec![bridge, veth(10, "vh", 2, Some(0), None)];
        assert!(bridged_peer(&inner, &host_loose).is_none());
        // Peer in the same namespace: not a container link.
        assert!(bridged_peer(&veth(2, "eth0", 10, None, None), &host).is_none());
    }
}
