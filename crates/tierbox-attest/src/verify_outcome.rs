//! Checking an outcome against its attestation: every field the attestation covers is
//! recomputed from the outcome a verifier was given, so an edited outcome, another run's
//! envelope or a rejection's envelope does not verify.
//!
//! Covered, compared with the signed value (after the outcome's integers beyond ±2^53
//! are written as strings, as when it was signed): `run_id`, `exit_code`, `signal`,
//! `timed_out`, `quota_exceeded`, `limit_hit`, `duration_ms`, `sandbox_failure`, `tier`,
//! `backend`, `enforcement`, `plan_sha256`, the digests of `egress` (the proxy's
//! decisions) and of both streams (`stdout.sha256` raw, `stdout.text` redacted), and
//! `wasm` (Tier A: module digest, cache, fuel, memory, trap), the digest of `changes`
//! (overlay mode's change set), and `denials`. Numbers must be written as
//! they were signed: `0.0` is not `0`. Not covered: `usage`, `signal_name`,
//! `egress_preflight_hosts`, `redacted`, `created_git_dirs` (and
//! `created_git_dirs_incomplete`), `protected_changed`, `audit_error`, and the
//! stream fields besides the text and digest (byte counts, truncation); the request and
//! the policy are covered by their digests only (the outcome does not hold them).

use serde_json::{Value, json};

use crate::attestation::{
    Body, SignedAttestation, VerifyError, changes_digest, egress_decisions_digest,
};
use crate::jcs::large_integers_as_strings;
use crate::sha256_hex;

