#!/usr/bin/env python3
"""The cost of `--publish`, paired: a Tier C run of `true` with and without a published
port (calls interleaved, the order flipping every pair, so both see the same load), and
the latency of one small HTTP request to a server inside the sandbox through the
published port against the same server run directly on the host (interleaved too).
Prints p50/p90 of each and the median of the per-pair ratios.

    python3 bench/publish.py [TIERBOX] [PAIRS] [--backend native|bwrap]

TIERBOX defaults to target/release/tierbox. Needs python3 on the host (the server), and
a supervisor that may publish (root, for bwrap and for native's namespace join).
"""
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

SERVER = """import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "1")
        self.end_headers()
        self.wfile.write(b"x")
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def timed(cmd, env):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    if r.returncode != 0:
        sys.exit(f"publish.py: {' '.join(cmd)} failed: {r.stderr.decode()[-400:]}")
    return time.perf_counter() - t0


def get(port):
    """One request on a new connection: seconds, or None when nothing answered."""
    t0 = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=3) as c:
            c.sendall(b"GET / HTTP/1.0\r\n\r\n")
            got = b""
            while True:
                b = c.recv(4096)
                if not b:
                    break
                got += b
    except OSError:
        return None
    return time.perf_counter() - t0 if got.endswith(b"x") else None


def wait_for(port, proc):
    deadline = time.time() + 20
    while time.time() < deadline:
        if get(port) is not None:
            return
        if proc.poll() is not None:
            sys.exit(f"publish.py: the server ended: {proc.stderr.read().decode()[-400:]}")
        time.sleep(0.05)
    sys.exit(f"publish.py: nothing answered on {port}")


def p(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def show(name, xs):
    print(f"  {name:<34} p50 {p(xs, .5) * 1e3:8.3f} ms   p90 {p(xs, .9) * 1e3:8.3f} ms")


def main():
    args = sys.argv[1:]
    backend = "native"
    if "--backend" in args:
        i = args.index("--backend")
        backend = args[i + 1]
        del args[i:i + 2]
    tierbox = os.path.abspath(args[0] if args else "target/release/tierbox")
    pairs = int(args[1]) if len(args) > 1 else 30
    host_port = free_port()
    entry = f"127.0.0.1:{host_port}:8000"
    with tempfile.TemporaryDirectory() as tmp:
        ws = os.path.join(tmp, "ws")
        os.mkdir(ws)
        with open(os.path.join(ws, "server.py"), "w") as f:
            f.write(SERVER)
        optional = '"cgroup", "protected_paths"' + (', "landlock"' if backend == "bwrap" else "")
        policy = os.path.join(tmp, "policy.toml")
        with open(policy, "w") as f:
            f.write(f"""version = 1
[tier]
backend = "{backend}"
optional_layers = [{optional}]
[exec]
allowed_executables = ["true", "python3"]
allow_interpreters = true
[limits]
timeout_ms = 600000
max_timeout_ms = 600000
[egress]
publish = ["{entry}"]
""")
        env = dict(os.environ, XDG_STATE_HOME=os.path.join(tmp, "state"))
        base = [tierbox, "run", "--tier", "c", "--policy", policy, "--workspace", ws]
        plain = base + ["--", "true"]
        published = base + ["--publish", entry, "--", "true"]
        timed(plain, env), timed(published, env)
        runs = {"without": [], "with": []}
        ratios = []
        for i in range(pairs):
            order = [("without", plain), ("with", published)]
            if i % 2:
                order.reverse()
            got = {k: timed(c, env) for k, c in order}
            for k, v in got.items():
                runs[k].append(v)
            ratios.append(got["with"] / got["without"])
        print(f"tier c ({backend}) run of `true`, {pairs} pairs:")
        show("without --publish", runs["without"])
        show("with --publish", runs["with"])
        print(f"  median ratio with/without: {statistics.median(ratios):.3f}")

        # Request latency: the same server inside (through the published port) and on
        # the host directly.
        direct_port = free_port()
        direct = subprocess.Popen([sys.executable, os.path.join(ws, "server.py"), str(direct_port)],
                                  stderr=subprocess.PIPE)
        inside = subprocess.Popen(base + ["--publish", entry, "--", "python3", "server.py", "8000"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        try:
            wait_for(direct_port, direct)
            wait_for(host_port, inside)
            lat = {"direct": [], "published": []}
            ratios = []
            for i in range(pairs * 10):
                order = [("direct", direct_port), ("published", host_port)]
                if i % 2:
                    order.reverse()
                got = {k: get(port) for k, port in order}
                if None in got.values():
                    sys.exit(f"publish.py: a request failed: {got}")
                for k, v in got.items():
                    lat[k].append(v)
                ratios.append(got["published"] / got["direct"])
            print(f"one HTTP request on a new connection, {pairs * 10} pairs:")
            show("host server, direct", lat["direct"])
            show("sandboxed server, --publish", lat["published"])
            print(f"  median ratio published/direct: {statistics.median(ratios):.3f}")
            added = statistics.median(lat["published"]) - statistics.median(lat["direct"])
            print(f"  added per request (medians): {added * 1e3:.3f} ms")
        finally:
            direct.kill()
            inside.kill()
            direct.wait()
            inside.wait()


if __name__ == "__main__":
    main()
