#!/usr/bin/env python3
"""The node-problem-detector custom plugin: memlock-plugin-monitor.json against NPD's config
schema and validation, and `memlock-exporter check` run the way NPD runs a plugin, against its
protocol. Sources (kubernetes/node-problem-detector at 6632ca67):

- pkg/custompluginmonitor/types/config.go: the JSON keys, ApplyConfiguration() (Go durations)
  and Validate() (plugin "custom", intervals above zero, a rule's timeout at most the global
  one, rule paths that exist, a default condition for every permanent rule);
- pkg/custompluginmonitor/types/types.go and pkg/types/types.go: rule and condition keys,
  "temporary" and "permanent";
- pkg/custompluginmonitor/plugin/plugin.go, Plugin.run(): the plugin runs in its own process
  group (pkg/util/exec_unix.go), is killed with the group at the timeout, up to 4 KiB of stdout
  are read, trimmed and cut at max_output_length; exit 0 is OK, 1 NonOK, anything else Unknown;
- pkg/custompluginmonitor/custom_plugin_monitor.go, toConditionStatus(): OK sets the
  condition False, NonOK True (reason from the rule, message from stdout), Unknown Unknown.

    python3 packaging/kubernetes/node-problem-detector/test_plugin.py [-v]
Environment: EXPORTER_BIN, the binary to run as the plugin.
"""

import json
import os
import pathlib
import re
import resource
import signal
import subprocess
import time
import unittest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]
CONFIG = HERE / "memlock-plugin-monitor.json"
EXPORTER_BIN = os.environ.get("EXPORTER_BIN", str(ROOT / "target" / "debug" / "memlock-exporter"))

# The JSON keys NPD reads (Go's encoding/json ignores any other key without a word).
TOP_KEYS = {"plugin", "pluginConfig", "source", "conditions", "rules", "metricsReporting"}
PLUGIN_CONFIG_KEYS = {
    "invoke_interval",
    "timeout",
    "max_output_length",
    "concurrency",
    "enable_message_change_based_condition_update",
    "skip_initial_status",
}
CONDITION_KEYS = {"type", "reason", "message"}
RULE_KEYS = {"type", "condition", "reason", "path", "args", "timeout", "invoke_interval"}
# plugin.go: maxCustomPluginBufferBytes, and the default max_output_length (config.go).
MAX_PLUGIN_OUTPUT = 4096
DEFAULT_MAX_OUTPUT_LENGTH = 80
DEFAULT_TIMEOUT = 5.0
STATUS = {0: "OK", 1: "NonOK"}
CONDITION_STATUS = {"OK": "False", "NonOK": "True", "Unknown": "Unknown"}
MIB = 1 << 20

GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
GO_DURATION = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)")


def go_duration(text):
    """Seconds in a Go time.ParseDuration string ("60s", "1m30s"); ValueError otherwise."""
    if text in ("0", "+0", "-0"):
        return 0.0
    sign, body = (-1.0, text[1:]) if text.startswith("-") else (1.0, text.lstrip("+"))
    total, at = 0.0, 0
    while at < len(body):
        match = GO_DURATION.match(body, at)
        if not match or match.group(1) in ("", "."):
            raise ValueError(f"not a Go duration: {text!r}")
        total += float(match.group(1)) * GO_UNITS[match.group(2)]
        at = match.end()
    if not body:
        raise ValueError(f"not a Go duration: {text!r}")
    return sign * total


def load_config():
    return json.loads(CONFIG.read_text())


