//! The rules of `check`, each against the machine states that pass, warn and fail.

use super::*;
use crate::machine::{net_dev_interfaces, CgroupHeadroom};
use crate::nccl::model::{self, Estimate, Inputs};
use memlock_kernel::meminfo;
use pid_limits::{Limit, MemlockLimits};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn machine() -> Machine {
    Machine {
        pid: "4242".into(),
        limits: Some(MemlockLimits { soft: Limit::Unlimited, hard: Limit::Unlimited }),
        ipc_lock: Some(false),
        initial_user_ns: Some(true),
        meminfo: meminfo::Meminfo {
            mem_total: Some(512 * GIB),
            mem_available: Some(400 * GIB),
            hugepages_total: Some(0),
            hugepages_free: Some(0),
            hugepages_reserved: Some(0),
            hugepage_size: Some(2 * MIB),
            commit_limit: Some(300 * GIB),
            committed_as: Some(10 * GIB),
            ..Default::default()
        },
        overcommit_mode: Some(0),
        max_map_count: Some(65530),
        environment: env(&[("NCCL_DEBUG", "WARN")]),
        cgroup: Some(CgroupHeadroom {
            path: "/slurm/uid_1000/job_1870".into(),
            usage_bytes: Some(GIB),
            working_set_bytes: None,
            limit_bytes: Some(200 * GIB),
        }),
        rdma: Vec::new(),
        nic_caps: None,
        interfaces: None,
    }
}

fn find<'a>(findings: &'a [Finding], id: &str) -> &'a Finding {
    findings.iter().find(|f| f.id == id).unwrap_or_else(|| panic!("{id} missing: {findings:?}"))
}

fn run_checks(m: &Machine) -> Vec<Finding> {
    evaluate(m, &default_estimate(), 2.0)
}

#[test]
fn a_healthy_node_passes_everything() {
    let findings = run_checks(&machine());
    assert!(findings.iter().all(|f| f.status == Status::Pass), "{findings:?}");
}

#[test]
fn the_default_8_mib_limit_fails_with_the_fix() {
    let m = Machine {
        limits: Some(MemlockLimits { soft: Limit::Bytes(8 * MIB), hard: Limit::Bytes(8 * MIB) }),
        ..machine()
    };
    let findings = run_checks(&m);
    let soft = find(&findings, "memlock.soft");
    assert_eq!(soft.status, Status::Fail);
    assert!(soft.fix.contains("ulimit -l unlimited") && soft.fix.contains("LimitMEMLOCK"));
    assert_eq!(find(&findings, "memlock.hard").status, Status::Warn);
    let zero = Machine { limits: Some(MemlockLimits { soft: Limit::Bytes(0), hard: Limit::Bytes(0) }), ..machine() };
    assert!(find(&run_checks(&zero), "memlock.soft").measured.contains("EPERM"));
}

#[test]
fn cap_ipc_lock_exempts_only_in_the_initial_user_namespace() {
    let low = Some(MemlockLimits { soft: Limit::Bytes(8 * MIB), hard: Limit::Bytes(8 * MIB) });
    let host = Machine { limits: low, ipc_lock: Some(true), ..machine() };
    assert_eq!(find(&run_checks(&host), "memlock.soft").status, Status::Pass);
    let userns = Machine { limits: low, ipc_lock: Some(true), initial_user_ns: Some(false), ..machine() };
    let findings = run_checks(&userns);
    assert_eq!(find(&findings, "memlock.soft").status, Status::Fail);
    assert_eq!(find(&findings, "memlock.cap_ipc_lock").status, Status::Warn);
}

