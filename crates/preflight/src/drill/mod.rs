//! `memlock-exporter drill`: a controlled, real ramp of pinned or locked memory, so operators
//! can prove on a real node that the exporter, the rules and Alertmanager see a job heading for
//! `ENOMEM` before it gets there.
//!
//! - `pin` registers anonymous buffers with io_uring (`IORING_REGISTER_BUFFERS`). The kernel
//!   pins them with FOLL_LONGTERM and charges them to the process's `mm->pinned_vm` (`VmPin`),
//!   the counter `ibv_reg_mr` charges. A ring can register buffers only once, so every step
//!   creates a ring of its own.
//! - `lock` maps and `mlock`s one region per step: `VmLck` grows.
//! - `rdma` registers one region per step with `ibv_reg_mr` on an RDMA device, the call NCCL
//!   makes, through libibverbs loaded at run time ([`verbs`]): on a node without
//!   rdma-core only this mode fails, naming the library.
//!
//! When the kernel refuses a step (`ENOMEM`, `EPERM`, `EAGAIN`) that is the drill's expected end:
//! the errno and the amount reached are printed, the memory is held for `--hold-seconds` (so the
//! alert pipeline can be watched), then everything is released.
//!
//! This is the one module that deliberately changes the machine's state, so it refuses targets
//! above half of `MemAvailable`, and every resource it takes is released by `Drop`, whatever
//! path the run leaves by.
//!
//! Here: the flags, the plan and its safety bounds, and the run; [`event`]: the report's lines;
//! `hold`: what the drill holds and how each piece is released; [`verbs`]: libibverbs.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant, SystemTime};

use clap::{Args, ValueEnum};
use thiserror::Error;

use memlock_core::timefmt::rfc3339_millis;
use memlock_kernel::fsroot::{self, SourceError};
use memlock_kernel::pid_limits::{Limit, MemlockLimits};
use memlock_kernel::{meminfo, pid_status};

pub mod event;
mod hold;
pub mod verbs;

use event::{Counters, Event, Outcome};
use hold::{Grow, Held};

const MIB: u64 = 1 << 20;

/// Steps are one mapping (and in pin mode one ring, hence one file descriptor) each; beyond
/// this the drill would be measuring its own bookkeeping rather than the limit.
pub(crate) const MAX_STEPS: u64 = 10_000;
/// Faster than this, nothing that samples once a second could follow the ramp anyway.
pub(crate) const MIN_INTERVAL_MS: u64 = 10;
pub(crate) const MAX_INTERVAL_MS: u64 = 3_600_000;
pub(crate) const MAX_HOLD_SECONDS: u64 = 86_400;
/// io_uring refuses a single registered buffer above 1 GiB (`io_buffer_validate`), so larger
/// steps are registered as several iovecs in one call.
const IO_URING_MAX_BUFFER: usize = 1 << 30;
/// Descriptors left for stdio, /proc reads and the runtime next to one ring per step.
const SPARE_DESCRIPTORS: u64 = 64;
/// How often sleeps look at the signal flag: the bound on how late SIGTERM is honoured.
const STOP_POLL: Duration = Duration::from_millis(20);

