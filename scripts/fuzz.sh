#!/usr/bin/env bash
# Coverage-guided fuzzing with libFuzzer (cargo-fuzz) of every target in tests/fuzz/targets/:
# the same parsers, seeds and oracles as the stable engine (`cargo test --test fuzz`), driven by
# coverage instead of blind mutation. Each layer's targets are in its own fuzz crate,
# fuzz/<crate>/, which depends on that crate alone; all are members of the fuzz workspace fuzz/.
#
#   scripts/fuzz.sh                       every target, FUZZ_SECONDS (default 10) each
#   FUZZ_SECONDS=600 scripts/fuzz.sh nldev config_file    the named targets, longer
#
# Seeds are written to fuzz/<crate>/corpus/<target>/ from the fixtures on every run; what
# libFuzzer adds there is kept between runs (corpora are not committed). A finding is saved under
# fuzz/<crate>/artifacts/<target>/ and the script prints the command that replays it; it then becomes
# a regression test beside its parser. Runs on the stable toolchain without a sanitizer (the
# parsers are safe Rust); FUZZ_SANITIZER=address needs a nightly toolchain (`+nightly` is used
# when FUZZ_TOOLCHAIN=nightly). Installs cargo-fuzz when it is missing. FUZZ_LIBFUZZER_SEED=N
# repeats a run exactly as far as time allows (test.sh uses 1).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
SECONDS_EACH=${FUZZ_SECONDS:-10}
SANITIZER=${FUZZ_SANITIZER:-none}
# A fixed FUZZ_LIBFUZZER_SEED makes a run repeat the same inputs (CI); unset, each run explores
# new ones.
SEED=(${FUZZ_LIBFUZZER_SEED:+"-seed=$FUZZ_LIBFUZZER_SEED"})
TOOLCHAIN=${FUZZ_TOOLCHAIN:+"+$FUZZ_TOOLCHAIN"}

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz"
    cargo install cargo-fuzz --locked --quiet
fi

FUZZ_CORPUS_ROOT="$ROOT" cargo test --quiet --test fuzz write_corpus -- --ignored >/dev/null

# The fuzz crates in the workspace's order (from the kernel crate up), and each target's crate.
cd fuzz
mapfile -t crates < <(sed -n 's/^members = \[\(.*\)\]/\1/p' Cargo.toml | tr -d '" ' | tr ',' '\n')
[ -n "${crates[0]:-}" ] || { echo "fuzz/Cargo.toml lists no members"; exit 1; }
declare -A crate_of
all=()
for crate in "${crates[@]}"; do
    listed=$(cargo fuzz list --fuzz-dir "$crate") || { echo "cargo fuzz list --fuzz-dir $crate failed"; exit 1; }
    [ -n "$listed" ] || { echo "fuzz/$crate/Cargo.toml lists no targets"; exit 1; }
    mapfile -t names <<< "$listed"
    for name in "${names[@]}"; do crate_of[$name]=$crate; done
    all+=("${names[@]}")
done
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
for target in "${targets[@]}"; do
    [ -n "${crate_of[$target]:-}" ] || { echo "no fuzz target named $target"; exit 1; }
done
# The targets that load real files write them to TMPDIR: a directory of this run's own, so a
# concurrent `cargo test --test fuzz` keeps its files.
export TMPDIR=$(mktemp -d "${TMPDIR:-/tmp}/memlock-libfuzzer.XXXXXX")
trap 'rm -rf "$TMPDIR"' EXIT
started=$SECONDS
# One binary per fuzz crate, all into one target dir (libFuzzer's C++ and the shared
# dependencies compile once), then run directly for each of the crate's targets
# (MEMLOCK_FUZZ_TARGET picks it; see runner.rs): a binary per target, each linking its
# instrumented crate, made the build most of CI's step. `cargo fuzz run` would also rebuild per
# target whenever a source file changed meanwhile.
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}/fuzz
HOST_RELEASE=$TARGET_DIR/$(rustc -vV | sed -n 's/^host: //p')/release
# The runner of a crate is its first target; only the crates of the chosen targets are built.
declare -A runner_of
for target in "${targets[@]}"; do
    crate=${crate_of[$target]}
    [ -z "${runner_of[$crate]:-}" ] || continue
    for name in "${all[@]}"; do
        if [ "${crate_of[$name]}" = "$crate" ]; then runner_of[$crate]=$name; break; fi
    done
done
built=()
for crate in "${crates[@]}"; do
    [ -n "${runner_of[$crate]:-}" ] || continue
    build=(cargo $TOOLCHAIN fuzz build --fuzz-dir "$crate" --sanitizer "$SANITIZER" --target-dir "$TARGET_DIR"
        "${runner_of[$crate]}")
    "${build[@]}" >/dev/null 2>&1 || "${build[@]}"
    built+=("$crate")
done
echo "built the runners of ${built[*]} for ${#targets[@]} targets in $((SECONDS - started))s; ${SECONDS_EACH}s each"

# fuzz_one TARGET: runs it for SECONDS_EACH; prints its line (and what to replay), fails on a finding.
fuzz_one() {
    local target=$1 log crate=${crate_of[$1]}
    local bin=$HOST_RELEASE/${runner_of[$crate]} corpus=$crate/corpus/$target artifacts=$crate/artifacts/$target
    log=$(mktemp)
    mkdir -p "$corpus" "$artifacts"
    if MEMLOCK_FUZZ_TARGET=$target "$bin" "$corpus" -artifact_prefix="$artifacts/" "${SEED[@]}" \
        -max_total_time="$SECONDS_EACH" -print_final_stats=1 -close_fd_mask=1 >"$log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
        cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1)
        printf '%-22s ok: %s runs, %s, corpus %s files\n' "$target" "${runs:-?}" "${cov:-cov: ?}" \
            "$(ls "$corpus" | wc -l)"
        rm -f "$log"
        return 0
    fi
    echo "$target FAILED:"
    grep -E 'panicked|fuzz target|ERROR|SUMMARY|Test unit written|Reproduce with' "$log" | head -20
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    [ -z "$artifact" ] || echo "  replay: (cd fuzz && cargo fuzz run --fuzz-dir $crate --sanitizer $SANITIZER" \
        "$target $artifact), or MEMLOCK_FUZZ_TARGET=$target $bin fuzz/$artifact"
    rm -f "$log"
    return 1
}

# One target per CPU at a time (each is single-threaded, and each gets its full SECONDS_EACH);
# their lines are printed in the targets' order.
JOBS=${FUZZ_JOBS:-$(nproc)}
RESULTS=$TMPDIR/results
mkdir -p "$RESULTS"
running=()
for target in "${targets[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
    # In a condition, so that set -e neither stops the job at a finding nor inside fuzz_one.
    ( if fuzz_one "$target" > "$RESULTS/$target.txt" 2>&1; then echo 0; else echo 1; fi > "$RESULTS/$target.rc" ) &
    running+=($!)
done
wait "${running[@]}" || true
failed=()
for target in "${targets[@]}"; do
    cat "$RESULTS/$target.txt"
    [ "$(cat "$RESULTS/$target.rc" 2>/dev/null)" = 0 ] || failed+=("$target")
done
echo "libFuzzer: ${#targets[@]} targets, ${#failed[@]} failed, $((SECONDS - started))s"
[ ${#failed[@]} -eq 0 ]
