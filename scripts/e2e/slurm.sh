#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# End to end with a real slurmctld, slurmd and munged on loopback (ports, state, logs and the
# munge socket in a temp dir; all stopped at exit): packaging/slurm/healthcheck.sh drains the
# node at this machine's 8 MiB memlock limit for a job shape that needs more and resumes it when
# the shape fits, leaves an admin's drain alone, follows PropagateResourceLimits; prolog.sh
# keeps a job off; `check --exec` refuses a rank and runs one; a site's own Prolog and
# HealthCheckProgram run first and their failures stand; NHC's line judges as the scripts do.
# Holds the live-tests lock.
set -euo pipefail
LOCK=/tmp/memlock-exporter-live-tests.lock
if [ -z "${MEMLOCK_E2E_SLURM_LOCKED:-}" ]; then
    exec env MEMLOCK_E2E_SLURM_LOCKED=1 flock "$LOCK" bash "$0" "$@"
fi
# shellcheck source=lib.bash
source "$(dirname "$0")/lib.bash"

[ "$(id -u)" = 0 ] || fail "needs root (slurmd, munged, setpriv)"
[ -x "$BIN" ] || fail "$BIN not built"
for tool in munged slurmctld slurmd scontrol sinfo srun sbatch squeue setpriv prlimit flock; do
    command -v "$tool" >/dev/null || fail "$tool missing (scripts/test.sh installs slurm-wlm and munge)"
done

