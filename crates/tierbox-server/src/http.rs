//! The HTTP API: the operations as JSON endpoints (see `docs/api.md`), terms under
//! `/v1/terms` (`http/terms.rs`), the workspace's files under `/v1/files`
//! (`http/files.rs`).
//!
//! - Every `/v1/*` route except `/v1/health` and `/v1/openapi.json` needs
//!   `Authorization: Bearer <token>`, compared in constant time: the operator token, or
//!   a session token the operator had issued (`POST /v1/sessions`; see
//!   [`crate::sessions`]). A session token's requests are its session's
//!   ([`Caller::Agent`]).
//! - At most [`HttpConfig::max_concurrent`] requests run at once and
//!   [`HttpConfig::queue`] more wait; past that the answer is 429 `server.busy` with
//!   `Retry-After`, at once, so a flood never builds an unbounded backlog.
//! - Bodies are read up to [`MAX_REQUEST_BYTES`]; a larger one is 413 before parsing. A
//!   run's body in the streamed-stdin form ([`STDIN_STREAM_MEDIA_TYPE`]) is the request
//!   (one line, at most that cap) and then the run's stdin, which is not read whole but
//!   forwarded to the program as it arrives, up to the run's stdin limit.
//! - Every error, including unknown routes, wrong methods and malformed queries, is a
//!   JSON `{"error": {"code", "message"}}` body with the status of `docs/api.md`.
//! - `?stream=true` on the run endpoints answers JSON lines as the output arrives; the
//!   admission slot is held until the stream ends, and a client that disconnects kills
//!   its run.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Extension, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use tierbox_policy::handle::{
    DEFAULT_OUTPUT_READ_BYTES, ProcessHandleRequest, ProcessOutputRequest,
    ProcessWriteStdinRequest, Stream, check_handle,
};
use tierbox_policy::request::MAX_REQUEST_BYTES;
use tokio::sync::{Semaphore, mpsc};

use crate::mcp::PROGRESS_CHANNEL_EVENTS;
use crate::service::{Caller, RunReply, Service, ServiceError};
use crate::sessions::{Session, Sessions};

mod files;
mod term_output;
mod term_stream;
mod term_ws;
mod terms;

/// Requests served at once by default: two per core of a small machine; each may be a
/// sandboxed run.
pub const DEFAULT_MAX_CONCURRENT: usize = 16;

/// Requests that may wait for a slot by default; more get 429.
pub const DEFAULT_QUEUE: usize = 64;

/// Name of the header that names the caller's session (owner of its background
/// processes).
pub const SESSION_HEADER: &str = "tierbox-session";

/// Longest session name, in bytes.
pub const MAX_SESSION_BYTES: usize = 64;

/// Lines of a streamed response buffered for a slow client before the run's output
/// events are dropped (the final result still has everything).
const STREAM_LINES: usize = 64;

/// `Content-Type` of a run's body in the streamed-stdin form: the request as one line of
/// JSON (no raw line feed inside, so compact JSON; at most [`MAX_REQUEST_BYTES`]), a line
/// feed, then the run's stdin, raw bytes of any kind, to the end of the body (chunked or
/// with a length). The stdin is forwarded to the program as it arrives, never held
/// whole, and is bounded by the run's stdin limit (`limits.stdin_bytes`), not by the body
/// cap: past it the program's stdin is closed and the outcome says
/// `limit_hit: "stdin"`. The request may then carry no `stdin` or `stdin_base64`.
pub const STDIN_STREAM_MEDIA_TYPE: &str = "application/vnd.tierbox.stdin-stream";

/// Chunks of a streamed stdin read from the body ahead of the program.
const STDIN_BODY_CHUNKS: usize = 4;

/// Length of `?identity=` on a run: a hex SHA-256 ([`tierbox_runner::RunnerIdentity::digest`]).
pub const IDENTITY_DIGEST_HEX_LEN: usize = 64;

/// How the API is served.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// The bearer token every authenticated route requires.
    pub token: String,
    /// Requests served at once.
    pub max_concurrent: usize,
    /// Requests waiting for a slot; beyond this, 429.
    pub queue: usize,
    /// The WebSocket of terms: the browser origins allowed, the tickets' lifetime.
    pub ws: crate::term_ws::WsConfig,
}

struct AppState {
    service: Service,
    token: String,
    sessions: Sessions,
    ws: crate::term_ws::TermWs,
    slots: Arc<Semaphore>,
    admitted: AtomicUsize,
    capacity: usize,
}

