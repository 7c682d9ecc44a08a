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
# The FORWARD policies as found after setup (forward_state), once recorded.
forward_before=
finish() {
    local rc=$? elapsed=$((SECONDS - started))
    # A failed run may have stopped before the policy check, and is the likelier to have left
    # the firewall changed: say so beside the failure.
    if ((rc != 0)) && [[ -n $forward_before && $step != forward-policies* ]]; then
        check_forward_policies || true
    fi
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

# Each family's filter FORWARD policy with its forwarding switch, one line each:
# `iptables DROP 1`, `ip6tables ACCEPT 0`.
forward_state() {
    local tool rules forwarding
    for tool in iptables ip6tables; do
        rules=$("$tool" -w -S FORWARD) || return 1
        # The first line is the policy: `-P FORWARD DROP`.
        rules=${rules%%$'\n'*}
        case $tool in
            iptables) forwarding=$(</proc/sys/net/ipv4/ip_forward) ;;
            ip6tables) forwarding=$(</proc/sys/net/ipv6/conf/all/forwarding) ;;
        esac
        printf '%s %s %s\n' "$tool" "${rules##* }" "$forwarding"
    done
}

# Fails, naming each family, if a FORWARD policy is not what it was before the run: a test or
# lane that opens the host's firewall (ufw's disable once set both to ACCEPT) must not pass
# unnoticed. One change is the engine's own and allowed: Docker, when it turns a family's
# forwarding on itself (the first IPv6 network on a fresh machine), sets that FORWARD policy to
# DROP; seen as ACCEPT -> DROP with forwarding 0 -> 1.
check_forward_policies() {
    local now tool before_policy before_fwd after_policy after_fwd i changed=0
    now=$(forward_state) || {
        printf 'test.sh: error: cannot read the FORWARD policies\n' >&2
        return 1
    }
    local -a before_lines now_lines
    mapfile -t before_lines <<<"$forward_before"
    mapfile -t now_lines <<<"$now"
    for i in "${!before_lines[@]}"; do
        read -r tool before_policy before_fwd <<<"${before_lines[i]}"
        read -r _ after_policy after_fwd <<<"${now_lines[i]}"
        if [[ $after_policy == "$before_policy" ]]; then
            printf 'test.sh: %s filter FORWARD policy %s, as before the run\n' \
                "$tool" "$after_policy" >&2
        elif [[ $before_policy == ACCEPT && $after_policy == DROP ]] \
            && [[ $before_fwd == 0 && $after_fwd == 1 ]]; then
            printf 'test.sh: %s filter FORWARD policy ACCEPT -> DROP: the engine turned '\
'forwarding on (off before the run) and closed the chain, as Docker does\n' "$tool" >&2
        else
            printf 'test.sh: ERROR: the run changed the host firewall: %s filter FORWARD '\
'policy was %s before the run and is %s now (forwarding %s -> %s); a test or lane left it '\
'so. Put it back with: %s -P FORWARD %s\n' "$tool" "$before_policy" "$after_policy" \
                "$before_fwd" "$after_fwd" "$tool" "$before_policy" >&2
            changed=1
        fi
    done
    return "$changed"
}

run_step setup scripts/setup.sh
# Recorded once the host is set up (setup may have started dockerd, which closes FORWARD when
# it turns forwarding on), checked after the tests and after the legacy lane.
step='record FORWARD policies'
forward_before=$(forward_state)
printf 'test.sh: FORWARD policies before the run: %s\n' "$(tr '\n' ';' <<<"$forward_before")" >&2
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
run_step forward-policies check_forward_policies

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
    run_step forward-policies-after-legacy-engine check_forward_policies
    lane_took=$((SECONDS - lane_started))
    printf 'test.sh: legacy-engine lane (Docker 20.10 + Compose 1.29) took %ss\n' "$lane_took" >&2
    lanes=", legacy engine in ${lane_took}s"
fi
