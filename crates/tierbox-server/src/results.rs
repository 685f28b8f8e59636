//! The bodies the HTTP API answers with and the structured content of the MCP tools, as
//! types: what the server sends is serialized from them, and the OpenAPI document and
//! the tools' `outputSchema` are generated from them, so the two cannot drift apart.
//!
//! ```
//! let schema = tierbox_server::results::output_schema::<tierbox_server::results::RunResult>();
//! assert_eq!(schema["type"], "object");
//! assert!(schema["$defs"]["Outcome"]["properties"]["exit_code"].is_object());
//! ```

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use tierbox_policy::handle::Stream;
use tierbox_runner::background::{BackgroundHandle, BackgroundState, BackgroundStatus};
use tierbox_runner::{Outcome, RunnerIdentity};

/// What a `process_run` or `wasm_run` answers: the outcome of a foreground run, or the
/// handle of a background process.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum RunResult {
    /// A foreground run, finished.
    Finished(Box<Outcome>),
    /// A background process, started (`background: true`).
    Started(Box<BackgroundHandle>),
}

/// `POST /v1/process/check`: what a `process_run` of the request would do on this host,
/// without running anything (a refusal is an error answer, as for a run).
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum CheckResult {
    /// A Tier B or C run.
    Native {
        /// The validated plan (`tierbox_policy::Plan`): program, argv, environment,
        /// filesystem grants, network, limits, tier request.
        plan: Value,
        /// The tier and backend this host would use (`tier`, `backend`, or `tier: null`
        /// and `tier_rejected`), whether that backend refuses the grants
        /// (`refused_at_launch`), and what each backend would refuse or narrow
        /// (`grant_findings`).
        preflight: Value,
    },
    /// A Tier A run (an interpreter mapped to a WASI build, or a module).
    Wasm {
        /// The validated Tier A plan (`tierbox_policy::wasm::WasmPlan`).
        wasm_plan: Value,
    },
}

/// A session's background processes.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ProcessList {
    /// Each process's status, oldest first.
    pub processes: Vec<BackgroundStatus>,
}

/// Output read from an offset on, bytes exact: the part every read of a stream or a
/// terminal answers with.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ReadBytes {
    /// The offset the text starts at (later than the one asked for when bytes before it
    /// were dropped from the ring: see `missed_bytes`).
    pub offset: u64,
    /// The output (redacted), lossily decoded as UTF-8. A read that stops before the end
    /// of what is kept never ends inside a UTF-8 character.
    pub text: String,
    /// The output's bytes exactly (standard base64 with padding), present exactly when
    /// `text` is lossy (the bytes are not valid UTF-8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_base64: Option<String>,
    /// The offset to read from next.
    pub next_offset: u64,
    /// Bytes between the offset asked for and `offset` that are no longer kept.
    pub missed_bytes: u64,
    /// Bytes the stream (or terminal) has produced so far.
    pub total_bytes: u64,
}

impl From<tierbox_runner::ring::OutputChunk> for ReadBytes {
    fn from(c: tierbox_runner::ring::OutputChunk) -> Self {
        Self {
            offset: c.offset,
            text: c.text,
            bytes_base64: c.bytes_base64,
            next_offset: c.next_offset,
            missed_bytes: c.missed_bytes,
            total_bytes: c.total_bytes,
        }
    }
}

/// Output of a background process from an offset on.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct OutputChunk {
    /// The handle.
    pub id: String,
    /// Which stream was read.
    pub stream: Stream,
    /// The process's state when the output was read.
    pub state: BackgroundState,
    /// What was read.
    #[serde(flatten)]
    pub read: ReadBytes,
    /// Why the stream's spill file (`background.spill_bytes`) holds less than asked, or
    /// is missing (the cap `output.spill_total_bytes` was reached, a write failed): reads
    /// from offsets that left the in-memory ring then miss those bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spill_error: Option<String>,
}

/// What a write to a background process's stdin did.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct StdinWritten {
    /// The handle.
    pub id: String,
    /// Bytes written.
    pub bytes_written: u64,
    /// Whether stdin was closed after the write.
    pub closed: bool,
}

/// What a term's terminal showed from an offset on: `POST /v1/terms` (the startup
/// screen), `GET /v1/terms/{id}/output` and the `session_*` tools.
///
/// The bytes are exact in one encoding everywhere (`docs/api.md`, "Output: bytes and
/// text"): `text` is them decoded as UTF-8, and `bytes_base64` is present exactly when that
/// decoding was lossy. A terminal's output is what it showed: escape sequences, `\r\n`
/// line ends and echoed input included.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TermOutput {
    /// The term.
    pub id: String,
    /// The term's state after the read.
    pub state: BackgroundState,
    /// Whether the term has ended (`state` is not `running`): no more output will come
    /// once this read reached `total_bytes`.
    pub ended: bool,
    /// What was read (`missed_bytes`: bytes that had left the term's 1 MiB ring before
    /// they were read).
    #[serde(flatten)]
    pub read: ReadBytes,
}

