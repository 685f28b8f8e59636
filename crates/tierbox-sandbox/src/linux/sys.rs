//! Raw system-call wrappers for the Linux security primitives: the only file of
//! `linux/` (with [`super`]'s siblings staying safe) that contains `unsafe`.
//!
//! Invariants kept here:
//!
//! - **Every `unsafe` block has a `// SAFETY:` comment** stating the precondition that
//!   makes it sound, and each system call is wrapped exactly once.
//! - **Child-side functions are async-signal-safe.** The functions in the "child side"
//!   section are called by the launcher between `clone(CLONE_VM | CLONE_VFORK)` and
//!   `execve`, in a child that shares the parent's memory. They use `libc::syscall`
//!   only (never glibc wrappers such as `setuid`, which broadcast to other threads and
//!   take locks), do not allocate, do not lock, cannot panic, and report failure as the
//!   raw `errno` value (`Err(i32)`), which the launcher passes back over its error pipe.
//! - **Supervisor-side functions** (the "prepare side" section) may allocate and return
//!   [`std::io::Error`]; the calling module turns them into its typed error naming the
//!   syscall and its arguments.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

// ---------------------------------------------------------------------------------------
// Kernel ABI constants that `libc` does not (yet) export.
// ---------------------------------------------------------------------------------------

/// `LANDLOCK_CREATE_RULESET_VERSION`: flag asking `landlock_create_ruleset` for the ABI.
const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1 << 0;
/// `LANDLOCK_RULE_PATH_BENEATH`: rule type of a [`LandlockPathBeneathAttr`].
const LANDLOCK_RULE_PATH_BENEATH: u32 = 1;
/// `LANDLOCK_RULE_NET_PORT`: rule type of a [`LandlockNetPortAttr`] (ABI ≥ 4).
const LANDLOCK_RULE_NET_PORT: u32 = 2;
/// `_LINUX_CAPABILITY_VERSION_3`: the 64-bit capability set layout (two data words).
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// `struct landlock_ruleset_attr` (uapi `linux/landlock.h`), in its ABI-6 layout.
///
/// The full 24-byte struct is always passed: older kernels accept a larger struct as long
/// as the fields they do not know are zero, so the caller must zero `handled_access_net`
/// below ABI 4 and `scoped` below ABI 6.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LandlockRulesetAttr {
    /// Filesystem access rights the ruleset handles (denied unless a rule allows them).
    pub handled_access_fs: u64,
    /// Network access rights the ruleset handles (ABI ≥ 4).
    pub handled_access_net: u64,
    /// IPC scopes restricted to the sandbox's own domain (ABI ≥ 6).
    pub scoped: u64,
}

/// `struct landlock_path_beneath_attr`: packed in the uapi header, 12 bytes.
#[repr(C, packed)]
struct LandlockPathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// `struct landlock_net_port_attr`, 16 bytes.
#[repr(C)]
struct LandlockNetPortAttr {
    allowed_access: u64,
    port: u64,
}

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapUserHeader {
    version: u32,
    pid: i32,
}

/// `struct __user_cap_data_struct`; version 3 takes an array of two.
#[repr(C)]
#[derive(Clone, Copy)]
struct CapUserData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// `n` (positive) in decimal, NUL-terminated, in `buf` (no allocation: for a child that
/// shares its parent's memory, or has just forked).
pub(crate) fn decimal(n: libc::pid_t, buf: &mut [u8; 12]) -> &[u8] {
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

/// Read the calling thread's `errno` without allocating (async-signal-safe).
pub(crate) fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Map a raw `syscall` return value to `Ok(value)` or `Err(errno)`.
pub(crate) fn check(ret: libc::c_long) -> Result<libc::c_long, i32> {
    if ret < 0 { Err(errno()) } else { Ok(ret) }
}

/// Raw `socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC)` and the address `127.0.0.1:port`
/// to bind or connect it to. Async-signal-safe.
pub(crate) fn loopback_tcp_socket(port: u16) -> Result<(i32, libc::sockaddr_in), i32> {
    // SAFETY: integer arguments only.
    let fd = check(unsafe {
        libc::syscall(
            libc::SYS_socket,
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    Ok((i32::try_from(fd).unwrap_or(-1), loopback_addr(port)))
}

/// `127.0.0.1:port` as a `sockaddr_in`.
pub(crate) fn loopback_addr(port: u16) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
        },
        sin_zero: [0; 8],
    }
}

/// Raw `prctl(option, arg2, arg3, 0, 0)`. Async-signal-safe.
///
/// Every argument after `option` is an `unsigned long` in the kernel, and `syscall(2)` is
/// variadic: passing them as full-width `c_ulong` (never a bare `0`, which is an `i32`
/// whose upper register half the ABI leaves undefined) keeps the options that insist on
/// zero arguments (e.g. `PR_SET_NO_NEW_PRIVS`) from failing with `EINVAL`.
fn prctl(
    option: libc::c_int,
    arg2: libc::c_ulong,
    arg3: libc::c_ulong,
) -> Result<libc::c_long, i32> {
    let zero: libc::c_ulong = 0;
    // SAFETY: integer arguments only; no option used here takes a pointer.
    check(unsafe { libc::syscall(libc::SYS_prctl, option, arg2, arg3, zero, zero) })
}

// ---------------------------------------------------------------------------------------
// Prepare side (supervisor): may allocate, returns io::Error.
// ---------------------------------------------------------------------------------------

/// `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`: the highest
/// landlock ABI the kernel supports.
///
/// Fails with `ENOSYS` (not built in) or `EOPNOTSUPP` (built in but disabled at boot).
pub fn landlock_abi_version() -> io::Result<u32> {
    // SAFETY: with a NULL attribute pointer and size 0 the kernel reads no user memory;
    // the call only returns an integer.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<LandlockRulesetAttr>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    check(ret)
        .map(|abi| u32::try_from(abi).unwrap_or(0))
        .map_err(io::Error::from_raw_os_error)
}

/// `landlock_create_ruleset(attr, sizeof attr, 0)`: a new ruleset fd (close-on-exec).
pub fn landlock_create_ruleset(attr: &LandlockRulesetAttr) -> io::Result<OwnedFd> {
    // SAFETY: `attr` is a valid, initialised `#[repr(C)]` struct that outlives the call,
    // and the size passed is exactly its size; the kernel only reads it.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::from_ref(attr),
            size_of::<LandlockRulesetAttr>(),
            0u32,
        )
    };
    let fd = check(ret).map_err(io::Error::from_raw_os_error)?;
    let fd = RawFd::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: the kernel just returned this fd to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `landlock_add_rule(ruleset, LANDLOCK_RULE_PATH_BENEATH, {allowed_access, parent}, 0)`.
