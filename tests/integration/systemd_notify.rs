//! The systemd notify protocol, with this test in systemd's place: it binds the datagram socket
//! named by NOTIFY_SOCKET and sets WATCHDOG_USEC. The daemon must say READY=1 after its first
//! sample, ping WATCHDOG=1 while sampling, stop pinging when a collector is stuck (a real block:
//! /proc/meminfo replaced by a FIFO nobody writes), and still exit promptly on SIGTERM.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::util::{fixtures, Exporter};

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Messages received within `window`.
fn receive_for(socket: &UnixDatagram, window: Duration) -> Vec<String> {
    let deadline = Instant::now() + window;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        socket.set_read_timeout(Some(deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1)))).unwrap();
        if let Ok(n) = socket.recv(&mut buf) {
            out.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    }
    out
}

fn pings(messages: &[String]) -> usize {
    messages.iter().filter(|m| m.lines().any(|l| l == "WATCHDOG=1")).count()
}

#[test]
fn ready_after_the_first_sample_watchdog_while_sampling_silence_when_stuck() {
    let dir: PathBuf = std::env::temp_dir().join(format!("memlock-sdnotify-it-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let procfs = dir.join("proc");
    for name in ["meminfo", "vmstat"] {
        std::fs::create_dir_all(&procfs).unwrap();
        std::fs::copy(fixtures().join("proc").join(name), procfs.join(name)).unwrap();
    }
    copy_tree(&fixtures().join("proc/sys"), &procfs.join("sys"));
    let socket_path = dir.join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();

    let mut args: Vec<String> =
        vec!["--path.procfs".into(), procfs.display().to_string(), "--path.sysfs".into(), fixtures().join("sys").display().to_string()];
    for other in ["numa", "process", "cgroup", "rdma_sysfs", "rdma_netlink"] {
        args.push(format!("--no-collector.{other}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let notify = socket_path.display().to_string();
    let exporter = Exporter::spawn(&args, &[("NOTIFY_SOCKET", &notify), ("WATCHDOG_USEC", "1000000")]);

    let mut buf = [0u8; 4096];
    socket.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let n = socket.recv(&mut buf).expect("a first notification");
    let first = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(first.lines().next() == Some("READY=1"), "READY=1 comes first: {first:?}");
    assert_eq!(crate::util::http_get(&exporter.address, "/-/ready").unwrap().0, 200, "ready means sampled");

    let healthy = receive_for(&socket, Duration::from_millis(2600));
    assert!(pings(&healthy) >= 4, "a ping every 0.5 s: {healthy:?}");

    // Wedge the node collector: its next open() of meminfo waits for a writer forever.
    std::fs::remove_file(procfs.join("meminfo")).unwrap();
    let fifo = std::ffi::CString::new(procfs.join("meminfo").display().to_string()).unwrap();
    // SAFETY: mkfifo with a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    // Interval 1 s plus 2 s of grace, plus a tick: pings stop within about 4 s.
    let _ = receive_for(&socket, Duration::from_secs(5));
    let stuck = receive_for(&socket, Duration::from_secs(3));
    assert_eq!(pings(&stuck), 0, "no watchdog pings while the sampler is stuck: {stuck:?}");
    assert!(exporter.log_text().contains("collectors are stuck"), "{}", exporter.log_text());
    assert_eq!(crate::util::http_get(&exporter.address, "/-/healthy").unwrap().0, 200, "the HTTP side still answers");

    // SIGTERM does not wait forever on the blocked thread.
    let started = Instant::now();
    let status = exporter.terminate();
    assert!(status.success(), "{status:?}");
    assert!(started.elapsed() < Duration::from_secs(8), "exit took {:?}", started.elapsed());
    let last = receive_for(&socket, Duration::from_millis(200));
    assert!(last.iter().any(|m| m.contains("STOPPING=1")), "{last:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
