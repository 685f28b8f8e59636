//! Tier C on Linux: the run's cgroup plus the native namespace sandbox
//! ([`crate::linux::ns`]), returned as the same [`RunningSandbox`] handle Tier B returns so
//! the supervisor treats both alike (deadline, output capture, tree kill, reaping).
//!
//! Differences the supervisor must know about, all carried by [`RunningSandbox`]:
//! - the pidfd is the sandbox's pid 1 (the reaper): killing it kills every process of
//!   the pid namespace, and its exit comes right after the program's;
//! - the program's own wait status and usage arrive on [`RunningSandbox::exit_report`]
//!   ([`program_exit`]) once pid 1 has killed and reaped every other process of the
//!   sandbox, so that record alone ends the run; pid 1 then exits with the program's
//!   code, or 128 + its signal;
//! - [`RunningSandbox::host_placeholders`] lists the mount points the sandbox created in the
//!   workspace, to remove after the run.
//!
//! Layer policy, as in Tier B: a layer the host lacks (landlock, seccomp, cgroup) rejects
//! the run unless the policy lists it in `tier.optional_layers`, in which case it is
//! recorded in the enforcement report. The namespaces themselves are never optional:
//! without them tier selection has already refused Tier C.

use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use tierbox_policy::plan::Plan;
use tierbox_policy::{Enforcement, Layer, LayerReport, Rejection, Tier};

use crate::bwrap::{self, BwrapError, BwrapOptions, HostLayout};
use crate::egress::SANDBOX_PROXY_PORT;
use crate::launch::slots::SlotGuard;
use crate::launch::sys::ExitInfo;
use crate::launch::{self, HelperSpawn, LaunchError, LaunchOptions, Slot};
use crate::linux::audit::NotRecorded;
use crate::linux::identity::{self, SandboxIdentity};
use crate::linux::mounts::MountPlanError;
use crate::linux::ns::{self, NativeError, NativeOptions};
use crate::linux::seccomp::{SeccompProgram, SeccompSpec};
use crate::probe::host_facts;
use crate::running::{Root, Running, RunningSandbox, SeccompHandOff};

/// Name of the native backend in outcomes and attestations.
// Other crates' tests match a run's backend against it.
#[cfg(feature = "test-support")]
pub const NATIVE_BACKEND: &str = ns::child::BACKEND_NAME;

/// The fd number at which `bwrap` receives the seccomp program (`--seccomp 3`).
pub const BWRAP_SECCOMP_FD: i32 = 3;
/// The fd number at which `bwrap` receives the user namespace a root supervisor made for
/// the run (`--userns 4`).
pub const BWRAP_USERNS_FD: i32 = 4;
/// The fd number at which `bwrap` receives the environment's `--setenv` arguments
/// (`--args 5`), so their values are not in its command line.
pub const BWRAP_ENV_ARGS_FD: i32 = 5;
/// The fd number at which `bwrap`, and the sandbox's pid 1, receive the `tierbox-init`
/// image (`/proc/self/fd/6 --run …`).
pub const BWRAP_INIT_FD: i32 = 6;
/// The fd number at which `bwrap`, and the sandbox's pid 1, receive the seccomp program
/// that `tierbox-init --run-stacked 7 …` stacks on the program ([`bwrap::StackedFilter`]):
/// a logged copy of bwrap's when the host records denials, and the whole filter, with a
/// listener, when the argument rules' refusals are handed off.
pub const BWRAP_STACKED_FILTER_FD: i32 = 7;
/// The fd number at which the sandbox's pid 1 receives the socket its program sends the
/// stacked filter's listener over (`tierbox-init --run-stacked 7 8 …`).
pub const BWRAP_LISTENER_SOCK_FD: i32 = 8;
/// The fd number at which `bwrap`, and the sandbox's pid 1, receive the read end of the
/// pipe whose write end only the supervisor holds (`tierbox-init --alive 9 …`).
pub const BWRAP_ALIVE_FD: i32 = 9;
/// The fd number at which `bwrap`, and the sandbox's pid 1, receive the socket over which
/// the program of a run on a terminal sends the primary side of the terminal it made in
/// the sandbox's devpts (`tierbox-init --pty 10 ROWS COLS …`).
pub const BWRAP_TERMINAL_SOCK_FD: i32 = 10;
/// The fd number at which `bwrap` reads the egress proxy's trust bundle it copies into
/// the run's `/tmp` (`--file 11 /tmp/tierbox-ca-bundle.pem`).
pub const BWRAP_CA_BUNDLE_FD: i32 = 11;
/// The first fd number at which `bwrap` receives the granted host sockets, one each in
/// the plan's order (`--ro-bind-fd 12 PATH`, up to
/// [`tierbox_policy::unix_sockets::MAX_UNIX_SOCKETS`]).
pub const BWRAP_UNIX_SOCKET_FDS: i32 = 12;

/// An `O_PATH` fd of each of `plan`'s host sockets, opened without following any symlink
/// and checked to be the very socket validation saw (same device and inode): a socket
/// replaced since, or a path swapped to lead elsewhere, refuses the run.
pub(crate) fn open_unix_sockets(plan: &Plan) -> Result<Vec<OwnedFd>, LaunchError> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    plan.network
        .unix_sockets
        .iter()
        .map(|grant| {
            let refuse = |reason: String| {
                LaunchError::Rejected(Rejection::UnixSocketUnusable {
                    entry: grant.entry.clone(),
                    reason,
                })
            };
            let fd = crate::linux::sys::open_path_no_symlinks(&grant.path)
                .map_err(|e| refuse(format!("{}: {e}", grant.path.display())))?;
            let file = std::fs::File::from(fd);
            let meta = file
                .metadata()
                .map_err(|e| refuse(format!("{}: {e}", grant.path.display())))?;
            if !meta.file_type().is_socket() || (meta.dev(), meta.ino()) != (grant.dev, grant.ino) {
                return Err(refuse(format!(
                    "{} changed after the request was validated",
                    grant.path.display()
                )));
            }
            Ok(OwnedFd::from(file))
        })
        .collect()
}

