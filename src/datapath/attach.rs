//! Loading the two programs once (pinned), attaching them to host veths through pinnable
//! bpf_links, and recognising what is attached already — ours or someone else's.
use anyhow::{Context, Result, anyhow, bail};
use aya::{
    Ebpf,
    programs::{
        LinkOrder, ProgramInfo, SchedClassifier, TcAttachType, Xdp, XdpMode,
        links::{FdLink, PinnedLink},
        tc::{SchedClassifierLink, TcAttachOptions},
        xdp::XdpLink,
    },
};
use aya_obj::programs::xdp::XdpAttachType;
use dxdp_common::names;

use super::{
    Kind, choice,
    pins::{self, Pins},
    state::{Journal, Undo},
};
use crate::{endpoint::Endpoint, netlink::Interface};

pub(super) struct Programs<'p> {
    pins: &'p Pins,
    tc: SchedClassifier,
    xdp: Xdp,
    /// On overlays' VXLAN devices, for links to tasks of other nodes.
    tunnel: SchedClassifier,
    tc_id: u32,
    xdp_id: u32,
    tunnel_id: u32,
}

impl<'p> Programs<'p> {
    /// Adopts the pinned programs, loading and pinning them first if this is the first run.
    pub(super) fn open(ebpf: &mut Ebpf, pins: &'p Pins) -> Result<Self> {
        let tc = pinned_classifier(ebpf, names::TC_PROGRAM, &pins.prog(Kind::Tc))?;
        if !pins.prog(Kind::Xdp).exists() {
            let prog: &mut Xdp = program(ebpf, choice::xdp_program())?.try_into()?;
            prog.load()
                .context("the kernel refused dxdp's xdp program")?;
            prog.pin(pins.prog(Kind::Xdp))?;
        }
        let xdp = Xdp::from_pin(pins.prog(Kind::Xdp), XdpAttachType::Interface)?;
        let tunnel = pinned_classifier(ebpf, names::TUNNEL_PROGRAM, &pins.tunnel_prog())?;
        let tc_id = tc.info()?.id();
        let xdp_id = xdp.info()?.id();
        let tunnel_id = tunnel.info()?.id();
        Ok(Self {
            pins,
            tc,
            xdp,
            tunnel,
            tc_id,
            xdp_id,
            tunnel_id,
        })
    }

    /// Replaces pinned programs that differ from the ones this binary carries (an upgrade), in
    /// every attachment at once through bpf_link_update, so no frame meets a detached hook.
    /// Returns the kinds replaced.
    pub(super) fn upgrade(ebpf: &mut Ebpf, pins: &Pins) -> Result<Vec<Kind>> {
        let mut replaced = Vec::new();
        if !pins.prog(Kind::Tc).exists() || !pins.prog(Kind::Xdp).exists() {
            return Ok(replaced);
        }
        let links = pins::link_pins(pins)?;
        let tc_links: Vec<std::path::PathBuf> = links
            .iter()
            .filter(|(k, ..)| *k == Kind::Tc)
            .map(|(_, _, path)| path.clone())
            .collect();
        if upgrade_classifier(ebpf, names::TC_PROGRAM, &pins.prog(Kind::Tc), &tc_links)? {
            replaced.push(Kind::Tc);
        }
        // The VXLAN devices' program, loaded only where a link reached another node.
        if pins.tunnel_prog().exists() {
            let tunnel_links: Vec<std::path::PathBuf> = pins::tunnel_link_pins(pins)?
                .into_iter()
                .map(|(_, path)| path)
                .collect();
            upgrade_classifier(
                ebpf,
                names::TUNNEL_PROGRAM,
                &pins.tunnel_prog(),
                &tunnel_links,
            )?;
        }
        let fresh: &mut Xdp = program(ebpf, choice::xdp_program())?.try_into()?;
        fresh
            .load()
            .context("the kernel refused dxdp's xdp program")?;
        let pinned = Xdp::from_pin(pins.prog(Kind::Xdp), XdpAttachType::Interface)?;
        if fresh.info()?.tag() != pinned.info()?.tag() {
            for (_, _, path) in links.iter().filter(|(k, ..)| *k == Kind::Xdp) {
                let link = FdLink::from(PinnedLink::from_pin(path)?);
                let id = fresh.attach_to_link(XdpLink::try_from(link)?)?;
                drop(fresh.take_link(id)?);
            }
            repin(pins.prog(Kind::Xdp), |path| Ok(fresh.pin(path)?))?;
            replaced.push(Kind::Xdp);
        }
        Ok(replaced)
    }

