//! The library API: a `SandboxedCommand`-style builder and a tool-call [`Runner`].

use std::path::PathBuf;
use std::time::Duration;

use tierbox_policy::validate::{grants_plan, validate_tier_a, validate_wasm};
use tierbox_policy::wasm::{WasmPlan, WasmRunRequest};
use tierbox_policy::{
    Plan, Policy, ProcessRunRequest, Rejection, Tier, TierRequest, ValidateContext, validate,
};

use std::sync::Arc;

use crate::audit::{Auditor, now_unix_ms};
use crate::background::{BackgroundError, BackgroundHandle, BackgroundManager, Seal};
use crate::outcome::Outcome;
use crate::stdin::StdinSource;
use crate::stream::OutputEvent;
use crate::supervisor::{RunError, RunOptions, run_plan};
use crate::wasm::TierARun;

/// Builder defaults (from the `SandboxedCommand` API this replaces): wall timeout.
pub const BUILDER_DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Builder default: bytes of output kept per stream.
pub const BUILDER_DEFAULT_MAX_OUTPUT: u64 = 1024 * 1024;
/// Builder default: processes and threads for the whole run.
pub const BUILDER_DEFAULT_MAX_PROCESSES: u64 = 10;
/// Builder default: open files per process.
pub const BUILDER_DEFAULT_MAX_OPEN_FILES: u64 = 256;

/// Entry point of the builder API.
#[derive(Debug, Clone, Copy)]
pub struct Sandbox;

impl Sandbox {
    /// A command that runs `program` (a bare name resolved in the sandbox PATH) in the
    /// current directory as its workspace.
    ///
    /// The builder starts from the strict default policy with only `program` allowed,
    /// interpreters denied, no network, and the defaults: 60 s, 1 MiB of output per
    /// stream, 10 processes, 256 open files, 1 GiB of memory.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tierbox_runner::Sandbox;
    ///
    /// # let project = tempfile::tempdir().unwrap();
    /// # std::fs::write(project.path().join("notes.txt"), "one\ntwo\n").unwrap();
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    /// # rt.block_on(async {
    /// let outcome = Sandbox::command("wc")
    ///     .args(["-l", "notes.txt"])
    ///     .working_dir(project.path())
    ///     .timeout(Duration::from_secs(120))
    ///     .max_output(2 * 1024 * 1024)
    ///     .execute()
    ///     .await?;
    /// assert_eq!(outcome.exit_code, Some(0));
    /// assert_eq!(outcome.stdout.text, "2 notes.txt\n");
    /// if outcome.stdout.truncated {
    ///     println!("({} bytes omitted)", outcome.stdout.omitted_bytes);
    /// }
    /// # Ok::<(), tierbox_runner::RunError>(())
    /// # }).unwrap();
    /// ```
    pub fn command(program: impl Into<String>) -> SandboxedCommand {
        let program = program.into();
        let mut policy = Policy::builtin_default();
        policy.description = "builder".to_owned();
        policy.exec.allowed_executables =
            vec![program.rsplit('/').next().unwrap_or(&program).to_owned()];
        policy.limits.timeout_ms = duration_ms(BUILDER_DEFAULT_TIMEOUT);
        policy.limits.max_timeout_ms = policy.limits.max_timeout_ms.max(policy.limits.timeout_ms);
        policy.output.max_bytes = BUILDER_DEFAULT_MAX_OUTPUT;
        policy.limits.max_processes = BUILDER_DEFAULT_MAX_PROCESSES;
        policy.limits.open_files = BUILDER_DEFAULT_MAX_OPEN_FILES;
        SandboxedCommand {
            request: ProcessRunRequest::new(program),
            policy,
            workspace: PathBuf::from("."),
            options: RunOptions::default(),
            stdin: None,
        }
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// A command being configured; see [`Sandbox::command`].
#[derive(Debug, Clone)]
pub struct SandboxedCommand {
    request: ProcessRunRequest,
    policy: Policy,
    workspace: PathBuf,
    options: RunOptions,
    /// The stream of [`SandboxedCommand::stdin_reader`].
    stdin: Option<StdinSourceSlot>,
}

/// A [`StdinSource`] in a `Clone` builder: taken by the first [`SandboxedCommand::execute`]
/// of the builder or of any of its clones (a stream is read once).
#[derive(Debug, Clone, Default)]
struct StdinSourceSlot(Arc<std::sync::Mutex<Option<StdinSource>>>);

impl SandboxedCommand {
    /// Appends one argument (passed verbatim).
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.request.args.push(arg.into());
        self
    }

    /// Appends arguments (passed verbatim).
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.request.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// The workspace: the only writable directory, and the default working directory.
    pub fn working_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.workspace = dir.into();
        self
    }

