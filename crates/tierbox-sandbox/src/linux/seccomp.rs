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
pub const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
/// `AUDIT_ARCH_AARCH64`: `EM_AARCH64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE`.
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

/// When a [`DENY_TABLE`] entry applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// In every filter.
    Always,
    /// Only when [`SeccompSpec::deny_namespaces`] is set.
    DenyNamespaces,
    /// Only when [`SeccompSpec::deny_file_metadata`] is set.
    DenyFileMetadata,
    /// Only when [`SeccompSpec::deny_ipc`] is set.
    DenyIpc,
}

impl When {
    fn applies(self, spec: &SeccompSpec) -> bool {
        match self {
            When::Always => true,
            When::DenyNamespaces => spec.deny_namespaces,
            When::DenyFileMetadata => spec.deny_file_metadata,
            When::DenyIpc => spec.deny_ipc,
        }
    }
}

/// One plainly denied system call: denied whatever its arguments.
#[derive(Debug, Clone, Copy)]
pub struct Denial {
    /// Syscall name, for messages and tests.
    pub name: &'static str,
    /// Native syscall number.
    pub nr: u32,
    /// The errno returned (`EPERM` unless stated).
    pub errno: i32,
    /// Whether the denial depends on the spec.
    pub when: When,
    /// Why it is denied.
    pub reason: &'static str,
}

const fn deny(name: &'static str, nr: libc::c_long, reason: &'static str) -> Denial {
    Denial {
        name,
        nr: nr as u32,
        errno: libc::EPERM,
        when: When::Always,
        reason,
    }
}

const fn enosys(name: &'static str, nr: libc::c_long, reason: &'static str) -> Denial {
    Denial {
        name,
        nr: nr as u32,
        errno: libc::ENOSYS,
        when: When::Always,
        reason,
    }
}

const fn deny_meta(name: &'static str, nr: libc::c_long) -> Denial {
    Denial {
        name,
        nr: nr as u32,
        errno: libc::EPERM,
        when: When::DenyFileMetadata,
        reason: "uid 0 owns every root-owned file and landlock does not mediate metadata changes",
    }
}

/// The extended-attribute writes under `deny_file_metadata`: `EOPNOTSUPP`, as a
/// filesystem without extended attributes answers, not `EPERM`. The filter cannot read
/// the attribute's name (a string in memory), so every name gets the same answer; with
/// `EOPNOTSUPP` coreutils (`install -m`, `cp -p`, `cp -a`, `mkdir -m`), tar and rsync,
/// which set a mode through the `system.posix_acl_access` attribute, fall back to
/// `chmod` (mediated), and treat an attribute they cannot copy as unsupported.
const fn deny_xattr(name: &'static str, nr: libc::c_long) -> Denial {
    Denial {
        name,
        nr: nr as u32,
        errno: libc::EOPNOTSUPP,
        when: When::DenyFileMetadata,
        reason: "uid 0 owns every root-owned file and landlock does not mediate attribute changes; EOPNOTSUPP (the filter cannot read the name) makes tools fall back to chmod",
    }
}

const fn deny_ipc(name: &'static str, nr: libc::c_long) -> Denial {
    Denial {
        name,
        nr: nr as u32,
        errno: libc::EPERM,
        when: When::DenyIpc,
        reason: "SysV IPC and POSIX message queues reach the supervisor user's objects; landlock does not mediate them",
    }
}

const fn deny_ns(name: &'static str, nr: libc::c_long, errno: i32, reason: &'static str) -> Denial {
    Denial {
        name,
        nr: nr as u32,
        errno,
        when: When::DenyNamespaces,
        reason,
    }
}

/// Syscall numbers `libc` does not export for this target.
mod extra_nr {
    /// `open_tree_attr` (6.15), same number on every architecture since 5.1's unification.
    pub const OPEN_TREE_ATTR: libc::c_long = 467;
    /// `create_module` (x86-64 only; removed in 2.6, still reserved).
    #[cfg(target_arch = "x86_64")]
    pub const CREATE_MODULE: libc::c_long = 174;
    /// `get_kernel_syms` (x86-64 only; removed).
    #[cfg(target_arch = "x86_64")]
    pub const GET_KERNEL_SYMS: libc::c_long = 177;
    /// `fchmodat2` (6.6), one number on every architecture.
    pub const FCHMODAT2: libc::c_long = 452;
    /// `setxattrat` (6.13), one number on every architecture.
    pub const SETXATTRAT: libc::c_long = 463;
    /// `removexattrat` (6.13), one number on every architecture.
    pub const REMOVEXATTRAT: libc::c_long = 466;
    /// `file_setattr` (6.17), one number on every architecture.
    pub const FILE_SETATTR: libc::c_long = 469;
    /// `query_module` (x86-64 only; removed).
    #[cfg(target_arch = "x86_64")]
    pub const QUERY_MODULE: libc::c_long = 178;
    /// `cachestat` (6.5), one number on every architecture.
    pub const CACHESTAT: libc::c_long = 451;
    /// `statmount` (6.8), one number on every architecture.
    pub const STATMOUNT: libc::c_long = 457;
    /// `listmount` (6.8), one number on every architecture.
    pub const LISTMOUNT: libc::c_long = 458;
    /// `lsm_get_self_attr` (6.8), one number on every architecture.
    pub const LSM_GET_SELF_ATTR: libc::c_long = 459;
    /// `lsm_set_self_attr` (6.8), one number on every architecture.
    pub const LSM_SET_SELF_ATTR: libc::c_long = 460;
    /// `lsm_list_modules` (6.8), one number on every architecture.
    pub const LSM_LIST_MODULES: libc::c_long = 461;
}

