//! Tier C in a container engine: a [`Plan`] as a `docker run` or `podman run` argv.
//!
//! Invariants the argv keeps ([`run_argv`], pure, tested without an engine):
//! - the container is removed when it ends (`--rm`), has a fixed name
//!   (`tierbox-<run id>`) so teardown can kill it, and never pulls an image
//!   (`--pull never`): the image is the policy's, preloaded by the operator;
//! - no network (`--network none`): a plan that needs the egress proxy is refused
//!   ([`ContainerError::EgressProxyUnsupported`]), since the proxy would have to be
//!   reachable from a network the container can otherwise not leave;
//! - a read-only root, a size-limited private `/tmp` tmpfs, no capabilities,
//!   `no-new-privileges`, a private IPC namespace, a non-root user, and the engine's
//!   default seccomp profile narrowed by Tierbox's rules on setuid files and device
//!   nodes ([`seccomp`], `--security-opt seccomp=`[`ContainerOptions::seccomp_profile`]);
//! - memory (`--memory` with `--memory-swap` equal to it: no swap on top), pids, CPUs
//!   and the Plan's rlimits as `--ulimit`s;
//! - only the workspace (read-write) and the Plan's declared paths are mounted, at their
//!   host paths; protected paths inside the workspace are re-mounted read-only, or covered
//!   with an empty read-only tmpfs when missing; a symlink among them is refused;
//! - no mount may reach an engine socket ([`ENGINE_SOCKETS`]): the container would
//!   control the engine, which is root on the host;
//! - the environment is exactly the Plan's, never inherited by name: read from an fd
//!   the engine CLI inherits (`--env-file /dev/fd/3`, [`ContainerOptions::env_file`]), so
//!   no value is in the CLI's command line, which every process of the host may read (or
//!   `--env NAME=VALUE` without one); the working directory the Plan's, and the program the Plan's absolute path
//!   (`--entrypoint`, so the image's own entrypoint never runs);
//! - never `--privileged`, never a host namespace.
//!
//! The engine binary is found in [`ENGINE_DIRS`] only, never in the request's `PATH`,
//! and probed before use ([`probe::probe_engine`]): an unreachable engine rejects the run
//! with `tier.unavailable` and the engine's own message.

pub mod probe;
#[cfg(target_os = "linux")]
pub mod seccomp;

#[cfg(target_os = "linux")]
mod launch;
#[cfg(target_os = "linux")]
pub mod layer;
#[cfg(target_os = "linux")]
pub use launch::{ContainerGuard, launch, sweep_orphaned_containers};

use std::path::{Path, PathBuf};

use tierbox_policy::plan::Plan;
use tierbox_policy::{EgressMode, TierCBackend};

/// Name of the Docker backend in outcomes and attestations (other crates' tests match a
/// run's backend against it).
#[cfg(feature = "test-support")]
pub const DOCKER_BACKEND_NAME: &str = "tier_c_docker";

/// Name of the Podman backend in outcomes and attestations (as above).
#[cfg(feature = "test-support")]
pub const PODMAN_BACKEND_NAME: &str = "tier_c_podman";

/// The only directories an engine binary is taken from (in this order). The request's
/// and the supervisor's `PATH` are never searched: a writable directory early in either
/// would let anyone substitute the engine.
pub const ENGINE_DIRS: &[&str] = &["/usr/bin", "/usr/local/bin", "/bin", "/usr/sbin", "/sbin"];

/// Engine control sockets no container may see, as path patterns (`*` is one path
/// component). Mounting one, or a directory above one, hands the container the engine:
/// root on the host.
pub const ENGINE_SOCKETS: &[&str] = tierbox_policy::unix_sockets::PRIVILEGED_SOCKETS;

/// CPUs a container run may use when the policy sets no `limits.cpus`.
pub const DEFAULT_CPUS: u32 = 2;

/// Largest private `/tmp` of a container, in bytes (1 GiB); the run's memory limit is
/// used when smaller, since tmpfs pages are charged to the container's memory.
pub const MAX_TMP_BYTES: u64 = 1 << 30;

