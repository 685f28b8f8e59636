//! Tier C through bubblewrap: a [`Plan`] expressed as a `bwrap` argv by a pure function,
//! and the probe that finds a usable `bwrap`.
//!
//! Invariants kept here:
//!
//! - **Pure plan → argv.** [`bwrap_argv`] reads nothing from the host: every host fact it
//!   needs (which paths are directories, files or symlinks) comes in through
//!   [`HostLayout`], and which flags the installed `bwrap` understands through
//!   [`BwrapFeatures`]. The same inputs always give the same argv.
//! - **Every namespace, no privileges.** Always `--unshare-all --unshare-user` (user, pid,
//!   mount, net, ipc, uts and, where possible, cgroup namespaces), `--die-with-parent`,
//!   `--new-session`, `--cap-drop ALL`, a non-root `--uid`/`--gid`, and
//!   `--disable-userns` whenever the probed version has it (0.8.0+). bwrap always sets
//!   `no_new_privs`. Under a root supervisor the user namespace is the supervisor's
//!   (`--userns`, [`BwrapOptions::userns_fd`]) so the sandbox's uid is an unprivileged
//!   host uid rather than the caller's (root); the other namespaces are then listed one
//!   by one.
//! - **Nothing of the host by default.** The root is bwrap's fresh tmpfs, made read-only
//!   (`--remount-ro /`) once every mount point exists. It holds only the Plan's system
//!   paths (read-only), its read-only and writable grants, the workspace (read-write, at
//!   its own path), a fresh `/proc`, bwrap's minimal `/dev` and a size-capped tmpfs `/tmp`.
//!   The argv never contains `--ro-bind / /`, `--bind / /`, `--dev-bind` or `--share-net`,
//!   so the network namespace has loopback only.
//! - **Most specific wins, denial wins last.** Binds are emitted ancestor-first (sorted by
//!   path), so a narrower grant or a protected path re-bound inside a wider one takes
//!   effect; on equal paths the read-only bind follows the writable one. `deny_read`
//!   covers come after every bind.
//! - **Protected paths cannot be written, created or swapped** (see `protected_mounts`
//!   for the per-case rule): an existing directory or file is re-bound read-only; the
//!   first missing component is covered with an empty read-only tmpfs, so neither it nor
//!   anything below it can be created; a symlink is pinned by re-binding its parent
//!   read-only, because bwrap's `mount(2)` follows symlinks and cannot cover one. A case
//!   that cannot be expressed is an error ([`BwrapError::ProtectedPathNotCoverable`]),
//!   never a silent omission.
//! - **The environment is exactly the Plan's** (`--clearenv`, then one `--setenv` per
//!   entry) plus the sandbox's own `TMPDIR`/`TMP`/`TEMP` (`/tmp`, unless the Plan sets
//!   them) and `HOME=/tmp/home` when the Plan asks for a private home — the same additions
//!   Tier B makes. bwrap itself adds `PWD` (the working directory) and nothing else.
//!
//! What this module does not do: limits. Memory, pids and CPU come from the supervisor's
//! per-run cgroup, which the caller puts `bwrap` in before it runs (bwrap and everything
//! in the sandbox inherit it), and rlimits set on the `bwrap` process are inherited the
//! same way. Seccomp is the caller's filter, passed as an fd ([`BwrapOptions::seccomp_fd`],
//! built with [`crate::linux::seccomp::SeccompProgram::to_bytes`]); bwrap installs it last,
//! after its own setup.
//!
//! Host side effect: bwrap creates mount points that do not exist yet. For covers of
//! missing protected components those lie in the host's workspace (an empty directory,
//! e.g. `.git`); [`host_mount_points`] lists them and [`remove_host_mount_points`] removes
//! them after the run when they are still empty.

use crate::linux::mounts::{PROC_MASKED, dev_shm_size_bytes};
use crate::placeholders::Observer;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tierbox_policy::DevShm;
use tierbox_policy::plan::{FsPlan, Plan};

/// Name of this backend in outcomes and attestations.
pub const BACKEND: tierbox_policy::enforcement::BackendId =
    tierbox_policy::enforcement::BackendId::TierCBwrap;
/// [`BACKEND`]'s name.
pub const BACKEND_NAME: &str = BACKEND.name();

/// The oldest bubblewrap this backend accepts: 0.5.0 added `--clearenv`, the newest flag
/// in the fixed part of the argv (`--unshare-all`, `--die-with-parent`, `--new-session`,
/// `--cap-drop`, `--hostname`, `--remount-ro`, `--seccomp` are all older). Newer flags
/// are used only when the probed version has them (see [`BwrapFeatures`]).
pub const MIN_BWRAP_VERSION: BwrapVersion = BwrapVersion::new(0, 5, 0);
/// First version with `--size` for `--tmpfs` (bubblewrap PR #509).
const SIZE_SINCE: BwrapVersion = BwrapVersion::new(0, 7, 0);
/// First version with `--disable-userns` (and `--assert-userns-disabled`).
const DISABLE_USERNS_SINCE: BwrapVersion = BwrapVersion::new(0, 8, 0);
/// First version with `--argv0`.
const ARGV0_SINCE: BwrapVersion = BwrapVersion::new(0, 9, 0);

/// Where distributions install bwrap; tried before `PATH`.
const DEFAULT_BWRAP_PATH: &str = "/usr/bin/bwrap";

/// Wall-clock bound on each probe spawn (`bwrap --version`, the user-namespace check), so
/// a hung bwrap (e.g. stuck on a stalled mount) cannot block tier selection.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a probe spawn is polled for exit while waiting for [`PROBE_TIMEOUT`].
const PROBE_POLL_INTERVAL: Duration = Duration::from_millis(5);
/// Bytes of a probe spawn's stdout and stderr kept (each); the rest is discarded, so a
/// misbehaving binary cannot make the probe buffer without bound.
const PROBE_OUTPUT_MAX_BYTES: u64 = 4096;

/// Longest hostname the kernel accepts (`HOST_NAME_MAX`), in bytes.
pub const HOST_NAME_MAX_BYTES: usize = 64;

/// Default uid and gid inside the sandbox: the usual first unprivileged user. bwrap maps
/// this single id to the caller's real uid/gid; every other id is unmapped.
pub const DEFAULT_SANDBOX_ID: u32 = 1000;
/// Default hostname inside the sandbox (its own uts namespace).
pub const DEFAULT_HOSTNAME: &str = "tierbox";
/// Default size cap of the sandbox's `/tmp` tmpfs, in bytes (256 MiB). Bounds how much
/// memory a run can pin in `/tmp`; pages written there are also charged to the run's
/// memory cgroup. `/dev/shm` is a tmpfs of its own, sized as the native backend's
/// ([`dev_shm_size_bytes`]).
pub const DEFAULT_TMP_SIZE_BYTES: u64 = 256 * 1024 * 1024;

/// `tierbox-init`'s program mode: `tierbox-init --run PROGRAM ARGV0 [ARGS...]`.
const INIT_RUN_FLAG: &str = "--run";

/// `tierbox-init`'s program mode with a seccomp filter stacked on the program:
/// `tierbox-init --run-stacked FD SOCK LOG PROGRAM ARGV0 [ARGS...]` (see
/// [`StackedFilter`]).
const INIT_RUN_STACKED_FLAG: &str = "--run-stacked";

/// `tierbox-init --alive FD --run…` ([`BwrapOptions::alive_fd`]).
const INIT_ALIVE_FLAG: &str = "--alive";

