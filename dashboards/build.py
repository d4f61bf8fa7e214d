"""The Grafana dashboards of memlock-exporter, as Python data.

Run `python3 alerts/generate.py` to write dashboards/*.json; do not edit the JSON by hand. The
alert thresholds drawn on the panels come from alerts/thresholds.yml, like the rules'.

Every query selects `job=~"$job", instance=~"$instance"` and uses the `$datasource` variable;
scripts/e2e/prometheus.sh runs each query against a real Prometheus scraping the exporter.
"""

SCHEMA_VERSION = 39
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SELECTOR = 'job=~"$job", instance=~"$instance"'
TAG = "memlock-exporter"

PORT_STATES = {0: ("NOP", "red"), 1: ("DOWN", "red"), 2: ("INIT", "orange"), 3: ("ARMED", "orange"), 4: ("ACTIVE", "green"), 5: ("ACTIVE_DEFER", "green")}


def m(name, **matchers):
    """A metric selected by the dashboard's job and instance variables, and by `matchers`:
    label=value for equality, label=(operator, value) for the others."""
    parts = [SELECTOR]
    for label, value in matchers.items():
        operator, value = value if isinstance(value, tuple) else ("=", value)
        parts.append(f'{label}{operator}"{value}"')
    return f"{name}{{{', '.join(parts)}}}"


def r(name, **matchers):
    """A recorded series without an instance label (memlock_job:*, memlock_fleet:*), selected by
    the dashboard's job variable and by `matchers` as in m()."""
    parts = ['job=~"$job"']
    for label, value in matchers.items():
        operator, value = value if isinstance(value, tuple) else ("=", value)
        parts.append(f'{label}{operator}"{value}"')
    return f"{name}{{{', '.join(parts)}}}"


# Links from a table's instance column to the per-node dashboards, for that node and the current
# data source, job and time range.
NODE_DASHBOARDS = (("Node overview", "memlock-node"), ("Processes", "memlock-processes"), ("Jobs and pods", "memlock-workloads"), ("RDMA", "memlock-rdma"))


def node_links(field="instance"):
    links = [
        {"title": f"{title} of ${{__value.text}}", "url": f"/d/{uid}?var-datasource=${{datasource}}&var-job=${{job}}&var-instance=${{__value.raw}}&${{__url_time_range}}"}
        for title, uid in NODE_DASHBOARDS
    ]
    return {"matcher": {"id": "byName", "options": field}, "properties": [{"id": "links", "value": links}]}


def with_pod(expr, identity="instance, job, cgroup"):
    """Adds kube-state-metrics' namespace and pod labels where a series has a pod_uid, and keeps
    the series unchanged where it has none or kube_pod_info is not scraped."""
    return (
        f"(\n  ({expr})\n  * on (pod_uid) group_left (namespace, pod)\n"
        f'  max by (pod_uid, namespace, pod) (label_replace(kube_pod_info, "pod_uid", "$1", "uid", "(.+)"))\n)\n'
        f"or on ({identity})\n({expr})"
    )


# --- panels ---------------------------------------------------------------------------------


def target(expr, legend="", ref="A", table=False):
    t = {"datasource": DATASOURCE, "editorMode": "code", "expr": expr, "refId": ref}
    if table:
        t.update({"format": "table", "instant": True, "range": False})
    else:
        t.update({"legendFormat": legend or "__auto", "range": True})
    return t


def targets(*pairs, table=False):
    return [target(expr, legend, chr(ord("A") + i), table) for i, (expr, legend) in enumerate(pairs)]


def steps(base, *thresholds):
    """Threshold steps: `base` colour below the first value, then (value, colour) pairs."""
    out = [{"color": base, "value": None}]
    out += [{"color": color, "value": value} for value, color in thresholds]
    return {"mode": "absolute", "steps": out}


def timeseries(title, queries, unit, description="", thresholds=None, min_value=None, max_value=None, stack=False, bars=False):
    custom = {
        "drawStyle": "bars" if bars else "line",
        "lineWidth": 1,
        "fillOpacity": 10 if not bars else 80,
        "showPoints": "never",
        "spanNulls": False,
        "stacking": {"mode": "normal" if stack else "none", "group": "A"},
        "thresholdsStyle": {"mode": "dashed" if thresholds else "off"},
    }
    defaults = {"unit": unit, "custom": custom, "color": {"mode": "palette-classic"}}
    defaults["thresholds"] = thresholds or steps("green")
    if min_value is not None:
        defaults["min"] = min_value
    if max_value is not None:
        defaults["max"] = max_value
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "legend": {"displayMode": "table", "placement": "bottom", "showLegend": True, "calcs": ["lastNotNull", "max"]},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "targets": queries,
    }


def stat(title, queries, unit, description="", thresholds=None, mappings=None, no_value="", text_mode="value"):
    defaults = {"unit": unit, "thresholds": thresholds or steps("green"), "color": {"mode": "thresholds"}, "mappings": mappings or []}
    if no_value:
        defaults["noValue"] = no_value
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "background" if thresholds else "value",
            "graphMode": "area" if text_mode == "value" else "none",
            "justifyMode": "auto",
            "orientation": "auto",
            "textMode": text_mode,
            "wideLayout": True,
        },
        "targets": queries,
    }


def table(title, queries, columns, description="", sort_by=None, overrides=None, hidden=("Time", "__name__", "job"), descending=True):
    """A table of instant queries merged into one row per series. `columns` maps a field
    (a label, or "Value #A" for query A) to its display name, in display order."""
    index = {field: i for i, (field, _) in enumerate(columns)}
    exclude = {field: True for field in hidden}
    transformations = [
        {"id": "merge", "options": {}},
        {"id": "organize", "options": {"excludeByName": exclude, "indexByName": index, "renameByName": dict(columns)}},
    ]
    if sort_by:
        transformations.append({"id": "sortBy", "options": {"fields": {}, "sort": [{"field": sort_by, "desc": descending}]}})
    return {
        "type": "table",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "fieldConfig": {"defaults": {"custom": {"align": "auto", "cellOptions": {"type": "auto"}}, "thresholds": steps("green")}, "overrides": overrides or []},
        "options": {"showHeader": True, "cellHeight": "sm", "footer": {"show": False, "reducer": ["sum"], "fields": ""}},
        "transformations": transformations,
        "targets": queries,
    }


def column(name, unit, thresholds=None, gauge=False, mappings=None):
    """A field override for one table column."""
    props = [{"id": "unit", "value": unit}]
    if thresholds:
        props.append({"id": "thresholds", "value": thresholds})
        mode = "gauge" if gauge else "color-background"
        cell = {"type": mode, "mode": "basic"} if gauge else {"type": mode, "mode": "basic"}
        props.append({"id": "custom.cellOptions", "value": cell})
        props.append({"id": "color", "value": {"mode": "thresholds"}})
    if mappings:
        props.append({"id": "mappings", "value": mappings})
    return {"matcher": {"id": "byName", "options": name}, "properties": props}


def value_map(mapping):
    """Grafana value mappings from {value: (text, colour)}."""
    options = {str(k): {"text": text, "color": color, "index": i} for i, (k, (text, color)) in enumerate(mapping.items())}
    return [{"type": "value", "options": options}]


