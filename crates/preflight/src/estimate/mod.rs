//! `memlock-exporter estimate`: how much memory NCCL registers per rank and per node, from the
//! model in [`crate::nccl::model`] (derived from NCCL's source; docs/check.md), with the inputs
//! taken from the flags, the NCCL_* environment as NCCL reads it, and the node.

use std::path::PathBuf;

use clap::Args;
use serde::Serialize;

use crate::machine::{self, Machine};
use crate::nccl::env::{self, param_value, ConfFile, Environment};
use crate::nccl::model::{self, ChannelLimits, Channels, Estimate, Inputs, P2p};
use memlock_core::collect::rdma_sysfs::SysfsDevice;
use memlock_core::gdr::{self, Detected, GdrMode};
use memlock_kernel::fsroot::Roots;
use memlock_kernel::pid_limits;

pub mod from_log;
pub mod range;
mod render;

use render::{render_json, render_text};

/// What the model covers and what it leaves out, printed with every estimate.
/// Inputs of the NCCL registration model (docs/check.md). Unset values come from the NCCL_*
/// environment (and NCCL's configuration files) when present, else NCCL's defaults or the node.
#[derive(Debug, Args, Default, Clone)]
pub struct ModelArgs {
    /// Nodes in the job (1: no network registration while NCCL keeps intra-node traffic on
    /// NVLink, PCIe P2P or shared memory).
    #[arg(long, default_value_t = 2)]
    pub nodes: u64,
    /// Ranks (GPUs) per node.
    #[arg(long = "ranks-per-node", default_value_t = 8)]
    pub(crate) ranks_per_node: u64,
    /// NICs per node the job uses (default: this node's ACTIVE RDMA ports that NCCL_IB_HCA
    /// selects, else one per rank).
    #[arg(long)]
    pub nics: Option<u64>,
    /// Channels NCCL runs, C (NCCL_DEBUG=INFO prints "C coll channels"; default: 2 x S, within
    /// NCCL_MIN/MAX_NCHANNELS and NCCL_MIN/MAX_CTAS).
    #[arg(long)]
    pub channels: Option<u64>,
    /// The ring graph's channels, S, which decide each channel's tree (NCCL_DEBUG=INFO prints
    /// "Pattern 4, crossNic ., nChannels S"; default: one per NIC, doubled when at most 4).
    #[arg(long = "search-channels")]
    pub search_channels: Option<u64>,
    /// Communicators per process (each registers its own buffers). Default: 1 for `estimate`;
    /// `check` assumes several (crate::check::for_job::DEFAULT_COMMUNICATORS).
    #[arg(long)]
    pub communicators: Option<u64>,
    /// NCCL_BUFFSIZE (Simple protocol buffer, bytes).
    #[arg(long)]
    pub buffsize: Option<u64>,
    /// NCCL_LL_BUFFSIZE (bytes).
    #[arg(long = "ll-buffsize")]
    pub(crate) ll_buffsize: Option<u64>,
    /// NCCL_LL128_BUFFSIZE (bytes).
    #[arg(long = "ll128-buffsize")]
    pub(crate) ll128_buffsize: Option<u64>,
    /// GPUDirect RDMA charging: off (all buffers on the host), dmabuf (GPU buffers not charged),
    /// peermem (GPU buffers charged to VmPin). Default: detected from sysfs.
    #[arg(long)]
    pub gdr: Option<String>,
    /// All-to-all (send/recv) over the network: every rank connects to every rank of the other
    /// nodes, with the shared p2p pools.
    #[arg(long = "p2p-net")]
    pub(crate) p2p_net: bool,
    /// p2p channels (p2pnChannels; default: from the channel count, NCCL_MIN/MAX_P2P_NCHANNELS).
    #[arg(long = "p2p-channels")]
    pub(crate) p2p_channels: Option<u64>,
    /// With --p2p-net: every rank sends from its own process, no PXN proxy (what NCCL does where a
    /// GPU has no NVLink to the GPU next to the peer's rail NIC, or with NCCL_P2P_PXN_LEVEL=0).
    /// Default: PXN wherever GPUDirect allows it, NVLink between all GPUs assumed.
    #[arg(long = "no-p2p-pxn")]
    pub(crate) no_p2p_pxn: bool,
    /// Devices each connection registers on (a merged virtual NIC registers on every member).
    #[arg(long = "devices-per-connection", default_value_t = 1)]
    pub(crate) devices_per_connection: u64,
    /// NCCL_IB_QPS_PER_CONNECTION (1 to 128).
    #[arg(long = "qps-per-connection")]
    pub(crate) qps_per_connection: Option<u64>,
    /// The job's NCCL release (2.18 to 2.30, e.g. 2.21.5): whose rules apply. Default: the
    /// library the process maps (--pid), else the log's (--nccl-log), else the newest.
    #[arg(long = "nccl-version", value_name = "VERSION")]
    pub nccl_version: Option<String>,
    /// The NICs' speed in Gb/s (p2p channels per network peer from NCCL 2.29). Default: the
    /// fastest port NCCL opens on this node, else 400.
    #[arg(long = "nic-speed", value_name = "GBPS")]
    pub(crate) nic_speed: Option<u64>,
}

#[derive(Debug, Args, Default, Clone)]
pub struct EstimateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Compare with this process's memlock limit, and read its environment, instead of our own.
    #[arg(long)]
    pub pid: Option<u32>,
    /// procfs mount point.
    #[arg(long = "path.procfs", default_value = "/proc")]
    pub procfs: String,
    /// sysfs mount point (GPUDirect and NIC detection).
    #[arg(long = "path.sysfs", default_value = "/sys")]
    pub sysfs: String,
    /// One JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// The job's NCCL_DEBUG=INFO log (a file, or - for standard input): each process's network
    /// connections counted from it, beside the model (the `nccl_log` key of --json).
    #[arg(long = "nccl-log", value_name = "FILE")]
    pub nccl_log: Option<String>,
}

pub(crate) const COVERS: &[&str] = &[
    "ring and double-binary-tree network connections per channel (and PAT with one rank per node), placed on the \
        ranks next to each channel's NIC (PXN sends on the NIC's GPU), each connector to a peer counted once however \
        many algorithms use it",
    "per connection: LL, LL128 and Simple buffers by GPUDirect mode, control MRs in whole pages, mlx5 QP and CQ \
        rings, doorbell records; every registration repeated per member of a merged NIC",
    "with --p2p-net: all-to-all connections to every rank of the other nodes, sends through the PXN proxy of the \
        peer's rail with GPUDirect, one connection per NIC, peer and channel shared by the local senders \
        (NCCL_NET_SHARED_COMMS), channels per network peer by NCCL release, NIC speed and NCCL_P2P_MAX_PEERS, the \
        schedule's channels per release, NCCL_CROSS_NIC=0 without PXN, and the shared p2p pools per origin rank",
];
pub(crate) const NOT_MODELLED: &[&str] = &[
    "NVLS, NVLS tree and CollNet (NVLink SHARP, in-network reduction); p2p between GPUs without NVLink (an NVSwitch \
        node is assumed: --no-p2p-pxn gives the figure without it)",
    "user buffer registration (NCCL_LOCAL_REGISTER, ncclCommRegister: usually GPU memory)",
    "providers other than mlx5 (EFA, bnxt_re size their queues differently), MLX5_CQE_SIZE=128, IB resiliency",
    "topologies where a channel's ring does not enter and leave the node through one rail (crossNic rings), \
        channel copies past 2S (sm90 with bwIntra > 45 under 16 channels: only in the range; unpack network \
        devices); pass --channels and --search-channels from NCCL_DEBUG=INFO where the defaults were assumed",
];

