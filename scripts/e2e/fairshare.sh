#!/usr/bin/env bash
# End to end, issue 33 items 1 and 6: a neighbour can only blind itself, with real processes, a
# real Alertmanager and a webhook receiver, the exporter at its defaults.
# - memfd: 40 forked processes (one uid) mlock the same 8 MiB memfd with soft limits set to the
#   8 MiB they hold (VmLck / limit = 1 each; the host holds 8 MiB) while another user's job ramps
#   its mlock 1 MiB/s to the ENOMEM of its 8 MiB limit: the job's critical page arrives 2 s ahead,
#   not resolved while it climbs; the crowd's memlock_cgroup_locked_bytes is the 8 MiB once, not
#   320 MiB.
# - arrival: a job holds 7.5 MiB of 8 MiB (93.75 %), its MemlockProcessNearLimitFast fires; then
#   the crowd arrives and stays 12 s: the job's warning is never sent as resolved meanwhile, and
#   the flat job never pages critical (a healthy plateau stays silent).
# - clonevm: CLONEVM_CROWD (8,300) processes of one uid sharing one mm (clone(CLONE_VM)) with 8 MiB
#   locked at their 8 MiB limit (VmLck / limit 1, and a full share each) push past the fast path's
#   8,192 watched processes while another user's job ramps mlock 1 MiB/s to its ENOMEM: the job is
#   still watched and exported; MemlockProcessesUnwatchedFast pages for the crowd's own; the job's
#   critical page arrives at least 1 s before its ENOMEM (a pass re-reads each owner's most urgent
#   processes every second and the crowd in turns, so the crowd cannot slow the job's samples).
# - leader: a process whose main thread exited while a thread holds 2 MiB locked, in a v1 memory
#   cgroup of its own: exported with that cgroup, not "/".
# - storm: the same crowd, but the job starts as soon as the crowd has: more processes are new
#   than a pass reads (512), and the job's rank, the newest, is read in turns by owner on the next
#   pass, not after the crowd; its critical page arrives at least 1 s before its ENOMEM.
# `PARTS="memfd arrival clonevm storm leader"` (the default) picks the parts. MEMLOCK_EXPORTER_BIN picks the
# binary (an older build shows what the script catches). About 100 s here (clonevm and storm: 22 s each).
set -uo pipefail
source "$(dirname "$0")/lib.bash"

PARTS=${PARTS:-memfd arrival clonevm storm leader}
CLONEVM_CROWD=${CLONEVM_CROWD:-8300}
part() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
[ "$(id -u)" = 0 ] || fail "needs root (cgroups, setpriv, prlimit)"
[ -x "$BIN" ] || fail "$BIN not built"

start_webhook
start_alertmanager
start_exporter --alertmanager.url "http://127.0.0.1:${AM_PORT}"
log "exporter at $EXPORTER_URL, alertmanager on 127.0.0.1:$AM_PORT"
DRILL=$(public_binary)
CROWDS=$E2E_TMP/fairshare_crowds.py
cp "$ROOT/scripts/e2e/fairshare_crowds.py" "$CROWDS"
chmod 0755 "$CROWDS"
rc=0

CG=/sys/fs/cgroup/memory/memlock-e2e-$$
cleanup_cgroups() {
    local dir
    for dir in "$CG"-*; do
        [ -d "$dir" ] || continue
        for pid in $(cat "$dir/cgroup.procs" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
        sleep 0.2
        rmdir "$dir" 2>/dev/null
    done
}
on_exit cleanup_cgroups

# in_cgroup NAME UID CMD...: CMD in cgroup $CG-NAME, unprivileged as UID under an 8 MiB limit.
in_cgroup() {
    local dir=$CG-$1 uid=$2
    shift 2
    mkdir -p "$dir"
    sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$dir" \
        prlimit --memlock=8388608:8388608 setpriv --reuid="$uid" --regid="$uid" --clear-groups "$@"
}

metric() { curl -fsS "$EXPORTER_URL/metrics" | grep -v '^#' | grep -F "$1" | awk '{print $NF}' | head -1; }

# start_crowd NAME UID: the memfd crowd in its cgroup; waits until the exporter has seen it.
start_crowd() {
    exec {crowd_in}> >(in_cgroup "$1" "$2" /usr/bin/python3 "$CROWDS" memfd 40 > "$E2E_TMP/$1.out" 2>&1)
    for _ in $(seq 300); do grep -q "memfd ready" "$E2E_TMP/$1.out" 2>/dev/null && break; sleep 0.1; done
    grep -q "memfd ready" "$E2E_TMP/$1.out" || fail "the crowd did not start: $(cat "$E2E_TMP/$1.out")"
}
stop_crowd() {
    exec {crowd_in}>&-
    for _ in $(seq 100); do grep -q "^done" "$E2E_TMP/$1.out" && break; sleep 0.1; done
}

# run_drill NAME CMD...: the drill with every output line stamped on arrival (Unix seconds).
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
    out.write("%.3f EXIT %d\n" % (time.time(), proc.wait()))
' "$E2E_TMP/$name.out" "$@"
}

