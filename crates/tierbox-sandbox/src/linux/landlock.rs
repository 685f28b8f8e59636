//! Landlock: the filesystem (and TCP, and IPC-scope) access layer that holds even where
//! mount namespaces are unavailable (Tier B) and backs them up where they are (Tier C).
//!
//! Invariants kept here:
//!
//! - **Deny by default.** The ruleset handles every filesystem right the running ABI knows,
//!   so anything not granted by a rule is denied; a path that does not exist is skipped
//!   (granting nothing), never widened to a parent.
//! - **Never a silent downgrade.** When the kernel's ABI lacks a requested feature (signal
//!   scoping below ABI 6, TCP rules below ABI 4, truncate below 3, device ioctl below 5)
//!   the result is [`LandlockStatus::PartiallyEnforced`] naming what is missing, and the
//!   caller decides (reject, or accept a weaker tier and say so in the attestation). No
//!   landlock at all is [`LandlockError::Unsupported`].
//! - **Prepare in the supervisor, apply in the child.** [`PreparedLandlock::prepare`]
//!   builds the ruleset fd with raw system calls once; the child only calls
//!   `super::sys::landlock_restrict_self` on [`PreparedLandlock::raw_fd`] after
//!   `no_new_privs` (about 5 µs). The fd is close-on-exec, so it never reaches the
//!   sandboxed program; one prepared ruleset can serve many launches.
//!
//! Why not the field's crate (`landlock`, as Codex's sandbox uses): the ruleset here is
//! built once with raw system calls in the supervisor and its fd shared by many launches
//! (the child only calls `landlock_restrict_self`, ~5 µs), it reports exactly which
//! feature a kernel lacks for [`LandlockStatus::PartiallyEnforced`], and it covers the
//! ABI 6 scopes (signals, abstract unix sockets) and ABI 7 the crate did not expose when
//! this was written.
//!
//! What landlock does not cover: it restricts path-based access and TCP bind/connect, not
//! UDP or raw sockets (seccomp's socket-family rules and network namespaces do that), and
//! rules apply to the file a path resolves to when the ruleset is prepared.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags};

use super::sys;

/// Landlock filesystem access rights (uapi `LANDLOCK_ACCESS_FS_*`) and the ABI that
/// introduced each.
pub mod access_fs {
    /// Execute a file (ABI 1).
    pub const EXECUTE: u64 = 1 << 0;
    /// Open a file with write access (ABI 1).
    pub const WRITE_FILE: u64 = 1 << 1;
    /// Open a file with read access (ABI 1).
    pub const READ_FILE: u64 = 1 << 2;
    /// Open a directory or list its content (ABI 1).
    pub const READ_DIR: u64 = 1 << 3;
    /// Remove an empty directory or rename one (ABI 1).
    pub const REMOVE_DIR: u64 = 1 << 4;
    /// Unlink or rename a file (ABI 1).
    pub const REMOVE_FILE: u64 = 1 << 5;
    /// Create a character device (ABI 1).
    pub const MAKE_CHAR: u64 = 1 << 6;
    /// Create a directory (ABI 1).
    pub const MAKE_DIR: u64 = 1 << 7;
    /// Create a regular file (ABI 1).
    pub const MAKE_REG: u64 = 1 << 8;
    /// Create a unix socket (ABI 1).
    pub const MAKE_SOCK: u64 = 1 << 9;
    /// Create a named pipe (ABI 1).
    pub const MAKE_FIFO: u64 = 1 << 10;
    /// Create a block device (ABI 1).
    pub const MAKE_BLOCK: u64 = 1 << 11;
    /// Create a symbolic link (ABI 1).
    pub const MAKE_SYM: u64 = 1 << 12;
    /// Link or rename a file into a different directory (ABI 2; always denied on ABI 1).
    pub const REFER: u64 = 1 << 13;
    /// Truncate a file (ABI 3).
    pub const TRUNCATE: u64 = 1 << 14;
    /// `ioctl` on character and block devices (ABI 5).
    pub const IOCTL_DEV: u64 = 1 << 15;

