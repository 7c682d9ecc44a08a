//! The NIC program of published ports (`dxdp_ingress`) on crafted packets: only a packet whose
//! layer-4 checksum conntrack takes enters the container; one with a wrong sum is left to the
//! stack, where conntrack marks it invalid and Docker's DNAT never translates it.
//!
//! The namespace's `ingress` veth plays the NIC (10.99.0.1, fd99::1; the client behind it is
//! .2 and ::2), `target` the container's host veth. Test-run builds its skb as
//! `CHECKSUM_NONE`, so every sum is checked, as for a packet from a device that checks none.

use std::process::Command;

use aya::{
    TestRun, TestRunOptions,
    maps::{DevMapHash, PerCpuHashMap, PerCpuValues},
    programs::SchedClassifier,
};
use dxdp_common::ingress::{PortKey, PortTarget, names as ingress_names};
use etherparse::PacketBuilder;

use super::{
    Datapath, Prog, TC_ACT_REDIRECT, TC_ACT_UNSPEC, cpus, in_private_netns, sk_buff_ctx, v4_mapped,
};
use crate::support::{can_run, missing_root_and_bpffs};

const NIC_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x99, 0x01];
const CLIENT_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x99, 0x02];
const HOST: [u8; 4] = [10, 99, 0, 1];
const CLIENT: [u8; 4] = [10, 99, 0, 2];
const HOST6: [u8; 16] = [0xfd, 0x99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const CLIENT6: [u8; 16] = [0xfd, 0x99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
const PUBLISHED: u16 = 8080;
const UDP: u8 = 17;
const TCP: u8 = 6;

/// What a packet's checksum field holds.
#[derive(Clone, Copy, Debug)]
enum Sum {
    /// The right sum.
    Right,
    /// The right sum with one bit flipped.
    Wrong,
    /// Zero: UDP's "no checksum".
    Zero,
    /// The pseudo-header's sum alone: what a local stack leaves for offload.
    Offload,
}

/// A packet from the client to the published port `PUBLISHED` of the NIC's address, from
/// `client_port`: UDP, or a TCP SYN.
fn packet(v6: bool, proto: u8, client_port: u16, sum: Sum) -> Vec<u8> {
    let builder = PacketBuilder::ethernet2(CLIENT_MAC, NIC_MAC);
    let payload = [0x5au8; 21];
    let mut out = Vec::new();
    let builder = if v6 {
        builder.ipv6(CLIENT6, HOST6, 64)
    } else {
        builder.ipv4(CLIENT, HOST, 64)
    };
    if proto == UDP {
        builder
            .udp(client_port, PUBLISHED)
            .write(&mut out, &payload)
            .expect("a UDP packet");
    } else {
        builder
            .tcp(client_port, PUBLISHED, 1000, 64240)
            .syn()
            .write(&mut out, &payload)
            .expect("a TCP SYN");
    }
    let l4 = 14 + if v6 { 40 } else { 20 };
    let at = l4 + if proto == UDP { 6 } else { 16 };
    match sum {
        Sum::Right => {}
        Sum::Wrong => out[at + 1] ^= 0x01,
        Sum::Zero => out[at..at + 2].copy_from_slice(&[0, 0]),
        Sum::Offload => {
            let len = (out.len() - l4) as u32;
            let mut total: u32 = 0;
            let (src, dst): (&[u8], &[u8]) = if v6 {
                (&CLIENT6, &HOST6)
            } else {
                (&CLIENT, &HOST)
            };
            for pair in src.chunks(2).chain(dst.chunks(2)) {
                total += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
            }
            total += u32::from(proto) + (len & 0xffff) + (len >> 16);
            while total > 0xffff {
                total = (total & 0xffff) + (total >> 16);
            }
            out[at..at + 2].copy_from_slice(&(total as u16).to_be_bytes());
        }
    }
    out
}

fn ip(args: &[&str]) {
    let status = Command::new("ip")
        .args(args)
        .status()
        .expect("cannot run ip");
    assert!(status.success(), "ip {args:?} failed");
}

#[test]
fn a_published_port_takes_only_packets_whose_checksum_conntrack_takes() {
    if !can_run(missing_root_and_bpffs()) {
        return;
    }
    in_private_netns(|net| {
        // The NIC: its own MAC (frames to it are the host's to route), addresses, routes back
        // to the client, and forwarding on (the FIB helper refuses to look up otherwise).
        ip(&["link", "set", "ingress", "address", "02:00:00:00:99:01"]);
        ip(&["link", "set", "ingress", "up"]);
        ip(&["link", "set", "target", "up"]);
        ip(&["addr", "add", "10.99.0.1/24", "dev", "ingress"]);
        ip(&["addr", "add", "fd99::1/64", "dev", "ingress", "nodad"]);
        for sysctl in [
            "/proc/sys/net/ipv4/conf/all/forwarding",
            "/proc/sys/net/ipv4/conf/ingress/forwarding",
            "/proc/sys/net/ipv6/conf/all/forwarding",
            "/proc/sys/net/ipv6/conf/ingress/forwarding",
        ] {
            std::fs::write(sysctl, "1").unwrap_or_else(|e| panic!("{sysctl}: {e}"));
        }
        let mut dp = Datapath::load(Prog::Tc);
        let program: &mut SchedClassifier = dp
            .ebpf
            .program_mut(ingress_names::INGRESS_PROGRAM)
            .expect("object lacks dxdp_ingress")
            .try_into()
            .expect("dxdp_ingress is not tc");
        program.load().expect("cannot load dxdp_ingress");
        let mut veths: DevMapHash<_> = dp.map_mut(ingress_names::VETHS);
        veths.insert(net.target, net.target, None, 0).unwrap();
        let target = PortTarget {
            addr: v4_mapped([10, 99, 1, 2]),
            veth_ifindex: net.target,
            port: 80,
            mac: [0x02, 0x42, 0x0a, 0x63, 0x01, 0x02],
            gateway_mac: [0x02, 0x42, 0x0a, 0x63, 0x01, 0x01],
            ..PortTarget::default()
        };
        let keys: Vec<PortKey> = [(v4_mapped(HOST), UDP), (v4_mapped(HOST), TCP)]
            .into_iter()
            .chain([(HOST6, UDP), (HOST6, TCP)])
            .map(|(addr, proto)| PortKey {
                nic_ifindex: net.ingress,
                port: PUBLISHED,
                proto,
                _pad: 0,
                addr,
            })
            .collect();
        let mut ports: PerCpuHashMap<_, PortKey, PortTarget> = dp.map_mut(ingress_names::PORTS);
        for key in &keys {
            let target = PortTarget {
                addr: if key.addr == HOST6 {
                    [0xfd, 0x99, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]
                } else {
                    target.addr
                },
                ..target
            };
            let values = PerCpuValues::try_from(vec![target; cpus()]).unwrap();
            ports.insert(*key, values, 0).unwrap();
        }
        let run = |dp: &Datapath, frame: &[u8]| -> u32 {
            let program: &SchedClassifier = dp
                .ebpf
                .program(ingress_names::INGRESS_PROGRAM)
                .unwrap()
                .try_into()
                .unwrap();
            program
                .test_run(TestRunOptions {
                    data_in: Some(frame),
                    ctx_in: Some(&sk_buff_ctx(net.ingress)),
                    ..TestRunOptions::new()
                })
                .expect("test run of dxdp_ingress")
                .return_value
        };
        // (in, passed) packets of a port, summed over CPUs.
        let carried = |dp: &Datapath, v6: bool, proto: u8| -> (u64, u64) {
            let ports: PerCpuHashMap<_, PortKey, PortTarget> = dp.map(ingress_names::PORTS);
            let key = keys[usize::from(v6) * 2 + usize::from(proto == TCP)];
            let per_cpu = ports.get(&key, 0).expect("the port's entry");
            per_cpu
                .iter()
                .fold((0, 0), |(i, p), t| (i + t.in_packets, p + t.passed_packets))
        };

        let mut client_port = 40000;
        for v6 in [false, true] {
            for proto in [UDP, TCP] {
                let mut expected = (0, 0);
                let mut cases = vec![Sum::Right, Sum::Wrong, Sum::Offload];
                if proto == UDP {
                    cases.push(Sum::Zero);
                }
                for sum in cases {
                    client_port += 1;
                    let verdict = run(&dp, &packet(v6, proto, client_port, sum));
                    let taken = !matches!(sum, Sum::Wrong);
                    let (want, name) = if taken {
                        expected.0 += 1;
                        (TC_ACT_REDIRECT, "into the container")
                    } else {
                        expected.1 += 1;
                        (TC_ACT_UNSPEC, "to the stack")
                    };
                    assert_eq!(
                        verdict, want,
                        "v6 {v6}, protocol {proto}, checksum {sum:?}: not {name}"
                    );
                    assert_eq!(
                        carried(&dp, v6, proto),
                        expected,
                        "v6 {v6}, protocol {proto}, checksum {sum:?}: (in, passed) packets"
                    );
                }
            }
        }
    });
}
