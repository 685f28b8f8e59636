//! The forgery suite: each way of making an outcome say something its attestation does
//! not — a field edited, another kind of envelope, another run's envelope, a replay, a
//! duplicate key, a number written differently — is refused, naming what differs; the
//! genuine outcome, and text that only escapes differently, verifies.

use serde_json::{Value, json};

use super::*;
use crate::attestation::{Attestation, RunFacts};
use crate::{SigningKey, example_attestation, sign};

fn key() -> SigningKey {
    SigningKey::from_bytes(&[7; 32])
}

fn signed(a: Attestation) -> SignedAttestation {
    sign(a, &key()).unwrap()
}

/// The genuine envelope of [`example_outcome`].
fn genuine() -> SignedAttestation {
    signed_with(|_| {})
}

/// The example attestation of [`example_outcome`] (run id `run-example`) with its facts
/// changed by `edit`, signed: the signer is honest, the outcome handed to the verifier
/// may not be.
fn signed_with(edit: impl FnOnce(&mut RunFacts)) -> SignedAttestation {
    let mut a = example_attestation();
    let Body::Run(run) = &mut a.body else {
        unreachable!("the example attests a run")
    };
    run.outcome.run_id = "run-example".to_owned();
    edit(run);
    let facts = RunFacts::new(
        run.plan_digest.clone(),
        run.tier.clone(),
        run.backend.clone(),
        run.enforcement.clone(),
        run.outcome.clone(),
        run.egress_decisions_digest.clone(),
    );
    a.body = Body::Run(Box::new(facts));
    signed(a)
}

/// A change to an outcome.
type Edit = Box<dyn Fn(&mut Value)>;

#[track_caller]
fn refused(envelope: &SignedAttestation, outcome: &Value, naming: &str) {
    match verify_outcome(envelope, outcome) {
        Ok(()) => panic!("a forged outcome verified (expected a mismatch in {naming})"),
        Err(e) => assert!(e.to_string().contains(naming), "{naming}: {e}"),
    }
}

