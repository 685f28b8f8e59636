//! The supervisor: launches a Plan, enforces the deadline and the output quota, kills the
//! whole tree, drains the pipes with a bounded wait, and returns an [`Outcome`].
//!
//! Invariants:
//! - the call returns by `deadline + TERM_GRACE + DRAIN_TIMEOUT` at the latest, whatever
//!   the child and its descendants do (a grandchild holding stdout cannot stall it);
//! - partial output is always returned (timeout, quota, crash);
//! - after the direct child exits, nothing of the run survives: the cgroup is killed, the
//!   process group is killed, and — when the supervisor is a child subreaper — orphaned
//!   daemons that escaped the group with `setsid` are killed too;
//! - the direct child is reaped through its pidfd; no pid is ever signalled after it could
//!   have been reused.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tierbox_egress::{Proxy, ProxyConfig};
use tierbox_policy::plan::Plan;
use tierbox_policy::{Rejection, Tier};
use tierbox_redact::Redactor;
use tierbox_sandbox::contract::RefusalLog;
use tierbox_sandbox::contract::denials::Refusal;
use tierbox_sandbox::contract::host_facts;
use tierbox_sandbox::contract::process;
use tierbox_sandbox::contract::{Ending, RunningSandbox, read_exit_record};
use tierbox_sandbox::contract::{ExitInfo, LaunchError, LaunchOptions};
use tokio::io::AsyncReadExt;
use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;

use crate::capture::{CAPTURE_CHUNK_BYTES, Push, StreamCapture};
use crate::outcome::{LimitHit, Outcome, StreamOutput, Usage, signal_name};
use crate::stdin::{Forwarding, StdinReport, StdinSource};
use crate::stream::{OutputEvent, Tap, Tee};
use tierbox_policy::handle::Stream;

mod hand_off;
mod roots;

pub(crate) use hand_off::serve_hand_off;
use roots::LAUNCHING;
pub use roots::enable_subreaper;
pub(crate) use roots::{cleanup, kill_tree, register_root};

/// Grace between SIGTERM and SIGKILL when the deadline expires, in milliseconds. Long
/// enough for a test runner to flush its report, short enough to keep the call bounded.
pub const TERM_GRACE_MS: u64 = 1_000;

/// Longest wait for stdout/stderr to reach EOF once the tree is dead, in milliseconds.
/// Only a process outside the run's control (no cgroup, escaped the process group, no
/// subreaper) can keep a pipe open that long; the output read so far is returned.
pub const DRAIN_TIMEOUT_MS: u64 = 500;

/// Errors that are not the child's doing.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The request was refused before anything ran.
    #[error(transparent)]
    Rejected(#[from] Rejection),
    /// The run could not be started for a reason outside the sandbox's setup (the Tier A
    /// engine, a plan this call does not take).
    #[error("sandbox launch failed: {0}")]
    Launch(String),
    /// The sandbox could not be set up: the backend's own error, with what failed (the
    /// step in the child and its errno, what the supervisor was preparing, the native
    /// Tier C setup), for callers that act on it rather than print it.
    #[error("sandbox launch failed: {0}")]
    Sandbox(LaunchError),
    /// The attestation signer or the audit log the policy requires is unavailable, so
    /// nothing ran (or a rejection could not be recorded).
    #[error("audit: {0}")]
    Audit(String),
    /// Supervising the child failed.
    #[error("supervision failed: {what}: {source}")]
    Io {
        /// What failed.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
}

impl From<LaunchError> for RunError {
    fn from(e: LaunchError) -> Self {
        match e {
            LaunchError::Rejected(r) => RunError::Rejected(r),
            other => RunError::Sandbox(other),
        }
    }
}

/// Options of a run that are not part of the Plan.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// State directory: the run's private tmp and spill files go under it.
    pub state_dir: PathBuf,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            state_dir: default_state_dir(),
        }
    }
}

/// `$XDG_STATE_HOME/tierbox`, else `~/.local/state/tierbox`, else `/tmp/tierbox-<uid>`.
pub fn default_state_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("tierbox");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(h).join(".local/state/tierbox");
    }
    PathBuf::from(format!("/tmp/tierbox-{}", process::current_ids().0))
}

/// Mode of the state directory: the owner has everything; others may only traverse it,
/// because a run whose child has a different uid (the workspace owner) must reach its
/// private `TMPDIR` below it. Nothing in it is listable by others, and what must stay
/// private (spill files) lives in 0700 subdirectories.
pub const STATE_DIR_MODE: u32 = 0o711;

/// Mode of directories holding run output (spill files: [`crate::spill`]).
pub const PRIVATE_DIR_MODE: u32 = 0o700;

