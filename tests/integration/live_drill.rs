//! `memlock-exporter drill` on this machine: real io_uring registrations and mlocks, refused by
//! the kernel at a real RLIMIT_MEMLOCK in an unprivileged process (uid 64435 through prlimit and
//! setpriv), run to the end as root (CAP_IPC_LOCK), refused before it starts, and stopped by
//! signals. The drill's own report is checked against /proc/PID/status read from outside.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::util::{binary, binary_runnable_by, is_root, live_lock, meminfo_bytes};

const MIB: u64 = 1 << 20;
/// io_uring charges the limit to the *user* (every process of the uid together), so the drill
/// runs as a uid no other test or service uses: another test's buffers under the same uid would
/// move the refusal.
const DRILL_UID: u32 = 64435;
const NOBODY: [&str; 3] = ["--reuid=64435", "--regid=64435", "--clear-groups"];
/// Far above any drill here (the longest holds 2 s); only there so a hang fails instead of
/// blocking the suite.
const WATCHDOG: Duration = Duration::from_secs(60);

fn require_root() -> bool {
    crate::util::met(is_root(), "live drill tests need root (prlimit/setpriv to an unprivileged user, CAP_IPC_LOCK)")
}

fn nobody_binary() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| binary_runnable_by(DRILL_UID))
}

/// `prlimit --memlock=SOFT:HARD setpriv <to uid 64435> memlock-exporter drill ARGS`. Both
/// tools exec, so the child's pid is the drill's.
fn drill_as_nobody(soft: u64, hard: u64, args: &[&str]) -> Command {
    let mut cmd = Command::new("prlimit");
    cmd.arg(format!("--memlock={soft}:{hard}"))
        .arg("setpriv")
        .args(NOBODY)
        .arg(nobody_binary())
        .arg("drill")
        .args(args)
        .current_dir("/");
    cmd
}

fn drill_as_root(args: &[&str]) -> Command {
    let mut cmd = Command::new(binary());
    cmd.arg("drill").args(args);
    cmd
}

struct Finished {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Finished {
    fn lines(&self) -> Vec<&str> {
        self.stdout.lines().collect()
    }

    fn context(&self) -> String {
        format!("status {:?}\nstdout:\n{}\nstderr:\n{}", self.status, self.stdout, self.stderr)
    }
}

fn run(mut cmd: Command) -> Finished {
    let mut child =
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn the drill");
    let stdout = drain(child.stdout.take().unwrap());
    let stderr = drain(child.stderr.take().unwrap());
    let status = wait_with_watchdog(&mut child);
    Finished { status, stdout: stdout.join().unwrap(), stderr: stderr.join().unwrap() }
}

fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text);
        text
    })
}

fn wait_with_watchdog(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + WATCHDOG;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("drill still running after {WATCHDOG:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A value of the drill's flat JSON lines: a number, `null`, `true`/`false`, or a string
/// without its quotes.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let start = line.find(&format!("\"{key}\":"))? + key.len() + 3;
    let rest = &line[start..];
    let end = rest.find([',', '}'])?;
    Some(rest[..end].trim_matches('"'))
}

fn number(line: &str, key: &str) -> u64 {
    field(line, key).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no number {key} in {line}"))
}

fn events<'a>(lines: &[&'a str], event: &str) -> Vec<&'a str> {
    lines.iter().copied().filter(|l| field(l, "event") == Some(event)).collect()
}

/// VmPin and VmLck of a live process in bytes, read the way the exporter reads them.
fn vm_of(pid: u64) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib = |key: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{key} missing from /proc/{pid}/status"))
    };
    (kib("VmPin:") * 1024, kib("VmLck:") * 1024)
}

