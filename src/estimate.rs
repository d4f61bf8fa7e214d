//! How much host memory NCCL registers (and so pins, charged to VmPin against the memlock
//! limit) per process and per node. An upper-bound model of NCCL's net transport buffers
//! (reference: linux-interfaces.md §8); it is an estimate, and says so.

use std::path::Path;

use serde::Serialize;

use crate::cli::{EstimateArgs, ModelArgs};
use crate::fsroot;
use crate::kernel::{meminfo, pid_limits};
use crate::units::bytes as human;

/// NCCL's defaults (src/init.cc at 5067397c).
pub const DEFAULT_LL_BUFFSIZE: u64 = 524_288;
pub const DEFAULT_LL128_BUFFSIZE: u64 = 4_915_200;
pub const DEFAULT_BUFFSIZE: u64 = 4_194_304;
pub const DEFAULT_P2P_CHUNKSIZE: u64 = 131_072;
/// NCCL sizes its per-connection QP tables for at most this many (NCCL_IB_MAX_QPS).
pub const MAX_QPS_PER_CONNECTION: u64 = 128;
/// NCCL_STEPS for shared p2p buffers.
const SHARED_STEPS: u64 = 16;
/// Control MRs per net communicator and device (FIFOs, completion records, flush word).
const CONTROL_PAGES: u64 = 6;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Inputs {
    pub nodes: u64,
    pub ranks_per_node: u64,
    pub channels: u64,
    /// Network send / receive connections per channel of one rank (ring: 1 and 1).
    pub net_sends_per_channel: u64,
    pub net_recvs_per_channel: u64,
    pub communicators: u64,
    pub buffsize: u64,
    pub ll_buffsize: u64,
    pub ll128_buffsize: u64,
    /// GPUDirect RDMA for sends (GPU buffers are read by the NIC; only LL stays on the host).
    pub gdr_read: bool,
    /// GPUDirect RDMA for receives (all receive buffers in GPU memory).
    pub gdr_write: bool,
    /// Send/recv (p2p) traffic over the network: the shared p2p pool.
    pub p2p_net: bool,
    pub p2p_channels: u64,
    pub p2p_chunksize: u64,
    /// NCCL_ALLOC_P2P_NET_LL_BUFFERS=1: an LL buffer per p2p network connection.
    pub alloc_p2p_net_ll_buffers: bool,
    pub p2p_net_connections: u64,
    /// Devices each connection registers on (a merged virtual NIC registers on every member).
    pub devices_per_connection: u64,
    pub qps_per_connection: u64,
    /// Pinned bytes per QP with its CQ (not verified on hardware; depends on queue depths).
    pub qp_ring_bytes: u64,
    pub page_size: u64,
}

impl Default for Inputs {
    fn default() -> Self {
        Self {
            nodes: 2,
            ranks_per_node: 8,
            channels: 32,
            net_sends_per_channel: 1,
            net_recvs_per_channel: 1,
            communicators: 1,
            buffsize: DEFAULT_BUFFSIZE,
            ll_buffsize: DEFAULT_LL_BUFFSIZE,
            ll128_buffsize: DEFAULT_LL128_BUFFSIZE,
            gdr_read: false,
            gdr_write: false,
            p2p_net: false,
            p2p_channels: 32,
            p2p_chunksize: DEFAULT_P2P_CHUNKSIZE,
            alloc_p2p_net_ll_buffers: false,
            p2p_net_connections: 0,
            devices_per_connection: 1,
            qps_per_connection: 1,
            qp_ring_bytes: 65_536,
            page_size: 4096,
        }
    }
}

/// One line of the estimate: what, how it is computed, how many bytes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Term {
    pub name: &'static str,
    pub formula: String,
    pub bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    pub inputs: Inputs,
    /// Per communicator, per process.
    pub terms: Vec<Term>,
    pub per_process_bytes: u64,
    /// Upper bound: every rank of the node holds the same network connections.
    pub per_node_bytes: u64,
    pub assumptions: Vec<&'static str>,
}

