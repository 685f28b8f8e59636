//! The program's own setup, from stdio to `execve`: one ordered list of steps that the
//! Tier B child and the native Tier C program both run (each after the steps of its own:
//! a launched child's session, cgroup and namespaces, `launch::prefix`; Tier C's pid 1
//! and mounts, `linux::ns::setup`), in the manner of nsjail's `containProc`.
//!
//! The steps are written once, in [`run`], against [`ProgramCalls`] — the system calls
//! they make — so that the order is tested without root or a child process (a recorder
//! stands in for the kernel, as youki's `Syscall` trait does), and the real calls live in
//! the unsafe `sys` module (`launch::sys::RawCalls`).
//!
//! [`run`] runs in a `CLONE_VM | CLONE_VFORK` child on borrowed memory: it allocates
//! nothing, takes no lock and never panics; everything it reads was prepared by the
//! parent ([`ExecSpec`]). A failure names its [`Step`], from the one list of every Linux
//! sandbox's setup steps ([`crate::linux::step`]).
//!
//! The order, and why:
//!
//! 1. **stdio** (`dup3` of the three prepared fds, each >= 3 so none is clobbered); with a
//!    terminal ([`ExecSpec::terminal`]), a session of its own when the process is not a
//!    session leader yet (`setsid`), then its stdin as its controlling terminal
//!    (`TIOCSCTTY`): before the id switch and the filters, and after stdio so that the
//!    terminal is the one the program reads;
//! 2. **every other fd close-on-exec** (`close_range(3, ~0, CLOSE_RANGE_CLOEXEC)`: the
//!    landlock and listener fds are still needed below), then the fds a trusted helper
//!    inherits moved into place, then **every fd not needed below closed** (the landlock
//!    ruleset, the listener's socket and a helper's inherited fds stay): the process was
//!    cloned from a supervisor or pid 1 that may hold hundreds of descriptors, and with
//!    `RLIMIT_NOFILE` below their numbers the seccomp listener (the next new fd) would
//!    find no number under the limit (`EMFILE`);
//! 3. **working directory**, while every path is still reachable, and the umask;
//! 4. **rlimits**, before privileges go (raising a hard limit needs them);
//! 5. **capabilities**: securebits and the bounding set first (they need `CAP_SETPCAP`),
//!    the ambient set, then the uid/gid switch (which needs `CAP_SETUID`/`CAP_SETGID`),
//!    then `capset(0)`; a uid change clears the parent-death signal, so it is set again;
//! 6. **`no_new_privs`** (required by unprivileged landlock and seccomp);
//! 7. **landlock**, after `chdir` and before seccomp (which could deny its calls);
//! 8. **seccomp** last, so it cannot block any call above;
//! 9. **an empty signal mask**, then **`execve`**.

use std::ffi::{CString, c_char, c_int};
use std::os::fd::RawFd;

use tierbox_policy::plan::Plan;

use super::step::Step;

/// Capabilities and identity of the program ([`run`] step 5).
#[derive(Debug, Clone, Copy)]
pub struct Privileges {
    /// Lock securebits and empty the bounding and ambient sets (a privileged parent: a
    /// root supervisor, or ns uid 0 in Tier C).
    pub drop_privileged: bool,
    /// `cap_last_cap`.
    pub last_cap: u32,
    /// Switch to this uid and gid, with no supplementary groups.
    pub ids: Option<(u32, u32)>,
    /// Without an id switch: drop the supplementary groups anyway (a trusted helper).
    pub clear_groups: bool,
    /// Leave the capability sets alone (a trusted helper, `bwrap`, that drops them itself
    /// after building its sandbox).
    pub keep_caps: bool,
    /// After an id switch, set the parent-death signal again and check that this parent
    /// (by pid) is still alive: the switch clears it.
    pub rearm_pdeathsig: Option<libc::pid_t>,
}

