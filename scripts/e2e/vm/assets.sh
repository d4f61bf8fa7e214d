# shellcheck shell=bash
# The VM's cached assets (sourced by run.sh, not run): Debian's kernel image unpacked with its
# module index, and the base initramfs (busybox, the modules, the RDMA, network and Prometheus
# tools with the libraries ldd names). Both live in $VM_CACHE, outside the repository, and are
# rebuilt only when their inputs change: the kernel package's version, this file, guest/ and the
# versions of the Debian packages copied in. Every failure names what is missing and returns 1.

VM_CACHE=${MEMLOCK_VM_CACHE:-${XDG_CACHE_HOME:-/var/cache}/memlock-exporter-vm}
VM_DIR=${VM_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
MULTIARCH=x86_64-linux-gnu

# Debian packages the harness needs on the host: QEMU, and what it copies into the guest.
VM_PACKAGES=(qemu-system-x86 busybox-static cpio gcc libc6-dev libibverbs-dev ibverbs-providers ibverbs-utils
    perftest iproute2 curl util-linux bash kmod prometheus-alertmanager)

# Executables copied into the guest (at the same path) with the libraries ldd names.
VM_BINARIES=(/usr/bin/bash /usr/sbin/ip /usr/bin/rdma /usr/bin/curl /usr/bin/setpriv /usr/bin/prlimit
    /usr/bin/ibv_devinfo /usr/bin/ibv_devices /usr/bin/ibv_rc_pingpong /usr/bin/ib_write_bw /usr/bin/ib_send_bw
    /usr/bin/prometheus-alertmanager)
# Loaded with dlopen, so ldd does not name them: libibverbs' provider for rxe and its config,
# and libibverbs itself for `drill --mode rdma`. libgcc_s: the exporter's unwinder.
VM_DLOPENED=("/usr/lib/$MULTIARCH/libibverbs/librxe-rdmav34.so" "/usr/lib/$MULTIARCH/libibverbs.so.1"
    "/usr/lib/$MULTIARCH/libgcc_s.so.1")
VM_FILES=(/etc/libibverbs.d/rxe.driver /usr/share/prometheus/alertmanager)

# Modules loaded at boot, in this order, each after its dependencies (modprobe --show-depends).
# crc32_generic first: rdma_rxe asks the crypto API for "crc32" (rxe_icrc_init), which the
# kernel has no built-in provider of. MEMLOCK_VM_MODULES adds more (space-separated names).
VM_MODULES=(virtio_pci 9pnet_virtio 9p crc32_generic rdma_rxe ib_uverbs dummy veth)
# shellcheck disable=SC2206 # a list of names
[ -n "${MEMLOCK_VM_MODULES:-}" ] && VM_MODULES+=(${MEMLOCK_VM_MODULES})

vm_log() { echo "[vm $(date +%T)] $*" >&2; }

# vm_install_tools: installs the Debian packages that are missing (none on a warm machine).
vm_install_tools() {
    local missing=() pkg
    for pkg in "${VM_PACKAGES[@]}"; do
        dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    vm_log "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    for _ in 1 2 3 4 5 6; do
        # Another apt-get may hold the lock for a minute.
        apt-get install -y -qq --no-install-recommends "${missing[@]}" > "$VM_CACHE/apt.log" 2>&1 && return 0
        grep -q 'Unable to locate package\|has no installation candidate' "$VM_CACHE/apt.log" &&
            { apt-get update -qq >/dev/null 2>&1 || true; }
        sleep 10
    done
    cat "$VM_CACHE/apt.log" >&2
    vm_log "FAILED: cannot install ${missing[*]}"
    return 1
}

# vm_kernel: sets VM_KVER and VM_KERNEL_ROOT (the unpacked package, modules indexed) for the
# 6.1 kernel linux-image-amd64 depends on; downloads it only when that version is not cached.
vm_kernel() {
    local image
    image=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
    if [ -z "$image" ]; then
        # Offline or no package lists: the newest kernel already cached.
        image=$(find "$VM_CACHE" -maxdepth 1 -name 'kernel-linux-image-*' -printf '%f\n' | sed 's|^kernel-||' |
            sort -V | tail -1)
        [ -n "$image" ] || { vm_log "FAILED: apt-cache knows no linux-image-amd64 and nothing is cached"; return 1; }
        vm_log "linux-image-amd64 unknown to apt-cache; using the cached $image"
    fi
    VM_KVER=${image#linux-image-}
    VM_KERNEL_ROOT=$VM_CACHE/kernel-$image
    [ -e "$VM_KERNEL_ROOT/.done" ] && return 0
    vm_log "fetching $image"
    local tmp
    tmp=$(mktemp -d "$VM_CACHE/download.XXXXXX")
    (cd "$tmp" && apt-get download "$image" > download.log 2>&1) ||
        { cat "$tmp/download.log" >&2; rm -rf "$tmp"; vm_log "FAILED: apt-get download $image"; return 1; }
    rm -rf "$VM_KERNEL_ROOT"
    dpkg-deb -x "$tmp"/"$image"_*.deb "$VM_KERNEL_ROOT" ||
        { rm -rf "$tmp"; vm_log "FAILED: dpkg-deb -x $image"; return 1; }
    rm -rf "$tmp"
    depmod -b "$VM_KERNEL_ROOT" "$VM_KVER" || { vm_log "FAILED: depmod -b $VM_KERNEL_ROOT $VM_KVER"; return 1; }
    [ -f "$VM_KERNEL_ROOT/boot/vmlinuz-$VM_KVER" ] || { vm_log "FAILED: no vmlinuz in $image"; return 1; }
    touch "$VM_KERNEL_ROOT/.done"
}

# vm_node_exporter: sets VM_NODE_EXPORTER, node_exporter from Debian unstable (a static Go
# binary), installed in the guest as /usr/bin/prometheus-node-exporter. Debian 12's 1.5.0 reads
# only ports/*/counters/, which rxe lacks (rxe has hw_counters/ alone); node_exporter reads
# hw_counters/ from 1.11.0 (collector/infiniband_linux.go, commit f3154c97, with procfs's
# parseInfiniBandHwCounters in sysfs/class_infiniband.go, which parses counters/ only where it
# exists since procfs 0.17.0). The cached copy is used as long as it is there: unstable moves,
# and a step must not depend on today's archive. apt-get checks the .deb against the signed
# Packages file; the SHA256 is compared once more here.
VM_NODE_EXPORTER_SUITE=${MEMLOCK_VM_NODE_EXPORTER_SUITE:-sid}
vm_node_exporter() {
    VM_NODE_EXPORTER=$(find "$VM_CACHE" -maxdepth 2 -path '*/node-exporter-*/prometheus-node-exporter' 2>/dev/null |
        sort -V | tail -1)
    [ -n "$VM_NODE_EXPORTER" ] && return 0
    local apt=$VM_CACHE/apt-$VM_NODE_EXPORTER_SUITE opts version sha tmp
    mkdir -p "$apt/lists/partial" "$apt/archives/partial"
    echo "deb http://deb.debian.org/debian $VM_NODE_EXPORTER_SUITE main" > "$apt/sources.list"
    opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt" -o Dir::State::status=/dev/null)
    vm_log "fetching prometheus-node-exporter from Debian $VM_NODE_EXPORTER_SUITE"
    apt-get "${opts[@]}" update -qq > "$apt/update.log" 2>&1 ||
        { cat "$apt/update.log" >&2; vm_log "FAILED: apt-get update ($VM_NODE_EXPORTER_SUITE)"; return 1; }
    version=$(apt-cache "${opts[@]}" show prometheus-node-exporter | awk '/^Version:/ {print $2; exit}')
    sha=$(apt-cache "${opts[@]}" show "prometheus-node-exporter=$version" | awk '/^SHA256:/ {print $2; exit}')
    if [ -z "$version" ] || [ -z "$sha" ]; then
        vm_log "FAILED: no prometheus-node-exporter in Debian $VM_NODE_EXPORTER_SUITE"
        return 1
    fi
    tmp=$(mktemp -d "$VM_CACHE/download.XXXXXX")
    (cd "$tmp" && apt-get "${opts[@]}" download "prometheus-node-exporter=$version" > download.log 2>&1) ||
        { cat "$tmp/download.log" >&2; rm -rf "$tmp"; vm_log "FAILED: apt-get download node_exporter"; return 1; }
    echo "$sha  $(echo "$tmp"/prometheus-node-exporter_*.deb)" | sha256sum -c --quiet ||
        { rm -rf "$tmp"; vm_log "FAILED: prometheus-node-exporter $version: SHA256 differs from Packages"; return 1; }
    dpkg-deb -x "$tmp"/prometheus-node-exporter_*.deb "$tmp/root" ||
        { rm -rf "$tmp"; vm_log "FAILED: dpkg-deb -x node_exporter"; return 1; }
    mkdir -p "$VM_CACHE/node-exporter-$version"
    mv "$tmp/root/usr/bin/prometheus-node-exporter" "$VM_CACHE/node-exporter-$version/" ||
        { rm -rf "$tmp"; vm_log "FAILED: no /usr/bin/prometheus-node-exporter in the .deb"; return 1; }
    rm -rf "$tmp" "$apt"
    VM_NODE_EXPORTER=$VM_CACHE/node-exporter-$version/prometheus-node-exporter
}

# vm_copy_with_libs STAGE PATH...: copies each file to the same path under STAGE (symlinks
# followed), with every library ldd names for it. A library ldd cannot find (a package missing)
# fails the build with its name, as does any copy that fails.
vm_copy_with_libs() {
    local stage=$1 file lib libs
    shift
    for file in "$@"; do
        [ -e "$file" ] || { vm_log "FAILED: $file is missing (dpkg -S: $(dpkg -S "$file" 2>&1 | head -1))"; return 1; }
        mkdir -p "$stage$(dirname "$file")"
        cp -L "$file" "$stage$file" || { vm_log "FAILED: cp $file"; return 1; }
        libs=$(ldd "$file" 2>&1)
        case $libs in
            *"not a dynamic executable"*) continue ;;
        esac
        if grep -q 'not found' <<< "$libs"; then
            vm_log "FAILED: $file needs libraries ldd does not find:" \
                "$(grep 'not found' <<< "$libs" | tr -s ' \t\n' ' ')"
            return 1
        fi
        while read -r lib; do
            [ -e "$stage$lib" ] && continue
            mkdir -p "$stage$(dirname "$lib")"
            cp -L "$lib" "$stage$lib" || { vm_log "FAILED: cp $lib (a library of $file)"; return 1; }
        done < <(awk '/=> \// {print $3} /^[ \t]*\/[^ ]+ \(/ {print $1}' <<< "$libs")
    done
}

# vm_base: sets VM_BASE (the base initramfs, cpio+gzip) and VM_BASE_FILES (its file list),
# building them when an input changed.
vm_base() {
    local key
    key=$({
        echo "$VM_KVER ${VM_MODULES[*]} $VM_NODE_EXPORTER"
        cat "${BASH_SOURCE[0]}" "$VM_DIR"/guest/*
        dpkg-query -W -f '${Package} ${Version}\n' "${VM_PACKAGES[@]}" 2>/dev/null
    } | sha256sum | cut -c1-16)
    VM_BASE=$VM_CACHE/base-$key.cpio.gz
    VM_BASE_FILES=$VM_CACHE/base-$key.files
    if [ -s "$VM_BASE" ] && [ -s "$VM_BASE_FILES" ]; then
        # Used: kept by the pruning below.
        touch "$VM_BASE" "$VM_BASE_FILES"
        return 0
    fi
    vm_log "building the base initramfs ($VM_BASE)"
    # Bases unused for a day, and the stages of interrupted builds. Not every other base: the
    # cache is shared by worktrees whose harness differs, each with a base of its own.
    find "$VM_CACHE" -maxdepth 1 -name 'base-*' -mtime +0 -delete
    find "$VM_CACHE" -maxdepth 1 -name 'stage.*' -mmin +60 -exec rm -rf {} +
    local stage
    stage=$(mktemp -d "$VM_CACHE/stage.XXXXXX")
    # The guest's / (mktemp made it 0700: no other user could reach a file).
    chmod 0755 "$stage"
    # Debian's merged /usr: the libraries ldd names under /lib land in usr/lib.
    mkdir -p "$stage"/usr/{bin,sbin,lib,lib64} "$stage"/{etc,proc,sys,dev,tmp,run,root,vm} "$stage/etc/memlock-vm"
    ln -s usr/bin "$stage/bin"
    ln -s usr/sbin "$stage/sbin"
    ln -s usr/lib "$stage/lib"
    ln -s usr/lib64 "$stage/lib64"
    cp /usr/bin/busybox "$stage/usr/bin/busybox" || { vm_log "FAILED: no /usr/bin/busybox (busybox-static)"; return 1; }
    [[ $(ldd /usr/bin/busybox 2>&1) == *"not a dynamic executable"* ]] ||
        { vm_log "FAILED: /usr/bin/busybox is not static (install busybox-static)"; return 1; }
    vm_copy_with_libs "$stage" "${VM_BINARIES[@]}" "${VM_DLOPENED[@]}" || return 1
    install -m 0755 "$VM_NODE_EXPORTER" "$stage/usr/bin/prometheus-node-exporter" ||
        { vm_log "FAILED: install $VM_NODE_EXPORTER"; return 1; }
    local file
    for file in "${VM_FILES[@]}"; do
        [ -e "$file" ] || { vm_log "FAILED: $file is missing"; return 1; }
        mkdir -p "$stage$(dirname "$file")"
        cp -rL "$file" "$stage$file" || { vm_log "FAILED: cp $file"; return 1; }
    done
    local applet
    for applet in $(/usr/bin/busybox --list); do
        [ -e "$stage/usr/bin/$applet" ] || [ -e "$stage/usr/sbin/$applet" ] || ln -s busybox "$stage/usr/bin/$applet"
    done
    ln -sf busybox "$stage/usr/bin/sh"
    local modules=$VM_KERNEL_ROOT/lib/modules/$VM_KVER module line path args
    : > "$stage/etc/memlock-vm/modules"
    for module in "${VM_MODULES[@]}"; do
        local deps
        deps=$(modprobe -d "$VM_KERNEL_ROOT" -S "$VM_KVER" --show-depends "$module" 2>&1) ||
            { vm_log "FAILED: module $module: $deps"; return 1; }
        while read -r line; do
            case $line in
                insmod\ *) ;;
                builtin\ *) continue ;;
                *) vm_log "FAILED: module $module: $line"; return 1 ;;
            esac
            read -r _ path args <<< "$line"
            path=${path#"$modules"/}
            grep -q "^$path\b" "$stage/etc/memlock-vm/modules" && continue
            mkdir -p "$stage/lib/modules/$VM_KVER/$(dirname "$path")"
            cp "$modules/$path" "$stage/lib/modules/$VM_KVER/$path" ||
                { vm_log "FAILED: module $module: cp $modules/$path"; return 1; }
            echo "$path $args" >> "$stage/etc/memlock-vm/modules"
        done <<< "$deps"
    done
    cp "$modules"/modules.{dep,alias,builtin,order} "$stage/lib/modules/$VM_KVER/" ||
        { vm_log "FAILED: cp $modules/modules.*"; return 1; }
    install -m 0755 "$VM_DIR/guest/init" "$stage/init" || { vm_log "FAILED: install guest/init"; return 1; }
    mkdir -p "$stage/usr/lib/memlock-vm"
    cp "$VM_DIR/guest/lib.sh" "$stage/usr/lib/memlock-vm/lib.sh" || { vm_log "FAILED: cp guest/lib.sh"; return 1; }
    cat > "$stage/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
mrtest:x:1000:1000:memlock test user:/tmp:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
PASSWD
    printf 'root:x:0:\nmrtest:x:1000:\nnogroup:x:65534:\n' > "$stage/etc/group"
    printf '127.0.0.1 localhost memlock-vm\n' > "$stage/etc/hosts"
    (cd "$stage" && find . | LC_ALL=C sort > "$stage.files" &&
        cpio -o -H newc --quiet < "$stage.files" | gzip -1 > "$stage.cpio.gz") ||
        { vm_log "FAILED: cpio of $stage"; return 1; }
    sed 's|^\.||' "$stage.files" > "$VM_BASE_FILES"
    mv "$stage.cpio.gz" "$VM_BASE"
    rm -rf "$stage" "$stage.files"
    vm_log "base initramfs: $(du -h "$VM_BASE" | cut -f1)"
}

# vm_helper NAME: compiles scripts/e2e/vm/NAME.c into the cache (once per source) and prints the
# path of the binary.
vm_helper() {
    local name=$1 src=$VM_DIR/$1.c sum out flags=()
    sum=$(sha256sum "$src" | cut -c1-16)
    out=$VM_CACHE/helpers/$name-$sum
    case $name in
        mr_ramp) flags=(-libverbs) ;;
        *) flags=(-static) ;;
    esac
    if [ ! -x "$out" ]; then
        mkdir -p "$VM_CACHE/helpers"
        gcc -O2 -Wall -Wextra -Werror -o "$out.tmp" "$src" "${flags[@]}" || { vm_log "FAILED: gcc $src"; return 1; }
        mv "$out.tmp" "$out"
    fi
    echo "$out"
}
