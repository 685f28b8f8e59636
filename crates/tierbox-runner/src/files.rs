//! The file face: reading, writing, listing and inspecting the files of a workspace for an
//! agent (over HTTP and MCP) without a run, under the rules a run answers to.
//!
//! The server acts here with its own authority (often root's) on a tree that runs, the
//! workspace's owner and anyone with write access to it may change at any moment, so:
//!
//! # Invariants
//!
//! - **One root, held.** The workspace is resolved and checked by the scope rules a run's
//!   is ([`tierbox_policy::validate::workspace_plan`]: the policy, the request's
//!   `workspace` narrowing, the protected paths, the denials), then opened once by its
//!   canonical path without following any symlink, as an `O_PATH` directory descriptor
//!   that must be the inode the checked path named. Every other name is resolved from
//!   that descriptor; nothing is reached by a path from `/`.
//! - **No name leads out.** A path is relative, at most [`MAX_FILE_PATH_BYTES`], of plain
//!   names: an absolute path, a `..` or a NUL is refused before any lookup ([`PathRule`]).
//!   Every lookup is one name at a time, `openat2(O_NOFOLLOW, RESOLVE_BENEATH |
//!   RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)` from the directory before it, so a
//!   symlink anywhere on the path — planted before, or swapped in while the face works —
//!   fails the lookup ([`PathRule::Symlink`]); it is never followed.
//! - **Only regular files are read or written, and nothing else is opened to be.** An
//!   entry is opened `O_PATH` (which neither blocks on a FIFO nor wakes a device) and
//!   `fstat`ed; only a regular file is opened again (`O_NONBLOCK`), and that descriptor
//!   must be the same inode. A FIFO, a socket or a device is [`FileError::NotRegular`] at
//!   once.
//! - **A write is what a run may write.** Refused where the run's access model says
//!   read-only, protected or hidden ([`AccessModel`](tierbox_policy::access::AccessModel): `filesystem.read_only`,
//!   `filesystem.protected`, `filesystem.deny_read`), where a protected symlink leads, in
//!   a directory that is a protected entry by inode (a renamed `.git` is still `.git`),
//!   in any `.git` directory at any depth (the host's `git` runs hooks and reads
//!   `core.fsmonitor` from there), in a directory the workspace's owner may not write,
//!   and never in the workspace itself when it is in review mode: a review mode write is
//!   checked the same way and kept as a change set of its own ([`FileFace::stage`],
//!   [`FileWritten::kept_as`]), which `tierbox changes apply` applies as it applies an
//!   overlay run's (a review mode workspace changes only by an applied change set;
//!   [`FileFace::write`] itself refuses there, [`FileError::ReviewMode`]). No setuid, setgid or sticky
//!   bit is ever set: a request for one is refused ([`FileError::ModeRefused`]), an
//!   existing file's are dropped. The file is the workspace owner's (`fchown` when the
//!   face runs as root).
//! - **A write replaces the file whole, atomically.** The new content goes to a temporary
//!   file made with `O_CREAT | O_EXCL` in the same directory (reached through the held
//!   descriptors), owned, moded and `fsync`ed through its own descriptor; the
//!   directories on the way are then looked up again and must be the same inodes, and
//!   only then is the temporary renamed onto the name. A reader sees the old file or the
//!   new one, never part of one; a failure leaves the old file as it was and removes the
//!   temporary. A hard link to the old file elsewhere keeps the old content (an append
//!   too is a copy, never a write in place).
//! - **Every limit is named** ([`MAX_FILE_READ_BYTES`], [`MAX_FILE_WRITE_BYTES`],
//!   [`MAX_APPENDED_FILE_BYTES`], [`MAX_LIST_ENTRIES`], [`MAX_FILE_PATH_BYTES`]), and a
//!   limit hit is refused ([`FileError::TooLarge`]) or reported (`truncated`), never a
//!   silent part.
//!
//! Not covered: a directory the face holds can be moved elsewhere by someone with write
//! access to both places while a write is under way, after the second lookup; the file
//! then lands where that someone could have written it themselves, owned by the
//! workspace's owner and with permission bits only. Reads, like a run's, see through a
//! hard link made inside the workspace to a file the policy hides.
//!
//! ```
//! # fn demo(runner: &tierbox_runner::Runner) -> Result<(), tierbox_runner::files::FileError> {
//! use tierbox_runner::files::WriteOptions;
//!
//! let face = runner.file_face(None, None)?;
//! face.write("notes/todo.txt", b"ship it\n", WriteOptions { mkdir_parents: true, ..WriteOptions::default() })?;
//! let read = face.read("notes/todo.txt", 0, 4096)?;
//! assert_eq!((read.bytes.as_slice(), read.truncated), (&b"ship it\n"[..], false));
//! # Ok(()) }
//! ```

