//! Interfaces as rtnetlink reports them in one namespace.
//!
//! sysfs keeps showing the namespace it was mounted in even after `setns`, so everything about
//! interfaces inside a container is read through rtnetlink on a thread inside that namespace.
use anyhow::{Context, Result};
use futures::TryStreamExt;
use netlink_packet_route::address::AddressAttribute;
use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkFlags, LinkInfo, LinkXdp};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::tc::{TcAttribute, TcHandle};

use crate::netns::NetnsPath;

pub type MacAddr = [u8; 6];

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Interface {
    pub index: u32,
    pub name: String,
    pub mac: Option<MacAddr>,
    /// `veth`, `bridge`, … as the kernel names the link kind.
    pub kind: Option<String>,
    /// IFLA_LINK: for a veth, its peer's ifindex (in the peer's namespace).
    pub peer_index: Option<u32>,
    /// Set when the peer lives in another namespace.
    pub peer_netnsid: Option<i32>,
    /// ifindex of the bridge (or other master) this interface is enslaved to.
    pub master: Option<u32>,
    /// Id of the XDP program attached in any mode, if one is.
    pub xdp_prog_id: Option<u32>,
    pub up: bool,
}

impl Interface {
    pub fn is_veth(&self) -> bool {
        self.kind.as_deref() == Some("veth")
    }

    pub fn is_bridge(&self) -> bool {
        self.kind.as_deref() == Some("bridge")
    }
}

/// All interfaces of the namespace at `netns`.
pub fn interfaces(netns: &NetnsPath) -> Result<Vec<Interface>> {
    netns
        .run(|| {
            ask_here(async |handle| {
                let links: Vec<_> = handle.link().get().execute().try_collect().await?;
                Ok(links.into_iter().map(to_interface).collect())
            })
        })
        .with_context(|| format!("cannot list interfaces in {netns}"))
}

/// The interface with `index` in the namespace at `netns`, if there is one: one request where
/// [`interfaces`] would dump them all.
pub(crate) fn interface(netns: &NetnsPath, index: u32) -> Result<Option<Interface>> {
    netns
        .run(move || {
            ask_here(async |handle| {
                let mut replies = handle.link().get().match_index(index).execute();
                match replies.try_next().await {
                    Ok(msg) => Ok(msg.map(to_interface)),
                    Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -libc::ENODEV => {
                        Ok(None)
                    }
                    Err(e) => Err(e.into()),
                }
            })
        })
        .with_context(|| format!("cannot look up interface {index} in {netns}"))
}

/// The veths of the namespace at `netns`, name by ifindex: what `status` and `top` show beside
/// a link's ifindexes.
pub fn veth_names(netns: &NetnsPath) -> Result<std::collections::HashMap<u32, String>> {
    Ok(interfaces(netns)?
        .into_iter()
        .filter(Interface::is_veth)
        .map(|i| (i.index, i.name))
        .collect())
}

/// The MTU of the interface named `name` in the calling thread's namespace (the host's, or an
/// overlay sandbox's, where sysfs would show the host's devices); `None` if it is not there.
pub fn mtu_here(name: &str) -> Option<u32> {
    let name = name.to_owned();
    ask_here(async move |handle| {
        let mut replies = handle.link().get().match_name(name).execute();
        let msg = replies.try_next().await?;
        Ok(msg.and_then(|m| {
            m.attributes.iter().find_map(|a| match a {
                LinkAttribute::Mtu(mtu) => Some(*mtu),
                _ => None,
            })
        }))
    })
    .ok()
    .flatten()
}

/// The addresses (IPv4 and IPv6, link-local included) of interface `index` in `netns`: what
/// the firewall check needs to know which rules could see its packets.
pub fn addresses(netns: &NetnsPath, index: u32) -> Result<Vec<std::net::IpAddr>> {
    netns
        .run(move || {
            ask_here(async |handle| {
                let msgs: Vec<_> = handle
                    .address()
                    .get()
                    .set_link_index_filter(index)
                    .execute()
                    .try_collect()
                    .await?;
                let mut addrs: Vec<std::net::IpAddr> = msgs
                    .into_iter()
                    .flat_map(|m| m.attributes)
                    .filter_map(|a| match a {
                        AddressAttribute::Address(ip) => Some(ip),
                        _ => None,
                    })
                    .collect();
                addrs.sort();
                addrs.dedup();
                Ok(addrs)
            })
        })
        .with_context(|| format!("cannot list the addresses of interface {index} in {netns}"))
}

