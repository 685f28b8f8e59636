//! The Tier B child: `clone(CLONE_VM | CLONE_VFORK | CLONE_PIDFD)` and the real calls of
//! the ordered setup that runs in the child before `execve` (its order: `launch::prefix`,
//! then `linux::exec`).
//!
//! Why this shape: a plain `fork` of a large multi-threaded supervisor copies its page
//! tables, and `std::process::Command::pre_exec` forces that fork. A `CLONE_VM |
//! CLONE_VFORK` child shares the supervisor's memory and the supervisor's thread is
//! suspended until the child execs or exits, which is what `posix_spawn` does and why it
//! is fast. The price is discipline in the child:
//!
//! - everything is prepared by the parent beforehand (`ChildSpec`: C strings, pointer
//!   arrays, open fds, the landlock ruleset fd, the compiled seccomp program);
//! - the child only makes raw system calls: no allocation, no locks, no glibc functions
//!   that touch process-wide state (glibc's `setuid` would broadcast to the *parent's*
//!   threads), no panics;
//! - all signals are blocked on the launcher thread, so no handler of the supervisor can
//!   run on the child's borrowed memory; the child resets every disposition to the
//!   default before unblocking, right before `execve`;
//! - a failure is written to two atomics in the spec (shared memory) and the child exits
//!   with 127; the parent reads them after `clone` returns.

use std::ffi::{c_char, c_int, c_void};
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

use super::prefix;
use crate::linux::exec;
use crate::linux::step::Step;
use crate::linux::sys as lsys;
use crate::linux::sys::{check, errno, reset_signal_handlers};
// What moved to `exit`, `pipes` and `private_ns`, at the paths callers name it by.
pub use super::exit::{
    ExitInfo, kill, pidfd_has_exited, pidfd_signal, register_readable, wait_pidfd,
};
pub(crate) use super::pipes::{pipe_cloexec, recv_fd, socketpair_seqpacket};
pub(crate) use super::private_ns::PrivateNs;
use super::private_ns::{join_userns, private_ns_mounts};

/// Stack for the cloned child, in bytes. The child runs one small function with no
/// recursion; 64 KiB leaves ample room for the glibc `clone` trampoline and the frames.
pub(crate) const CHILD_STACK_BYTES: usize = 64 * 1024;

/// Most cgroup `cgroup.procs` files the child attaches itself to (one per v1 controller).
pub(crate) const MAX_CGROUP_FDS: usize = 6;

/// Number of rlimits the child sets.
pub(crate) const RLIMIT_COUNT: usize = 5;

/// Everything the child needs, prepared by the parent. Every pointer stays valid until
/// `clone` returns (the parent is suspended until the child execs or exits).
#[repr(C)]
pub(crate) struct ChildSpec {
    pub program: *const c_char,
    pub argv: *const *const c_char,
    pub envp: *const *const c_char,
    pub cwd: *const c_char,
    pub stdin_fd: c_int,
    pub stdout_fd: c_int,
    pub stderr_fd: c_int,
    /// stdin is the run's terminal: the child (a session leader already) makes it its
    /// controlling terminal after stdio ([`exec::TerminalSetup::Take`]).
    pub controlling_terminal: bool,
    pub cgroup_fds: [c_int; MAX_CGROUP_FDS],
    pub n_cgroup_fds: usize,
    pub rlimits: [(c_int, libc::rlimit64); RLIMIT_COUNT],
    /// Drop the bounding and ambient sets and lock securebits (the supervisor is root).
    pub drop_privileged: bool,
    /// Switch to this uid and gid (and no supplementary groups).
    pub ids: Option<(u32, u32)>,
    pub last_cap: u32,
    /// `-1` when landlock is not applied.
    pub landlock_fd: c_int,
    /// Null when seccomp is not applied.
    pub seccomp: *const libc::sock_fprog,
    /// `-1`, or the socket over which the child sends the seccomp listener fd (chmod
    /// mediation).
    pub seccomp_listener_sock: c_int,
    /// Landlock's denials are audited (ABI 7): see [`crate::linux::audit`].
    pub log_landlock: bool,
    /// The seccomp filter's refusals are audited.
    pub log_seccomp: bool,
    /// The cloning thread starts a fresh audit session just before the clone, so the
    /// child's audited denials can be told from every other run's (`None`: no session).
    pub audit_session: Option<crate::linux::audit::SessionWants>,
    /// The supervisor's pid, to detect that it died before `PR_SET_PDEATHSIG` took hold.
    pub parent_pid: libc::pid_t,
    /// What only a trusted helper (`bwrap`, a container CLI) gets; [`HelperSetup::NONE`]
    /// for every program.
    pub helper: HelperSetup,
    /// Leave the capability sets alone: only for a trusted helper (`bwrap`) that drops
    /// them itself after building the sandbox. Tier B programs never set it.
    pub keep_caps: bool,
    /// Null, or the Tier B program's mount namespace (its private `/tmp` and `/dev/shm`,
    /// its protected paths), made by the child before it restricts itself.
    pub private_ns: *const PrivateNs,
    /// `-1`, or a network namespace the child joins before it execs: only for `bwrap`
    /// (with `keep_caps`), which then shares it (`--share-net`) because it holds the
    /// egress proxy's listener. Tier B programs never set it.
    pub netns_fd: c_int,
    pub fail_step: AtomicU32,
    pub fail_errno: AtomicI32,
}

