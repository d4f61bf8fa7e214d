//! NCCL's network registrations, connection by connection, derived from NCCL's source
//! (NVIDIA/nccl 5067397c, 2.30.7) and the mlx5 provider (linux-rdma/rdma-core 691953d8). The
//! derivation, with file and function references, and the worked cases are in docs/check.md;
//! comments here name the source of each figure.
//!
//! A node runs `ranks_per_node` ranks (one GPU each) and `nics` NICs. For every channel the
//! model places the ring, tree and (one rank per node) PAT network connections on ranks, each
//! connector to a peer once however many algorithms use it, gives each connection its bytes
//! (data buffers per protocol, control MRs in whole pages, QP and CQ rings, doorbell records), and
//! charges them to the process that registers them, in the GPUDirect mode given.
//!
//! `channels`: how many channels and which tree and NIC each uses; `connections`: which
//! connections each rank holds; `buffers`: the bytes of one connection; here: the sum per rank
//! and per node, and the scenarios.

use serde::Serialize;

use memlock_core::gdr::GdrMode;

mod buffers;
mod channels;
mod connections;
mod version;

pub use buffers::Bytes;
use buffers::{control_pages, data_buffers, ring_pages, span_pages};
pub use channels::search_channels;
pub(crate) use channels::{searched_channels, topology_channels, ChannelLimits, Channels};
pub use connections::Counts;
pub(crate) use connections::{dtree, Algorithm};
use connections::{place, Direction, Held};
pub(crate) use version::net_channels_per_peer;
pub use version::Release;

/// MAXCHANNELS (src/include/device.h): channels per communicator.
pub(crate) const MAX_CHANNELS: u64 = 64;
/// NCCL_MAX_LOCAL_RANKS (src/include/device.h).
pub(crate) const MAX_LOCAL_RANKS: u64 = 72;
/// MAX_IB_DEVS (src/transport/net_ib/common.h): IB devices NCCL opens.
pub(crate) const MAX_NICS: u64 = 32;
/// NCCL_IB_MAX_DEVS_PER_NIC (net_ib/common.h): members of a merged virtual NIC.
pub(crate) const MAX_DEVICES_PER_NIC: u64 = 8;
/// NCCL_IB_MAX_QPS (net_ib/common.h): QPs of one connection, over all its devices.
pub(crate) const MAX_QPS: u64 = 128;
/// Nodes the model walks (the tree roles differ per node).
pub(crate) const MAX_NODES: u64 = 65_536;

/// NCCL's buffer sizes (src/init.cc: DEFAULT_LL_BUFFSIZE = NCCL_LL_LINES_PER_THREAD 8 x
/// NCCL_LL_MAX_NTHREADS 512 x NCCL_STEPS 8 x sizeof(union ncclLLFifoLine) 16; DEFAULT_LL128_BUFFSIZE =
/// NCCL_LL128_ELEMS_PER_THREAD 120 x NCCL_LL128_MAX_NTHREADS 640 x NCCL_STEPS 8 x 8; DEFAULT_BUFFSIZE
/// 1 << 22).
pub(crate) const DEFAULT_LL_BUFFSIZE: u64 = 8 * 512 * 8 * 16;
pub(crate) const DEFAULT_LL128_BUFFSIZE: u64 = 120 * 640 * 8 * 8;
pub(crate) const DEFAULT_BUFFSIZE: u64 = 1 << 22;
/// NCCL_P2P_NET_CHUNKSIZE's default (src/init.cc).
pub(crate) const DEFAULT_P2P_CHUNKSIZE: u64 = 1 << 17;
/// NCCL_STEPS (src/include/device.h) and NCCL_SHARED_STEPS (src/transport/net.cc).
pub(crate) const STEPS: u64 = 8;
pub(crate) const SHARED_STEPS: u64 = 16;

