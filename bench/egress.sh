#!/usr/bin/env bash
# Paired egress-proxy benchmark: time to fetch 10 MiB over plain HTTP from a test host in
# a network namespace of its own (reached over a veth pair on 10.231.9.0/24), directly
# and through `tierbox proxy` (release build), once as a forwarded plain-HTTP request and
# once through a CONNECT tunnel; the three fetches are interleaved in every iteration, in
# rotating order. Prints median and p90 time, median throughput, the ratio of median
# throughputs proxy/direct (target >= 0.8), and the proxy's CPU time per proxied fetch.
# Every fetch must return exactly 10485760 bytes, and the proxy must have allowed each.
#
# The test host is a small sendfile(2) server by default. The egress tests' lab_server.py
# streams from a Python loop that costs more CPU per byte, which on a small machine caps
# the direct fetch (5-15% on an idle 2-core VM, ~30% under load) and so flatters the
# ratio; set EGRESS_BENCH_SERVER=lab to measure against it anyway. (Over veth the proxy
# receives the sender's own segments, and sendfile's cost it more kernel time per byte
# than lab_server's: compare the CPU line of both.) On a small machine the ratio mostly
# measures CPU: the proxy's cost is kernel time (a second TCP connection, two copies,
# waking the client).
# EGRESS_BENCH_RATE=RATE (e.g. 10gbit, 5gbit, 1gbit) puts a link of that rate between
# the host and the test host (a token-bucket filter on both ends of the veth pair, with a
# 256 KiB burst: above a 64 KiB GSO segment, so none is split, and small enough that the
# rate holds from the first MiB). Unset, the veth pair moves bytes as fast as the two
# CPUs can, and the ratio then measures the CPU cost of the second TCP connection
# rather than the proxy's effect on a download (docs/benchmarks.md).
# EGRESS_BENCH_TLS=1 measures TLS termination instead: the test host serves HTTPS (a
# certificate from a CA of the script's, which the policy names in egress.upstream_roots),
# and the same download goes through the proxy once as a plain CONNECT tunnel (curl
# trusts the host's CA; the proxy never reads the bytes) and once terminated (a name whose
# egress.hosts rule allows GET /bytes/*: curl trusts the bundle `tierbox proxy --ca-out`
# wrote, the proxy decrypts, checks the request, and encrypts again towards the host),
# plus a 1-byte fetch each way for the added latency of a request on a new connection.
# Target: terminated >= 0.8 x the tunnel.
# EGRESS_BENCH_RELAYS=1 adds, in the same rotation, three minimal relays of other designs
# (bench/relay_designs.py: a user-space copy, splice(2) through a pipe, and a kernel-only
# BPF sockmap redirect) as a floor: how fast any relay is on this machine.
# Needs root (a veth pair and a network namespace), ip, unshare, nsenter, setpriv,
# python3, curl, openssl for the lab server, and tc for EGRESS_BENCH_RATE.
#
#   bench/egress.sh [ITERATIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-20}"
server="${EGRESS_BENCH_SERVER:-sendfile}"
rate="${EGRESS_BENCH_RATE:-}"
tls="${EGRESS_BENCH_TLS:-0}"
bytes=10485760
subnet=10.231.9
link="tbxbench$$" # at most 15 characters (IFNAMSIZ)

