#!/usr/bin/env bash
# Brings a Debian 12 host to the state the dxdp build and test suite expect.
# Idempotent: every step checks first, so a second run only costs a few seconds
# and never touches the network when nothing is missing.
set -euo pipefail

log() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }
scripts_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

((EUID == 0)) || die "must run as root (apt, bpffs, dockerd and the privileged tests need it); try: sudo $0"

# sudo's secure_path and bare CI shells drop ~/.cargo/bin, where rustup puts cargo.
cargo_bin="${CARGO_HOME:-$HOME/.cargo}/bin"
if [[ -d $cargo_bin && :$PATH: != *:"$cargo_bin":* ]]; then
    export PATH="$cargo_bin:$PATH"
fi

# --- apt packages -----------------------------------------------------------
# llvm-22 (from bookworm-security) is what bpf-linker links against; iperf3,
# iputils-ping and iproute2 are also copied into the test image by
# build-test-image.sh; the rest are tools the tests and the demo drive.
apt_packages=(
    llvm-22-dev libpolly-22-dev libzstd-dev zlib1g-dev
    # nft and both iptables backends are read before every link (src/firewall); ufw is the
    # stock host firewall the firewall tests enable next to Docker.
    iptables nftables ufw
    iperf3 iputils-ping iproute2 ethtool bpftool tcpdump
    # systemd-analyze verifies the unit in packaging/, and packaging::systemd boots this systemd
    # as PID 1 of a container to run the package's service; man-db lets the package test find
    # the page.
    systemd man-db
    # prometheus and promtool test packaging/monitoring against a live watch.
    prometheus
    # python3 runs tests/integration/sock_peer.py, the traffic of the socket-layer tests
    # (tests/integration/sock.rs).
    python3
    # Rootful Podman beside dockerd for tests/integration/podman.rs: Debian 12's 4.3.1 with netavark 1.4
    # (and aardvark-dns) as its network backend, and podman-compose 1.0.3; curl pings its API.
    podman netavark aardvark-dns podman-compose curl
    # runc explicitly: crun, which Podman prefers, refuses every container on hybrid-cgroup hosts.
    runc
    # The probe image of scripts/engine-check.sh, which proves each engine runs a container.
    busybox-static
    # `dxdp bench --ingress` (src/bench/ingress.rs) runs these servers inside a container's
    # namespace and their clients in a client namespace: redis-benchmark, wrk against nginx,
    # sockperf's ping-pong; socat is the fixture's and the tests' generic TCP/UDP tool. Only the
    # binaries are used; services the packages may start on a systemd host are not.
    redis-server redis-tools wrk nginx-light sockperf socat
    # The differential harness forgets conntrack's entries of its addresses between cases.
    conntrack
)
# cc links every Rust binary; checked by command so a hand-installed compiler counts.
command -v cc >/dev/null 2>&1 || apt_packages+=(gcc libc6-dev)

missing=()
for pkg in "${apt_packages[@]}"; do
    if [[ $(dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null) != ii* ]]; then
        missing+=("$pkg")
    fi
done
if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # needrestart would otherwise offer (or, configured so, perform) service
    # restarts, e.g. of a dockerd that tests are using.
    export NEEDRESTART_SUSPEND=1
    # A fresh VM may still be running unattended-upgrades: wait for the lock
    # instead of failing. stdin is /dev/null because CI may give us none.
    apt_opts=(-q -y -o DPkg::Lock::Timeout=300)
    apt-get "${apt_opts[@]}" update </dev/null >&2
    apt-get "${apt_opts[@]}" install "${missing[@]}" </dev/null >&2
else
    log "apt packages present"
fi

