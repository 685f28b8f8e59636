//! The `[tier]` section: the weakest tier a run may use, the layers a host may lack,
//! the Tier C backend and its container, and the sandbox identity.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Layer, Tier};

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
    pub(super) fn preferred_problem(&self) -> Option<String> {
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
pub(super) fn container_problem(policy: &TierPolicy) -> Option<(&'static str, String)> {
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
