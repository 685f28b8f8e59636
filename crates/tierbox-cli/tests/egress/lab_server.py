"""The servers of the egress tests' private internet (see netlab.rs).

Runs inside a network namespace of its own (`unshare --net -- python3 lab_server.py ...`)
and serves, on every address given with --host (it waits for the test process to put
them on the namespace's interface, then binds to each):

  * TCP 80   plain HTTP
  * TCP 443  HTTPS (the certificate given with --cert/--key)
  * UDP 53   echo: every datagram is sent back to its sender

HTTP: `GET /` -> 200 "hello from <host name>\\n", where the name is that of the local
address the connection arrived on; `GET /bytes/<n>` -> n bytes (n <= 64 MiB), streamed;
`GET /echo[?query]` -> 200 "auth=<the Authorization header>\\nquery=<query>\\n" (and the
header and query are logged as the detail `auth <header> query <query>`, so a test sees
what arrived); any other path -> 404; any other method (CONNECT included) -> 405
"lab: method <M> not allowed\\n".

Every accepted TCP connection, every HTTP request line and every UDP datagram is one JSON
object per line in the --log file, flushed at once:
  {"proto": "tcp", "local": "10.231.57.2:80", "peer": "10.231.57.1:40000", "detail": ""}

Lifetime: the process exits by itself as soon as its parent (the test process) is gone,
noticed either as EOF on stdin (the parent holds the write end) or as a changed
os.getppid() (polled every 200 ms, the fallback). Its network namespace, and with it the
veth pair, vanishes with it. On the way out it removes --cleanup-dir, because the test
process keeps that directory in a static, and Rust never drops statics.

Standard library only.
"""

import argparse
import errno
import ipaddress
import json
import os
import shutil
import socket
import ssl
import sys
import threading
import time

# How long the servers wait for the test process to put the lab addresses on the
# interface before giving up (seconds).
ADDRESS_WAIT_SECONDS = 10
# Largest body /bytes/<n> serves: bounds the memory and time a typo can cost.
MAX_BYTES = 64 * 1024 * 1024
# Longest request line or header line read; longer requests are answered 400.
MAX_LINE = 8192
# Most header lines read per request.
MAX_HEADERS = 100
# An idle connection is dropped after this many seconds, so stray clients cannot pile up
# threads for the life of the test process.
IDLE_TIMEOUT = 60
# The repeating pattern /bytes/<n> streams, in chunks of this size (64 KiB).
PATTERN = b"0123456789abcdef" * 4096

PARENT_POLL_SECONDS = 0.2


class Log:
    def __init__(self, path):
        self._file = open(path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def event(self, proto, local, peer, detail=""):
        line = json.dumps(
            {"proto": proto, "local": fmt_addr(local), "peer": fmt_addr(peer), "detail": detail}
        )
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()


def fmt_addr(addr):
    host, port = addr[0], addr[1]
    if ":" in host:
        return f"[{host}]:{port}"
    return f"{host}:{port}"


def bind(family, kind, address, port, deadline):
    """Binds once `address` exists (EADDRNOTAVAIL until the test process adds it).

    Not IP_FREEBIND: an IPv4 socket bound to an address the namespace does not have yet
    gets no source address, so its UDP replies would leave from the interface's primary
    address instead of the one the datagram arrived on.
    """
    while True:
        sock = socket.socket(family, kind)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            sock.bind((address, port))
            break
        except OSError as e:
            sock.close()
            if e.errno != errno.EADDRNOTAVAIL or time.monotonic() > deadline:
                raise
            time.sleep(0.02)
    if kind == socket.SOCK_STREAM:
        sock.listen(128)
    return sock


def spawn(target, *args):
    threading.Thread(target=target, args=args, daemon=True).start()


class Lab:
    def __init__(self, log, names, tls):
        self.log = log
        self.names = names  # normalised address text -> lab host name
        self.tls = tls

    def name_of(self, local):
        return self.names.get(ipaddress.ip_address(local[0]).compressed, "unknown")

    # TCP ------------------------------------------------------------------------------

    def accept_loop(self, listener, use_tls):
        while True:
            conn, peer = listener.accept()
            local = conn.getsockname()
            self.log.event("tcp", local, peer)
            spawn(self.serve_connection, conn, local, peer, use_tls)

    def serve_connection(self, conn, local, peer, use_tls):
        try:
            conn.settimeout(IDLE_TIMEOUT)
            if use_tls:
                conn = self.tls.wrap_socket(conn, server_side=True)
            reader = conn.makefile("rb")
            while self.serve_request(conn, reader, local, peer):
                pass
        except (OSError, ValueError):
            pass  # resets, timeouts, failed handshakes: the client went away
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def serve_request(self, conn, reader, local, peer):
        """Answers one request; returns whether the connection may carry another."""
        line = reader.readline(MAX_LINE + 1)
        if not line:
            return False
        request_line = line.decode("latin-1").rstrip("\r\n")
        self.log.event("tcp", local, peer, request_line)
        if len(line) > MAX_LINE:
            respond(conn, 400, b"lab: request line too long\n", close=True)
            return False
        headers = {}
        for _ in range(MAX_HEADERS):
            header = reader.readline(MAX_LINE + 1)
            if header in (b"\r\n", b"\n", b""):
                break
            key, _, value = header.decode("latin-1").partition(":")
            headers[key.strip().lower()] = value.strip()
        else:
            respond(conn, 400, b"lab: too many headers\n", close=True)
            return False
        parts = request_line.split(" ")
        method, target = parts[0], parts[1] if len(parts) > 1 else ""
        if method != "GET":
            respond(conn, 405, f"lab: method {method} not allowed\n".encode("latin-1"), close=True)
            return False
        close = headers.get("connection", "").lower() == "close" or request_line.endswith(
            "HTTP/1.0"
        )
        if target == "/":
            respond(conn, 200, f"hello from {self.name_of(local)}\n".encode(), close)
        elif target == "/echo" or target.startswith("/echo?"):
            auth = headers.get("authorization", "")
            query = target.partition("?")[2]
            self.log.event("tcp", local, peer, f"auth {auth} query {query}")
            respond(conn, 200, f"auth={auth}\nquery={query}\n".encode("latin-1"), close)
        elif target.startswith("/bytes/") and target[len("/bytes/") :].isdigit():
            count = int(target[len("/bytes/") :])
            if count > MAX_BYTES:
                respond(conn, 400, b"lab: at most 67108864 bytes\n", close=True)
                return False
            stream_bytes(conn, count, close)
        else:
            respond(conn, 404, b"lab: not found\n", close)
        return not close

    # UDP ------------------------------------------------------------------------------

    def udp_loop(self, sock):
        local = sock.getsockname()
        while True:
            data, peer = sock.recvfrom(65535)
            self.log.event("udp", local, peer)
            try:
                sock.sendto(data, peer)
            except OSError:
                pass


REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}


