//! The environment NCCL sees and how NCCL reads it, from NCCL's source (NVIDIA/nccl 5067397c):
//! the process's variables as bytes (a value that is not UTF-8 is still a value NCCL reads),
//! then NCCL's configuration files, then each variable through the parser NCCL applies to it.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use super::param::{is_c_space, show_bytes, strtoll, Parse, Removed, Severity, Strtoll, Variable};
use super::variables::{NCCL_VERSION, REMOVED, VARIABLES};

/// The variable of that name, if NCCL reads it.
pub fn variable(name: &str) -> Option<&'static Variable> {
    VARIABLES.binary_search_by(|v| v.name.cmp(name)).ok().map(|i| &VARIABLES[i])
}

/// The removed variable of that name.
pub fn removed(name: &str) -> Option<&'static Removed> {
    REMOVED.binary_search_by(|v| v.name.cmp(name)).ok().map(|i| &REMOVED[i])
}

/// The value NCCL uses for an `NCCL_PARAM` variable, or `None` for its default.
pub(crate) fn param_value(value: Option<&[u8]>) -> Option<i64> {
    match strtoll(value?, 0) {
        _ if value?.is_empty() => None,
        Strtoll::Whole(v) | Strtoll::Prefix { value: v, .. } => Some(v),
        Strtoll::NoDigits => Some(0),
        Strtoll::OutOfRange => None,
    }
}

/// Where a variable came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Process,
    /// One of NCCL's configuration files (path as NCCL opens it).
    File(PathBuf),
    /// The job's NCCL log (`--nccl-log`): a value its NCCL printed as set by environment.
    Log,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: Vec<u8>,
    pub value: Vec<u8>,
    pub source: Source,
}

impl Entry {
    pub fn name_lossy(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }
    /// The value as text, with bytes that are not UTF-8 shown as `\xNN`.
    pub fn value_shown(&self) -> String {
        show_bytes(&self.value)
    }
}

/// The variables a process sees, in the order `getenv` finds them: the first of a name wins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environment {
    entries: Vec<Entry>,
    /// Where the job's files are opened (`/`, or `/proc/PID/root`), once known.
    root: Option<PathBuf>,
}

/// A configuration file NCCL would read, and what happened when we read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfFile {
    /// The path NCCL opens.
    pub path: PathBuf,
    /// Variables it set (not already set by the process or an earlier file).
    pub set: Vec<String>,
    /// Why it was not read; NCCL skips a file it cannot open without a word.
    pub error: Option<String>,
}

impl Environment {
    /// This process's environment, as bytes.
    pub(crate) fn from_process() -> Self {
        Self::from_pairs(std::env::vars_os().map(|(k, v): (OsString, OsString)| (k.into_vec(), v.into_vec())))
    }

    /// The contents of `/proc/PID/environ`: NUL-separated `NAME=value` entries.
    pub(crate) fn from_environ(bytes: &[u8]) -> Self {
        Self::from_pairs(bytes.split(|b| *b == 0).filter_map(|entry| {
            let eq = entry.iter().position(|b| *b == b'=')?;
            Some((entry[..eq].to_vec(), entry[eq + 1..].to_vec()))
        }))
    }

    pub fn from_pairs(pairs: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>) -> Self {
        let entries = pairs.into_iter().map(|(name, value)| Entry { name, value, source: Source::Process }).collect();
        Self { entries, root: None }
    }

