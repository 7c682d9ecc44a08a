#!/usr/bin/env bash
# Builds dxdp-test:local, the image the integration tests run containers from.
#
# There is no image registry on the test hosts, so instead of `FROM debian` the
# image is assembled from the host's own binaries plus exactly the shared
# libraries `ldd` says they need, then fed to `docker import`.
#
# Usage: scripts/build-test-image.sh [--force] [--podman]
#   Skips the build when the image already exists and was produced by this
#   exact version of the script; --force rebuilds regardless. --podman builds
#   the same image into rootful Podman's store (`podman import`, tests/integration/podman.rs).
set -euo pipefail

readonly image=dxdp-test:local
# The Debian package's client, whatever else is earlier in PATH; it negotiates the
# API version with the daemon (28.x's 1.51, or the legacy lane's 20.10 at 1.41).
docker=/usr/bin/docker
# `docker run` options of the verification run; Podman's need the limits below.
run_opts=()

log() { printf 'build-test-image: %s\n' "$*" >&2; }
die() { printf 'build-test-image: error: %s\n' "$*" >&2; exit 1; }

force=0
for arg in "$@"; do
    case $arg in
        --force) force=1 ;;
        --podman)
            docker=/usr/bin/podman
            # Rootful runc on this kind of VM cannot raise RLIMIT_NOFILE/NPROC to Podman's
            # defaults ("error setting rlimit type 7"); ask for what the host gives.
            run_opts=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
            ;;
        -h | --help)
            printf 'usage: %s [--force] [--podman]\n' "$0"
            exit 0
            ;;
        *) die "unknown argument: $arg (usage: $0 [--force] [--podman])" ;;
    esac
done

"$docker" info >/dev/null 2>&1 || die "$docker cannot reach its engine; run scripts/setup.sh first"

# Hashing the script means editing the tool list below is enough to make every
# machine rebuild, without anyone remembering --force.
recipe=$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)
old_id=
if existing=$("$docker" image inspect -f '{{.Id}} {{index .Config.Labels "org.dxdp.test.recipe"}}' "$image" 2>/dev/null); then
    old_id=${existing%% *}
    if ((!force)) && [[ ${existing#* } == "$recipe" ]]; then
        log "$image is up to date, skipping (use --force to rebuild)"
        exit 0
    fi
    log "rebuilding $image"
else
    log "building $image"
fi

# Tools the tests run inside containers. The first six are what the test
# harness relies on; the rest are cheap and save a rebuild when debugging.
tool_names=(sleep cat ip ping iperf3 ss ethtool grep ls env timeout true)
tool_paths=(/bin/sh) # by path: tests and CMD use /bin/sh literally
for name in "${tool_names[@]}"; do
    # type -P, not command -v: `true` is a builtin and we need the file.
    path=$(type -P "$name") || die "$name not found on the host; run scripts/setup.sh first"
    tool_paths+=("$path")
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dxdp-test-image.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
rootfs=$tmp/rootfs
mkdir -p "$rootfs"/usr/{bin,sbin,lib,lib64}

# Mirror the host's merged-/usr layout so that /bin/sh, /usr/bin/sh, /sbin/ip and
# /usr/sbin/ip all work inside the container, exactly as they do on the host.
for dir in bin sbin lib lib64; do
    if [[ -L /$dir ]]; then
        ln -s "usr/$dir" "$rootfs/$dir"
    else
        mkdir -p "$rootfs/$dir"
    fi
done

# Copies host file $1 to the same path in the rootfs. -L stores symlinked
# sonames (libfoo.so.0 -> libfoo.so.0.0.0) as regular files under the name the
# loader asks for, so the symlink targets need not be tracked.
copy_in() {
    local dest=$rootfs$1
    [[ -e $dest ]] && return 0
    mkdir -p "${dest%/*}"
    cp -L --preserve=mode "$1" "$dest"
}

for bin in "${tool_paths[@]}"; do
    copy_in "$bin"
    # ldd prints the whole transitive closure, including the loader
    # (/lib64/ld-linux-x86-64.so.2) on a line of its own; it exits non-zero for
    # static binaries, which need nothing.
    deps=$(ldd "$bin" 2>/dev/null || true)
    if grep -q 'not found' <<<"$deps"; then
        die "$bin has unresolved libraries:"$'\n'"$(grep 'not found' <<<"$deps")"
    fi
    while read -r lib; do
        copy_in "$lib"
    done < <(awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$deps")
done

# Minimal /etc: root and nobody so tools that look up uids do not fail, files-only
# NSS so glibc does not go looking for modules we did not copy, and iproute2's
# tables so `ip route show table main` and friends print names.
mkdir -p "$rootfs"/{etc,root,proc,sys,dev,run,var/tmp}
cat >"$rootfs/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
cat >"$rootfs/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
EOF
cat >"$rootfs/etc/nsswitch.conf" <<'EOF'
passwd: files
group: files
hosts: files dns
services: files
EOF
if [[ -d /etc/iproute2 ]]; then
    cp -a /etc/iproute2 "$rootfs/etc/iproute2"
fi
# iperf3 mkstemp()s its send buffer in /tmp, so it must exist and be writable.
mkdir -p "$rootfs/tmp"
chmod 1777 "$rootfs/tmp" "$rootfs/var/tmp"

log "importing rootfs ($(du -sh "$rootfs" | cut -f1))"
tar -C "$rootfs" --numeric-owner --owner=0 --group=0 -c . \
    | "$docker" import \
        --change 'CMD ["/bin/sleep","infinity"]' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'LABEL org.dxdp.test=1' \
        --change "LABEL org.dxdp.test.recipe=$recipe" \
        - "$image" >/dev/null

# Prove the image works before anything relies on it: every tool starts (so no
# library is missing), ping can open its socket, and iperf3 can move data over
# loopback. --network none keeps this independent of docker's bridge setup.
# shellcheck disable=SC2016 # expanded by the container's sh, not here
verify_script='
set -e
iperf3 --version
ping -V
ip -V
ss -V
ethtool --version
ls / >/dev/null
env >/dev/null
timeout 1 true
cat /etc/passwd >/dev/null
sleep 0
ping -c1 -W2 127.0.0.1 >/dev/null
iperf3 -s -1 >/dev/null 2>&1 &
i=0
until iperf3 -c 127.0.0.1 -t 1 >/tmp/iperf.out 2>&1; do
    i=$((i + 1))
    [ "$i" -lt 30 ] || { cat /tmp/iperf.out; exit 1; }
    sleep 0.1
done
grep receiver /tmp/iperf.out
'
if ! out=$("$docker" run --rm "${run_opts[@]}" --network none "$image" /bin/sh -c "$verify_script" 2>&1); then
    # Do not leave a broken image behind: the next run would skip rebuilding it.
    "$docker" image rm -f "$image" >/dev/null 2>&1 || true
    die "verification of $image failed:"$'\n'"$out"
fi
printf '%s\n' "$out" | sed 's/^/build-test-image:   /' >&2

# The previous build is now untagged; drop it unless a container still uses it.
new_id=$("$docker" image inspect -f '{{.Id}}' "$image")
if [[ -n $old_id && $old_id != "$new_id" ]]; then
    "$docker" image rm "$old_id" >/dev/null 2>&1 || true
fi
log "built $image ($new_id)"
