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

use serde::Serialize;

use crate::gdr::GdrMode;

/// MAXCHANNELS (src/include/device.h): channels per communicator.
pub const MAX_CHANNELS: u64 = 64;
/// NCCL_MAX_LOCAL_RANKS (src/include/device.h).
pub const MAX_LOCAL_RANKS: u64 = 72;
/// MAX_IB_DEVS (src/transport/net_ib/common.h): IB devices NCCL opens.
pub const MAX_NICS: u64 = 32;
/// NCCL_IB_MAX_DEVS_PER_NIC (net_ib/common.h): members of a merged virtual NIC.
pub const MAX_DEVICES_PER_NIC: u64 = 8;
/// NCCL_IB_MAX_QPS (net_ib/common.h): QPs of one connection, over all its devices.
pub const MAX_QPS: u64 = 128;
/// Nodes the model walks (the tree roles differ per node).
pub const MAX_NODES: u64 = 65_536;

/// NCCL's buffer sizes (src/init.cc: DEFAULT_LL_BUFFSIZE = NCCL_LL_LINES_PER_THREAD 8 x
/// NCCL_LL_MAX_NTHREADS 512 x NCCL_STEPS 8 x sizeof(union ncclLLFifoLine) 16; DEFAULT_LL128_BUFFSIZE =
/// NCCL_LL128_ELEMS_PER_THREAD 120 x NCCL_LL128_MAX_NTHREADS 640 x NCCL_STEPS 8 x 8; DEFAULT_BUFFSIZE
/// 1 << 22).
pub const DEFAULT_LL_BUFFSIZE: u64 = 8 * 512 * 8 * 16;
pub const DEFAULT_LL128_BUFFSIZE: u64 = 120 * 640 * 8 * 8;
pub const DEFAULT_BUFFSIZE: u64 = 1 << 22;
/// NCCL_P2P_NET_CHUNKSIZE's default (src/init.cc).
pub const DEFAULT_P2P_CHUNKSIZE: u64 = 1 << 17;
/// NCCL_STEPS (src/include/device.h) and NCCL_SHARED_STEPS (src/transport/net.cc).
pub const STEPS: u64 = 8;
pub const SHARED_STEPS: u64 = 16;

/// NET_IB_MAX_REQUESTS = NCCL_NET_MAX_REQUESTS 32 (src/include/plugin/nccl_net.h) x
/// NCCL_NET_IB_MAX_RECVS 8 (net_ib/common.h).
pub const IB_MAX_REQUESTS: u64 = 32 * 8;
/// sizeof(struct ncclIbSendFifo): addr 8 + size 8 + rkeys[NCCL_IB_MAX_DEVS_PER_NIC 8] 32 + nreqs 4
/// + tag 4 + idx 8 (net_ib/common.h).
pub const CTS_FIFO_ENTRY: u64 = 64;
/// The CTS FIFO: ctsFifo[NET_IB_MAX_REQUESTS][NCCL_NET_IB_MAX_RECVS] (sender) and its shadow
/// remCtsFifo.elems (receiver): 256 x 8 x 64 B = 128 KiB.
pub const CTS_FIFO_BYTES: u64 = IB_MAX_REQUESTS * 8 * CTS_FIFO_ENTRY;
/// The sender's shadow of the completion records: remCmplsRecords.elems, int[256][8] = 8 KiB.
pub const SEND_COMPLETIONS_BYTES: u64 = IB_MAX_REQUESTS * 8 * 4;
/// The receiver's completion records: cmplsRecords[256] of struct ncclIbRequestCompletionRecord
/// (int sizes[8] 32 B + bool completions[NCCL_IB_MAX_QPS 128] 128 B) = 40 KiB.
pub const RECV_COMPLETIONS_BYTES: u64 = IB_MAX_REQUESTS * (8 * 4 + 128);

/// mlx5 (rdma-core providers/mlx5/verbs.c): a send WQE of an RC QP is sized for its largest
/// operation, the memory-window bind in _sq_overhead: ctrl 16 + umr_ctrl 48 + mkey_context 64 +
/// max(klm 16, 64) = 192 B, plus one data segment of 16 B (max_send_sge 1, no inline data:
/// NCCL_IB_USE_INLINE 0), aligned to MLX5_SEND_WQE_BB 64: 256 B.
pub const MLX5_SEND_WQE: u64 = 256;
/// A receive WQE: one 16 B data segment (max_recv_sge 1), rounded to a power of two.
pub const MLX5_RECV_WQE: u64 = 16;
/// CQE size (get_cqe_size: 64 unless MLX5_CQE_SIZE=128).
pub const MLX5_CQE: u64 = 64;
/// Doorbell records come from whole pages of cache-line slots (mlx5_alloc_dbrec, dbrec.c).
pub const MLX5_DBREC: u64 = 64;

/// What the model is given.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Inputs {
    pub nodes: u64,
    pub ranks_per_node: u64,
    /// NICs per node the job uses.
    pub nics: u64,
    pub channels: Channels,
    pub communicators: u64,
    /// LL, LL128, Simple buffer bytes (comm->buffSizes).
    pub buffsize_ll: u64,
    pub buffsize_ll128: u64,
    pub buffsize_simple: u64,
    pub gdr: GdrMode,
    /// PXN: sends of a GPU not local to the NIC are proxied by the NIC's GPU (NCCL_PXN_DISABLE unset).
    pub pxn: bool,
    /// GPUDirect for sends (NCCL_NET_GDR_READ not 0).
    pub gdr_read: bool,
    /// The receive side's GPUDirect flush word and loopback QP (NCCL_GDR_FLUSH_DISABLE unset).
    pub gdr_flush: bool,
    /// PAT for one rank per node (NCCL_PAT_ENABLE not 0).
    pub pat: bool,
    pub qps_per_connection: u64,
    /// Devices of a merged virtual NIC: every registration and queue is made on each.
    pub devices_per_nic: u64,
    /// All-to-all (send/recv) over the network, when modelled.
    pub p2p: Option<P2p>,
    pub page_size: u64,
}

/// How many channels, and which tree and NIC each one uses.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Channels {
    /// C: the channels NCCL runs, as NCCL_DEBUG=INFO prints them ("C coll channels", src/init.cc
    /// initTransportsRank).
    pub count: u64,
    /// S: the ring graph's channels after ncclTopoDupChannels, comm->nChannels when
    /// ncclTopoPreset runs (src/init.cc: min of the ring and tree graphs), printed as
    /// "Pattern 4, crossNic ., nChannels S" (search.cc ncclTopoPrintGraph). ncclTopoPostset
    /// (connect.cc) makes 2S of them: channel c < S follows tree 0, c + S tree 1.
    pub search: u64,
    /// The channels after the caps, before copies up to a floor: the ones the copies repeat.
    pub capped: u64,
    /// S and C were not given: both come from the topology rule below.
    pub assumed: bool,
    pub why: String,
}

/// What ncclTopoCompute gives on a node whose NICs each carry one search channel (the rail-
/// optimised layout): one channel per NIC, which ncclTopoDupChannels (src/graph/search.cc)
/// doubles only when bwIntra >= 25 and, on sm90 and later (ccMin > 80), bwIntra >= 50 or at
/// most 4 channels. Assumed here: an sm90-class GPU (H100, H200, B200) whose NVLink bandwidth per
/// channel is what the NIC gives (one 400 Gb/s NIC: bwIntra = bwInter < 50, >= 25), so the
/// search's channels are doubled when there are at most 4 of them (up to the ring graph's
/// maxChannels, MAXCHANNELS/2, src/init.cc). ncclTopoPostset (src/graph/connect.cc) then doubles
/// S into C = 2S (at most MAXCHANNELS): 16 for 8 NICs, as an H100 log prints ("Channel 00/16").
pub fn search_channels(nics: u64) -> (u64, bool) {
    let s = nics.clamp(1, MAX_CHANNELS / 2);
    if s <= 4 {
        ((2 * s).min(MAX_CHANNELS / 2), true)
    } else {
        (s, false)
    }
}

/// The channels NCCL runs from the topology (no caps, no floors): S from [`search_channels`] or
/// given (`--search-channels`), doubled by ncclTopoPostset.
pub fn topology_channels(nics: u64) -> Channels {
    let (search, dup) = search_channels(nics);
    let count = (2 * search).min(MAX_CHANNELS);
    let n = nics.clamp(1, MAX_CHANNELS / 2);
    Channels {
        count,
        search,
        capped: count,
        assumed: true,
        why: format!(
            "assumed from the topology: {n} search channel(s), one per NIC, {} by ncclTopoDupChannels (sm90-class GPU, \
                25 <= bwIntra < 50 assumed), S = {search}, doubled by ncclTopoPostset: C = {count}",
            if dup { "doubled" } else { "not doubled" }
        ),
    }
}

