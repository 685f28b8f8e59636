#!/usr/bin/env bash
# Entry-point benchmark: what one call of `/bin/true` costs through each way an agent
# integration calls Tierbox, paired in one run against the references, on a release
# `tierbox`:
#
#   plain          /bin/true spawned by the benchmark's own client (Python subprocess)
#   bwrap          bare `bwrap` (all namespaces, tmpfs root, the system roots read-only,
#                  /proc, /dev, no capabilities) running /bin/true
#   cli-b-cold     `tierbox run --tier b -- true`, one process per call, no daemon
#   cli-c-cold     `tierbox run --tier c -- true`, one process per call, no daemon
#   cli-b-daemon   the same CLI call with `tierbox daemon start` running
#   cli-c-daemon   (the CLI hands the request to the daemon)
#   http-b         POST /v1/process/run {"command":"true","tier":"b"} on the daemon's
#   http-c         unix socket, sequential, one keep-alive connection (stdlib client)
#   mcp-b          tools/call process_run {"command":"true","tier":"b"} to one
#   mcp-c          `tierbox serve --mcp` over stdio, sequential (JSON-RPC lines)
#   codex / srt    the peers' CLIs (`codex sandbox -- /bin/true`, `srt /bin/true`) when
#                  installed
#   floor-b        the least a CLI call through the daemon can cost: a minimal static C
#   floor-c        client (connect, one POST /v1/process/run, read the reply, exit; built
#                  here with `cc` when there is one) run per call like the CLI, against
#                  the same daemon
#
# Configurations run in ROUNDS chunks each, in rotating order, so all see the same load.
# Prints p50/p90 per configuration and the ratios the targets are written against:
# cli-c-cold/bwrap, cli-b-cold/plain, cli-c-daemon/bwrap, cli-b-daemon/plain,
# http-c/bwrap, http-b/plain (and mcp-c/bwrap, mcp-b/plain, against the same targets as
# HTTP).
#
#   bench/entrypoints.sh [CALLS]    # CALLS per configuration, default 200
#
# Environment: TIERBOX_BIN (default ${CARGO_TARGET_DIR:-target}/release/tierbox, built
# when missing), ENTRYPOINTS_ROUNDS (5). Needs python3, bwrap and user namespaces.
set -euo pipefail
cd "$(dirname "$0")/.."
calls="${1:-200}"
rounds="${ENTRYPOINTS_ROUNDS:-5}"
[[ "$calls" =~ ^[1-9][0-9]*$ && "$rounds" =~ ^[1-9][0-9]*$ ]] || {
  echo "usage: $0 [CALLS]  (see the header of $0 for the environment)" >&2
  exit 2
}
bin="${TIERBOX_BIN:-${CARGO_TARGET_DIR:-target}/release/tierbox}"
if [[ ! -x "$bin" ]]; then
  cargo build --release -q -p tierbox-cli
fi
bin="$(realpath "$bin")"
work="$(mktemp -d)"
export XDG_STATE_HOME="$work/state"
ws="$work/ws"
mkdir -p "$ws"
cleanup() {
  "$bin" daemon stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# The floor client: what any client of the daemon has to do, and nothing else.
floor=""
if command -v cc >/dev/null; then
  cat >"$work/floor.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
/* floor SOCKET TOKEN TIER: one POST /v1/process/run of `true`; exit 0 when it exited 0. */
int main(int argc, char **argv) {
    static char req[1024], reply[1 << 16];
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    char body[64];
    size_t got = 0;
    ssize_t n;
    int fd, len, body_len;
    if (argc != 4) return 2;
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    strncpy(addr.sun_path, argv[1], sizeof addr.sun_path - 1);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr)) return 3;
    body_len = snprintf(body, sizeof body, "{\"command\":\"true\",\"tier\":\"%s\"}", argv[3]);
    len = snprintf(req, sizeof req,
                   "POST /v1/process/run HTTP/1.1\r\nHost: tierbox\r\nAuthorization: Bearer %s\r\n"
                   "Content-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
                   argv[2], body_len, body);
    if (write(fd, req, len) != len) return 4;
    while ((n = read(fd, reply + got, sizeof reply - 1 - got)) > 0) got += n;
    reply[got] = 0;
    return strncmp(reply, "HTTP/1.1 200", 12) || !strstr(reply, "\"exit_code\":0") ? 5 : 0;
}
C
  if cc -O2 -static -o "$work/floor" "$work/floor.c" 2>/dev/null || cc -O2 -o "$work/floor" "$work/floor.c"; then
    floor="$work/floor"
  fi
fi

echo "== $(uname -r), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $calls calls x $rounds rounds"
"$bin" daemon start --workspace "$ws" >/dev/null
python3 - "$bin" "$ws" "$XDG_STATE_HOME/tierbox" "$calls" "$rounds" "$floor" <<'EOF'
import json, os, shutil, socket, subprocess, sys, time

tierbox, ws, state, calls, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
floor = sys.argv[6]
sock_path = os.path.join(state, "daemon.sock")
token = open(os.path.join(state, "http-token")).read().strip()
devnull = subprocess.DEVNULL

def spawn(argv, env=None):
    def call():
        r = subprocess.run(argv, stdin=devnull, stdout=devnull, stderr=devnull, env=env)
        if r.returncode != 0:
            raise SystemExit(f"{argv[:4]}... exited {r.returncode}")
    return call