/// The model inputs and how each was decided.
#[derive(Debug, Clone)]
pub struct Derived {
    pub inputs: Inputs,
    pub gdr: Detected,
    /// Why this many NICs.
    pub(crate) nics_why: String,
    /// When NCCL connects (runtime connect since 2.22, or at communicator init).
    pub connect: String,
    /// NCCL_* variables that shaped the inputs, as NCCL reads them.
    pub environment: Vec<String>,
    /// Variables NCCL reads otherwise than written, or not at all.
    pub problems: Vec<env::Problem>,
    pub(crate) conf_files: Vec<ConfFile>,
    /// Why the target's environment could not be read (its NCCL variables then count as unset).
    pub(crate) environment_error: Option<String>,
    /// The inputs that were not given, each with where NCCL prints the real one and its flag.
    pub assumed: Vec<String>,
}

/// The ports NCCL opens (ACTIVE, selected per port by NCCL_IB_HCA: machine::nccl_opens): each is a
/// NIC to NCCL (net_ib/init.cc opens one device per such port).
fn detected_nics(devices: &[SysfsDevice], env: &Environment) -> (u64, String) {
    let spec = env.get("NCCL_IB_HCA");
    let ports: Vec<String> = devices
        .iter()
        .flat_map(|d| {
            d.ports
                .iter()
                .filter(move |p| machine::nccl_opens(spec, d, p))
                .map(move |p| format!("{}:{}", d.name, p.number))
        })
        .collect();
    let n = ports.len() as u64;
    (
        n,
        format!(
            "{n} ACTIVE RDMA port(s) on this node{}: {}",
            if spec.is_some() { " that NCCL_IB_HCA selects" } else { "" },
            ports.join(", ")
        ),
    )
}

/// The fastest port NCCL opens, Gb/s (sysfs `rate`), if any says.
fn nic_speed(devices: &[SysfsDevice], env: &Environment) -> Option<u64> {
    let spec = env.get("NCCL_IB_HCA");
    devices
        .iter()
        .flat_map(|d| d.ports.iter().filter(move |p| machine::nccl_opens(spec, d, p)))
        .filter_map(|p| p.rate_bytes_per_second)
        .map(|b| b.saturating_mul(8) / 1_000_000_000)
        .filter(|g| *g > 0)
        .max()
}

/// The RDMA devices with a port NCCL opens: the ones NCCL registers on.
fn selected_devices(devices: &[SysfsDevice], env: &Environment) -> Vec<String> {
    let spec = env.get("NCCL_IB_HCA");
    devices.iter().filter(|d| d.ports.iter().any(|p| machine::nccl_opens(spec, d, p))).map(|d| d.name.clone()).collect()
}

/// Reads an `NCCL_PARAM` variable as NCCL does, noting what it read.
struct Reader<'a> {
    env: &'a Environment,
    read: Vec<String>,
}

impl Reader<'_> {
    /// The value NCCL uses, unless it is the sentinel `unset`.
    fn int(&mut self, name: &str, unset: i64) -> Option<i64> {
        let v = param_value(self.env.get(name)).filter(|v| *v != unset)?;
        let entry = self.env.entry(name)?;
        let shown = entry.value_shown();
        let mut read =
            if shown == v.to_string() { format!("{name}={v}") } else { format!("{name}={shown} (read as {v})") };
        match &entry.source {
            env::Source::File(path) => read.push_str(&format!(" from {}", path.display())),
            env::Source::Log => read.push_str(" from the NCCL log"),
            env::Source::Process => {}
        }
        self.read.push(read);
        Some(v)
    }
}

/// NCCL_CONFIG_UNDEF_INT (src/include/nccl.h.in): INT_MIN, "unset" for the CTA variables.
const CONFIG_UNDEF_INT: i64 = i32::MIN as i64;

/// Rejects model flags no job can have (exit 2, naming the flag). A zero count would model no
/// registration at all: the need would be 0 B and every check would pass.
pub fn validate(args: &ModelArgs) -> Result<(), String> {
    let bounded = [
        ("--nodes", Some(args.nodes), model::MAX_NODES, " (--nodes 1 is a single-node job)"),
        ("--ranks-per-node", Some(args.ranks_per_node), model::MAX_LOCAL_RANKS, " (NCCL_MAX_LOCAL_RANKS)"),
        ("--nics", args.nics, model::MAX_NICS, " (MAX_IB_DEVS)"),
        ("--channels", args.channels, model::MAX_CHANNELS, " (MAXCHANNELS)"),
        (
            "--search-channels",
            args.search_channels,
            model::MAX_CHANNELS / 2,
            " (the ring graph's maxChannels, MAXCHANNELS/2)",
        ),
        ("--communicators", args.communicators, 1 << 16, ""),
        ("--p2p-channels", args.p2p_channels, model::MAX_CHANNELS, " (MAXCHANNELS)"),
        (
            "--devices-per-connection",
            Some(args.devices_per_connection),
            model::MAX_DEVICES_PER_NIC,
            " (NCCL_IB_MAX_DEVS_PER_NIC)",
        ),
        ("--qps-per-connection", args.qps_per_connection, model::MAX_QPS, " (NCCL_IB_MAX_QPS)"),
    ];
    for (flag, value, max, why) in bounded {
        match value {
            Some(0) => {
                let hint = if flag == "--nodes" { why } else { "" };
                return Err(format!("{flag} 0: must be at least 1{hint}"));
            }
            Some(v) if v > max => return Err(format!("{flag} {v}: NCCL takes at most {max}{why}")),
            _ => {}
        }
    }
    if let Some(q) = args.qps_per_connection {
        if q * args.devices_per_connection > model::MAX_QPS {
            return Err(format!(
                "--qps-per-connection {q}: {q} QPs on each of {} devices exceed NCCL_IB_MAX_QPS {}",
                args.devices_per_connection,
                model::MAX_QPS
            ));
        }
    }
    for (flag, value) in
        [("--buffsize", args.buffsize), ("--ll-buffsize", args.ll_buffsize), ("--ll128-buffsize", args.ll128_buffsize)]
    {
        if let Some(v) = value {
            if v == 0 || v > i32::MAX as u64 {
                return Err(format!("{flag} {v}: NCCL takes 1 to {} bytes (an int)", i32::MAX));
            }
        }
    }
    if let Some(v) = &args.nccl_version {
        if model::Release::parse(v).is_none() {
            return Err(format!("--nccl-version {v:?}: expected a release such as 2.21.5 or 2.29"));
        }
    }
    if args.nic_speed == Some(0) {
        return Err("--nic-speed 0: must be at least 1 (Gb/s)".into());
    }
    if let Some(mode) = &args.gdr {
        if GdrMode::parse(mode).is_none() {
            return Err(format!("--gdr {mode:?}: expected off, dmabuf or peermem"));
        }
    }
    Ok(())
}

