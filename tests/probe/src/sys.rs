//! Every system call the probes make that the standard library does not wrap, each
//! wrapped once, with an error that names the call and its arguments.
//!
//! The probe binary is single-threaded from start to end (no probe starts a thread), which
//! is what makes [`fork`] and [`clone_new_user`] sound: after a fork only the calling
//! thread exists in the child, and no other thread can hold a lock it would need.

use std::ffi::c_void;
use std::fmt;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// A failed system call: which one, with which arguments, and its errno.
#[derive(Debug)]
pub struct SysError {
    /// The call and its arguments, e.g. `socket(AF_INET, SOCK_STREAM)`.
    pub call: String,
    /// The error the kernel returned.
    pub source: io::Error,
}

impl SysError {
    /// The error of the last failed libc call.
    fn last(call: impl Into<String>) -> Self {
        Self {
            call: call.into(),
            source: io::Error::last_os_error(),
        }
    }

    /// The errno, or 0 when there is none.
    pub fn errno(&self) -> i32 {
        self.source.raw_os_error().unwrap_or(0)
    }
}

impl fmt::Display for SysError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.call, errno_name(self.errno()))
    }
}

impl std::error::Error for SysError {}

/// The result of a wrapped system call.
pub type SysResult<T> = Result<T, SysError>;

/// `EACCES`-style name of an errno, for one-line reports.
pub fn errno_name(errno: i32) -> String {
    let name = match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ESRCH => "ESRCH",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::ENXIO => "ENXIO",
        libc::EBADF => "EBADF",
        libc::ECHILD => "ECHILD",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EXDEV => "EXDEV",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::ENFILE => "ENFILE",
        libc::EMFILE => "EMFILE",
        libc::ENOTTY => "ENOTTY",
        libc::EFBIG => "EFBIG",
        libc::ENOSPC => "ENOSPC",
        libc::EROFS => "EROFS",
        libc::EPIPE => "EPIPE",
        libc::ENOSYS => "ENOSYS",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::ELOOP => "ELOOP",
        libc::EUSERS => "EUSERS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::ENETDOWN => "ENETDOWN",
        libc::ECONNRESET => "ECONNRESET",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::EHOSTUNREACH => "EHOSTUNREACH",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        0 => return "no errno".to_owned(),
        n => return format!("errno {n}"),
    };
    name.to_owned()
}

/// The errno name of an I/O error from the standard library.
pub fn io_errno_name(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => errno_name(n),
        None => e.kind().to_string(),
    }
}

fn check(ret: libc::c_long, call: impl FnOnce() -> String) -> SysResult<libc::c_long> {
    if ret == -1 {
        Err(SysError::last(call()))
    } else {
        Ok(ret)
    }
}

/// `fcntl(fd, F_GETFD)`: the descriptor flags, or an error (`EBADF` when `fd` is closed).
pub fn fcntl_getfd(fd: RawFd) -> SysResult<i32> {
    // SAFETY: F_GETFD reads the flags of a descriptor number; any number is valid input
    // (an unused one gives EBADF) and no memory is passed.
    let ret = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    check(ret.into(), || format!("fcntl({fd}, F_GETFD)")).map(|r| r as i32)
}

/// Which side of a fork the caller is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forked {
    /// The new process.
    Child,
    /// The original process, with the child's pid.
    Parent(libc::pid_t),
}

/// `fork()`.
pub fn fork() -> SysResult<Forked> {
    // SAFETY: the probe is single-threaded (module docs), so the child is a complete copy
    // of a process with no other thread that could hold a lock or be mid-allocation.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(SysError::last("fork()")),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(pid)),
    }
}

/// `clone(CLONE_NEWUSER | SIGCHLD)` as a fork into a new user namespace.
pub fn clone_new_user() -> SysResult<Forked> {
    let flags = (libc::CLONE_NEWUSER | libc::SIGCHLD) as libc::c_ulong;
    // SAFETY: the raw clone syscall with a null stack behaves like fork: the child runs on
    // a copy-on-write copy of this (single-threaded) process's stack and returns here with
    // 0. The parent_tid, child_tid and tls arguments are null because no flag uses them.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags,
            std::ptr::null_mut::<c_void>(),
            std::ptr::null_mut::<c_void>(),
            std::ptr::null_mut::<c_void>(),
            0 as libc::c_ulong,
        )
    };
    match check(ret, || "clone(CLONE_NEWUSER | SIGCHLD)".to_owned())? {
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(pid as libc::pid_t)),
    }
}

