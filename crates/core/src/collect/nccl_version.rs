//! The NCCL version a process runs, wherever it got NCCL: from the mapped file's name when it
//! carries one (conda, system packages, NGC containers: `libnccl.so.2.21.5`); else from the
//! library's own `NCCL version X+cudaY` string and the wheel's `*.dist-info/METADATA` beside it
//! (`site-packages/nvidia/nccl/lib/libnccl.so.2`, the nvidia-nccl-cuXX wheels PyTorch installs).
//! When both answer, the library wins: it is what the process runs, the dist-info only what pip
//! recorded. Both are kept, so that `check` can say both when they disagree.
//!
//! The library is read through the process's root (`/proc/PID/root`, so a container's path
//! resolves in its own mount namespace), or through `/proc/PID/map_files` once it was replaced
//! on disk (`(deleted)` in maps). Reading is bounded (the section headers and at most
//! [`lib::MAX_RODATA_SCAN`] of `.rodata`, in 64 KiB chunks) and done once per file
//! identity (device, inode, size, mtime): every rank of a job maps the same file.

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;

use memlock_kernel::nccl_library as lib;
use memlock_kernel::versions::{self, NcclMapping};

/// Why a deleted mapping has no dist-info: the wheel's files now describe another library.
const REPLACED: &str = "no dist-info: the library was replaced on disk since it was mapped";

/// Where a version came from; the `source` label of `memlock_process_nccl_info`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    FileName,
    DistInfo,
    Library,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::FileName => "file_name",
            Source::DistInfo => "dist_info",
            Source::Library => "library",
        }
    }
}

/// How much of `/proc/PID/maps` is read looking for NCCL: a PyTorch rank maps a few thousand
/// areas (a few hundred KiB of text); the rest of a larger file is not read.
pub(crate) const MAX_MAPS_BYTES: u64 = 16 << 20;

/// The NCCL process `pid` has mapped, for the preflight (`check`, `estimate --pid`): `None` when
/// no `libnccl.so*` is mapped. Reading another user's maps needs ptrace access
/// (PTRACE_MODE_READ in fs/proc/task_mmu.c proc_maps_open).
pub fn of_process(procfs: &Path, pid: u32) -> Result<Option<NcclVersion>, memlock_kernel::fsroot::SourceError> {
    let maps = procfs.join(pid.to_string()).join("maps");
    let Some(mapped) = memlock_kernel::fsroot::find_line(&maps, MAX_MAPS_BYTES, mapped)? else { return Ok(None) };
    Ok(Some(Cache::default().resolve(procfs, pid, &mapped).as_ref().clone()))
}

/// A `libnccl.so*` line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapped {
    /// The file name and the version it carries.
    pub name: NcclMapping,
    /// The path as the process sees it, without ` (deleted)`.
    pub path: String,
    /// Replaced or removed on disk since it was mapped.
    pub deleted: bool,
    /// `start-end` of the mapping: its name under `/proc/PID/map_files`.
    pub range: String,
}

/// The first line of a maps text that maps a `libnccl.so*` file
/// ([`versions::nccl_mapping`] decides which lines are).
pub fn mapped(line: &str) -> Option<Mapped> {
    let name = versions::nccl_mapping(line)?;
    let mut fields = line.splitn(6, |c: char| c.is_ascii_whitespace());
    let range = fields.next()?.to_owned();
    for _ in 0..4 {
        fields.next()?;
    }
    let path = fields.next()?.trim();
    let (path, deleted) = match path.strip_suffix(" (deleted)") {
        Some(path) => (path, true),
        None => (path, false),
    };
    Some(Mapped { name, path: path.to_owned(), deleted, range })
}

/// The wheel's record of its version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DistInfo {
    /// `site-packages/nvidia_nccl_cu12-2.23.4.dist-info/METADATA`, as the process sees it.
    pub path: String,
    pub version: String,
}

/// What was found about one mapped NCCL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NcclVersion {
    /// The mapped path (as the process sees it).
    pub path: String,
    /// The release the process runs: `2.23.4`.
    pub version: Option<String>,
    pub source: Option<Source>,
    /// The library's string after `NCCL version `: `2.23.4+cuda12.6`.
    pub library_string: Option<String>,
    pub dist_info: Option<DistInfo>,
    /// Why the library or the dist-info could not tell, each naming the file.
    pub reasons: Vec<String>,
}

