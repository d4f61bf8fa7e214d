#!/bin/bash
# Slurm HealthCheckProgram: drains this node when `memlock-exporter check` fails for the job
# shape in the settings, as user jobs will see the node (slurmd's memlock limit, which its
# children inherit and jobs get unless PropagateResourceLimits passes the submit host's; no
# CAP_IPC_LOCK), and resumes it when the check passes again, only if the drain was its own.
# An admin's drain (any other reason) is never touched. A site's own HealthCheckProgram (such as
# LBNL NHC), named by MEMLOCK_SITE_HEALTHCHECK in the settings, runs first; when it fails, its
# exit status is this script's and the check does not run. See docs/slurm.md.
#
# Exit status: the site program's when it fails (1 when it cannot be run); else 0 the check passed, 1 it failed (the node is drained, or left to the admin who
# drained it), 2 it could not run (nothing is changed). slurmd logs the output of a non-zero
# exit.
set -euo pipefail
case $0 in */*) ML_HERE=${0%/*} ;; *) ML_HERE=. ;; esac
# shellcheck source-path=SCRIPTDIR source=memlock-check-lib.sh
source "$ML_HERE/memlock-check-lib.sh"
ML_NAME=healthcheck
site=0
ml_run_site MEMLOCK_SITE_HEALTHCHECK "$@" || site=$?
[ "$site" = 0 ] || exit "$site"

node=${SLURMD_NODENAME:-}
if [ -z "$node" ]; then
    ml_log "SLURMD_NODENAME is not set: run by slurmd as HealthCheckProgram, or set it"
    exit "$ML_NOT_RUN"
fi
ml_load_settings || exit "$ML_NOT_RUN"

ml_node_state "$node" || exit "$ML_NOT_RUN"
if ml_busy "$ML_STATE"; then
    ML_BUSY=yes
    ml_log "$node is $ML_STATE: ${ML_DYNAMIC[*]} left to the jobs' own checks"
fi
verdict=0
ml_check || verdict=$?
case $verdict in
    "$ML_PASS")
        echo "$ML_SUMMARY"
        ml_resume_if_ours "$node" || exit "$ML_NOT_RUN"
        ;;
    "$ML_FAIL")
        echo "$ML_REASON_PREFIX $ML_SUMMARY"
        ml_drain "$node" "$ML_SUMMARY" || exit "$ML_NOT_RUN"
        ;;
esac
exit "$verdict"
