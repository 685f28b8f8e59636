//! The run's `HOME` inside the workspace (`env.workspace_home`), made by the supervisor
//! before a launch when it is missing.
//!
//! The workspace is writable by its owner and by earlier runs, so every component is
//! reached from a held descriptor of the workspace without following any symbolic link
//! (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`), and a directory it creates
//! is given to the workspace's owner (a root supervisor would otherwise leave a `HOME`
//! the run cannot write). An existing component that is not a directory refuses the run.

use std::path::{Component, Path};

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};

use crate::RunError;

/// Mode of a directory made here: the run's `HOME`, private to the workspace's owner.
pub const HOME_DIR_MODE: u32 = 0o700;

/// Makes `home` (inside `workspace`) and every missing directory above it.
pub fn ensure(workspace: &Path, home: &Path) -> Result<(), RunError> {
    let fail = |what: &str, e: rustix::io::Errno| {
        RunError::Launch(format!(
            "env.workspace_home: cannot make {}: {what}: {e}",
            home.display()
        ))
    };
    let rel = home.strip_prefix(workspace).map_err(|_| {
        RunError::Launch(format!(
            "env.workspace_home: {} is not inside the workspace {}",
            home.display(),
            workspace.display()
        ))
    })?;
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut dir = rustix::fs::open(workspace, flags | OFlags::NOFOLLOW, Mode::empty())
        .map_err(|e| fail("open the workspace", e))?;
    let owner = rustix::fs::fstat(&dir).map_err(|e| fail("stat the workspace", e))?;
    let beneath = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    for c in rel.components() {
        let Component::Normal(name) = c else {
            return Err(fail(
                "a component that is not a name",
                rustix::io::Errno::INVAL,
            ));
        };
        let next = match rustix::fs::openat2(&dir, name, flags, Mode::empty(), beneath) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => {
                match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(HOME_DIR_MODE)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(fail("mkdir", e)),
                }
                let fd = rustix::fs::openat2(&dir, name, flags, Mode::empty(), beneath)
                    .map_err(|e| fail("open the new directory", e))?;
                if rustix::process::geteuid().is_root() {
                    rustix::fs::chownat(
                        &fd,
                        "",
                        Some(rustix::fs::Uid::from_raw(owner.st_uid)),
                        Some(rustix::fs::Gid::from_raw(owner.st_gid)),
                        AtFlags::EMPTY_PATH,
                    )
                    .map_err(|e| fail("give it to the workspace's owner", e))?;
                }
                fd
            }
            Err(e) => return Err(fail("open (a symlink or not a directory?)", e)),
        };
        dir = next;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn makes_the_missing_directories_and_refuses_a_symlink() {
        let ws = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(ws.path()).unwrap();
        ensure(&ws, &ws.join(".agent/home")).unwrap();
        assert!(ws.join(".agent/home").is_dir());
        // Existing: nothing to do.
        ensure(&ws, &ws.join(".agent/home")).unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.join("link")).unwrap();
        assert!(ensure(&ws, &ws.join("link/home")).is_err());
        assert!(!outside.path().join("home").exists());
    }
}