/// The sandbox's private temporary directory (a fresh tmpfs).
const SANDBOX_TMP: &str = "/tmp";
/// The private `HOME` when the Plan asks for one: inside the tmpfs `/tmp`, so it is empty,
/// writable and gone after the run.
const SANDBOX_HOME: &str = "/tmp/home";
/// Environment variables pointing at the temporary directory, set to [`SANDBOX_TMP`] when
/// the Plan does not set them (as Tier B does with its private tmp).
const TMP_VARS: &[&str] = &["TMPDIR", "TMP", "TEMP"];
/// Paths the sandbox mounts itself; a grant at or above one of them would hide it.
const FIXED_MOUNTS: &[&str] = &["/proc", "/dev", "/tmp"];
/// Top-level directories that are often symlinks into `/usr` (merged-/usr systems); the
/// user-namespace check reproduces them so `/usr/bin/true` can find its libraries.
const MERGED_USR_LINKS: &[&str] = &["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"];
/// Candidates for the program the user-namespace check runs.
const TRUE_CANDIDATES: &[&str] = &["/usr/bin/true", "/bin/true"];

/// Kernel settings that disable user namespaces, read when the check fails.
const USERNS_SYSCTLS: &[&str] = &[
    "/proc/sys/kernel/unprivileged_userns_clone",
    "/proc/sys/user/max_user_namespaces",
    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
];

/// Why bwrap cannot be used, or a Plan cannot be expressed as a bwrap argv.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BwrapError {
    /// No `bwrap` binary was found.
    #[error(
        "bubblewrap (bwrap) not found (searched: {}); install it: `apt-get install bubblewrap` (Debian, Ubuntu), `dnf install bubblewrap` (Fedora, RHEL), `pacman -S bubblewrap` (Arch)",
        display_paths(searched)
    )]
    NotFound {
        /// Every path that was tried.
        searched: Vec<PathBuf>,
    },
    /// The installed bwrap is older than [`MIN_BWRAP_VERSION`].
    #[error(
        "bwrap {version} is too old: tierbox needs bubblewrap {minimum} or newer (for --clearenv); upgrade the bubblewrap package"
    )]
    TooOld {
        /// The installed version.
        version: BwrapVersion,
        /// The minimum.
        minimum: BwrapVersion,
    },
    /// bwrap exists but cannot run, report its version or create a sandbox here.
    #[error("bwrap is unusable: {reason}{}", stderr_suffix(stderr))]
    Unusable {
        /// What failed and, when known, the likely cause and fix.
        reason: String,
        /// What bwrap printed on stderr (bounded), possibly empty.
        stderr: String,
    },
    /// The Plan (or a host fact about it) has something a bwrap argv cannot carry.
    #[error("plan cannot be expressed as a bwrap argv: {what}")]
    PlanNotExpressible {
        /// What, naming the value.
        what: String,
    },
    /// A protected path cannot be kept read-only with bwrap's mount operations.
    #[error("protected path {} cannot be enforced with bwrap: {reason}", path.display())]
    ProtectedPathNotCoverable {
        /// The protected path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A [`BwrapOptions`] value is out of range.
    #[error("bwrap option {option} is invalid: {reason}")]
    InvalidOption {
        /// The option's field name.
        option: &'static str,
        /// Why, naming the value.
        reason: String,
    },
}

fn display_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn stderr_suffix(stderr: &str) -> String {
    let trimmed = stderr.trim();
    if trimmed.is_empty() {
        String::new()
    } else {
        format!("; bwrap said: {trimmed}")
    }
}

/// A bubblewrap version, `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BwrapVersion {
    /// Major.
    pub major: u32,
    /// Minor.
    pub minor: u32,
    /// Patch.
    pub patch: u32,
}

impl BwrapVersion {
    /// The version `major.minor.patch`.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

    /// Parses `bwrap --version` output (`bubblewrap 0.8.0`); a missing patch is 0 and a
    /// suffix after the numbers (`0.11.0-rc1`) is ignored.
    pub fn parse_version_output(text: &str) -> Option<Self> {
        let rest = text.trim().strip_prefix("bubblewrap")?.trim_start();
        let word = rest.split_whitespace().next()?;
        let mut parts = word.split('.').map(|p| {
            let digits: String = p.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u32>().ok()
        });
        let major = parts.next()??;
        let minor = parts.next()??;
        let patch = parts.next().flatten().unwrap_or(0);
        Some(Self::new(major, minor, patch))
    }
}

impl std::fmt::Display for BwrapVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The optional flags the installed bwrap understands. The locked-down setting is the one
/// [`BwrapFeatures::for_version`] derives: every protective flag the version has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BwrapFeatures {
    /// `--disable-userns` (0.8.0+): no further user namespaces inside the sandbox, on top
    /// of the seccomp filter's namespace rules.
    pub disable_userns: bool,
    /// `--size` before `--tmpfs` (0.7.0+, and not when bwrap is setuid): caps `/tmp`.
    /// Without it `/tmp` is bounded only by the run's memory cgroup.
    pub tmpfs_size: bool,
    /// `--argv0` (0.9.0+): keeps the Plan's `argv[0]`. Without it the program runs with
    /// its absolute path as `argv[0]` (bwrap execs `argv[0]` of its command).
    pub argv0: bool,
}

impl BwrapFeatures {
    /// What `version` supports; `setuid` is whether the binary is installed setuid root
    /// (bwrap refuses `--size` then).
    pub const fn for_version(version: BwrapVersion, setuid: bool) -> Self {
        Self {
            disable_userns: ge(version, DISABLE_USERNS_SINCE),
            tmpfs_size: ge(version, SIZE_SINCE) && !setuid,
            argv0: ge(version, ARGV0_SINCE),
        }
    }
}

const fn ge(a: BwrapVersion, b: BwrapVersion) -> bool {
    a.major > b.major
        || (a.major == b.major && (a.minor > b.minor || (a.minor == b.minor && a.patch >= b.patch)))
}

/// What a host path is (`lstat`, not following a final symlink).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathKind {
    /// Nothing there (or it could not be inspected).
    Missing,
    /// A directory.
    Dir,
    /// Anything else that is not a symlink: regular file, device, fifo, socket.
    File,
    /// A symlink.
    Symlink {
        /// The link text (`readlink`), reproduced verbatim for system paths.
        target: PathBuf,
        /// The fully resolved path when the link resolves (`realpath`), else `None`.
        resolved: Option<PathBuf>,
    },
}

/// The host facts [`bwrap_argv`] needs, gathered beforehand so the argv builder stays pure:
/// the kind of every path the Plan names (system paths, grants, the workspace, each
/// component of each protected path, deny paths) and of every symlink's resolution.
///
/// A path not recorded is treated as [`PathKind::Missing`]: system paths and grants are
/// then skipped, and protected paths covered as missing (if the host disagrees, bwrap
/// fails to mount and the run does not start — fail closed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostLayout {
    entries: BTreeMap<PathBuf, PathKind>,
}

impl HostLayout {
    /// An empty layout (every path missing); add facts with [`HostLayout::with`].
    pub fn new() -> Self {
        Self::default()
    }

    /// The same layout with `path` recorded as `kind` (for tests and callers that already
    /// know the host).
    pub fn with(mut self, path: impl Into<PathBuf>, kind: PathKind) -> Self {
        self.entries.insert(path.into(), kind);
        self
    }

    /// What `path` is; [`PathKind::Missing`] when not recorded.
    pub fn kind(&self, path: &Path) -> &PathKind {
        const MISSING: &PathKind = &PathKind::Missing;
        self.entries.get(path).unwrap_or(MISSING)
    }

