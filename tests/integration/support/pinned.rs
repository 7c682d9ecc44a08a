//! The pinned state, entry by entry: map dumps, attachments, whether a pin directory holds
//! exactly the links `dxdp status` lists, and [`LiveMaps`] to poll it cheaply.

use dxdp_common::{Endpoint as EndpointRecord, LinkKey, LinkMeta, LinkMetaKey, LinkTarget};

use super::{
    bpf::bpftool,
    dxdp::Dxdp,
    host::{host_ifindexes, xdp_prog_id},
};

/// bpftool's JSON dump of a pinned map: (key bytes, value bytes of CPU 0 or the value).
pub fn map_entries(pin_dir: &std::path::Path, map: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let path = pin_dir.join("maps").join(map);
    let path = path.to_string_lossy();
    let json = bpftool(&["map", "dump", "pinned", &path]);
    let bytes = |v: &serde_json::Value| -> Vec<u8> {
        v.as_array()
            .unwrap_or_else(|| panic!("bpftool dump of {map}: not a byte array: {v}"))
            .iter()
            .map(|b| {
                let s = b.as_str().unwrap_or_default();
                u8::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex byte")
            })
            .collect()
    };
    json.as_array()
        .unwrap_or_else(|| panic!("bpftool dump of {map}: {json}"))
        .iter()
        .map(|e| {
            let value = match e.get("values") {
                Some(per_cpu) => bytes(&per_cpu[0]["value"]),
                None => bytes(&e["value"]),
            };
            (bytes(&e["key"]), value)
        })
        .collect()
}

fn le_u32(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"))
}

/// Id of a pinned program, per bpftool.
pub fn pinned_prog_id(path: &std::path::Path) -> u32 {
    let path = path.to_string_lossy();
    bpftool(&["prog", "show", "pinned", &path])["id"]
        .as_u64()
        .expect("program id") as u32
}

