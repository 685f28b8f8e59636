//! The policy: versioned data that says what a run may do.
//!
//! Every default is the locked-down one, and every knob that widens access has a loud
//! name (`allow_interpreters`, `danger_allow_any_executable`, `egress.mode = "allow_all"`).
//! Unknown keys are rejected at every level, so a typo never silently keeps a default.
//! [`Policy::builtin_default`] is the policy `tierbox run` uses when none is given; it is
//! the same document as `policies/strict.toml`.

use std::fmt;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod egress;
mod egress_check;
mod exec;
mod filesystem;
mod limits;
mod load;
mod output;
mod tier;
mod workspace;

pub use egress::{CredentialPolicy, EgressHostPolicy, EgressMode, EgressPolicy, SecretSource};
pub use exec::{EnvPolicy, ExecPolicy};
pub use filesystem::{DevShm, FilesystemPolicy};
pub use limits::{
    BackgroundPolicy, DEFAULT_DISK_BYTES, DEFAULT_STDIN_BYTES, HARD_MAX_STDIN_BYTES, LimitsPolicy,
    MAX_BACKGROUND_LIFETIME_MS, MAX_BACKGROUND_SPILL_BYTES, MIN_DISK_BYTES,
};
pub use output::{AuditPolicy, OutputPolicy, QuotaMode, RedactionPolicy};
pub use tier::{
    ContainerPolicy, DEFAULT_CONTAINER_USER, DEFAULT_SANDBOX_ID, MAX_CONTAINER_IMAGE_BYTES,
    TierCBackend, TierPolicy,
};
pub use workspace::*;

/// The policy format version this build understands.
pub const POLICY_VERSION: u32 = 1;

/// Largest accepted policy document, in bytes. Protects the TOML parser.
pub const MAX_POLICY_BYTES: usize = 256 * 1024;

/// Hard cap on any wall-clock timeout a policy may allow, in milliseconds (24 h).
pub const HARD_MAX_TIMEOUT_MS: u64 = 24 * 60 * 60 * 1000;

/// Hard cap on captured output per run a policy may allow, in bytes (256 MiB). The
/// supervisor holds at most this much of a run's output in memory.
pub const HARD_MAX_OUTPUT_BYTES: u64 = 256 * 1024 * 1024;

/// `output.spill_keep_secs` when the policy gives none: a spill file is removed one day
/// after it was last written.
pub const DEFAULT_SPILL_KEEP_SECS: u64 = 24 * 60 * 60;

/// Longest `output.spill_keep_secs` a policy may ask for, in seconds (30 days): spill
/// files hold whole output streams, secrets included (they are not redacted).
pub const MAX_SPILL_KEEP_SECS: u64 = 30 * 24 * 60 * 60;

/// `output.spill_total_bytes` when the policy gives none (4 GiB): two streams of a run at
/// the default `limits.file_size_bytes`, twice over.
pub const DEFAULT_SPILL_TOTAL_BYTES: u64 = 4 << 30;

/// Hard cap on the number of `egress.resolve` entries (host names with fixed addresses).
pub const MAX_EGRESS_RESOLVE: usize = 256;

/// Hard cap on the addresses of one `egress.resolve` entry.
pub const MAX_EGRESS_RESOLVE_ADDRS: usize = 16;

/// Hard cap on the `exec.allowed_executables` list length.
pub const MAX_ALLOWED_EXECUTABLES: usize = 1024;

/// The fixed PATH inside the sandbox unless the policy sets `env.path`.
pub const DEFAULT_SANDBOX_PATH: &str =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The strict default policy, shipped as `policies/strict.toml` and built into the binary.
pub const BUILTIN_DEFAULT_POLICY_TOML: &str = include_str!("../../../policies/strict.toml");

/// [`BUILTIN_DEFAULT_POLICY_TOML`] as JSON, converted when the crate is built: what
/// [`Policy::builtin_default`] parses (a third of the TOML parse's time).
const BUILTIN_DEFAULT_POLICY_JSON: &str = include_str!(concat!(env!("OUT_DIR"), "/strict.json"));

