#!/usr/bin/env bash
# Fuzz `tierbox serve --http` against its own OpenAPI document with schemathesis.
#
#   python3 -m pip install schemathesis==4.32.5
#   tests/http/schemathesis.sh PATH/TO/tierbox [EXTRA SCHEMATHESIS ARGS...]   # or TIERBOX_BIN=...
#
# Starts the server on a free loopback port with a fresh workspace, state dir and token file,
# waits for /v1/health, checks a few contract points with curl (OpenAPI 3.1 served without a
# token, 401 auth.missing / auth.invalid, a run, a run with a streamed binary stdin, 415 for
# a non-JSON body), starts one
# background `cat` so the /v1/process/{id} operations reach a live handle, runs schemathesis
# (all phases, positive and negative data, a bounded number of examples per operation) with
# the bearer token, then stops the server with SIGTERM and checks that it exits. Exits
# non-zero if any of that fails. Never reads stdin; every wait is bounded. Extra arguments go
# to `schemathesis run` (it runs in the repository's cwd; its caches go to the temp dir).
#
# Knobs (environment): ST_MAX_EXAMPLES (default 30), ST_WORKERS (default 1), ST_SEED (default
# random; schemathesis prints the seed it used), ST_TIMEOUT (seconds for the whole
# schemathesis run, default 240).
set -euo pipefail

BIN="${1:-${TIERBOX_BIN:-}}"
if [ -z "$BIN" ]; then
  echo "usage: $0 PATH/TO/tierbox [SCHEMATHESIS ARGS...]   (or set TIERBOX_BIN)" >&2
  exit 2
fi
[ "$#" -gt 0 ] && shift
BIN="$(realpath "$BIN")"
[ -x "$BIN" ] || { echo "FAIL: $BIN is not an executable" >&2; exit 2; }
if ! python3 -c 'import schemathesis' 2>/dev/null; then
  echo "FAIL: schemathesis is not installed (python3 -m pip install schemathesis==4.32.5)" >&2
  exit 2
fi
command -v curl >/dev/null 2>&1 || { echo "FAIL: curl is required" >&2; exit 2; }

MAX_EXAMPLES="${ST_MAX_EXAMPLES:-30}"
# One worker: with two, hypothesis (inside schemathesis) now and then dies with "AST constructor
# recursion depth mismatch" on CPython 3.11.7 (concurrent ast parsing in threads); one worker
# is as fast here, since the server is the bottleneck.
WORKERS="${ST_WORKERS:-1}"
ST_TIMEOUT="${ST_TIMEOUT:-240}"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/tierbox-http-test.XXXXXX")"
mkdir -p "$tmp/workspace" "$tmp/state"
chmod 700 "$tmp/state"
token="$(python3 -c 'import secrets; print(secrets.token_hex(32))')"
(umask 077 && printf '%s\n' "$token" >"$tmp/token")
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
base="http://127.0.0.1:$port"
server_log="$tmp/server.log"
server_pid=""
failures=0

pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

stop_server() {
  # SIGTERM, then SIGKILL after 10 s. Prints how the server ended; returns 0 on a clean exit.
  [ -n "$server_pid" ] || return 0
  local pid="$server_pid" rc=0
  server_pid=""
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "server did not exit within 10 s of SIGTERM; killing it"
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    return 1
  fi
  wait "$pid" 2>/dev/null || rc=$?
  echo "server exited with status $rc after SIGTERM"
  [ "$rc" -eq 0 ] || [ "$rc" -eq 143 ]
}