/// Creates the state directory (and missing parents) with [`STATE_DIR_MODE`], then
/// checks it is this user's to trust ([`tierbox_policy::trust::check_dir`]: ours or
/// root's and writable by nobody else, and so every directory above it). The check is
/// made once per directory and process.
pub(crate) fn ensure_state_dir(dir: &std::path::Path) -> Result<(), RunError> {
    use std::os::unix::fs::DirBuilderExt;
    static TRUSTED: Mutex<Vec<std::path::PathBuf>> = Mutex::new(Vec::new());
    if !dir.is_dir() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(STATE_DIR_MODE)
            .create(dir)
            .map_err(|source| RunError::Io {
                what: "create the state directory",
                source,
            })?;
    }
    let mut trusted = TRUSTED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if trusted.iter().any(|d| d == dir) {
        return Ok(());
    }
    tierbox_policy::trust::check_dir(dir, "the state directory").map_err(|e| RunError::Io {
        what: "trust the state directory",
        source: std::io::Error::new(std::io::ErrorKind::PermissionDenied, e),
    })?;
    trusted.push(dir.to_path_buf());
    Ok(())
}

/// A fresh 128-bit run id, hex encoded.
pub fn new_run_id() -> String {
    tierbox_attest::new_id().unwrap_or_else(|_| {
        // Not security relevant (the id names a cgroup and a directory); keep it unique.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        tierbox_attest::jcs::hex(&(t ^ u128::from(std::process::id())).to_le_bytes())
    })
}

/// Runs `plan` and supervises it to the end.
///
/// Must be awaited inside a tokio runtime with I/O and time enabled
/// (`Builder::enable_all()`); any flavour works. The sandboxed child is cloned on the
/// thread that polls this future, and it dies with that thread (`PR_SET_PDEATHSIG`), which
/// is always alive while the run is supervised. Dropping the future kills the run's whole
/// process tree.
pub async fn run_plan(plan: &Plan, opts: &RunOptions) -> Result<Outcome, RunError> {
    run_plan_tapped(plan, opts, None, &local_owner(), None).await
}

/// [`run_plan`] of a plan whose stdin is streamed ([`Plan::stdin_streamed`]: the request
/// had `stdin_stream: true`), forwarding `stdin` to the program as it arrives, up to the
/// plan's `limits.stdin_bytes` (see [`crate::stdin`]); with `events`, the output is sent
/// as it happens too ([`run_plan_streaming`]). The outcome's `stdin` says what the
/// program got.
pub async fn run_plan_with_stdin(
    plan: &Plan,
    opts: &RunOptions,
    stdin: StdinSource,
    events: Option<tokio::sync::mpsc::Sender<OutputEvent>>,
) -> Result<Outcome, RunError> {
    let tap = events.map(|tx| Arc::new(Tap::for_plan(tx, &plan.redaction, &plan.output)));
    run_plan_tapped(plan, opts, tap, &local_owner(), Some(stdin)).await
}

/// The stream of a run whose plan's stdin is streamed, and none for any other: a
/// mismatch is the caller's mistake, refused before anything runs.
pub(crate) fn check_stdin_source(
    streamed: bool,
    stdin: &Option<StdinSource>,
) -> Result<(), RunError> {
    match (streamed, stdin.is_some()) {
        (true, false) => Err(RunError::Launch(
            "the plan's stdin is streamed (stdin_stream) and the run was given no stream: \
             run it with Runner::execute_with_stdin or run_plan_with_stdin"
                .to_owned(),
        )),
        (false, true) => Err(RunError::Launch(
            "the run was given a stdin stream and its plan's stdin is not streamed: set \
             stdin_stream in the request"
                .to_owned(),
        )),
        _ => Ok(()),
    }
}

/// The owner of the change sets a run keeps when the caller names none: the local user,
/// `uid:<effective uid>` (the CLI, the library).
pub fn local_owner() -> String {
    format!(
        "{LOCAL_OWNER_PREFIX}{}",
        rustix::process::geteuid().as_raw()
    )
}

/// Prefix of [`local_owner`].
pub const LOCAL_OWNER_PREFIX: &str = "uid:";

/// Where a run's files go and whom its kept changes belong to.
pub(crate) struct RunFor<'a> {
    /// The state directory.
    pub(crate) state_dir: &'a std::path::Path,
    /// The run's id.
    pub(crate) run_id: &'a str,
    /// The owner of its kept change set ([`crate::review::KeptChanges::owner`]).
    pub(crate) owner: &'a str,
}

/// [`run_plan`], sending the output as it happens to `events` (line-buffered, redacted,
/// never waited for: batches the receiver has no room for wait in a backlog, and what it
/// has not taken a short while after the end is dropped and counted; see
/// [`crate::stream`]). The
/// returned outcome holds all the captured output as usual.
pub async fn run_plan_streaming(
    plan: &Plan,
    opts: &RunOptions,
    events: tokio::sync::mpsc::Sender<OutputEvent>,
) -> Result<Outcome, RunError> {
    let tap = Arc::new(Tap::for_plan(events, &plan.redaction, &plan.output));
    run_plan_tapped(plan, opts, Some(tap), &local_owner(), None).await
}

/// [`run_plan`] (with `events`, [`run_plan_streaming`]) for `owner`: the owner of the
/// change set an overlay run keeps.
pub(crate) async fn run_plan_for(
    plan: &Plan,
    opts: &RunOptions,
    events: Option<tokio::sync::mpsc::Sender<OutputEvent>>,
    owner: &str,
    stdin: Option<StdinSource>,
) -> Result<Outcome, RunError> {
    let tap = events.map(|tx| Arc::new(Tap::for_plan(tx, &plan.redaction, &plan.output)));
    run_plan_tapped(plan, opts, tap, owner, stdin).await
}

