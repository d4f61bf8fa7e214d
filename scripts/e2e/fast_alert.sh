#!/usr/bin/env bash
# End to end, the fast path at the default configuration: a real Alertmanager with a webhook
# receiver, the exporter pushing to it, and `memlock-exporter drill` ramping real pinned
# (io_uring) or locked memory. Targets (issue 14): a 1 MiB/s pin ramp to an 8 MiB soft limit,
# started 2 s after the exporter, pages at least 2 s before its ENOMEM; a process holding 6 MiB
# locked whose pinned memory rises 1 MiB every 2 s to the same limit pages on counter="pinned"
# at least 4 s before its ENOMEM (VmPin and VmLck are checked apart: a max() of the two would
# stay flat until pinned passed 6 MiB). A cgroup's locked ramp pages before the OOM kill. Each
# alert resolves after its drill. Prints the lead times; `RUNS=n` repeats each drill and reports
# the median; `FULL_SCAN_INTERVAL=...` overrides the process and cgroup full scan intervals.
set -uo pipefail
source "$(dirname "$0")/lib.bash"

RUNS=${RUNS:-1}
[ "$(id -u)" = 0 ] || fail "needs root (cgroups, setpriv, prlimit)"
[ -x "$BIN" ] || fail "$BIN not built"

start_webhook
start_alertmanager
log "alertmanager on 127.0.0.1:$AM_PORT, webhook on 127.0.0.1:$WEBHOOK_PORT"

# The defaults: new processes and cgroups are found within one interval (1 s).
if [ -n "${FULL_SCAN_INTERVAL:-}" ]; then
    export MEMLOCK_EXPORTER_COLLECTOR__PROCESS__FULL_SCAN_INTERVAL=$FULL_SCAN_INTERVAL
    export MEMLOCK_EXPORTER_COLLECTOR__CGROUP__FULL_SCAN_INTERVAL=$FULL_SCAN_INTERVAL
fi
start_exporter --alertmanager.url "http://127.0.0.1:${AM_PORT}"
exporter_started=$(date +%s.%N)
log "exporter at $EXPORTER_URL"

DRILL=$(public_binary)

