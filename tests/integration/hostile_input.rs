//! Hostile input: what a local user, or whoever writes a root the exporter is pointed at, can put
//! in front of it. Each test reproduces the attack on loopback, bounded in time, and checks that it
//! is defused: label values bounded and marked, control characters escaped.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::synthetic;
use crate::util::{fixtures, Exporter, Metrics};

/// The exported bound of a label value (crates/core/src/exposition.rs, `MAX_LABEL_VALUE_BYTES`).
const MAX_LABEL_VALUE_BYTES: usize = 512;

/// A copy of the fixture roots, removed on drop.
struct Tree(PathBuf);

impl Tree {
    fn new(name: &str) -> Tree {
        let root = std::env::temp_dir().join(format!("memlock-hostile-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        synthetic::copy_tree(&fixtures().join("proc"), &root.join("proc")).unwrap();
        synthetic::copy_tree(&fixtures().join("sys"), &root.join("sys")).unwrap();
        Tree(root)
    }

    fn proc(&self) -> PathBuf {
        self.0.join("proc")
    }

    fn start(&self, extra: &[&str]) -> Exporter {
        let (procfs, sysfs) = (self.0.join("proc"), self.0.join("sys"));
        let mut args = vec!["--path.procfs", procfs.to_str().unwrap(), "--path.sysfs", sysfs.to_str().unwrap()];
        args.extend_from_slice(&["--no-collector.rdma_netlink"]);
        args.extend_from_slice(extra);
        Exporter::start(&args)
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// GET /metrics, reading at most `limit` bytes of the response: a scrape past it is an error
/// (with the bytes read so far), not an allocation without bound in the test.
fn scrape_at_most(address: &str, limit: usize) -> Result<String, usize> {
    let mut stream = TcpStream::connect(address).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    (&mut stream).take(limit as u64 + 1).read_to_end(&mut raw).expect("read the scrape");
    if raw.len() > limit {
        return Err(raw.len());
    }
    let text = String::from_utf8(raw).expect("UTF-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // The body may be chunked; the sizes compared below are of what went over the wire.
    Ok(body.to_owned())
}

fn peak_rss_kib(exporter: &Exporter) -> u64 {
    synthetic::status_kib(&format!("/proc/{}/status", exporter.child.id()), "VmHWM").unwrap_or(0)
}

/// The label values of every series, as written (escaped).
fn label_values(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('{').and_then(|(_, rest)| rest.rsplit_once('}')).map(|(labels, _)| labels))
        .flat_map(|labels| labels.split("\",").map(|kv| kv.split_once("=\"").map_or("", |(_, v)| v)))
        .map(|value| value.strip_suffix('"').unwrap_or(value))
        .collect()
}

fn attack_processes(procfs: &Path, path_of: impl Fn(u32) -> String) {
    for i in 0..50 {
        synthetic::write_process(procfs, 9000 + i, "rank", 4096, &path_of(i)).unwrap();
    }
}

/// 50 processes with 1 MB cgroup paths must not make a scrape of hundreds of MB, every series of a
/// process and of its cgroup repeating the path. A kernel prints at most 4095 bytes of path
/// (PATH_MAX); longer ones, from a procfs root someone else writes, are refused as not from a
/// kernel. 4095-byte paths, which any user allowed to create cgroups can make, are cut and marked.
/// The same 50 processes with short paths, measured in the same run, are the baseline: each
/// rewritten value adds at most the bound to it.
#[test]
fn long_cgroup_paths_make_a_bounded_scrape() {
    let baseline_tree = Tree::new("label-baseline");
    attack_processes(&baseline_tree.proc(), |i| format!("/attack-{i:02}"));
    // No series budget: the label bound is measured on every one of the 50 processes, of which the
    // default budget (series.limit 500) would export only the most urgent.
    let baseline_exporter = baseline_tree.start(&["--series.limit", "0"]);
    let started = Instant::now();
    let baseline = scrape_at_most(&baseline_exporter.address, 64 << 20).expect("the baseline scrape is small");
    let baseline_time = started.elapsed();
    let baseline_rss = peak_rss_kib(&baseline_exporter);
    drop(baseline_exporter);

    let tree = Tree::new("label-attack");
    let filler = "d".repeat(4095 - "/attack-00/".len());
    attack_processes(&tree.proc(), |i| format!("/attack-{i:02}/{filler}"));
    let exporter = tree.start(&["--series.limit", "0"]);
    let started = Instant::now();
    let body = scrape_at_most(&exporter.address, 64 << 20)
        .unwrap_or_else(|read| panic!("the scrape is over {read} bytes: label values are not bounded"));
    let attack_time = started.elapsed();
    let attack_rss = peak_rss_kib(&exporter);
    let m = Metrics::parse(&body);
    assert_eq!(m.value("memlock_scrape_collector_success{collector=\"process\"}"), 1.0, "a kernel's path");

    // Each of the 50 processes is still its own series, its path cut and marked.
    let rank_paths: std::collections::BTreeSet<&str> = m
        .family("memlock_process_pinned_bytes")
        .into_iter()
        .filter(|(series, _)| series.contains("comm=\"rank\""))
        .map(|(series, _)| series.split("cgroup=\"").nth(1).unwrap().split('"').next().unwrap())
        .collect();
    assert_eq!(rank_paths.len(), 50, "{rank_paths:?}");
    for path in &rank_paths {
        assert_eq!(path.len(), MAX_LABEL_VALUE_BYTES, "{path}");
        let (kept, mark) = path.rsplit_once('~').unwrap();
        assert!(kept.starts_with("/attack-") && kept.ends_with("ddd"), "{path}");
        assert!(mark.len() == 16 && mark.bytes().all(|b| b.is_ascii_hexdigit()), "{path}");
    }
    let longest = label_values(&body).iter().map(|v| v.len()).max().unwrap();
    assert!(longest <= MAX_LABEL_VALUE_BYTES, "a label value of {longest} bytes");
    let rewritten = m.value("memlock_exporter_label_values_rewritten");
    assert!(rewritten >= 50.0, "{rewritten}");
    let bound = baseline.len() + rewritten as usize * MAX_LABEL_VALUE_BYTES;
    assert!(body.len() <= bound, "{} bytes against a bound of {bound}", body.len());
    eprintln!(
        "label bound: 50 processes with 4095-byte cgroup paths: scrape {} bytes in {attack_time:?}, exporter peak \
         RSS {attack_rss} KiB; the same with short paths: {} bytes in {baseline_time:?}, peak RSS {baseline_rss} \
         KiB; {rewritten} label values rewritten",
        body.len(),
        baseline.len(),
    );
    drop(exporter);

    // 1 MB paths: refused, naming the file; the processes are exported without them.
    let tree = Tree::new("label-megabyte");
    let filler = "d".repeat(1_000_000 - "/attack-00/".len());
    attack_processes(&tree.proc(), |i| format!("/attack-{i:02}/{filler}"));
    let exporter = tree.start(&["--series.limit", "0"]);
    let started = Instant::now();
    let body = scrape_at_most(&exporter.address, 64 << 20)
        .unwrap_or_else(|read| panic!("the scrape is over {read} bytes: label values are not bounded"));
    let megabyte_time = started.elapsed();
    let megabyte_rss = peak_rss_kib(&exporter);
    let m = Metrics::parse(&body);
    let ranks = m.family("memlock_process_pinned_bytes").into_iter().filter(|(s, _)| s.contains("comm=\"rank\""));
    assert_eq!(ranks.clone().count(), 50);
    assert!(ranks.clone().all(|(series, _)| !series.contains("cgroup=")), "{body}");
    assert!(m.value("memlock_process_read_errors_total{kind=\"parse\"}") >= 50.0, "{body}");
    assert!(body.len() <= bound, "{} bytes against a bound of {bound}", body.len());
    let log = exporter.log_text();
    assert!(log.contains("/cgroup: a path of 1000000 bytes: the kernel prints at most 4095"), "{log}");
    // Well under the baseline plus the 50 MB the paths take on disk.
    assert!(megabyte_rss < baseline_rss + 32 * 1024, "peak RSS {megabyte_rss} KiB");
    eprintln!(
        "label bound: 50 processes with 1 MB cgroup paths: scrape {} bytes in {megabyte_time:?}, exporter peak RSS \
         {megabyte_rss} KiB",
        body.len()
    );
}

/// Real cgroups of this machine's v1 memory hierarchy, removed on drop (deepest first).
struct LiveCgroups(Vec<PathBuf>);

impl Drop for LiveCgroups {
    fn drop(&mut self) {
        for dir in self.0.iter().rev() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// The exporter as nobody, logging text (not JSON, as the other tests do): its stderr lines,
/// and its address from the `listening` line.
struct TextExporter {
    child: std::process::Child,
    address: String,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl TextExporter {
    fn start_as_nobody(args: &[&str]) -> TextExporter {
        use std::io::BufRead;
        let mut child = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(crate::util::binary_runnable_by(65534))
            .args(["--web.listen-address", "127.0.0.1:0", "--log.format", "text"])
            .args(args)
            .current_dir("/")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn the exporter under setpriv");
        let stderr = child.stderr.take().unwrap();
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = lines.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split(" listening ").nth(1) {
                    let address = rest.split("address=").nth(1).and_then(|a| a.split(' ').next());
                    let _ = tx.send(address.unwrap_or_default().to_owned());
                }
                sink.lock().unwrap().push(line);
            }
        });
        let address = rx.recv_timeout(Duration::from_secs(20)).unwrap_or_else(|_| {
            let _ = child.kill();
            panic!("the exporter did not start: {:?}", lines.lock().unwrap())
        });
        TextExporter { child, address, lines }
    }

    fn log(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }
}

impl Drop for TextExporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Control characters in the names of real cgroups. The kernel refuses a newline in a cgroup name
/// (EINVAL here; `cgroup_mkdir` and `cgroup1_rename` in kernel/cgroup/ reject '\n' to keep
/// /proc/<pid>/cgroup parsable), so the newline case runs in logging.rs's tests through the real
/// formatter; every other control character is accepted. A name with a carriage return (a terminal
/// shows what follows as a line of its own), vertical tab, form feed, NEL and a terminal escape:
/// the exporter (as nobody, so that the cgroup's memory.stat, mode 0600, is refused and its path
/// logged) logs the path with each as `\xNN`, and exports it as a label value escaped and marked.
#[test]
fn a_cgroup_named_with_control_characters_forges_no_log_line_and_no_raw_label() {
    crate::require!(crate::util::is_root(), "this test creates real cgroups: run as root");
    let _guard = crate::util::live_lock();
    let memory = Path::new("/sys/fs/cgroup/memory");
    crate::require!(
        memory.join("memory.usage_in_bytes").exists(),
        "this test needs a v1 memory hierarchy at {}",
        memory.display()
    );
    let top = format!("memlock-hostile-{}", std::process::id());
    let forged = "2026-01-01T00:00:00.000000Z ERROR forged: the exporter is compromised";
    let name = format!("job\r{forged}\u{b}\u{c}\u{85}\u{1b}[2J");
    // The kernel's side of it, measured rather than assumed.
    let newline = memory.join(format!("memlock-hostile-{}-a\nb", std::process::id()));
    let refused = std::fs::create_dir(&newline).map_err(|e| e.raw_os_error());
    let _ = std::fs::remove_dir(&newline);
    assert_eq!(refused, Err(Some(libc::EINVAL)), "the kernel refuses a newline in a cgroup name");
    let mut cgroups = LiveCgroups(Vec::new());
    for dir in [memory.join(&top), memory.join(&top).join(&name)] {
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {dir:?}: {e}"));
        cgroups.0.push(dir);
    }
    crate::util::set_mode(&memory.join(&top).join(&name).join("memory.stat"), 0o600);
    let config = std::env::temp_dir().join(format!("memlock-hostile-{}.toml", std::process::id()));
    std::fs::write(&config, format!("[collector.cgroup]\ninclude = [\"^/{top}\"]\n")).unwrap();
    crate::util::set_mode(&config, 0o644);

    let exporter = TextExporter::start_as_nobody(&[
        "--config.file",
        config.to_str().unwrap(),
        "--no-collector.node",
        "--no-collector.numa",
        "--no-collector.process",
        "--no-collector.rdma_sysfs",
        "--no-collector.rdma_netlink",
    ]);
    let deadline = Instant::now() + Duration::from_secs(15);
    let (m, log) = loop {
        let (status, body) = crate::util::http_get(&exporter.address, "/metrics").expect("a scrape");
        assert_eq!(status, 200, "{body}");
        let log = exporter.log();
        if body.contains("job\\\\x0d2026") && log.iter().any(|l| l.contains("not readable")) {
            break (Metrics::parse(&body), log);
        }
        assert!(Instant::now() < deadline, "no series or warning for the cgroup:\n{body}\n{log:#?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = std::fs::remove_file(&config);

    // Every line the exporter wrote is one of its own: it starts with a timestamp and a level.
    for line in &log {
        let mut words = line.split_whitespace();
        let (time, level) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        assert!(time.starts_with("20") && time.ends_with('Z'), "a line not written as a log line: {line:?}");
        assert!(["INFO", "WARN", "ERROR", "DEBUG"].contains(&level), "{line:?}");
        assert!(!line.chars().any(char::is_control), "{line:?}");
    }
    let warning = log.iter().find(|l| l.contains("not readable")).unwrap();
    assert!(warning.contains(&format!("{top}/job\\x0d{forged}\\x0b\\x0c\\x85\\x1b[2J")), "{warning}");

    // The label: escaped, marked, on one line.
    let series: Vec<&str> = m
        .family("memlock_cgroup_memory_usage_bytes")
        .into_iter()
        .map(|(key, _)| key)
        .filter(|key| key.contains("/job"))
        .collect();
    assert_eq!(series.len(), 1, "{series:?}");
    let prefix = format!("cgroup=\"/{top}/job\\\\x0d{forged}\\\\x0b\\\\x0c\\\\x85\\\\x1b[2J~");
    assert!(series[0].contains(&prefix), "{}", series[0]);
    assert!(m.value("memlock_exporter_label_values_rewritten") >= 1.0);
    drop(exporter);
}

/// The worst web configuration the checks let parse (crates/http/src/webconfig/mod.rs): 256 KiB of tokens inside the
/// 32 flow collections allowed.
fn slowest_accepted_web_config() -> String {
    let mut text = format!("basic_auth_users: {}", "[".repeat(32));
    while text.len() < (256 << 10) - 100 {
        text.push_str("a, ");
    }
    text.push('a');
    text.push_str(&"]".repeat(32));
    text.push('\n');
    text
}

/// Through the binary: a hostile web configuration on reload is refused unparsed, the old one keeps
/// serving, and SIGTERM sent while a reload parses the slowest file allowed stops the daemon
/// cleanly without waiting for the parse. Prints both times.
#[test]
fn a_hostile_web_config_on_reload_is_refused_and_sigterm_does_not_wait_for_a_parse() {
    let dir = std::env::temp_dir().join(format!("memlock-hostile-web-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let web = dir.join("web.yml");
    let exporter = HostileWebExporter::start(&web);

    // 500 KB of nesting, quadratic to parse: refused at once (the file watch
    // reloads), the old configuration kept.
    std::fs::write(&web, format!("basic_auth_users: {}{}\n", "[".repeat(250_000), "]".repeat(250_000))).unwrap();
    exporter.wait_count("configuration reload failed", 1);
    let log = exporter.exporter.log_text();
    assert!(log.contains("larger than 262144 bytes"), "{log}");
    let m = exporter.exporter.metrics();
    assert_eq!(m.value("memlock_exporter_config_last_reload_successful"), 0.0);
    let status = exporter.exporter.terminate();
    assert!(status.success(), "{status:?}");

    // Waiting for the parse takes most of it (less the moments since SIGHUP was seen: 0.8 of it
    // when measured so) in every attempt; not waiting, a few tens of milliseconds against
    // hundreds. Load only adds to a stop (140 ms against a 297 ms parse once, with six builds on
    // both cores), never takes from it, so the least ratio of a few attempts is the one to judge:
    // under half of the parse parts the two.
    let mut attempts = Vec::new();
    for _ in 0..3 {
        let (parse, stop) = sigterm_during_the_slowest_parse(&web);
        attempts.push(format!("{stop:?} of {parse:?}"));
        if stop < parse / 2 {
            eprintln!(
                "web config reload: the slowest file allowed ({} bytes, 32 levels) reloads in {parse:?}; SIGTERM \
                 during that reload stops the daemon in {stop:?} (attempts: {})",
                slowest_accepted_web_config().len(),
                attempts.join(", ")
            );
            let _ = std::fs::remove_dir_all(&dir);
            return;
        }
    }
    panic!("SIGTERM during a reload took at least half of its parse in every attempt, it waited for it: {attempts:?}");
}

/// The exporter on the fixtures with `web` as its web configuration, written good first.
struct HostileWebExporter {
    exporter: Exporter,
}

impl HostileWebExporter {
    fn start(web: &Path) -> Self {
        let good = "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n";
        std::fs::write(web, good).unwrap();
        let roots = fixtures();
        let (procfs, sysfs) = (roots.join("proc"), roots.join("sys"));
        let exporter = Exporter::start(&[
            "--path.procfs",
            procfs.to_str().unwrap(),
            "--path.sysfs",
            sysfs.to_str().unwrap(),
            "--web.config.file",
            web.to_str().unwrap(),
        ]);
        Self { exporter }
    }

    fn count(&self, what: &str) -> usize {
        self.exporter.log_text().matches(what).count()
    }

    fn wait_count(&self, what: &str, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.count(what) < n {
            assert!(Instant::now() < deadline, "no {n} {what:?} in the log:\n{}", self.exporter.log_text());
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn hup(&self) {
        // SAFETY: kill with the pid of our own child.
        assert_eq!(unsafe { libc::kill(self.exporter.child.id() as i32, libc::SIGHUP) }, 0);
    }
}

/// One exporter: how long the slowest allowed web configuration takes to parse here (a debug
/// build: from the log line that starts the reload to the one that ends it), then how long
/// SIGTERM takes to stop the daemon in the middle of the same reload.
fn sigterm_during_the_slowest_parse(web: &Path) -> (Duration, Duration) {
    let exporter = HostileWebExporter::start(web);
    std::fs::write(web, slowest_accepted_web_config()).unwrap();
    exporter.wait_count("configuration reload failed", 1);
    let parse = {
        let log = exporter.exporter.log_text();
        let at = |what: &str| {
            let line = log.lines().rev().find(|l| l.contains(what)).unwrap();
            let time = line.split("\"timestamp\":\"").nth(1).unwrap().split('"').next().unwrap();
            // 2026-12-01T10:20:00.123456Z: seconds of the day are enough within one test.
            let clock: Vec<f64> = time[11..time.len() - 1].split(':').map(|f| f.parse().unwrap()).collect();
            clock[0] * 3600.0 + clock[1] * 60.0 + clock[2]
        };
        Duration::from_secs_f64(at("configuration reload failed") - at("configuration files changed, reloading"))
    };

    // SIGTERM in the middle of the same reload (unchanged files: SIGHUP reloads anyway).
    let hups = exporter.count("SIGHUP received");
    exporter.hup();
    exporter.wait_count("SIGHUP received", hups + 1);
    let sent = Instant::now();
    let status = exporter.exporter.terminate();
    let stop = sent.elapsed();
    assert!(status.success(), "{status:?}");
    (parse, stop)
}

/// A v1 memory cgroup delegated to a user (as systemd's `Delegate=` or Slurm's v1 step
/// directory does: the directory and its `tasks`/`cgroup.procs` owned by the user), and the
/// processes put into it, removed on drop, deepest first.
struct Delegated {
    root: PathBuf,
    children: Vec<std::process::Child>,
}

impl Drop for Delegated {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let mut dirs = Vec::new();
        let mut stack = vec![self.root.clone()];
        while let Some(dir) = stack.pop() {
            if let Ok(entries) = std::fs::read_dir(&dir) {
                stack.extend(entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()));
            }
            dirs.push(dir);
        }
        for dir in dirs.iter().rev() {
            let deadline = Instant::now() + Duration::from_secs(5);
            while std::fs::remove_dir(dir).is_err() && dir.exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// A user given a cgroup subtree may name directories in it like the kubelet's and Slurm's; a
/// process of theirs in it must not be exported as another user's pod (`pod_uid`,
/// `container_id`) or Slurm job (`slurm_job`). Real cgroups on this machine's v1
/// memory hierarchy, made by uid 65534 through setpriv, with real processes of that user.
#[test]
fn cgroup_names_made_in_a_delegated_subtree_forge_no_pod_or_job() {
    use std::os::unix::fs::chown;
    use std::process::{Command, Stdio};
    let memory = Path::new("/sys/fs/cgroup/memory");
    crate::require!(crate::util::is_root(), "needs root to make cgroups and hand them to uid 65534");
    crate::require!(memory.join("tasks").exists(), "needs a cgroup v1 memory hierarchy at {}", memory.display());
    let _live = crate::util::live_lock();
    let name = format!("memlock-hostile-delegated-{}", std::process::id());
    let root = memory.join(&name);
    std::fs::create_dir(&root).unwrap();
    let mut delegated = Delegated { root: root.clone(), children: Vec::new() };
    for path in [root.clone(), root.join("tasks"), root.join("cgroup.procs")] {
        chown(&path, Some(65534), Some(65534)).unwrap();
    }
    const UID_: &str = "6b0e3b1a_2a43_4a3b_9c1e_2f1d0c7a9e11";
    const HEX: &str = "3f2b6c1d8e9a0b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c";
    let forged = [
        format!("kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{HEX}.scope"),
        "system.slice/slurmstepd.scope/job_4242/step_0".to_owned(),
        "slurm/uid_0/job_4243/step_0".to_owned(),
    ];
    // A copy of sleep the user may run, under a name of its own: the machine may run many sleeps.
    let bin_dir = std::env::temp_dir().join(format!("{name}-bin"));
    std::fs::create_dir_all(&bin_dir).unwrap();
    crate::util::set_mode(&bin_dir, 0o755);
    let sleeper = bin_dir.join("memlock-forged");
    std::fs::copy("/bin/sleep", &sleeper).unwrap();
    crate::util::set_mode(&sleeper, 0o755);
    let mut pids = Vec::new();
    for path in &forged {
        // The user makes the directories and moves its own process in: nothing of root's.
        let child = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c"])
            .arg("mkdir -p \"$1\" && echo $$ > \"$1/tasks\" && exec \"$2\" 120")
            .args(["sh", &root.join(path).display().to_string(), &sleeper.display().to_string()])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        pids.push(child.id());
        delegated.children.push(child);
    }
    let expected: Vec<String> = forged.iter().map(|p| format!("/{name}/{p}")).collect();
    for (pid, path) in pids.iter().zip(&expected) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let in_place = || {
            std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .is_ok_and(|c| c.lines().any(|l| l.contains(":memory:") && l.ends_with(path.as_str())))
                && std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "memlock-forged")
        };
        while !in_place() {
            assert!(Instant::now() < deadline, "pid {pid} never reached {path}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let config = std::env::temp_dir().join(format!("{name}.toml"));
    std::fs::write(
        &config,
        format!(
            "[series]\nlimit = 0\n[collector.cgroup]\ninclude = [\"^/{name}(/|$)\"]\nfull_scan_interval = \"1s\"\n\
             [collector.process]\ncomm_pattern = \"^memlock-forged$\"\nfull_scan_interval = \"1s\"\n"
        ),
    )
    .unwrap();
    let exporter = Exporter::start(&["--config.file", config.to_str().unwrap(), "--no-collector.rdma_netlink"]);
    let _ = std::fs::remove_file(&config);
    let _ = std::fs::remove_dir_all(&bin_dir);
    let series_of = |m: &Metrics, family: &str, needle: &str| -> Vec<String> {
        m.series.keys().filter(|k| k.starts_with(&format!("{family}{{")) && k.contains(needle)).cloned().collect()
    };
    let m = exporter.wait_metrics(Duration::from_secs(20), "the user's cgroups and processes", |m| {
        expected
            .iter()
            .all(|p| !series_of(m, "memlock_cgroup_memory_usage_bytes", &format!("cgroup=\"{p}\"")).is_empty())
            && pids
                .iter()
                .all(|pid| !series_of(m, "memlock_process_locked_bytes", &format!("pid=\"{pid}\"")).is_empty())
    });
    let mut seen = Vec::new();
    for path in &expected {
        seen.extend(series_of(&m, "memlock_cgroup_memory_usage_bytes", &format!("cgroup=\"{path}\"")));
    }
    for pid in &pids {
        seen.extend(series_of(&m, "memlock_process_locked_bytes", &format!("pid=\"{pid}\"")));
    }
    eprintln!("{}", seen.join("\n"));
    for series in &seen {
        for label in ["pod_uid=", "container_id=", "qos_class=", "slurm_job=", "slurm_step="] {
            assert!(!series.contains(label), "a name the user chose was read as attribution ({label}): {series}");
        }
    }
    assert_eq!(seen.len(), expected.len() + pids.len(), "one series per cgroup and per process: {seen:?}");
}

/// A huge value in the configuration must not come back whole in the error (a regex's message
/// quotes the pattern again), nor a huge header value of the web configuration: each error
/// names the key and quotes 64 characters.
#[test]
fn huge_values_are_not_echoed_whole_in_errors() {
    let dir = std::env::temp_dir().join(format!("memlock-hostile-{}-huge", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let huge = |c: &str| c.repeat(900_000);
    let cases = [
        ("config.file", format!("[collector.node]\ninterval = \"{}s\"\n", huge("9")), "collector.node.interval"),
        ("config.file", format!("[collector.cgroup]\ninclude = [\"({}\"]\n", huge("a")), "collector.cgroup.include"),
        ("config.file", format!("[alerting]\nalertmanager_urls = [\"{}\"]\n", huge("h")), "alerting.alertmanager_urls"),
        ("config.file", format!("[collector]\n{} = 1\n", huge("k")), "unknown configuration key"),
        (
            "web.config.file",
            format!("http_server_config:\n  headers:\n    X-Frame-Options: {}\n", "d".repeat(200_000)),
            "http_server_config.headers.X-Frame-Options",
        ),
    ];
    for (i, (flag, text, named)) in cases.iter().enumerate() {
        let file = dir.join(format!("case-{i}"));
        std::fs::write(&file, text).unwrap();
        let args = vec![format!("--{flag}"), file.display().to_string()];
        let Some((status, log)) = crate::util::exits_within(&args, Duration::from_secs(15)) else {
            panic!("case {i}: the exporter started");
        };
        assert_eq!(status.code(), Some(2), "case {i}");
        assert!(log.contains(named), "case {i}: {named} not in {}", &log[..log.len().min(2000)]);
        assert!(log.len() < 4096, "case {i}: {} bytes of error for a {} byte file", log.len(), text.len());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
