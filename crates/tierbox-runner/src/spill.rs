//! Spill files: a stream's output written to disk beside what a run keeps in memory
//! (`output.spill` for a run's whole streams, `background.spill_bytes` for the first
//! bytes of a background process's), in `<state dir>/spill/`.
//!
//! # Invariants
//!
//! - **Owned by the supervisor, reached through descriptors.** The directory is opened
//!   `O_DIRECTORY | O_NOFOLLOW` beneath the trusted state directory (created 0700 when
//!   missing) and must be a directory of the supervisor's own uid that no one else may
//!   enter (checked with `fstat` on the open descriptor); a symlink or a foreign directory
//!   there is refused. Every file is created through that descriptor with `O_CREAT |
//!   O_EXCL | O_NOFOLLOW`, mode 0600 (never an existing file, never through a symlink),
//!   and checked with `fstat` again; sweeps read, lock and unlink by name only beneath
//!   that descriptor.
//! - **A lifetime.** A spill file is removed once `output.spill_keep_secs` have passed
//!   since it was last written: by the next run's sweep ([`sweep_expired`], at the start
//!   of every run of this state directory, when the directory exists), by a long-lived
//!   server's periodic sweep (every [`SPILL_SWEEP_INTERVAL_SECS`]), and by `tierbox
//!   doctor`, which reports what is left ([`SpillDir::usage`]). A file that is still being
//!   written is never removed: its writer holds a shared `flock` on it, and a sweep
//!   removes a file only while it holds an exclusive one, taken without waiting. A
//!   background process's spill file goes when its record does.
//! - **A cap, reserved before it is used.** All the files of the directory together hold
//!   at most `output.spill_total_bytes`. A file grows its size (sparsely, `ftruncate`) by
//!   up to [`SPILL_RESERVE_BYTES`] before it writes into that room, under the directory's
//!   lock (`flock` on a descriptor of its own), counting every file's size — the room
//!   other writers reserved, in this process or another, included. So however many runs
//!   spill at once the files never pass the cap; a file is cut back to what it holds when
//!   it is finished.
//! - **Never silently partial.** A spill with no room at its start is refused (no file,
//!   and `spill_error` says why); one that runs out of room or reaches its own limit
//!   stops there and its `spill_error` says it holds only the first bytes and why.
//!
//! Not covered: the disk filling up for reasons of its own (a write error, reported in
//! `spill_error` the same way), and files a supervisor killed outright left with their
//! reservation (counted at their reserved size until they expire).

use std::ffi::CStr;
use std::fs::File;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags};
use rustix::io::Errno;

/// The spill directory's name in the state directory.
pub const SPILL_DIR: &str = "spill";

/// Room a spill file reserves at a time under the cap, in bytes (1 MiB): how often its
/// writer takes the directory's lock and counts the directory (once per MiB written).
pub const SPILL_RESERVE_BYTES: u64 = 1 << 20;

/// How often a long-lived server sweeps expired spill files, in seconds.
pub const SPILL_SWEEP_INTERVAL_SECS: u64 = 60;

/// Mode of the spill directory.
const DIR_MODE: u32 = 0o700;

/// Mode of a spill file.
const FILE_MODE: u32 = 0o600;

/// Why the spill directory or a spill file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SpillError {
    /// A system call on the directory or a file failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// The operation (`openat`, `mkdirat`, `fstat`, …).
        what: &'static str,
        /// The directory or file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The directory (or a file just created in it) is not the supervisor's own and
    /// private.
    #[error(
        "{path} is not the supervisor's own private spill {kind} ({why}); remove it, or make it owned by uid {uid} with mode {mode:o}"
    )]
    Untrusted {
        /// `directory` or `file`.
        kind: &'static str,
        /// Its path.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
        /// The supervisor's uid.
        uid: u32,
        /// The mode it must have.
        mode: u32,
    },
    /// The cap on all spill files is reached: this spill is refused.
    #[error(
        "spill refused: the spill files in {dir} hold {used} bytes, output.spill_total_bytes is {cap}"
    )]
    Full {
        /// The spill directory.
        dir: PathBuf,
        /// Bytes its files hold (reservations included).
        used: u64,
        /// The cap.
        cap: u64,
    },
}

