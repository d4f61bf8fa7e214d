#!/usr/bin/env python3
"""Two nodes of one Slurm job, end to end (started by scripts/e2e/cluster.sh).

    cluster_check.py build NODE_A NODE_B
        writes two fixture trees (proc/, sys/) from tests/fixtures: both run Slurm job 1870, whose
        process 5210 pins memory at 94% of its soft memlock limit (4 GiB of 4.25 GiB on node A,
        1 GiB of 1.0625 GiB on node B); on node B the job's cgroups are at 95% of their memory
        limit, and its Kubernetes pod has another UID (a second pod). Prints the Alertmanager
        configuration to use: a webhook route and the inhibit_rules block of alerts/README.md.
    cluster_check.py check --prometheus URL --alertmanager URL --webhook-out FILE --job JOB
        1. both targets are up and every rule evaluates;
        2. the memlock_job:* rules give one series per Slurm job across both nodes, without
           instance: node count 2, pinned bytes summed, worst ratio and least headroom of the two,
           equal to what the two exporters' own series give and to the values written by `build`;
           each pod is one series on one node;
        3. the Cluster dashboard's job and node panels show that job on 2 nodes and node B's
           cgroups near their limit;
        4. the rules run with every `for` at 0s (cluster.sh rewrites a copy): the job's
           MemlockJobNearLimit is notified; its per-process MemlockProcessNearLimit alerts on both
           nodes are inhibited and never notified; the pods' MemlockProcessNearLimit and node B's
           MemlockCgroupNearMemoryLimit (one node only: no job alert) are notified.
        With memlock_node_software_info (the software collector), node B's other kernel is
        version skew within the job.

Prints PASS or FAIL per check; exit status 1 when any failed. Python standard library, plus
PyYAML to read the inhibit_rules block.
"""

import argparse
import json
import re
import shutil
import sys
import time
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))
import prometheus_check as pc  # noqa: E402  (report, get_json, wait_for, substitute)

ROOT = Path(__file__).resolve().parent.parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
README = ROOT / "alerts" / "README.md"
CLUSTER_DASHBOARD = ROOT / "dashboards" / "cluster.json"

GIB = 1 << 30
SLURM_JOB = "1870"
POD_A = "6b0e3b1a-2a43-4a3b-9c1e-2f1d0c7a9e11"  # the fixtures' pod
POD_B = "7c1f4d2b-2a43-4a3b-9c1e-2f1d0c7a9e11"
# Process 5210 of job 1870 on each node: VmPin in kB and its soft (= hard) memlock limit.
NODES = {
    "a": {"vmpin_kb": 4 * 1024 * 1024, "limit": 4563402752},  # 4 GiB of 4.25 GiB
    "b": {"vmpin_kb": 1024 * 1024, "limit": 1140850688},  # 1 GiB of 1.0625 GiB
}
# Node B: the job and step cgroups' usage under their 2 GiB limit (memory.stat: 11 MiB inactive
# file, so the working set is 95% of the limit).
B_USAGE = 2051014656
INACTIVE_FILE = 11534336
CGROUP_LIMIT = 2 * GIB
A_WORKING_SET = 256901120  # the fixtures' job cgroup (tests/fixtures/e2e-output.txt)
B_KERNEL = "5.15.0-1071-nvidia"


# --- build ------------------------------------------------------------------------------------


