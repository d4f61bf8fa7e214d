//! Fault cases through the binary: kernel files that are unreadable, fail with EIO, are
//! enormous, hold NUL bytes or numbers beyond u64, or are FIFOs; a procfs root that is not
//! procfs; a configuration file replaced by a directory or a FIFO. Each must give a clear error
//! (naming the file) or a skip, never a panic, and never a stalled sampler: every collector
//! keeps finishing its runs and scrapes keep being answered. (Files that vanish mid-read are
//! the churn tests in scale.rs.)

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::synthetic;
use crate::util::{binary, command_as_nobody, fixtures, http_get, set_mode, Exporter, Metrics};

/// A copy of the fixture roots to break, removed on drop.
struct Tree(PathBuf);

impl Tree {
    fn new(name: &str) -> Tree {
        let root = std::env::temp_dir().join(format!("memlock-faults-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        synthetic::copy_tree(&fixtures().join("proc"), &root.join("proc")).unwrap();
        synthetic::copy_tree(&fixtures().join("sys"), &root.join("sys")).unwrap();
        Tree(root)
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }

    fn replace(&self, rel: &str, contents: &[u8]) {
        let path = self.path(rel);
        let _ = std::fs::remove_file(&path);
        std::fs::write(path, contents).unwrap();
    }

    fn symlink(&self, rel: &str, target: &str) {
        let path = self.path(rel);
        let _ = std::fs::remove_file(&path);
        std::os::unix::fs::symlink(target, path).unwrap();
    }

    fn fifo(&self, rel: &str) {
        let path = self.path(rel);
        let _ = std::fs::remove_file(&path);
        mkfifo(&path);
    }

    fn roots(&self) -> [String; 4] {
        [
            "--path.procfs".into(),
            self.path("proc").display().to_string(),
            "--path.sysfs".into(),
            self.path("sys").display().to_string(),
        ]
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn mkfifo(path: &Path) {
    let name = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo reads the NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o644) }, 0, "mkfifo {}", path.display());
}

/// The captured status of a process with this pid, name and `VmPin` line.
fn status(pid: u32, name: &str, vmpin: &str) -> String {
    synthetic::STATUS
        .replace("Name:\tcat", &format!("Name:\t{name}"))
        .replace("Pid:\t15717", &format!("Pid:\t{pid}"))
        .replace("VmPin:\t       0 kB", vmpin)
}

fn errors_of(m: &Metrics, collector: &str, kind: &str) -> f64 {
    m.get(&format!("memlock_exporter_collector_errors_total{{collector=\"{collector}\",kind=\"{kind}\"}}"))
        .unwrap_or(0.0)
}

fn success(m: &Metrics, collector: &str) -> f64 {
    m.value(&format!("memlock_scrape_collector_success{{collector=\"{collector}\"}}"))
}

const AGES: &str = "memlock_exporter_collector_sample_age_seconds";

/// How long [`watch`] waits for every collector's next run: only a failure bound. A stalled
/// sampler never finishes one; a machine busy with other work only makes it late, by seconds.
const STALL_LIMIT: Duration = Duration::from_secs(60);

/// One scrape, answered and well formed, with a sample age for some collectors.
fn scrape(address: &str, scrapes: u32) -> Metrics {
    let (status, body) = http_get(address, "/metrics").expect("a scrape is answered");
    assert_eq!(status, 200, "{body}");
    let m = Metrics::parse(&body);
    assert!(!m.family(AGES).is_empty(), "no sample ages (scrape {scrapes}):\n{body}");
    m
}

/// Scrapes for `seconds`, checking every time that the scrape is answered and well formed,
/// then that no sampler stalled: every collector finishes a run after the last of those
/// scrapes. That is the event a stall prevents; a bound on the sample age would be a race
/// with the scheduler, which leaves a collector thread seconds without a core on a loaded
/// machine.
fn watch(address: &str, seconds: u64) -> Metrics {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut scrapes = 0;
    let (last, answered) = loop {
        let m = scrape(address, scrapes);
        let answered = Instant::now();
        scrapes += 1;
        if answered >= deadline {
            break (m, answered);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let collectors: Vec<String> = last.family(AGES).into_iter().map(|(series, _)| series.to_owned()).collect();
    let limit = Instant::now() + STALL_LIMIT;
    loop {
        let sent = Instant::now();
        let m = scrape(address, scrapes);
        scrapes += 1;
        // The exporter took the ages at or after `sent`: an age below the time since `answered`
        // is a run that finished after the last scrape of the window.
        let since = sent.duration_since(answered).as_secs_f64();
        let waiting: Vec<&String> =
            collectors.iter().filter(|series| !m.get(series).is_some_and(|age| age < since)).collect();
        if waiting.is_empty() {
            return m;
        }
        assert!(
            Instant::now() < limit,
            "a sampler stalled: no run of {waiting:?} finished in {STALL_LIMIT:?} (scrape {scrapes}):\n{}",
            m.text
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Every collector every 100 ms, so that [`watch`] sees each finish runs within its window.
const FAST: [(&str, &str); 9] = [
    ("MEMLOCK_EXPORTER_COLLECTOR__NODE__INTERVAL", "100ms"),
    ("MEMLOCK_EXPORTER_COLLECTOR__NUMA__INTERVAL", "100ms"),
    ("MEMLOCK_EXPORTER_COLLECTOR__PROCESS__INTERVAL", "100ms"),
    ("MEMLOCK_EXPORTER_COLLECTOR__CGROUP__INTERVAL", "100ms"),
    ("MEMLOCK_EXPORTER_COLLECTOR__RDMA_SYSFS__INTERVAL", "100ms"),
    ("MEMLOCK_EXPORTER_COLLECTOR__RDMA_NETLINK__INTERVAL", "100ms"),
    ("MEMLOCK_EXPORTER_COLLECTOR__SOFTWARE__INTERVAL", "100ms"),
    ("MEMLOCK_EXPORTER_COLLECTOR__RDMA_CAPS__INTERVAL", "100ms"),
    ("MEMLOCK_EXPORTER_COLLECTOR__LAUNCHERS__INTERVAL", "100ms"),
];

#[test]
fn broken_node_files_are_named_errors_and_the_rest_keeps_sampling() {
    let tree = Tree::new("node");
    // Enormous: past the 1 MiB read bound.
    let mut huge = std::fs::read(tree.path("proc/meminfo")).unwrap();
    while huge.len() <= 2 << 20 {
        huge.extend_from_slice(b"Zzz:              0 kB\n");
    }
    tree.replace("proc/meminfo", &huge);
    // EIO from the kernel: /proc/self/mem at offset 0 is unmapped.
    tree.symlink("proc/sys/vm/max_map_count", "/proc/self/mem");
    // Beyond u64.
    tree.replace("proc/sys/vm/overcommit_ratio", b"184467440737095516160\n");
    // A FIFO nobody writes to, in place of a sysfs file.
    tree.fifo("sys/kernel/mm/transparent_hugepage/enabled");
    // NUL bytes inside a value of the per-node meminfo.
    let node0 = tree.path("sys/devices/system/node/node0/meminfo");
    let text = std::fs::read_to_string(&node0).unwrap();
    let broken = text.replacen("kB\n", "k\0B\n", 1);
    assert_ne!(text, broken);
    tree.replace("sys/devices/system/node/node0/meminfo", broken.as_bytes());

    let roots = tree.roots();
    let args: Vec<&str> = roots.iter().map(String::as_str).chain(["--no-collector.rdma_netlink"]).collect();
    let exporter = Exporter::start_with_env(&args, &FAST);
    let m = watch(&exporter.address, 3);
    assert_eq!(success(&m, "node"), 0.0);
    assert_eq!(success(&m, "numa"), 0.0);
    for collector in ["process", "cgroup", "rdma_sysfs"] {
        assert_eq!(success(&m, collector), 1.0, "{collector}: {}", exporter.log_text());
    }
    assert!(errors_of(&m, "node", "too_large") > 0.0, "{}", m.text);
    assert!(errors_of(&m, "node", "io") > 0.0, "{}", m.text);
    assert!(errors_of(&m, "node", "parse") > 0.0, "{}", m.text);
    assert!(errors_of(&m, "numa", "parse") > 0.0, "{}", m.text);
    // What still parsed is still exported: pinned pages, the hugepage pools, a sysctl.
    for family in ["memlock_node_pinned_bytes", "memlock_node_overcommit_mode", "memlock_node_hugepages"] {
        assert!(!m.family(family).is_empty(), "{family} missing:\n{}", m.text);
    }
    for family in [
        "memlock_node_mlocked_bytes",
        "memlock_node_max_map_areas",
        "memlock_node_overcommit_ratio",
        "memlock_node_transparent_hugepage_enabled",
    ] {
        assert!(m.family(family).is_empty(), "{family} from a broken file:\n{}", m.text);
    }
    // The log names the first broken file of a run and says what is wrong with it.
    let log = exporter.log_text();
    assert!(log.contains("proc/meminfo: larger than 1048576 bytes"), "{log}");
    assert_alive(exporter);
}

/// One malformed line in /proc/meminfo costs its own field, not every node memory family: the
/// collector reports the failure (counted, logged with the file, the line and "out of range" for an
/// overflow) and exports the rest.
#[test]
fn a_malformed_meminfo_line_costs_only_its_field() {
    let tree = Tree::new("meminfo-field");
    let text = std::fs::read_to_string(tree.path("proc/meminfo")).unwrap();
    let broken: String = text
        .lines()
        .map(|line| match line.split_once(':').map(|(k, _)| k) {
            Some("MemFree") => "MemFree:        lots kB".to_owned(),
            Some("Mlocked") => "Mlocked:        99999999999999999999999 kB".to_owned(),
            _ => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert_ne!(text.trim_end(), broken);
    tree.replace("proc/meminfo", format!("{broken}\n").as_bytes());
    let roots = tree.roots();
    let args: Vec<&str> = roots.iter().map(String::as_str).chain(["--no-collector.rdma_netlink"]).collect();
    let exporter = Exporter::start_with_env(&args, &FAST);
    let m = watch(&exporter.address, 2);
    assert_eq!(success(&m, "node"), 0.0);
    assert!(errors_of(&m, "node", "parse") >= 2.0, "{}", m.text);
    for family in ["memlock_node_memory_free_bytes", "memlock_node_mlocked_bytes"] {
        assert!(m.family(family).is_empty(), "{family} from a broken field:\n{}", m.text);
    }
    for family in [
        "memlock_node_memory_total_bytes",
        "memlock_node_memory_available_bytes",
        "memlock_node_unevictable_bytes",
        "memlock_node_commit_limit_bytes",
    ] {
        assert!(!m.family(family).is_empty(), "{family} missing:\n{}", m.text);
    }
    let log = exporter.log_text();
    assert!(log.contains("proc/meminfo") && log.contains("MemFree"), "{log}");
    assert_alive(exporter);
    // The overflow is named as such (the log shows a run's first error; the parser's text is
    // what any of them says).
    let overflow = memlock_kernel::meminfo::parse_fields("Mlocked: 99999999999999999999999 kB\n").unwrap();
    assert!(overflow.field_errors[0].to_string().contains("out of range"), "{overflow:?}");
}

/// Still running, and no thread of it panicked.
fn assert_alive(mut exporter: Exporter) {
    assert!(exporter.child.try_wait().unwrap().is_none(), "the exporter exited:\n{}", exporter.log_text());
    assert!(!exporter.log_text().contains("panicked"), "{}", exporter.log_text());
    let log = exporter.log.clone();
    let status = exporter.terminate();
    assert_eq!(status.code(), Some(0), "{status:?}\n{}", log.lock().unwrap().join("\n"));
}

#[test]
fn broken_process_files_are_counted_and_the_other_processes_exported() {
    let tree = Tree::new("process");
    let pinned = |pid: u32, name: &str| synthetic::write_process(&tree.path("proc"), pid, name, 4096, "/job").unwrap();
    for pid in 7001..=7006 {
        pinned(pid, "worker");
    }
    // EIO, enormous, VmPin beyond u64 even before it is multiplied by 1024, NUL in the name,
    // a FIFO (reads as empty: a process reaped mid-read, skipped), and a status whose VmPin
    // times 1024 overflows.
    tree.symlink("proc/7001/status", "/proc/self/mem");
    tree.replace(
        "proc/7002/status",
        status(7002, "big", &format!("VmPin:\t{:>8} kB\n{}", 1, "Zzz:\t0\n".repeat(200_000))).as_bytes(),
    );
    tree.replace("proc/7003/status", status(7003, "overflow", "VmPin:\t99999999999999999999 kB").as_bytes());
    tree.replace("proc/7004/status", status(7004, "ev\0il", "VmPin:\t    4096 kB").as_bytes());
    tree.fifo("proc/7005/status");
    tree.replace("proc/7006/status", status(7006, "times1024", "VmPin:\t18446744073709551 kB").as_bytes());
    pinned(7007, "healthy");

    let roots = tree.roots();
    let args: Vec<&str> = roots.iter().map(String::as_str).chain(["--no-collector.rdma_netlink"]).collect();
    let exporter = Exporter::start_with_env(&args, &FAST);
    let m = watch(&exporter.address, 2);
    // io, too_large and parse fail the collector (they are not expected on a real host)...
    assert_eq!(success(&m, "process"), 0.0);
    assert!(m.value("memlock_process_read_errors_total{kind=\"io\"}") >= 1.0, "{}", m.text);
    assert!(m.value("memlock_process_read_errors_total{kind=\"too_large\"}") >= 1.0, "{}", m.text);
    assert!(m.value("memlock_process_read_errors_total{kind=\"parse\"}") >= 2.0, "{}", m.text);
    // ...but every readable process is still exported, NUL in its name included.
    let pids: Vec<String> = m
        .family("memlock_process_pinned_bytes")
        .iter()
        .map(|(k, _)| k.split("pid=\"").nth(1).unwrap().split('"').next().unwrap().to_owned())
        .collect();
    for pid in ["7004", "7007"] {
        assert!(pids.iter().any(|p| p == pid), "pid {pid} not exported: {pids:?}");
    }
    for pid in ["7001", "7002", "7003", "7005", "7006"] {
        assert!(!pids.iter().any(|p| p == pid), "pid {pid} exported: {pids:?}");
    }
    // The NUL reaches the label value escaped and marked, not raw.
    assert!(m.text.contains("comm=\"ev\\\\x00il~"), "{}", m.text);
    assert!(!m.text.contains('\0'));
    for collector in ["node", "numa", "cgroup"] {
        assert_eq!(success(&m, collector), 1.0, "{collector}");
    }
    // The collector logs its first error of a run (again when it changes); the counters
    // above have them all.
    let log = exporter.log_text();
    assert!(
        ["7001/status: Input/output error", "7002/status: larger than", "7003/status", "7006/status"]
            .iter()
            .any(|s| log.contains(s)),
        "{log}"
    );
    assert_alive(exporter);
}

#[test]
fn a_procfs_root_that_is_not_procfs_fails_clearly_on_every_run() {
    let exporter = Exporter::start_with_env(&["--path.procfs", "/sys", "--no-collector.rdma_netlink"], &FAST);
    // Every scrape, not just one in five (full scans are 5 s apart, runs every 100 ms).
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut scrapes = 0;
    while Instant::now() < deadline {
        let m = exporter.metrics();
        assert_eq!(success(&m, "process"), 0.0, "scrape {scrapes}");
        assert_eq!(success(&m, "node"), 0.0, "scrape {scrapes}");
        assert_eq!(success(&m, "cgroup"), 1.0, "sysfs is fine");
        scrapes += 1;
        std::thread::sleep(Duration::from_millis(150));
    }
    watch(&exporter.address, 1);
    let log = exporter.log_text();
    assert!(log.contains("/sys: no process directories: not a procfs mount"), "{log}");
    assert!(log.contains("/sys/meminfo: No such file or directory"), "{log}");
    assert_alive(exporter);
}

/// The exporter run as uid 65534, for whom file modes apply (root reads anything), with every
/// collector at 100 ms.
fn start_unprivileged(args: &[String]) -> Exporter {
    let mut cmd = command_as_nobody();
    cmd.args(args).envs(FAST);
    Exporter::from_command(cmd)
}

/// Opens every directory of the tree to others, so that only the files made 0000 are closed.
fn open_to_others(dir: &Path) {
    set_mode(dir, 0o755);
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            open_to_others(&entry.path());
        } else if kind.is_file() {
            set_mode(&entry.path(), 0o644);
        }
    }
}

#[test]
fn unreadable_files_are_refusals_named_in_the_log_not_crashes() {
    crate::require!(crate::util::is_root(), "needs root to run the exporter as another user");
    let tree = Tree::new("unreadable");
    open_to_others(&tree.0);
    synthetic::write_process(&tree.path("proc"), 7101, "worker", 4096, "/job").unwrap();
    synthetic::write_process(&tree.path("proc"), 7102, "private", 4096, "/job").unwrap();
    open_to_others(&tree.path("proc/7101"));
    open_to_others(&tree.path("proc/7102"));
    set_mode(&tree.path("proc/meminfo"), 0o000);
    set_mode(&tree.path("proc/7102/status"), 0o000);
    let roots = tree.roots();
    let args: Vec<String> = roots.iter().cloned().chain(["--no-collector.rdma_netlink".to_owned()]).collect();
    let exporter = start_unprivileged(&args);
    let m = watch(&exporter.address, 2);
    // A node file is needed: its refusal is an error of the node collector.
    assert_eq!(success(&m, "node"), 0.0);
    assert!(errors_of(&m, "node", "permission") > 0.0, "{}", m.text);
    // A process hidden from us (hidepid, another user namespace) is counted, not a failure.
    assert_eq!(success(&m, "process"), 1.0, "{}", exporter.log_text());
    assert!(m.value("memlock_process_read_errors_total{kind=\"permission\"}") >= 1.0);
    assert!(m.text.contains("pid=\"7101\""));
    assert!(!m.text.contains("pid=\"7102\""));
    let log = exporter.log_text();
    assert!(log.contains("proc/meminfo: Permission denied"), "{log}");
}

/// SIGHUP and a wait for the reload gauge to say `expected`.
fn reload_until(exporter: &Exporter, expected: f64) -> Metrics {
    // SAFETY: kill with the pid of our own child.
    unsafe { libc::kill(exporter.child.id() as i32, libc::SIGHUP) };
    exporter.wait_metrics(Duration::from_secs(15), &format!("the reload gauge to become {expected}"), |m| {
        m.get("memlock_exporter_config_last_reload_successful") == Some(expected)
    })
}

#[test]
fn a_configuration_file_replaced_by_a_directory_or_a_fifo() {
    let tmp = tempfile::Builder::new().prefix("memlock-faults-config-").tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let config = dir.join("config.toml");

    // At start: a usage error naming the file, nothing started.
    std::fs::create_dir(&config).unwrap();
    let out = Command::new(binary())
        .args(["--config.file", config.to_str().unwrap(), "--web.listen-address", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&config.display().to_string()) && stderr.contains("not a regular file"), "{stderr}");

    // While running: the reload fails, the old configuration keeps serving.
    std::fs::remove_dir(&config).unwrap();
    std::fs::write(&config, "[collector.numa]\nenabled = false\n").unwrap();
    // FAST: at their default intervals (up to a minute) some collectors finish no run during a
    // watch.
    let exporter =
        Exporter::start_with_env(&["--config.file", config.to_str().unwrap(), "--no-collector.rdma_netlink"], &FAST);
    assert!(exporter.metrics().get("memlock_scrape_collector_success{collector=\"numa\"}").is_none());
    std::fs::remove_file(&config).unwrap();
    std::fs::create_dir(&config).unwrap();
    let m = reload_until(&exporter, 0.0);
    assert!(m.get("memlock_scrape_collector_success{collector=\"numa\"}").is_none(), "the old configuration stays");
    assert!(exporter.log_text().contains("not a regular file"), "{}", exporter.log_text());
    watch(&exporter.address, 1);
    // Put back: the next reload succeeds.
    std::fs::remove_dir(&config).unwrap();
    std::fs::write(&config, "[collector.numa]\nenabled = true\n").unwrap();
    let m = reload_until(&exporter, 1.0);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut m = m;
    while m.get("memlock_scrape_collector_success{collector=\"numa\"}").is_none() {
        assert!(Instant::now() < deadline, "the fixed configuration was not applied");
        std::thread::sleep(Duration::from_millis(100));
        m = exporter.metrics();
    }
    // A FIFO nobody writes to: a blocking open would hang the event loop (reload, SIGTERM).
    std::fs::remove_file(&config).unwrap();
    mkfifo(&config);
    let m = reload_until(&exporter, 0.0);
    assert_eq!(m.value("memlock_scrape_collector_success{collector=\"numa\"}"), 1.0, "the old configuration stays");
    watch(&exporter.address, 1);
    let log = exporter.log.clone();
    let stopping = Instant::now();
    let status = exporter.terminate();
    assert_eq!(status.code(), Some(0), "{status:?}\n{}", log.lock().unwrap().join("\n"));
    assert!(stopping.elapsed() < Duration::from_secs(5), "SIGTERM took {:?}", stopping.elapsed());
}
