//! The echoes a topology's cases are answered by (Python scripts run in a namespace), and live
//! TCP connections a case's segment can join: a connection from a port of the case's own that
//! echoed a greeting, and its next numbers as the echo arrived, so that a case can put its
//! segment in the window, beside it or far from it.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream, UdpSocket},
    os::fd::AsRawFd,
    path::Path,
    time::Duration,
};

use nix::sys::socket::{
    AddressFamily, SockFlag, SockType, SockaddrStorage, bind, connect as connect_to, setsockopt,
    socket, sockopt,
};

use super::packet_socket::PacketSocket;
use crate::support::in_netns;

/// What a live flow sends and its echo answers.
pub const GREETING: &[u8] = b"dxdp-differential";

/// A UDP echo on both families that lives as long as its process (ingress_peer.py's gives up
/// after 30 s of silence, which a long run has), and past a datagram it cannot answer (from
/// port 0, say: `sendto` fails, which ended the echo and every later case's answers).
pub const UDP_ECHO: &str = "import socket, sys\n\
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n\
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)\n\
    s.bind(('::', int(sys.argv[1])))\n\
    while True:\n    \
        data, peer = s.recvfrom(65535)\n    \
        try:\n        \
            s.sendto(data, peer)\n    \
        except OSError:\n        \
            pass\n";

/// A TCP echo on both families, one thread per connection, that lives as long as its process
/// and past a connection reset: `python3 -c TCP_ECHO PORT`.
pub const TCP_ECHO: &str = "import socket, sys, threading\n\
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)\n\
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)\n\
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
    s.bind(('::', int(sys.argv[1])))\n\
    s.listen(128)\n\
    def echo(c):\n    \
        try:\n        \
            while True:\n            \
                data = c.recv(65536)\n            \
                if not data:\n                \
                    break\n            \
                c.sendall(data)\n    \
        except OSError:\n        \
            pass\n    \
        c.close()\n\
    while True:\n    \
        c, _ = s.accept()\n    \
        threading.Thread(target=echo, args=(c,), daemon=True).start()\n";

/// A live UDP flow from `from` to the echo at `to`, made in the namespace at `ns`: the
/// greeting sent up to `tries` times, 500 ms apart, until the echo answers. The socket, kept
/// open while a case runs, and the answer as it arrived.
pub fn udp_flow(ns: &Path, from: SocketAddr, to: SocketAddr, tries: u32) -> (UdpSocket, Vec<u8>) {
    in_netns(ns, move || {
        let socket = UdpSocket::bind(from).unwrap_or_else(|e| panic!("bind {from}: {e}"));
        socket.connect(to).expect("connect");
        socket
            .set_read_timeout(Some(Duration::from_millis(500)))
            .expect("timeout");
        for _ in 0..tries {
            socket.send(GREETING).expect("send");
            let mut buf = [0u8; 2048];
            if let Ok(n) = socket.recv(&mut buf) {
                return (socket, buf[..n].to_vec());
            }
        }
        panic!("no answer on the live flow from {from} to {to}");
    })
}

/// A TCP connection from `from` to the echo at `to`, made in the namespace at `ns`, that echoed
/// the greeting (so that both ends and any conntrack between hold it established). It closes
/// with an RST (`SO_LINGER` 0), so that no TIME_WAIT keeps the port from the next run of the
/// same case.
pub fn connect(ns: &Path, from: SocketAddr, to: SocketAddr) -> TcpStream {
    in_netns(ns, move || {
        let domain = if from.is_ipv4() {
            AddressFamily::Inet
        } else {
            AddressFamily::Inet6
        };
        let fd =
            socket(domain, SockType::Stream, SockFlag::SOCK_CLOEXEC, None).expect("a TCP socket");
        let timeout = nix::sys::time::TimeVal::new(5, 0);
        setsockopt(&fd, sockopt::ReuseAddr, &true).expect("SO_REUSEADDR");
        setsockopt(&fd, sockopt::SendTimeout, &timeout).expect("SO_SNDTIMEO");
        setsockopt(&fd, sockopt::ReceiveTimeout, &timeout).expect("SO_RCVTIMEO");
        let reset = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        setsockopt(&fd, sockopt::Linger, &reset).expect("SO_LINGER");
        bind(fd.as_raw_fd(), &SockaddrStorage::from(from))
            .unwrap_or_else(|e| panic!("bind {from}: {e}"));
        connect_to(fd.as_raw_fd(), &SockaddrStorage::from(to))
            .unwrap_or_else(|e| panic!("connect {from} to {to}: {e}"));
        let mut stream = TcpStream::from(fd);
        stream.write_all(GREETING).expect("the greeting");
        let mut echoed = vec![0u8; GREETING.len()];
        stream
            .read_exact(&mut echoed)
            .unwrap_or_else(|e| panic!("no echo on {from} to {to}: {e}"));
        stream
    })
}

/// `ss -K` of the TCP sockets to `client_port` in every state, to run in the server's namespace
/// once the case is over: a server socket that took a forged segment's bytes no longer takes
/// the client's closing RST (its number is behind), and would retransmit into later cases'
/// windows. Every state, not `ss`'s default (which leaves out SYN-RECV and TIME-WAIT): a SYN
/// from an address nobody answers for (a link-local source) leaves a request socket whose
/// SYN-ACK no one resets, and it answered the other path's run of the same case with an ACK
/// instead of a SYN-ACK (the exposed topology's seed 712, case 1237, in its long run).
pub fn abort_server_side(client_port: u16) -> [String; 4] {
    [
        "ss".to_owned(),
        "-K".to_owned(),
        "-tna".to_owned(),
        format!("dport = :{client_port}"),
    ]
}

/// A live connection's next numbers, (the server's, the client's), from the echo of the
/// greeting as it arrived at `socket` (from `server_port` to `client_port`): its sequence number
/// and length, its acknowledgment of the greeting.
pub fn next_numbers(socket: &PacketSocket, server_port: u16, client_port: u16) -> (u32, u32) {
    socket
        .arrived(std::time::Duration::from_millis(20))
        .iter()
        .rev()
        .find_map(|a| {
            let packet = etherparse::SlicedPacket::from_ethernet(&a.bytes).ok()?;
            let Some(etherparse::TransportSlice::Tcp(tcp)) = packet.transport else {
                return None;
            };
            let echo = tcp.source_port() == server_port
                && tcp.destination_port() == client_port
                && !tcp.payload().is_empty();
            echo.then(|| {
                let len = tcp.payload().len() as u32;
                (
                    tcp.sequence_number().wrapping_add(len),
                    tcp.acknowledgment_number(),
                )
            })
        })
        .unwrap_or_else(|| panic!("no echo of the greeting to port {client_port} was seen"))
}