    /// With the NCCL_* values the job's own NCCL log says were set (`NAME set by environment to
    /// VALUE`) ahead of this environment's: they are what the job's NCCL read, whatever the
    /// environment the estimate runs in holds.
    pub(crate) fn with_log_values<'a>(mut self, values: impl IntoIterator<Item = (&'a String, &'a String)>) -> Self {
        let logged: Vec<Entry> = values
            .into_iter()
            .filter(|(name, _)| name.starts_with("NCCL_"))
            .map(|(name, value)| Entry {
                name: name.as_bytes().to_vec(),
                value: value.as_bytes().to_vec(),
                source: Source::Log,
            })
            .collect();
        self.entries.splice(0..0, logged);
        self
    }

    /// The first value of `name`, as getenv finds it.
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.entry(name).map(|e| e.value.as_slice())
    }

    pub fn entry(&self, name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.name == name.as_bytes())
    }

    /// Every variable NCCL would look at once, the first of each name (later duplicates are
    /// invisible to getenv).
    /// One pass with a set of the names seen: comparing each entry with every earlier one made a
    /// 100,000-variable environment take 42 s (docs/reliability.md).
    pub fn effective(&self) -> impl Iterator<Item = &Entry> {
        let mut seen: std::collections::HashSet<&[u8]> = std::collections::HashSet::with_capacity(self.entries.len());
        self.entries.iter().filter(move |e| seen.insert(e.name.as_slice()))
    }

    /// Adds what NCCL's configuration files set, as initEnvFunc (src/misc/param.cc) does: the
    /// file named by NCCL_CONF_FILE when it is set and not empty, else `$HOME/.nccl.conf`; then
    /// `/etc/nccl.conf`. Each line is set with setenv(name, value, 0), so the process's own
    /// variables win, then the first file. `root` is where those paths are opened: `/` for
    /// this process, `/proc/PID/root` for another one (its own mount namespace).
    pub(crate) fn with_conf_files(mut self, root: &Path) -> (Self, Vec<ConfFile>) {
        self.root = Some(root.to_path_buf());
        let mut paths = Vec::new();
        match self.get("NCCL_CONF_FILE").filter(|v| !v.is_empty()) {
            Some(file) => paths.push(PathBuf::from(OsString::from_vec(truncate(file, 1023).to_vec()))),
            None => {
                if let Some(home) = self.get("HOME") {
                    let mut path = truncate(home, 1023 - "/.nccl.conf".len()).to_vec();
                    path.extend_from_slice(b"/.nccl.conf");
                    paths.push(PathBuf::from(OsString::from_vec(path)));
                }
            }
        }
        paths.push(PathBuf::from("/etc/nccl.conf"));
        let mut files = Vec::new();
        for path in paths {
            let relative = path.strip_prefix("/").unwrap_or(&path);
            let opened = if path.is_absolute() { root.join(relative) } else { root.join(&path) };
            match memlock_kernel::fsroot::read_bytes(&opened) {
                Ok(bytes) => {
                    let mut set = Vec::new();
                    let mut names: std::collections::HashSet<Vec<u8>> =
                        self.entries.iter().map(|e| e.name.clone()).collect();
                    for (name, value) in conf_lines(&bytes) {
                        // setenv refuses an empty name; it never overwrites (its third argument is 0).
                        if name.is_empty() || !names.insert(name.clone()) {
                            continue;
                        }
                        set.push(String::from_utf8_lossy(&name).into_owned());
                        self.entries.push(Entry { name, value, source: Source::File(path.clone()) });
                    }
                    files.push(ConfFile { path, set, error: None });
                }
                Err(err) => files.push(ConfFile { path, set: Vec::new(), error: Some(err.to_string()) }),
            }
        }
        (self, files)
    }

    /// The environment of the process NCCL would run in: ours, or `/proc/PID/environ` for
    /// `pid`, with NCCL's configuration files opened in that process's mount namespace
    /// (`/proc/PID/root`).
    pub fn of_process(
        procfs: &Path,
        pid: Option<u32>,
    ) -> Result<(Self, Vec<ConfFile>), memlock_kernel::fsroot::SourceError> {
        let (env, root) = match pid {
            None => (Self::from_process(), PathBuf::from("/")),
            Some(pid) => {
                let dir = procfs.join(pid.to_string());
                (Self::from_environ(&memlock_kernel::fsroot::read_bytes(&dir.join("environ"))?), dir.join("root"))
            }
        };
        Ok(env.with_conf_files(&root))
    }
}

fn truncate(bytes: &[u8], max: usize) -> &[u8] {
    &bytes[..bytes.len().min(max)]
}

/// The `NAME=value` pairs of an NCCL configuration file, parsed as setEnvFile
/// (src/misc/param.cc) does: fgets into a 4096-byte buffer (so a longer line is read as
/// several), one trailing `\n` then one `\r` dropped, a `#` in the first column makes a
/// comment, a line without `=` is skipped, the name is everything before the first `=` (at
/// most 1023 bytes, spaces included), the value everything after it (at most 1023 bytes). A NUL
/// ends a line, as it ends a C string.
pub fn conf_lines(bytes: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let take = rest.iter().take(4095).position(|b| *b == b'\n').map(|p| p + 1).unwrap_or(rest.len().min(4095));
        let (record, tail) = rest.split_at(take);
        rest = tail;
        let mut line = &record[..record.iter().position(|b| *b == 0).unwrap_or(record.len())];
        if let Some(stripped) = line.strip_suffix(b"\n") {
            line = stripped;
        }
        if let Some(stripped) = line.strip_suffix(b"\r") {
            line = stripped;
        }
        if line.first() == Some(&b'#') {
            continue;
        }
        let Some(eq) = line.iter().position(|b| *b == b'=') else { continue };
        out.push((truncate(&line[..eq], 1023).to_vec(), truncate(&line[eq + 1..], 1023).to_vec()));
    }
    out
}

/// Names that are widely recommended but no NCCL release has read; with the fix to give.
const NEVER_NCCL: &[(&str, &str)] = &[
    (
        "NCCL_IB_MR_RANGE",
        "not an NCCL variable (no release reads it, NCCL's guide does not list it); memlock limits are fixed with \
            ulimit -l",
    ),
    (
        "NCCL_NCHANNELS",
        "not an NCCL variable: use NCCL_MIN_CTAS / NCCL_MAX_CTAS (or NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS)",
    ),
];

/// A variable NCCL reads differently from what was meant, or does not read at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub name: String,
    pub severity: Severity,
    /// `NAME=value` and what NCCL makes of it.
    pub measured: String,
    pub fix: String,
}

/// Judges every NCCL_* variable of the environment as NCCL would read it. A variable NCCL reads,
/// in a form its parser accepts, is never a problem.
pub fn problems(env: &Environment) -> Vec<Problem> {
    let ctx = super::grammar::Context { root: env.root.as_deref(), ib_addr_family: env.get("NCCL_IB_ADDR_FAMILY") };
    env.effective().filter(|e| e.name.starts_with(b"NCCL_")).filter_map(|e| judge(e, &ctx)).collect()
}

