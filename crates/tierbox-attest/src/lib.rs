//! Tierbox attestations: a canonical encoding and digests of what a run enforced.
//!
//! This crate starts with the part every outcome needs: a reproducible digest of the
//! [`Plan`] that ran (effective argv, environment *names*, filesystem grants, limits,
//! network mode). Secret values are never part of it: the Plan does not serialize them,
//! and environment values are replaced by their own SHA-256 before hashing, so the digest
//! can be published without revealing them.
//!
//! Canonical encoding: JSON with object keys sorted byte-wise, no insignificant
//! whitespace, and strings escaped by `serde_json` — the same bytes for the same value on
//! every platform, recomputable with `python3 -c 'import json,hashlib,sys; ...'` using
//! `json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`.
//!
//! Signed attestations and the audit log use a different, standard encoding: RFC 8785
//! JCS ([`jcs()`]); see `docs/attestation.md` for the exact bytes signed and chained.
//!
//! - [`attestation`]: the [`Attestation`] record, [`sign`] and [`verify_envelope`];
//! - [`keys`]: Ed25519 keys (created on first use in the state directory), PEM export;
//! - [`log`]: the hash-chained audit log, [`AuditLog`] and [`verify_log`].
//!
//! ```
//! use tierbox_attest::{AuditLog, Body, sign, verify_envelope, verify_log};
//! # let dir = tempfile::tempdir().unwrap();
//! # let state_dir = dir.path();
//! let (key, _created) = tierbox_attest::load_or_create_signing_key(state_dir).unwrap();
//! let mut attestation = tierbox_attest::example_attestation();
//! attestation.id = tierbox_attest::new_id().unwrap();
//! attestation.body = Body::Rejection {
//!     code: "executable_not_allowed".into(),
//!     message: "curl is not in exec.allowed_executables".into(),
//! };
//! let signed = sign(attestation, &key).unwrap();
//! verify_envelope(&signed, Some(&key.verifying_key())).unwrap();
//!
//! let mut log = AuditLog::open(&state_dir.join("audit.jsonl")).unwrap();
//! let head = log.append(signed).unwrap();
//! assert_eq!(verify_log(&state_dir.join("audit.jsonl")).unwrap().head, Some(head));
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod attestation;
pub mod jcs;
pub mod keys;
pub mod log;
pub mod verify_outcome;

pub use attestation::{
    ATTESTATION_DOMAIN, ATTESTATION_VERSION, Attestation, Body, Event, EvictedChanges, Outcome,
    RunFacts, SignedAttestation, VerifyError, attestation_digest, changes_digest,
    egress_decisions_digest, example_attestation, new_id, request_digest, sign, signed_bytes,
    verify_envelope,
};
pub use ed25519_dalek::{SigningKey, VerifyingKey};
pub use jcs::{JcsError, jcs};
pub use keys::{
    KeyError, load_or_create_signing_key, load_signing_key, parse_public_key, public_key_hex,
    public_key_pem,
};
pub use log::{
    AuditLog, Head, LogError, Summary, VerifyOptions, rotate, verify_log, verify_log_with,
};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tierbox_policy::Plan;
pub use verify_outcome::{example_outcome, verify_outcome};

/// Domain-separation prefix of plan digests (a version bump changes every digest).
pub const PLAN_DIGEST_DOMAIN: &str = "tierbox.plan.v1\n";

/// Canonical JSON: sorted keys, compact separators.
///
/// ```
/// let v = serde_json::json!({"b": 1, "a": [true, null]});
/// assert_eq!(tierbox_attest::canonical_json(&v), r#"{"a":[true,null],"b":1}"#);
/// ```
pub fn canonical_json(value: &Value) -> String {
    // serde_json's map is ordered by key (BTreeMap) in this build (no `preserve_order`),
    // so serializing a `Value` already sorts keys; `sorted` makes that independent of the
    // feature flags of other crates in the graph.
    sorted(value).to_string()
}

fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.clone(), sorted(v)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// Lowercase hex SHA-256 of `bytes`.
///
/// ```
/// assert!(tierbox_attest::sha256_hex(b"").starts_with("e3b0c442"));
/// ```
pub fn sha256_hex(bytes: &[u8]) -> String {
    jcs::hex(&Sha256::digest(bytes))
}

