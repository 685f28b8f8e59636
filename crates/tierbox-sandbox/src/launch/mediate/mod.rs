//! The supervisor's side of a run's seccomp hand-off: chmod mediation, and the argument
//! rules' refusals recorded with their arguments.
//!
//! **Refusals.** With [`crate::linux::seccomp::SeccompSpec::notify_refusals`] the filter
//! hands a call its argument rules refuse (`socket` of a denied family, a denied `ioctl`
//! request, `clone`/`unshare` with namespace flags, …) to the supervisor instead of
//! refusing it itself, because the kernel's audit record of a refusal carries no
//! arguments. [`SeccompMediator::refusing`] answers every such call with the errno the
//! enforcing filter returns for it ([`crate::linux::seccomp::SeccompProgram::evaluate`]
//! of the spec's [`crate::linux::seccomp::SeccompSpec::enforcing`] program) — never by
//! letting it run — and records it with its arguments in a [`RefusalLog`]. A call that
//! program would allow (a builder bug; tested never to happen) gets `EPERM`. A call it
//! answers with errno 0 (a uid-0 run's `chown` to root's own ids,
//! [`crate::linux::seccomp::SeccompSpec::chown_noop_gid`]) succeeds without running and
//! is no refusal.
//!
//! **chmod**, for runs that keep uid 0.
//!
//! Landlock does not mediate mode changes, and a process may `chmod` any file it owns
//! wherever it can name it. A Tier B child that keeps uid 0 (root supervisor, root-owned
//! workspace) owns every root-owned file on the host: left alone, it could `chmod u+s` a
//! root binary or make `/etc/shadow` world-readable; a child running as a user could make
//! that user's `~/.ssh` world-writable. Denying the `chmod` family outright breaks
//! ordinary work (`git init` chmods its lock files), so the filter hands those calls to the
//! supervisor (`SECCOMP_RET_USER_NOTIF`), which performs them itself, beneath the run's
//! writable grants only (the workspace, declared writable paths, its private temporary
//! directory), under these rules:
//!
//! - the target is resolved with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` from
//!   an fd of the grant it names (the deepest one): a path that leaves the workspace by `..`, an absolute or
//!   escaping symlink, or a `/proc` magic link fails (`EPERM`) — there is no window
//!   between check and use, because the change is made through the fd that was resolved;
//! - the child must own the file (it has no `CAP_FOWNER`), as the kernel would require;
//! - a non-directory with more than one hard link is refused: its other names may lie
//!   outside the workspace;
//! - a mode with setuid or setgid is refused (`EPERM`, recorded as a refusal): nothing a
//!   run leaves behind may be setuid or setgid (the filter refuses the same modes in
//!   every tier, [`crate::linux::seccomp::LEAVE_BEHIND`]);
//! - `fchmod(fd)` is allowed only when the file the child's fd refers to is the same inode
//!   that resolves beneath the workspace under that name; so is a `chmod` of the caller's
//!   own fd link, `/proc/self/fd/N` (`/proc/thread-self/fd/N`, `/proc/<its pid>/fd/N`),
//!   which is how glibc performs `fchmodat(AT_SYMLINK_NOFOLLOW)` without `fchmodat2`
//!   (tar restoring a directory's mode): the fd is read from the caller's fd table, by
//!   number, never the link resolved by name, and a symlink it refers to is not followed
//!   (`EOPNOTSUPP`, as the kernel answers);
//! - everything read from the child (the path, its cwd, its fds) is used only after
//!   `SECCOMP_IOCTL_NOTIF_ID_VALID` confirms the call is still pending.
//!
//! Anything else gets `EPERM`. `chown` and the xattr family are decided in the filter
//! (for a run that keeps uid 0: `chown` to root's own ids a no-op, any other `EPERM`;
//! attribute writes `EOPNOTSUPP`; see `SeccompSpec::chown_noop_gid` and `DENY_TABLE`).
//! A mediator built without [`SeccompMediator::mediating_chmod`] performs no change: a
//! `chmod` handed to it is a refusal of the filter's (a setuid mode, in Tier C), answered
//! as every other refusal.

