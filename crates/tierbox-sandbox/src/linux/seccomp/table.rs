//! The deny table: every system call denied, with its reason, and what a run may never
//! leave behind.

use super::*;

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
    pub(super) fn applies(self, spec: &SeccompSpec) -> bool {
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

pub(super) const fn deny(name: &'static str, nr: libc::c_long, reason: &'static str) -> Denial {
    Denial {
        name,
        nr: nr as u32,
        errno: libc::EPERM,
        when: When::Always,
        reason,
    }
}

pub(super) const fn enosys(name: &'static str, nr: libc::c_long, reason: &'static str) -> Denial {
    Denial {
        name,
        nr: nr as u32,
        errno: libc::ENOSYS,
        when: When::Always,
        reason,
    }
}

pub(super) const fn deny_meta(name: &'static str, nr: libc::c_long) -> Denial {
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
pub(super) const fn deny_xattr(name: &'static str, nr: libc::c_long) -> Denial {
    Denial {
        name,
        nr: nr as u32,
        errno: libc::EOPNOTSUPP,
        when: When::DenyFileMetadata,
        reason: "uid 0 owns every root-owned file and landlock does not mediate attribute changes; EOPNOTSUPP (the filter cannot read the name) makes tools fall back to chmod",
    }
}

pub(super) const fn deny_ipc(name: &'static str, nr: libc::c_long) -> Denial {
    Denial {
        name,
        nr: nr as u32,
        errno: libc::EPERM,
        when: When::DenyIpc,
        reason: "SysV IPC and POSIX message queues reach the supervisor user's objects; landlock does not mediate them",
    }
}

pub(super) const fn deny_ns(
    name: &'static str,
    nr: libc::c_long,
    errno: i32,
    reason: &'static str,
) -> Denial {
    Denial {
        name,
        nr: nr as u32,
        errno,
        when: When::DenyNamespaces,
        reason,
    }
}

/// Syscall numbers `libc` does not export for this target.
pub(super) mod extra_nr {
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
pub(super) fn leave_behind_rule(nr: u32) -> Option<(&'static str, LeaveBehind)> {
    LEAVE_BEHIND
        .iter()
        .find(|(_, n, _)| *n as u32 == nr)
        .map(|&(name, _, rule)| (name, rule))
}

/// What a [`LEAVE_BEHIND`] rule refuses, for denial reports.
pub(super) const LEAVE_BEHIND_RULE: &str = "a setuid or setgid mode, or a device node: nothing a run leaves in its workspace may be a privilege for the host's users";

/// No deny table for this CPU: [`SeccompProgram::build`] returns
/// [`SeccompError::UnsupportedArch`].
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub const DENY_TABLE: &[Denial] = &[];
