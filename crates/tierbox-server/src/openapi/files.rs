//! The `/v1/files` part of the OpenAPI document: its request body and response bodies
//! (generated from the types [`crate::files`] parses and answers with) and its paths.

use serde_json::{Map, Value, json};
use tierbox_policy::request::MAX_CWD_BYTES;
use tierbox_runner::files::{
    DEFAULT_FILE_READ_BYTES, FileList, FileStat, FileWritten, MAX_FILE_PATH_BYTES,
    MAX_FILE_READ_BYTES,
};

use super::{POLICY_ERRORS, Parameters, Responses, body, component, errors, json_response, with};
use crate::files::{FileContent, FileWriteBody};

/// Errors every file operation may answer besides the standard ones.
const FILE_ERRORS: [(&str, &str); 3] = [
    ("404", "nothing is at the path (file.not_found)"),
    (
        "422",
        "refused: the path breaks a rule (file.refused, naming it: absolute, dot_dot, symlink, …), is not a regular file or directory (file.not_regular, file.not_directory), is hidden by the policy (file.denied), or the workspace is refused (scope.*)",
    ),
    ("500", "a file system call failed (file.io)"),
];

/// A write's errors beyond the reads'.
const WRITE_ERRORS: [(&str, &str); 4] = [
    (
        "409",
        "something on the path was swapped while it was written (file.changed); nothing was written",
    ),
    (
        "413",
        "the data is larger than 64 KiB, or an append would make the file larger than 16 MiB (file.too_large), or the body is larger than the request cap",
    ),
    (
        "507",
        "review mode: the write's change set does not fit the caps on kept change sets, even after the caller's own oldest sets are evicted (changes.over_cap); nothing was written or kept",
    ),
    (
        "503",
        "the audit log the policy names is unavailable (audit.unavailable); nothing was written",
    ),
];

/// The file paths; adds the `FileWriteBody` request schema and the response schemas to
/// `schemas`.
pub(super) fn file_paths(p: &Parameters, schemas: &mut Map<String, Value>) -> Value {
    let write = component(
        serde_json::to_value(schemars::schema_for!(FileWriteBody)).unwrap_or(Value::Null),
        schemas,
    );
    schemas.insert("FileWriteBody".to_owned(), write);
    let mut responses = Responses::new();
    let content = responses.of::<FileContent>();
    let written = responses.of::<FileWritten>();
    let list = responses.of::<FileList>();
    let stat = responses.of::<FileStat>();
    let conflicts = responses.finish(schemas);
    debug_assert!(
        conflicts.is_empty(),
        "conflicting definitions: {conflicts:?}"
    );
    let session = p.session.clone();
    let workspace = json!({
        "name": "workspace", "in": "query", "required": false,
        "description": "A subdirectory of the server's workspace to act in (plain names, as a run's workspace); absent: the server's workspace.",
        "schema": { "type": "string", "minLength": 1, "maxLength": MAX_CWD_BYTES }
    });
    let path = |required: bool, what: &str| {
        json!({
            "name": "path", "in": "query", "required": required, "description": what,
            "schema": { "type": "string", "maxLength": MAX_FILE_PATH_BYTES }
        })
    };
    let read_errors = errors(&FILE_ERRORS);
    let mut write_errors = errors(&FILE_ERRORS);
    for (status, what) in WRITE_ERRORS.iter().chain(&POLICY_ERRORS[..2]) {
        write_errors.insert((*status).to_owned(), super::error_response(what));
    }
    write_errors.insert(
        "422".to_owned(),
        super::error_response(
            "refused: the path breaks a rule (file.refused), is protected (file.protected: .git at any depth, filesystem.protected), read-only for runs (file.read_only), hidden (file.denied), not a regular file (file.not_regular), in a directory the workspace's owner may not write (file.not_writable), a mode with setuid, setgid or sticky (file.mode_refused), or the workspace refused (scope.*, workspace.mode_widened)",
        ),
    );
    json!({
        "/v1/files": {
            "get": {
                "operationId": "file_read", "summary": "Read a regular file of the workspace: up to max_bytes from offset on, as text (and bytes_base64 when the text is lossy), and whether it goes on",
                "parameters": [session.clone(), path(true, "The file, relative to the workspace."), workspace.clone(),
                    { "name": "offset", "in": "query", "required": false,
                      "schema": { "type": "integer", "minimum": 0, "default": 0 } },
                    { "name": "max_bytes", "in": "query", "required": false,
                      "schema": { "type": "integer", "minimum": 1, "maximum": MAX_FILE_READ_BYTES,
                                  "default": DEFAULT_FILE_READ_BYTES } }],
                "responses": with(read_errors.clone(), "200", json_response("the bytes read", content))
            },
            "put": {
                "operationId": "file_write", "summary": "Write a regular file of the workspace, replacing it whole and atomically (or appending), as the workspace's owner; in review mode keep it as a change set instead (kept_as); audited",
                "parameters": [session.clone()],
                "requestBody": body("FileWriteBody", json!({
                    "text": { "summary": "write a text file, making its directory",
                              "value": { "path": "notes/todo.md", "data": "- ship it\n", "mkdir_parents": true } },
                    "bytes": { "summary": "write bytes (base64), executable",
                               "value": { "path": "bin/run", "data_base64": "IyEvYmluL3NoCg==", "mode": 493 } },
                    "append": { "summary": "append a line", "value": { "path": "log.txt", "data": "done\n", "append": true } }
                })),
                "responses": with(write_errors, "200", json_response("what was written", written))
            }
        },
        "/v1/files/list": { "get": {
            "operationId": "file_list", "summary": "List a directory of the workspace (at most 1000 entries, sorted by name; truncated says there are more)",
            "parameters": [session.clone(), path(false, "The directory, relative to the workspace; empty or absent: the workspace."), workspace.clone()],
            "responses": with(read_errors.clone(), "200", json_response("the directory's entries", list))
        } },
        "/v1/files/stat": { "get": {
            "operationId": "file_stat", "summary": "The metadata of an entry of the workspace, never following a symlink",
            "parameters": [session, path(false, "The entry, relative to the workspace; empty or absent: the workspace."), workspace],
            "responses": with(read_errors, "200", json_response("the entry's metadata", stat))
        } }
    })
}
