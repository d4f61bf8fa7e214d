//! CPU cost of the cgroup collector at scale, against a plain read of the same files.
//!
//! Generates 5,000 cgroups in the cgroup v1 format (a hybrid host's memory hierarchy with
//! Kubernetes pods of three containers each) in a temporary directory, then measures, in CPU
//! time of the process (median of interleaved rounds):
//! - full walk: readdir of every cgroup plus the four files the collector reads, parsed;
//! - re-read: the ticks between walks, which read the known cgroups' files only;
//! - baseline: open, read and close of the same 4 x 5,000 files, nothing else;
//! - render: the collected data written in the Prometheus text format.
//!
//! Exits with status 1 when the full walk costs more than twice the baseline (the design's
//! target).
//!
//! `cargo bench --bench cgroup_scan`. With `MEMLOCK_BENCH_REAL_CGROUPS=N` (root, cgroup v1
//! memory at /sys/fs/cgroup/memory) it also measures N real, empty memory cgroups, whose files
//! the kernel formats on every read.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use memlock_core::collect::cgroup::CgroupCollector;
use memlock_core::config::CgroupConfig;
use memlock_core::exposition::Exposition;
use memlock_kernel::fsroot::Roots;

#[path = "../tests/synthetic/mod.rs"]
mod synthetic;

const PODS: usize = 1249;
const CONTAINERS_PER_POD: usize = 3;
const ROUNDS: usize = 15;
/// The design's target: a scan within 2x of a plain read of the same files.
const TARGET_RATIO: f64 = 2.0;
const FILES_READ: [&str; 4] = ["memory.usage_in_bytes", "memory.stat", "memory.failcnt", "memory.oom_control"];

