use super::*;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn temp_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("memlock-web-{name}-")).tempdir().unwrap()
}

/// A self-signed certificate and key made with the openssl CLI.
fn self_signed(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let status = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
        ])
        .arg("-keyout")
        .arg(dir.join("server.key"))
        .arg("-out")
        .arg(dir.join("server.crt"))
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
}

/// Found by the fault tests: a web configuration replaced by a FIFO blocked the reload in
/// open(), and with it the daemon's event loop.
#[test]
fn a_fifo_or_a_directory_in_place_of_the_file_is_refused_at_once() {
    let tmp = temp_dir("fifo");
    let dir = tmp.path();
    std::fs::create_dir_all(dir).unwrap();
    let fifo = dir.join("web.yml");
    let _ = std::fs::remove_file(&fifo);
    let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo reads the NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    let (tx, rx) = std::sync::mpsc::channel();
    let (path, directory) = (fifo.clone(), dir.to_path_buf());
    std::thread::spawn(move || {
        let _ = tx.send((
            load(Some(&path)).err().map(|e| e.to_string()),
            load(Some(&directory)).err().map(|e| e.to_string()),
        ));
    });
    let (fifo_error, dir_error) = rx.recv_timeout(std::time::Duration::from_secs(10)).expect("loading a FIFO blocked");
    for error in [fifo_error, dir_error] {
        let error = error.expect("refused");
        assert!(error.contains("not a regular file"), "{error}");
    }
}

/// Nested `[` parse in time quadratic in the nesting, and a reload would wait for it: a deep
/// nesting is refused unparsed, at once, naming the file.
#[test]
fn deeply_nested_yaml_is_refused_before_parsing() {
    let tmp = temp_dir("nested");
    let dir = tmp.path();
    let hostile = write(dir, "web.yml", &format!("basic_auth_users: {}{}\n", "[".repeat(250_000), "]".repeat(250_000)));
    let (tx, rx) = std::sync::mpsc::channel();
    let path = hostile.clone();
    std::thread::spawn(move || {
        let _ = tx.send(load(Some(&path)).err().map(|e| e.to_string()));
    });
    let error = rx.recv_timeout(std::time::Duration::from_secs(10)).expect("parsing did not end in 10 s");
    let error = error.expect("refused");
    assert!(error.contains(&hostile.display().to_string()), "{error}");
    assert!(error.contains("larger than 262144 bytes"), "{error}");
    // Within the size bound: refused by the count.
    let nested = write(dir, "nested.yml", &format!("basic_auth_users: {}{}\n", "[".repeat(50_000), "]".repeat(50_000)));
    let error = load(Some(&nested)).unwrap_err().to_string();
    assert!(error.contains("50000 '[' and '{'") && error.contains("more than the 32"), "{error}");
    // Quotes cannot hide brackets from the count: YAML and a quote-aware scan could differ.
    let quoted = write(dir, "quoted.yml", &format!("basic_auth_users: {{\"{}\": x}}\n", "[".repeat(32)));
    assert!(load(Some(&quoted)).unwrap_err().to_string().contains("33 '['"));
    // 32 are allowed, and parsed: here into the wrong shape, which names the key.
    let deep = write(dir, "deep.yml", &format!("basic_auth_users: {}{}\n", "[".repeat(32), "]".repeat(32)));
    let error = load(Some(&deep)).unwrap_err().to_string();
    assert!(error.contains("basic_auth_users") && !error.contains("refused unparsed"), "{error}");
}

#[test]
fn no_file_and_empty_files_mean_plain_http_without_auth() {
    let config = load(None).unwrap();
    assert!(config.tls.is_none() && config.users.is_none() && config.headers.is_empty());
    let tmp = temp_dir("empty");
    let dir = tmp.path();
    let config = load(Some(&write(dir, "web.yml", "# nothing yet\n"))).unwrap();
    assert!(config.tls.is_none() && config.users.is_none());
}

