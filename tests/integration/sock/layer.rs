//! The socket layer (`sock` datapath) in userspace: loads and pins the sock_ops and sk_msg
//! programs of `ebpf/programs/src/sock.rs` and their maps under `ROOT/sock/`, attaches sock_ops
//! to a cgroup2 (pinned bpf_link) and sk_msg to the SOCKHASH, and writes the link entries that
//! say which namespace pairs may be redirected.
//!
//! Not shipped (docs/sock-datapath.md): it lives beside the tests that are its only user, which
//! watch for a kernel whose `tcp_bpf` keeps blocking `recv` and `splice` working. The library
//! and the `dxdp` binary carry none of it, and its programs are an object of their own.
//!
//! Lifetime rules (see the eBPF side for the kernel reasons):
//! - the SOCKHASH and the programs are pinned and never unpinned while a socket is in it:
//!   freeing the map purges the queued bytes of every redirected socket;
//! - `unlink` switches a link off (its switch and link entries go); live sockhash entries are
//!   never deleted, their sockets fall back to TCP at their next message.
use std::{
    fs::File,
    io,
    net::IpAddr,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result, bail};
use aya::{
    Ebpf, EbpfLoader,
    maps::{HashMap, MapData, PerCpuArray, SockHash},
    programs::{CgroupAttachMode, SkMsg, SockOps, links::FdLink},
};
use dxdp_common::sock::{
    SWITCH_ON, SockCounters, SockEntry, SockKey, SockLinkKey, SockLinkValue, names,
};
use nix::sched::{CloneFlags, setns};

use super::btf::{self, member_offset};

/// The socket layer's eBPF object, built by build.rs beside dxdp's.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/dxdp-sock-lab"));

/// Redirected bytes a receiver may hold unread before its senders fall back to TCP: what a
/// non-reading container can make the host hold per connection beyond TCP's own buffers. 4 MiB
/// is tcp_wmem's default maximum, what one TCP sender may have in flight anyway; lower values
/// make fast bulk streams fall back more often (each fallback lasts until the reader catches up).
pub const DEFAULT_QUEUE_LIMIT: u32 = 4 << 20;

/// Where the socket layer keeps its pins under the dxdp pin root.
pub fn sock_root(pin_root: &Path) -> PathBuf {
    pin_root.join("sock")
}

/// Kernel struct offsets the sk_msg program needs for its backpressure check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offsets {
    pub sk_user_data: u32,
    pub psock_msg_tot_len: u32,
    pub tp_write_seq: u32,
    pub tp_copied_seq: u32,
}

/// Reads the offsets from the running kernel's BTF. `sk_psock.msg_tot_len` (the bytes queued on
/// a psock's ingress list) is what the backpressure check reads; a kernel without it cannot
/// bound a non-reading receiver, and the socket layer refuses to run there.
pub fn kernel_offsets() -> Result<Offsets> {
    let blob = std::fs::read(btf::VMLINUX)
        .with_context(|| format!("cannot read {}: the socket layer needs BTF", btf::VMLINUX))?;
    Ok(Offsets {
        sk_user_data: member_offset(&blob, "sock", "sk_user_data")?,
        psock_msg_tot_len: member_offset(&blob, "sk_psock", "msg_tot_len").context(
            "this kernel's sk_psock has no msg_tot_len (Linux 6.18+?): redirected data could \
             not be bounded",
        )?,
        tp_write_seq: member_offset(&blob, "tcp_sock", "write_seq")?,
        tp_copied_seq: member_offset(&blob, "tcp_sock", "copied_seq")?,
    })
}

/// Where cgroup2 is mounted, if anywhere (`/sys/fs/cgroup` on a unified host,
/// `/sys/fs/cgroup/unified` on a hybrid one).
pub fn find_cgroup2() -> Option<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mountinfo.lines().find_map(cgroup2_mount_point)
}

/// The mount point of a /proc/self/mountinfo line if it is a cgroup2 mount.
fn cgroup2_mount_point(line: &str) -> Option<PathBuf> {
    // ID PARENT MAJ:MIN ROOT MOUNT-POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER-OPTIONS
    let (left, right) = line.split_once(" - ")?;
    if right.split(' ').next() != Some("cgroup2") {
        return None;
    }
    left.split(' ').nth(4).map(PathBuf::from)
}

