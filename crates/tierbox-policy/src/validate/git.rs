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
//! the workspace and in every repository nested in it at launch, at any depth
//! ([`super::repo_scan`]: the search is complete or the run is refused). Read-only
//! commands work (`status`, `diff`, `log`, `show`, `blame`, `grep`; `status` refreshes
//! the index only when it can); `add`, `commit`, `fetch`, `checkout` of another branch and
//! `gc` fail with `EROFS`, and the host commits what a run changed — after reviewing it.
//!
//! A policy that lets runs commit (`policies/version-control.toml`) lists the entries
//! above without `.git`: git creates its lock files (`index.lock`, `HEAD.lock`,
//! `packed-refs.lock`) in the git directory's top level and renames them onto their
//! final names, so that level stays writable, while each entry is bound read-only onto
//! itself (a mount point can be neither written, renamed over nor removed). A missing
//! entry must still be covered, or a run could create it (a `commondir` leading to a git
//! directory of its own making); git reads a `commondir` whenever it exists and finds an
//! empty one fatal, so its placeholder names the git directory itself
//! ([`placeholder_content`]). Entries of a git directory that does not exist protect
//! nothing: the run may `git init` its own ([`run_may_create`]).
//!
//! Repositories a run *creates* cannot be protected in advance: the search after the run
//! lists them, and the outcome names them as untrusted content for the host.

use std::path::{Path, PathBuf};

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

/// What a read-only placeholder for the missing protected entry `path` holds: git
/// reads some entries whenever they exist, and an empty one is fatal to it — every git
/// command in the repository, the host's included, would fail while the run lasts. So a
/// missing `<git dir>/commondir` is covered by one that names the git directory itself
/// (`.`, relative to the git directory: what git assumes when there is none). Every
/// other placeholder is empty: git skips an empty `config.worktree`, and a `hooks`,
/// `info`, `worktrees` or `modules` that is a file or an empty directory holds nothing.
pub fn placeholder_content(path: &Path) -> &'static [u8] {
    let in_git_dir = path
        .parent()
        .and_then(Path::file_name)
        .is_some_and(|n| n == ".git");
    if in_git_dir && path.file_name().is_some_and(|n| n == "commondir") {
        COMMONDIR_PLACEHOLDER
    } else {
        b""
    }
}

/// The content of a `commondir` placeholder: the git directory itself.
pub const COMMONDIR_PLACEHOLDER: &[u8] = b".\n";

/// Whether a missing `component` of a protected path needs no cover because the run may
/// create it: a git directory (`.git`) that does not exist when the protected path lies
/// inside it. The policy then protects the entries of an *existing* repository; a run in
/// a workspace without one may `git init` its own, which the search after the run
/// reports (`created_git_dirs`) as the run's, untrusted for the host. A policy that
/// lists `.git` itself (the default) still has a missing one covered.
pub fn run_may_create(component: &std::ffi::OsStr, last: bool) -> bool {
    !last && component == ".git"
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
    fn nested_repositories_get_the_policy_s_git_entries() {
        let ws = PathBuf::from("/w");
        let repos = [ws.clone(), ws.join("vendor/lib"), ws.join("sub")];
        let protected = protected_paths(
            &ws,
            &[
                ".git".to_owned(),
                ".git/config".to_owned(),
                "Makefile".to_owned(),
            ],
            &repos,
        );
        assert!(protected.contains(&ws.join(".git")));
        assert!(protected.contains(&ws.join("Makefile")));
        assert!(protected.contains(&ws.join("vendor/lib/.git")));
        assert!(protected.contains(&ws.join("vendor/lib/.git/config")));
        assert!(protected.contains(&ws.join("sub/.git")));
        assert!(!protected.contains(&ws.join("vendor/lib/Makefile")));
    }

    #[test]
    fn only_a_git_directory_s_commondir_placeholder_names_it() {
        assert_eq!(
            placeholder_content(Path::new("/w/.git/commondir")),
            COMMONDIR_PLACEHOLDER
        );
        assert_eq!(
            placeholder_content(Path::new("/w/sub/.git/commondir")),
            COMMONDIR_PLACEHOLDER
        );
        assert!(placeholder_content(Path::new("/w/.git/config.worktree")).is_empty());
        assert!(placeholder_content(Path::new("/w/commondir")).is_empty());
        assert!(run_may_create(std::ffi::OsStr::new(".git"), false));
        assert!(!run_may_create(std::ffi::OsStr::new(".git"), true));
        assert!(!run_may_create(std::ffi::OsStr::new("hooks"), false));
    }
}
