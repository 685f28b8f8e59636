//! Review mode's kept change sets: what an overlay run changed, taken out of its upper
//! layer into the state directory when the run ends ([`ChangeStore::keep`]), then shown,
//! applied to the workspace all-or-nothing, or discarded; unapplied ones expire.
//!
//! A kept change set is a directory `<state>/changes/<run id>/` (mode 0700) with
//! `manifest.json` ([`KeptChanges`]: the workspace, the expiry and every change with the
//! fingerprint of what the workspace had at its path) and `files/`, the new content of
//! every added, modified or renamed file and symlink at its relative path, and
//! `usage.json`, what it is charged against the caps on kept change sets.
//!
//! Keeping is bounded ([`KeepCaps`], the policy's `workspace.keep_changes_*`): the room a
//! set takes is reserved under the store's lock before any of it is copied, a set that
//! does not fit evicts its owner's own oldest sets and never another owner's, and one
//! that still does not fit is not kept (see [`caps`] for the invariants).
//!
//! Applying ([`ChangeStore::apply`]) needs consent for what a reviewer must see: a change
//! with a flag that [`ChangeFlag::needs_consent`] (a symlink out of the workspace, a new
//! executable, anything in a `.git` directory, a new repository, a setuid or setgid bit,
//! a device node) is applied only when its path is named, or with `include_flagged`;
//! otherwise nothing is applied and [`ReviewError::Flagged`] lists every such path.
//!
//! It never trusts the workspace to be as it was, nor to
//! stay as it is while the apply runs (the run's processes, the workspace's owner or
//! anyone with write access may rename, swap and link entries underneath):
//!
//! - each path's entry must still match the change's [`Change::before`] fingerprint
//!   (content hash), and stay the same inode up to the moment it is replaced: otherwise
//!   nothing is applied and the error names the path;
//! - no name is resolved through a symlink and no mode, owner or content is changed
//!   through a name: every step works on file descriptors held from the workspace root
//!   (the invariant is written out, and checked by a test, in `review/apply.rs`);
//! - new content is written to a staging directory inside the workspace first, with
//!   permission bits only (no setuid, setgid or sticky bit); device nodes, FIFOs and
//!   sockets are never applied;
//! - the changes are then committed by renames, each replaced or deleted entry moved
//!   aside into the staging directory; any failure moves everything back (all or
//!   nothing), and success removes the staging directory.
//!
//! ```
//! # fn demo(state: &std::path::Path) -> Result<(), tierbox_runner::review::ReviewError> {
//! use tierbox_runner::review::ChangeStore;
//!
//! let store = ChangeStore::new(state);
//! for kept in store.list() {
//!     println!("{} changed {} path(s) in {}", kept.run_id, kept.changes.changes.len(), kept.workspace.display());
//! }
//! # Ok(()) }
//! ```

use std::collections::BTreeSet;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::{Mode, OFlags};
use serde::{Deserialize, Serialize};

use crate::changes::print::BENEATH;
use crate::changes::{Change, ChangeFlag, ChangeKind, ChangeSet, MAX_CHANGES, scan_all};

mod apply;
pub mod caps;
mod escape;
pub use apply::MAX_STAGING_DEPTH;
pub use caps::{CHARGE_BLOCK_BYTES, Evicted, StoreUsage, Usage, charge};
pub use escape::{Escape, escaped, escaped_path};
pub use tierbox_policy::KeepCaps;

/// Directory of the kept change sets, in the state directory.
pub const CHANGES_DIR: &str = "changes";

/// A kept change set's manifest file.
pub const MANIFEST_FILE: &str = "manifest.json";

/// A kept change set's directory of new content.
pub const FILES_DIR: &str = "files";

/// Prefix of the staging directory an apply makes in the workspace root (followed by the
/// run id); removed when the apply ends, whatever its result.
pub const STAGING_PREFIX: &str = ".tierbox-apply-";

/// Longest run id accepted as a change set's name (the ids Tierbox makes are 32 hex
/// digits).
pub const MAX_RUN_ID_BYTES: usize = 64;

/// Default byte budget of [`ChangeStore::diff`]: past it the diff is cut with a marker.
pub const DEFAULT_DIFF_BYTES: usize = 64 << 10;

/// Largest file [`ChangeStore::diff`] compares as text, in bytes; larger ones are listed
/// as changed without their lines.
pub const MAX_DIFF_FILE_BYTES: u64 = 1 << 20;

