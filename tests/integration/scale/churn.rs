//! Generated churn: a generated host whose processes and cgroups are replaced while the
//! exporter samples them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::synthetic;
use crate::util::{Exporter, Metrics};

use super::{
    assert_bounded, assert_clean, assert_fresh, assert_memory_flat, container_of, env_or, family_count, heap_medians,
    host_with_fixture_node_files, label_values, mib, status_kib, thread_count, Scratch, HEAP_GROWTH_ALLOWED,
};
/// Replaces processes and cgroups of a generated host while the exporter samples them every
/// 100 ms, the way the kernel does: a new pid or cgroup appears whole (renamed into place from a
/// staging directory), a vanished one disappears whole.
struct Churn {
    stop: Arc<AtomicBool>,
    replaced: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Churn {
    fn start(root: PathBuf, procfs: PathBuf, memory: PathBuf, processes: u32, pods: usize) -> Churn {
        let stop = Arc::new(AtomicBool::new(false));
        let replaced = Arc::new(AtomicU64::new(0));
        let (stop_flag, count) = (stop.clone(), replaced.clone());
        let thread = std::thread::spawn(move || {
            let staging = root.join("staging");
            std::fs::create_dir_all(&staging).unwrap();
            // Live pids and pod indexes, oldest first.
            let mut pids: std::collections::VecDeque<u32> = (0..processes).map(|i| 100_000 + i).collect();
            let mut live_pods: std::collections::VecDeque<usize> = (0..pods).collect();
            let (mut next_pid, mut next_pod) = (100_000 + processes, pods);
            while !stop_flag.load(Ordering::Relaxed) {
                // A tenth of the processes and of the pods per round.
                for _ in 0..(processes / 10).max(1) {
                    let old = pids.pop_front().unwrap();
                    let gone = staging.join(format!("gone-{old}"));
                    std::fs::rename(procfs.join(old.to_string()), &gone).unwrap();
                    std::fs::remove_dir_all(&gone).unwrap();
                    let pod = *live_pods.get(next_pid as usize % live_pods.len()).unwrap();
                    let (name, pinned) = synthetic::process_mix(next_pid);
                    synthetic::write_process(&staging, next_pid, name, pinned, &synthetic::container_path(pod, 0))
                        .unwrap();
                    std::fs::rename(staging.join(next_pid.to_string()), procfs.join(next_pid.to_string())).unwrap();
                    pids.push_back(next_pid);
                    next_pid += 1;
                }
                for _ in 0..(pods / 10).max(1) {
                    let old = live_pods.pop_front().unwrap();
                    let gone = staging.join(format!("gone-pod-{old}"));
                    std::fs::rename(memory.join(&synthetic::pod_path(old)[1..]), &gone).unwrap();
                    std::fs::remove_dir_all(&gone).unwrap();
                    let fresh = staging.join("pod");
                    synthetic::write_memory_cgroup(&fresh, 3 << 20, 1 << 30).unwrap();
                    for container in 0..3 {
                        let dir =
                            fresh.join(Path::new(&synthetic::container_path(next_pod, container)).file_name().unwrap());
                        synthetic::write_memory_cgroup(&dir, 1 << 20, 1 << 30).unwrap();
                    }
                    std::fs::rename(&fresh, memory.join(&synthetic::pod_path(next_pod)[1..])).unwrap();
                    live_pods.push_back(next_pod);
                    next_pod += 1;
                }
                count.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Churn { stop, replaced, thread: Some(thread) }
    }

    /// Rounds so far (each replaces a tenth of the processes and of the pods).
    fn rounds(&self) -> u64 {
        self.replaced.load(Ordering::Relaxed)
    }

    fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the churn thread panicked");
        }
        self.replaced.load(Ordering::Relaxed)
    }
}

impl Drop for Churn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[test]
fn churn_of_a_generated_host_keeps_memory_series_and_trends_flat() {
    crate::require!(crate::util::scale_tests_enabled(), "a scale test: MEMLOCK_SCALE_TESTS=1 runs it");
    const PROCESSES: u32 = 600;
    const PODS: usize = 100;
    let samples: f64 = env_or("SCALE_CHURN_SAMPLES", 600.0);
    let scratch = Scratch::new("churn");
    let (procfs, sysfs) = host_with_fixture_node_files(&scratch.0);
    let memory = sysfs.join("fs/cgroup/memory");
    synthetic::write_kubepods(&memory, PODS, 3).unwrap();
    synthetic::write_procfs(&procfs, 100_000, PROCESSES, |i| container_of(i, PODS)).unwrap();
    let cgroups = 4 + PODS * 4;

    let mut env: Vec<(String, String)> = Vec::new();
    for name in
        ["NODE", "NUMA", "PROCESS", "CGROUP", "RDMA_SYSFS", "RDMA_NETLINK", "RDMA_CAPS", "SOFTWARE", "LAUNCHERS"]
    {
        env.push((format!("MEMLOCK_EXPORTER_COLLECTOR__{name}__INTERVAL"), "100ms".into()));
    }
    for name in ["PROCESS", "CGROUP"] {
        env.push((format!("MEMLOCK_EXPORTER_COLLECTOR__{name}__FULL_SCAN_INTERVAL"), "100ms".into()));
    }
    // Every process passes the filter: all are exported (top_n 1000), each is a trend scope.
    env.push(("MEMLOCK_EXPORTER_COLLECTOR__PROCESS__MIN_BYTES".into(), "0".into()));
    env.push(("MEMLOCK_EXPORTER_COLLECTOR__PROCESS__TOP_N".into(), "1000".into()));
    // And no series budget: every process and cgroup has its series while the churn replaces them.
    env.push(("MEMLOCK_EXPORTER_SERIES__LIMIT".into(), "0".into()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut exporter = Exporter::start_with_env(
        &["--path.procfs", procfs.to_str().unwrap(), "--path.sysfs", sysfs.to_str().unwrap()],
        &env,
    );
    // Every process and cgroup exported, without a series limit: a debug build's scrape of it
    // took over 10 s once at a load of 12 (the bound on staleness is assert_fresh's, not this).
    exporter.timeout = Duration::from_secs(40);
    let pid = exporter.child.id();
    exporter.wait_metrics(Duration::from_secs(60), "a first trend", |m| {
        family_count(m, "memlock_trend_rise_bytes_per_second") > 0
    });

    let churn = Churn::start(scratch.0.clone(), procfs.clone(), memory.clone(), PROCESSES, PODS);
    let first_scans = exporter.metrics().value("memlock_process_full_scans_total");
    let (mut warmed_up, mut warm_threads, mut warm_rounds, mut rss_max) = (false, 0, 0, 0u64);
    // The heap in use at every scrape from the warm-up on.
    let mut heap_samples: Vec<f64> = Vec::new();
    let mut scrapes = 0;
    let started = Instant::now();
    loop {
        let m = exporter.metrics();
        let done = m.value("memlock_process_full_scans_total") - first_scans;
        let context = format!("after {done} process samples");
        assert_clean(&m, &context);
        assert_fresh(&m, 10.0, &context);
        assert_bounded(&m, 1000, cgroups, &context);
        // Vanished pids are not exported: at most the live ones plus those created since.
        let exported = m.value("memlock_process_exported_processes") as u32;
        assert!(exported <= PROCESSES + PROCESSES / 10, "{context}: {exported} exported of {PROCESSES} live");
        let walked = m.value("memlock_cgroup_scan_cgroups_walked") as usize;
        assert!(walked <= cgroups + 4 * (PODS / 10), "{context}: {walked} cgroups walked of {cgroups}");
        let rss = status_kib(pid, "VmRSS");
        rss_max = rss_max.max(rss);
        // The warm-up is the first fifth, and at least the first 36 s: allocator pools and maps
        // reach their working size, and the trend series of the scopes that live through the
        // churn fill their 30 s window (sampled every 100 ms here) until then.
        if !warmed_up && done >= (samples / 5.0).max(360.0) {
            warmed_up = true;
            warm_threads = thread_count(pid);
            warm_rounds = churn.rounds();
        }
        if warmed_up {
            heap_samples.push(m.value("memlock_exporter_heap_allocated_bytes"));
        }
        scrapes += 1;
        if done >= samples {
            break;
        }
        // 100 ms per sample when the scan keeps up; five times that is a stall, not slowness.
        assert!(
            started.elapsed().as_secs_f64() < 60.0 + samples * 0.5,
            "{context}: too slow:\n{}",
            exporter.log_text()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let rounds = churn.finish();
    let m = exporter.metrics();
    heap_samples.push(m.value("memlock_exporter_heap_allocated_bytes"));
    let (warm_heap, end_heap) = heap_medians(&heap_samples);
    eprintln!(
        "churn: {samples} process samples in {:.0?}, {rounds} churn rounds ({} processes and {} cgroups replaced), \
            {scrapes} scrapes; heap in use after warm-up {:.2} MiB, at the end {:.2} MiB (medians of 8 scrapes); \
            VmRSS max {rss_max} KiB, VmHWM {} KiB; {} vanished mid-scan",
        started.elapsed(),
        rounds * u64::from(PROCESSES / 10),
        rounds * 4 * (PODS as u64 / 10),
        mib(warm_heap),
        mib(end_heap),
        status_kib(pid, "VmHWM"),
        m.value("memlock_process_vanished_total"),
    );
    assert!(
        rounds * u64::from(PROCESSES / 10) > 2 * u64::from(PROCESSES),
        "the churn replaced too few processes ({rounds} rounds)"
    );
    // Nothing kept per vanished pid, cgroup or trend scope. The bound means something only if
    // enough was replaced after the warm-up: at least 5,000 processes (and 3,333 cgroups), so
    // that about 200 bytes kept for each would exceed it (runs here replace over 20,000: about
    // 45 bytes each).
    let replaced_since_warm_up = (rounds - warm_rounds) * u64::from(PROCESSES / 10);
    eprintln!(
        "churn: {replaced_since_warm_up} processes replaced after the warm-up: the heap bound is {:.0} bytes each",
        HEAP_GROWTH_ALLOWED / replaced_since_warm_up.max(1) as f64
    );
    assert!(replaced_since_warm_up >= 5_000, "only {replaced_since_warm_up} processes replaced after the warm-up");
    assert_memory_flat((warm_heap, end_heap), rss_max);
    assert_eq!(thread_count(pid), warm_threads, "threads");

    // Once the churn stops, a full scan later only live pids and cgroups have series (each
    // collector's next run after the last removal: wait for it rather than race it).
    let live_pids: BTreeSet<String> = std::fs::read_dir(&procfs)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .collect();
    let cgroup_trends = |m: &Metrics| {
        let scopes =
            Metrics::parse(&m.text.lines().filter(|l| l.contains("scope=\"cgroup\"")).collect::<Vec<_>>().join("\n"));
        label_values(&scopes, "memlock_trend_", "cgroup")
    };
    let removed = |path: &String| !memory.join(path.trim_start_matches('/')).is_dir();
    let m = exporter.wait_metrics(Duration::from_secs(30), "series of live pids and cgroups only", |m| {
        label_values(m, "memlock_", "pid").iter().all(|p| live_pids.contains(p))
            && !cgroup_trends(m).iter().any(removed)
    });
    assert!(!cgroup_trends(&m).is_empty(), "cgroup trends after the churn");
    assert_bounded(&m, 1000, cgroups, "after the churn");
}
