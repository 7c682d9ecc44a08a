//! What the kernel announces between passes that can make a link wrong before the next resync
//! (issue 22): a bridge learning a MAC on a port (a container took another MAC, or took over
//! one a linked container had), nf_tables committing a new ruleset generation (a rule that may
//! now cover a link; iptables-nft's rules are nf_tables rules too), and a qdisc or classic tc
//! filter coming or going (traffic control a link would skip), and a route with an MTU coming
//! or going (one the published ports' replies must heed). Each is a multicast netlink
//! group of the host's namespace, read on a thread of its own; the watch turns them into passes
//! within a second.
//!
//! Legacy (x_tables) iptables announces nothing: its rules are caught by the resync, as before.
use std::{
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use anyhow::{Context, Result};
use tokio::sync::mpsc;
use tracing::warn;

use crate::netlink::MacAddr;

/// One announcement the watch may act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notice {
    /// A bridge learned `mac` behind the port with host ifindex `port`, or moved it there.
    Learned { port: u32, mac: MacAddr },
    /// The nf_tables ruleset, traffic control on some interface, or a route's MTU changed.
    Policy,
    /// Announcements were lost (a full socket or queue): anything may have changed.
    Lost,
}

/// Bridge forwarding database changes (`RTNLGRP_NEIGH`, AF_BRIDGE entries).
const RTNLGRP_NEIGH: u32 = 3;
/// Qdiscs and classic filters (`RTNLGRP_TC`).
const RTNLGRP_TC: u32 = 4;
const RTM_NEWQDISC: u16 = 36;
const RTM_DELQDISC: u16 = 37;
const RTM_NEWTFILTER: u16 = 44;
const RTM_DELTFILTER: u16 = 45;
/// `struct tcmsg`: family, padding, ifindex, handle, parent, info.
const TCMSG_LEN: usize = 20;
const TCA_KIND: u16 = 1;
/// Routes (`RTNLGRP_IPV4_ROUTE`, `RTNLGRP_IPV6_ROUTE`); one that carries an MTU metric
/// (`RTA_METRICS` holding `RTAX_MTU`) may change what the replies of published ports must fit.
const RTNLGRP_IPV4_ROUTE: u32 = 7;
const RTNLGRP_IPV6_ROUTE: u32 = 11;
const RTM_NEWROUTE: u16 = 24;
const RTM_DELROUTE: u16 = 25;
/// `struct rtmsg`: family, lengths, tos, table, protocol, scope, type, flags.
const RTMSG_LEN: usize = 12;
const RTA_METRICS: u16 = 8;
const RTAX_MTU: u16 = 2;
/// nf_tables commits (`NFNLGRP_NFTABLES`).
const NFNLGRP_NFTABLES: u32 = 7;
const RTM_NEWNEIGH: u16 = 28;
const NDA_LLADDR: u16 = 2;
const NUD_PERMANENT: u16 = 0x80;
const NLMSG_HDRLEN: usize = 16;
/// `struct ndmsg`: family, padding, ifindex, state, flags, type.
const NDMSG_LEN: usize = 12;
/// How many notices wait for the watch's loop; beyond, one [`Notice::Lost`] stands for them.
const QUEUE: usize = 4096;
/// Receive buffer of each socket: a burst of container starts learns many MACs at once.
const RCVBUF: libc::c_int = 1 << 20;

/// Starts both listeners; their notices arrive on the returned queue.
pub fn listen() -> Result<Notices> {
    let (tx, rx) = mpsc::channel(QUEUE);
    let lost = Arc::new(AtomicBool::new(false));
    let route = subscribe(
        libc::NETLINK_ROUTE,
        &[
            RTNLGRP_NEIGH,
            RTNLGRP_TC,
            RTNLGRP_IPV4_ROUTE,
            RTNLGRP_IPV6_ROUTE,
        ],
    )
    .context("cannot follow bridge forwarding databases, traffic control and routes (rtnetlink)")?;
    let rules = subscribe(libc::NETLINK_NETFILTER, &[NFNLGRP_NFTABLES])
        .context("cannot follow nf_tables ruleset changes (nfnetlink)")?;
    spawn(
        "dxdp-rtnetlink",
        route,
        tx.clone(),
        Arc::clone(&lost),
        route_notices,
    );
    spawn("dxdp-nftables", rules, tx, Arc::clone(&lost), |_| {
        vec![Notice::Policy]
    });
    Ok(Notices { rx, lost })
}