/// The channels from S as given (`--search-channels`, the ring graph line NCCL_DEBUG=INFO
/// prints), doubled by ncclTopoPostset.
pub fn searched_channels(search: u64) -> Channels {
    let search = search.clamp(1, MAX_CHANNELS / 2);
    let count = 2 * search;
    Channels {
        count,
        search,
        capped: count,
        assumed: false,
        why: format!("--search-channels {search}, doubled by ncclTopoPostset: C = {count}"),
    }
}

/// NCCL's channel caps and floors over the topology's count (src/graph/connect.cc
/// ncclTopoPostset, ncclMinNchannels, ncclMaxNchannels; src/init.cc for the CTA variables):
/// min(topology, max channels, max CTAs), then copies of the first channels up to
/// max(min channels, min CTAs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChannelLimits {
    /// ncclMaxNchannels(): NCCL_MAX_NCHANNELS, else NCCL_MAX_NRINGS; below 1 is 1; above 64 is 64.
    pub max_nchannels: Option<i64>,
    /// ncclMinNchannels(): NCCL_MIN_NCHANNELS, else NCCL_MIN_NRINGS; negative is 0.
    pub min_nchannels: Option<i64>,
    /// NCCL_MAX_CTAS; ignored when 0 or less.
    pub max_ctas: Option<i64>,
    /// NCCL_MIN_CTAS; ignored when 0 or less.
    pub min_ctas: Option<i64>,
}

impl ChannelLimits {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The channels NCCL runs, from the topology's count.
    pub fn apply(&self, topology: &Channels) -> Channels {
        let max = MAX_CHANNELS as i64;
        let max_n = self.max_nchannels.map_or(max, |m| m.clamp(1, max));
        let min_n = self.min_nchannels.map_or(0, |m| m.clamp(0, max));
        // init.cc: a CTA variable at 0 or below is left unset; both are capped at MAXCHANNELS,
        // and a min above the max is lowered to it.
        let max_ctas = self.max_ctas.filter(|v| *v > 0).map_or(max, |v| v.min(max));
        let min_ctas = self.min_ctas.filter(|v| *v > 0).map_or(1, |v| v.min(max)).min(max_ctas);
        let capped = (topology.count as i64).min(max_n).min(max_ctas);
        let count = capped.max(min_n).max(min_ctas).clamp(1, max) as u64;
        if self.is_empty() {
            return topology.clone();
        }
        Channels {
            count,
            search: topology.search,
            capped: capped.clamp(1, max) as u64,
            assumed: topology.assumed,
            why: format!(
                "{}; caps and floors from the environment: min({}, max channels {max_n}, max CTAs {max_ctas}) = \
                    {capped}, raised to max(min channels {min_n}, min CTAs {min_ctas}): {count}",
                topology.why, topology.count
            ),
        }
    }
}

impl Channels {
    /// C given (`--channels`, what NCCL_DEBUG=INFO prints), with S given or from the topology. A C
    /// below 2S is a cap (the first C channels), one above it copies (connect.cc copyChannels).
    pub fn given(count: u64, search: u64) -> Self {
        let search = search.max(1);
        Channels {
            count,
            search,
            capped: count.min(2 * search),
            assumed: false,
            why: format!("--channels {count}, S = {search}"),
        }
    }

    /// Which double-binary tree channel `c` follows: ncclTopoPostset (connect.cc) puts channel
    /// j < S on tree 0 and its copy j + S on tree 1 (connectTrees: channel0, channel1 =
    /// channel0 + nChannels); copies made past 2S or to reach a floor repeat the first channels
    /// (copyChannels), and a cap at or below S leaves every channel on tree 0.
    fn tree_of(&self, c: u64) -> usize {
        let s = self.search.max(1);
        let j = c % self.capped.max(1) % (2 * s);
        usize::from(j >= s)
    }

    /// The NIC of channel `c`: the search starts channel k at NET k mod nics (ncclTopoSearchRecNet),
    /// and every duplication (ncclTopoDupChannels, ncclTopoPostset, copyChannels) keeps each
    /// channel's NIC.
    fn nic_of(&self, c: u64, nics: u64) -> u64 {
        let s = self.search.max(1);
        (c % self.capped.max(1) % s) % nics.max(1)
    }
}

/// The all-to-all part (src/transport/net.cc shared buffers, src/graph/paths.cc p2p channels).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct P2p {
    /// p2pnChannels: the size of each shared pool, in channels.
    pub channels: u64,
    /// Channels (so connections) per remote peer.
    pub channels_per_peer: u64,
    pub chunk: u64,
    /// NCCL_ALLOC_P2P_NET_LL_BUFFERS: an LL buffer per connection.
    pub ll_buffers: bool,
    /// Shared pools (NCCL_NET_SHARED_BUFFERS not 0); without them every p2p connection has
    /// dedicated buffers like a ring's (net.cc sendSetup: `shared`).
    pub shared: bool,
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
            qps_per_connection: 1,
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

/// A node's place in one tree: parent, child 0, child 1 (-1: none), and whether it is its
/// parent's child 0 or child 1 (-1 for the root).
pub type TreePlace = (i64, i64, i64, i64);

/// ncclGetBtree (src/graph/trees.cc), as NCCL writes it.
pub fn btree(nranks: i64, rank: i64) -> TreePlace {
    let mut bit = 1;
    while bit < nranks {
        if bit & rank != 0 {
            break;
        }
        bit <<= 1;
    }
    if rank == 0 {
        return (-1, -1, if nranks > 1 { bit >> 1 } else { -1 }, -1);
    }
    let mut up = (rank ^ bit) | (bit << 1);
    if up >= nranks {
        up = rank ^ bit;
    }
    let child_type = i64::from(rank >= up);
    let mut lowbit = bit >> 1;
    let down0 = if lowbit == 0 { -1 } else { rank - lowbit };
    let mut down1 = if lowbit == 0 { -1 } else { rank + lowbit };
    while down1 >= nranks {
        down1 = if lowbit == 0 { -1 } else { rank + lowbit };
        lowbit >>= 1;
    }
    (up, down0, down1, child_type)
}

/// ncclGetDtree (trees.cc): tree 0 is the btree; tree 1 its mirror (even node counts) or the
/// btree shifted by one (odd), the child type taken from that btree as NCCL does.
pub fn dtree(nranks: i64, rank: i64) -> [TreePlace; 2] {
    let t0 = btree(nranks, rank);
    let t1 = if nranks % 2 == 1 {
        let shifted = (rank - 1 + nranks) % nranks;
        let (u, d0, d1, ct) = btree(nranks, shifted);
        let shift = |x: i64| if x == -1 { -1 } else { (x + 1) % nranks };
        (shift(u), shift(d0), shift(d1), ct)
    } else {
        let (u, d0, d1, ct) = btree(nranks, nranks - 1 - rank);
        let mirror = |x: i64| if x == -1 { -1 } else { nranks - 1 - x };
        (mirror(u), mirror(d0), mirror(d1), ct)
    };
    [t0, t1]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    Ring,
    Tree,
    /// PAT, NCCL's AllGather/ReduceScatter algorithm for one rank per node (graph/tuning.cc
    /// ncclPatEnable).
    Pat,
    P2p,
}

