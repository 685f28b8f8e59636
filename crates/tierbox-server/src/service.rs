//! The operations, shared by the MCP server and the HTTP API: parse the request
//! document (closed shape, caps), check it against the policy, run it, and return JSON or
//! a [`ServiceError`] with a stable code.
//!
//! Every background operation is scoped to an owner: an MCP session, an HTTP session
//! token, or the operator's `Tierbox-Session`. A handle of another owner is
//! `background.not_found` (a term's, `term.not_found`: the term operations are in
//! [`crate::terms`]).
//!
//! Kept change sets are scoped the same way ([`Caller`]): a server sees only those made
//! for its own workspace, an agent (an MCP connection, an HTTP session token) only its
//! own — another's is `changes.not_found` — and applying is the operator's unless the
//! policy says `workspace.agent_may_apply`.

use serde_json::Value;
use tierbox_policy::handle::{
    ProcessHandleRequest, ProcessListRequest, ProcessOutputRequest, ProcessWriteStdinRequest,
};
use tierbox_policy::schema::{
    CHANGES_APPLY_TOOL, CHANGES_DISCARD_TOOL, CHANGES_SHOW_TOOL, PROCESS_KILL_TOOL,
    PROCESS_LIST_TOOL, PROCESS_OUTPUT_TOOL, PROCESS_RUN_TOOL, PROCESS_STATUS_TOOL,
    PROCESS_WRITE_STDIN_TOOL, WASM_RUN_TOOL,
};
use tierbox_policy::wasm::WasmRunRequest;
use tierbox_policy::{ProcessRunRequest, Rejection};
use tierbox_runner::background::BackgroundError;
use tierbox_runner::{Checked, Outcome, OutputEvent, RunError, RunRequest, Runner};

use crate::results::{OutputChunk, ProcessList, StdinWritten};
use tokio::sync::mpsc;

/// Characters of each stream's tail quoted in a run's text summary.
pub const SUMMARY_TAIL_CHARS: usize = 2000;

/// Who calls an operation: what of the kept change sets they may see and do.
///
/// ```
/// use tierbox_server::service::Caller;
///
/// let agent = Caller::Agent { owner: "mcp:1f2e".to_owned() };
/// assert_eq!(agent.owner(), "mcp:1f2e");
/// assert!(!agent.is_operator());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The operator (the HTTP operator token): every change set of the server's
    /// workspace, whoever's run made it; may apply. `owner` names its background
    /// processes and runs (`http:<Tierbox-Session>`).
    Operator {
        /// The owner of its background processes and change sets.
        owner: String,
    },
    /// An agent (an MCP connection, an HTTP session token): its own change sets only;
    /// applies them only with `workspace.agent_may_apply`.
    Agent {
        /// The owner of its background processes and change sets (`mcp:<id>`,
        /// `session:<id>`).
        owner: String,
    },
}

impl Caller {
    /// The owner of the caller's background processes and change sets.
    pub fn owner(&self) -> &str {
        match self {
            Self::Operator { owner } | Self::Agent { owner } => owner,
        }
    }

    /// Whether this is the operator.
    pub fn is_operator(&self) -> bool {
        matches!(self, Self::Operator { .. })
    }
}

/// A refused or failed operation: a stable code, a message naming the rule and the
/// offending value, and optional details (the handle of a process that exited during its
/// startup window).
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceError {
    /// Stable machine code (`exec.not_allowed`, `background.not_found`, `server.busy`, …).
    pub code: String,
    /// Human-readable message.
    pub message: String,
    /// Extra structured details.
    pub details: Option<Value>,
}