/// Longest a bwrap launch on a terminal waits for the program to send its terminal out
/// (30 s). The sandbox's setup takes milliseconds; the bound only keeps a sandbox that
/// never gets there (a setup step hung) from holding the launch forever: it is then
/// killed and the launch fails.
const TERMINAL_HANDOFF_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

// Tier C's filter, defined with the native sandbox (which installs it) and borrowed by
// the bubblewrap backend.
pub use crate::linux::ns::tier_c_seccomp_spec;

/// Launches `plan` in a native Tier C sandbox inside the run's cgroup: tests' shorthand
/// for [`crate::backend::for_plan`] with Tier C.
///
/// ```no_run
/// # fn demo(plan: &tierbox_policy::Plan) -> Result<(), tierbox_sandbox::launch::LaunchError> {
/// let opts = tierbox_sandbox::launch::LaunchOptions {
///     run_id: "0123abcd".to_owned(),
///     tmp_base: "/tmp/tierbox-state/tmp".into(),
///     launcher_thread: false,
///     terminal: None,
///     trust: None,
/// };
/// let launched = tierbox_sandbox::tier_c::launch(plan, &opts)?;
/// assert_eq!(launched.tier(), tierbox_policy::Tier::C);
/// # Ok(()) }
/// ```
#[cfg(feature = "test-support")]
pub fn launch(plan: &Plan, opts: &LaunchOptions) -> Result<RunningSandbox, LaunchError> {
    crate::backend::for_plan(plan, Tier::C).launch(plan, opts)
}

pub(crate) fn launch_native(
    plan: &Plan,
    opts: &LaunchOptions,
) -> Result<RunningSandbox, LaunchError> {
    let facts = host_facts();
    let mut missing = crate::layers::layers_for(Tier::C, plan, facts)?;
    let slot = SlotGuard::new(launch::cgroup_slot(
        ns::child::BACKEND,
        plan,
        opts,
        (facts.euid, facts.egid),
        &mut missing,
    )?);
    let native_opts = NativeOptions {
        seccomp: facts.seccomp,
        landlock: facts.landlock_abi.is_some(),
        cgroup_fds: slot
            .cgroup()
            .map(|cg| cg.procs_fds().to_vec())
            .unwrap_or_default(),
        terminal: opts.terminal,
        trust: opts.trust.clone(),
        ..NativeOptions::default()
    };
    // A failure hands the slot back (its guard).
    let n = ns::launch_native(plan, &native_opts).map_err(|e| match e {
        NativeError::Unavailable { reason } => LaunchError::Rejected(Rejection::TierUnavailable {
            tier: Tier::C,
            reason,
        }),
        // The grants on this host, not a fault: a typed rejection, as `tierbox check`
        // reports it (`preflight`). A broken invariant stays an error.
        NativeError::MountPlan(e) if !matches!(e, MountPlanError::Invariant { .. }) => {
            LaunchError::Rejected(grants_unsupported("native", &e))
        }
        other => LaunchError::Native(other),
    })?;
    let mut enforcement = n.enforcement;
    enforcement.missing_layers.extend(missing);
    enforcement.missing_layers.sort();
    enforcement.missing_layers.dedup();
    let root = Root {
        pid: n.pid,
        pidfd: n.pidfd,
        stdio: launch::ParentStdio {
            stdin: n.stdin,
            stdout: n.stdout,
            stderr: n.stderr,
        },
        terminal: n
            .terminal
            .map(launch::terminal::received)
            .transpose()
            .map_err(LaunchError::setup("the program's terminal"))?,
        ids: (facts.euid, facts.egid),
    };
    let reach = match plan.network.has_reach() {
        true => Some(ns::reach::SandboxReach {
            host_ports: n.host_port_listeners,
            inside: match &n.netns {
                Some(netns) => inside_connector(plan, netns, n.userns.as_ref())?,
                None => None,
            },
        }),
        false => None,
    };
    let backend = Running::Native {
        report: n.report,
        tmp_fs: n.tmp_fs,
        upper_layer: n.upper_layer,
        egress_listener: n.egress_listener,
    };
    let hand_off = n.seccomp_listener.map(|listener| SeccompHandOff {
        listener,
        pending: false,
        refusals: n.seccomp_refusals,
        mediate_chmod: false,
        views: Vec::new(),
    });
    Ok(RunningSandbox::new(root, enforcement, n.audit, backend)
        .in_slot(slot)
        .with_reach(reach)
        .with_hand_off(hand_off)
        .with_placeholders(n.host_placeholders))
}

/// Launches `plan` through `bwrap`: the argv of [`bwrap::bwrap_argv`] (same mounts as the
/// native backend), the Tier C seccomp filter handed over on fd [`BWRAP_SECCOMP_FD`],
/// and `bwrap` itself started in the run's cgroup (everything in the sandbox inherits
/// it). `bwrap` runs with `--die-with-parent`, and dies with the supervisor's thread
/// (`PR_SET_PDEATHSIG`).
pub(crate) fn launch_bwrap(
    plan: &Plan,
    opts: &LaunchOptions,
) -> Result<RunningSandbox, LaunchError> {
    let facts = host_facts();
    let info = bwrap::probe_bwrap_cached().map_err(|e| {
        LaunchError::Rejected(Rejection::TierUnavailable {
            tier: Tier::C,
            reason: format!("tier.backend = \"bwrap\": {e}"),
        })
    })?;
    let missing = crate::layers::layers_for(Tier::C, plan, facts)?;
    BwrapLaunch::prepare(plan, facts.seccomp, opts, &info)?.spawn(plan, opts, &info, missing)
}

