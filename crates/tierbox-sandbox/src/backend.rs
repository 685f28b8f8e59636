//! The [`Backend`] trait: one isolation mechanism that carries out a [`Plan`].
//!
//! Every Tier C backend implements it — on Linux the native namespace sandbox, bubblewrap
//! and the two container engines; `sandbox-exec` on macOS; a Job Object on Windows — and
//! Tier B's direct spawn does too. A backend makes no policy decision: validation chose
//! the Plan, tier selection chose the backend; the backend says whether this host can run
//! it ([`Backend::available`]), whether it carries out everything the Plan asks for
//! ([`Backend::supports`]: what tier selection asks of each backend), and launches it,
//! reporting what it enforced in what it returns. [`for_plan`] is the dispatch the
//! supervisor uses on Linux.
//!
//! ```
//! # #[cfg(target_os = "linux")] {
//! use tierbox_sandbox::backend::{Backend, for_plan};
//! # let ws = tempfile::tempdir().unwrap();
//! let mut policy = tierbox_policy::Policy::builtin_default();
//! policy.exec.allowed_executables = vec!["true".to_owned()];
//! let ctx = tierbox_policy::ValidateContext::new(ws.path());
//! let plan = tierbox_policy::validate(&policy, &tierbox_policy::ProcessRunRequest::new("true"), &ctx)
//!     .unwrap();
//! let backend = for_plan(&plan, tierbox_policy::Tier::C);
//! assert_eq!(backend.name(), "tier_c_linux_native");
//! // Whether it can run here, and why not:
//! let _ = backend.available();
//! # }
//! ```

use tierbox_policy::plan::Plan;
use tierbox_policy::{EgressMode, TierCBackend};

/// Why a tier or a backend cannot run on this host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    /// Tier B: the kernel offers neither of its layers.
    #[error("neither landlock nor seccomp is available on this kernel")]
    NoKernelLayers,
    /// Tier C: this process cannot create user namespaces (the probe's reason).
    #[error("{0}")]
    UserNamespaces(String),
    /// Tier A runs WASM modules, not host programs.
    #[error("tier a runs WASM modules; native programs need a WASI build mapped by the policy")]
    WasmOnly,
    /// bubblewrap is missing or unusable (the probe's reason).
    #[error("{0}")]
    Bwrap(String),
    /// A tool the backend runs is missing.
    #[error("{path} is missing")]
    MissingTool {
        /// Its path.
        path: &'static str,
    },
    /// Tier C on a container backend whose engine does not answer.
    #[error("tier.backend = \"{backend}\": {reason}")]
    Engine {
        /// The policy's backend.
        backend: TierCBackend,
        /// Why the engine is unusable.
        reason: String,
    },
}

