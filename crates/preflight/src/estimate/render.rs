//! `estimate`'s report: the table and the JSON object (docs/check.md), from what was derived, the
//! model's estimate and the verdict against the machine.

use serde::Serialize;

use super::{Derived, Verdict, COVERS, NOT_MODELLED};
use crate::nccl::model::Estimate;
use crate::nccl::param::Severity;
use crate::nccl::variables::{NCCL_COMMIT, NCCL_VERSION};
use memlock_core::gdr::Detected;
use memlock_core::units::bytes as human;

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        f64::INFINITY
    } else {
        part as f64 / whole as f64
    }
}

fn h(bytes: u64) -> String {
    human(bytes as f64)
}

pub(crate) fn render_text(d: &Derived, e: &Estimate, v: &Verdict) -> String {
    let i = &e.inputs;
    let mut out = format!(
        "NCCL network registrations: a model of NVIDIA/nccl {NCCL_VERSION} ({}) from its source, not a \
            measurement\n\n",
        &NCCL_COMMIT[..8]
    );
    out.push_str(&format!(
        "job: {} node(s) x {} rank(s), {} NIC(s) per node, {} channel(s), {} communicator(s)\n",
        i.nodes, i.ranks_per_node, i.nics, i.channels.count, i.communicators
    ));
    out.push_str(&format!("  channels: {}\n", i.channels.why));
    out.push_str(&format!("  NICs: {}\n", d.nics_why));
    out.push_str(&format!(
        "  GPUDirect: {} ({}: {})\n",
        i.gdr.as_str(),
        if d.gdr.detected { "detected" } else { "given" },
        d.gdr.why
    ));
    out.push_str(&format!(
        "  buffers: LL {} / LL128 {} / Simple {} B; {} QP(s) per connection, {} device(s) per NIC; PXN {}\n",
        i.buffsize_ll,
        i.buffsize_ll128,
        i.buffsize_simple,
        i.qps_per_connection,
        i.devices_per_nic,
        if i.pxn { "on" } else { "off" }
    ));
    out.push_str(&format!("  connects: {}\n", d.connect));
    if let Some(err) = &d.environment_error {
        out.push_str(&format!("  environment: not readable ({err}): its NCCL_* variables are taken as unset\n"));
    }
    if !d.environment.is_empty() {
        out.push_str(&format!("  from the environment: {}\n", d.environment.join(", ")));
    }
    for f in d.conf_files.iter().filter(|f| !f.set.is_empty()) {
        out.push_str(&format!("  {} sets {}\n", f.path.display(), f.set.join(", ")));
    }
    if i.nodes < 2 {
        out.push_str(
            "  one node: no network connection while NCCL carries intra-node traffic over NVLink, PCIe P2P or shared \
                memory; it uses the network inside a node when both GPUs reach a NIC faster than each other \
                (graph/paths.cc ncclTopoCheckNet: GPUs without NVLink on different PCIe switches) unless \
                NCCL_NET_DISABLE_INTRA=1: then estimate it as --nodes 2\n",
        );
    }
    for p in &d.problems {
        out.push_str(&format!("  warning: {}: {}\n", p.measured, p.fix));
    }
    if !d.assumed.is_empty() {
        out.push_str("assumed (pass the real figures):\n");
        for a in &d.assumed {
            out.push_str(&format!("  - {a}\n"));
        }
    }
    out.push_str(&format!(
        "\n{:<24} {:>14} {:>18} {:>20}\n",
        "connected", "busiest rank", "per node (VmPin)", "per node (host)"
    ));
    for s in &e.scenarios {
        out.push_str(&format!(
            "{:<24} {:>14} {:>18} {:>20}\n",
            s.algorithms,
            h(s.per_rank_max_bytes),
            h(s.per_node_bytes),
            h(s.per_node_host_bytes)
        ));
    }
    if let Some(busiest) = e.ranks.iter().rev().max_by_key(|r| r.memlock_bytes) {
        out.push_str(&format!(
            "\nbusiest rank: local rank {} of node {} ({} B); ring {} send(s) {} receive(s), tree {} more send(s) \
                {} receive(s){}{}\n",
            busiest.rank,
            e.busiest_node,
            busiest.memlock_bytes,
            busiest.ring.sends + busiest.ring.sends_gdr,
            busiest.ring.receives + busiest.ring.receives_gdr,
            busiest.tree.sends + busiest.tree.sends_gdr,
            busiest.tree.receives + busiest.tree.receives_gdr,
            if busiest.pat.total() > 0 {
                format!(", pat {} more connection(s)", busiest.pat.total())
            } else {
                String::new()
            },
            if i.p2p.is_some() { format!(", p2p {} connection(s)", busiest.p2p.total()) } else { String::new() }
        ));
        for t in &busiest.terms {
            out.push_str(&format!(
                "  {:<5} {:<17} {:>11}  = {}\n",
                t.algorithm.map_or("all", |a| a.as_str()),
                t.name,
                h(t.memlock_bytes),
                t.formula
            ));
        }
        let per_rank: Vec<String> = e.ranks.iter().map(|r| format!("{}: {}", r.rank, h(r.memlock_bytes))).collect();
        let all = e.scenarios.last().map_or("", |s| s.algorithms.as_str());
        out.push_str(&format!("per rank (node {}, {all}): {}\n", e.busiest_node, per_rank.join(", ")));
    }
    out.push_str(&format!("\nagainst this machine (pid {}):\n", v.pid));
    if let Some(nccl) = &v.nccl {
        out.push_str(&format!("  NCCL: {}\n", crate::nccl::library::describe(nccl)));
    }
    match v.soft_limit_bytes {
        _ if v.cap_ipc_lock_exempt => out.push_str(&format!(
            "  soft memlock limit {}: not enforced (CAP_IPC_LOCK in the initial user namespace)\n",
            v.soft_limit_bytes.map_or("unlimited".into(), h)
        )),
        None => out.push_str("  soft memlock limit: unlimited: fits\n"),
        Some(limit) if v.fits_memlock_limit => out.push_str(&format!(
            "  soft memlock limit {}: fits the busiest rank ({:.0}% of it)\n",
            h(limit),
            ratio(e.per_rank_max_bytes, limit) * 100.0
        )),
        Some(limit) => out.push_str(&format!(
            "  soft memlock limit {}: TOO LOW, the busiest rank needs {:.1}x the limit: registration fails with \
                ENOMEM. Set `ulimit -l unlimited` (limits.conf memlock, systemd LimitMEMLOCK=infinity, docker \
                --ulimit memlock=-1)\n",
            h(limit),
            ratio(e.per_rank_max_bytes, limit)
        )),
    }
    match (v.memory_available_bytes, v.fits_memory_available) {
        (Some(a), Some(true)) => out.push_str(&format!(
            "  MemAvailable {}: fits ({:.1}% of it for the busiest node's host memory)\n",
            h(a),
            ratio(e.per_node_host_bytes, a) * 100.0
        )),
        (Some(a), _) => out.push_str(&format!("  MemAvailable {}: TOO LITTLE for the per-node host memory\n", h(a))),
        (None, _) => out.push_str("  MemAvailable: unknown\n"),
    }
    out.push_str("\nmodelled:\n");
    for c in COVERS {
        out.push_str(&format!("  - {c}\n"));
    }
    out.push_str("not modelled:\n");
    for c in NOT_MODELLED {
        out.push_str(&format!("  - {c}\n"));
    }
    out
}

