#!/bin/bash
# Scenario (issue 26): the failures collector on a kernel with kprobe events (Debian's 6.1) and
# soft-RoCE. Run by scripts/e2e/vm_failures.sh through scripts/e2e/vm/run.sh, with the helpers
# failures-reg-loop and failures-mlock-ramp copied in. In order:
#  1. probes an earlier run left (a group, instances, a synthetic event and the hist triggers
#     that use it, with the collector's prefix and a dead pid; and a group in today's format
#     whose instance no exporter holds locked) are removed at start; ib_uverbs (ib_umem_get's
#     module on 6.1) and rdma_rxe are loaded only after the exporter started, and ib_umem_get
#     is probed as ib_uverbs:ib_umem_get; the collector reports which functions it probes and
#     pairs in the kernel (hist triggers); the global trace buffer gets none of its events;
#  2. uid 1000 under an 8 MiB RLIMIT_MEMLOCK registers 1 MiB MRs until ibv_reg_mr fails with
#     ENOMEM: counted once, call ib_umem_get, errno ENOMEM, cause memlock, the process's pid,
#     comm and cgroup, 1 MiB asked for; its successful registrations are not counted; the fast
#     path pages MemlockRegistrationFailed (Alertmanager, webhook);
#  3. an mlock ramp past the same limit, by a process that exits right after the refusal:
#     counted as do_mlock, ENOMEM, cause memlock, with its pid;
#  4. cost: 1,000 registrations a second for COST_SECONDS, exporter without the collector, with
#     it (pairing in the kernel), with it pairing in user space (MEMLOCK_FAILURES_PAIRING),
#     in turn in this run: the CPU of the registering process (its system time holds the kprobes)
#     and of the exporter, each from getrusage and /proc/PID/stat; none counted; then the user
#     space pairing's fallback counts an mlock refusal with its size;
#  5. exit removes every probe and instance; a reload that restarts the sampler and keeps the
#     collector keeps its probes, its counted refusal and its page; a reload that disables the
#     collector removes them while the exporter keeps running;
#  6. root without any capability traces (what the systemd drop-in grants); uid 1000 gets
#     reason no_permission;
#  7. two exporters that are each pid 1 of a PID namespace trace side by side under names of
#     their own; one killed, a third exporter removes its probes and leaves the other's, which
#     goes on counting.
# Writes probed.txt, metrics-*.txt, cost.txt and summary.txt to /vm/out for the host to check.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=../guest/lib.sh
source /usr/lib/memlock-vm/lib.sh
# run.sh puts the copied helpers' extra libraries in /vm/lib, which uid 1000 cannot read; the
# base has libibverbs.
unset LD_LIBRARY_PATH
T=/sys/kernel/tracing
# The arguments: how many rounds and how many seconds each registers (scripts/e2e/vm_failures.sh
# passes FAILURES_COST_ROUNDS and FAILURES_COST_SECONDS). A round of the probes' own cost makes
# 2,000 mlock calls per second of it.
COST_ROUNDS=${1:-4}
COST_SECONDS=${2:-10}
COST_MLOCKS=$((2000 * COST_SECONDS))
RATE=${RATE:-1000}

metrics() { curl -fsS "$EXPORTER_URL/metrics"; }
# grep reads it all: with -q it would stop at the match, curl would fail writing the rest (23) and
# pipefail would turn the match into a failure (a family early in the text, as the pairing's).
metrics_match() { metrics | grep -E "$1" > /dev/null; }
summary() { echo "$*" | tee -a "$VM_OUT/summary.txt"; }
ours_left() {
    grep -q memlock_exporter_ "$T/kprobe_events" || grep -q memlock_exporter_ "$T/synthetic_events" ||
        compgen -G "$T/instances/memlock_exporter_*" > /dev/null
}
# CPU seconds (utime + stime) of a pid, from /proc/PID/stat fields 14 and 15.
# USER_HZ is 100 on x86 (the guest has no getconf).
cpu_of() { awk -v hz=100 '{sub(/.*\) /, ""); print ($12 + $13) / hz, $12 / hz, $13 / hz}' "/proc/$1/stat"; }
stop_exporter() {
    kill "$EXPORTER_PID"
    wait "$EXPORTER_PID"
    [ -f "$VM_OUT/exporter.log" ] && cat "$VM_OUT/exporter.log" >> "$VM_OUT/exporter-all.log"
}
: > "$VM_OUT/summary.txt"

