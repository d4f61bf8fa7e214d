#!/usr/bin/env bash
# End to end through Prometheus: a real Prometheus scrapes the exporter every second and
# evaluates the shipped alert rules (the same expressions; only `for` and the rise window are
# shortened), sends to a
# real Alertmanager, which notifies a webhook. A slower unprivileged io_uring pin drill must page
# through this path before its first ENOMEM. The exporter's fast path is off here, so only
# Prometheus can have sent the alert. `RUNS=n` repeats the drill and reports the median lead.
set -uo pipefail
source "$(dirname "$0")/lib.bash"

RUNS=${RUNS:-1}
FOR=${RULE_FOR:-2s}
# The predicted-exhaustion rules need a rise over every `rise_window` (5m) ending within the last
# one: two steps of the drill (one every 4 s) at a 1 s scrape.
RISE=${RULE_RISE_WINDOW:-8s}
[ "$(id -u)" = 0 ] || fail "needs root (setpriv, prlimit)"
[ -x "$BIN" ] || fail "$BIN not built"
command -v prometheus >/dev/null || fail "prometheus is not installed"

start_webhook
start_alertmanager
export MEMLOCK_EXPORTER_COLLECTOR__PROCESS__FULL_SCAN_INTERVAL=1s
start_exporter --no-collector.numa --no-collector.rdma_netlink
unset MEMLOCK_EXPORTER_COLLECTOR__PROCESS__FULL_SCAN_INTERVAL

# The shipped rules with every `for` and the rise window shortened, so a 30 s drill can page.
sed -E -e "s/^( *)for: .*/\1for: ${FOR}/" \
    -e "s/(deriv\([a-z_]+)\[5m\]\)\[5m:\]/\1[${RISE}])[${RISE}:]/" \
    -e "s/(count_over_time\([a-z_]+)\[5m\] offset 5m\)/\1[${RISE}] offset ${RISE})/" \
    "$ROOT/alerts/memlock-exporter.rules.yml" > "$E2E_TMP/rules.yml"
[ "$(grep -c "\[${RISE}\]" "$E2E_TMP/rules.yml")" = 5 ] || fail "the rise window was not shortened in every rule"
diff <(grep -c 'expr:' "$ROOT/alerts/memlock-exporter.rules.yml") <(grep -c 'expr:' "$E2E_TMP/rules.yml") >/dev/null ||
    fail "rule copy lost expressions"
PROM_PORT=$(free_port)
cat > "$E2E_TMP/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: ["$E2E_TMP/rules.yml"]
alerting:
  alertmanagers:
    - static_configs: [{targets: ["127.0.0.1:${AM_PORT}"]}]
scrape_configs:
  - job_name: memlock
    static_configs: [{targets: ["127.0.0.1:${EXPORTER_PORT}"]}]
YML
prometheus --config.file="$E2E_TMP/prometheus.yml" --storage.tsdb.path="$E2E_TMP/prom" \
    --web.listen-address="127.0.0.1:${PROM_PORT}" --log.level=warn > "$E2E_TMP/prometheus.log" 2>&1 &
E2E_PIDS+=($!)
wait_http "http://127.0.0.1:${PROM_PORT}/-/ready" 30 ||
    { cat "$E2E_TMP/prometheus.log"; fail "prometheus did not start"; }
log "prometheus 127.0.0.1:$PROM_PORT -> alertmanager 127.0.0.1:$AM_PORT -> webhook 127.0.0.1:$WEBHOOK_PORT;" \
    "rules with for: $FOR, rise window $RISE"
# Wait for the first successful scrape so the drill's whole ramp is recorded.
for _ in $(seq 100); do
    curl -fsS "http://127.0.0.1:${PROM_PORT}/api/v1/query?query=up%7Bjob%3D%22memlock%22%7D" | grep -q '"1"\]' && break
    sleep 0.2
done

DRILL=$(public_binary)
leads=()
rc=0
for run in $(seq "$RUNS"); do
    since=$(date +%s.%N)
    # 1 MiB every 4 s against an 8 MiB soft limit: about 30 s to the refusal.
    python3 - "$E2E_TMP/drill$run.out" prlimit --memlock=8388608:8388608 \
        setpriv --reuid=64437 --regid=64437 --clear-groups \
        "$DRILL" drill --mode pin --step-mib 1 --interval-ms 4000 --max-mib 64 --hold-seconds 5 <<'PY' ||
import subprocess, sys, time
proc = subprocess.Popen(sys.argv[2:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
# prlimit and setpriv exec the drill: this pid is the drill's.
with open(sys.argv[1] + ".pid", "w") as out:
    out.write(str(proc.pid))
with open(sys.argv[1], "w") as out:
    for line in proc.stdout:
        out.write("%.3f %s" % (time.time(), line))
        out.flush()
sys.exit(proc.wait())
PY
        { cat "$E2E_TMP/drill$run.out"; fail "drill failed"; }
    out=$(python3 - "$E2E_TMP/drill$run.out" "$WEBHOOK_OUT" "$since" <<'PY'
import json, re, sys
drill_out, webhook, since = sys.argv[1], sys.argv[2], float(sys.argv[3])
drill_pid = open(drill_out + ".pid").read().strip()
refused = next((float(l.split(" ", 1)[0]) for l in open(drill_out) if re.search(r"ENOMEM|EAGAIN|EPERM", l)), None)
if refused is None:
    sys.exit("the drill was never refused:\n" + open(drill_out).read())
first, counters = {}, {}
for line in open(webhook):
    note = json.loads(line)
    if note["received"] < since:
        continue
    for alert in note["payload"].get("alerts", []):
        name = alert["labels"].get("alertname", "")
        # Only the drill's own alerts: other processes on a shared machine may page too.
        if alert["status"] == "firing" and alert["labels"].get("pid") == drill_pid:
            first.setdefault(name, note["received"])
            counters.setdefault(name, set()).add(alert["labels"].get("counter"))
if not first:
    sys.exit("no alert about the drill reached the webhook")
for name, at in sorted(first.items(), key=lambda kv: kv[1]):
    print(f"{name}: {refused - at:+.1f}s before the first refusal")
if any(n.endswith("Fast") or n.endswith("Imminent") for n in first):
    sys.exit("a fast-path alert arrived: the fast path should be off")
page = "MemlockProcessLimitExhaustionPredicted"
if page not in first:
    sys.exit(f"{page} (critical) never reached the webhook")
# The drill pins (io_uring, VmPin) and locks nothing: the page is on the pinned counter only.
if counters[page] != {"pinned"}:
    sys.exit(f"{page} came for counter(s) {sorted(map(str, counters[page]))}, expected only pinned (VmPin)")
print(f"lead {refused - first[page]:.1f}")
sys.exit(0 if refused - first[page] > 0 else f"{page} came after the refusal")
PY
) || rc=1
    echo "$out"
    leads+=("$(echo "$out" | awk '/^lead /{print $2}')")
done
printf '%s\n' "${leads[@]}" | sort -n |
    awk '{a[NR]=$1} END {if (NR) printf "prometheus path lead time (critical page): median %.1fs over %d run(s)\n",
        a[int((NR+1)/2)], NR}'
[ $rc = 0 ] && echo "prometheus_alert: ok" || echo "prometheus_alert: FAILED"
exit $rc
