//! The launchers' own configuration, read as the launchers read it, so that the remedy names the
//! file and line that decides: a systemd unit with its drop-ins, CRI-O's crio.conf with
//! crio.conf.d, and sshd's PAM stack with `UsePAM`. Every reader is bounded; a file that is
//! absent is "not set", one that cannot be read or parsed is an error naming the file, never a
//! failure of the check.

use std::path::{Path, PathBuf};

use memlock_kernel::fsroot::{self, SourceError};

/// A configuration file is small; more than this is not one.
const FILE_MAX_BYTES: u64 = 1 << 20;
/// Drop-ins, included PAM files and sshd Include files followed at most.
const MAX_FILES: usize = 256;
/// PAM `include`/`substack` and sshd `Include` nesting followed at most.
const MAX_DEPTH: usize = 8;

/// One line that sets the value looked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Setting {
    pub file: PathBuf,
    /// 1-based.
    pub line: usize,
    /// The line as written, trimmed.
    pub text: String,
    /// The value after `=` (or the pam_limits control), trimmed.
    pub value: String,
}

impl Setting {
    /// `FILE:LINE `TEXT``, as the remedies show it.
    pub fn at(&self) -> String {
        format!("{}:{} `{}`", self.file.display(), self.line, self.text)
    }
}

/// Reads a file; `Ok(None)` when it does not exist.
fn read(file: &Path, errors: &mut Vec<String>) -> Option<String> {
    match fsroot::read_regular_text(file, FILE_MAX_BYTES) {
        Ok(text) => Some(text),
        Err(SourceError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => None,
        Err(err) => {
            errors.push(err.to_string());
            None
        }
    }
}

/// The `*.conf` files of a directory, by file name.
fn conf_files(dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<(String, PathBuf)> = entries
        .take(MAX_FILES)
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_owned();
            name.ends_with(".conf").then(|| (name, e.path()))
        })
        .collect();
    files.sort();
    files
}

// --- systemd ------------------------------------------------------------------------------

/// The unit directories of the system manager, highest precedence first (systemd
/// src/libsystemd/sd-path/path-lookup.c `lookup_paths_init`: /etc, then /run, then
/// /usr/local/lib and /usr/lib; Debian before the /usr merge installs units in /lib).
pub(crate) fn unit_dirs(etc: &Path, rootfs: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![etc.join("systemd/system")];
    for dir in ["run/systemd/system", "usr/local/lib/systemd/system", "usr/lib/systemd/system", "lib/systemd/system"] {
        dirs.push(rootfs.join(dir));
    }
    dirs
}

/// What a unit's files set for `LimitMEMLOCK=`.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct UnitLimit {
    /// The unit file loaded: the first found along [`unit_dirs`].
    pub(crate) unit_file: Option<PathBuf>,
    /// Every `LimitMEMLOCK=` line, in the order systemd applies them: the unit file, then the
    /// drop-ins by file name; the last wins.
    pub lines: Vec<Setting>,
    /// Drop-in file names that set it, for choosing a name that sorts after them.
    pub(crate) dropin_names: Vec<String>,
}

impl UnitLimit {
    pub fn effective(&self) -> Option<&Setting> {
        self.lines.last()
    }
}

/// `LimitMEMLOCK=` lines of `[Service]` in one unit file or drop-in.
fn limit_lines(file: &Path, text: &str) -> Vec<Setting> {
    let mut section = String::new();
    let mut out = Vec::new();
    for (number, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if line.starts_with('[') {
            section = line.to_owned();
            continue;
        }
        if section != "[Service]" {
            continue;
        }
        if let Some(value) = line.strip_prefix("LimitMEMLOCK=") {
            out.push(Setting {
                file: file.to_owned(),
                line: number + 1,
                text: line.to_owned(),
                value: value.trim().into(),
            });
        }
    }
    out
}

