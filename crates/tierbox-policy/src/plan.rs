//! The Plan: the inert, fully resolved result of validation.
//!
//! Everything a backend needs to carry out a run, and nothing it has to decide: the
//! argv exactly as it will be executed, the complete environment, canonical paths, the
//! limits and the network mode. Backends never make policy decisions; they apply a Plan
//! and report what they enforced. The attestation hashes the Plan, so it records what was
//! applied, not what was asked.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::hosts::HostPattern;
use crate::policy::{EgressMode, KeepCaps, Layer, QuotaMode, Tier, WorkspaceMode};
use crate::request::{Lifetime, TierRequest};

/// A validated, resolved run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Absolute path of the program, resolved in the sandbox PATH (never the workspace).
    pub program: PathBuf,
    /// argv as executed: `argv[0]` is the command as requested, the rest the request's
    /// arguments, byte for byte.
    pub argv: Vec<String>,
    /// The complete environment of the child, sorted by name. Nothing else is inherited.
    pub env: Vec<(String, String)>,
    /// Canonical working directory, inside `workspace`.
    pub cwd: PathBuf,
    /// Canonical workspace root.
    pub workspace: PathBuf,
    /// How the sandbox sees the workspace: directly, or through a copy-on-write overlay
    /// whose upper layer (at most `limits.disk_bytes`) holds the run's changes.
    #[serde(default, skip_serializing_if = "WorkspaceMode::is_direct")]
    pub workspace_mode: WorkspaceMode,
    /// Overlay mode: how long the run's change set is kept for review, in seconds
    /// (`workspace.keep_changes_for_secs`); `None` in direct mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_changes_for_secs: Option<u64>,
    /// Overlay mode: the caps on kept change sets the run's set is kept under
    /// (`workspace.keep_changes_total_*`, `keep_changes_per_owner_*`); `None` in direct
    /// mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_changes_caps: Option<KeepCaps>,
    /// Filesystem view beyond the workspace.
    pub filesystem: FsPlan,
    /// Network.
    pub network: NetworkPlan,
    /// Resource limits.
    pub limits: LimitsPlan,
    /// Output capture.
    pub output: OutputPlan,
    /// Data for stdin; `None` means `/dev/null`. With [`Plan::stdin_streamed`] it is
    /// `Some` (a pipe) and empty: the bytes are the stream's.
    #[serde(with = "opt_bytes")]
    pub stdin: Option<Vec<u8>>,
    /// The supervisor forwards a stream the caller gives with the run (not part of the
    /// plan) to the program's stdin as it arrives, up to `limits.stdin_bytes`; the outcome
    /// reports how many bytes reached the program and their digest.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stdin_streamed: bool,
    /// Tier requirements.
    pub tier: TierPlan,
    /// Redaction.
    pub redaction: RedactionPlan,
    /// Background execution, when requested.
    pub background: Option<BackgroundPlan>,
}