/// Why a review operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// The run id is not one Tierbox makes (hex digits).
    #[error("{run_id:?} is not a run id (1 to {MAX_RUN_ID_BYTES} hex digits)")]
    BadRunId {
        /// The id given.
        run_id: String,
    },
    /// No change set is kept for the run: never made (a direct-mode run, or one that
    /// changed nothing), applied, discarded, or expired.
    #[error(
        "no change set is kept for run {run_id} (it changed nothing, or it was applied, discarded or expired)"
    )]
    NotFound {
        /// The run id.
        run_id: String,
    },
    /// A path asked for is not in the change set.
    #[error("{path} is not in the change set of run {run_id}")]
    NotInChangeSet {
        /// The run id.
        run_id: String,
        /// The path.
        path: PathBuf,
    },
    /// The workspace's entry at a path is no longer what the run started from.
    #[error(
        "the workspace changed underneath at {path}: expected {expected}, found {found}; nothing was applied"
    )]
    Conflict {
        /// The path, relative to the workspace.
        path: PathBuf,
        /// What the change was made against.
        expected: String,
        /// What is there now.
        found: String,
    },
    /// A path's workspace entry changed while the run was going on.
    #[error(
        "the workspace changed at {path} while the run was going on; nothing was applied (discard, or apply the other paths by name)"
    )]
    ChangedDuringRun {
        /// The path.
        path: PathBuf,
    },
    /// Changes the apply covers carry flags a reviewer must consent to
    /// ([`ChangeFlag::needs_consent`]), and their paths were not named nor was
    /// `include_flagged` given: nothing was applied.
    #[error("{}", flagged_message(run_id, flagged))]
    Flagged {
        /// The run id.
        run_id: String,
        /// Every such change, with the flags that need consent.
        flagged: Vec<FlaggedChange>,
    },
    /// The change set is incomplete (the upper layer was larger than a scan reads).
    #[error(
        "the change set of run {run_id} is incomplete (its upper layer was larger than a scan reads); it cannot be applied whole"
    )]
    Incomplete {
        /// The run id.
        run_id: String,
    },
    /// A path of the workspace goes through a symlink, or leaves the workspace.
    #[error("{path} is reached through a symlink or leaves the workspace; nothing was applied")]
    UnsafePath {
        /// The path.
        path: PathBuf,
    },
    /// An apply failed and undoing it could not put everything back: what it had moved
    /// aside is kept in the staging directory.
    #[error(
        "{cause}; undoing the apply left entries in {}: {}", staging.display(), left.join("; ")
    )]
    RollbackIncomplete {
        /// Why the apply failed.
        cause: Box<ReviewError>,
        /// The staging directory, kept.
        staging: PathBuf,
        /// Each step not undone, with why.
        left: Vec<String>,
    },
    /// A change set does not fit under the caps on kept change sets, even with its
    /// owner's own older sets evicted: it was not kept, and nothing was evicted.
    #[error(
        "the change set of run {run_id} was not kept: it needs {needed} {unit}, and {key} is {cap} {unit} with {used} in use, of which {owner}'s own older sets that could be evicted hold {own}; apply or discard kept change sets (`tierbox changes list`), or raise {key}"
    )]
    OverCap {
        /// The run whose set was not kept.
        run_id: String,
        /// Its owner.
        owner: String,
        /// The policy key of the cap.
        key: &'static str,
        /// `bytes` or `entries`.
        unit: &'static str,
        /// The cap.
        cap: u64,
        /// What the set needs.
        needed: u64,
        /// What is in use under the cap (the owner's, for a per-owner cap).
        used: u64,
        /// Of `used`, what the owner's own older sets that nothing was using hold.
        own: u64,
    },
    /// A file system call failed (nothing was applied when this comes from `apply`).
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// On which path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl ReviewError {
    /// A stable code for the CLI, MCP and HTTP: `changes.not_found`, `changes.conflict`, …
    pub fn code(&self) -> &'static str {
        match self {
            Self::BadRunId { .. } => "changes.bad_run_id",
            Self::NotFound { .. } => "changes.not_found",
            Self::NotInChangeSet { .. } => "changes.not_in_change_set",
            Self::Conflict { .. } => "changes.conflict",
            Self::Flagged { .. } => "changes.flagged",
            Self::ChangedDuringRun { .. } => "changes.changed_during_run",
            Self::Incomplete { .. } => "changes.incomplete",
            Self::UnsafePath { .. } => "changes.unsafe_path",
            Self::RollbackIncomplete { .. } => "changes.rollback_incomplete",
            Self::OverCap { .. } => "changes.over_cap",
            Self::Io { .. } => "changes.io",
        }
    }
}

/// A change an apply needs consent for ([`ReviewError::Flagged`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FlaggedChange {
    /// The path, relative to the workspace.
    pub path: PathBuf,
    /// Its flags that need consent.
    pub flags: Vec<ChangeFlag>,
}

/// The message of [`ReviewError::Flagged`]: every path with its flags (past
/// [`MAX_CHANGES`], counted), and the two ways to consent.
fn flagged_message(run_id: &str, flagged: &[FlaggedChange]) -> String {
    let mut listed: Vec<String> = flagged
        .iter()
        .take(MAX_CHANGES)
        .map(|f| {
            let flags: Vec<&str> = f.flags.iter().map(|f| f.name()).collect();
            format!("{} [{}]", f.path.display(), flags.join(", "))
        })
        .collect();
    if flagged.len() > MAX_CHANGES {
        listed.push(format!(
            "and {} more (`tierbox changes show {run_id}`)",
            flagged.len() - MAX_CHANGES
        ));
    }
    format!(
        "{} change(s) of run {run_id} are flagged for a reviewer and were not consented to: {}; nothing was applied. To apply them, name each path (`tierbox changes apply {run_id} PATH…`, `paths` over MCP and HTTP), or include every flagged change (`--include-flagged`, `\"include_flagged\": true`)",
        flagged.len(),
        listed.join("; ")
    )
}

