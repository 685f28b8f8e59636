//! Native Tier C pid 1's setup, from its first call to the report that the program runs:
//! one ordered list of steps, written once in [`init_setup`] against [`InitCalls`], the
//! system calls they make, so that the order is tested without root or a namespace (a
//! recorder stands in for the kernel); the real calls are in `sys` (`pid1.rs`).
//!
//! [`init_setup`] runs in pid 1, on a copy-on-write copy of the supervisor's memory: it
//! allocates nothing, takes no lock and never panics; everything it reads was prepared by
//! the supervisor ([`NsSpec`]). A failure names its [`Step`] (and for a mount op, the
//! op's index and sub-call).
//!
//! The order, and why:
//!
//! 1. **default signal dispositions**: signals stay blocked (inherited from the cloning
//!    thread) until the program's exec, and pid 1 only ever waits for them synchronously;
//! 2. **the death signal** (the supervisor's thread), then a check that it was not
//!    already gone: the supervisor holds the read end of the report pipe until it has our
//!    first record, so no reader on it means it died (`getppid()` is 0 across a pid
//!    namespace);
//! 3. **the run's cgroup**, before any setup allocates memory or forks: pid 1 moves
//!    itself (a task moving itself through v1 `tasks` skips the global threadgroup lock);
//!    the fds were opened by the supervisor, whose credentials the kernel checks;
//! 4. **its own id maps**, before anything else needs an id: a process may map its own
//!    outside euid/egid with one line, `setgroups` denied before `gid_map`; a root
//!    supervisor mapping another host uid writes them for us (only a privileged process
//!    may), and pid 1 waits for its word instead;
//! 5. **a session** of its own: no controlling terminal of the supervisor's;
//! 6. **the hostname** in the new UTS namespace (it holds `CAP_SYS_ADMIN` in its user
//!    namespace);
//! 7. **loopback up** in the new network namespace, unless the supervisor made the
//!    namespace and did it (a pooled namespace);
//! 8. **the egress proxy's listener** and the host ports' (`egress.host_ports`), made here
//!    so that they live in this namespace, and handed to the supervisor, which serves
//!    them: before the program exists, so its first connection finds them;
//! 9. **umask 0**, so the ops create exact modes, then **the mount ops**, in the
//!    planner's order (a detached idmapped tree moved in instead of an op, or a scratch
//!    filesystem's fd sent to the supervisor);
//! 10. **landlock rules** for the mounts that exist only in here (the program restricts
//!     itself with the ruleset just before seccomp);
//! 11. **pid 1's identity**: the supervisor's argv wiped from `/proc/1/cmdline`, not
//!     dumpable (its memory is a copy of the supervisor's), a recognisable name;
//! 12. **the program**, cloned (`CLONE_VFORK` suspends pid 1 until it execs or fails);
//! 13. **every fd closed** but the report pipe and the reaper's image, then what pid 1 no
//!     longer needs dropped (it only waits and forwards signals): under a root supervisor
//!     ns uid 0 for the sandbox's uid (the death signal this clears is armed again by the
//!     reaper), its capabilities, `no_new_privs`;
//! 14. **the report** that the program runs, with its pid.

use std::ffi::CStr;
use std::os::fd::RawFd;

use super::sys::{NsOp, NsSpec, OpKind, Report, ReportTag, Step, SubCall};
use crate::linux::identity::{SANDBOX_GID, SANDBOX_UID};

/// A failed step inside a child, as its report carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Failure {
    /// The step.
    pub step: Step,
    /// Its errno.
    pub errno: i32,
    /// For [`Step::MountOp`]: the op's index in [`NsSpec::ops`].
    pub op_index: u32,
    /// For [`Step::MountOp`]: the sub-call that failed (its discriminant).
    pub sub: u32,
}

impl Failure {
    /// `step` failed with `errno` (not a mount op).
    pub(crate) fn at(step: Step, errno: i32) -> Self {
        Self {
            step,
            errno,
            op_index: 0,
            sub: 0,
        }
    }
}

/// The failure of `step` with the errno it is given.
pub(crate) fn fail(step: Step) -> impl Fn(i32) -> Failure {
    move |e| Failure::at(step, e)
}