/// The seccomp programs of a bwrap launch.
struct BwrapSeccomp {
    /// The base filter bwrap attaches (`None`: the host has no seccomp).
    base: Option<std::sync::Arc<SeccompProgram>>,
    /// The whole filter tierbox-init stacks.
    whole: Option<std::sync::Arc<SeccompProgram>>,
    /// The argument rules' refusals are handed to the supervisor.
    hand_off: bool,
    /// The verdicts that answer the handed-off calls.
    refusals: Option<std::sync::Arc<SeccompProgram>>,
}

impl BwrapSeccomp {
    /// With tierbox-init (`init`), the argument rules' refusals are handed to the
    /// supervisor as in the native backend: bwrap attaches the base filter, which leaves
    /// them to the whole filter tierbox-init stacks with a listener (bwrap cannot install
    /// one).
    fn new(seccomp: bool, init: bool) -> Result<Self, LaunchError> {
        let spec = SeccompSpec {
            notify_refusals: init && launch::user_notif_available(),
            chown_noop_gid: None,
            ..tier_c_seccomp_spec()
        };
        let program = |p: Result<std::sync::Arc<SeccompProgram>, _>| {
            p.map_err(
                |e: crate::linux::seccomp::SeccompError| LaunchError::Setup {
                    what: "seccomp program".to_owned(),
                    source: std::io::Error::other(e.to_string()),
                },
            )
        };
        if !seccomp {
            return Ok(Self {
                base: None,
                whole: None,
                hand_off: false,
                refusals: None,
            });
        }
        let hand_off = spec.notify_refusals;
        Ok(Self {
            base: Some(program(SeccompProgram::cached_base(&spec))?),
            whole: Some(program(SeccompProgram::cached(&spec))?),
            hand_off,
            refusals: match hand_off {
                true => Some(program(SeccompProgram::cached(&spec.enforcing()))?),
                false => None,
            },
        })
    }
}

/// Everything a bwrap launch makes before bwrap starts: its argv, the fds it inherits,
/// the sandbox's identity and network namespace, the placeholders it will mount on
/// (claimed: removed again if the launch fails), how its denials are read.
struct BwrapLaunch {
    /// bwrap's path, then its arguments.
    argv: Vec<std::ffi::OsString>,
    seccomp: BwrapSeccomp,
    /// The base filter, on a pipe ([`BWRAP_SECCOMP_FD`]).
    seccomp_fd: Option<OwnedFd>,
    /// The whole filter for tierbox-init to stack ([`BWRAP_STACKED_FILTER_FD`]).
    stacked_filter: Option<OwnedFd>,
    /// Filtered calls' refusals reach the audit log (tierbox-init stacks with the log flag).
    logged: bool,
    userns: Option<OwnedFd>,
    env_args: OwnedFd,
    init_image: Option<BorrowedFd<'static>>,
    /// The seccomp listener arrives over this pair: (the supervisor's end, the sandbox's).
    listener_pair: Option<(OwnedFd, OwnedFd)>,
    /// A run on a terminal: (the supervisor's end, the sandbox's end) of the socket pair
    /// the program sends its terminal's primary side over.
    terminal_pair: Option<(OwnedFd, OwnedFd)>,
    /// The alive pipe: (the sandbox's read end, the supervisor's write end).
    alive: Option<(OwnedFd, OwnedFd)>,
    /// The trust bundle bwrap copies into `/tmp` ([`BWRAP_CA_BUNDLE_FD`]).
    ca_bundle: Option<OwnedFd>,
    /// The granted host sockets ([`BWRAP_UNIX_SOCKET_FDS`] on).
    unix_sockets: Vec<OwnedFd>,
    idmapped: Vec<identity::IdmappedBind>,
    /// strict egress with an allowlist, host ports, published ports: the loopback-only
    /// network namespace bwrap keeps, and the listeners in it.
    egress: Option<SupervisorNetns>,
    identity: SandboxIdentity,
    audit: crate::linux::audit::RunAudit,
    claim: crate::placeholders::Claim,
}

/// Who a bwrap sandbox is on the host: under a root supervisor an unprivileged uid,
/// through a user namespace made here (returned), with writable roots owned by anyone
/// else idmapped.
#[allow(clippy::type_complexity)]
fn bwrap_identity(
    plan: &Plan,
) -> Result<
    (
        SandboxIdentity,
        Option<OwnedFd>,
        Vec<identity::IdmappedBind>,
    ),
    LaunchError,
> {
    let unavailable = |e: identity::IdentityError| {
        LaunchError::Rejected(Rejection::TierUnavailable {
            tier: Tier::C,
            reason: e.to_string(),
        })
    };
    let identity = identity::resolve(plan).map_err(unavailable)?;
    let userns = identity::bwrap_user_namespace(identity).map_err(|source| LaunchError::Setup {
        what: "user namespace for the sandbox's host identity".to_owned(),
        source,
    })?;
    let idmapped = match identity {
        SandboxIdentity::Host { uid, gid, .. } => {
            identity::idmapped_roots(bwrap::writable_roots(plan), (uid, gid))
                .map_err(unavailable)?
        }
        SandboxIdentity::Supervisor { .. } => Vec::new(),
    };
    Ok((identity, userns, idmapped))
}

