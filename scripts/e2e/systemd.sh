#!/usr/bin/env bash
# Checks systemd/memlock-exporter.service without a running systemd (PID 1 here is not systemd):
#  1. `systemd-analyze verify` accepts it;
#  2. `systemd-analyze security --offline` rates its exposure "OK" or better (the figure is
#     printed and written to $OUT/security.txt);
#  3. every system call the daemon makes (traced with strace through start-up with TLS and
#     basic auth, scrapes of all collectors on this machine, a SIGHUP reload, a file-watch
#     reload and SIGTERM) is allowed by the unit's SystemCallFilter, and every socket family it
#     opens by RestrictAddressFamilies. A call outside the filter would fail with EPERM in
#     production, where this cannot be seen.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
UNIT=systemd/memlock-exporter.service
OUT=${TMPDIR:-/tmp}/memlock-exporter-systemd
rm -rf "$OUT" && mkdir -p "$OUT"

for tool in systemd-analyze strace openssl curl python3; do
    command -v "$tool" >/dev/null ||
        { echo "missing $tool (apt-get install systemd strace openssl curl python3)"; exit 1; }
done

cargo build --quiet --locked --bin memlock-exporter
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/debug/memlock-exporter
[ -x "$BIN" ] || { echo "no binary at $BIN"; exit 1; }

echo "--- systemd-analyze verify"
# verify wants ExecStart's binary to exist: point a copy of the unit at the one just built.
sed "s|/usr/bin/memlock-exporter|$BIN|" "$UNIT" > "$OUT/memlock-exporter.service"
systemd-analyze verify "$OUT/memlock-exporter.service"

echo "--- systemd-analyze security --offline"
systemd-analyze security --offline=true "$OUT/memlock-exporter.service" > "$OUT/security.txt" 2>&1 || true
grep -E "^✗" "$OUT/security.txt" || true
overall=$(grep "Overall exposure level" "$OUT/security.txt")
echo "$overall"
level=$(echo "$overall" | awk '{print $(NF-1)}')
case "$level" in
    PERFECT|SAFE|OK) ;;
    *) echo "exposure level $level is worse than OK"; exit 1 ;;
esac

echo "--- system calls and socket families against the unit's filters"
cd "$OUT"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout server.key -out server.crt \
    -days 2 -subj /CN=localhost -addext "subjectAltName=IP:127.0.0.1" 2>/dev/null
hash=$(python3 -W ignore -c "import crypt; print(crypt.crypt('pw', crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16)))" \
    2>/dev/null || true)
{
    printf 'tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n'
    [ -n "$hash" ] && printf 'basic_auth_users:\n  prometheus: "%s"\n' "$hash"
} > web.yml
printf '[collector.numa]\nenabled = true\n' > config.toml
python3 - <<'EOF' &
import socket, os
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
path = "notify.sock"
if os.path.exists(path):
    os.unlink(path)
s.bind(path)
s.settimeout(30)
with open("notify.log", "w") as log:
    try:
        while True:
            log.write(s.recv(4096).decode() + "\n---\n")
            log.flush()
    except OSError:
        pass
EOF
listener=$!
# The daemon's notifications need the listener bound first (a fixed 0.5 s pause stood in for this).
for _ in $(seq 300); do [ -S notify.sock ] && break; sleep 0.1; done
[ -S notify.sock ] || { echo "the notify listener did not bind notify.sock in 30 s"; exit 1; }
NOTIFY_SOCKET=$OUT/notify.sock WATCHDOG_USEC=2000000 strace -f -qq -o strace.txt -- \
    "$BIN" --web.listen-address 127.0.0.1:0 --config.file config.toml --web.config.file web.yml --log.format json \
    2> daemon.log &
tracer=$!
address=""
for _ in $(seq 100); do
    address=$(grep -o '"address":"[^"]*"' daemon.log 2>/dev/null | head -1 | cut -d'"' -f4 || true)
    [ -n "$address" ] && break
    sleep 0.1
done
[ -n "$address" ] ||
    { echo "the daemon did not start"; cat daemon.log; kill "$tracer" "$listener" 2>/dev/null; exit 1; }