impl ServiceError {
    /// An error with a code and a message.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            details: None,
        }
    }

    /// `{"code", "message"}` plus `"fix"` — what would let a rejected request through
    /// ([`tierbox_policy::Rejection::fix_for`]) — and `"handle"` when there are.
    pub fn to_json(&self) -> Value {
        crate::results::to_json(&self.detail())
    }

    /// The error as the body's typed `error` ([`crate::results::ErrorDetail`]).
    pub fn detail(&self) -> crate::results::ErrorDetail {
        crate::results::ErrorDetail {
            code: self.code.clone(),
            message: self.message.clone(),
            fix: tierbox_policy::Rejection::fix_for(&self.code).map(str::to_owned),
            handle: self.details.clone(),
        }
    }

    /// The HTTP status for this code (see `docs/api.md`).
    pub fn http_status(&self) -> u16 {
        match self.code.as_str() {
            "input.too_large" => 413,
            c if c.starts_with("input.") || c == "http.bad_request" => 400,
            "changes.apply_denied" | "auth.forbidden" => 403,
            "sessions.limit" => 409,
            "sessions.not_found" => 404,
            c if c.starts_with("auth.") => 401,
            "background.not_found" | "http.not_found" | "changes.not_found" | "term.not_found" => {
                404
            }
            "term.bad_size" | "term.bad_wait" | "term.signal_refused" => 400,
            "term.limit" | "term.input" | "term.ended" | "term.controlled" | "term.view_only" => {
                409
            }
            "term.terminal" => 500,
            "file.not_found" => 404,
            "file.too_large" => 413,
            "file.changed" => 409,
            "file.io" => 500,
            "changes.bad_run_id" => 400,
            "changes.conflict"
            | "changes.flagged"
            | "changes.changed_during_run"
            | "changes.unsafe_path"
            | "changes.incomplete"
            | "changes.not_in_change_set" => 409,
            "changes.io" | "changes.rollback_incomplete" => 500,
            "changes.over_cap" => 507,
            "http.method_not_allowed" => 405,
            "background.limit" | "background.stdin" | "daemon.identity_mismatch" => 409,
            "http.unsupported_media_type" => 415,
            "server.busy" => 429,
            "run.failed" => 500,
            "audit.unavailable" => 503,
            "ws.ticket_refused" => 401,
            "ws.origin_refused" => 403,
            "ws.ticket_limit" | "ws.limit" => 429,
            "ws.upgrade_required" => 426,
            _ => 422,
        }
    }
}

impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ServiceError {}

impl From<Rejection> for ServiceError {
    fn from(r: Rejection) -> Self {
        Self::new(r.code(), r.to_string())
    }
}

impl From<RunError> for ServiceError {
    fn from(e: RunError) -> Self {
        match e {
            RunError::Rejected(r) => r.into(),
            RunError::Audit(m) => Self::new("audit.unavailable", m),
            other => Self::new("run.failed", other.to_string()),
        }
    }
}

impl From<tierbox_runner::review::ReviewError> for ServiceError {
    fn from(e: tierbox_runner::review::ReviewError) -> Self {
        Self::new(e.code(), e.to_string())
    }
}

impl From<BackgroundError> for ServiceError {
    fn from(e: BackgroundError) -> Self {
        let code = e.code();
        match e {
            BackgroundError::Run(run) => run.into(),
            BackgroundError::ExitedDuringStartup(handle) => Self {
                code: code.to_owned(),
                message: format!(
                    "the process exited during its {} ms startup window ({}); its output is \
                     in handle.startup_stdout / startup_stderr",
                    tierbox_runner::background::STARTUP_WINDOW_MS,
                    exit_text(
                        handle.status.exit_code,
                        handle.status.signal_name.as_deref()
                    ),
                ),
                details: serde_json::to_value(&*handle).ok(),
            },
            other => Self::new(code, other.to_string()),
        }
    }
}

fn exit_text(code: Option<i32>, signal: Option<&str>) -> String {
    match (code, signal) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("killed by {s}"),
        (None, None) => "no exit status".to_owned(),
    }
}

/// A run request that passed the policy: the request, and its plan kept for the run (not
/// `Clone`: a streamed stdin is read by one run).
#[derive(Debug)]
pub struct CheckedRun<T> {
    /// The request as parsed.
    pub request: T,
    checked: Checked,
    /// The run's streamed stdin (the HTTP streamed form), for a request checked with
    /// [`Service::check_run_streaming`] or [`Service::check_wasm_streaming`].
    stdin: Option<tierbox_runner::StdinSource>,
}

/// What a `process_run` returned: the typed body [`crate::results::RunResult`].
pub type RunReply = crate::results::RunResult;

impl RunReply {
    /// The structured result.
    pub fn to_json(&self) -> Value {
        crate::results::to_json(self)
    }

    /// The structured result with each stream's text bounded ([`Outcome::bounded`]): a
    /// tool result a client hands to a model whole.
    pub fn to_bounded_json(&self) -> Value {
        match self {
            Self::Finished(o) => crate::results::to_json(&o.bounded()),
            Self::Started(h) => crate::results::to_json(h),
        }
    }

