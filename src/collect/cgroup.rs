//! Per-cgroup memory (usage, effective limit, unevictable, OOM events) and rdma controller
//! counts, from `<sysfs>/fs/cgroup` in any layout: pure v2, v1, or the systemd "hybrid" one
//! (v1 controllers plus a `unified` v2 tree).
//!
//! Cost: every `full_scan_interval` the hierarchies are walked again (one readdir per cgroup,
//! bounded by `max_depth`); on the other ticks only the cgroups found by the last walk are
//! read. A cgroup created since the last walk appears at the next one; a cgroup removed since
//! then (or while being read) is dropped silently. Include/exclude patterns decide which
//! cgroups are exported, not which are walked: a v2 limit set on an excluded parent still
//! applies to its children.
//!
//! Labels: the cgroup's path below its hierarchy's root (`/` for the root), then what
//! [`cgroup_path::labels`] recognises in it, so these series join the process collector's
//! `memlock_cgroup_locked_bytes` on `cgroup`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crate::config::CgroupConfig;
use crate::exposition::{Exposition, Kind};
use crate::fsroot::{self, Roots, SourceError};
use crate::kernel::memcg::{self, Limit};
use crate::kernel::rdma_cgroup::{self, RdmaDevice, RdmaValue};
use crate::kernel::{cgroup_path, parse_u64, proc_cgroups, ParseError};
use crate::trend::{Observation, Scope};

use super::{Collector, Data};

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
    pub memory_disabled: bool,
}

/// Finds the layout below `cgroup_fs` (`<sysfs>/fs/cgroup`). A missing directory is the
/// `None` layout, not an error.
pub fn detect(cgroup_fs: &Path, proc_cgroups_file: &Path, errors: &mut Vec<SourceError>) -> Detected {
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
fn vanished(error: &SourceError) -> bool {
    error.is_not_found()
        || matches!(error, SourceError::Io { source, .. } if source.raw_os_error() == Some(libc::ENODEV))
}

/// Labels of one cgroup: `cgroup` first, then the attribution labels.
pub type CgroupLabels = Arc<Vec<(&'static str, String)>>;

/// Memory events of a cgroup and its descendants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryEvents {
    /// Usage hit the limit (v2 `max`, v1 `memory.failcnt`).
    pub max: Option<u64>,
    /// The OOM path was entered (v2 only).
    pub oom: Option<u64>,
    /// Processes killed by the OOM killer (v2 `oom_kill`, v1 `oom_control`'s `oom_kill`).
    pub oom_kill: Option<u64>,
}

/// The memory state of one cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMemory {
    pub labels: CgroupLabels,
    pub usage_bytes: Option<u64>,
    /// Usage minus inactive page cache ([`memcg::working_set`]): what the cgroup cannot give
    /// back without swapping or killing. `None` when usage or `memory.stat` is unknown.
    pub working_set_bytes: Option<u64>,
    /// The lowest limit on the path to the root; `None` when it could not be read.
    pub limit: Option<Limit>,
    /// v2 `memory.high` of this cgroup.
    pub high: Option<Limit>,
    /// v1: the effective memory+swap limit; v2: the lowest `memory.swap.max` on the path.
    pub swap_limit: Option<Limit>,
    pub unevictable_bytes: Option<u64>,
    pub events: MemoryEvents,
}

impl CgroupMemory {
    pub fn path(&self) -> &str {
        self.labels.first().map_or("", |(_, path)| path.as_str())
    }
}

/// The rdma controller's files of one cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupRdma {
    pub labels: CgroupLabels,
    pub current: Vec<RdmaDevice>,
    pub max: Vec<RdmaDevice>,
}

/// What the walks and reads met besides data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanCounts {
    /// Cgroup directories found by the latest walk (memory and, when separate, rdma hierarchy).
    pub walked: u64,
    /// Walked but not exported (include/exclude), latest walk.
    pub filtered: u64,
    /// Subdirectories below `max_depth`, not walked, latest walk.
    pub too_deep: u64,
    /// Removed while being listed or read, latest run.
    pub vanished: u64,
    /// With a file or directory the exporter may not read (EACCES, EPERM), latest run. Not an
    /// error: like hidepid for processes, this is the deployment's choice.
    pub permission_denied: u64,
    /// With a file or directory that could not be read or parsed otherwise, latest run.
    pub read_errors: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupStats {
    pub layout: Layout,
    pub memory_version: Option<Version>,
    pub memory_disabled: bool,
    pub rdma_version: Option<Version>,
    /// In walk order (parents before children, siblings sorted by name).
    pub memory: Vec<CgroupMemory>,
    pub rdma: Vec<CgroupRdma>,
    pub scan: ScanCounts,
}

// Files of a v2 cgroup learned to be absent (the root has none of them; swap files need swap
// support), so that re-reads between walks do not retry them.
const ABSENT_CURRENT: u8 = 1;
const ABSENT_MAX: u8 = 1 << 1;
const ABSENT_HIGH: u8 = 1 << 2;
const ABSENT_SWAP_MAX: u8 = 1 << 3;
const ABSENT_EVENTS: u8 = 1 << 4;
/// The memory controller is not enabled in this v2 cgroup (its parent's subtree_control).
const NO_MEMORY: u8 = 1 << 5;

#[derive(Debug)]
struct Node {
    dir: PathBuf,
    parent: Option<usize>,
    /// Exported (passes include/exclude).
    wanted: bool,
    /// Exported, or an ancestor of an exported cgroup (its v2 limits apply to it).
    needed: bool,
    gone: bool,
    absent: u8,
    labels: CgroupLabels,
}

/// One walked hierarchy. Nodes are in preorder: a parent's index is below its children's.
#[derive(Debug)]
struct Tree {
    mount: Mount,
    memory: bool,
    rdma: bool,
    nodes: Vec<Node>,
}

