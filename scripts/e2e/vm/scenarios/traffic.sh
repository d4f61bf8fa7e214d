#!/bin/bash
# Traffic and counters (issue 21 scenario 2): ibv_rc_pingpong (200 round trips of 4 KiB) from
# rxe1 on veth1 to rxe0 on veth0, across the veth pair. Afterwards the counters are still:
# sysfs, the exporter and node_exporter's infiniband collector are read for scripts/e2e/vm.sh
# to compare.
#
# Not in two network namespaces: rxe on 6.1 works in the initial one only. It routes every
# packet it sends in init_net (drivers/infiniband/sw/rxe/rxe_net.c rxe_find_route4:
# ip_route_output_key(&init_net, ...) with flowi4_oif = the netdev's ifindex; a netdev moved to
# another namespace has no route there, prepare4 returns -EHOSTUNREACH and rxe_requester
# completes the send with IB_WC_LOC_QP_OP_ERR, "local QP operation error"), and it receives
# RoCE v2 on one UDP socket in init_net (rxe_net_ipv4_init), so a netdev in another namespace
# never hands it a packet. Moving the RDMA device instead (`rdma system set netns exclusive`,
# `rdma dev set rxe1 netns ns1`) is refused: ib_device_set_netns_put (core/device.c) wants
# ops.disassociate_ucontext, which rxe lacks. The scenario records that refusal.
#
# Both ends are in init_net, then, and policy routing makes the traffic cross the wire: rxe
# looks its route up with the netdev as the output interface, so a rule per output interface,
# ahead of the local table, sends 10.21.0.2 -> 10.21.0.1 out of veth1 (not through lo, where no
# rxe would take it: rxe_udp_encap_recv finds the device by skb->dev). The peer's address is
# local, so the receiving side accepts a local source (accept_local, no rp_filter).
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=../guest/lib.sh
source /usr/lib/memlock-vm/lib.sh

ip link add veth0 type veth peer name veth1 || vm_fail "ip link add veth0 type veth"
ip addr add 10.21.0.1/24 dev veth0
ip addr add 10.21.0.2/24 dev veth1
for conf in all veth0 veth1; do
    echo 1 > "/proc/sys/net/ipv4/conf/$conf/accept_local"
    echo 0 > "/proc/sys/net/ipv4/conf/$conf/rp_filter"
done
ip link set veth0 up
ip link set veth1 up
ip rule add pref 100 oif veth0 lookup 100
ip rule add pref 101 oif veth1 lookup 101
ip route add 10.21.0.2 dev veth0 src 10.21.0.1 table 100
ip route add 10.21.0.1 dev veth1 src 10.21.0.2 table 101
ip rule add pref 200 lookup local
ip rule del pref 0
# Each side's neighbour is the other end of the pair (no ARP between two local addresses).
ip neigh replace 10.21.0.2 lladdr "$(cat /sys/class/net/veth1/address)" dev veth0 nud permanent
ip neigh replace 10.21.0.1 lladdr "$(cat /sys/class/net/veth0/address)" dev veth1 nud permanent
ip rule show > "$VM_OUT/ip-rules.txt"
rdma link add rxe0 type rxe netdev veth0 || vm_fail "rdma link add rxe0"
rdma link add rxe1 type rxe netdev veth1 || vm_fail "rdma link add rxe1"
for dev in rxe0 rxe1; do
    wait_for 30 "$dev's port ACTIVE" grep -q ACTIVE "/sys/class/infiniband/$dev/ports/1/state"
done

# The namespace shape, for the record (see the top): exclusive mode (before any namespace
# exists: rdma_compatdev_set answers EBUSY once one does), then the move, refused.
{
    rdma system set netns exclusive && echo "rdma system set netns exclusive: ok"
    ip netns add ns1
    rdma dev set rxe1 netns ns1 && echo "rdma dev set rxe1 netns ns1: ok"
    ip netns delete ns1
    rdma system set netns shared
    rdma system show
} > "$VM_OUT/netns-move.txt" 2>&1
cat "$VM_OUT/netns-move.txt"

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
for dev in rxe0 rxe1; do
    wait_for 30 "$dev's IPv4 GID" gid_index "$dev"
done
ls /sys/class/infiniband/rxe0/ports/1/ > "$VM_OUT/port-files.txt"
ls /sys/class/infiniband/rxe0/ports/1/hw_counters/ > "$VM_OUT/hw-counters.txt" 2>&1

