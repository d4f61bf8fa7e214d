#!/usr/bin/env bash
# The shared e2e helpers keep a script's exit status through their cleanup: a failing check,
# `fail`, a killed background service and exit hooks that end in success must not turn a
# failure into a pass (or a pass into a failure).
set -uo pipefail
LIB=$(cd "$(dirname "$0")" && pwd)/lib.bash
bad=0

# expect STATUS DESCRIPTION SCRIPT: runs SCRIPT (after sourcing lib.bash) in a fresh bash.
expect() {
    local want=$1 what=$2 body=$3 got
    bash -c "set -euo pipefail; source '$LIB'; $body" >/dev/null 2>&1
    got=$?
    if [ "$got" = "$want" ]; then
        echo "ok: $what: exit $got"
    else
        echo "FAIL: $what: exit $got, expected $want"
        bad=1
    fi
}

hook_succeeds() { true; }
export -f hook_succeeds
expect 0 "a passing script with a killed service" 'sleep 60 & E2E_PIDS+=($!); exit 0'
expect 1 "fail" 'sleep 60 & E2E_PIDS+=($!); fail "broken"'
expect 3 "exit 3 with a hook whose last command succeeds" 'on_exit hook_succeeds; sleep 60 & E2E_PIDS+=($!); exit 3'
expect 1 "a failing command under set -e" 'on_exit hook_succeeds; false; exit 0'
expect 0 "a hook that fails does not fail a passing script" 'hook_fails() { false; }; on_exit hook_fails; exit 0'
[ $bad = 0 ] && echo "lib_exit_status: ok"
exit $bad