def row(title):
    return {"type": "row", "title": title, "collapsed": False, "panels": []}


# --- dashboards -----------------------------------------------------------------------------


def variables():
    datasource = {
        "type": "datasource",
        "name": "datasource",
        "label": "Data source",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "options": [],
        "refresh": 1,
        "regex": "",
        "skipUrlSync": False,
    }

    def query_variable(name, label, query, multi):
        return {
            "type": "query",
            "name": name,
            "label": label,
            "datasource": DATASOURCE,
            "definition": query,
            "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery", "qryType": 1},
            "current": {},
            "hide": 0,
            "includeAll": multi,
            "allValue": ".+" if multi else None,
            "multi": multi,
            "options": [],
            "refresh": 2,
            "regex": "",
            "skipUrlSync": False,
            "sort": 1,
        }

    return [
        datasource,
        query_variable("job", "Job", "label_values(memlock_exporter_build_info, job)", False),
        query_variable("instance", "Instance", 'label_values(memlock_exporter_build_info{job=~"$job"}, instance)', True),
    ]


def layout(items):
    """Places panels left to right on a 24-column grid; a row starts a new line. `items` are
    (panel, width, height); returns the panels with ids and grid positions."""
    panels, x, y, line_height = [], 0, 0, 0
    for number, (panel, width, height) in enumerate(items, start=1):
        if panel["type"] == "row" or x + width > 24:
            x, y, line_height = 0, y + line_height, 0
        panel = dict(panel, id=number, gridPos={"h": height, "w": width, "x": x, "y": y})
        if panel["type"] == "row":
            y += height
        else:
            x += width
            line_height = max(line_height, height)
        panels.append(panel)
    return panels


def dashboard(uid, title, description, items):
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": [TAG],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "weekStart": "",
        "links": [{"type": "dashboards", "title": "memlock-exporter", "tags": [TAG], "asDropdown": True, "includeVars": True, "keepTime": True}],
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                },
                {
                    "datasource": DATASOURCE,
                    "enable": True,
                    "expr": f'ALERTS{{alertname=~"Memlock.*", alertstate="firing", {SELECTOR}}}',
                    "iconColor": "red",
                    "name": "Memlock alerts",
                    "step": "1m",
                    "tagKeys": "severity",
                    "titleFormat": "{{alertname}}",
                    "textFormat": "{{instance}}",
                },
            ]
        },
        "templating": {"list": variables()},
        "panels": layout(items),
    }


def node_overview(t):
    low = t.value("node_available_low_ratio")
    guard = t.value("node_available_falling_max_available_ratio")
    horizon = t.value("node_available_falling_horizon_seconds")
    window = t.value("node_available_falling_window")
    available = m("memlock_node_memory_available_bytes")
    floor = m("memlock_node_memory_available_floor_bytes")
    # The expression of MemlockNodeMemoryAvailableFalling without its horizon and level guard:
    # seconds until the line fitted over the window reaches the exporter's floor, while falling
    # (0 once below it; the rule's value goes negative there).
    to_floor = f"clamp_min(predict_linear({available}[{window}], 0) - on (instance, job) {floor}, 0)\n/ -(deriv({available}[{window}]) < 0)"
    available_ratio = f'{available} / {m("memlock_node_memory_total_bytes")}'
    unused_hugepages = (
        f'({m("memlock_node_hugepages", state="free")} - ignoring (state) {m("memlock_node_hugepages", state="reserved")})'
        f' / ignoring (state) {m("memlock_node_hugepages", state="total")}'
    )
    overcommit = value_map({0: ("heuristic", "green"), 1: ("always", "green"), 2: ("strict", "red")})
    return dashboard(
        "memlock-node",
        "memlock-exporter / Node overview",
        "Available, locked and pinned memory, hugepages and overcommit of the node: the node-wide limits RDMA registration runs into.",
        [
            (row("Now"), 24, 1),
            (stat("MemAvailable", targets((available_ratio, "")), "percentunit",
                  f"MemAvailable as a share of MemTotal. Red below {low:.0%} (MemlockNodeMemoryAvailableLow); below {guard:.0%} a fast fall towards the floor alerts (MemlockNodeMemoryAvailableFalling).",
                  steps("red", (low, "orange"), (guard, "green"))), 4, 4),
            (stat("Mlocked", targets((m("memlock_node_mlocked_bytes"), "")), "bytes", "Pages locked with mlock(). RDMA registrations are not in it."), 4, 4),
            (stat("Pinned", targets((m("memlock_node_pinned_bytes"), "")), "bytes",
                  "FOLL_PIN pin references held (nr_foll_pin_acquired − nr_foll_pin_released) × page size: RDMA registrations, io_uring fixed buffers, vfio, cudaHostRegister. A page pinned twice counts twice, so this is an upper bound of the pinned pages."), 4, 4),
            (stat("Hugepage pools", targets((m("memlock_node_hugetlb_bytes"), "")), "bytes", "Memory held by hugepage pools of all sizes, taken out of ordinary memory."), 4, 4),
            (stat("Overcommit", targets((m("memlock_node_overcommit_mode"), "")), "none",
                  "vm.overcommit_memory. Strict (2) on an RDMA node makes large allocations (CUDA and framework reservations, mmap) and fork fail at CommitLimit (MemlockNodeStrictOvercommitWithRdma); ibv_reg_mr and mlock are not checked against it.",
                  steps("green", (2, "red")), overcommit), 4, 4),
            (stat("Time to the MemAvailable floor", targets((f'min({m("memlock_trend_exhaustion_seconds", scope="node")})', "")), "s",
                  "The exporter's own estimate from 1 s samples: seconds until MemAvailable falls to its floor (memlock_node_memory_available_floor_bytes) at the current fall. Empty while not falling.",
                  steps("red", (horizon, "green")), no_value="not falling"), 4, 4),
            (row("Memory"), 24, 1),
            (timeseries("MemAvailable against its floor", targets(
                (m("memlock_node_memory_total_bytes"), "MemTotal"),
                (available, "MemAvailable"),
                (floor, "MemAvailable floor"),
                (m("memlock_node_mlocked_bytes"), "Mlocked"),
                (m("memlock_node_pinned_bytes"), "pinned (pin references)"),
                (m("memlock_node_unevictable_bytes"), "Unevictable"),
                (m("memlock_node_hugetlb_bytes"), "hugepage pools"),
            ), "bytes", "When MemAvailable reaches the floor (trend.node_memory_available_floor_ratio of MemTotal, set in the exporter), allocations fail or the OOM killer runs. Mlocked and pinned memory cannot be reclaimed; they are drawn apart and not added up: a page can be both, and pinning memory that is already allocated does not lower MemAvailable.", min_value=0), 12, 8),
            (timeseries("MemAvailable share of MemTotal", targets((available_ratio, "{{instance}}")), "percentunit",
                        f"Dashed lines: {low:.0%} (MemlockNodeMemoryAvailableLow and the hugepage squeeze) and {guard:.0%} (below it a fast fall towards the floor alerts: MemlockNodeMemoryAvailableFalling).",
                        steps("red", (low, "orange"), (guard, "green")), min_value=0, max_value=1), 12, 8),
            (timeseries("Time until MemAvailable reaches its floor", targets(
                (m("memlock_trend_exhaustion_seconds", scope="node"), "exporter trend (1 s samples)"),
                (to_floor, f"Prometheus, predict_linear over {window}"),
            ), "s", f"At the current fall. Dashed line: {horizon:.0f} s, the horizon of MemlockNodeMemoryAvailableFalling. Empty while not falling.",
                steps("red", (horizon, "green")), min_value=0), 12, 8),
            (timeseries("How fast MemAvailable falls", targets(
                (m("memlock_trend_rise_bytes_per_second", scope="node"), "exporter trend (1 s samples)"),
                (f"-deriv({available}[{window}])", f"Prometheus, slope over {window}"),
            ), "binBps", "The rise of memory in use (MemTotal − MemAvailable): positive while MemAvailable falls."), 12, 8),
            (row("Hugepages and overcommit"), 24, 1),
            (timeseries("Hugepages by size and state", targets((m("memlock_node_hugepages"), "{{size_bytes}} B {{state}}")), "none",
                        "Pages per pool. Free pages are neither used nor reserved; they are still unavailable to everything else."), 8, 8),
            (timeseries("Hugepage pool neither used nor reserved", targets((unused_hugepages, "{{size_bytes}} B pages")), "percentunit",
                        f"(free − reserved) / total per page size. Dashed line: {t.value('hugepages_unused_ratio'):.0%}, the squeeze alert's threshold (with MemAvailable low).",
                        steps("green", (t.value("hugepages_unused_ratio"), "orange")), min_value=0, max_value=1), 8, 8),
            (timeseries("Committed memory against CommitLimit", targets(
                (m("memlock_node_committed_bytes"), "Committed_AS"),
                (m("memlock_node_commit_limit_bytes"), "CommitLimit (enforced only in strict mode)"),
            ), "bytes", "With vm.overcommit_memory = 2, allocations fail once Committed_AS reaches CommitLimit.", min_value=0), 8, 8),
            (row("NUMA nodes"), 24, 1),
            (timeseries("Mlocked and pinned per NUMA node", targets(
                (m("memlock_numa_mlocked_bytes"), "node {{numa_node}} Mlocked"),
                (m("memlock_numa_pinned_bytes"), "node {{numa_node}} pinned"),
            ), "bytes", "Registrations pin memory on the NUMA node the buffer lives on.", min_value=0), 12, 8),
            (timeseries("Free memory per NUMA node", targets(
                (m("memlock_numa_memory_free_bytes"), "node {{numa_node}} free"),
                (m("memlock_numa_memory_total_bytes"), "node {{numa_node}} total"),
            ), "bytes", "A node can run out while the machine as a whole has memory left.", min_value=0), 12, 8),
            (row("Exporter"), 24, 1),
            (timeseries("Collector sample age", targets((m("memlock_exporter_collector_sample_age_seconds"), "{{collector}}")), "s",
                        f"Seconds since each collector's latest run, at scrape time. Dashed line: {t.value('sample_stale_seconds')} s (MemlockCollectorSamplesStale).",
                        steps("green", (t.value("sample_stale_seconds"), "red")), min_value=0), 8, 8),
            (timeseries("Collector success", targets((m("memlock_scrape_collector_success"), "{{collector}}")), "none",
                        "1 when the collector's latest run read all its sources (MemlockCollectorFailing when 0).",
                        steps("red", (1, "green")), min_value=0, max_value=1), 8, 8),
            (timeseries("Collector errors", targets(
                (f'sum by (collector, kind) (rate({m("memlock_exporter_collector_errors_total")}[$__rate_interval]))', "{{collector}} {{kind}}"),
            ), "ops", "Errors met by collectors, by kind. Empty while there have been none."), 8, 8),
        ],
    )


