//! Walking the hierarchies and reading each cgroup's memory and rdma files: the cgroup
//! collector itself.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use memlock_kernel::fsroot::{self, Roots, SourceError};
use memlock_kernel::memcg::{self, Limit};
use memlock_kernel::rdma_cgroup::{self, RdmaValue};
use memlock_kernel::{cgroup_path, parse_u64, ParseError, Parsed};

use super::detect::{detect, vanished, Detected, Layout, Mount, Version};
use super::settings::CgroupConfig;
use super::{CgroupLabels, CgroupMemory, CgroupRdma, CgroupStats, MemoryEvents, ScanCounts};
use crate::collect::{Collector, Data};

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

    /// [`Reader::read`] for a file read field by field: the fields that did not parse are
    /// errors (the run fails) and the others are kept.
    fn read_fields<T>(
        &mut self,
        dir: &Path,
        file: &str,
        parse: fn(&str) -> Result<Parsed<T>, ParseError>,
        errors: &mut Vec<SourceError>,
        failed: &mut bool,
    ) -> Read<T> {
        match self.read(dir, file, parse, errors, failed) {
            Read::Value(Parsed { value, field_errors }) => {
                *failed |= !field_errors.is_empty();
                for source in field_errors {
                    errors.push(SourceError::Parse { path: self.path.clone(), source });
                }
                Read::Value(value)
            }
            Read::Missing => Read::Missing,
            Read::Failed => Read::Failed,
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

/// v1 `oom_kill` of each cgroup summed over its subtree. `__oom_kill_process()` (mm/oom_kill.c)
/// raises `MEMCG_OOM_KILL` on the victim's own memcg through `memcg_memory_event()`
/// (include/linux/memcontrol.h), which walks up to the ancestors only on the default (v2)
/// hierarchy, and there not with `memory_localevents`; v1's `memory.oom_control`
/// (`mem_cgroup_oom_control_read`, mm/memcontrol.c) prints that counter, so on v1 a kill is
/// counted in the victim's cgroup only, never in the job or pod cgroup above it. The sum of a
/// cgroup and its walked descendants is what v2's `memory.events` gives.
#[derive(Debug, Default)]
struct V1OomKills {
    /// Each counted cgroup's own `oom_kill` as last read: kept when a read fails, so a sum
    /// never goes down.
    own: HashMap<PathBuf, u64>,
    /// Kills of descendants since removed (a job's step cgroup when the step ends), per cgroup
    /// still there: the kernel forgets them with the cgroup, the counter above must not.
    departed: HashMap<PathBuf, u64>,
}

impl V1OomKills {
    /// Credits the kills `last` of a removed (or re-created) cgroup `dir` to its parent, whose
    /// subtree sum carries them up (a parent removed later passes them on in turn).
    fn depart(&mut self, dir: &Path, root: &Path, last: u64) {
        let Some(parent) = dir.parent().filter(|p| p.starts_with(root)) else { return };
        if last > 0 {
            let sum = self.departed.entry(parent.to_owned()).or_insert(0);
            *sum = sum.saturating_add(last);
        }
    }

    /// Records this read's own values (`None`: unreadable now, the last value stands) of the
    /// tree's counted nodes and returns each node's subtree sum (`None` for nodes not counted,
    /// or never read).
    fn update(&mut self, tree: &Tree, counted: &[bool], own: &[Option<u64>]) -> Vec<Option<u64>> {
        let root = tree.mount.root.as_path();
        let mut present = HashMap::with_capacity(tree.nodes.len());
        for (index, node) in tree.nodes.iter().enumerate() {
            if !counted[index] {
                continue;
            }
            let value = match (own[index], self.own.get(&node.dir).copied()) {
                // Lower than last time: removed and created again between two reads.
                (Some(now), Some(last)) if now < last => {
                    self.depart(&node.dir, root, last);
                    Some(now)
                }
                (Some(now), _) => Some(now),
                (None, last) => last,
            };
            if let Some(value) = value {
                present.insert(node.dir.clone(), value);
            }
        }
        let mut gone: Vec<PathBuf> = self.own.keys().filter(|dir| !present.contains_key(*dir)).cloned().collect();
        // Deepest first, so a removed parent passes on what its removed children left it.
        gone.sort_by_key(|dir| std::cmp::Reverse(dir.components().count()));
        for dir in gone {
            let last = self.own.get(&dir).copied().unwrap_or(0);
            let left = self.departed.remove(&dir).unwrap_or(0);
            self.depart(&dir, root, last.saturating_add(left));
        }
        self.own = present;
        // What a parent that is not counted was left is never shown: not kept either.
        let own = &self.own;
        self.departed.retain(|dir, _| own.contains_key(dir));
        let mut sums: Vec<Option<u64>> = tree
            .nodes
            .iter()
            .enumerate()
            .map(|(index, node)| {
                let own = self.own.get(&node.dir).copied().filter(|_| counted[index])?;
                Some(own.saturating_add(self.departed.get(&node.dir).copied().unwrap_or(0)))
            })
            .collect();
        // Preorder: children after their parent, so a reverse pass adds each subtree up once.
        for index in (0..tree.nodes.len()).rev() {
            if let (Some(sum), Some(parent)) = (sums[index], tree.nodes[index].parent) {
                if let Some(above) = sums[parent].as_mut() {
                    *above = above.saturating_add(sum);
                }
            }
        }
        sums
    }
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
    v1_oom_kills: V1OomKills,
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
            v1_oom_kills: V1OomKills::default(),
        }
    }

    /// Makes the next read walk the hierarchies again.
    #[cfg(test)]
    pub(super) fn last_walk_for_tests(&mut self) {
        self.last_walk = None;
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
            ranking: Default::default(),
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
                    Version::V1 => {
                        let first = stats.memory.len();
                        let own = read_v1_memory(tree, &mut self.reader, &mut stats.memory, &mut run, errors);
                        let counted = v1_oom_counted(tree);
                        let own = read_v1_oom_kills(tree, &counted, own, &mut self.reader, &mut run, errors);
                        let sums = self.v1_oom_kills.update(tree, &counted, &own);
                        let exported = tree.nodes.iter().enumerate().filter(|(_, n)| n.wanted && !n.gone);
                        // read_v1_memory pushed one entry per wanted node it could read, in order.
                        let mut entries = stats.memory[first..].iter_mut().peekable();
                        for (index, node) in exported {
                            if let Some(entry) = entries.next_if(|e| Arc::ptr_eq(&e.labels, &node.labels)) {
                                entry.events.oom_kill = sums[index];
                            }
                        }
                    }
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
                    let label = label_of(name);
                    if matches!(label, Cow::Owned(_)) {
                        counts.renamed += 1;
                    }
                    let child_path = if path == "/" { format!("/{label}") } else { format!("{path}/{label}") };
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

/// A cgroup directory name as a label: itself when UTF-8, else every byte that is not part of a
/// UTF-8 sequence written as `\xNN` (the cgroup is still walked and read under its real name;
/// only its label is rewritten, and distinct names stay distinct).
fn label_of(name: &std::ffi::OsStr) -> Cow<'_, str> {
    use std::os::unix::ffi::OsStrExt;
    if let Some(text) = name.to_str() {
        return Cow::Borrowed(text);
    }
    let mut out = String::new();
    for chunk in name.as_bytes().utf8_chunks() {
        out.push_str(chunk.valid());
        for byte in chunk.invalid() {
            out.push_str(&format!("\\x{byte:02x}"));
        }
    }
    Cow::Owned(out)
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

/// The nodes whose own v1 `oom_kill` is summed: exported ones and every descendant of one
/// (include/exclude select what is exported, not where the kills happen).
fn v1_oom_counted(tree: &Tree) -> Vec<bool> {
    let mut counted = vec![false; tree.nodes.len()];
    for (index, node) in tree.nodes.iter().enumerate() {
        counted[index] = !node.gone && (node.wanted || node.parent.is_some_and(|p| counted[p]));
    }
    counted
}

/// The own `oom_kill` of every counted node: `own` as [`read_v1_memory`] read it for the exported
/// ones, `memory.oom_control` read here for their descendants that are not exported.
fn read_v1_oom_kills(
    tree: &mut Tree,
    counted: &[bool],
    mut own: Vec<Option<u64>>,
    reader: &mut Reader,
    run: &mut ScanCounts,
    errors: &mut Vec<SourceError>,
) -> Vec<Option<u64>> {
    'nodes: for (index, node) in tree.nodes.iter_mut().enumerate() {
        if !counted[index] || node.wanted {
            continue;
        }
        let mut failed = false;
        let oom = value_or_gone!(
            reader.read(&node.dir, "memory.oom_control", memcg::parse_oom_control, errors, &mut failed),
            reader,
            node,
            run,
            'nodes
        );
        count_failures(run, reader.take_denied(), failed);
        own[index] = oom.and_then(|o| o.oom_kill);
    }
    own
}

/// Reads the exported v1 cgroups into `out`; returns each node's own `oom_kill` (`None` where
/// not read), for [`V1OomKills`] to sum.
fn read_v1_memory(
    tree: &mut Tree,
    reader: &mut Reader,
    out: &mut Vec<CgroupMemory>,
    run: &mut ScanCounts,
    errors: &mut Vec<SourceError>,
) -> Vec<Option<u64>> {
    let mut own_oom_kills = vec![None; tree.nodes.len()];
    // Every v1 memory cgroup, the root included, has all four files: a missing one means the
    // cgroup was removed.
    'nodes: for (index, node) in tree.nodes.iter_mut().enumerate().filter(|(_, n)| n.wanted && !n.gone) {
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
            reader.read_fields(dir, "memory.stat", memcg::parse_v1_stat_fields, errors, &mut failed),
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
        own_oom_kills[index] = oom.as_ref().and_then(|o| o.oom_kill);
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
            // Summed over the subtree by the caller (V1OomKills).
            events: MemoryEvents { max: failcnt, oom: None, oom_kill: None },
        });
    }
    own_oom_kills
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
        let stat =
            match reader.read_fields(&node.dir, "memory.stat", memcg::parse_v2_stat_fields, errors, &mut node_failed) {
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