#[test]
fn the_genuine_outcome_verifies_and_escapes_do_not_matter() {
    let envelope = genuine();
    verify_outcome(&envelope, &example_outcome()).unwrap();
    // The same text written with escapes parses to the same value.
    let text = serde_json::to_string(&example_outcome())
        .unwrap()
        .replace(r#""hello\n""#, r#""hell\u006f\u000a""#);
    assert!(text.contains("\\u006f"), "{text}");
    let outcome = tierbox_policy::json::value(&text).unwrap();
    verify_outcome(&envelope, &outcome).unwrap();
}

#[test]
fn every_covered_field_edited_is_refused() {
    let envelope = genuine();
    let edits: Vec<(&str, Edit)> = vec![
        ("run_id", Box::new(|o| o["run_id"] = json!("run-other"))),
        ("exit_code", Box::new(|o| o["exit_code"] = json!(1))),
        ("exit_code", Box::new(|o| o["exit_code"] = json!(0.0))),
        ("exit_code", Box::new(|o| o["exit_code"] = json!("0"))),
        ("signal", Box::new(|o| o["signal"] = json!(9))),
        ("timed_out", Box::new(|o| o["timed_out"] = json!(true))),
        (
            "quota_exceeded",
            Box::new(|o| o["quota_exceeded"] = json!(true)),
        ),
        ("limit_hit", Box::new(|o| o["limit_hit"] = json!("memory"))),
        ("duration_ms", Box::new(|o| o["duration_ms"] = json!(13))),
        ("duration_ms", Box::new(|o| o["duration_ms"] = json!(12.0))),
        (
            "sandbox_failure",
            Box::new(|o| o["sandbox_failure"] = json!("pid 1 crashed")),
        ),
        ("tier", Box::new(|o| o["tier"] = json!("c"))),
        ("backend", Box::new(|o| o["backend"] = json!("bwrap"))),
        (
            "enforcement",
            Box::new(|o| o["enforcement"]["seccomp"] = json!(false)),
        ),
        (
            "enforcement",
            Box::new(|o| o["enforcement"]["landlock"]["abi"] = json!(7)),
        ),
        (
            "plan_sha256",
            Box::new(|o| o["plan_sha256"] = json!(crate::sha256_hex(b"x"))),
        ),
        (
            "egress",
            Box::new(|o| o["egress"] = json!({"decisions": []})),
        ),
        (
            "unix_sockets",
            Box::new(|o| {
                o["unix_sockets"] =
                    json!([{"entry": "/run/docker.sock", "path": "/run/docker.sock"}])
            }),
        ),
        (
            "reach",
            Box::new(|o| {
                o["reach"] = json!([{"relay": "publish 127.0.0.1:1:2", "connections": 1}])
            }),
        ),
        (
            "stdout.sha256",
            Box::new(|o| o["stdout"]["sha256"] = json!(crate::sha256_hex(b"all tests passed\n"))),
        ),
        (
            "stdout.text",
            Box::new(|o| o["stdout"]["text"] = json!("all tests passed\n")),
        ),
        (
            "stderr.sha256",
            Box::new(|o| o["stderr"]["sha256"] = json!(null)),
        ),
        (
            "stderr.text",
            Box::new(|o| o["stderr"]["text"] = json!("warning\n")),
        ),
        (
            "wasm",
            Box::new(|o| o["wasm"] = json!({"module_sha256": "00"})),
        ),
    ];
    for (field, edit) in edits {
        let mut outcome = example_outcome();
        edit(&mut outcome);
        refused(&envelope, &outcome, field);
    }
    // A field left out is a field changed (to null / false).
    for field in ["exit_code", "duration_ms", "tier", "enforcement", "run_id"] {
        let mut outcome = example_outcome();
        outcome.as_object_mut().unwrap().remove(field);
        refused(&envelope, &outcome, field);
    }
    refused(&envelope, &json!([1, 2]), "shape");
}

#[test]
fn signed_facts_that_differ_from_the_outcome_are_refused() {
    let outcome = example_outcome();
    let cases: Vec<(&str, SignedAttestation)> = vec![
        ("timed_out", signed_with(|r| r.outcome.timed_out = true)),
        (
            "limit_hit",
            signed_with(|r| r.outcome.limit_hit = Some("wall_time".to_owned())),
        ),
        (
            "wasm",
            signed_with(|r| r.outcome.wasm = Some(json!({"module_sha256": "ab"}))),
        ),
        (
            "egress",
            signed_with(|r| r.egress_decisions_digest = Some("00".repeat(32))),
        ),
        (
            "sandbox_failure",
            signed_with(|r| r.outcome.sandbox_failure = Some("x".to_owned())),
        ),
    ];
    for (field, envelope) in cases {
        crate::verify_envelope(&envelope, None).unwrap();
        refused(&envelope, &outcome, field);
    }
}

#[test]
fn another_kind_of_envelope_or_another_run_s_is_refused() {
    // A rejection's envelope (e.g. from the audit log) paired with a fabricated outcome.
    let mut rejection = example_attestation();
    rejection.body = Body::Rejection {
        code: "exec.not_allowed".to_owned(),
        message: "executable \"rm\" is not allowed".to_owned(),
    };
    let rejection = signed(rejection);
    crate::verify_envelope(&rejection, None).unwrap();
    refused(&rejection, &example_outcome(), "rejection");

    // Another run with the same output (a replay of its envelope): its run id differs.
    let other = signed_with(|r| r.outcome.run_id = "run-other".to_owned());
    refused(&other, &example_outcome(), "run_id");

    // An envelope made before run ids were attested cannot be tied to any outcome.
    let old = signed_with(|r| r.outcome.run_id.clear());
    refused(&old, &example_outcome(), "run_id");
}

#[test]
fn a_duplicate_key_is_refused_before_anything_is_compared() {
    let text = serde_json::to_string(&example_outcome()).unwrap();
    for forged in [
        text.replacen('{', r#"{"exit_code":1,"#, 1),
        text.replacen('{', r#"{"\u0065xit_code":1,"#, 1),
        text.replace(
            r#""text":"hello\n""#,
            r#""text":"hello\n","text":"all tests passed\n""#,
        ),
    ] {
        let err = tierbox_policy::json::value(&forged).unwrap_err();
        assert!(err.to_string().contains("duplicate key"), "{forged}: {err}");
    }
}