impl ChildSpec {
    /// A child that runs `program` (with `argv` and `envp`, in `cwd`) on `stdio`, under
    /// `rlimits`, and nothing more: no cgroup, no id switch, no privileged drop, no
    /// landlock, no seccomp, no namespace, no helper setup, no audit session; its parent
    /// is this process. Each launch sets what it adds over this.
    pub(crate) fn new(
        program: *const c_char,
        argv: *const *const c_char,
        envp: *const *const c_char,
        cwd: *const c_char,
        [stdin_fd, stdout_fd, stderr_fd]: [c_int; 3],
        rlimits: [(c_int, libc::rlimit64); RLIMIT_COUNT],
    ) -> Self {
        Self {
            program,
            argv,
            envp,
            cwd,
            stdin_fd,
            stdout_fd,
            stderr_fd,
            controlling_terminal: false,
            cgroup_fds: [-1; MAX_CGROUP_FDS],
            n_cgroup_fds: 0,
            rlimits,
            drop_privileged: false,
            ids: None,
            last_cap: crate::linux::caps::last_cap(),
            landlock_fd: -1,
            seccomp: std::ptr::null(),
            seccomp_listener_sock: -1,
            log_landlock: false,
            log_seccomp: false,
            audit_session: None,
            parent_pid: getpid(),
            helper: HelperSetup::NONE,
            keep_caps: false,
            private_ns: std::ptr::null(),
            netns_fd: -1,
            fail_step: AtomicU32::new(0),
            fail_errno: AtomicI32::new(0),
        }
    }
}

/// Most fds a helper inherits ([`HelperSetup::inherit`]): bwrap's are its seccomp
/// program, user namespace, environment arguments, `tierbox-init`'s image, the stacked
/// filter, the listener's socket, the alive pipe and the terminal's socket (fds 3–10).
pub(crate) const MAX_INHERITED_FDS: usize = 8;
/// Inherited fds are passed to the child at this number or above, over every destination
/// number (3 to 9), so moving one into place never overwrites another's source.
pub(crate) const INHERIT_SOURCE_MIN_FD: c_int = 16;

/// A detached mount tree the helper moves over `path` in its private mount namespace.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct MountMove {
    pub tree: c_int,
    pub path: *const c_char,
}

