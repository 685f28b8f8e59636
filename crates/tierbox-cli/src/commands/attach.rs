//! Terms the local daemon holds, from this terminal: `tierbox ps` lists the caller's,
//! `tierbox attach ID` shows one (the recent tail of its output, then what it prints,
//! this terminal's keys and size going to it) until it ends or the detach keys
//! ([`crate::term_io::DETACH_KEYS`]) leave it running, and `tierbox run -t` through the daemon starts one
//! (`POST /v1/terms`) and attaches to it.
//!
//! Everything goes over the daemon's socket with its token and its peer-credential checks
//! ([`crate::daemon`]). The CLI is the operator of its own daemon: its terms are those of
//! the operator's default session (`http:default`, no `Tierbox-Session` header), so a
//! term started over the socket with `curl` and no header is listed and attachable too;
//! another session's id is `term.not_found`, as an id that never existed is.
//!
//! Attaching uses two connections: one long-polls the output
//! (`GET /v1/terms/{id}/output?wait_ms=`), the other carries input and resizes, so a key
//! never waits for a poll to return. A term started without a daemon (`tierbox run -t`
//! in process) lives in that process and is not reachable here.

use std::io::Write;
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
    DetachKeys, DetachSeq, Ended, RawMode, exit_status, own_size, stdin_chunks, window_changes,
};

/// Bytes of a term's recent output printed on attach (the redraw): enough for a screen or
/// two of a shell or a REPL. A full-screen program redraws itself on the resize sent
/// after it; what is older is not shown (`GET /v1/terms/{id}/output` reads it).
pub const REDRAW_BYTES: u64 = 16 * 1024;

/// How long one read of a term's output waits for some, in milliseconds (the daemon's
/// cap is `MAX_TERM_WAIT_MS`): each attach holds one of the daemon's request slots while
/// it waits.
pub const ATTACH_WAIT_MS: u64 = 1000;

/// Most bytes one read of a term's output returns.
const READ_BYTES: usize = 64 * 1024;

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
    /// A termination signal arrived (its number): the term runs on.
    Interrupted(i32),
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

/// One read of a term's output.
#[derive(Debug, serde::Deserialize)]
struct OutputRead {
    text: String,
    #[serde(default)]
    bytes_base64: Option<String>,
    next_offset: u64,
    total_bytes: u64,
    ended: bool,
}

impl OutputRead {
    /// Whether nothing more will come: the term ended and this read reached its end.
    fn last(&self) -> bool {
        self.ended && self.next_offset >= self.total_bytes
    }
}

async fn read_output(
    conn: &mut Connection,
    id: &str,
    offset: u64,
    max_bytes: usize,
    wait_ms: u64,
) -> Result<OutputRead, ApiError> {
    let path =
        format!("/v1/terms/{id}/output?offset={offset}&max_bytes={max_bytes}&wait_ms={wait_ms}");
    let reply = call(conn, "GET", &path, None).await?;
    serde_json::from_value(reply).map_err(|e| transport(format!("an output read: {e}")))
}

/// Long-polls the term's output from `offset` on `reads`, sending each read (or the
/// error that ended the polling) to `tx`, until the last read.
async fn poll_output(
    mut reads: Connection,
    id: String,
    mut offset: u64,
    tx: tokio::sync::mpsc::Sender<Result<OutputRead, ApiError>>,
) {
    loop {
        let read = read_output(&mut reads, &id, offset, READ_BYTES, ATTACH_WAIT_MS).await;
        let done = match &read {
            Ok(r) => {
                offset = r.next_offset;
                r.last()
            }
            Err(_) => true,
        };
        if tx.send(read).await.is_err() || done {
            return;
        }
    }
}

/// Types `bytes` into the term (and then its end-of-file character, with `eof`). An
/// ended term's refusal is not an error: the output reader sees the end.
async fn send_input(
    conn: &mut Connection,
    id: &str,
    bytes: &[u8],
    eof: bool,
) -> Result<(), ApiError> {
    if bytes.is_empty() && !eof {
        return Ok(());
    }
    let wire = tierbox_runner::wire::encode(bytes);
    let mut body = match wire.bytes_base64 {
        Some(b64) => json!({ "data_base64": b64 }),
        None if bytes.is_empty() => json!({}),
        None => json!({ "data": wire.text }),
    };
    body["eof"] = Value::Bool(eof);
    ignore_ended(call(conn, "POST", &format!("/v1/terms/{id}/input"), Some(&body)).await)
}

