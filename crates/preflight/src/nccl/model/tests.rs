//! The model against NCCL's figures and the worked cases of docs/check.md.

use super::connections::{btree, place_logged, ConnKey};
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
    // (The balanced tree, before sm90.)
    assert_eq!(dtree(4, 1)[1], (3, 2, 0, 1));
    let held = place(&balanced(Inputs::new(4, 8, 8)), 1, BOTH);
    assert_eq!(held[1].tree, Counts { sends: 3, receives: 4, ..Default::default() });
    // sm90, one GPU per NIC switch: the simpler tree puts child 0 on GPU k too, where the ring's
    // peers never are: 4 sends and 4 receives of GPU k's own, none on GPU k + 1.
    let held = place(&Inputs::new(4, 8, 8), 1, BOTH);
    assert_eq!(held[1].tree, Counts { sends: 4, receives: 4, ..Default::default() });
    assert!(held.iter().all(|h| h.tree == Counts { sends: 4, receives: 4, ..Default::default() }));
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
    // 1 it is node 1's child 0. The balanced tree (before sm90), so that a tree edge is on a
    // GPU beyond the NIC's switch.
    assert_eq!(dtree(4, 2), [(0, 1, 3, 1), (1, -1, -1, 0)]);
    let mut i = balanced(Inputs::new(4, 8, 8));
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
    i.p2p = Some(P2p { ll_buffers: true, ..P2p::nccl_defaults(u64::MAX, u64::MAX, u64::MAX) });
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

/// A GPU before sm90 (A100): the tree keeps its balanced pattern where a NIC has one GPU.
fn balanced(mut i: Inputs) -> Inputs {
    i.simpler_tree = false;
    i
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
    let e = estimate(&balanced(Inputs::new(4, 8, 8)));
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
    let mut i = balanced(Inputs::new(4, 8, 8));
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
    let e = estimate(&balanced(Inputs::new(16, 8, 8)));
    assert_eq!(e.busiest_node, 3);
    let per_rank = 6 * SEND_HOST + 6 * RECV_HOST + 2 * PAGE;
    assert_eq!(per_rank, 120_209_408);
    assert_eq!((e.per_rank_max_bytes, e.per_node_bytes), (per_rank, 8 * per_rank));
    // dma-buf: the exit's ring sends and the child-0 send by PXN on GPU j; the child-0
    // receive on NIC j - 1 without GPUDirect.
    let mut i = balanced(Inputs::new(16, 8, 8));
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
    i.p2p = Some(P2p::nccl_defaults(32, 2, 131_072));
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
                let needs: Vec<u64> = place(&i, node, &all).iter().map(|h| rank_need(&i, h, &all).memlock).collect();
                rank_max = rank_max.max(needs.iter().copied().max().unwrap_or(0));
                node_max = node_max.max(needs.iter().sum::<u64>());
            }
            assert_eq!((e.per_rank_max_bytes, e.per_node_bytes), (rank_max, node_max), "{nodes} x {g} x {n}");
        }
    }
}

// The third round: cases derived from NVIDIA/nccl 2.29/2.30 (src/graph/search.cc
// ncclTopoGetNetDev and ncclTopoCompute, src/graph/paths.cc ncclTopoGetNchannels and
// ncclTopoComputeP2pChannels, src/transport/net.cc sendProxyConnect, recvProxyConnect and
// sharedNetBuffersInit), each worked by hand in docs/check.md.

/// A p2p connection carries no data buffer of its own (shared pools): a send is control 37 +
/// queues 40 pages, a receive 45 + 65.
const P2P_SEND: u64 = 77 * PAGE;
const P2P_RECV: u64 = 110 * PAGE;
/// p2pnChannels 16 x NCCL_SHARED_STEPS 16 x 128 KiB.
const POOL_16: u64 = 16 * 16 * 131_072;

/// 2 nodes x 8 GPUs x 4 NICs (GPUs 2k and 2k + 1 on NIC k), all-to-all, NCCL 2.29 on 400 Gb/s
/// NICs: C = 16, p2pnChannels 16, 4 channels per network peer.
fn all_to_all_2x8x4(gdr: GdrMode) -> Inputs {
    let mut i = Inputs::new(2, 8, 4);
    i.gdr = gdr;
    let per_peer = net_channels_per_peer(Release { major: 2, minor: 29 }, 400, 16, 16, 16, None, None);
    assert_eq!(per_peer.channels, 4);
    i.p2p = Some(P2p::nccl_defaults(16, per_peer.channels, DEFAULT_P2P_CHUNKSIZE));
    i
}

