//! The Outcome of a run: what happened, what was enforced, and the output.

use std::borrow::Cow;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tierbox_egress::EgressLog;
use tierbox_policy::Enforcement;
use tierbox_redact::Redactor;

use crate::capture::Captured;
use crate::wire::{self, WireError};

/// Which limit ended (or constrained) the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LimitHit {
    /// The wall-clock timeout.
    WallTime,
    /// `RLIMIT_CPU` (the process got SIGXCPU or SIGKILL at the hard limit).
    CpuTime,
    /// The cgroup memory limit (the kernel's OOM killer ran in the run's cgroup).
    Memory,
    /// The process/thread limit (a fork or clone failed with EAGAIN in the run's cgroup).
    Processes,
    /// `RLIMIT_FSIZE` (the process got SIGXFSZ).
    FileSize,
    /// The output quota: in `kill` mode the tree was stopped (`quota_exceeded`); in
    /// `truncate` mode the output was cut (`truncated` on the stream) and the run went on.
    Output,
    /// Tier A: the fuel budget (CPU work).
    Fuel,
    /// Tier A: a table would have grown past the policy's limit.
    Table,
    /// Tier A: instantiation would have made more core instances, memories or tables
    /// than `wasm.instances`.
    Instances,
    /// A scratch filesystem of the run filled up (`limits.disk_bytes`): the overlay's
    /// upper layer in overlay mode, or Tier C's private `/tmp`; writes failed with
    /// `ENOSPC` inside the sandbox.
    Disk,
    /// The run's stdin limit (`limits.stdin_bytes`, or the request's `stdin_limit_bytes`):
    /// more was offered on a streamed stdin, and the program's stdin was closed after
    /// exactly the limit ([`Outcome::stdin`] says how much it got). The run went on.
    Stdin,
}

impl LimitHit {
    /// The policy key that sets this limit, for messages that say what to change: Tier A
    /// (`tier_a`) has its own memory key.
    ///
    /// ```
    /// use tierbox_runner::LimitHit;
    ///
    /// assert_eq!(LimitHit::Memory.policy_key(false), "limits.memory_bytes");
    /// assert_eq!(LimitHit::Memory.policy_key(true), "wasm.memory_bytes");
    /// ```
    pub fn policy_key(self, tier_a: bool) -> &'static str {
        match self {
            Self::WallTime => "limits.timeout_ms",
            Self::CpuTime => "limits.cpu_time_ms",
            Self::Memory if tier_a => "wasm.memory_bytes",
            Self::Memory => "limits.memory_bytes",
            Self::Processes => "limits.max_processes",
            Self::FileSize => "limits.file_size_bytes",
            Self::Output => "output.max_bytes",
            Self::Fuel => "wasm.fuel",
            Self::Table => "wasm.table_elements",
            Self::Instances => "wasm.instances",
            Self::Disk => "limits.disk_bytes",
            Self::Stdin => "limits.stdin_bytes",
        }
    }

    /// The value `policy` sets at [`LimitHit::policy_key`], with its unit (`"536870912
    /// bytes"`); `None` for the wall-clock timeout (a request may set its own) and for a
    /// CPU time the policy leaves unset.
    ///
    /// ```
    /// use tierbox_runner::LimitHit;
    ///
    /// let policy = tierbox_policy::Policy::builtin_default();
    /// let v = LimitHit::Memory.policy_value(&policy, false).unwrap();
    /// assert!(v.ends_with(" bytes"));
    /// assert_eq!(LimitHit::WallTime.policy_value(&policy, false), None);
    /// ```
    pub fn policy_value(self, policy: &tierbox_policy::Policy, tier_a: bool) -> Option<String> {
        let l = &policy.limits;
        let w = &policy.wasm;
        Some(match self {
            Self::WallTime => return None,
            Self::CpuTime => format!("{} ms", l.cpu_time_ms?),
            Self::Memory if tier_a => format!("{} bytes", w.memory_bytes),
            Self::Memory => format!("{} bytes", l.memory_bytes),
            Self::Processes => l.max_processes.to_string(),
            Self::FileSize => format!("{} bytes", l.file_size_bytes),
            Self::Output => format!("{} bytes per stream", policy.output.max_bytes),
            Self::Fuel => w.fuel.to_string(),
            Self::Table => w.table_elements.to_string(),
            Self::Instances => w.instances.to_string(),
            Self::Disk => format!("{} bytes", l.disk_bytes),
            Self::Stdin => format!("{} bytes", l.stdin_bytes),
        })
    }

    /// Its name as serialised (`"memory"`, `"file_size"`).
    pub fn name(self) -> &'static str {
        match self {
            Self::WallTime => "wall_time",
            Self::CpuTime => "cpu_time",
            Self::Memory => "memory",
            Self::Processes => "processes",
            Self::FileSize => "file_size",
            Self::Output => "output",
            Self::Fuel => "fuel",
            Self::Table => "table",
            Self::Instances => "instances",
            Self::Disk => "disk",
            Self::Stdin => "stdin",
        }
    }
}

