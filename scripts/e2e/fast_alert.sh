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
#
# Beside the ramps (issue 23 item 1, issue 24 items 1 and 10; scripts/e2e/fast_patterns.py):
# - healthy: five patterns at once, each under its own uid and an 8 MiB soft limit (one step then
#   flat; a burst of four steps within a second; a step on memory held to 62.5 %; register/
#   deregister cycles; short-lived registrants) must page nothing: no alert of theirs reaches the
#   webhook or the exporter's log. `HEALTHY_RUNS=n` repeats it; prints the false pages per run.
# - crowd: 250 processes each mlocking 64 KiB under a 4 KiB soft limit they set themselves
#   (ratio 16) while the 1 MiB/s pin ramp runs: the ramp still pages 2 s ahead, its page is not
#   resolved while it climbs, and /metrics carries its per-process series.
# - crowd-cgroups: CROWD_CGROUPS (40) such processes, each in a v1 memory cgroup of its own (one
#   aggregate each), while the ramp runs in a Slurm-shaped cgroup with a memory limit: the ramp
#   still pages 2 s ahead, and every scrape from its first MiB to its refusal carries the job's
#   series of every memlock_process_* and memlock_cgroup_* family alerts/memlock-exporter.rules.yml
#   reads (its per-process series and its cgroup's aggregate and memory series).
# - churn: 100 such processes a second, each living 0.5 s, for 20 s: the churn pages (an alert
#   folded, LOG_BURST lines and a summary), the exporter logs at most LOG_BURST (10) firing lines
#   per alert name per 10 s, and its POSTs stay under 100 kB.
# `PARTS="healthy ramps crowd crowd-cgroups churn"` (the default) picks the parts.
set -uo pipefail
source "$(dirname "$0")/lib.bash"

RUNS=${RUNS:-1}
HEALTHY_RUNS=${HEALTHY_RUNS:-1}
PARTS=${PARTS:-healthy ramps crowd crowd-cgroups churn}
part() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
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
# A second receiver stands for another Alertmanager and records the exporter's own POSTs, to
# measure their size.
POSTS_OUT=$E2E_TMP/posts.jsonl
: > "$POSTS_OUT"
python3 "$ROOT/scripts/e2e/webhook_receiver.py" "$POSTS_OUT" "$E2E_TMP/posts.port" &
E2E_PIDS+=($!)
for _ in $(seq 50); do [ -s "$E2E_TMP/posts.port" ] && break; sleep 0.1; done
start_exporter --alertmanager.url "http://127.0.0.1:${AM_PORT}" \
    --alertmanager.url "http://127.0.0.1:$(cat "$E2E_TMP/posts.port")"
exporter_started=$(date +%s.%N)
log "exporter at $EXPORTER_URL"

DRILL=$(public_binary)
rc=0

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
# A uid of its own for the pin drills: io_uring checks the per-user locked_vm, not VmPin
# (io_uring/rsrc.c __io_account_mem), so nothing else of that user may hold buffers.
pin_drill() {
    local name=$1
    shift
    run_drill "$name" prlimit --memlock=8388608:8388608 \
        setpriv --reuid=64436 --regid=64436 --clear-groups "$DRILL" drill --mode pin "$@" ||
        { cat "$E2E_TMP/$name.out"; fail "$name drill failed"; }
}
PATTERNS=$E2E_TMP/fast_patterns.py
cp "$ROOT/scripts/e2e/fast_patterns.py" "$PATTERNS"
chmod 0755 "$PATTERNS"
# as_uid UID CMD...: CMD unprivileged under an 8 MiB memlock limit.
as_uid() {
    local uid=$1
    shift
    prlimit --memlock=8388608:8388608 setpriv --reuid="$uid" --regid="$uid" --clear-groups "$@"
}

