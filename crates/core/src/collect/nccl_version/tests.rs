//! Against real files read through this process's real `/proc/PID/root` and `map_files`; the
//! libraries are ELF files built by `kernel::nccl_library`'s test writer (the real wheels are in
//! tests/integration/live_nccl.rs).

use std::path::PathBuf;

use super::*;
use memlock_kernel::nccl_library::elf;

fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("memlock-nccl-version-{name}-")).tempdir().unwrap()
}

/// A wheel's layout: `<site>/nvidia/nccl/lib/libnccl.so.2` and, when given, the dist-info.
fn wheel(site: &Path, library: &[u8], recorded: Option<&str>) -> PathBuf {
    let lib_dir = site.join("nvidia/nccl/lib");
    std::fs::create_dir_all(&lib_dir).unwrap();
    let path = lib_dir.join("libnccl.so.2");
    std::fs::write(&path, library).unwrap();
    if let Some(version) = recorded {
        let info = site.join(format!("nvidia_nccl_cu12-{version}.dist-info"));
        std::fs::create_dir_all(&info).unwrap();
        let metadata = format!("Metadata-Version: 2.1\nName: nvidia-nccl-cu12\nVersion: {version}\n\nNCCL\n");
        std::fs::write(info.join("METADATA"), metadata).unwrap();
    }
    path
}

fn maps_line(path: &Path) -> String {
    format!("7f3a1c000000-7f3a1e4f1000 r-xp 00000000 103:02 5377114 {}", path.display())
}

fn resolve(cache: &mut Cache, path: &Path) -> Arc<NcclVersion> {
    let mapped = mapped(&maps_line(path)).unwrap();
    cache.resolve(Path::new("/proc"), std::process::id(), &mapped)
}

fn library(version: &[u8]) -> Vec<u8> {
    let rodata = [b"\0NCCL version %s\0NCCL version ".as_slice(), version, b"\0"].concat();
    elf(&[(".text", b"\x90"), (".rodata", &rodata)])
}

#[test]
fn maps_lines_name_the_file_and_whether_it_was_replaced() {
    let line = "7f3a1c000000-7f3a1e4f1000 r-xp 00000000 103:02 5377114 /opt/my nccl/libnccl.so.2 (deleted)";
    let m = mapped(line).unwrap();
    assert_eq!(
        (m.path.as_str(), m.deleted, m.range.as_str()),
        ("/opt/my nccl/libnccl.so.2", true, "7f3a1c000000-7f3a1e4f1000")
    );
    assert_eq!(m.name.version, None);
    assert_eq!(mapped("7f3a1c000000-7f3a1e4f1000 r-xp 00000000 103:02 5 /usr/lib/libc.so.6"), None);
}

#[test]
fn the_file_name_decides_without_reading_anything() {
    let mut cache = Cache::default();
    let found = resolve(&mut cache, Path::new("/nonexistent/libnccl.so.2.21.5"));
    assert_eq!((found.version.as_deref(), found.source), (Some("2.21.5"), Some(Source::FileName)));
    assert!(found.reasons.is_empty(), "{:?}", found.reasons);
}

#[test]
fn a_wheel_is_read_from_the_library_and_its_dist_info_and_cached_by_identity() {
    let tmp = scratch("wheel");
    let site = tmp.path().join("site-packages");
    let path = wheel(&site, &library(b"2.23.4+cuda12.6"), Some("2.23.4"));
    let mut cache = Cache::default();
    let found = resolve(&mut cache, &path);
    assert_eq!((found.version.as_deref(), found.source), (Some("2.23.4"), Some(Source::Library)));
    assert_eq!(found.library_string.as_deref(), Some("2.23.4+cuda12.6"));
    let dist = found.dist_info.as_ref().unwrap();
    assert_eq!(dist.version, "2.23.4");
    assert!(dist.path.ends_with("site-packages/nvidia_nccl_cu12-2.23.4.dist-info/METADATA"), "{}", dist.path);
    assert_eq!(found.disagreement(), None);
    assert!(found.reasons.is_empty(), "{:?}", found.reasons);
    assert!(Arc::ptr_eq(&found, &resolve(&mut cache, &path)), "read once per identity");
    // Rewritten in place (a new size): read again.
    std::fs::write(&path, library(b"2.23.4.1+cuda12.6")).unwrap();
    assert_eq!(resolve(&mut cache, &path).version.as_deref(), Some("2.23.4.1"));
}

#[test]
fn a_dist_info_that_lies_loses_to_the_library() {
    let tmp = scratch("lying");
    let site = tmp.path().join("site-packages");
    let path = wheel(&site, &library(b"2.21.5+cuda12.4"), Some("2.26.2"));
    let found = resolve(&mut Cache::default(), &path);
    assert_eq!((found.version.as_deref(), found.source), (Some("2.21.5"), Some(Source::Library)));
    assert_eq!(found.disagreement(), Some(("2.21.5", "2.26.2")));
    // A post-release of the same release is no disagreement.
    let tmp = scratch("post");
    let site = tmp.path().join("site-packages");
    let path = wheel(&site, &library(b"2.26.2+cuda12.2"), Some("2.26.2.post1"));
    assert_eq!(resolve(&mut Cache::default(), &path).disagreement(), None);
}