fn io(what: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> ReviewError {
    let path = path.into();
    move |source| ReviewError::Io { what, path, source }
}

fn rio(
    what: &'static str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(rustix::io::Errno) -> ReviewError {
    let path = path.into();
    move |e| ReviewError::Io {
        what,
        path,
        source: e.into(),
    }
}

/// A kept change set ([`MANIFEST_FILE`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct KeptChanges {
    /// The run that made the changes.
    pub run_id: String,
    /// Whose they are: the caller the run was made for — `uid:<n>` for the CLI and the
    /// library, `session:<id>` for an HTTP session token, `mcp:<id>` for an MCP
    /// connection, `http:<name>` for the operator token with a `Tierbox-Session` header.
    /// Empty in a set kept before owners were recorded: the operator's only.
    #[serde(default)]
    pub owner: String,
    /// The workspace they apply to.
    pub workspace: PathBuf,
    /// When the run ended, in milliseconds since the epoch.
    pub created_unix_ms: u64,
    /// When the change set is removed unapplied, in milliseconds since the epoch
    /// (`workspace.keep_changes_for_secs` after the run).
    pub expires_unix_ms: u64,
    /// Bytes of new content kept.
    pub bytes: u64,
    /// Every change (not bounded).
    pub changes: ChangeSet,
}

/// What an apply did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Applied {
    /// The run whose changes were applied.
    pub run_id: String,
    /// Paths written, created, renamed or deleted in the workspace.
    pub applied: Vec<PathBuf>,
    /// Changes not applied, with why (device nodes, FIFOs and sockets).
    pub skipped: Vec<Skipped>,
    /// Paths with the setuid or setgid bit in the change, applied without it.
    pub bits_dropped: Vec<PathBuf>,
    /// Changes of the set still kept (a partial apply); 0 when the set was removed.
    pub remaining: usize,
    /// The staging directory, when the apply succeeded but something in it could not be
    /// removed (a moved-aside tree deeper than [`MAX_STAGING_DEPTH`], or one that was
    /// being written to): what it holds is what the apply replaced or deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staging_left: Option<PathBuf>,
}

/// A change an apply left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Skipped {
    /// The path.
    pub path: PathBuf,
    /// Why.
    pub reason: String,
}

/// How a run's change set is kept ([`ChangeStore::keep`]): whose it is, for how long,
/// under which caps.
#[derive(Debug, Clone)]
pub struct Keeping<'a> {
    /// Its owner ([`KeptChanges::owner`]).
    pub owner: &'a str,
    /// How long it is kept unapplied (`workspace.keep_changes_for_secs`).
    pub keep_for: Duration,
    /// The caps it is kept under (`workspace.keep_changes_*`).
    pub caps: KeepCaps,
}

/// What [`ChangeStore::keep`] did.
#[derive(Debug)]
pub struct Kept {
    /// Every change of the run (the caller bounds what it shows), or why the set was not
    /// kept.
    pub changes: Result<ChangeSet, ReviewError>,
    /// The owner's older sets removed unapplied to make room for this one, oldest first
    /// (reported even when keeping then failed).
    pub evicted: Vec<Evicted>,
}

/// The kept change sets of one state directory.
#[derive(Debug, Clone)]
pub struct ChangeStore {
    dir: PathBuf,
}

/// Now, in milliseconds since the epoch (the clock of [`KeptChanges::expires_unix_ms`]).
pub fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn check_run_id(run_id: &str) -> Result<(), ReviewError> {
    let ok = !run_id.is_empty()
        && run_id.len() <= MAX_RUN_ID_BYTES
        && run_id.bytes().all(|b| b.is_ascii_hexdigit());
    match ok {
        true => Ok(()),
        false => Err(ReviewError::BadRunId {
            run_id: run_id.to_owned(),
        }),
    }
}

/// Whether `rel` is a plain relative path (no root, `.` or `..`).
fn plain(rel: &Path) -> bool {
    rel.components().next().is_some() && rel.components().all(|c| matches!(c, Component::Normal(_)))
}

impl ChangeStore {
    /// The change sets kept in `state_dir`.
    pub fn new(state_dir: &Path) -> Self {
        Self {
            dir: state_dir.join(CHANGES_DIR),
        }
    }

    fn run_dir(&self, run_id: &str) -> Result<PathBuf, ReviewError> {
        check_run_id(run_id)?;
        Ok(self.dir.join(run_id))
    }

    /// Reads the changes of a run from its overlay's `upper` layer against `workspace`
    /// (flagging what changed in the workspace since `started`) and, when there are any,
    /// keeps them as `how` says: the room they take is reserved under `how.caps` first,
    /// evicting the owner's own oldest sets if need be (see [`caps`]); a set that does not
    /// fit is not kept ([`ReviewError::OverCap`]). Returns every change (the caller bounds
    /// what it shows) and the sets evicted.
    ///
    /// ```
    /// # fn demo(state: &std::path::Path, upper: &std::path::Path, ws: &std::path::Path) {
    /// use std::time::{Duration, SystemTime};
    /// use tierbox_runner::review::{ChangeStore, KeepCaps, Keeping};
    ///
    /// let how = Keeping { owner: "uid:1000", keep_for: Duration::from_secs(3600), caps: KeepCaps::default() };
    /// let kept = ChangeStore::new(state).keep("00ff", upper, ws, SystemTime::now(), &how);
    /// for e in &kept.evicted {
    ///     println!("evicted {} ({} bytes)", e.run_id, e.bytes);
    /// }
    /// match kept.changes {
    ///     Ok(set) => println!("{} change(s) kept", set.changes.len()),
    ///     Err(e) => println!("not kept: {e}"),
    /// }
    /// # }
    /// ```
    pub fn keep(
        &self,
        run_id: &str,
        upper: &Path,
        workspace: &Path,
        started: SystemTime,
        how: &Keeping<'_>,
    ) -> Kept {
        self.sweep();
        let set = scan_all(upper, workspace, Some(started));
        let mut evicted = Vec::new();
        let changes = match set.is_empty() {
            true => Ok(set),
            false => self.keep_set(run_id, set, upper, workspace, how, &mut evicted),
        };
        Kept { changes, evicted }
    }

