"""An HTTPS upstream for the credential tests with real tools (terminate_tools.rs).

Runs in the lab's network namespace (`nsenter --net=... python3 tools_upstream.py ...`),
on one address and port, with the lab's leaf certificate, and serves by Host name:

  * api.test   GET /echo -> "auth=<Authorization>\n" (Python requests)
  * git.test   git's smart HTTP through `git http-backend` (CGI) for the repositories
               under --git-root (git clone)
  * pypi.test  a PEP 503 simple index with one wheel, tbxdemo 1.0 (pip download)
  * npm.test   a registry with one package, tbxdemo 1.0.0 (npm view)

Every request must carry its host's credential, else 401 (git and pip then retry with
the credentials they hold, as against a real server): --secret HOST=SCHEME:VALUE, where
SCHEME is `bearer` (`Authorization: Bearer VALUE`) or `basic` (`Authorization: Basic
base64(ANYUSER:VALUE)`). Every request is one JSON line in --log: host, method, path,
whether its credential was right, and the Authorization header as received.

Writes --ready once listening. Exits when its stdin closes (the test holds the write
end). Standard library only.
"""

import argparse
import base64
import hashlib
import http.server
import io
import json
import os
import ssl
import subprocess
import sys
import threading
import zipfile

WHEEL_NAME = "tbxdemo-1.0-py3-none-any.whl"


def make_wheel():
    buf = io.BytesIO()
    files = {
        "tbxdemo/__init__.py": b"VERSION = '1.0'\n",
        "tbxdemo-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tbxdemo\nVersion: 1.0\n",
        "tbxdemo-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: tierbox-tests\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{name},sha256={digest.decode()},{len(data)}")
        record.append("tbxdemo-1.0.dist-info/RECORD,,")
        z.writestr("tbxdemo-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return buf.getvalue()


class Upstream:
    def __init__(self, secrets, git_root, origin_port, log_path):
        self.secrets = secrets
        self.git_root = git_root
        self.port = origin_port
        self.log_file = open(log_path, "a", encoding="utf-8")
        self.lock = threading.Lock()
        self.wheel = make_wheel()

    def log(self, **fields):
        with self.lock:
            self.log_file.write(json.dumps(fields) + "\n")
            self.log_file.flush()

    def authorized(self, host, header):
        scheme, _, value = self.secrets.get(host, "none:").partition(":")
        if scheme == "bearer":
            return header == f"Bearer {value}"
        if scheme == "basic" and header.startswith("Basic "):
            try:
                decoded = base64.b64decode(header[6:], validate=True).decode()
            except ValueError:
                return False
            return decoded.partition(":")[2] == value
        return False


def handler_for(up):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def setup(self):
            self.request.settimeout(30)
            self.request.do_handshake()
            super().setup()

        def host(self):
            return self.headers.get("Host", "").split(":")[0]

        def body(self):
            n = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(n) if n else b""

        def send(self, status, data, ctype="text/plain", extra=()):
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            for k, v in extra:
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def handle_any(self):
            host, auth = self.host(), self.headers.get("Authorization", "")
            ok = up.authorized(host, auth)
            up.log(host=host, method=self.command, path=self.path, ok=ok, authorization=auth)
            if not ok:
                self.body()
                realm = [("WWW-Authenticate", 'Basic realm="lab"')]
                return self.send(401, b"lab: credential required\n", extra=realm)
            if host == "api.test" and self.path.startswith("/echo"):
                return self.send(200, f"auth={auth}\n".encode("latin-1"))
            if host == "git.test":
                return self.git()
            if host == "pypi.test":
                return self.pypi()
            if host == "npm.test":
                return self.npm()
            self.send(404, b"lab: not found\n")

        do_GET = handle_any
        do_POST = handle_any

        def git(self):
            path, _, query = self.path.partition("?")
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "GIT_PROJECT_ROOT": up.git_root,
                "GIT_HTTP_EXPORT_ALL": "1",
                "REQUEST_METHOD": self.command,
                "PATH_INFO": path,
                "QUERY_STRING": query,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "REMOTE_ADDR": self.client_address[0],
            }
            data = self.body()
            env["CONTENT_LENGTH"] = str(len(data))
            out = subprocess.run(
                ["git", "http-backend"], input=data, env=env, capture_output=True, check=False
            ).stdout
            head, _, payload = out.partition(b"\r\n\r\n")
            status, headers = 200, []
            for line in head.decode("latin-1").split("\r\n"):
                key, _, value = line.partition(":")
                if key.lower() == "status":
                    status = int(value.strip().split(" ")[0])
                elif key and key.lower() != "content-length":
                    headers.append((key, value.strip()))
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def pypi(self):
            if self.path.rstrip("/") in ("/simple/tbxdemo", "/simple/tbxdemo/index.html"):
                digest = hashlib.sha256(up.wheel).hexdigest()
                page = f'<html><body><a href="/packages/{WHEEL_NAME}#sha256={digest}">{WHEEL_NAME}</a></body></html>\n'
                return self.send(200, page.encode(), "text/html")
            if self.path == f"/packages/{WHEEL_NAME}":
                return self.send(200, up.wheel, "application/octet-stream")
            self.send(404, b"lab: not found\n")

        def npm(self):
            if self.path == "/tbxdemo":
                tarball = f"https://npm.test:{up.port}/tbxdemo/-/tbxdemo-1.0.0.tgz"
                doc = {
                    "name": "tbxdemo",
                    "dist-tags": {"latest": "1.0.0"},
                    "versions": {
                        "1.0.0": {
                            "name": "tbxdemo",
                            "version": "1.0.0",
                            "dist": {"tarball": tarball},
                        }
                    },
                    "time": {"1.0.0": "2026-01-01T00:00:00.000Z"},
                }
                return self.send(200, json.dumps(doc).encode(), "application/json")
            self.send(404, b"lab: not found\n")

    return Handler


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bind", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--git-root", required=True)
    parser.add_argument("--secret", action="append", default=[])
    parser.add_argument("--log", required=True)
    parser.add_argument("--ready", required=True)
    args = parser.parse_args()
    secrets = dict(s.split("=", 1) for s in args.secret)
    up = Upstream(secrets, args.git_root, args.port, args.log)
    server = http.server.ThreadingHTTPServer((args.bind, args.port), handler_for(up))
    server.daemon_threads = True
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(args.cert, args.key)
    # The handshake on the handler's thread, not the accepting one.
    server.socket = tls.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with open(args.ready, "w", encoding="utf-8") as f:
        f.write("ready\n")
    try:
        while sys.stdin.buffer.read(4096):
            pass
    except OSError:
        pass
    os._exit(0)


if __name__ == "__main__":
    main()
