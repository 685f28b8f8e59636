//! The `[limits]` and `[background]` sections: resource limits of a run, and of the
//! background processes it starts.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Resource limits. Units are in the field names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsPolicy {
    /// Default wall-clock timeout when the request gives none.
    pub timeout_ms: u64,
    /// Largest `timeout_ms` a request may ask for.
    pub max_timeout_ms: u64,
    /// CPU time per process (`RLIMIT_CPU`), rounded up to whole seconds; `None` means
    /// equal to the run's wall timeout.
    pub cpu_time_ms: Option<u64>,
    /// Memory for the whole run (cgroup `memory.max`); not `RLIMIT_AS`, which breaks
    /// runtimes that reserve address space (node, JVM, Go).
    pub memory_bytes: u64,
    /// Processes and threads for the whole run (cgroup `pids.max`, and `RLIMIT_NPROC`
    /// for the sandbox uid — which the kernel ignores for uid 0).
    pub max_processes: u64,
    /// Open file descriptors per process (`RLIMIT_NOFILE`).
    pub open_files: u64,
    /// Largest file a process may write (`RLIMIT_FSIZE`).
    pub file_size_bytes: u64,
    /// CPUs the whole run may use: on Linux (Tier B, native and bwrap) the run cgroup's
    /// CFS quota of `cpus` × 100 ms per 100 ms period; the container `--cpus`; the
    /// Windows Job Object CPU-rate hard cap. `None`: no quota on Linux, the backend's
    /// default (`DEFAULT_CPUS`) in containers and on Windows.
    pub cpus: Option<u32>,
    /// What a run may write outside its memory, in bytes: the size of the overlay's upper
    /// layer in overlay mode (the workspace's changes) and of the sandbox's private
    /// `/tmp` in Tier C. Writing past it fails with `ENOSPC` inside the sandbox and the
    /// outcome says `limit_hit: "disk"`. Both are memory-backed (tmpfs): what is written
    /// there also counts toward `memory_bytes`. Default [`DEFAULT_DISK_BYTES`].
    pub disk_bytes: u64,
    /// Most bytes a run's stdin may carry, in bytes; a request may narrow it
    /// (`stdin_limit_bytes`), never widen it (`limits.above_policy`). Bounds what a caller
    /// can push into a run (the supervisor's time and the program's), not memory: a
    /// streamed stdin (the CLI's `--stdin`, the HTTP streamed form, a library reader) is
    /// forwarded as it arrives, a chunk at a time. An inline stdin (`stdin`,
    /// `stdin_base64`) past it is refused before anything runs (`input.stdin_too_large`);
    /// a streamed one is cut: the program reads exactly this many bytes, then end of file,
    /// and the outcome says `limit_hit: "stdin"` with `stdin.limit_hit: true`. `0`: no
    /// stdin at all. At most [`HARD_MAX_STDIN_BYTES`]. Default [`DEFAULT_STDIN_BYTES`].
    pub stdin_bytes: u64,
}

/// Default of [`LimitsPolicy::stdin_bytes`]: 1 GiB.
pub const DEFAULT_STDIN_BYTES: u64 = 1 << 30;

/// Largest [`LimitsPolicy::stdin_bytes`] a policy may set: 1 TiB (a larger value is far
/// more likely a unit slip than a wish).
pub const HARD_MAX_STDIN_BYTES: u64 = 1 << 40;

/// Default of [`LimitsPolicy::disk_bytes`]: 2 GiB.
pub const DEFAULT_DISK_BYTES: u64 = 2 << 30;

/// Smallest [`LimitsPolicy::disk_bytes`]: 1 MiB (a full scratch filesystem is one with
/// less than 64 KiB free).
pub const MIN_DISK_BYTES: u64 = 1 << 20;

impl Default for LimitsPolicy {
    fn default() -> Self {
        Self {
            timeout_ms: 60_000,
            max_timeout_ms: 600_000,
            cpu_time_ms: None,
            memory_bytes: 1 << 30,
            max_processes: 128,
            open_files: 256,
            file_size_bytes: 1 << 30,
            cpus: None,
            disk_bytes: DEFAULT_DISK_BYTES,
            stdin_bytes: DEFAULT_STDIN_BYTES,
        }
    }
}

/// Hard ceiling on any background process's lifetime, in milliseconds (30 min): a policy
/// may lower `background.max_lifetime_ms`, never raise it above this. Bounds how long a
/// forgotten dev server can hold a sandbox.
pub const MAX_BACKGROUND_LIFETIME_MS: u64 = 30 * 60 * 1000;

/// Hard ceiling on `background.spill_bytes`, per stream (1 GiB).
pub const MAX_BACKGROUND_SPILL_BYTES: u64 = 1 << 30;

/// Background processes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct BackgroundPolicy {
    /// Live background processes per owner.
    pub max_per_owner: u32,
    /// Live background processes in total.
    pub max_total: u32,
    /// Lifetime when the request gives no `timeout_ms`.
    pub default_lifetime_ms: u64,
    /// Longest lifetime a request may ask for (at most [`MAX_BACKGROUND_LIFETIME_MS`]).
    pub max_lifetime_ms: u64,
    /// Per stream, the first `spill_bytes` of output are also kept in a private file
    /// under the state directory, so reads from offsets that have left the in-memory
    /// ring still succeed. 0 (the default) keeps only the ring.
    pub spill_bytes: u64,
}

impl Default for BackgroundPolicy {
    fn default() -> Self {
        Self {
            max_per_owner: 4,
            max_total: 16,
            default_lifetime_ms: 10 * 60 * 1000,
            max_lifetime_ms: MAX_BACKGROUND_LIFETIME_MS,
            spill_bytes: 0,
        }
    }
}