/// Reads `unit` as systemd loads it: the unit file from the first directory that has it, and
/// the drop-ins `UNIT.d/*.conf` of every directory, sorted by file name whatever their
/// directory, a name in a higher directory masking the same name in a lower one (systemd
/// src/shared/dropin.c `unit_file_find_dropin_paths`, through `conf_files_list_strv`;
/// systemd.unit(5), "drop-in").
pub(crate) fn unit_limit(etc: &Path, rootfs: &Path, unit: &str, errors: &mut Vec<String>) -> UnitLimit {
    let dirs = unit_dirs(etc, rootfs);
    let mut found = UnitLimit::default();
    for dir in &dirs {
        let file = dir.join(unit);
        if let Some(text) = read(&file, errors) {
            found.lines = limit_lines(&file, &text);
            found.unit_file = Some(file);
            break;
        }
    }
    let mut dropins: std::collections::BTreeMap<String, PathBuf> = Default::default();
    for dir in &dirs {
        for (name, path) in conf_files(&dir.join(format!("{unit}.d"))) {
            dropins.entry(name).or_insert(path);
        }
    }
    for (name, path) in dropins {
        if let Some(text) = read(&path, errors) {
            let lines = limit_lines(&path, &text);
            if !lines.is_empty() {
                found.dropin_names.push(name);
            }
            found.lines.extend(lines);
        }
    }
    found
}

// --- CRI-O --------------------------------------------------------------------------------

/// The `memlock=` entry of `default_ulimits` in `[crio.runtime]`, as CRI-O reads it: crio.conf,
/// then crio.conf.d/*.conf by file name, the file sorted last winning (crio.conf.d(5),
/// "CONFIGURATION PRECEDENCE"; pkg/config/config.go `DefaultUlimits []string
/// toml:"default_ulimits"`). The `Setting`'s value is the entry (`memlock=67108864:67108864`), or
/// empty when the key is set without one (which resets it).
pub(crate) fn crio_default_memlock(etc: &Path, errors: &mut Vec<String>) -> Option<Setting> {
    let mut files = vec![etc.join("crio/crio.conf")];
    files.extend(conf_files(&etc.join("crio/crio.conf.d")).into_iter().map(|(_, p)| p));
    let mut effective = None;
    for file in files {
        let Some(text) = read(&file, errors) else { continue };
        if let Some(setting) = crio_ulimits_in(&file, &text) {
            effective = Some(setting);
        }
    }
    effective
}

/// `default_ulimits = [...]` in `[crio.runtime]` of one TOML file (the array may span lines).
fn crio_ulimits_in(file: &Path, text: &str) -> Option<Setting> {
    let mut section = String::new();
    let mut found = None;
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].split('#').next().unwrap_or("").trim();
        if line.starts_with('[') {
            section = line.trim_matches(|c| c == '[' || c == ']').trim().to_owned();
        } else if section == "crio.runtime" {
            if let Some((key, value)) = line.split_once('=') {
                if key.trim() == "default_ulimits" {
                    let start = i;
                    let mut array = value.trim().to_owned();
                    while !array.contains(']') && i + 1 < lines.len() && i - start < 64 {
                        i += 1;
                        array.push_str(lines[i].split('#').next().unwrap_or("").trim());
                    }
                    let entry = array
                        .split(['"', '\''])
                        .map(str::trim)
                        .find(|s| s.starts_with("memlock="))
                        .unwrap_or("")
                        .to_owned();
                    found =
                        Some(Setting { file: file.to_owned(), line: start + 1, text: line.to_owned(), value: entry });
                }
            }
        }
        i += 1;
    }
    found
}

// --- sshd and PAM -------------------------------------------------------------------------

/// Whether sshd runs its sessions through PAM: the first `UsePAM` in sshd_config and the files
/// it includes, in order (OpenSSH servconf.c `process_server_config_line_depth`: a keyword
/// already set keeps its first value; `Include` is read in place, globs sorted). `None` when
/// sshd_config is absent; unset is OpenSSH's default, no (distributions ship `UsePAM yes`).
pub(crate) fn sshd_use_pam(etc: &Path, errors: &mut Vec<String>) -> Option<(bool, String)> {
    let file = etc.join("ssh/sshd_config");
    let text = read(&file, errors)?;
    Some(
        use_pam_in(&mut Includes { etc, seen: 0, errors }, &file, &text, 0)
            .unwrap_or_else(|| (false, format!("{}: UsePAM unset, OpenSSH's default is no", file.display()))),
    )
}

/// A file and the files it pulls in, read depth first under `etc`: the count of included files
/// and the errors are the whole walk's, whichever file included which.
struct Includes<'a> {
    etc: &'a Path,
    seen: usize,
    errors: &'a mut Vec<String>,
}