async fn run_plan_tapped(
    plan: &Plan,
    opts: &RunOptions,
    tap: Option<Arc<Tap>>,
    owner: &str,
    stdin: Option<StdinSource>,
) -> Result<Outcome, RunError> {
    check_stdin_source(plan.stdin_streamed, &stdin)?;
    let facts = host_facts();
    let selection = tierbox_sandbox::contract::select(plan, facts)?;
    let tier = selection.tier;
    if plan.background.is_some() {
        return Err(Rejection::TierUnsupported {
            tier,
            feature: "background".to_owned(),
            reason: "a background run returns a handle, not an outcome: start it with \
                     Runner::start_background"
                .to_owned(),
        }
        .into());
    }
    let run_id = new_run_id();
    ensure_state_dir(&opts.state_dir)?;
    // Secrets, placeholders and the run's CA before anything starts: a secret that
    // cannot be read refuses the run.
    let termination = crate::terminate::prepare(plan, std::time::SystemTime::now())?;
    let launch_opts = LaunchOptions {
        run_id: run_id.clone(),
        tmp_base: opts.state_dir.join("tmp"),
        launcher_thread: false,
        terminal: None,
        trust: termination.as_ref().map(|t| t.trust.clone()),
    };
    // Where Tier B cannot keep the protected entries read-only (no mount namespace of the
    // run's own), what the run changes of them is named in the outcome instead.
    let protected_before = (tier == Tier::B).then(|| crate::protected::snapshot(plan));
    // A published port another process holds refuses the run before it starts.
    let published = crate::reach::bind_published(plan)?;
    let started = Instant::now();
    let launched = launch_in(tier, plan, &launch_opts)?;
    // From here on the run is owned by the guard: if this future is dropped (a caller's
    // timeout, `select!`, an aborted task), the guard kills and reaps the whole tree.
    let mut guard = RunGuard {
        launched,
        done: false,
    };
    let terminate = termination.map(|t| t.termination);
    let edge = match start_proxy(plan, &mut guard.launched, terminate).and_then(|proxy| {
        let relays = crate::reach::start(plan, &mut guard.launched, published)?;
        Ok(crate::reach::Edge { proxy, relays })
    }) {
        Ok(edge) => edge,
        Err(e) => {
            kill_tree(&guard.launched);
            return Err(e);
        }
    };
    let result = supervise(
        plan,
        &mut guard.launched,
        started,
        &RunFor {
            state_dir: &opts.state_dir,
            run_id: &run_id,
            owner,
        },
        edge,
        tap,
        stdin,
    )
    .await;
    guard.finish();
    let mut outcome = result?;
    outcome.run_id = run_id;
    outcome.enforcement.passed_over = selection.passed_over;
    // Where Tier B kept them read-only (its mount namespace), the run changed none.
    if let Some(before) = protected_before.filter(|_| !outcome.enforcement.protected_paths.applied)
    {
        // A repository the run created is named as such already.
        let created = &outcome.created_git_dirs;
        outcome.protected_changed =
            crate::protected::changed(&before, &crate::protected::snapshot(plan))
                .into_iter()
                .filter(|p| !created.iter().any(|d| p.starts_with(d.join(".git"))))
                .collect();
    }
    Ok(outcome)
}

/// Launches `plan` in the selected native tier and registers its root, so the orphan
/// sweep never takes it for an orphan. Tier A plans run through [`crate::wasm`] instead.
pub(crate) fn launch_in(
    tier: Tier,
    plan: &Plan,
    opts: &LaunchOptions,
) -> Result<RunningSandbox, RunError> {
    let _launching = LAUNCHING.read().unwrap_or_else(PoisonError::into_inner);
    if let Some(home) = &plan.filesystem.workspace_home {
        crate::home::ensure(&plan.workspace, home)?;
    }
    let launched = match tier {
        Tier::B | Tier::C => tierbox_sandbox::contract::for_plan(plan, tier).launch(plan, opts)?,
        Tier::A => {
            return Err(Rejection::TierUnavailable {
                tier,
                reason: "tier a runs WASM modules, not native programs".to_owned(),
            }
            .into());
        }
    };
    register_root(launched.pid(), true);
    Ok(launched)
}

/// Starts the run's egress proxy on the listener the sandbox made for it (Tier B's on the
/// host's loopback, Tier C's inside the sandbox's network namespace), when the plan needs
/// one.
pub(crate) fn start_proxy(
    plan: &Plan,
    launched: &mut RunningSandbox,
    terminate: Option<Arc<tierbox_egress::tls::Termination>>,
) -> Result<Option<Proxy>, RunError> {
    if !plan.network.needs_proxy() {
        return Ok(None);
    }
    let listener = launched.take_egress_listener().ok_or_else(|| {
        RunError::Launch(format!(
            "the plan needs the egress proxy, and the {} backend made no listener for it",
            launched.enforcement().backend
        ))
    })?;
    let mut config = ProxyConfig::new(plan.network.allow.clone(), plan.network.resolve.clone());
    config.terminate = terminate;
    Proxy::start(listener, config)
        .map(Some)
        .map_err(|source| RunError::Io {
            what: "start the egress proxy",
            source,
        })
}

