//! The policy: versioned data that says what a run may do.
//!
//! Every default is the locked-down one, and every knob that widens access has a loud
//! name (`allow_interpreters`, `danger_allow_any_executable`, `egress.mode = "allow_all"`).
//! Unknown keys are rejected at every level, so a typo never silently keeps a default.
//! [`Policy::builtin_default`] is the policy `tierbox run` uses when none is given; it is
//! the same document as `policies/strict.toml`.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::hosts::{CanonicalHost, HostPattern};

mod workspace;
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

/// Egress mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EgressMode {
    /// No network at all (default).
    #[default]
    BlockAll,
    /// Hosts named in the request are checked against the allowlist before spawning;
    /// nothing is enforced at runtime. Advisory only.
    Preflight,
    /// Preflight plus runtime enforcement: only allowlisted hosts are reachable; an empty
    /// allowlist means no network at all.
    Strict,
    /// No restriction at all.
    AllowAll,
}

impl EgressMode {
    /// The name the policy and the wire use (`block_all`, `preflight`, `strict`,
    /// `allow_all`).
    ///
    /// ```
    /// use tierbox_policy::EgressMode;
    /// assert_eq!(EgressMode::BlockAll.as_str(), "block_all");
    /// for mode in [EgressMode::BlockAll, EgressMode::Preflight, EgressMode::Strict, EgressMode::AllowAll] {
    ///     assert_eq!(serde_json::to_value(mode).unwrap(), mode.as_str());
    /// }
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::BlockAll => "block_all",
            Self::Preflight => "preflight",
            Self::Strict => "strict",
            Self::AllowAll => "allow_all",
        }
    }
}

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

/// Tier requirements.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TierPolicy {
    /// The weakest tier a run may use. A host that cannot enforce it rejects the run with
    /// `tier.unavailable`; it never runs weaker.
    pub minimum: Tier,
    /// The tier of a request that leaves the choice open (`tier` omitted or `"auto"`):
    /// `auto` (the default) is the strongest this host can enforce; `b` or `c` is as if
    /// the request had named it (faster Tier B by default, say), and is rejected when the
    /// host cannot enforce it, never downgraded. At least `minimum`; never `a` (Tier A
    /// runs WASM modules, which a request asks for itself). A request that names a tier
    /// keeps it.
    pub preferred: crate::request::TierRequest,
    /// Layers that may be missing on this host without rejecting the run. Each missing
    /// layer is recorded in the outcome and the attestation.
    pub optional_layers: Vec<Layer>,
    /// Which Tier C backend runs programs. `native` is the operating system's own
    /// mechanism: Linux namespaces, macOS `sandbox-exec`, a Windows Job Object.
    pub backend: TierCBackend,
    /// The container backends (`backend = "docker"` or `"podman"`): image and user.
    pub container: ContainerPolicy,
    /// Tier C on Linux (native and bwrap backends) under a root supervisor: the host uid
    /// the sandbox's user (uid 1000 inside) is. Default: the workspace owner when that is
    /// not root, else the first id of root's range in `/etc/subuid` (and `/etc/subgid`)
    /// when the host sets one aside, else [`DEFAULT_SANDBOX_ID`]. The workspace (and any writable grant owned
    /// by someone else) is reached through an idmapped mount, so files the sandbox creates
    /// belong to their owner on the host and files it reads keep theirs. 0 is refused
    /// (see `danger_sandbox_as_supervisor`). An unprivileged supervisor can only map its
    /// own uid, and refuses any other value.
    pub sandbox_uid: Option<u32>,
    /// The host gid of the sandbox's group (gid 1000 inside); as `sandbox_uid`, defaulting
    /// to the workspace owner's group when the owner is not root.
    pub sandbox_gid: Option<u32>,
    /// Map the sandbox's user to the supervisor's own uid, as Tierbox once did: host uid 0
    /// under a root supervisor, which passes every check that looks only at the uid
    /// (global sysctls, root-owned files), whatever the other layers do. For hosts where
    /// idmapped mounts do not work (old kernels, filesystems without support).
    pub danger_sandbox_as_supervisor: bool,
}

/// The host uid and gid a Tier C sandbox runs as under a root supervisor when the
/// workspace belongs to root and the policy names none ([`TierPolicy::sandbox_uid`]): an
/// id no account or service uses (above the ranges systemd allocates to containers,
/// `0x80000`–`0x6fffffff`), so the sandbox owns nothing on the host and passes only the
/// permission checks for "others".
pub const DEFAULT_SANDBOX_ID: u32 = 0x7000_0000;

impl Default for TierPolicy {
    fn default() -> Self {
        Self {
            minimum: Tier::B,
            preferred: crate::request::TierRequest::Auto,
            optional_layers: vec![Layer::Cgroup, Layer::ProtectedPaths, Layer::Disk],
            backend: TierCBackend::Native,
            container: ContainerPolicy::default(),
            sandbox_uid: None,
            sandbox_gid: None,
            danger_sandbox_as_supervisor: false,
        }
    }
}