if command -v shellcheck >/dev/null; then
    shellcheck -x "$ROOT"/packaging/slurm/*.sh "$0" || fail "shellcheck"
fi

T=$E2E_TMP
NODE=memlock-e2e
JOB_USER=65534
# Slurm, munge and the job's user reach into the temp dir.
chmod 0755 "$T"
mkdir -p "$T/munge" "$T/state" "$T/spool" "$T/slurm" "$T/jobs"
chmod 1777 "$T/jobs"
EXPORTER=$(public_binary)
install -m 0755 "$ROOT"/packaging/slurm/{healthcheck.sh,prolog.sh,memlock-check-lib.sh} "$T/slurm/"
export SLURM_CONF=$T/slurm.conf

# A shape whose need exceeds 8 MiB and one that needs nothing (one node: no network buffers).
NEEDS_MORE=(--nodes 2 --ranks-per-node 8)
FITS=(--nodes 1 --ranks-per-node 1)
need() {
    # check's JSON (stable: fields are only added); the verdict does not matter here.
    "$EXPORTER" check "$@" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["need_per_process_bytes"])'
}
[ "$(need "${NEEDS_MORE[@]}")" -gt 8388608 ] || fail "'${NEEDS_MORE[*]}' no longer needs more than 8 MiB"
[ "$(need "${FITS[@]}")" -lt 8388608 ] || fail "'${FITS[*]}' no longer fits in 8 MiB"

# settings FILE FLAGS: the settings file of the health check or the prolog, replaced at once (a
# run that read it half-written would check the default shape).
settings() {
    printf '# written by scripts/e2e/slurm.sh\nMEMLOCK_EXPORTER_BIN=%s\nMEMLOCK_CHECK_ARGS="%s"\n' "$EXPORTER" "$2" \
        > "$1.new"
    mv -f "$1.new" "$1"
}

# slurmd gives the scripts SLURMD_NODENAME (and the prolog SLURM_JOB_*), nothing else: these
# wrappers add only where the settings and slurm.conf are, and count the runs that finished.
for script in healthcheck prolog; do
    cat > "$T/$script-wrapper.sh" <<EOF
#!/bin/bash
/usr/bin/env MEMLOCK_SLURM_SETTINGS=$T/$script.conf SLURM_CONF=$SLURM_CONF $T/slurm/$script.sh 2>&1 |
    /usr/bin/tee -a $T/$script.log
rc=\${PIPESTATUS[0]}
echo "\$rc" >> $T/$script.done
exit "\$rc"
EOF
    chmod 0755 "$T/$script-wrapper.sh"
    : > "$T/$script.done"
done

# --- The settings and the scripts' refusals, without Slurm ------------------------------------
# (run as slurmd runs them: an empty environment but for SLURMD_NODENAME)
by_hand() {
    env -i SLURMD_NODENAME=$NODE "$@"
}
printf 'MEMLOCK_EXPORTER_BIN=%s\nMEMLOCK_CHEK_ARGS=--nodes 1\n' "$EXPORTER" > "$T/typo.conf"
rc=0
out=$(by_hand MEMLOCK_SLURM_SETTINGS="$T/typo.conf" "$T/slurm/healthcheck.sh" 2>&1) || rc=$?
[ "$rc" = 2 ] || fail "a settings typo: exit $rc, expected 2: $out"
[[ $out == *"$T/typo.conf:2: unknown key MEMLOCK_CHEK_ARGS"* ]] || fail "the typo is not named: $out"
rc=0
out=$(by_hand MEMLOCK_SLURM_SETTINGS=/nonexistent MEMLOCK_EXPORTER_BIN=bin SLURM_JOB_UID=$JOB_USER \
    SLURM_JOB_GID=$JOB_USER "$T/slurm/prolog.sh" 2>&1) || rc=$?
[ "$rc" = 0 ] || fail "a prolog that cannot run its check must not fail the job: exit $rc: $out"
[[ $out == *"MEMLOCK_EXPORTER_BIN must be an absolute path, got: 'bin'"* ]] || fail "prolog: $out"
rc=0
out=$(by_hand MEMLOCK_SLURM_SETTINGS=/nonexistent MEMLOCK_EXPORTER_BIN="$EXPORTER" \
    MEMLOCK_CHECK_ARGS="--nodes 1 --skip \"a b" "$T/slurm/healthcheck.sh" 2>&1) || rc=$?
if [ "$rc" != 2 ] || [[ $out != *"MEMLOCK_CHECK_ARGS: cannot split"* ]]; then
    fail "an unmatched quote: exit $rc: $out"
fi
log "settings: a typo, a relative binary and an unmatched quote are refused by name"

# --- Slurm on loopback ------------------------------------------------------------------------
dd if=/dev/urandom of="$T/munge/munge.key" bs=1024 count=1 status=none
chmod 0400 "$T/munge/munge.key"
munged --foreground --socket="$T/munge/munge.socket" --key-file="$T/munge/munge.key" \
    --log-file="$T/munge/munged.log" --pid-file="$T/munge/munged.pid" --seed-file="$T/munge/munged.seed" \
    > "$T/munge/out" 2>&1 &
E2E_PIDS+=($!)
for _ in $(seq 50); do [ -S "$T/munge/munge.socket" ] && break; sleep 0.1; done
[ -S "$T/munge/munge.socket" ] || { cat "$T/munge/out"; fail "munged did not start"; }

HOST=$(hostname -s)
cat > "$SLURM_CONF" <<EOF
ClusterName=memlocke2e
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$T/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/slurmctld.log
SlurmdLogFile=$T/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
MailProg=/bin/true
SlurmdParameters=config_overrides
HealthCheckProgram=$T/healthcheck-wrapper.sh
HealthCheckInterval=2
Prolog=$T/prolog-wrapper.sh
PropagateResourceLimitsExcept=MEMLOCK
NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=$HOST CPUs=2 RealMemory=1000 State=UNKNOWN
PartitionName=e2e Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF

settings "$T/healthcheck.conf" "${NEEDS_MORE[*]}"
settings "$T/prolog.conf" "${FITS[*]}"
slurmctld -D -f "$SLURM_CONF" > "$T/slurmctld.out" 2>&1 &
E2E_PIDS+=($!)
# Jobs left by a failing step would keep their slurmstepd after slurmd stops: cancel them while
# slurmctld still runs (exit hooks run before the services are stopped).
cancel_jobs() {
    scancel --quiet --partition=e2e 2>/dev/null
    for _ in $(seq 50); do
        [ -z "$(squeue --noheader --partition=e2e 2>/dev/null)" ] && break
        sleep 0.1
    done
}
on_exit cancel_jobs
for _ in $(seq 100); do scontrol ping >/dev/null 2>&1 && break; sleep 0.1; done
scontrol ping >/dev/null 2>&1 || { cat "$T/slurmctld.out"; fail "slurmctld did not answer"; }
# slurmd at this shell's memlock limit: 8 MiB here.
slurmd_started=$(date +%s.%N)
slurmd -D -f "$SLURM_CONF" -N "$NODE" > "$T/slurmd.out" 2>&1 &
E2E_PIDS+=($!)
log "slurmctld and slurmd up;" \
    "slurmd's memlock limit: $(grep 'Max locked memory' /proc/self/limits | awk '{print $4, $5}')"

# node_field FORMAT: one sinfo field of the node.
node_field() { sinfo --noheader --Node --nodes="$NODE" --format="$1"; }

# wait_node STATE_GLOB REASON_GLOB [seconds]: until the node's state and reason match.
wait_node() {
    local state reason
    for _ in $(seq $((${3:-60} * 10))); do
        state=$(node_field '%T') reason=$(node_field '%E')
        # shellcheck disable=SC2053 # globs, on purpose
        [[ $state == $1 ]] && [[ $reason == $2 ]] && return 0
        sleep 0.1
    done
    fail "node $NODE: state '$state' reason '$reason', waited for '$1' '$2';" \
        "health check log: $(tail -5 "$T/healthcheck.log")"
}

# not_drained WHAT: the node has no drain and no reason (it may still be completing a job).
not_drained() {
    local state reason
    state=$(node_field '%T') reason=$(node_field '%E')
    if [[ $state == *drain* ]] || [ "$reason" != none ]; then
        fail "$1 changed the node: state '$state' reason '$reason'"
    fi
}

# wait_runs SCRIPT N: until SCRIPT has finished N more runs.
wait_runs() {
    local done_file=$T/$1.done target
    target=$(($(wc -l < "$done_file") + $2))
    for _ in $(seq 600); do
        [ "$(wc -l < "$done_file")" -ge "$target" ] && return 0
        sleep 0.1
    done
    fail "$1 did not run $2 more times"
}

# --- 1. drained at 8 MiB for a shape that needs more ------------------------------------------
wait_node 'drain*' "memlock-exporter: memlock.soft 8.0 MiB*"
drained_after=$(python3 -c "import time; print(round(time.time() - $slurmd_started, 1))")
reason=$(node_field '%E')
log "drained ${drained_after}s after slurmd started: $reason"
grep -q "^memlock-exporter: memlock.soft 8.0 MiB" "$T/healthcheck.log" || fail "no reason in the health check's output"
# slurmd logs the output of a health check that fails.
grep -q "error: health_check failed: rc:1 output:memlock-exporter: memlock.soft 8.0 MiB" "$T/slurmd.log" ||
    fail "slurmd did not log the reason: $(grep health_check "$T/slurmd.log" | tail -2)"

# --- 2. resumed when the shape fits -----------------------------------------------------------
settings "$T/healthcheck.conf" "${FITS[*]}"
wait_node 'idle' 'none'
# Not at once: a drain younger than ML_RESUME_AFTER (10 s) waits for a later run.
grep -q "$NODE passes; resumed at the next run (drained [0-9]s ago)" "$T/healthcheck.log" ||
    fail "resumed within 10 s of the drain: $(cat "$T/healthcheck.log")"
log "resumed $(python3 -c "import time; print(round(time.time() - $slurmd_started, 1))")s" \
    "after slurmd started: the shape fits"

# The flags reach check split like a shell would: one quoted argument with a space in it. The
# environment overrides the file.
settings "$T/quoted.conf" "${FITS[*]} --path.procfs '/nonexistent dir'"
rc=0
out=$(by_hand SLURM_CONF="$SLURM_CONF" MEMLOCK_SLURM_SETTINGS="$T/quoted.conf" "$T/slurm/healthcheck.sh" 2>&1) ||
    rc=$?
[ "$rc" = 2 ] || fail "a procfs that does not exist: exit $rc: $out"
[[ $out == *"check could not run: /nonexistent dir/self/limits: No such file"* ]] || fail "split: $out"
out=$(by_hand SLURM_CONF="$SLURM_CONF" MEMLOCK_SLURM_SETTINGS="$T/quoted.conf" MEMLOCK_CHECK_ARGS="${FITS[*]}" \
    "$T/slurm/healthcheck.sh" 2>&1) || fail "MEMLOCK_CHECK_ARGS did not override the file: $out"
[[ $out == PASS* ]] || fail "$out"
# A file written on Windows, with blanks after a value, is read as a shell would read it.
printf 'MEMLOCK_EXPORTER_BIN=%s  \r\nMEMLOCK_CHECK_ARGS="%s"\r\n' "$EXPORTER" "${FITS[*]}" > "$T/crlf.conf"
out=$(by_hand SLURM_CONF="$SLURM_CONF" MEMLOCK_SLURM_SETTINGS="$T/crlf.conf" "$T/slurm/healthcheck.sh" 2>&1) ||
    fail "a CRLF settings file: $out"
[[ $out == PASS* ]] || fail "a CRLF settings file: $out"
not_drained "a check that could not run"
log "settings: quoted flags arrive whole, a CRLF file reads as a shell would; the environment overrides the file"

# --- 3. an admin's drain is left alone, failing or passing ------------------------------------
scontrol update NodeName="$NODE" State=DRAIN Reason="admin: new cables"
settings "$T/healthcheck.conf" "${NEEDS_MORE[*]}"
wait_runs healthcheck 2
[ "$(node_field '%E')" = "admin: new cables" ] || fail "the admin's reason was replaced: $(node_field '%E')"
grep -q "left alone (drained, reason set by someone else: admin: new cables)" "$T/healthcheck.log" ||
    fail "the health check did not say it left the node alone"
settings "$T/healthcheck.conf" "${FITS[*]}"
wait_runs healthcheck 2
if [[ $(node_field '%T') != drain* ]] || [ "$(node_field '%E')" != "admin: new cables" ]; then
    fail "a passing check resumed the admin's drain: $(node_field '%T') $(node_field '%E')"
fi
scontrol update NodeName="$NODE" State=RESUME
wait_node 'idle' 'none'
log "an admin's drain stays, failing and passing; resumed by the admin"

# --- 4. the prolog keeps a job off ------------------------------------------------------------
settings "$T/prolog.conf" "${NEEDS_MORE[*]}"
# The health check passes meanwhile: only the prolog stands between the job and the node.
prolog_runs=$(wc -l < "$T/prolog.done")
rc=0
out=$(cd / && timeout 60 setpriv --reuid=$JOB_USER --regid=$JOB_USER --clear-groups \
    srun --nodes=1 --job-name=kept-off /bin/sh -c "touch $T/jobs/kept-off" 2>&1) || rc=$?
[ "$rc" != 0 ] || fail "the job ran past a failing prolog: $out"
[ ! -e "$T/jobs/kept-off" ] || fail "the job's command ran"
[ "$(wc -l < "$T/prolog.done")" -gt "$prolog_runs" ] || fail "the prolog did not run"
grep -q "kept off $NODE: memlock.soft 8.0 MiB" "$T/prolog.log" ||
    fail "the prolog did not say why: $(cat "$T/prolog.log")"
log "prolog: srun exit $rc: $(printf '%s' "$out" | tr '\n' ' ' | cut -c1-160)"
[[ $(node_field '%E') == "memlock-exporter: memlock.soft 8.0 MiB"* ]] ||
    fail "the prolog's reason did not stay: $(node_field '%E')"
# It drained the node with its reason before Slurm's own "Prolog error" (which does not
# overwrite a drain: node_mgr.c, validate_node_specs()), so the health check may resume it.
wait_node 'idle' 'none'
grep -q "resuming $NODE: the check passes again (was: memlock-exporter: memlock.soft 8.0 MiB" "$T/healthcheck.log" ||
    fail "the prolog's drain was not the health check's to resume: $(tail -3 "$T/healthcheck.log")"
log "prolog: the job kept off, the node drained with the reason and resumed by the health check"
# The check runs as the job's user: a procfs root only root may read (links to the real /proc
# in a 0700 directory) is unreadable to it, so the check cannot run, and a check that cannot run
# lets the job through (logged) rather than drain every node. (setpriv execs before the
# capabilities go, so a binary only root may run would still run: that would prove nothing.)
mkdir -m 0700 "$T/root-only"
for entry in self 1 meminfo sys; do ln -s "/proc/$entry" "$T/root-only/$entry"; done
settings "$T/prolog.conf" "${NEEDS_MORE[*]} --path.procfs $T/root-only"
out=$(cd / && timeout 60 setpriv --reuid=$JOB_USER --regid=$JOB_USER --clear-groups \
    srun --nodes=1 --job-name=not-checked /bin/sh -c "touch $T/jobs/not-checked" 2>&1) || fail "srun: $out"
[ -e "$T/jobs/not-checked" ] || fail "the job did not run"
grep -q "prolog: check could not run (exit 2): .*$T/root-only/self/limits: Permission denied" "$T/prolog.log" ||
    fail "not checked as the job's user: $(cat "$T/prolog.log")"
not_drained "a check that could not run"
settings "$T/prolog.conf" "${FITS[*]}"
log "prolog: checks as the job's user; a check that cannot run lets the job through"

# --- 4b. a node with jobs: what they use is not judged -----------------------------------------
# One CPU of two taken by a sleeping job. A second job's prolog leaves out the findings that
# measure running jobs; so does the health check, whose drain reason then names the static
# failure only, though MemAvailable is (made) tiny: a procfs root whose meminfo says 1 MiB
# available (a fixture: this machine cannot be short of memory on demand), the rest the real
# /proc.
busy_job=$(cd / && setpriv --reuid=$JOB_USER --regid=$JOB_USER --clear-groups \
    sbatch --parsable --ntasks=1 --job-name=busy --output=/dev/null --wrap "sleep 120")
wait_node 'mixed' 'none'
out=$(cd / && timeout 60 setpriv --reuid=$JOB_USER --regid=$JOB_USER --clear-groups \
    srun --nodes=1 --ntasks=1 --job-name=beside /bin/true 2>&1) || fail "the job beside the busy one did not run: $out"
grep -q "prolog: other jobs on $NODE: memory.available memory.hugepages vm.overcommit_memory left" "$T/prolog.log" ||
    fail "the prolog judged the other job's memory: $(tail -3 "$T/prolog.log")"
mkdir "$T/lowmem"
for entry in self 1 sys; do ln -s "/proc/$entry" "$T/lowmem/$entry"; done
sed 's/^MemAvailable:.*/MemAvailable:       1024 kB/' /proc/meminfo > "$T/lowmem/meminfo"
settings "$T/healthcheck.conf" "${NEEDS_MORE[*]} --path.procfs $T/lowmem"
wait_node 'drain*' 'memlock-exporter: memlock.soft 8.0 MiB*'
[[ $(node_field '%E') != *memory.available* ]] || fail "a busy node drained for its jobs' memory: $(node_field '%E')"
# (mixed, or allocated while an earlier job still completes)
grep -q "healthcheck: $NODE is [a-z+]*: memory.available memory.hugepages vm.overcommit_memory left" \
    "$T/healthcheck.log" || fail "the health check did not say so: $(tail -3 "$T/healthcheck.log")"
