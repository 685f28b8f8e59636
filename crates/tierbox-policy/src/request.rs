//! The `process_run` request: what an agent asks Tierbox to run.
//!
//! Invariants kept here:
//! - the wire shape is closed (`deny_unknown_fields`), so a misspelt field is a rejection,
//!   never a silently ignored wish;
//! - every hard cap is a named constant below, the JSON Schema published for the tool is
//!   generated from these types with the same constants (see [`crate::schema`]), and
//!   [`crate::validate()`] enforces them, so the schema and the runtime cannot disagree;
//! - lengths are in bytes (UTF-8); JSON Schema's `maxLength` counts characters, so for
//!   non-ASCII text the published schema is looser than the runtime check, never stricter;
//! - parsing never truncates: an oversize value is a [`Rejection`], not a shorter value.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::rejection::Rejection;

/// Longest accepted `command`, in bytes. Protects argv parsing and log lines.
pub const MAX_COMMAND_BYTES: usize = 256;
/// Most entries accepted in `args`. Protects the kernel's argv budget and the validators.
pub const MAX_ARGS: usize = 128;
/// Longest accepted single argument, in bytes.
pub const MAX_ARG_BYTES: usize = 4096;
/// Most per-call environment entries.
pub const MAX_ENV_ENTRIES: usize = 32;
/// Longest accepted environment variable name, in bytes.
pub const MAX_ENV_NAME_BYTES: usize = 128;
/// Longest accepted environment variable value, in bytes.
pub const MAX_ENV_VALUE_BYTES: usize = 4096;
/// Longest accepted `cwd`, in bytes (Linux `PATH_MAX`).
pub const MAX_CWD_BYTES: usize = 4096;
/// Largest accepted `data` of one `process_write_stdin` call, in bytes (a background
/// process's stdin is written call by call). A run's own stdin is bounded by the policy's
/// `limits.stdin_bytes` instead (see [`crate::policy::LimitsPolicy::stdin_bytes`]), and
/// its inline forms (`stdin`, `stdin_base64`) by the request document's cap.
pub const MAX_STDIN_BYTES: usize = 64 * 1024;
/// Most entries in `requested_egress_hosts`.
pub const MAX_EGRESS_HOSTS: usize = 64;
/// Longest accepted host name, in bytes (the DNS limit).
pub const MAX_HOST_BYTES: usize = 253;
/// Largest accepted request document, in bytes, checked before it is parsed.
pub const MAX_REQUEST_BYTES: usize = 128 * 1024;

/// Which isolation tier a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TierRequest {
    /// The strongest tier this host can enforce, never below the policy's minimum.
    #[default]
    Auto,
    /// WASM on wasmtime.
    A,
    /// Direct spawn with rlimits, landlock, seccomp and a cgroup.
    B,
    /// OS isolation: namespaces (Linux), sandbox-exec (macOS), Job Objects (Windows).
    C,
}

/// How long a background process may live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Lifetime {
    /// Ends when the owning run or session ends, or at its lifetime.
    #[default]
    RunOwned,
    /// Outlives the run, bounded by the policy's maximum lifetime.
    Detached,
}

