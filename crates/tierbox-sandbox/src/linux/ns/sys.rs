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

use std::ffi::{CStr, c_char, c_int, c_void};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

pub use super::init::reaper::FORWARDED_SIGNALS;
pub use super::init::report::{REPORT_BYTES, ReapedUsage, Report, ReportTag};
use super::init::{reaper, sys as init_sys};

use crate::linux::identity::{SANDBOX_GID, SANDBOX_UID};
use crate::linux::sys as lsys;
use crate::linux::sys::{check, errno, reset_signal_handlers};

/// Stack for each of the two cloned children, in bytes. Each runs one small function with
/// no recursion; 64 KiB leaves ample room for the glibc `clone` trampoline and the frames.
pub const NS_STACK_BYTES: usize = 64 * 1024;

/// Number of rlimits the program gets (CPU, NPROC, NOFILE, FSIZE, CORE): Tier B's.
pub const NS_RLIMIT_COUNT: usize = crate::spawn::sys::RLIMIT_COUNT;

/// The umask the program starts with (mount setup runs with 0 so modes are exact).
pub const PROGRAM_UMASK: u32 = 0o022;

/// `open_tree(2)` flag: clone the mount instead of opening it in place.
const OPEN_TREE_CLONE: u32 = 1;
/// `AT_RECURSIVE`: clone / set attributes on the whole subtree.
const AT_RECURSIVE: u32 = 0x8000;
/// `move_mount(2)` flag: the source is the fd itself (empty path).
const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x4;
/// `mount_setattr(2)` attributes (uapi `linux/mount.h`).
pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
/// No setuid/setgid on exec.
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
/// No device access.
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
/// No exec.
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;

/// `struct mount_attr` (uapi `linux/mount.h`, `MOUNT_ATTR_SIZE_VER0` = 32 bytes).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

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
    /// Mount data for [`OpKind::Mount`].
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
    /// `open(dst, O_CREAT | O_EXCL | O_NOFOLLOW | O_WRONLY, mode)`, then `close`.
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
    /// Same parent, `openat(fd, dst, O_CREAT | O_EXCL | O_NOFOLLOW | O_WRONLY, mode)`.
    PlaceholderFile,
    /// `pivot_root(dst, src)`, `chdir("/")`: the first pivot into the staging tmpfs.
    PivotInto,
    /// `chdir(dst)`, `pivot_root(".", ".")`, `umount2(".", MNT_DETACH)`, `chdir("/")`.
    PivotFinal,
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
}

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
    fn from_u32(v: u32) -> Self {
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

/// The sub-call of a mount op that failed (`Report::sub`).
pub fn describe_sub(sub: u32) -> &'static str {
    match sub {
        SUB_MOUNT => "mount",
        SUB_MKDIR => "mkdir",
        SUB_OPEN => "open",
        SUB_SYMLINK => "symlink",
        SUB_OPENAT2 => "openat2(O_PATH, RESOLVE_NO_SYMLINKS)",
        SUB_FSTAT => "fstat",
        SUB_KIND => "kind check (source is not what the plan expects)",
        SUB_OPEN_TREE => "open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)",
        SUB_SETATTR => "mount_setattr",
        SUB_MOVE_MOUNT => "move_mount",
        SUB_PIVOT => "pivot_root",
        SUB_UMOUNT => "umount2(MNT_DETACH)",
        SUB_CHDIR => "chdir",
        _ => "unknown",
    }
}

const SUB_MOUNT: u32 = 1;
const SUB_MKDIR: u32 = 2;
const SUB_OPEN: u32 = 3;
const SUB_SYMLINK: u32 = 4;
const SUB_OPENAT2: u32 = 5;
const SUB_FSTAT: u32 = 6;
const SUB_KIND: u32 = 7;
const SUB_OPEN_TREE: u32 = 8;
const SUB_SETATTR: u32 = 9;
const SUB_MOVE_MOUNT: u32 = 10;
const SUB_PIVOT: u32 = 11;
const SUB_UMOUNT: u32 = 12;
const SUB_CHDIR: u32 = 13;

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
    /// Whether pid 1 brings `lo` up: true when it created the network namespace itself;
    /// false for a namespace from the pool ([`super::netns_pool`]), whose `lo` the
    /// supervisor brought up, and which pid 1 has no capability over.
    pub loopback_up: bool,
    /// pid 1's end of a unix socket pair: when >= 0, pid 1 makes the egress proxy's
    /// listener on `127.0.0.1:`[`NsSpec::proxy_port`] in the new network namespace and
    /// sends it to the supervisor through this socket. -1: no proxy.
    pub proxy_fd: RawFd,
    /// The egress proxy's port inside the namespace.
    pub proxy_port: u16,
    /// The program's rlimits.
    pub rlimits: [(c_int, libc::rlimit64); NS_RLIMIT_COUNT],
    /// `cap_last_cap`.
    pub last_cap: u32,
    /// The seccomp program, when applied.
    pub seccomp: Option<&'a libc::sock_fprog>,
    /// Write-only fds of the run cgroup's `tasks` (v1, per controller) or `cgroup.procs`
    /// (v2) files, opened by the supervisor; pid 1 writes `0` to each before anything
    /// else, so everything in the sandbox is accounted and limited.
    pub cgroup_fds: &'a [RawFd],
    /// The landlock ruleset (host grants already added by the supervisor), or -1.
    pub landlock_fd: RawFd,
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
    pub fn exited(&self) -> Option<crate::spawn::sys::ExitInfo> {
        if self.tag != ReportTag::Exited as u32 {
            return None;
        }
        let status = self.value;
        let (code, signal) = if libc::WIFEXITED(status) {
            (Some(libc::WEXITSTATUS(status)), None)
        } else {
            (None, Some(libc::WTERMSIG(status)))
        };
        Some(crate::spawn::sys::ExitInfo {
            code,
            signal,
            user_us: self.usage.user_us,
            sys_us: self.usage.sys_us,
            max_rss_bytes: self.usage.max_rss_kib.saturating_mul(1024),
        })
    }

    /// The failed step.
    pub fn ns_step(&self) -> NsStep {
        NsStep::from_u32(self.step)
    }
}

