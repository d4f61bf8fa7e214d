//! The web configuration file (`--web.config.file`): TLS, client certificates, basic
//! authentication and security headers, in the format of the Prometheus exporter-toolkit, so a
//! fleet can hand the same file to node_exporter and to this exporter.
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt          # relative paths are relative to this file
//!   key_file: server.key
//!   min_version: TLS12             # TLS12 (default) or TLS13
//!   client_auth_type: RequireAndVerifyClientCert
//!   client_ca_file: clients-ca.crt
//! http_server_config:
//!   headers:
//!     Strict-Transport-Security: max-age=31536000
//! basic_auth_users:
//!   prometheus: $2y$10$...         # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':\n')
//! ```
//!
//! The whole file is validated when it is loaded (certificates and keys are read and matched,
//! hashes are checked for shape), so a reload either swaps in a working configuration or keeps
//! the old one. Differences from the Go implementation, each refused with an error rather than
//! silently weakened: TLS 1.0 and 1.1 do not exist in rustls (a `min_version` below TLS12 means
//! TLS12); `RequestClientCert` and `RequireAnyClientCert` (certificates nobody verifies),
//! `client_allowed_sans`, `rate_limit` and the curve `CurveP521` are not supported. HTTP/2 is
//! not served (a client with prior knowledge gets GOAWAY `HTTP_1_1_REQUIRED`, TLS offers only
//! `http/1.1`); `http2` is accepted and ignored.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Instant;

use hyper::header::{HeaderName, HeaderValue};
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedCipherSuite, SupportedProtocolVersion};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;
use thiserror::Error;

use memlock_kernel::quote::{bounded, shown};

/// A problem with the web configuration: the file, and the key (`tls_server_config.cert_file`)
/// when one is to blame.
#[derive(Debug, Error)]
#[error(
    "web config file {}: {}{sep}{}",
    path.display(),
    bounded(.key),
    bounded(.message),
    sep = if key.is_empty() { "" } else { ": " }
)]
pub struct WebConfigError {
    pub path: PathBuf,
    pub key: String,
    pub message: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWebConfig {
    #[serde(default)]
    tls_server_config: Option<RawTls>,
    #[serde(default)]
    http_server_config: Option<RawHttp>,
    #[serde(default)]
    basic_auth_users: Option<BTreeMap<String, String>>,
    #[serde(default)]
    rate_limit: Option<yaml_serde::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    #[serde(default)]
    cert: String,
    #[serde(default)]
    key: String,
    #[serde(default)]
    client_ca: String,
    #[serde(default)]
    cert_file: String,
    #[serde(default)]
    key_file: String,
    #[serde(default)]
    client_auth_type: String,
    #[serde(default)]
    client_ca_file: String,
    #[serde(default)]
    client_allowed_sans: Option<Vec<String>>,
    #[serde(default)]
    cipher_suites: Vec<String>,
    #[serde(default)]
    curve_preferences: Vec<String>,
    #[serde(default)]
    min_version: Option<String>,
    #[serde(default)]
    max_version: Option<String>,
    #[serde(default)]
    prefer_server_cipher_suites: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    #[serde(default)]
    http2: Option<bool>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

/// The validated web configuration. The default (no file) serves plain HTTP to anyone.
#[derive(Default)]
pub struct WebConfig {
    /// The file it came from.
    pub file: Option<PathBuf>,
    pub tls: Option<Arc<ServerConfig>>,
    /// Whether TLS clients must present a certificate signed by the client CA.
    pub(crate) client_auth: ClientAuth,
    /// The oldest TLS version offered: 12 or 13 (TLS 1.2, 1.3); 0 without TLS.
    pub(crate) min_tls: u8,
    pub users: Option<BasicAuth>,
    /// Added to every response.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Every file this configuration was read from (the file itself, certificates, keys, CAs),
    /// so a change to any of them can trigger a reload.
    pub sources: Vec<PathBuf>,
}

/// Ordered weakest first, so that a reload can tell a relaxation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum ClientAuth {
    #[default]
    None,
    VerifyIfGiven,
    Required,
}

impl fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebConfig")
            .field("file", &self.file)
            .field("tls", &self.tls.is_some())
            .field("client_auth", &self.client_auth)
            .field("users", &self.users.as_ref().map(BasicAuth::len))
            .field("headers", &self.headers)
            .finish()
    }
}

