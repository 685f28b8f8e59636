//! The caps on kept change sets ([`KeepCaps`]: bytes and entries, in total and per
//! owner): what a set is charged ([`charge`]), what a store holds
//! ([`super::ChangeStore::usage`]), and the room a new set is given before any of it is
//! copied (`reserve`).
//!
//! # Invariants
//!
//! - **Room is reserved before anything is copied.** Under the store's lock (`flock` on
//!   `<state>/changes/.lock`) the usage records of every kept set and every set being
//!   kept are read, room is made, and the new set's directory is created with its own
//!   usage record ([`USAGE_FILE`]): from then on every other keep counts it. The copy
//!   runs outside the lock and never writes more than was reserved (a file larger than
//!   its scan fails the keep), so however many runs keep at once, the totals cannot
//!   overshoot the caps.
//! - **Only the owner's own sets are evicted**, oldest first, and only complete ones that
//!   nothing is using: each set's directory has a lock of its own, held by the keep that
//!   makes it, an apply and a discard; an eviction (and a sweep of expired sets) removes
//!   a set only while it holds that lock, taken without waiting. Another owner's set is
//!   never removed to make room.
//! - **All or nothing.** When the set does not fit even with every such set evicted, none
//!   is evicted and the set is not kept: [`ReviewError::OverCap`] names the cap, what the
//!   set needs and what is in use.
//!
//! A set is charged what the state directory's disk holds for it, as `du` counts it: a
//! file its size rounded up to [`CHARGE_BLOCK_BYTES`], a directory and a symlink one
//! block, its manifest twice (room for the rewrite after a partial apply, written beside
//! the old one before it replaces it). Not counted: a directory's blocks past its first
//! when it lists thousands of names, and blocks larger than [`CHARGE_BLOCK_BYTES`] on the
//! state directory's filesystem.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{FlockOperation, Mode, OFlags};
use serde::{Deserialize, Serialize};
use tierbox_policy::KeepCaps;

use super::{MANIFEST_FILE, ReviewError, check_run_id, io};
use crate::changes::{Change, ChangeKind, ChangeSet};

/// A kept set's usage record: its owner, when it was made and what it is charged;
/// written when its room is reserved, before anything is copied.
pub const USAGE_FILE: &str = "usage.json";

/// The store's lock file, in `<state>/changes`: held while room is reserved.
pub const LOCK_FILE: &str = ".lock";

/// The unit a kept entry is charged in, bytes: a file's size is rounded up to it, a
/// directory or symlink is one of it. The block size of ext4, xfs and btrfs by default,
/// so the charge follows what the state directory's disk gives up.
pub const CHARGE_BLOCK_BYTES: u64 = 4096;

/// Bytes and entries (inodes) of the state directory's disk.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct Usage {
    /// Bytes, in [`CHARGE_BLOCK_BYTES`] blocks.
    pub bytes: u64,
    /// Entries: files, symlinks, directories, manifests.
    pub entries: u64,
}

impl Usage {
    fn plus(self, other: Self) -> Self {
        Self {
            bytes: self.bytes.saturating_add(other.bytes),
            entries: self.entries.saturating_add(other.entries),
        }
    }

    fn minus(self, other: Self) -> Self {
        Self {
            bytes: self.bytes.saturating_sub(other.bytes),
            entries: self.entries.saturating_sub(other.entries),
        }
    }
}

/// What the kept change sets of a store hold, against the caps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreUsage {
    /// Sets kept or being kept.
    pub sets: usize,
    /// All of them together.
    pub total: Usage,
    /// Each owner's ([`super::KeptChanges::owner`]).
    pub by_owner: BTreeMap<String, Usage>,
}

/// A kept change set removed unapplied to make room for a newer one of its owner's.
pub use tierbox_attest::EvictedChanges as Evicted;

/// A set's usage record ([`USAGE_FILE`]).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Record {
    owner: String,
    created_unix_ms: u64,
    bytes: u64,
    entries: u64,
}

/// A set in the store, as the caps see it.
struct Held {
    run_id: String,
    owner: String,
    created_unix_ms: u64,
    usage: Usage,
    /// Its manifest is written: a set, not a reservation.
    complete: bool,
}

/// Whether keeping a change copies content for it: a file or symlink now there.
pub(super) fn copied(c: &Change) -> bool {
    c.kind != ChangeKind::Deleted && matches!(c.file_type.as_str(), "file" | "symlink")
}

fn blocks(bytes: u64) -> u64 {
    bytes.div_ceil(CHARGE_BLOCK_BYTES) * CHARGE_BLOCK_BYTES
}