/// One output stream as returned to the caller.
///
/// The stream's kept bytes (redacted; when bytes were omitted, the head and the tail
/// joined by a marker line) are the truth, and `text` is a view of them: exact when they
/// are valid UTF-8, otherwise lossy (`lossy_utf8`) with the bytes themselves in
/// `bytes_base64` (see [`crate::wire`]; [`StreamOutput::bytes`] gives them back).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StreamOutput {
    /// The kept output as text (redacted; each invalid UTF-8 sequence replaced with
    /// U+FFFD). When bytes were omitted, the head and the tail are joined by a marker line
    /// naming how many bytes were omitted.
    pub text: String,
    /// The kept bytes are not valid UTF-8: `text` replaced some of them with U+FFFD, and
    /// `bytes_base64` has them exactly.
    pub lossy_utf8: bool,
    /// The kept bytes exactly, as standard base64 with padding: the same head, marker
    /// line and tail as `text`, redacted the same way, every other byte as the program
    /// wrote it. Present exactly when `lossy_utf8` is true; otherwise `text` is exact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_base64: Option<String>,
    /// Bytes the process wrote (all of them, kept or not).
    pub total_bytes: u64,
    /// Bytes not kept.
    pub omitted_bytes: u64,
    /// Something was not kept.
    pub truncated: bool,
    /// Something was redacted.
    pub redacted: bool,
    /// Where the full stream was written, when spill is on (a file of the state
    /// directory's `spill/`, the supervisor's own, mode 0600, removed
    /// `output.spill_keep_secs` after its last write).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spill_path: Option<PathBuf>,
    /// Why the spill file is missing or holds less than the whole stream (refused at the
    /// cap `output.spill_total_bytes`, the file-size limit, a write error); `spill_path`
    /// is then absent (refused) or names a file holding the first bytes only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spill_error: Option<String>,
    /// Draining stopped at the bounded wait because a process outside the run's control
    /// kept the pipe open.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub drain_incomplete: bool,
    /// Bytes of this stream that the run's live output (streamed events: the HTTP API's
    /// `?stream=true`, MCP progress, the CLI's live printing) could not deliver because
    /// its reader had not taken them within [`crate::stream::STREAM_END_WAIT_MS`] of the
    /// run's end. The stream here is whole; only the live copy missed them. Absent when
    /// nothing was missed (always, for a reader that keeps reading).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub live_dropped_bytes: u64,
    /// Lowercase hex SHA-256 of every byte the process wrote to the stream, before
    /// truncation and redaction (attested; compare with a spill file).
    pub sha256: String,
    /// Bytes of the kept output left out of this view of it. A view with a size bound
    /// ([`Outcome::bounded`]: an MCP tool result) keeps the first and last
    /// [`VIEW_TEXT_BYTES`]` / 2` bytes and joins them with a marker line (`text` and
    /// `bytes_base64` alike); the whole output is in the full result (the HTTP API, the
    /// library) and, when spill is on, in the file at `spill_path`. Absent from a full
    /// view.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub view_omitted_bytes: Option<u64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Most bytes of each stream's output a bounded view of an outcome keeps