impl BwrapLaunch {
    fn prepare(
        plan: &Plan,
        seccomp: bool,
        opts: &LaunchOptions,
        info: &bwrap::BwrapInfo,
    ) -> Result<Self, LaunchError> {
        let terminal = opts.terminal;
        // pid 1: tierbox-init, non-dumpable, where its image can be exec'd; else bwrap's own.
        let init_image = ns::init::image_fd().ok();
        if terminal.is_some() && init_image.is_none() {
            // bwrap's own init cannot make the program a terminal in the sandbox's devpts
            // nor give it one as controlling terminal (its `--new-session` leaves none).
            return Err(LaunchError::Rejected(Rejection::TierUnsupported {
                tier: Tier::C,
                feature: "a terminal under bubblewrap".to_owned(),
                reason: "tierbox-init cannot be executed on this host".to_owned(),
            }));
        }
        let seccomp = BwrapSeccomp::new(seccomp, init_image.is_some())?;
        let egress = supervisor_namespace(plan)?;
        let (identity, userns, idmapped) = bwrap_identity(plan)?;
        let mut bopts = BwrapOptions::new(info.features, HostLayout::probe(plan));
        bopts.seccomp_fd = seccomp.base.as_ref().map(|_| BWRAP_SECCOMP_FD);
        bopts.userns_fd = userns.as_ref().map(|_| BWRAP_USERNS_FD);
        bopts.env_args_fd = Some(BWRAP_ENV_ARGS_FD);
        bopts.init_fd = init_image.map(|_| BWRAP_INIT_FD);
        // pid 1 dies with bwrap, bwrap with the supervisor's thread; the pipe covers the
        // supervisor dying before pid 1 re-armed its death signal.
        let alive = match init_image {
            Some(_) => {
                Some(launch::sys::pipe_cloexec().map_err(LaunchError::setup("the alive pipe"))?)
            }
            None => None,
        };
        bopts.alive_fd = alive.as_ref().map(|_| BWRAP_ALIVE_FD);
        bopts.terminal = terminal.map(|size| bwrap::PtyHandOff {
            sock: BWRAP_TERMINAL_SOCK_FD,
            size,
        });
        let terminal_pair = match terminal {
            Some(_) => Some(
                launch::sys::socketpair_seqpacket()
                    .map_err(LaunchError::setup("socketpair for the program's terminal"))?,
            ),
            None => None,
        };
        let audit = bwrap_audit(plan, seccomp.base.is_some(), init_image.is_some());
        let logged = audit.seccomp.is_ok();
        bopts.stacked_filter = (logged || seccomp.hand_off).then_some(bwrap::StackedFilter {
            fd: BWRAP_STACKED_FILTER_FD,
            listener_sock: seccomp.hand_off.then_some(BWRAP_LISTENER_SOCK_FD),
            log: logged,
        });
        bopts.egress_proxy_port = egress
            .as_ref()
            .and_then(|ns| ns.proxy.as_ref())
            .map(|_| SANDBOX_PROXY_PORT);
        bopts.reach_netns = egress.is_some() && bopts.egress_proxy_port.is_none();
        bopts.tmp_size_bytes = crate::linux::mounts::tmp_size_bytes(plan);
        bopts.trust = opts.trust.as_ref().map(|trust| bwrap::TrustHandOff {
            fd: BWRAP_CA_BUNDLE_FD,
            trust: trust.clone(),
        });
        let ca_bundle = (opts.trust.as_ref())
            .map(|t| {
                launch::data_fd(
                    c"tierbox-ca-bundle",
                    t.bundle.as_bytes(),
                    "the trust bundle",
                )
            })
            .transpose()?;
        let unix_sockets = open_unix_sockets(plan)?;
        bopts.unix_socket_fds = (BWRAP_UNIX_SOCKET_FDS..).take(unix_sockets.len()).collect();
        let mut argv = vec![info.path.clone().into_os_string()];
        argv.extend(bwrap::bwrap_argv(plan, &bopts).map_err(bwrap_error)?);
        let env_args = launch::data_fd(
            c"tierbox-bwrap-env",
            &bwrap::bwrap_env_args(plan, &bopts).map_err(bwrap_error)?,
            "bwrap's environment arguments",
        )?;
        let placeholders = bwrap::host_mount_points(plan, &bopts).map_err(bwrap_error)?;
        // Claimed before bwrap creates them; released after the run (or on failure).
        let claim = crate::placeholders::claim(&placeholders);
        for (path, dir) in bwrap::host_placeholders(plan, &bopts).map_err(bwrap_error)? {
            let content = tierbox_policy::validate::placeholder_content(&path);
            crate::placeholders::create(&path, dir, content).map_err(|e| {
                LaunchError::setup(format!(
                    "create the placeholder {} (filesystem.protected)",
                    path.display()
                ))(e)
            })?;
        }
        let seccomp_fd = match &seccomp.base {
            Some(p) => Some(filter_pipe(&p.to_bytes())?),
            None => None,
        };
        let stacked_filter = match (&seccomp.whole, bopts.stacked_filter) {
            (Some(p), Some(_)) => Some(launch::data_fd(
                c"tierbox-seccomp-stacked",
                &p.to_bytes(),
                "the stacked seccomp program",
            )?),
            _ => None,
        };
        let listener_pair = match seccomp.hand_off {
            true => Some(
                launch::sys::socketpair_seqpacket()
                    .map_err(LaunchError::setup("socketpair for the seccomp listener"))?,
            ),
            false => None,
        };
        Ok(Self {
            argv,
            seccomp,
            seccomp_fd,
            stacked_filter,
            logged,
            userns,
            env_args,
            init_image,
            listener_pair,
            terminal_pair,
            alive,
            ca_bundle,
            unix_sockets,
            idmapped,
            egress,
            identity,
            audit,
            claim,
        })
    }

