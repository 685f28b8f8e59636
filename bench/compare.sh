#!/usr/bin/env bash
# Paired benchmark: a Tier B run of /bin/true through the library API against a plain
# std::process::Command spawn, interleaved in one process. Prints p50/p90 and the median
# of per-pair ratios, with warm launch slots (a long-lived supervisor) and without them
# (every run builds its landlock ruleset, cgroup and private tmp from scratch).
#
#   bench/compare.sh [ITERATIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-500}"
cargo bench -q -p tierbox-runner --bench spawn --no-run >/dev/null 2>&1 || cargo bench -p tierbox-runner --bench spawn --no-run
echo "== $(uname -r), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
cargo bench -q -p tierbox-runner --bench spawn -- "$n"
echo
cargo bench -q -p tierbox-runner --bench spawn -- "$n" --no-pool