# run_drill NAME CMD...: runs the drill with every output line stamped on arrival (Unix seconds).
run_drill() {
    local name=$1
    shift
    python3 -c '
import subprocess, sys, time
proc = subprocess.Popen(sys.argv[2:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
with open(sys.argv[1], "w") as out:
    for line in proc.stdout:
        out.write("%.3f %s" % (time.time(), line))
        out.flush()
    code = proc.wait()
    # A negative code is a signal: the memory cgroup OOM-killed the drill.
    out.write("%.3f EXIT %d%s\n" % (time.time(), code, " killed" if code < 0 else ""))
sys.exit(0 if code == 0 or code == -9 else 1)
' "$E2E_TMP/$name.out" "$@"
}

# check_lead NAME ALERTNAME SINCE [MIN_LEAD [LABEL=VALUE]]: the first firing ALERTNAME
# notification (with that label, when given) after SINCE must precede the first refusal in the
# drill's output by at least MIN_LEAD seconds (default: any lead); prints the lead time, and the
# delivery time from the moment the exporter saw the trend cross its threshold (its "fast-path
# alert firing" log line).
check_lead() {
    python3 "$ROOT/scripts/e2e/check_lead.py" "$E2E_TMP/$1.out" "$WEBHOOK_OUT" "$2" "$3" "$E2E_TMP/exporter.log" \
        "${4:-0}" "${5:-}"
}

wait_resolved() {
    python3 - "$WEBHOOK_OUT" "$1" "$2" <<'PY'
import json, sys, time
webhook, alertname, since = sys.argv[1], sys.argv[2], float(sys.argv[3])
deadline = time.time() + 60
while time.time() < deadline:
    for line in open(webhook):
        note = json.loads(line)
        if note["received"] < since:
            continue
        for alert in note["payload"].get("alerts", []):
            if alert["labels"].get("alertname") == alertname and alert["status"] == "resolved":
                print(f"{alertname}: resolved {note['received'] - since:.1f}s after the drill ended")
                sys.exit(0)
    time.sleep(0.5)
sys.exit(f"{alertname} did not resolve within 60s")
PY
}

CGROUP=/sys/fs/cgroup/memory/memlock-e2e-$$
cgroup_cleanup() {
    if [ -d "$CGROUP" ]; then
        for pid in $(cat "$CGROUP/cgroup.procs" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
        sleep 0.2
        rmdir "$CGROUP" 2>/dev/null
    fi
}
on_exit cgroup_cleanup

leads=()
locked_leads=()
cg_leads=()
rc=0
# A uid of its own for the pin drills: io_uring checks the per-user locked_vm, not VmPin
# (io_uring/rsrc.c __io_account_mem), so nothing else of that user may hold buffers.
pin_drill() {
    local name=$1
    shift
    run_drill "$name" prlimit --memlock=8388608:8388608 \
        setpriv --reuid=64436 --regid=64436 --clear-groups "$DRILL" drill --mode pin "$@" ||
        { cat "$E2E_TMP/$name.out"; fail "$name drill failed"; }
}
for run in $(seq "$RUNS"); do
    # 1. A 1 MiB/s pin ramp to the 8 MiB soft limit, unprivileged, started 2 s after the
    #    exporter (the first run; later runs 2 s after the previous drill resolved).
    python3 -c "import time, sys; time.sleep(max(0.0, float(sys.argv[1]) + 2 - time.time()))" "$exporter_started"
    since=$(date +%s.%N)
    pin_drill "pin$run" --step-mib 1 --interval-ms 1000 --max-mib 64 --hold-seconds 3
    ended=$(date +%s.%N)
    out=$(check_lead "pin$run" MemlockProcessLimitExhaustionImminent "$since" 2 counter=pinned) || { echo "$out"; rc=1; }
    echo "pin run $run: $out"
    leads+=("$(echo "$out" | grep -oE '[0-9.]+s before' | grep -oE '[0-9.]+')")
    wait_resolved MemlockProcessLimitExhaustionImminent "$ended" || rc=1

    # 2. 6 MiB locked and held, pinned memory rising 1 MiB every 2 s to the same limit.
    since=$(date +%s.%N)
    pin_drill "locked$run" --locked-mib 6 --step-mib 1 --interval-ms 2000 --max-mib 64 --hold-seconds 3
    ended=$(date +%s.%N)
    out=$(check_lead "locked$run" MemlockProcessLimitExhaustionImminent "$since" 4 counter=pinned) || { echo "$out"; rc=1; }
    echo "pinned under 6 MiB locked, run $run: $out"
    locked_leads+=("$(echo "$out" | grep -oE '[0-9.]+s before' | grep -oE '[0-9.]+')")
    wait_resolved MemlockProcessLimitExhaustionImminent "$ended" || rc=1
    exporter_started=$(date +%s.%N)

    # 3. Locked memory (mlock) as root inside a v1 memory cgroup limited to 64 MiB: 4 MiB every
    #    2 s. Locked pages cannot be reclaimed, so the cgroup OOM-kills the drill at its limit.
    mkdir -p "$CGROUP"
    echo $((64 << 20)) > "$CGROUP/memory.limit_in_bytes"
    since=$(date +%s.%N)
    run_drill "lock$run" sh -c 'echo $$ > "$1/cgroup.procs" && exec "$2" drill --mode lock --step-mib 4 --interval-ms 2000 --max-mib 256 --hold-seconds 3' \
        sh "$CGROUP" "$DRILL" || { cat "$E2E_TMP/lock$run.out"; fail "lock drill failed"; }
    ended=$(date +%s.%N)
    out=$(check_lead "lock$run" MemlockCgroupMemoryExhaustionImminent "$since") || { echo "$out"; rc=1; }
    echo "lock run $run: $out (the cgroup's OOM kills: $(awk '/^oom_kill /{print $2}' "$CGROUP/memory.oom_control"))"
    cg_leads+=("$(echo "$out" | grep -oE '[0-9.]+s before' | grep -oE '[0-9.]+')")
    rmdir "$CGROUP" 2>/dev/null || true
    wait_resolved MemlockCgroupMemoryExhaustionImminent "$ended" || rc=1
done

if [ ${#leads[@]} -gt 0 ]; then
    printf '%s\n' "${leads[@]}" | sort -n | awk '{a[NR]=$1} END {if (NR) printf "pin drill lead time: median %.1fs over %d run(s)\n", a[int((NR+1)/2)], NR}'
fi
if [ ${#locked_leads[@]} -gt 0 ]; then
    printf '%s\n' "${locked_leads[@]}" | sort -n | awk '{a[NR]=$1} END {if (NR) printf "pinned under held locked memory lead time: median %.1fs over %d run(s)\n", a[int((NR+1)/2)], NR}'
fi
if [ ${#cg_leads[@]} -gt 0 ]; then
    printf '%s\n' "${cg_leads[@]}" | sort -n | awk '{a[NR]=$1} END {if (NR) printf "cgroup lock drill lead time: median %.1fs over %d run(s)\n", a[int((NR+1)/2)], NR}'
fi
[ $rc = 0 ] && echo "fast_alert: ok" || echo "fast_alert: FAILED"
exit $rc