def jobs_and_pods(t):
    near = t.value("cgroup_near_limit_ratio")
    process_near = t.value("process_near_limit_ratio")
    # The working set (usage minus inactive page cache), like the cgroup alerts: usage alone sits
    # at the limit whenever a job reads more data than fits, and the kernel reclaims that cache.
    ratio = f'{m("memlock_cgroup_memory_working_set_bytes")} / {m("memlock_cgroup_memory_limit_bytes")}'
    ratio_steps = steps("green", (near, "orange"), (1, "red"))
    process_steps = steps("green", (process_near, "orange"), (1, "red"))
    oom = f'sum without (event) (increase({m("memlock_cgroup_memory_events_total", event=("=~", "oom|oom_kill"))}[$__range]))'
    cgroup_columns = [
        ("instance", "instance"), ("namespace", "namespace"), ("pod", "pod"), ("cgroup", "cgroup"), ("slurm_job", "Slurm job"),
        ("Value #A", "working set / limit"), ("Value #B", "working set"), ("Value #C", "usage (with page cache)"), ("Value #D", "limit"),
        ("Value #E", "locked (VmLck)"), ("Value #F", "pinned (VmPin)"), ("Value #G", "worst process memlock ratio"), ("counter", "worst ratio's counter"),
        ("Value #H", "OOM events"),
    ]
    top = f"topk(50, {ratio})"
    restrict = f"and on (instance, job, cgroup) {top}"
    per_pod = lambda name: f'max by (instance, job, pod_uid) ({m(name, pod_uid=("!=", ""))})'
    per_job = lambda name: f'max by (instance, job, slurm_job) ({m(name, slurm_job=("!=", ""))})'
    pod_table_columns = [
        ("instance", "instance"), ("namespace", "namespace"), ("pod", "pod"), ("pod_uid", "pod uid"),
        ("Value #A", "working set"), ("Value #B", "usage (with page cache)"), ("Value #C", "limit"), ("Value #D", "pinned (VmPin)"),
        ("Value #E", "locked (VmLck)"), ("Value #F", "worst process memlock ratio"),
    ]
    metrics = [
        "memlock_cgroup_memory_working_set_bytes", "memlock_cgroup_memory_usage_bytes", "memlock_cgroup_memory_limit_bytes",
        "memlock_cgroup_pinned_bytes", "memlock_cgroup_locked_bytes", "memlock_cgroup_limit_usage_ratio_max",
    ]
    bytes_columns = lambda names: [column(n, "bytes") for n in names]
    workload_bytes = ["working set", "usage (with page cache)", "limit", "pinned (VmPin)", "locked (VmLck)"]
    # The condition of MemlockCgroupProcessNearLimit: a process near its limit that no
    # per-process series shows (below the filter, or beyond top_n).
    hidden_near = (
        f'{m("memlock_cgroup_limit_usage_ratio_max")} >= {process_near}\n'
        f"unless on (instance, job, cgroup, counter) (\n"
        f'  {m("memlock_process_limit_usage_ratio")} >= {process_near}\n'
        f'  unless on (instance, job, pid) ({m("memlock_process_ipc_lock")} == 1)\n)'
    )
    return dashboard(
        "memlock-workloads",
        "memlock-exporter / Jobs and pods",
        "Per cgroup: working set (usage minus inactive page cache) against the effective memory limit, locked and pinned sums, the worst process's memlock ratio; Kubernetes pods (joined through kube_pod_info{uid}) and Slurm jobs.",
        [
            (table("Cgroups closest to their memory limit", targets(
                (with_pod(top), ""),
                (with_pod(f'{m("memlock_cgroup_memory_working_set_bytes")} {restrict}'), ""),
                (with_pod(f'{m("memlock_cgroup_memory_usage_bytes")} {restrict}'), ""),
                (with_pod(f'{m("memlock_cgroup_memory_limit_bytes")} {restrict}'), ""),
                (with_pod(f'{m("memlock_cgroup_locked_bytes")} {restrict}'), ""),
                (with_pod(f'{m("memlock_cgroup_pinned_bytes")} {restrict}'), ""),
                (with_pod(f'{m("memlock_cgroup_limit_usage_ratio_max")} {restrict}'), ""),
                (with_pod(f"{oom} {restrict}"), ""),
                table=True,
            ), cgroup_columns,
                f"The 50 cgroups with the highest working set / effective limit (the working set is usage minus inactive page cache, which the kernel reclaims at the limit). Orange from {near:.0%} (MemlockCgroupNearMemoryLimit). Worst process memlock ratio: the highest VmPin / soft limit or VmLck / soft limit of the cgroup's processes, and which counter it is (pinned: ibv_reg_mr fails at 100%; locked: mlock fails); orange from {process_near:.0%} (MemlockCgroupProcessNearLimit when no per-process series shows that process); CAP_IPC_LOCK holders are left out. Pod names need kube-state-metrics.",
                sort_by="working set / limit",
                overrides=[column("working set / limit", "percentunit", ratio_steps, gauge=True), column("worst process memlock ratio", "percentunit", process_steps)]
                + bytes_columns(["working set", "usage (with page cache)", "limit", "locked (VmLck)", "pinned (VmPin)"])
                + [column("OOM events", "none", steps("green", (1, "red")))],
                hidden=("Time", "__name__", "job", "pod_uid", "container_id", "qos_class", "slurm_step", "systemd_unit")), 24, 10),
            (timeseries("Working set / effective limit", targets((f"topk(10, {ratio})", "{{cgroup}}")), "percentunit",
                        f"The 10 cgroups nearest their limit, as working set (usage minus inactive page cache) / effective limit. Dashed lines: {near:.0%} (MemlockCgroupNearMemoryLimit) and the limit.",
                        ratio_steps, min_value=0), 12, 8),
            (timeseries("Worst process memlock ratio per cgroup", targets((f'topk(10, {m("memlock_cgroup_limit_usage_ratio_max")})', "{{cgroup}} {{counter}}")), "percentunit",
                        f"The highest VmPin / soft memlock limit (counter pinned) or VmLck / soft memlock limit (counter locked) of the cgroup's processes, over every process the exporter scanned (exported or not), CAP_IPC_LOCK holders left out. Dashed lines: {process_near:.0%} (MemlockProcessNearLimit, or MemlockCgroupProcessNearLimit for processes without their own series) and the limit.",
                        process_steps, min_value=0), 12, 8),
            (table("Cgroups with a process near its memlock limit that has no per-process series", targets((hidden_near, ""), table=True),
                   [("instance", "instance"), ("cgroup", "cgroup"), ("pod_uid", "pod uid"), ("slurm_job", "Slurm job"), ("systemd_unit", "systemd unit"), ("Value", "worst process memlock ratio"),
                    ("counter", "counter")],
                   f"MemlockCgroupProcessNearLimit: the cgroup's worst process is at {process_near:.0%} or more of its soft memlock limit in VmPin (counter pinned) or VmLck (counter locked) and is below the per-process filter (min_bytes) or beyond top_n, so the Processes dashboard does not list it. Empty is good.",
                   overrides=[column("worst process memlock ratio", "percentunit", process_steps)],
                   hidden=("Time", "__name__", "job", "container_id", "qos_class", "slurm_step")), 24, 5),
            (timeseries("Pinned memory per cgroup", targets((f'topk(10, {m("memlock_cgroup_pinned_bytes")})', "{{cgroup}}")), "bytes",
                        "Sum of VmPin over the cgroup's own processes: RDMA registrations of host memory and of GPU memory through nvidia-peermem (dma-buf registrations are not charged), io_uring fixed buffers. Pinned host pages are charged to the cgroup as ordinary memory when they are faulted in; VmPin says which of them are pinned.", min_value=0), 12, 8),
            (timeseries("Locked memory per cgroup", targets((f'topk(10, {m("memlock_cgroup_locked_bytes")})', "{{cgroup}}")), "bytes",
                        "Sum of VmLck over the cgroup's own processes: mlock()ed memory and vfio DMA mappings.", min_value=0), 12, 8),
            (timeseries("OOM events", targets(
                (f'sum by (instance, cgroup, event) (increase({m("memlock_cgroup_memory_events_total", event=("=~", "oom|oom_kill"))}[$__rate_interval])) > 0', "{{cgroup}} {{event}}"),
            ), "none", "OOM and OOM-kill events per cgroup (MemlockCgroupOOMEvents when any).", steps("green", (1, "red")), bars=True), 12, 8),
            (timeseries("rdma cgroup: objects against rdma.max", targets(
                (m("memlock_cgroup_rdma", kind="current"), "{{cgroup}} {{device}} {{resource}}"),
                (m("memlock_cgroup_rdma", kind="max"), "{{cgroup}} {{device}} {{resource}} max"),
            ), "none", "hca_handle and hca_object counts of the rdma cgroup controller. Over rdma.max, verbs calls fail with EAGAIN, not ENOMEM."), 12, 8),
            (row("Kubernetes pods and Slurm jobs"), 24, 1),
            (table("Kubernetes pods", targets(*[(with_pod(per_pod(name), "instance, job, pod_uid"), "") for name in metrics], table=True),
                   pod_table_columns,
                   "Per pod, the largest of its cgroups (the pod cgroup itself, which holds its containers). Working set: usage minus inactive page cache. Namespace and pod name come from kube_pod_info{uid}.",
                   sort_by="working set",
                   overrides=bytes_columns(workload_bytes) + [column("worst process memlock ratio", "percentunit", process_steps)]), 24, 8),
            (table("Slurm jobs", targets(*[(per_job(name), "") for name in metrics], table=True),
                   [("instance", "instance"), ("slurm_job", "Slurm job"), ("Value #A", "working set"), ("Value #B", "usage (with page cache)"), ("Value #C", "limit"),
                    ("Value #D", "pinned (VmPin)"), ("Value #E", "locked (VmLck)"), ("Value #F", "worst process memlock ratio")],
                   "Per Slurm job, the largest of its cgroups (the job cgroup, which holds its steps). Working set: usage minus inactive page cache.",
                   sort_by="working set",
                   overrides=bytes_columns(workload_bytes) + [column("worst process memlock ratio", "percentunit", process_steps)]), 24, 8),
        ],
    )


