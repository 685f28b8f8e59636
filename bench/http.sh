#!/usr/bin/env bash
# HTTP API benchmark, two parts, on a release `tierbox`:
#
# 1. Throughput: Tier C runs of /bin/true per second through `POST /v1/process/run`
#    ({"command":"true","tier":"c"}), driven by CLIENTS Python threads (stdlib
#    http.client, one keep-alive connection each), against one `tierbox serve --http`
#    per --max-concurrent value (2, 4, 8 by default; --queue 64). Paired in the same run
#    with a baseline: the same number of bare `bwrap --unshare-all --ro-bind / / --dev /dev
#    --proc /proc /bin/true` spawns from the same number of threads. All servers are up
#    at once and the configurations run in ROUNDS chunks each, in rotating order, so all
#    see the same load. Prints runs/s, p50/p99 latency, non-200 answers (429s included),
#    failed runs, the supervisor's and the client's CPU per run and how busy the machine
#    was, and the ratio Tierbox-via-HTTP / bare bwrap (target: >= 300 runs/s via HTTP).
# 2. Memory per live background sandbox: a fresh server's VmRSS and Pss (smaps_rollup)
#    before and after starting K `sleep 600` background processes (Tier C), one per
#    Tierbox-Session; (after - before) / K, for K = 8 and then 16 (8 more). The baseline is
#    read after one warm-up background start and end (the one-time cost of the first
#    start is shown on its own). Then every session is ended (DELETE /v1/session), the
#    server must have no sandbox left, and the cycle is repeated once as a leak check.
#    (Target: <= 1 MiB per sandbox.)
#
#   bench/http.sh [REQUESTS]     # REQUESTS per configuration, default 2000
#
# Environment: TIERBOX_BIN (default ${CARGO_TARGET_DIR:-target}/release/tierbox, built if
# missing or too old to have `serve`), HTTP_BENCH_CLIENTS (16), HTTP_BENCH_MAX_CONCURRENT
# ("2 4 8"), HTTP_BENCH_QUEUE (64), HTTP_BENCH_ROUNDS (4), HTTP_BENCH_K ("8 16").
# Needs user namespaces, bwrap and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
requests="${1:-2000}"
clients="${HTTP_BENCH_CLIENTS:-16}"
concurrency="${HTTP_BENCH_MAX_CONCURRENT:-2 4 8}"
queue="${HTTP_BENCH_QUEUE:-64}"
rounds="${HTTP_BENCH_ROUNDS:-4}"
ks="${HTTP_BENCH_K:-8 16}"

usage() { echo "usage: $0 [REQUESTS]  (see the header of $0 for the environment)" >&2; exit 2; }
[[ "$requests" =~ ^[1-9][0-9]*$ ]] || usage
[[ "$clients" =~ ^[1-9][0-9]*$ && "$queue" =~ ^[0-9]+$ && "$rounds" =~ ^[1-9][0-9]*$ ]] || usage
[[ "$concurrency" =~ ^[0-9\ ]+$ && "$ks" =~ ^[0-9\ ]+$ ]] || usage
for tool in python3 bwrap setpriv; do
    command -v "$tool" >/dev/null || { echo "http.sh: $tool not found on PATH" >&2; exit 1; }
done

if [ -n "${TIERBOX_BIN:-}" ]; then
    tierbox="$TIERBOX_BIN"
else
    tierbox="${CARGO_TARGET_DIR:-target}/release/tierbox"
    # Built when missing, or too old to have `serve` (otherwise used as it is: see its
    # date in the header, and rebuild it yourself after changing the code).
    if [ ! -x "$tierbox" ] || ! "$tierbox" serve --help >/dev/null 2>&1; then
        cargo build -q --release -p tierbox-cli >/dev/null 2>&1 || cargo build --release -p tierbox-cli
    fi
fi
[ -x "$tierbox" ] || { echo "http.sh: no tierbox binary at $tierbox" >&2; exit 1; }
tierbox="$(realpath "$tierbox")"