/// A failed step inside a child: (step, errno, op index, sub-call).
type Fail = (NsStep, i32, u32, u32);

fn fail(step: NsStep) -> impl Fn(i32) -> Fail {
    move |e| (step, e, 0, 0)
}

// ---- pid 1 ----------------------------------------------------------------------------

/// pid 1's entry point: setup, start the program, then reap (as `tierbox-init` when it
/// can exec it, in process otherwise). Never returns (it exits with the program's status,
/// or 127 after reporting a setup failure).
extern "C" fn init_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `&NsSpec` the supervisor passed to `clone`; this process runs on
    // a copy-on-write copy of the supervisor's memory taken at `clone`, in which the spec
    // and everything it points to are intact and never freed.
    let spec: &NsSpec<'_> = unsafe { &*(arg as *const NsSpec<'_>) };
    match init_setup(spec) {
        Ok(program) => {
            // 13. Let go of the copy of the supervisor's memory: exec the reaper. Only
            //     returns if the exec failed, with the memory intact: reap here.
            let report_fd = exec_reaper(spec, program);
            reaper::reap(report_fd, program)
        }
        Err((step, err, op_index, sub)) => {
            let r = Report {
                tag: ReportTag::Failed as u32,
                step: step as u32,
                value: err,
                op_index,
                sub,
                usage: ReapedUsage::default(),
            };
            let _ = lsys::write_all_raw(spec.report_fd, &r.encode());
            exit_group(127)
        }
    }
}

