#!/usr/bin/env bash
# A real multi-node Docker Swarm on one machine: N dockerd "nodes" (1 to 3), each in a network,
# mount and UTS namespace of its own, joined by a bridge, with real VXLAN between them. The
# integration tests' harness (tests/integration/support/swarm_nodes.rs) drives this script, so
# a swarm made by hand and one made by a test are the same.
#
# Usage: scripts/swarm-nodes.sh up [N]          # N nodes (default 2), node 1 the manager
#        scripts/swarm-nodes.sh down            # remove everything, also a crashed run's leftovers
#        scripts/swarm-nodes.sh status          # one line per node; exit 1 unless some and all answer
#        scripts/swarm-nodes.sh load IMAGE      # the host dockerd's IMAGE into every node
#        scripts/swarm-nodes.sh exec K CMD…     # CMD in node K's net, mount and UTS namespaces
#        scripts/swarm-nodes.sh leftovers       # what of any node is still there (nothing: all gone)
#
# Then e.g. `docker -H unix:///var/lib/dxt-swarm/sw1/docker.sock node ls`.
#
# Layout (names are fixed, so `up` first removes whatever a previous run left):
#   netns dxt-swhub: bridge br0, and one veth swK per node;
#   netns dxt-swK: eth0 = 10.240.0.K/24, the node's dockerd, containerd and overlay sandboxes;
#   the node's mount namespace: its own sysfs (the host's cgroup tree bound back in), a fresh
#     bpffs at /sys/fs/bpf, a private tmpfs on /run (dockerd also listens on /run/docker.sock,
#     so a program run inside the node finds it at /var/run/docker.sock);
#   /var/lib/dxt-swarm/swK: data root, daemon.json, docker.sock (the host's client talks to the
#     node there), docker.pid, dockerd.log;
#   cgroups /sys/fs/cgroup/*/dxt-swK: the node's containers (cgroupfs driver);
#   addresses: docker0 10.240.1K.1/24, local networks from 10.240.(32K).0/19, swarm-scoped
#     networks without a subnet (ingress) from 10.240.128.0/18; tests put their overlays on
#     10.240.200-254.0/24.
#
# `up`/`status` print one line per node, `key=value` separated by spaces, which the harness
# parses: node=K name=dxt-swK address=… pid=… host=unix://… dir=… state=up|down.
set -euo pipefail

readonly root=/var/lib/dxt-swarm
readonly hub=dxt-swhub
readonly prefix=dxt-sw
readonly max_nodes=3
readonly docker=/usr/bin/docker
self=$(readlink -f "${BASH_SOURCE[0]}")
readonly self

log() { printf 'swarm-nodes: %s\n' "$*" >&2; }
die() {
    printf 'swarm-nodes: error: %s\n' "$*" >&2
    exit 1
}

dir_of() { printf '%s/sw%s' "$root" "$1"; }
address_of() { printf '10.240.0.%s' "$1"; }
host_of() { printf 'unix://%s/docker.sock' "$(dir_of "$1")"; }
# `docker -H NODE ARGS…`, bounded in time.
node_docker() {
    local k=$1
    shift
    timeout 60 "$docker" -H "$(host_of "$k")" "$@"
}

# The pid of node K's dockerd, if its pidfile names a live dockerd of that node; else nothing.
dockerd_pid() {
    local dir pid
    dir=$(dir_of "$1")
    pid=$(cat "$dir/docker.pid" 2>/dev/null) || return 0
    [[ $pid =~ ^[0-9]+$ ]] || return 0
    if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "--data-root $dir/data"; then
        printf '%s' "$pid"
    fi
}

answers() { node_docker "$1" info --format '{{.ServerVersion}}' >/dev/null 2>&1; }

# Nodes that something of is still there: netns, directory or cgroup.
present_nodes() {
    local k
    for ((k = 1; k <= max_nodes; k++)); do
        if [[ -e /run/netns/$prefix$k || -e $(dir_of "$k") ]] \
            || compgen -G "/sys/fs/cgroup/*/$prefix$k" >/dev/null; then
            printf '%s\n' "$k"
        fi
    done
}

