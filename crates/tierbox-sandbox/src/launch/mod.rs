//! Starting sandboxed processes, shared by every Linux backend: Tier B's program, the
//! native Tier C sandbox's pid 1, and the helpers (`bwrap`, a container engine's client)
//! that other backends start.
//!
//! - `sys`: the child itself — `clone(CLONE_VM | CLONE_VFORK | CLONE_PIDFD)` and the
//!   ordered setup it runs before `execve` (module docs there), and the process-level
//!   system calls the supervisor makes (pidfds, signals, fd passing);
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

pub mod mediate;
pub mod reaper;
pub mod slots;
#[allow(unsafe_code)]
pub(crate) mod sys;

use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU32};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

use tierbox_policy::enforcement::BackendId;
use tierbox_policy::plan::Plan;
use tierbox_policy::{Layer, Rejection, Tier, TierCBackend};

use crate::probe::HostFacts;

use crate::linux::step::Step;

use crate::linux::caps;
use crate::linux::cgroup::{CgroupLimits, RunCgroup};
use crate::linux::exec::null_terminated;
use crate::linux::landlock::{LandlockSpec, PreparedLandlock};
use crate::probe::host_facts;

pub use slots::Slot;
// Tier B's armed launchers, at the paths the Tier B launch and callers name them by.
pub(crate) use crate::tier_b::launcher::{Arming, armed_launcher, slot_launcher};
pub use crate::tier_b::launcher::{MAX_ARMED_LAUNCHERS, MAX_SLOT_LAUNCHERS};
use slots::SlotKey;
pub use sys::{ChildStep, ExitInfo};

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
    #[error("sandbox setup failed in the child at {}: {}{}", step.describe(), std::io::Error::from_raw_os_error(*errno), crate::linux::step::hint(step.step(), *errno))]
    Child {
        /// The step.
        step: ChildStep,
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
    /// Tier B, `strict` egress with an allowlist: the port on `127.0.0.1` where the
    /// caller's egress proxy listens. It becomes the only TCP port the child may connect
    /// to, and the proxy variables ([`crate::egress::proxy_env`]) point to it. Tier C ignores it: its
    /// proxy listener is made inside the sandbox's network namespace
    /// ([`crate::running::RunningSandbox::egress_listener`]).
    pub egress_proxy_port: Option<u16>,
}

/// What every Linux backend's launch returns: [`crate::running::RunningSandbox`].
pub type Launched = crate::running::RunningSandbox;

/// Layers this run needs that the host lacks: each is recorded when the policy allows it
/// to be missing, and rejects the run otherwise.
pub(crate) fn require(
    plan: &Plan,
    tier: Tier,
    layer: Layer,
    available: bool,
    reason: &str,
    missing: &mut Vec<Layer>,
) -> Result<(), Rejection> {
    if available {
        return Ok(());
    }
    if plan.tier.optional_layers.contains(&layer) {
        missing.push(layer);
        return Ok(());
    }
    Err(Rejection::TierUnavailable {
        tier,
        reason: format!(
            "{layer} cannot be enforced: {reason} (a policy that accepts running without it lists \"{layer}\" in tier.optional_layers)"
        ),
    })
}