    /// A short text a model can read: how it ended, truncation, the tail of the output.
    pub fn summary(&self) -> String {
        match self {
            Self::Finished(o) => outcome_summary(o),
            Self::Started(h) => {
                let mut s = format!(
                    "started background process {} ({}, lifetime {} ms, tier {} {}); read \
                     its output with process_output, stop it with process_kill",
                    h.status.id,
                    serde_json::to_value(h.status.lifetime)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default(),
                    h.status.lifetime_ms,
                    h.status.tier,
                    h.status.backend,
                );
                push_tail(&mut s, "startup stdout", &h.startup_stdout);
                push_tail(&mut s, "startup stderr", &h.startup_stderr);
                s
            }
        }
    }
}

/// The last `SUMMARY_TAIL_CHARS` characters of `text`, on a char boundary.
fn tail(text: &str) -> (&str, bool) {
    let n = text.chars().count();
    if n <= SUMMARY_TAIL_CHARS {
        return (text, false);
    }
    let skip = text
        .char_indices()
        .nth(n - SUMMARY_TAIL_CHARS)
        .map_or(0, |(i, _)| i);
    (&text[skip..], true)
}

fn push_tail(s: &mut String, name: &str, text: &str) {
    if text.is_empty() {
        return;
    }
    let (t, cut) = tail(text);
    let what = if cut {
        format!("last {SUMMARY_TAIL_CHARS} characters of {name}")
    } else {
        name.to_owned()
    };
    s.push_str(&format!("\n--- {what} ---\n{t}"));
    if !t.ends_with('\n') {
        s.push('\n');
    }
}

/// The text summary of an outcome.
pub fn outcome_summary(o: &Outcome) -> String {
    let how = if o.timed_out {
        format!("timed out after {} ms (exit status 124)", o.duration_ms)
    } else {
        format!(
            "{} in {} ms",
            exit_text(o.exit_code, o.signal_name.as_deref()),
            o.duration_ms
        )
    };
    let mut s = format!("{how} · tier {} ({})", o.tier, o.backend);
    if let Some(limit) = o.limit_hit {
        let name = serde_json::to_value(limit)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        s.push_str(&format!(" · limit hit: {name}"));
    }
    for (name, out) in [("stdout", &o.stdout), ("stderr", &o.stderr)] {
        if out.truncated {
            s.push_str(&format!(
                "\n[{name} truncated: {} of {} bytes omitted]",
                out.omitted_bytes, out.total_bytes
            ));
        }
    }
    if o.redacted {
        s.push_str("\n[credentials in the output were redacted]");
    }
    // Those that may explain the end, as the CLI's line names them (the outcome has all).
    for d in tierbox_runner::denials::worth_naming(&o.denials, o.success()) {
        s.push_str(&format!(
            "\n[denied: {} {} ({}, {}×); to allow: {}]",
            d.operation,
            d.target,
            d.layer.name(),
            d.count,
            d.hint
        ));
    }
    push_tail(&mut s, "stdout", &o.stdout.text);
    push_tail(&mut s, "stderr", &o.stderr.text);
    s
}

/// The operations over one [`Runner`] (policy, workspace, background processes).
#[derive(Debug, Clone)]
pub struct Service {
    runner: Runner,
}

impl Service {
    /// A service running requests with `runner`.
    pub fn new(runner: Runner) -> Self {
        Self { runner }
    }

    /// The runner.
    pub fn runner(&self) -> &Runner {
        &self.runner
    }

    /// Parses a `process_run` document and checks it against the policy without running
    /// anything, so a refusal is known before a response starts streaming. The plan is
    /// kept for [`Service::process_run`], which does not validate again.
    pub fn check_run(&self, body: &[u8]) -> Result<CheckedRun<ProcessRunRequest>, ServiceError> {
        self.check_run_with(body, None)
    }

    /// [`Service::check_run`] of a request whose stdin is `stdin`, streamed to the run
    /// as it arrives (`stdin_stream`; the document may carry no `stdin`).
    pub fn check_run_streaming(
        &self,
        body: &[u8],
        stdin: tierbox_runner::StdinSource,
    ) -> Result<CheckedRun<ProcessRunRequest>, ServiceError> {
        self.check_run_with(body, Some(stdin))
    }

