//! Wrong passwords: a flood that must not lock the scraper out or outlive itself, from other
//! addresses, from the scraper's own and from its IPv6 /64.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{connect_from, cpu_time, env_or, fixture_args, request, scraper, status_field, summary, temp_dir, Watch};
use super::{SCRAPE_DEADLINE, SCRAPE_INTERVAL};
use crate::util::{basic, live_lock, unit_memory_max, Exporter};

/// A flood of wrong passwords must not lock the scraper out, and clients that hang up right
/// after sending must not leave their bcrypt checks running (threads and cores busy after the
/// flood stopped). Here 25 clients share the scraper's address and 25 have one each, 8 more
/// hang up after sending, for 8 s.
#[test]
fn a_flood_of_wrong_passwords_does_not_lock_out_the_scraper_or_outlive_itself() {
    let _live = live_lock();
    let tmp = temp_dir("auth-flood");
    let dir = tmp.path();
    // Cost 8 in this debug build takes about as long as cost 11 in a release build (160 ms);
    // ATTACK_BCRYPT_COST=10 for release figures at htpasswd's usual cost.
    let hash = bcrypt::hash("right", env_or("ATTACK_BCRYPT_COST", 8) as u32).unwrap();
    let web = dir.join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  prometheus: '{hash}'\n")).unwrap();
    let mut args = fixture_args();
    args.extend(["--web.config.file".into(), web.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let exporter = Exporter::spawn(&args, &[]);
    let (address, pid) = (exporter.address.clone(), exporter.child.id());
    let credentials = basic("prometheus", "right");
    let deadline = Instant::now() + Duration::from_secs(20);
    while request(&address, "/-/ready", &credentials, SCRAPE_DEADLINE) != 200 {
        assert!(Instant::now() < deadline, "never ready:\n{}", exporter.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    let threads_before = status_field(pid, "Threads:");
    let cpu_before = cpu_time(pid);

    let stop = Arc::new(AtomicBool::new(false));
    let watch = Watch::start(pid);
    let scrapes = scraper(address.clone(), credentials.clone(), stop.clone());
    let answers: Arc<Mutex<std::collections::BTreeMap<u16, usize>>> = Arc::default();
    let hangups = Arc::new(AtomicUsize::new(0));
    let mut attackers = Vec::new();
    for client in 0..58u8 {
        let (address, stop, answers, hangups) = (address.clone(), stop.clone(), answers.clone(), hangups.clone());
        attackers.push(std::thread::spawn(move || {
            let source = if client < 25 { [127, 0, 0, 1] } else { [127, 0, 1, client] };
            let mut attempt = 0u64;
            while !stop.load(Ordering::Relaxed) {
                attempt += 1;
                let Ok(mut stream) = connect_from(source, &address) else { continue };
                let wrong = basic(if attempt % 2 == 0 { "prometheus" } else { "nobody" }, &format!("guess-{attempt}"));
                let sent = stream.write_all(format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{wrong}\r\n").as_bytes());
                if client >= 50 {
                    // Hang up at once: whatever the server started for this request is wasted.
                    hangups.fetch_add(1, Ordering::Relaxed);
                    drop(stream);
                    continue;
                }
                let mut head = [0u8; 12];
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let status = match (sent, stream.read_exact(&mut head)) {
                    (Ok(()), Ok(())) => {
                        std::str::from_utf8(&head[9..12]).ok().and_then(|s| s.parse().ok()).unwrap_or(0)
                    }
                    _ => 0,
                };
                *answers.lock().unwrap().entry(status).or_default() += 1;
            }
        }));
    }
    std::thread::sleep(Duration::from_secs(8));
    stop.store(true, Ordering::Relaxed);
    for attacker in attackers {
        attacker.join().unwrap();
    }
    let cpu_attack = cpu_time(pid) - cpu_before;
    let results = scrapes.join().unwrap();
    // After the flood: whatever it left running finishes within a second, then the daemon idles.
    std::thread::sleep(Duration::from_secs(1));
    let cpu_settled = cpu_time(pid);
    std::thread::sleep(Duration::from_secs(2));
    let cpu_after = (cpu_time(pid) - cpu_settled).as_secs_f64() / 2.0;
    let (peak_rss, peak_threads) = watch.finish();
    let (share, slowest) = summary(&results);
    eprintln!(
        "auth flood, 8 s: scraper {}/{} within {SCRAPE_DEADLINE:?} ({:.0} %), slowest {slowest:?}; attackers' \
            answers {:?}, {} hung up; exporter CPU {:.0} % of a core during, {:.1} % after; threads {threads_before} \
            -> peak {peak_threads}; peak VmRSS {:.1} MiB",
        results.iter().flatten().count(),
        results.len(),
        share * 100.0,
        answers.lock().unwrap(),
        hangups.load(Ordering::Relaxed),
        cpu_attack.as_secs_f64() / 8.0 * 100.0,
        cpu_after * 100.0,
        peak_rss as f64 / (1 << 20) as f64,
    );
    assert!(share >= 0.9, "only {:.0} % of scrapes within {SCRAPE_DEADLINE:?}: {results:?}", share * 100.0);
    assert!(peak_threads <= threads_before + 3, "threads {threads_before} -> {peak_threads}");
    assert!(cpu_after < 0.2, "the daemon still used {:.0} % of a core 1 s after the flood", cpu_after * 100.0);
    assert!(peak_rss < unit_memory_max(), "peak VmRSS {peak_rss} over MemoryMax");
    let answers = answers.lock().unwrap();
    assert!(answers.get(&429).copied().unwrap_or(0) > 0, "the clients sharing an address were limited: {answers:?}");
    assert!(answers.get(&200).is_none(), "a wrong password got in: {answers:?}");
}

/// A flood of wrong passwords from the scraper's own address must not keep that address at 429 so
/// that a scraper whose credentials the exporter has not verified yet (the exporter or the scraper
/// restarted, the password changed) is turned away before bcrypt ever looks at them. Here 4 clients
/// of 127.0.0.1 send the same wrong password over and over and 4 more ever-new ones, each on a new
/// connection, from the exporter's start; once the address has spent its allowance, the scraper
/// starts from 127.0.0.1 too. It must get its 200 within a second per ever-new client ahead of it,
/// plus slack, and every scrape after from memory; the exporter's CPU during the flood is printed
/// against the bcrypt it may do.
#[test]
fn a_wrong_password_flood_from_the_scrapers_address_does_not_keep_its_right_credentials_out() {
    let _live = live_lock();
    let tmp = temp_dir("auth-same-address");
    let dir = tmp.path();
    let cost = env_or("ATTACK_BCRYPT_COST", 8) as u32;
    let hash = bcrypt::hash("right", cost).unwrap();
    let web = dir.join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  prometheus: '{hash}'\n")).unwrap();
    let mut args = fixture_args();
    args.extend(["--web.config.file".into(), web.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let exporter = Exporter::spawn(&args, &[]);
    let (address, pid) = (exporter.address.clone(), exporter.child.id());
    let deadline = Instant::now() + Duration::from_secs(20);
    // Ready without credentials: a 401 says it answers, and nothing verified is remembered.
    while request(&address, "/-/ready", "", SCRAPE_DEADLINE) != 401 {
        assert!(Instant::now() < deadline, "never ready:\n{}", exporter.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    // What one check costs in this build, for the CPU the flood may take.
    let started = Instant::now();
    assert!(!bcrypt::verify("wrong", &hash).unwrap());
    let one_check = started.elapsed();
    let idle_started = (Instant::now(), cpu_time(pid));
    std::thread::sleep(Duration::from_secs(2));
    let idle = (cpu_time(pid) - idle_started.1).as_secs_f64() / idle_started.0.elapsed().as_secs_f64();

    const REPEATING: usize = 4;
    const EVER_NEW: usize = 4;
    let attack_started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let answers: Arc<Mutex<std::collections::BTreeMap<(bool, u16), usize>>> = Arc::default();
    let attackers: Vec<_> = (0..REPEATING + EVER_NEW)
        .map(|client| {
            let (address, stop, answers) = (address.clone(), stop.clone(), answers.clone());
            std::thread::spawn(move || {
                let ever_new = client >= REPEATING;
                let mut attempt = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    attempt += 1;
                    let Ok(mut stream) = connect_from([127, 0, 0, 1], &address) else { continue };
                    let wrong = match (ever_new, attempt % 2) {
                        (false, _) => basic("prometheus", "the-same-wrong-one"),
                        (true, 0) => basic("prometheus", &format!("guess-{client}-{attempt}")),
                        (true, _) => basic("nobody", &format!("guess-{client}-{attempt}")),
                    };
                    let sent = stream.write_all(format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{wrong}\r\n").as_bytes());
                    let mut head = [0u8; 12];
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(15)));
                    let status = match (sent, stream.read_exact(&mut head)) {
                        (Ok(()), Ok(())) => {
                            std::str::from_utf8(&head[9..12]).ok().and_then(|s| s.parse().ok()).unwrap_or(0)
                        }
                        _ => 0,
                    };
                    *answers.lock().unwrap().entry((ever_new, status)).or_default() += 1;
                }
            })
        })
        .collect();
    // The address has spent its allowance (10 failures) once the ever-new clients have had
    // more failures (or 429s) than that.
    let spent = || {
        let answers = answers.lock().unwrap();
        [401, 429].iter().map(|s| answers.get(&(true, *s)).copied().unwrap_or(0)).sum::<usize>()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while spent() < FAILURE_BURST + 2 {
        assert!(Instant::now() < deadline, "the flood got no answers: {:?}", answers.lock().unwrap());
        std::thread::sleep(Duration::from_millis(20));
    }
    let flood_started = (Instant::now(), cpu_time(pid));

    // The scraper starts: each request waits up to 12 s (the exporter's line waits 10 s).
    let credentials = basic("prometheus", "right");
    // Then every scrape is answered from memory, the flood going on.
    let (first_200, statuses, after) =
        scrape_until_admitted(10, |deadline| request(&address, "/metrics", &credentials, deadline));
    let window = flood_started.0.elapsed().as_secs_f64();
    let flood_cpu = (cpu_time(pid) - flood_started.1).as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for attacker in attackers {
        attacker.join().unwrap();
    }
    let attack_seconds = attack_started.elapsed().as_secs_f64();
    let answers = answers.lock().unwrap().clone();
    // Each 401 of an ever-new password is a bcrypt check: at most the address's allowance (10)
    // and one a second after it. The repeated password needed one (and the scraper its own).
    let checks = answers.get(&(true, 401)).copied().unwrap_or(0);
    let allowed_checks = FAILURE_BURST + attack_seconds.ceil() as usize + 1;
    let bound = FIRST_SCRAPE_SLACK + Duration::from_secs(EVER_NEW as u64 + 1);
    eprintln!(
        "same-address flood: scraper's first 200 after {first_200:?} (bound {bound:?}; statuses before it \
            {statuses:?}); after it {after:?}; attackers' answers (ever-new, status) {answers:?}; {checks} checks \
            of ever-new passwords in {attack_seconds:.1} s (bound {allowed_checks}), one check {one_check:?}: \
            {:.2} s of bcrypt; exporter CPU {flood_cpu:.2} s in {window:.1} s of flood ({:.0} % of a core, \
            serving the requests included; idle {:.1} %)",
        checks as f64 * one_check.as_secs_f64(),
        flood_cpu / window * 100.0,
        idle * 100.0,
    );
    let first_200 = first_200.unwrap_or_else(|| panic!("the scraper never got in: {statuses:?}, {answers:?}"));
    assert!(first_200 <= bound, "the scraper got in after {first_200:?}");
    assert!(after.iter().all(|(s, t)| *s == 200 && *t <= SCRAPE_DEADLINE), "{after:?}");
    assert!(answers.keys().all(|(_, status)| *status != 200), "a wrong password got in: {answers:?}");
    assert!(checks <= allowed_checks, "{checks} bcrypt checks of ever-new passwords: {answers:?}");
    assert!(
        answers.get(&(false, 401)).copied().unwrap_or(0) > 100,
        "the same wrong password, answered from memory, is never limited: {answers:?}"
    );
}

/// The allowance of failures of one address (`server::auth::FAILURE_BURST`).
const FAILURE_BURST: usize = 10;
/// Slack on the first scrape's bound: bcrypt of the checks ahead and of its own, on a loaded machine.
const FIRST_SCRAPE_SLACK: Duration = Duration::from_secs(3);

/// The scraper with the right credentials: requests (each waiting up to 12 s, the exporter's
/// line waits 10) every [`SCRAPE_INTERVAL`] until one is answered 200, for up to 30 s, then
/// `later` more within [`SCRAPE_DEADLINE`]. Returns when the 200 came (`None`: never), the
/// statuses before it, and each later scrape's status and time.
fn scrape_until_admitted(
    later: usize,
    scrape: impl Fn(Duration) -> u16,
) -> (Option<Duration>, Vec<u16>, Vec<(u16, Duration)>) {
    let started = Instant::now();
    let mut statuses = Vec::new();
    let first_200 = loop {
        let status = scrape(Duration::from_secs(12));
        statuses.push(status);
        if status == 200 {
            break Some(started.elapsed());
        }
        if started.elapsed() > Duration::from_secs(30) {
            break None;
        }
        std::thread::sleep(SCRAPE_INTERVAL);
    };
    let after = (0..later)
        .map(|_| {
            let begun = Instant::now();
            let status = scrape(SCRAPE_DEADLINE);
            let took = begun.elapsed();
            std::thread::sleep(SCRAPE_INTERVAL);
            (status, took)
        })
        .collect();
    (first_200, statuses, after)
}

/// A TCP connection to `address` from `source`, an address of this namespace's lo.
fn connect_from_v6(source: std::net::Ipv6Addr, address: std::net::SocketAddr) -> std::io::Result<TcpStream> {
    use std::os::fd::FromRawFd;
    let std::net::SocketAddr::V6(address) = address else { panic!("{address} is not IPv6") };
    let sockaddr = |ip: std::net::Ipv6Addr, port: u16| libc::sockaddr_in6 {
        sin6_family: libc::AF_INET6 as libc::sa_family_t,
        sin6_port: port.to_be(),
        sin6_flowinfo: 0,
        sin6_addr: libc::in6_addr { s6_addr: ip.octets() },
        sin6_scope_id: 0,
    };
    let len = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
    // SAFETY: a fresh socket we own, and address structs that live across the calls.
    unsafe {
        let fd = libc::socket(libc::AF_INET6, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let stream = TcpStream::from_raw_fd(fd);
        let local = sockaddr(source, 0);
        if libc::bind(fd, (&local as *const libc::sockaddr_in6).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let remote = sockaddr(*address.ip(), address.port());
        if libc::connect(fd, (&remote as *const libc::sockaddr_in6).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(stream)
    }
}

/// The exporter limits an IPv6 client by its /64 (a host is often given one), so a neighbour in the
/// scraper's /64 that keeps the network's line full of ever-new guesses must not keep a scraper
/// whose credentials are not verified yet out, as an attacker on its own address would. Here, in a
/// network namespace of its own with three addresses of fd64::/64 on lo, 12 clients of the
/// neighbour's address send ever-new wrong passwords, each as soon as the last was answered (a
/// refused one 20 ms later), so the line is full whenever the scraper comes. The scraper's host had
/// nobody waiting: it takes the neighbour's last place and is checked at the next turn or the one
/// after.
#[test]
fn a_neighbour_flooding_the_scrapers_ipv6_64_does_not_keep_its_right_credentials_out() {
    crate::require!(crate::util::is_root(), "needs root for a network namespace of its own");
    let _live = live_lock();
    // The namespace is this thread's (and the exporter's and the clients', started from it).
    if let Err(panic) = std::thread::spawn(neighbour_flood_in_a_namespace_of_its_own).join() {
        std::panic::resume_unwind(panic);
    }
}

fn neighbour_flood_in_a_namespace_of_its_own() {
    use std::net::Ipv6Addr;
    const SERVER: Ipv6Addr = Ipv6Addr::new(0xfd64, 0, 0, 0, 0, 0, 0, 1);
    const NEIGHBOUR: Ipv6Addr = Ipv6Addr::new(0xfd64, 0, 0, 0, 0, 0, 0, 0xbad);
    const SCRAPER: Ipv6Addr = Ipv6Addr::new(0xfd64, 0, 0, 0, 0, 0, 0, 0x5c);
    const NEIGHBOURS: usize = 12;
    // SAFETY: unshare with CLONE_NEWNET moves this thread alone into a new network namespace.
    let unshared = unsafe { libc::unshare(libc::CLONE_NEWNET) };
    assert_eq!(unshared, 0, "unshare(CLONE_NEWNET): {}", std::io::Error::last_os_error());
    let ip = |args: &[&str]| {
        let status = std::process::Command::new("ip").args(args).status().expect("ip (iproute2)");
        assert!(status.success(), "ip {args:?}: {status}");
    };
    ip(&["link", "set", "lo", "up"]);
    for address in [SERVER, NEIGHBOUR, SCRAPER] {
        ip(&["-6", "addr", "add", &format!("{address}/64"), "dev", "lo", "nodad"]);
    }

    let tmp = temp_dir("auth-neighbour");
    let dir = tmp.path();
    let hash = bcrypt::hash("right", env_or("ATTACK_BCRYPT_COST", 8) as u32).unwrap();
    let web = dir.join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  prometheus: '{hash}'\n")).unwrap();
    let mut cmd = crate::util::command(crate::util::binary(), &format!("[{SERVER}]:0"));
    cmd.args(fixture_args()).args(["--web.config.file".into(), web.display().to_string()]);
    let exporter = Exporter::from_command(cmd);
    let address: std::net::SocketAddr = exporter.address.parse().unwrap();
    let from = move |source: Ipv6Addr, credentials: &str, deadline: Duration| {
        let started = Instant::now();
        match connect_from_v6(source, address) {
            Ok(stream) => super::exchange(stream, started, "/metrics", credentials, deadline),
            Err(_) => 0,
        }
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while from(SCRAPER, "", SCRAPE_DEADLINE) != 401 {
        assert!(Instant::now() < deadline, "never ready:\n{}", exporter.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }

    let stop = Arc::new(AtomicBool::new(false));
    let answers: Arc<Mutex<std::collections::BTreeMap<u16, usize>>> = Arc::default();
    let attack_started = Instant::now();
    let neighbours: Vec<_> = (0..NEIGHBOURS)
        .map(|client| {
            let (stop, answers) = (stop.clone(), answers.clone());
            std::thread::spawn(move || {
                let mut attempt = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    attempt += 1;
                    let guess = basic("prometheus", &format!("guess-{client}-{attempt}"));
                    let status = from(NEIGHBOUR, &guess, Duration::from_secs(15));
                    *answers.lock().unwrap().entry(status).or_default() += 1;
                    if status != 401 {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            })
        })
        .collect();
    // The network has spent its allowance and its line is full once guesses are refused.
    let deadline = Instant::now() + Duration::from_secs(30);
    while answers.lock().unwrap().get(&429).copied().unwrap_or(0) < NEIGHBOURS {
        assert!(Instant::now() < deadline, "the neighbour was never limited: {:?}", answers.lock().unwrap());
        std::thread::sleep(Duration::from_millis(20));
    }

    let credentials = basic("prometheus", "right");
    let (first_200, statuses, after) = scrape_until_admitted(5, |deadline| from(SCRAPER, &credentials, deadline));
    stop.store(true, Ordering::Relaxed);
    for neighbour in neighbours {
        neighbour.join().unwrap();
    }
    let attack_seconds = attack_started.elapsed().as_secs_f64();
    let answers = answers.lock().unwrap().clone();
    let checks = answers.get(&401).copied().unwrap_or(0);
    let allowed_checks = FAILURE_BURST + attack_seconds.ceil() as usize + 1;
    // Two turns (the one under way, then the scraper's), plus slack for bcrypt on a loaded host.
    let bound = FIRST_SCRAPE_SLACK + Duration::from_secs(2);
    eprintln!(
        "neighbour in the /64: scraper's first 200 after {first_200:?} (bound {bound:?}; statuses before it \
            {statuses:?}); after it {after:?}; neighbour's answers {answers:?}; {checks} checks in \
            {attack_seconds:.1} s (bound {allowed_checks})"
    );
    let first_200 = first_200.unwrap_or_else(|| panic!("the scraper never got in: {statuses:?}, {answers:?}"));
    assert!(first_200 <= bound, "the scraper got in after {first_200:?}");
    assert!(after.iter().all(|(s, t)| *s == 200 && *t <= SCRAPE_DEADLINE), "{after:?}");
    assert!(!answers.contains_key(&200), "a wrong password got in: {answers:?}");
    assert!(checks <= allowed_checks, "{checks} bcrypt checks of the neighbour's guesses: {answers:?}");
    drop(exporter);
}

/// Wrong passwords rotated over many loopback addresses must not hold every place of the bcrypt
/// queue (one running, four waiting) so that a scraper whose credentials the exporter has not
/// verified yet (the exporter restarted) gets 503. Here 20 clients rotate over ATTACK_ADDRESSES
/// (40) addresses of 127.0.2.0/24 with ever-new wrong passwords; once each address has failed a
/// check, the scraper starts from 127.0.0.1. Its address has no failure, so it goes ahead of
/// theirs: its first 200 within a few checks' time, every scrape after it from memory while the
/// flood goes on.
#[test]
fn wrong_passwords_rotated_over_many_addresses_do_not_hold_every_place_of_the_bcrypt_queue() {
    let _live = live_lock();
    let tmp = temp_dir("auth-many-addresses");
    let dir = tmp.path();
    let hash = bcrypt::hash("right", env_or("ATTACK_BCRYPT_COST", 8) as u32).unwrap();
    let web = dir.join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  prometheus: '{hash}'\n")).unwrap();
    let mut args = fixture_args();
    args.extend(["--web.config.file".into(), web.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let exporter = Exporter::spawn(&args, &[]);
    let address = exporter.address.clone();
    let deadline = Instant::now() + Duration::from_secs(20);
    while request(&address, "/-/ready", "", SCRAPE_DEADLINE) != 401 {
        assert!(Instant::now() < deadline, "never ready:\n{}", exporter.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    let addresses = env_or("ATTACK_ADDRESSES", 40).min(254);
    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicUsize::new(0));
    let answers: Arc<Mutex<std::collections::BTreeMap<u16, usize>>> = Arc::default();
    let failed: Arc<Mutex<std::collections::BTreeSet<usize>>> = Arc::default();
    let attackers: Vec<_> = (0..20)
        .map(|_| {
            let (address, stop, next, answers, failed) =
                (address.clone(), stop.clone(), next.clone(), answers.clone(), failed.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    let host = n % addresses;
                    let Ok(mut stream) = connect_from([127, 0, 2, host as u8 + 1], &address) else { continue };
                    let wrong = basic("prometheus", &format!("guess-{n}"));
                    let sent = stream.write_all(format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{wrong}\r\n").as_bytes());
                    let mut head = [0u8; 12];
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(15)));
                    let status = match (sent, stream.read_exact(&mut head)) {
                        (Ok(()), Ok(())) => {
                            std::str::from_utf8(&head[9..12]).ok().and_then(|s| s.parse().ok()).unwrap_or(0)
                        }
                        _ => 0,
                    };
                    if status == 401 {
                        failed.lock().unwrap().insert(host);
                    }
                    *answers.lock().unwrap().entry(status).or_default() += 1;
                }
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while failed.lock().unwrap().len() < addresses {
        assert!(Instant::now() < deadline, "not every address failed a check: {:?}", answers.lock().unwrap());
        std::thread::sleep(Duration::from_millis(50));
    }
    let busy_before = answers.lock().unwrap().get(&503).copied().unwrap_or(0);
    let credentials = basic("prometheus", "right");
    let (first_200, statuses, after) =
        scrape_until_admitted(10, |deadline| request(&address, "/metrics", &credentials, deadline));
    stop.store(true, Ordering::Relaxed);
    for attacker in attackers {
        attacker.join().unwrap();
    }
    let answers = answers.lock().unwrap().clone();
    eprintln!(
        "{addresses} addresses rotating wrong passwords: scraper's first 200 after {first_200:?} (statuses before it \
            {statuses:?}); after it {after:?}; attackers' answers {answers:?} ({busy_before} 503 before the scraper \
            started: the queue was full)"
    );
    assert!(busy_before > 0, "the flood never filled the bcrypt queue: {answers:?}");
    let first_200 = first_200.unwrap_or_else(|| panic!("the scraper never got in: {statuses:?}"));
    assert!(first_200 <= FIRST_SCRAPE_SLACK + Duration::from_secs(2), "the scraper got in after {first_200:?}");
    assert!(after.iter().all(|(s, t)| *s == 200 && *t <= SCRAPE_DEADLINE), "{after:?}");
    assert!(!answers.contains_key(&200), "a wrong password got in: {answers:?}");
}