/// What a tier cannot carry out of a plan, though the host runs the tier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {}", self.feature(), self.reason())]
pub enum Unsupported {
    /// An egress allowlist in a container: it runs with `--network none`.
    AllowlistInContainer {
        /// The container backend.
        backend: TierCBackend,
    },
    /// An egress allowlist on bwrap under a supervisor that is not root.
    AllowlistOnBwrapUnprivileged,
    /// A mode that promises the host network, which Tier C's network namespace is not.
    HostNetwork {
        /// `allow_all` or `preflight`.
        mode: EgressMode,
    },
    /// Overlay (review) mode on a backend that does not mount the workspace through a
    /// size-limited overlay.
    OverlayWorkspace {
        /// The backend's name (`tier_b_linux`, `tier_c_bwrap`, …).
        backend: &'static str,
    },
    /// A `filesystem.deny_read` path that exists inside the workspace, which Tier B grants
    /// to landlock whole (landlock can only grant, so nothing is taken back out of it).
    DenyReadInWorkspace {
        /// The denied path.
        path: std::path::PathBuf,
    },
    /// Hosts whose TLS the egress proxy would terminate (`egress.hosts`,
    /// `egress.credentials`) on a backend that does not give a run the per-run CA in its
    /// trust bundle and the placeholders in its environment (macOS, Windows, the
    /// containers): refused rather than tunnel those hosts unchecked.
    TerminatedHosts {
        /// The backend's name.
        backend: &'static str,
    },
    /// Credentials injected at the proxy in Tier B: its proxy listens on the host's
    /// loopback, where every local user can connect, and a placeholder in a command line
    /// is readable by all of them in `/proc/PID/cmdline`; with both, another user's
    /// request would get the secret. Tier C's proxy is reachable only from inside the
    /// run's network namespace.
    CredentialsInTierB,
    /// A published port or a host port (`egress.publish`, `egress.host_ports`) in Tier B,
    /// which has no network namespace of its own to relay them across.
    ReachInTierB {
        /// The policy key.
        key: &'static str,
    },
    /// A published port or a host port on a backend that relays neither (the
    /// containers, macOS, Windows).
    ReachOnBackend {
        /// The backend's name.
        backend: &'static str,
    },
    /// A published port or a host port on a backend that needs a root supervisor for it
    /// (bwrap: the supervisor makes the network namespace bwrap starts in; native Tier C
    /// publishes under any supervisor).
    ReachUnprivileged {
        /// The backend's name.
        backend: &'static str,
    },
    /// Host unix sockets (`egress.unix_sockets`) in Tier B: landlock before ABI 9 cannot
    /// limit which sockets a program connects to, so allowing one would allow every
    /// socket the run can reach by path.
    UnixSocketsInTierB,
    /// Host unix sockets on a backend that does not bind them (the containers, macOS,
    /// Windows).
    UnixSocketsOnBackend {
        /// The backend's name.
        backend: &'static str,
    },
    /// A granted socket the sandbox's host uid may not connect to (no write permission
    /// on it): the kernel refuses the connect, and an agent checking its peer would too.
    UnixSocketNotConnectable {
        /// The socket.
        path: std::path::PathBuf,
        /// Its owner.
        owner: u32,
        /// The sandbox's host uid.
        uid: u32,
    },
}

/// [`Unsupported::UnixSocketNotConnectable`] for the first of `plan`'s host sockets a
/// sandbox of host uid `uid` and group `gid` cannot connect to.
pub fn sockets_connectable(plan: &Plan, (uid, gid): (u32, u32)) -> Result<(), Unsupported> {
    match plan
        .network
        .unix_sockets
        .iter()
        .find(|s| !s.connectable_by(uid, &[gid]))
    {
        None => Ok(()),
        Some(s) => Err(Unsupported::UnixSocketNotConnectable {
            path: s.path.clone(),
            owner: s.uid,
            uid,
        }),
    }
}

/// The policy key of the first kind of reach `plan` has (`egress.publish` or
/// `egress.host_ports`), or `None`.
pub fn reach_key(plan: &Plan) -> Option<&'static str> {
    if !plan.network.publish.is_empty() {
        Some("egress.publish")
    } else if !plan.network.host_ports.is_empty() {
        Some("egress.host_ports")
    } else {
        None
    }
}

/// [`Unsupported::ReachOnBackend`] for a plan with reach, on `backend`, which relays none
/// ([`Unsupported::UnixSocketsOnBackend`] for host sockets, which it does not bind).
pub fn no_reach_on(plan: &Plan, backend: &'static str) -> Result<(), Unsupported> {
    if !plan.network.unix_sockets.is_empty() {
        return Err(Unsupported::UnixSocketsOnBackend { backend });
    }
    match reach_key(plan) {
        None => Ok(()),
        Some(_) => Err(Unsupported::ReachOnBackend { backend }),
    }
}

/// [`Unsupported::TerminatedHosts`] for a plan with hosts whose TLS the proxy would
/// terminate, on `backend`, which does not provide what that needs.
pub fn no_terminated_hosts_on(plan: &Plan, backend: &'static str) -> Result<(), Unsupported> {
    match plan.network.terminated.is_empty() {
        true => Ok(()),
        false => Err(Unsupported::TerminatedHosts { backend }),
    }
}

/// [`Unsupported::CredentialsInTierB`] for a Tier B plan with credential rules.
pub fn no_credentials_in_tier_b(plan: &Plan) -> Result<(), Unsupported> {
    match plan.network.has_credentials() {
        false => Ok(()),
        true => Err(Unsupported::CredentialsInTierB),
    }
}