#[test]
fn third_round_all_to_all_pxn_and_shared_comms_peermem() {
    let e = estimate(&all_to_all_2x8x4(GdrMode::Peermem));
    assert_eq!(e.inputs.channels.count, 16);
    // GPU 2k, next to NIC k: ring receives on its 4 channels, tree edges with node 1's GPU 2k
    // (4 + 4); p2p: as the PXN proxy of NIC k, one send per channel to each of the 2 remote GPUs
    // on rail k for all 8 local senders (shared comms): 2 x 4 = 8, a send pool per origin
    // rank (8); its own receives, one per channel from the remote proxy of rail k: 4, one pool.
    let r = rank(&e, 0);
    assert_eq!(r.p2p, Counts { sends_gdr: 8, receives_gdr: 4, ..Default::default() });
    let proxy = 4 * SEND_HOST + 8 * RECV_HOST + 8 * P2P_SEND + 4 * P2P_RECV + 9 * POOL_16 + 2 * PAGE;
    assert_eq!(proxy, 426_795_008);
    assert_eq!(r.memlock_bytes, proxy);
    // GPU 2k + 1: the ring's 4 sends; no p2p send (PXN), 4 receives and its receive pool.
    let other = rank(&e, 1);
    assert_eq!(other.p2p, Counts { receives_gdr: 4, ..Default::default() });
    assert_eq!(other.memlock_bytes, 4 * SEND_HOST + 4 * P2P_RECV + POOL_16 + PAGE);
    assert_eq!(e.per_rank_max_bytes, proxy);
    assert_eq!(e.per_node_bytes, 4 * (proxy + other.memlock_bytes));
    // Before: every rank its own 8 x 2 sends and receives and 2 pools, 199847936 B: x0.47.
    let mut old = all_to_all_2x8x4(GdrMode::Peermem);
    old.p2p = old.p2p.map(|p| P2p { channels_per_peer: 2, pxn: false, ..p });
    assert_eq!(estimate(&old).per_rank_max_bytes, 199_847_936);
}

#[test]
fn third_round_all_to_all_pxn_and_shared_comms_dmabuf() {
    let e = estimate(&all_to_all_2x8x4(GdrMode::Dmabuf));
    // The pools are GPU memory dma-buf does not charge; the connections are what is left.
    let proxy = 4 * SEND_DMABUF + 8 * RECV_DMABUF + 8 * P2P_SEND + 4 * P2P_RECV + 2 * PAGE;
    assert_eq!(proxy, 11_296_768);
    assert_eq!(e.per_rank_max_bytes, proxy);
    let other = 4 * SEND_DMABUF + 4 * P2P_RECV + PAGE;
    assert_eq!(rank(&e, 1).memlock_bytes, other);
    assert_eq!(e.per_node_bytes, 4 * (proxy + other));
    // Before: 16 sends and 16 receives per rank, 19230720 B: x1.70.
    let mut old = all_to_all_2x8x4(GdrMode::Dmabuf);
    old.p2p = old.p2p.map(|p| P2p { channels_per_peer: 2, pxn: false, shared_comms: false, ..p });
    assert_eq!(estimate(&old).per_rank_max_bytes, 19_230_720);
}

#[test]
fn third_round_all_to_all_without_pxn_or_shared_comms() {
    // NCCL_P2P_PXN_LEVEL=0: every rank sends from its own process on its own NIC, to every
    // remote rank on 4 channels; receives keyed by the remote sender: 8 x 4 each way, 2 pools.
    let mut i = all_to_all_2x8x4(GdrMode::Peermem);
    i.p2p = i.p2p.map(|p| P2p { pxn: false, ..p });
    let e = estimate(&i);
    assert_eq!(rank(&e, 1).p2p, Counts { sends_gdr: 32, receives_gdr: 32, ..Default::default() });
    // NCCL_NET_SHARED_COMMS=0 with PXN: the proxy opens one per origin rank: 2 x 8 x 4 sends;
    // receives one per remote sender: 32.
    let mut i = all_to_all_2x8x4(GdrMode::Peermem);
    i.p2p = i.p2p.map(|p| P2p { shared_comms: false, ..p });
    let e = estimate(&i);
    assert_eq!(rank(&e, 0).p2p, Counts { sends_gdr: 64, receives_gdr: 32, ..Default::default() });
    assert_eq!(rank(&e, 1).p2p, Counts { receives_gdr: 32, ..Default::default() });
    // GPUDirect off: PXN cannot use host buffers, so no proxy: as without PXN.
    let e = estimate(&all_to_all_2x8x4(GdrMode::Off));
    assert_eq!(rank(&e, 1).p2p, Counts { sends: 32, receives: 32, ..Default::default() });
}

