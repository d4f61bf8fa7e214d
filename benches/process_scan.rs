//! Cost of the process collector: CPU time per process for a full scan of a synthetic procfs
//! of 10,000 processes (real file formats), compared in the same run with a baseline that only
//! lists the directory and reads the same files without parsing; the cost of a tracked-only
//! pass; the same on this machine's real /proc; and the peak resident memory.
//!
//! `cargo bench --bench process_scan` (set MEMLOCK_BENCH_PROCESSES to change the tree size).
//! Exits with status 1 when a target is missed: <= 25 us CPU per process, <= 2x the baseline.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use memlock_exporter::collect::process::ProcessCollector;
use memlock_exporter::config::{self, ProcessConfig, Sources};
use memlock_exporter::fsroot::Roots;

#[path = "../tests/synthetic/mod.rs"]
mod synthetic;

const ITERATIONS: usize = 15;
const TARGET_US_PER_PROCESS: f64 = 25.0;
const TARGET_RATIO: f64 = 2.0;

/// CPU time of the whole process (user + system: the syscalls count), in seconds.
fn cpu_seconds() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn cpu_time_of(mut run: impl FnMut()) -> f64 {
    let start = cpu_seconds();
    run();
    cpu_seconds() - start
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Writes `processes` pid directories in the kernel's formats: 1% pinning (RDMA workers),
/// 1% named python3 (caught by the default comm pattern), spread over 100 cgroups.
fn build_tree(root: &Path, processes: u32) {
    synthetic::write_procfs(root, 1000, processes, |i| format!("/kubepods/burstable/pod{:032x}", i % 100))
        .expect("write the bench tree");
}

/// The floor: list the directory and read every pid's three files (open, read to EOF into a
/// fixed buffer, close: no size probe, no allocation), with nothing parsed or kept.
fn baseline(procfs: &Path, buf: &mut [u8; 8192]) -> usize {
    let mut bytes = 0;
    let mut path = PathBuf::new();
    for entry in std::fs::read_dir(procfs).expect("list procfs").flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        for file in ["status", "limits", "cgroup"] {
            path.clear();
            path.push(procfs);
            path.push(name);
            path.push(file);
            if let Ok(mut f) = File::open(&path) {
                while let Ok(n @ 1..) = f.read(buf) {
                    bytes += n;
                }
            }
        }
    }
    bytes
}

fn default_process_config() -> ProcessConfig {
    let sources = Sources { file: None, env: Some(BTreeMap::new()), flags: Vec::new() };
    config::load(&sources).expect("built-in defaults are valid").process
}

struct Figures {
    scan_us_per_process: f64,
    baseline_us_per_process: f64,
    tracked_pass_us: f64,
    tracked: u64,
    scanned: u64,
}

fn measure(procfs: &Path, listed: usize) -> Figures {
    let roots = Roots { procfs: procfs.to_owned(), sysfs: PathBuf::from("/sys") };
    let mut collector = ProcessCollector::new(&roots, default_process_config(), Duration::from_secs(1));
    let mut errors = Vec::new();
    let mut buf = [0u8; 8192];
    // Warm the page cache and the collector's tables (steady state is what runs every 5 s).
    let warm = collector.full_scan(&mut errors).expect("procfs lists");
    baseline(procfs, &mut buf);
    let mut scans = Vec::new();
    let mut baselines = Vec::new();
    let mut tracked_passes = Vec::new();
    let mut last = warm;
    // Interleaved so that drift (cache, frequency) hits both alike.
    for _ in 0..ITERATIONS {
        baselines.push(cpu_time_of(|| {
            std::hint::black_box(baseline(procfs, &mut buf));
        }));
        scans.push(cpu_time_of(|| {
            last = collector.full_scan(&mut errors).expect("procfs lists");
        }));
        tracked_passes.push(cpu_time_of(|| {
            std::hint::black_box(collector.tracked_pass(&mut errors));
        }));
    }
    let real_errors: Vec<_> = errors.iter().filter(|e| !e.is_not_found()).collect();
    if !real_errors.is_empty() {
        eprintln!("note: {} read errors, first: {}", real_errors.len(), real_errors[0]);
    }
    let per_process = |seconds: f64| seconds * 1e6 / listed.max(1) as f64;
    Figures {
        scan_us_per_process: per_process(median(scans)),
        baseline_us_per_process: per_process(median(baselines)),
        tracked_pass_us: median(tracked_passes) * 1e6,
        tracked: last.tracked,
        scanned: last.scanned,
    }
}

fn numeric_entries(procfs: &Path) -> usize {
    std::fs::read_dir(procfs)
        .map(|dir| {
            dir.flatten()
                .filter(|e| e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())))
                .count()
        })
        .unwrap_or(0)
}

fn main() {
    let processes: u32 = std::env::var("MEMLOCK_BENCH_PROCESSES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let root = std::env::temp_dir().join(format!("memlock-bench-procfs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    build_tree(&root, processes);

    let synthetic = measure(&root, processes as usize);
    let _ = std::fs::remove_dir_all(&root);
    let ratio = synthetic.scan_us_per_process / synthetic.baseline_us_per_process;
    println!(
        "process scan, synthetic procfs of {processes} processes (ext4/page cache), median of {ITERATIONS} runs, \
        CPU time:"
    );
    println!(
        "  full scan:        {:>7.2} us per process ({:.1} ms per scan)",
        synthetic.scan_us_per_process,
        synthetic.scan_us_per_process * processes as f64 / 1e3
    );
    println!("  baseline (read):  {:>7.2} us per process", synthetic.baseline_us_per_process);
    println!("  ratio:            {ratio:>7.2}x the baseline");
    println!(
        "  tracked pass:     {:>7.1} us for {} tracked of {} processes ({:.2} us per tracked process)",
        synthetic.tracked_pass_us,
        synthetic.tracked,
        synthetic.scanned,
        synthetic.tracked_pass_us / synthetic.tracked.max(1) as f64
    );

    let proc_root = Path::new("/proc");
    let listed = numeric_entries(proc_root);
    let real = measure(proc_root, listed);
    println!(
        "process scan, this machine's /proc ({listed} pids, {} user processes), median of {ITERATIONS} runs, CPU time:",
        real.scanned
    );
    println!("  full scan:        {:>7.2} us per pid", real.scan_us_per_process);
    println!("  baseline (read):  {:>7.2} us per pid", real.baseline_us_per_process);
    println!("  ratio:            {:>7.2}x the baseline", real.scan_us_per_process / real.baseline_us_per_process);
    println!("  tracked pass:     {:>7.1} us for {} tracked processes", real.tracked_pass_us, real.tracked);

    println!(
        "peak RSS of the benchmark process (VmHWM): {} KiB",
        synthetic::status_kib("/proc/self/status", "VmHWM").unwrap_or(0)
    );

    let mut missed = Vec::new();
    if synthetic.scan_us_per_process > TARGET_US_PER_PROCESS {
        missed.push(format!("{:.2} us per process > {TARGET_US_PER_PROCESS} us", synthetic.scan_us_per_process));
    }
    if ratio > TARGET_RATIO {
        missed.push(format!("{ratio:.2}x the baseline > {TARGET_RATIO}x"));
    }
    if missed.is_empty() {
        println!("targets met: <= {TARGET_US_PER_PROCESS} us CPU per process, <= {TARGET_RATIO}x the baseline");
    } else {
        println!("TARGETS MISSED: {}", missed.join("; "));
        std::process::exit(1);
    }
}