/// The cgroup2 mount to attach sock_ops to: an existing one, or one mounted at `fallback`.
pub fn cgroup2_mount(fallback: &Path) -> Result<PathBuf> {
    if let Some(found) = find_cgroup2() {
        return Ok(found);
    }
    std::fs::create_dir_all(fallback)
        .with_context(|| format!("cannot create {}", fallback.display()))?;
    let target = std::ffi::CString::new(fallback.as_os_str().as_encoded_bytes())?;
    // SAFETY: NUL-terminated strings that outlive the call.
    let ret = unsafe {
        libc::mount(
            c"none".as_ptr(),
            target.as_ptr(),
            c"cgroup2".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error())
            .with_context(|| format!("cannot mount cgroup2 at {}", fallback.display()));
    }
    Ok(fallback.to_path_buf())
}

/// `SO_NETNS_COOKIE` (Linux 5.14) of the network namespace `/run/netns/NAME`: what
/// `bpf_get_netns_cookie` returns for its sockets. Read on a thread of its own, since `setns`
/// moves only the calling thread, which then never comes back.
pub fn netns_cookie(name: &str) -> Result<u64> {
    let path = Path::new("/run/netns").join(name);
    let ns = File::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
    let cookie = std::thread::spawn(move || -> Result<u64> {
        setns(&ns, CloneFlags::CLONE_NEWNET).context("cannot enter the namespace")?;
        // SAFETY: plain socket and getsockopt calls on a socket this closure owns.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
            if fd < 0 {
                return Err(io::Error::last_os_error().into());
            }
            let mut cookie: u64 = 0;
            let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
            let ret = libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_NETNS_COOKIE,
                (&raw mut cookie).cast(),
                &mut len,
            );
            let err = io::Error::last_os_error();
            libc::close(fd);
            if ret != 0 {
                return Err(err).context("getsockopt(SO_NETNS_COOKIE)");
            }
            Ok(cookie)
        }
    });
    cookie
        .join()
        .map_err(|_| anyhow::anyhow!("the thread in {} panicked", path.display()))?
}

/// The key form of an address: IPv4 as v4-mapped IPv6, network byte order.
pub fn key_ip(ip: IpAddr) -> [u32; 4] {
    let v6 = match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    let o = v6.octets();
    std::array::from_fn(|i| {
        u32::from_ne_bytes([o[4 * i], o[4 * i + 1], o[4 * i + 2], o[4 * i + 3]])
    })
}

/// One end of a socket-level link: a namespace and the addresses its peer reaches it by.
#[derive(Clone, Debug)]
pub struct SockEnd {
    pub netns_cookie: u64,
    pub addrs: Vec<IpAddr>,
}

/// The pinned socket layer under `ROOT/sock/`.
pub struct SockLayer {
    ebpf: Ebpf,
    root: PathBuf,
}

impl SockLayer {
    /// Loads the object with its maps pinned in `ROOT/sock/maps` (adopting pinned ones), with
    /// the default queue limit.
    pub fn open(pin_root: &Path) -> Result<Self> {
        Self::open_with_queue_limit(pin_root, DEFAULT_QUEUE_LIMIT)
    }