# Runs inside the node's fresh mount and UTS namespaces (and its network namespace): prepares
# them, then becomes the node's dockerd.
node_main() {
    local k=$1 dir
    dir=$(dir_of "$k")
    hostname "$prefix$k"
    # A sysfs of this network namespace, without hiding the host's cgroup v1 tree (as
    # `ip netns exec` would): the cgroup tree set aside, sysfs mounted, the tree bound back.
    mkdir -p "$dir/cgroup-aside"
    mount --rbind /sys/fs/cgroup "$dir/cgroup-aside"
    mount -t sysfs sysfs /sys
    mount --rbind "$dir/cgroup-aside" /sys/fs/cgroup
    umount -l "$dir/cgroup-aside"
    rmdir "$dir/cgroup-aside"
    mount -t bpf bpf /sys/fs/bpf
    # /run (= /var/run) of the node's own: overlay sandboxes under /run/docker/netns, and an
    # empty /run makes dockerd start a containerd of its own.
    mount -t tmpfs -o mode=0755 tmpfs /run
    local pool_base=$((32 * k))
    exec dockerd \
        --config-file "$dir/daemon.json" \
        --data-root "$dir/data" \
        --exec-root /run/docker \
        --pidfile "$dir/docker.pid" \
        -H unix:///run/docker.sock \
        -H "$(host_of "$k")" \
        --exec-opt native.cgroupdriver=cgroupfs \
        --cgroup-parent "/$prefix$k" \
        --bip "10.240.1$k.1/24" \
        --default-address-pool "base=10.240.$pool_base.0/19,size=24" \
        --shutdown-timeout 2
}

up() {
    local n=${1:-2} k started=$SECONDS
    [[ $n =~ ^[1-9]$ ]] && ((n <= max_nodes)) || die "up: 1 to $max_nodes nodes, not '$n'"
    ((EUID == 0)) || die "must run as root"
    if [[ -n $(present_nodes) || -e /run/netns/$hub ]]; then
        log "removing what a previous run left"
        down
    fi
    mkdir -p "$root"
    ip netns add "$hub"
    ip -n "$hub" link set lo up
    ip -n "$hub" link add br0 type bridge stp_state 0 forward_delay 0
    ip -n "$hub" link set br0 up
    for ((k = 1; k <= n; k++)); do
        local ns=$prefix$k dir
        dir=$(dir_of "$k")
        mkdir -p "$dir"
        printf '{}\n' >"$dir/daemon.json"
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        ip -n "$hub" link add "sw$k" type veth peer name eth0 netns "$ns"
        ip -n "$hub" link set "sw$k" master br0 up
        ip -n "$ns" addr add "$(address_of "$k")/24" dev eth0
        ip -n "$ns" link set eth0 up
        setsid nsenter --net="/run/netns/$ns" \
            unshare --mount --uts --propagation private -- "$self" _node "$k" \
            >"$dir/dockerd.log" 2>&1 </dev/null &
    done
    for ((k = 1; k <= n; k++)); do
        local waited=0
        until answers "$k"; do
            if ((waited > 600)); then
                tail -n 30 "$(dir_of "$k")/dockerd.log" >&2 || true
                fail_up "node $k's dockerd did not answer within 60 s"
            fi
            sleep 0.1
            waited=$((waited + 1))
        done
    done
    log "dockerd answers on $n node(s) after $((SECONDS - started)) s"
    node_docker 1 swarm init --advertise-addr "$(address_of 1)" \
        --listen-addr "$(address_of 1):2377" \
        --default-addr-pool 10.240.128.0/18 --default-addr-pool-mask-length 24 >/dev/null \
        || fail_up "swarm init on node 1 failed"
    local token pids=()
    token=$(node_docker 1 swarm join-token -q worker) || fail_up "no join token"
    for ((k = 2; k <= n; k++)); do
        node_docker "$k" swarm join --token "$token" --advertise-addr "$(address_of "$k")" \
            --listen-addr "$(address_of "$k"):2377" "$(address_of 1):2377" >/dev/null &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do
        wait "$pid" || fail_up "swarm join failed"
    done
    local waited=0 ready
    while true; do
        ready=$(node_docker 1 node ls --format '{{.Status}}' 2>/dev/null | grep -c '^Ready$' || true)
        ((ready == n)) && break
        ((waited > 600)) && fail_up "only $ready of $n nodes Ready after 60 s"
        sleep 0.1
        waited=$((waited + 1))
    done
    log "$n node(s) Ready in a swarm after $((SECONDS - started)) s"
    status
}

