#!/usr/bin/env bash
# Idle cost of the daemon at its default intervals: the release binary against this machine's
# real /proc and /sys with N extra sleeping processes (default 500), CPU measured from
# /proc/PID/stat over a window (default 60 s) after a 10 s warm-up, and resident memory.
#   cargo build --release && scripts/bench/idle_cost.sh [PROCESSES] [SECONDS]
# Targets (design): at most 0.5 % of one core with 500 processes; at most 15 MiB resident with
# 1,000 processes. Loopback only; everything it starts is stopped at the end.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/memlock-exporter}
N=${1:-500}
WINDOW=${2:-60}
[ -x "$BIN" ] || { echo "build first: cargo build --release"; exit 2; }
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq "$N"); do sleep 100000 & pids+=($!); done
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$BIN" --web.listen-address "127.0.0.1:$port" > /dev/null 2>&1 &
exporter=$!
pids+=($exporter)
sleep 10
ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$exporter/stat"; }
c1=$(cpu); t1=$(date +%s.%N)
sleep "$WINDOW"
c2=$(cpu); t2=$(date +%s.%N)
scanned=$(curl -s "127.0.0.1:$port/metrics" | awk '/^memlock_process_scanned_processes /{print $2}')
cgroups=$(curl -s "127.0.0.1:$port/metrics" | awk '/^memlock_cgroup_scan_cgroups_walked /{print $2}')
rss=$(awk '/VmRSS/{print $2}' "/proc/$exporter/status")
hwm=$(awk '/VmHWM/{print $2}' "/proc/$exporter/status")
python3 - "$c1" "$c2" "$t1" "$t2" "$ticks" "$scanned" "$cgroups" "$rss" "$hwm" <<'PY'
import sys
c1, c2, t1, t2, ticks = (float(x) for x in sys.argv[1:6])
scanned, cgroups, rss, hwm = sys.argv[6:10]
share = (c2 - c1) / ticks / (t2 - t1) * 100
print(f"processes scanned {scanned}, cgroups walked {cgroups}: CPU {share:.2f}% of one core over {t2 - t1:.0f}s "
      f"(target 0.5%), resident {int(rss) / 1024:.1f} MiB, peak {int(hwm) / 1024:.1f} MiB (target 15 MiB)")
PY