# --- Docker Engine and Compose v2 ----------------------------------------------
# The supported engine is today's (28.x, API 1.51) with Compose v2. Debian ships it in testing
# (forky); trixie has 26.1. Both releases are added as sources pinned at priority 100, so apt
# never takes anything else from them: only docker.io and docker-compose are asked for by
# release (`docker.io/forky`, not a version string, because testing moves), and only the
# packages they need come along (docker-cli, docker-buildx, tini-static). `-t forky` would
# upgrade libc: never use it.
newer_sources=/etc/apt/sources.list.d/dxdp-docker-newer.sources
newer_pin=/etc/apt/preferences.d/dxdp-docker-newer
engine_version() { dpkg-query -W -f='${Version}' docker.io 2>/dev/null || true; }
compose_version() { dpkg-query -W -f='${Version}' docker-compose 2>/dev/null || true; }
# Engine 26 or newer and Compose 2 or newer count as present.
engine_current() {
    local engine compose
    engine=$(engine_version) compose=$(compose_version)
    [[ -n $engine && -n $compose ]] || return 1
    dpkg --compare-versions "$engine" ge 26 && dpkg --compare-versions "$compose" ge 2
}
if engine_current; then
    log "docker.io $(engine_version) and docker-compose $(compose_version) present"
else
    if [[ ! -f $newer_sources ]]; then
        log "adding Debian forky and trixie as sources for docker.io (pinned at priority 100)"
        cat >"$newer_sources" <<'SOURCES'
# Added by dxdp's scripts/setup.sh for docker.io and docker-compose only; pinned in
# /etc/apt/preferences.d/dxdp-docker-newer so nothing else is taken from these releases.
Types: deb
URIs: http://deb.debian.org/debian
Suites: forky trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
    fi
    if [[ ! -f $newer_pin ]]; then
        cat >"$newer_pin" <<'PIN'
# Added by dxdp's scripts/setup.sh: packages from forky and trixie are only installed when
# asked for by release (apt-get install docker.io/forky).
Package: *
Pin: release n=forky
Pin-Priority: 100

Package: *
Pin: release n=trixie
Pin-Priority: 100
PIN
    fi
    export DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1
    apt_opts=(-q -y -o DPkg::Lock::Timeout=300)
    apt-get "${apt_opts[@]}" update </dev/null >&2
    got=""
    for release in forky trixie; do
        log "installing docker.io and docker-compose from $release"
        if apt-get "${apt_opts[@]}" install "docker.io/$release" "docker-compose/$release" \
            </dev/null >&2; then
            got=$release
            break
        fi
        log "docker.io/$release could not be installed; trying the next release"
    done
    [[ -n $got ]] || die "neither forky nor trixie could provide docker.io and docker-compose; see apt's output above"
    engine_current || die "installed docker.io $(engine_version) / docker-compose $(compose_version), expected engine >= 26 and Compose v2"
    # dockerd from the upgrade may already be running the old binary.
    if /usr/bin/docker info >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
        systemctl restart docker
    fi
fi
log "engine: docker.io $(engine_version), docker-compose $(compose_version)"

# --- Rust toolchains ----------------------------------------------------------
command -v rustup >/dev/null 2>&1 \
    || die "rustup not found (looked in PATH and $cargo_bin); install it from https://rustup.rs first"

# Returns 0 if component $2 is installed for toolchain $1. Output is captured
# before grepping: with pipefail, `grep -q` exiting early can SIGPIPE rustup
# and turn a match into a failure.
has_component() {
    local installed
    installed=$(rustup component list --installed --toolchain "$1" 2>/dev/null) || return 1
    grep -Eq "^$2(-|\$)" <<<"$installed"
}

# aya-build compiles ebpf/programs with nightly and -Z build-std, hence rust-src.
# Checked via the toolchain list: `rustup run` may auto-install as a side effect.
toolchains=$(rustup toolchain list)
for tc in stable nightly; do
    if ! grep -q "^$tc-" <<<"$toolchains"; then
        log "installing toolchain $tc"
        rustup toolchain install "$tc" --profile minimal >&2
    fi
done
if ! has_component nightly rust-src; then
    log "installing rust-src for nightly"
    rustup component add rust-src --toolchain nightly >&2
fi
# scripts/test.sh runs cargo fmt --check and cargo clippy on stable.
for comp in rustfmt clippy; do
    if ! has_component stable "$comp"; then
        log "installing $comp for stable"
        rustup component add "$comp" --toolchain stable >&2
    fi
