//! Seccomp: a short classic-BPF deny-list filter, built in the supervisor and attached in
//! the child as the last step before `execve`.
//!
//! Invariants kept here:
//!
//! - **Wrong architecture kills.** A system call made with any audit architecture other
//!   than the native one (e.g. `int 0x80` i386 calls from an x86-64 process) kills the
//!   process; on x86-64 the x32 ABI (and any number ≥ 2³⁰) returns `ENOSYS`.
//! - **Everything in [`DENY_TABLE`] is denied**, each with a stated reason; the
//!   argument-inspecting rules (socket families, `ioctl` terminal injection,
//!   `personality`, namespace flags of `clone`) follow in [`SeccompProgram::build`].
//! - **Nothing a run leaves behind is a privilege** ([`LEAVE_BEHIND`]), in every filter
//!   whatever the spec: no mode with setuid or setgid ([`SETID_BITS`]) through the
//!   `chmod` family, the creation modes of `open`/`openat`/`creat`/`mknod`/`mknodat`, and
//!   no device node (`mknod` of a character or block device, the 0:0 whiteout an
//!   unprivileged process may create included, and `renameat2(RENAME_WHITEOUT)`).
//!   `openat2`, whose mode sits in a struct the filter cannot read, is `ENOSYS` (libc
//!   and runtimes fall back to `openat`), and `io_uring`, whose operations bypass the
//!   filter, is denied.
//! - **Short and cacheable.** The filter loads the syscall number once, finds its rule by
//!   a binary search over number intervals, and only the inspected syscalls ever read an
//!   argument. So every other syscall is a constant in the kernel's seccomp action cache
//!   (5.11+): allowed syscalls do not run the filter at all.
//!
//! Why short matters: attaching costs a fixed ~15–20 µs here, plus about 0.3–0.5 µs per
//! instruction (copy, conversion to eBPF, multi-pass JIT), plus the action-cache build,
//! which *evaluates the filter once per syscall number* (~470 on x86-64), so every step
//! on a typical path costs ~470 × 3–4 ns ≈ 1.5 µs. A linear deny list of N checks pays
//! that N times; the weight-balanced tree here pays ~5 steps. Measured on this host
//! (`measure_attach_time_vs_length`): ~45 µs p50 for this filter, ~100 µs more for each
//! 64 instructions of linear checks.
//! - **Pure build, raw apply.** [`SeccompProgram::build`] allocates and cannot fail at
//!   run time except for a builder bug; the child only calls
//!   `super::sys::set_no_new_privs` and `super::sys::seccomp_set_filter`.
//!
//! Why not the field's crate (`seccompiler`, as Codex's and birdcage's sandboxes use): it
//! emits a linear list of checks (157 µs to attach a filter of this coverage, against
//! ~45 µs for the interval tree here), it cannot prebuild one program and share it
//! across runs, and the argument rules here (socket family *and* protocol, `clone` flags,
//! `personality`) are expressed as one tree with the deny table.
//!
//! What the filter does not do: it is a deny list, not an allow list, so new kernel
//! system calls are allowed until added here; it cannot read memory, so `clone3`'s flags
//! are unreachable (hence `ENOSYS` for `clone3` when namespaces are denied) and path
//! arguments are never inspected (that is landlock's and the mount namespace's job).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::sys;

mod asm;
mod program;
mod refusal;
mod table;

use asm::*;
use program::Action;
pub use program::*;
pub use refusal::*;
pub use table::*;

