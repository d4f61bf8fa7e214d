#!/bin/bash
# Traffic and counters (issue 21 scenario 2): soft-RoCE rxe0 on a veth, ibv_rc_pingpong
# (200 round trips of 4 KiB) between two QPs of it. Afterwards the counters are still: sysfs, the exporter and
# node_exporter's infiniband collector are read together for scripts/e2e/vm.sh to compare.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=../guest/lib.sh
source /usr/lib/memlock-vm/lib.sh

# The issue's shape, rxe1 on veth1 inside a second network namespace, fails on 6.1: the
# client's first send completes with "local QP operation error" (tried: rxe0 on veth0 in the
# root namespace, rxe1 on veth1 in ns1). Both QPs are on rxe0 here; rxe loops the packets back
# through its own send and receive paths, so the port's counters move both ways.
ip link add veth0 type veth peer name veth1 || vm_fail "ip link add veth0 type veth"
ip addr add 10.21.0.1/24 dev veth0
ip link set veth0 up
ip link set veth1 up
rdma link add rxe0 type rxe netdev veth0 || vm_fail "rdma link add rxe0"
wait_for 30 "rxe0's port ACTIVE" grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state

# gid_index DEVICE: the index of the device's IPv4-mapped GID (RoCE v2 over the veth's address).
gid_index() {
    local gid
    for gid in /sys/class/infiniband/"$1"/ports/1/gids/*; do
        case $(cat "$gid" 2>/dev/null) in
            0000:0000:0000:0000:0000:ffff:*) basename "$gid"; return 0 ;;
        esac
    done
    return 1
}
wait_for 30 "rxe0's IPv4 GID" gid_index rxe0
ls /sys/class/infiniband/rxe0/ports/1/ > "$VM_OUT/port-files.txt"
ls /sys/class/infiniband/rxe0/ports/1/hw_counters/ > "$VM_OUT/hw-counters.txt" 2>&1

start_exporter --log.level=info
prometheus-node-exporter --web.listen-address=127.0.0.1:9100 --collector.disable-defaults --collector.infiniband \
    --log.level=debug \
    > "$VM_OUT/node_exporter.log" 2>&1 &
VM_PIDS+=($!)
wait_for 120 "node_exporter ready" curl -fsS -o /dev/null http://127.0.0.1:9100/metrics

ibv_rc_pingpong -d rxe0 -g "$(gid_index rxe0)" -n 200 -s 4096 > "$VM_OUT/pingpong-server.txt" 2>&1 &
server=$!
sleep_until_listening() { netstat -ltn 2>/dev/null | grep -q ':18515 '; }
wait_for 60 "the pingpong server" sleep_until_listening
ibv_rc_pingpong -d rxe0 -g "$(gid_index rxe0)" -n 200 -s 4096 127.0.0.1 \
    > "$VM_OUT/pingpong-client.txt" 2>&1 || { cat "$VM_OUT"/pingpong-*.txt; vm_fail "ibv_rc_pingpong failed"; }
wait "$server" || { cat "$VM_OUT"/pingpong-*.txt; vm_fail "the pingpong server failed"; }
cat "$VM_OUT"/pingpong-*.txt

# The counters are still now; the exporter's next sample must have them.
for dir in /sys/class/infiniband/rxe0/ports/1/hw_counters /sys/class/infiniband/rxe0/ports/1/counters; do
    [ -d "$dir" ] || continue
    for f in "$dir"/*; do echo "$f $(cat "$f")"; done
done > "$VM_OUT/sysfs-before.txt"
sent=$(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts)
wait_for 60 "the exporter's sample of sent_pkts $sent" metric_is memlock_rdma_hw_stat_total "$sent" \
    'device="rxe0"' 'counter="sent_pkts"'
scrape "$VM_OUT/exporter-metrics.txt" &
ours=$!
curl -fsS http://127.0.0.1:9100/metrics -o "$VM_OUT/node-exporter-metrics.txt"
wait "$ours"
for dir in /sys/class/infiniband/rxe0/ports/1/hw_counters /sys/class/infiniband/rxe0/ports/1/counters; do
    [ -d "$dir" ] || continue
    for f in "$dir"/*; do echo "$f $(cat "$f")"; done
done > "$VM_OUT/sysfs-after.txt"
