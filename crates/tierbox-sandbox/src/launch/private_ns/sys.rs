//! A run's private mount namespace, made with raw system calls only: by a cloned child
//! before it restricts itself (its step 7, `launch::prefix`), or by a warm slot's launcher
//! thread before it arms itself (Tier B's `RawNs::make`). No allocation, no locks: the
//! same discipline as the rest of the child's setup (`launch::sys`).

use std::ffi::{c_char, c_int};

use crate::launch::sys::{mounts_private, move_tree_to, setns, unshare_mounts_private};
use crate::linux::ns::sys as nsys;
use crate::linux::step::Step;
use crate::linux::sys as lsys;
use crate::linux::sys::check;

/// What an object a namespace step opens must be: `(st_dev, st_ino)` and its type
/// (`st_mode & S_IFMT`), as the supervisor found it when it planned the step.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub(crate) struct FileId {
    pub dev: u64,
    pub ino: u64,
    pub fmt: u32,
}

impl FileId {
    /// Of `st`.
    fn of(st: &libc::stat) -> Self {
        Self {
            dev: st.st_dev,
            ino: st.st_ino,
            fmt: st.st_mode & libc::S_IFMT,
        }
    }

    /// Of `meta` (an `lstat`).
    pub(crate) fn of_metadata(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            fmt: meta.mode() & libc::S_IFMT,
        }
    }
}

/// One tree a Tier B run's mount namespace gets before its protected paths: cloned from
/// `source` (absolute, canonical, opened without following any symlink and checked to
/// be `expect`), `attr` set on the whole copy, then — once every tree is cloned, since
/// the first one hides the sources beneath `/tmp` — moved onto `dest`.
#[repr(C)]
pub(crate) struct NsTree {
    pub source: *const c_char,
    pub expect: FileId,
    pub attr: u64,
    pub dest: *const c_char,
}

/// One protected path of a Tier B run (`tier_b::protect`): `rel` beneath `base` (a
/// writable root, absolute and canonical, checked to be `base_id`), opened with
/// `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` and checked to be `expect`, then a clone of
/// it — or of `/dev/null` when `cover` (a symlink covered) — with `attr` moved onto that
/// very object (`MOVE_MOUNT_T_EMPTY_PATH`): no path is looked up twice.
#[repr(C)]
pub(crate) struct NsProtect {
    pub base: *const c_char,
    pub base_id: FileId,
    pub rel: *const c_char,
    pub expect: FileId,
    pub cover: bool,
    pub attr: u64,
}

/// A Tier B run's mount namespace (`tier_b::mounts`, `tier_b::protect`), made by the
/// child before it restricts itself, or by a warm slot's launcher thread before it arms
/// itself (never with a user namespace: `unshare(CLONE_NEWUSER)` refuses a thread).
/// Every pointer stays valid while the namespace is made.
#[repr(C)]
pub(crate) struct PrivateNs {
    /// `-1`, or a user namespace mapping only the supervisor's own uid and gid to
    /// themselves (an unprivileged supervisor's, `linux::sys::own_ids_user_namespace`),
    /// joined before the mount namespace is made so that the run owns it; `-1`: a mount
    /// namespace only (a root supervisor's, which may mount).
    pub userns_fd: c_int,
    pub trees: *const NsTree,
    pub n_trees: usize,
    /// `n_trees` slots for the cloned trees (written by whoever makes the namespace).
    pub tree_fds: *mut c_int,
    pub protect: *const NsProtect,
    pub n_protect: usize,
    /// Host paths to cover after the protected paths ([`hide_one`]): absolute, each a
    /// NUL-terminated string.
    pub hide: *const *const c_char,
    pub n_hide: usize,
    /// What `/dev/null` (the source of a cover) must be.
    pub dev_null: FileId,
}

