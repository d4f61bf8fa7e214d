//! Which cgroup layout the host has (v1, v2, hybrid, none) and where the memory and rdma
//! hierarchies are mounted.

use std::path::{Path, PathBuf};

use memlock_kernel::fsroot::{self, SourceError};
use memlock_kernel::proc_cgroups;

/// How the cgroup filesystem is mounted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// cgroup2 at the top (`cgroup.controllers` in `/sys/fs/cgroup`).
    V2,
    /// One directory per v1 hierarchy (`memory`, `rdma`, ...), no unified tree.
    V1,
    /// v1 hierarchies plus a v2 tree at `unified` (systemd's hybrid mode).
    Hybrid,
    /// No cgroup filesystem under the sysfs root (for example a container without it).
    None,
}

impl Layout {
    pub fn as_str(self) -> &'static str {
        match self {
            Layout::V2 => "v2",
            Layout::V1 => "v1",
            Layout::Hybrid => "hybrid",
            Layout::None => "none",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// Where a controller's hierarchy is mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub root: PathBuf,
    pub version: Version,
}

/// The layout and the hierarchies that hold the memory and rdma controllers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detected {
    pub layout: Layout,
    pub memory: Option<Mount>,
    pub rdma: Option<Mount>,
    /// `/proc/cgroups` says the memory controller was disabled at boot (`cgroup_disable=memory`).
    pub(crate) memory_disabled: bool,
}

/// Finds the layout below `cgroup_fs` (`<sysfs>/fs/cgroup`). A missing directory is the
/// `None` layout, not an error.
pub(crate) fn detect(cgroup_fs: &Path, proc_cgroups_file: &Path, errors: &mut Vec<SourceError>) -> Detected {
    let mut found = Detected { layout: Layout::None, memory: None, rdma: None, memory_disabled: false };
    let names = match fsroot::list_dir(cgroup_fs) {
        Ok(names) => names,
        Err(e) => {
            if !vanished(&e) {
                errors.push(e);
            }
            return found;
        }
    };
    let has = |name: &str| names.binary_search_by(|n| n.as_str().cmp(name)).is_ok();
    let controllers_of = |dir: &Path, errors: &mut Vec<SourceError>| -> Option<Vec<String>> {
        match fsroot::read_string(&dir.join("cgroup.controllers")) {
            Ok(text) => Some(text.split_ascii_whitespace().map(str::to_owned).collect()),
            Err(e) if vanished(&e) => None,
            Err(e) => {
                errors.push(e);
                None
            }
        }
    };
    let v2_mount = |controllers: &[String], dir: &Path, name: &str| {
        controllers.iter().any(|c| c == name).then(|| Mount { root: dir.to_owned(), version: Version::V2 })
    };
    let v1_mount = |name: &str| has(name).then(|| Mount { root: cgroup_fs.join(name), version: Version::V1 });

    if has("cgroup.controllers") {
        found.layout = Layout::V2;
        if let Some(controllers) = controllers_of(cgroup_fs, errors) {
            found.memory = v2_mount(&controllers, cgroup_fs, "memory");
            found.rdma = v2_mount(&controllers, cgroup_fs, "rdma");
        }
    } else {
        let unified = cgroup_fs.join("unified");
        let unified_controllers = if has("unified") { controllers_of(&unified, errors) } else { None };
        found.layout = match (&unified_controllers, names.iter().any(|n| !n.starts_with('.'))) {
            (Some(_), _) => Layout::Hybrid,
            (None, true) => Layout::V1,
            (None, false) => Layout::None,
        };
        let unified_controllers = unified_controllers.unwrap_or_default();
        found.memory = v1_mount("memory").or_else(|| v2_mount(&unified_controllers, &unified, "memory"));
        found.rdma = v1_mount("rdma").or_else(|| v2_mount(&unified_controllers, &unified, "rdma"));
    }
    if found.memory.is_none() && found.layout != Layout::None {
        // Only to tell "disabled at boot" from "not mounted" in the info series.
        if let Ok(controllers) = fsroot::read_parsed(proc_cgroups_file, proc_cgroups::parse) {
            found.memory_disabled = controllers.iter().any(|c| c.name == "memory" && !c.enabled);
        }
    }
    found
}

/// A cgroup removed between listing and reading: gone before `open` (ENOENT), or while the
/// open file was read (kernfs answers ENODEV).
pub(super) fn vanished(error: &SourceError) -> bool {
    error.is_not_found()
        || matches!(error, SourceError::Io { source, .. } if source.raw_os_error() == Some(libc::ENODEV))
}
