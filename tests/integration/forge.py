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
  forge.py too-big IFACE DST_MAC SRC_MAC SRC_IP DST_IP QUOTED_SPORT QUOTED_DST QUOTED_DPORT MTU
      One ICMP "fragmentation needed" (IPv4) or ICMPv6 "packet too big" from SRC_IP to DST_IP,
      quoting a UDP datagram from DST_IP:QUOTED_SPORT to QUOTED_DST:QUOTED_DPORT, as a router
      on the way to QUOTED_DST would send it about a reply too big for its next link; MTU is the
      link's. Run by tests/integration/ingress.rs in its client namespace, from sources the
      stack must refuse.
  forge.py odd IFACE DST_MAC SRC_MAC SRC_IP DST_IP PORT KIND
      One UDP datagram (a TCP segment for the kinds syn-fin and no-flags) to DST_IP:PORT that
      is wrong in the way KIND says (see ODD: broadcast, multicast or another host's MAC, a VLAN
      tag, TTL or hop limit 0 or 1, a bad IPv4 header checksum, an IP or UDP length that does
      not fit, TCP flags conntrack refuses), or "valid" ("valid-last": the last a `receive`
      counts). Run by tests/integration/ingress.rs.
  forge.py syn-ack IFACE DST_MAC SRC_MAC SRC_IP DST_IP PORT [after-rst]
      From SRC_IP port 41000 to DST_IP:PORT: a SYN, then (0.3 s later) a SYN-ACK of the same
      connection, which conntrack marks INVALID from the side that opened it. With after-rst,
      from port 41001 and an RST between the two (conntrack closes the connection). Run by
      tests/integration/ingress.rs in its client namespace.
  forge.py tcp-window IFACE DST_MAC SRC_MAC SRC_IP DST_IP SPORT DPORT
      Watches IFACE (bounded, 5 s) for a segment SRC_IP:SPORT -> DST_IP:DPORT that the far end
      sends, then forges three more of that connection onto IFACE, told apart by their IP ID:
      0xd001 an RST whose sequence number is 2^30 past the window, 0xd002 a data segment as far
      past it (its ACK as far, so that a reset the stack answers it with is out of window for the
      far end too), 0xd003 an ACK with the watched segment's numbers (in window). Run by
      tests/integration/egress.rs and ingress.rs in their outside namespaces.
  forge.py tcp-watch IFACE SECONDS OUT
      Writes to OUT the IP IDs (hex) of the segments tcp-window forged that IFACE receives over
      SECONDS (told by ID, flags and payload), one a line; OUT.ready (empty) once it watches. Run in a
      container's namespace.
  forge.py receive PORT QUIET_SECONDS [TOTAL_SECONDS]
      Binds UDP PORT on every address, prints "ready", then counts datagrams until none came for
      QUIET_SECONDS (or TOTAL_SECONDS in all, 10 by default) or one ending in "-last" came,
      and prints the count.
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


def frame(dst_mac, src_mac, src_ip, dst_ip, proto, l4, csum_at, ident, ttl=64, vlan=None,
          ip_len_extra=0, bad_ip_checksum=False):
    """An Ethernet frame carrying the layer-4 segment `l4` (its checksum, at `csum_at`, zero):
    with `ttl` as TTL or hop limit, behind an 802.1Q tag of VLAN `vlan`, its IP length
    `ip_len_extra` bytes longer than the packet, its IPv4 header checksum wrong, if asked."""
    src, dst = ipaddress.ip_address(src_ip), ipaddress.ip_address(dst_ip)
    if proto == 1:
        pseudo = b""  # ICMPv4's checksum covers its message alone
    elif src.version == 4:
        pseudo = src.packed + dst.packed + struct.pack("!BBH", 0, proto, len(l4))
    else:
        pseudo = src.packed + dst.packed + struct.pack("!I3xB", len(l4), proto)
    l4_sum = checksum(pseudo + l4) or 0xFFFF
    l4 = l4[:csum_at] + struct.pack("!H", l4_sum) + l4[csum_at + 2:]
    if src.version == 4:
        head = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4) + ip_len_extra, ident & 0xFFFF,
                           0, ttl, proto, 0, src.packed, dst.packed)
        head_sum = checksum(head) ^ (0x0101 if bad_ip_checksum else 0)
        head = head[:10] + struct.pack("!H", head_sum) + head[12:]
        ethertype = 0x0800
    else:
        head = struct.pack("!IHBB16s16s", 6 << 28, len(l4) + ip_len_extra, proto, ttl,
                           src.packed, dst.packed)
        ethertype = 0x86DD
    mac = lambda m: bytes.fromhex(m.replace(":", ""))
    tag = struct.pack("!HH", 0x8100, vlan) if vlan is not None else b""
    return mac(dst_mac) + mac(src_mac) + tag + struct.pack("!H", ethertype) + head + l4


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