done
log "rust toolchains ready"

# --- bpf-linker ---------------------------------------------------------------
# Built against the system LLVM 22 rather than the bundled one, which avoids a
# multi-GB download and matches the LLVM rustc nightly emits bitcode for.
if bpf-linker --version >/dev/null 2>&1; then
    log "bpf-linker present ($(bpf-linker --version 2>&1))"
else
    log "installing bpf-linker (builds from source, ~1 min)"
    PATH="/usr/lib/llvm-22/bin:$PATH" LLVM_SYS_221_PREFIX=/usr/lib/llvm-22 \
        cargo +stable install --locked bpf-linker --version '^0.13' \
        --no-default-features --features llvm-22 >&2
    bpf-linker --version >/dev/null 2>&1 || die "bpf-linker installed but does not run"
fi

# --- cargo-deb ---------------------------------------------------------------
# Builds the Debian package in packaging/deb; 3.8 is the newest that fits Rust 1.95.
if cargo deb --version >/dev/null 2>&1; then
    log "cargo-deb present ($(cargo deb --version 2>&1))"
else
    log "installing cargo-deb (~1 min)"
    cargo +stable install --locked cargo-deb --version '~3.8' >&2
fi

# --- bpffs --------------------------------------------------------------------
# aya pins maps and links under /sys/fs/bpf; without bpffs pins silently land
# on tmpfs or fail.
if [[ $(stat -f -c %T /sys/fs/bpf 2>/dev/null || true) != bpf_fs ]]; then
    log "mounting bpffs at /sys/fs/bpf"
    mkdir -p /sys/fs/bpf
    mount -t bpf bpf /sys/fs/bpf
else
    log "bpffs mounted"
fi

# --- dockerd ------------------------------------------------------------------
# /usr/bin/docker is the client docker.io installed with the daemon; another CLI
# earlier in PATH may speak a different API version.
docker_ok() { /usr/bin/docker info >/dev/null 2>&1; }
if docker_ok; then
    log "dockerd running"
else
    if [[ -d /run/systemd/system ]]; then
        log "starting docker via systemd"
        systemctl start docker
    else
        # No init system manages dockerd here (containers, CI sandboxes): run it
        # detached so it outlives this script and the caller's process group.
        log "starting dockerd (log: /var/log/dxdp-dockerd.log)"
        setsid nohup dockerd </dev/null >/var/log/dxdp-dockerd.log 2>&1 &
        disown
    fi
    for _ in $(seq 1 60); do
        docker_ok && break
        sleep 0.5
    done
    docker_ok || die "dockerd did not come up within 30 s; see /var/log/dxdp-dockerd.log"
    log "dockerd up"
fi

# --- Podman: container limits ---------------------------------------------------
# Rootful Podman asks runc for RLIMIT_NOFILE/NPROC above what root may set on some VMs (runc:
# "error setting rlimit type 7: operation not permitted"), which breaks every container, pod infra
# containers and podman-compose services included. Podman reads drop-ins at start: written before
# the API service below starts.
podman_limits=/etc/containers/containers.conf.d/dxdp-ulimits.conf
if [[ ! -f $podman_limits ]]; then
    log "writing $podman_limits"
    mkdir -p "${podman_limits%/*}"
    cat >"$podman_limits" <<'LIMITS'
# Added by dxdp's scripts/setup.sh: root on this machine cannot raise RLIMIT_NOFILE/NPROC to
# Podman's defaults (runc: "error setting rlimit type 7"), which breaks every rootful container.
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
LIMITS
fi

# --- Podman: OCI runtime --------------------------------------------------------------
# Installing podman pulls in crun, which Podman prefers over runc. crun refuses every container
# on a host whose cgroups are hybrid (v1 controllers, plus a v2 hierarchy that holds one):
# "cgroups in hybrid mode not supported, drop all controllers from cgroupv2". So the engine is
# asked to run a container with its own choice first; if it cannot and runc can, runc becomes
# the runtime for every podman command and for the API service below (started after this).
podman_runtime=/etc/containers/containers.conf.d/dxdp-runtime.conf
podman_runtime_chosen=
if "$scripts_dir/engine-check.sh" podman; then
    log "podman: runtime $(podman info --format '{{.Host.OCIRuntime.Name}}') runs containers"
