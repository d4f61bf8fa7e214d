//! The process collector on this machine's real /proc:
//! - a root child that mlocks a known amount (CAP_IPC_LOCK: the 8 MiB limit does not stop it);
//! - an unprivileged child with a lowered soft RLIMIT_MEMLOCK that pins memory step by step
//!   with io_uring registered buffers (charged to VmPin) until the kernel refuses with ENOMEM;
//! - a burst of short-lived processes while the collector scans back to back.
//!
//! Every figure is compared with /proc/PID/status and /proc/PID/limits read at the same time
//! (the children hold still between steps).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::{is_root, live_lock, Exporter, Metrics, MLOCK_HOLDER};

const LOCK_BYTES: u64 = 48 << 20;
const PIN_STEP: u64 = 1 << 20;
/// io_uring checks the user's `locked_vm`, which also carries each ring's own pages (two for a
/// one-entry ring on 6.18) that VmPin does not show: 64 KiB of room for them makes the refusal
/// fall exactly on the buffer that would take VmPin past the limit.
const PIN_SOFT_LIMIT: u64 = (4 << 20) + (64 << 10);
const PIN_HARD_LIMIT: u64 = 8 << 20;
/// An unprivileged uid of its own: io_uring checks the soft limit against the *user's*
/// locked_vm, shared by every process of the uid, so other tests pinning as nobody (65534) at
/// the same time would move this test's ENOMEM point.
const PINNER_UID: &str = "64434";

/// Scans fast so the test does not wait on the 5 s default, and catches the children by comm.
const FAST_SCANS: &[(&str, &str)] = &[
    ("MEMLOCK_EXPORTER_COLLECTOR__PROCESS__INTERVAL", "200ms"),
    ("MEMLOCK_EXPORTER_COLLECTOR__PROCESS__FULL_SCAN_INTERVAL", "500ms"),
    ("MEMLOCK_EXPORTER_COLLECTOR__PROCESS__COMM_PATTERN", "^memlock-"),
];

fn start_exporter(env: &[(&str, &str)]) -> Exporter {
    Exporter::start_with_env(
        &["--no-collector.numa", "--no-collector.cgroup", "--no-collector.rdma_sysfs", "--no-collector.rdma_netlink"],
        env,
    )
}

/// A python3 an unprivileged user may run: a pyenv shim under /root is out of its reach.
fn unprivileged_python() -> &'static str {
    ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or("python3")
}

/// A `Key:   value kB` line of /proc/PID/status, in bytes.
fn status_bytes(pid: u32, key: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("child alive");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .unwrap_or_else(|| panic!("{key} missing from /proc/{pid}/status"))
}

/// Soft and hard `Max locked memory` of /proc/PID/limits, as written ("unlimited" or bytes).
fn memlock_limits(pid: u32) -> (String, String) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("child alive");
    let line = text.lines().find(|l| l.starts_with("Max locked memory")).expect("memlock line");
    let mut fields = line["Max locked memory".len()..].split_whitespace();
    (fields.next().unwrap().to_owned(), fields.next().unwrap().to_owned())
}

/// The value of `family` for `pid` (plus `extra` labels), if exported.
const PINNED: &str = "counter=\"pinned\"";
const LOCKED: &str = "counter=\"locked\"";

fn of(m: &Metrics, family: &str, pid: u32, extra: &str) -> Option<f64> {
    let needle = format!("pid=\"{pid}\",");
    let found: Vec<f64> = m
        .family(family)
        .into_iter()
        .filter(|(k, _)| k.contains(&needle) && k.contains(extra))
        .map(|(_, v)| v)
        .collect();
    assert!(found.len() <= 1, "{family} pid {pid} {extra}: {found:?}");
    found.first().copied()
}