/// Sizes the term as this terminal (`SIGWINCH` inside).
async fn send_size(conn: &mut Connection, id: &str) -> Result<(), ApiError> {
    let size = own_size();
    let body = json!({ "rows": size.rows, "cols": size.cols });
    ignore_ended(call(conn, "POST", &format!("/v1/terms/{id}/resize"), Some(&body)).await)
}

fn ignore_ended(r: Result<Value, ApiError>) -> Result<(), ApiError> {
    match r {
        Err(e) if e.code != "term.ended" => Err(e),
        _ => Ok(()),
    }
}

/// Shows the term `id` on this terminal until it ends, the detach keys are typed or a
/// termination signal arrives: its output from `from` on, this terminal's input and size
/// going to it.
async fn attach(
    mut writes: Connection,
    id: &str,
    from: ReadFrom,
    detach: DetachSeq,
) -> Result<Attached, ApiError> {
    let mut reads = writes
        .another()
        .await
        .map_err(|e| transport(format!("{e:#}")))?;
    let offset = match from {
        ReadFrom::Beginning => 0,
        ReadFrom::Tail => {
            let latest = read_output(&mut reads, id, 0, 1, 0).await?;
            latest.total_bytes.saturating_sub(REDRAW_BYTES)
        }
    };
    // The size of this terminal, which may not be the one the term had: a full-screen
    // program redraws itself when it changes.
    send_size(&mut writes, id).await?;
    let (tx, mut output) = tokio::sync::mpsc::channel(4);
    tokio::spawn(poll_output(reads, id.to_owned(), offset, tx));
    let mut input = stdin_chunks();
    let mut winch = window_changes();
    let signal = crate::termination_signal();
    tokio::pin!(signal);
    let mut keys = DetachKeys::new(detach);
    let mut stdout = std::io::stdout();
    let mut input_open = true;
    loop {
        tokio::select! {
            read = output.recv() => {
                let read = read.ok_or_else(|| transport("the output reader stopped"))??;
                let bytes = tierbox_runner::wire::decode(&read.text, read.bytes_base64.as_deref())
                    .map_err(|e| transport(format!("an output read: {e}")))?;
                let _ = stdout.write_all(&bytes).and_then(|()| stdout.flush());
                if read.last() {
                    let status = call(&mut writes, "GET", &format!("/v1/terms/{id}"), None).await?;
                    let ended = serde_json::from_value(status)
                        .map_err(|e| transport(format!("the term's status: {e}")))?;
                    return Ok(Attached::Ended(ended));
                }
            }
            Some(chunk) = input.recv(), if input_open => match chunk {
                Some(bytes) => {
                    let typed = keys.feed(&bytes);
                    send_input(&mut writes, id, &typed.forward, false).await?;
                    if typed.detach {
                        return Ok(Attached::Detached);
                    }
                }
                None => {
                    input_open = false;
                    send_input(&mut writes, id, &keys.flush(), true).await?;
                }
            },
            Some(()) = async { winch.as_mut()?.recv().await } => send_size(&mut writes, id).await?,
            sig = &mut signal => return Ok(Attached::Interrupted(sig)),
        }
    }
}

/// Attaches to `id` in raw mode (restored before anything is printed) and returns the
/// exit status: the program's when it ended, 0 when detached, 128 + a termination signal.
async fn attach_and_report(
    conn: Connection,
    id: &str,
    from: ReadFrom,
    detach: DetachSeq,
) -> ExitCode {
    let name = detach.name();
    let raw = RawMode::enter();
    let attached = attach(conn, id, from, detach).await;
    drop(raw);
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
        Ok(Attached::Interrupted(sig)) => {
            still_running(&format!("signal {sig}"));
            ExitCode::from(u8::try_from(128 + sig).unwrap_or(1))
        }
        Err(e) => print_api_error(&e),
    }
}

/// The daemon's refusal, with a hint that fits it.
fn print_api_error(e: &ApiError) -> ExitCode {
    let json = report::settings().json;
    match e.code.as_str() {
        "term.not_found" => report::fail(
            report::Failure::Error,
            &e.code,
            &format!("{} [{}]", e.message, e.code),
            "`tierbox ps` lists the terms the daemon holds for you; a term started without a daemon lives in its own `tierbox run -t` and cannot be attached",
            json,
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
        attach_and_report(conn, id, ReadFrom::Tail, detach).await
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
            DaemonTerm::Ran(attach_and_report(conn, &id, ReadFrom::Beginning, detach).await)
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
