//! Background processes: sandboxed runs that keep going between tool calls, addressed by
//! an unguessable handle, bounded in number and lifetime, and never outliving their owner
//! or the supervisor.
//!
//! - A handle is a 128-bit random id, never a pid: it cannot name a process the caller did
//!   not start, and every operation checks the caller owns it (another owner's handle is
//!   "not found", so handles cannot even be probed).
//! - `start` waits [`STARTUP_WINDOW_MS`]; a process that exits in that window is reported
//!   as a failure with its output, not as a handle.
//! - Output is drained continuously into a ring of [`RING_BYTES`] per stream, read by
//!   absolute offset: a chatty server never blocks on a full pipe.
//! - Status is read from the run's pidfd, so a process that has exited (a zombie not yet
//!   reaped) is never reported as running.
//! - Lifetimes: `run_owned` processes end with their owner ([`BackgroundManager::end_owner`])
//!   or at their lifetime; `detached` ones at their lifetime (default and maximum from the
//!   policy's `[background]`). Every process is launched from the supervisor's launcher
//!   thread with `PR_SET_PDEATHSIG`, so it dies with the supervisor.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use tierbox_policy::plan::Plan;
use tierbox_policy::{Lifetime, Rejection};
use tierbox_redact::Redactor;
use tierbox_sandbox::contract::Ending;
use tierbox_sandbox::contract::LaunchOptions;
use tierbox_sandbox::contract::process;
use tokio::io::AsyncWriteExt;
use tokio::sync::Notify;

use crate::audit::{Auditor, RunDescription};
use crate::outcome::{LimitHit, signal_name};
use crate::ring::{OutputChunk, OutputRing, RING_BYTES, ShownRing};
use tierbox_sandbox::contract::RefusalLog;

use crate::supervisor::{
    self, DRAIN_TIMEOUT_MS, EndCause, RunError, RunGuard, RunOptions, TERM_GRACE_MS, dup, end_tree,
    ensure_state_dir, exited, kill_tree, launch_in, new_run_id, read_stream,
};

/// How long `start` watches a new background process before returning its handle, in
/// milliseconds. A process that exits within it is a failed start, reported with its
/// output.
pub const STARTUP_WINDOW_MS: u64 = 200;

pub use tierbox_policy::handle::{MAX_OUTPUT_READ_BYTES, Stream};

/// How long the record (status and output) of an ended process is kept for its owner
/// (10 min); see also [`MAX_ENDED_PER_OWNER`]. Bounds the memory a long-running server
/// spends on processes nobody will ask about again.
pub const ENDED_RETENTION: Duration = Duration::from_secs(10 * 60);

/// Most ended-process records kept per owner; the oldest go first.
pub const MAX_ENDED_PER_OWNER: usize = 16;

/// Time allowed, beyond the TERM grace and the drain, for a watcher to reap the run,
/// release its cgroup and sign its attestation before a status call stops waiting for
/// the end to be recorded, in milliseconds.
pub const END_RECORD_MARGIN_MS: u64 = 1000;

/// Longest a `write_stdin` waits for the process to make room in its stdin pipe.
pub const STDIN_WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a background process is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BackgroundState {
    /// Running.
    Running,
    /// Exited by itself (see `exit_code` / `signal`).
    Exited,
    /// Killed on request (`kill`, or its owner ended).
    Killed,
    /// Killed at the end of its lifetime.
    Expired,
}

/// What a caller sees of a background process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BackgroundStatus {
    /// The handle.
    pub id: String,
    /// State.
    pub state: BackgroundState,
    /// Exit code, once exited.
    pub exit_code: Option<i32>,
    /// Signal number, once killed by a signal.
    pub signal: Option<i32>,
    /// Signal name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal_name: Option<String>,
    /// argv.
    pub argv: Vec<String>,
    /// Lifetime mode.
    pub lifetime: Lifetime,
    /// Lifetime bound, in milliseconds from the start.
    pub lifetime_ms: u64,
    /// Start time, milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// Tier (serialised as `"b"`, `"c"`).
    pub tier: tierbox_policy::Tier,
    /// Backend.
    pub backend: tierbox_policy::enforcement::BackendId,
    /// Bytes of stdout so far, as reads count them (after redaction, when the run
    /// redacts).
    pub stdout_bytes: u64,
    /// Bytes of stderr so far, as reads count them.
    pub stderr_bytes: u64,
    /// The signed attestation, once the process has ended (see `docs/attestation.md`;
    /// its redacted-output digests cover the bytes still in the ring at the end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation: Option<tierbox_attest::SignedAttestation>,
    /// The process ended but its attestation could not be made or logged: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_error: Option<String>,
    /// The sandbox itself failed (its pid 1 died before reporting how the program ended):
    /// what happened; `exit_code` and `signal` are then `null`. As
    /// [`crate::Outcome::sandbox_failure`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_failure: Option<String>,
    /// Overlay (review) mode, once the process has ended: what it changed in the
    /// workspace, kept for review under the process's id ([`crate::Outcome::changes`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<crate::changes::ChangeSet>,
    /// [`crate::Outcome::changes_error`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes_error: Option<String>,
    /// [`crate::Outcome::changes_evicted`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes_evicted: Vec<crate::review::Evicted>,
    /// A scratch filesystem filled up (`limits.disk_bytes`): `"disk"`; the memory limit's
    /// kill: `"memory"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_hit: Option<crate::LimitHit>,
    /// Once ended: what it was refused ([`crate::Outcome::denials`]; a background process
    /// has no egress proxy, so these are its limits and its landlock and seccomp
    /// refusals).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub denials: Vec<crate::denials::Denial>,
    /// Once ended: for each layer, whether its refusals were recorded for this process,
    /// and how, or why not ([`tierbox_policy::Enforcement::denial_reports`]).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub denial_reports: std::collections::BTreeMap<
        tierbox_policy::enforcement::DenialLayer,
        tierbox_policy::LayerReport,
    >,
    /// Once ended: each published port and host port, with what it carried
    /// ([`crate::Outcome::reach`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reach: Vec<tierbox_egress::reach::RelayReport>,
    /// The host unix sockets the process can connect to ([`crate::Outcome::unix_sockets`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unix_sockets: Vec<crate::outcome::HostSocket>,
}