/// NET_IB_MAX_REQUESTS = NCCL_NET_MAX_REQUESTS 32 (src/include/plugin/nccl_net.h) x
/// NCCL_NET_IB_MAX_RECVS 8 (net_ib/common.h).
pub(crate) const IB_MAX_REQUESTS: u64 = 32 * 8;
/// sizeof(struct ncclIbSendFifo): addr 8 + size 8 + rkeys[NCCL_IB_MAX_DEVS_PER_NIC 8] 32 + nreqs 4
/// + tag 4 + idx 8 (net_ib/common.h).
pub(crate) const CTS_FIFO_ENTRY: u64 = 64;
/// The CTS FIFO: ctsFifo[NET_IB_MAX_REQUESTS][NCCL_NET_IB_MAX_RECVS] (sender) and its shadow
/// remCtsFifo.elems (receiver): 256 x 8 x 64 B = 128 KiB.
pub(crate) const CTS_FIFO_BYTES: u64 = IB_MAX_REQUESTS * 8 * CTS_FIFO_ENTRY;
/// The sender's shadow of the completion records: remCmplsRecords.elems, int[256][8] = 8 KiB.
pub(crate) const SEND_COMPLETIONS_BYTES: u64 = IB_MAX_REQUESTS * 8 * 4;
/// The receiver's completion records: cmplsRecords[256] of struct ncclIbRequestCompletionRecord
/// (int sizes[8] 32 B + bool completions[NCCL_IB_MAX_QPS 128] 128 B) = 40 KiB.
pub(crate) const RECV_COMPLETIONS_BYTES: u64 = IB_MAX_REQUESTS * (8 * 4 + 128);

/// mlx5 (rdma-core providers/mlx5/verbs.c): a send WQE of an RC QP is sized for its largest
/// operation, the memory-window bind in _sq_overhead: ctrl 16 + umr_ctrl 48 + mkey_context 64 +
/// max(klm 16, 64) = 192 B, plus one data segment of 16 B (max_send_sge 1, no inline data:
/// NCCL_IB_USE_INLINE 0), aligned to MLX5_SEND_WQE_BB 64: 256 B.
pub(crate) const MLX5_SEND_WQE: u64 = 256;
/// A receive WQE: one 16 B data segment (max_recv_sge 1), rounded to a power of two.
pub(crate) const MLX5_RECV_WQE: u64 = 16;
/// CQE size (get_cqe_size: 64 unless MLX5_CQE_SIZE=128).
pub(crate) const MLX5_CQE: u64 = 64;
/// Doorbell records come from whole pages of cache-line slots (mlx5_alloc_dbrec, dbrec.c).
pub(crate) const MLX5_DBREC: u64 = 64;

/// What the model is given.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Inputs {
    pub nodes: u64,
    pub(crate) ranks_per_node: u64,
    /// NICs per node the job uses.
    pub nics: u64,
    pub channels: Channels,
    pub communicators: u64,
    /// LL, LL128, Simple buffer bytes (comm->buffSizes).
    pub(crate) buffsize_ll: u64,
    pub(crate) buffsize_ll128: u64,
    pub(crate) buffsize_simple: u64,
    pub gdr: GdrMode,
    /// PXN: sends of a GPU not local to the NIC are proxied by the NIC's GPU (NCCL_PXN_DISABLE unset).
    pub(crate) pxn: bool,
    /// GPUDirect for sends (NCCL_NET_GDR_READ not 0).
    pub(crate) gdr_read: bool,
    /// The receive side's GPUDirect flush word and loopback QP (NCCL_GDR_FLUSH_DISABLE unset).
    pub(crate) gdr_flush: bool,
    /// PAT for one rank per node (NCCL_PAT_ENABLE not 0, and NCCL_ALGO allowing it under
    /// runtime connect).
    pub(crate) pat: bool,
    /// Ring and tree may be connected: under runtime connect an algorithm NCCL_ALGO disables for
    /// every collective that could run on it is never chosen, so never connected
    /// (src/graph/tuning.cc ncclTopoTuneModel: bandwidth 0; src/group.cc ncclCollPreconnect).
    pub ring: bool,
    pub tree: bool,
    pub(crate) qps_per_connection: u64,
    /// An sm90-class GPU (H100 and later): where no second GPU shares a NIC's PCIe switch the tree
    /// search falls back to NCCL_TOPO_PATTERN_TREE (src/graph/search.cc ncclTopoCompute, "Try a
    /// simpler tree", ccMin >= 90), every tree edge on the NIC's own GPU.
    pub(crate) simpler_tree: bool,
    /// The NCCL release whose rules apply (the newest when the job's is not known).
    pub nccl_version: Release,
    /// The NICs' speed, Gb/s (the p2p channels per network peer from 2.29).
    pub(crate) nic_gbps: u64,
    /// Devices of a merged virtual NIC: every registration and queue is made on each.
    pub(crate) devices_per_nic: u64,
    /// All-to-all (send/recv) over the network, when modelled.
    pub p2p: Option<P2p>,
    pub page_size: u64,
}