/// The queue of notices, and whether any had to be dropped.
pub struct Notices {
    rx: mpsc::Receiver<Notice>,
    lost: Arc<AtomicBool>,
}

impl Notices {
    /// The next notice; [`Notice::Lost`] first if some were dropped since the last call.
    pub async fn next(&mut self) -> Option<Notice> {
        if self.lost.swap(false, Ordering::Relaxed) {
            return Some(Notice::Lost);
        }
        self.rx.recv().await
    }

    /// A notice already queued, without waiting.
    pub fn try_next(&mut self) -> Option<Notice> {
        if self.lost.swap(false, Ordering::Relaxed) {
            return Some(Notice::Lost);
        }
        self.rx.try_recv().ok()
    }
}

fn subscribe(protocol: libc::c_int, groups: &[u32]) -> io::Result<OwnedFd> {
    // SAFETY: socket(2) has no memory arguments; the fd is owned from here on.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            protocol,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nothing else owns.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    // Multicast reaches only a bound socket: an unbound one joins the group and hears nothing.
    // SAFETY: sockaddr_nl is plain data; all-zero but the family is the kernel-chosen port id.
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    // SAFETY: addr lives across the call and its size is passed.
    let rc = unsafe {
        libc::bind(
            socket.as_raw_fd(),
            (&raw const addr).cast(),
            size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    setsockopt(&socket, libc::SOL_SOCKET, libc::SO_RCVBUF, RCVBUF)?;
    for &group in groups {
        setsockopt(
            &socket,
            libc::SOL_NETLINK,
            libc::NETLINK_ADD_MEMBERSHIP,
            group as libc::c_int,
        )?;
    }
    Ok(socket)
}

fn setsockopt(
    socket: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the value is a c_int that lives across the call, and its size is passed.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&raw const value).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reads datagrams until the watch goes away, turning each into notices. A socket that
/// overflowed (`ENOBUFS`) lost announcements: that is a [`Notice::Lost`], and reading goes on.
fn spawn(
    name: &str,
    socket: OwnedFd,
    tx: mpsc::Sender<Notice>,
    lost: Arc<AtomicBool>,
    parse: fn(&[u8]) -> Vec<Notice>,
) {
    let thread = name.to_owned();
    let started = std::thread::Builder::new()
        .name(thread.clone())
        .spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                // SAFETY: the buffer is valid and writable for its length.
                let got = unsafe {
                    libc::recv(socket.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0)
                };
                let notices = if got < 0 {
                    let err = io::Error::last_os_error();
                    match err.raw_os_error() {
                        Some(libc::ENOBUFS) => vec![Notice::Lost],
                        Some(libc::EINTR) => continue,
                        _ => {
                            warn!(
                                thread,
                                "stopped reading kernel notices: {err}; the resync remains"
                            );
                            lost.store(true, Ordering::Relaxed);
                            return;
                        }
                    }
                } else {
                    parse(&buf[..got as usize])
                };
                for notice in notices {
                    match tx.try_send(notice) {
                        Ok(()) => {}
                        Err(mpsc::error::TrySendError::Full(_)) => {
                            lost.store(true, Ordering::Relaxed);
                        }
                        Err(mpsc::error::TrySendError::Closed(_)) => return,
                    }
                }
            }
        });
    if let Err(err) = started {
        warn!("cannot start {name}: {err}; the resync remains");
    }
}

/// What one rtnetlink datagram announces: MACs bridges learned (new AF_BRIDGE entries that are
/// not the ports' own, permanent ones), and traffic control that came or went (one notice for
/// the datagram; a veth's own `noqueue` is not policy).
fn route_notices(datagram: &[u8]) -> Vec<Notice> {
    let mut out = Vec::new();
    let mut rest = datagram;
    while rest.len() >= NLMSG_HDRLEN {
        let len = u32::from_ne_bytes(rest[0..4].try_into().unwrap()) as usize;
        let kind = u16::from_ne_bytes(rest[4..6].try_into().unwrap());
        if len < NLMSG_HDRLEN || len > rest.len() {
            break;
        }
        let payload = &rest[NLMSG_HDRLEN..len];
        match kind {
            RTM_NEWNEIGH => out.extend(fdb_entry(payload)),
            RTM_NEWQDISC | RTM_DELQDISC | RTM_NEWTFILTER | RTM_DELTFILTER
                if tc_kind(payload).is_some_and(|k| k != "noqueue")
                    && !out.contains(&Notice::Policy) =>
            {
                out.push(Notice::Policy);
            }
            RTM_NEWROUTE | RTM_DELROUTE
                if carries_mtu(payload) && !out.contains(&Notice::Policy) =>
            {
                out.push(Notice::Policy);
            }
            _ => {}
        }
        rest = &rest[align(len).min(rest.len())..];
    }
    out
}

