//! The failures collector on this machine: enabled where it cannot run, it says why in
//! `memlock_failures_supported{reason}` and fails its own run (`memlock_scrape_collector_success` 0,
//! an error naming tracefs and the reason), while the other collectors and the scrape stay
//! healthy. (Where it runs, in the soft-RoCE VM, scripts/e2e/vm_failures.sh with
//! scripts/e2e/vm/scenarios/failures.sh checks the refusals themselves.)

use std::process::Command;

use crate::util::{binary, command, is_root, Exporter, Metrics};

fn assert_reports(m: &Metrics, reason: &str) {
    assert_eq!(m.value(&format!("memlock_failures_supported{{reason=\"{reason}\"}}")), 0.0, "{}", m.text);
    assert_eq!(m.family("memlock_failures_supported").len(), 1, "{}", m.text);
    // It cannot trace: reporting success would read as "no refusals" on a node where none is seen.
    assert_eq!(m.value("memlock_scrape_collector_success{collector=\"failures\"}"), 0.0, "{}", m.text);
    let errors = "memlock_exporter_collector_errors_total{collector=\"failures\",kind=\"io\"}";
    assert!(m.value(errors) >= 1.0, "{}", m.text);
    for call in ["ib_umem_get", "do_mlock", "__io_account_mem", "user_shm_lock"] {
        assert_eq!(m.value(&format!("memlock_failures_probed{{call=\"{call}\"}}")), 0.0, "{call}");
    }
    assert!(m.family("memlock_registration_failures_total").is_empty(), "{}", m.text);
    // The other collectors are untouched.
    assert_eq!(m.value("memlock_scrape_collector_success{collector=\"node\"}"), 1.0);
}

/// What this host's tracefs offers where it is mounted: the reason expected, or None where the
/// kernel has kprobe events (the collector then runs: its refusals are tested in the VM).
fn expected_reason(tracefs: &std::path::Path) -> Option<&'static str> {
    if !tracefs.join("instances").is_dir() {
        Some("no_tracefs")
    } else if !tracefs.join("kprobe_events").exists() {
        Some("no_kprobe_events")
    } else {
        None
    }
}

#[test]
fn failures_collector_off_by_default_and_unsupported_here_says_why() {
    let exporter = Exporter::start(&[]);
    let m = exporter.metrics();
    assert!(m.family("memlock_failures_supported").is_empty(), "off by default: {}", m.text);
    drop(exporter);

    let exporter = Exporter::start(&["--collector.failures"]);
    let m = exporter.wait_metrics(std::time::Duration::from_secs(10), "the failures collector's first run", |m| {
        !m.family("memlock_failures_supported").is_empty()
            && m.get("memlock_failures_supported{reason=\"starting\"}").is_none()
    });
    let Some(reason) = expected_reason(std::path::Path::new("/sys/kernel/tracing")) else {
        crate::util::unmet(
            "this kernel has kprobe events: the collector runs here (scripts/e2e/vm_failures.sh tests it)",
        );
        return;
    };
    assert_reports(&m, reason);
    let log = exporter.log_text();
    assert!(log.contains("failures collector cannot run"), "{log}");
    assert!(log.contains(&format!("cannot run ({reason})")), "the reason, with tracefs named: {log}");
    assert_eq!(exporter.terminate().code(), Some(0));
}

/// tracefs mounted (in a mount namespace of the test's own, so the host is left as it was) on
/// a kernel without CONFIG_KPROBE_EVENTS: `no_kprobe_events`.
#[test]
fn with_tracefs_but_without_kprobe_events_the_reason_is_no_kprobe_events() {
    crate::require!(is_root(), "live tests need root (mounting tracefs in a mount namespace)");
    let probe = "mount -t tracefs nodev /sys/kernel/tracing && test -e /sys/kernel/tracing/kprobe_events";
    let has_kprobes = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", probe])
        .status()
        .expect("unshare");
    // Exit 1: mounted, no kprobe_events. Anything else (no tracefs at all, kprobes present) is
    // not this case.
    crate::require!(has_kprobes.code() == Some(1), "this test needs a kernel with tracefs and without kprobe events");
    let exporter_args = command(binary(), "127.0.0.1:0");
    let program = format!(
        "mount -t tracefs nodev /sys/kernel/tracing && exec {} {} --collector.failures",
        exporter_args.get_program().to_string_lossy(),
        exporter_args.get_args().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ")
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c", &program]);
    let exporter = Exporter::from_command(cmd);
    exporter.wait_ready();
    let m = exporter.wait_metrics(std::time::Duration::from_secs(10), "the failures collector's first run", |m| {
        !m.family("memlock_failures_supported").is_empty()
            && m.get("memlock_failures_supported{reason=\"starting\"}").is_none()
    });
    assert_reports(&m, "no_kprobe_events");
    assert_eq!(exporter.terminate().code(), Some(0));
}
