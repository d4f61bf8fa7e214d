//! The collector's probes in tracefs: defining them, pairing in the kernel where it can, and
//! removing them and the leftovers of earlier runs.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use memlock_kernel::fsroot::{self, Roots, SourceError};

use super::calls::{Call, CALLS};

/// Every name the collector creates in tracefs starts with this.
pub(crate) const PREFIX: &str = "memlock_exporter_";

/// `userspace` in this environment variable pairs entries in user space even where the kernel
/// could ([`Mode`]): to compare the two, and to test the fallback on a kernel that has both. A
/// diagnostic, not a setting: outside the configuration's `MEMLOCK_EXPORTER_` prefix, whose
/// variables must be configuration keys.
pub(crate) const PAIRING_ENV: &str = "MEMLOCK_FAILURES_PAIRING";

/// Per-CPU ring buffer of the instance: at 1,000 registrations/s one entry line of about 120
/// bytes each, [`READ_EVERY`] holds 6 KiB.
const BUFFER_KB: u64 = 256;

/// Why the collector does not run, the `reason` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsupported {
    NoTracefs,
    NoKprobeEvents,
    NoPermission,
    NoSuchFunction,
    SetupFailed,
    /// Setting up (the first second or so).
    Starting,
}

impl Unsupported {
    pub fn as_str(self) -> &'static str {
        match self {
            Unsupported::NoTracefs => "no_tracefs",
            Unsupported::NoKprobeEvents => "no_kprobe_events",
            Unsupported::NoPermission => "no_permission",
            Unsupported::NoSuchFunction => "no_such_function",
            Unsupported::SetupFailed => "setup_failed",
            Unsupported::Starting => "starting",
        }
    }
}

/// Where an entry's size meets its failed return, the `mode` label of `memlock_failures_pairing`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Hist triggers and a synthetic event per call (see [`kernel_pairing`]): nothing reaches
    /// the collector but failures.
    Kernel,
    /// Every entry is traced and read (kernels without hist triggers or synthetic events).
    Userspace,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Kernel => "kernel",
            Mode::Userspace => "userspace",
        }
    }
}

/// The tracefs mount: `<sysfs>/kernel/tracing`, else the debugfs path of older setups. A
/// directory without `instances` is an unmounted mount point; one that cannot be looked into
/// (tracefs's root is root's, mode 0700) is a permission problem, not a missing tracefs.
fn find_tracefs(roots: &Roots) -> Result<PathBuf, Unsupported> {
    let mut denied = false;
    for dir in [roots.sys("kernel/tracing"), roots.sys("kernel/debug/tracing")] {
        match std::fs::metadata(dir.join("instances")) {
            Ok(meta) if meta.is_dir() => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => denied = true,
            _ => {}
        }
    }
    Err(if denied { Unsupported::NoPermission } else { Unsupported::NoTracefs })
}

fn write_file(path: &Path, text: &str) -> Result<(), SourceError> {
    let io = |source| SourceError::Io { path: path.to_owned(), source };
    let mut file = OpenOptions::new().append(true).open(path).map_err(io)?;
    file.write_all(text.as_bytes()).map_err(io)
}

/// The probes of one collector: its event group, its instances and its synthetic events share
/// one name, unique per process and collector, so a reload's new collector never touches the
/// old one's. Failed returns go to the instance `NAME_ret`, which wakes the reader at once (its
/// `buffer_percent` 0), so a refusal is attributed while the process that got it still exists.
/// The size asked for reaches it one of two ways ([`Mode`]): in the kernel, a synthetic event
/// per call in `NAME_ret` that hist triggers emit only for a failed call ([`kernel_pairing`]);
/// else every entry, traced to the instance `NAME` and read in batches.
#[derive(Debug)]
pub(super) struct Probes {
    tracefs: PathBuf,
    pub(super) name: String,
    /// The event names defined in `kprobe_events`.
    events: Vec<String>,
    /// The synthetic events defined in `synthetic_events`.
    synthetic: Vec<String>,
    /// The lock on the returns instance that says the group is in use ([`in_use`]).
    _lock: Option<std::fs::File>,
}

/// The instance of the return events.
const RETURNS_SUFFIX: &str = "_ret";