#[test]
fn memory_hugepages_and_overcommit() {
    let mut m = machine();
    m.meminfo.mem_available = Some(GIB);
    let findings = run_checks(&m);
    assert_eq!(find(&findings, "memory.available").status, Status::Warn, "between 1x and 2x the need");
    m.meminfo.mem_available = Some(GIB / 2);
    assert_eq!(find(&run_checks(&m), "memory.available").status, Status::Fail);

    let mut squeezed = machine();
    squeezed.meminfo.hugepages_total = Some(200_000);
    squeezed.meminfo.hugepages_free = Some(200_000);
    squeezed.meminfo.mem_available = Some(GIB);
    let h = run_checks(&squeezed);
    assert_eq!(find(&h, "memory.hugepages").status, Status::Fail);
    assert!(find(&h, "memory.hugepages").fix.contains("vm.nr_hugepages"));

    // Strict mode with headroom passes (the setting alone is an info alert); under the rules'
    // headroom ratio it warns as MemlockNodeCommitHeadroomLow does; under the need it fails.
    let mut strict = machine();
    strict.overcommit_mode = Some(2);
    assert_eq!(find(&run_checks(&strict), "vm.overcommit_memory").status, Status::Pass);
    strict.meminfo.committed_as = Some(290 * GIB);
    let findings = run_checks(&strict);
    let low = find(&findings, "vm.overcommit_memory");
    assert_eq!(low.status, Status::Warn, "{low:?}");
    assert!(low.measured.contains(for_job::ALERT_COMMIT_HEADROOM), "{low:?}");
    strict.meminfo.committed_as = Some(300 * GIB - MIB);
    assert_eq!(find(&run_checks(&strict), "vm.overcommit_memory").status, Status::Fail);
    // Modes 0 and 1 do not enforce CommitLimit: Committed_AS past it is no finding.
    strict.overcommit_mode = Some(0);
    strict.meminfo.committed_as = Some(600 * GIB);
    assert_eq!(find(&run_checks(&strict), "vm.overcommit_memory").status, Status::Pass);
}

#[test]
fn a_tight_cgroup_fails() {
    let mut m = machine();
    m.cgroup = Some(CgroupHeadroom {
        path: "/kubepods/pod1".into(),
        usage_bytes: Some(7 * GIB + GIB / 2),
        working_set_bytes: None,
        limit_bytes: Some(8 * GIB),
    });
    let f = run_checks(&m);
    assert_eq!(find(&f, "cgroup.memory").status, Status::Fail);
    assert!(find(&f, "cgroup.memory").measured.starts_with("/kubepods/pod1: 512.0 MiB of its 8.0 GiB limit free"));
    m.cgroup =
        Some(CgroupHeadroom { path: "/".into(), usage_bytes: Some(GIB), working_set_bytes: None, limit_bytes: None });
    assert_eq!(find(&run_checks(&m), "cgroup.memory").status, Status::Pass);
}

/// A job that staged its dataset through page cache: usage is at the limit, but the kernel
/// reclaims that cache before it refuses a charge, so only the working set takes room.
#[test]
fn page_cache_in_the_cgroup_is_not_counted_against_it() {
    let mut m = machine();
    let cached = CgroupHeadroom {
        path: "/slurm/job_2".into(),
        usage_bytes: Some(64 * GIB - MIB),
        working_set_bytes: Some(GIB),
        limit_bytes: Some(64 * GIB),
    };
    m.cgroup = Some(cached.clone());
    let f = run_checks(&m);
    assert_eq!(find(&f, "cgroup.memory").status, Status::Pass);
    assert!(
        find(&f, "cgroup.memory")
            .measured
            .starts_with("/slurm/job_2: 63.0 GiB of its 64.0 GiB limit free (working set 1.0 GiB)"),
        "{:?}",
        find(&f, "cgroup.memory")
    );
    // Without memory.stat, usage is all there is to go on.
    m.cgroup = Some(CgroupHeadroom { working_set_bytes: None, ..cached });
    let f = run_checks(&m);
    assert_eq!(find(&f, "cgroup.memory").status, Status::Fail);
    assert!(find(&f, "cgroup.memory").measured.contains("(usage 64.0 GiB)"), "{:?}", find(&f, "cgroup.memory"));
}

