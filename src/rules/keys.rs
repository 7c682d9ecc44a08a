//! Every label and option name dxdp reads, its own and Docker's, so that the watch (which reads
//! them off containers and networks) and `compose-check` (which reads them off a compose file)
//! cannot drift apart.

/// The prefix of dxdp's own labels; every key under it is validated.
pub(crate) const PREFIX: &str = "dxdp.";
pub(crate) const ENABLE: &str = "dxdp.enable";
pub(crate) const PEERS: &str = "dxdp.peers";
pub(crate) const GROUP: &str = "dxdp.group";
pub(crate) const DATAPATH: &str = "dxdp.datapath";
pub(crate) const NETWORK: &str = "dxdp.network";
pub(crate) const FIREWALL: &str = "dxdp.firewall";
/// Published ports straight from the NIC (`dxdp watch --ingress-nic`), apart from links.
pub(crate) const INGRESS: &str = "dxdp.ingress";
/// Outbound connections straight to the NIC (`dxdp egress on`), apart from links.
pub(crate) const EGRESS: &str = "dxdp.egress";
pub(crate) const KEYS: [&str; 8] = [
    ENABLE, PEERS, GROUP, DATAPATH, NETWORK, FIREWALL, INGRESS, EGRESS,
];

/// Set by Compose (v1 and v2) on every container it starts.
pub(crate) const COMPOSE_PROJECT: &str = "com.docker.compose.project";
pub(crate) const COMPOSE_SERVICE: &str = "com.docker.compose.service";

/// The bridge driver option that turns inter-container traffic off (`false`) on a network.
pub(crate) const ICC_OPTION: &str = "com.docker.network.bridge.enable_icc";
/// An overlay network's driver option that turns on IPsec between nodes.
pub(crate) const ENCRYPTED_OPTION: &str = "encrypted";
