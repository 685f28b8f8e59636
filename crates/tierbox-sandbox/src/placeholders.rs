//! Placeholders a Tier C sandbox creates in the host's filesystem, shared safely between
//! concurrent runs, in one supervisor process or several.
//!
//! To cover a protected path that does not exist (`<workspace>/.git` in a fresh
//! directory), a sandbox creates an empty placeholder on the host and mounts an empty
//! read-only cover over it; the runner removes the placeholder afterwards. With runs in
//! parallel on one workspace, a finished run must not remove a placeholder another run
//! still covers: the kernel would detach that run's cover, and its sandbox could then
//! create the protected path (a fake `.git` with hooks) in the workspace.
//!
//! So every placeholder is reference counted here:
//! - a run claims its placeholders ([`claim`]) before its sandbox creates them, and
//!   releases them after the run ([`release`]); a placeholder is removed (only if still
//!   empty) when its last claim goes;
//! - while claimed, a placeholder reads as missing to the host probes ([`observe`]), so a
//!   concurrent run plans it as its own placeholder too (claims it, and accepts finding
//!   it already there) instead of treating it as a directory that exists on its own.
//!
//! Claims are kept in a host-wide registry file (one per user: `/run/tierbox` for root,
//! else `$XDG_RUNTIME_DIR/tierbox` or `/tmp/tierbox-<uid>`, a private directory), so runs
//! of *different* supervisor processes — two servers, concurrent `tierbox run` commands —
//! on one workspace see each other's placeholders too. Each claim is a line naming the
//! claiming process; claims of processes that no longer exist are dropped. Probes and
//! releases hold the registry's lock (a mutex within the process, `flock` across
//! processes), so no probe sees a placeholder between its last claim ending and its
//! removal. If the registry cannot be used, the claims are kept in the process only.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// Name of the registry file in the registry directory.
pub const REGISTRY_FILE: &str = "placeholders";

/// Largest registry read, in bytes (about 8000 claims). A larger file is treated as
/// empty of other processes' claims rather than read without bound.
pub const MAX_REGISTRY_BYTES: u64 = 1 << 20;

/// One claim: the claiming process and the placeholder path.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    pid: u32,
    path: PathBuf,
}

/// The registry: the shared file when it can be used, and this process's own claims
/// (always kept, so the process is consistent even without the file).
struct Registry {
    file: Option<File>,
    own: Vec<PathBuf>,
}

/// The registry, locked within this process and, when the file is in use, across
/// processes until dropped.
struct Locked {
    guard: MutexGuard<'static, Registry>,
    entries: Vec<Entry>,
    /// Placeholders claimed in the file by processes that no longer exist (a supervisor
    /// killed outright never released them).
    orphans: Vec<PathBuf>,
}

fn registry_dir() -> PathBuf {
    let uid = rustix::process::geteuid().as_raw();
    if uid == 0 {
        return PathBuf::from("/run/tierbox");
    }
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d).join("tierbox"),
        None => PathBuf::from(format!("/tmp/tierbox-{uid}")),
    }
}

/// Opens the registry file in a private directory owned by us; `None` if that is not
/// possible (read-only /run, a directory owned by someone else).
fn open_registry() -> Option<File> {
    let dir = registry_dir();
    let _ = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir);
    let meta = std::fs::symlink_metadata(&dir).ok()?;
    let me = rustix::process::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o022 != 0 {
        return None;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir.join(REGISTRY_FILE))
        .ok()?;
    let m = file.metadata().ok()?;
    (m.uid() == me && m.is_file()).then_some(file)
}