def build(node_a, node_b):
    for name, target in (("a", Path(node_a)), ("b", Path(node_b))):
        target.mkdir(parents=True, exist_ok=True)
        for tree in ("proc", "sys"):
            shutil.copytree(FIXTURES / tree, target / tree, symlinks=True)
        node = NODES[name]
        status = target / "proc/5210/status"
        status.write_text(re.sub(r"^VmPin:.*$", f"VmPin:\t{node['vmpin_kb']:>8} kB", status.read_text(), flags=re.M))
        limits = target / "proc/5210/limits"
        line = f"{'Max locked memory':<26}{node['limit']:<21}{node['limit']:<21}{'bytes':<10}"
        limits.write_text(re.sub(r"^Max locked memory .*$", line, limits.read_text(), flags=re.M))
        if name == "b":
            memory = target / "sys/fs/cgroup/memory/slurm/uid_1000/job_1870"
            for cgroup in (memory, memory / "step_0"):
                (cgroup / "memory.usage_in_bytes").write_text(f"{B_USAGE}\n")
            # Another pod on this node: its UID in the cgroup paths of the hierarchies and of
            # its processes.
            old, new = POD_A.split("-")[0], POD_B.split("-")[0]
            for path in sorted((target / "sys/fs/cgroup").rglob(f"*{old}*"), key=lambda p: -len(p.parts)):
                path.rename(path.with_name(path.name.replace(old, new)))
            for cgroup_file in (target / "proc").glob("*/cgroup"):
                cgroup_file.write_text(cgroup_file.read_text().replace(old, new))
            osrelease = target / "proc/sys/kernel/osrelease"
            if osrelease.exists():
                osrelease.write_text(B_KERNEL + "\n")
    import yaml

    print(yaml.safe_dump(alertmanager_config("WEBHOOK_URL"), sort_keys=False), end="")


def readme_inhibit_rules():
    """The inhibit_rules of the job-level alerts, as alerts/README.md documents them."""
    import yaml

    blocks = re.findall(r"```yaml\n(.*?)```", README.read_text(), re.S)
    rules = [yaml.safe_load(b)["inhibit_rules"] for b in blocks if b.startswith("inhibit_rules:") and "MemlockJob" in b]
    if len(rules) != 1:
        raise SystemExit(f"{README}: expected one inhibit_rules block of the job alerts, found {len(rules)}")
    return rules[0]


def alertmanager_config(webhook_url):
    return {
        "route": {
            "receiver": "webhook",
            # One notification per alert. group_wait covers the second between two rule groups'
            # evaluations (1 s here); in production the job alerts' shorter `for` does.
            "group_by": ["..."],
            "group_wait": "3s",
            "group_interval": "1s",
            "repeat_interval": "1h",
        },
        "receivers": [{"name": "webhook", "webhook_configs": [{"url": webhook_url, "send_resolved": False}]}],
        "inhibit_rules": readme_inhibit_rules(),
    }


# --- check ------------------------------------------------------------------------------------


def query(prometheus, expr):
    result = pc.get_json(prometheus, "/api/v1/query", {"query": expr})
    if result.get("status") != "success":
        pc.report(False, f"query {expr}: {result.get('error')}")
        return []
    return result["data"]["result"]


def one_value(series):
    return float(series[0]["value"][1]) if len(series) == 1 else None


def check_targets_and_rules(prometheus, job):
    def up():
        targets = [t for t in pc.get_json(prometheus, "/api/v1/targets")["data"]["activeTargets"]
                   if t["labels"]["job"] == job]
        return targets if len(targets) == 2 and all(t["health"] == "up" for t in targets) else None

    targets = pc.wait_for("both targets up", up, 30) or []
    pc.report(len(targets) == 2,
              f"both exporters of scrape job {job} are up: {[t['labels']['instance'] for t in targets]}")

    def evaluated():
        rules = [r for g in pc.get_json(prometheus, "/api/v1/rules")["data"]["groups"] for r in g["rules"]]
        return rules if rules and all(not r["lastEvaluation"].startswith("0001") for r in rules) else None

    rules = pc.wait_for("every rule to be evaluated", evaluated, 30) or []
    bad = [f"{r['name']}: {r.get('lastError')}" for r in rules if r["health"] != "ok"]
    pc.report(rules and not bad, f"{len(rules)} rules evaluate without errors {bad or ''}")
    return sorted(t["labels"]["instance"] for t in targets)