# healthy_alerts SINCE: the alerts of the healthy patterns' processes (comm healthy-*) that reached
# the webhook, and the exporter's firing lines for them, since SINCE; exits 1 if there is any.
healthy_alerts() {
    python3 - "$WEBHOOK_OUT" "$E2E_TMP/exporter.log" "$1" <<'PY'
import json, sys
from datetime import datetime
webhook, exporter_log, since = sys.argv[1], sys.argv[2], float(sys.argv[3])
notified = {}
for line in open(webhook):
    note = json.loads(line)
    if note["received"] < since:
        continue
    for alert in note["payload"].get("alerts", []):
        labels = alert["labels"]
        if alert["status"] == "firing" and labels.get("comm", "").startswith("healthy-"):
            notified[tuple(sorted(labels.items()))] = labels
logged = 0
for line in open(exporter_log):
    try:
        entry = json.loads(line)
    except ValueError:
        continue
    if entry.get("message") == "fast-path alert firing" and '"comm": "healthy-' in entry.get("labels", ""):
        if datetime.fromisoformat(entry["timestamp"]).timestamp() >= since:
            logged += 1
pages = [l for l in notified.values() if l.get("severity") == "critical"]
print(f"{len(pages)} false page(s), {len(notified) - len(pages)} warning(s) at the webhook, "
      f"{logged} firing line(s) logged")
for labels in notified.values():
    print(f"  {labels.get('alertname')} {labels.get('severity')} pid={labels.get('pid')} comm={labels.get('comm')} "
          f"counter={labels.get('counter')}")
sys.exit(1 if notified or logged else 0)
PY
}

false_pages=()
if part healthy; then
    for run in $(seq "$HEALTHY_RUNS"); do
        since=$(date +%s.%N)
        hpids=()
        uid=64450
        for pattern in step burst held cycles registrants; do
            as_uid $uid /usr/bin/python3 "$PATTERNS" "$pattern" > "$E2E_TMP/healthy-$pattern.out" 2>&1 &
            hpids+=($!)
            uid=$((uid + 1))
        done
        for pid in "${hpids[@]}"; do wait "$pid" || { rc=1; log "a healthy pattern failed"; }; done
        # resolve_after (5 s) and a delivery: anything that fired has reached the webhook by then.
        python3 -c 'import time; time.sleep(7)'
        out=$(healthy_alerts "$since") || rc=1
        echo "healthy run $run: $out"
        false_pages+=("$(echo "$out" | head -1 | grep -oE '^[0-9]+')")
    done
fi

crowd_lead=""
if part crowd; then
    # 250 processes over the 4 KiB limits they set themselves, before the job starts.
    exec {crowd_in}> >(as_uid 64460 /usr/bin/python3 "$PATTERNS" crowd 250 > "$E2E_TMP/crowd.out" 2>&1)
    for _ in $(seq 300); do grep -q "crowd ready" "$E2E_TMP/crowd.out" 2>/dev/null && break; sleep 0.1; done
    grep -q "crowd ready" "$E2E_TMP/crowd.out" || fail "the crowd did not start: $(cat "$E2E_TMP/crowd.out")"
    # The exporter has seen them all once its process count says so.
    for _ in $(seq 100); do
        n=$(curl -fsS "$EXPORTER_URL/metrics" | awk '/^memlock_process_scanned_processes /{print $2}')
        [ "${n:-0}" -ge 250 ] && break
        sleep 0.2
    done
    since=$(date +%s.%N)
    # While the ramp runs: does /metrics carry its per-process series (the crowd outranked it)?
    ( while :; do
        curl -fsS "$EXPORTER_URL/metrics" |
            grep -c '^memlock_process_limit_usage_ratio{.*comm="memlock-expo[a-z]*".*counter="pinned"' \
            >> "$E2E_TMP/crowd-series.txt"
        sleep 0.5
    done ) &
    scraper=$!
    E2E_PIDS+=("$scraper")  # also ended if the drill fails
    run_drill crowd-pin prlimit --memlock=8388608:8388608 \
        setpriv --reuid=64436 --regid=64436 --clear-groups "$DRILL" drill --mode pin --step-mib 1 --interval-ms 1000 \
            --max-mib 64 --hold-seconds 3 ||
        { cat "$E2E_TMP/crowd-pin.out"; fail "crowd-pin drill failed"; }
    kill "$scraper" 2>/dev/null
    wait "$scraper" 2>/dev/null
    with=$(grep -c '^[1-9]' "$E2E_TMP/crowd-series.txt")
    echo "scrapes during the ramp with its per-process series: $with of $(wc -l < "$E2E_TMP/crowd-series.txt")"
    [ "$with" -gt 0 ] || rc=1
    out=$(check_lead crowd-pin MemlockProcessLimitExhaustionImminent "$since" 2 counter=pinned) ||
        { echo "$out"; rc=1; }
    echo "pin ramp beside a crowd of 250 over their own limits: $out"
    crowd_lead=$(echo "$out" | grep -oE '[0-9.]+s before' | grep -oE '[0-9.]+')
    # No resolution of the ramp's page before the ramp was refused.
    python3 - "$E2E_TMP/crowd-pin.out" "$WEBHOOK_OUT" "$since" <<'PY' || rc=1