    /// Reads the host: `lstat` of every path `plan` names, and of each symlink's
    /// resolution. This is the only host I/O behind [`bwrap_argv`]; call it right before
    /// building the argv. bwrap resolves the paths again at setup time, so a path that
    /// changes kind in between (by the host user: a running sandbox cannot change
    /// protected paths) makes bwrap fail to mount and the run not start.
    pub fn probe(plan: &Plan) -> Self {
        let fs = &plan.filesystem;
        crate::placeholders::observing(|claims| {
            let mut layout = Self::new();
            let direct = fs
                .system_binds()
                .iter()
                .chain(fs.system_covers())
                .chain(fs.read_only_binds())
                .chain(fs.writable_binds())
                .chain(std::iter::once(&plan.workspace))
                .chain(&fs.deny_read);
            for path in direct {
                layout.record(claims, path);
            }
            // Which of the masked proc entries exist (the sandbox's proc is this
            // kernel's, as the host's is).
            for (path, _) in PROC_MASKED {
                layout.record(claims, Path::new(path));
            }
            for protected in &fs.protected {
                let Ok(rel) = protected.strip_prefix(&plan.workspace) else {
                    continue;
                };
                let mut at = plan.workspace.clone();
                for component in rel.components() {
                    at.push(component);
                    if layout.record(claims, &at) != PathKind::Dir {
                        break;
                    }
                }
            }
            layout
        })
    }

    /// Records `path` (and, for a symlink, its resolution); returns its kind.
    fn record(&mut self, claims: &Observer<'_>, path: &Path) -> PathKind {
        let kind = lstat_kind(claims, path);
        if let PathKind::Symlink {
            resolved: Some(resolved),
            ..
        } = &kind
        {
            let resolved_kind = lstat_kind(claims, resolved);
            self.entries.insert(resolved.clone(), resolved_kind);
        }
        self.entries.insert(path.to_path_buf(), kind.clone());
        kind
    }

    /// The layout of the top-level system directories only (`/usr` and the merged-/usr
    /// candidates), for the user-namespace check.
    fn probe_top_level() -> Self {
        crate::placeholders::observing(|claims| {
            let mut layout = Self::new();
            for path in std::iter::once("/usr").chain(MERGED_USR_LINKS.iter().copied()) {
                layout.record(claims, Path::new(path));
            }
            layout
        })
    }
}

fn lstat_kind(claims: &Observer<'_>, path: &Path) -> PathKind {
    // A placeholder a concurrent run claims is missing as far as planning goes.
    let Some(meta) = claims.observe(path, || std::fs::symlink_metadata(path)) else {
        return PathKind::Missing;
    };
    match meta {
        Err(_) => PathKind::Missing,
        Ok(meta) if meta.file_type().is_symlink() => PathKind::Symlink {
            target: std::fs::read_link(path).unwrap_or_default(),
            resolved: std::fs::canonicalize(path).ok(),
        },
        Ok(meta) if meta.is_dir() => PathKind::Dir,
        Ok(_) => PathKind::File,
    }
}

/// Per-run settings that are not part of the Plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BwrapOptions {
    /// An fd, inherited by `bwrap` (not close-on-exec), holding a compiled seccomp filter
    /// (`SeccompProgram::to_bytes`) positioned at its start; bwrap reads it to EOF and
    /// installs it after its own setup, just before exec. `None` runs without a seccomp
    /// layer — the caller must then record that layer as missing.
    pub seccomp_fd: Option<i32>,
    /// The uid inside the sandbox; must not be 0. bwrap maps it to the caller's real uid.
    pub uid: u32,
    /// The gid inside the sandbox; must not be 0. bwrap maps it to the caller's real gid.
    pub gid: u32,
    /// The hostname inside the sandbox's uts namespace: 1 to [`HOST_NAME_MAX_BYTES`]
    /// bytes, no NUL.
    pub hostname: String,
    /// Size cap of the tmpfs `/tmp`, in bytes; must be positive (a tmpfs of size 0 would
    /// be unlimited). Applied only when [`BwrapFeatures::tmpfs_size`] is set.
    pub tmp_size_bytes: u64,
    /// Flags the installed bwrap understands (from [`BwrapInfo::features`]).
    pub features: BwrapFeatures,
    /// Host facts about the Plan's paths (from [`HostLayout::probe`]).
    pub host: HostLayout,
    /// `strict` egress with an allowlist: bwrap is started in a network namespace of the
    /// supervisor's (loopback only) whose `127.0.0.1:port` is the egress proxy, and keeps
    /// it (`--share-net`) instead of making an empty one; the proxy variables point
    /// there. Required when the plan needs the proxy, refused otherwise.
    pub egress_proxy_port: Option<u16>,
    /// An fd, inherited by `bwrap`, of a user namespace the (root) supervisor made for the
    /// run, joined with `--userns` instead of `--unshare-user`: its maps put the sandbox's
    /// uid and gid on an unprivileged host identity (see
    /// [`crate::linux::identity::SandboxIdentity::bwrap_maps`]). The caller also clears
    /// bwrap's supplementary groups. `None`: bwrap makes its own user namespace, mapping
    /// the sandbox's uid to the caller's.
    pub userns_fd: Option<i32>,
    /// An fd, inherited by `bwrap`, holding [`bwrap_env_args`] (read with `--args`), so the
    /// environment's values stay out of bwrap's command line (`/proc/<pid>/cmdline` is
    /// readable by every process of the host, a Tier B run included). `None` puts the
    /// `--setenv` arguments in the argv itself.
    pub env_args_fd: Option<i32>,
    /// An fd, inherited by `bwrap` and the sandbox, holding the `tierbox-init` image
    /// ([`crate::linux::ns::init::image_fd`]): the sandbox's pid 1 is then `tierbox-init
    /// --run PROGRAM ARGV...` (bwrap `--as-pid-1`), which makes itself non-dumpable before
    /// it starts the program, instead of bwrap's own init, which stays dumpable (a
    /// program could write its memory through `/proc/1/mem`). `None` keeps bwrap's init.
    pub init_fd: Option<i32>,
    /// A seccomp program `tierbox-init --run-stacked` stacks on the program, on top of
    /// bwrap's [`BwrapOptions::seccomp_fd`]. Needs [`BwrapOptions::init_fd`] and
    /// [`BwrapOptions::seccomp_fd`].
    pub stacked_filter: Option<StackedFilter>,
    /// An fd, inherited by `bwrap` and `tierbox-init`: the read end of a pipe whose only
    /// write end the supervisor holds (`tierbox-init --alive FD`). pid 1 re-arms its
    /// death signal, which bwrap's switch to the sandbox's ids cleared, and ends at once
    /// when the pipe has already hung up (the supervisor died before). Needs
    /// [`BwrapOptions::init_fd`].
    pub alive_fd: Option<i32>,
}

/// A seccomp program `tierbox-init` stacks on the program ([`BwrapOptions::stacked_filter`]),
/// which bwrap cannot do: attached with `SECCOMP_FILTER_FLAG_LOG`, so the kernel's audit
/// subsystem records what it refuses (bwrap attaches its filter without the flag), and
/// with a user-notification listener, so the calls it hands off reach the supervisor.
///
/// ```
/// use tierbox_sandbox::bwrap::StackedFilter;
///
/// let logged = StackedFilter { fd: 7, listener_sock: None, log: true };
/// assert_eq!(logged.init_args(), ["7", "0", "1"]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StackedFilter {
    /// An fd, inherited by `bwrap` and `tierbox-init`, holding the compiled program.
    pub fd: i32,
    /// An inherited unix socket over which the program sends the filter's listener to
    /// the supervisor before it is exec'd; `None`: no listener.
    pub listener_sock: Option<i32>,
    /// Attach with `SECCOMP_FILTER_FLAG_LOG`.
    pub log: bool,
}

