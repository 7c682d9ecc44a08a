#!/usr/bin/env bash
# Builds the Debian package of dxdp with cargo-deb, from a release build that already exists:
#   1. runs that dxdp to generate its man page and shell completions into
#      packaging/deb/generated/ (git-ignored), the assets Cargo.toml's [package.metadata.deb]
#      points at;
#   2. `cargo deb --no-build`, which packages that dxdp, the systemd unit,
#      /etc/default/dxdp, the generated files and README.md, with the maintainer scripts of
#      packaging/deb/ (see there for what install, upgrade and removal do).
# Installs cargo-deb (`cargo install cargo-deb --locked`) when it is missing.
#
# Usage: packaging/deb/build.sh [--binary PATH] [--output FILE.deb|DIR]
#   --binary  the dxdp to package (default: $CARGO_TARGET_DIR/release/dxdp, else
#             target/release/dxdp; build it first with `cargo build --release`)
#   --output  where the .deb goes (default: target/debian/ in the cargo target directory)
# Prints the path of the .deb on stdout.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

log() { printf 'deb/build.sh: %s\n' "$*" >&2; }
die() { printf 'deb/build.sh: error: %s\n' "$*" >&2; exit 1; }
usage() { printf 'usage: %s [--binary PATH] [--output FILE.deb|DIR]\n' "$0"; }

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
target_dir=${CARGO_TARGET_DIR:-$repo/target}
if [[ -z $binary ]]; then
    binary=$target_dir/release/dxdp
fi
[[ -x $binary ]] || die "$binary is not there; build it first: cargo build --release"
version=$("$binary" --version) || die "$binary does not run"
if [[ -z $output ]]; then
    output=$target_dir/debian/
fi

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
# cargo-deb reads the binary from <cargo target dir>/release/dxdp (the "target/release/dxdp"
# asset). A target directory of our own holding exactly the binary to package means any build
# can be packaged (a test's, a debug one) and nothing else from a real target dir slips in.
staging=$(mktemp -d "${TMPDIR:-/tmp}/dxdp-deb.XXXXXX")
trap 'rm -rf "$staging"' EXIT
mkdir -p "$staging/release"
cp --preserve=mode "$binary" "$staging/release/dxdp"
mkdir -p "$(dirname "$output")"
log "packaging $binary ($version) with $(cargo deb --version)"
deb=$(cd "$repo" && CARGO_TARGET_DIR=$staging cargo deb --no-build -p dxdp \
    --manifest-path "$repo/Cargo.toml" --output "$output" | tail -n1)
[[ -f $deb ]] || die "cargo deb did not report a .deb (last line: '$deb')"
log "built $deb"
printf '%s\n' "$deb"