/// The Tier C backend.
///
/// How each value is read per operating system:
///
/// | value | Linux | macOS | Windows |
/// |---|---|---|---|
/// | `native` | namespace sandbox | `/usr/bin/sandbox-exec` with a generated profile | Job Object |
/// | `bwrap` | bubblewrap | rejected (`tier.unavailable`) | rejected |
/// | `docker`, `podman` | container engine | rejected: not in this build | rejected |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TierCBackend {
    /// The operating system's own mechanism. On Linux, Tierbox's namespace sandbox,
    /// cloned from the supervisor (the fastest).
    #[default]
    Native,
    /// `bwrap` (bubblewrap) with the same mounts, seccomp filter and cgroup. Fails closed
    /// when bwrap is missing or older than 0.5.0. Linux only.
    Bwrap,
    /// `docker run` of `tier.container.image`, with no network, a read-only root, no
    /// capabilities and only the workspace and declared paths mounted. Fails closed when
    /// the engine is unreachable.
    Docker,
    /// `podman run`, otherwise as `docker`.
    Podman,
}

impl TierCBackend {
    /// Whether this backend runs the program in a container engine.
    pub fn is_container(self) -> bool {
        matches!(self, Self::Docker | Self::Podman)
    }
}

impl std::fmt::Display for TierCBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Native => "native",
            Self::Bwrap => "bwrap",
            Self::Docker => "docker",
            Self::Podman => "podman",
        })
    }
}

/// The user a container runs as unless `tier.container.user` says otherwise: `nobody`
/// (65534), which owns nothing on a typical host.
pub const DEFAULT_CONTAINER_USER: &str = "65534:65534";

/// Longest accepted `tier.container.image` reference, in bytes (Docker's own limit on a
/// reference is 255 characters for the name plus tag and digest).
pub const MAX_CONTAINER_IMAGE_BYTES: usize = 512;

/// `[tier.container]`: what the `docker` and `podman` backends run.
///
/// ```
/// use tierbox_policy::Policy;
///
/// let p = Policy::from_toml(
///     "version = 1\n[tier]\nbackend = \"podman\"\n[tier.container]\nimage = \"localhost/tools:1\"\n",
/// )
/// .unwrap();
/// assert_eq!(p.tier.container.image.as_deref(), Some("localhost/tools:1"));
/// // A container backend without an image is refused when the policy loads.
/// assert!(Policy::from_toml("version = 1\n[tier]\nbackend = \"docker\"\n").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ContainerPolicy {
    /// The image to run (`name[:tag][@digest]`). Required with `backend = "docker"` or
    /// `"podman"`; never pulled by Tierbox itself (the engine's pull policy applies; pin a
    /// digest to be sure what runs).
    pub image: Option<String>,
    /// The user inside the container, `uid[:gid]` or a name; never root. Default
    /// [`DEFAULT_CONTAINER_USER`].
    pub user: Option<String>,
}

impl ContainerPolicy {
    /// The user the container runs as.
    pub fn effective_user(&self) -> &str {
        self.user.as_deref().unwrap_or(DEFAULT_CONTAINER_USER)
    }
}

impl TierPolicy {
    /// Why `preferred` is refused, or `None`.
    fn preferred_problem(&self) -> Option<String> {
        use crate::request::TierRequest;
        let tier = match self.preferred {
            TierRequest::Auto => return None,
            TierRequest::A => {
                return Some(
                    "\"a\" is not a preference: Tier A runs WASM modules, which a request asks for itself"
                        .to_owned(),
                );
            }
            TierRequest::B => Tier::B,
            TierRequest::C => Tier::C,
        };
        (tier < self.minimum).then(|| {
            format!(
                "\"{tier}\" is weaker than tier.minimum = \"{}\"",
                self.minimum
            )
        })
    }
}

/// Why a `tier.container` value is refused, or `None`.
fn container_problem(policy: &TierPolicy) -> Option<(&'static str, String)> {
    let c = &policy.container;
    let bad_token = |s: &str| {
        s.is_empty()
            || s.starts_with('-')
            || s.chars().any(|ch| ch.is_whitespace() || ch.is_control())
    };
    if let Some(image) = &c.image {
        if bad_token(image) || image.len() > MAX_CONTAINER_IMAGE_BYTES {
            return Some((
                "tier.container.image",
                format!(
                    "{image:?} is not an image reference (no spaces, control characters or leading '-'; at most {MAX_CONTAINER_IMAGE_BYTES} bytes)"
                ),
            ));
        }
    } else if policy.backend.is_container() {
        return Some((
            "tier.container.image",
            format!(
                "tier.backend = \"{}\" needs an image: set [tier.container] image = \"...\"",
                policy.backend
            ),
        ));
    }
    if let Some(user) = &c.user {
        let name = user.split(':').next().unwrap_or_default();
        if bad_token(user) || user.split(':').count() > 2 {
            return Some((
                "tier.container.user",
                format!("{user:?} is not uid[:gid] or a user name"),
            ));
        }
        if name == "root" || name.parse::<u64>() == Ok(0) {
            return Some((
                "tier.container.user",
                format!("{user:?} is root; containers run as a non-root user"),
            ));
        }
    }
    None
}

/// Which programs may run.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ExecPolicy {
    /// Bare executable names that may run (compared after stripping directories). `"*"`
    /// means any, and is accepted only with `danger_allow_any_executable = true`.
    pub allowed_executables: Vec<String>,
    /// Accept `"*"` in `allowed_executables`.
    pub danger_allow_any_executable: bool,
    /// Allow shells and language runtimes (bash, python, node, …). The kernel layers, not
    /// this check, are the boundary; see SECURITY.md.
    pub allow_interpreters: bool,
    /// Allow inline-code flags (`-c`, `-e`, `--eval`, …) for allowed interpreters.
    pub allow_eval: bool,
    /// Allow `command` to be an absolute path (still checked against the allowlist by name).
    pub allow_command_paths: bool,
}

