#!/usr/bin/env python3
"""Checks of the Kubernetes manifests and the container file that need no cluster and no Docker
engine: YAML shape, schema validation of the core kinds (kubernetes-validate, when installed),
the cross references between objects, the generated PrometheusRule (up to date, equal to the
rule file, accepted by promtool), the ConfigMap's config.toml (accepted by the exporter) and the
Dockerfile by inspection.

    python3 packaging/test_packaging.py [-v]
Environment: EXPORTER_BIN, the binary to try the ConfigMap's configuration with.
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
K8S = ROOT / "packaging" / "kubernetes"
NAME = "memlock-exporter"


def load_all():
    docs = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                docs.setdefault(doc["kind"], []).append((path.name, doc))
    return docs


class Manifests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.docs = load_all()

    def one(self, kind):
        found = self.docs.get(kind, [])
        self.assertEqual(len(found), 1, f"exactly one {kind}: {found}")
        return found[0][1]

    def test_every_object_is_named_and_in_the_kustomization(self):
        kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
        listed = set(kustomization["resources"])
        for kind, found in self.docs.items():
            for filename, doc in found:
                if kind == "Kustomization":
                    continue
                self.assertIn("apiVersion", doc, filename)
                self.assertEqual(doc["metadata"]["name"], NAME, filename)
                self.assertEqual(doc["metadata"].get("namespace"), kustomization["namespace"], filename)
                self.assertIn(filename, listed, f"{filename} is not in kustomization.yaml")
        for resource in listed:
            self.assertTrue((K8S / resource).exists(), resource)

    def test_core_kinds_pass_schema_validation(self):
        validator = shutil.which("kubernetes-validate")
        if validator is None:
            self.skipTest("kubernetes-validate is not installed (pip install kubernetes-validate)")
        files = sorted({f for kind, found in self.docs.items() for f, _ in found if kind in ("DaemonSet", "Service", "ServiceAccount", "ConfigMap")})
        result = subprocess.run([validator, "--strict", *[str(K8S / f) for f in files]], capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("INFO", result.stdout, result.stdout)

    def test_daemonset_reads_the_host_read_only_without_privileges(self):
        ds = self.one("DaemonSet")
        pod = ds["spec"]["template"]["spec"]
        self.assertTrue(pod["hostPID"])
        self.assertTrue(pod["securityContext"]["runAsNonRoot"])
        self.assertNotEqual(pod["securityContext"]["runAsUser"], 0)
        self.assertEqual(ds["spec"]["selector"]["matchLabels"].items() - ds["spec"]["template"]["metadata"]["labels"].items(), set())
        (container,) = pod["containers"]
        sc = container["securityContext"]
        self.assertFalse(sc["allowPrivilegeEscalation"])
        self.assertTrue(sc["readOnlyRootFilesystem"])
        self.assertEqual(sc["capabilities"]["drop"], ["ALL"])
        self.assertNotIn("add", sc["capabilities"])
        self.assertIn("--path.procfs=/host/proc", container["args"])
        self.assertIn("--path.sysfs=/host/sys", container["args"])
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        for host, inside in (("/proc", "/host/proc"), ("/sys", "/host/sys")):
            mount = mounts[inside]
            self.assertTrue(mount["readOnly"], inside)
            self.assertEqual(volumes[mount["name"]]["hostPath"]["path"], host)
        config_mount = mounts["/etc/memlock-exporter"]
        self.assertEqual(volumes[config_mount["name"]]["configMap"]["name"], NAME)
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        self.assertEqual(ports["metrics"], 9478)
        for probe, path in (("livenessProbe", "/-/healthy"), ("readinessProbe", "/-/ready")):
            self.assertEqual(container[probe]["httpGet"]["path"], path)
            self.assertIn(container[probe]["httpGet"]["port"], ports)
        self.assertIn("memory", container["resources"]["limits"])

    def test_service_and_servicemonitor_reach_the_pods(self):
        ds = self.one("DaemonSet")
        pod_labels = ds["spec"]["template"]["metadata"]["labels"]
        svc = self.one("Service")
        self.assertEqual(svc["spec"]["selector"].items() - pod_labels.items(), set(), "the Service selects the pods")
        (port,) = svc["spec"]["ports"]
        container_ports = {p["name"] for p in ds["spec"]["template"]["spec"]["containers"][0]["ports"]}
        self.assertIn(port["targetPort"], container_ports)
        sm = self.one("ServiceMonitor")
        self.assertEqual(sm["apiVersion"], "monitoring.coreos.com/v1")
        self.assertEqual(sm["spec"]["selector"]["matchLabels"].items() - svc["metadata"]["labels"].items(), set(), "the ServiceMonitor selects the Service")
        self.assertIn(svc["metadata"]["namespace"], sm["spec"]["namespaceSelector"]["matchNames"])
        (endpoint,) = sm["spec"]["endpoints"]
        self.assertEqual(endpoint["port"], port["name"])
        self.assertEqual(endpoint["path"], "/metrics")
        self.assertTrue(any(r.get("targetLabel") == "instance" for r in endpoint.get("relabelings", [])))

    def test_prometheusrule_is_generated_from_the_rule_file(self):
        check = subprocess.run([sys.executable, str(K8S / "generate.py"), "--check"], capture_output=True, text=True)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        rule = self.one("PrometheusRule")
        source = yaml.safe_load((ROOT / "alerts" / "memlock-exporter.rules.yml").read_text())
        self.assertEqual(rule["spec"], {"groups": source["groups"]})
        promtool = shutil.which("promtool")
        if promtool is None:
            self.skipTest("promtool is not installed")
        with tempfile.NamedTemporaryFile("w", suffix=".yml") as spec:
            yaml.safe_dump(rule["spec"], spec)
            spec.flush()
            result = subprocess.run([promtool, "check", "rules", spec.name], capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertRegex(result.stdout, r"SUCCESS: \d+ rules found")

    def test_configmap_configuration_is_accepted_by_the_exporter(self):
        binary = os.environ.get("EXPORTER_BIN")
        if not binary:
            self.skipTest("EXPORTER_BIN is not set")
        config = self.one("ConfigMap")["data"]["config.toml"]
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / "config.toml"
            path.write_text(config)
            proc = subprocess.Popen(
                [binary, "--config.file", str(path), "--web.listen-address", "127.0.0.1:0", "--log.format", "json"],
                stderr=subprocess.PIPE, text=True,
            )
            try:
                started = time.time()
                line = ""
                while time.time() - started < 20:
                    line = proc.stderr.readline()
                    if '"listening"' in line or proc.poll() is not None:
                        break
                self.assertIn('"listening"', line, f"the exporter refused the ConfigMap's config.toml: {line}{proc.stderr.read() if proc.poll() is not None else ''}")
            finally:
                proc.terminate()
                proc.wait(timeout=15)
                proc.stderr.close()


class Containerfile(unittest.TestCase):
    """No Docker engine here, so the Dockerfile is checked by reading it."""

    def setUp(self):
        self.text = (ROOT / "packaging" / "container" / "Dockerfile").read_text()
        self.lines = [l.strip() for l in self.text.splitlines() if l.strip() and not l.strip().startswith("#")]

    def test_multi_stage_pinned_and_non_root(self):
        stages = [l for l in self.lines if l.upper().startswith("FROM ")]
        self.assertGreaterEqual(len(stages), 2, "multi-stage")
        for stage in stages:
            image = stage.split()[1]
            self.assertRegex(image, r":[^:]+$", f"{image} has a tag")
            self.assertFalse(image.endswith(":latest"), image)
        final = self.text[self.text.rindex("\nFROM "):]
        user = re.search(r"^USER\s+(\S+)", final, re.M)
        self.assertIsNotNone(user, "the final stage sets USER")
        self.assertNotIn(user.group(1).split(":")[0], ("0", "root"))
        entry = re.search(r"^ENTRYPOINT\s+(\[.*\])", final, re.M)
        self.assertIsNotNone(entry, "exec-form ENTRYPOINT")
        self.assertEqual(yaml.safe_load(entry.group(1)), ["/usr/bin/memlock-exporter"])
        self.assertIn("--locked", self.text)
        self.assertNotRegex(self.text, r"(?m)^ADD\s+https?://", "no downloads at build time")

    def test_dockerignore_keeps_build_output_out(self):
        ignored = (ROOT / ".dockerignore").read_text().split()
        self.assertIn("target/", ignored)

    def test_daemonset_runs_the_image_the_way_the_dockerfile_expects(self):
        ds = yaml.safe_load((K8S / "daemonset.yaml").read_text())
        container = ds["spec"]["template"]["spec"]["containers"][0]
        self.assertRegex(container["image"], r"^[\w./-]+/memlock-exporter:\d+\.\d+\.\d+$")
        self.assertIn("EXPOSE 9478", self.text)

    def test_the_kustomization_overrides_the_daemonsets_image(self):
        # The entry names the DaemonSet's image, so `kustomize edit set image` with that name
        # edits it (instead of adding an entry beside it) and the override applies.
        ds = yaml.safe_load((K8S / "daemonset.yaml").read_text())
        name, tag = ds["spec"]["template"]["spec"]["containers"][0]["image"].rsplit(":", 1)
        images = yaml.safe_load((K8S / "kustomization.yaml").read_text())["images"]
        self.assertEqual([i["name"] for i in images], [name])
        self.assertEqual(images[0]["newTag"], tag)


class FailuresOverlay(unittest.TestCase):
    """packaging/kubernetes-failures/: the opt-in grants of the failures collector, and nothing else."""

    def test_the_overlay_grants_root_and_tracefs_and_nothing_else(self):
        kubectl = shutil.which("kubectl") or shutil.which("kustomize")
        if kubectl is None:
            self.skipTest("neither kubectl nor kustomize is installed")
        args = [kubectl, "kustomize"] if kubectl.endswith("kubectl") else [kubectl, "build"]
        built = subprocess.run([*args, str(ROOT / "packaging" / "kubernetes-failures")], capture_output=True, text=True)
        self.assertEqual(built.returncode, 0, built.stderr)
        docs = [d for d in yaml.safe_load_all(built.stdout) if d]
        (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
        base = yaml.safe_load((K8S / "daemonset.yaml").read_text())
        pod, base_pod = ds["spec"]["template"]["spec"], base["spec"]["template"]["spec"]
        self.assertEqual(pod["securityContext"], {**base_pod["securityContext"], "runAsNonRoot": False, "runAsUser": 0, "runAsGroup": 0})
        (container,), (base_container,) = pod["containers"], base_pod["containers"]
        # Not one capability, no escalation, the root file system read-only: as in the base.
        self.assertEqual(container["securityContext"], base_container["securityContext"])
        self.assertEqual(container["args"], base_container["args"])
        env = {e["name"]: e for e in container["env"]}
        self.assertEqual(env.pop("MEMLOCK_EXPORTER_COLLECTOR__FAILURES__ENABLED")["value"], "true")
        self.assertEqual(sorted(env), sorted(e["name"] for e in base_container["env"]))
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        tracefs = mounts.pop("/host/sys/kernel/tracing")
        self.assertFalse(tracefs.get("readOnly", False))
        self.assertEqual(sorted(mounts.values(), key=lambda m: m["mountPath"]), sorted(base_container["volumeMounts"], key=lambda m: m["mountPath"]))
        volumes = {v["name"]: v for v in pod["volumes"]}
        self.assertEqual(volumes.pop(tracefs["name"])["hostPath"]["path"], "/sys/kernel/tracing")
        self.assertEqual(sorted(volumes.values(), key=lambda v: v["name"]), sorted(base_pod["volumes"], key=lambda v: v["name"]))
        # Everything else of the base, unchanged.
        kinds = sorted(d["kind"] for d in docs)
        base_kinds = sorted(k for k, found in load_all().items() for _ in found if k != "Kustomization")
        self.assertEqual(kinds, base_kinds)


if __name__ == "__main__":
    unittest.main()