/// The layers the backend that runs `plan` in `tier` applies, checked against this host:
/// the layers missing and accepted by `tier.optional_layers`, or the rejection for the
/// first missing one the policy requires. The one answer tier selection (so `check`, and
/// `auto`'s fallback) and every Linux launch use, so what `check` reports is what `run`
/// does. (A cgroup that cannot be made at launch is found there.)
pub fn layers_for(tier: Tier, plan: &Plan, facts: &HostFacts) -> Result<Vec<Layer>, Rejection> {
    let backend = plan.tier.backend;
    let abi = facts.landlock_abi.unwrap_or(0);
    // Tier B's own mount namespace (`tier_b::namespace`): its private /tmp and
    // /dev/shm and its protected paths. Without one, an argument naming a path in the
    // run's /tmp would meet the host's: refused, with its fix.
    let tier_b_ns = if tier == Tier::B {
        crate::tier_b::namespace::available(facts)
    } else {
        Ok(())
    };
    if let Err(why) = &tier_b_ns {
        crate::tier_b::namespace::refuse_scratch_args(plan, why)?;
    }
    let deny_in_workspace = plan
        .filesystem
        .deny_read
        .iter()
        .find(|d| d.starts_with(&plan.workspace));
    // Whether each layer the backend applies is available here. The reasons are written
    // only for a missing layer: this runs on every launch (and at selection).
    let checks: &[(Layer, bool)] = match (tier, backend) {
        (Tier::C, TierCBackend::Native) => &[
            (Layer::Seccomp, facts.seccomp),
            (Layer::Landlock, facts.landlock_abi.is_some()),
            (Layer::Cgroup, facts.cgroup.is_usable()),
        ],
        // bwrap has no landlock layer: the mount namespace is its only filesystem boundary.
        (Tier::C, TierCBackend::Bwrap) => &[
            (Layer::Seccomp, facts.seccomp),
            (Layer::Cgroup, facts.cgroup.is_usable()),
            (Layer::Landlock, false),
        ],
        (Tier::C, TierCBackend::Docker | TierCBackend::Podman) => &[(Layer::Landlock, false)],
        _ => &[
            (Layer::Landlock, facts.landlock_abi.is_some()),
            (Layer::LandlockScopes, abi >= 6),
            (Layer::Seccomp, facts.seccomp),
            (Layer::Cgroup, facts.cgroup.is_usable()),
            // A root supervisor mounts the bounded TMPDIR (the launch finds out if it
            // cannot); an unprivileged one cannot.
            (Layer::Disk, facts.euid == 0),
            // Bound read-only in the run's mount namespace, where one can be made (a
            // root supervisor, or user namespaces; the launch finds out if it cannot);
            // a denied path inside the workspace is not covered in Tier B.
            (
                Layer::ProtectedPaths,
                (plan.filesystem.protected.is_empty() || tier_b_ns.is_ok())
                    && deny_in_workspace.is_none(),
            ),
        ],
    };
    let why = |layer: Layer| -> String {
        match (layer, backend) {
            (Layer::Landlock, TierCBackend::Bwrap) if tier == Tier::C => {
                "the bwrap backend applies no landlock layer (tier.backend = \"native\" does)"
                    .to_owned()
            }
            (Layer::Landlock, TierCBackend::Docker | TierCBackend::Podman) if tier == Tier::C => {
                "the container backends apply no landlock layer (tier.backend = \"native\" does)"
                    .to_owned()
            }
            (Layer::Landlock, _) => {
                "landlock is not available (kernel < 5.13 or not in the lsm= list)".to_owned()
            }
            (Layer::LandlockScopes, _) => {
                format!("landlock ABI {abi} < 6 has no signal or abstract-socket scoping")
            }
            (Layer::Seccomp, _) => "seccomp filters are not available".to_owned(),
            (Layer::Cgroup, _) => facts.cgroup.describe(),
            (Layer::ProtectedPaths, _) => match (deny_in_workspace, &tier_b_ns) {
                (Some(denied), _) => format!(
                    "tier b keeps protected paths read-only in the run's mount namespace, but cannot hide a filesystem.deny_read path inside the writable workspace ({}; tier c can)",
                    denied.display()
                ),
                (None, Err(why)) => why.clone(),
                (None, Ok(())) => {
                    "the run has no mount namespace to keep them read-only in".to_owned()
                }
            },
            (Layer::Disk, _) => unbounded_tmp_why(facts),
            (other, _) => format!("{other} is not available"),
        }
    };
    // The filter is what keeps setuid/setgid files and device nodes out of everything the
    // run writes (`seccomp::LEAVE_BEHIND`): without it no policy may run, so listing
    // `seccomp` as optional does not help.
    if !facts.seccomp && checks.iter().any(|&(layer, _)| layer == Layer::Seccomp) {
        return Err(Rejection::TierUnavailable {
            tier,
            reason: "seccomp cannot be enforced: seccomp filters are not available, and without them a run could leave setuid files and device nodes in its workspace for the host's users; no policy accepts that (a kernel built with CONFIG_SECCOMP_FILTER has them)".to_owned(),
        });
    }
    let mut missing = Vec::new();
    for &(layer, available) in checks {
        let reason = if available { String::new() } else { why(layer) };
        require(plan, tier, layer, available, &reason, &mut missing)?;
    }
    Ok(missing)
}

/// The run cgroup's limits: the plan's memory and process limits, and `limits.cpus` as a
/// CFS quota of 100% of one CPU per CPU.
pub(crate) fn cgroup_limits(plan: &Plan) -> CgroupLimits {
    CgroupLimits {
        memory_bytes: plan.limits.memory_bytes,
        max_processes: plan.limits.max_processes,
        cpu_quota_percent: plan.limits.cpus.map(|cpus| cpus.saturating_mul(100)),
    }
}

/// The rlimits of a run: (resource, soft, hard). The CPU hard limit is one second above
/// the soft one, so a process that ignores SIGXCPU is killed a second later.
/// [`rlimits_for`] in the form `prlimit64` takes; Tier C's program gets the same.
pub(crate) fn rlimit64_table(plan: &Plan) -> [(i32, libc::rlimit64); sys::RLIMIT_COUNT] {
    rlimits_for(plan).map(|(r, cur, max)| {
        (
            r,
            libc::rlimit64 {
                rlim_cur: cur,
                rlim_max: max,
            },
        )
    })
}

fn rlimits_for(plan: &Plan) -> [(i32, u64, u64); sys::RLIMIT_COUNT] {
    let l = &plan.limits;
    [
        (
            libc::RLIMIT_CPU as i32,
            l.cpu_time_secs,
            l.cpu_time_secs.saturating_add(1),
        ),
        (libc::RLIMIT_NPROC as i32, l.max_processes, l.max_processes),
        (libc::RLIMIT_NOFILE as i32, l.open_files, l.open_files),
        (
            libc::RLIMIT_FSIZE as i32,
            l.file_size_bytes,
            l.file_size_bytes,
        ),
        (libc::RLIMIT_CORE as i32, 0, 0),
    ]
}