/// Owns a launched run until it is fully cleaned up.
pub(crate) struct RunGuard {
    pub(crate) launched: RunningSandbox,
    pub(crate) done: bool,
}

impl RunGuard {
    /// Normal end: the supervisor already killed and reaped the tree.
    pub(crate) fn finish(&mut self) {
        if !self.done {
            self.done = true;
            cleanup(&mut self.launched);
        }
    }
}

impl Drop for RunGuard {
    /// Abnormal end (the run's future was dropped): kill the tree, reap the direct child,
    /// release the resources. Bounded: the processes are SIGKILLed, so they exit at once.
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let l = &self.launched;
        kill_tree(l);
        for _ in 0..REAP_ON_DROP_TRIES {
            match l.reap(true) {
                Ok(None) => std::thread::sleep(Duration::from_millis(1)),
                _ => break,
            }
        }
        self.finish();
    }
}

/// How many 1 ms tries a dropped run gets to reap its SIGKILLed direct child.
const REAP_ON_DROP_TRIES: u32 = 1_000;

#[derive(Debug, Clone, Copy)]
enum Ended {
    Exited,
    Timeout,
    Quota,
}

/// Supervises a launched run to its end, in four steps: [`Capture::start`] (readers,
/// stdin, chmod mediation), [`wait_for_end`] (exit, deadline or quota), [`end_run`]
/// (the tree killed and reaped, the proxy and readers finished), [`outcome_of`].
async fn supervise(
    plan: &Plan,
    l: &mut RunningSandbox,
    started: Instant,
    run_for: &RunFor<'_>,
    edge: crate::reach::Edge,
    tap: Option<Arc<Tap>>,
    stdin: Option<StdinSource>,
) -> Result<Outcome, RunError> {
    let (state_dir, run_id) = (run_for.state_dir, run_for.run_id);
    let capture = Capture::start(plan, l, state_dir, run_id, tap, stdin)?;
    let pidfd = l.watch_exit().map_err(|source| RunError::Io {
        what: "register pidfd",
        source,
    })?;
    let deadline = started + Duration::from_millis(plan.limits.wall_timeout_ms);
    let (ended, reported) = wait_for_end(l, &pidfd, deadline, &capture.quota).await?;
    if matches!(ended, Ended::Exited) {
        // A native Tier C pid 1 is the last of its sandbox: the audit barrier can start
        // while the run is taken down.
        l.audit_mut().first_process_exited();
    }
    let (ending, mut ended_run) = end_run(plan, l, &pidfd, ended, reported, edge, capture).await?;
    // Its processes are gone: the audit barrier travels while the outcome is built.
    l.audit_mut().processes_gone();
    let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let launched_at = std::time::SystemTime::now() - started.elapsed();
    let handed_off = ended_run.refusals.take();
    let mut outcome = outcome_of(plan, l, ended, ending, ended_run, duration_ms);
    let scratch = crate::review::settle_scratch(plan, l, run_for, launched_at).await;
    scratch.record(&mut outcome);
    stdin_limit(&mut outcome);
    outcome.denials = crate::denials::of_run(
        outcome.egress.as_ref(),
        outcome
            .limit_hit
            .map(|l| (l, false, crate::denials::limit_value(plan, l))),
    );
    outcome.enforcement.denial_reports =
        add_refusals(plan, l, handed_off, started, &mut outcome.denials).await;
    Ok(outcome)
}

/// A stdin cut at its limit is the outcome's `limit_hit` when no other limit is: the others
/// ended or constrained the run, the cut only shortened its input.
pub(crate) fn stdin_limit(outcome: &mut Outcome) {
    if outcome.limit_hit.is_none() && outcome.stdin.as_ref().is_some_and(|s| s.limit_hit) {
        outcome.limit_hit = Some(LimitHit::Stdin);
    }
}

/// Once the run's processes are gone: appends its landlock, seccomp and mount refusals
/// (read from the kernel's audit records, and `handed_off` by its filter with how many
/// were past the bound) to `denials`, within [`crate::denials::MAX_DENIALS`], and
/// returns how each layer's refusals were read (`enforcement.denial_reports`).
pub(crate) async fn add_refusals(
    plan: &Plan,
    l: &mut RunningSandbox,
    handed_off: Option<(Vec<Refusal>, u64)>,
    started: Instant,
    denials: &mut Vec<crate::denials::Denial>,
) -> std::collections::BTreeMap<crate::denials::DenialLayer, tierbox_policy::LayerReport> {
    let audit = finish_audit(l).await;
    denials.extend(crate::denials::of_refusals(
        plan,
        audit
            .report
            .refusals
            .iter()
            .chain(handed_off.iter().flat_map(|(r, _)| r)),
        started,
    ));
    denials.truncate(crate::denials::MAX_DENIALS);
    let handed = handed_off.map(|(_, dropped)| dropped);
    crate::denials::sources(plan, l.tier(), Some(&audit), handed)
}

