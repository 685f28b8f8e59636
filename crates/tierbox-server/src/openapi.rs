//! The OpenAPI 3.1 document of the HTTP API, built from the same generated request
//! schemas the server parses with (OpenAPI 3.1 schemas are JSON Schema 2020-12).

use serde_json::{Map, Value, json};
use tierbox_policy::handle::{DEFAULT_OUTPUT_READ_BYTES, HANDLE_HEX_LEN, MAX_OUTPUT_READ_BYTES};
use tierbox_policy::request::MAX_STDIN_BYTES;
use tierbox_policy::schema::{PROCESS_RUN_TOOL, WASM_RUN_TOOL, tool_schema};

use tierbox_runner::background::BackgroundStatus;

use crate::http::{IDENTITY_DIGEST_HEX_LEN, MAX_SESSION_BYTES};
use crate::results;

mod files;
mod terms;

/// Moves a schemars document's `$defs` into `components`, rewriting its references, and
/// returns the top-level schema.
fn component(schema: Value, components: &mut Map<String, Value>) -> Value {
    fn rewrite(v: &mut Value) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get_mut("$ref")
                    && let Some(name) = r.strip_prefix("#/$defs/")
                {
                    *r = format!("#/components/schemas/{name}");
                }
                m.values_mut().for_each(rewrite);
            }
            Value::Array(a) => a.iter_mut().for_each(rewrite),
            _ => {}
        }
    }
    let mut schema = schema;
    rewrite(&mut schema);
    if let Value::Object(m) = &mut schema {
        m.remove("$schema");
        if let Some(Value::Object(defs)) = m.remove("$defs") {
            components.extend(defs);
        }
    }
    schema
}

/// Response bodies, generated from their types ([`crate::results`]) in one generator, so
/// that every definition keeps one name across the document.
struct Responses {
    generator: schemars::SchemaGenerator,
}

impl Responses {
    fn new() -> Self {
        Self {
            generator: schemars::generate::SchemaSettings::draft2020_12().into_generator(),
        }
    }

    /// A `$ref` to `T`'s definition (generated on first use).
    fn of<T: schemars::JsonSchema>(&mut self) -> Value {
        let r = serde_json::to_value(self.generator.subschema_for::<T>()).unwrap_or(Value::Null);
        // The definitions stay in the generator until `finish`: only the reference moves.
        component(r, &mut Map::new())
    }

    /// Moves the definitions into `components`; returns the conflicting names.
    fn finish(mut self, components: &mut Map<String, Value>) -> Vec<String> {
        let defs = self.generator.take_definitions(true);
        let mut moved = Map::new();
        let _ = component(json!({ "$defs": Value::Object(defs) }), &mut moved);
        let mut conflicts = Vec::new();
        for (name, schema) in moved {
            match components.get(&name) {
                Some(existing) if *existing != schema => conflicts.push(name),
                Some(_) => {}
                None => {
                    components.insert(name, schema);
                }
            }
        }
        conflicts
    }
}

fn error_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": { "application/json": { "schema": { "$ref": "#/components/schemas/ErrorBody" } } }
    })
}

fn json_response(description: &str, schema: Value) -> Value {
    json!({
        "description": description,
        "content": { "application/json": { "schema": schema } }
    })
}

/// The standard error responses of an authenticated operation.
fn errors(extra: &[(&str, &str)]) -> Map<String, Value> {
    let mut m = Map::new();
    for (status, what) in [
        (
            "400",
            "malformed request (code input.* or http.bad_request)",
        ),
        ("401", "missing or wrong bearer token"),
        (
            "429",
            "concurrency limit and queue full; retry after Retry-After seconds",
        ),
    ]
    .iter()
    .chain(extra)
    {
        m.insert((*status).to_owned(), error_response(what));
    }
    m
}

fn with(mut m: Map<String, Value>, status: &str, v: Value) -> Value {
    m.insert(status.to_owned(), v);
    Value::Object(m)
}

/// The OpenAPI document served at `/v1/openapi.json`.
pub fn document() -> Value {
    let mut schemas = Map::new();
    request_schemas(&mut schemas);
    let r = response_schemas(&mut schemas);
    let p = Parameters::new();
    let file_paths = files::file_paths(&p, &mut schemas);
    let mut paths = Map::new();
    for group in [
        run_paths(&p, &r),
        process_paths(&p, &r),
        session_paths(&p, &r),
        changes_paths(&p, &r),
        terms::term_paths(&p, &r),
        file_paths,
    ] {
        if let Value::Object(group) = group {
            paths.extend(group);
        }
    }
    protocol_responses(&mut paths);
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Tierbox",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Run commands for AI agents in tiered sandboxes. See docs/api.md."
        },
        "components": {
            "schemas": schemas,
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } }
        },
        "security": [ { "bearer": [] } ],
        "paths": paths
    })
}