/// A child that has exec'd, with the supervisor's ends of its pipes.
pub(crate) struct SpawnedChild {
    pub(crate) pid: i32,
    pub(crate) pidfd: OwnedFd,
    pub(crate) stdin: Option<OwnedFd>,
    pub(crate) stdout: OwnedFd,
    pub(crate) stderr: OwnedFd,
    pub(crate) chmod_listener: Option<OwnedFd>,
}

/// The pipes of a launch: the child's ends (stdin from `/dev/null` unless the Plan has
/// data) and the supervisor's, each close-on-exec. Shared by Tier B and native Tier C.
pub(crate) struct StdioPipes {
    pub(crate) stdin_child: OwnedFd,
    pub(crate) stdin_parent: Option<OwnedFd>,
    pub(crate) stdout_r: OwnedFd,
    pub(crate) stdout_w: OwnedFd,
    pub(crate) stderr_r: OwnedFd,
    pub(crate) stderr_w: OwnedFd,
}

/// Which of [`StdioPipes`] could not be made, for the caller's error.
#[derive(Debug, Clone, Copy)]
pub(crate) enum StdioPart {
    /// The stdin pipe.
    Stdin,
    /// `/dev/null` for stdin.
    DevNull,
    /// The stdout pipe.
    Stdout,
    /// The stderr pipe.
    Stderr,
}

impl StdioPipes {
    /// Opens the pipes of `plan`; `err` names a failure in the caller's terms.
    pub(crate) fn open<E>(
        plan: &Plan,
        err: impl Fn(StdioPart, std::io::Error) -> E,
    ) -> Result<Self, E> {
        let (stdout_r, stdout_w) = sys::pipe_cloexec().map_err(|e| err(StdioPart::Stdout, e))?;
        let (stderr_r, stderr_w) = sys::pipe_cloexec().map_err(|e| err(StdioPart::Stderr, e))?;
        let (stdin_child, stdin_parent) = match &plan.stdin {
            Some(_) => {
                let (r, w) = sys::pipe_cloexec().map_err(|e| err(StdioPart::Stdin, e))?;
                (r, Some(w))
            }
            None => (
                sys::open_dev_null().map_err(|e| err(StdioPart::DevNull, e))?,
                None,
            ),
        };
        Ok(Self {
            stdin_child,
            stdin_parent,
            stdout_r,
            stdout_w,
            stderr_r,
            stderr_w,
        })
    }
}

/// A trusted helper program (`bwrap`) started like a Tier B child — new session,
/// `PR_SET_PDEATHSIG`, the run's cgroup joined before exec, rlimits, stdio pipes, every
/// other fd closed, `no_new_privs` — but without landlock, seccomp or a capability drop,
/// which the helper applies itself inside the sandbox it builds.
pub(crate) struct HelperSpawn<'a> {
    pub program: &'a Path,
    pub argv: &'a [std::ffi::OsString],
    pub env: &'a [(String, String)],
    /// Fds the helper receives at fixed numbers (3 and up; at most
    /// [`sys::MAX_INHERITED_FDS`]).
    pub inherit: &'a [(BorrowedFd<'a>, i32)],
    /// A network namespace the helper starts in.
    pub netns: Option<&'a OwnedFd>,
    /// Detached trees moved over these paths in a private mount namespace of the
    /// helper's (a root supervisor's idmapped writable grants for bwrap).
    pub mount_moves: &'a [(&'a OwnedFd, &'a Path)],
    /// Drop the supervisor's supplementary groups before exec.
    pub clear_groups: bool,
    /// Start the helper in an audit session of its own (see [`crate::linux::audit`]):
    /// its refused calls are logged and attributed to the run (`None`: no session).
    pub audit_session: Option<crate::linux::audit::SessionWants>,
}

impl HelperSpawn<'_> {
    /// The fields every helper without extras has.
    pub(crate) fn plain<'a>(
        program: &'a Path,
        argv: &'a [std::ffi::OsString],
        env: &'a [(String, String)],
    ) -> HelperSpawn<'a> {
        HelperSpawn {
            program,
            argv,
            env,
            inherit: &[],
            netns: None,
            mount_moves: &[],
            clear_groups: false,
            audit_session: None,
        }
    }
}

/// A memory file (`memfd`, close-on-exec) holding `bytes`, positioned at its start: data a
/// helper reads from an inherited fd to its end (bwrap's `--args`, a container engine's
/// `--env-file /dev/fd/N`), kept out of its command line. Not a pipe: the data may exceed
/// a pipe's buffer, and nothing has to write while the helper reads.
pub(crate) fn data_fd(
    name: &std::ffi::CStr,
    bytes: &[u8],
    what: &str,
) -> Result<OwnedFd, LaunchError> {
    use std::io::{Seek, SeekFrom, Write};
    let setup = |source: std::io::Error| LaunchError::Setup {
        what: format!("memory file for {what}"),
        source,
    };
    let fd = rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC)
        .map_err(|e| setup(e.into()))?;
    let mut file = std::fs::File::from(fd);
    file.write_all(bytes).map_err(setup)?;
    file.seek(SeekFrom::Start(0)).map_err(setup)?;
    Ok(file.into())
}

