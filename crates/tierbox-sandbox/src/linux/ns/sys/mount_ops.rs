//! The filesystem ops pid 1 carries out, in the planner's order, and the sub-calls
//! a failed op names.

use super::raw::*;
use super::*;
use crate::linux::sys::{AT_RECURSIVE, MOVE_MOUNT_F_EMPTY_PATH, MountAttr, OPEN_TREE_CLONE};

/// `mount_setattr(2)` attributes (uapi `linux/mount.h`).
pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
/// No setuid/setgid on exec.
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
/// No device access.
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
/// No execution.
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;

/// One compiled filesystem step, executed by pid 1 in order. Built by the supervisor
/// (`child::compile_ops`); every string is a NUL-terminated C string it owns.
#[derive(Debug, Clone, Copy)]
pub struct NsOp<'a> {
    /// What to do.
    pub kind: OpKind,
    /// Source: mount source, symlink target, or bind source (`None` when unused).
    pub src: Option<&'a CStr>,
    /// Destination path (for placeholders: the name inside `src`, the parent directory).
    pub dst: &'a CStr,
    /// Filesystem type for [`OpKind::Mount`].
    pub fstype: Option<&'a CStr>,
    /// Mount data for [`OpKind::Mount`]; the content of an [`OpKind::PlaceholderFile`].
    pub data: Option<&'a CStr>,
    /// `mount(2)` flags for [`OpKind::Mount`].
    pub flags: libc::c_ulong,
    /// `MOUNT_ATTR_*` set by [`OpKind::Setattr`] / [`OpKind::BindTree`].
    pub attr: u64,
    /// Whether [`OpKind::Setattr`] is recursive.
    pub recursive: bool,
    /// Mode for created entries.
    pub mode: u32,
    /// What [`OpKind::BindTree`] must find at `src`.
    pub expect: Expect,
    /// A missing source or destination (`ENOENT`) skips the op instead of failing the
    /// run: a kernel knob of `/proc` this kernel does not have.
    pub if_present: bool,
    /// [`OpKind::BindTree`] by `mount(src, dst, MS_BIND | MS_REC)` and a check that `dst`
    /// is now the very object opened at `src` (same device and inode), instead of
    /// `open_tree` + `move_mount`: for a destination pid 1 made itself in its private
    /// tmpfs, which nothing can turn into a symlink. Cloning a tree with `open_tree`
    /// creates and frees an anonymous mount namespace each time, which costs more than
    /// the bind itself.
    pub plain_bind: bool,
    /// [`OpKind::Mkdir`]: give the new directory to the sandbox's user
    /// ([`SANDBOX_UID`]/[`SANDBOX_GID`]): the private `HOME`.
    pub chown_to_sandbox: bool,
}

/// The kinds of [`NsOp`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// `mount(src, dst, fstype, flags, data)`.
    Mount,
    /// `mkdir(dst, mode)`.
    Mkdir,
    /// `open(dst, O_CREAT | O_EXCL | O_NOFOLLOW | O_WRONLY, mode)`, then `write(data)`
    /// (repeated until all is written) when the op carries content, then `close`.
    MkFile,
    /// `symlink(src, dst)`.
    Symlink,
    /// `openat2(src, O_PATH | O_NOFOLLOW, RESOLVE_NO_SYMLINKS)`, `fstat` kind check,
    /// `open_tree(fd, "", OPEN_TREE_CLONE | AT_EMPTY_PATH | AT_RECURSIVE)`, optionally
    /// `mount_setattr(tree, AT_RECURSIVE, attr)`, `move_mount(tree, "", dst)` (a final
    /// symlink at `dst` is not followed).
    BindTree,
    /// `mount_setattr(dst, [AT_RECURSIVE] | AT_SYMLINK_NOFOLLOW, attr)`.
    Setattr,
    /// `openat2(src, O_PATH | O_DIRECTORY, RESOLVE_NO_SYMLINKS)`, `mkdirat(fd, dst, mode)`.
    PlaceholderDir,
    /// Same parent, `openat(fd, dst, O_CREAT | O_EXCL | O_NOFOLLOW | O_WRONLY, mode)`,
    /// then `write(data)` when the op carries content.
    PlaceholderFile,
    /// `pivot_root(dst, src)`, `chdir("/")`: the first pivot into the staging tmpfs.
    PivotInto,
    /// `chdir(dst)`, `pivot_root(".", ".")`, `umount2(".", MNT_DETACH)`, `chdir("/")`.
    PivotFinal,
    /// `fstatat(src, AT_SYMLINK_NOFOLLOW)`, then `fchownat(dst)` and `fchmodat(dst)` to
    /// its owner and permission bits: the overlay's upper directory takes the workspace
    /// root's, which the overlay's root shows.
    CopyOwner,
    /// `open(dst, O_PATH | O_DIRECTORY)` and send it to the supervisor over
    /// `NsSpec::fs_fd` (`SCM_RIGHTS`): the sandbox's `/tmp` tmpfs, and the overlay's
    /// upper-layer tmpfs, which the supervisor reads (how full they are, the run's
    /// changes) after the namespace is gone. Carried out by pid 1's op loop, which holds
    /// the socket.
    SendFd,
}