tmp="$(mktemp -d /tmp/tierbox-http-bench.XXXXXX)"
servers=() # "pid" of every server still running
driver_pid=""
cleanup() {
    local pid
    if [ -n "$driver_pid" ]; then kill "$driver_pid" 2>/dev/null || true; wait "$driver_pid" 2>/dev/null || true; fi
    for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${servers[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap 'cleanup' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

python3 -c 'import secrets; print(secrets.token_hex(32))' >"$tmp/token"
chmod 600 "$tmp/token"
token="$(cat "$tmp/token")"
# The strict default plus room for the memory part's background processes.
"$tierbox" policy init >"$tmp/policy.toml"
cat >>"$tmp/policy.toml" <<'EOF'

[background]
max_per_owner = 16
max_total = 32
EOF
"$tierbox" policy check "$tmp/policy.toml" >/dev/null
grep -q '"true"' "$tmp/policy.toml" && grep -q '"sleep"' "$tmp/policy.toml" ||
    { echo "http.sh: the strict policy no longer allows true and sleep" >&2; exit 1; }

# Starts a server named $1 with --max-concurrent $2; sets $server_pid and $server_port.
start_server() {
    local name="$1" mc="$2" i
    # A workspace per server: placeholders for missing protected paths (.git/hooks,
    # .git/config) are reference counted within one supervisor only.
    mkdir -p "$tmp/ws-$name"
    # SIGTERM when this script dies, however it dies.
    setpriv --pdeathsig TERM "$tierbox" serve --policy "$tmp/policy.toml" \
        --http 127.0.0.1:0 --workspace "$tmp/ws-$name" --state-dir "$tmp/state-$name" \
        --token-file "$tmp/token" --max-concurrent "$mc" --queue "$queue" \
        </dev/null >"$tmp/$name.stdout" 2>"$tmp/$name.stderr" &
    server_pid=$!
    servers+=("$server_pid")
    server_port=""
    for i in $(seq 500); do
        server_port="$(sed -n 's/.*serving the HTTP API on [a-z:/]*[0-9.]*:\([0-9]*\).*/\1/p' "$tmp/$name.stderr")"
        [ -n "$server_port" ] && break
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.02
    done
    if [ -z "$server_port" ]; then
        echo "http.sh: server $name did not start:" >&2
        cat "$tmp/$name.stderr" >&2
        exit 1
    fi
}

# Runs the load driver; in the background, so that a signal reaches the traps at once.
drive() {
    local rc=0
    python3 -u "$tmp/drive.py" "$@" &
    driver_pid=$!
    wait "$driver_pid" || rc=$?
    driver_pid=""
    return "$rc"
}

# Stops server $1 (pid $2) with SIGTERM; complains about a bad exit.
stop_server() {
    local name="$1" pid="$2" rc=0 p
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" || rc=$?
    local keep=()
    for p in "${servers[@]}"; do [ "$p" = "$pid" ] || keep+=("$p"); done
    servers=("${keep[@]+"${keep[@]}"}")
    [ "$rc" = 0 ] || echo "http.sh: server $name exited with status $rc" >&2
    if [ -n "$(ls -A "$tmp/ws-$name")" ]; then
        echo "http.sh: server $name left files in its workspace: $(cd "$tmp/ws-$name" && find . -mindepth 1 | head -5 | tr '\n' ' ')" >&2
    fi
}

cat >"$tmp/drive.py" <<'PY'
"""Load driver for bench/http.sh: `throughput SPEC...` and `memory PORT PID KS`."""
import http.client, json, os, resource, statistics, subprocess, sys, threading, time

TOKEN = open(os.environ["BENCH_TOKEN_FILE"]).read().strip()
BWRAP = ["bwrap", "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
         "/bin/true"]
RUN_BODY = json.dumps({"command": "true", "tier": "c"})
HZ = os.sysconf("SC_CLK_TCK")


def headers(session=None):
    h = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    if session:
        h["Tierbox-Session"] = session
    return h


def call(conn, method, path, body=None, session=None):
    conn.request(method, path, body=body, headers=headers(session))
    r = conn.getresponse()
    return r.status, r.read()


def proc_cpu(pid):
    """(self, reaped children) CPU seconds of pid."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / HZ, (int(f[13]) + int(f[14])) / HZ


def machine_cpu():
    """(busy, total) jiffies of the whole machine."""
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    idle = f[3] + f[4]
    return sum(f) - idle, sum(f)


def pct(xs, p):  # nearest rank
    xs = sorted(xs)
    return xs[max(0, min(len(xs) - 1, int(-(-p * len(xs) // 100)) - 1))]


class Target:
    def __init__(self, spec):
        # "bwrap" or "http:MC:PORT:PID"
        self.spec = spec
        parts = spec.split(":")
        self.kind = parts[0]
        if self.kind == "http":
            self.mc, self.port, self.pid = int(parts[1]), int(parts[2]), int(parts[3])
            self.label = f"tierbox http, max-concurrent {self.mc}"
        else:
            self.label = "bare bwrap (Popen)"
        self.lat, self.status, self.failed = [], {}, 0
        self.first_error = None
        self.wall = self.server_cpu = self.child_cpu = self.client_cpu = 0.0
        self.busy = self.total = 0
        self.lock = threading.Lock()

    def worker(self, n_left, start, conn_ok):
        conn = None
        lat, status, failed = [], {}, 0
        if self.kind == "http":
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        start.wait()
        while True:
            with self.lock:
                if n_left[0] <= 0:
                    break
                n_left[0] -= 1
            t0 = time.perf_counter()
            if self.kind == "http":
                try:
                    code, body = call(conn, "POST", "/v1/process/run", RUN_BODY)
                except (OSError, http.client.HTTPException) as e:
                    code, body = f"conn:{type(e).__name__}", str(e).encode()
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
                lat.append(time.perf_counter() - t0)
                status[code] = status.get(code, 0) + 1
                if code == 200:
                    if json.loads(body).get("exit_code") != 0:
                        failed += 1
                        code = "exit"
                if code != 200 and self.first_error is None:
                    self.first_error = f"{code}: {body[:300].decode(errors='replace')}"
            else:
                rc = subprocess.run(BWRAP, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE).returncode
                lat.append(time.perf_counter() - t0)
                status[200] = status.get(200, 0) + 1
                if rc != 0:
                    failed += 1
                    if self.first_error is None:
                        self.first_error = f"bwrap exit {rc}"
        if conn:
            conn.close()
        with self.lock:
            self.lat += lat
            self.failed += failed
            for k, v in status.items():
                self.status[k] = self.status.get(k, 0) + v

    def chunk(self, n, clients, record=True):
        n_left = [n]
        start = threading.Event()
        saved = (list(self.lat), dict(self.status), self.failed)
        threads = [threading.Thread(target=self.worker, args=(n_left, start, None))
                   for _ in range(clients)]
        for t in threads:
            t.start()
        time.sleep(0.05)  # connections made before the clock starts
        m0 = machine_cpu()
        c0 = time.process_time()
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        s0 = proc_cpu(self.pid) if self.kind == "http" else (0, 0)
        t0 = time.perf_counter()
        start.set()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        s1 = proc_cpu(self.pid) if self.kind == "http" else (0, 0)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        c1 = time.process_time()
        m1 = machine_cpu()
        if not record:
            self.lat, self.status, self.failed = saved
            return
        self.wall += wall
        self.client_cpu += c1 - c0
        if self.kind == "http":
            self.server_cpu += s1[0] - s0[0]
            self.child_cpu += s1[1] - s0[1]
        else:  # bwrap's own CPU (and its children's) is the baseline's "server"
            self.child_cpu += (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
        self.busy += m1[0] - m0[0]
        self.total += m1[1] - m0[1]


def throughput(argv):
    requests, clients, rounds, summary = int(argv[0]), int(argv[1]), int(argv[2]), argv[3]
    targets = [Target(s) for s in argv[4:]]
    for t in targets:  # warm-up: slots, caches, connections
        t.chunk(max(4 * clients, 50), clients, record=False)
    per = [requests // rounds + (1 if i < requests % rounds else 0) for i in range(rounds)]
    for r in range(rounds):
        for i in range(len(targets)):
            targets[(r + i) % len(targets)].chunk(per[r], clients)
    base = next(t for t in targets if t.kind == "bwrap")
    base_rate = len(base.lat) / base.wall
    print(f"{requests} runs per configuration in {rounds} rotating rounds, {clients} clients")
    print(f"{'':34} {'runs/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'non-200':>8} {'failed':>6} "
          f"{'srv cpu':>8} {'child':>7} {'client':>7} {'busy':>5} {'vs bwrap':>8}")
    out = []
    for t in targets:
        n = len(t.lat)
        rate = n / t.wall
        non200 = {k: v for k, v in t.status.items() if k != 200}
        bad = sum(non200.values())
        ratio = "" if t is base else f"{rate / base_rate:.2f}"
        srv = "" if t is base else f"{t.server_cpu / n * 1e3:.2f}ms"
        print(f"{t.label:34} {rate:7.0f} {statistics.median(t.lat) * 1e3:7.1f} "
              f"{pct(t.lat, 99) * 1e3:7.1f} {bad:8d} {t.failed:6d} {srv:>8} "
              f"{t.child_cpu / n * 1e3:5.2f}ms {t.client_cpu / n * 1e3:5.2f}ms "
              f"{100 * t.busy / max(1, t.total):4.0f}% {ratio:>8}")
        if non200:
            print(f"{'':34} non-200 answers: {non200}")
        if t.first_error:
            print(f"{'':34} first error: {t.first_error}")
        if t is not base:
            out.append(f"max-concurrent {t.mc}: {rate:.0f}/s (p50 {statistics.median(t.lat) * 1e3:.1f} ms, "
                       f"p99 {pct(t.lat, 99) * 1e3:.1f} ms, {bad} non-200, {t.failed} failed, "
                       f"{rate / base_rate:.2f}x bwrap)")
    print("(srv cpu: the supervisor's own CPU per run; child: CPU of the reaped sandboxes / "
          "bwrap processes per run; client: this driver's CPU per run; busy: whole machine)")
    best = max(len(t.lat) / t.wall for t in targets if t is not base)
    print(f"target >= 300 runs/s via HTTP: {'met' if best >= 300 else 'NOT met'} (best {best:.0f}/s)")
    with open(summary, "w") as f:
        f.write("; ".join(out) + f"; bare bwrap: {base_rate:.0f}/s\n")


def status_kib(pid):
    st = {}
    for line in open(f"/proc/{pid}/status"):
        k, _, v = line.partition(":")
        st[k] = v.split()
    pss = 0
    for line in open(f"/proc/{pid}/smaps_rollup"):
        if line.startswith("Pss:"):
            pss = int(line.split()[1])
    return {"rss": int(st["VmRSS"][0]), "pss": pss, "threads": int(st["Threads"][0]),
            "fds": len(os.listdir(f"/proc/{pid}/fd"))}


def descendants(pid):
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def mem_of(pids):
    """(Pss, USS = Private_Clean + Private_Dirty) KiB summed over pids."""
    pss = uss = 0
    for p in pids:
        try:
            for line in open(f"/proc/{p}/smaps_rollup"):
                k, _, v = line.partition(":")
                if k == "Pss":
                    pss += int(v.split()[0])
                elif k in ("Private_Clean", "Private_Dirty"):
                    uss += int(v.split()[0])
        except OSError:
            pass
    return pss, uss


def memory(argv):
    port, pid, ks, summary = int(argv[0]), int(argv[1]), sorted(int(k) for k in argv[2].split()), argv[3]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    sessions = []
    errors = []

    def start(session):
        body = json.dumps({"command": "sleep", "args": ["600"], "background": True, "tier": "c"})
        code, resp = call(conn, "POST", "/v1/process/run", body, session)
        if code != 200 or json.loads(resp)["status"]["state"] != "running":
            errors.append(f"start {session}: {code} {resp[:300]!r}")
        sessions.append(session)

    def end_all():
        for s in sessions:
            code, resp = call(conn, "DELETE", "/v1/session", None, s)
            if code != 200:
                errors.append(f"end {s}: {code} {resp[:300]!r}")
        sessions.clear()

    # The server's own helper processes (its watchdog, forked at start) are there from
    # the start and are not sandboxes: they are left out of every count.
    own = set(descendants(pid))

    def settle():
        time.sleep(1.0)
        m = status_kib(pid)
        m["procs"] = [p for p in descendants(pid) if p not in own]
        m["all_pss"], m["uss"] = mem_of([pid] + m["procs"])
        m["box_uss"] = mem_of(m["procs"])[1]
        return m

    fresh = settle()
    start("bench-warmup")  # the first start's one-time cost (launcher thread, caches)
    first = settle()
    end_all()
    base = settle()
    print(f"supervisor fresh: VmRSS {fresh['rss']} KiB, Pss {fresh['pss']} KiB, "
          f"{fresh['threads']} threads, {fresh['fds']} fds; with its first background "
          f"process: +{first['rss'] - fresh['rss']} KiB VmRSS; after ending it: "
          f"VmRSS {base['rss']} KiB, Pss {base['pss']} KiB (the baseline)")
    print(f"{'live':>5} {'VmRSS':>8} {'dRSS/K':>7} {'Pss':>8} {'dPss/K':>7} {'tree Pss':>9} "
          f"{'dTree/K':>8} {'box USS/K':>9} {'procs':>6} {'threads':>7} {'fds':>5}   (KiB)")
    results = []
    for cycle in (1, 2):
        n = 0
        for k in ks:
            while n < k:
                start(f"bench-c{cycle}-{n}")
                n += 1
            m = settle()
            d = {x: (m[x] - base[x]) / k for x in ("rss", "pss", "all_pss")}
            print(f"{k:5d} {m['rss']:8d} {d['rss']:7.0f} {m['pss']:8d} {d['pss']:7.0f} "
                  f"{m['all_pss']:9d} {d['all_pss']:8.0f} {m['box_uss'] / k:9.0f} "
                  f"{len(m['procs']):6d} {m['threads']:7d} {m['fds']:5d}"
                  f"{'' if cycle == 1 else '   (second cycle)'}")
            if cycle == 1:
                results.append((k, d["rss"], d["all_pss"]))
        end_all()
        after = settle()
        print(f"{0:5d} {after['rss']:8d} {'':>7} {after['pss']:8d} {'':>7} {after['all_pss']:9d} "
              f"{'':>8} {'':>9} {len(after['procs']):6d} {after['threads']:7d} {after['fds']:5d}"
              f"   (every session ended, cycle {cycle})")
        if after["procs"]:
            errors.append(f"{len(after['procs'])} processes still under the server after "
                          f"ending every session: {after['procs'][:8]}")
    print("(VmRSS, Pss: the supervisor's; tree Pss: supervisor + every sandbox process under it (not its watchdog); "
          "box USS: the sandboxes' private memory; d…/K: change from the baseline per live "
          "sandbox)")
    for e in errors:
        print(f"ERROR: {e}")
    target = all(d <= 1024 for _, d, _ in results)
    print(f"target <= 1 MiB per background sandbox (supervisor RSS): {'met' if target else 'NOT met'}")
    with open(summary, "w") as f:
        f.write(", ".join(f"{d:.0f} KiB (K={k})" for k, d, _ in results)
                + "; supervisor + sandboxes Pss: "
                + ", ".join(f"{p:.0f} KiB (K={k})" for k, _, p in results) + "\n")
    if errors:
        sys.exit(1)


if __name__ == "__main__":
    {"throughput": throughput, "memory": memory}[sys.argv[1]](sys.argv[2:])
PY
export BENCH_TOKEN_FILE="$tmp/token"

echo "== $(uname -r), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(bwrap --version), python $(python3 -c 'import platform; print(platform.python_version())')"
echo "== $tierbox ($(date -r "$tierbox" '+%F %T'))"

# --- 1. throughput ---------------------------------------------------------------------
specs=(bwrap)
names=()
pids=()
for mc in $concurrency; do
    start_server "mc$mc" "$mc"
    specs+=("http:$mc:$server_port:$server_pid")
    names+=("mc$mc")
    pids+=("$server_pid")
done
drive throughput "$requests" "$clients" "$rounds" "$tmp/summary-throughput" "${specs[@]}"
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in "${!names[@]}"; do stop_server "${names[$i]}" "${pids[$i]}"; done

# --- 2. memory per live background sandbox --------------------------------------------
echo
start_server mem 4
mem_ok=0
drive memory "$server_port" "$server_pid" "$ks" "$tmp/summary-memory" || mem_ok=$?
stop_server mem "$server_pid"

# Server logs: anything but the routine start and stop lines.
unusual="$(cat "$tmp"/*.stderr | grep -v -e 'serving the HTTP API on' -e 'received signal' || true)"
if [ -n "$unusual" ]; then
    echo
    echo "server log lines ($(printf '%s\n' "$unusual" | wc -l)), first 20:"
    printf '%s\n' "$unusual" | head -20
fi

echo
echo "== summary"
echo "http throughput (tier c /bin/true, $clients clients): $(cat "$tmp/summary-throughput")"
echo "memory per background sandbox (supervisor VmRSS): $(cat "$tmp/summary-memory" 2>/dev/null || echo 'not measured')"
exit "$mem_ok"
