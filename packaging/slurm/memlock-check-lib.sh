# Shared by healthcheck.sh and prolog.sh (sourced, not run): the settings, the check as user
# jobs will see the node, and draining or resuming the node without touching an admin's drain.
#
# slurmd runs both as root with almost no environment: no PATH (Slurm 22.05:
# src/slurmd/slurmd/slurmd.c, run_script_health_check(), passes SLURMD_NODENAME only; the prolog
# gets SLURM_JOB_*, SLURM_CONF and a few more from src/plugins/prep/script/prep_script_slurmd.c),
# so PATH is set here and every command is a system one.
# shellcheck shell=bash

PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH

# Drain reasons that start with this are ours; any other reason belongs to someone else.
ML_REASON_PREFIX="memlock-exporter:"
ML_SETTINGS_DEFAULT=/etc/memlock-exporter/slurm-check.conf
ML_BIN=/usr/bin/memlock-exporter
ML_CHECK_ARGS=()
ML_RUNNER=()
# Bounds, in seconds (issue 24: a hung check or scontrol hung the scripts, and Slurm waited:
# the prolog has no timeout unless PrologEpilogTimeout is set, and a health check that slurmd
# kills at HealthCheckTimeout, 60 s by default, drains nothing). The check, then each Slurm
# command (sinfo twice, scontrol twice at most): 20 + 4 x 8 stays under 60.
ML_CHECK_TIMEOUT=20
ML_SLURM_TIMEOUT=8
# Findings that measure what running jobs use (MemAvailable, unused hugepages against it,
# Committed_AS), not how the node is set up: judged only while no job holds the node, or a
# training job using its memory would drain the node it runs on.
ML_DYNAMIC=(memory.available memory.hugepages vm.overcommit_memory)
ML_BUSY=no
# Exit statuses of the scripts: the check passed, failed, or could not run.
ML_PASS=0
ML_FAIL=1
ML_NOT_RUN=2

ml_log() {
    printf '%s: %s\n' "$ML_NAME" "$*" >&2
    timeout 2 logger -t memlock-exporter-slurm -- "$ML_NAME: $*" 2>/dev/null || true
}

# ml_timed SECONDS COMMAND...: COMMAND, stopped after SECONDS (TERM, then KILL 2 s later);
# 124 when it was, whatever COMMAND's own status would have been.
ml_timed() {
    local limit=$1 rc=0
    shift
    timeout --kill-after=2 "$limit" "$@" || rc=$?
    case $rc in 124 | 137) return 124 ;; esac
    return "$rc"
}

# ml_slurm COMMAND...: a Slurm client command within ML_SLURM_TIMEOUT; says so when it ran out.
ml_slurm() {
    local rc=0
    ml_timed "$ML_SLURM_TIMEOUT" "$@" || rc=$?
    [ "$rc" != 124 ] || echo "$1 timed out after ${ML_SLURM_TIMEOUT}s (MEMLOCK_SLURM_TIMEOUT): is slurmctld answering?"
    return "$rc"
}

# ml_split ARGS: splits ARGS into ML_CHECK_ARGS like a shell would (quotes and backslashes
# group, nothing is expanded or globbed), with xargs, which takes that quoting.
ml_split() {
    local words
    if ! words=$(printf '%s\n' "$1" | xargs -r printf '%s\n' 2>/dev/null); then
        ml_log "MEMLOCK_CHECK_ARGS: cannot split (an unmatched quote?): $1"
        return 1
    fi
    ML_CHECK_ARGS=()
    [ -z "$words" ] || mapfile -t ML_CHECK_ARGS <<<"$words"
}

