#!/usr/bin/python3
"""Render cost of the label bound: two binaries, the same tree of 6,004 v1 memory cgroups with
Kubernetes paths (about 200 bytes), interleaved runs; the median of the scrapes that rendered a
new snapshot (one a second). Loopback only; the figures in docs/reliability.md.

    /usr/bin/python3 scripts/bench/label_render.py OLD_BINARY NEW_BINARY
"""
import json, os, shutil, statistics, subprocess, sys, tempfile, time, urllib.request
root = tempfile.mkdtemp(prefix="memlock-label-render-")
shutil.copytree(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                             "..", "..", "tests", "fixtures", "cgroup-v1", "sys"),
                root + "/sys", symlinks=True)
os.makedirs(root + "/proc")
mem = root + "/sys/fs/cgroup/memory"
def cg(path, usage, limit):
    d = mem + path
    os.makedirs(d, exist_ok=True)
    files = {"memory.failcnt": "0\n", "memory.limit_in_bytes": f"{limit}\n", "memory.usage_in_bytes": f"{usage}\n",
             "memory.max_usage_in_bytes": f"{usage}\n", "memory.memsw.limit_in_bytes": "9223372036854771712\n",
             "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
             "memory.stat": f"cache 1048576\nrss {usage}\ninactive_file 524288\nactive_file 524288\nunevictable 0\n"
                            f"hierarchical_memory_limit {limit}\nhierarchical_memsw_limit 9223372036854771712\n"
                            f"total_inactive_file 524288\ntotal_unevictable 0\n",
             "cgroup.procs": "", "tasks": ""}
    for n, t in files.items():
        open(f"{d}/{n}", "w").write(t)
for pod in range(2000):
    p = f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{pod:08x}_2a43_4a3b_9c1e_2f1d0c7a9e11.slice"
    cg(p, 3 << 20, 1 << 30)
    for c in range(2):
        cg(f"{p}/cri-containerd-{pod:016x}{c:048x}.scope", 1 << 20, 1 << 30)

def run(binary):
    p = subprocess.Popen([binary, "--web.listen-address", "127.0.0.1:0", "--log.format", "json",
                          "--path.procfs", root + "/proc", "--path.sysfs", root + "/sys",
                          "--no-collector.rdma_netlink", "--no-collector.process", "--no-collector.node",
                          "--no-collector.numa", "--no-collector.rdma_sysfs"], stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        if '"listening"' in line:
            addr = json.loads(line)["address"]; break
    while True:
        try:
            if urllib.request.urlopen(f"http://{addr}/-/ready").status == 200: break
        except Exception: time.sleep(0.05)
    times = []
    for _ in range(8):
        time.sleep(1.05)  # a new snapshot: the first scrape of it renders
        t = time.monotonic(); body = urllib.request.urlopen(f"http://{addr}/metrics").read()
        times.append(time.monotonic() - t)
        t = time.monotonic(); urllib.request.urlopen(f"http://{addr}/metrics").read(); cached = time.monotonic() - t
    p.kill(); p.wait()
    return statistics.median(times), cached, len(body)
BINARIES = dict(zip(["old", "new"], sys.argv[1:3]))
res = {label: [] for label in BINARIES}
for _ in range(3):
    for label, binary in BINARIES.items():
        res[label].append(run(binary))
for label, rs in res.items():
    print(f"{label:7} first scrape of a snapshot (render + send), median of 3 runs x 8: "
          f"{statistics.median(r[0] for r in rs)*1e3:7.1f} ms; "
          f"a cached one {statistics.median(r[1] for r in rs)*1e3:6.1f} ms; "
          f"{rs[0][2]:,} bytes")
shutil.rmtree(root, ignore_errors=True)