[[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "usage: $0 [ITERATIONS]" >&2; exit 2; }
[[ "$server" =~ ^(sendfile|lab)$ ]] || { echo "egress.sh: EGRESS_BENCH_SERVER is sendfile or lab" >&2; exit 2; }
[[ "$tls" =~ ^[01]$ ]] || { echo "egress.sh: EGRESS_BENCH_TLS is 0 or 1" >&2; exit 2; }
if [ "$tls" = 1 ] && [ "$server" = lab ]; then
    echo "egress.sh: EGRESS_BENCH_TLS=1 uses its own HTTPS server, not EGRESS_BENCH_SERVER=lab" >&2
    exit 2
fi
[[ -z "$rate" || "$rate" =~ ^[1-9][0-9]*[kmg]?bit$ ]] ||
    { echo "egress.sh: EGRESS_BENCH_RATE is a rate such as 10gbit, 500mbit (got '$rate')" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "egress.sh: needs root (veth pair, network namespace)" >&2; exit 1; }
for tool in ip unshare nsenter setpriv python3 curl $([ "$server" = lab ] || [ "$tls" = 1 ] && echo openssl) $([ -n "$rate" ] && echo tc); do
    command -v "$tool" >/dev/null || { echo "egress.sh: $tool not found on PATH" >&2; exit 1; }
done
if ip -o addr show | grep -q " $subnet\."; then
    echo "egress.sh: $subnet.0/24 is already configured on this host (another run?)" >&2
    exit 1
fi
# curl must talk to exactly what its arguments say.
unset http_proxy https_proxy all_proxy no_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY NO_PROXY

cargo build -q --release -p tierbox-cli >/dev/null 2>&1 || cargo build --release -p tierbox-cli
tierbox="${CARGO_TARGET_DIR:-target}/release/tierbox"

tmp="$(mktemp -d /tmp/tierbox-egress-bench.XXXXXX)"
server_pid=""
proxy_pid=""
relay_pids=()
cleanup() {
    # The server's namespace, and with it both ends of the veth pair, go with the server.
    if [ -n "$proxy_pid" ]; then kill "$proxy_pid" 2>/dev/null || true; wait "$proxy_pid" 2>/dev/null || true; fi
    if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    for pid in "${relay_pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    ip link del "$link" 2>/dev/null || true
    rm -rf "$tmp"
}
trap 'cleanup' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Waits up to 10 s for the command "$2..." to succeed; $1 says what for.
wait_for() {
    local what="$1"
    shift
    for _ in $(seq 500); do
        "$@" && return 0
        sleep 0.02
    done
    echo "egress.sh: timed out waiting for $what" >&2
    cat "$tmp/server.stderr" "$tmp/proxy.stderr" >&2 2>/dev/null || true
    exit 1
}

# --- the test host: a server in a network namespace of its own -------------------------
# Both servers exit on EOF on their stdin, a fifo only this shell holds open for writing
# (fd 3, closed for every long-lived child), and remove $tmp on the way out: killed
# without its trap, this script still leaves nothing behind.
mkfifo "$tmp/lifeline"
exec 3<>"$tmp/lifeline"
if [ "$server" = lab ]; then
    cp crates/tierbox-cli/tests/egress/lab_server.py "$tmp/"
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=lab.test \
        -addext "subjectAltName=DNS:lab.test,IP:$subnet.2" \
        -keyout "$tmp/key.pem" -out "$tmp/cert.pem" 2>/dev/null
    unshare --net -- python3 "$tmp/lab_server.py" --log "$tmp/events.jsonl" \
        --cert "$tmp/cert.pem" --key "$tmp/key.pem" --ready "$tmp/ready" \
        --host "lab=$subnet.2" --cleanup-dir "$tmp" <"$tmp/lifeline" 3>&- >/dev/null 2>"$tmp/server.stderr" &
else
    head -c "$bytes" /dev/urandom >"$tmp/body"
    # GET /bytes/<size of the body> -> the body, with sendfile(2); anything else -> 404.
    cat >"$tmp/server.py" <<'PY'
import errno, http.server, os, shutil, sys, threading, time

body, address, ready = sys.argv[1], sys.argv[2], sys.argv[3]
tls_dir = sys.argv[4] if len(sys.argv) > 4 else ""
size = os.path.getsize(body)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY, as production servers set it: a response's head and body (and TLS 1.3's
    # session tickets) are separate writes, which Nagle would hold for a delayed ACK.
    disable_nagle_algorithm = True

    def do_GET(self):
        if self.path == "/bytes/1":
            self.send_response(200)
            self.send_header("Content-Length", "1")
            self.end_headers()
            self.wfile.write(b"x")
            return
        if self.path != f"/bytes/{size}":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        self.wfile.flush()
        with open(body, "rb") as f:
            self.connection.sendfile(f)  # over TLS: a send loop of the file's bytes

    def log_message(self, *args):
        pass


def leave_on_eof():
    while sys.stdin.buffer.read(4096):
        pass
    shutil.rmtree(os.path.dirname(body), ignore_errors=True)
    os._exit(0)


threading.Thread(target=leave_on_eof, daemon=True).start()
while True:  # the address exists once the script has set up the veth pair
    try:
        httpd = http.server.ThreadingHTTPServer((address, 443 if tls_dir else 80), Handler)
        break
    except OSError as e:
        if e.errno != errno.EADDRNOTAVAIL:
            raise
        time.sleep(0.02)
if tls_dir:
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(f"{tls_dir}/cert.pem", f"{tls_dir}/key.pem")
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
open(ready, "w").close()
httpd.serve_forever()
PY
    tls_arg=()
    if [ "$tls" = 1 ]; then
        # A CA of the script's and a leaf for both names (verifiers refuse a CA certificate
        # presented as a server's).
        openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=bench CA" \
            -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" \
            -keyout "$tmp/ca-key.pem" -out "$tmp/ca.pem" 2>/dev/null
        printf 'subjectAltName=DNS:lab.test,DNS:tls.lab.test,IP:%s\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' \
            "$subnet.2" >"$tmp/leaf.ext"
        openssl req -newkey rsa:2048 -nodes -subj /CN=lab.test -keyout "$tmp/key.pem" \
            -out "$tmp/leaf.csr" 2>/dev/null
        openssl x509 -req -days 2 -in "$tmp/leaf.csr" -CA "$tmp/ca.pem" -CAkey "$tmp/ca-key.pem" \
            -set_serial 1 -extfile "$tmp/leaf.ext" -out "$tmp/cert.pem" 2>/dev/null
        tls_arg=("$tmp")
    fi
    unshare --net -- python3 "$tmp/server.py" "$tmp/body" "$subnet.2" "$tmp/ready" "${tls_arg[@]}" \
        <"$tmp/lifeline" 3>&- >/dev/null 2>"$tmp/server.stderr" &
fi
server_pid=$!
# Its namespace must exist before `netns <pid>`, or the veth end would land on the host.
own_ns="$(readlink /proc/self/ns/net)"
in_own_ns() {
    local ns
    ns="$(readlink "/proc/$server_pid/ns/net" 2>/dev/null)" && [ "$ns" != "$own_ns" ]
}
wait_for "the server's network namespace" in_own_ns
ip link del "$link" 2>/dev/null || true
ip link add "$link" type veth peer name lab0 netns "$server_pid"
ip addr add "$subnet.1/24" dev "$link"
ip link set "$link" up
nsenter --target "$server_pid" --net ip link set lo up
nsenter --target "$server_pid" --net ip addr add "$subnet.2/24" dev lab0
nsenter --target "$server_pid" --net ip link set lab0 up
wait_for "the server" test -e "$tmp/ready"
if [ -n "$rate" ]; then
    tbf=(root tbf rate "$rate" burst 256kb latency 5ms)
    if ! nsenter --target "$server_pid" --net tc qdisc add dev lab0 "${tbf[@]}" ||
        ! tc qdisc add dev "$link" "${tbf[@]}"; then
        echo "egress.sh: cannot shape the link to $rate (is sch_tbf in this kernel?)" >&2
        exit 1
    fi
fi

# --- the proxy -------------------------------------------------------------------------
cat >"$tmp/policy.toml" <<EOF
version = 1
[egress]
mode = "strict"
allow = ["lab.test", "$subnet.0/24"]
[egress.resolve]
"lab.test" = ["$subnet.2"]
EOF
ca_out=()
if [ "$tls" = 1 ]; then
    cat >>"$tmp/policy.toml" <<EOF
"tls.lab.test" = ["$subnet.2"]
[egress.hosts."tls.lab.test"]
allow = ["GET /bytes/*"]
EOF
    sed -i -e "s|^mode = \"strict\"|mode = \"strict\"\nupstream_roots = [\"$tmp/ca.pem\"]|" \
        -e 's|^allow = \["lab.test",|allow = ["lab.test", "tls.lab.test",|' "$tmp/policy.toml"
    ca_out=(--ca-out "$tmp/bundle.pem")
    # The tunnel's client trusts a bundle as large (the host's roots and the test CA), as a
    # sandboxed client's SSL_CERT_FILE is: curl parses it at every start, some 40 ms of a
    # loaded 2-CPU machine, which a one-certificate file would leave out of one side only.
    for store in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/ca-bundle.pem /etc/ssl/cert.pem; do
        [ -f "$store" ] && break
    done
    cat "$store" "$tmp/ca.pem" >"$tmp/tunnel-bundle.pem"
fi
# SIGTERM when this script dies, however it dies.
setpriv --pdeathsig TERM "$tierbox" proxy --policy "$tmp/policy.toml" --listen 127.0.0.1:0 \
    "${ca_out[@]}" 3>&- >"$tmp/proxy.json" 2>"$tmp/proxy.stderr" &
proxy_pid=$!
wait_for "the proxy" grep -q 'egress proxy on' "$tmp/proxy.stderr"
proxy="$(sed -n 's/.*egress proxy on \([0-9.:]*\).*/\1/p' "$tmp/proxy.stderr")"

# --- other relay designs (EGRESS_BENCH_RELAYS=1) ------------------------------------------
declare -A relay_port
if [ "${EGRESS_BENCH_RELAYS:-0}" = 1 ]; then
    for design in copy splice sockmap; do
        setpriv --pdeathsig TERM python3 bench/relay_designs.py "$design" 3>&- \
            >"$tmp/relay-$design.out" 2>"$tmp/relay-$design.stderr" &
        relay_pids+=($!)
        wait_for "the $design relay" grep -q '^ready ' "$tmp/relay-$design.out"
        relay_port[$design]="$(sed -n 's/^ready //p' "$tmp/relay-$design.out")"
    done
fi

# --- measurement -----------------------------------------------------------------------
# One fetch; unless $2 is "warmup", appends "VARIANT TIME_S BYTES_PER_S" to the results.
fetch() {
    local variant="$1" out code size time speed
    local args=(-sS -o /dev/null --max-time 60
        -w '%{http_code} %{size_download} %{time_total} %{speed_download}\n')
    case "$variant" in
        direct) args+=(--noproxy '*' "http://$subnet.2/bytes/$bytes") ;;
        forward) args+=(-x "http://$proxy" "http://lab.test/bytes/$bytes") ;;
        connect) args+=(-p -x "http://$proxy" "http://lab.test/bytes/$bytes") ;;
        tunnel-tls) args+=(-x "http://$proxy" --cacert "$tmp/tunnel-bundle.pem" "https://lab.test/bytes/$bytes") ;;
        terminated) args+=(-x "http://$proxy" --cacert "$tmp/bundle.pem" "https://tls.lab.test/bytes/$bytes") ;;
        tunnel-tls-1) args+=(-x "http://$proxy" --cacert "$tmp/tunnel-bundle.pem" "https://lab.test/bytes/1") ;;
        terminated-1) args+=(-x "http://$proxy" --cacert "$tmp/bundle.pem" "https://tls.lab.test/bytes/1") ;;
        relay-*) args+=(-p -x "http://127.0.0.1:${relay_port[${variant#relay-}]}" "http://$subnet.2/bytes/$bytes") ;;
    esac
    if [[ "$variant" == relay-* ]]; then
        # The prototypes may come up short (see relay_designs.py): counted, not fatal.
        out="$(curl "${args[@]}")" || out="000 0 0 0"
        read -r code size time speed <<<"$out"
        if [ "$code" != 200 ] || [ "$size" != "$bytes" ]; then variant="$variant-short"; fi
        if [ "${2:-}" != warmup ]; then echo "$variant $time $speed" >>"$tmp/results"; fi
        return
    fi
    out="$(curl "${args[@]}")" || { echo "egress.sh: $variant: curl failed" >&2; exit 1; }
    read -r code size time speed <<<"$out"
    local want="$bytes"
    if [[ "$variant" == *-1 ]]; then want=1; fi
    if [ "$code" != 200 ] || [ "$size" != "$want" ]; then
        echo "egress.sh: $variant: HTTP $code, $size bytes (expected 200, $want bytes)" >&2
        exit 1
    fi
    if [ "${2:-}" != warmup ]; then echo "$variant $time $speed" >>"$tmp/results"; fi
}