    fn check_run_with(
        &self,
        body: &[u8],
        stdin: Option<tierbox_runner::StdinSource>,
    ) -> Result<CheckedRun<ProcessRunRequest>, ServiceError> {
        let mut request = ProcessRunRequest::from_json(body)?;
        request.stdin_stream = stdin.is_some();
        let checked = self.runner.check_request(RunRequest::Process(&request));
        let checked = self.refused(&request, checked)?;
        Ok(CheckedRun {
            request,
            checked,
            stdin,
        })
    }

    /// A policy refusal of a parsed request, recorded in the audit log first.
    fn refused<T: serde::Serialize>(
        &self,
        req: &T,
        checked: Result<Checked, Rejection>,
    ) -> Result<Checked, ServiceError> {
        match checked {
            Ok(checked) => Ok(checked),
            Err(rejection) => {
                self.runner.audit_rejection(req, &rejection)?;
                Err(rejection.into())
            }
        }
    }

    /// What a `process_run` of the document would do on this host, without running it:
    /// the plan and the preflight (tier, backend, what the backends refuse), or the
    /// refusal. A check is not a run: nothing is attested or logged.
    pub fn check(&self, body: &[u8]) -> Result<crate::results::CheckResult, ServiceError> {
        use crate::results::CheckResult;
        let request = ProcessRunRequest::from_json(body)?;
        Ok(match self.runner.prepare(RunRequest::Process(&request))? {
            tierbox_runner::Prepared::Native(plan) => CheckResult::Native {
                preflight: tierbox_runner::host::Preflight::of(&plan).to_json(),
                plan: crate::results::to_json(&plan),
            },
            tierbox_runner::Prepared::Wasm(plan) => CheckResult::Wasm {
                wasm_plan: crate::results::to_json(&plan),
            },
        })
    }

    /// Parses and checks a `wasm_run` document.
    pub fn check_wasm(&self, body: &[u8]) -> Result<CheckedRun<WasmRunRequest>, ServiceError> {
        self.check_wasm_with(body, None)
    }

    /// [`Service::check_wasm`] of a request whose stdin is `stdin`, streamed.
    pub fn check_wasm_streaming(
        &self,
        body: &[u8],
        stdin: tierbox_runner::StdinSource,
    ) -> Result<CheckedRun<WasmRunRequest>, ServiceError> {
        self.check_wasm_with(body, Some(stdin))
    }

    fn check_wasm_with(
        &self,
        body: &[u8],
        stdin: Option<tierbox_runner::StdinSource>,
    ) -> Result<CheckedRun<WasmRunRequest>, ServiceError> {
        let mut request = WasmRunRequest::from_json(body)?;
        request.stdin_stream = stdin.is_some();
        let checked = self.runner.check_request(RunRequest::Wasm(&request));
        let checked = self.refused(&request, checked)?;
        Ok(CheckedRun {
            request,
            checked,
            stdin,
        })
    }

    /// Runs a checked `process_run` request for `owner`: to the end, or, with
    /// `background: true`, until its startup window has passed. With `events`, a
    /// foreground run's output is also sent there as it happens.
    pub async fn process_run(
        &self,
        owner: &str,
        run: CheckedRun<ProcessRunRequest>,
        events: Option<mpsc::Sender<OutputEvent>>,
    ) -> Result<RunReply, ServiceError> {
        if run.request.background {
            let handle = self.runner.start_background(owner, &run.request).await?;
            return Ok(RunReply::Started(Box::new(handle)));
        }
        let runner = self.runner.with_owner(owner);
        let outcome = match run.stdin {
            Some(stdin) => {
                runner
                    .execute_checked_with_stdin(run.checked, stdin, events)
                    .await?
            }
            None => runner.execute_checked(run.checked, events).await?,
        };
        Ok(RunReply::Finished(Box::new(outcome)))
    }

    /// Runs a checked `wasm_run` request.
    pub async fn wasm_run(
        &self,
        run: CheckedRun<WasmRunRequest>,
        events: Option<mpsc::Sender<OutputEvent>>,
    ) -> Result<RunReply, ServiceError> {
        let outcome = match run.stdin {
            Some(stdin) => {
                self.runner
                    .execute_checked_with_stdin(run.checked, stdin, events)
                    .await?
            }
            None => self.runner.execute_checked(run.checked, events).await?,
        };
        Ok(RunReply::Finished(Box::new(outcome)))
    }

