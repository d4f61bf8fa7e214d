//! `check --exec -- CMD` on this machine: the command runs in the checker's place (same pid,
//! environment, limits and standard streams) when the verdict passes, and never when it fails.

use std::io::Read;
use std::process::{Command, Stdio};

use crate::util::{binary, binary_runnable_by, is_root};

/// A shape that needs no registration at all: the memlock limit cannot fail it.
const FITS: [&str; 4] = ["--nodes", "1", "--ranks-per-node", "1"];

/// This process's hard RLIMIT_MEMLOCK in bytes (`u64::MAX` for unlimited).
fn memlock_hard_limit() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct we own.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) }, 0);
    limit.rlim_max
}

#[test]
fn a_passing_check_becomes_the_command_with_its_pid_environment_and_limits() {
    // prlimit sets the hard limit to 8 MiB: above this process's, only root may.
    crate::require!(
        is_root() || memlock_hard_limit() >= 8 << 20,
        "needs root or a hard memlock limit of at least 8 MiB (ulimit -H -l: {} KiB)",
        memlock_hard_limit() >> 10
    );
    let mut child = Command::new("prlimit")
        .args(["--memlock=4194304:8388608", binary()])
        .arg("check")
        .args(FITS)
        .args([
            "--exec",
            "--",
            "sh",
            "-c",
            r#"echo "pid=$$ ppid=$PPID marker=$EXEC_MARKER"; cat /proc/self/limits; cat"#,
        ])
        .env("EXEC_MARKER", "kept")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run check --exec");
    // prlimit execs the checker, which execs sh: all three are one process.
    let pid = child.id();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"from stdin\n").unwrap();
    }
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{out}");
    let me = std::process::id();
    assert!(out.starts_with(&format!("pid={pid} ppid={me} marker=kept\n")), "{out}");
    let locked = out.lines().find(|l| l.starts_with("Max locked memory")).expect("limits");
    assert_eq!(locked.split_whitespace().collect::<Vec<_>>()[3..6], ["4194304", "8388608", "bytes"], "{locked}");
    assert!(out.ends_with("from stdin\n"), "stdin reaches the command: {out}");
}

/// A variable that is not UTF-8 neither stops the check nor changes on its way to the command.
#[test]
fn an_environment_that_is_not_utf8_reaches_the_command_unchanged() {
    use std::os::unix::ffi::OsStrExt;
    let value = std::ffi::OsStr::from_bytes(b"caf\xe9");
    let out = Command::new(binary())
        .arg("check")
        .args(FITS)
        .args(["--exec", "--", "sh", "-c", "printf %s \"$LATIN1\""])
        .env("LATIN1", value)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, value.as_bytes());
}

/// The checker's own files are closed at the exec: CMD has the descriptors it would have had.
/// (ls lists its own, without a shell whose pipeline pipes come and go.)
#[test]
fn the_command_gets_the_descriptors_it_would_have_had() {
    let direct = Command::new("ls").arg("/proc/self/fd").output().unwrap();
    let wrapped =
        Command::new(binary()).arg("check").args(FITS).args(["--exec", "--", "ls", "/proc/self/fd"]).output().unwrap();
    assert_eq!(wrapped.status.code(), Some(0), "{}", String::from_utf8_lossy(&wrapped.stderr));
    assert_eq!(String::from_utf8_lossy(&wrapped.stdout), String::from_utf8_lossy(&direct.stdout));
}

