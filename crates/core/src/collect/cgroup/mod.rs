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

mod detect;
mod read;
mod render;
mod settings;

use std::sync::Arc;

use crate::charge::Charge;
use crate::collect::settings::{Configured, Context, Invalid};
use crate::exposition::Exposition;
use crate::trend::{Observation, Scope};
use memlock_kernel::memcg::Limit;
use memlock_kernel::rdma_cgroup::RdmaDevice;

pub(crate) use detect::detect;
pub use detect::{Detected, Layout, Version};
pub use read::CgroupCollector;
pub use settings::CgroupConfig;
pub(crate) use settings::RawCgroupCollector;

/// Labels of one cgroup: `cgroup` first, then the attribution labels.
pub(crate) type CgroupLabels = Arc<Vec<(&'static str, String)>>;

/// Memory events of a cgroup and its descendants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryEvents {
    /// Usage hit the limit (v2 `max`, v1 `memory.failcnt`).
    pub max: Option<u64>,
    /// The OOM path was entered (v2 only).
    pub oom: Option<u64>,
    /// Processes killed by the OOM killer (v2 `oom_kill`; v1 `oom_control`'s `oom_kill` summed
    /// over the subtree, which the kernel does not do on v1).
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
    pub(crate) swap_limit: Option<Limit>,
    pub(crate) unevictable_bytes: Option<u64>,
    pub events: MemoryEvents,
}

/// What a cgroup is charged against its effective memory limit: the working set (usage minus
/// inactive page cache, which the kernel reclaims before a charge fails), or the raw usage where
/// `memory.stat` could not be read (a larger value: it errs early). With what was measured, for
/// texts. `None` when neither is known; the limit is `None` when unlimited.
pub fn working_set_charge(
    working_set_bytes: Option<u64>,
    usage_bytes: Option<u64>,
    limit_bytes: Option<u64>,
) -> Option<(Charge, &'static str)> {
    let (used, what) = match (working_set_bytes, usage_bytes) {
        (Some(working_set), _) => (working_set, "working set"),
        (None, Some(usage)) => (usage, "usage"),
        (None, None) => return None,
    };
    Some((Charge::enforced(used, limit_bytes), what))
}

impl CgroupMemory {
    /// See [`working_set_charge`]: the one definition the trend, the fast path and `check` use.
    pub fn charge(&self) -> Option<Charge> {
        working_set_charge(self.working_set_bytes, self.usage_bytes, self.limit.and_then(Limit::bytes)).map(|(c, _)| c)
    }

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
    /// Walked with a directory name that is not UTF-8, exported with its label rewritten
    /// (`\xNN` for each invalid byte), latest walk.
    pub renamed: u64,
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
    pub(crate) memory_version: Option<Version>,
    pub(crate) memory_disabled: bool,
    pub rdma_version: Option<Version>,
    /// In walk order (parents before children, siblings sorted by name).
    pub memory: Vec<CgroupMemory>,
    pub rdma: Vec<CgroupRdma>,
    pub scan: ScanCounts,
    /// The series budget's orders of `memory` and `rdma`, made by the first render.
    ranking: crate::budget::Ranked<render::Ranking>,
}

// Files of a v2 cgroup learned to be absent (the root has none of them; swap files need swap

impl super::Stats for CgroupStats {
    fn render(&self, out: &mut Exposition, grants: &crate::budget::Grants) {
        self.render_granted(out, grants)
    }

    fn claims(&self) -> Vec<crate::budget::Claim> {
        CgroupStats::claims(self)
    }

