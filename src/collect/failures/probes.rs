//! The collector's probes in tracefs: defining them, pairing in the kernel where it can, and
//! removing them and the leftovers of earlier runs.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::fsroot::{self, Roots, SourceError};

use super::calls::{Call, CALLS};

/// Every name the collector creates in tracefs starts with this.
pub const PREFIX: &str = "memlock_exporter_";

/// `userspace` in this environment variable pairs entries in user space even where the kernel
/// could ([`Mode`]): to compare the two, and to test the fallback on a kernel that has both. A
/// diagnostic, not a setting: outside the configuration's `MEMLOCK_EXPORTER_` prefix, whose
/// variables must be configuration keys.
pub const PAIRING_ENV: &str = "MEMLOCK_FAILURES_PAIRING";

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

/// Whether the process that made `name` (`memlock_exporter_<pid>_<n>`) is an exporter still
/// running (this one included: its collectors remove their own); anything else with the prefix
/// is left over. A pid reused by another exporter keeps a leftover until that one exits.
fn owner_alive(roots: &Roots, name: &str) -> bool {
    let Some(pid) = name.strip_prefix(PREFIX).and_then(|r| r.split('_').next()).and_then(crate::kernel::decimal::<u32>)
    else {
        return false;
    };
    if pid == std::process::id() {
        return true;
    }
    // comm is at most 15 bytes.
    fsroot::read_string(&roots.proc(format!("{pid}/comm"))).is_ok_and(|c| c.trim_end() == "memlock-exporte")
}

/// The group (`memlock_exporter_<pid>_<n>`) a name with the prefix belongs to.
fn group_of(name: &str) -> Option<String> {
    let mut parts = name.strip_prefix(PREFIX)?.split('_');
    let (pid, n) = (parts.next()?, parts.next()?);
    Some(format!("{PREFIX}{pid}_{n}"))
}

/// What an earlier run may have left: per group, its kprobe events and synthetic events.
type Leftovers = BTreeMap<String, (Vec<String>, Vec<String>)>;

/// Removes the triggers, instances, synthetic events and event definitions of earlier runs that
/// died without removing them.
fn remove_leftovers(roots: &Roots, tracefs: &Path) -> usize {
    let mut groups = Leftovers::new();
    if let Ok(text) = fsroot::read_string(&tracefs.join("kprobe_events")) {
        for line in text.lines() {
            // "p:GROUP/EVENT SYMBOL ARGS" or "r10:GROUP/EVENT ..."
            let Some((_, rest)) = line.split_once(':') else { continue };
            let Some((group, event)) = rest.split(' ').next().and_then(|id| id.split_once('/')) else { continue };
            if group.starts_with(PREFIX) {
                groups.entry(group.to_owned()).or_default().0.push(event.to_owned());
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
        for name in names.into_iter().filter(|n| n.starts_with(PREFIX)) {
            let base = name.strip_suffix(RETURNS_SUFFIX).unwrap_or(&name).to_owned();
            groups.entry(base).or_default();
        }
    }
    let mut removed = 0;
    for (name, (events, synthetic)) in groups {
        if !owner_alive(roots, &name) {
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
    *found = CALLS.iter().zip(&present).map(|(c, p)| (c.function, *p)).collect();
    if !present.iter().any(|p| *p) {
        let names = CALLS.map(|c| c.function).join(", ");
        return Err((Unsupported::NoSuchFunction, format!("none of {names} is in available_filter_functions")));
    }
    let name = format!("{PREFIX}{}_{}", std::process::id(), SEQUENCE.fetch_add(1, Ordering::Relaxed));
    let mut probes = Probes { tracefs: tracefs.clone(), name: name.clone(), events: Vec::new(), synthetic: Vec::new() };
    let fail = |probes: &Probes, message: String| {
        probes.remove();
        (Unsupported::SetupFailed, message)
    };
    for (call, _) in CALLS.iter().zip(&present).filter(|(_, p)| **p) {
        let stem = call.stem();
        let entry = format!("p:{name}/{stem}_entry {} size={}\n", call.function, call.size_arg);
        let exit = format!("r:{name}/{stem}_return {} ret=$retval:{} comm=$comm\n", call.function, call.ret_type);
        for (event, definition) in [(format!("{stem}_entry"), entry), (format!("{stem}_return"), exit)] {
            if let Err(e) = write_file(&definitions, &definition) {
                // A function listed but not probeable (a kprobe blacklist) is skipped, not fatal.
                let shown = definition.trim_end();
                tracing::warn!(definition = %shown, error = %e.detail(), "cannot define a kprobe event");
                if let Some(entry) = found.iter_mut().find(|(f, _)| *f == call.function) {
                    entry.1 = false;
                }
                break;
            }
            probes.events.push(event);
        }
    }
    if !found.iter().any(|(_, p)| *p) {
        return Err(fail(&probes, "no kprobe event could be defined".into()));
    }
    let probed: Vec<Call> = CALLS.into_iter().filter(|c| found.iter().any(|(f, p)| *p && *f == c.function)).collect();
    let make_instance = |probes: &Probes, instance: &Path, settings: &[(&str, String)]| {
        if let Err(e) = std::fs::create_dir(instance) {
            return Err(fail(probes, format!("cannot create {}: {e}", instance.display())));
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
        assert_eq!(group_of("memlock_exporter_77_3_do_mlock_fail").as_deref(), Some("memlock_exporter_77_3"));
        assert_eq!(group_of("memlock_exporter_77_3_ret").as_deref(), Some("memlock_exporter_77_3"));
        assert_eq!(group_of("memlock_exporter_77"), None);
        assert_eq!(group_of("other_77_3"), None);
        assert_eq!(synthetic_name("memlock_exporter_77_3", &CALLS[2]), "memlock_exporter_77_3_io_account_mem_fail");
    }
}
