"""One Tierbox daemon per Ray node, owned by a ``TierboxNode`` actor pinned to it.

The actor starts ``tierbox serve --unix`` with a state directory, signing key, token,
workspace root and audit log of the node's own, as a child that the kernel kills when
the actor's process dies (``PR_SET_PDEATHSIG``); the daemon in turn takes every sandbox
down with it. So a node that is lost leaves no Tierbox process behind.

They live in a private per-user tree (:mod:`.private`): ``$XDG_RUNTIME_DIR/tierbox-ray``,
else ``tierbox-ray-<uid>`` in ``$TMPDIR`` or ``/tmp``; each directory 0700, made fresh or
verified (owner, type, mode) and never reused otherwise; each file written through held
directory fds without following links.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from typing import Any, Dict, Optional

import ray

from .client import DaemonClient
from .private import PrivateTree, default_base_dir

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


def _toml_string(value: str) -> str:
    """``value`` as a TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(value)


class _Attached:
    """A daemon the node already runs (not started, not stopped here)."""

    def __init__(self, socket_path: str, token_file: str):
        self.socket = socket_path
        with open(token_file) as f:
            self.token = f.read().strip()
        self.audit_log = ""
        if not DaemonClient(self.socket, self.token).health():
            raise RuntimeError(f"no tierbox daemon answers on {socket_path}")
        self.proc = None

    def stop(self) -> None:
        pass