/// ([`Outcome::bounded`]): it keeps an MCP tool result, which a client hands to a model
/// whole, at a size a model can take (the output quota allows 1 MiB per stream).
pub const VIEW_TEXT_BYTES: usize = 64 * 1024;

/// Whether `b` continues a UTF-8 sequence (`10xxxxxx`).
fn continues(b: u8) -> bool {
    b & 0xC0 == 0x80
}

impl StreamOutput {
    /// The kept bytes exactly: `bytes_base64` decoded when present, else `text`.
    pub fn bytes(&self) -> Result<Cow<'_, [u8]>, WireError> {
        wire::decode(&self.text, self.bytes_base64.as_deref())
    }

    /// How many kept bytes there are (`text`'s length unless it is lossy).
    pub fn bytes_len(&self) -> usize {
        self.bytes_base64
            .as_deref()
            .map_or(self.text.len(), wire::decoded_len)
    }

    /// A stream whose kept bytes are `bytes`, everything else empty.
    fn with_bytes(bytes: Vec<u8>) -> Self {
        let w = wire::encode_owned(bytes);
        Self {
            lossy_utf8: w.lossy(),
            text: w.text,
            bytes_base64: w.bytes_base64,
            total_bytes: 0,
            omitted_bytes: 0,
            truncated: false,
            redacted: false,
            spill_path: None,
            spill_error: None,
            drain_incomplete: false,
            live_dropped_bytes: 0,
            sha256: String::new(),
            view_omitted_bytes: None,
        }
    }

    /// Replaces the kept bytes (and with them `text`, `lossy_utf8`, `bytes_base64`).
    fn set_bytes(&mut self, bytes: Vec<u8>) {
        let w = Self::with_bytes(bytes);
        (self.text, self.lossy_utf8, self.bytes_base64) = (w.text, w.lossy_utf8, w.bytes_base64);
    }

    /// Appends a note of Tierbox's (a Tier A trap) after the kept bytes.
    pub fn push_note(&mut self, note: &str) {
        match self.bytes_base64.is_some() {
            false => self.text.push_str(note),
            true => {
                let mut bytes = self.bytes().map(Cow::into_owned).unwrap_or_default();
                bytes.extend_from_slice(note.as_bytes());
                self.set_bytes(bytes);
            }
        }
    }

    /// This stream with its kept bytes cut to at most `max_bytes` (plus a marker line):
    /// the first and last halves, cut where no UTF-8 character is split, and
    /// `view_omitted_bytes` set. Output within the bound is kept as it is.
    ///
    /// ```
    /// let mut s = tierbox_runner::StreamOutput::from_captured(
    ///     tierbox_runner::capture::StreamCapture::new(1000, tierbox_policy::QuotaMode::Truncate)
    ///         .finish(),
    ///     None,
    ///     false,
    /// );
    /// s.text = "a".repeat(100);
    /// let v = s.bounded(10);
    /// assert_eq!(v.view_omitted_bytes, Some(90));
    /// assert!(v.text.starts_with("aaaaa\n") && v.text.ends_with("\naaaaa"));
    /// ```
    pub fn bounded(&self, max_bytes: usize) -> Self {
        if self.bytes_len() <= max_bytes {
            return self.clone();
        }
        let Ok(bytes) = self.bytes() else {
            return self.clone();
        };
        let mut head_end = max_bytes / 2;
        while head_end > 0 && continues(bytes[head_end]) && max_bytes / 2 - head_end < 3 {
            head_end -= 1;
        }
        let mut tail_start = bytes.len() - max_bytes / 2;
        let tail_from = tail_start;
        while tail_start < bytes.len() && continues(bytes[tail_start]) && tail_start - tail_from < 3
        {
            tail_start += 1;
        }
        let omitted = (tail_start - head_end) as u64;
        let mut view = bytes[..head_end].to_vec();
        view.extend_from_slice(
            format!("\n[tierbox: {omitted} bytes of this stream's output left out of this view]\n")
                .as_bytes(),
        );
        view.extend_from_slice(&bytes[tail_start..]);
        let mut out = Self {
            view_omitted_bytes: Some(omitted),
            ..self.clone()
        };
        out.set_bytes(view);
        out
    }

    /// Renders a capture: redaction of the bytes, the omission marker, and the text view
    /// (lossy UTF-8, with the bytes in `bytes_base64` when it is lossy).
    pub fn from_captured(c: Captured, redactor: Option<&Redactor>, drain_incomplete: bool) -> Self {
        let mut redacted = false;
        let mut render = |bytes: Vec<u8>| -> Vec<u8> {
            let Some(r) = redactor else {
                return bytes;
            };
            let (out, changed) = r.redact_bytes(&bytes);
            redacted |= changed;
            match out {
                Cow::Owned(out) => out,
                Cow::Borrowed(_) => bytes,
            }
        };
        let mut view = render(c.head);
        if c.omitted_bytes > 0 {
            view.extend_from_slice(
                format!("\n[tierbox: {} bytes omitted]\n", c.omitted_bytes).as_bytes(),
            );
        }
        if !c.tail.is_empty() {
            view.extend(render(c.tail));
        }
        Self {
            total_bytes: c.total_bytes,
            omitted_bytes: c.omitted_bytes,
            truncated: c.truncated,
            redacted,
            spill_path: c.spill_path,
            spill_error: c.spill_error,
            drain_incomplete,
            sha256: c.sha256,
            ..Self::with_bytes(view)
        }
    }
}