    /// Working directory relative to the workspace.
    pub fn cwd(mut self, relative: impl Into<String>) -> Self {
        self.request.cwd = Some(relative.into());
        self
    }

    /// Sets an environment variable for the child (checked against the deny list).
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.request.env.insert(name.into(), value.into());
        self
    }

    /// Text for stdin (default: `/dev/null`), given whole; see
    /// [`SandboxedCommand::stdin_bytes`] for bytes of any kind and
    /// [`SandboxedCommand::stdin_reader`] for a stream. More than the stdin limit (the
    /// policy's `limits.stdin_bytes`) is refused before the run (`input.stdin_too_large`).
    pub fn stdin(mut self, data: impl Into<String>) -> Self {
        self.request.stdin = Some(data.into());
        self.request.stdin_base64 = None;
        self.request.stdin_stream = false;
        self.stdin = None;
        self
    }

    /// Bytes of any kind for stdin, given whole (NUL bytes and invalid UTF-8 reach the
    /// program as they are).
    ///
    /// ```
    /// use tierbox_runner::Sandbox;
    ///
    /// # let project = tempfile::tempdir().unwrap();
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    /// # rt.block_on(async {
    /// let outcome = Sandbox::command("wc")
    ///     .arg("-c")
    ///     .working_dir(project.path())
    ///     .stdin_bytes(vec![0u8, 0xff, b'\n'])
    ///     .execute()
    ///     .await?;
    /// assert_eq!(outcome.stdout.text, "3\n");
    /// assert_eq!(outcome.stdin.unwrap().bytes, 3);
    /// # Ok::<(), tierbox_runner::RunError>(())
    /// # }).unwrap();
    /// ```
    pub fn stdin_bytes(self, data: impl Into<Vec<u8>>) -> Self {
        let mut this = self.stdin(String::new());
        this.request.set_stdin_bytes(data.into());
        this
    }

    /// Stdin streamed from `reader` to the program as it arrives, never held whole: at
    /// most the stdin limit (`limits.stdin_bytes`) reaches the program, which then sees
    /// end of file, and the outcome says `limit_hit: "stdin"` ([`crate::Outcome::stdin`]
    /// has what it got). The stream is read by one run: the first `execute` of this
    /// builder or a clone of it.
    ///
    /// ```
    /// use tierbox_runner::Sandbox;
    ///
    /// # let project = tempfile::tempdir().unwrap();
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    /// # rt.block_on(async {
    /// let outcome = Sandbox::command("wc")
    ///     .arg("-c")
    ///     .working_dir(project.path())
    ///     .stdin_reader(&b"streamed\n"[..])
    ///     .execute()
    ///     .await?;
    /// assert_eq!(outcome.stdout.text, "9\n");
    /// # Ok::<(), tierbox_runner::RunError>(())
    /// # }).unwrap();
    /// ```
    pub fn stdin_reader(self, reader: impl tokio::io::AsyncRead + Send + 'static) -> Self {
        let mut this = self.stdin(String::new());
        this.request.stdin = None;
        this.request.stdin_stream = true;
        this.stdin = Some(StdinSourceSlot(Arc::new(std::sync::Mutex::new(Some(
            StdinSource::from_reader(reader),
        )))));
        this
    }

    /// The most bytes stdin may carry (the builder's policy's `limits.stdin_bytes`).
    pub fn max_stdin(mut self, bytes: u64) -> Self {
        self.policy.limits.stdin_bytes = bytes;
        self
    }

    /// Wall-clock timeout (also the CPU-time limit unless set otherwise).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        let ms = duration_ms(timeout);
        self.policy.limits.timeout_ms = ms;
        self.policy.limits.max_timeout_ms = self.policy.limits.max_timeout_ms.max(ms);
        self
    }

    /// Bytes of output kept per stream.
    pub fn max_output(mut self, bytes: u64) -> Self {
        self.policy.output.max_bytes = bytes.max(1);
        self
    }

    /// Processes and threads for the whole run.
    pub fn max_processes(mut self, n: u64) -> Self {
        self.policy.limits.max_processes = n.max(1);
        self
    }

    /// Open files per process.
    pub fn max_open_files(mut self, n: u64) -> Self {
        self.policy.limits.open_files = n.max(1);
        self
    }

    /// Memory for the whole run, in bytes.
    pub fn max_memory(mut self, bytes: u64) -> Self {
        self.policy.limits.memory_bytes = bytes.max(1);
        self
    }

    /// Allows shells and language runtimes (the kernel layers remain the boundary).
    pub fn allow_interpreters(mut self, allow: bool) -> Self {
        self.policy.exec.allow_interpreters = allow;
        self
    }

    /// Review mode: the command sees the workspace through a copy-on-write overlay and
    /// leaves it unchanged; the outcome's [`Outcome::changes`] holds what it changed, to
    /// [`apply`](crate::changes::ChangeSet::apply) or
    /// [`discard`](crate::changes::ChangeSet::discard). Runs in Tier C (native backend);
    /// refused where that is not available, never run directly.
    pub fn overlay(mut self) -> Self {
        self.request.workspace_mode = Some(tierbox_policy::WorkspaceMode::Overlay);
        self
    }

    /// The isolation tier to ask for.
    pub fn tier(mut self, tier: TierRequest) -> Self {
        self.request.tier = tier;
        self
    }

    /// Replaces the policy entirely (the builder's limit setters still apply after this).
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// State directory for private tmp and spill files.
    pub fn state_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.options.state_dir = dir.into();
        self
    }

    /// Validates without running: the Plan, or the rejection.
    pub fn plan(&self) -> Result<Plan, Rejection> {
        validate(
            &self.policy,
            &self.request,
            &ValidateContext::for_policy(&self.workspace, &self.policy)
                .with_state_dir(&self.options.state_dir),
        )
    }

    /// Runs the command to completion.
    pub async fn execute(self) -> Result<Outcome, RunError> {
        let plan = self.plan()?;
        match &self.stdin {
            None => run_plan(&plan, &self.options).await,
            Some(slot) => {
                let source = slot
                    .0
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take()
                    .ok_or_else(|| {
                        RunError::Launch(
                            "the builder's stdin_reader was read by an earlier execute".to_owned(),
                        )
                    })?;
                crate::supervisor::run_plan_with_stdin(&plan, &self.options, source, None).await
            }
        }
    }
}