/// What keeping `set` takes of the state directory, its manifest being `manifest_bytes`
/// long: every file and symlink copied and the directories above them, the set's own
/// directory, its `files/` directory, its usage record, and the manifest twice.
///
/// ```
/// use tierbox_runner::changes::{Change, ChangeKind, ChangeSet};
/// use tierbox_runner::review::{CHARGE_BLOCK_BYTES, charge};
///
/// let file = |path: &str, size| Change {
///     path: path.into(), kind: ChangeKind::Added, file_type: "file".into(), size: Some(size),
///     mode: Some(0o644), sha256: None, target: None, renamed_from: None, before: None, flags: vec![],
/// };
/// let set = ChangeSet { changes: vec![file("a/b.txt", 1), file("a/c.txt", 5000)], ..ChangeSet::default() };
/// let u = charge(&set, 100);
/// // Two files; `a/`, the set's directory and `files/`; the usage record; the manifest
/// // and room for its rewrite.
/// assert_eq!(u.entries, 2 + 3 + 1 + 2);
/// assert_eq!(u.bytes, (1 + 2) * CHARGE_BLOCK_BYTES + 3 * CHARGE_BLOCK_BYTES + CHARGE_BLOCK_BYTES + 2 * CHARGE_BLOCK_BYTES);
/// ```
pub fn charge(set: &ChangeSet, manifest_bytes: u64) -> Usage {
    let mut dirs = BTreeSet::new();
    let mut content = Usage::default();
    for c in set.changes.iter().filter(|c| copied(c)) {
        content.entries += 1;
        content.bytes += match c.file_type.as_str() {
            "symlink" => CHARGE_BLOCK_BYTES,
            _ => blocks(c.size.unwrap_or(0)),
        };
        let mut above = c.path.parent();
        while let Some(d) = above.filter(|d| !d.as_os_str().is_empty()) {
            if !dirs.insert(d.to_path_buf()) {
                break;
            }
            above = d.parent();
        }
    }
    // The set's directory, `files/` and the usage record: one block each.
    let dirs = dirs.len() as u64 + 2;
    let fixed = Usage {
        bytes: (dirs + 1) * CHARGE_BLOCK_BYTES + 2 * blocks(manifest_bytes.max(1)),
        entries: dirs + 1 + 2,
    };
    content.plus(fixed)
}

