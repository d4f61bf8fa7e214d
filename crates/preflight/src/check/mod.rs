//! `memlock-exporter check`: a preflight for job launchers (Slurm prolog, Kubernetes init
//! container, torchrun wrapper). Each finding is PASS, WARN or FAIL with the measured value and
//! a one-line fix. Exit 0 when nothing failed, 1 on any FAIL (or WARN with `--strict`), 2 when
//! the check itself could not run.

use std::path::PathBuf;

use clap::Args;

use crate::estimate;
use crate::findings::{exit_code, render_text, Finding, ModelSummary, Report, Status};
use crate::machine::{ib_hca_selects, memlock_exempt, nccl_opens, read_machine, Machine};
use crate::nccl::env::{self as nccl_env, Environment};
use crate::nccl::model::Estimate;
use crate::nccl::param::{show_bytes, Severity};
use crate::policy;
use memlock_core::collect::cgroup::working_set_charge;
use memlock_core::collect::rdma_sysfs::SysfsDevice;
use memlock_core::units::bytes as human;
use memlock_kernel::fsroot::Roots;
use memlock_kernel::pid_limits;

mod nccl_log;

#[derive(Debug, Args, Default, Clone)]
pub struct CheckArgs {
    #[command(flatten)]
    pub model: estimate::ModelArgs,
    /// Check the environment of this process instead of the checker's own.
    #[arg(long)]
    pub pid: Option<u32>,
    /// Memory checks want this multiple of the estimated need.
    #[arg(long = "safety-factor", default_value_t = 2.0)]
    pub(crate) safety_factor: f64,
    /// WARN fails the check too (exit 1).
    #[arg(long)]
    pub strict: bool,
    /// procfs mount point.
    #[arg(long = "path.procfs", default_value = "/proc")]
    pub procfs: String,
    /// sysfs mount point.
    #[arg(long = "path.sysfs", default_value = "/sys")]
    pub sysfs: String,
    /// JSON instead of the table (the format is documented in docs/check.md).
    #[arg(long)]
    pub json: bool,
    /// Root of the configuration files the launcher's fix is read from (slurm.conf, daemon.json,
    /// limits.conf, systemd units).
    #[arg(long = "path.etc", default_value = "/etc")]
    pub etc: String,
    /// Root of the rest of the node's file system: systemd's units under /usr/lib and /run, and
    /// the RDMA user space (libibverbs, /usr/bin/ofed_info) whose versions are reported.
    #[arg(long = "path.rootfs", default_value = "/")]
    pub rootfs: String,
    /// Job-context flags and `--exec` (crates/preflight/src/job_context.rs).
    #[command(flatten)]
    pub job: crate::job_context::JobContextArgs,
    /// The job's NCCL_DEBUG=INFO log (a file, or - for standard input): each failed call
    /// explained (the `nccl_log` key of --json, findings nccl.log.*).
    #[arg(long = "nccl-log", value_name = "FILE")]
    pub nccl_log: Option<String>,
}

/// NCCL_SOCKET_IFNAME that matches none of the job's interfaces: the bootstrap finds no socket
/// interface and communicator init fails (src/bootstrap.cc bootstrapNetInit: "Bootstrap : no
/// socket interface found", ncclInvalidUsage). Only the names are compared (ncclOsFindInterfaces
/// also needs the interface running and with an address), so a FAIL here is certain; NCCL_COMM_ID
/// makes the bootstrap pick its interface by subnet instead, and a value of one character is
/// ignored (src/misc/socket.cc ncclFindInterfaces).
fn socket_ifname(env: &Environment, interfaces: Option<&[String]>, out: &mut Vec<Finding>) {
    let (Some(value), Some(interfaces)) = (env.get("NCCL_SOCKET_IFNAME"), interfaces) else { return };
    if value.len() <= 1 || env.get("NCCL_COMM_ID").is_some() || interfaces.is_empty() {
        return;
    }
    let list = crate::nccl::grammar::parse_if_list(value, 16);
    if interfaces.iter().any(|name| list.selects(name, -1)) {
        return;
    }
    let id = "nccl.env.NCCL_SOCKET_IFNAME";
    let measured = format!(
        "NCCL_SOCKET_IFNAME={} matches none of the job's interfaces ({}): the bootstrap finds no socket interface \
            and communicator init fails (src/bootstrap.cc bootstrapNetInit, src/os/linux.cc ncclOsFindInterfaces)",
        show_bytes(value),
        interfaces.join(", ")
    );
    let fix = "name an interface that is up, by prefix (eth, ens1f) or =name, `^` to exclude; no spaces";
    match out.iter_mut().find(|f| f.id == id) {
        Some(f) => {
            f.status = Status::Fail;
            f.measured = format!("{measured}; {}", f.measured);
        }
        None => out.push(Finding::new(id, Status::Fail, measured, fix)),
    }
}

