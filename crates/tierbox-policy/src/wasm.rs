//! Tier A: the `wasm_run` request, the policy's `[wasm]` section and the [`WasmPlan`].
//!
//! A WASM guest starts with nothing: no preopened directory, stdin closed, no environment,
//! no arguments beyond `argv[0]`, no network. Everything it gets is a grant, and every
//! grant must be within what the policy allows, or the request is rejected naming the
//! grant. [`crate::validate::validate_wasm`] turns a request into a plan;
//! [`crate::validate::validate_tier_a`] does the same for a `process_run` of an
//! interpreter the policy maps to a WASI build (`python3 -c …` in Tier A).

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::plan::{OutputPlan, RedactionPlan};
use crate::rejection::Rejection;
use crate::request::{MAX_ARG_BYTES, MAX_ARGS, MAX_ENV_ENTRIES};
use crate::request::{MAX_ENV_NAME_BYTES, MAX_ENV_VALUE_BYTES, MAX_REQUEST_BYTES};

/// Guest path at which the workspace is preopened. The workspace is also preopened as
/// `.`, so relative paths (`python3 script.py`) resolve in it, as with `wasmtime run
/// --dir .`.
pub const WORKSPACE_GUEST_PATH: &str = "/workspace";

/// Longest accepted `module` path or `entrypoint`, in bytes.
pub const MAX_MODULE_PATH_BYTES: usize = 4096;
/// Longest accepted inline module (`module_wat` or `module_base64`), in bytes. The whole
/// request is capped at [`crate::request::MAX_REQUEST_BYTES`] too.
pub const MAX_INLINE_MODULE_BYTES: usize = 96 * 1024;
/// Most filesystem grants in one request. Each becomes one preopened directory.
pub const MAX_FS_GRANTS: usize = 16;
/// Most environment names in `grants.env`.
pub const MAX_ENV_GRANTS: usize = 32;
/// Most `grants.network` entries of one request: each is resolved when the request is
/// validated (a DNS lookup each).
pub const MAX_NETWORK_GRANTS: usize = 16;
/// Most addresses kept for one network grant (a name that resolves to more keeps the
/// first ones, in the resolver's order).
pub const MAX_GRANT_ADDRS: usize = 16;
/// Hard cap a policy may set on `wasm.max_module_bytes` (256 MiB): the module is read
/// into memory and compiled.
pub const HARD_MAX_MODULE_BYTES: u64 = 256 * 1024 * 1024;
/// Hard cap a policy may set on `wasm.memory_bytes` (4 GiB, the wasm32 address space).
pub const HARD_MAX_WASM_MEMORY_BYTES: u64 = 4 * 1024 * 1024 * 1024;
/// Longest accepted export name for `entrypoint`, in bytes.
pub const MAX_ENTRYPOINT_BYTES: usize = 256;

/// Access to a directory granted to a guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DirAccess {
    /// Not preopened at all.
    None,
    /// Files and directories may be read, not created, written or removed.
    ReadOnly,
    /// Read and write.
    #[default]
    ReadWrite,
}

impl DirAccess {
    /// The policy spelling: `none`, `read_only`, `read_write`.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::ReadOnly => "read_only",
            Self::ReadWrite => "read_write",
        }
    }
}

/// One filesystem grant asked for by a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FsGrant {
    /// A directory: relative to the workspace (preopened at `/workspace/<path>`) or an
    /// absolute host path the policy lists (preopened at the same path in the guest).
    #[schemars(length(min = 1, max = MAX_MODULE_PATH_BYTES))]
    pub path: String,
    /// Write access; default read-only.
    #[serde(default)]
    pub write: bool,
}

/// The capabilities a request asks for.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WasmGrants {
    /// Access to the workspace; default: what the policy's `wasm.workspace` gives.
    /// A request may narrow it, never widen it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<DirAccess>,
    /// Extra directories.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_FS_GRANTS))]
    pub fs: Vec<FsGrant>,
    /// Names of supervisor environment variables passed to the guest (each must be in the
    /// policy's `wasm.allow_env`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_ENV_GRANTS), inner(length(min = 1, max = MAX_ENV_NAME_BYTES)))]
    pub env: Vec<String>,
    /// Hosts a component may open TCP connections to through `wasi:sockets`, each
    /// `HOST:PORT` and allowed by the policy's egress (`egress.allow` in `strict` and
    /// `preflight`; nothing in `block_all`). Resolved once, when the request is validated:
    /// the guest's name lookups answer with those addresses only, and it may connect to
    /// nothing else. A name that resolves to a loopback, private, link-local or metadata
    /// address is refused unless an `egress.allow` address entry covers it. Preview 1
    /// modules have no sockets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_NETWORK_GRANTS), inner(length(max = 260)))]
    pub network: Vec<String>,
}

