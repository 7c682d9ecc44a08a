//! The measured flow's frame: Ethernet, IPv4 and UDP headers, built by hand.
use std::net::Ipv4Addr;

use anyhow::{Result, anyhow, bail};

use crate::netlink::MacAddr;

pub(super) const ETH_HEADER: usize = 14;
pub(super) const IPV4_HEADER: usize = 20;
pub(super) const UDP_HEADER: usize = 8;

/// The addresses of the measured flow: A's interface to B's, one UDP port.
#[derive(Clone, Debug)]
pub struct Flow {
    pub src_mac: MacAddr,
    pub dst_mac: MacAddr,
    pub src_ip: Ipv4Addr,
    pub dst_ip: Ipv4Addr,
    pub port: u16,
}

/// An Ethernet/IPv4/UDP frame of `size` bytes (headers included, FCS not) carrying the flow:
/// DF set, TTL 64, the IPv4 header checksum computed, no UDP checksum (optional over IPv4).
pub(super) fn frame(flow: &Flow, size: usize) -> Result<Vec<u8>> {
    let headers = ETH_HEADER + IPV4_HEADER + UDP_HEADER;
    if size < headers {
        bail!("a frame of {size} bytes cannot hold the {headers} bytes of headers");
    }
    let ip_len = u16::try_from(size - ETH_HEADER)
        .map_err(|_| anyhow!("a frame of {size} bytes is too long for IPv4"))?;
    let udp_len = ip_len - IPV4_HEADER as u16;
    let mut f = Vec::with_capacity(size);
    f.extend_from_slice(&flow.dst_mac);
    f.extend_from_slice(&flow.src_mac);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let ip_start = f.len();
    f.extend_from_slice(&[0x45, 0]); // version 4, 5 words of header; DSCP/ECN 0
    f.extend_from_slice(&ip_len.to_be_bytes());
    f.extend_from_slice(&0u16.to_be_bytes()); // identification
    f.extend_from_slice(&0x4000u16.to_be_bytes()); // DF, offset 0
    f.extend_from_slice(&[64, 17]); // TTL, UDP
    f.extend_from_slice(&0u16.to_be_bytes()); // checksum, filled below
    f.extend_from_slice(&flow.src_ip.octets());
    f.extend_from_slice(&flow.dst_ip.octets());
    let checksum = ipv4_checksum(&f[ip_start..]);
    f[ip_start + 10..ip_start + 12].copy_from_slice(&checksum.to_be_bytes());
    f.extend_from_slice(&flow.port.to_be_bytes());
    f.extend_from_slice(&flow.port.to_be_bytes());
    f.extend_from_slice(&udp_len.to_be_bytes());
    f.extend_from_slice(&0u16.to_be_bytes());
    f.resize(size, b'x');
    Ok(f)
}

/// The Internet checksum (RFC 1071) of `header`: the ones' complement of the ones' complement
/// sum of its 16-bit words. Over a header that carries its checksum, the result is 0.
pub(super) fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w.get(1).copied().unwrap_or(0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}