fn lock() -> Locked {
    static REG: OnceLock<Mutex<Registry>> = OnceLock::new();
    let guard = REG
        .get_or_init(|| {
            Mutex::new(Registry {
                file: open_registry(),
                own: Vec::new(),
            })
        })
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut locked = Locked {
        guard,
        entries: Vec::new(),
        orphans: Vec::new(),
    };
    if let Some(f) = &locked.guard.file
        && rustix::fs::flock(f, rustix::fs::FlockOperation::LockExclusive).is_err()
    {
        locked.guard.file = None;
    }
    locked.entries = locked.read();
    if !locked.orphans.is_empty() {
        // A dead supervisor's placeholders no live run claims: removed as its release
        // would have, and its claims dropped from the file.
        let orphans = std::mem::take(&mut locked.orphans);
        for p in orphans.iter().rev() {
            if locked.claimed(p) == 0 {
                let _ = remove_if_empty(p);
            }
        }
        locked.write();
    }
    locked
}

impl Locked {
    /// Every live claim: other processes' from the file, ours from memory.
    fn read(&mut self) -> Vec<Entry> {
        let me = std::process::id();
        let mut entries: Vec<Entry> = self
            .guard
            .own
            .iter()
            .map(|p| Entry {
                pid: me,
                path: p.clone(),
            })
            .collect();
        let Some(mut f) = self.guard.file.as_ref() else {
            return entries;
        };
        let mut text = Vec::new();
        if f.seek(SeekFrom::Start(0)).is_err()
            || f.take(MAX_REGISTRY_BYTES).read_to_end(&mut text).is_err()
        {
            return entries;
        }
        // One liveness check per claiming process, not per claim.
        let mut alive: Vec<(u32, bool)> = Vec::new();
        for e in text.split(|b| *b == b'\n').filter_map(parse_line) {
            if e.pid == me {
                continue;
            }
            let live = match alive.iter().find(|(pid, _)| *pid == e.pid) {
                Some((_, live)) => *live,
                None => {
                    let live = Path::new(&format!("/proc/{}", e.pid)).exists();
                    alive.push((e.pid, live));
                    live
                }
            };
            if live {
                entries.push(e);
            } else {
                self.orphans.push(e.path);
            }
        }
        entries
    }

    fn claimed(&self, path: &Path) -> usize {
        self.entries.iter().filter(|e| e.path == path).count()
    }