/// The setup steps only a trusted helper gets (see [`ChildSpec::helper`]).
#[repr(C)]
pub(crate) struct HelperSetup {
    /// `(src, dst)` pairs: fds the helper inherits at number `dst` (>= 3); unused entries
    /// are `(-1, -1)`. Every `src` is at least [`INHERIT_SOURCE_MIN_FD`]. Used to hand
    /// `bwrap` its seccomp program (`--seccomp 3`), user namespace (`--userns 4`) and
    /// environment (`--args 5`).
    pub inherit: [(c_int, c_int); MAX_INHERITED_FDS],
    /// Trees moved over their paths in a private mount namespace made for the helper
    /// (null with 0 entries: the helper stays in the supervisor's mount namespace).
    pub mount_moves: *const MountMove,
    pub n_mount_moves: usize,
    /// `setgroups(0, NULL)` before exec: the helper keeps no supplementary group of the
    /// supervisor (bwrap does not drop them itself when it joins a prepared user namespace).
    pub clear_groups: bool,
}

impl HelperSetup {
    /// Nothing beyond what every program gets.
    pub const NONE: Self = Self {
        inherit: [(-1, -1); MAX_INHERITED_FDS],
        mount_moves: std::ptr::null(),
        n_mount_moves: 0,
        clear_groups: false,
    };
}

/// Records a failed step and exits the child. Never returns.
fn child_fail(spec: &ChildSpec, step: Step, err: i32) -> c_int {
    spec.fail_errno.store(err, Ordering::SeqCst);
    spec.fail_step.store(step as u32, Ordering::SeqCst);
    // SAFETY: exit_group only ends this child (it is its own thread group: no CLONE_THREAD);
    // it never returns and touches no shared state.
    unsafe { libc::syscall(libc::SYS_exit_group, 127 as libc::c_ulong) };
    127
}

/// The child's entry point: the ordered setup ([`prefix`]), then `execve`.
extern "C" fn child_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `&ChildSpec` the parent passed to `clone`; the parent is
    // suspended (CLONE_VFORK) until we exec or exit, so the reference stays valid.
    let spec: &ChildSpec = unsafe { &*(arg as *const ChildSpec) };
    let (step, err) = child_setup(spec);
    child_fail(spec, step, err)
}

/// `PR_SET_PDEATHSIG(SIGKILL)`, then `ESRCH` if the parent is no longer `parent_pid`
/// (it died before the signal was armed, and the child was re-parented).
fn die_with_parent(parent_pid: libc::pid_t) -> Result<(), i32> {
    // SAFETY: prctl with integer arguments only.
    check(unsafe {
        libc::syscall(
            libc::SYS_prctl,
            libc::PR_SET_PDEATHSIG as libc::c_ulong,
            libc::SIGKILL as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    })?;
    // SAFETY: getppid takes no arguments.
    if unsafe { libc::syscall(libc::SYS_getppid) } as libc::pid_t != parent_pid {
        return Err(libc::ESRCH);
    }
    Ok(())
}

/// `dup3(src, dst, 0)`: `dst` becomes a copy of `src` that stays open across exec (`dup2`
/// does not exist on every architecture). Async-signal-safe.
fn dup_to(src: c_int, dst: c_int) -> Result<(), i32> {
    // SAFETY: dup3 without flags on integer fds; the caller opened `src` for the child.
    check(unsafe {
        libc::syscall(
            libc::SYS_dup3,
            src as libc::c_ulong,
            dst as libc::c_ulong,
            0 as libc::c_ulong,
        )
    })
    .map(drop)
}

/// `setns(fd, nstype)`: joins the namespace `fd` (which the caller keeps open) names.
/// Changes only the calling process (a cloned child: its own thread group, with an fs
/// struct of its own). Async-signal-safe.
pub(crate) fn setns(fd: c_int, nstype: c_int) -> Result<(), i32> {
    // SAFETY: setns with an integer fd and a constant flag; it reads no memory.
    check(unsafe { libc::syscall(libc::SYS_setns, fd as libc::c_long, nstype as libc::c_long) })
        .map(drop)
}

/// `unshare(flags)` (`CLONE_NEWNS`).
pub(crate) fn unshare_mounts_private(flags: c_int) -> Result<(), i32> {
    // SAFETY: unshare with constant flags; a child cloned without CLONE_FS shares no fs
    // struct, and a thread's is unshared along with the namespace (CLONE_NEWNS implies
    // CLONE_FS).
    check(unsafe { libc::syscall(libc::SYS_unshare, flags as libc::c_ulong) })?;
    Ok(())
}

/// `mount(NULL, "/", NULL, MS_REC | MS_PRIVATE)`: nothing made below propagates back.
pub(crate) fn mounts_private() -> Result<(), i32> {
    // SAFETY: a NUL-terminated literal target, null source, type and data.
    check(unsafe {
        libc::syscall(
            libc::SYS_mount,
            std::ptr::null::<c_char>(),
            c"/".as_ptr(),
            std::ptr::null::<c_char>(),
            (libc::MS_REC | libc::MS_PRIVATE) as libc::c_ulong,
            std::ptr::null::<c_void>(),
        )
    })
    .map(drop)
}

/// `move_mount(tree, "", AT_FDCWD, path, MOVE_MOUNT_F_EMPTY_PATH)` (a final symlink at
/// `path` is not followed).
pub(crate) fn move_tree_to(tree: c_int, path: *const c_char) -> Result<(), i32> {
    // SAFETY: a tree fd the caller holds open, an empty source path with
    // MOVE_MOUNT_F_EMPTY_PATH, and a NUL-terminated destination the caller owns.
    check(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree as libc::c_ulong,
            c"".as_ptr(),
            libc::AT_FDCWD as libc::c_ulong,
            path,
            libc::c_ulong::from(lsys::MOVE_MOUNT_F_EMPTY_PATH),
        )
    })
    .map(drop)
}