/// The ordered setup of pid 1. Returns the program's pid (in the namespace) once it runs
/// and the supervisor has been told.
fn init_setup(spec: &NsSpec<'_>) -> Result<libc::pid_t, Fail> {
    use NsStep as S;
    // 1. Default dispositions: signals stay blocked (inherited from the cloning thread)
    //    until the program's exec, and pid 1 only ever waits for them synchronously.
    reset_signal_handlers();
    // 2. Die with the supervisor's thread, then check it was not already gone: the
    //    supervisor holds the read end of the report pipe until it has our first record,
    //    so POLLERR on our write end means it died (getppid() is 0 across a pid namespace).
    prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong).map_err(fail(S::Pdeathsig))?;
    if init_sys::pipe_has_no_reader(spec.report_fd) {
        return Err((S::Pdeathsig, libc::ESRCH, 0, 0));
    }
    // 2b. Into the run's cgroup, before any setup allocates memory or forks: pid 1 moves
    //    itself (a task moving itself through v1 `tasks` skips the global threadgroup
    //    lock). The fds were opened by the supervisor, whose credentials the kernel
    //    checks.
    for fd in spec.cgroup_fds {
        lsys::write_all_raw(*fd, b"0").map_err(fail(S::Cgroup))?;
    }
    // 3. Our own id maps, before anything else needs an id: a process may map its own
    //    outside euid/egid with one line; `setgroups` must be denied before `gid_map`.
    //    A root supervisor mapping another host uid writes them for us (only a
    //    privileged process may): wait for its word.
    if spec.maps_ready_fd >= 0 {
        wait_for_byte(spec.maps_ready_fd).map_err(fail(S::UidMap))?;
        close(spec.maps_ready_fd);
    } else {
        write_proc_self(c"/proc/self/uid_map", spec.uid_map).map_err(fail(S::UidMap))?;
        write_proc_self(c"/proc/self/setgroups", b"deny").map_err(fail(S::Setgroups))?;
        write_proc_self(c"/proc/self/gid_map", spec.gid_map).map_err(fail(S::GidMap))?;
    }
    // 4. A session of our own: no controlling terminal of the supervisor's.
    // SAFETY: setsid takes no arguments.
    check(unsafe { libc::syscall(libc::SYS_setsid) }).map_err(fail(S::Setsid))?;
    // 5. Hostname in the new UTS namespace (needs CAP_SYS_ADMIN in the userns: we have it).
    sethostname(spec.hostname).map_err(fail(S::Hostname))?;
    // 6. Loopback up in the new network namespace (its only interface), unless the
    //    supervisor made the namespace and did it (a pooled namespace).
    if spec.loopback_up {
        loopback_up().map_err(fail(S::Loopback))?;
    }
    // 6b. The egress proxy's listener, made here so that it lives in this namespace, and
    //     handed to the supervisor, which serves it. Before the program exists, so the
    //     program's first connection finds it (queued in the backlog until accepted).
    if spec.proxy_fd >= 0 {
        send_loopback_listener(spec.proxy_fd, spec.proxy_port).map_err(fail(S::EgressListener))?;
        close(spec.proxy_fd);
    }
    // 7. Exact modes for everything the ops create.
    umask(0);
    // 8. The filesystem, op by op, in the planner's order.
    for (i, op) in spec.ops.iter().enumerate() {
        let moved = spec.moved_trees.iter().find(|(at, _)| *at == i);
        let result = match moved {
            Some((_, tree)) => move_tree(*tree, op.dst),
            None => run_op(op),
        };
        result.map_err(|(sub, e)| (S::MountOp, e, i as u32, sub))?;
    }
    // 8b. Landlock rules for the mounts that exist only in here; the program restricts
    //     itself with the ruleset just before seccomp.
    if spec.landlock_fd >= 0 {
        for (path, access) in spec.landlock_rules {
            add_landlock_rule(spec.landlock_fd, path, *access).map_err(fail(S::LandlockRules))?;
        }
    }
    // 9. pid 1's identity: not dumpable (its memory is a copy of the supervisor's; the
    //    program may not read it through /proc/1/mem or /proc/1/environ), the supervisor's
    //    argv wiped from /proc/1/cmdline, and a recognisable name.
    wipe_arg_area(spec.arg_area);
    prctl(libc::PR_SET_DUMPABLE, 0).map_err(fail(S::InitIdentity))?;
    prctl(libc::PR_SET_NAME, spec.init_name.as_ptr() as libc::c_ulong)
        .map_err(fail(S::InitIdentity))?;
    // 10. The program: CLONE_VFORK suspends us until it execs or fails.
    spec.fail_step.store(0, Ordering::SeqCst);
    spec.fail_errno.store(0, Ordering::SeqCst);
    // SAFETY: `program_main` only makes raw system calls on the spec; its stack top is the
    // 16-byte aligned end of a buffer in our memory, which it shares (CLONE_VM) while we
    // are suspended (CLONE_VFORK) until it execs or exits.
    let pid = unsafe {
        libc::clone(
            program_main,
            spec.program_stack_top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            spec as *const NsSpec<'_> as *mut c_void,
        )
    };
    if pid < 0 {
        return Err((S::CloneProgram, errno(), 0, 0));
    }
    let failed = NsStep::from_u32(spec.fail_step.load(Ordering::SeqCst));
    if failed != NsStep::None {
        return Err((failed, spec.fail_errno.load(Ordering::SeqCst), 0, 0));
    }
    // 11. Hold nothing of the run: only the report pipe and the reaper's image stay open.
    close_all_but(&[spec.report_fd, spec.reaper_fd]);
    // 12. Drop what pid 1 no longer needs: it only waits and forwards signals (and the
    //     reaper's exec, with no_new_privs and no capabilities, can gain none). Under a
    //     root supervisor it leaves ns uid 0 (host root) for the sandbox's uid first; the
    //     death signal this clears is armed again by the reaper.
    if spec.switch_ids {
        lsys::set_ids(SANDBOX_UID, SANDBOX_GID).map_err(fail(S::InitIdentity))?;
    }
    let _ = lsys::capset_zero();
    let _ = lsys::set_no_new_privs();
    let started = Report {
        tag: ReportTag::Started as u32,
        step: 0,
        value: pid,
        ..Report::default()
    };
    // A supervisor that is gone cannot be told; PR_SET_PDEATHSIG kills us anyway.
    let _ = lsys::write_all_raw(spec.report_fd, &started.encode());
    Ok(pid)
}