fn round_pages(bytes: u64, page: u64) -> u64 {
    if page == 0 {
        return bytes;
    }
    bytes.div_ceil(page).saturating_mul(page)
}

pub fn estimate(inputs: &Inputs) -> Estimate {
    let i = inputs;
    let page = i.page_size.max(1);
    let (l, l128, s) =
        (round_pages(i.ll_buffsize, page), round_pages(i.ll128_buffsize, page), round_pages(i.buffsize, page));
    let d = i.devices_per_connection;
    let networked = i.nodes > 1;
    let sends = if networked { i.channels.saturating_mul(i.net_sends_per_channel) } else { 0 };
    let recvs = if networked { i.channels.saturating_mul(i.net_recvs_per_channel) } else { 0 };
    let per_send = l.saturating_add(if i.gdr_read { 0 } else { l128.saturating_add(s) });
    let per_recv = if i.gdr_write { 0 } else { l.saturating_add(l128).saturating_add(s) };
    let mut terms = vec![
        Term {
            name: "collective sends",
            formula: format!(
                "{d} device(s) x {sends} sends ({} channels x {}) x {per_send} B ({})",
                i.channels,
                i.net_sends_per_channel,
                if i.gdr_read { "LL only: GDR read keeps LL128 and Simple on the GPU" } else { "LL + LL128 + Simple" }
            ),
            bytes: d.saturating_mul(sends).saturating_mul(per_send),
        },
        Term {
            name: "collective receives",
            formula: format!(
                "{d} device(s) x {recvs} receives x {per_recv} B ({})",
                if i.gdr_write {
                    "none: GDR write puts every receive buffer on the GPU"
                } else {
                    "LL + LL128 + Simple"
                }
            ),
            bytes: d.saturating_mul(recvs).saturating_mul(per_recv),
        },
    ];
    if i.p2p_net && networked {
        let pool = if i.gdr_read && i.gdr_write {
            0
        } else {
            (2 * SHARED_STEPS).saturating_mul(i.p2p_channels).saturating_mul(round_pages(i.p2p_chunksize, page))
        };
        terms.push(Term {
            name: "shared p2p pool",
            formula: format!(
                "{d} device(s) x 2 directions x {} p2p channels x {SHARED_STEPS} steps x {} B chunk",
                i.p2p_channels, i.p2p_chunksize
            ),
            bytes: d.saturating_mul(pool),
        });
    }
    if i.alloc_p2p_net_ll_buffers && networked {
        terms.push(Term {
            name: "p2p LL buffers",
            formula: format!("{d} device(s) x {} p2p network connections x {l} B", i.p2p_net_connections),
            bytes: d.saturating_mul(i.p2p_net_connections).saturating_mul(l),
        });
    }
    if networked {
        terms.push(Term {
            name: "control MRs",
            formula: format!("{d} device(s) x {CONTROL_PAGES} pages x {page} B"),
            bytes: d.saturating_mul(CONTROL_PAGES).saturating_mul(page),
        });
        let qps = sends.saturating_add(recvs).saturating_mul(i.qps_per_connection);
        terms.push(Term {
            name: "QP and CQ rings",
            formula: format!(
                "{d} device(s) x {qps} QPs ({} per connection) x {} B (assumed)",
                i.qps_per_connection, i.qp_ring_bytes
            ),
            bytes: d.saturating_mul(qps).saturating_mul(i.qp_ring_bytes),
        });
    }
    let per_communicator: u64 = terms.iter().map(|t| t.bytes).fold(0, u64::saturating_add);
    let per_process_bytes = per_communicator.saturating_mul(i.communicators);
    Estimate {
        inputs: inputs.clone(),
        terms,
        per_process_bytes,
        per_node_bytes: per_process_bytes.saturating_mul(i.ranks_per_node),
        assumptions: vec![
            "an upper-bound model of NCCL's net transport (NVIDIA/nccl 5067397c), not a measurement: calibrate against \
                the VmPin step at communicator init",
            "a single node (--nodes 1) registers nothing for the network: intra-node traffic uses P2P/SHM",
            "per process: one rank holds all of its channels' network connections (ring: 1 send and 1 receive per \
                channel); trees and all-to-all add connections",
            "per node: every rank holds as many (rail-optimised topologies); with PXN the proxy process is charged, \
                not the rank",
            "GPU buffers registered through dma-buf are not charged to VmPin; host buffers (cudaHostAlloc) registered \
                with ibv_reg_mr are",
            "QP/CQ ring size per QP is not verified on hardware",
        ],
    }
}

