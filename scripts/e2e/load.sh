#!/usr/bin/env bash
# Load: 50 and 200 concurrent scrapers (wrk) against the exporter serving a snapshot of about
# 5,000 series (real memory cgroups with limits, created here), and in the same run against
# node_exporter serving only its meminfo collector; then slow clients (one byte per second)
# next to normal scrapes. Each level runs twice: saturated (every scraper sends its next
# request as soon as the last is answered: throughput, and latency that is mostly queueing)
# and paced (every scraper 10 requests per second: the latency of a scrape). Prints p50/p99
# latency, requests per second, errors, CPU (share of one core, from /proc/PID/stat) and
# resident memory (VmRSS at the end, VmHWM during the level).
#
#   bash scripts/e2e/load.sh      CI: 10 s per run, the debug build; fails on any error
#   DURATION=60 MEMLOCK_EXPORTER_BIN=target/release/memlock-exporter bash scripts/e2e/load.sh
#                                 the figures in docs/benchmarks.md
#
# Loopback only. Needs root (memory cgroups, apt-get for wrk when missing).
set -uo pipefail
source "$(dirname "$0")/lib.bash"

DURATION=${DURATION:-10}
LEVELS=${LEVELS:-"50 200"}
CGROUPS=${CGROUPS:-700}
SLOW_CLIENTS=${SLOW_CLIENTS:-100}
[ "$(id -u)" = 0 ] || fail "needs root (memory cgroups)"
[ -x "$BIN" ] || fail "$BIN not built"
if ! command -v wrk >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends wrk >/dev/null ||
        fail "cannot install wrk"
fi
NODE_EXPORTER=$(command -v prometheus-node-exporter || command -v node_exporter) ||
    fail "node_exporter is not installed (apt-get install prometheus-node-exporter)"

MEMORY=/sys/fs/cgroup/memory
CGROUP_BASE=$MEMORY/memlock-load-$$
remove_cgroups() {
    [ -d "$CGROUP_BASE" ] || return 0
    for dir in "$CGROUP_BASE"/c*; do
        [ -d "$dir" ] && rmdir "$dir"
    done
    rmdir "$CGROUP_BASE"
}
on_exit remove_cgroups

# Real, empty v1 memory cgroups with a limit: each is ~7 series (usage, limit, unlimited,
# unevictable, two event counters, a trend), so 700 make a snapshot of about 5,000 series.
[ -f "$MEMORY/memory.usage_in_bytes" ] || fail "no v1 memory hierarchy at $MEMORY"
mkdir "$CGROUP_BASE" || fail "mkdir $CGROUP_BASE"
for i in $(seq "$CGROUPS"); do
    mkdir "$CGROUP_BASE/c$i" && echo $((256 << 20)) > "$CGROUP_BASE/c$i/memory.limit_in_bytes" || fail "cgroup c$i"
done

# web.max_requests 0: the default (40) answers scrapers beyond 40 with 503 at once, by design;
# this measures latency, so every request is served. series.limit 0: the default budget (500
# series) would cut the 5,000-series snapshot this measures down to its page tier.
start_exporter --web.max-requests=0 --series.limit=0
# Trend series appear after three samples of each cgroup.
for _ in $(seq 100); do
    [ "$(curl -fsS "$EXPORTER_URL/metrics" |
        grep -c 'memlock_trend_rise_bytes_per_second{scope="cgroup",cgroup="/memlock-load')" -ge "$CGROUPS" ] && break
    sleep 0.1
done
SERIES=$(curl -fsS "$EXPORTER_URL/metrics" | grep -vc '^#')
BYTES=$(curl -fsS "$EXPORTER_URL/metrics" | wc -c)

NODE_PORT=$(free_port)
# Its --web.max-requests (default 40) lifted too, so both serve every scraper.
"$NODE_EXPORTER" --collector.disable-defaults --collector.meminfo --web.max-requests=0 \
    --web.listen-address="127.0.0.1:$NODE_PORT" > "$E2E_TMP/node_exporter.log" 2>&1 &
NODE_PID=$!
E2E_PIDS+=($NODE_PID)
NODE_URL=http://127.0.0.1:$NODE_PORT
wait_http "$NODE_URL/metrics" 30 || { cat "$E2E_TMP/node_exporter.log"; fail "node_exporter did not start"; }
NODE_SERIES=$(curl -fsS "$NODE_URL/metrics" | grep -vc '^#')
NODE_BYTES=$(curl -fsS "$NODE_URL/metrics" | wc -c)
log "exporter: $SERIES series ($BYTES bytes) at $EXPORTER_URL (pid $EXPORTER_PID, $BIN)"
log "node_exporter $("$NODE_EXPORTER" --version 2>&1 | head -1 | awk '{print $3}'):" \
    "$NODE_SERIES series ($NODE_BYTES bytes) at $NODE_URL (pid $NODE_PID)"

