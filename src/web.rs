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
use std::time::{Duration, Instant};

use hyper::header::{HeaderName, HeaderValue};
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedCipherSuite, SupportedProtocolVersion};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;
use thiserror::Error;

use crate::config::{bounded, shown};

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
    pub client_auth: ClientAuth,
    /// The oldest TLS version offered: 12 or 13 (TLS 1.2, 1.3); 0 without TLS.
    pub min_tls: u8,
    pub users: Option<BasicAuth>,
    /// Added to every response.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Every file this configuration was read from (the file itself, certificates, keys, CAs),
    /// so a change to any of them can trigger a reload.
    pub sources: Vec<PathBuf>,
}

/// Ordered weakest first, so that a reload can tell a relaxation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum ClientAuth {
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
/// 1.2 (issue 24), basic auth to none, or client certificates from required to optional or
/// ignored. A file emptied, truncated or with its
/// `cert_file` blanked by a bad deploy must not open the port (issue 15); lowering security on
/// purpose takes a restart. The error names the file and the setting.
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
/// files keep the reader's bound ([`crate::fsroot::MAX_FILE_BYTES`]).
const MAX_WEB_CONFIG_BYTES: u64 = 256 << 10;

/// Refuses, before parsing, text that could nest flow collections deeper than
/// [`MAX_FLOW_COLLECTIONS`]. libyaml's scanner walks its stack of possible simple keys, one per
/// open flow collection, on every token (`yaml_parser_stale_simple_keys`, called from
/// `yaml_parser_fetch_more_tokens` and `yaml_parser_fetch_next_token` in libyaml-rs 0.3's
/// scanner.rs), and yaml_serde scans the whole document before its recursion limit (128)
/// applies: parsing is quadratic in the nesting, 500 KB of `[` took about 80 s. Every `[` and
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
    crate::fsroot::read_regular_text(path, limit).map_err(|e| e.to_string())
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
        let text = read_bounded(&path, crate::fsroot::MAX_FILE_BYTES)?;
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
/// request keeps a core busy for hours (issue 24). What exporter-toolkit users use is far
/// below: its documentation makes hashes with `htpasswd -nBC 10` (about 70 ms a check, it says;
/// "a cost of 18 can take up to a few seconds"), htpasswd's own default is 5 and Python's
/// `bcrypt.gensalt()`, which the Prometheus basic-auth guide uses, makes 12. 14 leaves room
/// above those at 16 times cost 10's time.
pub const MAX_BCRYPT_COST: u32 = 14;

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
pub const MAX_PASSWORD_BYTES: usize = 72;

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
    /// Right credentials and when bcrypt last said so. Within [`VERIFIED_TTL`] they pass
    /// without a check; after it they are checked again, but never limited (`server::auth`).
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
/// How long a verified credential passes without bcrypt: one check per scraper per interval,
/// and a credential stays in memory, as a keyed digest, no longer than this since bcrypt
/// last confirmed it.
pub const VERIFIED_TTL: Duration = Duration::from_secs(10 * 60);

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
    pub fn carry_over(&self, previous: &BasicAuth) {
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
        if verified.is_some_and(|at| at.elapsed() < VERIFIED_TTL) && self.users.contains_key(user) {
            return Some(true);
        }
        self.refused.lock().unwrap_or_else(PoisonError::into_inner).keys.contains(&key).then_some(false)
    }

    /// Whether bcrypt has said these credentials are right since the users were loaded (also
    /// longer ago than [`VERIFIED_TTL`]). Only right passwords can make this true.
    pub fn verified_before(&self, user: &str, password: &str) -> bool {
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
    fn value(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let bytes = text.as_bytes();
    if bytes.len() % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for (index, chunk) in bytes.chunks(4).enumerate() {
        let last = index == bytes.len() / 4 - 1;
        let padding = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if padding > 2 || (padding > 0 && !last) {
            return None;
        }
        let mut group = 0u32;
        for &c in &chunk[..4 - padding] {
            group = (group << 6) | value(c)?;
        }
        group <<= 6 * padding as u32;
        let decoded = [(group >> 16) as u8, (group >> 8) as u8, group as u8];
        out.extend_from_slice(&decoded[..3 - padding]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn temp_dir(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("memlock-web-{}-{name}", std::process::id()))
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
        let dir = temp_dir("fifo");
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("web.yml");
        let _ = std::fs::remove_file(&fifo);
        let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo reads the NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let (path, directory) = (fifo.clone(), dir.clone());
        std::thread::spawn(move || {
            let _ = tx.send((
                load(Some(&path)).err().map(|e| e.to_string()),
                load(Some(&directory)).err().map(|e| e.to_string()),
            ));
        });
        let (fifo_error, dir_error) =
            rx.recv_timeout(std::time::Duration::from_secs(10)).expect("loading a FIFO blocked");
        for error in [fifo_error, dir_error] {
            let error = error.expect("refused");
            assert!(error.contains("not a regular file"), "{error}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Issue 15 item 7: 500 KB of nested `[` took about 80 s to parse (quadratic in the
    /// nesting), and a reload waited for it. Refused unparsed, at once, naming the file.
    #[test]
    fn deeply_nested_yaml_is_refused_before_parsing() {
        let dir = temp_dir("nested");
        let hostile =
            write(&dir, "web.yml", &format!("basic_auth_users: {}{}\n", "[".repeat(250_000), "]".repeat(250_000)));
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
        let nested =
            write(&dir, "nested.yml", &format!("basic_auth_users: {}{}\n", "[".repeat(50_000), "]".repeat(50_000)));
        let error = load(Some(&nested)).unwrap_err().to_string();
        assert!(error.contains("50000 '[' and '{'") && error.contains("more than the 32"), "{error}");
        // Quotes cannot hide brackets from the count: YAML and a quote-aware scan could differ.
        let quoted = write(&dir, "quoted.yml", &format!("basic_auth_users: {{\"{}\": x}}\n", "[".repeat(32)));
        assert!(load(Some(&quoted)).unwrap_err().to_string().contains("33 '['"));
        // 32 are allowed, and parsed: here into the wrong shape, which names the key.
        let deep = write(&dir, "deep.yml", &format!("basic_auth_users: {}{}\n", "[".repeat(32), "]".repeat(32)));
        let error = load(Some(&deep)).unwrap_err().to_string();
        assert!(error.contains("basic_auth_users") && !error.contains("refused unparsed"), "{error}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn no_file_and_empty_files_mean_plain_http_without_auth() {
        let config = load(None).unwrap();
        assert!(config.tls.is_none() && config.users.is_none() && config.headers.is_empty());
        let dir = temp_dir("empty");
        let config = load(Some(&write(&dir, "web.yml", "# nothing yet\n"))).unwrap();
        assert!(config.tls.is_none() && config.users.is_none());
    }

    #[test]
    fn tls_with_relative_paths_and_users() {
        let dir = temp_dir("tls");
        self_signed(&dir);
        let hash = bcrypt::hash("secret", 4).unwrap();
        let path = write(
            &dir,
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
        let dir = temp_dir("errors");
        self_signed(&dir);
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
            let path = write(&dir, "web.yml", text);
            let err = load(Some(&path)).unwrap_err().to_string();
            assert!(err.contains(expected) && err.contains(&path.display().to_string()), "{text:?}: {err}");
        }
    }

    #[test]
    fn a_reload_may_raise_security_but_never_lower_it() {
        let dir = temp_dir("lowering");
        self_signed(&dir);
        let hash = bcrypt::hash("secret", 4).unwrap();
        let tls = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";
        let mtls = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: \
            RequireAndVerifyClientCert\n  client_ca_file: server.crt\n";
        let optional = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: \
            VerifyClientCertIfGiven\n  client_ca_file: server.crt\n";
        let users = format!("basic_auth_users:\n  prometheus: '{hash}'\n");
        let tls13 = format!("{tls}  min_version: TLS13\n");
        let config = |name: &str, text: &str| load(Some(&write(&dir, name, text))).unwrap();
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
        let dir = temp_dir("mtls");
        self_signed(&dir);
        let path = write(
            &dir,
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
        let dir = temp_dir("example");
        self_signed(&dir);
        let example =
            std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("packaging/web-config.example.yml"))
                .unwrap();
        let config = load(Some(&write(&dir, "web-config.yml", &example))).unwrap();
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

    /// Issue 15: an unknown user was checked against a decoy of cost 10 whatever the users'
    /// cost, so with cost 8 hashes a wrong user name answered four times faster than a wrong
    /// password. The decoy now takes the users' cost.
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

    /// A flood of distinct wrong passwords used to clear the one cache, verified credentials
    /// with it, so the scraper paid bcrypt again in the middle of the flood.
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

    /// Verified credentials pass from memory for VERIFIED_TTL, then are checked again (and
    /// known as verified before, which only right ones can be); the digests are keyed, not a
    /// plain SHA-256 of what was sent.
    #[test]
    fn verified_credentials_expire_and_are_keyed() {
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
        let long_ago = Instant::now().checked_sub(VERIFIED_TTL + Duration::from_secs(1)).unwrap();
        auth.verified.lock().unwrap().insert(key, long_ago);
        assert_eq!(auth.cached("prometheus", "right"), None, "checked again after the TTL");
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
}