pub fn landlock_add_path_rule(
    ruleset: BorrowedFd<'_>,
    allowed_access: u64,
    parent: BorrowedFd<'_>,
) -> io::Result<()> {
    let attr = LandlockPathBeneathAttr {
        allowed_access,
        parent_fd: parent.as_raw_fd(),
    };
    // SAFETY: both fds are borrowed, hence open for the duration of the call; `attr` is
    // a valid packed struct on our stack that the kernel only reads.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            LANDLOCK_RULE_PATH_BENEATH,
            std::ptr::from_ref(&attr),
            0u32,
        )
    };
    check(ret).map(drop).map_err(io::Error::from_raw_os_error)
}

/// `landlock_add_rule(ruleset, LANDLOCK_RULE_PATH_BENEATH, {allowed_access, parent}, 0)`
/// on raw fds, returning the errno: async-signal-safe, for a child between `clone` and
/// `execve`.
pub fn landlock_add_path_rule_raw(
    ruleset: RawFd,
    allowed_access: u64,
    parent: RawFd,
) -> Result<(), i32> {
    let attr = LandlockPathBeneathAttr {
        allowed_access,
        parent_fd: parent,
    };
    // SAFETY: integer fds (validated by the kernel) and a pointer to a packed struct on
    // our stack that the kernel only reads.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset,
            LANDLOCK_RULE_PATH_BENEATH,
            std::ptr::from_ref(&attr),
            0u32,
        )
    };
    check(ret).map(drop)
}

/// `landlock_add_rule(ruleset, LANDLOCK_RULE_NET_PORT, {allowed_access, port}, 0)`.
pub fn landlock_add_net_rule(
    ruleset: BorrowedFd<'_>,
    allowed_access: u64,
    port: u16,
) -> io::Result<()> {
    let attr = LandlockNetPortAttr {
        allowed_access,
        port: u64::from(port),
    };
    // SAFETY: the fd is borrowed, hence open; `attr` is a valid struct on our stack that
    // the kernel only reads.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            LANDLOCK_RULE_NET_PORT,
            std::ptr::from_ref(&attr),
            0u32,
        )
    };
    check(ret).map(drop).map_err(io::Error::from_raw_os_error)
}

/// `prctl(PR_GET_SECCOMP)`: 0 when the caller is not under seccomp, 2 under a filter.
///
/// Fails with `EINVAL` when the kernel is built without `CONFIG_SECCOMP`.
pub fn prctl_get_seccomp() -> io::Result<i32> {
    prctl(libc::PR_GET_SECCOMP, 0, 0)
        .map(|mode| i32::try_from(mode).unwrap_or(-1))
        .map_err(io::Error::from_raw_os_error)
}

/// `seccomp(SECCOMP_GET_ACTION_AVAIL, 0, &action)`: whether the kernel knows `action`
/// (e.g. `SECCOMP_RET_KILL_PROCESS`).
pub fn seccomp_action_available(action: u32) -> io::Result<()> {
    // SAFETY: `action` lives on our stack for the whole call and the kernel reads 4
    // bytes from it.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_GET_ACTION_AVAIL,
            0u32,
            std::ptr::from_ref(&action),
        )
    };
    check(ret).map(drop).map_err(io::Error::from_raw_os_error)
}

/// Parse the `CapEff:` line of `/proc/self/status` (parent-side helper, allocates; for
/// tests and `doctor`). `None` when the file or the line cannot be read.
pub fn read_cap_eff_from_status() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_status_hex_field(&status, "CapEff")
}

/// Parse a hexadecimal `Name:\t<hex>` field of a `/proc/<pid>/status` text.
pub fn parse_status_hex_field(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        u64::from_str_radix(rest.trim(), 16).ok()
    })
}

// ---------------------------------------------------------------------------------------
// Child side: async-signal-safe, raw syscalls only, no allocation, errors as raw errno.
// ---------------------------------------------------------------------------------------

/// `prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)`: execve can no longer grant privileges
/// (setuid bits, file capabilities). Required before an unprivileged seccomp filter or
/// landlock ruleset. Async-signal-safe.
pub fn set_no_new_privs() -> Result<(), i32> {
    prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0).map(drop)
}

/// `landlock_restrict_self` flag (ABI 7): log the denials of the programs the caller
/// execs to the audit subsystem, not only its own until then.
pub const LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON: u32 = 1 << 1;