use std::path::PathBuf;

use rustix::fs::FileType;
use schemars::JsonSchema;
use serde::Serialize;
use tierbox_policy::Rejection;
use tierbox_policy::policy::WorkspaceMode;

mod face;
mod keep;
pub use keep::FILE_STAGING_DIR;

pub use face::FileFace;

/// Most bytes one read returns (256 KiB, as a background process's output read): keeps
/// one answer within what a model's context and an MCP client's message cap accept. A
/// larger file is read in parts (`offset`); each answer says whether more follows.
pub const MAX_FILE_READ_BYTES: usize = 256 * 1024;

/// Bytes a read returns when it names no `max_bytes` (64 KiB).
pub const DEFAULT_FILE_READ_BYTES: usize = 64 * 1024;

/// Most bytes one write sends (64 KiB, decoded, as a write to a background process's
/// stdin): its base64 (4/3 larger) and the JSON around it fit the HTTP API's request cap
/// ([`tierbox_policy::request::MAX_REQUEST_BYTES`], 128 KiB). A larger write is refused,
/// never cut; a larger file is written with appends.
pub const MAX_FILE_WRITE_BYTES: usize = 64 * 1024;

/// Largest file an append makes (16 MiB): an append copies the file whole into its
/// replacement (it never writes in place), so this bounds the copy one request costs.
pub const MAX_APPENDED_FILE_BYTES: u64 = 16 << 20;

/// Most entries one list returns: what one answer carries (about 150 KiB of JSON). A
/// directory with more is reported `truncated`, with the first this many it yields,
/// sorted by name.
pub const MAX_LIST_ENTRIES: usize = 1000;

/// Longest path, in bytes (Linux's `PATH_MAX`); each name is bounded by the file system
/// (255 bytes on ext4, xfs and btrfs), which refuses a longer one ([`PathRule::TooLong`]).
pub const MAX_FILE_PATH_BYTES: usize = 4096;

/// Permission bits of a new file whose write names no mode.
pub const DEFAULT_FILE_MODE: u32 = 0o644;

/// Permission bits of a directory `mkdir_parents` makes.
pub const NEW_DIRECTORY_MODE: u32 = 0o755;

/// Prefix of the temporary file a write makes beside its target (followed by 32 random
/// hex digits); renamed onto the target, or removed when the write fails.
pub const TEMP_PREFIX: &str = ".tierbox-write-";

/// Names tried for the temporary file before a write gives up (each is random: a clash
/// means someone is making them on purpose).
const MAX_TEMP_ATTEMPTS: usize = 8;

/// Permission bits a request may name: read, write and execute for user, group and
/// others; never setuid, setgid or sticky.
const PERMISSION_BITS: u32 = 0o777;

/// Which rule a path broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PathRule {
    /// Empty: a read or a write names a file.
    Empty,
    /// Longer than [`MAX_FILE_PATH_BYTES`], or a name longer than the file system takes.
    TooLong,
    /// Holds a NUL byte.
    Nul,
    /// Absolute: paths are relative to the workspace.
    Absolute,
    /// Has a `..` component.
    DotDot,
    /// A component is a symbolic link (never followed).
    Symlink,
    /// The kernel found the lookup leaving the workspace (`RESOLVE_BENEATH`).
    Escapes,
    /// A component that leads further is not a directory.
    NotDirectory,
}

impl PathRule {
    /// The rule's name, as messages show it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Empty => "empty",
            Self::TooLong => "too_long",
            Self::Nul => "nul",
            Self::Absolute => "absolute",
            Self::DotDot => "dot_dot",
            Self::Symlink => "symlink",
            Self::Escapes => "escapes",
            Self::NotDirectory => "not_directory",
        }
    }

    fn reason(self) -> &'static str {
        match self {
            Self::Empty => "a read or write names a file",
            Self::TooLong => "the path or one of its names is longer than allowed",
            Self::Nul => "paths hold no NUL byte",
            Self::Absolute => "paths are relative to the workspace",
            Self::DotDot => "'..' is never resolved",
            Self::Symlink => "a component is a symbolic link, which is never followed",
            Self::Escapes => "the lookup would leave the workspace",
            Self::NotDirectory => "a component that leads further is not a directory",
        }
    }
}

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// A symbolic link (never followed).
    Symlink,
    /// A FIFO (named pipe).
    Fifo,
    /// A unix socket.
    Socket,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// Anything else.
    Unknown,
}

