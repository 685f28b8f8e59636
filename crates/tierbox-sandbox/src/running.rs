//! A sandbox that is running: what every Linux backend (Tier B, native Tier C,
//! bubblewrap, a container engine) hands back from its launch, and everything the
//! supervisor does to it until it is gone — signal the whole tree, kill it, reap its root,
//! read how the program ended, hand the run's resources back.
//!
//! The backend-specific parts of ending a run live here, next to the launch that created
//! them, so that a supervisor holds one handle and needs no knowledge of the backend:
//!
//! | what | Tier B | native Tier C | bubblewrap |
//! |---|---|---|---|
//! | the root ([`RunningSandbox::pid`]) | the program | the sandbox's pid 1 | bwrap |
//! | the program's exit ([`RunningSandbox::ending`]) | the root's | pid 1's exit record ([`RunningSandbox::exit_report`]) | the root's, bwrap's `128 + signal` read back as the signal when the cgroup proves an OOM kill ([`RunningSandbox::oom_kill_as_signal`]) |
//! | the whole tree ([`RunningSandbox::kill_all`]) | the run's cgroup, then its process group | the same (pid 1's death ends the pid namespace) | the same |
//! | release ([`RunningSandbox::release`]) | the slot, recycled or destroyed, now | the slot and the workspace's mount points, on the reaper thread once pid 1 is reaped | the slot and the mount points, now |
//!
//! ```no_run
//! # async fn demo(plan: &tierbox_policy::Plan) -> std::io::Result<()> {
//! use tierbox_sandbox::running::RunningSandbox;
//! use tierbox_sandbox::launch::LaunchOptions;
//!
//! let opts = LaunchOptions {
//!     run_id: "r1".into(),
//!     tmp_base: "/var/lib/tierbox/tmp".into(),
//!     launcher_thread: false,
//!     terminal: None,
//!     trust: None,
//! };
//! let mut sandbox: RunningSandbox = tierbox_sandbox::tier_b::launch(plan, &opts)
//!     .map_err(|e| std::io::Error::other(e.to_string()))?;
//! let exited = sandbox.watch_exit()?;
//! exited.readable().await?.retain_ready();
//! sandbox.kill_all();
//! let root = sandbox.reap(false)?.expect("the root has exited");
//! let ending = sandbox.ending(root);
//! println!("program exit: {:?}", ending.exit.code);
//! sandbox.release(Box::new(|| {}));
//! # Ok(()) }
//! ```

use std::os::fd::OwnedFd;
use std::path::PathBuf;

use tierbox_policy::enforcement::Enforcement;
use tierbox_policy::policy::Tier;

use crate::launch::slots::{self, Slot, SlotGuard};
use crate::launch::terminal::Terminal;
use crate::launch::{ExitInfo, reaper, sys};
use crate::linux::audit::RunAudit;
use crate::linux::cgroup::{CgroupStats, RunCgroup};

/// A running sandbox, as a Linux backend's launch returns it (see the module docs): an
/// owned run, whose parts the supervisor reaches through methods, and whose slot is
/// handed back by [`RunningSandbox::release`] (or, should the handle be dropped without
/// it, by the slot's guard).
#[derive(Debug)]
pub struct RunningSandbox {
    /// Process id of the run's root (also its process group and session id): the program
    /// (Tier B), the sandbox's pid 1 (native Tier C), bwrap, or the engine's CLI.
    pid: i32,
    /// pidfd of the root: signal and wait without pid-reuse races.
    pidfd: OwnedFd,
    /// Write end of stdin when the Plan carries data.
    stdin: Option<OwnedFd>,
    stdout: OwnedFd,
    stderr: OwnedFd,
    /// The primary side of the run's terminal, when the launch asked for one
    /// ([`crate::launch::LaunchOptions::terminal`]).
    terminal: Option<Terminal>,
    /// The run's resources (private tmp, landlock ruleset, cgroup).
    slot: Option<SlotGuard>,
    seccomp_hand_off: Option<SeccompHandOff>,
    /// uid and gid the program runs as.
    child_ids: (u32, u32),
    enforcement: Enforcement,
    /// Entries the sandbox setup created in the host's workspace (mount points of
    /// protected-path covers), removed by [`RunningSandbox::release`].
    host_placeholders: Vec<PathBuf>,
    audit: RunAudit,
    /// Tier C with host ports or published ports: what crosses the sandbox's network
    /// namespace, for the supervisor to serve.
    #[cfg(target_os = "linux")]
    reach: Option<crate::linux::ns::reach::SandboxReach>,
    /// What the backend that ran holds beyond that.
    backend: Running,
}