/// The child's environment. It is rebuilt from this; nothing is inherited implicitly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct EnvPolicy {
    /// Names copied from the supervisor's environment when present.
    pub pass: Vec<String>,
    /// Fixed values (applied after `pass`, before the request's own `env`). A value that
    /// starts with `~/` is taken relative to the supervisor's `HOME`.
    pub set: BTreeMap<String, String>,
    /// PATH inside the sandbox; also where the executable is resolved.
    pub path: String,
    /// Names of supervisor variables whose values are secrets: they are redacted from
    /// output wherever they appear (they are not passed unless also listed in `pass`).
    pub sensitive: Vec<String>,
    /// A directory of the workspace (relative to it) that is the run's `HOME` instead of
    /// a private empty one, created by the supervisor when missing: what a run writes
    /// there (`git config --global`, tool caches, shell history) is found by the next run
    /// of the same workspace. **Costs**: every later run reads it, so one run can plant
    /// configuration a later run executes (git aliases, `core.pager`, `.bashrc`); it is
    /// part of the workspace the host sees (and `git add -A` adds). Not under `.git`;
    /// overlay runs keep a private `HOME`. None (the default): a private `HOME` per run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_home: Option<String>,
}

impl Default for EnvPolicy {
    fn default() -> Self {
        Self {
            pass: ["HOME", "USER", "LANG", "LC_ALL", "TERM", "TZ"]
                .map(String::from)
                .to_vec(),
            set: BTreeMap::new(),
            path: DEFAULT_SANDBOX_PATH.to_owned(),
            sensitive: Vec::new(),
            workspace_home: None,
        }
    }
}

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
    /// [`MAX_SPILL_KEEP_SECS`]; default [`DEFAULT_SPILL_KEEP_SECS`], a day). The next run
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

/// Filesystem access beyond the workspace. Paths may start with `~/` (the supervisor's
/// home). System paths (`/usr`, `/bin`, `/lib*`, `/etc`) are always readable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct FilesystemPolicy {
    /// Extra read-only paths (toolchains such as `~/.cargo`, `/opt/…`).
    pub read_only: Vec<String>,
    /// Extra writable paths (caches such as `~/.cache/pip`).
    pub writable: Vec<String>,
    /// Paths hidden even though a parent is readable (Tier C).
    pub deny_read: Vec<String>,
    /// Paths inside the workspace kept read-only, relative to the workspace root
    /// (enforced in Tier C, including symlinks and paths that do not exist yet).
    pub protected: Vec<String>,
    /// The sandbox's `/dev/shm` (POSIX shared memory and semaphores: Python's
    /// `multiprocessing`, Chromium): `private`, a tmpfs of the run's own in Tier C, and in
    /// Tier B under a root supervisor a directory of the run's private `/tmp`; `none`.
    /// Tier B under an unprivileged supervisor has no private one: listing `/dev/shm` in
    /// `writable` grants the host's there (shared with every process of the run's uid);
    /// wherever a private one exists that grant is served by it, so one policy runs
    /// `multiprocessing` in both tiers.
    pub dev_shm: DevShm,
    /// Most directory entries read while searching the workspace for nested git
    /// repositories before a run (and after it, for the repositories it made); default
    /// [`crate::validate::DEFAULT_REPO_SCAN_MAX_ENTRIES`], at most
    /// [`crate::validate::MAX_REPO_SCAN_MAX_ENTRIES`]. Bounds a launch's cost on a huge
    /// tree: a workspace with more is refused (`scope.protection_incomplete`), never run
    /// with part of its repositories unprotected.
    pub repo_scan_max_entries: u64,
    /// Most nested git repositories whose `.git` is kept read-only in one workspace;
    /// default [`crate::validate::DEFAULT_MAX_PROTECTED_REPOS`], at most
    /// [`crate::validate::MAX_MAX_PROTECTED_REPOS`]. Each costs mounts at launch; a
    /// workspace with more is refused (`scope.protection_incomplete`).
    pub max_protected_repos: u64,
}

/// The sandbox's `/dev/shm` ([`FilesystemPolicy::dev_shm`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DevShm {
    /// A tmpfs of the run's own (Tier C), sized by the memory limit.
    #[default]
    Private,
    /// None: `/dev/shm` is read-only and empty.
    None,
}

impl DevShm {
    /// Whether this is the default, for `skip_serializing_if`.
    pub fn is_default(&self) -> bool {
        *self == Self::Private
    }
}

impl Default for FilesystemPolicy {
    fn default() -> Self {
        Self {
            dev_shm: DevShm::Private,
            read_only: Vec::new(),
            writable: Vec::new(),
            deny_read: Vec::new(),
            protected: crate::validate::DEFAULT_PROTECTED
                .iter()
                .map(|p| (*p).to_owned())
                .collect(),
            repo_scan_max_entries: crate::validate::DEFAULT_REPO_SCAN_MAX_ENTRIES,
            max_protected_repos: crate::validate::DEFAULT_MAX_PROTECTED_REPOS,
        }
    }
}

/// Network egress.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct EgressPolicy {
    /// The mode; default `block_all`.
    pub mode: EgressMode,
    /// Allowlist: `host`, `*.suffix` (label boundary; a bare `*.com` is refused), with an
    /// optional `:port`; IP literals and CIDR blocks. In `strict` mode, the egress proxy
    /// dials an address in a special range (loopback, private, link-local, cloud metadata,
    /// multicast, …) only when an IP or CIDR entry here covers it, even for an allowed name.
    pub allow: Vec<String>,
    /// Fixed addresses for host names, used by the egress proxy instead of DNS (like
    /// `curl --resolve`): for registries on a private network without DNS, or to pin a
    /// name. Keys are host names (not addresses); at most [`MAX_EGRESS_RESOLVE`] entries
    /// of at most [`MAX_EGRESS_RESOLVE_ADDRS`] addresses each.
    pub resolve: BTreeMap<String, Vec<IpAddr>>,
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

