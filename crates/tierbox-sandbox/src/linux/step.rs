//! The named setup steps of every sandboxed process Tierbox starts on Linux, in the order
//! they run: what a launched child (Tier B's program, a trusted helper) or native Tier C's
//! pid 1 does before the program's own steps, then the program's steps
//! ([`crate::linux::exec`]) up to `execve`.
//!
//! One enum for all of them, so a failure reads the same whichever tier hit it: a child
//! writes the failing step's number and its errno into memory it shares with its parent
//! ([`Step::from_u32`] reads it back), and the error names the step and its system call
//! ([`Step::describe`]). Not every process runs every step: Tier B's child skips pid 1's
//! namespace steps, pid 1 skips the helper's, and each step says who runs it.

/// A setup step, reported with its errno when it fails.
///
/// ```
/// use tierbox_sandbox::linux::step::Step;
///
/// assert_eq!(Step::from_u32(Step::Landlock as u32), Step::Landlock);
/// assert_eq!(Step::Landlock.describe(), "landlock_restrict_self");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Step {
    /// No failure.
    None = 0,
    /// `prctl(PR_SET_PDEATHSIG)` (first thing in a child; again after an id switch), or
    /// the supervisor died before it took hold.
    Pdeathsig,
    /// Joining the run's cgroup: writing `0` to each controller's attach file.
    CgroupAttach,
    /// A helper only: `setns(CLONE_NEWNET)` into a prepared network namespace.
    JoinNetns,
    /// A helper, or a Tier B program with a private `/tmp` and `/dev/shm`
    /// (`tier_b::mounts`): `unshare(CLONE_NEWNS)`, everything made private, then
    /// `move_mount` of each prepared tree.
    HelperMounts,
    /// A Tier B program under an unprivileged supervisor: `setns(CLONE_NEWUSER)` into
    /// a user namespace that maps only the supervisor's own uid and gid to themselves
    /// (`setgroups` denied), so that the mount namespace it makes next is its own to
    /// mount in (its private `/tmp` and `/dev/shm`, its protected paths).
    UserNamespace,
    /// A Tier B program: a protected path inside the workspace bound read-only over
    /// itself, or covered (`tier_b::protect`): opened beneath its base without
    /// following a symlink, checked to be the object planned, cloned and moved onto it.
    ProtectedPaths,
    /// A Tier B program whose landlock grants the system roots whole: a host secret
    /// beneath them (`tier_b::hide`) covered, opened without following a symlink, with an
    /// empty read-only tmpfs (a directory) or a `nodev` `/dev/null` (anything else).
    HiddenPaths,
    /// Tier C pid 1: writing `/proc/self/uid_map`.
    UidMap,
    /// Tier C pid 1: writing `deny` to `/proc/self/setgroups`.
    Setgroups,
    /// Tier C pid 1: writing `/proc/self/gid_map`.
    GidMap,
    /// `setsid()`.
    Setsid,
    /// Tier C pid 1: `sethostname`.
    Hostname,
    /// Tier C pid 1: `socket` + `ioctl(SIOCSIFFLAGS, IFF_UP)` on `lo`.
    Loopback,
    /// Tier C pid 1: the egress proxy's listener (`socket`, `bind(127.0.0.1:port)`,
    /// `listen`, `sendmsg(SCM_RIGHTS)` to the supervisor).
    EgressListener,
    /// Tier C pid 1: one of the mount ops (its index and sub-call are in the report).
    MountOp,
    /// Tier C pid 1: adding the landlock rules for the sandbox's own mounts.
    LandlockRules,
    /// Tier C pid 1: `prctl(PR_SET_DUMPABLE, 0)`, `prctl(PR_SET_NAME)`, its id switch.
    InitIdentity,
    /// Tier C pid 1: `clone` of the program.
    CloneProgram,
    /// The program: `dup3` of stdin/stdout/stderr, or of an inherited fd into place.
    Stdio,
    /// With a terminal: `setsid` (native Tier C's program) and `ioctl(0, TIOCSCTTY)`, the
    /// terminal made the program's controlling terminal.
    ControllingTerminal,
    /// The program: `close_range(3, ~0, CLOSE_RANGE_CLOEXEC)`.
    CloseFds,
    /// The program: `chdir` into the working directory.
    Chdir,
    /// The program: `prlimit64` for one of the rlimits.
    Rlimit,
    /// The program: securebits, the bounding set, the ambient set.
    DropBounding,
    /// The program: `setgroups`/`setresgid`/`setresuid`.
    SetIds,
    /// The program: `capset` to empty sets.
    Capset,
    /// The program: `prctl(PR_SET_NO_NEW_PRIVS)`.
    NoNewPrivs,
    /// The program: `landlock_restrict_self`.
    Landlock,
    /// The program: installing the seccomp filter.
    Seccomp,
    /// The program: `rt_sigprocmask` to an empty mask.
    SignalMask,
    /// The program: `execve`.
    Execve,
}