def processes(t):
    near = t.value("process_near_limit_ratio")
    too_low = t.value("process_limit_too_low_bytes")
    ratio = m("memlock_process_limit_usage_ratio")
    # One row per process: its worst ratio (either counter) selects and sorts; the pinned and
    # locked ratios are columns of their own.
    worst = f"max without (counter) ({ratio})"
    top = f"topk(50, {worst})"
    restrict = f"and on (instance, job, pid) {top}"
    ratio_steps = steps("green", (near, "orange"), (1, "red"))
    soft = f'max without (kind) ({m("memlock_process_limit_bytes", kind="soft")})'
    hard = f'max without (kind) ({m("memlock_process_limit_bytes", kind="hard")})'
    too_low_expr = (
        f"({soft} < {too_low})\n"
        f'and on (instance, job, pid) ({m("memlock_process_pinned_bytes")} > 0)\n'
        f'and on (instance, job, pid) {m("memlock_node:memlock_rdma_registrant:info")}\n'
        f'unless on (instance, job, pid) ({m("memlock_process_ipc_lock")} == 1)'
    )
    yes_no = value_map({0: ("no", "text"), 1: ("yes", "green")})
    columns = [
        ("instance", "instance"), ("pid", "pid"), ("comm", "comm"), ("cgroup", "cgroup"), ("slurm_job", "Slurm job"), ("pod_uid", "pod uid"),
        ("Value #A", "worst ratio"), ("Value #B", "VmPin / limit"), ("Value #C", "VmLck / limit"), ("Value #D", "pinned (VmPin)"),
        ("Value #E", "locked (VmLck)"), ("Value #F", "soft limit"), ("Value #G", "hard limit"), ("Value #H", "CAP_IPC_LOCK"),
    ]
    return dashboard(
        "memlock-processes",
        "memlock-exporter / Processes",
        "Processes against their memlock limit: VmPin (checked by every ibv_reg_mr) and VmLck (checked by every mlock), each over the soft RLIMIT_MEMLOCK on its own.",
        [
            (table("Processes closest to their memlock limit", targets(
                (top, ""),
                (f'max without (counter) ({m("memlock_process_limit_usage_ratio", counter="pinned")}) {restrict}', ""),
                (f'max without (counter) ({m("memlock_process_limit_usage_ratio", counter="locked")}) {restrict}', ""),
                (f'{m("memlock_process_pinned_bytes")} {restrict}', ""),
                (f'{m("memlock_process_locked_bytes")} {restrict}', ""),
                (f"{soft} {restrict}", ""),
                (f"{hard} {restrict}", ""),
                (f'{m("memlock_process_ipc_lock")} {restrict}', ""),
                table=True,
            ), columns,
                f"The 50 processes with the highest ratio to their soft memlock limit, on either counter: VmPin / limit (the next ibv_reg_mr past 100% fails with ENOMEM) and VmLck / limit (the next mlock past 100% fails), which the kernel checks separately. Orange from {near:.0%} (MemlockProcessNearLimit), red at the limit. Processes with an unlimited limit have no ratio; with CAP_IPC_LOCK the limit is not enforced.",
                sort_by="worst ratio",
                overrides=[column("worst ratio", "percentunit", ratio_steps, gauge=True), column("VmPin / limit", "percentunit", ratio_steps),
                           column("VmLck / limit", "percentunit", ratio_steps), column("CAP_IPC_LOCK", "none", mappings=yes_no)]
                + [column(n, "bytes") for n in ("pinned (VmPin)", "locked (VmLck)", "soft limit", "hard limit")],
                hidden=("Time", "__name__", "job", "container_id", "qos_class", "slurm_step", "systemd_unit")), 24, 10),
            (table("Processes that pin memory under a memlock limit too low for RDMA", targets((too_low_expr, ""), table=True),
                   [("instance", "instance"), ("pid", "pid"), ("comm", "comm"), ("cgroup", "cgroup"), ("Value", "soft limit")],
                   f"VmPin > 0, an RDMA registrant (MRs in RDMA netlink or a verbs, UCX, libfabric, MPI, NVSHMEM or cuFile library mapped), soft limit below {too_low / 2**30:g} GiB, no CAP_IPC_LOCK (MemlockProcessLimitTooLowForRdma). Empty is good.",
                   overrides=[column("soft limit", "bytes", steps("red", (too_low, "green")))]), 24, 6),
            (timeseries("Memlock ratio of the top processes, per counter", targets((f"topk(10, {ratio})", "{{pid}} {{comm}} {{counter}}")), "percentunit",
                        f"VmPin / soft memlock limit (pinned: ibv_reg_mr fails past 1) and VmLck / soft memlock limit (locked: mlock fails past 1), one line per process and counter. Dashed lines: {near:.0%} (MemlockProcessNearLimit) and the limit.",
                        ratio_steps, min_value=0), 12, 8),
            (timeseries("Time until the memlock limit (exporter trend)", targets((m("memlock_trend_exhaustion_seconds", scope="process"), "{{pid}} {{comm}} {{counter}}")), "s",
                        f"The exporter's estimate from 1 s samples, per counter: VmPin (pinned) or VmLck (locked) reaching the soft limit. Dashed line: {t.value('process_exhaustion_horizon_seconds'):.0f} s, the horizon of MemlockProcessLimitExhaustionPredicted. Empty while nothing rises.",
                        steps("red", (t.value("process_exhaustion_horizon_seconds"), "green")), min_value=0), 12, 8),
            (timeseries("Pinned memory (VmPin) of the top processes", targets((f'topk(10, {m("memlock_process_pinned_bytes")})', "{{pid}} {{comm}}")), "bytes",
                        "RDMA registrations (host memory, and GPU memory registered through nvidia-peermem; not dma-buf), verbs queues and io_uring fixed buffers: this is what ibv_reg_mr is checked against.", min_value=0), 12, 8),
            (timeseries("Locked memory (VmLck) of the top processes", targets((f'topk(10, {m("memlock_process_locked_bytes")})', "{{pid}} {{comm}}")), "bytes",
                        "mlock()ed memory and vfio DMA mappings, checked separately against the same limit.", min_value=0), 12, 8),
            (stat("Tracked processes", targets((f'count({m("memlock_process_pinned_bytes")})', "")), "none", "Processes the exporter reports (those holding locked or pinned memory, or matching the name pattern)."), 8, 4),
            (stat("Unlimited soft limit", targets((f'count({m("memlock_process_limit_unlimited", kind="soft")} == 1)', "")), "none", "Processes whose soft memlock limit is unlimited.", no_value="0"), 8, 4),
            (stat("With CAP_IPC_LOCK", targets((f'count({m("memlock_process_ipc_lock")} == 1)', "")), "none", "Processes the kernel exempts from the memlock limit.", no_value="0"), 8, 4),
        ],
    )