/// One admitted request: a slot (or a place in the queue) until dropped.
struct Admission {
    state: Arc<AppState>,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.state.admitted.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A counted place in the queue, released if the wait is abandoned.
struct Queued(Arc<AppState>);

impl Drop for Queued {
    fn drop(&mut self) {
        self.0.admitted.fetch_sub(1, Ordering::AcqRel);
    }
}

/// An error response.
#[derive(Debug)]
pub struct ApiError(pub ServiceError);

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        Self(e)
    }
}

impl From<tierbox_policy::Rejection> for ApiError {
    fn from(r: tierbox_policy::Rejection) -> Self {
        Self(r.into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.0.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = crate::results::ErrorBody {
            error: self.0.detail(),
        };
        let mut resp = (status, axum::Json(body)).into_response();
        if status == StatusCode::TOO_MANY_REQUESTS {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"tierbox\""),
            );
        }
        resp
    }
}

fn err(code: &str, message: impl Into<String>) -> ApiError {
    ApiError(ServiceError::new(code, message))
}

type ApiResult = Result<Response, ApiError>;

fn ok(v: Value) -> ApiResult {
    Ok((StatusCode::OK, axum::Json(v)).into_response())
}

/// `200` with `body` serialized straight to bytes: the same JSON as [`ok`] of its
/// `Value` (objects keep their fields' order), without building that tree first — a
/// run's outcome is ~7 KiB of nested objects, on every request's path.
fn ok_serialized<T: serde::Serialize>(body: &T) -> ApiResult {
    let bytes = serde_json::to_vec(body)
        .map_err(|e| err("run.failed", format!("encoding the result: {e}")))?;
    Ok((
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        bytes,
    )
        .into_response())
}

/// A streamed run's last line, `{"event": "result", "outcome": …}`, serialized straight
/// to bytes (see [`ok_serialized`]).
fn result_line(reply: &RunReply) -> Result<Bytes, ServiceError> {
    let mut b = br#"{"event":"result","outcome":"#.to_vec();
    serde_json::to_writer(&mut b, reply)
        .map_err(|e| ServiceError::new("run.failed", format!("encoding the result: {e}")))?;
    b.extend_from_slice(b"}\n");
    Ok(Bytes::from(b))
}

/// Constant-time comparison of two byte strings (the length is not secret).
/// Whether two tokens are equal, compared in constant time.
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Which token a request came with (put in its extensions by [`authenticate`]).
#[derive(Debug, Clone)]
enum Auth {
    /// The operator token.
    Operator,
    /// A session token.
    Session(Arc<Session>),
}

async fn authenticate(State(st): State<Arc<AppState>>, mut req: Request, next: Next) -> Response {
    let path = req.uri().path();
    // A term's WebSocket handshake carries a ticket instead (a browser cannot send the
    // header on one): `http/term_ws.rs`.
    if path == "/v1/health" || path == "/v1/openapi.json" || term_ws::is_handshake(path) {
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        // The scheme is case-insensitive (RFC 9110 §11.1).
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token);
    match given {
        None => err(
            "auth.missing",
            "the Authorization header must be \"Bearer <token>\" (the token is in the state \
             directory's http-token file, or given with --token-file)",
        )
        .into_response(),
        Some(t) => {
            let t = t.trim();
            let auth = if same(t.as_bytes(), st.token.as_bytes()) {
                Auth::Operator
            } else if let Some(session) = st.sessions.lookup(t) {
                Auth::Session(session)
            } else {
                return err(
                    "auth.invalid",
                    "the bearer token is neither this server's operator token nor a live \
                     session token",
                )
                .into_response();
            };
            req.extensions_mut().insert(auth);
            next.run(req).await
        }
    }
}

async fn admit(State(st): State<Arc<AppState>>, mut req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if path == "/v1/health" || path == "/v1/openapi.json" {
        return next.run(req).await;
    }
    let before = st.admitted.fetch_add(1, Ordering::AcqRel);
    let queued = Queued(st.clone());
    if before >= st.capacity {
        return err(
            "server.busy",
            format!(
                "{before} requests are running or queued, the limit is {}; retry shortly",
                st.capacity
            ),
        )
        .into_response();
    }
    let Ok(permit) = st.slots.clone().acquire_owned().await else {
        return err("server.busy", "the server is shutting down").into_response();
    };
    std::mem::forget(queued);
    let admission = Arc::new(Admission {
        state: st.clone(),
        _permit: permit,
    });
    req.extensions_mut().insert(admission);
    next.run(req).await
}

