#!/usr/bin/env python3
"""Both ends of the ingress tests' transfers (tests/integration/ingress.rs).

  send FILE HOST PORT          connect, send FILE paced over ~4 s, close
  serve FILE PORT [DELAY [listening]]
                               accept one connection, (wait DELAY s,) send FILE paced over ~4 s,
                               close; with "listening", the port stays open until then, so the
                               container answers other SYNs with SYN-ACKs, as a server does
  receive-from HOST PORT OUT [SPORT]   connect (from SPORT), write everything received to OUT
  receive PORT OUT             accept one connection, write everything received to OUT
  udp-echo PORT                answer each datagram with the sender's address as "ip:port"
  udp-ask HOST PORT            send one datagram, print the answer (2 s at most)
  udp-big PORT SIZE            answer each datagram with SIZE bytes (more than the MTU: the
                               answer leaves the container in fragments)
  udp-ask-big HOST PORT COUNT SIZE
                               COUNT one-byte questions, one at a time, from a socket connected
                               to HOST PORT (so only answers from there count); print how many
                               answers of SIZE bytes came (1.5 s each at most)
  udp-stream PORT SECONDS      on the first datagram, send its sender a numbered datagram every
                               10 ms for SECONDS
  udp-follow HOST PORT OUT SECONDS
                               start HOST PORT's stream and append a line to OUT for each
                               datagram that arrives, for SECONDS
  ptb6 HOST CLIENT MTU         send HOST a "packet too big" (MTU) quoting an echo request HOST
                               sent CLIENT: the host caches MTU as its path MTU to CLIENT

Paced: 40 slices 0.1 s apart, so that the test can expose and unexpose while bytes flow.
Every socket has a timeout, so that nothing outlives a failed test by long.
"""
import socket
import struct
import sys
import time

SLICES = 40
TIMEOUT = 30


def family(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def paced(sock, path):
    data = open(path, "rb").read()
    n = len(data) // SLICES
    for i in range(SLICES):
        end = (i + 1) * n if i < SLICES - 1 else len(data)
        sock.sendall(data[i * n:end])
        time.sleep(0.1)


def drain(sock, out):
    with open(out, "wb") as f:
        while True:
            chunk = sock.recv(1 << 16)
            if not chunk:
                return
            f.write(chunk)


def listener(port, keep=None):
    """The first connection to PORT; the listening socket is closed then, unless KEEP (a list)
    is given, which gets it."""
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.settimeout(TIMEOUT)
    s.bind(("::", port))
    s.listen(1 if keep is None else 4096)
    conn, _ = s.accept()
    conn.settimeout(TIMEOUT)
    if keep is not None:
        keep.append(s)
    return conn


def connect(host, port, sport=0):
    s = socket.create_connection(
        (host, port), timeout=TIMEOUT, source_address=("", sport) if sport else None
    )
    s.settimeout(TIMEOUT)
    return s


def main(argv):
    mode = argv[1]
    if mode == "send":
        s = connect(argv[3], int(argv[4]))
        paced(s, argv[2])
        s.close()
    elif mode == "serve":
        keep = [] if len(argv) > 5 and argv[5] == "listening" else None
        conn = listener(int(argv[3]), keep)
        if len(argv) > 4:
            # The connection stays quiet, and the container speaks first after it.
            time.sleep(float(argv[4]))
        paced(conn, argv[2])
        conn.close()
    elif mode == "receive-from":
        sport = int(argv[5]) if len(argv) > 5 else 0
        drain(connect(argv[2], int(argv[3]), sport), argv[4])
    elif mode == "receive":
        drain(listener(int(argv[2])), argv[3])
    elif mode == "udp-echo":
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        s.settimeout(TIMEOUT)
        s.bind(("::", int(argv[2])))
        while True:
            _, peer = s.recvfrom(2048)
            host = peer[0].removeprefix("::ffff:")
            s.sendto(f"{host}:{peer[1]}".encode(), peer)
    elif mode == "udp-ask":
        s = socket.socket(family(argv[2]), socket.SOCK_DGRAM)
        s.settimeout(2)
        s.sendto(b"hi", (argv[2], int(argv[3])))
        print(s.recvfrom(2048)[0].decode())
    elif mode == "udp-big":
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        s.settimeout(TIMEOUT)
        s.bind(("::", int(argv[2])))
        answer = b"x" * int(argv[3])
        while True:
            _, peer = s.recvfrom(2048)
            s.sendto(answer, peer)
    elif mode == "udp-ask-big":
        s = socket.socket(family(argv[2]), socket.SOCK_DGRAM)
        s.settimeout(1.5)
        s.connect((argv[2], int(argv[3])))
        size, whole = int(argv[5]), 0
        for _ in range(int(argv[4])):
            s.send(b"?")
            try:
                whole += len(s.recv(1 << 16)) == size
            except (socket.timeout, ConnectionRefusedError):
                pass  # unanswered: lost, or nothing listening (yet)
        print(whole)
    elif mode == "udp-stream":
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        s.settimeout(TIMEOUT)
        s.bind(("::", int(argv[2])))
        _, peer = s.recvfrom(2048)
        end = time.monotonic() + float(argv[3])
        n = 0
        while time.monotonic() < end:
            try:
                s.sendto(b"%d" % n, peer)
            except OSError:
                pass  # an ICMP error from a dropped datagram; the stream goes on
            n += 1
            time.sleep(0.01)
    elif mode == "udp-follow":
        s = socket.socket(family(argv[2]), socket.SOCK_DGRAM)
        s.settimeout(0.2)
        s.connect((argv[2], int(argv[3])))
        s.send(b"go")
        end = time.monotonic() + float(argv[5])
        with open(argv[4], "a", buffering=1) as out:
            while time.monotonic() < end:
                try:
                    out.write(s.recv(64).decode() + "\n")
                except (socket.timeout, ConnectionRefusedError):
                    pass
    elif mode == "ptb6":
        host, client = (socket.inet_pton(socket.AF_INET6, a) for a in argv[2:4])
        echo = struct.pack("!BBHHH", 128, 0, 0, 1, 1) + b"q" * 64
        quoted = struct.pack("!IHBB", 6 << 28, len(echo), 58, 64) + host + client + echo
        # The kernel sums an ICMPv6 raw socket's messages.
        error = struct.pack("!BBHI", 2, 0, 0, int(argv[4])) + quoted
        s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
        s.sendto(error, (argv[2], 0))
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main(sys.argv)