impl WebConfig {
    /// A one-line description for the startup log (never any secret).
    pub fn summary(&self) -> String {
        format!(
            "tls={} client_auth={:?} basic_auth_users={}",
            self.tls.is_some(),
            self.client_auth,
            self.users.as_ref().map_or(0, BasicAuth::len)
        )
    }
}

/// Reads and validates a web configuration file; `None` is the default (no TLS, no auth).
pub fn load(path: Option<&Path>) -> Result<WebConfig, WebConfigError> {
    let Some(path) = path else { return Ok(WebConfig::default()) };
    let fail = |key: &str, message: String| WebConfigError { path: path.to_owned(), key: key.to_owned(), message };
    let text = read_bounded(path, MAX_WEB_CONFIG_BYTES).map_err(|m| fail("", m))?;
    check_flow_nesting(&text).map_err(|m| fail("", m))?;
    // An empty file (or one holding only comments) is a valid, empty configuration.
    let raw: RawWebConfig =
        yaml_serde::from_str::<Option<RawWebConfig>>(&text).map_err(|e| fail("", e.to_string()))?.unwrap_or_default();
    let dir = path.parent().map(Path::to_owned).unwrap_or_default();
    let mut config = WebConfig { file: Some(path.to_owned()), sources: vec![path.to_owned()], ..WebConfig::default() };

    if raw.rate_limit.is_some() {
        return Err(fail("rate_limit", "is not supported; use --web.max-requests to bound concurrent requests".into()));
    }
    if let Some(users) = raw.basic_auth_users {
        for (user, hash) in &users {
            if user.contains(':') {
                return Err(fail(
                    &format!("basic_auth_users.{user}"),
                    "a user name cannot contain ':' (basic auth separates it from the password)".into(),
                ));
            }
            check_bcrypt_shape(hash).map_err(|m| fail(&format!("basic_auth_users.{user}"), m))?;
        }
        if !users.is_empty() {
            config.users = Some(BasicAuth::new(users));
        }
    }
    if let Some(http) = raw.http_server_config {
        let _ = http.http2;
        config.headers = security_headers(&http.headers)
            .map_err(|(key, m)| fail(&format!("http_server_config.headers.{key}"), m))?;
    }
    if let Some(tls) = raw.tls_server_config {
        if tls_enabled(&tls) {
            let (server, client_auth, files) =
                tls_config(&tls, &dir).map_err(|(key, m)| fail(&format!("tls_server_config.{key}"), m))?;
            config.tls = Some(Arc::new(server));
            config.client_auth = client_auth;
            config.min_tls = protocol_versions(&tls).map_or(12, |(_, min)| min);
            config.sources.extend(files);
        }
    }
    Ok(config)
}

/// Refuses a reload that would lower security: TLS to plain HTTP, `min_version` from TLS 1.3 to
/// 1.2, basic auth to none, or client certificates from required to optional or ignored. A
/// file emptied, truncated or with its `cert_file` blanked by a bad deploy must not open the
/// port; lowering security on purpose takes a restart. The error names the file and the setting.
pub fn refuse_lowering(running: &WebConfig, new: &WebConfig) -> Result<(), WebConfigError> {
    let refuse = |key: &str, what: &str| {
        let path = new.file.clone().or_else(|| running.file.clone()).unwrap_or_default();
        Err(WebConfigError {
            path,
            key: key.to_owned(),
            message: format!("a reload cannot {what}; restart the exporter to lower security"),
        })
    };
    if running.tls.is_some() && new.tls.is_none() {
        return refuse("tls_server_config", "turn TLS off (the port would serve plain HTTP)");
    }
    if new.tls.is_some() && new.min_tls < running.min_tls {
        let what = format!("lower min_version from TLS{} to TLS{}", running.min_tls, new.min_tls);
        return refuse("tls_server_config.min_version", &what);
    }
    if new.client_auth < running.client_auth {
        let what = format!("relax client certificates from {:?} to {:?}", running.client_auth, new.client_auth);
        return refuse("tls_server_config.client_auth_type", &what);
    }
    if running.users.is_some() && new.users.is_none() {
        return refuse("basic_auth_users", "turn basic auth off (anyone could scrape)");
    }
    Ok(())
}