/// The all-to-all part (src/transport/net.cc shared buffers, src/graph/paths.cc p2p channels).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct P2p {
    /// p2pnChannels: the size of each shared pool, in channels.
    pub channels: u64,
    /// Channels (so connections) per remote peer.
    pub(crate) channels_per_peer: u64,
    pub chunk: u64,
    /// NCCL_ALLOC_P2P_NET_LL_BUFFERS: an LL buffer per connection.
    pub(crate) ll_buffers: bool,
    /// Shared pools (NCCL_NET_SHARED_BUFFERS not 0); without them every p2p connection has
    /// dedicated buffers like a ring's (net.cc sendSetup: `shared`).
    pub shared: bool,
    /// PXN for p2p (NCCL_P2P_PXN_LEVEL not 0, src/graph/search.cc ncclTopoGetNetDev): a send to
    /// a remote GPU goes over the NIC of that GPU's rail, from the process of the local GPU next
    /// to that NIC.
    pub(crate) pxn: bool,
    /// NCCL_NET_SHARED_COMMS not 0 (net.cc sendProxyConnect, recvProxyConnect): one network
    /// connection per NIC, remote rank (or remote proxy) and channel, whoever sends on it.
    pub(crate) shared_comms: bool,
    /// NCCL_CROSS_NIC=0 (src/graph/search.cc ncclTopoGetNetDev): a send to a remote GPU leaves
    /// by that GPU's rail also when no PXN proxy takes it, from the sender's own process.
    pub(crate) rail_nic: bool,
}

impl P2p {
    /// The given channels and chunk with NCCL's defaults for the rest (shared buffers and comms,
    /// PXN, cross-NIC sends allowed, no LL buffers): what a job that sets none of them runs.
    pub(crate) fn nccl_defaults(channels: u64, channels_per_peer: u64, chunk: u64) -> Self {
        Self {
            channels,
            channels_per_peer,
            chunk,
            ll_buffers: false,
            shared: true,
            pxn: true,
            shared_comms: true,
            rail_nic: false,
        }
    }
}

impl Inputs {
    /// NCCL's defaults for nodes x ranks x nics, GPUDirect off.
    pub fn new(nodes: u64, ranks_per_node: u64, nics: u64) -> Self {
        Self {
            nodes,
            ranks_per_node,
            nics,
            channels: topology_channels(nics),
            communicators: 1,
            buffsize_ll: DEFAULT_LL_BUFFSIZE,
            buffsize_ll128: DEFAULT_LL128_BUFFSIZE,
            buffsize_simple: DEFAULT_BUFFSIZE,
            gdr: GdrMode::Off,
            pxn: true,
            gdr_read: true,
            gdr_flush: true,
            pat: true,
            ring: true,
            tree: true,
            qps_per_connection: 1,
            simpler_tree: true,
            nccl_version: Release::NEWEST,
            nic_gbps: 400,
            devices_per_nic: 1,
            p2p: None,
            page_size: 4096,
        }
    }

    /// The page size, never 0.
    fn page(&self) -> u64 {
        self.page_size.max(1)
    }
}

