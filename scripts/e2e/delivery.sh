#!/usr/bin/env bash
# Pages arrive whatever else is broken (issue 33 items 2 and 3): a job's lock ramp to ENOMEM
# must page a healthy Alertmanager before the kernel refuses it, in two setups:
# - replicas: three --alertmanager.url, given in this order: a real Alertmanager that was
#   stopped (its port refuses), a stand-in that accepts the connection and never answers, and a
#   healthy real Alertmanager. Before, the exporter posted them one after the other with one
#   shared backoff: the healthy one got the page after the stand-in's 5 s timeout, after ENOMEM.
# - stalled log: the exporter's stderr is a pipe whose reader stops, and the pipe is full.
#   Before, the fast path wrote "firing" to stderr before posting and blocked there: no page.
#   Scrapes must stay fresh meanwhile (every sample of the process collector under 3 s old), and
#   memlock_exporter_log_lines_dropped_total is exported.
# Each ramp: 1 MiB mlocked a second under an 8 MiB soft limit, under a uid of its own. Prints
# each page's lead before ENOMEM. `PARTS="replicas stalled-log"` (the default) picks the parts;
# MEMLOCK_EXPORTER_BIN runs another binary (an older build, to see it fail).
set -uo pipefail
source "$(dirname "$0")/lib.bash"

PARTS=${PARTS:-replicas stalled-log}
part() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
[ "$(id -u)" = 0 ] || fail "needs root (setpriv, prlimit)"
[ -x "$BIN" ] || fail "$BIN not built"
[ -n "$(alertmanager_bin)" ] || fail "no Alertmanager (Debian: apt-get install prometheus-alertmanager)"

start_webhook
start_alertmanager
log "healthy Alertmanager on 127.0.0.1:$AM_PORT, webhook on 127.0.0.1:$WEBHOOK_PORT"
DRILL=$(public_binary)

# The exporter sees only this script's processes (the machine is shared): a procfs root of links
# to their /proc/<pid> directories, as in alertmanager_outage.sh.
VIEW=$E2E_TMP/proc
mkdir -p "$VIEW"
ln -s /proc/meminfo "$VIEW/meminfo"
EXPORTER_ARGS=(--path.procfs="$VIEW" --no-collector.node --no-collector.numa --no-collector.cgroup
    --no-collector.rdma_sysfs --no-collector.rdma_netlink)
metric() {
    curl -fsS "$EXPORTER_URL/metrics" | awk -v name="$1" 'index($0, name) == 1 {sum += $NF} END {printf "%.3f", sum}'
}

