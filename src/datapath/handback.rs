//! Handing the connections the egress fast path carried back to conntrack (docs/egress.md,
//! "Turning it off"), the way the kernel's own flowtable hands back the ones it offloaded.
//!
//! Conntrack saw none of the carried segments, so its TCP windows (`proto.tcp.seen[]`) are
//! behind: without a hand-back, the connection's next segments on Docker's path are out of
//! window, INVALID, and dropped or left untranslated. The flowtable marks an offloaded TCP entry
//! liberal (`IP_CT_TCP_FLAG_BE_LIBERAL` both ways, nft_flow_offload.c `flow_offload_ct_tcp`) and,
//! tearing it down, clears `IP_CT_TCP_FLAG_MAXACK_SET` so that stale acknowledgements do not make
//! a valid RST invalid (nf_flow_table_core.c `flow_offload_fixup_tcp`); it also zeroes
//! `td_maxwin`, which no netlink attribute reaches. ctnetlink lets userspace set exactly the
//! flags (`nlattr_to_tcp`: `CTA_PROTOINFO_TCP_FLAGS_ORIGINAL/REPLY`, a `struct nf_ct_tcp_flags`
//! of flags and mask), so this sends, per connection, an `IPCTNL_MSG_CT_NEW` without
//! `NLM_F_CREATE` (an update of an existing entry only) that sets `BE_LIBERAL` and clears
//! `MAXACK_SET` in both directions.
use std::{io, net::Ipv6Addr};

use dxdp_common::tcp_window::{FLAG_BE_LIBERAL, FLAG_MAXACK_SET, WindowKey};

use crate::nfnetlink;

const NFNL_SUBSYS_CTNETLINK: u16 = 1;
const IPCTNL_MSG_CT_NEW: u16 = 0;
#[cfg(test)]
const IPCTNL_MSG_CT_GET: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const NLMSG_HDRLEN: usize = 16;
const NLA_F_NESTED: u16 = 0x8000;
const CTA_TUPLE_ORIG: u16 = 1;
const CTA_PROTOINFO: u16 = 4;
const CTA_TUPLE_IP: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;
const CTA_IP_V4_SRC: u16 = 1;
const CTA_IP_V4_DST: u16 = 2;
const CTA_IP_V6_SRC: u16 = 3;
const CTA_IP_V6_DST: u16 = 4;
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_SRC_PORT: u16 = 2;
const CTA_PROTO_DST_PORT: u16 = 3;
const CTA_PROTOINFO_TCP: u16 = 1;
const CTA_PROTOINFO_TCP_FLAGS_ORIGINAL: u16 = 4;
const CTA_PROTOINFO_TCP_FLAGS_REPLY: u16 = 5;
const IPPROTO_TCP: u8 = 6;