/// Runs every check against the machine state and the estimated need: the memlock limit against
/// the busiest rank, memory and the cgroup against the busiest node's host memory.
pub fn evaluate(m: &Machine, e: &Estimate, safety: f64) -> Vec<Finding> {
    let need = e.per_rank_max_bytes;
    let node_need = e.per_node_host_bytes;
    let mut out = Vec::new();
    memlock(m, need, e.inputs.communicators, &mut out);
    memory(m, node_need, safety, &mut out);
    cgroup(m, node_need, safety, &mut out);
    hugepages(m, node_need, safety, &mut out);
    overcommit(m, node_need, &mut out);
    if let Some(count) = m.max_map_count {
        out.push(if count < 65_530 {
            Finding::new(
                "vm.max_map_count",
                Status::Warn,
                count.to_string(),
                "below the kernel default 65530: registrations split VMAs (fork protection); sysctl -w \
                    vm.max_map_count=262144",
            )
        } else {
            Finding::new("vm.max_map_count", Status::Pass, count.to_string(), "")
        });
    }
    if let (Some(total), Some(free)) = (m.meminfo.cma_total, m.meminfo.cma_free) {
        out.push(if total > 0 && free > total {
            Finding::new(
                "memory.cma",
                Status::Warn,
                format!("CmaFree {} > CmaTotal {}", human(free as f64), human(total as f64)),
                "inconsistent CMA accounting has preceded long-term pin failures (ENOMEM with a fine memlock limit); \
                    check cma=/kho= on the kernel command line",
            )
        } else {
            Finding::new(
                "memory.cma",
                Status::Pass,
                format!(
                    "CmaFree {} of \
                {}",
                    human(free as f64),
                    human(total as f64)
                ),
                "",
            )
        });
    }
    out.extend(nccl_environment(&m.environment));
    socket_ifname(&m.environment, m.interfaces.as_deref(), &mut out);
    out.extend(rdma(&m.rdma, &m.environment));
    out.extend(nic_caps::findings(m.nic_caps.as_ref(), !m.rdma.is_empty()));
    out
}

fn cgroup(m: &Machine, need: u64, safety: f64, out: &mut Vec<Finding>) {
    let Some(c) = &m.cgroup else { return };
    // The daemon's definition: page cache is reclaimed before a charge fails, so only the
    // working set takes room.
    let charged = working_set_charge(c.working_set_bytes, c.usage_bytes, c.limit_bytes);
    let Some((charge, what)) = charged.filter(|(charge, _)| charge.limit_bytes.is_some()) else {
        out.push(Finding::new("cgroup.memory", Status::Pass, format!("{}: no memory limit", c.path), ""));
        return;
    };
    let (limit, used) = (charge.limit_bytes.unwrap_or(0), charge.used_bytes);
    let room = charge.headroom_bytes().unwrap_or(0);
    let mut measured = format!(
        "{}: {} of its {} limit free ({what} {}), estimated need {} (x{safety} wanted)",
        c.path,
        human(room as f64),
        human(limit as f64),
        human(used as f64),
        human(need as f64)
    );
    let near = limit > 0 && used as f64 / limit as f64 >= policy::CGROUP_NEAR_LIMIT_RATIO;
    if near {
        measured.push_str(&format!(
            ", {what} at or above {} of the limit: {}",
            percent(policy::CGROUP_NEAR_LIMIT_RATIO),
            for_job::ALERT_CGROUP_NEAR
        ));
    }
    out.push(if room as f64 >= need as f64 * safety && !near {
        Finding::new("cgroup.memory", Status::Pass, measured, "")
    } else if room >= need {
        Finding::new(
            "cgroup.memory",
            Status::Warn,
            measured,
            "little margin: raise the container's or job's memory \
            limit",
        )
    } else {
        Finding::new("cgroup.memory", Status::Fail, measured, CGROUP_FIX)
    });
}

