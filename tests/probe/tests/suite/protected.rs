//! Protected paths inside the workspace (`filesystem.protected`: the git directory, or the
//! entries git executes or follows) on every backend that keeps them read-only: Tier B,
//! in the run's own mount namespace, and both Tier C backends. Judged on the host: what
//! git would run later must be exactly as it was.
//!
//! Every run is checked to have happened on the backend the test names ([`probe_on`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tierbox_policy::{ProcessRunRequest, TierRequest};
use tierbox_runner::Outcome;

use super::harness::{
    Backend, Fixture, Need, assert_broken, assert_direct_broken, assert_holds, describe, report,
};

/// Runs the probe with `args` and checks it ran on the fixture's backend (`backend`).
async fn probe_on(fx: &Fixture, args: &[&str]) -> Outcome {
    let o = fx.probe(args).await;
    super::harness::assert_backend(&o, fx);
    o
}

/// The default protected paths, enforced (not an optional layer).
fn protect_git(fx: &mut Fixture) {
    fx.protect(&[".git/hooks", ".git/config"]);
}

/// A snapshot of a directory tree: relative path and content (`None` for directories).
fn tree(dir: &Path) -> Vec<(PathBuf, Option<Vec<u8>>)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(PathBuf, Option<Vec<u8>>)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                out.push((rel, None));
                walk(root, &path, out);
            } else {
                out.push((rel, std::fs::read(&path).ok()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// `.git/hooks` and `.git/config` can be neither written nor swapped: not renamed away
/// (`mv .git/hooks x`), removed, replaced or exchanged with a file, a directory or a
/// symlink, and `.git` cannot be renamed away to build a new one in its place. The
/// host's `.git` is unchanged afterwards. Negative controls: an unprotected file in the
/// same `.git` can be replaced from the run, and without the sandbox the protected paths
/// can be replaced too.
async fn protected_paths_cannot_be_written_or_swapped(test: &str, backend: Backend) {
    let Some(mut fx) = Fixture::on(test, &[], backend) else {
        return;
    };
    protect_git(&mut fx);
    let git = fx.workspace.join(".git");
    std::fs::create_dir_all(git.join("hooks")).unwrap();
    std::fs::write(git.join("hooks/pre-commit"), "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::write(git.join("config"), "[core]\n\tbare = false\n").unwrap();
    std::fs::write(git.join("description"), "unprotected\n").unwrap();
    let before = tree(&git);

    let mut broken = Vec::new();
    for target in [".git/hooks", ".git/config", ".git/hooks/pre-commit"] {
        let o = probe_on(&fx, &["replace-denied", target]).await;
        println!("{}", report(&o));
        assert!(
            o.enforcement.protected_paths.applied,
            "protected paths not enforced:\n{}",
            describe(&o)
        );
        if !(o.exit_code == Some(0) && report(&o).starts_with("HOLDS ")) {
            broken.push(describe(&o));
        }
    }
    assert_eq!(tree(&git), before, "the host's .git changed");
    assert!(
        broken.is_empty(),
        "{} protected path(s) can be changed or swapped:\n{}",
        broken.len(),
        broken.join("\n")
    );

    // Negative controls.
    assert_broken(&probe_on(&fx, &["replace-denied", ".git/description"]).await);
    assert_direct_broken(&fx.direct(&["replace-denied", ".git/config"]));
    assert_direct_broken(&fx.direct(&["replace-denied", ".git/hooks"]));
}

on_every_backend!(protected_paths_cannot_be_written_or_swapped => protected_paths_cannot_be_written_or_swapped_tier_b, protected_paths_cannot_be_written_or_swapped_native, protected_paths_cannot_be_written_or_swapped_bwrap);

/// In a workspace without `.git`, with `.git` protected (as by default), the protected
/// `.git/hooks` and `.git/config` cannot be created (nor `.git` itself, nor by renaming or
/// removing what stands in for it), and nothing is left on the host afterwards. Negative
/// controls: with only the entries listed (the version-control preset, which leaves
/// `git init` to the run and reports the repository it makes) and without protected
/// paths the run can create them, and so can the probe without the sandbox.
async fn missing_protected_paths_cannot_be_created(test: &str, backend: Backend) {
    let Some(mut fx) = Fixture::on(test, &[], backend) else {
        return;
    };
    protect_git(&mut fx);
    fx.policy.filesystem.protected.insert(0, ".git".to_owned());
    let git = fx.workspace.join(".git");
    for target in [".git/hooks", ".git/config", ".git/hooks/post-checkout"] {
        let o = probe_on(&fx, &["create-denied", target]).await;
        assert_holds(&o);
        // A long-lived supervisor (the pooled suite) removes placeholders once pid 1 is
        // reaped, just after the outcome.
        tierbox_sandbox::launch::reaper::settle(Duration::from_secs(2));
        assert!(
            std::fs::symlink_metadata(&git).is_err(),
            "{} exists on the host after the run:\n{}",
            git.display(),
            describe(&o)
        );
    }

    // Negative controls: with the entries only, a missing `.git` is the run's to make;
    // unprotected, the run can create `.git/hooks` (the probe undoes it); and so can the
    // probe without the sandbox.
    protect_git(&mut fx);
    assert_broken(&probe_on(&fx, &["create-denied", ".git/hooks"]).await);
    let _ = std::fs::remove_dir_all(&git);
    fx.policy.filesystem.protected.clear();
    assert_broken(&probe_on(&fx, &["create-denied", ".git/hooks"]).await);
    assert_direct_broken(&fx.direct(&["create-denied", ".git/hooks"]));
}

on_every_backend!(missing_protected_paths_cannot_be_created => missing_protected_paths_cannot_be_created_tier_b, missing_protected_paths_cannot_be_created_native, missing_protected_paths_cannot_be_created_bwrap);

/// Everything git reads configuration, hooks or another git directory from stays as it
/// was, in the workspace's repository and in repositories nested in it at launch: the
/// git directory is read-only as a whole, so none of `commondir`, `config.worktree`,
/// `worktrees/`, `modules/`, `info/` can be created or written, a nested repository's
/// `config` and hooks neither, and a `.git` file (a worktree checkout's pointer to its git
/// directory) cannot be rewritten. Ordinary git writes fail too (an object file), as
/// documented: the host commits what a run changed. The host's trees are unchanged.
///
/// Regression: only `.git/hooks` and `.git/config` were protected; writing `.git/commondir`
/// (pointing at a directory whose `config` set `core.fsmonitor`) made the host's next
/// `git status` run the planted command as root, and so did a `core.fsmonitor` planted in
/// a nested repository. Negative controls: the probe creates and rewrites them without
/// the sandbox.
async fn git_redirect_surface_cannot_be_planted(test: &str, backend: Backend) {
    let Some(mut fx) = Fixture::on(test, &[], backend) else {
        return;
    };
    fx.protect(tierbox_policy::validate::DEFAULT_PROTECTED);
    let ws = fx.workspace.clone();
    for dir in [
        ".git/hooks",
        ".git/info",
        ".git/objects/ab",
        "vendor/lib/.git/hooks",
        "sub",
    ] {
        std::fs::create_dir_all(ws.join(dir)).unwrap();
    }
    std::fs::write(ws.join(".git/config"), "[core]\n\tbare = false\n").unwrap();
    std::fs::write(ws.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(
        ws.join("vendor/lib/.git/config"),
        "[core]\n\tbare = false\n",
    )
    .unwrap();
    std::fs::write(ws.join("sub/.git"), "gitdir: ../.git/worktrees/sub\n").unwrap();
    let before = (
        tree(&ws.join(".git")),
        tree(&ws.join("vendor")),
        tree(&ws.join("sub")),
    );

    let mut broken = Vec::new();
    let attempts: [(&str, &str); 11] = [
        ("create-denied", ".git/commondir"),
        ("create-denied", ".git/config.worktree"),
        ("create-denied", ".git/worktrees/sub"),
        ("create-denied", ".git/modules/m"),
        ("create-denied", ".git/info/attributes"),
        ("replace-denied", ".git/config"),
        ("replace-denied", "vendor/lib/.git/config"),
        ("create-denied", "vendor/lib/.git/commondir"),
        ("create-denied", "vendor/lib/.git/hooks/post-checkout"),
        ("replace-denied", "sub/.git"),
        ("create-denied", ".git/objects/ab/cdef"),
    ];
    for (probe, target) in attempts {
        let o = probe_on(&fx, &[probe, target]).await;
        if !(o.exit_code == Some(0) && report(&o).starts_with("HOLDS ")) {
            broken.push(describe(&o));
        }
    }
    assert!(
        broken.is_empty(),
        "{} part(s) of the git redirect surface can be planted:\n{}",
        broken.len(),
        broken.join("\n")
    );
    assert_eq!(
        (
            tree(&ws.join(".git")),
            tree(&ws.join("vendor")),
            tree(&ws.join("sub"))
        ),
        before,
        "the host's repositories changed"
    );
    // Negative controls.
    assert_direct_broken(&fx.direct(&["create-denied", ".git/commondir"]));
    assert_direct_broken(&fx.direct(&["replace-denied", "vendor/lib/.git/config"]));
}

on_every_backend!(git_redirect_surface_cannot_be_planted => git_redirect_surface_cannot_be_planted_tier_b, git_redirect_surface_cannot_be_planted_native, git_redirect_surface_cannot_be_planted_bwrap);

/// How many runs start while `.git/hooks` is being swapped.
const SWAP_RUNS: usize = 40;

/// `.git/hooks` swapped back and forth (`renameat2(RENAME_EXCHANGE)`, as fast as the
/// host can) with a symlink to a host directory while Tier B runs start: the directory
/// never becomes a bind's source (the run would list it at `.git/hooks`) nor its
/// destination (the run would see the hooks over it; the directory is a read-only grant,
/// so the run sees it as itself), in every run's mount table; a run either binds the
/// real hooks, or covers the symlink, or is refused before it starts because what it
/// planned to bind changed. The host directory is unchanged afterwards. Fails on a
/// Tier B that binds nothing (no run has `.git/hooks` bound) and on one that binds by
/// name (the swapped-in directory shows in some run's mount table).
#[tokio::test]
async fn a_protected_path_swapped_while_runs_start_never_binds_the_host() {
    let test = "a_protected_path_swapped_while_runs_start_never_binds_the_host";
    let Some(mut fx) = Fixture::new(test, &[Need::Root]) else {
        return;
    };
    protect_git(&mut fx);
    fx.policy.exec.allowed_executables = vec!["cat".to_owned()];
    let host = fx.parent.join("host-dir-swapped-in");
    std::fs::create_dir(&host).unwrap();
    std::fs::write(host.join("host-marker"), "the host's\n").unwrap();
    fx.policy
        .filesystem
        .read_only
        .push(host.display().to_string());
    let git = fx.workspace.join(".git");
    std::fs::create_dir_all(git.join("hooks")).unwrap();
    std::fs::write(git.join("hooks/pre-commit"), "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::write(git.join("config"), "[core]\n\tbare = false\n").unwrap();
    std::os::unix::fs::symlink(&host, git.join("hooks.link")).unwrap();
    let before = tree(&host);

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicUsize::new(0));
    let swapper = {
        let (stop, swaps, git) = (stop.clone(), swaps.clone(), git.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if rustix::fs::renameat_with(
                    rustix::fs::CWD,
                    git.join("hooks"),
                    rustix::fs::CWD,
                    git.join("hooks.link"),
                    rustix::fs::RenameFlags::EXCHANGE,
                )
                .is_err()
                {
                    break;
                }
                swaps.fetch_add(1, Ordering::Relaxed);
                std::thread::yield_now();
            }
        })
    };
    let host_name = host.file_name().unwrap().to_string_lossy().into_owned();
    let (mut bound, mut covered, mut refused) = (0, 0, 0);
    let mut exposed = Vec::new();
    for _ in 0..SWAP_RUNS {
        let mut req = ProcessRunRequest::new("cat");
        req.args = vec!["/proc/self/mountinfo".to_owned()];
        req.tier = TierRequest::B;
        let o = match fx.try_run(&req).await {
            Ok(o) => o,
            Err(e) => {
                assert!(
                    e.contains("changed between planning and binding"),
                    "a run was refused for another reason: {e}"
                );
                refused += 1;
                continue;
            }
        };
        assert_eq!(o.exit_code, Some(0), "{}", describe(&o));
        for line in o.stdout.text.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            let (Some(root), Some(point)) = (fields.get(3), fields.get(4)) else {
                continue;
            };
            if root.contains(&host_name) || point.contains(&host_name) {
                exposed.push(line.to_owned());
            }
            if point.contains("/.git/hooks") && root.contains("/.git/hooks") {
                bound += 1;
            } else if point.contains("/.git/hooks") && root.ends_with("/null") {
                covered += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    println!(
        "{SWAP_RUNS} runs while .git/hooks was swapped {} times: hooks bound in {bound}, the symlink covered in {covered}, {refused} refused",
        swaps.load(Ordering::Relaxed)
    );
    assert!(
        exposed.is_empty(),
        "the host directory was bound into a run:\n{}",
        exposed.join("\n")
    );
    assert_eq!(tree(&host), before, "the host directory changed");
    assert!(bound > 0, "no run had .git/hooks bound read-only");
}

/// A protected file the host unbinds between two runs — removed and linked back, the
/// same inode at the same path, which detaches every mount on the old name in every
/// namespace — is bound again for the next run. In a long-lived supervisor (the pooled
/// suite) the slot's launcher thread holds the first run's binds and its children
/// inherit them: the thread must be found stale (its mount gone) and not serve the next
/// run, which would otherwise find `.git/config` writable.
#[tokio::test]
async fn a_bind_the_host_undoes_between_runs_is_made_again() {
    let test = "a_bind_the_host_undoes_between_runs_is_made_again";
    let Some(mut fx) = Fixture::new(test, &[Need::Root]) else {
        return;
    };
    protect_git(&mut fx);
    let git = fx.workspace.join(".git");
    std::fs::create_dir_all(git.join("hooks")).unwrap();
    std::fs::write(git.join("config"), "[core]\n\tbare = false\n").unwrap();
    for round in 0..3 {
        let o = probe_on(&fx, &["replace-denied", ".git/config"]).await;
        assert_holds(&o);
        assert!(
            o.enforcement.protected_paths.applied,
            "round {round}: {}",
            describe(&o)
        );
        // Pooled, the slot's thread holds the binds and the run inherits them.
        assert!(
            !crate::POOLED || o.enforcement.seccomp.detail.contains("inherited"),
            "round {round}: not served by the slot's thread: {}",
            describe(&o)
        );
        // Removed and linked back: the same file, and the mounts on it gone.
        let keep = fx.parent.join("config.keep");
        std::fs::hard_link(git.join("config"), &keep).unwrap();
        std::fs::remove_file(git.join("config")).unwrap();
        std::fs::hard_link(&keep, git.join("config")).unwrap();
        std::fs::remove_file(&keep).unwrap();
    }
    assert_eq!(
        std::fs::read_to_string(git.join("config")).unwrap(),
        "[core]\n\tbare = false\n"
    );
}
