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

Run from the repository root: /usr/bin/python3 scripts/nccl_log_fixtures.py
"""

import os

OUT = "tests/fixtures/nccl-logs"
NODES, GPUS = 2, 8
# Set per layout by main(): NICs per node and the channels NCCL runs on them.
NICS, CHANNELS = 8, 16
HOSTS = ["gpu-a01", "gpu-a02"]


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
    global NICS, CHANNELS
    os.makedirs(OUT, exist_ok=True)
    written = [("2x8x8-ring-tree-v2.21.log", ok_log()), ("2x8x8-enomem-v2.21.log", enomem_log())]
    NICS, CHANNELS = 1, 4
    written.append(("2x8x1-ring-tree-v2.21.log", ok_log()))
    for name, lines in written:
        with open(os.path.join(OUT, name), "w") as f:
            f.write(f"# Written by scripts/nccl_log_fixtures.py from NCCL's format strings; {name}\n")
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