    /// All rights of ABI 1.
    pub const ABI1_ALL: u64 = EXECUTE
        | WRITE_FILE
        | READ_FILE
        | READ_DIR
        | REMOVE_DIR
        | REMOVE_FILE
        | MAKE_CHAR
        | MAKE_DIR
        | MAKE_REG
        | MAKE_SOCK
        | MAKE_FIFO
        | MAKE_BLOCK
        | MAKE_SYM;
    /// Rights that apply to a non-directory file; a rule on a file may grant only these.
    pub const FILE_APPLICABLE: u64 = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV;
    /// What a read-only grant allows: read files, list directories, execute.
    pub const READ_ONLY: u64 = READ_FILE | READ_DIR | EXECUTE;
}

/// Landlock network access rights (uapi `LANDLOCK_ACCESS_NET_*`, ABI 4).
pub mod access_net {
    /// Bind a TCP socket to a local port.
    pub const BIND_TCP: u64 = 1 << 0;
    /// Connect a TCP socket to a remote port.
    pub const CONNECT_TCP: u64 = 1 << 1;
}

/// Landlock IPC scopes (uapi `LANDLOCK_SCOPE_*`, ABI 6).
pub mod scope {
    /// No connecting to abstract unix sockets created outside the sandbox's domain.
    pub const ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
    /// No signals to processes outside the sandbox's domain.
    pub const SIGNAL: u64 = 1 << 1;
}

/// The highest landlock ABI whose rights this module knows. A newer kernel is used at this
/// level (ABI 7 only added audit logging flags, no access rights).
pub const MAX_KNOWN_ABI: u32 = 7;

/// The filesystem rights the kernel knows at `abi`.
pub fn fs_rights_for_abi(abi: u32) -> u64 {
    let mut rights = access_fs::ABI1_ALL;
    if abi >= 2 {
        rights |= access_fs::REFER;
    }
    if abi >= 3 {
        rights |= access_fs::TRUNCATE;
    }
    if abi >= 5 {
        rights |= access_fs::IOCTL_DEV;
    }
    rights
}

/// The highest landlock ABI this kernel supports, or `None` when landlock is not built
/// in (`ENOSYS`) or disabled at boot (`EOPNOTSUPP`).
pub fn probe_abi() -> Option<u32> {
    sys::landlock_abi_version().ok().filter(|&abi| abi >= 1)
}

/// What the sandboxed process may access, expressed as landlock grants.
///
/// Nothing is granted unless listed: an empty spec denies every filesystem access.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LandlockSpec {
    /// Paths (directories: the whole tree beneath; files: that file) the sandbox may read
    /// and execute: read-file, read-dir and execute rights.
    pub read_only: Vec<PathBuf>,
    /// Paths the sandbox may read, write, create in, remove from, rename within and out
    /// of (refer), truncate and `ioctl` devices in: every filesystem right the ABI knows.
    /// Device files such as `/dev/null` may be listed individually; a file rule gets only
    /// the file-applicable rights.
    pub read_write: Vec<PathBuf>,
    /// Forbid signalling processes outside the sandbox (ABI ≥ 6).
    pub scope_signals: bool,
    /// Forbid connecting to abstract unix sockets created outside the sandbox (ABI ≥ 6).
    pub scope_abstract_unix: bool,
    /// `Some(ports)`: handle TCP bind and connect (ABI ≥ 4) and allow only connecting, to
    /// these ports on any address; `Some(vec![])` allows no TCP at all. `None`: TCP is not
    /// restricted by landlock.
    pub tcp_connect_ports: Option<Vec<u16>>,
}

/// How completely the kernel enforces a [`LandlockSpec`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LandlockStatus {
    /// Every requested restriction is enforced.
    FullyEnforced,
    /// The ruleset works but the kernel's ABI lacks these requested restrictions
    /// (`"truncate"`, `"tcp"`, `"ioctl_dev"`, `"scope_signals"`, `"scope_abstract_unix"`).
    PartiallyEnforced {
        /// The requested features that are not enforced.
        missing: Vec<&'static str>,
    },
}