CLK_TCK=$(getconf CLK_TCK)
cpu_ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
status_kib() { awk -v key="$2:" '$1 == key {print $2}' "/proc/$1/status"; }
# wrk prints 1.23us, 4.56ms or 1.2s: milliseconds.
to_ms() {
    awk '{v=$1; if (v ~ /us$/) {sub(/us$/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms$/,"",v)} else
        if (v ~ /s$/) {sub(/s$/,"",v); v*=1000}; printf "%.2f", v}'
}

RESULTS=$E2E_TMP/results.md
echo "| target | series | scrapers | mode | p50 ms | p99 ms | requests/s | errors |" \
    "CPU % of a core | VmRSS MiB end / peak |" > "$RESULTS"
echo "|---|---|---|---|---|---|---|---|---|---|" >> "$RESULTS"
FAILED=0
# wrk waits delay() ms before each request of a connection; latency is measured from the write.
echo 'function delay() return 100 end' > "$E2E_TMP/paced.lua"

# run_level NAME URL PID SERIES SCRAPERS MODE [LABEL]: one wrk run (MODE saturated or paced);
# appends a row, sets ERRORS and P99.
run_level() {
    local name=$1 url=$2 pid=$3 series=$4 scrapers=$5 mode=$6 label=${7:-$1}
    local out=$E2E_TMP/wrk-$name-$scrapers-$mode.txt
    local script=()
    [ "$mode" = paced ] && script=(-s "$E2E_TMP/paced.lua")
    # Resets VmHWM, so the peak is this level's.
    echo 5 > "/proc/$pid/clear_refs"
    local before after
    before=$(cpu_ticks "$pid")
    wrk -t2 -c"$scrapers" -d"${DURATION}s" --timeout 10s --latency "${script[@]}" "$url/metrics" > "$out" 2>&1
    after=$(cpu_ticks "$pid")
    local p50 p99 rps socket non2xx
    p50=$(awk '$1 == "50%" {print $2}' "$out" | to_ms)
    p99=$(awk '$1 == "99%" {print $2}' "$out" | to_ms)
    rps=$(awk '$1 == "Requests/sec:" {printf "%.0f", $2}' "$out")
    socket=$(awk '/Socket errors:/ {gsub(",", ""); print $4 + $6 + $8 + $10}' "$out")
    non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $5}' "$out")
    ERRORS=$(( ${socket:-0} + ${non2xx:-0} ))
    P99=$p99
    local cpu rss hwm
    cpu=$(awk -v t=$((after - before)) -v hz="$CLK_TCK" -v d="$DURATION" 'BEGIN {printf "%.0f", t / hz / d * 100}')
    rss=$(awk -v k="$(status_kib "$pid" VmRSS)" 'BEGIN {printf "%.1f", k / 1024}')
    hwm=$(awk -v k="$(status_kib "$pid" VmHWM)" 'BEGIN {printf "%.1f", k / 1024}')
    [ -n "$p50" ] && [ -n "$rps" ] || { cat "$out"; fail "cannot read wrk's output"; }
    echo "| $label | $series | $scrapers | $mode | $p50 | $p99 | $rps | $ERRORS | $cpu | $rss / $hwm |" >> "$RESULTS"
    log "$label, $scrapers scrapers, $mode: p50 ${p50} ms, p99 ${p99} ms, ${rps}/s, $ERRORS errors, CPU ${cpu}%," \
        "RSS ${rss} MiB (peak ${hwm})"
}

for scrapers in $LEVELS; do
    for mode in saturated paced; do
        run_level memlock "$EXPORTER_URL" "$EXPORTER_PID" "$SERIES" "$scrapers" "$mode" memlock-exporter
        [ "$ERRORS" = 0 ] ||
            { cat "$E2E_TMP/wrk-memlock-$scrapers-$mode.txt"; log "FAIL: $ERRORS errors from the exporter"; FAILED=1; }
        run_level node "$NODE_URL" "$NODE_PID" "$NODE_SERIES" "$scrapers" "$mode" "node_exporter (meminfo)"
    done
done

# gzip (issue 17): bytes and CPU per scrape with and without it, for both servers, 50 paced
# scrapers (what a fleet of Prometheus servers does; Prometheus always sends Accept-Encoding:
# gzip). The exporter compresses a snapshot's text once and shares it; node_exporter (Go's
# promhttp) compresses every response.
GZIP_RESULTS=$E2E_TMP/gzip.md
echo "| target | encoding | series | bytes per scrape | requests/s | CPU % of a core | CPU µs per scrape |" \
    > "$GZIP_RESULTS"