fail_up() {
    log "up failed: $*; removing what it made"
    down || true
    die "$*"
}

status() {
    local k all=0 pid state found=0
    for ((k = 1; k <= max_nodes; k++)); do
        [[ -e /run/netns/$prefix$k || -e $(dir_of "$k") ]] || continue
        found=1
        pid=$(dockerd_pid "$k")
        state=down
        if [[ -n $pid ]] && answers "$k"; then state=up; else all=1; fi
        printf 'node=%s name=%s address=%s pid=%s host=%s dir=%s state=%s\n' \
            "$k" "$prefix$k" "$(address_of "$k")" "${pid:-0}" "$(host_of "$k")" \
            "$(dir_of "$k")" "$state"
    done
    if ((!found)); then
        log "no nodes (start them: $0 up)"
        return 1
    fi
    return "$all"
}

# Pids that belong to node K: in its network namespace (dockerd, containerd, shims, commands run
# with `exec`) or in its cgroups (the containers' processes).
node_pids() {
    local k=$1
    {
        [[ -e /run/netns/$prefix$k ]] && ip netns pids "$prefix$k" 2>/dev/null
        cat /sys/fs/cgroup/*/"$prefix$k"/cgroup.procs /sys/fs/cgroup/*/"$prefix$k"/*/cgroup.procs \
            2>/dev/null
    } | sort -un || true
}

# Whether pid is a live process (a zombie counts as gone).
alive() {
    local state
    state=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || return 1
    [[ -n $state && $state != Z ]]
}

down() {
    local k nodes pids=() up_nodes=()
    mapfile -t nodes < <(present_nodes)
    # Only nodes whose dockerd runs and answers are asked to leave; the others (a crashed run's)
    # are killed outright.
    for k in "${nodes[@]}"; do
        if [[ -n $(dockerd_pid "$k") ]] && answers "$k"; then
            up_nodes+=("$k")
        fi
    done
    # Every node at once: its containers killed (rather than waited for by dockerd's shutdown),
    # then a worker leaves the swarm; the manager leaves (--force) once the workers have.
    for k in "${up_nodes[@]}"; do
        {
            mapfile -t ids < <(node_docker "$k" ps -aq 2>/dev/null)
            if ((${#ids[@]})); then
                node_docker "$k" rm -f -v "${ids[@]}" >/dev/null 2>&1 || true
            fi
            ((k == 1)) || node_docker "$k" swarm leave >/dev/null 2>&1 || true
        } &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || true; done
    for k in "${up_nodes[@]}"; do
        ((k != 1)) || node_docker "$k" swarm leave --force >/dev/null 2>&1 || true
    done
    # SIGTERM each dockerd (it stops its containerd); SIGKILL after 15 s. Whatever else of a node
    # remains once its dockerd is gone (a crashed run's containerd, shims and containers) gets
    # SIGKILL after a second.
    local pid dockerds=()
    for k in "${nodes[@]}"; do
        pid=$(dockerd_pid "$k")
        [[ -n $pid ]] || continue
        dockerds+=("$pid")
        kill -TERM "$pid" 2>/dev/null || true
    done
    local waited=0 left=() rest=()
    while true; do
        left=()
        for pid in "${dockerds[@]}"; do
            alive "$pid" && left+=("$pid")
        done
        ((${#left[@]} == 0)) && break
        if ((waited >= 150)); then
            log "dockerd ignored SIGTERM for 15 s, killing: ${left[*]}"
            kill -KILL "${left[@]}" 2>/dev/null || true
        fi
        sleep 0.05
        waited=$((waited + 1))
    done
    waited=0
    while true; do
        rest=()
        for k in "${nodes[@]}"; do
            for pid in $(node_pids "$k"); do
                alive "$pid" && rest+=("$pid")
            done
        done
        ((${#rest[@]} == 0)) && break
        if ((waited == 20)); then
            log "still running without their dockerd, killing: ${rest[*]}"
        fi
        if ((waited >= 20)); then
            kill -KILL "${rest[@]}" 2>/dev/null || true
        fi
        if ((waited > 200)); then
            log "error: cannot get rid of ${rest[*]}"
            break
        fi
        sleep 0.05
        waited=$((waited + 1))
    done
    pids=()
    for k in "${nodes[@]}"; do
        {
            # Deepest first; a cgroup empties a moment after its last process is reaped.
            local cg tries
            for cg in /sys/fs/cgroup/*/"$prefix$k"; do
                [[ -d $cg ]] || continue
                for ((tries = 0; tries < 50; tries++)); do
                    find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
                    [[ -d $cg ]] || break
                    sleep 0.1
                done
                [[ -d $cg ]] && log "error: cannot remove $cg"
            done
            [[ -e /run/netns/$prefix$k ]] && ip netns del "$prefix$k"
            rm -rf "$(dir_of "$k")"
        } &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || true; done
    [[ -e /run/netns/$hub ]] && ip netns del "$hub"
    rm -rf "$root"
    local found
    found=$(leftovers)
    [[ -z $found ]] || die "left behind: $found"
}