/// Why a landlock ruleset could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
    /// The kernel has no landlock, or it is disabled at boot (`lsm=` without landlock).
    #[error("landlock is not supported by this kernel (landlock_create_ruleset: {source})")]
    Unsupported {
        /// The error of the version probe (`ENOSYS` or `EOPNOTSUPP`).
        source: io::Error,
    },
    /// `landlock_create_ruleset` failed.
    #[error(
        "landlock_create_ruleset(handled_access_fs={handled_fs:#x}, handled_access_net={handled_net:#x}, scoped={scoped:#x}) failed: {source}"
    )]
    CreateRuleset {
        /// Handled filesystem rights.
        handled_fs: u64,
        /// Handled network rights.
        handled_net: u64,
        /// Scopes.
        scoped: u64,
        /// The system error.
        source: io::Error,
    },
    /// A granted path exists but could not be opened with `O_PATH`.
    #[error("open({}, O_PATH | O_CLOEXEC) for a landlock rule failed: {source}", path.display())]
    OpenPath {
        /// The granted path.
        path: PathBuf,
        /// The system error.
        source: io::Error,
    },
    /// `fstat` of an opened granted path failed.
    #[error("fstat({}) for a landlock rule failed: {source}", path.display())]
    StatPath {
        /// The granted path.
        path: PathBuf,
        /// The system error.
        source: io::Error,
    },
    /// `landlock_add_rule(LANDLOCK_RULE_PATH_BENEATH)` failed.
    #[error(
        "landlock_add_rule(path_beneath, {}, allowed_access={allowed:#x}) failed: {source}", path.display()
    )]
    AddPathRule {
        /// The granted path.
        path: PathBuf,
        /// The rights requested for it.
        allowed: u64,
        /// The system error.
        source: io::Error,
    },
    /// `landlock_add_rule(LANDLOCK_RULE_NET_PORT)` failed.
    #[error(
        "landlock_add_rule(net_port, port={port}, allowed_access=connect_tcp) failed: {source}"
    )]
    AddNetRule {
        /// The TCP port.
        port: u16,
        /// The system error.
        source: io::Error,
    },
}

/// A landlock ruleset built in the supervisor, ready for
/// `super::sys::landlock_restrict_self` in a child.
#[derive(Debug)]
pub struct PreparedLandlock {
    ruleset: OwnedFd,
    /// The kernel's landlock ABI (capped at [`MAX_KNOWN_ABI`]).
    pub abi: u32,
    /// Whether every requested restriction is enforced at this ABI.
    pub status: LandlockStatus,
    /// The filesystem rights the ruleset handles (denied unless granted).
    pub handled_fs: u64,
    /// The network rights the ruleset handles (0: TCP not restricted).
    // Read by the tests that check which rights a ruleset handles.
    #[cfg_attr(not(test), allow(dead_code))]
    pub handled_net: u64,
    /// The IPC scopes the ruleset restricts.
    // Read by the tests that check which rights a ruleset handles.
    #[cfg_attr(not(test), allow(dead_code))]
    pub scoped: u64,
    /// Granted paths that did not exist and so were skipped (they grant nothing).
    // Read by the tests that check which rights a ruleset handles.
    #[cfg_attr(not(test), allow(dead_code))]
    pub skipped: Vec<PathBuf>,
}

impl PreparedLandlock {
    /// Build the ruleset for `spec` at the running kernel's ABI.
    ///
    /// Fails with [`LandlockError::Unsupported`] when there is no landlock; any other
    /// error names the system call and the path or port.
    pub fn prepare(spec: &LandlockSpec) -> Result<Self, LandlockError> {
        let abi =
            sys::landlock_abi_version().map_err(|source| LandlockError::Unsupported { source })?;
        Self::prepare_at_abi(spec, abi.min(MAX_KNOWN_ABI))
    }

