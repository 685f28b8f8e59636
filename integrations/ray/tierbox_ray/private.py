"""The node's private tree: where tierbox-ray keeps each node's daemons' state, token,
policy, signing key, sockets and sandboxes.

Invariants (the tree is written by the node actor, often as root, so anything another
local user could plant in it would be a root file clobber or a stolen token):

- the base is a directory of its own per user: ``$XDG_RUNTIME_DIR/tierbox-ray`` where the
  session has a runtime directory, else ``tierbox-ray-<uid>`` in the temporary directory
  (``$TMPDIR``, else ``/tmp``); never a shared name;
- every directory of the tree is made with mode 0700, or, when it already exists, is
  verified with ``lstat`` before it is used: a real directory (not a symbolic link),
  owned by this process's uid, mode exactly 0700. One that fails is refused with an
  error naming its path, owner and mode and the fix; it is never reused, repaired or
  written into;
- every ancestor of the base is owned by this uid or root and writable by no one else
  unless sticky (``/tmp``), so nobody can swap the base after it is verified;
- directories are then held open (``O_DIRECTORY | O_NOFOLLOW``, checked to be the inode
  that was verified) and files are written through those fds only: a new file with
  ``O_CREAT | O_EXCL | O_NOFOLLOW`` (a file of ours from an earlier start is removed
  first; anything else at its name — a symbolic link, another user's file, a hard link
  — is refused), a file that is reused (the daemon's log) with ``O_NOFOLLOW`` and a check
  of its owner, type and link count.

Only the standard library, and no Ray: the node actor uses it, and so do its tests.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Mapping, Optional

#: The mode of every directory of the tree.
DIR_MODE = 0o700

#: The mode of the files it writes (token, policy, log).
FILE_MODE = 0o600

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafeTreeError(PermissionError):
    """A path of the tree is not one tierbox-ray may use: it exists but is not its own
    private directory (or file), or an ancestor lets another user replace it."""


def default_base_dir(env: Optional[Mapping[str, str]] = None, uid: Optional[int] = None) -> str:
    """The per-user base of the tree on this node: ``$XDG_RUNTIME_DIR/tierbox-ray`` when
    that is set (an absolute path), else ``<tmp>/tierbox-ray-<uid>`` with ``<tmp>`` from
    ``$TMPDIR`` (else ``/tmp``). The path only: :meth:`PrivateTree.open` verifies it."""
    env = os.environ if env is None else env
    uid = os.geteuid() if uid is None else uid
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if runtime.startswith("/"):
        return os.path.join(runtime, "tierbox-ray")
    tmp = env.get("TMPDIR", "")
    if not tmp.startswith("/"):
        tmp = "/tmp"
    return os.path.join(tmp, f"tierbox-ray-{uid}")


_KINDS = {
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFDIR: "a directory",
    stat.S_IFREG: "a regular file",
    stat.S_IFSOCK: "a socket",
    stat.S_IFIFO: "a fifo",
}


def _describe(st: os.stat_result) -> str:
    kind = _KINDS.get(stat.S_IFMT(st.st_mode), "a device")
    return f"{kind}, owned by uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}"


def _check_dir(path: str, st: os.stat_result) -> None:
    """Refuses ``st`` (an ``lstat`` of ``path``) unless it is a private directory of ours."""
    uid = os.geteuid()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
        fix = "remove it (whatever another user made there may hold anything they put in it)"
    elif stat.S_IMODE(st.st_mode) != DIR_MODE:
        fix = f"if you made it and trust what is in it, `chmod 700 {path}`; else remove it"
    else:
        return
    raise UnsafeTreeError(
        f"{path} exists but is not a private directory of uid {uid} "
        f"({_describe(st)}; needed: a real directory, owned by uid {uid}, mode 0700): "
        f"tierbox-ray never reuses a tree it cannot trust. To fix: {fix}, "
        f"or pass another base_dir"
    )


def _check_ancestors(directory: str) -> None:
    """Every directory from ``/`` to ``directory`` (a real path) is owned by this uid or
    root and writable by no one else unless sticky."""
    uid = os.geteuid()
    path = "/"
    parts = [p for p in directory.split("/") if p]
    for i in range(len(parts) + 1):
        if i:
            path = os.path.join(path, parts[i - 1])
        st = os.lstat(path)
        mode = stat.S_IMODE(st.st_mode)
        shared = mode & (stat.S_IWGRP | stat.S_IWOTH) and not mode & stat.S_ISVTX
        if not stat.S_ISDIR(st.st_mode) or st.st_uid not in (uid, 0) or shared:
            raise UnsafeTreeError(
                f"{path} ({_describe(st)}) lets another user replace what tierbox-ray "
                f"keeps below it: every directory above the base must be owned by uid {uid} "
                f"or root and writable by no one else unless sticky; pass a base_dir elsewhere"
            )


class PrivateTree:
    """A directory of the tree, verified and held open; its files and subdirectories are
    reached only through its fd."""

    def __init__(self, path: str, fd: int):
        self.path = path
        self.fd = fd

    @classmethod
    def open(cls, path: str) -> "PrivateTree":
        """The base at ``path``: made 0700, or verified. Its parent must exist (nothing
        above the base is made: that would be made by name, through whatever is there)."""
        parent, name = os.path.split(os.path.abspath(path))
        if not name:
            raise UnsafeTreeError(f"{path!r} cannot be the base of a tree")
        parent = os.path.realpath(parent)
        _check_ancestors(parent)
        pfd = os.open(parent, _DIR_FLAGS)
        try:
            return cls(parent, pfd).subdir(name)
        finally:
            os.close(pfd)

    def _join(self, name: str) -> str:
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"{name!r} is not a name inside {self.path}")
        return os.path.join(self.path, name)

    def subdir(self, name: str) -> "PrivateTree":
        """Its subdirectory ``name``: made 0700, or verified (never repaired)."""
        path = self._join(name)
        try:
            os.mkdir(name, DIR_MODE, dir_fd=self.fd)
            created = True
        except FileExistsError:
            created = False
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=self.fd)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.EACCES):
                _check_dir(path, os.lstat(name, dir_fd=self.fd))
            raise
        try:
            if created:
                # The umask may have narrowed it; nothing else can have reached it yet
                # (its parent is private, or this is the base and its name was free).
                os.fchmod(fd, DIR_MODE)
            _check_dir(path, os.fstat(fd))
        except BaseException:
            os.close(fd)
            raise
        return PrivateTree(path, fd)

    def _check_own_file(self, name: str, st: os.stat_result, kind: int) -> None:
        """Refuses ``st`` unless it is a file of ours of type ``kind`` with one link."""
        if stat.S_IFMT(st.st_mode) != kind or st.st_uid != os.geteuid() or st.st_nlink != 1:
            raise UnsafeTreeError(
                f"{self._join(name)} exists and is not a file tierbox-ray wrote "
                f"({_describe(st)}, {st.st_nlink} links): refusing to write through it; "
                f"remove it"
            )

    def _clear_own_file(self, name: str, kind: int) -> None:
        """Removes ``name`` when it is a file of ours of type ``kind`` (left by an earlier
        start); refuses anything else there."""
        try:
            st = os.lstat(name, dir_fd=self.fd)
        except FileNotFoundError:
            return
        self._check_own_file(name, st, kind)
        os.unlink(name, dir_fd=self.fd)

    def write_new(self, name: str, data: bytes, mode: int = FILE_MODE) -> str:
        """Writes ``data`` to a new file ``name`` (``O_CREAT | O_EXCL | O_NOFOLLOW``); its
        path. A regular file of ours from an earlier start is replaced."""
        path = self._join(name)
        self._clear_own_file(name, stat.S_IFREG)
        fd = os.open(
            name,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            mode,
            dir_fd=self.fd,
        )
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        return path

    def open_append(self, name: str):
        """A binary file object appending to ``name``, made if missing; an existing one
        must be a regular file of ours with one link (``lstat``, then ``O_NOFOLLOW`` and
        ``fstat`` of what was opened)."""
        try:
            self._check_own_file(name, os.lstat(name, dir_fd=self.fd), stat.S_IFREG)
        except FileNotFoundError:
            pass
        fd = os.open(
            name,
            os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
            FILE_MODE,
            dir_fd=self.fd,
        )
        try:
            self._check_own_file(name, os.fstat(fd), stat.S_IFREG)
        except BaseException:
            os.close(fd)
            raise
        return os.fdopen(fd, "ab")

    def socket_path(self, name: str) -> str:
        """The path for a unix socket ``name`` the daemon will bind: a socket of ours left
        by an earlier daemon is removed; anything else there is refused."""
        path = self._join(name)
        self._clear_own_file(name, stat.S_IFSOCK)
        return path

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