/// NCCL_ALGO under runtime connect: an algorithm disabled for every collective that runs on it
/// is never chosen (src/graph/tuning.cc ncclTopoTuneModel sets its bandwidth to 0; tree runs
/// only AllReduce, PAT only AllGather and ReduceScatter) and so never connected (src/group.cc
/// ncclCollPreconnect connects what enqueue chose). At communicator init everything is connected
/// whatever NCCL_ALGO says (src/init.cc). A value NCCL refuses is check's FAIL: defaults here.
fn allowed_algorithms(env: &Environment, i: &mut Inputs, read: &mut Vec<String>) {
    use crate::nccl::grammar::{parse_list, ALGORITHMS, FUNCTIONS};
    let Some(value) = env.get("NCCL_ALGO") else { return };
    let Ok(enabled) = parse_list(value, ALGORITHMS) else { return };
    let at = |list: &[&str], name: &str| list.iter().position(|n| *n == name);
    let on = |f: &str, a: &str| match (at(FUNCTIONS, f), at(ALGORITHMS, a)) {
        (Some(f), Some(a)) => enabled[f][a],
        _ => true,
    };
    let ring = FUNCTIONS.iter().any(|f| on(f, "Ring"));
    let tree = on("AllReduce", "Tree");
    if !ring && !tree {
        return;
    }
    let pat = on("AllGather", "PAT") || on("ReduceScatter", "PAT");
    let off: Vec<&str> = [(ring, "ring"), (tree, "tree"), (pat || !i.pat || i.ranks_per_node != 1, "PAT")]
        .iter()
        .filter(|(on, _)| !on)
        .map(|(_, n)| *n)
        .collect();
    (i.ring, i.tree, i.pat) = (ring, tree, i.pat && pat);
    if !off.is_empty() {
        read.push(format!(
            "NCCL_ALGO={}: {} never chosen, so never connected (runtime connect)",
            crate::nccl::param::show_bytes(value),
            off.join(" and ")
        ));
    }
}

