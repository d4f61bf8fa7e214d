//! The software baseline every RDMA troubleshooting checklist asks for: the kernel release, the
//! NVIDIA driver, the versions of the modules that take part in a memory registration, and the
//! GPUDirect charging mode NCCL would use ([`crate::gdr::detect`], the detection `check` and
//! `estimate` use). One info series, so "the same code fails on another machine" is one query:
//! `count by (nvidia_driver) (memlock_node_software_info)`.
//!
//! Versions change at reboot or module reload: the default interval is slow (30s). Every file is
//! optional; an absent component is an empty label.

use std::sync::Arc;

use crate::exposition::{Exposition, Kind};
use crate::gdr;
use memlock_kernel::fsroot::{self, Roots, SourceError};
use memlock_kernel::versions;

use super::{optional, Collector, Data};

/// The modules whose versions are exported, each as the label of its name: the NVIDIA driver
/// and its peer-memory clients (nvidia_peermem since R470, nv_peer_mem from Mellanox before it),
/// the verbs core and user-space access, and the RDMA drivers (mlx5, EFA, Broadcom, Intel).
/// MLNX_OFED/DOCA-OFED modules carry a version; in-tree ones carry none (their version is the
/// kernel's): a loaded module without a version file is `unversioned`.
pub(crate) const MODULES: [&str; 11] = [
    "nvidia",
    "nvidia_peermem",
    "nv_peer_mem",
    "ib_core",
    "ib_uverbs",
    "mlx5_core",
    "mlx5_ib",
    "efa",
    "bnxt_re",
    "irdma",
    "mlx_compat",
];

/// What a loaded module without a `version` file (an in-tree driver) is labelled.
pub(crate) const UNVERSIONED: &str = "unversioned";

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SoftwareStats {
    /// `/proc/sys/kernel/osrelease`.
    pub kernel: String,
    pub nvidia_driver: String,
    /// `open` or `proprietary` kernel modules; empty without the driver.
    pub(crate) nvidia_kernel_module: String,
    /// By [`MODULES`] order: the version, [`UNVERSIONED`], or empty when not loaded.
    pub modules: Vec<(&'static str, String)>,
    pub gdr_mode: &'static str,
}

pub struct SoftwareCollector {
    roots: Roots,
}

impl SoftwareCollector {
    pub fn new(roots: Roots) -> Self {
        Self { roots }
    }

    fn optional_text(path: &std::path::Path, errors: &mut Vec<SourceError>) -> Option<String> {
        match optional(fsroot::read_string(path)) {
            Ok(text) => text,
            Err(e) => {
                errors.push(e);
                None
            }
        }
    }

    pub fn read(&self, errors: &mut Vec<SourceError>) -> SoftwareStats {
        let kernel = Self::optional_text(&self.roots.proc("sys/kernel/osrelease"), errors)
            .map(|t| versions::module_version(&t))
            .unwrap_or_default();
        // The driver's procfs directory exists only while nvidia.ko is loaded.
        let driver = Self::optional_text(&self.roots.proc("driver/nvidia/version"), errors)
            .and_then(|t| versions::nvidia_driver(&t));
        let modules = MODULES
            .iter()
            .map(|&name| {
                let dir = self.roots.sys(format!("module/{name}"));
                let version = match Self::optional_text(&dir.join("version"), errors) {
                    Some(text) => versions::module_version(&text),
                    None if dir.is_dir() => UNVERSIONED.to_owned(),
                    None => String::new(),
                };
                (name, version)
            })
            .collect();
        SoftwareStats {
            kernel,
            nvidia_kernel_module: match &driver {
                Some(d) if d.open => "open".into(),
                Some(_) => "proprietary".into(),
                None => String::new(),
            },
            nvidia_driver: driver.map(|d| d.version).unwrap_or_default(),
            modules,
            gdr_mode: gdr::detect(&self.roots.sysfs).mode.as_str(),
        }
    }
}

impl Collector for SoftwareCollector {
    fn name(&self) -> &'static str {
        "software"
    }

    fn collect(&mut self, errors: &mut Vec<SourceError>) -> Option<Data> {
        Some(Arc::new(self.read(errors)) as Data)
    }
}