/// Checks a drill that was refused after `ok_steps` steps of `step` bytes: `counter` is the
/// JSON key that must rise by one step each time (the other must stay 0).
fn assert_refused_ramp(ramp: &Finished, counter: &str, other: &str, step: u64, ok_steps: u64) {
    let lines = ramp.lines();
    let steps = events(&lines, "step");
    assert_eq!(steps.len() as u64, ok_steps + 1, "{}", ramp.context());
    for (index, line) in steps[..ok_steps as usize].iter().enumerate() {
        let n = index as u64 + 1;
        assert_eq!(number(line, "step"), n, "{line}");
        assert_eq!(field(line, "result"), Some("ok"), "{line}");
        assert_eq!(number(line, "requested_bytes"), n * step, "{line}");
        assert_eq!(number(line, counter), n * step, "{counter} must rise by one step per step: {line}");
        assert_eq!(number(line, other), 0, "{line}");
    }
    let refused = steps[ok_steps as usize];
    assert_eq!(number(refused, "requested_bytes"), (ok_steps + 1) * step, "{refused}");
    assert_eq!(number(refused, "reached_bytes"), ok_steps * step, "{refused}");
    // The refused charge was taken back: the counter still shows what was reached.
    assert_eq!(number(refused, counter), ok_steps * step, "{refused}");
    let released = events(&lines, "released");
    assert_eq!(released.len(), 1, "{}", ramp.context());
    assert_eq!(field(released[0], "outcome"), Some("refused"), "{}", ramp.context());
    assert_eq!(number(released[0], "reached_bytes"), ok_steps * step);
    assert_eq!(number(released[0], counter), 0, "everything released: {}", released[0]);
    assert_eq!(number(released[0], other), 0);
    assert_eq!(events(&lines, "hold").len(), 1, "held before releasing: {}", ramp.context());
    assert_eq!(lines.last().copied(), Some(released[0]), "the released line is the last one");
}

#[test]
fn pin_ramp_is_refused_with_enomem_at_the_soft_limit() {
    if !require_root() {
        return;
    }
    let _guard = live_lock();
    let ramp = run(drill_as_nobody(
        4 * MIB,
        8 * MIB,
        &[
            "--mode",
            "pin",
            "--step-mib",
            "1",
            "--max-mib",
            "16",
            "--interval-ms",
            "20",
            "--hold-seconds",
            "1",
            "--json",
        ],
    ));
    assert!(ramp.status.success(), "a refusal is the drill's intended end: {}", ramp.context());
    let lines = ramp.lines();
    let start = events(&lines, "start");
    assert_eq!(start.len(), 1, "{}", ramp.context());
    assert_eq!(number(start[0], "uid"), u64::from(DRILL_UID));
    assert_eq!(number(start[0], "memlock_soft_bytes"), 4 * MIB);
    assert_eq!(number(start[0], "memlock_hard_bytes"), 8 * MIB);
    assert_eq!(field(start[0], "cap_ipc_lock"), Some("false"));
    // io_uring checks the user's locked_vm, which since Linux 6.13 also holds each ring's own
    // pages (2 per ring here, not in VmPin): 3 MiB of buffers + 3 rings + a 4th ring already
    // exceed 4 MiB when the 4th MiB is asked for, so the refusal comes at step 4. On kernels that
    // do not charge ring pages it comes at step 5, as it would for ibv_reg_mr. Either way the
    // kernel refused at the soft limit and never let VmPin past it.
    let steps = events(&lines, "step");
    let refused = *steps.last().unwrap();
    let refused_at = number(refused, "step");
    assert!(refused_at == 4 || refused_at == 5, "refused at step {refused_at}: {}", ramp.context());
    // io_uring pins: VmPin rises by exactly one step per step, VmLck does not move.
    assert_refused_ramp(&ramp, "vmpin_bytes", "vmlck_bytes", MIB, refused_at - 1);
    assert_eq!(field(refused, "result"), Some("ENOMEM"), "{refused}");
    assert_eq!(number(refused, "errno"), 12);
    let call = field(refused, "call").unwrap();
    assert!(call == "io_uring_register" || call == "io_uring_setup", "{refused}");
    assert_eq!(field(events(&lines, "released")[0], "errno"), Some("ENOMEM"));
}