const LONG_HELP: &str = "\
Modes:
  pin   Registers one anonymous buffer per step with io_uring (IORING_REGISTER_BUFFERS, a new ring
        each step). The kernel pins the pages and charges them to this process's VmPin
        (mm->pinned_vm), the counter ibv_reg_mr charges, and refuses with ENOMEM above the soft
        RLIMIT_MEMLOCK. Two differences from ibv_reg_mr, both in what the limit is compared
        with: io_uring checks the pages registered through io_uring by ALL processes of the
        same user (user_struct locked_vm), where ibv_reg_mr checks this process's VmPin alone,
        so another process of the same user holding io_uring buffers makes the drill refuse
        early (run it as a user with nothing else registered); and since Linux 6.13 each
        ring's own pages (2 per ring, 8 KiB) count there too but not in VmPin, so the refusal
        can come one step before VmPin alone would reach the limit. The refused call is named
        (call=io_uring_register, or io_uring_setup when a ring's pages tip it over). With
        CAP_IPC_LOCK (root) nothing is checked and the ramp runs to --max-mib, VmPin still
        growing.
  lock  mmap + mlock one region per step: VmLck (mm->locked_vm) grows, checked per process
        against the same soft limit. Locked pages also show in Mlocked and Unevictable.
  rdma  ibv_reg_mr of one buffer per step (IBV_ACCESS_LOCAL_WRITE) on the first RDMA device, or
        --rdma-device: the call NCCL makes. The kernel pins the pages (ib_umem_get) and charges
        this process's VmPin, refusing with ENOMEM above the soft RLIMIT_MEMLOCK without
        CAP_IPC_LOCK; the MRs show in `rdma resource show mr`. libibverbs.so.1 (rdma-core) is
        loaded at run time: without it, or without a device, the drill exits 1 naming what is
        missing.

--locked-mib N (pin mode) first mlocks N MiB and holds it through the ramp: the kernel checks
VmPin and VmLck each on its own against the soft limit, so a ramp of pinned memory under a flat
VmLck must page on the pinned counter before its own refusal, however much is locked.

Output: one line per step with an RFC 3339 timestamp, the step number, the requested total,
VmPin and VmLck read back from /proc/self/status, and the result; --json prints one JSON
object per line instead. A refusal (ENOMEM, EPERM, EAGAIN) is the expected end: the errno and
the amount reached are printed, the memory is held for --hold-seconds, then released (rings
closed, munlock, munmap) and a final line printed. SIGINT or SIGTERM releases at once, and so
does a reader that stops reading (`| head`): the rest of the output is dropped.

Safety: refuses to start when --max-mib exceeds half of MemAvailable, read from /proc/meminfo
(checked to be procfs) whatever --path.procfs says: the memory is this machine's.

Example, as root, for a uid of its own (io_uring checks the user's total) with a 4 MiB soft limit:
  prlimit --memlock=4194304:8388608 setpriv --reuid=61479 --regid=61479 --clear-groups \\
    memlock-exporter drill --mode pin --step-mib 1 --max-mib 16 --hold-seconds 60

Exit codes:
  0  ramp done: --max-mib reached, refused by the kernel as intended, or stopped by SIGINT/SIGTERM
     or by the reader of its output going away
  1  unexpected failure (for example io_uring disabled, mmap failing, the output not writable, or
     for --mode rdma no libibverbs.so.1 or no RDMA device)
  2  bad arguments, or refused to start because --max-mib exceeds half of MemAvailable";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// io_uring registered buffers: VmPin, like RDMA memory registration.
    Pin,
    /// mlock: VmLck.
    Lock,
    /// ibv_reg_mr on an RDMA device: VmPin, through the verbs NCCL calls.
    Rdma,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Pin => "pin",
            Mode::Lock => "lock",
            Mode::Rdma => "rdma",
        }
    }
}

/// Flags of `memlock-exporter drill`.
#[derive(Debug, Clone, Args)]
#[command(
    about = "Ramp real pinned (io_uring, ibv_reg_mr) or locked (mlock) memory until the kernel refuses, to prove \
        the alert pipeline",
    after_help = "Exit codes: 0 ramp done or refused by the kernel as intended; 1 unexpected failure; 2 bad arguments \
        or --max-mib above half of MemAvailable. See --help for details.",
    after_long_help = LONG_HELP
)]
pub struct DrillArgs {
    /// pin: io_uring registered buffers (VmPin, like ibv_reg_mr); lock: mlock (VmLck); rdma: ibv_reg_mr itself.
    #[arg(long, value_enum, default_value_t = Mode::Pin)]
    pub mode: Mode,
    /// Memory added per step, MiB.
    #[arg(long = "step-mib", value_name = "MIB", default_value_t = 64)]
    pub step_mib: u64,
    /// Pause between steps, milliseconds (10 to 3600000).
    #[arg(long = "interval-ms", value_name = "MS", default_value_t = 1000)]
    pub(crate) interval_ms: u64,
    /// Stop adding memory at this total, MiB; must not exceed half of MemAvailable.
    #[arg(long = "max-mib", value_name = "MIB")]
    pub max_mib: u64,
    /// Hold the memory this long after a refusal or after reaching --max-mib, seconds.
    #[arg(long = "hold-seconds", value_name = "S", default_value_t = 30)]
    pub(crate) hold_seconds: u64,
    /// Pin and rdma modes: mlock this much first, MiB, and hold it through the ramp.
    #[arg(long = "locked-mib", value_name = "MIB", default_value_t = 0)]
    pub(crate) locked_mib: u64,
    /// Rdma mode: the device to register on (a name in /sys/class/infiniband); default the first.
    #[arg(long = "rdma-device", value_name = "NAME")]
    pub rdma_device: Option<String>,
    /// Print one JSON object per line instead of text.
    #[arg(long)]
    pub json: bool,
    /// procfs mount point, for self/status in the report. The safety check always reads the
    /// kernel's /proc/meminfo.
    #[arg(long = "path.procfs", value_name = "PATH", default_value = "/proc")]
    pub procfs: PathBuf,
}