/// Step 13 of pid 1: moves the report pipe to [`reaper::REPORT_FD`] (kept across the
/// exec) and execs `tierbox-init` from [`NsSpec::reaper_fd`] with the program's pid in
/// `argv[1]` and an empty environment. Returns only when there is no image or the exec
/// failed — with this process's memory untouched — and then gives the fd the report pipe
/// is on now, for the in-process reaper.
fn exec_reaper(spec: &NsSpec<'_>, program: libc::pid_t) -> RawFd {
    if spec.reaper_fd < 0 {
        // What tierbox-init does first (an id switch cleared the death signal).
        reaper::rearm(spec.report_fd);
        return spec.report_fd;
    }
    let target = reaper::REPORT_FD;
    let mut image = spec.reaper_fd;
    if image == target {
        // Out of the report pipe's way first (close-on-exec, like the original).
        // SAFETY: integer arguments on an fd this process holds.
        image = unsafe { libc::syscall(libc::SYS_fcntl, image, libc::F_DUPFD_CLOEXEC, target + 1) }
            as RawFd;
        if image < 0 {
            return spec.report_fd;
        }
    }
    // dup3 to a new number clears close-on-exec; on the same number, fcntl does.
    // SAFETY: integer arguments on fds this process holds.
    let moved = unsafe {
        if spec.report_fd == target {
            libc::syscall(libc::SYS_fcntl, target, libc::F_SETFD, 0)
        } else {
            libc::syscall(libc::SYS_dup3, spec.report_fd, target, 0)
        }
    };
    if moved < 0 {
        return spec.report_fd;
    }
    let mut digits = [0u8; 12];
    let pid_arg = decimal(program, &mut digits);
    let argv: [*const c_char; 3] = [
        reaper::NAME.as_ptr(),
        pid_arg.as_ptr().cast(),
        std::ptr::null(),
    ];
    let envp: [*const c_char; 1] = [std::ptr::null()];
    // SAFETY: an fd we hold, an empty NUL-terminated path with AT_EMPTY_PATH, and
    // NULL-terminated argv/envp arrays of NUL-terminated strings on our stack. Returns
    // only on failure, before the point of no return (the memory is intact).
    unsafe {
        libc::syscall(
            libc::SYS_execveat,
            image,
            c"".as_ptr(),
            argv.as_ptr(),
            envp.as_ptr(),
            libc::AT_EMPTY_PATH,
        )
    };
    target
}

/// `n` (positive) in decimal, NUL-terminated, in `buf`.
fn decimal(n: libc::pid_t, buf: &mut [u8; 12]) -> &[u8] {
    let mut v = n.max(0) as u32;
    let mut at = buf.len() - 1;
    buf[at] = 0;
    loop {
        at -= 1;
        buf[at] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    buf.get(at..).unwrap_or_default()
}

/// Carries out one op. `Err((sub, errno))`.
fn run_op(op: &NsOp<'_>) -> Result<(), (u32, i32)> {
    match run_op_once(op) {
        Err((_, libc::ENOENT)) if op.if_present => Ok(()),
        other => other,
    }
}

fn run_op_once(op: &NsOp<'_>) -> Result<(), (u32, i32)> {
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
            .map_err(|e| (SUB_MOUNT, e))?;
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
            .map_err(|e| (SUB_MKDIR, e))?;
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
                .map_err(|e| (SUB_MKDIR, e))?;
            }
        }
        OpKind::MkFile => {
            let fd = open_raw(libc::AT_FDCWD, op.dst, create_flags(), op.mode)
                .map_err(|e| (SUB_OPEN, e))?;
            close(fd);
        }
        OpKind::Symlink => {
            // SAFETY: two NUL-terminated strings owned by the spec.
            check(unsafe { libc::syscall(libc::SYS_symlinkat, src, libc::AT_FDCWD, dst) })
                .map_err(|e| (SUB_SYMLINK, e))?;
        }
        OpKind::BindTree => bind_tree(op)?,
        OpKind::Setattr => {
            let flags =
                libc::AT_SYMLINK_NOFOLLOW as u32 | if op.recursive { AT_RECURSIVE } else { 0 };
            mount_setattr(libc::AT_FDCWD, op.dst, flags, op.attr).map_err(|e| (SUB_SETATTR, e))?;
        }
        OpKind::PlaceholderDir | OpKind::PlaceholderFile => {
            let Some(parent) = op.src else {
                return Err((SUB_OPENAT2, libc::EINVAL));
            };
            let pfd = openat2_nosymlinks(parent, libc::O_PATH | libc::O_DIRECTORY)
                .map_err(|e| (SUB_OPENAT2, e))?;
            let want_dir = op.kind == OpKind::PlaceholderDir;
            let r = if want_dir {
                // SAFETY: a valid dirfd and a NUL-terminated name.
                check(unsafe {
                    libc::syscall(libc::SYS_mkdirat, pfd, dst, op.mode as libc::c_ulong)
                })
                .map(drop)
                .map_err(|e| (SUB_MKDIR, e))
            } else {
                open_raw(pfd, op.dst, create_flags(), op.mode)
                    .map(close)
                    .map_err(|e| (SUB_OPEN, e))
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
                .map_err(|e| (SUB_PIVOT, e))?;
            chdir(c"/").map_err(|e| (SUB_CHDIR, e))?;
        }
        OpKind::PivotFinal => {
            chdir(op.dst).map_err(|e| (SUB_CHDIR, e))?;
            // SAFETY: two NUL-terminated paths.
            check(unsafe { libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) })
                .map_err(|e| (SUB_PIVOT, e))?;
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
            .map_err(|e| (SUB_UMOUNT, e))?;
            chdir(c"/").map_err(|e| (SUB_CHDIR, e))?;
        }
    }
    Ok(())
}

