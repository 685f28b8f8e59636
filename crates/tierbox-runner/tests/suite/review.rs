//! Review mode through the library API: a native Tier C run in overlay mode leaves the
//! workspace untouched and returns its change set, which applies to exactly what a
//! direct run produces, or is discarded; the disk limit stops a disk bomb in the upper
//! layer and in `/tmp`. Each test skips with a printed reason when native Tier C cannot
//! run here — and fails instead under `CI=true`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use tierbox_policy::{Policy, ProcessRunRequest, TierRequest, WorkspaceMode};
use tierbox_runner::changes::ChangeKind;
use tierbox_runner::review::ChangeStore;
use tierbox_runner::{LimitHit, RunOptions, Runner};

fn usable(test: &str) -> bool {
    let facts = tierbox_sandbox::probe::host_facts();
    match tierbox_sandbox::select::tier_available(tierbox_policy::Tier::C, facts) {
        Ok(()) => true,
        Err(e) => !tierbox_test_support::skip(test, &e.to_string()),
    }
}

struct Env {
    ws: tempfile::TempDir,
    state: tempfile::TempDir,
    policy: Policy,
}

/// What the tests' runs do to a workspace: an edit, a deletion, a rename, a new
/// directory with a file, a symlink out of the workspace, a setuid file.
const SCRIPT: &str = "printf 'one\\n2\\n' > edit.txt && rm gone.txt && mv old.txt new.txt \
     && mkdir -p src && printf 'fn f() {}\\n' > src/lib.rs && ln -s /etc/passwd link \
     && printf '#!/bin/sh\\n' > suid && { chmod 4755 suid 2>/dev/null && exit 9 || chmod 755 suid; } \
     && echo done";

impl Env {
    fn new() -> Self {
        let mut policy = Policy::builtin_default();
        policy.exec.allowed_executables = ["sh", "head", "true"].map(str::to_owned).to_vec();
        policy.exec.allow_interpreters = true;
        policy.exec.allow_eval = true;
        let env = Self {
            ws: tempfile::tempdir().unwrap(),
            state: tempfile::tempdir().unwrap(),
            policy,
        };
        env.seed();
        env
    }

    fn seed(&self) {
        let ws = self.ws.path();
        std::fs::write(ws.join("edit.txt"), "one\ntwo\n").unwrap();
        std::fs::write(ws.join("gone.txt"), "bye\n").unwrap();
        std::fs::write(ws.join("old.txt"), "moved\n").unwrap();
    }

    fn runner(&self) -> Runner {
        Runner::new(self.policy.clone())
            .with_workspace(self.ws.path())
            .with_options(RunOptions {
                state_dir: self.state.path().to_path_buf(),
            })
    }

    fn store(&self) -> ChangeStore {
        ChangeStore::new(self.state.path())
    }
}

fn sh(script: &str, mode: Option<WorkspaceMode>) -> ProcessRunRequest {
    let mut r = ProcessRunRequest::new("sh");
    r.args = vec!["-c".to_owned(), script.to_owned()];
    r.tier = TierRequest::C;
    r.workspace_mode = mode;
    r
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Every entry below `root` (its relative path, kind, mode without the setuid bits, and
/// content or link target), `.git` placeholders aside.
fn tree(root: &Path) -> Vec<(PathBuf, String)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for e in std::fs::read_dir(root.join(&rel)).unwrap().flatten() {
            let rel = rel.join(e.file_name());
            let meta = std::fs::symlink_metadata(root.join(&rel)).unwrap();
            let what = if meta.is_dir() {
                stack.push(rel.clone());
                format!("dir {:o}", meta.mode() & 0o777)
            } else if meta.file_type().is_symlink() {
                format!(
                    "link {}",
                    std::fs::read_link(root.join(&rel)).unwrap().display()
                )
            } else {
                format!(
                    "file {:o} {}",
                    meta.mode() & 0o777,
                    String::from_utf8_lossy(&std::fs::read(root.join(&rel)).unwrap())
                )
            };
            out.push((rel, what));
        }
    }
    out.sort();
    out
}