fn judge(entry: &Entry, ctx: &super::grammar::Context) -> Option<Problem> {
    let name = entry.name_lossy();
    let shown = format!("{name}={}{}", entry.value_shown(), from(entry));
    let problem =
        |severity, measured: String, fix: String| Some(Problem { name: name.clone(), severity, measured, fix });
    let Ok(utf8_name) = std::str::from_utf8(&entry.name) else {
        return problem(
            Severity::Warn,
            shown,
            "not a variable NCCL reads (the name is not even text): remove it".into(),
        );
    };
    let Some(var) = variable(utf8_name) else {
        if let Some((_, why)) = NEVER_NCCL.iter().find(|(n, _)| *n == utf8_name) {
            return problem(Severity::Warn, shown, format!("{why}; remove it"));
        }
        if utf8_name.starts_with("NCCL_REGISTER_") {
            return problem(
                Severity::Warn,
                shown,
                "no NCCL_REGISTER_* variable exists: registration is NCCL_LOCAL_REGISTER / NCCL_GRAPH_REGISTER; \
                    remove it"
                    .into(),
            );
        }
        if let Some(r) = removed(utf8_name) {
            let when = if r.last_release.is_empty() {
                "documented in NCCL's guide, but no release in NCCL's history reads it".to_owned()
            } else {
                format!("last read by NCCL {}", r.last_release)
            };
            return problem(
                Severity::Warn,
                shown,
                format!("has no effect: NCCL {NCCL_VERSION} does not read it ({when}); remove it"),
            );
        }
        return problem(Severity::Warn, shown, format!("not a variable NCCL {NCCL_VERSION} reads: check the spelling"));
    };
    let value = entry.value.as_slice();
    if let Some(verdict) = super::grammar::judge_in(var.name, value, ctx) {
        let v = verdict?;
        return problem(v.severity, format!("{shown}: {} ({})", v.measured, at(var)), v.fix);
    }
    match var.parse {
        Parse::Strtoll => judge_number(var, value, &shown),
        Parse::Decimal | Parse::DecimalUnsigned => {
            let parsed = if value.is_empty() { None } else { Some(strtoll(value, 10)) };
            let unsigned_ok = var.parse == Parse::DecimalUnsigned && decimal_unsigned(value);
            match parsed {
                Some(Strtoll::Whole(_)) => None,
                _ if unsigned_ok => None,
                _ => problem(
                    Severity::Warn,
                    format!("{shown}: not a decimal integer, so NCCL ignores it ({})", at(var)),
                    format!("NCCL uses its default ({}): give a plain decimal number", var.default),
                ),
            }
        }
        Parse::Bool => {
            let ok = ["1", "T", "TRUE", "0", "F", "FALSE"].iter().any(|w| value.eq_ignore_ascii_case(w.as_bytes()));
            (!ok).then(|| Problem {
                name: name.clone(),
                severity: Severity::Warn,
                measured: format!("{shown}: not 1/T/TRUE or 0/F/FALSE, so NCCL ignores it ({})", at(var)),
                fix: format!("NCCL uses its default ({}): give 1 or 0", var.default),
            })
        }
        Parse::OneOf(options) => {
            let trimmed = trim_c_space(value);
            let ok = options.iter().any(|o| trimmed.eq_ignore_ascii_case(o.as_bytes()));
            (!ok).then(|| Problem {
                name: name.clone(),
                severity: Severity::Warn,
                measured: format!("{shown}: not one of {}, so NCCL ignores it ({})", options.join(", "), at(var)),
                fix: format!("give one of {}", options.join(", ")),
            })
        }
        Parse::PathLevel => {
            let levels = ["LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS"];
            let ok = levels.iter().any(|l| value == l.as_bytes()) || value.first().is_some_and(u8::is_ascii_digit);
            (!ok).then(|| Problem {
                name: name.clone(),
                severity: Severity::Warn,
                measured: format!("{shown}: not a path level, so NCCL ignores it ({})", at(var)),
                fix: format!("give one of {} (upper case) or a number", levels.join(", ")),
            })
        }
        Parse::String | Parse::DisableSwitch | Parse::Custom => None,
    }
}

/// strtoull base 10 over the whole value: digits after optional space and sign.
fn decimal_unsigned(value: &[u8]) -> bool {
    let v = trim_start_c_space(value);
    let v = v.strip_prefix(b"-").or_else(|| v.strip_prefix(b"+")).unwrap_or(v);
    !v.is_empty() && v.iter().all(u8::is_ascii_digit)
}

fn trim_start_c_space(v: &[u8]) -> &[u8] {
    &v[v.iter().take_while(|b| is_c_space(**b)).count()..]
}

fn trim_c_space(v: &[u8]) -> &[u8] {
    let v = trim_start_c_space(v);
    &v[..v.len() - v.iter().rev().take_while(|b| is_c_space(**b)).count()]
}

fn at(var: &Variable) -> String {
    format!("NVIDIA/nccl {}", var.defined_at)
}