/// The root process of a launch, with the supervisor's ends of its pipes: what
/// [`RunningSandbox::new`] is built from.
#[derive(Debug)]
pub(crate) struct Root {
    pub(crate) pid: i32,
    pub(crate) pidfd: OwnedFd,
    pub(crate) stdio: crate::launch::ParentStdio,
    /// The primary side of the run's terminal, when it has one.
    pub(crate) terminal: Option<Terminal>,
    /// uid and gid the program runs as.
    pub(crate) ids: (u32, u32),
}

impl Root {
    /// The root a helper or Tier B spawn started, running as `ids` (its seccomp listener,
    /// if any, taken by the caller first).
    pub(crate) fn spawned(child: crate::launch::SpawnedChild, ids: (u32, u32)) -> Self {
        Self {
            pid: child.pid,
            pidfd: child.pidfd,
            stdio: child.stdio,
            terminal: child.terminal,
            ids,
        }
    }
}

/// What one backend's run holds beyond what every run has.
#[derive(Debug)]
pub(crate) enum Running {
    /// Tier B: the program is the root.
    TierB {
        /// The bounded private tmp's root (`O_PATH`), to tell whether it filled up
        /// (`limits.disk_bytes`).
        tmp_fs: Option<OwnedFd>,
        /// `strict` egress with an allowlist: the proxy's listener on the host's loopback,
        /// the only TCP port the program may connect to.
        egress_listener: Option<std::net::TcpListener>,
    },
    /// Native Tier C: the root is the sandbox's pid 1.
    Native {
        /// pid 1's report pipe, which carries the program's own wait status and usage
        /// once every other process of the sandbox is dead ([`crate::tier_c::program_exit`]).
        report: OwnedFd,
        /// An `O_PATH` fd of the sandbox's `/tmp` tmpfs (`limits.disk_bytes`).
        tmp_fs: Option<OwnedFd>,
        /// Overlay mode: the tmpfs holding the overlay's upper layer.
        upper_layer: Option<OwnedFd>,
        /// The egress proxy's listener, made inside the sandbox's network namespace on
        /// `127.0.0.1:`[`crate::egress::SANDBOX_PROXY_PORT`].
        egress_listener: Option<std::net::TcpListener>,
    },
    /// bubblewrap: the root is bwrap.
    Bwrap {
        /// The write end of the pipe whose read end the sandbox's pid 1 checks
        /// ([`crate::bwrap::BwrapOptions::alive_fd`]); held for the run's life, never read.
        #[expect(dead_code, reason = "held open for the run's life, never read")]
        supervisor_alive: Option<OwnedFd>,
        /// The egress proxy's listener inside the sandbox's network namespace.
        egress_listener: Option<std::net::TcpListener>,
    },
    /// A container engine: the root is the engine's CLI.
    Container {
        /// Removes the container (by name) when the handle is dropped, since killing the
        /// engine's CLI does not stop it.
        container: crate::container::ContainerGuard,
        /// Overlay mode: the tmpfs holding the upper layer.
        upper_layer: Option<OwnedFd>,
    },
}

/// The filesystems a run wrote to outside the workspace, taken once its tree is gone
/// ([`RunningSandbox::take_scratch`]).
#[derive(Debug, Default)]
pub struct Scratch {
    /// An `O_PATH` fd of the run's bounded `/tmp`, to tell whether it filled up.
    pub tmp_fs: Option<OwnedFd>,
    /// Review mode: the overlay's upper layer.
    pub upper_layer: Option<UpperLayer>,
}