def respond(conn, status, body, close):
    head = (
        f"HTTP/1.1 {status} {REASONS[status]}\r\n"
        f"Content-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"Connection: {'close' if close else 'keep-alive'}\r\n\r\n"
    )
    conn.sendall(head.encode() + body)


def stream_bytes(conn, count, close):
    head = (
        "HTTP/1.1 200 OK\r\n"
        "Content-Type: application/octet-stream\r\n"
        f"Content-Length: {count}\r\n"
        f"Connection: {'close' if close else 'keep-alive'}\r\n\r\n"
    )
    conn.sendall(head.encode())
    left = count
    while left > 0:
        chunk = PATTERN[: min(left, len(PATTERN))]
        conn.sendall(chunk)
        left -= len(chunk)


def exit_with_parent(original_parent, cleanup_dir):
    def leave():
        if cleanup_dir:
            shutil.rmtree(cleanup_dir, ignore_errors=True)
        os._exit(0)

    def watch_stdin():
        try:
            while sys.stdin.buffer.read(4096):
                pass
        except OSError:
            pass
        leave()

    def watch_ppid():
        while os.getppid() == original_parent:
            time.sleep(PARENT_POLL_SECONDS)
        leave()

    spawn(watch_stdin)
    spawn(watch_ppid)


def parse_host(text):
    """`allowed=10.231.57.2,fd31:4242:39::2` -> ("allowed", ["10.231.57.2", "fd31:..."])."""
    name, _, addresses = text.partition("=")
    if not name or not addresses:
        raise argparse.ArgumentTypeError(f"expected NAME=ADDR[,ADDR...], got {text!r}")
    return name, [ipaddress.ip_address(a).compressed for a in addresses.split(",")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--ready", required=True)
    parser.add_argument("--host", type=parse_host, action="append", required=True)
    parser.add_argument("--cleanup-dir")
    args = parser.parse_args()

    # First, so that a failure below cannot leave an orphan behind.
    exit_with_parent(os.getppid(), args.cleanup_dir)

    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(args.cert, args.key)
    names = {address: name for name, addresses in args.host for address in addresses}
    lab = Lab(Log(args.log), names, tls)

    deadline = time.monotonic() + ADDRESS_WAIT_SECONDS
    for address in names:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        http = bind(family, socket.SOCK_STREAM, address, 80, deadline)
        https = bind(family, socket.SOCK_STREAM, address, 443, deadline)
        dns = bind(family, socket.SOCK_DGRAM, address, 53, deadline)
        spawn(lab.accept_loop, http, False)
        spawn(lab.accept_loop, https, True)
        spawn(lab.udp_loop, dns)

    # Written last and renamed into place, so its existence means every socket is bound.
    with open(args.ready + ".tmp", "w", encoding="utf-8") as ready:
        ready.write(f"{os.getpid()}\n")
    os.rename(args.ready + ".tmp", args.ready)

    threading.Event().wait()


if __name__ == "__main__":
    main()