/// The audit session a helper was started in, when it asked for one.
pub(crate) type HelperAudit =
    Option<Result<crate::linux::audit::AuditSession, crate::linux::audit::NotRecorded>>;

/// Starts `helper` in `slot`'s cgroup with the Plan's stdin and rlimits; see
/// [`HelperSpawn`].
pub(crate) fn spawn_helper(
    plan: &Plan,
    opts: &LaunchOptions,
    slot: &Slot,
    helper: &HelperSpawn<'_>,
) -> Result<(SpawnedChild, HelperAudit), LaunchError> {
    let program = cstring(helper.program.as_os_str().as_bytes(), "helper path")?;
    let argv: Vec<CString> = helper
        .argv
        .iter()
        .map(|a| cstring(a.as_bytes(), "helper argument"))
        .collect::<Result<_, _>>()?;
    let envp: Vec<CString> = helper
        .env
        .iter()
        .map(|(k, v)| cstring(format!("{k}={v}").as_bytes(), "environment entry"))
        .collect::<Result<_, _>>()?;
    let cwd = cstring(b"/", "cwd")?;
    let argv_ptrs = null_terminated(&argv);
    let envp_ptrs = null_terminated(&envp);
    if helper.inherit.len() > sys::MAX_INHERITED_FDS {
        return Err(LaunchError::Setup {
            what: "helper fds".to_owned(),
            source: std::io::Error::other(format!(
                "{} fds to inherit, at most {}",
                helper.inherit.len(),
                sys::MAX_INHERITED_FDS
            )),
        });
    }
    // Sources at INHERIT_SOURCE_MIN_FD or above (see `HelperSetup::inherit`).
    let inherit_sources: Vec<(OwnedFd, i32)> = helper
        .inherit
        .iter()
        .map(|(fd, at)| {
            sys::dup_at_least(*fd, sys::INHERIT_SOURCE_MIN_FD)
                .map(|d| (d, *at))
                .map_err(|source| LaunchError::Setup {
                    what: "dup of an fd for the helper".to_owned(),
                    source,
                })
        })
        .collect::<Result<_, _>>()?;
    let mut inherit = [(-1, -1); sys::MAX_INHERITED_FDS];
    for (slot, (fd, at)) in inherit.iter_mut().zip(&inherit_sources) {
        *slot = (fd.as_raw_fd(), *at);
    }
    let move_paths: Vec<CString> = helper
        .mount_moves
        .iter()
        .map(|(_, path)| cstring(path.as_os_str().as_bytes(), "mount point"))
        .collect::<Result<_, _>>()?;
    let mount_moves: Vec<sys::MountMove> = helper
        .mount_moves
        .iter()
        .zip(&move_paths)
        .map(|((tree, _), path)| sys::MountMove {
            tree: tree.as_raw_fd(),
            path: path.as_ptr(),
        })
        .collect();
    let StdioPipes {
        stdin_child,
        stdin_parent,
        stdout_r,
        stdout_w,
        stderr_r,
        stderr_w,
    } = stdio_pipes(plan)?;
    let (cgroup_fds, n_cgroup_fds) = cgroup_fd_array(slot);
    let facts = host_facts();
    let mut spec = sys::ChildSpec {
        program: program.as_ptr(),
        argv: argv_ptrs.as_ptr(),
        envp: envp_ptrs.as_ptr(),
        cwd: cwd.as_ptr(),
        stdin_fd: stdin_child.as_raw_fd(),
        stdout_fd: stdout_w.as_raw_fd(),
        stderr_fd: stderr_w.as_raw_fd(),
        cgroup_fds,
        n_cgroup_fds,
        rlimits: rlimit64_table(plan),
        drop_privileged: false,
        change_ids: false,
        uid: facts.euid,
        gid: facts.egid,
        last_cap: caps::last_cap(),
        landlock_fd: -1,
        seccomp: std::ptr::null(),
        seccomp_listener_sock: -1,
        parent_pid: sys::getpid(),
        helper: sys::HelperSetup {
            inherit,
            mount_moves: if mount_moves.is_empty() {
                std::ptr::null()
            } else {
                mount_moves.as_ptr()
            },
            n_mount_moves: mount_moves.len(),
            clear_groups: helper.clear_groups,
        },
        keep_caps: true,
        private_ns: std::ptr::null(),
        netns_fd: helper.netns.map_or(-1, |fd| fd.as_raw_fd()),
        // A helper builds its own sandbox: what it applies is logged or not by its own
        // flags (bwrap's filter is not; tierbox-init stacks a logged one).
        log_landlock: false,
        log_seccomp: false,
        audit_session: helper.audit_session.clone(),
        fail_step: AtomicU32::new(0),
        fail_errno: AtomicI32::new(0),
    };
    let cloned = clone_child(opts, &mut spec);
    // The child's ends are closed in the parent whatever happened.
    drop((stdin_child, stdout_w, stderr_w));
    let cloned = cloned?;
    Ok((
        SpawnedChild {
            pid: cloned.pid,
            pidfd: cloned.pidfd,
            stdin: stdin_parent,
            stdout: stdout_r,
            stderr: stderr_r,
            chmod_listener: None,
        },
        cloned.audit,
    ))
}