/// Resource usage of the run.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct Usage {
    /// User CPU time of the direct child and its reaped descendants, in milliseconds (Tier
    /// C native: of every process the sandbox's pid 1 reaped — the program, its
    /// descendants and orphans — without pid 1's own setup).
    pub cpu_user_ms: u64,
    /// System CPU time, in milliseconds.
    pub cpu_sys_ms: u64,
    /// Peak resident set size from `rusage` (the largest process), in bytes. The child is
    /// cloned sharing the supervisor's memory until `execve`, and the kernel carries that
    /// high-water mark over, so this is at least the supervisor's RSS at launch; prefer
    /// `peak_memory_bytes`.
    pub peak_rss_bytes: u64,
    /// Peak memory of the whole run, in bytes (cgroup), when a cgroup was used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_memory_bytes: Option<u64>,
}

/// The result of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Outcome {
    /// Exit code, when the process exited.
    pub exit_code: Option<i32>,
    /// Signal number, when the process was killed by a signal.
    pub signal: Option<i32>,
    /// Signal name (`SIGKILL`), when killed by a signal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal_name: Option<String>,
    /// The wall-clock timeout expired and the tree was terminated.
    pub timed_out: bool,
    /// The output quota was passed in `kill` mode and the tree was terminated.
    pub quota_exceeded: bool,
    /// The limit that ended or constrained the run.
    pub limit_hit: Option<LimitHit>,
    /// Unique id of the run.
    pub run_id: String,
    /// Standard output.
    pub stdout: StreamOutput,
    /// Standard error.
    pub stderr: StreamOutput,
    /// What the program's stdin carried, when it had one (inline or streamed): bytes,
    /// digest, the limit and whether it was hit. Absent for a `/dev/null` stdin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<crate::stdin::StdinReport>,
    /// Wall-clock duration from launch to the end of draining, in milliseconds.
    pub duration_ms: u64,
    /// Resource usage.
    pub usage: Usage,
    /// Tier that ran (serialised as `"a"`, `"b"`, `"c"`).
    pub tier: tierbox_policy::Tier,
    /// Backend that ran (serialised as `tier_b_linux`, …).
    pub backend: tierbox_policy::enforcement::BackendId,
    /// What was enforced.
    pub enforcement: Enforcement,
    /// Hosts checked by egress preflight.
    pub egress_preflight_hosts: Vec<String>,
    /// The egress proxy's decisions (`strict` mode with an allowlist): every connection
    /// the run asked for, allowed or denied with the reason, and the bytes moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<EgressLog>,
    /// The run's published ports and host ports (`egress.publish`, `egress.host_ports`):
    /// each relay and what it carried.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reach: Vec<tierbox_egress::reach::RelayReport>,
    /// The host unix sockets the run could connect to (`egress.unix_sockets`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unix_sockets: Vec<HostSocket>,
    /// What the caller should know about how the run was allowed (a privileged host
    /// socket it could reach).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Anything in stdout or stderr was redacted.
    pub redacted: bool,
    /// SHA-256 of the canonical plan that ran (see `tierbox_attest::plan_digest`, and
    /// `tierbox_attest::wasm_plan_digest` for Tier A).
    pub plan_sha256: String,
    /// Tier A: the module, where its compiled code came from, fuel and memory used, and
    /// the trap if the guest trapped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wasm: Option<tierbox_wasm::RunReport>,
    /// The signed attestation of this run (see `docs/attestation.md`); present on every
    /// run made through a [`crate::Runner`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation: Option<tierbox_attest::SignedAttestation>,
    /// The run happened but its attestation could not be made or appended to the audit
    /// log (e.g. the disk is full): why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_error: Option<String>,
    /// The sandbox itself failed during the run: its pid 1 died (a crash, or a kill that
    /// was not Tierbox's) before it reported how the program ended. What happened, e.g.
    /// `"sandbox pid 1 crashed (SIGSEGV) before reporting the program's exit; …"`.
    /// `exit_code` and `signal` are then `null` (the program's own status is unknown),
    /// [`Outcome::exit_status`] is [`SANDBOX_FAILURE_EXIT_STATUS`], and the output
    /// captured until then is kept. Absent for every other run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_failure: Option<String>,
    /// Git repositories (directories holding `.git`) the run created in the workspace:
    /// they did not exist at launch, so nothing of them was protected. Untrusted content
    /// for the host: a planted `.git/config` runs code when the host runs `git` there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub created_git_dirs: Vec<PathBuf>,
    /// The search for [`Outcome::created_git_dirs`] after the run stopped at a limit (the
    /// run left more entries or repositories than the policy's search reads): why. Then
    /// repositories it made may be missing from that list; the next run in the workspace
    /// is refused (`scope.protection_incomplete`) until the limit is raised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_git_dirs_incomplete: Option<String>,
    /// A Tier B run that could not keep protected paths read-only (the `protected_paths`
    /// layer is missing: no mount namespace of its own): the protected entries inside git directories (`.git/config`,
    /// `.git/hooks`, …) the run changed, created or removed ([`crate::protected`]).
    /// Untrusted content for the host: what git would run there is no longer the host's.
    /// Foreground runs; empty in Tier C, which keeps them read-only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub protected_changed: Vec<PathBuf>,
    /// What the run was refused, with the policy change that would allow each (see
    /// [`crate::denials`]): always present, empty when nothing was refused — among the
    /// layers `enforcement.denial_reports` says are recorded on this host.
    #[serde(default)]
    pub denials: Vec<crate::denials::Denial>,
    /// Overlay (review) mode: what the run changed in its workspace, which is unchanged
    /// until the change set is applied (`tierbox changes apply RUN_ID`); at most
    /// [`crate::changes::MAX_CHANGES`] listed. Absent in direct mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<crate::changes::ChangeSet>,
    /// Overlay mode: the change set could not be kept for review (the state directory's
    /// disk is full, say): why. The changes are then lost; the workspace is unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes_error: Option<String>,
    /// Overlay mode: the owner's older change sets removed unapplied to make room for
    /// this run's under the caps on kept change sets (`workspace.keep_changes_*`), oldest
    /// first; the audit log records them too (a `changes.evicted` event). Absent when
    /// none was.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes_evicted: Vec<crate::review::Evicted>,
}

