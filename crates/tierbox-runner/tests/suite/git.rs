//! Version control under the shipped preset (`policies/version-control.toml`): real git
//! in an existing repository, in Tier B and in Tier C with both Linux backends. In Tier C
//! the commands an agent commits with behave as on the host while what git executes or
//! follows (`config`, `hooks/`, `info/`, …) comes out of every run unchanged, and the
//! commands that must write it fail; `git init` makes the run's own repository, named in
//! the outcome; `git config --global` writes the run's private `HOME`. Each test skips
//! with a printed reason when the host lacks git or the tier — and fails under `CI=true`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use tierbox_policy::{Layer, Policy, ProcessRunRequest, TierCBackend, TierRequest};
use tierbox_runner::{Outcome, RunOptions, Runner};

use super::runs::{tier_b_available, tier_c_available};

/// The shipped preset, as users get it.
const PRESET: &str = include_str!("../../../../policies/version-control.toml");

/// Fixed identity and dates, so the host and the sandbox make the same commits.
const IDENTITY: &[(&str, &str)] = &[
    ("GIT_AUTHOR_NAME", "Version Control"),
    ("GIT_AUTHOR_EMAIL", "vc@example.invalid"),
    ("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z"),
    ("GIT_COMMITTER_NAME", "Version Control"),
    ("GIT_COMMITTER_EMAIL", "vc@example.invalid"),
    ("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z"),
];

/// The entries git executes or follows, which no run may change.
const GUARDED: &[&str] = &["config", "hooks", "info"];
/// Entries the fixture repository lacks, covered by placeholders during a run only.
const ABSENT: &[&str] = &["commondir", "config.worktree", "worktrees", "modules"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    B,
    Native,
    Bwrap,
}

impl Variant {
    fn policy(self) -> Policy {
        let mut policy = Policy::from_toml(PRESET).unwrap();
        if self == Self::Bwrap {
            policy.tier.backend = TierCBackend::Bwrap;
            policy.tier.optional_layers.push(Layer::Landlock);
        }
        policy
    }

    fn tier(self) -> TierRequest {
        match self {
            Self::B => TierRequest::B,
            Self::Native | Self::Bwrap => TierRequest::C,
        }
    }

    /// The variants this host can run, each skipped with its reason otherwise.
    fn available(test: &str) -> Vec<Self> {
        if !git_available(test) || !tier_b_available(test) {
            return Vec::new();
        }
        let mut out = vec![Self::B];
        if tier_c_available(test, TierCBackend::Native) {
            out.push(Self::Native);
        }
        if tier_c_available(test, TierCBackend::Bwrap) {
            out.push(Self::Bwrap);
        }
        out
    }
}

fn git_available(test: &str) -> bool {
    let found = Command::new("git").arg("--version").output().is_ok();
    found || !tierbox_test_support::skip(test, "git is not installed")
}

struct Repo {
    ws: tempfile::TempDir,
    state: tempfile::TempDir,
    policy: Policy,
    tier: TierRequest,
}

impl Repo {
    /// A workspace without a repository.
    fn empty(variant: Variant) -> Self {
        Self {
            ws: tempfile::tempdir().unwrap(),
            state: tempfile::tempdir().unwrap(),
            policy: variant.policy(),
            tier: variant.tier(),
        }
    }

    /// A repository with one commit made on the host, then an edit.
    fn with_commit(variant: Variant) -> Self {
        let repo = Self::empty(variant);
        repo.host_git(&["-c", "init.defaultBranch=main", "init", "-q"]);
        std::fs::write(repo.path("a.txt"), "one\n").unwrap();
        repo.host_git(&["add", "a.txt"]);
        repo.host_git(&["commit", "-q", "-m", "first"]);
        std::fs::write(repo.path("a.txt"), "one\ntwo\n").unwrap();
        repo
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.ws.path().join(rel)
    }

