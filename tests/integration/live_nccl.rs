//! The real NCCL: the nvidia-nccl wheels `scripts/nccl_wheels.py fetch` caches (pinned by sha256,
//! unpacked as site-packages). A real process loads each release's libnccl.so.2 with dlopen
//! (ctypes), asks ncclGetVersion, locks and pins memory like a rank; the exporter, `check --pid`
//! and `estimate --pid` must name the release ncclGetVersion gave. Without the cache (no PyPI
//! access) the tests skip with that reason; scripts/test.sh fetches it first.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use crate::live_process::{start_exporter, unprivileged_python, FAST_SCANS, PINNER};
use crate::util::{binary, binary_runnable_by, is_root, live_lock, Metrics};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One cached release, as `scripts/nccl_wheels.py list` prints it.
struct Release {
    release: String,
    version: String,
    wheel: String,
    sha256: String,
    site: PathBuf,
    library: PathBuf,
}

fn cached() -> Vec<Release> {
    let out = Command::new(unprivileged_python())
        .arg(repo().join("scripts/nccl_wheels.py"))
        .arg("list")
        .output()
        .expect("run scripts/nccl_wheels.py list");
    assert!(out.status.success(), "nccl_wheels.py list: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            let s = |key: &str| v[key].as_str().unwrap_or_else(|| panic!("{key} in {line}")).to_owned();
            Release {
                release: s("release"),
                version: s("version"),
                wheel: s("wheel"),
                sha256: s("sha256"),
                site: s("site").into(),
                library: s("library").into(),
            }
        })
        .collect()
}

const NO_CACHE: &str = "no NCCL wheel cached: `/usr/bin/python3 scripts/nccl_wheels.py fetch` downloads them (needs \
    PyPI; scripts/test.sh runs it)";

/// `ncclGetVersion`'s code as a release (nccl.h NCCL_VERSION: major*10000 + minor*100 + patch
/// since 2.9).
fn release_of(code: u32) -> String {
    format!("{}.{}.{}", code / 10000, code % 10000 / 100, code % 100)
}

/// Before PINNER: loads NCCL from argv[2] (dlopen), prints "version <ncclGetVersion>", mlocks
/// 4 MiB as a rank's host buffers are, then PINNER pins 1 MiB per "pin" line (VmPin: what makes
/// the exporter read the process's maps).
const RANK: &str = r#"
import ctypes, mmap as _mm, sys as _sys
_nccl = ctypes.CDLL(_sys.argv[2])
_code = ctypes.c_int()
if _nccl.ncclGetVersion(ctypes.byref(_code)) != 0:
    print("ncclGetVersion failed", flush=True); _sys.exit(1)
_locked = _mm.mmap(-1, 4 << 20, flags=_mm.MAP_PRIVATE | _mm.MAP_ANONYMOUS)
_libc = ctypes.CDLL(None, use_errno=True)
if _libc.mlock(ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(_locked))), ctypes.c_size_t(4 << 20)):
    print("mlock errno", ctypes.get_errno(), flush=True); _sys.exit(1)
print("version", _code.value, flush=True)
"#;

struct Rank {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Rank {
    fn spawn(library: &Path) -> Rank {
        let script = format!("{RANK}{PINNER}");
        let mut child = Command::new(unprivileged_python())
            .args(["-I", "-c", &script, "1048576"])
            .arg(library)
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the rank");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        Rank { child, stdin, stdout }
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read the rank");
        line.trim().to_owned()
    }

    /// ncclGetVersion's answer, once the rank holds its locked memory.
    fn version(&mut self) -> u32 {
        let line = self.line();
        let code = line.strip_prefix("version ").and_then(|v| v.parse().ok());
        let code = code.unwrap_or_else(|| panic!("the rank said {line:?}"));
        assert_eq!(self.line(), "ready");
        code
    }

