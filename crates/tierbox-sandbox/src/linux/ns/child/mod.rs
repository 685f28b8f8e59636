//! Safe orchestration of a native Tier C launch: everything is prepared in the supervisor
//! (mount plan, compiled ops with their C strings, argv/envp arrays, seccomp program,
//! pipes, stacks), then `sys::clone_init` creates the sandbox's pid 1.
//!
//! Invariants kept here:
//!
//! - **Nothing is allocated in a child.** [`launch_native`] builds every string and array
//!   before `clone`; [`compile_ops`] is pure and turns the planner's [`MountOp`]s into
//!   `NsOp`s whose paths are already prefixed for the staging layout.
//! - **The host filesystem never changes**, except for the planner's
//!   [`MountPlan::host_placeholders`] (returned in [`NativeLaunched::host_placeholders`]
//!   for the caller to remove after the run): every mount happens in the child's private
//!   mount namespace.
//! - **A missing layer is reported, never hidden**: landlock without kernel support, or a
//!   launch without cgroup fds, appears in [`Enforcement::missing_layers`].
//!
//! Staging layout (bubblewrap's): in the new mount namespace `/` is made private, a small
//! tmpfs is mounted on the host's [`STAGE_BASE`] (hiding nothing outside this namespace),
//! and `pivot_root` makes it `/` with the host's root at [`OLD_ROOT`]. The planner's root
//! tmpfs is mounted on [`NEW_ROOT`]; bind sources are read through [`OLD_ROOT`] (so no
//! host path is hidden by the staging mounts, whatever the workspace's location), and
//! destinations written under [`NEW_ROOT`]. The planner's `PivotRoot` then makes
//! [`NEW_ROOT`] `/` and detaches the staging tmpfs together with the host tree.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU32};

use tierbox_policy::plan::{FsPlan, Plan};
use tierbox_policy::{Enforcement, Layer, LayerReport, Tier};

use crate::linux::audit::RunAudit;

use super::netns_pool;
use super::sys::{self as nsys, Expect, NsOp, NsSpec, OpKind, Report, ReportTag, Step};
use crate::egress::SANDBOX_PROXY_PORT;
use crate::linux::caps;
use crate::linux::exec::ExecStrings;
use crate::linux::identity::{self, SandboxIdentity};
use crate::linux::landlock::{LandlockSpec, LandlockStatus, PreparedLandlock, access_fs};
use crate::linux::mounts::{
    COVER_DIR_MODE, COVER_TMPFS_BYTES, EntryKind, HostView, MOUNTPOINT_DIR_MODE,
    MOUNTPOINT_FILE_MODE, MountOp, MountPlan, MountPlanError, PTMX_MODE, PTS_MODE, ProcCover,
    mount_plan_with,
};
use crate::linux::seccomp::{SeccompError, SeccompProgram};
use crate::linux::userns::{TIER_C_NAMESPACES, probe_userns_cached};
use crate::probe::host_facts;

mod compile;
mod enforcement;

pub use compile::*;
use enforcement::*;

/// Name of this backend in outcomes and attestations.
pub const BACKEND: tierbox_policy::enforcement::BackendId =
    tierbox_policy::enforcement::BackendId::TierCLinuxNative;
/// [`BACKEND`]'s name.
#[cfg(feature = "test-support")]
pub const BACKEND_NAME: &str = BACKEND.name();

pub use crate::linux::identity::{SANDBOX_GID, SANDBOX_UID};

/// The default hostname inside the sandbox's UTS namespace.
pub const DEFAULT_HOSTNAME: &str = "tierbox";

/// Longest hostname the kernel accepts (`HOST_NAME_MAX`).
pub const HOSTNAME_MAX_BYTES: usize = 64;

/// `comm` of the sandbox's pid 1 (at most 15 bytes: `TASK_COMM_LEN` - 1), before and
/// after it execs the reaper.
pub const INIT_NAME: &CStr = super::init::reaper::NAME;

/// Host directory the staging tmpfs is mounted on, in the child's private mount namespace
/// only (it hides nothing outside it, and bind sources are read through [`OLD_ROOT`]).
pub const STAGE_BASE: &str = "/tmp";
/// Where the planner's root tmpfs is built, after the first `pivot_root`.
pub const NEW_ROOT: &str = "/newroot";
/// Where the host's root is, after the first `pivot_root` (bind sources).
pub const OLD_ROOT: &str = "/oldroot";
/// Where the workspace is bound in the staging tmpfs in overlay mode: the overlay's lower
/// layer (detached with the staging tmpfs at the final pivot; the overlay keeps its own
/// reference).
pub const OVERLAY_LOWER: &str = "/lower";
/// Where the upper layer's tmpfs is mounted in the staging tmpfs in overlay mode; it
/// holds [`OVERLAY_UPPER`] and [`OVERLAY_WORK`].
pub const OVERLAY_LAYER: &str = "/layer";
/// The overlay's upper directory, in the layer tmpfs: what the supervisor reads the
/// run's changes from (`<layer fd>/upper`).
pub const OVERLAY_UPPER: &str = "upper";
/// The overlay's work directory, in the layer tmpfs.
pub const OVERLAY_WORK: &str = "work";
/// Mode of the upper layer's tmpfs root and work directory.
pub const OVERLAY_LAYER_MODE: u32 = 0o700;

/// Size cap of the staging tmpfs, in bytes: it holds two empty directories (four in
/// overlay mode).
pub const STAGE_TMPFS_BYTES: u64 = 16 << 10;
/// Mode of the staging tmpfs and its two directories.
pub const STAGE_DIR_MODE: u32 = 0o700;