    /// [`ChangeStore::keep`] of a set with changes.
    fn keep_set(
        &self,
        run_id: &str,
        set: ChangeSet,
        upper: &Path,
        workspace: &Path,
        how: &Keeping<'_>,
        evicted: &mut Vec<Evicted>,
    ) -> Result<ChangeSet, ReviewError> {
        let dir = self.run_dir(run_id)?;
        std::fs::create_dir_all(&self.dir).map_err(io("create", &self.dir))?;
        set_mode(&self.dir, 0o700)?;
        let now = now_unix_ms();
        let manifest = KeptChanges {
            run_id: run_id.to_owned(),
            owner: how.owner.to_owned(),
            workspace: workspace.to_path_buf(),
            created_unix_ms: now,
            expires_unix_ms: now
                .saturating_add(u64::try_from(how.keep_for.as_millis()).unwrap_or(u64::MAX)),
            bytes: set
                .changes
                .iter()
                .filter(|c| caps::copied(c) && c.file_type == "file")
                .filter_map(|c| c.size)
                .sum(),
            changes: set,
        };
        let path = dir.join(MANIFEST_FILE);
        let text = serde_json::to_vec(&manifest)
            .map_err(|e| io("encode", &path)(std::io::Error::other(e)))?;
        let ask = caps::Ask {
            store: &self.dir,
            run_id,
            owner: how.owner,
            created_unix_ms: now,
            need: charge(&manifest.changes, text.len() as u64),
        };
        // Held until the set is complete: no sweep or eviction removes it meanwhile.
        let _lock = caps::reserve(&ask, &how.caps, evicted)?;
        let files = dir.join(FILES_DIR);
        let kept = (|| {
            std::fs::create_dir(&files).map_err(io("create", &files))?;
            for c in manifest.changes.changes.iter().filter(|c| caps::copied(c)) {
                let to = files.join(&c.path);
                if let Some(parent) = to.parent() {
                    std::fs::create_dir_all(parent).map_err(io("create", parent))?;
                }
                let from = upper.join(&c.path);
                if c.file_type == "symlink" {
                    let target = std::fs::read_link(&from).map_err(io("read the link", &from))?;
                    std::os::unix::fs::symlink(&target, &to).map_err(io("keep the link", &to))?;
                } else {
                    copy_file(&from, &to, c.size.unwrap_or(0))?;
                }
            }
            write_manifest_text(&dir, &text)
        })();
        if kept.is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        kept.map(|()| manifest.changes)
    }

    /// What the kept change sets of this store hold against the caps: every set kept or
    /// being kept, in total and by owner.
    pub fn usage(&self) -> StoreUsage {
        caps::usage(&self.dir)
    }

    /// The change set kept for `run_id`.
    pub fn get(&self, run_id: &str) -> Result<KeptChanges, ReviewError> {
        let dir = self.run_dir(run_id)?;
        match self.read_kept(run_id)? {
            Some(kept) => Ok(kept),
            None => {
                caps::remove_if_free(&dir);
                Err(ReviewError::NotFound {
                    run_id: run_id.to_owned(),
                })
            }
        }
    }

    /// The set of `run_id` locked for a change (an apply, a discard), with its manifest;
    /// an expired one is removed. The lock is released when the returned fd is dropped.
    fn lock_kept(&self, run_id: &str) -> Result<(OwnedFd, KeptChanges), ReviewError> {
        let dir = self.run_dir(run_id)?;
        let not_found = || ReviewError::NotFound {
            run_id: run_id.to_owned(),
        };
        let lock = match caps::lock_dir(&dir, true) {
            Ok(Some(lock)) => lock,
            Ok(None) => return Err(not_found()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(not_found()),
            Err(e) => return Err(io("lock", &dir)(e)),
        };
        match self.read_kept(run_id)? {
            Some(kept) => Ok((lock, kept)),
            None => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(not_found())
            }
        }
    }