def rdma(t):
    errors = t.value("rdma_registration_error_counters")
    states = value_map(PORT_STATES)
    phys_states = value_map({1: ("Sleep", "orange"), 2: ("Polling", "red"), 3: ("Disabled", "red"), 4: ("Training", "orange"),
                             5: ("LinkUp", "green"), 6: ("ErrorRecovery", "red"), 7: ("PhyTest", "orange")})
    port_traffic = "port_(xmit|rcv)_data_bytes"
    driver_traffic = "(tx|rx)_bytes"
    error_counters = ".*(err|discard|dropped|downed|recovery|overrun|integrity).*"
    link_layer = f'* on (instance, job, device, port) group_left (link_layer) {m("memlock_rdma_port_info")}'
    return dashboard(
        "memlock-rdma",
        "memlock-exporter / RDMA",
        "RDMA devices and ports, their counters, and the memory registered per device and per process.",
        [
            (table("Devices", targets((m("memlock_rdma_device_info"), ""), table=True),
                   [("instance", "instance"), ("device", "device"), ("hca_type", "HCA type"), ("fw_ver", "firmware"), ("board_id", "board"),
                    ("node_type", "node type"), ("node_guid", "node GUID")],
                   "From /sys/class/infiniband.", hidden=("Time", "__name__", "job", "Value")), 12, 8),
            (table("Ports", targets(
                (f'{m("memlock_rdma_port_state")} {link_layer}', ""),
                (f'{m("memlock_rdma_port_phys_state")} {link_layer}', ""),
                (f'{m("memlock_rdma_port_rate_bytes_per_second")} {link_layer}', ""),
                table=True,
            ), [("instance", "instance"), ("device", "device"), ("port", "port"), ("link_layer", "link layer"), ("Value #A", "state"),
                ("Value #B", "physical state"), ("Value #C", "rate")],
                "Port state (4 is ACTIVE; MemlockRdmaPortNotActive below it), physical state and signalling rate.",
                overrides=[column("state", "none", steps("red", (4, "green")), mappings=states),
                           column("physical state", "none", mappings=phys_states), column("rate", "binBps")]), 12, 8),
            (timeseries("Port state", targets((m("memlock_rdma_port_state"), "{{device}} port {{port}}")), "none",
                        "Dashed line: ACTIVE (4). Below it MemlockRdmaPortNotActive fires.", steps("red", (4, "green")), min_value=0, max_value=5), 12, 8),
            (timeseries("Registration errors", targets(
                (f'increase({m("memlock_rdma_hw_stat_total", counter=("=~", errors))}[$__rate_interval])', "{{device}} {{counter}}"),
            ), "none", f"Driver counters of failed registrations ({errors}; EFA has reg_mr_err, mlx5 has none). Any is MemlockRdmaRegistrationErrors.",
                steps("green", (1, "red")), bars=True), 12, 8),
            (timeseries("Refused registrations and locks (failures collector)", targets(
                (f'sum by (call, errno, cause) (increase({m("memlock_node_registration_failures_total")}[$__rate_interval]))', "{{call}} {{errno}} {{cause}}"),
            ), "none", "Refusals the kernel made, traced with kprobes by the opt-in failures collector (--collector.failures): ib_umem_get is ibv_reg_mr, do_mlock mlock, __io_account_mem io_uring buffers, user_shm_lock SHM_LOCK. cause memlock: past the soft memlock limit; cgroup_memory: the cgroup at its limit. Any pages MemlockRegistrationFailed (fast path) and MemlockKernelRefusedRegistration. Empty where the collector is off; memlock_failures_supported says why it cannot run.",
                steps("green", (1, "red")), bars=True), 12, 8),
            (table("Refused registrations per process (failures collector)", targets(
                (f'{m("memlock_registration_failures_total")}', ""),
                (f'{m("memlock_registration_failure_requested_bytes")}', ""),
                table=True,
            ), [("instance", "instance"), ("pid", "pid"), ("comm", "comm"), ("cgroup", "cgroup"), ("call", "call"), ("errno", "errno"), ("cause", "cause"),
                ("Value #A", "refusals"), ("Value #B", "last size asked")],
                "Each process the kernel refused, with the size its last refused request asked for (at most 64 series per node; memlock_registration_failures_overflow_total counts the rest).",
                sort_by="refusals", overrides=[column("last size asked", "bytes")]), 12, 8),
            (timeseries("Port traffic", targets(
                (f'rate({m("memlock_rdma_port_stat_total", counter=("=~", port_traffic))}[$__rate_interval])', "{{device}}/{{port}} {{counter}}"),
                (f'rate({m("memlock_rdma_hw_stat_total", counter=("=~", driver_traffic))}[$__rate_interval])', "{{device}}/{{port}} {{counter}}"),
            ), "binBps", "Bytes sent and received per port: IBTA port counters (mlx5), or driver counters where the device has no PMA (EFA, bnxt_re)."), 12, 8),
            (timeseries("Port error counters", targets(
                (f'rate({m("memlock_rdma_port_stat_total", counter=("=~", error_counters))}[$__rate_interval]) > 0', "{{device}}/{{port}} {{counter}}"),
                (f'rate({m("memlock_rdma_hw_stat_total", counter=("=~", error_counters))}[$__rate_interval]) > 0', "{{device}}/{{port}} {{counter}}"),
            ), "ops", "Link and receive errors, discards, link downs and failed verbs calls per second; empty while there are none."), 12, 8),
            (timeseries("Registered memory per device", targets((m("memlock_rdma_mr_registered_bytes"), "{{device}}")), "bytes",
                        "Sum of MR lengths from RDMA netlink (rdma resource show mr), including ODP and dma-buf MRs that are not charged to VmPin.", min_value=0), 12, 8),
            (timeseries("Registered on the device (reg_pages) against pinned memory", targets(
                (m("memlock_rdma_device_registered_bytes"), "{{device}} registered (reg_pages)"),
                (f'sum by (instance) ({m("memlock_cgroup_pinned_bytes")})', "VmPin, all processes"),
                (m("memlock_node_pinned_bytes"), "node pin references (nr_foll_pin)"),
            ), "bytes",
                "mlx5's reg_pages × page size: every live user registration of the device, host memory and dma-buf GPU memory alike (ODP not counted). VmPin summed over every scanned process is what the memlock limits are checked against: host memory and nvidia-peermem GPU memory, per registration and per device, plus verbs queues and io_uring buffers. Registered well above VmPin means dma-buf registrations, which are not charged. The node's pin references count host pages only (GPU BAR pages have no struct page).",
                min_value=0), 12, 8),
            (timeseries("RDMA resources", targets(
                (m("memlock_rdma_resources"), "{{device}} {{type}}"),
                (m("memlock_rdma_hw_objects", counter=("=~", "active_.*")), "{{device}} {{counter}}"),
            ), "none", "Objects per device and type (mr, pd, qp, cq, ctx...) from RDMA netlink, and the bnxt_re driver's active_* gauges."), 12, 8),
            (table("Registered memory per process", targets(
                (f'topk(50, sum by (instance, job, pid, comm) ({m("memlock_rdma_process_mr_bytes")}))', ""),
                (f'max by (instance, job, pid, comm) ({m("memlock_process_pinned_bytes")})', ""),
                (f'max by (instance, job, pid, comm) ({m("memlock_process_limit_bytes", kind="soft")})', ""),
                table=True,
            ), [("instance", "instance"), ("pid", "pid"), ("comm", "comm"), ("Value #A", "registered (all devices)"), ("Value #B", "pinned (VmPin)"), ("Value #C", "soft memlock limit")],
                "What each process registered, against what the kernel charged (VmPin) and its limit. Registered above VmPin means dma-buf or ODP MRs, which are not charged; nvidia-peermem GPU registrations are charged like host memory. Kernel MRs have no pid.",
                sort_by="registered (all devices)",
                overrides=[column(n, "bytes") for n in ("registered (all devices)", "pinned (VmPin)", "soft memlock limit")]), 12, 8),
            (timeseries("Registered memory per process and device", targets((f'topk(10, {m("memlock_rdma_process_mr_bytes")})', "{{pid}} {{comm}} {{device}}")), "bytes",
                        "The 10 largest.", min_value=0), 12, 8),
        ],
    )