impl FileKind {
    /// The kind of an `st_mode`.
    pub fn of(st_mode: u32) -> Self {
        match FileType::from_raw_mode(st_mode) {
            FileType::RegularFile => Self::File,
            FileType::Directory => Self::Directory,
            FileType::Symlink => Self::Symlink,
            FileType::Fifo => Self::Fifo,
            FileType::Socket => Self::Socket,
            FileType::CharacterDevice => Self::CharDevice,
            FileType::BlockDevice => Self::BlockDevice,
            _ => Self::Unknown,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::File => "regular file",
            Self::Directory => "directory",
            Self::Symlink => "symbolic link",
            Self::Fifo => "FIFO",
            Self::Socket => "socket",
            Self::CharDevice => "character device",
            Self::BlockDevice => "block device",
            Self::Unknown => "file of unknown type",
        }
    }
}

impl std::fmt::Display for FileKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a file operation was refused or failed; nothing was changed (see each variant).
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The workspace or a request's bound, refused by the policy's rules (a run would be
    /// refused the same): `scope.workspace_refused`, `scope.workspace_subdir_invalid`,
    /// `workspace.mode_widened`, `input.read_size_invalid`, …
    #[error(transparent)]
    Rejected(#[from] Rejection),
    /// The path broke a rule ([`PathRule`]).
    #[error("path {path:?} is refused (rule {}): {}", rule.name(), rule.reason())]
    Refused {
        /// The path as given.
        path: String,
        /// The rule.
        rule: PathRule,
    },
    /// Nothing is at the path (or, for a write without `create`, no file to replace).
    #[error("{path:?} does not exist in the workspace")]
    NotFound {
        /// The path as given.
        path: String,
    },
    /// The entry is not a regular file (a FIFO, a socket, a device, a directory).
    #[error("{path:?} is a {kind}, not a regular file: only regular files are read or written")]
    NotRegular {
        /// The path as given.
        path: String,
        /// What it is.
        kind: FileKind,
    },
    /// A list names an entry that is not a directory.
    #[error("{path:?} is a {kind}, not a directory")]
    NotDirectory {
        /// The path as given.
        path: String,
        /// What it is.
        kind: FileKind,
    },
    /// A write to a protected path: a run may not write there either.
    #[error(
        "{path:?} is protected ({why}: {}); a run may not write there, nor may the file face",
        entry.display()
    )]
    Protected {
        /// The path as given.
        path: String,
        /// The protected entry it is or lies in.
        entry: PathBuf,
        /// Which rule protects it.
        why: &'static str,
    },
    /// A path the policy hides from runs (`filesystem.deny_read`).
    #[error("{path:?} is hidden from runs by filesystem.deny_read ({})", entry.display())]
    Denied {
        /// The path as given.
        path: String,
        /// The denied path it is or lies in.
        entry: PathBuf,
    },
    /// A write where runs may only read.
    #[error("{path:?} is read-only for runs ({key}: {})", entry.display())]
    ReadOnly {
        /// The path as given.
        path: String,
        /// The grant that decides it.
        entry: PathBuf,
        /// Its policy key (or `system paths`).
        key: &'static str,
    },
    /// A mode with bits other than permission bits (setuid, setgid, sticky).
    #[error(
        "mode {mode:#o} for {path:?} is refused: only permission bits (0o777) are ever set, never setuid, setgid or sticky"
    )]
    ModeRefused {
        /// The path as given.
        path: String,
        /// The mode asked for.
        mode: u32,
    },
    /// A limit was hit: nothing was written.
    #[error(
        "{what} for {path:?} is {bytes} bytes, more than {key} ({max} bytes); nothing was written"
    )]
    TooLarge {
        /// The path as given.
        path: String,
        /// What is too large.
        what: &'static str,
        /// Its size.
        bytes: u64,
        /// The limit.
        max: u64,
        /// The limit's name.
        key: &'static str,
    },
    /// A write to a workspace in review mode (overlay): its changes are a run's change
    /// set, applied after review; the file face does not write into one.
    #[error(
        "{path:?} was not written: the workspace is in review mode (workspace.mode \"overlay\", or the request's workspace_mode), where it changes only by an applied change set; write it from an overlay run, whose changes are reviewed"
    )]
    ReviewMode {
        /// The path as given.
        path: String,
    },
    /// [`FileFace::stage`] outside review mode, where a write is made, not staged.
    #[error("{path:?} was not staged: the workspace is not in review mode, where writes are made")]
    NotStaged {
        /// The path as given.
        path: String,
    },
    /// A review mode write whose change set could not be kept (over the caps on kept
    /// change sets, or the state directory refused it): nothing was written.
    #[error("{path:?} was not written: its change set could not be kept: {why}")]
    NotKept {
        /// The path as given.
        path: String,
        /// Why (the change store's error).
        why: String,
        /// Its stable code (`review.*`).
        code: &'static str,
    },
    /// The workspace's owner may not write the directory (the face runs as root and
    /// checks for it as the kernel would for that owner).
    #[error(
        "{path:?} was not written: {} is not writable by the workspace's owner (uid {uid}), as whom a run writes",
        dir.display()
    )]
    NotWritable {
        /// The path as given.
        path: String,
        /// The directory.
        dir: PathBuf,
        /// The workspace's owner.
        uid: u32,
    },
    /// Something on the path was swapped while the face worked on it: nothing was
    /// written.
    #[error("{path:?} changed while it was being worked on ({what}); nothing was written")]
    Changed {
        /// The path as given.
        path: String,
        /// What changed.
        what: &'static str,
    },
    /// A file system call failed.
    #[error("{what} {path:?}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path as given.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The audit log the policy names could not be opened: nothing was written.
    #[error("audit log: {0}")]
    Audit(String),
}

