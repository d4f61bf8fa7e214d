//! `check` as the job will run: flags that judge the node for user jobs from a Slurm health
//! check, a prolog or a node-problem-detector plugin (which run privileged, in their own cgroup,
//! with their own environment), a one-line summary for a drain reason or a node condition, and
//! `--exec`, which checks the rank's own process and then becomes the rank.
//!
//! The rules stay in [`crate::check`]: these flags change what the rules are given (the machine
//! state) and which findings are kept, never the rules themselves.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;

use clap::Args;

use crate::findings::{Finding, Report, Status};
use crate::machine::Machine;
use memlock_core::units::bytes as human;
use memlock_kernel::pid_limits::{Limit, MemlockLimits};

/// Exit status when `--exec`'s command cannot be run, as a shell reports it.
pub(crate) const EXIT_NOT_EXECUTABLE: u8 = 126;
/// Exit status when `--exec`'s command is not found, as a shell reports it.
pub(crate) const EXIT_NOT_FOUND: u8 = 127;

#[derive(Debug, Args, Default, Clone)]
pub struct JobContextArgs {
    /// Judge the memlock limit as a process without CAP_IPC_LOCK: user jobs do not hold it,
    /// while a Slurm health check or prolog (root) or a privileged pod does.
    #[arg(long = "without-cap-ipc-lock", conflicts_with = "as_root")]
    pub(crate) without_cap_ipc_lock: bool,
    /// Without --pid, check judges a normal user's rank, without the checker's CAP_IPC_LOCK:
    /// this judges a job that really runs as root (with the capability) instead.
    #[arg(long = "as-root")]
    pub as_root: bool,
    /// The job's soft memlock limit is set from where it was submitted (Slurm's
    /// PropagateResourceLimits): judge the hard limit, the most it can become, and WARN.
    #[arg(long = "memlock-propagated")]
    pub(crate) memlock_propagated: bool,
    /// Leave out findings with this id, or ids under it (`nccl` leaves out `nccl.debug` and
    /// `nccl.env.*`); repeatable.
    #[arg(long, value_name = "ID")]
    pub skip: Vec<String>,
    /// One line on stdout: the failing findings with their figures (for a drain reason or a
    /// node condition message), or PASS.
    #[arg(long, conflicts_with = "json")]
    pub summary: bool,
    /// Check this process, then run CMD in its place (same pid, environment and limits). On a
    /// FAIL the reasons go to stderr and CMD does not run (exit 1).
    #[arg(long, requires = "command", conflicts_with_all = ["pid", "json", "summary"])]
    pub exec: bool,
    /// The command `--exec` runs, after `--`.
    #[arg(last = true, value_name = "CMD", requires = "exec")]
    pub command: Vec<OsString>,
}

/// What [`adjust_machine`] changed, for [`adjust_findings`] to say so.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Adjusted {
    /// The checked process held CAP_IPC_LOCK and is judged without it.
    held_cap_ipc_lock: bool,
    /// The hard limit the soft one was judged at (`--memlock-propagated`).
    propagated_hard: Option<Limit>,
}

/// Changes the machine state to the one the job will see.
pub(crate) fn adjust_machine(args: &JobContextArgs, machine: &mut Machine) -> Adjusted {
    let mut adjusted = Adjusted::default();
    if args.without_cap_ipc_lock {
        adjusted.held_cap_ipc_lock = machine.ipc_lock == Some(true);
        machine.ipc_lock = Some(false);
    }
    if args.memlock_propagated {
        if let Some(limits) = machine.limits {
            // Slurm applies the submit host's soft limit capped at slurmstepd's hard limit
            // (src/slurmd/slurmstepd/ulimits.c, _set_limit(): "reducing req to max").
            machine.limits = Some(MemlockLimits { soft: limits.hard, hard: limits.hard });
            adjusted.propagated_hard = Some(limits.hard);
        }
    }
    adjusted
}

/// Says in the findings what was judged differently, and drops the skipped ones.
pub(crate) fn adjust_findings(args: &JobContextArgs, adjusted: &Adjusted, findings: &mut Vec<Finding>) {
    if adjusted.held_cap_ipc_lock {
        if let Some(cap) = findings.iter_mut().find(|f| f.id == "memlock.cap_ipc_lock") {
            cap.measured.push_str(" (judged without it, --without-cap-ipc-lock: this process holds it)");
        }
    }
    if let Some(hard) = adjusted.propagated_hard {
        let hard = match hard {
            Limit::Unlimited => "unlimited".to_owned(),
            Limit::Bytes(bytes) => human(bytes as f64),
        };
        let finding = Finding {
            id: "memlock.propagated".into(),
            status: Status::Warn,
            measured: format!(
                "the soft limit comes from the submit host, capped at this node's hard limit ({hard}): \
                memlock.soft is judged at that cap"
            ),
            fix: "keep the submit host's limit out: PropagateResourceLimitsExcept=MEMLOCK in slurm.conf and \
                LimitMEMLOCK=infinity for slurmd, or check each rank with `check --exec`"
                .into(),
        };
        let at = findings.iter().position(|f| f.id == "memlock.hard").map_or(0, |i| i + 1);
        findings.insert(at, finding);
    }
    findings.retain(|f| !args.skip.iter().any(|skip| skipped(&f.id, skip)));
}

