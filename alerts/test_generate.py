"""Unit tests of alerts/generate.py: python3 -m unittest discover -s alerts -p 'test_*.py'
(run by `cargo test`, tests/integration/monitoring.rs)."""

import json
import unittest

import generate
from generate import SourceError, check_dashboards, check_recording_rules, check_rules, parse_thresholds, render_rules

VALID = """\
# comment
runbook_base_url: "https://example.invalid/runbooks.md"
limit_bytes: 1073741824   # 1 GiB
near_ratio: 0.9
window: 15m
horizon_seconds: 3600
selector: 'job=~".*memlock.*"'
"""


class ThresholdsFile(unittest.TestCase):
    def test_parses_each_kind(self):
        t = parse_thresholds(VALID)
        self.assertEqual(t.value("limit_bytes"), 1073741824)
        self.assertEqual(t.value("near_ratio"), 0.9)
        self.assertEqual(t.value("window"), "15m")
        self.assertEqual(t.value("selector"), 'job=~".*memlock.*"')
        self.assertEqual(t.get("limit_bytes").text(), "1GiB")
        self.assertEqual(t.get("near_ratio").text(), "90%")
        self.assertEqual(t.get("horizon_seconds").text(), "1h")
        self.assertEqual(t.get("window").text(), "15m")

    def test_rejects_what_is_not_a_flat_list_of_values(self):
        bad = {
            "indented": "  a: 1\n",
            "no colon": "a 1\n",
            "upper case": "Alpha: 1\n",
            "twice": "a: 1\na: 2\n",
            "word": "a: ten\n",
            "unterminated": 'a: "x\n',
            "after string": 'a: "x" y\n',
            "ratio above 1": "a_ratio: 1.5\n",
            "negative": "a_bytes: -1\n",
            "empty": "# nothing\n",
        }
        for case, text in bad.items():
            with self.subTest(case), self.assertRaises(SourceError):
                parse_thresholds(text)

    def test_unused_names_are_reported(self):
        t = parse_thresholds(VALID)
        t.value("limit_bytes")
        self.assertIn("near_ratio", t.unused())
        self.assertNotIn("limit_bytes", t.unused())


class Template(unittest.TestCase):
    def test_substitutes_promql_and_text_forms(self):
        t = parse_thresholds(VALID)
        out = render_rules("# template header\nexpr: x < ${limit_bytes}\ntext: below ${limit_bytes:text}, {{ $value }}\n", t)
        self.assertIn("expr: x < 1073741824\n", out)
        self.assertIn("text: below 1GiB, {{ $value }}\n", out)
        self.assertNotIn("template header", out)
        self.assertTrue(out.startswith(generate.HEADER))

    def test_each_repeats_a_line_per_word_as_a_union(self):
        t = parse_thresholds(VALID + 'labels: "kernel mlx5_core"\n')
        out = render_rules('max (\n  label_replace(x, "c", "${labels:each}", "${labels:each}", "") > ${near_ratio}\n)\n', t)
        self.assertIn('max (\n  label_replace(x, "c", "kernel", "kernel", "") > 0.9\n  or label_replace(x, "c", "mlx5_core", "mlx5_core", "") > 0.9\n)\n', out)

    def test_each_needs_a_string_of_label_names(self):
        for value in ("5", '""', '"kernel mlx5-core"'):
            t = parse_thresholds(VALID + f"labels: {value}\n")
            with self.subTest(value), self.assertRaises(SourceError):
                render_rules("x ${labels:each}\n", t)
        t = parse_thresholds(VALID + 'labels: "a b"\nothers: "c d"\n')
        with self.assertRaises(SourceError):
            render_rules("x ${labels:each} ${others:each}\n", t)

    def test_unknown_and_malformed_placeholders_fail(self):
        t = parse_thresholds(VALID)
        with self.assertRaises(SourceError):
            render_rules("expr: x < ${no_such_threshold}\n", t)
        with self.assertRaises(SourceError):
            render_rules("expr: x < ${Limit-Bytes}\n", t)


RULE = """\
      - alert: MemlockThing
        expr: x > 1
        for: 5m
        labels:
          severity: warning
        annotations:
          summary: S.
          description: D.
          runbook_url: https://example.invalid/runbooks.md#memlockthing
"""

TESTS = """\
      - eval_time: 5m
        alertname: MemlockThing
        exp_alerts:
          - exp_labels: {}
      - labels: 'ALERTS{alertname="MemlockThing",alertstate="pending"}'
      - expr: ALERTS{alertname="MemlockThing",pid="2"}
        eval_time: 9m
        exp_samples: []
"""


