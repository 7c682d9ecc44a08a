//! The kernel side of a [`Choice`]: the kernel versions each datapath needs, and the one place
//! that turns `auto` into the concrete [`Kind`] this kernel runs.
use aya::util::KernelVersion;

use crate::choice::{Choice, Kind};

/// TCX (and with it the tc datapath's pinnable attachment) arrived in Linux 6.6.
pub const TC_SINCE: (u8, u8, u16) = (6, 6, 0);
/// `bpf_redirect_peer` and native XDP on veth: the oldest kernel dxdp runs on at all.
pub const XDP_SINCE: (u8, u8, u16) = (5, 10, 0);

/// The multi-buffer xdp program (`xdp.frags`), which veth takes at any MTU: veth's multi-buffer
/// XDP came in pieces (jumbo frames with a frags-aware program in 6.0, a multi-buffer redirect
/// target in 6.3, its feature flags fixed in 6.4), so from the kernel the tc datapath needs too.
/// Older kernels get the single-buffer program, refused above an MTU of about 3,500 bytes.
const XDP_FRAGS_SINCE: (u8, u8, u16) = (6, 6, 0);

/// The name of the xdp program this kernel gets ([`XDP_FRAGS_SINCE`]); the pin keeps one name.
pub(crate) fn xdp_program() -> &'static str {
    match KernelVersion::current() {
        Ok(v) if has(v, XDP_FRAGS_SINCE) => dxdp_common::names::XDP_PROGRAM,
        _ => dxdp_common::names::XDP_PROGRAM_SINGLE_BUFFER,
    }
}

impl Choice {
    /// The datapath to install on this kernel. `auto` is tc: bpf_redirect_peer (5.10) and TCX
    /// (6.6) keep GSO and checksum offload, so it is never slower than the bridge; xdp only on
    /// kernels without TCX.
    pub fn resolve(self) -> Kind {
        match self {
            Self::Tc => Kind::Tc,
            Self::Xdp => Kind::Xdp,
            Self::Auto => match KernelVersion::current() {
                Ok(v) if has(v, TC_SINCE) => Kind::Tc,
                _ => Kind::Xdp,
            },
        }
    }
}

/// Whether kernel `v` is at least `since`.
pub fn has(v: KernelVersion, (major, minor, patch): (u8, u8, u16)) -> bool {
    v >= KernelVersion::new(major, minor, patch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_choices_resolve_to_themselves() {
        assert_eq!(Choice::Tc.resolve(), Kind::Tc);
        assert_eq!(Choice::Xdp.resolve(), Kind::Xdp);
    }

    #[test]
    fn kernel_thresholds_compare_whole_versions() {
        assert!(has(KernelVersion::new(6, 18, 0), TC_SINCE));
        assert!(!has(KernelVersion::new(6, 5, 99), TC_SINCE));
        assert!(has(KernelVersion::new(5, 10, 0), XDP_SINCE));
    }
}
