#!/usr/bin/env python3
"""Writes tests/fixtures/nccl-logs/*.log: NCCL_DEBUG=INFO logs of reference layouts, line by line
from NCCL's format strings (NVIDIA/nccl v2.21.5-1 unless said), for the layouts NCCL's own rules
give, derived here independently of the model (crates/preflight/src/nccl/model) so a test can hold the
two against each other.

Layout rules (NVIDIA/nccl, as cited in the model and docs/check.md):
- Channels: one search channel per NIC, doubled by ncclTopoDupChannels when at most 4, then by
  ncclTopoPostset: 16 channels on 8 NICs, 4 on 1; channel c uses NIC c % S % N (src/graph/search.cc,
  src/graph/connect.cc). A NIC's GPUs: ranks kG/N .. (k+1)G/N - 1, the first its closest.
- Ring (connect.cc ncclTopoPreset): a channel enters a node at its NIC's first GPU and leaves it from
  the NIC's last GPU (with one GPU per NIC, the next GPU), which sends to the next node's entry GPU.
- Tree (connect.cc ncclTopoPostset, src/graph/trees.cc ncclGetDtree): channels c < S follow tree 0,
  the rest tree 1; on 2 nodes node 0 is tree 0's root and tree 1's child; each edge joins the NIC's
  first GPU of both nodes (treeIntra[0]), a send and a receive each way.
- A connector is set up once per channel, peer and connIndex (src/transport.cc), each printed by
  net.cc sendSetup / recvSetup: "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s".
- All-to-all (v2.29.7-1): every rank sends to and receives from every rank of the other node on
  connIndex 1 with shared buffers ("/Shared"), on p2pnChannelsPerPeer channels
  (base + part) & (p2pnChannels - 1) (src/include/device.h ncclP2pChannelForPart), the base the
  reversed bits of the group delta's ordinal in the schedule (src/init.cc, groups of 8 ranks:
  one per node; src/include/channel.h ncclP2pChannelBaseForRound). A send to remote GPU j goes
  over the NIC of j's rail, from the first local GPU of that NIC (PXN level 2,
  src/graph/search.cc ncclTopoGetNetDev): sendSetup prints "NET/%s/%d(%d)%s%s%s" with the proxy's
  rank when it is not the sender. Receives use the receiver's own NIC.
- Trees over more nodes (src/graph/trees.cc ncclGetBtree, ncclGetDtree, ported below): on sm90
  with one GPU per NIC switch the tree graph is NCCL_TOPO_PATTERN_TREE (search.cc ncclTopoCompute,
  "Try a simpler tree"), so the parent and both child edges are on the NIC's GPU (connect.cc
  ncclTopoPreset, child0Index 0). With GPUDirect a ring exit GPU beyond the NIC's switch sends
  through the NIC's GPU (PXN: "NET/%s/%d(%d)").

Run from the repository root: /usr/bin/python3 scripts/nccl_log_fixtures.py
"""

import math
import os

OUT = "tests/fixtures/nccl-logs"
NODES, GPUS = 2, 8
# Set per layout by main(): NICs per node and the channels NCCL runs on them.
NICS, CHANNELS = 8, 16
HOSTS = ["gpu-a01", "gpu-a02", "gpu-a03", "gpu-a04"]


def pid(node, gpu):
    return 41000 + 100 * node + gpu


def prefix(node, gpu, tid_offset=0):
    # src/debug.cc ncclDebugLog: "%s:%d:%d [%d] NCCL INFO "
    return f"{HOSTS[node]}:{pid(node, gpu)}:{pid(node, gpu) + 17 + tid_offset} [{gpu}]"


def info(node, gpu, msg, tid_offset=0):
    return f"{prefix(node, gpu, tid_offset)} NCCL INFO {msg}"


def rank(node, gpu):
    return node * GPUS + gpu


def net(c, frm, to, direction, dev):
    # src/transport/net.cc (v2.21.5-1) sendSetup/recvSetup, GPUDirect off, no shared buffers.
    (fn, fg), (tn, tg) = frm, to
    return f"Channel {c:02d}/0 : {rank(fn, fg)}[{fg}] -> {rank(tn, tg)}[{tg}] [{direction}] via NET/IB/{dev}"


def search():
    return NICS * 2 if NICS <= 4 else NICS