/// The `wasm_run` tool call: run a WASM module (WASI preview 1) or component (WASI
/// preview 2) in Tier A.
///
/// ```
/// use tierbox_policy::wasm::WasmRunRequest;
///
/// let req = WasmRunRequest::from_json(br#"{"module":"tool.wasm","args":["--fast"]}"#).unwrap();
/// assert_eq!(req.module.as_deref(), Some("tool.wasm"));
/// assert!(WasmRunRequest::from_json(br#"{"module":"t.wasm","grant":{}}"#).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "wasm_run",
    description = "Run a WASM module or component in Tier A (wasmtime). The guest sees only \
                   what is granted: the workspace at /workspace (and as the current \
                   directory), the granted directories and environment variables."
)]
pub struct WasmRunRequest {
    /// Path of the module (`.wasm`, or `.wat` text) inside the workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_MODULE_PATH_BYTES))]
    pub module: Option<String>,
    /// An inline module as WAT text (needs `wasm.allow_inline_modules`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_INLINE_MODULE_BYTES))]
    pub module_wat: Option<String>,
    /// An inline binary module, base64 (needs `wasm.allow_inline_modules`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_INLINE_MODULE_BYTES))]
    pub module_base64: Option<String>,
    /// Exported function to call; default `_start` (WASI commands). Components always run
    /// their `wasi:cli/run` export.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_ENTRYPOINT_BYTES))]
    pub entrypoint: Option<String>,
    /// Arguments after `argv[0]` (the module's file name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_ARGS), inner(length(max = MAX_ARG_BYTES)))]
    pub args: Vec<String>,
    /// Environment variables with values; each name must be in `wasm.allow_env`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "maxProperties" = MAX_ENV_ENTRIES,
        "propertyNames" = { "minLength": 1, "maxLength": MAX_ENV_NAME_BYTES },
        "additionalProperties" = { "type": "string", "maxLength": MAX_ENV_VALUE_BYTES },
    ))]
    pub env: BTreeMap<String, String>,
    /// Text for the guest's stdin, which is then at end of file. Default: empty. At most
    /// one of `stdin` and `stdin_base64`; bounded by the run's stdin limit, as for
    /// `process_run`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_REQUEST_BYTES))]
    pub stdin: Option<String>,
    /// Bytes of any kind for the guest's stdin, as standard base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_REQUEST_BYTES))]
    pub stdin_base64: Option<String>,
    /// Narrows the run's stdin limit, in bytes (at most the policy's
    /// `limits.stdin_bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin_limit_bytes: Option<u64>,
    /// The caller streams the guest's stdin (see
    /// [`crate::ProcessRunRequest::stdin_stream`]); not part of the wire shape.
    #[serde(skip)]
    pub stdin_stream: bool,
    /// Wall-clock timeout in milliseconds, compilation included: at most the policy's
    /// `limits.max_timeout_ms` (a larger value is rejected with `limits.above_policy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub timeout_ms: Option<u64>,
    /// The capabilities asked for.
    #[serde(default)]
    pub grants: WasmGrants,
}

impl WasmRunRequest {
    /// A request for the module at `path` (inside the workspace).
    pub fn module(path: impl Into<String>) -> Self {
        Self {
            module: Some(path.into()),
            ..Self::default()
        }
    }

    /// Parses a JSON request, checking the document size before parsing.
    pub fn from_json(bytes: &[u8]) -> Result<Self, Rejection> {
        crate::request::parse_request(bytes)
    }
}

