#!/usr/bin/env python3
"""Checks a real Prometheus that scrapes memlock-exporter (started by scripts/e2e/prometheus.sh).

    prometheus_check.py --prometheus URL --target JOB=EXPORTER_URL [--target ...]
                        [--node-job JOB] [--holder-pid PID]

1. every target is up;
2. the alert rules loaded and evaluate without errors, with labels and annotations as the
   conventions require (severity, summary, description, runbook_url to a section of
   docs/runbooks.md);
3. every query of every Grafana dashboard (panels and annotations), with the template variables
   substituted as Grafana would, is accepted by Prometheus for every job; the node overview's
   queries return data for the node job, and any query whose metrics the exporter exports
   returns data unless it filters on purpose (FILTERED below);
4. with --holder-pid: the alerts that a real unprivileged process holding locked and pinned
   memory under an 8 MiB limit must trigger are pending, with their texts rendered, on the
   counter that is near the limit (locked) and not on the other (pinned), and the
   cgroup-level MemlockCgroupProcessNearLimit does not alert for it a second time.

Prints PASS or FAIL per check; the exit status is 1 when any check failed. Standard library only.
"""

import argparse
import json
import re
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
RULES = ROOT / "alerts" / "memlock-exporter.rules.yml"
RUNBOOKS = ROOT / "docs" / "runbooks.md"
DASHBOARDS = ROOT / "dashboards"

# Grafana's values for its built-in variables with a 1 s scrape interval and a 6 h range.
BUILTINS = {"__rate_interval": "20s", "__interval": "20s", "__range": "6h"}

# Queries that may return nothing although the exporter exports their metrics: they keep only
# what is abnormal, or select a label value that a healthy node need not have.
FILTERED = {
    ("*", "annotation: Memlock alerts", "A"): "empty while no Memlock alert fires",
    ("memlock-node", "Collector errors", "A"): "the error counter has no series until the first error",
    ("memlock-node", "Time to the MemAvailable floor", "A"):
        "the exporter exports no time to the floor while MemAvailable does not fall",
    ("memlock-node", "How fast MemAvailable falls", "A"):
        "the exporter has no fit for a few samples after a start or a reset (a drop to under half)",
    ("memlock-node", "Time until MemAvailable reaches its floor", "A"):
        "no time to the floor while MemAvailable does not fall",
    ("memlock-node", "Time until MemAvailable reaches its floor", "B"): "keeps only a falling MemAvailable",
    ("memlock-workloads", "OOM events", "A"): "keeps only cgroups with OOM events",
    ("memlock-workloads", "Cgroups with a process near its memlock limit that has no per-process series", "A"):
        "keeps only cgroups that MemlockCgroupProcessNearLimit would alert on",
    ("memlock-workloads", "Kubernetes pods", "*"): "only cgroups of Kubernetes pods",
    ("memlock-workloads", "Slurm jobs", "*"): "only cgroups of Slurm jobs",
    ("memlock-workloads", "rdma cgroup: objects against rdma.max", "*"): "only cgroups with the rdma controller",
    ("memlock-processes", "Processes that pin memory under a memlock limit too low for RDMA", "A"):
        "keeps only misconfigured processes",
    ("memlock-processes", "Unlimited soft limit", "A"): "count of a filtered set",
    ("memlock-processes", "With CAP_IPC_LOCK", "A"): "count of a filtered set",
    ("memlock-processes", "Time until the memlock limit (exporter trend)", "A"):
        "no exhaustion time while nothing rises",
    ("memlock-rdma", "Registration errors", "A"): "only devices with a registration error counter (EFA)",
    ("memlock-rdma", "Port error counters", "*"): "keeps only rising error counters",
    ("memlock-rdma", "Port traffic", "*"): "IBTA counters and driver counters: a device has one or the other",
    ("memlock-rdma", "RDMA resources", "B"): "only bnxt_re has active_* gauges",
    ("memlock-cluster", "Nodes by static cause", "*"): "each cause keeps only the nodes that have it",
    **{("memlock-cluster", f"Nodes: {cause}", "A"): "count of the nodes with a cause"
       for cause in ("memlock limit too low for RDMA", "cgroup near its limit", "hugepage squeeze", "strict overcommit",
                     "RDMA port not active", "version skew")},
    ("memlock-cluster", "Version skew in the fleet", "A"): "keeps only components with more than one version",
    ("memlock-cluster", "Version skew within jobs", "A"): "keeps only jobs with version skew",
    ("memlock-cluster", "Nodes on a minority version", "A"): "keeps only nodes on a minority version",
    ("memlock-cluster", "Jobs by worst memlock ratio", "H"):
        "software versions are per Slurm job: empty when the rows are pods (the fixtures' Slurm job has no finite "
        "memlock limit, so no ratio)",
}