/// The child's steps ([`prefix::run`]: its own, then the program's) over what the parent
/// prepared. Returns only on failure.
fn child_setup(spec: &ChildSpec) -> (Step, i32) {
    let n_moves = spec.helper.n_mount_moves;
    let mount_moves = if n_moves == 0 {
        &[][..]
    } else {
        // SAFETY: the parent keeps `n_mount_moves` entries alive at `mount_moves` until
        // clone returns (null only with 0 entries).
        unsafe { std::slice::from_raw_parts(spec.helper.mount_moves, n_moves) }
    };
    let private_ns = if spec.private_ns.is_null() {
        None
    } else {
        // SAFETY: the parent keeps the namespace's spec alive until clone returns.
        Some(unsafe { &*spec.private_ns })
    };
    let own = prefix::PrefixSpec {
        parent_pid: spec.parent_pid,
        cgroup_fds: &spec.cgroup_fds[..spec.n_cgroup_fds.min(MAX_CGROUP_FDS)],
        netns_fd: spec.netns_fd,
        mount_moves,
        private_ns,
    };
    let seccomp = if spec.seccomp.is_null() {
        None
    } else {
        // SAFETY: the parent keeps the program alive until clone returns.
        Some(unsafe { &*spec.seccomp })
    };
    let program = exec::ExecSpec {
        stdio: [spec.stdin_fd, spec.stdout_fd, spec.stderr_fd],
        terminal: spec
            .controlling_terminal
            .then_some(exec::TerminalSetup::Take),
        inherit: &spec.helper.inherit,
        inherit_min_src: INHERIT_SOURCE_MIN_FD,
        cwd: spec.cwd,
        umask: None,
        rlimits: &spec.rlimits,
        privileges: exec::Privileges {
            drop_privileged: spec.drop_privileged,
            last_cap: spec.last_cap,
            ids: spec.ids,
            clear_groups: spec.helper.clear_groups,
            keep_caps: spec.keep_caps,
            rearm_pdeathsig: Some(spec.parent_pid),
        },
        landlock_fd: spec.landlock_fd,
        seccomp,
        seccomp_listener_sock: spec.seccomp_listener_sock,
        log_landlock: spec.log_landlock,
        log_seccomp: spec.log_seccomp,
        program: spec.program,
        argv: spec.argv,
        envp: spec.envp,
    };
    prefix::run(&RawCalls, &own, &program)
}

/// The real system calls of a launched child's own steps ([`prefix::PrefixCalls`]).
impl prefix::PrefixCalls for RawCalls {
    fn reset_signal_handlers(&self) {
        reset_signal_handlers();
    }

    fn setsid(&self) -> Result<(), i32> {
        // SAFETY: setsid takes no arguments and only changes this process's session.
        check(unsafe { libc::syscall(libc::SYS_setsid) }).map(drop)
    }

