//! Background processes through the library API: handles, output by offset, stdin, kill,
//! lifetimes, owners and caps. Real Tier B/C runs; skipped with a printed reason when the
//! host cannot run them, failed under `CI=true`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use tierbox_policy::{Lifetime, Policy, ProcessRunRequest};
use tierbox_runner::background::{BackgroundError, BackgroundState, Stream};
use tierbox_runner::ring::RING_BYTES;
use tierbox_runner::{RunOptions, Runner};

use super::runs::tier_b_available;

pub(super) struct Env {
    _ws: tempfile::TempDir,
    _state: tempfile::TempDir,
    pub(super) runner: Runner,
    pub(super) rt: tokio::runtime::Runtime,
}

fn env(test: &str, allowed: &[&str], per_owner: u32) -> Option<Env> {
    env_with(test, allowed, |policy| {
        policy.background.max_per_owner = per_owner
    })
}

/// [`env`] with the policy adjusted by `edit` (after `allowed` is set).
fn env_with(test: &str, allowed: &[&str], edit: impl FnOnce(&mut Policy)) -> Option<Env> {
    if !tier_b_available(test) {
        return None;
    }
    let mut policy = Policy::builtin_default();
    policy.exec.allowed_executables = allowed.iter().map(|s| (*s).to_owned()).collect();
    edit(&mut policy);
    Some(env_of(policy))
}

/// A runner of `policy` in a workspace and state directory of its own, on a long-lived
/// runtime.
pub(super) fn env_of(policy: Policy) -> Env {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let runner = Runner::new(policy)
        .with_workspace(ws.path())
        .with_options(RunOptions {
            state_dir: state.path().to_path_buf(),
        });
    // A long-lived multi-thread runtime, as a server has: the watchers live on it.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    Env {
        _ws: ws,
        _state: state,
        runner,
        rt,
    }
}

/// Whether a process whose argv is exactly `argv` exists (read from /proc, i.e. from
/// outside the sandbox).
pub(super) fn alive_with_args(argv: &[&str]) -> bool {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|d| d.file_name().to_string_lossy().parse::<u32>().is_ok())
        .any(|d| {
            std::fs::read(d.path().join("cmdline")).is_ok_and(|c| c == want)
                && std::fs::read_to_string(d.path().join("stat")).is_ok_and(|st| {
                    !st.rsplit(')')
                        .next()
                        .unwrap_or("")
                        .trim_start()
                        .starts_with('Z')
                })
        })
}

/// The status of `owner`'s process `id` once it is no longer running (or after 20 s).
async fn until_ended(
    bgm: &tierbox_runner::background::BackgroundManager,
    owner: &str,
    id: &str,
) -> tierbox_runner::background::BackgroundStatus {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = bgm.status(owner, id).await.unwrap();
        if s.state != BackgroundState::Running || Instant::now() > deadline {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn bg(command: &str, args: &[&str]) -> ProcessRunRequest {
    let mut r = ProcessRunRequest::new(command);
    r.args = args.iter().map(|s| (*s).to_owned()).collect();
    r.background = true;
    r
}

#[test]
fn a_background_process_reads_stdin_writes_output_and_is_killed() {
    let Some(e) = env("background_stdin_output_kill", &["cat"], 4) else {
        return;
    };
    let bgm = e.runner.background().clone();
    e.rt.block_on(async {
        let h = e
            .runner
            .start_background("alice", &bg("cat", &[]))
            .await
            .unwrap();
        assert_eq!(h.status.state, BackgroundState::Running);
        assert_eq!(h.status.id.len(), 32, "a 128-bit hex handle, not a pid");
        let id = h.status.id.clone();
        bgm.write_stdin("alice", &id, b"hello\n", false)
            .await
            .unwrap();
        let mut chunk = bgm.output("alice", &id, Stream::Stdout, 0, 1024).unwrap();
        let start = Instant::now();
        while chunk.text.is_empty() && start.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(10)).await;
            chunk = bgm.output("alice", &id, Stream::Stdout, 0, 1024).unwrap();
        }
        assert_eq!(chunk.text, "hello\n");
        assert_eq!(chunk.next_offset, 6);
        bgm.write_stdin("alice", &id, b"again\n", false)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let next = bgm.output("alice", &id, Stream::Stdout, 6, 1024).unwrap();
        assert_eq!((next.offset, next.text.as_str()), (6, "again\n"));

        let end = bgm.kill("alice", &id).await.unwrap();
        assert_eq!(end.state, BackgroundState::Killed);
        assert_eq!(end.signal, Some(libc::SIGKILL), "{end:?}");
        let status = bgm.status("alice", &id).await.unwrap();
        assert_eq!(status.state, BackgroundState::Killed);
        assert!(matches!(
            bgm.write_stdin("alice", &id, b"x", false).await,
            Err(BackgroundError::Stdin { .. })
        ));
    });
}