/// `--locked-mib`: 3 MiB mlocked under a 4 MiB soft limit, then a pin ramp. The kernel checks
/// VmPin and VmLck each on its own (`ib_umem_get` / io_uring against pinned or per-user memory,
/// `mlock` against `locked_vm`), so the ramp goes as far as without the lock: the locked 3 MiB
/// take nothing from the pinned headroom, as the exporter's per-counter ratio says.
#[test]
fn pinned_memory_ramps_to_the_limit_under_held_locked_memory() {
    if !require_root() {
        return;
    }
    let _guard = live_lock();
    let args = ["--mode", "pin", "--step-mib", "1", "--max-mib", "16", "--interval-ms", "20", "--hold-seconds", "1"];
    let locked_args: Vec<&str> = args.iter().copied().chain(["--locked-mib", "3", "--json"]).collect();
    let ramp = run(drill_as_nobody(4 * MIB, 8 * MIB, &locked_args));
    assert!(ramp.status.success(), "{}", ramp.context());
    let lines = ramp.lines();
    let locked = events(&lines, "locked");
    assert_eq!(locked.len(), 1, "{}", ramp.context());
    assert_eq!((number(locked[0], "locked_bytes"), number(locked[0], "vmlck_bytes")), (3 * MIB, 3 * MIB));
    let steps = events(&lines, "step");
    let refused = *steps.last().unwrap();
    assert_eq!(field(refused, "result"), Some("ENOMEM"), "{}", ramp.context());
    for line in &steps {
        assert_eq!(number(line, "vmlck_bytes"), 3 * MIB, "the lock is held through the ramp: {line}");
    }
    // The same refusal point as without the lock.
    let plain: Vec<&str> = args.iter().copied().chain(["--json"]).collect();
    let baseline = run(drill_as_nobody(4 * MIB, 8 * MIB, &plain));
    let baseline_lines = baseline.lines();
    let baseline_steps = events(&baseline_lines, "step");
    let step_of = |line: &str| number(line, "step");
    assert_eq!(step_of(refused), step_of(baseline_steps.last().unwrap()), "{}\n{}", ramp.context(), baseline.context());
    assert_eq!(number(events(&lines, "released")[0], "vmlck_bytes"), 0, "released at the end");
}

#[test]
fn lock_ramp_is_refused_at_the_soft_limit() {
    if !require_root() {
        return;
    }
    let _guard = live_lock();
    // Text output here (the pin test covers JSON): the same facts, in the operator's format.
    let text = run(drill_as_nobody(
        4 * MIB,
        8 * MIB,
        &["--mode", "lock", "--step-mib", "1", "--max-mib", "16", "--interval-ms", "20", "--hold-seconds", "1"],
    ));
    assert!(text.status.success(), "{}", text.context());
    let lines = text.lines();
    assert_eq!(lines.len(), 8, "start, 4 ok steps, the refusal, hold, released: {}", text.context());
    assert!(
        lines[0].contains(
            " event=start mode=lock step=1MiB max=16MiB interval=20ms hold=1s memlock_soft=4194304 \
                memlock_hard=8388608 cap_ipc_lock=no "
        ),
        "{}",
        lines[0]
    );
    for n in 1..=4u64 {
        let expected = format!(" event=step step={n} requested={n}MiB vmpin=0kB vmlck={}kB result=ok", n * 1024);
        assert!(lines[n as usize].ends_with(&expected), "{} does not end with {expected}", lines[n as usize]);
    }
    let refused = lines[5];
    assert!(refused.contains(" event=step step=5 requested=5MiB vmpin=0kB vmlck=4096kB result="), "{refused}");
    assert!(
        refused.ends_with(" result=ENOMEM errno=12 call=mlock reached=4MiB")
            || refused.ends_with(" result=EAGAIN errno=11 call=mlock reached=4MiB"),
        "{refused}"
    );
    assert!(lines[6].ends_with(" event=hold reached=4MiB seconds=1"), "{}", lines[6]);
    assert!(lines[7].contains(" event=released outcome=refused errno=E"), "{}", lines[7]);
    assert!(lines[7].ends_with(" reached=4MiB vmpin=0kB vmlck=0kB"), "{}", lines[7]);
    // Every line starts with an RFC 3339 UTC timestamp with milliseconds.
    for line in &lines {
        let time = line.split(' ').next().unwrap();
        assert_eq!(time.len(), 24, "{line}");
        assert!(time.ends_with('Z') && time.as_bytes()[10] == b'T' && time.as_bytes()[19] == b'.', "{line}");
    }

    // And the JSON form of the same ramp, with the shared checks.
    let json = run(drill_as_nobody(
        4 * MIB,
        8 * MIB,
        &[
            "--mode",
            "lock",
            "--step-mib",
            "1",
            "--max-mib",
            "16",
            "--interval-ms",
            "20",
            "--hold-seconds",
            "0",
            "--json",
        ],
    ));
    assert!(json.status.success(), "{}", json.context());
    assert_refused_ramp(&json, "vmlck_bytes", "vmpin_bytes", MIB, 4);
}