/// What a background run is attested with when it ends.
#[derive(Debug, Clone)]
pub struct Seal {
    /// Signs and logs.
    pub auditor: Arc<Auditor>,
    /// The request as JSON (for its digest).
    pub request: serde_json::Value,
    /// When the request was accepted, unix milliseconds.
    pub started_unix_ms: u64,
}

struct SealFacts {
    seal: Seal,
    plan_sha256: String,
    enforcement: tierbox_policy::Enforcement,
}

/// A started background process: its status and what it printed during the startup
/// window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BackgroundHandle {
    /// Status at the end of the startup window.
    pub status: BackgroundStatus,
    /// stdout written during the startup window, as text (invalid UTF-8 replaced with
    /// U+FFFD).
    pub startup_stdout: String,
    /// Those stdout bytes exactly (standard base64), present exactly when
    /// `startup_stdout` is lossy ([`crate::wire`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_stdout_base64: Option<String>,
    /// stderr written during the startup window, as text.
    pub startup_stderr: String,
    /// Those stderr bytes exactly, present exactly when `startup_stderr` is lossy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_stderr_base64: Option<String>,
}

/// Why a background operation failed.
#[derive(Debug, thiserror::Error)]
pub enum BackgroundError {
    /// The run could not be validated or launched.
    #[error(transparent)]
    Run(#[from] RunError),
    /// Too many live background processes.
    #[error("{scope} has {live} live background processes, the policy's maximum is {max}")]
    Limit {
        /// `"this owner"` or `"the runner"`.
        scope: String,
        /// Live processes.
        live: usize,
        /// The cap.
        max: u32,
    },
    /// No such handle for this owner.
    #[error("no background process {id} belongs to this caller")]
    NotFound {
        /// The handle asked for.
        id: String,
    },
    /// The process exited during the startup window.
    #[error("the background process exited during its {STARTUP_WINDOW_MS} ms startup window")]
    ExitedDuringStartup(Box<BackgroundHandle>),
    /// stdin is closed or the process has ended.
    #[error("stdin of {id} is not writable: {reason}")]
    Stdin {
        /// The handle.
        id: String,
        /// Why.
        reason: String,
    },
}

impl BackgroundError {
    /// Stable machine code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Run(RunError::Rejected(r)) => r.code(),
            Self::Run(RunError::Audit(_)) => "audit.unavailable",
            Self::Run(_) => "run.failed",
            Self::Limit { .. } => "background.limit",
            Self::NotFound { .. } => "background.not_found",
            Self::ExitedDuringStartup(_) => "background.exited_during_startup",
            Self::Stdin { .. } => "background.stdin",
        }
    }
}

struct Ended {
    at: Instant,
    state: BackgroundState,
    code: Option<i32>,
    signal: Option<i32>,
    sandbox_failure: Option<String>,
    /// The change set (overlay mode), its error, the limit hit, the denials.
    review: crate::review::EndReport,
}

/// One background process.
struct Entry {
    id: String,
    owner: String,
    argv: Vec<String>,
    lifetime: Lifetime,
    lifetime_ms: u64,
    started_unix_ms: u64,
    tier: tierbox_policy::Tier,
    backend: tierbox_policy::enforcement::BackendId,
    stdout: Arc<Mutex<OutputRing>>,
    stderr: Arc<Mutex<OutputRing>>,
    stdin: tokio::sync::Mutex<Option<tokio::net::unix::pipe::Sender>>,
    /// The host unix sockets the process can connect to.
    unix_sockets: Vec<crate::outcome::HostSocket>,
    /// A term's terminal ([`crate::term`]): its output goes to `stdout`, its input is
    /// written here instead of `stdin`.
    terminal: Option<Arc<crate::term::TermIo>>,
    /// The run's top process (for the zombie check; the watcher reaps it).
    pidfd: OwnedFd,
    redactor: Option<Redactor>,
    stop: Notify,
    end: Mutex<Option<Ended>>,
    ended: Notify,
    /// The watcher has seen the end coming (exit, kill or expiry) and is recording it.
    ending: std::sync::atomic::AtomicBool,
    seal: Option<SealFacts>,
    attestation: Mutex<Option<Result<tierbox_attest::SignedAttestation, String>>>,
}