/// A field's value refused by [`Policy::check`].
fn invalid(field: &str, reason: String) -> Result<(), PolicyError> {
    Err(PolicyError::Invalid {
        field: field.to_owned(),
        reason,
    })
}

impl Policy {
    /// The strict default policy (`policies/strict.toml`).
    pub fn builtin_default() -> Self {
        // The built-in document is checked by a unit test (the JSON form is the TOML's,
        // converted at build time); fall back to the in-code defaults (which are at least
        // as strict) if it were ever broken.
        Self::from_json(BUILTIN_DEFAULT_POLICY_JSON).unwrap_or_default()
    }

    /// Parses and checks a TOML policy.
    pub fn from_toml(text: &str) -> Result<Self, PolicyError> {
        if text.len() > MAX_POLICY_BYTES {
            return Err(PolicyError::TooLarge {
                bytes: text.len(),
                max: MAX_POLICY_BYTES,
            });
        }
        let policy: Policy = toml::from_str(text).map_err(|e| PolicyError::Parse {
            detail: e.to_string(),
        })?;
        policy.check()?;
        Ok(policy)
    }

    /// Parses and checks a JSON policy (same structure as TOML).
    pub fn from_json(text: &str) -> Result<Self, PolicyError> {
        if text.len() > MAX_POLICY_BYTES {
            return Err(PolicyError::TooLarge {
                bytes: text.len(),
                max: MAX_POLICY_BYTES,
            });
        }
        let policy: Policy =
            crate::json::from_slice(text.as_bytes()).map_err(|e| PolicyError::Parse {
                detail: e.to_string(),
            })?;
        policy.check()?;
        Ok(policy)
    }

    /// Checks the rules a well-formed document must also satisfy.
    pub fn check(&self) -> Result<(), PolicyError> {
        if self.version != POLICY_VERSION {
            return Err(PolicyError::Version {
                found: self.version,
            });
        }
        if let Err((field, reason)) = self.wasm.check() {
            return invalid(&field, reason);
        }
        self.check_dev_shm()?;
        self.check_exec()?;
        self.check_limits()?;
        self.check_tier()?;
        self.check_cpu_time_and_output()?;
        self.check_env()?;
        self.check_filesystem()?;
        self.check_egress()?;
        self.check_audit()?;
        self.check_background()
    }

    /// `filesystem.dev_shm = "none"` is not contradicted by a writable `/dev/shm`.
    fn check_dev_shm(&self) -> Result<(), PolicyError> {
        if self.filesystem.dev_shm == DevShm::None
            && self
                .filesystem
                .writable
                .iter()
                .any(|w| w.trim_end_matches('/') == "/dev/shm")
        {
            return invalid(
                "filesystem.dev_shm",
                "\"none\" while filesystem.writable lists /dev/shm: choose one".to_owned(),
            );
        }
        Ok(())
    }

    /// The allowlist: bounded, bare names, `*` only with its danger switch.
    fn check_exec(&self) -> Result<(), PolicyError> {
        let exec = &self.exec;
        if exec.allowed_executables.len() > MAX_ALLOWED_EXECUTABLES {
            return invalid(
                "exec.allowed_executables",
                format!(
                    "{} entries, more than {MAX_ALLOWED_EXECUTABLES}",
                    exec.allowed_executables.len()
                ),
            );
        }
        for name in &exec.allowed_executables {
            if name == "*" {
                if !exec.danger_allow_any_executable {
                    return invalid(
                        "exec.allowed_executables",
                        "\"*\" requires exec.danger_allow_any_executable = true".to_owned(),
                    );
                }
            } else if name.is_empty()
                || name.contains('/')
                || name.contains('\0')
                || name.len() > 255
            {
                return invalid(
                    "exec.allowed_executables",
                    format!("{name:?} is not a bare executable name"),
                );
            }
        }
        Ok(())
    }

    /// Limits: none zero, the timeouts ordered and under the hard cap.
    fn check_limits(&self) -> Result<(), PolicyError> {
        let l = &self.limits;
        for (field, value) in [
            ("limits.timeout_ms", l.timeout_ms),
            ("limits.max_timeout_ms", l.max_timeout_ms),
            ("limits.memory_bytes", l.memory_bytes),
            ("limits.max_processes", l.max_processes),
            ("limits.open_files", l.open_files),
            ("limits.file_size_bytes", l.file_size_bytes),
            ("limits.disk_bytes", l.disk_bytes),
            ("output.max_bytes", self.output.max_bytes),
            ("output.spill_keep_secs", self.output.spill_keep_secs),
            ("output.spill_total_bytes", self.output.spill_total_bytes),
        ] {
            if value == 0 {
                return invalid(field, "must be at least 1".to_owned());
            }
        }
        if l.max_timeout_ms > HARD_MAX_TIMEOUT_MS {
            return invalid(
                "limits.max_timeout_ms",
                format!("above the hard cap {HARD_MAX_TIMEOUT_MS}"),
            );
        }
        if l.timeout_ms > l.max_timeout_ms {
            return invalid(
                "limits.timeout_ms",
                format!(
                    "{} is above limits.max_timeout_ms {}",
                    l.timeout_ms, l.max_timeout_ms
                ),
            );
        }
        if l.cpus == Some(0) {
            return invalid("limits.cpus", "must be at least 1".to_owned());
        }
        if l.stdin_bytes > HARD_MAX_STDIN_BYTES {
            return invalid(
                "limits.stdin_bytes",
                format!(
                    "{} is above the hard cap {HARD_MAX_STDIN_BYTES}",
                    l.stdin_bytes
                ),
            );
        }
        if l.disk_bytes < MIN_DISK_BYTES {
            return invalid(
                "limits.disk_bytes",
                format!("{} is below the minimum {MIN_DISK_BYTES}", l.disk_bytes),
            );
        }
        let keep = self.workspace.keep_changes_for_secs;
        if keep == 0 || keep > MAX_KEEP_CHANGES_SECS {
            return invalid(
                "workspace.keep_changes_for_secs",
                format!("{keep} is not between 1 and {MAX_KEEP_CHANGES_SECS} seconds"),
            );
        }
        self.check_keep_caps()?;
        if self.workspace.mode == WorkspaceMode::Overlay
            && self.tier.preferred == crate::request::TierRequest::B
        {
            return invalid(
                "workspace.mode",
                "\"overlay\" needs tier c, and tier.preferred is \"b\": choose one".to_owned(),
            );
        }
        Ok(())
    }