/// Everything [`run`] reads, prepared by the parent.
#[derive(Debug, Clone, Copy)]
pub struct ExecSpec<'a> {
    /// The child's stdin, stdout and stderr, each >= 3.
    pub stdio: [RawFd; 3],
    /// stdin is a terminal that becomes the program's controlling terminal.
    pub terminal: Option<TerminalSetup>,
    /// `(src, dst)` fds a trusted helper inherits at `dst`; an entry with `src <
    /// inherit_min_src` or `dst` outside `3..inherit_min_src` is skipped.
    pub inherit: &'a [(RawFd, RawFd)],
    /// Lowest source number of an inherited fd (above every destination).
    pub inherit_min_src: RawFd,
    /// NUL-terminated working directory.
    pub cwd: *const c_char,
    /// The program's umask, when it is set.
    pub umask: Option<u32>,
    /// `(resource, limit)` pairs.
    pub rlimits: &'a [(c_int, libc::rlimit64)],
    /// Capabilities and identity.
    pub privileges: Privileges,
    /// The landlock ruleset, or -1.
    pub landlock_fd: RawFd,
    /// The seccomp program, when applied.
    pub seccomp: Option<&'a libc::sock_fprog>,
    /// When >= 0: the filter is installed with a user-notification listener, sent over
    /// this socket (chmod mediation).
    pub seccomp_listener_sock: RawFd,
    /// The program's landlock denials are logged to the kernel's audit subsystem
    /// (landlock ABI 7; read by [`crate::linux::audit`]).
    pub log_landlock: bool,
    /// The calls the seccomp filter refuses are logged to the audit subsystem.
    pub log_seccomp: bool,
    /// NUL-terminated program path.
    pub program: *const c_char,
    /// NULL-terminated argv.
    pub argv: *const *const c_char,
    /// NULL-terminated envp.
    pub envp: *const *const c_char,
}

/// How the program takes its terminal ([`ExecSpec::terminal`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TerminalSetup {
    /// The process leads its session already (a launched child's own `setsid`): only
    /// `TIOCSCTTY`.
    Take,
    /// `setsid` first (native Tier C's program, in pid 1's session until then).
    NewSession,
}

/// The system calls [`run`] makes. Each returns the errno of a failure.
pub trait ProgramCalls {
    /// `dup3(src, dst, 0)`.
    fn dup_to(&self, src: RawFd, dst: RawFd) -> Result<(), i32>;
    /// `setsid()`.
    fn new_session(&self) -> Result<(), i32>;
    /// `ioctl(fd, TIOCSCTTY, 0)`.
    fn controlling_terminal(&self, fd: RawFd) -> Result<(), i32>;
    /// `close_range(first, ~0, CLOSE_RANGE_CLOEXEC)`.
    fn cloexec_from(&self, first: RawFd) -> Result<(), i32>;
    /// `close_range(first, last, 0)`.
    fn close_range(&self, first: RawFd, last: RawFd) -> Result<(), i32>;
    /// `chdir(path)`.
    fn chdir(&self, path: *const c_char) -> Result<(), i32>;
    /// `umask(mask)`.
    fn umask(&self, mask: u32);
    /// `prlimit64(0, resource, limit, NULL)`.
    fn prlimit(&self, resource: c_int, limit: &libc::rlimit64) -> Result<(), i32>;
    /// Lock securebits against regaining root's capabilities.
    fn securebits_noroot(&self) -> Result<(), i32>;
    /// Empty the bounding set (capabilities `0..=last_cap`).
    fn drop_bounding_set(&self, last_cap: u32) -> Result<(), i32>;
    /// Empty the ambient set.
    fn clear_ambient(&self) -> Result<(), i32>;
    /// Switch to `uid`/`gid` with no supplementary groups.
    fn set_ids(&self, uid: u32, gid: u32) -> Result<(), i32>;
    /// Drop the supplementary groups.
    fn clear_groups(&self) -> Result<(), i32>;
    /// `capset` to empty sets.
    fn capset_zero(&self) -> Result<(), i32>;
    /// `PR_SET_PDEATHSIG`, then check that `parent` is still the parent.
    fn die_with_parent(&self, parent: libc::pid_t) -> Result<(), i32>;
    /// `PR_SET_NO_NEW_PRIVS`.
    fn no_new_privs(&self) -> Result<(), i32>;
    /// `landlock_restrict_self(fd)`; with `log`, the exec'd program's denials are
    /// audited (`LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON`).
    fn landlock_restrict(&self, fd: RawFd, log: bool) -> Result<(), i32>;
    /// Install `prog`; with `listener_sock >= 0`, with a user-notification listener sent
    /// over that socket; with `log`, every call it does not allow is audited
    /// (`SECCOMP_FILTER_FLAG_LOG`).
    fn seccomp(&self, prog: &libc::sock_fprog, listener_sock: RawFd, log: bool) -> Result<(), i32>;
    /// `rt_sigprocmask(SIG_SETMASK, {})`.
    fn unblock_signals(&self) -> Result<(), i32>;
    /// `execve`; returns only on failure, with its errno.
    fn execve(
        &self,
        program: *const c_char,
        argv: *const *const c_char,
        envp: *const *const c_char,
    ) -> i32;
}