#[test]
fn tls_with_relative_paths_and_users() {
    let tmp = temp_dir("tls");
    let dir = tmp.path();
    self_signed(dir);
    let hash = bcrypt::hash("secret", 4).unwrap();
    let path = write(
        dir,
        "web.yml",
        &format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  min_version: \
                TLS13\n  curve_preferences: [X25519]\nhttp_server_config:\n  http2: \
                false\n  headers:\n    X-Frame-Options: deny\nbasic_auth_users:\n  prometheus: '{hash}'\n"
        ),
    );
    let config = load(Some(&path)).unwrap();
    let tls = config.tls.as_ref().unwrap();
    assert_eq!(tls.alpn_protocols, vec![b"http/1.1".to_vec()]);
    assert_eq!(config.client_auth, ClientAuth::None);
    assert_eq!(config.sources, vec![path.clone(), dir.join("server.crt"), dir.join("server.key")]);
    assert_eq!(config.headers.len(), 1);
    let users = config.users.as_ref().unwrap();
    assert!(users.verify("prometheus", "secret"));
    assert_eq!(users.cached("prometheus", "secret"), Some(true));
    assert!(!users.verify("prometheus", "wrong"));
    assert_eq!(users.cached("prometheus", "wrong"), Some(false));
    assert!(!users.verify("nobody", "secret"));
    assert!(format!("{config:?}").contains("tls: true"), "debug output names no secret");
    assert!(!format!("{config:?}").contains(&hash));
}

#[test]
fn errors_name_the_file_and_the_key() {
    let tmp = temp_dir("errors");
    let dir = tmp.path();
    self_signed(dir);
    let cases = [
        ("tls_server_config:\n  cert_fil: server.crt\n", "cert_fil"),
        ("tls_server_config:\n  cert_file: server.crt\n", "tls_server_config.key_file"),
        ("tls_server_config:\n  cert_file: missing.crt\n  key_file: server.key\n", "missing.crt"),
        ("tls_server_config:\n  cert_file: server.key\n  key_file: server.key\n", "tls_server_config.cert_file"),
        ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.crt\n", "tls_server_config.key_file"),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  min_version: \
            TLS14\n",
            "tls_server_config.min_version",
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  max_version: \
            TLS11\n",
            "tls_server_config.max_version",
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_ca_file: \
            server.crt\n",
            "tls_server_config.client_ca_file",
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: \
            RequireAndVerifyClientCert\n",
            "tls_server_config.client_ca_file",
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: \
            RequireAnyClientCert\n",
            "tls_server_config.client_auth_type",
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  cipher_suites: \
            [TLS_RSA_WITH_RC4_128_SHA]\n",
            "tls_server_config.cipher_suites",
        ),
        ("basic_auth_users:\n  alice: plaintext\n", "basic_auth_users.alice"),
        ("basic_auth_users: [alice]\n", "basic_auth_users"),
        (
            "http_server_config:\n  headers:\n    X-Frame-Options: \
            allow\n",
            "http_server_config.headers.X-Frame-Options",
        ),
        ("http_server_config:\n  headers:\n    Server: me\n", "http_server_config.headers.Server"),
        ("rate_limit:\n  interval: 1s\n", "rate_limit"),
        ("tls_server_config: [\n", "web.yml"),
    ];
    for (text, expected) in cases {
        let path = write(dir, "web.yml", text);
        let err = load(Some(&path)).unwrap_err().to_string();
        assert!(err.contains(expected) && err.contains(&path.display().to_string()), "{text:?}: {err}");
    }
}