/// The plan as attested: environment values and stdin replaced by their SHA-256.
pub fn plan_for_attestation(plan: &Plan) -> Value {
    let mut v = serde_json::to_value(plan).unwrap_or(Value::Null);
    hash_env_and_stdin(&mut v);
    v
}

/// Replaces environment values and stdin in a serialized plan by their SHA-256.
fn hash_env_and_stdin(v: &mut Value) {
    if let Some(env) = v.get_mut("env").and_then(Value::as_array_mut) {
        for pair in env.iter_mut() {
            if let Some(arr) = pair.as_array_mut()
                && let Some(Value::String(val)) = arr.get_mut(1)
            {
                *val = format!("sha256:{}", sha256_hex(val.as_bytes()));
            }
        }
    }
    // Text stdin is a string, bytes that are not UTF-8 `{"base64": …}`: either way the
    // digest is of the bytes themselves.
    if let Some(stdin) = v.get_mut("stdin") {
        let bytes = match stdin {
            Value::String(data) => Some(data.as_bytes().to_vec()),
            Value::Object(o) => o
                .get("base64")
                .and_then(Value::as_str)
                .and_then(tierbox_policy::plan::decode_stdin_base64),
            _ => None,
        };
        if let Some(bytes) = bytes {
            *stdin = Value::String(format!("sha256:{}", sha256_hex(&bytes)));
        }
    }
}

/// Most plans whose digest [`plan_digest`] remembers (most recent first). An agent
/// repeats a handful of commands, and the digest of a strict plan (about 150 granted
/// paths) costs about 0.1 ms to encode and hash, against a few microseconds to compare;
/// plans with stdin data are never kept, so the memo holds at most this many plans of
/// a few KiB each — and no secret: each is kept with its environment values hashed.
pub const PLAN_DIGEST_MEMO_ENTRIES: usize = 8;

/// `sha256(PLAN_DIGEST_DOMAIN || canonical_json(plan_for_attestation(plan)))`, hex.
///
/// A pure function of the plan, remembered for the last [`PLAN_DIGEST_MEMO_ENTRIES`]
/// plans without stdin data (an equal plan has the same digest).
///
/// ```
/// use tierbox_policy::{Policy, ProcessRunRequest, ValidateContext, validate};
///
/// let ws = tempfile::tempdir().unwrap();
/// let ws = ws.path();
/// let mut policy = Policy::default();
/// policy.exec.allowed_executables = vec!["ls".to_owned()];
/// let mut plan = validate(&policy, &ProcessRunRequest::new("ls"), &ValidateContext::new(ws))?;
/// let first = tierbox_attest::plan_digest(&plan);
/// assert_eq!(first.len(), 64);
/// assert_eq!(tierbox_attest::plan_digest(&plan), first);
/// plan.argv.push("-l".to_owned());
/// assert_ne!(tierbox_attest::plan_digest(&plan), first);
/// # Ok::<(), tierbox_policy::Rejection>(())
/// ```
pub fn plan_digest(plan: &Plan) -> String {
    use std::sync::{Mutex, PoisonError};
    static MEMO: Mutex<Vec<(Plan, String)>> = Mutex::new(Vec::new());
    if plan.stdin.is_some() {
        return compute_plan_digest(plan);
    }
    let env = hashed_env(plan);
    {
        let mut memo = MEMO.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(i) = memo.iter().position(|(k, _)| is_key_of(k, plan, &env)) {
            let hit = memo.remove(i);
            let digest = hit.1.clone();
            memo.insert(0, hit);
            return digest;
        }
    }
    let digest = compute_plan_digest(plan);
    let mut memo = MEMO.lock().unwrap_or_else(PoisonError::into_inner);
    if !memo.iter().any(|(k, _)| is_key_of(k, plan, &env)) {
        memo.insert(0, (memo_key(plan, env), digest.clone()));
        memo.truncate(PLAN_DIGEST_MEMO_ENTRIES);
    }
    digest
}

/// The plan's environment with each value replaced by its SHA-256 (as the digest itself
/// sees them): what [`plan_digest`] remembers instead of the values.
fn hashed_env(plan: &Plan) -> Vec<(String, String)> {
    plan.env
        .iter()
        .map(|(name, value)| (name.clone(), sha256_hex(value.as_bytes())))
        .collect()
}