/// The longest request target (path and query) the HTTP layer parses, in bytes: a longer
/// one is answered 414 before any route sees it. It bounds what one request line can make
/// the server buffer. (The HTTP/1 parser's own limit, `u16::MAX - 1`.)
pub const MAX_REQUEST_TARGET_BYTES: usize = 65_534;

/// The statuses the HTTP layer answers before routing, on any operation, with an empty
/// body: a request target over [`MAX_REQUEST_TARGET_BYTES`] (414) and a header section
/// over the parser's buffer (431).
fn protocol_responses(paths: &mut Map<String, Value>) {
    let target = format!(
        "request target (path and query) longer than {MAX_REQUEST_TARGET_BYTES} bytes; empty body, answered before routing"
    );
    for item in paths.values_mut() {
        let Value::Object(item) = item else { continue };
        for op in item.values_mut() {
            let Some(Value::Object(responses)) = op.get_mut("responses") else {
                continue;
            };
            responses
                .entry("414")
                .or_insert_with(|| json!({ "description": target }));
            responses.entry("431").or_insert_with(|| {
                json!({ "description": "request header section larger than the HTTP parser's buffer; empty body, answered before routing" })
            });
        }
    }
}

/// The request bodies' schemas: the tools' generated input schemas and the small bodies
/// of the other endpoints.
fn request_schemas(schemas: &mut Map<String, Value>) {
    let run = component(
        tool_schema(PROCESS_RUN_TOOL).unwrap_or(Value::Null),
        schemas,
    );
    let wasm = component(tool_schema(WASM_RUN_TOOL).unwrap_or(Value::Null), schemas);
    schemas.insert("ProcessRunRequest".to_owned(), run);
    schemas.insert("WasmRunRequest".to_owned(), wasm);
    schemas.insert(
        "NewSessionBody".to_owned(),
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "name": { "type": "string", "pattern": "^[A-Za-z0-9_-]+$",
                          "minLength": 1, "maxLength": MAX_SESSION_BYTES,
                          "description": "A name for the session (its Tierbox-Session)." }
            }
        }),
    );
    schemas.insert(
        "ChangesApplyBody".to_owned(),
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "paths": {
                    "type": "array", "maxItems": tierbox_policy::handle::MAX_APPLY_PATHS,
                    "description": "Apply only these paths (relative to the workspace) and what is below them; empty or absent: every change. A flagged change named exactly is consented to.",
                    "items": { "type": "string", "minLength": 1,
                               "maxLength": tierbox_policy::handle::MAX_APPLY_PATH_BYTES }
                },
                "include_flagged": {
                    "type": "boolean", "default": false,
                    "description": "Apply flagged changes too (a symlink out of the workspace, a new executable, a .git entry, a new repository, a setuid bit, a device node); without it a flagged change is applied only when its own path is in paths, and the apply is refused with changes.flagged otherwise."
                }
            }
        }),
    );
    terms::term_request_schemas(schemas);
    schemas.insert(
        "WriteStdinRequest".to_owned(),
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "data": { "type": "string", "maxLength": MAX_STDIN_BYTES, "default": "" },
                "close": { "type": "boolean", "default": false }
            }
        }),
    );
}

/// The response bodies' schemas, generated from the result types.
#[derive(Clone)]
struct ResponseSchemas {
    run_result_schema: Value,
    status_schema: Value,
    list_schema: Value,
    output_schema: Value,
    stdin_schema: Value,
    health_schema: Value,
    daemon_schema: Value,
    session_schema: Value,
    issued_schema: Value,
    check_schema: Value,
    changes_list_schema: Value,
    changes_schema: Value,
    applied_schema: Value,
    discarded_schema: Value,
    term_started_schema: Value,
    term_output_schema: Value,
    term_written_schema: Value,
    term_resized_schema: Value,
    term_signalled_schema: Value,
    term_list_schema: Value,
    term_ws_ticket_schema: Value,
    term_ws_server_schema: Value,
}

