//! Terms (interactive programs on a terminal of their own, [`tierbox_runner::term`]) over
//! the HTTP API (`/v1/terms`, [`crate::http`]) and MCP (the `session_*` tools): the
//! request shapes, their checks, the operations over a [`Service`], and the mapping of
//! every [`TermError`] to a stable code.
//!
//! Invariants:
//!
//! - every term belongs to the owner whose request started it; another owner's id — like
//!   an id that never existed — is `term.not_found`, whatever the operation;
//! - a term is a background process: `background` is implied, and its lifetime is
//!   `run_owned` unless the request says `detached`, so a connection's or a session's
//!   terms end with it ([`Service::end_owner`]);
//! - input and output are bytes: input is `data` (UTF-8 text) or `data_base64` (any
//!   bytes), exactly one of them; output is `text` plus `bytes_base64` exactly when the
//!   text is lossy, as everywhere else in the API;
//! - every bound is a named constant here or in [`tierbox_runner::term`], and every
//!   refusal names the rule and the value ([`TermRequestError`], [`TermError`]).

use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};
use tierbox_policy::handle::{HANDLE_HEX_LEN, MAX_OUTPUT_READ_BYTES, check_handle};
use tierbox_policy::request::{MAX_REQUEST_BYTES, MAX_STDIN_BYTES};
use tierbox_policy::{Lifetime, ProcessRunRequest, Rejection};
use tierbox_runner::background::{BackgroundError, BackgroundState, BackgroundStatus};
use tierbox_runner::ring::OutputChunk;
use tierbox_runner::term::{
    MAX_TERM_DIMENSION, MAX_TERM_WAIT_MS, TermError, TermManager, TermSignal, TermSize,
};

use crate::results::{TermList, TermOutput, TermResized, TermSignalled, TermStarted, TermWritten};
use crate::service::{Service, ServiceError};

/// A term's terminal size when the request gives none: 24 rows of 80 columns.
pub const DEFAULT_TERM_SIZE: TermSize = TermSize { rows: 24, cols: 80 };

/// Most bytes one write sends to a term's terminal (64 KiB, decoded), as for a background
/// process's stdin: a larger paste is several writes. A program that does not read its
/// input holds a write for at most 5 s (`term.input`).
pub const MAX_TERM_INPUT_BYTES: usize = MAX_STDIN_BYTES;

/// Most bytes of output one read returns (256 KiB), as for a background process: keeps
/// one answer within what a model's context and an MCP client's message cap accept.
pub const MAX_TERM_READ_BYTES: usize = MAX_OUTPUT_READ_BYTES;

/// Bytes of output a read returns when it names no `max_bytes` (64 KiB).
pub const DEFAULT_TERM_READ_BYTES: usize = 64 * 1024;

/// How long `session_start`, `session_write` and `session_read` collect output when they
/// name no `yield_ms`, in milliseconds: long enough for a prompt or a command's echo,
/// short enough for an agent's turn.
pub const DEFAULT_YIELD_MS: u64 = 250;

/// Longest signal name shown back in a refusal, in bytes (the longest accepted, `SIGWINCH`
/// or `SIGQUIT`, has 8): a long value is cut there, not echoed whole.
pub const MAX_SIGNAL_NAME_BYTES: usize = 16;

/// Request fields of `process_run` a term refuses (`input.term_field`): a term always runs
/// in the background, and its input is what is written to its terminal.
pub const NOT_FOR_TERMS: [&str; 4] = ["background", "stdin", "stdin_base64", "stdin_limit_bytes"];

/// Start a program on a terminal of its own; its id and first screen.
pub const SESSION_START_TOOL: &str = "session_start";
/// Write to a term's terminal, then collect its output for a yield time.
pub const SESSION_WRITE_TOOL: &str = "session_write";
/// Collect a term's output from an offset for a yield time.
pub const SESSION_READ_TOOL: &str = "session_read";
/// Resize a term's terminal.
pub const SESSION_RESIZE_TOOL: &str = "session_resize";
/// Signal a term's foreground process group.
pub const SESSION_SIGNAL_TOOL: &str = "session_signal";
/// Kill a term; its final status.
pub const SESSION_CLOSE_TOOL: &str = "session_close";

/// The term tools, in the order they are listed.
pub const TERM_TOOL_NAMES: [&str; 6] = [
    SESSION_START_TOOL,
    SESSION_WRITE_TOOL,
    SESSION_READ_TOOL,
    SESSION_RESIZE_TOOL,
    SESSION_SIGNAL_TOOL,
    SESSION_CLOSE_TOOL,
];

