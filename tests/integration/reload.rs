//! Hot reload of the running binary: a valid change to the configuration file takes effect (a
//! disabled collector's series disappear), an invalid one keeps the old configuration, logs the
//! key and sets `memlock_exporter_config_last_reload_successful` to 0; both through the file
//! watch and through SIGHUP. A collector's own setting restarts the collectors; a web setting
//! does not.

use std::path::Path;
use std::time::Duration;

use crate::util::{fixtures, Exporter, Metrics};

const NUMA_SERIES: &str = "memlock_scrape_collector_success{collector=\"numa\"}";
const RELOAD_OK: &str = "memlock_exporter_config_last_reload_successful";
const RELOAD_TIME: &str = "memlock_exporter_config_last_reload_success_timestamp_seconds";

fn temp_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("memlock-reload-it-{name}-")).tempdir().unwrap()
}

fn start(config: &Path) -> Exporter {
    let root = fixtures();
    let (procfs, sysfs) = (root.join("proc").display().to_string(), root.join("sys").display().to_string());
    let config = config.display().to_string();
    Exporter::start(&[
        "--config.file",
        &config,
        "--path.procfs",
        &procfs,
        "--path.sysfs",
        &sysfs,
        "--no-collector.rdma_netlink",
    ])
}

/// Scrapes until `done` holds, for up to 15 s.
fn wait_until(exporter: &Exporter, what: &str, done: impl Fn(&Metrics) -> bool) -> Metrics {
    exporter.wait_metrics(Duration::from_secs(15), what, done)
}

fn sighup(exporter: &Exporter) {
    // SAFETY: kill with the pid of our own running child.
    assert_eq!(unsafe { libc::kill(exporter.child.id() as i32, libc::SIGHUP) }, 0);
}

/// Runs the valid-then-invalid-then-fixed sequence; `apply` writes the file and, for the
/// SIGHUP variant, signals.
fn valid_then_invalid_then_fixed(exporter: &Exporter, write: &dyn Fn(&str)) {
    let first = exporter.metrics();
    assert_eq!(first.value(NUMA_SERIES), 1.0, "numa runs at start");
    assert_eq!(first.value(RELOAD_OK), 1.0);
    let started_at = first.value(RELOAD_TIME);
    std::thread::sleep(Duration::from_millis(1100));

    write("[collector.numa]\nenabled = false\n");
    let after = wait_until(exporter, "the numa collector to be dropped", |m| m.get(NUMA_SERIES).is_none());
    assert!(after.family("memlock_numa_memory_free_bytes").is_empty(), "numa series are gone");
    assert_eq!(after.value("memlock_scrape_collector_success{collector=\"node\"}"), 1.0, "node still runs");
    assert_eq!(after.value(RELOAD_OK), 1.0);
    assert!(after.value(RELOAD_TIME) > started_at, "the success time moved");
    // Logged once the old sampler has stopped, after the swap the scrape saw.
    wait_until(exporter, "the reload logged", |_| exporter.log_text().contains("configuration reloaded"));

    write("[collector.numa]\nenabled = true\ninterval = \"fast\"\n");
    let failed = wait_until(exporter, "the failed reload", |m| m.get(RELOAD_OK) == Some(0.0));
    assert!(failed.get(NUMA_SERIES).is_none(), "the old configuration (numa off) stays");
    assert_eq!(failed.value("memlock_scrape_collector_success{collector=\"node\"}"), 1.0);
    assert_eq!(failed.value(RELOAD_TIME), after.value(RELOAD_TIME), "no new success time");
    let log = exporter.log_text();
    assert!(
        log.contains("configuration reload failed") && log.contains("collector.numa.interval"),
        "the log names the key:\n{log}"
    );

    write("[collector.numa]\nenabled = true\n");
    let fixed =
        wait_until(exporter, "the fixed reload", |m| m.get(RELOAD_OK) == Some(1.0) && m.get(NUMA_SERIES).is_some());
    assert!(!fixed.family("memlock_numa_memory_free_bytes").is_empty());
}

