//! What triggers a configuration reload: SIGHUP, or a change to any file the configuration was
//! read from (the TOML file, the web configuration, certificates and keys).
//!
//! Files are watched through their directories, so editors that write a new file and rename it
//! over the old one, and Kubernetes ConfigMap volumes (which swap a `..data` symlink), are seen
//! too. Events only say "maybe"; a reload happens when the contents actually differ from what
//! was last loaded, so touching a file or unrelated activity in the directory costs a hash.

mod stable;

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecursiveMode, Watcher as _};
use tokio::sync::mpsc;

pub use stable::{threshold_jumps, Arrivals, JUMP_FACTOR, STABLE};

/// Editors and tools write in bursts (truncate, write, rename); wait this long after the first
/// event for the burst to end before comparing contents.
pub const SETTLE: Duration = Duration::from_millis(300);

/// Watches the directories of a set of files and sends `()` on `events` when something in them
/// may have changed.
pub struct FileWatch {
    _watcher: Option<notify::RecommendedWatcher>,
    arrivals: std::sync::Arc<Arrivals>,
}

impl FileWatch {
    pub fn new(files: Vec<PathBuf>, events: mpsc::UnboundedSender<()>) -> FileWatch {
        let names: BTreeSet<OsString> = files.iter().filter_map(|f| f.file_name().map(|n| n.to_owned())).collect();
        let dirs: BTreeSet<PathBuf> = files.iter().map(|f| directory_of(f)).collect();
        let arrivals = std::sync::Arc::new(Arrivals::default());
        if files.is_empty() {
            return FileWatch { _watcher: None, arrivals };
        }
        let noted = arrivals.clone();
        let handler = move |event: notify::Result<notify::Event>| {
            let relevant = match &event {
                Ok(event) => event.paths.iter().any(|p| {
                    p.file_name().is_some_and(|n| names.contains(n) || n.as_encoded_bytes().starts_with(b".."))
                }),
                // The watch itself failed (for example the queue overflowed): compare anyway.
                Err(_) => true,
            };
            if relevant {
                noted.note(event.as_ref().ok().map(|e| &e.kind));
                let _ = events.send(());
            }
        };
        let mut watcher = match notify::recommended_watcher(handler) {
            Ok(watcher) => watcher,
            Err(err) => {
                tracing::warn!(error = %err, "cannot watch configuration files; reload with SIGHUP");
                return FileWatch { _watcher: None, arrivals };
            }
        };
        for dir in &dirs {
            if let Err(err) = watcher.watch(dir, RecursiveMode::NonRecursive) {
                tracing::warn!(error = %err, directory = %dir.display(), "cannot watch directory; reload with SIGHUP");
            }
        }
        tracing::debug!(files = ?files, "watching configuration files");
        FileWatch { _watcher: Some(watcher), arrivals }
    }

    /// Whether every change seen since the last call arrived by rename ([`Arrivals`]); resets.
    pub fn arrived_whole(&self) -> bool {
        self.arrivals.take_whole()
    }
}

fn directory_of(file: &Path) -> PathBuf {
    match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// A digest of each file's contents (`None`: unreadable, too large or not a regular file), to
/// tell a real change from a touch.
pub fn fingerprint(files: &[PathBuf]) -> Vec<Option<[u8; 32]>> {
    files
        .iter()
        .map(|path| {
            // This runs on the daemon's event loop: the reader does not block on a FIFO put in
            // place of a watched file (where SIGTERM could no longer be handled).
            let bytes = memlock_kernel::fsroot::read_regular(path, memlock_kernel::fsroot::MAX_FILE_BYTES).ok()?;
            let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
            let mut out = [0u8; 32];
            out.copy_from_slice(digest.as_ref());
            Some(out)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_change_with_contents_only() {
        let tmp = tempfile::Builder::new().prefix("memlock-reload-").tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let file = dir.join("config.toml");
        std::fs::write(&file, "a = 1\n").unwrap();
        let files = vec![file.clone(), dir.join("missing.toml")];
        let first = fingerprint(&files);
        assert!(first[0].is_some() && first[1].is_none());
        std::fs::write(&file, "a = 1\n").unwrap();
        assert_eq!(fingerprint(&files), first, "rewriting the same bytes is no change");
        std::fs::write(&file, "a = 2\n").unwrap();
        assert_ne!(fingerprint(&files), first);
    }

    /// Found by the fault tests: a configuration file replaced by a FIFO blocked the daemon's
    /// event loop in open() for good (no reload, no scrape of the reload gauge changing, and
    /// SIGTERM no longer handled).
    #[test]
    fn a_fifo_in_place_of_a_file_does_not_block() {
        let tmp = tempfile::Builder::new().prefix("memlock-reload-fifo-").tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let fifo = dir.join("config.toml");
        let _ = std::fs::remove_file(&fifo);
        let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo reads the NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let files = vec![fifo.clone(), dir.clone()];
        std::thread::spawn(move || {
            let _ = tx.send(fingerprint(&files));
        });
        let prints = rx.recv_timeout(Duration::from_secs(10)).expect("fingerprinting a FIFO blocked");
        assert_eq!(prints, vec![None, None], "neither a FIFO nor a directory has contents to compare");
    }

    #[tokio::test]
    async fn changes_to_watched_files_are_reported_and_others_are_not() {
        let tmp = tempfile::Builder::new().prefix("memlock-reload-watch-").tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let file = dir.join("config.toml");
        std::fs::write(&file, "a = 1\n").unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let _watch = FileWatch::new(vec![file.clone()], tx);
        std::fs::write(dir.join("unrelated.txt"), "x").unwrap();
        assert!(
            tokio::time::timeout(Duration::from_millis(300), rx.recv()).await.is_err(),
            "an unrelated file is ignored"
        );
        // An editor's save: write a temporary file, rename it over the original.
        std::fs::write(dir.join("config.toml.tmp"), "a = 2\n").unwrap();
        std::fs::rename(dir.join("config.toml.tmp"), &file).unwrap();
        assert!(tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.unwrap().is_some());
    }
}
