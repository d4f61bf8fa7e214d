#!/usr/bin/env python3
"""Writes tests/fixtures/nccl-logs/*.log: NCCL_DEBUG=INFO logs of reference layouts, line by line
from NCCL's format strings (NVIDIA/nccl v2.21.5-1 unless said), for the layouts NCCL's own rules
give, derived here independently of the model (src/preflight/nccl/model) so a test can hold the
two against each other.

Layout rules (NVIDIA/nccl, as cited in the model and docs/check.md):
- Channels: 8 NICs, one search channel per NIC, doubled by ncclTopoPostset: 16 channels; channel c
  uses NIC c % 8 (src/graph/search.cc, src/graph/connect.cc).
- Ring (connect.cc ncclTopoPreset): channel c enters a node at GPU k = c % 8 (the NIC's GPU) and
  leaves it from GPU k + 1, which sends to the next node's GPU k.
- Tree (connect.cc ncclTopoPostset, src/graph/trees.cc ncclGetDtree): channels c < 8 follow tree 0,
  the rest tree 1; on 2 nodes node 0 is tree 0's root and tree 1's child; each edge joins GPU k of
  both nodes (treeIntra[0]), a send and a receive each way.
- A connector is set up once per channel, peer and connIndex (src/transport.cc), each printed by
  net.cc sendSetup / recvSetup: "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s".

Run from the repository root: /usr/bin/python3 scripts/nccl_log_fixtures.py
"""

import os

OUT = "tests/fixtures/nccl-logs"
NODES, GPUS, NICS, CHANNELS = 2, 8, 8, 16
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


def ring(node):
    """Per GPU of `node`, the ring's lines in the order recvSetup then sendSetup."""
    other = 1 - node
    lines = {g: [] for g in range(GPUS)}
    for c in range(CHANNELS):
        k = c % NICS
        exit_gpu = (k + 1) % GPUS
        lines[k].append(net(c, (other, exit_gpu), (node, k), "receive", k))
        lines[exit_gpu].append(net(c, (node, exit_gpu), (other, k), "send", k))
    return lines


def tree(node):
    other = 1 - node
    lines = {g: [] for g in range(GPUS)}
    for c in range(CHANNELS):
        k = c % NICS
        lines[k].append(net(c, (other, k), (node, k), "receive", k))
        lines[k].append(net(c, (node, k), (other, k), "send", k))
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
    os.makedirs(OUT, exist_ok=True)
    for name, lines in [("2x8x8-ring-tree-v2.21.log", ok_log()), ("2x8x8-enomem-v2.21.log", enomem_log())]:
        with open(os.path.join(OUT, name), "w") as f:
            f.write(f"# Written by scripts/nccl_log_fixtures.py from NCCL's format strings; {name}\n")
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