/// Generates the response schemas, adding their definitions to `schemas`.
fn response_schemas(schemas: &mut Map<String, Value>) -> ResponseSchemas {
    let mut responses = Responses::new();
    let error = responses.of::<results::ErrorBody>();
    let run_result_schema = responses.of::<results::RunResult>();
    let status_schema = responses.of::<BackgroundStatus>();
    let list_schema = responses.of::<results::ProcessList>();
    let output_schema = responses.of::<results::OutputChunk>();
    let stdin_schema = responses.of::<results::StdinWritten>();
    let health_schema = responses.of::<results::Health>();
    let daemon_schema = responses.of::<results::DaemonIdentity>();
    let session_schema = responses.of::<results::SessionEnded>();
    let issued_schema = responses.of::<results::SessionIssued>();
    let check_schema = responses.of::<results::CheckResult>();
    let changes_list_schema = responses.of::<results::ChangesList>();
    let changes_schema = responses.of::<results::ChangesShown>();
    let applied_schema = responses.of::<tierbox_runner::review::Applied>();
    let discarded_schema = responses.of::<results::ChangesDiscarded>();
    let term_started_schema = responses.of::<results::TermStarted>();
    let term_output_schema = responses.of::<results::TermOutput>();
    let term_written_schema = responses.of::<results::TermWritten>();
    let term_resized_schema = responses.of::<results::TermResized>();
    let term_signalled_schema = responses.of::<results::TermSignalled>();
    let term_list_schema = responses.of::<results::TermList>();
    let term_ws_ticket_schema = responses.of::<results::TermWsTicket>();
    let term_ws_server_schema = responses.of::<crate::term_ws::protocol::ServerMessage>();
    let conflicts = responses.finish(schemas);
    debug_assert!(
        conflicts.is_empty(),
        "conflicting definitions: {conflicts:?}"
    );
    debug_assert_eq!(error["$ref"], "#/components/schemas/ErrorBody");
    ResponseSchemas {
        run_result_schema,
        status_schema,
        list_schema,
        output_schema,
        stdin_schema,
        health_schema,
        daemon_schema,
        session_schema,
        issued_schema,
        check_schema,
        changes_list_schema,
        changes_schema,
        applied_schema,
        discarded_schema,
        term_started_schema,
        term_output_schema,
        term_written_schema,
        term_resized_schema,
        term_signalled_schema,
        term_list_schema,
        term_ws_ticket_schema,
        term_ws_server_schema,
    }
}

/// The parameters more than one path takes.
struct Parameters {
    id: Value,
    session: Value,
    stream: Value,
    identity: Value,
    run_id: Value,
    term_id: Value,
}

impl Parameters {
    fn new() -> Self {
        let id = json!({
            "name": "id", "in": "path", "required": true,
            "description": "A background-process handle (never a pid).",
            "schema": { "type": "string", "pattern": "^[0-9a-f]{32}$",
                        "minLength": HANDLE_HEX_LEN, "maxLength": HANDLE_HEX_LEN }
        });
        let session = json!({
            "name": "Tierbox-Session", "in": "header", "required": false,
            "description": "The caller's session: owner of its background processes.",
            "schema": { "type": "string", "pattern": "^[A-Za-z0-9_-]+$",
                        "minLength": 1, "maxLength": MAX_SESSION_BYTES }
        });
        let stream = json!({
            "name": "stream", "in": "query", "required": false,
            "description": "Answer application/x-ndjson: output events ({\"event\": \"output\", \"stream\", \"text\"} and, when text is lossy UTF-8, \"bytes_base64\" with the bytes exactly), then the result ({\"event\": \"result\", \"outcome\"}) or an error ({\"event\": \"error\", \"error\"}).",
            "schema": { "type": "boolean", "default": false }
        });
        let identity = json!({
            "name": "identity", "in": "query", "required": false,
            "description": "The runner identity the caller expects (hex SHA-256, RunnerIdentity::digest; GET /v1/daemon shows this server's): when this server's differs, nothing runs and the answer is 409 daemon.identity_mismatch.",
            "schema": { "type": "string", "pattern": "^[0-9a-f]{64}$",
                        "minLength": IDENTITY_DIGEST_HEX_LEN, "maxLength": IDENTITY_DIGEST_HEX_LEN }
        });
        let run_id = json!({
            "name": "id", "in": "path", "required": true,
            "description": "The run id of an overlay (review mode) run's outcome.",
            "schema": { "type": "string", "pattern": "^[0-9a-f]{32}$",
                        "minLength": HANDLE_HEX_LEN, "maxLength": HANDLE_HEX_LEN }
        });
        let term_id = json!({
            "name": "id", "in": "path", "required": true,
            "description": "A term's handle (from POST /v1/terms; never a pid).",
            "schema": { "type": "string", "pattern": "^[0-9a-f]{32}$",
                        "minLength": HANDLE_HEX_LEN, "maxLength": HANDLE_HEX_LEN }
        });
        Self {
            id,
            session,
            stream,
            identity,
            run_id,
            term_id,
        }
    }
}