/// The run's landlock and seccomp refusals, once its processes are gone (awaiting, up to
/// [`tierbox_sandbox::contract::denials::BARRIER_TIMEOUT`], the kernel's queue).
async fn finish_audit(
    l: &mut RunningSandbox,
) -> tierbox_sandbox::contract::denials::RunAuditReport {
    std::mem::replace(
        l.audit_mut(),
        tierbox_sandbox::contract::denials::RunAudit::not_recorded("already read", "already read"),
    )
    .finish()
    .await
}

/// A run's output capture and the tasks serving it while it runs.
struct Capture {
    /// Raised by a reader when the output quota is passed.
    quota: Arc<Notify>,
    out_cap: Arc<Mutex<StreamCapture>>,
    err_cap: Arc<Mutex<StreamCapture>>,
    out_task: tokio::task::JoinHandle<()>,
    err_task: tokio::task::JoinHandle<()>,
    tap: Option<Arc<Tap>>,
    /// Performs the run's chmod calls, beneath its writable grants only, and answers the
    /// refusals its filter hands off.
    mediator: Option<AbortOnDrop>,
    /// The handed-off refusals, with their arguments (when the filter hands them off).
    refusals: Option<RefusalLog>,
    /// The forwarding of the run's stdin, when it has one.
    stdin: Option<Forwarding>,
}

impl Capture {
    /// Starts reading stdout and stderr (teed to `tap` when streaming), forwards the
    /// plan's stdin (and `stdin`, the caller's stream), and serves chmod mediation.
    fn start(
        plan: &Plan,
        l: &mut RunningSandbox,
        state_dir: &std::path::Path,
        run_id: &str,
        tap: Option<Arc<Tap>>,
        stdin: Option<StdinSource>,
    ) -> Result<Self, RunError> {
        let quota = Arc::new(Notify::new());
        // Every run removes the spill files past their lifetime (before it counts the
        // room its own may take).
        crate::spill::sweep_expired(state_dir, plan.output.spill_keep_secs);
        let out_cap = Arc::new(Mutex::new(new_capture(plan, state_dir, run_id, "stdout")?));
        let err_cap = Arc::new(Mutex::new(new_capture(plan, state_dir, run_id, "stderr")?));
        let stdout = dup(l.stdout())?;
        let stderr = dup(l.stderr())?;
        let (out_task, err_task) = match &tap {
            None => (
                tokio::spawn(read_stream(stdout, out_cap.clone(), quota.clone())),
                tokio::spawn(read_stream(stderr, err_cap.clone(), quota.clone())),
            ),
            Some(tap) => {
                let tee = |inner: &Arc<Mutex<StreamCapture>>, stream| {
                    Arc::new(Tee {
                        inner: inner.clone(),
                        tap: tap.clone(),
                        stream,
                    })
                };
                (
                    tokio::spawn(read_stream(
                        stdout,
                        tee(&out_cap, Stream::Stdout),
                        quota.clone(),
                    )),
                    tokio::spawn(read_stream(
                        stderr,
                        tee(&err_cap, Stream::Stderr),
                        quota.clone(),
                    )),
                )
            }
        };
        let stdin = match (l.take_stdin(), &plan.stdin) {
            (Some(fd), Some(data)) => Some(
                crate::stdin::forward(fd, data.clone(), stdin, plan.limits.stdin_bytes).map_err(
                    |source| RunError::Io {
                        what: "start the stdin writer thread",
                        source,
                    },
                )?,
            ),
            _ => None,
        };
        let (mediator, refusals) = serve_hand_off(plan, l).map_err(|source| RunError::Io {
            what: "open the writable grants for chmod mediation",
            source,
        })?;
        Ok(Self {
            quota,
            out_cap,
            err_cap,
            out_task,
            err_task,
            tap,
            mediator,
            refusals,
            stdin,
        })
    }
}

/// Waits until the run's root exits (or, for native Tier C in a long-lived supervisor,
/// pid 1 reports the program's exit), the deadline passes, or the output quota is hit.
async fn wait_for_end(
    l: &RunningSandbox,
    pidfd: &AsyncFd<OwnedFd>,
    deadline: Instant,
    quota: &Notify,
) -> Result<(Ended, Option<ExitInfo>), RunError> {
    // Tier C in a long-lived supervisor: the run ends on pid 1's exit record (everything
    // else in the sandbox is dead by then), and pid 1 itself is reaped in the background
    // with the run's slot (see `cleanup`). A one-shot process waits for pid 1 instead, so
    // that nothing is left to clean up when it returns.
    let report = l.exit_report().transpose().map_err(|source| RunError::Io {
        what: "dup",
        source,
    })?;
    let mut reported = None;
    let ended = tokio::select! {
        r = exited(pidfd) => { r?; Ended::Exited }
        Some(exit) = reported_exit(report) => { reported = Some(exit); Ended::Exited }
        _ = tokio::time::sleep_until(deadline.into()) => Ended::Timeout,
        _ = quota.notified() => Ended::Quota,
    };
    Ok((ended, reported))
}