#[test]
fn rdma_ports_and_firmware() {
    use memlock_kernel::rdma_sysfs::Numbered;
    let port = |n: u32, state: u32, name: &str| memlock_core::collect::rdma_sysfs::SysfsPort {
        number: n,
        state: Some(Numbered { value: state, name: name.into() }),
        ..Default::default()
    };
    let device = |name: &str, fw: &str, ports| SysfsDevice {
        name: name.into(),
        hca_type: Some("MT4129".into()),
        fw_ver: Some(fw.into()),
        ports,
        ..Default::default()
    };
    let devices = vec![
        device("mlx5_0", "28.39.1002", vec![port(1, 4, "ACTIVE")]),
        device("mlx5_1", "28.40.1000", vec![port(1, 1, "DOWN")]),
    ];
    let f = rdma(&devices, &Environment::default());
    assert_eq!(find(&f, "rdma.port.mlx5_0.1").status, Status::Pass);
    assert_eq!(find(&f, "rdma.port.mlx5_1.1").status, Status::Warn, "NCCL skips inactive ports it was not told to use");
    assert_eq!(find(&f, "rdma.firmware.MT4129").status, Status::Warn);
    // NCCL_IB_HCA names a port that is down: NCCL never opens it (net_ib/init.cc skips ports
    // that are not ACTIVE): a WARN, and no port is left for NCCL.
    let selected = rdma(&devices, &env(&[("NCCL_IB_HCA", "mlx5_1:1")]));
    let down = find(&selected, "rdma.port.mlx5_1.1");
    assert_eq!(down.status, Status::Warn);
    assert!(down.measured.contains("NCCL_IB_HCA selects it, but NCCL skips"), "{down:?}");
    assert!(!selected.iter().any(|f| f.id == "rdma.port.mlx5_0.1"));
    assert_eq!(find(&selected, "rdma.selected").status, Status::Warn, "NCCL falls back to sockets");
    let ib_only = rdma(&devices, &env(&[("NCCL_IB_HCA", "mlx5_1:1"), ("NCCL_NET", "ib")]));
    assert_eq!(find(&ib_only, "rdma.selected").status, Status::Fail, "NCCL_NET=IB: init fails");
    assert!(!f.iter().any(|f| f.id == "rdma.selected"), "mlx5_0:1 is ACTIVE");
    let excluded = rdma(&devices, &env(&[("NCCL_IB_HCA", "^mlx5_1")]));
    assert!(!excluded.iter().any(|f| f.id == "rdma.port.mlx5_1.1"));
    assert_eq!(find(&rdma(&[], &Environment::default()), "rdma.devices").status, Status::Pass);
    // Per port: a second port that is down and not selected is none of NCCL's business.
    let two_ports = vec![device("mlx5_0", "28.39.1002", vec![port(1, 4, "ACTIVE"), port(2, 1, "DOWN")])];
    let f = rdma(&two_ports, &env(&[("NCCL_IB_HCA", "mlx5_0:1")]));
    assert_eq!(find(&f, "rdma.port.mlx5_0.1").status, Status::Pass);
    assert!(!f.iter().any(|f| f.id == "rdma.port.mlx5_0.2"), "{f:?}");
    assert!(f.iter().all(|f| f.status != Status::Fail));
    let f = rdma(&two_ports, &env(&[("NCCL_IB_HCA", "^mlx5_0:2")]));
    assert!(!f.iter().any(|f| f.id == "rdma.port.mlx5_0.2"), "excluded per port");
    // Spaces are kept: " mlx5_0" selects nothing.
    let f = rdma(&two_ports, &env(&[("NCCL_IB_HCA", " mlx5_0")]));
    assert_eq!(find(&f, "rdma.selected").status, Status::Warn);
    // A prefix that is also a device's whole name selects more.
    let many: Vec<SysfsDevice> =
        ["mlx5_1", "mlx5_10", "mlx5_11"].iter().map(|n| device(n, "28.39.1002", vec![port(1, 4, "ACTIVE")])).collect();
    let f = rdma(&many, &env(&[("NCCL_IB_HCA", "mlx5_1")]));
    let extra = find(&f, "rdma.ib_hca");
    assert_eq!(extra.status, Status::Warn);
    assert!(extra.measured.contains("also selects mlx5_10:1, mlx5_11:1"), "{extra:?}");
    assert!(!rdma(&many, &env(&[("NCCL_IB_HCA", "=mlx5_1")])).iter().any(|f| f.id == "rdma.ib_hca"));
    assert!(!rdma(&many, &env(&[("NCCL_IB_HCA", "mlx5")])).iter().any(|f| f.id == "rdma.ib_hca"), "a bare prefix");
    assert!(!ib_hca_selects(Some(b"=mlx5_1"), "mlx5_10", 1));
    assert!(ib_hca_selects(Some(b"mlx5_1"), "mlx5_10", 1), "prefix match, as NCCL does");
    assert!(ib_hca_selects(Some(b"mlx5_1:2"), "mlx5_1", 2) && !ib_hca_selects(Some(b"mlx5_1:2"), "mlx5_1", 1));
}

