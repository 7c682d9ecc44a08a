#!/usr/bin/env bash
# The legacy engine lane: Debian 12's own Docker stack (docker.io 20.10, API 1.41, with
# bookworm's containerd 1.6 and docker-compose 1.29) run in place of the host's Engine 28 for
# the duration of one command, then the host put back as it was.
#
# Usage: scripts/legacy-docker.sh install         # fetch and extract (idempotent)
#        scripts/legacy-docker.sh run CMD [ARG…]  # install, swap engines, run CMD, swap back
#
# Nothing is dpkg-installed: the .debs are fetched with `apt-get download` from bookworm (which
# the host's sources already have) and extracted under $root, so the host's docker.io 28.5
# package, its data and its containerd are untouched. docker-compose 1.29 is pure Python: it runs
# on the host's /usr/bin/python3 with its bookworm python3-* libraries on PYTHONPATH.
#
# `run` stops the host's dockerd (only one daemon may own Docker's iptables chains), starts the
# 20.10 daemon on the default socket with its own containerd, data root, exec root and pidfile,
# loads the test image into it, and runs CMD with the legacy bin directory first in PATH (so
# `dockerd`, `docker-compose` and `containerd` are 20.10's, 1.29's and 1.6's, also for the tests'
# private daemons) and DXDP_COMPOSE=docker-compose. Whatever CMD does, on the way out it stops the
# 20.10 daemon and its containerd, removes the containers and networks left in it, and starts the
# host's dockerd again the way scripts/setup.sh does.
set -euo pipefail

readonly root=/opt/dxdp-legacy
readonly bin=$root/bin
readonly tree=$root/root
readonly state=/var/lib/dxdp-legacy
readonly run_dir=/run/dxdp-legacy
readonly sock=/var/run/docker.sock
readonly image=dxdp-test:local
# Bookworm's stack, pinned by release rather than by version: bookworm's security updates move
# the exact versions.
readonly packages=(
    docker.io/bookworm containerd/bookworm tini/bookworm docker-compose/bookworm
    python3-docker/bookworm python3-dockerpty/bookworm python3-docopt/bookworm
    python3-dotenv/bookworm python3-jsonschema/bookworm python3-requests/bookworm
    python3-texttable/bookworm python3-websocket/bookworm python3-attr/bookworm
    python3-pyrsistent/bookworm python3-urllib3/bookworm python3-idna/bookworm
    python3-certifi/bookworm python3-chardet/bookworm python3-charset-normalizer/bookworm
    python3-cached-property/bookworm
)

log() { printf 'legacy-docker: %s\n' "$*" >&2; }
die() {
    printf 'legacy-docker: error: %s\n' "$*" >&2
    exit 1
}

((EUID == 0)) || die "must run as root (it stops and starts dockerd)"

installed() {
    [[ -x $tree/usr/sbin/dockerd && -x $bin/docker-compose ]] \
        && "$tree/usr/sbin/dockerd" --version 2>/dev/null | grep -q '^Docker version 20\.10\.' \
        && "$bin/docker-compose" version --short 2>/dev/null | grep -q '^1\.29\.'
}

install() {
    if installed; then
        log "present: $("$tree/usr/sbin/dockerd" --version), docker-compose $("$bin/docker-compose" version --short)"
        return 0
    fi
    log "fetching bookworm's docker.io, containerd and docker-compose 1.29 (apt-get download)"
    local dl
    dl=$(mktemp -d /tmp/dxdp-legacy-dl.XXXXXX)
    # _apt downloads into the directory: let it write there.
    chmod 755 "$dl"
    chown _apt "$dl" 2>/dev/null || true
    if ! (cd "$dl" && apt-get -q download "${packages[@]}" >&2); then
        log "apt-get download failed; refreshing the package lists once"
        apt-get -q -o DPkg::Lock::Timeout=300 update >&2
        (cd "$dl" && apt-get -q download "${packages[@]}" >&2) || die "cannot download ${packages[*]}"
    fi
    rm -rf "$root.new"
    mkdir -p "$root.new/root" "$root.new/bin"
    local deb
    for deb in "$dl"/*.deb; do
        dpkg-deb -x "$deb" "$root.new/root"
    done
    rm -rf "$dl"
    # Only what the lane runs goes in bin/: the daemons, their helpers and compose.
    local tool
    for tool in usr/sbin/dockerd usr/sbin/docker-proxy usr/bin/docker usr/bin/docker-init \
        usr/bin/containerd usr/bin/containerd-shim-runc-v2 usr/bin/ctr; do
        ln -s "$root/root/$tool" "$root.new/bin/${tool##*/}"
    done
    cat >"$root.new/bin/docker-compose" <<EOF
#!/bin/sh
# docker-compose 1.29 from bookworm's package, on the host's Python with bookworm's libraries.
PYTHONPATH=$root/root/usr/lib/python3/dist-packages exec /usr/bin/python3 $root/root/usr/bin/docker-compose "\$@"
EOF
    chmod 755 "$root.new/bin/docker-compose"
    rm -rf "$root"
    mv "$root.new" "$root"
    installed || die "extracted $root, but its dockerd or docker-compose does not run"
    log "installed under $root: $("$tree/usr/sbin/dockerd" --version), docker-compose $("$bin/docker-compose" version --short)"
}