#[test]
fn as_root_the_ramp_reaches_the_maximum_past_the_hard_limit() {
    if !require_root() {
        return;
    }
    let _guard = live_lock();
    // Root's hard RLIMIT_MEMLOCK is 8 MiB here; CAP_IPC_LOCK exempts it in both modes, and
    // io_uring still charges VmPin.
    for (mode, counter, other) in [("lock", "vmlck_bytes", "vmpin_bytes"), ("pin", "vmpin_bytes", "vmlck_bytes")] {
        let ramp = run(drill_as_root(&[
            "--mode",
            mode,
            "--step-mib",
            "8",
            "--max-mib",
            "32",
            "--interval-ms",
            "10",
            "--hold-seconds",
            "0",
            "--json",
        ]));
        assert!(ramp.status.success(), "{mode}: {}", ramp.context());
        let lines = ramp.lines();
        assert_eq!(field(events(&lines, "start")[0], "cap_ipc_lock"), Some("true"), "{}", ramp.context());
        let steps = events(&lines, "step");
        assert_eq!(steps.len(), 4, "{mode}: {}", ramp.context());
        for (index, line) in steps.iter().enumerate() {
            let expected = (index as u64 + 1) * 8 * MIB;
            assert_eq!(field(line, "result"), Some("ok"), "{line}");
            assert_eq!(number(line, counter), expected, "{mode}: {line}");
            assert_eq!(number(line, other), 0, "{mode}: {line}");
        }
        let released = events(&lines, "released");
        assert_eq!(field(released[0], "outcome"), Some("max_reached"), "{}", ramp.context());
        assert_eq!(field(released[0], "errno"), Some("null"));
        assert_eq!(number(released[0], "reached_bytes"), 32 * MIB);
        assert_eq!(number(released[0], counter), 0, "{}", released[0]);
    }
}

#[test]
fn a_target_above_half_of_mem_available_is_refused_before_anything_is_taken() {
    let available = meminfo_bytes("MemAvailable");
    // All of MemAvailable: above half however much it moves meanwhile.
    let max_mib = (available / MIB).to_string();
    let refused =
        run(drill_as_root(&["--mode", "lock", "--step-mib", "1024", "--max-mib", &max_mib, "--hold-seconds", "0"]));
    assert_eq!(refused.status.code(), Some(2), "{}", refused.context());
    assert!(refused.stdout.is_empty(), "nothing ramped: {}", refused.context());
    assert!(
        refused.stderr.contains("refusing to start") && refused.stderr.contains("exceeds half of MemAvailable"),
        "{}",
        refused.context()
    );

    for bad in [
        &["--max-mib", "16", "--step-mib", "0"][..],
        &["--max-mib", "4", "--step-mib", "8"][..],
        &["--max-mib", "16", "--step-mib", "1", "--interval-ms", "0"][..],
        &["--max-mib", "16", "--mode", "mmap"][..],
    ] {
        let rejected = run(drill_as_root(bad));
        assert_eq!(rejected.status.code(), Some(2), "{bad:?}: {}", rejected.context());
        assert!(rejected.stdout.is_empty(), "{bad:?}: {}", rejected.context());
    }
}

/// The drill's bound comes from the kernel's /proc, not from `--path.procfs`, where a fake meminfo
/// could raise it. Should it not, the drill below would start and be refused by the kernel at its
/// 1 MiB limit (unprivileged, pin mode): nothing at risk.
#[test]
fn the_safety_bound_ignores_a_fake_meminfo_under_path_procfs() {
    if !require_root() {
        return;
    }
    let _guard = live_lock();
    let fake = std::env::temp_dir().join(format!("memlock-drill-fake-procfs-{}", std::process::id()));
    std::fs::create_dir_all(&fake).unwrap();
    crate::util::set_mode(&fake, 0o755);
    let terabytes = 10u64 << 30; // kB
    std::fs::write(fake.join("meminfo"), format!("MemTotal: {terabytes} kB\nMemAvailable: {terabytes} kB\n")).unwrap();
    crate::util::set_mode(&fake.join("meminfo"), 0o644);
    // All of MemAvailable, in 100 steps: above half of the real one however much it moves.
    let available_mib = meminfo_bytes("MemAvailable") / MIB;
    let (max_mib, step_mib) = (available_mib.to_string(), (available_mib / 100).max(1).to_string());
    let args = [
        "--mode",
        "pin",
        "--step-mib",
        &step_mib,
        "--max-mib",
        &max_mib,
        "--interval-ms",
        "10",
        "--hold-seconds",
        "0",
        "--path.procfs",
        fake.to_str().unwrap(),
    ];
    let refused = run(drill_as_nobody(MIB, MIB, &args));
    std::fs::remove_dir_all(&fake).unwrap();
    assert_eq!(refused.status.code(), Some(2), "{}", refused.context());
    assert!(refused.stdout.is_empty(), "nothing ramped: {}", refused.context());
    assert!(refused.stderr.contains("exceeds half of MemAvailable"), "{}", refused.context());
}