/// Ports ACTIVE, per port as NCCL_IB_HCA selects them. A port that is not ACTIVE is one NCCL
/// never opens (net_ib/init.cc skips it before matching NCCL_IB_HCA): a WARN, also when
/// NCCL_IB_HCA names it, never a FAIL. No port left for NCCL: it finds no IB device and falls
/// back to sockets, a FAIL only when NCCL_NET=IB insists on IB. One firmware version per HCA type.
pub fn rdma(devices: &[SysfsDevice], env: &Environment) -> Vec<Finding> {
    let mut out = Vec::new();
    if devices.is_empty() {
        out.push(Finding::new("rdma.devices", Status::Pass, "no RDMA devices on this node", ""));
        return out;
    }
    let spec = env.get("NCCL_IB_HCA");
    let mut opened: Vec<String> = Vec::new();
    for device in devices {
        for port in &device.ports {
            if !ib_hca_selects(spec, &device.name, port.number) {
                continue;
            }
            let id = format!("rdma.port.{}.{}", device.name, port.number);
            match &port.state {
                Some(state) if state.value == 4 => {
                    if nccl_opens(spec, device, port) {
                        opened.push(format!("{}:{}", device.name, port.number));
                    }
                    out.push(Finding::new(id, Status::Pass, format!("{}: {}", state.value, state.name), ""))
                }
                state => {
                    let measured = state
                        .as_ref()
                        .map(|s| format!("{}: {}", s.value, s.name))
                        .unwrap_or_else(|| "state unreadable".into());
                    let named = spec.is_some_and(|s| !s.is_empty() && s.first() != Some(&b'^'));
                    let measured = if named {
                        format!("{measured}: NCCL_IB_HCA selects it, but NCCL skips ports that are not ACTIVE")
                    } else {
                        format!("{measured}: NCCL skips it")
                    };
                    out.push(Finding::new(
                        id,
                        Status::Warn,
                        measured,
                        "bring the link up (cable, switch port, subnet manager \
                        for InfiniBand) or leave the port out of NCCL_IB_HCA",
                    ));
                }
            }
        }
    }
    if opened.is_empty() {
        let ib_only = env.get("NCCL_NET").is_some_and(|n| n.eq_ignore_ascii_case(b"IB"));
        let spec_shown = spec.map_or(String::new(), |s| format!(" (NCCL_IB_HCA={})", show_bytes(s)));
        out.push(Finding::new(
            "rdma.selected",
            if ib_only { Status::Fail } else { Status::Warn },
            format!(
                "no ACTIVE port for NCCL to open{spec_shown}: NCCL finds no IB device (net_ib/init.cc \
                    \"NET/IB : No device found\") and {}",
                if ib_only {
                    "NCCL_NET=IB makes communicator init fail (src/plugin/net.cc ncclNetInit)"
                } else {
                    "falls back to sockets (no RDMA, so nothing is registered)"
                }
            ),
            "bring a port up or select an ACTIVE one in NCCL_IB_HCA",
        ));
    } else if let Some(value) = spec {
        // A prefix selects more than the device it names: `mlx5_1` is also mlx5_10 to mlx5_17.
        let list = crate::nccl::grammar::parse_if_list(value, 32);
        if !list.exact && !list.exclude {
            let extra: Vec<&str> = opened
                .iter()
                .map(|p| p.as_str())
                .filter(|p| {
                    let name = p.split(':').next().unwrap_or("");
                    !list.entries.iter().any(|e| e.prefix == name.as_bytes())
                        && list.entries.iter().any(|e| devices.iter().any(|d| d.name.as_bytes() == e.prefix))
                })
                .collect();
            if !extra.is_empty() {
                out.push(Finding::new(
                    "rdma.ib_hca",
                    Status::Warn,
                    format!(
                        "NCCL_IB_HCA={} also selects {} (names are prefixes: src/misc/utils.cc matchIfList)",
                        show_bytes(value),
                        extra.join(", ")
                    ),
                    "start the list with = to match whole names (=mlx5_1,mlx5_2)",
                ));
            }
        }
    }
    let mut by_type: std::collections::BTreeMap<&str, std::collections::BTreeSet<&str>> = Default::default();
    for device in devices {
        if let (Some(hca), Some(fw)) = (&device.hca_type, &device.fw_ver) {
            by_type.entry(hca.as_str()).or_default().insert(fw.as_str());
        }
    }
    for (hca, versions) in by_type {
        let id = format!("rdma.firmware.{hca}");
        let list = versions.iter().copied().collect::<Vec<_>>().join(", ");
        out.push(if versions.len() > 1 {
            Finding::new(
                id,
                Status::Warn,
                format!("different firmware on {hca} HCAs: {list}"),
                "update all HCAs of one type to the same firmware (mlxfwmanager, or the vendor's tool)",
            )
        } else {
            Finding::new(id, Status::Pass, list, "")
        });
    }
    out
}

