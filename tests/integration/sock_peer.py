#!/usr/bin/env python3
"""Traffic for tests/sock.rs: both ends of TCP connections whose every byte is checked.

Each end sends `size` bytes made of 64 KiB chunks that start with their own index (so a lost,
duplicated or reordered chunk changes the digest), reads until EOF, and prints one JSON line:
{"sent": n, "sent_sha": hex, "recv": n, "recv_sha": hex, ...}.

Modes:
  serve HOST PORT SIZE [--sendfile|--splice-recv]   accept one connection, stream both ways
  connect HOST PORT SIZE [--sendfile]               connect, stream both ways
  serve-many HOST PORT COUNT                        accept COUNT connections; for each, read to
                                                    EOF, reply with the sha256 of what came, close
  connect-many HOST PORT COUNT SIZE [--linger0] [--port P]
                                                    COUNT connections that write SIZE bytes right
                                                    after connect, half-close, read the digest
  serve-sink HOST PORT                              accept one connection and never read
  connect-flood HOST PORT SECONDS                   non-blocking sends for SECONDS; report how much
                                                    send() accepted and whether it hit EAGAIN
"""
import hashlib
import json
import os
import select
import socket
import struct
import sys
import threading
import time

CHUNK = 64 * 1024
BASE = bytes((i * 7 + 13) % 251 for i in range(CHUNK))


def chunk(i):
    return struct.pack("<Q", i) + BASE[8:]


SPURIOUS = [0]


def recv(sock, n):
    """recv on a blocking socket, waiting out the EAGAIN a sockmap socket can return."""
    while True:
        try:
            return sock.recv(n)
        except BlockingIOError:
            SPURIOUS[0] += 1
            select.select([sock], [], [], 1.0)


def sendall(sock, data):
    """sendall that also works once the reader has made the socket non-blocking."""
    view = memoryview(data)
    while view:
        try:
            view = view[sock.send(view):]
        except BlockingIOError:
            select.select([], [sock], [], 1.0)


