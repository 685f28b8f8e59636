//! Why an argument path is refused (`scope.path_*`), and the policy change that lets it
//! through.
//!
//! The argument check asks the run's access model whether the path an argument names is
//! visible to the program with the access the argument implies. When it is not, the
//! refusal carries what would make it so, computed where the rule is found: a grant
//! (`filesystem.read_only`, `filesystem.writable`) for a path nothing covers, the removal
//! of the `filesystem.deny_read` or `filesystem.protected` entry that hides or protects
//! it, `filesystem.dev_shm = "private"`. Each [`PathFix`] is a list of such changes
//! which, applied together, let the same request through (a test applies them). A path
//! no policy key can make visible — a host secret, one of Tierbox's own files, a host
//! device, a write into `/proc` — gets a refusal that has no fix and says so.

use std::fmt;
use std::path::PathBuf;

/// Which grant list a [`PolicyChange::Grant`] adds to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantKey {
    /// `filesystem.read_only`.
    ReadOnly,
    /// `filesystem.writable`.
    Writable,
}

impl GrantKey {
    /// The policy key.
    pub fn key(self) -> &'static str {
        match self {
            Self::ReadOnly => "filesystem.read_only",
            Self::Writable => "filesystem.writable",
        }
    }
}

/// One change to a policy's `[filesystem]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PolicyChange {
    /// Add `path` (canonical, existing) to the grant list `key`.
    Grant { key: GrantKey, path: PathBuf },
    /// Remove `entry`, as the policy writes it, from `filesystem.deny_read`.
    RemoveDenial { entry: String },
    /// Remove `entry`, as the policy writes it, from `filesystem.protected`.
    RemoveProtected { entry: String },
    /// Move `entry`, as the policy writes it, from `filesystem.read_only` to
    /// `filesystem.writable` (a read-only grant beats a writable one on the same path).
    MoveToWritable { entry: String },
    /// `filesystem.dev_shm = "private"`.
    PrivateDevShm,
}

impl fmt::Display for PolicyChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Grant { key, path } => write!(f, "{} += {:?}", key.key(), path.display()),
            Self::RemoveDenial { entry } => {
                write!(f, "remove {entry:?} from filesystem.deny_read")
            }
            Self::RemoveProtected { entry } => {
                write!(f, "remove {entry:?} from filesystem.protected")
            }
            Self::MoveToWritable { entry } => write!(
                f,
                "move {entry:?} from filesystem.read_only to filesystem.writable"
            ),
            Self::PrivateDevShm => f.write_str("filesystem.dev_shm = \"private\""),
        }
    }
}

/// The policy changes that, applied together, let a refused argument path through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathFix(pub Box<[PolicyChange]>);

impl PathFix {
    /// The changes, in the order to apply them.
    pub fn changes(&self) -> &[PolicyChange] {
        &self.0
    }

    /// Adds `more` after the changes already here (each change once), for a refusal
    /// whose fix must also cover what the rest of the request needs.
    pub fn extend(&mut self, more: impl IntoIterator<Item = PolicyChange>) {
        let mut all = std::mem::take(&mut self.0).into_vec();
        for change in more {
            if !all.contains(&change) {
                all.push(change);
            }
        }
        self.0 = all.into_boxed_slice();
    }
}

impl fmt::Display for PathFix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, change) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" and ")?;
            }
            change.fmt(f)?;
        }
        Ok(())
    }
}

/// What an argument asks of the path it names; `Write` is the stronger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ArgAccess {
    /// To see it: read a file, list a directory, or find nothing there.
    Read,
    /// To write it (dd's `of=`).
    Write,
}

impl fmt::Display for ArgAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Read => "read",
            Self::Write => "write",
        })
    }
}

/// A path an argument may not name whatever the policy says: [`crate::Rejection::PathSecret`]
/// and [`crate::Rejection::PathNotGrantable`] carry one.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unreachable {
    /// A host secret under a system path (`/etc/shadow`, a file only root may read).
    HostSecret { at: PathBuf },
    /// One of Tierbox's own files (state directory, audit log, signing key), or a write
    /// into the Tier A runtimes.
    Own { file: super::OwnFile, at: PathBuf },
    /// A host device, or `/dev` itself written: every run has only the devices the
    /// sandbox provides.
    Device,
    /// A write into `/proc`, which every tier shows read-only and no grant may name.
    ProcWrite,
    /// The filesystem root, or a path under a top-level directory that does not exist: a
    /// grant names an existing path, and granting `/` would hand the run the host.
    Root,
    /// `~user/…`: another user's home, which the program expands itself.
    OtherHome,
    /// A `file:` URL naming another host.
    RemoteFile,
    /// A symlink loop or a chain longer than [`crate::validate::MAX_SYMLINK_HOPS`].
    Unresolvable,
}

impl fmt::Display for Unreachable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::HostSecret { at } => write!(
                f,
                "{} is a host secret under a system path, hidden in every tier",
                at.display()
            ),
            Self::Own { file, at } => write!(
                f,
                "{} {} is Tierbox's own state, which no run may reach",
                file.name(),
                at.display()
            ),
            Self::Device => f.write_str(
                "it is a host device or /dev itself, which no tier passes through; every run has /dev/null, /dev/zero, /dev/full, /dev/random, /dev/urandom, pseudo-terminals, its own /dev/fd and /dev/std*, and /dev/shm as filesystem.dev_shm says",
            ),
            Self::ProcWrite => f.write_str(
                "every tier shows /proc read-only (but a run's own /proc/self/fd), and no grant may name a /proc path",
            ),
            Self::Root => f.write_str(
                "a grant names an existing path, and the nearest one here is /: granting it would hand the run the whole host",
            ),
            Self::OtherHome => f.write_str(
                "it names another user's home, which the program expands itself; name the path inside the workspace instead",
            ),
            Self::RemoteFile => f.write_str("it is a file: URL naming another host"),
            Self::Unresolvable => write!(
                f,
                "it cannot be resolved (a symlink loop, or more than {} links)",
                crate::validate::MAX_SYMLINK_HOPS
            ),
        }
    }
}
