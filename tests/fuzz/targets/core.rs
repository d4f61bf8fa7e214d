//! The core crate's fuzz targets: the configuration file and its small parsers, and the text
//! format writer. They use memlock-core alone, the one dependency of the cargo-fuzz crate in
//! fuzz/core.

use std::time::Duration;

use memlock_core::config::{self, ConfigError, Sources};
use memlock_core::exposition::{Exposition, Kind};

use super::common::{corpus, repository, scratch_file, strings, text, verdict, Expect, Target, Verdict};

/// In the order of docs/reliability.md's table.
pub const TARGETS: &[Target] = &[
    Target { name: "config_file", expect: Expect::BothPaths, seeds: config_seeds, check: check_config_file },
    Target {
        name: "duration",
        expect: Expect::BothPaths,
        seeds: || strings(&["1s", "500ms", "1.5s", "2m", "1h", "30s"]),
        check: check_duration,
    },
    Target {
        name: "listen_address",
        expect: Expect::BothPaths,
        seeds: || strings(&[":9478", "127.0.0.1:9478", "[::1]:9478", "0.0.0.0:0"]),
        check: check_listen_address,
    },
    Target {
        name: "alertmanager_url",
        expect: Expect::BothPaths,
        seeds: || strings(&["http://127.0.0.1:9093", "http://am.example:9093/prefix/"]),
        check: check_alertmanager_url,
    },
    Target {
        name: "exposition_labels",
        expect: Expect::AlwaysAccepts,
        seeds: || {
            let mut seeds = strings(&["python3", "/kubepods.slice/x\"y\\z", "a\nb", "mlx5_0", "é\u{1F600}"]);
            // The InfiniBand sysfs strings the kernel crate's `rdma_sysfs_label` reads.
            seeds.extend(corpus(|n| {
                ["fw_ver", "hca_type", "board_id", "node_guid", "link_layer", "node_desc"].contains(&n)
            }));
            seeds
        },
        check: check_exposition_labels,
    },
];

/// Configuration files: the shipped example, and one file per section and shape.
fn config_seeds() -> Vec<Vec<u8>> {
    let root = repository();
    let mut seeds: Vec<Vec<u8>> = std::fs::read(root.join("docs/config.example.toml")).into_iter().collect();
    seeds.extend(strings(&[
        "[web]\nlisten_address = \"127.0.0.1:9478\"\ntelemetry_path = \"/metrics\"\nmax_requests = 40\n",
        "[collector.process]\ninterval = \"1s\"\nfull_scan_interval = \"5s\"\nmin_bytes = 1048576\ncomm_pattern \
            = \"^python\"\ntop_n = 200\n",
        "[collector.cgroup]\nenabled = true\ninclude = [\"^/kubepods\"]\nexclude = [\"^/system.slice\"]\nmax_depth = \
            12\n",
        "[collector.rdma_netlink]\nenabled = false\n[collector.rdma_sysfs]\ninterval = \"5s\"\ninclude = \
            [\"^mlx5_\"]\n",
        "[trend]\nwindow = \"30s\"\nmin_rise_bytes_per_second = 4096\n",
        "[alerting]\nalertmanager_urls = [\"http://127.0.0.1:9093\"]\ninstance = \"node-1\"\nresend_interval \
            = \"30s\"\nusage_ratio_warning = 0.9\n",
        "[log]\nlevel = \"debug\"\nformat = \"json\"\n[path]\nprocfs = \"/host/proc\"\nsysfs = \"/host/sys\"\n",
        "",
    ]));
    seeds
}

/// Through a real file, as the daemon reads it; an error must name the file or the key.
fn check_config_file(bytes: &[u8]) -> Result<Verdict, String> {
    let path = scratch_file("config_file");
    std::fs::write(&path, bytes).map_err(|e| e.to_string())?;
    let shown = path.display().to_string();
    let sources = Sources { file: Some(path), env: Some(Default::default()), flags: Vec::new() };
    match config::load(&sources) {
        Ok(cfg) => {
            let bad_interval = cfg
                .collectors
                .iter()
                .find(|c| c.interval < Duration::from_millis(100) || c.interval > Duration::from_secs(3600));
            if let Some(c) = bad_interval {
                return Err(format!("collector {} accepted with interval {:?}", c.name, c.interval));
            }
            let no_top_n = cfg.settings::<config::ProcessConfig>("process").is_none_or(|p| p.top_n == 0);
            if !cfg.telemetry_path.starts_with('/') || no_top_n {
                return Err(format!("accepted an invalid configuration: {cfg:?}"));
            }
            Ok(Verdict::Accepted)
        }
        Err(err) => {
            let message = err.to_string();
            let clear = match &err {
                ConfigError::File { .. } | ConfigError::Other(_) => message.contains(&shown),
                ConfigError::UnknownKey { key, .. } | ConfigError::Invalid { key, .. } => {
                    !key.is_empty() && message.contains(key.as_str())
                }
            };
            if !clear {
                return Err(format!("the error does not name the file or the key: {message}"));
            }
            Ok(Verdict::Rejected)
        }
    }
}

