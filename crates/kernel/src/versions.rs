//! Software versions: the NVIDIA driver's `/proc/driver/nvidia/version`, a module's
//! `/sys/module/<name>/version`, and the NCCL library a process has mapped (`/proc/PID/maps`).

/// The NVIDIA kernel driver, from `/proc/driver/nvidia/version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvidiaDriver {
    /// `595.45.04`.
    pub version: String,
    /// The open kernel modules (open-gpu-kernel-modules) rather than the proprietary ones.
    pub open: bool,
}

/// Parses `/proc/driver/nvidia/version`. open-gpu-kernel-modules kernel-open/nvidia/nv-procfs.c
/// `nv_procfs_read_version` prints `"NVRM version: %s\n"` with `pNVRM_ID`, the string utils.mk
/// `GENERATE_NVIDSTRING` builds from `NVIDIA <UNIX Open Kernel Module> for <arch>  <version>
/// <build type>  (<user>@<host>)  <date>` (src/nvidia/Makefile); the proprietary driver prints
/// `NVIDIA UNIX x86_64 Kernel Module  <version>  <date>`. The version is the first word made of
/// digits and dots. `None` when the line or the version is missing.
pub fn nvidia_driver(text: &str) -> Option<NvidiaDriver> {
    let line = text.lines().find_map(|l| l.trim_start().strip_prefix("NVRM version:"))?;
    let version = line.split_whitespace().find(|word| is_version(word))?;
    Some(NvidiaDriver { version: version.to_owned(), open: line.contains("Open Kernel Module") })
}

/// A dotted version: at least two numbers, joined by single dots (`570.86.15`, not `2.21.`).
fn is_version(word: &str) -> bool {
    word.contains('.') && word.split('.').all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
}

/// The longest label value taken from a version file.
pub const MAX_VERSION_BYTES: usize = 128;

/// A module's `version` file (kernel/module/main.c `show_modinfo_version`: the `MODULE_VERSION`
/// string and a newline): its first line, trimmed and bounded.
pub fn module_version(text: &str) -> String {
    let line = text.trim().lines().next().unwrap_or("").trim();
    let mut end = line.len().min(MAX_VERSION_BYTES);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    line[..end].trim_end().to_owned()
}

/// An NCCL library mapped by a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NcclMapping {
    /// The file name: `libnccl.so.2.21.5`, or `libnccl.so.2` as the nvidia-nccl wheels ship it.
    pub library: String,
    /// `2.21.5` when the file name carries the whole version; `None` for `libnccl.so.2`.
    pub version: Option<String>,
    /// Where the version came from: `file_name`, or (crate::collect::nccl_version) `library` or
    /// `dist_info`; empty without a version.
    pub source: &'static str,
}

/// The first line of one `/proc/PID/maps` text that maps a `libnccl.so*` file. A line is
/// `start-end perms offset dev inode` then, padded, the path (fs/proc/task_mmu.c
/// `show_map_vma`), which ends in ` (deleted)` once the file was replaced on disk.
pub fn nccl_mapping(line: &str) -> Option<NcclMapping> {
    // Most lines of a rank's thousands are not NCCL's: one substring search decides.
    if !line.contains("libnccl.so") {
        return None;
    }
    let mut fields = line.splitn(6, |c: char| c.is_ascii_whitespace());
    for _ in 0..5 {
        fields.next()?;
    }
    let path = fields.next()?.trim();
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    let name = path.rsplit('/').next()?;
    let rest = name.strip_prefix("libnccl.so")?;
    if !(rest.is_empty() || rest.starts_with('.')) {
        return None;
    }
    let suffix = rest.trim_start_matches('.');
    // The library label is bounded; a version is taken only from a name that fits whole, so
    // that it is as bounded and is the end of the label beside it.
    let version = (name.len() <= MAX_VERSION_BYTES && suffix.split('.').count() >= 3 && is_version(suffix))
        .then(|| suffix.to_owned());
    let source = if version.is_some() { "file_name" } else { "" };
    Some(NcclMapping { library: module_version(name), version, source })
}