impl NcclVersion {
    /// The dist-info names another release than the library (the library is what runs).
    pub fn disagreement(&self) -> Option<(&str, &str)> {
        let library = self.library_string.as_deref().and_then(lib::release)?;
        let recorded = self.dist_info.as_ref()?.version.as_str();
        // A wheel's version may add a post-release (`2.26.2.post1`) to the library's release.
        let same = recorded == library || recorded.strip_prefix(library).is_some_and(|r| r.starts_with(".post"));
        (!same).then_some((library, recorded))
    }

    /// The label set the process collector exports.
    pub fn mapping(&self, name: &NcclMapping) -> NcclMapping {
        NcclMapping {
            library: name.library.clone(),
            version: self.version.clone(),
            source: self.source.map_or("", Source::as_str),
        }
    }
}

/// A file's identity: a replaced or rewritten library is read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
}

/// The libraries already read, by identity and mapped path (the dist-info depends on the path).
#[derive(Debug, Default)]
pub(crate) struct Cache {
    entries: Vec<((Identity, String), Arc<NcclVersion>)>,
}

/// Libraries remembered: a node runs a handful of NCCL builds.
const CACHE_ENTRIES: usize = 32;

/// The longest `METADATA` read: the wheels' carry a short description.
const MAX_METADATA_BYTES: u64 = 64 << 10;

/// The most site-packages entries looked through for the dist-info.
const MAX_DIR_ENTRIES: usize = 100_000;

impl Cache {
    /// The version of the NCCL `mapped` in process `pid`, read under `procfs`.
    pub(crate) fn resolve(&mut self, procfs: &Path, pid: u32, mapped: &Mapped) -> Arc<NcclVersion> {
        if let Some(version) = &mapped.name.version {
            return Arc::new(NcclVersion {
                path: mapped.path.clone(),
                version: Some(version.clone()),
                source: Some(Source::FileName),
                library_string: None,
                dist_info: None,
                reasons: Vec::new(),
            });
        }
        let root = procfs.join(pid.to_string());
        let file = if mapped.deleted {
            root.join("map_files").join(&mapped.range)
        } else {
            root.join("root").join(mapped.path.trim_start_matches('/'))
        };
        let mut found = NcclVersion {
            path: mapped.path.clone(),
            version: None,
            source: None,
            library_string: None,
            dist_info: None,
            reasons: Vec::new(),
        };
        let (library, meta) = match open_regular(&file) {
            Ok(opened) => opened,
            Err(err) => {
                found.reasons.push(format!("library {}: {err}", file.display()));
                if mapped.deleted {
                    found.reasons.push(REPLACED.into());
                } else {
                    found.dist_info = self.dist_info(&root, mapped, &mut found.reasons);
                }
                found.decide();
                // Not cached (no identity): each new process mapping it is read again, so only
                // at debug level.
                tracing::debug!(library = %mapped.path, pid, reasons = %found.reasons.join("; "), "NCCL version");
                return Arc::new(found);
            }
        };
        let key = (
            Identity { dev: meta.dev(), ino: meta.ino(), size: meta.size(), mtime: (meta.mtime(), meta.mtime_nsec()) },
            mapped.path.clone(),
        );
        if let Some((_, known)) = self.entries.iter().find(|(k, _)| *k == key) {
            return known.clone();
        }
        match library_string(&library, meta.len()) {
            Ok(text) => found.library_string = Some(text),
            Err(why) => found.reasons.push(format!("library {}: {why}", file.display())),
        }
        if mapped.deleted {
            found.reasons.push(REPLACED.into());
        } else {
            found.dist_info = self.dist_info(&root, mapped, &mut found.reasons);
        }
        found.decide();
        // Once per file: the reasons are what an operator needs to see why `version` is empty.
        if found.version.is_none() || found.disagreement().is_some() {
            tracing::info!(
                library = %mapped.path,
                pid,
                reasons = %found.reasons.join("; "),
                library_says = found.library_string.as_deref().unwrap_or(""),
                dist_info_says = found.dist_info.as_ref().map_or("", |d| d.version.as_str()),
                "NCCL version: {}",
                if found.version.is_none() { "unknown" } else { "the wheel's dist-info disagrees with the library" }
            );
        }
        let found = Arc::new(found);
        if self.entries.len() >= CACHE_ENTRIES {
            self.entries.remove(0);
        }
        self.entries.push((key, found.clone()));
        found
    }