impl StackedFilter {
    /// `FD SOCK LOG` of `tierbox-init --run-stacked` (`SOCK` 0: no listener).
    pub fn init_args(&self) -> [String; 3] {
        [
            self.fd.to_string(),
            self.listener_sock.unwrap_or(0).to_string(),
            u8::from(self.log).to_string(),
        ]
    }
}

impl BwrapOptions {
    /// Options for a run: no seccomp fd (set one), uid and gid [`DEFAULT_SANDBOX_ID`],
    /// hostname [`DEFAULT_HOSTNAME`], `/tmp` capped at [`DEFAULT_TMP_SIZE_BYTES`].
    pub fn new(features: BwrapFeatures, host: HostLayout) -> Self {
        Self {
            seccomp_fd: None,
            uid: DEFAULT_SANDBOX_ID,
            gid: DEFAULT_SANDBOX_ID,
            hostname: DEFAULT_HOSTNAME.to_owned(),
            tmp_size_bytes: DEFAULT_TMP_SIZE_BYTES,
            features,
            host,
            egress_proxy_port: None,
            userns_fd: None,
            env_args_fd: None,
            init_fd: None,
            stacked_filter: None,
            alive_fd: None,
        }
    }

    fn check(&self) -> Result<(), BwrapError> {
        let invalid = |option, reason: String| Err(BwrapError::InvalidOption { option, reason });
        if self.uid == 0 {
            return invalid(
                "uid",
                "uid 0 would make the run root inside the sandbox".into(),
            );
        }
        if self.gid == 0 {
            return invalid(
                "gid",
                "gid 0 would make the run root inside the sandbox".into(),
            );
        }
        if self.hostname.is_empty()
            || self.hostname.len() > HOST_NAME_MAX_BYTES
            || self.hostname.contains('\0')
        {
            return invalid(
                "hostname",
                format!(
                    "{:?} must be 1 to {HOST_NAME_MAX_BYTES} bytes without NUL",
                    self.hostname
                ),
            );
        }
        if self.tmp_size_bytes == 0 {
            return invalid(
                "tmp_size_bytes",
                "0 would mean an unlimited tmpfs".to_owned(),
            );
        }
        if self.seccomp_fd.is_some_and(|fd| fd < 0) {
            return invalid("seccomp_fd", format!("{:?} is negative", self.seccomp_fd));
        }
        if self.env_args_fd.is_some_and(|fd| fd < 0) {
            return invalid("env_args_fd", format!("{:?} is negative", self.env_args_fd));
        }
        if self.userns_fd.is_some_and(|fd| fd < 0) {
            return invalid("userns_fd", format!("{:?} is negative", self.userns_fd));
        }
        if let Some(fd) = self.alive_fd {
            if fd <= 0 {
                return invalid("alive_fd", format!("{fd} is not a positive fd"));
            }
            if self.init_fd.is_none() {
                return invalid(
                    "alive_fd",
                    "the alive pipe needs tierbox-init (init_fd)".into(),
                );
            }
        }
        if self.init_fd.is_some_and(|fd| fd < 0) {
            return invalid("init_fd", format!("{:?} is negative", self.init_fd));
        }
        if let Some(f) = self.stacked_filter {
            if f.fd <= 0 || f.listener_sock.is_some_and(|s| s <= 0) {
                return invalid("stacked_filter", format!("{f:?}: the fds must be positive"));
            }
            if !f.log && f.listener_sock.is_none() {
                return invalid(
                    "stacked_filter",
                    "a stacked filter that neither logs nor hands off adds nothing".to_owned(),
                );
            }
            if self.init_fd.is_none() || self.seccomp_fd.is_none() {
                return invalid(
                    "stacked_filter",
                    "a stacked filter needs tierbox-init (init_fd) and bwrap's filter (seccomp_fd)"
                        .to_owned(),
                );
            }
        }
        Ok(())
    }
}

/// One mount-namespace step, before rendering.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    /// `--symlink TARGET PATH`: a system symlink reproduced verbatim.
    Symlink { target: PathBuf },
    /// `--bind PATH PATH`.
    BindRw,
    /// `--ro-bind PATH PATH`.
    BindRo,
    /// `--tmpfs PATH --remount-ro PATH`: an empty read-only directory.
    EmptyRo,
    /// `--ro-bind PATH PATH` of a placeholder file the supervisor creates on the host
    /// first: empty, or holding what git must read in it (a missing `.git/commondir`:
    /// `.`).
    PlaceholderRo,
}

/// A hidden path, rendered after every bind.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Deny {
    /// `--tmpfs PATH --remount-ro PATH`.
    Dir(PathBuf),
    /// `--ro-bind /dev/null PATH` (bound `nodev`, so it cannot even be opened).
    File(PathBuf),
}