#[test]
fn an_overlay_run_changes_nothing_until_applied_and_then_equals_a_direct_run() {
    let test = "an_overlay_run_changes_nothing_until_applied_and_then_equals_a_direct_run";
    if !usable(test) {
        return;
    }
    let rt = rt();
    // The reference: the same run, direct.
    let direct = Env::new();
    let out = rt.block_on(direct.runner().run(&sh(SCRIPT, None))).unwrap();
    assert_eq!(out.exit_code, Some(0), "{}", out.stderr.text);
    assert!(out.changes.is_none());

    let env = Env::new();
    let before = tree(env.ws.path());
    let out = rt
        .block_on(env.runner().run(&sh(SCRIPT, Some(WorkspaceMode::Overlay))))
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{}", out.stderr.text);
    assert_eq!(out.stdout.text, "done\n");
    assert_eq!(
        tree(env.ws.path()),
        before,
        "the workspace changed before apply"
    );
    let set = out.changes.clone().expect("a change set in overlay mode");
    let kinds: Vec<(String, ChangeKind)> = set
        .changes
        .iter()
        .map(|c| (c.path.display().to_string(), c.kind))
        .collect();
    for expected in [
        ("edit.txt", ChangeKind::Modified),
        ("gone.txt", ChangeKind::Deleted),
        ("new.txt", ChangeKind::Renamed),
        ("src/lib.rs", ChangeKind::Added),
        ("link", ChangeKind::Added),
        ("suid", ChangeKind::Added),
    ] {
        assert!(
            kinds.contains(&(expected.0.to_owned(), expected.1)),
            "{expected:?} not in {kinds:?}"
        );
    }
    let link = set
        .changes
        .iter()
        .find(|c| c.path == Path::new("link"))
        .unwrap();
    assert!(
        link.flags
            .contains(&tierbox_runner::changes::ChangeFlag::SymlinkOutside)
    );
    // The attestation covers the change set.
    let envelope = out.attestation.clone().unwrap();
    let json = serde_json::to_value(&out).unwrap();
    tierbox_attest::verify_outcome(&envelope, &json).unwrap();
    let mut edited = json.clone();
    edited["changes"]["changes"][0]["sha256"] = "00".into();
    assert!(tierbox_attest::verify_outcome(&envelope, &edited).is_err());

    // The link out of the workspace and the new executable need consent.
    let err = env.store().apply(&out.run_id, None, false).unwrap_err();
    assert_eq!(err.code(), "changes.flagged", "{err}");
    assert_eq!(
        tree(env.ws.path()),
        before,
        "a refused apply changed the workspace"
    );
    let applied = env.store().apply(&out.run_id, None, true).unwrap();
    // The run could not make `suid` setuid (the seccomp filter refuses the mode, in both
    // runs), so apply has no bit to drop; it would drop one (tested in review_tests).
    assert!(
        applied.bits_dropped.is_empty(),
        "{:?}",
        applied.bits_dropped
    );
    assert_eq!(tree(env.ws.path()), tree(direct.ws.path()));
}

#[test]
fn a_discarded_overlay_run_leaves_nothing_behind() {
    let test = "a_discarded_overlay_run_leaves_nothing_behind";
    if !usable(test) {
        return;
    }
    let env = Env::new();
    let before = tree(env.ws.path());
    let out = rt()
        .block_on(env.runner().run(&sh(SCRIPT, Some(WorkspaceMode::Overlay))))
        .unwrap();
    assert!(!out.changes.as_ref().unwrap().is_empty());
    env.store().discard(&out.run_id).unwrap();
    assert_eq!(tree(env.ws.path()), before);
    let kept = env.state.path().join("changes");
    // Nothing of the run is left: only the store's (empty) lock file.
    let left: Vec<_> = std::fs::read_dir(&kept)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name() != tierbox_runner::review::caps::LOCK_FILE)
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn the_policy_decides_overlay_mode_and_a_request_may_not_widen_it() {
    let test = "the_policy_decides_overlay_mode_and_a_request_may_not_widen_it";
    if !usable(test) {
        return;
    }
    let mut env = Env::new();
    env.policy.workspace.mode = WorkspaceMode::Overlay;
    let rt = rt();
    let out = rt
        .block_on(env.runner().run(&sh("echo x > f", None)))
        .unwrap();
    assert_eq!(out.changes.unwrap().changes.len(), 1);
    assert!(!env.ws.path().join("f").exists());
    let err = rt
        .block_on(env.runner().run(&sh("true", Some(WorkspaceMode::Direct))))
        .unwrap_err();
    assert!(err.to_string().contains("never the reverse"), "{err}");
    // Tier B cannot: refused, never run direct.
    let mut b = sh("echo x > g", None);
    b.tier = TierRequest::B;
    let err = rt.block_on(env.runner().run(&b)).unwrap_err();
    assert!(
        err.to_string().contains("tier b has no mount namespace"),
        "{err}"
    );
    assert!(!env.ws.path().join("g").exists());
}