#[allow(unsafe_code)]
pub(crate) mod sys;

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::linux::audit::{Refusal, RefusalLayer, RefusalList};
use crate::linux::seccomp::{SETID_BITS, SeccompProgram, describe_refusal};

/// Longest path read from the child, in bytes (Linux `PATH_MAX`).
pub const MAX_MEDIATED_PATH_BYTES: usize = 4096;

/// `fchmodat2` (Linux 6.6), one number on every architecture.
const SYS_FCHMODAT2: i64 = 452;

/// Mode bits a chmod may set (permissions, setuid, setgid, sticky).
const MODE_MASK: u32 = 0o7777;

/// The refusals a run's mediator answered, with their arguments: shared by the mediator
/// and the supervisor, which takes them once the run is over. Deduplicated by call and
/// argument; at most [`crate::linux::audit::MAX_REFUSALS_PER_RUN`] distinct ones, the
/// rest counted.
///
/// ```
/// use tierbox_sandbox::launch::mediate::RefusalLog;
///
/// let log = RefusalLog::default();
/// let (refusals, dropped) = log.take();
/// assert!(refusals.is_empty() && dropped == 0);
/// ```
#[derive(Debug, Clone, Default)]
pub struct RefusalLog(Arc<Mutex<RefusalList>>);

impl RefusalLog {
    fn add(&self, operation: &str, target: String, at: Instant) {
        if let Ok(mut log) = self.0.lock() {
            log.add(RefusalLayer::Seccomp, operation.to_owned(), target, at);
        }
    }

    /// The refusals recorded so far, in arrival order, and how many more were past the
    /// bound; the log is left empty.
    pub fn take(&self) -> (Vec<Refusal>, u64) {
        self.0
            .lock()
            .map(|mut log| {
                let RefusalList { refusals, dropped } = std::mem::take(&mut *log);
                (refusals, dropped)
            })
            .unwrap_or_default()
    }
}

/// Serves the seccomp hand-off of one run: its chmod calls, and (with
/// [`SeccompMediator::refusing`]) its argument rules' refusals.
#[derive(Debug)]
pub struct SeccompMediator {
    listener: OwnedFd,
    /// `listener` is the unix socket the listener will arrive on ([`Self::pending`]).
    pending: bool,
    roots: Vec<(PathBuf, OwnedFd)>,
    uid: u32,
    refusals: Option<(Arc<SeccompProgram>, RefusalLog)>,
    /// `chmod` calls are changes to perform ([`Self::mediating_chmod`]), not refusals.
    chmod: bool,
}

enum Target {
    /// A path at address `addr` in the child's memory, relative to a directory of the child.
    Path {
        dir: BaseDir,
        addr: u64,
        nofollow: bool,
    },
    /// An fd of the child.
    Fd(i32),
}

enum BaseDir {
    Cwd,
    Fd(i32),
}

impl SeccompMediator {
    /// A mediator for the listener fd of a run whose child runs as `uid` in `workspace`
    /// (canonical).
    pub fn new(listener: OwnedFd, workspace: &Path, uid: u32) -> std::io::Result<Self> {
        Self {
            listener,
            pending: false,
            roots: Vec::new(),
            uid,
            refusals: None,
            chmod: false,
        }
        .also_beneath(workspace)
    }

    /// Performs the `chmod` calls the filter hands over (its spec's `mediate_chmod`)
    /// beneath the roots, under the rules of the module docs. Without this every handed
    /// call is answered as a refusal.
    pub fn mediating_chmod(mut self) -> Self {
        self.chmod = true;
        self
    }

    /// The fd given to [`Self::new`] is not the listener but the unix socket it will
    /// arrive on (`SCM_RIGHTS`), once the sandbox has stacked the filter: [`Self::serve`]
    /// receives it first. If the socket closes without one, nothing is served (the
    /// sandbox stopped its program before it ran).
    pub fn pending(mut self) -> Self {
        self.pending = true;
        self
    }

