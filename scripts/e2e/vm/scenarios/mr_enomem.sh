#!/bin/bash
# Scenario 1 (issue 21), the seed's failure for real: uid 1000 under an 8 MiB RLIMIT_MEMLOCK
# registers 1 MiB buffers with ibv_reg_mr on soft-RoCE once a second until the kernel refuses
# with ENOMEM. The exporter runs at its defaults, pushing to a real Alertmanager. While the
# registrant holds its MRs, the scenario records /proc/PID/status, `rdma resource show mr` and
# a scrape for the host to compare (scripts/e2e/vm.sh checks them).
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=../guest/lib.sh
source /usr/lib/memlock-vm/lib.sh

setup_rxe rxe0 dummy0
start_webhook
start_alertmanager_async
start_exporter --alertmanager.url "$AM_URL"
wait_alertmanager
wait_for 120 "rxe0 in the exporter's metrics" \
    sh -c "curl -fsS $EXPORTER_URL/metrics | grep -q 'memlock_rdma_port_state{device=\"rxe0\"'"

now > "$VM_OUT/since"
prlimit --memlock=8388608:8388608 setpriv --reuid=1000 --regid=1000 --clear-groups \
    mr-ramp --device rxe0 --step-mib 1 --interval-ms 1000 --max-mib 64 --hold-seconds 120 \
    --release-file /tmp/release > "$VM_OUT/ramp.out" 2>&1 &
ramp=$!
wait_for 120 "the registrant's ENOMEM" sh -c "grep -q 'ENOMEM' $VM_OUT/ramp.out || ! kill -0 $ramp"
grep -q ENOMEM "$VM_OUT/ramp.out" || { cat "$VM_OUT/ramp.out"; vm_fail "the registrant ended without ENOMEM"; }
pid=$(awk '/ opened / {print $5; exit}' "$VM_OUT/ramp.out")
mrs=$(awk '/ registered / {n = $3} END {print n}' "$VM_OUT/ramp.out")
vm_log "pid $pid refused after $mrs MiB"
# The exporter's next sample after the last registration; the MRs are held meanwhile. The
# RDMA collector (MRs) and the process collector (VmPin) sample apart: wait for both figures,
# or the scrape may pair this MR count with the pinned bytes of the step before.
wait_for 60 "the exporter's sample of $mrs MRs of pid $pid" sh -c \
    "curl -fsS $EXPORTER_URL/metrics | grep -qE '^memlock_rdma_process_mrs\{[^}]*pid=\"$pid\"[^}]*\} $mrs\$'"
wait_for 60 "the exporter's sample of $mrs MiB pinned by pid $pid" metric_is memlock_process_pinned_bytes \
    $((mrs << 20)) "pid=\"$pid\""
wait_for 60 "the exporter's sample of $mrs MiB of MRs of pid $pid" metric_is memlock_rdma_process_mr_bytes \
    $((mrs << 20)) "pid=\"$pid\"" 'device="rxe0"'
grep -E '^(VmPin|VmLck)' "/proc/$pid/status" > "$VM_OUT/status.txt"
rdma -j resource show mr > "$VM_OUT/rdma_mr.json"
rdma resource show mr > "$VM_OUT/rdma_mr.txt"
scrape "$VM_OUT/metrics.txt"
# The device's caps as rdma-core's own tool reads them (ibv_query_device), for the rdma_caps
# collector's figures.
ibv_devinfo -v -d rxe0 > "$VM_OUT/devinfo.txt" 2>&1
cat "$VM_OUT/status.txt" "$VM_OUT/rdma_mr.txt"
touch /tmp/release
wait "$ramp"
now > "$VM_OUT/released"
wait_for 120 "the page to resolve" grep -q '"status": *"resolved"' "$VM_OUT/webhook.jsonl"