#[test]
fn a_disk_bomb_stops_at_the_disk_limit_in_the_overlay_and_in_tmp() {
    let test = "a_disk_bomb_stops_at_the_disk_limit_in_the_overlay_and_in_tmp";
    if !usable(test) {
        return;
    }
    let mut env = Env::new();
    env.policy.limits.disk_bytes = 8 << 20;
    let rt = rt();
    let free = |p: &Path| {
        let st = rustix::fs::statvfs(p).unwrap();
        st.f_bavail * st.f_frsize
    };
    let (ws_free, state_free) = (free(env.ws.path()), free(env.state.path()));
    // 64 MiB into the workspace through the overlay.
    let bomb = "head -c 67108864 /dev/zero > bomb; echo rc=$?";
    let out = rt
        .block_on(env.runner().run(&sh(bomb, Some(WorkspaceMode::Overlay))))
        .unwrap();
    // The host's disks lost at most the kept change set (≤ the limit), not 64 MiB; other
    // tenants write too, so the bound is generous but far below the bomb.
    let slack = 16 << 20;
    assert!(
        free(env.ws.path()) + (8 << 20) + slack >= ws_free,
        "the workspace's disk filled"
    );
    assert!(
        free(env.state.path()) + (8 << 20) + slack >= state_free,
        "the state directory's disk filled"
    );
    assert_eq!(out.limit_hit, Some(LimitHit::Disk), "{out:?}");
    assert!(
        out.stderr.text.contains("No space left"),
        "{}",
        out.stderr.text
    );
    assert!(!env.ws.path().join("bomb").exists());
    let bomb_change = out
        .changes
        .as_ref()
        .unwrap()
        .changes
        .iter()
        .find(|c| c.path == Path::new("bomb"))
        .unwrap()
        .clone();
    assert!(bomb_change.size.unwrap() <= 8 << 20, "{bomb_change:?}");
    // The same into /tmp in direct mode.
    let out = rt
        .block_on(env.runner().run(&sh(
            "head -c 67108864 /dev/zero > /tmp/bomb; echo rc=$?",
            None,
        )))
        .unwrap();
    assert_eq!(out.limit_hit, Some(LimitHit::Disk), "{out:?}");
    assert!(out.stdout.text.contains("rc=1"), "{}", out.stdout.text);
    // A run that writes little hits nothing.
    let out = rt
        .block_on(
            env.runner()
                .run(&sh("head -c 1000 /dev/zero > /tmp/small", None)),
        )
        .unwrap();
    assert_eq!(out.limit_hit, None);
}

/// The builder: `.overlay()` returns the outcome with its change set, which applies or
/// discards itself.
#[test]
fn the_builder_s_overlay_returns_a_change_set_that_applies_and_discards_itself() {
    let test = "the_builder_s_overlay_returns_a_change_set_that_applies_and_discards_itself";
    if !usable(test) {
        return;
    }
    let env = Env::new();
    let rt = rt();
    let command = |script: &str| {
        tierbox_runner::Sandbox::command("sh")
            .args(["-c", script])
            .policy(env.policy.clone())
            .working_dir(env.ws.path())
            .state_dir(env.state.path())
            .tier(TierRequest::C)
            .overlay()
    };
    let out = rt.block_on(command("echo one > a.txt").execute()).unwrap();
    let set = out.changes.expect("a change set");
    assert_eq!(set.changes.len(), 1);
    assert!(!env.ws.path().join("a.txt").exists());
    assert!(set.diff(1000).unwrap().contains("+one"));
    let applied = set.apply().unwrap();
    assert_eq!(applied.applied, [PathBuf::from("a.txt")]);
    assert_eq!(
        std::fs::read_to_string(env.ws.path().join("a.txt")).unwrap(),
        "one\n"
    );
    // Applied: the set is gone.
    assert!(set.apply().is_err());

    let out = rt.block_on(command("echo two > a.txt").execute()).unwrap();
    let set = out.changes.unwrap();
    set.discard().unwrap();
    assert_eq!(
        std::fs::read_to_string(env.ws.path().join("a.txt")).unwrap(),
        "one\n"
    );
    // A run that changes nothing returns an empty set, which keeps nothing.
    let out = rt.block_on(command("true").execute()).unwrap();
    assert!(out.changes.unwrap().is_empty());
}

