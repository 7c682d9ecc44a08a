//! What a user or a label chooses for a link, in the user's words: the datapath asked for
//! ([`Choice`]), the one a link runs on ([`Kind`]), and who made it ([`Origin`]). Labels,
//! plans, rules and the compose check speak of links in these words without loading anything
//! of the kernel; how the pinned maps spell them, and what `auto` resolves to on this kernel,
//! is the datapath's business.
use std::{fmt, str::FromStr};

use anyhow::{Result, bail};
use serde::Serialize;
use thiserror::Error;

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

/// How a link's frames bypass the bridge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// TCX ingress + `bpf_redirect_peer`: keeps GSO and checksum offload.
    Tc,
    /// Native XDP + devmap redirect: needs GRO on and tx checksum offload off in the containers.
    Xdp,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Tc => "tc",
            Kind::Xdp => "xdp",
        })
    }
}

impl FromStr for Kind {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "tc" => Ok(Kind::Tc),
            "xdp" => Ok(Kind::Xdp),
            _ => bail!("unknown datapath {s:?}; use tc or xdp"),
        }
    }
}

/// Who made a link: `watch` leaves links made by hand alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    Manual,
    Watch,
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
}
