//! The `[filesystem]` section: access beyond the workspace.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Filesystem access beyond the workspace. Paths may start with `~/` (the supervisor's
/// home). System paths (`/usr`, `/bin`, `/lib*`, `/etc`) are always readable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct FilesystemPolicy {
    /// Extra read-only paths (toolchains such as `~/.cargo`, `/opt/…`).
    pub read_only: Vec<String>,
    /// Extra writable paths (caches such as `~/.cache/pip`).
    pub writable: Vec<String>,
    /// Paths hidden even though a parent is readable (Tier C).
    pub deny_read: Vec<String>,
    /// Paths inside the workspace kept read-only, relative to the workspace root
    /// (enforced in Tier C, including symlinks and paths that do not exist yet).
    pub protected: Vec<String>,
    /// The sandbox's `/dev/shm` (POSIX shared memory and semaphores: Python's
    /// `multiprocessing`, Chromium): `private`, a tmpfs of the run's own in Tier C, and in
    /// Tier B under a root supervisor a directory of the run's private `/tmp`; `none`.
    /// Tier B under an unprivileged supervisor has no private one: listing `/dev/shm` in
    /// `writable` grants the host's there (shared with every process of the run's uid);
    /// wherever a private one exists that grant is served by it, so one policy runs
    /// `multiprocessing` in both tiers.
    pub dev_shm: DevShm,
    /// Most directory entries read while searching the workspace for nested git
    /// repositories before a run (and after it, for the repositories it made); default
    /// [`crate::validate::DEFAULT_REPO_SCAN_MAX_ENTRIES`], at most
    /// [`crate::validate::MAX_REPO_SCAN_MAX_ENTRIES`]. Bounds a launch's cost on a huge
    /// tree: a workspace with more is refused (`scope.protection_incomplete`), never run
    /// with part of its repositories unprotected.
    pub repo_scan_max_entries: u64,
    /// Most nested git repositories whose `.git` is kept read-only in one workspace;
    /// default [`crate::validate::DEFAULT_MAX_PROTECTED_REPOS`], at most
    /// [`crate::validate::MAX_MAX_PROTECTED_REPOS`]. Each costs mounts at launch; a
    /// workspace with more is refused (`scope.protection_incomplete`).
    pub max_protected_repos: u64,
}

/// The sandbox's `/dev/shm` ([`FilesystemPolicy::dev_shm`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DevShm {
    /// A tmpfs of the run's own (Tier C), sized by the memory limit.
    #[default]
    Private,
    /// None: `/dev/shm` is read-only and empty.
    None,
}

impl DevShm {
    /// Whether this is the default, for `skip_serializing_if`.
    pub fn is_default(&self) -> bool {
        *self == Self::Private
    }
}

impl Default for FilesystemPolicy {
    fn default() -> Self {
        Self {
            dev_shm: DevShm::Private,
            read_only: Vec::new(),
            writable: Vec::new(),
            deny_read: Vec::new(),
            protected: crate::validate::DEFAULT_PROTECTED
                .iter()
                .map(|p| (*p).to_owned())
                .collect(),
            repo_scan_max_entries: crate::validate::DEFAULT_REPO_SCAN_MAX_ENTRIES,
            max_protected_repos: crate::validate::DEFAULT_MAX_PROTECTED_REPOS,
        }
    }
}