    /// Also answers the argument rules' refusals handed off by a filter of a spec with
    /// `notify_refusals`: each with the verdict of `enforcing` (that spec's
    /// `SeccompSpec::enforcing` program), recorded in `log`.
    pub fn refusing(mut self, enforcing: Arc<SeccompProgram>, log: RefusalLog) -> Self {
        self.refusals = Some((enforcing, log));
        self
    }

    /// Also performs changes beneath `root`: the run's other writable grants
    /// (declared writable paths, its private temporary directory). A grant that is a file
    /// (a writable grant carved around a denied path is a list of entries) covers that
    /// file alone.
    pub fn also_beneath(self, root: &Path) -> std::io::Result<Self> {
        // Paths read from the child's /proc entries are canonical; so must the roots be.
        let root = std::fs::canonicalize(root)?;
        self.also_beneath_as(&root.clone(), &root)
    }

    /// Also performs changes beneath `host`, which the run names `view` (canonical as the
    /// run resolves it): a Tier B run's private `/tmp` and `/dev/shm`, which are
    /// directories of its private tmp ([`crate::running::SeccompHandOff::views`]). The
    /// deepest root a path lies under decides, so a grant bound back beneath `/tmp` at its
    /// own path is still resolved from that grant.
    pub fn also_beneath_as(mut self, view: &Path, host: &Path) -> std::io::Result<Self> {
        let fd = open_root(host)?;
        self.roots.push((view.to_path_buf(), fd));
        Ok(self)
    }