/// The plan as [`plan_digest`] remembers it: environment values replaced by their
/// SHA-256 (`env`, from [`hashed_env`]) and the redaction's secret values dropped (never
/// part of the digest). Two plans have equal keys exactly when they have equal digests,
/// short of a SHA-256 collision.
fn memo_key(plan: &Plan, env: Vec<(String, String)>) -> Plan {
    let mut key = plan.clone();
    key.env = env;
    key.redaction.sensitive_values.clear();
    key
}

/// Whether `key` is [`memo_key`] of `plan` (whose hashed environment is `env`), compared
/// field by field in place: no copy of the plan per lookup. The destructuring names every
/// field, so a field added to [`Plan`] cannot be left out of the comparison.
fn is_key_of(key: &Plan, plan: &Plan, env: &[(String, String)]) -> bool {
    let Plan {
        program,
        argv,
        env: _,
        cwd,
        workspace,
        workspace_mode,
        keep_changes_for_secs,
        keep_changes_caps,
        filesystem,
        network,
        limits,
        output,
        stdin,
        stdin_streamed,
        tier,
        redaction:
            tierbox_policy::plan::RedactionPlan {
                enabled,
                sensitive_names,
                sensitive_values: _,
            },
        background,
    } = plan;
    key.env == env
        && key.program == *program
        && key.argv == *argv
        && key.cwd == *cwd
        && key.workspace == *workspace
        && key.workspace_mode == *workspace_mode
        && key.keep_changes_for_secs == *keep_changes_for_secs
        && key.keep_changes_caps == *keep_changes_caps
        && key.filesystem == *filesystem
        && key.network == *network
        && key.limits == *limits
        && key.output == *output
        && key.stdin == *stdin
        && key.stdin_streamed == *stdin_streamed
        && key.tier == *tier
        && key.redaction.enabled == *enabled
        && key.redaction.sensitive_names == *sensitive_names
        && key.background == *background
}

fn compute_plan_digest(plan: &Plan) -> String {
    let mut bytes = PLAN_DIGEST_DOMAIN.as_bytes().to_vec();
    bytes.extend_from_slice(canonical_json(&plan_for_attestation(plan)).as_bytes());
    sha256_hex(&bytes)
}

/// Domain-separation prefix of policy digests.
pub const POLICY_DIGEST_DOMAIN: &str = "tierbox.policy.v1\n";

/// `sha256(POLICY_DIGEST_DOMAIN || jcs(policy))`, hex: the policy in force, as parsed
/// (defaults filled in), with integers beyond 2^53 written as strings
/// ([`jcs::large_integers_as_strings`]).
///
/// ```
/// let p = tierbox_policy::Policy::default();
/// assert_eq!(tierbox_attest::policy_digest(&p).len(), 64);
/// assert_eq!(tierbox_attest::policy_digest(&p), tierbox_attest::policy_digest(&p.clone()));
/// ```
pub fn policy_digest(policy: &tierbox_policy::Policy) -> String {
    let mut v = serde_json::to_value(policy).unwrap_or(Value::Null);
    jcs::large_integers_as_strings(&mut v);
    attestation::domain_digest(POLICY_DIGEST_DOMAIN, &v).unwrap_or_default()
}

/// Domain-separation prefix of Tier A plan digests.
pub const WASM_PLAN_DIGEST_DOMAIN: &str = "tierbox.wasm-plan.v1\n";

/// The Tier A plan as attested: environment values, stdin and an inline module replaced
/// by their SHA-256.
pub fn wasm_plan_for_attestation(plan: &tierbox_policy::wasm::WasmPlan) -> Value {
    let mut v = serde_json::to_value(plan).unwrap_or(Value::Null);
    hash_env_and_stdin(&mut v);
    if let tierbox_policy::wasm::ModuleSource::Inline(bytes) = &plan.module {
        v["module"] = serde_json::json!({ "inline_sha256": sha256_hex(bytes) });
    }
    v
}