/// Opens the directory `dir` and takes its lock, waiting for it (`wait`) or not at all:
/// `Ok(None)` when another holds it.
pub(super) fn lock_dir(dir: &Path, wait: bool) -> std::io::Result<Option<OwnedFd>> {
    let fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let op = match wait {
        true => FlockOperation::LockExclusive,
        false => FlockOperation::NonBlockingLockExclusive,
    };
    match rustix::fs::flock(&fd, op) {
        Ok(()) => Ok(Some(fd)),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Removes the set directory `dir` if nothing holds its lock; whether it did.
pub(super) fn remove_if_free(dir: &Path) -> bool {
    match lock_dir(dir, false) {
        Ok(Some(_lock)) => std::fs::remove_dir_all(dir).is_ok(),
        _ => false,
    }
}

/// Takes the store's lock ([`LOCK_FILE`] in `store`), waiting for it.
fn lock_store(store: &Path) -> Result<OwnedFd, ReviewError> {
    let path = store.join(LOCK_FILE);
    let fd = rustix::fs::open(
        &path,
        OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| io("open the lock", &path)(e.into()))?;
    rustix::fs::flock(&fd, FlockOperation::LockExclusive)
        .map_err(|e| io("lock", &path)(e.into()))?;
    Ok(fd)
}

/// Every set in `store` (kept, or being kept), with what it is charged: its usage
/// record, else (a set kept before records existed) its manifest's changes.
fn held(store: &Path) -> Vec<Held> {
    let Ok(read) = std::fs::read_dir(store) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in read.flatten() {
        let Some(run_id) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if check_run_id(&run_id).is_err() {
            continue;
        }
        let dir = entry.path();
        let manifest = dir.join(MANIFEST_FILE);
        let complete = std::fs::symlink_metadata(&manifest).is_ok();
        let record = std::fs::read(dir.join(USAGE_FILE))
            .ok()
            .and_then(|t| serde_json::from_slice::<Record>(&t).ok());
        let held = match record {
            Some(r) => Held {
                run_id,
                owner: r.owner,
                created_unix_ms: r.created_unix_ms,
                usage: Usage {
                    bytes: r.bytes,
                    entries: r.entries,
                },
                complete,
            },
            None => {
                let Some((kept, len)) = std::fs::read(&manifest).ok().and_then(|t| {
                    let len = t.len() as u64;
                    serde_json::from_slice::<super::KeptChanges>(&t)
                        .ok()
                        .map(|k| (k, len))
                }) else {
                    continue;
                };
                Held {
                    run_id,
                    usage: charge(&kept.changes, len),
                    owner: kept.owner,
                    created_unix_ms: kept.created_unix_ms,
                    complete,
                }
            }
        };
        out.push(held);
    }
    out
}

/// What the sets of `store` hold (read without the lock: a view).
pub(super) fn usage(store: &Path) -> StoreUsage {
    let mut out = StoreUsage::default();
    for h in held(store) {
        out.sets += 1;
        out.total = out.total.plus(h.usage);
        let mine = out.by_owner.entry(h.owner).or_default();
        *mine = mine.plus(h.usage);
    }
    out
}

/// The first cap that `need` does not fit under, `owner_used` and `total_used` being
/// in use: the policy key, its unit, the cap and what it had in use.
fn over(
    caps: &KeepCaps,
    need: Usage,
    owner_used: Usage,
    total_used: Usage,
) -> Option<(&'static str, &'static str, u64, u64, u64)> {
    [
        (
            "workspace.keep_changes_per_owner_bytes",
            "bytes",
            caps.per_owner_bytes,
            need.bytes,
            owner_used.bytes,
        ),
        (
            "workspace.keep_changes_per_owner_entries",
            "entries",
            caps.per_owner_entries,
            need.entries,
            owner_used.entries,
        ),
        (
            "workspace.keep_changes_total_bytes",
            "bytes",
            caps.total_bytes,
            need.bytes,
            total_used.bytes,
        ),
        (
            "workspace.keep_changes_total_entries",
            "entries",
            caps.total_entries,
            need.entries,
            total_used.entries,
        ),
    ]
    .into_iter()
    .find(|&(_, _, cap, need, used)| used.saturating_add(need) > cap)
}

/// What [`reserve`] is asked for.
pub(super) struct Ask<'a> {
    /// The store's directory (`<state>/changes`, made already).
    pub(super) store: &'a Path,
    /// The new set's run id.
    pub(super) run_id: &'a str,
    /// Its owner.
    pub(super) owner: &'a str,
    /// When it was made.
    pub(super) created_unix_ms: u64,
    /// Its [`charge`].
    pub(super) need: Usage,
}

/// Makes room for a new set under `caps`, evicting its owner's own oldest complete sets
/// that nothing is using if need be (each pushed to `evicted` once removed), and creates
/// its directory with its usage record: the lock of that directory is returned, held
/// until the set is complete. Nothing is evicted when the set would not fit anyway.
pub(super) fn reserve(
    ask: &Ask<'_>,
    caps: &KeepCaps,
    evicted: &mut Vec<Evicted>,
) -> Result<OwnedFd, ReviewError> {
    let _store_lock = lock_store(ask.store)?;
    let sets = held(ask.store);
    let total_used = sets.iter().fold(Usage::default(), |u, h| u.plus(h.usage));
    let owner_used = sets
        .iter()
        .filter(|h| h.owner == ask.owner)
        .fold(Usage::default(), |u, h| u.plus(h.usage));
    let mut own: Vec<&Held> = sets
        .iter()
        .filter(|h| h.owner == ask.owner && h.complete && h.run_id != ask.run_id)
        .collect();
    own.sort_by_key(|h| h.created_unix_ms);
    let (mut owner_left, mut total_left) = (owner_used, total_used);
    let mut chosen = Vec::new();
    let mut freed = Usage::default();
    for h in own {
        if over(caps, ask.need, owner_left, total_left).is_none() {
            break;
        }
        let dir = ask.store.join(&h.run_id);
        // In use (an apply, a discard) or gone: not evicted.
        let Ok(Some(lock)) = lock_dir(&dir, false) else {
            continue;
        };
        owner_left = owner_left.minus(h.usage);
        total_left = total_left.minus(h.usage);
        freed = freed.plus(h.usage);
        chosen.push((h, dir, lock));
    }
    if let Some((key, unit, cap, needed, _)) = over(caps, ask.need, owner_left, total_left) {
        let scope_used = match key.contains("per_owner") {
            true => owner_used,
            false => total_used,
        };
        let (used, own) = match unit {
            "bytes" => (scope_used.bytes, freed.bytes),
            _ => (scope_used.entries, freed.entries),
        };
        return Err(ReviewError::OverCap {
            run_id: ask.run_id.to_owned(),
            owner: ask.owner.to_owned(),
            key,
            unit,
            cap,
            needed,
            used,
            own,
        });
    }
    for (h, dir, _lock) in chosen {
        std::fs::remove_dir_all(&dir).map_err(io("evict", &dir))?;
        evicted.push(Evicted {
            run_id: h.run_id.clone(),
            created_unix_ms: h.created_unix_ms,
            bytes: h.usage.bytes,
            entries: h.usage.entries,
        });
    }
    let dir = ask.store.join(ask.run_id);
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(io("create", &dir))?;
    }
    // Waiting: a sweep may hold the new directory's lock for a moment (it spares a
    // young directory without a manifest, and holds nothing else meanwhile).
    let lock = match lock_dir(&dir, true) {
        Ok(Some(lock)) => lock,
        Ok(None) => {
            return Err(io("lock", &dir)(std::io::Error::from(
                std::io::ErrorKind::WouldBlock,
            )));
        }
        Err(e) => return Err(io("lock", &dir)(e)),
    };
    let record = Record {
        owner: ask.owner.to_owned(),
        created_unix_ms: ask.created_unix_ms,
        bytes: ask.need.bytes,
        entries: ask.need.entries,
    };
    let path = dir.join(USAGE_FILE);
    let text =
        serde_json::to_vec(&record).map_err(|e| io("encode", &path)(std::io::Error::other(e)))?;
    let written = {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .and_then(|mut f| f.write_all(&text))
    };
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(io("write", &path)(e));
    }
    Ok(lock)
}

#[cfg(test)]
#[path = "caps_tests.rs"]
mod tests;
