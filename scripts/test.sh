#!/usr/bin/env bash
# Runs every test of memlock-exporter, installing the tools it needs first.
#
#   scripts/test.sh            everything (needs root: apt-get, cgroups, rlimits, mlock)
#   scripts/test.sh --quick    unit tests, the mutation fuzzer and the golden test only, as any
#                              user, with nothing installed but cargo
#
# Steps run in order; a failing step does not stop the others. The last line says how many
# steps passed and failed, and the exit status is non-zero when any failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
QUICK=0
[ "${1:-}" = "--quick" ] && QUICK=1

passed=0
failed=0
failures=()

step() {
    local name=$1
    shift
    echo
    echo "=== ${name}"
    local started=$SECONDS
    if "$@"; then
        passed=$((passed + 1))
        echo "--- ${name}: ok ($((SECONDS - started))s)"
    else
        failed=$((failed + 1))
        failures+=("$name")
        echo "--- ${name}: FAILED ($((SECONDS - started))s)"
    fi
}

# A whole run writes several GiB (the debug and fuzzing builds under target/, the VM images and
# what a failing script keeps under TMPDIR); on a fuller disk the later steps fail midway with
# "No space left on device", far from the cause. Checked first so the cause is the first failure.
disk_space() {
    local need_gib=${MEMLOCK_TEST_MIN_FREE_GIB:-10} dir avail_kib rc=0
    for dir in "${CARGO_TARGET_DIR:-$ROOT/target}" "${TMPDIR:-/tmp}"; do
        while [ ! -d "$dir" ]; do dir=$(dirname "$dir"); done
        avail_kib=$(df -Pk "$dir" | awk 'NR == 2 { print $4 }')
        if [ "${avail_kib:-0}" -lt $((need_gib * 1024 * 1024)) ]; then
            echo "$dir: $((avail_kib / 1024 / 1024)) GiB free, a full run needs ${need_gib} GiB" \
                "(MEMLOCK_TEST_MIN_FREE_GIB); free some space, e.g. old target/ directories"
            rc=1
        else
            echo "$dir: $((avail_kib / 1024 / 1024)) GiB free"
        fi
    done
    return $rc
}