    fn die_with_parent(&self, parent: libc::pid_t) -> Result<(), i32> {
        die_with_parent(parent)
    }

    fn cgroup_attach(&self, fd: c_int) -> Result<(), i32> {
        lsys::write_all_raw(fd, b"0")
    }

    fn join_netns(&self, fd: c_int) -> Result<(), i32> {
        setns(fd, libc::CLONE_NEWNET)
    }

    fn unshare_mounts(&self) -> Result<(), i32> {
        unshare_mounts_private(libc::CLONE_NEWNS)
    }

    fn mounts_private(&self) -> Result<(), i32> {
        mounts_private()
    }

    fn move_tree(&self, tree: c_int, path: *const c_char) -> Result<(), i32> {
        move_tree_to(tree, path)
    }

    fn join_userns(&self, fd: c_int) -> Result<(), i32> {
        join_userns(fd)
    }

    fn tier_b_mounts(&self, ns: &PrivateNs) -> Result<(), (Step, i32)> {
        private_ns_mounts(ns)
    }
}

/// The real system calls of the program's setup ([`exec::ProgramCalls`]): raw calls
/// only, for a `CLONE_VM | CLONE_VFORK` child (Tier B's, and native Tier C's program).
pub(crate) struct RawCalls;

impl exec::ProgramCalls for RawCalls {
    fn new_session(&self) -> Result<(), i32> {
        // SAFETY: setsid takes no arguments and only changes this process's session.
        check(unsafe { libc::syscall(libc::SYS_setsid) }).map(drop)
    }

    fn controlling_terminal(&self, fd: c_int) -> Result<(), i32> {
        // SAFETY: TIOCSCTTY takes an integer argument (0: do not steal it from another
        // session).
        check(unsafe {
            libc::syscall(
                libc::SYS_ioctl,
                fd as libc::c_ulong,
                libc::TIOCSCTTY,
                0 as libc::c_ulong,
            )
        })
        .map(drop)
    }

    fn dup_to(&self, src: c_int, dst: c_int) -> Result<(), i32> {
        dup_to(src, dst)
    }

    fn cloexec_from(&self, first: c_int) -> Result<(), i32> {
        // SAFETY: close_range with integer arguments.
        check(unsafe {
            libc::syscall(
                libc::SYS_close_range,
                first as libc::c_ulong,
                libc::c_ulong::from(u32::MAX),
                libc::CLOSE_RANGE_CLOEXEC as libc::c_ulong,
            )
        })
        .map(drop)
    }

    fn close_range(&self, first: c_int, last: c_int) -> Result<(), i32> {
        // SAFETY: close_range with integer arguments, in a child with a fd table of its
        // own (no CLONE_FILES): only its copies of the descriptors close.
        check(unsafe {
            libc::syscall(
                libc::SYS_close_range,
                first as libc::c_ulong,
                last as libc::c_ulong,
                0 as libc::c_ulong,
            )
        })
        .map(drop)
    }

    fn chdir(&self, path: *const c_char) -> Result<(), i32> {
        // SAFETY: `path` is a NUL-terminated string the parent owns for the child's life.
        check(unsafe { libc::syscall(libc::SYS_chdir, path) }).map(drop)
    }

    fn umask(&self, mask: u32) {
        // SAFETY: umask with an integer argument; it cannot fail.
        unsafe { libc::syscall(libc::SYS_umask, mask as libc::c_ulong) };
    }

    fn prlimit(&self, resource: c_int, limit: &libc::rlimit64) -> Result<(), i32> {
        let limit: *const libc::rlimit64 = limit;
        // SAFETY: prlimit64 on ourselves (pid 0) with a pointer to a valid rlimit64; the
        // old limit is not requested.
        check(unsafe {
            libc::syscall(
                libc::SYS_prlimit64,
                0 as libc::c_ulong,
                resource as libc::c_ulong,
                limit,
                std::ptr::null_mut::<c_void>(),
            )
        })
        .map(drop)
    }

    fn securebits_noroot(&self) -> Result<(), i32> {
        lsys::set_securebits_noroot()
    }