echo "|---|---|---|---|---|---|---|" >> "$GZIP_RESULTS"
# run_encoding NAME URL PID SERIES ENCODING: one paced wrk run; appends a row.
run_encoding() {
    local name=$1 url=$2 pid=$3 series=$4 encoding=$5
    local out=$E2E_TMP/wrk-$name-$encoding.txt header=()
    [ "$encoding" = gzip ] && header=(-H "Accept-Encoding: gzip")
    local bytes
    bytes=$(curl -fsS "${header[@]}" -o /dev/null -w '%{size_download}' "$url/metrics") ||
        fail "$name: scrape with $encoding"
    if [ "$encoding" = gzip ]; then
        curl -fsS "${header[@]}" -D - -o /dev/null "$url/metrics" | grep -qi '^content-encoding: gzip' ||
            fail "$name: no gzip body"
    fi
    local before after
    before=$(cpu_ticks "$pid")
    wrk -t2 -c50 -d"${DURATION}s" --timeout 10s -s "$E2E_TMP/paced.lua" "${header[@]}" "$url/metrics" > "$out" 2>&1
    after=$(cpu_ticks "$pid")
    local requests rps socket non2xx
    requests=$(awk '/requests in/ {print $1}' "$out")
    rps=$(awk '$1 == "Requests/sec:" {printf "%.0f", $2}' "$out")
    socket=$(awk '/Socket errors:/ {gsub(",", ""); print $4 + $6 + $8 + $10}' "$out")
    non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $5}' "$out")
    [ -n "$requests" ] && [ "$requests" -gt 0 ] || { cat "$out"; fail "cannot read wrk's output"; }
    [ $(( ${socket:-0} + ${non2xx:-0} )) = 0 ] ||
        { cat "$out"; log "FAIL: errors from $name with $encoding"; FAILED=1; }
    local cpu per
    cpu=$(awk -v t=$((after - before)) -v hz="$CLK_TCK" -v d="$DURATION" 'BEGIN {printf "%.0f", t / hz / d * 100}')
    per=$(awk -v t=$((after - before)) -v hz="$CLK_TCK" -v n="$requests" 'BEGIN {printf "%.0f", t / hz / n * 1e6}')
    echo "| $name | $encoding | $series | $bytes | $rps | $cpu | $per |" >> "$GZIP_RESULTS"
    log "$name, $encoding: $bytes bytes per scrape, ${rps}/s, CPU ${cpu}%, ${per} µs per scrape"
}
for encoding in identity gzip; do
    run_encoding memlock-exporter "$EXPORTER_URL" "$EXPORTER_PID" "$SERIES" "$encoding"
    run_encoding "node_exporter (meminfo)" "$NODE_URL" "$NODE_PID" "$NODE_SERIES" "$encoding"
done

# Slow clients: each sends one byte of a request per second and never finishes its headers.
# They must not hold up anyone else; the header timeout (10 s) closes them.
python3 - "$EXPORTER_PORT" "$SLOW_CLIENTS" "$((DURATION + 15))" > "$E2E_TMP/slow.txt" 2>&1 <<'PY' &
import socket, sys, time
port, count, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
request = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 1000
clients = []
for _ in range(count):
    s = socket.create_connection(("127.0.0.1", port))
    s.setblocking(False)
    clients.append(s)
start = time.time()
closed = {}
i = 0
while time.time() - start < seconds and len(closed) < count:
    for n, s in enumerate(clients):
        if n in closed:
            continue
        try:
            s.send(request[i % len(request):i % len(request) + 1])
            if s.recv(1024) == b"":
                closed[n] = time.time() - start
        except BlockingIOError:
            pass
        except OSError:
            closed[n] = time.time() - start
    i += 1
    time.sleep(1)
times = sorted(closed.values())
print(f"slow clients: {count} connected, {len(closed)} closed by the server, after {times[0]:.1f} to {times[-1]:.1f} s"
      if times else f"slow clients: {count} connected, none closed in {seconds:.0f} s")
PY
SLOW_PID=$!
E2E_PIDS+=($SLOW_PID)
sleep 2
run_level memlock-slow "$EXPORTER_URL" "$EXPORTER_PID" "$SERIES" 50 saturated \
    "memlock-exporter, $SLOW_CLIENTS slow clients connected"
[ "$ERRORS" = 0 ] || { log "FAIL: $ERRORS errors next to slow clients"; FAILED=1; }
# A plain scrape next to them: answered at once, not after the slow ones.
single=$(curl -fsS -o /dev/null -w '%{time_total}' "$EXPORTER_URL/metrics") ||
    { log "FAIL: a scrape next to slow clients failed"; FAILED=1; }
log "one scrape next to $SLOW_CLIENTS slow clients: ${single} s"
awk -v t="${single:-99}" 'BEGIN {exit !(t < 1.0)}' ||
    { log "FAIL: a scrape next to slow clients took ${single} s"; FAILED=1; }
wait "$SLOW_PID"
cat "$E2E_TMP/slow.txt"
grep -q "closed by the server" "$E2E_TMP/slow.txt" || { log "FAIL: slow clients were never disconnected"; FAILED=1; }

echo
cat "$RESULTS"
echo
cat "$GZIP_RESULTS"
echo
echo "$(nproc) CPUs, $(uname -r), wrk -t2 --timeout 10s (paced: 100 ms between a scraper's requests)," \
    "${DURATION} s per level, exporter $("$BIN" --version 2>&1 | head -1)"
[ "$FAILED" = 0 ] || fail "load test failed"
log "load test passed"