/// A synthetic event's name ends with this: `GROUP_STEM_fail`.
pub(super) const SYNTHETIC_SUFFIX: &str = "_fail";

/// The synthetic event of `call` in the group `name` (names are global, not per instance).
fn synthetic_name(name: &str, call: &Call) -> String {
    format!("{name}_{}{SYNTHETIC_SUFFIX}", call.stem())
}

impl Probes {
    fn entries(&self) -> PathBuf {
        self.tracefs.join("instances").join(&self.name)
    }

    fn returns(&self) -> PathBuf {
        self.tracefs.join("instances").join(format!("{}{RETURNS_SUFFIX}", self.name))
    }

    pub(super) fn remove(&self) {
        remove_probes(&self.tracefs, &self.name, &self.events, &self.synthetic);
    }
}

/// Removes the hist triggers of the group `name`'s events in `instance`, those with an action
/// first: an entry's trigger defines the variable a return's refers to, and cannot go before it
/// (EBUSY). A trigger is removed by writing its own text, as the file lists it, after a `!`
/// (Documentation/trace/events.rst, 6.3; kernel/trace/trace_events_trigger.c).
fn remove_triggers(instance: &Path, name: &str) {
    let Ok(events) = fsroot::list_dir(&instance.join("events").join(name)) else { return };
    let mut triggers = Vec::new();
    for event in events {
        let file = instance.join("events").join(name).join(event).join("trigger");
        let Ok(text) = fsroot::read_string(&file) else { continue };
        for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
            // "hist:keys=...:size=2048 if ret < 0 [active]"
            let spec = line.rsplit_once(" [").map_or(line, |(spec, _)| spec);
            triggers.push((!spec.contains(":onmatch("), file.clone(), spec.to_owned()));
        }
    }
    triggers.sort_by_key(|(plain, _, _)| *plain);
    for (_, file, spec) in triggers {
        if let Err(e) = write_file(&file, &format!("!{spec}\n")) {
            tracing::warn!(path = %file.display(), trigger = %spec, error = %e.detail(),
                "cannot remove a hist trigger");
        }
    }
}

/// Removes, in the order the kernel allows: the hist triggers (they refer to the synthetic
/// events and keep the instance busy), the instances (which disables their events), the
/// synthetic events (EBUSY while enabled anywhere), the kprobe event definitions (EBUSY while
/// enabled). Errors are logged: nothing else can be done.
fn remove_probes(tracefs: &Path, name: &str, events: &[String], synthetic: &[String]) {
    for instance in [name.to_owned(), format!("{name}{RETURNS_SUFFIX}")] {
        let dir = tracefs.join("instances").join(instance);
        if dir.is_dir() {
            remove_triggers(&dir, name);
            if let Err(e) = std::fs::remove_dir(&dir) {
                tracing::warn!(path = %dir.display(), error = %e, "cannot remove a tracefs instance of the failures \
                    collector");
            }
        }
    }
    let definitions = tracefs.join("synthetic_events");
    for event in synthetic {
        if let Err(e) = write_file(&definitions, &format!("!{event}\n")) {
            tracing::warn!(event = %event, error = %e.detail(), "cannot remove a synthetic event");
        }
    }
    let definitions = tracefs.join("kprobe_events");
    for event in events {
        if let Err(e) = write_file(&definitions, &format!("-:{name}/{event}\n")) {
            tracing::warn!(event = %format!("{name}/{event}"), error = %e.detail(), "cannot remove a kprobe event");
        }
    }
}

/// Locks an instance of ours for as long as the returned file is open: an exclusive `flock` on
/// its directory. The lock goes with the process however it ends, and tracefs is one filesystem
/// for every mount of it (one superblock), so exporters in other PID namespaces, where a pid says
/// nothing, see it too.
fn lock_instance(dir: &Path) -> std::io::Result<std::fs::File> {
    let file = OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY).open(dir)?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file)
}

/// Whether the group `name` is in use by a running exporter (this one included), judged by the
/// lock its returns instance holds while it runs ([`lock_instance`]); a group without that
/// instance is the leftover of a run that died (the instance is made, and locked, before any
/// event is defined). An instance that cannot be looked at counts as in use: it is not removed.
fn in_use(tracefs: &Path, name: &str) -> bool {
    let dir = tracefs.join("instances").join(format!("{name}{RETURNS_SUFFIX}"));
    match lock_instance(&dir) {
        Ok(_released) => false,
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    }
}