/// Why a [`Runner::without_tier_a`] fails a Tier A run.
pub const TIER_A_NOT_BUILT_IN: &str = "tier a (WebAssembly) is not built into this runner (Runner::without_tier_a); Runner::new has it";

/// The tool-call path: a policy, a workspace, and requests from an agent.
#[derive(Debug, Clone)]
pub struct Runner {
    policy: Policy,
    workspace: PathBuf,
    options: RunOptions,
    background: Arc<BackgroundManager>,
    /// Its terms ([`crate::term`]), shared by clones.
    terms: Arc<crate::term::TermManager>,
    /// Signs attestations and appends to the audit log; opened on first use (shared by
    /// clones), retried after a failure.
    auditor: Arc<std::sync::Mutex<Option<Arc<Auditor>>>>,
    /// Runs Tier A plans; `None` for [`Runner::without_tier_a`].
    tier_a: Option<TierARun>,
    /// [`tierbox_attest::policy_digest`] of `policy`, which never changes after
    /// construction: computed on first use (shared by clones).
    policy_digest: Arc<std::sync::OnceLock<String>>,
    /// Whose the change sets of its overlay runs are ([`Runner::with_owner`]).
    owner: Arc<str>,
}

impl Runner {
    /// A runner for `policy`; the workspace is the policy's `workspace_root` or `.`.
    pub fn new(policy: Policy) -> Self {
        Self {
            tier_a: Some(crate::wasm::tier_a_run),
            ..Self::without_tier_a(policy)
        }
    }

    /// A runner for `policy` without Tier A: it runs Tier B and C as [`Runner::new`]'s
    /// does, and fails a run that would be Tier A (a `wasm_run`, or a `process_run` that
    /// [`Runner::is_tier_a`]) with [`RunError::Launch`] before anything runs. A program
    /// that builds its runners only with this never refers to the WebAssembly engine, so
    /// the linker leaves it out: the `tierbox` command's own binary, which starts for
    /// every call, does so and hands Tier A to the full one.
    ///
    /// ```
    /// use tierbox_policy::Policy;
    /// use tierbox_runner::Runner;
    ///
    /// let runner = Runner::without_tier_a(Policy::builtin_default());
    /// assert!(!runner.has_tier_a());
    /// assert!(Runner::new(Policy::builtin_default()).has_tier_a());
    /// ```
    pub fn without_tier_a(policy: Policy) -> Self {
        let workspace = policy
            .workspace_root
            .clone()
            .unwrap_or_else(|| PathBuf::from("."));
        let options = RunOptions::default();
        let background = Arc::new(BackgroundManager::new(
            policy.background.max_per_owner,
            policy.background.max_total,
            options.clone(),
        ));
        Self {
            policy,
            workspace,
            terms: Arc::new(crate::term::TermManager::new(options.clone())),
            options,
            background,
            auditor: Arc::default(),
            tier_a: None,
            policy_digest: Arc::default(),
            owner: crate::supervisor::local_owner().into(),
        }
    }