# ramp NAME UID: the job, stamped line by line (Unix seconds), linked into the exporter's view
# before it locks anything (the drill waits a second before its first step).
ramp() {
    local name=$1 uid=$2
    python3 -c '
import os, subprocess, sys, time
view, out_path = sys.argv[1], sys.argv[2]
proc = subprocess.Popen(sys.argv[3:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
os.symlink(f"/proc/{proc.pid}", f"{view}/{proc.pid}")
with open(out_path, "w") as out:
    out.write("%.3f PID %d\n" % (time.time(), proc.pid))
    out.flush()
    for line in proc.stdout:
        out.write("%.3f %s" % (time.time(), line))
        out.flush()
    out.write("%.3f EXIT %d\n" % (time.time(), proc.wait()))
' "$VIEW" "$E2E_TMP/$name.out" prlimit --memlock=8388608:8388608 setpriv --reuid="$uid" --regid="$uid" \
        --clear-groups "$DRILL" drill --mode lock --step-mib 1 --interval-ms 1000 --max-mib 64 --hold-seconds 1
}

# lead NAME: the ramp's first page (MemlockProcessLimitExhaustionImminent with its pid) at the
# healthy Alertmanager's webhook must come before its refusal; prints the lead.
lead() {
    python3 - "$E2E_TMP/$1.out" "$WEBHOOK_OUT" "$1" <<'PY'
import json, re, sys
drill_out, webhook, name = sys.argv[1:4]
lines = [l.split(" ", 1) for l in open(drill_out)]
pid = next(text.split()[1] for _, text in lines if text.startswith("PID "))
refused = next((float(t) for t, text in lines if re.search(r"ENOMEM|refused", text)), None)
if refused is None:
    sys.exit(f"{name}: the ramp was never refused:\n" + open(drill_out).read())
paged = None
for line in open(webhook):
    note = json.loads(line)
    for alert in note["payload"].get("alerts", []):
        labels = alert["labels"]
        if (labels.get("alertname") == "MemlockProcessLimitExhaustionImminent" and labels.get("pid") == pid
                and alert["status"] == "firing"):
            paged = note["received"] if paged is None else min(paged, note["received"])
if paged is None:
    sys.exit(f"{name}: the ramp (pid {pid}) was refused at {refused:.1f} and its page never reached the webhook")
print(f"{name}: paged {refused - paged:.1f} s before ENOMEM")
sys.exit(0 if paged < refused else f"{name}: the page came {paged - refused:.1f} s after ENOMEM")
PY
}

if part replicas; then
    # A real Alertmanager, stopped: its port refuses connections.
    STOPPED_PORT=$(free_port)
    mkdir -p "$E2E_TMP/am-stopped"
    cp "$E2E_TMP/am/alertmanager.yml" "$E2E_TMP/am-stopped/"
    "$(alertmanager_bin)" --config.file="$E2E_TMP/am-stopped/alertmanager.yml" \
        --storage.path="$E2E_TMP/am-stopped/data" --web.listen-address="127.0.0.1:${STOPPED_PORT}" \
        --cluster.listen-address="" --log.level=warn > "$E2E_TMP/am-stopped/log" 2>&1 &
    stopped=$!
    E2E_PIDS+=($stopped)
    wait_http "http://127.0.0.1:${STOPPED_PORT}/-/ready" 30 || fail "the second Alertmanager did not start"
    kill "$stopped"
    wait "$stopped" 2>/dev/null
    ! curl -fsS -o /dev/null "http://127.0.0.1:${STOPPED_PORT}/-/ready" 2>/dev/null ||
        fail "the stopped Alertmanager still answers"
    # A stand-in that accepts every connection and never answers (a hung replica).
    python3 -c '
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0))
s.listen(128)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
held = []
while True:
    held.append(s.accept()[0])
' "$E2E_TMP/hang.port" &
    E2E_PIDS+=($!)
    for _ in $(seq 50); do [ -s "$E2E_TMP/hang.port" ] && break; sleep 0.1; done
    HANG_PORT=$(cat "$E2E_TMP/hang.port")
    start_exporter "${EXPORTER_ARGS[@]}" --alertmanager.url "http://127.0.0.1:${STOPPED_PORT}" \
        --alertmanager.url "http://127.0.0.1:${HANG_PORT}" --alertmanager.url "http://127.0.0.1:${AM_PORT}"
    log "replicas: stopped :$STOPPED_PORT, hanging :$HANG_PORT, healthy :$AM_PORT, in that order"
    ramp replicas 64441
    out=$(lead replicas) || { echo "$out"; tail -20 "$E2E_TMP/exporter.log"; fail "replicas: see above"; }
    echo "$out"
    # Each endpoint's last success: the healthy one's recent, the broken ones' none.
    series='memlock_exporter_alertmanager_last_success_timestamp_seconds{alertmanager="http://127.0.0.1'
    healthy=$(metric "$series:${AM_PORT}\"}")
    broken=$(metric "$series:${STOPPED_PORT}\"}")
    hung=$(metric "$series:${HANG_PORT}\"}")
    now=$(date +%s)
    log "last successful delivery: healthy $(python3 -c "print(round($now - $healthy, 1))") s ago;" \
        "stopped $broken, hanging $hung (0: never)"
    python3 -c "import sys; sys.exit(0 if $now - $healthy < 30 else 1)" || fail "the healthy replica's last success"
    [ "$broken" = 0.000 ] && [ "$hung" = 0.000 ] || fail "a broken replica has a successful delivery"
    [ "$(metric 'memlock_exporter_alert_send_failures_total')" != 0.000 ] || fail "no failed delivery counted"
    kill -0 "$EXPORTER_PID" 2>/dev/null || fail "the exporter died"
    kill "$EXPORTER_PID"
    wait "$EXPORTER_PID" 2>/dev/null
