//! Fingerprints read through file descriptors: every entry is opened from a held
//! directory fd with `openat2(O_NOFOLLOW, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, so what
//! is hashed is what was looked at, and no name is resolved through a symlink that anyone
//! may have planted or swapped in. [`super::fingerprint`] is this, from a path's parent.

use std::ffi::OsStr;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use sha2::{Digest, Sha256};

use super::MAX_FINGERPRINT_ENTRIES;

/// Deepest directory level a directory fingerprint descends to (each level holds one
/// descriptor while it is read); a deeper tree gets `dir:too-large`, which matches nothing.
pub const MAX_FINGERPRINT_DEPTH: usize = 256;

/// One name below a held directory fd: no `..`, no symlink, no magic link, no other mount's
/// escape.
pub(crate) const BENEATH: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// Which inode: equal identities are the same file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ident {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
}

impl Ident {
    pub(crate) fn of(st: &rustix::fs::Stat) -> Self {
        Self {
            dev: st.st_dev,
            ino: st.st_ino,
        }
    }
}

/// What was found at a name: its fingerprint and the inode it was read from.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    /// `file:<sha256>`, `symlink:<target>`, `dir:<sha256>`, `special` (see
    /// [`super::fingerprint`]); `changing` when the entry was swapped while being read.
    pub(crate) print: String,
    /// The inode.
    pub(crate) ident: Ident,
    /// Its owner and group.
    pub(crate) owner: (u32, u32),
    /// Its type and mode bits (`st_mode`).
    pub(crate) mode: u32,
}

impl Seen {
    pub(crate) fn is_directory(&self) -> bool {
        FileType::from_raw_mode(self.mode) == FileType::Directory
    }
}

/// The fingerprint of the entry `name` of `dir`, without following it (`None`: nothing
/// is there).
pub(crate) fn fingerprint_at(dir: BorrowedFd<'_>, name: &OsStr) -> Option<Seen> {
    let path = open_beneath(dir, name, OFlags::PATH)?;
    let st = rustix::fs::fstat(&path).ok()?;
    let ident = Ident::of(&st);
    let print = match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => {
            match reopen(dir, name, OFlags::RDONLY | OFlags::NONBLOCK, ident) {
                Some(fd) => format!("file:{}", hash(fd).unwrap_or_default()),
                None => CHANGING.to_owned(),
            }
        }
        FileType::Symlink => {
            use std::os::unix::ffi::OsStrExt;
            let target = rustix::fs::readlinkat(&path, "", Vec::new()).ok()?;
            format!(
                "symlink:{}",
                Path::new(OsStr::from_bytes(target.as_bytes())).display()
            )
        }
        FileType::Directory => match reopen(dir, name, OFlags::RDONLY | OFlags::DIRECTORY, ident) {
            Some(fd) => dir_print(&fd),
            None => CHANGING.to_owned(),
        },
        _ => "special".to_owned(),
    };
    Some(Seen {
        print,
        ident,
        owner: (st.st_uid, st.st_gid),
        mode: st.st_mode,
    })
}

/// The fingerprint of an entry swapped while it was read: matches no change's `before`.
const CHANGING: &str = "changing";

/// `openat2(dir, name, flags | O_NOFOLLOW | O_CLOEXEC, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`.
pub(crate) fn open_beneath(dir: BorrowedFd<'_>, name: &OsStr, flags: OFlags) -> Option<OwnedFd> {
    openat_beneath(dir, name, flags).ok()
}

/// [`open_beneath`], with the error (`ELOOP` for a symlink on the way, `EXDEV` for a
/// lookup leaving `dir`).
pub(crate) fn openat_beneath(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    flags: OFlags,
) -> Result<OwnedFd, rustix::io::Errno> {
    rustix::fs::openat2(
        dir,
        name,
        flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        BENEATH,
    )
}