/// What is left of a run once its tree is gone: the egress decisions and the output,
/// with whether each stream's reader had to be given up.
struct EndedRun {
    egress: Option<tierbox_egress::EgressLog>,
    /// What each published-port and host-port relay carried.
    reach: Vec<tierbox_egress::reach::RelayReport>,
    stdout: StreamCapture,
    stderr: StreamCapture,
    out_incomplete: bool,
    err_incomplete: bool,
    /// Bytes of stdout and stderr the live stream could not deliver.
    live_dropped: [u64; 2],
    /// The refusals the filter handed off, and how many were past the bound (when it
    /// hands them off).
    refusals: Option<(Vec<Refusal>, u64)>,
    /// What the run's stdin carried.
    stdin: Option<StdinReport>,
}

/// Ends the run: the tree killed and reaped (unless pid 1 already reported the
/// program's exit), anything that escaped the group swept, then the proxy finished and
/// the readers drained with a bounded wait.
async fn end_run(
    plan: &Plan,
    l: &mut RunningSandbox,
    pidfd: &AsyncFd<OwnedFd>,
    ended: Ended,
    reported: Option<ExitInfo>,
    edge: crate::reach::Edge,
    capture: Capture,
) -> Result<(Ending, EndedRun), RunError> {
    let ending = match reported {
        // pid 1 is exiting (the reaper kills it for good measure when it takes it over).
        Some(exit) => Ending {
            exit,
            pid1_unreported: None,
        },
        None => {
            let cause = match ended {
                Ended::Exited => EndCause::Exited,
                Ended::Timeout => EndCause::Deadline,
                Ended::Quota => EndCause::Stopped,
            };
            end_tree(l, pidfd, cause).await?
        }
    };
    // Anything that survived the group kill (only possible without a cgroup: a daemon
    // that left the process group, caught by the subreaper sweep).
    if l.cgroup().is_none() {
        kill_tree(l);
    }
    // Every process of the run is dead: no new connection can reach the proxy, and the
    // relays end what is left of theirs (a published port closes with them).
    let (egress, reach) = edge.finish().await;
    let drain = Duration::from_millis(DRAIN_TIMEOUT_MS);
    let Capture {
        out_cap,
        err_cap,
        out_task,
        err_task,
        tap,
        mediator,
        refusals,
        stdin,
        ..
    } = capture;
    // The run's processes are gone: the forwarding can only end now.
    let stdin = match stdin {
        Some(f) => Some(f.finish().await),
        None => None,
    };
    let out_incomplete = drain_task(out_task, drain).await;
    let err_incomplete = drain_task(err_task, drain).await;
    let live_dropped = match &tap {
        Some(tap) => tap.finish().await.dropped,
        None => [0, 0],
    };
    drop(mediator);
    let refusals = refusals.map(|r| r.take());
    Ok((
        ending,
        EndedRun {
            egress,
            reach,
            stdout: take_capture(&out_cap, plan),
            stderr: take_capture(&err_cap, plan),
            out_incomplete,
            err_incomplete,
            live_dropped,
            refusals,
            stdin,
        },
    ))
}

/// The outcome of an ended run: how it ended and which limit it hit, the program's exit
/// (pid 1's own status discarded when the sandbox failed), the redacted output, usage.
fn outcome_of(
    plan: &Plan,
    l: &RunningSandbox,
    ended: Ended,
    ending: Ending,
    run: EndedRun,
    duration_ms: u64,
) -> Outcome {
    let Ending {
        mut exit,
        pid1_unreported,
    } = ending;
    let stats = l.stats();
    let limit_hit = classify(plan, &ended, &exit, stats.as_ref());
    let sandbox_failure = pid1_unreported
        .and_then(|pid1| sandbox_failure(&pid1, matches!(ended, Ended::Exited), limit_hit));
    if sandbox_failure.is_some() {
        // pid 1's status is not the program's, which is unknown.
        (exit.code, exit.signal) = (None, None);
    }
    l.oom_kill_as_signal(limit_hit == Some(LimitHit::Memory), &mut exit);
    let redactor = plan
        .redaction
        .enabled
        .then(|| Redactor::new(&plan.redaction.sensitive_values));
    let stdout = StreamOutput {
        live_dropped_bytes: run.live_dropped[0],
        ..StreamOutput::from_captured(run.stdout.finish(), redactor.as_ref(), run.out_incomplete)
    };
    let stderr = StreamOutput {
        live_dropped_bytes: run.live_dropped[1],
        ..StreamOutput::from_captured(run.stderr.finish(), redactor.as_ref(), run.err_incomplete)
    };
    let redacted = stdout.redacted || stderr.redacted;
    // Output cut in truncate mode constrained the run without ending it.
    let limit_hit =
        limit_hit.or_else(|| (stdout.truncated || stderr.truncated).then_some(LimitHit::Output));
    let (created_git_dirs, created_git_dirs_incomplete) = crate::outcome::created_git_dirs(
        &plan.workspace,
        &plan.filesystem.git_repos,
        l.host_placeholders(),
        plan.filesystem.repo_scan,
    );
    let (unix_sockets, warnings) = crate::outcome::HostSocket::of_plan(plan);
    Outcome {
        run_id: String::new(),
        exit_code: exit.code,
        signal: exit.signal,
        signal_name: exit.signal.map(signal_name),
        timed_out: matches!(ended, Ended::Timeout),
        quota_exceeded: matches!(ended, Ended::Quota),
        limit_hit,
        stdout,
        stderr,
        stdin: run.stdin,
        duration_ms,
        usage: Usage {
            cpu_user_ms: exit.user_us / 1000,
            cpu_sys_ms: exit.sys_us / 1000,
            peak_rss_bytes: exit.max_rss_bytes,
            peak_memory_bytes: stats.as_ref().and_then(|s| s.memory_peak_bytes),
        },
        tier: l.tier(),
        backend: l.enforcement().backend,
        enforcement: l.enforcement().clone(),
        egress_preflight_hosts: plan.network.preflight_hosts.clone(),
        egress: run.egress,
        reach: run.reach,
        unix_sockets,
        warnings,
        redacted,
        plan_sha256: tierbox_attest::plan_digest(plan),
        wasm: None,
        attestation: None,
        audit_error: None,
        sandbox_failure,
        created_git_dirs,
        created_git_dirs_incomplete,
        protected_changed: Vec::new(),
        changes: None,
        changes_error: None,
        changes_evicted: Vec::new(),
        denials: Vec::new(),
    }
}

