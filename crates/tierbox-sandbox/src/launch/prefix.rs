//! What a launched child (Tier B's program, a trusted helper) does before the program's
//! own steps ([`crate::linux::exec`]): one ordered list of steps, written once in [`run`]
//! against [`PrefixCalls`], the system calls they make, so that the order is tested
//! without root or a child process; the real calls are `launch::sys::RawCalls`.
//!
//! [`run`] runs in the `CLONE_VM | CLONE_VFORK` child on borrowed memory, like the
//! program's steps: it allocates nothing, takes no lock and never panics; everything it
//! reads was prepared by the parent ([`PrefixSpec`]). A failure names its [`Step`].
//!
//! The order, and why:
//!
//! 1. **default signal dispositions**, first: every signal is still blocked (inherited
//!    from the launcher thread), and no supervisor handler may ever run on this shared
//!    memory;
//! 2. **a new session** and process group, so the tree can be signalled as a group and
//!    the child has no controlling terminal;
//! 3. **the death signal** (the launcher thread's), then a check that it was not already
//!    gone;
//! 4. **the run's cgroup**, before anything else can fork, so no descendant escapes it;
//! 5. a helper's **network namespace** (`bwrap` reaching the egress proxy), joined with
//!    the capabilities a trusted helper keeps, before anything runs in it;
//! 6. a helper's **private mount namespace**, everything made private first (nothing
//!    moved may propagate back to the host), then each prepared tree moved over its path
//!    (its idmapped writable grants): before the capability drop (it needs
//!    `CAP_SYS_ADMIN`) and before landlock and seccomp (both refuse mount operations);
//! 7. a Tier B program's **mount namespace**, made the same way, then its trees (its
//!    private `/tmp` and `/dev/shm`) and protected paths (`tier_b::mounts`,
//!    `tier_b::protect`); under an unprivileged supervisor in a **user namespace** of its
//!    own mapping only its uid and gid, joined first, whose capabilities the program's
//!    steps drop whole; then the death signal again (a credential change may clear it).

use std::ffi::{c_char, c_int};

use super::private_ns::PrivateNs;
use super::sys::MountMove;
use crate::linux::exec::{self, ExecSpec, ProgramCalls};
use crate::linux::step::Step;

/// Everything [`run`] reads, prepared by the parent.
#[derive(Clone, Copy)]
pub(crate) struct PrefixSpec<'a> {
    /// The supervisor's pid, to detect that it died before `PR_SET_PDEATHSIG` took hold.
    pub parent_pid: libc::pid_t,
    /// The run cgroup's attach files (one per v1 controller, or `cgroup.procs`).
    pub cgroup_fds: &'a [c_int],
    /// `-1`, or the network namespace a helper joins.
    pub netns_fd: c_int,
    /// A helper's trees, moved over their paths in a mount namespace of its own (none:
    /// the helper stays in the supervisor's).
    pub mount_moves: &'a [MountMove],
    /// A Tier B program's mount namespace.
    pub private_ns: Option<&'a PrivateNs>,
}

/// The system calls [`run`] makes. Each returns the errno of a failure.
pub(crate) trait PrefixCalls {
    /// Every signal's disposition back to the default.
    fn reset_signal_handlers(&self);
    /// `setsid()`.
    fn setsid(&self) -> Result<(), i32>;
    /// `PR_SET_PDEATHSIG(SIGKILL)`, then `ESRCH` if `parent` is no longer the parent.
    fn die_with_parent(&self, parent: libc::pid_t) -> Result<(), i32>;
    /// `write(fd, "0")` to a cgroup attach file.
    fn cgroup_attach(&self, fd: c_int) -> Result<(), i32>;
    /// `setns(fd, CLONE_NEWNET)`.
    fn join_netns(&self, fd: c_int) -> Result<(), i32>;
    /// `unshare(CLONE_NEWNS)`.
    fn unshare_mounts(&self) -> Result<(), i32>;
    /// `mount(NULL, "/", NULL, MS_REC | MS_PRIVATE)`.
    fn mounts_private(&self) -> Result<(), i32>;
    /// `move_mount(tree, "", AT_FDCWD, path, MOVE_MOUNT_F_EMPTY_PATH)`.
    fn move_tree(&self, tree: c_int, path: *const c_char) -> Result<(), i32>;
    /// `setns(fd, CLONE_NEWUSER)`.
    fn join_userns(&self, fd: c_int) -> Result<(), i32>;
    /// The trees and protected paths of a Tier B program's mount namespace
    /// (`launch::private_ns`): the failing step is [`Step::HelperMounts`] or
    /// [`Step::ProtectedPaths`].
    fn tier_b_mounts(&self, ns: &PrivateNs) -> Result<(), (Step, i32)>;
}

/// Runs the child's steps (see the module docs for the order), then the program's
/// ([`exec::run`]) and execs it. Returns only on failure: the step and its errno.
pub(crate) fn run(
    calls: &(impl PrefixCalls + ProgramCalls),
    spec: &PrefixSpec<'_>,
    program: &ExecSpec<'_>,
) -> (Step, i32) {
    match prefix(calls, spec) {
        Ok(()) => exec::run(calls, program),
        Err(failure) => failure,
    }
}

fn prefix(calls: &impl PrefixCalls, spec: &PrefixSpec<'_>) -> Result<(), (Step, i32)> {
    use Step as S;
    let at = |step: Step| move |errno: i32| (step, errno);
    // 1–3. Signal dispositions, session, death signal.
    calls.reset_signal_handlers();
    calls.setsid().map_err(at(S::Setsid))?;
    calls
        .die_with_parent(spec.parent_pid)
        .map_err(at(S::Pdeathsig))?;
    // 4. The run's cgroup.
    for &fd in spec.cgroup_fds {
        calls.cgroup_attach(fd).map_err(at(S::CgroupAttach))?;
    }
    // 5. A helper's network namespace (the parent keeps the fd open until the child has
    //    exec'd or exited: CLONE_VFORK).
    if spec.netns_fd >= 0 {
        calls.join_netns(spec.netns_fd).map_err(at(S::JoinNetns))?;
    }
    // 6. A helper's private mount namespace.
    if !spec.mount_moves.is_empty() {
        calls.unshare_mounts().map_err(at(S::HelperMounts))?;
        calls.mounts_private().map_err(at(S::HelperMounts))?;
        for m in spec.mount_moves {
            calls
                .move_tree(m.tree, m.path)
                .map_err(at(S::HelperMounts))?;
        }
    }
    // 7. A Tier B program's mount namespace, in its user namespace when it has one.
    if let Some(ns) = spec.private_ns {
        if ns.userns_fd >= 0 {
            calls
                .join_userns(ns.userns_fd)
                .map_err(at(S::UserNamespace))?;
        }
        calls.unshare_mounts().map_err(at(S::HelperMounts))?;
        calls.mounts_private().map_err(at(S::HelperMounts))?;
        calls.tier_b_mounts(ns)?;
        calls
            .die_with_parent(spec.parent_pid)
            .map_err(at(S::Pdeathsig))?;
    }
    Ok(())
}

#[cfg(test)]
#[path = "prefix_tests.rs"]
mod tests;