/// How the memlock limit is raised: the memlock.soft finding's fix, and `--nccl-log`'s.
pub(crate) const MEMLOCK_FIX: &str = "raise it where the ranks get it: `ulimit -l unlimited` via \
    /etc/security/limits.conf memlock, systemd LimitMEMLOCK=infinity, docker run --ulimit memlock=-1:-1, or the \
    container runtime's default rlimits";
/// How the cgroup's limit is raised: the cgroup.memory finding's fix, and `--nccl-log`'s.
pub(crate) const CGROUP_FIX: &str = "registered buffers are charged to the cgroup: raise its memory limit (pod \
    limits, Slurm --mem) or run fewer ranks in it";

fn memlock(m: &Machine, need: u64, communicators: u64, out: &mut Vec<Finding>) {
    let Some(limits) = m.limits else { return };
    let exempt = memlock_exempt(m);
    let fix = MEMLOCK_FIX;
    // The estimate is already the worst case over what it assumed, for every communicator.
    let job_need = need;
    let floor = crate::policy::PROCESS_LIMIT_TOO_LOW_BYTES;
    let needs = format!("the busiest rank's estimated need {} ({communicators} communicator(s))", human(need as f64));
    let soft = match limits.soft {
        pid_limits::Limit::Unlimited => Finding::new("memlock.soft", Status::Pass, "unlimited", ""),
        _ if exempt => Finding::new(
            "memlock.soft",
            Status::Pass,
            format!("{} (CAP_IPC_LOCK: not enforced)", show_limit(limits.soft)),
            "",
        ),
        pid_limits::Limit::Bytes(0) => {
            Finding::new("memlock.soft", Status::Fail, "0 bytes: every registration fails with EPERM", fix)
        }
        pid_limits::Limit::Bytes(limit) if limit < job_need => {
            Finding::new("memlock.soft", Status::Fail, format!("{} < {needs}", human(limit as f64)), fix)
        }
        // The model covers one library (NCCL) and what it could infer; the floor is the alert
        // rules' (MemlockProcessLimitTooLowForRdma), so check and the page agree.
        pid_limits::Limit::Bytes(limit) if limit < floor => Finding::new(
            "memlock.soft",
            Status::Warn,
            format!(
                "{} >= {needs}, but below the policy floor {} that MemlockProcessLimitTooLowForRdma pages on: more \
                    communicators or process groups than assumed, all-to-all, NCCL user buffer registration, and \
                    UCX, libfabric, MPI or NVSHMEM register beyond the model",
                human(limit as f64),
                human(floor as f64)
            ),
            fix,
        ),
        pid_limits::Limit::Bytes(limit) => {
            Finding::new("memlock.soft", Status::Pass, format!("{} >= {needs}", human(limit as f64)), "")
        }
    };
    out.push(soft);
    let hard = match limits.hard {
        pid_limits::Limit::Unlimited => Finding::new("memlock.hard", Status::Pass, "unlimited", ""),
        _ if exempt => {
            Finding::new("memlock.hard", Status::Pass, format!("{} (CAP_IPC_LOCK)", show_limit(limits.hard)), "")
        }
        pid_limits::Limit::Bytes(limit) if limit < job_need => Finding::new(
            "memlock.hard",
            Status::Warn,
            format!("{} < {needs}", human(limit as f64)),
            "the job cannot raise its own soft limit past this; raise the hard limit where the job is started",
        ),
        pid_limits::Limit::Bytes(limit) => Finding::new("memlock.hard", Status::Pass, human(limit as f64), ""),
    };
    out.push(hard);
    let cap = match (m.ipc_lock, m.initial_user_ns) {
        (Some(true), Some(false)) => Finding::new(
            "memlock.cap_ipc_lock",
            Status::Warn,
            "CAP_IPC_LOCK held only inside a user namespace: it does not exempt from the limit",
            "rely on the memlock limit, not on the capability, in user-namespaced containers",
        ),
        (Some(true), _) => {
            Finding::new("memlock.cap_ipc_lock", Status::Pass, "held: the memlock limit is not enforced", "")
        }
        (Some(false), _) => {
            Finding::new("memlock.cap_ipc_lock", Status::Pass, "not held: the memlock limit applies", "")
        }
        (None, _) => Finding::new(
            "memlock.cap_ipc_lock",
            Status::Warn,
            "CapEff not readable",
            "run the check with access to /proc/PID/status",
        ),
    };
    out.push(cap);
}

