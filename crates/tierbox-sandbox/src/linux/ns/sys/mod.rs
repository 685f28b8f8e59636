//! Raw system calls of the native Tier C child: the sandbox's pid 1 (setup, then the
//! exec of the reaper) and the program it starts. Every function that runs in a child
//! makes raw system calls only: no allocation, no locks, no glibc function that touches
//! process-wide state, no panics (see [`super`] for why).
//!
//! Two processes are created per run:
//!
//! 1. **pid 1** (`init_main`) is cloned by the supervisor with every Tier C namespace
//!    and *without* `CLONE_VM`: it runs on a copy-on-write copy of the supervisor's memory,
//!    so it can outlive the `clone` call and serve as the namespace's reaper. It writes
//!    its own id maps, sets the hostname, brings `lo` up, carries out the mount ops, then
//!    starts the program, reports that, and execs `tierbox-init` ([`super::init`]), the
//!    freestanding reaper, which lets go of the whole copy of the supervisor at once.
//! 2. **the program** (`program_main`) is cloned by pid 1 with `CLONE_VM | CLONE_VFORK`
//!    (posix_spawn-style: pid 1 is suspended until the exec, so the failure cells in the
//!    spec are shared) and does the per-program steps: stdio, cwd, rlimits, capabilities,
//!    `no_new_privs`, seccomp, `execve`.
//!
//! pid 1 reports to the supervisor over a pipe ([`Report`], fixed-size records, each one
//! atomic since it is smaller than `PIPE_BUF`): one [`ReportTag::Failed`] *or*
//! [`ReportTag::Started`] record once setup is over, then one [`ReportTag::Exited`]
//! record with the program's wait status and [`ReapedUsage`] once pid 1 has killed and
//! reaped every other process of the namespace, just before it exits.
//!
//! One file per role: [`pid1`] (the real calls of its setup, whose order is
//! [`super::setup`], then the reaper), [`program`] (the program's own
//! steps), [`mount_ops`] (the filesystem ops pid 1 carries out), [`net`] (hostname,
//! loopback, the egress listener and fd passing), [`raw`] (the small system-call
//! wrappers they share; failures name a [`Step`] of the one list); the supervisor
//! side (stacks, `clone` of pid 1, network namespaces, reading reports) is here.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

pub use super::init::report::{REPORT_BYTES, ReapedUsage, Report, ReportTag};
use super::init::{reaper, sys as init_sys};

use super::setup::Failure;
use crate::linux::identity::{SANDBOX_GID, SANDBOX_UID};
use crate::linux::sys as lsys;
use crate::linux::sys::{check, errno, reset_signal_handlers};

mod mount_ops;
mod net;
mod pid1;
mod program;
mod raw;

pub use crate::linux::step::Step;
pub use mount_ops::{
    Expect, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY, NsOp,
    OpKind, describe_sub,
};
pub(crate) use mount_ops::{SubCall, mount_setattr, openat2_raw};
use net::loopback_up;
pub use net::{SocketFactory, connect_loopback, recv_fd, seqpacket_pair};
use pid1::init_main;
pub(crate) use raw::close;

/// Stack for each of the two cloned children, in bytes. Each runs one small function with
/// no recursion; 64 KiB leaves ample room for the glibc `clone` trampoline and the frames.
pub const NS_STACK_BYTES: usize = 64 * 1024;

/// Number of rlimits the program gets (CPU, NPROC, NOFILE, FSIZE, CORE): Tier B's.
pub const NS_RLIMIT_COUNT: usize = crate::launch::sys::RLIMIT_COUNT;

/// The umask the program starts with (mount setup runs with 0 so modes are exact).
pub const PROGRAM_UMASK: u32 = 0o022;

