//! The answer a rule's condition gives about a pair's packets: it holds for all of them, for
//! none, or possibly for some. Address sets ([`super::addr`]) and rules ([`super::model`]) both
//! answer so.

/// Whether a condition holds for all of a pair's packets, for none, or possibly for some.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tri {
    Yes,
    No,
    Maybe,
}

impl From<bool> for Tri {
    fn from(holds: bool) -> Self {
        if holds { Self::Yes } else { Self::No }
    }
}

impl Tri {
    /// The answer of the condition with `!` in front when `negate` (`Maybe` stays `Maybe`).
    pub(super) fn negate(self, negate: bool) -> Self {
        match (self, negate) {
            (Self::Yes, true) => Self::No,
            (Self::No, true) => Self::Yes,
            (t, _) => t,
        }
    }
}
