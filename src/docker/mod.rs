//! What dxdp needs from dockerd: running containers with their labels and networks, resolved
//! by name, ID prefix or compose service, and a stream of "something changed" signals.
mod client;
mod endpoints;
mod podman;

pub use client::{BridgeNetwork, Container, Docker, NetworkAttachment};
pub use endpoints::endpoint_on;
pub use podman::Rootless;