/// [`Unsupported::DenyReadInWorkspace`] for the first `filesystem.deny_read` entry that
/// exists at or beneath `plan`'s workspace: a tier that grants the workspace whole would
/// let the run read it.
pub fn no_denial_in_workspace(plan: &Plan) -> Result<(), Unsupported> {
    match plan
        .filesystem
        .deny_read
        .iter()
        .find(|d| d.starts_with(&plan.workspace) && std::fs::symlink_metadata(d).is_ok())
    {
        Some(path) => Err(Unsupported::DenyReadInWorkspace { path: path.clone() }),
        None => Ok(()),
    }
}

/// [`Unsupported::OverlayWorkspace`] for a plan in overlay mode on `backend`, which has
/// no overlay; `Ok` in direct mode.
pub fn direct_only(plan: &Plan, backend: &'static str) -> Result<(), Unsupported> {
    match plan.workspace_mode {
        tierbox_policy::WorkspaceMode::Direct => Ok(()),
        tierbox_policy::WorkspaceMode::Overlay => Err(Unsupported::OverlayWorkspace { backend }),
    }
}

impl Unsupported {
    /// The plan's feature, as the policy spells it.
    pub fn feature(&self) -> String {
        match self {
            Self::AllowlistInContainer { backend } => format!(
                "egress.mode = \"strict\" with a non-empty allowlist on tier.backend = \"{backend}\""
            ),
            Self::AllowlistOnBwrapUnprivileged => {
                "egress.mode = \"strict\" with a non-empty allowlist on tier.backend = \"bwrap\""
                    .to_owned()
            }
            Self::HostNetwork { mode } => format!("egress.mode = \"{}\"", mode.as_str()),
            Self::OverlayWorkspace { backend } => {
                format!("workspace mode \"overlay\" on {backend}")
            }
            Self::DenyReadInWorkspace { path } => format!(
                "filesystem.deny_read {:?} inside the workspace",
                path.display().to_string()
            ),
            Self::TerminatedHosts { backend } => {
                format!("egress.hosts and egress.credentials on {backend}")
            }
            Self::CredentialsInTierB => "egress.credentials in tier b".to_owned(),
            Self::ReachInTierB { key } => format!("{key} in tier b"),
            Self::ReachOnBackend { backend } => {
                format!("egress.publish and egress.host_ports on {backend}")
            }
            Self::ReachUnprivileged { backend } => format!(
                "egress.publish and egress.host_ports on {backend} under a supervisor that is not root"
            ),
            Self::UnixSocketsInTierB => "egress.unix_sockets in tier b".to_owned(),
            Self::UnixSocketsOnBackend { backend } => format!("egress.unix_sockets on {backend}"),
            Self::UnixSocketNotConnectable { path, owner, uid } => format!(
                "egress.unix_sockets {:?} (owner uid {owner}) for a sandbox of host uid {uid}",
                path.display().to_string()
            ),
        }
    }