/// The prefix of every container's name; the run id follows.
pub const NAME_PREFIX: &str = "tierbox-";

/// Hostname inside the container.
pub const HOSTNAME: &str = "tierbox";

/// A container engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Engine {
    /// Docker (`docker`).
    Docker,
    /// Podman (`podman`).
    Podman,
}

impl Engine {
    /// The engine a Tier C backend names, if it is a container backend.
    pub fn for_backend(backend: TierCBackend) -> Option<Self> {
        match backend {
            TierCBackend::Docker => Some(Self::Docker),
            TierCBackend::Podman => Some(Self::Podman),
            TierCBackend::Native | TierCBackend::Bwrap => None,
        }
    }

    /// The binary's file name.
    pub fn binary(self) -> &'static str {
        match self {
            Self::Docker => "docker",
            Self::Podman => "podman",
        }
    }

    /// The Tier C backend that runs this engine.
    pub fn backend(self) -> TierCBackend {
        match self {
            Self::Docker => TierCBackend::Docker,
            Self::Podman => TierCBackend::Podman,
        }
    }

    /// The backend's name in outcomes.
    pub fn backend_name(self) -> &'static str {
        self.backend_id().name()
    }

    /// The backend this engine is.
    pub fn backend_id(self) -> tierbox_policy::enforcement::BackendId {
        match self {
            Self::Docker => tierbox_policy::enforcement::BackendId::TierCDocker,
            Self::Podman => tierbox_policy::enforcement::BackendId::TierCPodman,
        }
    }
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.binary())
    }
}

/// What a protected path inside the workspace is on the host, as the argv needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtectedState {
    /// It exists (file or directory): bind it read-only over itself.
    Exists,
    /// It does not exist; `cover` is its outermost missing ancestor inside the workspace
    /// (maybe the path itself), covered by an empty read-only tmpfs so nothing can be
    /// created there. The engine creates `cover` on the host as a mount point.
    Missing {
        /// The path to cover.
        cover: PathBuf,
    },
    /// The path or an ancestor inside the workspace is a symlink: refused.
    Symlink {
        /// The symlink.
        link: PathBuf,
    },
}

/// Per-run inputs of [`run_argv`] that are not in the Plan.
#[derive(Debug, Clone)]
pub struct ContainerOptions {
    /// The engine.
    pub engine: Engine,
    /// The run id (names the container `tierbox-<run id>`); `[A-Za-z0-9_.-]` only.
    pub run_id: String,
    /// Each of the Plan's protected paths with its state on the host, in Plan order
    /// ([`probe_protected`]).
    pub protected: Vec<(PathBuf, ProtectedState)>,
    /// Size of the private `/tmp`, bytes.
    pub tmp_size_bytes: u64,
    /// Add `--init` (the engine's minimal init reaps zombies and forwards signals). Off by
    /// default: podman needs `catatonit` for it, and teardown removes the container by
    /// name whatever its init does.
    pub init: bool,
    /// Where the engine CLI reads the environment ([`env_file_contents`]), typically
    /// `/dev/fd/N` of an fd it inherits: `--env-file PATH`. `None`: `--env NAME=VALUE`
    /// arguments, whose values every process of the host can read in the CLI's command
    /// line.
    pub env_file: Option<String>,
    /// Overlay (review) mode on podman: the host directory holding the upper layer's
    /// [`LAYER_UPPER`] and [`LAYER_WORK`] (a tmpfs the supervisor mounts); the workspace is then mounted as
    /// podman's overlay volume over them.
    pub overlay_layer: Option<PathBuf>,
    /// Where the engine CLI reads the run's seccomp profile (`/dev/fd/N` of an fd it
    /// inherits: the engine's default narrowed by [`seccomp::extend_profile`]):
    /// `--security-opt seccomp=PATH`. `None`: the engine's built-in default (pure argv
    /// tests only; a launch always sets it).
    pub seccomp_profile: Option<String>,
    /// The run is on a terminal: `--interactive --tty`. The engine gives the program a
    /// terminal of the container's own, and its CLI — whose stdio and controlling
    /// terminal is the run's terminal — relays between the two (raw mode), passes a
    /// resize on (`SIGWINCH`) and proxies the signals it gets.
    pub terminal: bool,
}