fn from(entry: &Entry) -> String {
    match &entry.source {
        Source::Process => String::new(),
        Source::File(path) => format!(" (from {})", path.display()),
        Source::Log => " (from the NCCL log)".to_owned(),
    }
}

/// The lowest and highest NCCL_IB_QPS_PER_CONNECTION NCCL can run with: it checks neither
/// bound, and sizes the QP table of a connection for NCCL_IB_MAX_QPS (net_ib/common.h), so
/// more overflow it; fewer than one creates no QP.
pub(crate) const QPS_PER_CONNECTION: std::ops::RangeInclusive<i64> = 1..=128;

/// Buffer sizes live in an int (comm->buffSizes, src/init.cc computeBuffSizes) and -2 means unset.
/// Each buffer is cut into NCCL_STEPS (8, src/include/device.h) steps, and a step must hold one
/// unit of its protocol or NCCL moves no data: Simple an element of up to 8 bytes (prims_simple.h
/// Primitives: stepSize = buffSizes / NCCL_STEPS / sizeof(T)), LL a 16-byte FIFO line (prims_ll.h
/// stepLines), LL128 a 128-byte line (primitives.h ProtoLL128, NCCL_LL128_LINESIZE). The least
/// size each can move data with, and the unit.
const BUFFER_SIZES: &[(&str, i64, &str)] = &[
    ("NCCL_BUFFSIZE", 8 * 8, "8-byte element (Simple protocol, src/device/prims_simple.h)"),
    ("NCCL_LL_BUFFSIZE", 8 * 16, "16-byte line (LL protocol, src/device/prims_ll.h)"),
    ("NCCL_LL128_BUFFSIZE", 8 * 128, "128-byte line (LL128 protocol, src/device/primitives.h)"),
];

/// NCCL_CROSS_NIC's readings: NCCL checks no range (src/graph/search.cc NCCL_PARAM CrossNic).
const CROSS_NIC: std::ops::RangeInclusive<i64> = 0..=2;

fn judge_number(var: &Variable, value: &[u8], shown: &str) -> Option<Problem> {
    if value.is_empty() {
        return None;
    }
    // NCCL runs with what strtoll reads: a value it reads otherwise than written is a WARN that
    // says what it reads; a FAIL only when NCCL cannot run with the number it reads.
    let (number, note) = match strtoll(value, 0) {
        Strtoll::Whole(v) => (v, None),
        // A value captured with its line's end (`$(cat file)` keeps none, a here-string or a
        // CRLF file does): strtoll stops there, having read the number as written.
        Strtoll::Prefix { value: v, rest }
            if rest.ends_with(b"\n") && rest.iter().all(|b| matches!(b, b'\n' | b'\r')) =>
        {
            (v, None)
        }
        Strtoll::Prefix { value: v, rest } => (
            v,
            Some((
                format!(
                    "{shown}: NCCL reads {v} (strtoll(value, NULL, 0) stops at \"{}\", {})",
                    show_bytes(&rest),
                    at(var)
                ),
                format!("write the whole number{}", unit_hint(var.name)),
            )),
        ),
        Strtoll::NoDigits => (
            0,
            Some((
                format!("{shown}: no number, so NCCL reads 0 (strtoll(value, NULL, 0), {})", at(var)),
                format!("give a number (decimal, 0x hex or 0 octal){}", unit_hint(var.name)),
            )),
        ),
        Strtoll::OutOfRange => {
            return Some(Problem {
                name: var.name.to_owned(),
                severity: Severity::Warn,
                measured: format!(
                    "{shown}: beyond a 64-bit integer, so NCCL uses its default {} ({})",
                    var.default,
                    at(var)
                ),
                fix: "give a number NCCL can read".into(),
            });
        }
    };
    let (read, read_fix) = match &note {
        Some((measured, fix)) => (measured.clone(), format!("; {fix}")),
        None => (shown.to_owned(), String::new()),
    };
    let fail = |measured: String, fix: String| {
        Some(Problem { name: var.name.to_owned(), severity: Severity::Fail, measured, fix })
    };
    if var.name == "NCCL_IB_QPS_PER_CONNECTION" && !QPS_PER_CONNECTION.contains(&number) {
        return fail(
            format!("{read}: NCCL does not check it, and needs 1 to 128 QPs per connection"),
            format!(
                "NCCL needs 1 to 128 QPs per connection: unset it (default 1) or give a count in that range{read_fix}"
            ),
        );
    }
    if let Some((_, least, unit)) = BUFFER_SIZES.iter().find(|(n, _, _)| *n == var.name) {
        if number != -2 && !(1..=i64::from(i32::MAX)).contains(&number) {
            return fail(
                format!("{read}: NCCL keeps buffer sizes in an int and registers a buffer of that many bytes"),
                format!("give a size from {least} to {} bytes, or unset it for the default{read_fix}", i32::MAX),
            );
        }
        if number != -2 && number < *least {
            return fail(
                format!(
                    "{read}: a step (1/8 of the buffer, NCCL_STEPS) holds no {unit}, so NCCL cannot move data with it"
                ),
                format!("give at least {least} bytes, or unset it for the default{read_fix}"),
            );
        }
    }
    if var.name == "NCCL_CROSS_NIC" && !CROSS_NIC.contains(&number) {
        return Some(Problem {
            name: var.name.to_owned(),
            severity: Severity::Warn,
            measured: format!(
                "{read}: outside 0 to 2, which NCCL does not check; the topology search reads it as 0 (rings and \
                    trees keep to one NIC: src/graph/search.cc ncclTopoCompute, `crossNic == 1 ? 1 : 0`, and the \
                    retry only for 2), the p2p NIC choice and init as not 0 (search.cc ncclTopoGetNetDev and \
                    ncclTopoCheckCrossNicSupport, `ncclParamCrossNic() != 0`)"
            ),
            fix: format!("give 0, 1 or 2 (unset: the default, 2){read_fix}"),
        });
    }
    note.map(|(measured, fix)| Problem { name: var.name.to_owned(), severity: Severity::Warn, measured, fix })
}