    /// Why the tier cannot, and what would.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::AllowlistInContainer { .. } => {
                "the container runs with --network none, where the egress proxy cannot be reached; use tier.backend = \"native\" (or tier b)"
            }
            Self::AllowlistOnBwrapUnprivileged => {
                "bwrap must start in a network namespace the supervisor made to hold the egress proxy, which takes a root supervisor; use tier.backend = \"native\" (or tier b)"
            }
            Self::HostNetwork {
                mode: EgressMode::Preflight,
            } => {
                "preflight leaves the host network reachable at runtime, and tier c runs in its own network namespace with only loopback; use tier b"
            }
            Self::HostNetwork { .. } => {
                "tier c runs in its own network namespace with only loopback; use tier b for host network access"
            }
            Self::OverlayWorkspace { backend } => match *backend {
                "tier_b_linux" => {
                    "tier b has no mount namespace to show the workspace through an overlay; overlay mode needs tier c with tier.backend = \"native\" (it never falls back to writing the workspace directly)"
                }
                "tier_c_podman" => {
                    "podman's overlay volume needs an upper layer the supervisor mounts as a size-limited tmpfs, which takes a root supervisor; use tier.backend = \"native\" (it never falls back to writing the workspace directly)"
                }
                "tier_c_docker" => {
                    "docker has no overlay volume; use tier.backend = \"native\" or \"podman\" (it never falls back to writing the workspace directly)"
                }
                _ => {
                    "this backend cannot give the overlay's upper layer a size limit and hand it back for review; overlay mode needs tier.backend = \"native\" on Linux (it never falls back to writing the workspace directly)"
                }
            },
            Self::TerminatedHosts { .. } => {
                "this backend does not give the sandbox the run's CA in its trust bundle and the credential placeholders in its environment; nothing runs rather than reach those hosts without their rules: use tier.backend = \"native\" or \"bwrap\" on Linux (or remove egress.hosts and egress.credentials)"
            }
            Self::CredentialsInTierB => {
                "a tier b run's egress proxy listens on the host's loopback, where every local user can connect, and a placeholder in a command line is readable by all of them (/proc/PID/cmdline): another user could have the proxy send the secret; tier c's proxy is reachable only from inside the run's network namespace: use tier c (native or bwrap)"
            }
            Self::ReachInTierB { .. } => {
                "tier b has no network namespace: the program is on the host's network, where landlock's rules are per port on every address (a connect rule for a host port would reach that port on every host; a bind rule is for any address) and a port cannot be published under another number; tier c relays each connection across its own network namespace: use tier c (native or bwrap)"
            }
            Self::ReachOnBackend { .. } => {
                "this backend does not relay connections across the sandbox's network boundary; use tier.backend = \"native\" or \"bwrap\" on Linux"
            }
            Self::ReachUnprivileged { .. } => {
                "bwrap must start in a network namespace the supervisor made, where the supervisor makes the sockets that cross it, which takes a root supervisor; use tier.backend = \"native\""
            }
            Self::UnixSocketsInTierB => {
                "landlock on this kernel cannot limit which sockets a program connects to (that takes ABI 9, LANDLOCK_ACCESS_FS_RESOLVE_UNIX), so allowing one socket would allow every socket the run can reach by path; tier c binds exactly the granted sockets into its own mount namespace: use tier c (native or bwrap)"
            }
            Self::UnixSocketsOnBackend { .. } => {
                "this backend does not bind host sockets into the sandbox; use tier.backend = \"native\" or \"bwrap\" on Linux"
            }
            Self::UnixSocketNotConnectable { .. } => {
                "connecting takes write permission on the socket for the sandbox's host uid, and agents (ssh-agent) accept only a peer of their own uid: set tier.sandbox_uid (and tier.sandbox_gid) to the socket owner's in the policy, or use a socket the sandbox's uid owns"
            }
            Self::DenyReadInWorkspace { .. } => {
                "tier b grants the workspace to landlock whole and landlock cannot take a path back out of a grant, so the run could read it; tier c covers it in the run's mount namespace (use tier c, or move the file out of the workspace)"
            }
        }
    }
}

/// An isolation backend.
pub trait Backend {
    /// Launch options (run id, state paths, egress port) the supervisor supplies.
    type Options;
    /// A running sandbox: the handle the supervisor waits on, kills and reads from.
    type Launched;
    /// Why a launch failed (a typed rejection when the backend refuses the Plan).
    type Error;
    /// What the backend must know of the host to say whether it carries out a Plan
    /// (`HostFacts` on Linux).
    type Host;

    /// The backend's name in outcomes and attestations (`tier_c_linux_native`, …).
    fn name(&self) -> &'static str;

    /// Whether this host can run this backend, and the concrete reason when it cannot
    /// (probed once and cached where probing is costly).
    fn available(&self) -> Result<(), Unavailable>;

    /// Whether this backend carries out everything `plan` asks for on this host (beyond
    /// running at all), and what it cannot: the capability knowledge tier selection asks
    /// each backend for. Most backends carry out every Plan.
    fn supports(&self, plan: &Plan, host: &Self::Host) -> Result<(), Unsupported> {
        let _ = (plan, host);
        Ok(())
    }

    /// Launches `plan`; the process runs until the supervisor reaps or kills it.
    fn launch(&self, plan: &Plan, opts: &Self::Options) -> Result<Self::Launched, Self::Error>;
}