/// Filesystem view. All paths are absolute; `~` is already expanded.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FsPlan {
    /// System paths readable by every run (`/usr`, `/bin`, `/lib*`, `/etc`, …) that exist.
    /// The three system lists are shared with the host's cached walk
    /// ([`crate::validate::system_paths`]): a plan does not copy them.
    pub system_read_only: Arc<[PathBuf]>,
    /// The system roots `system_read_only` was expanded from. Mount-based tiers bind each
    /// whole and cover [`FsPlan::system_hidden`] (a handful of mounts instead of one per
    /// entry); empty means "bind `system_read_only` entry by entry".
    #[serde(default)]
    pub system_roots: Arc<[PathBuf]>,
    /// Host secrets under `system_roots` (outermost entries only) that `system_read_only`
    /// leaves out. Invariant: the entries under `system_roots` minus these are exactly what
    /// `system_read_only` grants (before `deny_read` is carved out).
    #[serde(default)]
    pub system_hidden: Arc<[PathBuf]>,
    /// The policy's extra read-only paths that exist, with `deny_read` carved out (each
    /// grant that contains a denied path replaced by its entries, recursively): what a
    /// tier that can only grant (landlock, Tier B) allows.
    pub read_only: Vec<PathBuf>,
    /// The policy's extra writable paths that exist, `deny_read` carved out as in
    /// [`FsPlan::read_only`].
    pub writable: Vec<PathBuf>,
    /// The policy's read-only grants whole (canonical, existing): what a mount-based tier
    /// binds, covering the `deny_read` paths inside afterwards. Empty means "the same as
    /// [`FsPlan::read_only`]" (hand-built Plans); see [`FsPlan::read_only_binds`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_only_roots: Vec<PathBuf>,
    /// The policy's writable grants whole; see [`FsPlan::writable_binds`]. Binding these
    /// whole is what keeps a new file at the top of a grant that contains a denied path on
    /// the host: carved into its entries, the grant's own directory would be the
    /// sandbox's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writable_roots: Vec<PathBuf>,
    /// Paths hidden from the run (Tier C).
    pub deny_read: Vec<PathBuf>,
    /// Absolute paths inside the workspace kept read-only (Tier C); they need not exist.
    pub protected: Vec<PathBuf>,
    /// The sandbox's `/dev/shm` (Tier C): a private tmpfs, or none.
    #[serde(default, skip_serializing_if = "crate::policy::DevShm::is_default")]
    pub dev_shm: crate::policy::DevShm,
    /// The run gets a private, empty, writable `HOME` (the supervisor's home is not
    /// granted by the policy, so passing it would only make tools fail on it).
    pub private_home: bool,
    /// The run's `HOME` inside the workspace (`env.workspace_home`), which the supervisor
    /// creates before the launch when it is missing; `HOME` in the environment names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_home: Option<PathBuf>,
    /// The repositories (directories holding `.git`) found in the workspace at launch,
    /// whose git redirect surface `protected` covers; a repository found after the run
    /// and not here was created by it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub git_repos: Vec<PathBuf>,
    /// The limits the search for [`FsPlan::git_repos`] ran under, for the search after
    /// the run (`filesystem.repo_scan_max_entries`, `filesystem.max_protected_repos`).
    #[serde(
        default,
        skip_serializing_if = "crate::validate::ScanLimits::is_default"
    )]
    pub repo_scan: crate::validate::ScanLimits,
    /// The arguments the argument check accepted only because they name a path in the
    /// run's own `/tmp` ([`crate::validate::SCRATCH_ROOTS`]), which no grant covers: a
    /// launch that cannot give the run a private `/tmp` refuses them
    /// ([`crate::Rejection::PathNeedsPrivateTmp`]) rather than let them meet the host's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scratch_args: Vec<ScratchArg>,
}

/// An argument naming a path in the run's private `/tmp` (see [`FsPlan::scratch_args`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScratchArg {
    /// Its index in the request's `args`.
    pub arg_index: usize,
    /// The argument as given.
    pub arg: String,
    /// The path it names, as the run names it.
    pub resolved: PathBuf,
}

/// The sandbox's shared-memory directory. A grant of exactly this path is served by the
/// sandbox's own (see [`FsPlan::dev_shm`]) in a mount-based tier, never by the host's.
pub const DEV_SHM: &str = "/dev/shm";

/// Device files every run has without a grant: Tier C makes them in its own `/dev`, Tier
/// B's landlock rules always allow them (pseudo-terminals only to a run that does not
/// keep uid 0). A `filesystem` grant of one is satisfied as it is and dropped from the
/// plan; every other path in `/dev` is refused (`scope.grant_refused`).
pub const PROVIDED_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/ptmx",
    "/dev/pts",
    // Where `/dev/ptmx` is a symlink (containers), it canonicalises to this.
    "/dev/pts/ptmx",
];