/// Every bpf_link of the host: (link id, program id).
pub fn bpf_links() -> Vec<(u32, u32)> {
    bpftool(&["link", "show"])
        .as_array()
        .map(|links| {
            links
                .iter()
                .map(|l| {
                    (
                        l["id"].as_u64().unwrap_or(0) as u32,
                        l["prog_id"].as_u64().unwrap_or(0) as u32,
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Programs attached to a host interface's TCX ingress, by id.
pub fn tcx_ingress_ids(ifname: &str) -> Vec<u32> {
    use aya::programs::{SchedClassifier, TcAttachType};
    SchedClassifier::query_tcx(ifname, TcAttachType::Ingress)
        .map(|(_, programs)| programs.iter().map(|p| p.id()).collect())
        .unwrap_or_default()
}

/// What is wrong with a pin directory's state, entry by entry; empty when every entry of every
/// map belongs to a link `status` lists, between two live veths of the host that carry our
/// program through exactly one pinned attachment each:
/// - DXDP_LINK_META holds exactly the links; DXDP_LINKS exactly both directions of each;
/// - DXDP_ENDPOINTS, DXDP_TARGETS, DXDP_COUNTERS exactly the endpoints of the links, which are
///   the `interfaces` of status;
/// - `links/` holds one attachment pin per endpoint, of its datapath, and our program is
///   attached there (TCX ingress for tc, the XDP slot for xdp).
pub fn pinned_state_problems(dxdp: &Dxdp) -> Vec<String> {
    use std::collections::{BTreeMap, BTreeSet};
    let status = dxdp.status();
    let mut problems = Vec::new();
    let links: BTreeSet<(u32, u32)> = status
        .links
        .iter()
        .map(|l| (l.low_ifindex, l.high_ifindex))
        .collect();
    let endpoints: BTreeSet<u32> = links.iter().flat_map(|(x, y)| [*x, *y]).collect();
    let managed: BTreeMap<u32, String> = status
        .interfaces
        .iter()
        .map(|i| (i.ifindex, i.datapath.clone()))
        .collect();
    let managed_set: BTreeSet<u32> = managed.keys().copied().collect();
    if managed_set != endpoints {
        problems.push(format!(
            "interfaces {managed_set:?} are not exactly the endpoints of the links {endpoints:?}"
        ));
    }
    let host = host_ifindexes();
    for ifindex in &managed_set {
        match host.get(ifindex) {
            None => problems.push(format!(
                "managed ifindex {ifindex} does not exist on the host"
            )),
            Some(name) => {
                let iflink = std::fs::read_to_string(format!("/sys/class/net/{name}/iflink"))
                    .unwrap_or_default();
                if iflink.trim() == ifindex.to_string() {
                    problems.push(format!("managed ifindex {ifindex} ({name}) is not a veth"));
                }
            }
        }
    }
    let dir = &dxdp.pin_dir;
    if !dir.join("maps").exists() {
        if !links.is_empty() || !managed.is_empty() {
            problems.push(format!(
                "status lists links but {} has no maps",
                dir.display()
            ));
        }
        return problems;
    }
    let meta: BTreeSet<(u32, u32)> = map_entries(dir, "DXDP_LINK_META")
        .iter()
        .map(|(k, _)| (le_u32(&k[0..4]), le_u32(&k[4..8])))
        .collect();
    if meta != links {
        problems.push(format!("DXDP_LINK_META {meta:?} != links {links:?}"));
    }
    let mut directions: BTreeMap<(u32, u32), usize> = BTreeMap::new();
    for (k, v) in map_entries(dir, "DXDP_LINKS") {
        let (from, to) = (le_u32(&k[0..4]), le_u32(&v[0..4]));
        *directions.entry((from, to)).or_default() += 1;
        if !links.contains(&(from.min(to), from.max(to))) {
            problems.push(format!(
                "DXDP_LINKS entry {from} -> {to} belongs to no link"
            ));
        }
    }
    for (x, y) in &links {
        for (from, to) in [(*x, *y), (*y, *x)] {
            let n = directions.get(&(from, to)).copied().unwrap_or(0);
            if n != 1 {
                problems.push(format!(
                    "link {x}-{y}: {n} DXDP_LINKS entries {from} -> {to}"
                ));
            }
        }
    }
    for map in ["DXDP_ENDPOINTS", "DXDP_TARGETS", "DXDP_COUNTERS"] {
        let keys: BTreeSet<u32> = map_entries(dir, map)
            .iter()
            .map(|(k, _)| le_u32(k))
            .collect();
        if keys != endpoints {
            problems.push(format!("{map} keys {keys:?} != endpoints {endpoints:?}"));
        }
    }
    let mut pinned: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for name in dxdp.link_pins() {
        match name.split_once('-').map(|(k, i)| (k, i.parse::<u32>())) {
            Some((kind, Ok(ifindex))) => pinned.entry(ifindex).or_default().push(kind.to_owned()),
            _ => problems.push(format!("unexpected attachment pin {name}")),
        }
    }
    let prog_id = |name: &str| {
        let path = dir.join("progs").join(name);
        if path.exists() {
            pinned_prog_id(&path)
        } else {
            0
        }
    };
    let (tc_id, xdp_id) = (prog_id("dxdp_tc"), prog_id("dxdp_xdp"));
    for (ifindex, kinds) in &pinned {
        if !managed_set.contains(ifindex) {
            problems.push(format!(
                "attachment pin {kinds:?}-{ifindex} of an unmanaged ifindex"
            ));
        }
    }
    for (ifindex, kind) in &managed {
        let kinds = pinned.get(ifindex).cloned().unwrap_or_default();
        if kinds != [kind.clone()] {
            problems.push(format!(
                "ifindex {ifindex} ({kind}) has attachment pins {kinds:?}"
            ));
        }
        let Some(name) = host.get(ifindex) else {
            continue;
        };
        let attached = match kind.as_str() {
            "tc" => tcx_ingress_ids(name)
                .iter()
                .filter(|id| **id == tc_id)
                .count(),
            _ => usize::from(xdp_prog_id(name) == Some(xdp_id)),
        };
        if attached != 1 {
            problems.push(format!(
                "ifindex {ifindex} ({name}): our {kind} program is attached {attached} times"
            ));
        }
    }
    problems
}

/// A pin directory's maps opened straight from bpffs (BPF_OBJ_GET through aya), as another tool
/// would read them: no `dxdp` process, no lock on the pin directory and no eBPF object to load,
/// so one lookup costs a few system calls and a test can poll every few milliseconds while a
/// watch writes the maps. (`dxdp status --json` takes the directory's lock, waiting for the
/// watch's reconcile to finish, and loads the eBPF object and the kernel's BTF: tens of ms.)
pub struct LiveMaps {
    dir: std::path::PathBuf,
    meta: aya::maps::HashMap<aya::maps::MapData, LinkMetaKey, LinkMeta>,
    links: aya::maps::PerCpuHashMap<aya::maps::MapData, LinkKey, LinkTarget>,
    endpoints: aya::maps::HashMap<aya::maps::MapData, u32, EndpointRecord>,
}

impl LiveMaps {
    /// Opens the maps of a pin directory a `dxdp` made.
    #[track_caller]
    pub fn open(pin_dir: &std::path::Path) -> Self {
        use dxdp_common::names;
        let map = |name: &str| {
            let path = pin_dir.join("maps").join(name);
            let data = aya::maps::MapData::from_pin(&path)
                .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
            aya::maps::Map::from_map_data(data)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        };
        Self {
            dir: pin_dir.to_path_buf(),
            meta: map(names::LINK_META).try_into().expect("DXDP_LINK_META"),
            links: map(names::LINKS).try_into().expect("DXDP_LINKS"),
            endpoints: map(names::ENDPOINTS).try_into().expect("DXDP_ENDPOINTS"),
        }
    }

    /// Every link's (low, high) ifindex, from DXDP_LINK_META's keys. A walk that races a
    /// deletion may restart or stop early; the caller polls again.
    pub fn links(&self) -> Vec<(u32, u32)> {
        self.meta
            .keys()
            .map_while(Result::ok)
            .map(|k| (k.low_ifindex, k.high_ifindex))
            .collect()
    }

    /// The endpoint names a link's record holds, low end first.
    pub fn names(&self, x: u32, y: u32) -> Option<(String, String)> {
        let key = LinkMetaKey {
            low_ifindex: x.min(y),
            high_ifindex: x.max(y),
        };
        let meta = self.meta.get(&key, 0).ok()?;
        let text = |b: &[u8]| {
            let end = b.iter().position(|c| *c == 0).unwrap_or(b.len());
            String::from_utf8_lossy(&b[..end]).into_owned()
        };
        Some((text(&meta.low_name), text(&meta.high_name)))
    }

    /// Whether the link between two veths carries frames, whatever order dxdp writes its parts
    /// in: its record, both endpoints, each direction's entry targeting the other veth, and a
    /// pinned attachment (`links/KIND-IFINDEX`) on both veths.
    pub fn active(&self, x: u32, y: u32) -> bool {
        let (Ok(ex), Ok(ey)) = (self.endpoints.get(&x, 0), self.endpoints.get(&y, 0)) else {
            return false;
        };
        let toward = |from: u32, to: u32, mac| {
            self.links
                .get(&LinkKey::new(from, mac), 0)
                .is_ok_and(|per_cpu| per_cpu.iter().next().map(|t| t.target_ifindex) == Some(to))
        };
        self.names(x, y).is_some()
            && toward(x, y, ey.mac)
            && toward(y, x, ex.mac)
            && [x, y].iter().all(|i| self.attachment_pinned(*i))
    }

    /// Whether nothing is left of a veth: no link record names it, it is no endpoint, it has no
    /// pinned attachment.
    pub fn forgot(&self, ifindex: u32) -> bool {
        !self.attachment_pinned(ifindex)
            && self.endpoints.get(&ifindex, 0).is_err()
            && !self
                .links()
                .iter()
                .any(|(x, y)| *x == ifindex || *y == ifindex)
    }

    fn attachment_pinned(&self, ifindex: u32) -> bool {
        ["tc", "xdp"].iter().any(|kind| {
            self.dir
                .join("links")
                .join(format!("{kind}-{ifindex}"))
                .exists()
        })
    }
}
