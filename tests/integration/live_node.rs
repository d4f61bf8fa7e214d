//! The node collector on this machine's real /proc: an mlock in a child process shows up in
//! `memlock_node_mlocked_bytes` in the next sample.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::{is_root, live_lock, meminfo_bytes, Exporter, MLOCK_HOLDER};

const LOCK_BYTES: u64 = 64 << 20;
/// Other processes on the machine lock and unlock a little on their own.
const TOLERANCE: f64 = 4.0 * 1024.0 * 1024.0;

#[test]
fn node_values_match_proc_meminfo() {
    let _guard = live_lock();
    let exporter = Exporter::start(&[]);
    let m = exporter.metrics();
    let total = meminfo_bytes("MemTotal") as f64;
    assert_eq!(m.value("memlock_node_memory_total_bytes"), total);
    assert_eq!(m.value("memlock_scrape_collector_success{collector=\"node\"}"), 1.0);
    assert_eq!(m.value("memlock_scrape_collector_success{collector=\"numa\"}"), 1.0);
    assert!(m.value("memlock_node_memory_available_bytes") > 0.0);
    assert!(m.get("memlock_node_pinned_bytes").is_some(), "6.x kernels have nr_foll_pin_*");
    let max_map_count: f64 = std::fs::read_to_string("/proc/sys/vm/max_map_count").unwrap().trim().parse().unwrap();
    assert_eq!(m.value("memlock_node_max_map_areas"), max_map_count);
}

/// The software collector on this machine: the kernel label is the real osrelease, each module
/// label says what /sys/module holds (this machine has no NVIDIA or RDMA driver: empty labels,
/// and GPUDirect off), and the collector succeeds.
#[test]
fn software_info_matches_this_machine() {
    let exporter = Exporter::start(&[]);
    let m = exporter.metrics();
    assert_eq!(m.value("memlock_scrape_collector_success{collector=\"software\"}"), 1.0);
    let series = m.family("memlock_node_software_info");
    assert_eq!(series.len(), 1, "{series:?}");
    let (labels, value) = series[0];
    assert_eq!(value, 1.0);
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert!(labels.contains(&format!("kernel=\"{}\"", release.trim())), "{labels}");
    for module in ["nvidia", "mlx5_core", "ib_core", "efa"] {
        let expected = match std::fs::read_to_string(format!("/sys/module/{module}/version")) {
            Ok(version) => version.trim().to_owned(),
            Err(_) if std::path::Path::new(&format!("/sys/module/{module}")).is_dir() => "unversioned".into(),
            Err(_) => String::new(),
        };
        assert!(labels.contains(&format!(",{module}=\"{expected}\"")), "{module}: {labels}");
    }
    let peermem = std::path::Path::new("/sys/module/nvidia_peermem/version").exists();
    assert!(labels.contains(if peermem { "gdr_mode=\"peermem\"" } else { "gdr_mode=\"off\"" }), "{labels}");
}

#[test]
fn mlock_in_a_child_raises_node_mlocked_bytes() {
    crate::require!(is_root(), "live tests need root (CAP_IPC_LOCK lets the child lock 64 MiB past the 8 MiB rlimit)");
    let _guard = live_lock();
    let exporter = Exporter::start(&["--no-collector.numa"]);
    let before = exporter.metrics().value("memlock_node_mlocked_bytes");

    // A child that locks 64 MiB and holds it until its stdin closes.
    let mut child = Command::new("python3")
        .args(["-c", MLOCK_HOLDER])
        .arg(LOCK_BYTES.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs the locking child");
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.as_mut().unwrap()), &mut line).unwrap();
    assert_eq!(line.trim(), "locked", "child failed to lock: {line}");

    let deadline = Instant::now() + Duration::from_secs(10);
    let mut during = before;
    while Instant::now() < deadline {
        during = exporter.metrics().value("memlock_node_mlocked_bytes");
        if (during - before - LOCK_BYTES as f64).abs() <= TOLERANCE {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(child.stdin.take());
    let _ = child.wait();
    assert!(
        (during - before - LOCK_BYTES as f64).abs() <= TOLERANCE,
        "mlocked rose by {} bytes, expected {LOCK_BYTES} +- {TOLERANCE}",
        during - before
    );
    // And falls back once the child has exited.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut after = during;
    while Instant::now() < deadline {
        after = exporter.metrics().value("memlock_node_mlocked_bytes");
        if (after - before).abs() <= TOLERANCE {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!((after - before).abs() <= TOLERANCE, "mlocked did not fall back: before {before}, after {after}");
}