impl FileError {
    /// The stable code (`file.*`, or the rejection's).
    pub fn code(&self) -> &'static str {
        match self {
            Self::Rejected(r) => r.code(),
            Self::Refused { .. } => "file.refused",
            Self::NotFound { .. } => "file.not_found",
            Self::NotRegular { .. } => "file.not_regular",
            Self::NotDirectory { .. } => "file.not_directory",
            Self::Protected { .. } => "file.protected",
            Self::Denied { .. } => "file.denied",
            Self::ReadOnly { .. } => "file.read_only",
            Self::ModeRefused { .. } => "file.mode_refused",
            Self::TooLarge { .. } => "file.too_large",
            Self::ReviewMode { .. } => "file.review_mode",
            Self::NotStaged { .. } => "file.not_staged",
            Self::NotKept { code, .. } => code,
            Self::NotWritable { .. } => "file.not_writable",
            Self::Changed { .. } => "file.changed",
            Self::Io { .. } => "file.io",
            Self::Audit(_) => "audit.unavailable",
        }
    }

    /// The rule a [`FileError::Refused`] names.
    pub fn rule(&self) -> Option<PathRule> {
        match self {
            Self::Refused { rule, .. } => Some(*rule),
            _ => None,
        }
    }
}

/// A review mode write, checked and not made ([`FileFace::stage`]): what a change set
/// holds for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Staged {
    /// The file, relative to the workspace.
    pub rel: PathBuf,
    /// Its whole new content (what it held first, for an append).
    pub content: Vec<u8>,
    /// Its permission bits.
    pub mode: u32,
    /// Whether the workspace has no file there.
    pub created: bool,
    /// Whether the bytes go after what the file holds.
    pub appended: bool,
    /// The permission bits of each directory on the way that the workspace has, from the
    /// top; the directories past them are new (made with [`NEW_DIRECTORY_MODE`]).
    pub dir_modes: Vec<u32>,
}

/// How a write treats what is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    /// Create the file when it does not exist (default true); without it a missing file
    /// is [`FileError::NotFound`].
    pub create: bool,
    /// Append to what the file holds instead of replacing it (default false): the file is
    /// still replaced whole, by a copy with the bytes added.
    pub append: bool,
    /// Make the missing directories on the way (default false), each the workspace
    /// owner's with [`NEW_DIRECTORY_MODE`].
    pub mkdir_parents: bool,
    /// Permission bits (at most 0o777). Default: an existing file's (without setuid,
    /// setgid or sticky), else [`DEFAULT_FILE_MODE`].
    pub mode: Option<u32>,
}

impl Default for WriteOptions {
    /// Replace or create the file, in an existing directory, with its own mode or 0o644.
    fn default() -> Self {
        Self {
            create: true,
            append: false,
            mkdir_parents: false,
            mode: None,
        }
    }
}

/// What a read returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRead {
    /// The file's size when it was read, in bytes.
    pub size: u64,
    /// Where the bytes start.
    pub offset: u64,
    /// The bytes, at most the read's `max_bytes`.
    pub bytes: Vec<u8>,
    /// Whether the file goes on past them (read on from `offset + bytes.len()`).
    pub truncated: bool,
    /// Its mode bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// When it was last modified, milliseconds since the Unix epoch.
    pub mtime_unix_ms: i64,
}