install_tools() {
    local missing=()
    command -v promtool >/dev/null || missing+=(prometheus)
    command -v prometheus >/dev/null || missing+=(prometheus)
    command -v prometheus-alertmanager >/dev/null || command -v alertmanager >/dev/null ||
        missing+=(prometheus-alertmanager)
    # load.sh serves node_exporter's meminfo collector beside ours (a Recommends of prometheus,
    # which --no-install-recommends leaves out).
    command -v prometheus-node-exporter >/dev/null || command -v node_exporter >/dev/null ||
        missing+=(prometheus-node-exporter)
    command -v wrk >/dev/null || missing+=(wrk)
    # libfuzzer-sys builds libFuzzer's C++ sources.
    command -v g++ >/dev/null || missing+=(g++)
    command -v python3 >/dev/null || missing+=(python3)
    # scripts/nccl_wheels.py downloads the NCCL wheels with pip.
    python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
    command -v curl >/dev/null || missing+=(curl)
    # The nccl_variables_script test builds a small git repository for scripts/nccl_variables.py.
    command -v git >/dev/null || missing+=(git)
    command -v setpriv >/dev/null || missing+=(util-linux)
    # slurm.sh runs a real slurmctld, slurmd and munged, and lints the Slurm scripts.
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null || missing+=(slurm-wlm)
    command -v munged >/dev/null || missing+=(munge)
    command -v shellcheck >/dev/null || missing+=(shellcheck)
    # live_launchers starts a real containerd under a lowered memlock limit.
    command -v containerd >/dev/null || missing+=(containerd)
    if [ ${#missing[@]} -gt 0 ]; then
        echo "installing: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || return 1
    fi
    command -v cargo >/dev/null || { echo "cargo is required (rustup)"; return 1; }
    # The cargo tools of later steps (cargo-fuzz for libFuzzer; cargo-deb and cargo-generate-rpm
    # for packaging.sh), installed at once as debug builds sharing one target directory, so that
    # their common dependencies compile once (5 minutes for the three here; each script used to
    # install its own as a release build).
    local cargo_tools=()
    for tool in cargo-fuzz cargo-deb cargo-generate-rpm; do
        command -v "$tool" >/dev/null || cargo_tools+=("$tool")
    done
    if [ ${#cargo_tools[@]} -gt 0 ]; then
        echo "installing: ${cargo_tools[*]}"
        CARGO_TARGET_DIR=${TMPDIR:-/tmp}/memlock-exporter-cargo-tools \
            cargo install --locked --debug --quiet "${cargo_tools[@]}" || return 1
    fi
    for component in fmt clippy; do
        cargo "$component" --version >/dev/null 2>&1 ||
            rustup component add "$( [ "$component" = fmt ] && echo rustfmt || echo clippy )" ||
            { echo "cargo $component is required (rustup component add)"; return 1; }
    done
    echo "promtool: $(promtool --version 2>&1 | head -1)"
}

build() {
    cargo build --locked --workspace --all-targets
}

# The real NCCL for tests/integration/live_nccl.rs: the pinned nvidia-nccl wheels, downloaded
# once into the cache (pip, from PyPI), checked against their sha256 and unpacked. Without them
# those tests fail under MEMLOCK_TESTS_REQUIRE_ALL instead of skipping.
nccl_wheels() {
    python3 scripts/nccl_wheels.py fetch
}

# Format and lint gates: rustfmt.toml's style in this workspace and in the fuzz crates (the
# fuzz workspace's members, fuzz/*/: outside this workspace, so `cargo fmt` here leaves their
# files out; `--all`, as fuzz/Cargo.toml is a virtual manifest), clippy's default lints as
# errors, and no line of src/, crates/, tests/, scripts/ or fuzz/ over 120 columns (rustfmt does
# not break string literals, and formats no script).
format_and_lint() {
    cargo fmt --all --check || return 1
    # cargo fmt follows `mod` items, and the collectors are declared by the collectors! macro.
    rustfmt --edition 2021 --check crates/core/src/collect/*.rs crates/core/src/collect/*/mod.rs || return 1
    cargo fmt --all --manifest-path fuzz/Cargo.toml --check || return 1
    cargo clippy --locked --workspace --all-targets -- -D warnings || return 1
    bash scripts/columns.sh
}

# MEMLOCK_TESTS_REQUIRE_ALL: a test whose requirement (root, a v1 memory hierarchy) is unmet
# fails here instead of skipping itself as it does in a contributor's plain `cargo test`.
# MEMLOCK_SCALE_TESTS: the generated-host scale tests, opt-in for a contributor, run here.
unit_and_integration() {
    MEMLOCK_SCALE_TESTS=1 MEMLOCK_TESTS_REQUIRE_ALL=1 cargo test --locked --workspace --no-fail-fast -- --test-threads=2
}

unit_only() {
    cargo test --locked --workspace --lib &&
        cargo test --locked --test fuzz &&
        cargo test --locked --test integration golden
}

promtool_metrics() {
    local full=${TMPDIR:-/tmp}/memlock-exporter-e2e-full.txt
    [ -s "$full" ] || { echo "$full missing: the golden test did not run"; return 1; }
    promtool check metrics < "$full"
}

promtool_rules() {
    [ -d alerts ] || { echo "no alerts/ yet"; return 0; }
    local rules=(alerts/*.rules.yml)
    promtool check rules "${rules[@]}" || return 1
    local tests=(alerts/tests/*.yml)
    [ -e "${tests[0]}" ] || { echo "alerts/tests/ has no rule tests"; return 1; }
    promtool test rules "${tests[@]}"
}

# Coverage-guided, bounded: FUZZ_SECONDS per target (5 here; scripts/fuzz.sh alone runs longer)
# from a fixed seed, so a run repeats the inputs of the last one: new findings come from
# scripts/fuzz.sh runs with fresh seeds, not from CI at random.
libfuzzer_bounded() {
    FUZZ_SECONDS=${FUZZ_SECONDS:-5} FUZZ_LIBFUZZER_SEED=${FUZZ_LIBFUZZER_SEED:-1} bash scripts/fuzz.sh
}

e2e_scripts() {
    local rc=0
    # One round of the failures collector's cost in the VM (without, with, pairing in user
    # space), 3 s each (3,000 registrations at 1,000 a second, all seen by the probes and none
    # counted): enough to run every path; the figures in docs/benchmarks.md come from four
    # rounds of 10 s.
    export FAILURES_COST_ROUNDS=${FAILURES_COST_ROUNDS:-1} FAILURES_COST_SECONDS=${FAILURES_COST_SECONDS:-3}
    # vm.sh runs vm_failures.sh's VM beside its own: the VM step's 3 minutes (issue 21).
    export VM_FAILURES_BESIDE=1
    for script in scripts/e2e/*.sh; do
        [ -e "$script" ] || continue
        if [ "$script" = scripts/e2e/vm_failures.sh ]; then
            echo "--- $script: run by scripts/e2e/vm.sh (VM_FAILURES_BESIDE=1)"
            continue
        fi
        echo "--- $script"
        local started=$SECONDS
        if bash "$script"; then
            echo "--- $script: ok ($((SECONDS - started))s)"
        else
            echo "--- $script FAILED ($((SECONDS - started))s)"
            rc=1
        fi
    done
    return $rc
}

if [ $QUICK = 1 ]; then
    step "unit and golden tests" unit_only
else
    step "disk space" disk_space
    step "install tools" install_tools
    step "build" build
    step "format and lint" format_and_lint
    # The README's length, sentence and table targets, and every alert name in it.
    step "README targets (scripts/readme_stats.py)" python3 scripts/readme_stats.py
    # The golden test writes this; a copy left by an earlier run must not pass for this one.
    rm -f "${TMPDIR:-/tmp}/memlock-exporter-e2e-full.txt"
    step "NCCL wheels (scripts/nccl_wheels.py fetch)" nccl_wheels
    step "cargo test (unit, integration, live)" unit_and_integration
    step "promtool check metrics (golden output)" promtool_metrics
    step "promtool rules" promtool_rules
    step "libFuzzer (cargo-fuzz, every target)" libfuzzer_bounded
    step "end-to-end scripts" e2e_scripts
fi

echo
[ $failed -gt 0 ] && echo "failed steps: ${failures[*]}"
echo "summary: ${passed} passed, ${failed} failed"
[ $failed -eq 0 ]
