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
    // The fast path (src/alerting/mod.rs, and its page for traced refusals in
    // src/alerting/failures.rs) links its own alerts to the same document.
    let fast_path = ["src/alerting/mod.rs", "src/alerting/failures.rs"]
        .map(|f| std::fs::read_to_string(repository().join(f)).unwrap())
        .join("\n");
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
