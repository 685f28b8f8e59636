//! The attestation record, its digest and the signed envelope.
//!
//! Invariants:
//! - The signed message is exactly `ATTESTATION_DOMAIN || jcs(attestation)` (see
//!   [`signed_bytes`]); the envelope's `digest` is the SHA-256 of those bytes and its
//!   `signature` the Ed25519 signature of those same bytes (not of the digest).
//! - Every struct rejects unknown fields, so a renamed or added field fails parsing
//!   instead of being silently ignored (and left out of the recomputed digest).
//! - Times are unix milliseconds (UTC, integers): no time zone or leap-second text to
//!   canonicalize, and exact in JCS (they stay far below 2^53).

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::jcs::{JcsError, jcs};
use crate::keys::{hex, parse_hex};
use crate::sha256_hex;

/// Current [`Attestation::version`].
pub const ATTESTATION_VERSION: u32 = 1;
/// Domain-separation prefix of the signed message and of the attestation digest.
pub const ATTESTATION_DOMAIN: &str = "tierbox.attestation.v1\n";
/// Domain-separation prefix of [`Outcome::digest`].
pub const OUTCOME_DOMAIN: &str = "tierbox.outcome.v1\n";
/// Domain-separation prefix of [`egress_decisions_digest`].
pub const EGRESS_DECISIONS_DOMAIN: &str = "tierbox.egress-decisions.v1\n";
/// Domain-separation prefix of [`request_digest`].
pub const REQUEST_DOMAIN: &str = "tierbox.request.v1\n";
/// Domain prefix of [`changes_digest`].
pub const CHANGES_DOMAIN: &str = "tierbox.changes.v1\n";

/// What one request produced: a run, or a rejection before anything ran.
///
/// Serialized with the fields below plus a `body` object tagged by `kind`
/// (`"run"` or `"rejection"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Attestation {
    /// Format version, [`ATTESTATION_VERSION`].
    pub version: u32,
    /// Random 128-bit identifier, 32 lowercase hex digits.
    pub id: String,
    /// When the request was accepted (or rejected), unix milliseconds UTC.
    pub started_unix_ms: u64,
    /// When the run ended (equal to `started_unix_ms` for a rejection), unix ms UTC.
    pub ended_unix_ms: u64,
    /// Hex SHA-256 of the policy in force (computed by the caller).
    pub policy_digest: String,
    /// Hex SHA-256 of the request, e.g. [`request_digest`].
    pub request_digest: String,
    /// What happened.
    pub body: Body,
}

/// The part of an [`Attestation`] that depends on whether anything ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Body {
    /// The request was validated and ran.
    Run(Box<RunFacts>),
    /// The request was refused; nothing ran.
    Rejection {
        /// The rejection's stable code (e.g. `"path_outside_workspace"`).
        code: String,
        /// The human-readable message.
        message: String,
    },
    /// Something the runner did on its own while handling the request, which the log
    /// must show; named by its `event` field.
    Event(Event),
}