fn create_flags() -> c_int {
    libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_WRONLY | libc::O_CLOEXEC
}

/// See [`OpKind::BindTree`].
fn bind_tree(op: &NsOp<'_>) -> Result<(), (u32, i32)> {
    let Some(src) = op.src else {
        return Err((SUB_OPENAT2, libc::EINVAL));
    };
    let fd =
        openat2_nosymlinks(src, libc::O_PATH | libc::O_NOFOLLOW).map_err(|e| (SUB_OPENAT2, e))?;
    let result = bind_from_fd(fd, op);
    close(fd);
    result
}

/// Whether the existing entry `name` under `dirfd` is a directory (`want_dir`) or a
/// regular file, without following a symlink.
fn placeholder_kind_ok(dirfd: RawFd, name: &CStr, want_dir: bool) -> Result<(), (u32, i32)> {
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
    .map_err(|e| (SUB_FSTAT, e))?;
    let fmt = st.st_mode & libc::S_IFMT;
    let ok = if want_dir {
        fmt == libc::S_IFDIR
    } else {
        fmt == libc::S_IFREG
    };
    if ok {
        Ok(())
    } else {
        Err((SUB_KIND, libc::EEXIST))
    }
}

fn bind_from_fd(fd: RawFd, op: &NsOp<'_>) -> Result<(), (u32, i32)> {
    // SAFETY: a zeroed `stat` is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on an O_PATH fd (allowed since Linux 3.6) writes one `stat`.
    check(unsafe { libc::syscall(libc::SYS_fstat, fd, &mut st as *mut libc::stat) })
        .map_err(|e| (SUB_FSTAT, e))?;
    let fmt = st.st_mode & libc::S_IFMT;
    let ok = match op.expect {
        Expect::Any => true,
        Expect::Dir => fmt == libc::S_IFDIR,
        Expect::NotDir => fmt != libc::S_IFDIR && fmt != libc::S_IFLNK,
        Expect::CharDev => fmt == libc::S_IFCHR,
    };
    if !ok {
        return Err((SUB_KIND, libc::ENOTDIR));
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
    .map_err(|e| (SUB_OPEN_TREE, e))? as RawFd;
    let result = (|| {
        if op.attr != 0 {
            mount_setattr(
                tree,
                c"",
                libc::AT_EMPTY_PATH as u32 | AT_RECURSIVE,
                op.attr,
            )
            .map_err(|e| (SUB_SETATTR, e))?;
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
        .map_err(|e| (SUB_MOVE_MOUNT, e))
    })();
    close(tree);
    result
}

/// [`NsOp::plain_bind`]: `src` is bound onto `dst` with `mount(2)`, then `dst` must be the
/// object `st` (the `fstat` of the `O_PATH` fd opened at `src` without following
/// symlinks) — else the source changed between the check and the bind, and the run fails.
fn plain_bind(op: &NsOp<'_>, st: &libc::stat) -> Result<(), (u32, i32)> {
    let Some(src) = op.src else {
        return Err((SUB_MOUNT, libc::EINVAL));
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
    .map_err(|e| (SUB_MOUNT, e))?;
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
    .map_err(|e| (SUB_FSTAT, e))?;
    if now.st_dev != st.st_dev || now.st_ino != st.st_ino {
        return Err((SUB_KIND, libc::ESTALE));
    }
    if op.attr != 0 {
        mount_setattr(
            libc::AT_FDCWD,
            op.dst,
            AT_RECURSIVE | libc::AT_SYMLINK_NOFOLLOW as u32,
            op.attr,
        )
        .map_err(|e| (SUB_SETATTR, e))?;
    }
    Ok(())
}

// ---- the program ----------------------------------------------------------------------

/// The program's entry point (cloned by pid 1 with CLONE_VM | CLONE_VFORK).
extern "C" fn program_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is pid 1's `&NsSpec`; pid 1 is suspended (CLONE_VFORK) until we exec or
    // exit, and we share its memory (CLONE_VM), so the reference stays valid.
    let spec: &NsSpec<'_> = unsafe { &*(arg as *const NsSpec<'_>) };
    let (step, err) = match program_setup(spec) {
        Ok(()) => (NsStep::Execve, libc::EIO),
        Err((step, err, _, _)) => (step, err),
    };
    spec.fail_errno.store(err, Ordering::SeqCst);
    spec.fail_step.store(step as u32, Ordering::SeqCst);
    exit_group(127)
}