/// Per-run resources holding only a cgroup (and an empty private tmp, unused): Tier C,
/// whose filesystem, tmp and landlock domain are built inside the sandbox. Reused from the
/// pool like Tier B's slots.
pub(crate) fn cgroup_slot(
    backend: BackendId,
    plan: &Plan,
    opts: &LaunchOptions,
    (uid, gid): (u32, u32),
    missing: &mut Vec<Layer>,
) -> Result<Slot, LaunchError> {
    let facts = host_facts();
    let limits = cgroup_limits(plan);
    let key = SlotKey {
        backend,
        tmp_base: opts.tmp_base.clone(),
        uid,
        gid,
        read_only: Vec::new(),
        read_write: Vec::new(),
        scopes: false,
        tcp_connect_ports: None,
        landlock: false,
        cgroup_limits: limits,
        cgroup: facts.cgroup.is_usable(),
        tmp_bytes: None,
        userns: false,
    };
    match slots::take(&key) {
        Some(slot) => Ok(slot),
        None => new_slot(plan, opts, key, None, &limits, missing),
    }
}

/// Builds fresh per-run resources: the private tmp (with `home/`), the landlock ruleset
/// granting it, and the cgroup.
pub(crate) fn new_slot(
    plan: &Plan,
    opts: &LaunchOptions,
    key: SlotKey,
    landlock_base: Option<LandlockSpec>,
    limits: &CgroupLimits,
    missing: &mut Vec<Layer>,
) -> Result<Slot, LaunchError> {
    let facts = host_facts();
    let tmp = make_private_tmp(&opts.tmp_base, &opts.run_id, key.uid, key.gid)?;
    // Tier B's disk bound: the private tmp (and the `HOME` in it) a tmpfs of its own.
    let bounded = key
        .tmp_bytes
        .map(|bytes| mount_private_tmp(&tmp, bytes, key.uid, key.gid).map(|()| bytes));
    if let Err(e) = make_owned_dir(&tmp.join("home"), key.uid, key.gid) {
        if matches!(bounded, Some(Ok(_))) {
            unmount_private_tmp(&tmp);
        }
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    // A bounded tmp (or, under an unprivileged supervisor, a tmp a user namespace of
    // the run's own binds) is the run's private /tmp, and its shared-memory directory
    // its /dev/shm (`tier_b::mounts`): mounted over /dev/shm, that directory is a mount's
    // root, whose landlock ancestors are /dev's, not the tmp's, so it has a rule of its
    // own, on an inode kept for the slot's life (`slots` empties it in place).
    let shm = tmp.join(crate::tier_b::mounts::SHM_DIR);
    let private = matches!(bounded, Some(Ok(_))) || key.userns;
    if private && let Err(e) = make_owned_dir(&shm, key.uid, key.gid) {
        if matches!(bounded, Some(Ok(_))) {
            unmount_private_tmp(&tmp);
        }
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    let landlock = match landlock_base {
        Some(mut spec) => {
            spec.read_write.push(tmp.clone());
            if private {
                spec.read_write.push(shm);
            }
            Some(
                PreparedLandlock::prepare(&spec).map_err(|e| LaunchError::Setup {
                    what: "landlock ruleset".to_owned(),
                    source: std::io::Error::other(e.to_string()),
                })?,
            )
        }
        None => None,
    };
    let cgroup = if facts.cgroup.is_usable() {
        sweep_orphaned_groups_once();
        match RunCgroup::create(
            &facts.cgroup,
            &format!("{}{}", owner_prefix(), opts.run_id),
            limits,
        ) {
            Ok(cg) => Some(cg),
            Err(e) => {
                // An optional cgroup: the run goes ahead in its tmp, without the group.
                // Tier C runs take their slots here too (`cgroup_slot`).
                let tier = if key.backend == crate::tier_b::BACKEND {
                    Tier::B
                } else {
                    Tier::C
                };
                if let Err(rejection) =
                    require(plan, tier, Layer::Cgroup, false, &e.to_string(), missing)
                {
                    if matches!(bounded, Some(Ok(_))) {
                        unmount_private_tmp(&tmp);
                    }
                    let _ = std::fs::remove_dir_all(&tmp);
                    return Err(rejection.into());
                }
                None
            }
        }
    } else {
        None
    };
    let mut slot = Slot::new(key, tmp, landlock, cgroup);
    match bounded {
        Some(Ok(bytes)) => slot.tmp_bytes = Some(bytes),
        Some(Err(e)) => {
            slot.tmp_unbounded_why =
                format!("the supervisor could not mount a tmpfs for the run's TMPDIR: {e}");
        }
        None => {
            slot.tmp_unbounded_why = unbounded_tmp_why(facts);
        }
    }
    Ok(slot)
}

/// Why an unprivileged supervisor's Tier B run lacks the `disk` layer: its private tmp is
/// not size-bounded, and, where user namespaces are refused, not its `/tmp` either.
fn unbounded_tmp_why(facts: &HostFacts) -> String {
    match crate::tier_b::namespace::available(facts) {
        Ok(()) => "an unprivileged supervisor cannot mount a size-limited TMPDIR for a tier b run: the run's private /tmp and /dev/shm (in a user namespace of its own) are a directory of the supervisor's, bounded per file only (limits.file_size_bytes; tier c bounds its /tmp)".to_owned(),
        Err(why) => format!(
            "an unprivileged supervisor cannot mount a size-limited TMPDIR for a tier b run, nor here give it a private /tmp and /dev/shm ({why}): a program writing /tmp gets EACCES (filesystem.writable += \"/tmp\" grants the host's), and /dev/shm is reachable only as the host's, through filesystem.writable (tier c bounds its /tmp and has its own /dev/shm)"
        ),
    }
}

/// Mounts a tmpfs of `bytes` on the run's private tmp `dir` (just made, owned by the run):
/// mode 0700 owned by `uid:gid`, `nosuid` and `nodev`, so what the run writes there is
/// bounded by `limits.disk_bytes` (`ENOSPC`, and the outcome's `limit_hit: "disk"`).
/// Needs `CAP_SYS_ADMIN` in the host's mount namespace (a root supervisor outside a
/// container that withholds it).
fn mount_private_tmp(dir: &Path, bytes: u64, uid: u32, gid: u32) -> std::io::Result<()> {
    let data = std::ffi::CString::new(format!("size={bytes},mode=700,uid={uid},gid={gid}"))
        .map_err(std::io::Error::other)?;
    rustix::mount::mount(
        "tierbox-tmp",
        dir,
        "tmpfs",
        rustix::mount::MountFlags::NOSUID | rustix::mount::MountFlags::NODEV,
        Some(data.as_c_str()),
    )
    .map_err(std::io::Error::from)
}

/// Detaches the tmpfs on a run's private tmp (its content goes when the last fd on it
/// closes); not an error when nothing is mounted there.
pub(crate) fn unmount_private_tmp(dir: &Path) {
    let _ = rustix::mount::unmount(
        dir,
        rustix::mount::UnmountFlags::DETACH | rustix::mount::UnmountFlags::NOFOLLOW,
    );
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

/// Run groups are named `tierbox-<supervisor pid>.<its start time>-<run id>`, so groups
/// left by a supervisor that died (SIGKILL cannot be handled) can be recognised and swept.
const GROUP_PREFIX: &str = "tierbox-";

fn owner_prefix() -> &'static str {
    static PREFIX: OnceLock<String> = OnceLock::new();
    PREFIX.get_or_init(|| {
        let pid = sys::getpid();
        format!(
            "{GROUP_PREFIX}{pid}.{}-",
            process_start_time(pid).unwrap_or(0)
        )
    })
}

/// Start time of `pid` in clock ticks since boot (`/proc/<pid>/stat` field 22): with the
/// pid it identifies a process across pid reuse.
fn process_start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses; fields after it are
    // plain. Field 22 is the 20th after the closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// `run_id` prefixed with this process's identity, `<pid>.<start>-<run id>`: with
/// `tierbox-` before it, a name [`owner_is_gone`] reads (the container backends' names).
pub(crate) fn owned_id(run_id: &str) -> String {
    let owner = owner_prefix();
    format!("{}{run_id}", &owner[GROUP_PREFIX.len()..])
}

/// Whether the supervisor named in a group name (`tierbox-<pid>.<start>-…`) is gone.
pub(crate) fn owner_is_gone(name: &str) -> bool {
    let Some(owner) = name
        .strip_prefix(GROUP_PREFIX)
        .and_then(|r| r.split('-').next())
    else {
        return false;
    };
    let Some((pid, start)) = owner.split_once('.') else {
        return false;
    };
    let (Ok(pid), Ok(start)) = (pid.parse::<i32>(), start.parse::<u64>()) else {
        return false;
    };
    process_start_time(pid) != Some(start)
}

/// Once per process, before its first run group: remove groups of dead supervisors.
fn sweep_orphaned_groups_once() {
    static SWEPT: OnceLock<()> = OnceLock::new();
    SWEPT.get_or_init(|| {
        sweep_orphaned_groups();
    });
}

/// Kills whatever is left in run groups of supervisors that died without cleaning up, and
/// removes those groups. Runs automatically before a process's first run; returns how many
/// group directories were removed.
pub fn sweep_orphaned_groups() -> usize {
    crate::linux::cgroup::sweep_orphaned(&host_facts().cgroup, GROUP_PREFIX, owner_is_gone)
}

/// Removes the private temporary directories that supervisors which died left under
/// `base` (unmounting a Tier B run's bounded tmpfs first); returns how many. Runs
/// automatically before a process's first run under `base`.
pub fn sweep_orphaned_tmp(base: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(base) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name
            .to_str()
            .is_some_and(|n| n.starts_with(GROUP_PREFIX) && owner_is_gone(n))
        {
            // A Tier B run's bounded tmp is a tmpfs of its own, left mounted when its
            // supervisor was SIGKILLed.
            unmount_private_tmp(&entry.path());
            if std::fs::remove_dir_all(entry.path()).is_ok() {
                removed += 1;
            }
        }
    }
    removed
}

/// Creates `<base>/run-<id>` with mode 0700, owned by the child's uid.
fn make_private_tmp(base: &Path, run_id: &str, uid: u32, gid: u32) -> Result<PathBuf, LaunchError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(base)
        .map_err(LaunchError::setup(format!("create {}", base.display())))?;
    let _ = std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o711));
    static SWEPT: OnceLock<()> = OnceLock::new();
    SWEPT.get_or_init(|| {
        sweep_orphaned_tmp(base);
    });
    let dir = base.join(format!("{}{run_id}", owner_prefix()));
    make_owned_dir(&dir, uid, gid)?;
    Ok(dir)
}