/// Every step with the system call or action it names, in discriminant order (a test
/// checks the order).
const STEPS: [(Step, &str); 32] = [
    (Step::None, "none"),
    (
        Step::Pdeathsig,
        "prctl(PR_SET_PDEATHSIG, SIGKILL) / supervisor alive",
    ),
    (Step::CgroupAttach, "write(cgroup attach file, \"0\")"),
    (Step::JoinNetns, "setns(network namespace, CLONE_NEWNET)"),
    (
        Step::HelperMounts,
        "unshare(CLONE_NEWNS) / mount(MS_REC | MS_PRIVATE) / openat2(RESOLVE_NO_SYMLINKS) / open_tree / move_mount",
    ),
    (
        Step::UserNamespace,
        "setns(CLONE_NEWUSER) into the run's user namespace (its own uid and gid only)",
    ),
    (
        Step::ProtectedPaths,
        "openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) / fstat / open_tree / move_mount of a protected path",
    ),
    (
        Step::HiddenPaths,
        "openat2(RESOLVE_NO_SYMLINKS) / fstat / fsopen(tmpfs) / fsmount / open_tree(/dev/null) / move_mount of a cover over a host secret",
    ),
    (Step::UidMap, "write(/proc/self/uid_map)"),
    (Step::Setgroups, "write(/proc/self/setgroups, \"deny\")"),
    (Step::GidMap, "write(/proc/self/gid_map)"),
    (Step::Setsid, "setsid()"),
    (Step::Hostname, "sethostname"),
    (Step::Loopback, "ioctl(SIOCSIFFLAGS, lo, IFF_UP)"),
    (
        Step::EgressListener,
        "socket/bind(127.0.0.1)/listen/sendmsg(SCM_RIGHTS) of the egress proxy listener",
    ),
    (Step::MountOp, "mount op"),
    (
        Step::LandlockRules,
        "landlock_add_rule(path_beneath) for the sandbox's own mounts",
    ),
    (
        Step::InitIdentity,
        "prctl(PR_SET_DUMPABLE, 0) / prctl(PR_SET_NAME) / pid 1's id switch",
    ),
    (
        Step::CloneProgram,
        "clone(CLONE_VM | CLONE_VFORK) of the program",
    ),
    (Step::Stdio, "dup3(stdio)"),
    (
        Step::ControllingTerminal,
        "setsid() / ioctl(0, TIOCSCTTY) of the run's terminal",
    ),
    (Step::CloseFds, "close_range(3, ~0, CLOSE_RANGE_CLOEXEC)"),
    (Step::Chdir, "chdir(cwd)"),
    (Step::Rlimit, "prlimit64"),
    (
        Step::DropBounding,
        "prctl(PR_SET_SECUREBITS / PR_CAPBSET_DROP / PR_CAP_AMBIENT_CLEAR_ALL)",
    ),
    (Step::SetIds, "setgroups/setresgid/setresuid"),
    (Step::Capset, "capset(0)"),
    (Step::NoNewPrivs, "prctl(PR_SET_NO_NEW_PRIVS, 1)"),
    (Step::Landlock, "landlock_restrict_self"),
    (Step::Seccomp, "seccomp(SECCOMP_SET_MODE_FILTER)"),
    (Step::SignalMask, "rt_sigprocmask(SIG_SETMASK, {})"),
    (Step::Execve, "execve"),
];

impl Step {
    /// The step a child recorded as a number; an unknown number reads as [`Step::Execve`]
    /// (the last step: a failure is never read as "no failure").
    pub fn from_u32(v: u32) -> Self {
        STEPS
            .get(v as usize)
            .map_or(Step::Execve, |(step, _)| *step)
    }

    /// The system call or action, for error messages.
    pub fn describe(self) -> &'static str {
        STEPS.get(self as usize).map_or("execve", |(_, what)| what)
    }
}

/// What a failure at `step` with `errno` most likely means, and the policy keys that fix
/// it, for the error message: `""` when there is nothing to add. A program that cannot be
/// exec'd inside the sandbox (missing, or not readable and executable there) is the one
/// case a policy causes and a policy fixes.
///
/// ```
/// use tierbox_sandbox::linux::step::{Step, hint};
///
/// assert!(hint(Step::Execve, libc::EACCES).contains("filesystem.read_only"));
/// assert_eq!(hint(Step::Landlock, libc::EPERM), "");
/// ```
pub fn hint(step: Step, errno: i32) -> &'static str {
    match (step, errno) {
        (Step::Execve, libc::EACCES | libc::ENOENT | libc::ENOEXEC | libc::ELIBBAD) => {
            " (the program, its #! interpreter or a library it loads is missing or not \
             readable and executable inside the sandbox: the directory that holds it needs a \
             filesystem.read_only grant, and env.path must list the program's directory)"
        }
        (Step::HelperMounts | Step::ProtectedPaths, libc::ESTALE | libc::ELOOP) => {
            " (a path the run's mount namespace binds changed between planning and binding: \
             replaced, or swapped for a symbolic link; nothing was bound, and the run did not \
             start)"
        }
        (Step::UserNamespace, _) => {
            " (this host refused the user namespace the run's private /tmp needs; \
             `tierbox doctor` says why)"
        }
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_step_table_is_in_discriminant_order() {
        for (i, (step, _)) in STEPS.iter().enumerate() {
            assert_eq!(*step as usize, i, "{step:?}");
            assert_eq!(Step::from_u32(i as u32), *step);
        }
        assert_eq!(Step::from_u32(STEPS.len() as u32), Step::Execve);
    }
}
