//! Terms the local daemon holds, from this terminal: `tierbox ps` lists the caller's,
//! `tierbox attach ID` shows one (the recent tail of its output, then what it prints,
//! this terminal's keys and size going to it) until it ends or the detach keys
//! ([`crate::term_io::DETACH_KEYS`]) leave it running, and `tierbox run -t` through the
//! daemon starts one (`POST /v1/terms`) and attaches to it. One client at a time types
//! into a term: `attach` is refused while another does, `--take-over` takes it from
//! that one (which is detached), `--view` only watches.
//!
//! Everything goes over the daemon's socket with its token and its peer-credential checks
//! ([`crate::daemon`]). The CLI is the operator of its own daemon: its terms are those of
//! the operator's default session (`http:default`, no `Tierbox-Session` header), so a
//! term started over the socket with `curl` and no header is listed and attachable too;
//! another session's id is `term.not_found`, as an id that never existed is.
//!
//! Attaching uses the term's WebSocket (`GET /v1/terms/{id}/ws`, with a single-use
//! ticket asked for with the daemon's token): output, input and resizes on one connection,
//! so a key never waits for output; the daemon audits each attach and detach. A term started without a daemon (`tierbox run -t`
//! in process) lives in that process and is not reachable here.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Result;
use serde_json::{Value, json};
use tierbox_runner::Runner;

use crate::daemon::{self, ApiError, Connection, Exchange};
use crate::print::{print_refusal, print_run_failure};
use crate::report;
use crate::term_io::{
    DetachKeys, DetachSeq, Ended, OUTPUT_CLOSED_EXIT, RawMode, exit_status, own_size, report_lost,
    show, stdin_chunks, window_changes,
};

/// Bytes of a term's recent output printed on attach (the redraw): enough for a screen or
/// two of a shell or a REPL. A full-screen program redraws itself on the resize sent
/// after it; what is older is not shown (`GET /v1/terms/{id}/output` reads it).
pub const REDRAW_BYTES: u64 = 16 * 1024;

/// `tierbox ps`'s exit status when no daemon answers: not a success, and not a status a
/// program run by `tierbox` could be mistaken for (`run` uses 124 to 126).
pub const NO_DAEMON_EXIT: u8 = 3;

/// The code of a transport failure talking to the daemon.
const DAEMON_FAILED: &str = "daemon.failed";

/// The code of an id that cannot be a term's.
const BAD_TERM_ID: &str = "cli.bad_term_id";

/// How an attach ended.
enum Attached {
    /// The program ended.
    Ended(Ended),
    /// The detach keys were typed: the term runs on.
    Detached,
    /// Another client took the term over (`tierbox attach --take-over`): the term runs on.
    TakenOver,
    /// A termination signal arrived (its number): the term runs on.
    Interrupted(i32),
    /// This process's stdout closed (its reader went away): the term runs on.
    OutputClosed,
}

/// How `tierbox attach` joins a term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Join {
    /// It types and sizes the term; refused while another client does.
    Control,
    /// It types and sizes the term, taking that over from the client that has it.
    TakeOver,
    /// It only watches (`--view`): keys other than the detach keys are dropped.
    View,
}

impl Join {
    /// The handshake's query for it.
    fn query(self) -> &'static str {
        match self {
            Self::Control => "mode=control",
            Self::TakeOver => "mode=control&takeover=true",
            Self::View => "mode=view",
        }
    }
}

/// Where an attach starts reading the term's output.
#[derive(Clone, Copy)]
enum ReadFrom {
    /// Its first byte: a term this command just started.
    Beginning,
    /// [`REDRAW_BYTES`] before its latest.
    Tail,
}

fn transport(e: impl std::fmt::Display) -> ApiError {
    ApiError {
        code: DAEMON_FAILED.to_owned(),
        message: format!("talking to the daemon: {e}"),
    }
}