/// Whether the process that made `name`, in the format of earlier versions
/// (`memlock_exporter_<pid>_<n>`, no lock), is an exporter still running; anything else with
/// that format is left over.
fn legacy_owner_alive(roots: &Roots, name: &str) -> bool {
    let Some(pid) =
        name.strip_prefix(PREFIX).and_then(|r| r.split('_').next()).and_then(memlock_kernel::decimal::<u32>)
    else {
        return false;
    };
    // comm is at most 15 bytes.
    fsroot::read_string(&roots.proc(format!("{pid}/comm"))).is_ok_and(|c| c.trim_end() == "memlock-exporte")
}

/// The length of a group's random part, in hexadecimal digits.
const ID_DIGITS: usize = 8;

/// The group a name with the prefix belongs to, and whether it is locked ([`in_use`]):
/// `memlock_exporter_<pid>_<n>_<id>` (`id` random, [`ID_DIGITS`] hexadecimal digits), or the
/// `memlock_exporter_<pid>_<n>` of earlier versions.
fn group_of(name: &str) -> Option<(String, bool)> {
    let mut parts = name.strip_prefix(PREFIX)?.split('_');
    let (pid, n) = (parts.next()?, parts.next()?);
    match parts.next() {
        Some(id) if id.len() == ID_DIGITS && id.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()) => {
            Some((format!("{PREFIX}{pid}_{n}_{id}"), true))
        }
        _ => Some((format!("{PREFIX}{pid}_{n}"), false)),
    }
}

/// Makes the returns instance of a new group and locks it. Between the two, an exporter starting
/// at the same moment can take the instance for a leftover (unlocked) and remove it: the lock is
/// then on a directory that is gone, or not to be had, and a new name is tried.
fn claim(tracefs: &Path) -> Result<(String, std::fs::File), String> {
    let mut last = String::new();
    for _ in 0..3 {
        let name = new_group_name();
        let dir = tracefs.join("instances").join(format!("{name}{RETURNS_SUFFIX}"));
        if let Err(e) = std::fs::create_dir(&dir) {
            return Err(format!("cannot create {}: {e}", dir.display()));
        }
        match lock_instance(&dir) {
            Ok(lock) => {
                let same = |l: &std::fs::File| Some(l.metadata().ok()?.ino() == std::fs::metadata(&dir).ok()?.ino());
                if same(&lock) == Some(true) {
                    return Ok((name, lock));
                }
                last = format!("{} was removed while it was locked", dir.display());
            }
            Err(e) => last = format!("cannot lock {}: {e}", dir.display()),
        }
        let _ = std::fs::remove_dir(&dir);
    }
    Err(last)
}

/// A name for a new group, unique among the exporters of every PID namespace: the pid, a
/// sequence number and a random part (two exporters that are each pid 1 of a container).
fn new_group_name() -> String {
    let mut id = [0u8; 4];
    // SAFETY: getrandom writes at most `id.len()` bytes into the buffer we own.
    let got = unsafe { libc::getrandom(id.as_mut_ptr().cast(), id.len(), 0) };
    let id = if got == id.len() as isize {
        u32::from_ne_bytes(id)
    } else {
        // No getrandom (a seccomp filter): the clock's nanoseconds are unique enough.
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos())
    };
    let n = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    format!("{PREFIX}{}_{n}_{id:0width$x}", std::process::id(), width = ID_DIGITS)
}

/// What an earlier run may have left: per group, its kprobe events and synthetic events.
type Leftovers = BTreeMap<(String, bool), (Vec<String>, Vec<String>)>;

