#!/usr/bin/env python3
"""Packets with a forged source address, and a receiver that counts what arrives.

  forge.py send IFACE DST_MAC SRC_MAC SRC_IP DST_IP PORT COUNT
      COUNT frames straight onto IFACE through an AF_PACKET socket: Ethernet DST_MAC <- SRC_MAC,
      IPv4 or IPv6 (by the addresses' form) SRC_IP -> DST_IP, UDP to PORT, valid checksums. As a
      container with CAP_NET_RAW (a Docker default) can send them, run inside its network
      namespace (nsenter -n) by tests/integration/firewall.rs.
  forge.py syn IFACE DST_MAC SRC_MAC SRC_IP DST_IP PORT COUNT
      COUNT TCP connections opened from SRC_IP (ports 20000 on) to DST_IP:PORT by a sender that
      never sees the answers: a SYN, then an ACK that guesses the acknowledgement number, as a
      flood from forged addresses looks. Run by tests/integration/ingress.rs in its client
      namespace.
  forge.py udp-flood IFACE DST_MAC SRC_MAC SRC_IP DST_IP PORT COUNT
      COUNT UDP flows from SRC_IP (ports 20000 on) to DST_IP:PORT, a datagram each, by a sender
      that never sees the answers. Run by tests/integration/ingress.rs in its client namespace.
  forge.py receive PORT QUIET_SECONDS
      Binds UDP PORT on every address, prints "ready", then counts datagrams until none came for
      QUIET_SECONDS (or 10 s in all), and prints the count.
"""
import ipaddress
import socket
import struct
import sys
import time


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def frame(dst_mac, src_mac, src_ip, dst_ip, proto, l4, csum_at, ident):
    """An Ethernet frame carrying the layer-4 segment `l4` (its checksum, at `csum_at`, zero)."""
    src, dst = ipaddress.ip_address(src_ip), ipaddress.ip_address(dst_ip)
    if src.version == 4:
        pseudo = src.packed + dst.packed + struct.pack("!BBH", 0, proto, len(l4))
    else:
        pseudo = src.packed + dst.packed + struct.pack("!I3xB", len(l4), proto)
    l4_sum = checksum(pseudo + l4) or 0xFFFF
    l4 = l4[:csum_at] + struct.pack("!H", l4_sum) + l4[csum_at + 2:]
    if src.version == 4:
        head = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), ident & 0xFFFF, 0, 64, proto,
                           0, src.packed, dst.packed)
        head = head[:10] + struct.pack("!H", checksum(head)) + head[12:]
        ethertype = 0x0800
    else:
        head = struct.pack("!IHBB16s16s", 6 << 28, len(l4), proto, 64, src.packed, dst.packed)
        ethertype = 0x86DD
    mac = lambda m: bytes.fromhex(m.replace(":", ""))
    return mac(dst_mac) + mac(src_mac) + struct.pack("!H", ethertype) + head + l4


def datagram(dst_mac, src_mac, src_ip, dst_ip, sport, port, seq):
    payload = b"dxdp-forged-%08d" % seq
    udp = struct.pack("!HHHH", sport, port, 8 + len(payload), 0) + payload
    return frame(dst_mac, src_mac, src_ip, dst_ip, 17, udp, 6, seq)


def segment(dst_mac, src_mac, src_ip, dst_ip, sport, dport, flags, seq, ack):
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, 5 << 4, flags, 65535, 0, 0)
    return frame(dst_mac, src_mac, src_ip, dst_ip, 6, tcp, 16, sport)


def send(iface, dst_mac, src_mac, src_ip, dst_ip, port, count):
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
        s.bind((iface, 0))
        for seq in range(int(count)):
            sport = 40000 + seq % 1000
            s.send(datagram(dst_mac, src_mac, src_ip, dst_ip, sport, int(port), seq))
            # Paced, so that no queue on the way drops any: the count must be exact.
            time.sleep(0.001)


def syn(iface, dst_mac, src_mac, src_ip, dst_ip, port, count):
    syn_flag, ack_flag = 0x02, 0x10
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
        s.bind((iface, 0))
        for i in range(int(count)):
            sport, isn = 20000 + i, 1000 + 7 * i
            s.send(segment(dst_mac, src_mac, src_ip, dst_ip, sport, int(port), syn_flag, isn, 0))
            # What the container's SYN-ACK would say is unknown to a forger: a guess.
            s.send(segment(dst_mac, src_mac, src_ip, dst_ip, sport, int(port), ack_flag,
                           isn + 1, 0x5EED0000 + i))
            if i % 64 == 63:
                # Paced a little, so that the NIC's backlog (1000 frames) never overflows.
                time.sleep(0.001)


def udp_flood(iface, dst_mac, src_mac, src_ip, dst_ip, port, count):
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
        s.bind((iface, 0))
        for i in range(int(count)):
            s.send(datagram(dst_mac, src_mac, src_ip, dst_ip, 20000 + i, int(port), i))
            if i % 16 == 15:
                # Paced so that the receiver can answer most: 16,000 datagrams a second.
                time.sleep(0.001)


def receive(port, quiet):
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        s.bind(("::", int(port)))
        print("ready", flush=True)
        s.settimeout(float(quiet))
        count, deadline = 0, time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                s.recv(2048)
            except socket.timeout:
                break
            count += 1
        print(count, flush=True)


if __name__ == "__main__":
    {"send": send, "syn": syn, "udp-flood": udp_flood, "receive": receive}[sys.argv[1]](*sys.argv[2:])