/// Scrapes until `family` for `pid` equals the value `expected()` gives at the same moment.
fn wait_equal(exporter: &Exporter, family: &str, pid: u32, expected: impl Fn() -> u64) -> Metrics {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let before = expected();
        let m = exporter.metrics();
        let after = expected();
        let got = of(&m, family, pid, "");
        if before == after && got == Some(before as f64) {
            return m;
        }
        assert!(
            Instant::now() < deadline,
            "{family} of pid {pid}: exporter says {got:?}, /proc says {after}\n{}",
            m.text
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

struct Held {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Held {
    fn spawn(mut command: Command) -> Held {
        let mut child = command.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("spawn child");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        Held { child, stdin, stdout }
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read child");
        line.trim().to_owned()
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").and_then(|_| stdin.flush()).expect("write child");
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn mlock_by_root_reports_exact_vmlck_limits_and_ratio() {
    crate::require!(is_root(), "live tests need root (CAP_IPC_LOCK lets the child lock 48 MiB past the 8 MiB rlimit)");
    let _guard = live_lock();
    let exporter = start_exporter(FAST_SCANS);
    let mut command = Command::new("python3");
    command.args(["-c", MLOCK_HOLDER, &LOCK_BYTES.to_string(), "--name", "memlock-mlock"]);
    let mut locker = Held::spawn(command);
    assert_eq!(locker.line(), "locked");
    let pid = locker.child.id();

    let m = wait_equal(&exporter, "memlock_process_locked_bytes", pid, || status_bytes(pid, "VmLck"));
    assert_eq!(of(&m, "memlock_process_locked_bytes", pid, "comm=\"memlock-mlock\""), Some(LOCK_BYTES as f64));
    assert_eq!(of(&m, "memlock_process_pinned_bytes", pid, ""), Some(status_bytes(pid, "VmPin") as f64));
    assert_eq!(of(&m, "memlock_process_ipc_lock", pid, ""), Some(1.0), "root has CAP_IPC_LOCK");
    let (soft, hard) = memlock_limits(pid);
    let soft: u64 = soft.parse().expect("this machine's soft memlock limit is finite");
    let hard: u64 = hard.parse().expect("this machine's hard memlock limit is finite");
    assert_eq!(of(&m, "memlock_process_limit_bytes", pid, "kind=\"soft\""), Some(soft as f64));
    assert_eq!(of(&m, "memlock_process_limit_bytes", pid, "kind=\"hard\""), Some(hard as f64));
    assert_eq!(of(&m, "memlock_process_limit_unlimited", pid, "kind=\"soft\""), Some(0.0));
    assert_eq!(of(&m, "memlock_process_limit_usage_ratio", pid, LOCKED), Some(LOCK_BYTES as f64 / soft as f64));
    assert!(LOCK_BYTES > soft, "the lock is past the limit: only CAP_IPC_LOCK allowed it");
    // Its cgroup's aggregate includes it.
    let cgroup = m
        .family("memlock_process_locked_bytes")
        .into_iter()
        .find(|(k, _)| k.contains(&format!("pid=\"{pid}\",")))
        .unwrap()
        .0
        .to_owned();
    let cgroup_label = cgroup.split("cgroup=\"").nth(1).unwrap().split('"').next().unwrap().to_owned();
    let sum = m
        .family("memlock_cgroup_locked_bytes")
        .into_iter()
        .find(|(k, _)| k.contains(&format!("cgroup=\"{cgroup_label}\"")))
        .unwrap()
        .1;
    assert!(sum >= LOCK_BYTES as f64, "cgroup {cgroup_label} locked sum {sum}");
    assert_eq!(m.value("memlock_scrape_collector_success{collector=\"process\"}"), 1.0);

    // Gone once the child exits.
    drop(locker);
    let deadline = Instant::now() + Duration::from_secs(10);
    while of(&exporter.metrics(), "memlock_process_locked_bytes", pid, "").is_some() {
        assert!(Instant::now() < deadline, "pid {pid} still exported after exiting");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn io_uring_pinning_by_an_unprivileged_process_until_enomem() {
    crate::require!(is_root(), "live tests need root (to drop to an unprivileged uid with a lowered memlock limit)");
    let _guard = live_lock();
    let exporter = start_exporter(FAST_SCANS);
    // Root may only lower limits; then the child runs unprivileged, without capabilities.
    let mut command = Command::new("prlimit");
    command.arg(format!("--memlock={PIN_SOFT_LIMIT}:{PIN_HARD_LIMIT}"));
    command.args(["setpriv", &format!("--reuid={PINNER_UID}"), &format!("--regid={PINNER_UID}"), "--clear-groups"]);
    command.arg(unprivileged_python()).args(["-I", "-c", PINNER, &PIN_STEP.to_string()]).current_dir("/");
    let mut pinner = Held::spawn(command);
    assert_eq!(pinner.line(), "ready");
    let pid = pinner.child.id();
    // prlimit and setpriv exec, so the pid is the python process's.
    assert_eq!(memlock_limits(pid), (PIN_SOFT_LIMIT.to_string(), PIN_HARD_LIMIT.to_string()));

    let mut registered = 0u64;
    let mut enomem = false;
    for _ in 0..(PIN_SOFT_LIMIT / PIN_STEP + 2) {
        pinner.send("pin");
        let reply = pinner.line();
        if reply == "register errno 12" {
            // ENOMEM exactly when this buffer would take the process past its soft limit.
            let pinned = status_bytes(pid, "VmPin");
            assert!(pinned <= PIN_SOFT_LIMIT && pinned + PIN_STEP > PIN_SOFT_LIMIT, "ENOMEM at VmPin {pinned}");
            enomem = true;
            break;
        }
        let total: u64 = reply
            .strip_prefix("pinned ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("child said {reply:?}"));
        registered += PIN_STEP;
        assert_eq!(total, registered);
        let m = wait_equal(&exporter, "memlock_process_pinned_bytes", pid, || status_bytes(pid, "VmPin"));
        let vm_pin = status_bytes(pid, "VmPin");
        assert!(vm_pin >= registered, "VmPin {vm_pin} below the {registered} bytes registered");
        assert!(vm_pin <= PIN_SOFT_LIMIT, "the kernel let VmPin {vm_pin} pass the soft limit");
        assert_eq!(
            of(&m, "memlock_process_locked_bytes", pid, "comm=\"memlock-uring\""),
            Some(status_bytes(pid, "VmLck") as f64)
        );
        assert_eq!(of(&m, "memlock_process_ipc_lock", pid, ""), Some(0.0), "an unprivileged uid has no CAP_IPC_LOCK");
        assert_eq!(of(&m, "memlock_process_limit_bytes", pid, "kind=\"soft\""), Some(PIN_SOFT_LIMIT as f64));
        assert_eq!(of(&m, "memlock_process_limit_bytes", pid, "kind=\"hard\""), Some(PIN_HARD_LIMIT as f64));
        assert_eq!(of(&m, "memlock_process_limit_unlimited", pid, "kind=\"hard\""), Some(0.0));
        // Each counter against the soft limit on its own, as the kernel checks them.
        let ratio_of = |field| status_bytes(pid, field) as f64 / PIN_SOFT_LIMIT as f64;
        assert_eq!(of(&m, "memlock_process_limit_usage_ratio", pid, PINNED), Some(ratio_of("VmPin")));
        assert_eq!(of(&m, "memlock_process_limit_usage_ratio", pid, LOCKED), Some(ratio_of("VmLck")));
    }
    assert!(enomem, "io_uring never refused: {registered} bytes registered against a {PIN_SOFT_LIMIT} soft limit");
    assert_eq!(registered, 4 << 20, "four 1 MiB buffers fit under the soft limit, the fifth does not");
    // At the refusal the exporter shows the process at its limit.
    let m = wait_equal(&exporter, "memlock_process_pinned_bytes", pid, || status_bytes(pid, "VmPin"));
    let ratio = of(&m, "memlock_process_limit_usage_ratio", pid, PINNED).unwrap();
    assert_eq!(ratio, (4u64 << 20) as f64 / PIN_SOFT_LIMIT as f64);
    assert!(ratio > 0.98, "{ratio}");
    assert_eq!(m.value("memlock_scrape_collector_success{collector=\"process\"}"), 1.0);
}

/// The NCCL a process maps, read from its real /proc/PID/maps once it pins memory: a child that
/// maps a file named like NCCL's library (this machine has no NCCL) and registers an io_uring
/// buffer (VmPin). As root, so the exporter may read the child's maps (ptrace access).
#[test]
fn the_nccl_library_a_pinning_process_maps_is_exported() {
    crate::require!(is_root(), "live tests need root (to read another process's maps)");
    let _guard = live_lock();
    let dir = std::env::temp_dir().join(format!("memlock-nccl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let library = dir.join("libnccl.so.2.21.5");
    std::fs::copy("/bin/true", &library).unwrap();
    let exporter = start_exporter(FAST_SCANS);
    let mapper = "import mmap as _m, sys as _s\n_f = open(_s.argv[2], 'rb')\n\
        _keep = _m.mmap(_f.fileno(), 0, prot=_m.PROT_READ)\n";
    let script = format!("{mapper}{PINNER}");
    let mut command = Command::new(unprivileged_python());
    command.args(["-I", "-c", &script, &PIN_STEP.to_string(), library.to_str().unwrap()]);
    let mut pinner = Held::spawn(command);
    assert_eq!(pinner.line(), "ready");
    let pid = pinner.child.id();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(maps.contains(library.to_str().unwrap()), "the child maps the library:\n{maps}");
    // Before it pins, its maps are not read.
    let m = wait_equal(&exporter, "memlock_process_pinned_bytes", pid, || status_bytes(pid, "VmPin"));
    assert_eq!(of(&m, "memlock_process_nccl_info", pid, ""), None, "{}", m.text);
    pinner.send("pin");
    assert_eq!(pinner.line(), format!("pinned {PIN_STEP}"));
    let deadline = Instant::now() + Duration::from_secs(15);
    let m = loop {
        let m = exporter.metrics();
        if of(&m, "memlock_process_nccl_info", pid, "").is_some() || Instant::now() > deadline {
            break m;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let info = m.family("memlock_process_nccl_info");
    let series = info.iter().find(|(k, _)| k.contains(&format!("pid=\"{pid}\""))).map(|(k, _)| *k);
    let series = series.unwrap_or_else(|| panic!("no memlock_process_nccl_info for {pid}:\n{}", m.text));
    assert!(series.contains("comm=\"memlock-uring\""), "{series}");
    assert!(series.ends_with(",version=\"2.21.5\",library=\"libnccl.so.2.21.5\"}"), "{series}");
    assert_eq!(m.value("memlock_scrape_collector_success{collector=\"process\"}"), 1.0);
    drop(pinner);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Root inside a user namespace (`unshare --user --map-root-user`, as rootless containers and
/// Enroot do) has CAP_IPC_LOCK in CapEff, but the memlock limit still applies to it: the
/// exporter must not call it exempt.
#[test]
fn cap_ipc_lock_inside_a_user_namespace_is_not_an_exemption() {
    crate::require!(is_root(), "live tests need root (to drop to an unprivileged uid)");
    let _guard = live_lock();
    let exporter = start_exporter(FAST_SCANS);
    const LOCK: u64 = 2 << 20;
    let mut command = Command::new("setpriv");
    command.args(["--reuid=65534", "--regid=65534", "--clear-groups", "unshare", "--user", "--map-root-user"]);
    command.args([unprivileged_python(), "-c", MLOCK_HOLDER, &LOCK.to_string(), "--name", "memlock-userns"]);
    let mut holder = Held::spawn(command);
    assert_eq!(
        holder.line(),
        "locked",
        "the holder did not start: this test needs unprivileged user namespaces (unshare --user as nobody)"
    );
    // setpriv and unshare exec: the pid is the python process's.
    let pid = holder.child.id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("holder alive");
    let cap_eff = status.lines().find_map(|l| l.strip_prefix("CapEff:")).map(str::trim).unwrap_or("");
    let cap_eff = u64::from_str_radix(cap_eff, 16).expect("CapEff is hex");
    assert_eq!(cap_eff >> 14 & 1, 1, "CAP_IPC_LOCK is in CapEff inside the namespace");
    let m = wait_equal(&exporter, "memlock_process_locked_bytes", pid, || status_bytes(pid, "VmLck"));
    assert_eq!(of(&m, "memlock_process_ipc_lock", pid, "comm=\"memlock-userns\""), Some(0.0), "{}", m.text);
    let (soft, _) = memlock_limits(pid);
    let soft: u64 = soft.parse().expect("a finite soft memlock limit");
    assert_eq!(of(&m, "memlock_process_limit_usage_ratio", pid, LOCKED), Some(LOCK as f64 / soft as f64));
}

#[test]
fn a_burst_of_short_lived_processes_is_not_an_error() {
    crate::require!(is_root(), "live tests run as root (the exporter must read every process)");
    let _guard = live_lock();
    let exporter = start_exporter(&[
        ("MEMLOCK_EXPORTER_COLLECTOR__PROCESS__INTERVAL", "100ms"),
        ("MEMLOCK_EXPORTER_COLLECTOR__PROCESS__FULL_SCAN_INTERVAL", "100ms"),
        // Every process passes the filter, so all three files of each are read.
        ("MEMLOCK_EXPORTER_COLLECTOR__PROCESS__MIN_BYTES", "0"),
    ]);
    let scans_before = exporter.metrics().value("memlock_process_full_scans_total");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spawners: Vec<_> = (0..3)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut spawned = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let status = Command::new("true").status().expect("spawn true");
                    assert!(status.success());
                    spawned += 1;
                }
                spawned
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut scrapes = 0;
    while Instant::now() < deadline {
        let m = exporter.metrics();
        assert_eq!(m.value("memlock_scrape_collector_success{collector=\"process\"}"), 1.0, "{}", exporter.log_text());
        scrapes += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let spawned: u32 = spawners.into_iter().map(|t| t.join().unwrap()).sum();
    let m = exporter.metrics();
    let scans = m.value("memlock_process_full_scans_total") - scans_before;
    eprintln!(
        "{spawned} processes spawned, {scans} full scans, {scrapes} scrapes, {} vanished mid-scan",
        m.value("memlock_process_vanished_total")
    );
    assert!(spawned > 300, "only {spawned} processes spawned");
    assert!(scans >= 20.0, "only {scans} full scans in 5 s at a 100ms interval");
    for kind in ["permission", "io", "parse", "too_large"] {
        assert_eq!(m.value(&format!("memlock_process_read_errors_total{{kind=\"{kind}\"}}")), 0.0, "{kind}");
    }
    let errors: Vec<_> = m
        .family("memlock_exporter_collector_errors_total")
        .into_iter()
        .filter(|(k, v)| k.contains("collector=\"process\"") && *v > 0.0)
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
    assert!(
        !exporter.log_text().lines().any(|l| l.contains("collector failed") && l.contains("process")),
        "{}",
        exporter.log_text()
    );
}

/// On each "pin" line: a new io_uring (a ring registers buffers once) with one fresh
/// `argv[1]`-byte buffer registered (IORING_REGISTER_BUFFERS), which pins it and charges
/// mm->pinned_vm (VmPin). Rings and buffers are held until stdin closes.
const PINNER: &str = r#"
import ctypes, mmap, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.prctl(15, b"memlock-uring", 0, 0, 0)  # PR_SET_NAME
SYS_io_uring_setup, SYS_io_uring_register, IORING_REGISTER_BUFFERS = 425, 427, 0
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
step = int(sys.argv[1])
held, total = [], 0
print("ready", flush=True)
for line in sys.stdin:
    buf = mmap.mmap(-1, step, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    # Base pages only: a THP folio would be charged whole.
    buf.madvise(mmap.MADV_NOHUGEPAGE)
    params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
    fd = libc.syscall(SYS_io_uring_setup, 1, params)
    if fd < 0:
        print("setup errno", ctypes.get_errno(), flush=True); continue
    iov = iovec(ctypes.addressof(ctypes.c_char.from_buffer(buf)), step)
    if libc.syscall(SYS_io_uring_register, fd, IORING_REGISTER_BUFFERS, ctypes.byref(iov), 1) < 0:
        print("register errno", ctypes.get_errno(), flush=True); os.close(fd); continue
    held.append((fd, buf, iov))
    total += step
    print("pinned", total, flush=True)
"#;
