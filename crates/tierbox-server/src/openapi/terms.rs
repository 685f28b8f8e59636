//! The `/v1/terms` part of the OpenAPI document: its request bodies (generated from the
//! types [`crate::terms`] parses with) and its paths.

use serde_json::{Map, Value, json};
use tierbox_runner::term::MAX_TERM_WAIT_MS;

use super::{
    POLICY_ERRORS, Parameters, ResponseSchemas, body, component, error_response, errors,
    json_response, with,
};
use crate::term_ws::protocol::ClientMessage;
use crate::term_ws::tickets::{MAX_WS_TICKETS, MAX_WS_TICKETS_PER_OWNER, WS_TICKET_TTL};
use crate::term_ws::{MAX_TERM_SOCKETS, MAX_TERM_SOCKETS_PER_OWNER, MAX_WS_MESSAGE_BYTES};
use crate::terms::{
    DEFAULT_TERM_READ_BYTES, MAX_TERM_INPUT_BYTES, MAX_TERM_READ_BYTES, TermInputBody,
    TermSignalBody, TermSizeBody, http_start_schema,
};

/// The term request bodies: `TermStartRequest`, `TermInputBody`, `TermSizeBody` and
/// `TermSignalBody`; and `TermWsClientMessage`, a control message on a term's WebSocket.
pub(super) fn term_request_schemas(schemas: &mut Map<String, Value>) {
    fn of<T: schemars::JsonSchema>() -> Value {
        serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null)
    }
    let start = component(http_start_schema(), schemas);
    schemas.insert("TermStartRequest".to_owned(), start);
    for (name, schema) in [
        ("TermWsClientMessage", of::<ClientMessage>()),
        ("TermInputBody", of::<TermInputBody>()),
        ("TermSizeBody", of::<TermSizeBody>()),
        ("TermSignalBody", of::<TermSignalBody>()),
    ] {
        let schema = component(schema, schemas);
        schemas.insert(name.to_owned(), schema);
    }
}

/// Errors of a request naming a term.
const TERM_ERRORS: [(&str, &str); 1] = [(
    "404",
    "no such term for this caller (term.not_found: also another owner's)",
)];

/// A request that acts on a running term: it may have ended.
const ENDED: (&str, &str) = (
    "409",
    "the term has ended (term.ended), or its input was closed or not read within 5 s (term.input)",
);

