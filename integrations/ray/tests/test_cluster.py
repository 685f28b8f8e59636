"""tierbox-ray on a local Ray cluster: a head and worker raylets, each worker with a
Tierbox daemon, state directory, socket, signing key and audit log of its own, standing
in for separate hosts.

Needs the ``tierbox`` binary (``$TIERBOX_BIN`` or on ``PATH``) and root for Tier C.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

import pytest

# The package, for this process and for the raylets and workers the cluster starts.
PACKAGE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, PACKAGE_DIR)
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in [PACKAGE_DIR, os.environ.get("PYTHONPATH", "")] if p
)

import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

import tierbox_ray  # noqa: E402
from tierbox_ray.node import tierbox_binary  # noqa: E402

#: Sandboxes each worker node may hold at once.
PER_NODE = 2


@pytest.fixture(scope="module")
def cluster():
    base = tempfile.mkdtemp(prefix="tierbox-ray-")
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    workers = [c.add_node(num_cpus=2, resources={"tierbox": PER_NODE}) for _ in range(2)]
    ray.init(address=c.address, log_to_driver=False)
    tierbox_ray.wait_for_nodes(2)
    infos = tierbox_ray.init(base_dir=base)
    yield {"cluster": c, "workers": workers, "infos": infos, "base": base}
    tierbox_ray.shutdown()
    ray.shutdown()
    c.shutdown()


def _verify(args):
    done = subprocess.run([tierbox_binary(), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _audit_records(info):
    actor = ray.get_actor("tierbox-node-" + info["node_id"], namespace="tierbox")
    return ray.get(actor.audit_log_bytes.remote())


def test_spread_runs_land_on_both_nodes_and_verify_against_each_node_s_key(cluster):
    infos = cluster["infos"]
    before = {n: len(_audit_records(i).splitlines()) for n, i in infos.items()}
    tiers = ["b", "c"] * 10
    refs = [tierbox_ray.submit(["sh", "-c", f"echo run {i}"], tier=t) for i, t in enumerate(tiers)]
    results = ray.get(refs)
    nodes = {r.node_id for r in results}
    assert nodes == set(infos), nodes
    per_node = {n: 0 for n in infos}
    with tempfile.TemporaryDirectory() as d:
        for i, (r, tier) in enumerate(zip(results, tiers)):
            assert r.exit_code == 0, r
            assert r.stdout == f"run {i}\n"
            assert r["tier"] == tier
            per_node[r.node_id] += 1
            path = os.path.join(d, f"{i}.json")
            with open(path, "w") as f:
                json.dump({k: v for k, v in r.items() if k != "node_id"}, f)
            _verify(["attest", "verify", path, "--pubkey", infos[r.node_id]["pubkey"]])
            # Another node's key does not verify it.
            other = next(n for n in infos if n != r.node_id)
            bad = subprocess.run(
                [tierbox_binary(), "attest", "verify", path, "--pubkey", infos[other]["pubkey"]],
                capture_output=True,
            )
            assert bad.returncode != 0
        for node, info in infos.items():
            log = os.path.join(d, f"{node}.jsonl")
            data = _audit_records(info)
            with open(log, "wb") as f:
                f.write(data)
            _verify(["audit", "verify", log, "--pubkey", info["pubkey"]])
            assert len(data.splitlines()) - before[node] == per_node[node], (node, per_node)


def test_a_one_shot_run_gets_its_files_in_its_own_workspace_only(cluster):
    given = tierbox_ray.run(["cat", "in/data.txt"], tier="b", files={"in/data.txt": b"given\n"})
    assert given.stdout == "given\n", given
    for bad in ["../escape", "/etc/x", "a/../../b"]:
        with pytest.raises(ValueError):
            tierbox_ray.run(["true"], tier="b", files={bad: b"x"})


def test_a_node_never_holds_more_sandboxes_than_its_tierbox_resource(cluster):
    script = "python3 -c 'import time; print(time.time())'; sleep 1; python3 -c 'import time; print(time.time())'"
    results = ray.get([tierbox_ray.submit(["sh", "-c", script], tier="b") for _ in range(6)])
    spans = []
    for r in results:
        assert r.exit_code == 0, r
        start, end = (float(x) for x in r.stdout.split())
        spans.append((start, end, r.node_id))
    edges = sorted([(s, 1) for s, _, _ in spans] + [(e, -1) for _, e, _ in spans])
    running, most = 0, 0
    for _, step in edges:
        running += step
        most = max(most, running)
    assert most <= 2 * PER_NODE, spans
    for node in {n for _, _, n in spans}:
        mine = sorted((s, e) for s, e, n in spans if n == node)
        for i, (s, _) in enumerate(mine):
            assert sum(1 for s2, e2 in mine if s2 <= s < e2) <= PER_NODE, mine


def test_the_pool_recycles_a_sandbox_with_its_workspace_wiped(cluster):
    pool = tierbox_ray.TierboxPool(1, tier="b")
    sb = pool.acquire()
    ray.get(sb.write_file.remote("notes/a.txt", "left behind\n"))
    # `-I .git`: a workspace without a repository shows the run an empty read-only
    # `.git` (the protected path's placeholder, gone after the run), in Tier B as in C.
    out = ray.get(sb.exec.remote("cat notes/a.txt; ls -A -I .git"))
    assert out.stdout == "left behind\nnotes\n", out
    # Nothing beside its own workspace: another sandbox's files are out of reach.
    other = tierbox_ray.create(tier="b", node_id=ray.get(sb.node.remote()))
    ray.get(other.write_file.remote("secret", "other's"))
    peek = ray.get(sb.exec.remote("cat ../*/secret"))
    assert "other's" not in peek.stdout, peek
    tierbox_ray.terminate(other)
    pool.release(sb, recycle=True)
    again = pool.acquire()
    assert again == sb
    listing = ray.get(again.exec.remote("ls -A -I .git"))
    assert listing.stdout == "", listing
    with pytest.raises(Exception):
        ray.get(again.read_file.remote("notes/a.txt"))
    pool.release(again, recycle=False)
    pool.close()
    # A sandbox past its time to live ends itself, and its workspace goes with it.
    brief = tierbox_ray.create(tier="b", ttl=1.5)
    root = os.path.join(
        cluster["infos"][ray.get(brief.node.remote())]["workspace"],
        ray.get(brief.get_instance_id.remote()),
    )
    assert os.path.isdir(root)
    time.sleep(4)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(brief.node.remote())
    assert not os.path.exists(root)


def test_a_sandbox_streams_its_output_and_may_have_a_policy_of_its_own(cluster):
    sb = tierbox_ray.create(tier="b")
    events = [ray.get(ref) for ref in sb.exec_stream.remote(["sh", "-c", "echo a; sleep 0.3; echo b"])]
    *output, final = events
    assert "".join(e["text"] for e in output if e["stream"] == "stdout") == "a\nb\n", events
    assert final.exit_code == 0 and final.stdout == "a\nb\n", final
    tierbox_ray.terminate(sb)

    only_true = tierbox_ray.node.DEFAULT_POLICY.replace(
        'allowed_executables = ["sh",', 'allowed_executables = ["true"] # ["sh",'
    )
    assert only_true != tierbox_ray.node.DEFAULT_POLICY
    strict = tierbox_ray.create(tier="b", policy=only_true)
    ok = ray.get(strict.exec.remote(["true"]))
    assert ok.exit_code == 0, ok
    with pytest.raises(Exception) as refused:
        ray.get(strict.exec.remote(["sh", "-c", "echo no"]))
    assert "exec.not_allowed" in str(refused.value)
    # Its daemon signs with the node's key too.
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "o.json")
        with open(path, "w") as f:
            json.dump({k: v for k, v in ok.items() if k != "node_id"}, f)
        _verify(["attest", "verify", path, "--pubkey", cluster["infos"][ok.node_id]["pubkey"]])
    tierbox_ray.terminate(strict)


def test_a_node_s_own_daemon_can_be_attached_instead_of_started(cluster):
    # The node's daemon, started outside Ray (as a DaemonSet or `tierbox daemon start`
    # would): its own state directory, key, token, socket and workspace.
    root = tempfile.mkdtemp(prefix="tbattach-")
    state, ws = os.path.join(root, "state"), os.path.join(root, "ws")
    os.makedirs(state, mode=0o700)
    os.makedirs(ws)
    token_file = os.path.join(state, "token")
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"a" * 64)
    os.close(fd)
    policy = os.path.join(root, "policy.toml")
    with open(policy, "w") as f:
        f.write(tierbox_ray.node.DEFAULT_POLICY)
    sock = os.path.join(root, "d.sock")
    daemon = subprocess.Popen(
        [tierbox_binary(), "serve", "--unix", sock, "--state-dir", state, "--workspace", ws,
         "--policy", policy, "--token-file", token_file],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        client = tierbox_ray.DaemonClient(sock, "a" * 64)
        deadline = time.monotonic() + 15
        while not client.health() and time.monotonic() < deadline:
            time.sleep(0.05)
        c = cluster["cluster"]
        extra = c.add_node(num_cpus=1, resources={"tierbox": 1})
        tierbox_ray.wait_for_nodes(3)
        infos = tierbox_ray.init(
            base_dir=cluster["base"],
            attach={"socket": sock, "token_file": token_file, "state_dir": state, "workspace": ws},
        )
        node_id = next(n for n in infos if n not in cluster["infos"])
        key = _verify(["attest", "pubkey", "--state-dir", state]).strip()
        assert infos[node_id]["pubkey"] == key and infos[node_id]["daemon_pid"] is None
        sb = tierbox_ray.create(tier="b", node_id=node_id)
        out = ray.get(sb.exec.remote(["sh", "-c", "echo attached"]))
        assert out.stdout == "attached\n" and out.node_id == node_id, out
        assert os.listdir(ws) == [ray.get(sb.get_instance_id.remote())]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "o.json")
            with open(path, "w") as f:
                json.dump({k: v for k, v in out.items() if k != "node_id"}, f)
            _verify(["attest", "verify", path, "--pubkey", key])
        tierbox_ray.terminate(sb)
        c.remove_node(extra)
    finally:
        daemon.terminate()
        daemon.wait(timeout=20)


def test_a_daemon_that_dies_mid_run_is_a_lost_node_too(cluster):
    # Whichever goes first when a node is lost — the sandbox's actor or the daemon it
    # talks to — the caller sees TierboxNodeLost. Here only the daemon dies (a policy of
    # its own, so no other test's daemon is touched).
    policy = tierbox_ray.node.DEFAULT_POLICY + "\n# daemon that dies\n"
    sb = tierbox_ray.create(tier="b", policy=policy)
    node_id = ray.get(sb.node.remote())
    node = ray.get_actor("tierbox-node-" + node_id, namespace="tierbox")
    ref = sb.exec.remote(["sleep", "32.5"])
    deadline = time.monotonic() + 30
    while not _processes_mentioning("32.5") and time.monotonic() < deadline:
        time.sleep(0.1)
    tags = ray.get(node.daemon_pids.remote())
    (daemon,) = [pid for tag, pid in tags.items() if tag != "default"]
    os.kill(daemon, 9)
    with pytest.raises(tierbox_ray.TierboxNodeLost):
        tierbox_ray.result(ref)
    deadline = time.monotonic() + 20
    while _processes_mentioning("32.5") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _processes_mentioning("32.5"), "the daemon's sandbox died with it"


def _alive(pid):
    """``pid`` runs (a zombie waiting to be reaped does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _processes_mentioning(marker):
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read() and _alive(pid):
                    found.append(pid)
        except OSError:
            pass
    return found


def test_a_lost_node_is_a_typed_error_the_retry_lands_elsewhere_and_nothing_survives(cluster):
    c = cluster["cluster"]
    doomed = c.add_node(num_cpus=1, resources={"tierbox": 1})
    tierbox_ray.wait_for_nodes(3)
    infos = tierbox_ray.init(base_dir=cluster["base"])
    doomed_id = next(n for n in infos if n not in cluster["infos"])
    node = ray.get_actor("tierbox-node-" + doomed_id, namespace="tierbox")
    daemon_pids = list(ray.get(node.daemon_pids.remote()).values())
    sb = tierbox_ray.create(tier="b", node_id=doomed_id)
    ref = sb.exec.remote(["sleep", "31.25"])
    deadline = time.monotonic() + 30
    while not _processes_mentioning("31.25") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_mentioning("31.25"), "the run started"
    c.remove_node(doomed, allow_graceful=False)
    with pytest.raises(tierbox_ray.TierboxNodeLost):
        tierbox_ray.result(ref)
    retry = tierbox_ray.run(["sh", "-c", "echo survived"], tier="b")
    assert retry.stdout == "survived\n" and retry.node_id != doomed_id
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (
        any(_alive(p) for p in daemon_pids) or _processes_mentioning("31.25")
    ):
        time.sleep(0.2)
    assert not any(_alive(p) for p in daemon_pids), "the lost node's daemons are gone"
    assert not _processes_mentioning("31.25"), "the lost node's sandbox is gone"
