#!/usr/bin/env python3
"""Renders the kustomization in DIR the way `kubectl kustomize` does for what it uses
(`resources`, `namespace`, `labels`), prints the result, and checks it offline:

- every object has apiVersion, kind and metadata.name; names are DNS labels;
- the DaemonSet's selector matches its pod template's labels;
- every volumeMount names a volume, every hostPath is absolute, the policy ConfigMap the
  pod mounts exists, and the policy it holds parses as TOML with `[audit] log` under a
  mounted directory;
- the daemon's command serves a unix socket inside a hostPath volume, with a state
  directory and policy that are mounted, and a workspace that neither lies in nor holds
  the state directory or the audit log (Tierbox refuses those: scope.workspace_refused);
- the security settings the daemon needs are there (see daemonset.yaml for why).

With `--run TIERBOX`, it then starts the pod's daemon for real: the container's command
exactly as the rendered DaemonSet has it (`tierbox` found on PATH in TIERBOX's directory,
as in the image), on a local directory tree that mirrors the pod's volumes (each
mountPath replaced by a directory of its own under a temporary root; a hostPath the node
must already have, such as /sys/fs/cgroup, is the node's own), with the ConfigMap's files
as the pod sees them (their absolute paths under a mountPath mapped the same way). It
waits for the pod's readiness probe, sends one run through the socket, checks it
succeeded and was audited, and stops the daemon with SIGTERM within the pod's grace.

Exit 0 when everything holds; otherwise each failure is printed and the exit is 1.

    python3 deploy/kubernetes/check.py deploy/kubernetes [--run target/debug/tierbox]
"""

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib

import yaml

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def render(directory):
    with open(os.path.join(directory, "kustomization.yaml")) as f:
        k = yaml.safe_load(f)
    objects = []
    for name in k.get("resources", []):
        with open(os.path.join(directory, name)) as f:
            objects.extend(o for o in yaml.safe_load_all(f) if o)
    namespace = k.get("namespace")
    labels = {}
    for entry in k.get("labels", []):
        labels.update(entry.get("pairs", {}))
    for o in objects:
        meta = o.setdefault("metadata", {})
        if namespace and o.get("kind") != "Namespace":
            meta["namespace"] = namespace
        meta.setdefault("labels", {}).update(labels)
    return objects


def within(path, directory):
    """``path`` is ``directory`` or lies below it (lexically)."""
    directory = directory.rstrip("/") or "/"
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def check(objects):
    errors = []
    by_kind = {}
    for o in objects:
        for key in ("apiVersion", "kind"):
            if not o.get(key):
                errors.append(f"an object has no {key}: {o}")
        name = o.get("metadata", {}).get("name", "")
        if not DNS_LABEL.match(name):
            errors.append(f"{o.get('kind')} name {name!r} is not a DNS label")
        by_kind.setdefault(o.get("kind"), []).append(o)
    daemonsets = by_kind.get("DaemonSet", [])
    if len(daemonsets) != 1:
        errors.append(f"expected one DaemonSet, found {len(daemonsets)}")
        return errors
    ds = daemonsets[0]
    spec = ds["spec"]
    pod = spec["template"]["spec"]
    selector = spec["selector"]["matchLabels"]
    template_labels = spec["template"]["metadata"].get("labels", {})
    if any(template_labels.get(k) != v for k, v in selector.items()):
        errors.append(f"selector {selector} does not match the template labels {template_labels}")
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    configmaps = {c["metadata"]["name"]: c for c in by_kind.get("ConfigMap", [])}
    for v in volumes.values():
        if "hostPath" in v and not v["hostPath"]["path"].startswith("/"):
            errors.append(f"hostPath of {v['name']} is not absolute")
        if "configMap" in v and v["configMap"]["name"] not in configmaps:
            errors.append(f"volume {v['name']} names a missing ConfigMap")
    if not pod.get("hostNetwork"):
        errors.append("hostNetwork must be true: the audit netlink socket is the host's")
    (container,) = pod["containers"]
    mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
    for path, name in mounts.items():
        if name not in volumes:
            errors.append(f"volumeMount {path} names a missing volume {name}")

    def mounted(path):
        return any(path == m or path.startswith(m.rstrip("/") + "/") for m in mounts)

    cmd = container["command"]
    if cmd[:2] != ["tierbox", "serve"]:
        errors.append(f"the command is not `tierbox serve`: {cmd}")
    args = dict(zip(cmd[2::2], cmd[3::2]))
    sock = args.get("--unix", "")
    sock_dir = os.path.dirname(sock)
    if sock_dir not in mounts or "hostPath" not in volumes[mounts[sock_dir]]:
        errors.append(f"the socket {sock!r} is not in a hostPath volume")
    for flag in ("--state-dir", "--policy", "--workspace"):
        if not mounted(args.get(flag, "")):
            errors.append(f"{flag} {args.get(flag)!r} is not on a mounted volume")
    workspace, state = args.get("--workspace", ""), args.get("--state-dir", "")
    if workspace and state and (within(workspace, state) or within(state, workspace)):
        errors.append(
            f"--workspace {workspace!r} and --state-dir {state!r}: one holds the other, "
            f"which Tierbox refuses (scope.workspace_refused): give each a volume of its own"
        )
    sc = container.get("securityContext", {})
    if not sc.get("privileged"):
        errors.append("the daemon must be privileged (namespaces, mounts, cgroups)")
    if sc.get("seccompProfile", {}).get("type") != "Unconfined":
        errors.append("the runtime's default seccomp profile blocks CLONE_NEWUSER")
    policy_mount = os.path.dirname(args.get("--policy", ""))
    cm = configmaps.get(volumes.get(mounts.get(policy_mount, ""), {}).get("configMap", {}).get("name", ""))
    if cm is None:
        errors.append("the policy is not mounted from a ConfigMap")
    else:
        policy = tomllib.loads(cm["data"][os.path.basename(args["--policy"])])
        log = policy.get("audit", {}).get("log", "")
        if not mounted(log):
            errors.append(f"the audit log {log!r} is not on a mounted volume")
        if workspace and within(log, workspace):
            errors.append(f"the audit log {log!r} lies in the workspace {workspace!r}")
    namespaces = by_kind.get("Namespace", [])
    if not any(
        n["metadata"].get("labels", {}).get("pod-security.kubernetes.io/enforce") == "privileged"
        for n in namespaces
    ):
        errors.append("the namespace must admit privileged pods (pod-security label)")
    return errors