/// The outcome of reading one file.
enum Read<T> {
    Value(T),
    /// Not there: absent by design, or the cgroup is gone.
    Missing,
    /// Could not be read or parsed: the error was recorded, or the refusal noted in the reader.
    Failed,
}

/// Reads files with one reused text buffer and path.
#[derive(Default)]
struct Reader {
    text: String,
    path: PathBuf,
    /// A read of the current cgroup was refused (taken per cgroup with [`Reader::take_denied`]).
    denied: bool,
    /// The first refused path of the run, for the log.
    first_denied: Option<PathBuf>,
}

impl Reader {
    fn read<T>(
        &mut self,
        dir: &Path,
        file: &str,
        parse: fn(&str) -> Result<T, ParseError>,
        errors: &mut Vec<SourceError>,
        failed: &mut bool,
    ) -> Read<T> {
        self.path.as_mut_os_string().clear();
        self.path.push(dir);
        self.path.push(file);
        match fsroot::read_into(&self.path, &mut self.text) {
            Ok(()) => match parse(&self.text) {
                Ok(value) => Read::Value(value),
                Err(source) => {
                    errors.push(SourceError::Parse { path: self.path.clone(), source });
                    *failed = true;
                    Read::Failed
                }
            },
            Err(e) if vanished(&e) => Read::Missing,
            Err(e) if e.kind() == "permission" => {
                self.denied = true;
                self.first_denied.get_or_insert_with(|| self.path.clone());
                Read::Failed
            }
            Err(e) => {
                errors.push(e);
                *failed = true;
                Read::Failed
            }
        }
    }

    fn take_denied(&mut self) -> bool {
        std::mem::take(&mut self.denied)
    }
}

/// Counts a cgroup whose files could not all be read.
fn count_failures(run: &mut ScanCounts, denied: bool, failed: bool) {
    run.permission_denied += u64::from(denied);
    run.read_errors += u64::from(failed);
}

pub struct CgroupCollector {
    roots: Roots,
    config: CgroupConfig,
    last_walk: Option<Instant>,
    detected: Option<Detected>,
    trees: Vec<Tree>,
    walk_counts: ScanCounts,
    reader: Reader,
    denial_logged: bool,
}

impl CgroupCollector {
    pub fn new(roots: Roots, config: CgroupConfig) -> Self {
        Self {
            roots,
            config,
            last_walk: None,
            detected: None,
            trees: Vec::new(),
            walk_counts: ScanCounts::default(),
            reader: Reader::default(),
            denial_logged: false,
        }
    }

    /// One collection: a walk when one is due, then a read of every known cgroup.
    pub fn read(&mut self, errors: &mut Vec<SourceError>) -> CgroupStats {
        let now = Instant::now();
        // Ticks drift by a few milliseconds; without slack a walk due every 5 ticks would slip
        // to every 6th.
        let slack = self.config.full_scan_interval / 20;
        let due = self.last_walk.is_none_or(|at| now.duration_since(at) + slack >= self.config.full_scan_interval);
        let mut run = ScanCounts::default();
        if due {
            self.walk(&mut run, errors);
            self.last_walk = Some(now);
        }
        let mut stats = CgroupStats {
            layout: Layout::None,
            memory_version: None,
            memory_disabled: false,
            rdma_version: None,
            memory: Vec::new(),
            rdma: Vec::new(),
            scan: ScanCounts::default(),
        };
        if let Some(detected) = &self.detected {
            stats.layout = detected.layout;
            stats.memory_version = detected.memory.as_ref().map(|m| m.version);
            stats.memory_disabled = detected.memory_disabled;
            stats.rdma_version = detected.rdma.as_ref().map(|m| m.version);
        }
        for tree in &mut self.trees {
            if tree.memory {
                match tree.mount.version {
                    Version::V1 => read_v1_memory(tree, &mut self.reader, &mut stats.memory, &mut run, errors),
                    Version::V2 => read_v2_memory(tree, &mut self.reader, &mut stats.memory, &mut run, errors),
                }
            }
            if tree.rdma {
                read_rdma(tree, &mut self.reader, &mut stats.rdma, &mut run, errors);
            }
        }
        stats.scan = ScanCounts {
            vanished: run.vanished,
            permission_denied: run.permission_denied,
            read_errors: run.read_errors,
            ..self.walk_counts.clone()
        };
        // Permission problems are not collector errors (see ScanCounts), so the sampler does
        // not log them: say once that data is missing, and again after they went away.
        match self.reader.first_denied.take() {
            Some(path) if !self.denial_logged => {
                tracing::warn!(path = %path.display(), cgroups = run.permission_denied, "cgroup files not readable \
                    (permission denied); those values are not exported");
                self.denial_logged = true;
            }
            Some(_) => {}
            None => self.denial_logged = false,
        }
        stats
    }

    fn walk(&mut self, run: &mut ScanCounts, errors: &mut Vec<SourceError>) {
        let detected = detect(&self.roots.sys("fs/cgroup"), &self.roots.proc("cgroups"), errors);
        let mut mounts: Vec<(Mount, bool, bool)> = Vec::new();
        if let Some(memory) = &detected.memory {
            mounts.push((memory.clone(), true, detected.rdma.as_ref() == Some(memory)));
        }
        if let Some(rdma) = detected.rdma.as_ref().filter(|r| detected.memory.as_ref() != Some(*r)) {
            mounts.push((rdma.clone(), false, true));
        }
        let mut counts = ScanCounts::default();
        self.trees = mounts
            .into_iter()
            .map(|(mount, memory, rdma)| {
                let nodes = walk_tree(&mount.root, &self.config, &mut counts, run, &mut self.reader, errors);
                Tree { mount, memory, rdma, nodes }
            })
            .collect();
        self.walk_counts = counts;
        self.detected = Some(detected);
    }
}

