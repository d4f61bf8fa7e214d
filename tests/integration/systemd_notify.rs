//! The systemd notify protocol, with this test in systemd's place: it binds the datagram socket
//! named by NOTIFY_SOCKET and sets WATCHDOG_USEC. The daemon must say READY=1 after its first
//! sample, ping WATCHDOG=1 while sampling, stop pinging when a collector is stuck (a real stop:
//! the node collector's thread alone is frozen with ptrace, as a thread blocked in the kernel
//! would be, while the HTTP threads run on), and still exit promptly on SIGTERM.

use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use crate::synthetic::copy_tree;
use crate::util::{fixtures, Exporter};

/// Stops one thread with ptrace (PTRACE_SEIZE + PTRACE_INTERRUPT) until stdin closes; the other
/// threads of its process keep running. (Reads of kernel files are non-blocking now, so a FIFO
/// no longer wedges a collector.)
const FREEZER: &str = r#"
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
tid = int(sys.argv[1])
for request in (0x4206, 0x4207):  # PTRACE_SEIZE, PTRACE_INTERRUPT
    if libc.ptrace(request, tid, None, None) != 0:
        print("ptrace failed errno", ctypes.get_errno(), flush=True); sys.exit(1)
status = ctypes.c_int()
libc.waitpid(tid, ctypes.byref(status), 0x40000000)  # __WALL: the tracee is a thread
print("frozen", flush=True)
# Keep it stopped (never PTRACE_CONT) and reap it when the process exits, or the process could
# not be reaped by its parent; stdin closing ends the freeze early.
import os, threading
def watch_stdin():
    sys.stdin.read()
    os._exit(0)  # exiting detaches: the thread runs again
threading.Thread(target=watch_stdin, daemon=True).start()
while True:
    if libc.waitpid(tid, ctypes.byref(status), 0x40000000) == -1:
        break
    if (status.value & 0x7f) != 0x7f:  # exited or killed, not a stop
        break
"#;

/// The thread of `pid` whose name is `name`.
fn thread_id(pid: u32, name: &str) -> u32 {
    for entry in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let tid = entry.unwrap().file_name().into_string().unwrap();
        if std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).unwrap_or_default().trim() == name {
            return tid.parse().unwrap();
        }
    }
    panic!("no thread {name} in {pid}");
}

fn freeze(tid: u32) -> Child {
    let mut child = Command::new("python3")
        .args(["-c", FREEZER, &tid.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "frozen", "{line}");
    child
}

/// Messages received within `window`.
fn receive_for(socket: &UnixDatagram, window: Duration) -> Vec<String> {
    let deadline = Instant::now() + window;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        socket
            .set_read_timeout(Some(deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1))))
            .unwrap();
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
    let tmp = tempfile::Builder::new().prefix("memlock-sdnotify-it-").tempdir().unwrap();
    let dir: PathBuf = tmp.path().to_path_buf();
    let procfs = dir.join("proc");
    for name in ["meminfo", "vmstat"] {
        std::fs::create_dir_all(&procfs).unwrap();
        std::fs::copy(fixtures().join("proc").join(name), procfs.join(name)).unwrap();
    }
    copy_tree(&fixtures().join("proc/sys"), &procfs.join("sys")).unwrap();
    let socket_path = dir.join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();

    let mut args: Vec<String> = vec![
        "--path.procfs".into(),
        procfs.display().to_string(),
        "--path.sysfs".into(),
        fixtures().join("sys").display().to_string(),
    ];
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

    // Stop the node collector's thread, as a read blocked in the kernel would.
    let mut freezer = freeze(thread_id(exporter.child.id(), "collect-node"));
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
    drop(freezer.stdin.take());
    let _ = freezer.wait();
}