impl FsPlan {
    /// Whether a mount-based tier serves `grant` itself rather than binding the host's:
    /// `/dev/shm`, which it provides privately per run.
    ///
    /// ```
    /// use std::path::Path;
    /// use tierbox_policy::plan::FsPlan;
    /// assert!(FsPlan::sandbox_provides(Path::new("/dev/shm")));
    /// assert!(!FsPlan::sandbox_provides(Path::new("/dev/shm/x")));
    /// ```
    pub fn sandbox_provides(grant: &Path) -> bool {
        grant == Path::new(DEV_SHM)
    }

    /// The read-only grants a mount-based tier binds: [`FsPlan::read_only_roots`] whole,
    /// else [`FsPlan::read_only`]; `deny_read` paths inside are covered afterwards.
    pub fn read_only_binds(&self) -> &[PathBuf] {
        if self.read_only_roots.is_empty() {
            &self.read_only
        } else {
            &self.read_only_roots
        }
    }

    /// The writable grants a mount-based tier binds: [`FsPlan::writable_roots`] whole,
    /// else [`FsPlan::writable`]; `deny_read` paths inside are covered afterwards.
    ///
    /// ```
    /// use std::path::PathBuf;
    /// let mut fs = tierbox_policy::plan::FsPlan::default();
    /// fs.writable = vec![PathBuf::from("/cache/a"), PathBuf::from("/cache/b")];
    /// assert_eq!(fs.writable_binds(), fs.writable.as_slice());
    /// fs.writable_roots = vec![PathBuf::from("/cache")];
    /// assert_eq!(fs.writable_binds(), [PathBuf::from("/cache")]);
    /// ```
    pub fn writable_binds(&self) -> &[PathBuf] {
        if self.writable_roots.is_empty() {
            &self.writable
        } else {
            &self.writable_roots
        }
    }

    /// The system entries a mount-based tier binds: [`FsPlan::system_roots`] whole when
    /// present (their secrets then covered, see [`FsPlan::system_covers`]), else
    /// [`FsPlan::system_read_only`] entry by entry.
    ///
    /// ```
    /// use std::path::PathBuf;
    /// let mut fs = tierbox_policy::plan::FsPlan::default();
    /// fs.system_read_only = [PathBuf::from("/etc/passwd"), PathBuf::from("/usr")].into();
    /// assert_eq!(fs.system_binds(), &*fs.system_read_only);
    /// fs.system_roots = [PathBuf::from("/etc"), PathBuf::from("/usr")].into();
    /// fs.system_hidden = [PathBuf::from("/etc/shadow")].into();
    /// assert_eq!(fs.system_binds(), &*fs.system_roots);
    /// assert_eq!(fs.system_covers(), &*fs.system_hidden);
    /// ```
    pub fn system_binds(&self) -> &[PathBuf] {
        if self.system_roots.is_empty() {
            &self.system_read_only
        } else {
            &self.system_roots
        }
    }

    /// What a mount-based tier must cover after binding [`FsPlan::system_binds`]: the
    /// hidden host secrets when the roots are bound whole, nothing otherwise.
    pub fn system_covers(&self) -> &[PathBuf] {
        if self.system_roots.is_empty() {
            &[]
        } else {
            &self.system_hidden
        }
    }
}

/// Network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkPlan {
    /// The egress mode.
    pub mode: EgressMode,
    /// The allowlist, parsed.
    pub allow: Vec<HostPattern>,
    /// Hosts found in the request (arguments and `requested_egress_hosts`) that preflight
    /// checked.
    pub preflight_hosts: Vec<String>,
    /// The policy's fixed addresses for host names (`egress.resolve`), used by the egress
    /// proxy instead of DNS.
    pub resolve: BTreeMap<String, Vec<IpAddr>>,
    /// The hosts whose TLS the egress proxy terminates (`egress.hosts` and the hosts of
    /// `egress.credentials`), canonical, with their request rules and credentials.
    #[serde(default)]
    pub terminated: BTreeMap<String, TerminatedHost>,
    /// The policy's extra trust anchors for those hosts' upstreams (PEM files).
    #[serde(default)]
    pub upstream_roots: Vec<std::path::PathBuf>,
    /// The ports this run publishes on the host's loopback (the request's `publish`,
    /// each in `egress.publish`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub publish: Vec<crate::reach::PublishedPort>,
    /// The host loopback ports the program may connect to (`egress.host_ports`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_ports: Vec<u16>,
    /// The host unix sockets the program may connect to (`egress.unix_sockets`),
    /// resolved on this host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unix_sockets: Vec<crate::unix_sockets::UnixSocketGrant>,
}