start_exporter --log.level=info
prometheus-node-exporter --version > "$VM_OUT/node_exporter.version" 2>&1
prometheus-node-exporter --web.listen-address=127.0.0.1:9100 --collector.disable-defaults --collector.infiniband \
    --log.level=debug \
    > "$VM_OUT/node_exporter.log" 2>&1 &
VM_PIDS+=($!)
wait_for 120 "node_exporter ready" curl -fsS -o /dev/null http://127.0.0.1:9100/metrics

ibv_rc_pingpong -d rxe0 -g "$(gid_index rxe0)" -n 200 -s 4096 > "$VM_OUT/pingpong-server.txt" 2>&1 &
server=$!
sleep_until_listening() { netstat -ltn 2>/dev/null | grep -q ':18515 '; }
wait_for 60 "the pingpong server" sleep_until_listening
ibv_rc_pingpong -d rxe1 -g "$(gid_index rxe1)" -n 200 -s 4096 127.0.0.1 \
    > "$VM_OUT/pingpong-client.txt" 2>&1 || { cat "$VM_OUT"/pingpong-*.txt; vm_fail "ibv_rc_pingpong failed"; }
wait "$server" || { cat "$VM_OUT"/pingpong-*.txt; vm_fail "the pingpong server failed"; }
cat "$VM_OUT"/pingpong-*.txt
ip -s link show veth1 > "$VM_OUT/veth1-stats.txt"

# sysfs_counters: every counter file of both devices' port 1, "PATH VALUE" a line.
sysfs_counters() {
    local dev dir f
    for dev in rxe0 rxe1; do
        for dir in /sys/class/infiniband/$dev/ports/1/hw_counters /sys/class/infiniband/$dev/ports/1/counters; do
            [ -d "$dir" ] || continue
            for f in "$dir"/*; do echo "$f $(cat "$f")"; done
        done
    done
}
# The counters are still now; the exporter's next sample must have them (node_exporter reads
# sysfs when scraped).
# Every counter, not one: a sample may hold the final sent_pkts with a rcvd_pkts of before.
sysfs_counters > "$VM_OUT/sysfs-before.txt"
# exported_equal FILE: true when one scrape has every counter of FILE (sysfs_counters) at its
# value (lifespan, no counter, left out by the exporter).
exported_equal() {
    curl -fsS "$EXPORTER_URL/metrics" | awk 'NR == FNR {
            n = split($1, p, "/"); if (p[n] == "lifespan") next
            kind = p[n - 1] == "hw_counters" ? "hw" : "port"
            want["memlock_rdma_" kind "_stat_total{device=\"" p[5] "\",port=\"1\",counter=\"" p[n] "\"} " $2] = 1
            next
        }
        $0 in want {delete want[$0]}
        END {for (w in want) exit 1}' "$1" -
}
if ! (wait_for 60 "the exporter's sample of every counter" exported_equal "$VM_OUT/sysfs-before.txt"); then
    scrape "$VM_OUT/exporter-metrics.txt"
    vm_fail "the exporter's counters (exporter-metrics.txt) are not sysfs's (sysfs-before.txt)"
fi
# Both scrapes in the same second, between two reads of sysfs that must be equal: one curl
# starts both transfers at once (--parallel-immediate) and writes each one's times, in seconds
# from that common start, to scrapes-times.txt: each server answered between its request sent
# (pretransfer) and its first byte (starttransfer), and scripts/e2e/vm.sh asserts that those
# two spans lie within 1 s. The curl process's own start (seconds under TCG on a loaded host)
# is outside that window, but inside scrapes-began .. scrapes-ended.
now > "$VM_OUT/scrapes-began"
curl -fsS --parallel --parallel-immediate \
    -w '%{url} pretransfer %{time_pretransfer} starttransfer %{time_starttransfer} total %{time_total}\n' \
    "$EXPORTER_URL/metrics" -o "$VM_OUT/exporter-metrics.txt" \
    http://127.0.0.1:9100/metrics -o "$VM_OUT/node-exporter-metrics.txt" > "$VM_OUT/scrapes-times.txt" ||
    vm_fail "the scrapes of the exporter and node_exporter failed: $(cat "$VM_OUT/scrapes-times.txt")"
now > "$VM_OUT/scrapes-ended"
sysfs_counters > "$VM_OUT/sysfs-after.txt"