/// Review mode: an `O_PATH` fd of the tmpfs holding the overlay's upper layer (the run's
/// changes to the workspace, in overlayfs's format), readable after the sandbox is gone
/// while the fd is open.
#[derive(Debug)]
pub struct UpperLayer(OwnedFd);

impl UpperLayer {
    /// The tmpfs's fd (how full it is).
    pub fn fd(&self) -> &OwnedFd {
        &self.0
    }

    /// The directory holding the run's changes, reached through this process's fd table
    /// (valid while `self` lives).
    pub fn changes_dir(&self) -> PathBuf {
        use std::os::fd::AsRawFd;
        PathBuf::from(format!("/proc/self/fd/{}", self.0.as_raw_fd()))
            .join(crate::linux::ns::child::OVERLAY_UPPER)
    }
}

/// How a run ended, as far as the program is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ending {
    /// The program's exit: the root's, or for native Tier C the one pid 1 reported.
    pub exit: ExitInfo,
    /// Native Tier C: how pid 1 ended when it did so without reporting the program's
    /// exit (then `exit` is pid 1's own too, and the program's is unknown).
    pub pid1_unreported: Option<ExitInfo>,
}

/// A run's seccomp hand-off: serve it for the life of the run with
/// [`crate::launch::mediate::SeccompMediator`] (chmod beneath the workspace, the declared
/// writable paths and the slot's tmp), [`SeccompMediator::refusing`] with
/// [`SeccompHandOff::refusals`] when that is set.
///
/// [`SeccompMediator::refusing`]: crate::launch::mediate::SeccompMediator::refusing
#[derive(Debug)]
pub struct SeccompHandOff {
    /// The filter's listener; with [`SeccompHandOff::pending`], the unix socket it will
    /// arrive on.
    pub listener: OwnedFd,
    /// The listener is not there yet (bwrap: `tierbox-init` stacks the filter after the
    /// launch returns; [`crate::launch::mediate::SeccompMediator::pending`]).
    pub pending: bool,
    /// The enforcing seccomp program whose verdicts answer the argument rules' refusals
    /// arriving on the listener, when the filter hands them off
    /// (`SeccompSpec::notify_refusals`).
    pub refusals: Option<std::sync::Arc<crate::linux::seccomp::SeccompProgram>>,
    /// The filter hands the `chmod` family to the supervisor to perform (Tier B's
    /// `SeccompSpec::mediate_chmod`); otherwise a `chmod`
    /// arriving on the listener is a refusal to answer, never a change to make.
    pub mediate_chmod: bool,
    /// Where the run sees writable roots at other paths than the host's, as `(the run's
    /// path, the host path)`: a Tier B run's private `/tmp` and `/dev/shm`
    /// (`mediator_roots`). Empty: the run's private tmp is where
    /// the host has it.
    pub views: Vec<(std::path::PathBuf, std::path::PathBuf)>,
}

impl RunningSandbox {
    /// A run of `backend` whose root is `root`, with what was enforced and how its
    /// denials are read; no slot, seccomp hand-off or placeholders until the launch adds
    /// them ([`RunningSandbox::in_slot`], [`RunningSandbox::with_hand_off`],
    /// [`RunningSandbox::with_placeholders`]).
    pub(crate) fn new(
        root: Root,
        enforcement: Enforcement,
        audit: RunAudit,
        backend: Running,
    ) -> Self {
        Self {
            pid: root.pid,
            pidfd: root.pidfd,
            stdin: root.stdio.stdin,
            stdout: root.stdio.stdout,
            stderr: root.stdio.stderr,
            terminal: root.terminal,
            slot: None,
            seccomp_hand_off: None,
            child_ids: root.ids,
            enforcement,
            host_placeholders: Vec::new(),
            audit,
            #[cfg(target_os = "linux")]
            reach: None,
            backend,
        }
    }