/// The plain deny list, one line per syscall with its reason (STYLE rule 12).
///
/// Argument-inspected syscalls are not here: `socket` (families), `ioctl`
/// (`TIOCSTI`/`TIOCLINUX`), `personality` (only `PER_LINUX` and the query), `clone`
/// (`CLONE_NEW*` when namespaces are denied); see [`SeccompProgram::build`].
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[rustfmt::skip]
pub const DENY_TABLE: &[Denial] = &[
    // Other processes.
    deny("ptrace", libc::SYS_ptrace, "reads and writes other processes' memory and registers"),
    deny("process_vm_readv", libc::SYS_process_vm_readv, "reads another process's memory"),
    deny("process_vm_writev", libc::SYS_process_vm_writev, "writes another process's memory"),
    deny("kcmp", libc::SYS_kcmp, "compares kernel objects of other processes (ptrace-class; Docker denies it too)"),
    deny("pidfd_getfd", libc::SYS_pidfd_getfd, "copies a file descriptor out of another process"),
    deny("process_madvise", libc::SYS_process_madvise, "advises on (reclaims) another process's memory (ptrace-class)"),
    deny("migrate_pages", libc::SYS_migrate_pages, "moves another process's pages between NUMA nodes"),
    deny("move_pages", libc::SYS_move_pages, "moves (or inspects) another process's pages between NUMA nodes"),
    // The mount table and the root.
    deny("mount", libc::SYS_mount, "changes the mount table"),
    deny("umount2", libc::SYS_umount2, "removes mounts that hide host paths"),
    deny("pivot_root", libc::SYS_pivot_root, "changes the root mount"),
    deny("chroot", libc::SYS_chroot, "changes the root; with a held directory fd a classic escape"),
    deny("open_tree", libc::SYS_open_tree, "new mount API: clones mount trees"),
    deny("open_tree_attr", extra_nr::OPEN_TREE_ATTR, "new mount API: clones mount trees with attributes"),
    deny("move_mount", libc::SYS_move_mount, "new mount API: attaches mounts"),
    deny("fsopen", libc::SYS_fsopen, "new mount API: creates filesystem contexts"),
    deny("fsconfig", libc::SYS_fsconfig, "new mount API: configures filesystem contexts"),
    deny("fsmount", libc::SYS_fsmount, "new mount API: creates mounts"),
    deny("fspick", libc::SYS_fspick, "new mount API: reconfigures existing mounts"),
    deny("mount_setattr", libc::SYS_mount_setattr, "changes mount flags (e.g. drops read-only)"),
    deny("statmount", extra_nr::STATMOUNT, "the mount table by id (Tier B: the host's), beyond what /proc/self/mountinfo shows"),
    deny("listmount", extra_nr::LISTMOUNT, "enumerates mounts by id, of other mount namespaces too"),
    deny("open_by_handle_at", libc::SYS_open_by_handle_at, "opens any file by handle, bypassing path checks (the shocker escape)"),
    deny("name_to_handle_at", libc::SYS_name_to_handle_at, "produces the handles open_by_handle_at consumes"),
    // Kernel attack surface not needed by ordinary programs.
    deny("keyctl", libc::SYS_keyctl, "kernel keyrings are not namespaced: reads or plants host keys"),
    deny("add_key", libc::SYS_add_key, "kernel keyrings are not namespaced"),
    deny("request_key", libc::SYS_request_key, "kernel keyrings are not namespaced; can call a host upcall"),
    deny("bpf", libc::SYS_bpf, "loads programs into the kernel; large attack surface"),
    deny("perf_event_open", libc::SYS_perf_event_open, "kernel and hardware side channels; large attack surface"),
    deny("userfaultfd", libc::SYS_userfaultfd, "stalls kernel page faults: a common exploit primitive"),
    deny("io_uring_setup", libc::SYS_io_uring_setup, "io_uring operations bypass this filter; frequent CVEs"),
    deny("io_uring_enter", libc::SYS_io_uring_enter, "io_uring operations bypass this filter"),
    deny("io_uring_register", libc::SYS_io_uring_register, "io_uring operations bypass this filter"),
    // What a run leaves behind (see LEAVE_BEHIND for the calls inspected instead).
    enosys("openat2", libc::SYS_openat2, "its creation mode sits in a struct the filter cannot read (a setuid file); ENOSYS makes libc and runtimes fall back to openat"),
    deny("lookup_dcookie", libc::SYS_lookup_dcookie, "obsolete profiling interface (removed in 6.10)"),
    deny("quotactl", libc::SYS_quotactl, "filesystem quota administration"),
    deny("quotactl_fd", libc::SYS_quotactl_fd, "filesystem quota administration"),
    deny("nfsservctl", libc::SYS_nfsservctl, "removed NFS server control"),
    deny("vhangup", libc::SYS_vhangup, "hangs up the controlling terminal"),
    deny("fanotify_init", libc::SYS_fanotify_init, "file access notification groups: unprivileged since 5.13, they watch what landlock does not mediate"),
    // Memory placement and pinning.
    deny("mbind", libc::SYS_mbind, "NUMA memory policy of a range: a host-wide placement knob (the container default wants CAP_SYS_NICE)"),
    deny("set_mempolicy", libc::SYS_set_mempolicy, "NUMA memory policy of the process (the container default wants CAP_SYS_NICE)"),
    deny("get_mempolicy", libc::SYS_get_mempolicy, "NUMA memory policy and node of an address (the container default wants CAP_SYS_NICE)"),
    deny("set_mempolicy_home_node", libc::SYS_set_mempolicy_home_node, "NUMA home node of a range (the container default wants CAP_SYS_NICE)"),
    deny("mlockall", libc::SYS_mlockall, "pins every page of the process, present and future, out of reclaim (mlock of a range stays allowed, bounded by RLIMIT_MEMLOCK)"),
    deny("cachestat", extra_nr::CACHESTAT, "page-cache residency of any file it can open: a side channel on what the host reads"),
    // Security modules' own interface (/proc/self/attr stays readable).
    deny("lsm_get_self_attr", extra_nr::LSM_GET_SELF_ATTR, "security-module attributes of the caller; no developer tool uses them"),
    deny("lsm_set_self_attr", extra_nr::LSM_SET_SELF_ATTR, "changes the caller's security-module attributes"),
    deny("lsm_list_modules", extra_nr::LSM_LIST_MODULES, "lists the host's security modules"),
    deny("file_setattr", extra_nr::FILE_SETATTR, "sets inode attribute flags (nodump, append-only, …), as the FS_IOC_SETFLAGS ioctl it stands for, which every run is denied"),
    // Host-wide state.
    deny("kexec_load", libc::SYS_kexec_load, "replaces the running kernel"),
    deny("kexec_file_load", libc::SYS_kexec_file_load, "replaces the running kernel"),
    deny("init_module", libc::SYS_init_module, "loads kernel code"),
    deny("finit_module", libc::SYS_finit_module, "loads kernel code"),
    deny("delete_module", libc::SYS_delete_module, "unloads kernel code"),
    deny("reboot", libc::SYS_reboot, "reboots the host (or the pid namespace)"),
    deny("syslog", libc::SYS_syslog, "reads the kernel log, which leaks kernel addresses"),
    deny("acct", libc::SYS_acct, "process accounting to a file of the caller's choice"),
    deny("swapon", libc::SYS_swapon, "host swap configuration"),
    deny("swapoff", libc::SYS_swapoff, "host swap configuration"),
    deny("settimeofday", libc::SYS_settimeofday, "the clock is not namespaced"),
    deny("clock_settime", libc::SYS_clock_settime, "the clock is not namespaced"),
    deny("adjtimex", libc::SYS_adjtimex, "the clock is not namespaced"),
    deny("clock_adjtime", libc::SYS_clock_adjtime, "the clock is not namespaced"),
    deny("sethostname", libc::SYS_sethostname, "host identity (Tier C sets its hostname before the filter)"),
    deny("setdomainname", libc::SYS_setdomainname, "host identity"),
    // x86-64 legacy. The removed ones cost nothing: they fill gaps between neighbouring
    // denials (153..=156, 163..=180), which then merge into one interval.
    #[cfg(target_arch = "x86_64")]
    deny("uselib", libc::SYS_uselib, "obsolete a.out library loader"),
    #[cfg(target_arch = "x86_64")]
    deny("iopl", libc::SYS_iopl, "raw I/O port access"),
    #[cfg(target_arch = "x86_64")]
    deny("ioperm", libc::SYS_ioperm, "raw I/O port access"),
    #[cfg(target_arch = "x86_64")]
    deny("modify_ldt", libc::SYS_modify_ldt, "LDT manipulation: unused by ordinary programs, a history of kernel bugs"),
    #[cfg(target_arch = "x86_64")]
    deny("_sysctl", libc::SYS__sysctl, "removed binary sysctl interface"),
    #[cfg(target_arch = "x86_64")]
    deny("create_module", extra_nr::CREATE_MODULE, "removed module interface"),
    #[cfg(target_arch = "x86_64")]
    deny("get_kernel_syms", extra_nr::GET_KERNEL_SYMS, "removed module interface"),
    #[cfg(target_arch = "x86_64")]
    deny("query_module", extra_nr::QUERY_MODULE, "removed module interface"),
    #[cfg(target_arch = "x86_64")]
    deny("ustat", libc::SYS_ustat, "obsolete filesystem statistics by device number"),
    #[cfg(target_arch = "x86_64")]
    deny("sysfs", libc::SYS_sysfs, "obsolete filesystem type enumeration"),
    #[cfg(target_arch = "x86_64")]
    deny("getpmsg", libc::SYS_getpmsg, "not implemented by Linux (STREAMS)"),
    #[cfg(target_arch = "x86_64")]
    deny("putpmsg", libc::SYS_putpmsg, "not implemented by Linux (STREAMS)"),
    #[cfg(target_arch = "x86_64")]
    deny("afs_syscall", libc::SYS_afs_syscall, "not implemented by Linux"),
    #[cfg(target_arch = "x86_64")]
    deny("tuxcall", libc::SYS_tuxcall, "not implemented by Linux"),
    #[cfg(target_arch = "x86_64")]
    deny("security", libc::SYS_security, "not implemented by Linux"),
    #[cfg(target_arch = "x86_64")]
    deny("vserver", libc::SYS_vserver, "not implemented by Linux"),
    // File metadata (only with `deny_file_metadata`; the chmod family is in CHMOD_FAMILY).
    #[cfg(target_arch = "x86_64")]
    deny_meta("chown", libc::SYS_chown),
    #[cfg(target_arch = "x86_64")]
    deny_meta("lchown", libc::SYS_lchown),
    deny_meta("fchown", libc::SYS_fchown),
    deny_meta("fchownat", libc::SYS_fchownat),
    deny_xattr("setxattr", libc::SYS_setxattr),
    deny_xattr("lsetxattr", libc::SYS_lsetxattr),
    deny_xattr("fsetxattr", libc::SYS_fsetxattr),
    deny_xattr("removexattr", libc::SYS_removexattr),
    deny_xattr("lremovexattr", libc::SYS_lremovexattr),
    deny_xattr("fremovexattr", libc::SYS_fremovexattr),
    deny_xattr("setxattrat", extra_nr::SETXATTRAT),
    deny_xattr("removexattrat", extra_nr::REMOVEXATTRAT),
    // IPC (only with `deny_ipc`: a run without an IPC namespace of its own).
    deny_ipc("shmget", libc::SYS_shmget),
    deny_ipc("shmat", libc::SYS_shmat),
    deny_ipc("shmdt", libc::SYS_shmdt),
    deny_ipc("shmctl", libc::SYS_shmctl),
    deny_ipc("semget", libc::SYS_semget),
    deny_ipc("semop", libc::SYS_semop),
    deny_ipc("semtimedop", libc::SYS_semtimedop),
    deny_ipc("semctl", libc::SYS_semctl),
    deny_ipc("msgget", libc::SYS_msgget),
    deny_ipc("msgsnd", libc::SYS_msgsnd),
    deny_ipc("msgrcv", libc::SYS_msgrcv),
    deny_ipc("msgctl", libc::SYS_msgctl),
    deny_ipc("mq_open", libc::SYS_mq_open),
    deny_ipc("mq_unlink", libc::SYS_mq_unlink),
    deny_ipc("mq_timedsend", libc::SYS_mq_timedsend),
    deny_ipc("mq_timedreceive", libc::SYS_mq_timedreceive),
    deny_ipc("mq_notify", libc::SYS_mq_notify),
    deny_ipc("mq_getsetattr", libc::SYS_mq_getsetattr),
    // Namespaces (only with `deny_namespaces`).
    deny_ns("unshare", libc::SYS_unshare, libc::EPERM, "no nested namespaces: a user namespace exposes root-only kernel surface"),
    deny_ns("setns", libc::SYS_setns, libc::EPERM, "no joining other namespaces"),
    deny_ns("clone3", libc::SYS_clone3, libc::ENOSYS, "its flags sit in memory the filter cannot read; ENOSYS makes libc fall back to clone"),
];

