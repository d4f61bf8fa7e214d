#!/usr/bin/env bash
# The failures collector (issue 26) where it can run: Debian's 6.1 kernel with kprobe events and
# soft-RoCE in a QEMU guest (scripts/e2e/vm/run.sh), scenario scripts/e2e/vm/scenarios/failures.sh.
# Builds the exporter and the two helpers, runs the scenario, prints its summary and the cost of
# the collector at 1,000 registrations a second from the same run (without it, with it pairing in
# the kernel, with it pairing in user space, in turn, COST_ROUNDS times).
#
#   scripts/e2e/vm_failures.sh            (root; VM_HARNESS=PATH to use another run.sh;
#                                          FAILURES_COST_ROUNDS=N cost rounds, 4 by default;
#                                          FAILURES_COST_SECONDS=S seconds each, 10 by default)
#
# Exit status: the scenario's (125: the VM could not run).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$(pwd)
HARNESS=${VM_HARNESS:-$ROOT/scripts/e2e/vm/run.sh}
[ -x "$HARNESS" ] || { echo "no VM harness at $HARNESS (issue 21's scripts/e2e/vm/run.sh)"; exit 125; }
OUT=${OUT:-${TMPDIR:-/tmp}/memlock-exporter-vm-failures}
rm -rf "$OUT" && mkdir -p "$OUT"

# MEMLOCK_EXPORTER_BIN: another build (the cost figures want a release one).
if [ -z "${MEMLOCK_EXPORTER_BIN:-}" ]; then
    cargo build --quiet --locked --bin memlock-exporter || exit 1
fi
BIN=${MEMLOCK_EXPORTER_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/memlock-exporter}
gcc -O2 -Wall -Wextra -Werror -o "$OUT/failures-reg-loop" scripts/e2e/vm/failures_reg_loop.c -libverbs || exit 1
gcc -O2 -Wall -Wextra -Werror -static -o "$OUT/failures-mlock-ramp" scripts/e2e/vm/failures_mlock_ramp.c || exit 1

"$HARNESS" --exporter "$BIN" --timeout "${VM_TIMEOUT:-900}" --out "$OUT/guest" \
    --copy "$OUT/failures-reg-loop" --copy "$OUT/failures-mlock-ramp" \
    scripts/e2e/vm/scenarios/failures.sh "${FAILURES_COST_ROUNDS:-4}" "${FAILURES_COST_SECONDS:-10}"
rc=$?
echo "--- summary ($OUT/guest)"
cat "$OUT/guest/summary.txt" 2>/dev/null
if [ -s "$OUT/guest/cost.txt" ]; then
    echo "--- cost at the registration rate of the run (CPU seconds per wall second, % of one core)"
    # Lines: LABEL registrations N elapsed_s S user_s U sys_s Y exporter_cpu_s E
    awk '{cpu = $7 + $9 + $11; pct = 100 * cpu / $5; rate = $3 / $5; sum[$1] += pct; n[$1]++
          ex[$1] += 100 * $11 / $5; if (!($1 in lo) || pct < lo[$1]) lo[$1] = pct
          printf "%-8s %6.0f reg/s  registrant %.2f user + %.2f sys s  exporter %.2f s  = %.3f %% of a core\n",
              $1, rate, $7, $9, $11, pct}
         END {for (l in n) if (l != "without" && n["without"]) {
              printf "added by the collector (%s): mean %.3f %%, lowest %.3f %% of a core (%d runs each); " \
                  "the exporter alone %.3f %%\n",
                  l == "with" ? "pairing in the kernel" : "pairing in user space",
                  sum[l] / n[l] - sum["without"] / n["without"], lo[l] - lo["without"], n[l],
                  ex[l] / n[l] - ex["without"] / n["without"]}}' "$OUT/guest/cost.txt"
    [ -s "$OUT/guest/cost-mlock.txt" ] && awk '{us[$1] += $5; n[$1]++; print}
        END {for (l in n) if (l != "without" && n["without"])
             printf "do_mlock probes (%s): %.2f us of system time per call (mean of %d runs each)\n",
                 l == "with" ? "pairing in the kernel" : "pairing in user space",
                 us[l] / n[l] - us["without"] / n["without"], n[l]}' "$OUT/guest/cost-mlock.txt"
    [ -s "$OUT/guest/kprobe_profile.txt" ] &&
        { echo "--- probe hits (kprobe_profile: event, hits, misses)"; tail -16 "$OUT/guest/kprobe_profile.txt"; }
fi
[ $rc = 0 ] || { echo "--- scenario log"; tail -40 "$OUT/guest/scenario.log" 2>/dev/null; }
exit $rc