/// What a bind source must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Anything (not a bind).
    Any,
    /// A directory.
    Dir,
    /// Not a directory and not a symlink.
    NotDir,
    /// A character device.
    CharDev,
    /// A socket (a granted host socket).
    Socket,
}

/// The sub-call of a mount op that failed, reported as `Report::sub` (its discriminant;
/// 0 is "none").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum SubCall {
    /// `mount(2)`.
    Mount = 1,
    /// `mkdir(2)` / `mkdirat(2)`.
    Mkdir,
    /// `open(2)` / `openat(2)`.
    Open,
    /// `symlink(2)`.
    Symlink,
    /// `openat2(O_PATH, RESOLVE_NO_SYMLINKS)`.
    Openat2,
    /// `fstat(2)`.
    Fstat,
    /// The object found is not of the kind the plan expects.
    Kind,
    /// `open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)`.
    OpenTree,
    /// `mount_setattr(2)`.
    Setattr,
    /// `move_mount(2)`.
    MoveMount,
    /// `pivot_root(2)`.
    Pivot,
    /// `umount2(MNT_DETACH)`.
    Umount,
    /// `chdir(2)`.
    Chdir,
    /// `fchownat(2)` / `fchmodat(2)`.
    Chown,
    /// `sendmsg(SCM_RIGHTS)`.
    SendFd,
    /// `write(2)`.
    Write,
}

/// Every sub-call with what it names, in discriminant order from 1 (a test checks it).
const SUB_CALL_NAMES: [(SubCall, &str); 16] = [
    (SubCall::Mount, "mount"),
    (SubCall::Mkdir, "mkdir"),
    (SubCall::Open, "open"),
    (SubCall::Symlink, "symlink"),
    (SubCall::Openat2, "openat2(O_PATH, RESOLVE_NO_SYMLINKS)"),
    (SubCall::Fstat, "fstat"),
    (
        SubCall::Kind,
        "kind check (source is not what the plan expects)",
    ),
    (
        SubCall::OpenTree,
        "open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)",
    ),
    (SubCall::Setattr, "mount_setattr"),
    (SubCall::MoveMount, "move_mount"),
    (SubCall::Pivot, "pivot_root"),
    (SubCall::Umount, "umount2(MNT_DETACH)"),
    (SubCall::Chdir, "chdir"),
    (SubCall::Chown, "fchownat / fchmodat"),
    (SubCall::SendFd, "sendmsg(SCM_RIGHTS)"),
    (SubCall::Write, "write"),
];

/// The sub-call of a mount op that failed (`Report::sub`), for error messages.
pub fn describe_sub(sub: u32) -> &'static str {
    SUB_CALL_NAMES
        .iter()
        .find(|(call, _)| *call as u32 == sub)
        .map_or("unknown", |(_, what)| what)
}

/// A failed op: the sub-call and its errno.
pub(super) type OpFailure = (SubCall, i32);