/// `landlock_restrict_self(ruleset_fd, flags)`: confine the calling thread (and its
/// future children) to the ruleset. `flags` is 0, or
/// [`LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON`] (ABI 7; `EINVAL` before). The caller must
/// have set `no_new_privs` (or hold `CAP_SYS_ADMIN`). Async-signal-safe.
pub fn landlock_restrict_self(ruleset_fd: RawFd, flags: u32) -> Result<(), i32> {
    // SAFETY: integer arguments only; the kernel validates the fd and the flags.
    let ret = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset_fd, flags) };
    check(ret).map(drop)
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, flags, prog)`: attach a classic-BPF filter to the
/// calling thread. `flags` is 0 or `SECCOMP_FILTER_FLAG_LOG` (the kernel audits every
/// call the filter does not allow); never TSYNC: the launcher's child is
/// single-threaded. The caller must have set `no_new_privs` (or hold `CAP_SYS_ADMIN`).
/// Async-signal-safe.
pub fn seccomp_set_filter(prog: &libc::sock_fprog, flags: libc::c_ulong) -> Result<(), i32> {
    // SAFETY: `prog` is a valid reference for the duration of the call; by the contract
    // of `SeccompProgram::as_fprog` its `filter` pointer addresses `len` initialised
    // instructions that outlive this call. The kernel copies the program and only reads.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            std::ptr::from_ref(prog),
        )
    };
    check(ret).map(drop)
}

/// Drop capabilities `0..=last_cap` from the bounding set with `PR_CAPBSET_DROP`.
///
/// Each capability is read first (`PR_CAPBSET_READ`) and dropped only when present:
/// every drop commits a new set of credentials (a few µs each, 41 of them), a read
/// commits nothing, so a thread whose bounding set is already empty (a child of a
/// launcher thread that emptied its own, see `launch`) pays 41 reads and still proves the
/// set empty. `EINVAL` (a capability this kernel does not know) is ignored. `EPERM` (no
/// `CAP_SETPCAP`) is returned when a capability is present and cannot be dropped.
/// Async-signal-safe.
pub fn drop_bounding_set(last_cap: u32) -> Result<(), i32> {
    for cap in 0..=last_cap {
        match prctl(libc::PR_CAPBSET_READ, libc::c_ulong::from(cap), 0) {
            Ok(0) | Err(libc::EINVAL) => continue,
            Ok(_) => {}
            Err(e) => return Err(e),
        }
        match prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0) {
            Ok(_) => {}
            Err(libc::EINVAL) => {}
            Err(libc::EPERM) => {
                let present = prctl(libc::PR_CAPBSET_READ, libc::c_ulong::from(cap), 0);
                // 1: still present, we cannot drop it. 0: already gone. -1 (EINVAL):
                // unknown to this kernel (the kernel checks privilege before validity).
                if present.is_ok_and(|p| p > 0) {
                    return Err(libc::EPERM);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)`: empty the ambient set.