/// The most flow collections (`[...]`, `{...}`) a web configuration may open. A real one opens
/// a few (`cipher_suites: [...]`); this is far more than any needs.
const MAX_FLOW_COLLECTIONS: usize = 32;

/// The largest web configuration file: a real one is a few KiB, inline certificates and keys
/// included (a CA bundle inline still fits). With [`MAX_FLOW_COLLECTIONS`] this bounds the
/// parse: the worst file the two let through parses in tens of milliseconds
/// (benches/web_config_load.rs, docs/reliability.md). Certificates and keys read from their own
/// files keep the reader's bound ([`memlock_kernel::fsroot::MAX_FILE_BYTES`]).
const MAX_WEB_CONFIG_BYTES: u64 = 256 << 10;

/// Refuses, before parsing, text that could nest flow collections deeper than
/// [`MAX_FLOW_COLLECTIONS`]. libyaml's scanner walks its stack of possible simple keys, one per
/// open flow collection, on every token (`yaml_parser_stale_simple_keys`, called from
/// `yaml_parser_fetch_more_tokens` and `yaml_parser_fetch_next_token` in libyaml-rs 0.3's
/// scanner.rs), and yaml_serde scans the whole document before its recursion limit (128)
/// applies: parsing is quadratic in the nesting. Every `[` and
/// `{` is counted, quoted or not: a count cannot be fooled by a quote the scanner would read
/// differently, and it bounds the depth. Block nesting costs no such walk (its cost grows with
/// the indentation, bounded by the file size).
fn check_flow_nesting(text: &str) -> Result<(), String> {
    let opened = text.bytes().filter(|&b| b == b'[' || b == b'{').count();
    if opened > MAX_FLOW_COLLECTIONS {
        return Err(format!(
            "{opened} '[' and '{{' in the file, more than the {MAX_FLOW_COLLECTIONS} a web configuration may \
                have (deeply nested YAML is refused unparsed)"
        ));
    }
    Ok(())
}

/// Web configuration files, certificates and keys are small; the reader does not block on a
/// FIFO in place of a watched file (a reload runs on the daemon's event loop).
fn read_bounded(path: &Path, limit: u64) -> Result<String, String> {
    memlock_kernel::fsroot::read_regular_text(path, limit).map_err(|e| e.to_string())
}

fn tls_enabled(tls: &RawTls) -> bool {
    [&tls.cert, &tls.key, &tls.cert_file, &tls.key_file, &tls.client_ca, &tls.client_ca_file, &tls.client_auth_type]
        .iter()
        .any(|s| !s.is_empty())
}

