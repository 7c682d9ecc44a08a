//! A netfilter netlink socket (`NETLINK_NETFILTER`: nf_tables and ctnetlink) and one request's
//! round trip on it, for the few messages dxdp sends without a netlink crate: asking nf_tables
//! for its generation, handing connections back to conntrack.
use std::{
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
};

/// A netfilter netlink socket in the calling thread's network namespace.
pub(crate) fn open() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) has no memory arguments; the fd is owned from here on.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_NETFILTER,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sends `request` (a whole netlink message) and reads the first reply into `reply`; its
/// length.
pub(crate) fn exchange(socket: &OwnedFd, request: &[u8], reply: &mut [u8]) -> io::Result<usize> {
    // SAFETY: the buffer is valid for its length; the kernel is the destination (pid 0, no
    // address needed on a netlink socket that was not connected).
    let sent = unsafe {
        libc::send(
            socket.as_raw_fd(),
            request.as_ptr().cast(),
            request.len(),
            0,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the buffer is valid and writable for its length.
    let got = unsafe {
        libc::recv(
            socket.as_raw_fd(),
            reply.as_mut_ptr().cast(),
            reply.len(),
            0,
        )
    };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(got as usize)
}
