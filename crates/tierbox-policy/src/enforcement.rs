//! What a backend actually enforced for one run.
//!
//! Backends fill this in as they apply each layer; the outcome and the attestation carry
//! it unchanged, so an operator can see after the fact exactly which layers protected a
//! run and which were missing (and why).

use serde::{Deserialize, Serialize};

use crate::policy::{Layer, Tier};

/// Which backend carried a run out. Serialised as its name — `tier_b_linux`,
/// `tier_c_linux_native`, `tier_a_wasmtime`, … — the strings outcomes, attestations and
/// audit records carry.
///
/// ```
/// use tierbox_policy::enforcement::BackendId;
/// assert_eq!(BackendId::TierCBwrap.name(), "tier_c_bwrap");
/// assert_eq!(serde_json::to_string(&BackendId::TierBLinux).unwrap(), "\"tier_b_linux\"");
/// assert_eq!(BackendId::TierAWasmtime, "tier_a_wasmtime");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BackendId {
    /// Tier A: WASM on wasmtime.
    TierAWasmtime,
    /// Tier B: a direct spawn with landlock, seccomp, rlimits and a cgroup (Linux).
    TierBLinux,
    /// Tier C: Tierbox's own namespace sandbox (Linux).
    TierCLinuxNative,
    /// Tier C: bubblewrap (Linux).
    TierCBwrap,
    /// Tier C: a Docker container.
    TierCDocker,
    /// Tier C: a Podman container.
    TierCPodman,
    /// Tier C: `sandbox-exec` (macOS).
    TierCMacosSandboxExec,
    /// Tier C: a Job Object (Windows).
    TierCWindowsJobObject,
}

impl BackendId {
    /// The name it is serialised as.
    pub const fn name(self) -> &'static str {
        match self {
            Self::TierAWasmtime => "tier_a_wasmtime",
            Self::TierBLinux => "tier_b_linux",
            Self::TierCLinuxNative => "tier_c_linux_native",
            Self::TierCBwrap => "tier_c_bwrap",
            Self::TierCDocker => "tier_c_docker",
            Self::TierCPodman => "tier_c_podman",
            Self::TierCMacosSandboxExec => "tier_c_macos_sandbox_exec",
            Self::TierCWindowsJobObject => "tier_c_windows_job_object",
        }
    }
}

impl std::fmt::Display for BackendId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl PartialEq<str> for BackendId {
    fn eq(&self, other: &str) -> bool {
        self.name() == other
    }
}

impl PartialEq<&str> for BackendId {
    fn eq(&self, other: &&str) -> bool {
        self.name() == *other
    }
}

/// The enforcement report of one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Enforcement {
    /// The tier that ran (`b`, `c`, `a`).
    pub tier: Option<Tier>,
    /// The backend.
    pub backend: BackendId,
    /// Kernel release of the host (`uname -r`).
    pub kernel: String,
    /// uid and gid the program ran as (as seen by the host).
    pub uid: Option<u32>,
    /// gid the program ran as.
    pub gid: Option<u32>,
    /// Capabilities: `"none"` when every set (bounding, ambient, effective, permitted,
    /// inheritable) was cleared.
    pub capabilities: String,
    /// `PR_SET_NO_NEW_PRIVS` was set.
    pub no_new_privs: bool,
    /// Landlock: ABI used and whether every requested feature was enforced.
    pub landlock: LayerReport,
    /// Seccomp filter.
    pub seccomp: LayerReport,
    /// Cgroup for memory/pids/cpu limits and tree kill.
    pub cgroup: LayerReport,
    /// Namespaces entered (Tier C).
    pub namespaces: Vec<String>,
    /// Resource limits applied as rlimits, e.g. `"RLIMIT_NOFILE=256"`.
    pub rlimits: Vec<String>,
    /// Network enforcement, in words (e.g. `"no inet sockets (seccomp)"`).
    pub network: String,
    /// Protected paths in the workspace.
    pub protected_paths: LayerReport,
    /// `limits.disk_bytes` on the run's scratch space (`TMPDIR`, `/tmp`, a private
    /// `HOME`, the overlay's upper layer): how it is bounded, or why it is not.
    #[serde(default)]
    pub disk: LayerReport,
    /// Layers the policy allowed to be missing that were missing on this host.
    pub missing_layers: Vec<Layer>,
    /// Under `auto`: the stronger tier this host could not run the request in, with its
    /// backend and why (`tier c: tier.backend = "docker": docker engine unreachable:
    /// …`), when the run got a weaker one that `tier.minimum` allows. Never a silent
    /// downgrade: this says it, and the attestation carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passed_over: Option<String>,
    /// Tier A: every capability the guest was given (preopens with their access,
    /// environment names) and its limits, one entry each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grants: Vec<String>,
    /// For each layer that can refuse the program something (`egress`, `limits`,
    /// `landlock`, `seccomp`): whether its refusals reach the outcome's `denials` on this
    /// host (`applied`), and how, or why not: a layer whose denials cannot be read here is
    /// said to be so, never reported as having denied nothing.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub denial_reports: std::collections::BTreeMap<DenialLayer, LayerReport>,
}