def check_job_rules(prometheus, job, instances):
    sel = f'job="{job}",slurm_job="{SLURM_JOB}"'

    # Until Prometheus has scraped both targets and evaluated the rules on both, the job is on
    # one node.
    def recorded():
        series = query(prometheus, f"memlock_job:memlock_nodes:count{{{sel}}}")
        return series if [s["value"][1] for s in series] == ["2"] else None

    nodes = (pc.wait_for("memlock_job:memlock_nodes:count of the job to be 2", recorded, 30)
             or query(prometheus, f"memlock_job:memlock_nodes:count{{{sel}}}"))
    labels = [dict(s["metric"]) for s in nodes]
    pc.report(
        len(nodes) == 1 and one_value(nodes) == 2
        and labels[0] == {"__name__": "memlock_job:memlock_nodes:count", "job": job, "slurm_job": SLURM_JOB},
        f"memlock_job:memlock_nodes:count: one series for Slurm job {SLURM_JOB}, without instance, value 2: "
        f"{[(s['metric'], s['value'][1]) for s in nodes]}",
    )
    members = query(prometheus, f"memlock_node:memlock_slurm_job:info{{{sel}}}")
    pc.report(sorted(s["metric"]["instance"] for s in members) == instances,
              f"memlock_node:memlock_slurm_job:info names both nodes: {[s['metric']['instance'] for s in members]}")

    # Each recorded value: one series without instance, equal to the aggregation of both nodes'
    # own series and to the value the fixture trees were built with.
    pinned_kb = sum(n["vmpin_kb"] for n in NODES.values())
    worst_ratio = max(n["vmpin_kb"] * 1024 / n["limit"] for n in NODES.values())
    headroom = min(CGROUP_LIMIT - A_WORKING_SET, CGROUP_LIMIT - (B_USAGE - INACTIVE_FILE))
    expected = {
        "memlock_job:memlock_cgroup_pinned_bytes:sum": (f'sum(memlock_cgroup_pinned_bytes{{{sel}}})', pinned_kb * 1024),
        "memlock_job:memlock_cgroup_locked_bytes:sum": (f'sum(memlock_cgroup_locked_bytes{{{sel}}})', 0),
        'memlock_job:memlock_process_limit_usage_ratio:max{counter="pinned"}': (
            f'max(memlock_process_limit_usage_ratio{{{sel},counter="pinned"}})', worst_ratio),
        "memlock_job:memlock_cgroup_memory_headroom_bytes:min": (
            f"min(memlock_cgroup_memory_limit_bytes{{{sel}}} - memlock_cgroup_memory_working_set_bytes{{{sel}}})",
            headroom),
        "memlock_job:memlock_cgroup_memory_working_set_ratio:max": (
            f"max(memlock_cgroup_memory_working_set_bytes{{{sel}}} / memlock_cgroup_memory_limit_bytes{{{sel}}})",
            (B_USAGE - INACTIVE_FILE) / CGROUP_LIMIT),
    }
    for recorded_selector, (raw, value) in expected.items():
        name, _, extra = recorded_selector.partition("{")
        series = query(prometheus, f"{name}{{{sel}{',' + extra.rstrip('}') if extra else ''}}}")
        got, own = one_value(series), one_value(query(prometheus, raw))
        no_instance = all("instance" not in s["metric"] for s in series)
        ok = (got is not None and own is not None and no_instance and abs(got - own) <= 1e-9 * max(1, abs(own))
              and abs(got - value) <= 1e-6 * max(1, abs(value)))
        pc.report(ok, f"{recorded_selector} of job {SLURM_JOB}: {got} (both nodes' own series: {own}; built: {value}), "
                      "no instance label")

    pods = query(prometheus, f'memlock_job:memlock_nodes:count{{job="{job}",pod_uid!=""}}')
    pc.report(sorted((s["metric"]["pod_uid"], s["value"][1]) for s in pods) == [(POD_A, "1"), (POD_B, "1")],
              f"each pod is one series on one node: {[(s['metric'].get('pod_uid'), s['value'][1]) for s in pods]}")


def panel_rows(prometheus, panel, variables):
    """{refId: [series]} of a dashboard table panel's instant queries, variables substituted."""
    out = {}
    for target in panel["targets"]:
        expr, unknown = pc.substitute(target["expr"], variables)
        if unknown:
            pc.report(False, f"{panel['title']} / {target['refId']}: unknown variables {unknown}")
        out[target["refId"]] = query(prometheus, expr)
    return out


