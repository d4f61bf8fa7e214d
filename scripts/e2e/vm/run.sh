#!/usr/bin/env bash
# Runs one scenario script inside a QEMU VM (TCG, no KVM needed) that boots Debian's own 6.1
# kernel (linux-image-amd64) with a small initramfs: real soft-RoCE (rdma_rxe), cgroup v2 only,
# kprobes and tracefs, no network (-nic none) but what the scenario creates (dummy, veth).
#
#   scripts/e2e/vm/run.sh [OPTIONS] SCENARIO [ARGS...]
#
#   --copy PATH[:NAME]  copy an executable into the guest as /vm/bin/NAME (default: its base
#                       name), with the libraries ldd names that the base initramfs lacks (in
#                       /vm/lib, on LD_LIBRARY_PATH then), or a directory. Repeatable.
#   --exporter PATH     the exporter (default $MEMLOCK_EXPORTER_BIN, else
#                       $CARGO_TARGET_DIR/debug/memlock-exporter); a stripped copy is
#                       /vm/bin/memlock-exporter
#   --out DIR           leave the guest's /vm/out in DIR (default: a new /tmp/memlock-vm.*/out,
#                       printed at the end)
#   --memory SIZE       the guest's memory (QEMU -m; default 1G)
#   --timeout SECONDS   the scenario's limit inside the guest (default 240); the VM gets 300 s
#                       more to boot and power off (TCG on a shared CPU boots in 5-30 s)
#   --prepare           only install the tools and build the cached assets; no VM
#
# Inside the guest the scenario runs as root, as PID 1's child, from /tmp, with ARGS, under
# bash when it starts with a bash shebang (busybox sh otherwise). It finds:
#   /vm/bin/memlock-exporter   the exporter; /vm/bin is first on PATH
#   /vm/bin/mr-ramp            registers MRs (--step-mib) with ibv_reg_mr until ENOMEM (mr_ramp.c)
#   /vm/bin/webhook-sink       an Alertmanager webhook receiver (webhook_sink.c)
#   /usr/lib/memlock-vm/lib.sh helpers: wait_for, setup_rxe, start_webhook, start_alertmanager,
#                              start_exporter, scrape, metric_is, now, vm_fail (guest/lib.sh)
#   /vm/out                    a directory shared with the host: what the scenario writes there
#                              is in --out DIR afterwards, with console.log (the serial
#                              console), scenario.log (its output), dmesg.txt and rc
#   bash, busybox, ip, rdma, curl, setpriv, prlimit, ibv_devinfo, ibv_rc_pingpong, ib_write_bw,
#   prometheus-alertmanager, prometheus-node-exporter (Debian unstable's); modules loaded: rdma_rxe, ib_uverbs,
#   dummy, veth (MEMLOCK_VM_MODULES="a b" loads more); /sys/fs/cgroup is cgroup2;
#   /sys/kernel/tracing is tracefs; user mrtest is uid 1000.
#
# Exit status: the scenario's; 125 when the VM could not be prepared, did not boot, or ended
# without the scenario's status (the reason is printed with the console's last lines). Assets
# are cached in $MEMLOCK_VM_CACHE (default ${XDG_CACHE_HOME:-/var/cache}/memlock-exporter-vm);
# only the exporter and the --copy files are copied on each run. Needs root (apt-get, depmod).
set -uo pipefail
VM_DIR=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$VM_DIR/../../.." && pwd)
# shellcheck source=scripts/e2e/vm/assets.sh
source "$VM_DIR/assets.sh"

harness_fail() {
    vm_log "FAILED: $*"
    exit 125
}

copies=()
exporter=${MEMLOCK_EXPORTER_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/memlock-exporter}
out=""
limit=240
memory=1G
prepare=0
while [ $# -gt 0 ]; do
    case $1 in
        --copy) copies+=("$2"); shift 2 ;;
        --exporter) exporter=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --timeout) limit=$2; shift 2 ;;
        --memory) memory=$2; shift 2 ;;
        --prepare) prepare=1; shift ;;
        --) shift; break ;;
        -*) harness_fail "unknown option $1 (see the top of $0)" ;;
        *) break ;;
    esac
