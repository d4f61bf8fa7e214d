//! `--web.config.file` with real clients: TLS and basic auth through curl, client certificates
//! (good, expired, signed by another CA), plain HTTP on the TLS port, and the request limits
//! (concurrent requests, header size, slow clients) over raw sockets.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::{basic, fixtures, http_get, Exporter};

fn temp_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("memlock-web-it-{name}-")).tempdir().unwrap()
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").current_dir(dir).args(args).output().expect("run openssl");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Certificates made with the openssl CLI: a CA; a server certificate for 127.0.0.1; a client
/// certificate, an expired one, and one from a CA the server does not trust.
fn make_pki(dir: &Path) {
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    for ca in ["ca", "other-ca"] {
        let (key, crt, subject) = (format!("{ca}.key"), format!("{ca}.crt"), format!("/CN={ca}"));
        let mut args = vec!["req", "-x509"];
        args.extend(ec);
        args.extend(["-keyout", &key, "-out", &crt, "-days", "2", "-subj", &subject]);
        openssl(dir, &args);
    }
    std::fs::write(dir.join("server.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
        .unwrap();
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    for (name, ca, ext, days) in [
        ("server", "ca", "server.ext", "2"),
        ("client", "ca", "client.ext", "2"),
        ("expired", "ca", "client.ext", "-1"),
        ("stranger", "other-ca", "client.ext", "2"),
    ] {
        let (key, csr, crt) = (format!("{name}.key"), format!("{name}.csr"), format!("{name}.crt"));
        let mut args = vec!["req"];
        args.extend(ec);
        let subject = format!("/CN={name}");
        args.extend(["-keyout", &key, "-out", &csr, "-subj", &subject]);
        openssl(dir, &args);
        let (ca_crt, ca_key) = (format!("{ca}.crt"), format!("{ca}.key"));
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &ca_crt,
                "-CAkey",
                &ca_key,
                "-CAcreateserial",
                "-out",
                &crt,
                "-days",
                days,
                "-extfile",
                ext,
            ],
        );
    }
}

