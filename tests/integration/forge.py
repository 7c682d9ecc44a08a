#!/usr/bin/env python3
"""UDP datagrams with a forged source address, as a container with CAP_NET_RAW (a Docker
default) can send them, and a receiver that counts what arrives. Run inside a container's
network namespace (nsenter -n) by tests/integration/firewall.rs.

  forge.py send IFACE DST_MAC SRC_MAC SRC_IP DST_IP PORT COUNT
      COUNT frames straight onto IFACE through an AF_PACKET socket: Ethernet DST_MAC <- SRC_MAC,
      IPv4 or IPv6 (by the addresses' form) SRC_IP -> DST_IP, UDP to PORT, valid checksums.
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


def frame(dst_mac, src_mac, src_ip, dst_ip, port, seq):
    src, dst = ipaddress.ip_address(src_ip), ipaddress.ip_address(dst_ip)
    payload = b"dxdp-forged-%08d" % seq
    udp_len = 8 + len(payload)
    if src.version == 4:
        pseudo = src.packed + dst.packed + struct.pack("!BBH", 0, 17, udp_len)
    else:
        pseudo = src.packed + dst.packed + struct.pack("!I3xB", udp_len, 17)
    udp = struct.pack("!HHHH", 40000 + seq % 1000, port, udp_len, 0) + payload
    udp_sum = checksum(pseudo + udp) or 0xFFFF
    udp = udp[:6] + struct.pack("!H", udp_sum) + udp[8:]
    if src.version == 4:
        head = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, seq & 0xFFFF, 0, 64, 17, 0,
                           src.packed, dst.packed)
        head = head[:10] + struct.pack("!H", checksum(head)) + head[12:]
        ethertype = 0x0800
    else:
        head = struct.pack("!IHBB16s16s", 6 << 28, udp_len, 17, 64, src.packed, dst.packed)
        ethertype = 0x86DD
    mac = lambda m: bytes.fromhex(m.replace(":", ""))
    return mac(dst_mac) + mac(src_mac) + struct.pack("!H", ethertype) + head + udp


def send(iface, dst_mac, src_mac, src_ip, dst_ip, port, count):
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
        s.bind((iface, 0))
        for seq in range(int(count)):
            s.send(frame(dst_mac, src_mac, src_ip, dst_ip, int(port), seq))
            # Paced, so that no queue on the way drops any: the count must be exact.
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
    {"send": send, "receive": receive}[sys.argv[1]](*sys.argv[2:])