/// Validated arguments, in bytes and durations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub mode: Mode,
    pub(crate) step_bytes: u64,
    pub(crate) max_bytes: u64,
    /// Locked before the ramp and held through it (pin mode).
    pub locked_bytes: u64,
    pub interval: Duration,
    pub hold: Duration,
    pub json: bool,
    pub procfs: PathBuf,
    /// Rdma mode: the device asked for (None: the first).
    pub rdma_device: Option<String>,
}

impl Plan {
    /// Steps needed to reach the maximum; the last one may be smaller than the others.
    pub fn steps(&self) -> u64 {
        self.max_bytes.div_ceil(self.step_bytes)
    }
}

#[derive(Debug, Error)]
pub enum DrillError {
    #[error("--step-mib must be greater than 0")]
    ZeroStep,
    #[error("--max-mib ({max_mib}) must be at least --step-mib ({step_mib})")]
    MaxBelowStep { max_mib: u64, step_mib: u64 },
    #[error("--max-mib {0} is too large to express in bytes")]
    Overflow(u64),
    #[error("--interval-ms {0} is outside {MIN_INTERVAL_MS}..={MAX_INTERVAL_MS}")]
    Interval(u64),
    #[error("--hold-seconds {0} is above {MAX_HOLD_SECONDS} (one day)")]
    Hold(u64),
    #[error("--locked-mib goes with --mode pin or rdma (in lock mode the ramp itself is locked memory)")]
    LockedInLockMode,
    #[error("--rdma-device goes with --mode rdma")]
    DeviceWithoutRdma,
    #[error("--mode rdma: {0}")]
    Verbs(#[from] verbs::VerbsError),
    #[error("{steps} steps are too many (at most {MAX_STEPS}): raise --step-mib")]
    TooManySteps { steps: u64 },
    #[error(
        "refusing to start: --max-mib {max_mib} MiB exceeds half of MemAvailable ({available_mib} MiB available, so at \
            most {limit_mib} MiB)"
    )]
    AboveHalfAvailable { max_mib: u64, available_mib: u64, limit_mib: u64 },
    #[error("cannot check MemAvailable: {0}")]
    Meminfo(#[source] SourceError),
    #[error("cannot check MemAvailable: {} has no MemAvailable line", .0.display())]
    NoMemAvailable(PathBuf),
    #[error("cannot check MemAvailable: {} is not procfs (statfs(2) does not say PROC_SUPER_MAGIC)", .path.display())]
    NotProcfs { path: PathBuf },
    #[error(
        "{steps} steps need {needed} file descriptors (one io_uring ring each) but RLIMIT_NOFILE allows {hard}: raise \
            --step-mib or the hard limit"
    )]
    Descriptors { steps: u64, needed: u64, hard: u64 },
    #[error("{call}: {source}{hint}")]
    Syscall { call: &'static str, source: io::Error, hint: &'static str },
    #[error("writing the report: {0}")]
    Output(#[source] io::Error),
}