#[test]
fn a_reload_may_raise_security_but_never_lower_it() {
    let tmp = temp_dir("lowering");
    let dir = tmp.path();
    self_signed(dir);
    let hash = bcrypt::hash("secret", 4).unwrap();
    let tls = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";
    let mtls = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: \
        RequireAndVerifyClientCert\n  client_ca_file: server.crt\n";
    let optional = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: \
        VerifyClientCertIfGiven\n  client_ca_file: server.crt\n";
    let users = format!("basic_auth_users:\n  prometheus: '{hash}'\n");
    let tls13 = format!("{tls}  min_version: TLS13\n");
    let config = |name: &str, text: &str| load(Some(&write(dir, name, text))).unwrap();
    let plain = WebConfig::default();
    let cases: [(&str, WebConfig, WebConfig, Option<&str>); 12] = [
        ("TLS 1.3 to 1.2", config("a.yml", &tls13), config("b.yml", tls), Some("from TLS13 to TLS12")),
        ("TLS 1.2 to 1.3", config("a.yml", tls), config("b.yml", &tls13), None),
        ("TLS 1.3 stays", config("a.yml", &tls13), config("b.yml", &format!("{tls13}{users}")), None),
        ("TLS off", config("a.yml", tls), config("b.yml", ""), Some("b.yml: tls_server_config: a reload cannot")),
        (
            "cert_file blanked",
            config("a.yml", tls),
            config("b.yml", "tls_server_config:\n  cert_file: ''\n  key_file: ''\n"),
            Some("tls_server_config:"),
        ),
        ("file dropped", config("a.yml", tls), WebConfig::default(), Some("a.yml: tls_server_config")),
        ("mTLS off", config("a.yml", mtls), config("b.yml", tls), Some("tls_server_config.client_auth_type")),
        ("mTLS optional", config("a.yml", mtls), config("b.yml", optional), Some("client_auth_type")),
        ("auth off", config("a.yml", &users), config("b.yml", "# emptied\n"), Some("basic_auth_users")),
        ("TLS on", WebConfig::default(), config("b.yml", tls), None),
        ("mTLS on, auth on", config("a.yml", tls), config("b.yml", &format!("{mtls}{users}")), None),
        ("plain stays plain", plain, WebConfig::default(), None),
    ];
    for (what, running, new, refused) in cases {
        match (refuse_lowering(&running, &new), refused) {
            (Ok(()), None) => {}
            (Err(err), Some(expected)) => {
                let err = err.to_string();
                assert!(err.contains(expected) && err.contains("restart"), "{what}: {err}");
            }
            (outcome, _) => panic!("{what}: {outcome:?}"),
        }
    }
}

#[test]
fn client_verification_and_cipher_choices() {
    let tmp = temp_dir("mtls");
    let dir = tmp.path();
    self_signed(dir);
    let path = write(
        dir,
        "web.yml",
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: \
            VerifyClientCertIfGiven\n  client_ca_file: server.crt\n  cipher_suites: \
            [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]\n  prefer_server_cipher_suites: false\n",
    );
    let config = load(Some(&path)).unwrap();
    assert_eq!(config.client_auth, ClientAuth::VerifyIfGiven);
    assert!(!config.tls.as_ref().unwrap().ignore_client_order);
    assert_eq!(config.sources.len(), 4, "web config, cert, key and client CA are all watched");
}

#[test]
fn the_packaged_example_is_valid() {
    let tmp = temp_dir("example");
    let dir = tmp.path();
    self_signed(dir);
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../packaging/web-config.example.yml");
    let example = std::fs::read_to_string(path).unwrap();
    let config = load(Some(&write(dir, "web-config.yml", &example))).unwrap();
    assert!(config.tls.is_some());
    assert_eq!(config.headers.len(), 2);
}

#[test]
fn bcrypt_shapes() {
    assert!(check_bcrypt_shape("$2y$10$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG").is_ok());
    assert!(check_bcrypt_shape("$2b$04$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG").is_ok());
    assert!(check_bcrypt_shape("$2y$3$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG").is_err());
    assert!(check_bcrypt_shape("$2y$14$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG").is_ok());
    for (cost, time) in [("15", "about 2 s"), ("20", "about 72 s"), ("24", "19 minutes"), ("31", "41 hours")] {
        let err = check_bcrypt_shape(&format!("$2y${cost}$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG"))
            .unwrap_err();
        assert!(err.contains(&format!("cost {cost} is above 14")) && err.contains(time), "{err}");
        assert!(err.contains("htpasswd -nBC 10"), "{err}");
    }
    assert!(check_bcrypt_shape("$1$10$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG").is_err());
    assert!(check_bcrypt_shape("$2y$10$short").is_err());
    assert!(check_bcrypt_shape("").is_err());
}

