//! The two interface features the XDP datapath has to change, through the legacy ethtool
//! ioctls. Call these on a thread inside the interface's namespace: the socket they open belongs
//! to the caller's namespace.
use std::os::fd::AsRawFd;

use anyhow::{Context, Result, bail};
use nix::sys::socket::{AddressFamily, SockFlag, SockType, socket};

const SIOCETHTOOL: libc::c_ulong = 0x8946;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Feature {
    /// Generic receive offload; on a veth it also gives the receive side a NAPI context, without
    /// which frames redirected into it by XDP are dropped.
    Gro,
    /// Transmit checksum offload; XDP cannot finish CHECKSUM_PARTIAL frames, so it must be off
    /// on the sending side.
    TxChecksum,
}

impl Feature {
    const fn commands(self) -> (u32, u32) {
        match self {
            Feature::Gro => (0x2b, 0x2c),        // ETHTOOL_GGRO, ETHTOOL_SGRO
            Feature::TxChecksum => (0x16, 0x17), // ETHTOOL_GTXCSUM, ETHTOOL_STXCSUM
        }
    }

    pub(crate) const fn name(self) -> &'static str {
        match self {
            Feature::Gro => "generic-receive-offload",
            Feature::TxChecksum => "tx-checksumming",
        }
    }
}

#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut EthtoolValue,
    _pad: [u8; 16],
}

pub(crate) fn get(ifname: &str, feature: Feature) -> Result<bool> {
    let mut value = EthtoolValue {
        cmd: feature.commands().0,
        data: 0,
    };
    ioctl(ifname, &mut value)
        .with_context(|| format!("cannot read {} of {ifname}", feature.name()))?;
    Ok(value.data != 0)
}

pub(crate) fn set(ifname: &str, feature: Feature, on: bool) -> Result<()> {
    let mut value = EthtoolValue {
        cmd: feature.commands().1,
        data: u32::from(on),
    };
    ioctl(ifname, &mut value).with_context(|| {
        let state = if on { "on" } else { "off" };
        format!("cannot turn {} {state} on {ifname}", feature.name())
    })
}

fn ioctl(ifname: &str, value: &mut EthtoolValue) -> Result<()> {
    let bytes = ifname.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ {
        bail!("invalid interface name {ifname:?}");
    }
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        data: value,
        _pad: [0; 16],
    };
    for (dst, src) in req.name.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    let sock = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    // SAFETY: req is a properly laid out ifreq whose data points at a live ethtool_value.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL, &mut req) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(())
}