/// Builds the `bwrap` argv (without the program name `bwrap` itself) that carries out
/// `plan`: namespaces and privileges first, then the environment, the fixed mounts
/// (`/proc`, `/dev`, `/tmp`), the binds ancestor-first, the protected-path and
/// `deny_read` covers, `--remount-ro /`, `--chdir`, `--seccomp`, and after `--` the
/// program and its arguments.
///
/// Pure: reads only `plan` and `opts` (host facts come in `opts.host`).
pub fn bwrap_argv(plan: &Plan, opts: &BwrapOptions) -> Result<Vec<OsString>, BwrapError> {
    opts.check()?;
    let mounts = mount_steps(plan, &opts.host)?;
    let denies = deny_steps(plan, &opts.host, &mounts);
    let env = sandbox_env(plan, opts.egress_proxy_port)?;

    let mut argv = Argv::default();
    // Namespaces and privileges. `--unshare-user` explicitly: bwrap skips the automatic
    // user namespace when run by uid 0, and without it a root caller keeps every
    // capability inside (observed with Palyra's argv). A prepared user namespace
    // (`--userns`) excludes `--unshare-all`, which implies `--unshare-user-try`: every
    // other namespace is then named.
    match opts.userns_fd {
        None => argv.flags(&["--unshare-all", "--unshare-user"]),
        Some(fd) => {
            argv.flag_value("--userns", fd.to_string());
            argv.flags(&[
                "--unshare-ipc",
                "--unshare-pid",
                "--unshare-net",
                "--unshare-uts",
                "--unshare-cgroup-try",
            ]);
        }
    }
    match (plan.network.needs_proxy(), opts.egress_proxy_port) {
        // The namespace bwrap starts in is the supervisor's loopback-only one.
        (true, Some(_)) => argv.flags(&["--share-net"]),
        (false, None) => {}
        (true, None) => {
            return Err(BwrapError::PlanNotExpressible {
                what: "strict egress with an allowlist needs the egress proxy's network namespace (egress_proxy_port)".to_owned(),
            });
        }
        (false, Some(_)) => {
            return Err(BwrapError::InvalidOption {
                option: "egress_proxy_port",
                reason: "set, but the plan does not use the egress proxy".to_owned(),
            });
        }
    }
    // bwrap refuses `--disable-userns` with `--userns`; the seccomp filter's namespace
    // rules still deny nested user namespaces.
    if opts.features.disable_userns && opts.userns_fd.is_none() {
        argv.flags(&["--disable-userns"]);
    }
    argv.flags(&["--die-with-parent", "--new-session", "--cap-drop", "ALL"]);
    argv.flag_value("--uid", opts.uid.to_string());
    argv.flag_value("--gid", opts.gid.to_string());
    argv.flag_value("--hostname", &opts.hostname);

    // Environment: bwrap applies these while parsing, so `--clearenv` must come first.
    // With `env_args_fd` the `--setenv` triples are read from that fd (`--args`), so the
    // values never appear in bwrap's command line, which any process may read.
    argv.flags(&["--clearenv"]);
    match opts.env_args_fd {
        Some(fd) => argv.flag_value("--args", fd.to_string()),
        None => {
            for (name, value) in &env {
                argv.flags(&["--setenv"]);
                argv.push(name);
                argv.push(value);
            }
        }
    }

    // Fixed mounts before any bind, so a grant below them (e.g. a workspace under the
    // host's /tmp) is bound on top of them rather than hidden by them.
    argv.flag_value("--proc", "/proc");
    // Host-wide state masked as the native backend does (what each entry is here: the
    // supervisor's own /proc may have had one masked by a container runtime already).
    for (path, _) in PROC_MASKED {
        let path = Path::new(path);
        match opts.host.kind(path) {
            PathKind::Missing | PathKind::Symlink { .. } => {}
            PathKind::Dir => argv.empty_ro(path),
            PathKind::File => argv.flag_pair("--ro-bind", "/dev/null", path),
        }
    }
    // The whole /proc read-only (`PROC_READ_ONLY`): bwrap covers /proc/sys and friends
    // only when they are writable for the user it maps, and a directory of mode 555 is
    // not, though the root-owned files under it are.
    argv.flag_value("--remount-ro", "/proc");
    argv.flag_value("--dev", "/dev");
    // The run's own /dev/shm, sized as the native backend's; `dev_shm = "none"`: an empty,
    // read-only one (a grant of the host's is never bound, see `mount_steps`).
    let shm = Path::new(tierbox_policy::plan::DEV_SHM);
    match plan.filesystem.dev_shm {
        DevShm::Private => {
            if opts.features.tmpfs_size {
                argv.flag_value("--size", dev_shm_size_bytes(plan).to_string());
            }
            argv.flag_value("--tmpfs", shm);
        }
        DevShm::None => argv.empty_ro(shm),
    }
    if opts.features.tmpfs_size {
        argv.flag_value("--size", opts.tmp_size_bytes.to_string());
    }
    argv.flag_value("--tmpfs", SANDBOX_TMP);
    if plan.filesystem.private_home {
        argv.flag_value("--dir", SANDBOX_HOME);
    }
    // A grant's ancestors under /tmp would be directories of the run's writable scratch,
    // where a write beside the grant would look as if it reached the host: each gets a
    // small tmpfs of its own, read-only once the grants are mounted in it.
    let skeletons = skeleton_tops(&mounts);
    for top in &skeletons {
        argv.flag_value("--tmpfs", top);
    }

    for (path, step) in &mounts {
        match step {
            Step::Symlink { target } => argv.flag_pair("--symlink", target, path),
            Step::BindRw => argv.flag_pair("--bind", path, path),
            Step::BindRo => argv.flag_pair("--ro-bind", path, path),
            Step::EmptyRo => argv.empty_ro(path),
            Step::PlaceholderRo => argv.flag_pair("--ro-bind", path, path),
        }
    }
    for deny in &denies {
        match deny {
            Deny::Dir(path) => argv.empty_ro(path),
            Deny::File(path) => argv.flag_pair("--ro-bind", "/dev/null", path),
        }
    }
    for top in &skeletons {
        argv.flag_value("--remount-ro", top);
    }
    // Every mount point now exists: freeze the root tmpfs (not recursive, so /tmp,
    // /dev/shm and the writable binds stay writable).
    argv.flag_value("--remount-ro", "/");

    argv.flag_value("--chdir", absolute(&plan.cwd, "cwd")?);
    if let Some(fd) = opts.seccomp_fd {
        argv.flag_value("--seccomp", fd.to_string());
    }
    let program = absolute(&plan.program, "program")?;
    match opts.init_fd {
        // pid 1 is tierbox-init, which execs the program with the Plan's argv whole.
        Some(fd) => {
            argv.flags(&["--as-pid-1", "--"]);
            argv.push(format!("/proc/self/fd/{fd}"));
            if let Some(alive) = opts.alive_fd {
                argv.flags(&[INIT_ALIVE_FLAG]);
                argv.push(alive.to_string());
            }
            match opts.stacked_filter {
                Some(f) => {
                    argv.flags(&[INIT_RUN_STACKED_FLAG]);
                    f.init_args().iter().for_each(|a| argv.push(a));
                }
                None => argv.flags(&[INIT_RUN_FLAG]),
            }
            argv.push(program);
            match plan.argv.first() {
                Some(_) => plan.argv.iter().for_each(|a| argv.push(a)),
                None => argv.push(program),
            }
        }
        None => {
            if opts.features.argv0
                && let Some(arg0) = plan.argv.first()
            {
                argv.flag_value("--argv0", arg0);
            }
            argv.flags(&["--"]);
            argv.push(program);
            for arg in plan.argv.iter().skip(1) {
                argv.push(arg);
            }
        }
    }
    argv.finish()
}

/// The first directory below [`SANDBOX_TMP`] on the way to each mount under it that is
/// not itself mounted: where the mounts' ancestors would be created in the scratch tmpfs.
/// Sorted, outermost only.
fn skeleton_tops(mounts: &[(PathBuf, Step)]) -> Vec<PathBuf> {
    let tmp = Path::new(SANDBOX_TMP);
    let mut tops: BTreeSet<PathBuf> = BTreeSet::new();
    for (path, _) in mounts {
        let Ok(rel) = path.strip_prefix(tmp) else {
            continue;
        };
        let mut parts = rel.components();
        let (Some(first), Some(_)) = (parts.next(), parts.next()) else {
            continue;
        };
        let top = tmp.join(first);
        if !mounts.iter().any(|(p, _)| *p == top) {
            tops.insert(top);
        }
    }
    tops.into_iter().collect()
}

/// The directories bwrap will create in the host's filesystem for `plan`: the covers of
/// missing protected components (e.g. `<workspace>/.git`). They are empty mount points;
/// remove them after the run with [`remove_host_mount_points`].
pub fn host_mount_points(plan: &Plan, opts: &BwrapOptions) -> Result<Vec<PathBuf>, BwrapError> {
    let points: BTreeSet<PathBuf> = protected_mounts(plan, &opts.host)?
        .into_iter()
        .filter(|(_, step)| matches!(step, Step::EmptyRo | Step::PlaceholderRo))
        .map(|(path, _)| path)
        .collect();
    // Sorted ancestor-first; removal walks them in reverse.
    Ok(points.into_iter().collect())
}

/// The entries among [`host_mount_points`] that the supervisor creates on the host
/// itself before bwrap starts ([`crate::placeholders::create`]): `true` for a directory
/// (an empty read-only tmpfs is mounted on it), `false` for a file holding what git must
/// read in it (a `commondir` of `.`: bwrap would create an empty one, which git finds
/// fatal). Made by the supervisor, not by bwrap, whose setup identity may not write a git
/// directory a run created (it belongs to the sandbox's group).
pub fn host_placeholders(
    plan: &Plan,
    opts: &BwrapOptions,
) -> Result<Vec<(PathBuf, bool)>, BwrapError> {
    Ok(protected_mounts(plan, &opts.host)?
        .into_iter()
        .filter_map(|(path, step)| match step {
            Step::EmptyRo => Some((path, true)),
            Step::PlaceholderRo => Some((path, false)),
            _ => None,
        })
        .collect())
}

/// Releases the mount points [`host_mount_points`] listed (claimed by the launch, see
/// [`crate::placeholders`]); each is removed when no concurrent run still covers it, and
/// only if it is still empty, so nothing a concurrent run or the user put there is lost.
/// Returns the ones that could not be removed, with the reason; a point already gone is
/// not an error.
pub fn remove_host_mount_points(points: &[PathBuf]) -> Vec<(PathBuf, String)> {
    crate::placeholders::release(points)
}