/// What the runner did on its own while handling a request ([`Body::Event`]), tagged by
/// `event`.
///
/// ```
/// use tierbox_attest::{Body, EvictedChanges, Event};
///
/// let body = Body::Event(Event::ChangesEvicted {
///     run_id: "aa".into(),
///     owner: "uid:1000".into(),
///     evicted: vec![EvictedChanges { run_id: "bb".into(), created_unix_ms: 1, bytes: 8192, entries: 6 }],
/// });
/// let json = serde_json::to_value(&body).unwrap();
/// assert_eq!(json["kind"], "event");
/// assert_eq!(json["event"], "changes.evicted");
/// assert_eq!(serde_json::from_value::<Body>(json).unwrap(), body);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "event", deny_unknown_fields)]
pub enum Event {
    /// `changes.evicted`: keeping the change set of run `run_id` removed older unapplied
    /// sets of the same owner, to stay under the caps on kept change sets
    /// (`workspace.keep_changes_*`).
    #[serde(rename = "changes.evicted")]
    ChangesEvicted {
        /// The run whose change set was kept (its outcome's `run_id`).
        run_id: String,
        /// The owner of the set kept and of every set evicted.
        owner: String,
        /// The sets removed, oldest first.
        evicted: Vec<EvictedChanges>,
    },
    /// `file.written`: a file of the workspace was written through the file face (an
    /// agent's write over HTTP or MCP, not a run's), replacing it whole — or, in review
    /// mode, kept as a change set (`kept_as`).
    #[serde(rename = "file.written")]
    FileWritten {
        /// The workspace written in (canonical, after the scope rules).
        workspace: String,
        /// The file, relative to the workspace.
        path: String,
        /// Bytes the request sent.
        bytes_written: u64,
        /// Size of the file after the write, in bytes (larger than `bytes_written` for
        /// an append).
        size: u64,
        /// Hex SHA-256 of the file's content after the write.
        sha256: String,
        /// Whether the bytes were appended to what the file held.
        append: bool,
        /// Who asked for the write (`session:<id>`, `mcp:<id>`, `http:<name>`).
        owner: String,
        /// The file's owner after the write (the workspace's).
        uid: u32,
        /// The file's group after the write.
        gid: u32,
        /// In review mode: the change set the write was kept as (the workspace is
        /// unchanged until it is applied; the fields above say what the file will be).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kept_as: Option<String>,
    },
    /// `term.attached`: a client attached to term `term_id` over its WebSocket channel
    /// (`GET /v1/terms/{id}/ws`). The record's `started_unix_ms` is when.
    #[serde(rename = "term.attached")]
    TermAttached {
        /// The term.
        term_id: String,
        /// The owner the attach was made for (the ticket's).
        owner: String,
        /// The connection's `Origin` header (a browser page), absent for a client that
        /// sent none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        origin: Option<String>,
        /// The server's number for the connection, the same in its `term.detached`.
        socket: u64,
        /// `control` (it types, resizes, signals) or `view` (it only watches); absent in
        /// records made before there were views (they were `control`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<String>,
    },
    /// `term.detached`: the WebSocket of a `term.attached` closed. `started_unix_ms` is
    /// when it attached, `ended_unix_ms` when it closed. What was typed is never recorded,
    /// only how much.
    #[serde(rename = "term.detached")]
    TermDetached {
        /// The term.
        term_id: String,
        /// The owner.
        owner: String,
        /// The connection's `Origin` header, when it had one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        origin: Option<String>,
        /// The number of its `term.attached`.
        socket: u64,
        /// Why it closed: `client_closed`, `term_ended`, `owner_ended`, `stalled`,
        /// `message_too_large`, `broken` or `upgrade_failed`.
        reason: String,
        /// Bytes the client sent to the terminal (a count, never the bytes).
        input_bytes: u64,
        /// Bytes of output sent to the client.
        output_bytes: u64,
        /// Bytes of output the client missed because it read too slowly.
        lost_bytes: u64,
    },
}

/// A kept change set removed unapplied to make room for a newer one of its owner's
/// ([`Event::ChangesEvicted`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EvictedChanges {
    /// The run that made it.
    pub run_id: String,
    /// When it was kept, unix milliseconds UTC.
    pub created_unix_ms: u64,
    /// What it was charged against the caps, in bytes (4 KiB blocks).
    pub bytes: u64,
    /// What it was charged against the caps, in entries.
    pub entries: u64,
}

/// What a run enforced and produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunFacts {
    /// [`crate::plan_digest`] or [`crate::wasm_plan_digest`] of what ran.
    pub plan_digest: String,
    /// Tier name, e.g. `"b"`.
    pub tier: String,
    /// Backend name, e.g. `"linux-native"`.
    pub backend: String,
    /// The runner's enforcement report, as JSON (kernel, landlock ABI and status,
    /// seccomp, namespaces, cgroup). Kept opaque so this crate does not depend on the
    /// runner; it must be JCS-encodable (integers within ±2^53 or exact).
    pub enforcement: Value,
    /// Exit status, timing and output digests.
    pub outcome: Outcome,
    /// Must equal `outcome.digest()`; checked by [`verify_envelope`].
    pub outcome_digest: String,
    /// [`egress_decisions_digest`] of the proxy's decisions, or `None` without egress.
    pub egress_decisions_digest: Option<String>,
}