def check_dashboard(prometheus, job, instances):
    board = json.loads(CLUSTER_DASHBOARD.read_text())
    panels = {p["title"]: p for p in board["panels"]}
    # The dashboard as Grafana opens it: this job, every instance ($instance is All: .+).
    variables = dict(pc.BUILTINS, job=job, instance=".+", datasource="prometheus")

    jobs = panel_rows(prometheus, panels["Jobs by worst headroom"], variables)
    row = {ref: [s for s in series if s["metric"].get("slurm_job") == SLURM_JOB] for ref, series in jobs.items()}
    nodes = one_value(row["C"])
    pinned = one_value(row["F"])
    pc.report(nodes == 2 and pinned == sum(n["vmpin_kb"] for n in NODES.values()) * 1024,
              f"Cluster / Jobs by worst headroom: Slurm job {SLURM_JOB} is one row, on {nodes} nodes, "
              f"pinning {pinned} bytes in all")
    pods = sorted(s["metric"].get("pod_uid") for s in jobs["C"] if s["metric"].get("pod_uid"))
    pc.report(pods == [POD_A, POD_B], f"Cluster / Jobs by worst headroom: both pods are rows: {pods}")

    per_node = panel_rows(prometheus, panels["Nodes of the jobs with the least headroom"], variables)["A"]
    job_nodes = sorted(s["metric"]["instance"] for s in per_node if s["metric"].get("slurm_job") == SLURM_JOB)
    pc.report(job_nodes == instances,
              f"Cluster / Nodes of the jobs with the least headroom: job {SLURM_JOB} on {job_nodes}")

    causes = panel_rows(prometheus, panels["Nodes by static cause"], variables)
    near = {s["metric"]["instance"]: s["value"][1] for s in causes["B"]}
    pc.report(near == {instances_of_b(prometheus, job): "2"},
              "Cluster / Nodes by static cause: node B's job and step cgroups are near their limit, "
              f"node A's are not: {near}")
    stat = panel_rows(prometheus, panels["Nodes: cgroup near its limit"], variables)["A"]
    pc.report(one_value(stat) == 1, f"Cluster / Nodes: cgroup near its limit counts 1 node: {one_value(stat)}")
    link = panels["Nodes by static cause"]["fieldConfig"]["overrides"][0]
    pc.report(link["matcher"]["options"] == "instance"
              and any(l["url"].startswith("/d/memlock-node?") for l in link["properties"][0]["value"]),
              "Cluster / Nodes by static cause: the instance column links to the node overview")


def instances_of_b(prometheus, job):
    """Node B is the one whose process 5210 has B's memlock limit."""
    series = query(prometheus,
                   f'memlock_process_limit_bytes{{job="{job}",pid="5210",kind="soft"}} == {NODES["b"]["limit"]}')
    return series[0]["metric"]["instance"] if len(series) == 1 else None


def check_software(prometheus, alertmanager, job):
    if not query(prometheus, f'memlock_node_software_info{{job="{job}"}}'):
        print("SKIP: no memlock_node_software_info (this exporter has no software collector): "
              "version skew within the job not checked end to end")
        return
    skew = one_value(query(
        prometheus,
        f'memlock_job:memlock_software_versions:count{{job="{job}",slurm_job="{SLURM_JOB}",component="kernel"}}'))
    pc.report(skew == 2, f"memlock_job:memlock_software_versions:count{{component=\"kernel\"}} of job {SLURM_JOB} is 2 "
                         f"(node B runs {B_KERNEL}): {skew}")

    def skew_alerts():
        alerts = [a for a in am_alerts(alertmanager) if a["labels"]["alertname"] == "MemlockJobSoftwareVersionSkew"]
        return alerts or None

    alerts = pc.wait_for("MemlockJobSoftwareVersionSkew", skew_alerts, 30) or []
    components = sorted(a["labels"].get("component") for a in alerts if a["labels"].get("slurm_job") == SLURM_JOB)
    description = next((a["annotations"]["description"] for a in alerts if a["labels"].get("component") == "kernel"),
                       "")
    pc.report(components == ["kernel"] and f"{B_KERNEL} on 1 node(s)" in description,
              f"MemlockJobSoftwareVersionSkew fires for job {SLURM_JOB} on the kernel only: {components}: "
              f"{description}")


def am_alerts(alertmanager):
    return pc.get_json(alertmanager, "/api/v2/alerts") if alertmanager else []