type KeyedError = (&'static str, String);

/// Reads PEM from a file (relative to the web config's directory) or from the inline value.
fn pem_source(dir: &Path, file: &str, inline: &str, files: &mut Vec<PathBuf>) -> Result<Option<Vec<u8>>, String> {
    if !file.is_empty() {
        let path = dir.join(file);
        let text = read_bounded(&path, memlock_kernel::fsroot::MAX_FILE_BYTES)?;
        files.push(path);
        Ok(Some(text.into_bytes()))
    } else if !inline.is_empty() {
        Ok(Some(inline.as_bytes().to_vec()))
    } else {
        Ok(None)
    }
}

fn tls_config(tls: &RawTls, dir: &Path) -> Result<(ServerConfig, ClientAuth, Vec<PathBuf>), KeyedError> {
    let mut files = Vec::new();
    if !tls.cert.is_empty() && !tls.cert_file.is_empty() {
        return Err(("cert", "set either cert or cert_file, not both".into()));
    }
    if !tls.key.is_empty() && !tls.key_file.is_empty() {
        return Err(("key", "set either key or key_file, not both".into()));
    }
    let cert_pem = pem_source(dir, &tls.cert_file, &tls.cert, &mut files)
        .map_err(|m| ("cert_file", m))?
        .ok_or(("cert_file", "missing one of cert or cert_file".to_owned()))?;
    let key_pem = pem_source(dir, &tls.key_file, &tls.key, &mut files)
        .map_err(|m| ("key_file", m))?
        .ok_or(("key_file", "missing one of key or key_file".to_owned()))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| ("cert_file", format!("not a PEM certificate: {e}")))?;
    if chain.is_empty() {
        return Err(("cert_file", "holds no certificate".into()));
    }
    let key =
        PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| ("key_file", format!("not a PEM private key: {e}")))?;

    let (versions, _) = protocol_versions(tls)?;
    let mut provider = rustls::crypto::ring::default_provider();
    restrict_cipher_suites(&mut provider, &tls.cipher_suites).map_err(|m| ("cipher_suites", m))?;
    restrict_curves(&mut provider, &tls.curve_preferences).map_err(|m| ("curve_preferences", m))?;
    let provider = Arc::new(provider);

    if !tls.client_ca.is_empty() && !tls.client_ca_file.is_empty() {
        return Err(("client_ca", "set either client_ca or client_ca_file, not both".into()));
    }
    let client_ca =
        pem_source(dir, &tls.client_ca_file, &tls.client_ca, &mut files).map_err(|m| ("client_ca_file", m))?;
    let client_auth = match tls.client_auth_type.as_str() {
        "" | "NoClientCert" => ClientAuth::None,
        "VerifyClientCertIfGiven" => ClientAuth::VerifyIfGiven,
        "RequireAndVerifyClientCert" => ClientAuth::Required,
        "RequestClientCert" | "RequireAnyClientCert" | "RequireClientCert" => {
            return Err((
                "client_auth_type",
                format!(
                    "{} accepts certificates that nobody verifies and is not supported; use RequireAndVerifyClientCert",
                    shown(&tls.client_auth_type)
                ),
            ))
        }
        other => {
            return Err((
                "client_auth_type",
                format!(
                    "{} is not one of NoClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert",
                    shown(other)
                ),
            ))
        }
    };
    if tls.client_allowed_sans.is_some() {
        return Err((
            "client_allowed_sans",
            "is not supported; sign client certificates with a dedicated client CA instead".into(),
        ));
    }

    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| ("min_version", e.to_string()))?;
    let builder = match (client_auth, client_ca) {
        (ClientAuth::None, Some(_)) => {
            return Err((
                "client_ca_file",
                "a client CA is set but client_auth_type is NoClientCert; set it to RequireAndVerifyClientCert".into(),
            ))
        }
        (ClientAuth::None, None) => builder.with_no_client_auth(),
        (_, None) => {
            return Err((
                "client_ca_file",
                format!("client_auth_type {} needs client_ca_file (or client_ca)", tls.client_auth_type),
            ))
        }
        (auth, Some(pem)) => {
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| ("client_ca_file", format!("not a PEM certificate: {e}")))?;
                roots.add(cert).map_err(|e| ("client_ca_file", format!("not a usable CA certificate: {e}")))?;
            }
            if roots.is_empty() {
                return Err(("client_ca_file", "holds no certificate".into()));
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if auth == ClientAuth::VerifyIfGiven { verifier.allow_unauthenticated() } else { verifier };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| ("client_ca_file", e.to_string()))?)
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| ("key_file", format!("does not match the certificate or is unusable: {e}")))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.ignore_client_order = tls.prefer_server_cipher_suites.unwrap_or(true);
    Ok((config, client_auth, files))
}