    /// Like [`SockLayer::open`]; `queue_limit` is how many redirected bytes a peer socket may
    /// hold unread before its senders switch to TCP (and TCP's window blocks them).
    pub fn open_with_queue_limit(pin_root: &Path, queue_limit: u32) -> Result<Self> {
        let root = sock_root(pin_root);
        for dir in [
            root.clone(),
            root.join("maps"),
            root.join("progs"),
            root.join("links"),
        ] {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let off = kernel_offsets()?;
        let mut loader = EbpfLoader::new();
        let maps_dir = root.join("maps");
        loader
            .default_map_pin_directory(&maps_dir)
            .override_global(names::OFF_SK_USER_DATA, &off.sk_user_data, true)
            .override_global(names::OFF_PSOCK_MSG_TOT_LEN, &off.psock_msg_tot_len, true)
            .override_global(names::OFF_TP_WRITE_SEQ, &off.tp_write_seq, true)
            .override_global(names::OFF_TP_COPIED_SEQ, &off.tp_copied_seq, true)
            .override_global(names::QUEUE_FLOOR, &queue_limit, true);
        let ebpf = loader.load(OBJECT).with_context(|| {
            format!(
                "cannot load the socket layer with maps in {}",
                maps_dir.display()
            )
        })?;
        Ok(Self { ebpf, root })
    }

    fn prog_pin(&self, name: &str) -> PathBuf {
        self.root.join("progs").join(name)
    }

    fn sock_ops_link_pin(&self) -> PathBuf {
        self.root.join("links").join("sock_ops")
    }

    /// Whether the programs are attached (their pins exist).
    pub fn attached(&self) -> bool {
        self.sock_ops_link_pin().exists() && self.prog_pin(names::SK_MSG_PROGRAM).exists()
    }

    /// Attaches sk_msg to the SOCKHASH, then sock_ops to `cgroup2` (so that no socket enters
    /// the map before the map has its sk_msg program: a psock takes the map's programs when
    /// it is created). Idempotent: does nothing if already attached.
    pub fn attach(&mut self, cgroup2: &Path) -> Result<bool> {
        if self.attached() {
            return Ok(false);
        }
        let sockets: SockHash<&MapData, SockKey> = SockHash::try_from(
            self.ebpf
                .map(names::SOCKETS)
                .context("no sockhash in the object")?,
        )?;
        let map_fd = sockets.fd().try_clone()?;
        let msg_pin = self.prog_pin(names::SK_MSG_PROGRAM);
        if !msg_pin.exists() {
            let prog: &mut SkMsg = self
                .ebpf
                .program_mut(names::SK_MSG_PROGRAM)
                .context("no sk_msg program in the object")?
                .try_into()?;
            prog.load()
                .context("the kernel refused the sk_msg program")?;
            let id = prog
                .attach(&map_fd)
                .context("cannot attach sk_msg to the sockhash")?;
            // The attachment belongs to the map from now on; dropping aya's handle would
            // detach it.
            std::mem::forget(prog.take_link(id)?);
            prog.pin(&msg_pin)
                .with_context(|| format!("cannot pin {}", msg_pin.display()))?;
        }
        let prog: &mut SockOps = self
            .ebpf
            .program_mut(names::SOCK_OPS_PROGRAM)
            .context("no sock_ops program in the object")?
            .try_into()?;
        prog.load()
            .context("the kernel refused the sock_ops program")?;
        let cgroup = File::open(cgroup2)
            .with_context(|| format!("cannot open cgroup {}", cgroup2.display()))?;
        // Through bpf_link (aya uses it when the kernel has it), a cgroup attachment is always
        // multi-attach and the flags must be 0: `Single` here, `AllowMultiple` is EINVAL.
        let id = prog
            .attach(&cgroup, CgroupAttachMode::Single)
            .with_context(|| format!("cannot attach sock_ops to {}", cgroup2.display()))?;
        let link: FdLink = prog
            .take_link(id)?
            .try_into()
            .context("the kernel gave no bpf_link for sock_ops")?;
        link.pin(self.sock_ops_link_pin())
            .context("cannot pin the sock_ops link")?;
        Ok(true)
    }

    fn links_map(&mut self) -> Result<HashMap<&mut MapData, SockLinkKey, SockLinkValue>> {
        Ok(HashMap::try_from(
            self.ebpf
                .map_mut(names::LINKS)
                .context("no sock links map")?,
        )?)
    }

    fn switches(&mut self) -> Result<HashMap<&mut MapData, u32, u32>> {
        Ok(HashMap::try_from(
            self.ebpf
                .map_mut(names::SWITCHES)
                .context("no switches map")?,
        )?)
    }

    /// Lets sockets between `a` and `b` be redirected: the link entries of both directions,
    /// then the switch on.
    pub fn link(&mut self, link_id: u32, a: &SockEnd, b: &SockEnd) -> Result<()> {
        let mut links = self.links_map()?;
        for (from, to) in [(a, b), (b, a)] {
            for ip in &to.addrs {
                let key = SockLinkKey {
                    netns_cookie: from.netns_cookie,
                    remote_ip: key_ip(*ip),
                };
                let value = SockLinkValue {
                    peer_netns_cookie: to.netns_cookie,
                    link_id,
                    _pad: 0,
                };
                links.insert(key, value, 0)?;
            }
        }
        self.switches()?.insert(link_id, SWITCH_ON, 0)?;
        Ok(())
    }

    /// Switches a link off: its sockets fall back to TCP at their next message (for good), and
    /// no new socket is inserted. Live sockhash entries stay.
    pub fn unlink(&mut self, link_id: u32, a: &SockEnd, b: &SockEnd) -> Result<()> {
        ignore_absent(self.switches()?.remove(&link_id))?;
        let mut links = self.links_map()?;
        for (from, to) in [(a, b), (b, a)] {
            for ip in &to.addrs {
                let key = SockLinkKey {
                    netns_cookie: from.netns_cookie,
                    remote_ip: key_ip(*ip),
                };
                ignore_absent(links.remove(&key))?;
            }
        }
        Ok(())
    }

    /// Counters summed over CPUs.
    pub fn counters(&self) -> Result<SockCounters> {
        let map: PerCpuArray<&MapData, SockCounters> = PerCpuArray::try_from(
            self.ebpf
                .map(names::COUNTERS)
                .context("no sock counters map")?,
        )?;
        let mut sum = SockCounters::default();
        for c in map.get(&0, 0)?.iter() {
            sum.sockets_inserted += c.sockets_inserted;
            sum.redirected_msgs += c.redirected_msgs;
            sum.redirected_bytes += c.redirected_bytes;
            sum.passed_bytes += c.passed_bytes;
            sum.fallback_no_peer += c.fallback_no_peer;
            sum.fallback_switch_off += c.fallback_switch_off;
            sum.fallback_backpressure += c.fallback_backpressure;
            sum.fallback_no_link += c.fallback_no_link;
            sum.insert_failed += c.insert_failed;
            sum.rejoined += c.rejoined;
        }
        Ok(sum)
    }

    /// Sockets in the sockhash now (the kernel removes closed ones).
    pub fn sockets(&self) -> Result<Vec<SockKey>> {
        let map: SockHash<&MapData, SockKey> =
            SockHash::try_from(self.ebpf.map(names::SOCKETS).context("no sockhash")?)?;
        Ok(map.keys().collect::<Result<Vec<_>, _>>()?)
    }

    /// Per-socket entries (state and address) now; sock_ops removes them when a socket
    /// reaches TCP_CLOSE, so this tracks live connections and must not grow without bound.
    pub fn states(&self) -> Result<Vec<(SockKey, SockEntry)>> {
        let map: HashMap<&MapData, SockKey, SockEntry> =
            HashMap::try_from(self.ebpf.map(names::STATES).context("no sock states map")?)?;
        Ok(map.iter().collect::<Result<Vec<_>, _>>()?)
    }

    /// Detaches sock_ops and removes every pin under `ROOT/sock/` — refused while a socket is
    /// in the sockhash, whose queued bytes would be freed with the map.
    pub fn remove(self) -> Result<()> {
        let live = self.sockets()?.len();
        if live > 0 {
            bail!(
                "{live} redirected socket(s) still open; the socket layer stays pinned until \
                 they close"
            );
        }
        let root = self.root.clone();
        drop(self);
        for dir in ["links", "progs", "maps"] {
            let dir = root.join(dir);
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries {
                std::fs::remove_file(entry?.path())?;
            }
            std::fs::remove_dir(&dir)?;
        }
        std::fs::remove_dir(&root)?;
        Ok(())
    }
}

fn ignore_absent(result: Result<(), aya::maps::MapError>) -> Result<()> {
    match result {
        Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup2_mounts_are_found_in_mountinfo_lines() {
        let hybrid = "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw";
        assert_eq!(
            cgroup2_mount_point(hybrid),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let with_optional =
            "30 25 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate";
        assert_eq!(
            cgroup2_mount_point(with_optional),
            Some(PathBuf::from("/sys/fs/cgroup"))
        );
        let v1 = "33 31 0:28 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids";
        assert_eq!(cgroup2_mount_point(v1), None);
    }

    #[test]
    fn ipv4_keys_are_v4_mapped_in_network_order() {
        let k = key_ip("10.1.2.3".parse().unwrap());
        let bytes: Vec<u8> = k.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(
            bytes,
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 3]
        );
        let k6 = key_ip("fd00::1".parse().unwrap());
        let bytes6: Vec<u8> = k6.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(bytes6[0..2], [0xfd, 0]);
        assert_eq!(bytes6[15], 1);
    }
}