/// A host whose TLS the proxy terminates, as the plan carries it: never a secret's value,
/// only where the supervisor reads it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TerminatedHost {
    /// Its request rules (`METHOD /path`); empty: every request.
    pub allow: Vec<String>,
    /// Its credentials.
    pub credentials: Vec<crate::policy::CredentialPolicy>,
}

impl NetworkPlan {
    /// The hosts the proxy terminates with their rules, from `egress`.
    pub fn terminated_from(
        egress: &crate::policy::EgressPolicy,
    ) -> BTreeMap<String, TerminatedHost> {
        let mut out: BTreeMap<String, TerminatedHost> = egress
            .hosts
            .iter()
            .map(|(host, rules)| {
                let t = TerminatedHost {
                    allow: rules.allow.clone(),
                    credentials: Vec::new(),
                };
                (host.clone(), t)
            })
            .collect();
        for c in &egress.credentials {
            out.entry(c.host.clone())
                .or_default()
                .credentials
                .push(c.clone());
        }
        out
    }

    /// Whether the run has credentials injected at the proxy.
    pub fn has_credentials(&self) -> bool {
        self.terminated.values().any(|t| !t.credentials.is_empty())
    }

    /// Whether this run needs the egress proxy: `strict` with a non-empty allowlist
    /// (`strict` with an empty one means no network at all).
    pub fn needs_proxy(&self) -> bool {
        self.mode == EgressMode::Strict && !self.allow.is_empty()
    }

    /// Whether anything but the egress proxy crosses the run's network boundary: a
    /// published port or a host port.
    pub fn has_reach(&self) -> bool {
        !self.publish.is_empty() || !self.host_ports.is_empty()
    }
}

/// Resource limits, resolved for this run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitsPlan {
    /// Wall-clock deadline, from the request or the policy default.
    pub wall_timeout_ms: u64,
    /// `RLIMIT_CPU`, in whole seconds (rounded up).
    pub cpu_time_secs: u64,
    /// cgroup memory limit for the run.
    pub memory_bytes: u64,
    /// cgroup pids limit for the run, and `RLIMIT_NPROC`.
    pub max_processes: u64,
    /// `RLIMIT_NOFILE`.
    pub open_files: u64,
    /// `RLIMIT_FSIZE`.
    pub file_size_bytes: u64,
    /// CPUs the run may use (`limits.cpus`); `None` leaves it to the backend's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
    /// Size of the overlay's upper layer and of Tier C's private `/tmp`, in bytes
    /// (`limits.disk_bytes`).
    #[serde(default = "default_disk_bytes")]
    pub disk_bytes: u64,
    /// Most bytes the run's stdin carries (`limits.stdin_bytes`, or the request's narrower
    /// `stdin_limit_bytes`).
    #[serde(default = "default_stdin_bytes")]
    pub stdin_bytes: u64,
}

fn default_disk_bytes() -> u64 {
    crate::policy::DEFAULT_DISK_BYTES
}

pub(crate) fn default_stdin_bytes() -> u64 {
    crate::policy::DEFAULT_STDIN_BYTES
}

/// Output capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputPlan {
    /// Bytes kept per stream.
    pub max_bytes: u64,
    /// What happens past `max_bytes`.
    pub mode: QuotaMode,
    /// Spill full streams to files.
    pub spill: bool,
    /// Seconds a spill file is kept after its last write (`output.spill_keep_secs`).
    #[serde(default = "default_spill_keep_secs")]
    pub spill_keep_secs: u64,
    /// Bytes all spill files of the state directory may hold (`output.spill_total_bytes`).
    #[serde(default = "default_spill_total_bytes")]
    pub spill_total_bytes: u64,
}

