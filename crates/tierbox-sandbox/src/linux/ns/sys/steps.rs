//! The setup steps of the sandbox's pid 1 and program, as reported on failure.

/// The setup step that failed in the sandbox; reported with its errno.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum NsStep {
    /// No failure.
    None = 0,
    /// `prctl(PR_SET_PDEATHSIG)`, or the supervisor was gone.
    Pdeathsig,
    /// Joining the run's cgroup (writing `0` to each controller's `tasks`/`cgroup.procs`).
    Cgroup,
    /// Writing `/proc/self/uid_map`.
    UidMap,
    /// Writing `deny` to `/proc/self/setgroups`.
    Setgroups,
    /// Writing `/proc/self/gid_map`.
    GidMap,
    /// `setsid()`.
    Setsid,
    /// `sethostname`.
    Hostname,
    /// `socket` + `ioctl(SIOCSIFFLAGS, IFF_UP)` on `lo`.
    Loopback,
    /// The egress proxy's listener: `socket`, `bind(127.0.0.1:port)`, `listen`, and
    /// `sendmsg(SCM_RIGHTS)` to the supervisor.
    EgressListener,
    /// One of the mount ops (index and sub-call in the report).
    MountOp,
    /// Adding the landlock rules for the sandbox's own mounts (`/`, `/tmp`, `/proc`, …).
    LandlockRules,
    /// `prctl(PR_SET_DUMPABLE, 0)` / `prctl(PR_SET_NAME)` of pid 1.
    InitIdentity,
    /// `clone` of the program.
    CloneProgram,
    /// `dup3` of stdin/stdout/stderr.
    Stdio,
    /// `close_range(3, ~0, CLOSE_RANGE_CLOEXEC)`.
    CloseFds,
    /// `chdir(cwd)`.
    Chdir,
    /// `prlimit64`.
    Rlimit,
    /// securebits, bounding set, ambient set, `capset(0)`.
    DropCaps,
    /// `prctl(PR_SET_NO_NEW_PRIVS, 1)`.
    NoNewPrivs,
    /// `landlock_restrict_self`.
    Landlock,
    /// `seccomp(SECCOMP_SET_MODE_FILTER)`.
    Seccomp,
    /// `rt_sigprocmask(SIG_SETMASK, {})`.
    SignalMask,
    /// `execve`.
    Execve,
}

/// Every step with the system call or action it names, in discriminant order (a test
/// checks the order).
const NS_STEPS: [(NsStep, &str); 24] = [
    (NsStep::None, "none"),
    (
        NsStep::Pdeathsig,
        "prctl(PR_SET_PDEATHSIG, SIGKILL) / supervisor alive",
    ),
    (NsStep::Cgroup, "write(<run cgroup>/tasks, \"0\")"),
    (NsStep::UidMap, "write(/proc/self/uid_map)"),
    (NsStep::Setgroups, "write(/proc/self/setgroups, \"deny\")"),
    (NsStep::GidMap, "write(/proc/self/gid_map)"),
    (NsStep::Setsid, "setsid()"),
    (NsStep::Hostname, "sethostname"),
    (NsStep::Loopback, "ioctl(SIOCSIFFLAGS, lo, IFF_UP)"),
    (
        NsStep::EgressListener,
        "socket/bind(127.0.0.1)/listen/sendmsg(SCM_RIGHTS) of the egress proxy listener",
    ),
    (NsStep::MountOp, "mount op"),
    (
        NsStep::LandlockRules,
        "landlock_add_rule(path_beneath) for the sandbox's own mounts",
    ),
    (
        NsStep::InitIdentity,
        "prctl(PR_SET_DUMPABLE, 0) / prctl(PR_SET_NAME)",
    ),
    (
        NsStep::CloneProgram,
        "clone(CLONE_VM | CLONE_VFORK) of the program",
    ),
    (NsStep::Stdio, "dup3(stdio)"),
    (NsStep::CloseFds, "close_range(3, ~0, CLOSE_RANGE_CLOEXEC)"),
    (NsStep::Chdir, "chdir(cwd)"),
    (NsStep::Rlimit, "prlimit64"),
    (
        NsStep::DropCaps,
        "prctl(PR_SET_SECUREBITS / PR_CAPBSET_DROP / PR_CAP_AMBIENT_CLEAR_ALL), capset(0)",
    ),
    (NsStep::NoNewPrivs, "prctl(PR_SET_NO_NEW_PRIVS, 1)"),
    (NsStep::Landlock, "landlock_restrict_self"),
    (NsStep::Seccomp, "seccomp(SECCOMP_SET_MODE_FILTER)"),
    (NsStep::SignalMask, "rt_sigprocmask(SIG_SETMASK, {})"),
    (NsStep::Execve, "execve"),
];

impl NsStep {
    pub(super) fn from_u32(v: u32) -> Self {
        NS_STEPS
            .get(v as usize)
            .map_or(NsStep::Execve, |(step, _)| *step)
    }

    /// The system call or action, for error messages.
    pub fn describe(self) -> &'static str {
        NS_STEPS
            .get(self as usize)
            .map_or("execve", |(_, what)| what)
    }
}

#[cfg(test)]
mod ns_step_tests {
    use super::*;

    #[test]
    fn the_step_table_is_in_discriminant_order() {
        for (i, (step, _)) in NS_STEPS.iter().enumerate() {
            assert_eq!(*step as usize, i, "{step:?}");
            assert_eq!(NsStep::from_u32(i as u32), *step);
        }
    }
}