/// Lists a hierarchy depth-first, parents before children and siblings in name order.
fn walk_tree(
    root: &Path,
    config: &CgroupConfig,
    counts: &mut ScanCounts,
    run: &mut ScanCounts,
    reader: &mut Reader,
    errors: &mut Vec<SourceError>,
) -> Vec<Node> {
    let mut nodes: Vec<Node> = Vec::new();
    let mut pending: Vec<(PathBuf, String, Option<usize>, usize)> = vec![(root.to_owned(), "/".to_owned(), None, 0)];
    while let Some((dir, path, parent, depth)) = pending.pop() {
        let index = nodes.len();
        match fsroot::list_subdirs(&dir) {
            Ok(children) if depth >= config.max_depth => counts.too_deep += children.len() as u64,
            Ok(children) => {
                for name in children.iter().rev() {
                    let child_path = if path == "/" { format!("/{name}") } else { format!("{path}/{name}") };
                    pending.push((dir.join(name), child_path, Some(index), depth + 1));
                }
            }
            Err(e) if vanished(&e) => {
                if parent.is_some() {
                    run.vanished += 1;
                }
                continue;
            }
            // The cgroup itself may still be readable; only its subtree is lost.
            Err(e) if e.kind() == "permission" => {
                reader.first_denied.get_or_insert_with(|| dir.clone());
                run.permission_denied += 1;
            }
            Err(e) => {
                errors.push(e);
                run.read_errors += 1;
            }
        }
        counts.walked += 1;
        let wanted = config.wants(&path);
        if !wanted {
            counts.filtered += 1;
        }
        let labels = Arc::new(if wanted { cgroup_path::labels(&path) } else { vec![("cgroup", path)] });
        nodes.push(Node { dir, parent, wanted, needed: wanted, gone: false, absent: 0, labels });
    }
    for index in (0..nodes.len()).rev() {
        if let (true, Some(parent)) = (nodes[index].needed, nodes[index].parent) {
            nodes[parent].needed = true;
        }
    }
    nodes
}

/// Reads the next file of a node, or moves on to the next node when the cgroup is gone.
macro_rules! value_or_gone {
    ($read:expr, $reader:expr, $node:expr, $run:expr, $next:lifetime) => {
        match $read {
            Read::Value(value) => Some(value),
            Read::Failed => None,
            Read::Missing => {
                $node.gone = true;
                $run.vanished += 1;
                $reader.take_denied();
                continue $next;
            }
        }
    };
}

fn read_v1_memory(
    tree: &mut Tree,
    reader: &mut Reader,
    out: &mut Vec<CgroupMemory>,
    run: &mut ScanCounts,
    errors: &mut Vec<SourceError>,
) {
    // Every v1 memory cgroup, the root included, has all four files: a missing one means the
    // cgroup was removed.
    'nodes: for node in tree.nodes.iter_mut().filter(|n| n.wanted && !n.gone) {
        let mut failed = false;
        let dir = node.dir.as_path();
        let usage = value_or_gone!(
            reader.read(dir, "memory.usage_in_bytes", parse_u64, errors, &mut failed),
            reader,
            node,
            run,
            'nodes
        );
        let stat = value_or_gone!(
            reader.read(dir, "memory.stat", memcg::parse_v1_stat, errors, &mut failed),
            reader,
            node,
            run,
            'nodes
        );
        let failcnt = value_or_gone!(
            reader.read(dir, "memory.failcnt", parse_u64, errors, &mut failed),
            reader,
            node,
            run,
            'nodes
        );
        let oom = value_or_gone!(
            reader.read(dir, "memory.oom_control", memcg::parse_oom_control, errors, &mut failed),
            reader,
            node,
            run,
            'nodes
        );
        count_failures(run, reader.take_denied(), failed);
        let stat = stat.unwrap_or_default();
        out.push(CgroupMemory {
            labels: node.labels.clone(),
            usage_bytes: usage,
            working_set_bytes: usage
                .zip(stat.subtree_inactive_file())
                .map(|(usage, inactive)| memcg::working_set(usage, inactive)),
            limit: stat.hierarchical_memory_limit,
            high: None,
            swap_limit: stat.hierarchical_memsw_limit,
            unevictable_bytes: stat.subtree_unevictable(),
            events: MemoryEvents { max: failcnt, oom: None, oom_kill: oom.and_then(|o| o.oom_kill) },
        });
    }
}

/// A limit file of one v2 cgroup: the limit, `Unlimited` when the file is absent (the root, or
/// no controller there: nothing to enforce at that level), `None` when it could not be read.
fn own_v2_limit(
    reader: &mut Reader,
    node: &mut Node,
    file: &str,
    bit: u8,
    errors: &mut Vec<SourceError>,
    failed: &mut bool,
) -> Option<Limit> {
    if node.absent & bit != 0 {
        return Some(Limit::Unlimited);
    }
    match reader.read(&node.dir, file, memcg::parse_v2_limit, errors, failed) {
        Read::Value(limit) => Some(limit),
        Read::Missing => {
            node.absent |= bit;
            Some(Limit::Unlimited)
        }
        Read::Failed => None,
    }
}