scancel "$busy_job"
# Idle, the same check names the memory too.
wait_node 'drain*' 'memlock-exporter: memlock.soft 8.0 MiB*; memory.available MemAvailable 1.0 MiB*'
settings "$T/healthcheck.conf" "${FITS[*]}"
wait_node 'idle' 'none'
log "busy: the health check and a second job's prolog leave the running jobs' memory alone"

# --- 5. the wrapper refuses a rank, and becomes one -------------------------------------------
as_user() { (cd / && timeout 60 setpriv --reuid=$JOB_USER --regid=$JOB_USER --clear-groups "$@"); }
rc=0
out=$(as_user srun --nodes=1 "$EXPORTER" check "${NEEDS_MORE[@]}" --exec -- /bin/sh -c "touch $T/jobs/refused" 2>&1) ||
    rc=$?
[ "$rc" = 1 ] || fail "--exec on a failing check: srun exit $rc: $out"
[ ! -e "$T/jobs/refused" ] || fail "--exec ran the command of a failing check"
[[ $out == *"memlock-exporter check: FAIL  memlock.soft  8.0 MiB"* ]] || fail "no reason in the job's output: $out"
[[ $out == *"; not running /bin/sh"* ]] || fail "$out"
log "--exec refused: $(printf '%s\n' "$out" | grep 'checks\? failed')"
# shellcheck disable=SC2016 # $$ and the limits are the task's
out=$(as_user srun --nodes=1 "$EXPORTER" check "${FITS[@]}" --exec -- /bin/sh -c \
    'echo "pid=$$ task_pid=$SLURM_TASK_PID"; grep "Max locked memory" /proc/self/limits')
