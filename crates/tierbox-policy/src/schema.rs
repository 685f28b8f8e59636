//! JSON Schemas of the tool requests, generated from the request types.
//!
//! One source of truth: the schema published to MCP clients, the HTTP API and
//! `tierbox schema` is derived from [`ProcessRunRequest`] with the same constants that
//! [`crate::validate()`] enforces; `tests` below prove they agree.

use serde_json::Value;

use crate::request::ProcessRunRequest;

/// Tool names, `[a-z_]` only so every agent framework accepts them.
pub const PROCESS_RUN_TOOL: &str = "process_run";

/// The JSON Schema of the `process_run` tool input.
pub fn process_run_schema() -> Value {
    let schema = schemars::schema_for!(ProcessRunRequest);
    serde_json::to_value(schema).unwrap_or(Value::Null)
}

/// Name of the Tier A tool.
pub const WASM_RUN_TOOL: &str = "wasm_run";

/// The JSON Schema of the `wasm_run` tool input.
pub fn wasm_run_schema() -> Value {
    let schema = schemars::schema_for!(crate::wasm::WasmRunRequest);
    serde_json::to_value(schema).unwrap_or(Value::Null)
}

/// Name of the background-process status tool.
pub const PROCESS_STATUS_TOOL: &str = "process_status";
/// Name of the background-process output tool.
pub const PROCESS_OUTPUT_TOOL: &str = "process_output";
/// Name of the background-process stdin tool.
pub const PROCESS_WRITE_STDIN_TOOL: &str = "process_write_stdin";
/// Name of the background-process kill tool.
pub const PROCESS_KILL_TOOL: &str = "process_kill";
/// Name of the background-process list tool.
pub const PROCESS_LIST_TOOL: &str = "process_list";

/// Name of the review-mode tool that shows a kept change set.
pub const CHANGES_SHOW_TOOL: &str = "changes_show";
/// Name of the review-mode tool that applies a kept change set.
pub const CHANGES_APPLY_TOOL: &str = "changes_apply";
/// Name of the review-mode tool that discards a kept change set.
pub const CHANGES_DISCARD_TOOL: &str = "changes_discard";

/// Every tool name, in the order tools are listed.
pub const TOOL_NAMES: [&str; 10] = [
    PROCESS_RUN_TOOL,
    PROCESS_STATUS_TOOL,
    PROCESS_OUTPUT_TOOL,
    PROCESS_WRITE_STDIN_TOOL,
    PROCESS_KILL_TOOL,
    PROCESS_LIST_TOOL,
    WASM_RUN_TOOL,
    CHANGES_SHOW_TOOL,
    CHANGES_APPLY_TOOL,
    CHANGES_DISCARD_TOOL,
];

fn schema_of<T: schemars::JsonSchema>() -> Value {
    serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null)
}

/// The JSON Schema of one tool's input, by tool name.
///
/// ```
/// let s = tierbox_policy::schema::tool_schema("process_kill").unwrap();
/// assert_eq!(s["required"], serde_json::json!(["id"]));
/// assert!(tierbox_policy::schema::tool_schema("rm_rf").is_none());
/// ```
pub fn tool_schema(name: &str) -> Option<Value> {
    use crate::handle::*;
    let mut schema = match name {
        PROCESS_RUN_TOOL => process_run_schema(),
        WASM_RUN_TOOL => wasm_run_schema(),
        PROCESS_OUTPUT_TOOL => schema_of::<ProcessOutputRequest>(),
        PROCESS_WRITE_STDIN_TOOL => schema_of::<ProcessWriteStdinRequest>(),
        PROCESS_LIST_TOOL => schema_of::<ProcessListRequest>(),
        PROCESS_STATUS_TOOL | PROCESS_KILL_TOOL => schema_of::<ProcessHandleRequest>(),
        CHANGES_SHOW_TOOL => schema_of::<ChangesShowRequest>(),
        CHANGES_APPLY_TOOL => schema_of::<ChangesApplyRequest>(),
        CHANGES_DISCARD_TOOL => schema_of::<ChangesDiscardRequest>(),
        _ => return None,
    };
    if name == PROCESS_KILL_TOOL {
        schema["title"] = Value::from(PROCESS_KILL_TOOL);
        schema["description"] = Value::from(
            "Kill one of your background processes (its whole process tree) and return its \
             final status.",
        );
    }
    Some(schema)
}

