#!/usr/bin/env bash
# Builds the dxdp container image from a dxdp binary built on this machine: no base image, no
# registry. The image holds the binary, the firewall tools it reads rules with (nft,
# iptables-save of both backends, xtables plugins), exactly the shared libraries `ldd` says they
# need (the loader included) and a minimal /etc/passwd; see Dockerfile next to this script.
#
# Usage: packaging/container/build.sh [--binary PATH] [--tag NAME:TAG]
#   --binary  the dxdp to put in the image (default: $CARGO_TARGET_DIR/release/dxdp, else
#             target/release/dxdp; build it first with `cargo build --release`)
#   --tag     image name (default: dxdp:local)
# Environment: DOCKER, the docker client to use (default: /usr/bin/docker, the Debian package's
# client, which negotiates the API version with any supported daemon).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
docker=${DOCKER:-/usr/bin/docker}

log() { printf 'container/build.sh: %s\n' "$*" >&2; }
die() { printf 'container/build.sh: error: %s\n' "$*" >&2; exit 1; }
usage() { printf 'usage: %s [--binary PATH] [--tag NAME:TAG]\n' "$0"; }

binary=
tag=dxdp:local
while (($#)); do
    case $1 in
        --binary) (($# >= 2)) || die "--binary needs a path"; binary=$2; shift 2 ;;
        --tag) (($# >= 2)) || die "--tag needs a name"; tag=$2; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done
if [[ -z $binary ]]; then
    binary=${CARGO_TARGET_DIR:-$repo/target}/release/dxdp
fi
[[ -x $binary ]] || die "$binary is not there; build it first: cargo build --release"
version=$("$binary" --version) || die "$binary does not run"
version=${version#dxdp }
"$docker" info >/dev/null 2>&1 || die "dockerd is not reachable with $docker"

ctx=$(mktemp -d "${TMPDIR:-/tmp}/dxdp-image.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
rootfs=$ctx/rootfs
mkdir -p "$rootfs/usr/bin" "$rootfs/etc"

# Copies host file $1 to the same path in the image. -L stores a symlinked soname
# (libgcc_s.so.1 -> ...) as a regular file under the name the loader asks for.
copy_in() {
    local dest=$rootfs$1
    [[ -e $dest ]] && return 0
    mkdir -p "${dest%/*}"
    cp -L --preserve=mode "$1" "$dest"
}

cp --preserve=mode "$binary" "$rootfs/usr/bin/dxdp"
# dxdp reads the host's firewall before every link (nft, and iptables-save of both backends):
# the image carries those tools, as the host has them, with xtables' match and target plugins.
firewall_tools=(/usr/sbin/nft /usr/sbin/iptables-nft-save /usr/sbin/ip6tables-nft-save
    /usr/sbin/iptables-legacy-save /usr/sbin/ip6tables-legacy-save)
for tool in "${firewall_tools[@]}"; do
    [[ -e $tool ]] || die "$tool is not installed on this machine (apt-get install nftables iptables)"
    copy_in "$tool"
done
xtables_plugins=/usr/lib/x86_64-linux-gnu/xtables
[[ -d $xtables_plugins ]] || die "$xtables_plugins is not there (apt-get install iptables)"
mkdir -p "$rootfs/usr/lib/x86_64-linux-gnu"
cp -rL "$xtables_plugins" "$rootfs/usr/lib/x86_64-linux-gnu/xtables"
# ldd prints the whole closure, the loader (/lib64/ld-linux-x86-64.so.2) on a line of its own;
# it fails for a static binary, which needs nothing.
deps=$(for f in "$binary" "${firewall_tools[@]}" "$xtables_plugins"/*.so; do ldd "$f" 2>/dev/null || true; done)
if grep -q 'not found' <<<"$deps"; then
    die "$binary has unresolved libraries:"$'\n'"$(grep 'not found' <<<"$deps")"
fi
libs=()
while read -r lib; do
    [[ -e $rootfs$lib ]] && continue
    copy_in "$lib"
    libs+=("$lib")
done < <(awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$deps" | sort -u)

# dxdp runs as root (uid 0) and resolves no names; these are for tools that print user names.
cat >"$rootfs/etc/passwd" <<'EOF'
root:x:0:0:root:/:/usr/bin/dxdp
nobody:x:65534:65534:nobody:/nonexistent:/usr/bin/dxdp
EOF
cat >"$rootfs/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
EOF

# OCI labels: the version from the binary; the source from Cargo.toml's `repository` (the
# package's, or the workspace's that `repository.workspace = true` refers to), and only when
# it is set: an image must not point at a repository nobody published.
labels=(--label "org.opencontainers.image.version=$version")
source_url=$(awk '
    /^\[/ { section = $0; next }
    (section == "[package]" || section == "[workspace.package]") && /^repository[ \t]*=[ \t]*"/ {
        sub(/^repository[ \t]*=[ \t]*"/, ""); sub(/".*$/, ""); print; exit
    }' "$repo/Cargo.toml")
if [[ -n $source_url ]]; then
    labels+=(--label "org.opencontainers.image.source=$source_url")
fi

cp "$here/Dockerfile" "$ctx/Dockerfile"
log "building $tag from $binary (dxdp $version; source ${source_url:-not set in Cargo.toml}; ${#libs[@]} libraries: ${libs[*]:-none})"
"$docker" build --quiet "${labels[@]}" --tag "$tag" "$ctx" >/dev/null

# Prove the image starts: the loader finds every library and the binary runs.
out=$("$docker" run --rm --network none "$tag" --version 2>&1) \
    || die "the new image does not start: $out"
[[ $out == "dxdp $version" ]] || die "the new image prints '$out', expected 'dxdp $version'"
log "built $tag ($("$docker" image inspect -f '{{.Id}}' "$tag"))"