/// A change inside a `.git` directory is flagged, here `.git/commondir` (which points git
/// at another repository) under a policy that does not protect `.git`.
#[test]
fn a_git_commondir_change_is_flagged() {
    let test = "a_git_commondir_change_is_flagged";
    if !usable(test) {
        return;
    }
    let mut env = Env::new();
    env.policy.filesystem.protected.clear();
    std::fs::create_dir(env.ws.path().join(".git")).unwrap();
    std::fs::write(env.ws.path().join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    let out = rt()
        .block_on(env.runner().run(&sh(
            "echo /tmp/elsewhere > .git/commondir && mkdir -p sub/.git && echo x > sub/.git/config",
            Some(WorkspaceMode::Overlay),
        )))
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{}", out.stderr.text);
    let set = out.changes.unwrap();
    let flags = |p: &str| {
        set.changes
            .iter()
            .find(|c| c.path == Path::new(p))
            .unwrap_or_else(|| panic!("{p} not in {set:?}"))
            .flags
            .clone()
    };
    use tierbox_runner::changes::ChangeFlag;
    assert!(flags(".git/commondir").contains(&ChangeFlag::GitInternal));
    assert!(flags("sub/.git").contains(&ChangeFlag::NewGitDir));
    assert!(flags("sub/.git/config").contains(&ChangeFlag::GitInternal));
    assert!(!env.ws.path().join(".git/commondir").exists());
}

/// Bytes the disk holds below `dir`, as `du` counts them.
fn du(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&d) else {
            continue;
        };
        total += meta.blocks() * 512;
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => stack.push(e.path()),
                Ok(m) => total += m.blocks() * 512,
                Err(_) => {}
            }
        }
    }
    total
}