pid=$(sed -n 's/^pid=\([0-9]*\) .*/\1/p' <<<"$out")
task_pid=$(sed -n 's/.* task_pid=\([0-9]*\)$/\1/p' <<<"$out")
[ -n "$pid" ] || fail "--exec: no pid: $out"
[ "$pid" = "$task_pid" ] || fail "--exec is not the task itself: $out"
[[ $out == *"Max locked memory         8388608              8388608"* ]] || fail "the task's limits: $out"
# The rank's own context: with --propagate=MEMLOCK the task gets the submit shell's soft limit
# (ulimits.c, _set_limit()), and the wrapper sees that one, not slurmd's.
# shellcheck disable=SC2016 # the task's limits
out=$(as_user prlimit --memlock=4194304:8388608 srun --nodes=1 --propagate=MEMLOCK "$EXPORTER" check "${FITS[@]}" \
    --exec -- /bin/sh -c 'grep "Max locked memory" /proc/self/limits')
[[ $out == *"Max locked memory         4194304              8388608"* ]] || fail "--propagate=MEMLOCK: $out"
log "--exec became the task (pid $pid = SLURM_TASK_PID), with the task's limits (propagated ones too)"

# --- 6. PropagateResourceLimits read from scontrol show config -------------------------------
# propagation LINE: slurm.conf's propagation setting becomes LINE (none: no line, Slurm's
# default), slurmctld reads it again, and the scripts' reading of it is printed: yes or no.
propagation() {
    local line=$1 config
    sed -i '/^PropagateResourceLimits/d' "$SLURM_CONF"
    [ "$line" = none ] || echo "$line" >> "$SLURM_CONF"
    scontrol reconfigure
    for _ in $(seq 100); do
        config=$(scontrol show config)
        case $line in
            none) [[ $config == *$'\nPropagateResourceLimits = ALL\n'* ]] && break ;;
            *) [[ $config == *$'\n'"${line%%=*}"' = '"${line#*=}"$'\n'* ]] && break ;;
        esac
        sleep 0.1
    done
    # shellcheck source=../../packaging/slurm/memlock-check-lib.sh
    if (source "$T/slurm/memlock-check-lib.sh" && ML_NAME=e2e ml_memlock_propagated); then
        echo yes
    else
        echo no
    fi
}
# As parse_rlimits() reads them: what each setting does to MEMLOCK.
for case in "none yes" "PropagateResourceLimits=NONE no" "PropagateResourceLimits=CORE,MEMLOCK yes" \
    "PropagateResourceLimits=STACK no" "PropagateResourceLimitsExcept=RLIMIT_MEMLOCK no" \
    "PropagateResourceLimitsExcept=NONE yes" "PropagateResourceLimitsExcept=CORE yes"; do
    got=$(propagation "${case% *}")
    [ "$got" = "${case##* }" ] || fail "${case% *}: MEMLOCK propagated: $got, expected ${case##* }"