/// Reads NCCL's variables for the defaults a job would run with. Unparseable values are
/// reported, not silently replaced; so are values NCCL cannot run with.
pub fn inputs_from_env(vars: impl Fn(&str) -> Option<String>, mut inputs: Inputs) -> Result<Inputs, String> {
    let read = |name: &str| -> Result<Option<u64>, String> {
        match vars(name) {
            None => Ok(None),
            Some(text) => {
                text.trim().parse().map(Some).map_err(|_| format!("{name}={text:?} is not a non-negative integer"))
            }
        }
    };
    let number = |name: &str, slot: &mut u64| -> Result<(), String> {
        if let Some(value) = read(name)? {
            *slot = value;
        }
        Ok(())
    };
    number("NCCL_BUFFSIZE", &mut inputs.buffsize)?;
    number("NCCL_LL_BUFFSIZE", &mut inputs.ll_buffsize)?;
    number("NCCL_LL128_BUFFSIZE", &mut inputs.ll128_buffsize)?;
    number("NCCL_P2P_NET_CHUNKSIZE", &mut inputs.p2p_chunksize)?;
    if let Some(qps) = read("NCCL_IB_QPS_PER_CONNECTION")? {
        qps_in_range(qps).map_err(|why| format!("NCCL_IB_QPS_PER_CONNECTION={qps}: {why}"))?;
        inputs.qps_per_connection = qps;
    }
    // NCCL ignores NCCL_MAX_CTAS <= 0 ("too low, leaving it set") and raises NCCL_MAX_NCHANNELS
    // below 1 to 1 (src/init.cc, src/graph/connect.cc), so neither can make the model 0 B.
    if let Some(ctas) = read("NCCL_MAX_CTAS")?.filter(|c| *c > 0) {
        inputs.channels = ctas;
    }
    if let Some(channels) = read("NCCL_MAX_NCHANNELS")? {
        inputs.channels = channels.max(1);
    }
    let mut ll = u64::from(inputs.alloc_p2p_net_ll_buffers);
    number("NCCL_ALLOC_P2P_NET_LL_BUFFERS", &mut ll)?;
    inputs.alloc_p2p_net_ll_buffers = ll != 0;
    Ok(inputs)
}

/// The estimate against one process's memlock limit and the node's available memory.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    pub pid: String,
    /// `None` when unlimited.
    pub soft_limit_bytes: Option<u64>,
    pub soft_limit_unlimited: bool,
    /// The per-process estimate fits under the soft limit (always true when unlimited).
    pub fits_memlock_limit: bool,
    pub memory_available_bytes: Option<u64>,
    /// The per-node estimate fits in MemAvailable.
    pub fits_memory_available: Option<bool>,
}

pub fn verdict(estimate: &Estimate, pid: &str, soft: pid_limits::Limit, available: Option<u64>) -> Verdict {
    let soft_bytes = soft.bytes();
    Verdict {
        pid: pid.to_owned(),
        soft_limit_bytes: soft_bytes,
        soft_limit_unlimited: soft.is_unlimited(),
        fits_memlock_limit: soft_bytes.is_none_or(|limit| estimate.per_process_bytes <= limit),
        memory_available_bytes: available,
        fits_memory_available: available.map(|a| estimate.per_node_bytes <= a),
    }
}