/// A term request refused before anything was done, naming the rule and the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TermRequestError {
    /// Both `data` and `data_base64`.
    #[error("give one of data and data_base64, not both")]
    DataConflict,
    /// Neither `data` nor `data_base64`, and no `eof`.
    #[error("give data (text) or data_base64 (bytes), or eof: true alone to close the input")]
    NoData,
    /// `data_base64` that is not standard base64.
    #[error(
        "data_base64 is not standard base64 (A-Z a-z 0-9 + /, = padding optional, no \
         whitespace): {detail}"
    )]
    DataEncoding {
        /// The first bad character and its index, or the length.
        detail: String,
    },
    /// More than [`MAX_TERM_INPUT_BYTES`] in one write.
    #[error("the input is {bytes} bytes, more than the {max} bytes one write takes")]
    DataTooLarge {
        /// Bytes given (decoded).
        bytes: usize,
        /// [`MAX_TERM_INPUT_BYTES`].
        max: usize,
    },
    /// A size outside 1 to [`MAX_TERM_DIMENSION`].
    #[error("terminal size {rows}x{cols} is outside 1 to {MAX_TERM_DIMENSION} rows and columns")]
    BadSize {
        /// Rows asked for.
        rows: u64,
        /// Columns asked for.
        cols: u64,
    },
    /// A wait or yield past [`MAX_TERM_WAIT_MS`].
    #[error("{field} {wait_ms} is past the maximum of {MAX_TERM_WAIT_MS} ms")]
    BadWait {
        /// `wait_ms` or `yield_ms`.
        field: &'static str,
        /// The value given.
        wait_ms: u64,
    },
    /// A `process_run` field that has no meaning for a term ([`NOT_FOR_TERMS`]).
    #[error(
        "field {field} has no meaning for a term: it always runs in the background, and its \
         input is what is written to its terminal"
    )]
    NotForTerms {
        /// The field.
        field: String,
    },
    /// The document's shape or a shared cap (malformed, too large, a bad handle, a read
    /// size out of range).
    #[error(transparent)]
    Rejected(#[from] Rejection),
}

impl TermRequestError {
    /// Stable machine code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::DataConflict => "input.data_conflict",
            Self::NoData => "input.no_data",
            Self::DataEncoding { .. } => "input.data_encoding_invalid",
            Self::DataTooLarge { .. } => "input.data_too_large",
            Self::BadSize { .. } => "term.bad_size",
            Self::BadWait { .. } => "term.bad_wait",
            Self::NotForTerms { .. } => "input.term_field",
            Self::Rejected(r) => r.code(),
        }
    }
}

impl From<TermRequestError> for ServiceError {
    fn from(e: TermRequestError) -> Self {
        Self::new(e.code(), e.to_string())
    }
}

impl From<TermError> for ServiceError {
    fn from(e: TermError) -> Self {
        let code = e.code();
        match e {
            TermError::Background(BackgroundError::NotFound { id }) => {
                Self::new(code, format!("no term {id} belongs to this caller"))
            }
            TermError::Background(BackgroundError::ExitedDuringStartup(handle)) => {
                // The background message and its handle, under the term's code.
                let mut err = Self::from(BackgroundError::ExitedDuringStartup(handle));
                err.code = code.to_owned();
                err
            }
            TermError::Background(BackgroundError::Run(run)) => run.into(),
            other => Self::new(code, other.to_string()),
        }
    }
}

fn malformed(e: impl std::fmt::Display) -> TermRequestError {
    TermRequestError::Rejected(Rejection::Malformed {
        detail: e.to_string(),
    })
}

/// The size `rows` × `cols` when both are 1 to [`MAX_TERM_DIMENSION`].
pub fn term_size(rows: u64, cols: u64) -> Result<TermSize, TermRequestError> {
    let dim = |n: u64| {
        u16::try_from(n)
            .ok()
            .filter(|n| (1..=MAX_TERM_DIMENSION).contains(n))
    };
    match (dim(rows), dim(cols)) {
        (Some(rows), Some(cols)) => Ok(TermSize { rows, cols }),
        _ => Err(TermRequestError::BadSize { rows, cols }),
    }
}

fn check_wait(field: &'static str, wait_ms: u64) -> Result<(), TermRequestError> {
    match wait_ms <= MAX_TERM_WAIT_MS {
        true => Ok(()),
        false => Err(TermRequestError::BadWait { field, wait_ms }),
    }
}

fn check_read_size(max_bytes: usize) -> Result<(), TermRequestError> {
    if max_bytes == 0 || max_bytes > MAX_TERM_READ_BYTES {
        return Err(Rejection::ReadSizeInvalid {
            bytes: max_bytes,
            max: MAX_TERM_READ_BYTES,
        }
        .into());
    }
    Ok(())
}