/// The `process_run` tool call.
///
/// ```
/// use tierbox_policy::ProcessRunRequest;
///
/// let req = ProcessRunRequest::from_json(br#"{"command":"git","args":["status"]}"#).unwrap();
/// assert_eq!(req.args, ["status"]);
/// assert!(ProcessRunRequest::from_json(br#"{"command":"git","argz":[]}"#).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "process_run",
    description = "Run one program inside the Tierbox sandbox. `command` is a bare executable \
                   name; `args` are passed verbatim (no shell). Paths must stay inside the \
                   workspace."
)]
pub struct ProcessRunRequest {
    /// A bare executable name (no `/`), resolved in the sandbox's PATH.
    #[schemars(length(min = 1, max = MAX_COMMAND_BYTES))]
    pub command: String,
    /// Arguments, passed verbatim: never rewritten, never split, never shell-expanded.
    #[serde(default)]
    #[schemars(length(max = MAX_ARGS), inner(length(max = MAX_ARG_BYTES)))]
    pub args: Vec<String>,
    /// Working directory relative to the workspace root; must resolve inside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_CWD_BYTES))]
    pub cwd: Option<String>,
    /// Per-call environment variables, merged over the policy's environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "maxProperties" = MAX_ENV_ENTRIES,
        "propertyNames" = { "minLength": 1, "maxLength": MAX_ENV_NAME_BYTES },
        "additionalProperties" = { "type": "string", "maxLength": MAX_ENV_VALUE_BYTES },
    ))]
    pub env: BTreeMap<String, String>,
    /// Text written to the child's stdin, which is then closed. Default stdin is
    /// `/dev/null`. At most one of `stdin` and `stdin_base64` (`input.stdin_conflict`);
    /// larger than the run's stdin limit is `input.stdin_too_large`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_REQUEST_BYTES))]
    pub stdin: Option<String>,
    /// Bytes of any kind for the child's stdin, as standard base64 (padding optional, no
    /// whitespace; anything else is `input.stdin_encoding_invalid`), then closed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_REQUEST_BYTES))]
    pub stdin_base64: Option<String>,
    /// Narrows the run's stdin limit, in bytes: at most the policy's `limits.stdin_bytes`
    /// (a larger value is `limits.above_policy`). Omitted: the policy's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin_limit_bytes: Option<u64>,
    /// The caller streams the run's stdin as it arrives (the CLI's `--stdin`, the HTTP
    /// streamed form, a library reader) instead of giving it in the request. Not part of
    /// the wire shape: set by the Rust caller that holds the stream, never by a document.
    #[serde(skip)]
    pub stdin_stream: bool,
    /// Wall-clock timeout in milliseconds: at most the policy's `limits.max_timeout_ms` (a
    /// larger value is rejected with `limits.above_policy`, never silently lowered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub timeout_ms: Option<u64>,
    /// Start the process in the background and return a handle.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub background: bool,
    /// Lifetime of a background process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifetime: Option<Lifetime>,
    /// Hosts the command intends to reach; checked against the egress allowlist.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_EGRESS_HOSTS), inner(length(max = MAX_HOST_BYTES)))]
    pub requested_egress_hosts: Vec<String>,
    /// Ports to publish on the host's loopback, each `"127.0.0.1:HOSTPORT:SANDBOXPORT"`
    /// and each listed in the policy's `egress.publish` (Tier C).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = crate::reach::MAX_PUBLISHED_PORTS), inner(length(max = 32)))]
    pub publish: Vec<String>,
    /// Isolation tier; may ask for a stronger tier than the policy's minimum, never a weaker one.
    #[serde(default)]
    pub tier: TierRequest,
    /// How the run sees the workspace: `overlay` (review mode: the changes are returned as
    /// a change set to apply or discard) under a `direct` policy; never `direct` under an
    /// `overlay` policy (`workspace.mode_widened`). Omitted: the policy's
    /// `workspace.mode`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_mode: Option<crate::policy::WorkspaceMode>,
    /// Narrows the run's workspace to this subdirectory of the runner's workspace: a
    /// relative path of plain names (no `.`, `..` or leading `/`), naming an existing
    /// directory with no symbolic link on the way. The run's grants, `cwd`, arguments
    /// and review mode then see only it — what gives each of many sandboxes on one server
    /// a workspace of its own. Omitted: the runner's workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_CWD_BYTES))]
    pub workspace: Option<String>,
}

impl ProcessRunRequest {
    /// A request for `command` with no arguments and every other field at its default.
    pub fn new(command: impl Into<String>) -> Self {
        Self {
            command: command.into(),
            ..Self::default()
        }
    }

    /// Gives the run `data` as its stdin: as `stdin` when it is UTF-8, else as
    /// `stdin_base64` (clearing the other and `stdin_stream`).
    ///
    /// ```
    /// use tierbox_policy::ProcessRunRequest;
    ///
    /// let mut req = ProcessRunRequest::new("wc");
    /// req.set_stdin_bytes(b"text".to_vec());
    /// assert_eq!(req.stdin.as_deref(), Some("text"));
    /// req.set_stdin_bytes(vec![0xff, 0]);
    /// assert_eq!((req.stdin.as_deref(), req.stdin_base64.as_deref()), (None, Some("/wA=")));
    /// ```
    pub fn set_stdin_bytes(&mut self, data: Vec<u8>) {
        self.stdin_stream = false;
        match String::from_utf8(data) {
            Ok(text) => {
                self.stdin = Some(text);
                self.stdin_base64 = None;
            }
            Err(e) => {
                self.stdin = None;
                self.stdin_base64 = Some(crate::wasm::encode_base64(e.as_bytes()));
            }
        }
    }

    /// Parses a JSON request, checking the document size before parsing.
    ///
    /// Shape errors (unknown fields, wrong types) become [`Rejection::Malformed`]; the caps
    /// are checked later by [`crate::validate()`], so a parsed request is not yet valid.
    pub fn from_json(bytes: &[u8]) -> Result<Self, Rejection> {
        parse_request(bytes)
    }
}

/// Parses a tool request document: the size cap first, then the closed shape. Shape
/// errors (unknown fields, wrong types) become [`Rejection::Malformed`].
pub(crate) fn parse_request<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, Rejection> {
    if bytes.len() > MAX_REQUEST_BYTES {
        return Err(Rejection::RequestTooLarge {
            bytes: bytes.len(),
            max: MAX_REQUEST_BYTES,
        });
    }
    crate::json::from_slice(bytes).map_err(|e| Rejection::Malformed {
        detail: e.to_string(),
    })
}