/// Builds the model inputs from the flags, the environment (as NCCL reads it) and the node.
pub fn derive(args: &ModelArgs, env: &Environment, roots: &Roots, devices: &[SysfsDevice]) -> Result<Derived, String> {
    validate(args)?;
    let mut r = Reader { env, read: Vec::new() };
    let (nics, nics_why) = match args.nics {
        Some(n) => (n, "--nics".to_owned()),
        None => match detected_nics(devices, env) {
            (0, _) => (
                args.ranks_per_node.min(model::MAX_NICS),
                "no ACTIVE RDMA port on this node: one NIC per rank assumed (pass --nics)".to_owned(),
            ),
            (n, why) => (n.min(model::MAX_NICS), why),
        },
    };
    let mut i = Inputs::new(args.nodes, args.ranks_per_node, nics);
    i.communicators = args.communicators.unwrap_or(1);
    let version_given = args.nccl_version.as_deref().and_then(model::Release::parse);
    i.nccl_version = version_given.unwrap_or(model::Release::NEWEST);
    let detected_speed = nic_speed(devices, env);
    i.nic_gbps = args.nic_speed.or(detected_speed).unwrap_or(400);
    let buffer = |r: &mut Reader, name, flag: Option<u64>, default: u64| match flag {
        Some(v) => v,
        // comm->buffSizes is an int: values outside 1..INT_MAX are findings of `check`; the model
        // keeps them within what NCCL could hold.
        None => r.int(name, -2).map_or(default, |v| v.clamp(0, i64::from(i32::MAX)) as u64),
    };
    i.buffsize_ll = buffer(&mut r, "NCCL_LL_BUFFSIZE", args.ll_buffsize, model::DEFAULT_LL_BUFFSIZE);
    i.buffsize_ll128 = buffer(&mut r, "NCCL_LL128_BUFFSIZE", args.ll128_buffsize, model::DEFAULT_LL128_BUFFSIZE);
    i.buffsize_simple = buffer(&mut r, "NCCL_BUFFSIZE", args.buffsize, model::DEFAULT_BUFFSIZE);
    i.qps_per_connection = match args.qps_per_connection {
        Some(q) => q,
        None => r.int("NCCL_IB_QPS_PER_CONNECTION", i64::MIN).map_or(1, |q| q.clamp(1, model::MAX_QPS as i64) as u64),
    };
    i.devices_per_nic = args.devices_per_connection;
    i.qps_per_connection = i.qps_per_connection.min(model::MAX_QPS / i.devices_per_nic).max(1);
    // ncclMinNchannels/ncclMaxNchannels: the NCHANNELS names override the legacy NRINGS ones.
    let limits = ChannelLimits {
        max_nchannels: r.int("NCCL_MAX_NCHANNELS", -2).or_else(|| r.int("NCCL_MAX_NRINGS", -2)),
        min_nchannels: r.int("NCCL_MIN_NCHANNELS", -2).or_else(|| r.int("NCCL_MIN_NRINGS", -2)),
        max_ctas: r.int("NCCL_MAX_CTAS", CONFIG_UNDEF_INT),
        min_ctas: r.int("NCCL_MIN_CTAS", CONFIG_UNDEF_INT),
    };
    let topology = match args.search_channels {
        Some(s) => model::searched_channels(s),
        None => model::topology_channels(nics),
    };
    i.channels = match args.channels {
        Some(c) => {
            let mut given = Channels::given(c, topology.search);
            if args.search_channels.is_none() {
                given.why = format!(
                    "--channels {c}; S = {} assumed from the topology (one search channel per NIC, doubled by \
                        ncclTopoDupChannels when at most 4): pass --search-channels S from NCCL_DEBUG=INFO's \
                        \"Pattern 4, crossNic ., nChannels S\" line",
                    topology.search
                );
            }
            given
        }
        None => limits.apply(&topology),
    };
    i.pxn = r.int("NCCL_PXN_DISABLE", i64::MIN) != Some(1);
    i.gdr_read = r.int("NCCL_NET_GDR_READ", -2) != Some(0);
    i.gdr_flush = r.int("NCCL_GDR_FLUSH_DISABLE", i64::MIN).is_none_or(|v| v == 0);
    // NCCL_PAT_ENABLE 2 (auto) turns PAT on for one rank per node (graph/tuning.cc ncclPatEnable).
    i.pat = r.int("NCCL_PAT_ENABLE", 2) != Some(0);
    let gdr = match args.gdr.as_deref().and_then(GdrMode::parse) {
        Some(mode) => Detected { mode, detected: false, why: "--gdr".into() },
        None => {
            let names = selected_devices(devices, env);
            gdr::decide(&gdr::read_facts(roots, &names, r.int("NCCL_DMABUF_ENABLE", i64::MIN)))
        }
    };
    i.gdr = gdr.mode;
    let mut p2p_why = String::new();
    if args.p2p_net {
        // ncclTopoComputeP2pChannels (src/graph/paths.cc): min(channels, NCCL_MAX_P2P_NCHANNELS),
        // at least NCCL_MIN_P2P_NCHANNELS, rounded up to a power of two, at most MAXCHANNELS.
        let max_p2p = r.int("NCCL_MAX_P2P_NCHANNELS", i64::MIN).map_or(model::MAX_CHANNELS as i64, |v| v.max(1));
        let min_p2p = r.int("NCCL_MIN_P2P_NCHANNELS", i64::MIN).map_or(1, |v| v.max(1));
        let channels = args.p2p_channels.unwrap_or_else(|| {
            ((i.channels.count as i64).min(max_p2p).max(min_p2p).max(1) as u64)
                .next_power_of_two()
                .min(model::MAX_CHANNELS)
        });
        // Channels per remote peer, by release and NIC speed (model::net_channels_per_peer).
        let before_pow2 = (i.channels.count as i64).min(max_p2p).max(min_p2p).max(1) as u64;
        let given = r.int("NCCL_NCHANNELS_PER_NET_PEER", CONFIG_UNDEF_INT).filter(|v| *v > 0).map(|v| v as u64);
        let ranks = args.nodes.saturating_mul(args.ranks_per_node);
        // Read only by the releases that have it (2.30's init.cc), so it is listed only then.
        let max_peers = if i.nccl_version.at_least(2, 30) {
            r.int("NCCL_P2P_MAX_PEERS", CONFIG_UNDEF_INT).filter(|v| *v > 0).map(|v| v as u64)
        } else {
            None
        };
        let per_peer =
            model::net_channels_per_peer(i.nccl_version, i.nic_gbps, ranks, before_pow2, channels, given, max_peers);
        p2p_why = per_peer.why.clone();
        let per_peer = per_peer.channels;
        // computeBuffSizes (src/init.cc): the chunk is at most Simple / NCCL_STEPS.
        let chunk = r
            .int("NCCL_P2P_NET_CHUNKSIZE", i64::MIN)
            .map_or(model::DEFAULT_P2P_CHUNKSIZE, |v| v.max(0) as u64)
            .min(i.buffsize_simple / model::STEPS);
        let ll_buffers = r.int("NCCL_ALLOC_P2P_NET_LL_BUFFERS", i64::MIN).is_some_and(|v| v != 0);
        let shared = r.int("NCCL_NET_SHARED_BUFFERS", -2) != Some(0);
        // src/graph/search.cc: NCCL_P2P_PXN_LEVEL, default 2; net.cc: NCCL_NET_SHARED_COMMS, default 1.
        let pxn = r.int("NCCL_P2P_PXN_LEVEL", i64::MIN) != Some(0);
        let shared_comms = r.int("NCCL_NET_SHARED_COMMS", i64::MIN) != Some(0);
        // search.cc: NCCL_CROSS_NIC, default 2; only 0 keeps a proxy-less send on the peer's rail.
        let rail_nic = r.int("NCCL_CROSS_NIC", i64::MIN) == Some(0);
        i.p2p = Some(P2p {
            channels,
            channels_per_peer: per_peer,
            chunk,
            ll_buffers,
            shared,
            pxn: pxn && !args.no_p2p_pxn,
            shared_comms,
            rail_nic,
        });
    }
    i.page_size = procfs::page_size();
    let runtime = r.int("NCCL_RUNTIME_CONNECT", i64::MIN).is_none_or(|v| v != 0)
        && r.int("NCCL_CUMEM_ENABLE", -2).is_none_or(|v| v != 0);
    if runtime {
        allowed_algorithms(env, &mut i, &mut r.read);
    }
    let connect = if runtime {
        "runtime connect (NCCL_RUNTIME_CONNECT=1, the default with cuMem, src/init.cc): nothing at communicator \
            init; ring at the first collective that runs on ring, tree at the first on tree (src/enqueue.cc)"
            .to_owned()
    } else {
        "at communicator init (runtime connect off: NCCL_RUNTIME_CONNECT=0 or NCCL_CUMEM_ENABLE=0): ring and tree \
            together, and PAT with one rank per node (src/init.cc)"
            .to_owned()
    };
    let mut assumed = Vec::new();
    let ch = &i.channels;
    if args.channels.is_none() && args.search_channels.is_none() {
        assumed.push(format!(
            "channels C = {} and S = {} from the topology rule (one search channel per NIC, sm90-class GPU): pass \
                --channels C from NCCL_DEBUG=INFO's \"C coll channels\" line and --search-channels S from its \
                \"Pattern 4, crossNic 0, nChannels S\" line",
            ch.count, ch.search
        ));
    } else if args.search_channels.is_none() {
        assumed.push(format!(
            "S = {} from the topology rule (it decides each channel's tree): pass --search-channels S from \
                NCCL_DEBUG=INFO's \"Pattern 4, crossNic 0, nChannels S\" line",
            ch.search
        ));
    }
    if gdr.detected {
        assumed.push(format!(
            "GPUDirect {} as detected on this node: pass --gdr off, dmabuf or peermem if the job's node differs \
                (NCCL_DEBUG=INFO prints \"DMA-BUF is available on GPU device N\" when dma-buf can be used and ends \
                each network connection line with /GDRDMA when GPUDirect is used)",
            gdr.mode.as_str()
        ));
    }
    // Only the p2p channels per network peer differ between the releases the model follows.
    if version_given.is_none() && args.p2p_net {
        assumed.push(format!(
            "NCCL {} (the newest the model follows): pass --nccl-version, or --pid of a process that maps \
                libnccl, or --nccl-log with its NCCL_DEBUG=INFO output",
            model::Release::NEWEST
        ));
    }
    if args.p2p_net && args.nic_speed.is_none() && detected_speed.is_none() && i.nccl_version.at_least(2, 29) {
        assumed.push(format!("{} Gb/s NICs (p2p channels per network peer: {p2p_why}): pass --nic-speed", i.nic_gbps));
    }
    if args.nics.is_none() && nics_why.contains("assumed") {
        assumed.push(format!("{} NIC(s), one per rank: pass --nics (the job's node's ACTIVE RDMA ports)", nics));
    }
    Ok(Derived {
        inputs: i,
        gdr,
        nics_why,
        connect,
        environment: r.read,
        problems: env::problems(env),
        conf_files: Vec::new(),
        environment_error: None,
        assumed,
    })
}