#[test]
fn file_changes_reload_the_configuration() {
    let tmp = temp_dir("watch");
    let dir = tmp.path();
    let config = dir.join("config.toml");
    std::fs::write(&config, "[collector.numa]\nenabled = true\n").unwrap();
    let exporter = start(&config);
    let write = |text: &str| {
        // The way editors save: a new file renamed over the old one.
        let tmp = dir.join(".config.toml.swp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &config).unwrap();
    };
    valid_then_invalid_then_fixed(&exporter, &write);
    assert!(!exporter.log_text().contains("SIGHUP"), "the file watch did it alone");
    let status = exporter.terminate();
    assert!(status.success(), "{status:?}");
}

#[test]
fn sighup_reloads_the_configuration() {
    // The configuration is a symlink into a directory the exporter does not watch, so only the
    // signal can make it notice the edits.
    let tmp = temp_dir("sighup");
    let dir = tmp.path();
    let real_dir = dir.join("real");
    std::fs::create_dir_all(&real_dir).unwrap();
    let target = real_dir.join("config.toml");
    std::fs::write(&target, "[collector.numa]\nenabled = true\n").unwrap();
    let watched_dir = dir.join("etc");
    std::fs::create_dir_all(&watched_dir).unwrap();
    let config = watched_dir.join("memlock.toml");
    std::os::unix::fs::symlink(&target, &config).unwrap();
    let exporter = start(&config);

    // Unchanged files: SIGHUP reloads anyway.
    std::thread::sleep(Duration::from_millis(1100));
    let before = exporter.metrics().value(RELOAD_TIME);
    sighup(&exporter);
    wait_until(&exporter, "a reload on SIGHUP", |m| m.get(RELOAD_TIME).is_some_and(|t| t > before));

    let write = |text: &str| {
        std::fs::write(&target, text).unwrap();
        // Without the signal nothing happens.
        std::thread::sleep(Duration::from_millis(800));
        sighup(&exporter);
    };
    valid_then_invalid_then_fixed(&exporter, &write);
    assert!(exporter.log_text().contains("SIGHUP received"));
    assert!(!exporter.log_text().contains("configuration files changed"), "the watch did not see the symlink target");
    let status = exporter.terminate();
    assert!(status.success(), "{status:?}");
}

#[test]
fn a_bad_web_config_on_reload_keeps_serving_with_the_old_one() {
    let tmp = temp_dir("web");
    let dir = tmp.path();
    let web = dir.join("web.yml");
    std::fs::write(&web, "http_server_config:\n  headers:\n    X-Frame-Options: deny\n").unwrap();
    let config = dir.join("config.toml");
    std::fs::write(&config, format!("[web]\nconfig_file = \"{}\"\n", web.display())).unwrap();
    let exporter = start(&config);
    std::fs::write(
        &web,
        "tls_server_config:\n  cert_file: /nonexistent/server.crt\n  key_file: /nonexistent/server.key\n",
    )
    .unwrap();
    let failed = wait_until(&exporter, "the failed reload", |m| m.get(RELOAD_OK) == Some(0.0));
    assert!(failed.get("memlock_node_mlocked_bytes").is_some(), "still serving plain HTTP");
    let log = exporter.log_text();
    assert!(log.contains("tls_server_config.cert_file") && log.contains("/nonexistent/server.crt"), "{log}");
}

#[test]
fn the_log_level_follows_the_file() {
    use std::process::Command;

    let tmp = temp_dir("log-level");
    let dir = tmp.path();
    let config = dir.join("config.toml");
    std::fs::write(&config, "[log]\nlevel = \"info\"\nformat = \"json\"\n").unwrap();
    let root = fixtures();
    // Not util::command: it sets --log.level, and a flag would override the file.
    let mut cmd = Command::new(crate::util::binary());
    cmd.args([
        "--config.file",
        config.to_str().unwrap(),
        "--web.listen-address",
        "127.0.0.1:0",
        "--no-collector.rdma_netlink",
    ])
    .args([
        "--path.procfs",
        root.join("proc").to_str().unwrap(),
        "--path.sysfs",
        root.join("sys").to_str().unwrap(),
    ]);
    let exporter = Exporter::from_command(cmd);
    wait_until(&exporter, "the first sample", |m| {
        m.get(RELOAD_OK) == Some(1.0) && m.get("memlock_node_mlocked_bytes").is_some()
    });
    std::thread::sleep(Duration::from_millis(1100));
    let before = exporter.metrics().value(RELOAD_TIME);
    std::fs::write(&config, "[log]\nlevel = \"warn\"\nformat = \"json\"\n").unwrap();
    let switched = wait_until(&exporter, "the reload to warn", |m| m.get(RELOAD_TIME).is_some_and(|t| t > before));
    // The success time is taken after the level changed: a line written later was written at warn.
    let at_warn = switched.value(RELOAD_TIME);
    std::fs::write(&config, "[log]\nlevel = \"warn\"\nformat = \"json\"\n[collector.node]\ninterval = \"soon\"\n")
        .unwrap();
    wait_until(&exporter, "the failed reload", |m| m.get(RELOAD_OK) == Some(0.0));
    // Lines reach this test through the exporter's log queue and a pipe, behind the scrape that
    // showed the gauge: wait for the error line, and so for every line queued before it (the
    // failed reload's own "reloading" line among them).
    wait_until(&exporter, "the failed reload logged", |_| exporter.log_text().contains("configuration reload failed"));
    let text = exporter.log_text();
    assert!(text.contains("collector.node.interval"), "errors still show: {text}");
    let info: Vec<&str> = text.lines().filter(|l| l.contains("\"level\":\"INFO\"")).collect();
    assert!(!info.is_empty(), "info lines before the reload to warn: {text}");
    let late: Vec<&&str> = info.iter().filter(|l| log_time(l) > at_warn).collect();
    assert!(late.is_empty(), "no info lines at level warn: {late:#?}");
}

/// The `timestamp` of a JSON log line (RFC 3339 in UTC, as tracing-subscriber writes it), in
/// seconds since the epoch.
fn log_time(line: &str) -> f64 {
    let start = line.find("\"timestamp\":\"").unwrap_or_else(|| panic!("no timestamp: {line}")) + 13;
    let stamp = &line[start..start + line[start..].find('"').unwrap_or_else(|| panic!("{line}"))];
    let field = |range: std::ops::Range<usize>| -> i64 {
        stamp.get(range).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("timestamp {stamp}"))
    };
    let (year, month, day) = (field(0..4), field(5..7), field(8..10));
    let seconds: f64 = stamp[17..stamp.len() - 1].parse().unwrap_or_else(|_| panic!("timestamp {stamp}"));
    // Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    (days * 86_400 + field(11..13) * 3_600 + field(14..16) * 60) as f64 + seconds
}