/// The `chmod` family: handed to the supervisor with `mediate_chmod`
/// (`SECCOMP_RET_USER_NOTIF`), else denied with `deny_file_metadata`.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[rustfmt::skip]
pub const CHMOD_FAMILY: &[(&str, libc::c_long)] = &[
    #[cfg(target_arch = "x86_64")]
    ("chmod", libc::SYS_chmod),
    ("fchmod", libc::SYS_fchmod),
    ("fchmodat", libc::SYS_fchmodat),
    ("fchmodat2", extra_nr::FCHMODAT2),
];

/// The `chown` family, with the indices of its owner and group arguments: inspected
/// under [`SeccompSpec::chown_noop_gid`], else denied with `deny_file_metadata`
/// ([`DENY_TABLE`]).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[rustfmt::skip]
pub const CHOWN_FAMILY: &[(&str, libc::c_long, u32, u32)] = &[
    #[cfg(target_arch = "x86_64")]
    ("chown", libc::SYS_chown, 1, 2),
    #[cfg(target_arch = "x86_64")]
    ("lchown", libc::SYS_lchown, 1, 2),
    ("fchown", libc::SYS_fchown, 1, 2),
    ("fchownat", libc::SYS_fchownat, 2, 3),
];

/// No chown table for this CPU.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub const CHOWN_FAMILY: &[(&str, libc::c_long, u32, u32)] = &[];

/// No chmod table for this CPU.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub const CHMOD_FAMILY: &[(&str, libc::c_long)] = &[];

/// What a [`LEAVE_BEHIND`] rule reads of its call's arguments (each an index into
/// `seccomp_data.args`, low 32 bits: the kernel reads these arguments as `int`/`umode_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LeaveBehind {
    /// A mode: refused when it has a [`SETID_BITS`] bit.
    Mode(u32),
    /// `open`'s flags and mode: the mode is read, and refused as [`LeaveBehind::Mode`], only
    /// when the flags create a file ([`OPEN_CREATE_FLAGS`]).
    CreateMode {
        /// Index of the flags.
        flags: u32,
        /// Index of the mode.
        mode: u32,
    },
    /// `mknod`'s mode: refused with a [`SETID_BITS`] bit, or a character or block device
    /// type (the whiteout, 0:0, which needs no `CAP_MKNOD`, included).
    Node(u32),
    /// `renameat2`'s flags: refused with [`RENAME_WHITEOUT`].
    RenameFlags(u32),
}

/// The calls that could leave a setuid or setgid file or a device node in the
/// workspace, each refused (`EPERM`) in every filter when its arguments ask for one;
/// with the `chmod` family handed to the supervisor (`mediate_chmod`), the supervisor
/// refuses such a mode too. Copies that keep modes (`cp -p`, `tar x`, `install -m`,
/// `rsync -p`) make these calls.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[rustfmt::skip]
pub const LEAVE_BEHIND: &[(&str, libc::c_long, LeaveBehind)] = &[
    #[cfg(target_arch = "x86_64")]
    ("chmod", libc::SYS_chmod, LeaveBehind::Mode(1)),
    ("fchmod", libc::SYS_fchmod, LeaveBehind::Mode(1)),
    ("fchmodat", libc::SYS_fchmodat, LeaveBehind::Mode(2)),
    ("fchmodat2", extra_nr::FCHMODAT2, LeaveBehind::Mode(2)),
    #[cfg(target_arch = "x86_64")]
    ("open", libc::SYS_open, LeaveBehind::CreateMode { flags: 1, mode: 2 }),
    ("openat", libc::SYS_openat, LeaveBehind::CreateMode { flags: 2, mode: 3 }),
    #[cfg(target_arch = "x86_64")]
    ("creat", libc::SYS_creat, LeaveBehind::Mode(1)),
    #[cfg(target_arch = "x86_64")]
    ("mknod", libc::SYS_mknod, LeaveBehind::Node(1)),
    ("mknodat", libc::SYS_mknodat, LeaveBehind::Node(2)),
    ("renameat2", libc::SYS_renameat2, LeaveBehind::RenameFlags(4)),
];

/// No table for this CPU (no filter is built for it).
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub const LEAVE_BEHIND: &[(&str, libc::c_long, LeaveBehind)] = &[];

/// The [`LEAVE_BEHIND`] rule of system call `nr`.
fn leave_behind_rule(nr: u32) -> Option<(&'static str, LeaveBehind)> {
    LEAVE_BEHIND
        .iter()
        .find(|(_, n, _)| *n as u32 == nr)
        .map(|&(name, _, rule)| (name, rule))
}

/// What a [`LEAVE_BEHIND`] rule refuses, for denial reports.
const LEAVE_BEHIND_RULE: &str = "a setuid or setgid mode, or a device node: nothing a run leaves in its workspace may be a privilege for the host's users";

/// No deny table for this CPU: [`SeccompProgram::build`] returns
/// [`SeccompError::UnsupportedArch`].
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub const DENY_TABLE: &[Denial] = &[];

/// A system call the filter refused, named for a denial report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefusedCall {
    /// The system call's name.
    pub name: &'static str,
    /// The rule that refuses it: the deny table's reason, or what the argument rule
    /// inspects (an audit record does not carry the arguments; [`describe_refusal`] names
    /// them for a call handed to the supervisor).
    pub rule: &'static str,
}

/// The refusal the filter makes for native system call `nr`, or `None` when its answer
/// is not a refusal of the program's intent: `ENOSYS` for `clone3` and the x32 ABI makes
/// libc fall back to the call that is inspected, and the chmod family is handed to the
/// supervisor when mediated.
///
/// ```
/// use tierbox_sandbox::linux::seccomp::refused_call;
///
/// let ptrace = refused_call(libc::SYS_ptrace as u32).unwrap();
/// assert_eq!(ptrace.name, "ptrace");
/// assert!(refused_call(libc::SYS_clone3 as u32).is_none());
/// ```
pub fn refused_call(nr: u32) -> Option<RefusedCall> {
    if nr >= X32_SYSCALL_BIT {
        return None;
    }
    if let Some(d) = DENY_TABLE.iter().find(|d| d.nr == nr) {
        return (d.errno != libc::ENOSYS).then_some(RefusedCall {
            name: d.name,
            rule: d.reason,
        });
    }
    if let Some(&(name, _)) = CHMOD_FAMILY.iter().find(|(_, n)| *n as u32 == nr) {
        return Some(RefusedCall {
            name,
            rule: "a setuid or setgid mode, or a mode change outside the run's writable grants (uid 0 owns every root-owned file; landlock does not mediate metadata)",
        });
    }
    if let Some((name, _)) = leave_behind_rule(nr) {
        return Some(RefusedCall {
            name,
            rule: LEAVE_BEHIND_RULE,
        });
    }
    INSPECTED
        .iter()
        .find(|(n, ..)| *n as u32 == nr)
        .map(|&(_, name, rule)| RefusedCall { name, rule })
}

/// The rule that refuses system call `name` (see [`refused_call`]), by name.
///
/// ```
/// use tierbox_sandbox::linux::seccomp::refusal_rule;
///
/// assert!(refusal_rule("unshare").unwrap().contains("namespaces"));
/// assert!(refusal_rule("read").is_none());
/// ```
pub fn refusal_rule(name: &str) -> Option<&'static str> {
    DENY_TABLE
        .iter()
        .find(|d| d.name == name)
        .map(|d| d.reason)
        .or_else(|| {
            INSPECTED
                .iter()
                .find(|(_, n, _)| *n == name)
                .map(|&(.., rule)| rule)
        })
        .or_else(|| {
            LEAVE_BEHIND
                .iter()
                .any(|(n, ..)| *n == name)
                .then_some(LEAVE_BEHIND_RULE)
        })
}

/// The argument-inspected calls: number, name, and what the rule refuses.
const INSPECTED: &[(libc::c_long, &str, &str)] = &[
    (
        libc::SYS_socket,
        "socket",
        "a socket family or type the run's network mode does not allow (only AF_UNIX, and AF_INET/AF_INET6 TCP when egress is open)",
    ),
    (
        libc::SYS_socketpair,
        "socketpair",
        "a family other than AF_UNIX",
    ),
    (
        libc::SYS_ioctl,
        "ioctl",
        "a denied request: TIOCSTI, TIOCLINUX, FS_IOC_SETFLAGS or FS_IOC_FSSETXATTR",
    ),
    (
        libc::SYS_personality,
        "personality",
        "a persona other than PER_LINUX",
    ),
    (
        libc::SYS_clone,
        "clone",
        "CLONE_NEW* flags: no nested namespaces (a user namespace exposes root-only kernel surface)",
    ),
    (
        libc::SYS_sendto,
        "sendto",
        "MSG_FASTOPEN: a connection without connect, past the egress proxy",
    ),
    (
        libc::SYS_sendmsg,
        "sendmsg",
        "MSG_FASTOPEN: a connection without connect, past the egress proxy",
    ),
    (
        libc::SYS_sendmmsg,
        "sendmmsg",
        "MSG_FASTOPEN: a connection without connect, past the egress proxy",
    ),
    (
        libc::SYS_listen,
        "listen",
        "listening sockets: the run's network is outbound TCP through the egress proxy",
    ),
];