def the_pod(objects):
    """The DaemonSet's pod spec, its one container and its volumes by name."""
    (ds,) = [o for o in objects if o.get("kind") == "DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return pod, container, {v["name"]: v for v in pod.get("volumes", [])}


class PodLayout:
    """The pod's volumes on a local tree: each mountPath mapped to a directory under
    ``root`` (a hostPath at ``root`` + its node path, so two mounts of one hostPath share
    it; a ConfigMap or emptyDir a directory of its own), or to the node's own directory
    for a hostPath of type Directory mounted where the node has it."""

    def __init__(self, objects, root):
        self.root = root
        self.mapping = {}
        pod, container, volumes = the_pod(objects)
        configmaps = {
            o["metadata"]["name"]: o for o in objects if o.get("kind") == "ConfigMap"
        }
        pending = []
        for m in container.get("volumeMounts", []):
            mount, v = m["mountPath"], volumes[m["name"]]
            if "hostPath" in v:
                node_path, kind = v["hostPath"]["path"], v["hostPath"].get("type", "")
                if kind == "Directory":
                    if node_path != mount or not os.path.isdir(node_path):
                        raise RuntimeError(
                            f"hostPath {node_path} (type Directory) mounted at {mount}: "
                            "cannot be mirrored here"
                        )
                    self.mapping[mount] = node_path
                    continue
                local = os.path.join(root, "node", node_path.lstrip("/"))
                os.makedirs(local, mode=0o755, exist_ok=True)
            elif "configMap" in v:
                local = os.path.join(root, "configmap", v["name"])
                os.makedirs(local)
                pending.append((local, configmaps[v["configMap"]["name"]]))
            elif "emptyDir" in v:
                local = os.path.join(root, "emptydir", v["name"])
                os.makedirs(local)
            else:
                raise RuntimeError(f"volume {v['name']} is of a kind this check cannot mirror")
            self.mapping[mount] = local
        # The ConfigMap's files, as the pod reads them, once every mount is known.
        for local, cm in pending:
            for key, text in cm.get("data", {}).items():
                path = os.path.join(local, key)
                with open(path, "w") as f:
                    f.write(self.map_text(text))
                os.chmod(path, 0o444)

    def map_path(self, path):
        """``path`` in the pod → on the local tree (unchanged unless under a mountPath)."""
        best = max((m for m in self.mapping if within(path, m)), key=len, default=None)
        if best is None:
            return path
        return self.mapping[best] + path[len(best.rstrip("/")):]

    def map_text(self, text):
        """Each double-quoted absolute path in ``text`` (a TOML policy) mapped."""
        return re.sub(r'"(/[^"\\]*)"', lambda m: json.dumps(self.map_path(m.group(1))), text)

    def map_argv(self, argv):
        return [self.map_path(a) if a.startswith("/") else a for a in argv]


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


def _post(sock, token, path, body, timeout=60):
    conn = _UnixHTTP(sock, timeout)
    try:
        conn.request("POST", path, body=json.dumps(body).encode(), headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
        })
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"null")
    finally:
        conn.close()