    /// This runner (sharing its background processes, auditor and caches) running for
    /// `owner`: the change set an overlay run keeps is `owner`'s
    /// ([`crate::review::KeptChanges::owner`]); by default the local user's
    /// ([`crate::supervisor::local_owner`]). A server names the authenticated caller.
    ///
    /// ```
    /// use tierbox_policy::Policy;
    /// use tierbox_runner::Runner;
    ///
    /// let runner = Runner::new(Policy::builtin_default());
    /// assert_eq!(runner.with_owner("session:ab12").owner(), "session:ab12");
    /// assert!(runner.owner().starts_with("uid:"));
    /// ```
    pub fn with_owner(&self, owner: impl Into<String>) -> Self {
        Self {
            owner: owner.into().into(),
            ..self.clone()
        }
    }

    /// Whose the change sets of this runner's overlay runs are.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Whether this runner runs Tier A ([`Runner::new`]) or not
    /// ([`Runner::without_tier_a`]).
    pub fn has_tier_a(&self) -> bool {
        self.tier_a.is_some()
    }

    /// Overrides the workspace.
    pub fn with_workspace(mut self, workspace: impl Into<PathBuf>) -> Self {
        self.workspace = workspace.into();
        self
    }

    /// Overrides the run options.
    pub fn with_options(mut self, options: RunOptions) -> Self {
        self.background = Arc::new(BackgroundManager::new(
            self.policy.background.max_per_owner,
            self.policy.background.max_total,
            options.clone(),
        ));
        self.terms = Arc::new(crate::term::TermManager::new(options.clone()));
        self.options = options;
        self.auditor = Arc::default();
        self
    }

    /// The runner's attestation signer and audit log, opened on first use: the policy's
    /// `[audit] signing_key`, else `<state_dir>/attest-key` (created 0600), and the
    /// policy's `[audit] log`, whose chain is verified when opened.
    pub fn auditor(&self) -> Result<Arc<Auditor>, RunError> {
        let mut slot = self
            .auditor
            .lock()
            .map_err(|_| RunError::Audit("auditor lock poisoned".to_owned()))?;
        if let Some(a) = slot.as_ref() {
            return Ok(a.clone());
        }
        let opened = Arc::new(
            Auditor::open(&self.policy, self.policy_digest(), &self.options.state_dir)
                .map_err(|e| RunError::Audit(e.to_string()))?,
        );
        *slot = Some(opened.clone());
        Ok(opened)
    }

    /// Records a rejection of `request` (found by [`Runner::check`] or the like, before
    /// any run) in the audit log, when the policy has one. Callers that check requests
    /// themselves use this so a refusal is evidence too. Blocking I/O (fsync).
    pub fn audit_rejection<T: serde::Serialize>(
        &self,
        request: &T,
        rejection: &Rejection,
    ) -> Result<(), RunError> {
        if self.policy.audit.log.is_none() {
            return Ok(());
        }
        self.auditor()?
            .attest_rejection(&request_json(request), rejection)
            .map(|_| ())
            .map_err(|e| RunError::Audit(e.to_string()))
    }

    /// Attests a finished run into its outcome, or records a rejection in the audit log.
    async fn seal(
        &self,
        auditor: Arc<Auditor>,
        request: serde_json::Value,
        started_unix_ms: u64,
        result: Result<Outcome, RunError>,
    ) -> Result<Outcome, RunError> {
        match result {
            Ok(mut outcome) => {
                let has_log = auditor.has_log();
                let owner = self.owner.clone();
                let seal = move |mut outcome: Outcome| {
                    match auditor.attest_run(&request, started_unix_ms, &outcome) {
                        Ok(a) => outcome.attestation = Some(a),
                        Err(e) => outcome.audit_error = Some(e.to_string()),
                    }
                    if let Err(e) = auditor.record_evictions(
                        &request,
                        &outcome.run_id,
                        &owner,
                        &outcome.changes_evicted,
                    ) {
                        outcome.audit_error.get_or_insert(e.to_string());
                    }
                    outcome
                };
                if !has_log {
                    // Signing alone takes tens of microseconds: no thread hand-off.
                    return Ok(seal(outcome));
                }
                // The audit log's fsync is slow: off the async threads.
                outcome = tokio::task::spawn_blocking(move || seal(outcome))
                    .await
                    .map_err(|e| RunError::Audit(format!("attestation task failed: {e}")))?;
                Ok(outcome)
            }
            Err(RunError::Rejected(rejection)) => {
                let logged = tokio::task::spawn_blocking(move || {
                    let r = auditor.attest_rejection(&request, &rejection);
                    (rejection, r)
                })
                .await;
                match logged {
                    Ok((rejection, Ok(_))) => Err(RunError::Rejected(rejection)),
                    Ok((rejection, Err(e))) => Err(RunError::Audit(format!(
                        "the request was rejected ({}: {rejection}) and the rejection could not be recorded: {e}",
                        rejection.code()
                    ))),
                    Err(e) => Err(RunError::Audit(format!("attestation task failed: {e}"))),
                }
            }
            Err(other) => Err(other),
        }
    }