import json, re, sys
drill_out, webhook, since = sys.argv[1], sys.argv[2], float(sys.argv[3])
refused = next(float(l.split()[0]) for l in open(drill_out) if re.search(r"ENOMEM|refused", l))
for line in open(webhook):
    note = json.loads(line)
    if since <= note["received"] < refused:
        for alert in note["payload"].get("alerts", []):
            l = alert["labels"]
            if (l.get("alertname") == "MemlockProcessLimitExhaustionImminent" and alert["status"] == "resolved"
                    and l.get("comm") != "python3"):
                sys.exit(f"the ramp's page was resolved at {note['received']:.1f} while it climbed")
print("the ramp's page held until the refusal")
PY
    exec {crowd_in}>&-
    for _ in $(seq 100); do grep -q "^done" "$E2E_TMP/crowd.out" && break; sleep 0.1; done
fi

# The cgroup variant: each crowd member in a v1 memory cgroup of its own (an aggregate each), the
# job in a Slurm-shaped one (cgroup/v1's /slurm_<node>/uid_<uid>/job_<id>/step_<step>), so that
# the job-level rules read it too.
CROWD_CGROUPS=${CROWD_CGROUPS:-40}
CROWD_CG=/sys/fs/cgroup/memory/memlock-e2e-$$-crowd
JOB_TOP=/sys/fs/cgroup/memory/slurm_memlock-e2e-$$
JOB_CG=$JOB_TOP/uid_64436/job_$$/step_0
crowd_cgroups_cleanup() {
    local cg
    for cg in "$CROWD_CG"-* "$JOB_CG"; do
        [ -d "$cg" ] && for pid in $(cat "$cg/cgroup.procs" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
    done
    # Deepest first; a killed process leaves its cgroup once it has exited.
    for cg in "$CROWD_CG"-* "$JOB_CG" "${JOB_CG%/*}" "${JOB_CG%/*/*}" "$JOB_TOP"; do
        [ -d "$cg" ] || continue
        for _ in $(seq 100); do rmdir "$cg" 2>/dev/null && break; sleep 0.1; done
        [ -d "$cg" ] && echo "could not remove $cg"
    done
}
on_exit crowd_cgroups_cleanup

cg_crowd_lead=""
if part crowd-cgroups; then
    counter() { curl -fsS "$EXPORTER_URL/metrics" | awk -v name="$1" '$1 == name {v = $2} END {print v + 0}'; }
    discovered=$(counter memlock_process_discovered_total)
    full_scans=$(counter memlock_process_full_scans_total)
    : > "$E2E_TMP/crowd-cgroups.out"
    for n in $(seq "$CROWD_CGROUPS"); do
        mkdir "$CROWD_CG-$n" || fail "mkdir $CROWD_CG-$n"
        # Born in its cgroup (the exporter reads a process's cgroup when it first sees it, and
        # again at full scans), unprivileged, over the 4 KiB limit it lowers itself.
        sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$CROWD_CG-$n" \
            prlimit --memlock=8388608:8388608 setpriv --reuid=64462 --regid=64462 --clear-groups \
            /usr/bin/python3 "$PATTERNS" lowered >> "$E2E_TMP/crowd-cgroups.out" 2>&1 &
        disown $!  # ended by crowd_cgroups_cleanup, which kills what is in the cgroups
    done
    # One file for every member: a line may be interleaved with another.
    ready() { [ "$(grep -o "lowered ready" "$E2E_TMP/crowd-cgroups.out" | wc -l)" -ge "$CROWD_CGROUPS" ]; }
    for _ in $(seq 300); do ready && break; sleep 0.1; done
    ready || fail "the crowd in cgroups did not start: $(cat "$E2E_TMP/crowd-cgroups.out")"
    # The exporter has seen them once it discovered as many processes, or listed all of procfs.
    for _ in $(seq 100); do
        [ "$(counter memlock_process_discovered_total)" -ge $((discovered + CROWD_CGROUPS)) ] && break
        [ "$(counter memlock_process_full_scans_total)" -gt "$full_scans" ] && break
        sleep 0.2
    done
    mkdir -p "$JOB_CG" || fail "mkdir $JOB_CG"
    # Slurm's task/cgroup plugin limits the step's memory (ConstrainRAMSpace).
    echo $((1 << 30)) > "$JOB_CG/memory.limit_in_bytes"
    since=$(date +%s.%N)
    # While the ramp runs, per scrape: the families with a series of the job's cgroup (its
    # processes' series carry that label too), and how many of the crowd's cgroups and processes
    # have series.
    python3 - "$EXPORTER_URL/metrics" "${JOB_CG#/sys/fs/cgroup/memory}" "${CROWD_CG#/sys/fs/cgroup/memory}-" \
        "$E2E_TMP/crowd-cgroups-scrapes.jsonl" <<'PY' &
import json, re, sys, time, urllib.request
url, job, crowd, out = sys.argv[1:5]
while True:
    at = time.time()
    try:
        text = urllib.request.urlopen(url, timeout=10).read().decode()
    except OSError as err:
        print(f"scrape: {err}", file=sys.stderr)
        time.sleep(0.5)
        continue
    families, crowd_cgroups, crowd_pids = set(), set(), set()
    for name, labels in re.findall(r'^([a-z_]+)\{(.*)\} ', text, re.M):
        cgroup = re.search(r'cgroup="([^"]*)"', labels)
        pid = re.search(r'pid="([^"]*)"', labels)
        if cgroup and cgroup.group(1) == job:
            families.add(name)
        elif cgroup and cgroup.group(1).startswith(crowd):
            (crowd_pids if pid else crowd_cgroups).add((pid or cgroup).group(1))
    with open(out, "a") as f:
        f.write(json.dumps({"at": at, "job": sorted(families), "crowd_cgroups": len(crowd_cgroups),
                            "crowd_processes": len(crowd_pids)}) + "\n")
    time.sleep(0.5)
PY
    scraper=$!
    E2E_PIDS+=("$scraper")  # also ended if the drill fails
    run_drill crowd-cgroups-pin sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$JOB_CG" \
        prlimit --memlock=8388608:8388608 setpriv --reuid=64436 --regid=64436 --clear-groups \
        "$DRILL" drill --mode pin --step-mib 1 --interval-ms 1000 --max-mib 64 --hold-seconds 3 ||
        { cat "$E2E_TMP/crowd-cgroups-pin.out"; fail "crowd-cgroups-pin drill failed"; }
    kill "$scraper" 2>/dev/null
    wait "$scraper" 2>/dev/null
    # Every memlock_process_* and memlock_cgroup_* family a shipped rule reads (not the parts of
    # recorded names) must carry the job's series in every scrape from 2 s after its first MiB
    # (one pass to read it) to its refusal; but the libraries the drill does not map (the NCCL
    # version, RDMA registrants) and the node's count of unwatched processes (no job label).
    mapfile -t rule_families < <(grep -oE '(^|[^:a-z_])memlock_(process|cgroup)_[a-z_]+' \
        "$ROOT/alerts/memlock-exporter.rules.yml" | grep -oE 'memlock_[a-z_]+' |
        grep -vxE 'memlock_process_(nccl_info|rdma_library_info|unwatched_processes)' | sort -u)
    python3 - "$E2E_TMP"/crowd-cgroups-{scrapes.jsonl,pin.out} "${rule_families[@]}" <<'PY' || rc=1
import json, re, sys
scrapes, drill_out, wanted = sys.argv[1], sys.argv[2], set(sys.argv[3:])
lines = [l.split(" ", 1) for l in open(drill_out)]
first = next(float(t) for t, text in lines if "event=step step=1 " in text)
refused = next(float(t) for t, text in lines if re.search(r"ENOMEM|refused", text))
window = [s for s in map(json.loads, open(scrapes)) if first + 2 <= s["at"] < refused]
complete = [s for s in window if wanted <= set(s["job"])]
missing = sorted(set().union(*(wanted - set(s["job"]) for s in window)))
print(f"scrapes during the ramp with all {len(wanted)} families the rules read for the job: "
      f"{len(complete)} of {len(window)}; the crowd's series in them: "
      f"{max((s['crowd_cgroups'] for s in window), default=0)} cgroups, "
      f"{max((s['crowd_processes'] for s in window), default=0)} processes")
if missing:
    print("missing for the job: " + " ".join(missing))
sys.exit(0 if len(window) >= 3 and len(complete) == len(window) else 1)
PY
    out=$(check_lead crowd-cgroups-pin MemlockProcessLimitExhaustionImminent "$since" 2 counter=pinned) ||
        { echo "$out"; rc=1; }
    echo "pin ramp beside $CROWD_CGROUPS crowd processes in cgroups of their own: $out"
    cg_crowd_lead=$(echo "$out" | grep -oE '[0-9.]+s before' | grep -oE '[0-9.]+')
    crowd_cgroups_cleanup
fi

churn_lines=""
churn_post=""
if part churn; then
    since=$(date +%s.%N)
    as_uid 64461 /usr/bin/python3 "$PATTERNS" churn 100 20 > "$E2E_TMP/churn.out" 2>&1 ||
        { cat "$E2E_TMP/churn.out"; rc=1; }
    python3 -c 'import time; time.sleep(7)'
    out=$(python3 - "$E2E_TMP/exporter.log" "$POSTS_OUT" "$since" <<'PY'
import json, sys
from datetime import datetime
exporter_log, posts, since = sys.argv[1], sys.argv[2], float(sys.argv[3])
lines = summaries = 0
for line in open(exporter_log):
    try:
        entry = json.loads(line)
    except ValueError:
        continue
    at = datetime.fromisoformat(entry["timestamp"]).timestamp() if "timestamp" in entry else 0
    if at < since:
        continue
    if entry.get("message") == "fast-path alert firing":
        lines += 1
    elif str(entry.get("message", "")).startswith("fast-path alerts not logged one by one"):
        summaries += 1
largest = count = folded = 0
for line in open(posts):
    note = json.loads(line)
    if note["received"] >= since:
        count += 1
        largest = max(largest, len(json.dumps(note["payload"])))
        alerts = note["payload"] if isinstance(note["payload"], list) else []
        folded += any(a["labels"].get("aggregated") == "true" for a in alerts)
print(f"{lines} firing line(s), {summaries} summary line(s), {count} POSTs, the largest {largest} bytes,"
      f" {folded} with the folded alert")
# The churn must have paged for the bounds to mean anything: LOG_BURST lines, a summary, a fold.
sys.exit(0 if 10 <= lines <= 60 and summaries >= 1 and folded >= 1 and largest < 100_000 else 1)
PY
    ) || rc=1
    echo "churn ($(tail -1 "$E2E_TMP/churn.out")): $out"
    churn_lines=$out
fi

part ramps || RUNS=0
for run in $(seq "$RUNS"); do
    # 1. A 1 MiB/s pin ramp to the 8 MiB soft limit, unprivileged, started 2 s after the
    #    exporter (the first run; later runs 2 s after the previous drill resolved).
    python3 -c "import time, sys; time.sleep(max(0.0, float(sys.argv[1]) + 2 - time.time()))" "$exporter_started"
    since=$(date +%s.%N)
    pin_drill "pin$run" --step-mib 1 --interval-ms 1000 --max-mib 64 --hold-seconds 3
    ended=$(date +%s.%N)
    out=$(check_lead "pin$run" MemlockProcessLimitExhaustionImminent "$since" 2 counter=pinned) ||
        { echo "$out"; rc=1; }
    echo "pin run $run: $out"
    leads+=("$(echo "$out" | grep -oE '[0-9.]+s before' | grep -oE '[0-9.]+')")
    wait_resolved MemlockProcessLimitExhaustionImminent "$ended" || rc=1

    # 2. 6 MiB locked and held, pinned memory rising 1 MiB every 2 s to the same limit.
    since=$(date +%s.%N)
    pin_drill "locked$run" --locked-mib 6 --step-mib 1 --interval-ms 2000 --max-mib 64 --hold-seconds 3
    ended=$(date +%s.%N)
    out=$(check_lead "locked$run" MemlockProcessLimitExhaustionImminent "$since" 4 counter=pinned) ||
        { echo "$out"; rc=1; }
    echo "pinned under 6 MiB locked, run $run: $out"
    locked_leads+=("$(echo "$out" | grep -oE '[0-9.]+s before' | grep -oE '[0-9.]+')")
    wait_resolved MemlockProcessLimitExhaustionImminent "$ended" || rc=1
    exporter_started=$(date +%s.%N)

    # 3. Locked memory (mlock) as root inside a v1 memory cgroup limited to 64 MiB: 4 MiB every
    #    2 s. Locked pages cannot be reclaimed, so the cgroup OOM-kills the drill at its limit.
    mkdir -p "$CGROUP"
    echo $((64 << 20)) > "$CGROUP/memory.limit_in_bytes"
    since=$(date +%s.%N)
    run_drill "lock$run" sh -c 'echo $$ > "$1/cgroup.procs" &&
        exec "$2" drill --mode lock --step-mib 4 --interval-ms 2000 --max-mib 256 --hold-seconds 3' \
        sh "$CGROUP" "$DRILL" || { cat "$E2E_TMP/lock$run.out"; fail "lock drill failed"; }
    ended=$(date +%s.%N)
    out=$(check_lead "lock$run" MemlockCgroupMemoryExhaustionImminent "$since") || { echo "$out"; rc=1; }
    echo "lock run $run: $out (the cgroup's OOM kills: $(awk '/^oom_kill /{print $2}' "$CGROUP/memory.oom_control"))"
    cg_leads+=("$(echo "$out" | grep -oE '[0-9.]+s before' | grep -oE '[0-9.]+')")
    rmdir "$CGROUP" 2>/dev/null || true
    wait_resolved MemlockCgroupMemoryExhaustionImminent "$ended" || rc=1
done

if [ ${#leads[@]} -gt 0 ]; then
    printf '%s\n' "${leads[@]}" | sort -n | awk '{a[NR]=$1} END {if (NR)
        printf "pin drill lead time: median %.1fs over %d run(s)\n", a[int((NR+1)/2)], NR}'
fi
if [ ${#locked_leads[@]} -gt 0 ]; then
    printf '%s\n' "${locked_leads[@]}" | sort -n | awk '{a[NR]=$1} END {if (NR)
        printf "pinned under held locked memory lead time: median %.1fs over %d run(s)\n", a[int((NR+1)/2)], NR}'
fi
if [ ${#cg_leads[@]} -gt 0 ]; then
    printf '%s\n' "${cg_leads[@]}" | sort -n | awk '{a[NR]=$1} END {if (NR)
        printf "cgroup lock drill lead time: median %.1fs over %d run(s)\n", a[int((NR+1)/2)], NR}'
fi
if [ ${#false_pages[@]} -gt 0 ]; then
    echo "healthy patterns: $(printf '%s\n' "${false_pages[@]}" | awk '{s+=$1} END {print s}')" \
        "false page(s) over ${#false_pages[@]} run(s)"
fi
[ -n "$crowd_lead" ] && echo "pin ramp beside the crowd: ${crowd_lead}s lead"
[ -n "$cg_crowd_lead" ] && echo "pin ramp beside the crowd in cgroups of their own: ${cg_crowd_lead}s lead"
[ $rc = 0 ] && echo "fast_alert: ok" || echo "fast_alert: FAILED"
exit $rc
