#!/usr/bin/env bash
# Idle cost of the daemon at its default intervals, against baselines measured in the same run:
# the release binary on this machine's real /proc and /sys with N extra sleeping processes
# (default 2000), CPU from /proc/PID/stat over a window (default 60 s) after a 10 s warm-up, and
# resident memory. Three runs, one after the other, on the same processes:
#   defaults   every collector at its defaults (process discovery every 1 s)
#   naive      the process collector reading every process every second (full_scan_interval 1s):
#              what discovery within one interval costs without the per-tick listing
#   floor      the process and cgroup collectors off: the cost of everything else
#   cargo build --release && scripts/bench/idle_cost.sh [PROCESSES] [SECONDS]
# Target (design): at most 0.5 % of one core with 2,000 processes at the defaults; at most
# 15 MiB resident with 1,000 processes. Loopback only; everything it starts is stopped at the end.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/memlock-exporter}
N=${1:-2000}
WINDOW=${2:-60}
[ -x "$BIN" ] || { echo "build first: cargo build --release"; exit 2; }
pids=()
exporter=
cleanup() {
    [ -n "$exporter" ] && kill "$exporter" 2>/dev/null
    kill "${pids[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq "$N"); do sleep 100000 & pids+=($!); done
ticks=$(getconf CLK_TCK)

# measure NAME ENV... -- ARGS...: one run; prints "NAME cpu_percent scanned cgroups rss_kib hwm_kib".
measure() {
    local name=$1
    shift
    local env=()
    while [ "$1" != "--" ]; do env+=("$1"); shift; done
    shift
    local port
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    env "${env[@]}" "$BIN" --web.listen-address "127.0.0.1:$port" "$@" > /dev/null 2>&1 &
    exporter=$!
    sleep 10
    local c1 c2 t1 t2 metrics
    c1=$(awk '{print $14 + $15}' "/proc/$exporter/stat"); t1=$(date +%s.%N)
    sleep "$WINDOW"
    c2=$(awk '{print $14 + $15}' "/proc/$exporter/stat"); t2=$(date +%s.%N)
    metrics=$(curl -s "127.0.0.1:$port/metrics")
    local scanned cgroups discovered
    scanned=$(awk '/^memlock_process_scanned_processes /{print $2}' <<< "$metrics")
    cgroups=$(awk '/^memlock_cgroup_scan_cgroups_walked /{print $2}' <<< "$metrics")
    discovered=$(awk '/^memlock_process_discovered_total /{print $2}' <<< "$metrics")
    echo "$name $(python3 -c "print((${c2} - ${c1}) / ${ticks} / (${t2} - ${t1}) * 100)") ${scanned:-0} ${cgroups:-0}" \
        "$(awk '/VmRSS/{print $2}' "/proc/$exporter/status") $(awk '/VmHWM/{print $2}' "/proc/$exporter/status")" \
        "${discovered:-0}"
    kill "$exporter"
    wait "$exporter" 2>/dev/null || true
    exporter=
}

results=$(
    measure defaults ${DEFAULTS_ENV:-} -- 
    measure naive MEMLOCK_EXPORTER_COLLECTOR__PROCESS__FULL_SCAN_INTERVAL=1s --
    measure floor -- --no-collector.process --no-collector.cgroup
)
python3 - "$WINDOW" <<PY
import sys
window = sys.argv[1]
rows = {}
for line in """$results""".strip().splitlines():
    name, cpu, scanned, cgroups, rss, hwm, discovered = line.split()
    rows[name] = (float(cpu), scanned, cgroups, int(rss), int(hwm), discovered)
d = rows["defaults"]
print(f"processes scanned {d[1]}, memory cgroups walked {d[2]}, window {window}s each")
for name, (cpu, scanned, cgroups, rss, hwm, discovered) in rows.items():
    print(f"  {name:9} CPU {cpu:.3f}% of one core, resident {rss / 1024:.1f} MiB (peak {hwm / 1024:.1f} MiB), "
          f"processes discovered between full scans {discovered}")
print(f"defaults / naive 1 s full scans: {d[0] / rows['naive'][0]:.2f}x; "
      f"defaults minus floor (process + cgroup collectors): {d[0] - rows['floor'][0]:.3f}% of one core")
print(f"target: defaults at most 0.5% of one core: {'met' if d[0] <= 0.5 else 'NOT met'}")
PY
