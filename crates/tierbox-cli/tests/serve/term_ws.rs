//! A term's WebSocket through `tierbox serve` (`POST /v1/terms/{id}/ws_ticket`, then `GET
//! /v1/terms/{id}/ws?ticket=…`), driven by a real WebSocket client (tungstenite): `bash -i`
//! in Tier B, native Tier C and bubblewrap — `echo $((6*7))` shows `42`, a resize to
//! 33x101 is what `stty size` says, the byte `^C` and the `signal` message interrupt
//! `sleep 30` with the shell still there, bad control messages are answered with `error`
//! frames and the session goes on, `exit 3` ends with an `exit` frame carrying 3 and a
//! close. Then the refusals, typed: no ticket, a reused, expired, revoked or other term's
//! ticket, another owner's term, a refused `Origin` (which spends no ticket), a failed
//! upgrade (which does), an allowed `Origin`; ending a session closes its WebSockets; the
//! audit log has each attach and detach and never what was typed. Skipped with a printed
//! reason where the host cannot run a tier, failed under `CI=true`.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tungstenite::Message;
use tungstenite::client::IntoClientRequest;

use crate::support::*;
use crate::terms::{GIVE_UP, Http, Where, backend_of, code_of, setup};

/// The browser origin the servers of these tests allow.
const APP_ORIGIN: &str = "https://app.example";

/// How long the refusal test's server keeps a ticket (`--ws-ticket-ttl-ms`), so that an
/// expired one is seen without waiting the default 30 s.
const SHORT_TTL: Duration = Duration::from_millis(1500);

/// What a WebSocket brought.
#[derive(Debug)]
enum Frame {
    Bytes(Vec<u8>),
    Json(Value),
    Closed(Option<u16>),
}

/// One attached WebSocket of a term.
struct Ws {
    socket: tungstenite::WebSocket<TcpStream>,
    /// Output received and not yet consumed by a `read_until`.
    pending: Vec<u8>,
    /// The text frames received, in order.
    texts: Vec<Value>,
}

impl Http<'_> {
    /// A ticket for one WebSocket of `id`.
    fn ticket(&self, id: &str) -> String {
        let v = self.ok("POST", &format!("/v1/terms/{id}/ws_ticket"), None);
        assert!(v["expires_in_ms"].as_u64().unwrap() > 0, "{v}");
        v["ticket"].as_str().unwrap().to_owned()
    }

    /// Starts `bash -i` as a term on `tier`; its id.
    fn bash(&self, tier: &str) -> String {
        let start =
            json!({ "command": "bash", "args": ["--norc", "--noprofile", "-i"], "tier": tier });
        let started = self.ok("POST", "/v1/terms", Some(start));
        started["id"].as_str().unwrap().to_owned()
    }
}

/// Opens the WebSocket of term `id` with `ticket` (and an `Origin` header, if given).
fn connect(s: &Server, id: &str, ticket: &str, origin: Option<&str>) -> Ws {
    try_connect(s, id, ticket, origin, "").unwrap_or_else(|e| panic!("the handshake failed: {e}"))
}

/// [`connect`] with `query` (`&mode=view`, `&takeover=true`) after the ticket.
fn connect_with(s: &Server, id: &str, ticket: &str, query: &str) -> Ws {
    try_connect(s, id, ticket, None, query)
        .unwrap_or_else(|e| panic!("the handshake ({query}) failed: {e}"))
}