    fn drop_bounding_set(&self, last_cap: u32) -> Result<(), i32> {
        lsys::drop_bounding_set(last_cap)
    }

    fn clear_ambient(&self) -> Result<(), i32> {
        lsys::clear_ambient()
    }

    fn set_ids(&self, uid: u32, gid: u32) -> Result<(), i32> {
        lsys::set_ids(uid, gid)
    }

    fn clear_groups(&self) -> Result<(), i32> {
        lsys::clear_groups()
    }

    fn capset_zero(&self) -> Result<(), i32> {
        lsys::capset_zero()
    }

    fn die_with_parent(&self, parent: libc::pid_t) -> Result<(), i32> {
        die_with_parent(parent)
    }

    fn no_new_privs(&self) -> Result<(), i32> {
        lsys::set_no_new_privs()
    }

    fn landlock_restrict(&self, fd: c_int, log: bool) -> Result<(), i32> {
        let flags = if log {
            lsys::LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON
        } else {
            0
        };
        lsys::landlock_restrict_self(fd, flags)
    }

    fn seccomp(&self, prog: &libc::sock_fprog, listener_sock: c_int, log: bool) -> Result<(), i32> {
        let flags = if log {
            libc::SECCOMP_FILTER_FLAG_LOG
        } else {
            0
        };
        if listener_sock >= 0 {
            seccomp_with_listener(prog, listener_sock, flags)
        } else {
            lsys::seccomp_set_filter(prog, flags)
        }
    }

    fn unblock_signals(&self) -> Result<(), i32> {
        let set: u64 = 0;
        // SAFETY: `set` is a zeroed kernel sigset on our stack; the old mask is not
        // requested.
        check(unsafe {
            libc::syscall(
                libc::SYS_rt_sigprocmask,
                libc::SIG_SETMASK as libc::c_ulong,
                &set as *const u64,
                std::ptr::null_mut::<u64>(),
                8 as libc::c_ulong,
            )
        })
        .map(drop)
    }

    fn execve(
        &self,
        program: *const c_char,
        argv: *const *const c_char,
        envp: *const *const c_char,
    ) -> i32 {
        // SAFETY: program/argv/envp are NUL-terminated strings and NULL-terminated arrays
        // owned by the parent; execve returns only on failure.
        unsafe { libc::syscall(libc::SYS_execve, program, argv, envp) };
        errno()
    }
}

/// A reusable child stack, owned by the launcher thread.
pub(crate) struct ChildStack {
    mem: Vec<u128>,
}

impl ChildStack {
    pub fn new() -> Self {
        // u128 elements keep the stack 16-byte aligned as the x86-64 and aarch64 ABIs require.
        Self {
            mem: vec![0u128; CHILD_STACK_BYTES / 16],
        }
    }
}

/// The result of a successful clone.
pub(crate) struct Cloned {
    pub pid: libc::pid_t,
    pub pidfd: OwnedFd,
    /// The child's audit session, when [`ChildSpec::audit_session`] asked for one.
    pub audit: Option<Result<crate::linux::audit::AuditSession, crate::linux::audit::NotRecorded>>,
}

