//! Requests that address a background process by its handle: `process_status`,
//! `process_output`, `process_write_stdin`, `process_kill` and `process_list`.
//!
//! A handle is the 32 lowercase hex digits of a 128-bit random id, never a pid: a value of
//! any other shape is refused as [`Rejection::HandleInvalid`] before any lookup, so a
//! caller who passes a pid learns at once that pids are not handles.
//!
//! ```
//! use tierbox_policy::handle::{ProcessOutputRequest, Stream};
//!
//! let req = ProcessOutputRequest::from_json(
//!     br#"{"id":"00112233445566778899aabbccddeeff","offset":10}"#,
//! ).unwrap();
//! assert_eq!(req.stream, Stream::Stdout);
//! assert_eq!(req.max_bytes, tierbox_policy::handle::DEFAULT_OUTPUT_READ_BYTES);
//! assert_eq!(
//!     ProcessOutputRequest::from_json(br#"{"id":"1234"}"#).unwrap_err().code(),
//!     "input.handle_invalid",
//! );
//! ```

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::rejection::Rejection;
use crate::request::{MAX_STDIN_BYTES, parse_request};

/// Length of a handle: 128 bits as lowercase hex.
pub const HANDLE_HEX_LEN: usize = 32;

/// Largest read of one stream in one `process_output` call, in bytes (256 KiB). Keeps one
/// tool result within what a model's context and an MCP client's message cap accept.
pub const MAX_OUTPUT_READ_BYTES: usize = 256 * 1024;

/// `max_bytes` when a `process_output` request gives none (64 KiB).
pub const DEFAULT_OUTPUT_READ_BYTES: usize = 64 * 1024;

/// Which stream of a background process to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    /// Standard output.
    #[default]
    Stdout,
    /// Standard error.
    Stderr,
}

impl Stream {
    /// `"stdout"` or `"stderr"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
        }
    }
}

/// Whether `s` is exactly `len` lowercase hex digits (a handle, a run id, a digest).
///
/// ```
/// use tierbox_policy::handle::is_lower_hex;
/// assert!(is_lower_hex("0a9f", 4));
/// assert!(!is_lower_hex("0A9F", 4));
/// assert!(!is_lower_hex("0a9", 4));
/// ```
pub fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Checks that `id` has the shape of a handle.
pub fn check_handle(id: &str) -> Result<(), Rejection> {
    if is_lower_hex(id, HANDLE_HEX_LEN) {
        Ok(())
    } else {
        Err(Rejection::HandleInvalid {
            id: id.chars().take(80).collect(),
        })
    }
}

/// `process_status` and `process_kill`: one handle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "process_status",
    description = "The state of one of your background processes (running, exited, killed, \
                   expired), with its exit code or signal once it has ended."
)]
pub struct ProcessHandleRequest {
    /// The handle returned by `process_run` with `background: true`.
    #[schemars(length(min = HANDLE_HEX_LEN, max = HANDLE_HEX_LEN), regex(pattern = "^[0-9a-f]{32}$"))]
    pub id: String,
}

impl ProcessHandleRequest {
    /// Parses and checks a request document.
    pub fn from_json(bytes: &[u8]) -> Result<Self, Rejection> {
        let req: Self = parse_request(bytes)?;
        check_handle(&req.id)?;
        Ok(req)
    }
}

fn default_max_bytes() -> usize {
    DEFAULT_OUTPUT_READ_BYTES
}

/// `process_output`: output of one stream from a byte offset on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "process_output",
    description = "Output of one of your background processes since a byte offset. Pass the \
                   returned next_offset as the next offset; missed_bytes counts output that \
                   was dropped from the buffer before you read it."
)]
pub struct ProcessOutputRequest {
    /// The handle.
    #[schemars(length(min = HANDLE_HEX_LEN, max = HANDLE_HEX_LEN), regex(pattern = "^[0-9a-f]{32}$"))]
    pub id: String,
    /// Which stream.
    #[serde(default)]
    pub stream: Stream,
    /// Absolute byte offset to read from (0 = from the start).
    #[serde(default)]
    pub offset: u64,
    /// Most bytes to return.
    #[serde(default = "default_max_bytes")]
    #[schemars(range(min = 1, max = MAX_OUTPUT_READ_BYTES))]
    pub max_bytes: usize,
}

impl ProcessOutputRequest {
    /// Parses and checks a request document.
    pub fn from_json(bytes: &[u8]) -> Result<Self, Rejection> {
        let req: Self = parse_request(bytes)?;
        req.check()?;
        Ok(req)
    }

    /// Checks the handle and the read size.
    pub fn check(&self) -> Result<(), Rejection> {
        check_handle(&self.id)?;
        if self.max_bytes == 0 || self.max_bytes > MAX_OUTPUT_READ_BYTES {
            return Err(Rejection::ReadSizeInvalid {
                bytes: self.max_bytes,
                max: MAX_OUTPUT_READ_BYTES,
            });
        }
        Ok(())
    }
}