/// Every address in the namespace with its prefix length, by interface index.
pub fn prefixes(netns: &NetnsPath) -> Result<Vec<(u32, std::net::IpAddr, u8)>> {
    netns
        .run(move || {
            ask_here(async |handle| {
                let msgs: Vec<_> = handle.address().get().execute().try_collect().await?;
                Ok(msgs
                    .into_iter()
                    .flat_map(|m| {
                        let (index, len) = (m.header.index, m.header.prefix_len);
                        m.attributes.into_iter().filter_map(move |a| match a {
                            AddressAttribute::Address(ip) => Some((index, ip, len)),
                            _ => None,
                        })
                    })
                    .collect())
            })
        })
        .with_context(|| format!("cannot list the addresses in {netns}"))
}

/// Runs one rtnetlink conversation from the calling thread's namespace.
/// A queueing discipline of the host namespace: its interface, whether it is the root one, and
/// its kind (`noqueue`, `tbf`, `clsact`, …).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Qdisc {
    pub index: u32,
    pub root: bool,
    pub kind: String,
}

/// Every qdisc in the host's namespace (one dump).
pub fn host_qdiscs() -> Result<Vec<Qdisc>> {
    ask_here(async |handle| {
        let msgs: Vec<_> = handle.qdisc().get().execute().try_collect().await?;
        Ok(msgs
            .into_iter()
            .map(|m| Qdisc {
                index: u32::try_from(m.header.index).unwrap_or(0),
                root: m.header.parent == TcHandle::ROOT,
                kind: tc_kind(&m.attributes),
            })
            .collect())
    })
    .context("cannot list the host's qdiscs")
}

/// The kinds of the classic tc filters on an interface's ingress or egress hook (under its
/// `ingress` or `clsact` qdisc), in the host's namespace.
pub fn host_filters(index: u32, egress: bool) -> Result<Vec<String>> {
    let index = i32::try_from(index).context("ifindex out of range")?;
    ask_here(async move |handle| {
        let request = handle.traffic_filter(index).get();
        let request = if egress {
            request.egress()
        } else {
            request.ingress()
        };
        let msgs: Vec<_> = request.execute().try_collect().await?;
        Ok(msgs.iter().map(|m| tc_kind(&m.attributes)).collect())
    })
    .with_context(|| format!("cannot list the tc filters of ifindex {index}"))
}

