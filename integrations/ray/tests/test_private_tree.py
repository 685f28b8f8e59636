"""The node's tree (daemon state, token, policy, key, sockets, sandboxes) is private to
the user the node's actor runs as: made 0700 or verified, never reused when another user
could have planted anything in it, written without following links.

Regression: ``tierbox_ray.init()`` defaulted to ``/tmp/tierbox-ray``, reused a tree
someone else had made there and wrote into it as root following symbolic links — a local
user got a root file clobber (the token written through a planted link), the daemon's
token and the socket's directory.

The first tests go through the public API on a one-node local Ray (the node actor makes
the tree); the last ones check the tree's rules directly. Needs the ``tierbox`` binary
(``$TIERBOX_BIN`` or on ``PATH``) and root (to make a tree owned by another uid).
"""

import os
import shutil
import stat
import sys
import tempfile

import pytest

PACKAGE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, PACKAGE_DIR)
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in [PACKAGE_DIR, os.environ.get("PYTHONPATH", "")] if p
)

import ray  # noqa: E402

import tierbox_ray  # noqa: E402

#: The uid of a tree "another user" made (``nobody``).
OTHER_UID = 65534

VICTIM_TEXT = b"a root-owned file the node must never write\n"


@pytest.fixture(scope="module")
def node():
    """A one-node local Ray whose workers see ``$TMPDIR`` as a fresh directory (the default
    tree's parent) and no ``$XDG_RUNTIME_DIR``; the node's id and that directory."""
    saved = {k: os.environ.get(k) for k in ("TMPDIR", "XDG_RUNTIME_DIR")}
    tmp = tempfile.mkdtemp(prefix="tbtmp-")
    os.environ["TMPDIR"] = tmp
    os.environ.pop("XDG_RUNTIME_DIR", None)
    ray.init(num_cpus=2, resources={"tierbox": 2}, log_to_driver=False, include_dashboard=False)
    try:
        yield {"id": ray.get_runtime_context().get_node_id(), "tmp": tmp}
    finally:
        tierbox_ray.shutdown()
        ray.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(tmp, ignore_errors=True)


def _attempt(base_dir=None):
    """Starts the node on ``base_dir`` (the default when ``None``) and stops it: the node
    actor's error as Ray reports it, or ``None`` when it started."""
    try:
        tierbox_ray.init(**({} if base_dir is None else {"base_dir": base_dir}))
        return None
    except Exception as e:  # noqa: BLE001 - the actor's creation error, whatever Ray wraps it in
        message = str(e)
        print(f"refused: {message.splitlines()[-1]}")
        return message
    finally:
        tierbox_ray.shutdown()


def _refused(base_dir=None):
    """``init`` refuses the tree: the node actor's error."""
    message = _attempt(base_dir)
    assert message is not None, f"the node started on {base_dir or 'the default tree'}"
    assert "UnsafeTreeError" in message, message
    return message


