//! Signed attestations of runs and rejections, appended to the policy's audit log.
//!
//! Every run through a [`crate::Runner`] — foreground, background, Tier A — ends with an
//! ed25519-signed [`SignedAttestation`] in its [`Outcome`]: digests of the policy, the
//! request, the plan that ran and the output (raw and redacted), the tier, backend and
//! enforcement report, and the egress decisions. When the policy names an audit log
//! (`[audit] log`), the attestation is appended to it (hash-chained, fsynced) before the
//! outcome is returned, and so is one record per rejected request. The signing key is
//! `[audit] signing_key`, else `<state_dir>/attest-key`, created 0600 on first use.
//! See `docs/attestation.md` for the format.

use std::path::Path;
use std::sync::Mutex;
use std::time::SystemTime;

use serde_json::Value;
use tierbox_attest::jcs::large_integers_as_strings;
use tierbox_attest::{
    Attestation, AuditLog, Body, RunFacts, SignedAttestation, SigningKey, egress_decisions_digest,
    request_digest,
};
use tierbox_policy::{Policy, Rejection};

use crate::outcome::Outcome;

/// Why attestations cannot be made or recorded.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The signing key could not be loaded or created.
    #[error("attestation signing key: {0}")]
    Key(#[from] tierbox_attest::KeyError),
    /// The audit log could not be opened or appended to.
    #[error("audit log: {0}")]
    Log(#[from] tierbox_attest::LogError),
    /// The attestation could not be encoded or signed.
    #[error("attestation: {0}")]
    Encode(String),
    /// The state directory, where the key is kept, is not this user's to trust.
    #[error("attestation signing key: {0}")]
    StateDir(String),
}

/// Signs attestations with one key and appends them to the policy's audit log.
#[derive(Debug)]
pub struct Auditor {
    key: SigningKey,
    log: Option<Mutex<AuditLog>>,
    policy_digest: String,
}

/// What ran, for [`Auditor::attest`].
#[derive(Debug, Clone, Copy)]
pub struct RunDescription<'a> {
    /// `tierbox_attest::plan_digest` (or `wasm_plan_digest`) of the plan that ran.
    pub plan_sha256: &'a str,
    /// The tier that ran.
    pub tier: tierbox_policy::Tier,
    /// Backend name.
    pub backend: &'a str,
    /// The enforcement report.
    pub enforcement: &'a tierbox_policy::Enforcement,
    /// The egress proxy's decision log as JSON, when a proxy ran.
    pub egress: Option<&'a Value>,
}

/// Milliseconds since the Unix epoch, now.
pub fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

impl Auditor {
    /// Loads the signing key (the policy's, else `<state_dir>/attest-key`, created on
    /// first use) and opens the policy's audit log, if any, verifying its chain.
    /// `policy_digest` is [`tierbox_attest::policy_digest`] of `policy` (the runner keeps
    /// it).
    pub fn open(
        policy: &Policy,
        policy_digest: &str,
        state_dir: &Path,
    ) -> Result<Self, AuditError> {
        let key = match &policy.audit.signing_key {
            Some(path) => tierbox_attest::load_signing_key(path)?,
            None => {
                // The key is made in the state directory only when it is ours to trust.
                crate::supervisor::ensure_state_dir(state_dir)
                    .map_err(|e| AuditError::StateDir(e.to_string()))?;
                tierbox_attest::load_or_create_signing_key(state_dir)?.0
            }
        };
        let log = match &policy.audit.log {
            Some(path) => Some(Mutex::new(AuditLog::open(path)?)),
            None => None,
        };
        Ok(Self {
            key,
            log,
            policy_digest: policy_digest.to_owned(),
        })
    }

    /// The public half of the signing key.
    pub fn verifying_key(&self) -> tierbox_attest::VerifyingKey {
        self.key.verifying_key()
    }

    /// Whether records are appended to an audit log.
    pub fn has_log(&self) -> bool {
        self.log.is_some()
    }

