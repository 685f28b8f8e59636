"""The Tierbox daemon's HTTP API over its unix socket (``tierbox serve --unix``).

Only the standard library: ``http.client`` on an ``AF_UNIX`` socket, a bearer token,
JSON bodies, and the ndjson stream of ``POST /v1/process/run?stream=true``.
"""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

#: Seconds a request may wait for the daemon beyond the run's own timeout.
REQUEST_MARGIN_S = 30.0


class TierboxError(Exception):
    """A request the daemon refused or could not serve: ``code`` is Tierbox's rejection
    code (``exec.not_allowed``, ``scope.workspace_subdir_invalid``, ``server.busy``…)."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{code}: {message} (HTTP {status})")
        self.status = status
        self.code = code
        self.message = message


class TierboxNodeLost(Exception):
    """The node holding a sandbox (or running a command) was lost, or its daemon went
    away mid-request; the work did not complete. Retry it: it lands on a surviving
    node."""


def _lost(socket_path: str, e: BaseException) -> TierboxNodeLost:
    return TierboxNodeLost(f"the tierbox daemon at {socket_path} went away ({type(e).__name__}: {e})")


#: What a daemon that died (or a node that was lost) looks like to a client. A timeout
#: is not one of them.
_GONE = (ConnectionError, FileNotFoundError, http.client.RemoteDisconnected, http.client.IncompleteRead)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


class DaemonClient:
    """A client of one node's daemon. ``session`` scopes background processes
    (``Tierbox-Session``): each sandbox uses its own."""

    def __init__(self, socket_path: str, token: str, session: str = "default"):
        self.socket_path = socket_path
        self._token = token
        self.session = session

    def _headers(self) -> Dict[str, str]:
        return {
            "Authorization": f"Bearer {self._token}",
            "Content-Type": "application/json",
            "Tierbox-Session": self.session,
        }

    def request(
        self, method: str, path: str, body: Optional[Any] = None, timeout: float = 60.0
    ) -> Any:
        """One request; the decoded JSON answer, or :class:`TierboxError`."""
        conn = _UnixConnection(self.socket_path, timeout)
        try:
            payload = None if body is None else json.dumps(body).encode()
            conn.request(method, path, body=payload, headers=self._headers())
            resp = conn.getresponse()
            data = resp.read()
        except _GONE as e:
            raise _lost(self.socket_path, e) from e
        finally:
            conn.close()
        return _decode(resp.status, data)

    def health(self) -> bool:
        try:
            conn = _UnixConnection(self.socket_path, 2.0)
            try:
                conn.request("GET", "/v1/health")
                return conn.getresponse().status == 200
            finally:
                conn.close()
        except OSError:
            return False

    def run(self, request: Dict[str, Any], on_output: Optional[Callable[[str, str], None]] = None) -> Dict[str, Any]:
        """``POST /v1/process/run``: the outcome. With ``on_output``, the output is
        streamed to it (``stream``, ``text``) as it arrives."""
        timeout = request.get("timeout_ms", 600_000) / 1000.0 + REQUEST_MARGIN_S
        if on_output is None:
            return self.request("POST", "/v1/process/run", request, timeout)
        for event in self._stream(request, timeout):
            kind = event.get("event")
            if kind == "output":
                on_output(event.get("stream", ""), event.get("text", ""))
            elif kind == "result":
                return event["outcome"]
            elif kind == "error":
                err = event.get("error", {})
                raise TierboxError(500, err.get("code", "run.failed"), err.get("message", ""))
        raise TierboxError(502, "stream.ended", "the stream ended without a result")

    def stream(self, request: Dict[str, Any]) -> Iterator[Dict[str, Any]]:
        """``POST /v1/process/run?stream=true``: its events (``output``, then ``result``
        or ``error``) as they arrive."""
        timeout = request.get("timeout_ms", 600_000) / 1000.0 + REQUEST_MARGIN_S
        return self._stream(request, timeout)

    def _stream(self, request: Dict[str, Any], timeout: float) -> Iterator[Dict[str, Any]]:
        conn = _UnixConnection(self.socket_path, timeout)
        try:
            conn.request(
                "POST",
                "/v1/process/run?stream=true",
                body=json.dumps(request).encode(),
                headers=self._headers(),
            )
            resp = conn.getresponse()
            if resp.status != 200:
                _decode(resp.status, resp.read())
            for line in resp:
                line = line.strip()
                if line:
                    yield json.loads(line)
        except _GONE as e:
            raise _lost(self.socket_path, e) from e
        finally:
            conn.close()


def _decode(status: int, data: bytes) -> Any:
    try:
        value = json.loads(data) if data else None
    except ValueError:
        raise TierboxError(status, "http.invalid_body", data[:200].decode(errors="replace"))
    if status >= 400:
        err = (value or {}).get("error", {}) if isinstance(value, dict) else {}
        raise TierboxError(status, err.get("code", "http.error"), err.get("message", str(value)))
    return value


def split_outcome(outcome: Dict[str, Any]) -> Tuple[int, str, str]:
    """``(exit_code, stdout, stderr)`` of an outcome (``-1`` when killed by a signal)."""
    code = outcome.get("exit_code")
    return (
        -1 if code is None else int(code),
        outcome.get("stdout", {}).get("text", ""),
        outcome.get("stderr", {}).get("text", ""),
    )