    /// Writes the live claims back (ours from memory) and releases the file lock.
    fn write(&mut self) {
        let me = std::process::id();
        let own = self.guard.own.clone();
        let Some(mut f) = self.guard.file.as_ref() else {
            return;
        };
        let mut text = Vec::new();
        let others = self.entries.iter().filter(|e| e.pid != me);
        let mine = own.iter().map(|p| Entry {
            pid: me,
            path: p.clone(),
        });
        for e in others.cloned().chain(mine) {
            text.extend_from_slice(format!("{} ", e.pid).as_bytes());
            text.extend_from_slice(hex(e.path.as_os_str().as_bytes()).as_bytes());
            text.push(b'\n');
        }
        // Never shrunk to nothing: a file that keeps its first block costs no block
        // allocation (and on a `discard` mount, no synchronous discard) per write. The
        // trailing empty line is skipped by the reader.
        text.push(b'\n');
        let len = text.len() as u64;
        let ok = f.seek(SeekFrom::Start(0)).is_ok()
            && f.write_all(&text).is_ok()
            && (f.metadata().is_ok_and(|m| m.len() == len) || f.set_len(len).is_ok());
        if !ok {
            // A registry we cannot keep is not used any more (claims stay in memory).
            self.guard.file = None;
        }
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        if let Some(f) = &self.guard.file {
            let _ = rustix::fs::flock(f, rustix::fs::FlockOperation::Unlock);
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_line(line: &[u8]) -> Option<Entry> {
    let text = std::str::from_utf8(line).ok()?;
    let (pid, path) = text.split_once(' ')?;
    let bytes = (0..path.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(path.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    Some(Entry {
        pid: pid.parse().ok()?,
        path: PathBuf::from(std::ffi::OsStr::from_bytes(&bytes)),
    })
}

/// Runs the host probe `lstat` of `path` unless `path` is a claimed placeholder (by any
/// run of any Tierbox process of this user), in which case it is `None` (treat it as
/// missing).
pub fn observe<T>(path: &Path, lstat: impl FnOnce() -> T) -> Option<T> {
    observing(|claims| claims.observe(path, lstat))
}

/// The claims as seen under one hold of the registry lock: probes made through it see a
/// consistent registry without locking and reading it again for every path.
pub struct Observer<'a>(&'a Locked);

impl std::fmt::Debug for Observer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer")
            .field("claims", &self.0.entries.len())
            .finish()
    }
}

impl Observer<'_> {
    /// Like [`observe`], under the lock already held.
    pub fn observe<T>(&self, path: &Path, lstat: impl FnOnce() -> T) -> Option<T> {
        (self.0.claimed(path) == 0).then(lstat)
    }
}

/// Runs `f` with the registry locked once, for a batch of probes (a mount plan's host
/// view: dozens of `lstat`s per run).
pub fn observing<T>(f: impl FnOnce(&Observer<'_>) -> T) -> T {
    let reg = lock();
    f(&Observer(&reg))
}

/// A run's claim on its placeholders; released on drop unless handed over with
/// [`Claim::keep`] (then [`release`] must be called after the run).
#[derive(Debug)]
#[must_use]
pub struct Claim(Vec<PathBuf>);

impl Claim {
    /// Hands the claim over to the run: the caller releases the paths after the run.
    pub fn keep(mut self) -> Vec<PathBuf> {
        std::mem::take(&mut self.0)
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            release(&self.0);
        }
    }
}

/// Claims `paths` (the placeholders a run's sandbox is about to create).
pub fn claim(paths: &[PathBuf]) -> Claim {
    if paths.is_empty() {
        // Most runs create none (a workspace with its own `.git/hooks` and `.git/config`).
        return Claim(Vec::new());
    }
    let mut reg = lock();
    reg.guard.own.extend(paths.iter().cloned());
    reg.write();
    Claim(paths.to_vec())
}

/// Releases a run's claims; placeholders no run claims any more are removed when still
/// empty (an empty directory, or an empty regular file), deepest first. Returns the
/// ones that could not be removed, with the reason; a placeholder already gone is not an
/// error, and one that is no longer empty is left alone.
pub fn release(paths: &[PathBuf]) -> Vec<(PathBuf, String)> {
    if paths.is_empty() {
        return Vec::new();
    }
    let mut reg = lock();
    let me = std::process::id();
    let mut failed = Vec::new();
    for p in paths.iter().rev() {
        if let Some(i) = reg.guard.own.iter().position(|o| o == p) {
            reg.guard.own.remove(i);
            if let Some(j) = reg.entries.iter().position(|e| e.pid == me && e.path == *p) {
                reg.entries.remove(j);
            }
        }
        // Still claimed by another run (ours or another process's): leave it.
        if reg.claimed(p) > 0 {
            continue;
        }
        if let Err(e) = remove_if_empty(p) {
            failed.push((p.clone(), e.to_string()));
        }
    }
    reg.write();
    failed
}

/// Removes the placeholder `p` when it is still empty (an empty directory, or an empty
/// regular file); one that is gone or has content is left alone (`Ok`). Its parent is
/// reached without following any symbolic link (`openat2` with `RESOLVE_NO_SYMLINKS`)
/// and the entry is examined and removed through that descriptor without following it:
/// the workspace is writable by its owner and by runs, so a directory swapped for a link
/// cannot make the supervisor remove anything outside it.
fn remove_if_empty(p: &Path) -> std::io::Result<()> {
    use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
    let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else {
        return Ok(());
    };
    let dir = match rustix::fs::openat2(
        rustix::fs::CWD,
        parent,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    ) {
        Ok(dir) => dir,
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let st = match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let removed = match FileType::from_raw_mode(st.st_mode) {
        FileType::Directory => rustix::fs::unlinkat(&dir, name, AtFlags::REMOVEDIR),
        FileType::RegularFile if st.st_size == 0 => {
            rustix::fs::unlinkat(&dir, name, AtFlags::empty())
        }
        // A placeholder made with the content git must read (`commondir`), still
        // holding just that.
        FileType::RegularFile if holds_only_placeholder_content(&dir, name, p)? => {
            rustix::fs::unlinkat(&dir, name, AtFlags::empty())
        }
        _ => Ok(()),
    };
    match removed {
        Ok(())
        | Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTEMPTY | rustix::io::Errno::EXIST) => {
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Whether the regular file `name` in `dir` holds exactly what a placeholder for `p`
/// is made with ([`tierbox_policy::validate::placeholder_content`]), when that is not
/// empty. Opened without following a symbolic link and without blocking on a fifo.
fn holds_only_placeholder_content(
    dir: &std::os::fd::OwnedFd,
    name: &std::ffi::OsStr,
    p: &Path,
) -> std::io::Result<bool> {
    use rustix::fs::{Mode, OFlags};
    let want = tierbox_policy::validate::placeholder_content(p);
    if want.is_empty() {
        return Ok(false);
    }
    let fd = match rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    let mut file = File::from(fd);
    let mut got = Vec::with_capacity(want.len() + 1);
    (&mut file)
        .take(want.len() as u64 + 1)
        .read_to_end(&mut got)?;
    Ok(got == want)
}

/// Creates the placeholder `p` on the host: an empty directory (`dir`), or a file
/// holding `content` (see [`tierbox_policy::validate::placeholder_content`]), for a
/// backend that mounts over it rather than creating it in the sandbox's setup (bwrap).
/// The parent is reached without following any symbolic link, and the entry is created
/// exclusively without following one; one already there because a concurrent run claims
/// it too is accepted when it is of the same kind.
pub fn create(p: &Path, dir: bool, content: &[u8]) -> std::io::Result<()> {
    use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
    let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else {
        return Err(std::io::Error::other("placeholder without a parent"));
    };
    let parent = rustix::fs::openat2(
        rustix::fs::CWD,
        parent,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )?;
    let made = if dir {
        rustix::fs::mkdirat(&parent, name, Mode::from_raw_mode(0o755))
    } else {
        rustix::fs::openat(
            &parent,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o444),
        )
        .and_then(|fd| {
            File::from(fd)
                .write_all(content)
                .map_err(|e| rustix::io::Errno::from_io_error(&e).unwrap_or(rustix::io::Errno::IO))
        })
    };
    match made {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::EXIST) => {
            let st = rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW)?;
            let want = if dir {
                FileType::Directory
            } else {
                FileType::RegularFile
            };
            if FileType::from_raw_mode(st.st_mode) == want {
                Ok(())
            } else {
                Err(std::io::Error::other(format!(
                    "{} exists and is not a {}",
                    p.display(),
                    if dir { "directory" } else { "regular file" }
                )))
            }
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_last_release_removes_and_claimed_paths_read_as_missing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(".git");
        let a = claim(std::slice::from_ref(&p));
        std::fs::create_dir(&p).unwrap();
        let b = claim(std::slice::from_ref(&p));
        assert!(observe(&p, || ()).is_none(), "claimed: reads as missing");
        release(&a.keep());
        assert!(p.is_dir(), "still claimed by b");
        drop(b);
        assert!(!p.exists(), "removed with the last claim");
        assert!(observe(&p, || ()).is_some());
    }

    /// Writes (or, with `claimed: false`, removes) a claim of `pid` on `path` in the
    /// host-wide registry, as that process would.
    fn foreign_claim(pid: u32, path: &Path, claimed: bool) -> bool {
        let mut reg = lock();
        if reg.guard.file.is_none() {
            return false;
        }
        let e = Entry {
            pid,
            path: path.to_owned(),
        };
        reg.entries.retain(|x| *x != e);
        if claimed {
            reg.entries.push(e);
        }
        reg.write();
        true
    }

    #[test]
    fn another_process_s_claim_keeps_the_placeholder_until_it_ends() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(".git");
        std::fs::create_dir(&p).unwrap();
        // pid 1 always exists: a live claimant in another process.
        if !foreign_claim(1, &p, true) {
            let reason = format!("the registry in {} is not usable", registry_dir().display());
            tierbox_test_support::skip_here(&reason);
            return;
        }
        assert!(
            observe(&p, || ()).is_none(),
            "claimed elsewhere: reads as missing"
        );
        let c = claim(std::slice::from_ref(&p));
        assert!(release(&c.keep()).is_empty());
        assert!(p.is_dir(), "still claimed by the other process");
        foreign_claim(1, &p, false);
        assert!(observe(&p, || ()).is_some());
        // The claim of a process that no longer exists is ignored.
        let dead = 0x3fff_fff0;
        assert!(!Path::new(&format!("/proc/{dead}")).exists());
        foreign_claim(dead, &p, true);
        assert!(
            observe(&p, || ()).is_some(),
            "a dead claimant's claim is dropped"
        );
        let c = claim(std::slice::from_ref(&p));
        drop(c);
        assert!(!p.exists(), "removed by the last live claim");
    }

    #[test]
    fn a_shorter_registry_keeps_no_stale_claims_and_is_never_emptied() {
        let dir = tempfile::tempdir().unwrap();
        let long = dir.path().join("x".repeat(200));
        if !foreign_claim(1, &long, true) {
            let reason = format!("the registry in {} is not usable", registry_dir().display());
            tierbox_test_support::skip_here(&reason);
            return;
        }
        assert!(observe(&long, || ()).is_none());
        foreign_claim(1, &long, false);
        assert!(observe(&long, || ()).is_some());
        let text = std::fs::read(registry_dir().join(REGISTRY_FILE)).unwrap();
        let hexed = hex(long.as_os_str().as_bytes());
        assert!(
            !String::from_utf8_lossy(&text).contains(&hexed),
            "the longer content before it was cut off"
        );
        assert!(text.ends_with(b"\n"), "never shrunk to nothing");
    }

    #[test]
    fn registry_lines_round_trip_any_path_bytes() {
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(b"/w/a b\n\xff.git"));
        let line = format!("42 {}", hex(path.as_os_str().as_bytes()));
        assert_eq!(parse_line(line.as_bytes()), Some(Entry { pid: 42, path }));
        assert_eq!(parse_line(b"42 zz"), None);
        assert_eq!(parse_line(b"x 00"), None);
    }