fn program_setup(spec: &NsSpec<'_>) -> Result<(), Fail> {
    use NsStep as S;
    // 1. stdio; every source fd is >= 3, so dup3 cannot clobber one (nor refuse src == dst).
    for (src, dst) in [(spec.stdin_fd, 0), (spec.stdout_fd, 1), (spec.stderr_fd, 2)] {
        // SAFETY: dup3 on fds the supervisor opened for us.
        check(unsafe { libc::syscall(libc::SYS_dup3, src, dst, 0) }).map_err(fail(S::Stdio))?;
    }
    // 2. Everything else closes at exec (the report pipe included).
    // SAFETY: integer arguments.
    check(unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_ulong,
            libc::c_ulong::from(u32::MAX),
            libc::CLOSE_RANGE_CLOEXEC as libc::c_ulong,
        )
    })
    .map_err(fail(S::CloseFds))?;
    // 3. cwd in the new root, and the program's umask.
    chdir(spec.cwd).map_err(fail(S::Chdir))?;
    umask(PROGRAM_UMASK);
    // 4. rlimits while we still hold CAP_SYS_RESOURCE in the userns.
    for (resource, limit) in &spec.rlimits {
        // SAFETY: prlimit64 on ourselves with a pointer to a valid rlimit64.
        check(unsafe {
            libc::syscall(
                libc::SYS_prlimit64,
                0 as libc::c_ulong,
                *resource as libc::c_ulong,
                limit as *const libc::rlimit64,
                std::ptr::null_mut::<libc::rlimit64>(),
            )
        })
        .map_err(fail(S::Rlimit))?;
    }
    // 5. Capabilities (all held in the userns): securebits and the bounding set need
    //    CAP_SETPCAP, so they go before capset(0). Our uid inside is not 0, so exec would
    //    clear the effective and permitted sets anyway; this is the belt to that brace.
    lsys::set_securebits_noroot().map_err(fail(S::DropCaps))?;
    lsys::drop_bounding_set(spec.last_cap).map_err(fail(S::DropCaps))?;
    lsys::clear_ambient().map_err(fail(S::DropCaps))?;
    // 5b. Out of ns uid 0 (pid 1's setup identity) into the sandbox's user, with no
    //     supplementary groups, before the capabilities go (CAP_SETUID is needed).
    if spec.switch_ids {
        lsys::set_ids(SANDBOX_UID, SANDBOX_GID).map_err(fail(S::DropCaps))?;
    }
    lsys::capset_zero().map_err(fail(S::DropCaps))?;
    // 6. no_new_privs (required for the unprivileged seccomp filter below).
    lsys::set_no_new_privs().map_err(fail(S::NoNewPrivs))?;
    // 6b. Landlock: the second filesystem layer, under the mount namespace.
    if spec.landlock_fd >= 0 {
        lsys::landlock_restrict_self(spec.landlock_fd).map_err(fail(S::Landlock))?;
    }
    // 7. Seccomp last, so it cannot block any setup call above.
    if let Some(prog) = spec.seccomp {
        lsys::seccomp_set_filter(prog).map_err(fail(S::Seccomp))?;
    }
    // 8. The program starts with an empty signal mask.
    let set: u64 = 0;
    // SAFETY: a zeroed kernel sigset on our stack; the old mask is not requested.
    check(unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK as libc::c_ulong,
            &set as *const u64,
            std::ptr::null_mut::<u64>(),
            8 as libc::c_ulong,
        )
    })
    .map_err(fail(S::SignalMask))?;
    // 9. execve; only returns on failure.
    // SAFETY: program/argv/envp are NUL-terminated strings and NULL-terminated arrays owned
    // by the supervisor (present in our shared copy).
    unsafe {
        libc::syscall(
            libc::SYS_execve,
            spec.program.as_ptr(),
            spec.argv,
            spec.envp,
        )
    };
    Err((S::Execve, errno(), 0, 0))
}

// ---- small raw helpers (child side) ---------------------------------------------------

fn exit_group(code: c_int) -> c_int {
    // SAFETY: exit_group ends this process (its own thread group); it never returns.
    unsafe { libc::syscall(libc::SYS_exit_group, code as libc::c_long) };
    code
}

fn prctl(option: c_int, arg2: libc::c_ulong) -> Result<(), i32> {
    let zero: libc::c_ulong = 0;
    // SAFETY: the options used here take an integer or a pointer to a NUL-terminated
    // string owned by the spec (PR_SET_NAME reads at most 16 bytes, stopping at the NUL).
    check(unsafe { libc::syscall(libc::SYS_prctl, option, arg2, zero, zero, zero) }).map(drop)
}

fn open_raw(dirfd: RawFd, path: &CStr, flags: c_int, mode: u32) -> Result<RawFd, i32> {
    // SAFETY: a NUL-terminated path and integer arguments.
    check(unsafe {
        libc::syscall(
            libc::SYS_openat,
            dirfd,
            path.as_ptr(),
            flags as libc::c_long,
            mode as libc::c_ulong,
        )
    })
    .map(|fd| fd as RawFd)
}

/// `open(path, O_PATH)` + `landlock_add_rule(PATH_BENEATH)` + `close`.
fn add_landlock_rule(ruleset: RawFd, path: &CStr, access: u64) -> Result<(), i32> {
    let fd = open_raw(
        libc::AT_FDCWD,
        path,
        libc::O_PATH | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        0,
    )?;
    let r = lsys::landlock_add_path_rule_raw(ruleset, access, fd);
    close(fd);
    r
}