def syn_ack(iface, dst_mac, src_mac, src_ip, dst_ip, port, after_rst=""):
    sport, isn = (41001 if after_rst else 41000), 0x5EED
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
        s.bind((iface, 0))
        s.send(segment(dst_mac, src_mac, src_ip, dst_ip, sport, int(port), 0x02, isn, 0))
        time.sleep(0.3)
        if after_rst:
            s.send(segment(dst_mac, src_mac, src_ip, dst_ip, sport, int(port), 0x04, isn + 1, 0))
            time.sleep(0.3)
        s.send(segment(dst_mac, src_mac, src_ip, dst_ip, sport, int(port), 0x12, isn, 1))


def udp_flood(iface, dst_mac, src_mac, src_ip, dst_ip, port, count):
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
        s.bind((iface, 0))
        for i in range(int(count)):
            s.send(datagram(dst_mac, src_mac, src_ip, dst_ip, 20000 + i, int(port), i))
            if i % 16 == 15:
                # Paced so that the receiver can answer most: 16,000 datagrams a second.
                time.sleep(0.001)


def too_big(iface, dst_mac, src_mac, src_ip, dst_ip, quoted_sport, quoted_dst, quoted_dport, mtu):
    """The error, quoting the IP header and UDP header of the reply it is about."""
    quoted_src = ipaddress.ip_address(dst_ip)
    quoted_to = ipaddress.ip_address(quoted_dst)
    udp = struct.pack("!HHHH", int(quoted_sport), int(quoted_dport), 1480, 0)
    if quoted_src.version == 4:
        inner = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 1500, 1, 0x4000, 63, 17, 0,
                            quoted_src.packed, quoted_to.packed)
        inner = inner[:10] + struct.pack("!H", checksum(inner)) + inner[12:]
        icmp = struct.pack("!BBHHH", 3, 4, 0, 0, int(mtu)) + inner + udp
        proto = 1
    else:
        inner = struct.pack("!IHBB16s16s", 6 << 28, 1480, 17, 63, quoted_src.packed,
                            quoted_to.packed)
        icmp = struct.pack("!BBHI", 2, 0, 0, int(mtu)) + inner + udp
        proto = 58
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
        s.bind((iface, 0))
        s.send(frame(dst_mac, src_mac, src_ip, dst_ip, proto, icmp, 2, 7))


# What `odd` can make wrong, and how: keyword arguments of `frame`, or a change of its own.
ODD = {
    "valid": {},
    "valid-last": {},
    "broadcast": {"dst_mac": "ff:ff:ff:ff:ff:ff"},
    "multicast": {"dst_mac": "01:00:5e:00:00:fb"},
    "foreign-mac": {"dst_mac": "02:00:5e:00:00:99"},
    "vlan": {"vlan": 5},
    "ttl-0": {"ttl": 0},
    "ttl-1": {"ttl": 1},
    "bad-ip-checksum": {"bad_ip_checksum": True},
    "ip-length-long": {"ip_len_extra": 100},
    "udp-length-long": {"udp_len_extra": 50},
    "udp-length-short": {"udp_len": 4},
    "syn-fin": {"tcp_flags": 0x03},
    "no-flags": {"tcp_flags": 0x00},
}


def odd(iface, nic_mac, src_mac, src_ip, dst_ip, port, kind):
    """One UDP datagram (or, for the TCP kinds, a segment) from SRC_IP port 40999 to
    DST_IP:PORT, wrong in the way KIND (a key of ODD) says; "valid" is right in every way."""
    how = dict(ODD[kind])
    dst_mac = how.pop("dst_mac", nic_mac)
    payload = b"dxdp-odd-" + kind.encode()
    if "tcp_flags" in how:
        tcp = struct.pack("!HHIIBBHHH", 40999, int(port), 1, 0, 5 << 4, how.pop("tcp_flags"),
                          65535, 0, 0)
        packet = (6, tcp, 16)
    else:
        length = how.pop("udp_len", 8 + len(payload) + how.pop("udp_len_extra", 0))
        packet = (17, struct.pack("!HHHH", 40999, int(port), length, 0) + payload, 6)
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
        s.bind((iface, 0))
        s.send(frame(dst_mac, src_mac, src_ip, dst_ip, *packet, 9, **how))


def tcp_frame(dst_mac, src_mac, src_ip, dst_ip, sport, dport, seq, ack, flags, win, ident,
              payload=b""):
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 5 << 4,
                      flags, win, 0, 0) + payload
    return frame(dst_mac, src_mac, src_ip, dst_ip, 6, tcp, 16, ident)


