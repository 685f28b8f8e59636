#![allow(clippy::unwrap_used)]

use rustix::fs::{Mode, OFlags};

use super::*;

fn ws() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap();
    (dir, ws)
}

fn rel(ws: &Path, scan: &RepoScan) -> Vec<String> {
    scan.repos
        .iter()
        .map(|r| r.strip_prefix(ws).unwrap().display().to_string())
        .collect()
}

/// Regression: the search stopped 4 levels down and skipped `node_modules`, `target`,
/// `.venv`, `venv` and `__pycache__`, and its report said nothing; a repository there kept
/// a writable `.git/config` the host's next `git status` would run.
#[test]
fn repositories_are_found_at_any_depth_in_any_directory() {
    let (_d, ws) = ws();
    for repo in [
        ".git",
        "vendor/lib/.git",
        "a/b/c/d/e/f/.git",
        "node_modules/x/.git",
        "target/debug/build/y/.git",
        ".venv/lib/z/.git",
        "__pycache__/w/.git",
    ] {
        std::fs::create_dir_all(ws.join(repo)).unwrap();
    }
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    std::fs::write(ws.join("sub/.git"), "gitdir: ../.git/worktrees/sub\n").unwrap();
    std::fs::create_dir_all(ws.join("linked")).unwrap();
    std::os::unix::fs::symlink("../.git", ws.join("linked/.git")).unwrap();
    // Inside a git directory nothing is another repository.
    std::fs::create_dir_all(ws.join(".git/modules/m/.git")).unwrap();
    let scan = scan_repos(&ws, ScanLimits::default()).unwrap();
    assert_eq!(
        rel(&ws, &scan),
        [
            "",
            ".venv/lib/z",
            "__pycache__/w",
            "a/b/c/d/e/f",
            "linked",
            "node_modules/x",
            "sub",
            "target/debug/build/y",
            "vendor/lib",
        ],
        "{scan:?}"
    );
}

/// A symlink to a directory is not searched through, at the start or swapped in later:
/// the search reads nothing outside the workspace.
#[test]
fn symlinks_are_never_followed() {
    let (_d, root) = ws();
    let ws = root.join("ws");
    let outside = root.join("outside");
    std::fs::create_dir_all(outside.join("repo/.git")).unwrap();
    std::fs::create_dir_all(ws.join("dir/inner/.git")).unwrap();
    std::os::unix::fs::symlink(&outside, ws.join("out")).unwrap();
    let scan = scan_repos(&ws, ScanLimits::default()).unwrap();
    assert_eq!(rel(&ws, &scan), ["dir/inner"]);
    // The directory that was searched becomes a symlink out.
    std::fs::rename(ws.join("dir"), root.join("moved")).unwrap();
    std::os::unix::fs::symlink(&outside, ws.join("dir")).unwrap();
    let scan = scan_repos(&ws, ScanLimits::default()).unwrap();
    assert!(scan.repos.is_empty(), "{scan:?}");
}

/// Past a limit the search is incomplete, naming the limit, the count and the key that
/// raises it; raising the key completes it.
#[test]
fn a_limit_that_is_hit_is_reported_with_its_key() {
    let (_d, ws) = ws();
    for i in 0..5 {
        std::fs::create_dir_all(ws.join(format!("r{i}/.git"))).unwrap();
    }
    std::fs::create_dir_all(ws.join("big")).unwrap();
    for i in 0..50 {
        std::fs::write(ws.join(format!("big/f{i}")), "").unwrap();
    }
    let repos = ScanLimits {
        max_repos: 4,
        ..ScanLimits::default()
    };
    match scan_repos(&ws, repos).unwrap_err() {
        e @ ScanIncomplete::Limit {
            limit: ScanLimit::Repos,
            count: 5,
            max: 4,
            ..
        } => assert!(
            e.to_string().contains("filesystem.max_protected_repos"),
            "{e}"
        ),
        e => panic!("{e:?}"),
    }
    let entries = ScanLimits {
        max_entries: 30,
        ..ScanLimits::default()
    };
    match scan_repos(&ws, entries).unwrap_err() {
        e @ ScanIncomplete::Limit {
            limit: ScanLimit::Entries,
            max: 30,
            ..
        } => assert!(
            e.to_string().contains("filesystem.repo_scan_max_entries"),
            "{e}"
        ),
        e => panic!("{e:?}"),
    }
    let scan = scan_repos(&ws, ScanLimits::default()).unwrap();
    assert_eq!(scan.repos.len(), 5);
    assert_eq!(scan.entries, 5 * 2 + 1 + 50, "{scan:?}");
}

/// A directory path too long for a mount is a limit no key raises.
#[test]
fn a_path_too_long_to_mount_over_is_reported() {
    let (_d, ws) = ws();
    let mut deep = ws.clone();
    while deep.as_os_str().len() < MAX_SCANNED_PATH_BYTES + 300 {
        deep.push("d".repeat(200));
    }
    // Made relative, one component at a time (the whole path is past PATH_MAX).
    let mut fd = rustix::fs::open(&ws, OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty()).unwrap();
    for part in deep.strip_prefix(&ws).unwrap().components() {
        rustix::fs::mkdirat(&fd, part.as_os_str(), Mode::from_raw_mode(0o755)).unwrap();
        fd = rustix::fs::openat(
            &fd,
            part.as_os_str(),
            OFlags::DIRECTORY | OFlags::RDONLY,
            Mode::empty(),
        )
        .unwrap();
    }
    rustix::fs::mkdirat(&fd, ".git", Mode::from_raw_mode(0o755)).unwrap();
    match scan_repos(&ws, ScanLimits::default()).unwrap_err() {
        e @ ScanIncomplete::Limit {
            limit: ScanLimit::PathLength,
            ..
        } => assert!(
            e.to_string().contains("cannot be covered by a mount"),
            "{e}"
        ),
        e => panic!("{e:?}"),
    }
    // Clean up what `remove_dir_all` could not reach by path.
    let _ = std::process::Command::new("rm")
        .arg("-rf")
        .arg(ws.join("d".repeat(200)))
        .status();
}