#[test]
fn another_owner_can_neither_see_nor_kill_a_handle() {
    let Some(e) = env("background_owners", &["sleep"], 4) else {
        return;
    };
    let bgm = e.runner.background().clone();
    e.rt.block_on(async {
        let h = e
            .runner
            .start_background("alice", &bg("sleep", &["30"]))
            .await
            .unwrap();
        let id = h.status.id;
        for result in [
            bgm.status("mallory", &id).await.map(drop),
            bgm.kill("mallory", &id).await.map(drop),
            bgm.output("mallory", &id, Stream::Stdout, 0, 10).map(drop),
            bgm.write_stdin("mallory", &id, b"x", false).await.map(drop),
        ] {
            let err = result.unwrap_err();
            assert_eq!(err.code(), "background.not_found", "{err}");
        }
        assert!(bgm.list("mallory").await.is_empty());
        assert_eq!(bgm.list("alice").await.len(), 1);
        assert_eq!(
            bgm.status("alice", &id).await.unwrap().state,
            BackgroundState::Running
        );
        bgm.shutdown().await;
        assert_eq!(
            bgm.status("alice", &id).await.unwrap().state,
            BackgroundState::Killed
        );
    });
}

#[test]
fn a_process_that_exits_during_startup_is_a_failed_start_with_its_output() {
    let Some(e) = env("background_exits_during_startup", &["ls"], 4) else {
        return;
    };
    e.rt.block_on(async {
        let err = e
            .runner
            .start_background("alice", &bg("ls", &["missing-file"]))
            .await
            .unwrap_err();
        let BackgroundError::ExitedDuringStartup(h) = err else {
            panic!("{err}");
        };
        assert_eq!(h.status.state, BackgroundState::Exited);
        assert_eq!(h.status.exit_code, Some(2), "{h:?}");
        assert!(h.startup_stderr.contains("missing-file"), "{h:?}");
        assert!(e.runner.background().list("alice").await.is_empty());
    });
}

#[test]
fn a_finished_process_is_never_reported_running() {
    let Some(e) = env("background_zombie", &["sleep"], 4) else {
        return;
    };
    let bgm = e.runner.background().clone();
    e.rt.block_on(async {
        let h = e
            .runner
            .start_background("alice", &bg("sleep", &["0.4"]))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(600)).await;
        let s = bgm.status("alice", &h.status.id).await.unwrap();
        assert_eq!(
            (s.state, s.exit_code),
            (BackgroundState::Exited, Some(0)),
            "{s:?}"
        );
    });
}

#[test]
fn lifetimes_end_processes_and_owners_end_run_owned_ones() {
    let Some(e) = env("background_lifetimes", &["sleep"], 4) else {
        return;
    };
    let bgm = e.runner.background().clone();
    e.rt.block_on(async {
        let mut short = bg("sleep", &["30"]);
        short.timeout_ms = Some(300);
        let expiring = e.runner.start_background("alice", &short).await.unwrap();
        let mut detached = bg("sleep", &["30"]);
        detached.lifetime = Some(Lifetime::Detached);
        let detached = e.runner.start_background("alice", &detached).await.unwrap();
        // A distinctive argument, to find the process from outside.
        let owned = e
            .runner
            .start_background("alice", &bg("sleep", &["3071.5"]))
            .await
            .unwrap();
        assert!(alive_with_args(&["sleep", "3071.5"]));
        assert_eq!(owned.status.lifetime, Lifetime::RunOwned);
        assert_eq!(
            owned.status.lifetime_ms,
            10 * 60 * 1000,
            "the policy default"
        );

        tokio::time::sleep(Duration::from_millis(1500)).await;
        let s = bgm.status("alice", &expiring.status.id).await.unwrap();
        assert_eq!(s.state, BackgroundState::Expired, "{s:?}");

        bgm.end_owner("alice").await;
        assert!(
            !alive_with_args(&["sleep", "3071.5"]),
            "the run_owned process died with its owner"
        );
        // Its record went with the owner; the detached one is the only one left.
        assert!(matches!(
            bgm.status("alice", &owned.status.id).await,
            Err(BackgroundError::NotFound { .. })
        ));
        let left: Vec<String> = bgm.list("alice").await.into_iter().map(|s| s.id).collect();
        assert_eq!(left, std::slice::from_ref(&detached.status.id));
        let s = bgm.status("alice", &detached.status.id).await.unwrap();
        assert_eq!(
            s.state,
            BackgroundState::Running,
            "detached outlives its owner"
        );
        bgm.shutdown().await;
    });
}

