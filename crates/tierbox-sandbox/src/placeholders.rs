//! Placeholders a Tier C sandbox creates in the host's filesystem, shared safely between
//! concurrent runs of one supervisor.
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
//! Probes and releases hold one lock, so no probe sees a placeholder between its last
//! claim ending and its removal.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};

fn registry() -> MutexGuard<'static, HashMap<PathBuf, usize>> {
    static REG: OnceLock<Mutex<HashMap<PathBuf, usize>>> = OnceLock::new();
    REG.get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs the host probe `lstat` of `path` unless `path` is a claimed placeholder, in
/// which case it is `None` (treat it as missing).
pub fn observe<T>(path: &Path, lstat: impl FnOnce() -> T) -> Option<T> {
    let reg = registry();
    if reg.get(path).is_some_and(|n| *n > 0) {
        return None;
    }
    let out = lstat();
    drop(reg);
    Some(out)
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
    let mut reg = registry();
    for p in paths {
        *reg.entry(p.clone()).or_default() += 1;
    }
    Claim(paths.to_vec())
}

/// Releases a run's claims; placeholders no run claims any more are removed when still
/// empty (an empty directory, or an empty regular file), deepest first. Returns the
/// ones that could not be removed, with the reason; a placeholder already gone is not an
/// error, and one that is no longer empty is left alone.
pub fn release(paths: &[PathBuf]) -> Vec<(PathBuf, String)> {
    let mut reg = registry();
    let mut failed = Vec::new();
    for p in paths.iter().rev() {
        let last = match reg.get_mut(p) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            Some(_) => {
                reg.remove(p);
                true
            }
            // Never claimed (a caller outside this registry): remove as before.
            None => true,
        };
        if !last {
            continue;
        }
        let removed = match std::fs::symlink_metadata(p) {
            Ok(m) if m.is_dir() => std::fs::remove_dir(p),
            Ok(m) if m.is_file() && m.len() == 0 => std::fs::remove_file(p),
            Ok(_) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        };
        match removed {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) => {}
            Err(e) => failed.push((p.clone(), e.to_string())),
        }
    }
    failed
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
}
