#!/usr/bin/env bash
# Two nodes of one Slurm job, end to end: two exporters on loopback read two fixture trees built
# from tests/fixtures (scripts/e2e/cluster_check.py build) that share Slurm job 1870, under one
# scrape job of a real Prometheus with the shipped rules, sending to a real Alertmanager with the
# inhibit_rules block of alerts/README.md (checked with amtool check-config first). Checks that
# the memlock_job:* rules give one series per job with node count 2 and the sums and extremes of
# both nodes, that the Cluster dashboard's panels show it, and that the job's alert stands for
# its per-process alerts: those are inhibited and never notified, while a pod's and a single
# node's alerts are.
#
# The rules run from a copy with every `for` at 0s, so alerts fire at the first evaluation;
# their conditions are the shipped ones. Builds nothing: uses target/debug/memlock-exporter, or
# $CARGO_TARGET_DIR/debug/..., or MEMLOCK_EXPORTER_BIN. Needs prometheus, prometheus-alertmanager
# (or alertmanager), amtool, curl, python3 with PyYAML. Everything binds 127.0.0.1 and is stopped
# on exit.
set -euo pipefail

source "$(dirname "$0")/lib.bash"   # ROOT, BIN, log, fail, free_port, wait_http, start_webhook, cleanup on exit
PROMETHEUS=${PROMETHEUS_BIN:-prometheus}
WORK=$E2E_TMP
SCRAPE_JOB=memlock

[ -x "$BIN" ] || fail "$BIN is not built (cargo build, or set MEMLOCK_EXPORTER_BIN)"
command -v "$PROMETHEUS" >/dev/null || fail "prometheus is not installed (apt-get install prometheus)"
AM=$(alertmanager_bin) || fail "alertmanager is not installed (apt-get install prometheus-alertmanager)"
command -v amtool >/dev/null || fail "amtool is not installed (apt-get install prometheus-alertmanager)"
started=$SECONDS

# Two nodes, and the Alertmanager configuration with the README's inhibit rules.
start_webhook
python3 "$ROOT/scripts/e2e/cluster_check.py" build "$WORK/node-a" "$WORK/node-b" \
    | sed "s|WEBHOOK_URL|http://127.0.0.1:$WEBHOOK_PORT/|" > "$WORK/alertmanager.yml"
amtool check-config "$WORK/alertmanager.yml" || fail "amtool check-config rejects the inhibit_rules of alerts/README.md"

AM_PORT=$(free_port)
"$AM" --config.file="$WORK/alertmanager.yml" --storage.path="$WORK/am-data" \
    --web.listen-address="127.0.0.1:$AM_PORT" --cluster.listen-address="" --log.level=warn \
    > "$WORK/alertmanager.log" 2>&1 &
E2E_PIDS+=($!)
wait_http "http://127.0.0.1:$AM_PORT/-/ready" 30 ||
    { cat "$WORK/alertmanager.log"; fail "alertmanager did not become ready"; }

targets=()
for node in a b; do
    port=$(free_port)
    # The exporter reads every MEMLOCK_EXPORTER_* variable as configuration: not this one.
    env -u MEMLOCK_EXPORTER_BIN "$BIN" --web.listen-address="127.0.0.1:$port" --log.format=json \
        --path.procfs="$WORK/node-$node/proc" --path.sysfs="$WORK/node-$node/sys" > "$WORK/exporter-$node.log" 2>&1 &
    E2E_PIDS+=($!)
    wait_http "http://127.0.0.1:$port/-/ready" 30 ||
        { cat "$WORK/exporter-$node.log"; fail "exporter of node $node did not become ready"; }
    targets+=("'127.0.0.1:$port'")
done
log "exporters: ${targets[*]}; alertmanager 127.0.0.1:$AM_PORT; webhook 127.0.0.1:$WEBHOOK_PORT"

sed -E 's/^( *for:) .*/\1 0s/' "$ROOT/alerts/memlock-exporter.rules.yml" > "$WORK/rules.yml"
grep -qE '^ *for: 0s$' "$WORK/rules.yml" || fail "no for: in the rules copy"
PROM_PORT=$(free_port)
cat > "$WORK/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - $WORK/rules.yml
alerting:
  alertmanagers:
    - static_configs:
        - targets: ['127.0.0.1:$AM_PORT']
scrape_configs:
  - job_name: $SCRAPE_JOB
    static_configs:
      - targets: [$(IFS=,; echo "${targets[*]}")]
YML
"$PROMETHEUS" --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/data" \
    --web.listen-address="127.0.0.1:$PROM_PORT" --log.level=warn > "$WORK/prometheus.log" 2>&1 &
E2E_PIDS+=($!)
wait_http "http://127.0.0.1:$PROM_PORT/-/ready" 30 ||
    { cat "$WORK/prometheus.log"; fail "prometheus did not become ready"; }

rc=0
python3 "$ROOT/scripts/e2e/cluster_check.py" check --prometheus "http://127.0.0.1:$PROM_PORT" \
    --alertmanager "http://127.0.0.1:$AM_PORT" --webhook-out "$WEBHOOK_OUT" --job "$SCRAPE_JOB" || rc=$?
for service in prometheus alertmanager; do
    if grep -qiE 'level=(error|warn)' "$WORK/$service.log"; then
        echo "$service log:"
        grep -iE 'level=(error|warn)' "$WORK/$service.log" | head -20 || true  # head may cut grep off (SIGPIPE)
    fi
done
log "cluster end to end: $([ $rc = 0 ] && echo passed || echo FAILED) in $((SECONDS - started))s"
exit $rc