    /// Is our program of `kind` attached to this host veth right now?
    pub(super) fn attached(
        &self,
        kind: Kind,
        ifname: &str,
        host: Option<&Interface>,
    ) -> Result<bool> {
        match kind {
            Kind::Tc => Ok(tcx_ingress(ifname)?.iter().any(|p| p.id() == self.tc_id)),
            Kind::Xdp => Ok(host.and_then(|h| h.xdp_prog_id) == Some(self.xdp_id)),
        }
    }

    /// Attaches `kind` to the endpoint's host veth unless ours is there already; for a task of
    /// another node, the tunnel program to the VXLAN device its frames come in by.
    pub(super) fn attach(&mut self, kind: Kind, ep: &Endpoint, undo: &mut Journal) -> Result<()> {
        if let Some(tunnel) = ep.tunnel_ifindex {
            return self.attach_tunnel(tunnel, &ep.host_ifname, undo);
        }
        let path = self.pins.link(kind, ep.host_ifindex);
        if self.attached_now(kind, ep)? {
            if path.exists() {
                return Ok(());
            }
            self.wait_detached(kind, ep)?;
        }
        pins::remove_if_present(&path)?;
        let link: FdLink = match kind {
            Kind::Tc => attach_tcx_last(&mut self.tc, &ep.host_ifname)
                .with_context(|| format!("cannot attach tc program to {}", ep.host_ifname))?,
            Kind::Xdp => {
                let id = self
                    .xdp
                    .attach_to_if_index(ep.host_ifindex, XdpMode::Driver)
                    .map_err(|e| xdp_attach_error(e, ep))?;
                self.xdp.take_link(id)?.try_into().map_err(|_| {
                    anyhow!(
                        "{}: XDP was attached through netlink, which cannot be pinned; dxdp \
                         needs bpf_link XDP attach (Linux 5.9+)",
                        ep.host_ifname
                    )
                })?
            }
        };
        link.pin(&path)
            .with_context(|| format!("cannot pin {}", path.display()))?;
        undo.push(Undo::LinkPin(path));
        Ok(())
    }

    /// Is our tunnel program attached to the VXLAN device `ifname` right now?
    pub(super) fn tunnel_attached(&self, ifname: &str) -> Result<bool> {
        Ok(tcx_ingress(ifname)?
            .iter()
            .any(|p| p.id() == self.tunnel_id))
    }

    /// Attaches the tunnel program to the VXLAN device `ifname` unless ours is there already.
    fn attach_tunnel(&mut self, ifindex: u32, ifname: &str, undo: &mut Journal) -> Result<()> {
        let path = self.pins.tunnel_link(ifindex);
        let attached = || {
            Ok(tcx_ingress(ifname)?
                .iter()
                .any(|p| p.id() == self.tunnel_id))
        };
        if attached()? {
            if path.exists() {
                return Ok(());
            }
            // Unpinned a moment ago (its last remote endpoint went): released from a workqueue.
            if !wait_released(attached)? {
                bail!(
                    "{ifname}: dxdp's tunnel program is attached without its pin {}; another \
                     process holds that attachment",
                    path.display()
                );
            }
        }
        pins::remove_if_present(&path)?;
        let link = attach_tcx_last(&mut self.tunnel, ifname)
            .with_context(|| format!("cannot attach the tunnel program to {ifname}"))?;
        link.pin(&path)
            .with_context(|| format!("cannot pin {}", path.display()))?;
        undo.push(Undo::LinkPin(path));
        Ok(())
    }

    /// [`Programs::attached`], asking the kernel about this one veth.
    fn attached_now(&self, kind: Kind, ep: &Endpoint) -> Result<bool> {
        // Only XDP's slot is reported by rtnetlink; TCX is asked directly.
        let iface = match kind {
            Kind::Xdp => {
                crate::netlink::interface(&crate::netns::NetnsPath::host(), ep.host_ifindex)?
            }
            Kind::Tc => None,
        };
        self.attached(kind, &ep.host_ifname, iface.as_ref())
    }

    /// Unpinning a bpf_link releases it from a kernel workqueue, not at once: a veth whose
    /// attachment was unpinned a moment ago (its last link removed, then linked again) may
    /// still carry our program, and attaching it again would fail with EEXIST.
    fn wait_detached(&self, kind: Kind, ep: &Endpoint) -> Result<()> {
        if !wait_released(|| self.attached_now(kind, ep))? {
            bail!(
                "{}: dxdp's {kind} program is attached without its pin {}; another process \
                 holds that attachment. Stop it, or delete and recreate the veth",
                ep.host_ifname,
                self.pins.link(kind, ep.host_ifindex).display()
            );
        }
        Ok(())
    }