/// `process_write_stdin`: text for the process's stdin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "process_write_stdin",
    description = "Write text to the stdin of one of your background processes; close: true \
                   closes stdin afterwards (end of input)."
)]
pub struct ProcessWriteStdinRequest {
    /// The handle.
    #[schemars(length(min = HANDLE_HEX_LEN, max = HANDLE_HEX_LEN), regex(pattern = "^[0-9a-f]{32}$"))]
    pub id: String,
    /// The text to write.
    #[serde(default)]
    #[schemars(length(max = MAX_STDIN_BYTES))]
    pub data: String,
    /// Close stdin after writing.
    #[serde(default)]
    pub close: bool,
}

impl ProcessWriteStdinRequest {
    /// Parses and checks a request document.
    pub fn from_json(bytes: &[u8]) -> Result<Self, Rejection> {
        let req: Self = parse_request(bytes)?;
        req.check()?;
        Ok(req)
    }

    /// Checks the handle, the payload size and NUL bytes.
    pub fn check(&self) -> Result<(), Rejection> {
        check_handle(&self.id)?;
        if self.data.len() > MAX_STDIN_BYTES {
            return Err(Rejection::StdinTooLarge {
                bytes: self.data.len() as u64,
                max: MAX_STDIN_BYTES as u64,
            });
        }
        Ok(())
    }
}

/// `process_list`: no parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "process_list",
    description = "Your background processes, running or ended, oldest first."
)]
pub struct ProcessListRequest {}

impl ProcessListRequest {
    /// Parses a request document (an empty object).
    pub fn from_json(bytes: &[u8]) -> Result<Self, Rejection> {
        parse_request(bytes)
    }
}

/// Most paths a `changes_apply` request may name.
pub const MAX_APPLY_PATHS: usize = 1_000;

/// Longest path a `changes_apply` request may name, in bytes (`PATH_MAX`).
pub const MAX_APPLY_PATH_BYTES: usize = 4_096;

/// `changes_show`: the change set an overlay (review mode) run kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "changes_show",
    description = "What a run in overlay (review) mode changed in the workspace, which is \
                   unchanged until you apply: every added, modified, deleted and renamed \
                   path with its size, mode, SHA-256 and flags (.git changes, new \
                   executables, symlinks out of the workspace, setuid bits), and with \
                   `diff: true` a unified diff of the text files (at most 64 KiB)."
)]
pub struct ChangesShowRequest {
    /// The `run_id` of the overlay run's outcome.
    #[schemars(length(min = HANDLE_HEX_LEN, max = HANDLE_HEX_LEN), regex(pattern = "^[0-9a-f]{32}$"))]
    pub run_id: String,
    /// Include a unified diff of the text files.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub diff: bool,
}

/// `changes_apply`: apply a kept change set to the workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "changes_apply",
    description = "Apply the changes of an overlay (review mode) run to the workspace, all \
                   or nothing; with `paths`, only the changes at or below those paths. \
                   Refused, naming the path, when the workspace changed there since the \
                   run. Refused, listing them, when changes are flagged for a reviewer (a \
                   symlink out of the workspace, a new executable, a `.git` entry, a new \
                   repository, a setuid bit, a device node) unless each is named exactly in \
                   `paths` or `include_flagged` is true. Symlinks are applied as symlinks \
                   and never followed, setuid bits and device nodes are never applied."
)]
pub struct ChangesApplyRequest {
    /// The `run_id` of the overlay run's outcome.
    #[schemars(length(min = HANDLE_HEX_LEN, max = HANDLE_HEX_LEN), regex(pattern = "^[0-9a-f]{32}$"))]
    pub run_id: String,
    /// Apply only these paths (relative to the workspace) and what is below them;
    /// empty: every change.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_APPLY_PATHS), inner(length(min = 1, max = MAX_APPLY_PATH_BYTES)))]
    pub paths: Vec<String>,
    /// Apply flagged changes too (a symlink out of the workspace, a new executable, a
    /// `.git` entry, a new repository, a setuid bit, a device node): the caller has shown
    /// them to a reviewer. Without it, a flagged change is applied only when its own path
    /// is in `paths`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub include_flagged: bool,
}

/// `changes_discard`: drop a kept change set unapplied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "changes_discard",
    description = "Drop the changes of an overlay (review mode) run without applying them; \
                   the workspace stays as it is."
)]
pub struct ChangesDiscardRequest {
    /// The `run_id` of the overlay run's outcome.
    #[schemars(length(min = HANDLE_HEX_LEN, max = HANDLE_HEX_LEN), regex(pattern = "^[0-9a-f]{32}$"))]
    pub run_id: String,
}

impl ChangesShowRequest {
    /// Parses and checks a request document.
    pub fn from_json(bytes: &[u8]) -> Result<Self, Rejection> {
        let req: Self = parse_request(bytes)?;
        check_handle(&req.run_id)?;
        Ok(req)
    }
}

impl ChangesDiscardRequest {
    /// Parses and checks a request document.
    pub fn from_json(bytes: &[u8]) -> Result<Self, Rejection> {
        let req: Self = parse_request(bytes)?;
        check_handle(&req.run_id)?;
        Ok(req)
    }
}