/// The versions offered, and the oldest of them (12 or 13).
fn protocol_versions(tls: &RawTls) -> Result<(Vec<&'static SupportedProtocolVersion>, u8), KeyedError> {
    // Ordered oldest first; TLS 1.0 and 1.1 are below everything rustls offers.
    let rank = |key: &'static str, value: &Option<String>, default: u8| -> Result<u8, KeyedError> {
        match value.as_deref() {
            None | Some("") => Ok(default),
            Some("TLS10") => Ok(10),
            Some("TLS11") => Ok(11),
            Some("TLS12") => Ok(12),
            Some("TLS13") => Ok(13),
            Some(other) => Err((key, format!("{} is not one of TLS10, TLS11, TLS12, TLS13", shown(other)))),
        }
    };
    let min = rank("min_version", &tls.min_version, 12)?;
    let max = rank("max_version", &tls.max_version, 13)?;
    if max < 12 {
        return Err(("max_version", "TLS 1.0 and 1.1 are not offered (rustls implements TLS 1.2 and 1.3 only)".into()));
    }
    if min > max {
        return Err(("min_version", "is above max_version".into()));
    }
    let mut versions = Vec::new();
    if min <= 12 {
        versions.push(&rustls::version::TLS12);
    }
    if max >= 13 {
        versions.push(&rustls::version::TLS13);
    }
    Ok((versions, min.max(12)))
}

/// Keeps the TLS 1.2 suites named (IANA names, as Go spells them), in the order given; TLS 1.3
/// suites are not configurable, as in Go.
fn restrict_cipher_suites(provider: &mut CryptoProvider, names: &[String]) -> Result<(), String> {
    if names.is_empty() {
        return Ok(());
    }
    let name_of = |suite: &SupportedCipherSuite| format!("{:?}", suite.suite());
    let mut chosen: Vec<SupportedCipherSuite> = Vec::new();
    for name in names {
        match provider.cipher_suites.iter().find(|s| &name_of(s) == name).copied() {
            Some(suite @ SupportedCipherSuite::Tls12(_)) => chosen.push(suite),
            Some(SupportedCipherSuite::Tls13(_)) => {}
            None => {
                let known: Vec<String> = provider.cipher_suites.iter().map(name_of).collect();
                return Err(format!("{} is not available; known: {}", shown(name), known.join(", ")));
            }
        }
    }
    let tls13 = provider.cipher_suites.iter().filter(|s| matches!(s, SupportedCipherSuite::Tls13(_))).copied();
    chosen.extend(tls13);
    provider.cipher_suites = chosen;
    Ok(())
}

fn restrict_curves(provider: &mut CryptoProvider, names: &[String]) -> Result<(), String> {
    if names.is_empty() {
        return Ok(());
    }
    let mut chosen = Vec::new();
    for name in names {
        let group = match name.as_str() {
            "X25519" => rustls::NamedGroup::X25519,
            "CurveP256" => rustls::NamedGroup::secp256r1,
            "CurveP384" => rustls::NamedGroup::secp384r1,
            "CurveP521" => return Err("CurveP521 is not available with the ring provider".into()),
            other => return Err(format!("{} is not one of X25519, CurveP256, CurveP384", shown(other))),
        };
        if let Some(kx) = provider.kx_groups.iter().find(|k| k.name() == group) {
            chosen.push(*kx);
        }
    }
    provider.kx_groups = chosen;
    Ok(())
}

fn security_headers(given: &BTreeMap<String, String>) -> Result<Vec<(HeaderName, HeaderValue)>, (String, String)> {
    const ALLOWED: [&str; 5] = [
        "Content-Security-Policy",
        "X-Frame-Options",
        "X-Content-Type-Options",
        "X-XSS-Protection",
        "Strict-Transport-Security",
    ];
    let mut out = Vec::new();
    for (name, value) in given {
        if !ALLOWED.contains(&name.as_str()) {
            return Err((name.clone(), format!("is not one of {}", ALLOWED.join(", "))));
        }
        if value.is_empty() {
            continue;
        }
        let lower = value.to_ascii_lowercase();
        if name == "X-Frame-Options" && lower != "deny" && lower != "sameorigin" {
            return Err((name.clone(), format!("{} is not one of deny, sameorigin", shown(value))));
        }
        if name == "X-Content-Type-Options" && lower != "nosniff" {
            return Err((name.clone(), format!("{} is not nosniff", shown(value))));
        }
        let header_name = HeaderName::from_bytes(name.as_bytes()).map_err(|e| (name.clone(), e.to_string()))?;
        let header_value =
            HeaderValue::from_str(value).map_err(|e| (name.clone(), format!("{}: {e}", shown(value))))?;
        out.push((header_name, header_value));
    }
    Ok(out)
}