impl DrillError {
    /// 2 for what the operator asked (fix the flags), 1 for what the machine did.
    pub fn exit_code(&self) -> u8 {
        match self {
            DrillError::ZeroStep
            | DrillError::MaxBelowStep { .. }
            | DrillError::Overflow(_)
            | DrillError::Interval(_)
            | DrillError::Hold(_)
            | DrillError::TooManySteps { .. }
            | DrillError::AboveHalfAvailable { .. }
            | DrillError::LockedInLockMode
            | DrillError::DeviceWithoutRdma
            | DrillError::Descriptors { .. } => memlock_core::exit::USAGE,
            DrillError::Meminfo(_)
            | DrillError::NoMemAvailable(_)
            | DrillError::NotProcfs { .. }
            | DrillError::Syscall { .. }
            | DrillError::Verbs(_)
            | DrillError::Output(_) => memlock_core::exit::RUNTIME,
        }
    }

    fn syscall(call: &'static str, source: io::Error) -> Self {
        DrillError::Syscall { call, source, hint: "" }
    }
}

impl DrillArgs {
    pub(crate) fn plan(&self) -> Result<Plan, DrillError> {
        if self.step_mib == 0 {
            return Err(DrillError::ZeroStep);
        }
        if self.max_mib < self.step_mib {
            return Err(DrillError::MaxBelowStep { max_mib: self.max_mib, step_mib: self.step_mib });
        }
        // Addresses and lengths are usize: the total must fit there too (32-bit targets).
        let max_bytes = self
            .max_mib
            .checked_mul(MIB)
            .filter(|b| usize::try_from(*b).is_ok())
            .ok_or(DrillError::Overflow(self.max_mib))?;
        let step_bytes = self.step_mib * MIB;
        if !(MIN_INTERVAL_MS..=MAX_INTERVAL_MS).contains(&self.interval_ms) {
            return Err(DrillError::Interval(self.interval_ms));
        }
        if self.hold_seconds > MAX_HOLD_SECONDS {
            return Err(DrillError::Hold(self.hold_seconds));
        }
        if self.locked_mib > 0 && self.mode == Mode::Lock {
            return Err(DrillError::LockedInLockMode);
        }
        if self.rdma_device.is_some() && self.mode != Mode::Rdma {
            return Err(DrillError::DeviceWithoutRdma);
        }
        let locked_bytes = self
            .locked_mib
            .checked_mul(MIB)
            .filter(|b| b.checked_add(max_bytes).is_some_and(|total| usize::try_from(total).is_ok()))
            .ok_or(DrillError::Overflow(self.locked_mib))?;
        let plan = Plan {
            mode: self.mode,
            step_bytes,
            max_bytes,
            locked_bytes,
            interval: Duration::from_millis(self.interval_ms),
            hold: Duration::from_secs(self.hold_seconds),
            json: self.json,
            procfs: self.procfs.clone(),
            rdma_device: self.rdma_device.clone(),
        };
        if plan.steps() > MAX_STEPS {
            return Err(DrillError::TooManySteps { steps: plan.steps() });
        }
        Ok(plan)
    }
}

/// Refuses a target above half of what the kernel thinks it can hand out without swapping:
/// the drill must prove the alerting, not push the node into reclaim or the OOM killer.
pub(crate) fn check_target(max_bytes: u64, mem_available: u64) -> Result<(), DrillError> {
    let limit = mem_available / 2;
    if max_bytes > limit {
        return Err(DrillError::AboveHalfAvailable {
            max_mib: max_bytes / MIB,
            available_mib: mem_available / MIB,
            limit_mib: limit / MIB,
        });
    }
    Ok(())
}

pub fn mem_available(procfs: &Path) -> Result<u64, DrillError> {
    let path = procfs.join("meminfo");
    let info = fsroot::read_parsed(&path, meminfo::parse).map_err(DrillError::Meminfo)?;
    info.mem_available.ok_or(DrillError::NoMemAvailable(path))
}

/// MemAvailable of the kernel that hands out the memory the drill locks or pins: this
/// machine's, whatever `--path.procfs` points at (a fake meminfo there could raise the bound).
/// Read from `procfs`, after checking with statfs(2) that it is procfs (PROC_SUPER_MAGIC) and
/// not a directory standing in for it; the CLI passes /proc.
pub(crate) fn kernel_mem_available(procfs: &Path) -> Result<u64, DrillError> {
    let io_error = |source| DrillError::Meminfo(SourceError::Io { path: procfs.to_owned(), source });
    if !fsroot::is_procfs(procfs).map_err(io_error)? {
        return Err(DrillError::NotProcfs { path: procfs.to_owned() });
    }
    mem_available(procfs)
}