    /// Starts bwrap in the run's cgroup with the fds it inherits at their numbers, and
    /// returns the running sandbox.
    fn spawn(
        mut self,
        plan: &Plan,
        opts: &LaunchOptions,
        info: &bwrap::BwrapInfo,
        mut missing: Vec<Layer>,
    ) -> Result<RunningSandbox, LaunchError> {
        let facts = host_facts();
        let slot = SlotGuard::new(launch::cgroup_slot(
            bwrap::BACKEND,
            plan,
            opts,
            (facts.euid, facts.egid),
            &mut missing,
        )?);
        let inherit: Vec<(BorrowedFd<'_>, i32)> = self
            .seccomp_fd
            .iter()
            .map(|fd| (fd.as_fd(), BWRAP_SECCOMP_FD))
            .chain(self.userns.iter().map(|fd| (fd.as_fd(), BWRAP_USERNS_FD)))
            .chain(std::iter::once((self.env_args.as_fd(), BWRAP_ENV_ARGS_FD)))
            .chain(self.init_image.map(|fd| (fd, BWRAP_INIT_FD)))
            .chain(
                self.stacked_filter
                    .iter()
                    .map(|fd| (fd.as_fd(), BWRAP_STACKED_FILTER_FD)),
            )
            .chain(
                self.listener_pair
                    .iter()
                    .map(|(_, theirs)| (theirs.as_fd(), BWRAP_LISTENER_SOCK_FD)),
            )
            .chain(
                self.alive
                    .iter()
                    .map(|(read, _)| (read.as_fd(), BWRAP_ALIVE_FD)),
            )
            .chain(
                self.terminal_pair
                    .iter()
                    .map(|(_, theirs)| (theirs.as_fd(), BWRAP_TERMINAL_SOCK_FD)),
            )
            .chain(
                self.ca_bundle
                    .iter()
                    .map(|fd| (fd.as_fd(), BWRAP_CA_BUNDLE_FD)),
            )
            .chain(
                self.unix_sockets
                    .iter()
                    .zip(BWRAP_UNIX_SOCKET_FDS..)
                    .map(|(fd, n)| (fd.as_fd(), n)),
            )
            .collect();
        let mount_moves: Vec<(&OwnedFd, &std::path::Path)> = self
            .idmapped
            .iter()
            .map(|b| (&b.tree, b.dst.as_path()))
            .collect();
        let helper = HelperSpawn {
            inherit: &inherit,
            netns: self.egress.as_ref().map(|ns| &ns.netns),
            mount_moves: &mount_moves,
            clear_groups: self.userns.is_some(),
            audit_session: self.audit.session_wants(),
            ..HelperSpawn::plain(&info.path, &self.argv, &[])
        };
        // A failure hands the slot back (its guard) and removes the placeholders (their
        // claim).
        // bwrap itself gets pipes; the program makes its terminal inside (`--pty`).
        let pipes = LaunchOptions {
            terminal: None,
            ..opts.clone()
        };
        let (child, session) = launch::spawn_helper(plan, &pipes, &slot, &helper)?;
        if let Some(session) = session {
            self.audit.attach(session);
        }
        missing.sort();
        missing.dedup();
        let enforcement = bwrap_enforcement(
            plan,
            info,
            (self.identity, self.idmapped.len()),
            self.init_image.is_some(),
            (
                self.seccomp.base.as_deref(),
                self.logged && self.stacked_filter.is_some(),
                self.seccomp.hand_off,
            ),
            &slot,
            missing,
        );
        let mut root = Root::spawned(child, self.identity.ids());
        if let Some((ours, theirs)) = self.terminal_pair.take() {
            // Only the sandbox holds its end now: it hangs up if the sandbox fails first.
            drop(theirs);
            match received_terminal(&ours) {
                Ok(terminal) => root.terminal = Some(terminal),
                Err(e) => {
                    let _ = launch::sys::kill(-root.pid, libc::SIGKILL);
                    let _ = launch::sys::kill(root.pid, libc::SIGKILL);
                    let _ = launch::sys::wait_pidfd(&root.pidfd, false);
                    return Err(LaunchError::setup(
                        "the program's terminal from the sandbox's devpts",
                    )(e));
                }
            }
        }
        let hand_off = self.listener_pair.map(|(ours, _)| SeccompHandOff {
            listener: ours,
            pending: true,
            refusals: self.seccomp.refusals,
            mediate_chmod: false,
            views: Vec::new(),
        });
        let (egress_listener, reach) = match self.egress {
            Some(ns) => {
                let inside = inside_connector(plan, &ns.netns, None)?;
                let reach = ns::reach::SandboxReach {
                    host_ports: ns.host_ports,
                    inside,
                };
                (ns.proxy, Some(reach))
            }
            None => (None, None),
        };
        let backend = Running::Bwrap {
            supervisor_alive: self.alive.map(|(_, write)| write),
            egress_listener,
        };
        Ok(RunningSandbox::new(root, enforcement, self.audit, backend)
            .in_slot(slot)
            .with_reach(reach)
            .with_hand_off(hand_off)
            .with_placeholders(self.claim.keep()))
    }
}

/// The primary side of the terminal a bwrap run's program made and sent over `sock`,
/// within [`TERMINAL_HANDOFF_TIMEOUT`].
fn received_terminal(sock: &OwnedFd) -> std::io::Result<launch::terminal::Terminal> {
    let mut fds = [rustix::event::PollFd::new(
        sock,
        rustix::event::PollFlags::IN,
    )];
    let timeout = rustix::event::Timespec::try_from(TERMINAL_HANDOFF_TIMEOUT)
        .map_err(std::io::Error::other)?;
    if rustix::event::poll(&mut fds, Some(&timeout))? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "the sandbox did not send its terminal within {} s",
                TERMINAL_HANDOFF_TIMEOUT.as_secs()
            ),
        ));
    }
    let primary = ns::sys::recv_fd(sock).map_err(|e| match e.kind() {
        std::io::ErrorKind::Other => std::io::Error::other(
            "the sandbox ended before it sent its terminal (see the run's stderr)",
        ),
        _ => e,
    })?;
    launch::terminal::received(primary)
}

