//! User namespaces: can this process create the namespaces Tier C needs, why not, and
//! the uid/gid maps of a sandbox child.
//!
//! Invariants kept here:
//!
//! - **The probe never changes the calling process.** [`probe_userns`] forks a
//!   short-lived child (`sys::probe_namespaces_in_child`) that unshares every namespace
//!   Tier C uses ([`TIER_C_NAMESPACES`]), makes its mounts private and mounts a tiny tmpfs
//!   in its own mount namespace, then exits. (`unshare(CLONE_NEWUSER)` also fails with
//!   `EINVAL` in a multi-threaded process such as the supervisor, another reason for the
//!   child.)
//! - **A failure is explained, never just reported.** [`explain_for`] names the sysctl (key
//!   and file) and its value that disables user namespaces, or says that the sysctls allow
//!   them and a seccomp filter or container policy must be refusing; the reason goes into
//!   `tier.unavailable` rejections and `tierbox doctor` verbatim.
//! - **Maps are written in the order the kernel requires**: `uid_map`, then `setgroups` =
//!   `deny`, then `gid_map`, each in a single `write(2)`; one one-id line each, so the
//!   sandbox has exactly one uid and one gid. The backends write them where they make the
//!   namespace (`linux::ns`, `linux::sys`); the same sequence here (`write_id_maps`, built for tests only) is what the
//!   tests hold the kernel's rules with.
//!
//! Reading the sysctls is read-only; nothing here writes a sysctl (the test that turns
//! `user.max_user_namespaces` off is gated behind `TIERBOX_TEST_SYSCTL=1`).

use std::fs;
#[cfg(test)]
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::sys::{self, NsProbeFailure};

/// The namespaces a Tier C sandbox is created with: user, mount, pid, network, IPC, UTS
/// and cgroup.
pub const TIER_C_NAMESPACES: libc::c_int = libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWCGROUP;

/// Debian/Ubuntu's switch for user namespaces created without `CAP_SYS_ADMIN` (`0`:
/// only privileged processes may create them). Absent on mainline kernels.
pub const SYSCTL_UNPRIVILEGED_USERNS_CLONE: &str = "/proc/sys/kernel/unprivileged_userns_clone";

/// Ubuntu 23.10+'s AppArmor restriction (`1`: unprivileged processes get a user namespace
/// without capabilities unless an AppArmor profile allows it, so mounting in it fails).
pub const SYSCTL_APPARMOR_RESTRICT_USERNS: &str =
    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns";

/// The per-user-namespace limits on namespaces of each type Tier C creates (`0` disables
/// that type for everyone, root included; `unshare` then fails with `ENOSPC`).
pub const NAMESPACE_LIMIT_SYSCTLS: &[&str] = &[
    "/proc/sys/user/max_user_namespaces",
    "/proc/sys/user/max_mnt_namespaces",
    "/proc/sys/user/max_pid_namespaces",
    "/proc/sys/user/max_net_namespaces",
    "/proc/sys/user/max_ipc_namespaces",
    "/proc/sys/user/max_uts_namespaces",
    "/proc/sys/user/max_cgroup_namespaces",
];

/// Capability number of `CAP_SYS_ADMIN` (uapi `linux/capability.h`; `libc` does not
/// export it).
pub(crate) const CAP_SYS_ADMIN: u32 = 21;

/// Deepest nesting of user namespaces the kernel allows (beyond it `unshare` fails with
/// `EUSERS`).
pub const MAX_USERNS_DEPTH: u32 = 32;

/// Whether this process can create the Tier C namespaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UsernsSupport {
    /// The probe child created every namespace and mounted a tmpfs in its mount namespace.
    Available,
    /// It could not.
    Unavailable {
        /// The step that failed and its `errno`.
        failure: NsProbeFailure,
        /// Why, naming the sysctl and value responsible when there is one, e.g.
        /// "unprivileged user namespaces are disabled: kernel.unprivileged_userns_clone=0
        /// (/proc/sys/kernel/unprivileged_userns_clone)".
        reason: String,
    },
    /// The probe itself could not run (`pipe2`, `clone` or `waitpid` failed).
    ProbeFailed {
        /// What went wrong.
        reason: String,
    },
}

