//! The engine's passes against a fake container engine and a fake host ([`fakes`]): what a pass
//! looks at, what it keeps, and what it does when something fails or changes behind it.
mod egress;
mod fakes;
mod links;
mod overlay;
mod ports;

use std::sync::Arc;

use super::{Engine, Outcome, Which};
use crate::{datapath::ExistingConnections, labels::ENABLE, metrics::Metrics};
pub(crate) use fakes::record;
use fakes::{ACCEPT_ALL, FakeEngine, FakeHost, Shared, World};

const PEERS: &str = "dxdp.peers";
const DATAPATH: &str = "dxdp.datapath";

/// A test's world, the engine over it, and a runtime to drive its passes.
struct Rig {
    shared: Shared,
    engine: Engine<FakeHost>,
    runtime: tokio::runtime::Runtime,
}

impl Rig {
    fn new(world: World) -> Self {
        let shared = Shared::default();
        *shared.world() = world;
        Self {
            engine: Engine::new(FakeHost(shared.clone()), Arc::new(Metrics::default())),
            shared,
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime"),
        }
    }

    fn pass(&mut self, which: Which) -> Option<Outcome> {
        let source = FakeEngine(self.shared.clone());
        self.runtime.block_on(self.engine.reconcile(&source, which))
    }

    fn about(&mut self, names: &[&str]) -> Option<Outcome> {
        let ids = names.iter().map(|n| format!("id-{n}")).collect();
        self.pass(Which::Containers(ids))
    }

    fn pinned(&self) -> Vec<String> {
        self.shared.world().pinned()
    }

    /// What the watch's poll of the tasks of other nodes calls for, and that pass if any.
    fn poll(&mut self) -> Option<Which> {
        let source = FakeEngine(self.shared.clone());
        let which = self.runtime.block_on(self.engine.poll_remote(&source))?;
        self.pass(which.clone());
        Some(which)
    }
}

/// a–b and c–d, each pair asking for a tc link.
fn two_pairs() -> World {
    let mut world = World::new();
    let asks = |peer| [(ENABLE, "true"), (PEERS, peer), (DATAPATH, "tc")];
    world.start("a", 11, &asks("b"));
    world.start("b", 12, &[]);
    world.start("c", 13, &asks("d"));
    world.start("d", 14, &[]);
    world
}
