//! The thin I/O layer: roots are injected (`--path.procfs`, `--path.sysfs`) and every read is
//! bounded, so a hostile or broken file cannot make the daemon allocate without limit.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::ParseError;

/// The largest file we read. Real kernel files are a few KiB (`/proc/vmstat` ~4 KiB,
/// `memory.stat` ~1 KiB), configuration files, certificates and keys too; anything larger is
/// not the file we expect.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// Where the host's procfs and sysfs are mounted (`/host/proc` in a container).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    pub procfs: PathBuf,
    pub sysfs: PathBuf,
}

impl Roots {
    pub fn proc(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.procfs.join(rel)
    }
    pub fn sys(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.sysfs.join(rel)
    }
}

/// A failure to read or understand one file, always naming the file.
#[derive(Debug, Error)]
pub enum SourceError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("{}: larger than {limit} bytes", path.display())]
    TooLarge { path: PathBuf, limit: u64 },
    /// A directory, FIFO or device where a configuration file, certificate or key belongs.
    #[error("{}: not a regular file", path.display())]
    NotRegular { path: PathBuf },
    #[error("{}: {source}", path.display())]
    Parse { path: PathBuf, source: ParseError },
}

impl SourceError {
    /// A short, bounded label for `memlock_exporter_collector_errors_total{kind}`.
    pub fn kind(&self) -> &'static str {
        match self {
            SourceError::Io { source, .. } => match source.kind() {
                io::ErrorKind::NotFound => "not_found",
                io::ErrorKind::PermissionDenied => "permission",
                _ => "io",
            },
            SourceError::TooLarge { .. } => "too_large",
            SourceError::NotRegular { .. } => "io",
            SourceError::Parse { .. } => "parse",
        }
    }

    pub fn path(&self) -> &Path {
        match self {
            SourceError::Io { path, .. }
            | SourceError::TooLarge { path, .. }
            | SourceError::NotRegular { path }
            | SourceError::Parse { path, .. } => path,
        }
    }

    /// What went wrong, without the path: for errors that name the file themselves
    /// (`config file <path>: not a regular file`).
    pub fn detail(&self) -> String {
        match self {
            SourceError::Io { source, .. } => source.to_string(),
            SourceError::TooLarge { limit, .. } => format!("larger than {limit} bytes"),
            SourceError::NotRegular { .. } => "not a regular file".to_owned(),
            SourceError::Parse { source, .. } => source.to_string(),
        }
    }

    /// The errno of an I/O failure.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            SourceError::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// True when the file is simply gone (a process or cgroup vanished mid-scan).
    pub fn is_not_found(&self) -> bool {
        matches!(self, SourceError::Io { source, .. }
            if source.kind() == io::ErrorKind::NotFound || source.raw_os_error() == Some(libc::ESRCH))
    }
}

/// Opens a file for reading. O_NONBLOCK: a FIFO or a terminal where a file should be must not
/// stall a collector, or a reload on the daemon's event loop, in open() or read(); on regular,
/// procfs and sysfs files it changes nothing.
fn open_nonblocking(path: &Path) -> Result<File, SourceError> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|source| SourceError::Io { path: path.to_owned(), source })
}

/// Appends at most `limit` bytes of `file` to `bytes`; more is an error, read no further.
fn read_bounded(file: File, path: &Path, limit: u64, bytes: &mut Vec<u8>) -> Result<(), SourceError> {
    let start = bytes.len();
    file.take(limit + 1).read_to_end(bytes).map_err(|source| SourceError::Io { path: path.to_owned(), source })?;
    if (bytes.len() - start) as u64 > limit {
        return Err(SourceError::TooLarge { path: path.to_owned(), limit });
    }
    Ok(())
}