    /// Status of one of `owner`'s background processes.
    pub async fn status(
        &self,
        owner: &str,
        req: &ProcessHandleRequest,
    ) -> Result<Value, ServiceError> {
        let s = self.runner.background().status(owner, &req.id).await?;
        Ok(serde_json::to_value(s).unwrap_or(Value::Null))
    }

    /// Output of one of `owner`'s background processes from an offset on.
    pub async fn output(
        &self,
        owner: &str,
        req: &ProcessOutputRequest,
    ) -> Result<Value, ServiceError> {
        let bg = self.runner.background();
        let chunk = bg.output(owner, &req.id, req.stream, req.offset, req.max_bytes)?;
        let status = bg.status(owner, &req.id).await?;
        Ok(crate::results::to_json(&OutputChunk {
            id: req.id.clone(),
            stream: req.stream,
            state: status.state,
            spill_error: chunk.spill_error.clone(),
            read: chunk.into(),
        }))
    }

    /// Writes to the stdin of one of `owner`'s background processes.
    pub async fn write_stdin(
        &self,
        owner: &str,
        req: &ProcessWriteStdinRequest,
    ) -> Result<Value, ServiceError> {
        let n = self
            .runner
            .background()
            .write_stdin(owner, &req.id, req.data.as_bytes(), req.close)
            .await?;
        Ok(crate::results::to_json(&StdinWritten {
            id: req.id.clone(),
            bytes_written: n as u64,
            closed: req.close,
        }))
    }

    /// Kills one of `owner`'s background processes (its whole tree).
    pub async fn kill(
        &self,
        owner: &str,
        req: &ProcessHandleRequest,
    ) -> Result<Value, ServiceError> {
        let s = self.runner.background().kill(owner, &req.id).await?;
        Ok(serde_json::to_value(s).unwrap_or(Value::Null))
    }

    /// `owner`'s background processes.
    pub async fn list(&self, owner: &str) -> Value {
        crate::results::to_json(&ProcessList {
            processes: self.runner.background().list(owner).await,
        })
    }

    /// The kept change sets of this runner's state directory.
    fn change_store(&self) -> tierbox_runner::review::ChangeStore {
        tierbox_runner::review::ChangeStore::new(&self.runner.options().state_dir)
    }

    /// The server's workspace, resolved (change sets record theirs resolved).
    fn own_workspace(&self) -> std::path::PathBuf {
        let ws = self.runner.workspace();
        std::fs::canonicalize(ws).unwrap_or_else(|_| ws.to_path_buf())
    }

    /// Whether `caller` may see `kept`: made for this server's workspace, and the
    /// operator's or the caller's own.
    fn visible(
        caller: &Caller,
        workspace: &std::path::Path,
        kept: &tierbox_runner::review::KeptChanges,
    ) -> bool {
        let same_workspace = kept.workspace == workspace
            || std::fs::canonicalize(&kept.workspace).is_ok_and(|w| w == workspace);
        same_workspace
            && match caller {
                Caller::Operator { .. } => true,
                Caller::Agent { owner } => !owner.is_empty() && kept.owner == *owner,
            }
    }

    /// The change set of `run_id` when `caller` may see it; else `changes.not_found`,
    /// as for one that does not exist.
    fn visible_set(
        caller: &Caller,
        workspace: &std::path::Path,
        store: &tierbox_runner::review::ChangeStore,
        run_id: &str,
    ) -> Result<tierbox_runner::review::KeptChanges, tierbox_runner::review::ReviewError> {
        let kept = store.get(run_id)?;
        if Self::visible(caller, workspace, &kept) {
            Ok(kept)
        } else {
            Err(tierbox_runner::review::ReviewError::NotFound {
                run_id: run_id.to_owned(),
            })
        }
    }

    /// The change sets `caller` may see, oldest first.
    pub async fn changes_list(&self, caller: &Caller) -> Result<Value, ServiceError> {
        let store = self.change_store();
        let (caller, workspace) = (caller.clone(), self.own_workspace());
        let change_sets = blocking(move || {
            let mut all = store.list();
            all.retain(|k| Self::visible(&caller, &workspace, k));
            Ok(all)
        })
        .await?;
        Ok(crate::results::to_json(&crate::results::ChangesList {
            change_sets,
        }))
    }

