//! The nf_tables generation: a counter the kernel moves on every committed change to the
//! nftables ruleset, which holds iptables-nft's rules too. Asking for it is one netlink round
//! trip (`NFT_MSG_GETGEN`, what `nft monitor` and libnftables use to detect a concurrent
//! change), so the watch reads and parses the whole ruleset again only when it moved.
use std::io;

use crate::nfnetlink;

const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFT_MSG_NEWGEN: u16 = 15;
const NFT_MSG_GETGEN: u16 = 16;
const NFTA_GEN_ID: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const NLMSG_HDRLEN: usize = 16;
const NFGENMSG_LEN: usize = 4;
/// Attribute type bits that are flags, not the type (NLA_F_NESTED, NLA_F_NET_BYTEORDER).
const NLA_TYPE_MASK: u16 = 0x3fff;

/// The current nf_tables generation of this network namespace.
pub(super) fn current() -> io::Result<u32> {
    let socket = nfnetlink::open()?;
    let mut reply = [0u8; 4096];
    let got = nfnetlink::exchange(&socket, &request(), &mut reply)?;
    parse(&reply[..got])
}

/// nlmsghdr + nfgenmsg asking for the generation, in host byte order as netlink wants.
fn request() -> [u8; NLMSG_HDRLEN + NFGENMSG_LEN] {
    let mut msg = [0u8; NLMSG_HDRLEN + NFGENMSG_LEN];
    let len = msg.len() as u32;
    msg[0..4].copy_from_slice(&len.to_ne_bytes());
    msg[4..6].copy_from_slice(&((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETGEN).to_ne_bytes());
    msg[6..8].copy_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    msg[8..12].copy_from_slice(&1u32.to_ne_bytes());
    // nfgenmsg: family AF_UNSPEC, version NFNETLINK_V0, res_id 0.
    msg
}

fn parse(reply: &[u8]) -> io::Result<u32> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
    if reply.len() < NLMSG_HDRLEN {
        return Err(bad("short netlink reply to NFT_MSG_GETGEN"));
    }
    let len = (u32::from_ne_bytes(reply[0..4].try_into().unwrap()) as usize).min(reply.len());
    let kind = u16::from_ne_bytes(reply[4..6].try_into().unwrap());
    if kind == NLMSG_ERROR {
        let code = reply
            .get(NLMSG_HDRLEN..NLMSG_HDRLEN + 4)
            .map(|b| i32::from_ne_bytes(b.try_into().unwrap()))
            .ok_or_else(|| bad("short netlink error"))?;
        return Err(io::Error::from_raw_os_error(-code));
    }
    if kind != (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWGEN {
        return Err(bad("unexpected netlink reply to NFT_MSG_GETGEN"));
    }
    let mut at = NLMSG_HDRLEN + NFGENMSG_LEN;
    while at + 4 <= len {
        let attr_len = u16::from_ne_bytes(reply[at..at + 2].try_into().unwrap()) as usize;
        let attr_type = u16::from_ne_bytes(reply[at + 2..at + 4].try_into().unwrap());
        if attr_len < 4 || at + attr_len > len {
            break;
        }
        if attr_type & NLA_TYPE_MASK == NFTA_GEN_ID && attr_len >= 8 {
            // nf_tables attributes are big-endian.
            return Ok(u32::from_be_bytes(
                reply[at + 4..at + 8].try_into().unwrap(),
            ));
        }
        at += attr_len.next_multiple_of(4);
    }
    Err(bad("NFT_MSG_NEWGEN without NFTA_GEN_ID"))
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    fn reply_with(id: u32) -> Vec<u8> {
        let mut msg = Vec::new();
        let kind = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWGEN;
        msg.extend_from_slice(&36u32.to_ne_bytes());
        msg.extend_from_slice(&kind.to_ne_bytes());
        msg.extend_from_slice(&[0; 10]);
        msg.extend_from_slice(&[0; 4]);
        // NFTA_GEN_ID, then NFTA_GEN_PROC_PID: the id is found whatever follows.
        msg.extend_from_slice(&8u16.to_ne_bytes());
        msg.extend_from_slice(&NFTA_GEN_ID.to_ne_bytes());
        msg.extend_from_slice(&id.to_be_bytes());
        msg.extend_from_slice(&8u16.to_ne_bytes());
        msg.extend_from_slice(&2u16.to_ne_bytes());
        msg.extend_from_slice(&7u32.to_be_bytes());
        msg
    }

    #[test]
    fn parses_the_generation_id() {
        assert_eq!(parse(&reply_with(0x0102_0304)).unwrap(), 0x0102_0304);
    }

    #[test]
    fn a_netlink_error_is_the_kernels_errno() {
        let mut msg = Vec::new();
        msg.extend_from_slice(&36u32.to_ne_bytes());
        msg.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        msg.extend_from_slice(&[0; 10]);
        msg.extend_from_slice(&(-libc::EPERM).to_ne_bytes());
        let err = parse(&msg).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EPERM));
    }

    #[test]
    fn a_reply_without_the_id_is_an_error() {
        let mut msg = reply_with(5);
        msg.truncate(NLMSG_HDRLEN + NFGENMSG_LEN);
        msg[0..4].copy_from_slice(&((NLMSG_HDRLEN + NFGENMSG_LEN) as u32).to_ne_bytes());
        assert!(parse(&msg).is_err());
    }

    /// Against the running kernel: a table added and deleted by `nft` moves the generation.
    #[test]
    fn the_generation_moves_with_a_ruleset_change() {
        if !nix::unistd::geteuid().is_root() || Command::new("nft").arg("-v").output().is_err() {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI: this test needs root and nft (apt-get install nftables)"
            );
            return;
        }
        let table = format!("dxdp_gen_test_{}", std::process::id());
        let mut cache = super::super::RulesetCache::default();
        cache.refresh().expect("the host's rules read");
        cache.refresh().expect("the host's rules, held");
        let reads = cache.reads();
        let legacy = super::super::read::legacy_tables_loaded();
        assert_eq!(
            reads,
            if legacy { 2 } else { 1 },
            "an unchanged ruleset was read again"
        );
        let before = current().expect("NFT_MSG_GETGEN");
        let nft = |args: &[&str]| {
            let ok = Command::new("nft").args(args).status().unwrap().success();
            assert!(ok, "nft {args:?}");
        };
        nft(&["add", "table", "inet", &table]);
        let added = current().expect("NFT_MSG_GETGEN");
        cache.refresh().expect("the host's rules read");
        assert_eq!(
            cache.reads(),
            reads + 1,
            "a changed ruleset was not read again"
        );
        nft(&["delete", "table", "inet", &table]);
        let deleted = current().expect("NFT_MSG_GETGEN");
        assert_ne!(before, added, "adding a table did not move the generation");
        assert_ne!(
            added, deleted,
            "deleting a table did not move the generation"
        );
        // Asking does not move it.
        assert_eq!(current().unwrap(), current().unwrap());
    }
}