/// The policy's `[wasm]` section: what Tier A guests may be granted, and their limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct WasmPolicy {
    /// The most a guest may get of the workspace (preopened at `/workspace` and `.`).
    pub workspace: DirAccess,
    /// Directories a request may grant read-only: relative to the workspace, absolute, or
    /// `~/…`. A grant may name the directory or one below it.
    pub read_only: Vec<String>,
    /// Directories a request may grant read-write (or read-only).
    pub writable: Vec<String>,
    /// Environment variable names a request may set (`env`) or pass (`grants.env`).
    pub allow_env: Vec<String>,
    /// Accept inline modules (`module_wat`, `module_base64`) in requests.
    pub allow_inline_modules: bool,
    /// Fuel per run: roughly one unit per WASM instruction. Bounds CPU work independently
    /// of the wall-clock deadline.
    pub fuel: u64,
    /// Largest size of each linear memory, in bytes (`memory.grow` past it fails).
    pub memory_bytes: u64,
    /// Largest number of elements in each table.
    pub table_elements: u64,
    /// Most instances (core modules of a component count one each), memories and tables
    /// per run.
    pub instances: u32,
    /// Largest module file accepted, in bytes (checked before it is read whole).
    pub max_module_bytes: u64,
    /// Interpreter names mapped to WASI builds: `python3 = "python.wasm"`. A relative path
    /// is in the runtimes directory (`tierbox wasm fetch-runtimes` fills it); `~/…` and
    /// absolute paths are used as they are. Only Tier A runs these; Tiers B and C keep
    /// their interpreter guardrails.
    pub interpreters: BTreeMap<String, String>,
}

impl Default for WasmPolicy {
    fn default() -> Self {
        Self {
            workspace: DirAccess::ReadWrite,
            read_only: Vec::new(),
            writable: Vec::new(),
            allow_env: Vec::new(),
            allow_inline_modules: false,
            fuel: 10_000_000_000,
            memory_bytes: 64 * 1024 * 1024,
            table_elements: 100_000,
            instances: 32,
            max_module_bytes: 64 * 1024 * 1024,
            interpreters: BTreeMap::new(),
        }
    }
}

impl WasmPolicy {
    /// Checks the rules a well-formed `[wasm]` section must also satisfy.
    pub(crate) fn check(&self) -> Result<(), (String, String)> {
        let bad = |field: &str, reason: String| Err((format!("wasm.{field}"), reason));
        if self.fuel == 0 {
            return bad("fuel", "must be at least 1".to_owned());
        }
        if self.memory_bytes == 0 || self.memory_bytes > HARD_MAX_WASM_MEMORY_BYTES {
            return bad(
                "memory_bytes",
                format!(
                    "{} is outside 1..={HARD_MAX_WASM_MEMORY_BYTES}",
                    self.memory_bytes
                ),
            );
        }
        if self.max_module_bytes == 0 || self.max_module_bytes > HARD_MAX_MODULE_BYTES {
            return bad(
                "max_module_bytes",
                format!(
                    "{} is outside 1..={HARD_MAX_MODULE_BYTES}",
                    self.max_module_bytes
                ),
            );
        }
        if self.instances == 0 {
            return bad("instances", "must be at least 1".to_owned());
        }
        for name in &self.allow_env {
            if name.is_empty() || name.contains('=') || name.contains('\0') || name == "*" {
                return bad("allow_env", format!("{name:?} is not a variable name"));
            }
        }
        for (name, path) in &self.interpreters {
            if name.is_empty() || name.contains('/') || name.chars().any(char::is_whitespace) {
                return bad(
                    "interpreters",
                    format!("{name:?} is not a bare command name"),
                );
            }
            if path.is_empty() || path.contains('\0') {
                return bad("interpreters", format!("{name} maps to an empty path"));
            }
        }
        Ok(())
    }
}

/// Where the module comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModuleSource {
    /// A file (inside the workspace, or a runtime the policy maps an interpreter to).
    File(PathBuf),
    /// Inline bytes: a binary module or WAT text.
    Inline(#[serde(with = "hex_bytes")] Vec<u8>),
}

/// A directory preopened for the guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preopen {
    /// Canonical host directory.
    pub host: PathBuf,
    /// Name the guest sees (`/workspace`, `.`, or an absolute path).
    pub guest: String,
    /// Write access.
    pub writable: bool,
}