/// `openat2(dirfd, path, O_PATH | O_NOFOLLOW, resolve)` and an `fstat` that must find
/// `expect`: the object planned, not whatever was swapped in (`ESTALE`).
fn open_expected(
    dirfd: c_int,
    path: &std::ffi::CStr,
    resolve: u64,
    expect: FileId,
) -> Result<c_int, i32> {
    let fd = nsys::openat2_raw(dirfd, path, libc::O_PATH | libc::O_NOFOLLOW, resolve)?;
    match fstat(fd) {
        Ok(st) if FileId::of(&st) == expect => Ok(fd),
        got => {
            nsys::close(fd);
            Err(got.err().unwrap_or(libc::ESTALE))
        }
    }
}

/// `fstat(fd)`.
fn fstat(fd: c_int) -> Result<libc::stat, i32> {
    // SAFETY: a zeroed `stat` is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat of an fd the caller holds writes one `stat`.
    check(unsafe { libc::syscall(libc::SYS_fstat, fd, &mut st as *mut libc::stat) })?;
    Ok(st)
}

/// A detached clone of `/dev/null` (checked to be `dev_null`) with `attr`: the source of
/// a cover.
fn dev_null_tree(dev_null: FileId, attr: u64) -> Result<c_int, i32> {
    let nosymlinks = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    let null = open_expected(libc::AT_FDCWD, c"/dev/null", nosymlinks, dev_null)?;
    let tree = clone_tree(null, attr);
    nsys::close(null);
    tree
}

/// `open_tree(fd, "", OPEN_TREE_CLONE | AT_EMPTY_PATH | AT_RECURSIVE)` with `attr` set on
/// the whole copy: a detached clone of what `fd` names, in the caller's namespace.
fn clone_tree(fd: c_int, attr: u64) -> Result<c_int, i32> {
    // SAFETY: open_tree with a valid fd, an empty NUL-terminated path and integer flags;
    // it returns a new fd for a detached copy of the mount tree at `fd`.
    let tree = check(unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            fd,
            c"".as_ptr(),
            (lsys::OPEN_TREE_CLONE
                | libc::O_CLOEXEC as u32
                | libc::AT_EMPTY_PATH as u32
                | lsys::AT_RECURSIVE) as libc::c_ulong,
        )
    })? as c_int;
    if attr != 0
        && let Err(e) = nsys::mount_setattr(
            tree,
            c"",
            libc::AT_EMPTY_PATH as u32 | lsys::AT_RECURSIVE,
            attr,
        )
    {
        nsys::close(tree);
        return Err(e);
    }
    Ok(tree)
}

/// Makes `ns` (see [`PrivateNs`]), in order: the user namespace when it has one
/// ([`join_userns`]), a mount namespace with every mount private, then its trees and
/// protected paths ([`private_ns_mounts`]). Raw system calls only, no allocation: a
/// launcher thread's before it arms itself (a cloned child runs these as steps of its
/// own, `launch::prefix`).
pub(crate) fn private_ns(ns: &PrivateNs) -> Result<(), (Step, i32)> {
    use Step as S;
    let at = |s: Step| move |e: i32| (s, e);
    if ns.userns_fd >= 0 {
        join_userns(ns.userns_fd).map_err(at(S::UserNamespace))?;
    }
    unshare_mounts_private(libc::CLONE_NEWNS).map_err(at(S::HelperMounts))?;
    mounts_private().map_err(at(S::HelperMounts))?;
    private_ns_mounts(ns)
}

/// `setns(fd, CLONE_NEWUSER)`: joins the run's user namespace (an fd the caller keeps
/// open while the namespace is made).
pub(crate) fn join_userns(fd: c_int) -> Result<(), i32> {
    setns(fd, libc::CLONE_NEWUSER)
}