impl Entry {
    fn ended(&self) -> Option<(BackgroundState, Option<i32>, Option<i32>)> {
        let end = self.end.lock().ok()?;
        end.as_ref().map(|e| (e.state, e.code, e.signal))
    }

    fn sandbox_failure(&self) -> Option<String> {
        let end = self.end.lock().ok()?;
        end.as_ref().and_then(|e| e.sandbox_failure.clone())
    }

    /// The change set, its error, the limit hit and the denials, once ended.
    fn review(&self) -> crate::review::EndReport {
        self.end
            .lock()
            .ok()
            .and_then(|end| end.as_ref().map(|e| e.review.clone()))
            .unwrap_or_default()
    }

    async fn wait_end(&self) {
        loop {
            let notified = self.ended.notified();
            if self.ended().is_some() {
                return;
            }
            notified.await;
        }
    }

    fn status(&self) -> BackgroundStatus {
        let (state, exit_code, signal) =
            self.ended()
                .unwrap_or((BackgroundState::Running, None, None));
        let total = |r: &Arc<Mutex<OutputRing>>| r.lock().map(|r| r.total()).unwrap_or(0);
        let crate::review::EndReport {
            changes,
            changes_error,
            changes_evicted,
            limit_hit,
            denials,
            denial_reports,
            reach,
        } = self.review();
        BackgroundStatus {
            id: self.id.clone(),
            state,
            exit_code,
            signal,
            signal_name: signal.map(signal_name),
            argv: self.argv.clone(),
            lifetime: self.lifetime,
            lifetime_ms: self.lifetime_ms,
            started_unix_ms: self.started_unix_ms,
            tier: self.tier,
            backend: self.backend,
            stdout_bytes: total(&self.stdout),
            stderr_bytes: total(&self.stderr),
            attestation: self.attestation_field(|a| a.as_ref().ok().cloned()),
            audit_error: self.attestation_field(|a| a.as_ref().err().cloned()),
            sandbox_failure: self.sandbox_failure(),
            changes,
            changes_error,
            changes_evicted,
            limit_hit,
            denials,
            denial_reports,
            reach,
            unix_sockets: self.unix_sockets.clone(),
        }
    }

    fn attestation_field<T>(
        &self,
        f: impl FnOnce(&Result<tierbox_attest::SignedAttestation, String>) -> Option<T>,
    ) -> Option<T> {
        self.attestation.lock().ok()?.as_ref().and_then(f)
    }

    /// Signs (and logs) the attestation of the ended run, with what its end report says
    /// (the limit it hit, its denials and how each layer's were read); blocking I/O
    /// (fsync).
    fn seal(
        &self,
        started: Instant,
        (code, signal): (Option<i32>, Option<i32>),
        sandbox_failure: Option<String>,
        end: &crate::review::EndReport,
    ) {
        let Some(facts) = &self.seal else { return };
        let denials = match crate::audit::denials_value(&end.denials) {
            Ok(d) => d,
            Err(e) => {
                if let Ok(mut slot) = self.attestation.lock() {
                    *slot = Some(Err(e.to_string()));
                }
                return;
            }
        };
        let mut enforcement = facts.enforcement.clone();
        enforcement.denial_reports = end.denial_reports.clone();
        let ring = |r: &Arc<Mutex<OutputRing>>| {
            r.lock()
                .map(|r| {
                    // Kept redacted already (`ShownRing`).
                    (r.sha256(), tierbox_attest::sha256_hex(&r.retained()))
                })
                .unwrap_or_default()
        };
        let (stdout_sha256, redacted_stdout_sha256) = ring(&self.stdout);
        let (stderr_sha256, redacted_stderr_sha256) = ring(&self.stderr);
        let ended = tierbox_attest::Outcome {
            exit_code: code,
            signal,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            limit_hit: end.limit_hit.map(|l| l.name().to_owned()),
            stdout_sha256,
            stderr_sha256,
            redacted_stdout_sha256,
            redacted_stderr_sha256,
            // A background process's stdin is written call by call, not recorded whole.
            stdin_sha256: None,
            sandbox_failure,
            run_id: self.id.clone(),
            timed_out: false,
            quota_exceeded: false,
            wasm: None,
            changes_sha256: None,
            reach: match end.reach.is_empty() {
                true => None,
                false => serde_json::to_value(&end.reach).ok(),
            },
            unix_sockets: match self.unix_sockets.is_empty() {
                true => None,
                false => serde_json::to_value(&self.unix_sockets).ok(),
            },
            denials,
        };
        let run = RunDescription {
            plan_sha256: &facts.plan_sha256,
            tier: self.tier,
            backend: self.backend.name(),
            enforcement: &enforcement,
            egress: None,
        };
        let result = facts
            .seal
            .auditor
            .attest(&facts.seal.request, facts.seal.started_unix_ms, run, ended)
            .map_err(|e| e.to_string())
            .and_then(|signed| {
                facts
                    .seal
                    .auditor
                    .record_evictions(
                        &facts.seal.request,
                        &self.id,
                        &self.owner,
                        &end.changes_evicted,
                    )
                    .map(|()| signed)
                    .map_err(|e| e.to_string())
            });
        if let Ok(mut slot) = self.attestation.lock() {
            *slot = Some(result);
        }
    }