/// rdma-core's release from the file name of one of its shared libraries. rdma-core names each
/// `lib<name>.so.<SONAME>.<ABI level>.<PACKAGE_VERSION>` (Documentation/versioning.md; the
/// `rdma_library()` calls of libibverbs/CMakeLists.txt, `1 1.14.${PACKAGE_VERSION}`), and
/// PACKAGE_VERSION is the release (`50.0`, or a distributor's tag such as `2410mlnx54.0`):
/// `libibverbs.so.1.14.50.0` is rdma-core 50.0. `None` for the soname link itself or another name.
pub fn rdma_core_release(file_name: &str) -> Option<String> {
    let rest = file_name.strip_suffix(" (deleted)").unwrap_or(file_name).strip_prefix("libibverbs.so.1.")?;
    let (abi, release) = rest.split_once('.')?;
    let sane = |c: char| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-';
    if abi.is_empty() || !abi.bytes().all(|b| b.is_ascii_digit()) || release.is_empty() || !release.chars().all(sane) {
        return None;
    }
    Some(module_version(release))
}

/// The version `ofed_info -s` prints, read from the script without running it. MLNX_OFED's
/// installer (mlnxofedinstall, "Update ofed_info") rewrites `/usr/bin/ofed_info` so that its
/// `-s` branch is `if [ "$1" == "-s" ]; then echo MLNX_OFED_LINUX-<version>:; exit; fi` and its
/// listing starts `MLNX_OFED_LINUX-<version> (OFED-<version>):`; an installation from the
/// packages alone (DOCA-OFED) keeps `if [ "X$1" == "X-s" ]; then echo OFED-internal-<version>:;
/// exit 0; fi`. The word echoed for `-s`, its colon dropped; else the listing's first line.
pub fn ofed_info_version(text: &str) -> Option<String> {
    let word = |w: &str| {
        let w = w.trim_end_matches(';').trim_end_matches(':');
        (w.contains("OFED") && w.bytes().any(|b| b.is_ascii_digit())).then(|| module_version(w))
    };
    let from_s = text.lines().find_map(|line| {
        let line = line.trim();
        if !(line.starts_with("if") && line.contains("-s\"") && line.contains("echo")) {
            return None;
        }
        line.split("echo").nth(1)?.split_whitespace().next().and_then(word)
    });
    from_s.or_else(|| {
        text.lines()
            .map(str::trim)
            .find(|l| l.starts_with("MLNX_OFED_LINUX-") || l.starts_with("OFED-internal-") || l.starts_with("OFED-"))
            .and_then(|l| l.split_whitespace().next())
            .and_then(word)
    })
}