/// Whether the bwrap backend can carry out `plan`'s filesystem (its binds, system
/// symlinks, protected covers and denied paths) on this host, without launching
/// anything: the part of [`bwrap_argv`] that depends on the grants.
pub fn check_filesystem(plan: &Plan, host: &HostLayout) -> Result<(), BwrapError> {
    let mounts = mount_steps(plan, host)?;
    deny_steps(plan, host, &mounts);
    Ok(())
}

/// Every bind, system symlink and protected cover, keyed by destination path so they
/// render ancestor-first; on the same path the more restrictive step renders last.
fn mount_steps(plan: &Plan, host: &HostLayout) -> Result<Vec<(PathBuf, Step)>, BwrapError> {
    let fs = &plan.filesystem;
    let mut steps: BTreeSet<(PathBuf, Step)> = BTreeSet::new();
    for path in fs.system_binds() {
        let path = absolute(path, "system path")?;
        match host.kind(path) {
            PathKind::Missing => {}
            PathKind::Dir | PathKind::File => {
                steps.insert((path.to_path_buf(), Step::BindRo));
            }
            PathKind::Symlink { target, .. } => {
                steps.insert((
                    path.to_path_buf(),
                    Step::Symlink {
                        target: target.clone(),
                    },
                ));
            }
        }
    }
    let grants = fs
        .read_only_binds()
        .iter()
        .map(|p| (p, Step::BindRo, "read-only path"))
        .chain(
            fs.writable_binds()
                .iter()
                .map(|p| (p, Step::BindRw, "writable path")),
        )
        .chain(std::iter::once((
            &plan.workspace,
            Step::BindRw,
            "workspace",
        )));
    for (path, step, what) in grants {
        let path = absolute(path, what)?;
        // The sandbox's own /dev/shm serves this grant; the host's is never bound.
        if FsPlan::sandbox_provides(path) {
            continue;
        }
        match host.kind(path) {
            // Validation keeps only existing, canonical grants; a vanished one is skipped.
            PathKind::Missing => {}
            PathKind::Dir | PathKind::File => {
                steps.insert((path.to_path_buf(), step));
            }
            PathKind::Symlink { .. } => {
                return Err(BwrapError::PlanNotExpressible {
                    what: format!(
                        "{what} {} is a symlink (grants must be canonical)",
                        path.display()
                    ),
                });
            }
        }
    }
    if host.kind(&plan.workspace) == &PathKind::Missing {
        return Err(BwrapError::PlanNotExpressible {
            what: format!("workspace {} does not exist", plan.workspace.display()),
        });
    }
    steps.extend(protected_mounts(plan, host)?);

    for (path, _) in &steps {
        if path == Path::new("/") {
            return Err(BwrapError::PlanNotExpressible {
                what: "a bind of / would expose the whole host".to_owned(),
            });
        }
        if let Some(fixed) = FIXED_MOUNTS.iter().find(|f| Path::new(f).starts_with(path)) {
            return Err(BwrapError::PlanNotExpressible {
                what: format!("{} would hide the sandbox's own {fixed}", path.display()),
            });
        }
    }
    Ok(steps.into_iter().collect())
}

/// The steps that keep each protected path read-only. Walking from the workspace root
/// down to the protected path `P`, the first component `C` that is not a directory
/// decides:
///
/// - `P` itself is a directory, or `C` is a file (regular, device, fifo, socket — e.g. a
///   worktree's `.git` file): `--ro-bind` it. A file `C` above `P` also stops `P` from
///   being created (`ENOTDIR`), and the bind stops `C` from being replaced.
/// - `C` is a missing `.git` and `P` lies inside it: nothing (the run may make its own
///   repository, reported after the run).
/// - `C` is missing and is `P` itself (not `.git`): a placeholder file made by the
///   supervisor and bound read-only onto itself, as the native backend covers it (so
///   concurrent runs of both backends agree): empty, or for a `commondir` holding `.`,
///   since git reads it and finds a directory or an empty file fatal.
/// - `C` is missing otherwise: cover `C` with an empty read-only tmpfs. Neither `C` nor anything
///   below it can be created (`mkdir .git` fails with `EEXIST`, `.git/hooks` with
///   `EROFS`), and a mount point cannot be renamed or removed (`EBUSY`). A directory
///   rather than `/dev/null`: bwrap creates the mount point in the host's workspace, and
///   an empty directory left behind is harmless to git where an empty `.git` *file*
///   breaks it; [`host_mount_points`] lists these for removal.
/// - `C` is a symlink: bwrap's `mount(2)` follows symlinks, so nothing can be mounted
///   over the link itself (a cover would land on its target, leaving the link free to be
///   replaced). Instead the link's parent directory is re-bound read-only, which pins
///   the link; and when the link resolves to a place the run may write (the workspace or
///   a writable grant), that target is re-bound read-only too, so the content behind the
///   link cannot change either. This is broader than asked (the whole parent becomes
///   read-only, e.g. all of `.git` for a symlinked `.git/hooks`), never narrower. A
///   symlink directly in the workspace root is an error: pinning it would make the whole
///   workspace read-only.
///
/// A cover inside a directory re-bound read-only by another protected path is dropped:
/// that directory already stops the path from being created.
fn protected_mounts(plan: &Plan, host: &HostLayout) -> Result<Vec<(PathBuf, Step)>, BwrapError> {
    let workspace = absolute(&plan.workspace, "workspace")?;
    let mut steps = Vec::new();
    for protected in &plan.filesystem.protected {
        let not_coverable = |reason: &str| BwrapError::ProtectedPathNotCoverable {
            path: protected.clone(),
            reason: reason.to_owned(),
        };
        let rel = protected
            .strip_prefix(workspace)
            .map_err(|_| not_coverable("it is not inside the workspace"))?;
        if rel.as_os_str().is_empty()
            || !rel.components().all(|c| matches!(c, Component::Normal(_)))
        {
            return Err(not_coverable(
                "it must name an entry strictly inside the workspace, without `.` or `..`",
            ));
        }
        let mut at = workspace.to_path_buf();
        let components: Vec<_> = rel.components().collect();
        for (i, component) in components.iter().enumerate() {
            let parent = at.clone();
            at.push(component);
            let last = i + 1 == components.len();
            match host.kind(&at) {
                PathKind::Dir if !last => {
                    // Pin the directory on the way (a mount point cannot be renamed or
                    // removed), so `mv .git x && mkdir -p .git/hooks` cannot replace it.
                    steps.push((at.clone(), Step::BindRw));
                    continue;
                }
                PathKind::Dir | PathKind::File => steps.push((at.clone(), Step::BindRo)),
                // A protected entry of a repository that does not exist: a run may make
                // its own (reported after the run as `created_git_dirs`).
                PathKind::Missing
                    if tierbox_policy::validate::run_may_create(component.as_os_str(), last) => {}
                // A missing last component is a file, as the native backend makes it (so
                // concurrent runs of both agree on the placeholder), except a git
                // directory: an empty `.git` file is fatal to git, an empty directory is
                // no repository.
                PathKind::Missing if last && component.as_os_str() != ".git" => {
                    steps.push((at.clone(), Step::PlaceholderRo));
                }
                PathKind::Missing => steps.push((at.clone(), Step::EmptyRo)),
                PathKind::Symlink { resolved, .. } => {
                    if parent == workspace {
                        return Err(not_coverable(&format!(
                            "{} is a symlink directly in the workspace root; bwrap cannot mount over a symlink, and pinning it would make the whole workspace read-only",
                            at.display()
                        )));
                    }
                    steps.push((parent.clone(), Step::BindRo));
                    if let Some(target) = resolved
                        && !target.starts_with(&parent)
                        && writable_roots(plan).any(|root| target.starts_with(root))
                        && matches!(host.kind(target), PathKind::Dir | PathKind::File)
                    {
                        steps.push((target.clone(), Step::BindRo));
                    }
                }
            }
            break;
        }
    }
    // A missing path inside a directory that is itself re-bound read-only (a protected
    // directory, or a symlink's pinned parent) cannot be created anyway, and its cover
    // could not be: bwrap would have to create the mount point in a read-only directory.
    let read_only: Vec<PathBuf> = steps
        .iter()
        .filter(|(_, step)| *step == Step::BindRo)
        .map(|(path, _)| path.clone())
        .collect();
    steps.retain(|(path, step)| {
        !matches!(step, Step::EmptyRo | Step::PlaceholderRo)
            || !read_only
                .iter()
                .any(|ro| path.starts_with(ro) && path != ro)
    });
    Ok(steps)
}