/// The repositories found in `workspace` now that were not among `at_launch`: those a run
/// created ([`Outcome::created_git_dirs`]), and, when the search stopped at a limit of
/// `limits`, why ([`Outcome::created_git_dirs_incomplete`]). A `.git` that is a Tier C
/// placeholder (the empty mount point a sandbox covers a missing `.git` with:
/// `own_placeholders` of this run, or a concurrent run's, removed after the run) is not a
/// repository.
pub fn created_git_dirs(
    workspace: &std::path::Path,
    at_launch: &[PathBuf],
    own_placeholders: &[PathBuf],
    limits: tierbox_policy::validate::ScanLimits,
) -> (Vec<PathBuf>, Option<String>) {
    let repos = match tierbox_policy::validate::scan_repos(workspace, limits) {
        Ok(scan) => scan.repos,
        Err(e) => return (Vec::new(), Some(e.to_string())),
    };
    let created = repos
        .into_iter()
        .filter(|r| !at_launch.contains(r))
        .filter(|r| {
            let git = r.join(".git");
            !own_placeholders.contains(&git)
                && tierbox_sandbox::contract::observe(&git, || ()).is_some()
        })
        .collect();
    (created, None)
}

/// [`Outcome::exit_status`] of a run whose sandbox failed ([`Outcome::sandbox_failure`]):
/// not a status the program chose, and distinct from the timeout's 124 and the CLI's
/// 125 (rejected) and 126 (could not run).
pub const SANDBOX_FAILURE_EXIT_STATUS: i32 = 123;