    /// Programs of other tools on a veth: TCX ingress ones beside ours, or an XDP program.
    pub(super) fn foreign_on(&self, iface: &Interface) -> Result<Vec<String>> {
        let mut out: Vec<String> = tcx_ingress(&iface.name)?
            .iter()
            .filter(|p| p.id() != self.tc_id)
            .map(|p| format!("tcx ingress {}", describe_program(p.id())))
            .collect();
        if let Some(id) = iface.xdp_prog_id.filter(|id| *id != self.xdp_id) {
            out.push(format!("xdp {}", describe_program(id)));
        }
        Ok(out)
    }

    /// Removes attachment pins whose interface is no longer managed or no longer carries our
    /// program (its device was destroyed, which detached the link).
    pub(super) fn drop_stale_pins(&self, managed: &[u32], host: &[Interface]) -> Result<usize> {
        let mut dropped = 0;
        for (kind, ifindex, path) in pins::link_pins(self.pins)? {
            let iface = host.iter().find(|i| i.index == ifindex);
            let live = managed.contains(&ifindex)
                && match iface {
                    Some(i) => self.attached(kind, &i.name, Some(i)).unwrap_or(false),
                    None => false,
                };
            if !live {
                pins::remove_if_present(&path)?;
                dropped += 1;
            }
        }
        Ok(dropped)
    }
}

/// Refuses to touch a veth where another tool's XDP program sits: XDP has one slot per device
/// and replacing it would silently break that tool.
pub(super) fn check_foreign(
    kind: Kind,
    ep: &Endpoint,
    host: &[Interface],
    programs: &Programs,
) -> Result<()> {
    if kind != Kind::Xdp {
        return Ok(());
    }
    let Some(iface) = host.iter().find(|i| i.index == ep.host_ifindex) else {
        bail!("{}: host veth {} vanished", ep.label, ep.host_ifname);
    };
    match iface.xdp_prog_id {
        Some(id) if id != programs.xdp_id => bail!(
            "{} ({}) already has XDP program {} attached by another tool; dxdp never replaces \
             it. Detach it, or link with --datapath tc",
            ep.host_ifname,
            ep.label,
            describe_program(id)
        ),
        _ => Ok(()),
    }
}

pub(super) fn describe_program(id: u32) -> String {
    let name = aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .find(|p| p.id() == id)
        .and_then(|p| p.name_as_str().map(str::to_owned));
    match name {
        Some(name) if !name.is_empty() => format!("id {id} \"{name}\""),
        _ => format!("id {id}"),
    }
}

/// The classifier `name` as pinned at `path`, loaded and pinned there first if it is not yet.
pub(super) fn pinned_classifier(
    ebpf: &mut Ebpf,
    name: &str,
    path: &std::path::Path,
) -> Result<SchedClassifier> {
    if !path.exists() {
        let prog: &mut SchedClassifier = program(ebpf, name)?.try_into()?;
        prog.load()
            .with_context(|| format!("the kernel refused dxdp's {name}"))?;
        prog.pin(path)?;
    }
    Ok(SchedClassifier::from_pin(path)?)
}

/// Attaches `prog` last in the device's TCX ingress chain, through a link that can be pinned:
/// another tool's policy programs see the packet first, and ours passes with TCX_NEXT so later
/// ones still do too.
pub(super) fn attach_tcx_last(prog: &mut SchedClassifier, ifname: &str) -> Result<FdLink> {
    let id = prog.attach_with_options(
        ifname,
        TcAttachType::Ingress,
        TcAttachOptions::TcxOrder(LinkOrder::last()),
    )?;
    prog.take_link(id)?.try_into().map_err(|_| {
        anyhow!(
            "{ifname}: the kernel attached through netlink, which cannot be pinned; dxdp needs \
             TCX (Linux 6.6+)"
        )
    })
}

/// Attaches `prog` (dxdp's `name`) last in the TCX ingress chain of `ifname` through a link
/// pinned at `path`, unless that pinned attachment is there already; returns whether it
/// attached. A program attached without its pin is another process's attachment in the
/// making: waited for, then refused.
pub(super) fn attach_pinned(
    prog: &mut SchedClassifier,
    name: &str,
    path: &std::path::Path,
    ifname: &str,
) -> Result<bool> {
    let id = prog.info()?.id();
    let attached = || -> Result<bool> { Ok(tcx_ingress(ifname)?.iter().any(|p| p.id() == id)) };
    if attached()? {
        if path.exists() {
            return Ok(false);
        }
        if !wait_released(attached)? {
            bail!(
                "{ifname}: dxdp's {name} is attached without its pin {}; another process holds \
                 that attachment",
                path.display()
            );
        }
    }
    let link = attach_tcx_last(prog, ifname)
        .with_context(|| format!("cannot attach {name} to {ifname}"))?;
    link.pin(path)
        .with_context(|| format!("cannot pin {}", path.display()))?;
    Ok(true)
}