#[test]
fn live_processes_are_capped_per_owner() {
    let Some(e) = env("background_caps", &["sleep"], 2) else {
        return;
    };
    let bgm = e.runner.background().clone();
    e.rt.block_on(async {
        for _ in 0..2 {
            e.runner
                .start_background("alice", &bg("sleep", &["30"]))
                .await
                .unwrap();
        }
        let err = e
            .runner
            .start_background("alice", &bg("sleep", &["30"]))
            .await
            .unwrap_err();
        assert_eq!(err.code(), "background.limit", "{err}");
        // Another owner has its own allowance.
        e.runner
            .start_background("bob", &bg("sleep", &["30"]))
            .await
            .unwrap();
        bgm.shutdown().await;
        // Ended processes free their places.
        e.runner
            .start_background("alice", &bg("sleep", &["30"]))
            .await
            .unwrap();
        bgm.shutdown().await;
    });
}

#[test]
fn live_processes_are_capped_in_total() {
    let Some(e) = env_with("background_total_cap", &["sleep"], |policy| {
        policy.background.max_per_owner = 4;
        policy.background.max_total = 3;
    }) else {
        return;
    };
    let bgm = e.runner.background().clone();
    e.rt.block_on(async {
        for owner in ["alice", "alice", "bob"] {
            e.runner
                .start_background(owner, &bg("sleep", &["30"]))
                .await
                .unwrap();
        }
        // Within its own allowance (4), but the runner's (3) is spent.
        for owner in ["carol", "alice"] {
            let err = e
                .runner
                .start_background(owner, &bg("sleep", &["30"]))
                .await
                .unwrap_err();
            assert_eq!(err.code(), "background.limit", "{err}");
            assert!(err.to_string().contains("the runner"), "{err}");
        }
        bgm.shutdown().await;
        // Ended processes free their places.
        e.runner
            .start_background("carol", &bg("sleep", &["30"]))
            .await
            .unwrap();
        bgm.shutdown().await;
    });
}

#[test]
fn a_chatty_process_never_blocks_and_old_output_is_dropped() {
    let Some(e) = env("background_chatty", &["yes"], 4) else {
        return;
    };
    let bgm = e.runner.background().clone();
    e.rt.block_on(async {
        let h = e
            .runner
            .start_background("alice", &bg("yes", &[]))
            .await
            .unwrap();
        let id = h.status.id;
        let start = Instant::now();
        let mut s = bgm.status("alice", &id).await.unwrap();
        while s.stdout_bytes < 4 * RING_BYTES as u64 && start.elapsed() < Duration::from_secs(20) {
            tokio::time::sleep(Duration::from_millis(50)).await;
            s = bgm.status("alice", &id).await.unwrap();
        }
        assert!(s.stdout_bytes >= 4 * RING_BYTES as u64, "{s:?}");
        assert_eq!(
            s.state,
            BackgroundState::Running,
            "never blocked or killed by SIGPIPE"
        );
        let chunk = bgm.output("alice", &id, Stream::Stdout, 0, 16).unwrap();
        assert!(chunk.missed_bytes > 0 && chunk.offset > 0, "{chunk:?}");
        assert!(chunk.text.starts_with("y\n") || chunk.text.starts_with('\n'));
        bgm.kill("alice", &id).await.unwrap();
    });
}