fn close(fd: RawFd) {
    // SAFETY: closes an fd this child opened; errors are irrelevant.
    unsafe { libc::syscall(libc::SYS_close, fd) };
}

fn chdir(path: &CStr) -> Result<(), i32> {
    // SAFETY: a NUL-terminated path.
    check(unsafe { libc::syscall(libc::SYS_chdir, path.as_ptr()) }).map(drop)
}

fn umask(mask: u32) {
    // SAFETY: integer argument; umask cannot fail.
    unsafe { libc::syscall(libc::SYS_umask, mask as libc::c_ulong) };
}

/// `openat2(AT_FDCWD, path, flags | O_CLOEXEC, RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`.
fn openat2_nosymlinks(path: &CStr, flags: c_int) -> Result<RawFd, i32> {
    // SAFETY: open_how is plain integers; all-zero is its documented default.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: a NUL-terminated path and a fully initialised open_how of the size passed.
    check(unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    })
    .map(|fd| fd as RawFd)
}

fn mount_setattr(dirfd: RawFd, path: &CStr, flags: u32, attr_set: u64) -> Result<(), i32> {
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

/// One `write(2)` of all of `content` to a `/proc/self` file opened write-only.
fn write_proc_self(path: &CStr, content: &[u8]) -> Result<(), i32> {
    let fd = open_raw(libc::AT_FDCWD, path, libc::O_WRONLY | libc::O_CLOEXEC, 0)?;
    // SAFETY: `content` is a valid slice for the duration of the call.
    let r = check(unsafe { libc::syscall(libc::SYS_write, fd, content.as_ptr(), content.len()) });
    close(fd);
    match r {
        Ok(n) if n as usize == content.len() => Ok(()),
        Ok(_) => Err(libc::EIO),
        Err(e) => Err(e),
    }
}

fn sethostname(name: &[u8]) -> Result<(), i32> {
    // SAFETY: `name` is a valid slice; the kernel reads `len` bytes.
    check(unsafe { libc::syscall(libc::SYS_sethostname, name.as_ptr(), name.len()) }).map(drop)
}

/// `struct ifreq` with the flags member (uapi `linux/if.h`, 40 bytes on 64-bit).
#[repr(C)]
struct IfreqFlags {
    name: [u8; libc::IFNAMSIZ],
    flags: i16,
    pad: [u8; 22],
}

fn loopback_up() -> Result<(), i32> {
    // SAFETY: integer arguments.
    let sock = check(unsafe {
        libc::syscall(
            libc::SYS_socket,
            libc::AF_INET,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            0,
        )
    })? as RawFd;
    let mut req = IfreqFlags {
        name: [0; libc::IFNAMSIZ],
        flags: 0,
        pad: [0; 22],
    };
    req.name[..2].copy_from_slice(b"lo");
    // SAFETY: SIOCGIFFLAGS reads the name and writes the flags of one ifreq on our stack.
    let r = check(unsafe {
        libc::syscall(
            libc::SYS_ioctl,
            sock,
            libc::SIOCGIFFLAGS as libc::c_ulong,
            &mut req as *mut IfreqFlags,
        )
    })
    .and_then(|_| {
        req.flags |= libc::IFF_UP as i16;
        // SAFETY: SIOCSIFFLAGS reads one ifreq on our stack.
        check(unsafe {
            libc::syscall(
                libc::SYS_ioctl,
                sock,
                libc::SIOCSIFFLAGS as libc::c_ulong,
                &req as *const IfreqFlags,
            )
        })
    });
    close(sock);
    r.map(drop)
}

/// Backlog of the egress proxy's listener: connections the program may open before the
/// supervisor accepts them.
const PROXY_BACKLOG: c_int = 128;

/// One `SCM_RIGHTS` control message carrying one fd, laid out as `CMSG_SPACE(4)`.
#[repr(C)]
struct FdCmsg {
    hdr: libc::cmsghdr,
    fd: c_int,
    pad: c_int,
}

/// `cmsg_len` of a control message carrying one fd (`CMSG_LEN(sizeof(int))`).
const FD_CMSG_LEN: usize = std::mem::size_of::<libc::cmsghdr>() + std::mem::size_of::<c_int>();

fn send_loopback_listener(sock: RawFd, port: u16) -> Result<(), i32> {
    let (listener, addr) = lsys::loopback_tcp_socket(port)?;
    // SAFETY: `addr` is a sockaddr_in on our stack, with its exact size.
    let r = check(unsafe {
        libc::syscall(
            libc::SYS_bind,
            listener,
            &addr as *const libc::sockaddr_in,
            std::mem::size_of::<libc::sockaddr_in>(),
        )
    })
    // SAFETY: integer arguments.
    .and_then(|_| check(unsafe { libc::syscall(libc::SYS_listen, listener, PROXY_BACKLOG) }))
    .and_then(|_| send_fd(sock, listener));
    close(listener);
    r.map(drop)
}

/// Sends `fd` over the unix socket `sock` (one byte of data, one `SCM_RIGHTS` message).
fn send_fd(sock: RawFd, fd: RawFd) -> Result<libc::c_long, i32> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr() as *mut c_void,
        iov_len: 1,
    };
    // SAFETY: cmsghdr is plain data; all-zero is a valid value, filled in below.
    let mut cmsg: FdCmsg = unsafe { std::mem::zeroed() };
    cmsg.hdr.cmsg_len = FD_CMSG_LEN as _;
    cmsg.hdr.cmsg_level = libc::SOL_SOCKET;
    cmsg.hdr.cmsg_type = libc::SCM_RIGHTS;
    cmsg.fd = fd;
    // SAFETY: msghdr is plain data; all-zero is a valid value, filled in below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = &mut cmsg as *mut FdCmsg as *mut c_void;
    msg.msg_controllen = std::mem::size_of::<FdCmsg>() as _;
    // SAFETY: `msg` points at the iovec and control buffer on our stack, which outlive
    // the call.
    check(unsafe {
        libc::syscall(
            libc::SYS_sendmsg,
            sock,
            &msg as *const libc::msghdr,
            libc::MSG_NOSIGNAL,
        )
    })
}