/// Creates `dir` with mode 0700, owned by `uid:gid`.
fn make_owned_dir(dir: &Path, uid: u32, gid: u32) -> Result<(), LaunchError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(LaunchError::setup(format!("create {}", dir.display())))?;
    std::os::unix::fs::chown(dir, Some(uid), Some(gid))
        .map_err(LaunchError::setup(format!("chown {}", dir.display())))
}

// ---- launcher threads -----------------------------------------------------------------

pub(crate) struct Job {
    spec: sys::SendSpec,
    reply: mpsc::SyncSender<Result<sys::Cloned, (Step, i32)>>,
}

fn launcher() -> &'static Mutex<mpsc::Sender<Job>> {
    static LAUNCHER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    LAUNCHER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        let spawned = std::thread::Builder::new()
            .name("tierbox-launcher".to_owned())
            .spawn(move || {
                sys::block_all_signals_on_this_thread();
                serve_jobs(rx);
            });
        if let Err(e) = spawned {
            // Without a launcher every launch fails with a clear error below.
            eprintln!("tierbox: cannot start the launcher thread: {e}");
        }
        Mutex::new(tx)
    })
}

/// Serves a launcher thread's jobs until every sender is gone: each job's child cloned
/// on one reused stack, and the result sent back.
pub(crate) fn serve_jobs(rx: mpsc::Receiver<Job>) {
    let mut stack = sys::ChildStack::new();
    while let Ok(job) = rx.recv() {
        let result = sys::clone_job(&job.spec, &mut stack);
        let _ = job.reply.send(result);
    }
}