/// Removes the triggers, instances, synthetic events and event definitions of earlier runs that
/// died without removing them.
fn remove_leftovers(roots: &Roots, tracefs: &Path) -> usize {
    let mut groups = Leftovers::new();
    if let Ok(text) = fsroot::read_string(&tracefs.join("kprobe_events")) {
        for line in text.lines() {
            // "p:GROUP/EVENT SYMBOL ARGS" or "r10:GROUP/EVENT ..."
            let Some((_, rest)) = line.split_once(':') else { continue };
            let Some((group, event)) = rest.split(' ').next().and_then(|id| id.split_once('/')) else { continue };
            if let Some(group) = group_of(group) {
                groups.entry(group).or_default().0.push(event.to_owned());
            }
        }
    }
    if let Ok(text) = fsroot::read_string(&tracefs.join("synthetic_events")) {
        // "NAME\tFIELD; FIELD"
        for event in text.lines().filter_map(|l| l.split_whitespace().next()) {
            if let Some(group) = group_of(event) {
                groups.entry(group).or_default().1.push(event.to_owned());
            }
        }
    }
    if let Ok(names) = fsroot::list_dir(&tracefs.join("instances")) {
        for group in names.iter().filter_map(|n| group_of(n)) {
            groups.entry(group).or_default();
        }
    }
    let mut removed = 0;
    for ((name, locked), (events, synthetic)) in groups {
        let alive = if locked { in_use(tracefs, &name) } else { legacy_owner_alive(roots, &name) };
        if !alive {
            tracing::info!(name = %name, "removing the failures collector's probes left by an earlier run");
            remove_probes(tracefs, &name, &events, &synthetic);
            removed += 1;
        }
    }
    removed
}

/// Which of [`CALLS`] the kernel can probe: `available_filter_functions` lists
/// `name` or `name [module]` per line (a module's only while it is loaded).
fn available(tracefs: &Path) -> Result<Vec<bool>, SourceError> {
    let path = tracefs.join("available_filter_functions");
    let mut found = vec![false; CALLS.len()];
    let text = fsroot::read_bytes(&path)?;
    for line in text.split(|&b| b == b'\n') {
        let name = line.split(|&b| b == b' ').next().unwrap_or(line);
        for (i, call) in CALLS.iter().enumerate() {
            if name == call.function.as_bytes() {
                found[i] = true;
            }
        }
    }
    Ok(found)
}

/// Where `call` is probed, each `(symbol, resolved)`: the function where the kernel lists it;
/// else in each module that may hold it and is not loaded (`loaded` says), as `MODULE:SYMBOL`:
/// tracefs takes a probe on a module not loaded yet and places it when the module loads
/// (kernel/trace/trace_kprobe.c: `register_trace_kprobe` lets -ENOENT pass when
/// `trace_kprobe_module_exist` is false, "This probe might be able to register after target
/// module is loaded", and `trace_kprobe_module_callback` registers it at MODULE_STATE_COMING;
/// the `[MOD:]SYM` syntax, Documentation/trace/kprobetrace.rst). A module loaded without the
/// function is not a candidate (the kernel refuses it: -ENOENT with the module present).
fn targets(call: &Call, listed: bool, loaded: impl Fn(&str) -> bool) -> Vec<(String, bool)> {
    if listed {
        return vec![(call.function.to_owned(), true)];
    }
    if call.size_fetch(false).is_none() {
        return Vec::new();
    }
    call.modules.iter().filter(|m| !loaded(m)).map(|m| (format!("{m}:{}", call.function), false)).collect()
}

/// Defines the entry and return events of `call` in the group `name` on each of `targets`:
/// the first defines them, the others add their probes to the same events (`append_trace_kprobe`,
/// kernel/trace/trace_kprobe.c). Returns the events defined, none when no target was taken.
fn define(definitions: &Path, name: &str, call: &Call, targets: &[(String, bool)]) -> Vec<String> {
    let stem = call.stem();
    let mut defined = Vec::new();
    for (symbol, resolved) in targets {
        let Some(size) = call.size_fetch(*resolved) else { continue };
        let entry = format!("p:{name}/{stem}_entry {symbol} size={size}\n");
        let exit = format!("r:{name}/{stem}_return {symbol} ret=$retval:{} comm=$comm\n", call.ret_type);
        if let Err(e) = write_file(definitions, &entry) {
            // A function listed but not probeable (a kprobe blacklist) is skipped, not fatal.
            let shown = entry.trim_end();
            tracing::warn!(definition = %shown, error = %e.detail(), "cannot define a kprobe event");
            continue;
        }
        if defined.is_empty() {
            defined.push(format!("{stem}_entry"));
        }
        if let Err(e) = write_file(definitions, &exit) {
            let shown = exit.trim_end();
            tracing::warn!(definition = %shown, error = %e.detail(), "cannot define a kprobe event");
            if defined.len() == 1 {
                // Without a return there is nothing to trace: the entry goes too.
                let _ = write_file(definitions, &format!("-:{name}/{stem}_entry\n"));
                defined.clear();
            }
            continue;
        }
        if defined.len() == 1 {
            defined.push(format!("{stem}_return"));
        }
    }
    defined
}