/// Everything the sandbox's pid 1 and the program need, prepared by the supervisor.
/// pid 1 reads its copy-on-write copy; the program shares pid 1's (CLONE_VM).
#[derive(Debug)]
pub struct NsSpec<'a> {
    /// `"<inside> <outside> 1\n"`.
    pub uid_map: &'a [u8],
    /// `"<inside> <outside> 1\n"`.
    pub gid_map: &'a [u8],
    /// The sandbox's hostname.
    pub hostname: &'a [u8],
    /// The filesystem steps, in order.
    pub ops: &'a [NsOp<'a>],
    /// Absolute program path.
    pub program: &'a CStr,
    /// NULL-terminated argv pointer array.
    pub argv: *const *const c_char,
    /// NULL-terminated envp pointer array.
    pub envp: *const *const c_char,
    /// Working directory (in the new root).
    pub cwd: &'a CStr,
    /// pid 1's name (`comm`).
    pub init_name: &'a CStr,
    /// Child ends of stdio, all >= 3.
    pub stdin_fd: RawFd,
    /// stdout write end.
    pub stdout_fd: RawFd,
    /// stderr write end.
    pub stderr_fd: RawFd,
    /// Write end of the report pipe (>= 3).
    pub report_fd: RawFd,
    /// When >= 0: the program opens a terminal of [`NsSpec::terminal_size`] from the
    /// sandbox's own devpts (`/dev/ptmx`), sends its primary side to the supervisor over
    /// this socket and runs on the secondary side instead of the stdio fds above, as its
    /// controlling terminal in a session of its own. -1: no terminal.
    pub terminal_fd: RawFd,
    /// The terminal's `(rows, cols)`.
    pub terminal_size: (u16, u16),
    /// Whether pid 1 brings `lo` up: true when it created the network namespace itself;
    /// false for a namespace from the pool ([`super::netns_pool`]), whose `lo` the
    /// supervisor brought up, and which pid 1 has no capability over.
    pub loopback_up: bool,
    /// pid 1's end of a unix socket pair: when >= 0, pid 1 makes a listener on
    /// `127.0.0.1:PORT` in the new network namespace for each of
    /// [`NsSpec::listen_ports`] and sends them to the supervisor through this socket, in
    /// order. -1: no listeners.
    pub proxy_fd: RawFd,
    /// The ports of those listeners: the egress proxy's first when the plan needs it,
    /// then each `egress.host_ports` entry.
    pub listen_ports: &'a [u16],
    /// After those listeners, send fds of pid 1's own user and network namespaces over
    /// `proxy_fd` (`/proc/self/ns/user`, `/proc/self/ns/net`): for a supervisor that
    /// publishes ports but may not join the network namespace, whose helper joins both
    /// (pid 1 is not dumpable, so nobody else may open them).
    pub send_namespaces: bool,
    /// pid 1's end of a unix socket pair over which the [`OpKind::SendFd`] ops send the
    /// sandbox's scratch filesystems to the supervisor: `/tmp`, then in overlay mode the
    /// overlay's upper-layer tmpfs; -1 when the plan has neither.
    pub fs_fd: RawFd,
    /// The program's rlimits.
    pub rlimits: [(c_int, libc::rlimit64); NS_RLIMIT_COUNT],
    /// `cap_last_cap`.
    pub last_cap: u32,
    /// The seccomp program, when applied.
    pub seccomp: Option<&'a libc::sock_fprog>,
    /// When >= 0: the program installs the filter with a user-notification listener and
    /// sends it to the supervisor over this socket (the filter hands the argument rules'
    /// refusals off, see [`crate::linux::seccomp::SeccompSpec::notify_refusals`]).
    pub seccomp_listener_fd: RawFd,
    /// Write-only fds of the run cgroup's `tasks` (v1, per controller) or `cgroup.procs`
    /// (v2) files, opened by the supervisor; pid 1 writes `0` to each before anything
    /// else, so everything in the sandbox is accounted and limited.
    pub cgroup_fds: &'a [RawFd],
    /// The landlock ruleset (host grants already added by the supervisor), or -1.
    pub landlock_fd: RawFd,
    /// The program's landlock denials are audited (ABI 7).
    pub log_landlock: bool,
    /// The calls its seccomp filter refuses are audited.
    pub log_seccomp: bool,
    /// Rules pid 1 adds for the mounts it creates itself (paths in the new root, after
    /// the final pivot): `(path, allowed access)`.
    pub landlock_rules: &'a [(&'a CStr, u64)],
    /// The supervisor's argv area `[start, end)` (`/proc/self/stat` fields 48–49), wiped
    /// in pid 1's copy so `/proc/1/cmdline` does not show the supervisor's arguments.
    pub arg_area: (usize, usize),
    /// Top of the program's clone stack (16-byte aligned).
    pub program_stack_top: *mut c_void,
    /// The sealed memfd holding `tierbox-init` ([`super::init::image_fd`]), which pid 1
    /// execs once the program runs; -1: pid 1 reaps in process.
    pub reaper_fd: RawFd,
    /// When >= 0: the supervisor writes pid 1's id maps (a root supervisor mapping the
    /// sandbox to another host uid, which only a privileged process may do) and then one
    /// byte to this pipe, which pid 1 reads instead of writing `uid_map`/`gid_map` itself.
    pub maps_ready_fd: RawFd,
    /// The program, and pid 1 once the program runs, switch to uid and gid
    /// [`crate::linux::identity::SANDBOX_UID`] (pid 1's setup runs as ns uid 0); set with
    /// [`NsSpec::maps_ready_fd`].
    pub switch_ids: bool,
    /// Detached idmapped mount trees moved into place instead of running the op at that
    /// index of [`NsSpec::ops`] (a writable bind whose owner is not the sandbox's uid).
    pub moved_trees: &'a [(usize, RawFd)],
    /// Failure cells the program writes (shared with pid 1 through CLONE_VM).
    pub fail_step: AtomicU32,
    /// errno of the failure.
    pub fail_errno: AtomicI32,
}