impl SpillError {
    /// As the runner's I/O error (`what` said first).
    pub(crate) fn into_run_error(self, what: &'static str) -> crate::RunError {
        let kind = match &self {
            Self::Io { source, .. } => source.kind(),
            _ => std::io::ErrorKind::PermissionDenied,
        };
        crate::RunError::Io {
            what,
            source: std::io::Error::new(kind, self.to_string()),
        }
    }
}

/// What the spill directory holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SpillUsage {
    /// Spill files.
    pub files: u64,
    /// Their sizes together, in bytes (the room files still being written reserved
    /// included).
    pub bytes: u64,
    /// When the oldest was last written, unix seconds.
    pub oldest_unix_secs: Option<u64>,
}

/// The spill directory, open.
#[derive(Debug, Clone)]
pub struct SpillDir {
    fd: Arc<OwnedFd>,
    path: PathBuf,
}

/// One regular file of the directory.
struct Entry {
    name: std::ffi::CString,
    size: u64,
    mtime_secs: i64,
}

impl SpillDir {
    /// Opens `<state_dir>/spill`, creating it (0700) when missing, and checks it.
    pub fn open(state_dir: &Path) -> Result<Self, SpillError> {
        let path = state_dir.join(SPILL_DIR);
        Self::open_at(state_dir, true)?.ok_or_else(|| SpillError::Io {
            what: "openat",
            path,
            source: std::io::ErrorKind::NotFound.into(),
        })
    }

    /// Opens `<state_dir>/spill` when it exists, and checks it.
    pub fn open_existing(state_dir: &Path) -> Result<Option<Self>, SpillError> {
        Self::open_at(state_dir, false)
    }