impl UsernsSupport {
    /// Whether Tier C's namespaces can be created.
    pub fn is_available(&self) -> bool {
        matches!(self, Self::Available)
    }

    /// The reason they cannot, if they cannot.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Self::Available => None,
            Self::Unavailable { reason, .. } | Self::ProbeFailed { reason } => Some(reason),
        }
    }
}

/// The namespaces a Tier B run makes for its private `/tmp` and `/dev/shm` and its
/// protected paths under an unprivileged supervisor: user and mount.
pub const TIER_B_NAMESPACES: libc::c_int = libc::CLONE_NEWUSER | libc::CLONE_NEWNS;

/// Probes now (forks one child; about a millisecond). See the module docs.
pub fn probe_userns() -> UsernsSupport {
    probe_namespaces(TIER_C_NAMESPACES)
}

/// Whether this process can give a Tier B run a user and mount namespace of its own
/// ([`TIER_B_NAMESPACES`]; what an unprivileged supervisor needs for it), probed once
/// per process.
pub fn probe_tier_b_userns_cached() -> &'static UsernsSupport {
    static CACHE: OnceLock<UsernsSupport> = OnceLock::new();
    CACHE.get_or_init(|| probe_namespaces(TIER_B_NAMESPACES))
}

fn probe_namespaces(flags: libc::c_int) -> UsernsSupport {
    match sys::probe_namespaces_in_child(flags) {
        Ok(Ok(())) => UsernsSupport::Available,
        Ok(Err(failure)) => UsernsSupport::Unavailable {
            failure,
            reason: explain_for(flags, failure, &SysctlFacts::read()),
        },
        Err(e) => UsernsSupport::ProbeFailed {
            reason: format!("could not run the user-namespace probe: {e}"),
        },
    }
}

/// `probe_userns`, once per process (sysctls rarely change while a supervisor runs;
/// `tierbox doctor` calls `probe_userns` for a fresh answer).
pub fn probe_userns_cached() -> &'static UsernsSupport {
    static CACHE: OnceLock<UsernsSupport> = OnceLock::new();
    CACHE.get_or_init(|| match PROBE_STATE_DIR.get() {
        Some(dir) => probe_through_state_dir(dir),
        None => probe_userns(),
    })
}

/// Where, under the state directory, a positive probe is kept for the next process.
pub const USERNS_PROBE_FILE: &str = "cache/userns-probe";

/// Largest probe file read, in bytes.
const MAX_PROBE_FILE_BYTES: u64 = 16 << 10;

static PROBE_STATE_DIR: OnceLock<PathBuf> = OnceLock::new();

/// Lets [`probe_userns_cached`] keep a positive probe in `state_dir`
/// (`USERNS_PROBE_FILE`) for the next process, and use the last one instead of forking a
/// probe child (about a millisecond of a one-shot CLI's run). It is used only while every
/// fact the probe depends on is unchanged (the Tierbox version, kernel
/// release, boot, this process's user namespace and ids, and the sysctls and seccomp mode
/// `explain` reads); a negative result is never kept. Takes effect only before the first
/// probe of the process; later calls do nothing.
pub fn set_probe_state_dir(state_dir: &Path) {
    let _ = PROBE_STATE_DIR.set(state_dir.to_path_buf());
}

/// Everything a kept probe must have been made under.
fn probe_key() -> String {
    let boot = fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let userns = fs::read_link("/proc/self/ns/user")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let (uid, gid) = crate::launch::sys::current_ids();
    format!(
        "tierbox-sandbox {} | kernel {} | boot {} | {userns} | ids {uid}:{gid} | {:?}",
        env!("CARGO_PKG_VERSION"),
        crate::launch::sys::kernel_release(),
        boot.trim(),
        SysctlFacts::read()
    )
}