/// The system calls [`init_setup`] makes. Each returns the errno of a failure (a mount
/// op's, with its sub-call).
pub(crate) trait InitCalls {
    /// Every signal's disposition back to the default.
    fn reset_signal_handlers(&self);
    /// `prctl(PR_SET_PDEATHSIG, SIGKILL)`.
    fn set_pdeathsig(&self) -> Result<(), i32>;
    /// The report pipe `fd` has no reader (the supervisor is gone).
    fn supervisor_gone(&self, fd: RawFd) -> bool;
    /// `write(fd, "0")` to a cgroup attach file.
    fn cgroup_attach(&self, fd: RawFd) -> Result<(), i32>;
    /// Blocks until one byte can be read from the pipe `fd`.
    fn wait_for_byte(&self, fd: RawFd) -> Result<(), i32>;
    /// `close(fd)`.
    fn close(&self, fd: RawFd);
    /// One write of `content` to the `/proc/self` file `path`.
    fn write_proc_self(&self, path: &CStr, content: &[u8]) -> Result<(), i32>;
    /// `setsid()`.
    fn setsid(&self) -> Result<(), i32>;
    /// `sethostname(name)`.
    fn sethostname(&self, name: &[u8]) -> Result<(), i32>;
    /// `lo` up.
    fn loopback_up(&self) -> Result<(), i32>;
    /// The egress proxy's listener on `127.0.0.1:port`, sent over `sock`.
    fn send_listener(&self, sock: RawFd, port: u16) -> Result<(), i32>;
    /// Fds of our own user and network namespaces, sent over `sock` (in that order).
    fn send_namespaces(&self, sock: RawFd) -> Result<(), i32>;
    /// `umask(mask)`.
    fn umask(&self, mask: u32);
    /// A detached tree moved onto `dst`.
    fn move_tree(&self, tree: RawFd, dst: &CStr) -> Result<(), (SubCall, i32)>;
    /// An [`OpKind::SendFd`] op: an `O_PATH` fd of its destination sent over `sock`.
    fn send_dir_fd(&self, op: &NsOp<'_>, sock: RawFd) -> Result<(), (SubCall, i32)>;
    /// Any other op.
    fn run_op(&self, op: &NsOp<'_>) -> Result<(), (SubCall, i32)>;
    /// A landlock rule for `path` with `access`, added to `ruleset`.
    fn add_landlock_rule(&self, ruleset: RawFd, path: &CStr, access: u64) -> Result<(), i32>;
    /// Zeroes the supervisor's argv area `[start, end)` in this copy.
    fn wipe_arg_area(&self, area: (usize, usize));
    /// `prctl(PR_SET_DUMPABLE, 0)`.
    fn not_dumpable(&self) -> Result<(), i32>;
    /// `prctl(PR_SET_DUMPABLE, on)`.
    fn set_dumpable(&self, on: bool) -> Result<(), i32>;
    /// `prctl(PR_SET_NAME, name)`.
    fn set_name(&self, name: &CStr) -> Result<(), i32>;
    /// Clones the program and waits for its exec: its pid, or the step it failed at.
    fn start_program(&self, spec: &NsSpec<'_>) -> Result<libc::pid_t, (Step, i32)>;
    /// Closes every fd but those in `keep`.
    fn close_all_but(&self, keep: &[RawFd; 2]);
    /// Switch to `uid`/`gid` with no supplementary groups.
    fn set_ids(&self, uid: u32, gid: u32) -> Result<(), i32>;
    /// `capset` to empty sets.
    fn capset_zero(&self) -> Result<(), i32>;
    /// `PR_SET_NO_NEW_PRIVS`.
    fn no_new_privs(&self) -> Result<(), i32>;
    /// One write of `report` to the report pipe `fd`.
    fn report(&self, fd: RawFd, report: &Report) -> Result<(), i32>;
}

/// The ordered setup of pid 1 (see the module docs). Returns the program's pid (in the
/// namespace) once it runs and the supervisor has been told.
pub(crate) fn init_setup(
    calls: &impl InitCalls,
    spec: &NsSpec<'_>,
) -> Result<libc::pid_t, Failure> {
    use Step as S;
    // 1–3. Dispositions, death signal, the run's cgroup.
    calls.reset_signal_handlers();
    calls.set_pdeathsig().map_err(fail(S::Pdeathsig))?;
    if calls.supervisor_gone(spec.report_fd) {
        return Err(Failure::at(S::Pdeathsig, libc::ESRCH));
    }
    for &fd in spec.cgroup_fds {
        calls.cgroup_attach(fd).map_err(fail(S::CgroupAttach))?;
    }
    // 4. The id maps: the supervisor's word, or our own.
    if spec.maps_ready_fd >= 0 {
        calls
            .wait_for_byte(spec.maps_ready_fd)
            .map_err(fail(S::UidMap))?;
        calls.close(spec.maps_ready_fd);
    } else {
        // pid 1 inherits the supervisor's "not dumpable" (it hardens itself), which makes
        // its /proc/self files host root's until its user namespace maps root — never,
        // under an unprivileged supervisor: its own maps are written while dumpable, and
        // it is not dumpable again before anything else runs (a failure ends pid 1).
        calls.set_dumpable(true).map_err(fail(S::UidMap))?;
        let proc_self = |path, content| calls.write_proc_self(path, content);
        proc_self(c"/proc/self/uid_map", spec.uid_map).map_err(fail(S::UidMap))?;
        proc_self(c"/proc/self/setgroups", b"deny").map_err(fail(S::Setgroups))?;
        proc_self(c"/proc/self/gid_map", spec.gid_map).map_err(fail(S::GidMap))?;
        calls.set_dumpable(false).map_err(fail(S::GidMap))?;
    }
    // 5–8. Session, hostname, loopback, the egress proxy's listener.
    calls.setsid().map_err(fail(S::Setsid))?;
    calls
        .sethostname(spec.hostname)
        .map_err(fail(S::Hostname))?;
    if spec.loopback_up {
        calls.loopback_up().map_err(fail(S::Loopback))?;
    }
    if spec.proxy_fd >= 0 {
        for &port in spec.listen_ports {
            calls
                .send_listener(spec.proxy_fd, port)
                .map_err(fail(S::EgressListener))?;
        }
        if spec.send_namespaces {
            calls
                .send_namespaces(spec.proxy_fd)
                .map_err(fail(S::EgressListener))?;
        }
        calls.close(spec.proxy_fd);
    }
    // 9. Exact modes, then the filesystem, op by op.
    calls.umask(0);
    for (i, op) in spec.ops.iter().enumerate() {
        mount_op(calls, spec, i, op)?;
    }
    // 10. Landlock rules for pid 1's own mounts.
    if spec.landlock_fd >= 0 {
        for &(path, access) in spec.landlock_rules {
            calls
                .add_landlock_rule(spec.landlock_fd, path, access)
                .map_err(fail(S::LandlockRules))?;
        }
    }
    // 11. pid 1's identity.
    calls.wipe_arg_area(spec.arg_area);
    calls.not_dumpable().map_err(fail(S::InitIdentity))?;
    calls
        .set_name(spec.init_name)
        .map_err(fail(S::InitIdentity))?;
    // 12. The program.
    let pid = calls
        .start_program(spec)
        .map_err(|(step, errno)| Failure::at(step, errno))?;
    // 13. Hold nothing of the run; drop what pid 1 no longer needs.
    calls.close_all_but(&[spec.report_fd, spec.reaper_fd]);
    if spec.switch_ids {
        calls
            .set_ids(SANDBOX_UID, SANDBOX_GID)
            .map_err(fail(S::InitIdentity))?;
    }
    let _ = calls.capset_zero();
    let _ = calls.no_new_privs();
    // 14. A supervisor that is gone cannot be told; PR_SET_PDEATHSIG kills us anyway.
    let started = Report {
        tag: ReportTag::Started as u32,
        step: 0,
        value: pid,
        ..Report::default()
    };
    let _ = calls.report(spec.report_fd, &started);
    Ok(pid)
}

/// Step 9's op `i`: the detached tree moved in for it, its fd sent, or the op run.
fn mount_op(
    calls: &impl InitCalls,
    spec: &NsSpec<'_>,
    i: usize,
    op: &NsOp<'_>,
) -> Result<(), Failure> {
    let moved = spec.moved_trees.iter().find(|(at, _)| *at == i);
    let result = match moved {
        Some(&(_, tree)) => calls.move_tree(tree, op.dst),
        None if op.kind == OpKind::SendFd => calls.send_dir_fd(op, spec.fs_fd),
        None => calls.run_op(op),
    };
    result.map_err(|(sub, errno)| Failure {
        step: Step::MountOp,
        errno,
        op_index: i as u32,
        sub: sub as u32,
    })
}

#[cfg(test)]
#[path = "setup_tests.rs"]
mod tests;