/// Once settled, a search rereads only the directories that changed; a repository added
/// anywhere (a decoy made by a run, or a real one) is found by the next search, and a
/// listing too close to its directory's change time is reread until it settles.
#[test]
fn kept_searches_reread_only_what_changed_and_miss_nothing() {
    let (_d, ws) = ws();
    for i in 0..20 {
        std::fs::create_dir_all(ws.join(format!("pkg{i}/src/mod"))).unwrap();
    }
    std::fs::create_dir_all(ws.join("pkg3/src/mod/.git")).unwrap();
    let first = scan_repos(&ws, ScanLimits::default()).unwrap();
    assert_eq!(first.reread, first.directories, "a first search reads all");
    // Too recent to trust: every listing is read again.
    let racy = scan_repos(&ws, ScanLimits::default()).unwrap();
    assert_eq!(racy.reread, racy.directories, "{racy:?}");
    std::thread::sleep(RACY_MARGIN + Duration::from_millis(200));
    let settling = scan_repos(&ws, ScanLimits::default()).unwrap();
    assert_eq!(settling.repos, first.repos);
    let settled = scan_repos(&ws, ScanLimits::default()).unwrap();
    assert_eq!(settled.reread, 0, "{settled:?}");
    assert_eq!(settled.repos, first.repos);
    assert_eq!(settled.directories, first.directories);
    // A new repository deep in a settled tree, with its directory's modification time
    // put back (which a run can do; the change time it cannot).
    let dir = ws.join("pkg17/src/mod");
    let mtime = std::fs::metadata(&dir).unwrap().modified().unwrap();
    std::fs::create_dir(dir.join(".git")).unwrap();
    std::fs::File::open(&dir)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let after = scan_repos(&ws, ScanLimits::default()).unwrap();
    assert_eq!(rel(&ws, &after), ["pkg17/src/mod", "pkg3/src/mod"]);
    assert!(after.reread <= 2, "{after:?}");
    // A subtree replaced by another with the same names is read again.
    std::fs::rename(ws.join("pkg5"), ws.join("old5")).unwrap();
    std::fs::create_dir_all(ws.join("pkg5/src/mod/.git")).unwrap();
    let swapped = scan_repos(&ws, ScanLimits::default()).unwrap();
    assert!(
        rel(&ws, &swapped).contains(&"pkg5/src/mod".to_owned()),
        "{swapped:?}"
    );
}

/// Times a cold and a kept search of `TIERBOX_SCAN_BENCH` (a large tree), in the test
/// profile: `TIERBOX_SCAN_BENCH=/path cargo test --release -p tierbox-policy --lib -- --ignored scan_timing --nocapture`.
#[test]
#[ignore = "a measurement, not a check"]
fn scan_timing() {
    let Some(ws) = std::env::var_os("TIERBOX_SCAN_BENCH") else {
        return;
    };
    let ws = std::fs::canonicalize(ws).unwrap();
    for round in 0..3 {
        forget_kept_search(&ws);
        let t = std::time::Instant::now();
        let cold = scan_repos(&ws, ScanLimits::default()).unwrap();
        let cold_t = t.elapsed();
        let t = std::time::Instant::now();
        let kept = scan_repos(&ws, ScanLimits::default()).unwrap();
        println!(
            "round {round}: {} entries, {} dirs, {} repos: cold {cold_t:?}, kept {:?} ({} reread)",
            cold.entries,
            cold.directories,
            cold.repos.len(),
            t.elapsed(),
            kept.reread
        );
    }
}

/// A listing kept in the state directory serves the next process (a one-shot CLI run):
/// settled directories are checked, not reread, and a change since is still found. A
/// listing file someone else could have written is not used.
#[test]
fn a_listing_kept_in_the_state_directory_serves_the_next_process() {
    use std::os::unix::fs::PermissionsExt;
    let (_d, root) = ws();
    let ws = root.join("ws");
    let state = root.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    for i in 0..10 {
        std::fs::create_dir_all(ws.join(format!("p{i}/src"))).unwrap();
    }
    std::fs::create_dir_all(ws.join("p4/.git")).unwrap();
    std::thread::sleep(RACY_MARGIN + Duration::from_millis(200));
    // A settled listing is written, then read by a "new process" (nothing kept in memory).
    let first = scan_repos_in(&ws, ScanLimits::default(), Some(&state)).unwrap();
    assert_eq!(first.reread, first.directories);
    forget_kept_search(&ws);
    let second = scan_repos_in(&ws, ScanLimits::default(), Some(&state)).unwrap();
    assert_eq!(second.reread, 0, "{second:?}");
    assert_eq!(second.repos, first.repos);
    // A change made since the listing was written is found.
    std::fs::create_dir_all(ws.join("p7/src/.git")).unwrap();
    forget_kept_search(&ws);
    let third = scan_repos_in(&ws, ScanLimits::default(), Some(&state)).unwrap();
    assert_eq!(rel(&ws, &third), ["p4", "p7/src"]);
    // A listing file writable by others is ignored (everything is read again).
    let file = std::fs::read_dir(state.join(REPO_SCAN_CACHE_DIR))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    forget_kept_search(&ws);
    let fourth = scan_repos_in(&ws, ScanLimits::default(), Some(&state)).unwrap();
    assert_eq!(fourth.reread, fourth.directories, "{fourth:?}");
}