/// A layer that can refuse a run something: the layer of a denial, and the key of
/// [`Enforcement::denial_reports`].
///
/// Ordered by name, so that [`Enforcement::denial_reports`] serialises its keys in the
/// order a map of names did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DenialLayer {
    /// Landlock (a file or a port).
    Landlock,
    /// The seccomp filter (a system call).
    Seccomp,
    /// The egress proxy (a connection).
    Egress,
    /// A resource limit.
    Limits,
    /// A Tier C sandbox's mount namespace: a path it does not show, or shows read-only
    /// (recorded when the policy sets `audit.file_refusals`).
    Mounts,
}

impl PartialOrd for DenialLayer {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for DenialLayer {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.name().cmp(other.name())
    }
}

impl std::fmt::Display for DenialLayer {
    /// Its name as serialised.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl DenialLayer {
    /// Its name as serialised.
    pub fn name(self) -> &'static str {
        match self {
            Self::Landlock => "landlock",
            Self::Seccomp => "seccomp",
            Self::Egress => "egress",
            Self::Limits => "limits",
            Self::Mounts => "mounts",
        }
    }
}

/// Status of one protection layer.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LayerReport {
    /// The layer was applied.
    pub applied: bool,
    /// Details: ABI, version, instruction count, or why it was not applied.
    pub detail: String,
}

impl LayerReport {
    /// An applied layer.
    pub fn applied(detail: impl Into<String>) -> Self {
        Self {
            applied: true,
            detail: detail.into(),
        }
    }

    /// A layer that was not applied, and why.
    pub fn missing(reason: impl Into<String>) -> Self {
        Self {
            applied: false,
            detail: reason.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// The keys of `denial_reports` are layers, and the map's JSON is the one a map of
    /// names made: the same names, in the same (alphabetical) order, read back alike.
    #[test]
    fn denial_reports_keep_their_recorded_json() {
        let recorded = r#"{"egress":{"applied":true,"detail":"e"},"landlock":{"applied":false,"detail":"l"},"limits":{"applied":true,"detail":"m"},"mounts":{"applied":false,"detail":"f"},"seccomp":{"applied":true,"detail":"s"}}"#;
        let mut reports = std::collections::BTreeMap::new();
        for (layer, applied, detail) in [
            (DenialLayer::Seccomp, true, "s"),
            (DenialLayer::Landlock, false, "l"),
            (DenialLayer::Mounts, false, "f"),
            (DenialLayer::Limits, true, "m"),
            (DenialLayer::Egress, true, "e"),
        ] {
            reports.insert(
                layer,
                LayerReport {
                    applied,
                    detail: detail.to_owned(),
                },
            );
        }
        assert_eq!(serde_json::to_string(&reports).unwrap(), recorded);
        let read: std::collections::BTreeMap<DenialLayer, LayerReport> =
            serde_json::from_str(recorded).unwrap();
        assert_eq!(read, reports);
        for layer in reports.keys() {
            assert_eq!(serde_json::to_value(layer).unwrap(), layer.name());
            assert_eq!(layer.to_string(), layer.name());
        }
    }
}
