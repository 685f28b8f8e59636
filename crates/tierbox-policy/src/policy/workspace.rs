//! The `[workspace]` section: how a run sees its workspace (direct or review mode) and
//! how long and how much of review mode's change sets are kept.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a run sees its workspace ([`Policy::workspace`](crate::Policy::workspace)).
///
/// ```
/// use tierbox_policy::{Policy, WorkspaceMode};
///
/// let p = Policy::from_toml("version = 1\n[workspace]\nmode = \"overlay\"\n").unwrap();
/// assert_eq!(p.workspace.mode, WorkspaceMode::Overlay);
/// assert_eq!(p.workspace.keep_changes_for_secs, 3600);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct WorkspacePolicy {
    /// `direct` (the default): the run writes into the workspace. `overlay` (review
    /// mode): the run sees the workspace through a copy-on-write overlay, the real
    /// workspace unchanged until its change set is applied. Tier C only (native backend);
    /// a request may narrow `direct` to `overlay`, never the reverse.
    pub mode: WorkspaceMode,
    /// How long an overlay run's change set is kept for review, in seconds, before it is
    /// removed unapplied (default one hour, [`DEFAULT_KEEP_CHANGES_SECS`]; at most
    /// [`MAX_KEEP_CHANGES_SECS`]). Bounds how long the kept change sets use disk; the four
    /// caps below bound how much.
    pub keep_changes_for_secs: u64,
    /// Whether an agent may apply its own change sets (default `false`): applying is a
    /// person's act. With `false` a server does not offer the apply tool over MCP and
    /// refuses an apply made with an HTTP session token (`changes.apply_denied`); the
    /// operator token and the CLI apply. An agent may always list, show and discard its
    /// own change sets.
    pub agent_may_apply: bool,
    /// Most bytes the kept change sets of every owner together may take in the state
    /// directory (default [`DEFAULT_KEEP_CHANGES_TOTAL_BYTES`], 4 GiB; between
    /// [`MIN_KEEP_CHANGES_BYTES`] and [`MAX_KEEP_CHANGES_BYTES`]). A set is charged what it
    /// takes on disk: each file rounded up to 4 KiB, each directory 4 KiB, its manifest
    /// twice (room for its rewrite after a partial apply).
    pub keep_changes_total_bytes: u64,
    /// Most entries (inodes: files, symlinks, directories, manifests) the kept change sets
    /// of every owner together may take (default [`DEFAULT_KEEP_CHANGES_TOTAL_ENTRIES`];
    /// between [`MIN_KEEP_CHANGES_ENTRIES`] and [`MAX_KEEP_CHANGES_ENTRIES`]).
    pub keep_changes_total_entries: u64,
    /// Most bytes one owner's kept change sets may take (default
    /// [`DEFAULT_KEEP_CHANGES_PER_OWNER_BYTES`], 1 GiB; at most
    /// `keep_changes_total_bytes`). A set that does not fit evicts its owner's own oldest
    /// unapplied sets, never another owner's; if it still does not fit it is not kept.
    pub keep_changes_per_owner_bytes: u64,
    /// Most entries one owner's kept change sets may take (default
    /// [`DEFAULT_KEEP_CHANGES_PER_OWNER_ENTRIES`]; at most `keep_changes_total_entries`).
    pub keep_changes_per_owner_entries: u64,
}

/// Default of [`WorkspacePolicy::keep_changes_for_secs`]: one hour.
pub const DEFAULT_KEEP_CHANGES_SECS: u64 = 3_600;

/// Largest [`WorkspacePolicy::keep_changes_for_secs`]: seven days. Change sets are review
/// material, not storage.
pub const MAX_KEEP_CHANGES_SECS: u64 = 7 * 24 * 3_600;

/// Default of [`WorkspacePolicy::keep_changes_total_bytes`]: 4 GiB, what the kept change
/// sets of a state directory may take of the host's disk at most (a laptop's free space
/// is rarely below tens of GiB). Protects the disk of the state directory from runs that
/// each fill their upper layer: without it three default runs kept 6 GiB for an hour.
pub const DEFAULT_KEEP_CHANGES_TOTAL_BYTES: u64 = 4 << 30;

/// Default of [`WorkspacePolicy::keep_changes_total_entries`]: 200,000 inodes, about 1 %
/// of the inode table of a 256 GB ext4 disk. Protects the state directory's filesystem
/// from running out of inodes while it still has space (one run can leave 100,000 small
/// files).
pub const DEFAULT_KEEP_CHANGES_TOTAL_ENTRIES: u64 = 200_000;