/// Whether a route message's metrics hold an MTU (a delete carries the route's metrics too).
fn carries_mtu(payload: &[u8]) -> bool {
    payload.len() >= RTMSG_LEN
        && attribute(&payload[RTMSG_LEN..], RTA_METRICS)
            .is_some_and(|metrics| attribute(metrics, RTAX_MTU).is_some())
}

/// A learned bridge entry from the payload of an `RTM_NEWNEIGH`.
fn fdb_entry(payload: &[u8]) -> Option<Notice> {
    if payload.len() < NDMSG_LEN || payload[0] != libc::AF_BRIDGE as u8 {
        return None;
    }
    let port = i32::from_ne_bytes(payload[4..8].try_into().unwrap());
    let state = u16::from_ne_bytes(payload[8..10].try_into().unwrap());
    if port <= 0 || state & NUD_PERMANENT != 0 {
        return None;
    }
    let mac: MacAddr = attribute(&payload[NDMSG_LEN..], NDA_LLADDR)?
        .try_into()
        .ok()?;
    Some(Notice::Learned {
        port: port as u32,
        mac,
    })
}

/// The `TCA_KIND` of a tc message's payload (`tbf`, `clsact`, `bpf`, …).
fn tc_kind(payload: &[u8]) -> Option<&str> {
    let value = attribute(payload.get(TCMSG_LEN..)?, TCA_KIND)?;
    let end = value.iter().position(|b| *b == 0).unwrap_or(value.len());
    std::str::from_utf8(&value[..end]).ok()
}

/// The value of the first attribute of type `wanted` among netlink attributes; `None` if there
/// is none or the attributes are damaged before it.
fn attribute(mut attrs: &[u8], wanted: u16) -> Option<&[u8]> {
    while attrs.len() >= 4 {
        let len = u16::from_ne_bytes([attrs[0], attrs[1]]) as usize;
        let kind = u16::from_ne_bytes([attrs[2], attrs[3]]);
        if len < 4 || len > attrs.len() {
            return None;
        }
        if kind == wanted {
            return Some(&attrs[4..len]);
        }
        attrs = &attrs[align(len).min(attrs.len())..];
    }
    None
}