    /// What crosses the sandbox's network namespace besides the proxy.
    #[cfg(target_os = "linux")]
    pub(crate) fn with_reach(
        mut self,
        reach: Option<crate::linux::ns::reach::SandboxReach>,
    ) -> Self {
        self.reach = reach;
        self
    }

    /// The host ports' listeners inside the sandbox and the connector to its published
    /// ports, once (`None` when the plan has no reach, or it was taken).
    #[cfg(target_os = "linux")]
    pub fn take_reach(&mut self) -> Option<crate::linux::ns::reach::SandboxReach> {
        self.reach.take()
    }

    /// The run's resources, handed back by [`RunningSandbox::release`].
    pub(crate) fn in_slot(mut self, slot: SlotGuard) -> Self {
        self.slot = Some(slot);
        self
    }

    /// The run's seccomp hand-off, when its filter hands calls to the supervisor.
    pub(crate) fn with_hand_off(mut self, hand_off: Option<SeccompHandOff>) -> Self {
        self.seccomp_hand_off = hand_off;
        self
    }

    /// Entries the sandbox setup created in the host's workspace.
    pub(crate) fn with_placeholders(mut self, placeholders: Vec<PathBuf>) -> Self {
        self.host_placeholders = placeholders;
        self
    }

    /// Process id of the run's root (also its process group and session id): the program
    /// (Tier B), the sandbox's pid 1 (native Tier C), bwrap, or the engine's CLI.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// pidfd of the root: signal and wait without pid-reuse races.
    pub fn pidfd(&self) -> &OwnedFd {
        &self.pidfd
    }

    /// The tier the run is in.
    pub fn tier(&self) -> Tier {
        match self.backend {
            Running::TierB { .. } => Tier::B,
            _ => Tier::C,
        }
    }

    /// What was enforced.
    pub fn enforcement(&self) -> &Enforcement {
        &self.enforcement
    }

    /// uid and gid the program runs as.
    pub fn child_ids(&self) -> (u32, u32) {
        self.child_ids
    }

    /// Read end of the program's stdout.
    pub fn stdout(&self) -> &OwnedFd {
        &self.stdout
    }

    /// Read end of the program's stderr.
    pub fn stderr(&self) -> &OwnedFd {
        &self.stderr
    }

    /// Write end of the program's stdin, when the plan carries data (once).
    pub fn take_stdin(&mut self) -> Option<OwnedFd> {
        self.stdin.take()
    }

    /// The primary side of the run's terminal, when the launch asked for one (once): the
    /// program's output is read from it and its input written to it; the run's stdout
    /// and stderr are then empty.
    pub fn take_terminal(&mut self) -> Option<Terminal> {
        self.terminal.take()
    }

    /// The run's resources (private tmp, landlock ruleset, cgroup), until released.
    pub fn slot(&self) -> Option<&Slot> {
        self.slot.as_deref()
    }

    /// The run's seccomp hand-off, when its filter hands calls to the supervisor (once).
    pub fn take_seccomp_hand_off(&mut self) -> Option<SeccompHandOff> {
        self.seccomp_hand_off.take()
    }

    /// Entries the sandbox setup created in the host's workspace (mount points of
    /// protected-path covers), removed by [`RunningSandbox::release`].
    pub fn host_placeholders(&self) -> &[PathBuf] {
        &self.host_placeholders
    }

    /// How the run's landlock and seccomp denials are read: take them with
    /// [`RunAudit::finish`] once the run has ended.
    pub fn audit_mut(&mut self) -> &mut RunAudit {
        &mut self.audit
    }

    /// `strict` egress with an allowlist: the socket the run's egress proxy is to serve
    /// (once). Tier B's listens on the host's loopback, the only port the program may
    /// connect to; Tier C's was made inside the sandbox's network namespace on
    /// `127.0.0.1:SANDBOX_PROXY_PORT`. `None`: the plan needs no proxy
    /// (or the listener was taken).
    pub fn take_egress_listener(&mut self) -> Option<std::net::TcpListener> {
        match &mut self.backend {
            Running::TierB {
                egress_listener, ..
            }
            | Running::Native {
                egress_listener, ..
            }
            | Running::Bwrap {
                egress_listener, ..
            } => egress_listener.take(),
            Running::Container { .. } => None,
        }
    }