fn with(change: impl FnOnce(&mut Machine)) -> Machine {
    let mut m = machine();
    change(&mut m);
    m
}

fn env(pairs: &[(&str, &str)]) -> Environment {
    Environment::from_pairs(pairs.iter().map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec())))
}

/// 2 nodes x 8 ranks x 8 NICs, NCCL's defaults, GPUDirect off: 611.4 MiB of host memory per
/// node, 76.4 MiB for the busiest rank (docs/check.md, case A).
fn default_estimate() -> Estimate {
    model::estimate(&Inputs::new(2, 8, 8))
}

fn hca(name: &str, fw: &str, state: Option<(u32, &str)>) -> SysfsDevice {
    let state = state.map(|(value, name)| memlock_kernel::rdma_sysfs::Numbered { value, name: name.into() });
    let port = memlock_core::collect::rdma_sysfs::SysfsPort { number: 1, state, ..Default::default() };
    SysfsDevice {
        name: name.into(),
        hca_type: Some("MT4129".into()),
        fw_ver: Some(fw.into()),
        ports: vec![port],
        ..Default::default()
    }
}

/// Every WARN and FAIL the checks can emit, each from the machine state that causes it, with
/// the words its fix must contain. `rdma.devices` is the one finding that is only ever PASS.
#[test]
fn every_failure_mode_gives_its_status_and_fix() {
    let low = |soft, hard| Some(MemlockLimits { soft: Limit::Bytes(soft), hard: Limit::Bytes(hard) });
    let limit_fix = "`ulimit -l unlimited` via /etc/security/limits.conf memlock, systemd LimitMEMLOCK=infinity";
    let link_fix = "bring the link up (cable, switch port, subnet manager for InfiniBand)";
    let debug_fix = "set NCCL_DEBUG=WARN (or INFO) so the failing ibv_reg_mr call and its errno are logged";
    let cases: Vec<(Machine, &str, Status, &str)> = vec![
        (with(|m| m.limits = low(8 * MIB, 8 * MIB)), "memlock.soft", Status::Fail, limit_fix),
        (with(|m| m.limits = low(0, 0)), "memlock.soft", Status::Fail, limit_fix),
        (
            with(|m| m.limits = low(8 * MIB, 8 * MIB)),
            "memlock.hard",
            Status::Warn,
            "raise the hard limit where the job is started",
        ),
        (
            with(|m| (m.ipc_lock, m.initial_user_ns) = (Some(true), Some(false))),
            "memlock.cap_ipc_lock",
            Status::Warn,
            "rely on the memlock limit, not on the capability",
        ),
        (
            with(|m| m.ipc_lock = None),
            "memlock.cap_ipc_lock",
            Status::Warn,
            "run the check with access to /proc/PID/status",
        ),
        (
            with(|m| m.meminfo.mem_available = Some(GIB)),
            "memory.available",
            Status::Warn,
            "little margin: free memory (drop caches",
        ),
        (
            with(|m| m.meminfo.mem_available = Some(GIB / 2)),
            "memory.available",
            Status::Fail,
            "free memory or run fewer ranks on this node",
        ),
        (
            with(|m| {
                m.cgroup = Some(CgroupHeadroom {
                    path: "/slurm/job_1".into(),
                    usage_bytes: Some(199 * GIB),
                    working_set_bytes: None,
                    limit_bytes: Some(200 * GIB),
                })
            }),
            "cgroup.memory",
            Status::Warn,
            "little margin: raise the container's or job's memory limit",
        ),
        (
            with(|m| {
                m.cgroup = Some(CgroupHeadroom {
                    path: "/slurm/job_1".into(),
                    usage_bytes: Some(7 * GIB + GIB / 2),
                    working_set_bytes: None,
                    limit_bytes: Some(8 * GIB),
                })
            }),
            "cgroup.memory",
            Status::Fail,
            "registered buffers are charged to the cgroup: raise its memory limit (pod limits, Slurm --mem)",
        ),
        (
            with(|m| {
                (m.meminfo.hugepages_total, m.meminfo.hugepages_free, m.meminfo.mem_available) =
                    (Some(200_000), Some(200_000), Some(GIB))
            }),
            "memory.hugepages",
            Status::Fail,
            "lower vm.nr_hugepages (sysctl -w vm.nr_hugepages=N)",
        ),
        (
            with(|m| (m.overcommit_mode, m.meminfo.committed_as) = (Some(2), Some(290 * GIB))),
            "vm.overcommit_memory",
            Status::Warn,
            "little commit headroom: the next mappings and forks fail with ENOMEM",
        ),
        (
            with(|m| (m.overcommit_mode, m.meminfo.commit_limit) = (Some(2), None)),
            "vm.overcommit_memory",
            Status::Warn,
            "strict overcommit makes large allocations fail early: prefer 0",
        ),
        (
            with(|m| (m.overcommit_mode, m.meminfo.committed_as) = (Some(2), Some(300 * GIB - MIB))),
            "vm.overcommit_memory",
            Status::Fail,
            "sysctl -w vm.overcommit_memory=0 or raise vm.overcommit_ratio",
        ),
        (
            with(|m| m.max_map_count = Some(65_529)),
            "vm.max_map_count",
            Status::Warn,
            "sysctl -w vm.max_map_count=262144",
        ),
        (
            with(|m| (m.meminfo.cma_total, m.meminfo.cma_free) = (Some(256 * MIB), Some(512 * MIB))),
            "memory.cma",
            Status::Warn,
            "check cma=/kho= on the kernel command line",
        ),
        (
            with(|m| m.environment = env(&[("NCCL_DEBUG", "WARN"), ("NCCL_IB_MR_RANGE", "1")])),
            "nccl.env.NCCL_IB_MR_RANGE",
            Status::Warn,
            "memlock limits are fixed with ulimit -l; remove it",
        ),
        (
            with(|m| m.environment = env(&[("NCCL_DEBUG", "WARN"), ("NCCL_NCHANNELS", "8")])),
            "nccl.env.NCCL_NCHANNELS",
            Status::Warn,
            "use NCCL_MIN_CTAS / NCCL_MAX_CTAS",
        ),
        (
            with(|m| m.environment = env(&[("NCCL_DEBUG", "WARN"), ("NCCL_REGISTER_BUFFERS", "1")])),
            "nccl.env.NCCL_REGISTER_BUFFERS",
            Status::Warn,
            "registration is NCCL_LOCAL_REGISTER / NCCL_GRAPH_REGISTER; remove it",
        ),
        (
            with(|m| m.environment = env(&[("NCCL_DEBUG", "WARN"), ("NCCL_BUFFSIZE", "4M")])),
            "nccl.env.NCCL_BUFFSIZE",
            Status::Fail,
            "write the whole number in bytes (4194304, or 0x400000, not 4M)",
        ),
        (
            with(|m| m.environment = env(&[("NCCL_DEBUG", "WARN"), ("NCCL_IB_QPS_PER_CONNECTION", "0")])),
            "nccl.env.NCCL_IB_QPS_PER_CONNECTION",
            Status::Fail,
            "NCCL needs 1 to 128 QPs per connection",
        ),
        (
            with(|m| m.environment = env(&[("NCCL_DEBUG", "WARN"), ("NCCL_IB_QPS_PER_CONNECTION", "129")])),
            "nccl.env.NCCL_IB_QPS_PER_CONNECTION",
            Status::Fail,
            "NCCL needs 1 to 128 QPs per connection",
        ),
        (
            with(|m| m.environment = env(&[("NCCL_DEBUG", "WARN"), ("NCCL_IB_HCAA", "mlx5_0")])),
            "nccl.env.NCCL_IB_HCAA",
            Status::Warn,
            "not a variable NCCL 2.30.7 reads: check the spelling",
        ),
        (with(|m| m.environment = Environment::default()), "nccl.debug", Status::Warn, debug_fix),
        (with(|m| m.environment = env(&[("NCCL_DEBUG", "VERSION")])), "nccl.debug", Status::Warn, debug_fix),
        (
            with(|m| m.rdma = vec![hca("mlx5_0", "28.39.1002", Some((1, "DOWN")))]),
            "rdma.port.mlx5_0.1",
            Status::Warn,
            link_fix,
        ),
        (with(|m| m.rdma = vec![hca("mlx5_0", "28.39.1002", None)]), "rdma.port.mlx5_0.1", Status::Warn, link_fix),
        (
            with(|m| {
                m.rdma = vec![hca("mlx5_0", "28.39.1002", Some((1, "DOWN")))];
                m.environment = env(&[("NCCL_DEBUG", "WARN"), ("NCCL_IB_HCA", "=mlx5_0")]);
            }),
            "rdma.port.mlx5_0.1",
            Status::Warn,
            link_fix,
        ),
        (
            with(|m| {
                m.rdma = vec![
                    hca("mlx5_0", "28.39.1002", Some((4, "ACTIVE"))),
                    hca("mlx5_1", "28.40.1000", Some((4, "ACTIVE"))),
                ]
            }),
            "rdma.firmware.MT4129",
            Status::Warn,
            "update all HCAs of one type to the same firmware",
        ),
    ];
    let e = default_estimate();
    for (m, id, status, fix) in cases {
        let findings = evaluate(&m, &e, 2.0);
        assert_printed(findings, id, status, fix);
    }
    let mut findings = run_checks(&machine());
    environment_unreadable(&mut findings, "/proc/4242/environ: Permission denied (os error 13)");
    assert!(
        !findings.iter().any(|f| f.id == "nccl.debug"),
        "the checker's own environment is not judged: {findings:?}"
    );
    assert_printed(
        findings,
        "nccl.environment",
        Status::Warn,
        "run the check as the job's user (or root) to see its NCCL_* variables",
    );
}

