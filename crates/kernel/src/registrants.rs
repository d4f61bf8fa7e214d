//! The libraries other than NCCL that register memory with an RDMA device, found in a process's
//! `/proc/PID/maps` as [`super::versions::nccl_mapping`] finds NCCL. A process that maps one of
//! them is taken as an RDMA registrant: the memlock floor of the alert rules applies to it, while
//! a process that pins memory without any (an io_uring user with fixed buffers) is left alone.
//!
//! Every one of them registers through libibverbs: UCX's IB memory domain, with its registration
//! cache (openucx/ucx src/uct/ib/base/ib_md.c), libfabric's verbs and efa providers
//! (ofiwg/libfabric prov/verbs/src/fi_verbs.c, prov/efa), the MPIs through UCX or libfabric, and
//! NVSHMEM's and cuFile's RDMA transports. NCCL itself dlopens libibverbs at run time
//! (NVIDIA/nccl src/misc/ibvsymbols.cc), so a process that has registered through it maps
//! libibverbs; the family's own library says which stack registers.

use super::versions::module_version;

/// One registrant library mapped by a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaLibrary {
    /// The family, one of [`FAMILIES`].
    pub library: &'static str,
    /// The file name as mapped (`libucp.so.0.0.0`), bounded as a version label is.
    pub file: String,
}

/// The families, in the order they are exported.
pub const FAMILIES: [&str; 10] =
    ["libibverbs", "libmlx5", "libefa", "ucx", "libfabric", "openmpi", "mpich", "mvapich", "nvshmem", "cufile"];

/// The family of a mapped file, from its file name (and, to tell MVAPICH from MPICH, which both
/// install `libmpi.so.12`, its directory).
fn family(path: &str, name: &str) -> Option<&'static str> {
    let so = |prefix: &str| {
        name.strip_prefix(prefix).is_some_and(|rest| rest.starts_with(".so") || rest.starts_with("-rdmav"))
    };
    // rdma-core's providers are `libmlx5.so.1` (direct verbs) or, loaded by libibverbs from its
    // driver directory, `libmlx5-rdmav34.so` (rdma-core buildlib/rdma_functions.cmake
    // `rdma_shared_provider`, `rdma_provider`).
    if so("libibverbs") {
        return Some("libibverbs");
    }
    if so("libmlx5") {
        return Some("libmlx5");
    }
    if so("libefa") {
        return Some("libefa");
    }
    // UCX: ucp registers (ucp_mem_map); uct is its transport layer (uct_ib in libuct_ib.so).
    if so("libucp") || so("libuct") || so("libuct_ib") {
        return Some("ucx");
    }
    if so("libfabric") {
        return Some("libfabric");
    }
    // Open MPI's runtime (libopen-pal) exists in no other MPI; libmpi.so.40 is its MPI ABI.
    if so("libopen-pal") || name.starts_with("libmpi.so.40") {
        return Some("openmpi");
    }
    // MPICH's ABI (libmpi.so.12) is shared by its derivatives; MVAPICH installs it under its own
    // prefix (/opt/mvapich2/..., spack's mvapich2-...).
    if so("libmpich") || name.starts_with("libmpi.so.12") {
        return Some(if path.to_ascii_lowercase().contains("mvapich") { "mvapich" } else { "mpich" });
    }
    if so("libnvshmem") || so("libnvshmem_host") {
        return Some("nvshmem");
    }
    if so("libcufile") || so("libcufile_rdma") {
        return Some("cufile");
    }
    None
}

/// The registrant library one line of `/proc/PID/maps` maps, if any (line format as in
/// [`super::versions::nccl_mapping`]: fs/proc/task_mmu.c `show_map_vma`).
pub fn rdma_library(line: &str) -> Option<RdmaLibrary> {
    // Most lines of a rank's thousands are none of these: one cheap test decides.
    if !line.contains("/lib") {
        return None;
    }
    let mut fields = line.splitn(6, |c: char| c.is_ascii_whitespace());
    for _ in 0..5 {
        fields.next()?;
    }
    let path = fields.next()?.trim();
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    // A file mapping's path is absolute; anything else ([heap], a field split by other
    // whitespace) names no library.
    if !path.starts_with('/') {
        return None;
    }
    let name = path.rsplit('/').next()?;
    let library = family(path, name)?;
    Some(RdmaLibrary { library, file: module_version(name) })
}