fn show_limit(limit: pid_limits::Limit) -> String {
    match limit {
        pid_limits::Limit::Unlimited => "unlimited".into(),
        pid_limits::Limit::Bytes(b) => human(b as f64),
    }
}

fn memory(m: &Machine, node_need: u64, safety: f64, out: &mut Vec<Finding>) {
    let Some(available) = m.meminfo.mem_available else { return };
    let wanted = node_need as f64 * safety;
    let mut measured = format!(
        "MemAvailable {} for an estimated {} per node (x{safety} wanted)",
        human(available as f64),
        human(node_need as f64)
    );
    let low = for_job::available_low(&m.meminfo);
    if low {
        measured.push_str(&format!(
            ", below {} of MemTotal {}: {}",
            percent(policy::NODE_AVAILABLE_LOW_RATIO),
            human(m.meminfo.mem_total.unwrap_or(0) as f64),
            for_job::ALERT_AVAILABLE_LOW
        ));
    }
    out.push(if available < node_need {
        Finding::new(
            "memory.available",
            Status::Fail,
            measured,
            "not enough memory for the registrations: free memory or run fewer ranks on this node",
        )
    } else if (available as f64) < wanted || low {
        Finding::new(
            "memory.available",
            Status::Warn,
            measured,
            "little margin: free memory (drop caches, stop other services, release hugepages) before the job",
        )
    } else {
        Finding::new("memory.available", Status::Pass, measured, "")
    });
}

fn percent(ratio: f64) -> String {
    format!("{}%", (ratio * 1000.0).round() / 10.0)
}