/// Terms: start, list, status, input, resize, signal, output and kill.
pub(super) fn term_paths(p: &Parameters, r: &ResponseSchemas) -> Value {
    let Parameters {
        term_id, session, ..
    } = p;
    let ResponseSchemas {
        status_schema,
        term_started_schema,
        term_output_schema,
        term_written_schema,
        term_resized_schema,
        term_signalled_schema,
        term_list_schema,
        term_ws_ticket_schema,
        term_ws_server_schema,
        ..
    } = r.clone();
    let policy = POLICY_ERRORS;
    let term = TERM_ERRORS[0];
    let params = json!([term_id.clone(), session.clone()]);
    let status = json_response(
        "the term's status (its attestation once ended)",
        status_schema,
    );
    let terminal = ("500", "the terminal refused the operation (term.terminal)");
    let ws = ws_paths(
        term_id,
        session,
        term,
        term_ws_ticket_schema,
        term_ws_server_schema,
    );
    let mut paths = json!({
        "/v1/terms": {
            "post": {
                "operationId": "term_start", "summary": "Start a program on a terminal of its own (a term): its id, status and first screen",
                "parameters": [session.clone()],
                "requestBody": body("TermStartRequest", json!({
                    "repl": { "summary": "Python's REPL on a 24x80 terminal (the policy must allow eval)",
                              "value": { "command": "python3", "args": ["-i", "-q"], "tier": "c" } },
                    "shell": { "summary": "bash on a 40x100 terminal, waiting up to 1 s for its prompt",
                               "value": { "command": "bash", "args": ["--norc", "-i"], "pty": { "rows": 40, "cols": 100 }, "wait_ms": 1000 } }
                })),
                "responses": with(errors(&[policy[0], policy[1], policy[2], ("409", "the most live terms of this owner or server (term.limit)"), ("500", "the host could not launch a valid plan"), ("503", "the attestation key or the audit log the policy requires is unavailable")]), "200", json_response("the term, started", term_started_schema))
            },
            "get": {
                "operationId": "term_list", "summary": "List your session's terms, running or ended",
                "parameters": [session.clone()],
                "responses": with(errors(&[]), "200", json_response("the session's terms", term_list_schema))
            }
        },
        "/v1/terms/{id}": { "get": {
            "operationId": "term_status", "summary": "Status of one term",
            "parameters": params.clone(),
            "responses": with(errors(&[term]), "200", status.clone())
        } },
        "/v1/terms/{id}/input": { "post": {
            "operationId": "term_input", "summary": "Type into a term's terminal (bytes exact), and optionally close its input (^D)",
            "parameters": params.clone(),
            "requestBody": body("TermInputBody", json!({
                "line": { "summary": "type a line (\\r is Enter)", "value": { "data": "print(6*7)\r" } },
                "bytes": { "summary": "send ^C as a byte, base64", "value": { "data_base64": "Aw==" } },
                "eof": { "summary": "close the input (^D)", "value": { "eof": true } }
            })),
            "responses": with(errors(&[term, ENDED, policy[0], policy[1]]), "200", json_response("bytes written", term_written_schema))
        } },
        "/v1/terms/{id}/resize": { "post": {
            "operationId": "term_resize", "summary": "Resize a term's terminal (SIGWINCH inside)",
            "parameters": params.clone(),
            "requestBody": body("TermSizeBody", json!({
                "large": { "summary": "40 rows of 100 columns", "value": { "rows": 40, "cols": 100 } }
            })),
            "responses": with(errors(&[term, ("409", "the term has ended (term.ended)"), policy[0], policy[1], terminal]), "200", json_response("the new size", term_resized_schema))
        } },
        "/v1/terms/{id}/signal": { "post": {
            "operationId": "term_signal", "summary": "Signal a term's foreground process group (INT, TERM, HUP, QUIT, KILL, WINCH, TSTP, CONT)",
            "parameters": params.clone(),
            "requestBody": body("TermSignalBody", json!({
                "interrupt": { "summary": "interrupt the foreground job, as ^C does", "value": { "signal": "INT" } }
            })),
            "responses": with(errors(&[term, ("409", "the term has ended (term.ended)"), policy[0], policy[1], terminal]), "200", json_response("the signal sent", term_signalled_schema))
        } },
        "/v1/terms/{id}/output": { "get": {
            "operationId": "term_output", "summary": "Read what a term's terminal showed from an offset on, waiting up to wait_ms for some",
            "parameters": [term_id.clone(), session.clone(),
                { "name": "offset", "in": "query", "required": false,
                  "schema": { "type": "integer", "minimum": 0, "default": 0 } },
                { "name": "max_bytes", "in": "query", "required": false,
                  "schema": { "type": "integer", "minimum": 1, "maximum": MAX_TERM_READ_BYTES,
                              "default": DEFAULT_TERM_READ_BYTES } },
                { "name": "wait_ms", "in": "query", "required": false,
                  "description": "With no output past offset yet, wait up to this long for some (the answer comes as soon as some arrives or the term ends).",
                  "schema": { "type": "integer", "minimum": 0, "maximum": MAX_TERM_WAIT_MS, "default": 0 } }],
            "responses": with(errors(&[term]), "200", json_response("output from the offset on", term_output_schema))
        } },
        "/v1/terms/{id}/stream": { "get": {
            "operationId": "term_stream",
            "summary": "Follow a term's output over plain HTTP: one JSON line per event until the term ends",
            "description": format!("application/x-ndjson, each line one event: {{\"type\":\"attached\",\"id\",\"offset\"}} first; {{\"type\":\"output\", offset, text, bytes_base64 (exactly when text is lossy), next_offset, missed_bytes, total_bytes}} as the terminal shows output; {{\"type\":\"lost\",\"bytes\"}} before output that follows a gap (the client read too slowly: the term is never held up); {{\"type\":\"exit\", ...its status}} last, then the body ends. A view: it sends nothing to the term. It holds no admission slot but one of the {MAX_TERM_SOCKETS} places of WebSockets and streams ({MAX_TERM_SOCKETS_PER_OWNER} per owner), ends with its owner's session, and is audited as an attach and a detach."),
            "parameters": [term_id.clone(), session.clone(),
                { "name": "offset", "in": "query", "required": false,
                  "description": "Absolute byte offset to start from; output already gone from it is reported as lost. Absent: what the ring still holds.",
                  "schema": { "type": "integer", "minimum": 0 } }],
            "responses": with(errors(&[term, ("503", "the policy's audit log cannot record the attach (audit.unavailable)")]), "200", json!({
                "description": "the events, one JSON object a line, until the term ends",
                "content": { "application/x-ndjson": { "schema": { "type": "string" } } }
            }))
        } },
        "/v1/terms/{id}/kill": { "post": {
            "operationId": "term_kill", "summary": "Kill a term and its whole tree; its final status",
            "parameters": params,
            "responses": with(errors(&[term]), "200", status)
        } }
    });
    if let (Value::Object(paths), Value::Object(ws)) = (&mut paths, ws) {
        paths.extend(ws);
    }
    paths
}