#[test]
fn third_round_algorithm_restrictions_on_the_all_to_all_layout() {
    // NCCL_ALGO=Ring: no tree connection; GPU 2k keeps its ring receives and p2p.
    let mut ring = all_to_all_2x8x4(GdrMode::Peermem);
    ring.tree = false;
    let e = estimate(&ring);
    assert_eq!(e.scenarios[1].algorithms, "ring + p2p");
    let proxy = 4 * RECV_HOST + 8 * P2P_SEND + 4 * P2P_RECV + 9 * POOL_16 + PAGE;
    assert_eq!(rank(&e, 0).memlock_bytes, proxy);
    // NCCL_ALGO=Tree: no ring; GPU 2k + 1 holds p2p receives only.
    let mut tree = all_to_all_2x8x4(GdrMode::Peermem);
    tree.ring = false;
    let e = estimate(&tree);
    assert_eq!(e.scenarios[1].algorithms, "tree + p2p");
    assert_eq!(
        rank(&e, 0).memlock_bytes,
        4 * SEND_HOST + 4 * RECV_HOST + 8 * P2P_SEND + 4 * P2P_RECV + 9 * POOL_16 + PAGE
    );
    assert_eq!(rank(&e, 1).memlock_bytes, 4 * P2P_RECV + POOL_16 + PAGE);
}

#[test]
fn third_round_h100_one_gpu_per_nic_switch_tree_at_four_nodes_and_up() {
    // 8 GPUs x 8 NICs, sm90: the simpler tree, every edge on the NIC's GPU. dma-buf, node 1
    // (tree 0 leaf, tree 1 inner): GPU j holds the ring's 2 receives, the exit GPU j + 1's 2
    // sends by PXN, channel j's parent edge and channel j + 8's three edges, all with
    // GPUDirect: 6 sends, 6 receives, doorbells in one page.
    for nodes in [4, 8, 16, 64] {
        let mut i = Inputs::new(nodes, 8, 8);
        i.gdr = GdrMode::Dmabuf;
        let e = estimate(&i);
        let per_rank = 6 * SEND_DMABUF + 6 * RECV_DMABUF + PAGE;
        assert_eq!(per_rank, 7_745_536, "7.4 MiB, under the 8 MiB default limit");
        assert_eq!(e.per_rank_max_bytes, per_rank, "{nodes} nodes");
        assert_eq!(e.per_node_bytes, 8 * per_rank, "{nodes} nodes");
        // Before (the balanced tree): a child-0 receive on GPU j - 1 without GPUDirect: x2.19.
        if nodes == 4 {
            assert_eq!(estimate(&balanced(i)).per_rank_max_bytes, 16_932_864);
        }
    }
    // GDR off, node 1: 6 sends and 6 receives on GPU j alone (case I's figure, from 4 nodes).
    let e = estimate(&Inputs::new(4, 8, 8));
    assert_eq!(e.per_rank_max_bytes, 6 * SEND_HOST + 6 * RECV_HOST + 2 * PAGE);
}

// The fourth round: NCCL_P2P_MAX_PEERS (2.30), the p2p schedule by release, NCCL_CROSS_NIC=0
// without PXN; each worked by hand in docs/check.md.

/// K's layout on NCCL 2.30 with NCCL_MAX_P2P_NCHANNELS=4 (p2pnChannels 4, pools of 4 x 16 x 128
/// KiB = 8 MiB), the channels per peer as ncclTopoComputeP2pChannels gives them.
fn all_to_all_4_p2p_channels(max_peers: Option<u64>) -> Inputs {
    let mut i = all_to_all_2x8x4(GdrMode::Peermem);
    i.nccl_version = Release { major: 2, minor: 30 };
    let per_peer = net_channels_per_peer(i.nccl_version, 400, 16, 4, 4, None, max_peers);
    i.p2p = i.p2p.map(|p| P2p { channels: 4, channels_per_peer: per_peer.channels, ..p });
    i
}