/// The exit status a CLI gives a run that a limit stopped without a status of its own —
/// a Tier A guest out of fuel, memory, table room or instances (a native program stopped
/// by a limit has its signal's `128 + n`): distinct from a guest's own failure (1).
pub const LIMIT_EXIT_STATUS: i32 = 122;

/// A host unix socket a run could connect to: bound into its sandbox at `path`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HostSocket {
    /// The policy entry (`$SSH_AUTH_SOCK`).
    pub entry: String,
    /// The socket on the host, symlinks resolved; the same path inside the sandbox.
    pub path: String,
    /// Whose peer controls the host (allowed by `egress.danger_privileged_sockets`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub privileged: bool,
}

impl HostSocket {
    /// The plan's host sockets, and a warning for each privileged one.
    pub fn of_plan(plan: &tierbox_policy::plan::Plan) -> (Vec<Self>, Vec<String>) {
        let sockets: Vec<Self> = plan
            .network
            .unix_sockets
            .iter()
            .map(|s| Self {
                entry: s.entry.clone(),
                path: s.path.display().to_string(),
                privileged: s.privileged,
            })
            .collect();
        let warnings = sockets
            .iter()
            .filter(|s| s.privileged)
            .map(|s| format!("{}", PrivilegedSocketWarning(&s.path)))
            .collect();
        (sockets, warnings)
    }
}

/// The warning `check` and a run's outcome give for a privileged host socket.
#[derive(Debug)]
pub struct PrivilegedSocketWarning<'a>(pub &'a str);

impl std::fmt::Display for PrivilegedSocketWarning<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the run can connect to {}, whose peer controls the host (egress.danger_privileged_sockets): whatever runs inside can run anything as root on the host",
            self.0
        )
    }
}

impl Outcome {
    /// This outcome with each stream's text cut to [`VIEW_TEXT_BYTES`]
    /// ([`StreamOutput::bounded`]): the structured content of an MCP tool result. The
    /// attestation still names the whole output (its digests), which the full result
    /// carries. Borrowed when both streams already fit (nothing is copied).
    pub fn bounded(&self) -> std::borrow::Cow<'_, Self> {
        let fits = |s: &StreamOutput| s.bytes_len() <= VIEW_TEXT_BYTES;
        if fits(&self.stdout) && fits(&self.stderr) {
            return std::borrow::Cow::Borrowed(self);
        }
        std::borrow::Cow::Owned(Self {
            stdout: self.stdout.bounded(VIEW_TEXT_BYTES),
            stderr: self.stderr.bounded(VIEW_TEXT_BYTES),
            ..self.clone()
        })
    }

    /// The exit status a CLI should mirror: the child's code, `128 + signal` when killed,
    /// 124 on timeout (like `timeout(1)`), [`SANDBOX_FAILURE_EXIT_STATUS`] when the
    /// sandbox failed, [`LIMIT_EXIT_STATUS`] when a limit stopped a guest that has no
    /// status of its own.
    pub fn exit_status(&self) -> i32 {
        if self.sandbox_failure.is_some() {
            return SANDBOX_FAILURE_EXIT_STATUS;
        }
        if self.timed_out {
            return 124;
        }
        match (self.exit_code, self.signal) {
            (Some(c), _) => c,
            (None, Some(s)) => 128 + s,
            // A limit that stopped the guest (output cut in truncate mode stops nothing).
            (None, None)
                if self
                    .limit_hit
                    .is_some_and(|l| l != LimitHit::Output || self.quota_exceeded) =>
            {
                LIMIT_EXIT_STATUS
            }
            (None, None) => 1,
        }
    }

    /// The run ended normally with exit code 0.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0)
            && !self.timed_out
            && !self.quota_exceeded
            && self.sandbox_failure.is_none()
    }
}

