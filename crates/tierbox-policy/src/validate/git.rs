//! The git redirect surface: what in a repository makes the host's next `git` run a
//! program or read configuration from elsewhere, and where the repositories of a
//! workspace are.
//!
//! A run may write its workspace, and the host user later runs `git status` there — with
//! the host user's rights, often root's. Git reads configuration, hooks and the location
//! of other git directories from its git directory: `config` (aliases, `core.fsmonitor`,
//! `core.hooksPath`, `core.sshCommand`, pagers, editors, filters, credential helpers,
//! `include.path`), `config.worktree`, `hooks/`, `commondir` (moves the common git
//! directory, configuration included, elsewhere), `worktrees/`, `modules/` (submodules'
//! git directories, entered by `git status`) and `info/`; and a `.git` *file* (a worktree
//! or submodule checkout) names the git directory itself.
//!
//! So the default protects the whole git directory ([`DEFAULT_PROTECTED`]: `.git`), in
//! the workspace and in every repository nested in it at launch (up to
//! [`NESTED_REPO_MAX_DEPTH`] levels down). Protecting only the entries above while
//! leaving the rest writable cannot be done right with mounts: a missing `commondir`
//! must be covered to stop a run creating one, but git treats an existing `commondir`
//! that is empty or unreadable as fatal — every git command in the repository, the
//! host's included, would fail while the run lasts — and git creates its lock files
//! (`index.lock`, `HEAD.lock`) in the git directory's top level, so a read-only top level
//! refuses every commit anyway. Hence the decision: **inside Tier C the git directory is
//! read-only.** Read-only commands work (`status`, `diff`, `log`, `show`, `blame`,
//! `grep`; `status` refreshes the index only when it can); `add`, `commit`, `fetch`,
//! `checkout` of another branch and `gc` fail with `EROFS`, and the host commits what a
//! run changed — after reviewing it. A policy that lets runs commit lists the entries
//! above instead of `.git`, and accepts that a missing `commondir` is not covered.
//!
//! Repositories a run *creates* cannot be protected in advance: [`git_dirs`] after the run
//! lists them, and the outcome names them as untrusted content for the host.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The protected paths of the default policy: the git directory, read-only as a whole
/// (see the module docs), and each entry git reads configuration, hooks or another git
/// directory from, so that one that is a symlink leading out of `.git` into the writable
/// workspace has its target kept read-only too (git follows it).
pub const DEFAULT_PROTECTED: &[&str] = &[
    ".git",
    ".git/config",
    ".git/config.worktree",
    ".git/hooks",
    ".git/commondir",
    ".git/worktrees",
    ".git/modules",
    ".git/info",
];

/// Deepest directory level below the workspace searched for nested repositories (the
/// workspace's own `.git` is level 0; `vendor/lib/.git` is level 2).
pub const NESTED_REPO_MAX_DEPTH: usize = 4;

/// Most directory entries read while searching one workspace: bounds the cost on a huge
/// tree. A search cut short says so ([`RepoScan::complete`]).
pub const NESTED_REPO_MAX_ENTRIES: usize = 20_000;

/// Most repositories protected per workspace (each costs a few mounts per run).
pub const NESTED_REPO_MAX_REPOS: usize = 32;

/// How long a workspace's search result is reused before the workspace is searched again;
/// a repository the *host* creates is protected from runs that start at most this long
/// after it appears (a run's own new repositories are reported by the outcome).
pub const NESTED_REPO_RESCAN: Duration = Duration::from_secs(1);

/// Directory names never descended into: build outputs and package caches, which are
/// large and which git tooling does not treat as repositories.
const SKIPPED_DIRS: &[&str] = &["node_modules", "target", ".venv", "venv", "__pycache__"];

/// The repositories found below a workspace.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RepoScan {
    /// Directories holding a `.git` (directory or file), the workspace first when it has
    /// one; at most [`NESTED_REPO_MAX_REPOS`].
    pub repos: Vec<PathBuf>,
    /// The whole tree to [`NESTED_REPO_MAX_DEPTH`] was searched (no entry, depth-only
    /// and repository cap was hit).
    pub complete: bool,
}

