//! GPUDirect RDMA: which of NCCL's three charging modes a node is in, read from sysfs.

use std::path::{Path, PathBuf};

use memlock_kernel::fsroot::Roots;
use memlock_kernel::versions::{self, NvidiaDriver};

use serde::Serialize;

/// How NCCL's GPU-resident buffers are registered, and so whether they count against the memlock
/// limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GdrMode {
    /// No GPUDirect: every buffer is host memory, registered with ibv_reg_mr and charged.
    Off,
    /// GPU buffers registered as dma-buf (ibv_reg_dmabuf_mr): not charged to VmPin
    /// (drivers/infiniband/core/umem_dmabuf.c).
    Dmabuf,
    /// GPU buffers registered with ibv_reg_mr through nvidia-peermem (MLNX_OFED/DOCA ib_core's
    /// peer-memory patch): charged to pinned_vm and checked against RLIMIT_MEMLOCK like host
    /// memory, though they take no host memory.
    Peermem,
}

impl GdrMode {
    pub fn as_str(self) -> &'static str {
        match self {
            GdrMode::Off => "off",
            GdrMode::Dmabuf => "dmabuf",
            GdrMode::Peermem => "peermem",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "off" => Some(GdrMode::Off),
            "dmabuf" => Some(GdrMode::Dmabuf),
            "peermem" => Some(GdrMode::Peermem),
            _ => None,
        }
    }
}

/// A mode and why it was chosen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Detected {
    pub mode: GdrMode,
    /// True when it came from the node, false when a flag set it.
    pub detected: bool,
    pub why: String,
}

/// The files NCCL tests to decide that a peer-memory client is loaded (ncclIbGdrSupport in
/// src/transport/net_ib/gdr.cc), relative to the sysfs root.
pub(crate) const PEERMEM_FILES: [&str; 3] = [
    "kernel/mm/memory_peers/nv_mem/version",
    "kernel/mm/memory_peers/nv_mem_nc/version",
    "module/nvidia_peermem/version",
];

/// The mode as far as sysfs alone tells (the daemon's `gdr_mode` label): a peer-memory client
/// loaded means GPU buffers may be registered through it, charged like host memory; without one,
/// GPUDirect is taken as off. Whether NCCL prefers dma-buf needs the kernel release and the GPU
/// driver besides: [`decide`] over [`read_facts`] is what `check` and `estimate` take.
pub(crate) fn detect(sysfs: &Path) -> Detected {
    match peermem_file(sysfs) {
        Some(path) => Detected {
            mode: GdrMode::Peermem,
            detected: true,
            why: format!(
                "{} exists: a peer-memory client is loaded, so GPU buffers may be registered through it and are \
                    charged to VmPin (pass --gdr dmabuf if NCCL registers them as dma-buf)",
                path.display()
            ),
        },
        None => Detected {
            mode: GdrMode::Off,
            detected: true,
            why: format!(
                "no peer-memory client under {} (nvidia_peermem, nv_mem): GPUDirect taken as off, every buffer in host \
                    memory (pass --gdr dmabuf if NCCL uses dma-buf on this node)",
                sysfs.display()
            ),
        },
    }
}

fn peermem_file(sysfs: &Path) -> Option<PathBuf> {
    PEERMEM_FILES.iter().map(|rel| sysfs.join(rel)).find(|path| path.exists())
}

/// What decides NCCL's GPUDirect mode on a node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// /proc/sys/kernel/osrelease.
    pub(crate) kernel_release: Option<String>,
    /// /proc/driver/nvidia/version; `None` when no NVIDIA driver is loaded.
    pub driver: Option<NvidiaDriver>,
    /// The RDMA devices NCCL would use and their kernel driver (the `device/driver` link), if known.
    pub nics: Vec<(String, Option<String>)>,
    /// The peer-memory file NCCL found (net_ib/gdr.cc ibGdrSupportInitOnce).
    pub peermem: Option<PathBuf>,
    /// NCCL_DMABUF_ENABLE as NCCL reads it (strtoll); `None` when unset (default 1).
    pub(crate) dmabuf_enable: Option<i64>,
}

