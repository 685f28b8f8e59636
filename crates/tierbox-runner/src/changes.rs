//! What a run changed in its workspace, read from the upper layer of the overlay the
//! sandbox saw the workspace through (review mode): the real workspace is the overlay's
//! read-only lower layer, and every write, deletion and rename of the run landed in the
//! upper layer, in overlayfs's own format:
//!
//! - a file or symlink in the upper layer was created or modified (copied up);
//! - a character device `0:0` is a *whiteout*: the path was deleted;
//! - a directory with the `overlay.opaque` attribute (`user.` in a user namespace,
//!   `trusted.` otherwise) hides everything the lower layer had beneath it;
//! - any other directory merges with the lower one.
//!
//! [`scan`] turns that into a [`ChangeSet`]: each added, modified, deleted or renamed path
//! with its size, mode and SHA-256, and flags on the changes a reviewer must not miss. It
//! reads only; applying or discarding the changes is for the caller.
//!
//! ```
//! let upper = tempfile::tempdir().unwrap();
//! let lower = tempfile::tempdir().unwrap();
//! std::fs::write(upper.path().join("new.txt"), "hello\n").unwrap();
//! let set = tierbox_runner::changes::scan(upper.path(), lower.path());
//! assert_eq!(set.changes.len(), 1);
//! assert_eq!(set.changes[0].kind, tierbox_runner::changes::ChangeKind::Added);
//! ```

use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

pub(crate) mod print;
pub use print::MAX_FINGERPRINT_DEPTH;

/// Most changes listed; the rest are only counted ([`ChangeSet::omitted`]). Bounds the
/// outcome and the attestation of a run that rewrote a whole tree.
pub const MAX_CHANGES: usize = 1_000;

/// Most entries of the upper layer looked at; a larger layer is reported incomplete.
/// Bounds the scan of a run that created millions of files.
pub const MAX_SCANNED_ENTRIES: usize = 200_000;

/// Deepest directory level scanned below the workspace.
pub const MAX_SCAN_DEPTH: usize = 64;

/// A file at least this large is flagged [`ChangeFlag::Large`] (bytes).
pub const LARGE_FILE_BYTES: u64 = 10 << 20;

/// What happened to a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// It did not exist and does now.
    Added,
    /// Its content, kind or mode changed.
    Modified,
    /// It existed and does not now (a directory: with everything beneath it).
    Deleted,
    /// A file moved here from `renamed_from`, unchanged.
    Renamed,
}

/// What a reviewer should look at twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChangeFlag {
    /// Inside a `.git` directory (hooks, config, `commondir`: what git runs or trusts).
    GitInternal,
    /// A new `.git` directory: a repository whose config and hooks the run wrote.
    NewGitDir,
    /// A file that can be executed and could not before (new, or given an `x` bit).
    NewExecutable,
    /// A symlink whose target resolves outside the workspace.
    SymlinkOutside,
    /// The setuid or setgid bit (never applied).
    SetuidSetgid,
    /// A device node, FIFO or socket (never applied).
    Special,
    /// At least [`LARGE_FILE_BYTES`].
    Large,
    /// The workspace's own entry at this path changed while the run was going on (after
    /// it started): the run may have seen either version, and applying would overwrite
    /// a change nobody reviewed. Never applied.
    ChangedDuringRun,
}

impl ChangeFlag {
    /// Every flag, in the order they are declared.
    pub const ALL: [Self; 8] = [
        Self::GitInternal,
        Self::NewGitDir,
        Self::NewExecutable,
        Self::SymlinkOutside,
        Self::SetuidSetgid,
        Self::Special,
        Self::Large,
        Self::ChangedDuringRun,
    ];