/// The mounts of `ns`, in the caller's new mount namespace, in order: every tree cloned,
/// every tree moved, then each protected path bound or covered.
pub(crate) fn private_ns_mounts(ns: &PrivateNs) -> Result<(), (Step, i32)> {
    use Step as S;
    let at = |s: Step| move |e: i32| (s, e);
    // SAFETY: the caller keeps `n_trees` trees and as many fd slots, and `n_protect`
    // protected paths, alive at these pointers (null only with 0 entries).
    let (trees, fds, protect) = unsafe {
        (
            slice_or_empty(ns.trees, ns.n_trees),
            if ns.tree_fds.is_null() {
                &mut [][..]
            } else {
                std::slice::from_raw_parts_mut(ns.tree_fds, ns.n_trees)
            },
            slice_or_empty(ns.protect, ns.n_protect),
        )
    };
    if fds.len() != trees.len() {
        return Err((S::HelperMounts, libc::EINVAL));
    }
    let nosymlinks = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    let mut cloned = 0;
    let mut result: Result<c_int, i32> = Ok(-1);
    // Every tree first: the first one moved (the private tmp over /tmp) hides the
    // sources of the grants beneath /tmp.
    for (t, slot) in trees.iter().zip(fds.iter_mut()) {
        // SAFETY: a NUL-terminated string the caller owns.
        let source = unsafe { std::ffi::CStr::from_ptr(t.source) };
        result = open_expected(libc::AT_FDCWD, source, nosymlinks, t.expect).and_then(|fd| {
            let tree = clone_tree(fd, t.attr);
            nsys::close(fd);
            tree
        });
        match result {
            Ok(tree) => {
                *slot = tree;
                cloned += 1;
            }
            Err(_) => break,
        }
    }
    let mut moved = Ok(());
    for (t, fd) in trees.iter().zip(fds.iter()).take(cloned) {
        if result.is_ok() && moved.is_ok() {
            moved = move_tree_to(*fd, t.dest);
        }
        nsys::close(*fd);
    }
    result.map(drop).and(moved).map_err(at(S::HelperMounts))?;
    for p in protect {
        protect_one(p, ns.dev_null).map_err(at(S::ProtectedPaths))?;
    }
    // SAFETY: the caller keeps `n_hide` NUL-terminated strings alive at this pointer.
    let hide = unsafe { slice_or_empty(ns.hide, ns.n_hide) };
    for path in hide {
        // SAFETY: a NUL-terminated string the caller owns.
        let path = unsafe { std::ffi::CStr::from_ptr(*path) };
        hide_one(path, ns.dev_null).map_err(at(S::HiddenPaths))?;
    }
    Ok(())
}

/// What a cover is mounted with: nothing can be written, executed, or opened as a device
/// through it.
const COVER_ATTR: u64 = nsys::MOUNT_ATTR_RDONLY
    | nsys::MOUNT_ATTR_NOSUID
    | nsys::MOUNT_ATTR_NODEV
    | nsys::MOUNT_ATTR_NOEXEC;

/// Covers the host path `path` (absolute; beneath a system root, which only root can
/// change) in the caller's new mount namespace: a directory with an empty read-only
/// tmpfs made for it (`fsopen`/`fsmount`: it has no path anywhere, so nothing can put a
/// file in it), anything else with a read-only `nodev` clone of `/dev/null` (it cannot
/// even be opened). The cover is moved onto the very object opened — without following
/// any symlink on the way, a final one included (a symlink is covered itself). A path
/// that is gone has nothing to hide and is skipped; any other failure fails the launch.
fn hide_one(path: &std::ffi::CStr, dev_null: FileId) -> Result<(), i32> {
    let nosymlinks = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    let target = match nsys::openat2_raw(
        libc::AT_FDCWD,
        path,
        libc::O_PATH | libc::O_NOFOLLOW,
        nosymlinks,
    ) {
        Ok(fd) => fd,
        Err(libc::ENOENT) => return Ok(()),
        Err(e) => return Err(e),
    };
    let tree = fstat(target).and_then(|st| {
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            empty_tmpfs()
        } else {
            dev_null_tree(dev_null, COVER_ATTR)
        }
    });
    let moved = tree.and_then(|tree| {
        let r = move_onto(tree, target);
        nsys::close(tree);
        r
    });
    nsys::close(target);
    moved
}