/// What the filter must allow or deny beyond the fixed [`DENY_TABLE`].
///
/// The locked-down setting is `deny_namespaces: true`, `inet: InetSockets::Deny`,
/// `allow_unix_sockets: false`; `inet` and each `allow_*` widen access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeccompSpec {
    /// Deny `unshare`, `setns`, `clone` with any `CLONE_NEW*` flag (`EPERM`) and `clone3`
    /// (`ENOSYS`, so libc falls back to `clone`): no nested namespaces.
    pub deny_namespaces: bool,
    /// What `socket(AF_INET | AF_INET6, ...)` may create.
    pub inet: InetSockets,
    /// Allow `socket(AF_UNIX, ...)`; otherwise `EPERM`. `socketpair(AF_UNIX, ...)` is
    /// always allowed, `socketpair` of any other family never (`EAFNOSUPPORT`).
    pub allow_unix_sockets: bool,
    /// Deny changing file modes, owners and extended attributes (`EPERM`). For a child that
    /// keeps uid 0 without capabilities: it still *owns* every root-owned file, landlock
    /// does not mediate `chmod`/`chown`/`setxattr`, and without this a run could e.g.
    /// `chmod u+s` a root binary or `chmod 644 /etc/shadow` outside its workspace.
    pub deny_file_metadata: bool,
    /// Hand the `chmod` family to the supervisor (`SECCOMP_RET_USER_NOTIF`), which performs
    /// the change itself, beneath the run's writable grants only (see `launch::mediate`);
    /// takes precedence over `deny_file_metadata` for that family. The filter must then be
    /// installed with `SECCOMP_FILTER_FLAG_NEW_LISTENER`.
    pub mediate_chmod: bool,
    /// Deny SysV IPC (`shm*`, `sem*`, `msg*`) and POSIX message queues (`mq_*`) with
    /// `EPERM`. For a Tier B run without an IPC namespace of its own (an unprivileged
    /// supervisor), where they would reach the objects of the supervisor's user: landlock
    /// does not mediate IPC.
    pub deny_ipc: bool,
    /// Hand the argument-inspected refusals (a socket family or type, an `ioctl` request,
    /// a `personality`, `clone` and `unshare` namespace flags, `MSG_FASTOPEN`) to the
    /// supervisor (`SECCOMP_RET_USER_NOTIF`) instead of refusing them in the filter: the
    /// audit record of a refusal carries no arguments, the notification does. The
    /// supervisor answers each with the errno [`SeccompSpec::enforcing`]'s filter returns
    /// for it (never lets it run) and records the call with its arguments. The filter must
    /// then be installed with `SECCOMP_FILTER_FLAG_NEW_LISTENER`; without a listener the
    /// kernel fails the call with `ENOSYS`, so a lost supervisor still refuses.
    pub notify_refusals: bool,
    /// With [`SeccompSpec::deny_file_metadata`]: the `chown` family naming no owner but
    /// root's (uid `0` or `-1`, "unchanged") and no group but `-1`, `0` or this gid (the
    /// run's own) returns success *without changing anything* (`SECCOMP_RET_ERRNO` with
    /// errno 0: the kernel never runs the call). A run that keeps uid 0 stands for root,
    /// whose files' owner this is, so `tar -x` and `cp -a` restoring `root:root` — which a
    /// real chown by a process without `CAP_CHOWN` would refuse — go on; the file keeps
    /// the owner and group it has. Any other owner or group is still `EPERM`. `None`:
    /// the whole family is `EPERM`.
    pub chown_noop_gid: Option<u32>,
}

/// Inet sockets under a [`SeccompSpec`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InetSockets {
    /// `socket(AF_INET | AF_INET6, ...)` gets `EPERM`.
    Deny,
    /// Only TCP, and no listening. Inet sockets of any type but `SOCK_STREAM` (UDP, raw,
    /// …) or any protocol but TCP (`0` or `IPPROTO_TCP`: not MPTCP, not SCTP) get `EPERM`:
    /// landlock's TCP rules cover `IPPROTO_TCP` sockets only. `listen` gets `EPERM`:
    /// `listen` without `bind` binds an ephemeral port on every address that landlock's
    /// bind rule never sees, and unix sockets (the other thing one listens on) are refused
    /// in this mode anyway. So do `sendto`, `sendmsg` and `sendmmsg` with `MSG_FASTOPEN`,
    /// which connects without `connect(2)` and so without landlock's TCP connect check.
    /// For Tier B runs whose only way out is the egress proxy's TCP port.
    TcpOnly,
    /// Any inet socket.
    Any,
}

impl SeccompSpec {
    /// The locked-down filter: no new namespaces, no inet or unix `socket()` (socketpair
    /// still works), other families `EAFNOSUPPORT`, plus everything in [`DENY_TABLE`].
    pub const fn locked_down() -> Self {
        Self {
            deny_namespaces: true,
            deny_file_metadata: false,
            mediate_chmod: false,
            deny_ipc: false,
            inet: InetSockets::Deny,
            allow_unix_sockets: false,
            notify_refusals: false,
            chown_noop_gid: None,
        }
    }

    /// The spec whose filter refuses in the kernel what this one hands to the supervisor
    /// ([`SeccompSpec::notify_refusals`] off): the supervisor's answer to a handed-off
    /// call is that filter's verdict ([`SeccompProgram::evaluate`]).
    pub const fn enforcing(&self) -> Self {
        Self {
            notify_refusals: false,
            ..*self
        }
    }

    /// Whether a filter of this spec hands calls to the supervisor, so must be installed
    /// with a listener the supervisor serves.
    pub const fn needs_listener(&self) -> bool {
        self.mediate_chmod || self.notify_refusals
    }
}

/// Why a filter could not be built: a builder or table bug, never a run-time condition.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum SeccompError {
    /// There is no deny table for this CPU architecture.
    #[error("seccomp filter: unsupported architecture {arch}")]
    UnsupportedArch {
        /// `std::env::consts::ARCH`.
        arch: &'static str,
    },
    /// Two rules name the same system call number.
    #[error("seccomp filter: syscall number {nr} has two rules ({first} and {second})")]
    DuplicateSyscall {
        /// The system call number.
        nr: u32,
        /// The first rule's name.
        first: &'static str,
        /// The second rule's name.
        second: &'static str,
    },
    /// A conditional jump would exceed classic BPF's 8-bit offset.
    #[error("seccomp filter: jump from instruction {from} to {to} exceeds 255 instructions")]
    JumpTooFar {
        /// Index of the jump.
        from: usize,
        /// Index of its target.
        to: usize,
    },
    /// The program exceeds the kernel's `BPF_MAXINSNS`.
    #[error("seccomp filter: {len} instructions exceed BPF_MAXINSNS ({BPF_MAXINSNS})")]
    TooLong {
        /// Program length.
        len: usize,
    },
}