    /// Once the run's tree is gone: its bounded `/tmp` and, in review mode, the overlay's
    /// upper layer (once).
    pub fn take_scratch(&mut self) -> Scratch {
        let (tmp_fs, upper_layer) = match &mut self.backend {
            Running::TierB { tmp_fs, .. } => (tmp_fs.take(), None),
            Running::Native {
                tmp_fs,
                upper_layer,
                ..
            } => (tmp_fs.take(), upper_layer.take()),
            Running::Container { upper_layer, .. } => (None, upper_layer.take()),
            Running::Bwrap { .. } => (None, None),
        };
        Scratch {
            tmp_fs,
            upper_layer: upper_layer.map(UpperLayer),
        }
    }

    /// A container engine's run: the container's name.
    pub fn container_name(&self) -> Option<&str> {
        match &self.backend {
            Running::Container { container, .. } => Some(container.name()),
            _ => None,
        }
    }

    /// The run's cgroup, when it has one.
    pub fn cgroup(&self) -> Option<&RunCgroup> {
        self.slot().and_then(Slot::cgroup)
    }

    /// This run's cgroup figures (a reused group's earlier counts subtracted), when it has
    /// a cgroup.
    pub fn stats(&self) -> Option<CgroupStats> {
        self.slot().and_then(Slot::stats)
    }

    /// Native Tier C: pid 1's report pipe.
    fn report(&self) -> Option<&OwnedFd> {
        match &self.backend {
            Running::Native { report, .. } => Some(report),
            _ => None,
        }
    }

    /// Sends `sig` to every process of the run: each member of its cgroup, and its
    /// process group.
    pub fn signal_all(&self, sig: i32) {
        if let Some(cg) = self.cgroup() {
            for pid in cg.pids() {
                let _ = sys::kill(pid, sig);
            }
        }
        let _ = sys::kill(-self.pid, sig);
    }

    /// SIGKILLs every process of the run: the cgroup (frozen while listed, or
    /// `cgroup.kill`), then the process group. A run without a cgroup may have processes
    /// that left the group; a supervisor that is their subreaper sweeps those itself.
    pub fn kill_all(&self) {
        if let Some(cg) = self.cgroup() {
            let _ = cg.kill_all();
        }
        let _ = sys::kill(-self.pid, libc::SIGKILL);
    }

    /// After the root exited (a zombie not reaped yet): whether its cgroup holds nothing
    /// else. The pids controller charges the zombie until it is reaped, so a count of one
    /// is the root itself, and nothing can join a group whose only member is dead (only a
    /// live member forks, and nothing outside may write the group's attach files). The
    /// usual end of a run then skips [`RunningSandbox::kill_all`], which reads every
    /// controller's member list. `false` without a cgroup or a readable count.
    pub fn only_root_left(&self) -> bool {
        self.cgroup().and_then(RunCgroup::charged_pids) == Some(1)
    }

    /// Reaps the root: its exit and usage, or `None` with `nohang` while it runs.
    pub fn reap(&self, nohang: bool) -> std::io::Result<Option<ExitInfo>> {
        sys::wait_pidfd(&self.pidfd, nohang)
    }

    /// Whether the root has exited (it may not be reaped yet).
    pub fn has_exited(&self) -> bool {
        sys::pidfd_has_exited(&self.pidfd)
    }

