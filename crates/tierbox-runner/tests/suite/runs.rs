//! Supervisor behaviour through the library API: deadline, quotas, stdin, redaction,
//! exit statuses and tier selection. Each test skips with a printed reason when the host
//! cannot run Tier B — and fails instead under `CI=true`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use tierbox_policy::{
    Policy, ProcessRunRequest, QuotaMode, TierRequest, ValidateContext, validate,
};
use tierbox_runner::{LimitHit, RunError, RunOptions, Runner, Sandbox, run_plan};

/// Whether Tier B can run here; prints why not, and panics under CI.
pub(super) fn tier_b_available(test: &str) -> bool {
    let facts = tierbox_sandbox::probe::host_facts();
    let reason = if facts.landlock_abi.is_none() {
        Some("landlock unavailable")
    } else if !facts.seccomp {
        Some("seccomp unavailable")
    } else {
        None
    };
    match reason {
        None => true,
        Some(r) => !tierbox_test_support::skip(test, r),
    }
}

struct Env {
    ws: tempfile::TempDir,
    state: tempfile::TempDir,
    policy: Policy,
}

impl Env {
    fn new(allowed: &[&str]) -> Self {
        let mut policy = Policy::builtin_default();
        policy.exec.allowed_executables = allowed.iter().map(|s| (*s).to_owned()).collect();
        Self {
            ws: tempfile::tempdir().unwrap(),
            state: tempfile::tempdir().unwrap(),
            policy,
        }
    }

    fn runner(&self) -> Runner {
        Runner::new(self.policy.clone())
            .with_workspace(self.ws.path())
            .with_options(RunOptions {
                state_dir: self.state.path().to_path_buf(),
            })
    }
}

fn req(command: &str, args: &[&str]) -> ProcessRunRequest {
    let mut r = ProcessRunRequest::new(command);
    r.args = args.iter().map(|s| (*s).to_owned()).collect();
    r
}

pub(super) fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn arguments_reach_the_program_byte_for_byte() {
    if !tier_b_available("arguments_reach_the_program_byte_for_byte") {
        return;
    }
    let env = Env::new(&["printf"]);
    let mut r = req(
        "printf",
        &["%s|", "hello", "a b", "-n1", "status", "$HOME", "*"],
    );
    r.tier = TierRequest::B;
    let out = rt().block_on(env.runner().run(&r)).unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(out.stdout.text, "hello|a b|-n1|status|$HOME|*|");
    assert_eq!(out.tier, tierbox_policy::Tier::B);
    assert_eq!(out.backend, "tier_b_linux");
}

/// Output that is not UTF-8 is rendered with U+FFFD and flagged `lossy_utf8`, while its
/// digest is of the bytes the program wrote. Control: valid UTF-8 is not flagged.
#[test]
fn invalid_utf8_output_is_flagged_lossy_and_digested_raw() {
    if !tier_b_available("invalid_utf8_output_is_flagged_lossy_and_digested_raw") {
        return;
    }
    let env = Env::new(&["printf"]);
    let mut r = req("printf", &["a\\377b"]);
    r.tier = TierRequest::B;
    let out = rt().block_on(env.runner().run(&r)).unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(out.stdout.text, "a\u{FFFD}b");
    assert!(out.stdout.lossy_utf8, "{out:?}");
    assert_eq!(out.stdout.total_bytes, 3);
    assert_eq!(out.stdout.sha256, tierbox_attest::sha256_hex(b"a\xffb"));

    let mut r = req("printf", &["a\u{e9}b"]);
    r.tier = TierRequest::B;
    let out = rt().block_on(env.runner().run(&r)).unwrap();
    assert_eq!(out.stdout.text, "a\u{e9}b");
    assert!(!out.stdout.lossy_utf8, "{out:?}");
}