    /// The manifest of `run_id`; `None` when it has expired.
    fn read_kept(&self, run_id: &str) -> Result<Option<KeptChanges>, ReviewError> {
        let dir = self.run_dir(run_id)?;
        let path = dir.join(MANIFEST_FILE);
        let text = match std::fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ReviewError::NotFound {
                    run_id: run_id.to_owned(),
                });
            }
            Err(e) => return Err(io("read", &path)(e)),
        };
        let kept: KeptChanges = serde_json::from_slice(&text)
            .map_err(|e| io("parse", &path)(std::io::Error::other(e)))?;
        Ok((kept.expires_unix_ms > now_unix_ms()).then_some(kept))
    }

    /// Every change set kept (expired ones removed first), oldest first.
    pub fn list(&self) -> Vec<KeptChanges> {
        let mut out = self.sweep_reading().1;
        out.sort_by_key(|k| k.created_unix_ms);
        out
    }

    /// Removes the change set of `run_id` unapplied.
    pub fn discard(&self, run_id: &str) -> Result<(), ReviewError> {
        let dir = self.run_dir(run_id)?;
        let (_lock, _) = self.lock_kept(run_id)?;
        std::fs::remove_dir_all(&dir).map_err(io("remove", &dir))
    }

    /// Removes the expired change sets (and anything in the directory that is not a
    /// readable change set), except those in use (being kept, applied or discarded);
    /// returns how many were removed.
    pub fn sweep(&self) -> usize {
        self.sweep_reading().0
    }

    #[cfg(test)]
    pub(crate) fn sweep_reading_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = std::fs::read_dir(&self.dir)
            .map(|r| {
                r.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        ids.sort();
        ids
    }

    /// [`ChangeStore::sweep`], reading each manifest once: how many sets were removed,
    /// and the ones kept.
    fn sweep_reading(&self) -> (usize, Vec<KeptChanges>) {
        let Ok(read) = std::fs::read_dir(&self.dir) else {
            return (0, Vec::new());
        };
        let now = now_unix_ms();
        let (mut removed, mut kept) = (0, Vec::new());
        for entry in read.flatten() {
            // The store's own files (its lock).
            if entry.file_name().as_encoded_bytes().starts_with(b".") {
                continue;
            }
            let manifest = entry.path().join(MANIFEST_FILE);
            let live = || {
                std::fs::read(&manifest)
                    .ok()
                    .and_then(|t| serde_json::from_slice::<KeptChanges>(&t).ok())
                    .filter(|k| k.expires_unix_ms > now)
            };
            // Decided under the set's own lock, taken without waiting: a keep holds it
            // until its manifest is in place, so a set whose lock is free and whose
            // manifest is missing or expired is not one being written. (Read first and
            // locked after, a keep could finish in between: its complete set was
            // removed as if its manifest were missing.)
            let _lock = match caps::lock_dir(&entry.path(), false) {
                // In use (a keep, an apply, a discard): listed, never removed here.
                Ok(None) => {
                    kept.extend(live());
                    continue;
                }
                Ok(Some(lock)) => lock,
                // Gone meanwhile, or not a directory of ours.
                Err(_) => continue,
            };
            if let Some(k) = live() {
                kept.push(k);
                continue;
            }
            // A keep makes its directory a moment before it locks it: spare young ones
            // without a manifest.
            let young = entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().unwrap_or_default() < Duration::from_secs(60));
            let being_written = young && !manifest.exists();
            if !being_written && std::fs::remove_dir_all(entry.path()).is_ok() {
                removed += 1;
            }
        }
        (removed, kept)
    }

    /// A unified diff of the text files the run changed (added, modified, deleted),
    /// against the workspace as it is now, cut at `budget` bytes. File names in it are
    /// [`escaped`] ([`Escape::Name`]); the content is as the files have it (a caller that
    /// prints it escapes it with [`Escape::Text`]).
    pub fn diff(&self, run_id: &str, budget: usize) -> Result<String, ReviewError> {
        let kept = self.get(run_id)?;
        let files = self.run_dir(run_id)?.join(FILES_DIR);
        let mut out = String::new();
        for c in &kept.changes.changes {
            if c.file_type != "file" || !plain(&c.path) {
                continue;
            }
            // The workspace's side is read without following any symlink (one planted
            // since the run must not show a host file in the diff).
            let old = || read_beneath(&kept.workspace, &c.path);
            let new = || read_regular(&files.join(&c.path));
            let (old_text, new_text, has_old, has_new) = match c.kind {
                ChangeKind::Added => (Some(String::new()), new(), false, true),
                ChangeKind::Modified => (old(), new(), true, true),
                ChangeKind::Deleted => (old(), Some(String::new()), true, false),
                ChangeKind::Renamed => {
                    let from = escaped_path(c.renamed_from.as_deref().unwrap_or(&c.path));
                    out.push_str(&format!(
                        "rename from {from}\nrename to {}\n",
                        escaped_path(&c.path)
                    ));
                    continue;
                }
            };
            // A name may hold a newline or an escape: it must not make or spoof a line.
            let name = escaped_path(&c.path);
            match (old_text, new_text) {
                (Some(old), Some(new)) => {
                    let diff = similar::TextDiff::from_lines(&old, &new);
                    let a = if has_old {
                        format!("a/{name}")
                    } else {
                        "/dev/null".to_owned()
                    };
                    let b = if has_new {
                        format!("b/{name}")
                    } else {
                        "/dev/null".to_owned()
                    };
                    out.push_str(
                        &diff
                            .unified_diff()
                            .context_radius(3)
                            .header(&a, &b)
                            .to_string(),
                    );
                }
                _ => out.push_str(&format!("Binary or large file {name} differs\n")),
            }
            if out.len() > budget {
                let mut cut = budget;
                while !out.is_char_boundary(cut) {
                    cut -= 1;
                }
                out.truncate(cut);
                out.push_str(&format!("\n… diff cut at {budget} bytes\n"));
                break;
            }
        }
        Ok(out)
    }

    /// Applies the change set of `run_id` to its workspace — every change, or with
    /// `paths` those at or below the listed paths (a rename with its source, a new
    /// directory with the new directories above it) — all or nothing (see the module
    /// documentation). The applied changes leave the store; the rest stay kept.
    ///
    /// A change with a flag that [`ChangeFlag::needs_consent`] is applied only with
    /// consent: its own path (or a rename's source) listed in `paths` — the new
    /// directories above it come with it — or `include_flagged`. Without it nothing is
    /// applied: [`ReviewError::Flagged`] lists every such change. With it, a symlink is
    /// applied as a symlink (never followed), a setuid or setgid bit is dropped
    /// ([`Applied::bits_dropped`]) and a device node, FIFO or socket is skipped.
    ///
    /// ```
    /// # fn demo(store: &tierbox_runner::review::ChangeStore, run_id: &str) -> Result<(), tierbox_runner::review::ReviewError> {
    /// use tierbox_runner::review::ReviewError;
    ///
    /// match store.apply(run_id, None, false) {
    ///     Err(ReviewError::Flagged { flagged, .. }) => {
    ///         for f in &flagged {
    ///             println!("{}: {:?}", f.path.display(), f.flags);
    ///         }
    ///         // Once a reviewer has looked at them:
    ///         store.apply(run_id, None, true)?;
    ///     }
    ///     other => {
    ///         other?;
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn apply(
        &self,
        run_id: &str,
        paths: Option<&[PathBuf]>,
        include_flagged: bool,
    ) -> Result<Applied, ReviewError> {
        // Held to the end: the set is not evicted, swept or applied twice meanwhile.
        let (_lock, mut kept) = self.lock_kept(run_id)?;
        if kept.changes.incomplete && paths.is_none() {
            return Err(ReviewError::Incomplete {
                run_id: run_id.to_owned(),
            });
        }
        let (selected, named) = select(&kept, paths)?;
        if !include_flagged {
            let flagged: Vec<FlaggedChange> = selected
                .difference(&named)
                .map(|&i| &kept.changes.changes[i])
                .filter(|c| c.flags.iter().any(|f| f.needs_consent()))
                .map(|c| FlaggedChange {
                    path: c.path.clone(),
                    flags: c
                        .flags
                        .iter()
                        .copied()
                        .filter(|f| f.needs_consent())
                        .collect(),
                })
                .collect();
            if !flagged.is_empty() {
                return Err(ReviewError::Flagged {
                    run_id: run_id.to_owned(),
                    flagged,
                });
            }
        }
        let dir = self.run_dir(run_id)?;
        let files = dir.join(FILES_DIR);
        let root = open_root(&kept.workspace, "open the workspace")?;
        let files_fd = open_root(&files, "open the kept content")?;
        let applied = apply::Apply::new(&kept.workspace, root, files_fd, run_id)?
            .run(&kept.changes.changes, &selected)?;
        let remaining: Vec<Change> = kept
            .changes
            .changes
            .iter()
            .enumerate()
            .filter(|(i, _)| !selected.contains(i))
            .map(|(_, c)| c.clone())
            .collect();
        let remaining_len = remaining.len();
        if remaining.is_empty() {
            std::fs::remove_dir_all(&dir).map_err(io("remove", &dir))?;
        } else {
            kept.changes.changes = remaining;
            write_manifest(&dir, &kept)?;
        }
        Ok(Applied {
            run_id: run_id.to_owned(),
            remaining: remaining_len,
            ..applied
        })
    }
}

