#!/bin/bash
# `memlock-exporter check` and `check --exec` on real RDMA devices (issue 21 scenario 4): rxe0
# over an up dummy0 (port ACTIVE) and rxe1 over dummy1, which is down (port DOWN). Reports are
# left in /vm/out for scripts/e2e/vm.sh to check:
#   check-user.json      uid 1000 under an 8 MiB RLIMIT_MEMLOCK, NCCL_IB_HCA=rxe0
#   check-hca-down.json  as root judging a root job (--as-root), NCCL_IB_HCA=rxe1 (the DOWN
#                        port selected)
#   check-hca-down-ib.json  the same with NCCL_NET=IB (no socket fallback)
#   check-all.json       as root judging a root job, no NCCL_IB_HCA (every port)
#   exec-user.*          check --exec as uid 1000: refused, the command must not run
#   exec-root.*          check --exec as root with NCCL_IB_HCA=rxe0: the command runs
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=../guest/lib.sh
source /usr/lib/memlock-vm/lib.sh

setup_rxe rxe0 dummy0
ip link add dummy1 type dummy || vm_fail "ip link add dummy1"
rdma link add rxe1 type rxe netdev dummy1 || vm_fail "rdma link add rxe1"
wait_for 30 "rxe1's port" test -e /sys/class/infiniband/rxe1/ports/1/state
cat /sys/class/infiniband/*/ports/1/state | tee "$VM_OUT/port_states.txt"

as_user() { prlimit --memlock=8388608:8388608 setpriv --reuid=1000 --regid=1000 --clear-groups "$@"; }
run() {
    local name=$1
    shift
    "$@" > "$VM_OUT/$name.json" 2> "$VM_OUT/$name.err"
    echo "$?" > "$VM_OUT/$name.rc"
}
run check-user as_user env NCCL_IB_HCA=rxe0 NCCL_DEBUG=WARN "$EXPORTER" check --nodes 2 --ranks-per-node 1 --json
# Root's own CAP_IPC_LOCK counts only for a job that really runs as root (--as-root): these
# runs are about the ports, so the memlock limit must not be what fails them.
run check-hca-down env NCCL_IB_HCA=rxe1 NCCL_DEBUG=WARN "$EXPORTER" check --as-root --nodes 2 --ranks-per-node 1 --json
run check-hca-down-ib env NCCL_IB_HCA=rxe1 NCCL_NET=IB NCCL_DEBUG=WARN "$EXPORTER" check --as-root --nodes 2 \
    --ranks-per-node 1 --json
run check-all env NCCL_DEBUG=WARN "$EXPORTER" check --as-root --nodes 2 --ranks-per-node 1 --json
# Without --as-root, root is judged as a normal user's rank would be: its CAP_IPC_LOCK left out.
run check-root-as-user env NCCL_IB_HCA=rxe0 NCCL_DEBUG=WARN "$EXPORTER" check --nodes 2 --ranks-per-node 1 --json
run exec-user as_user env NCCL_IB_HCA=rxe0 NCCL_DEBUG=WARN "$EXPORTER" check --nodes 2 --ranks-per-node 1 --exec -- \
    sh -c 'echo ran > /tmp/exec-user-ran; exit 7'
[ -e /tmp/exec-user-ran ] && echo yes > "$VM_OUT/exec-user.ran"
run exec-root env NCCL_IB_HCA=rxe0 NCCL_DEBUG=WARN "$EXPORTER" check --nodes 2 --ranks-per-node 1 --exec -- \
    sh -c 'echo ran > /tmp/exec-root-ran; exit 7'
[ -e /tmp/exec-root-ran ] && echo yes > "$VM_OUT/exec-root.ran"
head -50 "$VM_OUT"/*.err