#[cfg(target_os = "linux")]
pub use linux_backends::*;

#[cfg(target_os = "linux")]
mod linux_backends {
    use tierbox_policy::plan::Plan;
    use tierbox_policy::{Tier, TierCBackend};

    use tierbox_policy::EgressMode;

    use super::{Backend, Unavailable, Unsupported};
    use crate::container::Engine;
    use crate::launch::{LaunchError, LaunchOptions};
    use crate::probe::{HostFacts, host_facts};
    use crate::running::RunningSandbox;
    use crate::select::tier_available;

    /// A backend the Linux supervisor drives: all share its handle and error types.
    pub type LinuxBackend = dyn Backend<
            Options = LaunchOptions,
            Launched = RunningSandbox,
            Error = LaunchError,
            Host = HostFacts,
        > + Sync;

    /// What every Tier C backend on Linux shares: each run gets its own network
    /// namespace with only loopback, so none provides the host network that `allow_all`
    /// and `preflight` (advisory: nothing is enforced at runtime) promise. `block_all`
    /// and `strict` with an empty allowlist (no network at all) they all provide; a
    /// `strict` allowlist is each backend's own answer.
    fn tier_c_network(plan: &Plan) -> Result<(), Unsupported> {
        match plan.network.mode {
            mode @ (EgressMode::AllowAll | EgressMode::Preflight) => {
                Err(Unsupported::HostNetwork { mode })
            }
            EgressMode::BlockAll | EgressMode::Strict => Ok(()),
        }
    }

    /// The plan's host sockets are ones the sandbox's host identity may connect to (an
    /// identity that cannot be resolved is the launch's own refusal).
    fn unix_sockets_reachable(plan: &Plan) -> Result<(), Unsupported> {
        if plan.network.unix_sockets.is_empty() {
            return Ok(());
        }
        match crate::linux::identity::resolve(plan) {
            Ok(identity) => super::sockets_connectable(plan, identity.ids()),
            Err(_) => Ok(()),
        }
    }

    /// A `strict` allowlist: the proxy's listener must be reachable from the sandbox.
    fn has_allowlist(plan: &Plan) -> bool {
        plan.network.mode == EgressMode::Strict && !plan.network.allow.is_empty()
    }

    /// Tier B: direct spawn with rlimits, landlock, seccomp and a cgroup.
    #[derive(Debug, Clone, Copy)]
    pub struct DirectSpawn;

    /// Tier C: Tierbox's own namespace sandbox.
    #[derive(Debug, Clone, Copy)]
    pub struct Native;

    /// Tier C: bubblewrap with the same Plan.
    #[derive(Debug, Clone, Copy)]
    pub struct Bwrap;

    /// Tier C: a Docker or Podman container.
    #[derive(Debug, Clone, Copy)]
    pub struct Container(pub Engine);

