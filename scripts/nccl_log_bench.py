#!/usr/bin/env python3
"""Streams a synthetic NCCL_DEBUG=INFO log of SIZE bytes into `estimate --nccl-log -` and reports
the binary's peak resident memory: the reader must stay bounded however large the log.

Every line is a distinct network connection (4,096 ranks on 512 hosts, 64 channels, 64 peers,
NCCL 2.18+'s format, mpirun's tag), so the reader's connection cap is reached and passed.

    /usr/bin/python3 scripts/nccl_log_bench.py target/release/memlock-exporter 1073741824
"""

import json
import resource
import subprocess
import sys
import time


def main():
    binary, total = sys.argv[1], int(sys.argv[2])
    args = [binary, "estimate", "--json", "--nics", "8", "--gdr", "off", "--nccl-log", "-"]
    p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    written, start, i = 0, time.time(), 0
    while written < total:
        lines = []
        for _ in range(10000):
            r, c, peer = i % 4096, (i // 4096) % 64, (i // (4096 * 64)) % 64
            node, dev = r // 8, r % 8
            lines.append(
                f"[1,{r}]<stdout>:node{node:04d}:{30000 + r}:{31000 + r} [{dev}] NCCL INFO Channel {c:02d}/0 : "
                f"{r}[{dev}] -> {(r + 8 * (peer + 1)) % 4096}[{dev}] [send] via NET/IB/{dev}/GDRDMA\n"
            )
            i += 1
        block = "".join(lines).encode()
        p.stdin.write(block)
        written += len(block)
    p.stdin.close()
    out = p.stdout.read()
    p.wait()
    log = json.loads(out)["nccl_log"]
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(
        f"bytes {written} lines {i} seconds {time.time() - start:.1f} exit {p.returncode} peak_rss_kib {peak} "
        f"processes {len(log['ranks'])} exact {log['exact']} sends {sum(r['net_send'] for r in log['ranks'])}"
    )


if __name__ == "__main__":
    main()