/// The bytes of a write: `data`'s UTF-8 or `data_base64` decoded, exactly one of them
/// (neither only with `eof`, for an empty write), at most [`MAX_TERM_INPUT_BYTES`].
///
/// ```
/// use tierbox_server::terms::input_bytes;
///
/// assert_eq!(input_bytes(Some("ls\r"), None, false).unwrap(), b"ls\r");
/// assert_eq!(input_bytes(None, Some("AwQ="), false).unwrap(), [3, 4]);
/// assert_eq!(input_bytes(None, None, true).unwrap(), b"");
/// assert_eq!(input_bytes(Some("a"), Some("YQ=="), false).unwrap_err().code(), "input.data_conflict");
/// assert_eq!(input_bytes(None, None, false).unwrap_err().code(), "input.no_data");
/// assert_eq!(input_bytes(None, Some("a b"), false).unwrap_err().code(), "input.data_encoding_invalid");
/// ```
pub fn input_bytes(
    data: Option<&str>,
    data_base64: Option<&str>,
    eof: bool,
) -> Result<Vec<u8>, TermRequestError> {
    let bytes = match (data, data_base64) {
        (Some(_), Some(_)) => return Err(TermRequestError::DataConflict),
        (None, None) if eof => Vec::new(),
        (None, None) => return Err(TermRequestError::NoData),
        (Some(text), None) => text.as_bytes().to_vec(),
        (None, Some(b64)) => tierbox_policy::plan::decode_stdin_base64(b64).ok_or_else(|| {
            TermRequestError::DataEncoding {
                detail: base64_fault(b64),
            }
        })?,
    };
    if bytes.len() > MAX_TERM_INPUT_BYTES {
        return Err(TermRequestError::DataTooLarge {
            bytes: bytes.len(),
            max: MAX_TERM_INPUT_BYTES,
        });
    }
    Ok(bytes)
}

/// What is wrong with `b64`, which the decoder refused: its first character outside the
/// alphabet, else its length.
pub(crate) fn base64_fault(b64: &str) -> String {
    let alphabet = |c: char| c.is_ascii_alphanumeric() || c == '+' || c == '/';
    let body = b64.trim_end_matches('=');
    match body.char_indices().find(|(_, c)| !alphabet(*c)) {
        Some((at, c)) => format!("character {c:?} at index {at}"),
        None => format!("a length of {} characters cannot be base64", b64.len()),
    }
}

/// How a read waits for output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Until output past the offset arrives (returning at once if there is some), the term
    /// ends, or the wait is over: a long poll (HTTP's `wait_ms`).
    FirstOutput,
    /// Collecting all output for the whole wait, returning earlier only when the term
    /// ends or `max_bytes` arrived: a yield time (MCP's `yield_ms`).
    Yield,
}

/// A read of a term's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TermRead {
    /// Absolute byte offset to read from.
    pub offset: u64,
    /// Most bytes to return, 1 to [`MAX_TERM_READ_BYTES`].
    pub max_bytes: usize,
    /// How long to wait, in milliseconds, at most [`MAX_TERM_WAIT_MS`].
    pub wait_ms: u64,
    /// How.
    pub wait: Wait,
}

/// A term to start: the run request (with `background: true`), its terminal's size, and
/// the read of its first screen.
#[derive(Debug, Clone)]
pub struct TermStart {
    /// The run request.
    pub request: ProcessRunRequest,
    /// The terminal's size.
    pub size: TermSize,
    /// The read from offset 0 made once the startup window has passed.
    pub first: TermRead,
}

/// `{"rows", "cols"}`: a terminal's size (`pty` of `POST /v1/terms`, the body of
/// `POST /v1/terms/{id}/resize`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "TermSizeBody")]
pub struct TermSizeBody {
    /// Rows (lines), 1 to 4096.
    #[schemars(range(min = 1, max = MAX_TERM_DIMENSION))]
    pub rows: u64,
    /// Columns, 1 to 4096.
    #[schemars(range(min = 1, max = MAX_TERM_DIMENSION))]
    pub cols: u64,
}

impl TermSizeBody {
    /// The size, checked.
    pub fn size(&self) -> Result<TermSize, TermRequestError> {
        term_size(self.rows, self.cols)
    }
}

/// The term fields of `POST /v1/terms` beside the `process_run` ones.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpStartFields {
    #[serde(default)]
    pty: Option<TermSizeBody>,
    #[serde(default)]
    wait_ms: u64,
    #[serde(default)]
    max_bytes: Option<usize>,
}

/// The term fields of `session_start` beside the `process_run` ones.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct McpStartFields {
    #[serde(default)]
    rows: Option<u64>,
    #[serde(default)]
    cols: Option<u64>,
    #[serde(default)]
    yield_ms: Option<u64>,
    #[serde(default)]
    max_bytes: Option<usize>,
}

