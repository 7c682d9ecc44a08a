//! What dxdp needs from dockerd: running containers with their labels and networks, resolved
//! by name, ID prefix or compose service, and a stream of "something changed" signals.
mod client;
mod endpoints;
mod inventory;
mod overlay_tasks;
mod podman;
pub mod userland_proxy;

pub use client::{
    BridgeNetwork, ConnectError, Container, Docker, Event, NetworkAttachment, NetworkCache,
    PublishedPort, RemoteTask,
};
pub use endpoints::endpoint_on;
pub use inventory::{ContainerSource, Inventory};
pub use overlay_tasks::OverlayTask;
pub use podman::Rootless;