    /// The runner's background processes (shared by its clones).
    pub fn background(&self) -> &Arc<BackgroundManager> {
        &self.background
    }

    /// Validates a request with `background: true` and starts it for `owner`; returns the
    /// handle after the startup window. See [`BackgroundManager`].
    pub async fn start_background(
        &self,
        owner: &str,
        request: &ProcessRunRequest,
    ) -> Result<BackgroundHandle, BackgroundError> {
        if !request.background {
            return Err(RunError::Launch(
                "start_background needs a request with background: true".to_owned(),
            )
            .into());
        }
        let (plan, seal) = self.sealed_plan(request, |_| Ok(())).await?;
        self.background.start_sealed(owner, &plan, Some(seal)).await
    }

    /// The runner's terms (shared by its clones).
    pub fn terms(&self) -> &Arc<crate::term::TermManager> {
        &self.terms
    }

    /// Validates a request with `background: true` and starts it for `owner` on a
    /// terminal of `size` (a term, [`crate::term`]), attested when it ends.
    pub async fn start_term(
        &self,
        owner: &str,
        request: &ProcessRunRequest,
        size: tierbox_sandbox::contract::TermSize,
    ) -> Result<crate::term::TermHandle, crate::term::TermError> {
        if !request.background {
            return Err(BackgroundError::from(RunError::Launch(
                "start_term needs a request with background: true".to_owned(),
            ))
            .into());
        }
        // Whatever is typed into a term is its stdin: an interpreter reading its program
        // from there is eval, checked as for a run given stdin (`exec.allow_eval`).
        let typed = |request: &ProcessRunRequest| {
            let mut as_typed = request.clone();
            as_typed.stdin = Some(crate::term::TYPED_INPUT.to_owned());
            self.check(&as_typed).map(drop)
        };
        let (plan, seal) = self.sealed_plan(request, typed).await?;
        self.terms.start(owner, &plan, size, Some(seal)).await
    }

    /// The plan of a background request and the seal its end is attested with; a
    /// rejection (the plan's, or `also`'s) is sealed (and logged) as a foreground one is.
    async fn sealed_plan(
        &self,
        request: &ProcessRunRequest,
        also: impl FnOnce(&ProcessRunRequest) -> Result<(), Rejection>,
    ) -> Result<(Plan, Seal), BackgroundError> {
        let auditor = self.auditor()?;
        let started_unix_ms = now_unix_ms();
        let json = request_json(request);
        let plan = match self.check(request).and_then(|p| also(request).map(|()| p)) {
            Ok(plan) => plan,
            Err(rejection) => {
                let result = self
                    .seal(auditor, json, started_unix_ms, Err(rejection.into()))
                    .await;
                return Err(result
                    .err()
                    .unwrap_or_else(|| {
                        RunError::Audit("a rejection was sealed as a run".to_owned())
                    })
                    .into());
            }
        };
        let seal = Seal {
            auditor,
            request: json,
            started_unix_ms,
        };
        Ok((plan, seal))
    }