fn process_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn cpu_of(work: &mut dyn FnMut()) -> Duration {
    let start = process_cpu();
    work();
    process_cpu() - start
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

/// Builds the tree and returns every cgroup directory.
fn generate(memory: &Path) -> Vec<PathBuf> {
    synthetic::write_kubepods(memory, PODS, CONTAINERS_PER_POD).expect("write the bench tree")
}

fn config(full_scan_interval: Duration) -> CgroupConfig {
    CgroupConfig { full_scan_interval, include: vec![], exclude: vec![], max_depth: 12 }
}

/// Measures one tree; `sysfs` holds `fs/cgroup/memory` (v1). Returns the full walk's ratio to
/// the baseline.
fn measure(label: &str, sysfs: &Path, dirs: &[PathBuf], rounds: usize) -> f64 {
    let cgroups = dirs.len() as f64;
    let roots = Roots { procfs: PathBuf::from("/proc"), sysfs: sysfs.to_owned() };
    let mut errors = Vec::new();

    let mut walking = CgroupCollector::new(roots.clone(), config(Duration::ZERO));
    let mut exported = 0;
    let mut walk = || {
        errors.clear();
        exported = walking.read(&mut errors).memory.len();
    };
    let mut rereading = CgroupCollector::new(roots, config(Duration::from_secs(3600)));
    let mut reread_errors = Vec::new();
    // Shared by the re-read (which replaces it) and the render (which reads it).
    let stats = std::cell::RefCell::new(rereading.read(&mut reread_errors));
    let mut reread = || *stats.borrow_mut() = rereading.read(&mut reread_errors);
    let paths: Vec<PathBuf> = dirs.iter().flat_map(|d| FILES_READ.iter().map(move |f| d.join(f))).collect();
    let mut buf = Vec::with_capacity(4096);
    let mut baseline = || {
        for path in &paths {
            buf.clear();
            let mut file = std::fs::File::open(path).unwrap();
            file.read_to_end(&mut buf).unwrap();
        }
    };

    // Interleaved, so that a drift in the machine's speed hits every figure alike; the first
    // round warms the page cache and the allocator and is not counted.
    let (mut walks, mut rereads, mut baselines, mut renders) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..=rounds {
        let w = cpu_of(&mut walk);
        let r = cpu_of(&mut reread);
        let b = cpu_of(&mut baseline);
        let rendered = cpu_of(&mut || {
            let mut out = Exposition::new();
            stats.borrow().render(&mut out);
            std::hint::black_box(out.finish());
        });
        if round > 0 {
            walks.push(w);
            rereads.push(r);
            baselines.push(b);
            renders.push(rendered);
        }
    }
    assert!(errors.is_empty() && reread_errors.is_empty(), "{errors:?} {reread_errors:?}");
    assert_eq!(exported, dirs.len(), "every cgroup exported");
    let (walk, reread, baseline, render) = (median(walks), median(rereads), median(baselines), median(renders));

    let per = |d: Duration| d.as_secs_f64() * 1e6 / cgroups;
    println!(
        "{label}: {} cgroups, {} files read per cgroup, median of {rounds} rounds, process CPU time",
        dirs.len(),
        FILES_READ.len()
    );
    println!(
        "  full walk (readdir + read + parse)  {:>8.1} ms  {:>6.2} us/cgroup",
        walk.as_secs_f64() * 1e3,
        per(walk)
    );
    println!(
        "  re-read between walks               {:>8.1} ms  {:>6.2} us/cgroup",
        reread.as_secs_f64() * 1e3,
        per(reread)
    );
    println!(
        "  baseline: plain read of the files   {:>8.1} ms  {:>6.2} us/cgroup",
        baseline.as_secs_f64() * 1e3,
        per(baseline)
    );
    println!(
        "  render to exposition text           {:>8.1} ms  {:>6.2} us/cgroup",
        render.as_secs_f64() * 1e3,
        per(render)
    );
    let ratio = walk.as_secs_f64() / baseline.as_secs_f64();
    println!(
        "  ratio to baseline: full walk {ratio:.2}x (target <= {TARGET_RATIO}x), re-read {:.2}x",
        reread.as_secs_f64() / baseline.as_secs_f64()
    );
    ratio
}

/// Real, empty v1 memory cgroups below /sys/fs/cgroup/memory, removed afterwards.
fn measure_real(count: usize) {
    let base = PathBuf::from(format!("/sys/fs/cgroup/memory/memlock-bench-{}", std::process::id()));
    if !base.parent().is_some_and(|p| p.join("memory.usage_in_bytes").exists()) {
        println!("real cgroups: skipped, no v1 memory hierarchy at /sys/fs/cgroup/memory");
        return;
    }
    let mut dirs = Vec::new();
    let created = (|| -> std::io::Result<()> {
        std::fs::create_dir(&base)?;
        dirs.push(base.clone());
        for group in 0..count.div_ceil(10) {
            let parent = base.join(format!("g{group}"));
            std::fs::create_dir(&parent)?;
            dirs.push(parent.clone());
            for leaf in 0..9 {
                let dir = parent.join(format!("c{leaf}"));
                std::fs::create_dir(&dir)?;
                dirs.push(dir);
            }
        }
        Ok(())
    })();
    match created {
        // The collector's paths are relative to the hierarchy root; point a sysfs root at a
        // directory whose fs/cgroup/memory is the test subtree.
        Ok(()) => {
            let fake_sysfs = std::env::temp_dir().join(format!("memlock-bench-real-{}", std::process::id()));
            std::fs::create_dir_all(fake_sysfs.join("fs/cgroup")).unwrap();
            let link = fake_sysfs.join("fs/cgroup/memory");
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(&base, &link).unwrap();
            measure("real v1 memory cgroups (kernel-formatted files)", &fake_sysfs, &dirs, ROUNDS);
            let _ = std::fs::remove_dir_all(&fake_sysfs);
        }
        Err(e) => println!("real cgroups: could not create them ({e}); needs root"),
    }
    for dir in dirs.iter().rev() {
        let _ = std::fs::remove_dir(dir);
    }
}

fn main() {
    let root = std::env::temp_dir().join(format!("memlock-bench-cgroups-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let memory = root.join("sys/fs/cgroup/memory");
    let dirs = generate(&memory);
    // A v1 layout: the collector finds `memory` and no `unified`.
    let rss_before = synthetic::status_kib("/proc/self/status", "VmRSS").unwrap_or(0);
    let ratio = measure("temp tree, v1 format", &root.join("sys"), &dirs, ROUNDS);
    println!(
        "peak RSS of the benchmark process (VmHWM): {} KiB ({rss_before} KiB before the rounds)",
        synthetic::status_kib("/proc/self/status", "VmHWM").unwrap_or(0)
    );
    std::fs::remove_dir_all(&root).unwrap();
    if let Some(count) = std::env::var("MEMLOCK_BENCH_REAL_CGROUPS").ok().and_then(|v| v.parse().ok()) {
        measure_real(count);
    }
    if ratio > TARGET_RATIO {
        println!("FAILED: the full walk costs {ratio:.2}x the plain reads (target <= {TARGET_RATIO}x)");
        std::process::exit(1);
    }
}