# ml_kv LINE: KEY and VALUE of a settings line into ML_KEY and ML_VALUE; returns 1 for a blank
# or comment line, 2 for a line without =. The file is read, never sourced: KEY=VALUE lines, #
# comments, a value may be wrapped in one pair of quotes (which go; what is inside is split later).
ml_kv() {
    local line=$1
    line=${line#"${line%%[![:space:]]*}"}
    case $line in '' | '#'*) return 1 ;; esac
    [[ $line == *=* ]] || return 2
    ML_KEY=${line%%=*}
    ML_VALUE=${line#*=}
    # Trailing blanks (and a CRLF file's CR) end the value, as in a shell assignment.
    ML_VALUE=${ML_VALUE%"${ML_VALUE##*[![:space:]]}"}
    case $ML_VALUE in
        \"*\") ML_VALUE=${ML_VALUE#\"} ML_VALUE=${ML_VALUE%\"} ;;
        \'*\') ML_VALUE=${ML_VALUE#\'} ML_VALUE=${ML_VALUE%\'} ;;
    esac
}

# ml_load_settings: the settings file (MEMLOCK_SLURM_SETTINGS, else ML_SETTINGS_DEFAULT; absent
# means the defaults), then MEMLOCK_EXPORTER_BIN and MEMLOCK_CHECK_ARGS from the environment,
# which override it.
ml_load_settings() {
    local file=${MEMLOCK_SLURM_SETTINGS:-$ML_SETTINGS_DEFAULT} line number=0 rc
    local args=""
    if [ -e "$file" ]; then
        if [ ! -r "$file" ] || [ -d "$file" ]; then
            ml_log "$file: not a readable file"
            return 1
        fi
        while IFS= read -r line || [ -n "$line" ]; do
            number=$((number + 1))
            rc=0
            ml_kv "$line" || rc=$?
            case $rc in
                1) continue ;;
                2)
                    ml_log "$file:$number: expected KEY=VALUE, got: $line"
                    return 1
                    ;;
            esac
            case $ML_KEY in
                MEMLOCK_EXPORTER_BIN) ML_BIN=$ML_VALUE ;;
                MEMLOCK_CHECK_ARGS) args=$ML_VALUE ;;
                MEMLOCK_CHECK_TIMEOUT) ML_CHECK_TIMEOUT=$ML_VALUE ;;
                MEMLOCK_SLURM_TIMEOUT) ML_SLURM_TIMEOUT=$ML_VALUE ;;
                # Read by ml_site_program, before everything else.
                MEMLOCK_SITE_PROLOG | MEMLOCK_SITE_HEALTHCHECK) ;;
                *)
                    ml_log "$file:$number: unknown key $ML_KEY (known: MEMLOCK_EXPORTER_BIN, MEMLOCK_CHECK_ARGS," \
                        "MEMLOCK_CHECK_TIMEOUT, MEMLOCK_SLURM_TIMEOUT, MEMLOCK_SITE_PROLOG, MEMLOCK_SITE_HEALTHCHECK)"
                    return 1
                    ;;
            esac
        done <"$file"
    fi
    [ -z "${MEMLOCK_EXPORTER_BIN+set}" ] || ML_BIN=$MEMLOCK_EXPORTER_BIN
    [ -z "${MEMLOCK_CHECK_ARGS+set}" ] || args=$MEMLOCK_CHECK_ARGS
    [ -z "${MEMLOCK_CHECK_TIMEOUT+set}" ] || ML_CHECK_TIMEOUT=$MEMLOCK_CHECK_TIMEOUT
    [ -z "${MEMLOCK_SLURM_TIMEOUT+set}" ] || ML_SLURM_TIMEOUT=$MEMLOCK_SLURM_TIMEOUT
    local name
    for name in MEMLOCK_CHECK_TIMEOUT:$ML_CHECK_TIMEOUT MEMLOCK_SLURM_TIMEOUT:$ML_SLURM_TIMEOUT; do
        if [[ ! ${name#*:} =~ ^[1-9][0-9]{0,3}$ ]]; then
            ml_log "${name%%:*} must be a number of seconds from 1 to 9999, got: '${name#*:}'"
            return 1
        fi
    done
    case $ML_BIN in
        /*) ;;
        *)
            ml_log "MEMLOCK_EXPORTER_BIN must be an absolute path, got: '$ML_BIN'"
            return 1
            ;;
    esac
    if [ ! -x "$ML_BIN" ] || [ -d "$ML_BIN" ]; then
        ml_log "MEMLOCK_EXPORTER_BIN: $ML_BIN is not an executable file"
        return 1
    fi
    ml_split "$args"
}

# ml_site_program KEY: ML_SITE, the site's own program that KEY (MEMLOCK_SITE_PROLOG or
# MEMLOCK_SITE_HEALTHCHECK) names in the settings file or, overriding it, the environment; empty
# when none. Read on its own, so that a mistake elsewhere in the settings never skips the site's
# program. Returns 1 (logged) when KEY names something that is not an executable file by its
# absolute path: the site's gate cannot run.
ml_site_program() {
    local key=$1 file=${MEMLOCK_SLURM_SETTINGS:-$ML_SETTINGS_DEFAULT} line
    ML_SITE=""
    if [ -f "$file" ] && [ -r "$file" ]; then
        while IFS= read -r line || [ -n "$line" ]; do
            if ml_kv "$line" && [ "$ML_KEY" = "$key" ]; then ML_SITE=$ML_VALUE; fi
        done <"$file"
    fi
    [ -z "${!key+set}" ] || ML_SITE=${!key}
    [ -n "$ML_SITE" ] || return 0
    if [[ $ML_SITE != /* ]] || [ ! -x "$ML_SITE" ] || [ -d "$ML_SITE" ]; then
        ml_log "$key: '$ML_SITE' is not an executable file by its absolute path"
        return 1
    fi
}

# ml_run_site KEY ARGS...: runs the site's program that KEY names (ml_site_program) with ARGS,
# in this environment, and returns its exit status: the memlock check only adds to the site's
# verdict, so a failing site program ends the run with its status.
ml_run_site() {
    local key=$1 rc=0
    shift
    ml_site_program "$key" || return 1
    [ -n "$ML_SITE" ] || return 0
    "$ML_SITE" "$@" || rc=$?
    [ "$rc" = 0 ] || ml_log "$key $ML_SITE failed (exit $rc): its verdict stands; the memlock check did not run"
    return "$rc"
}

# ml_memlock_propagated: whether jobs get the submit host's soft memlock limit, from
# `scontrol show config`. As Slurm decides it (src/common/read_config.c and
# slurm_rlimits_info.c: parse_rlimits()): PropagateResourceLimitsExcept, when set, propagates
# all but the names it lists (ALL: none, NONE: all); otherwise PropagateResourceLimits
# (default ALL) propagates the names it lists. Names are MEMLOCK or RLIMIT_MEMLOCK. A user's
# `srun --propagate` cannot be seen from here (the --exec wrapper sees its effect).
ml_memlock_propagated() {
    local config except limits
    if ! config=$(ml_slurm scontrol show config 2>&1); then
        ml_log "scontrol show config failed: $config"
        return 2
    fi
    except=$(printf '%s\n' "$config" | sed -n 's/^PropagateResourceLimitsExcept *= *//p')
    limits=$(printf '%s\n' "$config" | sed -n 's/^PropagateResourceLimits *= *//p')
    if [ -n "$except" ] && [ "$except" != "(null)" ]; then
        ml_names_memlock "$except" && return 1
        return 0
    fi
    [ -n "$limits" ] && [ "$limits" != "(null)" ] || limits=ALL
    ml_names_memlock "$limits"
}

# ml_names_memlock LIST: whether Slurm's rlimit LIST covers MEMLOCK (ALL does, NONE does not).
ml_names_memlock() {
    local names name
    IFS=$', \t' read -r -a names <<<"$1"
    for name in "${names[@]}"; do
        case ${name#RLIMIT_} in ALL | MEMLOCK) return 0 ;; esac
    done
    return 1
}

# ml_check: runs the check for the node as user jobs see it (ML_RUNNER, such as setpriv, goes
# before the binary; ML_BUSY=yes leaves out ML_DYNAMIC); ML_SUMMARY is its one-line summary.
# Returns ML_PASS, ML_FAIL or ML_NOT_RUN.
ml_check() {
    local flags=(check --summary --without-cap-ipc-lock --skip cgroup.memory --skip nccl) rc=0 id
    # The check's own cgroup and environment are slurmd's, not the job's: the job's are checked
    # by `check --exec` in the rank.
    if [ "$ML_BUSY" = yes ]; then
        for id in "${ML_DYNAMIC[@]}"; do flags+=(--skip "$id"); done
    fi
    ml_memlock_propagated || rc=$?
    case $rc in
        0) flags+=(--memlock-propagated) ;;
        1) ;;
        *) ML_SUMMARY="cannot read PropagateResourceLimits"; return "$ML_NOT_RUN" ;;
    esac
    rc=0
    ML_SUMMARY=$(cd / && ml_timed "$ML_CHECK_TIMEOUT" "${ML_RUNNER[@]}" "$ML_BIN" "${flags[@]}" "${ML_CHECK_ARGS[@]}") ||
        rc=$?
    case $rc in
        0) return "$ML_PASS" ;;
        124)
            # Fail safe: a node where the check hangs (a read blocked in the kernel, a hung
            # mount) is no node to start jobs on; the reason says what happened.
            ML_SUMMARY="check timed out after ${ML_CHECK_TIMEOUT}s (MEMLOCK_CHECK_TIMEOUT): a hung read on this node?"
            ml_log "$ML_SUMMARY"
            return "$ML_FAIL"
            ;;
        1) return "$ML_FAIL" ;;
        *)
            ml_log "check could not run (exit $rc): $ML_SUMMARY"
            return "$ML_NOT_RUN"
            ;;
    esac
}