/// A netlink attribute: header, payload, padding to four bytes.
fn attr(out: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    let len = 4 + payload.len();
    out.extend_from_slice(&(len as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(payload);
    out.resize(out.len().next_multiple_of(4), 0);
}

/// A nested attribute around what `inner` writes.
fn nested(out: &mut Vec<u8>, kind: u16, inner: impl FnOnce(&mut Vec<u8>)) {
    let mut body = Vec::new();
    inner(&mut body);
    attr(out, kind | NLA_F_NESTED, &body);
}

/// The update that hands the TCP connection `key` (its original tuple) back to conntrack:
/// `BE_LIBERAL` set and `MAXACK_SET` cleared in both directions; `seq` is the message's
/// sequence number.
pub(super) fn request(key: &WindowKey, seq: u32) -> Vec<u8> {
    // struct nf_ct_tcp_flags { flags, mask }.
    let flags = [FLAG_BE_LIBERAL, FLAG_BE_LIBERAL | FLAG_MAXACK_SET];
    message(key, seq, IPCTNL_MSG_CT_NEW, Some(flags))
}

/// A ctnetlink message of `kind` about `key`'s entry, setting `flags` (a `struct
/// nf_ct_tcp_flags`) in both directions if given.
fn message(key: &WindowKey, seq: u32, kind: u16, flags: Option<[u8; 2]>) -> Vec<u8> {
    let mut msg = vec![0u8; NLMSG_HDRLEN];
    // ctnetlink takes the tuple's family from nfgenmsg's: IPv4 where the key's addresses are
    // v4-mapped, with 4-byte attributes; IPv6 otherwise.
    let v4 = |a: &[u8; 16]| Ipv6Addr::from(*a).to_ipv4_mapped().map(|v4| v4.octets());
    let (family, src, dst): (_, Vec<u8>, Vec<u8>) = match (v4(&key.container), v4(&key.server)) {
        (Some(c), Some(s)) => (libc::AF_INET, c.to_vec(), s.to_vec()),
        _ => (libc::AF_INET6, key.container.to_vec(), key.server.to_vec()),
    };
    let (src_kind, dst_kind) = if family == libc::AF_INET {
        (CTA_IP_V4_SRC, CTA_IP_V4_DST)
    } else {
        (CTA_IP_V6_SRC, CTA_IP_V6_DST)
    };
    // nfgenmsg: the family, version NFNETLINK_V0, res_id 0.
    msg.extend_from_slice(&[family as u8, 0, 0, 0]);
    nested(&mut msg, CTA_TUPLE_ORIG, |t| {
        nested(t, CTA_TUPLE_IP, |ip| {
            attr(ip, src_kind, &src);
            attr(ip, dst_kind, &dst);
        });
        nested(t, CTA_TUPLE_PROTO, |p| {
            attr(p, CTA_PROTO_NUM, &[IPPROTO_TCP]);
            attr(p, CTA_PROTO_SRC_PORT, &key.container_port.to_ne_bytes());
            attr(p, CTA_PROTO_DST_PORT, &key.server_port.to_ne_bytes());
        });
    });
    if let Some(flags) = flags {
        nested(&mut msg, CTA_PROTOINFO, |p| {
            nested(p, CTA_PROTOINFO_TCP, |tcp| {
                attr(tcp, CTA_PROTOINFO_TCP_FLAGS_ORIGINAL, &flags);
                attr(tcp, CTA_PROTOINFO_TCP_FLAGS_REPLY, &flags);
            });
        });
    }
    let len = msg.len() as u32;
    msg[0..4].copy_from_slice(&len.to_ne_bytes());
    let message_type = (NFNL_SUBSYS_CTNETLINK << 8) | kind;
    msg[4..6].copy_from_slice(&message_type.to_ne_bytes());
    // An update is acknowledged; a query is answered.
    let ack = if kind == IPCTNL_MSG_CT_NEW {
        libc::NLM_F_ACK
    } else {
        0
    };
    let nl_flags = (libc::NLM_F_REQUEST | ack) as u16;
    msg[6..8].copy_from_slice(&nl_flags.to_ne_bytes());
    msg[8..12].copy_from_slice(&seq.to_ne_bytes());
    msg
}

/// The error code of a netlink acknowledgement (0 for success).
fn ack_code(reply: &[u8]) -> io::Result<i32> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "bad ctnetlink acknowledgement");
    if reply.len() < NLMSG_HDRLEN + 4 {
        return Err(bad());
    }
    let kind = u16::from_ne_bytes([reply[4], reply[5]]);
    if kind != NLMSG_ERROR {
        return Err(bad());
    }
    Ok(i32::from_ne_bytes(
        reply[NLMSG_HDRLEN..NLMSG_HDRLEN + 4].try_into().unwrap(),
    ))
}

/// Hands each connection of `keys` back to conntrack; entries conntrack no longer holds are
/// skipped. Returns how many it marked.
pub(super) fn hand_back(keys: &[WindowKey]) -> io::Result<usize> {
    if keys.is_empty() {
        return Ok(0);
    }
    let socket = nfnetlink::open()?;
    let mut marked = 0;
    for (seq, key) in keys.iter().enumerate() {
        let mut reply = [0u8; 1024];
        let got = nfnetlink::exchange(&socket, &request(key, seq as u32 + 1), &mut reply)?;
        match ack_code(&reply[..got])? {
            0 => marked += 1,
            // Gone meanwhile (closed, expired, flushed): nothing to hand back.
            code if -code == libc::ENOENT => {}
            code => {
                let addr = |a: [u8; 16]| Ipv6Addr::from(a).to_canonical();
                return Err(io::Error::other(format!(
                    "conntrack refused to hand back {} port {} -> {} port {}: {}",
                    addr(key.container),
                    u16::from_be(key.container_port),
                    addr(key.server),
                    u16::from_be(key.server_port),
                    io::Error::from_raw_os_error(-code)
                )));
            }
        }
    }
    Ok(marked)
}

#[cfg(test)]
mod tests {
    use std::os::fd::OwnedFd;

    use dxdp_common::tcp_window::v4_mapped;

    use super::*;