/// One line of a rank's need.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Term {
    /// The algorithm whose connections the term is for; none for what they share (doorbell pages).
    pub algorithm: Option<Algorithm>,
    pub name: &'static str,
    pub(crate) formula: String,
    pub memlock_bytes: u64,
    pub(crate) host_bytes: u64,
}

/// One rank's need.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rank {
    /// The local rank (GPU index) on its node.
    pub rank: u64,
    /// Charged to VmPin with ring and tree connected (what `check` compares with the limit).
    pub memlock_bytes: u64,
    pub(crate) host_bytes: u64,
    /// With ring connections only.
    pub(crate) ring_only_memlock_bytes: u64,
    /// Connections each algorithm added (one already made by another is not counted again).
    pub ring: Counts,
    pub tree: Counts,
    pub(crate) pat: Counts,
    pub p2p: Counts,
    pub terms: Vec<Term>,
}

/// A figure per set of connected algorithms.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scenario {
    pub algorithms: String,
    pub per_rank_max_bytes: u64,
    pub per_node_bytes: u64,
    pub per_node_host_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    pub inputs: Inputs,
    /// The busiest rank with every algorithm connected (ring, tree, PAT with one rank per node,
    /// p2p when asked), every communicator: the memlock need.
    pub per_rank_max_bytes: u64,
    /// VmPin of the busiest node's ranks together, every algorithm connected.
    pub per_node_bytes: u64,
    /// Host memory the busiest node's registrations take (GPU buffers excluded).
    pub per_node_host_bytes: u64,
    /// The node the per-rank detail is for: the first that holds the busiest rank.
    pub(crate) busiest_node: u64,
    pub scenarios: Vec<Scenario>,
    pub ranks: Vec<Rank>,
}

fn counts_for(h: &Held, alg: Algorithm) -> Counts {
    match alg {
        Algorithm::Ring => h.ring,
        Algorithm::Tree => h.tree,
        Algorithm::Pat => h.pat,
        Algorithm::P2p => h.p2p,
    }
}

/// One connection's data buffers, as charged: registered on every device of a merged NIC (the
/// VmPin charge repeats, the memory does not).
fn connection_data(i: &Inputs, alg: Algorithm, dir: Direction, on_gpu: bool) -> Bytes {
    let shared_p2p = alg == Algorithm::P2p && i.p2p.as_ref().is_none_or(|p| p.shared);
    let one = if !shared_p2p {
        data_buffers(i, dir, on_gpu)
    } else if i.p2p.as_ref().is_some_and(|p| p.ll_buffers) {
        // net.cc: with NCCL_ALLOC_P2P_NET_LL_BUFFERS each p2p connection has a host LL buffer.
        let b = span_pages(0, i.buffsize_ll, i.page()).saturating_mul(i.page());
        Bytes { memlock: b, host: b }
    } else {
        Bytes::default()
    };
    Bytes { memlock: one.memlock.saturating_mul(i.devices_per_nic), host: one.host }
}

/// Data, control and queue bytes of one algorithm's connections on one rank.
fn parts(i: &Inputs, alg: Algorithm, c: Counts) -> (Bytes, u64, u64) {
    let mut data = Bytes::default();
    for (n, dir, on_gpu) in [
        (c.sends, Direction::Send, false),
        (c.sends_gdr, Direction::Send, true),
        (c.receives, Direction::Recv, false),
        (c.receives_gdr, Direction::Recv, true),
    ] {
        if n > 0 {
            data = data.plus(connection_data(i, alg, dir, on_gpu).scale(n));
        }
    }
    let (sends, recvs) = (c.sends.saturating_add(c.sends_gdr), c.receives.saturating_add(c.receives_gdr));
    let per_device = |send: u64, recv: u64| {
        sends.saturating_mul(send).saturating_add(recvs.saturating_mul(recv)).saturating_mul(i.devices_per_nic)
    };
    let control = per_device(control_pages(i, Direction::Send), control_pages(i, Direction::Recv));
    let rings = per_device(ring_pages(i, Direction::Send).0, ring_pages(i, Direction::Recv).0);
    (data, control.saturating_mul(i.page()), rings.saturating_mul(i.page()))
}