/// Whether `path` is a procfs mount (statfs(2) says PROC_SUPER_MAGIC), and not a directory
/// standing in for one (a fixture tree, a copy): what the kernel alone knows, such as the memory
/// it can hand out or its task counters, is read only from a real procfs.
pub fn is_procfs(path: &Path) -> io::Result<bool> {
    let name = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: statfs reads the NUL-terminated path and writes into the zeroed struct we own.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above; both pointers are valid for the call.
    if unsafe { libc::statfs(name.as_ptr(), &mut fs) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // f_type and the magic are i64 on x86_64, narrower on other targets.
    #[allow(clippy::unnecessary_cast)]
    Ok(fs.f_type as i64 == libc::PROC_SUPER_MAGIC as i64)
}

/// Reads a kernel file into `buf` (cleared first), failing past [`MAX_FILE_BYTES`]. Any file type
/// is read (a character device is cut at the bound). Invalid UTF-8 is replaced rather than
/// rejected: kernel text is ASCII, and a stray byte in a comm or path must not lose the rest of
/// the file.
pub fn read_into(path: &Path, buf: &mut String) -> Result<(), SourceError> {
    // Read into the caller's allocation: the process scan calls this three times per process.
    let mut bytes = std::mem::take(buf).into_bytes();
    bytes.clear();
    read_bytes_into(path, &mut bytes)?;
    match String::from_utf8(bytes) {
        Ok(text) => *buf = text,
        Err(err) => buf.push_str(&String::from_utf8_lossy(err.as_bytes())),
    }
    Ok(())
}

/// Reads a whole file as bytes, bounded: for files whose bytes matter as they are
/// (`/proc/PID/environ`, NCCL's configuration files).
pub fn read_bytes(path: &Path) -> Result<Vec<u8>, SourceError> {
    let mut bytes = Vec::new();
    read_bytes_into(path, &mut bytes)?;
    Ok(bytes)
}

fn read_bytes_into(path: &Path, bytes: &mut Vec<u8>) -> Result<(), SourceError> {
    let file = open_nonblocking(path)?;
    bytes.reserve(4096);
    read_bounded(file, path, MAX_FILE_BYTES, bytes)
}

/// Reads a file the operator wrote (configuration, web configuration, certificate, key): a
/// regular file of at most `limit` bytes, opened without blocking. A directory, FIFO or device in
/// its place is refused: it would read as an error or as an empty file, and an empty file is a
/// valid configuration.
pub fn read_regular(path: &Path, limit: u64) -> Result<Vec<u8>, SourceError> {
    let file = open_nonblocking(path)?;
    let metadata = file.metadata().map_err(|source| SourceError::Io { path: path.to_owned(), source })?;
    if !metadata.is_file() {
        return Err(SourceError::NotRegular { path: path.to_owned() });
    }
    let mut bytes = Vec::new();
    read_bounded(file, path, limit, &mut bytes)?;
    Ok(bytes)
}

/// [`read_regular`] for text: invalid UTF-8 is an error (an operator's file is not repaired
/// behind their back), with the message `read_to_string` gives.
pub fn read_regular_text(path: &Path, limit: u64) -> Result<String, SourceError> {
    String::from_utf8(read_regular(path, limit)?).map_err(|_| SourceError::Io {
        path: path.to_owned(),
        source: io::Error::new(io::ErrorKind::InvalidData, "stream did not contain valid UTF-8"),
    })
}

/// Reads a file line by line until `find` returns something, without holding more than one line:
/// for large files of which one line matters (`/proc/PID/maps`). At most `limit` bytes are read;
/// a file longer than that is searched in its first `limit` bytes only.
pub fn find_line<T>(
    path: &Path,
    limit: u64,
    mut find: impl FnMut(&str) -> Option<T>,
) -> Result<Option<T>, SourceError> {
    use std::io::BufRead;
    let io_err = |source| SourceError::Io { path: path.to_owned(), source };
    let file =
        OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC).open(path).map_err(io_err)?;
    let mut reader = std::io::BufReader::with_capacity(64 << 10, file.take(limit));
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).map_err(io_err)? == 0 {
            return Ok(None);
        }
        let text = String::from_utf8_lossy(&line);
        if let Some(found) = find(text.trim_end_matches('\n')) {
            return Ok(Some(found));
        }
    }
}

/// Reads a whole file as text, bounded.
pub fn read_string(path: &Path) -> Result<String, SourceError> {
    let mut text = String::new();
    read_into(path, &mut text)?;
    Ok(text)
}

/// Reads and parses one file, attaching the path to any parse error.
pub fn read_parsed<T>(path: &Path, parse: impl FnOnce(&str) -> Result<T, ParseError>) -> Result<T, SourceError> {
    let text = read_string(path)?;
    parse(&text).map_err(|source| SourceError::Parse { path: path.to_owned(), source })
}

/// Reads and parses a line-oriented file field by field ([`crate::Parsed`]): the fields
/// that parsed are returned, each field that did not is pushed to `errors` with the path.
pub fn read_fields<T>(
    path: &Path,
    parse: impl FnOnce(&str) -> Result<crate::Parsed<T>, ParseError>,
    errors: &mut Vec<SourceError>,
) -> Result<T, SourceError> {
    let parsed = read_parsed(path, parse)?;
    errors.extend(parsed.field_errors.into_iter().map(|source| SourceError::Parse { path: path.to_owned(), source }));
    Ok(parsed.value)
}

/// Lists directory entry names, sorted, for deterministic output.
pub fn list_dir(path: &Path) -> Result<Vec<String>, SourceError> {
    let io_err = |source| SourceError::Io { path: path.to_owned(), source };
    let mut names = Vec::new();
    for entry in std::fs::read_dir(path).map_err(io_err)? {
        let entry = entry.map_err(io_err)?;
        if let Some(name) = entry.file_name().to_str() {
            names.push(name.to_owned());
        }
    }
    names.sort_unstable();
    Ok(names)
}