impl ContainerOptions {
    /// Options for `plan` with its protected paths probed on this host and `/tmp` sized
    /// by [`tmp_size_bytes`].
    pub fn probe(engine: Engine, run_id: &str, plan: &Plan) -> Self {
        Self {
            engine,
            run_id: run_id.to_owned(),
            protected: probe_protected(plan),
            tmp_size_bytes: tmp_size_bytes(plan),
            init: false,
            env_file: None,
            overlay_layer: None,
            seccomp_profile: None,
            terminal: false,
        }
    }
}

/// Why a Plan cannot be expressed as a container run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ContainerError {
    /// The Plan names no container (its backend is not docker or podman).
    #[error("the plan has no [tier.container] image (tier.backend is not docker or podman)")]
    NoImage,
    /// A mount would expose an engine control socket.
    #[error("mounting {mount} would expose the container engine socket {socket}")]
    EngineSocket {
        /// The mount source.
        mount: PathBuf,
        /// The socket pattern it reaches.
        socket: String,
    },
    /// A path cannot be written in the engine's `--mount` syntax (not UTF-8, or holds a
    /// comma, quote or control character).
    #[error("path {path:?} cannot be passed to the container engine: {reason}")]
    UnsupportedPath {
        /// The path.
        path: PathBuf,
        /// Why.
        reason: &'static str,
    },
    /// A protected path, or an ancestor inside the workspace, is a symlink.
    #[error(
        "protected path {protected} goes through the symlink {link}; the container backends refuse it"
    )]
    ProtectedSymlink {
        /// The protected path.
        protected: PathBuf,
        /// The symlink.
        link: PathBuf,
    },
    /// The Plan needs the egress proxy, which a `--network none` container cannot reach.
    #[error(
        "egress.mode = \"strict\" with an allowlist needs the egress proxy, which the container backends cannot provide"
    )]
    EgressProxyUnsupported,
    /// The Plan needs the host network (`allow_all`, `preflight`).
    #[error("egress.mode = \"{mode}\" needs the host network; tier c containers get none")]
    HostNetwork {
        /// The mode.
        mode: String,
    },
    /// The run id has characters a container name cannot hold.
    #[error("run id {0:?} is not a valid container name suffix")]
    BadRunId(String),
    /// A variable cannot be passed to the engine.
    #[error("environment entry {name:?} cannot be passed to the container engine: {reason}")]
    BadEnv {
        /// The variable's name.
        name: String,
        /// Why.
        reason: &'static str,
    },
    /// The Plan's stdin is data, and argv/program hold a NUL byte or similar.
    #[error("argument {index} holds a NUL byte")]
    NulInArgument {
        /// Index in argv.
        index: usize,
    },
    /// Overlay mode where the engine cannot carry it out (Docker has no overlay volume;
    /// podman needs the upper layer the supervisor mounts).
    #[error("{engine} cannot show the workspace through a size-limited overlay here")]
    OverlayUnsupported {
        /// The engine.
        engine: Engine,
    },
}

/// The size of a container's private `/tmp`: the smallest of the memory limit, the disk
/// limit and [`MAX_TMP_BYTES`].
pub fn tmp_size_bytes(plan: &Plan) -> u64 {
    plan.limits
        .memory_bytes
        .min(plan.limits.disk_bytes)
        .min(MAX_TMP_BYTES)
}

/// Each protected path of `plan` with its state on this host (see [`ProtectedState`]),
/// except those inside another protected path that exists (bound read-only as a whole:
/// covering a missing entry there would need a mount point the engine cannot create).
pub fn probe_protected(plan: &Plan) -> Vec<(PathBuf, ProtectedState)> {
    outermost(
        plan.filesystem
            .protected
            .iter()
            .map(|p| (p.clone(), protected_state(&plan.workspace, p)))
            .collect(),
    )
}

