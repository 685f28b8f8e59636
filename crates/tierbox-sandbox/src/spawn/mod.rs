//! Tier B: direct spawn with a new session, rlimits, a rebuilt environment, no
//! capabilities, `no_new_privs`, landlock, seccomp and a per-run cgroup.
//!
//! Invariants:
//! - nothing is inherited implicitly: the environment is exactly the Plan's (plus the
//!   run's private `TMPDIR`), every fd other than 0/1/2 is closed at exec, stdin is
//!   `/dev/null` unless the Plan carries data;
//! - a layer that cannot be applied is either a [`Rejection`] or, when the policy lists
//!   it in `tier.optional_layers`, recorded in [`Enforcement::missing_layers`] — never
//!   silently skipped;
//! - `PR_SET_PDEATHSIG` fires when the *thread* that created the child exits, so a child
//!   is cloned on a long-lived launcher thread that never exits, or on the calling
//!   thread (only when the caller's thread supervises the run for its whole life).
//! - **Armed launcher threads.** What every child would otherwise redo identically is
//!   done once by the thread that clones it, and inherited at `clone`: a Tier B launcher
//!   thread of a root supervisor empties its own bounding set and locks its securebits
//!   (41 credential commits per run saved), and attaches the run's base seccomp filter
//!   to itself ([`SeccompProgram::build_base`]: the filter copy, JIT and action-cache
//!   build saved). One such thread exists per distinct arming (at most
//!   [`MAX_ARMED_LAUNCHERS`]). The child still checks both capability sets itself (41
//!   reads), and attaches only the short chmod hand-off filter stacked on the inherited
//!   one when chmod is mediated. These threads only ever clone Tier B programs: a helper
//!   such as `bwrap`, which needs its capabilities after exec, is cloned on the unarmed
//!   launcher or the calling thread. A thread's capability sets and seccomp filters are
//!   its own (no `SECCOMP_FILTER_FLAG_TSYNC`), so the rest of the supervisor keeps
//!   every privilege and system call it had.

pub mod mediate;
pub mod reaper;
pub mod slots;
#[allow(unsafe_code)]
pub(crate) mod sys;

use crate::running::RunningSandbox;
use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU32};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

use tierbox_policy::enforcement::BackendId;
use tierbox_policy::plan::Plan;
use tierbox_policy::{EgressMode, Enforcement, Layer, LayerReport, Rejection, Tier};

use crate::linux::caps;
use crate::linux::cgroup::{CgroupLimits, RunCgroup};
use crate::linux::exec::{ExecStrings, null_terminated};
use crate::linux::landlock::{LandlockSpec, LandlockStatus, PreparedLandlock};
use crate::linux::seccomp::{InetSockets, SeccompProgram, SeccompSpec};
use crate::probe::{HostFacts, host_facts};
pub use slots::Slot;
use slots::SlotKey;
pub use sys::{ChildStep, ExitInfo};

/// Name of this backend in outcomes and attestations.
pub const BACKEND: BackendId = BackendId::TierBLinux;
/// [`BACKEND`]'s name.
pub const BACKEND_NAME: &str = BACKEND.name();

/// Device nodes every run may read.
const READABLE_DEVICES: &[&str] = &["/dev/zero", "/dev/random", "/dev/urandom"];
/// Device nodes every run may write.
const WRITABLE_DEVICES: &[&str] = &["/dev/null", "/dev/full"];
/// Pseudo-terminals (`openpty`, `pty.fork`): the multiplexer and the host's devpts, which
/// a run may open when it does not keep uid 0. Tier B has no devpts of its own, so a run
/// could write output to every terminal its uid owns (input injection, `TIOCSTI` and
/// `TIOCLINUX`, stays denied by seccomp); for a uid-0 run that is every terminal on the
/// host, so it gets none.
const PTY_DEVICES: &[&str] = &["/dev/ptmx", "/dev/pts"];
/// Pseudo filesystems every run may read: its own process information and CPU topology
/// (nproc, runtimes sizing thread pools). Other processes' entries stay protected by
/// landlock's ptrace scoping.
const READABLE_PSEUDO: &[&str] = &["/proc", "/sys/devices/system/cpu"];

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
    #[error("sandbox setup failed in the child at {}: {}", step.describe(), std::io::Error::from_raw_os_error(*errno))]
    Child {
        /// The step.
        step: ChildStep,
        /// Its errno.
        errno: i32,
    },
}