static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// The pipes of a running set of probes: entries (userspace pairing only), returns.
pub(super) type Pipes = (Option<std::fs::File>, std::fs::File);

/// Pairs each call's entry with its failed return in the kernel, in the returns instance
/// (Documentation/trace/histogram.rst, section 2.2, "onmatch"): the entry event gets the hist
/// trigger `hist:keys=common_pid:sz0=size`, which keeps its size per task in a hist map
/// (kernel/trace/trace_events_hist.c, `event_hist_trigger`: the variable is updated at every
/// call); the return event gets `hist:keys=common_pid:sz=$sz0:onmatch(GROUP.STEM_entry)
/// .trace(GROUP_STEM_fail,$sz,ret) if FAILURE`, which emits the synthetic event
/// (kernel/trace/trace_events_synth.c, `trace_event_raw_event_synth`) with that size when the
/// call failed. The entry event is enabled nowhere: a trigger enables it in soft mode, so it is
/// recorded for its trigger and discarded at once (kernel/trace/trace.h,
/// `__event_trigger_test_discard`), never formatted nor read. A successful call costs two probe
/// hits, a map update and two filter tests; only failures reach trace_pipe: the synthetic event,
/// then the return (filtered, the return is written from the per-CPU buffered event after its
/// triggers ran, kernel/trace/trace.c, `trace_event_buffer_lock_reserve`), both of one CPU.
///
/// The map holds 2,048 tasks (TRACING_MAP_BITS_DEFAULT); one is never removed, so on a node that
/// has seen more tasks call a function the entries of new ones are dropped, and their failures
/// are still counted, from the return, with the size unknown (0). `Err`: the kernel cannot
/// (no CONFIG_SYNTH_EVENTS or CONFIG_HIST_TRIGGERS), with what it refused; what was done is
/// undone.
fn kernel_pairing(probes: &mut Probes, probed: &[Call]) -> Result<(), String> {
    let returns = probes.returns();
    let definitions = probes.tracefs.join("synthetic_events");
    if !definitions.exists() {
        return Err(format!("{} does not exist (CONFIG_SYNTH_EVENTS)", definitions.display()));
    }
    let name = probes.name.clone();
    let undo = |probes: &mut Probes, message: String| {
        remove_triggers(&returns, &name);
        for event in std::mem::take(&mut probes.synthetic) {
            let _ = write_file(&returns.join("events/synthetic").join(&event).join("enable"), "0");
            let _ = write_file(&definitions, &format!("!{event}\n"));
        }
        message
    };
    for call in probed {
        let synthetic = synthetic_name(&name, call);
        let definition = format!("{synthetic} u64 size; {} ret\n", call.ret_type);
        if let Err(e) = write_file(&definitions, &definition) {
            return Err(undo(
                probes,
                format!("cannot define the synthetic event {}: {}", definition.trim_end(), e.detail()),
            ));
        }
        probes.synthetic.push(synthetic);
    }
    for call in probed {
        let stem = call.stem();
        let events = returns.join("events").join(&name);
        let synthetic = synthetic_name(&name, call);
        let triggers = [
            (events.join(format!("{stem}_entry/trigger")), "hist:keys=common_pid:sz0=size".to_owned()),
            (
                events.join(format!("{stem}_return/trigger")),
                format!(
                    "hist:keys=common_pid:sz=$sz0:onmatch({name}.{stem}_entry).trace({synthetic},$sz,ret) if {}",
                    call.failure_filter
                ),
            ),
            (returns.join("events/synthetic").join(&synthetic).join("enable"), "1".to_owned()),
        ];
        for (file, text) in triggers {
            if let Err(e) = write_file(&file, &text) {
                return Err(undo(probes, format!("cannot write {text} to {}: {}", file.display(), e.detail())));
            }
        }
    }
    Ok(())
}