/// Receives one fd sent with `SCM_RIGHTS` on `sock` (blocking), close-on-exec.
pub fn recv_fd(sock: &OwnedFd) -> io::Result<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr() as *mut c_void,
        iov_len: 1,
    };
    // SAFETY: plain data; all-zero is a valid value.
    let mut cmsg: FdCmsg = unsafe { std::mem::zeroed() };
    // SAFETY: plain data; all-zero is a valid value, filled in below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = &mut cmsg as *mut FdCmsg as *mut c_void;
    msg.msg_controllen = std::mem::size_of::<FdCmsg>() as _;
    loop {
        // SAFETY: `msg` points at buffers on our stack that outlive the call.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    let carried = msg.msg_controllen as usize >= FD_CMSG_LEN
        && cmsg.hdr.cmsg_level == libc::SOL_SOCKET
        && cmsg.hdr.cmsg_type == libc::SCM_RIGHTS
        && cmsg.hdr.cmsg_len as usize == FD_CMSG_LEN
        && msg.msg_flags & libc::MSG_CTRUNC == 0;
    if !carried || cmsg.fd < 0 {
        return Err(io::Error::other("no file descriptor in the message"));
    }
    // SAFETY: the kernel installed this fd in our table for this message; we own it.
    Ok(unsafe { OwnedFd::from_raw_fd(cmsg.fd) })
}

/// A connected pair of `SOCK_SEQPACKET` unix sockets, close-on-exec.
pub fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1 as c_int; 2];
    // SAFETY: `fds` is a writable array of two ints.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: on success both fds are fresh and ours.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn wipe_arg_area((start, end): (usize, usize)) {
    if start == 0 || end <= start {
        return;
    }
    // SAFETY: [start, end) is the argv area of the process this one was copied from
    // (read by the supervisor from /proc/self/stat), mapped and writable in our private
    // copy-on-write copy; nothing in this process reads the arguments afterwards.
    unsafe { std::ptr::write_bytes(start as *mut u8, 0, end - start) };
}

/// Blocks until one byte can be read from `fd` (a pipe); `EPIPE` if its writer went away
/// without writing.
fn wait_for_byte(fd: RawFd) -> Result<(), i32> {
    let mut b = 0u8;
    loop {
        // SAFETY: reads at most one byte into `b`, on our stack.
        let n = unsafe { libc::syscall(libc::SYS_read, fd, &mut b as *mut u8, 1usize) };
        match check(n) {
            Ok(1) => return Ok(()),
            Ok(_) => return Err(libc::EPIPE),
            Err(libc::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
}

/// `move_mount(tree, "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH)`: a detached tree the
/// supervisor made (an idmapped mount) into place.
fn move_tree(tree: RawFd, dst: &CStr) -> Result<(), (u32, i32)> {
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
    .map_err(|e| (SUB_MOVE_MOUNT, e))
}

/// Closes every fd but those in `keep` (negative entries are ignored).
fn close_all_but(keep: &[RawFd; 2]) {
    let (lo, hi) = (keep[0].min(keep[1]), keep[0].max(keep[1]));
    let mut from: libc::c_ulong = 0;
    for k in [lo, hi] {
        if k < 0 || (k as libc::c_ulong) < from {
            continue;
        }
        let k = k as libc::c_ulong;
        if k > from {
            close_range(from, k - 1);
        }
        from = k + 1;
    }
    close_range(from, libc::c_ulong::from(u32::MAX));
}

fn close_range(first: libc::c_ulong, last: libc::c_ulong) {
    // SAFETY: integer arguments; closing fds this process does not use any more.
    unsafe { libc::syscall(libc::SYS_close_range, first, last, 0 as libc::c_ulong) };
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
    let pid = crate::spawn::sys::with_all_signals_blocked(|| {
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
