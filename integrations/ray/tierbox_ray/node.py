"""One Tierbox daemon per Ray node, owned by a ``TierboxNode`` actor pinned to it.

The actor starts ``tierbox serve --unix`` with a state directory, signing key, token,
workspace root and audit log of the node's own, as a child that the kernel kills when
the actor's process dies (``PR_SET_PDEATHSIG``); the daemon in turn takes every sandbox
down with it. So a node that is lost leaves no Tierbox process behind.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import shutil
import signal
import subprocess
import time
from typing import Any, Dict, Optional

import ray

from .client import DaemonClient

#: Seconds the daemon gets to answer its health check after it is started.
DAEMON_START_TIMEOUT_S = 15.0

#: ``prctl`` option: the signal a child gets when its parent thread dies.
_PR_SET_PDEATHSIG = 1

#: Name prefix of the per-node actors (``tierbox-node-<node id>``).
NODE_ACTOR_PREFIX = "tierbox-node-"

#: The Ray namespace the node actors live in.
NAMESPACE = "tierbox"


def _die_with_parent() -> None:
    """In the daemon's process, before exec: SIGKILL when the actor's process dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def tierbox_binary(explicit: Optional[str] = None) -> str:
    """The ``tierbox`` executable: ``explicit``, ``$TIERBOX_BIN``, else on ``PATH``."""
    path = explicit or os.environ.get("TIERBOX_BIN") or shutil.which("tierbox")
    if not path:
        raise FileNotFoundError(
            "tierbox is not installed on this node: put it on PATH or set TIERBOX_BIN"
        )
    return path


@ray.remote(num_cpus=0, max_restarts=0)
class TierboxNode:
    """The node's daemon: started on creation, stopped with the actor."""

    def __init__(
        self,
        base_dir: str,
        policy_toml: Optional[str] = None,
        tierbox_bin: Optional[str] = None,
        max_concurrent: int = 16,
    ):
        self.node_id = ray.get_runtime_context().get_node_id()
        self.bin = tierbox_binary(tierbox_bin)
        self.dir = os.path.join(base_dir, self.node_id)
        self.state_dir = os.path.join(self.dir, "state")
        self.workspace = os.path.join(self.dir, "sandboxes")
        self.socket = os.path.join(self.dir, "daemon.sock")
        self.audit_log = os.path.join(self.dir, "audit.jsonl")
        for d in (self.state_dir, self.workspace):
            os.makedirs(d, mode=0o700, exist_ok=True)
        self.token = secrets.token_hex(32)
        token_file = os.path.join(self.state_dir, "ray-token")
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.token)
        policy_file = os.path.join(self.dir, "policy.toml")
        with open(policy_file, "w") as f:
            f.write(policy_toml or DEFAULT_POLICY)
            if "[audit]" not in (policy_toml or DEFAULT_POLICY):
                f.write(f'\n[audit]\nlog = "{self.audit_log}"\n')
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        self.log = open(os.path.join(self.dir, "daemon.log"), "ab")
        self.proc = subprocess.Popen(
            [
                self.bin, "serve",
                "--unix", self.socket,
                "--state-dir", self.state_dir,
                "--workspace", self.workspace,
                "--policy", policy_file,
                "--token-file", token_file,
                "--max-concurrent", str(max_concurrent),
            ],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=self.log,
            preexec_fn=_die_with_parent,
            env={**os.environ, "TIERBOX_DAEMON": "off"},
        )
        client = DaemonClient(self.socket, self.token)
        deadline = time.monotonic() + DAEMON_START_TIMEOUT_S
        while not client.health():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the tierbox daemon on node {self.node_id} did not start "
                    f"(see {self.dir}/daemon.log)"
                )
            time.sleep(0.05)
        self.pubkey = subprocess.run(
            [self.bin, "attest", "pubkey", "--state-dir", self.state_dir],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()

    def info(self) -> Dict[str, Any]:
        """Where the node's daemon is and how to reach it."""
        return {
            "node_id": self.node_id,
            "socket": self.socket,
            "token": self.token,
            "workspace": self.workspace,
            "pubkey": self.pubkey,
            "daemon_pid": self.proc.pid,
        }

    def audit_log_bytes(self) -> bytes:
        """The node's audit log, as it is now."""
        try:
            with open(self.audit_log, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return b""

    def stop(self) -> None:
        """Stops the daemon (SIGTERM: it kills every sandbox and waits for them)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


#: The node policy unless one is given: the built-in defaults with common tools allowed
#: (no network, no interpreters' inline code).
DEFAULT_POLICY = """version = 1
description = "tierbox-ray default: workspace-only, no network"

[tier]
minimum = "b"
optional_layers = ["cgroup", "protected_paths"]

[exec]
allowed_executables = ["sh", "bash", "python3", "cat", "ls", "echo", "sleep", "true", "false", "test", "git", "make", "pytest"]
allow_interpreters = true
allow_eval = true

[egress]
mode = "block_all"
"""