/// How a bwrap run's denials are read. Refused calls reach the audit log only from a
/// filter attached with the log flag, which bwrap never sets: tierbox-init (`init`)
/// stacks the whole filter with it.
fn bwrap_audit(plan: &Plan, seccomp: bool, init: bool) -> crate::linux::audit::RunAudit {
    let mut audit = crate::linux::audit::RunAudit::plan(false, None, seccomp);
    audit.record_files(plan);
    audit.landlock = Err(NotRecorded::Backend {
        why: "the bwrap backend applies no landlock domain (its mount namespace hides what is not bound)",
    });
    if audit.seccomp.is_ok() && !init {
        audit.seccomp = Err(NotRecorded::Backend {
            why: "without tierbox-init as pid 1, bwrap's own filter (attached without SECCOMP_FILTER_FLAG_LOG) is the only one",
        });
    }
    audit
}

/// The loopback-only network namespace a bwrap run starts in and keeps (`--share-net`)
/// when the plan needs the egress proxy or has reach, with the listeners made in it.
#[derive(Debug)]
struct SupervisorNetns {
    netns: OwnedFd,
    /// The egress proxy's listener at `127.0.0.1:`[`SANDBOX_PROXY_PORT`].
    proxy: Option<std::net::TcpListener>,
    /// A listener at `127.0.0.1:PORT` for each `egress.host_ports` entry.
    host_ports: Vec<(u16, std::net::TcpListener)>,
}

/// A network namespace for a bwrap run that reaches the egress proxy or has host ports or
/// published ports: only `lo`, up, and on it the proxy's listener at
/// `127.0.0.1:`[`SANDBOX_PROXY_PORT`] and the host ports' (a socket belongs to the
/// namespace it was made in). Made on a thread of its own that enters the namespace and
/// ends there, so no thread of the supervisor is left in it. Needs `CAP_SYS_ADMIN` (a
/// root supervisor): without it the run is `tier.unsupported`, as
/// `select::tier_supports` tells callers before they get here.
fn supervisor_namespace(plan: &Plan) -> Result<Option<SupervisorNetns>, LaunchError> {
    let proxy = plan.network.needs_proxy();
    if !proxy && !plan.network.has_reach() {
        return Ok(None);
    }
    let ports = plan.network.host_ports.clone();
    let made = std::thread::Builder::new()
        .name("tierbox-egress-netns".to_owned())
        .spawn(move || -> std::io::Result<_> {
            let netns = match ns::netns_pool::take() {
                Some(pooled) => {
                    ns::sys::setns_net(&pooled)?;
                    pooled
                }
                None => ns::sys::new_netns_with_loopback()?,
            };
            let proxy = match proxy {
                true => Some(std::net::TcpListener::bind((
                    std::net::Ipv4Addr::LOCALHOST,
                    SANDBOX_PROXY_PORT,
                ))?),
                false => None,
            };
            let host_ports = ns::reach::loopback_listeners(&ports)?;
            Ok(SupervisorNetns {
                netns,
                proxy,
                host_ports,
            })
        })
        .map_err(|source| LaunchError::Setup {
            what: "thread for the egress network namespace".to_owned(),
            source,
        })?
        .join()
        .map_err(|_| LaunchError::Setup {
            what: "thread for the egress network namespace".to_owned(),
            source: std::io::Error::other("panicked"),
        })?;
    made.map(Some).map_err(|source| LaunchError::Setup {
        what: "loopback-only network namespace with the egress and host-port listeners".to_owned(),
        source,
    })
}

/// Connections to the sandbox's published ports, through a thread that joins the network
/// namespace of `ns` (a namespace fd or a pidfd) — or, given the sandbox's user namespace
/// `userns` (a supervisor that may not join), with sockets a helper that joined both
/// makes; `None` when the plan publishes none.
fn inside_connector(
    plan: &Plan,
    ns: &OwnedFd,
    userns: Option<&OwnedFd>,
) -> Result<Option<ns::reach::InsideConnector>, LaunchError> {
    if plan.network.publish.is_empty() {
        return Ok(None);
    }
    if let Some(userns) = userns {
        return ns::reach::InsideConnector::spawn_with_helper(userns, ns)
            .map(Some)
            .map_err(LaunchError::setup(
                "a helper in the sandbox's user and network namespaces for its published ports",
            ));
    }
    let ns = ns.try_clone().map_err(LaunchError::setup(
        "a duplicate of the sandbox's namespace fd",
    ))?;
    ns::reach::InsideConnector::spawn(ns)
        .map(Some)
        .map_err(LaunchError::setup(
            "a thread in the sandbox's network namespace for its published ports",
        ))
}