/// Every directory holding a `.git` below `workspace` (canonical), searched afresh.
pub fn git_dirs(workspace: &Path) -> RepoScan {
    let mut scan = RepoScan {
        repos: Vec::new(),
        complete: true,
    };
    let mut entries = 0usize;
    let mut level = vec![workspace.to_path_buf()];
    for depth in 0..=NESTED_REPO_MAX_DEPTH {
        let mut next = Vec::new();
        for dir in level {
            let Ok(read) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in read.flatten() {
                entries += 1;
                if entries > NESTED_REPO_MAX_ENTRIES {
                    scan.complete = false;
                    return scan;
                }
                let name = entry.file_name();
                if name == ".git" {
                    if scan.repos.len() == NESTED_REPO_MAX_REPOS {
                        scan.complete = false;
                        return scan;
                    }
                    scan.repos.push(dir.clone());
                    continue;
                }
                let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
                let skipped = SKIPPED_DIRS.iter().any(|s| name == *s);
                if is_dir && !skipped {
                    next.push(entry.path());
                }
            }
        }
        if depth == NESTED_REPO_MAX_DEPTH && !next.is_empty() {
            scan.complete = false;
        }
        level = next;
    }
    scan
}

/// [`git_dirs`] of `workspace`, reused for [`NESTED_REPO_RESCAN`].
pub(crate) fn git_dirs_cached(workspace: &Path) -> RepoScan {
    /// Workspaces remembered at once (least recently searched dropped first).
    const ENTRIES: usize = 16;
    static CACHE: Mutex<Vec<(PathBuf, Instant, RepoScan)>> = Mutex::new(Vec::new());
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, at, scan)) = cache.iter().find(|(w, _, _)| w == workspace)
        && at.elapsed() < NESTED_REPO_RESCAN
    {
        return scan.clone();
    }
    let scan = git_dirs(workspace);
    cache.retain(|(w, _, _)| w != workspace);
    cache.insert(0, (workspace.to_path_buf(), Instant::now(), scan.clone()));
    cache.truncate(ENTRIES);
    scan
}

/// The protected paths of a run: the policy's (relative to the workspace), and for every
/// nested repository in `repos` the policy's entries under `.git/` again, relative to
/// that repository.
pub(crate) fn protected_paths(
    workspace: &Path,
    policy_protected: &[String],
    repos: &[PathBuf],
) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = policy_protected.iter().map(|p| workspace.join(p)).collect();
    let git_entries: Vec<&String> = policy_protected
        .iter()
        .filter(|p| p.starts_with(".git/") || p.as_str() == ".git")
        .collect();
    if git_entries.is_empty() {
        return out;
    }
    for repo in repos {
        if repo == workspace {
            continue;
        }
        out.extend(git_entries.iter().map(|p| repo.join(p)));
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn nested_repositories_are_found_to_the_depth_limit_and_caches_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(dir.path()).unwrap();
        for repo in [
            ".git",
            "vendor/lib/.git",
            "a/b/c/d/.git",
            "a/b/c/d/e/.git",
            "node_modules/x/.git",
        ] {
            std::fs::create_dir_all(ws.join(repo)).unwrap();
        }
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        std::fs::write(ws.join("sub/.git"), "gitdir: ../.git/worktrees/sub\n").unwrap();
        let scan = git_dirs(&ws);
        let mut found: Vec<_> = scan
            .repos
            .iter()
            .map(|r| r.strip_prefix(&ws).unwrap().to_path_buf())
            .collect();
        found.sort();
        assert_eq!(
            found,
            ["", "a/b/c/d", "sub", "vendor/lib"].map(PathBuf::from),
            "{scan:?}"
        );
        assert!(!scan.complete, "the tree goes deeper than the limit");

        let protected = protected_paths(
            &ws,
            &[
                ".git".to_owned(),
                ".git/config".to_owned(),
                "Makefile".to_owned(),
            ],
            &scan.repos,
        );
        assert!(protected.contains(&ws.join(".git")));
        assert!(protected.contains(&ws.join("Makefile")));
        assert!(protected.contains(&ws.join("vendor/lib/.git")));
        assert!(protected.contains(&ws.join("vendor/lib/.git/config")));
        assert!(protected.contains(&ws.join("sub/.git")));
        assert!(!protected.contains(&ws.join("vendor/lib/Makefile")));
    }
}
