//! Hostile clients on loopback: a flood of wrong passwords, idle connections that never send a
//! request, and slow readers of a large snapshot. During each a real scraper scrapes every 200 ms;
//! at least 90 % of its scrapes must succeed within 3 s, and the exporter's resident memory must
//! stay under the systemd unit's `MemoryMax`. Each attack lasts seconds. They hold the live lock:
//! they measure CPU and time on a shared machine.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::util::{fixtures, live_lock, unit_memory_max, Exporter};

mod auth;

/// What a scraper is promised during an attack.
const SCRAPE_DEADLINE: Duration = Duration::from_secs(3);
const SCRAPE_INTERVAL: Duration = Duration::from_millis(200);

fn status_field(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// CPU time (user plus system) of a process so far.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let (utime, stime): (f64, f64) = (fields[11].parse().unwrap(), fields[12].parse().unwrap());
    Duration::from_secs_f64((utime + stime) / ticks)
}

/// Peak VmRSS and thread count of a process, sampled every 20 ms until stopped.
struct Watch {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(u64, u64)>,
}

impl Watch {
    fn start(pid: u32) -> Watch {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut rss, mut threads) = (0, 0);
            while !flag.load(Ordering::Relaxed) {
                rss = rss.max(status_field(pid, "VmRSS:") * 1024);
                threads = threads.max(status_field(pid, "Threads:"));
                std::thread::sleep(Duration::from_millis(20));
            }
            (rss, threads)
        });
        Watch { stop, thread }
    }

    /// Peak VmRSS in bytes and peak thread count.
    fn finish(self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// A TCP connection to `address` from the loopback address `source` (any of 127.0.0.0/8 routes
/// to lo), so that one test can be many clients.
fn connect_from(source: [u8; 4], address: &str) -> std::io::Result<TcpStream> {
    connect_with(source, address, None, None)
}

/// [`connect_from`], with a connect that gives up after `give_up_after` seconds when given (a
/// full listen queue drops SYNs, and a blocking connect would retry for two minutes), and a
/// receive buffer of `rcvbuf` bytes when given (set before the handshake, so the window it
/// offers stays that small).
fn connect_with(
    source: [u8; 4],
    address: &str,
    give_up_after: Option<libc::time_t>,
    rcvbuf: Option<libc::c_int>,
) -> std::io::Result<TcpStream> {
    use std::os::fd::FromRawFd;
    let addr: std::net::SocketAddrV4 = address.parse().expect("an IPv4 address");
    let sockaddr = |ip: [u8; 4], port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from_be_bytes(ip).to_be() },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a fresh socket we own, and option and address structs that live across the calls.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let stream = TcpStream::from_raw_fd(fd);
        if let Some(seconds) = give_up_after {
            // Linux bounds a blocking connect by the send timeout (SO_SNDTIMEO, socket(7)).
            let timeout = libc::timeval { tv_sec: seconds, tv_usec: 0 };
            let size = std::mem::size_of::<libc::timeval>() as libc::socklen_t;
            libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDTIMEO, (&timeout as *const libc::timeval).cast(), size);
        }
        if let Some(bytes) = rcvbuf {
            let size = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, (&bytes as *const libc::c_int).cast(), size);
        }
        let local = sockaddr(source, 0);
        if libc::bind(fd, (&local as *const libc::sockaddr_in).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let remote = sockaddr(addr.ip().octets(), addr.port());
        if libc::connect(fd, (&remote as *const libc::sockaddr_in).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(stream)
    }
}

/// One request with `Connection: close`; the status once the whole response is read, within
/// `deadline` (0 for no answer in time, a reset or a truncated body).
fn request(address: &str, path: &str, headers: &str, deadline: Duration) -> u16 {
    let started = Instant::now();
    let Ok(stream) = TcpStream::connect_timeout(&address.parse().unwrap(), deadline) else { return 0 };
    exchange(stream, started, path, headers, deadline)
}