/// `_exit(code)`: ends a forked child without running the parent's exit handlers or
/// flushing buffers it copied.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit takes an integer and never returns.
    unsafe { libc::_exit(code) }
}

/// Sleeps until killed (a forked child that only needs to exist).
pub fn pause_forever() -> ! {
    loop {
        // SAFETY: pause takes no arguments; it returns only when a handled signal arrives.
        unsafe { libc::pause() };
    }
}

/// `setsid()`: a new session and process group, led by the caller.
pub fn setsid() -> SysResult<libc::pid_t> {
    // SAFETY: setsid takes no arguments.
    let ret = unsafe { libc::setsid() };
    check(ret.into(), || "setsid()".to_owned()).map(|r| r as libc::pid_t)
}

/// `kill(pid, sig)`; `sig == 0` only checks whether a signal could be sent.
pub fn kill(pid: libc::pid_t, sig: i32) -> SysResult<()> {
    // SAFETY: kill takes integers only.
    let ret = unsafe { libc::kill(pid, sig) };
    check(ret.into(), || format!("kill({pid}, {sig})")).map(drop)
}

/// How a waited-for child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildExit {
    /// It exited with this code.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
}

/// `waitpid(pid, &status, 0)`, retried on `EINTR`.
pub fn waitpid(pid: libc::pid_t) -> SysResult<ChildExit> {
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: waitpid writes the status into a valid local.
        let ret = unsafe { libc::waitpid(pid, &mut status, 0) };
        if ret == -1 {
            let e = SysError::last(format!("waitpid({pid})"));
            if e.errno() == libc::EINTR {
                continue;
            }
            return Err(e);
        }
        break;
    }
    if libc::WIFEXITED(status) {
        Ok(ChildExit::Code(libc::WEXITSTATUS(status)))
    } else {
        Ok(ChildExit::Signal(libc::WTERMSIG(status)))
    }
}

/// `ptrace(PTRACE_TRACEME)`: asks to be traced by the parent.
pub fn ptrace_traceme() -> SysResult<()> {
    // SAFETY: PTRACE_TRACEME ignores the pid, addr and data arguments.
    let ret = unsafe {
        libc::ptrace(
            libc::PTRACE_TRACEME,
            0,
            std::ptr::null_mut::<c_void>(),
            std::ptr::null_mut::<c_void>(),
        )
    };
    check(ret, || "ptrace(PTRACE_TRACEME)".to_owned()).map(drop)
}

/// `process_vm_readv(pid, …)` copying `dst.len()` bytes from address `src` of `pid`.
///
/// Reading from another process never writes to this one except into `dst`.
pub fn process_vm_readv(pid: libc::pid_t, src: usize, dst: &mut [u8]) -> SysResult<usize> {
    let local = libc::iovec {
        iov_base: dst.as_mut_ptr().cast(),
        iov_len: dst.len(),
    };
    let remote = libc::iovec {
        iov_base: src as *mut c_void,
        iov_len: dst.len(),
    };
    // SAFETY: the local iovec covers exactly `dst`, which is valid for writes; the remote
    // iovec is only read by the kernel, which checks the address in the target process.
    let ret = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    check(ret as libc::c_long, || {
        format!("process_vm_readv({pid}, {src:#x}, {} bytes)", dst.len())
    })
    .map(|n| n as usize)
}

/// `unshare(flags)`.
pub fn unshare(flags: i32, name: &str) -> SysResult<()> {
    // SAFETY: unshare takes integer flags. Only namespace flags are passed, which change
    // the namespaces of this process, not its memory.
    let ret = unsafe { libc::unshare(flags) };
    check(ret.into(), || format!("unshare({name})")).map(drop)
}

/// `socket(domain, ty, 0)`.
pub fn socket(domain: i32, ty: i32, name: &str) -> SysResult<OwnedFd> {
    // SAFETY: socket takes integers and returns a new descriptor or -1.
    let fd = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, 0) };
    check(fd.into(), || format!("socket({name})"))?;
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `ioctl(fd, TIOCSTI, &byte)`: pushes `byte` into the input queue of the terminal `fd`.
pub fn ioctl_tiocsti(fd: RawFd, byte: u8) -> SysResult<()> {
    let c = byte as libc::c_char;
    // SAFETY: TIOCSTI reads one byte through the pointer, which points to a live local.
    let ret = unsafe { libc::ioctl(fd, libc::TIOCSTI, &c as *const libc::c_char) };
    check(ret.into(), || format!("ioctl({fd}, TIOCSTI)")).map(drop)
}