/// `EINVAL` (a kernel before 4.3, which has no ambient set) counts as success.
/// Async-signal-safe.
pub fn clear_ambient() -> Result<(), i32> {
    let clear_all = libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong;
    match prctl(libc::PR_CAP_AMBIENT, clear_all, 0) {
        Ok(_) | Err(libc::EINVAL) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Securebits locked in by [`set_securebits_noroot`]: uid 0 gains no capabilities on
/// exec (`NOROOT`), uid changes do not touch capabilities (`NO_SETUID_FIXUP`; so call
/// [`capset_zero`] *after* [`set_ids`]), `KEEP_CAPS` can never be turned on, and no
/// ambient capability can be raised; each with its `_LOCKED` bit so the sandbox cannot
/// undo it.
pub const SECUREBITS_LOCKED_DOWN: u32 = (libc::SECBIT_NOROOT
    | libc::SECBIT_NOROOT_LOCKED
    | libc::SECBIT_NO_SETUID_FIXUP
    | libc::SECBIT_NO_SETUID_FIXUP_LOCKED
    | libc::SECBIT_KEEP_CAPS_LOCKED
    | libc::SECBIT_NO_CAP_AMBIENT_RAISE
    | libc::SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED) as u32;

/// `prctl(PR_SET_SECUREBITS, SECUREBITS_LOCKED_DOWN)`. Needs `CAP_SETPCAP`: returns
/// `Err(EPERM)` when unprivileged so the caller can decide whether that is acceptable
/// (an unprivileged process has no capabilities for uid 0 semantics to restore anyway).
/// When the bits already are exactly these (inherited), it only reads them and returns
/// `Ok`. Async-signal-safe.
pub fn set_securebits_noroot() -> Result<(), i32> {
    // Already locked down (inherited from a launcher thread that set them): setting the
    // same value again would only commit an identical set of credentials.
    if prctl(libc::PR_GET_SECUREBITS, 0, 0) == Ok(libc::c_long::from(SECUREBITS_LOCKED_DOWN)) {
        return Ok(());
    }
    prctl(
        libc::PR_SET_SECUREBITS,
        libc::c_ulong::from(SECUREBITS_LOCKED_DOWN),
        0,
    )
    .map(drop)
}

/// `capset` (version 3) with empty effective, permitted and inheritable sets. Always
/// allowed (dropping never needs privilege). Async-signal-safe.
pub fn capset_zero() -> Result<(), i32> {
    let header = CapUserHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapUserData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: `header` and `data` are valid `#[repr(C)]` values on our stack that outlive
    // the call; version 3 makes the kernel read exactly two data structs, which is what
    // `data` holds. Nothing is written back by capset.
    let ret =
        unsafe { libc::syscall(libc::SYS_capset, std::ptr::from_ref(&header), data.as_ptr()) };
    check(ret).map(drop)
}

/// Become `uid`/`gid`: raw `setgroups(0, NULL)`, `setresgid(gid, gid, gid)`,
/// `setresuid(uid, uid, uid)`, in that order (groups and gid while still privileged).
/// In a user namespace `setgroups` fails with `EPERM` once `/proc/<pid>/setgroups` is
/// `deny` (required before an unprivileged gid map is written).
///
/// These are the raw per-thread system calls, not glibc's wrappers, which signal every
/// thread of the process to keep credentials uniform (unsafe in a `CLONE_VM` child).
/// Async-signal-safe.
pub fn set_ids(uid: u32, gid: u32) -> Result<(), i32> {
    clear_groups()?;
    // SAFETY: integer arguments only.
    let ret = unsafe { libc::syscall(libc::SYS_setresgid, gid, gid, gid) };
    check(ret)?;
    // SAFETY: integer arguments only.
    let ret = unsafe { libc::syscall(libc::SYS_setresuid, uid, uid, uid) };
    check(ret).map(drop)
}

/// `setgroups(0, NULL)`: no supplementary groups. The raw per-thread system call (see
/// [`set_ids`]). Async-signal-safe.
pub fn clear_groups() -> Result<(), i32> {
    // SAFETY: a zero-length list with a NULL pointer; the kernel reads nothing.
    let ret = unsafe { libc::syscall(libc::SYS_setgroups, 0usize, std::ptr::null::<u32>()) };
    check(ret).map(drop)
}

/// Write all of `bytes` to `fd` with raw `write(2)`, retrying on `EINTR` and short
/// writes. Used by the child to attach itself to its cgroups (`"0"` into each
/// `cgroup.procs` fd of [`super::cgroup::RunCgroup::procs_fds`]). Async-signal-safe.
pub fn write_all_raw(fd: RawFd, bytes: &[u8]) -> Result<(), i32> {
    let mut rest = bytes;
    while !rest.is_empty() {
        // SAFETY: `rest` is a valid initialised slice for the duration of the call and
        // the kernel reads at most `rest.len()` bytes from it.
        let ret = unsafe { libc::syscall(libc::SYS_write, fd, rest.as_ptr(), rest.len()) };
        match check(ret) {
            Ok(0) => return Err(libc::EIO),
            Ok(n) => {
                let n = usize::try_from(n).unwrap_or(rest.len()).min(rest.len());
                rest = rest.get(n..).unwrap_or_default();
            }
            Err(libc::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// User-namespace probe (supervisor side): a short-lived forked child.
// ---------------------------------------------------------------------------------------

/// The step of [`probe_namespaces_in_child`] that failed in the child, with its `errno`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NsProbeFailure {
    /// `unshare(flags)`.
    Unshare(i32),
    /// `mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)` in the new mount namespace.
    MountPrivate(i32),
    /// `mount("tmpfs", "/", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k")` in the
    /// new mount namespace (what AppArmor's userns restriction denies even when the
    /// `unshare` itself succeeds).
    MountTmpfs(i32),
}

/// Forks a child (raw `clone(SIGCHLD)`, which runs no atfork handlers) that calls
/// `unshare(flags)` and, when `flags` has `CLONE_NEWNS`, makes its mounts private and
/// mounts a tiny tmpfs over its own `/` (visible only in its private namespace, gone when
/// it exits). The child reports a failure as `(step, errno)` on a pipe and exits 1, or
/// exits 0; the parent waits for it.
///
/// Why a child: `unshare(CLONE_NEWUSER)` fails with `EINVAL` in a multi-threaded process,
/// and a successful one would change the caller for good. Returns `Ok(Err(_))` when the
/// child reported a failure, `Err(_)` when the probe itself could not run (`pipe2`,
/// `clone`, `waitpid`, or a child that died otherwise).
pub fn probe_namespaces_in_child(flags: libc::c_int) -> io::Result<Result<(), NsProbeFailure>> {
    const STEP_UNSHARE: u32 = 1;
    const STEP_MOUNT_PRIVATE: u32 = 2;
    const STEP_MOUNT_TMPFS: u32 = 3;
    let mut fds = [-1i32; 2];
    let named = |call: &str, e: io::Error| io::Error::new(e.kind(), format!("{call}: {e}"));
    // SAFETY: `fds` is a valid two-element out-array for the duration of the call.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(named("pipe2(O_CLOEXEC)", io::Error::last_os_error()));
    }
    // SAFETY: pipe2 just returned these two fds; nothing else owns them.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let want_mounts = flags & libc::CLONE_NEWNS != 0;
    let raw_flags = flags as libc::c_ulong;
    let (clone_flags, zero) = (libc::SIGCHLD as libc::c_ulong, 0 as libc::c_ulong);
    // SAFETY: a clone without CLONE_VM gives the child a copy of our memory, like fork;
    // a zero stack pointer keeps the current stack (in the copy). In the child, only raw
    // system calls on data that already exists (static C strings, stack arrays, an open
    // fd) run before `_exit`, which is async-signal-safe even though the parent may be
    // multi-threaded.
    let pid = check(unsafe { libc::syscall(libc::SYS_clone, clone_flags, zero, zero, zero, zero) })
        .map_err(|e| named("clone(SIGCHLD)", io::Error::from_raw_os_error(e)))?;
    if pid == 0 {
        let fd = write_end.as_raw_fd();
        let fail = |step: u32, errno: i32| -> ! {
            let mut report = [0u8; 8];
            report[..4].copy_from_slice(&step.to_ne_bytes());
            report[4..].copy_from_slice(&errno.to_ne_bytes());
            let _ = write_all_raw(fd, &report);
            // SAFETY: `_exit` ends the child without running atexit handlers or
            // touching the parent's stdio buffers.
            unsafe { libc::_exit(1) }
        };
        // SAFETY: integer argument only.
        if let Err(e) = check(unsafe { libc::syscall(libc::SYS_unshare, raw_flags) }) {
            fail(STEP_UNSHARE, e);
        }
        if want_mounts {
            let root = c"/";
            let tmpfs = c"tmpfs";
            let opts = c"size=4k";
            let private = (libc::MS_REC | libc::MS_PRIVATE) as libc::c_ulong;
            // SAFETY: NULL source, type and data are allowed for a propagation change;
            // `root` is a static NUL-terminated string.
            let ret = unsafe {
                libc::syscall(
                    libc::SYS_mount,
                    std::ptr::null::<libc::c_char>(),
                    root.as_ptr(),
                    std::ptr::null::<libc::c_char>(),
                    private,
                    std::ptr::null::<libc::c_void>(),
                )
            };
            if let Err(e) = check(ret) {
                fail(STEP_MOUNT_PRIVATE, e);
            }
            let mount_flags = (libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC) as libc::c_ulong;
            // SAFETY: all pointers are static NUL-terminated strings; the mount lands in
            // the child's private mount namespace only.
            let ret = unsafe {
                libc::syscall(
                    libc::SYS_mount,
                    tmpfs.as_ptr(),
                    root.as_ptr(),
                    tmpfs.as_ptr(),
                    mount_flags,
                    opts.as_ptr(),
                )
            };
            if let Err(e) = check(ret) {
                fail(STEP_MOUNT_TMPFS, e);
            }
        }
        // SAFETY: as above.
        unsafe { libc::_exit(0) }
    }
    drop(write_end);
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ECHILD))?;
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer on our stack; `pid` is our child.
        let ret = unsafe { libc::waitpid(pid, &raw mut status, 0) };
        if ret == pid {
            break;
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(named(&format!("waitpid({pid})"), err));
        }
    }
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        return Ok(Ok(()));
    }
    let mut report = [0u8; 8];
    let mut file = std::fs::File::from(read_end);
    let got = io::Read::read(&mut file, &mut report).map_err(|e| named("read(probe pipe)", e))?;
    if !libc::WIFEXITED(status) || got != report.len() {
        return Err(io::Error::other(format!(
            "namespace probe child ended with wait status {status:#x} and a {got}-byte report"
        )));
    }
    let step = u32::from_ne_bytes([report[0], report[1], report[2], report[3]]);
    let errno = i32::from_ne_bytes([report[4], report[5], report[6], report[7]]);
    Ok(Err(match step {
        STEP_UNSHARE => NsProbeFailure::Unshare(errno),
        STEP_MOUNT_PRIVATE => NsProbeFailure::MountPrivate(errno),
        _ => NsProbeFailure::MountTmpfs(errno),
    }))
}