/// Checks `outcome` (a run's outcome as JSON, e.g. `tierbox run --json`) against the
/// signed `envelope`: the envelope must attest a run, the same run (`run_id`), and every
/// covered field must match. The envelope's own signature is checked separately
/// ([`crate::verify_envelope`]).
///
/// ```
/// let key = tierbox_attest::SigningKey::from_bytes(&[7; 32]);
/// let mut attestation = tierbox_attest::example_attestation();
/// if let tierbox_attest::Body::Run(run) = &mut attestation.body {
///     run.outcome.run_id = "run-example".to_owned();
///     run.outcome_digest = run.outcome.digest();
/// }
/// let signed = tierbox_attest::sign(attestation, &key).unwrap();
/// let mut outcome = tierbox_attest::example_outcome();
/// tierbox_attest::verify_outcome(&signed, &outcome).unwrap();
/// outcome["exit_code"] = 1.into();
/// assert!(tierbox_attest::verify_outcome(&signed, &outcome).is_err());
/// ```
pub fn verify_outcome(envelope: &SignedAttestation, outcome: &Value) -> Result<(), VerifyError> {
    let mismatch = |what: &str| {
        Err(VerifyError::Mismatch(format!(
            "the outcome's {what} does not match its attestation"
        )))
    };
    let Body::Run(run) = &envelope.attestation.body else {
        return Err(VerifyError::Mismatch(
            "the envelope attests a rejection, not a run: it cannot vouch for an outcome"
                .to_owned(),
        ));
    };
    if !outcome.is_object() {
        return mismatch("shape (not a JSON object)");
    }
    let a = &run.outcome;
    if a.run_id.is_empty() {
        return Err(VerifyError::Mismatch(
            "the attestation names no run_id (made before run ids were attested): it cannot be tied to this outcome".to_owned(),
        ));
    }
    let field = |name: &str| {
        let mut v = outcome.get(name).cloned().unwrap_or(Value::Null);
        large_integers_as_strings(&mut v);
        v
    };
    let flag = |name: &str| field(name) == Value::Bool(true);
    // The redacted digest is of the kept bytes: `bytes_base64` when the text view is
    // lossy, else the text (`tierbox_runner::wire`).
    let stream = |name: &str| {
        let s = &outcome[name];
        let redacted = match s.get("bytes_base64").and_then(Value::as_str) {
            Some(b64) => {
                use base64::Engine as _;
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .ok()
                    .map(|bytes| sha256_hex(&bytes))
            }
            None => s
                .get("text")
                .and_then(Value::as_str)
                .map(|t| sha256_hex(t.as_bytes())),
        };
        (s.get("sha256").cloned().unwrap_or(Value::Null), redacted)
    };
    let (out_raw, out_red) = stream("stdout");
    let (err_raw, err_red) = stream("stderr");
    let egress = match field("egress") {
        Value::Null => None,
        log => egress_decisions_digest(&log).ok(),
    };
    let wasm = match field("wasm") {
        Value::Null => None,
        w => Some(w),
    };
    let changes = match field("changes") {
        Value::Null => None,
        set => changes_digest(&set).ok(),
    };
    let denials = match field("denials") {
        Value::Array(a) if a.is_empty() => None,
        Value::Null => None,
        d => Some(d),
    };
    let reach = match field("reach") {
        Value::Array(a) if a.is_empty() => None,
        Value::Null => None,
        r => Some(r),
    };
    let unix_sockets = match field("unix_sockets") {
        Value::Array(a) if a.is_empty() => None,
        Value::Null => None,
        s => Some(s),
    };
    let stdin = field("stdin")["sha256"].as_str().map(str::to_owned);
    let checks: [(&str, bool); 23] = [
        ("run_id", field("run_id") == json!(a.run_id)),
        ("exit_code", field("exit_code") == json!(a.exit_code)),
        ("signal", field("signal") == json!(a.signal)),
        ("timed_out", flag("timed_out") == a.timed_out),
        ("quota_exceeded", flag("quota_exceeded") == a.quota_exceeded),
        ("limit_hit", field("limit_hit") == json!(a.limit_hit)),
        ("duration_ms", field("duration_ms") == json!(a.duration_ms)),
        (
            "sandbox_failure",
            field("sandbox_failure") == json!(a.sandbox_failure),
        ),
        ("tier", field("tier") == json!(run.tier)),
        ("backend", field("backend") == json!(run.backend)),
        ("enforcement", field("enforcement") == run.enforcement),
        (
            "plan_sha256",
            field("plan_sha256") == json!(run.plan_digest),
        ),
        ("egress", egress == run.egress_decisions_digest),
        ("stdout.sha256", out_raw == json!(a.stdout_sha256)),
        ("stderr.sha256", err_raw == json!(a.stderr_sha256)),
        ("stdin.sha256", stdin == a.stdin_sha256),
        (
            "stdout.text",
            out_red.as_deref() == Some(a.redacted_stdout_sha256.as_str()),
        ),
        (
            "stderr.text",
            err_red.as_deref() == Some(a.redacted_stderr_sha256.as_str()),
        ),
        ("wasm", wasm == a.wasm),
        ("changes", changes == a.changes_sha256),
        ("denials", denials == a.denials),
        ("reach", reach == a.reach),
        ("unix_sockets", unix_sockets == a.unix_sockets),
    ];
    match checks.iter().find(|(_, ok)| !ok) {
        Some((what, _)) => mismatch(what),
        None => Ok(()),
    }
}

/// The outcome [`crate::example_attestation`] attests, as JSON, with `run_id`
/// `"run-example"` (which the example itself leaves out).
#[doc(hidden)]
pub fn example_outcome() -> Value {
    json!({
        "run_id": "run-example",
        "exit_code": 0,
        "signal": null,
        "timed_out": false,
        "quota_exceeded": false,
        "limit_hit": null,
        "stdout": {"text": "hello\n", "sha256": sha256_hex(b"hello\n")},
        "stderr": {"text": "", "sha256": sha256_hex(b"")},
        "duration_ms": 12,
        "tier": "b",
        "backend": "linux-native",
        "enforcement": {"landlock": {"abi": 6, "status": "fully_enforced"}, "seccomp": true},
        "plan_sha256": sha256_hex(b"plan"),
    })
}

#[cfg(test)]
#[path = "verify_outcome_tests.rs"]
mod tests;