/// `ioctl(fd, TIOCSPTLCK, &0)`: unlocks the pseudo-terminal whose multiplexer is `fd`
/// (`unlockpt`).
pub fn ioctl_unlock_pty(fd: RawFd) -> SysResult<()> {
    let unlock: libc::c_int = 0;
    // SAFETY: TIOCSPTLCK reads one int through the pointer, which points to a live local.
    let ret = unsafe { libc::ioctl(fd, libc::TIOCSPTLCK, &unlock as *const libc::c_int) };
    check(ret.into(), || format!("ioctl({fd}, TIOCSPTLCK)")).map(drop)
}

/// `ioctl(fd, TIOCGPTN, &n)`: the number of the pseudo-terminal whose multiplexer is `fd`
/// (`ptsname`).
pub fn ioctl_pty_number(fd: RawFd) -> SysResult<u32> {
    let mut n: libc::c_uint = 0;
    // SAFETY: TIOCGPTN writes one unsigned int through the pointer, to a live local.
    let ret = unsafe { libc::ioctl(fd, libc::TIOCGPTN, &mut n as *mut libc::c_uint) };
    check(ret.into(), || format!("ioctl({fd}, TIOCGPTN)"))?;
    Ok(n)
}

/// `signal(sig, SIG_IGN)`.
pub fn ignore_signal(sig: i32) -> SysResult<()> {
    // SAFETY: installing SIG_IGN runs no code of ours in signal context.
    let ret = unsafe { libc::signal(sig, libc::SIG_IGN) };
    if ret == libc::SIG_ERR {
        Err(SysError::last(format!("signal({sig}, SIG_IGN)")))
    } else {
        Ok(())
    }
}

/// What `poll` saw on one descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollResult {
    /// Nothing happened within the timeout.
    Timeout,
    /// The descriptor is readable (data or end of file) or hung up.
    Ready,
    /// The descriptor is not open.
    NotOpen,
}

/// `poll({fd, POLLIN}, timeout)`.
pub fn poll_readable(fd: RawFd, timeout: Duration) -> SysResult<PollResult> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: poll reads and writes exactly one pollfd, a live local.
    let ret = unsafe { libc::poll(&mut pfd, 1, ms) };
    check(ret.into(), || format!("poll({fd}, POLLIN, {ms} ms)"))?;
    Ok(if ret == 0 {
        PollResult::Timeout
    } else if pfd.revents & libc::POLLNVAL != 0 {
        PollResult::NotOpen
    } else {
        PollResult::Ready
    })
}

/// `read(fd, buf)`.
pub fn read(fd: RawFd, buf: &mut [u8]) -> SysResult<usize> {
    // SAFETY: read writes at most `buf.len()` bytes into `buf`, which is valid for writes.
    let ret = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    check(ret as libc::c_long, || {
        format!("read({fd}, {} bytes)", buf.len())
    })
    .map(|n| n as usize)
}

/// `dup2(src, dst)`.
pub fn dup2(src: RawFd, dst: RawFd) -> SysResult<()> {
    // SAFETY: dup2 takes descriptor numbers; it closes `dst` first, which the caller
    // means (it replaces its own stdio).
    let ret = unsafe { libc::dup2(src, dst) };
    check(ret.into(), || format!("dup2({src}, {dst})")).map(drop)
}

/// `(getuid(), geteuid())`.
pub fn uids() -> (u32, u32) {
    // SAFETY: getuid and geteuid take no arguments and cannot fail.
    unsafe { (libc::getuid(), libc::geteuid()) }
}

/// CPU time this process has used so far (`clock_gettime(CLOCK_PROCESS_CPUTIME_ID)`).
pub fn process_cpu_time() -> SysResult<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into a valid local.
    let ret = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    check(ret.into(), || {
        "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)".to_owned()
    })?;
    Ok(Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    ))
}

/// `getrlimit(resource)` as `(soft, hard)`; `u64::MAX` is `RLIM_INFINITY`.
pub fn getrlimit(resource: libc::__rlimit_resource_t, name: &str) -> SysResult<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into a valid local.
    let ret = unsafe { libc::getrlimit(resource, &mut lim) };
    check(ret.into(), || format!("getrlimit({name})"))?;
    Ok((lim.rlim_cur, lim.rlim_max))
}