    /// The nvidia-nccl wheel's `METADATA`: the library is `<site-packages>/nvidia/nccl/lib/<file>`,
    /// the record `<site-packages>/nvidia_nccl_cuXX-<version>.dist-info/METADATA`.
    fn dist_info(&self, root: &Path, mapped: &Mapped, reasons: &mut Vec<String>) -> Option<DistInfo> {
        let lib_dir = Path::new(&mapped.path).parent()?;
        if !lib_dir.ends_with("nvidia/nccl/lib") {
            return None;
        }
        let site = lib_dir.parent()?.parent()?.parent()?;
        let under_root = |p: &Path| root.join("root").join(p.strip_prefix("/").unwrap_or(p));
        let entries = match std::fs::read_dir(under_root(site)) {
            Ok(entries) => entries,
            Err(err) => {
                reasons.push(format!("dist-info: {}: {err}", under_root(site).display()));
                return None;
            }
        };
        let names: Vec<String> = entries
            .take(MAX_DIR_ENTRIES)
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| lib::is_nccl_dist_info(n))
            .take(8)
            .collect();
        let name = match names.as_slice() {
            [] => {
                reasons.push(format!("dist-info: no nvidia_nccl_cu*.dist-info in {}", site.display()));
                return None;
            }
            [one] => one,
            several => {
                reasons.push(format!(
                    "dist-info: {} in {}: cannot tell which is mapped",
                    several.join(", "),
                    site.display()
                ));
                return None;
            }
        };
        let metadata = site.join(name).join("METADATA");
        let text = open_regular(&under_root(&metadata)).and_then(|(file, _)| {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::Read::take(file, MAX_METADATA_BYTES), &mut text)
                .map_err(|err| std::io::Error::new(err.kind(), format!("not UTF-8 text: {err}")))?;
            Ok(text)
        });
        let text = match text {
            Ok(text) => text,
            Err(err) => {
                reasons.push(format!("dist-info {}: {err}", under_root(&metadata).display()));
                return None;
            }
        };
        match lib::dist_info_version(&text) {
            Some(version) => Some(DistInfo { path: metadata.display().to_string(), version: version.to_owned() }),
            None => {
                reasons.push(format!("dist-info {}: no plausible Version: header", metadata.display()));
                None
            }
        }
    }
}

impl NcclVersion {
    /// The library wins over the dist-info.
    fn decide(&mut self) {
        if let Some(text) = &self.library_string {
            match lib::release(text) {
                Some(release) => {
                    self.version = Some(release.to_owned());
                    self.source = Some(Source::Library);
                    return;
                }
                None => self.reasons.push(format!("library: `NCCL version {text}` names no release")),
            }
        }
        if let Some(d) = &self.dist_info {
            self.version = Some(d.version.clone());
            self.source = Some(Source::DistInfo);
        }
    }
}

/// Opens a file the process's maps or directories name, only if it is a regular file. The path
/// is the process's to change (a symbolic link put in the library's place between the maps read
/// and this open), and opening a device has effects of its own (a watchdog starts, a tape
/// rewinds): so the path is resolved with O_PATH, which calls no driver's open (fs/open.c
/// do_dentry_open returns before `f_op->open` for O_PATH), checked with fstat, and only a regular
/// file is opened, through `/proc/self/fd`, the inode already resolved.
fn open_regular(path: &Path) -> std::io::Result<(File, std::fs::Metadata)> {
    use std::os::fd::AsRawFd;
    let handle = File::options().read(true).custom_flags(libc::O_PATH | libc::O_CLOEXEC).open(path)?;
    if !handle.metadata()?.is_file() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"));
    }
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(format!("/proc/self/fd/{}", handle.as_raw_fd()))?;
    let meta = file.metadata()?;
    Ok((file, meta))
}

/// The library's `NCCL version` text ([`lib::library_version`]), read with `pread`.
fn library_string(file: &File, size: u64) -> Result<String, String> {
    lib::library_version(size, |offset, len| {
        let mut buf = vec![0u8; usize::try_from(len).map_err(|_| "too large")?];
        file.read_exact_at(&mut buf, offset).map_err(|err| match err.kind() {
            std::io::ErrorKind::UnexpectedEof => format!("truncated: {len} bytes at {offset} beyond its end"),
            _ => err.to_string(),
        })?;
        Ok(buf)
    })
}

#[cfg(test)]
mod tests;
