//! GPUDirect RDMA: which of NCCL's three charging modes a node is in, read from sysfs.

use std::path::Path;

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
pub const PEERMEM_FILES: [&str; 3] = [
    "kernel/mm/memory_peers/nv_mem/version",
    "kernel/mm/memory_peers/nv_mem_nc/version",
    "module/nvidia_peermem/version",
];

/// The mode NCCL would run in on the node whose sysfs is mounted at `sysfs`, as far as sysfs
/// tells: a peer-memory client loaded (NCCL's own test) means GPU buffers may be registered
/// through it, charged like host memory; without one, GPUDirect is taken as off, every buffer on
/// the host. Whether NCCL uses dma-buf instead (it prefers dma-buf when the CUDA driver and the
/// kernel support it, net.cc useDmaBuf) cannot be read from sysfs, and dma-buf charges less, so
/// it is never the detected mode: pass `--gdr dmabuf` for it.
pub fn detect(sysfs: &Path) -> Detected {
    match PEERMEM_FILES.iter().map(|rel| sysfs.join(rel)).find(|path| path.exists()) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_of_nccls_peermem_files_means_peermem() {
        let root = std::env::temp_dir().join(format!("memlock-gdr-{}", std::process::id()));
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
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn modes_round_trip() {
        for mode in [GdrMode::Off, GdrMode::Dmabuf, GdrMode::Peermem] {
            assert_eq!(GdrMode::parse(mode.as_str()), Some(mode));
        }
        assert_eq!(GdrMode::parse("read"), None);
    }
}