    fn pin(&mut self) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "pin").and_then(|_| stdin.flush()).expect("write the rank");
        assert_eq!(self.line(), "pinned 1048576");
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Rank {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The rank's `memlock_process_nccl_info` series, once exported.
fn nccl_info(exporter: &crate::util::Exporter, pid: u32) -> String {
    // Generous: on a loaded machine a debug exporter's passes lag; the loop ends at the series.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let m: Metrics = exporter.metrics();
        let needle = format!("pid=\"{pid}\",");
        if let Some((series, _)) = m.family("memlock_process_nccl_info").into_iter().find(|(k, _)| k.contains(&needle))
        {
            return series.to_owned();
        }
        assert!(Instant::now() < deadline, "no memlock_process_nccl_info for {pid}:\n{}", m.text);
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn run(args: &[&str]) -> String {
    let out = Command::new(binary()).args(args).output().expect("run the binary");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// A site-packages of hard links to the cached release (the same inodes, so no copy of the
/// library's hundreds of MB), in the cache's file system; removed on drop.
struct Site(PathBuf);

impl Site {
    fn of(r: &Release) -> Site {
        let root = r.site.with_file_name(format!("live-{}-{}", r.release, std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let lib_dir = root.join("site-packages/nvidia/nccl/lib");
        std::fs::create_dir_all(&lib_dir).unwrap();
        std::fs::hard_link(&r.library, lib_dir.join("libnccl.so.2")).unwrap();
        for entry in std::fs::read_dir(&r.site).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            if name.ends_with(".dist-info") {
                let to = root.join("site-packages").join(&name);
                std::fs::create_dir_all(&to).unwrap();
                std::fs::hard_link(entry.path().join("METADATA"), to.join("METADATA")).unwrap();
            }
        }
        Site(root)
    }

    fn library(&self) -> PathBuf {
        self.0.join("site-packages/nvidia/nccl/lib/libnccl.so.2")
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Each cached release loaded by a real process: the exporter exports the release
/// ncclGetVersion gives, from the library (its name, libnccl.so.2, carries none), and `check
/// --pid` and `estimate --pid` state it with its source.
#[test]
fn the_real_nccl_of_each_cached_release_is_exported_and_checked() {
    crate::require!(is_root(), "live tests need root (to read another process's maps)");
    let releases = cached();
    crate::require!(!releases.is_empty(), "{NO_CACHE}");
    let _guard = live_lock();
    let exporter = start_exporter(FAST_SCANS);
    for r in &releases {
        let site = Site::of(r);
        let mut rank = Rank::spawn(&site.library());
        let got = release_of(rank.version());
        assert_eq!(got, r.version, "{}: ncclGetVersion names the wheel's release", r.release);
        rank.pin();
        let pid = rank.pid();
        let series = nccl_info(&exporter, pid);
        assert!(
            series.ends_with(&format!(",source=\"library\",version=\"{got}\",library=\"libnccl.so.2\"}}")),
            "{}: {series}",
            r.release
        );
        let check = run(&["check", "--pid", &pid.to_string()]);
        let line = check.lines().find(|l| l.contains("nccl.version")).unwrap_or_else(|| panic!("{check}"));
        assert!(line.starts_with("PASS"), "{line}");
        assert!(line.contains(&format!("{got} (from the library) in {}", site.library().display())), "{line}");
        assert!(line.contains(&format!("says {got}")), "the dist-info agrees: {line}");
        let json = run(&["check", "--pid", &pid.to_string(), "--json"]);
        let report: serde_json::Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
        let finding = report["findings"].as_array().unwrap().iter().find(|f| f["id"] == "nccl.version").cloned();
        assert_eq!(finding.map(|f| f["status"].clone()), Some("PASS".into()), "{json}");
        let estimate = run(&["estimate", "--pid", &pid.to_string()]);
        assert!(estimate.contains(&format!("  NCCL: {got} (from the library) in ")), "{estimate}");
        let json = run(&["estimate", "--pid", &pid.to_string(), "--json"]);
        let report: serde_json::Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
        let library = &report["verdict"]["nccl"]["library"];
        assert_eq!((library["version"].as_str(), library["source"].as_str()), (Some(&*got), Some("library")), "{json}");
    }
}

/// A library replaced on disk while the rank runs it (`(deleted)` in maps, a different file at
/// the path): the version is the mapped library's, read through /proc/PID/map_files.
#[test]
fn a_real_nccl_replaced_on_disk_is_read_as_mapped() {
    crate::require!(is_root(), "live tests need root (map_files needs CAP_SYS_ADMIN)");
    let releases = cached();
    crate::require!(!releases.is_empty(), "{NO_CACHE}");
    let _guard = live_lock();
    let exporter = start_exporter(FAST_SCANS);
    let r = &releases[releases.len() - 1];
    let site = Site::of(r);
    let mut rank = Rank::spawn(&site.library());
    let got = release_of(rank.version());
    // An upgrade that replaces the file: a new inode at the path, one the rank does not run.
    std::fs::remove_file(site.library()).unwrap();
    std::fs::write(site.library(), b"\x7fELF not the mapped library").unwrap();
    let pid = rank.pid();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(maps.contains(&format!("{} (deleted)", site.library().display())), "{maps}");
    rank.pin();
    let series = nccl_info(&exporter, pid);
    assert!(series.ends_with(&format!(",source=\"library\",version=\"{got}\",library=\"libnccl.so.2\"}}")), "{series}");
    let check = run(&["check", "--pid", &pid.to_string()]);
    let line = check.lines().find(|l| l.contains("nccl.version")).unwrap_or_else(|| panic!("{check}"));
    assert!(line.contains(&format!("{got} (from the library)")), "{line}");
    assert!(line.contains("replaced on disk since it was mapped"), "{line}");
}

/// A library under a directory the checker cannot enter: a reason naming the file, no version
/// made up, and the check still runs.
#[test]
fn a_library_the_checker_cannot_read_is_named_with_the_reason() {
    use std::os::unix::fs::PermissionsExt;
    crate::require!(is_root(), "live tests need root (to run as another uid)");
    const UID: u32 = 64436;
    let _guard = live_lock();
    let dir = std::env::temp_dir().join(format!("memlock-nccl-locked-{}", std::process::id()));
    let lib_dir = dir.join("site-packages/nvidia/nccl/lib");
    std::fs::create_dir_all(&lib_dir).unwrap();
    for d in ["", "site-packages", "site-packages/nvidia", "site-packages/nvidia/nccl", "site-packages/nvidia/nccl/lib"]
    {
        std::fs::set_permissions(dir.join(d), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let library = lib_dir.join("libnccl.so.2");
    std::fs::copy("/bin/true", &library).unwrap();
    let mapper = "import mmap, sys\nf = open(sys.argv[1], 'rb')\nm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\n\
        print('mapped', flush=True)\nsys.stdin.read()\n";
    let mut child = Command::new("setpriv")
        .args([format!("--reuid={UID}"), format!("--regid={UID}"), "--clear-groups".into()])
        .args([unprivileged_python(), "-I", "-c", mapper])
        .arg(&library)
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the mapper");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "mapped");
    // Closed behind it: the process keeps its mapping, nobody of its uid can reach the file.
    std::fs::set_permissions(dir.join("site-packages"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let pid = child.id();
    let out = Command::new("setpriv")
        .args([format!("--reuid={UID}"), format!("--regid={UID}"), "--clear-groups".into()])
        .arg(binary_runnable_by(UID))
        .args(["check", "--pid", &pid.to_string()])
        .current_dir("/")
        .output()
        .expect("run check");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.contains("nccl.version")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.starts_with("PASS"), "an unknown version is no failure of the job: {line}");
    assert!(line.contains(&format!("unknown in {}", library.display())), "{line}");
    assert!(
        line.contains(&format!("library /proc/{pid}/root{}: Permission denied", library.display())),
        "names the file and why: {line}"
    );
    assert!(out.status.code().is_some_and(|c| c < 2), "the check ran: {:?}\n{text}", out.status);
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The log format fixtures: each names its wheel, sha256 and ncclGetVersion's answer, which
/// agrees with the library's version line; with the wheels cached, each is what
/// `scripts/nccl_wheels.py formats` extracts from its release today.
#[test]
fn nccl_format_fixtures_match_the_cached_libraries() {
    let dir = repo().join("tests/fixtures/nccl-formats");
    let mut fixtures: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    fixtures.sort();
    assert!(fixtures.len() >= 3, "the newest cu12, one 2.2x and cu11's newest: {fixtures:?}");
    for path in &fixtures {
        let text = std::fs::read_to_string(path).unwrap();
        let header = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("# {key}: ")))
                .unwrap_or_else(|| panic!("{key}: {path:?}"))
        };
        let code: u32 = header("ncclGetVersion").parse().unwrap();
        let release = release_of(code);
        assert!(header("library").starts_with(&format!("NCCL version {release}+cuda")), "{path:?}");
        assert!(header("wheel").contains(&format!("-{release}-")), "{path:?}");
        assert_eq!(header("sha256").len(), 64, "{path:?}");
        let formats: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert!(formats.iter().any(|l| l.starts_with("Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d")));
        assert!(formats.contains(&"Call to ibv_reg_mr failed with error %s"), "{path:?}");
        assert!(formats.contains(&&*format!("NCCL version {release}{}", &header("library")[13 + release.len()..])));
    }
    let releases = cached();
    crate::require!(!releases.is_empty(), "{NO_CACHE}");
    for r in &releases {
        let path = dir.join(format!("{}.txt", r.release));
        let fixture = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(fixture.contains(&format!("# wheel: {}\n# sha256: {}\n", r.wheel, r.sha256)), "{}", r.release);
        let out = Command::new(unprivileged_python())
            .arg(repo().join("scripts/nccl_wheels.py"))
            .args(["formats", "--print", &r.release])
            .output()
            .expect("run scripts/nccl_wheels.py formats");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stdout), fixture, "{}: regenerate with formats", r.release);
    }
}

/// A process that maps `library` (mmap, as the loader does; these fakes cannot be dlopened) and
/// holds it until dropped.
fn map_and_hold(library: &Path) -> Child {
    let mapper = "import mmap, sys\nf = open(sys.argv[1], 'rb')\nm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\n\
        print('mapped', flush=True)\nsys.stdin.read()\n";
    let mut child = Command::new(unprivileged_python())
        .args(["-I", "-c", mapper])
        .arg(library)
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the mapper");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line).expect("read the mapper");
    assert_eq!(line.trim(), "mapped");
    child
}

/// `check --pid`'s nccl.version line for a process that maps each hostile library in a wheel's
/// layout: a clear reason naming the file, no version made up, and the check still runs.
#[test]
fn hostile_libraries_give_check_a_reason() {
    use memlock_kernel::nccl_library::elf;
    crate::require!(is_root(), "live tests need root (to read another process's maps)");
    let dir = std::env::temp_dir().join(format!("memlock-nccl-hostile-{}", std::process::id()));
    let long = [b"\0NCCL version 2".as_slice(), &vec![b'1'; 10 << 20], b"\0"].concat();
    let mut cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("long", elf(&[(".rodata", &long)]), "its `NCCL version` string is longer than 64 bytes"),
        ("binary", elf(&[(".rodata", b"NCCL version 2.\xff\xfe+cuda\0")]), "its `NCCL version` string is not UTF-8"),
        ("script", b"#!/bin/sh\nexit 0\n".to_vec(), ": not an ELF file"),
    ];
    // The real library cut short (an interrupted copy): its section headers are at the end.
    let releases = cached();
    if let Some(r) = releases.first() {
        let mut head = vec![0u8; 1 << 20];
        std::io::Read::read_exact(&mut std::fs::File::open(&r.library).unwrap(), &mut head).unwrap();
        cases.push(("truncated", head, "truncated: section headers end beyond the file's 1048576 bytes"));
    }
    for (name, bytes, why) in cases {
        let site = dir.join(name).join("site-packages");
        let lib_dir = site.join("nvidia/nccl/lib");
        std::fs::create_dir_all(&lib_dir).unwrap();
        let library = lib_dir.join("libnccl.so.2");
        std::fs::write(&library, &bytes).unwrap();
        let mut child = map_and_hold(&library);
        let check = run(&["check", "--pid", &child.id().to_string()]);
        let line = check.lines().find(|l| l.contains("nccl.version")).unwrap_or_else(|| panic!("{name}: {check}"));
        assert!(line.contains(&format!("unknown in {}", library.display())), "{name}: {line}");
        assert!(line.contains(why), "{name}: {line}");
        assert!(line.contains("no nvidia_nccl_cu*.dist-info in"), "{name}: {line}");
        let _ = child.kill();
        let _ = child.wait();
    }
    // The real library beside a dist-info that names another release: the library wins, and
    // check says both.
    crate::require!(!releases.is_empty(), "{NO_CACHE}");
    let r = &releases[0];
    let site = Site::of(r);
    for entry in std::fs::read_dir(site.0.join("site-packages")).unwrap() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().ends_with(".dist-info") {
            let metadata = path.join("METADATA");
            let text = std::fs::read_to_string(&metadata).unwrap();
            std::fs::remove_file(&metadata).unwrap();
            std::fs::write(&metadata, text.replace(&format!("Version: {}", r.version), "Version: 2.99.9")).unwrap();
        }
    }
    let mut rank = Rank::spawn(&site.library());
    let got = release_of(rank.version());
    let check = run(&["check", "--pid", &rank.pid().to_string()]);
    let line = check.lines().find(|l| l.contains("nccl.version")).unwrap_or_else(|| panic!("{check}"));
    assert!(line.starts_with("WARN"), "{line}");
    assert!(line.contains(&format!("the library is {got}, its wheel's dist-info says 2.99.9")), "{line}");
    let _ = std::fs::remove_dir_all(&dir);
}