fn try_connect(
    s: &Server,
    id: &str,
    ticket: &str,
    origin: Option<&str>,
    query: &str,
) -> Result<Ws, tungstenite::Error> {
    let url = format!("ws://{}/v1/terms/{id}/ws?ticket={ticket}{query}", s.addr);
    let mut req = url.as_str().into_client_request().unwrap();
    if let Some(o) = origin {
        req.headers_mut().insert("Origin", o.parse().unwrap());
    }
    let stream = TcpStream::connect(&s.addr).unwrap();
    // The handshake's answer may wait for the server's control handover; frames are then
    // read in short waits.
    stream.set_read_timeout(Some(GIVE_UP)).unwrap();
    let (socket, response) = tungstenite::client(req, stream).map_err(|e| match e {
        tungstenite::HandshakeError::Failure(e) => e,
        tungstenite::HandshakeError::Interrupted(_) => {
            tungstenite::Error::Io(std::io::ErrorKind::WouldBlock.into())
        }
    })?;
    assert_eq!(response.status(), 101);
    socket
        .get_ref()
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut ws = Ws {
        socket,
        pending: Vec::new(),
        texts: Vec::new(),
    };
    let first = ws.next();
    let Frame::Json(attached) = first else {
        panic!("the first frame is not `attached`: {first:?}");
    };
    assert_eq!(
        (attached["type"].as_str(), attached["id"].as_str()),
        (Some("attached"), Some(id)),
        "{attached}"
    );
    Ok(ws)
}

/// The handshake of term `id` as a plain HTTP request (so that a refusal's body is read
/// whole): its status and JSON body. `Connection: close` goes first, so a handshake that
/// passes every check is no upgrade (426).
fn handshake(s: &Server, path: &str, origin: Option<&str>) -> (u16, Value) {
    let mut headers = vec![
        ("Connection", "Upgrade"),
        ("Upgrade", "websocket"),
        ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ];
    if let Some(o) = origin {
        headers.push(("Origin", o));
    }
    let (status, _, body) = raw(&s.addr, "GET", path, None, &headers);
    (
        status,
        serde_json::from_str(&body).unwrap_or(Value::String(body)),
    )
}

impl Ws {
    /// The next frame (waiting at most [`GIVE_UP`]).
    fn next(&mut self) -> Frame {
        let give_up = Instant::now() + GIVE_UP;
        loop {
            match self.socket.read() {
                Ok(Message::Binary(b)) => return Frame::Bytes(b.to_vec()),
                Ok(Message::Text(t)) => {
                    let v: Value = serde_json::from_str(t.as_str()).unwrap();
                    self.texts.push(v.clone());
                    return Frame::Json(v);
                }
                Ok(Message::Close(frame)) => return Frame::Closed(frame.map(|f| f.code.into())),
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    assert!(
                        Instant::now() < give_up,
                        "no frame within {GIVE_UP:?}; output not yet consumed: {:?}, text frames: {:?}",
                        String::from_utf8_lossy(&self.pending),
                        self.texts
                    );
                }
                Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => {
                    return Frame::Closed(None);
                }
                Err(e) => panic!("reading the WebSocket: {e}"),
            }
        }
    }

    fn send_bytes(&mut self, bytes: &[u8]) {
        self.socket.send(Message::binary(bytes.to_vec())).unwrap();
    }

    fn send_json(&mut self, v: &Value) {
        self.socket.send(Message::text(v.to_string())).unwrap();
    }

    fn send_text(&mut self, text: &str) {
        self.socket.send(Message::text(text.to_owned())).unwrap();
    }

    /// Reads output until it contains `needle`; returns the output up to its end.
    fn read_until(&mut self, needle: &[u8]) -> Vec<u8> {
        loop {
            if let Some(at) = self.pending.windows(needle.len()).position(|w| w == needle) {
                let rest = self.pending.split_off(at + needle.len());
                return std::mem::replace(&mut self.pending, rest);
            }
            match self.next() {
                Frame::Bytes(b) => self.pending.extend_from_slice(&b),
                Frame::Json(v) => assert!(v["type"] != "exit", "ended before {needle:?}: {v}"),
                Frame::Closed(code) => panic!(
                    "closed ({code:?}) before {:?}; the terminal showed {:?}",
                    String::from_utf8_lossy(needle),
                    String::from_utf8_lossy(&self.pending)
                ),
            }
        }
    }

    /// The next text frame of `kind` (output before it is kept for `read_until`).
    fn until_text(&mut self, kind: &str) -> Value {
        loop {
            match self.next() {
                Frame::Bytes(b) => self.pending.extend_from_slice(&b),
                Frame::Json(v) if v["type"] == kind => return v,
                Frame::Json(_) => {}
                Frame::Closed(code) => panic!("closed ({code:?}) before a {kind} frame"),
            }
        }
    }

    /// Reads until the server closes; the close code.
    fn until_closed(&mut self) -> Option<u16> {
        loop {
            if let Frame::Closed(code) = self.next() {
                return code;
            }
        }
    }
}