def notified(webhook_out):
    alerts = []
    path = Path(webhook_out)
    if path.exists():
        for line in path.read_text().splitlines():
            alerts += json.loads(line)["payload"].get("alerts", [])
    return [a["labels"] for a in alerts]


def check_inhibition(alertmanager, webhook_out, job, instances):
    def labels_match(labels, **want):
        return all(labels.get(k) == v for k, v in want.items())

    wanted = {
        "job alert": dict(alertname="MemlockJobNearLimit", job=job, slurm_job=SLURM_JOB, counter="pinned"),
        "pod A": dict(alertname="MemlockProcessNearLimit", job=job, pod_uid=POD_A, counter="pinned"),
        "pod B": dict(alertname="MemlockProcessNearLimit", job=job, pod_uid=POD_B, counter="pinned"),
        "node B cgroups": dict(alertname="MemlockCgroupNearMemoryLimit", job=job, slurm_job=SLURM_JOB),
    }

    def settled():
        alerts = am_alerts(alertmanager)
        suppressed = [a for a in alerts
                      if labels_match(a["labels"], alertname="MemlockProcessNearLimit", slurm_job=SLURM_JOB)]
        have = all(any(labels_match(a["labels"], **w) for a in alerts) for w in wanted.values())
        return alerts if have and len(suppressed) == 2 else None

    alerts = pc.wait_for("the alerts in Alertmanager", settled, 60) or []
    for what, want in wanted.items():
        mine = [a for a in alerts if labels_match(a["labels"], **want)]
        pc.report(bool(mine) and all(a["status"]["state"] == "active" and not a["status"]["inhibitedBy"] for a in mine),
                  f"Alertmanager: {what} ({want['alertname']}) is active, not inhibited: {[a['status'] for a in mine]}")
    targets = [a for a in alerts if labels_match(a["labels"], alertname="MemlockProcessNearLimit", slurm_job=SLURM_JOB)]
    pc.report(sorted(a["labels"]["instance"] for a in targets) == instances
              and all(a["status"]["state"] == "suppressed" and a["status"]["inhibitedBy"] for a in targets),
              f"Alertmanager: MemlockProcessNearLimit of job {SLURM_JOB} on both nodes is inhibited by the job's "
              "alert: "
              f"{[(a['labels']['instance'], a['status']) for a in targets]}")
    cgroup_job = [a for a in alerts if a["labels"]["alertname"] == "MemlockJobCgroupNearMemoryLimit"]
    pc.report(not cgroup_job,
              "MemlockJobCgroupNearMemoryLimit does not fire for cgroups near their limit on one node only: "
              f"{[a['labels'] for a in cgroup_job]}")

    def delivered():
        labels = notified(webhook_out)
        return labels if all(any(labels_match(l, **w) for l in labels) for w in wanted.values()) else None

    labels = pc.wait_for("the notifications", delivered, 30) or []
    time.sleep(2)  # anything the inhibition let through would have followed by now (group_interval 1s)
    labels = notified(webhook_out)
    for what, want in wanted.items():
        pc.report(any(labels_match(l, **want) for l in labels), f"webhook: {what} ({want['alertname']}) was notified")
    leaked = [l for l in labels if labels_match(l, alertname="MemlockProcessNearLimit", slurm_job=SLURM_JOB)]
    pc.report(not leaked, f"webhook: no MemlockProcessNearLimit of job {SLURM_JOB} was notified: {leaked}")


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("node_a")
    b.add_argument("node_b")
    c = sub.add_parser("check")
    c.add_argument("--prometheus", required=True)
    c.add_argument("--alertmanager", required=True)
    c.add_argument("--webhook-out", required=True)
    c.add_argument("--job", required=True)
    args = parser.parse_args()
    if args.command == "build":
        build(args.node_a, args.node_b)
        return 0
    instances = check_targets_and_rules(args.prometheus, args.job)
    check_job_rules(args.prometheus, args.job, instances)
    check_dashboard(args.prometheus, args.job, instances)
    check_software(args.prometheus, args.alertmanager, args.job)
    check_inhibition(args.alertmanager, args.webhook_out, args.job, instances)
    print(f"{len(pc.failures)} check(s) failed" if pc.failures else "all checks passed")
    return 1 if pc.failures else 0


if __name__ == "__main__":
    sys.exit(main())
