#!/usr/bin/env bash
# Kubernetes manifests and the container file, without a cluster or a Docker engine: schema
# validation (kubernetes-validate), cross references, the generated PrometheusRule (up to date,
# promtool-clean), the ConfigMap's config.toml run through the exporter, the Dockerfile read;
# the node-problem-detector plugin's configuration and its output against NPD's protocol.
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -c "import yaml" 2>/dev/null || pip install --quiet pyyaml
command -v kubernetes-validate >/dev/null || pip install --quiet kubernetes-validate
cargo build --quiet --locked --bin memlock-exporter
EXPORTER_BIN=${CARGO_TARGET_DIR:-$PWD/target}/debug/memlock-exporter python3 packaging/test_packaging.py -v
# The node-problem-detector plugin: its configuration and NPD's plugin protocol.
EXPORTER_BIN=${CARGO_TARGET_DIR:-$PWD/target}/debug/memlock-exporter \
    python3 packaging/kubernetes/node-problem-detector/test_plugin.py -v
