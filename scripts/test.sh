#!/usr/bin/env bash
# Runs the whole dxdp test suite: host setup, test image, formatting, lints,
# then every test in release mode. Must run as root (the tests load eBPF
# programs and create network namespaces and containers).
#
# The integration tests are one binary, `integration` (tests/integration/main.rs), with a module
# per area: a test is named AREA::NAME, and libtest filters (substrings, several allowed) pick
# areas or tests. The proptest fuzzing of the parsers is a library unit test (src/fuzz_parsers.rs).
#
# Usage: scripts/test.sh [CARGO_TEST_ARGS...] [-- TEST_BINARY_ARGS...]
#   scripts/test.sh                                                   # everything
#   scripts/test.sh --test integration -- netns_datapath::            # one area
#   scripts/test.sh --test integration -- verdicts:: operations::     # two areas
#   scripts/test.sh --test integration -- --nocapture netns_datapath::tc_links
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# sudo's secure_path and bare CI shells drop ~/.cargo/bin, where rustup puts cargo.
cargo_bin="${CARGO_HOME:-$HOME/.cargo}/bin"
if [[ -d $cargo_bin && :$PATH: != *:"$cargo_bin":* ]]; then
    export PATH="$cargo_bin:$PATH"
fi

# Tests read CI to turn "cannot run here, skipping" into a failure; pass it on
# untouched (unset stays unset) rather than inventing a value.
if [[ -v CI ]]; then
    export CI
fi

# Arguments before a `--` go to cargo test, the rest to the test binaries,
# after our own --test-threads=1.
cargo_args=()
test_args=()
while (($#)); do
    if [[ $1 == -- ]]; then
        shift
        test_args=("$@")
        break
    fi
    cargo_args+=("$1")
    shift
done

step=starting
started=$SECONDS
lanes=
finish() {
    local rc=$? elapsed=$((SECONDS - started))
    if ((rc == 0)); then
        printf 'test.sh: PASSED (setup, images, fmt, clippy, clippy-ebpf, tests%s) in %ss\n' "$lanes" "$elapsed" >&2
    else
        printf 'test.sh: FAILED at step "%s" (exit %s) after %ss\n' "$step" "$rc" "$elapsed" >&2
    fi
}
trap finish EXIT
# A run stopped by a signal must not report PASSED: bash runs the EXIT trap with the status of
# the last command that finished, which may well be 0.
trap 'exit 143' TERM
trap 'exit 130' INT

run_step() {
    step=$1
    shift
    printf '\ntest.sh: == %s: %s\n' "$step" "$*" >&2
    "$@"
}

run_step setup scripts/setup.sh
run_step image scripts/build-test-image.sh
# The same image in rootful Podman's store, for the podman:: tests.
run_step image-podman scripts/build-test-image.sh --podman
run_step fmt cargo fmt --all -- --check
run_step clippy cargo clippy --all-targets -- -D warnings
# The eBPF crate is not a default member, and is linted on its own as aya-template does: checked
# together with the userspace crate, feature unification would hand it dxdp-common with aya. It
# builds for the host as a std binary (no_std/no_main only on target_arch = "bpf").
run_step clippy-ebpf cargo clippy --package dxdp-ebpf --all-targets -- -D warnings
# Release mode because the datapath tests measure throughput; one thread because
# privileged tests share the host's bpffs, links and docker daemon.
run_step test cargo test --release "${cargo_args[@]}" -- --test-threads=1 "${test_args[@]}"

# The legacy engine lane: Debian 12's docker.io 20.10 (API 1.41) with docker-compose 1.29, in
# place of Engine 28 for the Docker-facing areas that apply to it, `docker::`,
# `compose_examples::` and `firewall::` (libtest runs what matches any filter; the `engine28_`
# tests need Engine 28 features and are skipped). scripts/legacy-docker.sh stops the host's
# dockerd, runs the tests against the 20.10 daemon and starts the host's dockerd again. Only with
# the whole suite: a run of chosen tests is about the default engine.
if ((${#cargo_args[@]} == 0 && ${#test_args[@]} == 0)); then
    lane_started=$SECONDS
    run_step legacy-engine scripts/legacy-docker.sh run \
        cargo test --release --no-fail-fast --test integration -- \
        --test-threads=1 \
        --skip engine28_ \
        docker:: compose_examples:: firewall::
    lane_took=$((SECONDS - lane_started))
    printf 'test.sh: legacy-engine lane (Docker 20.10 + Compose 1.29) took %ss\n' "$lane_took" >&2
    lanes=", legacy engine in ${lane_took}s"
fi