// ---------------------------------------------------------------------------------------------
// Running.

/// The signal that asked the drill to stop, 0 while none has. Set from the signal handler,
/// which may do nothing but this store.
static STOP: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_stop_signal(signal: libc::c_int) {
    STOP.store(signal, Ordering::Relaxed);
}

fn install_stop_handlers() -> Result<(), DrillError> {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is valid; the handler only does an atomic store, which is
        // async-signal-safe. No SA_RESTART: a blocking call may return EINTR, which we handle.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(signal, &action, std::ptr::null_mut()) != 0 {
                return Err(DrillError::syscall("sigaction", io::Error::last_os_error()));
            }
        }
    }
    Ok(())
}

fn memlock_limits() -> Option<MemlockLimits> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) } != 0 {
        return None;
    }
    let value = |v: libc::rlim_t| if v == libc::RLIM_INFINITY { Limit::Unlimited } else { Limit::Bytes(v) };
    Some(MemlockLimits { soft: value(limit.rlim_cur), hard: value(limit.rlim_max) })
}

/// Pin mode keeps one ring descriptor per step: raise the soft RLIMIT_NOFILE towards the hard
/// one when the default (often 1024) is too low, and refuse when even the hard one is.
fn ensure_descriptors(steps: u64) -> Result<(), DrillError> {
    let needed = steps + SPARE_DESCRIPTORS;
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(DrillError::syscall("getrlimit(RLIMIT_NOFILE)", io::Error::last_os_error()));
    }
    if limit.rlim_cur == libc::RLIM_INFINITY || limit.rlim_cur >= needed {
        return Ok(());
    }
    if limit.rlim_max != libc::RLIM_INFINITY && limit.rlim_max < needed {
        return Err(DrillError::Descriptors { steps, needed, hard: limit.rlim_max });
    }
    limit.rlim_cur = needed;
    // SAFETY: setrlimit reads the struct we pass; raising the soft limit up to the hard one
    // needs no privilege.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        return Err(DrillError::syscall("setrlimit(RLIMIT_NOFILE)", io::Error::last_os_error()));
    }
    Ok(())
}

struct Reporter<'a> {
    out: &'a mut dyn Write,
    json: bool,
    status_path: PathBuf,
    /// The reader went away (`| head`): nothing more is written, and the drill stops as it does
    /// on SIGINT (the memory is released at once), then exits 0 as ripgrep does.
    closed: bool,
}

impl Reporter<'_> {
    fn emit(&mut self, event: &Event) -> Result<(), DrillError> {
        if self.closed {
            return Ok(());
        }
        let time = rfc3339_millis(SystemTime::now());
        let line = if self.json {
            event.json(&time).map_err(|err| DrillError::Output(err.into()))?
        } else {
            event.text(&time)
        };
        match writeln!(self.out, "{line}").and_then(|()| self.out.flush()) {
            Err(err) if err.kind() == io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            other => other.map_err(DrillError::Output),
        }
    }

    /// VmPin and VmLck now. An unreadable status file is reported as unknown rather than
    /// ending the drill: the memory must still be held and released on schedule.
    fn counters(&self) -> Counters {
        let Ok(text) = fsroot::read_string(&self.status_path) else { return Counters::default() };
        match pid_status::parse(&text) {
            Ok(status) => Counters { vm_pin: status.pinned_bytes, vm_lck: status.locked_bytes },
            Err(_) => Counters::default(),
        }
    }

    fn cap_ipc_lock(&self) -> Option<bool> {
        let text = fsroot::read_string(&self.status_path).ok()?;
        pid_status::parse(&text).ok()?.ipc_lock()
    }
}