/// Resets every catchable signal to `SIG_DFL` with raw `rt_sigaction`.
pub(crate) fn reset_signal_handlers() {
    #[repr(C)]
    struct KernelSigaction {
        handler: usize,
        flags: u64,
        restorer: usize,
        mask: u64,
    }
    let dfl = KernelSigaction {
        handler: libc::SIG_DFL,
        flags: 0,
        restorer: 0,
        mask: 0,
    };
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: rt_sigaction with a valid kernel sigaction struct on our stack; errors
        // (EINVAL for reserved numbers) are ignored on purpose.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                sig as libc::c_ulong,
                &dfl as *const KernelSigaction,
                std::ptr::null_mut::<libc::c_void>(),
                8 as libc::c_ulong,
            )
        };
    }
}

/// Test support: fork, run async-signal-safe code in the child, collect exit statuses,
/// and a few raw probe syscalls the tests issue from inside a filtered child.
/// Waits, blocked in `ppoll` with no descriptor, until killed: the whole life of the
/// child that holds a new user namespace open for [`new_user_namespace`].
extern "C" fn userns_holder(_: *mut libc::c_void) -> libc::c_int {
    loop {
        // SAFETY: ppoll with no descriptors, no timeout and no mask only sleeps; every
        // signal but SIGKILL is blocked (inherited from the cloning thread).
        unsafe {
            libc::syscall(
                libc::SYS_ppoll,
                std::ptr::null_mut::<libc::pollfd>(),
                0 as libc::c_ulong,
                std::ptr::null::<libc::timespec>(),
                std::ptr::null::<libc::sigset_t>(),
                0 as libc::c_ulong,
            )
        };
    }
}

/// A new user namespace, owned by this process's, whose uid and gid maps are `uid_map`
/// and `gid_map` (`/proc/<pid>/uid_map` lines; mapping ids other than our own needs
/// `CAP_SETUID`/`CAP_SETGID`), as an fd of its `ns/user` file. A child is cloned into the
/// namespace (every signal blocked, waiting), its maps are written, its namespace opened,
/// and it is killed and reaped: the fd keeps the namespace alive.
pub fn new_user_namespace(uid_map: &str, gid_map: &str) -> io::Result<OwnedFd> {
    user_namespace_held_by(userns_holder, None, |pid| {
        std::fs::write(format!("/proc/{pid}/uid_map"), uid_map)?;
        std::fs::write(format!("/proc/{pid}/gid_map"), gid_map)
    })
}