def run_pod(objects, tierbox):
    """Starts the DaemonSet's container command on a local mirror of the pod and sends
    one run through it; the failures."""
    pod, container, _ = the_pod(objects)
    root = tempfile.mkdtemp(prefix="tbk8s-")
    log_path = os.path.join(root, "daemon.log")
    proc = None
    try:
        layout = PodLayout(objects, root)
        argv = container["command"] + container.get("args", [])
        local_argv = layout.map_argv(argv)
        print(f"run: the pod's command: {' '.join(argv)}", file=sys.stderr)
        print(f"run: on the local mirror: {' '.join(local_argv)}", file=sys.stderr)
        home = os.path.join(root, "home")
        os.makedirs(home)
        env = {
            # `tierbox` and `tierbox-full` in one directory on PATH, as in the image.
            "PATH": os.pathsep.join([os.path.dirname(os.path.abspath(tierbox)),
                                     "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]),
            "HOME": home,
        }
        for e in container.get("env", []):
            if "value" in e:
                env[e["name"]] = layout.map_text(json.dumps(e["value"]))[1:-1]
        log = open(log_path, "wb")
        proc = subprocess.Popen(local_argv, env=env, cwd="/", stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log)
        log.close()

        def daemon_log():
            with open(log_path, errors="replace") as f:
                return "".join("  | " + line for line in f)

        # Ready when the pod's readiness probe says so.
        probe = layout.map_argv(container["readinessProbe"]["exec"]["command"])
        deadline = time.monotonic() + 30
        while subprocess.run(probe, env=env).returncode != 0:
            if proc.poll() is not None:
                return [f"the daemon exited with status {proc.returncode} before it was ready:\n"
                        + daemon_log()]
            if time.monotonic() > deadline:
                return ["the daemon was not ready within 30 s:\n" + daemon_log()]
            time.sleep(0.1)
        args = dict(zip(argv[2::2], argv[3::2]))
        sock = layout.map_path(args["--unix"])
        token_file = layout.map_path(
            args.get("--token-file", os.path.join(args["--state-dir"], "http-token"))
        )
        with open(token_file) as f:
            token = f.read().strip()
        status, body = _post(sock, token, "/v1/process/run", {
            "command": "sh", "args": ["-c", "echo ran through the DaemonSet daemon"], "timeout_ms": 30000,
        })
        errors = []
        outcome = body if isinstance(body, dict) else {}
        stdout = outcome.get("stdout", {}).get("text")
        print(f"run: HTTP {status}: exit_code {outcome.get('exit_code')}, tier "
              f"{outcome.get('tier')}, stdout {stdout!r}", file=sys.stderr)
        if status != 200 or outcome.get("exit_code") != 0 or stdout != "ran through the DaemonSet daemon\n":
            detail = {k: outcome[k] for k in ("exit_code", "signal", "tier") if k in outcome}
            detail["stderr"] = outcome.get("stderr", {}).get("text")
            errors.append(
                f"the run through the daemon failed: HTTP {status} "
                f"{detail if outcome.get('stdout') else body}"
            )
        # A client on the node makes its sandbox's directory in the workspace hostPath
        # and names it in its requests (as tierbox-ray does when it attaches).
        sandbox = os.path.join(layout.map_path(args["--workspace"]), "client-1")
        os.mkdir(sandbox)
        status, body = _post(sock, token, "/v1/process/run", {
            "command": "sh", "args": ["-c", "echo kept > out.txt"], "workspace": "client-1",
            "timeout_ms": 30000,
        })
        try:
            with open(os.path.join(sandbox, "out.txt")) as f:
                wrote = f.read() == "kept\n"
        except FileNotFoundError:
            wrote = False
        print(f"run: in a client's sandbox directory: HTTP {status}, exit_code "
              f"{(body or {}).get('exit_code')}, out.txt written: {wrote}", file=sys.stderr)
        if status != 200 or (body or {}).get("exit_code") != 0 or not wrote:
            errors.append(f"the run in a client's sandbox directory failed: HTTP {status} "
                          f"{(body or {}).get('error') or (body or {}).get('stderr')}")
        policy_path = layout.map_path(args["--policy"])
        with open(policy_path, "rb") as f:
            audit = tomllib.load(f).get("audit", {}).get("log")
        if audit:
            try:
                with open(audit) as f:
                    records = f.read().splitlines()
            except FileNotFoundError:
                records = []
            print(f"run: the audit log {audit} holds {len(records)} record(s)", file=sys.stderr)
            if not records:
                errors.append(f"the run left no record in the audit log {audit}")
        proc.send_signal(signal.SIGTERM)
        grace = pod.get("terminationGracePeriodSeconds", 30)
        try:
            code = proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            errors.append(f"the daemon did not stop within the pod's grace of {grace} s")
        else:
            if code != 0:
                errors.append(f"the daemon exited with status {code} on SIGTERM:\n" + daemon_log())
        return errors
    except Exception as e:  # noqa: BLE001 - every failure of the run is a check failure
        return [f"running the pod's command failed: {type(e).__name__}: {e}"]
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(root, ignore_errors=True)


def main():
    argv = sys.argv[1:]
    tierbox = None
    if "--run" in argv:
        i = argv.index("--run")
        tierbox = argv[i + 1]
        del argv[i:i + 2]
    directory = argv[0] if argv else os.path.dirname(__file__)
    objects = render(directory)
    print(yaml.safe_dump_all(objects, sort_keys=False), end="")
    errors = check(objects)
    if tierbox is not None:
        # Run even when an offline check failed: what the daemon says is the truth.
        errors += run_pod(objects, tierbox)
    for e in errors:
        print(f"check: {e}", file=sys.stderr)
    print(f"check: {len(objects)} objects, {len(errors)} problems", file=sys.stderr)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
