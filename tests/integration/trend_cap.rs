//! Past the cap of 20,000 trend scopes a new scope still gets its trend, so a job starting on
//! a node whose tracker is full gets its critical page, not only the warning. Here a
//! generated host (8,300 processes holding both counters, 4,504 limited cgroups: about 21,000
//! scopes) fills the tracker, then a job's VmPin ramps towards its 8 MiB limit. The job must get
//! its trend (its exhaustion series, what the critical page is made of) while the tracker stays
//! at its cap, evicting, counting and logging others.

use std::cell::Cell;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::synthetic;
use crate::util::{Exporter, Metrics};

const CROWD: u32 = 8_300;
const PODS: usize = 1_500;
const JOB_PID: u32 = 900_000;
const MAX_SCOPES: f64 = 20_000.0;

/// The job's files, written in `stage` and moved into `procfs` by renames (a whole directory the
/// first time, then `status`), so a scan never reads half a file.
fn write_job(procfs: &Path, stage: &Path, pinned_kib: u64) {
    synthetic::write_process(stage, JOB_PID, "python3", pinned_kib, &synthetic::container_path(0, 0)).unwrap();
    let (staged, live) = (stage.join(JOB_PID.to_string()), procfs.join(JOB_PID.to_string()));
    if live.exists() {
        std::fs::rename(staged.join("status"), live.join("status")).unwrap();
    } else {
        std::fs::rename(&staged, &live).unwrap();
    }
}

#[test]
fn a_job_starting_on_a_node_with_a_full_trend_tracker_gets_its_trend() {
    let tmp = tempfile::Builder::new().prefix("memlock-trend-cap-").tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let (procfs, sysfs) = crate::scale::host_with_fixture_node_files(&root);
    synthetic::write_kubepods(&sysfs.join("fs/cgroup/memory"), PODS, 2).unwrap();
    // A crowd holding 64 KiB in each counter: two trend scopes a process.
    for i in 0..CROWD {
        let pid = 100_000 + i;
        synthetic::write_process(&procfs, pid, "worker", 64, &synthetic::container_path(i as usize % PODS, 0)).unwrap();
        let status = procfs.join(pid.to_string()).join("status");
        let text = std::fs::read_to_string(&status).unwrap().replace("VmLck:\t       0 kB", "VmLck:\t      64 kB");
        std::fs::write(&status, text).unwrap();
    }
    let env = [
        ("MEMLOCK_EXPORTER_COLLECTOR__PROCESS__INTERVAL", "250ms"),
        ("MEMLOCK_EXPORTER_COLLECTOR__PROCESS__FULL_SCAN_INTERVAL", "2s"),
        ("MEMLOCK_EXPORTER_COLLECTOR__CGROUP__INTERVAL", "1s"),
        ("MEMLOCK_EXPORTER_COLLECTOR__CGROUP__FULL_SCAN_INTERVAL", "2s"),
    ];
    let mut exporter = Exporter::start_with_env(
        &[
            "--path.procfs",
            procfs.to_str().unwrap(),
            "--path.sysfs",
            sysfs.to_str().unwrap(),
            "--no-collector.rdma_netlink",
        ],
        &env,
    );
    // A debug build renders this host's snapshot in seconds under load.
    exporter.timeout = Duration::from_secs(40);
    // Full: a 64th of the cap is evicted at once to make room, so within that of it.
    let full = exporter.wait_metrics(Duration::from_secs(180), "a full tracker", |m| {
        m.get("memlock_trend_scopes").is_some_and(|n| n >= MAX_SCOPES - MAX_SCOPES / 64.0)
    });
    let evicted_before = full.get("memlock_trend_scopes_evicted_total").unwrap_or(0.0);

    // The job: 1 MiB, then 256 KiB more a step up to 7.5 MiB of its 8 MiB. A step follows once
    // a scrape shows the exporter read the one before: a ramp on the test's clock alone could
    // end before a process collector slowed by other work on the machine read it three times.
    let job = format!("memlock_trend_exhaustion_seconds{{scope=\"process\",pid=\"{JOB_PID}\"");
    let job_pid = format!("pid=\"{JOB_PID}\"");
    let job_pinned = |m: &Metrics| {
        m.family("memlock_process_pinned_bytes").into_iter().find(|(k, _)| k.contains(&job_pid)).map(|(_, v)| v)
    };
    let (trend_seen, scopes_max) = (Cell::new(None), Cell::new(0.0f64));
    let started = Instant::now();
    let mut pinned_kib = 1024;
    while pinned_kib <= 7 * 1024 + 512 {
        write_job(&procfs, &root.join("stage"), pinned_kib);
        exporter.wait_metrics(
            Duration::from_secs(120),
            &format!("the exporter to read the job at {pinned_kib} KiB"),
            |m| {
                scopes_max.set(scopes_max.get().max(m.value("memlock_trend_scopes")));
                if trend_seen.get().is_none()
                    && m.series.keys().any(|k| k.starts_with(&job) && k.contains("counter=\"pinned\""))
                {
                    trend_seen.set(Some((started.elapsed(), pinned_kib)));
                }
                job_pinned(m) == Some((pinned_kib * 1024) as f64)
            },
        );
        pinned_kib += 256;
    }
    let (trend_seen, scopes_max) = (trend_seen.get(), scopes_max.get());
    let m = exporter.metrics();
    let evicted = m.get("memlock_trend_scopes_evicted_total").unwrap_or(0.0) - evicted_before;
    eprintln!(
        "full tracker ({} scopes, {evicted_before} evicted before the job): the job's trend after {trend_seen:?} \
            (time, KiB pinned); {evicted} more evicted during its ramp; scopes at most {scopes_max}",
        full.value("memlock_trend_scopes")
    );
    assert!(trend_seen.is_some(), "the job never got a trend:\n{}", exporter.log_text());
    assert!(scopes_max <= MAX_SCOPES, "the tracker grew past its cap: {scopes_max}");
    assert!(evicted > 0.0, "nothing was evicted while the crowd kept its scopes");
    assert!(exporter.log_text().contains("trend tracker full"), "the eviction is logged");
}