    fn host_git(&self, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(args)
            .current_dir(self.ws.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .envs(IDENTITY.iter().copied())
            .output()
            .unwrap();
        assert!(out.status.success(), "host git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    fn run(&self, command: &str, args: &[&str]) -> Outcome {
        let mut r = ProcessRunRequest::new(command);
        r.args = args.iter().map(|s| (*s).to_owned()).collect();
        r.tier = self.tier;
        for (k, v) in IDENTITY {
            r.env.insert((*k).to_owned(), (*v).to_owned());
        }
        let runner = Runner::new(self.policy.clone())
            .with_workspace(self.ws.path())
            .with_options(RunOptions {
                state_dir: self.state.path().to_path_buf(),
            });
        super::runs::rt().block_on(runner.run(&r)).unwrap()
    }

    /// Runs `git ARGS` in the sandbox and asserts it succeeds.
    fn git(&self, args: &[&str]) -> Outcome {
        let o = self.run("git", args);
        assert_eq!(
            o.exit_code,
            Some(0),
            "git {args:?} in {:?}: {}",
            self.tier,
            o.stderr.text
        );
        assert!(
            o.protected_changed.is_empty(),
            "git {args:?} in {:?}: {:?}",
            self.tier,
            o.protected_changed
        );
        o
    }

    /// A digest of every guarded entry: kind, mode and content, recursively.
    fn guarded(&self) -> String {
        let mut out = String::new();
        for name in GUARDED {
            digest(&self.path(&format!(".git/{name}")), &mut out);
        }
        out
    }
}

fn digest(path: &Path, out: &mut String) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        out.push_str(&format!("{}: absent\n", path.display()));
        return;
    };
    let mode = meta.permissions().mode();
    if meta.is_dir() {
        out.push_str(&format!("{}: dir {mode:o}\n", path.display()));
        let mut names: Vec<_> = std::fs::read_dir(path)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        for n in names {
            digest(&n, out);
        }
    } else if meta.file_type().is_symlink() {
        let target = std::fs::read_link(path).unwrap();
        out.push_str(&format!("{}: link {}\n", path.display(), target.display()));
    } else {
        let content = std::fs::read(path).unwrap();
        out.push_str(&format!(
            "{}: file {mode:o} {:?}\n",
            path.display(),
            String::from_utf8_lossy(&content)
        ));
    }
}

/// Every command of an everyday commit workflow, one run each, as on the host; the
/// guarded entries unchanged afterwards, and no placeholder left behind.
#[test]
fn git_commits_under_the_version_control_preset_and_what_git_runs_is_unchanged() {
    let test = "git_commits_under_the_version_control_preset_and_what_git_runs_is_unchanged";
    for variant in Variant::available(test) {
        let repo = Repo::with_commit(variant);
        std::fs::write(repo.path(".git/hooks/pre-commit.sample"), "#!/bin/sh\n").unwrap();
        let before = repo.guarded();
        repo.git(&["add", "a.txt"]);
        repo.git(&["commit", "-q", "-m", "second"]);
        repo.git(&["branch", "feature"]);
        repo.git(&["tag", "v1"]);
        repo.git(&["checkout", "-q", "feature"]);
        std::fs::write(repo.path("b.txt"), "bee\n").unwrap();
        repo.git(&["add", "b.txt"]);
        repo.git(&["commit", "-q", "-m", "add b"]);
        repo.git(&["checkout", "-q", "main"]);
        repo.git(&["merge", "-q", "--no-ff", "-m", "merge feature", "feature"]);
        std::fs::write(repo.path("a.txt"), "one\ntwo\nstashed\n").unwrap();
        repo.git(&["stash", "-q"]);
        let stashes = repo.git(&["stash", "list"]);
        assert!(stashes.stdout.text.contains("stash@{0}"), "{variant:?}");
        let log = repo.host_git(&["log", "--all", "--format=%s"]);
        for subject in ["first", "second", "add b", "merge feature"] {
            assert!(log.lines().any(|l| l == subject), "{variant:?}: {log}");
        }
        assert_eq!(repo.host_git(&["tag", "--list"]), "v1\n", "{variant:?}");
        assert_eq!(
            repo.guarded(),
            before,
            "{variant:?}: what git executes or follows changed"
        );
        for name in ABSENT {
            assert!(
                std::fs::symlink_metadata(repo.path(&format!(".git/{name}"))).is_err(),
                "{variant:?}: the placeholder .git/{name} was left behind"
            );
        }
        let missing = &stashes.enforcement.missing_layers;
        // Every tier holds them read-only (Tier B in the run's own mount namespace).
        assert!(
            !missing.contains(&Layer::ProtectedPaths)
                && stashes.enforcement.protected_paths.applied,
            "{variant:?}: {missing:?}"
        );
    }
}