impl TermStart {
    /// Parses the body of `POST /v1/terms`: a `process_run` request without
    /// [`NOT_FOR_TERMS`], plus `pty` (`{"rows", "cols"}`, default 24×80), `wait_ms`
    /// (default 0: what the startup window showed) and `max_bytes`.
    ///
    /// ```
    /// use tierbox_server::terms::TermStart;
    ///
    /// let s = TermStart::from_http(br#"{"command":"bash","args":["-i"],"pty":{"rows":40,"cols":100}}"#).unwrap();
    /// assert_eq!((s.size.rows, s.size.cols, s.request.background), (40, 100, true));
    /// let e = TermStart::from_http(br#"{"command":"bash","stdin":"x"}"#).unwrap_err();
    /// assert_eq!(e.code(), "input.term_field");
    /// ```
    pub fn from_http(body: &[u8]) -> Result<Self, TermRequestError> {
        let (request, fields) = split_start(body, &["pty", "wait_ms", "max_bytes"])?;
        let f: HttpStartFields = serde_json::from_value(fields).map_err(malformed)?;
        check_wait("wait_ms", f.wait_ms)?;
        let max_bytes = f.max_bytes.unwrap_or(DEFAULT_TERM_READ_BYTES);
        check_read_size(max_bytes)?;
        Ok(Self {
            request,
            size: f.pty.map_or(Ok(DEFAULT_TERM_SIZE), |p| p.size())?,
            first: TermRead {
                offset: 0,
                max_bytes,
                wait_ms: f.wait_ms,
                wait: Wait::FirstOutput,
            },
        })
    }

    /// Parses the arguments of `session_start`: a `process_run` request without
    /// [`NOT_FOR_TERMS`], plus `rows` (default 24), `cols` (default 80), `yield_ms`
    /// (default [`DEFAULT_YIELD_MS`]) and `max_bytes`.
    pub fn from_mcp(args: &[u8]) -> Result<Self, TermRequestError> {
        let own = ["rows", "cols", "yield_ms", "max_bytes"];
        let (request, fields) = split_start(args, &own)?;
        let f: McpStartFields = serde_json::from_value(fields).map_err(malformed)?;
        let yield_ms = f.yield_ms.unwrap_or(DEFAULT_YIELD_MS);
        check_wait("yield_ms", yield_ms)?;
        let max_bytes = f.max_bytes.unwrap_or(DEFAULT_TERM_READ_BYTES);
        check_read_size(max_bytes)?;
        let rows = f.rows.unwrap_or(u64::from(DEFAULT_TERM_SIZE.rows));
        let cols = f.cols.unwrap_or(u64::from(DEFAULT_TERM_SIZE.cols));
        Ok(Self {
            request,
            size: term_size(rows, cols)?,
            first: TermRead {
                offset: 0,
                max_bytes,
                wait_ms: yield_ms,
                wait: Wait::Yield,
            },
        })
    }
}

/// Splits a start document into its `process_run` request (parsed by the closed parser,
/// with `background: true` and a `run_owned` lifetime unless it says otherwise) and the
/// object of its `own` fields.
fn split_start(doc: &[u8], own: &[&str]) -> Result<(ProcessRunRequest, Value), TermRequestError> {
    let (term, run) = split_fields(doc, own)?;
    if let Some(field) = NOT_FOR_TERMS.iter().find(|f| run.contains_key(**f)) {
        return Err(TermRequestError::NotForTerms {
            field: (*field).to_owned(),
        });
    }
    let run = serde_json::to_vec(&Value::Object(run)).map_err(malformed)?;
    let mut request = ProcessRunRequest::from_json(&run)?;
    request.background = true;
    request.lifetime.get_or_insert(Lifetime::RunOwned);
    Ok((request, Value::Object(term)))
}

/// The fields of a JSON object.
type Fields = Map<String, Value>;

/// A JSON object document (at most [`MAX_REQUEST_BYTES`], no duplicate keys) split into
/// the fields named in `own` and the others.
fn split_fields(doc: &[u8], own: &[&str]) -> Result<(Fields, Fields), TermRequestError> {
    if doc.len() > MAX_REQUEST_BYTES {
        return Err(Rejection::RequestTooLarge {
            bytes: doc.len(),
            max: MAX_REQUEST_BYTES,
        }
        .into());
    }
    let all: Map<String, Value> = tierbox_policy::json::from_slice(doc).map_err(malformed)?;
    Ok(all
        .into_iter()
        .partition(|(key, _)| own.contains(&key.as_str())))
}

/// The fields of a write ([`TermInputBody`]'s) among `session_write`'s arguments.
const INPUT_FIELDS: [&str; 3] = ["data", "data_base64", "eof"];

/// Parses `session_write`'s arguments: a write ([`TermInputBody`]) and the read that
/// follows it ([`SessionReadArgs`]).
fn write_args(args: &[u8]) -> Result<(TermInputBody, SessionReadArgs), TermRequestError> {
    let (input, read) = split_fields(args, &INPUT_FIELDS)?;
    let input: TermInputBody = serde_json::from_value(Value::Object(input)).map_err(malformed)?;
    let read: SessionReadArgs = serde_json::from_value(Value::Object(read)).map_err(malformed)?;
    check_handle(&read.id)?;
    Ok((input, read))
}

fn default_yield_ms() -> u64 {
    DEFAULT_YIELD_MS
}

fn default_read_bytes() -> usize {
    DEFAULT_TERM_READ_BYTES
}