/// The highest bcrypt cost accepted. Every check of a wrong password costs `2^cost` rounds of
/// bcrypt's key schedule, and anyone who reaches the port can send one: at cost 31 a single
/// request keeps a core busy for hours. What exporter-toolkit users use is far
/// below: its documentation makes hashes with `htpasswd -nBC 10` (about 70 ms a check, it says;
/// "a cost of 18 can take up to a few seconds"), htpasswd's own default is 5 and Python's
/// `bcrypt.gensalt()`, which the Prometheus basic-auth guide uses, makes 12. 14 leaves room
/// above those at 16 times cost 10's time.
pub(crate) const MAX_BCRYPT_COST: u32 = 14;

/// `$2a$`, `$2b$`, `$2x$` or `$2y$`, a two-digit cost from 4 to [`MAX_BCRYPT_COST`], and 53
/// characters of bcrypt's base64 (22 of salt, 31 of hash).
fn check_bcrypt_shape(hash: &str) -> Result<(), String> {
    let bad =
        || "is not a bcrypt hash (expected $2y$10$ followed by 53 characters, as made by htpasswd -nBC 10)".to_owned();
    let parts: Vec<&str> = hash.split('$').collect();
    let [empty, version, cost, rest] = parts.as_slice() else { return Err(bad()) };
    if !empty.is_empty() || !matches!(*version, "2a" | "2b" | "2x" | "2y") {
        return Err(bad());
    }
    let cost: u32 = cost.parse().map_err(|_| bad())?;
    if !(4..=31).contains(&cost) {
        return Err(format!("bcrypt cost {cost} is outside 4..=31"));
    }
    if cost > MAX_BCRYPT_COST {
        return Err(format!(
            "bcrypt cost {cost} is above {MAX_BCRYPT_COST}, the most this exporter accepts: every wrong password \
                sent to the port costs 2^{cost} rounds of bcrypt (cost {cost}: {}), which anyone who can connect could \
                keep a core busy with; exporter-toolkit's documentation uses cost 10 (htpasswd -nBC 10)",
            bcrypt_time(cost)
        ));
    }
    if rest.len() != 53 || !rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'/') {
        return Err(bad());
    }
    Ok(())
}

/// A rough time of one bcrypt check at `cost`, from exporter-toolkit's figure of about 70 ms at
/// cost 10 (each step doubles it), for the error message.
fn bcrypt_time(cost: u32) -> String {
    let seconds = 0.07 * f64::from(1u32 << cost.saturating_sub(10).min(30));
    match seconds {
        s if s < 120.0 => format!("about {s:.0} s of a core per request"),
        s if s < 7200.0 => format!("about {:.0} minutes of a core per request", s / 60.0),
        s => format!("about {:.0} hours of a core per request", s / 3600.0),
    }
}

/// bcrypt reads at most 72 bytes of a password: a longer one would match on its first 72
/// alone, whatever follows (the `bcrypt` crate's `verify` truncates; `non_truncating_verify`
/// refuses even 72).
pub(crate) const MAX_PASSWORD_BYTES: usize = 72;