/// The commands that must write what git executes or follows fail in every tier, with
/// git's own message, and leave it unchanged; `.git` itself cannot be swapped.
/// Regression: Tier B left them writable and only named what a run changed
/// (`protected_changed`); it now binds them read-only in the run's mount namespace.
#[test]
fn writes_to_what_git_runs_are_refused() {
    let test = "writes_to_what_git_runs_are_refused";
    for variant in Variant::available(test) {
        let repo = Repo::with_commit(variant);
        let before = repo.guarded();
        let refused = |command: &str, args: &[&str], sign: &str| {
            let o = repo.run(command, args);
            assert_ne!(o.exit_code, Some(0), "{variant:?}: {command} {args:?}");
            assert!(
                o.stderr.text.contains(sign),
                "{variant:?}: {command} {args:?}: {}",
                o.stderr.text
            );
            assert!(
                o.protected_changed.is_empty(),
                "{variant:?}: {command} {args:?}: {:?}",
                o.protected_changed
            );
        };
        let busy = "could not write config file";
        refused("git", &["config", "user.name", "evil"], busy);
        refused(
            "git",
            &["remote", "add", "o", "https://example.invalid/r.git"],
            busy,
        );
        refused("git", &["worktree", "add", "wt"], ".git/worktrees/wt");
        std::fs::write(repo.path("evil"), "#!/bin/sh\ntouch /tmp/pwned\n").unwrap();
        refused("cp", &["evil", ".git/hooks/pre-commit"], "");
        refused("cp", &["evil", ".git/info/attributes"], "");
        refused("mv", &[".git", "moved"], "");
        refused("cp", &["evil", ".git/commondir"], "");
        assert_eq!(repo.guarded(), before, "{variant:?}");
        for name in ABSENT {
            assert!(
                std::fs::symlink_metadata(repo.path(&format!(".git/{name}"))).is_err(),
                "{variant:?}: .git/{name} exists after the run"
            );
        }
        assert!(repo.path(".git/HEAD").is_file() && !repo.path("moved").exists());
        // The repository still works on the host.
        assert_eq!(repo.host_git(&["log", "--format=%s"]), "first\n");
    }
}

/// In a workspace without a repository `git init` makes the run's own, named in the
/// outcome, and later runs commit in it.
#[test]
fn git_init_makes_the_run_s_own_repository() {
    let test = "git_init_makes_the_run_s_own_repository";
    for variant in Variant::available(test) {
        let repo = Repo::empty(variant);
        std::fs::write(repo.path("readme.txt"), "hello\n").unwrap();
        let init = repo.git(&["init", "-q", "-b", "main"]);
        let ws = std::fs::canonicalize(repo.ws.path()).unwrap();
        assert_eq!(init.created_git_dirs, vec![ws], "{variant:?}");
        repo.git(&["add", "readme.txt"]);
        let commit = repo.git(&["commit", "-q", "-m", "init"]);
        assert!(
            commit.created_git_dirs.is_empty(),
            "{variant:?}: known since the previous run"
        );
        assert_eq!(repo.host_git(&["log", "--format=%s"]), "init\n");
    }
}