/// How a run ended. Output digests are of the bytes as captured (raw) and as returned to
/// the caller after secret redaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Outcome {
    /// Exit code, if the process exited.
    pub exit_code: Option<i32>,
    /// Terminating signal number, if it was killed.
    pub signal: Option<i32>,
    /// Wall-clock duration, milliseconds.
    pub duration_ms: u64,
    /// The limit that ended the run (e.g. `"wall_time"`), if any.
    pub limit_hit: Option<String>,
    /// Hex SHA-256 of the raw stdout.
    pub stdout_sha256: String,
    /// Hex SHA-256 of the raw stderr.
    pub stderr_sha256: String,
    /// Hex SHA-256 of stdout after redaction.
    pub redacted_stdout_sha256: String,
    /// Hex SHA-256 of stderr after redaction.
    pub redacted_stderr_sha256: String,
    /// Hex SHA-256 of the bytes the program's stdin carried (the outcome's
    /// `stdin.sha256`): for a streamed stdin, which the plan does not hold, the only record
    /// of what the program read. Absent for a `/dev/null` stdin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin_sha256: Option<String>,
    /// The sandbox itself failed during the run (e.g. its pid 1 crashed): what happened.
    /// The program's own exit status is then unknown. Absent for every other run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_failure: Option<String>,
    /// The outcome's `run_id` (a background process: its handle). Binds the attestation
    /// to one outcome: another run's envelope does not verify against it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub run_id: String,
    /// The run was stopped at its deadline. Absent when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub timed_out: bool,
    /// The output quota (`kill` mode) stopped the run. Absent when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub quota_exceeded: bool,
    /// A Tier A run's report (the outcome's `wasm`, integers beyond ±2^53 as strings):
    /// the module's content digest, where its compiled code came from, fuel, memory, trap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wasm: Option<Value>,
    /// Overlay (review) mode: [`changes_digest`] of the outcome's `changes`, the change
    /// set the run left for review (every path with its kind, size, mode and SHA-256).
    /// Absent in direct mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes_sha256: Option<String>,
    /// The outcome's `denials` (what the run was refused, with the policy change that
    /// would allow each), whole: the audit log then says why a run was refused what it
    /// was (`tierbox explain RUN_ID`). Absent when the list is empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denials: Option<Value>,
    /// The outcome's `reach` (each published port and host port of the run, with what it
    /// carried), whole. Absent when the run had none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reach: Option<Value>,
    /// The outcome's `unix_sockets` (each host socket the run could connect to), whole.
    /// Absent when the run had none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unix_sockets: Option<Value>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Outcome {
    /// `sha256(OUTCOME_DOMAIN || jcs(outcome))`, hex.
    pub fn digest(&self) -> String {
        // An Outcome holds only strings, small integers and nulls: JCS cannot fail.
        domain_digest(OUTCOME_DOMAIN, &to_value(self)).unwrap_or_default()
    }
}

impl RunFacts {
    /// Builds the facts, computing `outcome_digest` from `outcome`.
    pub fn new(
        plan_digest: String,
        tier: String,
        backend: String,
        enforcement: Value,
        outcome: Outcome,
        egress_decisions_digest: Option<String>,
    ) -> Self {
        let outcome_digest = outcome.digest();
        Self {
            plan_digest,
            tier,
            backend,
            enforcement,
            outcome,
            outcome_digest,
            egress_decisions_digest,
        }
    }
}

/// `sha256(EGRESS_DECISIONS_DOMAIN || jcs(decisions))`, hex.
pub fn egress_decisions_digest(decisions: &Value) -> Result<String, JcsError> {
    domain_digest(EGRESS_DECISIONS_DOMAIN, decisions)
}

/// `sha256(CHANGES_DOMAIN || jcs(changes))`, hex: an outcome's change set as JSON.
pub fn changes_digest(changes: &Value) -> Result<String, JcsError> {
    domain_digest(CHANGES_DOMAIN, changes)
}

/// `sha256(REQUEST_DOMAIN || jcs(request))`, hex, for a request serialized to JSON.
pub fn request_digest(request: &Value) -> Result<String, JcsError> {
    domain_digest(REQUEST_DOMAIN, request)
}