/// Users and their bcrypt hashes. Verifying a bcrypt hash costs tens of milliseconds of CPU by
/// design, so outcomes are remembered, keyed by an HMAC-SHA256 of user, password and hash under
/// a key drawn at random when the process starts ([`credential_key`]): the password is never
/// stored, and the digest cannot be tested against guesses by whoever reads memory or a core
/// dump without that key too (a plain SHA-256 could, at a billion guesses a second). A changed
/// hash is a different key. Failures are remembered apart from successes, so a flood of wrong
/// passwords can never push out a scraper's verified one; unknown users' failures are
/// remembered as known users' are (keyed with the decoy), so that a repeated guess is answered
/// as fast for a name that does not exist as for one that does.
pub struct BasicAuth {
    users: BTreeMap<String, String>,
    /// Right credentials and when bcrypt last said so. They pass without a check until the
    /// users change (a reload that changes them starts a new `BasicAuth`, see [`Self::carry_over`]):
    /// an expiry sent a known scraper back into the bcrypt queue, where an attack could keep it.
    verified: Mutex<HashMap<[u8; 32], Instant>>,
    refused: Mutex<Refused>,
    /// Checked for user names that do not exist, at the cost of the real hashes.
    decoy: String,
}

/// Remembered wrong credentials, the oldest forgotten first.
#[derive(Default)]
struct Refused {
    keys: HashSet<[u8; 32]>,
    order: VecDeque<[u8; 32]>,
}

/// Bounds the verified credentials. Only right passwords enter, so only a change of users or
/// passwords can fill it; when full, the one verified longest ago is forgotten.
const AUTH_CACHE_ENTRIES: usize = 1024;
/// Bounds the remembered wrong credentials (32 bytes each, twice: about 1 MiB with the tables'
/// overhead). A flood of distinct wrong passwords pushes out the oldest, nothing else: the
/// table is for the same wrong password sent again, which it answers without bcrypt.
const REFUSED_ENTRIES: usize = 16 * 1024;

/// The HMAC key of this process's credential digests, drawn once from the system's random
/// source. Should that ever fail, a key is derived from the clock, the process id and an
/// address of this process (still unknown outside it, only guessable with effort).
fn credential_key() -> &'static ring::hmac::Key {
    static KEY: OnceLock<ring::hmac::Key> = OnceLock::new();
    KEY.get_or_init(|| {
        let rng = ring::rand::SystemRandom::new();
        ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng).unwrap_or_else(|_| {
            tracing::warn!("no random key for credential digests from the system; deriving one");
            let mut seed = ring::digest::Context::new(&ring::digest::SHA256);
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            seed.update(&now.as_nanos().to_le_bytes());
            seed.update(&std::process::id().to_le_bytes());
            seed.update(&(std::ptr::addr_of!(seed) as usize).to_le_bytes());
            ring::hmac::Key::new(ring::hmac::HMAC_SHA256, seed.finish().as_ref())
        })
    })
}

impl BasicAuth {
    pub fn new(users: BTreeMap<String, String>) -> Self {
        let decoy = decoy_hash(&users);
        Self { users, verified: Mutex::default(), refused: Mutex::default(), decoy }
    }