fn read_v2_memory(
    tree: &mut Tree,
    reader: &mut Reader,
    out: &mut Vec<CgroupMemory>,
    run: &mut ScanCounts,
    errors: &mut Vec<SourceError>,
) {
    let count = tree.nodes.len();
    let mut failed = vec![false; count];
    let mut denied = vec![false; count];
    // Effective limits, parents first (preorder); `None` when a limit on the path is unknown.
    let mut max: Vec<Option<Limit>> = vec![None; count];
    let mut swap: Vec<Option<Limit>> = vec![None; count];
    for index in 0..count {
        let node = &mut tree.nodes[index];
        if !node.needed || node.gone {
            continue;
        }
        let (own_max, own_swap) = if node.absent & NO_MEMORY != 0 {
            (Some(Limit::Unlimited), Some(Limit::Unlimited))
        } else {
            (
                own_v2_limit(reader, node, "memory.max", ABSENT_MAX, errors, &mut failed[index]),
                own_v2_limit(reader, node, "memory.swap.max", ABSENT_SWAP_MAX, errors, &mut failed[index]),
            )
        };
        let (parent_max, parent_swap) = match node.parent {
            Some(parent) => (max[parent], swap[parent]),
            None => (Some(Limit::Unlimited), Some(Limit::Unlimited)),
        };
        denied[index] = reader.take_denied();
        max[index] = parent_max.zip(own_max).map(|(a, b)| a.min(b));
        swap[index] = parent_swap.zip(own_swap).map(|(a, b)| a.min(b));
    }
    for index in 0..count {
        let node = &mut tree.nodes[index];
        if !node.wanted || node.gone || node.absent & NO_MEMORY != 0 {
            continue;
        }
        let mut node_failed = failed[index];
        // memory.stat exists wherever the controller is enabled, the root included.
        let stat = match reader.read(&node.dir, "memory.stat", memcg::parse_v2_stat, errors, &mut node_failed) {
            Read::Value(stat) => Some(stat),
            Read::Failed => None,
            Read::Missing => {
                // Gone, or a cgroup whose parent does not delegate the memory controller.
                match reader.read(&node.dir, "cgroup.controllers", |_| Ok(()), errors, &mut node_failed) {
                    Read::Value(()) => node.absent |= NO_MEMORY,
                    Read::Missing => {
                        node.gone = true;
                        run.vanished += 1;
                    }
                    Read::Failed => count_failures(run, reader.take_denied() || denied[index], node_failed),
                }
                reader.take_denied();
                continue;
            }
        };
        let current = optional_v2(reader, node, "memory.current", ABSENT_CURRENT, parse_u64, errors, &mut node_failed);
        let high =
            optional_v2(reader, node, "memory.high", ABSENT_HIGH, memcg::parse_v2_limit, errors, &mut node_failed);
        let events =
            optional_v2(reader, node, "memory.events", ABSENT_EVENTS, memcg::parse_v2_events, errors, &mut node_failed)
                .unwrap_or_default();
        count_failures(run, reader.take_denied() || denied[index], node_failed);
        out.push(CgroupMemory {
            labels: node.labels.clone(),
            usage_bytes: current,
            // v2 memory.stat is hierarchical, like memory.current.
            working_set_bytes: current
                .zip(stat.as_ref().and_then(|s| s.inactive_file))
                .map(|(usage, inactive)| memcg::working_set(usage, inactive)),
            limit: max[index],
            high,
            swap_limit: swap[index],
            unevictable_bytes: stat.and_then(|s| s.unevictable),
            events: MemoryEvents { max: events.max, oom: events.oom, oom_kill: events.oom_kill },
        });
    }
}

/// A v2 file that some cgroups lack by design (the root lacks most): `None` when absent, and
/// not retried until the next walk.
fn optional_v2<T>(
    reader: &mut Reader,
    node: &mut Node,
    file: &str,
    bit: u8,
    parse: fn(&str) -> Result<T, ParseError>,
    errors: &mut Vec<SourceError>,
    failed: &mut bool,
) -> Option<T> {
    if node.absent & bit != 0 {
        return None;
    }
    match reader.read(&node.dir, file, parse, errors, failed) {
        Read::Value(value) => Some(value),
        Read::Missing => {
            node.absent |= bit;
            None
        }
        Read::Failed => None,
    }
}

fn read_rdma(
    tree: &mut Tree,
    reader: &mut Reader,
    out: &mut Vec<CgroupRdma>,
    run: &mut ScanCounts,
    errors: &mut Vec<SourceError>,
) {
    // Absent at the root and where the controller is not enabled: not an error.
    for node in tree.nodes.iter_mut().filter(|n| n.wanted && !n.gone) {
        let mut failed = false;
        let mut devices =
            |file: &str, failed: &mut bool| match reader.read(&node.dir, file, rdma_cgroup::parse, errors, failed) {
                Read::Value(devices) => devices,
                Read::Missing | Read::Failed => Vec::new(),
            };
        let mut current = devices("rdma.current", &mut failed);
        let mut max = devices("rdma.max", &mut failed);
        // Every cgroup lists every RDMA device; one with neither usage nor a limit for a device
        // has no pool for it, and exporting its zeros would multiply series by cgroups x devices.
        let pooled: Vec<String> = current
            .iter()
            .filter(|d| {
                [d.hca_handle, d.hca_object].iter().any(|v| v.and_then(RdmaValue::count).is_some_and(|n| n > 0))
            })
            .chain(
                max.iter()
                    .filter(|d| [d.hca_handle, d.hca_object].iter().any(|v| v.is_some_and(|v| v != RdmaValue::Max))),
            )
            .map(|d| d.device.clone())
            .collect();
        current.retain(|d| pooled.contains(&d.device));
        max.retain(|d| pooled.contains(&d.device));
        // A tree shared with memory counted its cgroups' failures already.
        let denied = reader.take_denied();
        if !tree.memory {
            count_failures(run, denied, failed);
        }
        if !current.is_empty() || !max.is_empty() {
            out.push(CgroupRdma { labels: node.labels.clone(), current, max });
        }
    }
}

impl Collector for CgroupCollector {
    fn name(&self) -> &'static str {
        "cgroup"
    }

    fn collect(&mut self, errors: &mut Vec<SourceError>) -> Option<Data> {
        Some(Arc::new(self.read(errors)) as Data)
    }
}