fn bwrap_error(e: BwrapError) -> LaunchError {
    match e {
        BwrapError::NotFound { .. } | BwrapError::TooOld { .. } | BwrapError::Unusable { .. } => {
            LaunchError::Rejected(Rejection::TierUnavailable {
                tier: Tier::C,
                reason: e.to_string(),
            })
        }
        BwrapError::PlanNotExpressible { .. } | BwrapError::ProtectedPathNotCoverable { .. } => {
            LaunchError::Rejected(grants_unsupported("bwrap", &e))
        }
        other => LaunchError::Setup {
            what: "bwrap argv".to_owned(),
            source: std::io::Error::other(other.to_string()),
        },
    }
}

/// A Tier C backend cannot carry out the plan's filesystem on this host.
fn grants_unsupported(backend: &str, e: &dyn std::fmt::Display) -> Rejection {
    Rejection::TierUnsupported {
        tier: Tier::C,
        feature: "this filesystem grant".to_owned(),
        reason: format!(
            "the {backend} backend refuses it: {e}; `tierbox policy check FILE` lists what each backend refuses"
        ),
    }
}

/// A pipe holding `bytes` (the compiled filter, under a pipe's 64 KiB buffer), its write
/// end closed: bwrap reads it to EOF.
fn filter_pipe(bytes: &[u8]) -> Result<OwnedFd, LaunchError> {
    let (r, w) = launch::sys::pipe_cloexec().map_err(|source| LaunchError::Setup {
        what: "pipe for the seccomp program".to_owned(),
        source,
    })?;
    std::fs::File::from(w)
        .write_all(bytes)
        .map_err(|source| LaunchError::Setup {
            what: "write the seccomp program".to_owned(),
            source,
        })?;
    Ok(r)
}

fn bwrap_enforcement(
    plan: &Plan,
    info: &bwrap::BwrapInfo,
    (identity, idmapped): (SandboxIdentity, usize),
    init: bool,
    (seccomp, logged, hand_off): (Option<&SeccompProgram>, bool, bool),
    slot: &Slot,
    missing: Vec<Layer>,
) -> Enforcement {
    let facts = host_facts();
    let limits = &plan.limits;
    let (uid, gid) = identity.ids();
    Enforcement {
        tier: Some(Tier::C),
        backend: bwrap::BACKEND,
        kernel: facts.kernel.clone(),
        uid: Some(uid),
        gid: Some(gid),
        capabilities: format!(
            "none: bwrap {} --cap-drop ALL in its user namespace, no_new_privs",
            info.version
        ),
        no_new_privs: true,
        landlock: LayerReport::missing("not applied by the bwrap backend"),
        seccomp: match seccomp {
            Some(p) => LayerReport::applied(format!(
                "deny-list filter, {} instructions, installed by bwrap --seccomp after its setup{}",
                p.len(),
                match (logged, hand_off) {
                    (true, false) =>
                        "; tierbox-init stacks a copy with SECCOMP_FILTER_FLAG_LOG (refusals audited)",
                    (false, true) =>
                        "; tierbox-init stacks the whole filter with a listener: the argument rules' refusals are answered and recorded by the supervisor",
                    (true, true) =>
                        "; tierbox-init stacks the whole filter with SECCOMP_FILTER_FLAG_LOG (refusals audited) and a listener: the argument rules' refusals are answered and recorded by the supervisor",
                    (false, false) => "",
                }
            )),
            None => LayerReport::missing("seccomp filters are not available"),
        },
        cgroup: match slot.cgroup() {
            Some(cg) => LayerReport::applied(format!(
                "{} run cgroup (bwrap started inside it): {}",
                cg.version(),
                slot.key.cgroup_limits.describe()
            )),
            None => LayerReport::missing(facts.cgroup.describe()),
        },
        namespaces: vec![
            match identity {
                SandboxIdentity::Supervisor { .. } => format!(
                    "user (uid {} -> {uid}, gid {} -> {gid}, the supervisor's own ids; made by bwrap --unshare-user)",
                    ns::child::SANDBOX_UID,
                    ns::child::SANDBOX_GID
                ),
                SandboxIdentity::Host { .. } => format!(
                    "user (uid {} -> host uid {uid}, gid {} -> host gid {gid}, host root as {}, no supplementary groups; made by the supervisor and joined with bwrap --userns; {idmapped} writable root(s) idmapped so host ownership stays)",
                    ns::child::SANDBOX_UID,
                    ns::child::SANDBOX_GID,
                    identity::BWRAP_HOST_ROOT_NS_ID
                ),
            },
            if init {
                "pid (tierbox-init as pid 1, non-dumpable before the program starts; bwrap --as-pid-1)".to_owned()
            } else {
                format!(
                    "pid (bwrap's own init as pid 1, dumpable: {}; the program can write its memory through /proc/1/mem)",
                    ns::init::image_fd()
                        .err()
                        .unwrap_or("no tierbox-init image")
                )
            },
            "mount (tmpfs root)".to_owned(),
            if plan.network.needs_proxy() {
                format!(
                    "net (loopback only; made by the supervisor and kept by bwrap --share-net; the egress proxy listens on 127.0.0.1:{SANDBOX_PROXY_PORT})"
                )
            } else {
                "net (loopback only)".to_owned()
            },
            "ipc".to_owned(),
            "uts".to_owned(),
            "cgroup".to_owned(),
        ],
        rlimits: crate::launch::rlimit_report(
            limits,
            if uid == 0 {
                " (not enforced by the kernel: the program's real uid is host uid 0)"
            } else {
                ""
            },
        ),
        network: "own network namespace with only lo: no route off the host".to_owned(),
        protected_paths: LayerReport::applied(format!(
            "{} protected path(s) bound read-only or covered",
            plan.filesystem.protected.len()
        )),
        disk: LayerReport::applied(format!(
            "/tmp: a tmpfs of {} bytes (bwrap --size); the workspace is bounded per file only",
            crate::linux::mounts::tmp_size_bytes(plan)
        )),
        missing_layers: missing,
        passed_over: None,
        grants: Vec::new(),
        denial_reports: std::collections::BTreeMap::new(),
    }
}