    pub fn len(&self) -> usize {
        self.users.len()
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// Takes over what `previous` remembers when both have the same users and hashes (a reload
    /// that changed something else); otherwise nothing is taken, so a reload that changes the
    /// users file drops every remembered outcome.
    pub(crate) fn carry_over(&self, previous: &BasicAuth) {
        if std::ptr::eq(self, previous) || self.users != previous.users {
            return;
        }
        let verified = previous.verified.lock().unwrap_or_else(PoisonError::into_inner).clone();
        *self.verified.lock().unwrap_or_else(PoisonError::into_inner) = verified;
        let refused = previous.refused.lock().unwrap_or_else(PoisonError::into_inner);
        let copy = Refused { keys: refused.keys.clone(), order: refused.order.clone() };
        *self.refused.lock().unwrap_or_else(PoisonError::into_inner) = copy;
    }

    fn cache_key(user: &str, password: &str, hash: &str) -> [u8; 32] {
        let mut ctx = ring::hmac::Context::with_key(credential_key());
        for part in [user, password, hash] {
            ctx.update(&(part.len() as u64).to_le_bytes());
            ctx.update(part.as_bytes());
        }
        let mut key = [0u8; 32];
        key.copy_from_slice(ctx.sign().as_ref());
        key
    }

    /// The key for these credentials: a known user's hash, or the decoy for a name that does
    /// not exist (the same work either way).
    fn key_of(&self, user: &str, password: &str) -> [u8; 32] {
        Self::cache_key(user, password, self.users.get(user).unwrap_or(&self.decoy))
    }

    /// The remembered outcome for these credentials, if any: cheap, for the async path. A
    /// password bcrypt cannot check whole is refused here, without bcrypt.
    pub fn cached(&self, user: &str, password: &str) -> Option<bool> {
        if password.len() > MAX_PASSWORD_BYTES {
            return Some(false);
        }
        let key = self.key_of(user, password);
        let verified = self.verified.lock().unwrap_or_else(PoisonError::into_inner).get(&key).copied();
        if verified.is_some() && self.users.contains_key(user) {
            return Some(true);
        }
        self.refused.lock().unwrap_or_else(PoisonError::into_inner).keys.contains(&key).then_some(false)
    }

    /// Whether bcrypt has said these credentials are right since the users were loaded. Only
    /// right passwords can make this true.
    pub(crate) fn verified_before(&self, user: &str, password: &str) -> bool {
        let key = self.key_of(user, password);
        self.users.contains_key(user) && self.verified.lock().unwrap_or_else(PoisonError::into_inner).contains_key(&key)
    }

    /// Checks credentials; blocking (bcrypt). Unknown users cost as much as known ones (a decoy
    /// hash at the users' cost), so timing does not tell which user names exist.
    pub fn verify(&self, user: &str, password: &str) -> bool {
        if password.len() > MAX_PASSWORD_BYTES {
            return false;
        }
        if let Some(known) = self.cached(user, password) {
            return known;
        }
        let ok = match self.users.get(user) {
            Some(hash) => bcrypt::verify(password, hash).unwrap_or(false),
            None => {
                let _ = bcrypt::verify(password, &self.decoy);
                false
            }
        };
        self.remember(self.key_of(user, password), ok);
        ok
    }

    fn remember(&self, key: [u8; 32], ok: bool) {
        if ok {
            let mut verified = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
            if verified.len() >= AUTH_CACHE_ENTRIES && !verified.contains_key(&key) {
                if let Some(oldest) = verified.iter().min_by_key(|(_, at)| **at).map(|(k, _)| *k) {
                    verified.remove(&oldest);
                }
            }
            verified.insert(key, Instant::now());
            return;
        }
        let mut refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        if !refused.keys.insert(key) {
            return;
        }
        refused.order.push_back(key);
        while refused.order.len() > REFUSED_ENTRIES {
            if let Some(oldest) = refused.order.pop_front() {
                refused.keys.remove(&oldest);
            }
        }
    }
}

/// A well-formed hash that no password is known to match, at the cost most users' hashes have
/// (the highest of those when tied): verifying against it costs what verifying a real user does.
/// Its salt and digest are those of a hash made once with a random password; only the cost
/// decides the time bcrypt takes (`2^cost` rounds of its key schedule).
fn decoy_hash(users: &BTreeMap<String, String>) -> String {
    let mut costs: BTreeMap<u32, usize> = BTreeMap::new();
    for hash in users.values() {
        if let Some(cost) = hash.get(4..6).and_then(|c| c.parse().ok()) {
            *costs.entry(cost).or_default() += 1;
        }
    }
    let cost = costs.iter().max_by_key(|(cost, count)| (**count, **cost)).map_or(10, |(cost, _)| *cost);
    format!("$2b${cost:02}$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG")
}

/// Splits an `Authorization: Basic ...` header value into user and password.
pub fn parse_basic_authorization(value: &[u8]) -> Option<(String, String)> {
    let text = std::str::from_utf8(value).ok()?.trim();
    let (scheme, encoded) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64_decode(encoded.trim())?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

/// Standard base64 with padding (RFC 4648 section 4), as basic auth uses; `None` on anything else.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

#[cfg(test)]
mod tests;
