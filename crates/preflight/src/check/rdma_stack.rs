//! The RDMA user space a job would load, as the systems themselves find it: rdma-core from the
//! libibverbs the dynamic loader resolves (the drill and the rdma_caps collector `dlopen`
//! `libibverbs.so.1`), and MLNX_OFED or DOCA-OFED from the `ofed_info` script its installer
//! writes. Files only: nothing is run. Absent is "not found", never an error.

use std::path::{Path, PathBuf};

use memlock_kernel::fsroot;
use memlock_kernel::versions::{ld_cache_paths, ofed_info_version, rdma_core_release};

/// The library `dlopen` asks for.
const SONAME: &str = "libibverbs.so.1";
/// ld.so.cache is a few hundred KiB on a large install; more is not a cache.
const CACHE_MAX_BYTES: u64 = 16 << 20;
/// ofed_info lists every package's source: some hundred KiB.
const OFED_INFO_MAX_BYTES: u64 = 4 << 20;

/// Where the files are: `rootfs` for /usr and /lib, `etc` for ld.so.cache.
pub struct Roots<'a> {
    pub rootfs: &'a Path,
    pub etc: &'a Path,
    pub procfs: &'a Path,
}

/// `path` (absolute, as the target system names it) under `rootfs`.
fn under(rootfs: &Path, path: &str) -> PathBuf {
    rootfs.join(path.trim_start_matches('/'))
}

/// The default directories glibc searches after the cache (elf/dl-load.c, `system_dirs` built
/// from the configured slibdir and libdir): the multiarch ones on Debian and Ubuntu, lib64 on
/// Red Hat and SUSE.
fn default_dirs() -> Vec<String> {
    let triplet = match std::env::consts::ARCH {
        "aarch64" => "aarch64-linux-gnu",
        "powerpc64" => "powerpc64le-linux-gnu",
        _ => "x86_64-linux-gnu",
    };
    vec![
        format!("/lib/{triplet}"),
        format!("/usr/lib/{triplet}"),
        "/lib64".into(),
        "/usr/lib64".into(),
        "/lib".into(),
        "/usr/lib".into(),
    ]
}

/// rdma-core's release and the file it was read from: with `--pid`, the libibverbs the process
/// has mapped; else the one ld.so.cache ranks first, else the first in the default directories.
pub(crate) fn rdma_core(roots: &Roots, pid: &str) -> String {
    if pid != "self" {
        if let Ok(maps) = fsroot::read_string(&roots.procfs.join(pid).join("maps")) {
            let mapped = maps.lines().find_map(|line| {
                let path = line.split_whitespace().nth(5)?;
                path.rsplit('/').next().filter(|n| n.starts_with("libibverbs.so.1")).map(|_| path.to_owned())
            });
            if let Some(path) = mapped {
                let name = path.rsplit('/').next().unwrap_or("");
                return match rdma_core_release(name) {
                    Some(release) => format!("{release} ({path}, mapped by pid {pid})"),
                    None => format!("version not in the file name ({path}, mapped by pid {pid})"),
                };
            }
        }
    }
    let cache = fsroot::read_regular(&roots.etc.join("ld.so.cache"), CACHE_MAX_BYTES).unwrap_or_default();
    let mut candidates = ld_cache_paths(&cache, SONAME);
    candidates.extend(default_dirs().into_iter().map(|d| format!("{d}/{SONAME}")));
    for path in candidates {
        let file = under(roots.rootfs, &path);
        // The soname is a link to the real file, whose name carries the release.
        let target = match std::fs::read_link(&file) {
            Ok(target) => target.to_string_lossy().into_owned(),
            Err(_) if file.is_file() => {
                return format!("version not in the file name ({path})");
            }
            Err(_) => continue,
        };
        let name = target.rsplit('/').next().unwrap_or("").to_owned();
        let resolved = if target.starts_with('/') {
            target.clone()
        } else {
            format!("{}/{target}", path.rsplit_once('/').map_or("", |(dir, _)| dir))
        };
        return match rdma_core_release(&name) {
            Some(release) => format!("{release} ({resolved})"),
            None => format!("version not in the file name ({path} -> {target})"),
        };
    }
    format!("not found (no {SONAME} in ld.so.cache or the default library directories)")
}

