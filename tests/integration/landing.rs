//! The landing page of the real binary: whether the fast path pages and where to, and the
//! failures collector's state, beside the collectors table.

use crate::util::{fixtures, AlertReceiver, Exporter};

fn roots() -> [String; 4] {
    let root = fixtures();
    [
        "--path.procfs".into(),
        root.join("proc").to_string_lossy().into_owned(),
        "--path.sysfs".into(),
        root.join("sys").to_string_lossy().into_owned(),
    ]
}

#[test]
fn the_landing_page_says_where_the_fast_path_pages() {
    let receiver = AlertReceiver::start();
    let roots = roots();
    let mut args: Vec<&str> = roots.iter().map(String::as_str).collect();
    args.extend(["--no-collector.rdma_netlink", "--alertmanager.url", &receiver.url]);
    let exporter = Exporter::start(&args);
    let (status, page) = exporter.get("/");
    assert_eq!(status, 200);
    assert!(page.contains(&format!("Fast path to Alertmanager: on, to {} (", receiver.url)), "{page}");
    // The fixture tree's real slurmd runs at 64 KiB: what a job it starts would get.
    assert!(page.contains("Memlock limit new jobs get: slurmd (pid 812) hands jobs 64.0 KiB"), "{page}");
    assert!(page.contains("Failures collector: off"), "{page}");
    assert!(page.contains("<td>process</td><td>ok</td>"), "the collectors table is still there: {page}");
}

#[test]
fn the_landing_page_says_the_fast_path_is_off() {
    let roots = roots();
    let mut args: Vec<&str> = roots.iter().map(String::as_str).collect();
    args.push("--no-collector.rdma_netlink");
    let exporter = Exporter::start(&args);
    let (status, page) = exporter.get("/");
    assert_eq!(status, 200);
    assert!(page.contains("Fast path to Alertmanager: off"), "{page}");
}