/// A term, started: its status and what its terminal showed from offset 0 by the time the
/// answer was made (the startup window, and the wait or yield the request asked for).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TermStarted {
    /// The term's handle (32 hex digits of randomness, never a pid).
    pub id: String,
    /// Its status.
    pub status: BackgroundStatus,
    /// What its terminal showed so far; read on from `output.next_offset`.
    pub output: TermOutput,
}

/// What a write to a term's terminal did.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TermWritten {
    /// The term.
    pub id: String,
    /// Bytes written to the terminal (the end-of-file character not counted).
    pub bytes_written: u64,
    /// Whether the terminal's end-of-file character followed (input closed).
    pub eof: bool,
    /// `session_write` only: the output that arrived within the yield time, from the
    /// offset the call was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<TermOutput>,
}

/// A term's terminal was resized.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TermResized {
    /// The term.
    pub id: String,
    /// Rows now.
    pub rows: u16,
    /// Columns now.
    pub cols: u16,
}

/// A signal was sent to a term's foreground process group.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TermSignalled {
    /// The term.
    pub id: String,
    /// The signal's name (`INT`, `TERM`, …).
    pub signal: String,
}

/// `POST /v1/terms/{id}/ws_ticket`: a ticket for one WebSocket of the term (`GET
/// /v1/terms/{id}/ws?ticket=…`).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TermWsTicket {
    /// The ticket (`tbw_` and 64 hex digits): single use, for this term and this caller.
    pub ticket: String,
    /// How long it is valid from now, in milliseconds.
    pub expires_in_ms: u64,
}

/// A caller's terms.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TermList {
    /// Each term's status, oldest first.
    pub terms: Vec<BackgroundStatus>,
}

/// `GET /v1/health`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Health {
    /// Always `ok` when the server answers.
    pub status: HealthStatus,
    /// The server's version.
    pub version: String,
}

/// The one state a health answer reports.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HealthStatus {
    /// The server is up.
    Ok,
}

/// `GET /v1/daemon`: the server's process and its runner's identity. A local client hands
/// a run to the server only when its own identity is equal.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct DaemonIdentity {
    /// The server's process id.
    pub pid: u32,
    /// Its runner's identity.
    pub identity: RunnerIdentity,
}

/// `DELETE /v1/session`: the session's `run_owned` processes were killed.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SessionEnded {
    /// The session.
    pub session: String,
    /// Always true.
    pub ended: bool,
}

/// `POST /v1/sessions`: a session token for an agent.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SessionIssued {
    /// The session's id (`DELETE /v1/sessions/{id}` ends it).
    pub session: String,
    /// The name it was given.
    pub name: Option<String>,
    /// The owner of its background processes and change sets (`session:<id>`).
    pub owner: String,
    /// The bearer token (`tbs_…`), shown only here.
    pub token: String,
}

/// `changes_show` / `GET /v1/changes/{run_id}`: a kept change set, and its diff when
/// asked for.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ChangesShown {
    /// The change set and where it applies.
    #[serde(flatten)]
    pub kept: tierbox_runner::review::KeptChanges,
    /// A unified diff of the text files (`diff: true`), cut at 64 KiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

/// `changes_discard` / `POST /v1/changes/{run_id}/discard`: the change set was dropped.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ChangesDiscarded {
    /// The run whose changes were dropped.
    pub run_id: String,
    /// Always true.
    pub discarded: bool,
}

/// `GET /v1/changes`: every change set kept for review, oldest first.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ChangesList {
    /// The kept change sets.
    pub change_sets: Vec<tierbox_runner::review::KeptChanges>,
}

/// An error answer: a stable code, a message, and for a refused request what would let it
/// through.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// The error of an [`ErrorBody`].
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ErrorDetail {
    /// Stable code (`exec.not_allowed`, `auth.missing`, `http.not_found`, …).
    pub code: String,
    /// What happened, naming the rule and the offending value.
    pub message: String,
    /// What would let a rejected request through: the policy key to change, or the
    /// command that fixes the host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// The handle the error is about, when it is about one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handle: Option<Value>,
}

/// The JSON Schema (2020-12) of `T`, with its definitions under `$defs`, and `"type":
/// "object"` at the top as MCP requires of an `outputSchema`.
pub fn output_schema<T: JsonSchema>() -> Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut schema {
        m.entry("type").or_insert_with(|| Value::from("object"));
    }
    schema
}

/// The JSON value of a body (a body always serializes).
pub fn to_json<T: Serialize>(body: &T) -> Value {
    serde_json::to_value(body).unwrap_or(Value::Null)
}