/// Starts a drill with its stdout piped and returns the lines up to and including the first
/// one of `event`.
fn read_until(child: &mut Child, event: &str) -> (BufReader<std::process::ChildStdout>, Vec<String>) {
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        let read = reader.read_line(&mut line).unwrap();
        assert!(read > 0, "drill ended before a {event} line: {lines:?}");
        let done = field(&line, "event") == Some(event);
        lines.push(line.trim_end().to_owned());
        if done {
            return (reader, lines);
        }
    }
}

fn signal(child: &Child, signal: i32) {
    // SAFETY: kill with the pid of our own, still unreaped child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
}

#[test]
fn sigterm_during_the_hold_releases_and_exits_0() {
    if !require_root() {
        return;
    }
    let _guard = live_lock();
    let mut child = drill_as_root(&[
        "--mode",
        "lock",
        "--step-mib",
        "4",
        "--max-mib",
        "8",
        "--interval-ms",
        "10",
        "--hold-seconds",
        "60",
        "--json",
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit())
    .spawn()
    .unwrap();
    let (mut reader, lines) = read_until(&mut child, "hold");
    let pid = number(&lines[0], "pid");
    assert_eq!(pid, u64::from(child.id()));
    // Seen from outside, as the exporter sees it: the 8 MiB are locked while the drill holds.
    assert_eq!(vm_of(pid), (0, 8 * MIB), "{lines:?}");

    let sent = Instant::now();
    signal(&child, libc::SIGTERM);
    let status = wait_with_watchdog(&mut child);
    let took = sent.elapsed();
    let mut rest = String::new();
    reader.read_to_string(&mut rest).unwrap();
    assert!(status.success(), "SIGTERM is a clean stop: {status:?}, {rest}");
    // The hold was 60 s; the drill looks at the flag every 20 ms.
    assert!(took < Duration::from_secs(10), "took {took:?} to stop after SIGTERM");
    let released = rest.lines().last().unwrap_or_default();
    assert_eq!(field(released, "event"), Some("released"), "{rest}");
    assert_eq!(field(released, "outcome"), Some("max_reached"), "{released}");
    assert_eq!(field(released, "signal"), Some("SIGTERM"), "{released}");
    assert_eq!(number(released, "vmlck_bytes"), 0, "{released}");
    assert_eq!(number(released, "reached_bytes"), 8 * MIB, "{released}");
}

#[test]
fn sigint_during_the_ramp_stops_it_without_a_hold() {
    if !require_root() {
        return;
    }
    let _guard = live_lock();
    let mut child = drill_as_root(&[
        "--mode",
        "pin",
        "--step-mib",
        "2",
        "--max-mib",
        "64",
        "--interval-ms",
        "600000",
        "--hold-seconds",
        "60",
        "--json",
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit())
    .spawn()
    .unwrap();
    let (mut reader, lines) = read_until(&mut child, "step");
    let pid = number(&lines[0], "pid");
    assert_eq!(vm_of(pid), (2 * MIB, 0), "io_uring's pin is in VmPin: {lines:?}");
    signal(&child, libc::SIGINT);
    let status = wait_with_watchdog(&mut child);
    let mut rest = String::new();
    reader.read_to_string(&mut rest).unwrap();
    assert!(status.success(), "{status:?}, {rest}");
    let rest: Vec<&str> = rest.lines().collect();
    assert_eq!(rest.len(), 1, "only the released line, no hold: {rest:?}");
    assert_eq!(field(rest[0], "outcome"), Some("interrupted"), "{}", rest[0]);
    assert_eq!(field(rest[0], "signal"), Some("SIGINT"));
    assert_eq!(number(rest[0], "reached_bytes"), 2 * MIB);
    assert_eq!(number(rest[0], "vmpin_bytes"), 0, "unregistered synchronously: {}", rest[0]);
}

#[test]
fn a_step_above_io_urings_one_gib_buffer_maximum_is_registered_whole() {
    if !require_root() {
        return;
    }
    let _guard = live_lock();
    // 1025 MiB in one step: io_uring refuses single buffers above 1 GiB with EFAULT, so the
    // drill registers it as two iovecs; VmPin must show the whole step.
    let ramp = run(drill_as_root(&[
        "--mode",
        "pin",
        "--step-mib",
        "1025",
        "--max-mib",
        "1025",
        "--hold-seconds",
        "0",
        "--json",
    ]));
    assert!(ramp.status.success(), "{}", ramp.context());
    let lines = ramp.lines();
    let steps = events(&lines, "step");
    assert_eq!(steps.len(), 1, "{}", ramp.context());
    assert_eq!(field(steps[0], "result"), Some("ok"), "{}", steps[0]);
    assert_eq!(number(steps[0], "vmpin_bytes"), 1025 * MIB, "{}", steps[0]);
    assert_eq!(number(events(&lines, "released")[0], "vmpin_bytes"), 0);
}

#[test]
fn pin_mode_raises_the_descriptor_limit_or_refuses_to_start() {
    if !require_root() {
        return;
    }
    let _guard = live_lock();
    // One ring (one descriptor) per step: 100 steps need more than a soft limit of 80.
    let args = [
        "--mode",
        "pin",
        "--step-mib",
        "1",
        "--max-mib",
        "100",
        "--interval-ms",
        "10",
        "--hold-seconds",
        "0",
        "--json",
    ];
    let with_room = {
        let mut cmd = Command::new("prlimit");
        cmd.arg("--nofile=80:4096").arg(binary()).arg("drill").args(args);
        run(cmd)
    };
    assert!(with_room.status.success(), "the soft limit is raised towards the hard one: {}", with_room.context());
    let lines = with_room.lines();
    let steps = events(&lines, "step");
    assert_eq!(steps.len(), 100, "{}", with_room.context());
    assert_eq!(number(steps[99], "vmpin_bytes"), 100 * MIB, "{}", steps[99]);

    let without = {
        let mut cmd = Command::new("prlimit");
        cmd.arg("--nofile=80:100").arg(binary()).arg("drill").args(args);
        run(cmd)
    };
    assert_eq!(without.status.code(), Some(2), "{}", without.context());
    assert!(without.stdout.is_empty(), "{}", without.context());
    assert!(without.stderr.contains("RLIMIT_NOFILE allows 100"), "{}", without.context());
}

/// `--mode rdma` loads libibverbs at run time: where it cannot (here the library is hidden
/// behind /dev/null in a mount namespace of the drill's own when it is installed), the drill
/// fails before any output with exit 1, naming the library and the package to install. The
/// VM scenario (scripts/e2e/vm/scenarios/drill.sh) runs the mode on a real device.
#[test]
fn rdma_mode_without_libibverbs_names_the_library() {
    if !require_root() {
        return;
    }
    let args = ["drill", "--mode", "rdma", "--step-mib", "1", "--max-mib", "1", "--hold-seconds", "0"];
    let installed: Vec<PathBuf> = ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib"]
        .iter()
        .map(|dir| Path::new(dir).join("libibverbs.so.1"))
        .filter_map(|path| std::fs::canonicalize(path).ok())
        .collect();
    let mut cmd = Command::new("unshare");
    let mut script = String::from("set -e; ");
    for path in &installed {
        script.push_str(&format!("mount --bind /dev/null '{}'; ", path.display()));
    }
    script.push_str("exec \"$@\"");
    cmd.args(["--mount", "sh", "-c", &script, "sh", binary()]).args(args);
    let hidden = run(cmd);
    assert_eq!(hidden.status.code(), Some(1), "{}", hidden.context());
    assert!(hidden.stdout.is_empty(), "no start line before the error: {}", hidden.context());
    assert!(
        hidden.stderr.contains("--mode rdma: cannot load libibverbs.so.1: ")
            && hidden.stderr.contains("libibverbs1 package on Debian"),
        "{}",
        hidden.context()
    );
}