/// The job's NCCL release when no `--nccl-version` was given: the library the process maps, else
/// the version its NCCL_DEBUG=INFO log printed.
pub(crate) fn found_version(
    procfs: &std::path::Path,
    pid: Option<u32>,
    log: Option<&crate::nccl::log::NcclLog>,
) -> Option<String> {
    let mapped = pid.and_then(|p| crate::nccl::library::of_process(procfs, p).library).and_then(|v| v.version);
    mapped.or_else(|| log.and_then(|l| l.nccl_version.clone())).filter(|v| model::Release::parse(v).is_some())
}

/// The estimate against one process's memlock limit and the node's available memory.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    pub pid: String,
    /// `None` when unlimited.
    pub(crate) soft_limit_bytes: Option<u64>,
    pub(crate) soft_limit_unlimited: bool,
    /// CAP_IPC_LOCK held in the initial user namespace: the limit is not enforced (check's rule).
    pub cap_ipc_lock_exempt: bool,
    /// The busiest rank fits under the soft limit (always true when unlimited or exempt).
    pub fits_memlock_limit: bool,
    pub(crate) memory_available_bytes: Option<u64>,
    /// The busiest node's host memory fits in MemAvailable.
    pub(crate) fits_memory_available: Option<bool>,
    /// The NCCL the process maps, with `--pid`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nccl: Option<crate::nccl::library::Mapped>,
}

pub fn verdict(e: &Estimate, m: &Machine) -> Verdict {
    let soft = m.limits.map(|l| l.soft).unwrap_or(pid_limits::Limit::Unlimited);
    let exempt = machine::memlock_exempt(m);
    let available = m.meminfo.mem_available;
    Verdict {
        pid: m.pid.clone(),
        soft_limit_bytes: soft.bytes(),
        soft_limit_unlimited: soft.is_unlimited(),
        cap_ipc_lock_exempt: exempt,
        fits_memlock_limit: exempt || soft.bytes().is_none_or(|limit| e.per_rank_max_bytes <= limit),
        memory_available_bytes: available,
        fits_memory_available: available.map(|a| e.per_node_host_bytes <= a),
        nccl: None,
    }
}

/// `memlock-exporter estimate`: prints the estimate; exit 0, 2 when it cannot run (bad flags,
/// unreadable limits), 1 when the report cannot be written.
pub fn run(args: &EstimateArgs) -> u8 {
    let fail = |message: String, code: u8| {
        eprintln!("memlock-exporter estimate: {message}");
        code
    };
    if let Err(message) = validate(&args.model) {
        return fail(message, memlock_core::exit::USAGE);
    }
    let log = match args.nccl_log.as_deref().map(from_log::load).transpose() {
        Ok(log) => log,
        Err(message) => return fail(message, memlock_core::exit::USAGE),
    };
    let roots = Roots { procfs: PathBuf::from(&args.procfs), sysfs: PathBuf::from(&args.sysfs) };
    let pid = args.pid.map(|p| p.to_string()).unwrap_or_else(|| "self".into());
    // Another user's environ needs ptrace access: estimate with NCCL's defaults, and say so.
    let (env, conf_files, env_error) = match Environment::of_process(&roots.procfs, args.pid) {
        Ok((env, files)) => (env, files, None),
        Err(err) => (Environment::default(), Vec::new(), Some(err.to_string())),
    };
    let machine = match machine::read_machine(&roots, &pid, env.clone()) {
        Ok(m) => m,
        Err(err) => return fail(err.to_string(), memlock_core::exit::USAGE),
    };
    // The job's NCCL read what its log says was set: the model takes those values first.
    let env = match &log {
        Some(l) => env.with_log_values(&l.env),
        None => env,
    };
    let mut model_args = args.model.clone();
    if model_args.nccl_version.is_none() {
        model_args.nccl_version = found_version(&roots.procfs, args.pid, log.as_ref());
    }
    let mut derived = match derive(&model_args, &env, &roots, &machine.rdma) {
        Ok(d) => d,
        Err(message) => return fail(message, memlock_core::exit::USAGE),
    };
    derived.conf_files = conf_files;
    derived.environment_error = env_error;
    let mut e = model::estimate(&derived.inputs);
    let span = range::range(&model_args, &env, &roots, &machine.rdma, &derived, &e);
    range::judge_high(&mut e, &span);
    let mut v = verdict(&e, &machine);
    v.nccl = args.pid.map(|pid| crate::nccl::library::of_process(&roots.procfs, pid));
    let logged = log.map(|l| from_log::report(&derived.inputs, &e, &l, &v));
    let text = if args.json {
        let json =
            render_json(&derived, &e, &v).and_then(|t| range::with_range(&t, &span)).and_then(|t| match &logged {
                Some(r) => from_log::with_log(&t, r),
                None => Ok(t),
            });
        match json {
            Ok(text) => text,
            Err(err) => return fail(err.to_string(), memlock_core::exit::RUNTIME),
        }
    } else {
        render_text(&derived, &e, &v)
            + &range::render_text(&span)
            + &logged.as_ref().map(from_log::render_text).unwrap_or_default()
    };
    if let Err(err) = crate::print_report(&text) {
        return fail(format!("writing the report: {err}"), memlock_core::exit::RUNTIME);
    }
    memlock_core::exit::OK
}

#[cfg(test)]
mod tests {
    use super::*;
    use memlock_core::collect::rdma_sysfs::SysfsPort;
    use memlock_kernel::rdma_sysfs::Numbered;

    fn model_args(flags: &[&str]) -> ModelArgs {
        use clap::Parser;
        /// The subcommand's arguments as the binary's command line parses them.
        #[derive(Parser, Debug)]
        struct Estimate {
            #[command(flatten)]
            args: EstimateArgs,
        }
        match Estimate::try_parse_from(["estimate"].iter().chain(flags)) {
            Ok(estimate) => estimate.args.model,
            other => panic!("{flags:?}: {other:?}"),
        }
    }

