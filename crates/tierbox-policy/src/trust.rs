//! Whether a file or directory another user could have prepared is this user's to trust.
//!
//! A supervisor keeps its state directory, reads a token file and talks to a daemon's
//! socket by name. Each must belong to the invoking user (or root) and be writable by
//! nobody else, and so must every directory above it: otherwise another local user could
//! have made it, or could swap what is below it, and learn the token, plant a socket that
//! collects runs and their secrets, or have the supervisor write where they choose. A
//! world-writable directory with the sticky bit (`/tmp`) is accepted as a parent when the
//! entry below it is ours, since only its owner can remove or rename that entry.
//!
//! ```
//! # #[cfg(unix)] {
//! use tierbox_policy::trust::{check_dir, Untrusted};
//! use std::os::unix::fs::PermissionsExt;
//!
//! let base = tempfile::tempdir().unwrap();
//! let state = base.path().join("state");
//! std::fs::create_dir(&state).unwrap();
//! std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
//! assert!(check_dir(&state, "the state directory").is_ok());
//!
//! std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
//! let e: Untrusted = check_dir(&state, "the state directory").unwrap_err();
//! assert!(e.to_string().contains("mode 0777"), "{e}");
//! # }
//! ```

#[cfg(unix)]
use std::path::Path;
use std::path::PathBuf;

/// Why a path is not trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distrust {
    /// Owned by a uid that is neither the invoking user's nor root's.
    ForeignOwner,
    /// Writable by its group or by others (and not a sticky directory with our entry).
    WritableByOthers,
    /// A symbolic link owned by someone else, or where a directory or file must be.
    Link,
    /// Not of the kind needed (a directory, a regular file, a socket).
    WrongKind,
}

/// A path that is not this user's to trust: which, whose, its mode, why, and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Untrusted {
    /// What the path is for ("the state directory", "the token file", …).
    pub what: String,
    /// The path checked: the entry itself or the directory above it that failed.
    pub path: PathBuf,
    /// Its owner.
    pub owner: u32,
    /// Its permission bits (`st_mode & 07777`).
    pub mode: u32,
    /// Why it is refused.
    pub why: Distrust,
    /// The invoking user's effective uid.
    pub uid: u32,
}

impl std::fmt::Display for Untrusted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (rule, fix) = match self.why {
            Distrust::ForeignOwner => (
                format!("owned by uid {}, neither this user (uid {}) nor root", self.owner, self.uid),
                "another user may have prepared it: remove it, or choose a path of your own (e.g. --state-dir under your home)"
                    .to_owned(),
            ),
            Distrust::WritableByOthers => (
                "writable by its group or others".to_owned(),
                format!("chmod go-w {}", self.path.display()),
            ),
            Distrust::Link => (
                "a symbolic link not made by this user or root".to_owned(),
                "remove the link and use the real path".to_owned(),
            ),
            Distrust::WrongKind => (
                "not the kind of file it must be".to_owned(),
                "remove it so it can be made again".to_owned(),
            ),
        };
        write!(
            f,
            "{} cannot be trusted: {} is {rule} (owner uid {}, mode {:04o}); {fix}",
            self.what,
            self.path.display(),
            self.owner,
            self.mode
        )
    }
}

impl std::error::Error for Untrusted {}

/// The invoking user's effective uid.
#[cfg(unix)]
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Whether `uid` — a file's owner or a peer's credentials — is the invoking user or root.
#[cfg(unix)]
pub fn trusted_uid(uid: u32) -> bool {
    uid == euid() || uid == 0
}

/// Checks the directory `dir` (which must exist) and every directory above it.
#[cfg(unix)]
pub fn check_dir(dir: &Path, what: &str) -> Result<(), Untrusted> {
    check(dir, what, Kind::Dir)
}

/// [`check_dir`] of `dir` when it exists, else of the nearest directory above it that
/// does (where `dir` would be created).
#[cfg(unix)]
pub fn check_dir_or_nearest(dir: &Path, what: &str) -> Result<(), Untrusted> {
    match dir.ancestors().find(|d| d.exists()) {
        Some(existing) => check_dir(existing, what),
        None => Ok(()),
    }
}

/// Checks the regular file `file` (which must exist) and every directory above it.
#[cfg(unix)]
pub fn check_file(file: &Path, what: &str) -> Result<(), Untrusted> {
    check(file, what, Kind::File)
}

/// Checks the unix socket `socket` (which must exist) and every directory above it.
#[cfg(unix)]
pub fn check_socket(socket: &Path, what: &str) -> Result<(), Untrusted> {
    check(socket, what, Kind::Socket)
}

#[cfg(unix)]
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
    Socket,
}

