#!/usr/bin/env bash
# Terms benchmark, two parts, on a release `tierbox`:
#
# 1. Keystroke-to-echo latency: one byte typed into a term running `cat` on its terminal
#    until the terminal's echo of it is back at the client, KEYS times per face, the faces
#    interleaved in rounds so all see the same load:
#      local-pty  the floor: Python's own pty.openpty() with `cat` on it, write the byte
#                 to the primary, read its echo (the kernel's line discipline only)
#      http       POST /v1/terms/{id}/input {"data":"x"}, then GET …/output?offset=N&
#                 wait_ms=2000 (a long poll) until the byte is there; one keep-alive
#                 connection (stdlib http.client)
#      ws         a binary frame on GET /v1/terms/{id}/ws (ticket from POST …/ws_ticket),
#                 until the output frame with the byte arrives (a stdlib-only client);
#                 skipped when the server has no WebSocket route
#      mcp        tools/call session_write {"data":"x","max_bytes":1,"yield_ms":2000}
#                 to `tierbox serve --mcp` over stdio: it returns once the byte is there
#    Prints p50/p99 per face and tier (Tier B and Tier C) and each face's ratio to
#    local-pty.
# 2. Memory per term: a fresh `tierbox serve --http`'s VmRSS and Pss (smaps_rollup)
#    before and after starting K terms (`sh -c 'read x; seq …; exec cat'`, idle at the
#    `read`), then after each has printed more than its output ring holds (the `seq`,
#    TERM_RING_BYTES = 1 MiB, and is idle again in `cat`); (after - before) / K, for
#    K = MEM_K. The target: an idle term costs <= 1 MiB in the supervisor beyond its
#    ring. Then every term is killed and the server must hold no sandbox.
#
#   bench/term.sh [KEYS]     # KEYS per face and tier, default 300
#
# Environment: TIERBOX_BIN (default ${CARGO_TARGET_DIR:-target}/release/tierbox, built
# when missing), TERM_BENCH_ROUNDS (5), TERM_BENCH_MEM_K (8), TERM_BENCH_TIERS ("b c"),
# TERM_BENCH_REDACTION ("on", the default policy's; "off" shows the latency without the
# TERM_HOLD wait a lone typed word has with redaction on).
# Needs python3 (and user namespaces for Tier C).
set -euo pipefail
cd "$(dirname "$0")/.."
keys="${1:-300}"
rounds="${TERM_BENCH_ROUNDS:-5}"
mem_k="${TERM_BENCH_MEM_K:-8}"
tiers="${TERM_BENCH_TIERS:-b c}"
redaction="${TERM_BENCH_REDACTION:-on}"
usage() { echo "usage: $0 [KEYS]  (see the header of $0 for the environment)" >&2; exit 2; }
[[ "$keys" =~ ^[1-9][0-9]*$ && "$rounds" =~ ^[1-9][0-9]*$ && "$mem_k" =~ ^[1-9][0-9]*$ ]] || usage
[[ "$tiers" =~ ^[bc\ ]+$ && "$redaction" =~ ^(on|off)$ ]] || usage
command -v python3 >/dev/null || { echo "term.sh: python3 not found on PATH" >&2; exit 1; }

bin="${TIERBOX_BIN:-${CARGO_TARGET_DIR:-target}/release/tierbox}"
if [[ ! -x "$bin" ]]; then
    cargo build --release -q -p tierbox-cli
fi
bin="$(realpath "$bin")"
tmp="$(mktemp -d /tmp/tierbox-term-bench.XXXXXX)"
server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

python3 -c 'import secrets; print(secrets.token_hex(32))' >"$tmp/token"
chmod 600 "$tmp/token"
cat >"$tmp/policy.toml" <<'EOF'
version = 1
[exec]
allowed_executables = ["cat", "sh", "seq"]
allow_interpreters = true
allow_eval = true
[tier]
optional_layers = ["cgroup", "protected_paths", "disk"]
EOF
if [ "$redaction" = off ]; then printf '[redaction]\nenabled = false\n' >>"$tmp/policy.toml"; fi
"$bin" policy check "$tmp/policy.toml" >/dev/null
mkdir -p "$tmp/ws" "$tmp/state" "$tmp/state-mcp"