done
propagation PropagateResourceLimits=ALL > /dev/null
: > "$T/healthcheck.log"
wait_runs healthcheck 2
# memlock.soft may warn beside it: a finite limit under the policy floor although the shape fits.
grep -Eq "^PASS \(warnings: ([a-z._]+, )*memlock\.propagated(, [a-z._]+)*\)" "$T/healthcheck.log" ||
    fail "propagated MEMLOCK: no warning: $(cat "$T/healthcheck.log")"
not_drained "a propagated limit (not the node's fault)"
log "PropagateResourceLimits: 8 settings read as Slurm does; when MEMLOCK is propagated the soft limit is judged" \
    "at slurmd's hard limit, with a warning"

# --- 7. a hung check drains the node, saying so; hung Slurm commands are bounded (issue 24) ---
# A check that never returns, as one blocked in a read would (a real check reads files without
# blocking: a FIFO or a hung mount is what the timeout is for).
printf '#!/bin/sh\nexec sleep 600\n' > "$T/hung-check"
chmod 0755 "$T/hung-check"
hung_settings() {
    printf 'MEMLOCK_EXPORTER_BIN=%s\nMEMLOCK_CHECK_ARGS="%s"\nMEMLOCK_CHECK_TIMEOUT=2\n' "$T/hung-check" \
        "${FITS[*]}" > "$1.new"
    mv -f "$1.new" "$1"
}
hung_settings "$T/prolog.conf"
started=$(date +%s.%N)
rc=0
out=$(cd / && timeout 60 setpriv --reuid=$JOB_USER --regid=$JOB_USER --clear-groups \
    srun --nodes=1 --job-name=hung-check /bin/sh -c "touch $T/jobs/hung-check" 2>&1) || rc=$?
