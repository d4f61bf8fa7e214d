#!/bin/bash
# `memlock-exporter drill` on a real RDMA device (issue 21 item 5): --mode rdma registers 1 MiB
# MRs with ibv_reg_mr on rxe0 once a second under an 8 MiB RLIMIT_MEMLOCK as uid 1001, and
# --mode pin (io_uring) ramps the same way beside it as uid 1002 (io_uring charges the user, so
# each drill has a uid of its own). The exporter, at its defaults, pushes to Alertmanager; the
# host checks that each ramp paged >= 2 s before its ENOMEM (scripts/e2e/vm.sh).
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

# drill MODE UID: a 1 MiB/s ramp to the 8 MiB limit, held 3 s after the refusal.
drill() {
    prlimit --memlock=8388608:8388608 setpriv --reuid="$2" --regid="$2" --clear-groups \
        "$EXPORTER" drill --mode "$1" --step-mib 1 --interval-ms 1000 --max-mib 64 --hold-seconds 3 \
        > "$VM_OUT/drill-$1.out" 2>&1
    echo "$?" > "$VM_OUT/drill-$1.rc"
}
now > "$VM_OUT/since"
drill rdma 1001 &
rdma=$!
drill pin 1002 &
pin=$!
# The rdma drill's MRs, seen by the kernel while it holds them.
wait_for 120 "the rdma drill's hold" sh -c "grep -q event=hold $VM_OUT/drill-rdma.out || ! kill -0 $rdma"
rdma resource show mr > "$VM_OUT/rdma_mr.txt"
wait "$rdma" "$pin"
cat "$VM_OUT"/drill-*.out "$VM_OUT/rdma_mr.txt"