/// The finding `id` has `status`, its fix contains `fix`, and the table prints both.
fn assert_printed(findings: Vec<Finding>, id: &str, status: Status, fix: &str) {
    let found = find(&findings, id).clone();
    assert_eq!(found.status, status, "{found:?}");
    assert!(found.fix.contains(fix), "{id}: fix {:?} lacks {fix:?}", found.fix);
    let report = Report {
        pid: "4242".into(),
        need_per_process_bytes: 0,
        need_per_node_bytes: 0,
        need_per_node_host_bytes: 0,
        model: ModelSummary::default(),
        findings,
        launch: None,
        facts: Vec::new(),
    };
    let text = render_text(&report);
    let line = text
        .lines()
        .position(|l| l.starts_with(&format!("{}  {id} ", status.as_str())))
        .unwrap_or_else(|| panic!("no {id} line:\n{text}"));
    let next = text.lines().nth(line + 1).unwrap_or_default();
    assert_eq!(next.trim_start(), format!("fix: {}", found.fix), "{text}");
}

#[test]
fn what_passes_needs_no_fix_and_the_rest_have_one() {
    let e = default_estimate();
    let machines = [
        machine(),
        with(|m| m.limits = Some(MemlockLimits { soft: Limit::Bytes(0), hard: Limit::Bytes(8 * MIB) })),
        with(|m| (m.ipc_lock, m.initial_user_ns, m.overcommit_mode, m.max_map_count) = (None, None, Some(2), Some(1))),
        with(|m| {
            (m.meminfo.mem_available, m.meminfo.cma_total, m.meminfo.cma_free) = (Some(GIB), Some(MIB), Some(2 * MIB))
        }),
        with(|m| m.environment = env(&[("NCCL_IB_MR_RANGE", "1"), ("NCCL_BUFFSIZE", "x"), ("NCCL_FOO", "1")])),
        with(|m| m.rdma = vec![hca("mlx5_0", "1", Some((1, "DOWN"))), hca("mlx5_1", "2", None)]),
    ];
    for m in &machines {
        for f in evaluate(m, &e, 2.0) {
            assert_eq!(f.status == Status::Pass, f.fix.is_empty(), "{f:?}");
        }
    }
}