setpriv --pdeathsig TERM "$bin" serve --policy "$tmp/policy.toml" --http 127.0.0.1:0 \
    --workspace "$tmp/ws" --state-dir "$tmp/state" --token-file "$tmp/token" \
    </dev/null >"$tmp/server.stdout" 2>"$tmp/server.stderr" &
server_pid=$!
port=""
for _ in $(seq 500); do
    port="$(sed -n 's/.*serving the HTTP API on [a-z:/]*[0-9.]*:\([0-9]*\).*/\1/p' "$tmp/server.stderr")"
    [ -n "$port" ] && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.02
done
[ -n "$port" ] || { echo "term.sh: the server did not start:" >&2; cat "$tmp/server.stderr" >&2; exit 1; }

echo "# bench/term.sh $(date -u +%FT%TZ) $("$bin" --version) on $(nproc) cores, redaction $redaction, load $(cut -d' ' -f1-3 /proc/loadavg)"
BENCH_TOKEN_FILE="$tmp/token" BENCH_BIN="$bin" BENCH_POLICY="$tmp/policy.toml" \
    BENCH_WS="$tmp/ws" BENCH_STATE_MCP="$tmp/state-mcp" \
    python3 -u - "$port" "$server_pid" "$keys" "$rounds" "$mem_k" "$tiers" <<'PY'
import base64, http.client, json, os, pty, socket, statistics, struct, subprocess, sys, time

port, server_pid, keys, rounds, mem_k = (int(x) for x in sys.argv[1:6])
tiers = sys.argv[6].split()
TOKEN = open(os.environ["BENCH_TOKEN_FILE"]).read().strip()
WAIT_MS = 2000