/// [`request`] on a connection made already, `deadline` counted from `started`.
fn exchange(mut stream: TcpStream, started: Instant, path: &str, headers: &str, deadline: Duration) -> u16 {
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{headers}\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return 0;
    }
    let mut raw = Vec::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let left = deadline.saturating_sub(started.elapsed());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return 0;
        }
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(_) => return 0,
        }
    }
    let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else { return 0 };
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let length = head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok());
    if length != Some(raw.len() - split - 4) {
        return 0;
    }
    if std::env::var_os("ATTACK_DEBUG").is_some() && !raw.starts_with(b"HTTP/1.1 200") {
        eprintln!("response: {}", String::from_utf8_lossy(&raw[..raw.len().min(300)]));
    }
    head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// Scrapes `path` every [`SCRAPE_INTERVAL`] until stopped; the time each took, `None` for one
/// that did not get a whole 200 within [`SCRAPE_DEADLINE`].
fn scraper(address: String, headers: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<Option<Duration>>> {
    std::thread::spawn(move || {
        let mut results = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let started = Instant::now();
            let status = request(&address, "/metrics", &headers, SCRAPE_DEADLINE);
            if status != 200 && std::env::var_os("ATTACK_DEBUG").is_some() {
                eprintln!("scrape: status {status} after {:?}", started.elapsed());
            }
            let took = started.elapsed();
            results.push((status == 200 && took <= SCRAPE_DEADLINE).then_some(took));
            std::thread::sleep(SCRAPE_INTERVAL.saturating_sub(took));
        }
        results
    })
}

/// The share of scrapes within the deadline, and the slowest of those.
fn summary(results: &[Option<Duration>]) -> (f64, Duration) {
    let ok: Vec<Duration> = results.iter().flatten().copied().collect();
    (ok.len() as f64 / results.len().max(1) as f64, ok.iter().max().copied().unwrap_or_default())
}

fn fixture_args() -> Vec<String> {
    let root = fixtures();
    vec![
        "--path.procfs".into(),
        root.join("proc").display().to_string(),
        "--path.sysfs".into(),
        root.join("sys").display().to_string(),
        "--no-collector.rdma_netlink".into(),
    ]
}

fn temp_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("memlock-attacks-{name}-")).tempdir().unwrap()
}

/// Lets this test process open `wanted` descriptors (its soft limit may be 1024).
fn raise_open_files(wanted: u64) {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit read and write the struct we own.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        assert!(limit.rlim_max >= wanted, "RLIMIT_NOFILE hard limit {} is below {wanted}", limit.rlim_max);
        limit.rlim_cur = limit.rlim_cur.max(wanted);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
}

fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Idle TCP connections, reopened whenever the server closes them, must not fill the
/// 512-connection cap and the listen backlog and keep real scrapes waiting. Here 2,000 for 8 s,
/// half silent and half stuck in the middle of their headers.
#[test]
fn idle_connections_reopened_as_they_close_do_not_starve_scrapes() {
    let _live = live_lock();
    raise_open_files(8192);
    let args = fixture_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let exporter = Exporter::start(&args);
    let (address, pid) = (exporter.address.clone(), exporter.child.id());
    let stop = Arc::new(AtomicBool::new(false));
    let watch = Watch::start(pid);
    let reopened = Arc::new(AtomicUsize::new(0));
    let attackers: Vec<_> = (0..20)
        .map(|group| {
            let (address, stop, reopened) = (address.clone(), stop.clone(), reopened.clone());
            std::thread::spawn(move || {
                let target = address.parse().unwrap();
                let mut held: Vec<Option<TcpStream>> = (0..100).map(|_| None).collect();
                let mut first_round = true;
                while !stop.load(Ordering::Relaxed) {
                    for (index, slot) in held.iter_mut().enumerate() {
                        let closed = match slot {
                            None => true,
                            Some(stream) => {
                                let mut byte = [0u8; 1];
                                !matches!(stream.read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
                            }
                        };
                        if !closed {
                            continue;
                        }
                        if slot.is_some() || !first_round {
                            reopened.fetch_add(1, Ordering::Relaxed);
                        }
                        *slot =
                            TcpStream::connect_timeout(&target, Duration::from_millis(200)).ok().and_then(|mut s| {
                                if (group + index) % 2 == 1 {
                                    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").ok()?;
                                }
                                s.set_nonblocking(true).ok()?;
                                Some(s)
                            });
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                    }
                    first_round = false;
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        })
        .collect();
    // Let them fill the server before the scraper starts.
    std::thread::sleep(Duration::from_secs(1));
    let descriptors_during = open_descriptors(pid);
    let scrapes = scraper(address.clone(), String::new(), stop.clone());
    std::thread::sleep(Duration::from_secs(8));
    stop.store(true, Ordering::Relaxed);
    let results = scrapes.join().unwrap();
    for attacker in attackers {
        attacker.join().unwrap();
    }
    let (peak_rss, _) = watch.finish();
    let (share, slowest) = summary(&results);
    eprintln!(
        "idle connections, 2,000 for 8 s: scraper {}/{} within {SCRAPE_DEADLINE:?} ({:.0} %), slowest {slowest:?}; \
            {} reopened after the server closed them; exporter descriptors {descriptors_during}; peak VmRSS {:.1} MiB",
        results.iter().flatten().count(),
        results.len(),
        share * 100.0,
        reopened.load(Ordering::Relaxed),
        peak_rss as f64 / (1 << 20) as f64,
    );
    assert!(share >= 0.9, "only {:.0} % of scrapes within {SCRAPE_DEADLINE:?}: {results:?}", share * 100.0);
    assert!(peak_rss < unit_memory_max(), "peak VmRSS {peak_rss} over MemoryMax");
    assert_eq!(exporter.get("/-/healthy").0, 200);
}

/// Removes a generated tree when the test ends, passed or failed.
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A connection whose receive buffer is `bytes`: the server can send only as fast as we read.
fn connect_small_window(address: &str, bytes: libc::c_int) -> std::io::Result<TcpStream> {
    use std::os::fd::FromRawFd;
    let addr: std::net::SocketAddrV4 = address.parse().expect("an IPv4 address");
    // SAFETY: a fresh socket we own; the option and address structs live across the calls.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let stream = TcpStream::from_raw_fd(fd);
        let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        if libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, (&bytes as *const libc::c_int).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: addr.port().to_be(),
            sin_addr: libc::in_addr { s_addr: u32::from(*addr.ip()).to_be() },
            sin_zero: [0; 8],
        };
        let size = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        if libc::connect(fd, (&sin as *const libc::sockaddr_in).cast(), size) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(stream)
    }
}

/// A number from the environment, for the longer runs docs/reliability.md records.
fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Slow readers hold response memory outside `web.max_requests` (the slot is given back before the
/// body is sent), one snapshot text each, and together must stay within the unit's `MemoryMax`.
/// Here 64 slow readers (16 KiB window, 16 KiB every 50 ms: a scrape would take 20 s), one more
/// every 100 ms so that they start on different snapshots, each reconnecting when the server closes
/// it, for 10 s, of a generated host whose scrape is about 6 MB (this debug build renders a
/// snapshot's text at about 5 MB/s, and the scraper must finish within 3 s). The kernel takes up to
/// 4 MiB of each response into the socket's send buffer, and a new text is rendered at most once a
/// second, so 10 s make about ten texts held for a few seconds each: the budget is 4 MiB here, one
/// text at a time, so that every new text must make room. For the release figures:
/// `ATTACK_SLOW_PODS=2500 ATTACK_SLOW_READERS=32 ATTACK_SLOW_SECONDS=30 ATTACK_SLOW_BUDGET=0` (0:
/// the default budget).
#[test]
fn slow_readers_of_a_large_snapshot_stay_within_the_memory_bound() {
    let _live = live_lock();
    let (pods, readers_wanted, seconds) =
        (env_or("ATTACK_SLOW_PODS", 600), env_or("ATTACK_SLOW_READERS", 64), env_or("ATTACK_SLOW_SECONDS", 10));
    let budget = env_or("ATTACK_SLOW_BUDGET", 4 << 20);
    let root = crate::scale::scratch_base().join(format!("memlock-attacks-{}-slow", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let _cleanup = RemoveOnDrop(root.clone());
    let (procfs, sysfs) = (root.join("proc"), root.join("sys"));
    crate::synthetic::copy_tree(&fixtures().join("proc"), &procfs).unwrap();
    crate::synthetic::copy_tree(&fixtures().join("sys"), &sysfs).unwrap();
    std::fs::remove_dir_all(sysfs.join("fs/cgroup")).unwrap();
    crate::synthetic::write_kubepods(&sysfs.join("fs/cgroup/memory"), pods, 3).unwrap();
    let budget_flag = budget.to_string();
    let mut args = vec![
        "--path.procfs",
        procfs.to_str().unwrap(),
        "--path.sysfs",
        sysfs.to_str().unwrap(),
        "--no-collector.rdma_netlink",
        // Every cgroup's series: the default series budget (500) would make a small scrape.
        "--series.limit",
        "0",
    ];
    if budget != 0 {
        args.extend(["--web.max-response-bytes", &budget_flag]);
    }
    let exporter = Exporter::start(&args);
    let (address, pid) = (exporter.address.clone(), exporter.child.id());
    let body = exporter.get("/metrics").1.len();
    assert!(body > 5 << 20, "the scrape is {body} bytes; the test wants one of 6 MB or more");
    let rss_before = status_field(pid, "VmRSS:") * 1024;
    // The same scraper without the attack, for comparison.
    let calm = Arc::new(AtomicBool::new(false));
    let baseline = scraper(address.clone(), String::new(), calm.clone());
    std::thread::sleep(Duration::from_secs(2));
    calm.store(true, Ordering::Relaxed);
    let (calm_share, calm_slowest) = summary(&baseline.join().unwrap());

    let stop = Arc::new(AtomicBool::new(false));
    let watch = Watch::start(pid);
    let scrapes = scraper(address.clone(), String::new(), stop.clone());
    let (closed, read) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut readers = Vec::new();
    let pause = Duration::from_millis(100);
    for _ in 0..readers_wanted {
        let (address, stop, closed, read) = (address.clone(), stop.clone(), closed.clone(), read.clone());
        readers.push(std::thread::spawn(move || {
            let mut buf = vec![0u8; 16 * 1024];
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut stream) = connect_small_window(&address, 16 * 1024) else { continue };
                let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
                if stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").is_err() {
                    continue;
                }
                while !stop.load(Ordering::Relaxed) {
                    match stream.read(&mut buf) {
                        Ok(0) => {
                            closed.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                        Ok(n) => {
                            read.fetch_add(n, Ordering::Relaxed);
                        }
                        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                        }
                        Err(_) => {
                            closed.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }));
        std::thread::sleep(pause);
    }
    std::thread::sleep(Duration::from_secs(seconds as u64).saturating_sub(pause * readers_wanted as u32));
    stop.store(true, Ordering::Relaxed);
    let stopped = Instant::now();
    let results = scrapes.join().unwrap();
    for reader in readers {
        reader.join().unwrap();
    }
    eprintln!("readers stopped in {:?}", stopped.elapsed());
    let (peak_rss, _) = watch.finish();
    let (share, slowest) = summary(&results);
    eprintln!(
        "slow readers, {readers_wanted} for {seconds} s, budget {budget} bytes, {:.1} MB per scrape; without them \
            {:.0} % within {SCRAPE_DEADLINE:?}, slowest \
            {calm_slowest:?}; with them scraper {}/{} within {SCRAPE_DEADLINE:?} ({:.0} %), slowest \
            {slowest:?}; slow readers closed by the server {} times, {:.1} MB read by them; VmRSS {:.1} MiB before, \
            peak {:.1} MiB (MemoryMax {} MiB)",
        body as f64 / 1e6,
        calm_share * 100.0,
        results.iter().flatten().count(),
        results.len(),
        share * 100.0,
        closed.load(Ordering::Relaxed),
        read.load(Ordering::Relaxed) as f64 / 1e6,
        rss_before as f64 / (1 << 20) as f64,
        peak_rss as f64 / (1 << 20) as f64,
        unit_memory_max() >> 20,
    );
    if let Some(path) = std::env::var_os("ATTACK_DEBUG_LOG") {
        std::fs::write(path, exporter.log_text()).unwrap();
    }
    if share < 0.9 {
        let log = exporter.log_text();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        eprintln!("exporter log, last lines:\n{}", tail.join("\n"));
    }
    assert!(share >= 0.9, "only {:.0} % of scrapes within {SCRAPE_DEADLINE:?}: {results:?}", share * 100.0);
    assert!(peak_rss < unit_memory_max(), "peak VmRSS {} MiB over MemoryMax", peak_rss >> 20);
    // What the responses keep alive is the budget at most, plus the latest rendered text, the one
    // being rendered (its working memory too) and buffers.
    let grown = peak_rss.saturating_sub(rss_before);
    let effective = if budget == 0 { 64 << 20 } else { budget };
    let bound = (effective + 3 * body + (16 << 20)) as u64;
    assert!(grown < bound, "VmRSS grew by {} MiB during the attack (bound {} MiB)", grown >> 20, bound >> 20);
    assert!(closed.load(Ordering::Relaxed) > 0, "the slowest readers were closed to make room");
}

/// A web configuration with a cost-31 bcrypt hash would let one request with a wrong password
/// take a core for hours (2^31 rounds): the exporter refuses the file at start (exit 2) naming
/// the user, the cost, the bound and why.
#[test]
fn a_bcrypt_cost_that_takes_hours_per_check_is_refused() {
    let _live = live_lock();
    let tmp = temp_dir("bcrypt-cost");
    let dir = tmp.path();
    let web = dir.join("web.yml");
    std::fs::write(
        &web,
        "basic_auth_users:\n  prometheus: '$2y$31$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG'\n",
    )
    .unwrap();
    let mut args = fixture_args();
    args.extend(["--web.config.file".into(), web.display().to_string()]);
    let Some((status, log)) = crate::util::exits_within(&args, Duration::from_secs(15)) else {
        panic!("the exporter still runs 15 s after starting with a cost-31 hash");
    };
    assert_eq!(status.code(), Some(2), "{log}");
    for expected in ["basic_auth_users.prometheus", "cost 31 is above 14", "41 hours", "htpasswd -nBC 10"] {
        assert!(log.contains(expected), "{expected:?} not in:\n{log}");
    }
    assert!(log.contains(&web.display().to_string()), "{log}");
}

/// `TCP: ... orphan N ... mem P` of /proc/net/sockstat: orphaned sockets, and the pages of
/// kernel memory every TCP socket of the host holds (tcp_mem's unit).
fn sockstat_tcp() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/net/sockstat").unwrap_or_default();
    let line = text.lines().find(|l| l.starts_with("TCP:")).unwrap_or_default();
    let field = |name: &str| -> u64 {
        let words: Vec<&str> = line.split_whitespace().collect();
        words.windows(2).find(|w| w[0] == name).and_then(|w| w[1].parse().ok()).unwrap_or(0)
    };
    (field("orphan"), field("mem"))
}

/// What a pipelining attack did.
struct Pipelined {
    scrapes: Vec<Option<Duration>>,
    /// Connections the server ended while the attack ran.
    ended: usize,
    /// sockstat's TCP orphans and memory (pages) before, at the peak, and once the server has
    /// closed what the attackers left.
    orphans: (u64, u64),
    mem: (u64, u64, u64),
    peak_rss: u64,
}

/// `sources[i]` for client i; each sends 64 pipelined GETs of /metrics, never reads, and
/// reconnects when the server ends the connection, for `seconds`, while a scraper from 127.0.0.1
/// scrapes every 200 ms.
fn pipeline_attack(sources: &[[u8; 4]], rcvbuf: Option<libc::c_int>, seconds: u64) -> Pipelined {
    raise_open_files(8192);
    let args = fixture_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let exporter = Exporter::start(&args);
    let (address, pid) = (exporter.address.clone(), exporter.child.id());
    let (orphans_before, mem_before) = sockstat_tcp();
    let stop = Arc::new(AtomicBool::new(false));
    let watch = Watch::start(pid);
    let scrapes = scraper(address.clone(), String::new(), stop.clone());
    let ended = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(Mutex::new((0u64, 0u64)));
    let sampler = {
        let (stop, peak) = (stop.clone(), peak.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let (orphans, mem) = sockstat_tcp();
                let mut peak = peak.lock().unwrap();
                *peak = (peak.0.max(orphans), peak.1.max(mem));
                drop(peak);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let pipelined = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(64);
    let mut attackers = Vec::new();
    let mut held = Vec::new();
    for &source in sources {
        let (address, stop, ended, pipelined) = (address.clone(), stop.clone(), ended.clone(), pipelined.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        held.push(rx);
        attackers.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut stream) = connect_with(source, &address, Some(1), rcvbuf) else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                let _ = stream.write_all(pipelined.as_bytes());
                // Never read. A peek without waiting tells when the server has ended the
                // connection (a reset, or its FIN behind the unread responses is not seen:
                // an idle close is noticed by the write below failing).
                let _ = stream.set_nonblocking(true);
                let mut gone = false;
                while !stop.load(Ordering::Relaxed) && !gone {
                    std::thread::sleep(Duration::from_millis(100));
                    gone = matches!(stream.write(b"\r\n"), Err(e) if e.kind() != std::io::ErrorKind::WouldBlock);
                }
                if gone {
                    ended.fetch_add(1, Ordering::Relaxed);
                } else {
                    // Kept open (unread) until the measurement after the attack.
                    let _ = tx.send(stream);
                }
            }
        }));
    }
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    let scrapes = scrapes.join().unwrap();
    for attacker in attackers {
        attacker.join().unwrap();
    }
    sampler.join().unwrap();
    let (peak_orphans, peak_mem) = *peak.lock().unwrap();
    // The server closes what it holds (SIGTERM: it drains for up to 5 s); the attackers' sockets
    // stay open and unread, so whatever it sent and they did not read is what the kernel keeps.
    let open: Vec<TcpStream> = held.iter().filter_map(|rx| rx.try_recv().ok()).collect();
    let peak_rss = watch.finish().0;
    let _ = exporter.terminate();
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let (orphans_after, mem_after) = sockstat_tcp();
    drop(open);
    eprintln!("(after the server closed: orphans {orphans_after}, {} still open on the client side)", held.len());
    Pipelined {
        scrapes,
        ended: ended.load(Ordering::Relaxed),
        orphans: (orphans_before, peak_orphans.max(orphans_after)),
        mem: (mem_before, peak_mem, mem_after),
        peak_rss,
    }
}

fn mib(pages: u64) -> f64 {
    (pages * 4096) as f64 / (1 << 20) as f64
}

/// Clients that pipeline GETs and never read must not keep every connection "busy" so that none is
/// closed at the 512 cap and the scraper goes unanswered. Here 160 from one address (more than its
/// share of the table) and 460 spread over 92 addresses (5 each: more than the table holds), with
/// 4 KiB receive buffers, for 10 s.
#[test]
fn pipelining_clients_that_never_read_do_not_starve_scrapes() {
    let _live = live_lock();
    let sources: Vec<[u8; 4]> =
        (0..620u32).map(|c| if c < 160 { [127, 0, 2, 1] } else { [127, 0, 3, (c % 92) as u8 + 1] }).collect();
    let attack = pipeline_attack(&sources, Some(4096), 10);
    let (share, slowest) = summary(&attack.scrapes);
    eprintln!(
        "pipelining, 620 clients, 10 s: scraper {}/{} within {SCRAPE_DEADLINE:?} ({:.0} %), slowest {slowest:?}; \
            connections ended by the server {}; host TCP memory {:.1} MiB before, peak {:.1} MiB; peak VmRSS {:.1} MiB",
        attack.scrapes.iter().flatten().count(),
        attack.scrapes.len(),
        share * 100.0,
        attack.ended,
        mib(attack.mem.0),
        mib(attack.mem.1),
        attack.peak_rss as f64 / (1 << 20) as f64,
    );
    assert!(share >= 0.9, "only {:.0} % of scrapes within {SCRAPE_DEADLINE:?}: {:?}", share * 100.0, attack.scrapes);
    assert!(attack.peak_rss < unit_memory_max(), "peak VmRSS {} over MemoryMax", attack.peak_rss);
}

/// Pipelined responses must not park kernel memory (up to a send buffer's worth a connection), nor
/// may connections the exporter closes stay as orphans holding what was unsent. Here 32 clients
/// with the kernel's default buffers, one address each, for 6 s; then the exporter stops with their
/// sockets still open and unread.
#[test]
fn pipelining_clients_that_never_read_do_not_park_kernel_memory() {
    let _live = live_lock();
    let sources: Vec<[u8; 4]> = (0..32u8).map(|c| [127, 0, 4, c + 1]).collect();
    let attack = pipeline_attack(&sources, None, 6);
    let (share, _) = summary(&attack.scrapes);
    let grown = attack.mem.1.saturating_sub(attack.mem.0);
    let left = attack.mem.2.saturating_sub(attack.mem.0);
    eprintln!(
        "pipelining, 32 clients, 6 s: host TCP memory {:.1} MiB before, peak {:.1} MiB (+{:.1} MiB, {:.2} MiB a \
            connection), {:.1} MiB after the exporter closed them (+{:.1} MiB); orphans {} before, {} at most; \
            scraper {:.0} %",
        mib(attack.mem.0),
        mib(attack.mem.1),
        mib(grown),
        mib(grown) / 32.0,
        mib(attack.mem.2),
        mib(left),
        attack.orphans.0,
        attack.orphans.1,
        share * 100.0
    );
    assert!(mib(grown) < 32.0, "host TCP memory grew by {:.1} MiB", mib(grown));
    // What is left is the attackers' own receive queues (one response each, still unread).
    assert!(mib(left) < 12.0, "the closed connections left {:.1} MiB in the kernel", mib(left));
    assert!(attack.orphans.1 <= attack.orphans.0 + 2, "orphans {} -> {}", attack.orphans.0, attack.orphans.1);
}

/// GET /metrics within [`SCRAPE_DEADLINE`], connect included: the body of a 200.
fn scrape_body(address: &str) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&address.parse().ok()?, SCRAPE_DEADLINE).ok()?;
    stream.set_read_timeout(Some(SCRAPE_DEADLINE)).ok()?;
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
}

/// With a soft descriptor limit below the connection cap, idle connections must not take every
/// descriptor and make the collectors fail with EMFILE. Here the exporter runs with RLIMIT_NOFILE
/// 200 (soft and hard) and 400 connections stay open and silent for 4 s, reopened as they close,
/// while every scrape must show every collector succeeding.
#[test]
fn idle_connections_leave_the_collectors_their_descriptors() {
    let _live = live_lock();
    raise_open_files(8192);
    let mut cmd = std::process::Command::new("prlimit");
    cmd.args(["--nofile=200:200", "--"]).arg(crate::util::binary());
    cmd.args(["--web.listen-address", "127.0.0.1:0", "--log.format", "json", "--log.level", "debug"]);
    cmd.args(fixture_args());
    // Every collector reads its files every 100 ms, so a shortage shows at once.
    let tmp = temp_dir("nofile");
    let config = tmp.path().join("config.toml");
    let intervals: String = ["node", "numa", "process", "cgroup", "rdma_sysfs", "software"]
        .iter()
        .map(|c| format!("[collector.{c}]\ninterval = \"100ms\"\n"))
        .collect();
    std::fs::write(&config, intervals).unwrap();
    cmd.arg("--config.file").arg(&config);
    let exporter = Exporter::from_command(cmd);
    exporter.wait_ready();
    let address = exporter.address.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let mut holders = Vec::new();
    for client in 0..400u32 {
        let (address, stop) = (address.clone(), stop.clone());
        holders.push(std::thread::spawn(move || {
            let source = [127, 0, 5, (client % 200) as u8 + 1];
            while !stop.load(Ordering::Relaxed) {
                let Ok(stream) = connect_with(source, &address, Some(1), None) else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                let _ = stream.set_read_timeout(Some(Duration::from_millis(100)));
                let mut byte = [0u8; 1];
                while !stop.load(Ordering::Relaxed) {
                    match (&stream).read(&mut byte) {
                        Ok(0) => break,
                        Err(e)
                            if e.kind() == std::io::ErrorKind::WouldBlock
                                || e.kind() == std::io::ErrorKind::TimedOut => {}
                        _ => break,
                    }
                }
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(4);
    let (mut scrapes, mut failing) = (0, Vec::new());
    while Instant::now() < deadline {
        if let Some(body) = scrape_body(&address) {
            scrapes += 1;
            let m = crate::util::Metrics::parse(&body);
            failing.extend(
                m.family("memlock_scrape_collector_success")
                    .into_iter()
                    .filter(|(_, v)| *v != 1.0)
                    .map(|(s, _)| s.to_owned()),
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    for holder in holders {
        holder.join().unwrap();
    }
    let m = exporter.metrics();
    let errors = m.family("memlock_exporter_collector_errors_total").iter().fold(0.0, |sum, (_, v)| sum + v);
    let log = exporter.log_text();
    eprintln!(
        "RLIMIT_NOFILE 200, 400 idle connections for 4 s: {scrapes} scrapes, {} with a failing collector, {errors} \
            collector errors, 'Too many open files' {} times in the log",
        failing.len(),
        log.matches("Too many open files").count()
    );
    assert!(scrapes >= 10, "only {scrapes} scrapes got through in 4 s");
    assert!(failing.is_empty() && errors == 0.0, "collectors failed: {failing:?}; errors {errors}");
    assert!(!log.contains("Too many open files"), "EMFILE in the log");
    assert!(log.contains("connection cap"), "the lowered cap is logged");
}