/// Why a native launch failed.
#[derive(Debug, thiserror::Error)]
pub enum NativeError {
    /// User namespaces (or one of the Tier C namespaces) cannot be created here.
    #[error("tier c native is unavailable: {reason}")]
    Unavailable {
        /// Why, naming the sysctl when there is one.
        reason: String,
    },
    /// The mount planner refused the Plan.
    #[error("mount plan: {0}")]
    MountPlan(#[from] MountPlanError),
    /// A string for the child contains a NUL byte.
    #[error("{what} contains a NUL byte: {value:?}")]
    Nul {
        /// Which string.
        what: &'static str,
        /// Its value (lossy).
        value: String,
    },
    /// The hostname is longer than [`HOSTNAME_MAX_BYTES`].
    #[error("hostname {hostname:?} is longer than {HOSTNAME_MAX_BYTES} bytes")]
    HostnameTooLong {
        /// The hostname.
        hostname: String,
    },
    /// Building the seccomp program failed.
    #[error("seccomp program: {0}")]
    Seccomp(#[from] SeccompError),
    /// A supervisor-side system call failed.
    #[error("{call}: {source}")]
    Sys {
        /// The call and its arguments.
        call: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A setup step failed inside the sandbox before the program was exec'd.
    #[error("sandbox setup failed at {}{}: {}{}", step.describe(), op.as_deref().map(|o| format!(" ({o})")).unwrap_or_default(), std::io::Error::from_raw_os_error(*errno), crate::linux::step::hint(*step, *errno))]
    Child {
        /// The step.
        step: Step,
        /// For a mount op: the op and its failing sub-call.
        op: Option<String>,
        /// Its errno.
        errno: i32,
    },
    /// pid 1 ended (or the pipe broke) during setup without reporting.
    #[error("the sandbox's pid 1 {how} during setup, without reporting")]
    NoReport {
        /// How it ended (`"was killed by signal 9"`, `"exited with 1"`).
        how: String,
    },
    /// A record on the report pipe was not the expected one.
    #[error("unexpected report record with tag {tag}")]
    BadReport {
        /// The tag.
        tag: u32,
    },
}

fn sys_err(call: impl Into<String>) -> impl FnOnce(std::io::Error) -> NativeError {
    let call = call.into();
    move |source| NativeError::Sys { call, source }
}

/// Per-launch options that are not part of the Plan.
#[derive(Debug, Clone)]
pub struct NativeOptions {
    /// The hostname inside the sandbox ([`DEFAULT_HOSTNAME`]).
    pub hostname: String,
    /// Apply the seccomp filter (default: true). Turning it off exists for measurements
    /// only and is recorded in the enforcement report.
    pub seccomp: bool,
    /// Apply landlock when the kernel has it (default: true).
    pub landlock: bool,
    /// Write-only fds of the run cgroup's attach files ([`RunCgroup::procs_fds`]): pid 1
    /// joins the cgroup through them first thing. Empty: no cgroup (recorded as missing).
    /// The caller keeps them open until `launch_native` returns.
    ///
    /// [`RunCgroup::procs_fds`]: crate::linux::cgroup::RunCgroup::procs_fds
    pub cgroup_fds: Vec<RawFd>,
    /// pid 1 execs `tierbox-init` once the program runs (default: true, where the image
    /// can be exec'd; see [`super::init`]). False keeps the in-process reaper, which holds
    /// its copy of the supervisor's memory until the run ends: for measurements, and what
    /// hosts that cannot exec the image get.
    pub exec_reaper: bool,
    /// Give the program a terminal of this size from the sandbox's own devpts
    /// ([`crate::launch::terminal`]). `None`: pipes.
    pub terminal: Option<crate::launch::terminal::TermSize>,
    /// The egress proxy's trust bundle (in the run's `/tmp`, as
    /// [`crate::egress::CA_BUNDLE_FILE`]) and credential placeholders.
    pub trust: Option<std::sync::Arc<crate::egress::SandboxTrust>>,
}

impl Default for NativeOptions {
    /// [`DEFAULT_HOSTNAME`], seccomp and landlock on, no cgroup, the exec'd reaper.
    fn default() -> Self {
        Self {
            hostname: DEFAULT_HOSTNAME.to_owned(),
            seccomp: true,
            landlock: true,
            cgroup_fds: Vec::new(),
            exec_reaper: true,
            terminal: None,
            trust: None,
        }
    }
}

/// A launched native Tier C sandbox.
#[derive(Debug)]
pub struct NativeLaunched {
    /// Host pid of the sandbox's pid 1 (the reaper). Killing it kills the namespace.
    pub pid: i32,
    /// pidfd of pid 1.
    pub pidfd: OwnedFd,
    /// Write end of stdin when the Plan carries data.
    pub stdin: Option<OwnedFd>,
    /// Read end of stdout.
    pub stdout: OwnedFd,
    /// Read end of stderr.
    pub stderr: OwnedFd,
    /// Read end of the report pipe: carries the program's wait status when it ends
    /// (`wait_native`).
    pub report: OwnedFd,
    /// Entries the mount plan created in the workspace (remove after the run).
    pub host_placeholders: Vec<PathBuf>,
    /// What was enforced.
    pub enforcement: Enforcement,
    /// When the plan needs the egress proxy: the listener pid 1 made on
    /// `127.0.0.1:`[`SANDBOX_PROXY_PORT`] inside the sandbox's network namespace.
    pub egress_listener: Option<std::net::TcpListener>,
    /// For each `egress.host_ports` entry: the listener pid 1 made on `127.0.0.1:PORT`
    /// inside the sandbox's network namespace.
    pub host_port_listeners: Vec<(u16, std::net::TcpListener)>,
    /// When the plan publishes ports: the sandbox's network namespace, opened right after
    /// pid 1 was cloned (the connector to the published ports joins it).
    /// Under a supervisor that may not join it, the fd pid 1 sent of its own (with
    /// `userns`), for a helper that joins both (`SocketFactory`).
    pub netns: Option<OwnedFd>,
    /// The sandbox's user namespace, sent by pid 1, when a helper makes the published
    /// ports' sockets.
    pub userns: Option<OwnedFd>,
    /// An `O_PATH` fd of the sandbox's `/tmp` tmpfs (how full it is once the run ends).
    pub tmp_fs: Option<OwnedFd>,
    /// Overlay mode: an `O_PATH` fd of the tmpfs holding the overlay's upper layer
    /// (`<fd>/`[`OVERLAY_UPPER`]), which outlives the sandbox while the fd is open.
    pub upper_layer: Option<OwnedFd>,
    /// The program's seccomp listener, when its filter hands the argument rules'
    /// refusals to the supervisor: serve it for the life of the run
    /// ([`crate::launch::mediate::SeccompMediator::refusing`] with
    /// [`NativeLaunched::seccomp_refusals`]).
    pub seccomp_listener: Option<OwnedFd>,
    /// The enforcing program whose verdicts answer those refusals.
    pub seccomp_refusals: Option<std::sync::Arc<SeccompProgram>>,
    /// How the program's landlock and seccomp denials are read.
    pub audit: RunAudit,
    /// With [`NativeOptions::terminal`]: the primary side of the program's terminal,
    /// which the program made from the sandbox's devpts and sent out before its exec.
    pub terminal: Option<OwnedFd>,
}

/// How the program ended.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NativeExit {
    /// Exit code when it exited normally.
    pub code: Option<i32>,
    /// Signal number when it was killed by a signal.
    pub signal: Option<i32>,
}

/// Launches `plan` in a native Tier C sandbox (the runner reaches it through
/// `tier_c::launch`, which adds the run's cgroup and the layer requirements).
///
/// Fails closed: [`NativeError::Unavailable`] when the namespaces cannot be created, a
/// mount-plan error for a Plan the planner refuses, [`NativeError::Child`] naming the
/// step (and mount op) that failed inside the sandbox.
pub fn launch_native(plan: &Plan, opts: &NativeOptions) -> Result<NativeLaunched, NativeError> {
    check_launchable(opts)?;
    let tmp_files: Vec<_> = opts.trust.iter().map(|t| t.tmp_file()).collect();
    let prepared = prepared_mounts(plan, &tmp_files)?;
    let (mplan, owned) = (&prepared.mplan, &prepared.ops);
    // Claimed before pid 1 creates them; released after the run, or on any failure here.
    let claim = crate::placeholders::claim(&mplan.host_placeholders);
    let ops: Vec<NsOp<'_>> = owned.iter().map(OwnedOp::borrow).collect();
    let mut identity = IdentitySetup::resolve(plan, mplan, &prepared.bind_at)?;
    let program = ExecStrings::new(plan, &child_env(plan, mplan, opts), cstring)?;
    let layers = Layers::prepare(plan, mplan, opts)?;
    let mut audit = RunAudit::plan(
        layers.landlock.is_some(),
        crate::probe::host_facts().landlock_abi,
        layers.seccomp.is_some(),
    );
    audit.record_files(plan);
    let fprog = layers.seccomp.as_deref().map(SeccompProgram::as_fprog);
    let landlock_rules: Vec<(&CStr, u64)> = layers
        .landlock_rules
        .iter()
        .map(|(path, access)| (path.as_c_str(), *access))
        .collect();
    let pipes = Pipes::open(plan, mplan, layers.hands_off(), opts.terminal.is_some())?;

    // A network namespace made ahead of time, when the pool has one ready; with it, the
    // calling thread's own namespace to return to after the clone.
    let pooled_netns =
        netns_pool::take().and_then(|ns| nsys::own_netns().ok().map(|own| (ns, own)));
    let stacks = nsys::LaunchStacks::take();
    let listen_ports = listen_ports(plan);
    let mut spec = NsSpec {
        uid_map: identity.uid_map.as_bytes(),
        gid_map: identity.gid_map.as_bytes(),
        hostname: opts.hostname.as_bytes(),
        ops: &ops,
        program: &program.program,
        argv: program.argv(),
        envp: program.envp(),
        cwd: &program.cwd,
        init_name: INIT_NAME,
        stdin_fd: pipes.stdio.child.stdin.as_raw_fd(),
        stdout_fd: pipes.stdio.child.stdout.as_raw_fd(),
        stderr_fd: pipes.stdio.child.stderr.as_raw_fd(),
        report_fd: pipes.report_w.as_raw_fd(),
        terminal_fd: child_end(&pipes.terminal_pair),
        terminal_size: opts.terminal.map_or((0, 0), |t| (t.rows, t.cols)),
        proxy_fd: child_end(&pipes.proxy_pair),
        listen_ports: &listen_ports,
        send_namespaces: publishes_through_helper(plan),
        fs_fd: child_end(&pipes.fs_pair),
        loopback_up: pooled_netns.is_none(),
        rlimits: crate::launch::rlimit64_table(plan),
        last_cap: caps::last_cap(),
        seccomp: fprog.as_ref(),
        seccomp_listener_fd: child_end(&pipes.seccomp_pair),
        cgroup_fds: &opts.cgroup_fds,
        landlock_fd: layers
            .landlock
            .as_ref()
            .map_or(-1, PreparedLandlock::raw_fd),
        log_landlock: audit.landlock.is_ok(),
        log_seccomp: audit.seccomp.is_ok(),
        landlock_rules: &landlock_rules,
        arg_area: nsys::own_arg_area(),
        program_stack_top: stacks.program.top(),
        reaper_fd: match opts.exec_reaper {
            true => super::init::image_fd().map_or(-1, |fd| fd.as_raw_fd()),
            false => -1,
        },
        fail_step: AtomicU32::new(0),
        fail_errno: AtomicI32::new(0),
        maps_ready_fd: identity
            .maps_ready
            .as_ref()
            .map_or(-1, |(r, _)| r.as_raw_fd()),
        switch_ids: identity.maps_by_supervisor,
        moved_trees: &identity.moved_trees,
    };
    let (cloned, flags, netns_pooled) =
        clone_pid1(&mut spec, &stacks.init, pooled_netns.as_ref(), &mut audit);
    // pid 1 reaps everything else before it reports, and the kernel before it exits.
    audit.set_first_process_ends_all();
    // The sandbox holds its network namespace now; the pool's handle on it goes.
    drop(pooled_netns);
    let Pipes {
        stdio:
            crate::launch::StdioPipes {
                child,
                parent,
                terminal: _,
            },
        report_r,
        report_w,
        proxy_pair,
        fs_pair,
        seccomp_pair,
        terminal_pair,
    } = pipes;
    // The child's ends are closed here whatever happened; the copies in pid 1 are its own.
    drop((child, report_w));
    let ours = |pair: Option<(OwnedFd, OwnedFd)>| pair.map(|(supervisor, _child)| supervisor);
    let socks = [proxy_pair, fs_pair, seccomp_pair, terminal_pair].map(ours);
    let (pid, pidfd) = cloned.map_err(sys_err(format!(
        "clone(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP | CLONE_PIDFD, flags={flags:#x})"
    )))?;
    let netns = published_netns(plan, pid)?;
    identity.write_maps(pid, &pidfd)?;
    let started = await_start(
        &report_r,
        &pidfd,
        owned,
        socks.each_ref().map(Option::as_ref),
        Sent::of(plan, mplan),
    )?;
    let enforcement = enforcement_report(
        plan,
        (identity.identity, identity.idmapped.len()),
        (
            layers.seccomp.as_deref(),
            started.seccomp_listener.is_some(),
        ),
        layers.landlock.as_ref(),
        !opts.cgroup_fds.is_empty(),
        mplan,
        netns_pooled,
    );
    Ok(NativeLaunched {
        pid,
        pidfd,
        stdin: parent.stdin,
        stdout: parent.stdout,
        stderr: parent.stderr,
        report: report_r,
        host_placeholders: claim.keep(),
        enforcement,
        egress_listener: started.egress_listener,
        host_port_listeners: started.host_ports,
        netns: netns.or(started.netns),
        userns: started.userns,
        tmp_fs: started.tmp_fs,
        upper_layer: started.upper_layer,
        seccomp_listener: started.seccomp_listener,
        seccomp_refusals: layers.enforcing,
        audit,
        terminal: started.terminal,
    })
}

/// What [`launch_native`] needs of the host and the options before anything is made:
/// user namespaces, and a hostname that fits.
fn check_launchable(opts: &NativeOptions) -> Result<(), NativeError> {
    if let Some(reason) = probe_userns_cached().reason() {
        return Err(NativeError::Unavailable {
            reason: reason.to_owned(),
        });
    }
    if opts.hostname.len() > HOSTNAME_MAX_BYTES {
        return Err(NativeError::HostnameTooLong {
            hostname: opts.hostname.clone(),
        });
    }
    Ok(())
}

/// The child's end of a socket pair, or `-1` without one.
fn child_end(pair: &Option<(OwnedFd, OwnedFd)>) -> RawFd {
    pair.as_ref().map_or(-1, |(_, child)| child.as_raw_fd())
}

/// Clones pid 1 in this thread's audit session for the run: into the pooled network
/// namespace `pooled_netns` (with the thread's own to return to) when given, else — or
/// when joining it or the clone failed — into a new one. Returns the clone's result, the
/// flags it was made with, and whether the pooled namespace was used.
fn clone_pid1(
    spec: &mut NsSpec<'_>,
    stack: &nsys::NsStack,
    pooled_netns: Option<&(OwnedFd, OwnedFd)>,
    audit: &mut RunAudit,
) -> (std::io::Result<(libc::pid_t, OwnedFd)>, libc::c_int, bool) {
    let (mut flags, mut pooled) = match pooled_netns {
        Some((ns, own)) => (TIER_C_NAMESPACES & !libc::CLONE_NEWNET, Some((ns, own))),
        None => (TIER_C_NAMESPACES, None),
    };
    // pid 1 and everything it starts inherit this thread's audit session (see
    // `audit::session_for_clone` for why the thread may stay in it).
    let session = crate::linux::audit::session_for_clone(audit.session_wants().as_ref());
    let mut cloned = nsys::clone_init(spec, stack, flags, pooled);
    if cloned.is_err() && pooled.is_some() {
        // Joining the pooled namespace failed (or the clone did): the ordinary way.
        (flags, pooled) = (TIER_C_NAMESPACES, None);
        spec.loopback_up = true;
        cloned = nsys::clone_init(spec, stack, flags, pooled);
    }
    crate::linux::audit::leave_after_clone(session.as_ref());
    if let Some(session) = session {
        audit.attach(session);
    }
    (cloned, flags, pooled.is_some())
}

/// Who the sandbox is on the host (never host root but by the policy's danger flag), the
/// idmapped trees that keep host ownership right for writable binds, and — under a root
/// supervisor, which writes pid 1's id maps — the pipe on which pid 1 waits for them.
struct IdentitySetup {
    identity: SandboxIdentity,
    uid_map: String,
    gid_map: String,
    maps_by_supervisor: bool,
    idmapped: Vec<identity::IdmappedBind>,
    /// `(index in the compiled ops, tree fd)`: trees moved into place instead of the op.
    moved_trees: Vec<(usize, RawFd)>,
    maps_ready: Option<(OwnedFd, OwnedFd)>,
}

impl IdentitySetup {
    /// `bind_at`: for each planner op, the index of the compiled op that binds its tree
    /// ([`PreparedMounts::bind_at`]).
    fn resolve(plan: &Plan, mplan: &MountPlan, bind_at: &[usize]) -> Result<Self, NativeError> {
        let identity = identity::resolve(plan).map_err(|e| NativeError::Unavailable {
            reason: e.to_string(),
        })?;
        let (uid_map, gid_map) = identity.maps();
        let maps_by_supervisor = matches!(identity, SandboxIdentity::Host { .. });
        let idmapped = match identity {
            SandboxIdentity::Host { uid, gid, .. } => identity::idmapped_binds(mplan, (uid, gid))
                .map_err(|e| NativeError::Unavailable {
                reason: e.to_string(),
            })?,
            SandboxIdentity::Supervisor { .. } => Vec::new(),
        };
        let moved_trees: Vec<(usize, RawFd)> = idmapped
            .iter()
            .filter_map(|b| {
                let at = mplan.ops.iter().position(|op| {
                    matches!(op, MountOp::BindRw { dst, .. } | MountOp::Overlay { dst, .. } if *dst == b.dst)
                })?;
                Some((*bind_at.get(at)?, b.tree.as_raw_fd()))
            })
            .collect();
        let maps_ready = if maps_by_supervisor {
            Some(
                crate::launch::sys::pipe_cloexec()
                    .map_err(sys_err("pipe2(O_CLOEXEC) for the id maps"))?,
            )
        } else {
            None
        };
        Ok(Self {
            identity,
            uid_map,
            gid_map,
            maps_by_supervisor,
            idmapped,
            moved_trees,
            maps_ready,
        })
    }

    /// A root supervisor maps the sandbox's ids (pid 1 waits for the word); on failure
    /// pid 1 is killed and reaped.
    fn write_maps(&mut self, pid: libc::pid_t, pidfd: &OwnedFd) -> Result<(), NativeError> {
        let Some((ready_r, ready_w)) = self.maps_ready.take() else {
            return Ok(());
        };
        // pid 1 holds its own copy of the read end.
        drop(ready_r);
        let written = std::fs::write(format!("/proc/{pid}/uid_map"), &self.uid_map)
            .and_then(|()| std::fs::write(format!("/proc/{pid}/gid_map"), &self.gid_map))
            .and_then(|()| {
                rustix::io::write(&ready_w, b"1")
                    .map(drop)
                    .map_err(std::io::Error::from)
            });
        match written {
            Ok(()) => Ok(()),
            Err(source) => {
                kill_pid1(pidfd);
                Err(NativeError::Sys {
                    call: format!("write the id maps of the sandbox's pid 1 ({pid})"),
                    source,
                })
            }
        }
    }
}

/// The kernel layers the program restricts itself with: the seccomp program, the
/// landlock ruleset with the host grants, and the rules pid 1 adds for its own mounts.
struct Layers {
    seccomp: Option<std::sync::Arc<SeccompProgram>>,
    /// When `seccomp` hands the argument rules' refusals off: the enforcing program
    /// whose verdicts answer them.
    enforcing: Option<std::sync::Arc<SeccompProgram>>,
    landlock: Option<PreparedLandlock>,
    /// `(path in the new root, access)`: [`SANDBOX_LANDLOCK_RULES`], and in overlay mode
    /// the overlay mounted on the workspace (its inodes are not the host's, which the
    /// supervisor's rule names).
    landlock_rules: Vec<(CString, u64)>,
}

impl Layers {
    fn prepare(plan: &Plan, mplan: &MountPlan, opts: &NativeOptions) -> Result<Self, NativeError> {
        let spec = super::native_seccomp_spec();
        let seccomp = if opts.seccomp {
            Some(SeccompProgram::cached(&spec)?)
        } else {
            None
        };
        let enforcing = match (&seccomp, spec.notify_refusals) {
            (Some(_), true) => Some(SeccompProgram::cached(&spec.enforcing())?),
            _ => None,
        };
        let landlock = match (opts.landlock, host_facts().landlock_abi) {
            (true, Some(_)) => Some(
                PreparedLandlock::prepare(&landlock_spec(plan, mplan)).map_err(|e| {
                    NativeError::Sys {
                        call: "landlock ruleset".to_owned(),
                        source: std::io::Error::other(e.to_string()),
                    }
                })?,
            ),
            _ => None,
        };
        let landlock_rules = match &landlock {
            Some(l) => {
                let mut rules: Vec<(CString, u64)> = SANDBOX_LANDLOCK_RULES
                    .iter()
                    .map(|(path, access)| ((*path).to_owned(), access & l.handled_fs))
                    .collect();
                if mplan.has_overlay() {
                    rules.push((path_c("workspace", &plan.workspace)?, l.handled_fs));
                }
                rules
            }
            None => Vec::new(),
        };
        Ok(Self {
            seccomp,
            enforcing,
            landlock,
            landlock_rules,
        })
    }

    /// The filter hands calls to the supervisor: the program sends its listener out.
    fn hands_off(&self) -> bool {
        self.enforcing.is_some()
    }
}

/// The pipes of a launch (each end close-on-exec): stdio (Tier B's), pid 1's report pipe
/// and, with the egress proxy, the socket pair that carries its listener out of the
/// sandbox.
struct Pipes {
    stdio: crate::launch::StdioPipes,
    report_r: OwnedFd,
    report_w: OwnedFd,
    /// (supervisor's end, pid 1's end).
    proxy_pair: Option<(OwnedFd, OwnedFd)>,
    /// The socket pair that carries the scratch filesystems' fds out (`/tmp`, the
    /// overlay's upper layer): (supervisor's end, pid 1's end).
    fs_pair: Option<(OwnedFd, OwnedFd)>,
    /// The socket pair that carries the program's seccomp listener out: (supervisor's
    /// end, the program's end).
    seccomp_pair: Option<(OwnedFd, OwnedFd)>,
    /// The socket pair that carries the primary side of the program's terminal out:
    /// (supervisor's end, the program's end).
    terminal_pair: Option<(OwnedFd, OwnedFd)>,
}

impl Pipes {
    fn open(
        plan: &Plan,
        mplan: &MountPlan,
        hand_off: bool,
        terminal: bool,
    ) -> Result<Self, NativeError> {
        use crate::launch::StdioPart;
        let stdio = crate::launch::StdioPipes::open(plan, |part, source| NativeError::Sys {
            call: match part {
                StdioPart::Stdin => "pipe2(O_CLOEXEC) for stdin",
                StdioPart::DevNull => "open(/dev/null, O_RDONLY)",
                StdioPart::Stdout => "pipe2(O_CLOEXEC) for stdout",
                StdioPart::Stderr => "pipe2(O_CLOEXEC) for stderr",
            }
            .to_owned(),
            source,
        })?;
        let (report_r, report_w) = crate::launch::sys::pipe_cloexec()
            .map_err(sys_err("pipe2(O_CLOEXEC) for the report pipe"))?;
        // A socket pair over which the sandbox sends the supervisor one descriptor, made
        // only when the launch has that descriptor to send.
        let pair_for = |wanted: bool, what: &str| {
            wanted
                .then(|| {
                    nsys::seqpacket_pair().map_err(sys_err(format!(
                        "socketpair(AF_UNIX, SOCK_SEQPACKET) for {what}"
                    )))
                })
                .transpose()
        };
        let proxy_pair = pair_for(
            plan.network.needs_proxy()
                || !plan.network.host_ports.is_empty()
                || publishes_through_helper(plan),
            "the egress and host-port listeners",
        )?;
        let fs_pair = pair_for(mplan.sent_fds() > 0, "the scratch filesystems")?;
        let seccomp_pair = pair_for(hand_off, "the seccomp listener")?;
        let terminal_pair = pair_for(terminal, "the terminal")?;
        Ok(Self {
            stdio,
            report_r,
            report_w,
            proxy_pair,
            fs_pair,
            seccomp_pair,
            terminal_pair,
        })
    }
}

/// SIGKILLs the sandbox's pid 1 and reaps it (a launch that cannot go on).
fn kill_pid1(pidfd: &OwnedFd) {
    let _ = crate::launch::sys::pidfd_signal(pidfd, libc::SIGKILL);
    let _ = crate::launch::sys::wait_pidfd(pidfd, false);
}

/// What pid 1 reported and handed over once the program runs.
struct Started {
    egress_listener: Option<std::net::TcpListener>,
    host_ports: Vec<(u16, std::net::TcpListener)>,
    /// pid 1's own user and network namespaces ([`NsSpec::send_namespaces`]).
    userns: Option<OwnedFd>,
    /// See `userns`.
    netns: Option<OwnedFd>,
    tmp_fs: Option<OwnedFd>,
    upper_layer: Option<OwnedFd>,
    seccomp_listener: Option<OwnedFd>,
    terminal: Option<OwnedFd>,
}

/// The namespace a published port is reached in, when the plan publishes any: opened
/// right after the clone, before pid 1 can have ended (under a root supervisor it waits
/// for the maps written next; a program that exits at once takes pid 1 and its `/proc`
/// entries with it).
///
/// `None` under a supervisor that may not join it (nor open it: pid 1 is not dumpable, so
/// its `/proc` entries are root's): pid 1 sends its namespaces itself
/// ([`publishes_through_helper`]).
fn published_netns(plan: &Plan, pid: i32) -> Result<Option<OwnedFd>, NativeError> {
    if plan.network.publish.is_empty() || publishes_through_helper(plan) {
        return Ok(None);
    }
    std::fs::File::open(format!("/proc/{pid}/ns/net"))
        .map(|f| Some(OwnedFd::from(f)))
        .map_err(sys_err(format!("open(/proc/{pid}/ns/net)")))
}

/// What pid 1 sends before its first record, besides the program's own fds.
#[derive(Debug, Clone, Copy)]
struct Sent<'a> {
    /// The egress proxy's listener.
    proxy: bool,
    /// A listener for each of these host ports, after the proxy's.
    host_ports: &'a [u16],
    /// Then pid 1's user and network namespaces.
    namespaces: bool,
    /// The sandbox's `/tmp`.
    tmp: bool,
    /// The overlay's upper layer.
    overlay: bool,
}

/// Whether the plan publishes ports under a supervisor that may not join the sandbox's
/// network namespace: a helper joins pid 1's user and network namespaces, whose fds pid 1
/// sends (`SocketFactory`).
fn publishes_through_helper(plan: &Plan) -> bool {
    !plan.network.publish.is_empty() && !crate::linux::ns::reach::supervisor_can_join_namespaces()
}

impl<'a> Sent<'a> {
    fn of(plan: &'a Plan, mplan: &MountPlan) -> Self {
        Sent {
            proxy: plan.network.needs_proxy(),
            host_ports: &plan.network.host_ports,
            namespaces: publishes_through_helper(plan),
            tmp: mplan.ops.iter().any(MountPlan::is_sent),
            overlay: mplan.has_overlay(),
        }
    }
}

/// The ports pid 1 listens on inside the namespace, in the order it sends the listeners:
/// the egress proxy's, when the plan needs it, then each host port.
fn listen_ports(plan: &Plan) -> Vec<u16> {
    plan.network
        .needs_proxy()
        .then_some(SANDBOX_PROXY_PORT)
        .into_iter()
        .chain(plan.network.host_ports.iter().copied())
        .collect()
}

/// Waits for pid 1's first record (a few hundred microseconds): the program's pid in
/// the namespace once it runs, and the egress listener and upper layer pid 1 sent before
/// it and the program's seccomp listener (over `(proxy, layer, seccomp)` sockets); a
/// failure record, no record or a bad one is the
/// launch's error (pid 1 reaped).
fn await_start(
    report: &OwnedFd,
    pidfd: &OwnedFd,
    owned: &[OwnedOp],
    [proxy_sock, fs_sock, seccomp_sock, terminal_sock]: [Option<&OwnedFd>; 4],
    sent: Sent<'_>,
) -> Result<Started, NativeError> {
    use crate::launch::sys as ssys;
    let first = match nsys::read_report(report) {
        Ok(Some(r)) => r,
        Ok(None) | Err(_) => {
            let how = match ssys::wait_pidfd(pidfd, false) {
                Ok(Some(e)) => match (e.code, e.signal) {
                    (_, Some(sig)) => format!(
                        "was killed by signal {sig}{}",
                        if sig == libc::SIGKILL {
                            " (the run's memory limit, or an outside kill)"
                        } else {
                            ""
                        }
                    ),
                    (Some(code), None) => format!("exited with {code}"),
                    (None, None) => "ended".to_owned(),
                },
                _ => "ended".to_owned(),
            };
            return Err(NativeError::NoReport { how });
        }
    };
    if first.tag == ReportTag::Failed as u32 {
        let _ = ssys::wait_pidfd(pidfd, false);
        return Err(child_error(&first, owned));
    }
    if first.tag != ReportTag::Started as u32 {
        kill_pid1(pidfd);
        return Err(NativeError::BadReport { tag: first.tag });
    }
    // pid 1 sent these before its Started record, so they are already queued.
    let received = |sock: Option<&OwnedFd>, what: &str| match sock.map(nsys::recv_fd) {
        None => Ok(None),
        Some(Ok(fd)) => Ok(Some(fd)),
        Some(Err(source)) => {
            kill_pid1(pidfd);
            Err(NativeError::Sys {
                call: format!("recvmsg(SCM_RIGHTS) of {what}"),
                source,
            })
        }
    };
    // In `listen_ports` order: the proxy's first, then the host ports'.
    let egress_listener = match sent.proxy {
        true => received(proxy_sock, "the egress listener")?.map(std::net::TcpListener::from),
        false => None,
    };
    let mut host_ports = Vec::with_capacity(sent.host_ports.len());
    for &port in sent.host_ports {
        if let Some(fd) = received(proxy_sock, "a host port's listener")? {
            host_ports.push((port, std::net::TcpListener::from(fd)));
        }
    }
    let (userns, netns) = match sent.namespaces {
        true => (
            received(proxy_sock, "pid 1's user namespace")?,
            received(proxy_sock, "pid 1's network namespace")?,
        ),
        false => (None, None),
    };
    // In op order: /tmp first, then the upper layer.
    let tmp_fs = match sent.tmp {
        true => received(fs_sock, "the sandbox's /tmp")?,
        false => None,
    };
    let upper_layer = match sent.overlay {
        true => received(fs_sock, "the overlay's upper layer")?,
        false => None,
    };
    // The program sent it before its exec, which pid 1 waited for (CLONE_VFORK) before
    // its Started record. A program whose filter nobody answers does not run.
    let seccomp_listener = received(seccomp_sock, "the program's seccomp listener")?;
    // The program sent it before its exec, as the listener.
    let terminal = received(terminal_sock, "the program's terminal")?;
    Ok(Started {
        egress_listener,
        host_ports,
        userns,
        netns,
        tmp_fs,
        upper_layer,
        seccomp_listener,
        terminal,
    })
}

/// Landlock rules pid 1 adds for the mounts it creates itself, as `(path in the new root,
/// access)`: `/` may only be listed (a read right on it would reach every file beneath),
/// the private scratch filesystems are writable, `/proc` readable. Masked to the rights
/// the kernel's ABI handles.
const SANDBOX_LANDLOCK_RULES: &[(&CStr, u64)] = &[
    (c"/", access_fs::READ_DIR),
    (c"/dev", access_fs::READ_DIR),
    (c"/proc", access_fs::READ_ONLY),
    (c"/tmp", u64::MAX),
    (c"/dev/shm", u64::MAX),
    (c"/dev/pts", u64::MAX),
];

/// The landlock grants on host objects (the same inodes the mount plan binds): the
/// system roots and read-only grants readable, the workspace, writable grants and the
/// bound device nodes writable.
fn landlock_spec(plan: &Plan, mplan: &MountPlan) -> LandlockSpec {
    let fs = &plan.filesystem;
    let devices = mplan.ops.iter().filter_map(|op| match op {
        MountOp::DevNode { src, .. } => Some(src.clone()),
        _ => None,
    });
    LandlockSpec {
        read_only: fs
            .system_binds()
            .iter()
            .chain(fs.read_only_binds())
            .filter(|p| !FsPlan::sandbox_provides(p))
            .cloned()
            .collect(),
        read_write: std::iter::once(plan.workspace.clone())
            .chain(
                fs.writable_binds()
                    .iter()
                    .filter(|p| !FsPlan::sandbox_provides(p))
                    .cloned(),
            )
            .chain(devices)
            .collect(),
        scope_signals: true,
        scope_abstract_unix: true,
        tcp_connect_ports: None,
    }
}

/// Most mount plans kept by [`prepared_mounts`] (one per distinct workspace and
/// filesystem view; the oldest is dropped). Each holds about 100 small strings.
pub const MOUNT_PLAN_CACHE_ENTRIES: usize = 16;

/// A mount plan compiled for the child, and what it was built from.
#[derive(Debug)]
pub struct PreparedMounts {
    key: MountKey,
    host: HostView,
    /// The planner's ops.
    pub mplan: MountPlan,
    /// The ops compiled for the child.
    pub ops: Vec<OwnedOp>,
    /// For each planner op, the index in [`PreparedMounts::ops`] of the compiled op that
    /// binds its tree (where an idmapped tree is moved in instead): its only op, or for
    /// [`MountOp::Overlay`] the bind of the lower layer.
    pub bind_at: Vec<usize>,
}

/// Everything of a Plan the mount planner reads.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MountKey {
    workspace: PathBuf,
    workspace_mode: tierbox_policy::WorkspaceMode,
    filesystem: tierbox_policy::plan::FsPlan,
    memory_bytes: u64,
    disk_bytes: u64,
    tmp_files: Vec<crate::linux::mounts::TmpFile>,
}

