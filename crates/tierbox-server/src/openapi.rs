//! The OpenAPI 3.1 document of the HTTP API, built from the same generated request
//! schemas the server parses with (OpenAPI 3.1 schemas are JSON Schema 2020-12).

use serde_json::{Map, Value, json};
use tierbox_policy::handle::{DEFAULT_OUTPUT_READ_BYTES, HANDLE_HEX_LEN, MAX_OUTPUT_READ_BYTES};
use tierbox_policy::request::MAX_STDIN_BYTES;
use tierbox_policy::schema::{PROCESS_RUN_TOOL, WASM_RUN_TOOL, tool_schema};

use crate::http::MAX_SESSION_BYTES;

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

fn error_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } }
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
    let run = component(
        tool_schema(PROCESS_RUN_TOOL).unwrap_or(Value::Null),
        &mut schemas,
    );
    let wasm = component(
        tool_schema(WASM_RUN_TOOL).unwrap_or(Value::Null),
        &mut schemas,
    );
    schemas.insert("ProcessRunRequest".to_owned(), run);
    schemas.insert("WasmRunRequest".to_owned(), wasm);
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
    schemas.insert(
        "Error".to_owned(),
        json!({
            "type": "object",
            "required": ["error"],
            "properties": {
                "error": {
                    "type": "object",
                    "required": ["code", "message"],
                    "properties": {
                        "code": { "type": "string" },
                        "message": { "type": "string" },
                        "fix": {
                            "type": "string",
                            "description": "What would let a rejected request through: the policy key to change, or the command that fixes the host"
                        },
                        "handle": { "type": "object" }
                    }
                }
            }
        }),
    );
    schemas.insert(
        "ProcessStatus".to_owned(),
        json!({
            "type": "object",
            "required": ["id", "state", "argv", "lifetime", "lifetime_ms", "tier", "backend"],
            "properties": {
                "id": { "type": "string" },
                "state": { "enum": ["running", "exited", "killed", "expired"] },
                "exit_code": { "type": ["integer", "null"] },
                "signal": { "type": ["integer", "null"] },
                "argv": { "type": "array", "items": { "type": "string" } },
                "lifetime": { "enum": ["run_owned", "detached"] },
                "lifetime_ms": { "type": "integer" },
                "tier": { "type": "string" },
                "backend": { "type": "string" }
            }
        }),
    );
    schemas.insert(
        "RunResult".to_owned(),
        json!({
            "description": "The outcome of a foreground run, or the handle of a background \
                            process ({status, startup_stdout, startup_stderr}).",
            "type": "object"
        }),
    );

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
        "description": "Answer application/x-ndjson: output events, then the result.",
        "schema": { "type": "boolean", "default": false }
    });
    let run_result = json_response(
        "the outcome, or the background handle",
        json!({ "$ref": "#/components/schemas/RunResult" }),
    );
    let status = json_response(
        "the process status",
        json!({ "$ref": "#/components/schemas/ProcessStatus" }),
    );
    let body = |schema: &str| {
        json!({ "required": true, "content": { "application/json": {
            "schema": { "$ref": format!("#/components/schemas/{schema}") } } } })
    };
    let policy = [
        ("413", "body larger than the request cap"),
        ("415", "a Content-Type other than application/json"),
        (
            "422",
            "refused by the policy (exec.*, scope.*, env.*, egress.*, limits.*, wasm.*, tier.*)",
        ),
    ];
    let handle_errors = [("404", "no such handle for this session")];

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
        "paths": {
            "/v1/health": { "get": {
                "operationId": "health", "security": [],
                "responses": { "200": json_response("the server is up", json!({
                    "type": "object", "required": ["status"],
                    "properties": { "status": { "const": "ok" }, "version": { "type": "string" } }
                })) }
            } },
            "/v1/process/run": { "post": {
                "operationId": "process_run",
                "parameters": [session.clone(), stream.clone()],
                "requestBody": body("ProcessRunRequest"),
                "responses": with(errors(&[policy[0], policy[1], policy[2], ("409", "background process cap reached"), ("500", "the host could not launch a valid plan"), ("503", "the attestation key or the audit log the policy requires is unavailable")]), "200", run_result.clone())
            } },
            "/v1/wasm/run": { "post": {
                "operationId": "wasm_run",
                "parameters": [stream],
                "requestBody": body("WasmRunRequest"),
                "responses": with(errors(&[policy[0], policy[1], policy[2], ("500", "the host could not run a valid plan"), ("503", "the attestation key or the audit log the policy requires is unavailable")]), "200", run_result)
            } },
            "/v1/process": { "get": {
                "operationId": "process_list",
                "parameters": [session.clone()],
                "responses": with(errors(&[]), "200", json_response("the session's processes", json!({
                    "type": "object", "required": ["processes"],
                    "properties": { "processes": { "type": "array",
                        "items": { "$ref": "#/components/schemas/ProcessStatus" } } }
                })))
            } },
            "/v1/process/{id}": { "get": {
                "operationId": "process_status",
                "parameters": [id.clone(), session.clone()],
                "responses": with(errors(&handle_errors), "200", status.clone())
            } },
            "/v1/process/{id}/kill": { "post": {
                "operationId": "process_kill",
                "parameters": [id.clone(), session.clone()],
                "responses": with(errors(&handle_errors), "200", status)
            } },
            "/v1/process/{id}/output": { "get": {
                "operationId": "process_output",
                "parameters": [id.clone(), session.clone(),
                    { "name": "stream", "in": "query", "required": false,
                      "schema": { "enum": ["stdout", "stderr"], "default": "stdout" } },
                    { "name": "offset", "in": "query", "required": false,
                      "schema": { "type": "integer", "minimum": 0, "default": 0 } },
                    { "name": "max_bytes", "in": "query", "required": false,
                      "schema": { "type": "integer", "minimum": 1,
                                  "maximum": MAX_OUTPUT_READ_BYTES,
                                  "default": DEFAULT_OUTPUT_READ_BYTES } }],
                "responses": with(errors(&handle_errors), "200", json_response("output from the offset on", json!({
                    "type": "object",
                    "required": ["id", "stream", "state", "offset", "text", "next_offset", "missed_bytes", "total_bytes"],
                    "properties": {
                        "id": { "type": "string" }, "stream": { "enum": ["stdout", "stderr"] },
                        "state": { "enum": ["running", "exited", "killed", "expired"] },
                        "offset": { "type": "integer" }, "text": { "type": "string" },
                        "next_offset": { "type": "integer" }, "missed_bytes": { "type": "integer" },
                        "total_bytes": { "type": "integer" }
                    }
                })))
            } },
            "/v1/process/{id}/stdin": { "post": {
                "operationId": "process_write_stdin",
                "parameters": [id, session.clone()],
                "requestBody": body("WriteStdinRequest"),
                "responses": with(errors(&[handle_errors[0], ("409", "stdin closed or the process ended"), policy[0], policy[1]]), "200", json_response("bytes written", json!({
                    "type": "object", "required": ["id", "bytes_written", "closed"],
                    "properties": { "id": { "type": "string" }, "bytes_written": { "type": "integer" },
                                    "closed": { "type": "boolean" } }
                })))
            } },
            "/v1/daemon": { "get": {
                "operationId": "daemon_identity",
                "responses": with(errors(&[]), "200", json_response("the server's process and the identity of its runner: a local client hands it a run only when the client's own identity is equal", json!({
                    "type": "object", "required": ["pid", "identity"],
                    "properties": {
                        "pid": { "type": "integer", "minimum": 1 },
                        "identity": { "type": "object",
                            "required": ["version", "uid", "policy_digest", "workspace", "state_dir", "environment"],
                            "properties": {
                                "version": { "type": "string" },
                                "uid": { "type": "integer", "minimum": 0 },
                                "policy_digest": { "type": "string" },
                                "workspace": { "type": "string" },
                                "state_dir": { "type": "string" },
                                "environment": { "type": "string", "description": "hex SHA-256 of the supervisor variables validation reads" }
                            } }
                    }
                })))
            } },
            "/v1/session": { "delete": {
                "operationId": "end_session",
                "parameters": [session],
                "responses": with(errors(&[]), "200", json_response("the session's run_owned processes were killed", json!({
                    "type": "object", "required": ["session", "ended"],
                    "properties": { "session": { "type": "string" }, "ended": { "const": true } }
                })))
            } }
        }
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
}