    /// The flag as the JSON spells it (`symlink_outside`, …).
    pub fn name(self) -> &'static str {
        match self {
            Self::GitInternal => "git_internal",
            Self::NewGitDir => "new_git_dir",
            Self::NewExecutable => "new_executable",
            Self::SymlinkOutside => "symlink_outside",
            Self::SetuidSetgid => "setuid_setgid",
            Self::Special => "special",
            Self::Large => "large",
            Self::ChangedDuringRun => "changed_during_run",
        }
    }

    /// Whether applying a change with this flag needs the reviewer's consent (the path
    /// named, or `include_flagged`; see [`crate::review::ChangeStore::apply`]): what the
    /// host's tools execute or trust later (anything in a `.git` directory, a new
    /// repository, a new executable), a symlink leaving the workspace, and what apply
    /// does not carry over as the run left it (a setuid or setgid bit is dropped; a
    /// device node, FIFO or socket is skipped), so the workspace would differ from what
    /// was reviewed.
    ///
    /// Not [`ChangeFlag::Large`]: size puts nothing at risk once the set is kept (the
    /// caps bound it), and the listing shows it. Not [`ChangeFlag::ChangedDuringRun`]:
    /// such a change is never applied, consent or not.
    ///
    /// ```
    /// use tierbox_runner::changes::ChangeFlag;
    ///
    /// assert!(ChangeFlag::SymlinkOutside.needs_consent());
    /// assert!(!ChangeFlag::Large.needs_consent());
    /// ```
    pub fn needs_consent(self) -> bool {
        match self {
            Self::GitInternal
            | Self::NewGitDir
            | Self::NewExecutable
            | Self::SymlinkOutside
            | Self::SetuidSetgid
            | Self::Special => true,
            Self::Large | Self::ChangedDuringRun => false,
        }
    }
}

/// One changed path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Change {
    /// The path, relative to the workspace.
    pub path: PathBuf,
    /// What happened to it.
    pub kind: ChangeKind,
    /// `file`, `dir`, `symlink` or `special`: what is there now (what was there, for a
    /// deletion).
    pub file_type: String,
    /// Size in bytes of a file now there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Permission bits now (`0o7777` of the mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
    /// Hex SHA-256 of a file's content now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// A symlink's target.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<PathBuf>,
    /// For [`ChangeKind::Renamed`]: where the file was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renamed_from: Option<PathBuf>,
    /// What the workspace had at this path when the change was read (for a rename: at
    /// `renamed_from`), as a fingerprint: `file:<sha256>`, `symlink:<target>`,
    /// `dir:<sha256 of the tree's listing>`, `special`; absent when there was nothing.
    /// Applying refuses a path whose workspace entry no longer matches it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// What a reviewer should look at twice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<ChangeFlag>,
}

/// Everything a run changed in its workspace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ChangeSet {
    /// The changes, by path (at most [`MAX_CHANGES`]).
    pub changes: Vec<Change>,
    /// Changes past [`MAX_CHANGES`], counted but not listed.
    pub omitted: u64,
    /// Bytes of file content the changes add or replace.
    pub bytes_written: u64,
    /// The upper layer was larger or deeper than a scan reads ([`MAX_SCANNED_ENTRIES`],
    /// [`MAX_SCAN_DEPTH`]): there may be changes not counted.
    pub incomplete: bool,
    /// Where the run kept this change set for review (not serialized): what
    /// [`ChangeSet::apply`] and [`ChangeSet::discard`] act on.
    #[serde(skip)]
    #[schemars(skip)]
    pub kept: Option<KeptAt>,
}

/// Where a change set is kept: a state directory and the run's id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptAt {
    /// The state directory of the run.
    pub state_dir: PathBuf,
    /// The run's id.
    pub run_id: String,
}

impl ChangeSet {
    /// Whether the run changed nothing.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty() && self.omitted == 0
    }

    /// Changes carrying `flag`.
    pub fn flagged(&self, flag: ChangeFlag) -> impl Iterator<Item = &Change> {
        self.changes.iter().filter(move |c| c.flags.contains(&flag))
    }
}

/// Reads the changes in `upper` (an overlay's upper layer) against `lower` (the
/// workspace it was mounted over), at most [`MAX_CHANGES`] of them listed. Unreadable
/// entries are skipped; nothing is written.
pub fn scan(upper: &Path, lower: &Path) -> ChangeSet {
    scan_all(upper, lower, None).bounded(MAX_CHANGES)
}

/// [`scan`] without the bound on listed changes (what applying needs), flagging
/// [`ChangeFlag::ChangedDuringRun`] on paths whose workspace entry changed (`ctime`) at
/// or after `since`, the run's start.
pub fn scan_all(upper: &Path, lower: &Path, since: Option<std::time::SystemTime>) -> ChangeSet {
    let since = since.map(|t| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX))
    });
    let mut scan = Scan {
        upper,
        lower,
        since,
        found: Vec::new(),
        entries: 0,
        incomplete: false,
    };
    scan.dir(Path::new(""), 0, false, true);
    let mut found = std::mem::take(&mut scan.found);
    detect_renames(&mut found, lower);
    found.sort_by(|a, b| {
        a.path
            .cmp(&b.path)
            .then(a.kind.order().cmp(&b.kind.order()))
    });
    let bytes_written = found
        .iter()
        .filter(|c| c.kind != ChangeKind::Deleted && c.kind != ChangeKind::Renamed)
        .filter_map(|c| c.size)
        .sum();
    ChangeSet {
        changes: found,
        omitted: 0,
        bytes_written,
        incomplete: scan.incomplete,
        kept: None,
    }
}