fn qps_in_range(qps: u64) -> Result<(), String> {
    if (1..=MAX_QPS_PER_CONNECTION).contains(&qps) {
        Ok(())
    } else {
        Err(format!("NCCL takes 1 to {MAX_QPS_PER_CONNECTION} QPs per connection"))
    }
}

/// Rejects model flags no job can have. A zero node, rank, channel or connection count would
/// model no registration at all: the need would come out as 0 B and every check would pass.
pub fn validate(args: &ModelArgs) -> Result<(), String> {
    let counts = [
        ("--nodes", Some(args.nodes)),
        ("--ranks-per-node", Some(args.ranks_per_node)),
        ("--channels", args.channels),
        ("--communicators", Some(args.communicators)),
        ("--p2p-channels", args.p2p_channels),
        ("--net-connections-per-channel", Some(args.net_connections_per_channel)),
        ("--devices-per-connection", Some(args.devices_per_connection)),
    ];
    for (flag, value) in counts {
        if value == Some(0) {
            let hint = if flag == "--nodes" { " (--nodes 1 is a single-node job)" } else { "" };
            return Err(format!("{flag} 0: must be at least 1{hint}"));
        }
    }
    if let Some(qps) = args.qps_per_connection {
        qps_in_range(qps).map_err(|why| format!("--qps-per-connection {qps}: {why}"))?;
    }
    Ok(())
}

/// Builds the model inputs from the flags, the NCCL_* environment and the defaults.
pub fn inputs_from_args(args: &ModelArgs, env: impl Fn(&str) -> Option<String>) -> Result<Inputs, String> {
    validate(args)?;
    let mut inputs = inputs_from_env(env, Inputs::default())?;
    inputs.nodes = args.nodes;
    inputs.ranks_per_node = args.ranks_per_node;
    inputs.communicators = args.communicators;
    if let Some(c) = args.channels {
        inputs.channels = c;
    }
    for (flag, slot) in [
        (args.buffsize, &mut inputs.buffsize),
        (args.ll_buffsize, &mut inputs.ll_buffsize),
        (args.ll128_buffsize, &mut inputs.ll128_buffsize),
    ] {
        if let Some(v) = flag {
            *slot = v;
        }
    }
    if let Some(q) = args.qps_per_connection {
        inputs.qps_per_connection = q;
    }
    (inputs.gdr_read, inputs.gdr_write) = match args.gdr.as_str() {
        "off" => (false, false),
        "read" => (true, false),
        "write" => (false, true),
        "both" => (true, true),
        other => return Err(format!("--gdr {other:?}: expected off, read, write or both")),
    };
    inputs.p2p_net = args.p2p_net;
    inputs.p2p_channels = args.p2p_channels.unwrap_or(inputs.channels);
    inputs.net_sends_per_channel = args.net_connections_per_channel;
    inputs.net_recvs_per_channel = args.net_connections_per_channel;
    inputs.devices_per_connection = args.devices_per_connection;
    inputs.qp_ring_bytes = args.qp_ring_bytes;
    inputs.page_size = procfs::page_size();
    Ok(inputs)
}

/// Reads a process's soft memlock limit and the node's MemAvailable through the procfs root.
pub fn read_machine(procfs: &Path, pid: &str) -> Result<(pid_limits::Limit, Option<u64>), fsroot::SourceError> {
    let limits = fsroot::read_parsed(&procfs.join(pid).join("limits"), pid_limits::parse)?;
    let available = fsroot::read_parsed(&procfs.join("meminfo"), meminfo::parse)?.mem_available;
    Ok((limits.soft, available))
}