[ "$rc" != 0 ] || fail "the job ran past a prolog whose check hung: $out"
[ ! -e "$T/jobs/hung-check" ] || fail "the job's command ran past a hung check"
grep -q "kept off $NODE: check timed out after 2s (MEMLOCK_CHECK_TIMEOUT)" "$T/prolog.log" ||
    fail "the prolog did not say the check timed out: $(tail -3 "$T/prolog.log")"
log "prolog, hung check: srun exit $rc after $(python3 -c "import time; print(round(time.time() - $started, 1))")s," \
    "the job kept off"
settings "$T/prolog.conf" "${FITS[*]}"
wait_node 'idle' 'none'
hung_settings "$T/healthcheck.conf"
started=$(date +%s.%N)
wait_node 'drain*' 'memlock-exporter: check timed out after 2s (MEMLOCK_CHECK_TIMEOUT)*' 30
log "health check, hung check: drained $(python3 -c "import time; print(round(time.time() - $started, 1))")s" \
    "after the settings changed: $(node_field '%E')"
settings "$T/healthcheck.conf" "${FITS[*]}"
wait_node 'idle' 'none'
# Every hung check was stopped (the last one may still be within its 2 s).
for _ in $(seq 100); do [ -z "$(pgrep -f "^sleep 600$" || true)" ] && break; sleep 0.1; done
[ -z "$(pgrep -f "^sleep 600$" || true)" ] || fail "hung checks were left running: $(pgrep -af "^sleep 600$")"
# slurmctld stopped (SIGSTOP): every Slurm command waits for an answer that does not come.
printf 'MEMLOCK_EXPORTER_BIN=%s\nMEMLOCK_CHECK_ARGS="%s"\nMEMLOCK_SLURM_TIMEOUT=2\n' "$EXPORTER" "${FITS[*]}" \
    > "$T/slurm-timeout.conf"