/// Defines and enables the probes. `Err` with the reason and a message for the log.
pub(super) fn set_up(
    roots: &Roots,
    found: &mut Vec<(&'static str, bool)>,
    mode: &mut Option<Mode>,
) -> Result<(Probes, Pipes), (Unsupported, String)> {
    let tracefs = find_tracefs(roots).map_err(|reason| {
        let path = roots.sys("kernel/tracing");
        let message = match reason {
            Unsupported::NoPermission => format!("cannot look into {} (tracefs is root's)", path.display()),
            _ => format!("no tracefs at {} (mount -t tracefs nodev {0})", path.display()),
        };
        (reason, message)
    })?;
    let definitions = tracefs.join("kprobe_events");
    if !definitions.exists() {
        return Err((
            Unsupported::NoKprobeEvents,
            format!("{} does not exist: the kernel is built without CONFIG_KPROBE_EVENTS", definitions.display()),
        ));
    }
    if let Err(e) = OpenOptions::new().append(true).open(&definitions) {
        let reason = match e.raw_os_error() {
            Some(libc::EACCES | libc::EPERM | libc::EROFS) => Unsupported::NoPermission,
            _ => Unsupported::SetupFailed,
        };
        let message = format!(
            "cannot open {} for writing: {e} (tracefs is root's: run as root, or grant write access)",
            definitions.display()
        );
        return Err((reason, message));
    }
    remove_leftovers(roots, &tracefs);
    let present = available(&tracefs).map_err(|e| (Unsupported::SetupFailed, e.to_string()))?;
    let loaded = |module: &str| roots.sys(format!("module/{module}")).exists();
    let targets: Vec<Vec<(String, bool)>> = CALLS.iter().zip(&present).map(|(c, p)| targets(c, *p, loaded)).collect();
    *found = CALLS.iter().zip(&targets).map(|(c, t)| (c.function, !t.is_empty())).collect();
    if targets.iter().all(Vec::is_empty) {
        let names = CALLS.map(|c| c.function).join(", ");
        return Err((Unsupported::NoSuchFunction, format!("none of {names} is in available_filter_functions")));
    }
    // The returns instance first, locked: from here on, other exporters leave the group alone.
    let (name, lock) = claim(&tracefs).map_err(|message| (Unsupported::SetupFailed, message))?;
    let mut probes = Probes {
        tracefs: tracefs.clone(),
        name: name.clone(),
        events: Vec::new(),
        synthetic: Vec::new(),
        _lock: Some(lock),
    };
    let fail = |probes: &Probes, message: String| {
        probes.remove();
        (Unsupported::SetupFailed, message)
    };
    for (call, targets) in CALLS.iter().zip(&targets) {
        let defined = define(&definitions, &name, call, targets);
        if defined.is_empty() {
            if let Some(entry) = found.iter_mut().find(|(f, _)| *f == call.function) {
                entry.1 = false;
            }
        }
        probes.events.extend(defined);
        if let Some((symbol, false)) = targets.first() {
            tracing::info!(call = call.function, symbol = %symbol, "failures collector: probed in a module not loaded \
                yet; the kernel places the probe when the module loads");
        }
    }
    if !found.iter().any(|(_, p)| *p) {
        return Err(fail(&probes, "no kprobe event could be defined".into()));
    }
    let probed: Vec<Call> = CALLS.into_iter().filter(|c| found.iter().any(|(f, p)| *p && *f == c.function)).collect();
    let make_instance = |probes: &Probes, instance: &Path, settings: &[(&str, String)]| {
        // The returns instance is made first (see below).
        if !instance.is_dir() {
            if let Err(e) = std::fs::create_dir(instance) {
                return Err(fail(probes, format!("cannot create {}: {e}", instance.display())));
            }
        }
        for (file, value) in settings {
            if let Err(e) = write_file(&instance.join(file), value) {
                return Err(fail(probes, format!("cannot set {}: {}", instance.join(file).display(), e.detail())));
            }
        }
        Ok(())
    };
    // One clock for both instances and every CPU (the default "local" is per CPU), so an entry
    // and its return compare.
    let settings = [("trace_clock", "mono".to_owned()), ("buffer_size_kb", BUFFER_KB.to_string())];
    let returns_settings = [settings[0].clone(), settings[1].clone(), ("buffer_percent", "0".to_owned())];
    make_instance(&probes, &probes.returns(), &returns_settings)?;
    let userspace_asked = std::env::var_os(PAIRING_ENV).is_some_and(|v| v == "userspace");
    let kernel =
        if userspace_asked { Err(format!("{PAIRING_ENV}=userspace")) } else { kernel_pairing(&mut probes, &probed) };
    *mode = Some(match kernel {
        Ok(()) => Mode::Kernel,
        Err(why) => {
            tracing::info!(reason = %why, "failures collector: entries paired with returns in user space");
            make_instance(&probes, &probes.entries(), &settings)?;
            for call in &probed {
                let event = probes.entries().join("events").join(&name).join(format!("{}_entry", call.stem()));
                if let Err(e) = write_file(&event.join("enable"), "1") {
                    return Err(fail(&probes, format!("cannot enable {}: {}", event.display(), e.detail())));
                }
            }
            Mode::Userspace
        }
    });
    for call in &probed {
        let event = probes.returns().join("events").join(&name).join(format!("{}_return", call.stem()));
        if let Err(e) = write_file(&event.join("filter"), call.failure_filter) {
            return Err(fail(&probes, format!("cannot set {}: {}", event.join("filter").display(), e.detail())));
        }
        if let Err(e) = write_file(&event.join("enable"), "1") {
            return Err(fail(&probes, format!("cannot enable {}: {}", event.display(), e.detail())));
        }
    }
    let open = |instance: PathBuf| {
        let pipe = instance.join("trace_pipe");
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&pipe)
            .map_err(|e| format!("cannot open {}: {e}", pipe.display()))
    };
    let entries = match mode {
        Some(Mode::Userspace) => Some(open(probes.entries()).map_err(|m| fail(&probes, m))?),
        _ => None,
    };
    let returns = open(probes.returns()).map_err(|m| fail(&probes, m))?;
    Ok((probes, (entries, returns)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leftover_names_map_to_their_group() {
        let group = group_of;
        let ours = "memlock_exporter_1_3_0a1b2c3d".to_owned();
        assert_eq!(group("memlock_exporter_1_3_0a1b2c3d_do_mlock_fail"), Some((ours.clone(), true)));
        assert_eq!(group("memlock_exporter_1_3_0a1b2c3d_ret"), Some((ours.clone(), true)));
        assert_eq!(group("memlock_exporter_1_3_0a1b2c3d"), Some((ours.clone(), true)));
        // Earlier versions' names: no random part.
        let legacy = ("memlock_exporter_77_3".to_owned(), false);
        assert_eq!(group("memlock_exporter_77_3_do_mlock_fail"), Some(legacy.clone()));
        assert_eq!(group("memlock_exporter_77_3_ret"), Some(legacy.clone()));
        assert_eq!(group("memlock_exporter_77_3_user_shm_lock_fail"), Some(legacy));
        assert_eq!(group("memlock_exporter_77"), None);
        assert_eq!(group("other_77_3"), None);
        assert_eq!(synthetic_name(&ours, &CALLS[2]), "memlock_exporter_1_3_0a1b2c3d_io_account_mem_fail");
        let name = new_group_name();
        assert_eq!(group_of(&name), Some((name.clone(), true)), "{name}");
        assert_ne!(new_group_name(), name);
        // The longest synthetic event name (pid at most 7 digits) stays within the kernel's 64
        // bytes (MAX_EVENT_NAME_LEN, kernel/trace/trace.h).
        let longest = synthetic_name("memlock_exporter_4194304_999_0a1b2c3d", &CALLS[2]);
        assert!(longest.len() < 64, "{longest}");
    }

    /// Review finding: a group's pid was judged in the exporter's own PID namespace, so the live
    /// probes of an exporter in another container (the same pid there, or one not running here)
    /// were removed as leftovers, and two exporters that are each pid 1 used the same names.
    #[test]
    fn leftovers_are_those_no_running_exporter_holds_in_any_pid_namespace() {
        let tmp = tempfile::Builder::new().prefix("failures-leftovers-").tempdir().unwrap();
        let tracefs = tmp.path().to_path_buf();
        // 4194303 is above the default pid_max: running in no namespace of this one.
        let live = "memlock_exporter_4194303_0_0a1b2c3d";
        let dead = "memlock_exporter_4194303_0_3d2c1b0a";
        let legacy = "memlock_exporter_4194303_0";
        for name in [live, dead, legacy] {
            std::fs::create_dir_all(tracefs.join("instances").join(format!("{name}_ret"))).unwrap();
            std::fs::create_dir_all(tracefs.join("instances").join(name)).unwrap();
        }
        let events: String =
            [live, dead, legacy].iter().map(|g| format!("p:{g}/do_mlock_entry do_mlock size=$arg2:u64\n")).collect();
        std::fs::write(tracefs.join("kprobe_events"), events).unwrap();
        std::fs::write(tracefs.join("synthetic_events"), format!("{live}_do_mlock_fail\tu64 size; s32 ret\n")).unwrap();
        // The exporter in the other container holds its lock.
        let held = lock_instance(&tracefs.join("instances").join(format!("{live}_ret"))).unwrap();
        assert!(in_use(&tracefs, live));
        assert!(!in_use(&tracefs, dead));
        let roots = Roots { procfs: "/proc".into(), sysfs: tracefs.clone() };
        assert_eq!(remove_leftovers(&roots, &tracefs), 2);
        let instances = fsroot::list_dir(&tracefs.join("instances")).unwrap();
        let mut instances: Vec<&str> = instances.iter().map(String::as_str).collect();
        instances.sort_unstable();
        assert_eq!(instances, [live, &format!("{live}_ret")]);
        // What the removal wrote: the dead groups' definitions, none of the live one.
        let written = std::fs::read_to_string(tracefs.join("kprobe_events")).unwrap();
        assert!(written.contains(&format!("-:{dead}/do_mlock_entry")), "{written}");
        assert!(written.contains(&format!("-:{legacy}/do_mlock_entry")), "{written}");
        assert!(!written.contains(&format!("-:{live}/")), "{written}");
        assert!(!std::fs::read_to_string(tracefs.join("synthetic_events")).unwrap().contains('!'));
        // Once it has exited (its lock gone), its probes are leftovers too. (The kernel would have
        // removed the dead groups' definitions.)
        std::fs::write(tracefs.join("kprobe_events"), format!("p:{live}/do_mlock_entry do_mlock\n")).unwrap();
        drop(held);
        assert_eq!(remove_leftovers(&roots, &tracefs), 1);
        assert!(fsroot::list_dir(&tracefs.join("instances")).unwrap().is_empty());
    }

    /// Review finding: ib_umem_get of a module loaded after the exporter started was never
    /// probed (available_filter_functions lists a module's functions only while it is loaded).
    #[test]
    fn a_function_of_a_module_not_loaded_yet_is_probed_in_each_module_that_may_hold_it() {
        let umem = CALLS[0];
        let listed = targets(&umem, true, |_| false);
        assert_eq!(listed, vec![("ib_umem_get".to_owned(), true)]);
        assert_eq!(umem.size_fetch(true).as_deref(), Some("$arg3:u64"));
        let none_loaded = targets(&umem, false, |_| false);
        let core_loaded = targets(&umem, false, |m| m == "ib_core");
        if cfg!(target_arch = "x86_64") {
            assert_eq!(
                none_loaded,
                vec![("ib_uverbs:ib_umem_get".to_owned(), false), ("ib_core:ib_umem_get".to_owned(), false)]
            );
            // ib_core loaded without it (6.1: it is ib_uverbs's): only ib_uverbs is a candidate.
            assert_eq!(core_loaded, vec![("ib_uverbs:ib_umem_get".to_owned(), false)]);
            // `$arg3` is refused for a symbol that does not resolve yet: the third argument's register.
            assert_eq!(umem.size_fetch(false).as_deref(), Some("%dx:u64"));
        }
        // A built-in function the kernel does not list is not guessed at.
        assert!(targets(&CALLS[1], false, |_| false).is_empty());
    }
}
