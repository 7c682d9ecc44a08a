//! What the rules allow a pair, family by family. A rule of one family (ip6tables' `FORWARD`
//! policy `DROP` under Docker 28) closes only that family: its frames stay on the bridge, where
//! the rule sees them, and the families no rule closes ride the link. Traffic control on a
//! port acts on every frame, so it closes both.
use super::{Blocker, model::Family};
use crate::family::Families;

/// The rules that close each family of a pair's traffic, and which families it has at all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FamilyVerdict {
    /// Families of which some end of the pair has an address: only those have traffic.
    carried: Families,
    v4: Vec<Blocker>,
    v6: Vec<Blocker>,
}

impl FamilyVerdict {
    pub(super) fn new(carried: Families) -> Self {
        Self {
            carried,
            ..Self::default()
        }
    }

    /// `blocker` may drop or alter traffic of `family` on the bridge.
    pub(super) fn close(&mut self, family: Family, blocker: Blocker) {
        let list = match family {
            Family::V4 => &mut self.v4,
            Family::V6 => &mut self.v6,
        };
        if !list.contains(&blocker) {
            list.push(blocker);
        }
    }

    /// `blocker` acts on every frame, whatever its family.
    pub(super) fn close_all(&mut self, blocker: Blocker) {
        self.close(Family::V4, blocker.clone());
        self.close(Family::V6, blocker);
    }

    /// Families of which some end has an address.
    pub fn carried(&self) -> Families {
        self.carried
    }

    /// Families some rule closes.
    pub fn closed(&self) -> Families {
        Families {
            ipv4: !self.v4.is_empty(),
            ipv6: !self.v6.is_empty(),
        }
    }

    /// Families that may ride a link: carried, and closed by no rule.
    pub fn open(&self) -> Families {
        self.carried.and(self.closed().others())
    }

    /// The rules that close any of `families`, distinct, IPv4's first.
    pub fn closing(&self, families: Families) -> Vec<Blocker> {
        let mut out: Vec<Blocker> = Vec::new();
        let lists = [(families.ipv4, &self.v4), (families.ipv6, &self.v6)];
        for blocker in lists
            .into_iter()
            .filter(|(wanted, _)| *wanted)
            .flat_map(|(_, list)| list)
        {
            if !out.contains(blocker) {
                out.push(blocker.clone());
            }
        }
        out
    }

    /// Every rule that closes some family.
    pub fn blockers(&self) -> Vec<Blocker> {
        self.closing(Families::ALL)
    }

    /// For a pair that is linked: which families stay on the bridge, and the rule that keeps
    /// them there, e.g. "IPv4 only; IPv6 stays on the bridge: [ip6tables filter chain FORWARD:
    /// policy drop]". `None` when every carried family rides the link.
    pub fn note(&self) -> Option<String> {
        let kept = self.carried.and(self.closed());
        if kept.is_empty() {
            return None;
        }
        Some(format!(
            "{} only; {kept} stays on the bridge: {}",
            self.open(),
            listed(&self.closing(kept))
        ))
    }
}

/// The first rule in brackets, and how many more `dxdp doctor` lists.
pub fn listed(blockers: &[Blocker]) -> String {
    let first = blockers
        .first()
        .map(ToString::to_string)
        .unwrap_or_default();
    match blockers.len() {
        0 | 1 => format!("[{first}]"),
        n => format!("[{first}] (and {} more; `dxdp doctor` lists them)", n - 1),
    }
}