    /// [`Self::also_beneath`], or `self` unchanged when `root` does not exist (any more).
    /// A writable grant carved around a denied path inside it is the list of the entries
    /// it had when the plan was made; in a shared directory (`/tmp`) another process may
    /// have removed one since, and a run can change nothing beneath an entry that is gone
    /// (its landlock rules skip a missing path the same way).
    pub fn also_beneath_if_present(mut self, root: &Path) -> std::io::Result<Self> {
        let canonical = match std::fs::canonicalize(root) {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(self),
            Err(e) => return Err(e),
        };
        match open_canonical(&canonical) {
            Ok(fd) => {
                self.roots.push((canonical, fd));
                Ok(self)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(self),
            Err(e) => Err(e),
        }
    }

    /// Answers notifications until every task using the filter is gone (or the future is
    /// dropped, which closes the listener: pending and later calls then fail with
    /// `ENOSYS`).
    pub async fn serve(self) {
        let Self {
            listener,
            pending,
            roots,
            uid,
            refusals,
            chmod,
        } = self;
        let listener = if pending {
            match receive_listener(listener).await {
                Some(l) => l,
                None => return,
            }
        } else {
            listener
        };
        let Ok(afd) = super::exit::register_readable(listener) else {
            return;
        };
        let rules = Rules { roots, uid };
        loop {
            let Ok(mut guard) = afd.readable().await else {
                return;
            };
            match sys::notif_poll(afd.get_ref()) {
                Ok((true, _)) => {}
                Ok((false, true)) | Err(_) => return,
                Ok((false, false)) => {
                    guard.clear_ready();
                    continue;
                }
            }
            let Ok(n) = sys::notif_recv(afd.get_ref()) else {
                // ENOENT: the caller died between poll and receive.
                continue;
            };
            let call = decode(i64::from(n.data.nr), &n.data.args)
                .filter(|(_, mode)| chmod && mode & SETID_BITS == 0);
            let errno = match call {
                Some(call) => match rules.handle(afd.get_ref(), &n, call) {
                    Ok(()) => 0,
                    Err(Verdict::Errno(e)) => e,
                    Err(Verdict::Gone) => continue,
                },
                // A refusal of the filter's, or a setuid/setgid mode, which the enforcing
                // filter refuses too (`LEAVE_BEHIND`).
                None => refuse(refusals.as_ref(), &n),
            };
            let _ = sys::notif_send(afd.get_ref(), n.id, 0, errno);
        }
    }
}

/// The listener sent over `sock`, once it arrives; `None` when the socket closes first.
async fn receive_listener(sock: OwnedFd) -> Option<OwnedFd> {
    let sock = super::exit::register_readable(sock).ok()?;
    loop {
        let mut guard = sock.readable().await.ok()?;
        match super::pipes::recv_fd(sock.get_ref()) {
            Ok(listener) => return Some(listener),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => guard.clear_ready(),
            Err(_) => return None,
        }
    }
}

/// The errno for a handed-off call that is not a chmod: the enforcing program's, recorded
/// with the call's arguments; `EPERM` for anything else.
fn refuse(refusals: Option<&(Arc<SeccompProgram>, RefusalLog)>, n: &libc::seccomp_notif) -> i32 {
    let Some((enforcing, log)) = refusals else {
        return libc::EPERM;
    };
    if Some(n.data.arch) != crate::linux::seccomp::NATIVE_AUDIT_ARCH {
        return libc::EPERM;
    }
    let nr = n.data.nr as u32;
    let errno = match enforcing.evaluate(nr, &n.data.args) {
        Some(ret) if ret & libc::SECCOMP_RET_ACTION_FULL == libc::SECCOMP_RET_ERRNO => {
            (ret & libc::SECCOMP_RET_DATA) as i32
        }
        _ => libc::EPERM,
    };
    // Errno 0: a call the enforcing filter answers as done without running it (a uid-0
    // run's chown to root's own ids), not a refusal.
    if errno != 0
        && let Some((name, target)) = describe_refusal(nr, &n.data.args)
    {
        log.add(name, target, Instant::now());
    }
    errno
}

enum Verdict {
    Errno(i32),
    /// The calling task is gone; nothing to answer.
    Gone,
}

struct Rules {
    roots: Vec<(PathBuf, OwnedFd)>,
    uid: u32,
}

impl Rules {
    fn handle(
        &self,
        listener: &OwnedFd,
        n: &libc::seccomp_notif,
        (target, mode): (Target, u32),
    ) -> Result<(), Verdict> {
        let pid = n.pid as libc::pid_t;
        // Gather everything from the child, then confirm the call is still pending before
        // trusting any of it.
        let gathered = self.gather(pid, target);
        if !sys::notif_id_valid(listener, n.id) {
            return Err(Verdict::Gone);
        }
        let (absolute, expected, nofollow) = gathered.map_err(Verdict::Errno)?;
        let (root_fd, rel) = self
            .relative(&absolute)
            .ok_or(Verdict::Errno(libc::EPERM))?;
        let rel =
            CString::new(rel.as_os_str().as_bytes()).map_err(|_| Verdict::Errno(libc::EINVAL))?;
        let fd = if rel.as_bytes() == b"." {
            // The grant itself (a file grant is only ever reached this way).
            root_fd.try_clone()
        } else {
            sys::openat2_beneath(root_fd, &rel, nofollow)
        }
        .map_err(|e| {
            Verdict::Errno(match e.raw_os_error() {
                Some(libc::ENOENT) => libc::ENOENT,
                Some(libc::ENOTDIR) => libc::ENOTDIR,
                _ => libc::EPERM,
            })
        })?;
        let meta = std::fs::metadata(format!("/proc/self/fd/{}", raw(&fd)))
            .map_err(|_| Verdict::Errno(libc::EPERM))?;
        if let Some((dev, ino)) = expected
            && (meta.dev(), meta.ino()) != (dev, ino)
        {
            return Err(Verdict::Errno(libc::EPERM));
        }
        if nofollow && meta.file_type().is_symlink() {
            return Err(Verdict::Errno(libc::EOPNOTSUPP));
        }
        if meta.uid() != self.uid {
            return Err(Verdict::Errno(libc::EPERM));
        }
        // A name beneath the workspace does not make the inode belong to it: a hard link
        // (made before the run; the run cannot make one, landlock requires the refer right
        // on the source) can point at a file elsewhere on the filesystem.
        if !meta.is_dir() && meta.nlink() > 1 {
            return Err(Verdict::Errno(libc::EPERM));
        }
        let mode = mode & MODE_MASK;
        // Never reached with a setid bit (`serve` refuses those first); kept so that this
        // function alone never makes one.
        if mode & SETID_BITS != 0 {
            return Err(Verdict::Errno(libc::EPERM));
        }
        sys::chmod_path_fd(&fd, mode)
            .map_err(|e| Verdict::Errno(e.raw_os_error().unwrap_or(libc::EPERM)))
    }