// One record is one write of at most PIPE_BUF bytes: atomic, never interleaved.
const _: () = assert!(REPORT_BYTES <= libc::PIPE_BUF);

impl Report {
    /// How the program ended, for a [`ReportTag::Exited`] record (`None` for any other):
    /// its code or signal, and what pid 1 reaped used.
    pub fn exited(&self) -> Option<crate::launch::sys::ExitInfo> {
        if self.tag != ReportTag::Exited as u32 {
            return None;
        }
        let status = self.value;
        let (code, signal) = if libc::WIFEXITED(status) {
            (Some(libc::WEXITSTATUS(status)), None)
        } else {
            (None, Some(libc::WTERMSIG(status)))
        };
        Some(crate::launch::sys::ExitInfo {
            code,
            signal,
            user_us: self.usage.user_us,
            sys_us: self.usage.sys_us,
            max_rss_bytes: self.usage.max_rss_kib.saturating_mul(1024),
        })
    }

    /// The failed step.
    pub fn ns_step(&self) -> Step {
        Step::from_u32(self.step)
    }
}

// ---- supervisor side ------------------------------------------------------------------

/// A stack for a cloned child: an anonymous mapping of its own (never heap memory),
/// page aligned, reused per thread ([`LaunchStacks`]).
#[derive(Debug)]
pub struct NsStack {
    base: *mut c_void,
    len: usize,
}

impl NsStack {
    /// A zeroed stack of [`NS_STACK_BYTES`]. Aborts the process if the kernel cannot map
    /// 64 KiB (as an allocation failure would).
    pub fn new() -> Self {
        let len = NS_STACK_BYTES;
        // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            std::alloc::handle_alloc_error(
                std::alloc::Layout::from_size_align(len, 16)
                    .unwrap_or(std::alloc::Layout::new::<u128>()),
            );
        }
        Self { base, len }
    }

    /// A placeholder with no mapping (dropping it unmaps nothing).
    const fn unmapped() -> Self {
        Self {
            base: std::ptr::null_mut(),
            len: 0,
        }
    }

    /// The (16-byte aligned: the mapping is page aligned) top of the stack.
    pub fn top(&self) -> *mut c_void {
        self.base.wrapping_byte_add(self.len)
    }

    /// The mapping's address range `[start, end)`.
    #[cfg(test)]
    pub fn range(&self) -> (usize, usize) {
        (self.base as usize, self.base as usize + self.len)
    }
}