    /// [`tierbox_attest::policy_digest`] of [`Runner::policy`], computed once per runner.
    pub(crate) fn policy_digest(&self) -> &str {
        self.policy_digest
            .get_or_init(|| tierbox_attest::policy_digest(&self.policy))
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Validates a request without running it.
    pub fn check(&self, request: &ProcessRunRequest) -> Result<Plan, Rejection> {
        validate(&self.policy, request, &self.context())
    }

    /// What the policy's filesystem grants resolve to in this runner's workspace, as a
    /// plan of no program ([`grants_plan`]): for checking a policy without a request.
    pub fn check_grants(&self) -> Result<Plan, Rejection> {
        grants_plan(&self.policy, &self.context())
    }

    /// Validates and runs a request. A request for tier `a` (or any request when the
    /// policy's minimum tier is `a`) runs the WASI build the policy maps its command to
    /// (`wasm.interpreters`); see [`Runner::check_tier_a`].
    pub async fn run(&self, request: &ProcessRunRequest) -> Result<Outcome, RunError> {
        self.execute(RunRequest::Process(request), None).await
    }

    /// [`Runner::run`], sending the output to `events` as it happens (bytes,
    /// line-buffered, redacted; see [`crate::stream`]). A rejection is returned before anything is sent.
    ///
    /// ```
    /// use tierbox_policy::{Policy, ProcessRunRequest};
    /// use tierbox_runner::{Runner, RunOptions};
    ///
    /// # let ws = tempfile::tempdir().unwrap();
    /// # let state = tempfile::tempdir().unwrap();
    /// let runner = Runner::new(Policy::builtin_default())
    ///     .with_workspace(ws.path())
    ///     .with_options(RunOptions { state_dir: state.path().to_path_buf() });
    /// let mut req = ProcessRunRequest::new("echo");
    /// req.args = vec!["streamed".to_owned()];
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    /// let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    /// let outcome = rt.block_on(runner.run_streaming(&req, tx))?;
    /// assert_eq!(outcome.stdout.text, "streamed\n");
    /// assert_eq!(rx.try_recv().unwrap().bytes, b"streamed\n");
    /// # Ok::<(), tierbox_runner::RunError>(())
    /// ```
    pub async fn run_streaming(
        &self,
        request: &ProcessRunRequest,
        events: tokio::sync::mpsc::Sender<OutputEvent>,
    ) -> Result<Outcome, RunError> {
        self.execute(RunRequest::Process(request), Some(events))
            .await
    }

    /// [`Runner::run_wasm`], sending the guest's output to `events` as it happens.
    pub async fn run_wasm_streaming(
        &self,
        request: &WasmRunRequest,
        events: tokio::sync::mpsc::Sender<OutputEvent>,
    ) -> Result<Outcome, RunError> {
        self.execute(RunRequest::Wasm(request), Some(events)).await
    }

    /// The run options (state directory).
    pub fn options(&self) -> &RunOptions {
        &self.options
    }

    /// The workspace requests are validated against.
    pub fn workspace(&self) -> &std::path::Path {
        &self.workspace
    }

    /// Whether `request` runs in Tier A: it asks for tier `a`, or the policy's minimum is
    /// `a`.
    pub fn is_tier_a(&self, request: &ProcessRunRequest) -> bool {
        request.tier == TierRequest::A || self.policy.tier.minimum == Tier::A
    }

    /// Validates a `process_run` request for Tier A without running it.
    pub fn check_tier_a(&self, request: &ProcessRunRequest) -> Result<WasmPlan, Rejection> {
        validate_tier_a(&self.policy, request, &self.context())
    }

    /// Validates a `wasm_run` request without running it.
    pub fn check_wasm(&self, request: &WasmRunRequest) -> Result<WasmPlan, Rejection> {
        validate_wasm(&self.policy, request, &self.context())
    }

    /// Validates and runs a `wasm_run` request in Tier A.
    ///
    /// ```
    /// use tierbox_policy::Policy;
    /// use tierbox_policy::wasm::WasmRunRequest;
    /// use tierbox_runner::{Runner, RunOptions};
    ///
    /// # let ws = tempfile::tempdir().unwrap();
    /// # let state = tempfile::tempdir().unwrap();
    /// std::fs::write(ws.path().join("exit7.wat"), r#"(module
    ///   (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
    ///   (memory (export "memory") 1)
    ///   (func (export "_start") (call $exit (i32.const 7))))"#).unwrap();
    /// let runner = Runner::new(Policy::default())
    ///     .with_workspace(ws.path())
    ///     .with_options(RunOptions { state_dir: state.path().to_path_buf() });
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    /// let outcome = rt.block_on(runner.run_wasm(&WasmRunRequest::module("exit7.wat")))?;
    /// assert_eq!(outcome.exit_code, Some(7));
    /// assert_eq!(outcome.backend, "tier_a_wasmtime");
    /// # Ok::<(), tierbox_runner::RunError>(())
    /// ```
    pub async fn run_wasm(&self, request: &WasmRunRequest) -> Result<Outcome, RunError> {
        self.execute(RunRequest::Wasm(request), None).await
    }

    /// Validates a request of either kind into the plan its tier carries out: a
    /// `process_run` for Tier A (see [`Runner::is_tier_a`]) or a `wasm_run` becomes a
    /// [`WasmPlan`], any other `process_run` a [`Plan`] for Tier B or C.
    pub fn prepare(&self, request: RunRequest<'_>) -> Result<Prepared, Rejection> {
        match request {
            RunRequest::Process(r) if self.is_tier_a(r) => {
                self.check_tier_a(r).map(|p| Prepared::Wasm(Box::new(p)))
            }
            RunRequest::Process(r) => self.check(r).map(|p| Prepared::Native(Box::new(p))),
            RunRequest::Wasm(r) => self.check_wasm(r).map(|p| Prepared::Wasm(Box::new(p))),
        }
    }

    /// The one path every run takes: validate ([`Runner::prepare`]), run in the plan's
    /// tier — sending the output to `events` as it happens when given — and seal the
    /// outcome (attestation, audit log; a rejection is recorded too). [`Runner::run`],
    /// [`Runner::run_streaming`], [`Runner::run_wasm`] and
    /// [`Runner::run_wasm_streaming`] are this with a fixed request kind.
    ///
    /// ```
    /// use tierbox_policy::{Policy, ProcessRunRequest};
    /// use tierbox_runner::{Runner, RunOptions, builder::RunRequest};
    ///
    /// # let ws = tempfile::tempdir().unwrap();
    /// # let state = tempfile::tempdir().unwrap();
    /// let runner = Runner::new(Policy::builtin_default())
    ///     .with_workspace(ws.path())
    ///     .with_options(RunOptions { state_dir: state.path().to_path_buf() });
    /// let request = ProcessRunRequest::new("true");
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    /// let outcome = rt.block_on(runner.execute(RunRequest::Process(&request), None))?;
    /// assert_eq!(outcome.exit_code, Some(0));
    /// assert!(outcome.attestation.is_some());
    /// # Ok::<(), tierbox_runner::RunError>(())
    /// ```
    pub async fn execute(
        &self,
        request: RunRequest<'_>,
        events: Option<tokio::sync::mpsc::Sender<OutputEvent>>,
    ) -> Result<Outcome, RunError> {
        self.execute_inner(request, events, None).await
    }

    /// [`Runner::execute`] with the run's stdin streamed from `stdin` as it arrives (the
    /// request's `stdin_stream` is set here; it may carry no `stdin` or `stdin_base64`).
    /// At most the run's stdin limit reaches the program; see [`crate::stdin`].
    ///
    /// ```
    /// use tierbox_policy::{Policy, ProcessRunRequest};
    /// use tierbox_runner::{Runner, RunOptions, StdinSource, builder::RunRequest};
    ///
    /// # let ws = tempfile::tempdir().unwrap();
    /// # let state = tempfile::tempdir().unwrap();
    /// let runner = Runner::new(Policy::builtin_default())
    ///     .with_workspace(ws.path())
    ///     .with_options(RunOptions { state_dir: state.path().to_path_buf() });
    /// let mut request = ProcessRunRequest::new("wc");
    /// request.args = vec!["-c".to_owned()];
    /// let stdin = StdinSource::from_reader(std::io::Cursor::new(vec![0u8; 100_000]));
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    /// let outcome = rt.block_on(runner.execute_with_stdin(RunRequest::Process(&request), stdin, None))?;
    /// assert_eq!(outcome.stdout.text, "100000\n");
    /// assert_eq!(outcome.stdin.unwrap().bytes, 100_000);
    /// # Ok::<(), tierbox_runner::RunError>(())
    /// ```
    pub async fn execute_with_stdin(
        &self,
        request: RunRequest<'_>,
        stdin: StdinSource,
        events: Option<tokio::sync::mpsc::Sender<OutputEvent>>,
    ) -> Result<Outcome, RunError> {
        match request {
            RunRequest::Process(r) => {
                let mut r = r.clone();
                r.stdin_stream = true;
                self.execute_inner(RunRequest::Process(&r), events, Some(stdin))
                    .await
            }
            RunRequest::Wasm(r) => {
                let mut r = r.clone();
                r.stdin_stream = true;
                self.execute_inner(RunRequest::Wasm(&r), events, Some(stdin))
                    .await
            }
        }
    }

    async fn execute_inner(
        &self,
        request: RunRequest<'_>,
        events: Option<tokio::sync::mpsc::Sender<OutputEvent>>,
        stdin: Option<StdinSource>,
    ) -> Result<Outcome, RunError> {
        let auditor = self.auditor()?;
        let started = now_unix_ms();
        let result = match self.prepare(request) {
            Ok(prepared) => self.run_prepared(prepared, events, stdin).await,
            Err(rejection) => Err(rejection.into()),
        };
        let json = match request {
            RunRequest::Process(r) => request_json(r),
            RunRequest::Wasm(r) => request_json(r),
        };
        self.seal(auditor, json, started, result).await
    }

    /// Validates `request` as [`Runner::execute`] would, and keeps the plan for
    /// [`Runner::execute_checked`]: for a caller that must know a refusal before it
    /// answers (a server starting a streamed response), without validating twice.
    ///
    /// ```
    /// use tierbox_policy::{Policy, ProcessRunRequest};
    /// use tierbox_runner::{Runner, RunOptions, builder::RunRequest};
    ///
    /// # let ws = tempfile::tempdir().unwrap();
    /// # let state = tempfile::tempdir().unwrap();
    /// let runner = Runner::new(Policy::builtin_default())
    ///     .with_workspace(ws.path())
    ///     .with_options(RunOptions { state_dir: state.path().to_path_buf() });
    /// let refused = runner.check_request(RunRequest::Process(&ProcessRunRequest::new("bash")));
    /// assert_eq!(refused.unwrap_err().code(), "exec.interpreter_denied");
    /// let checked = runner.check_request(RunRequest::Process(&ProcessRunRequest::new("true")))?;
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    /// let outcome = rt.block_on(runner.execute_checked(checked, None))?;
    /// assert_eq!(outcome.exit_code, Some(0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check_request(&self, request: RunRequest<'_>) -> Result<Checked, Rejection> {
        let prepared = self.prepare(request)?;
        let request_json = match request {
            RunRequest::Process(r) => request_json(r),
            RunRequest::Wasm(r) => request_json(r),
        };
        Ok(Checked {
            prepared,
            request_json,
        })
    }