fn default_spill_keep_secs() -> u64 {
    crate::policy::DEFAULT_SPILL_KEEP_SECS
}

fn default_spill_total_bytes() -> u64 {
    crate::policy::DEFAULT_SPILL_TOTAL_BYTES
}

/// Tier requirements for this run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierPlan {
    /// The weakest acceptable tier.
    pub minimum: Tier,
    /// What the request asked for; the policy's `tier.preferred` when it asked for
    /// `auto`.
    pub requested: TierRequest,
    /// Layers that may be missing (recorded when they are).
    pub optional_layers: Vec<Layer>,
    /// The Tier C backend to use.
    #[serde(default)]
    pub backend: crate::policy::TierCBackend,
    /// The container backends: what to run and as whom (present only when `backend` is
    /// `docker` or `podman`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerPlan>,
    /// Tier C (Linux): the host identity the sandbox runs as, from the policy
    /// (`tier.sandbox_uid`, `sandbox_gid`, `danger_sandbox_as_supervisor`); the backend
    /// resolves the defaults.
    #[serde(default, skip_serializing_if = "SandboxIdentityPlan::is_default")]
    pub identity: SandboxIdentityPlan,
    /// Tier C: the run's file refusals are recorded (`audit.file_refusals`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub file_refusals: bool,
}

/// The policy's choice of the host identity a Tier C sandbox runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct SandboxIdentityPlan {
    /// `tier.sandbox_uid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// `tier.sandbox_gid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
    /// `tier.danger_sandbox_as_supervisor`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub as_supervisor: bool,
}

impl SandboxIdentityPlan {
    /// Nothing chosen: the backend's defaults.
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// What a container backend runs, from `[tier.container]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerPlan {
    /// The image reference.
    pub image: String,
    /// The user inside the container (`uid[:gid]` or a name), never root.
    pub user: String,
}

/// Redaction. The secret values are not serialized (the Plan is hashed and logged).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RedactionPlan {
    /// Redaction on.
    pub enabled: bool,
    /// Names of the sensitive variables whose values are redacted.
    pub sensitive_names: Vec<String>,
    /// Their values (never serialized).
    #[serde(skip)]
    pub sensitive_values: Vec<String>,
}

/// Background execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackgroundPlan {
    /// Lifetime mode.
    pub lifetime: Lifetime,
    /// Lifetime bound in milliseconds.
    pub lifetime_ms: u64,
    /// Bytes per stream also kept in a spill file (0 = none).
    pub spill_bytes: u64,
}

/// Decodes the `base64` of a serialized plan's binary stdin (`{"base64": …}`, see
/// [`Plan::stdin`]), for a reader of serialized plans (the attestation's digest).
pub fn decode_stdin_base64(text: &str) -> Option<Vec<u8>> {
    crate::wasm::decode_base64(text)
}

/// Stdin bytes in a serialized plan, exactly: UTF-8 as a string (as plans always had it),
/// anything else as `{"base64": "…"}`, so no two different inputs serialize alike.
pub(crate) mod opt_bytes {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Bytes {
        Text(String),
        Binary { base64: String },
    }

    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            None => s.serialize_none(),
            Some(b) => match std::str::from_utf8(b) {
                Ok(text) => s.serialize_some(text),
                Err(_) => s.serialize_some(&Bytes::Binary {
                    base64: crate::wasm::encode_base64(b),
                }),
            },
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        match Option::<Bytes>::deserialize(d)? {
            None => Ok(None),
            Some(Bytes::Text(t)) => Ok(Some(t.into_bytes())),
            Some(Bytes::Binary { base64 }) => crate::wasm::decode_base64(&base64)
                .map(Some)
                .ok_or_else(|| serde::de::Error::custom("stdin: invalid base64")),
        }
    }
}
