//! [`FileFace`]: the held workspace and the operations on it, each one name at a time
//! from held descriptors (the invariants are in the documentation of [`super`]).

use std::ffi::OsStr;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, Gid, Mode, OFlags, ResolveFlags, Stat, Uid};
use rustix::io::Errno;
use sha2::{Digest, Sha256};
use tierbox_policy::Rejection;
use tierbox_policy::access::{AccessModel, Rule};
use tierbox_policy::plan::Plan;
use tierbox_policy::policy::WorkspaceMode;

use super::{
    DEFAULT_FILE_MODE, FileEntry, FileError, FileKind, FileList, FileRead, FileStat, FileWritten,
    MAX_APPENDED_FILE_BYTES, MAX_FILE_PATH_BYTES, MAX_FILE_READ_BYTES, MAX_FILE_WRITE_BYTES,
    MAX_LIST_ENTRIES, MAX_TEMP_ATTEMPTS, NEW_DIRECTORY_MODE, PERMISSION_BITS, PathRule, Staged,
    TEMP_PREFIX, WriteOptions,
};
use crate::changes::print::{Ident, openat_beneath as open_at};

/// The workspace, held for file operations (see the module documentation).
#[derive(Debug)]
pub struct FileFace {
    /// `O_PATH` descriptor of the workspace root.
    root: OwnedFd,
    /// Its canonical path (the rules compare paths against it).
    workspace: PathBuf,
    /// What a run of the policy may do where.
    model: AccessModel,
    /// Review mode: writes are staged for a change set, never made.
    review: bool,
    /// How long a change set of a staged write is kept, and the caps on kept sets (the
    /// plan's, in review mode).
    keeping: (u64, tierbox_policy::KeepCaps),
    /// The workspace root's owner and group: what new files get.
    owner: (u32, u32),
    /// Who the face runs as.
    euid: u32,
    /// The protected entries that exist, by inode, and the canonical targets of the
    /// protected symlinks that lead inside the workspace.
    protected: Vec<(Ident, PathBuf)>,
    protected_targets: Vec<PathBuf>,
}

/// How [`FileFace::walk`] goes down a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Walk {
    /// For a read: any directory.
    Read,
    /// For a write: no protected directory; with `create`, missing ones are made.
    Write {
        /// Make the missing directories.
        create: bool,
    },
}

/// A regular file, open for reading, with its `fstat`.
struct Regular {
    fd: OwnedFd,
    st: Stat,
}

fn io<'a>(what: &'static str, path: &'a str) -> impl FnOnce(Errno) -> FileError + 'a {
    move |e| FileError::Io {
        what,
        path: path.to_owned(),
        source: e.into(),
    }
}

// The `stat` field types differ by architecture (`c_long` or `i64`, `c_ulong` or `u32`).
#[allow(clippy::useless_conversion)]
fn mtime_ms(st: &Stat) -> i64 {
    let secs = i64::from(st.st_mtime);
    let ms = i64::try_from(u64::from(st.st_mtime_nsec) / 1_000_000).unwrap_or(0);
    secs.saturating_mul(1000).saturating_add(ms)
}

fn size_of(st: &Stat) -> u64 {
    u64::try_from(st.st_size).unwrap_or(0)
}

/// `path` as plain names, refused by rule: at most [`MAX_FILE_PATH_BYTES`], no NUL, not
/// absolute, no `..`; `.` components are dropped. Empty is allowed only with `may_be_root`.
fn plain_path(path: &str, may_be_root: bool) -> Result<PathBuf, FileError> {
    let refused = |rule| FileError::Refused {
        path: path.to_owned(),
        rule,
    };
    if path.len() > MAX_FILE_PATH_BYTES {
        return Err(refused(PathRule::TooLong));
    }
    if path.contains('\0') {
        return Err(refused(PathRule::Nul));
    }
    let mut rel = PathBuf::new();
    for c in Path::new(path).components() {
        match c {
            Component::Normal(name) => rel.push(name),
            Component::CurDir => {}
            Component::ParentDir => return Err(refused(PathRule::DotDot)),
            Component::RootDir | Component::Prefix(_) => return Err(refused(PathRule::Absolute)),
        }
    }
    if rel.as_os_str().is_empty() && !may_be_root {
        return Err(refused(PathRule::Empty));
    }
    Ok(rel)
}