    /// Absolute path of the target, the inode the child's fd refers to (for `fchmod`), and
    /// whether the final symlink must not be followed.
    #[allow(clippy::type_complexity)]
    fn gather(
        &self,
        pid: libc::pid_t,
        target: Target,
    ) -> Result<(PathBuf, Option<(u64, u64)>, bool), i32> {
        match target {
            Target::Fd(fd) => {
                let link = format!("/proc/{pid}/fd/{fd}");
                let path = std::fs::read_link(&link).map_err(|_| libc::EBADF)?;
                if !path.is_absolute() || path.as_os_str().as_bytes().ends_with(b" (deleted)") {
                    return Err(libc::EPERM);
                }
                let meta = std::fs::metadata(&link).map_err(|_| libc::EBADF)?;
                Ok((path, Some((meta.dev(), meta.ino())), false))
            }
            Target::Path {
                dir,
                addr,
                nofollow,
            } => {
                if addr == 0 {
                    return Err(libc::EFAULT);
                }
                let bytes = sys::read_remote_cstr(pid, addr, MAX_MEDIATED_PATH_BYTES)
                    .map_err(|e| e.raw_os_error().unwrap_or(libc::EFAULT))?;
                if bytes.is_empty() {
                    return Err(libc::ENOENT);
                }
                let path = PathBuf::from(std::ffi::OsStr::from_bytes(&bytes));
                if let Some(fd) = proc_fd_of_caller(&path, pid) {
                    // `chmod("/proc/self/fd/N")`: glibc's `fchmodat(AT_SYMLINK_NOFOLLOW)`
                    // without `fchmodat2` (tar restoring a directory's mode). The caller's
                    // fd N, by fd; the object it refers to is never followed further.
                    let (path, expected, _) = self.gather(pid, Target::Fd(fd))?;
                    return Ok((path, expected, true));
                }
                if path.is_absolute() {
                    return Ok((path, None, nofollow));
                }
                let base = match dir {
                    BaseDir::Cwd => std::fs::read_link(format!("/proc/{pid}/cwd")),
                    BaseDir::Fd(fd) => std::fs::read_link(format!("/proc/{pid}/fd/{fd}")),
                }
                .map_err(|_| libc::EBADF)?;
                Ok((base.join(path), None, nofollow))
            }
        }
    }

    /// The deepest root `absolute` lies under, lexically, and the part below it; `openat2`
    /// then enforces that it resolves beneath that root.
    fn relative(&self, absolute: &Path) -> Option<(&OwnedFd, PathBuf)> {
        let (root, fd) = self
            .roots
            .iter()
            .filter(|(root, _)| absolute.starts_with(root))
            .max_by_key(|(root, _)| root.as_os_str().len())?;
        let rel = absolute.strip_prefix(root).ok()?;
        if rel
            .components()
            .any(|c| matches!(c, Component::RootDir | Component::Prefix(_)))
        {
            return None;
        }
        Some((
            fd,
            if rel.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                rel.to_path_buf()
            },
        ))
    }
}