def family(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def sender(sock, size, out, use_sendfile):
    try:
        send_all(sock, size, out, use_sendfile)
    except Exception as e:  # reported in the JSON line; the test fails on it
        out["error"] = repr(e)


def send_all(sock, size, out, use_sendfile):
    h = hashlib.sha256()
    sent = 0
    i = 0
    if use_sendfile:
        # A file of the whole stream, sent with sendfile(2).
        path = f"/tmp/sock-peer-{os.getpid()}-{threading.get_ident()}"
        with open(path, "wb") as f:
            while sent < size:
                c = chunk(i)[: size - sent]
                f.write(c)
                h.update(c)
                sent += len(c)
                i += 1
        with open(path, "rb") as f:
            off = 0
            while off < size:
                n = os.sendfile(sock.fileno(), f.fileno(), off, size - off)
                if n == 0:
                    break
                off += n
        os.unlink(path)
    else:
        while sent < size:
            c = chunk(i)[: size - sent]
            sendall(sock, c)
            h.update(c)
            sent += len(c)
            i += 1
    sock.shutdown(socket.SHUT_WR)
    out["sent"] = sent
    out["sent_sha"] = h.hexdigest()


def receiver(sock, out, use_splice):
    h = hashlib.sha256()
    got = 0
    if use_splice:
        # splice(2) from the socket into a pipe, non-blocking, giving up after 5 s in which
        # poll() said readable but splice moved nothing (reported as "splice_stalled").
        r, w = os.pipe()
        sock.setblocking(False)
        stalled_since = None
        while True:
            select.select([sock], [], [], 1.0)
            try:
                n = os.splice(sock.fileno(), w, CHUNK, flags=os.SPLICE_F_NONBLOCK)
            except BlockingIOError:
                stalled_since = stalled_since or time.time()
                if time.time() - stalled_since > 5:
                    out["splice_stalled"] = True
                    break
                time.sleep(0.01)
                continue
            stalled_since = None
            if n == 0:
                break
            data = b""
            while len(data) < n:
                data += os.read(r, n - len(data))
            h.update(data)
            got += n
        os.close(r)
        os.close(w)
    else:
        # The socket is blocking; a sockmap socket's recvmsg (tcp_bpf_recvmsg) still returns
        # EAGAIN when its wait is woken without data (e.g. by a write-space wakeup from the
        # sending thread). Counted and reported, then waited for like an event-driven reader.
        spurious = 0
        while True:
            try:
                b = sock.recv(1 << 20)
            except BlockingIOError:
                spurious += 1
                select.select([sock], [], [], 1.0)
                continue
            if not b:
                break
            h.update(b)
            got += len(b)
        out["eagain_on_blocking_recv"] = spurious
    out["recv"] = got
    out["recv_sha"] = h.hexdigest()


def stream(sock, size, use_sendfile=False, use_splice=False):
    out = {}
    t = threading.Thread(target=sender, args=(sock, size, out, use_sendfile))
    t.start()
    receiver(sock, out, use_splice)
    if out.get("splice_stalled"):
        # Report now; the peer's sender may be blocked on this reader.
        print(json.dumps(out), flush=True)
        os._exit(0)
    t.join()
    sock.close()
    print(json.dumps(out), flush=True)


def listen(host, port, defer_accept=False):
    s = socket.socket(family(host), socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if defer_accept:
        # The handshake's last (pure) ACK is dropped; the server socket is made, and sock_ops'
        # PASSIVE_ESTABLISHED runs, only when the client's first data segment arrives.
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, 5)
    if host == "::":
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind((host, port))
    s.listen(1024)
    print("listening", flush=True)
    return s


def main():
    mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    flags = sys.argv[4:]
    if mode == "serve":
        s = listen(host, port)
        c, _ = s.accept()
        stream(c, int(flags[0]), "--sendfile" in flags, "--splice-recv" in flags)
    elif mode == "connect":
        c = socket.create_connection((host, port), timeout=30)
        c.settimeout(None)
        stream(c, int(flags[0]), "--sendfile" in flags)
    elif mode == "serve-many":
        s = listen(host, port)
        for _ in range(int(flags[0])):
            c, _ = s.accept()
            h = hashlib.sha256()
            while True:
                b = recv(c, 1 << 16)
                if not b:
                    break
                h.update(b)
            c.sendall(h.digest())
            c.close()
    elif mode == "connect-many":
        count, size = int(flags[0]), int(flags[1])
        linger0 = "--linger0" in flags
        # --port P: every connection from the same source port, so each one reuses the
        # 4-tuple of the last (the server closes first and holds it in TIME_WAIT).
        src = int(flags[flags.index("--port") + 1]) if "--port" in flags else 0
        pause = float(flags[flags.index("--pause-ms") + 1]) / 1000 if "--pause-ms" in flags else 0
        bad = 0
        for n in range(count):
            payload = struct.pack("<Q", n) + BASE[: size - 8]
            c = socket.socket(family(host), socket.SOCK_STREAM)
            c.settimeout(30)
            if src:
                c.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                c.bind(("::" if ":" in host else "0.0.0.0", src))
            c.connect((host, port))
            c.sendall(payload)
            c.shutdown(socket.SHUT_WR)
            digest = b""
            while len(digest) < 32:
                b = recv(c, 32 - len(digest))
                if not b:
                    break
                digest += b
            if digest != hashlib.sha256(payload).digest():
                bad += 1
            if linger0:
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c.close()
            time.sleep(pause)
        print(json.dumps({"connections": count, "mismatches": bad,
                          "eagain_on_blocking_recv": SPURIOUS[0]}), flush=True)
    elif mode == "serve-echo":
        s = listen(host, port, "--defer-accept" in flags)
        c, _ = s.accept()
        while True:
            b = recv(c, 1 << 16)
            if not b:
                break
            sendall(c, b)
        c.close()
    elif mode == "connect-echo":
        # Writes right after connect, then ROUNDS request/response rounds of SIZE bytes, each
        # echoed back and compared byte for byte.
        rounds, size = int(flags[0]), int(flags[1])
        c = socket.create_connection((host, port), timeout=30)
        bad = 0
        for n in range(rounds):
            payload = struct.pack("<Q", n) + BASE[: size - 8]
            sendall(c, payload)
            got = b""
            while len(got) < size:
                b = recv(c, size - len(got))
                if not b:
                    break
                got += b
            if got != payload:
                bad += 1
        c.close()
        print(json.dumps({"connections": rounds, "mismatches": bad,
                          "eagain_on_blocking_recv": SPURIOUS[0]}), flush=True)
    elif mode == "serve-sink":
        s = listen(host, port)
        c, _ = s.accept()
        print("accepted", flush=True)
        time.sleep(3600)
    elif mode == "connect-flood":
        seconds = float(flags[0])
        c = socket.create_connection((host, port), timeout=30)
        c.setblocking(False)
        accepted = 0
        eagain = 0
        deadline = time.time() + seconds
        block = BASE * 16
        while time.time() < deadline:
            try:
                accepted += c.send(block)
            except BlockingIOError:
                eagain += 1
                select.select([], [c], [], 0.05)
        print(json.dumps({"accepted": accepted, "eagain": eagain}), flush=True)
        time.sleep(3600)
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