/// Errors of the policy and the body, which most requests can answer.
const POLICY_ERRORS: [(&str, &str); 3] = [
    ("413", "body larger than the request cap"),
    (
        "415",
        "a Content-Type other than application/json (or, for a run, the streamed-stdin form)",
    ),
    (
        "422",
        "refused by the policy (exec.*, scope.*, env.*, egress.*, limits.*, wasm.*, tier.*)",
    ),
];

/// Errors of a request naming a background process.
const HANDLE_ERRORS: [(&str, &str); 1] = [("404", "no such handle for this session")];

/// Errors of a request naming a kept change set.
const KEPT_ERRORS: [(&str, &str); 1] = [(
    "404",
    "no change set is kept for this run (none made, applied, discarded or expired)",
)];

/// A run refused because the caller expects another runner.
const IDENTITY_MISMATCH: &str = "the runner identity given as identity is not this server's (daemon.identity_mismatch); nothing ran";

/// A JSON request body of the component `schema`, with `examples`.
fn body(schema: &str, examples: Value) -> Value {
    json!({ "required": true, "content": { "application/json": {
        "schema": { "$ref": format!("#/components/schemas/{schema}") },
        "examples": examples } } })
}

/// A run's request body, which may also be the streamed-stdin form: the request as one
/// line of JSON, a line feed, then the run's stdin as raw bytes (see docs/api.md).
fn run_body(schema: &str, examples: Value) -> Value {
    let mut b = body(schema, examples);
    b["content"][crate::http::STDIN_STREAM_MEDIA_TYPE] = json!({
        "schema": {
            "type": "string", "format": "binary",
            "description": format!(
                "The {schema} as one line of compact JSON (at most {} bytes), a line feed (0x0A), then the run's stdin: raw bytes of any kind to the end of the body, forwarded to the program as they arrive and bounded by the run's stdin limit (limits.stdin_bytes, narrowed by stdin_limit_bytes), not by the body cap. The request may carry no stdin or stdin_base64 (input.stdin_conflict).",
                tierbox_policy::request::MAX_REQUEST_BYTES
            )
        }
    });
    b
}

/// Runs: health, process runs (foreground or background), checks and WASM runs.
fn run_paths(p: &Parameters, r: &ResponseSchemas) -> Value {
    let Parameters {
        session,
        stream,
        identity,
        ..
    } = p;
    let ResponseSchemas {
        run_result_schema,
        health_schema,
        check_schema,
        ..
    } = r.clone();
    let policy = POLICY_ERRORS;
    let identity_mismatch = IDENTITY_MISMATCH;
    let run_result = json_response("the outcome, or the background handle", run_result_schema);
    json!({
        "/v1/health": { "get": {
            "operationId": "health", "summary": "Whether the server is up (no token needed)", "security": [],
            "responses": { "200": json_response("the server is up", health_schema) }
        } },
        "/v1/process/run": { "post": {
            "operationId": "process_run", "summary": "Run a command in the sandbox the policy picks; foreground to the end, or start it in the background",
            "parameters": [session.clone(), stream.clone(), identity.clone()],
            "requestBody": run_body("ProcessRunRequest", json!({
                "tests": { "summary": "run the test suite for at most five minutes",
                           "value": { "command": "cargo", "args": ["test", "--offline"], "timeout_ms": 300_000 } },
                "server": { "summary": "start a server in the background",
                            "value": { "command": "python3", "args": ["-m", "http.server", "8000"], "background": true } }
            })),
            "responses": with(errors(&[policy[0], policy[1], policy[2], ("409", &format!("background process cap reached, or {identity_mismatch}")), ("500", "the host could not launch a valid plan"), ("503", "the attestation key or the audit log the policy requires is unavailable")]), "200", run_result.clone())
        } },
        "/v1/process/check": { "post": {
            "operationId": "process_check", "summary": "What a process_run of the request would do on this host, without running it",
            "requestBody": body("ProcessRunRequest", json!({
                "tests": { "summary": "would the test suite run, and where?",
                           "value": { "command": "cargo", "args": ["test", "--offline"] } }
            })),
            "responses": with(errors(&[policy[0], policy[1], policy[2]]), "200", json_response("the plan and the preflight, or the Tier A plan", check_schema))
        } },
        "/v1/wasm/run": { "post": {
            "operationId": "wasm_run", "summary": "Run a WebAssembly module in Tier A",
            "parameters": [stream, identity],
            "requestBody": run_body("WasmRunRequest", json!({
                "module": { "summary": "run a module from the workspace",
                            "value": { "module": "build/tool.wasm", "args": ["--check"] } }
            })),
            "responses": with(errors(&[policy[0], policy[1], policy[2], ("409", identity_mismatch), ("500", "the host could not run a valid plan"), ("503", "the attestation key or the audit log the policy requires is unavailable")]), "200", run_result)
        } }
    })
}