pub fn render_text(e: &Estimate, v: &Verdict) -> String {
    let i = &e.inputs;
    let gdr = match (i.gdr_read, i.gdr_write) {
        (false, false) => "off",
        (true, false) => "read",
        (false, true) => "write",
        (true, true) => "both",
    };
    let mut out = String::from("NCCL host memory registration estimate (an upper-bound model, not a measurement)\n\n");
    out.push_str(&format!(
        "inputs: {} node(s) x {} ranks, {} channels, {} communicator(s), GDR {gdr}, buffers LL {} / LL128 {} / Simple \
            {} B\n\n",
        i.nodes, i.ranks_per_node, i.channels, i.communicators, i.ll_buffsize, i.ll128_buffsize, i.buffsize
    ));
    out.push_str("per communicator, per process:\n");
    for t in &e.terms {
        out.push_str(&format!("  {:<20} {:>12}  = {}\n", t.name, human(t.bytes as f64), t.formula));
    }
    out.push_str(&format!("\nper process: {} ({} bytes)\n", human(e.per_process_bytes as f64), e.per_process_bytes));
    out.push_str(&format!(
        "per node ({} ranks): {} ({} bytes)\n\n",
        i.ranks_per_node,
        human(e.per_node_bytes as f64),
        e.per_node_bytes
    ));
    out.push_str(&format!("against this machine (pid {}):\n", v.pid));
    match v.soft_limit_bytes {
        None => out.push_str("  soft memlock limit: unlimited: fits\n"),
        Some(limit) if v.fits_memlock_limit => out.push_str(&format!(
            "  soft memlock limit {}: fits ({:.0}% of \
                it)\n",
            human(limit as f64),
            ratio(e.per_process_bytes, limit) * 100.0
        )),
        Some(limit) => out.push_str(&format!(
            "  soft memlock limit {}: TOO LOW, the estimate is {:.1}x the limit: registration fails with ENOMEM. Set \
                `ulimit -l unlimited` (limits.conf memlock, systemd LimitMEMLOCK=infinity, docker --ulimit \
                memlock=-1)\n",
            human(limit as f64),
            ratio(e.per_process_bytes, limit)
        )),
    }
    match (v.memory_available_bytes, v.fits_memory_available) {
        (Some(a), Some(true)) => out.push_str(&format!(
            "  MemAvailable {}: fits ({:.1}% of it per node)\n",
            human(a as f64),
            ratio(e.per_node_bytes, a) * 100.0
        )),
        (Some(a), _) => {
            out.push_str(&format!("  MemAvailable {}: TOO LITTLE for the per-node estimate\n", human(a as f64)))
        }
        (None, _) => out.push_str("  MemAvailable: unknown\n"),
    }
    out.push_str("\nassumptions:\n");
    for a in &e.assumptions {
        out.push_str(&format!("  - {a}\n"));
    }
    out
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        f64::INFINITY
    } else {
        part as f64 / whole as f64
    }
}