impl ChangeKind {
    /// Order of two changes at one path: a deletion before what replaces it.
    fn order(self) -> u8 {
        match self {
            Self::Deleted => 0,
            _ => 1,
        }
    }
}

impl ChangeSet {
    /// At most `max` changes listed, the rest counted in [`ChangeSet::omitted`].
    pub fn bounded(mut self, max: usize) -> Self {
        let over = self.changes.len().saturating_sub(max) as u64;
        self.changes.truncate(max);
        self.omitted += over;
        self
    }
}

struct Scan<'a> {
    upper: &'a Path,
    lower: &'a Path,
    /// The run's start, in nanoseconds since the epoch.
    since: Option<i128>,
    found: Vec<Change>,
    entries: usize,
    incomplete: bool,
}

impl Scan<'_> {
    /// Scans the upper directory `rel`; `hidden` when an opaque directory at or above it
    /// hides the lower layer's entries that the upper layer does not list.
    ///
    /// `lower_dir`: the workspace has a real directory at `rel` (every component of it a
    /// directory, none a symlink). Below anything else the workspace has nothing the
    /// overlay shows, and nothing of it is read: a workspace symlink `x -> /root/.ssh`
    /// replaced by a directory in the run must not make the scan list or hash host files.
    fn dir(&mut self, rel: &Path, depth: usize, hidden: bool, lower_dir: bool) {
        if depth > MAX_SCAN_DEPTH {
            self.incomplete = true;
            return;
        }
        let Ok(read) = std::fs::read_dir(self.upper.join(rel)) else {
            return;
        };
        for entry in read.flatten() {
            self.entries += 1;
            if self.entries > MAX_SCANNED_ENTRIES {
                self.incomplete = true;
                return;
            }
            let rel = rel.join(entry.file_name());
            let up = self.upper.join(&rel);
            let Ok(meta) = std::fs::symlink_metadata(&up) else {
                continue;
            };
            // What the workspace had at this path before the run (an opaque directory
            // above hides it from the sandbox, not from this comparison).
            let below = match lower_dir {
                true => std::fs::symlink_metadata(self.lower.join(&rel)).ok(),
                false => None,
            };
            let ft = meta.file_type();
            if ft.is_char_device() && meta.rdev() == 0 {
                // A whiteout: deleted (when the lower layer had it at all).
                if let Some(below) = below {
                    let change = self.deleted(&rel, &below);
                    self.found.push(change);
                }
                continue;
            }
            if ft.is_dir() {
                let opaque = is_opaque(&up);
                match &below {
                    Some(b) if b.is_dir() => {
                        if opaque || hidden {
                            self.hidden_below(&rel, &up);
                        }
                        if b.mode() & 0o7777 != meta.mode() & 0o7777 {
                            let change = self.present(&rel, &meta, ChangeKind::Modified, Some(b));
                            self.found.push(change);
                        }
                    }
                    Some(b) => {
                        // A file replaced by a directory.
                        let change = self.deleted(&rel, b);
                        self.found.push(change);
                        let change = self.present(&rel, &meta, ChangeKind::Added, None);
                        self.found.push(change);
                    }
                    None => {
                        let change = self.present(&rel, &meta, ChangeKind::Added, None);
                        self.found.push(change);
                    }
                }
                let below_is_dir = below.as_ref().is_some_and(std::fs::Metadata::is_dir);
                self.dir(&rel, depth + 1, hidden || opaque, below_is_dir);
                continue;
            }
            let kind = match &below {
                None => ChangeKind::Added,
                Some(b) if b.is_dir() => {
                    // A directory replaced by a file or symlink.
                    let change = self.deleted(&rel, b);
                    self.found.push(change);
                    ChangeKind::Added
                }
                Some(b) if unchanged(&up, &meta, &self.lower.join(&rel), b) => continue,
                Some(_) => ChangeKind::Modified,
            };
            let before = below.as_ref().filter(|b| !b.is_dir());
            let change = self.present(&rel, &meta, kind, before);
            self.found.push(change);
        }
    }

    /// The lower entries of `rel` that an opaque upper directory hides: each is deleted
    /// unless the upper directory has an entry of that name (reported on its own).
    fn hidden_below(&mut self, rel: &Path, up: &Path) {
        let Ok(read) = std::fs::read_dir(self.lower.join(rel)) else {
            return;
        };
        for entry in read.flatten() {
            if std::fs::symlink_metadata(up.join(entry.file_name())).is_ok() {
                continue;
            }
            if let Ok(meta) = std::fs::symlink_metadata(entry.path()) {
                let change = self.deleted(&rel.join(entry.file_name()), &meta);
                self.found.push(change);
            }
        }
    }

    /// A change for a path present in the upper layer; `before` is what the lower layer
    /// had there, when it had the same kind of entry.
    fn present(
        &self,
        rel: &Path,
        meta: &std::fs::Metadata,
        kind: ChangeKind,
        before: Option<&std::fs::Metadata>,
    ) -> Change {
        let up = self.upper.join(rel);
        let ft = meta.file_type();
        let mode = meta.mode() & 0o7777;
        let mut flags = path_flags(rel, kind);
        let (file_type, size, sha256, target) = if ft.is_file() {
            let size = meta.len();
            if size >= LARGE_FILE_BYTES {
                flags.push(ChangeFlag::Large);
            }
            let was_executable = before.is_some_and(|b| b.mode() & 0o111 != 0);
            if mode & 0o111 != 0 && !was_executable {
                flags.push(ChangeFlag::NewExecutable);
            }
            ("file", Some(size), sha256_of(&up), None)
        } else if ft.is_symlink() {
            let target = std::fs::read_link(&up).ok();
            if target.as_deref().is_some_and(|t| escapes(rel, t)) {
                flags.push(ChangeFlag::SymlinkOutside);
            }
            ("symlink", None, None, target)
        } else if ft.is_dir() {
            ("dir", None, None, None)
        } else {
            flags.push(ChangeFlag::Special);
            ("special", None, None, None)
        };
        if mode & 0o6000 != 0 && !ft.is_symlink() {
            flags.push(ChangeFlag::SetuidSetgid);
        }
        let before = match kind {
            ChangeKind::Modified => {
                if let Some(b) = before {
                    self.during_run(b, &mut flags);
                }
                fingerprint(&self.lower.join(rel))
            }
            _ => None,
        };
        Change {
            path: rel.to_path_buf(),
            kind,
            file_type: file_type.to_owned(),
            size,
            mode: (!ft.is_symlink()).then_some(mode),
            sha256,
            target,
            renamed_from: None,
            before,
            flags,
        }
    }

    /// A deletion of `rel`, which the workspace had as `was`.
    fn deleted(&self, rel: &Path, was: &std::fs::Metadata) -> Change {
        let mut flags = path_flags(rel, ChangeKind::Deleted);
        self.during_run(was, &mut flags);
        Change {
            path: rel.to_path_buf(),
            kind: ChangeKind::Deleted,
            file_type: type_name(was.file_type()).to_owned(),
            size: was.is_file().then_some(was.len()),
            mode: None,
            sha256: None,
            target: None,
            renamed_from: None,
            before: fingerprint(&self.lower.join(rel)),
            flags,
        }
    }

    /// Flags [`ChangeFlag::ChangedDuringRun`] when the workspace entry `was` changed at
    /// or after the run's start.
    fn during_run(&self, was: &std::fs::Metadata, flags: &mut Vec<ChangeFlag>) {
        let ctime = i128::from(was.ctime()) * 1_000_000_000 + i128::from(was.ctime_nsec());
        if self.since.is_some_and(|since| ctime >= since) {
            flags.push(ChangeFlag::ChangedDuringRun);
        }
    }
}