/// An isolation tier.
///
/// Ordered by strength for process runs: `B < C < A`. Tier A (WASM) exposes no host
/// system calls at all, so it is the strongest; it runs WASM modules and the interpreters
/// a policy maps to WASI builds, not arbitrary native programs.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema, PartialOrd, Ord,
)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// Direct spawn with rlimits, a rebuilt environment, landlock, seccomp and a cgroup.
    B,
    /// OS isolation (namespaces, sandbox-exec, Job Objects, containers).
    C,
    /// WASM on wasmtime with explicit capability grants.
    A,
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Tier::A => "a",
            Tier::B => "b",
            Tier::C => "c",
        })
    }
}

/// A protection layer that a host may be unable to provide.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema, PartialOrd, Ord,
)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    /// Landlock filesystem rules (Linux ≥ 5.13).
    Landlock,
    /// Landlock signal and abstract-unix-socket scoping (ABI ≥ 6).
    LandlockScopes,
    /// The seccomp system-call filter.
    Seccomp,
    /// A memory + pids (+ cpu) cgroup for the run; without it memory and process limits
    /// fall back to rlimits only.
    Cgroup,
    /// Read-only protected paths inside the workspace (only Tier C can enforce them).
    ProtectedPaths,
    /// `limits.disk_bytes` on the run's scratch space: Tier B's private `TMPDIR` and
    /// `HOME` (a size-limited tmpfs a root supervisor mounts), Tier C's `/tmp` and the
    /// overlay's upper layer. The workspace itself is bounded only per file
    /// (`limits.file_size_bytes`) in direct mode.
    Disk,
    /// The run's network restriction enforced by the operating system (`block_all`,
    /// `strict`). Windows Job Objects cannot filter network traffic: a Windows Tier C run
    /// with any mode but `allow_all` needs this layer listed as optional.
    NetworkIsolation,
    /// A filesystem boundary (writes only to the workspace and declared paths, reads only
    /// of system and declared paths). Windows Job Objects have none: a Windows Tier C run
    /// needs this layer listed as optional.
    FilesystemIsolation,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layer::Landlock => "landlock",
            Layer::LandlockScopes => "landlock_scopes",
            Layer::Seccomp => "seccomp",
            Layer::Cgroup => "cgroup",
            Layer::ProtectedPaths => "protected_paths",
            Layer::Disk => "disk",
            Layer::NetworkIsolation => "network_isolation",
            Layer::FilesystemIsolation => "filesystem_isolation",
        })
    }
}