impl Algorithm {
    fn index(self) -> usize {
        match self {
            Algorithm::Ring => 0,
            Algorithm::Tree => 1,
            Algorithm::Pat => 2,
            Algorithm::P2p => 3,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Ring => "ring",
            Algorithm::Tree => "tree",
            Algorithm::Pat => "pat",
            Algorithm::P2p => "p2p",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Direction {
    Send,
    Recv,
}

/// Connections of one kind a rank holds: how many, in which direction, with GPUDirect or not.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub sends: u64,
    pub sends_gdr: u64,
    pub receives: u64,
    pub receives_gdr: u64,
}

impl Counts {
    fn add(&mut self, dir: Direction, gdr: bool, n: u64) {
        let slot = match (dir, gdr) {
            (Direction::Send, false) => &mut self.sends,
            (Direction::Send, true) => &mut self.sends_gdr,
            (Direction::Recv, false) => &mut self.receives,
            (Direction::Recv, true) => &mut self.receives_gdr,
        };
        *slot = slot.saturating_add(n);
    }
    pub fn total(&self) -> u64 {
        self.sends.saturating_add(self.sends_gdr).saturating_add(self.receives).saturating_add(self.receives_gdr)
    }
}

/// The connections one rank's process registers, by algorithm, and on which NICs.
#[derive(Debug, Clone, Default, PartialEq)]
struct Held {
    ring: Counts,
    tree: Counts,
    pat: Counts,
    p2p: Counts,
    /// Connections per NIC (for the doorbell pages, per device context), by Algorithm::index.
    per_nic: Vec<[u64; 4]>,
    /// NICs the rank sends and receives p2p on (one shared pool per direction and device).
    p2p_nics: Vec<u64>,
}

/// The GPUs a NIC is local to: NIC k serves ranks floor(kG/N) .. floor((k+1)G/N) - 1 (GPUs spread
/// evenly over the NICs; with more NICs than GPUs each NIC has the one GPU floor(kG/N)).
fn group(k: u64, g: u64, n: u64) -> (u64, u64) {
    let first = k * g / n;
    let end = ((k + 1) * g / n).max(first + 1);
    (first, end)
}

fn nic_local(rank: u64, k: u64, g: u64, n: u64) -> bool {
    let (first, end) = group(k, g, n);
    (first..end).contains(&rank)
}

/// One network connection of a rank, as NCCL keys it: a channel's connector to one peer rank in
/// one direction (connIndex 0 for ring, tree and PAT). A second algorithm asking for the same one
/// reuses it (src/transport.cc ncclTransportP2pConnect skips `connected` connectors).
type ConnKey = (u64, u64, Direction, u64, u64);

/// Places every network connection of node `node` on the rank whose process registers it, each
/// once: the first algorithm that needs it (ring, then tree, then PAT) owns it.
fn place(i: &Inputs, node: u64, algorithms: &[Algorithm]) -> Vec<Held> {
    place_logged(i, node, algorithms, &mut Vec::new())
}

/// [`place`], recording each connection with the algorithm that made it.
fn place_logged(i: &Inputs, node: u64, algorithms: &[Algorithm], log: &mut Vec<(Algorithm, ConnKey)>) -> Vec<Held> {
    // The flags are validated (estimate::validate); the model itself still takes any input
    // without dividing by zero or indexing out of range.
    let (g, n) = (i.ranks_per_node.clamp(1, MAX_LOCAL_RANKS), i.nics.clamp(1, MAX_NICS));
    let mut held: Vec<Held> =
        (0..g).map(|_| Held { per_nic: vec![[0; 4]; n as usize], ..Default::default() }).collect();
    let nodes = i.nodes.max(1);
    if nodes < 2 {
        return held;
    }
    let gdr = i.gdr != GdrMode::Off;
    let mut seen: std::collections::HashSet<ConnKey> = std::collections::HashSet::new();
    let mut put_n = |rank: u64, alg: Algorithm, dir: Direction, nic: u64, on_gpu: bool, n: u64| {
        let h = &mut held[rank as usize];
        let slot = &mut h.per_nic[nic as usize][alg.index()];
        *slot = slot.saturating_add(n);
        match alg {
            Algorithm::Ring => h.ring.add(dir, on_gpu, n),
            Algorithm::Tree => h.tree.add(dir, on_gpu, n),
            Algorithm::Pat => h.pat.add(dir, on_gpu, n),
            Algorithm::P2p => h.p2p.add(dir, on_gpu, n),
        }
    };
    // A connection of `local` on channel `c` (NIC k) with `peer` (node, local rank): registered by
    // `local`, unless it is a send from a GPU beyond PCI reach of the NIC (graph/paths.cc
    // ncclTopoCheckGdr: distance > PXB, so no GPUDirect) that PXN routes through the NIC's GPU
    // (paths.cc: GPU to NIC only, and only with GPUDirect on that GPU), whose proxy registers it
    // (net.cc sendSetup: proxyRank). Receives are never proxied (net.cc recvSetup).
    let mut connect = |alg: Algorithm, c: u64, k: u64, local: u64, dir: Direction, peer: (u64, u64)| {
        if !seen.insert((c, local, dir, peer.0, peer.1)) {
            return;
        }
        log.push((alg, (c, local, dir, peer.0, peer.1)));
        let (first, _) = group(k, g, n);
        let near = nic_local(local, k, g, n);
        let dir_gdr = gdr && (dir == Direction::Recv || i.gdr_read);
        match (near, dir) {
            (true, _) => put_n(local, alg, dir, k, dir_gdr, 1),
            (false, Direction::Send) if i.pxn && dir_gdr => put_n(first, alg, dir, k, true, 1),
            (false, _) => put_n(local, alg, dir, k, false, 1),
        }
    };
    let next = (node + 1) % nodes;
    let prev = (node + nodes - 1) % nodes;
    let trees = dtree(nodes as i64, node as i64);
    for c in 0..i.channels.count {
        let k = i.channels.nic_of(c, n);
        let (first, end) = group(k, g, n);
        // Ring (connect.cc ncclTopoPreset): the channel enters the node at ringIntra[0], the NIC's
        // GPU where the search starts (search.cc: net->net.localGpu), and leaves it from
        // ringIntra[localRanks-1]: the ring visits every GPU of the node once, so with more than one
        // GPU the exit is another GPU, also when the NIC has a single GPU. It leaves through the
        // same rail (search.cc ncclTopoSearchCheckNet, crossNic 0; ncclTopoGetNetDev takes
        // inter[2c+1] for the exit GPU), so its send is on NIC k: the last GPU of the NIC's group,
        // and with one GPU per NIC the next GPU, as NVSwitch nodes print it (NVIDIA/nccl issue
        // 1453, H100: ring `0 7 6 5 4 3 2 1 8 ...`, node entered at GPU 0 and left from GPU 1).
        // That send is the exit GPU's own connector (transport.cc: channel, peer, connIndex), a
        // different one from any tree edge's. Every node alike (connectRings: node n's send goes
        // to node n+1's receive).
        let last = if end - first >= 2 { end - 1 } else { (first + 1) % g };
        if algorithms.contains(&Algorithm::Ring) {
            connect(Algorithm::Ring, c, k, first, Direction::Recv, (prev, last));
            connect(Algorithm::Ring, c, k, last, Direction::Send, (next, first));
        }
        // Balanced tree (init.cc treeGraph pattern NCCL_TOPO_PATTERN_BALANCED_TREE; connect.cc
        // ncclTopoPreset): treeToParent = treeIntra[0], treeToChild0 = treeIntra[1],
        // treeToChild1 = treeIntra[0], both on the channel's NIC (search.cc
        // ncclTopoSearchCheckNet). treeIntra[1] is the next GPU of the NIC's group, else the
        // chain's next GPU (on another NIC's PCIe switch); with one GPU per node the pattern is
        // NCCL_TOPO_PATTERN_TREE and everything is on it (search.cc ncclTopoCompute).
        // connectTrees: the parent edge goes to the parent node's treeToChild<child type>, a child
        // edge to the child node's treeToParent; each edge is a send and a receive
        // (generic.cc ncclTransportTreeConnect).
        if algorithms.contains(&Algorithm::Tree) {
            let second = if end - first >= 2 { first + 1 } else { (first + 1) % g };
            let child = |child_type: i64| if child_type == 0 { second } else { first };
            let (up, down0, down1, child_type) = trees[i.channels.tree_of(c)];
            let mut edge = |local: u64, peer: (u64, u64)| {
                connect(Algorithm::Tree, c, k, local, Direction::Send, peer);
                connect(Algorithm::Tree, c, k, local, Direction::Recv, peer);
            };
            if up != -1 {
                edge(first, (up as u64, child(child_type)));
            }
            if down0 != -1 {
                edge(second, (down0 as u64, first));
            }
            if down1 != -1 {
                edge(first, (down1 as u64, first));
            }
        }
        // PAT with one rank per node (generic.cc ncclTransportPatConnect): for every power of two
        // below the node count, a receive from and a send to node +mask and node -mask.
        if algorithms.contains(&Algorithm::Pat) && g == 1 {
            let mut mask = 1;
            while mask < nodes {
                for peer in [(node + mask) % nodes, (node + nodes - mask % nodes) % nodes] {
                    connect(Algorithm::Pat, c, k, 0, Direction::Recv, (peer, 0));
                    connect(Algorithm::Pat, c, k, 0, Direction::Send, (peer, 0));
                }
                mask <<= 1;
            }
        }
    }
    if let (Some(p2p), true) = (&i.p2p, algorithms.contains(&Algorithm::P2p)) {
        // All-to-all: every rank connects to every rank of the other nodes, on channels_per_peer
        // channels (connIndex 1: never one of the connections above), through its own NIC
        // (search.cc ncclTopoGetNetDev without a graph); PXN for p2p is not modelled (the sends
        // would be registered by the NIC's GPU).
        let peers = (nodes - 1) * g;
        for rank in 0..g {
            let k = (rank * n / g).min(n - 1);
            let count = peers.saturating_mul(p2p.channels_per_peer);
            put_n(rank, Algorithm::P2p, Direction::Send, k, gdr && i.gdr_read, count);
            put_n(rank, Algorithm::P2p, Direction::Recv, k, gdr, count);
        }
        for (rank, h) in held.iter_mut().enumerate() {
            h.p2p_nics.push((rank as u64 * n / g).min(n - 1));
        }
    }
    held
}

/// Bytes of one term: charged to VmPin (checked against the memlock limit) and taken from host
/// memory (MemAvailable, the cgroup).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Bytes {
    pub memlock: u64,
    pub host: u64,
}

impl Bytes {
    fn scale(self, n: u64) -> Self {
        Bytes { memlock: self.memlock.saturating_mul(n), host: self.host.saturating_mul(n) }
    }
    fn plus(self, o: Self) -> Self {
        Bytes { memlock: self.memlock.saturating_add(o.memlock), host: self.host.saturating_add(o.host) }
    }
}

/// Pages a registration of `size` bytes at `offset` from a page-aligned start pins: ib_umem_get
/// charges the page span (torvalds/linux drivers/infiniband/core/umem.c), as NCCL's own cache
/// rounds it (net_ib/reg.cc ncclIbRegMrDmaBufInternal2).
fn span_pages(offset: u64, size: u64, page: u64) -> u64 {
    if size == 0 {
        return 0;
    }
    let page = page.max(1);
    offset.saturating_add(size).div_ceil(page) - offset / page
}

/// The data buffers of one dedicated (ring or tree) connection, registered one protocol at a time
/// (net.cc sendProxyConnect / recvProxyConnect): host buffers from one cudaHostAlloc bank, GPU
/// buffers from one device bank, each MR its page span unless NCCL's MR cache finds it inside an
/// earlier one of the same bank (net_ib/reg.cc).
fn data_buffers(i: &Inputs, dir: Direction, on_gpu: bool) -> Bytes {
    let page = i.page();
    let sizes = [i.buffsize_ll, i.buffsize_ll128, i.buffsize_simple];
    // Send: LL always on the host ("p != NCCL_PROTO_LL && useGdr"); receive: all or nothing.
    let device = |p: usize| on_gpu && !(dir == Direction::Send && p == 0);
    let mut total = Bytes::default();
    for bank_on_gpu in [false, true] {
        let mut offset = 0;
        let mut mrs: Vec<(u64, u64)> = Vec::new();
        for (p, size) in sizes.iter().enumerate() {
            if device(p) != bank_on_gpu {
                continue;
            }
            let start = offset / page;
            let pages = span_pages(offset, *size, page);
            offset = offset.saturating_add(*size);
            if mrs.iter().any(|(s, n)| start >= *s && start.saturating_add(pages) <= s.saturating_add(*n)) {
                continue;
            }
            mrs.push((start, pages));
            let bytes = pages.saturating_mul(page);
            total = total.plus(match (bank_on_gpu, i.gdr) {
                (false, _) => Bytes { memlock: bytes, host: bytes },
                (true, GdrMode::Peermem) => Bytes { memlock: bytes, host: 0 },
                (true, _) => Bytes::default(),
            });
        }
    }
    total
}

/// Control MRs of one IB connection on one device, each registered without the cache (ibv_reg_mr
/// in net_ib/connect.cc): the sender's GIN scratchpad (8 B), CTS FIFO (128 KiB) and completion
/// shadow (8 KiB); the receiver's CTS FIFO shadow (128 KiB), completion records (40 KiB) and,
/// with GPUDirect flush, a flush word (an int). They live inside the page-aligned comm structure
/// at offsets we do not compute (they follow struct ncclIbNetCommBase), so the FIFOs and records
/// are counted as not starting on a page boundary: one page more than their size. The words never
/// straddle a page.
fn control_pages(i: &Inputs, dir: Direction) -> u64 {
    let page = i.page();
    let unaligned = |size: u64| size.div_ceil(page) + 1;
    match dir {
        Direction::Send => 1 + unaligned(CTS_FIFO_BYTES) + unaligned(SEND_COMPLETIONS_BYTES),
        Direction::Recv => unaligned(CTS_FIFO_BYTES) + unaligned(RECV_COMPLETIONS_BYTES) + u64::from(i.gdr_flush),
    }
}

/// The queue buffers of one IB connection on one device, pinned by the kernel when mlx5 creates
/// them (rdma-core providers/mlx5: create_cq, mlx5_calc_sq_size, mlx5_calc_rq_size; sizes from
/// net_ib/connect.cc): a CQ of NET_IB_MAX_REQUESTS x QPs entries (send) or twice that (receive),
/// rounded up to a power of two after adding one, 64 B each; per QP a send queue of 2 x 256 WRs of
/// 256 B (both sides) and, on the receive side, a receive queue of 256 WRs of 16 B, each rounded
/// to a power of two; on the receive side with GPUDirect flush, a flush QP of 256 send WRs.
/// Returns (pages, QPs, CQs).
fn ring_pages(i: &Inputs, dir: Direction) -> (u64, u64, u64) {
    let page = i.page();
    let pages = |bytes: u64| bytes.div_ceil(page);
    let q = i.qps_per_connection.clamp(1, MAX_QPS);
    let cq_entries = |wrs: u64| (wrs + 1).next_power_of_two();
    match dir {
        Direction::Send => {
            let cq = pages(cq_entries(IB_MAX_REQUESTS * q) * MLX5_CQE);
            let qp = pages((2 * IB_MAX_REQUESTS * MLX5_SEND_WQE).next_power_of_two());
            (cq + q * qp, q, 1)
        }
        Direction::Recv => {
            let cq = pages(cq_entries(2 * IB_MAX_REQUESTS * q) * MLX5_CQE);
            let sq = (2 * IB_MAX_REQUESTS * MLX5_SEND_WQE).next_power_of_two();
            let rq = (IB_MAX_REQUESTS.next_power_of_two() * MLX5_RECV_WQE).max(64);
            let qp = pages(sq + rq);
            let flush = if i.gdr_flush { pages((IB_MAX_REQUESTS * MLX5_SEND_WQE).next_power_of_two()) } else { 0 };
            (cq + q * qp + flush, q + u64::from(i.gdr_flush), 1)
        }
    }
}

/// One line of a rank's need.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Term {
    /// The algorithm whose connections the term is for; none for what they share (doorbell pages).
    pub algorithm: Option<Algorithm>,
    pub name: &'static str,
    pub formula: String,
    pub memlock_bytes: u64,
    pub host_bytes: u64,
}