def entry_exit(c):
    """The channel's NIC, the GPU the ring enters at and the one it leaves from."""
    k = c % search() % NICS
    first, end = k * GPUS // NICS, max((k + 1) * GPUS // NICS, k * GPUS // NICS + 1)
    last = end - 1 if end - first >= 2 else (first + 1) % GPUS
    return k, first, last


def ring(node):
    """Per GPU of `node`, the ring's lines in the order recvSetup then sendSetup."""
    other = 1 - node
    lines = {g: [] for g in range(GPUS)}
    for c in range(CHANNELS):
        k, first, last = entry_exit(c)
        lines[first].append(net(c, (other, last), (node, first), "receive", k))
        lines[last].append(net(c, (node, last), (other, first), "send", k))
    return lines


def tree(node):
    other = 1 - node
    lines = {g: [] for g in range(GPUS)}
    for c in range(CHANNELS):
        k, first, _ = entry_exit(c)
        lines[first].append(net(c, (other, first), (node, first), "receive", k))
        lines[first].append(net(c, (node, first), (other, first), "send", k))
    return lines


def interleave(per_rank):
    """Round-robin over ranks, as concurrent writers to one stream interleave whole lines."""
    out, queues = [], [list(q) for q in per_rank]
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def head(launcher):
    lines = [launcher(0, 0, info(0, 0, "Bootstrap : Using ib0:10.1.0.1<0>"))]
    lines.append(launcher(0, 0, info(0, 0, "NCCL version 2.21.5+cuda12.4")))
    for node in range(NODES):
        for g in range(GPUS):
            lines.append(launcher(node, g, info(node, g, "NCCL_IB_HCA set by environment to mlx5")))
            devs = "".join(f" [{d}]mlx5_{d}:1/IB" for d in range(NICS))
            # net_ib.cc ncclIbInit: "NET/IB : Using%s %s; OOB %s:%s"
            lines.append(launcher(node, g, info(node, g, f"NET/IB : Using{devs} ; OOB ib0:10.1.0.{node + 1}<0>")))
            lines.append(launcher(node, g, info(node, g, "Using network IB")))
    return lines


def complete(node, g):
    # init.cc ncclCommInitRankFunc (v2.21.5-1).
    return info(
        node,
        g,
        f"ncclCommInitRank comm 0x55d0c{node}a{g}b0 rank {rank(node, g)} nranks {NODES * GPUS} cudaDev {g} "
        f"nvmlDev {g} busId {0x18 + 0x10 * g:x}000 commId 0x5a1e7f2c09b3d441 - Init COMPLETE",
    )


def mpirun(node, g, line):
    return f"[1,{rank(node, g)}]<stdout>:{line}"


def slurm(node, g, line):
    return f"{rank(node, g)}: {line}"


def net29(c, conn_index, frm, to, direction, dev, proxy=None, shared=False):
    # src/transport/net.cc (v2.29.7-1) sendSetup / recvSetup with GPUDirect:
    # "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s%s" ("/GDRDMA", "(PCI)" for PCI
    # mode only, "/Shared"), and "NET/%s/%d(%d)%s%s%s" for a send another rank's proxy sets up.
    (fn, fg), (tn, tg) = frm, to
    dev_s = f"{dev}" if proxy is None else f"{dev}({proxy})"
    tail = "/GDRDMA" + ("/Shared" if shared else "")
    ends = f"{rank(fn, fg)}[{fg}] -> {rank(tn, tg)}[{tg}]"
    return f"Channel {c:02d}/{conn_index} : {ends} [{direction}] via NET/IB/{dev_s}{tail}"


def reverse_bits(x, bits):
    return int(format(x, f"0{bits}b")[::-1], 2) if bits else 0


