//! Which network connections each rank holds: the ring, tree and PAT places per channel, each
//! connector to a peer counted once however many algorithms use it.

use serde::Serialize;

use super::{Inputs, MAX_LOCAL_RANKS, MAX_NICS};
use memlock_core::gdr::GdrMode;

/// A node's place in one tree: parent, child 0, child 1 (-1: none), and whether it is its
/// parent's child 0 or child 1 (-1 for the root).
pub(crate) type TreePlace = (i64, i64, i64, i64);

/// ncclGetBtree (src/graph/trees.cc), as NCCL writes it.
pub(crate) fn btree(nranks: i64, rank: i64) -> TreePlace {
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
pub(crate) fn dtree(nranks: i64, rank: i64) -> [TreePlace; 2] {
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
    pub(super) fn index(self) -> usize {
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
pub(super) enum Direction {
    Send,
    Recv,
}

/// Connections of one kind a rank holds: how many, in which direction, with GPUDirect or not.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub sends: u64,
    pub(crate) sends_gdr: u64,
    pub receives: u64,
    pub(crate) receives_gdr: u64,
}

impl Counts {
    pub(super) fn add(&mut self, dir: Direction, gdr: bool, n: u64) {
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
pub(super) struct Held {
    pub(super) ring: Counts,
    pub(super) tree: Counts,
    pub(super) pat: Counts,
    pub(super) p2p: Counts,
    /// Connections per NIC (for the doorbell pages, per device context), by Algorithm::index.
    pub(super) per_nic: Vec<[u64; 4]>,
    /// The shared p2p pools this rank's process registers: (NIC, send pools, receive pools), one
    /// pool per origin rank and direction, each registered once per device.
    pub(super) p2p_pools: Vec<(u64, u64, u64)>,
    /// Send pools on the host whatever the GPUDirect mode: a sender's pool registered on a NIC its
    /// GPU is not local to (no GPUDirect there, so the host pool: net.cc sharedNetBuffersInit).
    pub(super) p2p_host_send_pools: u64,
}

/// The GPUs a NIC is local to: NIC k serves ranks floor(kG/N) .. floor((k+1)G/N) - 1 (GPUs spread
/// evenly over the NICs; with more NICs than GPUs each NIC has the one GPU floor(kG/N)).
pub(super) fn group(k: u64, g: u64, n: u64) -> (u64, u64) {
    let first = k * g / n;
    let end = ((k + 1) * g / n).max(first + 1);
    (first, end)
}

pub(super) fn nic_local(rank: u64, k: u64, g: u64, n: u64) -> bool {
    let (first, end) = group(k, g, n);
    (first..end).contains(&rank)
}

/// The NIC of a GPU's rail: the first NIC it is local to (ncclTopoGetLocalNet, channel 0).
pub(super) fn rail(rank: u64, g: u64, n: u64) -> u64 {
    (0..n).find(|k| nic_local(rank, *k, g, n)).unwrap_or(0)
}

/// All-to-all: every rank sends to and receives from every rank of the other nodes, on
/// channels_per_peer channels (connIndex 1: never one of the ring, tree or PAT connections).
///
/// With PXN (NCCL_P2P_PXN_LEVEL at its default 2, src/graph/search.cc ncclTopoGetNetDev without a
/// graph), a send to remote GPU j goes over the NIC of j's rail, registered by the process of the
/// first local GPU on that NIC (ncclTopoGetLocalGpu) when it reaches the sender over NVLink:
/// that proxy registers it (net.cc sendSetup: proxyRank). NVLink between all GPUs is assumed (an
/// NVSwitch node). The proxy's buffers must be on the GPU (net.cc sharedNetBuffersInit: "PXN
/// should not use host buffers for data"), so without GPUDirect for sends every rank sends from
/// its own process on its own NIC. Receives are never proxied (recvSetup), each on the rank's NIC.
///
/// With NCCL_NET_SHARED_COMMS (default 1; IB's maxRecvs 8 > 1), a proxy opens one connection per
/// NIC, remote rank and channel for all the local ranks that send there (sendProxyConnect:
/// netComms[netDev][tpRemoteRank].sendComm[channelId]), and a receiver one per NIC, remote proxy
/// rank and channel (recvProxyConnect: tpRemoteProxyRank). On how many channels a node's senders
/// reach one peer depends on the release's p2p schedule ([`super::version::peer_channels`]):
/// with at most 8 ranks per node, on the same channels_per_peer.
///
/// Pools (sharedNetBuffersInit): one per origin rank and direction in the registering process,
/// p2pnChannels x NCCL_SHARED_STEPS x chunk bytes: a proxy holds a send pool for every local rank
/// that sends through it, a receiver its own receive pool.
fn place_p2p(i: &Inputs, p2p: &super::P2p, g: u64, n: u64, held: &mut [Held]) {
    let nodes = i.nodes.max(1);
    let remote_nodes = nodes - 1;
    let gdr = i.gdr != GdrMode::Off;
    let send_gdr = gdr && i.gdr_read;
    let pxn = p2p.pxn && i.pxn && send_gdr && g > 1;
    let shared_comms = p2p.shared && p2p.shared_comms;
    let per_peer = p2p.channels_per_peer;
    // Connections to one remote rank (or from one remote proxy) from the senders sharing them.
    let shared = super::version::peer_channels(i.nccl_version, g, p2p.channels, per_peer);
    let mut put = |rank: u64, dir: Direction, nic: u64, on_gpu: bool, count: u64| {
        let h = &mut held[rank as usize];
        let slot = &mut h.per_nic[nic as usize][Algorithm::P2p.index()];
        *slot = slot.saturating_add(count);
        h.p2p.add(dir, on_gpu, count);
    };
    let mut pools = vec![Vec::new(); g as usize];
    let mut host_send_pools = vec![0u64; g as usize];
    for rank in 0..g {
        let k = rail(rank, g, n);
        // Receives: one per remote proxy (every remote sender when there is no PXN) and channel.
        let recv_each = if pxn && shared_comms { shared } else { g.saturating_mul(per_peer) };
        put(rank, Direction::Recv, k, gdr, remote_nodes.saturating_mul(recv_each));
        pools[rank as usize].push((k, 0, 1));
        if pxn {
            continue;
        }
        if !p2p.rail_nic {
            put(rank, Direction::Send, k, send_gdr, remote_nodes.saturating_mul(g).saturating_mul(per_peer));
            pools[rank as usize][0].1 = 1;
            continue;
        }
        // NCCL_CROSS_NIC=0 without a proxy (search.cc ncclTopoGetNetDev: the device of the local
        // GPU with the peer's index is taken before the PXN test, and kept when no proxy is
        // found): the sender's own process sends to remote GPU j through j's rail, with
        // GPUDirect only where its GPU is local to that NIC (paths.cc ncclTopoCheckGdr), and
        // registers its send pool once on each NIC it uses (the MR cache is per device).
        let mut used = vec![false; n as usize];
        for j in 0..g {
            let m = rail(j, g, n);
            let near = nic_local(rank, m, g, n);
            put(rank, Direction::Send, m, send_gdr && near, remote_nodes.saturating_mul(per_peer));
            if std::mem::replace(&mut used[m as usize], true) {
                continue;
            }
            if m == k {
                pools[rank as usize][0].1 = 1;
            } else if near {
                pools[rank as usize].push((m, 1, 0));
            } else {
                host_send_pools[rank as usize] += 1;
            }
        }
    }
    if pxn {
        for k in 0..n {
            let (proxy, _) = group(k, g, n);
            let on_rail = (0..g).filter(|j| rail(*j, g, n) == k).count() as u64;
            if on_rail == 0 || proxy >= g {
                continue;
            }
            let each = if shared_comms { shared } else { g.saturating_mul(per_peer) };
            put(proxy, Direction::Send, k, true, remote_nodes.saturating_mul(on_rail).saturating_mul(each));
            let list = &mut pools[proxy as usize];
            match list.iter_mut().find(|(nic, _, _)| *nic == k) {
                Some(entry) => entry.1 = g,
                None => list.push((k, g, 0)),
            }
        }
    }
    for ((h, p), host) in held.iter_mut().zip(pools).zip(host_send_pools) {
        h.p2p_pools = p;
        h.p2p_host_send_pools = host;
    }
}

/// One network connection of a rank, as NCCL keys it: a channel's connector to one peer rank in
/// one direction (connIndex 0 for ring, tree and PAT). A second algorithm asking for the same one
/// reuses it (src/transport.cc ncclTransportP2pConnect skips `connected` connectors).
pub(super) type ConnKey = (u64, u64, Direction, u64, u64);

/// Places every network connection of node `node` on the rank whose process registers it, each
/// once: the first algorithm that needs it (ring, then tree, then PAT) owns it.
pub(super) fn place(i: &Inputs, node: u64, algorithms: &[Algorithm]) -> Vec<Held> {
    place_logged(i, node, algorithms, &mut Vec::new())
}

/// [`place`], recording each connection with the algorithm that made it.
pub(super) fn place_logged(
    i: &Inputs,
    node: u64,
    algorithms: &[Algorithm],
    log: &mut Vec<(Algorithm, ConnKey)>,
) -> Vec<Held> {
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
        // ncclTopoSearchCheckNet). treeIntra[1] is the next GPU of the NIC's group. When no
        // second GPU shares the NIC's PCIe switch, the balanced search finds no perfect solution
        // (the second GPU reaches the NIC only across another switch) and on sm90 and later
        // ncclTopoCompute tries "a simpler tree" first (search.cc: ccMin >= 90,
        // NCCL_TOPO_PATTERN_TREE), which is perfect: child 0 is then treeIntra[0] too
        // (connect.cc ncclTopoPreset: child0Index 0), every edge on the NIC's own GPU. With one
        // GPU per node the pattern is NCCL_TOPO_PATTERN_TREE anyway. Before sm90 the balanced
        // tree stays: treeIntra[1] is the chain's next GPU, on another NIC's PCIe switch.
        // connectTrees: the parent edge goes to the parent node's treeToChild<child type>, a child
        // edge to the child node's treeToParent; each edge is a send and a receive
        // (generic.cc ncclTransportTreeConnect).
        if algorithms.contains(&Algorithm::Tree) {
            let second = match (end - first >= 2, i.simpler_tree) {
                (true, _) => first + 1,
                (false, true) => first,
                (false, false) => (first + 1) % g,
            };
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
        place_p2p(i, p2p, g, n, &mut held);
    }
    held
}