/// Background processes: list, status, kill, output and stdin.
fn process_paths(p: &Parameters, r: &ResponseSchemas) -> Value {
    let Parameters { id, session, .. } = p;
    let ResponseSchemas {
        status_schema,
        list_schema,
        output_schema,
        stdin_schema,
        ..
    } = r.clone();
    let policy = POLICY_ERRORS;
    let handle_errors = HANDLE_ERRORS;
    let status = json_response("the process status", status_schema);
    json!({
        "/v1/process": { "get": {
            "operationId": "process_list", "summary": "List your session's background processes",
            "parameters": [session.clone()],
            "responses": with(errors(&[]), "200", json_response("the session's processes", list_schema))
        } },
        "/v1/process/{id}": { "get": {
            "operationId": "process_status", "summary": "Status of one background process",
            "parameters": [id.clone(), session.clone()],
            "responses": with(errors(&handle_errors), "200", status.clone())
        } },
        "/v1/process/{id}/kill": { "post": {
            "operationId": "process_kill", "summary": "Kill a background process and its whole tree",
            "parameters": [id.clone(), session.clone()],
            "responses": with(errors(&handle_errors), "200", status)
        } },
        "/v1/process/{id}/output": { "get": {
            "operationId": "process_output", "summary": "Read a background process's output from an offset on",
            "parameters": [id.clone(), session.clone(),
                { "name": "stream", "in": "query", "required": false,
                  "schema": { "enum": ["stdout", "stderr"], "default": "stdout" } },
                { "name": "offset", "in": "query", "required": false,
                  "schema": { "type": "integer", "minimum": 0, "default": 0 } },
                { "name": "max_bytes", "in": "query", "required": false,
                  "schema": { "type": "integer", "minimum": 1,
                              "maximum": MAX_OUTPUT_READ_BYTES,
                              "default": DEFAULT_OUTPUT_READ_BYTES } }],
            "responses": with(errors(&handle_errors), "200", json_response("output from the offset on", output_schema))
        } },
        "/v1/process/{id}/stdin": { "post": {
            "operationId": "process_write_stdin", "summary": "Write to a background process's stdin, or close it",
            "parameters": [id, session.clone()],
            "requestBody": body("WriteStdinRequest", json!({
                "line": { "summary": "send a line and keep stdin open", "value": { "data": "status\n" } },
                "close": { "summary": "close stdin (end of input)", "value": { "close": true } }
            })),
            "responses": with(errors(&[handle_errors[0], ("409", "stdin closed or the process ended"), policy[0], policy[1]]), "200", json_response("bytes written", stdin_schema))
        } }
    })
}

/// The daemon's identity and sessions.
fn session_paths(p: &Parameters, r: &ResponseSchemas) -> Value {
    let Parameters { session, .. } = p;
    let ResponseSchemas {
        daemon_schema,
        session_schema,
        issued_schema,
        ..
    } = r.clone();
    let policy = POLICY_ERRORS;
    json!({
        "/v1/daemon": { "get": {
            "operationId": "daemon_identity", "summary": "The server's pid and its runner's identity (for a local CLI hand-off)",
            "responses": with(errors(&[]), "200", json_response("the server's process and the identity of its runner: a local client hands it a run only when the client's own identity is equal", daemon_schema))
        } },
        "/v1/session": { "delete": {
            "operationId": "end_session", "summary": "End your session: kill its run_owned background processes (with a session token, the token ends too)",
            "parameters": [session],
            "responses": with(errors(&[]), "200", json_response("the session's run_owned processes were killed", session_schema.clone()))
        } },
        "/v1/sessions": { "post": {
            "operationId": "new_session", "summary": "Issue a session token for an agent (operator token only): its requests are that session's, it sees only its own change sets, and applies them only where workspace.agent_may_apply",
            "requestBody": { "required": false, "content": { "application/json": {
                "schema": { "$ref": "#/components/schemas/NewSessionBody" },
                "examples": {
                    "unnamed": { "summary": "a session without a name", "value": {} },
                    "named": { "summary": "a named session", "value": { "name": "agent-1" } }
                } } } },
            "responses": with(errors(&[("403", "a session token cannot issue tokens (auth.forbidden)"), ("409", "the most session tokens a server holds are live (sessions.limit)"), policy[0], policy[1], ("400", "the name is not 1 to 64 characters of [A-Za-z0-9_-] (input.malformed)")]), "200", json_response("the session and its token (shown only here)", issued_schema))
        } },
        "/v1/sessions/{id}": { "delete": {
            "operationId": "revoke_session", "summary": "End a session (operator token only): its token stops working and its run_owned processes are killed",
            "parameters": [{ "name": "id", "in": "path", "required": true,
                "description": "The session's id (from POST /v1/sessions).",
                "schema": { "type": "string", "pattern": "^[0-9a-f]{32}$",
                            "minLength": HANDLE_HEX_LEN, "maxLength": HANDLE_HEX_LEN } }],
            "responses": with(errors(&[("403", "a session token cannot end another session (auth.forbidden)"), ("404", "no live session of that id (sessions.not_found)")]), "200", json_response("the session ended", session_schema))
        } }
    })
}