#[test]
fn fourth_round_case_n_p2p_max_peers_keeps_channels_per_peer() {
    const POOL_4: u64 = 4 * 16 * 131_072;
    // 16 ranks, 2 batches: 4 x 2 > 4, halved to 2 per peer. GPU 2k, NIC k's proxy: 2 remote
    // GPUs on its rail x 2 channels = 4 sends, 2 receives, 9 pools; NIC k: 4 + 8 ring and tree
    // connections and 6 p2p, 54 doorbell records: 1 page.
    let e = estimate(&all_to_all_4_p2p_channels(None));
    assert_eq!(e.inputs.p2p.as_ref().map(|p| p.channels_per_peer), Some(2));
    let r = rank(&e, 0);
    assert_eq!(r.p2p, Counts { sends_gdr: 4, receives_gdr: 2, ..Default::default() });
    let halved = 4 * SEND_HOST + 8 * RECV_HOST + 4 * P2P_SEND + 2 * P2P_RECV + 9 * POOL_4 + PAGE;
    assert_eq!(halved, 198_135_808);
    assert_eq!(r.memlock_bytes, halved);
    // NCCL_P2P_MAX_PEERS=8: one batch, 4 per peer: K's connections with 8 MiB pools.
    let e = estimate(&all_to_all_4_p2p_channels(Some(8)));
    assert_eq!(e.inputs.p2p.as_ref().map(|p| p.channels_per_peer), Some(4));
    let kept = 4 * SEND_HOST + 8 * RECV_HOST + 8 * P2P_SEND + 4 * P2P_RECV + 9 * POOL_4 + 2 * PAGE;
    assert_eq!(kept, 200_302_592);
    assert_eq!(e.per_rank_max_bytes, kept);
}

#[test]
fn fourth_round_sixteen_ranks_per_node_share_channels_by_release() {
    // 2 nodes x 16 GPUs x 8 NICs (GPUs 2k, 2k + 1 on NIC k), 16 p2p channels, 4 per peer,
    // dma-buf. NIC k's proxy sends to the 2 remote GPUs of rail k for all 16 local senders: on
    // 2.30 the two schedule groups take 2 x 4 channels, on 2.27 consecutive bases 4 + 1.
    let mut i = Inputs::new(2, 16, 8);
    i.gdr = GdrMode::Dmabuf;
    i.p2p = Some(P2p::nccl_defaults(16, 4, DEFAULT_P2P_CHUNKSIZE));
    let p2p_of = |minor| {
        let mut i = i.clone();
        i.nccl_version = Release { major: 2, minor };
        rank(&estimate(&i), 0).p2p
    };
    assert_eq!(p2p_of(30), Counts { sends_gdr: 16, receives_gdr: 8, ..Default::default() });
    assert_eq!(p2p_of(27), Counts { sends_gdr: 10, receives_gdr: 5, ..Default::default() });
    assert_eq!(p2p_of(21), Counts { sends_gdr: 16, receives_gdr: 8, ..Default::default() });
}

#[test]
fn fourth_round_case_o_cross_nic_0_without_pxn_sends_on_the_peers_rail() {
    // K with NCCL_P2P_PXN_LEVEL=0 and NCCL_CROSS_NIC=0: GPU 1 (NIC 0) sends from its own process
    // to remote GPU j on NIC j / 2, 4 channels each: GPUs 0 and 1 on its own NIC with GPUDirect
    // (8), the 6 others on NICs 1 to 3 without it (24); 32 receives on NIC 0. Pools: its send
    // pool on the GPU (NIC 0), its host send pool on each of NICs 1 to 3, its receive pool.
    // Doorbells: NIC 0 4 ring + 8 + 32 connections x 3 records = 132: 3 pages; 1 on each other.
    let mut i = all_to_all_2x8x4(GdrMode::Peermem);
    i.p2p = i.p2p.map(|p| P2p { pxn: false, rail_nic: true, ..p });
    let e = estimate(&i);
    let r = rank(&e, 1);
    assert_eq!(r.p2p, Counts { sends: 24, sends_gdr: 8, receives_gdr: 32, ..Default::default() });
    let rail = 4 * SEND_HOST + 32 * P2P_SEND + 32 * P2P_RECV + 5 * POOL_16 + 6 * PAGE;
    assert_eq!(rail, 232_103_936);
    assert_eq!(r.memlock_bytes, rail);
    // NCCL_CROSS_NIC at its default 2: every send on its own NIC, 2 pools, 4 doorbell pages.
    let mut own = all_to_all_2x8x4(GdrMode::Peermem);
    own.p2p = own.p2p.map(|p| P2p { pxn: false, ..p });
    let own_nic = 4 * SEND_HOST + 32 * P2P_SEND + 32 * P2P_RECV + 2 * POOL_16 + 4 * PAGE;
    assert_eq!(own_nic, 131_432_448);
    assert_eq!(rank(&estimate(&own), 1).memlock_bytes, own_nic);
    // With PXN on, NCCL_CROSS_NIC=0 changes nothing: the proxy already sends on the peer's rail.
    let mut pxn = all_to_all_2x8x4(GdrMode::Peermem);
    pxn.p2p = pxn.p2p.map(|p| P2p { rail_nic: true, ..p });
    assert_eq!(estimate(&pxn).per_rank_max_bytes, 426_795_008);
}