cleanup() {
  stop_server >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "server: $BIN serve --http 127.0.0.1:$port --workspace $tmp/workspace --state-dir $tmp/state --token-file $tmp/token"
"$BIN" serve --http "127.0.0.1:$port" --workspace "$tmp/workspace" --state-dir "$tmp/state" \
  --token-file "$tmp/token" </dev/null >"$server_log" 2>&1 &
server_pid=$!

# /v1/health, for up to 30 s.
healthy=""
for _ in $(seq 300); do
  if ! kill -0 "$server_pid" 2>/dev/null; then
    break
  fi
  if curl -fsS --max-time 2 "$base/v1/health" >/dev/null 2>&1; then
    healthy=1
    break
  fi
  sleep 0.1
done
if [ -z "$healthy" ]; then
  fail "server answers GET /v1/health within 30 s"
  echo "--- server log"; cat "$server_log"
  exit 1
fi
pass "server answers GET /v1/health"

# A few contract points schemathesis does not assert by itself.
code="$(curl -sS -o "$tmp/openapi.json" -w '%{http_code}' --max-time 10 "$base/v1/openapi.json")"
if [ "$code" = 200 ] && python3 - "$tmp/openapi.json" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
assert str(doc.get("openapi", "")).startswith("3.1"), doc.get("openapi")
paths = doc.get("paths", {})
for p in ("/v1/process/run", "/v1/process/{id}", "/v1/process/{id}/output", "/v1/process/{id}/stdin",
          "/v1/process/{id}/kill", "/v1/process", "/v1/wasm/run", "/v1/session"):
    assert p in paths, f"missing path {p}; have {sorted(paths)}"
EOF
then
  pass "GET /v1/openapi.json without a token: 200, OpenAPI 3.1, documents the routes"
else
  fail "GET /v1/openapi.json without a token: 200, OpenAPI 3.1, documents the routes (status $code)"
fi
for variant in "no" "a wrong"; do
  if [ "$variant" = no ]; then
    code="$(curl -sS -o "$tmp/body" -w '%{http_code}' --max-time 10 "$base/v1/process")"
    want="auth.missing"
  else
    code="$(curl -sS -o "$tmp/body" -w '%{http_code}' --max-time 10 -H "Authorization: Bearer wrong$token" "$base/v1/process")"
    want="auth.invalid"
  fi
  got="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["error"]["code"])' "$tmp/body" 2>/dev/null || true)"
  if [ "$code" = 401 ] && [ "$got" = "$want" ]; then
    pass "GET /v1/process with $variant token: 401 $want"
  else
    fail "GET /v1/process with $variant token: 401 $want (got $code: $(head -c 300 "$tmp/body"))"
  fi
done
code="$(curl -sS -o "$tmp/body" -w '%{http_code}' --max-time 30 -H "Authorization: Bearer $token" \
  -H 'Content-Type: application/json' -d '{"command":"echo","args":["hello"]}' "$base/v1/process/run")"
if [ "$code" = 200 ] && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["exit_code"] == 0 and d["stdout"]["text"] == "hello\n"' "$tmp/body" 2>/dev/null; then
  pass "POST /v1/process/run echo hello: 200, exit 0, stdout hello"
else
  fail "POST /v1/process/run echo hello: 200, exit 0, stdout hello (got $code: $(head -c 300 "$tmp/body"))"
fi

# The streamed-stdin form: the request line, then 1 MiB of random bytes (past the body cap),
# whose digest inside the sandbox must be the host's.
head -c 1048576 /dev/urandom >"$tmp/stdin.bin"
want="$(sha256sum <"$tmp/stdin.bin" | cut -d' ' -f1)"
code="$( { printf '%s\n' '{"command":"sha256sum"}'; cat "$tmp/stdin.bin"; } |
  curl -sS -o "$tmp/body" -w '%{http_code}' --max-time 60 -H "Authorization: Bearer $token" \
    -H 'Content-Type: application/vnd.tierbox.stdin-stream' --data-binary @- "$base/v1/process/run")"
if [ "$code" = 200 ] && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["stdout"]["text"].split()[0] == sys.argv[2] and d["stdin"]["bytes"] == 1048576, d' "$tmp/body" "$want" 2>/dev/null; then
  pass "POST /v1/process/run streamed stdin (1 MiB of random bytes): 200, sha256sum in the sandbox is the host's"
else
  fail "POST /v1/process/run streamed stdin: 200 and the host's digest (got $code: $(head -c 300 "$tmp/body"))"
fi