/// `states` without the paths inside another one that exists.
pub(crate) fn outermost(states: Vec<(PathBuf, ProtectedState)>) -> Vec<(PathBuf, ProtectedState)> {
    let inside_existing = |p: &Path| {
        states
            .iter()
            .any(|(q, s)| p != q && p.starts_with(q) && *s == ProtectedState::Exists)
    };
    states
        .iter()
        .filter(|(p, _)| !inside_existing(p))
        .cloned()
        .collect()
}

fn protected_state(workspace: &Path, path: &Path) -> ProtectedState {
    let Ok(rel) = path.strip_prefix(workspace) else {
        return ProtectedState::Exists;
    };
    let mut cur = workspace.to_path_buf();
    for comp in rel.components() {
        cur.push(comp);
        match std::fs::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_symlink() => return ProtectedState::Symlink { link: cur },
            Ok(_) => {}
            Err(_) => return ProtectedState::Missing { cover: cur },
        }
    }
    ProtectedState::Exists
}

/// The host paths the engine creates as mount points for covers of missing protected
/// paths; remove them (when still empty) after the run.
pub fn host_mount_points(opts: &ContainerOptions) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = opts
        .protected
        .iter()
        .filter_map(|(_, s)| match s {
            ProtectedState::Missing { cover } => Some(cover.clone()),
            _ => None,
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The container's name for `run_id`.
pub fn container_name(run_id: &str) -> Result<String, ContainerError> {
    let ok = !run_id.is_empty()
        && run_id.len() <= 64
        && run_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(format!("{NAME_PREFIX}{run_id}"))
    } else {
        Err(ContainerError::BadRunId(run_id.to_owned()))
    }
}

/// Whether mounting `source` exposes a path matching `pattern` (`*` = one component):
/// the source is the socket itself or a directory above it.
fn reaches(source: &Path, pattern: &str) -> bool {
    let src: Vec<_> = source.components().collect();
    let pat: Vec<_> = Path::new(pattern).components().collect();
    src.len() <= pat.len()
        && src
            .iter()
            .zip(&pat)
            .all(|(s, p)| p.as_os_str() == "*" || s == p)
}

/// Refuses a mount source that reaches an engine socket.
pub fn check_not_engine_socket(source: &Path) -> Result<(), ContainerError> {
    match ENGINE_SOCKETS.iter().find(|s| reaches(source, s)) {
        Some(socket) => Err(ContainerError::EngineSocket {
            mount: source.to_path_buf(),
            socket: (*socket).to_owned(),
        }),
        None => Ok(()),
    }
}

/// `path` as a `--mount` value: UTF-8 without the characters the engine's CSV syntax
/// would split or quote (`,` `"`), and no control characters.
fn mount_path(path: &Path) -> Result<&str, ContainerError> {
    let unsupported = |reason| ContainerError::UnsupportedPath {
        path: path.to_path_buf(),
        reason,
    };
    let s = path.to_str().ok_or_else(|| unsupported("not UTF-8"))?;
    if s.contains(',') || s.contains('"') {
        return Err(unsupported("holds a comma or a double quote"));
    }
    if s.chars().any(char::is_control) {
        return Err(unsupported("holds a control character"));
    }
    Ok(s)
}

/// The upper directory in the upper layer's tmpfs of a review-mode podman run.
pub const LAYER_UPPER: &str = "upper";
/// The overlay's work directory in that tmpfs.
pub const LAYER_WORK: &str = "work";

/// `path` in a `--volume` value, where `:` separates the fields: [`mount_path`] without
/// colons either.
fn volume_path(path: &Path) -> Result<&str, ContainerError> {
    let s = mount_path(path)?;
    if s.contains(':') {
        return Err(ContainerError::UnsupportedPath {
            path: path.to_path_buf(),
            reason: "holds a colon (the --volume syntax's separator)",
        });
    }
    Ok(s)
}

fn bind(source: &Path, read_only: bool) -> Result<String, ContainerError> {
    check_not_engine_socket(source)?;
    let p = mount_path(source)?;
    Ok(if read_only {
        format!("type=bind,source={p},target={p},readonly")
    } else {
        format!("type=bind,source={p},target={p}")
    })
}

/// The network flag for `plan`, or why it cannot run in a container.
fn network(plan: &Plan) -> Result<&'static str, ContainerError> {
    match plan.network.mode {
        EgressMode::BlockAll => Ok("none"),
        EgressMode::Strict if plan.network.allow.is_empty() => Ok("none"),
        EgressMode::Strict => Err(ContainerError::EgressProxyUnsupported),
        EgressMode::AllowAll => Err(ContainerError::HostNetwork {
            mode: "allow_all".to_owned(),
        }),
        EgressMode::Preflight => Err(ContainerError::HostNetwork {
            mode: "preflight".to_owned(),
        }),
    }
}

