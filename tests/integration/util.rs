//! Helpers: run the built binary, scrape it over real HTTP, read the exposition text.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_memlock-exporter")
}

pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

static LIVE: Mutex<()> = Mutex::new(());

/// Held while a test changes or measures machine-wide state: the in-process mutex orders this
/// binary's threads, the `flock` on a file in /tmp orders other test runs on the machine (the
/// per-user locked_vm of uid 65534, cgroups, hugepages and CPU time are shared).
pub struct LiveGuard {
    _threads: MutexGuard<'static, ()>,
    _processes: std::fs::File,
}

/// Serialises tests that change or measure machine-wide state, within and across test runs.
pub fn live_lock() -> LiveGuard {
    use std::os::fd::AsRawFd;
    const LOCK: &str = "/tmp/memlock-exporter-live-tests.lock";
    let threads = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    // flock needs no write access: a lock file another user made (root's run, then a normal
    // user's `cargo test`) is opened for reading, which O_CREAT in sticky /tmp would refuse
    // (fs.protected_regular).
    let file = std::fs::File::open(LOCK)
        .or_else(|_| std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(LOCK))
        .unwrap_or_else(|e| panic!("open {LOCK}: {e}"));
    // SAFETY: flock on a descriptor this function owns; blocks until the other run releases it.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock: {}", std::io::Error::last_os_error());
    LiveGuard { _threads: threads, _processes: file }
}

/// Ends the test early, after saying why on stderr, when `$cond` is false: a contributor's
/// `cargo test` as a normal user, or on a cgroup v2 machine, skips what needs root or a v1
/// memory hierarchy. With MEMLOCK_TESTS_REQUIRE_ALL set (scripts/test.sh sets it) the test fails
/// instead, as it always did: CI runs every test.
#[macro_export]
macro_rules! require {
    ($cond:expr, $($why:tt)+) => {
        if !$cond {
            $crate::util::unmet(&format!($($why)+));
            return;
        }
    };
}

/// Whether the scale tests run: they generate hosts of tens of thousands of processes and take
/// minutes, so a contributor's `cargo test` leaves them out unless MEMLOCK_SCALE_TESTS=1;
/// scripts/test.sh (and so CI) sets it.
pub fn scale_tests_enabled() -> bool {
    std::env::var_os("MEMLOCK_SCALE_TESTS").is_some_and(|v| v == "1")
}

/// What [`require!`] does with an unmet requirement: panics under MEMLOCK_TESTS_REQUIRE_ALL,
/// else prints "skipped: WHY".
pub fn unmet(why: &str) {
    if std::env::var_os("MEMLOCK_TESTS_REQUIRE_ALL").is_some() {
        panic!("{why} (MEMLOCK_TESTS_REQUIRE_ALL is set: every test must run)");
    }
    // Through the handle, not eprintln!: libtest captures the macros' output of a passing
    // test, and a skip must be seen in a plain `cargo test`.
    let _ = writeln!(std::io::stderr().lock(), "skipped: {why}");
}