/// The alert rule's hugepage squeeze, on the same thresholds: a pool of at least
/// `hugepages_min_pool_ratio` of MemTotal, more than `hugepages_unused_ratio` of it neither used
/// nor reserved, while MemAvailable is below `node_available_low_ratio` of MemTotal. A WARN, as
/// the alert is; a FAIL when the job's memory does not fit either.
fn hugepages(m: &Machine, node_need: u64, safety: f64, out: &mut Vec<Finding>) {
    let i = &m.meminfo;
    let (Some(total), Some(free), Some(size)) = (i.hugepages_total, i.hugepages_free, i.hugepage_size) else { return };
    if total == 0 {
        out.push(Finding::new("memory.hugepages", Status::Pass, "no hugepages reserved", ""));
        return;
    }
    let unused = free.saturating_sub(i.hugepages_reserved.unwrap_or(0)).saturating_mul(size);
    let available = i.mem_available.unwrap_or(0);
    let mut measured = format!(
        "{} of {} of hugepages neither used nor reserved, MemAvailable {}",
        human(unused as f64),
        human(total.saturating_mul(size) as f64),
        human(available as f64)
    );
    let squeeze = for_job::hugepage_squeeze(i);
    let fix = "hugepages reserved for other services squeeze normal memory: lower vm.nr_hugepages (sysctl -w \
        vm.nr_hugepages=N) if they are not needed";
    if squeeze {
        measured.push_str(&format!(": {}", for_job::ALERT_HUGEPAGES));
    }
    out.push(if squeeze && (available as f64) < node_need as f64 * safety {
        Finding::new("memory.hugepages", Status::Fail, measured, fix)
    } else if squeeze {
        Finding::new("memory.hugepages", Status::Warn, measured, fix)
    } else {
        Finding::new("memory.hugepages", Status::Pass, measured, "")
    });
}

/// Strict overcommit, judged on the rules' threshold: CommitLimit - Committed_AS below
/// `overcommit_headroom_low_ratio` of CommitLimit is MemlockNodeCommitHeadroomLow's condition (a
/// WARN, as the alert is), below the job's need a FAIL. Mode 2 with headroom passes: the setting
/// alone is the informational MemlockNodeStrictOvercommitWithRdma, which pages nobody. Modes 0
/// and 1 do not enforce CommitLimit (mm/util.c `__vm_enough_memory`).
fn overcommit(m: &Machine, node_need: u64, out: &mut Vec<Finding>) {
    let Some(mode) = m.overcommit_mode else { return };
    if mode != 2 {
        out.push(Finding::new("vm.overcommit_memory", Status::Pass, mode.to_string(), ""));
        return;
    }
    let (Some(limit), Some(committed)) = (m.meminfo.commit_limit, m.meminfo.committed_as) else {
        out.push(Finding::new(
            "vm.overcommit_memory",
            Status::Warn,
            "2 (strict), CommitLimit or Committed_AS not read",
            "strict overcommit makes large allocations fail early: prefer 0",
        ));
        return;
    };
    let room = limit.saturating_sub(committed);
    let mut measured = format!(
        "2 (strict): {} of CommitLimit {} left, estimated need {}",
        human(room as f64),
        human(limit as f64),
        human(node_need as f64)
    );
    let low = for_job::commit_headroom_low(&m.meminfo);
    if low {
        measured.push_str(&format!(
            ", below {} of CommitLimit: {}",
            percent(policy::OVERCOMMIT_HEADROOM_LOW_RATIO),
            for_job::ALERT_COMMIT_HEADROOM
        ));
    }
    if !m.rdma.is_empty() {
        measured.push_str(&format!(", on a node with RDMA devices: {}", for_job::ALERT_OVERCOMMIT));
    }
    out.push(if room < node_need {
        Finding::new(
            "vm.overcommit_memory",
            Status::Fail,
            measured,
            "allocations fail with ENOMEM: sysctl -w vm.overcommit_memory=0 or raise vm.overcommit_ratio",
        )
    } else if low {
        Finding::new(
            "vm.overcommit_memory",
            Status::Warn,
            measured,
            "little commit headroom: the next mappings and forks fail with ENOMEM; raise vm.overcommit_ratio or \
                prefer vm.overcommit_memory=0",
        )
    } else {
        Finding::new("vm.overcommit_memory", Status::Pass, measured, "")
    });
}