# resolved_between WEBHOOK SINCE UNTIL COMM: fails when an alert of COMM was resolved in between.
resolved_between() {
    python3 - "$WEBHOOK_OUT" "$@" <<'PY'
import json, sys
webhook, since, until, comm = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
for line in open(webhook):
    note = json.loads(line)
    if since <= note["received"] < until:
        for alert in note["payload"].get("alerts", []):
            labels = alert["labels"]
            if alert["status"] == "resolved" and labels.get("comm", "").startswith(comm):
                sys.exit(f"{labels['alertname']} of {comm} resolved at +{note['received'] - since:.1f}s while it held")
print(f"no alert of {comm} resolved while it held")
PY
}

if part memfd; then
    start_crowd memfd-crowd 64480
    sleep 2
    since=$(date +%s.%N)
    mkdir -p "$CG-memfd-job"
    run_drill memfd-job sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$CG-memfd-job" \
        prlimit --memlock=8388608:8388608 setpriv --reuid=64481 --regid=64481 --clear-groups \
        "$DRILL" drill --mode lock --step-mib 1 --interval-ms 1000 --max-mib 64 --hold-seconds 2
    crowd_bytes=$(metric "memlock_cgroup_locked_bytes{cgroup=\"/memlock-e2e-$$-memfd-crowd\"")
    refused=$(grep -m1 -E "ENOMEM|refused" "$E2E_TMP/memfd-job.out" | cut -d' ' -f1)
    stop_crowd memfd-crowd
    [ -n "$refused" ] || { cat "$E2E_TMP/memfd-job.out"; fail "the job's ramp was not refused"; }
    out=$(python3 "$ROOT/scripts/e2e/check_lead.py" "$E2E_TMP/memfd-job.out" "$WEBHOOK_OUT" \
        MemlockProcessLimitExhaustionImminent "$since" "$E2E_TMP/exporter.log" 2 counter=locked) || rc=1
    echo "memfd: critical page: $out"
    resolved_between "$since" "$refused" memlock-exp || rc=1
    echo "memfd: crowd cgroup memlock_cgroup_locked_bytes ${crowd_bytes:-absent} (40 x 8 MiB of VmLck)"
    [ -n "$crowd_bytes" ] && [ "${crowd_bytes%.*}" -le $((9 << 20)) ] || rc=1
fi