    /// The change set an overlay run kept, with its diff when asked for, when `caller`
    /// may see it ([`Caller`]).
    pub async fn changes_show(
        &self,
        caller: &Caller,
        req: &tierbox_policy::handle::ChangesShowRequest,
    ) -> Result<Value, ServiceError> {
        let store = self.change_store();
        let (run_id, diff) = (req.run_id.clone(), req.diff);
        let (caller, workspace) = (caller.clone(), self.own_workspace());
        let shown = blocking(move || {
            let kept = Self::visible_set(&caller, &workspace, &store, &run_id)?;
            let diff = match diff {
                true => Some(store.diff(&run_id, tierbox_runner::review::DEFAULT_DIFF_BYTES)?),
                false => None,
            };
            Ok(crate::results::ChangesShown { kept, diff })
        })
        .await?;
        Ok(crate::results::to_json(&shown))
    }

    /// Whether `caller` may apply change sets here: the operator always, an agent when
    /// the policy says `workspace.agent_may_apply`.
    pub fn may_apply(&self, caller: &Caller) -> bool {
        caller.is_operator() || self.runner.policy().workspace.agent_may_apply
    }

    /// Applies a kept change set (all of it, or the listed paths), all or nothing, when
    /// `caller` may see it and may apply ([`Service::may_apply`]); flagged changes only
    /// when named or with `include_flagged` (`changes.flagged` otherwise).
    pub async fn changes_apply(
        &self,
        caller: &Caller,
        req: &tierbox_policy::handle::ChangesApplyRequest,
    ) -> Result<Value, ServiceError> {
        let store = self.change_store();
        let (run_id, include_flagged) = (req.run_id.clone(), req.include_flagged);
        let paths: Vec<std::path::PathBuf> = req.paths.iter().map(Into::into).collect();
        let may_apply = self.may_apply(caller);
        let (caller, workspace) = (caller.clone(), self.own_workspace());
        if !may_apply {
            // Whatever the set: the answer says nothing of whether it exists.
            return Err(apply_denied(&run_id));
        }
        let applied = blocking(move || {
            Self::visible_set(&caller, &workspace, &store, &run_id)?;
            let paths = (!paths.is_empty()).then_some(paths.as_slice());
            store.apply(&run_id, paths, include_flagged)
        })
        .await?;
        Ok(crate::results::to_json(&applied))
    }

    /// Drops a kept change set unapplied, when `caller` may see it.
    pub async fn changes_discard(
        &self,
        caller: &Caller,
        req: &tierbox_policy::handle::ChangesDiscardRequest,
    ) -> Result<Value, ServiceError> {
        let store = self.change_store();
        let run_id = req.run_id.clone();
        let id = run_id.clone();
        let (caller, workspace) = (caller.clone(), self.own_workspace());
        blocking(move || {
            Self::visible_set(&caller, &workspace, &store, &id)?;
            store.discard(&id)
        })
        .await?;
        Ok(crate::results::to_json(&crate::results::ChangesDiscarded {
            run_id,
            discarded: true,
        }))
    }

    /// `owner`'s session has ended: its `run_owned` processes and terms are killed and
    /// awaited.
    pub async fn end_owner(&self, owner: &str) {
        self.runner.background().end_owner(owner).await;
        self.runner.terms().end_owner(owner).await;
    }

    /// Kills every background process and term and waits for them.
    pub async fn shutdown(&self) {
        self.runner.background().shutdown().await;
        self.runner.terms().shutdown().await;
    }