# ml_node_state NODE: ML_STATE (sinfo's long state, such as idle or drained), ML_REASON ("none"
# when there is none) and ML_REASON_AGE (seconds since it was set; empty when unknown).
ml_node_state() {
    local line set_at
    if ! line=$(ml_slurm sinfo --noheader --Node --nodes="$1" --format='%T|%H|%E' 2>&1) || [ -z "$line" ]; then
        ml_log "sinfo --nodes=$1 failed: $line"
        return 1
    fi
    line=${line%%$'\n'*}
    ML_STATE=${line%%|*}
    line=${line#*|}
    ML_REASON=${line#*|}
    ML_REASON_AGE=""
    if set_at=$(date -d "${line%%|*}" +%s 2>/dev/null); then
        ML_REASON_AGE=$(($(date +%s) - set_at))
    fi
}

# ml_busy STATE: whether sinfo's STATE says jobs hold the node.
ml_busy() {
    case $1 in *alloc* | *mix* | *comp* | draining*) return 0 ;; esac
    return 1
}

ml_ours() { [[ $ML_REASON == "$ML_REASON_PREFIX"* ]]; }

ml_drained() { [[ $ML_STATE == *drain* ]]; }

# ml_drain NODE SUMMARY: drains NODE with SUMMARY as the reason, unless someone else gave it
# a reason (an admin's drain is never overwritten: it would become ours to resume).
ml_drain() {
    local node=$1 reason="$ML_REASON_PREFIX $2"
    reason=${reason:0:256}
    ml_node_state "$node" || return 1
    if [ "$ML_REASON" != none ] && ! ml_ours; then
        ml_log "$node left alone ($ML_STATE, reason set by someone else: $ML_REASON); it fails: $2"
        return 0
    fi
    if ml_drained && [ "$ML_REASON" = "$reason" ]; then
        return 0
    fi
    ml_log "draining $node: $reason"
    ml_slurm scontrol update NodeName="$node" State=DRAIN Reason="$reason"
}

# ml_resume_if_ours NODE: resumes NODE when it is drained for our reason only, and not within
# ML_RESUME_AFTER seconds of the drain: the prolog drains before it exits 1, and Slurm drains a
# node whose prolog failed as "Prolog error" unless it is drained already (node_mgr.c,
# validate_node_specs()); a resume in between would leave the node drained for that reason,
# which is not ours to resume.
ML_RESUME_AFTER=10
ml_resume_if_ours() {
    local node=$1
    ml_node_state "$node" || return 1
    if ml_drained && ml_ours; then
        if [ -n "$ML_REASON_AGE" ] && [ "$ML_REASON_AGE" -lt "$ML_RESUME_AFTER" ]; then
            ml_log "$node passes; resumed at the next run (drained ${ML_REASON_AGE}s ago)"
            return 0
        fi
        ml_log "resuming $node: the check passes again (was: $ML_REASON)"
        ml_slurm scontrol update NodeName="$node" State=RESUME
    fi
}