fn unit_hint(name: &str) -> &'static str {
    if name.ends_with("SIZE") {
        " in bytes (4194304, or 0x400000, not 4M)"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &[u8])]) -> Environment {
        Environment::from_pairs(pairs.iter().map(|(k, v)| (k.as_bytes().to_vec(), v.to_vec())))
    }

    #[test]
    fn the_jobs_log_values_come_before_this_environment() {
        let logged: std::collections::BTreeMap<String, String> =
            [("NCCL_BUFFSIZE", "8388608"), ("NCCL_IB_HCA", "mlx5_0"), ("PATH", "/bin")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        let e = env(&[("NCCL_BUFFSIZE", b"2097152"), ("NCCL_DEBUG", b"INFO")]).with_log_values(&logged);
        assert_eq!(e.get("NCCL_BUFFSIZE"), Some(&b"8388608"[..]), "what the job's NCCL read");
        assert_eq!(e.entry("NCCL_BUFFSIZE").unwrap().source, Source::Log);
        assert_eq!(e.get("NCCL_IB_HCA"), Some(&b"mlx5_0"[..]));
        assert_eq!(e.get("NCCL_DEBUG"), Some(&b"INFO"[..]), "the rest stays");
        assert_eq!(e.get("PATH"), None, "only NCCL's variables");
        assert_eq!(from(e.entry("NCCL_IB_HCA").unwrap()), " (from the NCCL log)");
    }

    #[test]
    fn param_values_follow_ncclloadparam() {
        assert_eq!(param_value(None), None);
        assert_eq!(param_value(Some(b"")), None, "empty: the default");
        assert_eq!(param_value(Some(b"4M")), Some(4));
        assert_eq!(param_value(Some(b"abc")), Some(0), "no digits: strtoll returns 0, errno stays 0");
        assert_eq!(param_value(Some(b"99999999999999999999")), None, "ERANGE: the default");
        assert_eq!(param_value(Some(b"0x400000")), Some(4_194_304));
    }

    fn one(name: &str, value: &[u8]) -> Vec<Problem> {
        problems(&env(&[(name, value)]))
    }

    #[test]
    fn what_nccl_accepts_is_never_a_problem() {
        for (name, value) in [
            ("NCCL_IB_GID_INDEX", &b"-1"[..]),
            ("NCCL_IB_GID_INDEX", b"3"),
            ("NCCL_IB_SL", b"-1"),
            ("NCCL_BUFFSIZE", b"0x400000"),
            ("NCCL_BUFFSIZE", b"8388608"),
            ("NCCL_BUFFSIZE", b""),
            ("NCCL_MIN_NRINGS", b"4"),
            ("NCCL_IB_PKEY", b"0x8001"),
            ("NCCL_IB_DATA_DIRECT", b"0"),
            ("NCCL_GDR_FLUSH_DISABLE", b"1"),
            ("NCCL_NVLS_CHUNKSIZE", b"131072"),
            ("NCCL_DEBUG", b" info "),
            ("NCCL_DEBUG", b"TRACE"),
            ("NCCL_SET_THREAD_NAME", b"true"),
            ("NCCL_P2P_LEVEL", b"NVL"),
            ("NCCL_P2P_LEVEL", b"2"),
            ("NCCL_IB_HCA", b"^mlx5_2"),
            ("NCCL_SOCKET_IFNAME", b"\xffeth"),
        ] {
            assert_eq!(one(name, value), vec![], "{name}={value:?}");
        }
    }

    #[test]
    fn values_nccl_reads_otherwise_warn_and_say_what_nccl_reads() {
        // NCCL runs with what it reads: a WARN naming it, never a FAIL for the grammar alone; a
        // FAIL when NCCL cannot run with the number read (4 bytes: a step of half a byte).
        let p = one("NCCL_BUFFSIZE", b"4M");
        assert_eq!(p[0].severity, Severity::Fail);
        assert!(p[0].measured.starts_with("NCCL_BUFFSIZE=4M: NCCL reads 4 (strtoll"), "{p:?}");
        assert!(p[0].fix.contains("give at least 64 bytes"), "{p:?}");
        assert!(p[0].fix.contains("write the whole number in bytes (4194304, or 0x400000, not 4M)"), "{p:?}");
        assert!(p[0].measured.contains("src/init.cc:814"), "{p:?}");
        let p = one("NCCL_BUFFSIZE", b"\xff");
        assert_eq!(
            p[0].measured,
            "NCCL_BUFFSIZE=\\xff: no number, so NCCL reads 0 (strtoll(value, NULL, 0), NVIDIA/nccl src/init.cc:814): \
                NCCL keeps buffer sizes in an int and registers a buffer of that many bytes"
        );
        assert_eq!(p[0].severity, Severity::Fail, "it reads 0, and a 0-byte buffer is a failure");
        assert_eq!(one("NCCL_BUFFSIZE", b"0")[0].severity, Severity::Fail, "a 0-byte buffer");
        assert!(one("NCCL_IB_TIMEOUT", b"99999999999999999999")[0].measured.contains("uses its default 20"));
        for qps in [&b"0"[..], b"129", b"-1"] {
            assert_eq!(one("NCCL_IB_QPS_PER_CONNECTION", qps)[0].severity, Severity::Fail, "{qps:?}");
        }
        assert!(one("NCCL_IB_QPS_PER_CONNECTION", b"0x80").is_empty(), "128 in hex");
        assert!(one("NCCL_DEBUG", b"LOUD")[0].fix.contains("VERSION, WARN, INFO, ABORT, TRACE"));
        assert_eq!(one("NCCL_SET_THREAD_NAME", b"yes")[0].severity, Severity::Warn);
        assert_eq!(one("NCCL_P2P_LEVEL", b"nvl")[0].severity, Severity::Warn, "ncclGetLevel compares with strcmp");
        // The leading number, as strtoll(s, NULL, 0) reads it: "4 " is 4, a conf file's
        // "4194304 # 4 MiB" is 4194304.
        for (value, reads, severity) in [
            (&b"4 "[..], "4", Severity::Fail),
            (b"4194304 # 4 MiB", "4194304", Severity::Warn),
            (b"0x10kB", "16", Severity::Fail),
            (b"0x10000kB", "65536", Severity::Warn),
        ] {
            let p = one("NCCL_BUFFSIZE", value);
            assert_eq!(p[0].severity, severity, "{value:?}");
            assert!(p[0].measured.contains(&format!("NCCL reads {reads} (strtoll")), "{p:?}");
        }
        assert_eq!(one("NCCL_IB_TIMEOUT", b"abc")[0].severity, Severity::Warn, "no digits: 0");
        assert_eq!(one("NCCL_BUFFSIZE", b"08")[0].severity, Severity::Fail, "reads 0 (octal stops at 8)");
        assert_eq!(one("NCCL_IB_QPS_PER_CONNECTION", b"2 qps")[0].severity, Severity::Warn, "reads 2");
        assert_eq!(one("NCCL_IB_TIMEOUT", b"99999999999999999999")[0].severity, Severity::Warn, "ERANGE: the default");
        // Grammars of their own (crates/preflight/src/nccl/grammar.rs), through the environment.
        assert_eq!(one("NCCL_ALGO", b"Ring, Tree")[0].severity, Severity::Fail, "aborts init");
        assert!(one("NCCL_ALGO", b"Ring, Tree")[0].measured.contains("src/graph/tuning.cc parseList"));
        assert_eq!(one("NCCL_DEBUG_SUBSYS", b"INIT,NETWORK")[0].severity, Severity::Warn);
        assert!(one("NCCL_ALGO", b"ring,tree").is_empty());
    }

    #[test]
    fn names_nccl_does_not_read_warn_with_the_reason() {
        let p = one("NCCL_WORK_FIFO_DEPTH", b"1");
        assert_eq!(p[0].severity, Severity::Warn);
        assert!(p[0].fix.contains("last read by NCCL v2.21.5-1"), "{p:?}");
        assert!(one("NCCL_IB_CUDA_SUPPORT", b"1")[0].fix.contains("has no effect"));
        assert!(one("NCCL_CHECKS_DISABLE", b"1")[0].fix.contains("documented in NCCL's guide"));
        assert!(one("NCCL_IB_MR_RANGE", b"1")[0].fix.contains("memlock limits are fixed with ulimit -l"));
        assert!(one("NCCL_REGISTER_BUFFERS", b"1")[0].fix.contains("NCCL_LOCAL_REGISTER"));
        assert!(one("NCCL_IB_HCAA", b"mlx5_0")[0].fix.contains("check the spelling"));
        assert_eq!(
            problems(&Environment::from_pairs([(b"NCCL_\xff".to_vec(), b"1".to_vec())]))[0].severity,
            Severity::Warn
        );
        assert!(one("PATH", b"/bin").is_empty(), "only NCCL_* is judged");
    }

    #[test]
    fn the_generated_list_is_nccl_2_30_7() {
        assert_eq!(NCCL_VERSION, "2.30.7");
        assert!(VARIABLES.windows(2).all(|w| w[0].name < w[1].name), "sorted, for binary search");
        assert!(REMOVED.windows(2).all(|w| w[0].name < w[1].name));
        assert!(VARIABLES.len() > 240, "{}", VARIABLES.len());
        for name in
            ["NCCL_MIN_NRINGS", "NCCL_IB_PKEY", "NCCL_IB_DATA_DIRECT", "NCCL_GDR_FLUSH_DISABLE", "NCCL_CONF_FILE"]
        {
            assert!(variable(name).is_some(), "{name}");
        }
        for name in ["NCCL_CHECKS_DISABLE", "NCCL_IB_CUDA_SUPPORT", "NCCL_WORK_FIFO_DEPTH"] {
            assert!(variable(name).is_none() && removed(name).is_some(), "{name}");
        }
        assert!(variable("NCCL_IB_MR_RANGE").is_none() && removed("NCCL_IB_MR_RANGE").is_none());
    }

    #[test]
    fn the_first_of_a_name_is_the_one_getenv_finds() {
        let e = Environment::from_environ(b"NCCL_BUFFSIZE=1048576\0NCCL_BUFFSIZE=4M\0NOEQUALS\0X=\xff\0");
        assert_eq!(e.get("NCCL_BUFFSIZE"), Some(&b"1048576"[..]));
        assert_eq!(e.get("X"), Some(&b"\xff"[..]));
        assert_eq!(e.effective().count(), 2);
        assert!(problems(&e).is_empty(), "the shadowed 4M is never read");
    }

    #[test]
    fn conf_lines_are_parsed_as_setenvfile_does() {
        let text =
            b"# comment\nNCCL_A=1\r\nNCCL_B = 2\nno equals\n=empty\nNCCL_C=x=y\nNCCL_D=a\0b\n #NCCL_E=1\nNCCL_F=last";
        let lines = conf_lines(text);
        let names: Vec<_> = lines.iter().map(|(n, v)| (show_bytes(n), show_bytes(v))).collect();
        assert_eq!(
            names,
            [
                ("NCCL_A", "1"),
                ("NCCL_B ", " 2"),
                ("", "empty"),
                ("NCCL_C", "x=y"),
                ("NCCL_D", "a"),
                (" #NCCL_E", "1"),
                ("NCCL_F", "last")
            ]
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
        );
        // A line longer than fgets' 4095 bytes is read in pieces: the second piece is a line too.
        let mut long = b"NCCL_LONG=".to_vec();
        long.extend(std::iter::repeat_n(b'x', 4090));
        long.extend_from_slice(b"NCCL_TAIL=1\n");
        let lines = conf_lines(&long);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].1.len(), 1023, "values are cut at 1023 bytes");
        assert_eq!(lines[1].0, b"xxxxxNCCL_TAIL");
    }

    #[test]
    fn conf_files_are_read_in_nccls_order_and_never_override() {
        let tmp = tempfile::Builder::new().prefix("memlock-nccl-conf-").tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::create_dir_all(root.join("home/u")).unwrap();
        std::fs::write(root.join("etc/nccl.conf"), "NCCL_BUFFSIZE=1048576\nNCCL_DEBUG=WARN\nNCCL_IB_TIMEOUT=22\n")
            .unwrap();
        std::fs::write(root.join("home/u/.nccl.conf"), "NCCL_DEBUG=INFO\nNCCL_IB_TIMEOUT=21\n").unwrap();
        std::fs::write(root.join("job.conf"), "NCCL_IB_TIMEOUT=23\n").unwrap();
        let base = env(&[("HOME", b"/home/u"), ("NCCL_BUFFSIZE", b"2097152")]);
        let (e, files) = base.clone().with_conf_files(&root);
        assert_eq!(e.get("NCCL_BUFFSIZE"), Some(&b"2097152"[..]), "the process's variable wins");
        assert_eq!(e.get("NCCL_DEBUG"), Some(&b"INFO"[..]), "~/.nccl.conf before /etc/nccl.conf");
        assert_eq!(e.get("NCCL_IB_TIMEOUT"), Some(&b"21"[..]));
        assert_eq!(files.len(), 2);
        assert_eq!(files[0].path, PathBuf::from("/home/u/.nccl.conf"));
        assert!(files[1].set.is_empty(), "/etc/nccl.conf sets nothing the others did not: {files:?}");
        assert_eq!(e.entry("NCCL_DEBUG").unwrap().source, Source::File("/home/u/.nccl.conf".into()));
        // NCCL_CONF_FILE replaces ~/.nccl.conf (not /etc/nccl.conf).
        let mut with_file = base.clone();
        with_file.entries.push(Entry {
            name: b"NCCL_CONF_FILE".to_vec(),
            value: b"/job.conf".to_vec(),
            source: Source::Process,
        });
        let (e, files) = with_file.with_conf_files(&root);
        assert_eq!(e.get("NCCL_IB_TIMEOUT"), Some(&b"23"[..]));
        assert_eq!(e.get("NCCL_DEBUG"), Some(&b"WARN"[..]), "~/.nccl.conf skipped");
        assert_eq!(
            files.iter().map(|f| f.path.clone()).collect::<Vec<_>>(),
            [PathBuf::from("/job.conf"), "/etc/nccl.conf".into()]
        );
        // A file that cannot be opened is skipped, as NCCL does.
        let (e, files) = env(&[("HOME", b"/nowhere")]).with_conf_files(&root);
        assert!(files[0].error.is_some());
        assert_eq!(e.get("NCCL_DEBUG"), Some(&b"WARN"[..]));
        let p = problems(&e);
        assert!(p.is_empty(), "{p:?}");
    }

    /// Arbitrary bytes never panic, and a whole decimal number reads back as itself.
    #[test]
    fn buffers_too_small_to_move_data_fail_as_zero_does() {
        // strtoll reads 1e6 as 1: a step of 1/8 byte.
        let p = one("NCCL_BUFFSIZE", b"1e6");
        assert_eq!(p[0].severity, Severity::Fail, "{p:?}");
        assert!(p[0].measured.starts_with("NCCL_BUFFSIZE=1e6: NCCL reads 1 (strtoll"), "{p:?}");
        assert!(p[0].measured.contains("holds no 8-byte element"), "{p:?}");
        // The least size that moves data, per protocol: 8 steps of one unit each.
        for (name, least) in [("NCCL_BUFFSIZE", 64), ("NCCL_LL_BUFFSIZE", 128), ("NCCL_LL128_BUFFSIZE", 1024)] {
            assert_eq!(one(name, (least - 1).to_string().as_bytes())[0].severity, Severity::Fail, "{name}");
            assert_eq!(one(name, least.to_string().as_bytes()), vec![], "{name}={least}");
            assert_eq!(one(name, b"1")[0].fix, format!("give at least {least} bytes, or unset it for the default"));
        }
        assert_eq!(one("NCCL_BUFFSIZE", b"-2"), vec![], "NCCL's unset");
        assert_eq!(one("NCCL_LL_BUFFSIZE", b"512K")[0].severity, Severity::Warn, "512 bytes move data");
    }

    #[test]
    fn cross_nic_outside_its_range_gives_both_readings() {
        for value in [&b"3"[..], b"-1", b"0x10"] {
            let p = one("NCCL_CROSS_NIC", value);
            assert_eq!(p.len(), 1, "{value:?}");
            assert_eq!(p[0].severity, Severity::Warn);
            assert!(p[0].measured.contains("the topology search reads it as 0"), "{p:?}");
            assert!(p[0].measured.contains("ncclTopoGetNetDev"), "{p:?}");
            assert!(p[0].measured.contains("as not 0"), "{p:?}");
            assert_eq!(p[0].fix, "give 0, 1 or 2 (unset: the default, 2)");
        }
        for value in [&b"0"[..], b"1", b"2", b""] {
            assert_eq!(one("NCCL_CROSS_NIC", value), vec![], "{value:?}");
        }
        // What strtoll reads decides: "3x" is 3, both notes in one finding.
        let p = one("NCCL_CROSS_NIC", b"3x");
        assert!(p[0].measured.starts_with("NCCL_CROSS_NIC=3x: NCCL reads 3 (strtoll"), "{p:?}");
        assert!(p[0].fix.ends_with("; write the whole number"), "{p:?}");
    }

    #[test]
    fn a_trailing_newline_is_read_as_written() {
        for (name, value) in [
            ("NCCL_BUFFSIZE", &b"4194304\n"[..]),
            ("NCCL_BUFFSIZE", b"0x400000\r\n"),
            ("NCCL_IB_TIMEOUT", b"22\n"),
            ("NCCL_CROSS_NIC", b"1\n"),
        ] {
            assert_eq!(one(name, value), vec![], "{name}={value:?}");
        }
        // Anything else after the number still says what NCCL reads.
        assert_eq!(one("NCCL_IB_TIMEOUT", b"22\n#")[0].severity, Severity::Warn);
        assert_eq!(one("NCCL_IB_TIMEOUT", b"22\r")[0].severity, Severity::Warn, "no line end");
        assert_eq!(one("NCCL_BUFFSIZE", b"8\n")[0].severity, Severity::Fail, "read as written, and too small");
    }

    #[test]
    fn any_bytes_are_judged_without_panicking() {
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let alphabet = b"0123456789abcdefxX+- \t\n=#\r\0\xff\xc3MK";
        let names = [
            "NCCL_BUFFSIZE",
            "NCCL_DEBUG",
            "NCCL_P2P_LEVEL",
            "NCCL_SET_THREAD_NAME",
            "NCCL_X",
            "NCCL_IB_QPS_PER_CONNECTION",
        ];
        for _ in 0..20_000 {
            let len = (next() % 24) as usize;
            let value: Vec<u8> = (0..len).map(|_| alphabet[(next() % alphabet.len() as u64) as usize]).collect();
            let name = names[(next() % names.len() as u64) as usize];
            let _ = problems(&Environment::from_pairs([(name.as_bytes().to_vec(), value.clone())]));
            let _ = conf_lines(&value);
            let _ = Environment::from_environ(&value);
            if let Strtoll::Whole(v) = strtoll(&value, 10) {
                let digits: Vec<u8> = value.iter().copied().filter(|b| b.is_ascii_digit()).collect();
                let magnitude = String::from_utf8(digits).unwrap().trim_start_matches('0').to_owned();
                assert_eq!(v.unsigned_abs().to_string(), if magnitude.is_empty() { "0".into() } else { magnitude });
            }
        }
    }
}