fn check_duration(bytes: &[u8]) -> Result<Verdict, String> {
    let parsed = config::parse_duration(&text(bytes));
    if let Ok(d) = parsed {
        if d.as_secs_f64().is_nan() {
            return Err(format!("{d:?}"));
        }
    }
    Ok(verdict(&parsed))
}

fn check_listen_address(bytes: &[u8]) -> Result<Verdict, String> {
    Ok(verdict(&config::split_listen_address(&text(bytes))))
}

fn check_alertmanager_url(bytes: &[u8]) -> Result<Verdict, String> {
    let parsed = config::Endpoint::parse(&text(bytes));
    if let Ok(endpoint) = &parsed {
        let authority = endpoint.base.strip_prefix("http://").and_then(|rest| rest.split('/').next()).unwrap_or("");
        if authority.is_empty() || authority.contains('@') || !endpoint.alerts_url().ends_with("/api/v2/alerts") {
            return Err(format!("accepted {endpoint:?}"));
        }
    }
    Ok(verdict(&parsed))
}

/// Label values come from the host: command names, cgroup directory names, sysfs strings.
/// Whatever they hold, the sample stays on one line and its values round-trip as
/// [`memlock_core::exposition::label_value`] bounds them: at most its bound, without control characters.
fn check_exposition_labels(bytes: &[u8]) -> Result<Verdict, String> {
    let value = text(bytes).into_owned();
    let mut out = Exposition::new();
    out.family("memlock_fuzz_bytes", "A\nhelp \\ text.", Kind::Gauge)
        .sample(&[("comm", value.as_str()), ("cgroup", "/")], 1u64);
    let rendered = out.finish();
    let lines: Vec<&str> = rendered.lines().collect();
    if lines.len() != 3
        || !lines[0].starts_with("# HELP memlock_fuzz_bytes ")
        || lines[1] != "# TYPE memlock_fuzz_bytes gauge"
    {
        return Err(format!("not three lines: {rendered:?}"));
    }
    let values = parse_sample(lines[2])?;
    let bounded = memlock_core::exposition::label_value(&value);
    if values != [bounded.as_ref(), "/"] {
        return Err(format!("label values do not round-trip: {values:?} from {value:?}"));
    }
    if bounded.len() > memlock_core::exposition::MAX_LABEL_VALUE_BYTES || bounded.chars().any(char::is_control) {
        return Err(format!("{value:?} is exported as {bounded:?}: too long or with control characters"));
    }
    Ok(Verdict::Accepted)
}

/// One sample line of the text format: `name{k="v",...} value`, with every label value closed
/// and escaped. Returns the label values unescaped.
fn parse_sample(line: &str) -> Result<Vec<String>, String> {
    let Some(open) = line.find('{') else { return Err(format!("no labels in {line:?}")) };
    let mut values = Vec::new();
    let mut rest = &line[open + 1..];
    loop {
        let eq = rest.find("=\"").ok_or_else(|| format!("no =\" in {line:?}"))?;
        rest = &rest[eq + 2..];
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => value.push(c),
                    other => return Err(format!("bad escape {other:?} in {line:?}")),
                },
                Some((i, '"')) => break i,
                Some((_, '\n')) => return Err(format!("raw newline in {line:?}")),
                Some((_, c)) => value.push(c),
                None => return Err(format!("unterminated label value in {line:?}")),
            }
        };
        values.push(value);
        rest = &rest[end + 1..];
        if let Some(after) = rest.strip_prefix(',') {
            rest = after;
        } else if let Some(after) = rest.strip_prefix("} ") {
            after.parse::<f64>().map_err(|e| format!("value {after:?}: {e}"))?;
            return Ok(values);
        } else {
            return Err(format!("junk after a label value in {line:?}"));
        }
    }
}
