#!/usr/bin/env python3
"""Lead time of a page before a refusal, from the files an end-to-end run leaves.

    check_lead.py DRILL_OUT WEBHOOK_JSONL ALERTNAME SINCE EXPORTER_LOG [MIN_LEAD [LABEL=VALUE[,...]]]

DRILL_OUT has one line per event, each starting with the time it happened (Unix seconds, or the
RFC 3339 time `memlock-exporter drill` prints); the first line
naming ENOMEM, EAGAIN, EPERM, "refused" or "EXIT -9 killed" is the refusal. WEBHOOK_JSONL is
webhook_receiver.py's (or the VM's webhook-sink's) output. The first firing ALERTNAME
notification (with those labels, when given) received after SINCE must precede the refusal by at
least MIN_LEAD seconds (default: any lead), and must have been delivered within MAX_DELIVERY
seconds (the environment's, default 2) of the exporter's "fast-path alert firing" log line.
Prints the lead and the delivery time.
"""
import json
import os
import re
import sys
from datetime import datetime


def main():
    drill_out, webhook, alertname, since, exporter_log = sys.argv[1:6]
    since = float(since)
    min_lead = float(sys.argv[6]) if len(sys.argv) > 6 else 0.0
    label = sys.argv[7] if len(sys.argv) > 7 else ""
    wanted = [pair.partition("=")[::2] for pair in label.split(",") if pair]

    def matches(labels):
        return labels.get("alertname") == alertname and all(labels.get(k) == v for k, v in wanted)

    refused = None
    for line in open(drill_out):
        stamp, _, text = line.partition(" ")
        if re.search(r"ENOMEM|EAGAIN|EPERM|refused|EXIT -9 killed", text):
            try:
                refused = float(stamp)
            except ValueError:
                refused = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
            break
    if refused is None:
        sys.exit("the drill was never refused:\n" + open(drill_out).read())
    fired = None
    for line in open(webhook):
        note = json.loads(line)
        if note["received"] < since:
            continue
        for alert in note["payload"].get("alerts", []):
            if matches(alert["labels"]) and alert["status"] == "firing":
                fired = note["received"]
                break
        if fired:
            break
    if fired is None:
        sys.exit(f"{alertname} {label} never reached the webhook")
    crossed = None
    for line in open(exporter_log):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if (
            entry.get("message") == "fast-path alert firing"
            and entry.get("alertname") == alertname
            and all(f'"{k}": "{v}"' in entry.get("labels", "") for k, v in wanted)
        ):
            at = datetime.fromisoformat(entry["timestamp"]).timestamp()
            if at >= since:
                crossed = at
                break
    if crossed is None:
        sys.exit(f"no 'fast-path alert firing' log line for {alertname}")
    delivery = f", {(fired - crossed) * 1000:.0f} ms after the threshold was crossed"
    max_delivery = float(os.environ.get("MAX_DELIVERY", "2"))
    if fired - crossed > max_delivery:
        sys.exit(f"{alertname}: delivery took {fired - crossed:.2f}s, target {max_delivery:g}s")
    lead = refused - fired
    name = f"{alertname}{{{label}}}" if wanted else alertname
    print(f"{name}: delivered {lead:.1f}s before the first refusal{delivery}")
    if lead <= 0:
        sys.exit(f"{name} arrived {-lead:.1f}s after the refusal")
    if lead < min_lead:
        sys.exit(f"{name}: lead {lead:.1f}s, target at least {min_lead:.0f}s")


if __name__ == "__main__":
    main()