/// The terms of one rank's connections for one algorithm, with their formulas.
fn terms_for(i: &Inputs, alg: Algorithm, c: Counts) -> Vec<Term> {
    if c.total() == 0 {
        return Vec::new();
    }
    let (data, control, rings) = parts(i, alg, c);
    let mut out = Vec::new();
    let mut described = Vec::new();
    for (n, dir, on_gpu) in [
        (c.sends, Direction::Send, false),
        (c.sends_gdr, Direction::Send, true),
        (c.receives, Direction::Recv, false),
        (c.receives_gdr, Direction::Recv, true),
    ] {
        if n == 0 {
            continue;
        }
        let shared_p2p = alg == Algorithm::P2p && i.p2p.as_ref().is_none_or(|p| p.shared);
        let what = match (alg, dir, on_gpu) {
            (Algorithm::P2p, _, _) if shared_p2p => "LL, NCCL_ALLOC_P2P_NET_LL_BUFFERS",
            (_, _, false) => "LL+LL128+Simple on the host",
            (_, Direction::Send, true) => "LL on the host, LL128+Simple on the GPU",
            (_, Direction::Recv, true) => "LL+LL128+Simple on the GPU",
        };
        let dir_name = if dir == Direction::Send { "send" } else { "receive" };
        let plural = if n == 1 { "" } else { "s" };
        let one = connection_data(i, alg, dir, on_gpu).memlock;
        described.push(format!("{n} {dir_name}{plural} x {one} B ({what})"));
    }
    if alg != Algorithm::P2p || data.memlock > 0 {
        let formula = format!("{}, GDR {}", described.join(" + "), i.gdr.as_str());
        out.push(Term {
            algorithm: Some(alg),
            name: "data buffers",
            formula,
            memlock_bytes: data.memlock,
            host_bytes: data.host,
        });
    }
    let (sends, recvs) = (c.sends.saturating_add(c.sends_gdr), c.receives.saturating_add(c.receives_gdr));
    let (d, page) = (i.devices_per_nic, i.page());
    let (cs, cr) = (control_pages(i, Direction::Send), control_pages(i, Direction::Recv));
    out.push(Term {
        algorithm: Some(alg),
        name: "control MRs",
        formula: format!("({sends} x {cs} + {recvs} x {cr} pages) x {d} device(s) x {page} B"),
        memlock_bytes: control,
        host_bytes: control,
    });
    let (qs, qr) = (ring_pages(i, Direction::Send).0, ring_pages(i, Direction::Recv).0);
    out.push(Term {
        algorithm: Some(alg),
        name: "QP and CQ rings",
        formula: format!(
            "({sends} x {qs} + {recvs} x {qr} pages) x {d} device(s) x {page} B (mlx5, {} QP(s) per connection)",
            i.qps_per_connection
        ),
        memlock_bytes: rings,
        host_bytes: rings,
    });
    out
}

