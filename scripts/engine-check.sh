#!/usr/bin/env bash
# Proves that a container engine can run a container here: imports a one-binary probe image
# (busybox-static) if it is missing, makes a bridge network of its own (10.235.1.0/24 for
# Docker, 10.235.2.0/24 for Podman), runs a container from the image on it, pings the container
# from the host and removes both. A network of its own, not the engine's default: a test's
# private dockerd, or an operator, may have removed docker0. scripts/setup.sh runs it for each
# engine it installs, so a machine where an engine is installed but broken fails setup (and CI)
# instead of failing tests later, or passing because an older machine happened to work.
#
# Usage: scripts/engine-check.sh docker|podman [RUN_OPTION...]
#   RUN_OPTIONs go to `ENGINE run` (setup.sh tries `--runtime runc` this way).
# Exit 0: the engine ran, reached and removed a container. Exit 1: it could not, with the
# engine's own words and the way out on stderr.
set -euo pipefail

log() { printf 'engine-check: %s\n' "$*" >&2; }

engine=${1:-}
shift || true
case $engine in
    docker) cli=/usr/bin/docker subnet=10.235.1.0/24 ;;
    podman) cli=/usr/bin/podman subnet=10.235.2.0/24 ;;
    *)
        printf 'usage: %s docker|podman [RUN_OPTION...]\n' "$0" >&2
        exit 2
        ;;
esac
run_opts=("$@")
readonly image=dxdp-probe:local busybox=/bin/busybox

fail() {
    log "$engine cannot run a container here: $1"
    log "fix: $2"
    exit 1
}

[[ -x $cli ]] || fail "$cli is not installed" "run scripts/setup.sh (it installs both engines)"
"$cli" info >/dev/null 2>&1 || fail "$cli cannot reach its engine" "start it (scripts/setup.sh does)"
[[ -x $busybox ]] || fail "$busybox (busybox-static) is missing, so there is no probe image" \
    "apt-get install busybox-static"

# The image is busybox alone: sh, sleep and ping are its applets.
name=dxdp-probe-$$
rootfs=
cleanup() {
    "$cli" rm -f "$name" >/dev/null 2>&1 || true
    "$cli" network rm "$name" >/dev/null 2>&1 || true
    if [[ -n $rootfs ]]; then rm -rf "$rootfs"; fi
}
trap cleanup EXIT

# A probe network a killed check left behind holds the subnet: it is ours by its name.
for stale in $("$cli" network ls --filter name=dxdp-probe- --format '{{.Name}}' 2>/dev/null); do
    "$cli" network rm "$stale" >/dev/null 2>&1 || true
done
if ! out=$("$cli" network create --subnet "$subnet" "$name" 2>&1); then
    fail "cannot create a bridge network: $out" "read the engine's message; \`$engine info\` names its network backend"
fi

if ! "$cli" image inspect "$image" >/dev/null 2>&1; then
    rootfs=$(mktemp -d "${TMPDIR:-/tmp}/dxdp-probe.XXXXXX")
    mkdir -p "$rootfs/bin" "$rootfs/tmp"
    cp "$busybox" "$rootfs/bin/busybox"
    for applet in sh sleep ping; do
        ln -s busybox "$rootfs/bin/$applet"
    done
    if ! out=$(tar -C "$rootfs" --numeric-owner --owner=0 --group=0 -c . \
        | "$cli" import --change 'CMD ["/bin/sleep","60"]' --change 'LABEL org.dxdp.test=1' \
            - "$image" 2>&1); then
        fail "importing $image failed: $out" "read the engine's message"
    fi
fi

if ! out=$("$cli" run -d --name "$name" --network "$name" "${run_opts[@]}" "$image" /bin/sleep 60 2>&1); then
    case $out in
        *"cgroups in hybrid mode not supported"*)
            fail "$out" "this host mixes cgroup v1 and v2 (hybrid), which crun refuses; use runc: \
printf '[engine]\\nruntime = \"runc\"\\n' > /etc/containers/containers.conf.d/dxdp-runtime.conf \
and restart the Podman API service (scripts/setup.sh does both)" ;;
        *"rlimit"*)
            fail "$out" "root cannot raise the container's ulimits here; set default_ulimits = \
[\"nofile=1024:1024\", \"nproc=1024:1024\"] in containers.conf (scripts/setup.sh does)" ;;
        *) fail "$out" "read the engine's message above; \`$engine info\` names its runtime" ;;
    esac
fi
ip=$("$cli" inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}' "$name" \
    | awk '{print $1}')
[[ -n $ip ]] || fail "container $name has no IPv4 address on network $name" \
    "check the engine's bridge networks (\`$engine network inspect $name\`)"
ping -c1 -W2 "$ip" >/dev/null 2>&1 \
    || fail "the host cannot ping container $name at $ip" \
        "check the firewall's FORWARD chain and the engine's bridge"
"$cli" rm -f "$name" >/dev/null 2>&1 || fail "$cli rm -f $name failed" "remove it by hand"
"$cli" network rm "$name" >/dev/null 2>&1 || fail "$cli network rm $name failed" "remove it by hand"
case $engine in
    docker) runtime=$("$cli" info --format '{{.DefaultRuntime}}' 2>/dev/null || echo unknown) ;;
    podman) runtime=$("$cli" info --format '{{.Host.OCIRuntime.Name}}' 2>/dev/null || echo unknown) ;;
esac
for opt in "${run_opts[@]}"; do
    [[ $opt == --runtime=* ]] && runtime=${opt#--runtime=}
done
log "$engine ran a container (runtime $runtime), pinged it at $ip and removed it"