    fn open_at(state_dir: &Path, create: bool) -> Result<Option<Self>, SpillError> {
        let path = state_dir.join(SPILL_DIR);
        let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let state = match rustix::fs::open(state_dir, dir_flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) if !create => return Ok(None),
            Err(e) => return Err(io("open", state_dir)(e)),
        };
        let open = || {
            rustix::fs::openat(
                &state,
                SPILL_DIR,
                dir_flags | OFlags::NOFOLLOW,
                Mode::empty(),
            )
        };
        let fd = match open() {
            Ok(fd) => fd,
            Err(Errno::NOENT) if create => {
                match rustix::fs::mkdirat(&state, SPILL_DIR, Mode::from_raw_mode(DIR_MODE)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(io("mkdirat", &path)(e)),
                }
                open().map_err(io("openat", &path))?
            }
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP | Errno::NOTDIR) => {
                return Err(untrusted(
                    "directory",
                    &path,
                    "a symlink or not a directory".to_owned(),
                ));
            }
            Err(e) => return Err(io("openat", &path)(e)),
        };
        let st = rustix::fs::fstat(&fd).map_err(io("fstat", &path))?;
        let uid = rustix::process::geteuid().as_raw();
        if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
            return Err(untrusted("directory", &path, "not a directory".to_owned()));
        }
        if st.st_uid != uid {
            return Err(untrusted(
                "directory",
                &path,
                format!("owned by uid {}", st.st_uid),
            ));
        }
        if st.st_mode & 0o077 != 0 {
            return Err(untrusted(
                "directory",
                &path,
                format!("mode {:o}", st.st_mode & 0o7777),
            ));
        }
        Ok(Some(Self {
            fd: Arc::new(fd),
            path,
        }))
    }

    /// The directory's path (for messages; nothing is done through it).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The regular files of the directory, with their sizes and modification times.
    fn entries(&self) -> Vec<Entry> {
        let Ok(dir) = rustix::fs::Dir::read_from(&*self.fd) else {
            return Vec::new();
        };
        dir.flatten()
            .filter(|e| e.file_name().to_bytes() != b"." && e.file_name().to_bytes() != b"..")
            .filter_map(|e| {
                let st =
                    rustix::fs::statat(&*self.fd, e.file_name(), AtFlags::SYMLINK_NOFOLLOW).ok()?;
                (FileType::from_raw_mode(st.st_mode) == FileType::RegularFile).then(|| Entry {
                    name: e.file_name().to_owned(),
                    size: u64::try_from(st.st_size).unwrap_or(0),
                    mtime_secs: st.st_mtime,
                })
            })
            .collect()
    }

    /// What the directory holds.
    pub fn usage(&self) -> SpillUsage {
        let entries = self.entries();
        SpillUsage {
            files: entries.len() as u64,
            bytes: entries.iter().map(|e| e.size).sum(),
            oldest_unix_secs: entries
                .iter()
                .map(|e| u64::try_from(e.mtime_secs).unwrap_or(0))
                .min(),
        }
    }

    /// Removes every spill file last written `keep` or more ago that no writer holds;
    /// returns how many were removed.
    pub fn sweep(&self, keep: Duration) -> usize {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let keep = keep.as_secs();
        self.entries()
            .into_iter()
            .filter(|e| now.saturating_sub(u64::try_from(e.mtime_secs).unwrap_or(0)) >= keep)
            .filter(|e| self.remove_if_free(&e.name))
            .count()
    }

    /// Removes `name` while holding its exclusive lock, taken without waiting (a writer
    /// holds a shared one); whether it did.
    fn remove_if_free(&self, name: &CStr) -> bool {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let Ok(fd) = rustix::fs::openat(&*self.fd, name, flags, Mode::empty()) else {
            return false;
        };
        if rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive).is_err() {
            return false;
        }
        rustix::fs::unlinkat(&*self.fd, name, AtFlags::empty()).is_ok()
    }

    /// Takes the directory's lock (on a descriptor of its own, so two writers of one
    /// process exclude each other too), waiting for it; released when dropped.
    fn lock(&self) -> Result<OwnedFd, SpillError> {
        let fd = rustix::fs::openat(
            &*self.fd,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(io("openat", &self.path))?;
        rustix::fs::flock(&fd, FlockOperation::LockExclusive).map_err(io("flock", &self.path))?;
        Ok(fd)
    }

    /// Creates the spill file `name` (0600, exclusively, beneath the directory's
    /// descriptor) that will hold at most `max_bytes` (`limit` names what sets that),
    /// with the directory's files together under `total_bytes`. Refused with
    /// [`SpillError::Full`] when they already reach it.
    pub fn create(
        &self,
        name: &str,
        max_bytes: u64,
        limit: &'static str,
        total_bytes: u64,
    ) -> Result<SpillFile, SpillError> {
        let path = self.path.join(name);
        let _lock = self.lock()?;
        let used: u64 = self.entries().iter().map(|e| e.size).sum();
        if used >= total_bytes {
            return Err(SpillError::Full {
                dir: self.path.clone(),
                used,
                cap: total_bytes,
            });
        }
        let fd = rustix::fs::openat(
            &*self.fd,
            name,
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(FILE_MODE),
        )
        .map_err(io("openat", &path))?;
        let st = rustix::fs::fstat(&fd).map_err(io("fstat", &path))?;
        let uid = rustix::process::geteuid().as_raw();
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile
            || st.st_uid != uid
            || st.st_mode & 0o077 != 0
        {
            let _ = rustix::fs::unlinkat(&*self.fd, name, AtFlags::empty());
            return Err(SpillError::Untrusted {
                kind: "file",
                path,
                why: format!("uid {}, mode {:o}", st.st_uid, st.st_mode & 0o7777),
                uid,
                mode: FILE_MODE,
            });
        }
        rustix::fs::flock(&fd, FlockOperation::LockShared).map_err(io("flock", &path))?;
        // Room is reserved at the first write: a stream that stays empty takes none.
        Ok(SpillFile {
            file: File::from(fd),
            dir: self.clone(),
            name: name.to_owned(),
            path,
            written: 0,
            reserved: 0,
            max: max_bytes,
            limit,
            cap: total_bytes,
            error: None,
            remove_on_drop: false,
        })
    }
}

/// `SpillError::Io` of the system call `what` on `path`.
fn io(what: &'static str, path: &Path) -> impl FnOnce(Errno) -> SpillError {
    let path = path.to_path_buf();
    move |e| SpillError::Io {
        what,
        path,
        source: e.into(),
    }
}

fn untrusted(kind: &'static str, path: &Path, why: String) -> SpillError {
    SpillError::Untrusted {
        kind,
        path: path.to_path_buf(),
        why,
        uid: rustix::process::geteuid().as_raw(),
        mode: DIR_MODE,
    }
}