    /// Attests a finished run: signs, appends to the log, and returns the envelope.
    /// `request` is the request as JSON; `started_unix_ms` when it was accepted.
    pub fn attest_run(
        &self,
        request: &Value,
        started_unix_ms: u64,
        outcome: &Outcome,
    ) -> Result<SignedAttestation, AuditError> {
        let ended = tierbox_attest::Outcome {
            exit_code: outcome.exit_code,
            signal: outcome.signal,
            duration_ms: outcome.duration_ms,
            limit_hit: outcome.limit_hit.map(|l| {
                serde_json::to_value(l)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            }),
            stdout_sha256: outcome.stdout.sha256.clone(),
            stderr_sha256: outcome.stderr.sha256.clone(),
            stdin_sha256: outcome.stdin.as_ref().map(|s| s.sha256.clone()),
            redacted_stdout_sha256: redacted_digest(&outcome.stdout),
            redacted_stderr_sha256: redacted_digest(&outcome.stderr),
            sandbox_failure: outcome.sandbox_failure.clone(),
            run_id: outcome.run_id.clone(),
            timed_out: outcome.timed_out,
            quota_exceeded: outcome.quota_exceeded,
            denials: denials_value(&outcome.denials)?,
            reach: match outcome.reach.is_empty() {
                true => None,
                false => Some(serde_json::to_value(&outcome.reach).map_err(|e| encode(&e))?),
            },
            unix_sockets: match outcome.unix_sockets.is_empty() {
                true => None,
                false => Some(serde_json::to_value(&outcome.unix_sockets).map_err(|e| encode(&e))?),
            },
            changes_sha256: match &outcome.changes {
                Some(set) => Some(
                    tierbox_attest::changes_digest(
                        &serde_json::to_value(set).map_err(|e| encode(&e))?,
                    )
                    .map_err(|e| encode(&e))?,
                ),
                None => None,
            },
            wasm: match &outcome.wasm {
                Some(report) => {
                    let mut v = serde_json::to_value(report).map_err(|e| encode(&e))?;
                    large_integers_as_strings(&mut v);
                    Some(v)
                }
                None => None,
            },
        };
        let egress = match &outcome.egress {
            Some(log) => Some(serde_json::to_value(log).map_err(|e| encode(&e))?),
            None => None,
        };
        self.attest(
            request,
            started_unix_ms,
            RunDescription {
                plan_sha256: &outcome.plan_sha256,
                tier: outcome.tier,
                backend: outcome.backend.name(),
                enforcement: &outcome.enforcement,
                egress: egress.as_ref(),
            },
            ended,
        )
    }

    /// Attests a run described piecewise (a background process at its end).
    pub fn attest(
        &self,
        request: &Value,
        started_unix_ms: u64,
        run: RunDescription<'_>,
        ended: tierbox_attest::Outcome,
    ) -> Result<SignedAttestation, AuditError> {
        let mut enforcement = serde_json::to_value(run.enforcement).map_err(|e| encode(&e))?;
        large_integers_as_strings(&mut enforcement);
        let egress = match run.egress {
            Some(decisions) => {
                let mut v = decisions.clone();
                large_integers_as_strings(&mut v);
                Some(egress_decisions_digest(&v).map_err(|e| encode(&e))?)
            }
            None => None,
        };
        let facts = RunFacts::new(
            run.plan_sha256.to_owned(),
            run.tier.to_string(),
            run.backend.to_owned(),
            enforcement,
            ended,
            egress,
        );
        self.record(
            request,
            started_unix_ms,
            now_unix_ms().max(started_unix_ms),
            Body::Run(Box::new(facts)),
        )
    }

    /// Records a rejected request in the audit log (a refusal is evidence too). Without
    /// a log there is nothing to do: the caller already has the rejection.
    pub fn attest_rejection(
        &self,
        request: &Value,
        rejection: &Rejection,
    ) -> Result<Option<SignedAttestation>, AuditError> {
        if self.log.is_none() {
            return Ok(None);
        }
        let now = now_unix_ms();
        let body = Body::Rejection {
            code: rejection.code().to_owned(),
            message: rejection.to_string(),
        };
        self.record(request, now, now, body).map(Some)
    }