impl LaunchError {
    fn setup(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LaunchError {
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
    /// ([`RunningSandbox::egress_listener`]).
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

/// Launches `plan` in Tier B.
pub fn launch(plan: &Plan, opts: &LaunchOptions) -> Result<RunningSandbox, LaunchError> {
    let facts = host_facts();
    let mut missing = check_layers(plan, facts)?;
    let network = network_rules(plan, facts, opts.egress_proxy_port)?;
    // Identity: a root supervisor runs the child as the workspace owner when that is not
    // root, so ordinary file permissions apply on top of landlock.
    let ids = child_ids(facts, &plan.workspace);
    // Landlock does not mediate chmod: every run has its chmod calls performed by the
    // supervisor, beneath its writable grants only. Without seccomp user notification, a
    // run that keeps uid 0 gets them denied instead.
    let mediate_chmod = facts.seccomp && user_notif_available();
    let slot = acquire_slot(plan, opts, facts, &network, ids, &mut missing)?;
    // From here on every failure hands the slot back.
    match spawn_in_slot(plan, opts, facts, &network, &slot, ids, mediate_chmod) {
        Ok((child, seccomp_layout)) => {
            missing.sort();
            missing.dedup();
            let enforcement = enforcement_report(
                plan,
                facts,
                &network,
                &slot,
                seccomp_layout,
                ids,
                mediate_chmod,
                missing,
            );
            Ok(RunningSandbox {
                pid: child.pid,
                pidfd: child.pidfd,
                stdin: child.stdin,
                stdout: child.stdout,
                stderr: child.stderr,
                slot: Some(slot),
                chmod_listener: child.chmod_listener,
                child_uid: ids.0,
                child_gid: ids.1,
                enforcement,
                tier: Tier::B,
                report: None,
                host_placeholders: Vec::new(),
                egress_listener: None,
                container: None,
            })
        }
        Err(e) => {
            slots::release(slot);
            Err(e)
        }
    }
}

/// Checks the layers this run needs against the host: each missing one is a rejection, or
/// recorded when the policy lists it in `tier.optional_layers`.
fn check_layers(plan: &Plan, facts: &HostFacts) -> Result<Vec<Layer>, Rejection> {
    let mut missing = Vec::new();
    let abi = facts.landlock_abi.unwrap_or(0);
    let checks: [(Layer, bool, String); 5] = [
        (
            Layer::Landlock,
            facts.landlock_abi.is_some(),
            "landlock is not available (kernel < 5.13 or not in the lsm= list)".to_owned(),
        ),
        (
            Layer::LandlockScopes,
            abi >= 6,
            format!("landlock ABI {abi} < 6 has no signal or abstract-socket scoping"),
        ),
        (
            Layer::Seccomp,
            facts.seccomp,
            "seccomp filters are not available".to_owned(),
        ),
        (
            Layer::Cgroup,
            facts.cgroup.is_usable(),
            facts.cgroup.describe(),
        ),
        (
            Layer::ProtectedPaths,
            plan.filesystem.protected.is_empty()
                && !plan
                    .filesystem
                    .deny_read
                    .iter()
                    .any(|d| d.starts_with(&plan.workspace)),
            "tier b cannot keep paths inside the writable workspace read-only or hidden (tier c can)"
                .to_owned(),
        ),
    ];
    for (layer, available, reason) in checks {
        require(plan, Tier::B, layer, available, &reason, &mut missing)?;
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

/// A warm slot with the shape of this run, or fresh resources.
fn acquire_slot(
    plan: &Plan,
    opts: &LaunchOptions,
    facts: &HostFacts,
    network: &NetworkRules,
    (uid, gid, _): (u32, u32, bool),
    missing: &mut Vec<Layer>,
) -> Result<Slot, LaunchError> {
    let abi = facts.landlock_abi.unwrap_or(0);
    let landlock_base = facts
        .landlock_abi
        .map(|_| landlock_spec(plan, abi, network.tcp_ports.clone(), uid));
    let cgroup_limits = cgroup_limits(plan);
    let key = SlotKey {
        backend: BACKEND,
        tmp_base: opts.tmp_base.clone(),
        uid,
        gid,
        read_only: landlock_base
            .as_ref()
            .map(|s| s.read_only.clone())
            .unwrap_or_default(),
        read_write: landlock_base
            .as_ref()
            .map(|s| s.read_write.clone())
            .unwrap_or_default(),
        scopes: landlock_base.as_ref().is_some_and(|s| s.scope_signals),
        tcp_connect_ports: network.tcp_ports.clone(),
        landlock: landlock_base.is_some(),
        cgroup_limits,
        cgroup: facts.cgroup.is_usable(),
    };
    match slots::take(&key) {
        Some(slot) => Ok(slot),
        None => new_slot(plan, opts, key, landlock_base, &cgroup_limits, missing),
    }
}

/// What this run's launch enforced, in words.
#[allow(clippy::too_many_arguments)]
fn enforcement_report(
    plan: &Plan,
    facts: &HostFacts,
    network: &NetworkRules,
    slot: &Slot,
    seccomp: Option<SeccompLayout>,
    (uid, gid, _): (u32, u32, bool),
    mediate_chmod: bool,
    missing: Vec<Layer>,
) -> Enforcement {
    let limits = &plan.limits;
    Enforcement {
        tier: Some(Tier::B),
        backend: BACKEND,
        kernel: facts.kernel.clone(),
        uid: Some(uid),
        gid: Some(gid),
        capabilities: if facts.euid == 0 {
            "none: bounding, ambient, effective, permitted and inheritable sets cleared; securebits NOROOT locked".to_owned()
        } else {
            "none effective, permitted, inheritable or ambient; the bounding set is left as inherited (an unprivileged supervisor cannot drop it) and no_new_privs stops execve from granting any".to_owned()
        },
        no_new_privs: true,
        landlock: match &slot.landlock {
            Some(prepared) => match &prepared.status {
                LandlockStatus::FullyEnforced => LayerReport::applied(format!(
                    "abi {}, fully enforced{}",
                    prepared.abi,
                    if uid == 0 {
                        "; no pseudo-terminals (a uid-0 run could write to every terminal on the host)"
                    } else {
                        ""
                    }
                )),
                LandlockStatus::PartiallyEnforced { missing } => LayerReport::applied(format!(
                    "abi {}, partially enforced (missing: {})",
                    prepared.abi,
                    missing.join(", ")
                )),
            },
            None => LayerReport::missing("landlock unavailable on this host"),
        },
        seccomp: match seccomp {
            Some(layout) => LayerReport::applied(format!(
                "deny-list filter, {}{}{}",
                match layout.inherited {
                    None => format!("{} instructions", layout.attached),
                    Some(base) if layout.attached == 0 => {
                        format!("{base} instructions inherited from the launcher thread")
                    }
                    Some(base) => format!(
                        "{base} instructions inherited from the launcher thread, plus a {}-instruction chmod hand-off filter",
                        layout.attached
                    ),
                },
                "; SysV IPC and POSIX message queues denied (no IPC namespace)",
                match (uid, mediate_chmod) {
                    (0, true) =>
                        "; chmod performed by the supervisor beneath the writable grants only; the run keeps uid 0: chown/xattr changes denied",
                    (0, false) => "; the run keeps uid 0: chmod/chown/xattr changes denied",
                    (_, true) =>
                        "; chmod performed by the supervisor beneath the writable grants only",
                    (_, false) =>
                        "; chmod not mediated (no seccomp user notification on this kernel)",
                }
            )),
            None => LayerReport::missing("seccomp unavailable on this host"),
        },
        cgroup: match slot.cgroup() {
            Some(_) => LayerReport::applied(format!(
                "{}: {}",
                facts.cgroup.describe(),
                slot.key.cgroup_limits.describe()
            )),
            None => LayerReport::missing(facts.cgroup.describe()),
        },
        namespaces: Vec::new(),
        rlimits: rlimit_report(
            limits,
            if uid == 0 {
                " (not enforced by the kernel for uid 0)"
            } else {
                ""
            },
        ),
        network: network.description.clone(),
        protected_paths: if plan.filesystem.protected.is_empty() {
            LayerReport::applied("none requested")
        } else {
            LayerReport::missing("tier b cannot keep paths inside the writable workspace read-only")
        },
        missing_layers: missing,
        grants: Vec::new(),
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

/// The child's complete environment: the Plan's, plus the private `HOME` and `TMPDIR`.
fn child_env(plan: &Plan, slot: &Slot, network: &NetworkRules) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = plan.env.clone();
    if let Some(port) = network.proxy_port {
        crate::egress::set_proxy_env(&mut env, port);
    }
    if plan.filesystem.private_home {
        env.push((
            "HOME".to_owned(),
            slot.tmp.join("home").to_string_lossy().into_owned(),
        ));
    }
    for key in ["TMPDIR", "TMP", "TEMP"] {
        if !env.iter().any(|(k, _)| k == key) {
            env.push((key.to_owned(), slot.tmp.to_string_lossy().into_owned()));
        }
    }
    env.sort();
    env
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

/// Prepares everything the child needs (strings, pipes, the seccomp program, the
/// listener socket), clones it, and collects the seccomp listener. Returns the child and
/// the seccomp program's length.
fn spawn_in_slot(
    plan: &Plan,
    opts: &LaunchOptions,
    facts: &HostFacts,
    network: &NetworkRules,
    slot: &Slot,
    (uid, gid, change_ids): (u32, u32, bool),
    mediate_chmod: bool,
) -> Result<(SpawnedChild, Option<SeccompLayout>), LaunchError> {
    let launcher = Launcher::choose(facts, network, slot, uid, mediate_chmod)?;
    let strings = ExecStrings::new(plan, &child_env(plan, slot, network), |what, bytes| {
        cstring(bytes, what)
    })?;
    let StdioPipes {
        stdin_child,
        stdin_parent,
        stdout_r,
        stdout_w,
        stderr_r,
        stderr_w,
    } = stdio_pipes(plan)?;
    let (cgroup_fds, n_cgroup_fds) = cgroup_fd_array(slot);
    let fprog = launcher.seccomp.as_deref().map(SeccompProgram::as_fprog);
    // chmod mediation: the child sends its seccomp listener fd over this pair.
    let listener_pair = match (mediate_chmod, &launcher.seccomp) {
        (true, Some(_)) => Some(
            sys::socketpair_seqpacket()
                .map_err(LaunchError::setup("socketpair for the seccomp listener"))?,
        ),
        _ => None,
    };
    let mut spec = sys::ChildSpec {
        program: strings.program.as_ptr(),
        argv: strings.argv(),
        envp: strings.envp(),
        cwd: strings.cwd.as_ptr(),
        stdin_fd: stdin_child.as_raw_fd(),
        stdout_fd: stdout_w.as_raw_fd(),
        stderr_fd: stderr_w.as_raw_fd(),
        cgroup_fds,
        n_cgroup_fds,
        rlimits: rlimit64_table(plan),
        drop_privileged: facts.euid == 0,
        change_ids,
        uid,
        gid,
        last_cap: caps::last_cap(),
        landlock_fd: match (launcher.landlock_inherited, &slot.landlock) {
            (false, Some(prepared)) => prepared.raw_fd(),
            _ => -1,
        },
        seccomp: fprog
            .as_ref()
            .map_or(std::ptr::null(), |p| p as *const libc::sock_fprog),
        seccomp_listener_sock: listener_pair
            .as_ref()
            .map_or(-1, |(_, child_end)| child_end.as_raw_fd()),
        parent_pid: sys::getpid(),
        helper: sys::HelperSetup::NONE,
        keep_caps: false,
        netns_fd: -1,
        fail_step: AtomicU32::new(0),
        fail_errno: AtomicI32::new(0),
    };

    let cloned = clone_on(opts, launcher.armed.as_ref(), &mut spec);
    // The child's ends are closed in the parent whatever happened.
    drop((stdin_child, stdout_w, stderr_w));
    let cloned = cloned?;
    let chmod_listener = match &listener_pair {
        None => launcher.slot_listener,
        Some((parent_end, _)) => match sys::recv_fd(parent_end) {
            Ok(fd) => Some(fd),
            Err(source) => {
                // The program runs with a filter nobody answers; do not let it run.
                let _ = sys::pidfd_signal(&cloned.pidfd, libc::SIGKILL);
                let _ = sys::wait_pidfd(&cloned.pidfd, false);
                return Err(LaunchError::Setup {
                    what: "receive the seccomp listener".to_owned(),
                    source,
                });
            }
        },
    };
    let child = SpawnedChild {
        pid: cloned.pid,
        pidfd: cloned.pidfd,
        stdin: stdin_parent,
        stdout: stdout_r,
        stderr: stderr_r,
        chmod_listener,
    };
    Ok((child, launcher.layout))
}

/// The launcher thread armed for a run (module docs), and the seccomp filter the child
/// attaches itself: all of it without an armed thread; with one, only the chmod hand-off
/// stacked on the base filter it inherits, or nothing.
struct Launcher {
    /// The armed thread to clone on, if any.
    armed: Option<mpsc::Sender<Job>>,
    /// The chmod hand-off's listener, when the slot's thread holds the hand-off.
    slot_listener: Option<OwnedFd>,
    /// The slot's thread holds the run's landlock domain (the child inherits it).
    landlock_inherited: bool,
    /// The filter the child attaches itself.
    seccomp: Option<std::sync::Arc<SeccompProgram>>,
    /// What is inherited and what is attached, for the enforcement report.
    layout: Option<SeccompLayout>,
}

impl Launcher {
    fn choose(
        facts: &HostFacts,
        network: &NetworkRules,
        slot: &Slot,
        uid: u32,
        mediate_chmod: bool,
    ) -> Result<Self, LaunchError> {
        let seccomp_spec = seccomp_spec(network, uid, mediate_chmod);
        let arming = Arming {
            drop_privileges: facts.euid == 0,
            seccomp: facts.seccomp.then_some(seccomp_spec),
        };
        // A pooled slot has a thread that also holds its landlock domain; otherwise a
        // process-wide one per arming, and the child restricts itself.
        let slot_armed = if slots::pooling() {
            slot_launcher(slot, arming)
        } else {
            None
        };
        let landlock_inherited = slot_armed.is_some();
        let (armed, slot_listener) = match slot_armed {
            Some(a) => (Some(a.tx), a.listener),
            None if arming.is_empty() => (None, None),
            None => (armed_launcher(arming), None),
        };
        // The child's own filter: none when everything is inherited (the hand-off too,
        // with its listener on the slot); else the hand-off alone on an inherited base;
        // else all.
        let hand_off_inherited = slot_listener.is_some();
        let seccomp = match (facts.seccomp, armed.is_some(), mediate_chmod) {
            (false, _, _) | (true, true, false) => None,
            (true, true, true) if hand_off_inherited => None,
            (true, false, _) => Some(SeccompProgram::cached(&seccomp_spec)),
            (true, true, true) => Some(SeccompProgram::cached_chmod_notifier()),
        }
        .transpose()
        .map_err(|e| LaunchError::Setup {
            what: "seccomp program".to_owned(),
            source: std::io::Error::other(e.to_string()),
        })?;
        // What the child inherits is the base filter, and the hand-off too when the
        // slot's thread holds it; what it attaches is `seccomp`.
        let len = |p: Result<std::sync::Arc<SeccompProgram>, _>| p.map_or(0, |p| p.len());
        let layout = facts.seccomp.then(|| SeccompLayout {
            inherited: armed.is_some().then(|| {
                len(SeccompProgram::cached_base(&seccomp_spec))
                    + if hand_off_inherited {
                        len(SeccompProgram::cached_chmod_notifier())
                    } else {
                        0
                    }
            }),
            attached: seccomp.as_deref().map_or(0, SeccompProgram::len),
        });
        Ok(Self {
            armed,
            slot_listener,
            landlock_inherited,
            seccomp,
            layout,
        })
    }
}

/// Where a Tier B run's seccomp instructions come from, for the enforcement report.
#[derive(Debug, Clone, Copy)]
struct SeccompLayout {
    /// The filters inherited from an armed launcher thread (the base, and the chmod
    /// hand-off when the slot's thread holds it), in instructions.
    inherited: Option<usize>,
    /// The filter the child attached itself (the whole filter, or the chmod hand-off).
    attached: usize,
}

fn cstring(bytes: &[u8], what: &str) -> Result<CString, LaunchError> {
    CString::new(bytes).map_err(|_| LaunchError::Setup {
        what: format!("{what} contains a NUL byte"),
        source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
    })
}

/// How the network is restricted for this run.
#[derive(Debug, Clone)]
struct NetworkRules {
    /// What inet sockets the run may create (seccomp).
    inet: InetSockets,
    allow_unix: bool,
    tcp_ports: Option<Vec<u16>>,
    /// The egress proxy's port on 127.0.0.1, which the proxy variables point to.
    proxy_port: Option<u16>,
    description: String,
}

fn network_rules(
    plan: &Plan,
    facts: &HostFacts,
    proxy_port: Option<u16>,
) -> Result<NetworkRules, Rejection> {
    let unavailable = |reason: String| Rejection::TierUnavailable {
        tier: Tier::B,
        reason,
    };
    let landlock_net = facts.landlock_abi.is_some_and(|a| a >= 4);
    match plan.network.mode {
        EgressMode::AllowAll => Ok(NetworkRules {
            inet: InetSockets::Any,
            allow_unix: true,
            tcp_ports: None,
            proxy_port: None,
            description: "allow_all: unrestricted".to_owned(),
        }),
        EgressMode::Preflight => Ok(NetworkRules {
            inet: InetSockets::Any,
            allow_unix: false,
            tcp_ports: None,
            proxy_port: None,
            description: "preflight: hosts checked before spawn, network not restricted at runtime"
                .to_owned(),
        }),
        EgressMode::Strict if plan.network.needs_proxy() => {
            // Both layers are required whatever `tier.optional_layers` says: without
            // either one the allowlist would not be enforced at all.
            if !facts.seccomp {
                return Err(unavailable(
                    "strict egress in tier b needs seccomp (to deny udp and raw sockets), which this host lacks".to_owned(),
                ));
            }
            if !landlock_net {
                return Err(unavailable(format!(
                    "strict egress in tier b needs landlock tcp rules (abi 4), and this host has {}",
                    facts
                        .landlock_abi
                        .map_or_else(|| "no landlock".to_owned(), |a| format!("abi {a}"))
                )));
            }
            let port = proxy_port.ok_or_else(|| {
                unavailable("strict egress with an allowlist needs the egress proxy, and the caller started none (LaunchOptions::egress_proxy_port)".to_owned())
            })?;
            Ok(NetworkRules {
                inet: InetSockets::TcpOnly,
                allow_unix: false,
                tcp_ports: Some(vec![port]),
                proxy_port: Some(port),
                description: format!(
                    "strict: tcp connect only to port {port}, the egress proxy's (landlock; on any address), tcp bind denied (landlock), udp, raw, unix sockets and tcp fast open denied (seccomp)"
                ),
            })
        }
        EgressMode::BlockAll | EgressMode::Strict => {
            if !facts.seccomp {
                return Err(unavailable(
                    "blocking the network in tier b needs seccomp, which this host lacks"
                        .to_owned(),
                ));
            }
            Ok(NetworkRules {
                inet: InetSockets::Deny,
                allow_unix: false,
                tcp_ports: landlock_net.then(Vec::new),
                proxy_port: None,
                description: format!(
                    "no network: inet, unix and raw sockets denied (seccomp){}",
                    if landlock_net {
                        ", tcp bind/connect denied (landlock)"
                    } else {
                        ""
                    }
                ),
            })
        }
    }
}

fn seccomp_spec(net: &NetworkRules, child_uid: u32, mediate_chmod: bool) -> SeccompSpec {
    SeccompSpec {
        deny_namespaces: true,
        // A child that keeps uid 0 owns every root-owned file; landlock cannot stop it from
        // changing their modes, owners or attributes, so seccomp does.
        deny_file_metadata: child_uid == 0,
        mediate_chmod,
        // Tier B has no IPC namespace: SysV IPC and message queues would reach the host's
        // objects of the run's uid (root's, for a run that keeps uid 0).
        deny_ipc: true,
        inet: net.inet,
        allow_unix_sockets: net.allow_unix,
    }
}

fn landlock_spec(
    plan: &Plan,
    abi: u32,
    tcp_ports: Option<Vec<u16>>,
    child_uid: u32,
) -> LandlockSpec {
    let fs = &plan.filesystem;
    let mut read_only: Vec<PathBuf> = fs
        .system_read_only
        .iter()
        .chain(&fs.read_only)
        .cloned()
        .collect();
    read_only.extend(
        READABLE_DEVICES
            .iter()
            .chain(READABLE_PSEUDO)
            .map(PathBuf::from),
    );
    let mut read_write: Vec<PathBuf> = vec![plan.workspace.clone()];
    read_write.extend(fs.writable.iter().cloned());
    read_write.extend(WRITABLE_DEVICES.iter().map(PathBuf::from));
    if child_uid != 0 {
        read_write.extend(PTY_DEVICES.iter().map(PathBuf::from));
    }
    LandlockSpec {
        read_only,
        read_write,
        scope_signals: abi >= 6,
        scope_abstract_unix: abi >= 6,
        tcp_connect_ports: tcp_ports,
    }
}

fn child_ids(facts: &HostFacts, workspace: &Path) -> (u32, u32, bool) {
    if facts.euid != 0 {
        return (facts.euid, facts.egid, false);
    }
    match sys::owner_of(workspace) {
        Ok((uid, gid)) if uid != 0 => (uid, gid, true),
        _ => (0, 0, false),
    }
}

/// Clones the child on the launcher thread or the calling thread, as `opts` says.
fn clone_child(
    opts: &LaunchOptions,
    spec: &mut sys::ChildSpec,
) -> Result<sys::Cloned, LaunchError> {
    clone_on(opts, None, spec)
}

/// Clones on `armed` when given, else as [`clone_child`] does.
fn clone_on(
    opts: &LaunchOptions,
    armed: Option<&mpsc::Sender<Job>>,
    spec: &mut sys::ChildSpec,
) -> Result<sys::Cloned, LaunchError> {
    let cloned = match armed {
        Some(tx) => submit(tx, spec),
        None if opts.launcher_thread => launcher_clone(spec),
        None => caller_clone(spec),
    };
    cloned.map_err(|(step, errno)| match step {
        ChildStep::None => LaunchError::Setup {
            what: "clone".to_owned(),
            source: std::io::Error::from_raw_os_error(errno),
        },
        step => LaunchError::Child { step, errno },
    })
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

fn stdio_pipes(plan: &Plan) -> Result<StdioPipes, LaunchError> {
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
fn cgroup_fd_array(slot: &Slot) -> ([libc::c_int; sys::MAX_CGROUP_FDS], usize) {
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

/// Starts `helper` in `slot`'s cgroup with the Plan's stdin and rlimits; see
/// [`HelperSpawn`].
pub(crate) fn spawn_helper(
    plan: &Plan,
    opts: &LaunchOptions,
    slot: &Slot,
    helper: &HelperSpawn<'_>,
) -> Result<SpawnedChild, LaunchError> {
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
        netns_fd: helper.netns.map_or(-1, |fd| fd.as_raw_fd()),
        fail_step: AtomicU32::new(0),
        fail_errno: AtomicI32::new(0),
    };
    let cloned = clone_child(opts, &mut spec);
    // The child's ends are closed in the parent whatever happened.
    drop((stdin_child, stdout_w, stderr_w));
    let cloned = cloned?;
    Ok(SpawnedChild {
        pid: cloned.pid,
        pidfd: cloned.pidfd,
        stdin: stdin_parent,
        stdout: stdout_r,
        stderr: stderr_r,
        chmod_listener: None,
    })
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
    };
    match slots::take(&key) {
        Some(slot) => Ok(slot),
        None => new_slot(plan, opts, key, None, &limits, missing),
    }
}

/// Builds fresh per-run resources: the private tmp (with `home/`), the landlock ruleset
/// granting it, and the cgroup.
fn new_slot(
    plan: &Plan,
    opts: &LaunchOptions,
    key: SlotKey,
    landlock_base: Option<LandlockSpec>,
    limits: &CgroupLimits,
    missing: &mut Vec<Layer>,
) -> Result<Slot, LaunchError> {
    let facts = host_facts();
    let tmp = make_private_tmp(&opts.tmp_base, &opts.run_id, key.uid, key.gid)?;
    make_owned_dir(&tmp.join("home"), key.uid, key.gid)?;
    let landlock = match landlock_base {
        Some(mut spec) => {
            spec.read_write.push(tmp.clone());
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
                let tier = if key.backend == BACKEND {
                    Tier::B
                } else {
                    Tier::C
                };
                if let Err(rejection) =
                    require(plan, tier, Layer::Cgroup, false, &e.to_string(), missing)
                {
                    let _ = std::fs::remove_dir_all(&tmp);
                    return Err(rejection.into());
                }
                None
            }
        }
    } else {
        None
    };
    Ok(Slot::new(key, tmp, landlock, cgroup))
}

/// Whether the kernel can hand system calls to the supervisor (probed once).
fn user_notif_available() -> bool {
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

/// Whether the supervisor named in a group name (`tierbox-<pid>.<start>-…`) is gone.
fn owner_is_gone(name: &str) -> bool {
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

/// Removes private temporary directories of supervisors that died, under `base`.
fn sweep_orphaned_tmp(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name
            .to_str()
            .is_some_and(|n| n.starts_with(GROUP_PREFIX) && owner_is_gone(n))
        {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Creates `<base>/run-<id>` with mode 0700, owned by the child's uid.
fn make_private_tmp(base: &Path, run_id: &str, uid: u32, gid: u32) -> Result<PathBuf, LaunchError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(base)
        .map_err(LaunchError::setup(format!("create {}", base.display())))?;
    let _ = std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o711));
    static SWEPT: OnceLock<()> = OnceLock::new();
    SWEPT.get_or_init(|| sweep_orphaned_tmp(base));
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

struct Job {
    spec: sys::SendSpec,
    reply: mpsc::SyncSender<Result<sys::Cloned, (ChildStep, i32)>>,
}

fn launcher() -> &'static Mutex<mpsc::Sender<Job>> {
    static LAUNCHER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    LAUNCHER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        let spawned = std::thread::Builder::new()
            .name("tierbox-launcher".to_owned())
            .spawn(move || {
                sys::block_all_signals_on_this_thread();
                let mut stack = sys::ChildStack::new();
                while let Ok(job) = rx.recv() {
                    let result = sys::clone_job(&job.spec, &mut stack);
                    let _ = job.reply.send(result);
                }
            });
        if let Err(e) = spawned {
            // Without a launcher every launch fails with a clear error below.
            eprintln!("tierbox: cannot start the launcher thread: {e}");
        }
        Mutex::new(tx)
    })
}

/// Clones on the calling thread, with every signal blocked around the clone.
fn caller_clone(spec: &mut sys::ChildSpec) -> Result<sys::Cloned, (ChildStep, i32)> {
    thread_local! {
        static STACK: std::cell::RefCell<Option<sys::ChildStack>> = const { std::cell::RefCell::new(None) };
    }
    STACK.with(|cell| {
        let mut guard = cell
            .try_borrow_mut()
            .map_err(|_| (ChildStep::None, libc::EBUSY))?;
        let stack = guard.get_or_insert_with(sys::ChildStack::new);
        sys::with_all_signals_blocked(|| sys::clone_and_exec(spec, stack))
    })
}

/// Clones on the launcher thread and waits for the result.
fn launcher_clone(spec: &mut sys::ChildSpec) -> Result<sys::Cloned, (ChildStep, i32)> {
    submit(&tx_of(launcher())?, spec)
}

fn tx_of(launcher: &Mutex<mpsc::Sender<Job>>) -> Result<mpsc::Sender<Job>, (ChildStep, i32)> {
    launcher
        .lock()
        .map(|tx| tx.clone())
        .map_err(|_| (ChildStep::None, libc::EIO))
}

/// Hands `spec` to a launcher thread and waits until it has cloned (the child has
/// exec'd or failed).
fn submit(
    tx: &mpsc::Sender<Job>,
    spec: &mut sys::ChildSpec,
) -> Result<sys::Cloned, (ChildStep, i32)> {
    let (reply_tx, reply_rx) = mpsc::sync_channel(1);
    let job = Job {
        spec: sys::SendSpec::new(spec),
        reply: reply_tx,
    };
    tx.send(job).map_err(|_| (ChildStep::None, libc::EIO))?;
    // `spec` stays borrowed until the launcher replies, which it does only after the
    // child has exec'd or exited.
    reply_rx.recv().map_err(|_| (ChildStep::None, libc::EIO))?
}

/// Most armed launcher threads one process starts (see the module docs). The arming
/// depends on whether the supervisor is root and on the base seccomp filter, which the
/// run's egress mode and uid pick: a handful in practice. A launch whose arming finds
/// no thread clones on the unarmed launcher, and its child does everything itself.
pub const MAX_ARMED_LAUNCHERS: usize = 8;

/// What an armed launcher thread applied to itself, for its children to inherit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Arming {
    /// Empty bounding set, empty ambient set, securebits locked (root supervisor).
    drop_privileges: bool,
    /// `no_new_privs` and the base filter of this spec attached.
    seccomp: Option<SeccompSpec>,
}

impl Arming {
    fn is_empty(&self) -> bool {
        !self.drop_privileges && self.seccomp.is_none()
    }

    /// Applies the arming, and the landlock ruleset `landlock` when given, to the calling
    /// thread (a new launcher thread, before it clones anything), in the child's order:
    /// capabilities, `no_new_privs`, landlock, seccomp. With `hand_off` and a spec that
    /// mediates chmod, the chmod hand-off filter is attached too, and its listener
    /// returned. A failure leaves the thread unusable.
    fn apply_to_this_thread(
        &self,
        landlock: Option<std::os::fd::RawFd>,
        hand_off: bool,
    ) -> Result<Option<OwnedFd>, i32> {
        use crate::linux::sys as lsys;
        if self.drop_privileges {
            lsys::set_securebits_noroot()?;
            lsys::drop_bounding_set(caps::last_cap())?;
            lsys::clear_ambient()?;
        }
        if landlock.is_some() || self.seccomp.is_some() {
            lsys::set_no_new_privs()?;
        }
        if let Some(fd) = landlock {
            lsys::landlock_restrict_self(fd)?;
        }
        let Some(spec) = &self.seccomp else {
            return Ok(None);
        };
        let base = SeccompProgram::cached_base(spec).map_err(|_| libc::EINVAL)?;
        lsys::seccomp_set_filter(&base.as_fprog())?;
        if !(hand_off && spec.mediate_chmod) {
            return Ok(None);
        }
        let notifier = SeccompProgram::cached_chmod_notifier().map_err(|_| libc::EINVAL)?;
        sys::seccomp_attach_with_listener(&notifier.as_fprog()).map(Some)
    }
}

/// A launcher thread armed for one pooled slot: with [`Arming`], the slot's landlock
/// ruleset and (when chmod is mediated) the chmod hand-off filter applied to itself, so
/// its children inherit all of it and restrict nothing themselves. A slot's ruleset
/// never changes and a landlock domain cannot be left, so the thread lives and dies with
/// the slot: dropping the slot drops the sender, and the thread ends (it is idle: the
/// slot is only dropped after its runs are over). So there are at most as many as slots:
/// [`slots::MAX_IDLE_SLOTS`] idle ones and one per run in progress.
///
/// The hand-off filter's listener belongs to the slot: a slot serves one run at a time,
/// so the calls arriving on it are that run's, and the run's mediator serves it with the
/// run's own grants (a process of an earlier run is dead before its slot is reused, and
/// a dead process's pending call is withdrawn by the kernel).
#[derive(Debug)]
pub(crate) struct SlotLauncher {
    arming: Arming,
    tx: mpsc::Sender<Job>,
    listener: Option<OwnedFd>,
}

/// The launcher of a slot, as a run uses it.
struct SlotArmed {
    tx: mpsc::Sender<Job>,
    /// A duplicate of the slot's chmod listener, for this run's mediator.
    listener: Option<OwnedFd>,
}

/// The launcher thread of `slot` armed with `arming` and the slot's ruleset, started on
/// first use; `None` when the slot has no ruleset or the thread cannot be armed (the
/// caller falls back to a process-wide armed launcher and the child restricts itself).
fn slot_launcher(slot: &Slot, arming: Arming) -> Option<SlotArmed> {
    let landlock = slot.landlock.as_ref()?;
    let mut current = slot.launcher.lock().ok()?;
    if current.as_ref().is_none_or(|l| l.arming != arming) {
        // None yet, or armed with another base filter (a slot key does not cover the
        // socket rules of the egress mode): a new thread; the old one ends when its
        // sender drops.
        *current = None;
        let (tx, listener) = start_launcher(
            "tierbox-launcher-slot",
            arming,
            Some(landlock.raw_fd()),
            true,
        )?;
        *current = Some(SlotLauncher {
            arming,
            tx,
            listener,
        });
    }
    let l = current.as_ref()?;
    let listener = match &l.listener {
        Some(fd) => Some(fd.try_clone().ok()?),
        None => None,
    };
    Some(SlotArmed {
        tx: l.tx.clone(),
        listener,
    })
}

/// Starts a launcher thread, arms it (with `landlock` and the chmod hand-off as well,
/// when asked) and waits until it is armed; `None` when the thread cannot start or
/// arming fails. Returns the hand-off filter's listener when one was attached.
fn start_launcher(
    name: &str,
    arming: Arming,
    landlock: Option<std::os::fd::RawFd>,
    hand_off: bool,
) -> Option<(mpsc::Sender<Job>, Option<OwnedFd>)> {
    let (tx, rx) = mpsc::channel::<Job>();
    let (ready_tx, ready_rx) = mpsc::sync_channel::<Result<Option<OwnedFd>, i32>>(1);
    let spawned = std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            sys::block_all_signals_on_this_thread();
            let applied = arming.apply_to_this_thread(landlock, hand_off);
            let ok = applied.is_ok();
            let _ = ready_tx.send(applied);
            if !ok {
                return;
            }
            let mut stack = sys::ChildStack::new();
            while let Ok(job) = rx.recv() {
                let result = sys::clone_job(&job.spec, &mut stack);
                let _ = job.reply.send(result);
            }
        });
    // `landlock` (the slot's ruleset fd) stays open until the thread has applied it.
    spawned.ok()?;
    let listener = ready_rx.recv().ok()?.ok()?;
    Some((tx, listener))
}

/// The launcher thread armed with `arming`, started on first use; `None` when there is
/// none and cannot be one (arming failed on this host, or [`MAX_ARMED_LAUNCHERS`] are
/// taken by other armings).
fn armed_launcher(arming: Arming) -> Option<mpsc::Sender<Job>> {
    type Launchers = Vec<(Arming, Option<mpsc::Sender<Job>>)>;
    static ARMED: Mutex<Launchers> = Mutex::new(Vec::new());
    let mut armed = ARMED.lock().ok()?;
    if let Some((_, tx)) = armed.iter().find(|(a, _)| *a == arming) {
        return tx.clone();
    }
    if armed.len() >= MAX_ARMED_LAUNCHERS {
        return None;
    }
    let tx = start_launcher("tierbox-launcher-armed", arming, None, false).map(|(tx, _)| tx);
    armed.push((arming, tx.clone()));
    tx
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

#[cfg(test)]
mod review;