/// Clones the child and waits for it to exec (or fail).
///
/// Must be called on a thread with every signal blocked (the launcher thread), because
/// the child briefly runs on this process's memory.
pub(crate) fn clone_and_exec(
    spec: &mut ChildSpec,
    stack: &mut ChildStack,
) -> Result<Cloned, (Step, i32)> {
    spec.fail_step.store(0, Ordering::SeqCst);
    spec.fail_errno.store(0, Ordering::SeqCst);
    let mut pidfd: c_int = -1;
    let top = stack.mem.as_mut_ptr_range().end as *mut c_void;
    let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD | libc::SIGCHLD;
    // The child inherits this thread's audit session (`audit::session_for_clone`).
    let audit = crate::linux::audit::session_for_clone(spec.audit_session.as_ref());
    // SAFETY: `child_main` only reads `spec` and makes raw syscalls (module docs); `top` is
    // the 16-byte aligned end of a live stack buffer; the parent is suspended until the
    // child execs or exits, so `spec`, the strings it points to and the stack outlive the
    // child's use of them. CLONE_PIDFD stores the pidfd in `pidfd` (the parent_tid slot).
    let pid = unsafe {
        libc::clone(
            child_main,
            top,
            flags,
            spec as *mut ChildSpec as *mut c_void,
            &mut pidfd as *mut c_int,
        )
    };
    let clone_errno = errno();
    crate::linux::audit::leave_after_clone(audit.as_ref());
    if pid == -1 {
        return Err((Step::None, clone_errno));
    }
    // SAFETY: on success the kernel returned a fresh pidfd that we now own.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    let failed = Step::from_u32(spec.fail_step.load(Ordering::SeqCst));
    if failed != Step::None {
        let err = spec.fail_errno.load(Ordering::SeqCst);
        // Reap the failed child now; it has already exited.
        let _ = wait_pidfd(&pidfd, false);
        return Err((failed, err));
    }
    Ok(Cloned { pid, pidfd, audit })
}

/// Runs `f` with every signal blocked on the calling thread, restoring the mask after.
pub(crate) fn with_all_signals_blocked<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: sigfillset/pthread_sigmask on local sigset_t values; the old mask is
    // restored below whatever `f` returns (it cannot unwind: it only makes syscalls).
    let old = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::pthread_sigmask(libc::SIG_SETMASK, &set, &mut old);
        old
    };
    let r = f();
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    r
}

/// Blocks every signal on the calling thread (the launcher thread calls this once).
pub(crate) fn block_all_signals_on_this_thread() {
    // SAFETY: sigfillset/pthread_sigmask on a local sigset_t.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
}

/// `uname -r`.
pub fn kernel_release() -> String {
    // SAFETY: zeroed utsname is a valid out-parameter for uname.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer.
    if unsafe { libc::uname(&mut u) } != 0 {
        return String::new();
    }
    let bytes: Vec<u8> = u
        .release
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| c.to_ne_bytes()[0])
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Effective uid and gid of the supervisor.
pub fn current_ids() -> (u32, u32) {
    // SAFETY: geteuid/getegid cannot fail.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

/// Owner uid and gid of `path`.
pub fn owner_of(path: &std::path::Path) -> io::Result<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path)?;
    Ok((m.uid(), m.gid()))
}

/// `getpid()`.
pub fn getpid() -> libc::pid_t {
    // SAFETY: getpid cannot fail.
    unsafe { libc::getpid() }
}

/// `prctl(PR_SET_CHILD_SUBREAPER, 1)`: orphaned descendants are re-parented to this
/// process (so `setsid` double-forked daemons can be found and killed).
/// Registers `f` to run when the process ends normally (`exit(3)`, a return from `main`),
/// never when a signal ends it.
pub(crate) fn at_exit(f: extern "C" fn()) -> io::Result<()> {
    // SAFETY: atexit with a function pointer that lives for the whole program.
    match unsafe { libc::atexit(f) } {
        0 => Ok(()),
        _ => Err(io::Error::other("atexit: no room for another handler")),
    }
}