/// curl's exit code, the HTTP status (0 when there was none) and the response headers and body.
fn curl(args: &[&str]) -> (i32, u16, String) {
    let out = Command::new("curl")
        .args(["-sS", "--noproxy", "*", "--max-time", "10", "-D", "-", "-w", "\n%{http_code}"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (out.status.code().unwrap_or(-1), code.trim().parse().unwrap_or(0), body.to_owned())
}

fn fixture_roots() -> Vec<String> {
    let root = fixtures();
    vec![
        "--path.procfs".into(),
        root.join("proc").display().to_string(),
        "--path.sysfs".into(),
        root.join("sys").display().to_string(),
        "--no-collector.rdma_netlink".into(),
    ]
}

fn spawn(web_config: &Path, extra: &[&str]) -> Exporter {
    let mut args: Vec<String> = fixture_roots();
    args.extend(["--web.config.file".to_owned(), web_config.display().to_string()]);
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Exporter::spawn(&args, &[])
}

/// Retries until the exporter answers `expected` (it samples once before it is ready).
fn wait_for(expected: u16, args: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, code, body) = curl(args);
        if code == expected {
            return body;
        }
        assert!(Instant::now() < deadline, "never got {expected} from curl {args:?}; last {code}: {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Retries a scrape made with `args` until it answers 200 with the reload gauge at `expected`.
fn wait_for_reload_gauge(exporter: &Exporter, args: &[&str], expected: &str) {
    let line = format!("\nmemlock_exporter_config_last_reload_successful {expected}\n");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (rc, code, body) = curl(args);
        if rc == 0 && code == 200 && body.contains(&line) {
            return;
        }
        assert!(Instant::now() < deadline, "reload gauge never {expected}: rc {rc}, {code}\n{}", exporter.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The newest "configuration reload failed" line of the exporter's log (the log is printed
/// when there is none).
fn last_reload_refusal(exporter: &Exporter) -> Option<String> {
    let log = exporter.log_text();
    let refusal = log.lines().rev().find(|l| l.contains("configuration reload failed")).map(str::to_owned);
    if refusal.is_none() {
        eprintln!("no reload refusal in the log:\n{log}");
    }
    refusal
}

#[test]
fn tls_with_basic_auth_good_and_bad_credentials_and_plain_http_refused() {
    let tmp = temp_dir("tls-auth");
    let dir = tmp.path();
    make_pki(dir);
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    let web = dir.join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  min_version: \
                TLS13\nhttp_server_config:\n  headers:\n    X-Frame-Options: deny\nbasic_auth_users:\n  prometheus: \
                '{hash}'\n"
        ),
    )
    .unwrap();
    let exporter = spawn(&web, &[]);
    let url = format!("https://{}/metrics", exporter.address);
    let ca = dir.join("ca.crt").display().to_string();

    wait_for(200, &["--cacert", &ca, "-u", "prometheus:s3cret", &format!("https://{}/-/ready", exporter.address)]);
    let (rc, code, body) = curl(&["--cacert", &ca, "-u", "prometheus:s3cret", &url]);
    assert_eq!((rc, code), (0, 200), "{body}");
    assert!(body.contains("\nmemlock_node_mlocked_bytes "), "{body}");
    assert!(body.contains("\nmemlock_exporter_config_last_reload_successful 1\n"), "{body}");
    assert!(body.to_ascii_lowercase().contains("x-frame-options: deny"), "configured headers are sent: {body}");

    for credentials in [&["-u", "prometheus:wrong"][..], &["-u", "nobody:s3cret"], &[]] {
        let mut args = vec!["--cacert", ca.as_str(), url.as_str()];
        args.extend(credentials);
        let (rc, code, body) = curl(&args);
        assert_eq!((rc, code), (0, 401), "{credentials:?}: {body}");
        assert!(body.to_ascii_lowercase().contains("www-authenticate: basic"), "{body}");
        assert!(!body.contains("memlock_node"), "{body}");
    }

    // Plain HTTP to the TLS port gets a refusal, never metrics.
    let (status, body) = http_get(&exporter.address, "/metrics").unwrap();
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("HTTPS"), "{body}");
    let (rc, code, _) = curl(&[&format!("http://{}/metrics", exporter.address)]);
    assert_ne!(code, 200, "curl over plain HTTP: rc {rc}");

    // min_version TLS13: a TLS 1.2-only client cannot connect.
    let (rc, code, _) = curl(&["--cacert", &ca, "--tls-max", "1.2", "-u", "prometheus:s3cret", &url]);
    assert!(rc != 0 && code == 0, "TLS 1.2 client got rc {rc}, status {code}");
    // A client that does not trust the server's CA refuses it.
    let (rc, _, _) = curl(&["-u", "prometheus:s3cret", &url]);
    assert_ne!(rc, 0);
}

#[test]
fn client_certificates_verified_against_the_client_ca() {
    let tmp = temp_dir("mtls");
    let dir = tmp.path();
    make_pki(dir);
    let web = dir.join("web.yml");
    std::fs::write(
        &web,
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: \
            RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n",
    )
    .unwrap();
    let exporter = spawn(&web, &[]);
    let url = format!("https://{}/metrics", exporter.address);
    let path = |name: &str| dir.join(name).display().to_string();
    let (ca, client_crt, client_key) = (path("ca.crt"), path("client.crt"), path("client.key"));

    wait_for(
        200,
        &[
            "--cacert",
            &ca,
            "--cert",
            &client_crt,
            "--key",
            &client_key,
            &format!("https://{}/-/ready", exporter.address),
        ],
    );
    let (rc, code, body) = curl(&["--cacert", &ca, "--cert", &client_crt, "--key", &client_key, &url]);
    assert_eq!((rc, code), (0, 200), "{body}");
    assert!(body.contains("memlock_node_mlocked_bytes"));

    for (who, cert, key) in [
        ("expired", path("expired.crt"), path("expired.key")),
        ("other CA", path("stranger.crt"), path("stranger.key")),
    ] {
        for tls in ["1.2", "1.3"] {
            let (rc, code, body) = curl(&["--cacert", &ca, "--cert", &cert, "--key", &key, "--tls-max", tls, &url]);
            assert!(rc != 0 && code == 0, "{who} certificate over TLS {tls} accepted: rc {rc}, status {code}: {body}");
        }
    }
    let (rc, code, _) = curl(&["--cacert", &ca, &url]);
    assert!(rc != 0 && code == 0, "no client certificate accepted: rc {rc}, status {code}");

    // The same with openssl s_client, a second real TLS client: the handshake fails for the
    // stranger, and succeeds (verify return code 0) for the client.
    let s_client = |cert: &str, key: &str| {
        let mut child = Command::new("openssl")
            .args([
                "s_client",
                "-connect",
                &exporter.address,
                "-CAfile",
                &ca,
                "-cert",
                cert,
                "-key",
                key,
                "-tls1_2",
                "-ign_eof",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(b"GET /-/healthy HTTP/1.0\r\n\r\n").unwrap();
        let out = child.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    };
    let good = s_client(&client_crt, &client_key);
    assert!(good.contains("Healthy"), "{good}");
    let bad = s_client(&path("stranger.crt"), &path("stranger.key"));
    assert!(!bad.contains("Healthy"), "{bad}");
}

/// One raw HTTP/1.1 request with extra header lines; the status and how long it took.
fn raw_request(address: &str, path: &str, headers: &str) -> (u16, Duration) {
    let started = Instant::now();
    let mut stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    // The server may answer (431) and close before a huge request is written: not an error here.
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{headers}\r\n");
    if let Err(e) = stream.write_all(request.as_bytes()) {
        assert!(matches!(e.kind(), std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset), "{e}");
    }
    let mut head = [0u8; 12];
    let mut filled = 0;
    while filled < head.len() {
        match stream.read(&mut head[filled..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => filled += n,
        }
    }
    let status = std::str::from_utf8(&head[..filled])
        .ok()
        .and_then(|t| t.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, started.elapsed())
}

#[test]
fn excess_concurrent_requests_get_503_at_once() {
    let tmp = temp_dir("max-requests");
    let dir = tmp.path();
    // A deliberately expensive hash: each uncached check keeps its request busy for a while,
    // which is what the request limit bounds.
    let hash = bcrypt::hash("right", 12).unwrap();
    let web = dir.join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  prometheus: '{hash}'\n")).unwrap();
    let exporter = spawn(&web, &["--web.max-requests", "1"]);
    let address = exporter.address.clone();
    let (status, took) = raw_request(&address, "/metrics", &basic("prometheus", "warm-up"));
    assert_eq!(status, 401);
    assert!(took > Duration::from_millis(150), "bcrypt at cost 12 took only {took:?}; the test needs a slow request");

    let slow_address = address.clone();
    let slow = std::thread::spawn(move || raw_request(&slow_address, "/metrics", &basic("prometheus", "wrong-1")));
    std::thread::sleep(took / 4);
    let (status, quick) = raw_request(&address, "/-/healthy", &basic("prometheus", "wrong-2"));
    assert_eq!(status, 503, "a second request while the first is being checked");
    assert!(quick < took / 2, "503 must come at once, took {quick:?}");
    assert_eq!(slow.join().unwrap().0, 401);
    // The slot is free again: a cached good password passes.
    let (status, _) = raw_request(&address, "/metrics", &basic("prometheus", "right"));
    assert_eq!(status, 200);
}

#[test]
fn oversized_headers_are_refused_and_slow_clients_do_not_block_scrapes() {
    let tmp = temp_dir("limits");
    let dir = tmp.path();
    let web = dir.join("web.yml");
    std::fs::write(&web, "# no TLS, no auth\n").unwrap();
    let exporter = spawn(&web, &[]);
    exporter.wait_ready();
    let address = exporter.address.clone();

    let huge = format!("X-Padding: {}\r\n", "a".repeat(64 * 1024));
    let (status, _) = raw_request(&address, "/metrics", &huge);
    assert!(status == 431 || status == 0, "64 KiB of headers got {status}");

    // Slow-loris clients: they send a byte per second and never finish their headers.
    let started = Instant::now();
    let mut slow: Vec<TcpStream> = (0..20).map(|_| TcpStream::connect(&address).unwrap()).collect();
    let request = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    let mut closed_after = None;
    for i in 0..15 {
        for stream in &mut slow {
            let _ = stream.write_all(&request[i % request.len()..i % request.len() + 1]);
        }
        let (status, took) = raw_request(&address, "/metrics", "");
        assert_eq!(status, 200);
        assert!(took < Duration::from_secs(2), "a scrape next to slow clients took {took:?}");
        std::thread::sleep(Duration::from_secs(1));
        // The header read timeout (10 s) closes them: end of file, an error or a 408.
        slow[0].set_read_timeout(Some(Duration::from_millis(10))).unwrap();
        let mut buf = [0u8; 512];
        match slow[0].read(&mut buf) {
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            _ => {
                closed_after = Some(started.elapsed());
                break;
            }
        }
    }
    let closed_after = closed_after.expect("slow clients were never disconnected");
    assert!(
        closed_after >= Duration::from_secs(9) && closed_after <= Duration::from_secs(14),
        "closed after {closed_after:?}"
    );
}

/// Reloading an emptied web configuration, or one whose `cert_file` and `key_file` were
/// blanked, must not switch the running TLS port to plain HTTP or drop basic auth. Every
/// lowering is refused: the port keeps TLS, client certificates and auth, the gauge drops to 0,
/// the error names the setting.
#[test]
fn a_reload_never_lowers_security() {
    let tmp = temp_dir("no-lowering");
    let dir = tmp.path();
    make_pki(dir);
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    let tls = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";
    let mtls = format!("{tls}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n");
    let users = format!("basic_auth_users:\n  prometheus: '{hash}'\n");
    let web = dir.join("web.yml");
    std::fs::write(&web, format!("{mtls}{users}")).unwrap();
    let exporter = spawn(&web, &[]);
    let path = |name: &str| dir.join(name).display().to_string();
    let (ca, cert, key) = (path("ca.crt"), path("client.crt"), path("client.key"));
    let url = format!("https://{}/metrics", exporter.address);
    let full = ["--cacert", &ca, "--cert", &cert, "--key", &key, "-u", "prometheus:s3cret", &url];
    wait_for(200, &full);
    let reload_gauge = |expected: &str| wait_for_reload_gauge(&exporter, &full, expected);
    reload_gauge("1");

    let lowerings = [
        ("an empty file", String::new(), "tls_server_config"),
        (
            "blank cert_file and key_file",
            format!("tls_server_config:\n  cert_file: ''\n  key_file: ''\n{users}"),
            "tls_server_config",
        ),
        ("no client certificates", format!("{tls}{users}"), "tls_server_config.client_auth_type"),
        ("no basic auth", mtls.clone(), "basic_auth_users"),
    ];
    for (what, text, setting) in lowerings {
        std::fs::write(&web, text).unwrap();
        // SAFETY: kill with the pid of our own running child.
        assert_eq!(unsafe { libc::kill(exporter.child.id() as i32, libc::SIGHUP) }, 0);
        reload_gauge("0");
        let refusal = last_reload_refusal(&exporter).unwrap_or_else(|| panic!("{what}: no refusal logged"));
        assert!(
            refusal.contains("\"level\":\"ERROR\"") && refusal.contains(setting) && refusal.contains("restart"),
            "{what}: {refusal}"
        );
        // Still TLS, still client certificates, still auth.
        let (status, body) = http_get(&exporter.address, "/metrics").unwrap();
        assert_eq!(status, 400, "{what}: plain HTTP got {status}: {body}");
        let (rc, code, _) = curl(&["--cacert", &ca, "-u", "prometheus:s3cret", &url]);
        assert!(rc != 0 && code == 0, "{what}: no client certificate got rc {rc}, status {code}");
        let (rc, code, _) = curl(&["--cacert", &ca, "--cert", &cert, "--key", &key, &url]);
        assert_eq!((rc, code), (0, 401), "{what}: no password");
        // Put the good file back: the gauge recovers, so the next case starts from 1.
        std::fs::write(&web, format!("{mtls}{users}")).unwrap();
        // SAFETY: as above.
        assert_eq!(unsafe { libc::kill(exporter.child.id() as i32, libc::SIGHUP) }, 0);
        reload_gauge("1");
    }

    // Raising or keeping security still reloads: a second user.
    let other = bcrypt::hash("other", 4).unwrap();
    std::fs::write(&web, format!("{mtls}{users}  second: '{other}'\n")).unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(exporter.child.id() as i32, libc::SIGHUP) }, 0);
    let deadline = Instant::now() + Duration::from_secs(15);
    while curl(&["--cacert", &ca, "--cert", &cert, "--key", &key, "-u", "second:other", &url]).1 != 200 {
        assert!(Instant::now() < deadline, "the second user never got in:\n{}", exporter.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A 405 names the allowed methods in `Allow`; HTTP/2 with prior knowledge is told to use HTTP/1.1,
/// not closed without a word (hyper's HTTP/1 server has no response for its preface); and a
/// telemetry path that is served exactly as configured, percent sign included (ones that can never
/// match are refused at load).
#[test]
fn method_not_allowed_names_the_methods_and_http2_is_told_to_use_http1() {
    let mut args = fixture_roots();
    args.extend(["--web.telemetry-path".to_owned(), "/probe/metrics%3F".to_owned()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let exporter = Exporter::start(&args);
    let address = exporter.address.clone();
    assert_eq!(http_get(&address, "/probe/metrics%3F").unwrap().0, 200);

    let mut stream = TcpStream::connect(&address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream
        .write_all(b"POST /probe/metrics%3F HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 405"), "{response}");
    assert!(response.to_ascii_lowercase().contains("\r\nallow: get, head\r\n"), "{response}");

    let mut stream = TcpStream::connect(&address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00").unwrap();
    let mut frames = Vec::new();
    stream.read_to_end(&mut frames).unwrap();
    assert!(frames.len() >= 26, "an answer, not a silent close: {frames:?}");
    assert_eq!(&frames[..9], &[0, 0, 0, 4, 0, 0, 0, 0, 0], "the server's SETTINGS: {frames:?}");
    assert_eq!(frames[12], 7, "then GOAWAY: {frames:?}");
    assert_eq!(&frames[22..26], &[0, 0, 0, 0xd], "HTTP_1_1_REQUIRED: {frames:?}");

    // A real HTTP/2 client hears it (curl 7.88 logs the code, 13, and fails the transfer).
    let out = Command::new("curl")
        .args(["-sS", "-v", "--noproxy", "*", "--max-time", "10", "--http2-prior-knowledge", "-o", "/dev/null"])
        .arg(format!("http://{address}/probe/metrics%3F"))
        .output()
        .expect("run curl");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("GOAWAY, error=13"), "{:?}: {stderr}", out.status);
    // And HTTP/1.1 on the same port is unaffected, PUT and POST included (they start like PRI).
    assert_eq!(http_get(&address, "/-/healthy").unwrap().0, 200);
}

/// `/metrics` gzipped for clients that accept it, as real clients read it: curl decompresses it,
/// and Python's zlib reads it as exactly one gzip member (some clients stop after the first member
/// of a multi-member body) with a valid CRC and length; the series match an uncompressed scrape's.
/// Clients that do not ask get the text as it is.
#[test]
fn gzip_for_clients_that_accept_it_as_curl_and_zlib_read_it() {
    let args = fixture_roots();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let exporter = Exporter::start(&args);
    // The fixture roots do not change, so once the trend family is there (from the second
    // sample on) every scrape has the same families: the comparisons below need that (a scrape before the trends
    // and one after differed once under load).
    exporter.wait_metrics(Duration::from_secs(30), "the trends of the fixture processes", |m| {
        !m.family("memlock_trend_rise_bytes_per_second").is_empty()
    });
    let url = format!("http://{}/metrics", exporter.address);
    let names = |text: &str| -> std::collections::BTreeSet<String> {
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| l.split(['{', ' ']).next().unwrap_or("").to_owned())
            .collect()
    };
    let (rc, status, identity) = curl(&[&url]);
    assert_eq!((rc, status), (0, 200), "{identity}");
    let lower = identity.to_ascii_lowercase();
    assert!(!lower.contains("content-encoding"), "{identity}");
    assert!(lower.contains("vary: accept-encoding"), "{identity}");
    let identity_body = identity.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap();

    let (rc, status, decoded) = curl(&["--compressed", &url]);
    assert_eq!((rc, status), (0, 200), "{decoded}");
    assert!(decoded.to_ascii_lowercase().contains("content-encoding: gzip"), "{decoded}");
    let decoded_body = decoded.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap();
    assert_eq!(names(&decoded_body), names(&identity_body));
    assert!(names(&identity_body).len() > 20);

    let tmp = temp_dir("gzip");
    let dir = tmp.path();
    let raw = dir.join("body.gz");
    let (rc, status, _) = curl(&["-H", "Accept-Encoding: gzip", "-o", raw.to_str().unwrap(), &url]);
    assert_eq!((rc, status), (0, 200));
    let compressed = std::fs::metadata(&raw).unwrap().len() as usize;
    assert!(compressed * 3 < identity_body.len(), "{compressed} bytes compressed of {}", identity_body.len());
    let check = "import sys, zlib\n\
        data = open(sys.argv[1], 'rb').read()\n\
        d = zlib.decompressobj(31)\n\
        text = d.decompress(data) + d.flush()\n\
        assert d.eof and d.unused_data == b'', 'one member, nothing after it'\n\
        sys.stdout.write(text.decode())\n";
    let out = Command::new("/usr/bin/python3").args(["-c", check]).arg(&raw).output().expect("run python3");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(names(&String::from_utf8_lossy(&out.stdout)), names(&identity_body));

    // Refused gzip and identity only: the text as it is.
    for accept in ["Accept-Encoding: gzip;q=0", "Accept-Encoding: identity"] {
        let (rc, status, text) = curl(&["-H", accept, &url]);
        assert_eq!((rc, status), (0, 200));
        assert!(!text.to_ascii_lowercase().contains("content-encoding"), "{accept}: {text}");
    }
}

/// A reload must not lower `min_version` from TLS13 to TLS12 and let TLS 1.2 clients in: it is
/// refused like the other lowerings (gauge 0, the key named, TLS 1.2 still refused); raising it
/// still reloads.
#[test]
fn a_reload_never_lowers_the_tls_version() {
    let tmp = temp_dir("no-lowering-tls");
    let dir = tmp.path();
    make_pki(dir);
    let tls = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";
    let web = dir.join("web.yml");
    std::fs::write(&web, format!("{tls}  min_version: TLS13\n")).unwrap();
    let exporter = spawn(&web, &[]);
    let ca = dir.join("ca.crt").display().to_string();
    let url = format!("https://{}/metrics", exporter.address);
    wait_for(200, &["--cacert", &ca, "--tlsv1.3", &url]);
    let tls12 = || curl(&["--cacert", &ca, "--tls-max", "1.2", &url]);
    assert_eq!(tls12().1, 0, "TLS 1.2 is refused at TLS13");
    let gauge = |expected: &str| wait_for_reload_gauge(&exporter, &["--cacert", &ca, &url], expected);
    gauge("1");
    for lowered in [tls.to_owned(), format!("{tls}  min_version: TLS12\n")] {
        std::fs::write(&web, &lowered).unwrap();
        gauge("0");
        let log = exporter.log_text();
        assert!(log.contains("tls_server_config.min_version") && log.contains("from TLS13 to TLS12"), "{log}");
        let (rc, code, _) = tls12();
        assert!(rc != 0 && code == 0, "{lowered:?}: a TLS 1.2 client got rc {rc}, status {code}");
        std::fs::write(&web, format!("{tls}  min_version: TLS13\n")).unwrap();
        gauge("1");
    }
}

/// `--web.telemetry-path /-/healthy` would give the liveness probe a scrape (or a 503 when
/// `web.max_requests` are busy): the exporter refuses to start, naming the flag.
#[test]
fn a_telemetry_path_on_a_probe_is_refused() {
    for probe in ["/-/healthy", "/-/ready"] {
        let mut args = fixture_roots();
        args.extend(["--web.telemetry-path".into(), probe.into()]);
        let Some((status, log)) = crate::util::exits_within(&args, Duration::from_secs(15)) else {
            panic!("the exporter serves with its telemetry path at {probe}");
        };
        assert_eq!(status.code(), Some(2), "{log}");
        assert!(log.contains("--web.telemetry-path") && log.contains("probe's path"), "{log}");
    }
}

/// On reload: a web configuration rewritten with a cost-31 bcrypt hash (2^31 rounds, hours of a
/// core per check) would let the next request with a password not yet verified under it take a
/// core for hours. The reload is refused (gauge 0, the error names the user and the cost), and
/// the users already loaded keep answering: the right password gets in, a wrong one gets 401 at
/// once.
#[test]
fn a_reload_to_a_bcrypt_cost_that_takes_hours_is_refused_and_the_users_kept() {
    let tmp = temp_dir("bcrypt-cost-reload");
    let dir = tmp.path();
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    let web = dir.join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  prometheus: '{hash}'\n")).unwrap();
    let exporter = spawn(&web, &[]);
    let url = format!("http://{}/metrics", exporter.address);
    let gauge = |expected: &str| wait_for_reload_gauge(&exporter, &["-u", "prometheus:s3cret", &url], expected);
    wait_for(200, &["-u", "prometheus:s3cret", &url]);
    gauge("1");

    let cost_31 = "$2y$31$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG";
    std::fs::write(&web, format!("basic_auth_users:\n  prometheus: '{cost_31}'\n")).unwrap();
    // SAFETY: kill with the pid of our own running child.
    assert_eq!(unsafe { libc::kill(exporter.child.id() as i32, libc::SIGHUP) }, 0);
    gauge("0");
    let refusal = last_reload_refusal(&exporter).expect("a refusal logged");
    for expected in ["\"level\":\"ERROR\"", "basic_auth_users.prometheus", "cost 31 is above 14", "41 hours"] {
        assert!(refusal.contains(expected), "{expected:?} not in {refusal}");
    }
    assert!(refusal.contains(&web.display().to_string()), "{refusal}");
    // The users loaded before: a password never tried is checked against the cost-4 hash, so the
    // answer comes within curl's 10 s (a cost-31 check would take hours).
    let (rc, code, body) = curl(&["-u", "prometheus:never-tried", &url]);
    assert_eq!((rc, code), (0, 401), "{body}");
    let (rc, code, _) = curl(&["-u", "prometheus:s3cret", &url]);
    assert_eq!((rc, code), (0, 200));
}