fn type_name(ft: std::fs::FileType) -> &'static str {
    if ft.is_dir() {
        "dir"
    } else if ft.is_symlink() {
        "symlink"
    } else if ft.is_file() {
        "file"
    } else {
        "special"
    }
}

/// Most entries a directory fingerprint lists; a larger tree gets a fingerprint that
/// matches nothing (`dir:too-large`), so applying its deletion is refused rather than
/// unchecked.
pub const MAX_FINGERPRINT_ENTRIES: usize = 100_000;

/// What is at `path` now, without following a final symlink: `file:<sha256>`,
/// `symlink:<target>`, `dir:<sha256 of every entry's relative path and fingerprint,
/// sorted>`, `special`; `None` when nothing is there. Compared before applying a change
/// ([`Change::before`]). Below `path` nothing is followed: every entry is read through a
/// descriptor of the directory it was listed in ([`print`]).
pub fn fingerprint(path: &Path) -> Option<String> {
    let (parent, name) = match path.file_name() {
        Some(name) => (
            path.parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new(".")),
            name,
        ),
        None => (path, std::ffi::OsStr::new(".")),
    };
    let dir = rustix::fs::open(
        parent,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()?;
    print::fingerprint_at(std::os::fd::AsFd::as_fd(&dir), name).map(|seen| seen.print)
}