    /// The status, never "running" for a process that has already exited: when the pidfd
    /// is readable the end is being recorded, and this waits (bounded by the drain
    /// timeout) for it.
    async fn current_status(&self) -> BackgroundStatus {
        let ending = self.ending.load(std::sync::atomic::Ordering::Acquire);
        if self.ended().is_none() && (ending || self.has_exited()) {
            let _ = tokio::time::timeout(
                Duration::from_millis(DRAIN_TIMEOUT_MS + TERM_GRACE_MS + END_RECORD_MARGIN_MS),
                self.wait_end(),
            )
            .await;
        }
        self.status()
    }

    /// The record is being dropped: its spill files go now.
    fn discard_output(&self) {
        for ring in [&self.stdout, &self.stderr] {
            if let Ok(mut r) = ring.lock() {
                r.discard_spill();
            }
        }
    }

    fn has_exited(&self) -> bool {
        process::pidfd_has_exited(&self.pidfd)
    }

    fn read(&self, stream: Stream, offset: u64, max: usize) -> OutputChunk {
        let ring = match stream {
            Stream::Stdout => &self.stdout,
            Stream::Stderr => &self.stderr,
        };
        // The ring holds the stream already redacted (`ShownRing`): any offset and size
        // returns only what may be shown.
        match ring.lock() {
            Ok(r) => r.read(offset, max.min(MAX_OUTPUT_READ_BYTES)),
            Err(_) => OutputRing::new(0).read(offset, 0),
        }
    }
}

/// The background processes of one supervisor.
pub struct BackgroundManager {
    /// Bytes kept per stream ([`RING_BYTES`]; a term's [`crate::term::TERM_RING_BYTES`]).
    ring_bytes: usize,
    max_per_owner: u32,
    max_total: u32,
    options: RunOptions,
    table: Mutex<HashMap<String, Arc<Entry>>>,
}

impl std::fmt::Debug for BackgroundManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackgroundManager")
            .field("max_per_owner", &self.max_per_owner)
            .field("max_total", &self.max_total)
            .finish_non_exhaustive()
    }
}

impl BackgroundManager {
    /// A manager with the policy's caps (`background.max_per_owner`, `max_total`).
    pub fn new(max_per_owner: u32, max_total: u32, options: RunOptions) -> Self {
        Self {
            ring_bytes: RING_BYTES,
            max_per_owner,
            max_total,
            options,
            table: Mutex::new(HashMap::new()),
        }
    }

    /// A manager whose streams keep `ring_bytes` each (a term's).
    pub(crate) fn with_ring_bytes(mut self, ring_bytes: usize) -> Self {
        self.ring_bytes = ring_bytes;
        self
    }

    /// A stream's ring, with a spill file under `<state>/spill` when the policy asks
    /// ([`crate::spill`]: refused, and said so in each read's `spill_error`, when the
    /// cap `total_bytes` on all spill files is reached).
    fn ring(
        &self,
        id: &str,
        stream: Stream,
        spill_bytes: u64,
        total_bytes: u64,
    ) -> Result<OutputRing, RunError> {
        let ring = OutputRing::new(self.ring_bytes);
        if spill_bytes == 0 {
            return Ok(ring);
        }
        let dir = crate::spill::SpillDir::open(&self.options.state_dir)
            .map_err(|e| e.into_run_error("open the spill directory"))?;
        match dir.create(
            &format!("bg-{id}.{}", stream.as_str()),
            spill_bytes,
            "background.spill_bytes",
            total_bytes,
        ) {
            Ok(file) => Ok(ring.with_spill(file)),
            Err(e @ crate::spill::SpillError::Full { .. }) => {
                Ok(ring.with_spill_refused(e.to_string()))
            }
            Err(e) => Err(e.into_run_error("create the background spill file")),
        }
    }

    /// Drops ended records past [`ENDED_RETENTION`] and beyond [`MAX_ENDED_PER_OWNER`].
    fn prune(&self) {
        let Ok(mut t) = self.table.lock() else {
            return;
        };
        let now = Instant::now();
        let mut ended: Vec<(String, String, Instant)> = t
            .values()
            .filter_map(|e| {
                let at = e.end.lock().ok()?.as_ref()?.at;
                Some((e.owner.clone(), e.id.clone(), at))
            })
            .collect();
        // Newest first, so each owner's first MAX_ENDED_PER_OWNER are the ones kept.
        ended.sort_by_key(|e| std::cmp::Reverse(e.2));
        let mut kept: HashMap<String, usize> = HashMap::new();
        for (owner, id, at) in ended {
            let n = kept.entry(owner).or_default();
            *n += 1;
            if (*n > MAX_ENDED_PER_OWNER || now.duration_since(at) > ENDED_RETENTION)
                && let Some(e) = t.remove(&id)
            {
                e.discard_output();
            }
        }
    }