    fn exported_trends(&self, grants: &crate::budget::Grants) -> Option<std::collections::HashSet<String>> {
        Some(self.exported_trend_ids(grants))
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

impl Configured for CgroupCollector {
    type Raw = RawCgroupCollector;
    type Settings = CgroupConfig;

    fn key_template() -> RawCgroupCollector {
        RawCgroupCollector::key_template()
    }

    fn validate(raw: RawCgroupCollector) -> Result<CgroupConfig, Invalid> {
        raw.validate()
    }

    fn build(context: &Context, settings: &CgroupConfig) -> Self {
        CgroupCollector::new(context.roots.clone(), settings.clone())
    }
}

/// This collector's entry in the registry ([`crate::collect::REGISTRY`]): its name, flags,
/// default interval and settings.
pub(crate) const REGISTRATION: super::Registration = super::Registration {
    name: "cgroup",
    reads: "memory usage and limits per cgroup",
    default_interval: "1s",
    default_enabled: true,
    settings: super::settings::of::<CgroupCollector>(),
};

#[cfg(test)]
mod tests {
    use super::detect::Mount;
    use super::*;
    use memlock_kernel::fsroot::Roots;
    use std::path::PathBuf;
    use std::time::Duration;

    /// A scratch sysfs/procfs pair, removed on drop.
    struct Scratch {
        root: PathBuf,
        _dir: tempfile::TempDir,
    }

    impl Scratch {
        fn new(name: &str) -> Self {
            let tmp = tempfile::Builder::new().prefix(&format!("memlock-cgroup-{name}-")).tempdir().unwrap();
            let root = tmp.path().to_path_buf();
            std::fs::create_dir_all(root.join("sys/fs/cgroup")).unwrap();
            std::fs::create_dir_all(root.join("proc")).unwrap();
            Self { root, _dir: tmp }
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

    /// v1 counts an OOM kill only in the victim's own cgroup (memcg_memory_event,
    /// include/linux/memcontrol.h, walks up only on v2), so a job's cgroup alone would show 0
    /// kills for a rank killed in its step. The figure is summed over the subtree, excluded descendants
    /// included, and never goes down: not when a step cgroup is removed, nor when a read fails.
    #[test]
    fn v1_oom_kills_are_summed_over_descendants_and_never_go_down() {
        let scratch = Scratch::new("v1-oom-subtree");
        let oom = |rel: &str, kills: u64| {
            scratch.write(
                &format!("sys/fs/cgroup/memory{rel}/memory.oom_control"),
                &format!("oom_kill_disable 0\nunder_oom 0\noom_kill {kills}\n"),
            )
        };
        for rel in ["", "/job", "/job/step_0", "/job/step_1", "/job/hidden", "/other"] {
            scratch.v1_cgroup(rel, 4096, UNLIMITED);
        }
        oom("", 1);
        oom("/job/step_0", 2);
        oom("/job/hidden", 5);
        oom("/other", 1);
        let roots = Roots { procfs: scratch.root.join("proc"), sysfs: scratch.root.join("sys") };
        let config = CgroupConfig {
            full_scan_interval: Duration::from_secs(3600),
            include: vec![],
            exclude: vec![regex::Regex::new("^/job/hidden$").unwrap()],
            max_depth: 12,
        };
        let mut collector = CgroupCollector::new(roots, config);
        let mut errors = Vec::new();
        let kills = |stats: &CgroupStats| -> Vec<(String, Option<u64>)> {
            stats.memory.iter().map(|m| (m.path().to_owned(), m.events.oom_kill)).collect()
        };
        let expect = |pairs: &[(&str, u64)]| -> Vec<(String, Option<u64>)> {
            pairs.iter().map(|(p, k)| (p.to_string(), Some(*k))).collect()
        };
        let stats = collector.read(&mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            kills(&stats),
            expect(&[("/", 9), ("/job", 7), ("/job/step_0", 2), ("/job/step_1", 0), ("/other", 1)]),
            "the excluded /job/hidden counts in /job"
        );
        // A new kill in step_1; step_0 ends and its cgroup is removed: its 2 kills stay above.
        oom("/job/step_1", 1);
        std::fs::remove_dir_all(scratch.cgroup_fs().join("memory/job/step_0")).unwrap();
        let stats = collector.read(&mut errors);
        assert_eq!(kills(&stats), expect(&[("/", 10), ("/job", 8), ("/job/step_1", 1), ("/other", 1)]));
        // An unreadable file is an error, and the last value stands.
        scratch.write("sys/fs/cgroup/memory/job/step_1/memory.oom_control", "oom_kill_disable 0\noom_kill x\n");
        let stats = collector.read(&mut errors);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(stats.memory[1].events.oom_kill, Some(8));
        // Removed and created again between two reads (own count back to 0): nothing lost.
        oom("/job/step_1", 0);
        let stats = collector.read(&mut errors);
        assert_eq!(kills(&stats), expect(&[("/", 10), ("/job", 8), ("/job/step_1", 0), ("/other", 1)]));
        // The next walk changes nothing in the sums.
        collector.last_walk_for_tests();
        let stats = collector.read(&mut errors);
        assert_eq!(kills(&stats), expect(&[("/", 10), ("/job", 8), ("/job/step_1", 0), ("/other", 1)]));
    }

    /// A cgroup directory whose name is not UTF-8 must not be skipped with its whole subtree,
    /// silently. It is walked and read under its real name, and exported with the invalid
    /// bytes written as \xNN, counted.
    #[test]
    fn names_that_are_not_utf8_are_exported_rewritten_with_their_subtree() {
        use std::os::unix::ffi::OsStrExt;
        let scratch = Scratch::new("non-utf8");
        scratch.v1_cgroup("", 1000, UNLIMITED);
        let memory = scratch.cgroup_fs().join("memory");
        let odd = memory.join(std::ffi::OsStr::from_bytes(b"job\xff\xfe7"));
        std::fs::create_dir_all(odd.join("step_0")).unwrap();
        for dir in [odd.clone(), odd.join("step_0")] {
            for (file, text) in [
                ("memory.usage_in_bytes", "4096\n"),
                ("memory.stat", "total_inactive_file 0\nhierarchical_memory_limit 1048576\n"),
                ("memory.failcnt", "0\n"),
                ("memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n"),
            ] {
                std::fs::write(dir.join(file), text).unwrap();
            }
        }
        let mut errors = Vec::new();
        let stats = scratch.collector(Duration::ZERO).read(&mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(paths(&stats), ["/", "/job\\xff\\xfe7", "/job\\xff\\xfe7/step_0"]);
        assert_eq!(stats.memory[2].usage_bytes, Some(4096), "read under its real name");
        assert_eq!(stats.scan.renamed, 1);
        let mut out = Exposition::new();
        stats.render(&mut out);
        assert!(out.finish().contains("memlock_cgroup_scan_cgroups_renamed 1"));
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
        assert_eq!(observations[2].charge.headroom_bytes(), Some(524288 - 4096));
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
        let watched = |id: &str| {
            observations.iter().find(|o| o.id == id).map(|o| (o.charge.used_bytes, o.charge.headroom_bytes()))
        };
        assert_eq!(watched("/loader"), Some((50 << 20, Some(974 << 20))));
        assert_eq!(watched("/locker"), Some((950 << 20, Some(74 << 20))));
        assert_eq!(watched("/stale"), Some((0, Some(1 << 30))));
        assert_eq!(watched("/nolru"), Some((4096, Some((1 << 30) - 4096))), "without a working set, usage stands in");

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