impl CgroupStats {
    /// The cgroup scope of the trend analysis: the working set against the effective limit.
    /// Not the raw usage: a job streaming a dataset through page cache fills its cgroup with
    /// cache that the kernel reclaims at the limit, and would look like a steep ramp to OOM.
    /// Cgroups without a limit have nothing to run out of and are not tracked.
    pub fn observations(&self, at: f64) -> Vec<Observation> {
        self.memory
            .iter()
            .filter_map(|c| {
                // Usage when memory.stat is unreadable: a larger value, so the trend errs early.
                let working_set = c.working_set_bytes.or(c.usage_bytes)?;
                let limit = c.limit?.bytes()?;
                Some(Observation {
                    scope: Scope::Cgroup,
                    id: c.path().to_owned(),
                    labels: (*c.labels).clone(),
                    at,
                    value: working_set as f64,
                    headroom: Some(limit.saturating_sub(working_set) as f64),
                })
            })
            .collect()
    }

    pub fn render(&self, out: &mut Exposition) {
        let base: Vec<Vec<(&str, &str)>> =
            self.memory.iter().map(|c| c.labels.iter().map(|(k, v)| (*k, v.as_str())).collect()).collect();
        type Field = fn(&CgroupMemory) -> Option<u64>;
        let gauges: [(&'static str, &'static str, Field); 7] = [
            (
                "memlock_cgroup_memory_usage_bytes",
                "Memory charged to the cgroup and its descendants (v1 memory.usage_in_bytes, v2 memory.current), page \
                    cache included. Sampled on the cgroup interval (default 1s), not at scrape time.",
                |c| c.usage_bytes,
            ),
            (
                "memlock_cgroup_memory_working_set_bytes",
                "Usage minus inactive page cache (v1 total_inactive_file, v2 inactive_file in memory.stat), floored at \
                    0, as kubelet and cAdvisor compute it: memory the kernel cannot reclaim without swapping or \
                    killing. Locked and pinned pages are always in it. Sampled on the cgroup interval.",
                |c| c.working_set_bytes,
            ),
            (
                "memlock_cgroup_memory_limit_bytes",
                "Effective memory limit: the lowest limit on the path to the root (v1 hierarchical_memory_limit, v2 \
                    the lowest memory.max of the cgroup and its ancestors). Absent when unlimited. Sampled on the \
                    cgroup interval.",
                |c| c.limit?.bytes(),
            ),
            (
                "memlock_cgroup_memory_limit_unlimited",
                "1 when no memory limit applies on the cgroup's path to the root, 0 when \
                    memlock_cgroup_memory_limit_bytes is set. Sampled on the cgroup interval.",
                |c| c.limit.map(|l| u64::from(l.is_unlimited())),
            ),
            (
                "memlock_cgroup_memory_high_bytes",
                "memory.high of the cgroup (v2): above it the cgroup is throttled and reclaimed. Absent when not set. \
                    Sampled on the cgroup interval.",
                |c| c.high?.bytes(),
            ),
            (
                "memlock_cgroup_memory_swap_limit_bytes",
                "Effective swap limit: v1 hierarchical_memsw_limit (memory plus swap), v2 the lowest memory.swap.max \
                    on the path to the root (swap only). Absent when unlimited or without swap accounting. Sampled on \
                    the cgroup interval.",
                |c| c.swap_limit?.bytes(),
            ),
            (
                "memlock_cgroup_memory_unevictable_bytes",
                "Unevictable (mlocked) memory of the cgroup and its descendants (v1 total_unevictable, v2 unevictable \
                    in memory.stat). RDMA-pinned pages are not in it. Sampled on the cgroup interval.",
                |c| c.unevictable_bytes,
            ),
        ];
        for (name, help, field) in gauges {
            out.family(name, help, Kind::Gauge);
            for (cgroup, labels) in self.memory.iter().zip(&base) {
                out.maybe(labels, field(cgroup));
            }
        }
        out.family(
            "memlock_cgroup_memory_events_total",
            "Memory events of the cgroup and its descendants: max (usage hit the limit; on v1 memory.failcnt, hits of \
                this cgroup's own limit only), oom (the OOM path was entered; v2 only), oom_kill (processes killed by \
                the OOM killer). Sampled on the cgroup interval.",
            Kind::Counter,
        );
        for (cgroup, labels) in self.memory.iter().zip(&base) {
            let e = &cgroup.events;
            for (event, value) in [("max", e.max), ("oom", e.oom), ("oom_kill", e.oom_kill)] {
                let mut labels = labels.clone();
                labels.push(("event", event));
                out.maybe(&labels, value);
            }
        }
        self.render_rdma(out);
        self.render_scan(out);
    }

    fn render_rdma(&self, out: &mut Exposition) {
        out.family(
            "memlock_cgroup_rdma",
            "rdma cgroup controller per device: open verbs contexts (resource hca_handle) and uverbs objects such as \
                MRs and QPs (hca_object); kind current (rdma.current) or max (rdma.max; a max of \"max\" is not \
                exported). Counts, not bytes. Only devices the cgroup uses or has a limit for. Sampled on the cgroup \
                interval.",
            Kind::Gauge,
        );
        for cgroup in &self.rdma {
            let base: Vec<(&str, &str)> = cgroup.labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let mut devices: Vec<&str> = cgroup.current.iter().chain(&cgroup.max).map(|d| d.device.as_str()).collect();
            devices.sort_unstable();
            devices.dedup();
            for device in devices {
                for (kind, list) in [("current", &cgroup.current), ("max", &cgroup.max)] {
                    let Some(entry) = list.iter().find(|d| d.device == device) else { continue };
                    for (resource, value) in [("hca_handle", entry.hca_handle), ("hca_object", entry.hca_object)] {
                        let mut labels = base.clone();
                        labels.extend([("device", device), ("resource", resource), ("kind", kind)]);
                        out.maybe(&labels, value.and_then(|v| v.count()));
                    }
                }
            }
        }
    }

