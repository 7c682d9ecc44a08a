//! May two containers be linked, on which network and with which datapath, and if not, why.
//!
//! One home for the rules that `dxdp watch` applies to running containers ([`crate::plan`]) and
//! that `dxdp compose-check` predicts from a compose file ([`crate::compose`]): each side brings
//! what it knows (labels read off a container, or off a service), and both get the same answer
//! and the same [`Refusal`] messages.
//!
//! - A side with malformed labels or `dxdp.enable=false` takes part in no link.
//! - If both sides set `dxdp.network` they must agree, and only that network counts.
//! - Stated datapaths must agree; one stated datapath beats `auto`.
//! - Among the networks both are on, the first by name that is a `bridge` network with
//!   inter-container traffic allowed carries the link; otherwise every reason there is none.
pub(crate) mod keys;
mod refusal;

pub(crate) use refusal::{FIREWALL_REASON, REASONS, Refusal, Unusable};

use crate::choice::Choice;

/// What one end's labels say about the pair.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Side<'a> {
    pub(crate) name: &'a str,
    /// `dxdp.network`, if set (and known: an interpolated value in a compose file is not).
    pub(crate) network: Option<&'a str>,
    pub(crate) datapath: Choice,
}

/// What the two ends agreed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Agreed<'a> {
    /// The network `dxdp.network` names, and the name of a side that set it.
    pub(crate) network: Option<(&'a str, &'a str)>,
    pub(crate) datapath: Choice,
}

/// Checks that the two ends' labels agree; every disagreement, not just the first.
pub(crate) fn agree<'a>(a: Side<'a>, b: Side<'a>) -> Result<Agreed<'a>, Vec<Refusal>> {
    let mut refusals = Vec::new();
    let network = match (a.network, b.network) {
        (Some(x), Some(y)) if x != y => {
            refusals.push(Refusal::NetworksDisagree {
                a: a.name.to_owned(),
                a_network: x.to_owned(),
                b: b.name.to_owned(),
                b_network: y.to_owned(),
            });
            None
        }
        (Some(x), _) => Some((x, a.name)),
        (None, Some(y)) => Some((y, b.name)),
        (None, None) => None,
    };
    let datapath = a.datapath.merge(b.datapath).unwrap_or_else(|| {
        refusals.push(Refusal::DatapathsDisagree {
            a: a.name.to_owned(),
            a_datapath: a.datapath,
            b: b.name.to_owned(),
            b_datapath: b.datapath,
        });
        Choice::Auto
    });
    if refusals.is_empty() {
        Ok(Agreed { network, datapath })
    } else {
        Err(refusals)
    }
}

/// A network both ends are on, as the caller knows it.
pub(crate) trait Candidate {
    /// The name Docker knows it by (what `dxdp.network` names).
    fn name(&self) -> String;
    /// Why it cannot carry a link, if it cannot.
    fn unusable(&self) -> Option<Unusable>;
}

/// The network a link uses: the first of `shared` (the networks both ends are on, restricted to
/// the one `dxdp.network` names, sorted by name) that can carry it. Otherwise every reason there
/// is none; `named` is `(network, setter, side missing from it)` when `dxdp.network` is set.
pub(crate) fn pick_network<'n, N: Candidate>(
    shared: &[&'n N],
    named: Option<(&str, &str, Option<&str>)>,
) -> Result<&'n N, Vec<Refusal>> {
    if let Some(net) = shared.iter().find(|n| n.unusable().is_none()) {
        return Ok(net);
    }
    if shared.is_empty() {
        return Err(vec![match named {
            Some((network, setter, missing)) => Refusal::NotOnNamedNetwork {
                network: network.to_owned(),
                setter: setter.to_owned(),
                missing: missing.map(str::to_owned),
            },
            None => Refusal::NoSharedNetwork,
        }]);
    }
    Err(shared
        .iter()
        .filter_map(|n| {
            n.unusable().map(|why| Refusal::Unusable {
                network: n.name(),
                why,
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side<'a>(name: &'a str, network: Option<&'a str>, datapath: Choice) -> Side<'a> {
        Side {
            name,
            network,
            datapath,
        }
    }

    #[test]
    fn agreement_reports_every_disagreement() {
        let a = side("a", Some("front"), Choice::Tc);
        let b = side("b", Some("back"), Choice::Xdp);
        let refusals = agree(a, b).unwrap_err();
        let shown: Vec<String> = refusals.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "a sets dxdp.network=front but b sets dxdp.network=back; make them agree or drop one",
                "a sets dxdp.datapath=tc but b sets dxdp.datapath=xdp; make them agree or set one to auto",
            ]
        );
    }

    #[test]
    fn one_stated_network_and_datapath_win() {
        let a = side("a", None, Choice::Auto);
        let b = side("b", Some("front"), Choice::Xdp);
        assert_eq!(
            agree(a, b),
            Ok(Agreed {
                network: Some(("front", "b")),
                datapath: Choice::Xdp
            })
        );
    }

    #[derive(Debug)]
    struct Net(&'static str, Option<Unusable>);
    impl Candidate for Net {
        fn name(&self) -> String {
            self.0.to_owned()
        }
        fn unusable(&self) -> Option<Unusable> {
            self.1.clone()
        }
    }

    #[test]
    fn the_first_usable_network_wins_and_otherwise_every_reason_is_given() {
        let mac = Net("mac", Some(Unusable::Driver("macvlan".into())));
        let closed = Net("closed", Some(Unusable::IccDisabled));
        let open = Net("open", None);
        assert_eq!(pick_network(&[&mac, &open], None).unwrap().0, "open");
        let reasons: Vec<String> = pick_network(&[&closed, &mac], None)
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            reasons,
            [
                "Docker disables inter-container traffic on network closed \
                 (com.docker.network.bridge.enable_icc=false); dxdp never opens a path Docker closes",
                "network mac has driver macvlan; dxdp accelerates bridge and overlay networks only",
            ]
        );
    }

    #[test]
    fn no_shared_network_names_the_missing_side_when_dxdp_network_is_set() {
        let none: [&Net; 0] = [];
        let err = pick_network(&none, Some(("back", "api", Some("web")))).unwrap_err();
        assert_eq!(
            err[0].to_string(),
            "web is not on network back, which dxdp.network of api names"
        );
        let err = pick_network(&none, None).unwrap_err();
        assert!(err[0].to_string().starts_with("they share no network; "));
    }
}