class _Daemon:
    """One ``tierbox serve --unix`` of the node, for one policy. Its files are written
    through the node's private tree (:mod:`.private`): never through a link, never into a
    directory another user made."""

    def __init__(self, node: "TierboxNode", policy_toml: str, tag: str):
        daemons = node.tree.subdir("daemons")
        try:
            tree = daemons.subdir(tag)
        finally:
            daemons.close()
        try:
            state = tree.subdir("state")
            try:
                token_file, policy_file = self._write_files(node, tree, state, policy_toml, tag)
            finally:
                state.close()
        finally:
            tree.close()
        self.proc = subprocess.Popen(
            [
                node.bin, "serve",
                "--unix", self.socket,
                "--state-dir", self.state_dir,
                "--workspace", node.workspace,
                "--policy", policy_file,
                "--token-file", token_file,
                "--max-concurrent", str(node.max_concurrent),
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
                    f"the tierbox daemon on node {node.node_id} did not start "
                    f"(see {self.dir}/daemon.log)"
                )
            time.sleep(0.05)

    def _write_files(self, node: "TierboxNode", tree: PrivateTree, state: PrivateTree,
                     policy_toml: str, tag: str):
        """Its token, policy and log in its private directories; the token's and the
        policy's paths."""
        self.dir = tree.path
        self.state_dir = state.path
        # A unix socket's path is limited to 107 bytes: short names, in a directory of
        # the base.
        self.socket = node.sockets.socket_path(f"{node.node_id[:12]}-{tag[:8]}.sock")
        self.audit_log = os.path.join(self.dir, "audit.jsonl")
        self.token = secrets.token_hex(32)
        token_file = state.write_new("ray-token", self.token.encode())
        text = policy_toml
        if "[audit]" not in policy_toml:
            # Every daemon of the node signs with the node's key; each keeps its own
            # hash-chained log.
            text += (
                f"\n[audit]\nlog = {_toml_string(self.audit_log)}\n"
                f"signing_key = {_toml_string(node.key)}\n"
            )
        policy_file = tree.write_new("policy.toml", text.encode())
        self.log = tree.open_append("daemon.log")
        return token_file, policy_file

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@ray.remote(num_cpus=0, max_restarts=0)
class TierboxNode:
    """The node's daemons (one per policy its sandboxes ask for, started on first use),
    their signing key and workspace root; all stopped with the actor."""

    def __init__(
        self,
        base_dir: Optional[str] = None,
        policy_toml: Optional[str] = None,
        tierbox_bin: Optional[str] = None,
        max_concurrent: int = 16,
        attach: Optional[Dict[str, str]] = None,
    ):
        self.node_id = ray.get_runtime_context().get_node_id()
        self.bin = tierbox_binary(tierbox_bin)
        self.max_concurrent = max_concurrent
        self.daemons: Dict[str, Any] = {}
        self.attached = attach is not None
        if attach is not None:
            # The node's own daemon: its key, its workspace, its policy. Nothing of the
            # tree is made.
            self.dir = None
            self.workspace = attach["workspace"]
            self.pubkey = subprocess.run(
                [self.bin, "attest", "pubkey", "--state-dir", attach["state_dir"]],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
            self.default_policy = None
            self.daemons["default"] = _Attached(attach["socket"], attach["token_file"])
            return
        # The node's private tree (made 0700 or verified; see .private):
        # BASE/s/<socket>, BASE/<node id>/{sandboxes,keys,daemons/<tag>/{state,…}}.
        base = PrivateTree.open(base_dir or default_base_dir())
        self.sockets = base.subdir("s")
        self.tree = base.subdir(self.node_id)
        base.close()
        self.dir = self.tree.path
        workspace = self.tree.subdir("sandboxes")
        self.workspace = workspace.path
        workspace.close()
        keys = self.tree.subdir("keys")
        self.pubkey = subprocess.run(
            [self.bin, "attest", "pubkey", "--state-dir", keys.path],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        self.key = os.path.join(keys.path, "attest-key")
        keys.close()
        self.default_policy = policy_toml or DEFAULT_POLICY
        self._daemon(None)

    def _daemon(self, policy_toml: Optional[str]) -> Any:
        if self.attached:
            if policy_toml is not None:
                raise ValueError(
                    "this node's daemon was attached: its policy is the daemon's own, "
                    "a sandbox cannot ask for another"
                )
            return self.daemons["default"]
        text = policy_toml or self.default_policy
        tag = "default" if text == self.default_policy else hashlib.sha256(text.encode()).hexdigest()[:16]
        if tag not in self.daemons:
            self.daemons[tag] = _Daemon(self, text, tag)
        return self.daemons[tag]

    def info(self, policy_toml: Optional[str] = None) -> Dict[str, Any]:
        """Where the daemon for ``policy_toml`` (the node's default when ``None``) is and
        how to reach it; started on first use."""
        d = self._daemon(policy_toml)
        return {
            "node_id": self.node_id,
            "socket": d.socket,
            "token": d.token,
            "workspace": self.workspace,
            "pubkey": self.pubkey,
            "daemon_pid": d.proc.pid if d.proc else None,
        }

    def audit_log_bytes(self, policy_toml: Optional[str] = None) -> bytes:
        """The audit log of the daemon for ``policy_toml``, as it is now (an attached
        daemon's log is wherever its policy puts it: read it there)."""
        if self.attached:
            return b""
        try:
            with open(self._daemon(policy_toml).audit_log, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return b""

    def daemon_pids(self) -> Dict[str, int]:
        return {tag: d.proc.pid for tag, d in self.daemons.items() if d.proc}

    def stop(self) -> None:
        """Stops every daemon (SIGTERM: each kills its sandboxes and waits for them)."""
        for d in self.daemons.values():
            d.stop()


#: The node policy unless one is given: the built-in defaults with common tools allowed
#: (no network, no interpreters' inline code).
DEFAULT_POLICY = """version = 1
description = "tierbox-ray default: workspace-only, no network"

[tier]
minimum = "b"
optional_layers = ["cgroup", "protected_paths", "disk"]

[exec]
allowed_executables = ["sh", "bash", "python3", "cat", "ls", "echo", "sleep", "true", "false", "test", "git", "make", "pytest"]
allow_interpreters = true
allow_eval = true

[egress]
mode = "block_all"
"""
