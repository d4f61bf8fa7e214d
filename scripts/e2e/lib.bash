# Shared helpers for the end-to-end scripts (sourced, not run). Every service binds 127.0.0.1
# on a free port, runs from a temp dir, and is killed by the EXIT trap.

E2E_TMP=$(mktemp -d /tmp/memlock-e2e.XXXXXX)
E2E_PIDS=()
ROOT=${ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
BIN=${MEMLOCK_EXPORTER_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/memlock-exporter}

E2E_EXIT_HOOKS=()

# on_exit FUNCTION: runs FUNCTION at exit, before the services are stopped (scripts register
# their own cleanup here instead of replacing the trap, so the exit status survives).
on_exit() { E2E_EXIT_HOOKS+=("$1"); }

# Keeps the script's own exit status: under `set -e` a `wait` on a process it just killed
# (status 143) would otherwise end the trap, and the script, with that status; hooks run with
# errexit off, so a failing one cannot end it either. scripts/e2e/lib_exit_status.sh checks
# these cases.
e2e_cleanup() {
    local rc=$?
    set +e
    for hook in "${E2E_EXIT_HOOKS[@]}"; do
        "$hook"
    done
    for pid in "${E2E_PIDS[@]}"; do
        kill "$pid" 2>/dev/null
    done
    # An async subshell that gets the SIGTERM between its fork and the exec of its command
    # survives it, runs the command to its end and then this trap, which it inherited (`sleep 60 &`
    # held lib_exit_status.sh 60 s, 1 run in 30 here): whatever still runs after 1 s gets SIGTERM
    # again, and SIGKILL after 10 s.
    local pid deadline=$((SECONDS + 10)) again=$((SECONDS + 1))
    for pid in "${E2E_PIDS[@]}"; do
        while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -le "$again" ]; do sleep 0.05; done
    done
    for pid in "${E2E_PIDS[@]}"; do
        kill "$pid" 2>/dev/null
    done
    for pid in "${E2E_PIDS[@]}"; do
        while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.05; done
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    [ -n "${E2E_KEEP:-}" ] || rm -rf "$E2E_TMP"
    exit "$rc"
}
trap e2e_cleanup EXIT

log() { echo "[$(date +%T)] $*"; }
fail() { echo "FAIL: $*"; exit 1; }

# A free TCP port on 127.0.0.1 (the kernel picks it; a tiny race is acceptable in tests).
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# wait_http URL [seconds]: until the URL answers 200.
wait_http() {
    local url=$1 limit=${2:-30} i=0
    while [ $i -lt $((limit * 10)) ]; do
        curl -fsS -o /dev/null "$url" 2>/dev/null && return 0
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}

# A binary any user can run (the drill runs as nobody; the build tree may not be reachable).
public_binary() {
    local copy=$E2E_TMP/bin/memlock-exporter
    if [ ! -x "$copy" ]; then
        mkdir -p "$E2E_TMP/bin"
        cp "$BIN" "$copy"
        chmod 0755 "$E2E_TMP" "$E2E_TMP/bin" "$copy"
    fi
    echo "$copy"
}

start_webhook() {
    local out=$E2E_TMP/webhook.jsonl
    : > "$out"
    python3 "$ROOT/scripts/e2e/webhook_receiver.py" "$out" "$E2E_TMP/webhook.port" &
    E2E_PIDS+=($!)
    for _ in $(seq 50); do [ -s "$E2E_TMP/webhook.port" ] && break; sleep 0.1; done
    WEBHOOK_PORT=$(cat "$E2E_TMP/webhook.port")
    WEBHOOK_OUT=$out
}

alertmanager_bin() {
    command -v prometheus-alertmanager || command -v alertmanager
}

# start_alertmanager: forwards every alert to the webhook at once (group_wait 0s); on AM_PORT
# when it is already set, else on a free port.
start_alertmanager() {
    AM_PORT=${AM_PORT:-$(free_port)}
    mkdir -p "$E2E_TMP/am"
    cat > "$E2E_TMP/am/alertmanager.yml" <<YML
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
    "$(alertmanager_bin)" --config.file="$E2E_TMP/am/alertmanager.yml" --storage.path="$E2E_TMP/am/data" \
        --web.listen-address="127.0.0.1:${AM_PORT}" --cluster.listen-address="" \
        --log.level=warn > "$E2E_TMP/am/log" 2>&1 &
    E2E_PIDS+=($!)
    wait_http "http://127.0.0.1:${AM_PORT}/-/ready" 30 || { cat "$E2E_TMP/am/log"; fail "alertmanager did not start"; }
}

# start_exporter ARGS...: runs the exporter on a free port; EXPORTER_URL is its base URL.
start_exporter() {
    EXPORTER_PORT=$(free_port)
    # The exporter reads every MEMLOCK_EXPORTER_* variable as configuration: not the override.
    env -u MEMLOCK_EXPORTER_BIN "$BIN" --web.listen-address="127.0.0.1:${EXPORTER_PORT}" --log.format=json "$@" \
        > "$E2E_TMP/exporter.log" 2>&1 &
    EXPORTER_PID=$!
    E2E_PIDS+=($EXPORTER_PID)
    EXPORTER_URL=http://127.0.0.1:${EXPORTER_PORT}
    wait_http "$EXPORTER_URL/-/ready" 30 || { cat "$E2E_TMP/exporter.log"; fail "exporter did not become ready"; }
}