/// `git config --global` writes the run's private `HOME`: it holds within the run and is
/// gone after it. The identity the policy grants read-only (`GIT_CONFIG_SYSTEM`) is used,
/// cannot be changed, and the run's own settings win over it.
#[test]
fn global_git_configuration_lives_in_the_run_s_home() {
    let test = "global_git_configuration_lives_in_the_run_s_home";
    for variant in Variant::available(test) {
        let mut repo = Repo::with_commit(variant);
        let identity = tempfile::tempdir().unwrap();
        let user_config = std::fs::canonicalize(identity.path())
            .unwrap()
            .join("gitconfig");
        std::fs::write(
            &user_config,
            "[user]\n\tname = From Host\n\temail = host@x\n",
        )
        .unwrap();
        let user_config_text = user_config.to_str().unwrap().to_owned();
        repo.policy.filesystem.read_only = vec![user_config_text.clone()];
        repo.policy
            .env
            .set
            .insert("GIT_CONFIG_SYSTEM".to_owned(), user_config_text);
        repo.policy.exec.allowed_executables.push("sh".to_owned());
        repo.policy.exec.allow_interpreters = true;
        repo.policy.exec.allow_eval = true;
        // Without the request's fixed identity, so the configured ones decide.
        let run_sh = |script: &str| {
            let mut r = ProcessRunRequest::new("sh");
            r.args = vec!["-c".to_owned(), script.to_owned()];
            r.tier = repo.tier;
            let runner = Runner::new(repo.policy.clone())
                .with_workspace(repo.ws.path())
                .with_options(RunOptions {
                    state_dir: repo.state.path().to_path_buf(),
                });
            super::runs::rt().block_on(runner.run(&r)).unwrap()
        };
        let o = run_sh("git commit -qam 'from host identity' && git log -1 --format=%an");
        assert_eq!(o.exit_code, Some(0), "{variant:?}: {}", o.stderr.text);
        assert_eq!(o.stdout.text, "From Host\n", "{variant:?}");
        let o = run_sh(
            "git config --global user.name 'In Run' && echo x >> a.txt && \
             git commit -qam 'in run' && git log -1 --format=%an",
        );
        assert_eq!(o.exit_code, Some(0), "{variant:?}: {}", o.stderr.text);
        assert_eq!(o.stdout.text, "In Run\n", "{variant:?}");
        // A new run has a new HOME.
        let o = run_sh("git config --global user.name");
        assert_eq!(o.exit_code, Some(1), "{variant:?}: {}", o.stdout.text);
        // The granted file is read-only.
        let o = run_sh("git config --system user.name evil");
        assert_ne!(o.exit_code, Some(0), "{variant:?}");
        assert!(
            std::fs::read_to_string(&user_config)
                .unwrap()
                .contains("From Host")
        );
    }
}

/// With `env.workspace_home` the runs of one workspace share a `HOME` inside it, which
/// the supervisor makes: `git config --global` of one run is seen by the next.
#[test]
fn a_workspace_home_carries_global_git_configuration_to_the_next_run() {
    let test = "a_workspace_home_carries_global_git_configuration_to_the_next_run";
    for variant in Variant::available(test) {
        let mut repo = Repo::with_commit(variant);
        repo.policy.env.workspace_home = Some(".agent/home".to_owned());
        repo.policy.env.set.remove("GIT_CONFIG_SYSTEM");
        let o = repo.git(&["config", "--global", "user.name", "Kept"]);
        assert_eq!(o.exit_code, Some(0), "{variant:?}");
        let o = repo.git(&["config", "--global", "user.name"]);
        assert_eq!(o.stdout.text, "Kept\n", "{variant:?}");
        let kept = std::fs::read_to_string(repo.path(".agent/home/.gitconfig")).unwrap();
        assert!(kept.contains("Kept"), "{variant:?}: {kept}");
        // Another workspace's runs do not see it.
        let mut other = Repo::with_commit(variant);
        other.policy = repo.policy.clone();
        let o = other.run("git", &["config", "--global", "user.name"]);
        assert_eq!(o.exit_code, Some(1), "{variant:?}: {}", o.stdout.text);
    }
}