/// How the program ended, from pid 1's `Exited` record: its code or signal, and the CPU
/// time and peak memory of every process pid 1 reaped (the program and everything it
/// started; pid 1's own setup is not counted).
///
/// pid 1 writes that record only once every other process of the sandbox is dead and
/// reaped, so the record alone proves the run is over; reading it blocks until it comes
/// or pid 1 is gone. `None` when pid 1 ended without one (it was killed before the program
/// ended: the supervisor killed the run); the caller then reports pid 1's own status.
pub fn program_exit(report: &OwnedFd) -> Option<ExitInfo> {
    match ns::sys::read_report(report) {
        Ok(Some(r)) => r.exited(),
        _ => None,
    }
}

/// Size of one record on [`RunningSandbox::exit_report`].
pub const REPORT_RECORD_BYTES: usize = ns::sys::REPORT_BYTES;

/// [`program_exit`] of one record the caller read off [`RunningSandbox::exit_report`] itself (e.g.
/// asynchronously, to end the run as soon as the record comes); `None` unless it is pid
/// 1's `Exited` record.
pub fn program_exit_from(record: &[u8; REPORT_RECORD_BYTES]) -> Option<ExitInfo> {
    ns::sys::Report::decode(record).exited()
}

#[cfg(test)]
mod unix_socket_tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn plan_with(socket: &std::path::Path) -> Plan {
        let s = crate::test_fixtures::scratch();
        let mut policy = tierbox_policy::Policy::builtin_default();
        policy.egress.unix_sockets = vec![socket.display().to_string()];
        let ctx = tierbox_policy::ValidateContext::new(&s.ws);
        tierbox_policy::validate(&policy, &tierbox_policy::ProcessRunRequest::new("ls"), &ctx)
            .unwrap()
    }

    fn refused(plan: &Plan) -> String {
        match open_unix_sockets(plan) {
            Err(LaunchError::Rejected(r)) => {
                assert_eq!(r.code(), "egress.unix_socket_unusable");
                r.to_string()
            }
            other => panic!("{:?}", other.map(|fds| fds.len())),
        }
    }

    /// What bwrap is handed is the socket validation saw: a socket replaced at the same
    /// path, or a directory on the way swapped for a symlink to elsewhere, refuses the run.
    #[test]
    fn a_socket_swapped_after_validation_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(root.join("d")).unwrap();
        let path = root.join("d/agent.sock");
        let first = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let plan = plan_with(&path);
        assert_eq!(open_unix_sockets(&plan).unwrap().len(), 1);

        // Another socket (made while the first exists: its own inode) renamed over it.
        let _second = std::os::unix::net::UnixListener::bind(root.join("d/new.sock")).unwrap();
        std::fs::rename(root.join("d/new.sock"), &path).unwrap();
        drop(first);
        assert!(refused(&plan).contains("changed after the request was validated"));

        let plan = plan_with(&path);
        std::fs::create_dir(root.join("elsewhere")).unwrap();
        std::fs::rename(root.join("d/agent.sock"), root.join("elsewhere/agent.sock")).unwrap();
        std::fs::remove_dir(root.join("d")).unwrap();
        std::os::unix::fs::symlink(root.join("elsewhere"), root.join("d")).unwrap();
        // The very socket, reached through a symlink: still refused (no symlink is
        // followed), so a path that leads elsewhere cannot pass for it either.
        assert!(refused(&plan).contains("agent.sock"));
    }

    /// A swapper thread flips the socket's directory between the real one and a symlink
    /// to a directory holding another socket, while launches open the socket: every fd
    /// handed out is the validated socket.
    #[test]
    fn a_racing_swapper_never_gets_another_socket_through() {
        use std::os::unix::fs::MetadataExt;
        use std::sync::atomic::{AtomicBool, Ordering};
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(root.join("real")).unwrap();
        std::fs::create_dir(root.join("decoy")).unwrap();
        let _real = std::os::unix::net::UnixListener::bind(root.join("real/s.sock")).unwrap();
        let _decoy = std::os::unix::net::UnixListener::bind(root.join("decoy/s.sock")).unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("link")).unwrap();
        std::fs::rename(root.join("real"), root.join("d")).unwrap();
        let plan = plan_with(&root.join("d/s.sock"));
        let want = std::fs::metadata(root.join("d/s.sock")).unwrap().ino();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let swapper = {
            let (root, stop) = (root.clone(), stop.clone());
            std::thread::spawn(move || {
                let _ = std::fs::remove_file(root.join("link"));
                while !stop.load(Ordering::Relaxed) {
                    // d -> real; a symlink to decoy at d; back.
                    let _ = std::fs::rename(root.join("d"), root.join("real"));
                    let _ = std::os::unix::fs::symlink(root.join("decoy"), root.join("d"));
                    let _ = std::fs::remove_file(root.join("d"));
                    let _ = std::fs::rename(root.join("real"), root.join("d"));
                }
            })
        };
        let (mut opened, mut refusals) = (0, 0);
        for _ in 0..2000 {
            match open_unix_sockets(&plan) {
                Ok(fds) => {
                    let file = std::fs::File::from(fds.into_iter().next().unwrap());
                    assert_eq!(file.metadata().unwrap().ino(), want, "another socket");
                    opened += 1;
                }
                Err(_) => refusals += 1,
            }
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        assert_eq!(opened + refusals, 2000);
    }
}