    /// The caps on kept change sets: each within its bounds, a per-owner cap at most its
    /// total.
    fn check_keep_caps(&self) -> Result<(), PolicyError> {
        let w = &self.workspace;
        for (field, value, min, max, unit) in [
            (
                "workspace.keep_changes_total_bytes",
                w.keep_changes_total_bytes,
                MIN_KEEP_CHANGES_BYTES,
                MAX_KEEP_CHANGES_BYTES,
                "bytes",
            ),
            (
                "workspace.keep_changes_per_owner_bytes",
                w.keep_changes_per_owner_bytes,
                MIN_KEEP_CHANGES_BYTES,
                MAX_KEEP_CHANGES_BYTES,
                "bytes",
            ),
            (
                "workspace.keep_changes_total_entries",
                w.keep_changes_total_entries,
                MIN_KEEP_CHANGES_ENTRIES,
                MAX_KEEP_CHANGES_ENTRIES,
                "entries",
            ),
            (
                "workspace.keep_changes_per_owner_entries",
                w.keep_changes_per_owner_entries,
                MIN_KEEP_CHANGES_ENTRIES,
                MAX_KEEP_CHANGES_ENTRIES,
                "entries",
            ),
        ] {
            if !(min..=max).contains(&value) {
                return invalid(
                    field,
                    format!("{value} is not between {min} and {max} {unit}"),
                );
            }
        }
        for (field, owner, total, total_field) in [
            (
                "workspace.keep_changes_per_owner_bytes",
                w.keep_changes_per_owner_bytes,
                w.keep_changes_total_bytes,
                "keep_changes_total_bytes",
            ),
            (
                "workspace.keep_changes_per_owner_entries",
                w.keep_changes_per_owner_entries,
                w.keep_changes_total_entries,
                "keep_changes_total_entries",
            ),
        ] {
            if owner > total {
                return invalid(
                    field,
                    format!("{owner} is above workspace.{total_field} {total}"),
                );
            }
        }
        Ok(())
    }

    /// The tier section: preference, container settings, the sandbox's ids.
    fn check_tier(&self) -> Result<(), PolicyError> {
        if let Some(reason) = self.tier.preferred_problem() {
            return invalid("tier.preferred", reason);
        }
        if let Some((field, reason)) = container_problem(&self.tier) {
            return invalid(field, reason);
        }
        for (field, id) in [
            ("tier.sandbox_uid", self.tier.sandbox_uid),
            ("tier.sandbox_gid", self.tier.sandbox_gid),
        ] {
            match id {
                Some(0) => {
                    return invalid(
                        field,
                        "0 is host root: a sandbox never runs as it (danger_sandbox_as_supervisor maps the sandbox to the supervisor's own uid, if that is really meant)".to_owned(),
                    );
                }
                Some(u32::MAX) => return invalid(field, "4294967295 is not an id".to_owned()),
                _ => {}
            }
        }
        Ok(())
    }

    /// The CPU-time limit and the output cap.
    fn check_cpu_time_and_output(&self) -> Result<(), PolicyError> {
        let l = &self.limits;
        if l.cpu_time_ms == Some(0) {
            return invalid("limits.cpu_time_ms", "must be at least 1".to_owned());
        }
        if self.output.max_bytes > HARD_MAX_OUTPUT_BYTES {
            return invalid(
                "output.max_bytes",
                format!("above the hard cap {HARD_MAX_OUTPUT_BYTES}"),
            );
        }
        if self.output.spill_keep_secs > MAX_SPILL_KEEP_SECS {
            return invalid(
                "output.spill_keep_secs",
                format!(
                    "{} is above the hard cap {MAX_SPILL_KEEP_SECS} (30 days)",
                    self.output.spill_keep_secs
                ),
            );
        }
        Ok(())
    }