/// `setrlimit(resource, {soft, hard})`.
pub fn setrlimit(
    resource: libc::__rlimit_resource_t,
    name: &str,
    soft: u64,
    hard: u64,
) -> SysResult<()> {
    let lim = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads one rlimit from a valid local.
    let ret = unsafe { libc::setrlimit(resource, &lim) };
    check(ret.into(), || format!("setrlimit({name}, {soft}, {hard})")).map(drop)
}

/// `prctl(PR_GET_SECUREBITS)`.
pub fn securebits() -> SysResult<u32> {
    // SAFETY: PR_GET_SECUREBITS takes no pointer arguments and returns the bits.
    let ret = unsafe { libc::prctl(libc::PR_GET_SECUREBITS, 0, 0, 0, 0) };
    check(ret.into(), || "prctl(PR_GET_SECUREBITS)".to_owned()).map(|b| b as u32)
}

/// `(getgid(), getegid(), getgroups())`.
pub fn gids() -> SysResult<(u32, u32, Vec<u32>)> {
    let mut groups = vec![0 as libc::gid_t; 256];
    // SAFETY: getgroups writes at most `groups.len()` gids into the buffer.
    let n = unsafe { libc::getgroups(groups.len() as libc::c_int, groups.as_mut_ptr()) };
    check(n.into(), || "getgroups(256)".to_owned())?;
    groups.truncate(n as usize);
    // SAFETY: getgid and getegid take no arguments and cannot fail.
    Ok(unsafe { (libc::getgid(), libc::getegid(), groups) })
}

/// Takes ownership of a descriptor a system call just returned.
fn owned_fd(ret: libc::c_long, call: &str) -> SysResult<OwnedFd> {
    let fd = RawFd::try_from(ret).map_err(|_| SysError {
        call: call.to_owned(),
        source: io::Error::other(format!("returned {ret}, not a descriptor")),
    })?;
    // SAFETY: the kernel just returned this new descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `io_uring_setup(1, &params)` with zeroed `struct io_uring_params` (120 bytes).
pub fn io_uring_setup() -> SysResult<OwnedFd> {
    let mut params = [0u8; 120];
    // SAFETY: the kernel reads and writes exactly one `struct io_uring_params`, which is
    // 120 bytes, the size of the buffer.
    let ret = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr()) };
    let call = "io_uring_setup(1)";
    owned_fd(check(ret, || call.to_owned())?, call)
}

/// `UFFD_USER_MODE_ONLY`: a userfaultfd any user may create since Linux 5.11.
const UFFD_USER_MODE_ONLY: libc::c_int = 1;

/// `userfaultfd(O_CLOEXEC | UFFD_USER_MODE_ONLY)`.
pub fn userfaultfd() -> SysResult<OwnedFd> {
    // SAFETY: userfaultfd takes flags only.
    let ret =
        unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | UFFD_USER_MODE_ONLY) };
    let call = "userfaultfd(O_CLOEXEC | UFFD_USER_MODE_ONLY)";
    owned_fd(check(ret, || call.to_owned())?, call)
}

/// `KEYCTL_GET_KEYRING_ID` and `KEY_SPEC_USER_KEYRING`.
const KEYCTL_GET_KEYRING_ID: libc::c_int = 0;
const KEY_SPEC_USER_KEYRING: libc::c_int = -4;

/// `keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING, 0)`: looks the user keyring's
/// id up (create = 0).
pub fn keyctl_user_keyring_id() -> SysResult<libc::c_long> {
    // SAFETY: integer arguments only.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_GET_KEYRING_ID,
            KEY_SPEC_USER_KEYRING,
            0,
        )
    };
    check(ret, || {
        "keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING)".to_owned()
    })
}

/// `BPF_MAP_CREATE` and `BPF_MAP_TYPE_ARRAY`.
const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_TYPE_ARRAY: u32 = 2;

/// `bpf(BPF_MAP_CREATE, {array, 4-byte keys and values, 1 entry})`.
pub fn bpf_create_array_map() -> SysResult<OwnedFd> {
    // `union bpf_attr` for BPF_MAP_CREATE starts with map_type, key_size, value_size,
    // max_entries (u32 each); the rest stays zero.
    let mut attr = [0u8; 128];
    for (i, v) in [BPF_MAP_TYPE_ARRAY, 4, 4, 1].iter().enumerate() {
        attr[i * 4..i * 4 + 4].copy_from_slice(&v.to_ne_bytes());
    }
    // SAFETY: the kernel reads at most `attr.len()` bytes of the buffer.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_CREATE,
            attr.as_ptr(),
            attr.len() as libc::c_uint,
        )
    };
    let call = "bpf(BPF_MAP_CREATE, array)";
    owned_fd(check(ret, || call.to_owned())?, call)
}