#[cfg(unix)]
fn check(path: &Path, what: &str, kind: Kind) -> Result<(), Untrusted> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let uid = euid();
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().map_or_else(|_| path.to_path_buf(), |d| d.join(path))
    };
    let refuse = |p: &Path, meta: &std::fs::Metadata, why| Untrusted {
        what: what.to_owned(),
        path: p.to_path_buf(),
        owner: meta.uid(),
        mode: meta.mode() & 0o7777,
        why,
        uid,
    };
    let ours = |meta: &std::fs::Metadata| meta.uid() == uid || meta.uid() == 0;
    // The path as given: a link in it must be ours or root's (a link in a sticky
    // directory made by someone else could point anywhere).
    for prefix in absolute.ancestors() {
        if let Ok(meta) = std::fs::symlink_metadata(prefix)
            && meta.file_type().is_symlink()
            && !ours(&meta)
        {
            return Err(refuse(prefix, &meta, Distrust::Link));
        }
    }
    // The path itself: ours, of its kind, and writable by nobody else.
    let real = std::fs::canonicalize(&absolute).unwrap_or(absolute);
    let meta = std::fs::metadata(&real).map_err(|_| Untrusted {
        what: what.to_owned(),
        path: real.clone(),
        owner: 0,
        mode: 0,
        why: Distrust::WrongKind,
        uid,
    })?;
    let kind_ok = match kind {
        Kind::Dir => meta.is_dir(),
        Kind::File => meta.is_file(),
        Kind::Socket => meta.file_type().is_socket(),
    };
    if !kind_ok {
        return Err(refuse(&real, &meta, Distrust::WrongKind));
    }
    if !ours(&meta) {
        return Err(refuse(&real, &meta, Distrust::ForeignOwner));
    }
    // A socket's mode does not matter to whoever connects: only its directory's does.
    if kind != Kind::Socket && meta.mode() & 0o022 != 0 {
        return Err(refuse(&real, &meta, Distrust::WritableByOthers));
    }
    // Every directory above it: ours or root's, and not writable by others unless sticky
    // (then the entry below, just checked, must be ours: only its owner can replace it).
    let mut below_ours = meta.uid() == uid || meta.uid() == 0;
    for dir in real.ancestors().skip(1) {
        let Ok(meta) = std::fs::metadata(dir) else {
            continue;
        };
        if !ours(&meta) {
            return Err(refuse(dir, &meta, Distrust::ForeignOwner));
        }
        let sticky = meta.mode() & 0o1000 != 0;
        if meta.mode() & 0o022 != 0 && !(sticky && below_ours) {
            return Err(refuse(dir, &meta, Distrust::WritableByOthers));
        }
        below_ours = true;
    }
    Ok(())
}

#[cfg(test)]
#[cfg(unix)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path, m: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    }

    #[test]
    fn a_private_directory_under_a_sticky_one_is_trusted_and_a_shared_one_is_not() {
        let base = tempfile::tempdir().unwrap();
        let sticky = base.path().join("tmp");
        std::fs::create_dir(&sticky).unwrap();
        mode(&sticky, 0o1777);
        let state = sticky.join("tierbox-x");
        std::fs::create_dir(&state).unwrap();
        mode(&state, 0o711);
        assert!(check_dir(&state, "the state directory").is_ok());
        // Not sticky: anyone could rename our directory away and put theirs there.
        mode(&sticky, 0o777);
        let e = check_dir(&state, "the state directory").unwrap_err();
        assert_eq!(
            (e.why, e.path.clone()),
            (Distrust::WritableByOthers, sticky.clone())
        );
        assert!(e.to_string().contains("chmod go-w"), "{e}");
        mode(&sticky, 0o1777);
        mode(&state, 0o777);
        let e = check_dir(&state, "the state directory").unwrap_err();
        assert_eq!(e.why, Distrust::WritableByOthers);
        assert!(e.to_string().contains("mode 0777"), "{e}");
    }

    #[test]
    fn another_users_directory_file_or_link_is_refused_with_its_owner() {
        if euid() != 0 {
            println!(
                "SKIP another_users_directory_file_or_link_is_refused_with_its_owner: needs root to chown"
            );
            return;
        }
        let base = tempfile::tempdir().unwrap();
        let state = base.path().join("state");
        std::fs::create_dir(&state).unwrap();
        mode(&state, 0o700);
        std::os::unix::fs::chown(&state, Some(1500), Some(1500)).unwrap();
        let e = check_dir(&state, "the state directory").unwrap_err();
        assert_eq!((e.why, e.owner), (Distrust::ForeignOwner, 1500));
        assert!(e.to_string().contains("owned by uid 1500"), "{e}");

        let token = base.path().join("token");
        std::fs::write(&token, "x").unwrap();
        mode(&token, 0o600);
        assert!(check_file(&token, "the token file").is_ok());
        std::os::unix::fs::chown(&token, Some(1500), None).unwrap();
        assert_eq!(
            check_file(&token, "the token file").unwrap_err().why,
            Distrust::ForeignOwner
        );

        let link = base.path().join("link");
        std::os::unix::fs::symlink(&state, &link).unwrap();
        std::os::unix::fs::lchown(&link, Some(1500), None).unwrap();
        assert_eq!(
            check_dir(&link, "the state directory").unwrap_err().why,
            Distrust::Link
        );
        // A directory of another user above ours.
        let inner = state.join("inner");
        std::fs::create_dir(&inner).unwrap();
        std::os::unix::fs::chown(&inner, Some(0), Some(0)).unwrap();
        let e = check_dir(&inner, "the state directory").unwrap_err();
        assert_eq!((e.why, e.path), (Distrust::ForeignOwner, state));
    }
}
