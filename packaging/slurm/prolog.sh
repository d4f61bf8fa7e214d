#!/bin/bash
# Slurm Prolog: keeps the job off this node when `memlock-exporter check` fails for the job
# shape in the settings, run as the job's user (SLURM_JOB_UID: no CAP_IPC_LOCK, slurmd's
# memlock limit, which the job gets unless PropagateResourceLimits passes the submit host's).
# On FAIL it drains the node with the failing checks as the reason (unless someone else
# drained it) and exits 1, so Slurm does not start the job here; healthcheck.sh resumes the
# node once the check passes. A site's own Prolog, named by MEMLOCK_SITE_PROLOG in the settings,
# runs first with the same environment; when it fails, its exit status is this script's and the
# check does not run. See docs/slurm.md.
#
# Exit status: the site Prolog's when it fails (1 when it cannot be run); else 0 the check
# passed, or could not run (logged; a broken installation does not drain every node), 1 it
# failed.
set -euo pipefail
case $0 in */*) ML_HERE=${0%/*} ;; *) ML_HERE=. ;; esac
# shellcheck source-path=SCRIPTDIR source=memlock-check-lib.sh
source "$ML_HERE/memlock-check-lib.sh"
ML_NAME=prolog
site=0
ml_run_site MEMLOCK_SITE_PROLOG "$@" || site=$?
[ "$site" = 0 ] || exit "$site"

node=${SLURMD_NODENAME:-}
uid=${SLURM_JOB_UID:-}
gid=${SLURM_JOB_GID:-}
if [ -z "$node" ] || [[ ! $uid =~ ^[0-9]+$ ]] || [[ ! $gid =~ ^[0-9]+$ ]]; then
    ml_log "SLURMD_NODENAME, SLURM_JOB_UID and SLURM_JOB_GID must be set (run by slurmd as Prolog)"
    exit 0
fi
ml_load_settings || exit 0

if [ "$uid" != 0 ]; then
    # As the user, with the user's groups when known here; the check has no capabilities left
    # (they go at the exec: the uids are all non-zero then).
    groups=--clear-groups
    getent passwd "$uid" >/dev/null 2>&1 && groups=--init-groups
    ML_RUNNER=(setpriv --reuid="$uid" --regid="$gid" "$groups" --)
fi

# Other jobs on the node use its memory: that is theirs, not the node's set-up.
if ! others=$(ml_slurm squeue --noheader --nodelist="$node" --format=%i 2>&1) ||
    [ -n "$(printf '%s\n' "$others" | grep -vx "${SLURM_JOB_ID:-}" || true)" ]; then
    ML_BUSY=yes
    ml_log "other jobs on $node: ${ML_DYNAMIC[*]} left to the jobs' own checks"
fi
verdict=0
ml_check || verdict=$?
case $verdict in
    "$ML_FAIL")
        ml_log "job ${SLURM_JOB_ID:-?} kept off $node: $ML_SUMMARY"
        ml_drain "$node" "$ML_SUMMARY" || true
        exit 1
        ;;
esac
exit 0