/// Carries out one op. `Err((sub, errno))`.
pub(super) fn run_op(op: &NsOp<'_>) -> Result<(), OpFailure> {
    match run_op_once(op) {
        Err((_, libc::ENOENT)) if op.if_present => Ok(()),
        other => other,
    }
}

pub(super) fn run_op_once(op: &NsOp<'_>) -> Result<(), OpFailure> {
    let src = op.src.map_or(std::ptr::null(), CStr::as_ptr);
    let dst = op.dst.as_ptr();
    match op.kind {
        OpKind::Mount => {
            // SAFETY: every pointer is NULL or a NUL-terminated string owned by the spec.
            check(unsafe {
                libc::syscall(
                    libc::SYS_mount,
                    src,
                    dst,
                    op.fstype.map_or(std::ptr::null(), CStr::as_ptr),
                    op.flags,
                    op.data.map_or(std::ptr::null(), CStr::as_ptr),
                )
            })
            .map_err(|e| (SubCall::Mount, e))?;
        }
        OpKind::Mkdir => {
            // SAFETY: NUL-terminated path, integer mode.
            check(unsafe {
                libc::syscall(
                    libc::SYS_mkdirat,
                    libc::AT_FDCWD,
                    dst,
                    op.mode as libc::c_ulong,
                )
            })
            .map_err(|e| (SubCall::Mkdir, e))?;
            if op.chown_to_sandbox {
                // SAFETY: a NUL-terminated path and integer ids; the directory was just
                // made in our private tmpfs.
                check(unsafe {
                    libc::syscall(
                        libc::SYS_fchownat,
                        libc::AT_FDCWD,
                        dst,
                        SANDBOX_UID,
                        SANDBOX_GID,
                        libc::AT_SYMLINK_NOFOLLOW,
                    )
                })
                .map_err(|e| (SubCall::Mkdir, e))?;
            }
        }
        OpKind::MkFile => {
            let fd = open_raw(libc::AT_FDCWD, op.dst, create_flags(), op.mode)
                .map_err(|e| (SubCall::Open, e))?;
            // A file given in /tmp (the trust bundle): written whole, in the tmpfs pid 1
            // just mounted, before any program exists.
            let written = match op.data {
                Some(data) => write_all(fd, data.to_bytes()).map_err(|e| (SubCall::Write, e)),
                None => Ok(()),
            };
            close(fd);
            written?;
        }
        OpKind::Symlink => {
            // SAFETY: two NUL-terminated strings owned by the spec.
            check(unsafe { libc::syscall(libc::SYS_symlinkat, src, libc::AT_FDCWD, dst) })
                .map_err(|e| (SubCall::Symlink, e))?;
        }
        OpKind::BindTree => bind_tree(op)?,
        OpKind::Setattr => {
            let flags =
                libc::AT_SYMLINK_NOFOLLOW as u32 | if op.recursive { AT_RECURSIVE } else { 0 };
            mount_setattr(libc::AT_FDCWD, op.dst, flags, op.attr)
                .map_err(|e| (SubCall::Setattr, e))?;
        }
        OpKind::PlaceholderDir | OpKind::PlaceholderFile => {
            let Some(parent) = op.src else {
                return Err((SubCall::Openat2, libc::EINVAL));
            };
            let pfd = openat2_nosymlinks(parent, libc::O_PATH | libc::O_DIRECTORY)
                .map_err(|e| (SubCall::Openat2, e))?;
            let want_dir = op.kind == OpKind::PlaceholderDir;
            let r = if want_dir {
                // SAFETY: a valid dirfd and a NUL-terminated name.
                check(unsafe {
                    libc::syscall(libc::SYS_mkdirat, pfd, dst, op.mode as libc::c_ulong)
                })
                .map(drop)
                .map_err(|e| (SubCall::Mkdir, e))
            } else {
                open_raw(pfd, op.dst, create_flags(), op.mode)
                    .map_err(|e| (SubCall::Open, e))
                    .and_then(|fd| {
                        // The content git must read in it (a `commondir` of `.`).
                        let written = match op.data {
                            Some(data) => {
                                write_all_once(fd, data.to_bytes()).map_err(|e| (SubCall::Write, e))
                            }
                            None => Ok(()),
                        };
                        close(fd);
                        written
                    })
            };
            // A concurrent run of this supervisor created the same placeholder (both
            // claim it): accept it if it is of the expected kind, never a symlink.
            let r = match r {
                Err((_, libc::EEXIST)) => placeholder_kind_ok(pfd, op.dst, want_dir),
                other => other,
            };
            close(pfd);
            r?;
        }
        OpKind::PivotInto => {
            // SAFETY: two NUL-terminated paths.
            check(unsafe { libc::syscall(libc::SYS_pivot_root, dst, src) })
                .map_err(|e| (SubCall::Pivot, e))?;
            chdir(c"/").map_err(|e| (SubCall::Chdir, e))?;
        }
        OpKind::PivotFinal => {
            chdir(op.dst).map_err(|e| (SubCall::Chdir, e))?;
            // SAFETY: two NUL-terminated paths.
            check(unsafe { libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) })
                .map_err(|e| (SubCall::Pivot, e))?;
            // The old root is now stacked on top of the new one at "/": detach it (and the
            // host tree below it) lazily.
            // SAFETY: NUL-terminated path, integer flags.
            check(unsafe {
                libc::syscall(
                    libc::SYS_umount2,
                    c".".as_ptr(),
                    libc::MNT_DETACH as libc::c_long,
                )
            })
            .map_err(|e| (SubCall::Umount, e))?;
            chdir(c"/").map_err(|e| (SubCall::Chdir, e))?;
        }
        OpKind::CopyOwner => copy_owner(op)?,
        // Needs the spec's socket: pid 1's op loop carries it out (`send_dir_fd`).
        OpKind::SendFd => return Err((SubCall::SendFd, libc::EINVAL)),
    }
    Ok(())
}