    /// Records in the audit log that keeping the change set of run `run_id` (made for
    /// `owner`, on `request`) evicted `evicted`, older unapplied sets of the same owner: a
    /// `changes.evicted` event. Without a log, or with nothing evicted, there is nothing
    /// to do: the outcome lists them ([`Outcome::changes_evicted`]). Blocking I/O (fsync).
    pub fn record_evictions(
        &self,
        request: &Value,
        run_id: &str,
        owner: &str,
        evicted: &[crate::review::Evicted],
    ) -> Result<(), AuditError> {
        if self.log.is_none() || evicted.is_empty() {
            return Ok(());
        }
        let now = now_unix_ms();
        let body = Body::Event(tierbox_attest::Event::ChangesEvicted {
            run_id: run_id.to_owned(),
            owner: owner.to_owned(),
            evicted: evicted.to_vec(),
        });
        self.record(request, now, now, body).map(|_| ())
    }

    /// Records in the audit log that `owner` wrote `written` in `workspace` through the
    /// file face ([`crate::files`]), on `request`: a `file.written` event. Without a log
    /// there is nothing to do. Blocking I/O (fsync).
    pub fn record_file_written(
        &self,
        request: &Value,
        workspace: &Path,
        owner: &str,
        written: &crate::files::FileWritten,
    ) -> Result<(), AuditError> {
        let event = tierbox_attest::Event::FileWritten {
            workspace: workspace.display().to_string(),
            path: written.path.clone(),
            bytes_written: written.bytes_written,
            size: written.size,
            sha256: written.sha256.clone(),
            append: written.appended,
            owner: owner.to_owned(),
            uid: written.uid,
            gid: written.gid,
            kept_as: written.kept_as.clone(),
        };
        self.record_event(request, now_unix_ms(), event)
    }

    /// Records `event`, something the server did on its own for `request` (a term's
    /// WebSocket attach or detach: [`tierbox_attest::Event::TermAttached`],
    /// [`tierbox_attest::Event::TermDetached`]), as an `event` record from
    /// `started_unix_ms` to now. Without a log there is nothing to do. Blocking I/O
    /// (fsync).
    pub fn record_event(
        &self,
        request: &Value,
        started_unix_ms: u64,
        event: tierbox_attest::Event,
    ) -> Result<(), AuditError> {
        if self.log.is_none() {
            return Ok(());
        }
        let now = now_unix_ms().max(started_unix_ms);
        self.record(request, started_unix_ms, now, Body::Event(event))
            .map(|_| ())
    }

    fn record(
        &self,
        request: &Value,
        started_unix_ms: u64,
        ended_unix_ms: u64,
        body: Body,
    ) -> Result<SignedAttestation, AuditError> {
        let mut request = request.clone();
        large_integers_as_strings(&mut request);
        let attestation = Attestation {
            version: tierbox_attest::ATTESTATION_VERSION,
            id: tierbox_attest::new_id().map_err(|e| encode(&e))?,
            started_unix_ms,
            ended_unix_ms,
            policy_digest: self.policy_digest.clone(),
            request_digest: request_digest(&request).map_err(|e| encode(&e))?,
            body,
        };
        let signed = tierbox_attest::sign(attestation, &self.key).map_err(|e| encode(&e))?;
        if let Some(log) = &self.log {
            let mut log = log
                .lock()
                .map_err(|_| AuditError::Encode("audit log lock poisoned".to_owned()))?;
            log.append(signed.clone())?;
        }
        Ok(signed)
    }
}

/// A run's denials as the attestation carries them (`None` when it was refused nothing).
/// The attested digest of a stream's redacted output: SHA-256 of its kept bytes
/// ([`crate::StreamOutput::bytes`]: `bytes_base64` when the text is lossy, else the text),
/// so the bytes a consumer decodes are the ones signed.
fn redacted_digest(s: &crate::StreamOutput) -> String {
    match s.bytes() {
        Ok(bytes) => tierbox_attest::sha256_hex(&bytes),
        // Never for an outcome the runner made; a digest nothing matches.
        Err(_) => String::new(),
    }
}

pub(crate) fn denials_value(
    denials: &[crate::denials::Denial],
) -> Result<Option<Value>, AuditError> {
    if denials.is_empty() {
        return Ok(None);
    }
    let mut v = serde_json::to_value(denials).map_err(|e| encode(&e))?;
    large_integers_as_strings(&mut v);
    Ok(Some(v))
}

fn encode(e: &dyn std::fmt::Display) -> AuditError {
    AuditError::Encode(e.to_string())
}
