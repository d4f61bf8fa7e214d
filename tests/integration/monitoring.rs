//! The alert rules and dashboards are generated from alerts/thresholds.yml by alerts/generate.py
//! (Python standard library). These tests fail when a committed rules file or dashboard differs
//! from what its sources give, or when the sources break the conventions the generator checks
//! (runbook sections, promtool cases per alert, dashboard variables). promtool itself runs in
//! scripts/test.sh ("promtool rules"), and a real Prometheus in scripts/e2e/prometheus.sh.

use std::path::PathBuf;
use std::process::Command;

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn python(args: &[&str]) -> (bool, String) {
    let output = Command::new("python3")
        .args(args)
        .current_dir(repository())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("python3 runs (scripts/test.sh installs it)");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

#[test]
fn generated_rules_and_dashboards_are_up_to_date() {
    let (ok, text) = python(&["alerts/generate.py", "--check"]);
    assert!(ok, "alerts/generate.py --check failed (run `python3 alerts/generate.py`):\n{text}");
    assert!(text.contains("up to date"), "{text}");
}

#[test]
fn generator_unit_tests_pass() {
    let (ok, text) = python(&["-m", "unittest", "discover", "-s", "alerts", "-p", "test_*.py"]);
    assert!(ok, "{text}");
    assert!(text.contains("OK"), "{text}");
}

#[test]
fn every_alert_has_a_runbook_section_and_a_name_the_fast_path_does_not_use() {
    let rules = std::fs::read_to_string(repository().join("alerts/memlock-exporter.rules.yml")).unwrap();
    let runbooks = std::fs::read_to_string(repository().join("docs/runbooks.md")).unwrap();
    let alerts: Vec<&str> = rules.lines().filter_map(|l| l.trim().strip_prefix("- alert: ")).collect();
    assert!(alerts.len() >= 15, "{alerts:?}");
    for alert in &alerts {
        assert!(runbooks.lines().any(|l| l == format!("## {alert}")), "docs/runbooks.md has no `## {alert}`");
    }
    // The fast path (crates/core/src/alerting/, its alert names per trend scope in crates/core/src/scopes.rs) links its
    // own alerts to the same document.
    let mut files: Vec<PathBuf> = std::fs::read_dir(repository().join("crates/core/src/alerting"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.push(repository().join("crates/core/src/scopes.rs"));
    let fast_path = files.iter().map(|f| std::fs::read_to_string(f).unwrap()).collect::<Vec<_>>().join("\n");
    let fast: Vec<&str> = fast_path
        .split('"')
        .filter(|s| s.starts_with("Memlock") && s.chars().all(|c| c.is_ascii_alphanumeric()))
        .collect();
    assert!(!fast.is_empty());
    for alert in fast {
        assert!(
            runbooks.lines().any(|l| l == format!("## {alert}")),
            "docs/runbooks.md has no `## {alert}` (fast path)"
        );
        assert!(!alerts.contains(&alert), "{alert} is both a Prometheus rule and a fast-path alert");
    }
}

/// The fast path's defaults (crates/core/src/config/, and the scopes' floors in crates/core/src/scopes.rs) against
/// alerts/thresholds.yml: a fast-path alert and the Prometheus rule it stands beside must not
/// call one condition at two levels, unless the difference is listed below with its reason.
#[test]
fn the_fast_paths_defaults_agree_with_thresholds_yml() {
    use memlock_core::scopes::SCOPES;
    use memlock_core::trend::Scope;
    let text = std::fs::read_to_string(repository().join("alerts/thresholds.yml")).unwrap();
    let thresholds: std::collections::BTreeMap<&str, &str> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k, v.trim().trim_matches('"')))
        .collect();
    let number = |key: &str| -> f64 {
        let value = thresholds.get(key).unwrap_or_else(|| panic!("alerts/thresholds.yml has no {key}"));
        value.parse().unwrap_or_else(|_| panic!("{key}: {value} is not a number"))
    };
    let sources = memlock_core::config::Sources { file: None, env: Some(Default::default()), flags: Vec::new() };
    let config = memlock_core::config::load(&sources).expect("the defaults are valid");
    let floor = |scope: Scope| SCOPES.iter().find(|d| d.scope == scope).unwrap().page_min_ratio;
    let alerting = &config.alerting;
    // (fast path, its value, the rule's threshold) that must be equal.
    let same = [
        (
            "MemlockProcessNearLimitFast: alerting.usage_ratio_warning",
            alerting.usage_ratio_warning,
            "process_near_limit_ratio",
        ),
        (
            "MemlockCgroupNearMemoryLimitFast: alerting.usage_ratio_warning",
            alerting.usage_ratio_warning,
            "cgroup_near_limit_ratio",
        ),
        (
            "MemlockProcessLimitExhaustionImminent: the process floor",
            floor(Scope::Process),
            "process_exhaustion_min_ratio",
        ),
    ];
    for (what, fast, key) in same {
        assert_eq!(fast, number(key), "{what} is {fast}, alerts/thresholds.yml {key} is {}", number(key));
    }
    // The node's: the fast path pages from half of MemTotal minus the floor in use, the rule from
    // MemAvailable under half of MemTotal.
    let node = 1.0 - number("node_available_falling_max_available_ratio");
    assert_eq!(floor(Scope::Node), node, "MemlockNodeMemoryExhaustionImminent's floor against the rule's");
    assert_eq!(alerting.runbook_url, thresholds["runbook_base_url"], "alerting.runbook_url");
    // Different on purpose; a change on either side fails here until this list says why.
    let differ = [
        // One floor for every scope of the fast path (its guard against one step read as a ramp,
        // measured with the healthy patterns in docs/benchmarks.md); the rule's 30m prediction of a
        // cgroup's working set, which page cache makes noisier, starts higher.
        (
            "MemlockCgroupMemoryExhaustionImminent: the cgroup floor",
            floor(Scope::Cgroup),
            0.5,
            "cgroup_exhaustion_min_ratio",
            0.6,
        ),
        // Seconds ahead from 1 s samples against an hour ahead from 15m of scrapes.
        (
            "alerting.exhaustion_critical_seconds",
            alerting.exhaustion_critical.as_secs_f64(),
            120.0,
            "process_exhaustion_horizon_seconds",
            3600.0,
        ),
    ];
    for (what, fast, fast_listed, key, rule_listed) in differ {
        assert_eq!((fast, number(key)), (fast_listed, rule_listed), "{what} against {key}: update this list");
    }
}
