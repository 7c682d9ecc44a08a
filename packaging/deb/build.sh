#!/usr/bin/env bash
# Builds the Debian package of dxdp with cargo-deb, from a release build that already exists:
#   1. runs that dxdp to generate its man page and shell completions into
#      packaging/deb/generated/ (git-ignored), the assets Cargo.toml's [package.metadata.deb]
#      points at;
#   2. `cargo deb --no-build`, which packages <target dir>/release/dxdp, the systemd unit,
#      /etc/default/dxdp, the generated files and README.md, with the maintainer scripts of
#      packaging/deb/ (see there for what install, upgrade and removal do).
# Installs cargo-deb (`cargo install cargo-deb --locked`) when it is missing.
#
# Usage: packaging/deb/build.sh [--binary TARGET_DIR/release/dxdp] [--output FILE.deb|DIR]
#   --binary  the release build to package (default: $CARGO_TARGET_DIR/release/dxdp, else
#             target/release/dxdp); cargo-deb takes it from its target directory, so the path
#             must end in release/dxdp
#   --output  where the .deb goes (default: the target directory's debian/)
# Prints the path of the .deb on stdout.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

log() { printf 'deb/build.sh: %s\n' "$*" >&2; }
die() { printf 'deb/build.sh: error: %s\n' "$*" >&2; exit 1; }
usage() { printf 'usage: %s [--binary TARGET_DIR/release/dxdp] [--output FILE.deb|DIR]\n' "$0"; }

# sudo's secure_path and bare CI shells drop ~/.cargo/bin, where cargo and cargo-deb live.
cargo_bin="${CARGO_HOME:-$HOME/.cargo}/bin"
if [[ -d $cargo_bin && :$PATH: != *:"$cargo_bin":* ]]; then
    export PATH="$cargo_bin:$PATH"
fi

binary=
output=
while (($#)); do
    case $1 in
        --binary) (($# >= 2)) || die "--binary needs a path"; binary=$2; shift 2 ;;
        --output) (($# >= 2)) || die "--output needs a path"; output=$2; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done
if [[ -z $binary ]]; then
    binary=${CARGO_TARGET_DIR:-$repo/target}/release/dxdp
fi
[[ -x $binary ]] || die "$binary is not there; build it first: cargo build --release"
binary=$(realpath "$binary")
target_dir=${binary%/release/dxdp}
[[ $target_dir != "$binary" ]] \
    || die "$binary: cargo-deb packages TARGET_DIR/release/dxdp, so the path must end in release/dxdp"
version=$("$binary" --version) || die "$binary does not run"

# 1. Man page and completions, from the binary that is packaged.
generated=$here/generated
rm -rf "$generated"
mkdir -p "$generated"
"$binary" man | gzip -9n >"$generated/dxdp.1.gz"
"$binary" completions bash >"$generated/dxdp.bash"
"$binary" completions zsh >"$generated/_dxdp"
"$binary" completions fish >"$generated/dxdp.fish"
for file in dxdp.bash _dxdp dxdp.fish; do
    [[ -s $generated/$file ]] || die "dxdp completions wrote an empty $file"
done
zcat "$generated/dxdp.1.gz" | grep -q '^\.TH' || die "dxdp man did not print a man page"

# 2. The package.
if ! cargo deb --version >/dev/null 2>&1; then
    log "cargo-deb is missing; installing it (cargo install cargo-deb --locked)"
    cargo install cargo-deb --locked >&2 || die "cannot install cargo-deb"
fi
args=(--no-build -p dxdp --manifest-path "$repo/Cargo.toml")
if [[ -n $output ]]; then
    args+=(--output "$output")
fi
log "packaging $binary ($version) with $(cargo deb --version)"
# CARGO_TARGET_DIR tells cargo-deb where target/release/ of the assets really is.
deb=$(cd "$repo" && CARGO_TARGET_DIR=$target_dir cargo deb "${args[@]}" | tail -n1)
[[ -f $deb ]] || die "cargo deb did not report a .deb (last line: '$deb')"
log "built $deb"
printf '%s\n' "$deb"