# utime + stime of the proxy, in clock ticks.
proxy_cpu() { awk '{ print $14 + $15 }' "/proc/$proxy_pid/stat"; }

variants=(direct forward connect)
if [ "$tls" = 1 ]; then variants=(tunnel-tls terminated tunnel-tls-1 terminated-1); fi
if [ "${EGRESS_BENCH_RELAYS:-0}" = 1 ]; then variants+=(relay-copy relay-splice relay-sockmap); fi
for v in "${variants[@]}"; do fetch "$v" warmup; done
echo "== $(uname -r), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), server $server," \
    "link ${rate:-unshaped veth}"
: >"$tmp/results"
cpu_before="$(proxy_cpu)"
for ((i = 0; i < n; i++)); do
    for ((j = 0; j < ${#variants[@]}; j++)); do
        fetch "${variants[(i + j) % ${#variants[@]}]}"
    done
done
cpu_ticks=$(($(proxy_cpu) - cpu_before))
echo "== load after $n iterations: $(cut -d' ' -f1-3 /proc/loadavg)"

kill "$proxy_pid"
wait "$proxy_pid" || true
proxy_pid=""
python3 - "$tmp/results" "$tmp/proxy.json" "$n" "$bytes" "$cpu_ticks" "$(getconf CLK_TCK)" \
    "${rate:-unshaped veth}" "$tls" <<'EOF'
import json, math, statistics, sys

results, decisions = sys.argv[1], sys.argv[2]
n, size, ticks, hz = (int(a) for a in sys.argv[3:7])
link, tls = sys.argv[7], sys.argv[8] == "1"
rows = {}
for line in open(results):
    variant, time, speed = line.split()
    rows.setdefault(variant, []).append((float(time), float(speed)))


def p90(xs):  # nearest rank
    xs = sorted(xs)
    return xs[max(0, math.ceil(0.9 * len(xs)) - 1)]


if tls:
    ms = lambda key: statistics.median(t for t, _ in rows[key]) * 1e3  # noqa: E731
    tunnel = statistics.median(s for _, s in rows["tunnel-tls"])
    term = statistics.median(s for _, s in rows["terminated"])
    print(f"{n} iterations, {size} bytes a fetch, HTTPS through the proxy")
    print(f"{'':28} {'p50 ms':>8} {'p90 ms':>8} {'p50 MiB/s':>10}")
    for key, label in (("tunnel-tls", "CONNECT tunnel"), ("terminated", "terminated")):
        times = [t for t, _ in rows[key]]
        speed = statistics.median(s for _, s in rows[key])
        print(f"{label:28} {ms(key):8.1f} {p90(times) * 1e3:8.1f} {speed / 2**20:10.0f}")
    print(f"terminated / tunnel throughput: {term / tunnel:.2f} (target >= 0.8: "
          f"{'met' if term / tunnel >= 0.8 else 'NOT met'})")
    print(f"a 1-byte request on a new connection, p50: tunnel {ms('tunnel-tls-1'):.1f} ms, "
          f"terminated {ms('terminated-1'):.1f} ms, added {ms('terminated-1') - ms('tunnel-tls-1'):.1f} ms")
    print(f"proxy CPU (user+sys) per fetch: {ticks * 1000 / hz / (4 * n):.1f} ms")
    log = json.load(open(decisions))
    denied = [d["message"] for d in log["decisions"] if not d["allowed"]]
    if denied:
        sys.exit(f"egress.sh: the proxy denied {len(denied)}: {denied[:3]}")
    sys.exit(0)
labels = {
    "direct": "direct",
    "forward": "proxy (http forward)",
    "connect": "proxy (connect tunnel)",
}
print(f"{n} iterations, {size} bytes a fetch")
print(f"{'':24} {'p50 ms':>8} {'p90 ms':>8} {'p50 MiB/s':>10} {'vs direct':>10}")
direct = statistics.median(s for _, s in rows["direct"])
ratios = []
for key, label in labels.items():
    times = [t for t, _ in rows[key]]
    speed = statistics.median(s for _, s in rows[key])
    ratio = "" if key == "direct" else f"{speed / direct:.2f}"
    if key != "direct":
        ratios.append(speed / direct)
    print(f"{label:24} {statistics.median(times) * 1e3:8.1f} {p90(times) * 1e3:8.1f} "
          f"{speed / 2**20:10.0f} {ratio:>10}")
for design in ("copy", "splice", "sockmap"):
    key = f"relay-{design}"
    if key not in rows:
        continue
    speed = statistics.median(s for _, s in rows[key])
    short = len(rows.get(f"{key}-short", []))
    print(f"{'relay: ' + design:24} {statistics.median(t for t, _ in rows[key]) * 1e3:8.1f} "
          f"{p90([t for t, _ in rows[key]]) * 1e3:8.1f} {speed / 2**20:10.0f} "
          f"{speed / direct:10.2f}" + (f"   ({short} short fetches left out)" if short else ""))
print(f"proxy CPU (user+sys) per proxied fetch: {ticks * 1000 / hz / (2 * n):.1f} ms")
print(f"target proxy/direct >= 0.8 (link: {link}): {'met' if min(ratios) >= 0.8 else 'NOT met'}")

# The proxy must have allowed every proxied fetch (warm-ups included) and nothing else.
log = json.load(open(decisions))
expected = 2 * (n + 1)  # past 1024 decisions the proxy only counts them
total = len(log["decisions"]) + log["dropped"]
denied = [d["message"] for d in log["decisions"] if not d["allowed"]]
short = [d for d in log["decisions"] if d["bytes_received"] < size]
if total != expected or denied or short:
    sys.exit(f"egress.sh: the proxy made {total} decisions (expected {expected}), "
             f"{len(denied)} denials {denied[:3]}, {len(short)} short transfers")
EOF