/// The shared p2p pools a rank's process registers ([`connections`] places them): per NIC, one
/// per origin rank and direction, registered once per device (the MR cache finds every later
/// connection's range inside it: net_ib/reg.cc), p2pnChannels x NCCL_SHARED_STEPS x chunk bytes
/// each (net.cc sharedNetBuffersInit). A PXN proxy's send pools are on the GPU; a sender's host
/// pool registered on several NICs pins its pages on each, its memory once.
fn p2p_pools(i: &Inputs, h: &Held) -> Option<(Bytes, String)> {
    let p2p = i.p2p.as_ref().filter(|p| p.shared)?;
    let (sends, recvs) = h.p2p_pools.iter().fold((0u64, 0u64), |(s, r), (_, a, b)| (s.saturating_add(*a), r + b));
    let host_sends = h.p2p_host_send_pools;
    if sends.saturating_add(recvs).saturating_add(host_sends) == 0 {
        return None;
    }
    let page = i.page();
    let pool =
        span_pages(0, p2p.channels.saturating_mul(SHARED_STEPS).saturating_mul(p2p.chunk), page).saturating_mul(page);
    let gdr = i.gdr != GdrMode::Off;
    let mut total = Bytes::default();
    for (count, on_gpu) in [(sends, gdr && i.gdr_read), (recvs, gdr)] {
        let one = match (on_gpu, i.gdr) {
            (false, _) => Bytes { memlock: pool.saturating_mul(i.devices_per_nic), host: pool },
            (true, GdrMode::Peermem) => Bytes { memlock: pool.saturating_mul(i.devices_per_nic), host: 0 },
            (true, _) => Bytes::default(),
        };
        total = total.plus(one.scale(count));
    }
    if host_sends > 0 {
        let own_on_host = sends > 0 && !(gdr && i.gdr_read);
        let memory = if own_on_host { 0 } else { pool };
        total = total
            .plus(Bytes { memlock: pool.saturating_mul(i.devices_per_nic).saturating_mul(host_sends), host: memory });
    }
    let off_rail = if host_sends > 0 { format!(" + {host_sends} on other NICs, on the host") } else { String::new() };
    let formula = format!(
        "({sends} send + {recvs} receive pool(s){off_rail}) x {} channels x {SHARED_STEPS} steps x {} B chunk x {} \
            device(s), GDR {}",
        p2p.channels,
        p2p.chunk,
        i.devices_per_nic,
        i.gdr.as_str()
    );
    Some((total, formula))
}

/// Doorbell records: one per QP and per CQ, from pages of page/64 slots per device context
/// (rdma-core mlx5 dbrec.c), for the connections of the algorithms included.
fn doorbell_pages(i: &Inputs, h: &Held, algorithms: &[Algorithm]) -> u64 {
    let ((_, qs, cs), (_, qr, cr)) = (ring_pages(i, Direction::Send), ring_pages(i, Direction::Recv));
    let per_page = (i.page() / MLX5_DBREC).max(1);
    let mut pages: u64 = 0;
    for nic in &h.per_nic {
        // A connection's records: the larger of a send's and a receive's (an upper bound of at
        // most a page where the two are not paired).
        let records: u64 = algorithms
            .iter()
            .map(|alg| nic[alg.index()].saturating_mul((qs + cs).max(qr + cr)))
            .fold(0, u64::saturating_add);
        pages = pages.saturating_add(records.div_ceil(per_page));
    }
    pages.saturating_mul(i.devices_per_nic)
}

fn rank_need(i: &Inputs, h: &Held, algorithms: &[Algorithm]) -> Bytes {
    let mut total = Bytes::default();
    for alg in algorithms {
        let (data, control, rings) = parts(i, *alg, counts_for(h, *alg));
        total = total
            .plus(data)
            .plus(Bytes { memlock: control, host: control })
            .plus(Bytes { memlock: rings, host: rings });
    }
    if algorithms.contains(&Algorithm::P2p) {
        if let Some((pools, _)) = p2p_pools(i, h) {
            total = total.plus(pools);
        }
    }
    let db = doorbell_pages(i, h, algorithms).saturating_mul(i.page());
    total.plus(Bytes { memlock: db, host: db }).scale(i.communicators)
}

/// One process's need for connections counted in the job's own NCCL_DEBUG=INFO log rather than
/// placed by the model: each with dedicated buffers as a ring connection has, `per_nic` of them on
/// each NIC (one device context per NIC for the doorbell pages), charged as [`estimate`] charges a
/// placed rank's, per communicator in `i`.
#[cfg(test)]
pub(crate) fn logged_need(i: &Inputs, counts: Counts, per_nic: &[u64]) -> Bytes {
    logged_need_with_p2p(i, counts, per_nic, &LoggedP2p::default())
}