impl ChangeSet {
    fn store(&self) -> Result<(ChangeStore, &str), ReviewError> {
        match &self.kept {
            Some(k) => Ok((ChangeStore::new(&k.state_dir), k.run_id.as_str())),
            None => Err(ReviewError::NotFound {
                run_id: String::new(),
            }),
        }
    }

    /// Applies every change of this set to the workspace, all or nothing (see
    /// [`ChangeStore::apply`]); the set must be one a run kept ([`ChangeSet::kept`]). A
    /// set with changes a reviewer must consent to is refused ([`ReviewError::Flagged`]):
    /// [`ChangeSet::apply_paths`] names them, [`ChangeSet::apply_including_flagged`]
    /// takes them all.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use tierbox_runner::Sandbox;
    ///
    /// // Let the formatter rewrite the tree, then decide.
    /// let outcome = Sandbox::command("cargo")
    ///     .args(["fmt"])
    ///     .overlay()
    ///     .execute()
    ///     .await?;
    /// let changes = outcome.changes.expect("overlay mode returns a change set");
    /// for c in &changes.changes {
    ///     println!("{:?} {}", c.kind, c.path.display());
    /// }
    /// if changes.changes.iter().all(|c| c.flags.is_empty()) {
    ///     changes.apply()?;
    /// } else {
    ///     changes.discard()?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn apply(&self) -> Result<Applied, ReviewError> {
        let (store, run_id) = self.store()?;
        store.apply(run_id, None, false)
    }

    /// Applies every change of this set, flagged ones included: the caller has looked at
    /// them ([`ChangeFlag::needs_consent`]).
    pub fn apply_including_flagged(&self) -> Result<Applied, ReviewError> {
        let (store, run_id) = self.store()?;
        store.apply(run_id, None, true)
    }

    /// Applies the changes at or below `paths` (relative to the workspace), all or
    /// nothing; the others stay kept. A flagged change needs its own path listed.
    pub fn apply_paths(&self, paths: &[PathBuf]) -> Result<Applied, ReviewError> {
        let (store, run_id) = self.store()?;
        store.apply(run_id, Some(paths), false)
    }

    /// Drops this set unapplied.
    pub fn discard(&self) -> Result<(), ReviewError> {
        let (store, run_id) = self.store()?;
        store.discard(run_id)
    }

    /// A unified diff of the text files of this set, cut at `budget` bytes.
    pub fn diff(&self, budget: usize) -> Result<String, ReviewError> {
        let (store, run_id) = self.store()?;
        store.diff(run_id, budget)
    }
}

