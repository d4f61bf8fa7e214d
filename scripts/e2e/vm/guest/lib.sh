# shellcheck shell=bash
# Helpers for scenario scripts inside the VM (bash; source /usr/lib/memlock-vm/lib.sh). The
# guest has no network but lo and what a scenario creates, no Python; the exporter is
# /vm/bin/memlock-exporter, files put in /vm/out are left on the host (run.sh --out).

VM_OUT=${VM_OUT:-/vm/out}
EXPORTER=/vm/bin/memlock-exporter
VM_PIDS=()

vm_log() { echo "[guest $(date +%T)] $*"; }
vm_fail() {
    echo "FAIL: $*"
    exit 1
}
vm_cleanup() {
    local pid
    for pid in "${VM_PIDS[@]}"; do kill "$pid" 2>/dev/null; done
}
trap vm_cleanup EXIT

# now: Unix time in microseconds (busybox date has no %N; bash 5 has EPOCHREALTIME).
now() { echo "$EPOCHREALTIME"; }

# wait_for SECONDS DESCRIPTION COMMAND...: until COMMAND succeeds (every 0.2 s), else fails the
# scenario naming DESCRIPTION. The deadline (wall time, not tries: one curl takes most of a
# second under TCG) is for hangs only: TCG is slow and the host shared.
# Waits of a second or more are logged with their length: where a scenario's time goes.
wait_for() {
    local deadline=$((SECONDS + $1)) what=$2 began=$EPOCHREALTIME
    shift 2
    while ! "$@" >/dev/null 2>&1; do
        [ $SECONDS -lt $deadline ] || vm_fail "timed out waiting for $what"
        sleep 0.2
    done
    awk -v a="$began" -v b="$EPOCHREALTIME" -v w="$what" \
        'BEGIN {if (b - a >= 1) printf "[waited %.1fs] %s\n", b - a, w}'
}

# setup_rxe NAME NETDEV: a soft-RoCE device NAME over a new dummy NETDEV, up, waited ACTIVE.
setup_rxe() {
    local name=$1 netdev=$2
    ip link add "$netdev" type dummy || vm_fail "ip link add $netdev type dummy"
    ip link set "$netdev" up
    rdma link add "$name" type rxe netdev "$netdev" || vm_fail "rdma link add $name type rxe netdev $netdev"
    wait_for 30 "$name port 1 ACTIVE" grep -q ACTIVE "/sys/class/infiniband/$name/ports/1/state"
}

# ready_or_gone PID URL: true when URL answers or PID has exited (wait_for's condition for a
# service that may die on start).
ready_or_gone() { ! kill -0 "$1" 2>/dev/null || curl -fsS -o /dev/null "$2"; }

# start_webhook: the webhook sink on 127.0.0.1; WEBHOOK_PORT, WEBHOOK_OUT (one JSON line per
# notification, as scripts/e2e/webhook_receiver.py writes them).
start_webhook() {
    WEBHOOK_OUT=$VM_OUT/webhook.jsonl
    : > "$WEBHOOK_OUT"
    webhook-sink "$WEBHOOK_OUT" /tmp/webhook.port &
    VM_PIDS+=($!)
    wait_for 30 "the webhook sink's port" test -s /tmp/webhook.port
    WEBHOOK_PORT=$(cat /tmp/webhook.port)
}

# start_alertmanager: Debian's Alertmanager on AM_PORT (default 9093), routing every alert to
# the webhook at once (scripts/e2e/lib.bash's configuration); AM_URL. Started, then waited for
# ready: start_alertmanager_async and wait_alertmanager, with the exporter's start between them
# (10 to 15 s each under TCG on a loaded host, spent side by side).
start_alertmanager() {
    start_alertmanager_async
    wait_alertmanager
}
start_alertmanager_async() {
    local port=${AM_PORT:-9093}
    mkdir -p /tmp/am
    cat > /tmp/am/alertmanager.yml <<YML
route:
  receiver: webhook
  group_by: ['alertname', 'instance', 'pid', 'cgroup']
  group_wait: 0s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: webhook
    webhook_configs:
      - url: http://127.0.0.1:${WEBHOOK_PORT}/
        send_resolved: true
YML
    prometheus-alertmanager --config.file=/tmp/am/alertmanager.yml --storage.path=/tmp/am/data \
        --web.listen-address="127.0.0.1:$port" --cluster.listen-address="" --log.level=warn \
        > "$VM_OUT/alertmanager.log" 2>&1 &
    AM_PID=$!
    VM_PIDS+=("$AM_PID")
    AM_URL=http://127.0.0.1:$port
}
wait_alertmanager() {
    wait_for 120 "alertmanager ready" ready_or_gone "$AM_PID" "$AM_URL/-/ready"
    curl -fsS -o /dev/null "$AM_URL/-/ready" || { cat "$VM_OUT/alertmanager.log"; vm_fail "alertmanager exited"; }
}

# start_exporter [ARGS...]: the exporter on 127.0.0.1:9567 with JSON logs in
# $VM_OUT/exporter.log; EXPORTER_URL, EXPORTER_PID.
start_exporter() {
    "$EXPORTER" --web.listen-address=127.0.0.1:9567 --log.format=json "$@" > "$VM_OUT/exporter.log" 2>&1 &
    EXPORTER_PID=$!
    VM_PIDS+=("$EXPORTER_PID")
    EXPORTER_URL=http://127.0.0.1:9567
    wait_for 120 "the exporter ready" ready_or_gone "$EXPORTER_PID" "$EXPORTER_URL/-/ready"
    kill -0 "$EXPORTER_PID" 2>/dev/null || { cat "$VM_OUT/exporter.log"; vm_fail "the exporter exited"; }
}

# scrape [FILE]: the exporter's /metrics to FILE (default stdout).
scrape() { curl -fsS "$EXPORTER_URL/metrics" ${1:+-o "$1"}; }

# metric_is NAME VALUE LABEL=\"V\"...: true when a series NAME of the exporter's /metrics has
# every given label text and the value VALUE (labels in any order).
metric_is() {
    local name=$1 value=$2
    shift 2
    curl -fsS "$EXPORTER_URL/metrics" | awk -v name="$name" -v value="$value" -v want="$*" '
        index($0, name "{") == 1 && $NF == value {
            n = split(want, parts, " ")
            for (i = 1; i <= n; i++) if (index($0, parts[i]) == 0) next
            found = 1
        }
        END { exit !found }'
}