/// The shared p2p part of a process's logged connections: its network connections (no buffers of
/// their own), its pools (send, receive), and its connections per NIC beside the dedicated ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LoggedP2p {
    pub counts: Counts,
    pub(crate) send_pools: u64,
    pub(crate) receive_pools: u64,
    pub(crate) per_nic: Vec<u64>,
}

/// [`logged_need`] with shared p2p connections and pools, charged as [`estimate`] charges them
/// (the pool size from `i.p2p`).
pub(crate) fn logged_need_with_p2p(i: &Inputs, counts: Counts, per_nic: &[u64], p2p: &LoggedP2p) -> Bytes {
    let nics = per_nic.len().max(p2p.per_nic.len());
    let mut slots = vec![[0; 4]; nics];
    for (slot, n) in slots.iter_mut().zip(per_nic) {
        slot[Algorithm::Ring.index()] = *n;
    }
    for (slot, n) in slots.iter_mut().zip(&p2p.per_nic) {
        slot[Algorithm::P2p.index()] = *n;
    }
    let held = Held {
        ring: counts,
        p2p: p2p.counts,
        per_nic: slots,
        p2p_pools: vec![(0, p2p.send_pools, p2p.receive_pools)],
        ..Default::default()
    };
    rank_need(i, &held, &[Algorithm::Ring, Algorithm::P2p])
}

/// What makes one node's connections differ from another's: per tree, its parent and children
/// (whether each exists and whether it is the next node, the previous one, or a power of two
/// away, the peers ring and PAT also connect to) and its child type. Nodes with the same key hold
/// the same connections.
type NodeKey = [[(bool, bool, bool, bool); 3]; 2];

fn node_key(nodes: u64, node: u64) -> (NodeKey, [i64; 2]) {
    let (n, me) = (nodes as i64, node as i64);
    let class = |x: i64| {
        if x < 0 {
            return (false, false, false, false);
        }
        let ahead = (x - me).rem_euclid(n);
        let behind = (me - x).rem_euclid(n);
        let pow2 = |d: i64| d > 0 && d & (d - 1) == 0;
        (true, ahead == 1, behind == 1, pow2(ahead) || pow2(behind))
    };
    let trees = dtree(n, me);
    let key = trees.map(|(u, d0, d1, _)| [class(u), class(d0), class(d1)]);
    (key, trees.map(|t| t.3))
}

/// The algorithms of the full figure: ring and tree, PAT with one rank per node (enabled by
/// default then, graph/tuning.cc ncclPatEnable), p2p when asked.
fn algorithms(i: &Inputs) -> (Vec<Algorithm>, Vec<Algorithm>) {
    let mut all: Vec<Algorithm> = [(i.ring, Algorithm::Ring), (i.tree, Algorithm::Tree)]
        .into_iter()
        .filter(|(on, _)| *on)
        .map(|(_, a)| a)
        .collect();
    // Neither: NCCL_ALGO leaves no algorithm and communicator init fails (check's FAIL); the
    // model keeps NCCL's default rather than estimate nothing.
    if all.is_empty() {
        all = vec![Algorithm::Ring, Algorithm::Tree];
    }
    // The first scenario is the ring alone, or what is allowed when the ring is not.
    let mut ring_only = if all.contains(&Algorithm::Ring) { vec![Algorithm::Ring] } else { all.clone() };
    if i.pat && i.ranks_per_node == 1 {
        all.push(Algorithm::Pat);
    }
    if i.p2p.is_some() {
        ring_only.push(Algorithm::P2p);
        all.push(Algorithm::P2p);
    }
    (ring_only, all)
}

fn scenario_name(algorithms: &[Algorithm]) -> String {
    algorithms.iter().map(|a| a.as_str()).collect::<Vec<_>>().join(" + ")
}