/// A Tierbox policy document.
///
/// The locked-down defaults (from [`Policy::default`]):
/// - minimum tier B, `tier.preferred` = `auto`, only the `cgroup`, `protected_paths` and
///   `disk` layers may be missing on a host (and their absence is recorded);
/// - no executables allowed, interpreters denied, eval flags denied, command paths denied;
/// - environment rebuilt from `HOME USER LANG LC_ALL TERM TZ` and a fixed PATH;
/// - 60 s wall timeout (max 10 min), CPU time = wall timeout, 1 GiB memory, 128 processes,
///   256 open files, 1 GiB file size, 1 MiB output (truncate mode);
/// - no extra filesystem access; the git directory (`.git`) read-only, in nested repositories too
///   ([`crate::validate::DEFAULT_PROTECTED`]);
/// - egress `block_all`; redaction on; no audit log.
///
/// ```
/// use tierbox_policy::Policy;
///
/// let p = Policy::from_toml("version = 1\n[exec]\nallowed_executables = [\"git\"]\n").unwrap();
/// assert_eq!(p.exec.allowed_executables, ["git"]);
/// assert!(Policy::from_toml("version = 1\nallow_everything = true\n").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Format version; must be [`POLICY_VERSION`].
    pub version: u32,
    /// What this policy is for, in a sentence.
    #[serde(default)]
    pub description: String,
    /// Workspace root. The CLI's `--workspace` overrides it; default is the current directory.
    #[serde(default)]
    pub workspace_root: Option<PathBuf>,
    /// Let the filesystem root, system directories, the directories holding every user's
    /// files and home directories be the workspace root (default false: those are refused
    /// with `scope.workspace_refused`, since a run may write its whole workspace). Never a
    /// directory that holds or lies in one of Tierbox's own files (the state directory,
    /// the audit log, the signing key, the Tier A runtimes): nothing lifts that rule.
    #[serde(default)]
    pub danger_any_workspace_root: bool,
    /// How a run sees the workspace: directly, or through a copy-on-write overlay whose
    /// changes are reviewed, then applied or discarded (review mode).
    #[serde(default)]
    pub workspace: WorkspacePolicy,
    /// Tier requirements.
    #[serde(default)]
    pub tier: TierPolicy,
    /// Which programs may run.
    #[serde(default)]
    pub exec: ExecPolicy,
    /// The child's environment.
    #[serde(default)]
    pub env: EnvPolicy,
    /// Resource limits.
    #[serde(default)]
    pub limits: LimitsPolicy,
    /// Output capture.
    #[serde(default)]
    pub output: OutputPolicy,
    /// Filesystem access beyond the workspace.
    #[serde(default)]
    pub filesystem: FilesystemPolicy,
    /// Network egress.
    #[serde(default)]
    pub egress: EgressPolicy,
    /// Background processes.
    #[serde(default)]
    pub background: BackgroundPolicy,
    /// Output redaction.
    #[serde(default)]
    pub redaction: RedactionPolicy,
    /// Audit log and attestation signing.
    #[serde(default)]
    pub audit: AuditPolicy,
    /// Tier A (WASM): grants a guest may get, limits, interpreter builds.
    #[serde(default)]
    pub wasm: crate::wasm::WasmPolicy,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            version: POLICY_VERSION,
            description: String::new(),
            workspace_root: None,
            danger_any_workspace_root: false,
            workspace: WorkspacePolicy::default(),
            tier: TierPolicy::default(),
            exec: ExecPolicy::default(),
            env: EnvPolicy::default(),
            limits: LimitsPolicy::default(),
            output: OutputPolicy::default(),
            filesystem: FilesystemPolicy::default(),
            egress: EgressPolicy::default(),
            background: BackgroundPolicy::default(),
            redaction: RedactionPolicy::default(),
            audit: AuditPolicy::default(),
            wasm: crate::wasm::WasmPolicy::default(),
        }
    }
}

/// A policy document that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The document is larger than [`MAX_POLICY_BYTES`].
    #[error("policy is {bytes} bytes, more than the {max}-byte cap")]
    TooLarge { bytes: usize, max: usize },
    /// TOML or JSON syntax, an unknown key, or a wrong type.
    #[error("policy does not parse: {detail}")]
    Parse { detail: String },
    /// `version` is not one this build understands.
    #[error("policy version {found} is not supported (this build reads version {POLICY_VERSION})")]
    Version { found: u32 },
    /// A field has a value the policy format forbids.
    #[error("policy field {field} is invalid: {reason}")]
    Invalid { field: String, reason: String },
}

/// Longest `env.workspace_home`, in bytes: a path below the workspace, kept short so the
/// supervisor creates it in a few steps.
pub const MAX_WORKSPACE_HOME_BYTES: usize = 255;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod shipped_policies {
    use super::Policy;

    /// Every example policy under `policies/` parses, is checked, and has a description.
    #[test]
    fn every_shipped_policy_parses_and_is_described() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).expect("policies/ exists") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "toml") {
                let text = std::fs::read_to_string(&path).expect("readable");
                let policy =
                    Policy::from_toml(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                assert!(
                    !policy.description.is_empty(),
                    "{} has no description",
                    path.display()
                );
                seen += 1;
            }
        }
        assert!(seen >= 2, "expected the shipped policies, found {seen}");
    }
}
