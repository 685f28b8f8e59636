//! Applying a kept change set to its workspace, as root if need be, while the run's
//! processes, the workspace's owner or anyone else with write access to it may be
//! renaming, swapping and linking entries underneath.
//!
//! # The invariant
//!
//! **Nothing is resolved by a name that anyone but Tierbox can change, and no mode,
//! owner or content is changed through a name.** Concretely:
//!
//! - The store opens two roots by path, once: the workspace (which the caller chose) and
//!   the change set's kept content (in Tierbox's own state directory). Everything else
//!   is reached from a held descriptor with `openat2(O_NOFOLLOW, RESOLVE_BENEATH |
//!   RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`: no symlink is followed, a `..` or an
//!   absolute name cannot leave the directory, and a symlink the run made is applied as a
//!   symlink, never read through.
//! - Verification records, for every path it checks, the fingerprint of the entry *and
//!   its inode* (and its parent directory's inode). Later steps compare inodes, not names.
//! - Modes and owners are only ever set with `fchmod`/`fchown` on a descriptor of the
//!   entry itself (for a symlink, an `O_PATH` descriptor with `AT_EMPTY_PATH`): a
//!   directory is opened with `O_DIRECTORY | O_NOFOLLOW`, its inode compared with the one
//!   verified, and only then changed. A directory swapped for a symlink or a hard link to
//!   another file fails the open or the comparison; nothing outside the directory is
//!   touched.
//! - The staging directory is made by Tierbox in the workspace root (on its mount, so
//!   renames never cross one): `mkdirat` fails when the name exists, then the directory
//!   is opened, and its owner (Tierbox's), mode (0700) and emptiness checked; it is held
//!   by its descriptor from then on, emptied through descriptors and removed by inode.
//! - An entry that is replaced or deleted is first renamed into the staging directory and
//!   checked *there* by inode and fingerprint: a swap between verification and the
//!   rename is found, the entry put back and the apply refused. A non-directory is never
//!   changed in place, so a hard link to it elsewhere keeps what it had.
//! - New files, symlinks and directories are made inside the staging directory, given
//!   their owner and mode there through their descriptors, and renamed into place with
//!   `RENAME_NOREPLACE` (never over an entry that appeared meanwhile).
//! - Everything that can be refused is refused before anything visible changes: the
//!   first phase stages content, opens and checks the directories whose mode changes, and
//!   moves the replaced entries aside; the second places new entries and sets modes
//!   through the descriptors held. Undoing (on any failure) uses the same inode checks in
//!   reverse; what cannot be put back stays in the staging directory, which is then kept
//!   and named in the error.
//!
//! The test `the_apply_code_resolves_no_names` fails if this file (outside its tests)
//! calls `std::fs` by path or makes an `*at` call with `AtFlags::empty()` (a call that
//! would follow a final symlink) other than `unlinkat`, which never follows one.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Gid, Mode, OFlags, RenameFlags, Uid};

use super::{Applied, ReviewError, Skipped, plain, rio};
use crate::changes::print::{BENEATH, Ident, Seen, fingerprint_at, names, open_beneath};
use crate::changes::{Change, ChangeFlag, ChangeKind};

/// `unlinkat` flags for a name that is not a directory: `unlinkat` removes the name and
/// never follows a symlink.
const UNLINK_NAME: AtFlags = AtFlags::empty();

/// Deepest level of the staging directory emptied when an apply ends; deeper entries
/// (only a moved-aside directory can hold them) are left and the directory named.
pub const MAX_STAGING_DEPTH: usize = 512;

/// Mode of the staging directory.
const STAGING_MODE: u32 = 0o700;

/// What an apply did that undoing must reverse, newest last.
enum Done {
    /// The entry at `rel` (inode `ident`) was renamed to `backup` in the staging
    /// directory.
    MovedAside {
        rel: PathBuf,
        backup: String,
        ident: Ident,
    },
    /// A new entry (inode `ident`) was renamed from `staged` into place at `rel`.
    Placed {
        rel: PathBuf,
        staged: String,
        ident: Ident,
    },
    /// The directory `fd` had its mode bits `old` replaced.
    Chmod { fd: OwnedFd, old: u32 },
}