#[test]
fn the_spill_file_keeps_the_head_that_left_the_ring() {
    if !tier_b_available("background_spill") {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut policy = Policy::builtin_default();
    policy.exec.allowed_executables = vec!["seq".to_owned()];
    policy.background.spill_bytes = 64 * 1024;
    let runner = Runner::new(policy)
        .with_workspace(ws.path())
        .with_options(RunOptions {
            state_dir: state.path().to_path_buf(),
        });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let bgm = runner.background().clone();
    rt.block_on(async {
        // About 3.9 MB of numbered lines, then it sleeps (seq never ends on its own
        // within the test: 1..10^9).
        let h = runner
            .start_background("alice", &bg("seq", &["1", "1000000000"]))
            .await
            .unwrap();
        let id = h.status.id;
        let start = Instant::now();
        let mut s = bgm.status("alice", &id).await.unwrap();
        while s.stdout_bytes < 3 * RING_BYTES as u64 && start.elapsed() < Duration::from_secs(20) {
            tokio::time::sleep(Duration::from_millis(20)).await;
            s = bgm.status("alice", &id).await.unwrap();
        }
        assert!(s.stdout_bytes >= 3 * RING_BYTES as u64, "{s:?}");
        // Offset 0 left the ring long ago; the spill file still has it.
        let head = bgm.output("alice", &id, Stream::Stdout, 0, 12).unwrap();
        assert_eq!((head.offset, head.missed_bytes), (0, 0), "{head:?}");
        assert_eq!(head.text, "1\n2\n3\n4\n5\n6\n");
        let spill = state.path().join(format!("spill/bg-{id}.stdout"));
        assert_eq!(std::fs::metadata(&spill).unwrap().len(), 64 * 1024);
        // Past the spilled head and before the ring: the gap is reported, not invented.
        let gap = bgm
            .output("alice", &id, Stream::Stdout, 64 * 1024, 16)
            .unwrap();
        assert!(gap.missed_bytes > 0 && gap.offset > 64 * 1024, "{gap:?}");
        bgm.kill("alice", &id).await.unwrap();
        // The owner's session ends: its ended records and their spill files go.
        bgm.end_owner("alice").await;
        assert!(bgm.list("alice").await.is_empty());
        assert!(!spill.exists(), "spill file removed with the record");
    });
}

/// A background process the kernel's OOM killer ends on the bwrap backend is reported as
/// killed by SIGKILL, as a foreground run is — not as exit code 137, which bwrap passes
/// on for a program killed by a signal. Foreground and background runs end through one
/// routine.
///
/// Regression: the background watcher had its own copy of the end of a run, without the
/// foreground's correction, and reported `exit_code: 137`.
#[test]
fn a_background_run_killed_for_memory_on_bwrap_reports_the_signal() {
    let test = "a_background_run_killed_for_memory_on_bwrap_reports_the_signal";
    if tierbox_sandbox::bwrap::probe_bwrap_cached().is_err() {
        tierbox_test_support::skip_here(&format!("skip: {test}: no usable bwrap"));
        return;
    }
    let Some(e) = env_with(test, &["python3"], |p| {
        p.exec.allow_interpreters = true;
        p.exec.allow_eval = true;
        p.limits.memory_bytes = 64 * 1024 * 1024;
        p.tier.backend = tierbox_policy::TierCBackend::Bwrap;
        p.tier.optional_layers.push(tierbox_policy::Layer::Landlock);
    }) else {
        return;
    };
    let bgm = e.runner.background().clone();
    e.rt.block_on(async {
        let mut req = bg(
            "python3",
            &["-c", "import time; time.sleep(0.3); b = bytearray(512 * 1024 * 1024); b[::4096] = b'x' * (len(b) // 4096)"],
        );
        req.tier = tierbox_policy::TierRequest::C;
        let h = match e.runner.start_background("alice", &req).await {
            Ok(h) => h,
            Err(err) => {
                tierbox_test_support::skip_here(&format!("skip: {test}: {err}"));
                return;
            }
        };
        let s = until_ended(&bgm, "alice", &h.status.id).await;
        assert_eq!(
            (s.state, s.exit_code, s.signal),
            (BackgroundState::Exited, None, Some(libc::SIGKILL)),
            "{s:?}"
        );
        // The status names the limit, and the change that would allow the run.
        assert_eq!(s.limit_hit, Some(tierbox_runner::LimitHit::Memory), "{s:?}");
        assert_eq!(s.denials.len(), 1, "{s:?}");
        assert!(s.denials[0].hint.starts_with("limits.memory_bytes above "), "{s:?}");
    });
}

/// A background process's output is redacted as a stream, not read by read: a token is
/// hidden even when a read ends inside it, and a private key's body even when a read
/// starts after the key's BEGIN line.
///
/// Regression: each read was redacted on its own, so reading in small pieces (or from an
/// offset inside a key block) returned the secret in the clear.
#[test]
fn background_output_read_in_pieces_shows_no_secret() {
    let Some(e) = env("background_redaction_in_pieces", &["cat"], 4) else {
        return;
    };
    let token = "ghp_0123456789abcdefghijABCDEFGHIJ012345";
    let body = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7";
    let bgm = e.runner.background().clone();
    e.rt.block_on(async {
        let h = e
            .runner
            .start_background("alice", &bg("cat", &[]))
            .await
            .unwrap();
        let id = h.status.id.clone();
        for line in [
            format!("token {token}\n"),
            "-----BEGIN PRIVATE KEY-----\n".to_owned(),
            format!("{body}\n"),
            "-----END PRIVATE KEY-----\n".to_owned(),
            "done\n".to_owned(),
        ] {
            bgm.write_stdin("alice", &id, line.as_bytes(), false)
                .await
                .unwrap();
            // Separate reads by the reader: each line its own chunk.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let start = Instant::now();
        let whole = loop {
            let c = bgm.output("alice", &id, Stream::Stdout, 0, 4096).unwrap();
            if c.text.ends_with("done\n") || start.elapsed() > Duration::from_secs(5) {
                break c.text;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert!(whole.ends_with("done\n"), "{whole:?}");
        // Read in 7-byte pieces, and from every offset.
        let mut pieces = String::new();
        let mut at = 0;
        loop {
            let c = bgm.output("alice", &id, Stream::Stdout, at, 7).unwrap();
            if c.text.is_empty() {
                break;
            }
            pieces.push_str(&c.text);
            at = c.next_offset;
        }
        for from in 0..whole.len() as u64 {
            let c = bgm
                .output("alice", &id, Stream::Stdout, from, 4096)
                .unwrap();
            assert!(
                !c.text.contains(body) && !c.text.contains(&token[4..]),
                "a read from {from} shows a secret: {:?}",
                c.text
            );
        }
        for shown in [&whole, &pieces] {
            assert!(!shown.contains(&token[..12]), "{shown:?}");
            assert!(!shown.contains(&body[..12]), "{shown:?}");
        }
        assert_eq!(pieces, whole);
        bgm.kill("alice", &id).await.unwrap();
    });
}

/// A background process in overlay mode: the workspace stays as it was while it runs and
/// after; its status carries the change set once it has ended, kept under its id.
#[test]
fn a_background_process_in_overlay_mode_leaves_its_changes_for_review() {
    let test = "a_background_process_in_overlay_mode_leaves_its_changes_for_review";
    let Some(e) = env_with(test, &["sh"], |p| {
        p.exec.allow_interpreters = true;
        p.exec.allow_eval = true;
        p.workspace.mode = tierbox_policy::WorkspaceMode::Overlay;
    }) else {
        return;
    };
    let ws = e.runner.workspace().to_path_buf();
    let bgm = e.runner.background().clone();
    e.rt.block_on(async {
        let mut req = bg("sh", &["-c", "sleep 0.5; echo from-bg > bg.txt"]);
        req.tier = tierbox_policy::TierRequest::C;
        let h = e.runner.start_background("alice", &req).await.unwrap();
        assert!(h.status.changes.is_none(), "no change set while it runs");
        let s = until_ended(&bgm, "alice", &h.status.id).await;
        assert_eq!(
            (s.state, s.exit_code),
            (BackgroundState::Exited, Some(0)),
            "{s:?}"
        );
        assert!(!ws.join("bg.txt").exists());
        let set = s.changes.expect("the change set once ended");
        assert_eq!(set.changes.len(), 1, "{set:?}");
        let store = tierbox_runner::review::ChangeStore::new(&e.runner.options().state_dir);
        store.apply(&h.status.id, None, false).unwrap();
        assert_eq!(
            std::fs::read_to_string(ws.join("bg.txt")).unwrap(),
            "from-bg\n"
        );
    });
}

/// A Tier B background process's seccomp hand-off is served for its life: its `chmod`
/// is performed (not left waiting), and the refusals its filter hands off are answered
/// and listed, with their arguments, in its ended status.
///
/// Regression: a background run's listener had no mediator, so a `chmod` waited until
/// the process's lifetime ended.
#[test]
fn a_background_process_has_its_chmod_performed_and_its_refusals_listed() {
    let test = "a_background_process_has_its_chmod_performed_and_its_refusals_listed";
    let Some(e) = env_with(test, &["sh"], |p| p.exec.allow_interpreters = true) else {
        return;
    };
    if !tierbox_runner::host::seccomp_arguments_recorded() {
        tierbox_test_support::skip(test, "no seccomp user notification on this kernel");
        return;
    }
    let ws = e._ws.path();
    std::fs::write(ws.join("f"), "x").unwrap();
    // Past the startup window, then a chmod and a refused unshare.
    std::fs::write(
        ws.join("run.sh"),
        "sleep 0.4\nchmod 600 f && echo chmodded\nunshare -U true 2>/dev/null || echo refused\n",
    )
    .unwrap();
    let bgm = e.runner.background().clone();
    e.rt.block_on(async {
        let mut req = bg("sh", &["run.sh"]);
        req.tier = tierbox_policy::TierRequest::B;
        let h = e.runner.start_background("alice", &req).await.unwrap();
        let s = until_ended(&bgm, "alice", &h.status.id).await;
        assert_eq!(
            (s.state, s.exit_code),
            (BackgroundState::Exited, Some(0)),
            "{s:?}"
        );
        let out = bgm
            .output("alice", &h.status.id, Stream::Stdout, 0, 4096)
            .unwrap();
        assert_eq!(out.text, "chmodded\nrefused\n");
        let unshare = s
            .denials
            .iter()
            .find(|d| d.operation == "unshare")
            .unwrap_or_else(|| panic!("{:?}", s.denials));
        assert_eq!(unshare.target, "CLONE_NEWUSER");
        // How each layer was read is in the ended status, and the attestation carries the
        // same denials and reports.
        let seccomp = &s.denial_reports[&tierbox_policy::enforcement::DenialLayer::Seccomp];
        assert!(
            seccomp.applied && seccomp.detail.contains("handed to the supervisor"),
            "{seccomp:?}"
        );
        assert!(
            s.denial_reports
                .contains_key(&tierbox_policy::enforcement::DenialLayer::Landlock),
            "{:?}",
            s.denial_reports
        );
        let signed = s.attestation.as_ref().expect("an attested end");
        let tierbox_attest::Body::Run(facts) = &signed.attestation.body else {
            panic!("{signed:?}");
        };
        let attested = facts.outcome.denials.as_ref().expect("attested denials");
        assert_eq!(
            attested,
            &serde_json::to_value(&s.denials).unwrap(),
            "{attested}"
        );
        assert_eq!(
            facts.enforcement["denial_reports"],
            serde_json::to_value(&s.denial_reports).unwrap()
        );
    });
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(ws.join("f"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

/// A background process whose chmod mediator cannot be set up (a writable grant that
/// vanished between validation and start) is refused and killed, as a foreground run
/// with the same plan fails: it never runs with an unserved hand-off, where chmod and the
/// handed-off refusals would fail with `ENOSYS`.
#[test]
fn a_background_start_without_its_mediator_is_refused_like_a_foreground_run() {
    let test = "a_background_start_without_its_mediator_is_refused_like_a_foreground_run";
    let grant = tempfile::tempdir().unwrap();
    let gone = grant.path().join("cache");
    std::fs::create_dir(&gone).unwrap();
    let writable = gone.display().to_string();
    let Some(e) = env_with(test, &["sleep"], |p| {
        p.filesystem.writable = vec![writable.clone()];
    }) else {
        return;
    };
    if !tierbox_runner::host::seccomp_arguments_recorded() {
        tierbox_test_support::skip(test, "no seccomp user notification on this kernel");
        return;
    }
    let mut req = bg("sleep", &["31"]);
    req.tier = tierbox_policy::TierRequest::B;
    let plan = e.runner.check(&req).unwrap();
    let mut fg_req = req.clone();
    fg_req.background = false;
    let fg = e
        .runner
        .check_request(tierbox_runner::builder::RunRequest::Process(&fg_req))
        .unwrap();
    std::fs::remove_dir(&gone).unwrap();
    let bgm = e.runner.background().clone();
    e.rt.block_on(async {
        let err = bgm.start("alice", &plan).await.unwrap_err().to_string();
        assert!(err.contains("chmod mediation"), "{err}");
        assert!(
            !alive_with_args(&["sleep", "31"]),
            "the process was left running"
        );
        let err = e
            .runner
            .execute_checked(fg, None)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("chmod mediation"), "{err}");
    });
}