/// See [`OpKind::CopyOwner`].
fn copy_owner(op: &NsOp<'_>) -> Result<(), OpFailure> {
    let Some(src) = op.src else {
        return Err((SubCall::Fstat, libc::EINVAL));
    };
    // SAFETY: `stat` is plain data; all-zero is a valid value, filled in by the kernel.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a pointer to `st` on our stack.
    check(unsafe {
        libc::syscall(
            libc::SYS_newfstatat,
            libc::AT_FDCWD,
            src.as_ptr(),
            &mut st as *mut libc::stat,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
    .map_err(|e| (SubCall::Fstat, e))?;
    // SAFETY: a NUL-terminated path and integer ids; the directory is in pid 1's own
    // tmpfs.
    check(unsafe {
        libc::syscall(
            libc::SYS_fchownat,
            libc::AT_FDCWD,
            op.dst.as_ptr(),
            st.st_uid,
            st.st_gid,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
    .map_err(|e| (SubCall::Chown, e))?;
    // SAFETY: a NUL-terminated path and an integer mode.
    check(unsafe {
        libc::syscall(
            libc::SYS_fchmodat,
            libc::AT_FDCWD,
            op.dst.as_ptr(),
            (st.st_mode & 0o7777) as libc::c_ulong,
        )
    })
    .map_err(|e| (SubCall::Chown, e))?;
    Ok(())
}

/// See [`OpKind::SendFd`]: an `O_PATH` fd of `op.dst` sent over `sock`.
pub(super) fn send_dir_fd(op: &NsOp<'_>, sock: RawFd) -> Result<(), OpFailure> {
    let fd = open_raw(
        libc::AT_FDCWD,
        op.dst,
        libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        0,
    )
    .map_err(|e| (SubCall::Open, e))?;
    let sent = super::net::send_fd(sock, fd);
    close(fd);
    sent.map(drop).map_err(|e| (SubCall::SendFd, e))
}

pub(super) fn create_flags() -> c_int {
    libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_WRONLY | libc::O_CLOEXEC
}

/// See [`OpKind::BindTree`].
pub(super) fn bind_tree(op: &NsOp<'_>) -> Result<(), OpFailure> {
    let Some(src) = op.src else {
        return Err((SubCall::Openat2, libc::EINVAL));
    };
    let fd = openat2_nosymlinks(src, libc::O_PATH | libc::O_NOFOLLOW)
        .map_err(|e| (SubCall::Openat2, e))?;
    let result = bind_from_fd(fd, op);
    close(fd);
    result
}

/// Whether the existing entry `name` under `dirfd` is a directory (`want_dir`) or a
/// regular file, without following a symlink.
pub(super) fn placeholder_kind_ok(
    dirfd: RawFd,
    name: &CStr,
    want_dir: bool,
) -> Result<(), OpFailure> {
    // SAFETY: a zeroed `stat` is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid dirfd, a NUL-terminated name and one `stat` to write.
    check(unsafe {
        libc::syscall(
            libc::SYS_newfstatat,
            dirfd,
            name.as_ptr(),
            &mut st as *mut libc::stat,
            libc::AT_SYMLINK_NOFOLLOW as libc::c_long,
        )
    })
    .map_err(|e| (SubCall::Fstat, e))?;
    let fmt = st.st_mode & libc::S_IFMT;
    let ok = if want_dir {
        fmt == libc::S_IFDIR
    } else {
        fmt == libc::S_IFREG
    };
    if ok {
        Ok(())
    } else {
        Err((SubCall::Kind, libc::EEXIST))
    }
}

pub(super) fn bind_from_fd(fd: RawFd, op: &NsOp<'_>) -> Result<(), OpFailure> {
    // SAFETY: a zeroed `stat` is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on an O_PATH fd (allowed since Linux 3.6) writes one `stat`.
    check(unsafe { libc::syscall(libc::SYS_fstat, fd, &mut st as *mut libc::stat) })
        .map_err(|e| (SubCall::Fstat, e))?;
    let fmt = st.st_mode & libc::S_IFMT;
    let ok = match op.expect {
        Expect::Any => true,
        Expect::Dir => fmt == libc::S_IFDIR,
        Expect::NotDir => fmt != libc::S_IFDIR && fmt != libc::S_IFLNK,
        Expect::CharDev => fmt == libc::S_IFCHR,
        Expect::Socket => fmt == libc::S_IFSOCK,
    };
    if !ok {
        return Err((SubCall::Kind, libc::ENOTDIR));
    }
    if op.plain_bind {
        return plain_bind(op, &st);
    }
    // SAFETY: open_tree with a valid fd, an empty NUL-terminated path and integer flags;
    // returns a new fd for a detached copy of the mount tree at `fd`.
    let tree = check(unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            fd,
            c"".as_ptr(),
            (OPEN_TREE_CLONE | libc::O_CLOEXEC as u32 | libc::AT_EMPTY_PATH as u32 | AT_RECURSIVE)
                as libc::c_ulong,
        )
    })
    .map_err(|e| (SubCall::OpenTree, e))? as RawFd;
    let result = (|| {
        if op.attr != 0 {
            mount_setattr(
                tree,
                c"",
                libc::AT_EMPTY_PATH as u32 | AT_RECURSIVE,
                op.attr,
            )
            .map_err(|e| (SubCall::Setattr, e))?;
        }
        // No MOVE_MOUNT_T_SYMLINKS: a symlink at the destination is covered, not followed.
        // SAFETY: valid tree fd, empty source path, NUL-terminated destination.
        check(unsafe {
            libc::syscall(
                libc::SYS_move_mount,
                tree,
                c"".as_ptr(),
                libc::AT_FDCWD,
                op.dst.as_ptr(),
                MOVE_MOUNT_F_EMPTY_PATH as libc::c_ulong,
            )
        })
        .map(drop)
        .map_err(|e| (SubCall::MoveMount, e))
    })();
    close(tree);
    result
}

/// [`NsOp::plain_bind`]: `src` is bound onto `dst` with `mount(2)`, then `dst` must be the
/// object `st` (the `fstat` of the `O_PATH` fd opened at `src` without following
/// symlinks) — else the source changed between the check and the bind, and the run fails.
pub(super) fn plain_bind(op: &NsOp<'_>, st: &libc::stat) -> Result<(), OpFailure> {
    let Some(src) = op.src else {
        return Err((SubCall::Mount, libc::EINVAL));
    };
    // SAFETY: NUL-terminated paths owned by the spec, NULL filesystem type and data.
    check(unsafe {
        libc::syscall(
            libc::SYS_mount,
            src.as_ptr(),
            op.dst.as_ptr(),
            std::ptr::null::<c_char>(),
            (libc::MS_BIND | libc::MS_REC) as libc::c_ulong,
            std::ptr::null::<c_char>(),
        )
    })
    .map_err(|e| (SubCall::Mount, e))?;
    // SAFETY: a zeroed `stat` is a valid out-parameter.
    let mut now: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and one `stat` to write.
    check(unsafe {
        libc::syscall(
            libc::SYS_newfstatat,
            libc::AT_FDCWD,
            op.dst.as_ptr(),
            &mut now as *mut libc::stat,
            libc::AT_SYMLINK_NOFOLLOW as libc::c_long,
        )
    })
    .map_err(|e| (SubCall::Fstat, e))?;
    if now.st_dev != st.st_dev || now.st_ino != st.st_ino {
        return Err((SubCall::Kind, libc::ESTALE));
    }
    if op.attr != 0 {
        mount_setattr(
            libc::AT_FDCWD,
            op.dst,
            AT_RECURSIVE | libc::AT_SYMLINK_NOFOLLOW as u32,
            op.attr,
        )
        .map_err(|e| (SubCall::Setattr, e))?;
    }
    Ok(())
}

/// `openat2(AT_FDCWD, path, flags | O_CLOEXEC, RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`.
pub(super) fn openat2_nosymlinks(path: &CStr, flags: c_int) -> Result<RawFd, i32> {
    openat2_raw(
        libc::AT_FDCWD,
        path,
        flags,
        libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
    )
}

/// `openat2(dirfd, path, flags | O_CLOEXEC, resolve)`. Raw: no allocation.
pub(crate) fn openat2_raw(
    dirfd: RawFd,
    path: &CStr,
    flags: c_int,
    resolve: u64,
) -> Result<RawFd, i32> {
    // SAFETY: open_how is plain integers; all-zero is its documented default.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.resolve = resolve;
    // SAFETY: a NUL-terminated path and a fully initialised open_how of the size passed.
    check(unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dirfd,
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    })
    .map(|fd| fd as RawFd)
}

pub(crate) fn mount_setattr(
    dirfd: RawFd,
    path: &CStr,
    flags: u32,
    attr_set: u64,
) -> Result<(), i32> {
    let attr = MountAttr {
        attr_set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: a NUL-terminated path and a `mount_attr` on our stack of the size passed.
    check(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            path.as_ptr(),
            flags as libc::c_ulong,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    })
    .map(drop)
}

/// `move_mount(tree, "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH)`: a detached tree the
/// supervisor made (an idmapped mount) into place.
pub(super) fn move_tree(tree: RawFd, dst: &CStr) -> Result<(), OpFailure> {
    // SAFETY: a tree fd inherited from the supervisor, an empty source path and a
    // NUL-terminated destination.
    check(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree,
            c"".as_ptr(),
            libc::AT_FDCWD,
            dst.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH as libc::c_ulong,
        )
    })
    .map(drop)
    .map_err(|e| (SubCall::MoveMount, e))
}

#[cfg(test)]
mod sub_call_tests {
    use super::*;

    #[test]
    fn the_sub_call_table_is_in_discriminant_order() {
        for (i, (call, what)) in SUB_CALL_NAMES.iter().enumerate() {
            assert_eq!(*call as usize, i + 1, "{call:?}");
            assert_eq!(describe_sub(*call as u32), *what);
        }
        assert_eq!(describe_sub(0), "unknown");
    }
}
