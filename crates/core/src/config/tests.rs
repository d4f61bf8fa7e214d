//! The configuration's layers, errors and reload refusals, end to end through [`load`].

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use config::Value;

use super::*;

/// The file and the directory that holds it, removed when the `TempDir` is dropped.
fn write_temp(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new().prefix(&format!("memlock-config-{name}-")).tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

fn load_with(file: Option<PathBuf>, env: &[(&str, &str)], flags: Vec<(String, Value)>) -> Result<Config, ConfigError> {
    let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    load(&Sources { file, env: Some(env), flags })
}

#[test]
fn defaults_need_no_file() {
    let cfg = load_with(None, &[], vec![]).unwrap();
    assert_eq!(cfg.listen_address, ":9478");
    assert_eq!(cfg.telemetry_path, "/metrics");
    assert_eq!(cfg.max_response_bytes, 64 << 20, "the budget docs/reliability.md measured");
    assert_eq!(cfg.roots.procfs, PathBuf::from("/proc"));
    assert_eq!(cfg.collector("node").unwrap().interval, Duration::from_secs(1));
    assert!(cfg.collector("numa").unwrap().enabled);
    assert_eq!(cfg.log_level, LogLevel::Info);
}

#[test]
fn layers_override_in_order_file_env_flags() {
    let (_dir, path) = write_temp(
        "layers",
        "[web]\nlisten_address = \"127.0.0.1:1\"\n[log]\nlevel \
        = \"debug\"\n[collector.numa]\nenabled = false\ninterval = \"5s\"\n",
    );
    let cfg = load_with(
        Some(path.clone()),
        &[("MEMLOCK_EXPORTER_WEB__LISTEN_ADDRESS", "127.0.0.1:2"), ("MEMLOCK_EXPORTER_LOG__FORMAT", "json")],
        vec![("web.listen_address".into(), Value::from("127.0.0.1:3"))],
    )
    .unwrap();
    assert_eq!(cfg.listen_address, "127.0.0.1:3");
    assert_eq!(cfg.log_format, LogFormat::Json);
    assert_eq!(cfg.log_level, LogLevel::Debug);
    let numa = cfg.collector("numa").unwrap();
    assert!(!numa.enabled);
    assert_eq!(numa.interval, Duration::from_secs(5));
    assert_eq!(cfg.file, Some(path));
}

#[test]
fn unknown_keys_name_the_key_and_the_file() {
    let (_dir, path) = write_temp("unknown", "[web]\nlisten_adress = \":1\"\n");
    let err = load_with(Some(path.clone()), &[], vec![]).unwrap_err().to_string();
    assert!(err.contains("`web.listen_adress`"), "{err}");
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(err.contains("listen_address"), "hint lists the known keys: {err}");

    let (_dir, path) = write_temp("unknown-top", "colector = 1\n");
    let err = load_with(Some(path), &[], vec![]).unwrap_err().to_string();
    assert!(err.contains("`colector`"), "{err}");

    let err = load_with(None, &[("MEMLOCK_EXPORTER_WEB__PORT", "1")], vec![]).unwrap_err().to_string();
    assert!(err.contains("`web.port`") && err.contains("MEMLOCK_EXPORTER_WEB__PORT"), "{err}");
}

#[test]
fn invalid_values_name_the_key_and_where_they_were_set() {
    let (_dir, path) = write_temp("invalid", "[log]\nlevel = \"loud\"\n");
    let err = load_with(Some(path.clone()), &[], vec![]).unwrap_err().to_string();
    assert!(err.contains("`log.level`") && err.contains("loud") && err.contains(&path.display().to_string()), "{err}");

    let (_dir, path) = write_temp("badtype", "[collector.node]\nenabled = \"sometimes\"\n");
    let err = load_with(Some(path.clone()), &[], vec![]).unwrap_err().to_string();
    assert!(err.contains("collector.node.enabled"), "{err}");

    // A string where a list belongs: serde's error, wrapped by the config crate (found by
    // libFuzzer; it named the key but not the file).
    let (_dir, path) = write_temp("notalist", "[alerting]\nalertmanager_urls = \"node-1\"\n");
    let err = load_with(Some(path.clone()), &[], vec![]).unwrap_err();
    assert!(matches!(&err, ConfigError::Invalid { key, .. } if key == "alerting.alertmanager_urls"), "{err:?}");
    let err = err.to_string();
    assert!(err.contains(&path.display().to_string()) && err.contains("node-1"), "{err}");

    let (_dir, path) = write_temp("interval", "[collector.node]\ninterval = \"10\"\n");
    let err = load_with(Some(path), &[], vec![]).unwrap_err().to_string();
    assert!(err.contains("collector.node.interval") && err.contains("unit"), "{err}");

    let err =
        load_with(None, &[], vec![("web.telemetry_path".into(), Value::from("metrics"))]).unwrap_err().to_string();
    assert!(err.contains("--web.telemetry-path"), "{err}");
    for never in ["/metrics?format=text", "/met rics", "/metrics#top", "/metrics\n", "/m\u{7f}"] {
        let err = load_with(None, &[], vec![("web.telemetry_path".into(), Value::from(never))]).unwrap_err();
        assert!(err.to_string().contains("can never match"), "{never:?}: {err}");
    }
    for probe in ["/-/healthy", "/-/ready"] {
        let err = load_with(None, &[], vec![("web.telemetry_path".into(), Value::from(probe))]).unwrap_err();
        assert!(err.to_string().contains("probe's path"), "{probe:?}: {err}");
    }
    for fine in ["/metrics", "/probe/metrics", "/metrics%3F", "/-/m_e.t~r:i@c!s"] {
        let cfg = load_with(None, &[], vec![("web.telemetry_path".into(), Value::from(fine))]).unwrap();
        assert_eq!(cfg.telemetry_path, fine);
    }
}

#[test]
fn broken_files_name_the_file() {
    let (_dir, path) = write_temp("syntax", "[web\nlisten_address = 1\n");
    let err = load_with(Some(path.clone()), &[], vec![]).unwrap_err().to_string();
    assert!(err.contains(&path.display().to_string()), "{err}");
    let err = load_with(Some(PathBuf::from("/nonexistent/memlock.toml")), &[], vec![]).unwrap_err().to_string();
    assert!(err.contains("/nonexistent/memlock.toml"), "{err}");
    let dir = std::env::temp_dir();
    let err = load_with(Some(dir.clone()), &[], vec![]).unwrap_err().to_string();
    assert!(err.contains(&dir.display().to_string()), "{err}");
}

#[test]
fn enormous_files_and_fifos_are_refused_without_hanging() {
    let (_dir, path) = write_temp("enormous", &format!("# {}\n", "x".repeat(2 << 20)));
    let err = load_with(Some(path.clone()), &[], vec![]).unwrap_err().to_string();
    assert!(err.contains(&path.display().to_string()) && err.contains("larger than"), "{err}");
    // A FIFO in place of the file: no writer, so a blocking open would never return.
    let fifo = path.with_file_name("fifo.toml");
    let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo reads the NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    let (tx, rx) = std::sync::mpsc::channel();
    let owned = fifo.clone();
    std::thread::spawn(move || {
        let _ = tx.send(load_with(Some(owned), &[], vec![]).map(|_| ()).map_err(|e| e.to_string()));
    });
    let err = rx.recv_timeout(Duration::from_secs(10)).expect("loading a FIFO blocked").unwrap_err();
    assert!(err.contains(&fifo.display().to_string()) && err.contains("not a regular file"), "{err}");
    let _ = std::fs::remove_file(&fifo);
}

#[test]
fn collector_settings_are_validated() {
    let (_dir, path) = write_temp("regex", "[collector.cgroup]\nexclude = [\"(unclosed\"]\n");
    let err = load_with(Some(path), &[], vec![]).unwrap_err().to_string();
    assert!(err.contains("collector.cgroup.exclude") && err.contains("regex"), "{err}");
    let (_dir, path) = write_temp("topn", "[collector.process]\ntop_n = 0\n");
    let err = load_with(Some(path), &[], vec![]).unwrap_err().to_string();
    assert!(err.contains("collector.process.top_n"), "{err}");
    let cfg = load_with(None, &[("MEMLOCK_EXPORTER_COLLECTOR__PROCESS__MIN_BYTES", "4096")], vec![]).unwrap();
    let process = cfg.settings::<ProcessConfig>("process").unwrap();
    assert_eq!(process.min_bytes, 4096);
    assert!(process.comm_pattern.as_ref().unwrap().is_match("python3"));
    let cgroup = CgroupConfig {
        exclude: vec![regex::Regex::new("^/system.slice").unwrap()],
        ..cfg.settings::<CgroupConfig>("cgroup").unwrap().clone()
    };
    assert!(!cgroup.wants("/system.slice/sshd.service") && cgroup.wants("/kubepods.slice"));
}

/// The messages as they were when the collectors' settings were fields of this module, and
/// the four that lost their key then (a section of a collector without settings of its own
/// went through a flattened map: `collector` named instead of `collector.numa.interval`).
#[test]
fn collector_setting_errors_name_the_key_and_the_layer() {
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [(&'a str, &'a str)], &'a str);
    const REGEX: &str = "is not a valid regex: regex parse error:";
    let cases: &[Case] = &[
        (
            "[collector.process]\ntop_n = \"x\"\n",
            &[],
            &[],
            "`collector.process.top_n` (set in FILE): found string \"x\", expected an integer",
        ),
        ("[collector.process]\ntop_n = 0\n", &[], &[], "`collector.process.top_n` (set in FILE): must be at least 1"),
        (
            "",
            &[("MEMLOCK_EXPORTER_COLLECTOR__PROCESS__TOP_N", "0")],
            &[],
            "`collector.process.top_n` (set in the environment (MEMLOCK_EXPORTER_COLLECTOR__PROCESS__TOP_N)): \
            must be at least 1",
        ),
        (
            "",
            &[],
            &[("collector.process.top_n", "0")],
            "`collector.process.top_n` (set in the command-line flags (--collector.process.top-n)): must be at \
            least 1",
        ),
        (
            "[collector.cgroup]\ninclude = \"x\"\n",
            &[],
            &[],
            "`collector.cgroup.include` (set in FILE): invalid type: string \"x\", expected a sequence",
        ),
        (
            "[collector.cgroup]\ninclude = [\"(x\"]\n",
            &[],
            &[],
            "`collector.cgroup.include` (set in FILE): \"(x\" {REGEX}",
        ),
        (
            "[collector.rdma_netlink]\nexclude = [\"[\"]\n",
            &[],
            &[],
            "`collector.rdma_netlink.exclude` (set in FILE): \"[\" {REGEX}",
        ),
        (
            "[collector.rdma_sysfs]\ninclude = [\"ok\", \"(bad\"]\n",
            &[],
            &[],
            "`collector.rdma_sysfs.include` (set in FILE): \"(bad\" {REGEX}",
        ),
        (
            "[collector.cgroup]\nexclude = [\"ok\", \"(bad\"]\n",
            &[],
            &[],
            "`collector.cgroup.exclude` (set in FILE): \"(bad\" {REGEX}",
        ),
        (
            "[collector.process]\ncomm_pattern = \"(\"\n",
            &[],
            &[],
            "`collector.process.comm_pattern` (set in FILE): \"(\" {REGEX}",
        ),
        (
            "[collector.process]\nfull_scan_interval = \"10\"\n",
            &[],
            &[],
            "`collector.process.full_scan_interval` (set in FILE): \"10\" needs a unit: ms, s, m or h",
        ),
        (
            "[collector.cgroup]\nfull_scan_interval = \"2h\"\n",
            &[],
            &[],
            "`collector.cgroup.full_scan_interval` (set in FILE): \"2h\" is outside 100ms..1h",
        ),
        (
            "[collector.process]\ninterval = \"50ms\"\n",
            &[],
            &[],
            "`collector.process.interval` (set in FILE): \"50ms\" is outside 100ms..1h",
        ),
        (
            "[collector.failures]\ninterval = \"0s\"\n",
            &[],
            &[],
            "`collector.failures.interval` (set in FILE): \"0s\" is outside 100ms..1h",
        ),
        (
            "",
            &[],
            &[("collector.rdma_netlink.interval", "2h")],
            "`collector.rdma_netlink.interval` (set in the command-line flags \
            (--collector.rdma-netlink.interval)): \"2h\" is outside 100ms..1h",
        ),
        (
            "[collector.node]\nenabled = \"sometimes\"\n",
            &[],
            &[],
            "`collector.node.enabled` (set in FILE): found string \"sometimes\", expected a boolean",
        ),
        (
            "[collector.process]\nenabled = \"sometimes\"\n",
            &[],
            &[],
            "`collector.process.enabled` (set in FILE): found string \"sometimes\", expected a boolean",
        ),
        (
            "[collector.cgroup]\nmax_depth = -1\n",
            &[],
            &[],
            "`collector.cgroup.max_depth` (set in FILE): found 64-bit integer `-1`, expected an unsigned 64 bit \
            or less integer",
        ),
        (
            "[collector.process]\ntop_nn = 1\n",
            &[],
            &[],
            "unknown configuration key `collector.process.top_nn` (set in FILE); known keys in \
            [collector.process]: comm_pattern, enabled, full_scan_interval, interval, min_bytes, nccl_version, \
            top_n",
        ),
        (
            "[collector]\nprocess = 5\n",
            &[],
            &[],
            "`collector.process` (set in FILE): invalid type: integer `5`, expected struct RawProcessCollector",
        ),
        (
            "[collector.process]\nmin_bytes = \"big\"\n",
            &[],
            &[],
            "`collector.process.min_bytes` (set in FILE): found string \"big\", expected an integer",
        ),
        (
            "",
            &[("MEMLOCK_EXPORTER_COLLECTOR__PROCESS__NCCL_VERSION", "maybe")],
            &[],
            "`collector.process.nccl_version` (set in the environment \
            (MEMLOCK_EXPORTER_COLLECTOR__PROCESS__NCCL_VERSION)): found string \"maybe\", expected a boolean",
        ),
        (
            "[collector.rdma_sysfs]\ninclude = [[1]]\n",
            &[],
            &[],
            "`collector.rdma_sysfs.include[0]` (set in the built-in defaults): found sequence, expected a string",
        ),
        (
            "[collector.cgroup.include]\nx = 1\n",
            &[],
            &[],
            "`collector.cgroup.include` (set in FILE): invalid type: map, expected a sequence",
        ),
        (
            "",
            &[("MEMLOCK_EXPORTER_COLLECTOR__CGROUP__MAX_DEPTH", "deep")],
            &[],
            "`collector.cgroup.max_depth` (set in the environment \
            (MEMLOCK_EXPORTER_COLLECTOR__CGROUP__MAX_DEPTH)): found string \"deep\", expected an integer",
        ),
        // Lost their key before.
        (
            "",
            &[("MEMLOCK_EXPORTER_COLLECTOR__NUMA__INTERVAL", "10")],
            &[],
            "`collector.numa.interval` (set in the environment (MEMLOCK_EXPORTER_COLLECTOR__NUMA__INTERVAL)): \
            \"10\" needs a unit: ms, s, m or h",
        ),
        (
            "[collector.software]\ninterval = 5\n",
            &[],
            &[],
            "`collector.software.interval` (set in FILE): \"5\" needs a unit: ms, s, m or h",
        ),
        (
            "[collector]\nnode = 5\n",
            &[],
            &[],
            "`collector.node` (set in FILE): invalid type: integer `5`, expected struct RawCollector",
        ),
        ("collector = 3\n", &[], &[], "`collector` (set in FILE): invalid type: integer `3`, expected a map"),
    ];
    let (_dir, path) = write_temp("collector-errors", "");
    for (file, env, flags, expected) in cases {
        std::fs::write(&path, file).unwrap();
        let flags = flags.iter().map(|(k, v)| (k.to_string(), Value::from(*v))).collect();
        let err = load_with(Some(path.clone()), env, flags).unwrap_err().to_string();
        let err = err.replace(&path.display().to_string(), "FILE");
        let expected = expected.replace("{REGEX}", REGEX);
        assert!(err.contains(&expected), "{file:?} {env:?}:\n  got {err}\n want {expected}");
    }
    for fine in ["[collector.rdma_sysfs]\ninclude = [1]\n", "[collector.process]\nnccl_version = 1\n"] {
        std::fs::write(&path, fine).unwrap();
        load_with(Some(path.clone()), &[], vec![]).unwrap();
    }
}

#[test]
fn the_example_file_is_valid_and_matches_the_defaults() {
    let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/config.example.toml");
    let from_file = load_with(Some(example), &[], vec![]).unwrap();
    let defaults = load_with(None, &[], vec![]).unwrap();
    assert!(from_file.file_keys.contains("web.listen_address"), "{:?}", from_file.file_keys);
    assert_eq!(Config { file: None, file_keys: BTreeSet::new(), ..from_file }, defaults);
}

/// An emptied or truncated file must not reload as "all defaults", without the
/// Alertmanager, so that nothing pages.
#[test]
fn a_reload_that_would_fail_open_is_refused() {
    let load_text = |name: &str, text: &str| {
        let (_dir, path) = write_temp(name, text);
        load_with(Some(path), &[], vec![]).unwrap()
    };
    let running =
        load_text("running", "[web]\nmax_requests = 20\n[alerting]\nalertmanager_urls = [\"http://am:9093\"]\n");
    let refused = |new: &Config| refuse_failing_open(&running, new).map_err(|e| e.to_string());
    for empty in ["", "\n  \n", "# nothing but a comment\n"] {
        let err = refused(&load_text("emptied", empty)).unwrap_err();
        assert!(err.contains("config.toml") && err.contains("no settings left") && err.contains("restart"), "{err}");
    }
    let truncated = load_text("truncated", "[web]\nmax_requests = 20\n");
    let err = refused(&truncated).unwrap_err();
    assert!(err.contains("`alerting.alertmanager_urls`") && err.contains("config.toml"), "{err}");
    assert!(err.contains("alertmanager_urls = []") && err.contains("http://am:9093"), "{err}");
    let on_purpose = load_text("off", "[web]\nmax_requests = 20\n[alerting]\nalertmanager_urls = []\n");
    assert!(on_purpose.file_keys.contains("alerting.alertmanager_urls"), "{:?}", on_purpose.file_keys);
    assert_eq!(refused(&on_purpose), Ok(()), "switched off on purpose");
    let moved = load_text("moved", "[alerting]\nalertmanager_urls = [\"http://am2:9093\"]\n");
    assert_eq!(refused(&moved), Ok(()), "another Alertmanager, fewer settings");
    let defaults = load_with(None, &[], vec![]).unwrap();
    assert_eq!(refuse_failing_open(&defaults, &load_text("from-empty", "")).map_err(|e| e.to_string()), Ok(()));
}

/// The registry is the one list of collectors: each has its keys and defaults (the binary's
/// command line tests its flags).
#[test]
fn every_registered_collector_has_its_keys() {
    for registration in crate::collect::REGISTRY {
        let name = registration.name;
        let defaults = load_with(None, &[], vec![]).unwrap();
        let c = defaults.collector(name).unwrap();
        assert_eq!(c.enabled, registration.default_enabled, "{name}");
        assert_eq!(c.interval, parse_duration(registration.default_interval).unwrap(), "{name}");
        let env = format!("MEMLOCK_EXPORTER_COLLECTOR__{}__INTERVAL", name.to_uppercase());
        let config = load_with(None, &[(env.as_str(), "7s")], vec![]).unwrap();
        assert_eq!(config.collector(name).unwrap().interval, Duration::from_secs(7), "{name}");
    }
    let (_dir, path) = write_temp("unknown-collector", "[collector.nodee]\nenabled = false\n");
    let err = load_with(Some(path), &[], vec![]).unwrap_err().to_string();
    assert!(err.contains("`collector.nodee`") && err.contains("rdma_netlink"), "{err}");
}

#[test]
fn durations() {
    assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
    assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
    assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
    assert!(parse_duration("10").is_err());
    assert!(parse_duration("s").is_err());
    assert!(parse_duration("1e400s").is_err());
    assert!(parse_duration("-1s").is_err());
}

#[test]
fn listen_addresses() {
    assert_eq!(split_listen_address(":9478"), Ok((None, 9478)));
    assert_eq!(split_listen_address("127.0.0.1:1"), Ok((Some("127.0.0.1".into()), 1)));
    assert_eq!(split_listen_address("[::1]:9478"), Ok((Some("::1".into()), 9478)));
    assert!(split_listen_address("9478").is_err());
    assert!(split_listen_address(":99999").is_err());
    assert!(split_listen_address("host:http").is_err());
}