/// Free space below which a scratch filesystem counts as full at the end of a run
/// (`limit_hit: "disk"`), in bytes: tmpfs hands out whole pages, so a write that failed
/// with `ENOSPC` leaves less than a few of them.
pub const DISK_FULL_MARGIN_BYTES: u64 = 64 << 10;

/// Whether the filesystem of `fd` has less than [`DISK_FULL_MARGIN_BYTES`] free.
pub fn is_full(fd: &impl AsFd) -> bool {
    rustix::fs::fstatfs(fd).is_ok_and(|st| {
        let block = u64::try_from(st.f_bsize).unwrap_or(0);
        let free = st.f_bavail.saturating_mul(block);
        free < DISK_FULL_MARGIN_BYTES
    })
}

/// What a run's scratch filesystems say once its tree is gone.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    /// `/tmp` or the overlay's upper layer filled up.
    pub(crate) disk_full: bool,
    /// Overlay mode: the change set (every change) or why it could not be kept.
    pub(crate) changes: Option<Result<ChangeSet, String>>,
    /// Overlay mode: the owner's older sets evicted to make room for this one.
    pub(crate) evicted: Vec<Evicted>,
}

impl Scratch {
    /// Records this in `outcome`: `limit_hit: "disk"` unless a limit that ended the run
    /// is already there, and the change set (bounded).
    pub(crate) fn record(mut self, outcome: &mut crate::Outcome) {
        use crate::LimitHit;
        if self.disk_full && matches!(outcome.limit_hit, None | Some(LimitHit::Output)) {
            outcome.limit_hit = Some(LimitHit::Disk);
        }
        outcome.changes_evicted = std::mem::take(&mut self.evicted);
        (outcome.changes, outcome.changes_error) = self.shown();
    }

    /// The change set as shown (at most [`crate::changes::MAX_CHANGES`] listed; an
    /// empty one with the error when it could not be kept).
    fn shown(self) -> (Option<ChangeSet>, Option<String>) {
        match self.changes {
            Some(Ok(set)) => (Some(set.bounded(crate::changes::MAX_CHANGES)), None),
            Some(Err(e)) => (Some(ChangeSet::default()), Some(e)),
            None => (None, None),
        }
    }
}

impl Scratch {
    /// For a background process's status: the change set (bounded), its error, the
    /// limit hit (`limit`, the memory kill, first; else `"disk"` when full) and its
    /// denial.
    pub(crate) fn for_status(
        mut self,
        limit: Option<crate::LimitHit>,
        plan: &tierbox_policy::Plan,
    ) -> EndReport {
        let limit_hit = limit.or(self.disk_full.then_some(crate::LimitHit::Disk));
        let changes_evicted = std::mem::take(&mut self.evicted);
        let (changes, changes_error) = self.shown();
        EndReport {
            changes,
            changes_error,
            changes_evicted,
            limit_hit,
            denials: crate::denials::of_run(
                None,
                limit_hit.map(|l| (l, false, crate::denials::limit_value(plan, l))),
            ),
            denial_reports: std::collections::BTreeMap::new(),
            reach: Vec::new(),
        }
    }
}

/// What a background process's status says of its end beyond its exit: the change set
/// (overlay mode) or why it could not be kept, the limit hit, the denials.
#[derive(Debug, Clone, Default)]
pub(crate) struct EndReport {
    pub(crate) changes: Option<ChangeSet>,
    pub(crate) changes_error: Option<String>,
    pub(crate) changes_evicted: Vec<Evicted>,
    pub(crate) limit_hit: Option<crate::LimitHit>,
    pub(crate) denials: Vec<crate::denials::Denial>,
    /// How each layer's refusals were read ([`crate::denials::sources`]).
    pub(crate) denial_reports: std::collections::BTreeMap<
        tierbox_policy::enforcement::DenialLayer,
        tierbox_policy::LayerReport,
    >,
    /// Each published port and host port, with what it carried.
    pub(crate) reach: Vec<tierbox_egress::reach::RelayReport>,
}

/// After a run's tree is gone: whether its `/tmp` or upper layer filled up, and in
/// overlay mode its changes kept for review under `run_id` (on a blocking thread: the
/// copy is as large as the run wrote). Releases both filesystems.
pub(crate) async fn settle_scratch(
    plan: &tierbox_policy::Plan,
    l: &mut tierbox_sandbox::contract::RunningSandbox,
    run_for: &crate::supervisor::RunFor<'_>,
    launched_at: SystemTime,
) -> Scratch {
    let (state_dir, run_id) = (run_for.state_dir, run_for.run_id);
    let scratch = l.take_scratch();
    let (tmp, layer) = (scratch.tmp_fs, scratch.upper_layer);
    let disk_full = tmp.iter().chain(layer.iter().map(|l| l.fd())).any(is_full);
    drop(tmp);
    let Some(layer) = layer else {
        return Scratch {
            disk_full,
            changes: None,
            evicted: Vec::new(),
        };
    };
    let store = ChangeStore::new(state_dir);
    let workspace = plan.workspace.clone();
    let keep_for = Duration::from_secs(
        plan.keep_changes_for_secs
            .unwrap_or(tierbox_policy::policy::DEFAULT_KEEP_CHANGES_SECS),
    );
    let caps = plan.keep_changes_caps.unwrap_or_default();
    let run_id = run_id.to_owned();
    let owner = run_for.owner.to_owned();
    let state_dir = state_dir.to_path_buf();
    let kept = tokio::task::spawn_blocking(move || {
        let upper = layer.changes_dir();
        let how = Keeping {
            owner: &owner,
            keep_for,
            caps,
        };
        let kept = store.keep(&run_id, &upper, &workspace, launched_at, &how);
        let changes = kept.changes.map_err(|e| e.to_string()).map(|mut set| {
            if !set.is_empty() {
                set.kept = Some(crate::changes::KeptAt { state_dir, run_id });
            }
            set
        });
        (changes, kept.evicted)
    })
    .await
    .unwrap_or_else(|e| {
        (
            Err(format!("keeping the change set failed: {e}")),
            Vec::new(),
        )
    });
    Scratch {
        disk_full,
        changes: Some(kept.0),
        evicted: kept.1,
    }
}