    fn entries(&self) -> Vec<Arc<Entry>> {
        self.table
            .lock()
            .map(|t| t.values().cloned().collect())
            .unwrap_or_default()
    }

    /// One of `owner`'s terms: its terminal, whether it has ended, and its output so far
    /// (bytes, as reads count them); `NotFound` for another owner's id.
    pub(crate) fn term_of(
        &self,
        owner: &str,
        id: &str,
    ) -> Result<(Arc<crate::term::TermIo>, bool, u64), BackgroundError> {
        let entry = self.entry(owner, id)?;
        let terminal = entry
            .terminal
            .clone()
            .ok_or_else(|| BackgroundError::NotFound { id: id.to_owned() })?;
        let total = entry.stdout.lock().map(|r| r.total()).unwrap_or(0);
        Ok((terminal, entry.ended().is_some(), total))
    }

    fn entry(&self, owner: &str, id: &str) -> Result<Arc<Entry>, BackgroundError> {
        self.table
            .lock()
            .ok()
            .and_then(|t| t.get(id).cloned())
            .filter(|e| e.owner == owner)
            .ok_or_else(|| BackgroundError::NotFound { id: id.to_owned() })
    }

    /// Starts `plan` (validated with `background: true`) for `owner` and returns its
    /// handle after the startup window.
    ///
    /// Must be awaited inside a tokio runtime with I/O and time enabled; the process is
    /// supervised by a task on that runtime until it ends.
    pub async fn start(
        &self,
        owner: &str,
        plan: &Plan,
    ) -> Result<BackgroundHandle, BackgroundError> {
        self.start_sealed(owner, plan, None).await
    }

    /// Refuses a start that would pass `max_per_owner` live processes of `owner`, or
    /// `max_total` of the runner's.
    fn check_room(&self, owner: &str) -> Result<(), BackgroundError> {
        let live: Vec<Arc<Entry>> = self
            .entries()
            .into_iter()
            .filter(|e| e.ended().is_none())
            .collect();
        let mine = live.iter().filter(|e| e.owner == owner).count();
        if mine >= self.max_per_owner as usize {
            return Err(BackgroundError::Limit {
                scope: "this owner".to_owned(),
                live: mine,
                max: self.max_per_owner,
            });
        }
        if live.len() >= self.max_total as usize {
            return Err(BackgroundError::Limit {
                scope: "the runner".to_owned(),
                live: live.len(),
                max: self.max_total,
            });
        }
        Ok(())
    }

    /// [`BackgroundManager::start`], attesting the run with `seal` when it ends (the
    /// attestation then appears in its status).
    pub async fn start_sealed(
        &self,
        owner: &str,
        plan: &Plan,
        seal: Option<Seal>,
    ) -> Result<BackgroundHandle, BackgroundError> {
        self.start_with(owner, plan, seal, None).await
    }

