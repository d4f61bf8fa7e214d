#!/usr/bin/env bash
# Builds the .deb (cargo-deb) and the .rpm (cargo-generate-rpm), checks their contents and
# scripts and man pages, runs lintian on the .deb (no errors allowed), installs the .deb on this
# machine, runs the installed binary as the package's user with the packaged configuration,
# verifies the installed unit, rules and man pages, and purges it again.
#
# Needs root (dpkg -i). Installs cargo-deb and cargo-generate-rpm with `cargo install --locked`
# when missing (several minutes on 2 cores, once per machine), and `rpm` (to read the .rpm) and
# `lintian` with apt-get.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
OUT=${TMPDIR:-/tmp}/memlock-exporter-packages
rm -rf "$OUT" && mkdir -p "$OUT"

fail() { echo "FAIL: $*"; exit 1; }

for tool in cargo-deb cargo-generate-rpm; do
    if ! command -v "$tool" >/dev/null; then
        echo "--- installing $tool"
        cargo install --locked --quiet "$tool"
    fi
done
for tool in rpm lintian; do
    if ! command -v "$tool" >/dev/null; then
        echo "--- installing $tool"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$tool" >/dev/null ||
            { apt-get update -qq &&
                DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$tool" >/dev/null; }
    fi
done

echo "--- release build"
cargo build --release --locked --quiet --bin memlock-exporter
echo "--- man pages"
rm -rf "$TARGET/release/man"
"$TARGET/release/memlock-exporter" manpages "$TARGET/release/man"
pages=()
for page in "$TARGET"/release/man/*.1.gz; do
    pages+=("$(basename "$page")")
done
for command in check estimate drill serve; do
    [ -f "$TARGET/release/man/memlock-exporter-$command.1.gz" ] || fail "no man page for $command"
done

echo "--- cargo deb"
cargo deb --no-build --locked --output "$OUT/" >/dev/null
DEB=$(ls "$OUT"/*.deb)
echo "--- cargo generate-rpm"
cargo generate-rpm --target-dir "$TARGET" --output "$OUT/" >/dev/null
RPM=$(ls "$OUT"/*.rpm)
ls -l "$DEB" "$RPM"

expected=(
    usr/bin/memlock-exporter
    etc/memlock-exporter/config.toml
    usr/lib/sysusers.d/memlock-exporter.conf
    usr/share/memlock-exporter/alerts/memlock-exporter.rules.yml
    usr/lib/memlock-exporter/slurm/healthcheck.sh
    usr/lib/memlock-exporter/slurm/prolog.sh
    usr/lib/memlock-exporter/slurm/memlock-check-lib.sh
    usr/lib/memlock-exporter/slurm/nhc.conf
    etc/memlock-exporter/slurm-check.conf
    usr/share/doc/memlock-exporter/web-config.example.yml
    usr/share/doc/memlock-exporter/README.md
    usr/share/doc/memlock-exporter/check.md
    usr/share/doc/memlock-exporter/slurm.md
)
for dashboard in dashboards/*.json; do
    expected+=("usr/share/memlock-exporter/dashboards/$(basename "$dashboard")")
done

echo "--- .deb contents"
dpkg-deb -c "$DEB" | awk '{print $NF}' | sed 's|^\./||' > "$OUT/deb-files.txt"
for path in "${expected[@]}" etc/default/memlock-exporter usr/lib/systemd/system/memlock-exporter.service \
    "${pages[@]/#/usr/share/man/man1/}" ; do
    grep -qx "$path" "$OUT/deb-files.txt" || fail ".deb lacks $path"
done
# Outputs are captured before grep -q reads them: under pipefail, grep -q leaving at the first
# match makes the writer die of SIGPIPE, and the pipeline fail, whenever it had more to write.
grep -qE '^-rwxr-xr-x .* \./usr/bin/memlock-exporter$' <<< "$(dpkg-deb -c "$DEB")" || fail "the binary is not mode 755"
dpkg-deb -f "$DEB" Package Version Depends | tee "$OUT/deb-control.txt"
grep -q '^Depends:.*libc6' "$OUT/deb-control.txt" || fail "no libc6 dependency"
dpkg-deb -e "$DEB" "$OUT/DEBIAN"
grep -qx /etc/memlock-exporter/config.toml "$OUT/DEBIAN/conffiles" || fail "config.toml is not a conffile"
grep -qx /etc/default/memlock-exporter "$OUT/DEBIAN/conffiles" || fail "the environment file is not a conffile"
grep -qx /etc/memlock-exporter/slurm-check.conf "$OUT/DEBIAN/conffiles" || fail "the Slurm settings are not a conffile"
grep -q systemd-sysusers "$OUT/DEBIAN/postinst" || fail "postinst does not create the user"
grep -q deb-systemd-helper "$OUT/DEBIAN/postinst" || fail "postinst does not enable the unit"
# Where systemd is absent (a container image) configure must still succeed and create the user: the
# postinst runs with every command on PATH but systemd-sysusers.
nosystemd="$OUT/path-without-systemd"
mkdir -p "$nosystemd"
for tool in /usr/sbin/* /usr/bin/*; do
    case "$(basename "$tool")" in systemd-sysusers) ;; *) ln -sf "$tool" "$nosystemd/" ;; esac
done
PATH="$nosystemd" command -v systemd-sysusers >/dev/null && fail "systemd-sysusers is still on the test PATH"
userdel memlock-exporter >/dev/null 2>&1 || true
PATH="$nosystemd" sh "$OUT/DEBIAN/postinst" configure || fail "postinst configure fails without systemd-sysusers"
getent passwd memlock-exporter >/dev/null || fail "postinst created no user without systemd-sysusers"

echo "--- lintian"
# Errors fail the run (lintian exits non-zero on them, or when it cannot run); warnings and
# information are printed for the reader.
lintian_status=0
lintian --info "$DEB" > "$OUT/lintian.txt" 2>&1 || lintian_status=$?
cat "$OUT/lintian.txt"
! grep -q '^E: ' "$OUT/lintian.txt" || fail "lintian reports errors on the .deb"
[ "$lintian_status" = 0 ] || fail "lintian exited with $lintian_status"

echo "--- .rpm contents"
rpm -qlp "$RPM" 2>/dev/null | sed 's|^/||' > "$OUT/rpm-files.txt"
for path in "${expected[@]}" etc/sysconfig/memlock-exporter usr/lib/systemd/system/memlock-exporter.service \
    "${pages[@]/#/usr/share/man/man1/}"; do
    grep -qx "$path" "$OUT/rpm-files.txt" || fail ".rpm lacks $path"
done
grep -qx /etc/memlock-exporter/config.toml <<< "$(rpm -qp --configfiles "$RPM" 2>/dev/null)" ||
    fail "config.toml is not %config in the .rpm"
rpm -qp --scripts "$RPM" 2>/dev/null > "$OUT/rpm-scripts.txt"
grep -q 'useradd -r -g memlock-exporter' "$OUT/rpm-scripts.txt" || fail ".rpm does not create the user"
rpm -qp --queryformat '%{NAME} %{VERSION} %{ARCH}\n' "$RPM" 2>/dev/null
# The .rpm carries the bytes just built (its file digests are SHA-256), with the right modes.
rpm -qp --dump "$RPM" 2>/dev/null > "$OUT/rpm-dump.txt"
digest_mode() { awk -v p="$1" '$1 == p {print $4, $5}' "$OUT/rpm-dump.txt"; }
[ "$(digest_mode /usr/bin/memlock-exporter)" = \
    "$(sha256sum < "$TARGET/release/memlock-exporter" | cut -d' ' -f1) 0100755" ] ||
    fail "the .rpm's binary is not the one built, or not mode 755"
[ "$(digest_mode /usr/lib/systemd/system/memlock-exporter.service)" = \
    "$(sha256sum < systemd/memlock-exporter.service | cut -d' ' -f1) 0100644" ] ||
    fail "the .rpm's unit differs from systemd/memlock-exporter.service"

echo "--- install the .deb"
dpkg --purge memlock-exporter >/dev/null 2>&1 || true
cleanup() {
    dpkg --purge memlock-exporter >/dev/null 2>&1 || true
    [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null || true
}
trap cleanup EXIT
dpkg -i "$DEB" >/dev/null
grep -q '^Status: install ok installed' <<< "$(dpkg -s memlock-exporter)" || fail "not installed"
getent passwd memlock-exporter >/dev/null || fail "the memlock-exporter user was not created"
/usr/bin/memlock-exporter --version
for page in "${pages[@]}"; do
    grep -q "^\.TH ${page%.1.gz} 1" <<< "$(zcat "/usr/share/man/man1/$page")" || fail "installed man page $page"
done
systemd-analyze verify /usr/lib/systemd/system/memlock-exporter.service || fail "the installed unit does not verify"
if command -v promtool >/dev/null; then
    promtool check rules /usr/share/memlock-exporter/alerts/memlock-exporter.rules.yml >/dev/null ||
        fail "installed rules"
fi
for dashboard in /usr/share/memlock-exporter/dashboards/*.json; do
    python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$dashboard" || fail "$dashboard is not JSON"
done

echo "--- run the installed binary as the service user, with the packaged configuration"
log="$OUT/daemon.log"
# As the unit does: the package's user and the packaged config file.
setpriv --reuid=memlock-exporter --regid=memlock-exporter --clear-groups \
    /usr/bin/memlock-exporter --config.file=/etc/memlock-exporter/config.toml \
    --web.listen-address=127.0.0.1:0 --log.format=json 2> "$log" &
pid=$!
address=""
for _ in $(seq 100); do
    address=$(grep -o '"address":"[^"]*"' "$log" 2>/dev/null | head -1 | cut -d'"' -f4 || true)
    [ -n "$address" ] && break
    sleep 0.1
done
[ -n "$address" ] || { cat "$log"; fail "the installed binary did not start"; }
for _ in $(seq 100); do
    [ "$(curl -s --noproxy '*' -o /dev/null -w '%{http_code}' "http://$address/-/ready")" = 200 ] && break
    sleep 0.1
done
curl -sS --noproxy '*' "http://$address/metrics" > "$OUT/metrics.txt"
grep -q '^memlock_node_mlocked_bytes ' "$OUT/metrics.txt" || fail "no node metrics from the installed binary"
grep -q '^memlock_scrape_collector_success{collector="process"} 1' "$OUT/metrics.txt" ||
    fail "the process collector fails as the service user"
grep -q '^memlock_exporter_config_last_reload_successful 1' "$OUT/metrics.txt" ||
    fail "the packaged config did not load"
kill -TERM "$pid" && wait "$pid" || fail "the installed binary did not stop cleanly"
pid=""

echo "--- purge"
dpkg --purge memlock-exporter >/dev/null
[ ! -e /usr/bin/memlock-exporter ] || fail "the binary is still installed after purge"
[ ! -e /etc/memlock-exporter/config.toml ] || fail "the conffile is still there after purge"
trap - EXIT
echo "packages: $(basename "$DEB") $(du -h "$DEB" | cut -f1)," \
    "$(basename "$RPM") $(du -h "$RPM" | cut -f1); all checks passed"
