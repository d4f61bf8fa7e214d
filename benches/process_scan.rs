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

use memlock_core::collect::process::ProcessCollector;
use memlock_core::config::{self, ProcessConfig, Sources};
use memlock_core::snapshot::{Report, SeriesLimit, Snapshot};
use memlock_kernel::fsroot::{self, Roots};
use memlock_kernel::versions;

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
    let config = config::load(&sources).expect("built-in defaults are valid");
    config.settings::<ProcessConfig>("process").expect("the process collector is registered").clone()
}

struct Figures {
    scan_us_per_process: f64,
    baseline_us_per_process: f64,
    tracked_pass_us: f64,
    tracked: u64,
    scanned: u64,
    exported: usize,
    /// The full scan's snapshot rendered to text under the default `series.limit` (500), and
    /// without a limit: ranking, the series budget and the exposition of the process collector.
    render_limited_us: f64,
    render_unlimited_us: f64,
}

/// Renders a snapshot holding `stats` as a scrape would, with `limit` series at most (0: none).
fn render(stats: &memlock_core::collect::Data, limit: usize) -> usize {
    let report = Report {
        collector: "process",
        success: true,
        duration: Duration::ZERO,
        finished: std::time::Instant::now(),
        data: Some(stats.clone()),
        interval: Duration::from_secs(1),
        trends: std::sync::Arc::new(Vec::new()),
    };
    Snapshot::with_series_limit(vec![report], SeriesLimit { limit, registry: None }).text().len()
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
    let (mut limited, mut unlimited) = (Vec::new(), Vec::new());
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
        let data: memlock_core::collect::Data = std::sync::Arc::new(last.clone());
        limited.push(cpu_time_of(|| {
            std::hint::black_box(render(&data, 500));
        }));
        unlimited.push(cpu_time_of(|| {
            std::hint::black_box(render(&data, 0));
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
        exported: last.processes.len(),
        render_limited_us: median(limited) * 1e6,
        render_unlimited_us: median(unlimited) * 1e6,
    }
}

/// Areas in each pinning process's `maps`: a PyTorch rank with CUDA and NCCL maps a few thousand.
const MAPS_AREAS: usize = 4000;

/// Gives every pinning process of the tree (1 in 100) a `maps` with NCCL mapped.
fn add_maps(root: &Path, processes: u32) {
    for i in 0..processes {
        if synthetic::process_mix(i).1 > 0 {
            let dir = root.join((1000 + i).to_string());
            synthetic::write_maps(&dir, MAPS_AREAS, Some("/opt/venv/lib/nccl/libnccl.so.2.21.5")).expect("write maps");
        }
    }
}

struct NcclFigures {
    /// A new collector's first full scan and the tracked passes after it until every pinning
    /// process's maps was read once (two per pass): the whole lookup.
    first_passes_without_ms: f64,
    first_passes_with_ms: f64,
    passes: usize,
    /// A later full scan and a tracked pass: nothing more is read.
    later_scan_without_ms: f64,
    later_scan_with_ms: f64,
    tracked_without_us: f64,
    tracked_with_us: f64,
    maps_read: usize,
}

/// The NCCL lookup against the plain scan, interleaved in the same run: a collector with
/// `nccl_version` off and one with it on, each new for every iteration.
fn measure_nccl(procfs: &Path, pinning: usize) -> NcclFigures {
    let roots = Roots { procfs: procfs.to_owned(), sysfs: PathBuf::from("/sys") };
    let collector = |nccl_version: bool| {
        ProcessCollector::new(
            &roots,
            ProcessConfig { nccl_version, ..default_process_config() },
            Duration::from_secs(1),
        )
    };
    let mut errors = Vec::new();
    let (mut first, mut later, mut tracked) =
        ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
    let mut maps_read = 0;
    // One full scan, then tracked passes until two maps a pass have covered every pinning process.
    let passes = pinning.div_ceil(2);
    collector(true).full_scan(&mut errors);
    for _ in 0..ITERATIONS {
        for (slot, nccl_version) in [(0, false), (1, true)] {
            let mut c = collector(nccl_version);
            let mut stats = None;
            first[slot].push(cpu_time_of(|| {
                c.full_scan(&mut errors);
                for _ in 1..passes {
                    stats = Some(c.tracked_pass(&mut errors));
                }
            }));
            if nccl_version {
                let stats = stats.expect("tracked passes ran");
                maps_read = stats.processes.iter().filter(|p| p.nccl.is_some()).count();
                assert_eq!(maps_read, pinning, "every pinning process labelled after {passes} passes");
                assert!(stats
                    .processes
                    .iter()
                    .filter_map(|p| p.nccl.as_ref())
                    .all(|n| n.version.as_deref() == Some("2.21.5")));
            }
            later[slot].push(cpu_time_of(|| {
                std::hint::black_box(c.full_scan(&mut errors));
            }));
            tracked[slot].push(cpu_time_of(|| {
                std::hint::black_box(c.tracked_pass(&mut errors));
            }));
        }
    }
    let [fw, fn_] = first.map(median);
    let [lw, ln] = later.map(median);
    let [tw, tn] = tracked.map(median);
    NcclFigures {
        first_passes_without_ms: fw * 1e3,
        first_passes_with_ms: fn_ * 1e3,
        passes,
        later_scan_without_ms: lw * 1e3,
        later_scan_with_ms: ln * 1e3,
        tracked_without_us: tw * 1e6,
        tracked_with_us: tn * 1e6,
        maps_read,
    }
}

/// On this machine's /proc: the CPU time of reading every process's `maps` as the NCCL lookup
/// does (line by line to the end: nothing here maps NCCL) against reading its `status`.
fn real_maps_cost(procfs: &Path) -> (usize, f64, f64, usize) {
    let pids: Vec<String> = std::fs::read_dir(procfs)
        .expect("list /proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str().filter(|n| n.bytes().all(|b| b.is_ascii_digit())).map(str::to_owned))
        .collect();
    let mut lines = 0;
    let mut status = Vec::new();
    let mut maps = Vec::new();
    for _ in 0..ITERATIONS {
        status.push(cpu_time_of(|| {
            for pid in &pids {
                let _ = std::hint::black_box(fsroot::read_string(&procfs.join(pid).join("status")));
            }
        }));
        maps.push(cpu_time_of(|| {
            lines = 0;
            for pid in &pids {
                let _ = fsroot::find_line(&procfs.join(pid).join("maps"), 16 << 20, |line| {
                    lines += 1;
                    versions::nccl_mapping(line)
                });
            }
        }));
    }
    let n = pids.len().max(1) as f64;
    (pids.len(), median(status) * 1e6 / n, median(maps) * 1e6 / n, lines / pids.len().max(1))
}

/// A real process with `areas` mappings (alternating protections, so the kernel cannot merge
/// them): the CPU time of reading its `/proc/PID/maps` through as the NCCL lookup does, against
/// reading its `status`, both interleaved.
fn real_large_maps(areas: usize) -> Option<(usize, f64, f64)> {
    use std::io::BufRead;
    let script = "import mmap, sys\nkeep = []\nfor i in range(int(sys.argv[1])):\n    \
        keep.append(mmap.mmap(-1, 4096, prot=mmap.PROT_READ if i % 2 else mmap.PROT_READ | mmap.PROT_WRITE))\n\
        print('ready', flush=True)\nsys.stdin.read()\n";
    let mut child = std::process::Command::new("python3")
        .args(["-c", script, &areas.to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .ok()?;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.as_mut()?).read_line(&mut line).ok()?;
    let dir = PathBuf::from(format!("/proc/{}", child.id()));
    let mut lines = 0;
    let (mut status, mut maps) = (Vec::new(), Vec::new());
    for _ in 0..ITERATIONS {
        status.push(cpu_time_of(|| {
            let _ = std::hint::black_box(fsroot::read_string(&dir.join("status")));
        }));
        maps.push(cpu_time_of(|| {
            lines = 0;
            let _ = fsroot::find_line(&dir.join("maps"), 16 << 20, |l| {
                lines += 1;
                versions::nccl_mapping(l)
            });
        }));
    }
    drop(child.stdin.take());
    let _ = child.wait();
    Some((lines, median(status) * 1e6, median(maps) * 1e6))
}

/// A real process holding 8 MiB locked with `areas` more mappings: the CPU time of reading its
/// `smaps_rollup` for the share of its locked pages (what the scan adds for a process with VmLck
/// above 0, once per VmLck change or 2 s), against reading its `status`, interleaved.
fn real_share_cost(areas: usize) -> Option<(f64, f64, u64)> {
    use std::io::BufRead;
    let script = "import ctypes, mmap, sys\nkeep = []\nfor i in range(int(sys.argv[1])):\n    \
        keep.append(mmap.mmap(-1, 4096, prot=mmap.PROT_READ if i % 2 else mmap.PROT_READ | mmap.PROT_WRITE))\n\
        locked = mmap.mmap(-1, 8 << 20)\nlibc = ctypes.CDLL(None)\n\
        libc.mlock(ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(locked))), ctypes.c_size_t(8 << 20))\n\
        print('ready', flush=True)\nsys.stdin.read()\n";
    let mut child = std::process::Command::new("python3")
        .args(["-c", script, &areas.to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .ok()?;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.as_mut()?).read_line(&mut line).ok()?;
    let dir = PathBuf::from(format!("/proc/{}", child.id()));
    let mut share = 0;
    let (mut status, mut rollup) = (Vec::new(), Vec::new());
    for _ in 0..ITERATIONS {
        status.push(cpu_time_of(|| {
            let _ = std::hint::black_box(fsroot::read_string(&dir.join("status")));
        }));
        rollup.push(cpu_time_of(|| {
            let text = fsroot::read_string(&dir.join("smaps_rollup")).unwrap_or_default();
            share = memlock_kernel::smaps_rollup::pss_locked(&text).ok().flatten().unwrap_or(0);
        }));
    }
    drop(child.stdin.take());
    let _ = child.wait();
    Some((median(status) * 1e6, median(rollup) * 1e6, share))
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
    add_maps(&root, processes);
    let nccl = measure_nccl(&root, (0..processes).filter(|&i| synthetic::process_mix(i).1 > 0).count());
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
    println!(
        "  render:           {:>7.1} us under series.limit 500, {:.1} us without a limit ({} exported of {} processes)",
        synthetic.render_limited_us, synthetic.render_unlimited_us, synthetic.exported, synthetic.scanned
    );

    println!(
        "NCCL version lookup (collector.process.nccl_version), same tree with a {MAPS_AREAS}-area maps for each of the \
        {} pinning processes, median of {ITERATIONS} runs, CPU time:",
        nccl.maps_read
    );
    println!(
        "  first {} passes:  {:>7.1} ms without, {:>7.1} ms with ({:+.1} ms, {:.0} us per maps read once)",
        nccl.passes,
        nccl.first_passes_without_ms,
        nccl.first_passes_with_ms,
        nccl.first_passes_with_ms - nccl.first_passes_without_ms,
        (nccl.first_passes_with_ms - nccl.first_passes_without_ms) * 1e3 / nccl.maps_read.max(1) as f64
    );
    println!(
        "  later full scan:  {:>7.1} ms without, {:>7.1} ms with (read once: nothing more)",
        nccl.later_scan_without_ms, nccl.later_scan_with_ms
    );
    println!("  tracked pass:     {:>7.1} us without, {:>7.1} us with", nccl.tracked_without_us, nccl.tracked_with_us);

    if let Some((lines, status_us, maps_us)) = real_large_maps(MAPS_AREAS) {
        println!(
            "  a real process of {lines} maps lines: status {status_us:.1} us, maps read through {maps_us:.0} us (the \
            kernel formats each line)"
        );
    }
    for areas in [0, MAPS_AREAS] {
        if let Some((status_us, rollup_us, share)) = real_share_cost(areas) {
            println!(
                "locked pages' share (smaps_rollup, read only where VmLck > 0), a real process holding 8 MiB locked \
                with {areas} more areas, median of {ITERATIONS} runs, CPU time: status {status_us:.1} us, \
                smaps_rollup {rollup_us:.1} us ({:.1}x; Locked: {} KiB)",
                rollup_us / status_us,
                share >> 10
            );
        }
    }
    let proc_root = Path::new("/proc");
    let (pids, status_us, maps_us, lines) = real_maps_cost(proc_root);
    println!(
        "this machine's /proc ({pids} pids, {lines} maps lines on average), median of {ITERATIONS} runs, CPU time per \
        pid: status {status_us:.1} us, maps read through for NCCL {maps_us:.1} us"
    );
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