/// The paths a run may write: the workspace and the writable grants.
pub(crate) fn writable_roots(plan: &Plan) -> impl Iterator<Item = &PathBuf> {
    std::iter::once(&plan.workspace).chain(
        plan.filesystem
            .writable_binds()
            .iter()
            .filter(|p| !FsPlan::sandbox_provides(p)),
    )
}

/// Covers for `deny_read` paths that are visible in the sandbox: resolved through a
/// symlink (the denial applies to what the path reaches), and only when under a bound
/// path (anything else is absent from the sandbox anyway) and not already inside an
/// empty cover or a denied directory. Directories get an empty read-only tmpfs, files a
/// `nodev` `/dev/null`. Sorted by path.
fn deny_steps(plan: &Plan, host: &HostLayout, mounts: &[(PathBuf, Step)]) -> Vec<Deny> {
    let bound: Vec<&PathBuf> = mounts
        .iter()
        .filter(|(_, s)| matches!(s, Step::BindRo | Step::BindRw))
        .map(|(p, _)| p)
        .collect();
    let mut hidden: Vec<PathBuf> = mounts
        .iter()
        .filter(|(_, s)| *s == Step::EmptyRo)
        .map(|(p, _)| p.clone())
        .collect();
    let mut wanted: BTreeMap<PathBuf, bool> = BTreeMap::new();
    let fs = &plan.filesystem;
    for path in fs.system_covers().iter().chain(&fs.deny_read) {
        let (real, kind) = match host.kind(path) {
            PathKind::Symlink {
                resolved: Some(resolved),
                ..
            } => (resolved.clone(), host.kind(resolved).clone()),
            kind => (path.clone(), kind.clone()),
        };
        if !real.is_absolute() || !bound.iter().any(|b| real.starts_with(b)) {
            continue;
        }
        match kind {
            PathKind::Dir => {
                wanted.insert(real, true);
            }
            PathKind::File => {
                wanted.entry(real).or_insert(false);
            }
            PathKind::Missing | PathKind::Symlink { .. } => {}
        }
    }
    let mut out = Vec::new();
    // Ancestor-first, so a covered directory is seen before anything inside it (which is
    // then already hidden, and could not be mounted on inside the read-only cover).
    for (path, is_dir) in wanted {
        if hidden.iter().any(|h| path.starts_with(h)) {
            continue;
        }
        if is_dir {
            hidden.push(path.clone());
            out.push(Deny::Dir(path));
        } else {
            out.push(Deny::File(path));
        }
    }
    out
}

/// The `--setenv NAME VALUE` arguments of `plan`'s environment, NUL-separated as bwrap's
/// `--args FD` reads them ([`BwrapOptions::env_args_fd`]). Pure.
pub fn bwrap_env_args(plan: &Plan, opts: &BwrapOptions) -> Result<Vec<u8>, BwrapError> {
    let mut out = Vec::new();
    for (name, value) in sandbox_env(plan, opts.egress_proxy_port)? {
        for word in ["--setenv", name.as_str(), value.as_str()] {
            if word.as_bytes().contains(&0) {
                return Err(BwrapError::PlanNotExpressible {
                    what: format!("environment variable {name:?} contains a NUL byte"),
                });
            }
            out.extend_from_slice(word.as_bytes());
            out.push(0);
        }
    }
    Ok(out)
}

/// The sandbox's environment: the Plan's, plus `HOME` for a private home and the
/// temporary-directory variables it does not set; sorted by name.
fn sandbox_env(plan: &Plan, proxy_port: Option<u16>) -> Result<Vec<(String, String)>, BwrapError> {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in &plan.env {
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            return Err(BwrapError::PlanNotExpressible {
                what: format!("environment variable name {name:?} is not valid for setenv"),
            });
        }
        env.insert(name.clone(), value.clone());
    }
    if plan.filesystem.private_home {
        env.insert("HOME".to_owned(), SANDBOX_HOME.to_owned());
    }
    for name in TMP_VARS {
        env.entry((*name).to_owned())
            .or_insert_with(|| SANDBOX_TMP.to_owned());
    }
    if let Some(port) = proxy_port {
        env.extend(crate::egress::proxy_env(port));
    }
    Ok(env.into_iter().collect())
}

fn absolute<'a>(path: &'a Path, what: &str) -> Result<&'a Path, BwrapError> {
    if path.is_absolute() {
        Ok(path)
    } else {
        Err(BwrapError::PlanNotExpressible {
            what: format!("{what} {} is not absolute", path.display()),
        })
    }
}

/// The argv under construction.
#[derive(Debug, Default)]
struct Argv(Vec<OsString>);

impl Argv {
    fn push(&mut self, arg: impl AsRef<OsStr>) {
        self.0.push(arg.as_ref().to_os_string());
    }

    fn flags(&mut self, flags: &[&str]) {
        self.0.extend(flags.iter().map(OsString::from));
    }

    fn flag_value(&mut self, flag: &str, value: impl AsRef<OsStr>) {
        self.push(flag);
        self.push(value);
    }

    fn flag_pair(&mut self, flag: &str, a: impl AsRef<OsStr>, b: impl AsRef<OsStr>) {
        self.push(flag);
        self.push(a);
        self.push(b);
    }

    fn empty_ro(&mut self, path: &Path) {
        self.flag_value("--tmpfs", path);
        self.flag_value("--remount-ro", path);
    }

    /// The argv, checked: an argument cannot carry a NUL byte through `execve`.
    fn finish(self) -> Result<Vec<OsString>, BwrapError> {
        if let Some(i) = self.0.iter().position(|a| a.as_bytes().contains(&0)) {
            return Err(BwrapError::PlanNotExpressible {
                what: format!("argument {i} ({:?}) contains a NUL byte", self.0[i]),
            });
        }
        Ok(self.0)
    }
}

/// A usable bubblewrap on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BwrapInfo {
    /// The binary.
    pub path: PathBuf,
    /// Its version.
    pub version: BwrapVersion,
    /// Whether it is installed setuid root (older distributions).
    pub setuid: bool,
    /// The optional flags it supports.
    pub features: BwrapFeatures,
}