/// The compiled mount plan for `plan`, reused while the host still matches.
///
/// Planning probes the host, builds and checks the op list and compiles it (about 0.5 ms
/// for a strict plan). The planner is a pure function of the Plan fields in
/// its key (workspace and its mode, filesystem view, memory and disk limits) and of the host facts in its [`HostView`], so an entry is reused only when
/// the key is equal and [`HostView::is_current`] re-reads every recorded path and finds
/// it unchanged (about 60 `lstat`s); otherwise the plan is rebuilt.
/// `tmp_files` are created in the sandbox's `/tmp` ([`crate::linux::mounts::TmpFile`]),
/// and are part of the key.
pub fn prepared_mounts(
    plan: &Plan,
    tmp_files: &[crate::linux::mounts::TmpFile],
) -> Result<std::sync::Arc<PreparedMounts>, NativeError> {
    use std::sync::{Arc, Mutex};
    static CACHE: Mutex<Vec<Arc<PreparedMounts>>> = Mutex::new(Vec::new());
    let key = MountKey {
        workspace: plan.workspace.clone(),
        workspace_mode: plan.workspace_mode,
        filesystem: plan.filesystem.clone(),
        memory_bytes: plan.limits.memory_bytes,
        disk_bytes: plan.limits.disk_bytes,
        tmp_files: tmp_files.to_vec(),
    };
    let cached = {
        let cache = CACHE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        cache.iter().find(|e| e.key == key).cloned()
    };
    if let Some(entry) = cached
        && entry.host.is_current()
    {
        return Ok(entry);
    }
    let host = HostView::probe(plan);
    let mplan = mount_plan_with(plan, &host, tmp_files)?;
    let (ops, bind_at) = compile_ops(&mplan)?;
    let entry = Arc::new(PreparedMounts {
        key,
        host,
        mplan,
        ops,
        bind_at,
    });
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    cache.retain(|e| e.key != entry.key);
    cache.insert(0, Arc::clone(&entry));
    cache.truncate(MOUNT_PLAN_CACHE_ENTRIES);
    Ok(entry)
}