/// One rank's need.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rank {
    /// The local rank (GPU index) on its node.
    pub rank: u64,
    /// Charged to VmPin with ring and tree connected (what `check` compares with the limit).
    pub memlock_bytes: u64,
    pub host_bytes: u64,
    /// With ring connections only.
    pub ring_only_memlock_bytes: u64,
    /// Connections each algorithm added (one already made by another is not counted again).
    pub ring: Counts,
    pub tree: Counts,
    pub pat: Counts,
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
    pub busiest_node: u64,
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

/// The shared p2p pools of a rank: one per direction and NIC, registered once per device (the MR
/// cache finds every later connection's range inside it: net_ib/reg.cc), p2pnChannels x
/// NCCL_SHARED_STEPS x chunk bytes each (net.cc sharedNetBuffersInit).
fn p2p_pools(i: &Inputs, h: &Held) -> Option<(Bytes, String)> {
    let p2p = i.p2p.as_ref().filter(|p| p.shared)?;
    if h.p2p.total() == 0 {
        return None;
    }
    let page = i.page();
    let pool =
        span_pages(0, p2p.channels.saturating_mul(SHARED_STEPS).saturating_mul(p2p.chunk), page).saturating_mul(page);
    let gdr = i.gdr != GdrMode::Off;
    let mut total = Bytes::default();
    for on_gpu in [gdr && i.gdr_read, gdr] {
        let one = match (on_gpu, i.gdr) {
            (false, _) => Bytes { memlock: pool.saturating_mul(i.devices_per_nic), host: pool },
            (true, GdrMode::Peermem) => Bytes { memlock: pool.saturating_mul(i.devices_per_nic), host: 0 },
            (true, _) => Bytes::default(),
        };
        total = total.plus(one.scale(h.p2p_nics.len() as u64));
    }
    let formula = format!(
        "{} NIC(s) x 2 directions x {} channels x {SHARED_STEPS} steps x {} B chunk x {} device(s), GDR {}",
        h.p2p_nics.len(),
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
    let mut ring_only = vec![Algorithm::Ring];
    let mut all = vec![Algorithm::Ring, Algorithm::Tree];
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
mod tests {
    use super::*;

    const PAGE: u64 = 4096;
    const RING: &[Algorithm] = &[Algorithm::Ring];
    const BOTH: &[Algorithm] = &[Algorithm::Ring, Algorithm::Tree];

    #[test]
    fn nccls_default_buffer_sizes() {
        assert_eq!(DEFAULT_LL_BUFFSIZE, 524_288);
        assert_eq!(DEFAULT_LL128_BUFFSIZE, 4_915_200);
        assert_eq!(DEFAULT_BUFFSIZE, 4_194_304);
        assert_eq!(CTS_FIFO_BYTES, 128 * 1024);
        assert_eq!(SEND_COMPLETIONS_BYTES, 8 * 1024);
        assert_eq!(RECV_COMPLETIONS_BYTES, 40 * 1024);
    }

    /// trees.cc's own illustration: 14 ranks, tree 0.
    #[test]
    fn btree_matches_nccls_picture() {
        assert_eq!(btree(14, 0), (-1, -1, 8, -1));
        assert_eq!(btree(14, 8), (0, 4, 12, 1), "8 is 0's second child");
        assert_eq!(btree(14, 12), (8, 10, 13, 1));
        assert_eq!(btree(14, 13), (12, -1, -1, 1));
        assert_eq!(btree(14, 1), (2, -1, -1, 0));
        assert_eq!(btree(14, 4), (8, 2, 6, 0));
        assert_eq!(btree(1, 0), (-1, -1, -1, -1));
        assert_eq!(btree(2, 1), (0, -1, -1, 1));
        // The mirror for an even count: node 11 of 12 is tree 1's root.
        let [_, t1] = dtree(12, 11);
        assert_eq!(t1.0, -1);
        let [_, t1] = dtree(13, 1);
        assert_eq!(t1.0, -1, "shifted by one for an odd count: node 1 is tree 1's root");
    }

    #[test]
    fn every_tree_edge_has_two_ends() {
        for nodes in 2..40 {
            for t in 0..2 {
                let mut ups = 0;
                let mut downs = 0;
                for n in 0..nodes {
                    let (u, d0, d1, _) = dtree(nodes, n)[t];
                    ups += i64::from(u != -1);
                    downs += i64::from(d0 != -1) + i64::from(d1 != -1);
                    for (child_type, d) in [(0, d0), (1, d1)].into_iter().filter(|(_, d)| *d != -1) {
                        let (parent, _, _, ct) = dtree(nodes, d)[t];
                        assert_eq!(parent, n, "{nodes} nodes, tree {t}: {d}'s parent");
                        assert_eq!(ct, child_type, "{nodes} nodes, tree {t}: {d} is {n}'s child {child_type}");
                    }
                }
                assert_eq!(ups, nodes - 1, "a tree over {nodes} nodes");
                assert_eq!(downs, nodes - 1);
            }
        }
    }

    #[test]
    fn data_buffer_terms_per_mode() {
        let mut i = Inputs::new(2, 8, 8);
        let all = 9_633_792;
        assert_eq!(data_buffers(&i, Direction::Send, false), Bytes { memlock: all, host: all });
        assert_eq!(data_buffers(&i, Direction::Recv, false), Bytes { memlock: all, host: all });
        i.gdr = GdrMode::Dmabuf;
        assert_eq!(
            data_buffers(&i, Direction::Send, true),
            Bytes { memlock: 524_288, host: 524_288 },
            "LL stays on the host"
        );
        assert_eq!(data_buffers(&i, Direction::Recv, true), Bytes::default());
        i.gdr = GdrMode::Peermem;
        assert_eq!(data_buffers(&i, Direction::Send, true), Bytes { memlock: all, host: 524_288 });
        assert_eq!(data_buffers(&i, Direction::Recv, true), Bytes { memlock: all, host: 0 });
    }

    #[test]
    fn odd_buffer_sizes_pin_their_page_span_and_the_cache_folds_contained_ones() {
        let mut i = Inputs::new(2, 1, 1);
        // NCCL_BUFFSIZE=4M reads as 4: the Simple buffer starts at 5439488 (page 1328 exactly).
        i.buffsize_simple = 4;
        assert_eq!(data_buffers(&i, Direction::Recv, false).memlock, (128 + 1200 + 1) * PAGE);
        // An LL128 buffer of 4097 B ends 1 byte into its second page; Simple (4 B) falls inside
        // that page: NCCL's MR cache returns the LL128 MR, nothing more is pinned.
        i.buffsize_ll128 = 4097;
        assert_eq!(data_buffers(&i, Direction::Recv, false).memlock, (128 + 2) * PAGE);
        assert_eq!(span_pages(4095, 2, PAGE), 2);
        assert_eq!(span_pages(0, 0, PAGE), 0);
    }

    #[test]
    fn control_and_queue_pages_per_connection() {
        let mut i = Inputs::new(2, 8, 8);
        assert_eq!(control_pages(&i, Direction::Send), 1 + 33 + 3);
        assert_eq!(control_pages(&i, Direction::Recv), 33 + 11 + 1);
        // Send: CQ of 257 -> 512 entries x 64 B = 8 pages; QP 512 WRs x 256 B = 32 pages.
        assert_eq!(ring_pages(&i, Direction::Send), (8 + 32, 1, 1));
        // Receive: CQ 513 -> 1024 x 64 = 16 pages; QP 128 KiB + 4 KiB = 33; flush QP 16.
        assert_eq!(ring_pages(&i, Direction::Recv), (16 + 33 + 16, 2, 1));
        i.gdr_flush = false;
        assert_eq!(control_pages(&i, Direction::Recv), 44);
        assert_eq!(ring_pages(&i, Direction::Recv), (16 + 33, 1, 1));
        i.qps_per_connection = 4;
        // CQ 1025 -> 2048 x 64 = 32 pages; four QPs.
        assert_eq!(ring_pages(&i, Direction::Send), (32 + 4 * 32, 4, 1));
    }

    #[test]
    fn ring_connections_sit_next_to_the_nics() {
        // 8 GPUs, 8 NICs, 16 channels (S = 8): each GPU receives its NIC's 2 channels (c, c + 8)
        // and, as the ring's exit for NIC k - 1, sends that NIC's 2 (GDR off: from its own process,
        // on NIC k - 1).
        let i = Inputs::new(2, 8, 8);
        assert_eq!(i.channels.count, 16);
        let held = place(&i, 0, RING);
        for (k, h) in held.iter().enumerate() {
            assert_eq!(h.ring, Counts { sends: 2, receives: 2, ..Default::default() });
            let mut per_nic = vec![[0; 4]; 8];
            per_nic[k][0] = 2;
            per_nic[(k + 7) % 8][0] = 2;
            assert_eq!(h.per_nic, per_nic, "GPU {k}");
        }
        // One NIC for 8 GPUs: 4 channels, received on GPU 0 and sent from GPU 7.
        let one = Inputs::new(2, 8, 1);
        let held = place(&one, 0, RING);
        assert_eq!(held[0].ring, Counts { receives: 4, ..Default::default() });
        assert_eq!(held[7].ring, Counts { sends: 4, ..Default::default() });
        assert!(held[1..7].iter().all(|h| h.ring.total() == 0));
        // One GPU: it is entry and exit.
        let held = place(&Inputs::new(2, 1, 1), 0, RING);
        assert_eq!(held[0].ring, Counts { sends: 4, receives: 4, ..Default::default() });
        // One node: nothing on the network.
        assert!(place(&Inputs::new(1, 8, 8), 0, BOTH).iter().all(|h| h.ring.total() + h.tree.total() == 0));
    }

    #[test]
    fn ring_and_tree_are_separate_connectors_on_eight_by_eight_nodes() {
        // Two nodes, 8 GPUs, 8 NICs: node 0 is tree 0's root with child 1 (its d1) and tree 1's
        // child of node 1 (child type 1). The tree edges join treeIntra[0] of both nodes, GPU k
        // with GPU k; the ring joins node 0's exit, GPU k + 1, with node 1's GPU k: other peers,
        // other connectors. Each GPU: 2 ring sends and receives, 2 tree sends and receives.
        let i = Inputs::new(2, 8, 8);
        assert_eq!(dtree(2, 0), [(-1, -1, 1, -1), (1, -1, -1, 1)]);
        let held = place(&i, 0, BOTH);
        for h in &held {
            assert_eq!(h.ring, Counts { sends: 2, receives: 2, ..Default::default() });
            assert_eq!(h.tree, Counts { sends: 2, receives: 2, ..Default::default() }, "{held:?}");
        }
        // One NIC for 8 GPUs: the ring leaves from GPU 7, the tree from GPU 0: new connections.
        let held = place(&Inputs::new(2, 8, 1), 0, BOTH);
        assert_eq!(held[0].tree, Counts { sends: 4, receives: 4, ..Default::default() });
        // Where the peers do match, NCCL reuses the connector (transport.cc): four nodes, node 1
        // is tree 1's parent of node 2 (child 0): GPU k + 1's child-0 send on channel k + 8 goes to
        // node 2's GPU k, as its ring send does.
        assert_eq!(dtree(4, 1)[1], (3, 2, 0, 1));
        let held = place(&Inputs::new(4, 8, 8), 1, BOTH);
        assert_eq!(held[1].tree, Counts { sends: 3, receives: 4, ..Default::default() });
    }

    /// Public NCCL_DEBUG=INFO logs of 2 nodes x 8 H100 x 8 NICs, 16 coll channels. NVIDIA/nccl
    /// issue 1453 prints rings `0 7 6 5 4 3 2 1 8 ...` (node 0 entered at GPU 0, left from GPU 1
    /// to rank 8, node 1's GPU 0) and `Channel 00/16`; NVIDIA/nccl-tests issue 319 prints, for rank
    /// 5 (node 0, GPU 5), `Trees ... [5] 6/13/-1->5->-1 ... [13] 6/-1/-1->5->13` (channel 5: rank
    /// 13, node 1's GPU 5, is its network child; channel 13: its network parent) and for rank 8
    /// (node 1, GPU 0) `[0] 9/-1/-1->8->0` (channel 0: its network parent is rank 0).
    #[test]
    fn public_h100_logs() {
        let i = Inputs::new(2, 8, 8);
        assert_eq!(i.channels.count, 16, "Channel 00/16");
        let mut log = Vec::new();
        place_logged(&i, 0, BOTH, &mut log);
        let has = |log: &[(Algorithm, ConnKey)], alg, c, local, dir, peer: (u64, u64)| {
            log.iter().any(|(a, k)| *a == alg && *k == (c, local, dir, peer.0, peer.1))
        };
        // Ring, channel 0: node 0's GPU 1 sends to node 1's GPU 0; GPU 0 receives from node 1's
        // exit, GPU 1 (the ring `8 15 14 13 12 11 10 9` back to 0).
        assert!(has(&log, Algorithm::Ring, 0, 1, Direction::Send, (1, 0)));
        assert!(has(&log, Algorithm::Ring, 0, 0, Direction::Recv, (1, 1)));
        assert!(!log.iter().any(|(a, k)| *a == Algorithm::Ring && k.0 == 0 && k.1 == 0 && k.2 == Direction::Send));
        // Trees: rank 5's network child on channel 5 and network parent on channel 13 are both
        // rank 13 (node 1's GPU 5), a send and a receive each, and not ring connections.
        for c in [5, 13] {
            assert!(has(&log, Algorithm::Tree, c, 5, Direction::Send, (1, 5)), "channel {c}");
            assert!(has(&log, Algorithm::Tree, c, 5, Direction::Recv, (1, 5)), "channel {c}");
        }
        let mut log = Vec::new();
        place_logged(&i, 1, BOTH, &mut log);
        assert!(has(&log, Algorithm::Tree, 0, 0, Direction::Send, (0, 0)), "rank 8's parent on channel 0 is rank 0");
        assert!(has(&log, Algorithm::Ring, 0, 1, Direction::Send, (0, 0)), "node 1 left from rank 9 to rank 0");
    }

    #[test]
    fn pxn_moves_sends_to_the_nics_gpu_only_with_gpudirect() {
        // Four nodes: node 2 in tree 0 has parent 0 (as its child 1) and children 1 and 3; in tree
        // 1 it is node 1's child 0.
        assert_eq!(dtree(4, 2), [(0, 1, 3, 1), (1, -1, -1, 0)]);
        let mut i = Inputs::new(4, 8, 8);
        // C = 2 from S = 1: channel 0 on tree 0, channel 1 (its ncclTopoPostset copy) on tree 1,
        // both on NIC 0; the ring enters at GPU 0 and leaves from GPU 1.
        i.channels = Channels::given(2, 1);
        // GPU 0: channel 0's parent edge (to node 0's GPU 0) and child-1 edge (node 3's GPU 0),
        // channel 1's parent edge to node 1's treeToChild0, GPU 1, whose receive is the ring's
        // (channel 1 receives from node 1's exit, GPU 1): 3 sends, 2 receives. GPU 1: the child-0
        // edge (node 1's GPU 0) on NIC 0, not on its switch: no GPUDirect.
        let held = place(&i, 2, BOTH);
        assert_eq!(held[0].tree, Counts { sends: 3, receives: 2, ..Default::default() });
        assert_eq!(held[1].tree, Counts { sends: 1, receives: 1, ..Default::default() });
        assert_eq!(held[1].ring, Counts { sends: 2, ..Default::default() });
        i.gdr = GdrMode::Dmabuf;
        let held = place(&i, 2, BOTH);
        assert_eq!(held[1].tree, Counts { receives: 1, ..Default::default() }, "PXN: the send is GPU 0's");
        assert_eq!(held[1].ring, Counts::default(), "PXN: the ring's exit sends are GPU 0's too");
        assert_eq!(held[0].tree, Counts { sends_gdr: 4, receives_gdr: 2, ..Default::default() });
        assert_eq!(held[0].ring, Counts { sends_gdr: 2, receives_gdr: 2, ..Default::default() });
        i.pxn = false;
        let held = place(&i, 2, BOTH);
        assert_eq!(held[1].tree, Counts { sends: 1, receives: 1, ..Default::default() });
        assert_eq!(held[1].ring, Counts { sends: 2, ..Default::default() });
    }

    #[test]
    fn search_duplication_is_conditional() {
        // ncclTopoDupChannels: no copy with more than 4 channels on sm90 (bwIntra < 50 assumed).
        assert_eq!(search_channels(1), (2, true));
        assert_eq!(search_channels(4), (8, true));
        assert_eq!(search_channels(5), (5, false));
        assert_eq!(search_channels(8), (8, false), "8-NIC H100: S = 8");
        assert_eq!(search_channels(32), (32, false));
        // ncclTopoPostset doubles S: 16 coll channels on 8 NICs, as the H100 log prints.
        assert_eq!(topology_channels(8).count, 16);
        assert_eq!(topology_channels(4).count, 16);
        assert_eq!(topology_channels(2).count, 8);
        assert_eq!(topology_channels(1).count, 4);
        assert_eq!(topology_channels(16).count, 32);
        assert_eq!(topology_channels(32).count, 64);
        assert!(topology_channels(8).assumed);
        assert_eq!(searched_channels(12).count, 24);
    }

    #[test]
    fn the_tree_of_a_channel_comes_from_s() {
        let trees = |ch: &Channels| (0..ch.count).map(|c| ch.tree_of(c)).collect::<Vec<_>>();
        // C = 2S: the first S on tree 0, their copies on tree 1.
        assert_eq!(trees(&Channels::given(16, 8)), [[0; 8], [1; 8]].concat());
        // The same 16 channels from S = 4 duplicated by the search (C = 16, S = 8 too) and from
        // S = 16 capped at 16 (NCCL_MAX_NCHANNELS=16): all on tree 0, not half and half.
        assert_eq!(trees(&Channels::given(16, 16)), [0; 16]);
        // A floor above 2S repeats the first 2S (copyChannels).
        assert_eq!(trees(&Channels::given(32, 8)), [[0; 8], [1; 8], [0; 8], [1; 8]].concat());
        // NICs: channel c and its copies on NIC c mod S mod nics.
        let ch = Channels::given(16, 8);
        assert_eq!((0..16).map(|c| ch.nic_of(c, 8)).collect::<Vec<_>>(), (0..8).chain(0..8).collect::<Vec<_>>());
        assert_eq!((0..16).map(|c| ch.nic_of(c, 4)).collect::<Vec<_>>(), [0, 1, 2, 3].repeat(4));
    }

    #[test]
    fn channel_caps_and_floors() {
        let topo = topology_channels(8);
        assert_eq!(topo.count, 16);
        let apply = |l: ChannelLimits| l.apply(&topo).count;
        assert_eq!(apply(ChannelLimits::default()), 16);
        assert_eq!(apply(ChannelLimits { max_nchannels: Some(8), ..Default::default() }), 8);
        assert_eq!(apply(ChannelLimits { max_ctas: Some(12), max_nchannels: Some(24), ..Default::default() }), 12);
        assert_eq!(apply(ChannelLimits { max_nchannels: Some(0), ..Default::default() }), 1, "below 1 is 1");
        assert_eq!(apply(ChannelLimits { max_ctas: Some(0), ..Default::default() }), 16, "0 CTAs is ignored");
        assert_eq!(apply(ChannelLimits { min_nchannels: Some(40), ..Default::default() }), 40, "a floor, not a count");
        assert_eq!(apply(ChannelLimits { min_ctas: Some(100), ..Default::default() }), 64, "capped at MAXCHANNELS");
        assert_eq!(apply(ChannelLimits { min_ctas: Some(48), max_ctas: Some(40), ..Default::default() }), 40);
        // Channels copied to reach a floor repeat the first ones: trees and NICs included.
        let floor = ChannelLimits { max_nchannels: Some(4), min_nchannels: Some(8), ..Default::default() }.apply(&topo);
        assert_eq!(floor.count, 8);
        assert_eq!((0..8).map(|c| floor.tree_of(c)).collect::<Vec<_>>(), [0; 8], "the first 4 of S = 8 are tree 0's");
        assert_eq!((0..8).map(|c| floor.nic_of(c, 8)).collect::<Vec<_>>(), [0, 1, 2, 3, 0, 1, 2, 3]);
        // A cap at S: every channel on tree 0.
        let cap = ChannelLimits { max_nchannels: Some(8), ..Default::default() }.apply(&topo);
        assert_eq!((0..8).map(|c| cap.tree_of(c)).collect::<Vec<_>>(), [0; 8]);
    }

    #[test]
    fn inputs_no_flag_allows_neither_panic_nor_wrap() {
        let mut i = Inputs::new(0, 0, 0);
        i.page_size = 0;
        i.qps_per_connection = 0;
        i.channels = Channels { count: 5, search: 0, capped: 0, assumed: true, why: String::new() };
        let _ = estimate(&i);
        let mut i = Inputs::new(3, 72, 32);
        (i.buffsize_ll, i.buffsize_ll128, i.buffsize_simple) = (u64::MAX, u64::MAX, u64::MAX);
        i.qps_per_connection = u64::MAX;
        i.devices_per_nic = u64::MAX;
        i.p2p = Some(P2p {
            channels: u64::MAX,
            channels_per_peer: u64::MAX,
            chunk: u64::MAX,
            ll_buffers: true,
            shared: true,
        });
        assert_eq!(estimate(&i).per_rank_max_bytes, u64::MAX);
    }

    #[test]
    fn huge_inputs_saturate_instead_of_wrapping() {
        let mut i = Inputs::new(2, 72, 32);
        i.channels = Channels::given(64, 32);
        i.communicators = u64::MAX;
        let e = estimate(&i);
        assert_eq!(e.per_rank_max_bytes, u64::MAX);
    }

    // The worked cases of docs/check.md, computed by hand there from NCCL's source. Per
    // connection, NCCL's defaults, 4 KiB pages, one QP, GPUDirect flush on:
    // send = data 2352 pages (9633792 B) + control 37 + queues 40 = 2429 pages = 9949184 B;
    // receive = 2352 + 45 + 65 = 2462 pages = 10084352 B; with GPUDirect (dma-buf) a send keeps
    // its LL buffer, 128 + 37 + 40 = 205 pages = 839680 B, a receive 45 + 65 = 110 pages = 450560 B.
    const SEND_HOST: u64 = 9_949_184;
    const RECV_HOST: u64 = 10_084_352;
    const SEND_DMABUF: u64 = 839_680;
    const RECV_DMABUF: u64 = 450_560;

    fn rank(e: &Estimate, r: u64) -> &Rank {
        &e.ranks[r as usize]
    }

    #[test]
    fn case_a_two_nodes_eight_gpus_eight_nics_gdr_off() {
        let e = estimate(&Inputs::new(2, 8, 8));
        assert_eq!((e.inputs.channels.count, e.inputs.channels.search), (16, 8), "the default for 8 NICs");
        // Every GPU k: ring receives on its NIC's 2 channels (from node 1's GPU k + 1), ring sends
        // as the exit of NIC k - 1's 2 channels, tree edges with node 1's GPU k on channel k (tree
        // 0) and k + 8 (tree 1): 4 sends, 4 receives. Doorbells: 6 connections on NIC k, 2 on NIC
        // k - 1: a page each.
        let per_rank = 4 * SEND_HOST + 4 * RECV_HOST + 2 * PAGE;
        assert_eq!(per_rank, 80_142_336);
        assert_eq!(e.per_rank_max_bytes, per_rank);
        assert_eq!(e.per_node_bytes, 8 * per_rank);
        assert_eq!(e.per_node_bytes, 641_138_688);
        assert_eq!(e.per_node_host_bytes, 8 * per_rank, "GDR off: all of it is host memory");
        assert_eq!(e.scenarios[0].per_rank_max_bytes, 2 * SEND_HOST + 2 * RECV_HOST + 2 * PAGE, "ring only");
        assert!(e.ranks.iter().all(|r| r.memlock_bytes == per_rank));
        // `--channels 16` (what NCCL prints) is the same job, not half of it.
        let mut given = Inputs::new(2, 8, 8);
        given.channels = Channels::given(16, 8);
        assert_eq!(estimate(&given).per_rank_max_bytes, per_rank);
    }

    #[test]
    fn case_b_the_same_with_dmabuf() {
        let mut i = Inputs::new(2, 8, 8);
        i.gdr = GdrMode::Dmabuf;
        let e = estimate(&i);
        let per_rank = 4 * SEND_DMABUF + 4 * RECV_DMABUF + PAGE;
        assert_eq!(per_rank, 5_165_056, "under the 8 MiB default limit");
        assert_eq!(e.per_rank_max_bytes, per_rank);
        assert_eq!(e.per_node_host_bytes, 8 * per_rank);
    }

    #[test]
    fn case_c_the_same_with_nvidia_peermem() {
        let mut i = Inputs::new(2, 8, 8);
        i.gdr = GdrMode::Peermem;
        let e = estimate(&i);
        // The GPU buffers are charged like host memory but take none.
        assert_eq!(e.per_rank_max_bytes, 80_138_240);
        assert_eq!(e.per_node_host_bytes, 8 * 5_165_056);
    }

    #[test]
    fn case_d_one_nic_for_eight_gpus() {
        let e = estimate(&Inputs::new(2, 8, 1));
        assert_eq!(e.inputs.channels.count, 4);
        // GPU 0 receives the 4 ring channels (from node 1's GPU 7) and holds the 4 tree edges
        // (with node 1's GPU 0); GPU 7 sends the ring.
        assert_eq!(rank(&e, 0).memlock_bytes, 4 * SEND_HOST + 8 * RECV_HOST + PAGE);
        assert_eq!(rank(&e, 0).memlock_bytes, 120_475_648);
        assert_eq!(rank(&e, 7).memlock_bytes, 4 * SEND_HOST + PAGE);
        assert!((1..7).all(|r| rank(&e, r).memlock_bytes == 0));
        assert_eq!(e.per_rank_max_bytes, 120_475_648);
        assert_eq!(e.per_node_bytes, 120_475_648 + 39_800_832);
    }

    #[test]
    fn case_e_four_nodes_gdr_off_and_dmabuf() {
        // GDR off, node 1: tree 0 leaf (parent 2, as its child 0), tree 1 inner (parent 3 as its
        // child 1, children 2 and 0). GPU j: ring 2 + 2; channel j (tree 0): the parent edge to
        // node 2's treeToChild0, GPU j + 1 (1 + 1); channel j + 8 (tree 1): the parent edge to node
        // 3's GPU j and the child-1 edge to node 0's GPU j (2 + 2); as GPU j - 1's treeIntra[1] on
        // channel j + 7 (NIC j - 1): the child-0 edge to node 2's GPU j - 1, whose send is its ring
        // send (same channel, same peer): 1 receive. 5 sends, 6 receives; doorbells a page on NIC
        // j, one on NIC j - 1.
        assert_eq!(dtree(4, 1), [(2, -1, -1, 0), (3, 2, 0, 1)]);
        let e = estimate(&Inputs::new(4, 8, 8));
        assert_eq!(e.busiest_node, 1);
        let r = rank(&e, 0);
        assert_eq!(r.ring, Counts { sends: 2, receives: 2, ..Default::default() });
        assert_eq!(r.tree, Counts { sends: 3, receives: 4, ..Default::default() });
        let per_rank = 5 * SEND_HOST + 6 * RECV_HOST + 2 * PAGE;
        assert_eq!(per_rank, 110_260_224);
        assert_eq!(e.per_rank_max_bytes, per_rank);
        assert_eq!(e.per_node_bytes, 8 * per_rank);
        assert_eq!(e.per_node_bytes, 882_081_792);
        // dma-buf, node 2 (tree 0: parent 0 as its child 1, children 1 and 3; tree 1: node 1's
        // child 0). GPU j: ring receives 2 and, by PXN, the exit GPU j + 1's 2 sends; channel j:
        // parent edge 1 + 1, child-1 edge 1 + 1, the PXN send of GPU j + 1's child-0 edge; channel
        // j + 8: the parent edge's send (its receive, from node 1's GPU j + 1, is the ring's); as
        // GPU j - 1's treeIntra[1]: the child-0 receive on NIC j - 1, without GPUDirect.
        assert_eq!(dtree(4, 2), [(0, 1, 3, 1), (1, -1, -1, 0)]);
        let mut i = Inputs::new(4, 8, 8);
        i.gdr = GdrMode::Dmabuf;
        let e = estimate(&i);
        assert_eq!(e.busiest_node, 2);
        let r = rank(&e, 0);
        assert_eq!(r.ring, Counts { sends_gdr: 2, receives_gdr: 2, ..Default::default() });
        assert_eq!(r.tree, Counts { sends: 0, sends_gdr: 4, receives: 1, receives_gdr: 2 });
        let per_rank = 6 * SEND_DMABUF + 4 * RECV_DMABUF + RECV_HOST + 2 * PAGE;
        assert_eq!(per_rank, 16_932_864);
        assert_eq!(e.per_rank_max_bytes, per_rank);
        assert_eq!(e.per_node_bytes, 8 * per_rank);
    }

    #[test]
    fn case_i_sixteen_nodes() {
        // Node 3: tree 0 leaf (parent 2, as its child 1), tree 1 inner (parent 7 as its child 1,
        // children 5 and 1): no tree peer is a ring peer. GDR off, GPU j: ring 2 + 2, channel j
        // parent 1 + 1, channel j + 8 parent and child-1 edges 2 + 2, as GPU j - 1's treeIntra[1]
        // the child-0 edge on NIC j - 1, 1 + 1: 6 sends, 6 receives.
        assert_eq!(dtree(16, 3), [(2, -1, -1, 1), (7, 5, 1, 1)]);
        let e = estimate(&Inputs::new(16, 8, 8));
        assert_eq!(e.busiest_node, 3);
        let per_rank = 6 * SEND_HOST + 6 * RECV_HOST + 2 * PAGE;
        assert_eq!(per_rank, 120_209_408);
        assert_eq!((e.per_rank_max_bytes, e.per_node_bytes), (per_rank, 8 * per_rank));
        // dma-buf: the exit's ring sends and the child-0 send by PXN on GPU j; the child-0
        // receive on NIC j - 1 without GPUDirect.
        let mut i = Inputs::new(16, 8, 8);
        i.gdr = GdrMode::Dmabuf;
        let e = estimate(&i);
        let r = rank(&e, 0);
        assert_eq!(r.tree, Counts { sends: 0, sends_gdr: 4, receives: 1, receives_gdr: 3 });
        let per_rank = 6 * SEND_DMABUF + 5 * RECV_DMABUF + RECV_HOST + 2 * PAGE;
        assert_eq!(per_rank, 17_383_424);
        assert_eq!((e.per_rank_max_bytes, e.per_node_bytes), (per_rank, 8 * per_rank));
    }

    #[test]
    fn case_f_one_node_registers_nothing() {
        let e = estimate(&Inputs::new(1, 8, 8));
        assert_eq!((e.per_rank_max_bytes, e.per_node_bytes), (0, 0));
    }

    #[test]
    fn case_g_all_to_all_adds_connections_and_pools() {
        let mut i = Inputs::new(2, 8, 8);
        i.p2p = Some(P2p { channels: 32, channels_per_peer: 2, chunk: 131_072, ll_buffers: false, shared: true });
        let e = estimate(&i);
        // 8 remote peers x 2 channels: 16 sends (37 + 40 pages) and 16 receives (45 + 65), two
        // 64 MiB pools; doorbells for 38 connections on NIC k (114 records, 2 pages) and 2 on NIC
        // k - 1 (1 page).
        let p2p = 16 * 77 * PAGE + 16 * 110 * PAGE + 2 * 32 * 16 * 131_072;
        assert_eq!(e.per_rank_max_bytes, 4 * SEND_HOST + 4 * RECV_HOST + p2p + 3 * PAGE);
        assert_eq!(e.per_rank_max_bytes, 226_619_392);
    }

    #[test]
    fn case_h_one_gpu_per_node_connects_pat() {
        let e = estimate(&Inputs::new(4, 1, 1));
        assert_eq!(e.scenarios[1].algorithms, "ring + tree + pat");
        // 4 nodes, 1 GPU, 1 NIC, 4 channels: PAT connects to the nodes 1 and 2 away in both
        // directions, so on every channel the GPU sends to and receives from all 3 others; with
        // the ring and the tree, 6 connections a channel, 24 in all (72 records, 2 pages).
        let r = rank(&e, 0);
        assert_eq!(r.ring.total() + r.tree.total() + r.pat.total(), 24);
        let per_rank = 4 * (3 * SEND_HOST + 3 * RECV_HOST) + 2 * PAGE;
        assert_eq!(per_rank, 240_410_624);
        assert_eq!(e.per_rank_max_bytes, per_rank);
        assert_eq!(e.scenarios[0].per_rank_max_bytes, 4 * (SEND_HOST + RECV_HOST) + PAGE, "ring only");
        let mut no_pat = Inputs::new(4, 1, 1);
        no_pat.pat = false;
        // Node 1 without PAT: channels 0-1 (tree 0, a leaf): the ring's send is the tree's, the
        // tree's receive from node 2 is new; channels 2-3 (tree 1, inner): 2 sends, 2 receives new.
        assert_eq!(dtree(4, 1)[0].0, 2);
        let e = estimate(&no_pat);
        assert_eq!(e.scenarios[1].algorithms, "ring + tree");
        assert_eq!(e.per_rank_max_bytes, 8 * SEND_HOST + 10 * RECV_HOST + PAGE);
    }

    #[test]
    fn merged_nics_and_communicators_multiply_what_they_should() {
        let base = estimate(&Inputs::new(2, 8, 8));
        let mut i = Inputs::new(2, 8, 8);
        i.communicators = 3;
        assert_eq!(estimate(&i).per_rank_max_bytes, 3 * base.per_rank_max_bytes);
        let mut merged = Inputs::new(2, 8, 8);
        merged.devices_per_nic = 2;
        let e = estimate(&merged);
        // Every registration and queue twice for VmPin; the buffers' memory once.
        assert_eq!(e.per_rank_max_bytes, 2 * base.per_rank_max_bytes);
        let data_once = (4 + 4) * 9_633_792;
        assert_eq!(e.ranks[0].host_bytes, e.per_rank_max_bytes - data_once);
    }

    #[test]
    fn doorbell_pages_per_device_context() {
        let mut i = Inputs::new(2, 1, 1);
        i.channels = Channels::given(64, 32);
        let held = place(&i, 0, BOTH);
        // 64 channels x a ring send and receive (the tree reuses them): 128 connections x 3
        // records / 64 per page = 6 pages; per member of a merged NIC.
        assert_eq!(held[0].per_nic, vec![[128, 0, 0, 0]]);
        assert_eq!(doorbell_pages(&i, &held[0], BOTH), 6);
        i.devices_per_nic = 2;
        assert_eq!(doorbell_pages(&i, &held[0], BOTH), 12);
        let held = place(&Inputs { channels: Channels::given(64, 32), ..Inputs::new(4, 1, 1) }, 1, BOTH);
        // Four nodes: the tree's new connections need pages of their own.
        assert!(doorbell_pages(&i, &held[0], BOTH) > doorbell_pages(&i, &held[0], RING));
    }

    /// Placing one node per kind (node_key) finds the same busiest rank and node as placing them all.
    #[test]
    fn one_node_per_kind_is_every_node() {
        for nodes in 2..34 {
            for (g, n) in [(1, 1), (2, 1), (8, 8), (8, 2)] {
                let mut i = Inputs::new(nodes, g, n);
                i.channels = Channels::given(8, 4);
                let e = estimate(&i);
                let (_, all) = algorithms(&i);
                let mut rank_max = 0;
                let mut node_max = 0;
                for node in 0..nodes {
                    let needs: Vec<u64> =
                        place(&i, node, &all).iter().map(|h| rank_need(&i, h, &all).memlock).collect();
                    rank_max = rank_max.max(needs.iter().copied().max().unwrap_or(0));
                    node_max = node_max.max(needs.iter().sum::<u64>());
                }
                assert_eq!((e.per_rank_max_bytes, e.per_node_bytes), (rank_max, node_max), "{nodes} x {g} x {n}");
            }
        }
    }
}