#[test]
fn max_map_count_and_cma_boundaries() {
    assert_eq!(
        find(&run_checks(&with(|m| m.max_map_count = Some(65_530))), "vm.max_map_count").status,
        Status::Pass,
        "the kernel default"
    );
    assert!(
        !run_checks(&with(|m| m.max_map_count = None)).iter().any(|f| f.id == "vm.max_map_count"),
        "unreadable: no finding"
    );
    let cma = |total, free| run_checks(&with(|m| (m.meminfo.cma_total, m.meminfo.cma_free) = (total, free)));
    let equal = cma(Some(256 * MIB), Some(256 * MIB));
    assert_eq!(find(&equal, "memory.cma").status, Status::Pass);
    assert_eq!(find(&equal, "memory.cma").measured, "CmaFree 256.0 MiB of 256.0 MiB");
    let above = cma(Some(256 * MIB), Some(256 * MIB + 4096));
    assert_eq!(find(&above, "memory.cma").status, Status::Warn);
    assert!(find(&above, "memory.cma").measured.starts_with("CmaFree 256.0 MiB > CmaTotal 256.0 MiB"));
    assert_eq!(find(&cma(Some(0), Some(0)), "memory.cma").status, Status::Pass, "a kernel with CMA but no area");
    assert!(!cma(None, None).iter().any(|f| f.id == "memory.cma"), "no CMA in the kernel: no finding");
}