/// Clones on the calling thread, with every signal blocked around the clone.
fn caller_clone(spec: &mut sys::ChildSpec) -> Result<sys::Cloned, (Step, i32)> {
    thread_local! {
        static STACK: std::cell::RefCell<Option<sys::ChildStack>> = const { std::cell::RefCell::new(None) };
    }
    STACK.with(|cell| {
        let mut guard = cell
            .try_borrow_mut()
            .map_err(|_| (Step::None, libc::EBUSY))?;
        let stack = guard.get_or_insert_with(sys::ChildStack::new);
        sys::with_all_signals_blocked(|| sys::clone_and_exec(spec, stack))
    })
}

/// Clones on the launcher thread and waits for the result.
pub(crate) fn launcher_clone(spec: &mut sys::ChildSpec) -> Result<sys::Cloned, (Step, i32)> {
    submit(&tx_of(launcher())?, spec)
}

fn tx_of(launcher: &Mutex<mpsc::Sender<Job>>) -> Result<mpsc::Sender<Job>, (Step, i32)> {
    launcher
        .lock()
        .map(|tx| tx.clone())
        .map_err(|_| (Step::None, libc::EIO))
}

/// Hands `spec` to a launcher thread and waits until it has cloned (the child has
/// exec'd or failed).
fn submit(tx: &mpsc::Sender<Job>, spec: &mut sys::ChildSpec) -> Result<sys::Cloned, (Step, i32)> {
    let (reply_tx, reply_rx) = mpsc::sync_channel(1);
    let job = Job {
        spec: sys::SendSpec::new(spec),
        reply: reply_tx,
    };
    tx.send(job).map_err(|_| (Step::None, libc::EIO))?;
    // `spec` stays borrowed until the launcher replies, which it does only after the
    // child has exec'd or exited.
    reply_rx.recv().map_err(|_| (Step::None, libc::EIO))?
}

/// The enforcement report's rlimit lines for `limits` (the five every native backend
/// sets); `nproc_note` follows the `RLIMIT_NPROC` value (e.g. why the kernel ignores it).
pub(crate) fn rlimit_report(
    limits: &tierbox_policy::plan::LimitsPlan,
    nproc_note: &str,
) -> Vec<String> {
    vec![
        format!("RLIMIT_CPU={}s", limits.cpu_time_secs),
        format!("RLIMIT_NPROC={}{nproc_note}", limits.max_processes),
        format!("RLIMIT_NOFILE={}", limits.open_files),
        format!("RLIMIT_FSIZE={}", limits.file_size_bytes),
        "RLIMIT_CORE=0".to_owned(),
    ]
}

pub(crate) fn cstring(bytes: &[u8], what: &str) -> Result<CString, LaunchError> {
    CString::new(bytes).map_err(|_| LaunchError::Setup {
        what: format!("{what} contains a NUL byte"),
        source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
    })
}