/// Runs the program's setup and execs it (see the module docs for the order). Returns
/// only on failure: the step and its errno.
pub fn run(calls: &impl ProgramCalls, spec: &ExecSpec<'_>) -> (Step, i32) {
    match setup(calls, spec) {
        Ok(()) => (
            Step::Execve,
            calls.execve(spec.program, spec.argv, spec.envp),
        ),
        Err(failure) => failure,
    }
}

fn setup(calls: &impl ProgramCalls, spec: &ExecSpec<'_>) -> Result<(), (Step, i32)> {
    use Step as S;
    let at = |step: Step| move |errno: i32| (step, errno);
    // 1. stdio.
    for (src, dst) in spec.stdio.into_iter().zip(0..) {
        calls.dup_to(src, dst).map_err(at(S::Stdio))?;
    }
    if let Some(terminal) = spec.terminal {
        if terminal == TerminalSetup::NewSession {
            calls.new_session().map_err(at(S::Setsid))?;
        }
        calls
            .controlling_terminal(0)
            .map_err(at(S::ControllingTerminal))?;
    }
    // 2. Everything else closes at exec; a helper's inherited fds are then moved into
    //    place (dup3 without O_CLOEXEC keeps them across exec).
    calls.cloexec_from(3).map_err(at(S::CloseFds))?;
    for &(src, dst) in spec.inherit {
        if src < spec.inherit_min_src || !(3..spec.inherit_min_src).contains(&dst) {
            continue;
        }
        calls.dup_to(src, dst).map_err(at(S::CloseFds))?;
    }
    close_unneeded(calls, spec).map_err(at(S::CloseFds))?;
    // 3. Working directory and umask.
    calls.chdir(spec.cwd).map_err(at(S::Chdir))?;
    if let Some(mask) = spec.umask {
        calls.umask(mask);
    }
    // 4. rlimits.
    for (resource, limit) in spec.rlimits {
        calls.prlimit(*resource, limit).map_err(at(S::Rlimit))?;
    }
    // 5. Capabilities and identity.
    let p = &spec.privileges;
    if p.drop_privileged {
        calls.securebits_noroot().map_err(at(S::DropBounding))?;
        calls
            .drop_bounding_set(p.last_cap)
            .map_err(at(S::DropBounding))?;
        calls.clear_ambient().map_err(at(S::DropBounding))?;
    }
    match p.ids {
        Some((uid, gid)) => calls.set_ids(uid, gid).map_err(at(S::SetIds))?,
        None if p.clear_groups => calls.clear_groups().map_err(at(S::SetIds))?,
        None => {}
    }
    if !p.keep_caps {
        calls.capset_zero().map_err(at(S::Capset))?;
    }
    if let (Some(_), Some(parent)) = (p.ids, p.rearm_pdeathsig) {
        calls.die_with_parent(parent).map_err(at(S::Pdeathsig))?;
    }
    // 6–8. no_new_privs, landlock, seccomp.
    calls.no_new_privs().map_err(at(S::NoNewPrivs))?;
    if spec.landlock_fd >= 0 {
        calls
            .landlock_restrict(spec.landlock_fd, spec.log_landlock)
            .map_err(at(S::Landlock))?;
    }
    if let Some(prog) = spec.seccomp {
        calls
            .seccomp(prog, spec.seccomp_listener_sock, spec.log_seccomp)
            .map_err(at(S::Seccomp))?;
    }
    // 9. The program starts with an empty signal mask.
    calls.unblock_signals().map_err(at(S::SignalMask))
}