/// The paths of `soname` that ld.so.cache lists, in its order: the library `dlopen(soname)`
/// loads when no LD_LIBRARY_PATH or RUNPATH intervenes (glibc elf/dl-load.c `_dl_map_object`
/// asks elf/dl-cache.c `_dl_load_cache_lookup` before the default directories). The cache's
/// string table holds each entry's path NUL-terminated; the first that ends in `/soname` is the
/// one ldconfig ranked first. Bounded: at most 16 paths of at most 4096 bytes.
pub fn ld_cache_paths(cache: &[u8], soname: &str) -> Vec<String> {
    let suffix = format!("/{soname}");
    cache
        .split(|&b| b == 0)
        .filter(|s| s.len() <= 4096 && s.first() == Some(&b'/') && s.ends_with(suffix.as_bytes()))
        .filter_map(|s| std::str::from_utf8(s).ok())
        .map(str::to_owned)
        .fold(Vec::new(), |mut out, path| {
            if out.len() < 16 && !out.contains(&path) {
                out.push(path);
            }
            out
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvidia_driver_open_and_proprietary() {
        // The open modules' format: NVRM_ID from utils.mk GENERATE_NVIDSTRING.
        let open = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  595.45.04  Release Build  \
            (dvs-builder@U22-I3-AF03-09-1)  Tue Jan 13 03:51:31 UTC 2026\nGCC version:  gcc version 12.3.0 (Ubuntu \
            12.3.0-1ubuntu1~22.04) \n";
        assert_eq!(nvidia_driver(open), Some(NvidiaDriver { version: "595.45.04".into(), open: true }));
        let proprietary =
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024\nGCC version:  \
            gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04) \n";
        assert_eq!(nvidia_driver(proprietary), Some(NvidiaDriver { version: "535.183.01".into(), open: false }));
        let aarch64 = "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  570.86.15  Release Build  \
            (dvs-builder@U16-I1-N08-12-3)  Thu Jan 23 22:55:47 UTC 2025\n";
        assert_eq!(nvidia_driver(aarch64).map(|d| d.version), Some("570.86.15".into()), "x86_64 is not a version");
        assert_eq!(nvidia_driver(""), None);
        assert_eq!(nvidia_driver("GCC version:  gcc version 12.3.0\n"), None, "12.3.0 is the compiler's");
        assert_eq!(nvidia_driver("NVRM version: garbage\n"), None);
    }

    #[test]
    fn module_versions_are_one_bounded_line() {
        assert_eq!(module_version("24.10-1.1.4\n"), "24.10-1.1.4");
        assert_eq!(module_version("  1.0.2.0-k \nsecond\n"), "1.0.2.0-k");
        assert_eq!(module_version(""), "");
        assert_eq!(module_version(&"é".repeat(200)).len(), MAX_VERSION_BYTES);
    }

    #[test]
    fn nccl_from_maps_lines() {
        let line = "7f3a1c000000-7f3a1e4f1000 r-xp 00000000 103:02 5377114                   \
            /usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5";
        assert_eq!(
            nccl_mapping(line),
            Some(NcclMapping {
                library: "libnccl.so.2.21.5".into(),
                version: Some("2.21.5".into()),
                source: "file_name"
            })
        );
        let wheel = "7f3a1c000000-7f3a1e4f1000 r--p 00000000 103:02 77 \
            /home/user/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2";
        assert_eq!(
            nccl_mapping(wheel),
            Some(NcclMapping { library: "libnccl.so.2".into(), version: None, source: "" })
        );
        let deleted =
            "7f3a1c000000-7f3a1e4f1000 r-xp 00000000 103:02 5377114 /opt/nccl/lib/libnccl.so.2.23.4 (deleted)";
        assert_eq!(nccl_mapping(deleted).and_then(|m| m.version), Some("2.23.4".into()));
        // Found by the fuzz target maps_nccl: a trailing dot is no version.
        let dotted = "7f3a1c000000-7f3a1e4f1000 r-xp 00000000 103:02 5 /opt/libnccl.so.2.21.";
        assert_eq!(nccl_mapping(dotted).map(|m| (m.library, m.version)), Some(("libnccl.so.2.21.".into(), None)));
        // Found by the fuzz target maps_nccl: a name longer than the bound has no version label
        // (it would be unbounded, and not the end of the truncated library label).
        let long = format!("7c00000   0  bin0u/libnccl.so.2.21.00{}", "2".repeat(130));
        let found = nccl_mapping(&long).map(|m| (m.library.len(), m.version));
        assert_eq!(found, Some((MAX_VERSION_BYTES, None)));
        let spaces = "7f3a1c000000-7f3a1e4f1000 r-xp 00000000 103:02 5 /opt/my nccl/libnccl.so.2.19.3";
        assert_eq!(nccl_mapping(spaces).and_then(|m| m.version), Some("2.19.3".into()));
        for other in [
            "7f3a1c000000-7f3a1e4f1000 r-xp 00000000 103:02 5 /usr/lib/libnccl-net.so",
            "7f3a1c000000-7f3a1e4f1000 r-xp 00000000 103:02 5 /usr/lib/libnccl_static.a",
            "7f3a1c000000-7f3a1e4f1000 rw-p 00000000 00:00 0 ",
            "7f3a1c000000-7f3a1e4f1000 rw-p 00000000 00:00 0                          [heap]",
            "garbage",
            "",
        ] {
            assert_eq!(nccl_mapping(other), None, "{other}");
        }
    }

    #[test]
    fn rdma_core_from_the_librarys_file_name() {
        assert_eq!(rdma_core_release("libibverbs.so.1.14.50.0"), Some("50.0".into()));
        assert_eq!(rdma_core_release("libibverbs.so.1.14.2410mlnx54.0"), Some("2410mlnx54.0".into()));
        assert_eq!(rdma_core_release("libibverbs.so.1.11.32.0 (deleted)"), Some("32.0".into()));
        assert_eq!(rdma_core_release("libibverbs.so.1.1.16.0"), Some("16.0".into()));
        for other in ["libibverbs.so.1", "libibverbs.so.1.14", "libibverbs.so.1.x.50.0", "libmlx5.so.1.24.50.0", ""] {
            assert_eq!(rdma_core_release(other), None, "{other}");
        }
        assert_eq!(rdma_core_release("libibverbs.so.1.14.50 0"), None, "no spaces in a version");
    }

    #[test]
    fn ofed_info_without_running_it() {
        let mlnx = "#!/bin/bash\nif [ \"$1\" == \"-s\" ]; then echo MLNX_OFED_LINUX-5.8-1.0.1.1:; exit; fi\n\
            if [ \"X$1\" == \"X-n\" ]; then echo 5.8-1.0.1.1; exit 0; fi\ncat << EOF\n\
            MLNX_OFED_LINUX-5.8-1.0.1.1 (OFED-5.8-1.0.1):\n\nar_mgr:\nEOF\n";
        assert_eq!(ofed_info_version(mlnx), Some("MLNX_OFED_LINUX-5.8-1.0.1.1".into()));
        let doca = "#!/bin/bash\nif [ \"X$1\" == \"X-s\" ]; then echo OFED-internal-24.01-0.3.3:; exit 0; fi\n";
        assert_eq!(ofed_info_version(doca), Some("OFED-internal-24.01-0.3.3".into()));
        let listing_only = "cat << EOF\nMLNX_OFED_LINUX-4.5-1.0.1.0 (OFED-4.5-1.0.1):\n\nar_mgr:\n";
        assert_eq!(ofed_info_version(listing_only), Some("MLNX_OFED_LINUX-4.5-1.0.1.0".into()));
        assert_eq!(ofed_info_version(""), None);
        assert_eq!(ofed_info_version("#!/bin/sh\nexec something\n"), None);
        assert_eq!(ofed_info_version(&"x".repeat(100_000)), None);
    }

    #[test]
    fn ld_cache_lists_the_soname_in_its_order() {
        let mut cache = b"glibc-ld.so.cache1.1\0\0\x01\x02libibverbs.so.1\0".to_vec();
        cache.extend_from_slice(b"/opt/mellanox/lib/libibverbs.so.1\0/usr/lib/x86_64-linux-gnu/libibverbs.so.1\0");
        cache.extend_from_slice(b"/usr/lib/x86_64-linux-gnu/libibverbs.so.1\0/usr/lib/libibverbs.so.10\0\xff\xfe");
        assert_eq!(
            ld_cache_paths(&cache, "libibverbs.so.1"),
            vec![
                "/opt/mellanox/lib/libibverbs.so.1".to_owned(),
                "/usr/lib/x86_64-linux-gnu/libibverbs.so.1".to_owned()
            ]
        );
        assert!(ld_cache_paths(b"", "libibverbs.so.1").is_empty());
        assert!(ld_cache_paths(&[0xff; 10_000], "libibverbs.so.1").is_empty());
    }
}