/// An unknown user is checked against a decoy of the users' own cost: a decoy of a fixed cost
/// would let a wrong user name answer faster or slower than a wrong password.
#[test]
fn unknown_and_known_users_cost_the_same() {
    let auth = BasicAuth::new(BTreeMap::from([("prometheus".to_owned(), bcrypt::hash("right", 8).unwrap())]));
    assert_eq!(bcrypt::verify("anything", &auth.decoy).ok(), Some(false), "the decoy is a hash bcrypt checks");
    assert_eq!(&auth.decoy[..7], "$2b$08$", "the decoy has the users' cost");
    // Timed too, interleaved and the fastest of five each, so that a loaded machine (tests
    // run in parallel) slows both alike; the bug this catches made a factor of four.
    let (mut known, mut unknown) = (std::time::Duration::MAX, std::time::Duration::MAX);
    for attempt in 0..5 {
        for (user, fastest) in [("prometheus", &mut known), ("nobody", &mut unknown)] {
            let started = std::time::Instant::now();
            assert!(!auth.verify(user, &format!("wrong-{attempt}")));
            *fastest = (*fastest).min(started.elapsed());
        }
    }
    let ratio = unknown.as_secs_f64() / known.as_secs_f64();
    assert!((0.5..2.0).contains(&ratio), "unknown user {unknown:?}, known user {known:?}");
}

/// bcrypt reads 72 bytes of a password: anything appended to a 72-byte password matched.
#[test]
fn passwords_longer_than_bcrypt_reads_are_refused_without_bcrypt() {
    let password = "p".repeat(MAX_PASSWORD_BYTES);
    let auth = BasicAuth::new(BTreeMap::from([("prometheus".to_owned(), bcrypt::hash(&password, 4).unwrap())]));
    assert!(bcrypt::verify(format!("{password}-and-more"), &auth.users["prometheus"]).unwrap(), "the weakness");
    assert!(auth.verify("prometheus", &password));
    let longer = format!("{password}-and-more");
    assert_eq!(auth.cached("prometheus", &longer), Some(false), "refused before bcrypt");
    assert!(!auth.verify("prometheus", &longer));
}

/// A flood of distinct wrong passwords must not clear the one cache, verified credentials with
/// it, or the scraper would pay bcrypt again in the middle of the flood.
#[test]
fn a_flood_of_wrong_passwords_keeps_verified_credentials() {
    let auth = BasicAuth::new(BTreeMap::from([("prometheus".to_owned(), bcrypt::hash("right", 4).unwrap())]));
    assert!(auth.verify("prometheus", "right"));
    for wrong in 0..AUTH_CACHE_ENTRIES * 2 {
        auth.remember(BasicAuth::cache_key("prometheus", &format!("wrong-{wrong}"), "h"), false);
    }
    assert_eq!(auth.cached("prometheus", "right"), Some(true));
}

/// A wrong password sent again is answered from memory for a name that does not exist as
/// for one that does: before, only known users' failures were remembered, so a second
/// fast 401 told which names exist.
#[test]
fn repeated_wrong_passwords_are_remembered_for_unknown_users_too() {
    let auth = BasicAuth::new(BTreeMap::from([("prometheus".to_owned(), bcrypt::hash("right", 4).unwrap())]));
    for user in ["prometheus", "nobody"] {
        assert_eq!(auth.cached(user, "wrong"), None, "{user}");
        assert!(!auth.verify(user, "wrong"));
        assert_eq!(auth.cached(user, "wrong"), Some(false), "{user}");
    }
    assert!(!auth.verified_before("nobody", "wrong"));
}