    /// Build the ruleset as if the kernel supported only `abi` (≤ the real ABI): used by
    /// tests to check the partial-enforcement report, and usable to pin behaviour.
    pub fn prepare_at_abi(spec: &LandlockSpec, abi: u32) -> Result<Self, LandlockError> {
        let plan = RulesetPlan::new(spec, abi);
        let attr = sys::LandlockRulesetAttr {
            handled_access_fs: plan.handled_fs,
            handled_access_net: plan.handled_net,
            scoped: plan.scoped,
        };
        let ruleset =
            sys::landlock_create_ruleset(&attr).map_err(|source| LandlockError::CreateRuleset {
                handled_fs: plan.handled_fs,
                handled_net: plan.handled_net,
                scoped: plan.scoped,
                source,
            })?;

        let mut skipped = Vec::new();
        let grants = spec
            .read_only
            .iter()
            .map(|p| (p, access_fs::READ_ONLY))
            .chain(spec.read_write.iter().map(|p| (p, plan.handled_fs)));
        for (path, wanted) in grants {
            if !add_path_rule(&ruleset, path, wanted & plan.handled_fs)? {
                skipped.push(path.clone());
            }
        }
        if plan.handled_net != 0 {
            for &port in spec.tcp_connect_ports.iter().flatten() {
                sys::landlock_add_net_rule(ruleset.as_fd(), access_net::CONNECT_TCP, port)
                    .map_err(|source| LandlockError::AddNetRule { port, source })?;
            }
        }

        Ok(Self {
            ruleset,
            abi,
            status: plan.status,
            handled_fs: plan.handled_fs,
            handled_net: plan.handled_net,
            scoped: plan.scoped,
            skipped,
        })
    }

    /// The ruleset fd, for `super::sys::landlock_restrict_self` in the child. It stays
    /// owned (and open) by `self`: keep `self` alive until the child has exec'd.
    pub fn raw_fd(&self) -> RawFd {
        self.ruleset.as_raw_fd()
    }
}

/// What a spec becomes at a given ABI: the pure part of [`PreparedLandlock::prepare`].
#[derive(Debug, Clone, PartialEq, Eq)]
struct RulesetPlan {
    handled_fs: u64,
    handled_net: u64,
    scoped: u64,
    status: LandlockStatus,
}

impl RulesetPlan {
    fn new(spec: &LandlockSpec, abi: u32) -> Self {
        let mut missing = Vec::new();
        let handled_fs = fs_rights_for_abi(abi);
        // Below ABI 3 truncate(2) is not controlled at all, and below ABI 5 neither is
        // ioctl on devices: weaker than asked. (Below ABI 2 cross-directory rename and
        // link are always denied: stricter than asked, so not "missing".)
        if abi < 3 {
            missing.push("truncate");
        }
        if abi < 5 {
            missing.push("ioctl_dev");
        }
        let handled_net = match (&spec.tcp_connect_ports, abi >= 4) {
            (None, _) => 0,
            (Some(_), true) => access_net::BIND_TCP | access_net::CONNECT_TCP,
            (Some(_), false) => {
                missing.push("tcp");
                0
            }
        };
        let mut scoped = 0;
        if spec.scope_abstract_unix {
            if abi >= 6 {
                scoped |= scope::ABSTRACT_UNIX_SOCKET;
            } else {
                missing.push("scope_abstract_unix");
            }
        }
        if spec.scope_signals {
            if abi >= 6 {
                scoped |= scope::SIGNAL;
            } else {
                missing.push("scope_signals");
            }
        }
        let status = if missing.is_empty() {
            LandlockStatus::FullyEnforced
        } else {
            LandlockStatus::PartiallyEnforced { missing }
        };
        Self {
            handled_fs,
            handled_net,
            scoped,
            status,
        }
    }
}

/// Add one path-beneath rule. Returns `Ok(false)` when the path does not exist (skipped).
/// A non-directory gets only the file-applicable subset of `allowed`.
fn add_path_rule(ruleset: &OwnedFd, path: &Path, allowed: u64) -> Result<bool, LandlockError> {
    let fd = match rustix::fs::open(path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => return Ok(false),
        Err(e) => {
            return Err(LandlockError::OpenPath {
                path: path.to_owned(),
                source: e.into(),
            });
        }
    };
    let stat = rustix::fs::fstat(&fd).map_err(|e| LandlockError::StatPath {
        path: path.to_owned(),
        source: e.into(),
    })?;
    let allowed = if FileType::from_raw_mode(stat.st_mode) == FileType::Directory {
        allowed
    } else {
        allowed & access_fs::FILE_APPLICABLE
    };
    sys::landlock_add_path_rule(ruleset.as_fd(), allowed, fd.as_fd()).map_err(|source| {
        LandlockError::AddPathRule {
            path: path.to_owned(),
            allowed,
            source,
        }
    })?;
    Ok(true)
}

#[cfg(test)]
#[path = "landlock_tests.rs"]
mod tests;