    /// Runs a request [`Runner::check_request`] accepted, and seals its outcome as
    /// [`Runner::execute`] does (the attestation names the request that was checked).
    pub async fn execute_checked(
        &self,
        checked: Checked,
        events: Option<tokio::sync::mpsc::Sender<OutputEvent>>,
    ) -> Result<Outcome, RunError> {
        self.execute_checked_inner(checked, events, None).await
    }

    /// [`Runner::execute_checked`] of a request checked with `stdin_stream` set, its stdin
    /// streamed from `stdin` (see [`Runner::execute_with_stdin`]).
    pub async fn execute_checked_with_stdin(
        &self,
        checked: Checked,
        stdin: StdinSource,
        events: Option<tokio::sync::mpsc::Sender<OutputEvent>>,
    ) -> Result<Outcome, RunError> {
        self.execute_checked_inner(checked, events, Some(stdin))
            .await
    }

    async fn execute_checked_inner(
        &self,
        checked: Checked,
        events: Option<tokio::sync::mpsc::Sender<OutputEvent>>,
        stdin: Option<StdinSource>,
    ) -> Result<Outcome, RunError> {
        let auditor = self.auditor()?;
        let started = now_unix_ms();
        let result = self.run_prepared(checked.prepared, events, stdin).await;
        self.seal(auditor, checked.request_json, started, result)
            .await
    }