/// `name` opened again with `flags`, when it is still the inode `ident`.
fn reopen(dir: BorrowedFd<'_>, name: &OsStr, flags: OFlags, ident: Ident) -> Option<OwnedFd> {
    let fd = open_beneath(dir, name, flags)?;
    let st = rustix::fs::fstat(&fd).ok()?;
    (Ident::of(&st) == ident).then_some(fd)
}

/// The hex SHA-256 of what `fd` reads to its end.
pub(crate) fn hash(fd: OwnedFd) -> Option<String> {
    let mut file = File::from(fd);
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => hasher.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(tierbox_attest::jcs::hex(&hasher.finalize()))
}

/// `dir:<sha256>` of every entry below the readable directory `fd` (see
/// [`super::fingerprint`]).
fn dir_print(fd: &OwnedFd) -> String {
    let mut entries = Vec::new();
    if !listing(fd.as_fd(), Path::new(""), 0, &mut entries) {
        return "dir:too-large".to_owned();
    }
    entries.sort();
    let mut hasher = Sha256::new();
    for (rel, print) in &entries {
        hasher.update(rel.as_os_str().as_encoded_bytes());
        hasher.update([0]);
        hasher.update(print.as_bytes());
        hasher.update([0]);
    }
    format!("dir:{}", tierbox_attest::jcs::hex(&hasher.finalize()))
}

/// The names in the readable directory `fd` (not `.` or `..`).
pub(crate) fn names(fd: BorrowedFd<'_>) -> Option<Vec<std::ffi::OsString>> {
    use std::os::unix::ffi::OsStrExt;
    let mut dir = rustix::fs::Dir::read_from(fd).ok()?;
    let mut out = Vec::new();
    while let Some(entry) = dir.read() {
        let entry = entry.ok()?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            out.push(OsStr::from_bytes(name).to_owned());
        }
    }
    Some(out)
}

/// Every entry below `fd` (at `rel` of the fingerprinted directory) with its fingerprint
/// (a directory's as `dir` and its mode, its entries listed on their own); false past
/// [`MAX_FINGERPRINT_ENTRIES`] or [`MAX_FINGERPRINT_DEPTH`].
fn listing(fd: BorrowedFd<'_>, rel: &Path, depth: usize, out: &mut Vec<(PathBuf, String)>) -> bool {
    if depth >= MAX_FINGERPRINT_DEPTH {
        return false;
    }
    let Some(names) = names(fd) else {
        return true;
    };
    for name in names {
        if out.len() >= MAX_FINGERPRINT_ENTRIES {
            return false;
        }
        let rel = rel.join(&name);
        let Some(seen) = fingerprint_shallow(fd, &name) else {
            continue;
        };
        let bits = seen.mode & 0o7777;
        match seen.sub {
            Some(sub) => {
                out.push((rel.clone(), format!("dir {bits:o}")));
                if !listing(sub.as_fd(), &rel, depth + 1, out) {
                    return false;
                }
            }
            None => out.push((rel, format!("{} {bits:o}", seen.print))),
        }
    }
    true
}

struct Shallow {
    print: String,
    mode: u32,
    /// A directory, opened for reading.
    sub: Option<OwnedFd>,
}

/// [`fingerprint_at`] without descending: a directory comes back open instead.
fn fingerprint_shallow(dir: BorrowedFd<'_>, name: &OsStr) -> Option<Shallow> {
    let path = open_beneath(dir, name, OFlags::PATH)?;
    let st = rustix::fs::fstat(&path).ok()?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        drop(path);
        let seen = fingerprint_at(dir, name)?;
        return Some(Shallow {
            print: seen.print,
            mode: seen.mode,
            sub: None,
        });
    }
    let sub = reopen(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY,
        Ident::of(&st),
    );
    Some(match sub {
        Some(sub) => Shallow {
            print: String::new(),
            mode: st.st_mode,
            sub: Some(sub),
        },
        None => Shallow {
            print: CHANGING.to_owned(),
            mode: st.st_mode,
            sub: None,
        },
    })
}
