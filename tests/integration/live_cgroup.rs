//! The cgroup collector on this machine's real cgroup v1 memory hierarchy: a cgroup with a
//! limit holding a process that mlocks a known amount, a nested cgroup whose effective limit is
//! its parent's, cgroups created and removed while the exporter walks, and unreadable files.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::util::{command_as_nobody, fixtures, is_root, live_lock, set_mode, Exporter, Metrics, MLOCK_HOLDER};

const MEMORY: &str = "/sys/fs/cgroup/memory";
const LIMIT: u64 = 256 << 20;
const NESTED_LIMIT: u64 = 512 << 20;
const LOCK_BYTES: u64 = 32 << 20;
/// Usage moves by a few pages between the exporter's sample and our read (Python's allocator,
/// kernel stacks); the locked buffer itself does not move.
const USAGE_TOLERANCE: f64 = 2.0 * 1024.0 * 1024.0;

fn require_root() -> bool {
    crate::util::met(is_root(), "live cgroup tests need root (they create memory cgroups and move processes into them)")
        && crate::util::met(
            Path::new(MEMORY).join("memory.usage_in_bytes").exists(),
            &format!("live cgroup tests need a v1 memory hierarchy at {MEMORY} (the VM runs cgroup v2: docs/vm.md)"),
        )
}

/// Test cgroups and the processes in them, removed even when the test fails: the processes are
/// killed first (a cgroup with members cannot be removed), then the directories, deepest first.
#[derive(Default)]
struct Cgroups {
    dirs: Vec<PathBuf>,
    children: Vec<Child>,
}

impl Cgroups {
    fn create(&mut self, dir: PathBuf, limit: Option<u64>) -> PathBuf {
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        self.dirs.push(dir.clone());
        if let Some(limit) = limit {
            std::fs::write(dir.join("memory.limit_in_bytes"), limit.to_string()).unwrap();
        }
        dir
    }
}