/// A handed-off refusal ([`SeccompSpec::notify_refusals`]) in words: the system call's
/// name and its refused argument (`AF_NETLINK, SOCK_RAW`; `TIOCSTI`;
/// `CLONE_NEWUSER|CLONE_NEWNS`; `MSG_FASTOPEN`; `persona 0x8`), or `None` for a call the
/// hand-off never carries.
///
/// ```
/// use tierbox_sandbox::linux::seccomp::describe_refusal;
///
/// let args = [0x1000_0000 | 0x2_0000, 0, 0, 0, 0, 0];
/// let (name, target) = describe_refusal(libc::SYS_unshare as u32, &args).unwrap();
/// assert_eq!((name, target.as_str()), ("unshare", "CLONE_NEWNS|CLONE_NEWUSER"));
/// ```
pub fn describe_refusal(nr: u32, args: &[u64; 6]) -> Option<(&'static str, String)> {
    let nr = libc::c_long::from(nr);
    let lo = |i: usize| args[i] as u32;
    Some(match nr {
        libc::SYS_socket => (
            "socket",
            format!(
                "{}, {}{}",
                socket_family(lo(0)),
                socket_type(lo(1)),
                match args[2] {
                    0 => String::new(),
                    p => format!(", protocol {}", protocol_name(p)),
                }
            ),
        ),
        libc::SYS_socketpair => ("socketpair", socket_family(lo(0))),
        libc::SYS_ioctl => (
            "ioctl",
            DENIED_IOCTLS
                .iter()
                .find(|(_, request, _)| *request == lo(1))
                .map_or_else(
                    || format!("request {:#x}", lo(1)),
                    |(name, ..)| (*name).to_owned(),
                ),
        ),
        libc::SYS_personality => ("personality", format!("persona {:#x}", lo(0))),
        libc::SYS_clone => ("clone", namespace_flags(lo(0) & CLONE_NEW_FLAGS)),
        libc::SYS_unshare => ("unshare", namespace_flags(lo(0))),
        _ => {
            if let Some(&(name, _, owner, group)) =
                CHOWN_FAMILY.iter().find(|&&(_, n, _, _)| n == nr)
            {
                let id = |i: u32| match lo(i as usize) {
                    u32::MAX => "unchanged".to_owned(),
                    v => v.to_string(),
                };
                return Some((name, format!("owner {}, group {}", id(owner), id(group))));
            }
            if let Some((name, rule)) = leave_behind_rule(nr as u32) {
                return Some((name, describe_left_behind(rule, args)));
            }
            let &(name, _, _) = SEND_FLAG_CALLS.iter().find(|(_, n, _)| *n == nr)?;
            (name, "MSG_FASTOPEN".to_owned())
        }
    })
}

/// The refused argument of a [`LEAVE_BEHIND`] call: `mode 04755 (setuid)`,
/// `character device 0:0`, `RENAME_WHITEOUT`.
fn describe_left_behind(rule: LeaveBehind, args: &[u64; 6]) -> String {
    let lo = |i: u32| args[i as usize] as u32;
    let mode = |m: u32| {
        let bits: Vec<&str> = [(libc::S_ISUID, "setuid"), (libc::S_ISGID, "setgid")]
            .iter()
            .filter(|&&(bit, _)| m & bit != 0)
            .map(|&(_, name)| name)
            .collect();
        format!("mode 0{:04o} ({})", m & 0o7777, bits.join(", "))
    };
    match rule {
        LeaveBehind::Mode(i) | LeaveBehind::CreateMode { mode: i, .. } => mode(lo(i)),
        LeaveBehind::Node(i) => match lo(i) & S_IFMT {
            t if t == libc::S_IFCHR || t == libc::S_IFBLK => {
                let dev = args[i as usize + 1];
                format!(
                    "{} device {}:{}",
                    if t == libc::S_IFCHR {
                        "character"
                    } else {
                        "block"
                    },
                    libc::major(dev),
                    libc::minor(dev)
                )
            }
            _ => mode(lo(i)),
        },
        LeaveBehind::RenameFlags(_) => "RENAME_WHITEOUT".to_owned(),
    }
}

/// An address family's name (`AF_NETLINK`), or `family N`.
fn socket_family(family: u32) -> String {
    const NAMES: &[(u32, &str)] = &[
        (1, "AF_UNIX"),
        (2, "AF_INET"),
        (3, "AF_AX25"),
        (4, "AF_IPX"),
        (5, "AF_APPLETALK"),
        (7, "AF_BRIDGE"),
        (9, "AF_X25"),
        (10, "AF_INET6"),
        (15, "AF_KEY"),
        (16, "AF_NETLINK"),
        (17, "AF_PACKET"),
        (21, "AF_RDS"),
        (24, "AF_PPPOX"),
        (26, "AF_LLC"),
        (29, "AF_CAN"),
        (30, "AF_TIPC"),
        (31, "AF_BLUETOOTH"),
        (33, "AF_RXRPC"),
        (38, "AF_ALG"),
        (40, "AF_VSOCK"),
        (41, "AF_KCM"),
        (42, "AF_QIPCRTR"),
        (43, "AF_SMC"),
        (44, "AF_XDP"),
        (45, "AF_MCTP"),
    ];
    NAMES.iter().find(|(n, _)| *n == family).map_or_else(
        || format!("family {family}"),
        |(_, name)| (*name).to_owned(),
    )
}

/// A socket type's name without `SOCK_NONBLOCK`/`SOCK_CLOEXEC` (`SOCK_RAW`), or `type N`.
fn socket_type(ty: u32) -> String {
    match ty & SOCK_TYPE_MASK {
        1 => "SOCK_STREAM".to_owned(),
        2 => "SOCK_DGRAM".to_owned(),
        3 => "SOCK_RAW".to_owned(),
        4 => "SOCK_RDM".to_owned(),
        5 => "SOCK_SEQPACKET".to_owned(),
        6 => "SOCK_DCCP".to_owned(),
        10 => "SOCK_PACKET".to_owned(),
        other => format!("type {other}"),
    }
}

/// An inet protocol number with its name where it is one the rules single out.
fn protocol_name(protocol: u64) -> String {
    match protocol {
        6 => "6 (TCP)".to_owned(),
        17 => "17 (UDP)".to_owned(),
        132 => "132 (SCTP)".to_owned(),
        262 => "262 (MPTCP)".to_owned(),
        p => p.to_string(),
    }
}

/// The `CLONE_NEW*` flags set in `flags`, `|`-joined (`none` when there are none).
fn namespace_flags(flags: u32) -> String {
    const NAMES: &[(i32, &str)] = &[
        (0x80, "CLONE_NEWTIME"),
        (libc::CLONE_NEWNS, "CLONE_NEWNS"),
        (libc::CLONE_NEWCGROUP, "CLONE_NEWCGROUP"),
        (libc::CLONE_NEWUTS, "CLONE_NEWUTS"),
        (libc::CLONE_NEWIPC, "CLONE_NEWIPC"),
        (libc::CLONE_NEWUSER, "CLONE_NEWUSER"),
        (libc::CLONE_NEWPID, "CLONE_NEWPID"),
        (libc::CLONE_NEWNET, "CLONE_NEWNET"),
    ];
    let set: Vec<&str> = NAMES
        .iter()
        .filter(|&&(bit, _)| flags & bit as u32 != 0)
        .map(|&(_, name)| name)
        .collect();
    if set.is_empty() {
        "no namespace flag".to_owned()
    } else {
        set.join("|")
    }
}

/// `ioctl` requests denied whatever the fd (matched on the low 32 bits of the request, as
/// the kernel does).
pub const DENIED_IOCTLS: &[(&str, u32, &str)] = &[
    (
        "TIOCSTI",
        libc::TIOCSTI as u32,
        "pushes input into a terminal: commands typed into the user's shell",
    ),
    (
        "TIOCLINUX",
        libc::TIOCLINUX as u32,
        "virtual console control, including TIOCSTI-like selection paste",
    ),
    (
        "FS_IOC_SETFLAGS",
        FS_IOC_SETFLAGS,
        "inode attribute flags (nodump, noatime, sync, …) of any file the run can open; landlock does not mediate them",
    ),
    (
        "FS_IOC32_SETFLAGS",
        FS_IOC32_SETFLAGS,
        "the 32-bit spelling of FS_IOC_SETFLAGS",
    ),
    (
        "FS_IOC_FSSETXATTR",
        FS_IOC_FSSETXATTR,
        "extended inode attributes and project id of any file the run can open",
    ),
];

/// The bits of `socket(2)`'s `type` argument that name the type (`SOCK_TYPE_MASK` in the
/// kernel); the rest are `SOCK_NONBLOCK` and `SOCK_CLOEXEC`.
const SOCK_TYPE_MASK: u32 = 0xf;

/// The calls that take `MSG_FASTOPEN`, with the index of their flags argument.
const SEND_FLAG_CALLS: &[(&str, libc::c_long, u32)] = &[
    ("sendto", libc::SYS_sendto, 3),
    ("sendmsg", libc::SYS_sendmsg, 2),
    ("sendmmsg", libc::SYS_sendmmsg, 3),
];