/// The model: per rank and per node, for ring only and for every algorithm.
pub fn estimate(i: &Inputs) -> Estimate {
    let (ring_only, all) = algorithms(i);
    let nodes = i.nodes.max(1);
    // Nodes differ only by their place in the trees: one node of each kind is placed.
    let mut representatives: Vec<((NodeKey, [i64; 2]), u64)> = Vec::new();
    for node in 0..nodes {
        let key = node_key(nodes, node);
        if !representatives.iter().any(|(k, _)| *k == key) {
            representatives.push((key, node));
        }
    }
    let mut node_max = (0, Bytes::default());
    let mut rank_max = (0, 0);
    for (_, node) in &representatives {
        let held = place(i, *node, &all);
        let needs: Vec<Bytes> = held.iter().map(|h| rank_need(i, h, &all)).collect();
        let total = needs.iter().fold(Bytes::default(), |a, b| a.plus(*b));
        let max = needs.iter().map(|b| b.memlock).max().unwrap_or(0);
        if total.memlock > node_max.1.memlock || *node == 0 {
            node_max = (*node, total);
        }
        if max > rank_max.1 || *node == 0 {
            rank_max = (*node, max);
        }
    }
    let busiest_node = rank_max.0;
    let held = place(i, busiest_node, &all);
    let ranks = held.iter().enumerate().map(|(r, h)| rank_detail(i, r as u64, h, &all, &ring_only)).collect();
    let ring_held = place(i, 0, &ring_only);
    let ring = ring_held.iter().map(|h| rank_need(i, h, &ring_only)).collect::<Vec<_>>();
    let ring_node = ring.iter().fold(Bytes::default(), |a, b| a.plus(*b));
    Estimate {
        inputs: i.clone(),
        per_rank_max_bytes: rank_max.1,
        per_node_bytes: node_max.1.memlock,
        per_node_host_bytes: node_max.1.host,
        busiest_node,
        scenarios: vec![
            Scenario {
                algorithms: scenario_name(&ring_only),
                per_rank_max_bytes: ring.iter().map(|b| b.memlock).max().unwrap_or(0),
                per_node_bytes: ring_node.memlock,
                per_node_host_bytes: ring_node.host,
            },
            Scenario {
                algorithms: scenario_name(&all),
                per_rank_max_bytes: rank_max.1,
                per_node_bytes: node_max.1.memlock,
                per_node_host_bytes: node_max.1.host,
            },
        ],
        ranks,
    }
}

fn rank_detail(i: &Inputs, rank: u64, h: &Held, all: &[Algorithm], ring_only: &[Algorithm]) -> Rank {
    let need = rank_need(i, h, all);
    let mut terms = Vec::new();
    for alg in all {
        terms.extend(terms_for(i, *alg, counts_for(h, *alg)));
    }
    if let Some((pools, formula)) = p2p_pools(i, h) {
        terms.push(Term {
            algorithm: Some(Algorithm::P2p),
            name: "shared pools",
            formula,
            memlock_bytes: pools.memlock,
            host_bytes: pools.host,
        });
    }
    let db = doorbell_pages(i, h, all);
    if db > 0 {
        let per_page = i.page() / MLX5_DBREC;
        terms.push(Term {
            algorithm: None,
            name: "doorbell records",
            formula: format!("{db} page(s) of {per_page} records of {MLX5_DBREC} B, one per QP and CQ, per device"),
            memlock_bytes: db.saturating_mul(i.page()),
            host_bytes: db.saturating_mul(i.page()),
        });
    }
    if i.communicators > 1 {
        for t in &mut terms {
            t.memlock_bytes = t.memlock_bytes.saturating_mul(i.communicators);
            t.host_bytes = t.host_bytes.saturating_mul(i.communicators);
            t.formula = format!("{} communicators x ({})", i.communicators, t.formula);
        }
    }
    Rank {
        rank,
        memlock_bytes: need.memlock,
        host_bytes: need.host,
        ring_only_memlock_bytes: rank_need(i, h, ring_only).memlock,
        ring: h.ring,
        tree: h.tree,
        pat: h.pat,
        p2p: h.p2p,
        terms,
    }
}

#[cfg(test)]
mod tests;