start_webhook
start_alertmanager
# ib_umem_get's module, loaded again after the exporter started (the boot loaded it).
rmmod rdma_rxe ib_uverbs || vm_fail "cannot unload rdma_rxe and ib_uverbs"
[ -d /sys/module/ib_uverbs ] && vm_fail "ib_uverbs still loaded"
load_rdma() {
    local module args
    while read -r module args; do
        case $module in
            */ib_uverbs.ko* | */rdma_rxe.ko*)
                # shellcheck disable=SC2086 # module parameters are words
                insmod "/lib/modules/$(uname -r)/$module" $args || vm_fail "insmod $module" ;;
        esac
    done < /etc/memlock-vm/modules
}

# 1. Leftovers of a run that died (pid 4194303 cannot be running: above the default pid_max).
# shellcheck disable=SC2016 # $arg2 is the kprobe syntax
echo 'p:memlock_exporter_4194303_0/do_mlock_entry do_mlock size=$arg2:u64' >> "$T/kprobe_events" ||
    vm_fail "cannot define the stale probe"
# shellcheck disable=SC2016
echo 'r:memlock_exporter_4194303_0/do_mlock_return do_mlock ret=$retval:s32' >> "$T/kprobe_events" ||
    vm_fail "cannot define the stale return probe"
mkdir "$T/instances/memlock_exporter_4194303_0" "$T/instances/memlock_exporter_4194303_0_ret"
echo 1 > "$T/instances/memlock_exporter_4194303_0/events/memlock_exporter_4194303_0/enable"
# The kernel pairing's: a synthetic event, enabled, and the triggers that emit it (the return's
# refers to the entry's variable, so they must go in order).
echo 'memlock_exporter_4194303_0_do_mlock_fail u64 size; s32 ret' >> "$T/synthetic_events" ||
    vm_fail "cannot define the stale synthetic event"
stale=$T/instances/memlock_exporter_4194303_0_ret/events
echo 'hist:keys=common_pid:sz0=size' >> "$stale/memlock_exporter_4194303_0/do_mlock_entry/trigger" ||
    vm_fail "cannot set the stale entry trigger"
# shellcheck disable=SC2016
onmatch='onmatch(memlock_exporter_4194303_0.do_mlock_entry).trace(memlock_exporter_4194303_0_do_mlock_fail,$sz,ret)'
echo "hist:keys=common_pid:sz=\$sz0:$onmatch if ret < 0" \
    >> "$stale/memlock_exporter_4194303_0/do_mlock_return/trigger" || vm_fail "cannot set the stale return trigger"
echo 1 > "$stale/synthetic/memlock_exporter_4194303_0_do_mlock_fail/enable"
# Today's format (a random part): a leftover when no exporter holds its returns instance locked.
# shellcheck disable=SC2016
echo 'p:memlock_exporter_4194303_1_0badc0de/do_mlock_entry do_mlock size=$arg2:u64' >> "$T/kprobe_events" ||
    vm_fail "cannot define the stale probe of today's format"
mkdir "$T/instances/memlock_exporter_4194303_1_0badc0de_ret"
start_exporter --collector.failures --alertmanager.url "$AM_URL"
wait_for 120 "the failures collector running" metrics_match '^memlock_failures_supported\{reason=""\} 1$'
grep -q memlock_exporter_4194303 "$T/kprobe_events" && vm_fail "the stale probe was not removed"
grep -q memlock_exporter_4194303 "$T/synthetic_events" && vm_fail "the stale synthetic event was not removed"
compgen -G "$T/instances/memlock_exporter_4194303*" > /dev/null && vm_fail "the stale instances were not removed"
summary "leftovers removed"
grep -q ' ib_uverbs:ib_umem_get ' "$T/kprobe_events" ||
    vm_fail "ib_umem_get not probed in the unloaded ib_uverbs: $(cat "$T/kprobe_events")"
load_rdma
setup_rxe rxe0 dummy0
summary "ib_uverbs and rdma_rxe loaded after the exporter started; ib_umem_get probed as ib_uverbs:ib_umem_get"
metrics | grep '^memlock_failures_probed' | tee "$VM_OUT/probed.txt"
grep -q '^memlock_failures_probed{call="ib_umem_get"} 1$' "$VM_OUT/probed.txt" || vm_fail "ib_umem_get not probed"
grep -q '^memlock_failures_probed{call="do_mlock"} 1$' "$VM_OUT/probed.txt" || vm_fail "do_mlock not probed"
metrics_match '^memlock_failures_pairing\{mode="kernel"\} 1$' ||
    vm_fail "not paired in the kernel: $(metrics | grep pairing)"