/// An emptied or truncated configuration file must not reload as "all defaults": the fast
/// path's Alertmanager would be gone, the reload gauge would say 1, and nothing would page.
/// Both are refused (gauge 0, the fast path keeps delivering) and switching the fast path off
/// takes `alertmanager_urls = []` written in the file.
#[test]
fn a_reload_that_would_switch_paging_off_is_refused_unless_the_file_says_so() {
    let receiver = crate::util::AlertReceiver::start();
    let tmp = temp_dir("fail-open");
    let dir = tmp.path();
    let config = dir.join("config.toml");
    // The fixtures hold one process near its limit: one alert firing, resent every second.
    let alerting = format!("[alerting]\nalertmanager_urls = [\"{}\"]\nresend_interval = \"1s\"\n", receiver.url);
    std::fs::write(&config, format!("[web]\nmax_requests = 20\n{alerting}")).unwrap();
    let exporter = start(&config);
    assert!(receiver.more_than(0, Duration::from_secs(15)), "the fast path delivers at start");
    let mut reloads = 0;
    for (what, text) in [("emptied", ""), ("truncated before [alerting]", "[web]\nmax_requests = 20\n")] {
        let before = exporter.metrics().value(RELOAD_TIME);
        std::thread::sleep(Duration::from_millis(1100));
        std::fs::write(&config, text).unwrap();
        let outcome = wait_until(&exporter, "the reload's outcome", |m| {
            m.get(RELOAD_OK) == Some(0.0) || m.get(RELOAD_TIME).is_some_and(|t| t > before)
        });
        let log = exporter.log_text();
        assert_eq!(outcome.value(RELOAD_OK), 0.0, "{what}: refused, the gauge says so; log:\n{log}");
        assert!(log.contains("configuration reload failed") && log.contains(&config.display().to_string()), "{log}");
        let delivered = receiver.posts();
        assert!(receiver.more_than(delivered + 1, Duration::from_secs(10)), "{what}: the fast path still delivers");
        reloads += 1;
        // Put the good file back, so the next case starts from a successful load.
        std::fs::write(&config, format!("[web]\nmax_requests = 20\n{alerting}")).unwrap();
        wait_until(&exporter, "the good file back", |m| m.get(RELOAD_OK) == Some(1.0));
    }
    assert_eq!(reloads, 2);
    let log = exporter.log_text();
    assert!(log.contains("no settings left") && log.contains("alertmanager_urls = []"), "{log}");

    // On purpose: the file says so.
    std::fs::write(&config, "[web]\nmax_requests = 20\n[alerting]\nalertmanager_urls = []\n").unwrap();
    wait_until(&exporter, "the fast path switched off", |_| exporter.log_text().contains("alerting=off"));
    assert_eq!(exporter.metrics().value(RELOAD_OK), 1.0);
    let status = exporter.terminate();
    assert!(status.success(), "{status:?}");
}