/// `PERF_TYPE_SOFTWARE`, `PERF_COUNT_SW_TASK_CLOCK`, `PERF_ATTR_SIZE_VER0`, the
/// `disabled | exclude_kernel | exclude_hv` bits of the flags word, `PERF_FLAG_FD_CLOEXEC`.
const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
const PERF_ATTR_SIZE_VER0: u32 = 64;
const PERF_FLAGS_USER_ONLY: u64 = 1 | (1 << 5) | (1 << 6);
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;

/// `perf_event_open` of a disabled, user-space-only task clock of this process.
pub fn perf_event_open_self() -> SysResult<OwnedFd> {
    // `struct perf_event_attr`, first version (64 bytes): type, size, config, and the
    // flags word at offset 40.
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&PERF_TYPE_SOFTWARE.to_ne_bytes());
    attr[4..8].copy_from_slice(&PERF_ATTR_SIZE_VER0.to_ne_bytes());
    attr[8..16].copy_from_slice(&PERF_COUNT_SW_TASK_CLOCK.to_ne_bytes());
    attr[40..48].copy_from_slice(&PERF_FLAGS_USER_ONLY.to_ne_bytes());
    // SAFETY: the kernel reads the 64 bytes the size field announces; the buffer has 128.
    // pid 0 = this process, cpu -1 = any, group -1 = none.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_ptr(),
            0,
            -1,
            -1,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    let call = "perf_event_open(task clock of self)";
    owned_fd(check(ret, || call.to_owned())?, call)
}

/// `personality(persona)`; returns the previous persona. `0xffffffff` only queries.
pub fn personality(persona: libc::c_ulong) -> SysResult<libc::c_int> {
    // SAFETY: personality takes an integer; it changes how the *next* exec sets up memory.
    let ret = unsafe { libc::personality(persona) };
    check(ret.into(), || format!("personality({persona:#x})")).map(|p| p as libc::c_int)
}

/// `name_to_handle_at(AT_FDCWD, ".", handle, &mount_id, 0)`: a file handle for the
/// working directory (the raw material of `open_by_handle_at`).
pub fn name_to_handle_at_cwd() -> SysResult<()> {
    // `struct file_handle`: handle_bytes (u32), handle_type (i32), then the handle.
    let mut handle = [0u8; 8 + 128];
    handle[0..4].copy_from_slice(&128u32.to_ne_bytes());
    let mut mount_id: libc::c_int = 0;
    // SAFETY: the kernel writes at most `handle_bytes` (128) bytes after the 8-byte header,
    // and one int to `mount_id`; the path is a NUL-terminated literal.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_name_to_handle_at,
            libc::AT_FDCWD,
            c".".as_ptr(),
            handle.as_mut_ptr(),
            &mut mount_id as *mut libc::c_int,
            0,
        )
    };
    check(ret, || "name_to_handle_at(AT_FDCWD, \".\")".to_owned()).map(drop)
}

/// `truncate(path, len)`.
pub fn truncate(path: &std::path::Path, len: i64) -> SysResult<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| SysError {
        call: format!("truncate({})", path.display()),
        source: io::Error::from(io::ErrorKind::InvalidInput),
    })?;
    // SAFETY: truncate reads a NUL-terminated path that lives until the call returns.
    let ret = unsafe { libc::truncate(c.as_ptr(), len) };
    check(ret.into(), || {
        format!("truncate({}, {len})", path.display())
    })
    .map(drop)
}

/// A path as a C string, or an `EINVAL`-style error naming `call`.
fn c_path(path: &std::path::Path, call: &str) -> SysResult<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| SysError {
        call: format!("{call}({})", path.display()),
        source: io::Error::from(io::ErrorKind::InvalidInput),
    })
}

/// `renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_EXCHANGE)`: swaps two names atomically
/// (either may be a directory, non-empty or not; a success is undone by repeating it).
pub fn rename_exchange(from: &std::path::Path, to: &std::path::Path) -> SysResult<()> {
    let call = || {
        format!(
            "renameat2({}, {}, RENAME_EXCHANGE)",
            from.display(),
            to.display()
        )
    };
    let a = c_path(from, "renameat2")?;
    let b = c_path(to, "renameat2")?;
    // SAFETY: both paths are NUL-terminated and live until the call returns.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    check(ret, call).map(drop)
}