/// Finds bwrap (`path` if given, else `/usr/bin/bwrap`, else the first `bwrap` in
/// `PATH`), runs `bwrap --version`, requires [`MIN_BWRAP_VERSION`], then checks that it
/// can build a sandbox here: user namespace, `/proc` and `/dev`, running `true`. Each
/// spawn has a null stdin, an empty environment and a [`PROBE_TIMEOUT`] bound.
///
/// A failed sandbox check is [`BwrapError::Unusable`] with bwrap's stderr and the likely
/// cause read from the user-namespace sysctls.
pub fn probe_bwrap(path: Option<&Path>) -> Result<BwrapInfo, BwrapError> {
    let bwrap = locate(path)?;
    let (status, stdout, stderr) = run_bounded(&bwrap, &[OsString::from("--version")])?;
    let text = String::from_utf8_lossy(&stdout);
    let version = match BwrapVersion::parse_version_output(&text) {
        Some(v) if status.success() => v,
        _ => {
            return Err(BwrapError::Unusable {
                reason: format!(
                    "`{} --version` gave {status} and unrecognised output {:?}",
                    bwrap.display(),
                    text.trim()
                ),
                stderr: String::from_utf8_lossy(&stderr).into_owned(),
            });
        }
    };
    if version < MIN_BWRAP_VERSION {
        return Err(BwrapError::TooOld {
            version,
            minimum: MIN_BWRAP_VERSION,
        });
    }
    let setuid = std::fs::metadata(&bwrap).is_ok_and(|m| m.permissions().mode() & 0o4000 != 0);
    let features = BwrapFeatures::for_version(version, setuid);

    let Some(true_path) = TRUE_CANDIDATES.iter().map(Path::new).find(|p| p.exists()) else {
        return Err(BwrapError::Unusable {
            reason: format!(
                "no `true` program ({}) to run the sandbox check with",
                TRUE_CANDIDATES.join(", ")
            ),
            stderr: String::new(),
        });
    };
    let check = sandbox_check_argv(&HostLayout::probe_top_level(), features, true_path);
    let (status, _, stderr) = run_bounded(&bwrap, &check)?;
    if !status.success() {
        let sysctls: Vec<(String, Option<String>)> = USERNS_SYSCTLS
            .iter()
            .map(|p| {
                let value = std::fs::read_to_string(p).ok().map(|v| v.trim().to_owned());
                ((*p).to_owned(), value)
            })
            .collect();
        return Err(BwrapError::Unusable {
            reason: format!(
                "`bwrap` could not create a sandbox ({status}): {}",
                userns_diagnosis(&sysctls)
            ),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        });
    }
    Ok(BwrapInfo {
        path: bwrap,
        version,
        setuid,
        features,
    })
}

/// [`probe_bwrap`] with the default search, run once per process; later calls return the
/// first result (bwrap is not installed or removed while a supervisor runs, and the
/// probe costs two spawns).
pub fn probe_bwrap_cached() -> Result<BwrapInfo, BwrapError> {
    static CACHE: OnceLock<Result<BwrapInfo, BwrapError>> = OnceLock::new();
    CACHE.get_or_init(|| probe_bwrap(None)).clone()
}

/// The argv of the sandbox check: the fixed namespace and privilege flags of every run,
/// `/usr` and the merged-/usr links as found on the host, a fresh `/proc` and `/dev`, and
/// `true_path`. Pure.
pub fn sandbox_check_argv(
    host: &HostLayout,
    features: BwrapFeatures,
    true_path: &Path,
) -> Vec<OsString> {
    let mut argv = Argv::default();
    argv.flags(&["--unshare-all", "--unshare-user"]);
    if features.disable_userns {
        argv.flags(&["--disable-userns"]);
    }
    argv.flags(&[
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--clearenv",
    ]);
    for path in std::iter::once("/usr").chain(MERGED_USR_LINKS.iter().copied()) {
        match host.kind(Path::new(path)) {
            PathKind::Dir => argv.flag_pair("--ro-bind", path, path),
            PathKind::Symlink { target, .. } => argv.flag_pair("--symlink", target, path),
            PathKind::File | PathKind::Missing => {}
        }
    }
    argv.flag_value("--proc", "/proc");
    argv.flag_value("--dev", "/dev");
    argv.flags(&["--"]);
    argv.push(true_path);
    argv.0
}

/// The likely reason a user namespace could not be created, from the sysctls that
/// control it (`(path, value)`; `None` when the file does not exist). Pure.
pub fn userns_diagnosis(sysctls: &[(String, Option<String>)]) -> String {
    let mut causes = Vec::new();
    for (path, value) in sysctls {
        let Some(value) = value else { continue };
        let name = path.trim_start_matches("/proc/sys/").replace('/', ".");
        let cause = match (name.as_str(), value.as_str()) {
            ("kernel.unprivileged_userns_clone", "0") => Some(
                "unprivileged user namespaces are disabled; enable with `sysctl -w kernel.unprivileged_userns_clone=1`",
            ),
            ("user.max_user_namespaces", "0") => Some(
                "user namespaces are disabled; enable with `sysctl -w user.max_user_namespaces=15000`",
            ),
            ("kernel.apparmor_restrict_unprivileged_userns", "1") => Some(
                "AppArmor restricts unprivileged user namespaces; install an AppArmor profile for bwrap (Ubuntu: the bwrap-userns-restrict profile) or set it to 0",
            ),
            _ => None,
        };
        if let Some(cause) = cause {
            causes.push(format!("{name} = {value}: {cause}"));
        }
    }
    if causes.is_empty() {
        let seen: Vec<String> = sysctls
            .iter()
            .filter_map(|(p, v)| {
                v.as_ref().map(|v| {
                    format!(
                        "{} = {v}",
                        p.trim_start_matches("/proc/sys/").replace('/', ".")
                    )
                })
            })
            .collect();
        format!(
            "no user-namespace sysctl forbids it ({}); likely a container or seccomp policy that blocks unshare(CLONE_NEWUSER) or mounting /proc",
            if seen.is_empty() {
                "none present".to_owned()
            } else {
                seen.join(", ")
            }
        )
    } else {
        causes.join("; ")
    }
}

fn locate(explicit: Option<&Path>) -> Result<PathBuf, BwrapError> {
    let mut searched = Vec::new();
    let candidates: Vec<PathBuf> = match explicit {
        Some(path) => vec![path.to_path_buf()],
        None => std::iter::once(PathBuf::from(DEFAULT_BWRAP_PATH))
            .chain(
                std::env::var_os("PATH")
                    .map(|p| {
                        std::env::split_paths(&p)
                            .filter(|d| d.is_absolute())
                            .map(|d| d.join("bwrap"))
                            .collect::<Vec<_>>()
                    })
                    .unwrap_or_default(),
            )
            .collect(),
    };
    for candidate in candidates {
        let executable = std::fs::metadata(&candidate)
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
        if executable {
            return Ok(candidate);
        }
        if !searched.contains(&candidate) {
            searched.push(candidate);
        }
    }
    Err(BwrapError::NotFound { searched })
}

/// Runs `program args` with a null stdin, an empty environment and [`PROBE_TIMEOUT`];
/// returns its status and bounded stdout and stderr.
fn run_bounded(
    program: &Path,
    args: &[OsString],
) -> Result<(ExitStatus, Vec<u8>, Vec<u8>), BwrapError> {
    let unusable = |reason: String| BwrapError::Unusable {
        reason,
        stderr: String::new(),
    };
    let mut child = Command::new(program)
        .args(args)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| unusable(format!("cannot run {}: {e}", program.display())))?;
    let deadline = Instant::now() + PROBE_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(PROBE_POLL_INTERVAL),
            Ok(None) => {
                // Our own child, by its handle: kill and reap it.
                let _ = child.kill();
                let _ = child.wait();
                return Err(unusable(format!(
                    "{} did not finish within {} ms",
                    program.display(),
                    PROBE_TIMEOUT.as_millis()
                )));
            }
            Err(e) => {
                return Err(unusable(format!(
                    "waiting for {} failed: {e}",
                    program.display()
                )));
            }
        }
    };
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    if let Some(out) = child.stdout.take() {
        let _ = out.take(PROBE_OUTPUT_MAX_BYTES).read_to_end(&mut stdout);
    }
    if let Some(err) = child.stderr.take() {
        let _ = err.take(PROBE_OUTPUT_MAX_BYTES).read_to_end(&mut stderr);
    }
    Ok((status, stdout, stderr))
}

#[cfg(test)]
#[path = "bwrap_tests.rs"]
mod tests;
