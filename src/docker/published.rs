//! The ports containers publish on the host: from the list (`docker ps`'s PORTS column) for
//! `doctor`, and from one container's inspect for the planners.
use anyhow::Result;
use bollard::models::ContainerInspectResponse;

use super::Docker;
use crate::plan::ContainerView;

impl Docker {
    /// Every port a running container publishes on the host, TCP and UDP.
    pub async fn published_ports(&self) -> Result<Vec<PublishedPort>> {
        use bollard::models::PortSummaryTypeEnum;
        let list = self.running_summaries().await?;
        let mut out = Vec::new();
        for c in list {
            let (Some(id), Some(name)) = (c.id, c.names.and_then(|n| n.into_iter().next())) else {
                continue;
            };
            for port in c.ports.unwrap_or_default() {
                let udp = match port.typ {
                    Some(PortSummaryTypeEnum::TCP) => false,
                    Some(PortSummaryTypeEnum::UDP) => true,
                    _ => continue,
                };
                let (Some(host_port), Some(Ok(host_ip))) =
                    (port.public_port, port.ip.as_deref().map(str::parse))
                else {
                    continue;
                };
                out.push(PublishedPort {
                    container: name.trim_start_matches('/').to_owned(),
                    id: id.clone(),
                    host_ip,
                    host_port,
                    container_port: port.private_port,
                    udp,
                });
            }
        }
        out.sort_by(|a, b| {
            (&a.container, a.host_port, a.udp).cmp(&(&b.container, b.host_port, b.udp))
        });
        Ok(out)
    }
}

/// The bindings of `NetworkSettings.Ports` (`"80/tcp": [{"HostIp": "0.0.0.0", "HostPort":
/// "8080"}]`): TCP and UDP only, an empty host address read as all of IPv4 (Podman writes it
/// so), a binding without a host port (exposed, not published) left out.
pub(super) fn published_of(
    inspect: &ContainerInspectResponse,
    view: &ContainerView,
) -> Vec<PublishedPort> {
    let Some(ports) = inspect
        .network_settings
        .as_ref()
        .and_then(|n| n.ports.as_ref())
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (spec, bindings) in ports {
        let Some((port, proto)) = spec.split_once('/') else {
            continue;
        };
        let (Ok(container_port), udp) = (port.parse::<u16>(), proto == "udp") else {
            continue;
        };
        if !udp && proto != "tcp" {
            continue;
        }
        for b in bindings.iter().flatten() {
            let host_ip = match b.host_ip.as_deref().map(str::trim) {
                None | Some("") => Ok(std::net::IpAddr::from([0, 0, 0, 0])),
                Some(ip) => ip.parse(),
            };
            let host_port = b.host_port.as_deref().map(str::parse::<u16>);
            if let (Ok(host_ip), Some(Ok(host_port))) = (host_ip, host_port) {
                out.push(PublishedPort {
                    container: view.name.clone(),
                    id: view.id.clone(),
                    host_ip,
                    host_port,
                    container_port,
                    udp,
                });
            }
        }
    }
    out.sort_by_key(|p| (p.host_port, p.udp, p.host_ip));
    out
}

/// A port a running container publishes, as `doctor` checks it (`docker ps`'s PORTS column).
#[derive(Clone, Debug)]
pub struct PublishedPort {
    pub container: String,
    pub id: String,
    /// The host address it is bound to; unspecified (0.0.0.0, ::) for all of that family.
    pub host_ip: std::net::IpAddr,
    pub host_port: u16,
    pub container_port: u16,
    pub udp: bool,
}

#[cfg(test)]
mod tests {
    use super::published_of;

    #[test]
    fn published_ports_are_read_from_the_inspects_port_map() {
        let inspect: bollard::models::ContainerInspectResponse = serde_json::from_str(
            r#"{"Id": "abc", "Name": "/web", "NetworkSettings": {"Ports": {
                "80/tcp": [{"HostIp": "0.0.0.0", "HostPort": "8080"},
                           {"HostIp": "::", "HostPort": "8080"}],
                "53/udp": [{"HostIp": "", "HostPort": "5353"}],
                "9000/tcp": null,
                "132/sctp": [{"HostIp": "0.0.0.0", "HostPort": "132"}]
            }}}"#,
        )
        .expect("an inspect");
        let view = crate::plan::ContainerView {
            id: "abc".into(),
            name: "web".into(),
            ..Default::default()
        };
        let got: Vec<String> = published_of(&inspect, &view)
            .iter()
            .map(|p| {
                let proto = if p.udp { "udp" } else { "tcp" };
                format!(
                    "{}:{}->{}/{proto}",
                    p.host_ip, p.host_port, p.container_port
                )
            })
            .collect();
        // Exposed-only (no binding) and SCTP are left out; Podman's empty address is IPv4's all.
        assert_eq!(
            got,
            [
                "0.0.0.0:5353->53/udp",
                "0.0.0.0:8080->80/tcp",
                ":::8080->80/tcp"
            ]
        );
    }
}
