#!/bin/bash
# Several scenarios in one VM, one after the other (scripts/e2e/vm.sh: a boot and its CPU
# saved per scenario). ARGS: the scenarios' names; each is /vm/bin/scenarios/NAME.sh (run.sh
# --copy scripts/e2e/vm/scenarios:scenarios) and leaves its files, scenario.log and rc in
# /vm/out/NAME. The VM's limit (run.sh --timeout) bounds each too.
#
# Each starts as a fresh VM would have it: what the one before left is taken away first. Its
# processes (every cgroup but the root's is killed with cgroup.kill and removed: a scenario's
# own and the ones it made), its RDMA links, network devices, namespaces and policy rules, and
# /tmp (start_webhook, for one, waits for /tmp/webhook.port to appear).
set -uo pipefail
CG=/sys/fs/cgroup
limit=$(cat /vm/timeout 2>/dev/null || echo 240)

# remove_cgroups DIR: the cgroups under DIR, deepest first, after killing what is in them.
remove_cgroups() {
    local child
    for child in "$1"/*/; do
        [ -d "$child" ] || continue
        echo 1 > "$child/cgroup.kill" 2>/dev/null
        remove_cgroups "${child%/}"
        # A killed process leaves its cgroup when it has exited: wait for that (10 s at most).
        for _ in $(seq 50); do rmdir "${child%/}" 2>/dev/null && break; sleep 0.2; done
        [ -d "${child%/}" ] && echo "sequence: cannot remove ${child%/}: $(cat "${child%/}/cgroup.procs")"
    done
}

reset() {
    local dev ns
    remove_cgroups "$CG"
    for dev in /sys/class/infiniband/*; do
        [ -e "$dev" ] && rdma link delete "$(basename "$dev")" 2>/dev/null
    done
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do ip netns delete "$ns"; done
    for dev in /sys/class/net/*; do
        [ "$(basename "$dev")" = lo ] || ip link delete "$(basename "$dev")" 2>/dev/null
    done
    ip rule flush
    ip rule add pref 0 lookup local
    ip rule add pref 32766 lookup main
    ip rule add pref 32767 lookup default
    rdma system set netns shared 2>/dev/null
    rm -rf /tmp/* /tmp/.[!.]* 2>/dev/null
}

rc=0
for name in "$@"; do
    out=/vm/out/$name
    mkdir -p "$out" "$CG/memlock-vm-$name"
    began=$EPOCHREALTIME
    (
        echo "$BASHPID" > "$CG/memlock-vm-$name/cgroup.procs"
        cd /tmp && VM_OUT=$out exec timeout -s KILL "$limit" bash "/vm/bin/scenarios/$name.sh"
    ) > "$out/scenario.log" 2>&1
    status=$?
    echo "$status" > "$out/rc"
    [ "$status" = 137 ] && echo "FAIL: $name was killed after ${limit}s" >> "$out/scenario.log"
    [ "$status" = 0 ] || rc=1
    dmesg > "$out/dmesg.txt"
    reset
    awk -v a="$began" -v b="$EPOCHREALTIME" -v n="$name" -v s="$status" \
        'BEGIN {printf "sequence: %s exit %s in %.1fs\n", n, s, b - a}' | tee -a /vm/out/sequence.txt
done
exit $rc