def p2p_channel_ids(sender, receiver, p2p_channels, per_peer):
    """The channels of a send from `sender` to `receiver` (node, gpu), the p2p schedule's way."""
    group_size = 8 if GPUS % 8 == 0 else math.gcd(8, GPUS)
    n_groups = NODES * GPUS // group_size
    pow2 = 1
    while pow2 < n_groups:
        pow2 <<= 1
    order, delta, rnd = [], 0, 0
    while True:
        if delta < n_groups:
            order.append(delta)
        rnd += 1
        delta = (delta + rnd) & (pow2 - 1)
        if rnd == pow2:
            break
    g_from = (sender[0] * GPUS + sender[1]) // group_size
    g_to = (receiver[0] * GPUS + receiver[1]) // group_size
    local_delta = (receiver[1] - sender[1]) % group_size
    base = order.index((g_to - g_from) % n_groups) * -(-group_size // 8) + local_delta // 8
    bits = p2p_channels.bit_length() - 1
    return [(reverse_bits(base, bits) + part) & (p2p_channels - 1) for part in range(per_peer)]


def group_of(g):
    """The NIC a GPU is local to: NIC k has GPUs kG/N .. (k+1)G/N - 1."""
    for k in range(NICS):
        first, end = k * GPUS // NICS, max((k + 1) * GPUS // NICS, k * GPUS // NICS + 1)
        if first <= g < end:
            return k, first
    return 0, 0


def alltoall(node, p2p_channels=16, per_peer=4):
    """Per GPU of `node`, its all-to-all lines (PXN at level 2, shared buffers, GPUDirect)."""
    other = 1 - node
    lines = {g: [] for g in range(GPUS)}
    for i in range(GPUS):
        for j in range(GPUS):
            k, proxy_gpu = group_of(j)
            proxy = rank(node, proxy_gpu)
            for c in p2p_channel_ids((node, i), (other, j), p2p_channels, per_peer):
                shown = None if proxy == rank(node, i) else proxy
                lines[i].append(net29(c, 1, (node, i), (other, j), "send", k, shown, True))
            own, _ = group_of(i)
            for c in p2p_channel_ids((other, j), (node, i), p2p_channels, per_peer):
                lines[i].append(net29(c, 1, (other, j), (node, i), "receive", own, None, True))
    return lines


def ring29(node):
    other = 1 - node
    lines = {g: [] for g in range(GPUS)}
    for c in range(CHANNELS):
        k, first, last = entry_exit(c)
        lines[first].append(net29(c, 0, (other, last), (node, first), "receive", k))
        lines[last].append(net29(c, 0, (node, last), (other, first), "send", k))
    return lines


def tree29(node):
    other = 1 - node
    lines = {g: [] for g in range(GPUS)}
    for c in range(CHANNELS):
        k, first, _ = entry_exit(c)
        lines[first].append(net29(c, 0, (other, first), (node, first), "receive", k))
        lines[first].append(net29(c, 0, (node, first), (other, first), "send", k))
    return lines


def btree(nranks, rank_):
    bit = 1
    while bit < nranks:
        if bit & rank_:
            break
        bit <<= 1
    if rank_ == 0:
        return -1, -1, (bit >> 1) if nranks > 1 else -1, -1
    up = (rank_ ^ bit) | (bit << 1)
    if up >= nranks:
        up = rank_ ^ bit
    child_type = 1 if rank_ >= up else 0
    lowbit = bit >> 1
    down0 = -1 if lowbit == 0 else rank_ - lowbit
    down1 = -1 if lowbit == 0 else rank_ + lowbit
    while down1 >= nranks:
        down1 = -1 if lowbit == 0 else rank_ + lowbit
        lowbit >>= 1
    return up, down0, down1, child_type


def dtree(nranks, rank_):
    t0 = btree(nranks, rank_)
    if nranks % 2 == 1:
        u, d0, d1, ct = btree(nranks, (rank_ - 1 + nranks) % nranks)
        shift = lambda x: -1 if x == -1 else (x + 1) % nranks
        return t0, (shift(u), shift(d0), shift(d1), ct)
    u, d0, d1, ct = btree(nranks, nranks - 1 - rank_)
    mirror = lambda x: -1 if x == -1 else nranks - 1 - x
    return t0, (mirror(u), mirror(d0), mirror(d1), ct)


def simple_tree_lines(node):
    """Ring and (simpler) tree lines of `node` on NODES nodes, GPUDirect, each connector once."""
    lines = {g: [] for g in range(GPUS)}
    seen = set()
    nxt, prv = (node + 1) % NODES, (node - 1) % NODES

    def add(c, g, direction, peer, k):
        key = (c, g, direction, peer)
        if key in seen:
            return
        seen.add(key)
        me = (node, g)
        _, first = group_of(g)
        proxy = None
        if direction == "send" and group_of(g)[0] != k:
            proxy = rank(node, k * GPUS // NICS)
        frm, to = (me, peer) if direction == "send" else (peer, me)
        lines[g].append(net29(c, 0, frm, to, direction, k, proxy))

    trees = dtree(NODES, node)
    for c in range(CHANNELS):
        k, first, last = entry_exit(c)
        add(c, first, "receive", (prv, last), k)
        add(c, last, "send", (nxt, first), k)
    for c in range(CHANNELS):
        k, first, _ = entry_exit(c)
        up, d0, d1, _ = trees[0 if c < search() else 1]
        for peer in (up, d0, d1):
            if peer != -1:
                add(c, first, "send", (peer, first), k)
                add(c, first, "receive", (peer, first), k)
    return lines


def simple_tree_log():
    """4 nodes x 8 GPUs x 8 NICs (one GPU per NIC switch), sm90, GPUDirect, NCCL 2.29."""
    lines = [mpirun(0, 0, info(0, 0, "NCCL version 2.29.7+cuda12.9"))]
    per_rank = []
    for node in range(NODES):
        p = simple_tree_lines(node)
        per_rank += [[mpirun(node, g, info(node, g, l, 1)) for l in p[g]] for g in range(GPUS)]
    lines += interleave(per_rank)
    lines += [mpirun(n, g, complete(n, g)) for n in range(NODES) for g in range(GPUS)]
    return lines


def alltoall_log():
    """2 nodes x 8 GPUs x 4 NICs with GPUDirect, NCCL 2.29: ring, tree, then all-to-all."""
    lines = [mpirun(0, 0, info(0, 0, "NCCL version 2.29.7+cuda12.9"))]
    for part in (ring29, tree29, alltoall):
        per_rank = []
        for node in range(NODES):
            p = part(node)
            per_rank += [[mpirun(node, g, info(node, g, l, 1)) for l in p[g]] for g in range(GPUS)]
        lines += interleave(per_rank)
    lines += [mpirun(n, g, complete(n, g)) for n in range(NODES) for g in range(GPUS)]
    return lines


def ok_log():
    lines = head(mpirun)
    for part in (ring, tree):
        per_rank = []
        for node in range(NODES):
            p = part(node)
            per_rank += [[mpirun(node, g, info(node, g, l, 1)) for l in p[g]] for g in range(GPUS)]
        lines += interleave(per_rank)
    lines += [mpirun(n, g, complete(n, g)) for n in range(NODES) for g in range(GPUS)]
    return lines


def enomem_log():
    """The same job, rank 13 (node 1, GPU 5) at 8 MiB: the ring's connectors are set up, then its
    proxy's first registration fails (recvProxyConnect, net.cc:926 regMr -> net_ib.cc:1419)."""
    lines = head(slurm)
    per_rank = []
    for node in range(NODES):
        p = ring(node)
        per_rank += [[slurm(node, g, info(node, g, l, 1)) for l in p[g]] for g in range(GPUS)]
    lines += interleave(per_rank)
    failing = (1, 5)
    warn = f"{prefix(*failing, 2)} misc/ibvwrap.cc:169 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot " \
        "allocate memory"
    # ncclDebugLog starts a WARN with a newline: srun --label tags that empty line too.
    lines += [slurm(*failing, ""), slurm(*failing, warn)]
    # NCCLCHECK's trail (src/include/checks.h: "%s:%d -> %d"), the two calls named above.
    for where in ["transport/net_ib.cc:1419", "transport/net.cc:926"]:
        lines.append(slurm(*failing, info(*failing, f"{where} -> 2", 2)))
    return lines


def main():
    global NICS, CHANNELS, NODES
    os.makedirs(OUT, exist_ok=True)
    written = [("2x8x8-ring-tree-v2.21.log", ok_log()), ("2x8x8-enomem-v2.21.log", enomem_log())]
    NICS, CHANNELS = 1, 4
    written.append(("2x8x1-ring-tree-v2.21.log", ok_log()))
    NICS, CHANNELS = 4, 16
    written.append(("2x8x4-alltoall-pxn-v2.29.log", alltoall_log()))
    NODES, NICS, CHANNELS = 4, 8, 16
    written.append(("4x8x8-simple-tree-v2.29.log", simple_tree_log()))
    for name, lines in written:
        with open(os.path.join(OUT, name), "w") as f:
            f.write(f"# Written by scripts/nccl_log_fixtures.py from NCCL's format strings; {name}\n")
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