summary "pairing in the kernel"
cp "$T/kprobe_events" "$VM_OUT/kprobe_events.txt"
cp "$T/synthetic_events" "$VM_OUT/synthetic_events.txt"
for f in "$T"/instances/memlock_exporter_*/events/memlock_exporter_*/*/trigger; do
    echo "$f: $(grep -v '^#' "$f")"
done > "$VM_OUT/triggers.txt"
ls "$T/instances" > "$VM_OUT/instances.txt"
grep -q memlock_exporter "$T/set_event" && vm_fail "an event of ours is enabled in the global buffer"

# 2. A refused ibv_reg_mr.
prlimit --memlock=8388608:8388608 setpriv --reuid=1000 --regid=1000 --clear-groups \
    mr-ramp --device rxe0 --step-mib 1 --interval-ms 200 --max-mib 64 --hold-seconds 120 \
    --release-file /tmp/release > "$VM_OUT/ramp.out" 2>&1 &
ramp=$!
wait_for 120 "the registrant's ENOMEM" grep -q 'ENOMEM\|ERROR' "$VM_OUT/ramp.out"
grep -q ENOMEM "$VM_OUT/ramp.out" || { cat "$VM_OUT/ramp.out"; vm_fail "the registrant failed otherwise"; }
pid=$(awk '/ opened / {print $5; exit}' "$VM_OUT/ramp.out")
mrs=$(awk '/ registered / {n = $6} END {print n}' "$VM_OUT/ramp.out")
cgroup=$(sed -n 's/^0:://p' "/proc/$pid/cgroup")
labels="pid=\"$pid\",comm=\"mr-ramp\",cgroup=\"$cgroup\",call=\"ib_umem_get\",errno=\"ENOMEM\",cause=\"memlock\""
wait_for 60 "the refusal of pid $pid counted" metrics_match "^memlock_registration_failures_total\{$labels\} 1$"
metrics > "$VM_OUT/metrics-ramp.txt"
grep -qE "^memlock_registration_failure_requested_bytes\{$labels\} 1048576$" "$VM_OUT/metrics-ramp.txt" ||
    vm_fail "the size asked for is not 1 MiB"
# Its $mrs successful registrations are not counted: one refusal on the node, nothing else.
grep -E '^memlock_node_registration_failures_total' "$VM_OUT/metrics-ramp.txt" > "$VM_OUT/node-ramp.txt"
[ "$(cat "$VM_OUT/node-ramp.txt")" = \
    'memlock_node_registration_failures_total{call="ib_umem_get",errno="ENOMEM",cause="memlock"} 1' ] ||
    { cat "$VM_OUT/node-ramp.txt"; vm_fail "other refusals counted besides the one"; }
summary "ibv_reg_mr refused after $mrs successful 1 MiB registrations: counted once ($labels)"
wait_for 60 "MemlockRegistrationFailed at Alertmanager" sh -c \
    "grep '\"alertname\": *\"MemlockRegistrationFailed\"' '$WEBHOOK_OUT' | grep -q '\"pid\": *\"$pid\"'"
grep '"MemlockRegistrationFailed"' "$WEBHOOK_OUT" | head -1 > "$VM_OUT/page.json"
grep -q 'VmPin' "$VM_OUT/page.json" || vm_fail "the page has no figures"
summary "paged: $(grep -o '"description": *"[^"]*"' "$VM_OUT/page.json" | head -1)"
touch /tmp/release
wait "$ramp"

# 3. An mlock ramp past its limit, by a process that reports and exits 2 s later (as a program
#    that logs the error), then by one that exits at once: counted as do_mlock either way; the
#    cause needs the process's VmLck, which a process that is gone no longer has ("other").
mlock_ramp() {
    prlimit --memlock=8388608:8388608 setpriv --reuid=1000 --regid=1000 --clear-groups \
        failures-mlock-ramp 64 "$1" > "$VM_OUT/mlock-$1.out" 2>&1 ||
        vm_fail "the mlock ramp: $(cat "$VM_OUT/mlock-$1.out")"
    awk '/^pid / {print $2}' "$VM_OUT/mlock-$1.out"
}
mpid=$(mlock_ramp 2000)
mlabels="pid=\"$mpid\",comm=\"failures-mlock-\",cgroup=\"$cgroup\",call=\"do_mlock\",errno=\"ENOMEM\",cause=\"memlock\""
wait_for 60 "the mlock refusal of pid $mpid counted" metrics_match "^memlock_registration_failures_total\{$mlabels\} 1$"
summary "mlock refused at $(awk '/refused/ {print $3, $4}' "$VM_OUT/mlock-2000.out") counted ($mlabels)"
qpid=$(mlock_ramp 0)
qlabels="pid=\"$qpid\",comm=\"failures-mlock-\",cgroup=\"[^\"]*\",call=\"do_mlock\",errno=\"ENOMEM\",cause=\"[a-z_]+\""
wait_for 60 "the mlock refusal of pid $qpid counted" metrics_match "^memlock_registration_failures_total\{$qlabels\} 1$"
summary "mlock refused, process gone at once: $(metrics | grep "^memlock_registration_failures_total{pid=\"$qpid\"")"
metrics > "$VM_OUT/metrics-mlock.txt"

# 5a. Exit removes everything.
stop_exporter
ours_left && vm_fail "probes or instances left after exit: $(cat "$T/kprobe_events"; ls "$T/instances")"
summary "exit: no probe or instance left"

# 4. Cost at $RATE registrations a second: without the collector, then with it.
cost() {
    local label=$1 before after out
    shift
    if [ "$label" = userspace ]; then
        MEMLOCK_FAILURES_PAIRING=userspace start_exporter "$@"
    else
        start_exporter "$@"
    fi
    if [ "$label" != without ]; then
        wait_for 120 "the failures collector running" metrics_match '^memlock_failures_supported\{reason=""\} 1$'
        mode=kernel
        [ "$label" = userspace ] && mode=userspace
        metrics_match "^memlock_failures_pairing\\{mode=\"$mode\"\\} 1$" ||
            vm_fail "not paired in $mode: $(metrics | grep pairing)"
    fi
    sleep 2
    before=$(cpu_of "$EXPORTER_PID")
    out=$(failures-reg-loop rxe0 "$RATE" "$COST_SECONDS" 4096) || vm_fail "failures-reg-loop: $out"
    after=$(cpu_of "$EXPORTER_PID")
    echo "$label $out exporter_cpu_s $(echo "$after $before" |
        awk '{printf "%.2f user_s %.2f sys_s %.2f", $1 - $4, $2 - $5, $3 - $6}')" | tee -a "$VM_OUT/cost.txt"
    # The probes' own cost per call, from a loop of cheap probed calls (an mlock of one page).
    echo "$label $(failures-mlock-ramp --loop "$COST_MLOCKS")" | tee -a "$VM_OUT/cost-mlock.txt"
    # Hits of each probe (kprobe_profile: event, hits, misses): one entry and one return per call.
    if [ "$label" != without ]; then
        sed "s/^/$label /" "$T/kprobe_profile" |
            grep -E "(ib_umem_get|do_mlock|io_account_mem|user_shm_lock)_(entry|return)" >> "$VM_OUT/kprobe_profile.txt"
        # The probes saw every successful registration (and counted none: below), however short
        # the round (scripts/test.sh runs one of 3 s).
        local made hits
        made=$(echo "$out" | awk '{print $2}')
        hits=$(awk '$1 ~ /ib_umem_get_entry$/ {n += $2} END {print n + 0}' "$T/kprobe_profile")
        if [ "$made" -le 0 ] || [ "$hits" -lt "$made" ]; then
            vm_fail "the ib_umem_get probe saw $hits of $made registrations ($label)"
        fi
    fi
    metrics > "$VM_OUT/metrics-cost-$label.txt"
    stop_exporter
}
: > "$VM_OUT/cost.txt"
: > "$VM_OUT/cost-mlock.txt"
for _ in $(seq "$COST_ROUNDS"); do
    cost without
    cost with --collector.failures
    cost userspace --collector.failures
done
for label in with userspace; do
    [ "$COST_ROUNDS" -gt 0 ] || break
    grep -q '^memlock_node_registration_failures_total{' "$VM_OUT/metrics-cost-$label.txt" &&
        vm_fail "successful registrations were counted ($label)"
done
summary "cost: $(tr '\n' ';' < "$VM_OUT/cost.txt")"

# 4b. The user space pairing (the fallback) counts a refusal with its size.
MEMLOCK_FAILURES_PAIRING=userspace start_exporter --collector.failures
wait_for 120 "the failures collector running" metrics_match '^memlock_failures_pairing\{mode="userspace"\} 1$'
upid=$(mlock_ramp 2000)
ulabels="pid=\"$upid\",comm=\"failures-mlock-\",cgroup=\"$cgroup\",call=\"do_mlock\",errno=\"ENOMEM\",cause=\"memlock\""
wait_for 60 "the mlock refusal of pid $upid counted" metrics_match "^memlock_registration_failures_total\{$ulabels\} 1$"
metrics_match "^memlock_registration_failure_requested_bytes\{$ulabels\} 1048576$" ||
    vm_fail "the user space pairing lost the size: $(metrics | grep requested_bytes)"
stop_exporter
summary "pairing in user space: the mlock refusal counted with its 1 MiB"

# 5b. A reload that restarts the sampler (another interval of the node collector) and keeps the
#     collector keeps its probes, its refusal and its page; one that disables it removes them, the
#     exporter still serving.
printf '[alerting]\nalertmanager_urls = ["%s"]\n[collector.failures]\nenabled = true\n' "$AM_URL" > /tmp/failures.toml
start_exporter --config.file /tmp/failures.toml
wait_for 120 "the failures collector running" metrics_match '^memlock_failures_supported\{reason=""\} 1$'
ours_left || vm_fail "no probes while running"
rpid=$(mlock_ramp 2000)
rlabels="pid=\"$rpid\",comm=\"failures-mlock-\",cgroup=\"$cgroup\",call=\"do_mlock\",errno=\"ENOMEM\",cause=\"memlock\""
wait_for 60 "the mlock refusal of pid $rpid counted" metrics_match "^memlock_registration_failures_total\{$rlabels\} 1$"
wait_for 60 "the fast path holding its page" metrics_match '^memlock_exporter_alerts_active [1-9]'
before_reload=$(grep memlock_exporter_ "$T/kprobe_events")
stamp=$(metrics | awk -v series="memlock_registration_failure_last_timestamp_seconds{$rlabels} " \
    'index($0, series) == 1 {print $NF}')
[ -n "$stamp" ] || vm_fail "no last refusal timestamp: $(metrics | grep timestamp_seconds)"
reloaded() { grep -q '"configuration reloaded"' "$VM_OUT/exporter.log"; }
printf '[alerting]\nalertmanager_urls = ["%s"]\n[collector.failures]\nenabled = true\n' "$AM_URL" > /tmp/failures.toml
printf '[collector.node]\ninterval = "2s"\n' >> /tmp/failures.toml
kill -HUP "$EXPORTER_PID"
wait_for 60 "the reload" reloaded
grep '"configuration reloaded"' "$VM_OUT/exporter.log" | grep -q 'collectors=' ||
    vm_fail "the reload did not restart the sampler"
wait_for 30 "a scrape of the new sampler" \
    metrics_match '^memlock_exporter_collector_interval_seconds\{collector="node"\} 2(\.0)?$'
metrics_match "^memlock_registration_failures_total\{$rlabels\} 1$" ||
    vm_fail "the refusal was lost in the reload: $(metrics | grep registration_failures_total)"
metrics_match "^memlock_registration_failure_last_timestamp_seconds\{$rlabels\} $stamp$" ||
    vm_fail "the last refusal's time changed in the reload"
[ "$(grep memlock_exporter_ "$T/kprobe_events")" = "$before_reload" ] || vm_fail "the reload replaced the probes"
wait_for 30 "the page held after the reload" metrics_match '^memlock_exporter_alerts_active [1-9]'
summary "reload restarting the sampler: the same probes, the refusal still counted once, its page held"
printf '[alerting]\nalertmanager_urls = ["%s"]\n[collector.failures]\nenabled = false\n' "$AM_URL" > /tmp/failures.toml
kill -HUP "$EXPORTER_PID"
gone() { ! ours_left; }
wait_for 60 "the probes gone after the reload" gone
metrics_match '^memlock_scrape_collector_success\{collector="node"\} 1$' || vm_fail "the exporter stopped serving"
metrics_match '^memlock_failures_supported' && vm_fail "the disabled collector still reports"
stop_exporter
summary "reload disabling it: probes and instances removed, exporter still serving"

# 6. Who may run it.
EXPORTER_LOG=$VM_OUT/exporter-nocaps.log
setpriv --inh-caps=-all --bounding-set=-all "$EXPORTER" --web.listen-address=127.0.0.1:9567 --log.format=json \
    --collector.failures > "$EXPORTER_LOG" 2>&1 &
EXPORTER_PID=$!
VM_PIDS+=("$EXPORTER_PID")
wait_for 120 "root without capabilities" metrics_match '^memlock_failures_supported\{reason="[a-z_]*"\} [01]$'
wait_for 60 "root without capabilities set up" sh -c "! curl -fsS $EXPORTER_URL/metrics | grep -q 'reason=\"starting\"'"
grep CapEff "/proc/$EXPORTER_PID/status" | tee -a "$VM_OUT/summary.txt"
metrics_match '^memlock_failures_supported\{reason=""\} 1$' ||
    vm_fail "root without capabilities cannot trace: $(metrics | grep supported)"
stop_exporter
summary "root with an empty capability bounding set: traces"
setpriv --reuid=1000 --regid=1000 --clear-groups "$EXPORTER" --web.listen-address=127.0.0.1:9567 --log.format=json \
    --collector.failures > "$VM_OUT/exporter-uid1000.log" 2>&1 &
EXPORTER_PID=$!
VM_PIDS+=("$EXPORTER_PID")
wait_for 120 "uid 1000's exporter" metrics_match '^memlock_failures_supported\{reason="no_permission"\} 0$'
# It cannot trace: the collector says so as a failure, with the reason above, not a silent 1.
metrics_match '^memlock_scrape_collector_success\{collector="failures"\} 0$' ||
    vm_fail "a collector that cannot trace reports success: $(metrics | grep 'collector_success{collector="failures"')"
stop_exporter
summary "uid 1000: reason no_permission, collector success 0"
ours_left && vm_fail "probes left at the end"

# 7. Two exporters, each pid 1 of its own PID namespace (two containers), side by side.
ns_exporter() {
    unshare --pid --fork --mount-proc "$EXPORTER" --web.listen-address="127.0.0.1:$1" --log.format=json \
        --collector.failures > "$VM_OUT/exporter-ns-$1.log" 2>&1 &
    VM_PIDS+=($!)
}
ns_exporter 9568
ns_a=$!
ns_exporter 9569
ns_b=$!
for port in 9568 9569; do
    wait_for 120 "the exporter of port $port tracing" sh -c \
        "curl -fsS http://127.0.0.1:$port/metrics | grep -q '^memlock_failures_supported{reason=\"\"} 1$'"
done
groups=$(grep -o 'memlock_exporter_1_[0-9]*_[0-9a-f]*' "$T/kprobe_events" | sort -u)
[ "$(echo "$groups" | wc -l)" = 2 ] || vm_fail "not two groups of pid 1: $groups"
# The exporter of port 9568, killed: its probes stay behind.
read -r a_pid < "/proc/$ns_a/task/$ns_a/children"
read -r b_pid < "/proc/$ns_b/task/$ns_b/children"
# Its log names its group (the "tracing refused registrations" line's instance).
group_a=$(grep 'tracing refused registrations' "$VM_OUT/exporter-ns-9568.log" |
    grep -o 'memlock_exporter_1_[0-9]*_[0-9a-f]*' | head -1)
echo "$groups" | grep -qx "$group_a" || vm_fail "cannot tell the killed exporter's group ($group_a): $groups"
group_b=$(echo "$groups" | grep -v "^$group_a$")
kill -KILL "$a_pid"
wait "$ns_a"
grep -q "$group_a" "$T/kprobe_events" || vm_fail "the killed exporter's probes are already gone"
start_exporter --collector.failures
wait_for 120 "the third exporter tracing" metrics_match '^memlock_failures_supported\{reason=""\} 1$'
grep -q "$group_a" "$T/kprobe_events" && vm_fail "the killed exporter's probes were not removed"
grep -q "$group_b" "$T/kprobe_events" || vm_fail "the running exporter's probes were removed"
[ -d "$T/instances/${group_b}_ret" ] || vm_fail "the running exporter's instance was removed"
# It still counts.
mlock_ramp 0 > /dev/null
wait_for 60 "the exporter in the other namespace counting" sh -c \
    "curl -fsS http://127.0.0.1:9569/metrics | grep -q '^memlock_node_registration_failures_total{call=\"do_mlock\"'"
stop_exporter
kill "$b_pid"
wait "$ns_b"
summary "pid 1 of two PID namespaces: groups $(echo "$groups" | tr '\n' ' ')traced side by side; the killed one's" \
    "removed by a third exporter, the other's kept, counting"
ours_left && vm_fail "probes left at the end"
summary "all checks passed"