/// The holder of [`own_ids_user_namespace`]: makes its own (copied) memory dumpable, so
/// that its `/proc` files belong to its uid and an unprivileged parent may write its id
/// maps, says so with one byte on the fd it is given, then waits until killed.
extern "C" fn dumpable_userns_holder(arg: *mut libc::c_void) -> libc::c_int {
    let ready = arg as usize as libc::c_int;
    // SAFETY: prctl with integer arguments; it changes this child's own mm (no CLONE_VM:
    // a copy), never the parent's.
    unsafe {
        libc::syscall(
            libc::SYS_prctl,
            libc::PR_SET_DUMPABLE,
            1 as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    let _ = write_all_raw(ready, b"r");
    userns_holder(std::ptr::null_mut())
}

/// A new user namespace owned by this (unprivileged) process's, mapping only its own
/// `uid` and `gid` to themselves with `setgroups` denied — what an unprivileged process
/// may write for itself — as an fd of its `ns/user` file, which a child joins with
/// `setns` (a Tier B run's private `/tmp` needs a namespace it may mount in). The child
/// cloned into the namespace makes itself dumpable first (a supervisor is not, so its
/// `/proc` files, and a child's sharing its memory, belong to root), then the maps are
/// written from here. It is a copy of this process's memory for the fraction of a
/// millisecond it lives.
pub fn own_ids_user_namespace(uid: u32, gid: u32) -> io::Result<OwnedFd> {
    let mut fds = [-1 as libc::c_int; 2];
    // SAFETY: pipe2 writes two fds into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds are fresh and ours.
    let (ready_r, ready_w) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    user_namespace_held_by(dumpable_userns_holder, Some(ready_w), move |pid| {
        let mut byte = [0u8; 1];
        if std::io::Read::read(&mut std::fs::File::from(ready_r), &mut byte)? != 1 {
            return Err(io::Error::other("the user namespace's holder ended early"));
        }
        std::fs::write(format!("/proc/{pid}/uid_map"), format!("{uid} {uid} 1\n"))?;
        std::fs::write(format!("/proc/{pid}/setgroups"), "deny")?;
        std::fs::write(format!("/proc/{pid}/gid_map"), format!("{gid} {gid} 1\n"))
    })
}

/// Clones `holder` into a new user namespace (every signal blocked, no `CLONE_VM`; its
/// argument is `arg`'s fd number, which the parent's copy closes after the clone), lets
/// `maps` write its id maps, opens its `ns/user`, then kills and reaps it.
fn user_namespace_held_by(
    holder: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    arg: Option<OwnedFd>,
    maps: impl FnOnce(libc::pid_t) -> io::Result<()>,
) -> io::Result<OwnedFd> {
    let stack = crate::linux::ns::sys::NsStack::new();
    let raw_arg = arg.as_ref().map_or(-1, |fd| fd.as_raw_fd());
    let pid = crate::launch::sys::with_all_signals_blocked(|| {
        // SAFETY: the holders make only raw system calls on their copy of our memory
        // (`stack.top()` is the aligned end of a live mapping; no CLONE_VM); the
        // argument is an fd number, not a pointer.
        unsafe {
            libc::clone(
                holder,
                stack.top(),
                libc::CLONE_NEWUSER | libc::SIGCHLD,
                raw_arg as usize as *mut libc::c_void,
            )
        }
    });
    if pid == -1 {
        return Err(io::Error::last_os_error());
    }
    drop(arg);
    let result = maps(pid).and_then(|()| {
        let ns = std::fs::File::open(format!("/proc/{pid}/ns/user"))?;
        Ok(OwnedFd::from(ns))
    });
    // SAFETY: integer arguments; `pid` is our child, not yet reaped, so not reused.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    result
}

/// `open_tree(2)` flag: clone the mount instead of opening it in place.
pub(crate) const OPEN_TREE_CLONE: u32 = 1;
/// `AT_RECURSIVE`: clone / set attributes on the whole subtree.
pub(crate) const AT_RECURSIVE: u32 = 0x8000;
/// `move_mount(2)` flag: the source is the fd itself (empty path).
pub(crate) const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x4;

/// `struct mount_attr` (uapi `linux/mount.h`, `MOUNT_ATTR_SIZE_VER0` = 32 bytes).
#[repr(C)]
pub(crate) struct MountAttr {
    pub(crate) attr_set: u64,
    pub(crate) attr_clr: u64,
    pub(crate) propagation: u64,
    pub(crate) userns_fd: u64,
}

/// `open_tree(path, OPEN_TREE_CLONE | AT_RECURSIVE)` made idmapped through `userns`, with
/// `nosuid` and `nodev`: a detached mount tree of `path` in which the ids of `userns`'s
/// maps are translated (a file owned by a mapped id shows as the id it maps to, and a file
/// made by that id is stored as the mapped one). Needs `CAP_SYS_ADMIN` over the
/// filesystem and a filesystem that supports idmapped mounts.
pub fn idmapped_tree(path: &std::path::Path, userns: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    /// `MOUNT_ATTR_IDMAP`.
    const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: a NUL-terminated path and integer flags; returns a new fd we own.
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            c_path.as_ptr(),
            (OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | AT_RECURSIVE) as libc::c_ulong,
        )
    };
    if tree < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd returned by the kernel, now ours.
    let tree = unsafe { OwnedFd::from_raw_fd(tree as RawFd) };
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP
            | crate::linux::ns::sys::MOUNT_ATTR_NOSUID
            | crate::linux::ns::sys::MOUNT_ATTR_NODEV,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    // SAFETY: a valid tree fd, an empty path with AT_EMPTY_PATH, and a mount_attr of the
    // size passed, borrowed for the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            (libc::AT_EMPTY_PATH as libc::c_uint | AT_RECURSIVE) as libc::c_ulong,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(tree)
}