pub fn set_child_subreaper() -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `prctl(PR_SET_DUMPABLE, 0)`: other processes of the same uid (including sandboxed ones
/// running as the supervisor's uid) cannot read our memory or `/proc/<pid>/environ`.
pub fn set_not_dumpable() -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Restores the default action of `SIGPIPE` (Rust ignores it at startup), so a command
/// line tool whose stdout is a closed pipe (`tierbox check … | head`) ends quietly instead
/// of failing every later write. Long-lived servers keep it ignored.
pub fn default_sigpipe() {
    // SAFETY: installs SIG_DFL for SIGPIPE; no handler code runs.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// Blocks `SIGPIPE` on the calling thread for the rest of its life: a write it makes to a
/// pipe whose reader is gone then fails with `EPIPE` instead of ending the process (a
/// command-line supervisor restores the default action, [`default_sigpipe`]). The signal
/// such a write raises is the thread's own and stays pending, blocked, until the thread
/// exits; it is never delivered to another thread.
pub fn block_sigpipe_on_this_thread() {
    // SAFETY: sigemptyset/sigaddset/pthread_sigmask on a local sigset_t.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// A `ChildSpec` pointer handed to the launcher thread.
pub(crate) struct SendSpec(*mut ChildSpec);

// SAFETY: the pointer is only dereferenced by the launcher thread while the submitting
// thread is blocked waiting for the reply (see `launcher_clone`), so there is never
// concurrent access, and `ChildSpec`'s own pointers target data the submitter keeps alive.
unsafe impl Send for SendSpec {}

impl SendSpec {
    pub(crate) fn new(spec: &mut ChildSpec) -> Self {
        Self(spec as *mut ChildSpec)
    }
}

/// Runs [`clone_and_exec`] for a submitted job (on the launcher thread).
pub(crate) fn clone_job(spec: &SendSpec, stack: &mut ChildStack) -> Result<Cloned, (Step, i32)> {
    // SAFETY: see `SendSpec`: the submitter is blocked until we reply, so this is the only
    // live reference to the spec.
    let spec = unsafe { &mut *spec.0 };
    clone_and_exec(spec, stack)
}

// ---- seccomp user notification: chmod mediation -------------------------------------

/// In the child: installs the filter with `SECCOMP_FILTER_FLAG_NEW_LISTENER` and sends the
/// listener fd (created close-on-exec) to the supervisor over `sock` with `SCM_RIGHTS`.
/// Raw syscalls only.
fn seccomp_with_listener(
    prog: &libc::sock_fprog,
    sock: c_int,
    flags: libc::c_ulong,
) -> Result<(), i32> {
    let fd = seccomp_new_listener_raw(prog, flags)?;
    send_fd_raw(sock, fd)
}

/// `seccomp(SET_MODE_FILTER, NEW_LISTENER, prog)` on the calling thread: the listener fd
/// (close-on-exec). Async-signal-safe.
fn seccomp_new_listener_raw(prog: &libc::sock_fprog, flags: libc::c_ulong) -> Result<c_int, i32> {
    // SAFETY: seccomp(SET_MODE_FILTER) only reads the program, which the caller keeps
    // alive for the call; on success it returns a new fd.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER as libc::c_ulong,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER | flags,
            prog as *const libc::sock_fprog,
        )
    };
    Ok(check(fd)? as c_int)
}

/// Attaches `prog` to the calling thread with a new listener and returns the listener (a
/// launcher thread arming itself: its children inherit the filter, and every call they
/// hand off arrives on this one fd).
pub(crate) fn seccomp_attach_with_listener(prog: &libc::sock_fprog) -> Result<OwnedFd, i32> {
    let fd = seccomp_new_listener_raw(prog, 0)?;
    // SAFETY: a fresh fd the kernel just returned, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `sendmsg(sock, 1 byte + SCM_RIGHTS(fd))` with everything on the stack.
fn send_fd_raw(sock: c_int, fd: c_int) -> Result<(), i32> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr() as *mut c_void,
        iov_len: 1,
    };
    // 8-byte aligned room for one cmsghdr carrying one int (CMSG_SPACE(4) = 24 on 64-bit).
    let mut control = [0u64; 4];
    // SAFETY: a zeroed msghdr is valid; every pointer set below targets stack memory
    // that outlives the sendmsg call; the CMSG_* helpers only compute offsets into
    // `control`, which is large enough for one int (checked against CMSG_SPACE).
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        let space = libc::CMSG_SPACE(std::mem::size_of::<c_int>() as u32) as usize;
        if space > std::mem::size_of_val(&control) {
            return Err(libc::EINVAL);
        }
        msg.msg_control = control.as_mut_ptr() as *mut c_void;
        msg.msg_controllen = space;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() {
            return Err(libc::EINVAL);
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<c_int>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut c_int, fd);
        check(libc::syscall(
            libc::SYS_sendmsg,
            sock as libc::c_ulong,
            &msg as *const libc::msghdr,
            libc::MSG_NOSIGNAL as libc::c_ulong,
        ))?;
    }
    Ok(())
}
