#!/usr/bin/env bash
# Paired Tier C benchmark: spawn-to-exit of /bin/true in a fully isolated sandbox, native
# backend against bubblewrap (run directly with the same argv, and through Tierbox's bwrap
# backend) and a plain spawn, interleaved in one process; then runs per second with 2
# concurrent callers. Needs user namespaces, and bwrap for the bwrap columns.
#
#   bench/tier_c.sh [ITERATIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-300}"
cargo bench -q -p tierbox-runner --bench tier_c --no-run >/dev/null 2>&1 || cargo bench -p tierbox-runner --bench tier_c --no-run
echo "== $(uname -r), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(bwrap --version 2>/dev/null || echo 'no bwrap')"
cargo bench -q -p tierbox-runner --bench tier_c -- "$n"