/// `_IOW('f', 2, long)`.
const FS_IOC_SETFLAGS: u32 = 0x4008_6602;
/// `_IOW('f', 2, int)`.
const FS_IOC32_SETFLAGS: u32 = 0x4004_6602;
/// `_IOW('X', 32, struct fsxattr)` (28 bytes).
const FS_IOC_FSSETXATTR: u32 = 0x401c_5820;

/// What the filter decides for one interval of syscall numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Action {
    Allow,
    Errno(i32),
    /// `socket`: inspect the address family in `args[0]`.
    InspectSocket,
    /// `socketpair`: only `AF_UNIX` in `args[0]`.
    InspectSocketpair,
    /// `ioctl`: inspect the request in `args[1]`.
    InspectIoctl,
    /// `personality`: inspect the persona in `args[0]`.
    InspectPersonality,
    /// `clone`: inspect the flags in `args[0]` for `CLONE_NEW*`.
    InspectClone,
    /// `sendto`/`sendmsg`/`sendmmsg`: inspect the flags in `args[N]` for `MSG_FASTOPEN`.
    InspectSendFlags(u32),
    /// A [`LEAVE_BEHIND`] call: refuse what its rule refuses, else `Pass`.
    InspectLeaveBehind(LeaveBehind, Pass),
    /// A [`CHOWN_FAMILY`] call under [`SeccompSpec::chown_noop_gid`]: its owner in
    /// `args[.0]` and group in `args[.1]` — root's own: success without running it; else
    /// `EPERM`.
    InspectChown(u32, u32),
    /// Hand the call to the supervisor (`SECCOMP_RET_USER_NOTIF`).
    Notify,
}

/// Where a [`LEAVE_BEHIND`] call its rule does not refuse goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Pass {
    Allow,
    /// A mediated `chmod`: to the supervisor.
    Notify,
}

/// A compiled seccomp filter: classic BPF instructions, ready for
/// `super::sys::seccomp_set_filter`.
#[derive(Debug, Clone)]
pub struct SeccompProgram {
    filter: Vec<libc::sock_filter>,
}

/// Which of a spec's filters to lay out (see the constructors of [`SeccompProgram`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// Everything in one filter ([`SeccompProgram::build`]).
    Whole,
    /// Without what the notifier hands off ([`SeccompProgram::build_base`]).
    Base,
    /// Only what is handed off ([`SeccompProgram::notifier`]).
    Notifier,
}

impl SeccompProgram {
    /// Compile the filter for `spec`: arch check, x32 rejection, one load of the syscall
    /// number, a binary search over syscall-number intervals to a shared return (or an
    /// argument-inspecting block for `socket`, `ioctl`, `personality` and `clone`).
    ///
    /// Pure; errors only on a table or builder bug (tested).
    pub fn build(spec: &SeccompSpec) -> Result<Self, SeccompError> {
        Self::assemble(spec, Variant::Whole)
    }

    /// The filter of `spec` without what is handed to the supervisor, to be stacked under
    /// [`SeccompProgram::notifier`]: with `spec.mediate_chmod` the chmod family, and with
    /// `spec.notify_refusals` the argument-inspected calls and `unshare`, are allowed here
    /// and the notifier, attached after this filter, decides them. The kernel runs every
    /// attached filter and keeps the most restrictive answer (kill, then an error, then
    /// the hand-off, then allow), so the pair decides every call exactly as
    /// [`SeccompProgram::build`]`(spec)` does (tested). Without either flag it is
    /// `build(spec)`.
    ///
    /// A Tier B launcher thread attaches this base filter to itself once, so each child
    /// inherits it at `clone` and attaches only the short notifier (see `launch`).
    pub fn build_base(spec: &SeccompSpec) -> Result<Self, SeccompError> {
        Self::assemble(spec, Variant::Base)
    }

    /// The hand-off alone: the chmod family (with `spec.mediate_chmod`) and the refusals
    /// of the argument-inspecting rules and `unshare` (with `spec.notify_refusals`) return
    /// `SECCOMP_RET_USER_NOTIF`, every other native call is allowed, any other
    /// architecture is killed (as in the whole filter). Only meaningful stacked on
    /// [`SeccompProgram::build_base`] of the same spec, and installed with
    /// `SECCOMP_FILTER_FLAG_NEW_LISTENER`.
    pub fn notifier(spec: &SeccompSpec) -> Result<Self, SeccompError> {
        Self::assemble(spec, Variant::Notifier)
    }

    /// Lays out `variant` of `spec`'s filter.
    ///
    /// Three steps: [`rules`] (one action per syscall number that is not plainly
    /// allowed), [`partition`] of all of `u32` into intervals of equal action, and the
    /// layout ([`Layout`]): the architecture check, a binary search over the intervals,
    /// one block per inspected call, the shared returns.
    fn assemble(spec: &SeccompSpec, variant: Variant) -> Result<Self, SeccompError> {
        let Some(arch) = NATIVE_AUDIT_ARCH else {
            return Err(SeccompError::UnsupportedArch {
                arch: std::env::consts::ARCH,
            });
        };
        let rules = rules(spec, variant)?;
        // On x86-64 the x32 ABI (and any number past every table, e.g. -1) is one more
        // interval, so rejecting it costs no extra instruction on the path of ordinary
        // calls.
        let mut items: Vec<(u32, u32, Action)> = rules
            .iter()
            .map(|(&nr, &(_, action))| (nr, nr, action))
            .collect();
        if cfg!(target_arch = "x86_64") {
            items.push((X32_SYSCALL_BIT, u32::MAX, Action::Errno(libc::ENOSYS)));
        }
        let intervals = partition(items.into_iter());

        let mut l = Layout::new(spec.notify_refusals && variant != Variant::Base);
        l.asm.load(OFF_ARCH);
        let next = l.asm.label();
        l.asm.jump(JEQ, arch, next, l.kill);
        l.asm.bind(next);
        l.asm.load(OFF_NR);
        let mut targets = Vec::with_capacity(intervals.len());
        for &(lo, hi, action) in &intervals {
            targets.push((lo, hi, l.target_of(action)));
        }
        let root = emit_tree(&mut l.asm, &targets);
        if targets.len() < 2 {
            // A single interval emits no tree (never, with a non-empty table): jump to it.
            l.asm.jump(JEQ, 0, root, root);
        }
        l.socket(spec);
        l.socketpair();
        l.send_flags();
        l.ioctl();
        l.personality();
        l.clone_flags();
        l.leave_behind();
        l.chown(spec.chown_noop_gid);
        l.returns();
        let filter = l.asm.finish()?;
        Ok(Self { filter })
    }

    /// Number of BPF instructions.
    pub fn len(&self) -> usize {
        self.filter.len()
    }

    /// Whether the program is empty (never, for a built program).
    pub fn is_empty(&self) -> bool {
        self.filter.is_empty()
    }

    /// The instructions.
    pub fn instructions(&self) -> &[libc::sock_filter] {
        &self.filter
    }