/// Whether `s` is a session name: 1 to [`MAX_SESSION_BYTES`] of `[A-Za-z0-9_-]`.
fn session_name_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_SESSION_BYTES
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Who the request is from: the operator (its `Tierbox-Session` header names the owner
/// of its processes, `http:<name>`), or the session of a session token (whose header, if
/// sent, must be the session's name).
fn caller(auth: &Auth, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let header = headers.get(SESSION_HEADER);
    let name = match header {
        None => None,
        Some(v) => {
            let s = v.to_str().unwrap_or("");
            if !session_name_ok(s) {
                return Err(err(
                    "http.bad_request",
                    format!(
                        "header Tierbox-Session {:?} must be 1 to {MAX_SESSION_BYTES} characters \
                         of [A-Za-z0-9_-]",
                        String::from_utf8_lossy(v.as_bytes())
                    ),
                ));
            }
            Some(s)
        }
    };
    match auth {
        Auth::Operator => Ok(Caller::Operator {
            owner: format!("http:{}", name.unwrap_or("default")),
        }),
        Auth::Session(session) => match name {
            Some(n) if session.name.as_deref() != Some(n) => Err(err(
                "http.bad_request",
                format!(
                    "header Tierbox-Session {n:?} is not the name of this token's session ({}): \
                     a session token names its session; drop the header",
                    session.name.as_deref().unwrap_or("unnamed")
                ),
            )),
            _ => Ok(Caller::Agent {
                owner: session.owner(),
            }),
        },
    }
}

/// Request bodies are JSON: a `Content-Type` other than `application/json` (or a
/// `+json` type) is refused with 415, so a form or text body is never taken for a
/// request by accident. A body without a `Content-Type` is read as JSON.
fn check_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(ct) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let ct = ct.to_str().unwrap_or("").to_ascii_lowercase();
    let essence = ct.split(';').next().unwrap_or("").trim();
    if essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
    {
        return Ok(());
    }
    Err(err(
        "http.unsupported_media_type",
        format!(
            "Content-Type {ct:?} is not JSON: send application/json (curl's -d sends a form \
             type: use --json, or -d with -H 'Content-Type: application/json')"
        ),
    ))
}

/// A run's body: a JSON request, or the streamed-stdin form (the request and its stdin).
enum RunBody {
    Json(Bytes),
    Streamed(Bytes, tierbox_runner::StdinSource),
}

/// Reads a run's body: the request whole, and, in the streamed-stdin form
/// ([`STDIN_STREAM_MEDIA_TYPE`]), the stream of the rest.
async fn run_body(headers: &HeaderMap, body: Body) -> Result<RunBody, ApiError> {
    if media_type(headers).as_deref() != Some(STDIN_STREAM_MEDIA_TYPE) {
        check_json(headers)?;
        return Ok(RunBody::Json(read_body(body).await?));
    }
    let (line, stdin) = split_stdin_stream(body).await?;
    Ok(RunBody::Streamed(line, stdin))
}

/// The essence of the `Content-Type` (`type/subtype`, lowercase), when there is one.
fn media_type(headers: &HeaderMap) -> Option<String> {
    let ct = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    Some(
        ct.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase(),
    )
}

/// Splits a streamed-stdin body at its first line feed: the request line, read whole
/// (at most [`MAX_REQUEST_BYTES`]), and the rest as the run's stdin, read from the
/// connection only as the program takes it.
async fn split_stdin_stream(
    mut body: Body,
) -> Result<(Bytes, tierbox_runner::StdinSource), ApiError> {
    use http_body_util::BodyExt;
    let broken = |e: axum::Error| err("http.bad_request", format!("reading the request body: {e}"));
    let mut line = Vec::new();
    let rest = loop {
        let Some(frame) = body.frame().await else {
            return Err(err(
                "input.malformed",
                format!(
                    "a {STDIN_STREAM_MEDIA_TYPE} body is the request as one line of JSON, a line                      feed, then the stdin: this one ended before the line feed"
                ),
            ));
        };
        let Ok(data) = frame.map_err(broken)?.into_data() else {
            continue;
        };
        let end = data.iter().position(|b| *b == b'\n');
        let take = end.unwrap_or(data.len());
        if line.len() + take > MAX_REQUEST_BYTES {
            return Err(err(
                "input.too_large",
                format!(
                    "the request line is longer than the {MAX_REQUEST_BYTES}-byte cap (the \
                     stdin after it is not bounded by that cap)"
                ),
            ));
        }
        line.extend_from_slice(&data[..take]);
        if let Some(end) = end {
            break data.slice(end + 1..);
        }
    };
    let (tx, rx) = mpsc::channel(STDIN_BODY_CHUNKS);
    // Reads on while the run wants input; ends with the body, or when the run no longer
    // reads (its end drops the receiver), dropping the body.
    tokio::spawn(async move {
        if !rest.is_empty() && tx.send(Ok(rest.to_vec())).await.is_err() {
            return;
        }
        loop {
            // A run that has ended wants no more input: stop waiting for a client that
            // sends none (and let its connection go).
            let frame = tokio::select! {
                frame = body.frame() => frame,
                () = tx.closed() => return,
            };
            let Some(frame) = frame else {
                return;
            };
            let chunk = match frame {
                Ok(frame) => match frame.into_data() {
                    Ok(data) => Ok(data.to_vec()),
                    Err(_) => continue,
                },
                Err(e) => Err(std::io::Error::other(format!(
                    "reading the request body: {e}"
                ))),
            };
            let failed = chunk.is_err();
            if tx.send(chunk).await.is_err() || failed {
                return;
            }
        }
    });
    Ok((
        Bytes::from(line),
        tierbox_runner::StdinSource::from_chunks(rx),
    ))
}