    /// Dispatches a tool call by name: `args` is the tool's JSON arguments document.
    /// Returns the structured result and its text summary. An unknown tool is `None`.
    pub async fn call_tool(
        &self,
        caller: &Caller,
        tool: &str,
        args: &[u8],
        events: Option<mpsc::Sender<OutputEvent>>,
    ) -> Option<Result<(Value, String), ServiceError>> {
        let owner = caller.owner();
        if crate::terms::TERM_TOOL_NAMES.contains(&tool) {
            return Some(self.call_term_tool(owner, tool, args).await);
        }
        if crate::files::FILE_TOOL_NAMES.contains(&tool) {
            return Some(self.call_file_tool(owner, tool, args).await);
        }
        let result = match tool {
            PROCESS_RUN_TOOL => {
                async {
                    let run = self.check_run(args)?;
                    let reply = self.process_run(owner, run, events).await?;
                    Ok((reply.to_bounded_json(), reply.summary()))
                }
                .await
            }
            WASM_RUN_TOOL => {
                async {
                    let run = self.check_wasm(args)?;
                    let reply = self.wasm_run(run, events).await?;
                    Ok((reply.to_bounded_json(), reply.summary()))
                }
                .await
            }
            PROCESS_STATUS_TOOL => {
                async {
                    let v = self
                        .status(owner, &ProcessHandleRequest::from_json(args)?)
                        .await?;
                    Ok((v.clone(), status_line(&v)))
                }
                .await
            }
            PROCESS_KILL_TOOL => {
                async {
                    let v = self
                        .kill(owner, &ProcessHandleRequest::from_json(args)?)
                        .await?;
                    Ok((v.clone(), status_line(&v)))
                }
                .await
            }
            PROCESS_OUTPUT_TOOL => {
                async {
                    let v = self
                        .output(owner, &ProcessOutputRequest::from_json(args)?)
                        .await?;
                    let summary = format!(
                        "{} bytes from offset {} (next_offset {}, missed {}, state {}):\n{}",
                        v["next_offset"].as_u64().unwrap_or(0) - v["offset"].as_u64().unwrap_or(0),
                        v["offset"],
                        v["next_offset"],
                        v["missed_bytes"],
                        v["state"].as_str().unwrap_or(""),
                        v["text"].as_str().unwrap_or(""),
                    );
                    Ok((v, summary))
                }
                .await
            }
            PROCESS_WRITE_STDIN_TOOL => {
                async {
                    let v = self
                        .write_stdin(owner, &ProcessWriteStdinRequest::from_json(args)?)
                        .await?;
                    let summary = format!(
                        "wrote {} bytes to {}{}",
                        v["bytes_written"],
                        v["id"].as_str().unwrap_or(""),
                        if v["closed"] == true {
                            "; stdin closed"
                        } else {
                            ""
                        }
                    );
                    Ok((v, summary))
                }
                .await
            }
            PROCESS_LIST_TOOL => {
                async {
                    ProcessListRequest::from_json(args)?;
                    let v = self.list(owner).await;
                    let lines: Vec<String> = v["processes"]
                        .as_array()
                        .map(|ps| ps.iter().map(status_line).collect())
                        .unwrap_or_default();
                    let summary = if lines.is_empty() {
                        "no background processes".to_owned()
                    } else {
                        lines.join("\n")
                    };
                    Ok((v, summary))
                }
                .await
            }
            CHANGES_SHOW_TOOL => {
                async {
                    let req = tierbox_policy::handle::ChangesShowRequest::from_json(args)?;
                    let v = self.changes_show(caller, &req).await?;
                    Ok((v.clone(), changes_summary(&v)))
                }
                .await
            }
            CHANGES_APPLY_TOOL => {
                async {
                    let req = tierbox_policy::handle::ChangesApplyRequest::from_json(args)?;
                    let v = self.changes_apply(caller, &req).await?;
                    let summary = format!(
                        "applied {} change(s) of run {}; {} still kept",
                        v["applied"].as_array().map_or(0, Vec::len),
                        req.run_id,
                        v["remaining"]
                    );
                    Ok((v, summary))
                }
                .await
            }
            CHANGES_DISCARD_TOOL => {
                async {
                    let req = tierbox_policy::handle::ChangesDiscardRequest::from_json(args)?;
                    let v = self.changes_discard(caller, &req).await?;
                    Ok((v, format!("discarded the changes of run {}", req.run_id)))
                }
                .await
            }
            _ => return None,
        };
        Some(result)
    }
}

/// The refusal of an apply by an agent where `workspace.agent_may_apply` is off.
fn apply_denied(run_id: &str) -> ServiceError {
    ServiceError::new(
        "changes.apply_denied",
        format!(
            "applying is a person's act here (workspace.agent_may_apply = false): nothing of \
             run {run_id} was applied. Show it to the operator, who applies it with \
             `tierbox changes apply {run_id}` or the operator token; or set \
             workspace.agent_may_apply = true in the server's policy"
        ),
    )
}