/// Verified credentials pass from memory however long ago bcrypt verified them, until the users
/// change (an expiry sent a known scraper back into the bcrypt queue, where an attack held every
/// place); only right ones are known as verified; the digests are keyed, not a plain SHA-256 of
/// what was sent.
#[test]
fn verified_credentials_do_not_expire_and_are_keyed() {
    let hash = bcrypt::hash("right", 4).unwrap();
    let auth = BasicAuth::new(BTreeMap::from([("prometheus".to_owned(), hash.clone())]));
    assert!(!auth.verified_before("prometheus", "right"));
    assert!(auth.verify("prometheus", "right"));
    assert_eq!(auth.cached("prometheus", "right"), Some(true));
    let key = BasicAuth::cache_key("prometheus", "right", &hash);
    let mut plain = ring::digest::Context::new(&ring::digest::SHA256);
    for part in ["prometheus", "right", hash.as_str()] {
        plain.update(&(part.len() as u64).to_le_bytes());
        plain.update(part.as_bytes());
    }
    assert_ne!(&key[..], plain.finish().as_ref(), "an unkeyed digest can be tested against guesses");
    // As long ago as this machine's monotonic clock allows (it starts near boot).
    let long_ago = [86_400 * 30, 86_400, 3_600, 601, 60, 1]
        .into_iter()
        .find_map(|s| Instant::now().checked_sub(std::time::Duration::from_secs(s)))
        .unwrap();
    auth.verified.lock().unwrap().insert(key, long_ago);
    assert_eq!(auth.cached("prometheus", "right"), Some(true), "no expiry");
    assert!(auth.verified_before("prometheus", "right"));
    assert!(!auth.verified_before("prometheus", "wrong"));
    assert!(auth.verify("prometheus", "right"));
    assert_eq!(auth.cached("prometheus", "right"), Some(true));
}

/// A reload keeps what was remembered when the users and hashes are the same, and drops it
/// all when they changed.
#[test]
fn a_reload_keeps_remembered_credentials_only_for_the_same_users() {
    let hash = bcrypt::hash("right", 4).unwrap();
    let users = BTreeMap::from([("prometheus".to_owned(), hash.clone())]);
    let old = BasicAuth::new(users.clone());
    assert!(old.verify("prometheus", "right"));
    assert!(!old.verify("prometheus", "wrong"));
    let same = BasicAuth::new(users);
    same.carry_over(&old);
    assert_eq!(same.cached("prometheus", "right"), Some(true));
    assert_eq!(same.cached("prometheus", "wrong"), Some(false));
    let changed =
        BasicAuth::new(BTreeMap::from([("prometheus".to_owned(), hash), ("alice".to_owned(), "h".to_owned())]));
    changed.carry_over(&old);
    assert_eq!(changed.cached("prometheus", "right"), None);
    assert_eq!(changed.cached("prometheus", "wrong"), None);
    assert!(!changed.verified_before("prometheus", "right"));
}

#[test]
fn basic_authorization_headers() {
    assert_eq!(parse_basic_authorization(b"Basic dXNlcjpwYXNz"), Some(("user".into(), "pass".into())));
    assert_eq!(parse_basic_authorization(b"basic dXNlcjpwYTpzcw=="), Some(("user".into(), "pa:ss".into())));
    assert_eq!(parse_basic_authorization(b"Basic dTo="), Some(("u".into(), "".into())));
    assert_eq!(parse_basic_authorization(b"Bearer dXNlcjpwYXNz"), None);
    assert_eq!(parse_basic_authorization(b"Basic dXNlcg=="), None, "no colon");
    assert_eq!(parse_basic_authorization(b"Basic ***"), None);
    assert_eq!(parse_basic_authorization(b"Basic dX=lcjpwYXNz"), None, "padding in the middle");
    assert_eq!(parse_basic_authorization(b"Basic"), None);
    assert_eq!(base64_decode("").unwrap(), b"");
    assert_eq!(base64_decode("Zm9vYmFy").unwrap(), b"foobar");
    assert_eq!(base64_decode("Zm9vYg==").unwrap(), b"foob");
}