    /// The program as raw bytes (`struct sock_filter` array, native endianness), the
    /// format `bwrap --seccomp FD` reads.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.filter.len() * 8);
        for insn in &self.filter {
            out.extend_from_slice(&insn.code.to_ne_bytes());
            out.push(insn.jt);
            out.push(insn.jf);
            out.extend_from_slice(&insn.k.to_ne_bytes());
        }
        out
    }

    /// [`Self::build`], once per distinct `spec` in this process: the program depends on
    /// nothing but the spec and the CPU, and building it (the deny table, the interval
    /// search tree) costs more than attaching it. At most 2^6 specs exist, so the cache
    /// is bounded.
    ///
    /// ```
    /// use tierbox_sandbox::linux::seccomp::{SeccompProgram, SeccompSpec};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # if cfg!(not(any(target_arch = "x86_64", target_arch = "aarch64"))) { return Ok(()); }
    /// let a = SeccompProgram::cached(&SeccompSpec::locked_down())?;
    /// let b = SeccompProgram::cached(&SeccompSpec::locked_down())?;
    /// assert!(std::sync::Arc::ptr_eq(&a, &b));
    /// # Ok(())
    /// # }
    /// ```
    pub fn cached(spec: &SeccompSpec) -> Result<Arc<Self>, SeccompError> {
        Self::cached_variant(spec, Variant::Whole)
    }

    /// [`Self::build_base`], once per distinct `spec` in this process (as [`Self::cached`]).
    pub fn cached_base(spec: &SeccompSpec) -> Result<Arc<Self>, SeccompError> {
        Self::cached_variant(spec, Variant::Base)
    }

    /// [`Self::notifier`], once per distinct `spec` in this process (as [`Self::cached`]).
    pub fn cached_notifier(spec: &SeccompSpec) -> Result<Arc<Self>, SeccompError> {
        Self::cached_variant(spec, Variant::Notifier)
    }

    fn cached_variant(spec: &SeccompSpec, variant: Variant) -> Result<Arc<Self>, SeccompError> {
        type Key = (SeccompSpec, Variant);
        static CACHE: Mutex<Vec<(Key, Arc<SeccompProgram>)>> = Mutex::new(Vec::new());
        let key = (*spec, variant);
        let find = |cache: &[(Key, Arc<SeccompProgram>)]| {
            cache
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, p)| p.clone())
        };
        if let Some(p) = CACHE.lock().ok().and_then(|c| find(&c)) {
            return Ok(p);
        }
        let built = Arc::new(Self::assemble(spec, variant)?);
        if let Ok(mut cache) = CACHE.lock() {
            match find(&cache) {
                Some(p) => return Ok(p),
                None => cache.push((key, built.clone())),
            }
        }
        Ok(built)
    }

    /// What the program answers for native system call `nr` with `args`, as the kernel
    /// would (the program's own instruction subset, interpreted: loads of `seccomp_data`,
    /// `AND`, forward jumps, returns). The supervisor answers a handed-off call with its
    /// spec's [`SeccompSpec::enforcing`] program's verdict, so the hand-off refuses
    /// exactly what the kernel would have. `None` for an instruction outside that subset
    /// or a jump out of the program (a builder bug; the caller refuses).
    ///
    /// ```
    /// use tierbox_sandbox::linux::seccomp::{SeccompProgram, SeccompSpec};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # if cfg!(not(any(target_arch = "x86_64", target_arch = "aarch64"))) { return Ok(()); }
    /// let p = SeccompProgram::build(&SeccompSpec::locked_down())?;
    /// let args = [libc::AF_NETLINK as u64, libc::SOCK_RAW as u64, 0, 0, 0, 0];
    /// let ret = p.evaluate(libc::SYS_socket as u32, &args).unwrap();
    /// assert_eq!(ret, libc::SECCOMP_RET_ERRNO | libc::EAFNOSUPPORT as u32);
    /// # Ok(())
    /// # }
    /// ```
    pub fn evaluate(&self, nr: u32, args: &[u64; 6]) -> Option<u32> {
        let word = |offset: u32| -> Option<u32> {
            match offset {
                OFF_NR => Some(nr),
                OFF_ARCH => NATIVE_AUDIT_ARCH,
                o if (16..64).contains(&o) && o % 4 == 0 => {
                    let arg = args[((o - 16) / 8) as usize];
                    Some(if (o - 16) % 8 == 0 {
                        arg as u32
                    } else {
                        (arg >> 32) as u32
                    })
                }
                _ => None,
            }
        };
        let mut acc = 0u32;
        let mut pc = 0usize;
        loop {
            let insn = self.filter.get(pc)?;
            match insn.code {
                LD_W_ABS => acc = word(insn.k)?,
                ALU_AND_K => acc &= insn.k,
                RET_K => return Some(insn.k),
                JEQ | JGE | JSET => {
                    let taken = match insn.code {
                        JEQ => acc == insn.k,
                        JGE => acc >= insn.k,
                        _ => acc & insn.k != 0,
                    };
                    pc += usize::from(if taken { insn.jt } else { insn.jf });
                }
                _ => return None,
            }
            pc += 1;
        }
    }

    /// The `sock_fprog` for `super::sys::seccomp_set_filter`.
    ///
    /// Lifetime: the returned struct holds a raw pointer into `self`'s instruction buffer;
    /// it is valid only while `self` is alive and not mutated (nothing mutates a built
    /// program). Build it in the supervisor before `clone`, keep `self` alive until the
    /// child has exec'd, and pass it to the child by reference. The kernel copies the
    /// program during the call, so it need not outlive the attach itself.
    pub fn as_fprog(&self) -> libc::sock_fprog {
        libc::sock_fprog {
            // `finish` guarantees len ≤ BPF_MAXINSNS < u16::MAX.
            len: u16::try_from(self.filter.len()).unwrap_or(0),
            filter: self.filter.as_ptr().cast_mut(),
        }
    }
}

/// Step 1 of [`SeccompProgram::assemble`]: one action per syscall number that is not
/// plainly allowed (a number named twice is an error), for `variant` of `spec`'s filter.
fn rules(
    spec: &SeccompSpec,
    variant: Variant,
) -> Result<BTreeMap<u32, (&'static str, Action)>, SeccompError> {
    let mut rules: BTreeMap<u32, (&'static str, Action)> = BTreeMap::new();
    let mut add = |nr: u32, name: &'static str, action: Action| match rules.get(&nr) {
        Some(&(first, _)) => Err(SeccompError::DuplicateSyscall {
            nr,
            first,
            second: name,
        }),
        None => {
            rules.insert(nr, (name, action));
            Ok(())
        }
    };
    // Where the argument rules (and `unshare`, whose flags are its argument) live: in
    // the whole filter always; with `notify_refusals` in the notifier, not the base.
    let argument_rules = match variant {
        Variant::Whole => true,
        Variant::Base => !spec.notify_refusals,
        Variant::Notifier => spec.notify_refusals,
    };
    for d in DENY_TABLE {
        if !d.when.applies(spec) {
            continue;
        }
        let chown = CHOWN_FAMILY
            .iter()
            .find(|&&(_, nr, _, _)| nr as u32 == d.nr)
            .filter(|_| spec.chown_noop_gid.is_some());
        let action = if d.nr == libc::SYS_unshare as u32 && spec.notify_refusals {
            argument_rules.then_some(Action::Notify)
        } else if let Some(&(_, _, owner, group)) = chown {
            // An argument rule: with `notify_refusals` in the notifier, which hands both
            // outcomes to the supervisor; it answers with the enforcing filter's verdict
            // (0 or `EPERM`). So the kernel's audit log, which records an `ERRNO` action
            // without its errno, never lists a no-op as a refusal.
            argument_rules.then_some(Action::InspectChown(owner, group))
        } else {
            (variant != Variant::Notifier).then_some(Action::Errno(d.errno))
        };
        if let Some(action) = action {
            add(d.nr, d.name, action)?;
        }
    }
    // The chmod family: handed off (mediated), denied (`deny_file_metadata`), or allowed;
    // in each case a setuid or setgid mode is refused first (the `LEAVE_BEHIND` rule, an
    // argument rule: in the notifier when refusals are handed off — for a mediated call
    // the supervisor refuses it, as the notifier hands it every chmod).
    for &(name, nr) in CHMOD_FAMILY {
        let inspect = |pass| {
            leave_behind_rule(nr as u32).map(|(_, rule)| Action::InspectLeaveBehind(rule, pass))
        };
        let action = match (variant, spec.mediate_chmod, spec.deny_file_metadata) {
            (Variant::Whole, true, _) => inspect(Pass::Notify),
            (Variant::Notifier, true, _) => Some(Action::Notify),
            (Variant::Base, true, _) => argument_rules.then(|| inspect(Pass::Allow)).flatten(),
            // Denied in the base filter.
            (Variant::Notifier, false, true) => None,
            (_, false, true) => Some(Action::Errno(libc::EPERM)),
            (_, false, false) => argument_rules.then(|| inspect(Pass::Allow)).flatten(),
        };
        if let Some(action) = action {
            add(nr as u32, name, action)?;
        }
    }
    if argument_rules {
        for &(name, nr, rule) in LEAVE_BEHIND {
            if !CHMOD_FAMILY.iter().any(|&(_, n)| n == nr) {
                add(
                    nr as u32,
                    name,
                    Action::InspectLeaveBehind(rule, Pass::Allow),
                )?;
            }
        }
    }
    if argument_rules {
        add(libc::SYS_socket as u32, "socket", Action::InspectSocket)?;
        add(
            libc::SYS_socketpair as u32,
            "socketpair",
            Action::InspectSocketpair,
        )?;
        add(libc::SYS_ioctl as u32, "ioctl", Action::InspectIoctl)?;
        add(
            libc::SYS_personality as u32,
            "personality",
            Action::InspectPersonality,
        )?;
        if spec.deny_namespaces {
            add(libc::SYS_clone as u32, "clone", Action::InspectClone)?;
        }
        if spec.inet == InetSockets::TcpOnly {
            for &(name, nr, flags_arg) in SEND_FLAG_CALLS {
                add(nr as u32, name, Action::InspectSendFlags(flags_arg))?;
            }
        }
    }
    if spec.inet == InetSockets::TcpOnly && variant != Variant::Notifier {
        add(
            libc::SYS_listen as u32,
            "listen",
            Action::Errno(libc::EPERM),
        )?;
    }
    Ok(rules)
}

/// The program being laid out: the shared return labels, and one label per inspected
/// call's block.
struct Layout {
    asm: Asm,
    kill: Label,
    allow: Label,
    errno_labels: BTreeMap<i32, Label>,
    socket_block: Label,
    socketpair_block: Label,
    ioctl_block: Label,
    personality_block: Label,
    clone_block: Label,
    notify: Label,
    send_blocks: BTreeMap<u32, Label>,
    leave_behind_blocks: BTreeMap<(LeaveBehind, Pass), Label>,
    chown_blocks: BTreeMap<(u32, u32), Label>,
    /// Where an argument rule's `EPERM` refusal goes: the `EPERM` return, or `notify` when the
    /// refusals are handed to the supervisor.
    refuse_eperm: Label,
    /// The same for an `EAFNOSUPPORT` refusal.
    refuse_eafnosupport: Label,
}

