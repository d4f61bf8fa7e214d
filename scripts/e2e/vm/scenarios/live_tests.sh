#!/bin/bash
# The integration binary's live tests on the guest's kernel (Debian 6.1, cgroup v2, rxe0), for
# issue 21 item 6. ARGS: the exporter's path on the host and the repository's (the test binary
# has both compiled in), then the test filters. The integration binary and tests/fixtures come
# in with run.sh --copy BINARY:integration --copy tests/fixtures:fixtures:
#   scripts/e2e/vm/run.sh --copy target/debug/deps/integration-HASH:integration \
#       --copy tests/fixtures:fixtures scripts/e2e/vm/scenarios/live_tests.sh \
#       "$PWD/target/debug/memlock-exporter" "$PWD" live_rdma
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=../guest/lib.sh
source /usr/lib/memlock-vm/lib.sh
# No ARGS (in scenarios/sequence.sh): they are the lines of /vm/bin/live-tests.args.
if [ $# = 0 ]; then
    mapfile -t args < /vm/bin/live-tests.args
    set -- "${args[@]}"
fi
host_exporter=$1 host_repository=$2
shift 2
mkdir -p "$(dirname "$host_exporter")" "$host_repository/tests"
ln -sf "$EXPORTER" "$host_exporter"
ln -sfn /vm/bin/fixtures "$host_repository/tests/fixtures"
setup_rxe rxe0 dummy0
# Every test the filters select must run: an unmet requirement fails it rather than printing
# "skipped:" and passing (scripts/test.sh runs the host's the same way).
MEMLOCK_TESTS_REQUIRE_ALL=1 /vm/bin/integration --test-threads=1 "$@" 2>&1 | tee "$VM_OUT/live-tests.txt"
exit "${PIPESTATUS[0]}"