/// A detached, empty tmpfs whose root has mode 0 (listing it fails with `EACCES` for a
/// run without capabilities, its owner included, as landlock's refusal did), mounted with
/// [`COVER_ATTR`]: `fsopen("tmpfs")`, `fsconfig` (`mode=0`, then `FSCONFIG_CMD_CREATE`),
/// `fsmount`.
fn empty_tmpfs() -> Result<c_int, i32> {
    // SAFETY: fsopen with a NUL-terminated filesystem name and integer flags; it returns
    // a new fd for a filesystem context.
    let ctx = check(unsafe { libc::syscall(libc::SYS_fsopen, c"tmpfs".as_ptr(), FSOPEN_CLOEXEC) })?
        as c_int;
    // SAFETY: fsconfig on the context we own with a NUL-terminated key and value.
    let mode = check(unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            ctx,
            FSCONFIG_SET_STRING,
            c"mode".as_ptr(),
            c"0".as_ptr(),
            0,
        )
    });
    let created = mode.and_then(|_| {
        // SAFETY: fsconfig on the context we own, with null key and value for CMD_CREATE.
        check(unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                ctx,
                FSCONFIG_CMD_CREATE,
                std::ptr::null::<c_char>(),
                std::ptr::null::<c_char>(),
                0,
            )
        })
    });
    let mounted = created.and_then(|_| {
        // SAFETY: fsmount of the created context with integer flags and attributes; it
        // returns a new fd for the detached mount.
        check(unsafe {
            libc::syscall(
                libc::SYS_fsmount,
                ctx,
                FSMOUNT_CLOEXEC,
                COVER_ATTR as libc::c_ulong,
            )
        })
        .map(|fd| fd as c_int)
    });
    nsys::close(ctx);
    mounted
}

/// `move_mount(tree, "", onto, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH)`.
fn move_onto(tree: c_int, onto: c_int) -> Result<(), i32> {
    // SAFETY: two fds this process holds, empty NUL-terminated paths with
    // MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH: the tree onto the very object
    // `onto` names (a symlink itself, never its target).
    check(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree as libc::c_ulong,
            c"".as_ptr(),
            onto as libc::c_ulong,
            c"".as_ptr(),
            libc::c_ulong::from(lsys::MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH),
        )
    })
    .map(drop)
}

/// `fsopen(2)` flag.
const FSOPEN_CLOEXEC: libc::c_uint = 1;
/// `fsmount(2)` flag.
const FSMOUNT_CLOEXEC: libc::c_uint = 1;
/// `fsconfig(2)` command: set a string parameter.
const FSCONFIG_SET_STRING: libc::c_uint = 1;
/// `fsconfig(2)` command: create the superblock.
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;

/// `slice::from_raw_parts`, or an empty slice for a null pointer.
///
/// # Safety
/// A non-null `ptr` must point at `len` live values for the returned lifetime.
unsafe fn slice_or_empty<'a, T>(ptr: *const T, len: usize) -> &'a [T] {
    if ptr.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }
}

/// One [`NsProtect`]: the base, the entry beneath it, the tree, the move onto the entry.
fn protect_one(p: &NsProtect, dev_null: FileId) -> Result<(), i32> {
    let nosymlinks = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: NUL-terminated strings the caller owns.
    let (base, rel) = unsafe {
        (
            std::ffi::CStr::from_ptr(p.base),
            std::ffi::CStr::from_ptr(p.rel),
        )
    };
    let base_fd = open_expected(libc::AT_FDCWD, base, nosymlinks, p.base_id)?;
    let entry = open_expected(base_fd, rel, nosymlinks | libc::RESOLVE_BENEATH, p.expect);
    nsys::close(base_fd);
    let entry = entry?;
    let tree = if p.cover {
        dev_null_tree(dev_null, p.attr)
    } else {
        clone_tree(entry, p.attr)
    };
    let moved = tree.and_then(|tree| {
        let r = move_onto(tree, entry);
        nsys::close(tree);
        r
    });
    nsys::close(entry);
    moved
}

/// `move_mount(2)` flag: the destination is the fd itself (empty path).
const MOVE_MOUNT_T_EMPTY_PATH: u32 = 0x40;