elif [[ ! -f $podman_runtime ]] && "$scripts_dir/engine-check.sh" podman --runtime=runc; then
    log "podman: $(podman info --format '{{.Host.OCIRuntime.Name}}') cannot run containers here" \
        "(see above); choosing runc in $podman_runtime"
    cat >"$podman_runtime" <<'RUNTIME'
# Added by dxdp's scripts/setup.sh: Podman's default runtime (crun) could not run a container on
# this host (hybrid cgroups: "cgroups in hybrid mode not supported"); runc can.
[engine]
runtime = "runc"
RUNTIME
    podman_runtime_chosen=runc
else
    die "podman cannot run a container with its default runtime or with runc; see engine-check's \
message above"
fi
log "podman: OCI runtime $(podman info --format '{{.Host.OCIRuntime.Name}}')"

# --- Podman API service ---------------------------------------------------------
# Rootful Podman's Docker-compatible API for tests/integration/podman.rs, beside dockerd (they share
# nothing but the kernel). Started like dockerd above when no init system manages it.
podman_sock=/run/podman/podman.sock
podman_ok() { curl -sf --unix-socket "$podman_sock" http://podman/_ping >/dev/null 2>&1; }
# The service reads containers.conf when it starts: one started before the runtime was chosen
# must be restarted. setup.sh records the pid of a service it started itself.
podman_pidfile=/run/dxdp-podman-service.pid
if [[ -n $podman_runtime_chosen ]] && podman_ok; then
    if [[ -d /run/systemd/system ]]; then
        log "restarting podman.service for runtime $podman_runtime_chosen"
        systemctl restart podman.service
    elif [[ -f $podman_pidfile ]] && pid=$(<"$podman_pidfile") \
        && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == podman ]]; then
        log "stopping the podman API service setup.sh started (pid $pid) for runtime $podman_runtime_chosen"
        kill "$pid"
        for _ in $(seq 1 40); do
            [[ -d /proc/$pid ]] || break
            sleep 0.25
        done
    else
        die "a Podman API service is running on $podman_sock with the old runtime, and setup.sh \
did not start it; restart it so that it reads $podman_runtime"
    fi
fi
if podman_ok; then
    log "podman API service running ($podman_sock)"
else
    if [[ -d /run/systemd/system ]]; then
        log "starting podman.socket via systemd"
        systemctl start podman.socket
    else
        log "starting podman system service (log: /var/log/dxdp-podman.log)"
        mkdir -p "${podman_sock%/*}"
        setsid nohup podman system service --time=0 "unix://$podman_sock" \
            </dev/null >/var/log/dxdp-podman.log 2>&1 &
        echo $! >"$podman_pidfile"
        disown
    fi
    for _ in $(seq 1 60); do
        podman_ok && break
        sleep 0.5
    done
    podman_ok || die "the podman API did not come up within 30 s; see /var/log/dxdp-podman.log"
    log "podman API up ($podman_sock)"
fi

# --- Every engine runs a container ---------------------------------------------------
# Installed is not working: each engine must run, reach and remove a container here, so that a
# machine where one cannot fails now, naming the engine and the fix.
"$scripts_dir/engine-check.sh" docker || die "Docker cannot run a container; see above"
"$scripts_dir/engine-check.sh" podman || die "Podman cannot run a container; see above"
podman_api_runtime=$(curl -sf --unix-socket "$podman_sock" http://podman/v4.0.0/libpod/info \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["host"]["ociRuntime"]["name"])') \
    || die "cannot ask the Podman API service which runtime it uses"
[[ $podman_api_runtime == "$(podman info --format '{{.Host.OCIRuntime.Name}}')" ]] \
    || die "the Podman API service uses runtime $podman_api_runtime, podman itself another; \
restart the service so that it reads /etc/containers/containers.conf.d"
log "podman API service: OCI runtime $podman_api_runtime"

log "done"