#[test]
fn socket_ifname_that_matches_no_interface_fails() {
    let dev = "Inter-|   Receive                                                |  Transmit\n \
        face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls \
        carrier compressed\n    lo: 1 2 0 0 0 0 0 0 1 2 0 0 0 0 0 0\n  eth0: 3 4 0 0 0 0 0 0 3 4 0 0 0 0 0 0\n\
        ib0: 5 6 0 0 0 0 0 0 5 6 0 0 0 0 0 0\n";
    assert_eq!(net_dev_interfaces(dev), ["lo", "eth0", "ib0"]);
    let run = |vars: &[(&str, &str)]| {
        let m = with(|m| {
            m.environment = env(vars);
            m.interfaces = Some(net_dev_interfaces(dev));
        });
        evaluate(&m, &model::estimate(&Inputs::new(2, 8, 8)), 2.0)
    };
    for ok in ["eth", "=eth0", "^lo", "ib0,eth1", "x"] {
        let f = run(&[("NCCL_SOCKET_IFNAME", ok)]);
        assert!(f.iter().all(|f| f.id != "nccl.env.NCCL_SOCKET_IFNAME" || f.status != Status::Fail), "{ok}");
    }
    for bad in ["ens", "=eth", "^lo,eth0,ib0", "eth0 "] {
        let f = run(&[("NCCL_SOCKET_IFNAME", bad)]);
        let found = find(&f, "nccl.env.NCCL_SOCKET_IFNAME");
        assert_eq!(found.status, Status::Fail, "{bad}: {found:?}");
        assert!(found.measured.contains("matches none of the job's interfaces (lo, eth0, ib0)"), "{found:?}");
    }
    let f = run(&[("NCCL_SOCKET_IFNAME", "ens"), ("NCCL_COMM_ID", "10.0.0.1:5000")]);
    assert!(!f.iter().any(|f| f.id == "nccl.env.NCCL_SOCKET_IFNAME"), "NCCL_COMM_ID picks by subnet");
}