/// The directory part and the name of a non-empty plain path.
fn split(rel: &Path) -> (&Path, &OsStr) {
    let name = rel.file_name().unwrap_or(rel.as_os_str());
    (rel.parent().unwrap_or(Path::new("")), name)
}

impl FileFace {
    /// Holds the workspace of `plan` (from [`tierbox_policy::validate::workspace_plan`],
    /// or a run's plan): opens its canonical path without following a symlink and checks
    /// that the directory opened is the inode that path names, then notes the protected
    /// entries that exist. In review mode (`plan.workspace_mode` is `overlay`) the face
    /// reads and refuses every write.
    pub fn open(plan: &Plan) -> Result<Self, FileError> {
        let workspace = plan.workspace.clone();
        let shown = workspace.display().to_string();
        let named = rustix::fs::statat(rustix::fs::CWD, &workspace, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(io("stat the workspace", &shown))?;
        let root = rustix::fs::openat2(
            rustix::fs::CWD,
            &workspace,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(|e| match e {
            Errno::LOOP | Errno::NOTDIR => FileError::Changed {
                path: shown.clone(),
                what: "the workspace became a symbolic link after it was checked",
            },
            e => io("open the workspace", &shown)(e),
        })?;
        let st = rustix::fs::fstat(&root).map_err(io("stat the workspace", &shown))?;
        if Ident::of(&st) != Ident::of(&named) {
            return Err(FileError::Changed {
                path: shown,
                what: "the workspace was swapped after it was checked",
            });
        }
        let mut face = Self {
            root,
            model: AccessModel::of(plan),
            review: plan.workspace_mode == WorkspaceMode::Overlay,
            keeping: (
                plan.keep_changes_for_secs
                    .unwrap_or(tierbox_policy::policy::DEFAULT_KEEP_CHANGES_SECS),
                plan.keep_changes_caps.unwrap_or_default(),
            ),
            owner: (st.st_uid, st.st_gid),
            euid: rustix::process::geteuid().as_raw(),
            protected: Vec::new(),
            protected_targets: Vec::new(),
            workspace,
        };
        face.note_protected(&plan.filesystem.protected);
        Ok(face)
    }

    /// The workspace's canonical path.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The workspace root's owner and group (what a written file gets).
    pub fn owner(&self) -> (u32, u32) {
        self.owner
    }

    /// How long the change set of a staged write is kept, in seconds, and the caps on kept
    /// sets (the policy's `workspace.keep_changes_*`).
    pub fn keeping(&self) -> (u64, tierbox_policy::KeepCaps) {
        self.keeping
    }

    /// Whether the workspace is in review mode (a write goes to a change set:
    /// [`FileFace::stage`]).
    pub fn in_review_mode(&self) -> bool {
        self.review
    }

    /// Notes the inode of each protected entry that exists, and where each protected
    /// symlink leads inside the workspace (resolved by name: this only ever adds
    /// refusals).
    fn note_protected(&mut self, protected: &[PathBuf]) {
        for p in protected {
            let Ok(canon) = std::fs::canonicalize(p) else {
                continue;
            };
            let Ok(rel) = canon.strip_prefix(&self.workspace) else {
                continue;
            };
            let rel = rel.to_path_buf();
            if canon != *p {
                self.protected_targets.push(canon.clone());
            }
            if rel.as_os_str().is_empty() {
                continue;
            }
            if let Ok((_, _, st)) = self.find("", &rel, Walk::Read) {
                self.protected.push((Ident::of(&st), p.clone()));
            }
        }
    }

    /// Refuses a read of what the policy hides from runs.
    fn may_read(&self, path: &str, rel: &Path) -> Result<(), FileError> {
        match self.model.rule(&self.workspace.join(rel)) {
            Some((entry, Rule::Deny)) => Err(FileError::Denied {
                path: path.to_owned(),
                entry: entry.to_path_buf(),
            }),
            _ => Ok(()),
        }
    }

    /// Refuses a write a run could not make (see the module documentation), by the
    /// path's names.
    fn may_write(&self, path: &str, rel: &Path) -> Result<(), FileError> {
        let abs = self.workspace.join(rel);
        let protected = |entry: PathBuf, why| FileError::Protected {
            path: path.to_owned(),
            entry,
            why,
        };
        let mut at = self.workspace.clone();
        for c in rel.components() {
            at.push(c);
            if c.as_os_str() == ".git" {
                return Err(protected(at, "a git directory, at any depth"));
            }
        }
        match self.model.rule(&abs) {
            Some((_, Rule::Workspace | Rule::Writable)) => {}
            Some((entry, Rule::Protected)) => {
                return Err(protected(entry.to_path_buf(), "filesystem.protected"));
            }
            Some((entry, Rule::Deny)) => {
                return Err(FileError::Denied {
                    path: path.to_owned(),
                    entry: entry.to_path_buf(),
                });
            }
            Some((entry, rule)) => {
                return Err(FileError::ReadOnly {
                    path: path.to_owned(),
                    entry: entry.to_path_buf(),
                    key: rule.policy_key().unwrap_or("system paths"),
                });
            }
            None => {
                return Err(FileError::Refused {
                    path: path.to_owned(),
                    rule: PathRule::Escapes,
                });
            }
        }
        if let Some(t) = self.protected_targets.iter().find(|t| abs.starts_with(t)) {
            return Err(protected(
                t.clone(),
                "where a protected symbolic link leads",
            ));
        }
        Ok(())
    }

    /// The protected entry `st` is, by inode.
    fn protected_inode(&self, path: &str, st: &Stat) -> Result<(), FileError> {
        match self.protected.iter().find(|(i, _)| *i == Ident::of(st)) {
            Some((_, entry)) => Err(FileError::Protected {
                path: path.to_owned(),
                entry: entry.clone(),
                why: "filesystem.protected (the same inode)",
            }),
            None => Ok(()),
        }
    }

    /// Why the lookup of `name` in `dir` failed with `e`, as a refusal.
    fn lookup_error(path: &str, dir: BorrowedFd<'_>, name: &OsStr, e: Errno) -> FileError {
        let refused = |rule| FileError::Refused {
            path: path.to_owned(),
            rule,
        };
        match e {
            Errno::NOENT => FileError::NotFound {
                path: path.to_owned(),
            },
            Errno::LOOP => refused(PathRule::Symlink),
            Errno::XDEV => refused(PathRule::Escapes),
            Errno::NAMETOOLONG => refused(PathRule::TooLong),
            Errno::NOTDIR => match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) if FileKind::of(st.st_mode) == FileKind::Symlink => {
                    refused(PathRule::Symlink)
                }
                _ => refused(PathRule::NotDirectory),
            },
            e => io("look up", path)(e),
        }
    }