/// Netlink messages and attributes start on 4-byte boundaries.
fn align(len: usize) -> usize {
    (len + 3) & !3
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: MacAddr = [0x02, 0x42, 0xac, 0x11, 0, 0x0b];

    /// An `RTM_NEWNEIGH` for `port` carrying `mac`, as a bridge announces a learned entry.
    fn newneigh(family: u8, port: i32, state: u16, mac: &[u8]) -> Vec<u8> {
        let mut payload = vec![family, 0, 0, 0];
        payload.extend_from_slice(&port.to_ne_bytes());
        payload.extend_from_slice(&state.to_ne_bytes());
        payload.extend_from_slice(&[0x10, 0]); // NTF_MASTER, type
        // NDA_MASTER first, so that the MAC is not the first attribute.
        payload.extend_from_slice(&8u16.to_ne_bytes());
        payload.extend_from_slice(&9u16.to_ne_bytes());
        payload.extend_from_slice(&3u32.to_ne_bytes());
        payload.extend_from_slice(&((4 + mac.len()) as u16).to_ne_bytes());
        payload.extend_from_slice(&NDA_LLADDR.to_ne_bytes());
        payload.extend_from_slice(mac);
        message(RTM_NEWNEIGH, payload)
    }

    /// A netlink message of `kind` around `payload`, padded to its boundary.
    fn message(kind: u16, mut payload: Vec<u8>) -> Vec<u8> {
        payload.resize(align(payload.len()), 0);
        let mut msg = ((NLMSG_HDRLEN + payload.len()) as u32)
            .to_ne_bytes()
            .to_vec();
        msg.extend_from_slice(&kind.to_ne_bytes());
        msg.extend_from_slice(&[0; 10]);
        msg.extend_from_slice(&payload);
        msg
    }

    #[test]
    fn a_learned_bridge_entry_names_its_port_and_mac() {
        let mut datagram = newneigh(libc::AF_BRIDGE as u8, 41, 0x02, &MAC);
        datagram.extend(newneigh(
            libc::AF_BRIDGE as u8,
            42,
            0x02,
            &[2, 0, 0, 0, 0, 1],
        ));
        assert_eq!(
            route_notices(&datagram),
            [
                Notice::Learned { port: 41, mac: MAC },
                Notice::Learned {
                    port: 42,
                    mac: [2, 0, 0, 0, 0, 1]
                },
            ]
        );
    }

    /// A tc message (`RTM_NEWQDISC`, …) for ifindex 41 with this `TCA_KIND`.
    fn tc_message(kind_of_message: u16, tca_kind: &str) -> Vec<u8> {
        let mut payload = vec![0u8; TCMSG_LEN];
        payload[4..8].copy_from_slice(&41i32.to_ne_bytes());
        let value = [tca_kind.as_bytes(), &[0]].concat();
        payload.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
        payload.extend_from_slice(&TCA_KIND.to_ne_bytes());
        payload.extend_from_slice(&value);
        message(kind_of_message, payload)
    }

    /// A route message (`RTM_NEWROUTE`, …) with these metrics (kind, value) in `RTA_METRICS`,
    /// after a destination attribute.
    fn route_message(kind_of_message: u16, metrics: &[(u16, u32)]) -> Vec<u8> {
        let mut payload = vec![libc::AF_INET as u8, 32, 0, 0, 254, 3, 0, 1, 0, 0, 0, 0];
        payload.extend_from_slice(&8u16.to_ne_bytes());
        payload.extend_from_slice(&1u16.to_ne_bytes()); // RTA_DST
        payload.extend_from_slice(&[10, 236, 1, 2]);
        if !metrics.is_empty() {
            payload.extend_from_slice(&((4 + 8 * metrics.len()) as u16).to_ne_bytes());
            payload.extend_from_slice(&RTA_METRICS.to_ne_bytes());
            for &(kind, value) in metrics {
                payload.extend_from_slice(&8u16.to_ne_bytes());
                payload.extend_from_slice(&kind.to_ne_bytes());
                payload.extend_from_slice(&value.to_ne_bytes());
            }
        }
        message(kind_of_message, payload)
    }

    #[test]
    fn a_route_with_an_mtu_coming_or_going_is_a_policy_notice_and_others_are_none() {
        let mut datagram = route_message(RTM_NEWROUTE, &[(RTAX_MTU, 1400)]);
        datagram.extend(route_message(RTM_DELROUTE, &[(1, 4), (RTAX_MTU, 1400)]));
        assert_eq!(route_notices(&datagram), [Notice::Policy]);
        assert_eq!(
            route_notices(&route_message(RTM_DELROUTE, &[(RTAX_MTU, 1280)])),
            [Notice::Policy]
        );
        // A veth's link-local route as each container start brings; an MSS clamp.
        assert_eq!(route_notices(&route_message(RTM_NEWROUTE, &[])), []);
        assert_eq!(
            route_notices(&route_message(RTM_NEWROUTE, &[(8, 1360)])),
            []
        );
    }

    #[test]
    fn traffic_control_coming_or_going_is_one_policy_notice_but_a_veths_noqueue_is_none() {
        let mut datagram = tc_message(RTM_NEWQDISC, "tbf");
        datagram.extend(tc_message(RTM_NEWTFILTER, "bpf"));
        assert_eq!(route_notices(&datagram), [Notice::Policy]);
        assert_eq!(
            route_notices(&tc_message(RTM_DELQDISC, "clsact")),
            [Notice::Policy]
        );
        assert_eq!(route_notices(&tc_message(RTM_NEWQDISC, "noqueue")), []);
    }

    #[test]
    fn ports_own_entries_ip_neighbours_and_damaged_messages_are_not_learned_entries() {
        let permanent = newneigh(libc::AF_BRIDGE as u8, 41, NUD_PERMANENT, &MAC);
        let ip_neighbour = newneigh(libc::AF_INET as u8, 41, 0x02, &MAC);
        let short_address = newneigh(libc::AF_BRIDGE as u8, 41, 0x02, &MAC[..4]);
        for datagram in [permanent, ip_neighbour, short_address] {
            assert_eq!(route_notices(&datagram), []);
        }
        let mut truncated = newneigh(libc::AF_BRIDGE as u8, 41, 0x02, &MAC);
        truncated.truncate(30);
        assert_eq!(route_notices(&truncated), []);
        let mut lying = newneigh(libc::AF_BRIDGE as u8, 41, 0x02, &MAC);
        lying[0..4].copy_from_slice(&4096u32.to_ne_bytes());
        assert_eq!(route_notices(&lying), []);
    }
}