/// A directory whose mode changes, opened and checked in the first phase.
struct ModeChange {
    rel: PathBuf,
    fd: OwnedFd,
    mode: u32,
}

/// A new entry made in the staging directory, waiting to be placed.
struct Staged {
    name: String,
    ident: Ident,
}

/// An apply in progress.
pub(super) struct Apply<'a> {
    /// The workspace's path, for messages only.
    workspace: &'a Path,
    /// `O_PATH` descriptor of the workspace root.
    root: OwnedFd,
    /// `O_PATH` descriptor of the change set's kept content.
    files: OwnedFd,
    staging_name: String,
    /// The staging directory, open for reading, with its inode.
    stage: Option<(OwnedFd, Ident)>,
    /// The workspace root's owner: new entries get it.
    owner: (u32, u32),
    /// Who Tierbox runs as: the staging directory's owner.
    euid: u32,
    /// What verification found at each path it checked (`None`: nothing).
    seen: BTreeMap<PathBuf, Option<Seen>>,
    /// The inode of each directory a path was reached through (verified, or placed).
    parents: BTreeMap<PathBuf, Ident>,
    done: Vec<Done>,
    next: usize,
}

impl<'a> Apply<'a> {
    /// `root` and `files`: `O_PATH` descriptors of the workspace root and of the kept
    /// content (opened by the store).
    pub(super) fn new(
        workspace: &'a Path,
        root: OwnedFd,
        files: OwnedFd,
        run_id: &str,
    ) -> Result<Self, ReviewError> {
        let st = rustix::fs::fstat(&root).map_err(rio("stat the workspace", workspace))?;
        Ok(Self {
            workspace,
            root,
            files,
            staging_name: format!("{}{run_id}", super::STAGING_PREFIX),
            stage: None,
            owner: (st.st_uid, st.st_gid),
            euid: rustix::process::geteuid().as_raw(),
            seen: BTreeMap::new(),
            parents: BTreeMap::new(),
            done: Vec::new(),
            next: 0,
        })
    }

    /// Applies the changes `selected` of `changes`, all or nothing.
    pub(super) fn run(
        mut self,
        changes: &[Change],
        selected: &BTreeSet<usize>,
    ) -> Result<Applied, ReviewError> {
        self.verify(changes, selected)?;
        let result = self
            .make_stage()
            .and_then(|()| self.commit(changes, selected));
        let mut kept_stage = false;
        if let Err(cause) = result {
            let left = self.roll_back();
            if !left.is_empty() {
                return Err(ReviewError::RollbackIncomplete {
                    cause: Box::new(cause),
                    staging: self.workspace.join(&self.staging_name),
                    left,
                });
            }
            self.remove_stage();
            return Err(cause);
        }
        if !self.remove_stage() {
            kept_stage = true;
        }
        result.map(|mut applied| {
            if kept_stage {
                applied.staging_left = Some(self.workspace.join(&self.staging_name));
            }
            applied
        })
    }

    fn fresh_name(&mut self, kind: &str) -> String {
        self.next += 1;
        format!("{kind}{}", self.next)
    }

