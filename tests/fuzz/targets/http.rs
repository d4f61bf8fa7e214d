//! The HTTP crate's fuzz targets: the web configuration file and the Authorization header. They
//! use memlock-http alone, the one dependency of the cargo-fuzz crate in fuzz/http.

use super::common::{repository, scratch_file, strings, Expect, Target, Verdict};

/// In the order of docs/reliability.md's table.
pub const TARGETS: &[Target] = &[
    Target {
        name: "web_config_file",
        expect: Expect::BothPaths,
        seeds: web_config_seeds,
        check: check_web_config_file,
    },
    // "prometheus:secret" and "a:" in base64: headers arrive from any client.
    Target {
        name: "basic_authorization",
        expect: Expect::BothPaths,
        seeds: || strings(&["Basic cHJvbWV0aGV1czpzZWNyZXQ=", "basic YTo=", "Basic  cHJvbWV0aGV1czpzZWNyZXQ= "]),
        check: check_basic_authorization,
    },
];

/// Web configurations. The shipped example names certificates that do not exist here, so
/// files with `cert_file` are left out.
fn web_config_seeds() -> Vec<Vec<u8>> {
    let root = repository();
    let mut seeds = strings(&[
        "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n    Strict-Transport-Security: \
            max-age=31536000\n",
        "basic_auth_users:\n  prometheus: $2y$10$X0h1bKHBCrqPjRsAUyRHLOHRyv0GHdNjUJ8o4gYFaVqVbIRMGNY9O\n",
        "# nothing\n",
    ]);
    seeds.push(std::fs::read(root.join("packaging/web-config.example.yml")).unwrap_or_default());
    seeds.retain(|s| !s.is_empty() && !s.windows(9).any(|w| w == b"cert_file"));
    seeds
}

fn check_web_config_file(bytes: &[u8]) -> Result<Verdict, String> {
    let path = scratch_file("web_config_file");
    std::fs::write(&path, bytes).map_err(|e| e.to_string())?;
    match memlock_http::webconfig::load(Some(&path)) {
        Ok(_) => Ok(Verdict::Accepted),
        Err(err) if err.to_string().contains(&path.display().to_string()) => Ok(Verdict::Rejected),
        Err(err) => Err(format!("the error does not name the file: {err}")),
    }
}

fn check_basic_authorization(bytes: &[u8]) -> Result<Verdict, String> {
    let parsed = memlock_http::webconfig::parse_basic_authorization(bytes);
    if let Some((user, _)) = &parsed {
        if user.contains(':') {
            return Err(format!("user {user:?} contains the separator"));
        }
    }
    Ok(if parsed.is_some() { Verdict::Accepted } else { Verdict::Rejected })
}
