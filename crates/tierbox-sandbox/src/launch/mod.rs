//! Starting sandboxed processes, shared by every Linux backend: Tier B's program, the
//! native Tier C sandbox's pid 1, and the helpers (`bwrap`, a container engine's client)
//! that other backends start.
//!
//! - `sys`: the child itself — `clone(CLONE_VM | CLONE_VFORK | CLONE_PIDFD)` and the
//!   real calls of the ordered setup it runs before `execve` (module docs there; the
//!   order is `prefix`'s, then [`crate::linux::exec`]'s), and the process-level system
//!   calls the supervisor makes (pidfds, signals, fd passing);
//! - [`slots`]: warm launch slots (a run's private `TMPDIR`, landlock ruleset and cgroup),
//!   and this module's cgroup slot for helpers (`cgroup_slot`);
//! - the launcher threads below: where a child is cloned (the unarmed launcher, or the
//!   calling thread); Tier B's armed launcher threads are `tier_b::launcher`;
//! - [`reaper`]: reaping a run's last process off the caller's path;
//! - [`mediate`]: the supervisor's side of chmod mediation (seccomp user notification);
//! - [`LaunchOptions`], [`LaunchError`]: what every backend's launch takes and fails with.
//!
//! Invariants:
//! - `PR_SET_PDEATHSIG` fires when the *thread* that created the child exits, so a child
//!   is cloned on a long-lived launcher thread that never exits, or on the calling
//!   thread (only when the caller's thread supervises the run for its whole life).
//! - What every Tier B child would otherwise redo identically is done once by an armed
//!   launcher thread that clones it (`tier_b::launcher`): such threads only ever clone
//!   Tier B programs, never a helper such as `bwrap`, which needs its capabilities after
//!   exec.

pub(crate) mod exit;
mod helper;
mod launcher;
mod layers;
mod limits;
pub mod mediate;
mod owner;
pub(crate) mod pipes;
mod prefix;
pub(crate) mod private_ns;
pub mod reaper;
mod resources;
pub mod slots;
#[allow(unsafe_code)]
pub(crate) mod sys;
pub mod terminal;

use std::ffi::CString;
use std::path::PathBuf;
use std::sync::OnceLock;

use tierbox_policy::Rejection;

pub use exit::ExitInfo;
pub(crate) use helper::{HelperSpawn, data_fd, spawn_helper};
pub(crate) use launcher::{Job, clone_on, serve_jobs};
pub(crate) use layers::require;
pub(crate) use limits::{cgroup_limits, rlimit_report, rlimit64_table};
pub(crate) use owner::own_tmp_left;
pub(crate) use owner::{owned_id, owner_is_gone};
pub use owner::{sweep_orphaned_groups, sweep_orphaned_tmp};
pub(crate) use pipes::{ParentStdio, SpawnedChild, StdioPart, StdioPipes, stdio_pipes};
pub(crate) use resources::{
    LandlockBase, cgroup_fd_array, cgroup_slot, new_slot, unmount_private_tmp,
};
pub use slots::Slot;

/// Why a launch failed.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The plan cannot be carried out on this host under this policy.
    #[error(transparent)]
    Rejected(#[from] Rejection),
    /// Preparing the launch failed in the supervisor.
    #[error("{what}: {source}")]
    Setup {
        /// What was being prepared.
        what: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The Tier C native sandbox could not be set up.
    #[error(transparent)]
    Native(#[from] crate::linux::ns::NativeError),
    /// A setup step failed in the child before exec.
    #[error("sandbox setup failed in the child at {}: {}{}", step.describe(), std::io::Error::from_raw_os_error(*errno), crate::linux::step::hint(*step, *errno))]
    Child {
        /// The step.
        step: crate::linux::step::Step,
        /// Its errno.
        errno: i32,
    },
}

impl LaunchError {
    pub(crate) fn setup(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LaunchError {
        let what = what.into();
        move |source| LaunchError::Setup { what, source }
    }
}

/// Per-launch options that are not part of the Plan.
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    /// Unique id of the run (names the cgroup and the private tmp directory).
    pub run_id: String,
    /// Directory under which the run's private `TMPDIR` is created (0700).
    pub tmp_base: PathBuf,
    /// Clone on the long-lived launcher thread instead of the calling thread. Needed when
    /// the calling thread may exit before the run ends (it would take the run with it).
    /// A Tier B program is cloned on an armed launcher thread (module docs) whenever there
    /// is something to arm (a root supervisor, or seccomp), whatever this says; it
    /// decides for helpers such as `bwrap` and for launches with nothing to arm.
    pub launcher_thread: bool,
    /// Give the program a terminal of this size instead of pipes (`launch::terminal`): its
    /// stdin, stdout and stderr are the terminal's secondary side, its controlling
    /// terminal in a session of its own, and the supervisor holds the primary
    /// ([`crate::contract::RunningSandbox::take_terminal`]). `None`: pipes.
    pub terminal: Option<terminal::TermSize>,
    /// The run's egress proxy terminates TLS for some hosts: the trust bundle the
    /// sandbox finds in its `/tmp` and the variables pointing at it, and the credential
    /// placeholders ([`crate::egress::SandboxTrust`]). `None`: none of it.
    pub trust: Option<std::sync::Arc<crate::egress::SandboxTrust>>,
}

/// Whether the kernel can hand system calls to the supervisor (seccomp user
/// notification, probed once): chmod mediation, and the seccomp argument rules' refusals
/// recorded with their arguments (Tier B, Tier C).
///
/// ```
/// // Linux 5.0+.
/// let _ = tierbox_sandbox::launch::user_notif_available();
/// ```
pub fn user_notif_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(crate::linux::seccomp::probe_user_notif)
}

pub(crate) fn cstring(bytes: &[u8], what: &str) -> Result<CString, LaunchError> {
    CString::new(bytes).map_err(|_| LaunchError::Setup {
        what: format!("{what} contains a NUL byte"),
        source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
    })
}