impl Drop for NsStack {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: our own mapping, unmapped once. A child cloned without CLONE_VM keeps
            // its copy; one cloned with CLONE_VM | CLONE_VFORK has exec'd or exited before
            // the cloning code returns and drops this.
            unsafe { libc::munmap(self.base, self.len) };
        }
    }
}

impl Default for NsStack {
    fn default() -> Self {
        Self::new()
    }
}

/// The two stacks of a launch (pid 1's, and its program child's inside pid 1), kept by
/// the launching thread for its next launch when dropped.
///
/// Mapping and unmapping them per launch costs two `munmap`s, each a TLB shootdown
/// across every CPU the supervisor's threads ran on (an inter-processor interrupt,
/// slow in a VM). Reuse is sound because the supervisor never uses this memory: pid 1
/// gets a copy-on-write copy of it at `clone`, and the only write on the supervisor's
/// side is the `clone` wrapper storing the entry point and argument at the top of the
/// stack just before the system call — per thread, so never two launches at once.
#[derive(Debug)]
pub struct LaunchStacks {
    /// pid 1's stack.
    pub init: NsStack,
    /// The program child's stack (used in pid 1's copy, with `CLONE_VM | CLONE_VFORK`).
    pub program: NsStack,
}

thread_local! {
    static IDLE_STACKS: std::cell::RefCell<Option<(NsStack, NsStack)>> =
        const { std::cell::RefCell::new(None) };
}

impl LaunchStacks {
    /// This thread's stacks from its last launch, or new ones.
    pub fn take() -> Self {
        let idle = IDLE_STACKS
            .try_with(|slot| slot.try_borrow_mut().ok().and_then(|mut s| s.take()))
            .ok()
            .flatten();
        let (init, program) = idle.unwrap_or_else(|| (NsStack::new(), NsStack::new()));
        Self { init, program }
    }
}

impl Drop for LaunchStacks {
    fn drop(&mut self) {
        let stacks = (
            std::mem::replace(&mut self.init, NsStack::unmapped()),
            std::mem::replace(&mut self.program, NsStack::unmapped()),
        );
        // On a thread being torn down, or one that holds a set already, they are unmapped.
        let _ = IDLE_STACKS.try_with(|slot| {
            if let Ok(mut slot) = slot.try_borrow_mut()
                && slot.is_none()
            {
                *slot = Some(stacks);
            }
        });
    }
}

/// Clones the sandbox's pid 1 with `flags` (the namespaces) `| CLONE_PIDFD | SIGCHLD`,
/// without `CLONE_VM`: it runs `init_main` on a copy-on-write copy of this process.
/// Every signal is blocked on the calling thread around the clone, so the child starts
/// with all signals blocked and no handler of ours can run in it. Returns (pid, pidfd).
///
/// With `netns = Some((pooled, own))`, `flags` must not contain `CLONE_NEWNET`: the
/// calling thread joins `pooled` for the `clone` alone (a child starts in its creator's
/// thread's network namespace) and returns to `own`, its own namespace, right after.
/// Returning cannot fail for a process that could join (the same capability, a
/// namespace it was already in); if it ever did, this thread would keep running in the
/// sandbox's loopback-only namespace, so the process aborts rather than go on.
pub fn clone_init(
    spec: &NsSpec<'_>,
    stack: &NsStack,
    flags: c_int,
    netns: Option<(&OwnedFd, &OwnedFd)>,
) -> io::Result<(libc::pid_t, OwnedFd)> {
    let mut pidfd: c_int = -1;
    let top = stack.top();
    let flags = flags | libc::CLONE_PIDFD | libc::SIGCHLD;
    if let Some((pooled, _)) = netns {
        setns_net(pooled)?;
    }
    let pid = crate::launch::sys::with_all_signals_blocked(|| {
        // SAFETY: `init_main` only makes raw system calls on its copy of `spec`; `top` is
        // the aligned end of a live stack buffer (copied into the child with the rest of
        // our memory); CLONE_PIDFD stores the pidfd in `pidfd` (the parent_tid slot).
        unsafe {
            libc::clone(
                init_main,
                top,
                flags,
                spec as *const NsSpec<'_> as *mut c_void,
                &mut pidfd as *mut c_int,
            )
        }
    });
    let clone_error = io::Error::last_os_error();
    if let Some((_, own)) = netns
        && let Err(e) = setns_net(own)
    {
        eprintln!(
            "tierbox: cannot return to the supervisor's network namespace after a sandbox \
             clone ({e}); aborting rather than run on inside the sandbox's namespace"
        );
        std::process::abort();
    }
    if pid == -1 {
        return Err(clone_error);
    }
    // SAFETY: on success the kernel returned a fresh pidfd that we now own.
    Ok((pid, unsafe { OwnedFd::from_raw_fd(pidfd) }))
}