#[test]
fn hostile_libraries_give_a_reason_naming_the_file() {
    let cases: [(&str, Vec<u8>, &str); 5] = [
        ("script", b"#!/bin/sh\nexit 0\n".to_vec(), "not an ELF file"),
        ("truncated", library(b"2.21.5+cuda12.4")[..200].to_vec(), "truncated"),
        ("long", library(&[b"2".as_slice(), &[b'1'; 10 << 20]].concat()), "longer than 64 bytes"),
        ("binary", library(b"2.\xff\xfe\xfd"), "is not UTF-8"),
        ("none", elf(&[(".rodata", b"no version here\0")]), "no `NCCL version` string in the first 16 bytes"),
    ];
    for (name, bytes, why) in cases {
        let tmp = scratch(name);
        let site = tmp.path().join("site-packages");
        let path = wheel(&site, &bytes, Some("2.21.5"));
        let found = resolve(&mut Cache::default(), &path);
        let reason = found.reasons.join("; ");
        assert!(reason.contains(why), "{name}: {reason}");
        assert!(reason.contains(&path.display().to_string()), "{name}: names the file: {reason}");
        // The dist-info still tells.
        assert_eq!((found.version.as_deref(), found.source), (Some("2.21.5"), Some(Source::DistInfo)), "{name}");
    }
    // Neither: no version, both reasons.
    let tmp = scratch("nothing");
    let site = tmp.path().join("site-packages");
    let path = wheel(&site, b"", None);
    let found = resolve(&mut Cache::default(), &path);
    assert_eq!((found.version.as_deref(), found.source), (None, None));
    assert!(found.reasons.iter().any(|r| r.contains("not an ELF file")), "{:?}", found.reasons);
    assert!(found.reasons.iter().any(|r| r.contains("no nvidia_nccl_cu*.dist-info in")), "{:?}", found.reasons);
}

/// A FIFO or a device put where the library or its METADATA was (a link the process controls)
/// is never opened: O_PATH resolves it, fstat says it is no regular file.
#[test]
fn only_regular_files_are_opened() {
    let tmp = scratch("fifo");
    let site = tmp.path().join("site-packages");
    let path = wheel(&site, b"", Some("2.21.5"));
    std::fs::remove_file(&path).unwrap();
    let fifo = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path this test owns.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let metadata = site.join("nvidia_nccl_cu12-2.21.5.dist-info/METADATA");
    std::fs::remove_file(&metadata).unwrap();
    std::os::unix::fs::symlink("/dev/null", &metadata).unwrap();
    let found = resolve(&mut Cache::default(), &path);
    let reasons = found.reasons.join("; ");
    assert!(reasons.contains(&format!("{}: not a regular file", path.display())), "{reasons}");
    assert!(reasons.contains("METADATA: not a regular file"), "{reasons}");
    assert_eq!(found.version, None);
}

#[test]
fn a_missing_library_is_a_reason_not_a_failure() {
    let found = resolve(&mut Cache::default(), Path::new("/nonexistent/site-packages/nvidia/nccl/lib/libnccl.so.2"));
    assert_eq!(found.version, None);
    let reason = found.reasons.join("; ");
    assert!(reason.contains("/nonexistent/site-packages/nvidia/nccl/lib/libnccl.so.2: No such file"), "{reason}");
    assert!(reason.contains("dist-info:"), "{reason}");
}

/// A library replaced on disk while mapped: maps says `(deleted)`, and the mapped file is read
/// through `/proc/PID/map_files`, not the new file at the path.
#[test]
fn a_library_replaced_while_mapped_is_read_through_map_files() {
    let tmp = scratch("replaced");
    let site = tmp.path().join("site-packages");
    let path = wheel(&site, &library(b"2.21.5+cuda12.4"), Some("2.21.5"));
    let file = std::fs::File::open(&path).unwrap();
    let len = file.metadata().unwrap().len() as usize;
    // SAFETY: a private read-only mapping of a file this test owns, unmapped below.
    let at = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE, file.as_raw_fd(), 0) };
    assert_ne!(at, libc::MAP_FAILED);
    let fresh = path.with_extension("new");
    std::fs::write(&fresh, library(b"2.99.0+cuda12.9")).unwrap();
    std::fs::rename(&fresh, &path).unwrap();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let line = maps.lines().find(|l| l.contains(&*path.to_string_lossy())).unwrap();
    let m = mapped(line).unwrap();
    assert!(m.deleted, "{line}");
    let found = Cache::default().resolve(Path::new("/proc"), std::process::id(), &m);
    // map_files needs CAP_SYS_ADMIN (fs/proc/base.c proc_map_files_get_link); without it, a
    // reason naming map_files rather than the new file's version.
    match found.library_string.as_deref() {
        Some(text) => assert_eq!(text, "2.21.5+cuda12.4", "the mapped file, not its replacement"),
        None => assert!(found.reasons.iter().any(|r| r.contains("map_files")), "{:?}", found.reasons),
    }
    assert_ne!(found.version.as_deref(), Some("2.99.0"));
    assert!(found.reasons.iter().any(|r| r.contains("replaced on disk")), "{:?}", found.reasons);
    // SAFETY: the mapping made above.
    unsafe { libc::munmap(at, len) };
}

use std::os::fd::AsRawFd;
