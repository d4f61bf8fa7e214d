#!/usr/bin/python3
"""Label bound (issue 15 item 6), two binaries on the same trees in one run: the fixture roots
plus 50 processes pinning 4 MiB each in cgroups with short, 4095-byte (what a kernel prints) and
1 MB paths (a procfs root someone else writes). Prints each scrape's size and time and the
exporter's peak RSS (VmHWM). Loopback only; the figures in docs/reliability.md.

    /usr/bin/python3 scripts/bench/label_bound.py OLD_BINARY NEW_BINARY
"""
import json, os, shutil, subprocess, sys, tempfile, time, urllib.request
SCRATCH = tempfile.mkdtemp(prefix="memlock-label-bound-")
BINARIES = list(zip(["old", "new"], sys.argv[1:3]))
FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures")
CAP = FIX + "/captures/"
status = open(CAP + "proc_self_status").read()
limits = open(CAP + "proc_self_limits").read()
cgroup = open(CAP + "proc_self_cgroup_hybrid_v1").read()
uidmap = open(CAP + "proc_self_uid_map").read()

def tree(name, path_of):
    root = os.path.join(SCRATCH, name)
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(FIX + "/proc", root + "/proc", symlinks=True)
    shutil.copytree(FIX + "/sys", root + "/sys", symlinks=True)
    for i in range(50):
        d = f"{root}/proc/{9000+i}"
        os.makedirs(d)
        s = status.replace("Name:\tcat", "Name:\trank").replace("Pid:\t15717", f"Pid:\t{9000+i}") \
            .replace("VmPin:\t       0 kB", "VmPin:\t    4096 kB") \
            .replace("CapEff:\t000001fffeffffff", "CapEff:\t0000000000000000")
        open(d + "/status", "w").write(s)
        open(d + "/limits", "w").write(limits)
        open(d + "/uid_map", "w").write(uidmap)
        open(d + "/cgroup", "w").write(cgroup.replace("/process_api/dd1899f89d55a02163c5f19a2de9845b", path_of(i)))
    return root

def run(binary, root):
    p = subprocess.Popen([binary, "--web.listen-address", "127.0.0.1:0", "--log.format", "json",
                          "--path.procfs", root + "/proc", "--path.sysfs", root + "/sys",
                          "--no-collector.rdma_netlink"],
                         stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        if '"listening"' in line:
            addr = json.loads(line)["address"]; break
    while True:
        try:
            if urllib.request.urlopen(f"http://{addr}/-/ready").status == 200: break
        except Exception: time.sleep(0.05)
    t = time.monotonic()
    body = urllib.request.urlopen(f"http://{addr}/metrics", timeout=600).read()
    took = time.monotonic() - t
    hwm = [l for l in open(f"/proc/{p.pid}/status") if l.startswith("VmHWM")][0].split()[1]
    p.kill(); p.wait()
    return len(body), took, int(hwm)

cases = [("short", lambda i: f"/attack-{i:02}"),
         ("4095", lambda i: f"/attack-{i:02}/" + "d" * (4095 - 11)),
         ("1MB", lambda i: f"/attack-{i:02}/" + "d" * (1_000_000 - 11))]
for name, path_of in cases:
    root = tree(name, path_of)
    for label, binary in BINARIES:
        size, took, hwm = run(binary, root)
        print(f"{name:6} {label:7} scrape {size:>11,} bytes in {took:7.3f} s, peak RSS {hwm/1024:7.1f} MiB", flush=True)
    shutil.rmtree(root)
shutil.rmtree(SCRATCH, ignore_errors=True)