/// `setns(fd, CLONE_NEWNET)`: the calling thread joins the network namespace `fd` names.
pub fn setns_net(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: setns with an fd we own and a constant flag.
    if unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) } == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `unshare(CLONE_NEWNET)`: the calling thread moves into a new network namespace (owned
/// by its user namespace), brings its `lo` up, and returns an fd for it
/// (`/proc/thread-self/ns/net`). The thread stays in the new namespace: the caller
/// returns with [`setns_net`].
pub fn new_netns_with_loopback() -> io::Result<OwnedFd> {
    // SAFETY: unshare with a constant flag; affects this thread only.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } == -1 {
        return Err(io::Error::last_os_error());
    }
    loopback_up().map_err(io::Error::from_raw_os_error)?;
    own_netns()
}

/// An fd for the calling thread's network namespace (`/proc/thread-self/ns/net`).
pub fn own_netns() -> io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated constant path; the returned fd is checked before use.
    let fd = unsafe {
        libc::open(
            c"/proc/thread-self/ns/net".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd that we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads one [`Report`] from the report pipe. `Ok(None)` at end of file (pid 1 is gone
/// without reporting). Blocks unless the fd is non-blocking.
pub fn read_report(fd: &OwnedFd) -> io::Result<Option<Report>> {
    let mut buf = [0u8; REPORT_BYTES];
    let mut got = 0;
    while got < REPORT_BYTES {
        let rest = buf.get_mut(got..).unwrap_or_default();
        // SAFETY: `rest` is a valid writable slice of the stated length.
        let n = unsafe { libc::read(fd.as_raw_fd(), rest.as_mut_ptr() as *mut c_void, rest.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return if got == 0 {
                Ok(None)
            } else {
                Err(io::Error::from(io::ErrorKind::UnexpectedEof))
            };
        }
        got += n as usize;
    }
    Ok(Some(Report::decode(&buf)))
}

/// The supervisor's argv area (`/proc/self/stat` fields 48 and 49), or (0, 0).
pub fn own_arg_area() -> (usize, usize) {
    static AREA: std::sync::OnceLock<(usize, usize)> = std::sync::OnceLock::new();
    *AREA.get_or_init(read_arg_area)
}

fn read_arg_area() -> (usize, usize) {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return (0, 0);
    };
    let Some(close) = stat.rfind(')') else {
        return (0, 0);
    };
    // Fields after the command name start at field 3; field 48 is the 46th of them.
    let mut rest = stat.get(close + 1..).unwrap_or_default().split_whitespace();
    let start = rest.nth(45).and_then(|s| s.parse().ok());
    let end = rest.next().and_then(|s| s.parse().ok());
    match (start, end) {
        (Some(s), Some(e)) => (s, e),
        _ => (0, 0),
    }
}