done
[ $prepare = 1 ] || [ $# -ge 1 ] || harness_fail "usage: $0 [OPTIONS] SCENARIO [ARGS...]"
[ "$(id -u)" = 0 ] || harness_fail "needs root (apt-get, depmod, the cache in $VM_CACHE)"

mkdir -p "$VM_CACHE" || harness_fail "cannot create $VM_CACHE"
started=$SECONDS
# MEMLOCK_VM_PREPARED=FILE: `--prepare` writes what it prepared to FILE, and a run finding FILE
# uses it as it is (scripts/e2e/vm.sh: one preparation for all its VMs, which would otherwise
# queue on the lock below to find each time that nothing changed).
prepared=${MEMLOCK_VM_PREPARED:-}
if [ $prepare = 0 ] && [ -n "$prepared" ] && [ -s "$prepared" ]; then
    # shellcheck disable=SC1090 # written by --prepare below
    source "$prepared"
    if [ ! -s "$VM_BASE" ] || [ ! -x "$sink" ] || [ ! -x "$ramp" ]; then
        harness_fail "$prepared names missing assets"
    fi
else
    # One preparation at a time (helpers and CI jobs share the cache); the VMs themselves run in
    # parallel, each on its own copy of what changes.
    exec 9> "$VM_CACHE/lock"
    flock 9
    vm_install_tools || harness_fail "tools"
    vm_kernel || harness_fail "kernel"
    vm_node_exporter || harness_fail "node_exporter"
    vm_base || harness_fail "base initramfs"
    sink=$(vm_helper webhook_sink) || harness_fail "webhook_sink.c"
    ramp=$(vm_helper mr_ramp) || harness_fail "mr_ramp.c"
    vm_log "assets ready in $((SECONDS - started))s: $VM_KVER, $(du -h "$VM_BASE" | cut -f1) base"
    if [ $prepare = 1 ]; then
        [ -n "$prepared" ] && declare -p VM_KVER VM_KERNEL_ROOT VM_BASE VM_BASE_FILES sink ramp > "$prepared"
        exit 0
    fi
    exec 9>&-
fi

scenario=$1
shift
[ -f "$scenario" ] || harness_fail "no scenario $scenario"
[ -x "$exporter" ] || harness_fail "no exporter at $exporter (cargo build first, or --exporter)"

run=$(mktemp -d /tmp/memlock-vm.XXXXXX)
# The guest's unprivileged users run /vm/bin too (mktemp made /vm 0700).
chmod 0755 "$run"
mkdir -p "$run/bin" "$run/lib" "$run/out"
strip -o "$run/bin/memlock-exporter" "$exporter" || harness_fail "strip $exporter"
cp "$sink" "$run/bin/webhook-sink" || harness_fail "cp $sink"
cp "$ramp" "$run/bin/mr-ramp" || harness_fail "cp $ramp"
# copy_libs FILE: the libraries FILE needs that the base lacks, into /vm/lib. A library ldd
# cannot find fails the run with its name: the guest would fail later, and less clearly.
copy_libs() {
    local lib libs
    libs=$(ldd "$1" 2>&1)
    case $libs in
        *"not a dynamic executable"*) return 0 ;;
    esac
    if grep -q 'not found' <<< "$libs"; then
        harness_fail "$1 needs libraries ldd does not find: $(grep 'not found' <<< "$libs" | tr -s ' \t\n' ' ')"
    fi
    while read -r lib; do
        grep -qxF "$lib" "$VM_BASE_FILES" || grep -qxF "/usr$lib" "$VM_BASE_FILES" ||
            cp -L "$lib" "$run/lib/" || harness_fail "cp $lib (a library of $1)"
    done < <(awk '/=> \// {print $3}' <<< "$libs")
}
copy_libs "$exporter"
for copy in "${copies[@]}"; do
    src=${copy%%:*}
    name=${copy#*:}
    [ "$name" = "$copy" ] && name=$(basename "$src")
    [ -e "$src" ] || harness_fail "--copy $src: no such file"
    # A file is copied through its links; a tree keeps its own (fixture trees hold links that
    # name paths of another host, such as /proc/PID/exe, which dangle here).
    if [ -d "$src" ]; then
        cp -rP "$src" "$run/bin/$name" || harness_fail "--copy $src: cp failed"
    else
        cp -L "$src" "$run/bin/$name" || harness_fail "--copy $src: cp failed"
    fi
    [ -f "$src" ] && copy_libs "$src"
done
cp "$scenario" "$run/scenario" || harness_fail "cp $scenario"
chmod 0755 "$run/scenario" "$run/bin"/*
echo "$limit" > "$run/timeout"
{
    [ -n "$(ls "$run/lib")" ] && echo "export LD_LIBRARY_PATH=/vm/lib"
    interpreter="sh"
    head -1 "$scenario" | grep -q bash && interpreter=bash
    printf 'cd /tmp && exec %s /vm/scenario' "$interpreter"
    for arg in "$@"; do printf " '%s'" "${arg//\'/\'\\\'\'}"; done
    echo
} > "$run/start"

# The executables go in the initramfs, after the base (the kernel unpacks one cpio after the
# other, each 4-byte aligned; this one uncompressed: nothing to inflate under TCG), not over 9p.
mkdir -p "$run/initrd/vmrun"
mv "$run/bin" "$run/lib" "$run/initrd/vmrun/"
cp "$VM_BASE" "$run/initrd.img" || harness_fail "cp $VM_BASE"
head -c $(( (512 - $(stat -c %s "$VM_BASE") % 512) % 512 )) /dev/zero >> "$run/initrd.img"
(cd "$run/initrd" && find . | cpio -o -H newc --quiet >> "$run/initrd.img") || harness_fail "cpio of /vmrun"
rm -rf "$run/initrd"

console=$run/out/console.log
vm_log "booting $VM_KVER (TCG), scenario $(basename "$scenario"), console in $console"
booted=$SECONDS
timeout -k 10 $((limit + 300)) qemu-system-x86_64 -accel tcg -cpu max -smp 2 -m "$memory" \
    -display none -monitor none -serial "file:$console" -nic none -no-reboot \
    -kernel "$VM_KERNEL_ROOT/boot/vmlinuz-$VM_KVER" -initrd "$run/initrd.img" \
    -append "console=ttyS0 rdinit=/init panic=-1 quiet mitigations=off" \
    -virtfs "local,path=$run,mount_tag=vm,security_model=none,id=vm" \
    > "$run/out/qemu.log" 2>&1
qemu_rc=$?
vm_log "VM ran $((SECONDS - booted))s (qemu exit $qemu_rc)"
rm -f "$run/initrd.img"
if [ -n "$out" ]; then
    mkdir -p "$out" && cp -a "$run/out/." "$out/" && rm -rf "$run"
else
    out=$run/out
fi
vm_log "guest output in $out"
if [ ! -s "$out/rc" ]; then
    [ -s "$out/qemu.log" ] && cat "$out/qemu.log" >&2
    tail -30 "$out/console.log" >&2
    reason=$(grep -m1 -E 'memlock-vm: (\[[0-9.]*s\] )?FAILED|Kernel panic' "$out/console.log")
    [ $qemu_rc = 124 ] && reason="the VM was still running after $((limit + 300))s${reason:+; $reason}"
    grep -q 'memlock-vm: .*kernel' "$out/console.log" || reason="the VM did not boot${reason:+; $reason}"
    harness_fail "the scenario left no exit status: ${reason:-see $out/console.log}"
fi
exit "$(cat "$out/rc")"