    /// [`BackgroundManager::start_sealed`], with the program on a terminal of `terminal`'s
    /// size when given (a term, [`crate::term`]).
    pub(crate) async fn start_with(
        &self,
        owner: &str,
        plan: &Plan,
        seal: Option<Seal>,
        terminal: Option<tierbox_sandbox::contract::TermSize>,
    ) -> Result<BackgroundHandle, BackgroundError> {
        let bg = plan.background.ok_or_else(|| {
            RunError::Launch("the plan was not validated with background: true".to_owned())
        })?;
        self.prune();
        self.check_room(owner)?;
        let mut plan = plan.clone();
        // Always a stdin pipe (or the terminal), so `write_stdin` can reach the process
        // later.
        let initial_stdin = match terminal {
            Some(_) => plan.stdin.take().unwrap_or_default(),
            None => plan.stdin.replace(Vec::new()).unwrap_or_default(),
        };
        let facts = tierbox_sandbox::contract::host_facts();
        let selection = tierbox_sandbox::contract::select(&plan, facts).map_err(RunError::from)?;
        let tier = selection.tier;
        refuse_network_edge(&plan, tier)?;
        let id = new_run_id();
        ensure_state_dir(&self.options.state_dir)?;
        crate::spill::sweep_expired(&self.options.state_dir, plan.output.spill_keep_secs);
        let launch_opts = LaunchOptions {
            run_id: id.clone(),
            tmp_base: self.options.state_dir.join("tmp"),
            // The process dies with the supervisor, not the runtime thread that started it.
            launcher_thread: true,
            terminal,
            trust: None,
        };
        // A published port another process holds refuses the start.
        let published = crate::reach::bind_published(&plan).map_err(RunError::Rejected)?;
        let mut launched = launch_in(tier, &plan, &launch_opts)?;
        let terminal = take_terminal(&mut launched)?;
        let pidfd = dup(launched.pidfd());
        let stdin = launched
            .take_stdin()
            .and_then(|fd| tokio::net::unix::pipe::Sender::from_owned_fd(fd).ok());
        let mut guard = RunGuard {
            launched,
            done: false,
        };
        // From here the guard owns the process: any early return kills it.
        let pidfd = pidfd?;
        // Published ports and host ports are relayed for the process's life.
        let relays = crate::reach::start(&plan, &mut guard.launched, published)?;
        // chmod calls and the refusals the filter hands off are answered for the process's
        // life (an unserved listener would leave those calls waiting); a mediator that
        // cannot be set up refuses the start, as it fails a foreground run.
        let hand_off =
            supervisor::serve_hand_off(&plan, &mut guard.launched).map_err(|source| {
                RunError::Io {
                    what: "open the writable grants for chmod mediation",
                    source,
                }
            })?;
        let entry = Arc::new(Entry {
            id: id.clone(),
            owner: owner.to_owned(),
            argv: plan.argv.clone(),
            lifetime: bg.lifetime,
            lifetime_ms: bg.lifetime_ms,
            started_unix_ms: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                .unwrap_or(0),
            tier: guard.launched.tier(),
            backend: guard.launched.enforcement().backend,
            stdout: Arc::new(Mutex::new(self.ring(
                &id,
                Stream::Stdout,
                bg.spill_bytes,
                plan.output.spill_total_bytes,
            )?)),
            stderr: Arc::new(Mutex::new(self.ring(
                &id,
                Stream::Stderr,
                bg.spill_bytes,
                plan.output.spill_total_bytes,
            )?)),
            stdin: tokio::sync::Mutex::new(stdin),
            terminal,
            pidfd,
            unix_sockets: crate::outcome::HostSocket::of_plan(&plan).0,
            redactor: plan
                .redaction
                .enabled
                .then(|| Redactor::new(&plan.redaction.sensitive_values)),
            stop: Notify::new(),
            end: Mutex::new(None),
            ended: Notify::new(),
            ending: std::sync::atomic::AtomicBool::new(false),
            seal: seal.map(|seal| SealFacts {
                seal,
                plan_sha256: tierbox_attest::plan_digest(&plan),
                enforcement: tierbox_policy::Enforcement {
                    passed_over: selection.passed_over,
                    ..guard.launched.enforcement().clone()
                },
            }),
            attestation: Mutex::new(None),
        });
        let deadline = Instant::now() + Duration::from_millis(bg.lifetime_ms);
        let review = Review {
            plan: plan.clone(),
            state_dir: self.options.state_dir.clone(),
        };
        tokio::spawn(watch(
            entry.clone(),
            guard,
            deadline,
            review,
            (hand_off, relays),
        ));
        if !initial_stdin.is_empty() {
            let _ = self.write_to(&entry, &initial_stdin, false).await;
        }
        if let Ok(mut t) = self.table.lock() {
            t.insert(id.clone(), entry.clone());
        }
        let _ =
            tokio::time::timeout(Duration::from_millis(STARTUP_WINDOW_MS), entry.wait_end()).await;
        let status = entry.current_status().await;
        let out = entry.read(Stream::Stdout, 0, MAX_OUTPUT_READ_BYTES);
        let err = entry.read(Stream::Stderr, 0, MAX_OUTPUT_READ_BYTES);
        let handle = BackgroundHandle {
            startup_stdout: out.text,
            startup_stdout_base64: out.bytes_base64,
            startup_stderr: err.text,
            startup_stderr_base64: err.bytes_base64,
            status,
        };
        if handle.status.state != BackgroundState::Running {
            if let Ok(mut t) = self.table.lock()
                && let Some(e) = t.remove(&id)
            {
                e.discard_output();
            }
            return Err(BackgroundError::ExitedDuringStartup(Box::new(handle)));
        }
        Ok(handle)
    }

    /// The status of one of `owner`'s processes.
    pub async fn status(&self, owner: &str, id: &str) -> Result<BackgroundStatus, BackgroundError> {
        Ok(self.entry(owner, id)?.current_status().await)
    }

    /// Up to `max` bytes of `stream` from absolute `offset` on (at most
    /// [`MAX_OUTPUT_READ_BYTES`]). When the run redacts, the stream is kept redacted as it
    /// arrives, a line at a time, so every read — at any offset, of any size — shows only
    /// redacted text; offsets count the bytes of that stream, and a line is readable once
    /// it is complete (its newline, 16 KiB without one, or the end of the process).
    pub fn output(
        &self,
        owner: &str,
        id: &str,
        stream: Stream,
        offset: u64,
        max: usize,
    ) -> Result<OutputChunk, BackgroundError> {
        Ok(self.entry(owner, id)?.read(stream, offset, max))
    }

    /// Writes `data` to the process's stdin; `close` closes it afterwards. Waits at most
    /// [`STDIN_WRITE_TIMEOUT`] for room in the pipe.
    pub async fn write_stdin(
        &self,
        owner: &str,
        id: &str,
        data: &[u8],
        close: bool,
    ) -> Result<usize, BackgroundError> {
        let entry = self.entry(owner, id)?;
        self.write_to(&entry, data, close).await
    }