impl ChangesApplyRequest {
    /// Parses and checks a request document: a run id, and at most [`MAX_APPLY_PATHS`]
    /// relative paths without `..`.
    ///
    /// ```
    /// use tierbox_policy::handle::ChangesApplyRequest;
    ///
    /// let id = "00112233445566778899aabbccddeeff";
    /// let ok = format!(r#"{{"run_id":"{id}","paths":["src/lib.rs"]}}"#);
    /// assert!(ChangesApplyRequest::from_json(ok.as_bytes()).is_ok());
    /// let up = format!(r#"{{"run_id":"{id}","paths":["../x"]}}"#);
    /// assert_eq!(ChangesApplyRequest::from_json(up.as_bytes()).unwrap_err().code(), "input.malformed");
    /// ```
    pub fn from_json(bytes: &[u8]) -> Result<Self, Rejection> {
        let req: Self = parse_request(bytes)?;
        check_handle(&req.run_id)?;
        if req.paths.len() > MAX_APPLY_PATHS {
            return Err(Rejection::Malformed {
                detail: format!(
                    "paths has {} entries, more than {MAX_APPLY_PATHS}",
                    req.paths.len()
                ),
            });
        }
        for p in &req.paths {
            let plain = !p.is_empty()
                && p.len() <= MAX_APPLY_PATH_BYTES
                && !p.contains('\0')
                && std::path::Path::new(p).components().all(|c| {
                    matches!(
                        c,
                        std::path::Component::Normal(_) | std::path::Component::CurDir
                    )
                });
            if !plain {
                return Err(Rejection::Malformed {
                    detail: format!(
                        "paths entry {p:?} is not a relative path inside the workspace (no leading /, no .., at most {MAX_APPLY_PATH_BYTES} bytes)"
                    ),
                });
            }
        }
        Ok(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn handles_are_32_lowercase_hex_digits() {
        assert!(check_handle(ID).is_ok());
        for bad in [
            "",
            "1234",
            "0123456789ABCDEF0123456789ABCDEF",
            "0123456789abcdef0123456789abcdeg",
            "0123456789abcdef0123456789abcdef0",
            "../../../../etc/passwd0123456789",
        ] {
            let err = check_handle(bad).unwrap_err();
            assert_eq!(err.code(), "input.handle_invalid", "{bad}");
        }
    }

    #[test]
    fn output_request_defaults_and_caps() {
        let req =
            ProcessOutputRequest::from_json(format!(r#"{{"id":"{ID}"}}"#).as_bytes()).unwrap();
        assert_eq!(
            (req.stream, req.offset, req.max_bytes),
            (Stream::Stdout, 0, DEFAULT_OUTPUT_READ_BYTES)
        );
        for max in [0, MAX_OUTPUT_READ_BYTES + 1] {
            let doc = format!(r#"{{"id":"{ID}","max_bytes":{max}}}"#);
            let err = ProcessOutputRequest::from_json(doc.as_bytes()).unwrap_err();
            assert_eq!(err.code(), "input.read_size_invalid");
        }
        let doc = format!(r#"{{"id":"{ID}","stream":"stdin"}}"#);
        let err = ProcessOutputRequest::from_json(doc.as_bytes()).unwrap_err();
        assert_eq!(err.code(), "input.malformed");
    }

    #[test]
    fn stdin_request_caps_the_payload() {
        let big = "x".repeat(MAX_STDIN_BYTES + 1);
        let doc = serde_json::json!({"id": ID, "data": big}).to_string();
        // The document is under the request cap, the payload over its own.
        let err = ProcessWriteStdinRequest::from_json(doc.as_bytes()).unwrap_err();
        assert_eq!(err.code(), "input.stdin_too_large");
        let doc = serde_json::json!({"id": ID, "data": "hi\n", "close": true}).to_string();
        assert!(
            ProcessWriteStdinRequest::from_json(doc.as_bytes())
                .unwrap()
                .close
        );
    }

    #[test]
    fn an_apply_consents_to_flagged_changes_only_when_it_says_so() {
        let doc = format!(r#"{{"run_id":"{ID}"}}"#);
        assert!(
            !ChangesApplyRequest::from_json(doc.as_bytes())
                .unwrap()
                .include_flagged
        );
        let doc = format!(r#"{{"run_id":"{ID}","include_flagged":true}}"#);
        assert!(
            ChangesApplyRequest::from_json(doc.as_bytes())
                .unwrap()
                .include_flagged
        );
        let doc = format!(r#"{{"run_id":"{ID}","include_flagged":"yes"}}"#);
        let err = ChangesApplyRequest::from_json(doc.as_bytes()).unwrap_err();
        assert_eq!(err.code(), "input.malformed");
    }

    #[test]
    fn shapes_are_closed() {
        let doc = format!(r#"{{"id":"{ID}","signal":9}}"#);
        assert_eq!(
            ProcessHandleRequest::from_json(doc.as_bytes())
                .unwrap_err()
                .code(),
            "input.malformed"
        );
        assert_eq!(
            ProcessListRequest::from_json(br#"{"owner":"x"}"#)
                .unwrap_err()
                .code(),
            "input.malformed"
        );
        assert!(ProcessListRequest::from_json(b"{}").is_ok());
    }
}