/// `POST /v1/terms/{id}/input`: bytes for the terminal, and whether its end-of-file
/// character follows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "TermInputBody")]
pub struct TermInputBody {
    /// Text to type (its UTF-8 bytes): `\r` is Enter, `\u0003` is ^C. Exactly one of
    /// `data` and `data_base64` (neither only with `eof: true`).
    #[serde(default)]
    #[schemars(length(max = MAX_TERM_INPUT_BYTES))]
    pub data: Option<String>,
    /// Bytes of any kind, standard base64 (padding optional, no whitespace); at most 64 KiB
    /// decoded.
    #[serde(default)]
    pub data_base64: Option<String>,
    /// Then close the input: the terminal's end-of-file character (`^D`; a program sees
    /// end of input when it is at the start of a line). Later writes are refused.
    #[serde(default)]
    pub eof: bool,
}

impl TermInputBody {
    /// The bytes to write ([`input_bytes`]).
    pub fn bytes(&self) -> Result<Vec<u8>, TermRequestError> {
        input_bytes(self.data.as_deref(), self.data_base64.as_deref(), self.eof)
    }
}

/// `POST /v1/terms/{id}/signal`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "TermSignalBody")]
pub struct TermSignalBody {
    /// `INT`, `TERM`, `HUP`, `QUIT`, `KILL`, `WINCH`, `TSTP` or `CONT` (with or without
    /// `SIG`, any case); any other is `term.signal_refused`.
    pub signal: String,
}

/// `session_read`'s arguments.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "session_read",
    description = "What one of your terms showed from offset on, collected for yield_ms (less \
                   when it ends). Pass the returned next_offset as the next offset; \
                   missed_bytes counts output that left the 1 MiB buffer unread."
)]
pub struct SessionReadArgs {
    /// The term's id.
    #[schemars(length(min = HANDLE_HEX_LEN, max = HANDLE_HEX_LEN), regex(pattern = "^[0-9a-f]{32}$"))]
    pub id: String,
    /// Absolute byte offset to read from (0 = from the start).
    #[serde(default)]
    pub offset: u64,
    /// How long to collect output, in milliseconds.
    #[serde(default = "default_yield_ms")]
    #[schemars(range(max = MAX_TERM_WAIT_MS))]
    pub yield_ms: u64,
    /// Most bytes to return.
    #[serde(default = "default_read_bytes")]
    #[schemars(range(min = 1, max = MAX_TERM_READ_BYTES))]
    pub max_bytes: usize,
}

/// `session_resize`'s arguments.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "session_resize",
    description = "Resize one of your terms' terminal; the program is told (SIGWINCH)."
)]
pub struct SessionResizeArgs {
    /// The term's id.
    #[schemars(length(min = HANDLE_HEX_LEN, max = HANDLE_HEX_LEN), regex(pattern = "^[0-9a-f]{32}$"))]
    pub id: String,
    /// Rows, 1 to 4096.
    #[schemars(range(min = 1, max = MAX_TERM_DIMENSION))]
    pub rows: u64,
    /// Columns, 1 to 4096.
    #[schemars(range(min = 1, max = MAX_TERM_DIMENSION))]
    pub cols: u64,
}

/// `session_signal`'s arguments.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "session_signal",
    description = "Send a signal to the foreground job of one of your terms (as ^C does for \
                   INT): INT, TERM, HUP, QUIT, KILL, WINCH, TSTP or CONT. The shell or REPL \
                   itself goes on unless the signal ends it."
)]
pub struct SessionSignalArgs {
    /// The term's id.
    #[schemars(length(min = HANDLE_HEX_LEN, max = HANDLE_HEX_LEN), regex(pattern = "^[0-9a-f]{32}$"))]
    pub id: String,
    /// The signal's name.
    pub signal: String,
}

/// `session_close`'s arguments.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "session_close",
    description = "Kill one of your terms (its whole process tree) and return its final \
                   status, with its exit and its signed attestation."
)]
pub struct SessionCloseArgs {
    /// The term's id.
    #[schemars(length(min = HANDLE_HEX_LEN, max = HANDLE_HEX_LEN), regex(pattern = "^[0-9a-f]{32}$"))]
    pub id: String,
}

/// Parses a tool's arguments: the size cap, the closed shape, the handle.
fn args_of<T: serde::de::DeserializeOwned>(
    args: &[u8],
    id: impl Fn(&T) -> &str,
) -> Result<T, TermRequestError> {
    if args.len() > MAX_REQUEST_BYTES {
        return Err(Rejection::RequestTooLarge {
            bytes: args.len(),
            max: MAX_REQUEST_BYTES,
        }
        .into());
    }
    let parsed: T = tierbox_policy::json::from_slice(args).map_err(malformed)?;
    check_handle(id(&parsed))?;
    Ok(parsed)
}

/// The signal named `name`, a long name cut at [`MAX_SIGNAL_NAME_BYTES`] in the refusal.
fn signal_of(name: &str) -> Result<TermSignal, TermError> {
    TermSignal::parse(name).map_err(|_| {
        let mut shown: String = name.chars().take(MAX_SIGNAL_NAME_BYTES).collect();
        if shown.len() < name.len() {
            shown.push('…');
        }
        TermError::SignalRefused { signal: shown }
    })
}