/// Step 2's end: closes every fd from 3 up but a helper's inherited range
/// (`3..inherit_min_src`), the landlock ruleset and the listener's socket, which steps 7
/// and 8 use. No allocation: the kept fds are at most two past the range.
fn close_unneeded(calls: &impl ProgramCalls, spec: &ExecSpec<'_>) -> Result<(), i32> {
    let first = if spec.inherit.is_empty() {
        3
    } else {
        spec.inherit_min_src.max(3)
    };
    let (a, b) = (spec.landlock_fd, spec.seccomp_listener_sock);
    let kept = if a <= b { [a, b] } else { [b, a] };
    let mut next = first;
    for fd in kept {
        if fd < next {
            continue;
        }
        if fd > next {
            calls.close_range(next, fd - 1)?;
        }
        next = fd + 1;
    }
    calls.close_range(next, RawFd::MAX)
}

/// The program's path, argv, environment and working directory as C strings, with the
/// NULL-terminated pointer arrays `execve` takes (pointing into the strings): what
/// [`ExecSpec`] points at, prepared by the parent.
#[derive(Debug)]
pub struct ExecStrings {
    /// The program's absolute path.
    pub program: CString,
    /// The working directory.
    pub cwd: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    argv_ptrs: Vec<*const c_char>,
    envp_ptrs: Vec<*const c_char>,
}

impl ExecStrings {
    /// The strings of `plan` with the environment `env`; `cstring(what, bytes)` makes
    /// each C string, or the caller's error for one with a NUL byte.
    pub fn new<E>(
        plan: &Plan,
        env: &[(String, String)],
        cstring: impl Fn(&'static str, &[u8]) -> Result<CString, E>,
    ) -> Result<Self, E> {
        use std::os::unix::ffi::OsStrExt;
        let program = cstring("program path", plan.program.as_os_str().as_bytes())?;
        let argv: Vec<CString> = plan
            .argv
            .iter()
            .map(|a| cstring("argument", a.as_bytes()))
            .collect::<Result<_, _>>()?;
        let envp: Vec<CString> = env
            .iter()
            .map(|(k, v)| cstring("environment variable", format!("{k}={v}").as_bytes()))
            .collect::<Result<_, _>>()?;
        let cwd = cstring("cwd", plan.cwd.as_os_str().as_bytes())?;
        let argv_ptrs = null_terminated(&argv);
        let envp_ptrs = null_terminated(&envp);
        Ok(Self {
            program,
            cwd,
            argv,
            envp,
            argv_ptrs,
            envp_ptrs,
        })
    }

    /// The NULL-terminated argv (valid while `self` lives).
    pub fn argv(&self) -> *const *const c_char {
        debug_assert_eq!(self.argv_ptrs.len(), self.argv.len() + 1);
        self.argv_ptrs.as_ptr()
    }

    /// The NULL-terminated environment (valid while `self` lives).
    pub fn envp(&self) -> *const *const c_char {
        debug_assert_eq!(self.envp_ptrs.len(), self.envp.len() + 1);
        self.envp_ptrs.as_ptr()
    }
}

/// `strings`' pointers followed by a NULL, for `execve`.
pub fn null_terminated(strings: &[CString]) -> Vec<*const c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

#[cfg(test)]
#[path = "exec_tests.rs"]
pub(crate) mod tests;