    /// The directory `dir` (plain names, relative to the root), reached one name at a
    /// time without following a symlink, and the inode of every directory on the way
    /// (the root first). For a write no directory on the way may be a protected entry,
    /// and with `create` a missing one is made (the workspace owner's,
    /// [`NEW_DIRECTORY_MODE`]).
    fn walk(&self, path: &str, dir: &Path, walk: Walk) -> Result<(OwnedFd, Vec<Ident>), FileError> {
        let mut fd = open_at(
            self.root.as_fd(),
            OsStr::new("."),
            OFlags::PATH | OFlags::DIRECTORY,
        )
        .map_err(io("open the workspace for", path))?;
        let st = rustix::fs::fstat(&fd).map_err(io("stat the workspace for", path))?;
        let mut chain = vec![Ident::of(&st)];
        for name in dir.iter() {
            let next = match open_at(fd.as_fd(), name, OFlags::PATH | OFlags::DIRECTORY) {
                Ok(next) => next,
                Err(Errno::NOENT) if walk == (Walk::Write { create: true }) => {
                    self.make_dir(path, fd.as_fd(), name)?
                }
                Err(e) => return Err(Self::lookup_error(path, fd.as_fd(), name, e)),
            };
            let st = rustix::fs::fstat(&next).map_err(io("stat a directory of", path))?;
            if walk != Walk::Read {
                self.protected_inode(path, &st)?;
            }
            chain.push(Ident::of(&st));
            fd = next;
        }
        Ok((fd, chain))
    }

    /// The entry at `rel` (not empty): its directory (walked as `walk` says), and the
    /// entry itself opened `O_PATH` (never following it) with its `fstat`.
    fn find(
        &self,
        path: &str,
        rel: &Path,
        walk: Walk,
    ) -> Result<(OwnedFd, OwnedFd, Stat), FileError> {
        let (dir, name) = split(rel);
        let (dir, _) = self.walk(path, dir, walk)?;
        let at = open_at(dir.as_fd(), name, OFlags::PATH)
            .map_err(|e| Self::lookup_error(path, dir.as_fd(), name, e))?;
        let st = rustix::fs::fstat(&at).map_err(io("stat", path))?;
        Ok((dir, at, st))
    }