/// `mount("tierbox-probe", target, "tmpfs", 0, "size=64k")`.
pub fn mount_tmpfs(target: &std::path::Path) -> SysResult<()> {
    let t = c_path(target, "mount")?;
    // SAFETY: every pointer is a NUL-terminated string that lives until the call returns.
    let ret = unsafe {
        libc::mount(
            c"tierbox-probe".as_ptr(),
            t.as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            c"size=64k".as_ptr().cast(),
        )
    };
    check(ret.into(), || format!("mount(tmpfs, {})", target.display())).map(drop)
}

/// `umount2(target, MNT_DETACH)`.
pub fn umount_detach(target: &std::path::Path) -> SysResult<()> {
    let t = c_path(target, "umount2")?;
    // SAFETY: the path is NUL-terminated and lives until the call returns.
    let ret = unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) };
    check(ret.into(), || {
        format!("umount2({}, MNT_DETACH)", target.display())
    })
    .map(drop)
}

/// `FSOPEN_CLOEXEC` (uapi `linux/mount.h`).
const FSOPEN_CLOEXEC: libc::c_uint = 1;

/// `fsopen("tmpfs", FSOPEN_CLOEXEC)`: a filesystem context (the new mount API).
pub fn fsopen_tmpfs() -> SysResult<OwnedFd> {
    // SAFETY: the name is a NUL-terminated literal; flags are an integer.
    let ret = unsafe { libc::syscall(libc::SYS_fsopen, c"tmpfs".as_ptr(), FSOPEN_CLOEXEC) };
    let call = "fsopen(\"tmpfs\")";
    owned_fd(check(ret, || call.to_owned())?, call)
}

/// `OPEN_TREE_CLONE` and `OPEN_TREE_CLOEXEC` (uapi `linux/mount.h`).
const OPEN_TREE_CLONE: libc::c_uint = 1;
const OPEN_TREE_CLOEXEC: libc::c_uint = libc::O_CLOEXEC as libc::c_uint;

/// `open_tree(AT_FDCWD, ".", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)`: a detached copy of
/// the working directory's mount (the raw material of `move_mount`).
pub fn open_tree_clone_cwd() -> SysResult<OwnedFd> {
    // SAFETY: the path is a NUL-terminated literal; the rest are integers.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            c".".as_ptr(),
            OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC,
        )
    };
    let call = "open_tree(AT_FDCWD, \".\", OPEN_TREE_CLONE)";
    owned_fd(check(ret, || call.to_owned())?, call)
}

/// `gethostname()` (the UTS namespace's nodename, what `uname -n` prints).
pub fn hostname() -> SysResult<String> {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into the buffer.
    let ret = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    check(ret.into(), || "gethostname()".to_owned())?;
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// `sethostname(name)`.
pub fn sethostname(name: &str) -> SysResult<()> {
    // SAFETY: sethostname reads exactly `name.len()` bytes from the pointer.
    let ret = unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) };
    check(ret.into(), || format!("sethostname({name:?})")).map(drop)
}

/// A system call `name` whose arguments are integers, or at the indexes in `paths` the
/// given paths (as C strings): for the calls a probe makes with unusual arguments
/// (`mknodat` of a whiteout, `openat2` with a mode, `renameat2` with a flag).
pub fn path_call(
    name: &str,
    nr: libc::c_long,
    args: [u64; 5],
    paths: &[(usize, &std::path::Path)],
) -> SysResult<libc::c_long> {
    let mut held = Vec::new();
    let mut a = args;
    for &(i, p) in paths {
        let c = c_path(p, name)?;
        a[i] = c.as_ptr() as u64;
        held.push(c);
    }
    let call = || {
        let shown: Vec<String> = (0..5)
            .map(|i| match paths.iter().find(|(j, _)| *j == i) {
                Some((_, p)) => p.display().to_string(),
                None if args[i] as i64 == i64::from(libc::AT_FDCWD) => "AT_FDCWD".to_owned(),
                None => format!("{:#o}", args[i]),
            })
            .collect();
        format!("{name}({})", shown.join(", "))
    };
    // SAFETY: every pointer argument is one of `held`'s NUL-terminated strings, alive
    // until the call returns; the rest are integers the kernel validates.
    let ret = unsafe { libc::syscall(nr, a[0], a[1], a[2], a[3], a[4]) };
    drop(held);
    check(ret, call)
}
