//! The `/v1/terms` part of the OpenAPI document: its request bodies (generated from the
//! types [`crate::terms`] parses with) and its paths.

use serde_json::{Map, Value, json};
use tierbox_runner::term::MAX_TERM_WAIT_MS;

use super::{
    POLICY_ERRORS, Parameters, ResponseSchemas, body, component, errors, json_response, with,
};
use crate::terms::{
    DEFAULT_TERM_READ_BYTES, MAX_TERM_READ_BYTES, TermInputBody, TermSignalBody, TermSizeBody,
    http_start_schema,
};

/// The term request bodies: `TermStartRequest`, `TermInputBody`, `TermSizeBody` and
/// `TermSignalBody`.
pub(super) fn term_request_schemas(schemas: &mut Map<String, Value>) {
    fn of<T: schemars::JsonSchema>() -> Value {
        serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null)
    }
    let start = component(http_start_schema(), schemas);
    schemas.insert("TermStartRequest".to_owned(), start);
    for (name, schema) in [
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
    json!({
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
        "/v1/terms/{id}/kill": { "post": {
            "operationId": "term_kill", "summary": "Kill a term and its whole tree; its final status",
            "parameters": params,
            "responses": with(errors(&[term]), "200", status)
        } }
    })
}