    impl Backend for DirectSpawn {
        type Options = LaunchOptions;
        type Launched = RunningSandbox;
        type Error = LaunchError;
        type Host = HostFacts;
        fn name(&self) -> &'static str {
            "tier_b_linux"
        }
        fn available(&self) -> Result<(), Unavailable> {
            tier_available(Tier::B, host_facts())
        }
        /// Not overlay mode: there is no mount namespace. No `deny_read` path inside the
        /// workspace: landlock grants it whole.
        fn supports(&self, plan: &Plan, _: &HostFacts) -> Result<(), Unsupported> {
            super::direct_only(plan, self.name())?;
            if let Some(key) = super::reach_key(plan) {
                return Err(Unsupported::ReachInTierB { key });
            }
            if !plan.network.unix_sockets.is_empty() {
                return Err(Unsupported::UnixSocketsInTierB);
            }
            super::no_denial_in_workspace(plan)
        }
        fn launch(&self, plan: &Plan, opts: &LaunchOptions) -> Result<RunningSandbox, LaunchError> {
            crate::tier_b::launch(plan, opts)
        }
    }

    impl Backend for Native {
        type Options = LaunchOptions;
        type Launched = RunningSandbox;
        type Error = LaunchError;
        type Host = HostFacts;
        fn name(&self) -> &'static str {
            "tier_c_linux_native"
        }
        fn available(&self) -> Result<(), Unavailable> {
            tier_available(Tier::C, host_facts())
        }
        /// An allowlist too: the proxy's listener is made inside the namespace it creates.
        /// Published ports under any supervisor (one that may not join the sandbox's
        /// network namespace has a helper make the sockets).
        fn supports(&self, plan: &Plan, _: &HostFacts) -> Result<(), Unsupported> {
            tier_c_network(plan)?;
            unix_sockets_reachable(plan)
        }
        fn launch(&self, plan: &Plan, opts: &LaunchOptions) -> Result<RunningSandbox, LaunchError> {
            crate::tier_c::launch_native(plan, opts)
        }
    }

    impl Backend for Bwrap {
        type Options = LaunchOptions;
        type Launched = RunningSandbox;
        type Error = LaunchError;
        type Host = HostFacts;
        fn name(&self) -> &'static str {
            "tier_c_bwrap"
        }
        fn available(&self) -> Result<(), Unavailable> {
            tier_available(Tier::C, host_facts())?;
            crate::bwrap::probe_bwrap_cached()
                .map(drop)
                .map_err(|e| Unavailable::Bwrap(e.to_string()))
        }
        /// An allowlist only under a root supervisor: bwrap must start in a network
        /// namespace the supervisor made to hold the proxy's listener (`--share-net`), and
        /// creating it and starting bwrap in it need `CAP_SYS_ADMIN`.
        fn supports(&self, plan: &Plan, host: &HostFacts) -> Result<(), Unsupported> {
            tier_c_network(plan)?;
            super::direct_only(plan, self.name())?;
            if has_allowlist(plan) && host.euid != 0 {
                return Err(Unsupported::AllowlistOnBwrapUnprivileged);
            }
            if plan.network.has_reach() && host.euid != 0 {
                return Err(Unsupported::ReachUnprivileged {
                    backend: self.name(),
                });
            }
            unix_sockets_reachable(plan)
        }
        fn launch(&self, plan: &Plan, opts: &LaunchOptions) -> Result<RunningSandbox, LaunchError> {
            crate::tier_c::launch_bwrap(plan, opts)
        }
    }

    impl Backend for Container {
        type Options = LaunchOptions;
        type Launched = RunningSandbox;
        type Error = LaunchError;
        type Host = HostFacts;
        fn name(&self) -> &'static str {
            match self.0 {
                Engine::Docker => "tier_c_docker",
                Engine::Podman => "tier_c_podman",
            }
        }
        fn available(&self) -> Result<(), Unavailable> {
            crate::container::probe::probe_engine_cached(self.0)
                .map(drop)
                .map_err(|e| Unavailable::Engine {
                    backend: match self.0 {
                        Engine::Docker => TierCBackend::Docker,
                        Engine::Podman => TierCBackend::Podman,
                    },
                    reason: e.to_string(),
                })
        }
        /// No allowlist: the container runs with `--network none`.
        /// Overlay mode on podman under a root supervisor only: podman's overlay volume
        /// writes into an upper layer the supervisor mounts as a size-limited tmpfs.
        /// Docker has no overlay volume.
        fn supports(&self, plan: &Plan, host: &HostFacts) -> Result<(), Unsupported> {
            tier_c_network(plan)?;
            super::no_reach_on(plan, self.name())?;
            if self.0 == Engine::Docker || host.euid != 0 {
                super::direct_only(plan, self.name())?;
            }
            if has_allowlist(plan) {
                return Err(Unsupported::AllowlistInContainer {
                    backend: plan.tier.backend,
                });
            }
            Ok(())
        }
        fn launch(&self, plan: &Plan, opts: &LaunchOptions) -> Result<RunningSandbox, LaunchError> {
            crate::container::launch(plan, opts)
        }
    }

    /// The backend that runs `plan` in `tier` on Linux (Tier B's direct spawn, or the
    /// policy's Tier C backend). Tier A is not a process backend; it maps to Tier B's
    /// here and is refused by the supervisor before any launch.
    pub fn for_plan(plan: &Plan, tier: Tier) -> &'static LinuxBackend {
        match (tier, plan.tier.backend) {
            (Tier::C, TierCBackend::Native) => &Native,
            (Tier::C, TierCBackend::Bwrap) => &Bwrap,
            (Tier::C, TierCBackend::Docker) => &Container(Engine::Docker),
            (Tier::C, TierCBackend::Podman) => &Container(Engine::Podman),
            _ => &DirectSpawn,
        }
    }
}