in_every_backend!(a_term_over_its_websocket, websocket_shell);

/// `bash -i` over the WebSocket: typing, a resize, `^C` and `INT`, refused control
/// messages, and the exit.
fn websocket_shell(test: &str, at: Where) {
    let Some((policy, tier)) = setup(test, at) else {
        return;
    };
    let s = Server::start(&["--ws-origin", APP_ORIGIN], Some(&policy));
    let alice = Http {
        s: &s,
        session: "alice",
    };
    let id = alice.bash(tier);
    let status = alice.ok("GET", &format!("/v1/terms/{id}"), None);
    assert_eq!(status["backend"], backend_of(at), "{status}");
    let mut ws = connect(&s, &id, &alice.ticket(&id), None);
    ws.send_bytes(b"echo $((6*7))\r");
    ws.read_until(b"42\r\n");
    println!("{test}: echo $((6*7)) -> 42 over the WebSocket");

    ws.send_json(&json!({"type": "resize", "rows": 33, "cols": 101}));
    ws.send_bytes(b"stty size\r");
    ws.read_until(b"33 101");
    println!("{test}: stty size -> 33 101 after a resize message");

    // Refused messages: each an `error` frame naming the rule; the shell goes on.
    for (frame, code) in [
        (r#"{"type":"resize","rows":0,"cols":80}"#, "term.bad_size"),
        (r#"{"type":"resize","rows":24}"#, "input.malformed"),
        (r#"{"type":"bogus"}"#, "input.malformed"),
        ("echo not json", "input.malformed"),
        (
            r#"{"type":"signal","signal":"USR1"}"#,
            "term.signal_refused",
        ),
    ] {
        ws.send_text(frame);
        let e = ws.until_text("error");
        assert_eq!(e["code"], code, "{frame}: {e}");
        assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{e}");
    }
    ws.send_bytes(&vec![b' '; 64 * 1024 + 1]);
    let e = ws.until_text("error");
    assert_eq!(e["code"], "input.data_too_large", "{e}");
    assert!(e["message"].as_str().unwrap().contains("65537"), "{e}");
    ws.send_json(&json!({"type": "input", "data": "echo alive-$((1+1))\r"}));
    ws.read_until(b"alive-2");

    // The byte ^C interrupts the foreground job, not the shell; so does INT.
    ws.send_bytes(b"bash -c 'echo sle\"\"ep-started; exec sleep 30'\r");
    ws.read_until(b"sleep-started");
    ws.send_bytes(b"\x03");
    ws.send_bytes(b"echo after-$((2+3))\r");
    ws.read_until(b"after-5");
    ws.send_bytes(b"bash -c 'echo sle\"\"ep-again; exec sleep 30'\r");
    ws.read_until(b"sleep-again");
    ws.send_json(&json!({"type": "signal", "signal": "INT"}));
    ws.send_bytes(b"echo signalled-$((3+4))\r");
    ws.read_until(b"signalled-7");
    println!("{test}: ^C and INT interrupted sleep 30; the shell answered again");

    ws.send_bytes(b"exit 3\r");
    let exit = ws.until_text("exit");
    println!(
        "{test}: exit frame: state {} exit_code {}",
        exit["state"], exit["exit_code"]
    );
    assert_eq!(
        (exit["state"].as_str(), exit["exit_code"].as_i64()),
        (Some("exited"), Some(3)),
        "{exit}"
    );
    assert_eq!(exit["id"], id.as_str(), "{exit}");
    assert!(exit["attestation"].is_object(), "{exit}");
    assert_eq!(ws.until_closed(), Some(1000));
    // Nothing was lost on the way: this client read everything.
    assert!(
        !ws.texts.iter().any(|v| v["type"] == "lost"),
        "{:?}",
        ws.texts
    );
}

/// Every refusal of the handshake, typed; a session's end closes its WebSockets; the
/// audit log has the attaches and detaches and none of what was typed.
#[test]
fn websocket_handshakes_are_refused_as_documented() {
    let test = "websocket_handshakes_are_refused_as_documented";
    let Some((policy, tier)) = setup(test, Where::TierB) else {
        return;
    };
    let logdir = tempfile::tempdir().unwrap();
    let log = logdir.path().join("audit.jsonl");
    let policy = format!("{policy}[audit]\nlog = \"{}\"\n", path_str(&log));
    let ttl = SHORT_TTL.as_millis().to_string();
    let s = Server::start(
        &["--ws-origin", APP_ORIGIN, "--ws-ticket-ttl-ms", &ttl],
        Some(&policy),
    );
    let alice = Http {
        s: &s,
        session: "alice",
    };
    let bob = Http {
        s: &s,
        session: "bob",
    };
    let id = alice.bash(tier);
    let ws_path = |ticket: &str| format!("/v1/terms/{id}/ws?ticket={ticket}");
    let refused = |(status, v): (u16, Value), want: (u16, &str), says: &str| {
        assert_eq!((status, code_of(&v)), want, "{v}");
        let message = v["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains(says), "{message:?} does not say {says:?}");
    };

    // No ticket; a ticket that was never issued.
    let no_ticket = handshake(&s, &format!("/v1/terms/{id}/ws"), None);
    refused(no_ticket, (401, "ws.ticket_refused"), "no ticket");
    let forged = format!("tbw_{}", "0".repeat(64));
    refused(
        handshake(&s, &ws_path(&forged), None),
        (401, "ws.ticket_refused"),
        "not one this server issued",
    );
    // The bearer token does not open it either: the handshake takes a ticket only.
    let with_token = raw(
        &s.addr,
        "GET",
        &format!("/v1/terms/{id}/ws"),
        None,
        &[("Authorization", &format!("Bearer {TOKEN}"))],
    );
    assert_eq!(with_token.0, 401, "{}", with_token.2);

    // A refused Origin is 403, names the origin and the option, and spends no ticket.
    let ticket = alice.ticket(&id);
    let evil = handshake(&s, &ws_path(&ticket), Some("https://evil.example"));
    refused(evil, (403, "ws.origin_refused"), "https://evil.example");
    let evil = handshake(&s, &ws_path(&ticket), Some("null"));
    refused(evil, (403, "ws.origin_refused"), "--ws-origin");
    // The same ticket, from an allowed origin: attached, and the connection works.
    let mut ws = connect(&s, &id, &ticket, Some(APP_ORIGIN));
    ws.send_bytes(b"echo from-$((5*5))\r");
    ws.read_until(b"from-25");
    // Used: refused the second time.
    refused(
        handshake(&s, &ws_path(&ticket), None),
        (401, "ws.ticket_refused"),
        "already used",
    );
    drop(ws);

    // A message past the protocol's cap (twice a write's input) closes the connection
    // with 1009; the term goes on.
    let mut ws = connect(&s, &id, &alice.ticket(&id), None);
    ws.send_bytes(&vec![b' '; 128 * 1024 + 1]);
    assert_eq!(ws.until_closed(), Some(1009));
    let status = alice.ok("GET", &format!("/v1/terms/{id}"), None);
    assert_eq!(status["state"], "running", "{status}");

    // A ticket is spent by a handshake that then fails (here: not an upgrade).
    let ticket = alice.ticket(&id);
    let not_upgrade = raw(&s.addr, "GET", &ws_path(&ticket), None, &[]);
    let v: Value = serde_json::from_str(&not_upgrade.2).unwrap();
    assert_eq!(
        (not_upgrade.0, code_of(&v)),
        (426, "ws.upgrade_required"),
        "{v}"
    );
    refused(
        handshake(&s, &ws_path(&ticket), None),
        (401, "ws.ticket_refused"),
        "already used",
    );

    // Expired: after the server's ticket lifetime.
    let ticket = alice.ticket(&id);
    std::thread::sleep(SHORT_TTL + Duration::from_millis(300));
    refused(
        handshake(&s, &ws_path(&ticket), None),
        (401, "ws.ticket_refused"),
        "expired",
    );

    // Another owner: no ticket for alice's term; bob's ticket (for his term) does not
    // open alice's, and is spent trying.
    let (status, v) = bob.call("POST", &format!("/v1/terms/{id}/ws_ticket"), None);
    assert_eq!((status, code_of(&v)), (404, "term.not_found"), "{v}");
    let bobs = bob.bash(tier);
    let bobs_ticket = bob.ticket(&bobs);
    refused(
        handshake(&s, &ws_path(&bobs_ticket), None),
        (401, "ws.ticket_refused"),
        "another term",
    );
    refused(
        handshake(
            &s,
            &format!("/v1/terms/{bobs}/ws?ticket={bobs_ticket}"),
            None,
        ),
        (401, "ws.ticket_refused"),
        "already used",
    );
    let (status, v) = alice.call(
        "POST",
        "/v1/terms/00112233445566778899aabbccddeeff/ws_ticket",
        None,
    );
    assert_eq!((status, code_of(&v)), (404, "term.not_found"), "{v}");
    let (status, v) = s.call_with("POST", &format!("/v1/terms/{id}/ws_ticket"), None, &[]);
    assert_eq!((status, code_of(&v)), (401, "auth.missing"), "{v}");

    session_end_closes_its_websockets(&s, tier);

    // The audit log: an attach and a detach per WebSocket, with the origin when there
    // was one, and never the bytes typed.
    let text = s.stop_and_verify_log(&log);
    let events: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|r| r["record"]["envelope"]["attestation"]["body"].clone())
        .filter(|b| b["kind"] == "event")
        .collect();
    let named = |name: &str| events.iter().filter(|e| e["event"] == name).count();
    println!("{test}: audit events {events:?}");
    // Alice's from the allowed origin, the one closed for too large a message, and the
    // session's.
    assert_eq!(
        (named("term.attached"), named("term.detached")),
        (3, 3),
        "{text}"
    );
    let reasons: Vec<&str> = events.iter().filter_map(|e| e["reason"].as_str()).collect();
    assert_eq!(
        reasons,
        ["client_closed", "message_too_large", "owner_ended"],
        "{text}"
    );
    let from_app = events
        .iter()
        .find(|e| e["event"] == "term.detached" && e["origin"] == APP_ORIGIN)
        .unwrap_or_else(|| panic!("no detach with the origin: {text}"));
    assert_eq!(from_app["term_id"], id.as_str());
    assert_eq!(from_app["owner"], "http:alice");
    assert_eq!(from_app["input_bytes"], "echo from-$((5*5))\r".len());
    assert!(from_app["output_bytes"].as_u64().unwrap() > 0, "{from_app}");
    let ended = events
        .iter()
        .find(|e| e["event"] == "term.detached" && e["reason"] == "owner_ended")
        .unwrap_or_else(|| panic!("no detach for the session's end: {text}"));
    assert!(ended.get("origin").is_none(), "{ended}");
    assert!(
        !text.contains("from-$((5*5))"),
        "the audit log holds typed input"
    );
}

/// A session token's WebSocket is closed (1008) when the session ends, and its
/// outstanding tickets are spent.
fn session_end_closes_its_websockets(s: &Server, tier: &str) {
    let operator = [("Authorization", format!("Bearer {TOKEN}"))];
    let operator: Vec<(&str, &str)> = operator.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, issued) = s.call_with("POST", "/v1/sessions", Some("{}"), &operator);
    assert_eq!(status, 200, "{issued}");
    let bearer = format!("Bearer {}", issued["token"].as_str().unwrap());
    let agent = [("Authorization", bearer.as_str())];
    let start = json!({ "command": "bash", "args": ["--norc", "--noprofile", "-i"], "tier": tier, "lifetime": "detached" });
    let (status, started) = s.call_with("POST", "/v1/terms", Some(&start.to_string()), &agent);
    assert_eq!(status, 200, "{started}");
    let id = started["id"].as_str().unwrap().to_owned();
    let ticket = |s: &Server| {
        let (status, v) = s.call_with("POST", &format!("/v1/terms/{id}/ws_ticket"), None, &agent);
        assert_eq!(status, 200, "{v}");
        v["ticket"].as_str().unwrap().to_owned()
    };
    let mut ws = connect(s, &id, &ticket(s), None);
    let unused = ticket(s);
    ws.send_bytes(b"echo session-$((4*4))\r");
    ws.read_until(b"session-16");
    let (status, v) = s.call_with("DELETE", "/v1/session", None, &agent);
    assert_eq!(status, 200, "{v}");
    assert_eq!(ws.until_closed(), Some(1008));
    let (status, v) = handshake(s, &format!("/v1/terms/{id}/ws?ticket={unused}"), None);
    assert_eq!((status, code_of(&v)), (401, "ws.ticket_refused"), "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("session ended"),
        "{v}"
    );
}

/// A client that reads nothing while its term floods 20 MB: the term runs to its end
/// unblocked, and the client then gets what was in flight, a `lost` frame counting what
/// left the ring meanwhile, the rest, and the exit. The offsets add up: where it started,
/// plus every byte received and every byte lost, is every byte the term showed.
#[test]
fn a_client_that_does_not_read_only_loses_output() {
    let test = "a_client_that_does_not_read_only_loses_output";
    let Some((policy, tier)) = setup(test, Where::TierB) else {
        return;
    };
    // Redaction off: this is about the channel, not the redactor's speed.
    let policy = format!("{policy}[redaction]\nenabled = false\n");
    let s = Server::start(&[], Some(&policy));
    let alice = Http {
        s: &s,
        session: "alice",
    };
    let flood = "sleep 1; yes | head -c 20000000; echo flood-done-$((40+2))";
    let start = json!({ "command": "bash", "args": ["-c", flood], "tier": tier });
    let id = alice.ok("POST", "/v1/terms", Some(start))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut ws = connect(&s, &id, &alice.ticket(&id), None);
    let start_offset = ws.texts[0]["offset"].as_u64().unwrap();
    // Not a byte read until the term has ended.
    let status = alice.until_ended(&id);
    assert_eq!(status["exit_code"], 0, "{status}");
    let (mut received, mut lost, mut tail) = (0u64, 0u64, Vec::new());
    let exit = loop {
        match ws.next() {
            Frame::Bytes(b) => {
                received += b.len() as u64;
                tail.extend_from_slice(&b);
                let keep = tail.len().saturating_sub(64);
                tail.drain(..keep);
            }
            Frame::Json(v) if v["type"] == "lost" => lost += v["bytes"].as_u64().unwrap(),
            Frame::Json(v) if v["type"] == "exit" => break v,
            other => panic!("unexpected {other:?}"),
        }
    };
    println!(
        "{test}: from {start_offset}: received {received} bytes, lost {lost}, of {}",
        exit["stdout_bytes"]
    );
    assert!(lost > 0, "nothing was lost: the flood fit in flight?");
    assert_eq!(
        start_offset + received + lost,
        exit["stdout_bytes"].as_u64().unwrap(),
        "{exit}"
    );
    assert!(
        String::from_utf8_lossy(&tail).contains("flood-done-42"),
        "{:?}",
        String::from_utf8_lossy(&tail)
    );
    assert_eq!(ws.until_closed(), Some(1000));
}

/// One WebSocket controls a term: a second controlling attach is refused naming the way
/// out (after the handover wait), a view watches what the controller types and has its
/// own input, resize and signal refused, a takeover detaches the controller with a
/// `taken_over` frame and a close while the term runs on, and a redraw resize that keeps
/// the size still signals the program (`SIGWINCH`), which the kernel would not.
#[test]
fn one_websocket_controls_a_term_others_watch_or_take_it_over() {
    let test = "one_websocket_controls_a_term_others_watch_or_take_it_over";
    let Some((policy, tier)) = setup(test, Where::TierB) else {
        return;
    };
    let s = Server::start(&[], Some(&policy));
    let alice = Http {
        s: &s,
        session: "alice",
    };
    let id = alice.bash(tier);
    let mut first = connect(&s, &id, &alice.ticket(&id), None);
    first.send_json(&json!({"type": "resize", "rows": 30, "cols": 90}));
    first.send_bytes(b"echo one-$((1+1))\r");
    first.read_until(b"one-2");

    // A second controlling attach: refused, naming the controller and both ways out.
    let refused = try_connect(&s, &id, &alice.ticket(&id), None, "").err();
    let Some(tungstenite::Error::Http(refused)) = refused else {
        panic!("a second controlling attach was not refused: {refused:?}");
    };
    let status = refused.status().as_u16();
    let v: Value = serde_json::from_slice(refused.body().as_deref().unwrap_or_default()).unwrap();
    assert_eq!((status, code_of(&v)), (409, "term.controlled"), "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("mode=view") && message.contains("takeover=true"),
        "{message}"
    );

    // A view watches; what it sends is refused, and reaches nothing.
    let mut view = connect_with(&s, &id, &alice.ticket(&id), "&mode=view");
    for frame in [
        json!({"type": "input", "data": "echo typed-by-the-view\r"}),
        json!({"type": "resize", "rows": 5, "cols": 5}),
        json!({"type": "signal", "signal": "INT"}),
    ] {
        view.send_json(&frame);
        let e = view.until_text("error");
        assert_eq!(e["code"], "term.view_only", "{frame}: {e}");
    }
    view.send_bytes(b"echo typed-by-the-view\r");
    assert_eq!(view.until_text("error")["code"], "term.view_only");
    first.send_bytes(b"echo two-$((1+1))\r");
    view.read_until(b"two-2");
    println!("{test}: a second controller refused (409 term.controlled); the view watched");

    // Taken over: the first is told and closed; the term runs on under the new one.
    let mut second = connect_with(&s, &id, &alice.ticket(&id), "&takeover=true");
    let taken = first.until_text("taken_over");
    assert!(taken["socket"].as_u64().is_some(), "{taken}");
    assert_eq!(first.until_closed(), Some(1000));
    second.send_bytes(b"stty size; echo three-$((3*3))\r");
    let shown = second.read_until(b"three-9");
    assert!(
        String::from_utf8_lossy(&shown).contains("30 90"),
        "{}",
        String::from_utf8_lossy(&shown)
    );
    view.read_until(b"three-9");
    // Nothing the view typed reached the shell: the whole screen since the start (the
    // ring) never shows its command run.
    let mut all = connect_with(&s, &id, &alice.ticket(&id), "&mode=view&offset=0");
    let screen = all.read_until(b"three-9");
    assert!(
        !String::from_utf8_lossy(&screen).contains("\ntyped-by-the-view"),
        "{}",
        String::from_utf8_lossy(&screen)
    );

    // A redraw at the size the terminal already has: the foreground job gets SIGWINCH.
    second.send_bytes(
        b"bash -c 'trap \"echo winched-\\$(stty size)\" WINCH; echo tr\"\"apped; while :; do sleep 0.1; done'\r",
    );
    second.read_until(b"trapped");
    second.send_json(&json!({"type": "resize", "rows": 30, "cols": 90, "redraw": true}));
    second.read_until(b"winched-30 90");
    second.send_bytes(b"\x03");
    second.send_bytes(b"exit 4\r");
    let exit = second.until_text("exit");
    assert_eq!(exit["exit_code"], 4, "{exit}");
    assert_eq!(view.until_text("exit")["exit_code"], 4);
    println!(
        "{test}: taken over (first closed 1000); a redraw at 30x90 reached the job as SIGWINCH"
    );
}

/// `GET /v1/terms/{id}/stream`: a term followed over plain HTTP. JSON lines, `attached`
/// first, the output as `output` lines whose bytes are the terminal's, `exit` last with
/// the status, and the body ends with the term; a bad query is refused before anything
/// attaches, and the stream is audited as a view.
#[test]
fn a_term_followed_over_plain_http_streams_its_output_to_its_exit() {
    let test = "a_term_followed_over_plain_http_streams_its_output_to_its_exit";
    let Some((policy, tier)) = setup(test, Where::TierB) else {
        return;
    };
    let logdir = tempfile::tempdir().unwrap();
    let log = logdir.path().join("audit.jsonl");
    let policy = format!("{policy}[audit]\nlog = \"{}\"\n", path_str(&log));
    let s = Server::start(&[], Some(&policy));
    let alice = Http {
        s: &s,
        session: "alice",
    };
    let id = alice.bash(tier);
    for bad in ["offset=x", "offset=-1", "follow=1"] {
        let (status, v) = alice.call("GET", &format!("/v1/terms/{id}/stream?{bad}"), None);
        assert_eq!(
            (status, code_of(&v)),
            (400, "input.malformed"),
            "{bad}: {v}"
        );
    }
    let (status, v) = s.call_in("bob", "GET", &format!("/v1/terms/{id}/stream"), None);
    assert_eq!((status, code_of(&v)), (404, "term.not_found"), "{v}");

    let addr = s.addr.clone();
    let path = format!("/v1/terms/{id}/stream");
    let follower = std::thread::spawn(move || {
        let bearer = format!("Bearer {TOKEN}");
        raw(
            &addr,
            "GET",
            &path,
            None,
            &[("Authorization", &bearer), ("Tierbox-Session", "alice")],
        )
    });
    alice.ok(
        "POST",
        &format!("/v1/terms/{id}/input"),
        Some(json!({"data": "echo streamed-$((2*3))\r"})),
    );
    alice.ok(
        "POST",
        &format!("/v1/terms/{id}/input"),
        Some(json!({"data": "exit 5\r"})),
    );
    let (status, head, body) = follower.join().unwrap();
    assert_eq!(status, 200, "{head}\n{body}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/x-ndjson"),
        "{head}"
    );
    let lines: Vec<Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    assert_eq!(lines.first().map(|l| &l["type"]), Some(&json!("attached")));
    let last = lines.last().unwrap();
    assert_eq!(
        (&last["type"], &last["exit_code"]),
        (&json!("exit"), &json!(5)),
        "{last}"
    );
    let shown: String = lines
        .iter()
        .filter(|l| l["type"] == "output")
        .map(|l| l["text"].as_str().unwrap())
        .collect();
    assert!(shown.contains("streamed-6"), "{shown:?}");
    // The offsets run on without a gap: each output line starts where the last ended.
    let mut at = lines[0]["offset"].as_u64().unwrap();
    for l in lines.iter().filter(|l| l["type"] == "output") {
        assert_eq!(l["offset"].as_u64(), Some(at), "{l}");
        at = l["next_offset"].as_u64().unwrap();
    }
    println!(
        "{test}: {} lines, {} bytes of output, exit 5",
        lines.len(),
        at
    );
    let text = s.stop_and_verify_log(&log);
    let events: Vec<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| v["record"]["envelope"]["attestation"]["body"].clone())
        .filter(|b| b["term_id"] == id.as_str())
        .map(|b| format!("{} {}", b["event"], b["mode"]))
        .collect();
    assert_eq!(
        events,
        [r#""term.attached" "view""#, r#""term.detached" null"#],
        "{text}"
    );
    assert!(!text.contains("streamed-$"), "typed text in the audit log");
}