host_dockerd_pid() {
    local pid
    for pid in $(pgrep -x dockerd); do
        # The host's daemon is the one not started from $root (tests' private daemons have
        # --host=…; leave them alone).
        [[ $(readlink -f "/proc/$pid/exe") == "$tree/usr/sbin/dockerd" ]] && continue
        tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- '--host=' && continue
        echo "$pid"
        return 0
    done
    return 1
}

wait_gone() {
    local pid=$1 what=$2 i
    for i in $(seq 600); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    log "$what ($pid) ignored SIGTERM for 60 s; killing it"
    kill -9 "$pid" 2>/dev/null || true
}

docker_up() {
    local i
    for i in $(seq 300); do
        /usr/bin/docker info >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    return 1
}

host_was_running=0
legacy_dockerd=
legacy_containerd=

start_legacy() {
    mkdir -p "$state" "$run_dir"
    PATH=$bin:$PATH setsid nohup containerd \
        --root "$state/containerd" --state "$run_dir/containerd" \
        --address "$run_dir/containerd.sock" \
        </dev/null >"$run_dir/containerd.log" 2>&1 &
    legacy_containerd=$!
    local i
    for i in $(seq 100); do
        [[ -S $run_dir/containerd.sock ]] && break
        sleep 0.1
    done
    [[ -S $run_dir/containerd.sock ]] || die "containerd 1.6 did not come up; see $run_dir/containerd.log"
    PATH=$bin:$PATH setsid nohup dockerd \
        --containerd "$run_dir/containerd.sock" \
        --data-root "$state/docker" --exec-root "$run_dir/exec" \
        --pidfile "$run_dir/dockerd.pid" --host "unix://$sock" \
        </dev/null >"$run_dir/dockerd.log" 2>&1 &
    legacy_dockerd=$!
    docker_up || die "dockerd 20.10 did not answer within 30 s; see $run_dir/dockerd.log"
    log "dockerd $(/usr/bin/docker version -f '{{.Server.Version}} (API {{.Server.APIVersion}})') up"
}

stop_legacy() {
    if [[ -n $legacy_dockerd ]] && kill -0 "$legacy_dockerd" 2>/dev/null; then
        # Leave its data root empty for the next run: what the tests left is removed.
        local left
        left=$(/usr/bin/docker ps -aq 2>/dev/null || true)
        [[ -z $left ]] || /usr/bin/docker rm -f -v $left >/dev/null 2>&1 || true
        /usr/bin/docker network prune -f >/dev/null 2>&1 || true
        kill "$legacy_dockerd"
        wait_gone "$legacy_dockerd" "dockerd 20.10"
    fi
    legacy_dockerd=
    if [[ -n $legacy_containerd ]] && kill -0 "$legacy_containerd" 2>/dev/null; then
        kill "$legacy_containerd"
        wait_gone "$legacy_containerd" "containerd 1.6"
    fi
    legacy_containerd=
}

start_host() {
    # As scripts/setup.sh starts it.
    log "starting the host's dockerd again (log: /var/log/dxdp-dockerd.log)"
    setsid nohup dockerd </dev/null >>/var/log/dxdp-dockerd.log 2>&1 &
    docker_up || die "the host's dockerd did not come back within 30 s; see /var/log/dxdp-dockerd.log"
    log "host dockerd $(/usr/bin/docker version -f '{{.Server.Version}}') back"
}

restore() {
    local rc=$?
    trap - EXIT INT TERM
    stop_legacy
    if ((host_was_running)); then
        start_host || rc=1
    fi
    exit "$rc"
}

run() {
    (($#)) || die "usage: $0 run CMD [ARG…]"
    install
    local pid
    if pid=$(host_dockerd_pid); then
        host_was_running=1
        trap restore EXIT
        trap 'exit 130' INT TERM
        # The test image is saved before the swap and loaded into the 20.10 daemon.
        mkdir -p "$state"
        /usr/bin/docker save "$image" -o "$state/image.tar" \
            || die "cannot save $image from the host's dockerd (scripts/build-test-image.sh)"
        log "stopping the host's dockerd ($pid) for the lane"
        kill "$pid"
        wait_gone "$pid" "the host's dockerd"
    else
        trap restore EXIT
        trap 'exit 130' INT TERM
        [[ -f $state/image.tar ]] || die "no dockerd running and no saved $image: run scripts/setup.sh first"
    fi
    [[ ! -S $sock ]] || ! /usr/bin/docker info >/dev/null 2>&1 || die "something still answers on $sock"
    start_legacy
    /usr/bin/docker load -q -i "$state/image.tar" >&2
    PATH=$bin:$PATH DXDP_COMPOSE=docker-compose "$@"
}

case ${1:-} in
    install) install ;;
    run)
        shift
        run "$@"
        ;;
    *) die "usage: $0 install | run CMD [ARG…]" ;;
esac