/// Reads the facts of the node mounted at `roots` for the RDMA devices given.
pub fn read_facts(roots: &Roots, devices: &[String], dmabuf_enable: Option<i64>) -> Facts {
    let text = |path: PathBuf| {
        memlock_kernel::fsroot::read_bytes(&path).ok().map(|b| String::from_utf8_lossy(&b).into_owned())
    };
    let nics = devices
        .iter()
        .map(|name| {
            let link = roots.sys(format!("class/infiniband/{name}/device/driver"));
            let driver = std::fs::read_link(link).ok().and_then(|t| t.file_name().map(|f| f.to_string_lossy().into()));
            (name.clone(), driver)
        })
        .collect();
    Facts {
        kernel_release: text(roots.proc("sys/kernel/osrelease")).map(|t| t.trim().to_owned()),
        driver: text(roots.proc("driver/nvidia/version")).and_then(|t| versions::nvidia_driver(&t)),
        nics,
        peermem: peermem_file(&roots.sysfs),
        dmabuf_enable,
    }
}

/// Major and minor of a kernel release (`6.1.0-18-amd64` is (6, 1)).
fn kernel_version(release: &str) -> Option<(u64, u64)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Whether an RDMA device's kernel driver registers dma-buf memory: the drivers that implement
/// ib_device_ops.reg_user_mr_dmabuf in Linux 6.1 (drivers/infiniband/hw/mlx5/main.c, hw/efa/
/// efa_main.c); for the others the uverbs call fails with EOPNOTSUPP
/// (core/uverbs_std_types_mr.c), which is NCCL's test (net_ib/gdr.cc ibDmaBufSupportInitOnce).
fn provider_has_dmabuf(name: &str, driver: Option<&str>) -> bool {
    match driver {
        Some(d) => d.starts_with("mlx5") || d == "efa",
        None => name.starts_with("mlx5_") || name.starts_with("efa"),
    }
}