/// The signal's name on the allowlist.
fn signal_name(signal: TermSignal) -> &'static str {
    TermSignal::ALL
        .iter()
        .find(|(s, _)| *s == signal)
        .map_or("", |(_, n)| n)
}

impl Service {
    fn terms(&self) -> &TermManager {
        self.runner().terms()
    }

    /// Starts a term for `owner` (checked by the policy as a background run given stdin:
    /// an interpreter reading its program from what is typed needs `exec.allow_eval`) and
    /// reads its first screen.
    pub async fn term_start(
        &self,
        owner: &str,
        start: &TermStart,
    ) -> Result<TermStarted, ServiceError> {
        let handle = self
            .runner()
            .start_term(owner, &start.request, start.size)
            .await?;
        let id = handle.status.id.clone();
        let output = self.term_read(owner, &id, &start.first).await?;
        Ok(TermStarted {
            id,
            status: handle.status,
            output,
        })
    }

    /// Writes `data` to one of `owner`'s terms, then with `eof` its end-of-file character.
    pub async fn term_write(
        &self,
        owner: &str,
        id: &str,
        data: &[u8],
        eof: bool,
    ) -> Result<TermWritten, ServiceError> {
        if !data.is_empty() || !eof {
            self.terms().write(owner, id, data).await?;
        }
        if eof {
            self.terms().close_input(owner, id).await?;
        }
        Ok(TermWritten {
            id: id.to_owned(),
            bytes_written: data.len() as u64,
            eof,
            output: None,
        })
    }

    /// Reads one of `owner`'s terms' output as `read` says.
    pub async fn term_read(
        &self,
        owner: &str,
        id: &str,
        read: &TermRead,
    ) -> Result<TermOutput, ServiceError> {
        check_read_size(read.max_bytes)?;
        let chunk = match read.wait {
            Wait::FirstOutput => {
                let TermRead {
                    offset,
                    max_bytes,
                    wait_ms,
                    ..
                } = *read;
                self.terms()
                    .output(owner, id, offset, max_bytes, wait_ms)
                    .await?
            }
            Wait::Yield => collect(self.terms(), owner, id, read).await?,
        };
        let state = self.terms().status(owner, id).await?.state;
        Ok(TermOutput {
            id: id.to_owned(),
            state,
            ended: state != BackgroundState::Running,
            read: chunk.into(),
        })
    }

    /// Resizes one of `owner`'s terms' terminal.
    pub fn term_resize(
        &self,
        owner: &str,
        id: &str,
        size: TermSize,
    ) -> Result<TermResized, ServiceError> {
        self.terms().resize(owner, id, size)?;
        Ok(TermResized {
            id: id.to_owned(),
            rows: size.rows,
            cols: size.cols,
        })
    }

    /// Sends the signal named `name` (on [`TermSignal`]'s allowlist) to the foreground
    /// process group of one of `owner`'s terms.
    pub fn term_signal(
        &self,
        owner: &str,
        id: &str,
        name: &str,
    ) -> Result<TermSignalled, ServiceError> {
        let signal = signal_of(name)?;
        self.terms().signal(owner, id, signal)?;
        Ok(TermSignalled {
            id: id.to_owned(),
            signal: signal_name(signal).to_owned(),
        })
    }

    /// The status of one of `owner`'s terms (its attestation once it has ended).
    pub async fn term_status(
        &self,
        owner: &str,
        id: &str,
    ) -> Result<BackgroundStatus, ServiceError> {
        Ok(self.terms().status(owner, id).await?)
    }

    /// Kills one of `owner`'s terms (its whole tree); its final status.
    pub async fn term_kill(&self, owner: &str, id: &str) -> Result<BackgroundStatus, ServiceError> {
        Ok(self.terms().kill(owner, id).await?)
    }

    /// `owner`'s terms, running or ended.
    pub async fn term_list(&self, owner: &str) -> TermList {
        TermList {
            terms: self.terms().list(owner).await,
        }
    }

