//! Small files a supervisor keeps in its state directory for the next process (the walk
//! of `/etc`, the user-namespace probe): read only when private to the state directory's
//! owner, written whole.
//!
//! ```
//! # #[cfg(unix)] {
//! use tierbox_policy::state_file::{read_private, write_private};
//! let state = tempfile::tempdir().unwrap();
//! let file = state.path().join("cache/example");
//! write_private(&file, "hello").unwrap();
//! assert_eq!(read_private(&file, state.path(), 1024).as_deref(), Some("hello"));
//! # }
//! ```

use std::io::{Read, Write};
use std::path::Path;

/// `file`'s text if `state_dir` is this user's to trust ([`crate::trust::check_dir`]) and
/// `file` is a regular file (not a symlink), owned by the owner of `state_dir`, writable by
/// nobody else, and at most `max_bytes` long; `None` otherwise (a missing or foreign file
/// is simply not used).
pub fn read_private(file: &Path, state_dir: &Path, max_bytes: u64) -> Option<String> {
    // Nothing is read from a state directory another user could have prepared.
    #[cfg(unix)]
    if !trusted_recently(state_dir) {
        return None;
    }
    let meta = std::fs::symlink_metadata(file).ok()?;
    if !meta.file_type().is_file() || meta.len() > max_bytes || !private_to(&meta, state_dir) {
        return None;
    }
    let mut f = std::fs::File::open(file).ok()?;
    // The file opened is the one checked (not swapped for a link since).
    if !same_file(&f.metadata().ok()?, &meta) {
        return None;
    }
    let mut text = String::new();
    Read::take(&mut f, max_bytes)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// Writes `text` to `file` (mode 0600, its directory created 0700): a new file renamed
/// over the old, so a reader sees one whole version or the previous one. The data is not
/// synced to disk: these files are caches, each read back only after it parses and
/// matches what it describes, so one torn by a crash is a miss, never a wrong answer —
/// and a sync costs a cold `tierbox run` more than the rest of its state-file work. Refused
/// (`PermissionDenied`) where the directory, or the nearest one above it that exists, is
/// not this user's to trust ([`crate::trust::check_dir`]).
pub fn write_private(file: &Path, text: &str) -> std::io::Result<()> {
    let dir = file
        .parent()
        .ok_or_else(|| std::io::Error::other("no directory"))?;
    // Nothing is written where another user could have prepared the directory.
    #[cfg(unix)]
    crate::trust::check_dir_or_nearest(dir, "the state directory")
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::PermissionDenied, e))?;
    create_private_dir(dir)?;
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    ));
    let mut f = new_private_file(&tmp)?;
    let written = f.write_all(text.as_bytes());
    drop(f);
    match written.and_then(|()| std::fs::rename(&tmp, file)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// How long a state directory found trustworthy ([`crate::trust::check_dir`]) is taken
/// as such before it is checked again, in milliseconds: cache reads happen on every run,
/// and the check walks every directory above it.
pub const TRUST_RECHECK_MS: u64 = 1000;

/// [`crate::trust::check_dir`] of `state_dir`, remembered for [`TRUST_RECHECK_MS`] when it
/// passes (a failure is never remembered).
#[cfg(unix)]
fn trusted_recently(state_dir: &Path) -> bool {
    use std::sync::Mutex;
    use std::time::{Duration, Instant};
    static PASSED: Mutex<Vec<(std::path::PathBuf, Instant)>> = Mutex::new(Vec::new());
    let recheck = Duration::from_millis(TRUST_RECHECK_MS);
    let mut passed = PASSED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    passed.retain(|(_, at)| at.elapsed() < recheck);
    if passed.iter().any(|(d, _)| d == state_dir) {
        return true;
    }
    let ok = crate::trust::check_dir(state_dir, "the state directory").is_ok();
    if ok {
        passed.push((state_dir.to_path_buf(), Instant::now()));
    }
    ok
}

#[cfg(unix)]
fn private_to(meta: &std::fs::Metadata, state_dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(dir) = std::fs::metadata(state_dir) else {
        return false;
    };
    meta.uid() == dir.uid() && meta.mode() & 0o022 == 0
}

#[cfg(not(unix))]
fn private_to(_meta: &std::fs::Metadata, _state_dir: &Path) -> bool {
    false
}

#[cfg(unix)]
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

#[cfg(not(unix))]
fn same_file(_a: &std::fs::Metadata, _b: &std::fs::Metadata) -> bool {
    false
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}

#[cfg(unix)]
fn new_private_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

#[cfg(not(unix))]
fn new_private_file(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
}