    #[test]
    fn a_placeholder_with_content_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("d");
        let f = dir.path().join("f");
        let c = claim(&[d.clone(), f.clone()]);
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("kept"), "x").unwrap();
        std::fs::write(&f, "not empty").unwrap();
        assert!(release(&c.keep()).is_empty());
        assert!(d.join("kept").exists() && f.exists());
    }

    #[test]
    fn a_commondir_placeholder_is_removed_only_while_it_names_the_git_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(".git")).unwrap();
        let p = dir.path().join(".git/commondir");
        let c = claim(std::slice::from_ref(&p));
        create(&p, false, tierbox_policy::validate::COMMONDIR_PLACEHOLDER).unwrap();
        assert_eq!(
            std::fs::read(&p).unwrap(),
            tierbox_policy::validate::COMMONDIR_PLACEHOLDER
        );
        // A concurrent run's claim finds it there.
        create(&p, false, tierbox_policy::validate::COMMONDIR_PLACEHOLDER).unwrap();
        assert!(release(&c.keep()).is_empty());
        assert!(!p.exists(), "removed with its claim");
        let c = claim(std::slice::from_ref(&p));
        std::fs::write(&p, "../elsewhere\n").unwrap();
        assert!(release(&c.keep()).is_empty());
        assert!(p.exists(), "other content is left alone");
    }
}