class RuleConventions(unittest.TestCase):
    def problems(self, rule=RULE, runbooks="## MemlockThing\n", tests=TESTS):
        return check_rules(rule, runbooks, [tests], "https://example.invalid/runbooks.md")[1]

    def test_a_complete_rule_passes(self):
        self.assertEqual(self.problems(), [])

    def test_each_missing_part_is_named(self):
        self.assertTrue(any("no section" in p for p in self.problems(runbooks="## Other\n")))
        self.assertTrue(any("severity" in p for p in self.problems(RULE.replace("warning", "page"))))
        self.assertTrue(any("Memlock prefix" in p for p in self.problems(RULE.replace("alert: MemlockThing", "alert: Thing"))))
        self.assertTrue(any("`for`" in p for p in self.problems(RULE.replace("        for: 5m\n", ""))))
        self.assertTrue(any("description" in p for p in self.problems(RULE.replace("          description: D.\n", ""))))
        self.assertTrue(any("runbook_url must be" in p for p in self.problems(RULE.replace("#memlockthing", "#thing"))))

    def test_each_missing_test_case_is_named(self):
        self.assertTrue(any("fires" in p for p in self.problems(tests=TESTS.replace("          - exp_labels: {}\n", "        exp_alerts: []\n"))))
        self.assertTrue(any("pending case" in p for p in self.problems(tests=TESTS.replace('alertstate="pending"', 'alertstate="firing"'))))
        self.assertTrue(any("quiet case" in p for p in self.problems(tests=TESTS.replace("exp_samples: []", "exp_samples:"))))


class RecordingRuleConventions(unittest.TestCase):
    RULES = "      - record: memlock_job:memlock_nodes:count\n        expr: count(x)\n"
    TESTS = "          - labels: 'memlock_job:memlock_nodes:count{job=\"memlock\",slurm_job=\"1\"}'\n            value: 2\n"

    def test_a_named_and_tested_rule_passes(self):
        self.assertEqual(check_recording_rules(self.RULES, [self.TESTS]), [])

    def test_names_and_missing_tests_are_reported(self):
        self.assertTrue(any("level:metric:operations" in p for p in check_recording_rules(self.RULES.replace("memlock_job:", "job:"), [self.TESTS])))
        self.assertTrue(any("level:metric:operations" in p for p in check_recording_rules(self.RULES.replace(":count", ""), [self.TESTS])))
        self.assertTrue(any("promql_expr_test" in p for p in check_recording_rules(self.RULES, [self.TESTS.replace("nodes:count", "nodes:sum")])))


class DashboardConventions(unittest.TestCase):
    def board(self, **changes):
        panel = {
            "id": 1,
            "type": "timeseries",
            "title": "P",
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "targets": [{"expr": 'memlock_node_mlocked_bytes{job=~"$job", instance=~"$instance"}'}],
            "fieldConfig": {"defaults": {}, "overrides": []},
        }
        board = {
            "uid": "memlock-x",
            "schemaVersion": 39,
            "templating": {"list": [{"name": "datasource"}, {"name": "job"}, {"name": "instance"}]},
            "panels": [panel],
        }
        for key, value in changes.items():
            (panel if key in panel else board)[key] = value
        return {"x.json": json.dumps(board)}

    def test_a_complete_dashboard_passes(self):
        self.assertEqual(check_dashboards(self.board()), [])

    def test_each_broken_convention_is_named(self):
        self.assertTrue(check_dashboards(self.board(schemaVersion=36)))
        self.assertTrue(check_dashboards(self.board(uid="abc")))
        self.assertTrue(check_dashboards(self.board(templating={"list": [{"name": "datasource"}]})))
        self.assertTrue(check_dashboards(self.board(datasource={"type": "prometheus", "uid": "prom"})))
        self.assertTrue(check_dashboards(self.board(targets=[{"expr": "memlock_node_mlocked_bytes"}])))
        self.assertTrue(check_dashboards(self.board(targets=[])))

    def test_every_selector_of_a_query_filters(self):
        both = 'job=~"$job", instance=~"$instance"'
        ok = [
            f"memlock_node_mlocked_bytes{{{both}}} / memlock_node_memory_total_bytes{{{both}}}",
            'memlock_job:memlock_nodes:count{job=~"$job"}',
            f'memlock_node:memlock_software_version:info{{{both}}} * on (job) memlock_fleet:memlock_software_versions:count{{job=~"$job"}}',
        ]
        for expr in ok:
            with self.subTest(expr):
                self.assertEqual(check_dashboards(self.board(targets=[{"expr": expr}])), [])
        bad = [
            f"memlock_node_mlocked_bytes{{{both}}} / memlock_node_memory_total_bytes",
            f'memlock_node_mlocked_bytes{{{both}}} / memlock_node_memory_total_bytes{{job=~"$job"}}',
            'memlock_node:memlock_software_version:info{job=~"$job"}',
            "memlock_job:memlock_nodes:count",
        ]
        for expr in bad:
            with self.subTest(expr):
                self.assertTrue(check_dashboards(self.board(targets=[{"expr": expr}])))

    def test_links_point_at_generated_dashboards(self):
        def with_link(url):
            override = {"matcher": {"id": "byName", "options": "instance"}, "properties": [{"id": "links", "value": [{"title": "t", "url": url}]}]}
            return self.board(fieldConfig={"defaults": {}, "overrides": [override]})
        self.assertEqual(check_dashboards(with_link("/d/memlock-x?var-instance=${__value.raw}")), [])
        self.assertTrue(check_dashboards(with_link("/d/memlock-nope?var-instance=${__value.raw}")))
        self.assertTrue(check_dashboards(with_link("https://example.invalid/")))


if __name__ == "__main__":
    unittest.main()