/// Tier A limits, resolved for one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WasmLimitsPlan {
    /// Wall-clock deadline, compilation included.
    pub wall_timeout_ms: u64,
    /// Fuel units.
    pub fuel: u64,
    /// Largest size of each linear memory, in bytes.
    pub memory_bytes: u64,
    /// Largest number of elements per table.
    pub table_elements: u64,
    /// Most instances, memories and tables.
    pub instances: u32,
    /// Largest module accepted, in bytes.
    pub max_module_bytes: u64,
    /// Most bytes the guest's stdin carries (`limits.stdin_bytes`, or the request's
    /// narrower `stdin_limit_bytes`).
    #[serde(default = "crate::plan::default_stdin_bytes")]
    pub stdin_bytes: u64,
}

/// A validated Tier A run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WasmPlan {
    /// The module.
    pub module: ModuleSource,
    /// Exported function to call (`_start`).
    pub entrypoint: String,
    /// argv as the guest sees it; `argv[0]` is the module's or interpreter's name.
    pub argv: Vec<String>,
    /// The guest's complete environment, sorted by name.
    pub env: Vec<(String, String)>,
    /// Canonical workspace root.
    pub workspace: PathBuf,
    /// Every directory the guest can reach. Nothing else is visible.
    pub preopens: Vec<Preopen>,
    /// Limits.
    pub limits: WasmLimitsPlan,
    /// Output capture (same rules as process runs).
    pub output: OutputPlan,
    /// Data for stdin; `None` means an empty stdin.
    #[serde(with = "crate::plan::opt_bytes")]
    pub stdin: Option<Vec<u8>>,
    /// The guest's stdin is the caller's stream (see [`crate::Plan::stdin_streamed`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stdin_streamed: bool,
    /// Redaction.
    pub redaction: RedactionPlan,
    /// The hosts the guest may connect to (`grants.network`), resolved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network: Vec<NetGrant>,
}

/// A host a Tier A guest may connect to, resolved once when the request was validated:
/// its name lookups of `host` answer `addrs`, and a connect is allowed to exactly
/// `addrs` at `port`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetGrant {
    /// The host as granted, in canonical form (a name or an address).
    pub host: String,
    /// The TCP port.
    pub port: u16,
    /// The addresses it resolved to, each checked against the special ranges.
    pub addrs: Vec<std::net::IpAddr>,
}

/// Encodes standard base64 with padding (what [`decode_base64`] reads back).
pub(crate) fn encode_base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let mut acc = [0u8; 3];
        acc[..chunk.len()].copy_from_slice(chunk);
        let n = u32::from_be_bytes([0, acc[0], acc[1], acc[2]]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes standard base64 (padding optional, no whitespace), for `module_base64` and
/// `stdin_base64`.
pub(crate) fn decode_base64(text: &str) -> Option<Vec<u8>> {
    fn value(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let body = text.trim_end_matches('=');
    if text.len() - body.len() > 2 || body.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(body.len() / 4 * 3 + 2);
    for chunk in body.as_bytes().chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= value(c)? << (18 - 6 * i);
        }
        let bytes = acc.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    Some(out)
}

mod hex_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&v.iter().map(|b| format!("{b:02x}")).collect::<String>())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        (0..s.len())
            .step_by(2)
            .map(|i| {
                s.get(i..i + 2)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| serde::de::Error::custom("invalid hex"))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_known_vectors() {
        for (plain, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg"),
            ("\0asm", "AGFzbQ=="),
        ] {
            assert_eq!(
                decode_base64(enc).as_deref(),
                Some(plain.as_bytes()),
                "{enc}"
            );
            assert_eq!(
                encode_base64(plain.as_bytes()).trim_end_matches('='),
                enc.trim_end_matches('=')
            );
        }
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(decode_base64(&encode_base64(&all)), Some(all));
        assert_eq!(decode_base64("Zm9v!"), None);
        assert_eq!(decode_base64("Z"), None);
        assert_eq!(decode_base64("Zg==="), None);
    }

    #[test]
    fn policy_defaults_are_the_spec_values() {
        let p = WasmPolicy::default();
        assert_eq!(p.fuel, 10_000_000_000);
        assert_eq!(p.memory_bytes, 64 << 20);
        assert!(!p.allow_inline_modules);
        assert!(p.allow_env.is_empty());
        assert_eq!(DirAccess::ReadWrite.name(), "read_write");
    }
}