/// A JSON call whose transport failure is an [`ApiError`] too.
async fn call(
    conn: &mut Connection,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<Value, ApiError> {
    conn.call(method, path, body)
        .await
        .map_err(|e| transport(format!("{e:#}")))?
}

/// How much output a term has produced.
async fn total_output(conn: &mut Connection, id: &str) -> Result<u64, ApiError> {
    let reply = call(
        conn,
        "GET",
        &format!("/v1/terms/{id}/output?offset=0&max_bytes=1&wait_ms=0"),
        None,
    )
    .await?;
    reply["total_bytes"]
        .as_u64()
        .ok_or_else(|| transport(format!("an output read without total_bytes: {reply}")))
}

/// The WebSocket of a term, over the daemon's socket.
type Ws = tokio_tungstenite::WebSocketStream<tokio::net::UnixStream>;

/// Opens the term's WebSocket (`GET /v1/terms/{id}/ws`) from `offset`: a single-use
/// ticket asked for on `conn` with the daemon's token, then the handshake on a new
/// connection to the same daemon, checked as every one is. The daemon records the attach
/// (and, when the socket closes, the detach) in its audit log.
async fn open_ws(conn: &mut Connection, id: &str, offset: u64, join: Join) -> Result<Ws, ApiError> {
    let ticket = call(conn, "POST", &format!("/v1/terms/{id}/ws_ticket"), None).await?;
    let ticket = ticket["ticket"]
        .as_str()
        .filter(|t| t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .ok_or_else(|| transport(format!("a ticket that cannot be used: {ticket}")))?
        .to_owned();
    let stream = conn
        .raw_stream()
        .await
        .map_err(|e| transport(format!("{e:#}")))?;
    let uri = format!(
        "ws://tierbox/v1/terms/{id}/ws?ticket={ticket}&offset={offset}&{}",
        join.query()
    );
    match tokio_tungstenite::client_async(uri, stream).await {
        Ok((ws, _)) => Ok(ws),
        Err(tokio_tungstenite::tungstenite::Error::Http(refused)) => {
            let body = refused.body().as_deref().unwrap_or_default();
            let reply: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
            Err(match reply["error"]["code"].as_str() {
                Some(code) => ApiError {
                    code: code.to_owned(),
                    message: reply["error"]["message"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                },
                None => transport(format!(
                    "the daemon refused the term's WebSocket ({})",
                    refused.status()
                )),
            })
        }
        Err(e) => Err(transport(format!("the term's WebSocket: {e}"))),
    }
}

/// A control message for the term's WebSocket.
fn control(message: &Value) -> tokio_tungstenite::tungstenite::Message {
    tokio_tungstenite::tungstenite::Message::text(message.to_string())
}

/// This terminal's size as a `resize` message; with `redraw`, one that makes the program
/// draw its screen again when the size stays as it was.
fn resize_message(redraw: bool) -> tokio_tungstenite::tungstenite::Message {
    let size = own_size();
    control(&json!({ "type": "resize", "rows": size.rows, "cols": size.cols, "redraw": redraw }))
}

/// Shows the term `id` on this terminal until it ends, the detach keys are typed or a
/// termination signal arrives: its output from `from` on, this terminal's input and size
/// going to it, over the term's WebSocket (one connection both ways: a key never waits
/// for output, and the attach holds none of the daemon's request slots).
async fn attach(
    mut conn: Connection,
    id: &str,
    (from, join): (ReadFrom, Join),
    detach: DetachSeq,
    lost: &mut u64,
) -> Result<Attached, ApiError> {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;

    let offset = match from {
        ReadFrom::Beginning => 0,
        ReadFrom::Tail => total_output(&mut conn, id)
            .await?
            .saturating_sub(REDRAW_BYTES),
    };
    let (mut to_term, mut from_term) = open_ws(&mut conn, id, offset, join).await?.split();
    let sent = |r: Result<(), tokio_tungstenite::tungstenite::Error>| {
        r.map_err(|e| transport(format!("the term's WebSocket: {e}")))
    };
    let controls = join != Join::View;
    // The size of this terminal, which may not be the one the term had; joining a running
    // term, a full-screen program is asked to draw its screen again even when the size
    // stays (a term this command just started has drawn nothing yet).
    if controls {
        let redraw = matches!(from, ReadFrom::Tail);
        sent(to_term.send(resize_message(redraw)).await)?;
    }
    let mut input = stdin_chunks();
    let mut winch = window_changes();
    let signal = crate::termination_signal();
    tokio::pin!(signal);
    let mut keys = DetachKeys::new(detach);
    let mut stdout = std::io::stdout();
    let mut input_open = true;
    loop {
        tokio::select! {
            frame = from_term.next() => match frame {
                Some(Ok(Message::Binary(bytes))) => {
                    if !show(&mut stdout, &bytes) {
                        let _ = to_term.close().await;
                        return Ok(Attached::OutputClosed);
                    }
                }
                Some(Ok(Message::Text(text))) => {
                    let message: Value = serde_json::from_str(text.as_str()).unwrap_or(Value::Null);
                    if message["type"] == "lost" {
                        *lost += message["bytes"].as_u64().unwrap_or(0);
                    }
                    if message["type"] == "taken_over" {
                        let _ = to_term.close().await;
                        return Ok(Attached::TakenOver);
                    }
                    if message["type"] == "exit" {
                        let ended = serde_json::from_value(message)
                            .map_err(|e| transport(format!("the term's status: {e}")))?;
                        let _ = to_term.close().await;
                        return Ok(Attached::Ended(ended));
                    }
                    // `attached`, `lost` (output that left the ring unseen) and `error`
                    // (input to a term whose input is closed) change nothing here.
                }
                Some(Ok(_)) => {}
                // Closed without an `exit` (the daemon stopping, the owner's end): the
                // term's status says whether it still runs.
                Some(Err(_)) | None => {
                    let status = call(&mut conn, "GET", &format!("/v1/terms/{id}"), None).await?;
                    if status["state"] == "running" {
                        return Err(transport("the daemon closed the term's WebSocket"));
                    }
                    let ended = serde_json::from_value(status)
                        .map_err(|e| transport(format!("the term's status: {e}")))?;
                    return Ok(Attached::Ended(ended));
                }
            },
            Some(chunk) = input.recv(), if input_open => match chunk {
                Some(bytes) => {
                    let typed = keys.feed(&bytes);
                    // A view types nothing: only its detach keys count.
                    if controls && !typed.forward.is_empty() {
                        sent(to_term.send(Message::binary(typed.forward)).await)?;
                    }
                    if typed.detach {
                        let _ = to_term.close().await;
                        return Ok(Attached::Detached);
                    }
                }
                None => {
                    input_open = false;
                    let held = keys.flush();
                    if controls {
                        if !held.is_empty() {
                            sent(to_term.send(Message::binary(held)).await)?;
                        }
                        sent(to_term.send(control(&json!({ "type": "eof" }))).await)?;
                    }
                }
            },
            Some(()) = async { winch.as_mut()?.recv().await } => {
                if controls {
                    sent(to_term.send(resize_message(false)).await)?;
                }
            }
            sig = &mut signal => {
                let _ = to_term.close().await;
                return Ok(Attached::Interrupted(sig));
            }
        }
    }
}

/// Attaches to `id` in raw mode (restored before anything is printed) and returns the
/// exit status: the program's when it ended, 0 when detached, 128 + a termination signal.
async fn attach_and_report(
    conn: Connection,
    id: &str,
    how: (ReadFrom, Join),
    detach: DetachSeq,
) -> ExitCode {
    let name = detach.name();
    if how.1 == Join::View {
        eprintln!(
            "tierbox: watching term {id} (--view): what you type does not reach it; {name} detaches\r"
        );
    }
    let raw = RawMode::enter();
    let mut lost = 0;
    let attached = attach(conn, id, how, detach, &mut lost).await;
    drop(raw);
    report_lost(lost);
    let still_running = |how: &str| {
        eprintln!(
            "\r\ntierbox: {how}; term {id} runs on in the daemon: `tierbox attach {id}` re-attaches, `tierbox ps` lists it"
        );
    };
    match attached {
        Ok(Attached::Ended(ended)) => exit_status(&ended),
        Ok(Attached::Detached) => {
            still_running(&format!("detached ({name})"));
            ExitCode::SUCCESS
        }
        Ok(Attached::TakenOver) => {
            still_running("another client took the term over (tierbox attach --take-over)");
            ExitCode::SUCCESS
        }
        Ok(Attached::Interrupted(sig)) => {
            still_running(&format!("signal {sig}"));
            ExitCode::from(u8::try_from(128 + sig).unwrap_or(1))
        }
        Ok(Attached::OutputClosed) => {
            still_running("the output's reader went away");
            ExitCode::from(OUTPUT_CLOSED_EXIT)
        }
        Err(e) => print_api_error(&e),
    }
}

/// The daemon's refusal, with a hint that fits it.
fn print_api_error(e: &ApiError) -> ExitCode {
    let json = report::settings().json;
    let hinted = |hint: &str| {
        report::fail(
            report::Failure::Error,
            &e.code,
            &format!("{} [{}]", e.message, e.code),
            hint,
            json,
        )
    };
    match e.code.as_str() {
        "term.not_found" => hinted(
            "`tierbox ps` lists the terms the daemon holds for you; a term started without a daemon lives in its own `tierbox run -t` and cannot be attached",
        ),
        "term.controlled" => hinted(
            "`tierbox attach --view ID` watches it; `tierbox attach --take-over ID` takes it over (the other client is detached, the term runs on)",
        ),
        code if tierbox_policy::Rejection::ALL_CODES.contains(&code) => {
            print_refusal(code, &e.message, json)
        }
        code => print_run_failure(code, &e.message, json),
    }
}

/// What is said when no daemon answers `ps` or `attach`.
fn no_daemon(why: &str) -> String {
    format!(
        "no daemon answers ({why}): terms started without one live in their own `tierbox run -t` \
         process and cannot be listed or attached; `tierbox daemon start` starts one, and \
         `tierbox run -t` then runs its terms there"
    )
}

/// Whether `id` can name a term: 1 to 64 ASCII letters and digits (a term's id is 32 hex
/// digits), so it goes into a request path as it is.
fn check_id(id: &str) -> Result<(), ApiError> {
    if !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Ok(());
    }
    Err(ApiError {
        code: BAD_TERM_ID.to_owned(),
        message: format!("{id:?} is not a term id (32 hex digits, as `tierbox ps` shows)"),
    })
}

/// `tierbox attach ID`.
pub fn cmd_attach(
    id: &str,
    join: Join,
    state_dir: Option<PathBuf>,
    detach_keys: Option<&str>,
) -> Result<ExitCode> {
    if let Err(e) = check_id(id) {
        return Ok(print_api_error(&e));
    }
    let detach = match DetachSeq::chosen(detach_keys) {
        Ok(seq) => seq,
        Err(e) => return Ok(super::run::bad_detach_keys(&e)),
    };
    let state_dir = state_dir.unwrap_or_else(tierbox_runner::supervisor::default_state_dir);
    match daemon::with_any_daemon(&state_dir, async |conn| {
        attach_and_report(conn, id, (ReadFrom::Tail, join), detach).await
    }) {
        Ok(code) => Ok(code),
        Err(why) => Ok(report::fail(
            report::Failure::Error,
            "daemon.unavailable",
            &no_daemon(&why.to_string()),
            "`tierbox daemon status` says whether a daemon runs and where",
            report::settings().json,
        )),
    }
}

/// `tierbox ps [--json]`.
pub fn cmd_ps(state_dir: Option<PathBuf>, json: bool) -> Result<ExitCode> {
    let state_dir = state_dir.unwrap_or_else(tierbox_runner::supervisor::default_state_dir);
    let listed = daemon::with_any_daemon(&state_dir, async |mut conn| {
        call(&mut conn, "GET", "/v1/terms", None).await
    });
    match listed {
        Ok(Ok(list)) if json => {
            println!("{list}");
            Ok(ExitCode::SUCCESS)
        }
        Ok(Ok(list)) => {
            print!("{}", ps_table(&list, now_ms()));
            Ok(ExitCode::SUCCESS)
        }
        Ok(Err(e)) => Ok(print_api_error(&e)),
        Err(why) => {
            let message = no_daemon(&why.to_string());
            if json {
                println!(
                    "{}",
                    json!({ "daemon": false, "terms": [], "reason": message })
                );
            } else {
                eprintln!("tierbox: {message}");
            }
            Ok(ExitCode::from(NO_DAEMON_EXIT))
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `tierbox ps`'s table of `GET /v1/terms`'s `{"terms": [...]}` at `now_ms`.
fn ps_table(list: &Value, now_ms: u64) -> String {
    let terms = list["terms"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if terms.is_empty() {
        return "tierbox: the daemon holds no terms of yours\n".to_owned();
    }
    let mut out = format!(
        "{:<32}  {:<8}  {:<14}  {:>5}  COMMAND\n",
        "ID", "STATE", "TIER/BACKEND", "AGE"
    );
    for t in terms {
        let s = |k: &str| t[k].as_str().unwrap_or("?").to_owned();
        let argv: Vec<&str> = t["argv"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let started = t["started_unix_ms"].as_u64().unwrap_or(now_ms);
        out.push_str(&format!(
            "{:<32}  {:<8}  {:<14}  {:>5}  {}\n",
            printable(&s("id")),
            printable(&s("state")),
            printable(&format!("{}/{}", s("tier"), s("backend"))),
            age(now_ms.saturating_sub(started) / 1000),
            printable(&argv.join(" ")),
        ));
    }
    out
}

/// `text` with control characters shown as `?`: an argv is printed to a terminal.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// An age in seconds, in its largest whole unit (`42s`, `5m`, `3h`, `2d`).
fn age(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m", secs / 60),
        3600..86400 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86400),
    }
}

/// What became of `tierbox run -t` handed to the daemon.
pub enum DaemonTerm {
    /// The daemon ran it: the exit status.
    Ran(ExitCode),
    /// No daemon with this runner's identity answered (why): the term runs in process.
    NotUsed(String),
}

/// `tierbox run -t` through the daemon, when one with `runner`'s identity answers: the
/// term started there on a terminal of this one's size, then attached from its first
/// byte.
pub fn run_in_daemon(
    runner: &Runner,
    req: &tierbox_policy::ProcessRunRequest,
    detach: DetachSeq,
) -> DaemonTerm {
    let body = match start_body(req) {
        Ok(b) => b,
        Err(e) => return DaemonTerm::NotUsed(format!("encoding the request: {e}")),
    };
    let socket = daemon::socket_path(&runner.options().state_dir);
    daemon::with_daemon(
        runner,
        &socket,
        Exchange::First,
        DaemonTerm::NotUsed,
        async |mut conn, _| {
            let id = match call(&mut conn, "POST", "/v1/terms", Some(&body)).await {
                Ok(started) => started["id"].as_str().unwrap_or_default().to_owned(),
                Err(e) => return DaemonTerm::Ran(print_api_error(&e)),
            };
            if let Err(e) = check_id(&id) {
                return DaemonTerm::Ran(print_api_error(&e));
            }
            let how = match detach.keys() {
                [] => "detaching is off (--detach-keys none)".to_owned(),
                _ => format!("{} detaches", detach.name()),
            };
            eprintln!(
                "tierbox: term {id} runs in the daemon: {how}, `tierbox attach {id}` re-attaches"
            );
            let how = (ReadFrom::Beginning, Join::Control);
            DaemonTerm::Ran(attach_and_report(conn, &id, how, detach).await)
        },
    )
}

/// `POST /v1/terms`'s body for `req`: the request without the fields a term has no use
/// for (`tierbox_server::terms::NOT_FOR_TERMS`), on a terminal of this one's size.
fn start_body(req: &tierbox_policy::ProcessRunRequest) -> Result<Value, serde_json::Error> {
    let mut body = serde_json::to_value(req)?;
    if let Some(fields) = body.as_object_mut() {
        for field in tierbox_server::terms::NOT_FOR_TERMS {
            fields.remove(field);
        }
    }
    let size = own_size();
    body["pty"] = json!({ "rows": size.rows, "cols": size.cols });
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::term_io::DETACH_KEYS;

    #[test]
    fn ps_shows_each_term_and_its_age_in_its_largest_unit() {
        let list = json!({"terms": [{
            "id": "0123456789abcdef0123456789abcdef", "state": "running", "tier": "b",
            "backend": "landlock", "started_unix_ms": 1_000, "argv": ["python3", "-i", "\u{1b}[2J"],
        }]});
        let table = ps_table(&list, 1_000 + 125_000);
        assert!(table.starts_with("ID"), "{table}");
        let row = table.lines().nth(1).unwrap_or_default();
        assert!(
            row.contains("running") && row.contains("b/landlock"),
            "{row}"
        );
        assert!(
            row.contains(" 2m ") && row.ends_with("python3 -i ?[2J"),
            "{row}"
        );
        assert_eq!(age(59), "59s");
        assert_eq!(age(7200), "2h");
        assert_eq!(age(200_000), "2d");
        assert!(ps_table(&json!({"terms": []}), 0).contains("no terms"));
    }

    #[test]
    fn an_id_that_could_change_the_request_path_is_refused() {
        assert!(check_id("0123456789abcdef0123456789abcdef").is_ok());
        for bad in ["", "../daemon", "a b", "a?x=1", &"a".repeat(65)] {
            let e = check_id(bad).err().map(|e| e.code);
            assert_eq!(e.as_deref(), Some(BAD_TERM_ID), "{bad:?}");
        }
    }

    #[test]
    fn the_detach_keys_are_ctrl_p_ctrl_q() {
        assert_eq!(DETACH_KEYS, [0x10, 0x11]);
    }
}
