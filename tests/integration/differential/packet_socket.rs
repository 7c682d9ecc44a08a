//! An AF_PACKET socket on one interface of a network namespace: it puts frames onto the wire as
//! they are and hands back every frame that arrived, as tcpdump sees them.

use std::{
    ffi::CString,
    mem,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::Path,
    time::{Duration, Instant},
};

use crate::support::in_netns;

/// A frame that arrived (never one the namespace sent: `PACKET_OUTGOING` is left out).
pub struct Arrived {
    pub bytes: Vec<u8>,
}

pub struct PacketSocket {
    fd: OwnedFd,
    ifindex: i32,
}

impl PacketSocket {
    /// A socket for every protocol, bound to `ifname` in the namespace at `ns`.
    #[track_caller]
    pub fn open(ns: &Path, ifname: &str) -> Self {
        let ifname = ifname.to_owned();
        in_netns(ns, move || {
            let name = CString::new(ifname.clone()).expect("an interface name");
            // SAFETY: if_nametoindex reads a NUL-terminated string that outlives the call.
            let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) } as i32;
            assert!(ifindex > 0, "no interface {ifname} in the namespace");
            let all = (libc::ETH_P_ALL as u16).to_be();
            // SAFETY: socket(2) with constant arguments; the fd is owned at once.
            let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(all)) };
            assert!(
                raw >= 0,
                "AF_PACKET socket: {}",
                std::io::Error::last_os_error()
            );
            // SAFETY: `raw` is a fresh descriptor nobody else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(raw) };
            let mut addr: libc::sockaddr_ll = unsafe { mem::zeroed() };
            addr.sll_family = libc::AF_PACKET as u16;
            addr.sll_protocol = all;
            addr.sll_ifindex = ifindex;
            // SAFETY: the address is a sockaddr_ll of the size given.
            let bound = unsafe {
                libc::bind(
                    fd.as_raw_fd(),
                    (&addr as *const libc::sockaddr_ll).cast(),
                    mem::size_of::<libc::sockaddr_ll>() as u32,
                )
            };
            assert!(
                bound == 0,
                "bind to {ifname}: {}",
                std::io::Error::last_os_error()
            );
            // Reads wait at most this long, so that a window ends on time.
            let wait = libc::timeval {
                tv_sec: 0,
                tv_usec: 10_000,
            };
            // SAFETY: SO_RCVTIMEO takes a timeval of the size given.
            unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_RCVTIMEO,
                    (&wait as *const libc::timeval).cast(),
                    mem::size_of::<libc::timeval>() as u32,
                );
            }
            Self { fd, ifindex }
        })
    }

    /// Puts `frame` onto the wire as it is.
    #[track_caller]
    pub fn send(&self, frame: &[u8]) {
        let mut addr: libc::sockaddr_ll = unsafe { mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_ifindex = self.ifindex;
        addr.sll_halen = 6;
        addr.sll_addr[..6].copy_from_slice(&frame[..6]);
        // SAFETY: `frame` and the address are valid for the lengths given.
        let sent = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                0,
                (&addr as *const libc::sockaddr_ll).cast(),
                mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        assert!(
            sent == frame.len() as isize,
            "sending a {}-byte frame: {}",
            frame.len(),
            std::io::Error::last_os_error()
        );
    }

    /// Every frame that arrived in the next `window`.
    pub fn arrived(&self, window: Duration) -> Vec<Arrived> {
        let deadline = Instant::now() + window;
        let mut frames = Vec::new();
        while Instant::now() < deadline {
            frames.extend(self.next());
        }
        frames
    }

    /// Throws away whatever arrived so far.
    pub fn forget(&self) {
        while self.next().is_some() {}
    }

    /// The next frame that arrived within the read timeout, if any.
    fn next(&self) -> Option<Arrived> {
        loop {
            let mut buf = vec![0u8; 65536];
            let mut addr: libc::sockaddr_ll = unsafe { mem::zeroed() };
            let mut len = mem::size_of::<libc::sockaddr_ll>() as u32;
            // SAFETY: the buffer and the address are valid for the lengths given.
            let n = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    0,
                    (&mut addr as *mut libc::sockaddr_ll).cast(),
                    &mut len,
                )
            };
            if n < 0 {
                return None;
            }
            if addr.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            buf.truncate(n as usize);
            return Some(Arrived { bytes: buf });
        }
    }
}