#[test]
fn nccl_variables() {
    let findings = nccl_environment(&env(&[
        ("NCCL_IB_MR_RANGE", "1"),
        ("NCCL_BUFFSIZE", "4M"),
        ("NCCL_LL_BUFFSIZE", "512K"),
        ("NCCL_IB_HCAA", "mlx5_0"),
        ("NCCL_REGISTER_FOO", "1"),
        ("NCCL_IB_HCA", "mlx5_0"),
        ("PATH", "/bin"),
    ]));
    assert_eq!(find(&findings, "nccl.env.NCCL_IB_MR_RANGE").status, Status::Warn);
    assert!(find(&findings, "nccl.env.NCCL_IB_MR_RANGE").fix.contains("not an NCCL variable"));
    assert_eq!(find(&findings, "nccl.env.NCCL_BUFFSIZE").status, Status::Fail, "NCCL reads 4: no data moves");
    assert_eq!(find(&findings, "nccl.env.NCCL_LL_BUFFSIZE").status, Status::Warn, "NCCL reads 512: a WARN");
    assert!(find(&findings, "nccl.env.NCCL_IB_HCAA").fix.contains("spelling"));
    assert_eq!(find(&findings, "nccl.env.NCCL_REGISTER_FOO").status, Status::Warn);
    assert!(!findings.iter().any(|f| f.id == "nccl.env.NCCL_IB_HCA"));
    assert_eq!(find(&findings, "nccl.debug").status, Status::Warn);
    assert_eq!(find(&nccl_environment(&env(&[("NCCL_DEBUG", "info")])), "nccl.debug").status, Status::Pass);
}

#[test]
fn exit_codes_and_text() {
    let low =
        Machine { limits: Some(MemlockLimits { soft: Limit::Bytes(8 * MIB), hard: Limit::Unlimited }), ..machine() };
    let e = default_estimate();
    let report = Report {
        pid: "4242".into(),
        need_per_process_bytes: e.per_rank_max_bytes,
        need_per_node_bytes: e.per_node_bytes,
        need_per_node_host_bytes: e.per_node_host_bytes,
        model: ModelSummary::default(),
        findings: evaluate(&low, &e, 2.0),
        launch: None,
        facts: Vec::new(),
    };
    assert_eq!(exit_code(&report, false), 1);
    let text = render_text(&report);
    assert!(text.contains("FAIL  memlock.soft") && text.contains("fix: raise it"), "{text}");
    let warn_only = Report { findings: nccl_environment(&Environment::default()), ..report.clone() };
    assert_eq!(exit_code(&warn_only, false), 0);
    assert_eq!(exit_code(&warn_only, true), 1);
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["findings"][0]["status"], "FAIL");
}
