#!/bin/bash
# cgroup v2 live (issue 21 scenario 3), in the shapes the exporter names:
#   a Kubernetes pod (kubepods.slice/.../kubepods-burstable-pod<UID>.slice, memory.max 256 MiB,
#   rdma.max on rxe0) whose container scope holds 16 MiB of MRs (mr-ramp as uid 1000), and
#   a Slurm step (system.slice/slurmstepd.scope/job_1870/step_0/user/task_0, the job limited
#   to 64 MiB) where `drill --mode lock` ramps 4 MiB every 2 s until the memory cgroup
#   OOM-kills it, then holds 24 MiB mlocked.
# Scrapes and the cgroup files are left in /vm/out for scripts/e2e/vm.sh, which compares them.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=../guest/lib.sh
source /usr/lib/memlock-vm/lib.sh

CG=/sys/fs/cgroup
POD_UID=0d1e2f3a-4b5c-4d6e-8f70-8192a3b4c5d6
HEX=4f9c1d2e3b4a59687766554433221100ffeeddccbbaa99887766554433221100
POD=$CG/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod${POD_UID//-/_}.slice
CONTAINER=$POD/cri-containerd-$HEX.scope
JOB=$CG/system.slice/slurmstepd.scope/job_1870
TASK=$JOB/step_0/user/task_0

# enable DIR...: memory and rdma for the children of each directory (v2 delegates level by level).
enable() {
    local dir
    for dir in "$@"; do
        echo "+memory +rdma" > "$dir/cgroup.subtree_control" || vm_fail "cannot enable memory and rdma in $dir"
    done
}
# rdma.max names a device: rxe0 first.
setup_rxe rxe0 dummy0
mkdir -p "$CONTAINER" "$TASK" || vm_fail "cannot create the cgroups"
enable "$CG" "$CG/kubepods.slice" "$CG/kubepods.slice/kubepods-burstable.slice" "$POD" \
    "$CG/system.slice" "$CG/system.slice/slurmstepd.scope" "$JOB" "$JOB/step_0" "$JOB/step_0/user"
echo $((256 << 20)) > "$POD/memory.max"
echo "rxe0 hca_handle=2 hca_object=16" > "$POD/rdma.max" || vm_fail "cannot write $POD/rdma.max"
echo $((64 << 20)) > "$JOB/memory.max"
printf '%s\n' "${CONTAINER#"$CG"}" > "$VM_OUT/container.path"
printf '%s\n' "${POD#"$CG"}" > "$VM_OUT/pod.path"
printf '%s\n' "${TASK#"$CG"}" > "$VM_OUT/task.path"

start_webhook
start_alertmanager_async
start_exporter --alertmanager.url "$AM_URL"
wait_alertmanager

# in_cgroup DIR CMD...: CMD as a process of DIR.
in_cgroup() {
    local dir=$1
    shift
    sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$dir" "$@"
}

# 1. The pod's MR holder: 4 MRs of 4 MiB, held.
in_cgroup "$CONTAINER" prlimit --memlock=67108864:67108864 setpriv --reuid=1000 --regid=1000 --clear-groups \
    mr-ramp --device rxe0 --step-mib 4 --interval-ms 200 --max-mib 16 --hold-seconds 200 \
    --release-file /tmp/release-mr > "$VM_OUT/mr.out" 2>&1 &
holder=$!
VM_PIDS+=("$holder")
wait_for 120 "16 MiB registered in the pod" grep -q 'registered 16 MiB' "$VM_OUT/mr.out"
wait_for 60 "the pod container's 16 MiB pinned in the exporter" metric_is memlock_cgroup_pinned_bytes 16777216 \
    "cgroup=\"${CONTAINER#"$CG"}\"" "pod_uid=\"$POD_UID\""
# The cgroup collector reads rdma.current on its own interval, and the holder's last MR may be
# newer than that read (4 objects of 5 once): wait for the exported counts to equal the files.
for dir in "$CONTAINER" "$POD"; do
    for resource in hca_handle hca_object; do
        count=$(grep -o "rxe0 .*" "$dir/rdma.current" | grep -o "$resource=[0-9]*" | cut -d= -f2)
        [ -n "$count" ] || vm_fail "no rxe0 $resource in $dir/rdma.current"
        wait_for 60 "${dir#"$CG"} rdma.current $resource=$count in the exporter" metric_is memlock_cgroup_rdma \
            "$count" "cgroup=\"${dir#"$CG"}\"" 'device="rxe0"' "resource=\"$resource\"" 'kind="current"'
    done
done
scrape "$VM_OUT/pod-metrics.txt"
for f in rdma.current rdma.max memory.max memory.current memory.stat; do
    echo "== container $f"; cat "$CONTAINER/$f"
    echo "== pod $f"; cat "$POD/$f"
done > "$VM_OUT/pod-files.txt" 2>&1

# 2. The Slurm step: a lock ramp to the OOM kill, first, so that its page is the first of the
#    job (a fast ramp to the hold below pages too); lines stamped by the drill, the kill by us.
now > "$VM_OUT/since"
kills=$(awk '$1 == "oom_kill" {print $2}' "$TASK/memory.events")
in_cgroup "$TASK" "$EXPORTER" drill --mode lock --step-mib 4 --interval-ms 2000 --max-mib 256 --hold-seconds 3 \
    > "$VM_OUT/lock-oom.out" 2>&1
status=$?
ended=$(now)
kills_after=$(awk '$1 == "oom_kill" {print $2}' "$TASK/memory.events")
# check_lead.py's mark of an OOM kill (SIGKILL: status 137 here).
if [ "$status" = 137 ] && [ "$kills_after" -gt "$kills" ]; then
    echo "$ended EXIT -9 killed" >> "$VM_OUT/lock-oom.out"
else
    echo "$ended EXIT $status" >> "$VM_OUT/lock-oom.out"
    vm_fail "the lock ramp ended with status $status, oom_kill $kills -> $kills_after: not OOM-killed"
fi
wait_for 60 "the OOM kill in the exporter" metric_is memlock_cgroup_memory_events_total "$kills_after" \
    "cgroup=\"${TASK#"$CG"}\"" 'event="oom_kill"'
scrape "$VM_OUT/oom-metrics.txt"
cat "$TASK/memory.events" > "$VM_OUT/task-memory.events"
cat "$JOB/memory.events" > "$VM_OUT/job-memory.events"

# 3. The Slurm step after the kill: 24 MiB mlocked and held (root: CAP_IPC_LOCK, so only the
#    cgroup limits it).
in_cgroup "$TASK" "$EXPORTER" drill --mode lock --step-mib 8 --interval-ms 200 --max-mib 24 --hold-seconds 200 \
    > "$VM_OUT/lock-hold.out" 2>&1 &
held=$!
VM_PIDS+=("$held")
wait_for 120 "24 MiB locked in the step" grep -q 'event=hold' "$VM_OUT/lock-hold.out"
wait_for 60 "the step's 24 MiB locked in the exporter" metric_is memlock_cgroup_locked_bytes 25165824 \
    "cgroup=\"${TASK#"$CG"}\"" 'slurm_job="1870"'
# The cgroup collector reads memory.stat on its own interval: wait for both figures, the
# kernel's and the exported one, rather than take a sample one interval old (16 of 24 MiB once).
wait_for 60 "the step's 24 MiB unevictable in memory.stat" grep -qx 'unevictable 25165824' "$TASK/memory.stat"
wait_for 60 "the step's 24 MiB unevictable in the exporter" metric_is memlock_cgroup_memory_unevictable_bytes \
    25165824 "cgroup=\"${TASK#"$CG"}\""
# v2's memory.stat is hierarchical: the step's ancestors up to slurmstepd.scope hold the same
# 24 MiB. The topmost last: the collector reads them all in one pass, after one stats flush.
ancestors=("$JOB/step_0/user" "$JOB/step_0" "$JOB" "$CG/system.slice/slurmstepd.scope")
wait_for 60 "slurmstepd.scope's 24 MiB unevictable in memory.stat" grep -qx 'unevictable 25165824' \
    "${ancestors[-1]}/memory.stat"
wait_for 60 "slurmstepd.scope's 24 MiB unevictable in the exporter" \
    metric_is memlock_cgroup_memory_unevictable_bytes 25165824 "cgroup=\"${ancestors[-1]#"$CG"}\""
scrape "$VM_OUT/step-metrics.txt"
cat "$TASK/memory.stat" > "$VM_OUT/task-memory.stat"
for dir in "${ancestors[@]}"; do
    echo "${dir#"$CG"} $(awk '$1 == "unevictable" {print $2}' "$dir/memory.stat")"
done > "$VM_OUT/step-ancestors-unevictable.txt"
kill -TERM "$held"
wait "$held"

touch /tmp/release-mr
tail -3 "$VM_OUT/lock-oom.out"
