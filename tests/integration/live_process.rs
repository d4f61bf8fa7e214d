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
pub(crate) const FAST_SCANS: &[(&str, &str)] = &[
    ("MEMLOCK_EXPORTER_COLLECTOR__PROCESS__INTERVAL", "200ms"),
    ("MEMLOCK_EXPORTER_COLLECTOR__PROCESS__FULL_SCAN_INTERVAL", "500ms"),
    ("MEMLOCK_EXPORTER_COLLECTOR__PROCESS__COMM_PATTERN", "^memlock-"),
];

pub(crate) fn start_exporter(env: &[(&str, &str)]) -> Exporter {
    Exporter::start_with_env(
        &["--no-collector.numa", "--no-collector.cgroup", "--no-collector.rdma_sysfs", "--no-collector.rdma_netlink"],
        env,
    )
}

/// A python3 an unprivileged user may run: a pyenv shim under /root is out of its reach.
pub(crate) fn unprivileged_python() -> &'static str {
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
    // The aggregate counts each process's share of its locked pages once (`Locked:` of
    // smaps_rollup, the resident locked pages, shared ones split): at least this process's. The
    // share is re-read every few seconds, and one read while mlock was still faulting the pages
    // in saw part of them: wait for a read after the lock is resident.
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap();
    let share_kb: u64 = rollup
        .lines()
        .find_map(|l| l.strip_prefix("Locked:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert!(share_kb > 0, "the lock is resident: {rollup}");
    let sum_of = |m: &Metrics| {
        m.family("memlock_cgroup_locked_bytes")
            .into_iter()
            .find(|(k, _)| k.contains(&format!("cgroup=\"{cgroup_label}\"")))
            .map_or(0.0, |(_, v)| v)
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut sum = sum_of(&m);
    while sum < (share_kb << 10) as f64 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        sum = sum_of(&exporter.metrics());
    }
    assert!(
        sum >= (share_kb << 10) as f64,
        "cgroup {cgroup_label} locked sum {sum}, this process's share {share_kb} kB"
    );
    assert_eq!(m.value("memlock_scrape_collector_success{collector=\"process\"}"), 1.0);

    // Gone once the child exits.
    drop(locker);
    let deadline = Instant::now() + Duration::from_secs(10);
    while of(&exporter.metrics(), "memlock_process_locked_bytes", pid, "").is_some() {
        assert!(Instant::now() < deadline, "pid {pid} still exported after exiting");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A python3 child that mlock()s `argv[1]` bytes and then ends its main thread while another
/// thread holds on until stdin closes: the leader's `exit` syscall (what pthread_exit() ends
/// with; glibc's unwinding through Python frames is not needed for it) leaves a zombie leader
/// without an mm, so its /proc/PID/status has no Vm lines.
const LEADER_EXIT_HOLDER: &str = r#"
import ctypes, mmap, os, sys, threading
size = int(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(15, b"memlock-exited", 0, 0, 0)  # PR_SET_NAME, inherited by the thread
buf = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
if libc.mlock(ctypes.c_void_p(addr), ctypes.c_size_t(size)) != 0:
    print("mlock failed errno", ctypes.get_errno(), flush=True); sys.exit(1)
def hold():
    print("locked", threading.get_native_id(), flush=True)
    sys.stdin.read()
    os._exit(0)
threading.Thread(target=hold).start()
libc.syscall({"x86_64": 60, "aarch64": 93}[os.uname().machine], 0)  # SYS_exit: this thread only
"#;

/// A process whose main thread exited while another thread runs on, holding 4 MiB locked, has
/// no Vm lines in the leader's status: it is exported, not taken for a kernel thread.
#[test]
fn a_process_whose_main_thread_exited_is_exported_with_its_memory() {
    crate::require!(is_root(), "live tests run as root (the exporter must read every process)");
    let _guard = live_lock();
    let exporter = start_exporter(FAST_SCANS);
    const LOCK: u64 = 4 << 20;
    let mut command = Command::new(unprivileged_python());
    command.args(["-c", LEADER_EXIT_HOLDER, &LOCK.to_string()]);
    let mut holder = Held::spawn(command);
    let line = holder.line();
    let tid: u32 = line.strip_prefix("locked ").and_then(|t| t.parse().ok()).unwrap_or_else(|| panic!("{line}"));
    let pid = holder.child.id();
    // The situation itself: the leader is a zombie without Vm lines, the thread holds the lock.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let leader = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("leader listed");
        if leader.contains("State:\tZ") {
            assert!(!leader.contains("VmLck:"), "{leader}");
            break;
        }
        assert!(Instant::now() < deadline, "the main thread did not exit: {leader}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let thread = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).expect("thread alive");
    assert!(thread.contains(&format!("VmLck:\t{:>8} kB", LOCK >> 10)), "{thread}");

    let m = exporter.wait_metrics(Duration::from_secs(15), "the process with the exited leader", |m| {
        of(m, "memlock_process_locked_bytes", pid, "comm=\"memlock-exited\"").is_some()
    });
    assert_eq!(of(&m, "memlock_process_locked_bytes", pid, ""), Some(LOCK as f64), "{}", m.text);
    assert_eq!(of(&m, "memlock_process_pinned_bytes", pid, ""), Some(0.0));
    let (soft, _) = memlock_limits(pid);
    let soft: u64 = soft.parse().expect("a finite soft memlock limit");
    assert_eq!(of(&m, "memlock_process_limit_bytes", pid, "kind=\"soft\""), Some(soft as f64));
    assert_eq!(of(&m, "memlock_process_limit_usage_ratio", pid, LOCKED), Some(LOCK as f64 / soft as f64));
    assert_eq!(m.value("memlock_scrape_collector_success{collector=\"process\"}"), 1.0);
}

/// `prlimit` on a running job (a fix operators apply) must show in the exported limit before
/// the next full scan. The limits of a process holding memory are re-read every 2 s: at the
/// default full scan interval the change shows within a few seconds.
#[test]
fn prlimit_on_a_running_holder_shows_within_seconds() {
    crate::require!(is_root(), "live tests run as root (the exporter must read every process)");
    let _guard = live_lock();
    let exporter = start_exporter(&[("MEMLOCK_EXPORTER_COLLECTOR__PROCESS__COMM_PATTERN", "^memlock-")]);
    let mut command = Command::new("python3");
    command.args(["-c", MLOCK_HOLDER, &(1u64 << 20).to_string(), "--name", "memlock-prlimit"]);
    let mut holder = Held::spawn(command);
    assert_eq!(holder.line(), "locked");
    let pid = holder.child.id();
    let (soft, _) = memlock_limits(pid);
    let soft: u64 = soft.parse().expect("a finite soft memlock limit");
    exporter.wait_metrics(Duration::from_secs(15), "the holder's limit", |m| {
        of(m, "memlock_process_limit_bytes", pid, "kind=\"soft\"") == Some(soft as f64)
    });
    let lowered = soft / 2;
    let status = Command::new("prlimit")
        .args([format!("--pid={pid}"), format!("--memlock={lowered}:{lowered}")])
        .status()
        .expect("run prlimit");
    assert!(status.success());
    assert_eq!(memlock_limits(pid), (lowered.to_string(), lowered.to_string()));
    let changed = Instant::now();
    // The full scan is 60 s away (the default): only the holders' refresh can show it this soon.
    let m = exporter.wait_metrics(Duration::from_secs(5), "the lowered limit", |m| {
        of(m, "memlock_process_limit_bytes", pid, "kind=\"soft\"") == Some(lowered as f64)
    });
    eprintln!("prlimit shown after {:?}", changed.elapsed());
    assert_eq!(of(&m, "memlock_process_limit_bytes", pid, "kind=\"hard\""), Some(lowered as f64));
    assert_eq!(of(&m, "memlock_process_limit_usage_ratio", pid, LOCKED), Some((1u64 << 20) as f64 / lowered as f64));
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
    // And a verbs library, found by the same read (this machine has no rdma-core either).
    let verbs = dir.join("libibverbs.so.1.14.50.0");
    std::fs::copy("/bin/true", &verbs).unwrap();
    let exporter = start_exporter(FAST_SCANS);
    let mapper = "import mmap as _m, sys as _s\n_fs = [open(_p, 'rb') for _p in _s.argv[2:]]\n\
        _keep = [_m.mmap(_f.fileno(), 0, prot=_m.PROT_READ) for _f in _fs]\n";
    let script = format!("{mapper}{PINNER}");
    let mut command = Command::new(unprivileged_python());
    command.args(["-I", "-c", &script, &PIN_STEP.to_string(), library.to_str().unwrap(), verbs.to_str().unwrap()]);
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
    let libraries = m.family("memlock_process_rdma_library_info");
    let mine: Vec<&str> =
        libraries.iter().filter(|(k, _)| k.contains(&format!("pid=\"{pid}\""))).map(|(k, _)| *k).collect();
    assert_eq!(mine.len(), 1, "{}", m.text);
    assert!(mine[0].ends_with(",library=\"libibverbs\",file=\"libibverbs.so.1.14.50.0\"}"), "{mine:?}");
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

/// The exporter itself inside the user namespace (a container without the host's) must not
/// take every process's capability at its word: the namespaced root would read `ipc_lock 1`
/// although the kernel refuses it past the limit. `check`, run from the same namespace, makes
/// the same decision.
#[test]
fn an_exporter_inside_a_user_namespace_does_not_exempt_its_namespaced_root() {
    crate::require!(is_root(), "live tests need root (to drop to an unprivileged uid)");
    let _guard = live_lock();
    const LOCK: u64 = 2 << 20;
    let python = unprivileged_python();
    let mut command = Command::new("setpriv");
    command.args(["--reuid=65534", "--regid=65534", "--clear-groups", "unshare", "--user", "--map-root-user"]);
    command.args([python, "-c", MLOCK_HOLDER, &LOCK.to_string(), "--name", "memlock-nsroot"]);
    let mut holder = Held::spawn(command);
    assert_eq!(holder.line(), "locked", "this test needs unprivileged user namespaces (unshare --user as nobody)");
    let pid = holder.child.id();
    let userns = format!("--user=/proc/{pid}/ns/user");
    let in_namespace = |program: &std::path::Path| {
        let mut command = Command::new("setpriv");
        command
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "nsenter", "--preserve-credentials", &userns])
            .arg(program);
        command.current_dir("/");
        command
    };

    // The kernel refuses the namespaced root past its limit, CAP_IPC_LOCK in CapEff or not:
    // capable() checks the initial namespace (do_mlock, mm/mlock.c: `locked > lock_limit && !capable(CAP_IPC_LOCK)`).
    let (soft, _) = memlock_limits(pid);
    let soft: u64 = soft.parse().expect("a finite soft memlock limit");
    let over = format!(
        "import ctypes, mmap; libc = ctypes.CDLL(None, use_errno=True); n = {}; \
         b = mmap.mmap(-1, n); a = ctypes.addressof(ctypes.c_char.from_buffer(b)); \
         caps = [l for l in open('/proc/self/status') if l.startswith('CapEff')][0].split()[1]; \
         print(int(caps, 16) >> 14 & 1, libc.mlock(ctypes.c_void_p(a), ctypes.c_size_t(n)), ctypes.get_errno())",
        soft + (1 << 20)
    );
    let refused = in_namespace(std::path::Path::new(python)).args(["-c", &over]).output().expect("run python");
    assert_eq!(String::from_utf8_lossy(&refused.stdout).trim(), "1 -1 12", "{refused:?}");

    let binary = crate::util::binary_runnable_by(65534);
    let mut exporter = in_namespace(&binary);
    exporter.args(["--web.listen-address", "127.0.0.1:0", "--log.format", "json", "--log.level", "debug"]);
    exporter.args(["--no-collector.numa", "--no-collector.cgroup", "--no-collector.rdma_sysfs"]);
    exporter.arg("--no-collector.rdma_netlink").envs(FAST_SCANS.iter().copied());
    let exporter = Exporter::from_command(exporter);
    exporter.wait_ready();
    let m = wait_equal(&exporter, "memlock_process_locked_bytes", pid, || status_bytes(pid, "VmLck"));
    assert_eq!(of(&m, "memlock_process_ipc_lock", pid, "comm=\"memlock-nsroot\""), Some(0.0), "{}", m.text);
    assert_eq!(of(&m, "memlock_process_limit_usage_ratio", pid, LOCKED), Some(LOCK as f64 / soft as f64));

    let out = in_namespace(&binary).args(["check", "--json", "--pid", &pid.to_string()]).output().expect("check");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    });
    let cap = report["findings"].as_array().unwrap().iter().find(|f| f["id"] == "memlock.cap_ipc_lock").unwrap();
    assert_eq!(cap["status"], "WARN", "{cap}");
    assert!(cap["measured"].as_str().unwrap().contains("only inside a user namespace"), "{cap}");
}

/// The docs against this kernel (docs/metrics.md, "How the kernel checks the limit"):
/// under an 8 MiB soft limit, with nothing locked, `mlockall(MCL_CURRENT)` fails with ENOMEM
/// because VmSize is over the limit (the mlockall system call, mm/mlock.c, checks
/// `mm->total_vm`) while a 1 MiB `mlock` passes (VmLck); a perf ring past the per-user
/// allowance and the limit is refused with EPERM (`perf_mmap`, kernel/events/core.c), a small
/// one is not.
#[test]
fn mlockall_checks_vmsize_and_perf_rings_are_refused_with_eperm() {
    crate::require!(is_root(), "live tests need root (to drop to an unprivileged uid)");
    let _guard = live_lock();
    const LIMIT: u64 = 8 << 20;
    let run = |script: &str, args: &[&str]| {
        let out = Command::new("prlimit")
            .arg(format!("--memlock={LIMIT}:{LIMIT}"))
            .args(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", unprivileged_python(), "-c"])
            .arg(script)
            .args(args)
            .current_dir("/")
            .output()
            .expect("run python3");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let mlock = r#"
import ctypes, mmap
libc = ctypes.CDLL(None, use_errno=True)
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
kib = lambda key: int(status[key].split()[0])
all_rc = libc.mlockall(1)  # MCL_CURRENT
all_errno = ctypes.get_errno()
buf = mmap.mmap(-1, 1 << 20)
one_rc = libc.mlock(ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(buf))), ctypes.c_size_t(1 << 20))
print(kib("VmSize"), kib("VmLck"), all_rc, all_errno, one_rc)
"#;
    let fields: Vec<i64> = run(mlock, &[]).split_whitespace().map(|f| f.parse().unwrap()).collect();
    let [vm_size_kib, vm_lck_kib, all_rc, all_errno, one_rc] = fields[..] else { panic!("{fields:?}") };
    assert!(vm_size_kib as u64 * 1024 > LIMIT, "python's VmSize {vm_size_kib} kB is over the limit");
    assert_eq!(vm_lck_kib, 0);
    assert_eq!((all_rc, all_errno), (-1, libc::ENOMEM as i64), "mlockall(MCL_CURRENT) checks VmSize");
    assert_eq!(one_rc, 0, "mlock of 1 MiB fits VmLck under the limit");

    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").expect("perf events");
    assert!(paranoid.trim().parse::<i64>().is_ok_and(|p| (0..=2).contains(&p)), "perf_event_paranoid {paranoid}");
    let perf = r#"
import ctypes, mmap, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
# perf_event_attr, PERF_ATTR_SIZE_VER0 (64 bytes): PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK,
# disabled | exclude_kernel | exclude_hv.
attr = ctypes.create_string_buffer(struct.pack("IIQQQQQ", 1, 64, 0, 0, 0, 0, 0b1100001) + bytes(16), 64)
fd = libc.syscall({"x86_64": 298, "aarch64": 241}[os.uname().machine], attr, 0, -1, -1, 0)
if fd < 0:
    print("open", ctypes.get_errno()); sys.exit(0)
pages = int(sys.argv[1])
addr = libc.mmap(None, (1 + pages) * mmap.PAGESIZE, 3, 1, fd, 0)  # PROT_READ|PROT_WRITE, MAP_SHARED
print("mmap", ctypes.get_errno() if addr in (None, ctypes.c_void_p(-1).value) else 0)
"#;
    // Past the per-user allowance (perf_event_mlock_kb x online CPUs) by more than the limit.
    let mlock_kb: u64 = std::fs::read_to_string("/proc/sys/kernel/perf_event_mlock_kb")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .expect("perf_event_mlock_kb");
    // SAFETY: sysconf has no preconditions.
    let cpus = u64::try_from(unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }).expect("online CPUs");
    // SAFETY: as above.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).expect("page size");
    // perf rings are a power of two in pages.
    let pages = ((mlock_kb * 1024 * cpus + 2 * LIMIT) / page).next_power_of_two();
    let refused = run(perf, &[&pages.to_string()]);
    assert_eq!(refused, format!("mmap {}", libc::EPERM), "{pages} pages: refused with EPERM, not ENOMEM");
    assert_eq!(run(perf, &["64"]), "mmap 0", "a 256 KiB ring fits the per-user allowance");
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
pub(crate) const PINNER: &str = r#"
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