/// `memlock-exporter estimate`: prints the estimate; exit 0, 2 when it cannot run (bad flags,
/// unreadable limits), 1 when the report cannot be written.
pub fn run(args: &EstimateArgs) -> u8 {
    let inputs = match inputs_from_args(&args.model, |name| std::env::var(name).ok()) {
        Ok(i) => i,
        Err(message) => {
            eprintln!("memlock-exporter estimate: {message}");
            return crate::exit::USAGE;
        }
    };
    let e = estimate(&inputs);
    let pid = args.pid.map(|p| p.to_string()).unwrap_or_else(|| "self".into());
    let (soft, available) = match read_machine(Path::new(&args.procfs), &pid) {
        Ok(found) => found,
        Err(err) => {
            eprintln!("memlock-exporter estimate: {err}");
            return crate::exit::USAGE;
        }
    };
    let v = verdict(&e, &pid, soft, available);
    let text = if args.json {
        #[derive(Serialize)]
        struct Report<'a> {
            estimate: &'a Estimate,
            verdict: &'a Verdict,
        }
        match serde_json::to_string_pretty(&Report { estimate: &e, verdict: &v }) {
            Ok(text) => text + "\n",
            Err(err) => {
                eprintln!("memlock-exporter estimate: {err}");
                return crate::exit::RUNTIME;
            }
        }
    } else {
        render_text(&e, &v)
    };
    if let Err(err) = crate::cli::print_report(&text) {
        eprintln!("memlock-exporter estimate: writing the report: {err}");
        return crate::exit::RUNTIME;
    }
    crate::exit::OK
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn the_reference_example_without_gdr() {
        // §8.3: defaults, 32 channels, one send and one receive each, one device: 588 MiB of
        // buffers, plus control MRs and QP rings.
        let e = estimate(&Inputs { qp_ring_bytes: 0, ..Inputs::default() });
        assert_eq!(e.terms[0].bytes + e.terms[1].bytes, 616_562_688);
        assert_eq!(e.per_process_bytes, 616_562_688 + 6 * 4096);
        assert_eq!(e.per_node_bytes, e.per_process_bytes * 8);
    }

    #[test]
    fn the_shared_p2p_pool_adds_128_mib() {
        let base = estimate(&Inputs { qp_ring_bytes: 0, ..Inputs::default() });
        let p2p = estimate(&Inputs { qp_ring_bytes: 0, p2p_net: true, ..Inputs::default() });
        assert_eq!(p2p.per_process_bytes - base.per_process_bytes, 128 * MIB);
    }

    #[test]
    fn gdr_both_ways_leaves_only_ll_on_the_host() {
        let e = estimate(&Inputs { qp_ring_bytes: 0, gdr_read: true, gdr_write: true, ..Inputs::default() });
        assert_eq!(e.terms[0].bytes + e.terms[1].bytes, 16 * MIB);
        assert!(e.per_process_bytes > 8 * MIB, "still above the 8 MiB default limit");
    }

    #[test]
    fn one_node_registers_nothing_for_the_network() {
        let e = estimate(&Inputs { nodes: 1, ..Inputs::default() });
        assert_eq!(e.per_process_bytes, 0);
    }

    #[test]
    fn devices_and_communicators_multiply() {
        let one = estimate(&Inputs::default()).per_process_bytes;
        let e = estimate(&Inputs { devices_per_connection: 2, communicators: 3, ..Inputs::default() });
        assert_eq!(e.per_process_bytes, one * 6);
    }

    #[test]
    fn odd_buffer_sizes_round_up_to_pages_and_huge_values_saturate() {
        let e = estimate(&Inputs { buffsize: 4097, channels: 1, ..Inputs::default() });
        assert_eq!(e.terms[0].bytes, DEFAULT_LL_BUFFSIZE + DEFAULT_LL128_BUFFSIZE + 8192);
        let huge =
            estimate(&Inputs { channels: u64::MAX, buffsize: u64::MAX, communicators: u64::MAX, ..Inputs::default() });
        assert_eq!(huge.per_node_bytes, u64::MAX);
    }

    #[test]
    fn verdicts_against_the_limit_and_memory() {
        let e = estimate(&Inputs::default());
        let v = verdict(&e, "self", pid_limits::Limit::Bytes(8 * MIB), Some(1 << 40));
        assert!(!v.fits_memlock_limit);
        assert_eq!(v.fits_memory_available, Some(true));
        let text = render_text(&e, &v);
        assert!(text.contains("TOO LOW") && text.contains("ulimit -l unlimited"), "{text}");
        assert!(text.contains("an upper-bound model"));
        let v = verdict(&e, "self", pid_limits::Limit::Unlimited, Some(MIB));
        assert!(v.fits_memlock_limit && v.soft_limit_unlimited);
        assert_eq!(v.fits_memory_available, Some(false));
    }

    #[test]
    fn the_fixture_machine_is_read_through_the_procfs_root() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let root = std::env::temp_dir().join(format!("memlock-estimate-{}", std::process::id()));
        std::fs::create_dir_all(root.join("self")).unwrap();
        std::fs::copy(fixtures.join("captures/proc_self_limits"), root.join("self/limits")).unwrap();
        std::fs::copy(fixtures.join("proc/meminfo"), root.join("meminfo")).unwrap();
        let (soft, available) = read_machine(&root, "self").unwrap();
        assert_eq!(soft, pid_limits::Limit::Bytes(8_388_608));
        assert_eq!(available, Some(23_786_376 * 1024));
        assert!(read_machine(&root, "999999999").unwrap_err().to_string().contains("999999999/limits"));
        std::fs::remove_dir_all(&root).unwrap();
    }

    fn model(flags: &[&str]) -> ModelArgs {
        use clap::Parser;
        let argv = ["memlock-exporter", "estimate"].iter().chain(flags);
        match crate::cli::Cli::try_parse_from(argv) {
            Ok(crate::cli::Cli { command: Some(crate::cli::Command::Estimate(args)), .. }) => args.model,
            other => panic!("{flags:?}: {other:?}"),
        }
    }

    #[test]
    fn model_inputs_no_job_can_have_are_refused_naming_the_flag() {
        let no_env = |_: &str| None;
        assert!(inputs_from_args(&model(&[]), no_env).is_ok());
        assert!(inputs_from_args(&model(&["--nodes", "1", "--qps-per-connection", "128"]), no_env).is_ok());
        for flag in [
            "--nodes",
            "--ranks-per-node",
            "--channels",
            "--communicators",
            "--p2p-channels",
            "--net-connections-per-channel",
            "--devices-per-connection",
        ] {
            let err = inputs_from_args(&model(&[flag, "0"]), no_env).unwrap_err();
            assert!(err.starts_with(&format!("{flag} 0: must be at least 1")), "{err}");
        }
        for qps in ["0", "129"] {
            let err = inputs_from_args(&model(&["--qps-per-connection", qps]), no_env).unwrap_err();
            assert_eq!(err, format!("--qps-per-connection {qps}: NCCL takes 1 to 128 QPs per connection"));
        }
        // The flag is checked even when the environment is broken too: the flag is what to fix.
        let broken = |name: &str| (name == "NCCL_BUFFSIZE").then(|| "4M".to_owned());
        assert!(inputs_from_args(&model(&["--nodes", "0"]), broken).unwrap_err().starts_with("--nodes"));
    }

    #[test]
    fn zero_channels_or_qps_from_the_environment_follow_nccl() {
        let one = |name: &'static str, value: &'static str| move |n: &str| (n == name).then(|| value.to_owned());
        // NCCL leaves its default for NCCL_MAX_CTAS <= 0 and raises NCCL_MAX_NCHANNELS to 1.
        assert_eq!(inputs_from_env(one("NCCL_MAX_CTAS", "0"), Inputs::default()).unwrap().channels, 32);
        assert_eq!(inputs_from_env(one("NCCL_MAX_NCHANNELS", "0"), Inputs::default()).unwrap().channels, 1);
        assert_eq!(
            inputs_from_env(one("NCCL_IB_QPS_PER_CONNECTION", "4"), Inputs::default()).unwrap().qps_per_connection,
            4
        );
        for qps in ["0", "129"] {
            let err = inputs_from_env(one("NCCL_IB_QPS_PER_CONNECTION", qps), Inputs::default()).unwrap_err();
            assert!(err.starts_with(&format!("NCCL_IB_QPS_PER_CONNECTION={qps}: ")), "{err}");
        }
    }

    #[test]
    fn environment_defaults() {
        let env = |name: &str| match name {
            "NCCL_BUFFSIZE" => Some("8388608".to_owned()),
            "NCCL_MAX_CTAS" => Some("16".to_owned()),
            _ => None,
        };
        let i = inputs_from_env(env, Inputs::default()).unwrap();
        assert_eq!(i.buffsize, 8 * MIB);
        assert_eq!(i.channels, 16);
        let bad = |name: &str| (name == "NCCL_BUFFSIZE").then(|| "4M".to_owned());
        assert!(inputs_from_env(bad, Inputs::default()).unwrap_err().contains("NCCL_BUFFSIZE"));
    }
}