fn probe_through_state_dir(state_dir: &Path) -> UsernsSupport {
    let file = state_dir.join(USERNS_PROBE_FILE);
    let kept = format!("{}\navailable\n", probe_key());
    if tierbox_policy::state_file::read_private(&file, state_dir, MAX_PROBE_FILE_BYTES)
        .is_some_and(|text| text == kept)
    {
        return UsernsSupport::Available;
    }
    let found = probe_userns();
    if matches!(found, UsernsSupport::Available) {
        // Best effort: without it the next process probes again.
        let _ = tierbox_policy::state_file::write_private(&file, &kept);
    }
    found
}

/// The host facts [`explain_for`] reasons from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SysctlFacts {
    /// [`SYSCTL_UNPRIVILEGED_USERNS_CLONE`], when the file exists.
    pub unprivileged_userns_clone: Option<u64>,
    /// [`SYSCTL_APPARMOR_RESTRICT_USERNS`], when the file exists.
    pub apparmor_restrict: Option<u64>,
    /// Each of [`NAMESPACE_LIMIT_SYSCTLS`] with its value, when readable.
    pub namespace_limits: Vec<(&'static str, Option<u64>)>,
    /// The `Seccomp:` mode of this process from `/proc/self/status` (2 = a filter).
    pub seccomp_mode: Option<u64>,
    /// Whether this process has `CAP_SYS_ADMIN` in its effective set (the
    /// unprivileged-only switches do not apply to it).
    pub privileged: bool,
}

impl SysctlFacts {
    /// Reads the sysctls and `/proc/self/status` (read-only).
    pub fn read() -> Self {
        let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
        let field = |name: &str| {
            status.lines().find_map(|l| {
                let rest = l.strip_prefix(name)?.strip_prefix(':')?;
                Some(rest.trim().to_owned())
            })
        };
        let cap_eff = field("CapEff").and_then(|v| u64::from_str_radix(&v, 16).ok());
        Self {
            unprivileged_userns_clone: read_sysctl(SYSCTL_UNPRIVILEGED_USERNS_CLONE),
            apparmor_restrict: read_sysctl(SYSCTL_APPARMOR_RESTRICT_USERNS),
            namespace_limits: NAMESPACE_LIMIT_SYSCTLS
                .iter()
                .map(|f| (*f, read_sysctl(f)))
                .collect(),
            seccomp_mode: field("Seccomp").and_then(|v| v.parse().ok()),
            privileged: cap_eff.is_some_and(|c| c & (1 << CAP_SYS_ADMIN) != 0),
        }
    }
}

fn read_sysctl(path: &str) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// `/proc/sys/kernel/foo_bar` → `kernel.foo_bar`.
pub fn sysctl_key(path: &str) -> String {
    path.strip_prefix("/proc/sys/")
        .unwrap_or(path)
        .replace('/', ".")
}

/// `key=value (file)`, the way every reason names a sysctl.
fn named(path: &str, value: u64) -> String {
    format!("{}={value} ({path})", sysctl_key(path))
}

/// The symbolic name of the `errno` values the probe meets.
fn errno_name(errno: i32) -> String {
    match errno {
        libc::EPERM => "EPERM".to_owned(),
        libc::EACCES => "EACCES".to_owned(),
        libc::ENOSPC => "ENOSPC".to_owned(),
        libc::EUSERS => "EUSERS".to_owned(),
        libc::EINVAL => "EINVAL".to_owned(),
        libc::ENOMEM => "ENOMEM".to_owned(),
        other => format!("errno {other}"),
    }
}

/// Why the probe of Tier C's namespaces failed, from the failing step, its `errno` and
/// the host's sysctls. Pure.
#[cfg(test)]
pub fn explain(failure: NsProbeFailure, facts: &SysctlFacts) -> String {
    explain_for(TIER_C_NAMESPACES, failure, facts)
}