/// What a write did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct FileWritten {
    /// The file, relative to the workspace.
    pub path: String,
    /// Bytes the request sent.
    pub bytes_written: u64,
    /// The file's size now, in bytes.
    pub size: u64,
    /// Hex SHA-256 of the file's content now.
    pub sha256: String,
    /// Its permission bits now.
    pub mode: u32,
    /// Its owner now (the workspace's).
    pub uid: u32,
    /// Its group now.
    pub gid: u32,
    /// Whether the file was new.
    pub created: bool,
    /// Whether the bytes were appended to what it held.
    pub appended: bool,
    /// In review mode: the change set the write was kept as (the workspace is unchanged
    /// until it is applied: `tierbox changes apply ID`, `POST /v1/changes/{id}/apply`);
    /// the other fields say what the file will be then. Absent when the write was made,
    /// or when it would change nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept_as: Option<String>,
    /// In review mode: the caller's own oldest kept change sets removed to make room for
    /// this one (the caps on kept sets, `workspace.keep_changes_*`), oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evicted: Vec<String>,
    /// Why the write is missing from the audit log the policy names, when it is (the
    /// file was written).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit_error: Option<String>,
}

/// An entry's metadata (never following a symlink).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct FileStat {
    /// The entry, relative to the workspace (empty: the workspace itself).
    pub path: String,
    /// What it is.
    pub kind: FileKind,
    /// Its size in bytes (a symlink's: its target's length).
    pub size: u64,
    /// Its mode bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// When it was last modified, milliseconds since the Unix epoch.
    pub mtime_unix_ms: i64,
    /// Its owner.
    pub uid: u32,
    /// Its group.
    pub gid: u32,
}

/// One entry of a directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct FileEntry {
    /// Its name (UTF-8; an invalid sequence replaced by U+FFFD, with `name_base64`).
    pub name: String,
    /// The name's bytes, base64, exactly when `name` is lossy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name_base64: Option<String>,
    /// What it is.
    pub kind: FileKind,
    /// Its size in bytes.
    pub size: u64,
    /// Its mode bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// When it was last modified, milliseconds since the Unix epoch.
    pub mtime_unix_ms: i64,
}

/// A directory's entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct FileList {
    /// The directory, relative to the workspace (empty: the workspace itself).
    pub path: String,
    /// Its entries, sorted by name; those the policy hides from runs are left out.
    pub entries: Vec<FileEntry>,
    /// Whether it has more than [`MAX_LIST_ENTRIES`] entries (these are the first it
    /// yielded).
    pub truncated: bool,
}

impl crate::Runner {
    /// The file face of this runner's workspace, narrowed to `workspace` (a request's
    /// `workspace`: plain names of an existing subdirectory) and in the mode a request's
    /// `workspace_mode` asks for: checked by the scope rules a run of the policy is, and
    /// held ([`FileFace::open`]).
    pub fn file_face(
        &self,
        workspace: Option<&str>,
        mode: Option<WorkspaceMode>,
    ) -> Result<FileFace, FileError> {
        let plan = tierbox_policy::validate::workspace_plan(
            self.policy(),
            &self.context(),
            workspace,
            mode,
        )?;
        FileFace::open(&plan)
    }

    /// [`FileFace::write`] for `owner` (who asked) — in review mode [`FileFace::stage`] and
    /// the staged file kept as a change set of `owner`'s ([`FileWritten::kept_as`], under
    /// the policy's caps on kept sets) —, recorded as a `file.written` event in
    /// the audit log when the policy names one: the workspace, the path, the bytes
    /// written, the file's SHA-256 and owner. `request` is the request as the caller sent
    /// it (the record carries its digest). A log that cannot be opened refuses the write
    /// before anything is written ([`FileError::Audit`]); one that fails to take the
    /// record after the write is named in [`FileWritten::audit_error`]. Blocking I/O
    /// (fsync).
    pub fn write_file(
        &self,
        owner: &str,
        face: &FileFace,
        path: &str,
        data: &[u8],
        options: WriteOptions,
        request: &serde_json::Value,
    ) -> Result<FileWritten, FileError> {
        let auditor = match self.policy().audit.log {
            Some(_) => Some(
                self.auditor()
                    .map_err(|e| FileError::Audit(e.to_string()))?,
            ),
            None => None,
        };
        let mut written = match face.in_review_mode() {
            true => {
                let staged = face.stage(path, data, options)?;
                keep::keep(&self.options().state_dir, owner, face, path, staged, data)?
            }
            false => face.write(path, data, options)?,
        };
        if let Some(auditor) = auditor
            && let Err(e) = auditor.record_file_written(request, face.workspace(), owner, &written)
        {
            written.audit_error = Some(e.to_string());
        }
        Ok(written)
    }
}

#[cfg(test)]
#[path = "files_tests.rs"]
mod tests;