    /// A pidfd registered with the tokio reactor: readable once the root has exited.
    pub fn watch_exit(&self) -> std::io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
        sys::register_readable(self.pidfd.try_clone()?)
    }

    /// Native Tier C in a long-lived supervisor (slot pooling on): pid 1's report pipe,
    /// on which [`read_exit_record`] ends the run as soon as pid 1 reports the program's
    /// exit, with pid 1 itself reaped in the background by [`RunningSandbox::release`].
    /// `None` otherwise: a one-shot process waits for pid 1, so that nothing is left to
    /// clean up when it returns.
    pub fn exit_report(&self) -> Option<std::io::Result<OwnedFd>> {
        match self.report() {
            Some(r) if slots::pooling() => Some(r.try_clone()),
            _ => None,
        }
    }

    /// The program's ending, given the root's reaped exit: for native Tier C, the exit
    /// pid 1 reported (blocking until the record comes or pid 1 is gone), or pid 1's own
    /// status when it ended without reporting.
    pub fn ending(&self, root: ExitInfo) -> Ending {
        match self.report().map(crate::tier_c::program_exit) {
            Some(Some(program)) => Ending {
                exit: program,
                pid1_unreported: None,
            },
            Some(None) => Ending {
                exit: root,
                pid1_unreported: Some(root),
            },
            None => Ending {
                exit: root,
                pid1_unreported: None,
            },
        }
    }

    /// bwrap exits with 128 + the signal that killed the program. When the run's cgroup
    /// proves the kernel's OOM killer acted (`oom_killed`), a 137 is that SIGKILL, not a
    /// code the program chose. Other backends report the signal itself.
    pub fn oom_kill_as_signal(&self, oom_killed: bool, exit: &mut ExitInfo) {
        if matches!(self.backend, Running::Bwrap { .. })
            && oom_killed
            && exit.code == Some(128 + libc::SIGKILL)
        {
            exit.code = None;
            exit.signal = Some(libc::SIGKILL);
        }
    }

    /// Hands the run's resources back once its root is reaped, then calls `then`: the
    /// slot is recycled for the next run when its cgroup proves the tree is gone,
    /// destroyed otherwise, and the mount points the sandbox created in the workspace are
    /// removed if still empty.
    ///
    /// A native Tier C run in a long-lived supervisor (slot pooling on) does that on
    /// `reaper`'s thread, off the caller's path: the run ended on pid 1's exit record
    /// (every other process of the sandbox dead), pid 1 is still tearing its namespaces
    /// down, and recycling reads and resets the cgroup (about 0.1 ms); with the sandbox's
    /// mount namespace gone, removing the mount points detaches nothing. Other runs
    /// release here, their root already reaped (a root still alive, which only a broken
    /// invariant could leave, is killed and reaped by the reaper first). Tier B and
    /// bubblewrap slots stay on this path on purpose: when their recycling fails,
    /// destroying the group waits for its last tasks, and on the shared reaper thread
    /// that would hold up every Tier C slot queued behind it.
    pub fn release(&mut self, then: Box<dyn FnOnce() + Send>) {
        let deferred = self.report().is_some() && slots::pooling();
        let placeholders = std::mem::take(&mut self.host_placeholders);
        if !deferred {
            let _ = crate::bwrap::remove_host_mount_points(&placeholders);
        }
        let slot = self.slot.take().map(SlotGuard::into_inner);
        let release = move || {
            if deferred {
                let _ = crate::bwrap::remove_host_mount_points(&placeholders);
            }
            then();
            if let Some(slot) = slot {
                slots::release(slot);
            }
        };
        if !deferred && !matches!(self.reap(true), Ok(None)) {
            // Reaped now, or before (ECHILD).
            release();
            return;
        }
        reaper::defer(&self.pidfd, Box::new(release));
    }
}

/// Native Tier C: the program's exit from pid 1's exit record on `report` (from
/// [`RunningSandbox::exit_report`]), as soon as it is written; `None` when pid 1 ended
/// without writing it (killed: then the root's pidfd tells).
pub async fn read_exit_record(report: OwnedFd) -> Option<ExitInfo> {
    use tokio::io::AsyncReadExt;
    let mut pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(report).ok()?;
    let mut record = [0u8; crate::tier_c::REPORT_RECORD_BYTES];
    pipe.read_exact(&mut record).await.ok()?;
    crate::tier_c::program_exit_from(&record)
}
