//! The launchers collector on this machine's real /proc: a real containerd (Debian's package),
//! started as root under a lowered RLIMIT_MEMLOCK (`prlimit --memlock=SOFT:HARD containerd ...`,
//! which sets the limit and execs it in the same pid) on a private socket, root and state
//! directory, is exported with that limit; a copy of `sleep` named `containerd` run by an
//! unprivileged user is not.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::{is_root, live_lock, Exporter};

const CONTAINERD: &str = "/usr/bin/containerd";
const SOFT: u64 = 64 << 10;
const HARD: u64 = 8 << 20;

/// Kills and reaps the child on drop, so a failing assertion leaves no daemon behind.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(what: &str, limit: Duration, done: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_real_containerd_under_a_lowered_limit_is_exported_with_it() {
    crate::require!(is_root(), "needs root to start containerd");
    crate::require!(std::path::Path::new(CONTAINERD).exists(), "needs containerd (apt-get install containerd)");
    let _guard = live_lock();
    let dir = std::env::temp_dir().join(format!("memlock-live-launchers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // Its own root, state and sockets, and no CRI plugin: nothing of a system containerd is touched.
    let config = format!(
        "version = 2\nroot = \"{0}/root\"\nstate = \"{0}/state\"\n\
         disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\
         [grpc]\n  address = \"{0}/containerd.sock\"\n[ttrpc]\n  address = \"{0}/containerd.sock.ttrpc\"\n",
        dir.display()
    );
    std::fs::write(dir.join("config.toml"), config).unwrap();
    let containerd = Reaped(
        Command::new("prlimit")
            .arg(format!("--memlock={SOFT}:{HARD}"))
            .arg(CONTAINERD)
            .arg("--config")
            .arg(dir.join("config.toml"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("containerd.log")).unwrap())
            .spawn()
            .expect("spawn prlimit containerd"),
    );
    let pid = containerd.0.id();
    wait_for("containerd's socket", Duration::from_secs(30), || dir.join("containerd.sock").exists());
    assert_eq!(std::fs::read_link(format!("/proc/{pid}/exe")).unwrap(), std::path::Path::new(CONTAINERD));
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits.lines().find(|l| l.starts_with("Max locked memory")).unwrap();
    assert!(line.contains(&format!(" {SOFT} ")) && line.contains(&format!(" {HARD} ")), "{line}");

    // A user's process that calls itself containerd: the right comm, the wrong exe and uid.
    let impostor_path = dir.join("containerd");
    std::fs::copy("/bin/sleep", &impostor_path).unwrap();
    crate::util::set_mode(&dir, 0o755);
    crate::util::set_mode(&impostor_path, 0o755);
    let impostor = Reaped(
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&impostor_path)
            .arg("60")
            .spawn()
            .expect("spawn the impostor"),
    );
    let impostor_pid = impostor.0.id();
    wait_for("the impostor's comm", Duration::from_secs(5), || {
        std::fs::read_to_string(format!("/proc/{impostor_pid}/comm")).is_ok_and(|c| c == "containerd\n")
    });

    let exporter = Exporter::start_with_env(
        &[
            "--no-collector.numa",
            "--no-collector.process",
            "--no-collector.cgroup",
            "--no-collector.rdma_sysfs",
            "--no-collector.rdma_netlink",
            "--no-collector.software",
        ],
        &[("MEMLOCK_EXPORTER_COLLECTOR__LAUNCHERS__INTERVAL", "200ms")],
    );
    let series =
        |kind: &str| format!("memlock_launcher_limit_bytes{{launcher=\"containerd\",pid=\"{pid}\",kind=\"{kind}\"}}");
    let m = exporter.wait_metrics(Duration::from_secs(20), "containerd's limit", |m| m.get(&series("soft")).is_some());
    assert_eq!(m.value(&series("soft")), SOFT as f64);
    assert_eq!(m.value(&series("hard")), HARD as f64);
    let unlimited = format!("memlock_launcher_limit_unlimited{{launcher=\"containerd\",pid=\"{pid}\",kind=\"soft\"}}");
    assert_eq!(m.value(&unlimited), 0.0);
    assert!(!m.text.contains(&format!("pid=\"{impostor_pid}\"")), "the impostor is not a launcher:\n{}", m.text);
    assert_eq!(m.value("memlock_scrape_collector_success{collector=\"launchers\"}"), 1.0);

    // A limit changed in place shows at the next sample: what the next container would inherit.
    // Lowered, since raising the hard limit needs CAP_SYS_RESOURCE, which this machine's root lacks.
    let lowered = 32u64 << 10;
    let status =
        Command::new("prlimit").arg(format!("--pid={pid}")).arg(format!("--memlock={lowered}:{HARD}")).status();
    assert!(status.is_ok_and(|s| s.success()));
    let m = exporter
        .wait_metrics(Duration::from_secs(10), "the lowered limit", |m| m.get(&series("soft")) == Some(lowered as f64));
    assert_eq!(m.value(&series("hard")), HARD as f64);
    drop(impostor);
    drop(containerd);
    let _ = std::fs::remove_dir_all(&dir);
}