/// Flags that follow from where a path is: inside a `.git` directory, or a new one.
fn path_flags(rel: &Path, kind: ChangeKind) -> Vec<ChangeFlag> {
    let mut flags = Vec::new();
    let mut at = PathBuf::new();
    for part in rel.components() {
        at.push(part);
        if part.as_os_str() == ".git" {
            if at == rel && kind == ChangeKind::Added {
                flags.push(ChangeFlag::NewGitDir);
            } else {
                flags.push(ChangeFlag::GitInternal);
            }
            break;
        }
    }
    flags
}

/// Whether the upper entry is the lower one unchanged (a copy-up without a change: a
/// file opened for writing and closed, a `chown` to the same owner).
fn unchanged(up: &Path, meta: &std::fs::Metadata, low: &Path, below: &std::fs::Metadata) -> bool {
    let (a, b) = (meta.file_type(), below.file_type());
    if a.is_symlink() && b.is_symlink() {
        return std::fs::read_link(up).ok() == std::fs::read_link(low).ok();
    }
    a.is_file()
        && b.is_file()
        && meta.len() == below.len()
        && meta.mode() & 0o7777 == below.mode() & 0o7777
        && sha256_of(up) == sha256_of(low)
}

/// Whether a symlink at `rel` (relative to the workspace) with `target` points outside
/// the workspace: an absolute target, or one whose `..` climb above the workspace root.
fn escapes(rel: &Path, target: &Path) -> bool {
    if target.is_absolute() {
        return true;
    }
    let mut depth: i64 = rel.parent().map_or(0, |p| p.components().count() as i64);
    for part in target.components() {
        match part {
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            _ => {}
        }
        if depth < 0 {
            return true;
        }
    }
    false
}

fn is_opaque(dir: &Path) -> bool {
    ["user.overlay.opaque", "trusted.overlay.opaque"]
        .iter()
        .any(|name| {
            let mut value = [0u8; 4];
            matches!(rustix::fs::lgetxattr(dir, *name, &mut value), Ok(n) if value[..n] == *b"y")
        })
}

fn sha256_of(path: &Path) -> Option<String> {
    print::hash(std::fs::File::open(path).ok()?.into())
}

/// Pairs a deleted file with an added one of the same content: a rename.
fn detect_renames(found: &mut Vec<Change>, lower: &Path) {
    let mut added: BTreeMap<(u64, String), usize> = BTreeMap::new();
    for (i, c) in found.iter().enumerate() {
        if c.kind == ChangeKind::Added
            && let (Some(size), Some(sha)) = (c.size, &c.sha256)
        {
            added.insert((size, sha.clone()), i);
        }
    }
    if added.is_empty() {
        return;
    }
    let mut renamed = Vec::new();
    for (d, c) in found.iter().enumerate() {
        if c.kind != ChangeKind::Deleted || c.file_type != "file" {
            continue;
        }
        let Some(size) = c.size else { continue };
        if !added.keys().any(|(s, _)| *s == size) {
            continue;
        }
        let Some(sha) = sha256_of(&lower.join(&c.path)) else {
            continue;
        };
        if let Some(a) = added.remove(&(size, sha)) {
            renamed.push((d, a));
        }
    }
    let mut drop = Vec::new();
    for (d, a) in renamed {
        let from = found[d].path.clone();
        let before = found[d].before.clone();
        let mut flags = std::mem::take(&mut found[d].flags);
        let to = &mut found[a];
        to.kind = ChangeKind::Renamed;
        to.renamed_from = Some(from);
        to.before = before;
        flags.retain(|f| *f == ChangeFlag::ChangedDuringRun);
        to.flags.extend(flags);
        drop.push(d);
    }
    drop.sort_unstable();
    for d in drop.into_iter().rev() {
        found.remove(d);
    }
}

#[cfg(test)]
#[path = "changes_tests.rs"]
mod tests;