/// Why a run's process tree is being ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EndCause {
    /// Its root exited by itself.
    Exited,
    /// Its deadline (or a background process's lifetime) passed: SIGTERM first.
    Deadline,
    /// It is being stopped at once (output quota, a kill request).
    Stopped,
}

/// Ends a run's process tree and collects its exit — the one end-of-run sequence of
/// foreground and background runs: on the deadline SIGTERM to the tree and up to
/// [`TERM_GRACE_MS`] for the root to exit; then the whole tree killed (unless the root
/// exited by itself and nothing else is left), the root awaited and reaped; for Tier C
/// the program's own exit from pid 1's record.
pub(crate) async fn end_tree(
    l: &mut RunningSandbox,
    pidfd: &AsyncFd<OwnedFd>,
    cause: EndCause,
) -> Result<Ending, RunError> {
    if cause == EndCause::Deadline {
        l.signal_all(libc::SIGTERM);
        let grace = tokio::time::sleep(Duration::from_millis(TERM_GRACE_MS));
        tokio::select! {
            r = exited(pidfd) => r?,
            _ = grace => {}
        }
    }
    // The direct child is dead or about to be killed; it is not reaped yet, so its pid
    // (the process group id) cannot have been reused.
    if !(cause == EndCause::Exited && l.only_root_left()) {
        kill_tree(l);
    }
    exited(pidfd).await?;
    let exit = l
        .reap(false)
        .map_err(|source| RunError::Io {
            what: "waitid(P_PIDFD)",
            source,
        })?
        .ok_or_else(|| RunError::Io {
            what: "waitid(P_PIDFD)",
            source: std::io::Error::other("child not exited"),
        })?;
    // Tier C: the pidfd is the sandbox's pid 1; the program's own exit is reported (when
    // pid 1 lived to see it).
    Ok(l.ending(exit))
}

/// A stream's capture under the plan's quota, spilled to `<state_dir>/spill/<run id>.<name>`
/// when the plan spills ([`crate::spill`]): refused, and said so in its `spill_error`,
/// when the cap on all spill files is reached.
fn new_capture(
    plan: &Plan,
    state_dir: &std::path::Path,
    run_id: &str,
    name: &str,
) -> Result<StreamCapture, RunError> {
    let cap = StreamCapture::new(plan.output.max_bytes, plan.output.mode);
    if !plan.output.spill {
        return Ok(cap);
    }
    let dir = crate::spill::SpillDir::open(state_dir)
        .map_err(|e| e.into_run_error("open the spill directory"))?;
    match dir.create(
        &format!("{run_id}.{name}"),
        plan.limits.file_size_bytes,
        "limits.file_size_bytes",
        plan.output.spill_total_bytes,
    ) {
        Ok(file) => Ok(cap.with_spill(file)),
        Err(e @ crate::spill::SpillError::Full { .. }) => Ok(cap.with_spill_refused(e.to_string())),
        Err(e) => Err(e.into_run_error("create the spill file")),
    }
}

fn take_capture(cap: &Arc<Mutex<StreamCapture>>, plan: &Plan) -> StreamCapture {
    match cap.lock() {
        Ok(mut guard) => std::mem::replace(
            &mut *guard,
            StreamCapture::new(plan.output.max_bytes, plan.output.mode),
        ),
        Err(poisoned) => {
            let mut guard = poisoned.into_inner();
            std::mem::replace(
                &mut *guard,
                StreamCapture::new(plan.output.max_bytes, plan.output.mode),
            )
        }
    }
}

pub(crate) fn dup(fd: &OwnedFd) -> Result<OwnedFd, RunError> {
    fd.try_clone().map_err(|source| RunError::Io {
        what: "dup",
        source,
    })
}