failures = []


def report(ok, message):
    print(("PASS: " if ok else "FAIL: ") + message)
    if not ok:
        failures.append(message)
    return ok


def get_json(base, path, params=None):
    url = base.rstrip("/") + path
    if params:
        url += "?" + urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.load(response)
    except urllib.error.HTTPError as err:
        # Prometheus answers bad queries with 400 and a JSON error body.
        return json.load(err)


def wait_for(what, probe, seconds):
    """Polls probe() until it returns a true value; returns it, or None after `seconds`."""
    deadline = time.time() + seconds
    while True:
        value = probe()
        if value or time.time() > deadline:
            if not value:
                print(f"  (gave up waiting for {what} after {seconds}s)")
            return value
        time.sleep(0.5)


def github_anchor(heading):
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


# --- 1. targets -------------------------------------------------------------------------------


def check_targets(prometheus, jobs):
    def all_up():
        targets = get_json(prometheus, "/api/v1/targets")["data"]["activeTargets"]
        healthy = {t["labels"]["job"]: t for t in targets if t["health"] == "up"}
        return healthy if all(job in healthy for job in jobs) else None

    healthy = wait_for("targets up", all_up, 30) or {}
    for job in jobs:
        report(job in healthy, f"target {job} is up")
    return {job: healthy[job]["labels"]["instance"] for job in jobs if job in healthy}


# --- 2. rules ---------------------------------------------------------------------------------


def check_rules(prometheus):
    expected = len(re.findall(r"^\s*- alert: ", RULES.read_text(), re.M))
    anchors = {github_anchor(m.group(1)) for m in re.finditer(r"^#{2,3} (.+)$", RUNBOOKS.read_text(), re.M)}

    def evaluated():
        groups = get_json(prometheus, "/api/v1/rules")["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        done = rules and all(not r.get("lastEvaluation", "").startswith("0001") and r.get("health") != "unknown"
                             for r in rules)
        return rules if done else None

    rules = wait_for("every rule to be evaluated", evaluated, 30) or []
    alerts = [r for r in rules if r["type"] == "alerting"]
    report(len(alerts) == expected, f"{len(alerts)} alerting rules loaded from {RULES.name} (the file has {expected})")
    for rule in rules:
        name = rule["name"]
        report(rule["health"] == "ok" and not rule.get("lastError"),
               f"rule {name} evaluates: health {rule['health']}"
               f"{', ' + rule['lastError'] if rule.get('lastError') else ''}")
        if rule["type"] != "alerting":
            continue
        annotations, labels = rule.get("annotations", {}), rule.get("labels", {})
        problems = []
        if labels.get("severity") not in ("critical", "warning", "info"):
            problems.append(f"severity {labels.get('severity')!r}")
        problems += [f"no {key}" for key in ("summary", "description", "runbook_url") if not annotations.get(key)]
        anchor = annotations.get("runbook_url", "").partition("#")[2]
        if anchor not in anchors:
            problems.append(f"runbook anchor #{anchor} is not a section of docs/runbooks.md")
        report(not problems, f"rule {name} has severity, summary, description and a runbook section"
               + (f": {'; '.join(problems)}" if problems else ""))


# --- 3. dashboards ----------------------------------------------------------------------------


def exported_metrics(exporter_url):
    with urllib.request.urlopen(exporter_url.rstrip("/") + "/metrics", timeout=10) as response:
        text = response.read().decode()
    return {re.split(r"[{ ]", line, 1)[0] for line in text.splitlines() if line and not line.startswith("#")}


def grafana_regex_escape(value):
    """What Grafana writes for a value of a multi-value variable: regex specials escaped, and
    the escape doubled for the PromQL string literal."""
    return re.sub(r"([\\^$*+?.()|{}\[\]])", r"\\\\\1", value)


def substitute(expr, variables):
    """Replaces $name and ${name} as Grafana does; returns (query, unknown variable names)."""
    unknown = []

    def replace(match):
        name = match.group(1) or match.group(2)
        if name.isdigit():  # label_replace's "$1" is not a variable
            return match.group(0)
        if name not in variables:
            unknown.append(name)
            return match.group(0)
        return variables[name]

    return re.sub(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))", replace, expr), unknown