    /// `env.path` is absolute directories or directories under the supervisor's home
    /// (`~/…` or `$HOME/…`, expanded when a request is validated, as the filesystem grants'
    /// `~/` is); variable names are names.
    fn check_env(&self) -> Result<(), PolicyError> {
        let portable = |d: &str| d.starts_with('/') || crate::validate::home_relative(d).is_some();
        if self.env.path.is_empty() || !self.env.path.split(':').all(portable) {
            return invalid(
                "env.path",
                format!(
                    "{:?} must be a list of absolute directories or directories under ~/ ($HOME/)",
                    self.env.path
                ),
            );
        }
        for name in self.env.pass.iter().chain(self.env.set.keys()) {
            if name.is_empty() || name.contains('=') || name.contains('\0') {
                return invalid("env", format!("{name:?} is not a variable name"));
            }
        }
        if let Some(home) = &self.env.workspace_home {
            let parts: Vec<&str> = home.split('/').collect();
            let plain = |c: &&str| !c.is_empty() && *c != "." && *c != ".." && !c.contains('\0');
            if home.len() > MAX_WORKSPACE_HOME_BYTES
                || !parts.iter().all(plain)
                || parts.contains(&".git")
            {
                return invalid(
                    "env.workspace_home",
                    format!(
                        "{home:?} must be a directory inside the workspace, relative to it (at most {MAX_WORKSPACE_HOME_BYTES} bytes, no `.`, `..` or empty components), outside every `.git`"
                    ),
                );
            }
        }
        Ok(())
    }

    /// Filesystem paths: absolute or `~/`; protected paths stay inside the workspace.
    fn check_filesystem(&self) -> Result<(), PolicyError> {
        for (field, list) in [
            ("filesystem.read_only", &self.filesystem.read_only),
            ("filesystem.writable", &self.filesystem.writable),
            ("filesystem.deny_read", &self.filesystem.deny_read),
        ] {
            for p in list {
                if !(p.starts_with('/') || p.starts_with("~/")) {
                    return invalid(field, format!("{p:?} must be absolute or start with ~/"));
                }
            }
        }
        for p in &self.filesystem.protected {
            if p.starts_with('/') || p.split('/').any(|c| c == "..") || p.is_empty() {
                return invalid(
                    "filesystem.protected",
                    format!("{p:?} must be relative to the workspace and stay inside it"),
                );
            }
        }
        for (field, value, max) in [
            (
                "filesystem.repo_scan_max_entries",
                self.filesystem.repo_scan_max_entries,
                crate::validate::MAX_REPO_SCAN_MAX_ENTRIES,
            ),
            (
                "filesystem.max_protected_repos",
                self.filesystem.max_protected_repos,
                crate::validate::MAX_MAX_PROTECTED_REPOS,
            ),
        ] {
            if value == 0 || value > max {
                return invalid(field, format!("{value} is not between 1 and {max}"));
            }
        }
        Ok(())
    }

    /// The allowlist's patterns and the pinned resolutions.
    fn check_egress(&self) -> Result<(), PolicyError> {
        for entry in &self.egress.allow {
            if let Err(reason) = HostPattern::parse(entry) {
                return invalid("egress.allow", format!("{entry:?}: {reason}"));
            }
        }
        if self.egress.resolve.len() > MAX_EGRESS_RESOLVE {
            return invalid(
                "egress.resolve",
                format!(
                    "{} entries, the limit is {MAX_EGRESS_RESOLVE}",
                    self.egress.resolve.len()
                ),
            );
        }
        for (name, addrs) in &self.egress.resolve {
            match CanonicalHost::parse(name) {
                Ok(CanonicalHost::Name(canonical)) if canonical == *name => {}
                Ok(CanonicalHost::Name(canonical)) => {
                    return invalid(
                        "egress.resolve",
                        format!("{name:?} must be written in canonical form: {canonical:?}"),
                    );
                }
                Ok(CanonicalHost::Ip(_)) => {
                    return invalid(
                        "egress.resolve",
                        format!("{name:?} is an address; keys are host names"),
                    );
                }
                Err(e) => return invalid("egress.resolve", format!("{name:?}: {e}")),
            }
            if addrs.is_empty() || addrs.len() > MAX_EGRESS_RESOLVE_ADDRS {
                return invalid(
                    "egress.resolve",
                    format!(
                        "{name:?} has {} addresses; give 1 to {MAX_EGRESS_RESOLVE_ADDRS}",
                        addrs.len()
                    ),
                );
            }
        }
        Ok(())
    }

    /// Audit paths are absolute.
    fn check_audit(&self) -> Result<(), PolicyError> {
        for (field, path) in [
            ("audit.log", &self.audit.log),
            ("audit.signing_key", &self.audit.signing_key),
        ] {
            if let Some(p) = path
                && !p.is_absolute()
            {
                return invalid(
                    field,
                    format!("{} is relative; give an absolute path", p.display()),
                );
            }
        }
        Ok(())
    }