/// `sha256(WASM_PLAN_DIGEST_DOMAIN || canonical_json(wasm_plan_for_attestation(plan)))`.
pub fn wasm_plan_digest(plan: &tierbox_policy::wasm::WasmPlan) -> String {
    let mut bytes = WASM_PLAN_DIGEST_DOMAIN.as_bytes().to_vec();
    bytes.extend_from_slice(canonical_json(&wasm_plan_for_attestation(plan)).as_bytes());
    sha256_hex(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        // A fixed directory (the digests below depend on the workspace path), not the
        // shared temporary directory itself, which no run may have as its workspace.
        let ws = std::env::temp_dir().join("tierbox-attest-tests-workspace");
        std::fs::create_dir_all(&ws).unwrap_or_else(|e| panic!("{e}"));
        let mut policy = tierbox_policy::Policy::default();
        policy.exec.allowed_executables = vec!["ls".to_owned()];
        let ctx = tierbox_policy::ValidateContext::new(&ws).with_env(
            [
                ("HOME".to_owned(), "/nonexistent".to_owned()),
                ("LANG".to_owned(), "C.UTF-8".to_owned()),
            ]
            .into(),
        );
        tierbox_policy::validate(&policy, &tierbox_policy::ProcessRunRequest::new("ls"), &ctx)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn golden_sha256() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn digest_is_stable_and_sensitive() {
        let p = plan();
        assert_eq!(plan_digest(&p), plan_digest(&p.clone()));
        let mut q = p.clone();
        q.argv.push("-l".to_owned());
        assert_ne!(plan_digest(&p), plan_digest(&q));
        let mut r = p.clone();
        r.limits.memory_bytes += 1;
        assert_ne!(plan_digest(&p), plan_digest(&r));
    }

    #[test]
    fn remembered_digests_are_the_computed_ones() {
        let base = plan();
        // More distinct plans than the memo keeps, each asked twice, then all again: a
        // wrong entry returned for an unequal plan, or a stale one, fails here.
        let plans: Vec<Plan> = (0..PLAN_DIGEST_MEMO_ENTRIES + 3)
            .map(|i| {
                let mut p = base.clone();
                p.argv.push(format!("-{i}"));
                if i % 4 == 3 {
                    p.stdin = Some(vec![b'x'; i]);
                }
                p
            })
            .collect();
        for _ in 0..2 {
            for p in &plans {
                assert_eq!(plan_digest(p), compute_plan_digest(p));
                assert_eq!(plan_digest(p), compute_plan_digest(p));
            }
        }
        let digests: std::collections::BTreeSet<String> = plans.iter().map(plan_digest).collect();
        assert_eq!(digests.len(), plans.len());
        // An environment value is part of the digest, and only its hash is remembered.
        let mut secret = base.clone();
        secret
            .env
            .push(("TOKEN".to_owned(), "s3cret-value".to_owned()));
        let with_secret = plan_digest(&secret);
        assert_eq!(with_secret, compute_plan_digest(&secret));
        let key = memo_key(&secret, hashed_env(&secret));
        assert!(!format!("{key:?}").contains("s3cret-value"));
        assert!(is_key_of(&key, &secret, &hashed_env(&secret)));
        // Redacted values are not part of the digest; every other field is.
        let mut redacted = secret.clone();
        redacted
            .redaction
            .sensitive_values
            .push("s3cret-value".to_owned());
        assert!(is_key_of(&key, &redacted, &hashed_env(&redacted)));
        let mut narrower = secret.clone();
        let fewer = narrower.filesystem.system_read_only.len().saturating_sub(1);
        narrower.filesystem.system_read_only = narrower.filesystem.system_read_only[..fewer].into();
        assert!(!is_key_of(&key, &narrower, &hashed_env(&narrower)));
        assert_ne!(plan_digest(&narrower), with_secret);
        let mut other = secret.clone();
        other.env.last_mut().unwrap().1 = "another-value".to_owned();
        assert_ne!(plan_digest(&other), with_secret);
        assert_eq!(plan_digest(&other), compute_plan_digest(&other));
    }

    #[test]
    fn env_values_do_not_appear_in_the_attested_plan() {
        let p = plan();
        let text = canonical_json(&plan_for_attestation(&p));
        assert!(text.contains("\"LANG\""));
        assert!(!text.contains("C.UTF-8"), "{text}");
    }
}