def dashboard_queries(board):
    """(panel title, refId, expr, instant) of every panel target and annotation query."""
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            if target.get("expr"):
                yield panel["title"], target["refId"], target["expr"], bool(target.get("instant"))
    for annotation in board.get("annotations", {}).get("list", []):
        if annotation.get("expr"):
            yield "annotation: " + annotation["name"], "A", annotation["expr"], False


def run_query(prometheus, query, instant):
    now = time.time()
    if instant:
        result = get_json(prometheus, "/api/v1/query", {"query": query, "time": now})
    else:
        result = get_json(prometheus, "/api/v1/query_range", {"query": query, "start": now - 60, "end": now, "step": 5})
    if result.get("status") != "success":
        return None, f"{result.get('errorType')}: {result.get('error')}"
    return len(result["data"]["result"]), None


def check_variables(prometheus, board, job, instance, variables):
    """Each query variable, `label_values(SELECTOR, LABEL)`, must offer this target's value."""
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        definition, _ = substitute(variable["definition"], variables)
        match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", definition)
        if not match:
            report(False, f"[{job}] {board['uid']}: variable ${variable['name']} is not label_values(selector, label): "
                          f"{definition}")
            continue
        result = get_json(prometheus, "/api/v1/query", {"query": match.group(1)})
        values = {r["metric"].get(match.group(2)) for r in result.get("data", {}).get("result", [])}
        expected = {"job": job, "instance": instance}.get(variable["name"])
        ok = result.get("status") == "success" and bool(values - {None}) and (expected is None or expected in values)
        report(ok, f"[{job}] {board['uid']}: variable ${variable['name']} offers {sorted(v for v in values if v)}")


def recorded_metrics(prometheus, job):
    """Names of the series the rules record (level:metric:operations) that Prometheus has for `job`."""
    result = get_json(prometheus, "/api/v1/query",
                      {"query": f'count by (__name__) ({{__name__=~"memlock_[a-z_]+:.+", job="{job}"}})'})
    return {r["metric"]["__name__"] for r in result.get("data", {}).get("result", [])}


def check_dashboards(prometheus, instances, exporters, node_job):
    boards = [json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))]
    report(len(boards) >= 5, f"{len(boards)} dashboards in dashboards/")
    for job, instance in instances.items():
        # A query of recorded series must return data once the rules have recorded them for
        # this job, like one of exported series.
        metrics = exported_metrics(exporters[job]) | recorded_metrics(prometheus, job)
        variables = dict(BUILTINS, job=job, instance=grafana_regex_escape(instance), datasource="prometheus")
        for board in boards:
            check_variables(prometheus, board, job, instance, variables)
            uid, queries, with_data, accepted = board["uid"], 0, 0, 0
            for title, ref, expr, instant in dashboard_queries(board):
                queries += 1
                query, unknown = substitute(expr, variables)
                where = f"[{job}] {uid} / {title} / {ref}"
                if unknown:
                    report(False, f"{where}: unknown template variables {unknown}")
                    continue
                count, error = run_query(prometheus, query, instant)
                if error:
                    report(False, f"{where}: Prometheus rejected the query: {error}\n      {query}")
                    continue
                accepted += 1
                with_data += count > 0
                if count:
                    continue
                filtered = next((FILTERED[k] for k in ((uid, title, ref), (uid, title, "*"), ("*", title, ref))
                                 if k in FILTERED), None)
                referenced = set(re.findall(r"\bmemlock_[a-z_:]+[a-z_]\b", expr))
                missing = sorted(referenced - metrics)
                if filtered:
                    print(f"  note: {where}: empty, allowed: {filtered}")
                elif uid == "memlock-node" and job == node_job:
                    report(False, f"{where}: a node panel returned no data (exporter lacks {missing or 'nothing'})"
                                  f"\n      {query}")
                elif not missing:
                    report(False, f"{where}: no data although the exporter exports {sorted(referenced)}\n      {query}")
                else:
                    print(f"  note: {where}: empty, the exporter does not export {missing} here")
            report(accepted == queries,
                   f"[{job}] {uid}: {accepted} of {queries} queries accepted, {with_data} returned data")


# --- 4. alerts from a real process ------------------------------------------------------------