/// Clones the child on the launcher thread or the calling thread, as `opts` says.
fn clone_child(
    opts: &LaunchOptions,
    spec: &mut sys::ChildSpec,
) -> Result<sys::Cloned, LaunchError> {
    clone_on(opts, None, spec)
}

/// Clones on `armed` when given, else as [`clone_child`] does.
pub(crate) fn clone_on(
    opts: &LaunchOptions,
    armed: Option<&mpsc::Sender<Job>>,
    spec: &mut sys::ChildSpec,
) -> Result<sys::Cloned, LaunchError> {
    let cloned = match armed {
        Some(tx) => submit(tx, spec),
        None if opts.launcher_thread => launcher_clone(spec),
        None => caller_clone(spec),
    };
    cloned.map_err(|(step, errno)| match ChildStep::of(step) {
        Some(ChildStep::None) => LaunchError::Setup {
            what: "clone".to_owned(),
            source: std::io::Error::from_raw_os_error(errno),
        },
        Some(step) => LaunchError::Child { step, errno },
        None => LaunchError::Setup {
            what: format!("the child's setup at {}", step.describe()),
            source: std::io::Error::from_raw_os_error(errno),
        },
    })
}

pub(crate) fn stdio_pipes(plan: &Plan) -> Result<StdioPipes, LaunchError> {
    StdioPipes::open(plan, |part, source| LaunchError::Setup {
        what: match part {
            StdioPart::Stdin => "pipe for stdin",
            StdioPart::DevNull => "open /dev/null",
            StdioPart::Stdout => "pipe for stdout",
            StdioPart::Stderr => "pipe for stderr",
        }
        .to_owned(),
        source,
    })
}

/// The slot's cgroup attach fds in the child spec's fixed-size form.
pub(crate) fn cgroup_fd_array(slot: &Slot) -> ([libc::c_int; sys::MAX_CGROUP_FDS], usize) {
    let mut fds = [-1; sys::MAX_CGROUP_FDS];
    let mut n = 0;
    if let Some(cg) = slot.cgroup() {
        for (fd_slot, fd) in fds.iter_mut().zip(cg.procs_fds()) {
            *fd_slot = *fd;
            n += 1;
        }
    }
    (fds, n)
}

#[cfg(test)]
mod layer_tests {
    #![allow(clippy::unwrap_used)]

    use tierbox_policy::{Layer, Rejection, Tier, TierCBackend};

    use super::layers_for;
    use crate::probe::host_facts;

    /// Without seccomp nothing keeps setuid files and device nodes out of what a run
    /// writes: every Linux backend that applies the filter refuses, even when the policy
    /// lists `seccomp` as optional, and the message offers no policy fix.
    #[test]
    fn no_seccomp_refuses_even_when_the_policy_makes_it_optional() {
        let mut plan = crate::test_fixtures::golden_plan("strict.toml");
        plan.tier.optional_layers = vec![
            Layer::Seccomp,
            Layer::Landlock,
            Layer::LandlockScopes,
            Layer::Cgroup,
            Layer::ProtectedPaths,
        ];
        let mut facts = host_facts().clone();
        facts.seccomp = false;
        for (tier, backend) in [
            (Tier::B, TierCBackend::Native),
            (Tier::C, TierCBackend::Native),
            (Tier::C, TierCBackend::Bwrap),
        ] {
            plan.tier.backend = backend;
            match layers_for(tier, &plan, &facts) {
                Err(Rejection::TierUnavailable { reason, .. }) => {
                    assert!(reason.contains("setuid"), "{reason}");
                    assert!(!reason.contains("optional_layers"), "{reason}");
                }
                other => panic!("{tier} {backend:?}: {other:?}"),
            }
        }
        facts.seccomp = true;
        plan.tier.backend = TierCBackend::Native;
        assert!(layers_for(Tier::B, &plan, &facts).is_ok());
    }

    /// An unprivileged supervisor cannot bound Tier B's `TMPDIR`: the layer is missing,
    /// recorded when the policy accepts it and refused otherwise — with a fix that works.
    #[test]
    fn an_unprivileged_tier_b_run_lacks_the_disk_layer() {
        let mut plan = crate::test_fixtures::golden_plan("strict.toml");
        plan.tier.optional_layers = vec![
            Layer::Landlock,
            Layer::LandlockScopes,
            Layer::Cgroup,
            Layer::ProtectedPaths,
        ];
        let mut facts = host_facts().clone();
        facts.euid = 1000;
        facts.seccomp = true;
        let reason = match layers_for(Tier::B, &plan, &facts) {
            Err(Rejection::TierUnavailable { reason, .. }) => reason,
            other => panic!("{other:?}"),
        };
        assert!(reason.contains("disk cannot be enforced"), "{reason}");
        assert!(
            reason.contains("\"disk\" in tier.optional_layers"),
            "{reason}"
        );
        plan.tier.optional_layers.push(Layer::Disk);
        let missing = layers_for(Tier::B, &plan, &facts).unwrap();
        assert!(missing.contains(&Layer::Disk), "{missing:?}");
        // Tier C bounds its /tmp itself.
        assert!(
            !layers_for(Tier::C, &plan, &facts)
                .unwrap_or_default()
                .contains(&Layer::Disk)
        );
    }
}