impl SoftwareStats {
    pub fn render(&self, out: &mut Exposition) {
        out.family(
            "memlock_node_software_info",
            "Always 1; labels give the kernel, NVIDIA driver and RDMA module versions.",
            Kind::Gauge,
        );
        let mut labels: Vec<(&str, &str)> = vec![
            ("kernel", &self.kernel),
            ("nvidia_driver", &self.nvidia_driver),
            ("nvidia_kernel_module", &self.nvidia_kernel_module),
        ];
        labels.extend(self.modules.iter().map(|(name, version)| (*name, version.as_str())));
        labels.push(("gdr_mode", self.gdr_mode));
        out.sample(&labels, 1u64);
    }
}

impl super::Stats for SoftwareStats {
    fn render(&self, out: &mut Exposition, _grants: &crate::budget::Grants) {
        SoftwareStats::render(self, out)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// This collector's entry in the registry ([`crate::collect::REGISTRY`]): its name, flags,
/// default interval and settings.
pub(crate) const REGISTRATION: super::Registration = super::Registration {
    name: "software",
    reads: "kernel, NVIDIA driver and RDMA module versions, GPUDirect mode",
    default_interval: "30s",
    default_enabled: true,
    settings: &super::settings::Plain(|cx| Box::new(SoftwareCollector::new(cx.roots.clone()))),
};

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn fixture_roots() -> Roots {
        let base = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
        Roots { procfs: base.join("proc"), sysfs: base.join("sys") }
    }

    fn module<'a>(stats: &'a SoftwareStats, name: &str) -> &'a str {
        stats.modules.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str()).unwrap()
    }

    #[test]
    fn the_fixture_node() {
        let mut errors = Vec::new();
        let stats = SoftwareCollector::new(fixture_roots()).read(&mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(stats.kernel, "5.15.0-1063-nvidia");
        assert_eq!((stats.nvidia_driver.as_str(), stats.nvidia_kernel_module.as_str()), ("570.86.15", "open"));
        assert_eq!(module(&stats, "nvidia"), "570.86.15");
        assert_eq!(module(&stats, "nvidia_peermem"), "570.86.15");
        assert_eq!(module(&stats, "mlx5_core"), "24.10-1.1.4");
        assert_eq!(module(&stats, "ib_uverbs"), UNVERSIONED, "loaded, no version file");
        assert_eq!(module(&stats, "nv_peer_mem"), "", "not loaded");
        assert_eq!(stats.gdr_mode, "peermem", "nvidia_peermem's version file is NCCL's test");
        let mut out = Exposition::new();
        stats.render(&mut out);
        let text = out.finish();
        assert_eq!(text.lines().filter(|l| !l.starts_with('#')).count(), 1, "{text}");
        assert!(text.contains("kernel=\"5.15.0-1063-nvidia\",nvidia_driver=\"570.86.15\""), "{text}");
        assert!(text.contains("nv_peer_mem=\"\"") && text.ends_with("gdr_mode=\"peermem\"} 1\n"), "{text}");
    }

    #[test]
    fn nothing_installed_is_empty_labels_not_errors() {
        let tmp = tempfile::Builder::new().prefix("memlock-software-").tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let roots = Roots { procfs: root.join("proc"), sysfs: root.join("sys") };
        let mut errors = Vec::new();
        let stats = SoftwareCollector::new(roots.clone()).read(&mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(stats.kernel, "");
        assert!(stats.modules.iter().all(|(_, v)| v.is_empty()));
        assert_eq!(stats.gdr_mode, "off");
        // A version file that cannot be read (a directory in its place) is an error, not a crash.
        std::fs::create_dir_all(root.join("sys/module/mlx5_core/version")).unwrap();
        std::fs::create_dir_all(root.join("proc/driver/nvidia")).unwrap();
        std::fs::write(root.join("proc/driver/nvidia/version"), "garbage\n").unwrap();
        let stats = SoftwareCollector::new(roots).read(&mut errors);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!((module(&stats, "mlx5_core"), stats.nvidia_driver.as_str()), (UNVERSIONED, ""));
    }
}
