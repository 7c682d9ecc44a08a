//! What a user or a label asks for (`auto`, `tc`, `xdp`) and the one place that turns it into a
//! concrete [`Kind`], next to the kernel versions each datapath needs.
use std::{fmt, str::FromStr};

use aya::util::KernelVersion;
use serde::Serialize;
use thiserror::Error;

use super::Kind;

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

/// The datapath asked for by `--datapath` or the `dxdp.datapath` label.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Choice {
    /// tc where the kernel has TCX and bpf_redirect_peer, else xdp.
    #[default]
    Auto,
    /// TCX ingress + bpf_redirect_peer (keeps GSO and checksum offload).
    Tc,
    /// Native XDP + devmap redirect (turns GRO on and tx checksum offload off in the containers).
    Xdp,
}

impl Choice {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Tc => "tc",
            Self::Xdp => "xdp",
        }
    }

    /// Choice for a link from the choices of its two ends: a stated datapath beats `auto`, and
    /// two different stated datapaths have no answer (`None`).
    pub(crate) fn merge(self, other: Self) -> Option<Self> {
        match (self, other) {
            (Self::Auto, x) | (x, Self::Auto) => Some(x),
            (x, y) if x == y => Some(x),
            _ => None,
        }
    }

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

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown datapath {0:?}; expected auto, tc or xdp")]
pub struct ParseChoiceError(pub String);

/// The label's spelling: surrounding whitespace and ASCII case do not matter.
impl FromStr for Choice {
    type Err = ParseChoiceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "tc" => Ok(Self::Tc),
            "xdp" => Ok(Self::Xdp),
            _ => Err(ParseChoiceError(s.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stated_choice_beats_auto_and_two_stated_must_agree() {
        assert_eq!(Choice::Auto.merge(Choice::Auto), Some(Choice::Auto));
        assert_eq!(Choice::Auto.merge(Choice::Tc), Some(Choice::Tc));
        assert_eq!(Choice::Xdp.merge(Choice::Auto), Some(Choice::Xdp));
        assert_eq!(Choice::Xdp.merge(Choice::Tc), None);
    }

    #[test]
    fn label_spellings_ignore_case_and_whitespace() {
        assert_eq!(" TC ".parse(), Ok(Choice::Tc));
        assert_eq!("Xdp".parse(), Ok(Choice::Xdp));
        for d in [Choice::Auto, Choice::Tc, Choice::Xdp] {
            assert_eq!(d.to_string().parse::<Choice>(), Ok(d));
        }
        assert_eq!(
            "".parse::<Choice>().unwrap_err().to_string(),
            r#"unknown datapath ""; expected auto, tc or xdp"#
        );
    }

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