    async fn write_to(
        &self,
        entry: &Entry,
        data: &[u8],
        close: bool,
    ) -> Result<usize, BackgroundError> {
        let err = |reason: &str| BackgroundError::Stdin {
            id: entry.id.clone(),
            reason: reason.to_owned(),
        };
        if entry.ended().is_some() {
            return Err(err("the process has ended"));
        }
        if let Some(terminal) = &entry.terminal {
            return terminal
                .write(data, close, STDIN_WRITE_TIMEOUT)
                .await
                .map_err(|e| err(&e.to_string()));
        }
        let mut stdin = entry.stdin.lock().await;
        let Some(tx) = stdin.as_mut() else {
            return Err(err("stdin was closed"));
        };
        match tokio::time::timeout(STDIN_WRITE_TIMEOUT, tx.write_all(data)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(err(&e.to_string())),
            Err(_) => return Err(err("the process did not read its stdin in time")),
        }
        if close {
            *stdin = None;
        }
        Ok(data.len())
    }

    /// Kills the whole tree of one of `owner`'s processes and returns its final status.
    pub async fn kill(&self, owner: &str, id: &str) -> Result<BackgroundStatus, BackgroundError> {
        let entry = self.entry(owner, id)?;
        entry.stop.notify_one();
        entry.wait_end().await;
        Ok(entry.status())
    }

    /// `owner`'s processes, running or ended (ended ones are kept until `forget_ended`).
    pub async fn list(&self, owner: &str) -> Vec<BackgroundStatus> {
        self.prune();
        let mut out = Vec::new();
        for e in self.entries().into_iter().filter(|e| e.owner == owner) {
            out.push(e.current_status().await);
        }
        out.sort_by(|a, b| {
            a.started_unix_ms
                .cmp(&b.started_unix_ms)
                .then(a.id.cmp(&b.id))
        });
        out
    }

    /// The owner's session or run has ended: its `run_owned` processes are killed (their
    /// whole trees) and awaited; `detached` ones keep running to their lifetime. The
    /// records of its ended processes are dropped (nobody can ask for them any more).
    pub async fn end_owner(&self, owner: &str) {
        let mine: Vec<Arc<Entry>> = self
            .entries()
            .into_iter()
            .filter(|e| e.owner == owner && e.lifetime == Lifetime::RunOwned)
            .collect();
        for e in &mine {
            e.stop.notify_one();
        }
        for e in mine {
            e.wait_end().await;
        }
        if let Ok(mut t) = self.table.lock() {
            t.retain(|_, e| {
                let keep = e.owner != owner || e.ended().is_none();
                if !keep {
                    e.discard_output();
                }
                keep
            });
        }
    }

    /// Kills every background process and waits for them (graceful shutdown).
    pub async fn shutdown(&self) {
        let all = self.entries();
        for e in &all {
            e.stop.notify_one();
        }
        for e in all {
            e.wait_end().await;
        }
    }

    /// Drops the records of ended processes (their output included).
    pub fn forget_ended(&self) {
        if let Ok(mut t) = self.table.lock() {
            t.retain(|_, e| {
                let keep = e.ended().is_none();
                if !keep {
                    e.discard_output();
                }
                keep
            });
        }
    }
}

/// What the end of a background process needs for its scratch filesystems: the plan
/// (workspace, disk limit, how long changes are kept) and the state directory.
struct Review {
    plan: Plan,
    state_dir: std::path::PathBuf,
}

/// Supervises one background process to its end: exit, kill request, or lifetime.
/// The tasks that read the process's stdout and stderr (or its terminal) into the rings,
/// which keep the newest output and never stop a stream: the quota signal `read_stream`
/// takes is never raised for a background process.
fn spawn_readers(
    entry: &Arc<Entry>,
    l: &tierbox_sandbox::contract::RunningSandbox,
) -> Vec<tokio::task::JoinHandle<()>> {
    let quota = Arc::new(Notify::new());
    // Each ring keeps the stream as reads show it: redacted piece by piece at arrival.
    let reader = |fd, ring: &Arc<Mutex<OutputRing>>| {
        let sink = Arc::new(ShownRing::new(ring.clone(), entry.redactor.clone()));
        let quota = quota.clone();
        tokio::spawn(async move {
            read_stream(fd, sink.clone(), quota).await;
            sink.finish();
        })
    };
    let mut readers: Vec<_> = [
        dup(l.stdout()).map(|fd| reader(fd, &entry.stdout)),
        dup(l.stderr()).map(|fd| reader(fd, &entry.stderr)),
    ]
    .into_iter()
    .flatten()
    .collect();
    // A term's output: the terminal, into the stdout ring.
    if let Some(t) = &entry.terminal {
        let sink = Arc::new(ShownRing::new(entry.stdout.clone(), entry.redactor.clone()));
        readers.push(crate::term::spawn_reader(t.clone(), sink));
    }
    readers
}