/// `sha256(domain || jcs(value))`, hex.
pub fn domain_digest(domain: &str, value: &Value) -> Result<String, JcsError> {
    let mut bytes = domain.as_bytes().to_vec();
    bytes.extend_from_slice(jcs(value)?.as_bytes());
    Ok(sha256_hex(&bytes))
}

fn to_value<T: Serialize>(v: &T) -> Value {
    // Serializing these plain structs to a Value cannot fail (string keys, no maps with
    // non-string keys, no custom serializers).
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// A fresh random 128-bit identifier (32 lowercase hex digits) from the OS.
pub fn new_id() -> std::io::Result<String> {
    let mut b = [0u8; 16];
    crate::keys::os_random(&mut b)?;
    Ok(hex(&b))
}

/// The exact bytes that are hashed into `digest` and signed:
/// `ATTESTATION_DOMAIN || jcs(attestation)`.
///
/// ```
/// # let a = tierbox_attest::example_attestation();
/// let bytes = tierbox_attest::signed_bytes(&a).unwrap();
/// assert!(bytes.starts_with(b"tierbox.attestation.v1\n{\"body\":{"));
/// ```
pub fn signed_bytes(attestation: &Attestation) -> Result<Vec<u8>, JcsError> {
    let mut bytes = ATTESTATION_DOMAIN.as_bytes().to_vec();
    bytes.extend_from_slice(jcs(&to_value(attestation))?.as_bytes());
    Ok(bytes)
}

/// `sha256(signed_bytes(attestation))`, hex.
pub fn attestation_digest(attestation: &Attestation) -> Result<String, JcsError> {
    Ok(sha256_hex(&signed_bytes(attestation)?))
}

/// A signed attestation, the unit written to files and to the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SignedAttestation {
    /// What is attested.
    pub attestation: Attestation,
    /// Hex SHA-256 of [`signed_bytes`].
    pub digest: String,
    /// Hex Ed25519 signature (64 bytes) of [`signed_bytes`].
    pub signature: String,
    /// Hex Ed25519 public key (32 bytes) of the signer. Self-reported: pin the expected
    /// key when verifying ([`verify_envelope`]'s `trusted`).
    pub public_key: String,
}

/// Why an attestation could not be signed or verified.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// The attestation has no JCS encoding.
    #[error("attestation cannot be canonicalized: {0}")]
    Jcs(#[from] JcsError),
    /// `digest` differs from the recomputed one.
    #[error("digest mismatch: envelope says {claimed}, attestation hashes to {actual}")]
    DigestMismatch {
        /// The envelope's `digest`.
        claimed: String,
        /// The recomputed digest.
        actual: String,
    },
    /// `outcome_digest` differs from the digest of `outcome`.
    #[error("outcome digest mismatch: attestation says {claimed}, outcome hashes to {actual}")]
    OutcomeDigestMismatch {
        /// The attestation's `outcome_digest`.
        claimed: String,
        /// The recomputed digest.
        actual: String,
    },
    /// An unsupported `version`.
    #[error("unsupported attestation version {0}")]
    UnsupportedVersion(u32),
    /// `public_key` or `signature` is not well-formed lowercase hex of the right length.
    #[error("malformed {field}: expected {len} bytes of lowercase hex")]
    Malformed {
        /// Which field.
        field: &'static str,
        /// Expected length in bytes.
        len: usize,
    },
    /// `public_key` is not a valid Ed25519 point.
    #[error("public key {0} is not a valid ed25519 key")]
    BadPublicKey(String),
    /// The envelope was signed by another key than the trusted one.
    #[error("signed by {actual}, expected the trusted key {trusted}")]
    UntrustedKey {
        /// The trusted key, hex.
        trusted: String,
        /// The envelope's key, hex.
        actual: String,
    },
    /// The signature does not verify.
    #[error("bad signature by {public_key}")]
    BadSignature {
        /// The envelope's key, hex.
        public_key: String,
    },
    /// A document that carries the attestation disagrees with it (e.g. an outcome whose
    /// output does not hash to the attested digest).
    #[error("{0}")]
    Mismatch(String),
}

