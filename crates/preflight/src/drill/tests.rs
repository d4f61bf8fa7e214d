use super::*;
use clap::Parser;

#[derive(Debug, Parser)]
struct Wrapper {
    #[command(flatten)]
    args: DrillArgs,
}

fn args(extra: &[&str]) -> Result<DrillArgs, clap::Error> {
    let mut argv = vec!["drill"];
    argv.extend_from_slice(extra);
    Wrapper::try_parse_from(argv).map(|w| w.args)
}

fn plan(extra: &[&str]) -> Result<Plan, DrillError> {
    args(extra).unwrap().plan()
}

#[test]
fn defaults_and_units() {
    let plan = plan(&["--max-mib", "256"]).unwrap();
    assert_eq!(plan.mode, Mode::Pin);
    assert_eq!(plan.step_bytes, 64 << 20);
    assert_eq!(plan.max_bytes, 256 << 20);
    assert_eq!(plan.interval, Duration::from_secs(1));
    assert_eq!(plan.hold, Duration::from_secs(30));
    assert_eq!(plan.steps(), 4);
    assert!(!plan.json);
    assert_eq!(plan.procfs, PathBuf::from("/proc"));

    let plan = plan_of(&[
        "--mode",
        "lock",
        "--step-mib",
        "3",
        "--max-mib",
        "10",
        "--interval-ms",
        "10",
        "--hold-seconds",
        "0",
        "--json",
    ]);
    assert_eq!(plan.mode, Mode::Lock);
    assert_eq!(plan.steps(), 4, "3+3+3+1");
    assert_eq!(plan.hold, Duration::ZERO);
    assert!(plan.json);
}

fn plan_of(extra: &[&str]) -> Plan {
    plan(extra).unwrap()
}

#[test]
fn bad_arguments_are_refused_with_exit_code_2() {
    let cases: &[(&[&str], &str)] = &[
        (&["--max-mib", "16", "--step-mib", "0"], "greater than 0"),
        (&["--max-mib", "4", "--step-mib", "8"], "at least --step-mib"),
        (&["--max-mib", "16", "--step-mib", "1", "--interval-ms", "9"], "outside 10..=3600000"),
        (&["--max-mib", "16", "--step-mib", "1", "--interval-ms", "3600001"], "outside"),
        (&["--max-mib", "16", "--step-mib", "1", "--hold-seconds", "86401"], "one day"),
        (&["--max-mib", "10001", "--step-mib", "1"], "too many"),
        (&["--max-mib", "18446744073709551615", "--step-mib", "1"], "too large"),
        (&["--mode", "lock", "--max-mib", "8", "--step-mib", "1", "--locked-mib", "6"], "goes with --mode pin"),
        (&["--max-mib", "8", "--step-mib", "1", "--locked-mib", "18446744073709551615"], "too large"),
        (&["--max-mib", "8", "--step-mib", "1", "--rdma-device", "rxe0"], "goes with --mode rdma"),
    ];
    for (flags, message) in cases {
        let err = plan(flags).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{flags:?}: {err}");
        assert!(err.to_string().contains(message), "{flags:?}: {err}");
    }
    // Edges that are fine.
    assert!(plan(&["--max-mib", "8", "--step-mib", "8", "--interval-ms", "10", "--hold-seconds", "86400"]).is_ok());
    assert!(plan(&["--max-mib", "10000", "--step-mib", "1"]).is_ok());
    let rdma = plan(&["--mode", "rdma", "--max-mib", "8", "--step-mib", "1", "--rdma-device", "mlx5_0"]).unwrap();
    assert_eq!((rdma.mode, rdma.rdma_device.as_deref()), (Mode::Rdma, Some("mlx5_0")));
}

#[test]
fn clap_rejects_what_is_not_a_number_or_mode() {
    assert_eq!(args(&["--max-mib", "-1"]).unwrap_err().exit_code(), 2);
    assert_eq!(args(&["--max-mib", "1", "--mode", "register"]).unwrap_err().exit_code(), 2);
    assert_eq!(args(&[]).unwrap_err().exit_code(), 2, "--max-mib is required");
}

#[test]
fn targets_above_half_of_mem_available_are_refused() {
    let available = 1000 * MIB + 123;
    assert!(check_target(500 * MIB, available).is_ok());
    let err = check_target(501 * MIB, available).unwrap_err();
    assert_eq!(err.exit_code(), 2);
    assert_eq!(
        err.to_string(),
        "refusing to start: --max-mib 501 MiB exceeds half of MemAvailable (1000 MiB available, so at most 500 MiB)"
    );
}

#[test]
fn mem_available_comes_from_the_procfs_root() {
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/proc");
    assert_eq!(mem_available(&fixtures).unwrap(), 23786376 * 1024);
    let missing = mem_available(Path::new("/nonexistent-procfs")).unwrap_err();
    assert_eq!(missing.exit_code(), 1);
    assert!(missing.to_string().contains("/nonexistent-procfs/meminfo"), "{missing}");
}

/// A fake meminfo under --path.procfs claiming more memory than the host has must not raise
/// the drill's bound: the bound comes from the kernel's procfs, and a directory in its place
/// is refused.
#[test]
fn the_safety_bound_comes_from_the_kernel_not_from_path_procfs() {
    let tmp = tempfile::Builder::new().prefix("memlock-drill-fake-").tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    std::fs::write(dir.join("meminfo"), "MemTotal: 10737418240 kB\nMemAvailable: 10737418240 kB\n").unwrap();
    let err = kernel_mem_available(&dir).unwrap_err();
    assert!(matches!(err, DrillError::NotProcfs { .. }), "{err}");
    assert!(err.to_string().contains("is not procfs"), "{err}");
    assert_eq!(err.exit_code(), 1);
    let real = kernel_mem_available(Path::new("/proc")).unwrap();
    let total = fsroot::read_parsed(Path::new("/proc/meminfo"), meminfo::parse).unwrap().mem_total.unwrap();
    assert!(real > 0 && real <= total, "{real} of {total}");
}