/// Adds `found` to `libraries` unless its family is there already (the first file of a family
/// names it), keeping [`FAMILIES`] order.
pub fn add(libraries: &mut Vec<RdmaLibrary>, found: RdmaLibrary) {
    if libraries.iter().any(|l| l.library == found.library) {
        return;
    }
    let rank = |l: &str| FAMILIES.iter().position(|f| *f == l).unwrap_or(FAMILIES.len());
    let at = libraries.iter().position(|l| rank(l.library) > rank(found.library)).unwrap_or(libraries.len());
    libraries.insert(at, found);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(path: &str) -> String {
        format!("7f3a1c000000-7f3a1e4f1000 r-xp 00000000 103:02 5377114                   {path}")
    }

    fn found(path: &str) -> Option<(&'static str, String)> {
        rdma_library(&line(path)).map(|l| (l.library, l.file))
    }

    #[test]
    fn each_family_from_real_install_paths() {
        let cases = [
            ("/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.50.0", "libibverbs", "libibverbs.so.1.14.50.0"),
            ("/usr/lib/x86_64-linux-gnu/libibverbs/libmlx5-rdmav34.so", "libmlx5", "libmlx5-rdmav34.so"),
            ("/usr/lib/x86_64-linux-gnu/libmlx5.so.1.24.50.0", "libmlx5", "libmlx5.so.1.24.50.0"),
            ("/usr/lib64/libibverbs/libefa-rdmav34.so", "libefa", "libefa-rdmav34.so"),
            ("/opt/hpcx/ucx/lib/libucp.so.0.0.0", "ucx", "libucp.so.0.0.0"),
            ("/opt/hpcx/ucx/lib/ucx/libuct_ib.so.0.0.0", "ucx", "libuct_ib.so.0.0.0"),
            ("/opt/amazon/efa/lib/libfabric.so.1.24.0", "libfabric", "libfabric.so.1.24.0"),
            ("/usr/lib/x86_64-linux-gnu/openmpi/lib/libopen-pal.so.40.30.2", "openmpi", "libopen-pal.so.40.30.2"),
            ("/usr/lib/x86_64-linux-gnu/libmpi.so.40.30.2", "openmpi", "libmpi.so.40.30.2"),
            ("/usr/lib/x86_64-linux-gnu/libmpich.so.12.3.0", "mpich", "libmpich.so.12.3.0"),
            ("/opt/mvapich2/gdr/2.3.7/lib64/libmpi.so.12.1.1", "mvapich", "libmpi.so.12.1.1"),
            ("/usr/lib/x86_64-linux-gnu/nvshmem/12/libnvshmem_host.so.3.2.5", "nvshmem", "libnvshmem_host.so.3.2.5"),
            ("/usr/local/cuda-12.8/targets/x86_64-linux/lib/libcufile.so.1.13.0", "cufile", "libcufile.so.1.13.0"),
            ("/usr/local/cuda/lib64/libcufile_rdma.so.1 (deleted)", "cufile", "libcufile_rdma.so.1"),
        ];
        for (path, library, file) in cases {
            assert_eq!(found(path), Some((library, file.to_owned())), "{path}");
        }
    }

    #[test]
    fn look_alikes_and_other_lines_are_not_registrants() {
        for other in [
            // io_uring's user: liburing, and nothing of RDMA.
            "/usr/lib/x86_64-linux-gnu/liburing.so.2.3",
            "/usr/lib/x86_64-linux-gnu/libucs_signal.so.0",
            "/usr/lib/x86_64-linux-gnu/libmpi_cxx.so.40",
            "/usr/lib/x86_64-linux-gnu/libefacompat.so",
            "/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5",
            "[heap]",
            "",
        ] {
            assert_eq!(found(other), None, "{other}");
        }
        assert_eq!(rdma_library("garbage"), None);
        assert_eq!(rdma_library(""), None);
        let long = format!("7c00000 r-xp 0 0:0 0 /lib/libfabric.so.1{}", "1".repeat(300));
        assert_eq!(rdma_library(&long).map(|l| l.file.len()), Some(super::super::versions::MAX_VERSION_BYTES));
    }

    #[test]
    fn one_entry_per_family_in_family_order() {
        let mut libraries = Vec::new();
        for path in [
            "/opt/hpcx/ucx/lib/libucp.so.0.0.0",
            "/usr/lib/libibverbs.so.1",
            "/opt/hpcx/ucx/lib/libuct.so.0.0.0",
            "/usr/lib/libibverbs/libmlx5-rdmav34.so",
        ] {
            if let Some(found) = rdma_library(&line(path)) {
                add(&mut libraries, found);
            }
        }
        let names: Vec<_> = libraries.iter().map(|l| (l.library, l.file.as_str())).collect();
        assert_eq!(
            names,
            [("libibverbs", "libibverbs.so.1"), ("libmlx5", "libmlx5-rdmav34.so"), ("ucx", "libucp.so.0.0.0")]
        );
    }
}