/// Signs `attestation`: computes the digest and the Ed25519 signature of
/// [`signed_bytes`].
///
/// ```
/// let key = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
/// let signed = tierbox_attest::sign(tierbox_attest::example_attestation(), &key).unwrap();
/// tierbox_attest::verify_envelope(&signed, Some(&key.verifying_key())).unwrap();
/// ```
pub fn sign(attestation: Attestation, key: &SigningKey) -> Result<SignedAttestation, VerifyError> {
    let bytes = signed_bytes(&attestation)?;
    let signature = key.sign(&bytes);
    Ok(SignedAttestation {
        digest: sha256_hex(&bytes),
        signature: hex(&signature.to_bytes()),
        public_key: hex(key.verifying_key().as_bytes()),
        attestation,
    })
}

/// Verifies an envelope: version, `outcome_digest`, `digest`, the signer (when `trusted`
/// is given it must be that key) and the signature (strict Ed25519 verification:
/// non-canonical encodings and small-order keys are refused).
///
/// Without `trusted` this proves only integrity under the envelope's own key, not who
/// signed it.
pub fn verify_envelope(
    envelope: &SignedAttestation,
    trusted: Option<&VerifyingKey>,
) -> Result<(), VerifyError> {
    let a = &envelope.attestation;
    if a.version != ATTESTATION_VERSION {
        return Err(VerifyError::UnsupportedVersion(a.version));
    }
    if let Body::Run(run) = &a.body {
        let actual = run.outcome.digest();
        if actual != run.outcome_digest {
            return Err(VerifyError::OutcomeDigestMismatch {
                claimed: run.outcome_digest.clone(),
                actual,
            });
        }
    }
    let bytes = signed_bytes(a)?;
    let actual = sha256_hex(&bytes);
    if actual != envelope.digest {
        return Err(VerifyError::DigestMismatch {
            claimed: envelope.digest.clone(),
            actual,
        });
    }
    let pk: [u8; 32] = parse_hex(&envelope.public_key).ok_or(VerifyError::Malformed {
        field: "public_key",
        len: 32,
    })?;
    let sig: [u8; 64] = parse_hex(&envelope.signature).ok_or(VerifyError::Malformed {
        field: "signature",
        len: 64,
    })?;
    let key = VerifyingKey::from_bytes(&pk)
        .map_err(|_| VerifyError::BadPublicKey(envelope.public_key.clone()))?;
    if let Some(t) = trusted
        && t.as_bytes() != key.as_bytes()
    {
        return Err(VerifyError::UntrustedKey {
            trusted: hex(t.as_bytes()),
            actual: envelope.public_key.clone(),
        });
    }
    key.verify_strict(&bytes, &Signature::from_bytes(&sig))
        .map_err(|_| VerifyError::BadSignature {
            public_key: envelope.public_key.clone(),
        })
}

/// A fixed attestation for examples and golden tests.
#[doc(hidden)]
pub fn example_attestation() -> Attestation {
    let outcome = Outcome {
        exit_code: Some(0),
        signal: None,
        duration_ms: 12,
        limit_hit: None,
        stdout_sha256: sha256_hex(b"hello\n"),
        stderr_sha256: sha256_hex(b""),
        redacted_stdout_sha256: sha256_hex(b"hello\n"),
        stdin_sha256: None,
        redacted_stderr_sha256: sha256_hex(b""),
        sandbox_failure: None,
        run_id: String::new(),
        timed_out: false,
        quota_exceeded: false,
        wasm: None,
        changes_sha256: None,
        reach: None,
        unix_sockets: None,
        denials: None,
    };
    Attestation {
        version: ATTESTATION_VERSION,
        id: "000102030405060708090a0b0c0d0e0f".to_owned(),
        started_unix_ms: 1_767_225_600_000,
        ended_unix_ms: 1_767_225_600_012,
        policy_digest: sha256_hex(b"policy"),
        request_digest: sha256_hex(b"request"),
        body: Body::Run(Box::new(RunFacts::new(
            sha256_hex(b"plan"),
            "b".to_owned(),
            "linux-native".to_owned(),
            serde_json::json!({"landlock": {"abi": 6, "status": "fully_enforced"}, "seccomp": true}),
            outcome,
            None,
        ))),
    }
}

#[cfg(test)]
#[path = "attestation_tests.rs"]
mod tests;