async fn watch(
    entry: Arc<Entry>,
    mut guard: RunGuard,
    deadline: Instant,
    review: Review,
    ((mediator, refusals), relays): (
        (Option<supervisor::AbortOnDrop>, Option<RefusalLog>),
        Option<tierbox_egress::reach::Relays>,
    ),
) {
    let started = Instant::now();
    let launched_at = SystemTime::now();
    let l = &mut guard.launched;
    let readers = spawn_readers(&entry, l);
    let pidfd = l.watch_exit().ok();
    let state = match &pidfd {
        Some(p) => tokio::select! {
            _ = exited(p) => BackgroundState::Exited,
            _ = entry.stop.notified() => BackgroundState::Killed,
            _ = tokio::time::sleep_until(deadline.into()) => BackgroundState::Expired,
        },
        None => BackgroundState::Killed,
    };
    entry
        .ending
        .store(true, std::sync::atomic::Ordering::Release);
    let cause = match state {
        BackgroundState::Exited => EndCause::Exited,
        BackgroundState::Expired => EndCause::Deadline,
        _ => EndCause::Stopped,
    };
    let ended = match &pidfd {
        Some(p) => end_tree(l, p, cause).await.ok(),
        None => None,
    };
    if ended.is_none() {
        // No exit to collect (the pidfd could not be polled): the tree dies regardless.
        kill_tree(l);
    }
    let oom = l.stats().is_some_and(|s| s.oom_kills > 0);
    let limit = oom.then_some(LimitHit::Memory);
    let mut sandbox_failure = None;
    let exit = match ended {
        Some(Ending {
            exit,
            pid1_unreported: Some(pid1),
        }) => {
            sandbox_failure =
                supervisor::sandbox_failure(&pid1, state == BackgroundState::Exited, limit);
            sandbox_failure.is_none().then_some(exit)
        }
        Some(Ending {
            mut exit,
            pid1_unreported: None,
        }) => {
            l.oom_kill_as_signal(oom, &mut exit);
            Some(exit)
        }
        None => None,
    };
    if l.cgroup().is_none() {
        kill_tree(l);
    }
    for reader in readers {
        let abort = reader.abort_handle();
        if tokio::time::timeout(Duration::from_millis(DRAIN_TIMEOUT_MS), reader)
            .await
            .is_err()
        {
            abort.abort();
        }
    }
    let run_for = supervisor::RunFor {
        state_dir: &review.state_dir,
        run_id: &entry.id,
        owner: &entry.owner,
    };
    let scratch =
        crate::review::settle_scratch(&review.plan, &mut guard.launched, &run_for, launched_at)
            .await;
    drop(mediator);
    let mut end_report = scratch.for_status(limit, &review.plan);
    if let Some(relays) = relays {
        end_report.reach = relays.finish().await;
    }
    end_report.denial_reports = supervisor::add_refusals(
        &review.plan,
        &mut guard.launched,
        refusals.map(|r| r.take()),
        started,
        &mut end_report.denials,
    )
    .await;
    let review = end_report;
    guard.finish();
    let (code, signal) = (
        exit.as_ref().and_then(|e| e.code),
        exit.as_ref().and_then(|e| e.signal),
    );
    // Attested before the end is published, so an ended status carries its attestation.
    match &entry.seal {
        // The audit log's fsync is slow: off the async threads.
        Some(facts) if facts.seal.auditor.has_log() => {
            let sealing = entry.clone();
            let failure = sandbox_failure.clone();
            let end = review.clone();
            let _ = tokio::task::spawn_blocking(move || {
                sealing.seal(started, (code, signal), failure, &end);
            })
            .await;
        }
        Some(_) => entry.seal(started, (code, signal), sandbox_failure.clone(), &review),
        None => {}
    }
    if let Ok(mut end) = entry.end.lock() {
        *end = Some(Ended {
            at: Instant::now(),
            state,
            code,
            signal,
            sandbox_failure,
            review,
        });
    }
    entry.ended.notify_waiters();
    if let Some(terminal) = &entry.terminal {
        terminal.ended();
    }
}

/// The run's terminal, registered with the runtime (`None`: it has pipes).
fn take_terminal(
    launched: &mut tierbox_sandbox::contract::RunningSandbox,
) -> Result<Option<Arc<crate::term::TermIo>>, RunError> {
    Ok(launched
        .take_terminal()
        .map(crate::term::TermIo::new)
        .transpose()
        .map_err(|source| RunError::Io {
            what: "register the run's terminal",
            source,
        })?
        .map(Arc::new))
}

/// What a background run cannot have in this build: the egress proxy is served for
/// foreground runs only (published ports and host ports are relayed for a background
/// process's life).
fn refuse_network_edge(plan: &Plan, tier: tierbox_policy::Tier) -> Result<(), BackgroundError> {
    if plan.network.needs_proxy() {
        return Err(RunError::Rejected(Rejection::TierUnsupported {
            tier,
            feature: "background processes with strict egress and an allowlist".to_owned(),
            reason: "the egress proxy is per foreground run in this build".to_owned(),
        })
        .into());
    }
    Ok(())
}
