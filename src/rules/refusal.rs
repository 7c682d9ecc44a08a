//! Why two containers get no link: one type for the watch's log and `compose-check`'s report, whose
//! `Display` is the message after "no link between A and B: ".
use std::fmt;

use super::keys::ICC_OPTION;
use crate::choice::Choice;

/// Why a network cannot carry a link, as far as its driver and options tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unusable {
    /// Not a `bridge` network (macvlan, overlay, host, ...).
    Driver(String),
    /// `com.docker.network.bridge.enable_icc=false`.
    IccDisabled,
    /// An overlay network with `--opt encrypted`.
    Encrypted,
    /// Swarm's routing mesh, whose traffic comes from IPVS, not from a peer task.
    RoutingMesh,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The named container's `dxdp.*` labels do not parse.
    Malformed {
        name: String,
    },
    OptedOut {
        name: String,
    },
    NetworksDisagree {
        a: String,
        a_network: String,
        b: String,
        b_network: String,
    },
    DatapathsDisagree {
        a: String,
        a_datapath: Choice,
        b: String,
        b_datapath: Choice,
    },
    NoSharedNetwork,
    /// `dxdp.network` of `setter` names a network the pair does not share; `missing` is the side
    /// not on it, when exactly one is not.
    NotOnNamedNetwork {
        network: String,
        setter: String,
        missing: Option<String>,
    },
    Unusable {
        network: String,
        why: Unusable,
    },
}

/// The `reason` label values of `dxdp_refused_pairs`, one per kind of [`Refusal`], and the
/// firewall's.
pub(crate) const REASONS: [&str; 10] = [
    "malformed_labels",
    "opted_out",
    "networks_disagree",
    "datapaths_disagree",
    "no_shared_network",
    "not_on_named_network",
    "network_driver",
    "icc_disabled",
    "network_encrypted",
    FIREWALL_REASON,
];

/// Not a [`Refusal`] of the rules: the watch refuses a pair a firewall rule could drop.
pub(crate) const FIREWALL_REASON: &str = "firewall";

impl Refusal {
    /// Its kind, as metrics count it: one of [`REASONS`].
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            Self::Malformed { .. } => REASONS[0],
            Self::OptedOut { .. } => REASONS[1],
            Self::NetworksDisagree { .. } => REASONS[2],
            Self::DatapathsDisagree { .. } => REASONS[3],
            Self::NoSharedNetwork => REASONS[4],
            Self::NotOnNamedNetwork { .. } => REASONS[5],
            Self::Unusable {
                why: Unusable::Driver(_) | Unusable::RoutingMesh,
                ..
            } => REASONS[6],
            Self::Unusable {
                why: Unusable::IccDisabled,
                ..
            } => REASONS[7],
            Self::Unusable {
                why: Unusable::Encrypted,
                ..
            } => REASONS[8],
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed { name } => write!(f, "{name} has malformed dxdp labels"),
            Self::OptedOut { name } => write!(f, "{name} opted out with dxdp.enable=false"),
            Self::NetworksDisagree {
                a,
                a_network,
                b,
                b_network,
            } => write!(
                f,
                "{a} sets dxdp.network={a_network} but {b} sets dxdp.network={b_network}; make \
                 them agree or drop one"
            ),
            Self::DatapathsDisagree {
                a,
                a_datapath,
                b,
                b_datapath,
            } => write!(
                f,
                "{a} sets dxdp.datapath={a_datapath} but {b} sets dxdp.datapath={b_datapath}; \
                 make them agree or set one to auto"
            ),
            Self::NoSharedNetwork => f.write_str(
                "they share no network; connect both to one bridge network (in compose, put both \
                 services on one network)",
            ),
            Self::NotOnNamedNetwork {
                network,
                setter,
                missing,
            } => {
                match missing {
                    Some(m) => write!(f, "{m} is not on network {network}")?,
                    None => write!(f, "they do not share network {network}")?,
                }
                write!(f, ", which dxdp.network of {setter} names")
            }
            Self::Unusable {
                network,
                why: Unusable::Driver(driver),
            } => write!(
                f,
                "network {network} has driver {driver}; dxdp accelerates bridge and overlay \
                 networks only"
            ),
            Self::Unusable {
                network,
                why: Unusable::RoutingMesh,
            } => write!(
                f,
                "network {network} is Swarm's routing mesh, which carries published ports from \
                 IPVS, not traffic between tasks; put the pair on an overlay network of its own"
            ),
            Self::Unusable {
                network,
                why: Unusable::Encrypted,
            } => write!(
                f,
                "overlay network {network} is encrypted (--opt encrypted); dxdp links nothing on \
                 encrypted networks, where skipping the stack could send a frame in clear"
            ),
            Self::Unusable {
                network,
                why: Unusable::IccDisabled,
            } => write!(
                f,
                "Docker disables inter-container traffic on network {network} \
                 ({ICC_OPTION}=false); dxdp never opens a path Docker closes"
            ),
        }
    }
}
