"""Sandboxes on a Ray cluster, each a Ray actor holding one workspace on one node's
Tierbox daemon — the shape of ``ray.experimental.sandbox`` (``create`` → a handle with
``exec``, ``start``, ``read_file``, ``write_file``, ``terminate``; a pool with
``acquire``/``release``), with Tierbox's isolation instead of a gVisor container.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import threading
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Union

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from .client import DaemonClient, TierboxError, TierboxNodeLost, split_outcome
from .node import NAMESPACE, NODE_ACTOR_PREFIX, TierboxNode

#: The custom resource a node offers per sandbox it may hold at once.
RESOURCE = "tierbox"

#: Largest file ``read_file`` returns, in bytes.
MAX_READ_BYTES = 64 << 20


class ExecResult(dict):
    """An outcome from a node: Tierbox's outcome (``exit_code``, ``stdout``, ``stderr``,
    ``tier``, ``denials``, ``attestation``, …) plus ``node_id``."""

    @property
    def exit_code(self) -> int:
        return split_outcome(self)[0]

    @property
    def stdout(self) -> str:
        return split_outcome(self)[1]

    @property
    def stderr(self) -> str:
        return split_outcome(self)[2]

    @property
    def node_id(self) -> str:
        return self["node_id"]


def init(
    base_dir: Optional[str] = None,
    policy_toml: Optional[str] = None,
    tierbox_bin: Optional[str] = None,
    attach: Optional[Dict[str, str]] = None,
) -> Dict[str, Dict[str, Any]]:
    """Starts (or finds) a ``TierboxNode`` on every alive node that offers the
    ``tierbox`` resource; returns each node's info (socket, public key…) by node id.

    ``base_dir``: where each node keeps its daemons' state, token, policy, key, sockets
    and sandboxes; by default a private directory of the user the node's actor runs as,
    found on that node (``$XDG_RUNTIME_DIR/tierbox-ray``, else ``tierbox-ray-<uid>`` in
    ``$TMPDIR`` or ``/tmp``). Whichever it is, each directory of the tree is made 0700 or
    verified to be the user's own 0700 directory (not a link): one that is not is refused
    with :class:`tierbox_ray.UnsafeTreeError`, never reused.

    ``attach``: use the daemon already running on each node (a DaemonSet's, or
    ``tierbox daemon start``) instead of starting one: ``{"socket", "token_file",
    "state_dir", "workspace"}``, the paths on the nodes (its workspace is where the
    sandboxes' directories are made)."""
    infos = {}
    for node in ray.nodes():
        if not node.get("Alive") or node.get("Resources", {}).get(RESOURCE, 0) <= 0:
            continue
        node_id = node["NodeID"]
        actor = TierboxNode.options(
            name=NODE_ACTOR_PREFIX + node_id,
            namespace=NAMESPACE,
            get_if_exists=True,
            lifetime="detached",
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        ).remote(base_dir, policy_toml, tierbox_bin, attach=attach)
        infos[node_id] = ray.get(actor.info.remote())
    if not infos:
        raise RuntimeError(f"no alive node offers the {RESOURCE!r} resource")
    return infos


def shutdown() -> None:
    """Stops every node's daemon (and its sandboxes)."""
    for node in ray.nodes():
        try:
            actor = ray.get_actor(NODE_ACTOR_PREFIX + node["NodeID"], namespace=NAMESPACE)
        except ValueError:
            continue
        try:
            ray.get(actor.stop.remote(), timeout=30)
        except Exception:  # noqa: BLE001 - a lost node has nothing left to stop
            pass
        ray.kill(actor)


#: This worker process's node's daemons, once looked up, by policy (a worker never
#: changes node).
_NODE_INFO: Dict[Optional[str], Dict[str, Any]] = {}


def _node_info(policy_toml: Optional[str] = None) -> Dict[str, Any]:
    if policy_toml in _NODE_INFO:
        return _NODE_INFO[policy_toml]
    node_id = ray.get_runtime_context().get_node_id()
    try:
        actor = ray.get_actor(NODE_ACTOR_PREFIX + node_id, namespace=NAMESPACE)
    except ValueError:
        raise TierboxNodeLost(f"node {node_id} has no Tierbox daemon (call tierbox_ray.init())")
    info = ray.get(actor.info.remote(policy_toml))
    _NODE_INFO[policy_toml] = info
    return info


def _request(command: Union[str, List[str]], tier: Optional[str], timeout: Optional[float],
             cwd: Optional[str], env: Optional[Dict[str, str]], workspace: str,
             background: bool = False) -> Dict[str, Any]:
    argv = ["sh", "-c", command] if isinstance(command, str) else list(command)
    req: Dict[str, Any] = {"command": argv[0], "args": argv[1:], "workspace": workspace}
    if tier:
        req["tier"] = tier
    if timeout is not None:
        req["timeout_ms"] = max(1, int(timeout * 1000))
    if cwd:
        req["cwd"] = cwd
    if env:
        req["env"] = env
    if background:
        req["background"] = True
    return req


@ray.remote(num_cpus=0, resources={RESOURCE: 1}, max_restarts=0)
class Sandbox:
    """One sandbox: a workspace directory on this node's daemon. Every command runs in a
    fresh Tierbox sandbox narrowed to it (``"workspace"``), so sandboxes on one node never
    see each other's files."""

    def __init__(self, tier: Optional[str] = None, ttl: Optional[float] = None,
                 policy: Optional[str] = None):
        info = _node_info(policy)
        self.node_id = info["node_id"]
        self.tier = tier
        self.name = "sb-" + uuid.uuid4().hex[:16]
        self.root = os.path.join(info["workspace"], self.name)
        os.mkdir(self.root, 0o755)
        self.client = DaemonClient(info["socket"], info["token"], session=self.name)
        self.background: List[str] = []
        if ttl is not None:
            # Past its time to live the sandbox ends itself, whoever holds the handle.
            timer = threading.Timer(ttl, self._expire)
            timer.daemon = True
            timer.start()

    def _expire(self) -> None:
        try:
            self.wipe()
            self.client.request("DELETE", "/v1/session")
            os.rmdir(self.root)
        finally:
            os._exit(0)

    def node(self) -> str:
        """The id of the node it lives on."""
        return self.node_id

    def get_instance_id(self) -> str:
        """Its name on the node (its workspace directory), as Ray's sandbox names it."""
        return self.name

    def get_status(self) -> str:
        """``RUNNING`` while it exists (a terminated sandbox's actor is gone)."""
        return "RUNNING" if os.path.isdir(self.root) else "TERMINATED"

    def exec(self, command: Union[str, List[str]], timeout: Optional[float] = None,
             cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None,
             tier: Optional[str] = None) -> ExecResult:
        """Runs a command to its end: the outcome (``exit_code``, ``stdout``…)."""
        req = _request(command, tier or self.tier, timeout, cwd, env, self.name)
        return ExecResult(self.client.run(req), node_id=self.node_id)

    def exec_stream(self, command: Union[str, List[str]], timeout: Optional[float] = None,
                    cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None,
                    tier: Optional[str] = None):
        """:meth:`exec`, streamed: yields ``{"stream", "text"}`` as the output arrives,
        then the :class:`ExecResult`. ``for ref in sb.exec_stream.remote(…)``."""
        req = _request(command, tier or self.tier, timeout, cwd, env, self.name)
        for event in self.client.stream(req):
            kind = event.get("event")
            if kind == "output":
                yield {"stream": event.get("stream", ""), "text": event.get("text", "")}
            elif kind == "result":
                yield ExecResult(event["outcome"], node_id=self.node_id)
                return
            elif kind == "error":
                err = event.get("error", {})
                raise TierboxError(500, err.get("code", "run.failed"), err.get("message", ""))
        raise TierboxError(502, "stream.ended", "the stream ended without a result")

    def start(self, command: Union[str, List[str]], cwd: Optional[str] = None,
              env: Optional[Dict[str, str]] = None, tier: Optional[str] = None) -> str:
        """Starts a background process; its id (``status``/``kill`` take it)."""
        req = _request(command, tier or self.tier, None, cwd, env, self.name, background=True)
        started = self.client.request("POST", "/v1/process/run", req)
        self.background.append(started["id"])
        return started["id"]

    def status(self, process_id: str) -> Dict[str, Any]:
        return self.client.request("GET", f"/v1/process/{process_id}")

    def kill(self, process_id: str) -> Dict[str, Any]:
        return self.client.request("POST", f"/v1/process/{process_id}/kill", {})

    def write_file(self, path: str, content: Union[str, bytes], append: bool = False) -> None:
        """Writes a file inside the workspace (never through a symbolic link)."""
        data = content.encode() if isinstance(content, str) else content
        _write_beneath(self.root, path, data, append)

    def read_file(self, path: str) -> bytes:
        """Reads a file inside the workspace (never through a symbolic link)."""
        parent, name = _beneath(self.root, path, create_parents=False)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise IsADirectoryError(errno.EISDIR, "not a regular file", path)
                chunks, total = [], 0
                while total <= MAX_READ_BYTES:
                    chunk = os.read(fd, 1 << 20)
                    if not chunk:
                        return b"".join(chunks)
                    chunks.append(chunk)
                    total += len(chunk)
                raise OSError(errno.EFBIG, f"larger than {MAX_READ_BYTES} bytes", path)
            finally:
                os.close(fd)
        finally:
            os.close(parent)

    def wipe(self) -> None:
        """Kills its background processes and empties its workspace (for reuse)."""
        for pid in self.background:
            try:
                self.kill(pid)
            except TierboxError:
                pass
        self.background.clear()
        for entry in os.listdir(self.root):
            p = os.path.join(self.root, entry)
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.unlink(p)

    def terminate(self) -> None:
        """Kills everything it runs and removes its workspace; the actor ends."""
        self.wipe()
        try:
            self.client.request("DELETE", "/v1/session")
        except TierboxError:
            pass
        os.rmdir(self.root)
        ray.actor.exit_actor()

    def delete(self) -> None:
        """Ray's name for :meth:`terminate`."""
        self.terminate()


def _beneath(root: str, path: str, create_parents: bool):
    """An fd of the directory holding ``path`` inside the workspace ``root``, and the
    name: each component opened with ``O_NOFOLLOW`` from the workspace's root."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise ValueError(f"{path!r} is not a relative path inside the sandbox")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            if create_parents:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                          dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1]


def _write_beneath(root: str, path: str, data: bytes, append: bool = False) -> None:
    """Writes ``path`` inside the workspace ``root``, never through a symbolic link."""
    parent, name = _beneath(root, path, create_parents=True)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        flags |= os.O_APPEND if append else os.O_TRUNC
        fd = os.open(name, flags, 0o644, dir_fd=parent)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
    finally:
        os.close(parent)


def create(tier: Optional[str] = None, policy: Optional[str] = None, cpu: float = 0,
           memory: Optional[int] = None, ttl: Optional[float] = None,
           node_id: Optional[str] = None, label: Optional[str] = None) -> "ray.actor.ActorHandle":
    """A sandbox on some node (SPREAD over the nodes offering ``tierbox``, or pinned to
    ``node_id``, or to nodes with the custom resource ``label``). ``policy``: a Tierbox
    policy (TOML text) for its runs, served by a daemon of its own on the node (the node's
    default policy when omitted). ``cpu`` and ``memory`` (bytes) are reserved from Ray for
    it; the policy bounds what its runs use. ``ttl``: seconds after which it ends itself."""
    options: Dict[str, Any] = {"num_cpus": cpu}
    if memory:
        options["memory"] = memory
    if node_id:
        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=False)
    else:
        options["scheduling_strategy"] = "SPREAD"
    if label:
        options["resources"] = {RESOURCE: 1, label: 0.001}
    return Sandbox.options(**options).remote(tier, ttl, policy)


@ray.remote(num_cpus=0, resources={RESOURCE: 1}, max_retries=0)
def _run_once(command: Union[str, List[str]], tier: Optional[str], timeout: Optional[float],
              env: Optional[Dict[str, str]], files: Optional[Dict[str, bytes]],
              policy: Optional[str] = None) -> ExecResult:
    info = _node_info(policy)
    name = "run-" + uuid.uuid4().hex[:16]
    root = os.path.join(info["workspace"], name)
    os.mkdir(root, 0o755)
    try:
        for rel, data in (files or {}).items():
            parts = [p for p in rel.split("/") if p not in ("", ".")]
            if not parts or ".." in parts or rel.startswith("/"):
                raise ValueError(f"files: {rel!r} is not a relative path inside the workspace")
            _write_beneath(root, rel, data)
        client = DaemonClient(info["socket"], info["token"], session=name)
        req = _request(command, tier, timeout, None, env, name)
        return ExecResult(client.run(req), node_id=info["node_id"])
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(command: Union[str, List[str]], tier: Optional[str] = None,
        timeout: Optional[float] = None, env: Optional[Dict[str, str]] = None,
        files: Optional[Dict[str, bytes]] = None, retries: int = 1,
        policy: Optional[str] = None) -> ExecResult:
    """Runs one command in a fresh workspace on some node (SPREAD), waiting for it. A lost
    node is retried ``retries`` times elsewhere, then raises :class:`TierboxNodeLost`."""
    for attempt in range(retries + 1):
        try:
            return result(submit(command, tier, timeout, env, files, policy))
        except TierboxNodeLost:
            if attempt == retries:
                raise
    raise AssertionError("unreachable")


def submit(command: Union[str, List[str]], tier: Optional[str] = None,
           timeout: Optional[float] = None, env: Optional[Dict[str, str]] = None,
           files: Optional[Dict[str, bytes]] = None,
           policy: Optional[str] = None) -> "ray.ObjectRef":
    """:func:`run` without waiting (and without retries): an ``ObjectRef`` to the result;
    :func:`result` raises a lost node as :class:`TierboxNodeLost`."""
    return _run_once.options(scheduling_strategy="SPREAD").remote(
        command, tier, timeout, env, files, policy
    )


#: Ray's errors for work whose node or worker went away.
_LOST = (
    ray.exceptions.WorkerCrashedError,
    ray.exceptions.NodeDiedError,
    ray.exceptions.RayActorError,
    ray.exceptions.LocalRayletDiedError,
    ray.exceptions.TaskUnschedulableError,
)


def result(ref: "ray.ObjectRef", timeout: Optional[float] = None) -> Any:
    """``ray.get`` of a sandbox call or a submitted run, with a lost node raised as
    :class:`TierboxNodeLost`."""
    try:
        return ray.get(ref, timeout=timeout)
    except TierboxNodeLost:
        raise
    except ray.exceptions.RayTaskError as e:
        # The daemon died before the actor did: the actor raised it as a lost node.
        if isinstance(e.cause, TierboxNodeLost):
            raise TierboxNodeLost(str(e.cause)) from e
        raise
    except _LOST as e:
        raise TierboxNodeLost(f"the node was lost ({type(e).__name__})") from e


def terminate(sandbox: "ray.actor.ActorHandle") -> None:
    """Ends a sandbox: its processes killed, its workspace removed, the actor gone."""
    try:
        ray.get(sandbox.terminate.remote())
    except ray.exceptions.RayActorError:
        pass


class TierboxPool:
    """A warm pool of sandboxes: ``acquire`` hands out an idle one (or creates one),
    ``release`` takes it back, emptied (``recycle=True``) or terminated."""

    def __init__(self, size: int, tier: Optional[str] = None):
        self.tier = tier
        self._idle = [create(tier) for _ in range(size)]
        ray.get([s.node.remote() for s in self._idle])

    def acquire(self) -> "ray.actor.ActorHandle":
        return self._idle.pop() if self._idle else create(self.tier)

    def release(self, sandbox: "ray.actor.ActorHandle", recycle: bool = True) -> None:
        if recycle:
            ray.get(sandbox.wipe.remote())
            self._idle.append(sandbox)
        else:
            terminate(sandbox)

    def close(self) -> None:
        for s in self._idle:
            self.release(s, recycle=False)
        self._idle.clear()


def wait_for_nodes(count: int, timeout_s: float = 60.0) -> None:
    """Waits until ``count`` alive nodes offer the ``tierbox`` resource."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get(RESOURCE)]
        if len(alive) >= count:
            return
        time.sleep(0.2)
    raise TimeoutError(f"fewer than {count} nodes offer {RESOURCE!r}")