/// Why the probe of `namespaces` ([`TIER_C_NAMESPACES`] or [`TIER_B_NAMESPACES`]) failed,
/// from the failing step, its `errno` and the host's sysctls. Pure.
pub fn explain_for(
    namespaces: libc::c_int,
    failure: NsProbeFailure,
    facts: &SysctlFacts,
) -> String {
    let unshared = if namespaces == TIER_B_NAMESPACES {
        "unshare of the user and mount namespaces"
    } else {
        "unshare of the user, mount, pid, net, ipc, uts and cgroup namespaces"
    };
    let (step, errno) = match failure {
        NsProbeFailure::Unshare(e) => (unshared, e),
        NsProbeFailure::MountPrivate(e) => ("making mounts private in a new user namespace", e),
        NsProbeFailure::MountTmpfs(e) => ("mounting a tmpfs in a new user namespace", e),
    };
    let failed = format!("{step} failed with {}", errno_name(errno));
    // A zero limit disables that namespace type for everyone, root included.
    for (path, value) in &facts.namespace_limits {
        if *value == Some(0) {
            let kind = sysctl_key(path)
                .trim_start_matches("user.max_")
                .trim_end_matches("_namespaces")
                .to_owned();
            let kind = if kind == "mnt" {
                "mount".to_owned()
            } else {
                kind
            };
            return format!(
                "{kind} namespaces are disabled: {} ({failed})",
                named(path, 0)
            );
        }
    }
    if !facts.privileged && facts.unprivileged_userns_clone == Some(0) {
        return format!(
            "unprivileged user namespaces are disabled: {} ({failed}; enable with sysctl \
             kernel.unprivileged_userns_clone=1 or run the supervisor with CAP_SYS_ADMIN)",
            named(SYSCTL_UNPRIVILEGED_USERNS_CLONE, 0)
        );
    }
    if !facts.privileged && facts.apparmor_restrict == Some(1) {
        return format!(
            "AppArmor restricts unprivileged user namespaces: {} ({failed}; allow it with an \
             AppArmor profile granting `userns` to the supervisor, or sysctl \
             kernel.apparmor_restrict_unprivileged_userns=0)",
            named(SYSCTL_APPARMOR_RESTRICT_USERNS, 1)
        );
    }
    let limits = facts
        .namespace_limits
        .iter()
        .filter_map(|(p, v)| v.map(|v| format!("{}={v}", sysctl_key(p))))
        .collect::<Vec<_>>()
        .join(", ");
    match errno {
        libc::ENOSPC => format!(
            "a namespace limit is exhausted: {failed} although no limit is 0 ({limits}); too \
             many namespaces exist for this user"
        ),
        libc::EUSERS => format!(
            "user namespaces are nested too deeply: {failed} (the kernel allows \
             {MAX_USERNS_DEPTH} levels)"
        ),
        libc::EINVAL => format!(
            "the kernel lacks a namespace type: {failed} (built without CONFIG_USER_NS, \
             CONFIG_NET_NS, CONFIG_CGROUPS or similar, or the caller is multi-threaded)"
        ),
        libc::EPERM | libc::EACCES => {
            let sysctls = [
                facts
                    .unprivileged_userns_clone
                    .map(|v| named(SYSCTL_UNPRIVILEGED_USERNS_CLONE, v)),
                facts
                    .apparmor_restrict
                    .map(|v| named(SYSCTL_APPARMOR_RESTRICT_USERNS, v)),
            ]
            .into_iter()
            .flatten()
            .chain((!limits.is_empty()).then_some(limits))
            .collect::<Vec<_>>()
            .join(", ");
            let seccomp = match facts.seccomp_mode {
                Some(2) => {
                    "this process runs under a seccomp filter (Seccomp: 2 in /proc/self/status), which is the likely cause"
                }
                _ => {
                    "no seccomp filter is visible, so a container runtime or LSM policy is the likely cause"
                }
            };
            format!("{failed} although the sysctls allow user namespaces ({sysctls}); {seccomp}")
        }
        _ => format!("{failed} ({limits})"),
    }
}