if part arrival; then
    exec {job_in}> >(in_cgroup arrival-job 64482 /usr/bin/python3 "$CROWDS" hold 7680 > "$E2E_TMP/job-hold.out" 2>&1)
    since=$(date +%s.%N)
    fired=""
    for _ in $(seq 150); do
        if grep -q '"MemlockProcessNearLimitFast"' "$WEBHOOK_OUT" && grep -q '"job-hold"' "$WEBHOOK_OUT"; then
            fired=1
            break
        fi
        sleep 0.1
    done
    [ -n "$fired" ] || fail "the job's warning did not fire: $(cat "$E2E_TMP/job-hold.out")"
    arrived=$(date +%s.%N)
    start_crowd arrival-crowd 64483
    sleep 12
    until=$(date +%s.%N)
    out=$(resolved_between "$arrived" "$until" job-hold) || rc=1
    echo "arrival: $out"
    pages=$(python3 -c '
import json, sys
n = 0
for line in open(sys.argv[1]):
    for a in json.loads(line)["payload"].get("alerts", []):
        n += a["labels"].get("comm") == "job-hold" and a["labels"].get("severity") == "critical"
print(n)' "$WEBHOOK_OUT")
    echo "arrival: critical pages of the flat job: $pages"
    [ "$pages" = 0 ] || rc=1
    unwatched=$(grep -c "MemlockProcessesUnwatchedFast" "$WEBHOOK_OUT")
    [ "$unwatched" = 0 ] || { echo "processes went unwatched"; rc=1; }
    stop_crowd arrival-crowd
    exec {job_in}>&-
fi

# clone_vm_part NAME WAIT: CLONEVM_CROWD processes of uid 64485 sharing one mm, then another user's
# job ramping to its ENOMEM; with WAIT=1 once the exporter has read the whole crowd, else at once,
# while most of the crowd is still new to it.
clone_vm_part() {
    local name=$1 wait=$2 crowd_in scraper
    cc -O2 -o "$E2E_TMP/clone_vm_crowd" "$ROOT/scripts/e2e/clone_vm_crowd.c" || fail "cannot build clone_vm_crowd.c"
    chmod 0755 "$E2E_TMP/clone_vm_crowd"
    exec {crowd_in}> >(in_cgroup "$name-crowd" 64485 "$E2E_TMP/clone_vm_crowd" "$CLONEVM_CROWD" \
        > "$E2E_TMP/$name.out" 2>&1)
    for _ in $(seq 300); do grep -q "clonevm ready" "$E2E_TMP/$name.out" 2>/dev/null && break; sleep 0.1; done
    grep -q "clonevm ready $CLONEVM_CROWD" "$E2E_TMP/$name.out" ||
        fail "the crowd did not start: $(cat "$E2E_TMP/$name.out")"
    if [ "$wait" = 1 ]; then
        # Discovery reads a bounded number of new processes a pass: wait until the crowd is all in.
        for _ in $(seq 150); do
            [ "$(metric 'memlock_process_unwatched_processes ')" -ge $((CLONEVM_CROWD - 8192)) ] && break
            sleep 0.2
        done
    fi
    local unwatched discovered
    unwatched=$(metric 'memlock_process_unwatched_processes ')
    discovered=$(metric 'memlock_process_discovered_total')
    since=$(date +%s.%N)
    # While the job ramps: is it among the watched and exported processes?
    local job_series="^memlock_process_locked_bytes{.*cgroup=\"/memlock-e2e-$$-$name-job\""
    ( while :; do
        curl -fsS "$EXPORTER_URL/metrics" | grep -c "$job_series" >> "$E2E_TMP/$name-series.txt"
        sleep 0.5
    done ) &
    scraper=$!
    E2E_PIDS+=("$scraper")
    mkdir -p "$CG-$name-job"
    run_drill "$name-job" sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$CG-$name-job" \
        prlimit --memlock=8388608:8388608 setpriv --reuid=64486 --regid=64486 --clear-groups \
        "$DRILL" drill --mode lock --step-mib 1 --interval-ms 1000 --max-mib 64 --hold-seconds 2
    kill "$scraper" 2>/dev/null
    wait "$scraper" 2>/dev/null
    run_seconds=$(metric 'memlock_scrape_collector_duration_seconds{collector="process"}')
    exec {crowd_in}>&-
    for _ in $(seq 100); do grep -q "^done" "$E2E_TMP/$name.out" && break; sleep 0.1; done
    echo "$name: $CLONEVM_CROWD processes sharing one mm, memlock_process_unwatched_processes ${unwatched:-absent}" \
        "and memlock_process_discovered_total ${discovered:-absent} when the job started"
    local with
    with=$(grep -c '^[1-9]' "$E2E_TMP/$name-series.txt")
    echo "$name: scrapes during the ramp with the job's series: $with of $(wc -l < "$E2E_TMP/$name-series.txt")"
    [ "$with" -gt 0 ] || rc=1
    if [ "$wait" = 1 ]; then
        grep -q '"MemlockProcessesUnwatchedFast"' "$WEBHOOK_OUT" || { echo "$name: no unwatched page"; rc=1; }
    fi
    local out
    out=$(python3 "$ROOT/scripts/e2e/check_lead.py" "$E2E_TMP/$name-job.out" "$WEBHOOK_OUT" \
        MemlockProcessLimitExhaustionImminent "$since" "$E2E_TMP/exporter.log" 1 \
        "counter=locked,cgroup=/memlock-e2e-$$-$name-job" 2>&1) || rc=1
    echo "$name: the job's critical page (process pass ${run_seconds:-?} s): $out"
}

if part clonevm; then
    clone_vm_part clonevm 1
fi

if part storm; then
    clone_vm_part storm 0
fi

if part leader; then
    exec {leader_in}> >(in_cgroup leader 64484 /usr/bin/python3 "$CROWDS" leader 2048 > "$E2E_TMP/leader.out" 2>&1)
    for _ in $(seq 100); do grep -q "leader exited" "$E2E_TMP/leader.out" && break; sleep 0.1; done
    pid=$(cat "$CG-leader/cgroup.procs" | head -1)
    grep -q "^State:.Z" "/proc/$pid/status" || fail "the leader of $pid did not exit"
    label=""
    for _ in $(seq 50); do
        label=$(curl -fsS "$EXPORTER_URL/metrics" | grep "^memlock_process_locked_bytes{pid=\"$pid\"" |
            grep -oE 'cgroup="[^"]*"')
        [ -n "$label" ] && break
        sleep 0.2
    done
    echo "leader: pid $pid exported with ${label:-no series} (its cgroup: /memlock-e2e-$$-leader)"
    [ "$label" = "cgroup=\"/memlock-e2e-$$-leader\"" ] || rc=1
    exec {leader_in}>&-
fi
exit $rc
