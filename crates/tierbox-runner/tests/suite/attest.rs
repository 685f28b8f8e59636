//! Attestations through the library API: every run, rejection, Tier A run and background
//! process is signed with the state directory's key and appended to the policy's audit
//! log, and the attested digests are those of what ran and what it printed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use tierbox_attest::{Body, SignedAttestation, VerifyOptions, sha256_hex, verify_envelope};
use tierbox_policy::wasm::WasmRunRequest;
use tierbox_policy::{Policy, ProcessRunRequest};
use tierbox_runner::background::BackgroundState;
use tierbox_runner::{RunError, RunOptions, Runner};

use super::runs::tier_b_available;

struct Env {
    ws: tempfile::TempDir,
    state: tempfile::TempDir,
    runner: Runner,
    rt: tokio::runtime::Runtime,
}

impl Env {
    fn log(&self) -> std::path::PathBuf {
        self.state.path().join("audit.jsonl")
    }

    fn key(&self) -> tierbox_attest::VerifyingKey {
        tierbox_attest::load_signing_key(&self.state.path().join("attest-key"))
            .unwrap()
            .verifying_key()
    }

    /// Every record of the log, verified with the state directory's key.
    fn records(&self) -> Vec<SignedAttestation> {
        let opts = VerifyOptions {
            trusted_key: Some(self.key()),
            ..VerifyOptions::default()
        };
        tierbox_attest::verify_log_with(&self.log(), &opts).unwrap();
        std::fs::read_to_string(self.log())
            .unwrap()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                serde_json::from_value(v["record"]["envelope"].clone()).unwrap()
            })
            .collect()
    }
}

fn env(test: &str, log: bool) -> Option<Env> {
    env_with(test, log, |_| {})
}

/// [`env`] with the policy adjusted by `edit` last.
fn env_with(test: &str, log: bool, edit: impl FnOnce(&mut Policy)) -> Option<Env> {
    if !tier_b_available(test) {
        return None;
    }
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut policy = Policy::builtin_default();
    policy.exec.allowed_executables = ["echo", "sh", "cat", "sleep"].map(str::to_owned).to_vec();
    policy.exec.allow_interpreters = true;
    policy.exec.allow_eval = true;
    if log {
        policy.audit.log = Some(state.path().join("audit.jsonl"));
    }
    edit(&mut policy);
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
    Some(Env {
        ws,
        state,
        runner,
        rt,
    })
}

fn request(command: &str, args: &[&str]) -> ProcessRunRequest {
    let mut r = ProcessRunRequest::new(command);
    r.args = args.iter().map(|s| (*s).to_owned()).collect();
    r
}

fn run_facts(a: &SignedAttestation) -> &tierbox_attest::RunFacts {
    match &a.attestation.body {
        Body::Run(run) => run,
        other => panic!("expected a run, got {other:?}"),
    }
}

/// `audit.signing_key` names the key runs are signed with: the attestation verifies with
/// it (and not with another key), and no key is created in the state directory.
#[test]
fn a_policy_supplied_signing_key_signs_the_runs() {
    use std::os::unix::fs::OpenOptionsExt;

    let keys = tempfile::tempdir().unwrap();
    let key_path = keys.path().join("attest.key");
    let seed = "1f".repeat(32);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&key_path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, seed.as_bytes()))
        .unwrap();
    let supplied = tierbox_attest::load_signing_key(&key_path)
        .unwrap()
        .verifying_key();
    let Some(e) = env_with("a_policy_supplied_signing_key_signs_the_runs", false, |p| {
        p.audit.signing_key = Some(key_path.clone());
    }) else {
        return;
    };
    let outcome =
        e.rt.block_on(e.runner.run(&request("echo", &["hi"])))
            .unwrap();
    let a = outcome
        .attestation
        .expect("the outcome carries its attestation");
    verify_envelope(&a, Some(&supplied)).unwrap();
    let other = tierbox_attest::keys::parse_signing_key(&"2e".repeat(32), "another key")
        .unwrap()
        .verifying_key();
    assert!(verify_envelope(&a, Some(&other)).is_err());
    assert!(
        !e.state.path().join("attest-key").exists(),
        "a key was created in the state directory although the policy supplies one"
    );
}

#[test]
fn a_run_is_signed_logged_and_digests_what_it_printed() {
    let Some(e) = env("a_run_is_signed_logged_and_digests_what_it_printed", true) else {
        return;
    };
    // A credential on stdout: the caller gets it redacted, the raw digest is of the bytes
    // the process really wrote.
    let secret = "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB";
    let req = request(
        "sh",
        &["-c", &format!("echo token={secret}; echo err >&2; exit 3")],
    );
    let outcome = e.rt.block_on(e.runner.run(&req)).unwrap();
    assert_eq!(outcome.exit_code, Some(3));
    assert!(outcome.stdout.redacted, "{}", outcome.stdout.text);
    let a = outcome
        .attestation
        .clone()
        .expect("the outcome carries its attestation");
    verify_envelope(&a, Some(&e.key())).unwrap();
    let run = run_facts(&a);
    assert_eq!(run.outcome.exit_code, Some(3));
    assert_eq!(run.plan_digest, outcome.plan_sha256);
    assert_eq!(run.tier, outcome.tier.to_string());
    assert_eq!(
        run.outcome.stdout_sha256,
        sha256_hex(format!("token={secret}\n").as_bytes())
    );
    assert_eq!(run.outcome.stderr_sha256, sha256_hex(b"err\n"));
    assert_eq!(
        run.outcome.redacted_stdout_sha256,
        sha256_hex(outcome.stdout.text.as_bytes())
    );
    assert_ne!(
        run.outcome.stdout_sha256,
        run.outcome.redacted_stdout_sha256
    );
    assert_eq!(
        run.enforcement["backend"].as_str(),
        Some(outcome.backend.name())
    );
    let json = serde_json::to_value(&req).unwrap();
    assert_eq!(
        a.attestation.request_digest,
        tierbox_attest::request_digest(&json).unwrap()
    );
    assert_eq!(
        a.attestation.policy_digest,
        tierbox_attest::policy_digest(e.runner.policy())
    );
    assert!(a.attestation.ended_unix_ms >= a.attestation.started_unix_ms);
    // The log holds exactly this envelope, chained and signed.
    assert_eq!(e.records(), vec![a]);
}

