#!/usr/bin/env bash
# Paired review-mode benchmark: a native Tier C run with the workspace direct against the
# same run through an overlay (nothing changed; one file created), interleaved in one
# process. Prints p50/p90 and the median per-round difference. Needs user namespaces.
#
#   bench/overlay.sh [ITERATIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-300}"
cargo bench -q -p tierbox-runner --bench overlay --no-run >/dev/null 2>&1 || cargo bench -p tierbox-runner --bench overlay --no-run
echo "== $(uname -r), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
cargo bench -q -p tierbox-runner --bench overlay -- "$n"