/// Waits for the sandbox's pid 1 to exit (which happens right after the program ends and
/// pid 1 has killed and reaped the rest of the namespace) and returns how the program
/// ended.
#[cfg(test)]
pub fn wait_native(launched: &NativeLaunched) -> Result<NativeExit, NativeError> {
    let info = crate::launch::sys::wait_pidfd(&launched.pidfd, false)
        .map_err(sys_err("waitid(P_PIDFD, pid 1)"))?;
    match nsys::read_report(&launched.report) {
        Ok(Some(r)) => match r.exited() {
            Some(e) => Ok(NativeExit {
                code: e.code,
                signal: e.signal,
            }),
            None => Err(NativeError::BadReport { tag: r.tag }),
        },
        // pid 1 itself was killed (e.g. SIGKILL from the supervisor): report that.
        Ok(None) | Err(_) => Ok(NativeExit {
            code: info.and_then(|i| i.code),
            signal: info.and_then(|i| i.signal),
        }),
    }
}

fn child_error(r: &Report, owned: &[OwnedOp]) -> NativeError {
    let step = r.ns_step();
    let op = (step == Step::MountOp).then(|| {
        let idx = r.op_index as usize;
        let what = owned
            .get(idx)
            .map(|o| o.describe.clone())
            .unwrap_or_default();
        format!("op {idx}: {what}; {} failed", nsys::describe_sub(r.sub))
    });
    NativeError::Child {
        step,
        op,
        errno: r.value,
    }
}

fn cstring(what: &'static str, bytes: &[u8]) -> Result<CString, NativeError> {
    CString::new(bytes).map_err(|_| NativeError::Nul {
        what,
        value: String::from_utf8_lossy(bytes).into_owned(),
    })
}

/// The child's complete environment: the Plan's, with `HOME` pointing at the private home
/// when the mount plan provides one, and `TMPDIR` at the private `/tmp`.
fn child_env(plan: &Plan, mplan: &MountPlan, opts: &NativeOptions) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = plan.env.clone();
    if let Some(home) = &mplan.home {
        env.retain(|(k, _)| k != "HOME");
        env.push(("HOME".to_owned(), home.to_string_lossy().into_owned()));
    }
    if !env.iter().any(|(k, _)| k == "TMPDIR") {
        env.push(("TMPDIR".to_owned(), "/tmp".to_owned()));
    }
    if plan.network.needs_proxy() {
        crate::egress::set_proxy_env(&mut env, SANDBOX_PROXY_PORT);
    }
    if let Some(trust) = &opts.trust {
        let bundle = format!("/tmp/{}", crate::egress::CA_BUNDLE_FILE);
        crate::egress::set_trust_env(&mut env, trust, &bundle);
    }
    env
}