/// MLNX_OFED or DOCA-OFED, as `ofed_info -s` would print it.
pub(crate) fn ofed(roots: &Roots) -> String {
    let file = under(roots.rootfs, "/usr/bin/ofed_info");
    match fsroot::read_regular_text(&file, OFED_INFO_MAX_BYTES) {
        Ok(text) => match ofed_info_version(&text) {
            Some(version) => format!("{version} (/usr/bin/ofed_info)"),
            None => "not found (/usr/bin/ofed_info names no version)".into(),
        },
        Err(_) => "not found (no /usr/bin/ofed_info: the distribution's rdma-core and in-tree drivers)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Tree {
        dir: tempfile::TempDir,
    }

    impl Tree {
        fn new() -> Tree {
            Tree { dir: tempfile::tempdir().unwrap() }
        }
        fn path(&self, rel: &str) -> PathBuf {
            let p = self.dir.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            p
        }
        fn roots(&self) -> (PathBuf, PathBuf, PathBuf) {
            (self.dir.path().to_path_buf(), self.dir.path().join("etc"), self.dir.path().join("proc"))
        }
    }

    fn read(t: &Tree, pid: &str) -> (String, String) {
        let (rootfs, etc, procfs) = t.roots();
        let roots = Roots { rootfs: &rootfs, etc: &etc, procfs: &procfs };
        (rdma_core(&roots, pid), ofed(&roots))
    }

    #[test]
    fn absent_is_not_found() {
        let t = Tree::new();
        let (core, ofed) = read(&t, "self");
        assert!(core.starts_with("not found"), "{core}");
        assert!(ofed.starts_with("not found"), "{ofed}");
    }

    #[test]
    fn the_soname_link_in_a_default_directory() {
        let t = Tree::new();
        std::fs::write(t.path("usr/lib64/libibverbs.so.1.14.44.0"), "").unwrap();
        std::os::unix::fs::symlink("libibverbs.so.1.14.44.0", t.path("usr/lib64/libibverbs.so.1")).unwrap();
        assert_eq!(read(&t, "self").0, "44.0 (/usr/lib64/libibverbs.so.1.14.44.0)");
    }

    #[test]
    fn ld_so_cache_decides_over_the_default_directories() {
        let t = Tree::new();
        std::os::unix::fs::symlink("libibverbs.so.1.14.50.0", t.path("usr/lib64/libibverbs.so.1")).unwrap();
        std::os::unix::fs::symlink("libibverbs.so.1.14.2410mlnx54.0", t.path("opt/mellanox/lib/libibverbs.so.1"))
            .unwrap();
        std::fs::write(
            t.path("etc/ld.so.cache"),
            b"glibc-ld.so.cache1.1\0libibverbs.so.1\0/opt/mellanox/lib/libibverbs.so.1\0",
        )
        .unwrap();
        assert_eq!(read(&t, "self").0, "2410mlnx54.0 (/opt/mellanox/lib/libibverbs.so.1.14.2410mlnx54.0)");
    }

    #[test]
    fn the_checked_process_mapping_wins() {
        let t = Tree::new();
        std::os::unix::fs::symlink("libibverbs.so.1.14.50.0", t.path("usr/lib64/libibverbs.so.1")).unwrap();
        std::fs::write(
            t.path("proc/4010/maps"),
            "7f3a1c000000-7f3a1c020000 r-xp 00000000 103:02 5377114 \
                /usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.39.0\n",
        )
        .unwrap();
        let core = read(&t, "4010").0;
        assert_eq!(core, "39.0 (/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.39.0, mapped by pid 4010)");
    }

    #[test]
    fn ofed_info_as_the_installer_writes_it() {
        let t = Tree::new();
        std::fs::write(
            t.path("usr/bin/ofed_info"),
            "#!/bin/bash\nif [ \"$1\" == \"-s\" ]; then echo MLNX_OFED_LINUX-23.10-3.2.2.0:; exit; fi\n",
        )
        .unwrap();
        assert_eq!(read(&t, "self").1, "MLNX_OFED_LINUX-23.10-3.2.2.0 (/usr/bin/ofed_info)");
        // A huge or binary file is no version, and no error.
        std::fs::write(t.path("usr/bin/ofed_info"), vec![0xffu8; 5 << 20]).unwrap();
        assert!(read(&t, "self").1.starts_with("not found"));
    }
}