/// `SIGKILL`-style name of a signal number.
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("SIG{sig}"),
    };
    name.to_owned()
}

#[cfg(test)]
mod limit_tests {
    use super::*;

    #[test]
    fn each_limit_s_name_is_its_serialised_form_and_each_has_a_policy_key() {
        use LimitHit::*;
        for l in [
            WallTime, CpuTime, Memory, Processes, FileSize, Output, Fuel, Table, Instances,
        ] {
            assert_eq!(
                serde_json::to_value(l).ok(),
                Some(serde_json::Value::from(l.name()))
            );
            let key = l.policy_key(false);
            assert!(key.contains('.'), "{key}");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::borrow::Cow;

    use super::*;

    /// A real Tier B outcome (`true`), as the HTTP API answered it.
    const SAMPLE: &str = include_str!("outcome_sample.json");

    /// Regression: a stream's text was the lossy UTF-8 of its bytes and nothing else, so
    /// binary output (`gzip -c`, `tar -c`, an image) came back corrupted.
    #[test]
    fn binary_output_is_kept_byte_exact_and_its_text_says_it_is_lossy() {
        use crate::capture::StreamCapture;
        let bytes: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
        let mut cap = StreamCapture::new(1 << 20, tierbox_policy::QuotaMode::Truncate);
        cap.push(&bytes);
        let s = StreamOutput::from_captured(cap.finish(), Some(&Redactor::default()), false);
        assert!(s.lossy_utf8 && s.bytes_base64.is_some() && !s.redacted);
        assert_eq!(&*s.bytes().unwrap(), &bytes[..]);
        assert_eq!(s.text, String::from_utf8_lossy(&bytes));
        let json = serde_json::to_string(&s).unwrap();
        let back: StreamOutput = serde_json::from_str(&json).unwrap();
        assert_eq!(&*back.bytes().unwrap(), &bytes[..]);
        // A bounded view keeps its head and tail byte-exact too.
        let view = s.bounded(1000);
        let kept = view.bytes().unwrap();
        assert!(kept.starts_with(&bytes[..500]) && kept.ends_with(&bytes[2500..]));
        assert_eq!(view.view_omitted_bytes, Some(2000));
        // Valid UTF-8 is carried as text alone.
        let mut cap = StreamCapture::new(16, tierbox_policy::QuotaMode::Truncate);
        cap.push("héllo".as_bytes());
        let s = StreamOutput::from_captured(cap.finish(), None, false);
        assert_eq!(
            (s.text.as_str(), s.lossy_utf8, s.bytes_base64.as_deref()),
            ("héllo", false, None)
        );
        assert!(!serde_json::to_string(&s).unwrap().contains("bytes_base64"));
    }

    #[test]
    fn a_view_copies_nothing_when_both_streams_fit_and_cuts_them_when_not() {
        let small: Outcome = serde_json::from_str(SAMPLE).unwrap();
        assert!(matches!(small.bounded(), Cow::Borrowed(o) if *o == small));
        let mut big = small.clone();
        big.stderr.text = "e".repeat(VIEW_TEXT_BYTES + 100);
        let view = big.bounded();
        assert!(matches!(view, Cow::Owned(_)));
        assert_eq!(view.stdout, big.stdout);
        assert_eq!(view.stderr.view_omitted_bytes, Some(100));
        assert_eq!(view.attestation, big.attestation);
    }
}