/// The engine arguments (after the engine binary) that run `plan` in `image`.
///
/// ```
/// # fn demo(plan: &tierbox_policy::Plan) -> Result<(), tierbox_sandbox::container::ContainerError> {
/// use tierbox_sandbox::container::{ContainerOptions, Engine, run_argv};
/// let opts = ContainerOptions::probe(Engine::Podman, "0123abcd", plan);
/// let argv = run_argv(plan, &opts)?;
/// assert_eq!(&argv[..2], ["run", "--rm"]);
/// assert!(argv.windows(2).any(|w| w == ["--network", "none"]));
/// assert!(!argv.iter().any(|a| a == "--privileged"));
/// # Ok(()) }
/// ```
/// The container's environment: the Plan's, plus a private `HOME` and `TMPDIR` in `/tmp`;
/// every name and value checked to pass through an env file (no `=` or NUL in a name, no
/// NUL or line break in a value: the engines' `--env-file` is line-based). Pure.
fn container_env(plan: &Plan) -> Result<Vec<(String, String)>, ContainerError> {
    let mut env: Vec<(String, String)> = plan.env.clone();
    env.retain(|(k, _)| k != "TMPDIR");
    env.push(("TMPDIR".to_owned(), "/tmp".to_owned()));
    if plan.filesystem.private_home {
        env.retain(|(k, _)| k != "HOME");
        env.push(("HOME".to_owned(), "/tmp".to_owned()));
    }
    for (k, v) in &env {
        let bad = |reason| ContainerError::BadEnv {
            name: k.clone(),
            reason,
        };
        if k.is_empty() || k.contains(['=', '\0']) || k.contains(char::is_whitespace) {
            return Err(bad("not a variable name the engine accepts"));
        }
        if v.contains('\0') {
            return Err(bad("its value holds a NUL byte"));
        }
        if v.contains(['\n', '\r']) {
            return Err(bad(
                "its value holds a line break, which the engine's line-based --env-file cannot carry",
            ));
        }
    }
    Ok(env)
}

/// The `NAME=VALUE` lines the engine reads with `--env-file` ([`ContainerOptions::env_file`]).
/// Pure.
pub fn env_file_contents(plan: &Plan) -> Result<String, ContainerError> {
    Ok(container_env(plan)?
        .iter()
        .map(|(k, v)| format!("{k}={v}\n"))
        .collect())
}