/// A spill file being written (see the [module documentation](self)).
#[derive(Debug)]
pub struct SpillFile {
    file: File,
    dir: SpillDir,
    name: String,
    path: PathBuf,
    written: u64,
    /// The file's size: the room reserved under the cap, `written` or more.
    reserved: u64,
    max: u64,
    /// The policy key that sets `max`.
    limit: &'static str,
    cap: u64,
    error: Option<String>,
    remove_on_drop: bool,
}

impl SpillFile {
    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Why the file holds less than it was given, once it does.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Removes the file when this is dropped (a background process's).
    pub fn remove_on_drop(mut self) -> Self {
        self.remove_on_drop = true;
        self
    }

    /// Appends `chunk`, as much of it as the file's limit and the cap allow; past them
    /// the file stops growing and [`SpillFile::error`] says why.
    pub fn write(&mut self, chunk: &[u8]) {
        let mut rest = chunk;
        while !rest.is_empty() && self.error.is_none() {
            if self.written >= self.max {
                self.stop(format!("it reached {} = {} bytes", self.limit, self.max));
                break;
            }
            if self.written == self.reserved && !self.reserve() {
                break;
            }
            let room = usize::try_from(self.reserved - self.written).unwrap_or(usize::MAX);
            let (now, later) = rest.split_at(room.min(rest.len()));
            if let Err(e) = self.file.write_all(now) {
                self.error = Some(format!("write {}: {e}", self.path.display()));
                break;
            }
            self.written += now.len() as u64;
            rest = later;
        }
    }

    fn stop(&mut self, why: String) {
        self.error = Some(format!(
            "the spill file holds the first {} bytes of the stream only: {why}",
            self.written
        ));
    }

    /// Reserves the next room under the cap, counting the directory under its lock.
    fn reserve(&mut self) -> bool {
        let lock = self.dir.lock();
        let used = match &lock {
            Ok(_) => self.dir.entries().iter().map(|e| e.size).sum(),
            Err(e) => {
                self.error = Some(e.to_string());
                return false;
            }
        };
        self.grow(used)
    }

    /// Grows the file by the room `used` (the directory's bytes) leaves, up to one
    /// reservation and the file's own limit; `false` (and the reason kept) when none is.
    fn grow(&mut self, used: u64) -> bool {
        let room = self.cap.saturating_sub(used);
        let step = SPILL_RESERVE_BYTES
            .min(room)
            .min(self.max.saturating_sub(self.reserved));
        if step == 0 {
            if self.reserved < self.max {
                self.stop(format!(
                    "the spill files in {} reached output.spill_total_bytes = {} bytes",
                    self.dir.path.display(),
                    self.cap
                ));
            }
            return false;
        }
        match rustix::fs::ftruncate(&self.file, self.reserved + step) {
            Ok(()) => {
                self.reserved += step;
                true
            }
            Err(e) => {
                self.error = Some(format!("ftruncate {}: {e}", self.path.display()));
                false
            }
        }
    }

    /// Reads exactly `buf.len()` bytes at `offset` (within what was written).
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.read_exact_at(buf, offset)
    }

    /// Ends the writing: the file is cut to what it holds and released (sweeps may
    /// remove it once it expires). Returns its path and why it is not the whole stream,
    /// if it is not.
    pub fn finish(mut self) -> (PathBuf, Option<String>) {
        if let Err(e) = rustix::fs::ftruncate(&self.file, self.written)
            && self.error.is_none()
        {
            self.error = Some(format!("ftruncate {}: {e}", self.path.display()));
        }
        (self.path.clone(), self.error.take())
    }
}

impl Drop for SpillFile {
    fn drop(&mut self) {
        if self.remove_on_drop {
            let _ = rustix::fs::unlinkat(&*self.dir.fd, self.name.as_str(), AtFlags::empty());
        }
    }
}

/// Removes the expired spill files of `state_dir` (the start of a run, a server's
/// periodic sweep): those last written `keep_secs` or more ago that no writer holds.
/// Nothing when the directory does not exist or cannot be trusted (the run that spills
/// reports that).
pub fn sweep_expired(state_dir: &Path, keep_secs: u64) -> usize {
    match SpillDir::open_existing(state_dir) {
        Ok(Some(dir)) => dir.sweep(Duration::from_secs(keep_secs)),
        _ => 0,
    }
}

#[cfg(test)]
#[path = "spill_tests.rs"]
mod tests;