# What of any node is still there, one item per line; nothing when all is gone.
leftovers() {
    local k
    for ((k = 1; k <= max_nodes; k++)); do
        [[ -e /run/netns/$prefix$k ]] && printf 'netns %s\n' "$prefix$k"
        compgen -G "/sys/fs/cgroup/*/$prefix$k" | sed 's/^/cgroup /'
        [[ -n $(node_pids "$k") ]] && printf 'processes of %s: %s\n' "$prefix$k" "$(node_pids "$k" | tr '\n' ' ')"
    done
    [[ -e /run/netns/$hub ]] && printf 'netns %s\n' "$hub"
    [[ -e $root ]] && printf 'directory %s\n' "$root"
    return 0
}

load() {
    local image=${1:?usage: load IMAGE} k pids=() tar
    mapfile -t nodes < <(status | awk '/state=up/ { sub("node=", "", $1); print $1 }')
    ((${#nodes[@]})) || die "load: no node is up"
    tar="$root/image-${image//[^A-Za-z0-9_.-]/_}.tar"
    timeout 120 "$docker" save -o "$tar" "$image" || die "cannot save $image from the host's dockerd"
    for k in "${nodes[@]}"; do
        timeout 120 "$docker" -H "$(host_of "$k")" load -q -i "$tar" >/dev/null &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do
        wait "$pid" || {
            rm -f "$tar"
            die "cannot load $image into a node"
        }
    done
    rm -f "$tar"
}

node_exec() {
    local k=${1:?usage: exec K CMD…} pid
    shift
    pid=$(dockerd_pid "$k")
    [[ -n $pid ]] || die "node $k's dockerd is not running"
    exec nsenter -t "$pid" -n -m -u -- "$@"
}

case ${1:-} in
    up) up "${2:-2}" ;;
    down) down ;;
    status) status ;;
    leftovers) leftovers ;;
    load) load "${2:-}" ;;
    exec)
        shift
        node_exec "$@"
        ;;
    _node) node_main "$2" ;;
    *)
        printf 'usage: %s up [N] | down | status | leftovers | load IMAGE | exec K CMD...\n' "$0" >&2
        exit 2
        ;;
esac