/// Runs a change-store operation on a blocking thread (it reads and writes files).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, tierbox_runner::review::ReviewError> + Send + 'static,
) -> Result<T, ServiceError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(Into::into),
        Err(e) => Err(ServiceError::new(
            "run.failed",
            format!("change store: {e}"),
        )),
    }
}

/// A change set for a tool's text content: one line per change, then the diff.
fn changes_summary(v: &Value) -> String {
    let mut lines = vec![format!(
        "run {}: workspace {}",
        v["run_id"].as_str().unwrap_or(""),
        v["workspace"].as_str().unwrap_or("")
    )];
    for c in v["changes"]["changes"].as_array().into_iter().flatten() {
        let flags: Vec<&str> = c["flags"]
            .as_array()
            .map(|f| f.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        lines.push(format!(
            "{} {}{}",
            c["kind"].as_str().unwrap_or(""),
            c["path"].as_str().unwrap_or(""),
            if flags.is_empty() {
                String::new()
            } else {
                format!(" [{}]", flags.join(", "))
            }
        ));
    }
    if let Some(diff) = v["diff"].as_str() {
        lines.push(diff.to_owned());
    }
    lines.join("\n")
}

/// One line on a background process for a tool's text content: id, state and how it
/// ended, the command, output sizes, tier; the structured content has the rest (the
/// attestation included), so the text stays short for a model to read.
pub(crate) fn status_line(v: &Value) -> String {
    let str_of = |k: &str| v[k].as_str().unwrap_or("").to_owned();
    let ended = match (&v["exit_code"], v["signal_name"].as_str()) {
        (Value::Number(code), _) => format!(", exit {code}"),
        (_, Some(name)) => format!(", {name}"),
        _ => String::new(),
    };
    let argv: Vec<&str> = v["argv"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let failure = v["sandbox_failure"]
        .as_str()
        .map(|f| format!("; sandbox failure: {f}"))
        .unwrap_or_default();
    format!(
        "{} {}{ended}: {} · stdout {} bytes, stderr {} bytes · tier {} ({}){}{failure}",
        str_of("id"),
        str_of("state"),
        argv.join(" "),
        v["stdout_bytes"],
        v["stderr_bytes"],
        str_of("tier"),
        str_of("backend"),
        if v["attestation"].is_object() {
            " · attested"
        } else {
            ""
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_status_line_is_short_and_leaves_the_attestation_to_the_structured_content() {
        let v = json!({
            "id": "0123abcd", "state": "exited", "exit_code": 0, "argv": ["sleep", "1"],
            "stdout_bytes": 5, "stderr_bytes": 0, "tier": "c", "backend": "tier_c_linux_native",
            "attestation": { "signature": "x".repeat(3000) },
        });
        let line = status_line(&v);
        assert_eq!(
            line,
            "0123abcd exited, exit 0: sleep 1 · stdout 5 bytes, stderr 0 bytes · tier c (tier_c_linux_native) · attested"
        );
    }

    #[test]
    fn statuses_follow_the_documented_table() {
        for (code, status) in [
            ("input.malformed", 400),
            ("input.handle_invalid", 400),
            ("input.too_large", 413),
            ("auth.invalid", 401),
            ("background.not_found", 404),
            ("background.limit", 409),
            ("term.not_found", 404),
            ("term.bad_size", 400),
            ("term.bad_wait", 400),
            ("term.signal_refused", 400),
            ("input.data_conflict", 400),
            ("term.limit", 409),
            ("term.input", 409),
            ("term.ended", 409),
            ("term.exited_during_startup", 422),
            ("term.terminal", 500),
            ("daemon.identity_mismatch", 409),
            ("exec.not_allowed", 422),
            ("tier.unavailable", 422),
            ("background.exited_during_startup", 422),
            ("server.busy", 429),
            ("run.failed", 500),
        ] {
            assert_eq!(ServiceError::new(code, "m").http_status(), status, "{code}");
        }
    }

    #[test]
    fn tails_are_cut_on_char_boundaries() {
        let text = "é".repeat(SUMMARY_TAIL_CHARS + 10);
        let (t, cut) = tail(&text);
        assert!(cut);
        assert_eq!(t.chars().count(), SUMMARY_TAIL_CHARS);
        assert_eq!(tail("short"), ("short", false));
    }
}