#[test]
fn timeout_kills_the_tree_and_returns_partial_output() {
    if !tier_b_available("timeout_kills_the_tree_and_returns_partial_output") {
        return;
    }
    let mut env = Env::new(&["sh"]);
    env.policy.exec.allow_interpreters = true;
    env.policy.exec.allow_eval = true;
    let mut r = req(
        "sh",
        &["-c", "echo started; sleep 30 & sleep 30; echo never"],
    );
    r.timeout_ms = Some(500);
    let out = rt().block_on(env.runner().run(&r)).unwrap();
    assert!(out.timed_out, "{out:?}");
    assert_eq!(out.limit_hit, Some(LimitHit::WallTime));
    assert_eq!(out.exit_status(), 124);
    assert_eq!(out.stdout.text, "started\n");
    // Functional bound, not a performance assertion: the 30 s sleeps were killed.
    assert!(out.duration_ms < 10_000, "took {} ms", out.duration_ms);
}

#[test]
fn kill_mode_quota_terminates_and_keeps_the_prefix() {
    if !tier_b_available("kill_mode_quota_terminates_and_keeps_the_prefix") {
        return;
    }
    let mut env = Env::new(&["yes"]);
    env.policy.output.max_bytes = 1000;
    env.policy.output.mode = QuotaMode::Kill;
    let out = rt()
        .block_on(env.runner().run(&req("yes", &["abc"])))
        .unwrap();
    assert!(out.quota_exceeded, "{out:?}");
    assert_eq!(out.limit_hit, Some(LimitHit::Output));
    assert!(out.stdout.text.starts_with("abc\nabc\n"));
    assert!(out.stdout.truncated && out.stdout.total_bytes > 1000);
    assert!(!out.timed_out);
}

#[test]
fn truncate_mode_keeps_head_and_tail_and_counts() {
    if !tier_b_available("truncate_mode_keeps_head_and_tail_and_counts") {
        return;
    }
    let mut env = Env::new(&["seq"]);
    env.policy.output.max_bytes = 100;
    let out = rt()
        .block_on(env.runner().run(&req("seq", &["1", "100000"])))
        .unwrap();
    assert_eq!(out.exit_code, Some(0));
    // The quota constrained the run without ending it: the limit is named, the run was not
    // stopped (regression: nothing but the per-stream flag said so).
    assert_eq!(out.limit_hit, Some(LimitHit::Output));
    assert!(!out.quota_exceeded);
    let s = &out.stdout;
    assert!(s.truncated);
    assert_eq!(s.total_bytes, 588_895, "seq 1 100000 writes 588895 bytes");
    assert_eq!(s.omitted_bytes, s.total_bytes - 100);
    assert!(s.text.starts_with("1\n2\n3\n"), "{}", s.text);
    assert!(s.text.ends_with("99999\n100000\n"), "{}", s.text);
    assert!(
        s.text
            .contains(&format!("[tierbox: {} bytes omitted]", s.omitted_bytes))
    );
}

#[test]
fn stdin_data_is_delivered_then_closed() {
    if !tier_b_available("stdin_data_is_delivered_then_closed") {
        return;
    }
    let env = Env::new(&["wc"]);
    let mut r = req("wc", &["-c"]);
    r.stdin = Some("twelve bytes".to_owned());
    let out = rt().block_on(env.runner().run(&r)).unwrap();
    assert_eq!(out.stdout.text.trim(), "12");
}

#[test]
fn exit_codes_and_signals_are_mirrored() {
    if !tier_b_available("exit_codes_and_signals_are_mirrored") {
        return;
    }
    let mut env = Env::new(&["false", "sh"]);
    let out = rt().block_on(env.runner().run(&req("false", &[]))).unwrap();
    assert_eq!((out.exit_code, out.exit_status()), (Some(1), 1));
    env.policy.exec.allow_interpreters = true;
    env.policy.exec.allow_eval = true;
    let out = rt()
        .block_on(env.runner().run(&req("sh", &["-c", "kill -SEGV $$"])))
        .unwrap();
    assert_eq!(out.signal, Some(libc_sigsegv()));
    assert_eq!(out.signal_name.as_deref(), Some("SIGSEGV"));
    assert_eq!(out.exit_status(), 128 + libc_sigsegv());
}

