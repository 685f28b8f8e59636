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
//!   The argv never contains `--ro-bind / /`, `--bind / /` or `--dev-bind`, and
//!   `--share-net` only to keep a loopback-only namespace the supervisor made (the egress
//!   proxy, host ports, published ports), so the network namespace has loopback only.
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

mod argv;
mod layout;
mod probe;

use argv::Argv;
pub use argv::*;
pub use layout::*;
pub use probe::*;

/// Name of this backend in outcomes and attestations.
pub const BACKEND: tierbox_policy::enforcement::BackendId =
    tierbox_policy::enforcement::BackendId::TierCBwrap;
/// [`BACKEND`]'s name.
// Other crates' tests match a run's backend against it.
#[cfg(feature = "test-support")]
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
/// First release with `--ro-bind-fd`.
const BIND_FD_SINCE: BwrapVersion = BwrapVersion::new(0, 5, 0);

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
/// `tierbox-init [--alive FD] --pty SOCK ROWS COLS --run…` ([`BwrapOptions::terminal`]).
const INIT_PTY_FLAG: &str = "--pty";

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
    /// `--ro-bind-fd` (0.5.0+): a bind from an fd the supervisor opened and checked (the
    /// granted host sockets). Without it a plan with `egress.unix_sockets` is refused.
    pub bind_fd: bool,
}

impl BwrapFeatures {
    /// What `version` supports; `setuid` is whether the binary is installed setuid root
    /// (bwrap refuses `--size` then).
    pub const fn for_version(version: BwrapVersion, setuid: bool) -> Self {
        Self {
            disable_userns: ge(version, DISABLE_USERNS_SINCE),
            tmpfs_size: ge(version, SIZE_SINCE) && !setuid,
            argv0: ge(version, ARGV0_SINCE),
            bind_fd: ge(version, BIND_FD_SINCE),
        }
    }
}

const fn ge(a: BwrapVersion, b: BwrapVersion) -> bool {
    a.major > b.major
        || (a.major == b.major && (a.minor > b.minor || (a.minor == b.minor && a.patch >= b.patch)))
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
    /// Without the proxy, a plan with host ports or published ports (`egress.host_ports`,
    /// `egress.publish`): bwrap is started in a loopback-only network namespace of the
    /// supervisor's, which holds the host ports' listeners and where the supervisor
    /// connects to the published ones, and keeps it (`--share-net`). Required for such a
    /// plan, refused for any other.
    pub reach_netns: bool,
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
    /// The run is on a terminal: `tierbox-init --pty SOCK ROWS COLS` has the program make
    /// it in the sandbox's own devpts (bwrap's), send the primary over the inherited
    /// socket `SOCK`, and take the secondary as its stdio and controlling terminal in a
    /// session of its own (bwrap's `--new-session` leaves it none). Needs
    /// [`BwrapOptions::init_fd`].
    pub terminal: Option<PtyHandOff>,
    /// The egress proxy terminates TLS for some hosts: bwrap copies the trust bundle
    /// from the inherited fd `fd` into the run's `/tmp` (`--file FD
    /// /tmp/tierbox-ca-bundle.pem`), and the environment points clients at it and holds
    /// the credential placeholders.
    pub trust: Option<TrustHandOff>,
    /// One fd per host socket of the plan (`egress.unix_sockets`, in order), inherited
    /// by `bwrap`: an `O_PATH` fd of exactly the socket the supervisor checked, bound
    /// read-only at its path (`--ro-bind-fd FD PATH`), so nothing swapped in at that path
    /// afterwards is what the sandbox gets.
    pub unix_socket_fds: Vec<i32>,
}

/// The trust bundle's fd and what it holds ([`BwrapOptions::trust`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustHandOff {
    /// The fd bwrap reads the bundle from.
    pub fd: i32,
    /// The bundle and the placeholders.
    pub trust: std::sync::Arc<crate::egress::SandboxTrust>,
}

/// Where the program of a run on a terminal sends its terminal's primary side, and the
/// terminal's size ([`BwrapOptions::terminal`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PtyHandOff {
    /// The socket's fd, inherited by `bwrap` and `tierbox-init` (above stdio).
    pub sock: i32,
    /// The terminal's size when the program starts.
    pub size: crate::launch::terminal::TermSize,
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
            reach_netns: false,
            userns_fd: None,
            env_args_fd: None,
            init_fd: None,
            stacked_filter: None,
            alive_fd: None,
            terminal: None,
            trust: None,
            unix_socket_fds: Vec::new(),
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

#[cfg(test)]
mod tests;