/// The text of the regular file `rel` below `workspace`, reached with
/// `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`; `None` for anything else, a file over
/// [`MAX_DIFF_FILE_BYTES`] or one that is not UTF-8.
fn read_beneath(workspace: &Path, rel: &Path) -> Option<String> {
    let root = rustix::fs::open(
        workspace,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let fd = rustix::fs::openat2(
        &root,
        rel,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
        BENEATH,
    )
    .ok()?;
    text_of(File::from(fd))
}

/// The text of the kept regular file `path` (see [`read_beneath`]).
fn read_regular(path: &Path) -> Option<String> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    text_of(file)
}

fn text_of(mut file: File) -> Option<String> {
    use std::io::Read;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > MAX_DIFF_FILE_BYTES {
        return None;
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    String::from_utf8(bytes).ok()
}

/// An `O_PATH` descriptor of the directory `path`: one of the two roots an apply starts
/// from (the workspace, the kept content).
fn open_root(path: &Path, what: &'static str) -> Result<OwnedFd, ReviewError> {
    rustix::fs::open(
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(rio(what, path))
}

fn set_mode(path: &Path, mode: u32) -> Result<(), ReviewError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io("chmod", path))
}

fn write_manifest(dir: &Path, kept: &KeptChanges) -> Result<(), ReviewError> {
    let path = dir.join(MANIFEST_FILE);
    let text =
        serde_json::to_vec(kept).map_err(|e| io("encode", &path)(std::io::Error::other(e)))?;
    write_manifest_text(dir, &text)
}

/// Writes a manifest beside the old one, then renames it into place.
fn write_manifest_text(dir: &Path, text: &[u8]) -> Result<(), ReviewError> {
    let path = dir.join(MANIFEST_FILE);
    let tmp = dir.join(format!("{MANIFEST_FILE}.tmp"));
    std::fs::write(&tmp, text).map_err(io("write", &tmp))?;
    std::fs::rename(&tmp, &path).map_err(io("rename", &path))
}

/// Copies the regular file `from` to a new file `to` (mode 0600): exactly `size` bytes,
/// what the scan found and the keep reserved room for; a file that has more fails.
fn copy_file(from: &Path, to: &Path, size: u64) -> Result<(), ReviewError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut src = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(from)
        .map_err(io("open", from))?;
    let mut dst = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)
        .map_err(io("create", to))?;
    use std::io::Read;
    let copied = std::io::copy(&mut (&mut src).take(size.saturating_add(1)), &mut dst)
        .map_err(io("copy", to))?;
    match copied > size {
        true => Err(io("copy", from)(std::io::Error::other(format!(
            "the file is larger than the {size} bytes scanned"
        )))),
        false => Ok(()),
    }
}

/// The indices of the changes an apply of `paths` covers (all of them without a list),
/// and of those it has consent for by name: each change whose own path (or a rename's
/// source) is listed, and the new directories above such a change.
fn select(
    kept: &KeptChanges,
    paths: Option<&[PathBuf]>,
) -> Result<(BTreeSet<usize>, BTreeSet<usize>), ReviewError> {
    let changes = &kept.changes.changes;
    let Some(paths) = paths else {
        return Ok(((0..changes.len()).collect(), BTreeSet::new()));
    };
    let mut out = BTreeSet::new();
    let mut named = BTreeSet::new();
    for want in paths {
        let want = want.strip_prefix("./").unwrap_or(want);
        let mut matched = false;
        for (i, c) in changes.iter().enumerate() {
            let from = c.renamed_from.as_deref();
            if c.path.starts_with(want) || from.is_some_and(|f| f.starts_with(want)) {
                out.insert(i);
                matched = true;
            }
            if c.path == want || from == Some(want) {
                named.insert(i);
            }
        }
        if !matched {
            return Err(ReviewError::NotInChangeSet {
                run_id: kept.run_id.clone(),
                path: want.to_path_buf(),
            });
        }
    }
    // New directories above a selected change come with it (and with its consent).
    let mut parents = Vec::new();
    for &i in &out {
        for (j, c) in changes.iter().enumerate() {
            if c.kind == ChangeKind::Added
                && c.file_type == "dir"
                && changes[i].path.starts_with(&c.path)
            {
                parents.push((j, named.contains(&i)));
            }
        }
    }
    for (j, consented) in parents {
        out.insert(j);
        if consented {
            named.insert(j);
        }
    }
    Ok((out, named))
}

#[cfg(test)]
#[path = "review_tests.rs"]
mod tests;