/// One `/proc/<pid>/{uid,gid}_map` line mapping the single id `inside` to `outside`:
/// `"<inside> <outside> 1\n"`.
#[cfg(test)]
pub fn id_map_lines(inside: u32, outside: u32) -> String {
    format!("{inside} {outside} 1\n")
}

/// The single uid and gid of a sandbox and what they are outside.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdMaps {
    /// The uid inside the sandbox (non-root).
    pub inside_uid: u32,
    /// The uid it is outside (the supervisor's or the workspace owner's).
    pub outside_uid: u32,
    /// The gid inside the sandbox.
    pub inside_gid: u32,
    /// The gid it is outside.
    pub outside_gid: u32,
}

/// Why a map could not be written.
#[cfg(test)]
#[derive(Debug, thiserror::Error)]
pub enum UsernsError {
    /// Opening or writing one of the `/proc/<pid>/` files failed.
    #[error("writing {content:?} to {path}: {source}")]
    WriteMap {
        /// The file.
        path: PathBuf,
        /// What was written.
        content: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The kernel took part of a map (it must take it in one write).
    #[error("writing {content:?} to {path}: only {written} bytes were taken")]
    ShortWrite {
        /// The file.
        path: PathBuf,
        /// What was written.
        content: String,
        /// How many bytes the kernel took.
        written: usize,
    },
}

/// Writes the maps of the child `pid` (which has just entered a new user namespace) from
/// its parent, in the order the kernel requires:
///
/// 1. `uid_map`: `inside_uid outside_uid 1`.
/// 2. `setgroups` = `deny`: since Linux 3.19 a writer without `CAP_SETGID` in the parent
///    namespace may not write `gid_map` until `setgroups` is denied, and once `gid_map` is
///    written `setgroups` can no longer be changed. Denied even when the supervisor is
///    root, so the sandbox behaves the same either way (it can never change its
///    supplementary groups, which would let it shed a group used to *deny* access). A
///    kernel without the file (before 3.19) is accepted.
/// 3. `gid_map`: `inside_gid outside_gid 1`.
///
/// Each file takes its whole content in one `write(2)` at offset 0 and can be written
/// only once; a second attempt fails with `EPERM`.
#[cfg(test)]
pub fn write_id_maps(pid: libc::pid_t, maps: &IdMaps) -> Result<(), UsernsError> {
    let proc = PathBuf::from(format!("/proc/{pid}"));
    write_once(
        &proc.join("uid_map"),
        &id_map_lines(maps.inside_uid, maps.outside_uid),
    )?;
    match write_once(&proc.join("setgroups"), "deny") {
        Err(UsernsError::WriteMap { source, .. }) if source.kind() == io::ErrorKind::NotFound => {}
        other => other?,
    }
    write_once(
        &proc.join("gid_map"),
        &id_map_lines(maps.inside_gid, maps.outside_gid),
    )
}

/// One `write(2)` of all of `content` to `path`.
#[cfg(test)]
fn write_once(path: &Path, content: &str) -> Result<(), UsernsError> {
    let err = |source| UsernsError::WriteMap {
        path: path.to_path_buf(),
        content: content.to_owned(),
        source,
    };
    let mut file = fs::OpenOptions::new().write(true).open(path).map_err(err)?;
    let written = file.write(content.as_bytes()).map_err(err)?;
    if written != content.len() {
        return Err(UsernsError::ShortWrite {
            path: path.to_path_buf(),
            content: content.to_owned(),
            written,
        });
    }
    Ok(())
}

#[cfg(test)]
#[path = "userns_tests.rs"]
mod tests;