#[test]
fn a_rejection_is_logged_and_nothing_runs() {
    let Some(e) = env("a_rejection_is_logged_and_nothing_runs", true) else {
        return;
    };
    let err =
        e.rt.block_on(e.runner.run(&request("curl", &["https://example.org"])))
            .unwrap_err();
    let RunError::Rejected(rejection) = err else {
        panic!("expected a rejection, got {err}");
    };
    let records = e.records();
    assert_eq!(records.len(), 1);
    match &records[0].attestation.body {
        Body::Rejection { code, message } => {
            assert_eq!(code, rejection.code());
            assert!(message.contains("curl"), "{message}");
        }
        other => panic!("expected a rejection record, got {other:?}"),
    }
}

#[test]
fn without_a_log_runs_are_still_signed_and_rejections_leave_no_file() {
    let Some(e) = env(
        "without_a_log_runs_are_still_signed_and_rejections_leave_no_file",
        false,
    ) else {
        return;
    };
    let outcome =
        e.rt.block_on(e.runner.run(&request("echo", &["hi"])))
            .unwrap();
    verify_envelope(&outcome.attestation.unwrap(), Some(&e.key())).unwrap();
    assert!(e.rt.block_on(e.runner.run(&request("curl", &[]))).is_err());
    assert!(!e.log().exists());
    // The key was created private.
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(e.state.path().join("attest-key"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn an_unusable_audit_log_refuses_the_run_before_anything_runs() {
    let Some(e) = env(
        "an_unusable_audit_log_refuses_the_run_before_anything_runs",
        false,
    ) else {
        return;
    };
    let mut policy = e.runner.policy().clone();
    // The log's directory does not exist.
    policy.audit.log = Some(e.state.path().join("missing/dir/audit.jsonl"));
    let runner = Runner::new(policy)
        .with_workspace(e.ws.path())
        .with_options(e.runner.options().clone());
    let marker = e.ws.path().join("ran");
    let req = request("sh", &["-c", "echo > ran"]);
    // The same request runs under the same policy with a usable log (here: none).
    e.rt.block_on(e.runner.run(&req)).unwrap();
    assert!(marker.exists());
    std::fs::remove_file(&marker).unwrap();
    let err = e.rt.block_on(runner.run(&req)).unwrap_err();
    assert!(matches!(err, RunError::Audit(_)), "{err}");
    assert!(err.to_string().contains("missing/dir"), "{err}");
    assert!(
        !marker.exists(),
        "the command ran although it could not be audited"
    );
}

#[test]
fn tier_a_runs_are_attested() {
    let Some(e) = env("tier_a_runs_are_attested", true) else {
        return;
    };
    std::fs::write(
        e.ws.path().join("exit7.wat"),
        r#"(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (func (export "_start") (call $exit (i32.const 7))))"#,
    )
    .unwrap();
    let outcome =
        e.rt.block_on(e.runner.run_wasm(&WasmRunRequest::module("exit7.wat")))
            .unwrap();
    let a = outcome.attestation.unwrap();
    let run = run_facts(&a);
    assert_eq!(run.backend, "tier_a_wasmtime");
    assert_eq!(run.outcome.exit_code, Some(7));
    assert_eq!(run.plan_digest, outcome.plan_sha256);
    assert_eq!(e.records().len(), 1);
}

#[test]
fn a_background_process_is_attested_when_it_ends() {
    let Some(e) = env("a_background_process_is_attested_when_it_ends", true) else {
        return;
    };
    let mut req = request("sh", &["-c", "echo started; exec sleep 60"]);
    req.background = true;
    let handle =
        e.rt.block_on(e.runner.start_background("owner-1", &req))
            .unwrap();
    assert_eq!(handle.status.state, BackgroundState::Running);
    assert!(handle.status.attestation.is_none());
    let status =
        e.rt.block_on(e.runner.background().kill("owner-1", &handle.status.id))
            .unwrap();
    assert_eq!(status.state, BackgroundState::Killed);
    let a = status
        .attestation
        .expect("an ended process carries its attestation");
    verify_envelope(&a, Some(&e.key())).unwrap();
    let run = run_facts(&a);
    assert_eq!(run.outcome.stdout_sha256, sha256_hex(b"started\n"));
    assert_eq!(run.outcome.signal, status.signal);
    assert_eq!(e.records(), vec![a]);
}

#[test]
fn the_attested_key_is_the_one_in_the_state_dir() {
    let Some(e) = env("the_attested_key_is_the_one_in_the_state_dir", false) else {
        return;
    };
    let outcome = e.rt.block_on(e.runner.run(&request("echo", &[]))).unwrap();
    let a = outcome.attestation.unwrap();
    assert_eq!(
        a.public_key,
        tierbox_attest::public_key_hex(&e.key()),
        "signed with {}",
        a.public_key
    );
    // A different key does not verify it.
    let other = tierbox_attest::SigningKey::from_bytes(&[1; 32]).verifying_key();
    assert!(verify_envelope(&a, Some(&other)).is_err());
    assert!(Path::new(&e.state.path().join("attest-key")).exists());
}
