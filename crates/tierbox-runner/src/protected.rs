//! What a Tier B run changed of the protected paths it could not keep read-only.
//!
//! A Tier B run without a mount namespace of its own (an unprivileged supervisor on a
//! host that refuses user namespaces) has only landlock, which only grants: what it
//! grants on a git directory covers its `config` and `hooks/` too, so such a run lists
//! the `protected_paths` layer as missing. The supervisor still tells the host what the run
//! changed there: each protected entry inside a git directory (`.git/config`,
//! `.git/hooks`, …; not `.git` itself, which every commit changes) is listed before the
//! launch and after the run — every entry below it with its kind, mode, inode, size,
//! change time and symlink target — and one that differs is named in the outcome
//! ([`crate::Outcome::protected_changed`]). The change time cannot be set by a program,
//! so a rewrite that keeps size and modification time is seen too. This is detection
//! after the fact, not protection: the host's own `git` may run what the run planted
//! while the run lasts.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use tierbox_policy::plan::Plan;

/// Most entries listed below one protected path: bounds the cost of a huge `hooks/`. A
/// tree with more is recorded as "too large" before and after, and named as changed
/// whenever the part listed differs.
pub const MAX_ENTRIES_PER_PATH: usize = 10_000;

/// Largest regular file whose content is hashed, in bytes (git configuration and hook
/// scripts are far smaller); a larger one is compared by its metadata only.
pub const MAX_HASHED_FILE_BYTES: u64 = 1 << 20;

/// The listing of every protected entry, before or after a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot(Vec<(PathBuf, Vec<String>)>);

/// Lists the protected entries inside git directories of `plan` (empty when it has none).
pub fn snapshot(plan: &Plan) -> Snapshot {
    snapshot_of(&plan.filesystem.protected)
}

fn snapshot_of(protected: &[PathBuf]) -> Snapshot {
    let entries = protected
        .iter()
        .filter(|p| p.file_name().is_some_and(|n| n != ".git"))
        .filter(|p| p.components().any(|c| c.as_os_str() == ".git"))
        .map(|p| (p.clone(), list(p)))
        .collect();
    Snapshot(entries)
}

/// The protected entries whose listing differs between `before` and `after`.
pub fn changed(before: &Snapshot, after: &Snapshot) -> Vec<PathBuf> {
    before
        .0
        .iter()
        .zip(&after.0)
        .filter(|((_, a), (_, b))| a != b)
        .map(|((p, _), _)| p.clone())
        .collect()
}

fn list(path: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut pending = vec![path.to_path_buf()];
    while let Some(p) = pending.pop() {
        if out.len() >= MAX_ENTRIES_PER_PATH {
            out.push("too large".to_owned());
            break;
        }
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            out.push(format!("{}: absent", p.display()));
            continue;
        };
        let target = if meta.file_type().is_symlink() {
            std::fs::read_link(&p)
                .map(|t| t.display().to_string())
                .unwrap_or_default()
        } else if meta.is_file() && meta.size() <= MAX_HASHED_FILE_BYTES {
            read_nofollow(&p)
                .map(|b| tierbox_attest::sha256_hex(&b))
                .unwrap_or_default()
        } else {
            String::new()
        };
        out.push(format!(
            "{}: {:o} {} {} {}.{} {target}",
            p.display(),
            meta.mode(),
            meta.ino(),
            meta.size(),
            meta.ctime(),
            meta.ctime_nsec()
        ));
        if meta.is_dir()
            && let Ok(rd) = std::fs::read_dir(&p)
        {
            let mut names: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
            names.sort();
            pending.extend(names.into_iter().rev());
        }
    }
    out
}

/// A regular file's content, opened without following a symlink or blocking on a fifo
/// swapped in since the `lstat`, and read no further than the cap.
fn read_nofollow(p: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(p)?;
    let mut out = Vec::new();
    f.take(MAX_HASHED_FILE_BYTES + 1).read_to_end(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_planted_hook_and_a_rewritten_config_are_named() {
        let ws = tempfile::tempdir().unwrap();
        let git = ws.path().join(".git");
        std::fs::create_dir_all(git.join("hooks")).unwrap();
        std::fs::write(git.join("config"), "[core]\n").unwrap();
        let protected: Vec<PathBuf> = ["", "config", "hooks", "commondir"]
            .iter()
            .map(|n| git.join(n))
            .collect();
        let before = snapshot_of(&protected);
        assert_eq!(before.0.len(), 3, "not .git itself");
        assert!(changed(&before, &snapshot_of(&protected)).is_empty());
        std::fs::write(git.join("hooks/pre-commit"), "#!/bin/sh\n").unwrap();
        std::fs::write(git.join("index"), "x").unwrap();
        assert_eq!(
            changed(&before, &snapshot_of(&protected)),
            [git.join("hooks")]
        );
        // Same size, within the clock's tick: the content tells.
        std::fs::write(git.join("config"), "[evil]\n").unwrap();
        std::fs::write(git.join("commondir"), "../x\n").unwrap();
        assert_eq!(
            changed(&before, &snapshot_of(&protected)),
            [git.join("config"), git.join("hooks"), git.join("commondir")]
        );
    }
}
