//! The `[output]`, `[redaction]` and `[audit]` sections: how output is captured and
//! redacted, and where runs are recorded.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{DEFAULT_SPILL_KEEP_SECS, DEFAULT_SPILL_TOTAL_BYTES};

/// What to do when a run's output passes the quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum QuotaMode {
    /// Keep the head and the tail, count what was omitted, keep draining so the child
    /// never blocks (default).
    #[default]
    Truncate,
    /// Terminate the tree and report `quota_exceeded`, returning the captured prefix.
    Kill,
}

/// Output capture.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct OutputPolicy {
    /// Bytes kept per stream (stdout and stderr each).
    pub max_bytes: u64,
    /// What happens past `max_bytes`.
    pub mode: QuotaMode,
    /// Also write the full streams to files in the run's state directory and return their
    /// paths (each bounded by `limits.file_size_bytes`, all together by
    /// `spill_total_bytes`). The files hold the raw output (not redacted), are the
    /// supervisor's own with mode 0600, and are removed `spill_keep_secs` after they were
    /// last written.
    pub spill: bool,
    /// Seconds a spill file is kept after it was last written (1 to
    /// [`MAX_SPILL_KEEP_SECS`](super::MAX_SPILL_KEEP_SECS); default [`DEFAULT_SPILL_KEEP_SECS`], a day). The next run
    /// of the same state directory, a server's periodic sweep and `tierbox doctor` remove
    /// the files past it; a file still being written is never removed.
    pub spill_keep_secs: u64,
    /// Bytes all spill files of the state directory may hold together, foreground and
    /// background alike (at least 1; default [`DEFAULT_SPILL_TOTAL_BYTES`], 4 GiB). Room
    /// is reserved before it is written, so concurrent runs cannot pass it together; a
    /// spill with no room left is refused, one that runs out of room stops, and the
    /// stream's `spill_error` says which.
    pub spill_total_bytes: u64,
}

impl Default for OutputPolicy {
    fn default() -> Self {
        Self {
            max_bytes: 1 << 20,
            mode: QuotaMode::Truncate,
            spill: false,
            spill_keep_secs: DEFAULT_SPILL_KEEP_SECS,
            spill_total_bytes: DEFAULT_SPILL_TOTAL_BYTES,
        }
    }
}

/// Output redaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RedactionPolicy {
    /// Redact credentials from output before it leaves the runner (default on).
    pub enabled: bool,
}

impl Default for RedactionPolicy {
    fn default() -> Self {
        Self { enabled: true }
    }
}

/// Audit log and attestation signing.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AuditPolicy {
    /// Append-only JSON-lines audit log.
    pub log: Option<PathBuf>,
    /// ed25519 signing key; created 0600 in the state directory when absent.
    pub signing_key: Option<PathBuf>,
    /// Tier C: also report the paths a run could not open because the sandbox does not
    /// show them (`ENOENT`) or shows them read-only (`EROFS`), with the grant that would
    /// allow each. Read from kernel audit rules added for the run's audit session while it
    /// runs (root supervisor, audit enabled); while any such rule exists the kernel
    /// records the path of every file system call of every process on the host, so it
    /// is off by default.
    #[serde(default)]
    pub file_refusals: bool,
}