/// Ten overlay runs of five owners at once, each writing 1.5 MiB under a 2 MiB disk
/// limit, with caps that hold one such set per owner and three in all: what is kept stays
/// under the caps, and the state directory grows by at most the total cap; a run whose
/// set does not fit is told so in its outcome, naming the cap; an owner's run that
/// evicts its own earlier set (never another owner's) says so in its outcome and in the
/// audit log (a `changes.evicted` event). Which runs get in depends on when each ends (a
/// set still being copied is not evicted), so one more run of an owner holding a set
/// makes sure an eviction happens.
#[test]
fn ten_concurrent_overlay_runs_keep_within_the_caps_and_report_what_they_evict() {
    let test = "ten_concurrent_overlay_runs_keep_within_the_caps_and_report_what_they_evict";
    if !usable(test) {
        return;
    }
    let mut env = Env::new();
    let audit = tempfile::tempdir().unwrap();
    let log = audit.path().join("audit.jsonl");
    env.policy.audit.log = Some(log.clone());
    env.policy.limits.disk_bytes = 2 << 20;
    env.policy.workspace.keep_changes_per_owner_bytes = 2 << 20;
    env.policy.workspace.keep_changes_total_bytes = 5 << 20;
    env.policy.check().unwrap();
    let caps = env.policy.workspace.keep_caps();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    // The state directory's own files (key, caches) first, then its size.
    let warm = rt.block_on(env.runner().run(&sh("true", None))).unwrap();
    assert_eq!(warm.exit_code, Some(0), "{}", warm.stderr.text);
    let before = du(env.state.path());

    let owners = ["test:a", "test:b", "test:c", "test:d", "test:e"];
    let outcomes = rt.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..10 {
            let runner = env.runner().with_owner(owners[i % owners.len()]);
            tasks.spawn(async move {
                let req = sh(
                    "head -c 1572864 /dev/zero > big && echo small > small.txt",
                    Some(WorkspaceMode::Overlay),
                );
                (runner.owner().to_owned(), runner.run(&req).await.unwrap())
            });
        }
        let mut out = Vec::new();
        while let Some(done) = tasks.join_next().await {
            out.push(done.unwrap());
        }
        out
    });
    let mut outcomes = outcomes;
    let held = env.store().usage();
    // One more run of an owner that holds a set: it evicts that set.
    let holder = held.by_owner.keys().next().unwrap().clone();
    let runner = env.runner().with_owner(holder.clone());
    let req = sh(
        "head -c 1572864 /dev/zero > big && echo small > small.txt",
        Some(WorkspaceMode::Overlay),
    );
    let last = rt.block_on(runner.run(&req)).unwrap();
    assert!(last.changes_error.is_none(), "{:?}", last.changes_error);
    assert_eq!(last.changes_evicted.len(), 1, "{:?}", last.changes_evicted);
    outcomes.push((holder, last));
    let grew = du(env.state.path()).saturating_sub(before);

    let usage = env.store().usage();
    let kept = outcomes
        .iter()
        .filter(|(_, o)| o.changes_error.is_none())
        .count();
    let refused: Vec<&str> = outcomes
        .iter()
        .filter_map(|(_, o)| o.changes_error.as_deref())
        .collect();
    let evicted: Vec<&str> = outcomes
        .iter()
        .flat_map(|(_, o)| o.changes_evicted.iter().map(|e| e.run_id.as_str()))
        .collect();
    println!(
        "{kept} kept, {} refused, {} evicted; {} sets held, {} bytes, {} entries; the state directory grew by {grew} bytes (total cap {})",
        refused.len(),
        evicted.len(),
        usage.sets,
        usage.total.bytes,
        usage.total.entries,
        caps.total_bytes
    );
    for (owner, o) in &outcomes {
        assert_eq!(o.exit_code, Some(0), "{owner}: {}", o.stderr.text);
        assert_eq!(o.limit_hit, None, "{owner}: {o:?}");
    }
    assert!(usage.total.bytes <= caps.total_bytes, "{usage:?}");
    assert!(usage.total.entries <= caps.total_entries, "{usage:?}");
    for (owner, u) in &usage.by_owner {
        assert!(u.bytes <= caps.per_owner_bytes, "{owner}: {u:?}");
    }
    assert!(
        grew <= caps.total_bytes,
        "the state directory grew by {grew} bytes"
    );
    // At most three sets fit; one per owner.
    assert!(
        usage.sets <= 3 && usage.sets == usage.by_owner.len(),
        "{usage:?}"
    );
    // Every set kept is held still, or was evicted by a later run of its owner.
    assert_eq!(kept, usage.sets + evicted.len());
    assert!(!refused.is_empty());
    for msg in &refused {
        assert!(
            msg.contains("was not kept")
                && (msg.contains("workspace.keep_changes_total_bytes")
                    || msg.contains("workspace.keep_changes_per_owner_bytes")),
            "{msg}"
        );
    }
    // Each eviction is its owner's own, and is in the audit log.
    for (owner, o) in &outcomes {
        for e in &o.changes_evicted {
            let (other, _) = outcomes.iter().find(|(_, x)| x.run_id == e.run_id).unwrap();
            assert_eq!(other, owner, "{} evicted another owner's set", o.run_id);
        }
    }
    let mut logged: Vec<String> = Vec::new();
    for line in std::fs::read_to_string(&log).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let body = &v["record"]["envelope"]["attestation"]["body"];
        if body["kind"] == "event" && body["event"] == "changes.evicted" {
            for e in body["evicted"].as_array().unwrap() {
                logged.push(e["run_id"].as_str().unwrap().to_owned());
            }
        }
    }
    let mut evicted: Vec<String> = evicted.into_iter().map(str::to_owned).collect();
    evicted.sort();
    logged.sort();
    assert_eq!(logged, evicted);
    tierbox_attest::verify_log(&log).unwrap();
}