/// A term's WebSocket: the ticket, and the handshake (which takes the ticket instead of
/// the bearer token); the frames' schemas are `TermWsClientMessage` and
/// `TermWsServerMessage`, named by the handshake's `x-websocket` extension.
fn ws_paths(
    term_id: &Value,
    session: &Value,
    term: (&str, &str),
    ticket_schema: Value,
    server_schema: Value,
) -> Value {
    let ttl_ms = WS_TICKET_TTL.as_millis();
    let limit = format!(
        "{MAX_WS_TICKETS_PER_OWNER} tickets of this caller, or {MAX_WS_TICKETS} of the server, are outstanding (ws.ticket_limit)"
    );
    let sockets = format!(
        "{MAX_TERM_SOCKETS_PER_OWNER} WebSockets of this owner, or {MAX_TERM_SOCKETS} of the server, are open (ws.limit); or the request queue is full (server.busy)"
    );
    let protocol = format!(
        "Upgrades to a WebSocket carrying the term's terminal both ways. Client to server: binary frames are bytes typed into the terminal (at most {MAX_TERM_INPUT_BYTES} a frame); text frames are JSON control messages (TermWsClientMessage: resize, signal, eof, input). Server to client: first a text frame {{\"type\":\"attached\",\"id\",\"offset\"}}, then binary frames of output bytes from that offset (by default what the term's ring still holds, so an attach redraws), a text frame {{\"type\":\"lost\",\"bytes\"}} before output that follows a gap (the client read too slowly), {{\"type\":\"error\",\"code\",\"message\"}} for a refused message (the connection goes on), and when the term ends {{\"type\":\"exit\", ...its status}} then a close frame (1000). One WebSocket controls a term (mode=control, the default): a second controlling attach is refused with 409 term.controlled unless it asks takeover=true, which sends the first {{\"type\":\"taken_over\",\"socket\"}} and closes it (1000; the term runs on). A view (mode=view) only watches: its input, resizes and signals get error frames (term.view_only). A resize with \"redraw\": true that leaves the size as it was sends SIGWINCH to the foreground group anyway, so a full-screen program draws its screen again. Ending the ticket owner's session closes it (1008). A message above {MAX_WS_MESSAGE_BYTES} bytes closes it (1009). See docs/api.md, \"A term's WebSocket\"."
    );
    json!({
        "/v1/terms/{id}/ws_ticket": { "post": {
            "operationId": "term_ws_ticket",
            "summary": "A single-use ticket to open one WebSocket of a term (a browser cannot send Authorization on a WebSocket)",
            "description": format!("Valid for {ttl_ms} ms, for this term and this caller's owner only; spent by its first presentation, whatever follows."),
            "parameters": [term_id.clone(), session.clone()],
            "responses": with(errors(&[term, ("429", limit.as_str())]), "200", json_response("the ticket", ticket_schema))
        } },
        "/v1/terms/{id}/ws": { "get": {
            "operationId": "term_ws",
            "summary": "Attach to a term over a WebSocket: keys, resizes and signals in, the terminal's output out",
            "description": protocol,
            "security": [],
            "parameters": [term_id.clone(),
                { "name": "ticket", "in": "query", "required": true,
                  "description": "A ticket from POST /v1/terms/{id}/ws_ticket.",
                  "schema": { "type": "string", "pattern": "^tbw_[0-9a-f]{64}$" } },
                { "name": "offset", "in": "query", "required": false,
                  "description": "Absolute byte offset to send output from; output already gone from it is reported as lost. Absent: what the ring still holds.",
                  "schema": { "type": "integer", "minimum": 0 } },
                { "name": "mode", "in": "query", "required": false,
                  "description": "control (the default): this WebSocket types, resizes and signals, and is the term's only one that does; view: it only watches.",
                  "schema": { "type": "string", "enum": ["control", "view"], "default": "control" } },
                { "name": "takeover", "in": "query", "required": false,
                  "description": "With mode=control: take the term's control from the WebSocket that has it (that one is sent taken_over and closed) instead of being refused with term.controlled.",
                  "schema": { "type": "boolean", "default": false } },
                { "name": "Origin", "in": "header", "required": false,
                  "description": "A browser page's origin (sent by the browser): it must be one the server allows (tierbox serve --ws-origin); absent for a client that is not a web page.",
                  "schema": { "type": "string" } }],
            "x-websocket": {
                "client": { "binary": "input bytes", "text": { "$ref": "#/components/schemas/TermWsClientMessage" } },
                "server": { "binary": "output bytes", "text": server_schema }
            },
            "responses": {
                "101": { "description": "switching to the WebSocket protocol" },
                "400": error_response("malformed id or query (input.malformed, input.handle_invalid)"),
                "401": error_response("no ticket, or one that is unknown, already used, expired, revoked with its session, or for another term (ws.ticket_refused)"),
                "403": error_response("the Origin is not one the server allows (ws.origin_refused, naming it and the option that allows it)"),
                "404": error_response("the term is no longer the ticket owner's (term.not_found)"),
                "409": error_response("another WebSocket controls the term (term.controlled, naming it): attach with mode=view, or takeover=true; the ticket is spent"),
                "426": error_response("not a WebSocket handshake (ws.upgrade_required); the ticket is spent"),
                "429": error_response(&sockets),
                "503": error_response("the policy's audit log cannot record the attach (audit.unavailable)")
            }
        } }
    })
}