/// Tier C: the program's exit from pid 1's exit record, as soon as it is written; `None`
/// without a report pipe to watch, or when pid 1 ended without writing it (killed: then
/// the pidfd tells).
async fn reported_exit(report: Option<OwnedFd>) -> Option<ExitInfo> {
    read_exit_record(report?).await
}

/// Waits until the pidfd is readable (the child has exited; it is not reaped).
pub(crate) async fn exited(pidfd: &AsyncFd<OwnedFd>) -> Result<(), RunError> {
    pidfd
        .readable()
        .await
        .map(|mut guard| guard.retain_ready())
        .map_err(|source| RunError::Io {
            what: "poll pidfd",
            source,
        })
}

/// Where a reader puts the chunks it reads from a pipe.
pub(crate) trait ChunkSink: Send + Sync + 'static {
    fn push_chunk(&self, chunk: &[u8]) -> Push;
}

impl ChunkSink for Mutex<StreamCapture> {
    fn push_chunk(&self, chunk: &[u8]) -> Push {
        match self.lock() {
            Ok(mut c) => c.push(chunk),
            Err(_) => Push::Continue,
        }
    }
}

pub(crate) async fn read_stream<S: ChunkSink + ?Sized>(
    fd: OwnedFd,
    cap: Arc<S>,
    quota: Arc<Notify>,
) {
    let Ok(mut rx) = tokio::net::unix::pipe::Receiver::from_owned_fd(fd) else {
        return;
    };
    let mut buf = vec![0u8; CAPTURE_CHUNK_BYTES];
    loop {
        match rx.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if cap.push_chunk(&buf[..n]) == Push::QuotaExceeded {
                    quota.notify_one();
                }
            }
        }
    }
}

/// Aborts a task when dropped (also when the run's future is dropped mid-run).
pub(crate) struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Waits up to `limit` for a reader to reach EOF; returns whether it had to give up.
pub(crate) async fn drain_task(task: tokio::task::JoinHandle<()>, limit: Duration) -> bool {
    let abort = task.abort_handle();
    match tokio::time::timeout(limit, task).await {
        Ok(_) => false,
        Err(_) => {
            abort.abort();
            true
        }
    }
}

/// A Tier C sandbox whose pid 1 ended without reporting the program's exit failed as a
/// sandbox — unless the supervisor ended the run itself (timeout, output quota, a dropped
/// run: `ended_by_program` false), or the kernel's OOM killer chose pid 1 in the run's
/// cgroup (the memory limit, which the outcome reports). What happened, for
/// `Outcome::sandbox_failure`; `None` when it is not a sandbox failure.
pub(crate) fn sandbox_failure(
    pid1: &ExitInfo,
    ended_by_program: bool,
    limit_hit: Option<LimitHit>,
) -> Option<String> {
    use tierbox_sandbox::contract::reaper;
    if !ended_by_program || limit_hit == Some(LimitHit::Memory) {
        return None;
    }
    let what = match (pid1.signal, pid1.code) {
        (Some(libc::SIGKILL), _) => {
            "sandbox pid 1 was killed (SIGKILL) by something other than Tierbox".to_owned()
        }
        (Some(sig), _) => format!("sandbox pid 1 crashed ({})", signal_name(sig)),
        (None, Some(reaper::BAD_ARGUMENTS_EXIT)) => {
            "sandbox pid 1 (tierbox-init) was started without the program's pid".to_owned()
        }
        (None, Some(reaper::PANIC_EXIT)) => "sandbox pid 1 (tierbox-init) panicked".to_owned(),
        (None, Some(reaper::SUPERVISOR_GONE_EXIT)) => {
            "sandbox pid 1 could not re-arm its death signal after exec'ing tierbox-init".to_owned()
        }
        (None, Some(code)) => format!("sandbox pid 1 exited with {code}"),
        (None, None) => "sandbox pid 1 ended".to_owned(),
    };
    Some(format!(
        "{what} before reporting the program's exit; the program's own exit status is unknown"
    ))
}

fn classify(
    plan: &Plan,
    ended: &Ended,
    exit: &ExitInfo,
    stats: Option<&tierbox_sandbox::contract::CgroupStats>,
) -> Option<LimitHit> {
    match ended {
        Ended::Timeout => return Some(LimitHit::WallTime),
        Ended::Quota => return Some(LimitHit::Output),
        Ended::Exited => {}
    }
    if stats.is_some_and(|s| s.oom_kills > 0) {
        return Some(LimitHit::Memory);
    }
    let cpu_ms = (exit.user_us + exit.sys_us) / 1000;
    match exit.signal {
        Some(libc::SIGXCPU) => return Some(LimitHit::CpuTime),
        Some(libc::SIGKILL) if cpu_ms >= plan.limits.cpu_time_secs * 1000 => {
            return Some(LimitHit::CpuTime);
        }
        Some(libc::SIGXFSZ) => return Some(LimitHit::FileSize),
        _ => {}
    }
    if stats.is_some_and(|s| s.pids_limit_hit > 0) {
        return Some(LimitHit::Processes);
    }
    None
}