fn skipped(id: &str, skip: &str) -> bool {
    id.strip_prefix(skip).is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

/// The findings that make the verdict fail: FAIL, and WARN with `--strict`.
fn failing(report: &Report, strict: bool) -> impl Iterator<Item = &Finding> {
    report.findings.iter().filter(move |f| f.status == Status::Fail || (strict && f.status == Status::Warn))
}

/// One line: `memlock.soft 8.0 MiB < the busiest rank's estimated need 76.4 MiB; ...` when the verdict fails,
/// else `PASS` and the warnings' ids.
pub(crate) fn render_summary(report: &Report, strict: bool) -> String {
    let failed: Vec<String> = failing(report, strict).map(|f| format!("{} {}", f.id, f.measured)).collect();
    if !failed.is_empty() {
        return failed.join("; ") + "\n";
    }
    let warnings: Vec<&str> =
        report.findings.iter().filter(|f| f.status == Status::Warn).map(|f| f.id.as_str()).collect();
    if warnings.is_empty() {
        "PASS\n".into()
    } else {
        format!("PASS (warnings: {})\n", warnings.join(", "))
    }
}

/// `--exec`: runs the command in this process when the verdict passes, else prints why not.
/// Returns only when the command did not run.
pub(crate) fn exec_or_refuse(args: &JobContextArgs, report: &Report, strict: bool) -> u8 {
    let Some((program, rest)) = args.command.split_first() else {
        eprintln!("memlock-exporter check: --exec needs a command after --");
        return memlock_core::exit::USAGE;
    };
    let shown = program.to_string_lossy();
    let host = hostname();
    let failed: Vec<&Finding> = failing(report, strict).collect();
    if !failed.is_empty() {
        let mut text = String::new();
        for f in &failed {
            let status = if f.status == Status::Fail { "FAIL" } else { "WARN" };
            text.push_str(&format!("memlock-exporter check: {status}  {}  {}\n", f.id, f.measured));
            if !f.fix.is_empty() {
                text.push_str(&format!("    fix: {}\n", f.fix));
            }
        }
        text.push_str(&format!(
            "memlock-exporter check: {} on {host} (pid {}); not running {shown}\n",
            match failed.len() {
                1 => "1 check failed".to_owned(),
                n => format!("{n} checks failed"),
            },
            std::process::id()
        ));
        // The job's output is where this is read; a closed stderr cannot change the verdict.
        let _ = crate::write_report(&mut std::io::stderr().lock(), &text);
        return 1;
    }
    // execvp: the PATH lookup, argv, environment, rlimits, cgroup and pid stay as they are.
    let err = std::process::Command::new(program).args(rest).exec();
    // execvp answers EACCES when a PATH directory cannot be searched and the command is in none
    // of the others (glibc posix/execvpe.c __execvpe_common keeps the EACCES of any attempt); a
    // shell skips such directories and says "not found" (127).
    let not_found = match err.kind() {
        std::io::ErrorKind::NotFound => true,
        std::io::ErrorKind::PermissionDenied => {
            !std::os::unix::ffi::OsStrExt::as_bytes(program.as_os_str()).contains(&b'/') && !on_path(program)
        }
        _ => false,
    };
    if not_found {
        eprintln!("memlock-exporter check: --exec {shown} on {host}: command not found ({err})");
        EXIT_NOT_FOUND
    } else {
        eprintln!("memlock-exporter check: --exec {shown} on {host}: {err}");
        EXIT_NOT_EXECUTABLE
    }
}

/// Whether some directory of PATH (an empty entry: the current one) holds a file `program`.
fn on_path(program: &std::ffi::OsStr) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|dir| {
        let dir = if dir.as_os_str().is_empty() { std::path::PathBuf::from(".") } else { dir };
        dir.join(program).exists()
    })
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_else(|_| "this node".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    const MIB: u64 = 1 << 20;

    fn parse(args: &[&str]) -> Result<crate::check::CheckArgs, clap::Error> {
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            check: crate::check::CheckArgs,
        }
        Wrapper::try_parse_from(std::iter::once("check").chain(args.iter().copied())).map(|w| w.check)
    }

    fn finding(id: &str, status: Status) -> Finding {
        Finding { id: id.into(), status, measured: format!("{id} figures"), fix: String::new() }
    }

    fn report(findings: Vec<Finding>) -> Report {
        Report {
            pid: "self".into(),
            need_per_process_bytes: 0,
            need_per_node_bytes: 0,
            need_per_node_host_bytes: 0,
            model: Default::default(),
            findings,
            launch: None,
            facts: Vec::new(),
        }
    }

    #[test]
    fn exec_takes_the_command_after_the_double_dash() {
        let args = parse(&["--nodes", "4", "--exec", "--", "python", "train.py", "--lr", "0.1"]).unwrap();
        assert!(args.job.exec);
        assert_eq!(args.job.command, ["python", "train.py", "--lr", "0.1"]);
        assert_eq!(args.model.nodes, 4, "flags before --exec are check's");
        for bad in [
            &["--exec"][..],
            &["--", "python"],
            &["--exec", "--pid", "1", "--", "true"],
            &["--exec", "--json", "--", "true"],
            &["--exec", "--summary", "--", "true"],
            &["--summary", "--json"],
        ] {
            let err = parse(bad).err().unwrap_or_else(|| panic!("{bad:?} parsed"));
            assert_eq!(err.exit_code(), 2, "{bad:?}: {err}");
        }
    }

    #[test]
    fn without_cap_ipc_lock_judges_the_limit_and_says_so() {
        let args = parse(&["--without-cap-ipc-lock"]).unwrap().job;
        let mut machine = Machine { ipc_lock: Some(true), ..Default::default() };
        let adjusted = adjust_machine(&args, &mut machine);
        assert_eq!(machine.ipc_lock, Some(false));
        let mut findings = vec![finding("memlock.cap_ipc_lock", Status::Pass)];
        adjust_findings(&args, &adjusted, &mut findings);
        assert!(findings[0].measured.ends_with("(judged without it, --without-cap-ipc-lock: this process holds it)"));

        // A process without it is judged the same; nothing to say.
        let mut machine = Machine { ipc_lock: Some(false), ..Default::default() };
        let adjusted = adjust_machine(&args, &mut machine);
        let mut findings = vec![finding("memlock.cap_ipc_lock", Status::Pass)];
        adjust_findings(&args, &adjusted, &mut findings);
        assert_eq!(findings[0].measured, "memlock.cap_ipc_lock figures");
    }

    #[test]
    fn a_propagated_limit_is_judged_at_the_hard_cap_with_a_warning() {
        let args = parse(&["--memlock-propagated"]).unwrap().job;
        let low_soft = MemlockLimits { soft: Limit::Bytes(8 * MIB), hard: Limit::Unlimited };
        let mut machine = Machine { limits: Some(low_soft), ..Default::default() };
        let adjusted = adjust_machine(&args, &mut machine);
        assert_eq!(machine.limits, Some(MemlockLimits { soft: Limit::Unlimited, hard: Limit::Unlimited }));
        let mut findings = vec![finding("memlock.soft", Status::Pass), finding("memlock.hard", Status::Pass)];
        findings.push(finding("memory.available", Status::Pass));
        adjust_findings(&args, &adjusted, &mut findings);
        let ids: Vec<&str> = findings.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(ids, ["memlock.soft", "memlock.hard", "memlock.propagated", "memory.available"]);
        assert_eq!(findings[2].status, Status::Warn);
        assert!(findings[2].measured.contains("capped at this node's hard limit (unlimited)"), "{:?}", findings[2]);
        assert!(findings[2].fix.contains("PropagateResourceLimitsExcept=MEMLOCK"));

        let low_hard = MemlockLimits { soft: Limit::Bytes(MIB), hard: Limit::Bytes(8 * MIB) };
        let mut machine = Machine { limits: Some(low_hard), ..Default::default() };
        adjust_machine(&args, &mut machine);
        assert_eq!(machine.limits.map(|l| l.soft), Some(Limit::Bytes(8 * MIB)), "no submit host gets past it");
    }

    #[test]
    fn skip_drops_an_id_and_the_ids_under_it_only() {
        let args = parse(&["--skip", "nccl", "--skip", "cgroup.memory"]).unwrap().job;
        let mut findings: Vec<Finding> =
            ["nccl.debug", "nccl.env.NCCL_X", "ncclx.other", "cgroup.memory", "cgroup.memoryx", "memlock.soft"]
                .iter()
                .map(|id| finding(id, Status::Warn))
                .collect();
        adjust_findings(&args, &Adjusted::default(), &mut findings);
        let ids: Vec<&str> = findings.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(ids, ["ncclx.other", "cgroup.memoryx", "memlock.soft"]);
    }

    #[test]
    fn the_summary_is_one_line_of_what_fails() {
        let failing = report(vec![
            finding("memlock.soft", Status::Fail),
            finding("nccl.debug", Status::Warn),
            finding("memory.available", Status::Fail),
        ]);
        assert_eq!(
            render_summary(&failing, false),
            "memlock.soft memlock.soft figures; memory.available memory.available figures\n"
        );
        let warned = report(vec![finding("memlock.soft", Status::Pass), finding("nccl.debug", Status::Warn)]);
        assert_eq!(render_summary(&warned, false), "PASS (warnings: nccl.debug)\n");
        assert_eq!(render_summary(&warned, true), "nccl.debug nccl.debug figures\n", "--strict fails on WARN");
        assert_eq!(render_summary(&report(vec![finding("memlock.soft", Status::Pass)]), false), "PASS\n");
    }
}