    fn stage_fd(&self) -> BorrowedFd<'_> {
        match &self.stage {
            Some((fd, _)) => fd.as_fd(),
            None => self.root.as_fd(),
        }
    }

    fn name(rel: &Path) -> &OsStr {
        rel.file_name().unwrap_or(rel.as_os_str())
    }

    fn parent_rel(rel: &Path) -> &Path {
        rel.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
    }

    /// The directory containing `rel`, reached from the root without following any
    /// symlink; `None` when it does not exist (yet). When the directory was verified or
    /// placed before, it must still be the same inode.
    fn parent(&self, rel: &Path) -> Result<Option<OwnedFd>, ReviewError> {
        let parent = Self::parent_rel(rel);
        let fd = match rustix::fs::openat2(
            &self.root,
            parent,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            BENEATH,
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::XDEV | rustix::io::Errno::NOTDIR) => {
                return Err(ReviewError::UnsafePath {
                    path: rel.to_path_buf(),
                });
            }
            Err(e) => return Err(rio("open the parent of", rel)(e)),
        };
        if let Some(want) = self.parents.get(parent) {
            let st = rustix::fs::fstat(&fd).map_err(rio("stat the parent of", rel))?;
            if Ident::of(&st) != *want {
                return Err(swapped(parent));
            }
        }
        Ok(Some(fd))
    }

    fn existing_parent(&self, rel: &Path) -> Result<OwnedFd, ReviewError> {
        self.parent(rel)?.ok_or_else(|| ReviewError::Io {
            what: "find the parent directory of",
            path: rel.to_path_buf(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        })
    }

    /// What is at `rel` now (`None`: nothing), remembering its parent's inode.
    fn look(&mut self, rel: &Path) -> Result<Option<Seen>, ReviewError> {
        let Some(parent) = self.parent(rel)? else {
            return Ok(None);
        };
        let st = rustix::fs::fstat(&parent).map_err(rio("stat the parent of", rel))?;
        self.parents
            .insert(Self::parent_rel(rel).to_path_buf(), Ident::of(&st));
        Ok(fingerprint_at(parent.as_fd(), Self::name(rel)))
    }

    /// Checks every selected path against what the change was made from, recording
    /// what was found there.
    fn verify(
        &mut self,
        changes: &[Change],
        selected: &BTreeSet<usize>,
    ) -> Result<(), ReviewError> {
        // What each path must hold now: the first change at a path decides (a deletion
        // before what replaces it); a rename's target must be free and its source as it was.
        let mut expected: BTreeMap<&Path, Option<&str>> = BTreeMap::new();
        for &i in selected {
            let c = &changes[i];
            if !plain(&c.path) || c.renamed_from.as_deref().is_some_and(|f| !plain(f)) {
                return Err(ReviewError::UnsafePath {
                    path: c.path.clone(),
                });
            }
            if c.flags.contains(&ChangeFlag::ChangedDuringRun) {
                return Err(ReviewError::ChangedDuringRun {
                    path: c.path.clone(),
                });
            }
            match (c.kind, &c.renamed_from) {
                (ChangeKind::Renamed, Some(from)) => {
                    expected.entry(from).or_insert(c.before.as_deref());
                    expected.entry(&c.path).or_insert(None);
                }
                (ChangeKind::Added, _) => {
                    expected.entry(&c.path).or_insert(None);
                }
                _ => {
                    expected.entry(&c.path).or_insert(c.before.as_deref());
                }
            }
        }
        for (path, want) in expected {
            let found = self.look(path)?;
            if found.as_ref().map(|s| s.print.as_str()) != want {
                return Err(ReviewError::Conflict {
                    path: path.to_path_buf(),
                    expected: want.unwrap_or("nothing").to_owned(),
                    found: found.map_or_else(|| "nothing".to_owned(), |s| s.print),
                });
            }
            self.seen.insert(path.to_path_buf(), found);
        }
        Ok(())
    }

    /// Makes the staging directory in the workspace root and checks that the directory
    /// then opened is the one made: Tierbox's, 0700, empty.
    fn make_stage(&mut self) -> Result<(), ReviewError> {
        let path = self.workspace.join(&self.staging_name);
        rustix::fs::mkdirat(
            &self.root,
            self.staging_name.as_str(),
            Mode::from_raw_mode(STAGING_MODE),
        )
        .map_err(rio("create the staging directory", &path))?;
        let fd = open_beneath(
            self.root.as_fd(),
            OsStr::new(&self.staging_name),
            OFlags::RDONLY | OFlags::DIRECTORY,
        )
        .ok_or_else(|| ReviewError::UnsafePath { path: path.clone() })?;
        let st = rustix::fs::fstat(&fd).map_err(rio("stat the staging directory", &path))?;
        let empty = names(fd.as_fd()).is_some_and(|n| n.is_empty());
        if st.st_uid != self.euid || st.st_mode & 0o7777 != STAGING_MODE || !empty {
            return Err(ReviewError::UnsafePath { path });
        }
        self.stage = Some((fd, Ident::of(&st)));
        Ok(())
    }

    fn commit(
        &mut self,
        changes: &[Change],
        selected: &BTreeSet<usize>,
    ) -> Result<Applied, ReviewError> {
        let mut applied = Applied::default();
        // Phase 1: everything that can be refused. Content is staged first, so a failure
        // to stage (a full disk) changes nothing.
        let mut staged: BTreeMap<usize, Staged> = BTreeMap::new();
        for &i in selected {
            let c = &changes[i];
            if c.kind == ChangeKind::Deleted {
                continue;
            }
            match (c.kind, c.file_type.as_str()) {
                (_, "file") => {
                    let owner = self.owner_for(c);
                    let (s, dropped) = self.stage_file(c, owner)?;
                    if dropped {
                        applied.bits_dropped.push(c.path.clone());
                    }
                    staged.insert(i, s);
                }
                (_, "symlink") => {
                    let owner = self.owner_for(c);
                    staged.insert(i, self.stage_symlink(c, owner)?);
                }
                (ChangeKind::Added, "dir") => {
                    staged.insert(i, self.stage_dir(c)?);
                }
                (_, "special") => applied.skipped.push(Skipped {
                    path: c.path.clone(),
                    reason: "device nodes, FIFOs and sockets are never applied".to_owned(),
                }),
                _ => {}
            }
        }
        let mut modes = Vec::new();
        for &i in selected {
            let c = &changes[i];
            match (c.kind, c.file_type.as_str()) {
                (_, "special") => {}
                (ChangeKind::Deleted, _) => self.move_aside(&c.path)?,
                (ChangeKind::Modified, "dir") => modes.push(self.open_dir_for_mode(c)?),
                (ChangeKind::Renamed, _) => {
                    if let Some(from) = &c.renamed_from {
                        self.move_aside(from)?;
                    }
                }
                (ChangeKind::Modified, _) => self.move_aside(&c.path)?,
                _ => {}
            }
        }
        // Phase 2: new entries into place, new modes through the descriptors held.
        let mut modes = modes.into_iter().peekable();
        for &i in selected {
            let c = &changes[i];
            if c.file_type == "special" {
                continue;
            }
            if let Some(s) = staged.remove(&i) {
                self.place(s, &c.path, c.file_type == "dir")?;
            } else if c.kind == ChangeKind::Modified
                && c.file_type == "dir"
                && let Some(m) = modes.next_if(|m| m.rel == c.path)
            {
                self.set_mode(m)?;
            }
            applied.applied.push(c.path.clone());
        }
        Ok(applied)
    }

    /// The owner a new or replacing entry gets: the replaced entry's (as verified),
    /// else the workspace root's.
    fn owner_for(&self, c: &Change) -> (u32, u32) {
        let replaced = match (c.kind, &c.renamed_from) {
            (ChangeKind::Renamed, Some(from)) => from,
            _ => &c.path,
        };
        match self.seen.get(replaced) {
            Some(Some(seen)) => seen.owner,
            _ => self.owner,
        }
    }

    /// The kept content of `rel`, opened with `flags` from the held content root.
    fn open_kept(&self, rel: &Path, flags: OFlags) -> Result<OwnedFd, ReviewError> {
        rustix::fs::openat2(
            &self.files,
            rel,
            flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            BENEATH,
        )
        .map_err(rio("open the kept content of", rel))
    }

    /// Writes the new content of `c` into the staging directory, owned by `owner`, with
    /// permission bits only; returns it and whether setuid/setgid bits were dropped.
    fn stage_file(&mut self, c: &Change, owner: (u32, u32)) -> Result<(Staged, bool), ReviewError> {
        let name = self.fresh_name("n");
        let src = self.open_kept(&c.path, OFlags::RDONLY | OFlags::NONBLOCK)?;
        let st = rustix::fs::fstat(&src).map_err(rio("stat the kept content of", &c.path))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(ReviewError::UnsafePath {
                path: c.path.clone(),
            });
        }
        let mode = c.mode.unwrap_or(0o644);
        let fd = rustix::fs::openat(
            self.stage_fd(),
            name.as_str(),
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(rio("stage", &c.path))?;
        let mut dst = File::from(fd);
        std::io::copy(&mut File::from(src), &mut dst).map_err(super::io("stage", &c.path))?;
        rustix::fs::fchown(
            &dst,
            Some(Uid::from_raw(owner.0)),
            Some(Gid::from_raw(owner.1)),
        )
        .map_err(rio("chown", &c.path))?;
        rustix::fs::fchmod(&dst, Mode::from_raw_mode(mode & 0o777))
            .map_err(rio("chmod", &c.path))?;
        dst.sync_all().map_err(super::io("sync", &c.path))?;
        let st = rustix::fs::fstat(&dst).map_err(rio("stat", &c.path))?;
        Ok((
            Staged {
                name,
                ident: Ident::of(&st),
            },
            mode & 0o6000 != 0,
        ))
    }

    /// Makes the symlink of `c` in the staging directory, owned by `owner`.
    fn stage_symlink(&mut self, c: &Change, owner: (u32, u32)) -> Result<Staged, ReviewError> {
        let name = self.fresh_name("n");
        let kept = self.open_kept(&c.path, OFlags::PATH)?;
        let target = rustix::fs::readlinkat(&kept, "", Vec::new())
            .map_err(rio("read the kept link", &c.path))?;
        rustix::fs::symlinkat(target.as_c_str(), self.stage_fd(), name.as_str())
            .map_err(rio("stage", &c.path))?;
        let fd = self.open_staged(&name, OFlags::PATH, FileType::Symlink, &c.path)?;
        rustix::fs::chownat(
            &fd,
            "",
            Some(Uid::from_raw(owner.0)),
            Some(Gid::from_raw(owner.1)),
            AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(rio("chown", &c.path))?;
        let st = rustix::fs::fstat(&fd).map_err(rio("stat", &c.path))?;
        Ok(Staged {
            name,
            ident: Ident::of(&st),
        })
    }

    /// Makes the new directory of `c` in the staging directory (the workspace root's
    /// owner, permission bits only).
    fn stage_dir(&mut self, c: &Change) -> Result<Staged, ReviewError> {
        let name = self.fresh_name("n");
        rustix::fs::mkdirat(self.stage_fd(), name.as_str(), Mode::from_raw_mode(0o700))
            .map_err(rio("create", &c.path))?;
        let fd = self.open_staged(
            &name,
            OFlags::RDONLY | OFlags::DIRECTORY,
            FileType::Directory,
            &c.path,
        )?;
        let (uid, gid) = self.owner;
        rustix::fs::fchown(&fd, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))
            .map_err(rio("chown", &c.path))?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(c.mode.unwrap_or(0o755) & 0o777))
            .map_err(rio("chmod", &c.path))?;
        let st = rustix::fs::fstat(&fd).map_err(rio("stat", &c.path))?;
        Ok(Staged {
            name,
            ident: Ident::of(&st),
        })
    }

    /// The entry `name` Tierbox just made in the staging directory, opened with `flags`:
    /// of type `want` and Tierbox's.
    fn open_staged(
        &self,
        name: &str,
        flags: OFlags,
        want: FileType,
        rel: &Path,
    ) -> Result<OwnedFd, ReviewError> {
        let fd = open_beneath(self.stage_fd(), OsStr::new(name), flags).ok_or_else(|| {
            ReviewError::UnsafePath {
                path: rel.to_path_buf(),
            }
        })?;
        let st = rustix::fs::fstat(&fd).map_err(rio("stat", rel))?;
        if FileType::from_raw_mode(st.st_mode) != want || st.st_uid != self.euid {
            return Err(swapped(rel));
        }
        Ok(fd)
    }

    /// Renames the entry at `rel` into the staging directory and checks that it is what
    /// verification found there: the same inode, the same fingerprint.
    fn move_aside(&mut self, rel: &Path) -> Result<(), ReviewError> {
        let Some(Some(seen)) = self.seen.get(rel).cloned() else {
            return Err(swapped(rel));
        };
        let parent = self.existing_parent(rel)?;
        let backup = self.fresh_name("b");
        rustix::fs::renameat_with(
            &parent,
            Self::name(rel),
            self.stage_fd(),
            backup.as_str(),
            RenameFlags::NOREPLACE,
        )
        .map_err(rio("move aside", rel))?;
        let now = fingerprint_at(self.stage_fd(), OsStr::new(&backup));
        self.done.push(Done::MovedAside {
            rel: rel.to_path_buf(),
            backup,
            ident: now.as_ref().map_or(seen.ident, |n| n.ident),
        });
        match now {
            Some(now) if now.ident == seen.ident && now.print == seen.print => Ok(()),
            Some(now) if now.ident == seen.ident => Err(ReviewError::Conflict {
                path: rel.to_path_buf(),
                expected: seen.print,
                found: now.print,
            }),
            _ => Err(swapped(rel)),
        }
    }

    /// Opens the directory of `c` whose mode changes and checks that it is the one
    /// verified.
    fn open_dir_for_mode(&self, c: &Change) -> Result<ModeChange, ReviewError> {
        let Some(Some(seen)) = self.seen.get(&c.path) else {
            return Err(swapped(&c.path));
        };
        let parent = self.existing_parent(&c.path)?;
        let fd = open_beneath(
            parent.as_fd(),
            Self::name(&c.path),
            OFlags::RDONLY | OFlags::DIRECTORY,
        )
        .ok_or_else(|| swapped(&c.path))?;
        let st = rustix::fs::fstat(&fd).map_err(rio("stat", &c.path))?;
        if Ident::of(&st) != seen.ident || !seen.is_directory() {
            return Err(swapped(&c.path));
        }
        Ok(ModeChange {
            rel: c.path.clone(),
            fd,
            mode: c.mode.unwrap_or(0o755) & 0o1777,
        })
    }

    /// Gives a directory opened in the first phase its new mode, remembering the old one.
    fn set_mode(&mut self, m: ModeChange) -> Result<(), ReviewError> {
        let st = rustix::fs::fstat(&m.fd).map_err(rio("stat", &m.rel))?;
        rustix::fs::fchmod(&m.fd, Mode::from_raw_mode(m.mode)).map_err(rio("chmod", &m.rel))?;
        self.done.push(Done::Chmod {
            fd: m.fd,
            old: st.st_mode & 0o7777,
        });
        Ok(())
    }

    /// Renames a staged entry into place at `rel`, never over an existing one.
    fn place(&mut self, s: Staged, rel: &Path, is_dir: bool) -> Result<(), ReviewError> {
        let parent = self.existing_parent(rel)?;
        let st = rustix::fs::statat(self.stage_fd(), s.name.as_str(), AtFlags::SYMLINK_NOFOLLOW)
            .map_err(rio("stat the staged", rel))?;
        if Ident::of(&st) != s.ident {
            return Err(swapped(rel));
        }
        rustix::fs::renameat_with(
            self.stage_fd(),
            s.name.as_str(),
            &parent,
            Self::name(rel),
            RenameFlags::NOREPLACE,
        )
        .map_err(rio("place", rel))?;
        if is_dir {
            self.parents.insert(rel.to_path_buf(), s.ident);
        }
        self.done.push(Done::Placed {
            rel: rel.to_path_buf(),
            staged: s.name,
            ident: s.ident,
        });
        Ok(())
    }

    /// Undoes every step taken, newest first; returns what could not be undone.
    fn roll_back(&mut self) -> Vec<String> {
        let mut left = Vec::new();
        while let Some(step) = self.done.pop() {
            let undone = match &step {
                Done::Chmod { fd, old } => {
                    rustix::fs::fchmod(fd, Mode::from_raw_mode(*old)).map_err(|e| e.to_string())
                }
                Done::MovedAside { rel, backup, ident } => {
                    self.undo_move(backup, rel, *ident, false)
                }
                Done::Placed { rel, staged, ident } => self.undo_move(staged, rel, *ident, true),
            };
            if let Err(why) = undone {
                let rel = match &step {
                    Done::MovedAside { rel, .. } | Done::Placed { rel, .. } => rel.display(),
                    Done::Chmod { .. } => Path::new("a directory's mode").display(),
                };
                left.push(format!("{rel}: {why}"));
            }
        }
        left
    }

    /// Moves `staged` (in the staging directory) back to `rel`, or with `out` the entry
    /// at `rel` back to `staged`; either way only when it is the inode `ident`.
    fn undo_move(&self, staged: &str, rel: &Path, ident: Ident, out: bool) -> Result<(), String> {
        let parent = match self.parent(rel) {
            Ok(Some(p)) => p,
            Ok(None) => return Err("its directory is gone".to_owned()),
            Err(e) => return Err(e.to_string()),
        };
        let (from_dir, from, to_dir, to): (BorrowedFd<'_>, &OsStr, BorrowedFd<'_>, &OsStr) =
            match out {
                true => (
                    parent.as_fd(),
                    Self::name(rel),
                    self.stage_fd(),
                    OsStr::new(staged),
                ),
                false => (
                    self.stage_fd(),
                    OsStr::new(staged),
                    parent.as_fd(),
                    Self::name(rel),
                ),
            };
        let st = rustix::fs::statat(from_dir, from, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| e.to_string())?;
        if Ident::of(&st) != ident {
            return Err("another entry is there now".to_owned());
        }
        rustix::fs::renameat_with(from_dir, from, to_dir, to, RenameFlags::NOREPLACE)
            .map_err(|e| e.to_string())
    }

    /// Empties the staging directory through descriptors and removes it when the name
    /// is still its inode; false when something of it is left.
    fn remove_stage(&mut self) -> bool {
        let Some((fd, ident)) = self.stage.take() else {
            return true;
        };
        if !empty_tree(fd.as_fd(), 0) {
            return false;
        }
        drop(fd);
        let name = self.staging_name.as_str();
        match rustix::fs::statat(&self.root, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if Ident::of(&st) == ident => {
                rustix::fs::unlinkat(&self.root, name, AtFlags::REMOVEDIR).is_ok()
            }
            _ => false,
        }
    }
}

/// Removes everything below the readable directory `dir`, never following a symlink;
/// false when something is left.
fn empty_tree(dir: BorrowedFd<'_>, depth: usize) -> bool {
    let Some(entries) = names(dir) else {
        return false;
    };
    let mut all = true;
    for name in entries {
        let Ok(st) = rustix::fs::statat(dir, &name, AtFlags::SYMLINK_NOFOLLOW) else {
            all = false;
            continue;
        };
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            let emptied = depth + 1 < MAX_STAGING_DEPTH
                && open_beneath(dir, &name, OFlags::RDONLY | OFlags::DIRECTORY)
                    .is_some_and(|sub| empty_tree(sub.as_fd(), depth + 1));
            all &= emptied && rustix::fs::unlinkat(dir, &name, AtFlags::REMOVEDIR).is_ok();
        } else {
            all &= rustix::fs::unlinkat(dir, &name, UNLINK_NAME).is_ok();
        }
    }
    all
}

/// The refusal for an entry that is not the one verified any more.
fn swapped(rel: &Path) -> ReviewError {
    ReviewError::Conflict {
        path: rel.to_path_buf(),
        expected: "the entry verified".to_owned(),
        found: "another entry (it was swapped while applying)".to_owned(),
    }
}