#[test]
fn a_meminfo_without_mem_available_is_a_runtime_error() {
    let tmp = tempfile::Builder::new().prefix("memlock-drill-meminfo-").tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    // Kernels before 3.14 have no MemAvailable line.
    std::fs::write(dir.join("meminfo"), "MemTotal:       24684084 kB\nMemFree:        20000000 kB\n").unwrap();
    let err = mem_available(&dir).unwrap_err();
    assert!(matches!(err, DrillError::NoMemAvailable(_)), "{err}");
    assert_eq!(err.exit_code(), 1);
}

const T: &str = "2026-11-30T08:19:19.123Z";

fn counters(pin_kb: u64, lck_kb: u64) -> Counters {
    Counters { vm_pin: Some(pin_kb * 1024), vm_lck: Some(lck_kb * 1024) }
}

#[test]
fn locked_memory_under_a_pin_ramp() {
    let plan = plan(&["--max-mib", "8", "--step-mib", "1", "--locked-mib", "6"]).unwrap();
    assert_eq!((plan.mode, plan.locked_bytes, plan.max_bytes), (Mode::Pin, 6 * MIB, 8 * MIB));
    assert_eq!(plan_of(&["--max-mib", "8", "--step-mib", "1"]).locked_bytes, 0);
    let locked = Event::Locked { bytes: 6 * MIB, counters: counters(0, 6144) };
    assert_eq!(locked.text(T), format!("{T} event=locked bytes=6MiB vmpin=0kB vmlck=6144kB"));
    assert_eq!(
        locked.json(T).unwrap(),
        format!(r#"{{"time":"{T}","event":"locked","locked_bytes":6291456,"vmpin_bytes":0,"vmlck_bytes":6291456}}"#)
    );
}

#[test]
fn a_set_stop_flag_ends_sleeps_at_once() {
    let stop = AtomicI32::new(libc::SIGTERM);
    let started = Instant::now();
    assert!(sleep_unless_stopped(Duration::from_secs(3600), &stop));
    assert!(started.elapsed() < Duration::from_secs(60), "returned instead of sleeping an hour");
    assert!(!sleep_unless_stopped(Duration::from_millis(1), &AtomicI32::new(0)));
}

#[test]
fn a_stop_before_the_first_step_takes_nothing_and_reports_the_signal() {
    let plan = plan_of(&["--mode", "lock", "--max-mib", "4", "--step-mib", "1", "--interval-ms", "10"]);
    let stop = AtomicI32::new(libc::SIGINT);
    let mut out = Vec::new();
    assert_eq!(execute(&plan, 1 << 30, &mut out, &stop).unwrap(), Outcome::Interrupted);
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].contains(" event=start mode=lock step=1MiB max=4MiB "), "{text}");
    assert!(lines[1].contains(" event=released outcome=interrupted reached=0B "), "{text}");
    assert!(lines[1].ends_with(" signal=SIGINT"), "{text}");
}

/// An output whose writes fail with `errno` once `accepted` lines have been written.
struct Broken {
    errno: i32,
    accepted: usize,
    lines: Vec<u8>,
}

impl Write for Broken {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.lines.iter().filter(|b| **b == b'\n').count() >= self.accepted {
            return Err(io::Error::from_raw_os_error(self.errno));
        }
        self.lines.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn output_errors_are_reported_not_panics() {
    let plan = plan_of(&["--mode", "lock", "--max-mib", "1", "--step-mib", "1"]);
    let mut full = Broken { errno: libc::ENOSPC, accepted: 0, lines: Vec::new() };
    let err = execute(&plan, 1 << 30, &mut full, &AtomicI32::new(0)).unwrap_err();
    assert!(matches!(err, DrillError::Output(_)), "{err}");
    assert_eq!(err.exit_code(), 1);
}

#[test]
fn a_reader_that_goes_away_stops_the_drill_quietly() {
    // Interval and hold long enough that a drill carrying on would stand out.
    let ramp = plan_of(&[
        "--mode",
        "lock",
        "--max-mib",
        "4",
        "--step-mib",
        "1",
        "--interval-ms",
        "10000",
        "--hold-seconds",
        "600",
    ]);
    let one_step = plan_of(&["--mode", "lock", "--max-mib", "1", "--step-mib", "1", "--hold-seconds", "600"]);
    // Gone before the start line, before the first step's, before the hold's.
    for (plan, accepted, outcome) in
        [(&ramp, 0, Outcome::Interrupted), (&ramp, 1, Outcome::Interrupted), (&one_step, 2, Outcome::MaxReached)]
    {
        let mut head = Broken { errno: libc::EPIPE, accepted, lines: Vec::new() };
        let started = Instant::now();
        assert_eq!(execute(plan, 1 << 30, &mut head, &AtomicI32::new(0)).unwrap(), outcome);
        assert!(started.elapsed() < Duration::from_secs(5), "after {accepted} line(s) the drill stops at once");
        let text = String::from_utf8(head.lines).unwrap();
        assert_eq!(text.lines().count(), accepted, "{text}");
    }
}