    /// Runs one of the [`TERM_TOOL_NAMES`] for `owner`: its structured result and its text
    /// summary.
    pub(crate) async fn call_term_tool(
        &self,
        owner: &str,
        tool: &str,
        args: &[u8],
    ) -> Result<(Value, String), ServiceError> {
        use crate::results::to_json;
        match tool {
            SESSION_START_TOOL => {
                let s = self.term_start(owner, &TermStart::from_mcp(args)?).await?;
                let summary = format!(
                    "started term {} (tier {}, {}); read on from offset {}. The screen so far:\n{}",
                    s.id,
                    s.status.tier,
                    s.status.backend,
                    s.output.read.next_offset,
                    s.output.read.text
                );
                Ok((to_json(&s), summary))
            }
            SESSION_WRITE_TOOL => {
                let (input, a) = write_args(args)?;
                let data = input.bytes()?;
                check_wait("yield_ms", a.yield_ms)?;
                check_read_size(a.max_bytes)?;
                let mut written = self.term_write(owner, &a.id, &data, input.eof).await?;
                let read = yield_read(a.offset, a.max_bytes, a.yield_ms);
                let output = self.term_read(owner, &a.id, &read).await?;
                let summary = format!(
                    "wrote {} bytes to {}{}; {}",
                    written.bytes_written,
                    a.id,
                    if input.eof {
                        " and closed its input"
                    } else {
                        ""
                    },
                    output_summary(&output)
                );
                written.output = Some(output);
                Ok((to_json(&written), summary))
            }
            SESSION_READ_TOOL => {
                let a: SessionReadArgs = args_of(args, |a: &SessionReadArgs| &a.id)?;
                check_wait("yield_ms", a.yield_ms)?;
                let read = yield_read(a.offset, a.max_bytes, a.yield_ms);
                let output = self.term_read(owner, &a.id, &read).await?;
                let summary = output_summary(&output);
                Ok((to_json(&output), summary))
            }
            SESSION_RESIZE_TOOL => {
                let a: SessionResizeArgs = args_of(args, |a: &SessionResizeArgs| &a.id)?;
                let r = self.term_resize(owner, &a.id, term_size(a.rows, a.cols)?)?;
                let summary = format!("resized {} to {} rows of {} columns", r.id, r.rows, r.cols);
                Ok((to_json(&r), summary))
            }
            SESSION_SIGNAL_TOOL => {
                let a: SessionSignalArgs = args_of(args, |a: &SessionSignalArgs| &a.id)?;
                let s = self.term_signal(owner, &a.id, &a.signal)?;
                let summary = format!("sent SIG{} to the foreground job of {}", s.signal, s.id);
                Ok((to_json(&s), summary))
            }
            SESSION_CLOSE_TOOL => {
                let a: SessionCloseArgs = args_of(args, |a: &SessionCloseArgs| &a.id)?;
                let v = to_json(&self.term_kill(owner, &a.id).await?);
                let summary = crate::service::status_line(&v);
                Ok((v, summary))
            }
            other => Err(ServiceError::new(
                "input.malformed",
                format!("{other} is not a term tool"),
            )),
        }
    }
}

fn yield_read(offset: u64, max_bytes: usize, yield_ms: u64) -> TermRead {
    TermRead {
        offset,
        max_bytes,
        wait_ms: yield_ms,
        wait: Wait::Yield,
    }
}

/// A read for a tool's text content: where it starts and ends, the state, the text.
fn output_summary(o: &TermOutput) -> String {
    let state = crate::results::to_json(&o.state);
    format!(
        "{} bytes from offset {} (next_offset {}, missed {}, {}):\n{}",
        o.read.next_offset - o.read.offset,
        o.read.offset,
        o.read.next_offset,
        o.read.missed_bytes,
        state.as_str().unwrap_or(""),
        o.read.text
    )
}

/// Collects the output from `read.offset` for `read.wait_ms` ([`Wait::Yield`]), as one
/// chunk of contiguous bytes: it stops early when the term ends, when `max_bytes`
/// arrived, or when the ring moved past what it had read (the next read counts those
/// bytes as missed).
async fn collect(
    terms: &TermManager,
    owner: &str,
    id: &str,
    read: &TermRead,
) -> Result<OutputChunk, ServiceError> {
    let deadline = Instant::now() + Duration::from_millis(read.wait_ms);
    let mut bytes = Vec::new();
    let mut out: Option<OutputChunk> = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let left_ms = u64::try_from(left.as_millis()).unwrap_or(MAX_TERM_WAIT_MS);
        let from = out.as_ref().map_or(read.offset, |o| o.next_offset);
        let room = read.max_bytes - bytes.len();
        let chunk = terms.output(owner, id, from, room, left_ms).await?;
        if out.is_some() && chunk.missed_bytes > 0 {
            break;
        }
        let arrived = chunk.next_offset > chunk.offset;
        let piece = chunk
            .bytes()
            .map_err(|e| ServiceError::new("run.failed", format!("term output: {e}")))?;
        bytes.extend_from_slice(&piece);
        let first = out.get_or_insert_with(|| OutputChunk {
            text: String::new(),
            bytes_base64: None,
            spill_error: None,
            ..chunk.clone()
        });
        first.next_offset = chunk.next_offset;
        first.total_bytes = chunk.total_bytes;
        // Nothing arrived: the wait is over, or the terminal has hung up (the read
        // returned before its wait with nothing, which it does only then).
        if !arrived || bytes.len() >= read.max_bytes || left.is_zero() {
            break;
        }
    }
    let mut out = out.unwrap_or(OutputChunk {
        offset: read.offset,
        text: String::new(),
        bytes_base64: None,
        next_offset: read.offset,
        missed_bytes: 0,
        total_bytes: 0,
        spill_error: None,
    });
    let wire = tierbox_runner::wire::encode_owned(bytes);
    out.text = wire.text;
    out.bytes_base64 = wire.bytes_base64;
    Ok(out)
}

