//! The pass kernel notices call for, gathered over a short window: a container that changes
//! its MAC makes the bridge announce it once per port it appears on, and one iptables command
//! commits a generation per rule, so notices arriving together make one pass. Passes they
//! cause are at least [`MIN_GAP`] apart, so that a container spraying forged MACs or a rule
//! loader in a loop costs at most one pass a second.
use std::{collections::BTreeSet, time::Duration};

use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::{Engine, Host, Which, notices::Notice};
use crate::netlink::format_mac;

/// How long notices are gathered after the first one.
const WINDOW: Duration = Duration::from_millis(100);
/// The least time between two passes caused by notices.
const MIN_GAP: Duration = Duration::from_secs(1);

#[derive(Default)]
pub struct NoticeBatch {
    /// Containers whose MAC changed or was taken over.
    moved: BTreeSet<String>,
    rules: bool,
    lost: bool,
    due: Option<Instant>,
    last: Option<Instant>,
}

impl NoticeBatch {
    /// Notes what `notice` calls for; a notice about nothing linked calls for nothing.
    pub fn note(&mut self, notice: Notice, engine: &Engine<impl Host>) {
        match notice {
            Notice::Learned { port, mac } => {
                let moved = engine.moved(port, mac);
                if moved.is_empty() {
                    return;
                }
                if !moved.is_subset(&self.moved) {
                    info!(
                        veth = port,
                        mac = %format_mac(&mac),
                        containers = ?moved,
                        "a bridge learned a MAC that changes linked containers; reading them again"
                    );
                }
                self.moved.extend(moved);
            }
            Notice::Policy => {
                if !self.rules {
                    debug!("the nf_tables ruleset or traffic control changed");
                }
                self.rules = true;
            }
            Notice::Lost => {
                warn!("kernel notices were lost; reading every container again");
                self.lost = true;
            }
        }
        if self.due.is_none() {
            let now = Instant::now();
            let earliest = self.last.map_or(now, |last| last + MIN_GAP);
            self.due = Some((now + WINDOW).max(earliest));
        }
    }

    /// Resolves when the gathered notices are due; never while none are gathered.
    pub async fn due(&self) {
        match self.due {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    }

    /// The pass the gathered notices call for, after forgetting what they made stale; the
    /// window starts anew.
    pub fn take(&mut self, engine: &mut Engine<impl Host>) -> Which {
        self.due = None;
        self.last = Some(Instant::now());
        let moved = std::mem::take(&mut self.moved);
        let (rules, lost) = (
            std::mem::take(&mut self.rules),
            std::mem::take(&mut self.lost),
        );
        if lost {
            engine.forget_all_endpoints();
            return Which::All;
        }
        engine.forget_endpoints(&moved);
        match (moved.is_empty(), rules) {
            (true, _) => Which::LastSeen,
            (false, false) => Which::Containers(moved),
            (false, true) => Which::All,
        }
    }
}
