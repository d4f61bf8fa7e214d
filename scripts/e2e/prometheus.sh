#!/usr/bin/env bash
# End to end with a real Prometheus: the alert rules load and evaluate without errors, every
# dashboard query is accepted, the node panels return data, and a real unprivileged process
# that locks and pins memory under an 8 MiB memlock limit drives two alerts into pending.
#
# Two exporters are scraped every second: job "memlock" reads this machine's /proc and /sys,
# job "memlock-fixtures" reads tests/fixtures (RDMA devices, Kubernetes and Slurm processes that
# this machine does not have). Builds nothing: uses target/debug/memlock-exporter (scripts/test.sh
# builds it), or $CARGO_TARGET_DIR/debug/..., or MEMLOCK_EXPORTER_BIN. Needs prometheus, curl,
# python3; the holder process needs root (setpriv). Everything binds 127.0.0.1 and is stopped on
# exit.
set -euo pipefail

source "$(dirname "$0")/lib.bash"   # ROOT, BIN, log, fail, free_port, wait_http, cleanup on exit
PROMETHEUS=${PROMETHEUS_BIN:-prometheus}
WORK=$E2E_TMP

[ -x "$BIN" ] || fail "$BIN is not built (cargo build, or set MEMLOCK_EXPORTER_BIN)"
command -v "$PROMETHEUS" >/dev/null || fail "prometheus is not installed (apt-get install prometheus)"
started=$SECONDS

# start_exporter NAME ARGS...: sets URL_<NAME>.
start_exporter() {
    local name=$1 port
    shift
    port=$(free_port)
    # The exporter reads every MEMLOCK_EXPORTER_* variable as configuration: not this one.
    env -u MEMLOCK_EXPORTER_BIN "$BIN" --web.listen-address="127.0.0.1:$port" --log.format=json "$@" \
        > "$WORK/exporter-$name.log" 2>&1 &
    E2E_PIDS+=($!)
    wait_http "http://127.0.0.1:$port/-/ready" 30 ||
        { cat "$WORK/exporter-$name.log"; fail "exporter $name did not become ready"; }
    printf -v "URL_$name" '%s' "http://127.0.0.1:$port"
}

# A real workload for the process alerts: unprivileged (no CAP_IPC_LOCK, the 8 MiB hard limit
# applies), 7.5 MiB mlock()ed and 2 MiB pinned through io_uring fixed buffers. It holds them
# until its stdin (a FIFO kept open here) closes. Debian's python (pyenv shims are not readable
# by other users). io_uring charges pinned pages per user, so the holder gets a uid of its own:
# as nobody it would share the 8 MiB with other tests' io_uring buffers.
HOLDER_UID=${HOLDER_UID:-61478}
HOLDER_PID=
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
    chmod 0755 "$WORK"
    mkfifo "$WORK/holder.stdin"
    exec 3<>"$WORK/holder.stdin"
    setpriv --reuid="$HOLDER_UID" --regid="$HOLDER_UID" --clear-groups --inh-caps=-all \
        /usr/bin/python3 "$ROOT/scripts/e2e/memlock_holder.py" $((7864320)) $((2 << 20)) \
        < "$WORK/holder.stdin" > "$WORK/holder.out" 2>&1 &
    HOLDER_PID=$!
    E2E_PIDS+=($HOLDER_PID)
    for _ in $(seq 50); do grep -q ready "$WORK/holder.out" 2>/dev/null && break; sleep 0.1; done
    grep -q ready "$WORK/holder.out" ||
        { cat "$WORK/holder.out"; fail "the holder process could not lock and pin its memory"; }
    log "holder process $HOLDER_PID: $(grep -E 'VmLck|VmPin' /proc/$HOLDER_PID/status | tr -s '\t\n ' ' ')"
else
    log "not root: skipping the holder process and its alert checks"
fi

# Processes are found by a full scan; scan every second so the holder shows up at once.
export MEMLOCK_EXPORTER_COLLECTOR__PROCESS__FULL_SCAN_INTERVAL=1s
start_exporter live
start_exporter fixtures --path.procfs="$ROOT/tests/fixtures/proc" --path.sysfs="$ROOT/tests/fixtures/sys"
log "exporters: live $URL_live, fixtures $URL_fixtures"

PROM_PORT=$(free_port)
cat > "$WORK/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - $ROOT/alerts/memlock-exporter.rules.yml
scrape_configs:
  - job_name: memlock
    static_configs:
      - targets: ['${URL_live#http://}']
  - job_name: memlock-fixtures
    static_configs:
      - targets: ['${URL_fixtures#http://}']
YML
"$PROMETHEUS" --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/data" \
    --web.listen-address="127.0.0.1:$PROM_PORT" --log.level=warn > "$WORK/prometheus.log" 2>&1 &
E2E_PIDS+=($!)
wait_http "http://127.0.0.1:$PROM_PORT/-/ready" 30 ||
    { cat "$WORK/prometheus.log"; fail "prometheus did not become ready"; }
log "prometheus $("$PROMETHEUS" --version 2>&1 | head -1 | cut -d' ' -f3) on 127.0.0.1:$PROM_PORT"

rc=0
python3 "$ROOT/scripts/e2e/prometheus_check.py" --prometheus "http://127.0.0.1:$PROM_PORT" \
    --target "memlock=$URL_live" --target "memlock-fixtures=$URL_fixtures" --node-job memlock \
    ${HOLDER_PID:+--holder-pid "$HOLDER_PID"} || rc=$?
if grep -qiE 'level=(error|warn)' "$WORK/prometheus.log"; then
    echo "prometheus log:"
    grep -iE 'level=(error|warn)' "$WORK/prometheus.log" | head -20 || true  # head may cut grep off (SIGPIPE)
fi
log "prometheus end to end: $([ $rc = 0 ] && echo passed || echo FAILED) in $((SECONDS - started))s"
exit $rc