fn use_pam_in(walk: &mut Includes, file: &Path, text: &str, depth: usize) -> Option<(bool, String)> {
    for (number, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        let mut words = line.split(|c: char| c.is_whitespace() || c == '=').filter(|w| !w.is_empty());
        let (Some(key), value) = (words.next(), words.next()) else { continue };
        if key.eq_ignore_ascii_case("Match") {
            // UsePAM is not allowed in a Match block: nothing after the first applies to it.
            return None;
        }
        if key.eq_ignore_ascii_case("UsePAM") {
            let on = value.is_some_and(|v| v.eq_ignore_ascii_case("yes"));
            return Some((on, format!("{}:{} `{line}`", file.display(), number + 1)));
        }
        if key.eq_ignore_ascii_case("Include") && depth < MAX_DEPTH {
            for pattern in line.split_whitespace().skip(1) {
                for included in glob_files(walk.etc, pattern) {
                    walk.seen += 1;
                    if walk.seen > MAX_FILES {
                        return None;
                    }
                    let Some(text) = read(&included, walk.errors) else { continue };
                    if let Some(found) = use_pam_in(walk, &included, &text, depth + 1) {
                        return Some(found);
                    }
                }
            }
        }
    }
    None
}

/// An sshd `Include` pattern under `etc`: relative ones are in /etc/ssh; a `*` in the file name
/// only (the form distributions ship, `/etc/ssh/sshd_config.d/*.conf`), matches sorted.
fn glob_files(etc: &Path, pattern: &str) -> Vec<PathBuf> {
    let path = match pattern.strip_prefix("/etc/") {
        Some(rest) => etc.join(rest),
        None if pattern.starts_with('/') => return Vec::new(),
        None => etc.join("ssh").join(pattern),
    };
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Vec::new();
    };
    let Some((prefix, suffix)) = name.split_once('*') else { return vec![path] };
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<PathBuf> = entries
        .take(MAX_FILES)
        .flatten()
        .filter(|e| {
            e.file_name().to_str().is_some_and(|n| n.starts_with(prefix) && n.ends_with(suffix) && !n.starts_with('.'))
        })
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// pam_limits in sshd's session stack: `/etc/pam.d/sshd` and what it pulls in (`@include`,
/// `include`, `substack`; Linux-PAM libpam/pam_handlers.c `_pam_parse_conf_file`). pam_limits
/// sets the limits when the session opens (modules/pam_limits/pam_limits.c
/// `pam_sm_open_session`): without it limits.conf has no effect over ssh. `None` when
/// /etc/pam.d/sshd is absent; `Some(None)` when the stack has no pam_limits.
pub(crate) fn sshd_pam_limits(etc: &Path, errors: &mut Vec<String>) -> Option<Option<Setting>> {
    let file = etc.join("pam.d/sshd");
    let text = read(&file, errors)?;
    Some(pam_limits_in(&mut Includes { etc, seen: 0, errors }, &file, &text, 0))
}

/// pam_limits in the PAM file `name`, included from a file at `depth`.
fn pam_include(walk: &mut Includes, name: &str, depth: usize) -> Option<Setting> {
    walk.seen += 1;
    if depth >= MAX_DEPTH || walk.seen > MAX_FILES || name.contains("..") {
        return None;
    }
    let path = match name.strip_prefix("/etc/") {
        Some(rest) => walk.etc.join(rest),
        None => walk.etc.join("pam.d").join(name.trim_start_matches('/')),
    };
    let text = read(&path, walk.errors)?;
    pam_limits_in(walk, &path, &text, depth + 1)
}

fn pam_limits_in(walk: &mut Includes, file: &Path, text: &str, depth: usize) -> Option<Setting> {
    for (number, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if let Some(name) = line.strip_prefix("@include") {
            if let Some(found) = pam_include(walk, name.trim(), depth) {
                return Some(found);
            }
            continue;
        }
        let mut words = line.split_whitespace();
        let Some(kind) = words.next() else { continue };
        if kind.trim_start_matches('-') != "session" {
            continue;
        }
        // The control is a word or a bracketed list of value=action pairs.
        let mut control = words.next().unwrap_or("").to_owned();
        if control.starts_with('[') {
            while !control.ends_with(']') {
                let Some(more) = words.next() else { break };
                control.push(' ');
                control.push_str(more);
            }
        }
        let module = words.next().unwrap_or("");
        if control == "include" || control == "substack" {
            if let Some(found) = pam_include(walk, module, depth) {
                return Some(found);
            }
            continue;
        }
        if module.rsplit('/').next() == Some("pam_limits.so") {
            return Some(Setting { file: file.to_owned(), line: number + 1, text: line.to_owned(), value: control });
        }
    }
    None
}

#[cfg(test)]
#[path = "tests/launcher_config.rs"]
mod tests;