/// Lists the names of the subdirectories of `path`, sorted by their bytes. Uses the type readdir reports, so
/// a cgroup directory with dozens of control files costs one readdir, not a stat per file.
/// Symlinks are not followed (no loops). Names that are not UTF-8 are skipped.
pub fn list_subdirs(path: &Path) -> Result<Vec<std::ffi::OsString>, SourceError> {
    let io_err = |source| SourceError::Io { path: path.to_owned(), source };
    let mut names = Vec::new();
    for entry in std::fs::read_dir(path).map_err(io_err)? {
        let entry = entry.map_err(io_err)?;
        if !entry.file_type().map_err(io_err)?.is_dir() {
            continue;
        }
        // Names that are not UTF-8 too: a cgroup is a directory whoever named it.
        names.push(entry.file_name());
    }
    names.sort_unstable();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oversized_files_are_refused_not_read_whole() {
        let tmp = tempfile::Builder::new().prefix("memlock-fsroot-").tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let big = dir.join("big");
        std::fs::write(&big, vec![b'x'; (MAX_FILE_BYTES + 10) as usize]).unwrap();
        let err = read_string(&big).unwrap_err();
        assert_eq!(err.kind(), "too_large");
        assert!(err.to_string().contains("big"));
        let missing = read_string(&dir.join("missing")).unwrap_err();
        assert!(missing.is_not_found());
        assert!(missing.to_string().contains("missing"), "{missing}");
        let binary = dir.join("binary");
        std::fs::write(&binary, b"MemTotal: 1 kB\n\xff\xfe\0\n").unwrap();
        assert!(read_string(&binary).unwrap().starts_with("MemTotal: 1 kB\n"));
    }

    #[test]
    fn operator_files_are_regular_bounded_and_text() {
        let tmp = tempfile::Builder::new().prefix("memlock-fsroot-regular-").tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let file = dir.join("web.yml");
        std::fs::write(&file, "basic_auth_users: {}\n").unwrap();
        assert_eq!(read_regular_text(&file, 64).unwrap(), "basic_auth_users: {}\n");
        let err = read_regular(&file, 8).unwrap_err();
        assert_eq!((err.kind(), err.detail()), ("too_large", "larger than 8 bytes".to_owned()));
        assert_eq!(err.to_string(), format!("{}: larger than 8 bytes", file.display()));
        let err = read_regular(&dir, 64).unwrap_err();
        assert!(matches!(err, SourceError::NotRegular { .. }), "{err}");
        assert_eq!(err.to_string(), format!("{}: not a regular file", dir.display()));
        // A character device is cut at the bound by the kernel reader, but refused unread here.
        assert!(matches!(read_regular(Path::new("/dev/zero"), 64), Err(SourceError::NotRegular { .. })));
        std::fs::write(&file, b"key: \xff\n").unwrap();
        let err = read_regular_text(&file, 64).unwrap_err();
        assert!(err.to_string().contains("web.yml: stream did not contain valid UTF-8"), "{err}");
    }

    #[test]
    fn a_directory_is_an_io_error_not_a_panic() {
        let err = read_string(Path::new("/")).unwrap_err();
        assert_eq!(err.kind(), "io");
    }

    /// Reads on another thread, so that a read that blocks fails the test instead of hanging it.
    fn read_within(path: &Path, limit: std::time::Duration) -> Result<String, SourceError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let owned = path.to_owned();
        std::thread::spawn(move || {
            let _ = tx.send(read_string(&owned));
        });
        rx.recv_timeout(limit).unwrap_or_else(|_| panic!("reading {} blocked", path.display()))
    }

    #[test]
    fn special_files_neither_block_nor_run_forever() {
        let tmp = tempfile::Builder::new().prefix("memlock-fsroot-special-").tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let limit = std::time::Duration::from_secs(10);
        // A FIFO nobody writes to: a blocking open would wait for a writer forever.
        let fifo = dir.join("status");
        let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo reads the NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        assert_eq!(read_within(&fifo, limit).unwrap(), "", "no writer: end of file at once");
        // A FIFO with a writer that never writes: EAGAIN, an I/O error, not a wait.
        // (A non-blocking writer needs a reader to exist first.)
        let keep_open = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&fifo).unwrap();
        let writer = std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(&fifo).unwrap();
        assert_eq!(read_within(&fifo, limit).unwrap_err().kind(), "io");
        drop((writer, keep_open));
        // An endless character device is cut at the bound.
        let zero = dir.join("meminfo");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        assert_eq!(read_within(&zero, limit).unwrap_err().kind(), "too_large");
        // A file whose read fails in the kernel: EIO, named, not a panic.
        let eio = read_within(Path::new("/proc/self/mem"), limit).unwrap_err();
        assert_eq!(eio.kind(), "io");
        assert!(eio.to_string().contains("/proc/self/mem") && eio.to_string().contains("Input/output error"), "{eio}");
    }
}