fi

if part stalled-log; then
    # The exporter's stderr is a FIFO; its reader reads until it is stopped (SIGSTOP), then the
    # pipe is filled to the brim through a second writer, so the exporter's next line finds it full.
    mkfifo "$E2E_TMP/log.fifo"
    cat "$E2E_TMP/log.fifo" > "$E2E_TMP/stalled.log" &
    reader=$!
    E2E_PIDS+=($reader)
    resume_reader() { kill -CONT "$reader" 2>/dev/null; }
    on_exit resume_reader
    EXPORTER_PORT=$(free_port)
    EXPORTER_URL=http://127.0.0.1:${EXPORTER_PORT}
    env -u MEMLOCK_EXPORTER_BIN "$BIN" --web.listen-address="127.0.0.1:${EXPORTER_PORT}" --log.format=json \
        "${EXPORTER_ARGS[@]}" --alertmanager.url "http://127.0.0.1:${AM_PORT}" 2> "$E2E_TMP/log.fifo" &
    EXPORTER_PID=$!
    E2E_PIDS+=($EXPORTER_PID)
    wait_http "$EXPORTER_URL/-/ready" 30 || { cat "$E2E_TMP/stalled.log"; fail "exporter did not become ready"; }
    kill -STOP "$reader"
    filled=$(python3 -c '
import errno, os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_NONBLOCK)
total = 0
while True:
    try:
        total += os.write(fd, b"filler line from the test: the pipe is full and its reader stopped\n")
    except BlockingIOError:
        break
print(total)
' "$E2E_TMP/log.fifo")
    log "stalled log: the reader is stopped, the pipe full ($filled bytes); exporter at $EXPORTER_URL"
    # The process collector's sample age at every scrape while the ramp runs.
    (
        while :; do
            curl -fsS -m 2 "$EXPORTER_URL/metrics" 2>/dev/null |
                awk '/^memlock_exporter_collector_sample_age_seconds\{collector="process"\}/ {print $NF}'
            sleep 0.5
        done > "$E2E_TMP/ages"
    ) &
    scraper=$!
    E2E_PIDS+=($scraper)
    ramp stalled-log 64442
    kill "$scraper"
    out=$(lead stalled-log) || { echo "$out"; fail "stalled log: see above"; }
    echo "$out"
    python3 - "$E2E_TMP/ages" <<'PY' || fail "scrapes went stale while the log was stalled"
import sys
ages = [float(l) for l in open(sys.argv[1]) if l.strip()]
print(f"stalled log: {len(ages)} scrapes during the ramp, oldest process sample {max(ages, default=-1):.1f} s")
sys.exit(0 if len(ages) >= 10 and max(ages) < 3 else 1)
PY
    dropped=$(metric memlock_exporter_log_lines_dropped_total)
    curl -fsS "$EXPORTER_URL/metrics" | grep -q '^memlock_exporter_log_lines_dropped_total ' ||
        fail "memlock_exporter_log_lines_dropped_total is not exported"
    log "stalled log: $dropped log lines dropped so far (the queue holds 2048)"
    # The reader resumes: the lines queued meanwhile arrive, the page's among them.
    kill -CONT "$reader"
    for _ in $(seq 50); do grep -q '"message":"fast-path alert firing"' "$E2E_TMP/stalled.log" && break; sleep 0.1; done
    grep -q '"message":"fast-path alert firing"' "$E2E_TMP/stalled.log" ||
        fail "the queued firing line never reached the log once its reader resumed"
    kill -0 "$EXPORTER_PID" 2>/dev/null || fail "the exporter died"
fi
log "delivery: ok"