    #[test]
    fn the_hand_back_message_is_a_ctnetlink_update_of_the_tcp_flags() {
        let key = WindowKey {
            container: v4_mapped([10, 0, 0, 2]),
            server: v4_mapped([192, 0, 2, 7]),
            container_port: 40000u16.to_be(),
            server_port: 80u16.to_be(),
        };
        let msg = request(&key, 9);
        let u16_at = |at: usize| u16::from_ne_bytes([msg[at], msg[at + 1]]);
        assert_eq!(
            u32::from_ne_bytes(msg[0..4].try_into().unwrap()) as usize,
            msg.len()
        );
        assert_eq!(
            u16_at(4),
            0x0100,
            "NFNL_SUBSYS_CTNETLINK, IPCTNL_MSG_CT_NEW"
        );
        assert_eq!(
            u16_at(6),
            0x0005,
            "NLM_F_REQUEST | NLM_F_ACK, no NLM_F_CREATE"
        );
        assert_eq!(u32::from_ne_bytes(msg[8..12].try_into().unwrap()), 9);
        assert_eq!(msg[16], 2, "AF_INET");
        let expected: &[u8] = &[
            // CTA_TUPLE_ORIG, nested: 4 + (4 + 2 * 8) + (4 + 8 + 8 + 8) = 52 bytes.
            52, 0, 1, 0x80, //
            20, 0, 1, 0x80, // CTA_TUPLE_IP
            8, 0, 1, 0, 10, 0, 0, 2, // CTA_IP_V4_SRC
            8, 0, 2, 0, 192, 0, 2, 7, // CTA_IP_V4_DST
            28, 0, 2, 0x80, // CTA_TUPLE_PROTO
            5, 0, 1, 0, 6, 0, 0, 0, // CTA_PROTO_NUM, padded
            6, 0, 2, 0, 0x9c, 0x40, 0, 0, // CTA_PROTO_SRC_PORT 40000, big-endian
            6, 0, 3, 0, 0, 80, 0, 0, // CTA_PROTO_DST_PORT 80
            // CTA_PROTOINFO { CTA_PROTOINFO_TCP { FLAGS_ORIGINAL, FLAGS_REPLY } }.
            24, 0, 4, 0x80, //
            20, 0, 1, 0x80, //
            6, 0, 4, 0, 0x08, 0x28, 0, 0, // BE_LIBERAL set, BE_LIBERAL | MAXACK_SET masked
            6, 0, 5, 0, 0x08, 0x28, 0, 0,
        ];
        assert_eq!(&msg[20..], expected);
    }

    /// An IPv6 connection's: family `AF_INET6` and the 16-byte address attributes.
    #[test]
    fn an_ipv6_connections_hand_back_names_its_tuple_by_ipv6_attributes() {
        let container: Ipv6Addr = "fd00:9::2".parse().unwrap();
        let server: Ipv6Addr = "2001:db8::7".parse().unwrap();
        let key = WindowKey {
            container: container.octets(),
            server: server.octets(),
            container_port: 40000u16.to_be(),
            server_port: 80u16.to_be(),
        };
        let msg = request(&key, 1);
        assert_eq!(msg[16], 10, "AF_INET6");
        let mut tuple_ip = vec![44, 0, 1, 0x80, 20, 0, 3, 0];
        tuple_ip.extend_from_slice(&container.octets());
        tuple_ip.extend_from_slice(&[20, 0, 4, 0]);
        tuple_ip.extend_from_slice(&server.octets());
        // CTA_TUPLE_ORIG's header, then CTA_TUPLE_IP { CTA_IP_V6_SRC, CTA_IP_V6_DST }.
        assert_eq!(&msg[20..22], &(4u16 + 44 + 28).to_ne_bytes());
        assert_eq!(&msg[24..24 + tuple_ip.len()], &tuple_ip[..]);
    }

    /// `CTA_PROTOINFO_TCP_FLAGS_ORIGINAL` and `_REPLY` of `key`'s entry, by `IPCTNL_MSG_CT_GET`.
    fn tcp_flags(socket: &OwnedFd, key: &WindowKey) -> [u8; 2] {
        let mut reply = [0u8; 4096];
        let got = nfnetlink::exchange(
            socket,
            &message(key, 1, IPCTNL_MSG_CT_GET, None),
            &mut reply,
        )
        .unwrap();
        // The attributes of a level: (type, payload) pairs.
        fn attrs(mut at: &[u8]) -> Vec<(u16, &[u8])> {
            let mut out = Vec::new();
            while at.len() >= 4 {
                let len = u16::from_ne_bytes([at[0], at[1]]) as usize;
                let kind = u16::from_ne_bytes([at[2], at[3]]) & 0x3fff;
                if len < 4 || len > at.len() {
                    break;
                }
                out.push((kind, &at[4..len]));
                at = &at[len.next_multiple_of(4).min(at.len())..];
            }
            out
        }
        let top = attrs(&reply[NLMSG_HDRLEN + 4..got]);
        let protoinfo = top
            .iter()
            .find(|(k, _)| *k == CTA_PROTOINFO)
            .expect("CTA_PROTOINFO")
            .1;
        let tcp = attrs(protoinfo)[0].1;
        let flags = attrs(tcp);
        let of = |kind| flags.iter().find(|(k, _)| *k == kind).expect("flags").1[0];
        [
            of(CTA_PROTOINFO_TCP_FLAGS_ORIGINAL),
            of(CTA_PROTOINFO_TCP_FLAGS_REPLY),
        ]
    }