    /// Runs a plan in its tier, sending the output to `events` as it happens when given.
    async fn run_prepared(
        &self,
        prepared: Prepared,
        events: Option<tokio::sync::mpsc::Sender<OutputEvent>>,
        stdin: Option<StdinSource>,
    ) -> Result<Outcome, RunError> {
        match prepared {
            Prepared::Native(plan) => {
                crate::supervisor::run_plan_for(&plan, &self.options, events, &self.owner, stdin)
                    .await
            }
            Prepared::Wasm(plan) => match self.tier_a {
                Some(run) => run(&plan, &self.options, events, stdin).await,
                None => Err(RunError::Launch(TIER_A_NOT_BUILT_IN.to_owned())),
            },
        }
    }

    pub(crate) fn context(&self) -> ValidateContext {
        ValidateContext::for_policy(&self.workspace, &self.policy)
            .with_state_dir(&self.options.state_dir)
    }
}

/// A request of either kind, for [`Runner::execute`].
#[derive(Debug, Clone, Copy)]
pub enum RunRequest<'a> {
    /// A `process_run` (Tier B or C, or Tier A through `wasm.interpreters`).
    Process(&'a ProcessRunRequest),
    /// A `wasm_run` (Tier A).
    Wasm(&'a WasmRunRequest),
}

/// A request [`Runner::check_request`] accepted: its plan, and the request as the
/// attestation will name it. Only the runner that checked it makes one, so a plan run by
/// [`Runner::execute_checked`] is always one its policy produced.
#[derive(Debug, Clone)]
pub struct Checked {
    prepared: Prepared,
    request_json: serde_json::Value,
}

impl Checked {
    /// The plan the run will carry out.
    pub fn prepared(&self) -> &Prepared {
        &self.prepared
    }
}

/// A validated request: the plan of the tier that carries it out.
#[derive(Debug, Clone)]
pub enum Prepared {
    /// Tier B or C.
    Native(Box<Plan>),
    /// Tier A.
    Wasm(Box<WasmPlan>),
}

/// A request as JSON, for its digest (a request always serializes).
fn request_json<T: serde::Serialize>(request: &T) -> serde_json::Value {
    serde_json::to_value(request).unwrap_or(serde_json::Value::Null)
}