/// Unpinning a bpf_link releases it from a kernel workqueue, not at once: waits up to 2 s for
/// `attached` to say the program is gone; `false` if it is still there.
pub(super) fn wait_released(attached: impl Fn() -> Result<bool>) -> Result<bool> {
    let started = std::time::Instant::now();
    loop {
        std::thread::sleep(std::time::Duration::from_millis(2));
        if !attached()? {
            return Ok(true);
        }
        if started.elapsed() > std::time::Duration::from_secs(2) {
            return Ok(false);
        }
    }
}

/// Replaces the classifier pinned at `prog_pin` with this binary's `name` if they differ, in
/// each attachment pinned at `link_pins` at once (bpf_link_update: no packet meets a detached
/// hook). Returns whether it replaced it.
pub(super) fn upgrade_classifier(
    ebpf: &mut Ebpf,
    name: &str,
    prog_pin: &std::path::Path,
    link_pins: &[std::path::PathBuf],
) -> Result<bool> {
    let fresh: &mut SchedClassifier = program(ebpf, name)?.try_into()?;
    fresh
        .load()
        .with_context(|| format!("the kernel refused dxdp's {name}"))?;
    let pinned = SchedClassifier::from_pin(prog_pin)?;
    if fresh.info()?.tag() == pinned.info()?.tag() {
        return Ok(false);
    }
    for path in link_pins {
        let link = FdLink::from(PinnedLink::from_pin(path)?);
        let id = fresh.attach_to_link(SchedClassifierLink::try_from(link)?)?;
        // The pin keeps the link attached; our handle may go.
        drop(fresh.take_link(id)?);
    }
    repin(prog_pin.to_path_buf(), |path| Ok(fresh.pin(path)?))?;
    Ok(true)
}

/// Swaps a program pin: the old program stays loaded while attachments still use it.
fn repin(path: std::path::PathBuf, pin: impl FnOnce(&std::path::Path) -> Result<()>) -> Result<()> {
    // bpffs refuses names with a dot.
    let mut staged = path.clone().into_os_string();
    staged.push("_new");
    let staged = std::path::PathBuf::from(staged);
    pins::remove_if_present(&staged)?;
    pin(&staged)?;
    std::fs::rename(&staged, &path).with_context(|| format!("cannot replace {}", path.display()))
}

pub(super) fn tcx_ingress(ifname: &str) -> Result<Vec<ProgramInfo>> {
    Ok(SchedClassifier::query_tcx(ifname, TcAttachType::Ingress)
        .with_context(|| format!("cannot query TCX programs on {ifname}"))?
        .1)
}

fn program<'e>(ebpf: &'e mut Ebpf, name: &str) -> Result<&'e mut aya::programs::Program> {
    ebpf.program_mut(name)
        .ok_or_else(|| anyhow!("eBPF object lacks program {name}"))
}

/// veth refuses an XDP program that is not multi-buffer aware when its peer's MTU exceeds one
/// page less XDP's headroom and the skb's shared info (ERANGE, "Peer MTU is too large to set
/// XDP": 3,506 bytes on x86_64 with 4 KiB pages); say so, and the way out, in one line.
fn xdp_attach_error(err: aya::programs::ProgramError, ep: &Endpoint) -> anyhow::Error {
    if let aya::programs::ProgramError::SyscallError(sys) = &err
        && sys.io_error.raw_os_error() == Some(libc::ERANGE)
    {
        let mtu = crate::netlink::mtu_here(&ep.host_ifname)
            .map_or_else(|| "its MTU".to_owned(), |m| format!("MTU {m}"));
        return anyhow!(
            "{}: the xdp datapath cannot attach to {} ({mtu}): veth takes XDP only up to an MTU \
             of about 3,500 bytes (a page less headroom); link with --datapath tc, which carries \
             jumbo frames",
            ep.label,
            ep.host_ifname
        );
    }
    anyhow::Error::new(err).context(format!(
        "cannot attach native XDP program to {}",
        ep.host_ifname
    ))
}