ctld=$(cat "$T/slurmctld.pid")
kill -STOP "$ctld"
started=$(date +%s.%N)
rc=0
out=$(by_hand SLURM_CONF="$SLURM_CONF" MEMLOCK_SLURM_SETTINGS="$T/slurm-timeout.conf" timeout 60 \
    "$T/slurm/healthcheck.sh" 2>&1) || rc=$?
took=$(python3 -c "import time; print(round(time.time() - $started, 1))")
kill -CONT "$ctld"
[ "$rc" = 2 ] || fail "slurmctld stopped: exit $rc after ${took}s, expected 2: $out"
[[ $out == *"sinfo timed out after 2s (MEMLOCK_SLURM_TIMEOUT): is slurmctld answering?"* ]] || fail "$out"
python3 -c "import sys; sys.exit(0 if $took < 6 else 1)" || fail "slurmctld stopped: the health check took ${took}s"
log "slurmctld stopped: the health check gave up after ${took}s, exit 2: $(printf '%s' "$out" | head -1)"

# --- 8. beside what the site runs: its own Prolog and HealthCheckProgram, and NHC's line ------
# A site's programs that log each run (with what slurmd gave them) and exit with the status in
# their .rc file.
for site in site-prolog site-healthcheck; do
    cat > "$T/$site.sh" <<EOF
#!/bin/bash
echo "$site ran: job=\${SLURM_JOB_ID:-none} node=\${SLURMD_NODENAME:-none}" >> $T/$site.log
exit "\$(cat $T/$site.rc)"
EOF
    chmod 0755 "$T/$site.sh"
    echo 0 > "$T/$site.rc"
    : > "$T/$site.log"
done
# chained FILE FLAGS: settings naming both site programs, replaced at once.
chained() {
    {
        printf '# written by scripts/e2e/slurm.sh\nMEMLOCK_EXPORTER_BIN=%s\nMEMLOCK_CHECK_ARGS="%s"\n' "$EXPORTER" "$2"
        printf 'MEMLOCK_SITE_PROLOG=%s\nMEMLOCK_SITE_HEALTHCHECK=%s\n' "$T/site-prolog.sh" "$T/site-healthcheck.sh"
    } > "$1.new"
    mv -f "$1.new" "$1"
}
# The site's Prolog fails: the job is kept off with its status, and the memlock check does not run.
echo 3 > "$T/site-prolog.rc"
chained "$T/prolog.conf" "${FITS[*]}"
rc=0
out=$(cd / && timeout 60 setpriv --reuid=$JOB_USER --regid=$JOB_USER --clear-groups \
    srun --nodes=1 --job-name=site-refused /bin/sh -c "touch $T/jobs/site-refused" 2>&1) || rc=$?
[ "$rc" != 0 ] || fail "the job ran past a failing site Prolog: $out"
[ ! -e "$T/jobs/site-refused" ] || fail "the job's command ran past a failing site Prolog"
grep -q "^site-prolog ran: job=[0-9]* node=$NODE$" "$T/site-prolog.log" ||
    fail "the site Prolog did not run as slurmd runs it: $(cat "$T/site-prolog.log")"
grep -q "prolog: MEMLOCK_SITE_PROLOG $T/site-prolog.sh failed (exit 3): its verdict stands" "$T/prolog.log" ||
    fail "the site Prolog's failure is not reported: $(tail -3 "$T/prolog.log")"
[ "$(tail -1 "$T/prolog.done")" = 3 ] || fail "prolog.sh exit $(tail -1 "$T/prolog.done"), expected the site's 3"
# Slurm drains a node whose Prolog failed ("Prolog error"): not ours to resume.
wait_node 'drain*' 'Prolog error*'
scontrol update NodeName="$NODE" State=RESUME
wait_node 'idle' 'none'
# It passes: the job runs, after both the site's Prolog and the check.
echo 0 > "$T/site-prolog.rc"
site_runs=$(wc -l < "$T/site-prolog.log")
out=$(cd / && timeout 60 setpriv --reuid=$JOB_USER --regid=$JOB_USER --clear-groups \
    srun --nodes=1 --job-name=site-passed /bin/sh -c "touch $T/jobs/site-passed" 2>&1) || fail "srun: $out"