fn libc_sigsegv() -> i32 {
    11
}

#[test]
fn sensitive_values_and_tokens_are_redacted() {
    if !tier_b_available("sensitive_values_and_tokens_are_redacted") {
        return;
    }
    let mut env = Env::new(&["printf"]);
    env.policy.env.sensitive = vec!["DEPLOY_KEY".to_owned()];
    let plan = validate(
        &env.policy,
        &req(
            "printf",
            &[
                "key=%s token ghp_%s\n",
                "hunter2-value-123",
                "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            ],
        ),
        &ValidateContext::new(env.ws.path()).with_env(BTreeMap::from([(
            "DEPLOY_KEY".to_owned(),
            "hunter2-value-123".to_owned(),
        )])),
    )
    .unwrap();
    let out = rt()
        .block_on(run_plan(
            &plan,
            &RunOptions {
                state_dir: env.state.path().to_path_buf(),
            },
        ))
        .unwrap();
    assert!(out.redacted && out.stdout.redacted, "{out:?}");
    assert!(
        !out.stdout.text.contains("hunter2-value-123"),
        "{}",
        out.stdout.text
    );
    assert!(
        !out.stdout
            .text
            .contains("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
        "{}",
        out.stdout.text
    );
}

/// A launch that fails inside the sandbox comes back typed: which step of the child
/// failed, with its errno (here the program vanished between validation and exec), and
/// its message says which policy keys would fix an exec failure.
#[test]
fn a_failed_launch_names_the_step_in_the_child() {
    if !tier_b_available("a_failed_launch_names_the_step_in_the_child") {
        return;
    }
    let env = Env::new(&["true"]);
    let mut r = req("true", &[]);
    r.tier = TierRequest::B;
    let mut plan = env.runner().check(&r).unwrap();
    plan.program = env.ws.path().join("gone");
    let opts = RunOptions {
        state_dir: env.state.path().to_path_buf(),
    };
    let result = rt().block_on(run_plan(&plan, &opts));
    match &result {
        Err(RunError::Sandbox(tierbox_sandbox::launch::LaunchError::Child { step, errno })) => {
            assert_eq!(*step, tierbox_sandbox::contract::Step::Execve, "{step:?}");
            assert_eq!(*errno, libc::ENOENT);
        }
        other => panic!("expected a typed launch failure, got {other:?}"),
    }
    // The message names the policy keys that make a program exec'able in the sandbox.
    let message = result.unwrap_err().to_string();
    assert!(
        message.contains("at execve") && message.contains("filesystem.read_only"),
        "{message}"
    );
}

#[test]
fn unavailable_tier_is_rejected_not_downgraded() {
    let env = Env::new(&["true"]);
    let mut r = req("true", &[]);
    r.tier = TierRequest::A;
    match rt().block_on(env.runner().run(&r)) {
        // Tier A runs WASM only: a native program with no WASI build is refused, never
        // run in a weaker tier.
        Err(RunError::Rejected(rej)) => {
            assert_eq!(rej.code(), "wasm.not_mapped");
            assert!(rej.to_string().contains("tier a runs only"), "{rej}");
        }
        other => panic!("a native program must not run in tier a, got {other:?}"),
    }
}

#[test]
fn strict_allowlist_egress_runs_in_tier_b_behind_the_proxy() {
    let test = "strict_allowlist_egress_runs_in_tier_b_behind_the_proxy";
    if !tier_b_available(test) {
        return;
    }
    if tierbox_sandbox::probe::host_facts()
        .landlock_abi
        .unwrap_or(0)
        < 4
    {
        tierbox_test_support::skip(test, "landlock abi < 4");
        return;
    }
    let mut env = Env::new(&["true"]);
    env.policy.egress.mode = tierbox_policy::EgressMode::Strict;
    env.policy.egress.allow = vec!["crates.io".to_owned()];
    let mut r = req("true", &[]);
    r.tier = TierRequest::B;
    let outcome = rt().block_on(env.runner().run(&r)).unwrap();
    assert!(outcome.success(), "{outcome:?}");
    // The proxy ran for the run and saw nothing.
    assert_eq!(outcome.egress, Some(tierbox_egress::EgressLog::default()));
    let network = &outcome.enforcement.network;
    assert!(network.contains("the egress proxy's"), "{network}");
}

#[test]
fn builder_defaults_and_execute() {
    if !tier_b_available("builder_defaults_and_execute") {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("f.txt"), "content\n").unwrap();
    let cmd = Sandbox::command("cat")
        .arg("f.txt")
        .working_dir(ws.path())
        .timeout(Duration::from_secs(5));
    let plan = cmd.plan().unwrap();
    assert_eq!(
        plan.limits.max_processes,
        tierbox_runner::builder::BUILDER_DEFAULT_MAX_PROCESSES
    );
    assert_eq!(
        plan.limits.open_files,
        tierbox_runner::builder::BUILDER_DEFAULT_MAX_OPEN_FILES
    );
    assert_eq!(
        plan.output.max_bytes,
        tierbox_runner::builder::BUILDER_DEFAULT_MAX_OUTPUT
    );
    assert_eq!(plan.limits.wall_timeout_ms, 5000);
    let out = rt().block_on(cmd.execute()).unwrap();
    assert_eq!(out.stdout.text, "content\n");
    // The builder allows only the named program.
    let err = Sandbox::command("cat")
        .arg("f.txt")
        .working_dir(ws.path())
        .allow_interpreters(false)
        .plan();
    assert!(err.is_ok());
    // A path no grant shows is refused, naming the grant that would show it (the
    // workspace's parent is /tmp here, the run's own: use a directory elsewhere).
    // A target directory under /tmp (a checkout there) gives way to /var/tmp.
    let target_tmp = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let base = if std::fs::canonicalize(target_tmp).is_ok_and(|t| t.starts_with("/tmp")) {
        std::path::Path::new("/var/tmp")
    } else {
        target_tmp
    };
    let outside = tempfile::tempdir_in(base).unwrap();
    let outside = std::fs::canonicalize(outside.path()).unwrap();
    let err = Sandbox::command("cat")
        .arg(outside.display().to_string())
        .working_dir(ws.path())
        .plan()
        .unwrap_err();
    assert_eq!(err.code(), "scope.path_outside_workspace", "{err}");
    assert!(
        err.to_string()
            .contains(&format!("filesystem.read_only += {:?}", outside.display())),
        "{err}"
    );
    // What every run sees passes: a system path, the run's own /tmp.
    for arg in ["/etc/os-release", "/tmp/x", "/proc/cpuinfo"] {
        let plan = Sandbox::command("cat")
            .arg(arg)
            .working_dir(ws.path())
            .plan();
        assert!(plan.is_ok(), "{arg}: {:?}", plan.err());
    }
}

#[test]
fn workspace_writes_are_visible_on_the_host_and_nothing_is_left_behind() {
    if !tier_b_available("workspace_writes_are_visible_on_the_host_and_nothing_is_left_behind") {
        return;
    }
    let env = Env::new(&["touch"]);
    let out = rt()
        .block_on(env.runner().run(&req("touch", &["made-in-sandbox"])))
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert!(env.ws.path().join("made-in-sandbox").exists());
    // The run's private tmp is removed (pooling is off by default).
    let tmp = env.state.path().join("tmp");
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn spill_keeps_the_full_stream_in_a_private_file() {
    if !tier_b_available("spill_keeps_the_full_stream_in_a_private_file") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let mut env = Env::new(&["seq"]);
    env.policy.output.max_bytes = 64;
    env.policy.output.spill = true;
    let out = rt()
        .block_on(env.runner().run(&req("seq", &["1", "20000"])))
        .unwrap();
    let path = out.stdout.spill_path.clone().expect("spill path");
    let full = std::fs::read_to_string(&path).unwrap();
    assert_eq!(full.len() as u64, out.stdout.total_bytes);
    assert!(full.starts_with("1\n2\n") && full.ends_with("19999\n20000\n"));
    assert!(out.stdout.truncated);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(path.parent().unwrap()), 0o700);
}

/// Whether Tier C (with `backend`) can run here; prints why not, and panics under CI.
pub(super) fn tier_c_available(test: &str, backend: tierbox_policy::TierCBackend) -> bool {
    let facts = tierbox_sandbox::probe::host_facts();
    let mut reason = tierbox_sandbox::select::tier_available(tierbox_policy::Tier::C, facts)
        .err()
        .map(|e| e.to_string());
    if backend == tierbox_policy::TierCBackend::Bwrap
        && !std::path::Path::new("/usr/bin/bwrap").exists()
    {
        reason = Some("bubblewrap is not installed".to_owned());
    }
    match reason {
        None => true,
        Some(r) => !tierbox_test_support::skip(test, &r),
    }
}

/// With Tier C available, a request that leaves the tier open runs in C (the strongest);
/// with `tier.preferred = "b"` the same request runs in B, and one that names C still
/// runs in C.
#[test]
fn the_policy_preference_decides_an_open_request_s_tier() {
    let test = "the_policy_preference_decides_an_open_request_s_tier";
    if !tier_b_available(test) || !tier_c_available(test, tierbox_policy::TierCBackend::Native) {
        return;
    }
    let mut env = Env::new(&["printf"]);
    let open = req("printf", &["ok"]);
    let rt = rt();
    assert_eq!(
        rt.block_on(env.runner().run(&open)).unwrap().tier,
        tierbox_policy::Tier::C
    );
    env.policy.tier.preferred = TierRequest::B;
    let out = rt.block_on(env.runner().run(&open)).unwrap();
    assert_eq!(
        (out.tier, out.stdout.text.as_str()),
        (tierbox_policy::Tier::B, "ok")
    );
    let mut named = open.clone();
    named.tier = TierRequest::C;
    assert_eq!(
        rt.block_on(env.runner().run(&named)).unwrap().tier,
        tierbox_policy::Tier::C
    );
}

/// Many Tier C runs at once in one fresh workspace: each covers the missing `.git` with
/// a placeholder. None may fail because another created it first, none may remove it
/// while another still covers it, and the last one out removes it.
#[test]
fn concurrent_tier_c_runs_share_the_protected_path_placeholders() {
    for backend in [
        tierbox_policy::TierCBackend::Native,
        tierbox_policy::TierCBackend::Bwrap,
    ] {
        let test = format!("concurrent_tier_c_placeholders_{backend:?}");
        if !tier_c_available(&test, backend) {
            continue;
        }
        let mut env = Env::new(&["ls", "sleep"]);
        env.policy.tier.backend = backend;
        // bwrap applies no landlock layer of its own.
        env.policy
            .tier
            .optional_layers
            .push(tierbox_policy::Layer::Landlock);
        let runner = env.runner();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let outcomes = rt.block_on(async {
            let mut tasks = Vec::new();
            for i in 0..12 {
                let runner = runner.clone();
                // Staggered lengths, so runs end while others are still starting.
                let r = if i % 2 == 0 {
                    req("sleep", &[if i % 4 == 0 { "0.05" } else { "0.2" }])
                } else {
                    req("ls", &["-a", ".git"])
                };
                let mut r = r;
                r.tier = tierbox_policy::TierRequest::C;
                tasks.push(tokio::spawn(async move { runner.run(&r).await }));
            }
            let mut out = Vec::new();
            for t in tasks {
                out.push(t.await.unwrap());
            }
            out
        });
        for o in outcomes {
            let o = o.unwrap_or_else(|e| panic!("{test}: a run failed: {e}"));
            assert_eq!(o.exit_code, Some(0), "{test}: {}", o.stderr.text);
        }
        assert!(
            !env.ws.path().join(".git").exists(),
            "{test}: the placeholder is removed after the last run"
        );
    }
}

/// A Tier C sandbox whose pid 1 dies without reporting the program's exit (here: killed
/// by someone other than Tierbox) is a sandbox failure: `sandbox_failure` says what
/// happened, the program's status is unknown (`exit_code` and `signal` are null, never
/// pid 1's signal passed off as the program's), the exit status is the sandbox-failure
/// one, and what the program printed until then is kept.
#[test]
fn a_tier_c_pid_1_that_dies_unreported_is_a_sandbox_failure_not_the_program_s_signal() {
    let test = "a_tier_c_pid_1_that_dies_unreported_is_a_sandbox_failure";
    if !tier_c_available(test, tierbox_policy::TierCBackend::Native) {
        return;
    }
    let mut env = Env::new(&["sh"]);
    env.policy.exec.allow_interpreters = true;
    env.policy.exec.allow_eval = true;
    // A marker no other test's sandbox runs, to find this run's pid 1 among this
    // process's children.
    let marker = format!("tierbox-pid1-test-{}", std::process::id());
    // The program leaves a flag in the workspace once it has printed, so the kill
    // cannot come before the line the test expects to be kept.
    let mut r = req(
        "sh",
        &["-c", "echo started; : > printed.flag; sleep 30", &marker],
    );
    r.tier = TierRequest::C;
    let flag = env.ws.path().join("printed.flag");
    let rt = rt();
    let outcome = rt.block_on(async {
        let runner = env.runner();
        let run = tokio::spawn(async move { runner.run(&r).await });
        let pid1 = find_pid1_running(&marker).await;
        for _ in 0..1000 {
            if flag.exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(flag.exists(), "the program never printed");
        // A plain kill(2), as an outsider would.
        let killed = std::process::Command::new("kill")
            .args(["-KILL", &pid1.to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        run.await.unwrap()
    });
    let o = outcome.unwrap();
    let failure = o.sandbox_failure.as_deref().unwrap_or_else(|| {
        panic!(
            "no sandbox_failure: exit {:?} signal {:?}",
            o.exit_code, o.signal
        )
    });
    assert!(
        failure.contains("sandbox pid 1 was killed (SIGKILL) by something other than Tierbox"),
        "{failure}"
    );
    assert_eq!((o.exit_code, o.signal), (None, None));
    assert_eq!(o.exit_status(), tierbox_runner::SANDBOX_FAILURE_EXIT_STATUS);
    assert!(!o.success());
    assert_eq!(o.stdout.text, "started\n");
    let attested = o.attestation.as_ref().map(|a| a.attestation.clone());
    if let Some(tierbox_attest::Body::Run(facts)) = attested.map(|a| a.body) {
        assert_eq!(facts.outcome.sandbox_failure.as_deref(), Some(failure));
    }
}

/// The host pid of the sandbox pid 1 (a child of this process named `tierbox-init`) whose
/// own child's command line contains `marker`; waits up to 10 s for it.
async fn find_pid1_running(marker: &str) -> i32 {
    let me = std::process::id();
    for _ in 0..1000 {
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let Some(after) = stat.rsplit_once(')').map(|(_, a)| a) else {
                continue;
            };
            let ppid: u32 = after
                .split_whitespace()
                .nth(1)
                .and_then(|p| p.parse().ok())
                .unwrap_or(0);
            if ppid != me || !stat.contains("(tierbox-init)") {
                continue;
            }
            let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                .unwrap_or_default();
            for child in children.split_whitespace() {
                let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
                if String::from_utf8_lossy(&cmdline).contains(marker) {
                    return pid;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no sandbox pid 1 running {marker}");
}

/// A repository a run creates in the workspace cannot be protected in advance: the
/// outcome names it (`created_git_dirs`), on every tier that can write the workspace; a
/// repository that existed at launch is not named.
#[test]
fn repositories_a_run_creates_are_named_in_the_outcome() {
    let test = "repositories_a_run_creates_are_named_in_the_outcome";
    if !tier_b_available(test) {
        return;
    }
    let env = Env::new(&["mkdir"]);
    let ws = std::fs::canonicalize(env.ws.path()).unwrap();
    std::fs::create_dir_all(ws.join("old/.git")).unwrap();
    let rt = rt();
    let mut tiers = vec![TierRequest::B];
    if tier_c_available(test, tierbox_policy::TierCBackend::Native) {
        tiers.push(TierRequest::C);
    }
    for (i, tier) in tiers.into_iter().enumerate() {
        let repo = format!("new{i}/sub");
        let mut r = req("mkdir", &["-p", &format!("{repo}/.git")]);
        r.tier = tier;
        let o = rt.block_on(env.runner().run(&r)).unwrap();
        assert_eq!(o.exit_code, Some(0), "{tier:?}: {}", o.stderr.text);
        assert_eq!(o.created_git_dirs, vec![ws.join(&repo)], "{tier:?}");
        // Known from now on: the next run does not name it again.
        let mut again = req("mkdir", &["-p", "unrelated"]);
        again.tier = tier;
        let o = rt.block_on(env.runner().run(&again)).unwrap();
        assert_eq!(
            o.created_git_dirs,
            Vec::<std::path::PathBuf>::new(),
            "{tier:?}"
        );
    }
}

/// A request narrowed to a subdirectory of the runner's workspace (`"workspace": "a"`)
/// runs with that subdirectory as its whole workspace: it writes there, and its sibling
/// `b/` (another sandbox's workspace on the same server) is out of its reach — refused
/// in Tier B, absent in Tier C. The policy's `protected` paths are resolved in it too.
#[test]
fn a_run_narrowed_to_a_subdirectory_reaches_nothing_beside_it() {
    let test = "a_run_narrowed_to_a_subdirectory_reaches_nothing_beside_it";
    if !tier_b_available(test) {
        return;
    }
    let mut env = Env::new(&["sh"]);
    env.policy.exec.allow_interpreters = true;
    env.policy.exec.allow_eval = true;
    for dir in ["a", "b"] {
        std::fs::create_dir(env.ws.path().join(dir)).unwrap();
    }
    std::fs::write(env.ws.path().join("b/secret"), "b's\n").unwrap();
    let rt = rt();
    let mut tiers = vec![TierRequest::B];
    if tier_c_available(test, tierbox_policy::TierCBackend::Native) {
        tiers.push(TierRequest::C);
    }
    for tier in tiers {
        let mut r = req(
            "sh",
            &[
                "-c",
                "pwd; echo mine > own; cat ../b/secret; echo sibling > ../b/planted; echo end",
            ],
        );
        r.tier = tier;
        r.workspace = Some("a".to_owned());
        let out = rt.block_on(env.runner().run(&r)).unwrap();
        let a = env.ws.path().canonicalize().unwrap().join("a");
        assert!(
            out.stdout.text.starts_with(&format!("{}\n", a.display())),
            "{tier:?}: {out:?}"
        );
        assert!(out.stdout.text.ends_with("end\n"), "{tier:?}: {out:?}");
        assert!(!out.stdout.text.contains("b's"), "{tier:?}: {out:?}");
        assert_eq!(std::fs::read_to_string(a.join("own")).unwrap(), "mine\n");
        assert!(!env.ws.path().join("b/planted").exists(), "{tier:?}");
        std::fs::remove_file(a.join("own")).unwrap();
    }
    // Only a plain, existing subdirectory: never a way out of the runner's workspace.
    let mut r = req("sh", &["-c", "true"]);
    r.workspace = Some("../".to_owned());
    match rt.block_on(env.runner().run(&r)) {
        Err(RunError::Rejected(rej)) => assert_eq!(rej.code(), "scope.workspace_subdir_invalid"),
        other => panic!("{other:?}"),
    }
}