def check_holder_alerts(prometheus, pid, node_job):
    # 7.5 MiB of 8 MiB locked (93.75%) and 2 MiB pinned (25%): VmLck is near the limit, VmPin is
    # not, and each counter alerts on its own.
    wanted = {
        "MemlockProcessNearLimit": ("locked", "holds 93.75% of its soft memlock limit of 8MiB in VmLck (locked memory"),
    }

    def holder_alerts():
        alerts = get_json(prometheus, "/api/v1/alerts")["data"]["alerts"]
        return [a for a in alerts if a["labels"].get("pid") == str(pid) and a["labels"].get("job") == node_job]

    def pending():
        mine = {a["labels"]["alertname"]: a for a in holder_alerts()
                if a["labels"].get("counter") in (None, wanted.get(a["labels"]["alertname"], (None,))[0])}
        return mine if all(name in mine for name in wanted) else None

    mine = wait_for("the holder's alerts", pending, 45) or {}
    for name, (counter, text) in wanted.items():
        alert = mine.get(name)
        if not alert:
            report(False, f"{name} is pending or firing for the holder process {pid}"
                   + (f" with counter={counter}" if counter else ""))
            continue
        description = alert["annotations"].get("description", "")
        report(alert["state"] in ("pending", "firing") and text in description
               and alert["labels"].get("counter") == counter,
               f"{name} is {alert['state']} for the holder process {pid} (counter {alert['labels'].get('counter')}): "
               f"{description[:200]}...")
    # The holder pins with io_uring fixed buffers and maps no RDMA library: the memlock floor for
    # RDMA registrants is not applied to it (memlock_node:memlock_rdma_registrant:info).
    floor = [a for a in holder_alerts() if a["labels"]["alertname"] == "MemlockProcessLimitTooLowForRdma"]
    report(not floor, f"MemlockProcessLimitTooLowForRdma stays quiet for the io_uring holder under 8MiB: "
                      f"{[a['labels'] for a in floor]}")
    # VmPin is at 25% of the limit: no alert on the pinned counter.
    pinned = [a for a in holder_alerts()
              if a["labels"]["alertname"] == "MemlockProcessNearLimit" and a["labels"].get("counter") != "locked"]
    report(not pinned, f"MemlockProcessNearLimit stays quiet for the holder's VmPin (25% of its limit): "
                       f"{[a['labels'] for a in pinned]}")
    # One process near its limit pages once: the cgroup's worst ratio sees the holder, and
    # MemlockCgroupProcessNearLimit stays quiet because MemlockProcessNearLimit names it.
    cgroup = (mine.get("MemlockProcessNearLimit") or {}).get("labels", {}).get("cgroup")
    if cgroup is None:
        report(False, "the holder's MemlockProcessNearLimit alert has a cgroup label")
        return
    selector = f'job="{node_job}",cgroup="{cgroup}"'
    result = get_json(prometheus, "/api/v1/query", {"query": f"memlock_cgroup_limit_usage_ratio_max{{{selector}}}"})
    worst = [(float(r["value"][1]), r["metric"].get("counter")) for r in result.get("data", {}).get("result", [])]
    report(bool(worst) and max(worst)[0] >= 0.9 and max(worst)[1] == "locked",
           f"memlock_cgroup_limit_usage_ratio_max of the holder's cgroup {cgroup} is {worst} (ratio, counter): "
           "at least 0.9, on the locked counter")
    alerts = get_json(prometheus, "/api/v1/alerts")["data"]["alerts"]
    doubled = [a for a in alerts
               if a["labels"]["alertname"] == "MemlockCgroupProcessNearLimit" and a["labels"].get("cgroup") == cgroup]
    report(not doubled, f"MemlockCgroupProcessNearLimit stays quiet for the holder's cgroup {cgroup} "
                        "(MemlockProcessNearLimit names the process)")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--prometheus", required=True)
    parser.add_argument("--target", action="append", required=True, help="JOB=EXPORTER_URL")
    parser.add_argument("--node-job", required=True, help="the job scraping the real /proc and /sys")
    parser.add_argument("--holder-pid", type=int)
    args = parser.parse_args()
    exporters = dict(t.split("=", 1) for t in args.target)

    instances = check_targets(args.prometheus, list(exporters))
    check_rules(args.prometheus)
    # rate() and deriv() need two samples in their window: wait until every job has them (a
    # fixed 3 s pause stood in for this, issue 27).
    def two_samples_each():
        result = get_json(args.prometheus, "/api/v1/query", {"query": "min by (job) (count_over_time(up[5m]))"})
        counts = {r["metric"].get("job"): float(r["value"][1]) for r in result["data"]["result"]}
        return all(counts.get(job, 0) >= 2 for job in list(exporters) + [args.node_job])

    wait_for("two samples of every target", two_samples_each, 60)
    check_dashboards(args.prometheus, instances, exporters, args.node_job)
    if args.holder_pid:
        check_holder_alerts(args.prometheus, args.holder_pid, args.node_job)
    print(f"{len(failures)} check(s) failed" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