/// The JSON Schema of a start request: `process_run`'s without [`NOT_FOR_TERMS`], with
/// the term's own `fields`, titled `title`.
fn start_schema(title: &str, description: &str, fields: Value) -> Value {
    let mut schema = tierbox_policy::schema::process_run_schema();
    if let Some(Value::Object(props)) = schema.get_mut("properties") {
        for field in NOT_FOR_TERMS {
            props.remove(field);
        }
        if let Value::Object(fields) = fields {
            props.extend(fields);
        }
    }
    schema["title"] = Value::from(title);
    schema["description"] = Value::from(description);
    schema
}

fn size_property(what: &str, default: u16) -> Value {
    serde_json::json!({
        "type": "integer", "minimum": 1, "maximum": MAX_TERM_DIMENSION, "default": default,
        "description": format!("The terminal's {what}, 1 to {MAX_TERM_DIMENSION}.")
    })
}

fn read_size_property() -> Value {
    serde_json::json!({
        "type": "integer", "minimum": 1, "maximum": MAX_TERM_READ_BYTES,
        "default": DEFAULT_TERM_READ_BYTES,
        "description": "Most bytes of the first screen to return."
    })
}

/// The schema of `POST /v1/terms`'s body.
pub fn http_start_schema() -> Value {
    start_schema(
        "TermStartRequest",
        "Start a program on a terminal of its own: a process_run request (no background, \
         stdin, stdin_base64 or stdin_limit_bytes) with the terminal's size and the wait for \
         its first screen.",
        serde_json::json!({
            "pty": {
                "type": "object", "additionalProperties": false, "required": ["rows", "cols"],
                "description": "The terminal's size; 24 rows of 80 columns when absent.",
                "properties": {
                    "rows": size_property("rows", DEFAULT_TERM_SIZE.rows),
                    "cols": size_property("columns", DEFAULT_TERM_SIZE.cols)
                }
            },
            "wait_ms": {
                "type": "integer", "minimum": 0, "maximum": MAX_TERM_WAIT_MS, "default": 0,
                "description": "After the 200 ms startup window, wait up to this long for the terminal's first output when it has shown none yet."
            },
            "max_bytes": read_size_property()
        }),
    )
}

/// `session_write`'s schema: [`SessionReadArgs`]'s (the read after the write) with
/// [`TermInputBody`]'s fields.
fn write_schema() -> Value {
    let of = |s: schemars::Schema| serde_json::to_value(s).unwrap_or(Value::Null);
    let mut schema = of(schemars::schema_for!(SessionReadArgs));
    let input = of(schemars::schema_for!(TermInputBody));
    if let (Some(Value::Object(props)), Some(Value::Object(more))) =
        (schema.get_mut("properties"), input.get("properties"))
    {
        props.extend(more.clone());
    }
    schema["title"] = Value::from(SESSION_WRITE_TOOL);
    schema["description"] = Value::from(
        "Type into one of your terms (started with session_start), then return the output \
         that arrived within yield_ms, from offset on (pass the last next_offset). `data` is \
         text (`\\r` is Enter, `\\u0003` is ^C); `data_base64` is bytes; exactly one, or \
         neither with eof: true. eof: true then sends the terminal's end of file (^D), \
         which ends a REPL or shell at the start of a line.",
    );
    schema
}

/// The JSON Schema of one term tool's input, by name.
pub fn tool_schema(name: &str) -> Option<Value> {
    fn of<T: JsonSchema>() -> Value {
        serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null)
    }
    Some(match name {
        SESSION_START_TOOL => start_schema(
            SESSION_START_TOOL,
            "Start a program (a shell, a REPL, a debugger, an installer that asks questions) \
             on a terminal of its own in the sandbox, as process_run would run it; returns \
             its id and what its screen showed within yield_ms. Then type with \
             session_write, read with session_read, end with session_close. A REPL or \
             interactive shell reads its program from what is typed, so the policy must \
             allow eval.",
            serde_json::json!({
                "rows": size_property("rows", DEFAULT_TERM_SIZE.rows),
                "cols": size_property("columns", DEFAULT_TERM_SIZE.cols),
                "yield_ms": {
                    "type": "integer", "minimum": 0, "maximum": MAX_TERM_WAIT_MS,
                    "default": DEFAULT_YIELD_MS,
                    "description": "How long to collect the first screen after the start, in milliseconds."
                },
                "max_bytes": read_size_property()
            }),
        ),
        SESSION_WRITE_TOOL => write_schema(),
        SESSION_READ_TOOL => of::<SessionReadArgs>(),
        SESSION_RESIZE_TOOL => of::<SessionResizeArgs>(),
        SESSION_SIGNAL_TOOL => of::<SessionSignalArgs>(),
        SESSION_CLOSE_TOOL => of::<SessionCloseArgs>(),
        _ => return None,
    })
}

#[cfg(test)]
#[path = "terms_tests.rs"]
mod tests;
