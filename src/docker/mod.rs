//! What dxdp needs from dockerd: running containers with their labels and networks, resolved
//! by name, ID prefix or compose service, and a stream of "something changed" signals.
mod client;
mod endpoints;
mod events;
mod inventory;
mod networks;
mod overlay_tasks;
mod podman;
mod published;
pub mod userland_proxy;

pub use client::{ConnectError, Container, Docker, NetworkAttachment, RemoteTask};
pub use endpoints::{endpoint_on, find_endpoint};
pub use events::Event;
pub use inventory::{ContainerSource, Inventory};
pub use networks::{BridgeNetwork, NetworkCache};
pub use overlay_tasks::OverlayTask;
pub use podman::Rootless;
pub use published::PublishedPort;