[ -e "$T/jobs/site-passed" ] || fail "the job did not run after the site Prolog passed"
[ "$(wc -l < "$T/site-prolog.log")" -gt "$site_runs" ] || fail "the site Prolog did not run"
settings "$T/prolog.conf" "${FITS[*]}"
log "site Prolog: its failure (exit 3) keeps the job off, the check not run; passing, the job runs"
# The site's HealthCheckProgram fails: its status is the health check's, nothing is drained by us.
echo 1 > "$T/site-healthcheck.rc"
chained "$T/healthcheck.conf" "${NEEDS_MORE[*]}"
wait_runs healthcheck 2
grep -q "^site-healthcheck ran: job=none node=$NODE$" "$T/site-healthcheck.log" ||
    fail "the site health check did not run: $(cat "$T/site-healthcheck.log")"
[ "$(tail -1 "$T/healthcheck.done")" = 1 ] || fail "healthcheck.sh exit $(tail -1 "$T/healthcheck.done")"
grep -q "healthcheck: MEMLOCK_SITE_HEALTHCHECK $T/site-healthcheck.sh failed (exit 1)" "$T/healthcheck.log" ||
    fail "the site health check's failure is not reported: $(tail -3 "$T/healthcheck.log")"
not_drained "a failing site health check (the site's program drains, if it wants to)"
# It passes: the memlock check runs after it and drains for the shape that needs more.
echo 0 > "$T/site-healthcheck.rc"
wait_node 'drain*' "memlock-exporter: memlock.soft 8.0 MiB*"
chained "$T/healthcheck.conf" "${FITS[*]}"
wait_node 'idle' 'none'
settings "$T/healthcheck.conf" "${FITS[*]}"
# A mistake elsewhere in the settings never skips the site's program; a site program that is
# not an executable by its absolute path cannot run, which fails the script.
site_runs=$(wc -l < "$T/site-healthcheck.log")
rc=0
out=$(by_hand MEMLOCK_SLURM_SETTINGS="$T/typo.conf" MEMLOCK_SITE_HEALTHCHECK="$T/site-healthcheck.sh" \
    "$T/slurm/healthcheck.sh" 2>&1) || rc=$?
[ "$rc" = 2 ] || fail "a settings typo beside a site health check: exit $rc: $out"
[ "$(wc -l < "$T/site-healthcheck.log")" -gt "$site_runs" ] || fail "a settings typo skipped the site's program"
rc=0
out=$(by_hand MEMLOCK_SLURM_SETTINGS=/nonexistent MEMLOCK_SITE_PROLOG=site-prolog.sh SLURM_JOB_UID=$JOB_USER \
    SLURM_JOB_GID=$JOB_USER "$T/slurm/prolog.sh" 2>&1) || rc=$?
[ "$rc" = 1 ] || fail "a site Prolog named by a relative path: exit $rc: $out"
[[ $out == *"MEMLOCK_SITE_PROLOG: 'site-prolog.sh' is not an executable file by its absolute path"* ]] ||
    fail "the site Prolog's path is not named: $out"
log "site health check: its failure is the script's, passing the check runs; a typo never skips it"
# NHC's line (packaging/slurm/nhc.conf) as check_cmd_status runs it: the command with its output
# discarded, within -t seconds, judged against -r. Its shape needs more than this 8 MiB.
nhc_line=$(sed -e :a -e '/\\$/N; s/\\\n//; ta' "$ROOT/packaging/slurm/nhc.conf" | grep -v '^#')
read -r -a nhc <<<"$nhc_line"
[ "${nhc[*]:0:8}" = "* || check_cmd_status -t 20 -r 0 /usr/bin/memlock-exporter" ] ||
    fail "nhc.conf's line changed shape: $nhc_line"
[ "${nhc[*]: -4}" = "${NEEDS_MORE[*]}" ] || fail "nhc.conf's shape is not '${NEEDS_MORE[*]}': $nhc_line"
rc=0
timeout "${nhc[4]}" "$EXPORTER" "${nhc[@]:8}" </dev/null >/dev/null 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "NHC's line at 8 MiB for '${NEEDS_MORE[*]}': exit $rc, expected 1 (NHC fails the node)"
rc=0
timeout "${nhc[4]}" "$EXPORTER" "${nhc[@]:8:${#nhc[@]}-12}" "${FITS[@]}" </dev/null >/dev/null 2>&1 || rc=$?
[ "$rc" = "${nhc[6]}" ] || fail "NHC's line for '${FITS[*]}': exit $rc, expected ${nhc[6]}"
log "NHC's check_cmd_status line: exit 1 for '${NEEDS_MORE[*]}' at 8 MiB, ${nhc[6]} for '${FITS[*]}'"

log "slurm: ok"