#[test]
fn a_failing_check_prints_the_reasons_and_does_not_run_the_command() {
    crate::require!(is_root(), "live tests run as root");
    let dir = std::env::temp_dir().join(format!("memlock-exec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let marker = dir.join("ran");
    let touch = format!("touch {}", marker.display());
    // An unprivileged rank at this machine's 8 MiB limit, and root judged without CAP_IPC_LOCK.
    let as_nobody = {
        let mut cmd = Command::new("prlimit");
        cmd.args(["--memlock=8388608:8388608", "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(binary_runnable_by(65534))
            .current_dir("/");
        cmd
    };
    let as_root = {
        let mut cmd = Command::new("prlimit");
        cmd.args(["--memlock=8388608:8388608", binary()]);
        cmd
    };
    for (mut cmd, extra) in [(as_nobody, None), (as_root, Some("--without-cap-ipc-lock"))] {
        cmd.args(["check", "--nodes", "2", "--ranks-per-node", "8"]).args(extra);
        let out = cmd.args(["--exec", "--", "sh", "-c", &touch]).output().expect("run check --exec");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{extra:?}: {stderr}");
        assert!(out.stdout.is_empty(), "the command's stdout is left alone: {:?}", out.stdout);
        assert!(stderr.contains("memlock-exporter check: FAIL  memlock.soft  8.0 MiB"), "{stderr}");
        // The launcher's own fix, with how to verify it in that path.
        assert!(stderr.contains("    fix: ") && stderr.contains(" (verify: "), "{stderr}");
        assert!(stderr.lines().last().is_some_and(|l| l.ends_with("; not running sh")), "{stderr}");
        assert!(!marker.exists(), "{extra:?}: the command ran");
    }
    // Without the flag root's CAP_IPC_LOCK exempts it: the same shape runs.
    let out = Command::new("prlimit")
        .args(["--memlock=8388608:8388608", binary(), "check", "--nodes", "2", "--exec", "--", "sh", "-c", &touch])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(marker.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_command_that_cannot_run_exits_as_a_shell_would() {
    let run = |program: &str| Command::new(binary()).arg("check").args(FITS).args(["--exec", "--", program]).output();
    let missing = run("memlock-exporter-no-such-command").unwrap();
    assert_eq!(missing.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("--exec memlock-exporter-no-such-command on "));
    let plain = std::env::temp_dir().join(format!("memlock-exec-plain-{}", std::process::id()));
    std::fs::write(&plain, "echo ran\n").unwrap();
    crate::util::set_mode(&plain, 0o644);
    let not_executable = run(plain.to_str().unwrap()).unwrap();
    let _ = std::fs::remove_file(&plain);
    assert_eq!(not_executable.status.code(), Some(126), "{}", String::from_utf8_lossy(&not_executable.stderr));
    assert!(not_executable.stdout.is_empty());
    // A check that cannot run does not run the command either.
    let broken = Command::new(binary())
        .args(["check", "--path.procfs", "/nonexistent", "--exec", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(broken.status.code(), Some(2));
}

/// A PATH with a directory the user may not search (root's own, inherited by `sudo -u` or a
/// job script): execvp answered EACCES for a command in none of the directories, and the
/// checker exited 126 where a shell says "command not found", 127.
#[test]
fn a_path_directory_the_user_cannot_search_is_skipped_as_a_shell_skips_it() {
    crate::require!(is_root(), "needs root to make a directory uid 65534 cannot search");
    let private = std::env::temp_dir().join(format!("memlock-exec-private-{}", std::process::id()));
    std::fs::create_dir_all(&private).unwrap();
    crate::util::set_mode(&private, 0o700);
    let path = format!("{}:/usr/bin:/bin", private.display());
    let as_nobody = |command: &mut Command| {
        let mut setpriv = Command::new("setpriv");
        setpriv.args(["--reuid=65534", "--regid=65534", "--clear-groups"]).arg(command.get_program());
        setpriv.args(command.get_args()).env("PATH", &path).current_dir("/").output().unwrap()
    };
    let binary = binary_runnable_by(65534);
    let ours = as_nobody(Command::new(&binary).arg("check").args(FITS).args([
        "--exec",
        "--",
        "memlock-exporter-no-such-command",
    ]));
    let shell = as_nobody(Command::new("/bin/sh").args(["-c", "memlock-exporter-no-such-command"]));
    let _ = std::fs::remove_dir(&private);
    assert_eq!(shell.status.code(), Some(127), "{}", String::from_utf8_lossy(&shell.stderr));
    assert_eq!(ours.status.code(), shell.status.code(), "{}", String::from_utf8_lossy(&ours.stderr));
    assert!(String::from_utf8_lossy(&ours.stderr).contains("command not found"), "{ours:?}");
}