async fn read_body(body: Body) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, MAX_REQUEST_BYTES)
        .await
        .map_err(|e| {
            // The only error besides the limit is a broken connection.
            let limit = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            if limit {
                err(
                    "input.too_large",
                    format!("the request body is larger than the {MAX_REQUEST_BYTES}-byte cap"),
                )
            } else {
                err("http.bad_request", format!("reading the request body: {e}"))
            }
        })
}

fn query_error(e: &QueryRejection) -> ApiError {
    err(
        "input.malformed",
        format!("query string: {}", e.body_text()),
    )
}

fn path_id(id: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    let Path(id) = id.map_err(|e| err("http.bad_request", e.body_text()))?;
    check_handle(&id)?;
    Ok(id)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunQuery {
    #[serde(default)]
    stream: bool,
    /// The runner identity the client expects ([`tierbox_runner::RunnerIdentity::digest`]);
    /// a server whose own differs runs nothing (`daemon.identity_mismatch`).
    identity: Option<String>,
}

/// Refuses the run with `daemon.identity_mismatch` when the client expects a runner
/// identity (`?identity=`) other than this server's: a local client hands a run over only
/// when the server would run it as the client itself would, and learns otherwise from
/// this answer instead of asking `GET /v1/daemon` before every run.
fn expect_identity(st: &AppState, expected: Option<&str>) -> Result<(), ApiError> {
    let Some(expected) = expected else {
        return Ok(());
    };
    if !tierbox_policy::handle::is_lower_hex(expected, IDENTITY_DIGEST_HEX_LEN) {
        let shown: String = expected.chars().take(IDENTITY_DIGEST_HEX_LEN).collect();
        return Err(err(
            "input.malformed",
            format!(
                "query string: identity must be {IDENTITY_DIGEST_HEX_LEN} lowercase hex digits, \
                 not {shown:?}{}",
                if shown.len() < expected.len() {
                    "…"
                } else {
                    ""
                }
            ),
        ));
    }
    if st.service.runner().identity().digest() != expected {
        return Err(err(
            "daemon.identity_mismatch",
            "this server's runner identity (GET /v1/daemon) is not the one the request \
             expects: its policy, workspace, state directory, uid, version or supervisor \
             environment differ; nothing was run",
        ));
    }
    Ok(())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OutputQuery {
    #[serde(default)]
    stream: Stream,
    #[serde(default)]
    offset: u64,
    max_bytes: Option<usize>,
}

async fn health() -> ApiResult {
    ok(crate::results::to_json(&crate::results::Health {
        status: crate::results::HealthStatus::Ok,
        version: env!("CARGO_PKG_VERSION").to_owned(),
    }))
}

/// The server's pid and its runner's identity, for a local client deciding whether this
/// server runs a request as the client itself would (`tierbox run` through a daemon).
async fn daemon_identity(State(st): State<Arc<AppState>>) -> ApiResult {
    ok(crate::results::to_json(&crate::results::DaemonIdentity {
        pid: std::process::id(),
        identity: st.service.runner().identity(),
    }))
}

async fn openapi() -> ApiResult {
    ok(crate::openapi::document())
}

/// A streamed run's `output` line: `{"event": "output", "stream", "text"}`, and
/// `"bytes_base64"` with the bytes exactly when `text` is lossy (`tierbox_runner::wire`).
fn output_line(ev: &tierbox_runner::OutputEvent) -> Value {
    let w = ev.wire();
    let mut v = json!({ "event": "output", "stream": ev.stream, "text": w.text });
    if let Some(b64) = w.bytes_base64 {
        v["bytes_base64"] = Value::String(b64);
    }
    v
}

type RunFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<RunReply, ServiceError>> + Send>>;

/// Either the whole reply, or a JSON-lines stream of the run.
async fn run_reply(
    st: Arc<AppState>,
    admission: Option<axum::Extension<Arc<Admission>>>,
    stream: bool,
    start: impl FnOnce(Service, Option<mpsc::Sender<tierbox_runner::OutputEvent>>) -> RunFuture
    + Send
    + 'static,
) -> ApiResult {
    if !stream {
        let reply = start(st.service.clone(), None).await?;
        return ok_serialized(&reply);
    }
    let (lines_tx, lines_rx) = mpsc::channel::<Bytes>(STREAM_LINES);
    let admission = admission.map(|a| a.0);
    let service = st.service.clone();
    tokio::spawn(async move {
        // Held until the stream ends: a streamed run counts against the limit.
        let _admission = admission;
        let (ev_tx, mut ev_rx) = mpsc::channel(PROGRESS_CHANNEL_EVENTS);
        let run = start(service, Some(ev_tx));
        tokio::pin!(run);
        let line = |v: Value| {
            let mut b = serde_json::to_vec(&v).unwrap_or_default();
            b.push(b'\n');
            Bytes::from(b)
        };
        let result = loop {
            tokio::select! {
                r = &mut run => break r,
                // The client went away while the run is silent: dropping it kills it.
                () = lines_tx.closed() => return,
                Some(ev) = ev_rx.recv() => {
                    if lines_tx.send(line(output_line(&ev))).await.is_err() {
                        // The client went away: dropping the run kills it.
                        return;
                    }
                }
            }
        };
        while let Ok(ev) = ev_rx.try_recv() {
            if lines_tx.send(line(output_line(&ev))).await.is_err() {
                return;
            }
        }
        // An outcome that cannot be encoded ends the stream with an `error` event too.
        let last = match result.and_then(|reply| result_line(&reply)) {
            Ok(bytes) => bytes,
            Err(e) => line(json!({ "event": "error", "error": e.to_json() })),
        };
        let _ = lines_tx.send(last).await;
    });
    Ok(ndjson_response(lines_rx))
}

/// A `200` whose body is the JSON lines `lines` brings, as they come, until its senders
/// are gone; dropping the body (the client went away) closes `lines`.
fn ndjson_response(mut lines: mpsc::Receiver<Bytes>) -> Response {
    let body = Body::from_stream(futures_util::stream::poll_fn(move |cx| {
        lines.poll_recv(cx).map(|o| o.map(Ok::<Bytes, Infallible>))
    }));
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/x-ndjson")
        .header(header::CACHE_CONTROL, "no-store")
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

async fn process_run(
    State(st): State<Arc<AppState>>,
    Extension(auth): Extension<Auth>,
    admission: Option<axum::Extension<Arc<Admission>>>,
    query: Result<Query<RunQuery>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    let Query(q) = query.map_err(|e| query_error(&e))?;
    let owner = caller(&auth, &headers)?.owner().to_owned();
    let body = run_body(&headers, body).await?;
    expect_identity(&st, q.identity.as_deref())?;
    let run = match body {
        RunBody::Json(body) => st.service.check_run(&body)?,
        RunBody::Streamed(line, stdin) => st.service.check_run_streaming(&line, stdin)?,
    };
    let stream = q.stream && !run.request.background;
    run_reply(st, admission, stream, move |service, events| {
        Box::pin(async move { service.process_run(&owner, run, events).await })
    })
    .await
}

async fn process_check(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    check_json(&headers)?;
    let body = read_body(body).await?;
    ok(crate::results::to_json(&st.service.check(&body)?))
}

async fn wasm_run(
    State(st): State<Arc<AppState>>,
    admission: Option<axum::Extension<Arc<Admission>>>,
    query: Result<Query<RunQuery>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    let Query(q) = query.map_err(|e| query_error(&e))?;
    let body = run_body(&headers, body).await?;
    expect_identity(&st, q.identity.as_deref())?;
    let run = match body {
        RunBody::Json(body) => st.service.check_wasm(&body)?,
        RunBody::Streamed(line, stdin) => st.service.check_wasm_streaming(&line, stdin)?,
    };
    run_reply(st, admission, q.stream, move |service, events| {
        Box::pin(async move { service.wasm_run(run, events).await })
    })
    .await
}

async fn process_list(
    State(st): State<Arc<AppState>>,
    Extension(auth): Extension<Auth>,
    headers: HeaderMap,
) -> ApiResult {
    let owner = caller(&auth, &headers)?.owner().to_owned();
    ok(st.service.list(&owner).await)
}

async fn process_status(
    State(st): State<Arc<AppState>>,
    Extension(auth): Extension<Auth>,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> ApiResult {
    let id = path_id(id)?;
    let owner = caller(&auth, &headers)?.owner().to_owned();
    ok(st
        .service
        .status(&owner, &ProcessHandleRequest { id })
        .await?)
}

async fn process_kill(
    State(st): State<Arc<AppState>>,
    Extension(auth): Extension<Auth>,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> ApiResult {
    let id = path_id(id)?;
    let owner = caller(&auth, &headers)?.owner().to_owned();
    ok(st
        .service
        .kill(&owner, &ProcessHandleRequest { id })
        .await?)
}

async fn process_output(
    State(st): State<Arc<AppState>>,
    Extension(auth): Extension<Auth>,
    id: Result<Path<String>, PathRejection>,
    query: Result<Query<OutputQuery>, QueryRejection>,
    headers: HeaderMap,
) -> ApiResult {
    let id = path_id(id)?;
    let Query(q) = query.map_err(|e| query_error(&e))?;
    let owner = caller(&auth, &headers)?.owner().to_owned();
    let req = ProcessOutputRequest {
        id,
        stream: q.stream,
        offset: q.offset,
        max_bytes: q.max_bytes.unwrap_or(DEFAULT_OUTPUT_READ_BYTES),
    };
    req.check()?;
    ok(st.service.output(&owner, &req).await?)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StdinBody {
    #[serde(default)]
    data: String,
    #[serde(default)]
    close: bool,
}

async fn process_stdin(
    State(st): State<Arc<AppState>>,
    Extension(auth): Extension<Auth>,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    let id = path_id(id)?;
    let owner = caller(&auth, &headers)?.owner().to_owned();
    check_json(&headers)?;
    let b: StdinBody = json_body(&read_body(body).await?)?;
    let req = ProcessWriteStdinRequest {
        id,
        data: b.data,
        close: b.close,
    };
    req.check()?;
    ok(st.service.write_stdin(&owner, &req).await?)
}

/// A body that may be empty (then `T::default()`), else JSON of `T`'s closed shape.
async fn optional_json_body<T: serde::de::DeserializeOwned + Default>(
    headers: &HeaderMap,
    body: Body,
) -> Result<T, ApiError> {
    let body = read_body(body).await?;
    if body.is_empty() {
        return Ok(T::default());
    }
    check_json(headers)?;
    json_body(&body)
}

/// A small JSON body of a closed shape; anything else is `input.malformed`.
fn json_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    tierbox_policy::json::from_slice(body).map_err(|e| {
        ApiError::from(tierbox_policy::Rejection::Malformed {
            detail: e.to_string(),
        })
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChangesQuery {
    #[serde(default)]
    diff: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ApplyBody {
    #[serde(default)]
    paths: Vec<String>,
    #[serde(default)]
    include_flagged: bool,
}

async fn changes_list(
    State(st): State<Arc<AppState>>,
    Extension(auth): Extension<Auth>,
    headers: HeaderMap,
) -> ApiResult {
    let caller = caller(&auth, &headers)?;
    ok(st.service.changes_list(&caller).await?)
}

async fn changes_show(
    State(st): State<Arc<AppState>>,
    Extension(auth): Extension<Auth>,
    headers: HeaderMap,
    id: Result<Path<String>, PathRejection>,
    query: Result<Query<ChangesQuery>, QueryRejection>,
) -> ApiResult {
    let caller = caller(&auth, &headers)?;
    let run_id = path_id(id)?;
    let Query(q) = query.map_err(|e| query_error(&e))?;
    let req = tierbox_policy::handle::ChangesShowRequest {
        run_id,
        diff: q.diff,
    };
    ok(st.service.changes_show(&caller, &req).await?)
}

/// `POST /v1/changes/{run_id}/apply`: an empty body applies everything; `{"paths": […]}`
/// applies those paths; `"include_flagged": true` consents to the flagged changes.
async fn changes_apply(
    State(st): State<Arc<AppState>>,
    Extension(auth): Extension<Auth>,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    let caller = caller(&auth, &headers)?;
    let run_id = path_id(id)?;
    let b: ApplyBody = optional_json_body(&headers, body).await?;
    let doc = serde_json::json!({
        "run_id": run_id,
        "paths": b.paths,
        "include_flagged": b.include_flagged,
    });
    let req = tierbox_policy::handle::ChangesApplyRequest::from_json(doc.to_string().as_bytes())?;
    ok(st.service.changes_apply(&caller, &req).await?)
}

async fn changes_discard(
    State(st): State<Arc<AppState>>,
    Extension(auth): Extension<Auth>,
    headers: HeaderMap,
    id: Result<Path<String>, PathRejection>,
) -> ApiResult {
    let caller = caller(&auth, &headers)?;
    let run_id = path_id(id)?;
    let req = tierbox_policy::handle::ChangesDiscardRequest { run_id };
    ok(st.service.changes_discard(&caller, &req).await?)
}

/// `DELETE /v1/session`: with the operator token, ends the `Tierbox-Session` it names
/// (its `run_owned` processes); with a session token, ends that session — its
/// processes, and the token itself.
async fn end_session(
    State(st): State<Arc<AppState>>,
    Extension(auth): Extension<Auth>,
    headers: HeaderMap,
) -> ApiResult {
    let caller = caller(&auth, &headers)?;
    let owner = caller.owner().to_owned();
    let session = match &auth {
        Auth::Session(s) => {
            st.sessions.revoke(&s.id);
            s.id.clone()
        }
        Auth::Operator => owner.strip_prefix("http:").unwrap_or(&owner).to_owned(),
    };
    st.ws.end_owner(&owner);
    st.service.end_owner(&owner).await;
    ok(crate::results::to_json(&crate::results::SessionEnded {
        session,
        ended: true,
    }))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewSessionBody {
    #[serde(default)]
    name: Option<String>,
}

/// Refuses a session token on an operator-only route.
fn operator_only(auth: &Auth, what: &str) -> Result<(), ApiError> {
    match auth {
        Auth::Operator => Ok(()),
        Auth::Session(_) => Err(err(
            "auth.forbidden",
            format!("{what} takes the operator token; a session token cannot"),
        )),
    }
}

/// `POST /v1/sessions` (operator token): a session token for an agent, bound to a fresh
/// session. The token is shown once.
async fn new_session(
    State(st): State<Arc<AppState>>,
    Extension(auth): Extension<Auth>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    operator_only(&auth, "issuing a session token")?;
    let b: NewSessionBody = optional_json_body(&headers, body).await?;
    if let Some(name) = &b.name
        && !session_name_ok(name)
    {
        return Err(err(
            "input.malformed",
            format!(
                "session name {name:?} must be 1 to {MAX_SESSION_BYTES} characters of [A-Za-z0-9_-]"
            ),
        ));
    }
    let (token, session) = st.sessions.issue(b.name)?;
    ok(crate::results::to_json(&crate::results::SessionIssued {
        owner: session.owner(),
        session: session.id.clone(),
        name: session.name.clone(),
        token,
    }))
}

/// `DELETE /v1/sessions/{id}` (operator token): ends a session — its token and its
/// `run_owned` processes.
async fn revoke_session(
    State(st): State<Arc<AppState>>,
    Extension(auth): Extension<Auth>,
    id: Result<Path<String>, PathRejection>,
) -> ApiResult {
    operator_only(&auth, "ending another session")?;
    let id = path_id(id)?;
    let Some(session) = st.sessions.revoke(&id) else {
        return Err(err("sessions.not_found", format!("no live session {id}")));
    };
    st.ws.end_owner(&session.owner());
    st.service.end_owner(&session.owner()).await;
    ok(crate::results::to_json(&crate::results::SessionEnded {
        session: id,
        ended: true,
    }))
}

async fn not_found(req: Request) -> ApiError {
    err(
        "http.not_found",
        format!(
            "no route {} {}; see /v1/openapi.json",
            req.method(),
            req.uri().path()
        ),
    )
}

async fn method_not_allowed(req: Request) -> ApiError {
    err(
        "http.method_not_allowed",
        format!(
            "{} is not allowed on {}; see /v1/openapi.json",
            req.method(),
            req.uri().path()
        ),
    )
}

/// The API's router.
///
/// ```
/// use tierbox_policy::Policy;
/// use tierbox_runner::Runner;
/// use tierbox_server::http::{HttpConfig, router};
/// use tierbox_server::service::Service;
///
/// let app = router(
///     Service::new(Runner::new(Policy::builtin_default())),
///     HttpConfig {
///         token: "a-long-random-token".into(),
///         max_concurrent: 4,
///         queue: 8,
///         ws: Default::default(),
///     },
/// );
/// # let _ = app;
/// ```
pub fn router(service: Service, config: HttpConfig) -> Router {
    let state = Arc::new(AppState {
        service,
        token: config.token,
        sessions: Sessions::default(),
        ws: crate::term_ws::TermWs::new(config.ws),
        slots: Arc::new(Semaphore::new(config.max_concurrent.max(1))),
        admitted: AtomicUsize::new(0),
        capacity: config.max_concurrent.max(1) + config.queue,
    });
    let routes = Router::new()
        .route("/v1/health", get(health))
        .route("/v1/openapi.json", get(openapi))
        .route("/v1/process/run", post(process_run))
        .route("/v1/process/check", post(process_check))
        .route("/v1/process", get(process_list))
        .route("/v1/process/{id}", get(process_status))
        .route("/v1/process/{id}/output", get(process_output))
        .route("/v1/process/{id}/stdin", post(process_stdin))
        .route("/v1/process/{id}/kill", post(process_kill))
        .route("/v1/wasm/run", post(wasm_run))
        .route("/v1/changes", get(changes_list))
        .route("/v1/changes/{id}", get(changes_show))
        .route("/v1/changes/{id}/apply", post(changes_apply))
        .route("/v1/changes/{id}/discard", post(changes_discard))
        .route("/v1/daemon", get(daemon_identity))
        .route("/v1/session", delete(end_session))
        .route("/v1/sessions", post(new_session))
        .route("/v1/sessions/{id}", delete(revoke_session));
    files::routes(term_stream::routes(term_ws::routes(terms::routes(routes))))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::disable())
        .layer(middleware::from_fn_with_state(state.clone(), admit))
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .with_state(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real Tier B outcome (`true`), as the HTTP API answered it.
    const OUTCOME_SAMPLE: &str = include_str!("../../tierbox-runner/src/outcome_sample.json");

    #[test]
    fn outcomes_are_encoded_as_their_value_would_be() {
        let outcome: tierbox_runner::Outcome = serde_json::from_str(OUTCOME_SAMPLE).unwrap();
        let reply = RunReply::Finished(Box::new(outcome));
        let value = reply.to_json();
        let body = |r: Response| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            let bytes = rt
                .block_on(axum::body::to_bytes(r.into_body(), usize::MAX))
                .unwrap();
            bytes.to_vec()
        };
        let direct = ok_serialized(&reply).unwrap();
        assert_eq!(
            direct.headers()[header::CONTENT_TYPE],
            HeaderValue::from_static("application/json")
        );
        assert_eq!(body(direct), body(ok(value.clone()).unwrap()));
        let mut line = serde_json::to_vec(&json!({ "event": "result", "outcome": value })).unwrap();
        line.push(b'\n');
        assert_eq!(result_line(&reply).unwrap().to_vec(), line);
    }

    #[test]
    fn token_comparison() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"abcd"));
    }

    #[test]
    fn bodies_must_be_json() {
        let mut h = HeaderMap::new();
        assert!(check_json(&h).is_ok());
        for ok in [
            "application/json",
            "application/json; charset=utf-8",
            "application/merge-patch+json",
        ] {
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ok));
            assert!(check_json(&h).is_ok(), "{ok}");
        }
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "application/xml",
        ] {
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(bad));
            assert_eq!(
                check_json(&h).map_err(|e| e.0.code).unwrap_err(),
                "http.unsupported_media_type"
            );
        }
    }

    #[test]
    fn session_names_are_checked() {
        let owner = |h: &HeaderMap| {
            caller(&Auth::Operator, h)
                .map(|c| c.owner().to_owned())
                .map_err(|e| e.0.code)
        };
        let mut h = HeaderMap::new();
        assert_eq!(owner(&h).unwrap_or_default(), "http:default");
        h.insert(SESSION_HEADER, HeaderValue::from_static("agent-7_b"));
        assert_eq!(owner(&h).unwrap_or_default(), "http:agent-7_b");
        h.insert(SESSION_HEADER, HeaderValue::from_static("a/b"));
        assert_eq!(owner(&h).unwrap_err(), "http.bad_request");
    }

    #[test]
    fn a_session_token_is_its_session_whatever_the_header_says() {
        let session = Arc::new(Session {
            id: "0123456789abcdef0123456789abcdef".to_owned(),
            name: Some("agent-1".to_owned()),
        });
        let auth = Auth::Session(session.clone());
        let mut h = HeaderMap::new();
        let agent = Caller::Agent {
            owner: session.owner(),
        };
        assert_eq!(caller(&auth, &h).unwrap(), agent);
        h.insert(SESSION_HEADER, HeaderValue::from_static("agent-1"));
        assert_eq!(caller(&auth, &h).unwrap(), agent);
        h.insert(SESSION_HEADER, HeaderValue::from_static("agent-2"));
        assert_eq!(
            caller(&auth, &h).map_err(|e| e.0.code).unwrap_err(),
            "http.bad_request"
        );
    }
}