/// The kernel's limit on a classic-BPF program length (`BPF_MAXINSNS`), in instructions.
pub const BPF_MAXINSNS: usize = 4096;

/// `AUDIT_ARCH_X86_64`: `EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE`.
#[cfg(any(test, target_arch = "x86_64"))]
pub const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
/// `AUDIT_ARCH_AARCH64`: `EM_AARCH64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE`.
#[cfg(any(test, target_arch = "aarch64"))]
pub const AUDIT_ARCH_AARCH64: u32 = 183 | 0x8000_0000 | 0x4000_0000;

/// The audit architecture the filter accepts.
#[cfg(target_arch = "x86_64")]
pub const NATIVE_AUDIT_ARCH: Option<u32> = Some(AUDIT_ARCH_X86_64);
/// The audit architecture the filter accepts.
#[cfg(target_arch = "aarch64")]
pub const NATIVE_AUDIT_ARCH: Option<u32> = Some(AUDIT_ARCH_AARCH64);
/// The audit architecture the filter accepts (none: no deny table for this CPU).
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub const NATIVE_AUDIT_ARCH: Option<u32> = None;

/// `__X32_SYSCALL_BIT`: x32-ABI system calls on x86-64 have this bit set in `nr`.
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Every `CLONE_NEW*` flag `clone(2)` accepts in its first argument (`CLONE_NEWTIME` is
/// only valid for `unshare`/`clone3`; in `clone`'s flags that bit is the exit signal).
pub const CLONE_NEW_FLAGS: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u32;

/// Mode bits no run may set on a file: setuid and setgid. A file a run leaves in its
/// workspace with either bit lets every local user who can execute it take the file
/// owner's identity (root's, in a root-owned workspace); the filter refuses them
/// whoever owns the workspace and whatever the policy ([`LEAVE_BEHIND`]).
pub const SETID_BITS: u32 = libc::S_ISUID | libc::S_ISGID;

/// The `open` flags that make it create a file with its mode argument: `O_CREAT`, and
/// `O_TMPFILE`'s own bit (`__O_TMPFILE`, without the `O_DIRECTORY` it includes). Without
/// either the mode is ignored, so its register may hold anything.
pub const OPEN_CREATE_FLAGS: u32 = (libc::O_CREAT | (libc::O_TMPFILE & !libc::O_DIRECTORY)) as u32;

/// `S_IFMT`: the file-type bits of a mode.
const S_IFMT: u32 = libc::S_IFMT;

/// The file-type bit of `S_IFCHR` (`0o020000`), which `S_IFBLK` (`0o060000`) shares and
/// no other type `mknod` creates has (`S_IFREG`, `S_IFIFO`, `S_IFSOCK`; `S_IFLNK` has it
/// but `mknod` refuses it).
const NODE_DEVICE_BIT: u32 = libc::S_IFCHR;

/// `RENAME_WHITEOUT`: `renameat2` leaves a whiteout (a 0:0 character device) at the
/// source. Unprivileged since Linux 5.8, as is `mknod` of a whiteout.
pub const RENAME_WHITEOUT: u32 = 4;

/// `personality(0xffffffff)`: query the current persona without changing it.
pub const PERSONALITY_QUERY: u32 = 0xffff_ffff;
/// `PER_LINUX`: the default persona, the only one the sandbox may set.
pub const PER_LINUX: u32 = 0;

// Offsets into `struct seccomp_data { int nr; u32 arch; u64 ip; u64 args[6]; }`.
/// Offset of `nr`.
const OFF_NR: u32 = 0;
/// Offset of `arch`.
const OFF_ARCH: u32 = 4;
/// Offset of the low 32 bits of `args[i]` (little-endian targets only).
const fn off_arg_lo(i: u32) -> u32 {
    16 + 8 * i
}

/// Offset of the high 32 bits of `args[i]` (little-endian targets only).
const fn off_arg_hi(i: u32) -> u32 {
    off_arg_lo(i) + 4
}

/// `SECCOMP_RET_ERRNO | errno`.
const fn ret_errno(errno: i32) -> u32 {
    libc::SECCOMP_RET_ERRNO | (errno as u32 & libc::SECCOMP_RET_DATA)
}

/// Whether this kernel can enforce seccomp filters: `prctl(PR_GET_SECCOMP)` works (kernel
/// built with seccomp) and the actions the filter uses (`KILL_PROCESS`, `ERRNO`) exist.
pub fn probe_seccomp() -> bool {
    sys::prctl_get_seccomp().is_ok()
        && sys::seccomp_action_available(libc::SECCOMP_RET_KILL_PROCESS).is_ok()
        && sys::seccomp_action_available(libc::SECCOMP_RET_ERRNO).is_ok()
}

/// Whether the kernel supports handing calls to a supervisor (`SECCOMP_RET_USER_NOTIF`,
/// Linux ≥ 5.0), which chmod mediation needs.
pub fn probe_user_notif() -> bool {
    sys::seccomp_action_available(libc::SECCOMP_RET_USER_NOTIF).is_ok()
}

#[cfg(test)]
mod tests;