/// All tool schemas, keyed by tool name.
pub fn tool_schemas() -> Value {
    let map: serde_json::Map<String, Value> = TOOL_NAMES
        .iter()
        .map(|n| ((*n).to_owned(), tool_schema(n).unwrap_or(Value::Null)))
        .collect();
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::*;

    fn prop<'a>(schema: &'a Value, name: &str) -> &'a Value {
        &schema["properties"][name]
    }

    #[test]
    fn schema_caps_match_the_constants() {
        let s = process_run_schema();
        assert_eq!(s["additionalProperties"], Value::Bool(false));
        assert_eq!(s["required"], serde_json::json!(["command"]));
        assert_eq!(prop(&s, "command")["maxLength"], MAX_COMMAND_BYTES);
        assert_eq!(prop(&s, "command")["minLength"], 1);
        assert_eq!(prop(&s, "args")["maxItems"], MAX_ARGS);
        assert_eq!(prop(&s, "args")["items"]["maxLength"], MAX_ARG_BYTES);
        assert_eq!(prop(&s, "cwd")["maxLength"], MAX_CWD_BYTES);
        assert_eq!(prop(&s, "env")["maxProperties"], MAX_ENV_ENTRIES);
        assert_eq!(
            prop(&s, "env")["propertyNames"]["maxLength"],
            MAX_ENV_NAME_BYTES
        );
        assert_eq!(prop(&s, "env")["propertyNames"]["minLength"], 1);
        assert_eq!(
            prop(&s, "env")["additionalProperties"]["maxLength"],
            MAX_ENV_VALUE_BYTES
        );
        // Inline stdin is bounded by the document's cap here, by the run's stdin limit
        // (a policy's) at validation.
        assert_eq!(prop(&s, "stdin")["maxLength"], MAX_REQUEST_BYTES);
        assert_eq!(prop(&s, "stdin_base64")["maxLength"], MAX_REQUEST_BYTES);
        assert_eq!(prop(&s, "timeout_ms")["minimum"], 1);
        assert_eq!(
            prop(&s, "requested_egress_hosts")["maxItems"],
            MAX_EGRESS_HOSTS
        );
        assert_eq!(
            prop(&s, "requested_egress_hosts")["items"]["maxLength"],
            MAX_HOST_BYTES
        );
    }

    #[test]
    fn every_tool_has_a_closed_object_schema() {
        let all = tool_schemas();
        for name in TOOL_NAMES {
            let s = &all[name];
            assert_eq!(s["type"], "object", "{name}");
            assert_eq!(s["additionalProperties"], Value::Bool(false), "{name}");
            assert_eq!(s["title"], name, "{name}");
            assert!(
                s["description"].as_str().is_some_and(|d| !d.is_empty()),
                "{name}"
            );
        }
        let out = &all[PROCESS_OUTPUT_TOOL];
        assert_eq!(
            prop(out, "max_bytes")["maximum"],
            crate::handle::MAX_OUTPUT_READ_BYTES
        );
        assert_eq!(prop(out, "id")["maxLength"], crate::handle::HANDLE_HEX_LEN);
        assert_eq!(
            prop(&all[PROCESS_WRITE_STDIN_TOOL], "data")["maxLength"],
            MAX_STDIN_BYTES
        );
    }

    #[test]
    fn schema_lists_every_request_field() {
        let s = process_run_schema();
        let props: Vec<&str> = s["properties"]
            .as_object()
            .map(|m| m.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let mut props = props;
        props.sort_unstable();
        assert_eq!(
            props,
            [
                "args",
                "background",
                "command",
                "cwd",
                "env",
                "lifetime",
                "publish",
                "requested_egress_hosts",
                "stdin",
                "stdin_base64",
                "stdin_limit_bytes",
                "tier",
                "timeout_ms",
                "workspace",
                "workspace_mode"
            ]
        );
    }

    #[test]
    fn wasm_run_schema_caps_match_the_constants() {
        use crate::wasm::*;
        let s = wasm_run_schema();
        assert_eq!(s["additionalProperties"], Value::Bool(false));
        assert_eq!(prop(&s, "module")["maxLength"], MAX_MODULE_PATH_BYTES);
        assert_eq!(prop(&s, "module_wat")["maxLength"], MAX_INLINE_MODULE_BYTES);
        assert_eq!(
            prop(&s, "module_base64")["maxLength"],
            MAX_INLINE_MODULE_BYTES
        );
        assert_eq!(prop(&s, "entrypoint")["maxLength"], MAX_ENTRYPOINT_BYTES);
        assert_eq!(prop(&s, "args")["maxItems"], MAX_ARGS);
        assert_eq!(prop(&s, "args")["items"]["maxLength"], MAX_ARG_BYTES);
        assert_eq!(prop(&s, "env")["maxProperties"], MAX_ENV_ENTRIES);
        assert_eq!(prop(&s, "stdin")["maxLength"], MAX_REQUEST_BYTES);
        assert_eq!(prop(&s, "stdin_base64")["maxLength"], MAX_REQUEST_BYTES);
        assert_eq!(prop(&s, "timeout_ms")["minimum"], 1);
        let grants = &s["$defs"]["WasmGrants"]["properties"];
        assert_eq!(grants["fs"]["maxItems"], MAX_FS_GRANTS, "{s}");
        assert_eq!(grants["env"]["maxItems"], MAX_ENV_GRANTS);
        assert_eq!(
            s["$defs"]["FsGrant"]["additionalProperties"],
            Value::Bool(false)
        );
        let mut props: Vec<&str> = s["properties"]
            .as_object()
            .map(|m| m.keys().map(String::as_str).collect())
            .unwrap_or_default();
        props.sort_unstable();
        assert_eq!(
            props,
            [
                "args",
                "entrypoint",
                "env",
                "grants",
                "module",
                "module_base64",
                "module_wat",
                "stdin",
                "stdin_base64",
                "stdin_limit_bytes",
                "timeout_ms"
            ]
        );
    }
}
