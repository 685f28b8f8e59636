#!/usr/bin/env python3
"""Renders the kustomization in DIR the way `kubectl kustomize` does for what it uses
(`resources`, `namespace`, `labels`), prints the result, and checks it offline:

- every object has apiVersion, kind and metadata.name; names are DNS labels;
- the DaemonSet's selector matches its pod template's labels;
- every volumeMount names a volume, every hostPath is absolute, the policy ConfigMap the
  pod mounts exists, and the policy it holds parses as TOML with `[audit] log` under a
  mounted directory;
- the daemon's command serves a unix socket inside a hostPath volume, with a state
  directory and policy that are mounted;
- the security settings the daemon needs are there (see daemonset.yaml for why).

Exit 0 when everything holds; otherwise each failure is printed and the exit is 1.

    python3 deploy/kubernetes/check.py deploy/kubernetes
"""

import os
import re
import sys
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
    namespaces = by_kind.get("Namespace", [])
    if not any(
        n["metadata"].get("labels", {}).get("pod-security.kubernetes.io/enforce") == "privileged"
        for n in namespaces
    ):
        errors.append("the namespace must admit privileged pods (pod-security label)")
    return errors


def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(__file__)
    objects = render(directory)
    print(yaml.safe_dump_all(objects, sort_keys=False), end="")
    errors = check(objects)
    for e in errors:
        print(f"check: {e}", file=sys.stderr)
    print(f"check: {len(objects)} objects, {len(errors)} problems", file=sys.stderr)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