impl Layout {
    /// `notify_refusals`: the argument rules' refusals return `SECCOMP_RET_USER_NOTIF`.
    fn new(notify_refusals: bool) -> Self {
        let mut asm = Asm::default();
        let kill = asm.label();
        let allow = asm.label();
        let eperm = asm.label();
        let enosys = asm.label();
        let eafnosupport = asm.label();
        let errno_labels = BTreeMap::from([
            (libc::EPERM, eperm),
            (libc::ENOSYS, enosys),
            (libc::EAFNOSUPPORT, eafnosupport),
        ]);
        let socket_block = asm.label();
        let socketpair_block = asm.label();
        let ioctl_block = asm.label();
        let personality_block = asm.label();
        let clone_block = asm.label();
        let notify = asm.label();
        let (refuse_eperm, refuse_eafnosupport) = if notify_refusals {
            (notify, notify)
        } else {
            (eperm, eafnosupport)
        };
        Self {
            asm,
            kill,
            allow,
            errno_labels,
            socket_block,
            socketpair_block,
            ioctl_block,
            personality_block,
            clone_block,
            notify,
            send_blocks: BTreeMap::new(),
            leave_behind_blocks: BTreeMap::new(),
            chown_blocks: BTreeMap::new(),
            refuse_eperm,
            refuse_eafnosupport,
        }
    }

    /// Where the search tree sends a call with `action`.
    fn target_of(&mut self, action: Action) -> Label {
        match action {
            Action::Allow => self.allow,
            Action::Errno(e) => {
                let asm = &mut self.asm;
                *self.errno_labels.entry(e).or_insert_with(|| asm.label())
            }
            Action::InspectSocket => self.socket_block,
            Action::InspectSocketpair => self.socketpair_block,
            Action::InspectIoctl => self.ioctl_block,
            Action::InspectPersonality => self.personality_block,
            Action::InspectClone => self.clone_block,
            Action::InspectSendFlags(arg) => {
                let asm = &mut self.asm;
                *self.send_blocks.entry(arg).or_insert_with(|| asm.label())
            }
            Action::InspectLeaveBehind(rule, pass) => {
                let asm = &mut self.asm;
                *self
                    .leave_behind_blocks
                    .entry((rule, pass))
                    .or_insert_with(|| asm.label())
            }
            Action::InspectChown(owner, group) => {
                let asm = &mut self.asm;
                *self
                    .chown_blocks
                    .entry((owner, group))
                    .or_insert_with(|| asm.label())
            }
            Action::Notify => self.notify,
        }
    }

    /// The [`CHOWN_FAMILY`] under [`SeccompSpec::chown_noop_gid`]: owner `-1` or `0` and
    /// group `-1`, `0` or `gid` return 0 without running the call; anything else `EPERM`;
    /// both handed to the supervisor when refusals are. Low 32 bits: the kernel reads
    /// `uid_t`/`gid_t`.
    fn chown(&mut self, gid: Option<u32>) {
        let Some(gid) = gid else {
            return;
        };
        let blocks: Vec<((u32, u32), Label)> =
            self.chown_blocks.iter().map(|(&k, &v)| (k, v)).collect();
        let handed_off = self.refuse_eperm == self.notify;
        for ((owner, group), label) in blocks {
            let (noop, eperm) = if handed_off {
                (self.notify, self.notify)
            } else {
                (
                    self.target_of(Action::Errno(0)),
                    self.target_of(Action::Errno(libc::EPERM)),
                )
            };
            let asm = &mut self.asm;
            asm.bind(label);
            let (owner_root, check_group, group_root, group_own) =
                (asm.label(), asm.label(), asm.label(), asm.label());
            asm.load(off_arg_lo(owner));
            asm.jump(JEQ, u32::MAX, check_group, owner_root);
            asm.bind(owner_root);
            asm.jump(JEQ, 0, check_group, eperm);
            asm.bind(check_group);
            asm.load(off_arg_lo(group));
            asm.jump(JEQ, u32::MAX, noop, group_root);
            asm.bind(group_root);
            asm.jump(JEQ, 0, noop, group_own);
            asm.bind(group_own);
            asm.jump(JEQ, gid, noop, eperm);
        }
    }

    /// The [`LEAVE_BEHIND`] rules: a setuid/setgid mode, a device node, a whiteout.
    fn leave_behind(&mut self) {
        for (&(rule, pass), &label) in &self.leave_behind_blocks {
            let refuse = self.refuse_eperm;
            let pass = match pass {
                Pass::Allow => self.allow,
                Pass::Notify => self.notify,
            };
            let asm = &mut self.asm;
            asm.bind(label);
            match rule {
                LeaveBehind::Mode(arg) => {
                    asm.load(off_arg_lo(arg));
                    asm.jump(JSET, SETID_BITS, refuse, pass);
                }
                LeaveBehind::CreateMode { flags, mode } => {
                    let creates = asm.label();
                    asm.load(off_arg_lo(flags));
                    asm.jump(JSET, OPEN_CREATE_FLAGS, creates, pass);
                    asm.bind(creates);
                    asm.load(off_arg_lo(mode));
                    asm.jump(JSET, SETID_BITS, refuse, pass);
                }
                LeaveBehind::Node(arg) => {
                    // One test: S_IFCHR's bit is set in S_IFCHR and S_IFBLK (and in
                    // S_IFLNK and invalid types, which mknod refuses anyway) and in no
                    // type mknod makes otherwise (regular, FIFO, socket).
                    asm.load(off_arg_lo(arg));
                    asm.jump(JSET, SETID_BITS | NODE_DEVICE_BIT, refuse, pass);
                }
                LeaveBehind::RenameFlags(arg) => {
                    asm.load(off_arg_lo(arg));
                    asm.jump(JSET, RENAME_WHITEOUT, refuse, pass);
                }
            }
        }
    }

    /// socket(domain, ...): unix and inet families per spec, anything else unsupported.
    fn socket(&mut self, spec: &SeccompSpec) {
        if !self.asm.is_used(self.socket_block) {
            return;
        }
        let (asm, allow, eperm) = (&mut self.asm, self.allow, self.refuse_eperm);
        asm.bind(self.socket_block);
        asm.load(off_arg_lo(0));
        let unix = if spec.allow_unix_sockets {
            allow
        } else {
            eperm
        };
        let inet_type = asm.label();
        let inet = match spec.inet {
            InetSockets::TcpOnly => inet_type,
            InetSockets::Any => allow,
            InetSockets::Deny => eperm,
        };
        let (n1, n2) = (asm.label(), asm.label());
        asm.jump(JEQ, libc::AF_UNIX as u32, unix, n1);
        asm.bind(n1);
        asm.jump(JEQ, libc::AF_INET as u32, inet, n2);
        asm.bind(n2);
        asm.jump(JEQ, libc::AF_INET6 as u32, inet, self.refuse_eafnosupport);
        if inet == inet_type {
            // socket(AF_INET*, type, protocol): the type without SOCK_NONBLOCK /
            // SOCK_CLOEXEC must be SOCK_STREAM, the protocol 0 or IPPROTO_TCP (all 64 bits:
            // the kernel reads an int, but a protocol with high bits set is refused too).
            asm.bind(inet_type);
            asm.load(off_arg_lo(1));
            asm.and(SOCK_TYPE_MASK);
            let (stream, protocol_lo, not_zero) = (asm.label(), asm.label(), asm.label());
            asm.jump(JEQ, libc::SOCK_STREAM as u32, stream, eperm);
            asm.bind(stream);
            asm.load(off_arg_hi(2));
            asm.jump(JEQ, 0, protocol_lo, eperm);
            asm.bind(protocol_lo);
            asm.load(off_arg_lo(2));
            asm.jump(JEQ, 0, allow, not_zero);
            asm.bind(not_zero);
            asm.jump(JEQ, libc::IPPROTO_TCP as u32, allow, eperm);
        }
    }

    /// socketpair(domain, ...): AF_UNIX only, as the kernel has no other family a
    /// sandboxed program needs (AF_TIPC and friends would load kernel modules).
    fn socketpair(&mut self) {
        if !self.asm.is_used(self.socketpair_block) {
            return;
        }
        self.asm.bind(self.socketpair_block);
        self.asm.load(off_arg_lo(0));
        self.asm.jump(
            JEQ,
            libc::AF_UNIX as u32,
            self.allow,
            self.refuse_eafnosupport,
        );
    }

    /// sendto / sendmsg / sendmmsg: no MSG_FASTOPEN (an implicit connect).
    fn send_flags(&mut self) {
        for (&arg, &label) in &self.send_blocks {
            self.asm.bind(label);
            self.asm.load(off_arg_lo(arg));
            self.asm.jump(
                JSET,
                libc::MSG_FASTOPEN as u32,
                self.refuse_eperm,
                self.allow,
            );
        }
    }

    /// ioctl(fd, request, ...): the terminal-injection requests.
    fn ioctl(&mut self) {
        if !self.asm.is_used(self.ioctl_block) {
            return;
        }
        let (asm, allow, eperm) = (&mut self.asm, self.allow, self.refuse_eperm);
        asm.bind(self.ioctl_block);
        asm.load(off_arg_lo(1));
        for (i, &(_, request, _)) in DENIED_IOCTLS.iter().enumerate() {
            let otherwise = if i + 1 == DENIED_IOCTLS.len() {
                allow
            } else {
                asm.label()
            };
            asm.jump(JEQ, request, eperm, otherwise);
            if otherwise != allow {
                asm.bind(otherwise);
            }
        }
    }