/// Kept change sets of overlay (review mode) runs.
fn changes_paths(p: &Parameters, r: &ResponseSchemas) -> Value {
    let Parameters { run_id, .. } = p;
    let ResponseSchemas {
        changes_list_schema,
        changes_schema,
        applied_schema,
        discarded_schema,
        ..
    } = r.clone();
    let policy = POLICY_ERRORS;
    let kept_errors = KEPT_ERRORS;
    json!({
        "/v1/changes": { "get": {
            "operationId": "changes_list", "summary": "The change sets overlay (review mode) runs kept, oldest first",
            "responses": with(errors(&[]), "200", json_response("the kept change sets", changes_list_schema))
        } },
        "/v1/changes/{id}": { "get": {
            "operationId": "changes_show", "summary": "What an overlay run changed: every path with its kind, size, mode, SHA-256 and flags, and with diff=true a unified diff",
            "parameters": [run_id.clone(),
                { "name": "diff", "in": "query", "required": false,
                  "description": "Include a unified diff of the text files (at most 64 KiB).",
                  "schema": { "type": "boolean", "default": false } }],
            "responses": with(errors(&kept_errors), "200", json_response("the change set", changes_schema))
        } },
        "/v1/changes/{id}/apply": { "post": {
            "operationId": "changes_apply", "summary": "Apply an overlay run's changes to the workspace, all or nothing",
            "parameters": [run_id.clone()],
            "requestBody": { "required": false, "content": { "application/json": {
                "schema": { "$ref": "#/components/schemas/ChangesApplyBody" },
                "examples": {
                    "all": { "summary": "apply every change", "value": {} },
                    "some": { "summary": "apply the changes below src/", "value": { "paths": ["src"] } },
                    "flagged": { "summary": "apply every change, flagged ones included", "value": { "include_flagged": true } }
                } } } },
            "responses": with(errors(&[kept_errors[0], policy[0], policy[1], ("409", "the workspace changed underneath at a path (named), a path goes through a symlink, the path is not in the change set, or changes are flagged for a reviewer and were neither named nor included (changes.flagged, listing each); nothing was applied"), ("500", "a file system call failed; nothing was applied")]), "200", json_response("what was applied", applied_schema))
        } },
        "/v1/changes/{id}/discard": { "post": {
            "operationId": "changes_discard", "summary": "Drop an overlay run's changes unapplied",
            "parameters": [run_id],
            "responses": with(errors(&kept_errors), "200", json_response("the change set was dropped", discarded_schema))
        } }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get("$ref") {
                    out.push(r.clone());
                }
                m.values().for_each(|v| refs(v, out));
            }
            Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }

    #[test]
    fn every_reference_resolves_inside_the_document() {
        let doc = document();
        let mut all = Vec::new();
        refs(&doc, &mut all);
        assert!(!all.is_empty());
        for r in all {
            let name = r
                .strip_prefix("#/components/schemas/")
                .unwrap_or_else(|| panic!("foreign reference {r}"));
            assert!(
                doc["components"]["schemas"].get(name).is_some(),
                "{r} does not resolve"
            );
        }
    }

    #[test]
    fn request_bodies_are_the_generated_closed_schemas() {
        let doc = document();
        let run = &doc["components"]["schemas"]["ProcessRunRequest"];
        assert_eq!(run["additionalProperties"], Value::Bool(false));
        assert_eq!(run["required"], json!(["command"]));
        assert!(run.get("$schema").is_none());
    }

    /// The examples of the request bodies are requests the server accepts.
    #[test]
    fn request_examples_parse_as_requests() {
        let doc = document();
        let examples = |path: &str| {
            let e = &doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["examples"];
            let Value::Object(m) = e else {
                panic!("{path}: no examples");
            };
            m.values()
                .map(|v| serde_json::to_vec(&v["value"]).unwrap_or_default())
                .collect::<Vec<_>>()
        };
        for body in examples("/v1/process/run") {
            tierbox_policy::ProcessRunRequest::from_json(&body)
                .unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(&body)));
        }
        for body in examples("/v1/wasm/run") {
            tierbox_policy::wasm::WasmRunRequest::from_json(&body)
                .unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(&body)));
        }
        for body in examples("/v1/process/{id}/stdin") {
            let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let keys: Vec<&String> = v
                .as_object()
                .map(|m| m.keys().collect())
                .unwrap_or_default();
            assert!(keys.iter().all(|k| *k == "data" || *k == "close"), "{v}");
        }
        let start = examples("/v1/terms");
        assert!(start.len() >= 2);
        for body in start {
            crate::terms::TermStart::from_http(&body)
                .unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(&body)));
        }
        for body in examples("/v1/terms/{id}/input") {
            let b: crate::terms::TermInputBody = serde_json::from_slice(&body).unwrap();
            b.bytes()
                .unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(&body)));
        }
        for body in examples("/v1/terms/{id}/resize") {
            let b: crate::terms::TermSizeBody = serde_json::from_slice(&body).unwrap();
            b.size().unwrap();
        }
        for body in examples("/v1/terms/{id}/signal") {
            let b: crate::terms::TermSignalBody = serde_json::from_slice(&body).unwrap();
            tierbox_runner::term::TermSignal::parse(&b.signal).unwrap();
        }
    }

    /// Every term route the server has is in the document with its method, and every
    /// term body refers to a schema the document has.
    #[test]
    fn the_term_routes_are_documented() {
        let doc = document();
        for (path, method) in [
            ("/v1/terms", "post"),
            ("/v1/terms", "get"),
            ("/v1/terms/{id}", "get"),
            ("/v1/terms/{id}/input", "post"),
            ("/v1/terms/{id}/resize", "post"),
            ("/v1/terms/{id}/signal", "post"),
            ("/v1/terms/{id}/output", "get"),
            ("/v1/terms/{id}/stream", "get"),
            ("/v1/terms/{id}/kill", "post"),
            ("/v1/terms/{id}/ws_ticket", "post"),
            ("/v1/terms/{id}/ws", "get"),
        ] {
            let op = &doc["paths"][path][method];
            assert!(op["operationId"].is_string(), "{method} {path}");
            let ok = if path.ends_with("/ws") { "101" } else { "200" };
            assert!(op["responses"][ok].is_object(), "{method} {path}");
            if path != "/v1/terms" {
                assert!(op["responses"]["404"].is_object(), "{method} {path}");
            }
        }
        let schemas = &doc["components"]["schemas"];
        for name in [
            "TermStartRequest",
            "TermInputBody",
            "TermSizeBody",
            "TermSignalBody",
        ] {
            assert_eq!(schemas[name]["additionalProperties"], false, "{name}");
        }
        for name in ["TermStarted", "TermOutput", "TermWritten", "TermList"] {
            assert!(schemas[name]["properties"].is_object(), "{name}");
        }
        assert!(schemas["TermStartRequest"]["properties"]["pty"].is_object());
        // The WebSocket: no bearer token on the handshake (its ticket instead), its
        // refusals' statuses, and the frames' schemas.
        let ws = &doc["paths"]["/v1/terms/{id}/ws"]["get"];
        assert_eq!(ws["security"], json!([]));
        for status in ["401", "403", "409", "426", "429"] {
            assert!(ws["responses"][status].is_object(), "{status}");
        }
        let kinds = |schema: &Value| -> Vec<String> {
            let variants = schema["oneOf"].as_array().cloned().unwrap_or_default();
            variants
                .iter()
                .filter_map(|v| v["properties"]["type"]["const"].as_str())
                .map(str::to_owned)
                .collect()
        };
        let client = &schemas["TermWsClientMessage"];
        assert_eq!(
            kinds(client),
            ["resize", "signal", "eof", "input"],
            "{client}"
        );
        let server = &schemas["TermWsServerMessage"];
        assert_eq!(
            kinds(server),
            ["attached", "lost", "error", "taken_over", "exit"],
            "{server}"
        );
        for query in ["mode", "takeover"] {
            let mut documented = ws["parameters"].as_array().unwrap().iter();
            assert!(documented.any(|p| p["name"] == query), "{query}");
        }
        assert!(ws["responses"]["409"].is_object());
        assert_eq!(
            ws["x-websocket"]["server"]["text"]["$ref"],
            "#/components/schemas/TermWsServerMessage"
        );
        assert!(schemas["TermWsTicket"]["properties"]["expires_in_ms"].is_object());
        assert!(
            schemas["TermStartRequest"]["properties"]
                .get("stdin")
                .is_none()
        );
    }

    /// Every file route the server has is in the document with its method and its
    /// errors, and its bodies refer to schemas the document has; the write examples
    /// parse as writes.
    #[test]
    fn the_file_routes_are_documented() {
        let doc = document();
        for (path, method, id) in [
            ("/v1/files", "get", "file_read"),
            ("/v1/files", "put", "file_write"),
            ("/v1/files/list", "get", "file_list"),
            ("/v1/files/stat", "get", "file_stat"),
        ] {
            let op = &doc["paths"][path][method];
            assert_eq!(op["operationId"], id, "{method} {path}");
            for status in ["200", "401", "404", "422"] {
                assert!(
                    op["responses"][status].is_object(),
                    "{method} {path} {status}"
                );
            }
        }
        // Every operation documents what the HTTP layer answers before routing.
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                for status in ["414", "431"] {
                    assert!(
                        op["responses"][status].is_object(),
                        "{method} {path} {status}"
                    );
                }
            }
        }
        let put = &doc["paths"]["/v1/files"]["put"];
        for status in ["409", "413", "415", "503"] {
            assert!(put["responses"][status].is_object(), "put {status}");
        }
        let schemas = &doc["components"]["schemas"];
        assert_eq!(schemas["FileWriteBody"]["additionalProperties"], false);
        for name in [
            "FileContent",
            "FileWritten",
            "FileList",
            "FileStat",
            "FileEntry",
        ] {
            assert!(schemas[name]["properties"].is_object(), "{name}");
        }
        let examples = &put["requestBody"]["content"]["application/json"]["examples"];
        for (name, e) in examples.as_object().into_iter().flatten() {
            let bytes = serde_json::to_vec(&e["value"]).unwrap_or_default();
            let body: crate::files::FileWriteBody =
                tierbox_policy::json::from_slice(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
            body.bytes().unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    /// Response bodies are the generated schemas of the types the server serializes, one
    /// definition per name, and every operation has a summary.
    #[test]
    fn response_bodies_are_generated_from_the_types() {
        let doc = document();
        let schemas = &doc["components"]["schemas"];
        let outcome = &schemas["Outcome"]["properties"];
        for field in [
            "exit_code",
            "signal",
            "timed_out",
            "limit_hit",
            "stdout",
            "attestation",
        ] {
            assert!(outcome[field].is_object(), "Outcome.{field}: {outcome}");
        }
        // The egress log carries the terminated hosts' verdicts and credential counts.
        let log = &schemas["EgressLog"]["properties"];
        assert!(log["credentials_used"].is_object(), "{log}");
        let decision = &schemas["Decision"]["properties"];
        assert!(decision["request"].is_object(), "{decision}");
        let verdicts = schemas["Verdict"].to_string();
        for v in ["request_refused", "tls_failed"] {
            assert!(verdicts.contains(v), "{v}: {verdicts}");
        }
        assert!(
            schemas["RunResult"]["anyOf"].is_array(),
            "{}",
            schemas["RunResult"]
        );
        for name in [
            "BackgroundStatus",
            "OutputChunk",
            "StdinWritten",
            "ProcessList",
            "ErrorBody",
        ] {
            assert!(schemas[name]["properties"].is_object(), "{name}");
        }
        let run = &doc["paths"]["/v1/process/run"]["post"]["responses"]["200"]["content"]["application/json"]
            ["schema"]["$ref"];
        assert_eq!(run, "#/components/schemas/RunResult");
        let mut responses = Responses::new();
        let _ = responses.of::<results::RunResult>();
        let _ = responses.of::<BackgroundStatus>();
        let mut components = doc["components"]["schemas"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        assert_eq!(responses.finish(&mut components), Vec::<String>::new());
        for (path, ops) in doc["paths"].as_object().into_iter().flatten() {
            for (method, op) in ops.as_object().into_iter().flatten() {
                assert!(op["summary"].is_string(), "{method} {path} has no summary");
            }
        }
    }
}