    /// Background lifetimes and spill under their hard maxima.
    fn check_background(&self) -> Result<(), PolicyError> {
        let b = &self.background;
        if b.default_lifetime_ms > b.max_lifetime_ms {
            return invalid(
                "background.default_lifetime_ms",
                "above background.max_lifetime_ms".to_owned(),
            );
        }
        if b.max_lifetime_ms > MAX_BACKGROUND_LIFETIME_MS {
            return invalid(
                "background.max_lifetime_ms",
                format!(
                    "{} is above the hard maximum of {MAX_BACKGROUND_LIFETIME_MS} ms (30 min)",
                    b.max_lifetime_ms
                ),
            );
        }
        if b.spill_bytes > MAX_BACKGROUND_SPILL_BYTES {
            return invalid(
                "background.spill_bytes",
                format!(
                    "{} is above the hard maximum of {MAX_BACKGROUND_SPILL_BYTES} bytes",
                    b.spill_bytes
                ),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caps_on_kept_change_sets_are_bounded_and_per_owner_is_at_most_the_total() {
        let base = "version = 1\n[workspace]\n";
        for (doc, field) in [
            (
                "keep_changes_total_bytes = 1024\n",
                "keep_changes_total_bytes",
            ),
            (
                "keep_changes_total_bytes = 2199023255553\n",
                "keep_changes_total_bytes",
            ),
            (
                "keep_changes_per_owner_entries = 15\n",
                "keep_changes_per_owner_entries",
            ),
            (
                "keep_changes_total_entries = 10000001\n",
                "keep_changes_total_entries",
            ),
            (
                "keep_changes_total_bytes = 2097152\nkeep_changes_per_owner_bytes = 4194304\n",
                "keep_changes_per_owner_bytes",
            ),
            (
                "keep_changes_total_entries = 100\n",
                "keep_changes_per_owner_entries",
            ),
        ] {
            let err = Policy::from_toml(&format!("{base}{doc}")).unwrap_err();
            assert!(
                matches!(&err, PolicyError::Invalid { field: f, .. } if f.ends_with(field)),
                "{doc}: {err}"
            );
        }
        let p = Policy::from_toml(&format!(
            "{base}keep_changes_total_entries = 100\nkeep_changes_per_owner_entries = 100\n"
        ))
        .unwrap();
        assert_eq!(p.workspace.keep_caps().per_owner_entries, 100);
        assert_eq!(Policy::default().workspace.keep_caps(), KeepCaps::default());
        assert_eq!(
            KeepCaps::default().total_bytes,
            DEFAULT_KEEP_CHANGES_TOTAL_BYTES
        );
    }

    #[test]
    fn spill_lifetime_and_cap_are_bounded_and_have_documented_defaults() {
        let base = "version = 1\n[output]\nspill = true\n";
        for (doc, field) in [
            ("spill_keep_secs = 0\n", "output.spill_keep_secs"),
            (
                &format!("spill_keep_secs = {}\n", MAX_SPILL_KEEP_SECS + 1) as &str,
                "output.spill_keep_secs",
            ),
            ("spill_total_bytes = 0\n", "output.spill_total_bytes"),
        ] {
            let err = Policy::from_toml(&format!("{base}{doc}")).unwrap_err();
            assert!(
                matches!(&err, PolicyError::Invalid { field: f, .. } if f == field),
                "{doc}: {err}"
            );
        }
        let p = Policy::from_toml(&format!(
            "{base}spill_keep_secs = 60\nspill_total_bytes = 1048576\n"
        ))
        .unwrap();
        assert_eq!(
            (p.output.spill_keep_secs, p.output.spill_total_bytes),
            (60, 1 << 20)
        );
        let d = Policy::default().output;
        assert_eq!(
            (d.spill_keep_secs, d.spill_total_bytes),
            (DEFAULT_SPILL_KEEP_SECS, DEFAULT_SPILL_TOTAL_BYTES)
        );
    }

    #[test]
    fn background_lifetime_and_spill_have_hard_ceilings() {
        let base = "version = 1\n[background]\n";
        for (field, value) in [
            ("max_lifetime_ms", MAX_BACKGROUND_LIFETIME_MS + 1),
            ("spill_bytes", MAX_BACKGROUND_SPILL_BYTES + 1),
        ] {
            let err = Policy::from_toml(&format!("{base}{field} = {value}\n")).unwrap_err();
            assert!(err.to_string().contains(field), "{err}");
        }
        let p = Policy::from_toml(&format!("{base}spill_bytes = 1048576\n")).unwrap();
        assert_eq!(p.background.spill_bytes, 1 << 20);
    }

    #[test]
    fn builtin_default_parses_and_is_strict() {
        let p = Policy::from_toml(BUILTIN_DEFAULT_POLICY_TOML).expect("strict.toml parses");
        assert_eq!(p.tier.minimum, Tier::B);
        assert_eq!(p.egress.mode, EgressMode::BlockAll);
        assert!(!p.exec.allow_interpreters);
        assert!(!p.exec.danger_allow_any_executable);
        assert!(p.redaction.enabled);
        // What a process actually starts from is the JSON form made at build time.
        assert_eq!(
            Policy::from_json(BUILTIN_DEFAULT_POLICY_JSON),
            Ok(p.clone())
        );
        assert_eq!(Policy::builtin_default(), p);
    }

    #[test]
    fn unknown_keys_are_rejected_at_every_level() {
        for doc in [
            "version = 1\nbogus = 1\n",
            "version = 1\n[exec]\nallow_interpreter = true\n",
            "version = 1\n[limits]\nmemory = 5\n",
            "version = 1\n[egress]\nmodes = \"strict\"\n",
        ] {
            assert!(
                matches!(Policy::from_toml(doc), Err(PolicyError::Parse { .. })),
                "{doc}"
            );
        }
    }

    #[test]
    fn star_requires_the_danger_flag() {
        let doc = "version = 1\n[exec]\nallowed_executables = [\"*\"]\n";
        assert!(matches!(
            Policy::from_toml(doc),
            Err(PolicyError::Invalid { .. })
        ));
        let doc = "version = 1\n[exec]\nallowed_executables = [\"*\"]\ndanger_allow_any_executable = true\n";
        assert!(Policy::from_toml(doc).is_ok());
    }

    #[test]
    fn audit_paths_must_be_absolute() {
        let doc = "version = 1\n[audit]\nlog = \"/var/log/tierbox.jsonl\"\n";
        assert!(Policy::from_toml(doc).is_ok());
        let doc = "version = 1\n[audit]\nlog = \"audit.jsonl\"\n";
        assert!(
            matches!(Policy::from_toml(doc), Err(PolicyError::Invalid { field, .. }) if field == "audit.log")
        );
        let doc = "version = 1\n[audit]\nsigning_key = \"key.pem\"\n";
        assert!(
            matches!(Policy::from_toml(doc), Err(PolicyError::Invalid { field, .. }) if field == "audit.signing_key")
        );
        assert!(Policy::from_toml("version = 1\n[audit]\n").is_ok());
    }

    #[test]
    fn wrong_version_is_rejected() {
        assert!(matches!(
            Policy::from_toml("version = 2\n"),
            Err(PolicyError::Version { found: 2 })
        ));
    }

    #[test]
    fn defaults_are_locked_down() {
        let p = Policy::default();
        assert!(p.exec.allowed_executables.is_empty());
        assert_eq!(p.egress.mode, EgressMode::BlockAll);
        assert_eq!(p.limits.timeout_ms, 60_000);
        assert_eq!(p.output.max_bytes, 1 << 20);
    }

    #[test]
    fn container_backends_need_an_image_and_a_non_root_user() {
        let doc = |backend: &str, container: &str| {
            format!("version = 1\n[tier]\nbackend = \"{backend}\"\n[tier.container]\n{container}")
        };
        for backend in ["docker", "podman"] {
            let err = Policy::from_toml(&doc(backend, "")).unwrap_err();
            assert!(
                matches!(&err, PolicyError::Invalid { field, reason } if field == "tier.container.image" && reason.contains(backend)),
                "{err}"
            );
            let p = Policy::from_toml(&doc(backend, "image = \"localhost/tools:1\"\n")).unwrap();
            assert_eq!(p.tier.container.effective_user(), DEFAULT_CONTAINER_USER);
        }
        for bad_user in ["root", "0", "0:0", "-u", "a b", "1:2:3"] {
            let text = doc("docker", &format!("image = \"x\"\nuser = \"{bad_user}\"\n"));
            assert!(
                matches!(Policy::from_toml(&text), Err(PolicyError::Invalid { field, .. }) if field == "tier.container.user"),
                "{bad_user}"
            );
        }
        for bad_image in ["", "--privileged", "a b", "x\ny"] {
            let text = doc("podman", &format!("image = {bad_image:?}\n"));
            assert!(
                matches!(Policy::from_toml(&text), Err(PolicyError::Invalid { field, .. }) if field == "tier.container.image"),
                "{bad_image:?}"
            );
        }
        assert!(Policy::from_toml(&doc("docker", "image = \"x\"\nuser = \"1000:1000\"\n")).is_ok());
        assert!(Policy::from_toml(&doc("docker", "image = \"x\"\nprivileged = true\n")).is_err());
        assert!(Policy::from_toml("version = 1\n[limits]\ncpus = 0\n").is_err());
        // Native and bwrap need no image.
        assert!(Policy::from_toml("version = 1\n[tier]\nbackend = \"bwrap\"\n").is_ok());
    }

    /// A JSON policy is the same document as its TOML form, checked by the same rules:
    /// unknown keys, out-of-range values and oversized documents are refused alike.
    #[test]
    fn json_policies_are_parsed_and_checked_like_toml() {
        let toml = "version = 1\n[exec]\nallowed_executables = [\"git\"]\n\
                    [limits]\ncpus = 2\nmemory_bytes = 268435456\n\
                    [egress]\nmode = \"strict\"\nallow = [\"*.crates.io:443\"]\n";
        let json = r#"{"version": 1, "exec": {"allowed_executables": ["git"]},
            "limits": {"cpus": 2, "memory_bytes": 268435456},
            "egress": {"mode": "strict", "allow": ["*.crates.io:443"]}}"#;
        let from_json = Policy::from_json(json).unwrap();
        assert_eq!(from_json, Policy::from_toml(toml).unwrap());
        assert_eq!(from_json.limits.cpus, Some(2));

        assert!(matches!(
            Policy::from_json(r#"{"version": 1, "bogus": 1}"#),
            Err(PolicyError::Parse { .. })
        ));
        assert!(matches!(
            Policy::from_json(r#"{"version": 1, "limits": {"cpus": 0}}"#),
            Err(PolicyError::Invalid { field, .. }) if field == "limits.cpus"
        ));
        assert!(matches!(
            Policy::from_json(r#"{"version": 2}"#),
            Err(PolicyError::Version { found: 2 })
        ));
        let padded = format!("{{\"version\": 1{}}}", " ".repeat(MAX_POLICY_BYTES));
        assert!(matches!(
            Policy::from_json(&padded),
            Err(PolicyError::TooLarge { .. })
        ));
    }

    #[test]
    fn tiers_order_by_strength() {
        assert!(Tier::B < Tier::C && Tier::C < Tier::A);
    }

    #[test]
    fn a_workspace_home_stays_inside_the_workspace_and_outside_git() {
        let with = |home: &str| {
            let mut p = Policy::default();
            p.env.workspace_home = Some(home.to_owned());
            p.check()
        };
        assert!(with(".agent/home").is_ok());
        for bad in [
            "/abs",
            "../up",
            "a/../b",
            "",
            "a//b",
            "./a",
            ".git",
            "sub/.git/x",
            "a/",
        ] {
            let err = with(bad).unwrap_err();
            assert!(
                err.to_string().contains("env.workspace_home"),
                "{bad:?}: {err}"
            );
        }
        assert!(with(&"a".repeat(MAX_WORKSPACE_HOME_BYTES + 1)).is_err());
    }
}

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