pub fn run_argv(plan: &Plan, opts: &ContainerOptions) -> Result<Vec<String>, ContainerError> {
    let container = plan
        .tier
        .container
        .as_ref()
        .ok_or(ContainerError::NoImage)?;
    let name = container_name(&opts.run_id)?;
    let network = network(plan)?;
    let limits = &plan.limits;
    let mut a: Vec<String> = Vec::new();
    let mut push = |args: &[&str]| a.extend(args.iter().map(|s| (*s).to_owned()));
    push(&["run", "--rm", "--name", &name, "--label", "tierbox=1"]);
    push(&["--pull", "never", "--log-driver", "none"]);
    if opts.init {
        push(&["--init"]);
    }
    if opts.terminal {
        push(&["--interactive", "--tty"]);
    } else if plan.stdin.is_some() {
        push(&["--interactive"]);
    }
    push(&[
        "--network",
        network,
        "--hostname",
        HOSTNAME,
        "--ipc",
        "private",
    ]);
    push(&["--read-only"]);
    let tmp = format!(
        "/tmp:rw,nosuid,nodev,mode=1777,size={}",
        opts.tmp_size_bytes
    );
    push(&["--tmpfs", &tmp]);
    push(&["--cap-drop", "ALL", "--security-opt", "no-new-privileges"]);
    if let Some(profile) = &opts.seccomp_profile {
        push(&["--security-opt", &format!("seccomp={profile}")]);
    }
    push(&["--user", &container.user]);
    let memory = limits.memory_bytes.to_string();
    push(&["--memory", &memory, "--memory-swap", &memory]);
    let pids = limits.max_processes.to_string();
    push(&["--pids-limit", &pids]);
    let cpus = plan.limits.cpus.unwrap_or(DEFAULT_CPUS).to_string();
    push(&["--cpus", &cpus]);
    for (name, value) in [
        ("cpu", limits.cpu_time_secs),
        ("nofile", limits.open_files),
        ("nproc", limits.max_processes),
        ("fsize", limits.file_size_bytes),
        ("core", 0),
    ] {
        push(&["--ulimit", &format!("{name}={value}:{value}")]);
    }
    // Mounts: declared read-only paths, declared writable paths, the workspace, then the
    // protected paths over it (later mounts land on top of earlier ones).
    let mut mounts = Vec::new();
    for p in &plan.filesystem.read_only {
        mounts.push(bind(p, true)?);
    }
    for p in &plan.filesystem.writable {
        mounts.push(bind(p, false)?);
    }
    match (plan.workspace_mode, &opts.overlay_layer) {
        (tierbox_policy::WorkspaceMode::Direct, _) => mounts.push(bind(&plan.workspace, false)?),
        (tierbox_policy::WorkspaceMode::Overlay, Some(layer)) if opts.engine == Engine::Podman => {
            check_not_engine_socket(&plan.workspace)?;
            let ws = volume_path(&plan.workspace)?;
            let (upper, work) = (layer.join(LAYER_UPPER), layer.join(LAYER_WORK));
            let (upper, work) = (volume_path(&upper)?, volume_path(&work)?);
            // `-v` holds the volume, `--mount` the others: podman orders every mount by
            // its destination, parents first.
            push(&[
                "--volume",
                &format!("{ws}:{ws}:O,upperdir={upper},workdir={work}"),
            ]);
        }
        (tierbox_policy::WorkspaceMode::Overlay, _) => {
            return Err(ContainerError::OverlayUnsupported {
                engine: opts.engine,
            });
        }
    }
    for (protected, state) in &opts.protected {
        match state {
            ProtectedState::Exists => mounts.push(bind(protected, true)?),
            ProtectedState::Missing { cover } => {
                let p = mount_path(cover)?;
                mounts.push(format!("type=tmpfs,target={p},ro,tmpfs-size=4096"));
            }
            ProtectedState::Symlink { link } => {
                return Err(ContainerError::ProtectedSymlink {
                    protected: protected.clone(),
                    link: link.clone(),
                });
            }
        }
    }
    mounts.dedup();
    for m in &mounts {
        push(&["--mount", m]);
    }
    // The environment, exactly: the Plan's, plus a private HOME and TMPDIR in /tmp.
    let env = container_env(plan)?;
    match &opts.env_file {
        Some(path) => push(&["--env-file", path]),
        None => {
            for (k, v) in &env {
                push(&["--env", &format!("{k}={v}")]);
            }
        }
    }
    let cwd = mount_path(&plan.cwd)?;
    push(&["--workdir", cwd]);
    let program = plan
        .program
        .to_str()
        .ok_or_else(|| ContainerError::UnsupportedPath {
            path: plan.program.clone(),
            reason: "not UTF-8",
        })?;
    push(&["--entrypoint", program]);
    // `--` ends the engine's options: the image and the arguments follow verbatim.
    push(&["--", &container.image]);
    for (index, arg) in plan.argv.iter().enumerate().skip(1) {
        if arg.contains('\0') {
            return Err(ContainerError::NulInArgument { index });
        }
        a.push(arg.clone());
    }
    Ok(a)
}

#[cfg(all(test, target_os = "linux"))]
mod e2e_tests;
#[cfg(test)]
mod tests;