/// The mode NCCL picks, and why. NCCL registers GPU buffers as dma-buf whenever it can, peer-memory
/// client or not: `useDmaBuf = useGdr && dmaBufSupport && (ptrSupport & NCCL_PTR_DMABUF)`
/// (src/transport/net.cc sendProxySetup/recvProxySetup), with comm->dmaBufSupport from
/// NCCL_DMABUF_ENABLE (default 1), CUDA 11.7 and CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED (src/init.cc
/// dmaBufSupported), and NCCL_PTR_DMABUF when the NIC accepts ibv_reg_dmabuf_mr
/// (net_ib/init.cc ncclIbGetPhysProperties, net_ib/gdr.cc ncclIbDmaBufSupport). Only without it is
/// a peer-memory client used (NCCL_PTR_CUDA, ncclIbGdrSupport). The GPU supports dma-buf with
/// NVIDIA's open kernel modules (R515 and later), not with the proprietary ones; the kernel from
/// Linux 5.12 (drivers/infiniband/core/umem_dmabuf.c).
pub fn decide(f: &Facts) -> Detected {
    let mut no_dmabuf: Vec<String> = Vec::new();
    if let Some(v) = f.dmabuf_enable.filter(|v| *v == 0) {
        no_dmabuf.push(format!("NCCL_DMABUF_ENABLE={v} (src/init.cc dmaBufSupported)"));
    }
    match f.kernel_release.as_deref().map(|r| (r, kernel_version(r))) {
        Some((_, Some(v))) if v >= (5, 12) => {}
        Some((r, Some(_))) => {
            no_dmabuf.push(format!("kernel {r} is older than 5.12, which added RDMA dma-buf (core/umem_dmabuf.c)"))
        }
        Some((r, None)) => no_dmabuf.push(format!("kernel release {r:?} not understood")),
        None => no_dmabuf.push("kernel release unreadable (/proc/sys/kernel/osrelease)".into()),
    }
    match &f.driver {
        Some(d) if d.open => {}
        Some(d) => no_dmabuf.push(format!(
            "the proprietary NVIDIA kernel modules {} (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED needs the open ones)",
            d.version
        )),
        None => no_dmabuf.push("no NVIDIA driver loaded (/proc/driver/nvidia/version)".into()),
    }
    let without: Vec<&str> =
        f.nics.iter().filter(|(n, d)| !provider_has_dmabuf(n, d.as_deref())).map(|(n, _)| n.as_str()).collect();
    if f.nics.is_empty() {
        no_dmabuf.push("no RDMA device to register on".into());
    } else if !without.is_empty() {
        no_dmabuf.push(format!(
            "{} without dma-buf registration in its kernel driver (mlx5 and efa have it)",
            without.join(", ")
        ));
    }
    if no_dmabuf.is_empty() {
        let driver = f.driver.as_ref().map_or(String::new(), |d| d.version.clone());
        let peermem = match &f.peermem {
            Some(p) => format!("; {} exists, but NCCL prefers dma-buf", p.display()),
            None => String::new(),
        };
        return Detected {
            mode: GdrMode::Dmabuf,
            detected: true,
            why: format!(
                "dma-buf: kernel {}, NVIDIA open kernel modules {driver}, {} with dma-buf registration, \
                    NCCL_DMABUF_ENABLE not 0{peermem} (pass --gdr to override)",
                f.kernel_release.as_deref().unwrap_or(""),
                f.nics.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
            ),
        };
    }
    let reasons = no_dmabuf.join("; ");
    match &f.peermem {
        Some(p) => Detected {
            mode: GdrMode::Peermem,
            detected: true,
            why: format!(
                "nvidia-peermem: dma-buf cannot be used ({reasons}) and {} exists, so GPU buffers are registered \
                    through the peer-memory client and charged to VmPin (pass --gdr to override)",
                p.display()
            ),
        },
        None => Detected {
            mode: GdrMode::Off,
            detected: true,
            why: format!(
                "off: dma-buf cannot be used ({reasons}) and no peer-memory client is loaded (nvidia_peermem, \
                    nv_mem), so every buffer is in host memory (pass --gdr to override)"
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_of_nccls_peermem_files_means_peermem() {
        let tmp = tempfile::Builder::new().prefix("memlock-gdr-").tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        assert_eq!(detect(&root).mode, GdrMode::Off);
        assert!(detect(&root).why.contains("GPUDirect taken as off"));
        for rel in PEERMEM_FILES {
            let path = root.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, "1.0\n").unwrap();
            let d = detect(&root);
            assert_eq!(d.mode, GdrMode::Peermem, "{rel}");
            assert!(d.why.starts_with(&format!("{} exists", path.display())), "{}", d.why);
            std::fs::remove_file(&path).unwrap();
        }
        // A module directory without its version file is not loaded as far as NCCL is concerned.
        std::fs::create_dir_all(root.join("module/nvidia_peermem")).unwrap();
        assert_eq!(detect(&root).mode, GdrMode::Off);
    }

    fn open(version: &str) -> Option<NvidiaDriver> {
        Some(NvidiaDriver { version: version.into(), open: true })
    }

    fn h100_node() -> Facts {
        Facts {
            kernel_release: Some("6.1.0-18-amd64".into()),
            driver: open("570.86.15"),
            nics: (0..8).map(|k| (format!("mlx5_{k}"), Some("mlx5_core".into()))).collect(),
            peermem: None,
            dmabuf_enable: None,
        }
    }

    #[test]
    fn dmabuf_wins_whenever_gpu_driver_kernel_and_nic_allow_it() {
        let d = decide(&h100_node());
        assert_eq!(d.mode, GdrMode::Dmabuf, "{}", d.why);
        // nvidia-peermem loaded changes nothing: NCCL prefers dma-buf (net.cc useDmaBuf).
        let mut f = h100_node();
        f.peermem = Some(PathBuf::from("/sys/module/nvidia_peermem/version"));
        let d = decide(&f);
        assert_eq!(d.mode, GdrMode::Dmabuf);
        assert!(d.why.contains("nvidia_peermem/version exists, but NCCL prefers dma-buf"), "{}", d.why);
        // Each reason dma-buf cannot be used, with peermem to fall back on.
        type Change = fn(&mut Facts);
        let cases: [(&str, Change); 6] = [
            ("NCCL_DMABUF_ENABLE=0", |f| f.dmabuf_enable = Some(0)),
            ("older than 5.12", |f| f.kernel_release = Some("5.4.0-150-generic".into())),
            ("proprietary NVIDIA kernel modules 535.54.03", |f| {
                f.driver = Some(NvidiaDriver { version: "535.54.03".into(), open: false })
            }),
            ("no NVIDIA driver loaded", |f| f.driver = None),
            ("bnxt_re0 without dma-buf registration", |f| f.nics.push(("bnxt_re0".into(), Some("bnxt_re".into())))),
            ("no RDMA device", |f| f.nics.clear()),
        ];
        for (reason, change) in cases {
            let mut f = h100_node();
            f.peermem = Some(PathBuf::from("/sys/module/nvidia_peermem/version"));
            change(&mut f);
            let d = decide(&f);
            assert_eq!(d.mode, GdrMode::Peermem, "{reason}");
            assert!(d.why.contains(reason), "{reason}: {}", d.why);
            f.peermem = None;
            let d = decide(&f);
            assert_eq!(d.mode, GdrMode::Off, "{reason}");
            assert!(d.why.contains(reason) && d.why.starts_with("off:"), "{reason}: {}", d.why);
        }
        // NCCL_DMABUF_ENABLE=1 (or any other non-zero value) is the default.
        let mut f = h100_node();
        f.dmabuf_enable = Some(2);
        assert_eq!(decide(&f).mode, GdrMode::Dmabuf);
        // The 5.12 boundary and an efa device.
        f.kernel_release = Some("5.12.0".into());
        f.nics = vec![("efa_0".into(), None)];
        assert_eq!(decide(&f).mode, GdrMode::Dmabuf);
        f.kernel_release = Some("5.11.22".into());
        assert_eq!(decide(&f).mode, GdrMode::Off);
    }

    #[test]
    fn facts_come_from_procfs_and_sysfs() {
        let tmp = tempfile::Builder::new().prefix("memlock-gdr-facts-").tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let roots = Roots { procfs: root.join("proc"), sysfs: root.join("sys") };
        std::fs::create_dir_all(roots.proc("sys/kernel")).unwrap();
        std::fs::create_dir_all(roots.proc("driver/nvidia")).unwrap();
        std::fs::write(roots.proc("sys/kernel/osrelease"), "6.1.0-18-amd64\n").unwrap();
        std::fs::write(
            roots.proc("driver/nvidia/version"),
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  (dvs-builder@U16)  \
                Thu Jan 16 2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n",
        )
        .unwrap();
        std::fs::create_dir_all(roots.sys("bus/pci/drivers/mlx5_core")).unwrap();
        std::fs::create_dir_all(roots.sys("class/infiniband/mlx5_0/device")).unwrap();
        std::os::unix::fs::symlink(
            roots.sys("bus/pci/drivers/mlx5_core"),
            roots.sys("class/infiniband/mlx5_0/device/driver"),
        )
        .unwrap();
        std::fs::create_dir_all(roots.sys("module/nvidia_peermem")).unwrap();
        std::fs::write(roots.sys("module/nvidia_peermem/version"), "570.86.15\n").unwrap();
        let f = read_facts(&roots, &["mlx5_0".into()], None);
        assert_eq!(f.kernel_release.as_deref(), Some("6.1.0-18-amd64"));
        assert_eq!(f.driver, open("570.86.15"));
        assert_eq!(f.nics, vec![("mlx5_0".to_owned(), Some("mlx5_core".to_owned()))]);
        assert_eq!(f.peermem, Some(roots.sys("module/nvidia_peermem/version")));
        assert_eq!(decide(&f).mode, GdrMode::Dmabuf);
    }

    #[test]
    fn modes_round_trip() {
        for mode in [GdrMode::Off, GdrMode::Dmabuf, GdrMode::Peermem] {
            assert_eq!(GdrMode::parse(mode.as_str()), Some(mode));
        }
        assert_eq!(GdrMode::parse("read"), None);
    }
}