code="$(curl -sS -o "$tmp/body" -w '%{http_code}' --max-time 30 -H "Authorization: Bearer $token" \
  -H 'Content-Type: text/plain' -d '{"command":"echo","args":["hello"]}' "$base/v1/process/run")"
got="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["error"]["code"])' "$tmp/body" 2>/dev/null || true)"
if [ "$code" = 415 ] && [ "$got" = http.unsupported_media_type ]; then
  pass "POST /v1/process/run with Content-Type text/plain: 415 http.unsupported_media_type"
else
  fail "POST /v1/process/run with Content-Type text/plain: 415 http.unsupported_media_type (got $code: $(head -c 200 "$tmp/body"))"
fi

# A live background process (cat, which echoes its stdin) in a session of its own, so the
# operations on /v1/process/{id} reach a real handle and not only 404 for random ids. (Not the
# default session: the fuzzer's DELETE /v1/session would end it, and its handle, at once.)
session="schemathesis-handle"
code="$(curl -sS -o "$tmp/body" -w '%{http_code}' --max-time 30 -H "Authorization: Bearer $token" \
  -H "Tierbox-Session: $session" -H 'Content-Type: application/json' \
  -d '{"command":"cat","background":true}' "$base/v1/process/run")"
handle="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["status"]["id"])' "$tmp/body" 2>/dev/null || true)"
# Keep schemathesis's crash cache (.schemathesis/) and hypothesis's data (.hypothesis/) out
# of the checkout.
export HYPOTHESIS_STORAGE_DIRECTORY="$tmp/hypothesis"
printf '[cache]\nenabled = false\n' >"$tmp/schemathesis.toml"
if [ "$code" = 200 ] && [ -n "$handle" ]; then
  pass "POST /v1/process/run background cat: 200, handle $handle"
  # Only for the operations on one handle: there the id, and the session that owns it, are
  # pinned; everywhere else the Tierbox-Session header is still generated.
  cat >>"$tmp/schemathesis.toml" <<EOF
[[operations]]
include-path-regex = "^/v1/process/[{]id[}]"
parameters = { "path.id" = "$handle", "header.Tierbox-Session" = "$session" }
EOF
else
  fail "POST /v1/process/run background cat: 200 with a handle (got $code: $(head -c 300 "$tmp/body"))"
fi

# The fuzzing run.
checks="not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance,ignored_auth"
seed_args=()
[ -n "${ST_SEED:-}" ] && seed_args=(--seed "$ST_SEED")
echo "schemathesis: checks $checks, $MAX_EXAMPLES examples per operation, $WORKERS workers, at most $ST_TIMEOUT s"
st_rc=0
timeout --kill-after=10 "$ST_TIMEOUT" python3 -m schemathesis.cli --config-file "$tmp/schemathesis.toml" \
  run "$base/v1/openapi.json" \
  --url "$base" \
  --header "Authorization: Bearer $token" \
  --checks "$checks" \
  --max-examples "$MAX_EXAMPLES" \
  --workers "$WORKERS" \
  --request-timeout 30 \
  --generation-database none \
  --no-color \
  "${seed_args[@]}" "$@" </dev/null || st_rc=$?
if [ "$st_rc" -eq 0 ]; then
  pass "schemathesis found no failures"
elif [ "$st_rc" -eq 124 ] || [ "$st_rc" -eq 137 ]; then
  fail "schemathesis did not finish within $ST_TIMEOUT s"
else
  fail "schemathesis reported failures (exit $st_rc)"
fi

if kill -0 "$server_pid" 2>/dev/null; then
  pass "server still running after the fuzzing"
else
  fail "server still running after the fuzzing (it died)"
fi
if stop_server; then
  pass "server exits cleanly on SIGTERM within 10 s"
else
  fail "server exits cleanly on SIGTERM within 10 s"
fi
if [ "$failures" -gt 0 ]; then
  echo "--- server log (last 50 lines)"; tail -n 50 "$server_log"
  echo "schemathesis.sh: $failures failure(s)"
  exit 1
fi
echo "schemathesis.sh: all passed"