/// [`require!`] as a value, for helpers that check several things: false (after [`unmet`])
/// when `cond` is false.
pub fn met(cond: bool, why: &str) -> bool {
    if !cond {
        unmet(why);
    }
    cond
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

pub fn set_mode(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The exporter `binary` on `address`, logging JSON at debug level.
pub fn command(binary: impl AsRef<std::ffi::OsStr>, address: &str) -> Command {
    let mut cmd = Command::new(binary);
    cmd.args(["--web.listen-address", address, "--log.format", "json", "--log.level", "debug"]);
    cmd
}

/// The exporter run as nobody (uid 65534) through setpriv, from a copy nobody may execute, on a
/// free loopback port, logging JSON at the default level.
pub fn command_as_nobody() -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(binary_runnable_by(65534))
        .args(["--web.listen-address", "127.0.0.1:0", "--log.format", "json"])
        .current_dir("/");
    cmd
}

/// A running exporter, killed on drop.
pub struct Exporter {
    pub child: Child,
    pub address: String,
    pub log: std::sync::Arc<Mutex<Vec<String>>>,
    /// How long a request may take to answer: [`HTTP_TIMEOUT`] unless a test serves snapshots
    /// large enough to need more (a debug build renders 41 MB in 1.6 to 4.5 s, measured).
    pub timeout: Duration,
}

impl Exporter {
    /// Starts the binary on a free loopback port with `args`, and waits until it listens.
    pub fn start(args: &[&str]) -> Exporter {
        Self::start_with_env(args, &[])
    }

    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Exporter {
        let exporter = Self::spawn(args, env);
        exporter.wait_ready();
        exporter
    }

    /// Starts the binary and waits until it listens, without the plain-HTTP readiness check
    /// (for TLS or basic auth, where the caller checks readiness its own way).
    pub fn spawn(args: &[&str], env: &[(&str, &str)]) -> Exporter {
        let mut cmd = command(binary(), "127.0.0.1:0");
        cmd.args(args).envs(env.iter().copied());
        Self::from_command(cmd)
    }

    /// Starts `cmd` (the exporter logging JSON, directly or under setpriv) and waits until it
    /// logs `listening`; its log is collected from then on.
    pub fn from_command(mut cmd: Command) -> Exporter {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn memlock-exporter");
        let stderr = child.stderr.take().expect("stderr is piped");
        let log = std::sync::Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("\"message\":\"listening\"") {
                    let _ = tx.send(line.clone());
                }
                sink.lock().unwrap().push(line);
            }
        });
        let line = rx.recv_timeout(Duration::from_secs(20)).unwrap_or_else(|_| {
            let _ = child.kill();
            panic!("exporter did not start; log: {:?}", log.lock().unwrap())
        });
        let address = json_field(&line, "address").expect("listening line has an address");
        Exporter { child, address, log, timeout: HTTP_TIMEOUT }
    }

    pub fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok((200, _)) = http_get(&self.address, "/-/ready") {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("exporter never became ready");
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        http_get_within(&self.address, path, self.timeout).expect("http get")
    }

    pub fn metrics(&self) -> Metrics {
        let (status, body) = self.get("/metrics");
        assert_eq!(status, 200, "{body}");
        Metrics::parse(&body)
    }

    /// Sends SIGTERM and returns the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        // SAFETY: kill with a valid pid of our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "exporter did not stop after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Scrapes every 100 ms until `done` holds; fails naming `what` after `limit`, with the log
    /// and the last metrics.
    pub fn wait_metrics(&self, limit: Duration, what: &str, done: impl Fn(&Metrics) -> bool) -> Metrics {
        let deadline = Instant::now() + limit;
        loop {
            let metrics = self.metrics();
            if done(&metrics) {
                return metrics;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; log:\n{}\nmetrics:\n{}",
                self.log_text(),
                metrics.text
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn json_field(line: &str, key: &str) -> Option<String> {
    let start = line.find(&format!("\"{key}\":\""))? + key.len() + 4;
    let end = line[start..].find('"')? + start;
    Some(line[start..end].to_owned())
}

/// A minimal HTTP/1.1 GET over a real socket: status and body.
/// The read timeout of [`http_get`].
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

pub fn http_get(address: &str, path: &str) -> std::io::Result<(u16, String)> {
    http_get_within(address, path, HTTP_TIMEOUT)
}

pub fn http_get_within(address: &str, path: &str, timeout: Duration) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(timeout))?;
    // One write: a server that answers early (400 to plain HTTP on a TLS port) and closes must
    // not turn the rest of the request into EPIPE; and a refused write still has an answer to read.
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    match stream.write_all(request.as_bytes()) {
        Err(e) if matches!(e.kind(), std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset) => {}
        other => other?,
    }
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body =
        if head.to_ascii_lowercase().contains("transfer-encoding: chunked") { dechunk(body) } else { body.to_owned() };
    Ok((status, body))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else { break };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// Parsed exposition text: series (name plus sorted labels, as written) to value.
pub struct Metrics {
    pub text: String,
    pub series: BTreeMap<String, f64>,
}

impl Metrics {
    pub fn parse(text: &str) -> Metrics {
        let mut series = BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
            let (key, value) = line.rsplit_once(' ').expect("sample line has a value");
            let value = match value {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v.parse().unwrap_or(f64::NAN),
            };
            series.insert(key.to_owned(), value);
        }
        Metrics { text: text.to_owned(), series }
    }

    /// The value of an exact series, such as `memlock_node_mlocked_bytes` or
    /// `memlock_scrape_collector_success{collector="node"}`.
    pub fn get(&self, series: &str) -> Option<f64> {
        self.series.get(series).copied()
    }

    pub fn value(&self, series: &str) -> f64 {
        self.get(series).unwrap_or_else(|| panic!("series {series} missing from:\n{}", self.text))
    }

    /// All series of a family.
    pub fn family(&self, name: &str) -> Vec<(&str, f64)> {
        self.series
            .iter()
            .filter(|(k, _)| k.as_str() == name || k.starts_with(&format!("{name}{{")))
            .map(|(k, v)| (k.as_str(), *v))
            .collect()
    }
}

/// Reads a `Key:   value kB` line of /proc/meminfo, in bytes.
pub fn meminfo_bytes(key: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").expect("read /proc/meminfo");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .unwrap_or_else(|| panic!("{key} missing from /proc/meminfo"))
}

/// The built binary if `uid` can execute it in place (every directory on the way lets others
/// in), else a 0755 copy in a 0755 temp directory. Unprivileged tests run the exporter and the
/// drill through `setpriv --reuid=UID`.
pub fn binary_runnable_by(uid: u32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let runs = |path: &std::path::Path| {
        Command::new("setpriv")
            .args([format!("--reuid={uid}"), format!("--regid={uid}"), "--clear-groups".into()])
            .arg(path)
            .arg("--version")
            .current_dir("/")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let built = PathBuf::from(binary());
    if runs(&built) {
        return built;
    }
    let dir = std::env::temp_dir().join(format!("memlock-bin-{}-{uid}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let copy = dir.join("memlock-exporter");
    std::fs::copy(&built, &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(runs(&copy), "uid {uid} cannot run {} even from a 0755 copy", copy.display());
    copy
}

/// A python3 child that mlock()s `argv[1]` bytes, prints "locked" and holds them until its
/// stdin closes. `--name NAME` sets its comm first; `--after-go` waits for a line on stdin before
/// mapping (so the caller can move it into a cgroup that the pages are then charged to).
pub const MLOCK_HOLDER: &str = r#"
import ctypes, mmap, sys
args = sys.argv[1:]
size = int(args[0])
libc = ctypes.CDLL(None, use_errno=True)
if "--name" in args:
    libc.prctl(15, args[args.index("--name") + 1].encode(), 0, 0, 0)  # PR_SET_NAME
if "--after-go" in args:
    sys.stdin.readline()
buf = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
if libc.mlock(ctypes.c_void_p(addr), ctypes.c_size_t(size)) != 0:
    print("mlock failed errno", ctypes.get_errno(), flush=True); sys.exit(1)
print("locked", flush=True)
sys.stdin.read()
"#;

/// An `Authorization: Basic` request header line for `user:password` (base64, RFC 7617).
pub fn basic(user: &str, password: &str) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let input = format!("{user}:{password}").into_bytes();
    let mut out = String::new();
    for chunk in input.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    format!("Authorization: Basic {out}\r\n")
}

/// `MemoryMax=` of systemd/memlock-exporter.service, in bytes.
pub fn unit_memory_max() -> u64 {
    let unit = std::fs::read_to_string(fixtures().join("../../systemd/memlock-exporter.service")).unwrap();
    let value = unit.lines().find_map(|l| l.strip_prefix("MemoryMax=")).expect("the unit sets MemoryMax");
    let (digits, unit) = value.trim().split_at(value.trim().find(|c: char| !c.is_ascii_digit()).unwrap_or(value.len()));
    let scale = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        other => panic!("MemoryMax unit {other:?}"),
    };
    digits.parse::<u64>().unwrap() * scale
}

/// A stand-in for Alertmanager on a real loopback socket: answers every request 200 and counts
/// the POSTs to `/api/v2/alerts` (each a delivery of the fast path).
pub struct AlertReceiver {
    pub url: String,
    posts: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl AlertReceiver {
    pub fn start() -> AlertReceiver {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the alert receiver");
        let url = format!("http://{}", listener.local_addr().expect("local address"));
        let posts = std::sync::Arc::new(AtomicUsize::new(0));
        let counter = posts.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                let counter = counter.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream);
                    loop {
                        let mut head = Vec::new();
                        let mut line = String::new();
                        loop {
                            line.clear();
                            match reader.read_line(&mut line) {
                                Ok(0) | Err(_) => return,
                                Ok(_) if line == "\r\n" => break,
                                Ok(_) => head.push(line.to_ascii_lowercase()),
                            }
                        }
                        let length = head
                            .iter()
                            .find_map(|h| h.strip_prefix("content-length:").and_then(|v| v.trim().parse().ok()))
                            .unwrap_or(0usize);
                        let mut body = vec![0u8; length];
                        if reader.read_exact(&mut body).is_err() {
                            return;
                        }
                        if head.first().is_some_and(|l| l.starts_with("post /api/v2/alerts")) {
                            counter.fetch_add(1, Ordering::SeqCst);
                        }
                        if reader.get_mut().write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_err() {
                            return;
                        }
                    }
                });
            }
        });
        AlertReceiver { url, posts }
    }

    pub fn posts(&self) -> usize {
        self.posts.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits up to `limit` for more than `count` deliveries.
    pub fn more_than(&self, count: usize, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self.posts() > count {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

/// Runs the exporter with `args` (on a free loopback port) and waits up to `limit` for it to
/// exit: its status and stderr, or `None` (it is killed) if it was still running.
pub fn exits_within(args: &[String], limit: Duration) -> Option<(std::process::ExitStatus, String)> {
    let mut child = command(binary(), "127.0.0.1:0")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn memlock-exporter");
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let log = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return Some((status, log.join().unwrap_or_default()));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