def cluster(t):
    """The fleet on one page: nodes by static cause, jobs by headroom and memlock ratio, version
    skew. Job rows come from the memlock_job:* recording rules (alerts/rules.template.yml)."""
    too_low = t.value("process_limit_too_low_bytes")
    near = t.value("cgroup_near_limit_ratio")
    process_near = t.value("process_near_limit_ratio")
    low = t.value("node_available_low_ratio")
    # The conditions of the node-level alerts, per node (MemlockProcessLimitTooLowForRdma,
    # MemlockCgroupNearMemoryLimit, MemlockNodeHugepagesUnusedWhileMemoryLow,
    # MemlockNodeStrictOvercommitWithRdma, MemlockRdmaPortNotActive) without their `for`.
    causes = [
        ("memlock limit too low for RDMA", "processes",
         f'count by (instance, job) (\n  (max without (kind) ({m("memlock_process_limit_bytes", kind="soft")}) < {too_low})\n'
         f'  and on (instance, job, pid) ({m("memlock_process_pinned_bytes")} > 0)\n'
         f'  and on (instance, job, pid) {m("memlock_node:memlock_rdma_registrant:info")}\n'
         f'  unless on (instance, job, pid) ({m("memlock_process_ipc_lock")} == 1)\n)',
         f"RDMA registrants that pin memory under a soft memlock limit below {too_low / 2**30:g} GiB without CAP_IPC_LOCK (MemlockProcessLimitTooLowForRdma)."),
        ("cgroup near its limit", "cgroups",
         f'count by (instance, job) (\n  ({m("memlock_cgroup_memory_working_set_bytes")} or {m("memlock_cgroup_memory_usage_bytes")})\n'
         f'  / {m("memlock_cgroup_memory_limit_bytes")} >= {near}\n)',
         f"Cgroups whose working set is at {near:.0%} or more of their effective memory limit (MemlockCgroupNearMemoryLimit)."),
        ("hugepage squeeze", "pools",
         f'count by (instance, job) (\n  ({m("memlock_node_hugepages", state="free")} - ignoring (state) {m("memlock_node_hugepages", state="reserved")})\n'
         f'  / ignoring (state) {m("memlock_node_hugepages", state="total")} > {t.value("hugepages_unused_ratio")}\n'
         f'  and on (instance, job) ({m("memlock_node_hugetlb_bytes")} > {t.value("hugepages_min_pool_ratio")} * {m("memlock_node_memory_total_bytes")})\n'
         f'  and on (instance, job) ({m("memlock_node_memory_available_bytes")} < {low} * {m("memlock_node_memory_total_bytes")})\n)',
         f"Hugepage pools more than {t.value('hugepages_unused_ratio'):.0%} unused while MemAvailable is below {low:.0%} (MemlockNodeHugepagesUnusedWhileMemoryLow)."),
        ("strict overcommit", "mode",
         f'{m("memlock_node_overcommit_mode")} == 2\nand on (instance, job) group by (instance, job) ({m("memlock_rdma_device_info")})',
         "vm.overcommit_memory = 2 on a node with RDMA devices (MemlockNodeStrictOvercommitWithRdma)."),
        ("RDMA port not active", "ports",
         f'count by (instance, job) (\n  {m("memlock_rdma_port_state")} < 4\n'
         f'  and on (instance, job, device, port) {m("memlock_node:memlock_rdma_port_in_use:info")}\n)',
         "RDMA ports in use (link up, or traffic seen) below ACTIVE: DOWN, INIT or ARMED (MemlockRdmaPortNotActive)."),
        ("version skew", "components",
         f'count by (instance, job) (\n  {m("memlock_node:memlock_software_version:info")}\n  * on (job, component, version) group_left ()\n'
         f'  (\n    {r("memlock_fleet:memlock_software_version:nodes")}\n    < on (job, component) group_left ()\n'
         f'    max by (job, component) ({r("memlock_fleet:memlock_software_version:nodes")})\n  )\n)',
         "Components (memlock_node_software_info labels) of which the node runs a version fewer nodes of the fleet run than the most common one: the odd ones out of the fleet (a 50/50 split marks no node; the version skew tables show it)."),
    ]
    red_from_1 = steps("green", (1, "red"))
    cause_stats = [
        (stat(f"Nodes: {title}", targets((f"count({expr})", "")), "none", f"Nodes with any: {description}", red_from_1, no_value="0"), 4, 4)
        for title, _, expr, description in causes
    ]
    cause_table = table(
        "Nodes by static cause",
        targets(*[(expr, "") for _, _, expr, _ in causes], table=True),
        [("instance", "instance")] + [(f"Value #{chr(ord('A') + i)}", f"{title} ({unit})") for i, (title, unit, _, _) in enumerate(causes)],
        "One row per node with at least one static cause: the count of processes, cgroups, pools, ports or components with it. "
        + " ".join(description for _, _, _, description in causes)
        + " The instance links to the node's dashboards.",
        overrides=[node_links()] + [column(f"{title} ({unit})", "none", red_from_1) for title, unit, _, _ in causes],
    )

    headroom = r("memlock_job:memlock_cgroup_memory_headroom_bytes:min")
    ratio = "memlock_job:memlock_process_limit_usage_ratio:max"
    worst_ratio = f"max without (counter) ({r(ratio)})"
    identity = "job, slurm_job, pod_uid"
    job_columns = [
        ("slurm_job", "Slurm job"), ("namespace", "namespace"), ("pod", "pod"), ("pod_uid", "pod uid"),
        ("Value #A", "headroom (limit − working set)"), ("Value #B", "working set / limit"), ("Value #C", "nodes"),
        ("Value #D", "VmPin / memlock limit"), ("Value #E", "VmLck / memlock limit"), ("Value #F", "pinned (VmPin)"),
        ("Value #G", "locked (VmLck)"), ("Value #H", "most versions of a component"),
    ]

    def job_table(title, select, description, sort_by, descending):
        restrict = f"and on ({identity}) {select}"
        return table(title, targets(
            (with_pod(f"{headroom} {restrict}", identity), ""),
            (with_pod(f'{r("memlock_job:memlock_cgroup_memory_working_set_ratio:max")} {restrict}', identity), ""),
            (with_pod(f'{r("memlock_job:memlock_nodes:count")} {restrict}', identity), ""),
            (with_pod(f'max without (counter) ({r(ratio, counter="pinned")}) {restrict}', identity), ""),
            (with_pod(f'max without (counter) ({r(ratio, counter="locked")}) {restrict}', identity), ""),
            (with_pod(f'{r("memlock_job:memlock_cgroup_pinned_bytes:sum")} {restrict}', identity), ""),
            (with_pod(f'{r("memlock_job:memlock_cgroup_locked_bytes:sum")} {restrict}', identity), ""),
            (f'max without (component) ({r("memlock_job:memlock_software_versions:count")}) {restrict}', ""),
            table=True,
        ), job_columns, description, sort_by=sort_by, descending=descending,
            overrides=[column("headroom (limit − working set)", "bytes", steps("red", (2**30, "orange"), (4 * 2**30, "green"))),
                       column("working set / limit", "percentunit", steps("green", (near, "orange"), (1, "red")), gauge=True),
                       column("VmPin / memlock limit", "percentunit", steps("green", (process_near, "orange"), (1, "red"))),
                       column("VmLck / memlock limit", "percentunit", steps("green", (process_near, "orange"), (1, "red"))),
                       column("pinned (VmPin)", "bytes"), column("locked (VmLck)", "bytes"),
                       column("most versions of a component", "none", steps("green", (2, "orange")))])

    job_description = (
        "One row per Slurm job (slurm_job) and Kubernetes pod (pod_uid; namespace and name from kube-state-metrics' kube_pod_info), "
        "across its nodes, from the memlock_job:* recording rules. Headroom: the smallest effective memory limit minus working set of the job's cgroups; "
        f"working set / limit: the largest (orange from {near:.0%}, MemlockCgroupNearMemoryLimit). VmPin / VmLck over the soft memlock limit: the worst process "
        f"of the job per counter, CAP_IPC_LOCK holders left out (orange from {process_near:.0%}). Pinned and locked: summed over every scanned process. "
        "Most versions of a component: more than 1 is version skew within the job (MemlockJobSoftwareVersionSkew; the tables below say which)."
    )
    node_headroom = (
        f'bottomk(50,\n  min by (instance, job, slurm_job) ({m("memlock_cgroup_memory_limit_bytes", slurm_job=("!=", ""))} - ({m("memlock_cgroup_memory_working_set_bytes", slurm_job=("!=", ""))} or {m("memlock_cgroup_memory_usage_bytes", slurm_job=("!=", ""))}))\n'
        f'  or\n  min by (instance, job, pod_uid) ({m("memlock_cgroup_memory_limit_bytes", pod_uid=("!=", ""))} - ({m("memlock_cgroup_memory_working_set_bytes", pod_uid=("!=", ""))} or {m("memlock_cgroup_memory_usage_bytes", pod_uid=("!=", ""))}))\n)'
    )
    fleet_versions = r("memlock_fleet:memlock_software_version:nodes")
    job_versions = r("memlock_job:memlock_software_version:nodes")
    minority = (
        f'{m("memlock_node:memlock_software_version:info")}\n* on (job, component, version) group_left ()\n'
        f"(\n  {fleet_versions}\n  < on (job, component) group_left ()\n  max by (job, component) ({fleet_versions})\n)"
    )
    version_columns = [("component", "component"), ("version", "version"), ("Value", "nodes")]
    return dashboard(
        "memlock-cluster",
        "memlock-exporter / Cluster",
        "The fleet on one page: nodes by static cause (limits, cgroups, hugepages, overcommit, RDMA ports, version skew), jobs and pods across their nodes by headroom and memlock ratio, and software version skew. Links lead to each node's dashboards.",
        [
            (row("Nodes by static cause"), 24, 1),
            *cause_stats,
            (cause_table, 24, 8),
            (row("Jobs and pods across their nodes"), 24, 1),
            (job_table("Jobs by worst headroom", f"bottomk(50, {headroom})",
                       job_description + " The 50 with the least headroom, least first.", "headroom (limit − working set)", False), 24, 10),
            (job_table("Jobs by worst memlock ratio", f"topk(50, {worst_ratio})",
                       job_description + " The 50 with the highest memlock ratio of either counter, highest first.", "VmPin / memlock limit", True), 24, 10),
            (table("Nodes of the jobs with the least headroom", targets((node_headroom, ""), table=True),
                   [("instance", "instance"), ("slurm_job", "Slurm job"), ("pod_uid", "pod uid"), ("Value", "headroom (limit − working set)")],
                   "Per node and job (or pod), the smallest effective memory limit minus working set of its cgroups there: which nodes of a job are closest to the limit. The instance links to the node's dashboards.",
                   sort_by="headroom (limit − working set)", descending=False,
                   overrides=[node_links(), column("headroom (limit − working set)", "bytes", steps("red", (2**30, "orange"), (4 * 2**30, "green")))]), 12, 8),
            (timeseries("Smallest headroom per job", targets((f"bottomk(10, {headroom})", "{{slurm_job}}{{pod_uid}}")), "bytes",
                        "The 10 jobs and pods with the least cgroup memory headroom (effective limit − working set), across their nodes.", min_value=0), 12, 8),
            (timeseries("Worst memlock ratio per job", targets((f"topk(10, {r(ratio)})", "{{slurm_job}}{{pod_uid}} {{counter}}")), "percentunit",
                        f"VmPin (pinned) and VmLck (locked) over the soft memlock limit, the worst process of each job across its nodes. Dashed lines: {process_near:.0%} (MemlockProcessNearLimit, MemlockJobNearLimit on 2 or more nodes) and the limit.",
                        steps("green", (process_near, "orange"), (1, "red")), min_value=0), 12, 8),
            (timeseries("Nodes per job", targets((f'topk(10, {r("memlock_job:memlock_nodes:count")})', "{{slurm_job}}{{pod_uid}}")), "none",
                        "The 10 jobs on the most nodes (memlock_job:memlock_nodes:count). A pod is on 1; more means the same pod_uid is scraped from two targets.", min_value=0), 12, 8),
            (row("Software version skew"), 24, 1),
            (table("Version skew in the fleet", targets((f"{fleet_versions}\nand on (job, component) ({r('memlock_fleet:memlock_software_versions:count')} > 1)", ""), table=True),
                   version_columns,
                   "Components (labels of memlock_node_software_info) with more than one version across the nodes of the scrape job, and how many nodes run each; an empty version is a component absent on those nodes. Expected during a rolling upgrade or across node pools of different hardware (recorded, not alerted).",
                   sort_by="nodes", hidden=("Time", "__name__", "job")), 8, 8),
            (table("Version skew within jobs", targets((f"{job_versions}\nand on (job, slurm_job, component) ({r('memlock_job:memlock_software_versions:count')} > 1)", ""), table=True),
                   [("slurm_job", "Slurm job")] + version_columns,
                   "Slurm jobs whose nodes run different versions of a component, or whose processes map different NCCL releases (component nccl), and on how many of the job's nodes each (MemlockJobSoftwareVersionSkew).",
                   sort_by="nodes", hidden=("Time", "__name__", "job")), 8, 8),
            (table("Nodes on a minority version", targets((minority, ""), table=True),
                   [("instance", "instance")] + version_columns[:2] + [("Value", "nodes with this version")],
                   "Nodes running a version of a component that fewer nodes run than its most common version: the odd ones out (a 50/50 split lists none; see the fleet table). The instance links to the node's dashboards.",
                   sort_by="nodes with this version", descending=False, overrides=[node_links()]), 8, 8),
        ],
    )


def dashboards(thresholds):
    """{file name: dashboard} for every dashboard."""
    return {
        "node-overview.json": node_overview(thresholds),
        "jobs-and-pods.json": jobs_and_pods(thresholds),
        "processes.json": processes(thresholds),
        "rdma.json": rdma(thresholds),
        "cluster.json": cluster(thresholds),
    }