/// Default of [`WorkspacePolicy::keep_changes_per_owner_bytes`]: 1 GiB, a quarter of the
/// total, so one owner (an HTTP session, an MCP connection) cannot take the whole budget
/// and at least four owners each keep a full allowance. A reviewable change set (a
/// formatter over a large repository, a generated tree) fits many times over.
pub const DEFAULT_KEEP_CHANGES_PER_OWNER_BYTES: u64 = 1 << 30;

/// Default of [`WorkspacePolicy::keep_changes_per_owner_entries`]: 50,000 inodes, a
/// quarter of the total, for the same reason.
pub const DEFAULT_KEEP_CHANGES_PER_OWNER_ENTRIES: u64 = 50_000;

/// Smallest byte cap on kept change sets (total or per owner): 1 MiB, the smallest
/// `limits.disk_bytes`; a smaller cap would keep almost nothing.
pub const MIN_KEEP_CHANGES_BYTES: u64 = 1 << 20;

/// Largest byte cap on kept change sets: 1 TiB. Change sets are review material, not
/// storage.
pub const MAX_KEEP_CHANGES_BYTES: u64 = 1 << 40;

/// Smallest entry cap on kept change sets (total or per owner): 16, a small set's
/// directories, manifest and usage record with a few files.
pub const MIN_KEEP_CHANGES_ENTRIES: u64 = 16;

/// Largest entry cap on kept change sets: 10,000,000.
pub const MAX_KEEP_CHANGES_ENTRIES: u64 = 10_000_000;

impl Default for WorkspacePolicy {
    fn default() -> Self {
        Self {
            mode: WorkspaceMode::Direct,
            keep_changes_for_secs: DEFAULT_KEEP_CHANGES_SECS,
            agent_may_apply: false,
            keep_changes_total_bytes: DEFAULT_KEEP_CHANGES_TOTAL_BYTES,
            keep_changes_total_entries: DEFAULT_KEEP_CHANGES_TOTAL_ENTRIES,
            keep_changes_per_owner_bytes: DEFAULT_KEEP_CHANGES_PER_OWNER_BYTES,
            keep_changes_per_owner_entries: DEFAULT_KEEP_CHANGES_PER_OWNER_ENTRIES,
        }
    }
}

impl WorkspacePolicy {
    /// The caps on kept change sets this section sets.
    ///
    /// ```
    /// use tierbox_policy::Policy;
    ///
    /// let p = Policy::from_toml("version = 1\n[workspace]\nkeep_changes_per_owner_bytes = 1048576\n").unwrap();
    /// let caps = p.workspace.keep_caps();
    /// assert_eq!(caps.per_owner_bytes, 1 << 20);
    /// assert_eq!(caps.total_bytes, 4 << 30);
    /// ```
    pub fn keep_caps(&self) -> KeepCaps {
        KeepCaps {
            total_bytes: self.keep_changes_total_bytes,
            total_entries: self.keep_changes_total_entries,
            per_owner_bytes: self.keep_changes_per_owner_bytes,
            per_owner_entries: self.keep_changes_per_owner_entries,
        }
    }
}

/// The caps on the kept change sets of a state directory, in bytes and entries
/// (`workspace.keep_changes_total_*` and `keep_changes_per_owner_*`), as an overlay run's
/// plan carries them. Every kept set counts toward the totals, whoever owns it; a run's
/// set is checked against the caps of its own policy when it is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KeepCaps {
    /// [`WorkspacePolicy::keep_changes_total_bytes`].
    pub total_bytes: u64,
    /// [`WorkspacePolicy::keep_changes_total_entries`].
    pub total_entries: u64,
    /// [`WorkspacePolicy::keep_changes_per_owner_bytes`].
    pub per_owner_bytes: u64,
    /// [`WorkspacePolicy::keep_changes_per_owner_entries`].
    pub per_owner_entries: u64,
}

impl Default for KeepCaps {
    fn default() -> Self {
        WorkspacePolicy::default().keep_caps()
    }
}

/// How a run sees its workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceMode {
    /// Writes go straight into the workspace.
    #[default]
    Direct,
    /// The workspace is the read-only lower layer of an overlay; writes, deletions and
    /// renames land in an upper layer of the run's own (at most `limits.disk_bytes`),
    /// reported as a change set to apply or discard.
    Overlay,
}

impl WorkspaceMode {
    /// The mode as the policy spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Overlay => "overlay",
        }
    }

    /// Whether this is [`WorkspaceMode::Direct`], for `skip_serializing_if`.
    pub fn is_direct(&self) -> bool {
        *self == Self::Direct
    }
}

impl std::fmt::Display for WorkspaceMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
