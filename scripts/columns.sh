#!/usr/bin/env bash
# The 120-column gate (rustfmt.toml's max_width) for what rustfmt does not wrap: string literals
# and comments of the Rust sources (src/, crates/, tests/, the fuzz crate) and every script (scripts/).
# Prints file:line of each longer line; the exit status is non-zero when there is one.
#
# Columns are characters, as rustfmt counts them (grep in a UTF-8 locale), not bytes: a "µs" or
# a "−" is one column. Left out: tests/fixtures/, byte-exact copies of what the kernel, NVIDIA's
# driver and the exporter write (Mems_allowed in /proc/<pid>/status, a kubepods cgroup path in
# /proc/<pid>/cgroup, the golden scrapes' label sets), which keep their real length; build output
# (target/), the corpora and findings of scripts/fuzz.sh, and Python's byte code.
set -uo pipefail
cd "$(dirname "$0")/.." || exit
grep_long() {
    LC_ALL=C.UTF-8 grep -rnI '.\{121\}' --exclude-dir=target --exclude-dir=corpus --exclude-dir=artifacts \
        --exclude-dir=coverage --exclude-dir=__pycache__ "$@"
}
long=$({ grep_long src crates scripts fuzz; grep_long --exclude-dir=fixtures tests; } | cut -d: -f1,2)
[ -z "$long" ] || { echo "lines over 120 columns:"; echo "$long"; exit 1; }
