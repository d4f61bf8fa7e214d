//! Hostile input (issue 15): what a local user, or whoever writes a root the exporter is pointed
//! at, can put in front of it. Each test reproduces the attack on loopback, bounded in time, and
//! checks that it is defused: label values bounded and marked, control characters escaped.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::synthetic;
use crate::util::{fixtures, Exporter, Metrics};

/// The exported bound of a label value (src/exposition.rs, `MAX_LABEL_VALUE_BYTES`).
const MAX_LABEL_VALUE_BYTES: usize = 512;

/// A copy of the fixture roots, removed on drop.
struct Tree(PathBuf);

impl Tree {
    fn new(name: &str) -> Tree {
        let root = std::env::temp_dir().join(format!("memlock-hostile-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        synthetic::copy_tree(&fixtures().join("proc"), &root.join("proc")).unwrap();
        synthetic::copy_tree(&fixtures().join("sys"), &root.join("sys")).unwrap();
        Tree(root)
    }

    fn proc(&self) -> PathBuf {
        self.0.join("proc")
    }

    fn start(&self, extra: &[&str]) -> Exporter {
        let (procfs, sysfs) = (self.0.join("proc"), self.0.join("sys"));
        let mut args = vec!["--path.procfs", procfs.to_str().unwrap(), "--path.sysfs", sysfs.to_str().unwrap()];
        args.extend_from_slice(&["--no-collector.rdma_netlink"]);
        args.extend_from_slice(extra);
        Exporter::start(&args)
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// GET /metrics, reading at most `limit` bytes of the response: a scrape past it is an error
/// (with the bytes read so far), not an allocation without bound in the test.
fn scrape_at_most(address: &str, limit: usize) -> Result<String, usize> {
    let mut stream = TcpStream::connect(address).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    (&mut stream).take(limit as u64 + 1).read_to_end(&mut raw).expect("read the scrape");
    if raw.len() > limit {
        return Err(raw.len());
    }
    let text = String::from_utf8(raw).expect("UTF-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // The body may be chunked; the sizes compared below are of what went over the wire.
    Ok(body.to_owned())
}

fn peak_rss_kib(exporter: &Exporter) -> u64 {
    synthetic::status_kib(&format!("/proc/{}/status", exporter.child.id()), "VmHWM").unwrap_or(0)
}

/// The label values of every series, as written (escaped).
fn label_values(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('{').and_then(|(_, rest)| rest.rsplit_once('}')).map(|(labels, _)| labels))
        .flat_map(|labels| labels.split("\",").map(|kv| kv.split_once("=\"").map_or("", |(_, v)| v)))
        .map(|value| value.strip_suffix('"').unwrap_or(value))
        .collect()
}

fn attack_processes(procfs: &Path, path_of: impl Fn(u32) -> String) {
    for i in 0..50 {
        synthetic::write_process(procfs, 9000 + i, "rank", 4096, &path_of(i)).unwrap();
    }
}

/// Issue 15 item 6: 50 processes with 1 MB cgroup paths made a 600 MB scrape, every series of a
/// process and of its cgroup repeating the path. A kernel prints at most 4095 bytes of path
/// (PATH_MAX); longer ones, from a procfs root someone else writes, are refused as not from a
/// kernel (they also took the daemon to 264 MB of memory). 4095-byte paths, which any user
/// allowed to create cgroups can make, are cut and marked. The same 50 processes with short
/// paths, measured in the same run, are the baseline: each rewritten value adds at most the
/// bound to it.
#[test]
fn long_cgroup_paths_make_a_bounded_scrape() {
    let baseline_tree = Tree::new("label-baseline");
    attack_processes(&baseline_tree.proc(), |i| format!("/attack-{i:02}"));
    let baseline_exporter = baseline_tree.start(&[]);
    let started = Instant::now();
    let baseline = scrape_at_most(&baseline_exporter.address, 64 << 20).expect("the baseline scrape is small");
    let baseline_time = started.elapsed();
    let baseline_rss = peak_rss_kib(&baseline_exporter);
    drop(baseline_exporter);

    let tree = Tree::new("label-attack");
    let filler = "d".repeat(4095 - "/attack-00/".len());
    attack_processes(&tree.proc(), |i| format!("/attack-{i:02}/{filler}"));
    let exporter = tree.start(&[]);
    let started = Instant::now();
    let body = scrape_at_most(&exporter.address, 64 << 20)
        .unwrap_or_else(|read| panic!("the scrape is over {read} bytes: label values are not bounded"));
    let attack_time = started.elapsed();
    let attack_rss = peak_rss_kib(&exporter);
    let m = Metrics::parse(&body);
    assert_eq!(m.value("memlock_scrape_collector_success{collector=\"process\"}"), 1.0, "a kernel's path");

    // Each of the 50 processes is still its own series, its path cut and marked.
    let rank_paths: std::collections::BTreeSet<&str> = m
        .family("memlock_process_pinned_bytes")
        .into_iter()
        .filter(|(series, _)| series.contains("comm=\"rank\""))
        .map(|(series, _)| series.split("cgroup=\"").nth(1).unwrap().split('"').next().unwrap())
        .collect();
    assert_eq!(rank_paths.len(), 50, "{rank_paths:?}");
    for path in &rank_paths {
        assert_eq!(path.len(), MAX_LABEL_VALUE_BYTES, "{path}");
        let (kept, mark) = path.rsplit_once('~').unwrap();
        assert!(kept.starts_with("/attack-") && kept.ends_with("ddd"), "{path}");
        assert!(mark.len() == 16 && mark.bytes().all(|b| b.is_ascii_hexdigit()), "{path}");
    }
    let longest = label_values(&body).iter().map(|v| v.len()).max().unwrap();
    assert!(longest <= MAX_LABEL_VALUE_BYTES, "a label value of {longest} bytes");
    let rewritten = m.value("memlock_exporter_label_values_rewritten");
    assert!(rewritten >= 50.0, "{rewritten}");
    let bound = baseline.len() + rewritten as usize * MAX_LABEL_VALUE_BYTES;
    assert!(body.len() <= bound, "{} bytes against a bound of {bound}", body.len());
    eprintln!(
        "label bound: 50 processes with 4095-byte cgroup paths: scrape {} bytes in {attack_time:?}, exporter peak \
         RSS {attack_rss} KiB; the same with short paths: {} bytes in {baseline_time:?}, peak RSS {baseline_rss} \
         KiB; {rewritten} label values rewritten",
        body.len(),
        baseline.len(),
    );
    drop(exporter);

    // 1 MB paths: refused, naming the file; the processes are exported without them.
    let tree = Tree::new("label-megabyte");
    let filler = "d".repeat(1_000_000 - "/attack-00/".len());
    attack_processes(&tree.proc(), |i| format!("/attack-{i:02}/{filler}"));
    let exporter = tree.start(&[]);
    let started = Instant::now();
    let body = scrape_at_most(&exporter.address, 64 << 20)
        .unwrap_or_else(|read| panic!("the scrape is over {read} bytes: label values are not bounded"));
    let megabyte_time = started.elapsed();
    let megabyte_rss = peak_rss_kib(&exporter);
    let m = Metrics::parse(&body);
    let ranks = m.family("memlock_process_pinned_bytes").into_iter().filter(|(s, _)| s.contains("comm=\"rank\""));
    assert_eq!(ranks.clone().count(), 50);
    assert!(ranks.clone().all(|(series, _)| !series.contains("cgroup=")), "{body}");
    assert!(m.value("memlock_process_read_errors_total{kind=\"parse\"}") >= 50.0, "{body}");
    assert!(body.len() <= bound, "{} bytes against a bound of {bound}", body.len());
    let log = exporter.log_text();
    assert!(log.contains("/cgroup: a path of 1000000 bytes: the kernel prints at most 4095"), "{log}");
    // Well under the baseline plus the 50 MB the paths take on disk.
    assert!(megabyte_rss < baseline_rss + 32 * 1024, "peak RSS {megabyte_rss} KiB");
    eprintln!(
        "label bound: 50 processes with 1 MB cgroup paths: scrape {} bytes in {megabyte_time:?}, exporter peak RSS \
         {megabyte_rss} KiB",
        body.len()
    );
}