def _listing(root):
    """Every path below ``root`` with its type, owner and mode (a symlink not followed)."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            found[os.path.relpath(p, root)] = (stat.S_IFMT(st.st_mode), st.st_uid, st.st_mode)
    return found


def _victim():
    fd, path = tempfile.mkstemp(prefix="tbvictim-")
    os.write(fd, VICTIM_TEXT)
    os.close(fd)
    return path


def test_the_default_tree_is_the_user_s_own_0700_and_a_run_goes_through_it(node):
    base = os.path.join(node["tmp"], f"tierbox-ray-{os.geteuid()}")
    try:
        infos = tierbox_ray.init()
        info = infos[node["id"]]
        assert info["workspace"].startswith(base + "/"), info
        assert info["socket"].startswith(base + "/"), info
        done = tierbox_ray.run(["echo", "private"], tier="b")
        assert done.exit_code == 0 and done.stdout == "private\n", done
        # What the node makes (what the daemon makes in its state directory is its own).
        nid = node["id"]
        made = {
            ".": 0o700,
            "s": 0o700,
            nid: 0o700,
            f"{nid}/sandboxes": 0o700,
            f"{nid}/keys": 0o700,
            f"{nid}/daemons": 0o700,
            f"{nid}/daemons/default": 0o700,
            f"{nid}/daemons/default/state": 0o700,
            f"{nid}/daemons/default/state/ray-token": 0o600,
            f"{nid}/daemons/default/policy.toml": 0o600,
            f"{nid}/daemons/default/daemon.log": 0o600,
        }
        for rel, want in made.items():
            st = os.lstat(os.path.join(base, rel))
            assert st.st_uid == os.geteuid(), rel
            assert stat.S_IMODE(st.st_mode) == want, (rel, oct(st.st_mode))
        # A second start reuses the tree it made (its token and policy rewritten).
        tierbox_ray.shutdown()
        again = tierbox_ray.init()[node["id"]]
        assert again["token"] != info["token"]
        os.mkdir(os.path.join(again["workspace"], "again"))
        client = tierbox_ray.DaemonClient(again["socket"], again["token"])
        outcome = client.run({"command": "true", "tier": "b", "workspace": "again"})
        assert outcome["exit_code"] == 0, outcome
    finally:
        tierbox_ray.shutdown()
        shutil.rmtree(base, ignore_errors=True)


def test_a_tree_another_user_pre_created_in_tmp_is_refused_and_left_untouched(node):
    # Where the default tree goes, and an explicit base elsewhere in /tmp: another uid's
    # directories, 0700 and 0777, with the layout the node would use already inside.
    default = os.path.join(node["tmp"], f"tierbox-ray-{os.geteuid()}")
    other = tempfile.mkdtemp(prefix="tbother-")
    explicit = os.path.join(other, "tierbox-ray")
    try:
        for base, mode in [(default, 0o700), (explicit, 0o777)]:
            os.makedirs(os.path.join(base, node["id"], "sandboxes"))
            os.makedirs(os.path.join(base, "s"))
            for dirpath, _, _ in os.walk(base):
                os.chown(dirpath, OTHER_UID, OTHER_UID)
                os.chmod(dirpath, mode)
            before = _listing(base)
            message = _refused(None if base == default else base)
            assert base in message, message
            assert f"owned by uid {OTHER_UID}" in message, message
            assert f"mode {mode:04o}" in message, message
            assert "To fix: remove it" in message, message
            assert _listing(base) == before, "nothing was made or changed in it"
    finally:
        shutil.rmtree(default, ignore_errors=True)
        shutil.rmtree(other, ignore_errors=True)


def test_a_world_writable_tree_of_the_user_s_own_is_refused(node):
    root = tempfile.mkdtemp(prefix="tbwide-")
    base = os.path.join(root, "tierbox-ray")
    os.mkdir(base)
    os.chmod(base, 0o777)
    try:
        message = _refused(base)
        assert f"{base} exists but is not a private directory" in message, message
        assert "mode 0777" in message, message
        assert f"`chmod 700 {base}`" in message, message
        assert os.listdir(base) == []
        # A 0777 directory deeper in the tree is refused too.
        os.chmod(base, 0o700)
        os.mkdir(os.path.join(base, "s"))
        os.chmod(os.path.join(base, "s"), 0o777)
        message = _refused(base)
        assert os.path.join(base, "s") in message and "mode 0777" in message, message
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_symlink_planted_where_the_node_writes_is_never_followed(node):
    root = tempfile.mkdtemp(prefix="tblink-")
    victim = _victim()
    victim_dir = tempfile.mkdtemp(prefix="tbvictimdir-")
    try:
        daemon = os.path.join(root, node["id"], "daemons", "default")
        os.makedirs(os.path.join(daemon, "state"), mode=0o700)
        for dirpath, _, _ in os.walk(root):
            os.chmod(dirpath, 0o700)
        # Each place the node writes a file, and each directory it makes, in turn.
        for planted in [
            os.path.join(daemon, "state", "ray-token"),
            os.path.join(daemon, "policy.toml"),
            os.path.join(daemon, "daemon.log"),
            os.path.join(root, "s"),
            os.path.join(root, node["id"], "sandboxes"),
            os.path.join(root, node["id"], "keys"),
        ]:
            is_dir = planted.endswith(("/s", "/sandboxes", "/keys"))
            if is_dir:
                shutil.rmtree(planted, ignore_errors=True)  # made by an earlier start
            elif os.path.lexists(planted):
                os.unlink(planted)
            os.symlink(victim_dir if is_dir else victim, planted)
            try:
                message = _attempt(root)
            finally:
                os.unlink(planted)
            with open(victim, "rb") as f:
                assert f.read() == VICTIM_TEXT, f"{planted}: the link's target was written"
            assert os.stat(victim).st_mode & 0o777 == 0o600
            assert os.listdir(victim_dir) == [], f"{planted}: written into the link's target"
            assert message is not None, f"the node started with {planted} a symbolic link"
            assert planted in message and "symbolic link" in message, message
        # A hard link to the victim where the token goes is not written through either.
        token = os.path.join(daemon, "state", "ray-token")
        if os.path.lexists(token):
            os.unlink(token)
        os.link(victim, token)
        message = _attempt(root)
        with open(victim, "rb") as f:
            assert f.read() == VICTIM_TEXT, "the token was written through a hard link"
        assert message is not None and "2 links" in message, message
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(victim_dir, ignore_errors=True)
        os.unlink(victim)


# ---- the tree's rules, without Ray ---------------------------------------------------


def test_the_default_base_is_per_user():
    from tierbox_ray.private import default_base_dir

    assert default_base_dir({"XDG_RUNTIME_DIR": "/run/user/1000"}, 1000) == "/run/user/1000/tierbox-ray"
    assert default_base_dir({}, 1000) == "/tmp/tierbox-ray-1000"
    assert default_base_dir({"TMPDIR": "/var/tmp/me"}, 0) == "/var/tmp/me/tierbox-ray-0"
    # Relative values are not taken.
    assert default_base_dir({"XDG_RUNTIME_DIR": "run", "TMPDIR": "t"}, 7) == "/tmp/tierbox-ray-7"


def test_a_base_below_a_directory_others_may_write_is_refused():
    from tierbox_ray.private import PrivateTree, UnsafeTreeError

    root = tempfile.mkdtemp(prefix="tbparent-")
    try:
        os.chmod(root, 0o777)  # writable by all, not sticky: the base could be swapped
        with pytest.raises(UnsafeTreeError, match="lets another user replace"):
            PrivateTree.open(os.path.join(root, "tierbox-ray"))
        assert os.listdir(root) == []
        os.chmod(root, 0o1777)  # sticky, as /tmp is: fine
        tree = PrivateTree.open(os.path.join(root, "tierbox-ray"))
        assert stat.S_IMODE(os.lstat(tree.path).st_mode) == 0o700
        tree.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_new_files_are_made_exclusively_and_only_its_own_files_are_replaced():
    from tierbox_ray.private import PrivateTree, UnsafeTreeError

    root = tempfile.mkdtemp(prefix="tbfiles-")
    old_umask = os.umask(0o077)
    try:
        tree = PrivateTree.open(os.path.join(root, "base"))
        sub = tree.subdir("d")
        path = sub.write_new("token", b"one")
        assert sub.write_new("token", b"two") == path
        with open(path, "rb") as f:
            assert f.read() == b"two"
        os.chown(path, OTHER_UID, OTHER_UID)
        with pytest.raises(UnsafeTreeError, match=f"owned by uid {OTHER_UID}"):
            sub.write_new("token", b"three")
        os.unlink(path)
        os.mkfifo(os.path.join(sub.path, "fifo"))
        with pytest.raises(UnsafeTreeError):
            sub.open_append("fifo")
        with pytest.raises(UnsafeTreeError):
            sub.socket_path("fifo")
        with sub.open_append("log") as log:
            log.write(b"x")
        assert stat.S_IMODE(os.lstat(os.path.join(sub.path, "log")).st_mode) == 0o600
        sub.close()
        tree.close()
    finally:
        os.umask(old_umask)
        shutil.rmtree(root, ignore_errors=True)