/// Checks the NCCL_* variables the job will run with (its environment and NCCL's configuration
/// files) as NCCL reads them (crate::nccl::env): a name NCCL does not read WARNs, a value NCCL
/// reads otherwise than written FAILs; a variable NCCL accepts is never reported. Then NCCL_DEBUG.
pub fn nccl_environment(env: &Environment) -> Vec<Finding> {
    let mut out: Vec<Finding> = nccl_env::problems(env)
        .into_iter()
        .map(|p| {
            let status = match p.severity {
                Severity::Warn => Status::Warn,
                Severity::Fail => Status::Fail,
            };
            Finding::new(format!("nccl.env.{}", p.name), status, p.measured, p.fix)
        })
        .collect();
    // NCCL_DEBUG's parser trims and ignores case (ncclParamOneOf, src/debug.cc).
    let debug = env.entry("NCCL_DEBUG").map(|e| String::from_utf8_lossy(&e.value).trim().to_ascii_uppercase());
    out.push(match debug.as_deref() {
        Some("WARN" | "INFO" | "TRACE") => {
            Finding::new("nccl.debug", Status::Pass, format!("NCCL_DEBUG={}", debug.unwrap_or_default()), "")
        }
        Some(other) => Finding::new(
            "nccl.debug",
            Status::Warn,
            format!("NCCL_DEBUG={other}"),
            "set NCCL_DEBUG=WARN (or INFO) so the failing ibv_reg_mr call and its errno are logged",
        ),
        None => Finding::new(
            "nccl.debug",
            Status::Warn,
            "NCCL_DEBUG unset",
            "set NCCL_DEBUG=WARN (or INFO) so the failing ibv_reg_mr call and its errno are logged",
        ),
    });
    out
}

/// Without the target's environment the NCCL findings would judge an empty one: they are
/// replaced by one WARN.
fn environment_unreadable(findings: &mut Vec<Finding>, error: &str) {
    findings.retain(|f| !f.id.starts_with("nccl."));
    findings.push(Finding::new(
        "nccl.environment",
        Status::Warn,
        format!("not readable: {error}"),
        "run the check as the job's user (or root) to see its NCCL_* variables",
    ));
}