/// The fd number `path` names when it is the calling task's own fd link in procfs —
/// `/proc/self/fd/N`, `/proc/thread-self/fd/N` or `/proc/<pid>/fd/N` with the caller's
/// pid — spelled plainly (no `.`, `..` or repeated slashes, a decimal `N`); `None`
/// otherwise (such a path is then mediated as any other, and lies beneath no grant).
/// A Tier B child shares the supervisor's pid namespace, so its pids are the
/// supervisor's; the caller's fd table is read through its task id (threads share it).
fn proc_fd_of_caller(path: &Path, pid: libc::pid_t) -> Option<i32> {
    let rest = path.as_os_str().as_bytes().strip_prefix(b"/proc/")?;
    let text = std::str::from_utf8(rest).ok()?;
    let mut parts = text.split('/');
    let (who, fd_dir, n) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || fd_dir != "fd" {
        return None;
    }
    let ours = matches!(who, "self" | "thread-self") || who == pid.to_string();
    let digits = !n.is_empty() && n.len() <= 10 && n.bytes().all(|b| b.is_ascii_digit());
    if !ours || !digits {
        return None;
    }
    n.parse::<i32>().ok()
}

fn raw(fd: &OwnedFd) -> i32 {
    use std::os::fd::AsRawFd;
    fd.as_raw_fd()
}

/// The target and the requested mode of a mediated call, or `None` for anything else.
fn decode(nr: i64, args: &[u64; 6]) -> Option<(Target, u32)> {
    let dir = |fd: u64| {
        if fd as i32 == libc::AT_FDCWD {
            BaseDir::Cwd
        } else {
            BaseDir::Fd(fd as i32)
        }
    };
    #[cfg(target_arch = "x86_64")]
    if nr == libc::SYS_chmod {
        return Some((
            Target::Path {
                dir: BaseDir::Cwd,
                addr: args[0],
                nofollow: false,
            },
            args[1] as u32,
        ));
    }
    match nr {
        n if n == libc::SYS_fchmod => Some((Target::Fd(args[0] as i32), args[1] as u32)),
        n if n == libc::SYS_fchmodat => Some((
            Target::Path {
                dir: dir(args[0]),
                addr: args[1],
                nofollow: false,
            },
            args[2] as u32,
        )),
        SYS_FCHMODAT2 => {
            let nofollow = (args[3] as i32) & libc::AT_SYMLINK_NOFOLLOW != 0;
            Some((
                Target::Path {
                    dir: dir(args[0]),
                    addr: args[1],
                    nofollow,
                },
                args[2] as u32,
            ))
        }
        _ => None,
    }
}

/// An `O_PATH` fd of `host` (canonicalised), a directory or a file.
fn open_root(host: &Path) -> std::io::Result<OwnedFd> {
    open_canonical(&std::fs::canonicalize(host)?)
}

/// [`open_root`] of a path already canonical.
fn open_canonical(host: &Path) -> std::io::Result<OwnedFd> {
    let c = CString::new(host.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    if std::fs::metadata(host)?.is_dir() {
        sys::open_dir_path(&c)
    } else {
        sys::open_file_path(&c)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A writable grant carved into the entries of a shared directory may name an entry
    /// another process removed since: it is skipped, not a failed run (regression: an
    /// unprivileged supervisor's Tier B run with `/tmp` granted failed its start with
    /// "open the writable grants for chmod mediation: No such file or directory" when a
    /// test elsewhere removed its temporary directory in between).
    #[test]
    fn a_root_that_is_gone_is_skipped_and_one_that_is_there_is_held() {
        let dir = tempfile::tempdir().unwrap();
        let present = dir.path().join("present");
        std::fs::create_dir(&present).unwrap();
        let gone = dir.path().join("gone");
        let listener: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
        let m = SeccompMediator::new(listener, dir.path(), 0).unwrap();
        assert_eq!(m.roots.len(), 1);
        let m = m.also_beneath_if_present(&gone).unwrap();
        assert_eq!(m.roots.len(), 1, "a missing root was held");
        let m = m.also_beneath_if_present(&present).unwrap();
        assert_eq!(m.roots.len(), 2);
        assert_eq!(m.roots[1].0, std::fs::canonicalize(&present).unwrap());
        let err = m.also_beneath(&gone).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    }
}