impl Drop for Cgroups {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        for dir in self.dirs.iter().rev() {
            // The last task leaves its cgroup shortly after it is reaped.
            let deadline = Instant::now() + Duration::from_secs(5);
            while std::fs::remove_dir(dir).is_err() && dir.exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

fn read_u64(path: &Path) -> u64 {
    std::fs::read_to_string(path).unwrap().trim().parse().unwrap()
}

/// One `key value` line of a v1 `memory.stat`.
fn stat_value(dir: &Path, key: &str) -> u64 {
    let text = std::fs::read_to_string(dir.join("memory.stat")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{key} in memory.stat"))
}

/// A file removed on drop (declared after the cgroups, so it goes first and frees its cache).
struct ScratchFile(PathBuf);

impl Drop for ScratchFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A configuration file, removed on drop.
struct ConfigFile(PathBuf);

impl ConfigFile {
    fn new(name: &str, text: &str) -> Self {
        let path = std::env::temp_dir().join(format!("memlock-live-cgroup-{}-{name}.toml", std::process::id()));
        std::fs::write(&path, text).unwrap();
        Self(path)
    }

    fn arg(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn a_limited_cgroup_with_locked_memory_is_reported_exactly() {
    if !require_root() {
        return;
    }
    let _guard = live_lock();
    let mut cgroups = Cgroups::default();
    let name = format!("memlock-test-{}", std::process::id());
    let outer = cgroups.create(Path::new(MEMORY).join(&name), Some(LIMIT));
    let nested = cgroups.create(outer.join("nested"), Some(NESTED_LIMIT));
    assert_eq!(
        read_u64(&nested.join("memory.limit_in_bytes")),
        NESTED_LIMIT,
        "the nested cgroup's own limit is the higher one"
    );

    // The child waits for "go" so that it is in the cgroup before it faults its buffer in.
    let mut child = Command::new("python3")
        .args(["-c", MLOCK_HOLDER])
        .arg(LOCK_BYTES.to_string())
        .arg("--after-go")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs the locking child");
    std::fs::write(outer.join("cgroup.procs"), child.id().to_string()).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    cgroups.children.push(child);
    writeln!(stdin, "go").unwrap();
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "locked", "child failed to lock: {line}");

    let config = ConfigFile::new(
        "limited",
        &format!("[collector.cgroup]\ninclude = [\"^/{name}(/|$)\"]\nfull_scan_interval = \"1s\"\n"),
    );
    let exporter = Exporter::start(&["--config.file", config.arg(), "--no-collector.process"]);
    let outer_labels = format!("cgroup=\"/{name}\"");
    let nested_labels = format!("cgroup=\"/{name}/nested\"");
    let series = |family: &str, labels: &str| format!("{family}{{{labels}}}");

    // Wait until a sample has seen the whole buffer as unevictable (memcg statistics are flushed
    // every 2 s).
    let m = exporter.wait_metrics(Duration::from_secs(15), "the locked buffer as unevictable", |m| {
        m.get(&series("memlock_cgroup_memory_unevictable_bytes", &outer_labels)).is_some_and(|v| v >= LOCK_BYTES as f64)
    });
    let kernel_usage = read_u64(&outer.join("memory.usage_in_bytes")) as f64;
    let usage = m.value(&series("memlock_cgroup_memory_usage_bytes", &outer_labels));
    assert!(
        (usage - kernel_usage).abs() <= USAGE_TOLERANCE,
        "exporter usage {usage}, memory.usage_in_bytes {kernel_usage}"
    );
    assert!(usage >= LOCK_BYTES as f64, "usage {usage} includes the locked buffer");
    assert!(
        m.value(&series("memlock_cgroup_memory_unevictable_bytes", &outer_labels)) >= LOCK_BYTES as f64,
        "unevictable covers the {LOCK_BYTES} locked bytes:\n{}",
        m.text
    );
    // Locked pages are unevictable, never inactive file cache: all of them are in the working
    // set, which is what the cgroup trend and alerts follow.
    let working_set = m.value(&series("memlock_cgroup_memory_working_set_bytes", &outer_labels));
    assert!(working_set >= LOCK_BYTES as f64 && working_set <= usage, "working set {working_set}, usage {usage}");
    assert_eq!(m.value(&series("memlock_cgroup_memory_limit_bytes", &outer_labels)), LIMIT as f64);
    assert_eq!(m.value(&series("memlock_cgroup_memory_limit_unlimited", &outer_labels)), 0.0);
    // The nested cgroup's own limit is higher: its effective limit is the parent's.
    assert_eq!(m.value(&series("memlock_cgroup_memory_limit_bytes", &nested_labels)), LIMIT as f64);
    assert_eq!(
        m.value(&series("memlock_cgroup_memory_usage_bytes", &nested_labels)),
        0.0,
        "nothing runs in the nested cgroup"
    );
    assert_eq!(m.value(&series("memlock_cgroup_memory_events_total", &format!("{outer_labels},event=\"max\""))), 0.0);
    assert_eq!(m.value("memlock_scrape_collector_success{collector=\"cgroup\"}"), 1.0);
    assert_eq!(m.value("memlock_cgroup_hierarchy_info{layout=\"hybrid\",memory=\"v1\",rdma=\"none\"}"), 1.0);
    // Only the two test cgroups pass the include pattern.
    assert_eq!(m.family("memlock_cgroup_memory_usage_bytes").len(), 2, "{}", m.text);

    // Page cache: a writer in the nested cgroup leaves 64 MiB of file pages charged to it (on a
    // disk file system: tmpfs pages would be shmem, on the anon lists). New file pages start on
    // the inactive list, so the usage grows and the working set does not.
    const CACHE_BYTES: u64 = 64 << 20;
    let file = ScratchFile(PathBuf::from(format!("/var/tmp/memlock-live-cache-{}", std::process::id())));
    let status = Command::new("sh")
        .args([
            "-c",
            "echo $$ > \"$1/cgroup.procs\" && exec dd if=/dev/zero of=\"$2\" bs=1M count=64 status=none",
            "sh",
        ])
        .arg(&nested)
        .arg(&file.0)
        .status()
        .expect("sh runs dd");
    assert!(status.success(), "dd in the nested cgroup: {status}");
    let usage_and_working_set = |m: &Metrics| {
        (
            m.value(&series("memlock_cgroup_memory_usage_bytes", &nested_labels)),
            m.value(&series("memlock_cgroup_memory_working_set_bytes", &nested_labels)),
        )
    };
    let m = exporter.wait_metrics(Duration::from_secs(15), "the page cache in the nested cgroup", |m| {
        let (usage, working_set) = usage_and_working_set(m);
        usage >= CACHE_BYTES as f64 && working_set + (CACHE_BYTES / 2) as f64 <= usage
    });
    let (usage, working_set) = usage_and_working_set(&m);
    let inactive = stat_value(&nested, "total_inactive_file");
    let kernel_working_set = read_u64(&nested.join("memory.usage_in_bytes")).saturating_sub(inactive) as f64;
    eprintln!(
        "page cache: usage {usage}, working set {working_set}, kernel usage − total_inactive_file {kernel_working_set}"
    );
    assert!(usage >= CACHE_BYTES as f64, "the 64 MiB written are charged to the nested cgroup: usage {usage}");
    assert!(
        working_set + (CACHE_BYTES / 2) as f64 <= usage,
        "most of the cache is inactive: working set {working_set}, usage {usage}"
    );
    assert!(
        (working_set - kernel_working_set).abs() <= USAGE_TOLERANCE,
        "exporter {working_set}, kernel {kernel_working_set}"
    );
    drop(stdin);
    drop(file);
    drop(cgroups);
    assert!(!outer.exists(), "the test cgroups are removed");
}

#[test]
fn cgroups_removed_during_walks_do_not_fail_the_collector() {
    if !require_root() {
        return;
    }
    let _guard = live_lock();
    let mut cgroups = Cgroups::default();
    let name = format!("memlock-churn-{}", std::process::id());
    let churn = cgroups.create(Path::new(MEMORY).join(&name), None);
    let config = ConfigFile::new(
        "churn",
        &format!(
            "[collector.cgroup]\ninterval = \"100ms\"\nfull_scan_interval = \"100ms\"\ninclude = [\"^/{name}\"]\n"
        ),
    );
    let exporter = Exporter::start(&["--config.file", config.arg(), "--no-collector.process", "--no-collector.numa"]);

    // Keep about 30 cgroups alive while creating and removing others as fast as possible.
    let stop = Arc::new(AtomicBool::new(false));
    let created = Arc::new(AtomicU64::new(0));
    let churner = {
        let (stop, created, churn) = (stop.clone(), created.clone(), churn.clone());
        std::thread::spawn(move || {
            let mut live = std::collections::VecDeque::new();
            while !stop.load(Ordering::Relaxed) {
                let dir = churn.join(format!("c{}", created.load(Ordering::Relaxed)));
                if std::fs::create_dir(&dir).is_ok() {
                    live.push_back(dir);
                    created.fetch_add(1, Ordering::Relaxed);
                }
                while live.len() > 30 {
                    let _ = std::fs::remove_dir(live.pop_front().unwrap());
                }
            }
            for dir in live {
                let _ = std::fs::remove_dir(dir);
            }
        })
    };
    // Scrape until the walks have seen the tree change under them (several tree sizes, enough
    // churn, enough scrapes), however long the shared CPUs make that take: a fixed window sees too
    // few sizes when the rest of the suite runs beside it. Only a hang reaches the deadline.
    const WANTED_SIZES: usize = 4;
    const WANTED_CREATED: u64 = 100;
    const WANTED_SCRAPES: usize = 20;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut scrapes = 0;
    let mut walked_counts = std::collections::BTreeSet::new();
    let mut vanished_seen = 0.0;
    while walked_counts.len() < WANTED_SIZES
        || created.load(Ordering::Relaxed) < WANTED_CREATED
        || scrapes < WANTED_SCRAPES
    {
        if Instant::now() >= deadline {
            break;
        }
        let m = exporter.metrics();
        assert_eq!(
            m.value("memlock_scrape_collector_success{collector=\"cgroup\"}"),
            1.0,
            "after {scrapes} scrapes:\n{}",
            m.text
        );
        walked_counts.insert(m.value("memlock_cgroup_scan_cgroups_walked") as u64);
        vanished_seen += m.value("memlock_cgroup_scan_cgroups_skipped{reason=\"vanished\"}");
        scrapes += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    churner.join().unwrap();
    let created = created.load(Ordering::Relaxed);
    let m = exporter.metrics();
    assert!(
        m.family("memlock_exporter_collector_errors_total").iter().all(|(k, _)| !k.contains("collector=\"cgroup\"")),
        "{}",
        m.text
    );
    assert!(created >= WANTED_CREATED, "the churn created only {created} cgroups in 120 s");
    assert!(
        walked_counts.len() >= WANTED_SIZES,
        "the walks did not see the tree change in 120 s ({scrapes} scrapes): {walked_counts:?}"
    );
    eprintln!(
        "churn: {created} cgroups created, {scrapes} scrapes, walked counts {walked_counts:?}, vanished seen \
        {vanished_seen}"
    );
}

#[test]
fn unreadable_cgroup_files_are_counted_and_logged_not_fatal() {
    if !require_root() {
        return;
    }
    let _guard = live_lock();
    // A copy of the v1 fixture tree, readable by uid 65534 except for one cgroup's memory.stat
    // and the listing of one cgroup directory (its own files stay readable: mode --x).
    let tree = std::env::temp_dir().join(format!("memlock-cgroup-perm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tree);
    copy_tree(&fixtures().join("cgroup-v1/sys"), &tree.join("sys"));
    std::fs::create_dir_all(tree.join("proc")).unwrap();
    set_mode(&tree, 0o755);
    let memory = tree.join("sys/fs/cgroup/memory");
    set_mode(&memory.join("system.slice/sshd.service/memory.stat"), 0o000);
    set_mode(&memory.join("slurm"), 0o111);

    let exporter = start_as_nobody(&tree);
    let m = exporter.wait_metrics(Duration::from_secs(15), "the permission-denied count", |m| {
        m.get("memlock_cgroup_scan_cgroups_skipped{reason=\"permission_denied\"}").is_some()
    });
    // Counted (one file, one directory listing), logged once, and not a collector failure:
    // like hidepid for processes, what the exporter may read is the deployment's choice.
    assert_eq!(m.value("memlock_cgroup_scan_cgroups_skipped{reason=\"permission_denied\"}"), 2.0, "{}", m.text);
    assert_eq!(m.value("memlock_cgroup_scan_cgroups_skipped{reason=\"read_error\"}"), 0.0);
    assert_eq!(m.value("memlock_scrape_collector_success{collector=\"cgroup\"}"), 1.0);
    assert!(
        m.family("memlock_exporter_collector_errors_total").iter().all(|(k, _)| !k.contains("collector=\"cgroup\"")),
        "{}",
        m.text
    );
    let log = exporter.log_text();
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains("permission denied")).collect();
    assert_eq!(warnings.len(), 1, "logged once, not on every run:\n{log}");
    assert!(warnings[0].contains("\"level\":\"WARN\"") && warnings[0].contains("/slurm"), "{}", warnings[0]);
    // Everything else is still there: the sshd cgroup without its memory.stat values, the
    // slurm cgroup without its subtree, all other cgroups whole.
    let sshd = "cgroup=\"/system.slice/sshd.service\",systemd_unit=\"sshd.service\"";
    assert!(m.get(&format!("memlock_cgroup_memory_usage_bytes{{{sshd}}}")).is_some());
    assert!(m.get(&format!("memlock_cgroup_memory_unevictable_bytes{{{sshd}}}")).is_none());
    assert!(m.get("memlock_cgroup_memory_usage_bytes{cgroup=\"/slurm\"}").is_some());
    assert!(!m.text.contains("job_99"));
    assert!(m.text.contains("container_id=\"d41d8cd98f00b204e9800998ecf8427ed41d8cd98f00b204e9800998ecf8427e\""));
    drop(exporter);
    set_mode(&memory.join("slurm"), 0o755);
    std::fs::remove_dir_all(&tree).unwrap();
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    set_mode(to, 0o755);
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
            set_mode(&target, 0o644);
        }
    }
}

/// The exporter as nobody on a copy of a cgroup tree (only the cgroup and RDMA collectors).
fn start_as_nobody(tree: &Path) -> Exporter {
    let mut cmd = command_as_nobody();
    cmd.arg("--path.sysfs").arg(tree.join("sys")).arg("--path.procfs").arg(tree.join("proc"));
    cmd.args(["--no-collector.node", "--no-collector.numa", "--no-collector.process"]);
    Exporter::from_command(cmd)
}

/// On v1 the kernel counts an OOM kill only in the victim's own cgroup (memcg_memory_event,
/// include/linux/memcontrol.h, stops at the first cgroup off the default hierarchy), so a job's
/// cgroup alone would show `oom_kill` 0 for a process killed in its step. A process is OOM-killed
/// in a child cgroup with a small limit: the parent's exported figure counts it, while the parent's
/// own memory.oom_control still says 0.
#[test]
fn an_oom_kill_in_a_child_cgroup_counts_in_the_parent() {
    if !require_root() {
        return;
    }
    let _guard = live_lock();
    let mut cgroups = Cgroups::default();
    let name = format!("memlock-kernel-oom-{}", std::process::id());
    let parent = cgroups.create(Path::new(MEMORY).join(&name), None);
    let step = cgroups.create(parent.join("step_0"), Some(32 << 20));
    let config = ConfigFile::new(
        "oom",
        &format!("[collector.cgroup]\ninclude = [\"^/{name}(/|$)\"]\nfull_scan_interval = \"1s\"\n"),
    );
    let exporter = Exporter::start(&["--config.file", config.arg(), "--no-collector.process"]);
    let kills = |m: &Metrics, path: &str| {
        m.get(&format!("memlock_cgroup_memory_events_total{{cgroup=\"{path}\",event=\"oom_kill\"}}"))
    };
    let parent_label = format!("/{name}");
    let step_label = format!("/{name}/step_0");
    exporter.wait_metrics(Duration::from_secs(15), "both test cgroups", |m| {
        kills(m, &parent_label) == Some(0.0) && kills(m, &step_label) == Some(0.0)
    });

    // 128 MiB written under a 32 MiB limit, without swap to go to: the OOM killer ends it.
    let status = Command::new("sh")
        .args(["-c", "echo $$ > \"$1/cgroup.procs\" && exec python3 -c 'b = b\"x\" * (128 << 20)'", "sh"])
        .arg(&step)
        .stderr(Stdio::null())
        .status()
        .expect("sh runs python3");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "the OOM killer's SIGKILL: {status}");
    let own = |dir: &Path| {
        let text = std::fs::read_to_string(dir.join("memory.oom_control")).unwrap();
        text.lines().find_map(|l| l.strip_prefix("oom_kill ")?.parse::<u64>().ok()).expect("oom_kill line")
    };
    assert_eq!((own(&step), own(&parent)), (1, 0), "the kernel counts it in the victim's cgroup only");

    let m = exporter.wait_metrics(Duration::from_secs(15), "the kill in the parent's figure", |m| {
        kills(m, &parent_label) == Some(1.0)
    });
    assert_eq!(kills(&m, &step_label), Some(1.0));
    // The step ends and its cgroup goes: the parent's counter does not go back down.
    let removed = cgroups.dirs.pop().expect("the step cgroup was created last");
    std::fs::remove_dir(&removed).expect("remove the step cgroup");
    let m = exporter.wait_metrics(Duration::from_secs(15), "the step cgroup gone", |m| kills(m, &step_label).is_none());
    assert_eq!(kills(&m, &parent_label), Some(1.0), "{}", m.text);
    assert_eq!(m.value("memlock_scrape_collector_success{collector=\"cgroup\"}"), 1.0);
}