pub fn run(args: &CheckArgs) -> u8 {
    let fail = |message: String| {
        eprintln!("memlock-exporter check: {message}");
        // A node-problem-detector plugin's stdout is its condition's message.
        if args.job.summary {
            let _ = crate::print_report(&format!("check could not run: {message}\n"));
        }
        memlock_core::exit::USAGE
    };
    if !(args.safety_factor >= 1.0 && args.safety_factor.is_finite()) {
        return fail(format!("--safety-factor {} must be at least 1", args.safety_factor));
    }
    let roots = Roots { procfs: PathBuf::from(&args.procfs), sysfs: PathBuf::from(&args.sysfs) };
    let pid = args.pid.map(|p| p.to_string()).unwrap_or_else(|| "self".into());
    if let Err(message) = estimate::validate(&args.model) {
        return fail(message);
    }
    let log = match args.nccl_log.as_deref().map(estimate::from_log::load).transpose() {
        Ok(log) => log,
        Err(message) => return fail(message),
    };
    // Another user's environ needs ptrace access: check the rest without it.
    let (env, env_error) = match Environment::of_process(&roots.procfs, args.pid) {
        Ok((env, _)) => (env, None),
        Err(err) => (Environment::default(), Some(err.to_string())),
    };
    let mut machine = match read_machine(&roots, &pid, env.clone()) {
        Ok(m) => m,
        Err(err) => return fail(err.to_string()),
    };
    // `--exec` checks the rank's own process, which becomes the job: its capability is the job's.
    let is_the_job = args.pid.is_some() || args.job.exec;
    let cap = for_job::judge_capability(&roots, &pid, is_the_job, args.job.as_root, &mut machine);
    let adjusted = crate::job_context::adjust_machine(&args.job, &mut machine);
    // A job runs several communicators: judged for them unless told how many.
    let mut model_args = args.model.clone();
    let communicators_assumed = model_args.communicators.is_none();
    model_args.communicators.get_or_insert(for_job::DEFAULT_COMMUNICATORS);
    if model_args.nccl_version.is_none() {
        model_args.nccl_version = estimate::found_version(&roots.procfs, args.pid, log.as_ref());
    }
    // NCCL's reading of the environment is what the model takes (values it reads otherwise than
    // written are findings, not a reason to stop); the job's log, when given, says what its NCCL
    // read and comes first.
    let env = match &log {
        Some(l) => env.with_log_values(&l.env),
        None => env,
    };
    let mut derived = match estimate::derive(&model_args, &env, &roots, &machine.rdma) {
        Ok(d) => d,
        Err(message) => return fail(message),
    };
    if communicators_assumed {
        derived.assumed.push(format!(
            "{} communicators per rank, as common training stacks run: pass --communicators",
            for_job::DEFAULT_COMMUNICATORS
        ));
    }
    let mut e = crate::nccl::model::estimate(&derived.inputs);
    let span = estimate::range::range(&model_args, &env, &roots, &machine.rdma, &derived, &e);
    estimate::range::judge_high(&mut e, &span);
    let mut findings = evaluate(&machine, &e, args.safety_factor);
    if let Some(err) = env_error {
        environment_unreadable(&mut findings, &err);
    }
    // The checker itself maps no NCCL: only a checked process has a version to state.
    if let Some(pid) = args.pid {
        findings.push(crate::nccl::library::finding(&crate::nccl::library::of_process(&roots.procfs, pid)));
    }
    crate::job_context::adjust_findings(&args.job, &adjusted, &mut findings);
    for_job::explain_capability(&cap, &mut findings);
    let stack = rdma_stack::Roots {
        rootfs: std::path::Path::new(&args.rootfs),
        etc: std::path::Path::new(&args.etc),
        procfs: &roots.procfs,
    };
    let launch = for_job::launcher_fix(&roots, &stack, &pid, args.pid.is_none(), &mut findings);
    let shape = format!(
        "{} node(s) x {} rank(s), {} communicator(s) per rank",
        derived.inputs.nodes, derived.inputs.ranks_per_node, derived.inputs.communicators
    );
    let facts = for_job::facts(&machine, &roots, &stack, shape);
    let logged = log.map(|l| {
        let r = estimate::from_log::report(&derived.inputs, &e, &l, &estimate::verdict(&e, &machine));
        findings.extend(nccl_log::explain(&r, &machine, &nccl_log::hostname(&roots)));
        r
    });
    let report = Report {
        pid,
        need_per_process_bytes: e.per_rank_max_bytes,
        need_per_node_bytes: e.per_node_bytes,
        need_per_node_host_bytes: e.per_node_host_bytes,
        model: ModelSummary {
            gdr: derived.gdr.mode.as_str().into(),
            gdr_why: derived.gdr.why.clone(),
            nics: derived.inputs.nics,
            nics_why: derived.nics_why.clone(),
            channels: derived.inputs.channels.count,
            channels_why: derived.inputs.channels.why.clone(),
            search_channels: derived.inputs.channels.search,
            algorithms: e.scenarios.last().map(|s| s.algorithms.clone()).unwrap_or_default(),
            assumed: derived.assumed.clone(),
        },
        findings,
        launch,
        facts,
    };
    if args.job.exec {
        return crate::job_context::exec_or_refuse(&args.job, &report, args.strict);
    }
    let text = if args.json {
        let json =
            serde_json::to_string_pretty(&report).and_then(|t| estimate::range::with_range(&t, &span)).and_then(|t| {
                match &logged {
                    Some(r) => estimate::from_log::with_log(&t, r),
                    None => Ok(t),
                }
            });
        match json {
            Ok(text) => text,
            Err(err) => return fail(err.to_string()),
        }
    } else if args.job.summary {
        crate::job_context::render_summary(&report, args.strict)
    } else {
        render_text(&report)
    };
    // A launcher that stops reading early still gets the verdict; a report that could not be
    // written at all (a full disk) is a check that did not run.
    if let Err(err) = crate::print_report(&text) {
        return fail(format!("writing the report: {err}"));
    }
    exit_code(&report, args.strict)
}

pub mod for_job;
pub mod launch_path;
pub mod launcher_config;
pub mod nic_caps;
pub mod rdma_stack;

#[cfg(test)]
#[path = "tests/policy_parity.rs"]
mod policy_parity;
#[cfg(test)]
mod tests;
