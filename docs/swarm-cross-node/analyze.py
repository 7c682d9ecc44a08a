#!/usr/bin/env python3
"""analyze.py PERF_DATA [COMMS] — per-sample attribution of a `perf record -a -g` profile.

Each sample is charged to the nearest categorised frame walking from the leaf to the root, so
helpers (memcpy, locks, slab, skb_*) count for the subsystem that called them. Netfilter frames
reached under a br_nf_* / bridge frame (before any IP/VXLAN frame) count as bridge
(br_netfilter); other netfilter counts as netfilter (host/ip). Only samples whose comm is in COMMS
(default: iperf3, ksoftirqd/*) are counted; the share of all samples is printed too."""
import re, subprocess, sys, collections

data = sys.argv[1]
comms = (sys.argv[2] if len(sys.argv) > 2 else "iperf3,ksoftirqd").split(",")

CATS = [
    ("bpf/tc", r"^(bpf_|___bpf|__bpf|tcf_|tcx_|tc_run|sch_handle|skb_do_redirect|cls_bpf|bpf_prog_)"),
    ("bridge", r"^(br_|__br_|fdb_|nbp_|setup_pre_routing|nf_bridge|brnf|ebt_)"),
    ("netfilter", r"^(nf_|__nf_|nft_|ipt_|ipv4_conntrack|ipv4_confirm|hash_conntrack|nf_ct|iptable_|ip_sabotage|nf_nat|nf_conntrack)"),
    ("vxlan", r"^(vxlan_|__vxlan|udp_tunnel|iptunnel_|gro_cells|udp_tun_|skb_tunnel)"),
    ("veth", r"^(veth_|__veth)"),
    ("udp", r"^(udp|__udp|udpv4|skb_consume_udp|__skb_recv_udp|__skb_try_recv|sock_def_readable|__ip_append_data|ip_make_skb|__ip_make_skb|ip_append_data|ip_generic_getfrag)"),
    ("ip", r"^(ip_|__ip_|fib_|inet_|dst_|rt_|ipv4_|ip4_|raw_v4|icmp_)"),
    ("dev core", r"^(__dev_queue_xmit|dev_queue_xmit|dev_hard_start_xmit|validate_xmit|netif_|__netif|process_backlog|__napi_poll|napi_|net_rx_action|eth_type_trans|skb_defer_free|enqueue_to_backlog|__dev_forward_skb|dev_forward_skb|neigh_|eth_header|dev_gro|gro_|skb_gro|sch_direct_xmit|__qdisc|qdisc_|handle_softirqs|do_softirq|__do_softirq|__local_bh_enable|netdev_)"),
    ("syscall/socket", r"^(sock_|__sock|__sys_|sys_|do_syscall|entry_SYSCALL|ksys_|vfs_|__x64_sys|do_select|core_sys_select|__fdget|fdget|sock_poll|tcp_poll|syscall_|do_sys_|__se_sys|x64_sys_call|aa_|security_|apparmor)"),
]
CATS = [(n, re.compile(p)) for n, p in CATS]

def cat_of(sym):
    for n, p in CATS:
        if p.search(sym):
            return n
    return None

out = subprocess.run(["perf", "script", "-i", data, "-F", "comm,ip,sym", "--no-inline"],
                     capture_output=True, text=True).stdout
total = 0; counted = 0
by_cat = collections.Counter(); leaf_bridge = collections.Counter()
comm = None; frames = []
def flush():
    global total, counted
    if comm is None:
        return
    total += 1
    if not any(comm.startswith(c) for c in comms):
        return
    counted += 1
    syms = [f for f in frames]
    if not syms:
        by_cat["(no stack)"] += 1; return
    if syms[0].startswith("[unknown]") or syms[0] == "":
        pass
    cat = None
    for i, s in enumerate(syms):
        c = cat_of(s)
        if c is None:
            continue
        if c == "netfilter":
            owner = None
            for s2 in syms[i + 1:]:
                c2 = cat_of(s2)
                if c2 in (None, "netfilter"):
                    continue
                owner = c2; break
            cat = "bridge (br_netfilter hooks)" if owner == "bridge" else "netfilter (ip)"
        else:
            cat = c
        break
    if cat is None:
        cat = "user space" if not syms[0].startswith(("_", "asm_")) and "[k]" not in syms[0] and is_user else "other kernel"
    by_cat[cat] += 1
    if cat.startswith("bridge"):
        leaf_bridge[syms[0]] += 1

is_user = False
for line in out.splitlines():
    if not line.strip():
        flush(); comm = None; frames = []; continue
    if not line.startswith((" ", "\t")):
        flush(); comm = line.split()[0] if line.split() else "?"; frames = []; is_user = False; continue
    parts = line.split(None, 1)
    sym = parts[1] if len(parts) > 1 else ""
    dso = sym[sym.rfind("(") + 1:-1] if "(" in sym else ""
    sym = re.sub(r"\+0x[0-9a-f]+.*$", "", sym.split(" (")[0]).strip()
    if not frames:
        is_user = "kernel" not in dso and "vmlinux" not in dso and "bpf_prog" not in sym
    frames.append(sym)
flush()
print(f"samples: {total} total, {counted} in comms {comms} ({100*counted/max(total,1):.1f} %)")
for c, n in by_cat.most_common():
    print(f"  {c:30s} {n:7d}  {100*n/max(counted,1):5.1f} %")
print("bridge samples by leaf symbol (top 15):")
for s, n in leaf_bridge.most_common(15):
    print(f"    {s:40s} {n:6d}  {100*n/max(counted,1):5.2f} %")