def watch_segment(iface, src, dst, sport, dport):
    """(seq, ack, win) of the next segment SRC:SPORT -> DST:DPORT that IFACE sends or receives
    from now on (a fresh socket: none queued before), or None within 5 s."""
    # ETH_P_ALL: the frames a device sends reach only such packet sockets.
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003)) as s:
        s.bind((iface, 0x0003))
        s.settimeout(0.5)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                data = s.recv(65535)
            except socket.timeout:
                continue
            ip = data[14:]
            if (data[12:14] != b"\x08\x00" or len(ip) < 40 or ip[9] != 6 or ip[12:16] != src
                    or ip[16:20] != dst):
                continue
            tcp = ip[(ip[0] & 0xF) * 4:]
            if struct.unpack("!HH", tcp[:4]) == (sport, dport):
                return struct.unpack("!IIxxH", tcp[4:16])
    return None


def tcp_window(iface, nic_mac, src_mac, src_ip, dst_ip, sport, dport):
    sport, dport = int(sport), int(dport)
    src, dst = ipaddress.ip_address(src_ip).packed, ipaddress.ip_address(dst_ip).packed
    watched = watch_segment(iface, src, dst, sport, dport)
    if watched is None:
        sys.exit("no segment of the connection seen")
    seq, ack, win = watched
    print(f"watched seq={seq} ack={ack} win={win}", flush=True)
    far = 1 << 30
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
        s.bind((iface, 0))
        for ident, fields in [
            (0xD001, dict(seq=seq + far, ack=0, flags=0x04, win=0)),
            (0xD002, dict(seq=seq + far, ack=ack + far, flags=0x18, win=win,
                          payload=b"dxdp-forged-out-of-window")),
        ]:
            s.send(tcp_frame(nic_mac, src_mac, src_ip, dst_ip, sport, dport, ident=ident,
                             **fields))
            time.sleep(0.05)
        # The numbers of a segment seen just now: the far end's stream moves on meanwhile, and
        # an ACK whose sequence number fell more than the receiver's window behind it is out
        # of the window (conntrack would mark it INVALID too).
        fresh = watch_segment(iface, src, dst, sport, dport)
        if fresh is None:
            sys.exit("no segment of the connection seen for the ACK in the window")
        seq, ack, win = fresh
        print(f"fresh seq={seq} ack={ack} win={win}", flush=True)
        s.send(tcp_frame(nic_mac, src_mac, src_ip, dst_ip, sport, dport, ident=0xD003, seq=seq,
                         ack=ack, flags=0x10, win=win))


def tcp_watch(iface, seconds, out):
    seen = []
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800)) as s:
        s.bind((iface, 0x0800))
        s.settimeout(0.2)
        open(out + ".ready", "w").close()
        deadline = time.monotonic() + float(seconds)
        while time.monotonic() < deadline:
            try:
                data, meta = s.recvfrom(65535)
            except socket.timeout:
                continue
            ip = data[14:]
            # Received (not sent: PACKET_OUTGOING is 4), TCP, an ID of tcp-window's.
            if meta[2] == 4 or len(ip) < 20 or ip[9] != 6:
                continue
            ident = struct.unpack("!H", ip[4:6])[0]
            tcp = ip[(ip[0] & 0xF) * 4:]
            payload = tcp[(tcp[12] >> 4) * 4:]
            # By what tcp-window forged, not the ID alone: the far end's own IDs pass 0xd0XX.
            if ident == 0xD001 and tcp[13] & 0x04:
                seen.append("0xd001 rst")
            elif ident == 0xD002 and b"dxdp-forged-out-of-window" in payload:
                seen.append("0xd002 data")
            elif ident == 0xD003 and tcp[13] & 0x3F == 0x10 and not payload:
                seen.append("0xd003 ack")
    with open(out, "w") as f:
        f.write("".join(line + "\n" for line in seen))


def receive(port, quiet, total="10"):
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        s.bind(("::", int(port)))
        print("ready", flush=True)
        s.settimeout(float(quiet))
        count, deadline = 0, time.monotonic() + float(total)
        while time.monotonic() < deadline:
            try:
                data = s.recv(2048)
            except socket.timeout:
                break
            count += 1
            if data.endswith(b"-last"):
                break
        print(count, flush=True)


if __name__ == "__main__":
    {"send": send, "syn": syn, "syn-ack": syn_ack, "udp-flood": udp_flood, "too-big": too_big,
     "odd": odd, "receive": receive, "tcp-window": tcp_window, "tcp-watch": tcp_watch,
     }[sys.argv[1]](*sys.argv[2:])