/// The collectors' own settings are compared by value on reload. A change to one of them
/// (`collector.process.top_n`) restarts the collectors and takes effect; a reload that changes only
/// a web setting keeps the running sampler.
#[test]
fn a_collector_setting_restarts_the_collectors_and_a_web_setting_does_not() {
    const PROCESSES: &str = "memlock_process_ipc_lock";
    let tmp = temp_dir("collector-setting");
    let dir = tmp.path();
    let config = dir.join("config.toml");
    std::fs::write(&config, "[collector.process]\ntop_n = 200\n").unwrap();
    let exporter = start(&config);
    // As editors save: a new file renamed over the old one, never seen half written.
    let write = |text: &str| {
        let tmp = dir.join(".config.toml.swp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &config).unwrap();
    };
    let all = wait_until(&exporter, "the fixture's processes", |m| m.family(PROCESSES).len() > 1);
    let reloads = |exporter: &Exporter| exporter.log_text().matches("configuration reloaded").count();
    let wait_reload = |after: usize, what: &str| {
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while reloads(&exporter) <= after {
            assert!(std::time::Instant::now() < deadline, "no reload for {what}:\n{}", exporter.log_text());
            std::thread::sleep(Duration::from_millis(100));
        }
    };

    write("[collector.process]\ntop_n = 1\n");
    let one = wait_until(&exporter, "top_n = 1 in effect", |m| m.family(PROCESSES).len() == 1);
    assert!(all.family(PROCESSES).len() > one.family(PROCESSES).len());
    wait_reload(0, "top_n");
    let restarts = exporter.log_text().matches("collectors=").count();
    assert_eq!(restarts, 1, "the sampler restarted once:\n{}", exporter.log_text());

    write("[collector.process]\ntop_n = 1\n[web]\nmax_requests = 20\n");
    wait_reload(1, "web.max_requests");
    let log = exporter.log_text();
    assert_eq!(log.matches("collectors=").count(), restarts, "a web setting kept the sampler:\n{log}");
    assert_eq!(exporter.metrics().family(PROCESSES).len(), 1, "top_n still applies");
    let status = exporter.terminate();
    assert!(status.success(), "{status:?}");
}

/// A file written in place by a writer that pauses midway: the half written between its two
/// writes, `exhaustion_critical_seconds = 1` for `= 130`, parses, and loaded it would bring
/// the critical page to a second before ENOMEM. The reload waits until two reads a second
/// apart agree: the whole file is loaded, once, and the torn one never (no warning of a
/// tenfold change for it either).
#[test]
fn a_torn_write_is_not_loaded() {
    use std::io::Write;
    let tmp = temp_dir("torn");
    let dir = tmp.path();
    let config = dir.join("config.toml");
    std::fs::write(&config, "[alerting]\nexhaustion_critical_seconds = 120\n").unwrap();
    let exporter = start(&config);
    std::thread::sleep(Duration::from_millis(1100));
    let before = exporter.metrics().value(RELOAD_TIME);
    let mut file = std::fs::OpenOptions::new().write(true).truncate(true).open(&config).unwrap();
    file.write_all(b"[alerting]\nexhaustion_critical_seconds = 1").unwrap();
    file.sync_all().unwrap();
    // Longer than the watch's settling time (300 ms), shorter than the two reads apart (1 s).
    std::thread::sleep(Duration::from_millis(600));
    file.write_all(b"30\n").unwrap();
    drop(file);
    wait_until(&exporter, "the completed file reloaded", |m| m.get(RELOAD_TIME).is_some_and(|t| t > before));
    // Time for a second reload, had the first loaded the torn file.
    std::thread::sleep(Duration::from_secs(3));
    let log = exporter.log_text();
    assert_eq!(log.matches("configuration reloaded").count(), 1, "one reload, of the whole file:\n{log}");
    assert!(!log.contains("paging threshold"), "the torn value was never loaded:\n{log}");
    assert_eq!(exporter.metrics().value(RELOAD_OK), 1.0);
    let status = exporter.terminate();
    assert!(status.success(), "{status:?}");
}

/// A whole file (renamed into place) that changes a paging threshold tenfold is loaded, with a
/// warning that names the key and both values.
#[test]
fn a_tenfold_threshold_change_is_loaded_with_a_warning_naming_the_key() {
    let tmp = temp_dir("tenfold");
    let dir = tmp.path();
    let config = dir.join("config.toml");
    std::fs::write(&config, "[alerting]\nexhaustion_critical_seconds = 120\n").unwrap();
    let exporter = start(&config);
    std::thread::sleep(Duration::from_millis(1100));
    let before = exporter.metrics().value(RELOAD_TIME);
    let tmp = dir.join(".config.toml.tmp");
    std::fs::write(&tmp, "[alerting]\nexhaustion_critical_seconds = 12\n").unwrap();
    std::fs::rename(&tmp, &config).unwrap();
    wait_until(&exporter, "the reload", |m| m.get(RELOAD_TIME).is_some_and(|t| t > before));
    wait_until(&exporter, "the warning", |_| exporter.log_text().contains("paging threshold"));
    let log = exporter.log_text();
    let line = log.lines().find(|l| l.contains("paging threshold")).unwrap_or_default();
    assert!(
        line.contains("WARN") && line.contains("alerting.exhaustion_critical_seconds") && line.contains("120"),
        "{line}"
    );
    assert!(line.contains("\"before\":120.0") && line.contains("\"after\":12.0"), "{line}");
    let status = exporter.terminate();
    assert!(status.success(), "{status:?}");
}