/// `estimate --json`.
#[derive(Serialize)]
struct Report<'a> {
    estimate: EstimateReport<'a>,
    verdict: &'a Verdict,
}

#[derive(Serialize)]
struct EstimateReport<'a> {
    nccl_commit: &'static str,
    nccl_version: &'static str,
    #[serde(flatten)]
    model: &'a Estimate,
    gdr: &'a Detected,
    nics_why: &'a str,
    connect: &'a str,
    environment: &'a [String],
    environment_error: Option<&'a str>,
    assumed: &'a [String],
    problems: Vec<ProblemJson<'a>>,
    conf_files: Vec<ConfJson<'a>>,
    covers: &'static [&'static str],
    not_modelled: &'static [&'static str],
}

#[derive(Serialize)]
struct ProblemJson<'a> {
    name: &'a str,
    status: &'static str,
    measured: &'a str,
    fix: &'a str,
}

#[derive(Serialize)]
struct ConfJson<'a> {
    path: String,
    set: &'a [String],
    error: Option<&'a str>,
}

pub(crate) fn render_json(d: &Derived, e: &Estimate, v: &Verdict) -> Result<String, serde_json::Error> {
    let report = Report {
        estimate: EstimateReport {
            nccl_commit: NCCL_COMMIT,
            nccl_version: NCCL_VERSION,
            model: e,
            gdr: &d.gdr,
            nics_why: &d.nics_why,
            connect: &d.connect,
            environment: &d.environment,
            environment_error: d.environment_error.as_deref(),
            assumed: &d.assumed,
            problems: d
                .problems
                .iter()
                .map(|p| ProblemJson {
                    name: &p.name,
                    status: match p.severity {
                        Severity::Warn => "WARN",
                        Severity::Fail => "FAIL",
                    },
                    measured: &p.measured,
                    fix: &p.fix,
                })
                .collect(),
            conf_files: d
                .conf_files
                .iter()
                .map(|f| ConfJson { path: f.path.display().to_string(), set: &f.set, error: f.error.as_deref() })
                .collect(),
            covers: COVERS,
            not_modelled: NOT_MODELLED,
        },
        verdict: v,
    };
    serde_json::to_string_pretty(&report).map(|t| t + "\n")
}