#[cfg(target_os = "macos")]
mod macos_backend {
    use tierbox_policy::plan::Plan;

    use super::Backend;
    use crate::macos::{MacLaunchError, MacLaunched, SbplOptions};

    /// Tier C on macOS: the program under `/usr/bin/sandbox-exec` with the Plan's profile.
    #[derive(Debug, Clone, Copy)]
    pub struct SandboxExec;

    impl Backend for SandboxExec {
        type Options = SbplOptions;
        type Launched = MacLaunched;
        type Error = MacLaunchError;
        type Host = ();
        fn name(&self) -> &'static str {
            crate::macos::BACKEND_NAME
        }
        fn available(&self) -> Result<(), super::Unavailable> {
            const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";
            if std::path::Path::new(SANDBOX_EXEC).exists() {
                Ok(())
            } else {
                Err(super::Unavailable::MissingTool { path: SANDBOX_EXEC })
            }
        }
        fn supports(&self, plan: &Plan, _: &()) -> Result<(), super::Unsupported> {
            super::direct_only(plan, self.name())
        }
        fn launch(&self, plan: &Plan, opts: &SbplOptions) -> Result<MacLaunched, MacLaunchError> {
            crate::macos::launch(plan, opts)
        }
    }
}

#[cfg(target_os = "macos")]
pub use macos_backend::SandboxExec;

#[cfg(windows)]
mod windows_backend {
    use tierbox_policy::plan::Plan;

    use super::Backend;
    use crate::windows::{WindowsLaunchError, WindowsLaunched};

    /// Tier C on Windows: the process created suspended in a Job Object with its limits.
    #[derive(Debug, Clone, Copy)]
    pub struct JobObjectBackend;

    impl Backend for JobObjectBackend {
        type Options = ();
        type Launched = WindowsLaunched;
        type Error = WindowsLaunchError;
        type Host = ();
        fn name(&self) -> &'static str {
            crate::windows::BACKEND_NAME
        }
        fn available(&self) -> Result<(), super::Unavailable> {
            Ok(())
        }
        fn supports(&self, plan: &Plan, _: &()) -> Result<(), super::Unsupported> {
            super::direct_only(plan, self.name())
        }
        fn launch(&self, plan: &Plan, _: &()) -> Result<WindowsLaunched, WindowsLaunchError> {
            crate::windows::launch(plan)
        }
    }
}

#[cfg(windows)]
pub use windows_backend::JobObjectBackend;

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #![allow(clippy::unwrap_used)]
    use tierbox_policy::{Tier, TierCBackend};

    use super::*;

    #[test]
    fn every_linux_backend_is_reached_through_the_trait_with_its_name() {
        let s = crate::test_fixtures::scratch();
        for (backend, name) in [
            (TierCBackend::Native, "tier_c_linux_native"),
            (TierCBackend::Bwrap, "tier_c_bwrap"),
            (TierCBackend::Docker, "tier_c_docker"),
            (TierCBackend::Podman, "tier_c_podman"),
        ] {
            let mut p = crate::test_fixtures::policy("strict.toml");
            p.exec.allowed_executables = vec!["true".to_owned()];
            p.tier.backend = backend;
            if backend.is_container() {
                p.tier.container.image = Some("localhost/tools:1".to_owned());
            }
            let ctx = tierbox_policy::ValidateContext::new(&s.ws);
            let plan =
                tierbox_policy::validate(&p, &tierbox_policy::ProcessRunRequest::new("true"), &ctx)
                    .unwrap();
            assert_eq!(for_plan(&plan, Tier::C).name(), name);
            assert_eq!(for_plan(&plan, Tier::B).name(), "tier_b_linux");
            // Availability is a reason, never a panic.
            if let Err(reason) = for_plan(&plan, Tier::C).available() {
                assert!(!reason.to_string().is_empty(), "{reason:?}");
            }
        }
    }
}