    /// personality(persona): only PER_LINUX and the query.
    fn personality(&mut self) {
        if !self.asm.is_used(self.personality_block) {
            return;
        }
        let asm = &mut self.asm;
        asm.bind(self.personality_block);
        asm.load(off_arg_lo(0));
        let n = asm.label();
        asm.jump(JEQ, PER_LINUX, self.allow, n);
        asm.bind(n);
        asm.jump(JEQ, PERSONALITY_QUERY, self.allow, self.refuse_eperm);
    }

    /// clone(flags, ...): no new namespaces (inspected only with `deny_namespaces`).
    fn clone_flags(&mut self) {
        if !self.asm.is_used(self.clone_block) {
            return;
        }
        self.asm.bind(self.clone_block);
        self.asm.load(off_arg_lo(0));
        self.asm
            .jump(JSET, CLONE_NEW_FLAGS, self.refuse_eperm, self.allow);
    }

    /// Shared returns; only the referenced ones are emitted.
    fn returns(&mut self) {
        self.asm.ret_if_used(self.allow, libc::SECCOMP_RET_ALLOW);
        for (&errno, &label) in &self.errno_labels {
            self.asm.ret_if_used(label, ret_errno(errno));
        }
        self.asm
            .ret_if_used(self.kill, libc::SECCOMP_RET_KILL_PROCESS);
        self.asm
            .ret_if_used(self.notify, libc::SECCOMP_RET_USER_NOTIF);
    }
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

/// Merge rules (sorted, non-overlapping `lo..=hi` ranges) into maximal intervals of equal
/// action covering all of `0..=u32::MAX`; gaps are allowed.
fn partition(rules: impl Iterator<Item = (u32, u32, Action)>) -> Vec<(u32, u32, Action)> {
    let mut out: Vec<(u32, u32, Action)> = Vec::new();
    let mut push = |lo: u32, hi: u32, action: Action| match out.last_mut() {
        Some(last) if last.2 == action && last.1.checked_add(1) == Some(lo) => last.1 = hi,
        _ => out.push((lo, hi, action)),
    };
    let mut next = 0u32;
    let mut done = false;
    for (lo, hi, action) in rules {
        if lo > next {
            push(next, lo - 1, Action::Allow);
        }
        push(lo, hi, action);
        match hi.checked_add(1) {
            Some(n) => next = n,
            None => done = true,
        }
    }
    if !done {
        push(next, u32::MAX, Action::Allow);
    }
    out
}

/// Emit a binary search over `intervals` (sorted, contiguous, covering the accumulator's
/// range) and return the label where it starts: either the first emitted instruction or,
/// for a single interval, that interval's target directly.
fn emit_tree(asm: &mut Asm, intervals: &[(u32, u32, Label)]) -> Label {
    match intervals {
        [] | [_] => intervals
            .first()
            .map_or_else(|| asm.label(), |&(_, _, t)| t),
        // [A][x][A] with a single-number middle: one JEQ instead of two JGEs.
        [(_, _, outer), (lo, hi, middle), (_, _, outer2)] if lo == hi && outer == outer2 => {
            let start = asm.label();
            asm.bind(start);
            asm.jump(JEQ, *lo, *middle, *outer);
            start
        }
        _ => {
            let mid = weighted_split(intervals);
            let start = asm.label();
            asm.bind(start);
            let node = asm.jump(JGE, intervals[mid].0, start, start);
            let left = emit_tree(asm, &intervals[..mid]);
            let right = emit_tree(asm, &intervals[mid..]);
            asm.patch(node, right, left);
            start
        }
    }
}

/// Syscall numbers weighted when balancing the search tree. The kernel's action cache is
/// built by evaluating the filter once per number in `0..NR_syscalls` (about 470 today)
/// at attach time, so the attach cost is the sum of path lengths over those numbers.
const NR_WEIGHT_SPAN: u32 = 512;

/// How many of the cache-evaluated numbers an interval covers (at least 1).
fn interval_weight(lo: u32, hi: u32) -> u64 {
    if lo >= NR_WEIGHT_SPAN {
        1
    } else {
        u64::from(hi.min(NR_WEIGHT_SPAN - 1) - lo + 1)
    }
}

/// The split index (1..len) that best balances the intervals' weights, so that wide
/// allowed ranges sit near the root and the summed path length stays small.
fn weighted_split(intervals: &[(u32, u32, Label)]) -> usize {
    let total: u64 = intervals
        .iter()
        .map(|&(lo, hi, _)| interval_weight(lo, hi))
        .sum();
    let mut best = (u64::MAX, intervals.len() / 2);
    let mut left = 0u64;
    for (i, &(lo, hi, _)) in intervals.iter().enumerate().take(intervals.len() - 1) {
        left += interval_weight(lo, hi);
        let imbalance = left.abs_diff(total - left);
        if imbalance < best.0 {
            best = (imbalance, i + 1);
        }
    }
    best.1
}

// ---------------------------------------------------------------------------------------
// A tiny classic-BPF assembler with forward labels.
// ---------------------------------------------------------------------------------------

/// `BPF_JMP | BPF_JEQ | BPF_K`.
const JEQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
/// `BPF_JMP | BPF_JGE | BPF_K`.
const JGE: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
/// `BPF_JMP | BPF_JSET | BPF_K`.
const JSET: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
/// `BPF_LD | BPF_W | BPF_ABS`.
const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
/// `BPF_ALU | BPF_AND | BPF_K`.
const ALU_AND_K: u16 = (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16;

/// `BPF_RET | BPF_K`.
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

/// A forward jump target, bound to an instruction index later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Label(usize);

/// An instruction whose jump targets are still labels.
#[derive(Debug, Clone, Copy)]
struct PendingInsn {
    code: u16,
    k: u32,
    jt: Option<Label>,
    jf: Option<Label>,
}

#[derive(Debug, Default)]
struct Asm {
    insns: Vec<PendingInsn>,
    /// Instruction index of each label, once bound.
    bound: Vec<Option<usize>>,
    /// Whether a jump references each label.
    used: Vec<bool>,
}

impl Asm {
    fn label(&mut self) -> Label {
        self.bound.push(None);
        self.used.push(false);
        Label(self.bound.len() - 1)
    }

    /// Bind `label` to the next instruction.
    fn bind(&mut self, label: Label) {
        if let Some(slot) = self.bound.get_mut(label.0) {
            *slot = Some(self.insns.len());
        }
    }

    fn load(&mut self, offset: u32) {
        self.insns.push(PendingInsn {
            code: LD_W_ABS,
            k: offset,
            jt: None,
            jf: None,
        });
    }

    /// `A &= k`.
    fn and(&mut self, k: u32) {
        self.insns.push(PendingInsn {
            code: ALU_AND_K,
            k,
            jt: None,
            jf: None,
        });
    }

    /// A conditional jump; returns its index for [`Asm::patch`].
    fn jump(&mut self, code: u16, k: u32, jt: Label, jf: Label) -> usize {
        self.mark(jt);
        self.mark(jf);
        self.insns.push(PendingInsn {
            code,
            k,
            jt: Some(jt),
            jf: Some(jf),
        });
        self.insns.len() - 1
    }

    fn patch(&mut self, index: usize, jt: Label, jf: Label) {
        self.mark(jt);
        self.mark(jf);
        if let Some(insn) = self.insns.get_mut(index) {
            insn.jt = Some(jt);
            insn.jf = Some(jf);
        }
    }

    fn mark(&mut self, label: Label) {
        if let Some(u) = self.used.get_mut(label.0) {
            *u = true;
        }
    }

    /// Whether a jump references `label`.
    fn is_used(&self, label: Label) -> bool {
        self.used.get(label.0).copied().unwrap_or(false)
    }

    /// Emit `RET k` bound to `label` if any jump targets it.
    fn ret_if_used(&mut self, label: Label, k: u32) {
        if self.is_used(label) {
            self.bind(label);
            self.insns.push(PendingInsn {
                code: RET_K,
                k,
                jt: None,
                jf: None,
            });
        }
    }

    /// Resolve labels into relative offsets.
    fn finish(self) -> Result<Vec<libc::sock_filter>, SeccompError> {
        if self.insns.len() > BPF_MAXINSNS {
            return Err(SeccompError::TooLong {
                len: self.insns.len(),
            });
        }
        let resolve = |from: usize, label: Option<Label>| -> Result<u8, SeccompError> {
            let Some(label) = label else { return Ok(0) };
            let to = self
                .bound
                .get(label.0)
                .copied()
                .flatten()
                .unwrap_or(usize::MAX);
            to.checked_sub(from + 1)
                .and_then(|off| u8::try_from(off).ok())
                .ok_or(SeccompError::JumpTooFar { from, to })
        };
        self.insns
            .iter()
            .enumerate()
            .map(|(i, insn)| {
                Ok(libc::sock_filter {
                    code: insn.code,
                    jt: resolve(i, insn.jt)?,
                    jf: resolve(i, insn.jf)?,
                    k: insn.k,
                })
            })
            .collect()
    }
}

#[cfg(test)]
#[path = "seccomp_tests.rs"]
mod tests;