def pct(xs, p):  # nearest rank
    xs = sorted(xs)
    return xs[max(0, min(len(xs) - 1, int(-(-p * len(xs) // 100)) - 1))]


class Http:
    def __init__(self, session="bench"):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.session = session

    def call(self, method, path, body=None):
        h = {"Authorization": f"Bearer {TOKEN}", "Tierbox-Session": self.session}
        if body is not None:
            h["Content-Type"] = "application/json"
            body = json.dumps(body)
        self.conn.request(method, path, body=body, headers=h)
        r = self.conn.getresponse()
        return r.status, json.loads(r.read() or b"null")

    def ok(self, method, path, body=None):
        status, v = self.call(method, path, body)
        if status != 200:
            raise SystemExit(f"term.sh: {method} {path}: {status} {v}")
        return v


def carried(out):
    b64 = out.get("bytes_base64")
    return base64.b64decode(b64) if b64 is not None else out.get("text", "").encode()


def settle(read, offset):
    """Reads until the term has been quiet for 200 ms; the next offset."""
    while True:
        got, offset = read(offset, 200)
        if not got:
            return offset


class LocalPty:
    name = "local-pty"

    def __init__(self, tier):
        self.primary, secondary = pty.openpty()
        self.proc = subprocess.Popen(["cat"], stdin=secondary, stdout=secondary,
                                     stderr=secondary, start_new_session=True)
        os.close(secondary)
        time.sleep(0.1)

    def key(self):
        t = time.perf_counter()
        os.write(self.primary, b"x")
        got = b""
        while b"x" not in got:
            got += os.read(self.primary, 4096)
        return time.perf_counter() - t

    def close(self):
        self.proc.kill()
        self.proc.wait()
        os.close(self.primary)


class HttpTerm:
    name = "http"

    def __init__(self, tier):
        self.h = Http()
        started = self.h.ok("POST", "/v1/terms", {"command": "cat", "tier": tier,
                                                 "pty": {"rows": 24, "cols": 80}})
        self.id = started["id"]
        self.offset = started["output"]["next_offset"]

    def read(self, offset, wait_ms):
        out = self.h.ok("GET", f"/v1/terms/{self.id}/output?offset={offset}&wait_ms={wait_ms}")
        return carried(out), out["next_offset"]

    def key(self):
        t = time.perf_counter()
        self.h.ok("POST", f"/v1/terms/{self.id}/input", {"data": "x"})
        got = b""
        while b"x" not in got:
            chunk, self.offset = self.read(self.offset, WAIT_MS)
            got += chunk
        return time.perf_counter() - t

    def close(self):
        self.h.ok("POST", f"/v1/terms/{self.id}/kill")


class WsTerm:
    """A minimal RFC 6455 client: masked binary frames out, frames in."""
    name = "ws"

    def __init__(self, tier):
        self.h = Http()
        started = self.h.ok("POST", "/v1/terms", {"command": "cat", "tier": tier,
                                                 "pty": {"rows": 24, "cols": 80}})
        self.id = started["id"]
        status, v = self.h.call("POST", f"/v1/terms/{self.id}/ws_ticket")
        if status == 404 and v and v.get("error", {}).get("code") != "term.not_found":
            self.h.ok("POST", f"/v1/terms/{self.id}/kill")
            raise NotImplementedError("this server has no WebSocket route")
        if status != 200:
            raise SystemExit(f"term.sh: ws_ticket: {status} {v}")
        ticket = v["ticket"]
        offset = started["output"]["next_offset"]
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall((f"GET /v1/terms/{self.id}/ws?ticket={ticket}&offset={offset} HTTP/1.1\r\n"
                        f"Host: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.s.recv(1)
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise SystemExit(f"term.sh: WebSocket upgrade refused: {head!r}")
        self.buf = b""

    def recv_exact(self, n):
        while len(self.buf) < n:
            chunk = self.s.recv(65536)
            if not chunk:
                raise SystemExit("term.sh: the WebSocket closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def frame(self):
        b0, b1 = self.recv_exact(2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack(">H", self.recv_exact(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", self.recv_exact(8))[0]
        return b0 & 0x0F, self.recv_exact(n)

    def send(self, opcode, payload):
        mask = os.urandom(4)
        n = len(payload)
        head = bytes([0x80 | opcode])
        head += bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n)
        self.s.sendall(head + mask + bytes(c ^ mask[i % 4] for i, c in enumerate(payload)))

    def key(self):
        t = time.perf_counter()
        self.send(2, b"x")
        while True:
            op, data = self.frame()
            if op == 2 and b"x" in data:
                return time.perf_counter() - t

    def close(self):
        self.s.close()
        self.h.ok("POST", f"/v1/terms/{self.id}/kill")


class Mcp:
    def __init__(self):
        self.p = subprocess.Popen(
            [os.environ["BENCH_BIN"], "serve", "--mcp", "--policy", os.environ["BENCH_POLICY"],
             "--workspace", os.environ["BENCH_WS"], "--state-dir", os.environ["BENCH_STATE_MCP"]],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.next = 0
        self.rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                "clientInfo": {"name": "bench", "version": "1"}})
        self.p.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")

    def rpc(self, method, params):
        self.next += 1
        self.p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.next, "method": method,
                                       "params": params}) + "\n")
        while True:
            v = json.loads(self.p.stdout.readline())
            if v.get("id") == self.next:
                return v

    def tool(self, name, args):
        r = self.rpc("tools/call", {"name": name, "arguments": args})["result"]
        if r.get("isError"):
            raise SystemExit(f"term.sh: {name}: {r}")
        return r["structuredContent"]

    def close(self):
        self.p.stdin.close()
        self.p.wait()


MCP = None


class McpTerm:
    name = "mcp"

    def __init__(self, tier):
        global MCP
        if MCP is None:
            MCP = Mcp()
        started = MCP.tool("session_start", {"command": "cat", "tier": tier, "yield_ms": 200})
        self.id = started["id"]
        self.offset = started["output"]["next_offset"]

    def key(self):
        t = time.perf_counter()
        got = b""
        out = MCP.tool("session_write", {"id": self.id, "data": "x", "offset": self.offset,
                                         "max_bytes": 1, "yield_ms": WAIT_MS})["output"]
        while True:
            got += carried(out)
            self.offset = out["next_offset"]
            if b"x" in got:
                return time.perf_counter() - t
            out = MCP.tool("session_read", {"id": self.id, "offset": self.offset,
                                            "max_bytes": 1, "yield_ms": WAIT_MS})

    def close(self):
        MCP.tool("session_close", {"id": self.id})


# Part 1: latency.
faces = [LocalPty, HttpTerm, WsTerm, McpTerm]
lat = {}
skipped = set()
per_round = max(1, keys // rounds)
for tier in tiers:
    for r in range(rounds):
        order = faces[r % len(faces):] + faces[:r % len(faces)]
        for face in order:
            if face.name in skipped:
                continue
            try:
                term = face(tier)
            except NotImplementedError as e:
                print(f"# {face.name}: skipped: {e}")
                skipped.add(face.name)
                continue
            term.key()  # warm: the first echo also carries the term's first screen
            samples = [term.key() for _ in range(per_round)]
            term.close()
            lat.setdefault((tier, face.name), []).extend(samples)

print()
print("| tier | face | keys | p50 | p99 | p50 / local-pty |")
print("|---|---|---|---|---|---|")
for tier in tiers:
    floor = statistics.median(lat[(tier, "local-pty")])
    for face in faces:
        xs = lat.get((tier, face.name))
        if not xs:
            continue
        p50 = statistics.median(xs)
        print(f"| {tier.upper()} | {face.name} | {len(xs)} | {p50 * 1e3:.3f} ms | "
              f"{pct(xs, 99) * 1e3:.3f} ms | {p50 / floor:.1f} |")
if MCP is not None:
    MCP.close()


# Part 2: memory per term.
def mem():
    rss = next(int(l.split()[1]) for l in open(f"/proc/{server_pid}/status") if l.startswith("VmRSS"))
    pss = next(int(l.split()[1]) for l in open(f"/proc/{server_pid}/smaps_rollup") if l.startswith("Pss:"))
    return rss, pss


RING = 1 << 20
h = Http("memory")
tier = tiers[-1]
script = "read x; seq 1 400000; exec cat"  # seq prints 2.7 MB: more than the ring holds
# One start and end first, so the one-time cost of the first term is not counted.
warm = h.ok("POST", "/v1/terms", {"command": "sh", "args": ["-c", "exec cat"], "tier": tier})
h.ok("POST", f"/v1/terms/{warm['id']}/kill")
time.sleep(0.5)
before = mem()
ids = []
for _ in range(mem_k):
    t = h.ok("POST", "/v1/terms", {"command": "sh", "args": ["-c", script], "tier": tier,
                                   "pty": {"rows": 24, "cols": 80}})
    ids.append(t["id"])
time.sleep(1.0)
idle = mem()
for i in ids:
    h.ok("POST", f"/v1/terms/{i}/input", {"data": "\r"})
for i in ids:
    # Until the term has printed past its ring and is quiet (idle in `cat`).
    last = -1
    while True:
        total = h.ok("GET", f"/v1/terms/{i}/output?offset=0&max_bytes=1&wait_ms=0")["total_bytes"]
        if total == last and total > 2 * RING:
            break
        last = total
        time.sleep(0.3)
time.sleep(1.0)
full = mem()
print()
print(f"| {mem_k} terms, Tier {tier.upper()} | VmRSS per term | Pss per term |")
print("|---|---|---|")
print(f"| idle, nothing printed | {(idle[0] - before[0]) / mem_k:.0f} KiB | {(idle[1] - before[1]) / mem_k:.0f} KiB |")
print(f"| idle after printing past the 1 MiB ring | {(full[0] - before[0]) / mem_k:.0f} KiB | {(full[1] - before[1]) / mem_k:.0f} KiB |")
beyond = (full[1] - before[1]) / mem_k - RING / 1024
print(f"| of which beyond the ring | | {beyond:.0f} KiB (target <= 1024 KiB) |")
for i in ids:
    h.ok("POST", f"/v1/terms/{i}/kill")
left = h.ok("GET", "/v1/terms")["terms"]
running = [t for t in left if t.get("state") == "running"]
print(f"\nafter killing every term: {len(running)} running")
sys.exit(1 if running or beyond > 1024 else 0)
PY