/// `openat2(AT_FDCWD, path, O_PATH | O_NOFOLLOW | O_CLOEXEC, RESOLVE_NO_SYMLINKS |
/// RESOLVE_NO_MAGICLINKS)`: an fd of exactly the object at the canonical `path`, never of
/// something a symlink swapped into any of its components.
pub fn open_path_no_symlinks(path: &std::path::Path) -> io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)?;
    // SAFETY: open_how is plain integers; all-zero is its documented default.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: openat2 with AT_FDCWD, a NUL-terminated path and a fully initialised
    // open_how of the size we pass.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD as libc::c_long,
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd owned by us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::{check, errno, prctl};

    /// Fork; the child runs `child` and `_exit`s with its return value. The closure must
    /// only call async-signal-safe code and must not allocate (the test harness is
    /// multi-threaded). Returns the exit code, or `128 + signal` when it was killed.
    pub(crate) fn fork_with(child: impl FnOnce() -> i32) -> i32 {
        let pid = fork_child(child);
        wait_exit(pid)
    }

    /// Fork without waiting; the child runs `child` and `_exit`s with its result.
    pub(crate) fn fork_child(child: impl FnOnce() -> i32) -> libc::pid_t {
        // SAFETY: fork in a multi-threaded process is sound as long as the child only
        // runs async-signal-safe code before `_exit`, which the callers guarantee
        // (their closures issue raw syscalls on pre-allocated data only).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed: errno {}", errno());
        if pid == 0 {
            let code = child();
            // SAFETY: `_exit` ends the child without running atexit handlers or
            // touching the parent's stdio buffers.
            unsafe { libc::_exit(code) };
        }
        pid
    }

    /// `waitpid(pid)`: the exit code, or `128 + signal`.
    pub(crate) fn wait_exit(pid: libc::pid_t) -> i32 {
        let mut status = 0;
        loop {
            // SAFETY: `status` is a valid out-pointer on our stack.
            let ret = unsafe { libc::waitpid(pid, &raw mut status, 0) };
            if ret == pid {
                break;
            }
            assert_eq!(errno(), libc::EINTR, "waitpid({pid}) failed");
        }
        if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            128 + libc::WTERMSIG(status)
        }
    }

    /// Raw `unshare(flags)`.
    pub(crate) fn unshare(flags: i32) -> Result<(), i32> {
        let flags = flags as libc::c_ulong;
        // SAFETY: integer arguments only.
        check(unsafe { libc::syscall(libc::SYS_unshare, flags) }).map(drop)
    }

    /// Raw `ptrace(PTRACE_TRACEME, 0, 0, 0)`.
    pub(crate) fn ptrace_traceme() -> Result<(), i32> {
        let (request, zero) = (libc::PTRACE_TRACEME as libc::c_long, 0 as libc::c_long);
        // SAFETY: integer arguments only.
        check(unsafe { libc::syscall(libc::SYS_ptrace, request, zero, zero, zero) }).map(drop)
    }

    /// Raw `socket(domain, type, 0)`; closes the socket on success.
    pub(crate) fn socket(domain: i32, ty: i32) -> Result<(), i32> {
        // SAFETY: integer arguments only.
        let fd = check(unsafe { libc::syscall(libc::SYS_socket, domain, ty, 0) })?;
        // SAFETY: closing the fd we just created.
        unsafe { libc::syscall(libc::SYS_close, fd) };
        Ok(())
    }

    /// Raw `getpid()`.
    pub(crate) fn getpid() -> i64 {
        // SAFETY: no arguments.
        unsafe { libc::syscall(libc::SYS_getpid) }
    }

    /// Raw `personality(persona)`.
    pub(crate) fn personality(persona: u64) -> Result<i64, i32> {
        // SAFETY: integer argument only.
        check(unsafe { libc::syscall(libc::SYS_personality, persona) })
    }

    /// Raw `capget` of the calling thread: (effective, permitted) as 64-bit masks.
    pub(crate) fn capget_self() -> Result<(u64, u64), i32> {
        let mut header = super::CapUserHeader {
            version: super::LINUX_CAPABILITY_VERSION_3,
            pid: 0,
        };
        let mut data = [super::CapUserData {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        // SAFETY: valid out-pointers on our stack; version 3 writes two data structs.
        check(unsafe { libc::syscall(libc::SYS_capget, &raw mut header, data.as_mut_ptr()) })?;
        let eff = u64::from(data[0].effective) | (u64::from(data[1].effective) << 32);
        let prm = u64::from(data[0].permitted) | (u64::from(data[1].permitted) << 32);
        Ok((eff, prm))
    }

    /// Raw `prctl(PR_GET_SECUREBITS)`.
    pub(crate) fn get_securebits() -> Result<i64, i32> {
        prctl(libc::PR_GET_SECUREBITS, 0, 0)
    }

    /// Raw `prctl(PR_SET_SECUREBITS, bits)`, whatever the current bits are.
    pub(crate) fn set_securebits(bits: u32) -> Result<i64, i32> {
        prctl(libc::PR_SET_SECUREBITS, libc::c_ulong::from(bits), 0)
    }

    /// Raw `capset` (version 3) of the calling thread with 64-bit masks.
    pub(crate) fn capset_masks(
        effective: u64,
        permitted: u64,
        inheritable: u64,
    ) -> Result<(), i32> {
        let header = super::CapUserHeader {
            version: super::LINUX_CAPABILITY_VERSION_3,
            pid: 0,
        };
        let half = |m: u64, i: u32| (m >> (32 * i)) as u32;
        let data = [0, 1].map(|i| super::CapUserData {
            effective: half(effective, i),
            permitted: half(permitted, i),
            inheritable: half(inheritable, i),
        });
        // SAFETY: valid header and two data structs on our stack; capset only reads them.
        check(unsafe { libc::syscall(libc::SYS_capset, &raw const header, data.as_ptr()) })
            .map(drop)
    }

    /// Raw `prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE | PR_CAP_AMBIENT_IS_SET, cap)`.
    pub(crate) fn ambient(op: libc::c_int, cap: u32) -> Result<i64, i32> {
        let zero: libc::c_ulong = 0;
        // SAFETY: integer arguments only.
        check(unsafe {
            libc::syscall(
                libc::SYS_prctl,
                libc::PR_CAP_AMBIENT,
                op as libc::c_ulong,
                libc::c_ulong::from(cap),
                zero,
                zero,
            )
        })
    }

    /// Raw `prctl(PR_CAPBSET_READ, cap)`.
    pub(crate) fn capbset_read(cap: u32) -> Result<i64, i32> {
        prctl(libc::PR_CAPBSET_READ, libc::c_ulong::from(cap), 0)
    }

    /// Raw `getresuid` → (ruid, euid, suid).
    pub(crate) fn getresuid() -> (u32, u32, u32) {
        let (mut r, mut e, mut s) = (0u32, 0u32, 0u32);
        // SAFETY: three valid out-pointers on our stack.
        unsafe { libc::syscall(libc::SYS_getresuid, &raw mut r, &raw mut e, &raw mut s) };
        (r, e, s)
    }

    /// Raw `getresgid` → (rgid, egid, sgid).
    pub(crate) fn getresgid() -> (u32, u32, u32) {
        let (mut r, mut e, mut s) = (0u32, 0u32, 0u32);
        // SAFETY: three valid out-pointers on our stack.
        unsafe { libc::syscall(libc::SYS_getresgid, &raw mut r, &raw mut e, &raw mut s) };
        (r, e, s)
    }

    /// Monotonic clock in nanoseconds (vDSO `clock_gettime`, async-signal-safe).
    pub(crate) fn monotonic_ns() -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid out-pointer on our stack.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
        u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000
            + u64::try_from(ts.tv_nsec).unwrap_or(0)
    }

    /// A pipe `(read, write)`, both close-on-exec.
    pub(crate) fn pipe() -> (i32, i32) {
        let mut fds = [0i32; 2];
        // SAFETY: `fds` is a valid two-element out-array.
        let ret = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
        assert_eq!(ret, 0, "pipe2 failed: errno {}", errno());
        (fds[0], fds[1])
    }

    /// Raw `read` of up to `buf.len()` bytes.
    pub(crate) fn read(fd: i32, buf: &mut [u8]) -> Result<usize, i32> {
        // SAFETY: `buf` is a valid writable slice for the duration of the call.
        let n = check(unsafe { libc::syscall(libc::SYS_read, fd, buf.as_mut_ptr(), buf.len()) })?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// Raw `close`.
    pub(crate) fn close(fd: i32) {
        // SAFETY: closing an fd the test owns.
        unsafe { libc::syscall(libc::SYS_close, fd) };
    }

    /// Raw `openat(AT_FDCWD, path, flags, 0600)`.
    pub(crate) fn open(path: &std::ffi::CStr, flags: i32) -> Result<i32, i32> {
        // SAFETY: `path` is a valid NUL-terminated string for the duration of the call.
        let fd = check(unsafe {
            libc::syscall(
                libc::SYS_openat,
                libc::AT_FDCWD,
                path.as_ptr(),
                flags,
                0o600,
            )
        })?;
        Ok(i32::try_from(fd).unwrap_or(-1))
    }

    /// A raw system call whose arguments are integers (fds, flags, modes, devices) or, for
    /// each index in `paths`, a pointer to the `CStr` given there (all tests' paths).
    pub(crate) fn path_call(
        nr: libc::c_long,
        args: [u64; 5],
        paths: &[(usize, &std::ffi::CStr)],
    ) -> Result<i64, i32> {
        let mut a = args;
        for &(i, p) in paths {
            a[i] = p.as_ptr() as u64;
        }
        // SAFETY: every pointer argument points at a NUL-terminated string that outlives
        // the call; the rest are plain integers, which the kernel validates.
        check(unsafe { libc::syscall(nr, a[0], a[1], a[2], a[3], a[4]) })
    }

    /// Raw `kill(pid, sig)`.
    pub(crate) fn kill(pid: i32, sig: i32) -> Result<(), i32> {
        // SAFETY: integer arguments only.
        check(unsafe { libc::syscall(libc::SYS_kill, pid, sig) }).map(drop)
    }

    /// Raw TCP connect to 127.0.0.1:`port` (socket closed afterwards).
    pub(crate) fn connect_tcp_loopback(port: u16) -> Result<(), i32> {
        let (fd, addr) = super::loopback_tcp_socket(port)?;
        // SAFETY: `addr` is a valid sockaddr_in on our stack and the length matches it.
        let ret = check(unsafe {
            libc::syscall(
                libc::SYS_connect,
                fd,
                std::ptr::from_ref(&addr),
                size_of::<libc::sockaddr_in>(),
            )
        });
        close(fd);
        ret.map(drop)
    }

    /// Raw fork: `clone(SIGCHLD, 0, ...)` (works on every architecture, runs no atfork
    /// handlers). Returns 0 in the child, the pid in the parent.
    pub(crate) fn raw_fork() -> Result<i64, i32> {
        let (flags, zero) = (libc::SIGCHLD as libc::c_ulong, 0 as libc::c_ulong);
        // SAFETY: a clone without CLONE_VM gives the child a copy of our memory, like fork;
        // a zero stack pointer means "keep the current stack" (in the copy).
        check(unsafe { libc::syscall(libc::SYS_clone, flags, zero, zero, zero, zero) })
    }

    /// Map `bytes` of anonymous memory and write to every page (to trip a memory limit).
    pub(crate) fn touch_anon(bytes: usize) -> Result<(), i32> {
        // SAFETY: an anonymous private mapping at a kernel-chosen address.
        let addr = check(unsafe {
            libc::syscall(
                libc::SYS_mmap,
                std::ptr::null_mut::<libc::c_void>(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0 as libc::off_t,
            )
        })?;
        let base = addr as usize as *mut u8;
        let mut off = 0;
        while off < bytes {
            // SAFETY: `base + off` lies inside the `bytes`-long mapping we just created.
            unsafe { base.add(off).write_volatile(1) };
            off += 4096;
        }
        Ok(())
    }

    /// An i386 `getpid` through `int 0x80` (audit arch `AUDIT_ARCH_I386`).
    #[cfg(target_arch = "x86_64")]
    pub(crate) fn int80_getpid() -> i64 {
        let mut rax: i64 = 20; // __NR_getpid on i386
        // SAFETY: `int 0x80` enters the kernel's compat syscall path; it reads eax (and
        // ebx..ebp, unused by getpid), returns in eax, and may clear r8-r11, which are
        // declared clobbered. It does not touch the stack.
        unsafe {
            std::arch::asm!(
                "int 0x80",
                inlateout("rax") rax,
                out("r8") _, out("r9") _, out("r10") _, out("r11") _,
                options(nostack)
            );
        }
        rax
    }
}