roots = [p for p in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc") if os.path.exists(p)]
bwrap = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--tmpfs", "/"]
for r in roots:
    bwrap += ["--ro-bind", r, r]
bwrap += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--cap-drop", "ALL", "/bin/true"]

cold = dict(os.environ, TIERBOX_DAEMON="off")
warm = dict(os.environ)
warm.pop("TIERBOX_DAEMON", None)
run = lambda tier: [tierbox, "run", "--tier", tier, "--workspace", ws, "--", "true"]

class Http:
    def __init__(self, tier):
        self.body = json.dumps({"command": "true", "tier": tier}).encode()
        self.s = None
    def __call__(self):
        if self.s is None:
            self.s = socket.socket(socket.AF_UNIX)
            self.s.connect(sock_path)
        self.s.sendall(
            b"POST /v1/process/run HTTP/1.1\r\nHost: tierbox\r\nAuthorization: Bearer "
            + token.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(self.body)).encode() + b"\r\n\r\n" + self.body)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.s.recv(65536)
            if not chunk:
                raise SystemExit("the daemon closed the connection")
            data += chunk
        head, rest = data.split(b"\r\n\r\n", 1)
        if not head.startswith(b"HTTP/1.1 200"):
            raise SystemExit(head.decode(errors="replace"))
        length = next(int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:"))
        while len(rest) < length:
            rest += self.s.recv(65536)
        if json.loads(rest).get("exit_code") != 0:
            raise SystemExit(rest[:200])

class Mcp:
    """One `tierbox serve --mcp` session shared by both tiers' calls."""
    proc = None
    next_id = 1

    def __init__(self, tier):
        self.tier = tier

    @classmethod
    def rpc(cls, method, params, notify=False):
        msg = {"jsonrpc": "2.0", "method": method, "params": params}
        if not notify:
            msg["id"] = cls.next_id
            cls.next_id += 1
        cls.proc.stdin.write(json.dumps(msg) + "\n")
        cls.proc.stdin.flush()
        if notify:
            return None
        while True:
            line = cls.proc.stdout.readline()
            if not line:
                raise SystemExit("the MCP server closed its stdout")
            reply = json.loads(line)
            if reply.get("id") == msg["id"]:
                return reply

    @classmethod
    def start(cls):
        cls.proc = subprocess.Popen([tierbox, "serve", "--mcp", "--workspace", ws],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=devnull, text=True, env=warm)
        cls.rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                               "clientInfo": {"name": "bench", "version": "1"}})
        cls.rpc("notifications/initialized", {}, notify=True)

    def __call__(self):
        if Mcp.proc is None:
            Mcp.start()
        r = Mcp.rpc("tools/call", {"name": "process_run",
                                   "arguments": {"command": "true", "tier": self.tier}})
        if r["result"].get("isError") or r["result"]["structuredContent"].get("exit_code") != 0:
            raise SystemExit(json.dumps(r)[:300])

configs = {
    "plain": spawn(["/bin/true"]),
    "bwrap": spawn(bwrap),
    "cli-b-cold": spawn(run("b"), cold),
    "cli-c-cold": spawn(run("c"), cold),
    "cli-b-daemon": spawn(run("b"), warm),
    "cli-c-daemon": spawn(run("c"), warm),
    "http-b": Http("b"),
    "http-c": Http("c"),
    "mcp-b": Mcp("b"),
    "mcp-c": Mcp("c"),
}
if floor:
    configs["floor-b"] = spawn([floor, sock_path, token, "b"])
    configs["floor-c"] = spawn([floor, sock_path, token, "c"])
if shutil.which("codex"):
    configs["codex"] = spawn(["codex", "sandbox", "--", "/bin/true"])
if shutil.which("srt"):
    configs["srt"] = spawn(["srt", "/bin/true"])

# The daemon path must really be taken (and the cold path really not).
out = subprocess.run([tierbox, "run", "--json", "--tier", "b", "--workspace", ws, "--", "true"],
                     capture_output=True, env=warm, check=True)
assert json.loads(out.stdout)["via"] == "daemon", out.stdout[-300:]
out = subprocess.run([tierbox, "run", "--json", "--tier", "b", "--workspace", ws, "--", "true"],
                     capture_output=True, env=cold, check=True)
assert json.loads(out.stdout)["via"] == "in_process", out.stdout[-300:]

names = list(configs)
times = {n: [] for n in names}
for n in names:  # warm-up
    for _ in range(5):
        configs[n]()
per_round = max(1, calls // rounds)
for r in range(rounds):
    order = names[r % len(names):] + names[:r % len(names)]
    for n in order:
        for _ in range(per_round):
            t = time.perf_counter()
            configs[n]()
            times[n].append(time.perf_counter() - t)

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round((len(xs) - 1) * p))]

p50 = {}
for n in names:
    p50[n] = pct(times[n], 0.5)
    print(f"{n:14} p50 {p50[n]*1e3:7.2f} ms   p90 {pct(times[n], 0.9)*1e3:7.2f} ms   ({len(times[n])} calls)")
for name, ref, target in [
    ("cli-c-cold", "bwrap", 1.0), ("cli-b-cold", "plain", 4.0),
    ("cli-c-daemon", "bwrap", 0.5), ("cli-b-daemon", "plain", 2.0),
    ("http-c", "bwrap", 0.5), ("http-b", "plain", 1.5),
    ("mcp-c", "bwrap", 0.5), ("mcp-b", "plain", 1.5),
    ("codex", "bwrap", None), ("srt", "bwrap", None),
    ("floor-b", "plain", None), ("floor-c", "bwrap", None),
]:
    if name in p50:
        goal = f"(target <= {target})" if target else ""
        print(f"ratio {name} / {ref}: {p50[name] / p50[ref]:.2f} {goal}")
EOF