    /// Makes the directory `name` in `parent` for [`FileFace::walk`] and returns it,
    /// checked to be the one made (Tierbox's, 0700, a directory) before it is given to the
    /// workspace's owner with [`NEW_DIRECTORY_MODE`].
    fn make_dir(
        &self,
        path: &str,
        parent: BorrowedFd<'_>,
        name: &OsStr,
    ) -> Result<OwnedFd, FileError> {
        self.owner_may_write(path, parent)?;
        let made = match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o700)) {
            Ok(()) => true,
            // Made meanwhile by someone else: used as found, like any existing one.
            Err(Errno::EXIST) => false,
            Err(e) => return Err(io("create a directory for", path)(e)),
        };
        let fd = open_at(parent, name, OFlags::RDONLY | OFlags::DIRECTORY)
            .map_err(|e| Self::lookup_error(path, parent, name, e))?;
        if made {
            let st = rustix::fs::fstat(&fd).map_err(io("stat a new directory of", path))?;
            if st.st_uid != self.euid || st.st_mode & 0o077 != 0 {
                return Err(FileError::Changed {
                    path: path.to_owned(),
                    what: "a directory it made was swapped",
                });
            }
            self.give_to_owner(path, &fd, NEW_DIRECTORY_MODE)?;
        }
        Ok(fd)
    }

    /// Gives `fd` the workspace's owner (when the face runs as root) and `mode`.
    fn give_to_owner(&self, path: &str, fd: &OwnedFd, mode: u32) -> Result<(), FileError> {
        if self.euid == 0 {
            let (uid, gid) = self.owner;
            rustix::fs::fchown(fd, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))
                .map_err(io("chown", path))?;
        }
        // After the chown, which may clear bits: the mode is the one asked for.
        rustix::fs::fchmod(fd, Mode::from_raw_mode(mode & PERMISSION_BITS))
            .map_err(io("chmod", path))
    }

    /// Refuses a write into the directory `dir` that the workspace's owner could not
    /// make, as the kernel would judge it for that owner (its primary group only): only
    /// when the face runs as root for an owner who is not, since otherwise the kernel
    /// judges the face's own writes.
    fn owner_may_write(&self, path: &str, dir: BorrowedFd<'_>) -> Result<Stat, FileError> {
        let st = rustix::fs::fstat(dir).map_err(io("stat the directory of", path))?;
        let (uid, gid) = self.owner;
        if self.euid != 0 || uid == 0 {
            return Ok(st);
        }
        let bit = match (st.st_uid == uid, st.st_gid == gid) {
            (true, _) => 0o200,
            (false, true) => 0o020,
            (false, false) => 0o002,
        };
        if st.st_mode & bit == 0 {
            let (dir, _) = split(Path::new(path));
            return Err(FileError::NotWritable {
                path: path.to_owned(),
                dir: self.workspace.join(dir),
                uid,
            });
        }
        Ok(st)
    }

    /// The regular file `name` of `dir`: opened `O_PATH` and `fstat`ed first, then (only
    /// when it is a regular file) opened for reading, `O_NONBLOCK`, and checked to be the
    /// same inode.
    fn open_regular(
        &self,
        path: &str,
        dir: BorrowedFd<'_>,
        name: &OsStr,
    ) -> Result<Regular, FileError> {
        let at =
            open_at(dir, name, OFlags::PATH).map_err(|e| Self::lookup_error(path, dir, name, e))?;
        let st = rustix::fs::fstat(&at).map_err(io("stat", path))?;
        Self::of_kind(path, &st, FileKind::File)?;
        let fd = open_at(dir, name, OFlags::RDONLY | OFlags::NONBLOCK)
            .map_err(|e| Self::lookup_error(path, dir, name, e))?;
        let now = rustix::fs::fstat(&fd).map_err(io("stat", path))?;
        if Ident::of(&now) != Ident::of(&st) || FileKind::of(now.st_mode) != FileKind::File {
            return Err(FileError::Changed {
                path: path.to_owned(),
                what: "the file was swapped while it was opened",
            });
        }
        Ok(Regular { fd, st: now })
    }

    /// Refuses an entry that is not of kind `want` (a regular file or a directory): a
    /// symlink by [`PathRule::Symlink`], anything else as [`FileError::NotRegular`] (or,
    /// where a directory is wanted, [`FileError::NotDirectory`]).
    fn of_kind(path: &str, st: &Stat, want: FileKind) -> Result<(), FileError> {
        let path = path.to_owned();
        match FileKind::of(st.st_mode) {
            kind if kind == want => Ok(()),
            FileKind::Symlink => Err(FileError::Refused {
                path,
                rule: PathRule::Symlink,
            }),
            kind if want == FileKind::Directory => Err(FileError::NotDirectory { path, kind }),
            kind => Err(FileError::NotRegular { path, kind }),
        }
    }

    /// Reads up to `max_bytes` (1 to [`MAX_FILE_READ_BYTES`]) of the regular file at
    /// `path` from `offset` on; `truncated` says whether the file goes on past them.
    pub fn read(&self, path: &str, offset: u64, max_bytes: usize) -> Result<FileRead, FileError> {
        if max_bytes == 0 || max_bytes > MAX_FILE_READ_BYTES {
            return Err(Rejection::ReadSizeInvalid {
                bytes: max_bytes,
                max: MAX_FILE_READ_BYTES,
            }
            .into());
        }
        let rel = plain_path(path, false)?;
        self.may_read(path, &rel)?;
        let (dir, name) = split(&rel);
        let (dir, _) = self.walk(path, dir, Walk::Read)?;
        let file = self.open_regular(path, dir.as_fd(), name)?;
        // One byte past the answer tells whether the file goes on.
        let mut bytes = vec![0u8; max_bytes + 1];
        let mut got = 0;
        while got < bytes.len() {
            let at = offset.saturating_add(got as u64);
            match rustix::io::pread(&file.fd, &mut bytes[got..], at) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(Errno::INTR) => {}
                Err(e) => return Err(io("read", path)(e)),
            }
        }
        let truncated = got > max_bytes;
        bytes.truncate(got.min(max_bytes));
        Ok(FileRead {
            size: size_of(&file.st),
            offset,
            bytes,
            truncated,
            mode: file.st.st_mode & 0o7777,
            mtime_unix_ms: mtime_ms(&file.st),
        })
    }

    /// The metadata of the entry at `path` (empty: the workspace), never following a
    /// symlink: a symlink at the end of the path is reported as one; on the way, refused.
    pub fn stat(&self, path: &str) -> Result<FileStat, FileError> {
        let rel = plain_path(path, true)?;
        self.may_read(path, &rel)?;
        let st = if rel.as_os_str().is_empty() {
            rustix::fs::fstat(&self.root).map_err(io("stat", path))?
        } else {
            self.find(path, &rel, Walk::Read)?.2
        };
        Ok(FileStat {
            path: rel.to_string_lossy().into_owned(),
            kind: FileKind::of(st.st_mode),
            size: size_of(&st),
            mode: st.st_mode & 0o7777,
            mtime_unix_ms: mtime_ms(&st),
            uid: st.st_uid,
            gid: st.st_gid,
        })
    }

    /// The entries of the directory at `path` (empty: the workspace), at most
    /// [`MAX_LIST_ENTRIES`], sorted by name, without those the policy hides from runs.
    pub fn list(&self, path: &str) -> Result<FileList, FileError> {
        let rel = plain_path(path, true)?;
        self.may_read(path, &rel)?;
        let dir = self.open_dir(path, &rel)?;
        let mut reader = rustix::fs::Dir::read_from(&dir).map_err(io("list", path))?;
        let mut names = Vec::new();
        let mut truncated = false;
        while let Some(entry) = reader.read() {
            let entry = entry.map_err(io("list", path))?;
            let name = OsStr::from_bytes(entry.file_name().to_bytes());
            if name == "." || name == ".." {
                continue;
            }
            if names.len() == MAX_LIST_ENTRIES {
                truncated = true;
                break;
            }
            names.push(name.to_owned());
        }
        names.sort();
        let mut entries = Vec::with_capacity(names.len());
        for name in names {
            if self
                .model
                .rule(&self.workspace.join(&rel).join(&name))
                .map(|(_, r)| r)
                == Some(Rule::Deny)
            {
                continue;
            }
            // Gone since it was listed: left out.
            let Ok(st) = rustix::fs::statat(&dir, &name, AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            let wire = crate::wire::encode(name.as_bytes());
            entries.push(FileEntry {
                name: wire.text,
                name_base64: wire.bytes_base64,
                kind: FileKind::of(st.st_mode),
                size: size_of(&st),
                mode: st.st_mode & 0o7777,
                mtime_unix_ms: mtime_ms(&st),
            });
        }
        Ok(FileList {
            path: rel.to_string_lossy().into_owned(),
            entries,
            truncated,
        })
    }

    /// The directory at `rel` (empty: the workspace), open for reading: found `O_PATH`
    /// first, and opened again only when it is a directory, as the same inode.
    fn open_dir(&self, path: &str, rel: &Path) -> Result<OwnedFd, FileError> {
        let (parent, name, seen) = match rel.as_os_str().is_empty() {
            true => {
                let root = open_at(
                    self.root.as_fd(),
                    OsStr::new("."),
                    OFlags::PATH | OFlags::DIRECTORY,
                )
                .map_err(io("open the workspace for", path))?;
                let st = rustix::fs::fstat(&root).map_err(io("stat", path))?;
                (root, OsStr::new("."), st)
            }
            false => {
                let (parent, _, st) = self.find(path, rel, Walk::Read)?;
                Self::of_kind(path, &st, FileKind::Directory)?;
                (parent, split(rel).1, st)
            }
        };
        let dir = open_at(parent.as_fd(), name, OFlags::RDONLY | OFlags::DIRECTORY)
            .map_err(|e| Self::lookup_error(path, parent.as_fd(), name, e))?;
        let st = rustix::fs::fstat(&dir).map_err(io("stat", path))?;
        if Ident::of(&st) != Ident::of(&seen) {
            return Err(FileError::Changed {
                path: path.to_owned(),
                what: "the directory was swapped while it was opened",
            });
        }
        Ok(dir)
    }

    /// `path` as plain names, once the write is one a run could make: the path's rules,
    /// the policy's ([`FileFace::may_write`]), permission bits only, the size bound.
    fn checked_write(
        &self,
        path: &str,
        data: &[u8],
        options: &WriteOptions,
    ) -> Result<PathBuf, FileError> {
        let rel = plain_path(path, false)?;
        self.may_write(path, &rel)?;
        if let Some(mode) = options.mode.filter(|m| m & !PERMISSION_BITS != 0) {
            return Err(FileError::ModeRefused {
                path: path.to_owned(),
                mode,
            });
        }
        if data.len() > MAX_FILE_WRITE_BYTES {
            return Err(FileError::TooLarge {
                path: path.to_owned(),
                what: "the data",
                bytes: data.len() as u64,
                max: MAX_FILE_WRITE_BYTES as u64,
                key: "MAX_FILE_WRITE_BYTES",
            });
        }
        Ok(rel)
    }

    /// A write in review mode, checked as [`FileFace::write`] checks one but touching
    /// nothing: what the file would be (its whole content, appended or not, and mode) and
    /// the directories on its way, for a change set to hold ([`crate::Runner::write_file`]
    /// keeps it). Refused outside review mode ([`FileError::NotStaged`]).
    pub fn stage(
        &self,
        path: &str,
        data: &[u8],
        options: WriteOptions,
    ) -> Result<Staged, FileError> {
        if !self.review {
            return Err(FileError::NotStaged {
                path: path.to_owned(),
            });
        }
        let rel = self.checked_write(path, data, &options)?;
        let (dir_rel, name) = split(&rel);
        let (dir, dir_modes) = self.walk_existing(path, dir_rel)?;
        let missing = dir_rel.iter().count() - dir_modes.len();
        if missing > 0 && !options.mkdir_parents {
            return Err(FileError::NotFound {
                path: path.to_owned(),
            });
        }
        let existing = match &dir {
            Some(dir) if missing == 0 => {
                match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => Some((dir, st)),
                    Err(Errno::NOENT) => None,
                    Err(e) => return Err(Self::lookup_error(path, dir.as_fd(), name, e)),
                }
            }
            _ => None,
        };
        let (content, mode, created) = match existing {
            None if !options.create => {
                return Err(FileError::NotFound {
                    path: path.to_owned(),
                });
            }
            None => (data.to_vec(), DEFAULT_FILE_MODE, true),
            Some((dir, st)) => {
                self.protected_inode(path, &st)?;
                let file = self.open_regular(path, dir.as_fd(), name)?;
                let mut content = match options.append {
                    true => self.appended_base(path, file, data.len())?,
                    false => Vec::new(),
                };
                content.extend_from_slice(data);
                (content, st.st_mode, false)
            }
        };
        Ok(Staged {
            rel,
            content,
            mode: options.mode.unwrap_or(mode) & PERMISSION_BITS,
            created,
            appended: options.append && !created,
            dir_modes,
        })
    }

    /// The directories of `dir` that the workspace has, walked as a write walks them
    /// (no symlink, no protected entry): `dir` itself when all of it exists (`None` when a
    /// directory is missing: it and those below it are new), and the permission bits of
    /// each directory reached below the root, in order.
    fn walk_existing(
        &self,
        path: &str,
        dir: &Path,
    ) -> Result<(Option<OwnedFd>, Vec<u32>), FileError> {
        let mut fd = open_at(
            self.root.as_fd(),
            OsStr::new("."),
            OFlags::PATH | OFlags::DIRECTORY,
        )
        .map_err(io("open the workspace for", path))?;
        let mut modes = Vec::new();
        for name in dir.iter() {
            let next = match open_at(fd.as_fd(), name, OFlags::PATH | OFlags::DIRECTORY) {
                Ok(next) => next,
                Err(Errno::NOENT) => return Ok((None, modes)),
                Err(e) => return Err(Self::lookup_error(path, fd.as_fd(), name, e)),
            };
            let st = rustix::fs::fstat(&next).map_err(io("stat a directory of", path))?;
            self.protected_inode(path, &st)?;
            modes.push(st.st_mode & 0o7777);
            fd = next;
        }
        Ok((Some(fd), modes))
    }

    /// Writes `data` (at most [`MAX_FILE_WRITE_BYTES`]) to the regular file at `path`,
    /// replacing it whole and atomically (see the module documentation), as `options`
    /// say.
    pub fn write(
        &self,
        path: &str,
        data: &[u8],
        options: WriteOptions,
    ) -> Result<FileWritten, FileError> {
        if self.review {
            return Err(FileError::ReviewMode {
                path: path.to_owned(),
            });
        }
        let rel = self.checked_write(path, data, &options)?;
        let (dir_rel, name) = split(&rel);
        let walk = Walk::Write {
            create: options.mkdir_parents,
        };
        let (dir, chain) = self.walk(path, dir_rel, walk)?;
        let dir_st = self.owner_may_write(path, dir.as_fd())?;
        let existing = match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Some(st),
            Err(Errno::NOENT) => None,
            Err(e) => return Err(Self::lookup_error(path, dir.as_fd(), name, e)),
        };
        let base = match &existing {
            None if !options.create => {
                return Err(FileError::NotFound {
                    path: path.to_owned(),
                });
            }
            None => None,
            Some(st) => {
                self.protected_inode(path, st)?;
                self.sticky_allows(path, &dir_st, st)?;
                let file = self.open_regular(path, dir.as_fd(), name)?;
                options.append.then_some(file)
            }
        };
        let base = match base {
            Some(file) => self.appended_base(path, file, data.len())?,
            None => Vec::new(),
        };
        let mode = options
            .mode
            .or(existing.as_ref().map(|st| st.st_mode))
            .unwrap_or(DEFAULT_FILE_MODE)
            & PERMISSION_BITS;
        let (temp, file) = self.make_temp(path, dir.as_fd())?;
        let placed = self.fill_and_place(
            path,
            &rel,
            &chain,
            dir.as_fd(),
            (&temp, file),
            (&base, data),
            mode,
        );
        let st = match placed {
            Ok(st) => st,
            Err(e) => {
                let _ = rustix::fs::unlinkat(&dir, temp.as_str(), AtFlags::empty());
                return Err(e);
            }
        };
        // The rename is durable once the directory is; a failure here changes nothing
        // that was written.
        if let Ok(d) = open_at(
            dir.as_fd(),
            OsStr::new("."),
            OFlags::RDONLY | OFlags::DIRECTORY,
        ) {
            let _ = rustix::fs::fsync(&d);
        }
        let mut hasher = Sha256::new();
        hasher.update(&base);
        hasher.update(data);
        Ok(FileWritten {
            path: rel.to_string_lossy().into_owned(),
            bytes_written: data.len() as u64,
            size: size_of(&st),
            sha256: tierbox_attest::jcs::hex(&hasher.finalize()),
            mode: st.st_mode & 0o7777,
            uid: st.st_uid,
            gid: st.st_gid,
            created: existing.is_none(),
            appended: options.append && existing.is_some(),
            kept_as: None,
            evicted: Vec::new(),
            audit_error: None,
        })
    }

    /// Refuses replacing `st` in the sticky directory `dir` when the workspace's owner
    /// owns neither (as the kernel would refuse that owner's rename), when the face runs
    /// as root for an owner who is not.
    fn sticky_allows(&self, path: &str, dir: &Stat, st: &Stat) -> Result<(), FileError> {
        let (uid, _) = self.owner;
        let sticky = dir.st_mode & 0o1000 != 0;
        if self.euid == 0 && uid != 0 && sticky && dir.st_uid != uid && st.st_uid != uid {
            let (d, _) = split(Path::new(path));
            return Err(FileError::NotWritable {
                path: path.to_owned(),
                dir: self.workspace.join(d),
                uid,
            });
        }
        Ok(())
    }

    /// What an append keeps: the file's content, read through its descriptor, when the
    /// result stays within [`MAX_APPENDED_FILE_BYTES`].
    fn appended_base(
        &self,
        path: &str,
        file: Regular,
        adding: usize,
    ) -> Result<Vec<u8>, FileError> {
        let too_large = |held: u64| FileError::TooLarge {
            path: path.to_owned(),
            what: "the file after the append",
            bytes: held.saturating_add(adding as u64),
            max: MAX_APPENDED_FILE_BYTES,
            key: "MAX_APPENDED_FILE_BYTES",
        };
        let room = MAX_APPENDED_FILE_BYTES.saturating_sub(adding as u64);
        if size_of(&file.st) > room {
            return Err(too_large(size_of(&file.st)));
        }
        let mut base = Vec::new();
        File::from(file.fd)
            .take(room + 1)
            .read_to_end(&mut base)
            .map_err(|e| FileError::Io {
                what: "read",
                path: path.to_owned(),
                source: e,
            })?;
        if base.len() as u64 > room {
            return Err(too_large(base.len() as u64));
        }
        Ok(base)
    }

    /// A new temporary file in `dir`, made with `O_EXCL` (never an existing entry, never
    /// through a symlink), mode 0600 until it is filled.
    fn make_temp(&self, path: &str, dir: BorrowedFd<'_>) -> Result<(String, File), FileError> {
        let mut last = Errno::EXIST;
        for _ in 0..MAX_TEMP_ATTEMPTS {
            let name = format!("{TEMP_PREFIX}{}", crate::supervisor::new_run_id());
            match rustix::fs::openat(
                dir,
                name.as_str(),
                OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            ) {
                Ok(fd) => return Ok((name, File::from(fd))),
                Err(Errno::EXIST) => last = Errno::EXIST,
                Err(e) => return Err(io("create a temporary file for", path)(e)),
            }
        }
        Err(io("create a temporary file for", path)(last))
    }

    /// Fills the temporary file, gives it its owner and `mode`, syncs it, checks that
    /// every directory on the way is still the inode walked (by name, from the root),
    /// and renames it onto the target; its `fstat`.
    #[allow(clippy::too_many_arguments)]
    fn fill_and_place(
        &self,
        path: &str,
        rel: &Path,
        chain: &[Ident],
        dir: BorrowedFd<'_>,
        (temp, mut file): (&str, File),
        (base, data): (&[u8], &[u8]),
        mode: u32,
    ) -> Result<Stat, FileError> {
        let failed = |what| {
            move |e: std::io::Error| FileError::Io {
                what,
                path: path.to_owned(),
                source: e,
            }
        };
        file.write_all(base).map_err(failed("write"))?;
        file.write_all(data).map_err(failed("write"))?;
        let fd = OwnedFd::from(file);
        self.give_to_owner(path, &fd, mode)?;
        rustix::fs::fsync(&fd).map_err(io("sync", path))?;
        let st = rustix::fs::fstat(&fd).map_err(io("stat", path))?;
        let (dir_rel, name) = split(rel);
        let again = Walk::Write { create: false };
        let (_, again) = self
            .walk(path, dir_rel, again)
            .map_err(|_| FileError::Changed {
                path: path.to_owned(),
                what: "a directory on its path was moved or swapped",
            })?;
        if again != chain {
            return Err(FileError::Changed {
                path: path.to_owned(),
                what: "a directory on its path was moved or swapped",
            });
        }
        rustix::fs::renameat(dir, temp, dir, name).map_err(|e| match e {
            Errno::ISDIR | Errno::NOTEMPTY | Errno::EXIST => FileError::NotRegular {
                path: path.to_owned(),
                kind: FileKind::Directory,
            },
            e => io("rename into place", path)(e),
        })?;
        Ok(st)
    }
}