    fn render_scan(&self, out: &mut Exposition) {
        let version = |v: Option<Version>| match v {
            Some(Version::V1) => "v1",
            Some(Version::V2) => "v2",
            None => "none",
        };
        let memory = if self.memory_version.is_none() && self.memory_disabled {
            "disabled"
        } else {
            version(self.memory_version)
        };
        out.family(
            "memlock_cgroup_hierarchy_info",
            "Always 1. layout: how <sysfs>/fs/cgroup is mounted (v1, v2, hybrid, none); memory and rdma: the hierarchy \
                version of each controller (v1, v2, none, or disabled at boot).",
            Kind::Gauge,
        )
        .sample(&[("layout", self.layout.as_str()), ("memory", memory), ("rdma", version(self.rdma_version))], 1u64);
        out.family(
            "memlock_cgroup_scan_cgroups_walked",
            "Cgroup directories found by the latest walk of the memory and rdma hierarchies (walks run every \
                full_scan_interval; between them only known cgroups are read).",
            Kind::Gauge,
        )
        .sample(&[], self.scan.walked);
        out.family(
            "memlock_cgroup_scan_cgroups_skipped",
            "Cgroups not exported, or exported in part, by reason: filtered (include/exclude patterns) and too_deep \
                (subdirectories below max_depth, not walked) in the latest walk; in the latest run vanished (removed \
                while being read), permission_denied (a file or directory the exporter may not read; logged, not a \
                collector failure) and read_error (a file that could not be read or parsed; see \
                memlock_exporter_collector_errors_total).",
            Kind::Gauge,
        );
        let s = &self.scan;
        let reasons = [
            ("filtered", s.filtered),
            ("too_deep", s.too_deep),
            ("vanished", s.vanished),
            ("permission_denied", s.permission_denied),
            ("read_error", s.read_errors),
        ];
        for (reason, value) in reasons {
            out.sample(&[("reason", reason)], value);
        }
    }
}

impl super::Stats for CgroupStats {
    fn render(&self, out: &mut Exposition) {
        CgroupStats::render(self, out)
    }

    fn observations(&self, at: f64) -> Vec<Observation> {
        CgroupStats::observations(self, at)
    }

    fn trend_scopes(&self) -> &'static [Scope] {
        &[Scope::Cgroup]
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A scratch sysfs/procfs pair, removed on drop.
    struct Scratch {
        root: PathBuf,
    }