def run_like_npd(config, rule, args=None, memlock=None):
    """Runs `rule` as Plugin.run() does; returns (status, message, seconds)."""
    global_timeout = go_duration(config["pluginConfig"].get("timeout", "5s"))
    timeout = global_timeout
    if "timeout" in rule and go_duration(rule["timeout"]) < global_timeout:
        timeout = go_duration(rule["timeout"])
    max_length = config["pluginConfig"].get("max_output_length", DEFAULT_MAX_OUTPUT_LENGTH)

    def child():
        os.setpgid(0, 0)
        if memlock is not None:
            resource.setrlimit(resource.RLIMIT_MEMLOCK, (memlock, memlock))

    started = time.monotonic()
    proc = subprocess.Popen(
        [EXPORTER_BIN, *(rule["args"] if args is None else args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=child,
    )
    try:
        stdout, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return "Unknown", "timeout", time.monotonic() - started
    output = stdout[:MAX_PLUGIN_OUTPUT].decode("utf-8", "replace").strip()[:max_length]
    return STATUS.get(proc.returncode, "Unknown"), output, time.monotonic() - started


def with_shape(args, nodes, ranks):
    """The rule's args with another job shape."""
    out = list(args)
    for flag, value in (("--nodes", nodes), ("--ranks-per-node", ranks)):
        out[out.index(flag) + 1] = str(value)
    return out


class Config(unittest.TestCase):
    """What NPD reads from the file, and what it would refuse at start (klog.Fatalf)."""

    def setUp(self):
        self.config = load_config()

    def test_only_keys_npd_reads(self):
        config = self.config
        self.assertLessEqual(set(config), TOP_KEYS)
        self.assertLessEqual(set(config["pluginConfig"]), PLUGIN_CONFIG_KEYS)
        for condition in config["conditions"]:
            self.assertEqual(set(condition), CONDITION_KEYS, condition)
        for rule in config["rules"]:
            self.assertLessEqual(set(rule), RULE_KEYS, rule)
            self.assertTrue({"type", "reason", "path"} <= set(rule), rule)
        self.assertIsInstance(config["metricsReporting"], bool)

    def test_validate_would_accept_it(self):
        config = self.config
        self.assertEqual(config["plugin"], "custom")
        self.assertTrue(config["source"])
        plugin = config["pluginConfig"]
        global_timeout = go_duration(plugin.get("timeout", "5s"))
        self.assertGreater(go_duration(plugin.get("invoke_interval", "30s")), 0)
        self.assertGreaterEqual(plugin["concurrency"], 1)
        condition_types = {c["type"] for c in config["conditions"]}
        for rule in config["rules"]:
            self.assertIn(rule["type"], ("temporary", "permanent"))
            if "timeout" in rule:
                self.assertLessEqual(go_duration(rule["timeout"]), global_timeout, rule)
            if "invoke_interval" in rule:
                self.assertGreater(go_duration(rule["invoke_interval"]), 0, rule)
            if rule["type"] == "permanent":
                self.assertIn(rule["condition"], condition_types, "a permanent rule needs a default condition")
            self.assertTrue(rule["path"].startswith("/"), rule["path"])
            self.assertIsInstance(rule["args"], list)

    def test_the_node_condition(self):
        (condition,) = self.config["conditions"]
        self.assertEqual(condition["type"], "MemlockMisconfigured")
        camel = re.compile(r"^[A-Z][A-Za-z0-9]*$")
        (rule,) = self.config["rules"]
        for reason in (condition["reason"], rule["reason"]):
            self.assertRegex(reason, camel)
        self.assertNotEqual(condition["reason"], rule["reason"], "the reason tells the states apart")

    def test_the_rule_checks_the_node_as_pods_see_it(self):
        (rule,) = self.config["rules"]
        args = rule["args"]
        self.assertEqual(args[0], "check")
        # One line on stdout: NPD's message. No CAP_IPC_LOCK for pods (NPD runs privileged); NPD's
        # own cgroup (80Mi) and environment are not a training pod's.
        for flag in ("--summary", "--without-cap-ipc-lock"):
            self.assertIn(flag, args)
        skipped = {args[i + 1] for i, a in enumerate(args) if a == "--skip"}
        self.assertEqual(skipped, {"cgroup.memory", "nccl"})
        self.assertIn("--nodes", args)
        self.assertIn("--ranks-per-node", args)
        self.assertNotIn("--exec", args)

    def test_the_image_puts_the_binary_at_the_rules_path(self):
        (rule,) = self.config["rules"]
        npd_image = (HERE / "Dockerfile").read_text()
        copy = re.search(r"^COPY --from=memlock (\S+) (\S+)$", npd_image, re.M)
        self.assertIsNotNone(copy, npd_image)
        self.assertEqual(copy.group(2), rule["path"])
        ours = (ROOT / "packaging" / "container" / "Dockerfile").read_text()
        self.assertIn(f"/out{copy.group(1)}", ours, "the binary's path in memlock-exporter's image")

    def test_go_durations(self):
        self.assertEqual(go_duration("60s"), 60)
        self.assertEqual(go_duration("1m30s"), 90)
        self.assertEqual(go_duration("1.5h"), 5400)
        for bad in ("60", "s", "1x", ""):
            with self.assertRaises(ValueError, msg=bad):
                go_duration(bad)


class Protocol(unittest.TestCase):
    """The plugin as NPD runs it, on this machine (8 MiB memlock limit, root: CAP_IPC_LOCK)."""

    def setUp(self):
        self.assertTrue(os.access(EXPORTER_BIN, os.X_OK), f"{EXPORTER_BIN} is not built (EXPORTER_BIN)")
        self.config = load_config()
        (self.rule,) = self.config["rules"]
        self.max_length = self.config["pluginConfig"]["max_output_length"]
        self.timeout = go_duration(self.rule["timeout"])

    def test_a_node_that_fails_sets_the_condition_with_the_figures(self):
        status, message, seconds = run_like_npd(self.config, self.rule, memlock=8 * MIB)
        self.assertEqual(status, "NonOK", message)
        self.assertEqual(CONDITION_STATUS[status], "True")
        self.assertRegex(message, r"^memlock\.soft 8\.0 MiB\b", "the failing check and its figure first")
        self.assertNotIn("\n", message)
        full = subprocess.run(
            [EXPORTER_BIN, *self.rule["args"]],
            capture_output=True,
            text=True,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_MEMLOCK, (8 * MIB, 8 * MIB)),
        ).stdout.strip()
        self.assertEqual(message, full, "max_output_length cuts nothing")
        self.assertLess(seconds, self.timeout)

    def test_a_node_that_fits_clears_the_condition(self):
        status, message, _ = run_like_npd(self.config, self.rule, with_shape(self.rule["args"], 1, 1), 8 * MIB)
        self.assertEqual(status, "OK", message)
        self.assertEqual(CONDITION_STATUS[status], "False")
        self.assertTrue(message.startswith("PASS"), message)

    def test_a_check_that_cannot_run_is_unknown_with_the_error(self):
        args = [*self.rule["args"], "--path.procfs", "/nonexistent"]
        status, message, _ = run_like_npd(self.config, self.rule, args)
        self.assertEqual(status, "Unknown")
        self.assertEqual(CONDITION_STATUS[status], "Unknown")
        self.assertTrue(message.startswith("check could not run: /nonexistent/self/limits"), message)

    def test_root_is_judged_as_a_pod_unless_told_it_is_the_job(self):
        # NPD runs privileged: check leaves its CAP_IPC_LOCK out even without the plugin's flag,
        # and only --as-root (a job that really runs as root) judges the node with it.
        self.assertEqual(os.geteuid(), 0, "run as root (CAP_IPC_LOCK), as scripts/test.sh does")
        args = [a for a in self.rule["args"] if a != "--without-cap-ipc-lock"]
        status, message, _ = run_like_npd(self.config, self.rule, args, 8 * MIB)
        self.assertEqual(status, "NonOK", message)
        status, message, _ = run_like_npd(self.config, self.rule, [*args, "--as-root"], 8 * MIB)
        self.assertEqual(status, "OK", message)


if __name__ == "__main__":
    unittest.main()