    fn env(pairs: &[(&str, &str)]) -> Environment {
        Environment::from_pairs(pairs.iter().map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec())))
    }

    fn no_sysfs() -> Roots {
        Roots { procfs: PathBuf::from("/nonexistent-procfs"), sysfs: PathBuf::from("/nonexistent-sysfs") }
    }

    fn derive_with(flags: &[&str], vars: &[(&str, &str)]) -> Derived {
        derive(&model_args(flags), &env(vars), &no_sysfs(), &[]).unwrap()
    }

    fn hca(name: &str, active_ports: &[u32]) -> SysfsDevice {
        let ports = active_ports
            .iter()
            .map(|n| SysfsPort {
                number: *n,
                state: Some(Numbered { value: 4, name: "ACTIVE".into() }),
                ..Default::default()
            })
            .collect();
        SysfsDevice { name: name.into(), ports, ..Default::default() }
    }

    #[test]
    fn every_model_flag_reaches_the_inputs() {
        let d = derive_with(
            &[
                "--nodes",
                "4",
                "--ranks-per-node",
                "4",
                "--nics",
                "2",
                "--channels",
                "12",
                "--communicators",
                "2",
                "--buffsize",
                "8388608",
                "--ll-buffsize",
                "4096",
                "--ll128-buffsize",
                "8192",
                "--gdr",
                "dmabuf",
                "--p2p-net",
                "--p2p-channels",
                "16",
                "--devices-per-connection",
                "2",
                "--qps-per-connection",
                "4",
            ],
            &[],
        );
        let i = &d.inputs;
        assert_eq!((i.nodes, i.ranks_per_node, i.nics, i.channels.count, i.communicators), (4, 4, 2, 12, 2));
        assert_eq!((i.buffsize_simple, i.buffsize_ll, i.buffsize_ll128), (8_388_608, 4096, 8192));
        assert_eq!((i.gdr, d.gdr.detected), (GdrMode::Dmabuf, false));
        assert_eq!((i.devices_per_nic, i.qps_per_connection), (2, 4));
        assert_eq!(i.p2p.as_ref().map(|p| p.channels), Some(16));
        assert_eq!(d.nics_why, "--nics");
        assert!(i.channels.why.starts_with("--channels 12; S = 4 assumed"), "{}", i.channels.why);
        assert_eq!(i.channels.search, 4, "2 NICs: 2 search channels, doubled by ncclTopoDupChannels");
        let d = derive_with(&["--channels", "12", "--search-channels", "6"], &[]);
        assert_eq!((d.inputs.channels.count, d.inputs.channels.search), (12, 6));
        assert!(!d.inputs.channels.assumed);
        let d = derive_with(&["--search-channels", "6"], &[]);
        assert_eq!((d.inputs.channels.count, d.inputs.channels.search), (12, 6), "C = 2S");
    }

    #[test]
    fn without_flags_the_environment_and_the_node_decide() {
        let d = derive_with(&[], &[]);
        assert_eq!(d.inputs.nics, 8, "no RDMA here: one NIC per rank");
        assert!(d.nics_why.contains("one NIC per rank assumed"), "{}", d.nics_why);
        assert_eq!((d.inputs.channels.count, d.inputs.channels.search), (16, 8), "8 NICs: S = 8, C = 16");
        assert!(d.inputs.channels.why.starts_with("assumed from the topology"));
        assert_eq!((d.inputs.gdr, d.gdr.detected), (GdrMode::Off, true));
        let devices = [hca("mlx5_0", &[1]), hca("mlx5_1", &[1]), hca("mlx5_2", &[]), hca("mlx5_3", &[1, 2])];
        let d = derive(&model_args(&[]), &env(&[]), &no_sysfs(), &devices).unwrap();
        assert_eq!(d.inputs.nics, 4);
        assert!(d.nics_why.ends_with("mlx5_0:1, mlx5_1:1, mlx5_3:1, mlx5_3:2"), "{}", d.nics_why);
        let d = derive(&model_args(&[]), &env(&[("NCCL_IB_HCA", "^mlx5_3")]), &no_sysfs(), &devices).unwrap();
        assert_eq!(d.inputs.nics, 2, "{}", d.nics_why);
        // Per port, as NCCL selects them: mlx5_3's port 2 only; mlx5_2 has no ACTIVE port.
        let nics =
            |spec: &str| derive(&model_args(&[]), &env(&[("NCCL_IB_HCA", spec)]), &no_sysfs(), &devices).unwrap();
        let d = nics("mlx5_3:2");
        assert_eq!(d.inputs.nics, 1);
        assert!(d.nics_why.ends_with("that NCCL_IB_HCA selects: mlx5_3:2"), "{}", d.nics_why);
        assert_eq!(nics("^mlx5_3:1").inputs.nics, 3, "mlx5_0:1, mlx5_1:1, mlx5_3:2");
        assert_eq!(nics("mlx5_0,mlx5_2").inputs.nics, 1, "mlx5_2's ports are not ACTIVE");
    }

    #[test]
    fn what_was_assumed_is_said_with_its_flag() {
        let d = derive_with(&[], &[]);
        assert_eq!(d.assumed.len(), 3, "{:?}", d.assumed);
        assert!(d.assumed[0].starts_with("channels C = 16 and S = 8 from the topology rule"), "{:?}", d.assumed);
        assert!(d.assumed[0].contains("--channels C") && d.assumed[0].contains("--search-channels S"));
        assert!(d.assumed[1].starts_with("GPUDirect off as detected") && d.assumed[1].contains("--gdr"));
        assert!(d.assumed[2].contains("--nics"));
        let d = derive_with(&["--channels", "16"], &[]);
        assert!(d.assumed[0].starts_with("S = 8 from the topology rule"), "{:?}", d.assumed);
        let d = derive_with(&["--channels", "16", "--search-channels", "8", "--gdr", "dmabuf", "--nics", "8"], &[]);
        assert!(d.assumed.is_empty(), "{:?}", d.assumed);
    }

    #[test]
    fn nccl_variables_are_read_as_nccl_reads_them() {
        let d = derive_with(&[], &[("NCCL_BUFFSIZE", "4M"), ("NCCL_IB_QPS_PER_CONNECTION", "0x2")]);
        assert_eq!(d.inputs.buffsize_simple, 4, "strtoll stops at M");
        assert_eq!(d.inputs.qps_per_connection, 2);
        assert!(d.environment.contains(&"NCCL_BUFFSIZE=4M (read as 4)".to_owned()), "{:?}", d.environment);
        assert_eq!(d.problems.len(), 1, "{:?}", d.problems);
        assert_eq!(d.problems[0].name, "NCCL_BUFFSIZE");
        // -2 is NCCL's "unset" for buffer sizes: the default.
        assert_eq!(derive_with(&[], &[("NCCL_BUFFSIZE", "-2")]).inputs.buffsize_simple, model::DEFAULT_BUFFSIZE);
        // A flag beats the environment.
        assert_eq!(derive_with(&["--buffsize", "1048576"], &[("NCCL_BUFFSIZE", "4M")]).inputs.buffsize_simple, 1 << 20);
        // Caps and floors, not counts.
        let c = |vars: &[(&str, &str)]| derive_with(&[], vars).inputs.channels.count;
        assert_eq!(c(&[("NCCL_MAX_NCHANNELS", "8")]), 8);
        assert_eq!(c(&[("NCCL_MAX_NRINGS", "8")]), 8, "the legacy name");
        assert_eq!(c(&[("NCCL_MAX_NRINGS", "8"), ("NCCL_MAX_NCHANNELS", "16")]), 16, "the new name wins");
        assert_eq!(c(&[("NCCL_MIN_NRINGS", "48")]), 48);
        assert_eq!(c(&[("NCCL_MIN_CTAS", "40"), ("NCCL_MAX_CTAS", "36")]), 36);
        assert_eq!(c(&[("NCCL_MAX_CTAS", "0")]), 16, "NCCL leaves its default for 0");
        assert_eq!(c(&[("NCCL_MAX_NCHANNELS", "0")]), 1, "and raises 0 channels to 1");
        assert!(derive_with(&[], &[("NCCL_MAX_NCHANNELS", "8")]).inputs.channels.why.contains("max channels 8"));
        // Switches.
        assert!(!derive_with(&[], &[("NCCL_PXN_DISABLE", "1")]).inputs.pxn);
        assert!(!derive_with(&[], &[("NCCL_NET_GDR_READ", "0")]).inputs.gdr_read);
        assert!(!derive_with(&[], &[("NCCL_GDR_FLUSH_DISABLE", "1")]).inputs.gdr_flush);
        assert!(derive_with(&[], &[("NCCL_RUNTIME_CONNECT", "0")]).connect.starts_with("at communicator init"));
        assert!(derive_with(&[], &[]).connect.starts_with("runtime connect"));
        // p2p: the chunk is at most Simple / 8, channels per peer halve for large jobs.
        let p = derive_with(&["--p2p-net", "--nodes", "16", "--channels", "32"], &[("NCCL_BUFFSIZE", "524288")])
            .inputs
            .p2p
            .unwrap();
        assert_eq!(p.chunk, 65_536);
        assert_eq!(p.channels, 32);
        assert_eq!(p.channels_per_peer, 2, "128 ranks: 2 x 16 batches of 8 fit 32 channels");
        let p = derive_with(&["--p2p-net", "--nodes", "32", "--channels", "32"], &[]).inputs.p2p.unwrap();
        assert_eq!(p.channels_per_peer, 1, "256 ranks: 2 x 32 batches would exceed 32 channels");
        let p = derive_with(&["--p2p-net"], &[("NCCL_NCHANNELS_PER_NET_PEER", "4")]).inputs.p2p.unwrap();
        assert_eq!(p.channels_per_peer, 4);
        assert!(!derive_with(&["--p2p-net"], &[("NCCL_NET_SHARED_BUFFERS", "0")]).inputs.p2p.unwrap().shared);
    }

    #[test]
    fn the_release_and_nic_speed_decide_the_channels_per_network_peer() {
        let p2p = |flags: &[&str], vars: &[(&str, &str)]| derive_with(flags, vars).inputs.p2p.unwrap();
        let base = ["--p2p-net", "--nodes", "2", "--nics", "4"];
        // The newest release by default: 4 channels per peer on 400 Gb/s NICs, said as assumed.
        let d = derive_with(&base, &[]);
        assert_eq!(d.inputs.nccl_version, model::Release::NEWEST);
        assert_eq!(d.inputs.p2p.as_ref().map(|p| p.channels_per_peer), Some(4));
        assert!(d.assumed.iter().any(|a| a.contains("--nccl-version")), "{:?}", d.assumed);
        assert!(d.assumed.iter().any(|a| a.contains("--nic-speed")), "{:?}", d.assumed);
        let old = [&base[..], &["--nccl-version", "2.21.5+cuda12.4"]].concat();
        assert_eq!(p2p(&old, &[]).channels_per_peer, 2);
        assert!(!derive_with(&old, &[]).assumed.iter().any(|a| a.contains("--nccl-version")));
        let slow = [&base[..], &["--nic-speed", "200"]].concat();
        assert_eq!(p2p(&slow, &[]).channels_per_peer, 2);
        // PXN for p2p and shared comms: on unless set to 0.
        let p = p2p(&base, &[]);
        assert!(p.pxn && p.shared_comms);
        assert!(!p2p(&base, &[("NCCL_P2P_PXN_LEVEL", "0")]).pxn);
        assert!(p2p(&base, &[("NCCL_P2P_PXN_LEVEL", "1")]).pxn);
        assert!(!p2p(&base, &[("NCCL_NET_SHARED_COMMS", "0")]).shared_comms);
        assert!(!p2p(&[&base[..], &["--no-p2p-pxn"]].concat(), &[]).pxn);
        // NCCL_CROSS_NIC: only 0 keeps a send on the peer's rail without a proxy.
        assert!(!p.rail_nic);
        assert!(p2p(&base, &[("NCCL_CROSS_NIC", "0")]).rail_nic);
        assert!(!p2p(&base, &[("NCCL_CROSS_NIC", "1")]).rail_nic);
        // NCCL_P2P_MAX_PEERS, read from 2.30: 128 ranks on 32 channels keep 4 per peer for 16 peers.
        let big = ["--p2p-net", "--nodes", "16", "--channels", "32", "--nic-speed", "400"];
        assert_eq!(p2p(&big, &[]).channels_per_peer, 2);
        let d = derive_with(&big, &[("NCCL_P2P_MAX_PEERS", "16")]);
        assert_eq!(d.inputs.p2p.map(|p| p.channels_per_peer), Some(4));
        assert!(d.environment.iter().any(|v| v == "NCCL_P2P_MAX_PEERS=16"), "{:?}", d.environment);
        let d = derive_with(&[&big[..], &["--nccl-version", "2.29"]].concat(), &[("NCCL_P2P_MAX_PEERS", "16")]);
        assert_eq!(d.inputs.p2p.map(|p| p.channels_per_peer), Some(2));
        assert!(!d.environment.iter().any(|v| v.starts_with("NCCL_P2P_MAX_PEERS")), "2.29 does not read it");
        // A release NCCL never printed is refused.
        assert!(validate(&model_args(&["--nccl-version", "latest"])).is_err());
        assert!(validate(&model_args(&["--nic-speed", "0"])).is_err());
        // Without --p2p-net the release changes nothing, and nothing is said about it.
        assert!(!derive_with(&[], &[]).assumed.iter().any(|a| a.contains("--nccl-version")));
    }

    #[test]
    fn the_release_found_in_the_log_is_the_one_the_model_follows() {
        let log = crate::nccl::log::read(&b"h:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"[..]).unwrap();
        let procfs = std::path::Path::new("/nonexistent-procfs");
        assert_eq!(found_version(procfs, None, Some(&log)).as_deref(), Some("2.21.5+cuda12.4"));
        assert_eq!(found_version(procfs, None, None), None);
        // A process whose maps cannot be read: the log still tells.
        assert_eq!(found_version(procfs, Some(1), Some(&log)).as_deref(), Some("2.21.5+cuda12.4"));
        let mut args = model_args(&["--p2p-net", "--nics", "4"]);
        args.nccl_version = found_version(procfs, None, Some(&log));
        let d = derive(&args, &env(&[]), &no_sysfs(), &[]).unwrap();
        assert_eq!(d.inputs.nccl_version, model::Release { major: 2, minor: 21 });
        assert_eq!(d.inputs.p2p.map(|p| p.channels_per_peer), Some(2));
    }

    #[test]
    fn flags_no_job_can_have_are_refused_naming_the_flag() {
        assert!(validate(&model_args(&[])).is_ok());
        for (flags, message) in [
            (&["--nodes", "0"][..], "--nodes 0: must be at least 1 (--nodes 1 is a single-node job)"),
            (&["--nodes", "65537"], "--nodes 65537: NCCL takes at most 65536"),
            (&["--ranks-per-node", "0"], "--ranks-per-node 0: must be at least 1"),
            (&["--ranks-per-node", "73"], "--ranks-per-node 73: NCCL takes at most 72 (NCCL_MAX_LOCAL_RANKS)"),
            (&["--nics", "0"], "--nics 0: must be at least 1"),
            (&["--nics", "33"], "--nics 33: NCCL takes at most 32 (MAX_IB_DEVS)"),
            (&["--channels", "0"], "--channels 0: must be at least 1"),
            (&["--channels", "65"], "--channels 65: NCCL takes at most 64 (MAXCHANNELS)"),
            (&["--communicators", "0"], "--communicators 0: must be at least 1"),
            (&["--p2p-channels", "0"], "--p2p-channels 0: must be at least 1"),
            (&["--p2p-channels", "65"], "--p2p-channels 65: NCCL takes at most 64"),
            (&["--devices-per-connection", "0"], "--devices-per-connection 0: must be at least 1"),
            (&["--devices-per-connection", "9"], "--devices-per-connection 9: NCCL takes at most 8"),
            (&["--qps-per-connection", "0"], "--qps-per-connection 0: must be at least 1"),
            (&["--qps-per-connection", "129"], "--qps-per-connection 129: NCCL takes at most 128"),
            (
                &["--qps-per-connection", "65", "--devices-per-connection", "2"],
                "--qps-per-connection 65: 65 QPs on each",
            ),
            (&["--buffsize", "0"], "--buffsize 0: NCCL takes 1 to 2147483647 bytes"),
            (&["--ll-buffsize", "2147483648"], "--ll-buffsize 2147483648: NCCL takes 1 to"),
            (&["--ll128-buffsize", "0"], "--ll128-buffsize 0: NCCL takes 1 to"),
            (&["--gdr", "read"], "--gdr \"read\": expected off, dmabuf or peermem"),
        ] {
            let err = validate(&model_args(flags)).unwrap_err();
            assert!(err.starts_with(message), "{flags:?}: {err}");
        }
    }

    #[test]
    fn the_verdict_applies_checks_cap_ipc_lock_rule() {
        let e = model::estimate(&Inputs::new(2, 8, 8));
        let limits = pid_limits::MemlockLimits {
            soft: pid_limits::Limit::Bytes(8 << 20),
            hard: pid_limits::Limit::Bytes(8 << 20),
        };
        let m = Machine {
            pid: "self".into(),
            limits: Some(limits),
            ipc_lock: Some(false),
            initial_user_ns: Some(true),
            ..Default::default()
        };
        assert!(!verdict(&e, &m).fits_memlock_limit);
        let held = Machine { ipc_lock: Some(true), ..m.clone() };
        assert!(verdict(&e, &held).fits_memlock_limit && verdict(&e, &held).cap_ipc_lock_exempt);
        let userns = Machine { ipc_lock: Some(true), initial_user_ns: Some(false), ..m };
        assert!(!verdict(&e, &userns).fits_memlock_limit, "a user namespace's CAP_IPC_LOCK does not exempt");
    }

    #[test]
    fn an_algorithm_nccl_algo_rules_out_is_never_connected_at_runtime() {
        let flags = ["--nodes", "2", "--nics", "8", "--gdr", "off"];
        let both = model::estimate(&derive_with(&flags, &[]).inputs);
        // NCCL_ALGO=Ring: tree never chosen, never connected; the need is the ring's alone, half
        // of ring + tree on 2 x 8 x 8.
        let d = derive_with(&flags, &[("NCCL_ALGO", "Ring")]);
        assert_eq!((d.inputs.ring, d.inputs.tree), (true, false));
        assert!(
            d.environment.iter().any(|v| v
                == "NCCL_ALGO=Ring: tree never chosen, so never connected (runtime \
            connect)"),
            "{:?}",
            d.environment
        );
        let ring = model::estimate(&d.inputs);
        assert_eq!(ring.per_rank_max_bytes, both.scenarios[0].per_rank_max_bytes);
        // Twice the connections; the doorbell pages they share round up once (2 pages fewer).
        assert_eq!(both.per_rank_max_bytes, 2 * ring.per_rank_max_bytes - 2 * 4096);
        // Tree only (a job that runs only AllReduce): no ring connection.
        let d = derive_with(&flags, &[("NCCL_ALGO", "allreduce:tree;^tree")]);
        assert_eq!((d.inputs.ring, d.inputs.tree), (true, true), "the ring still runs the other collectives");
        let d = derive_with(&flags, &[("NCCL_ALGO", "tree")]);
        assert_eq!((d.inputs.ring, d.inputs.tree), (false, true));
        assert_eq!(model::estimate(&d.inputs).scenarios[0].algorithms, "tree");
        // At communicator init NCCL connects ring and tree whatever NCCL_ALGO says.
        let d = derive_with(&flags, &[("NCCL_ALGO", "Ring"), ("NCCL_RUNTIME_CONNECT", "0")]);
        assert_eq!((d.inputs.ring, d.inputs.tree), (true, true));
        // A value NCCL refuses, or one leaving nothing: NCCL's defaults (check FAILs the value).
        for bad in ["Ring, Tree", "^ring,tree,pat,nvls,nvlstree,collnetdirect,collnetchain"] {
            let d = derive_with(&flags, &[("NCCL_ALGO", bad)]);
            assert_eq!((d.inputs.ring, d.inputs.tree), (true, true), "{bad}");
        }
        // PAT, with one rank per node, goes with it.
        let one = ["--nodes", "4", "--ranks-per-node", "1", "--nics", "1", "--gdr", "off"];
        assert!(derive_with(&one, &[]).inputs.pat);
        assert!(!derive_with(&one, &[("NCCL_ALGO", "^pat")]).inputs.pat);
    }
}