# Signals go to the daemon itself (strace's child), not to strace.
daemon=$(pgrep -P "$tracer" | head -1)
auth=()
[ -n "$hash" ] && auth=(-u prometheus:pw)
scrape() {
    curl -sS --noproxy '*' --cacert server.crt "${auth[@]}" -o /dev/null -w '%{http_code}\n' "https://$address/metrics"
}
# Waits until the log has at least $1 reloads (a hang reaches the 60 s deadline, not a busy CPU).
wait_reloads() {
    for _ in $(seq 600); do
        [ "$(grep -c '"configuration reloaded"' daemon.log)" -ge "$1" ] && return 0
        sleep 0.1
    done
    echo "fewer than $1 reloads after 60 s:"; cat daemon.log; kill "$tracer" "$listener" 2>/dev/null; exit 1
}
sleep 3
scrape
kill -HUP "$daemon"
wait_reloads 1
printf '[collector.numa]\nenabled = false\n' > config.toml.new && mv config.toml.new config.toml
wait_reloads 2
scrape
kill -TERM "$daemon"
wait "$tracer" || { echo "the daemon exited with $?"; cat daemon.log; exit 1; }
kill "$listener" 2>/dev/null || true
[ "$(grep -c '"configuration reloaded"' daemon.log)" -ge 2 ] ||
    { echo "expected two reloads (SIGHUP, file):"; cat daemon.log; exit 1; }
grep -q 'READY=1' notify.log || { echo "no READY=1"; exit 1; }

python3 - "$ROOT/$UNIT" <<'EOF'
import re, subprocess, sys

unit = open(sys.argv[1]).read()

def expand(name, seen=None):
    seen = seen if seen is not None else set()
    if not name.startswith("@"):
        return {name}
    if name in seen:
        return set()
    seen.add(name)
    out = subprocess.run(["systemd-analyze", "syscall-filter", name], capture_output=True, text=True, check=True).stdout
    calls = set()
    for line in out.splitlines()[1:]:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("@"):
            calls |= expand(line, seen)
        else:
            calls.add(line)
    return calls

allowed, denied = set(), set()
for value in re.findall(r"^SystemCallFilter=(.*)$", unit, re.M):
    deny = value.startswith("~")
    for item in value.lstrip("~").split():
        (denied if deny else allowed).update(expand(item))
permitted = allowed - denied

used = set()
families = set()
for line in open("strace.txt"):
    m = re.match(r"^\d+\s+(?:<\.\.\. )?([a-z0-9_]+)[( ]", line)
    if m:
        used.add(m.group(1))
    m = re.match(r"^\d+\s+socket\((AF_[A-Z0-9]+)", line)
    if m:
        families.add(m.group(1))
# The tracer's view starts at execve, which systemd performs before the filter applies.
used.discard("execve")
outside = sorted(used - permitted)
print(f"system calls used: {len(used)}; outside the filter: {outside or 'none'}")
allowed_families = set(re.search(r"^RestrictAddressFamilies=(.*)$", unit, re.M).group(1).split())
print(f"socket families used: {sorted(families)}; allowed: {sorted(allowed_families)}")
bad_families = sorted(families - allowed_families)
if outside or bad_families:
    sys.exit(f"not allowed by {sys.argv[1]}: calls {outside}, families {bad_families}")
EOF
echo "--- the failures collector's opt-in drop-in (systemd/memlock-exporter-failures.conf)"
# Loaded as systemd loads a drop-in: <unit>.d/ beside the unit. It may only make the service
# root (tracefs is root's) and /sys/kernel/tracing writable: the exposure it adds is printed,
# and the default unit's rating above is the one that must stay OK.
mkdir -p "$OUT/dropin/memlock-exporter.service.d"
cp "$OUT/memlock-exporter.service" "$OUT/dropin/"
cp "$ROOT/systemd/memlock-exporter-failures.conf" "$OUT/dropin/memlock-exporter.service.d/failures.conf"
systemd-analyze verify "$OUT/dropin/memlock-exporter.service"
systemd-analyze security --offline=true "$OUT/dropin/memlock-exporter.service" > "$OUT/security-failures.txt" 2>&1 ||
    true
grep -q "User=/DynamicUser=.*runs as root" "$OUT/security-failures.txt" ||
    { echo "the drop-in was not applied"; exit 1; }
diff <(grep -E "^✗" "$OUT/security.txt" | awk '{print $2}') \
    <(grep -E "^✗" "$OUT/security-failures.txt" | awk '{print $2}') |
    grep -E '^[<>]' > "$OUT/security-diff.txt" || true
[ "$(cat "$OUT/security-diff.txt")" = "> User=/DynamicUser=" ] ||
    { echo "the drop-in weakens more than User=:"; cat "$OUT/security-diff.txt"; exit 1; }
grep "Overall exposure level" "$OUT/security-failures.txt"
grep -E '^(CapabilityBoundingSet|AmbientCapabilities)=' "$ROOT/systemd/memlock-exporter-failures.conf" &&
    { echo "the drop-in must not grant capabilities"; exit 1; }

echo "systemd unit checks passed"