/// Sleeps up to `duration`; returns early (true) when a stop signal has arrived.
fn sleep_unless_stopped(duration: Duration, stop: &AtomicI32) -> bool {
    let deadline = Instant::now() + duration;
    loop {
        if stop.load(Ordering::Relaxed) != 0 {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep(STOP_POLL.min(deadline - now));
    }
}

/// The whole drill, as the CLI runs it: validate, check memory, install the signal handlers,
/// ramp, hold, release, reporting to stdout.
pub fn run(args: &DrillArgs) -> Result<Outcome, DrillError> {
    let plan = args.plan()?;
    let available = kernel_mem_available(Path::new("/proc"))?;
    check_target(plan.max_bytes.saturating_add(plan.locked_bytes), available)?;
    if plan.mode == Mode::Pin {
        ensure_descriptors(plan.steps())?;
    }
    install_stop_handlers()?;
    let stdout = io::stdout();
    let mut out = stdout.lock();
    execute(&plan, available, &mut out, &STOP)
}

/// Ramps, holds and releases according to `plan`, writing one line per event to `out`. `stop`
/// holds the number of a signal that asks to stop early (0: none).
pub fn execute(plan: &Plan, mem_available: u64, out: &mut dyn Write, stop: &AtomicI32) -> Result<Outcome, DrillError> {
    let mut reporter = Reporter { out, json: plan.json, status_path: plan.procfs.join("self/status"), closed: false };
    let mut held = Held::default();
    // Before any output: on a node without libibverbs or a device the error is the only line.
    if plan.mode == Mode::Rdma {
        held.device = Some(verbs::Device::open(verbs::LIBIBVERBS, plan.rdma_device.as_deref())?);
    }
    let memlock = memlock_limits();
    reporter.emit(&Event::Start {
        mode: plan.mode,
        step_bytes: plan.step_bytes,
        max_bytes: plan.max_bytes,
        interval: plan.interval,
        hold: plan.hold,
        memlock,
        cap_ipc_lock: reporter.cap_ipc_lock(),
        mem_available,
        pid: std::process::id(),
        // SAFETY: getuid has no preconditions.
        uid: unsafe { libc::getuid() },
    })?;

    let page = usize::try_from(procfs::page_size()).unwrap_or(4096);
    if plan.locked_bytes > 0 {
        let len = usize::try_from(plan.locked_bytes).map_err(|_| DrillError::Overflow(plan.locked_bytes / MIB))?;
        match held.grow(Mode::Lock, len, page, stop)? {
            Grow::Done => reporter.emit(&Event::Locked { bytes: plan.locked_bytes, counters: reporter.counters() })?,
            // Refused before the ramp: the limit is below --locked-mib. Said as a step 0.
            Grow::Refused(refused) => {
                let counters = reporter.counters();
                let step =
                    Event::Step { step: 0, requested: plan.locked_bytes, counters, refused: Some(refused), reached: 0 };
                reporter.emit(&step)?;
                held.release();
                return Ok(Outcome::Refused(refused.errno));
            }
            Grow::Interrupted => {
                held.release();
                return Ok(Outcome::Interrupted);
            }
        }
    }
    let mut reached: u64 = 0;
    let mut step: u64 = 0;
    let outcome = loop {
        if stop.load(Ordering::Relaxed) != 0 || reporter.closed {
            break Outcome::Interrupted;
        }
        step += 1;
        let len = plan.step_bytes.min(plan.max_bytes - reached);
        let len_usize = usize::try_from(len).map_err(|_| DrillError::Overflow(plan.max_bytes / MIB))?;
        let requested = reached + len;
        let grow = held.grow(plan.mode, len_usize, page, stop)?;
        let refused = match grow {
            Grow::Done => {
                reached = requested;
                None
            }
            Grow::Refused(refused) => Some(refused),
            Grow::Interrupted => break Outcome::Interrupted,
        };
        reporter.emit(&Event::Step { step, requested, counters: reporter.counters(), refused, reached })?;
        if let Some(refused) = refused {
            break Outcome::Refused(refused.errno);
        }
        if reached >= plan.max_bytes {
            break Outcome::MaxReached;
        }
        if reporter.closed || sleep_unless_stopped(plan.interval, stop) {
            break Outcome::Interrupted;
        }
    };

    if outcome != Outcome::Interrupted {
        reporter.emit(&Event::Hold { reached, hold: plan.hold })?;
        if !reporter.closed {
            sleep_unless_stopped(plan.hold, stop);
        }
    }
    held.release();
    let signal = Some(stop.load(Ordering::Relaxed)).filter(|s| *s != 0);
    reporter.emit(&Event::Released { outcome, reached, counters: reporter.counters(), signal })?;
    Ok(outcome)
}

#[cfg(test)]
mod tests;