fn tc_kind(attrs: &[TcAttribute]) -> String {
    attrs
        .iter()
        .find_map(|a| match a {
            TcAttribute::Kind(kind) => Some(kind.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// The permanent neighbours of the device `index` in the calling thread's namespace, as
/// (address, MAC): on an overlay's VXLAN device, the tasks of other nodes that Swarm's gossip
/// programmed there.
pub fn permanent_neighbours(index: u32) -> Result<Vec<(std::net::IpAddr, MacAddr)>> {
    ask_here(async move |handle| {
        let msgs: Vec<_> = handle.neighbours().get().execute().try_collect().await?;
        Ok(msgs
            .into_iter()
            .filter(|m| m.header.ifindex == index && m.header.state == NeighbourState::Permanent)
            .filter_map(|m| {
                let mut addr = None;
                let mut mac = None;
                for attr in m.attributes {
                    match attr {
                        NeighbourAttribute::Destination(NeighbourAddress::Inet(v4)) => {
                            addr = Some(std::net::IpAddr::V4(v4))
                        }
                        NeighbourAttribute::Destination(NeighbourAddress::Inet6(v6)) => {
                            addr = Some(std::net::IpAddr::V6(v6))
                        }
                        NeighbourAttribute::LinkLayerAddress(lladdr) => {
                            mac = MacAddr::try_from(lladdr.as_slice()).ok()
                        }
                        _ => {}
                    }
                }
                Some((addr?, mac?))
            })
            .collect())
    })
    .with_context(|| format!("cannot list the neighbours of interface {index}"))
}

/// Pins `mac` on the bridge port `port_index` (`bridge fdb replace MAC dev PORT master
/// static`) in the calling thread's namespace, so that the bridge keeps sending frames for
/// `mac` to that port when none of its frames cross the bridge to refresh what it learned.
pub fn set_static_bridge_entry(port_index: u32, mac: &MacAddr) -> Result<()> {
    let mac = *mac;
    ask_here(async move |handle| {
        handle
            .neighbours()
            .add_bridge(port_index, &mac)
            .state(NeighbourState::Noarp)
            .flags(NeighbourFlags::Controller)
            .replace()
            .execute()
            .await?;
        Ok(())
    })
    .with_context(|| {
        format!(
            "cannot pin {} on bridge port {port_index}",
            format_mac(&mac)
        )
    })
}

/// Removes what [`set_static_bridge_entry`] pinned; an entry already gone is no error.
pub fn remove_static_bridge_entry(port_index: u32, mac: &MacAddr) -> Result<()> {
    let mac = *mac;
    ask_here(async move |handle| {
        let mut msg = NeighbourMessage::default();
        msg.header.family = netlink_packet_route::AddressFamily::Bridge;
        msg.header.ifindex = port_index;
        msg.header.state = NeighbourState::Noarp;
        msg.header.flags = NeighbourFlags::Controller;
        msg.attributes
            .push(NeighbourAttribute::LinkLayerAddress(mac.to_vec()));
        match handle.neighbours().del(msg).execute().await {
            Ok(()) => Ok(()),
            Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -libc::ENOENT => Ok(()),
            Err(e) => Err(e.into()),
        }
    })
    .with_context(|| {
        format!(
            "cannot remove {} from bridge port {port_index}",
            format_mac(&mac)
        )
    })
}

/// A unicast route of the namespace's main table, as far as forwarding's MTU check reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostRoute {
    pub dst: std::net::IpAddr,
    pub prefix_len: u8,
    /// Its metric: of two routes to one prefix, the lower is taken.
    pub priority: u32,
    /// Its `mtu` (0 where it sets none), and whether `lock mtu` pins it.
    pub mtu: u32,
    pub mtu_locked: bool,
}

/// `RT_TABLE_MAIN`, and `RTAX_MTU`'s bit in a route's lock metric.
const MAIN_TABLE: u32 = 254;
const MTU_LOCK: u32 = 1 << 2;

/// The unicast routes of the calling thread's namespace's main table, both families.
pub fn main_table_routes() -> Result<Vec<HostRoute>> {
    use netlink_packet_route::route::RouteMessage;
    use rtnetlink::RouteMessageBuilder;
    ask_here(async |handle| {
        let mut routes = Vec::new();
        for request in [
            RouteMessageBuilder::<std::net::Ipv4Addr>::new().build(),
            RouteMessageBuilder::<std::net::Ipv6Addr>::new().build(),
        ] {
            let msgs: Vec<RouteMessage> =
                handle.route().get(request).execute().try_collect().await?;
            routes.extend(msgs.into_iter().filter_map(host_route));
        }
        Ok(routes)
    })
    .context("cannot list the host's routes (rtnetlink)")
}

/// The route `msg` describes, if it is a unicast route of the main table. A cached exception
/// (`RTM_F_CLONED`: a path MTU the host learnt from an error, or a redirect) is not a route:
/// rtnetlink dumps them with the routes to a socket without strict checking, and mirrored as
/// one its MTU would send to the stack replies that forwarding (IPv4, unlocked) sends on, and
/// that would leave it masqueraded (differential long run, seed 6262 case 987).
fn host_route(msg: netlink_packet_route::route::RouteMessage) -> Option<HostRoute> {
    use netlink_packet_route::route::{
        RouteAddress, RouteAttribute, RouteFlags, RouteMetric, RouteType,
    };
    if msg.header.flags.contains(RouteFlags::Cloned) {
        return None;
    }
    let table = msg
        .attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(u32::from(msg.header.table));
    if table != MAIN_TABLE || msg.header.kind != RouteType::Unicast {
        return None;
    }
    let mut route = HostRoute {
        dst: match msg.header.address_family {
            netlink_packet_route::AddressFamily::Inet6 => {
                std::net::IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
            }
            _ => std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        },
        prefix_len: msg.header.destination_prefix_length,
        priority: 0,
        mtu: 0,
        mtu_locked: false,
    };
    for attribute in &msg.attributes {
        match attribute {
            RouteAttribute::Destination(RouteAddress::Inet(a)) => route.dst = (*a).into(),
            RouteAttribute::Destination(RouteAddress::Inet6(a)) => route.dst = (*a).into(),
            RouteAttribute::Priority(p) => route.priority = *p,
            RouteAttribute::Metrics(metrics) => {
                for metric in metrics {
                    match metric {
                        RouteMetric::Mtu(mtu) => route.mtu = *mtu,
                        RouteMetric::Lock(lock) => route.mtu_locked = lock & MTU_LOCK != 0,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Some(route)
}

fn ask_here<T>(request: impl AsyncFnOnce(rtnetlink::Handle) -> Result<T>) -> Result<T> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    runtime.block_on(async {
        let (connection, handle, _) = rtnetlink::new_connection()?;
        let driver = tokio::spawn(connection);
        let result = request(handle).await;
        driver.abort();
        result
    })
}

fn to_interface(msg: netlink_packet_route::link::LinkMessage) -> Interface {
    let mut iface = Interface {
        index: msg.header.index,
        name: String::new(),
        mac: None,
        kind: None,
        peer_index: None,
        peer_netnsid: None,
        master: None,
        xdp_prog_id: None,
        up: msg.header.flags.contains(LinkFlags::Up),
    };
    for attr in msg.attributes {
        match attr {
            LinkAttribute::IfName(name) => iface.name = name,
            LinkAttribute::Address(addr) => iface.mac = addr.try_into().ok(),
            LinkAttribute::Link(index) => iface.peer_index = Some(index),
            LinkAttribute::LinkNetNsId(id) => iface.peer_netnsid = Some(id),
            LinkAttribute::Controller(index) => iface.master = Some(index),
            LinkAttribute::LinkInfo(infos) => {
                iface.kind = infos.into_iter().find_map(|info| match info {
                    LinkInfo::Kind(kind) => Some(kind_name(&kind)),
                    _ => None,
                })
            }
            LinkAttribute::Xdp(xdp) => {
                iface.xdp_prog_id = xdp.into_iter().find_map(|x| match x {
                    LinkXdp::ProgId(id) if id != 0 => Some(id),
                    _ => None,
                })
            }
            _ => {}
        }
    }
    iface
}

fn kind_name(kind: &InfoKind) -> String {
    match kind {
        InfoKind::Veth => "veth".into(),
        InfoKind::Bridge => "bridge".into(),
        other => other.to_string(),
    }
}

pub fn format_mac(mac: &MacAddr) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use netlink_packet_route::{
        AddressFamily,
        route::{RouteAddress, RouteAttribute, RouteFlags, RouteMessage, RouteMetric, RouteType},
    };

    use super::{HostRoute, MAIN_TABLE, host_route};

    /// A /32 to 10.0.0.2 in the main table with an MTU of 600, flagged `flags`.
    fn route_with_mtu(flags: RouteFlags) -> RouteMessage {
        let mut msg = RouteMessage::default();
        msg.header.address_family = AddressFamily::Inet;
        msg.header.destination_prefix_length = 32;
        msg.header.table = MAIN_TABLE as u8;
        msg.header.kind = RouteType::Unicast;
        msg.header.flags = flags;
        msg.attributes = vec![
            RouteAttribute::Destination(RouteAddress::Inet([10, 0, 0, 2].into())),
            RouteAttribute::Metrics(vec![RouteMetric::Mtu(600)]),
        ];
        msg
    }

    #[test]
    fn a_route_with_an_mtu_is_read_as_a_route() {
        assert_eq!(
            host_route(route_with_mtu(RouteFlags::empty())),
            Some(HostRoute {
                dst: [10, 0, 0, 2].into(),
                prefix_len: 32,
                priority: 0,
                mtu: 600,
                mtu_locked: false,
            })
        );
    }

    #[test]
    fn a_cached_path_mtu_is_not_a_route() {
        assert_eq!(host_route(route_with_mtu(RouteFlags::Cloned)), None);
    }
}