    /// On the running kernel, in a network namespace of the test's own: ESTABLISHED entries
    /// made with `conntrack -I`, one IPv4 and one IPv6, are marked liberal both ways by the
    /// hand-back, an absent one is skipped. Skipped without root or the conntrack tool.
    #[test]
    fn conntrack_takes_the_hand_back() {
        let tool = |args: &[&str]| {
            std::process::Command::new(args[0])
                .args(&args[1..])
                .output()
        };
        if !nix::unistd::Uid::effective().is_root() || tool(&["conntrack", "--version"]).is_err() {
            eprintln!("skipping: needs root and the conntrack tool");
            return;
        }
        let ns = format!("dxdp-handback-{}", std::process::id());
        tool(&["ip", "netns", "add", &ns]).unwrap();
        let insert = |src: &str, dst: &str| {
            tool(&[
                "ip",
                "netns",
                "exec",
                &ns,
                "conntrack",
                "-I",
                "-p",
                "tcp",
                "-s",
                src,
                "-d",
                dst,
                "--sport",
                "40000",
                "--dport",
                "80",
                "--state",
                "ESTABLISHED",
                "-t",
                "60",
                "-u",
                "SEEN_REPLY",
            ])
            .unwrap()
        };
        let made = [
            insert("10.9.0.2", "10.9.0.3"),
            insert("fd00:9::2", "fd00:9::3"),
        ];
        let key = |container: [u8; 16], server: [u8; 16]| WindowKey {
            container,
            server,
            container_port: 40000u16.to_be(),
            server_port: 80u16.to_be(),
        };
        let v6 = |s: &str| s.parse::<Ipv6Addr>().unwrap().octets();
        let keys = [
            key(v4_mapped([10, 9, 0, 2]), v4_mapped([10, 9, 0, 3])),
            key(v6("fd00:9::2"), v6("fd00:9::3")),
        ];
        let absent = WindowKey {
            server_port: 81u16.to_be(),
            ..keys[0]
        };
        let path = format!("/run/netns/{ns}");
        let outcome = std::thread::spawn(move || {
            let file = std::fs::File::open(path).unwrap();
            nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            let socket = nfnetlink::open().unwrap();
            for key in &keys {
                // Entries made by ctnetlink start liberal: strict first, as conntrack makes
                // them.
                let strict = message(key, 1, IPCTNL_MSG_CT_NEW, Some([0, FLAG_BE_LIBERAL]));
                let mut reply = [0u8; 1024];
                let got = nfnetlink::exchange(&socket, &strict, &mut reply).unwrap();
                assert_eq!(ack_code(&reply[..got]).unwrap(), 0);
            }
            let before = keys.map(|k| tcp_flags(&socket, &k));
            let marked = hand_back(&[keys[0], keys[1], absent]).unwrap();
            (before, marked, keys.map(|k| tcp_flags(&socket, &k)))
        })
        .join();
        tool(&["ip", "netns", "del", &ns]).unwrap();
        for made in &made {
            assert!(made.status.success(), "{made:?}");
        }
        let (before, marked, after) = outcome.unwrap();
        assert_eq!(marked, 2, "the absent entry is skipped");
        for (before, after) in before.iter().zip(&after) {
            assert_eq!(before.map(|f| f & FLAG_BE_LIBERAL), [0, 0]);
            assert_eq!(after.map(|f| f & FLAG_BE_LIBERAL), [FLAG_BE_LIBERAL; 2]);
            assert_eq!(after.map(|f| f & FLAG_MAXACK_SET), [0, 0]);
        }
    }

    #[test]
    fn acknowledgements_give_their_error_code() {
        let mut reply = vec![0u8; 36];
        reply[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        assert_eq!(ack_code(&reply).unwrap(), 0);
        reply[16..20].copy_from_slice(&(-libc::ENOENT).to_ne_bytes());
        assert_eq!(ack_code(&reply).unwrap(), -libc::ENOENT);
        assert!(ack_code(&reply[..10]).is_err());
    }
}