    impl Scratch {
        fn new(name: &str) -> Self {
            let root = std::env::temp_dir().join(format!("memlock-cgroup-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            std::fs::create_dir_all(root.join("sys/fs/cgroup")).unwrap();
            std::fs::create_dir_all(root.join("proc")).unwrap();
            Self { root }
        }

        fn cgroup_fs(&self) -> PathBuf {
            self.root.join("sys/fs/cgroup")
        }

        fn write(&self, rel: &str, text: &str) {
            let path = self.root.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }

        /// A v1 memory cgroup with the four files the collector reads.
        fn v1_cgroup(&self, rel: &str, usage: u64, hierarchical_limit: u64) {
            let dir = format!("sys/fs/cgroup/memory{rel}");
            self.write(&format!("{dir}/memory.usage_in_bytes"), &format!("{usage}\n"));
            self.write(
                &format!("{dir}/memory.stat"),
                &format!(
                    "cache 0\nrss {usage}\ninactive_anon {usage}\ninactive_file 0\nunevictable \
                        0\nhierarchical_memory_limit {hierarchical_limit}\n\
                     total_cache 0\ntotal_rss {usage}\ntotal_inactive_anon {usage}\ntotal_inactive_file \
                     0\ntotal_unevictable 4096\n"
                ),
            );
            self.write(&format!("{dir}/memory.failcnt"), "0\n");
            self.write(&format!("{dir}/memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n");
        }

        fn collector(&self, full_scan_interval: Duration) -> CgroupCollector {
            let roots = Roots { procfs: self.root.join("proc"), sysfs: self.root.join("sys") };
            CgroupCollector::new(
                roots,
                CgroupConfig { full_scan_interval, include: vec![], exclude: vec![], max_depth: 12 },
            )
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    const UNLIMITED: u64 = 9223372036854771712;

    fn paths(stats: &CgroupStats) -> Vec<&str> {
        stats.memory.iter().map(CgroupMemory::path).collect()
    }

    #[test]
    fn layouts_are_told_apart() {
        let detect_in =
            |scratch: &Scratch| detect(&scratch.cgroup_fs(), &scratch.root.join("proc/cgroups"), &mut Vec::new());

        let v2 = Scratch::new("detect-v2");
        v2.write("sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n");
        let found = detect_in(&v2);
        assert_eq!(found.layout, Layout::V2);
        assert_eq!(found.memory, Some(Mount { root: v2.cgroup_fs(), version: Version::V2 }));
        assert_eq!(found.rdma, found.memory);

        let v1 = Scratch::new("detect-v1");
        v1.write("sys/fs/cgroup/memory/memory.usage_in_bytes", "1\n");
        v1.write("sys/fs/cgroup/pids/cgroup.procs", "");
        let found = detect_in(&v1);
        assert_eq!((found.layout, found.rdma.is_none()), (Layout::V1, true));
        assert_eq!(found.memory, Some(Mount { root: v1.cgroup_fs().join("memory"), version: Version::V1 }));

        let hybrid = Scratch::new("detect-hybrid");
        hybrid.write("sys/fs/cgroup/memory/memory.usage_in_bytes", "1\n");
        hybrid.write("sys/fs/cgroup/unified/cgroup.controllers", "rdma\n");
        let found = detect_in(&hybrid);
        assert_eq!(found.layout, Layout::Hybrid);
        assert_eq!(found.memory.map(|m| m.version), Some(Version::V1));
        assert_eq!(found.rdma, Some(Mount { root: hybrid.cgroup_fs().join("unified"), version: Version::V2 }));

        // Booted with cgroup_disable=memory: no memory hierarchy, and /proc/cgroups says why.
        let disabled = Scratch::new("detect-disabled");
        disabled.write("sys/fs/cgroup/pids/cgroup.procs", "");
        disabled
            .write("proc/cgroups", "#subsys_name\thierarchy\tnum_cgroups\tenabled\nmemory\t0\t1\t0\npids\t3\t1\t1\n");
        let found = detect_in(&disabled);
        assert_eq!((found.layout, found.memory.is_none(), found.memory_disabled), (Layout::V1, true, true));

        let none = Scratch::new("detect-none");
        assert_eq!(detect_in(&none).layout, Layout::None);
        let mut errors = Vec::new();
        assert_eq!(
            detect(&none.root.join("no/such/dir"), &none.root.join("proc/cgroups"), &mut errors).layout,
            Layout::None
        );
        assert!(errors.is_empty(), "{errors:?}");
    }

    #[test]
    fn between_walks_only_known_cgroups_are_read() {
        let scratch = Scratch::new("rewalk");
        scratch.v1_cgroup("", 1000, UNLIMITED);
        scratch.v1_cgroup("/a", 100, 1 << 30);
        scratch.v1_cgroup("/b", 200, UNLIMITED);
        let mut collector = scratch.collector(Duration::from_secs(3600));
        let mut errors = Vec::new();
        let first = collector.read(&mut errors);
        assert_eq!(paths(&first), ["/", "/a", "/b"]);
        assert_eq!(first.memory[1].limit, Some(Limit::Bytes(1 << 30)));
        assert_eq!(first.memory[2].limit, Some(Limit::Unlimited));

        // A new cgroup waits for the next walk; a changed value is seen at once; a removed
        // cgroup is dropped without an error.
        scratch.v1_cgroup("/c", 300, UNLIMITED);
        scratch.write("sys/fs/cgroup/memory/a/memory.usage_in_bytes", "150\n");
        std::fs::remove_dir_all(scratch.cgroup_fs().join("memory/b")).unwrap();
        let second = collector.read(&mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(paths(&second), ["/", "/a"]);
        assert_eq!(second.memory[1].usage_bytes, Some(150));
        assert_eq!((second.scan.vanished, second.scan.walked), (1, 3));
        // Once known to be gone it is not read again (nor counted again) until the next walk.
        let third = collector.read(&mut errors);
        assert_eq!((paths(&third), third.scan.vanished), (vec!["/", "/a"], 0));

        // The next walk finds /c.
        let mut walking = scratch.collector(Duration::ZERO);
        let fourth = walking.read(&mut errors);
        assert_eq!(paths(&fourth), ["/", "/a", "/c"]);
        assert!(errors.is_empty(), "{errors:?}");
    }

    #[test]
    fn a_bad_file_fails_the_run_but_keeps_the_rest() {
        let scratch = Scratch::new("bad-file");
        scratch.v1_cgroup("", 1000, UNLIMITED);
        scratch.v1_cgroup("/good", 100, 1 << 20);
        scratch.v1_cgroup("/bad", 200, 1 << 20);
        scratch.write("sys/fs/cgroup/memory/bad/memory.stat", "unevictable lots\n");
        let mut errors = Vec::new();
        let stats = scratch.collector(Duration::from_secs(5)).read(&mut errors);
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].kind(), "parse");
        assert!(errors[0].to_string().contains("bad/memory.stat"), "{}", errors[0]);
        assert_eq!((stats.scan.read_errors, stats.scan.permission_denied), (1, 0));
        // The bad cgroup keeps what could be read; the good one is complete.
        let bad = stats.memory.iter().find(|c| c.path() == "/bad").unwrap();
        assert_eq!((bad.usage_bytes, bad.limit), (Some(200), None));
        let good = stats.memory.iter().find(|c| c.path() == "/good").unwrap();
        assert_eq!(good.limit, Some(Limit::Bytes(1 << 20)));
        // A directory where a file should be is an I/O error, not a panic.
        std::fs::remove_file(scratch.cgroup_fs().join("memory/good/memory.failcnt")).unwrap();
        std::fs::create_dir(scratch.cgroup_fs().join("memory/good/memory.failcnt")).unwrap();
        let mut errors = Vec::new();
        let stats = scratch.collector(Duration::from_secs(5)).read(&mut errors);
        assert!(errors.iter().any(|e| e.kind() == "io"), "{errors:?}");
        assert_eq!(stats.memory.iter().find(|c| c.path() == "/good").unwrap().events.max, None);
    }

    #[test]
    fn v2_limits_walk_up_and_absent_files_are_learned() {
        let scratch = Scratch::new("v2");
        scratch.write("sys/fs/cgroup/cgroup.controllers", "cpu memory pids\n");
        scratch.write("sys/fs/cgroup/memory.stat", "anon 10\nunevictable 0\n");
        for (rel, max) in [("/job", "1048576"), ("/job/step", "max"), ("/job/step/task", "2097152")] {
            let dir = format!("sys/fs/cgroup{rel}");
            scratch.write(&format!("{dir}/cgroup.controllers"), "memory pids\n");
            scratch.write(&format!("{dir}/memory.current"), "4096\n");
            scratch.write(&format!("{dir}/memory.max"), &format!("{max}\n"));
            scratch.write(&format!("{dir}/memory.high"), "max\n");
            scratch.write(&format!("{dir}/memory.stat"), "anon 4096\nfile 0\ninactive_file 0\nunevictable 4096\n");
            scratch.write(&format!("{dir}/memory.events"), "low 0\nhigh 0\nmax 3\noom 0\noom_kill 0\n");
        }
        // No swap support: no memory.swap.max anywhere. A unit without the memory controller.
        scratch.write("sys/fs/cgroup/pids-only.service/cgroup.controllers", "pids\n");
        let mut collector = scratch.collector(Duration::from_secs(3600));
        let mut errors = Vec::new();
        let stats = collector.read(&mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(paths(&stats), ["/", "/job", "/job/step", "/job/step/task"]);
        let limits: Vec<Option<Limit>> = stats.memory.iter().map(|c| c.limit).collect();
        assert_eq!(
            limits,
            [
                Some(Limit::Unlimited),
                Some(Limit::Bytes(1 << 20)),
                Some(Limit::Bytes(1 << 20)),
                Some(Limit::Bytes(1 << 20))
            ]
        );
        assert_eq!(stats.memory[0].usage_bytes, None, "the v2 root has no memory.current");
        assert!(stats.memory.iter().all(|c| c.swap_limit == Some(Limit::Unlimited)));
        assert_eq!(stats.memory[3].events.max, Some(3));
        assert_eq!(stats.memory[3].unevictable_bytes, Some(4096));

        // A limit lowered between walks is seen at the next read.
        scratch.write("sys/fs/cgroup/job/step/memory.max", "524288\n");
        let stats = collector.read(&mut errors);
        assert_eq!(stats.memory[3].limit, Some(Limit::Bytes(1 << 19)));
        assert!(errors.is_empty(), "{errors:?}");

        let observations = stats.observations(7.0);
        assert_eq!(observations.len(), 3, "the unlimited root is not tracked");
        assert_eq!(observations[2].headroom, Some((524288 - 4096) as f64));
        assert_eq!(observations[2].id, "/job/step/task");
    }

    /// The trend and the alerts follow the working set: a cgroup full of inactive page cache
    /// is not running out of memory; one full of locked memory is.
    #[test]
    fn working_set_leaves_out_inactive_file_and_feeds_the_trend() {
        let scratch = Scratch::new("working-set");
        scratch.write("sys/fs/cgroup/cgroup.controllers", "memory\n");
        scratch.write("sys/fs/cgroup/memory.stat", "anon 0\nfile 0\ninactive_file 0\nunevictable 0\n");
        let v2 = |name: &str, current: u64, stat: &str| {
            let dir = format!("sys/fs/cgroup/{name}");
            scratch.write(&format!("{dir}/cgroup.controllers"), "memory\n");
            scratch.write(&format!("{dir}/memory.current"), &format!("{current}\n"));
            scratch.write(&format!("{dir}/memory.max"), "1073741824\n");
            scratch.write(&format!("{dir}/memory.stat"), stat);
        };
        // 950 MiB of a 1 GiB limit, 900 MiB of it inactive file cache.
        v2(
            "loader",
            950 << 20,
            "anon 52428800\nfile 943718400\ninactive_anon 52428800\nactive_anon 0\ninactive_file \
            943718400\nactive_file 0\nunevictable 0\n",
        );
        // 950 MiB, 900 MiB of it mlock()ed: unevictable, so never inactive_file.
        v2(
            "locker",
            950 << 20,
            "anon 996147200\nfile 0\ninactive_anon 52428800\nactive_anon 0\ninactive_file \
            0\nactive_file 0\nunevictable 943718400\n",
        );
        // The statistics lag usage (flushed lazily): cache just dropped still shows as inactive.
        v2("stale", 1 << 20, "anon 0\nfile 8388608\ninactive_file 8388608\nactive_file 0\nunevictable 0\n");
        // A memory.stat without the LRU lines: the working set is unknown, not the usage.
        v2("nolru", 4096, "anon 4096\nunevictable 0\n");
        let mut errors = Vec::new();
        let stats = scratch.collector(Duration::from_secs(3600)).read(&mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        let by_path = |path: &str| stats.memory.iter().find(|c| c.path() == path).unwrap();
        assert_eq!(by_path("/loader").working_set_bytes, Some(50 << 20));
        assert_eq!(by_path("/locker").working_set_bytes, Some(950 << 20));
        assert_eq!(by_path("/stale").working_set_bytes, Some(0), "floored at 0");
        assert_eq!(by_path("/stale").usage_bytes, Some(1 << 20));
        assert_eq!(by_path("/nolru").working_set_bytes, None);
        assert_eq!(by_path("/").working_set_bytes, None, "the v2 root has no memory.current");

        let observations = stats.observations(1.0);
        let watched = |id: &str| observations.iter().find(|o| o.id == id).map(|o| (o.value, o.headroom));
        assert_eq!(watched("/loader"), Some(((50u64 << 20) as f64, Some((974u64 << 20) as f64))));
        assert_eq!(watched("/locker"), Some(((950u64 << 20) as f64, Some((74u64 << 20) as f64))));
        assert_eq!(watched("/stale"), Some((0.0, Some((1u64 << 30) as f64))));
        assert_eq!(
            watched("/nolru"),
            Some((4096.0, Some(((1u64 << 30) - 4096) as f64))),
            "without a working set, usage stands in"
        );

        let mut out = Exposition::new();
        stats.render(&mut out);
        let text = out.finish();
        assert!(text.contains("memlock_cgroup_memory_working_set_bytes{cgroup=\"/loader\"} 52428800\n"), "{text}");
        assert!(text.contains("memlock_cgroup_memory_usage_bytes{cgroup=\"/loader\"} 996147200\n"), "{text}");
        assert!(!text.contains("memlock_cgroup_memory_working_set_bytes{cgroup=\"/nolru\"}"), "{text}");

        // v1: total_inactive_file, the subtree's, like usage_in_bytes.
        let v1 = Scratch::new("working-set-v1");
        v1.v1_cgroup("", 1 << 30, UNLIMITED);
        v1.write(
            "sys/fs/cgroup/memory/memory.stat",
            "cache 0\nrss 0\ninactive_file 4096\nunevictable 0\nhierarchical_memory_limit \
                9223372036854771712\ntotal_cache 805306368\ntotal_rss 268435456\ntotal_inactive_file \
                805306368\ntotal_unevictable 0\n",
        );
        let stats = v1.collector(Duration::from_secs(3600)).read(&mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(stats.memory[0].working_set_bytes, Some(256 << 20));
    }
}
