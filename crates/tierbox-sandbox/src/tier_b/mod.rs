//! Tier B: direct spawn with a new session, rlimits, a rebuilt environment, no
//! capabilities, `no_new_privs`, landlock, seccomp and a per-run cgroup; wherever it can
//! be made (a root supervisor, or user namespaces) also a mount namespace of the run's own
//! (`namespace`) with a private `/tmp` and `/dev/shm` ([`mounts`]) and the protected
//! paths read-only (`protect`), every other path the host's.
//!
//! Invariants:
//! - nothing is inherited implicitly: the environment is exactly the Plan's (plus the
//!   run's private `TMPDIR` and `HOME`, and `USER`/`LOGNAME` naming the run's uid), every
//!   fd other than 0/1/2 is closed at exec, stdin is
//!   `/dev/null` unless the Plan carries data;
//! - a layer that cannot be applied is either a [`Rejection`] or, when the policy lists
//!   it in `tier.optional_layers`, recorded in [`Enforcement::missing_layers`] — never
//!   silently skipped.
//!
//! This module turns a Plan into the child's setup (the landlock ruleset, the seccomp
//! program, the rlimits, the environment, the network rules) and reports what it
//! enforced; cloning the child, its launcher threads and its warm slots are
//! [`crate::launch`]'s, shared with Tier C.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use tierbox_policy::enforcement::BackendId;
use tierbox_policy::plan::Plan;
use tierbox_policy::{EgressMode, Enforcement, Layer, LayerReport, Rejection, Tier};

use crate::linux::audit::RunAudit;
use crate::linux::exec::ExecStrings;
use crate::linux::landlock::{LandlockSpec, LandlockStatus};
use crate::linux::seccomp::{InetSockets, SeccompProgram, SeccompSpec};
use crate::probe::{HostFacts, host_facts};
use crate::running::{Root, Running, RunningSandbox, SeccompHandOff};

use crate::launch::slots::{self, Slot, SlotGuard, SlotKey};
use crate::launch::sys::{self};
use crate::launch::{
    Job, LandlockBase, LaunchError, LaunchOptions, SpawnedChild, StdioPipes, cgroup_fd_array,
    cgroup_limits, clone_on, cstring, new_slot, rlimit_report, rlimit64_table, stdio_pipes,
    user_notif_available,
};
use launcher::{Arming, armed_launcher, slot_launcher};

/// Name of this backend in outcomes and attestations.
pub const BACKEND: BackendId = BackendId::TierBLinux;
/// [`BACKEND`]'s name.
// Other crates' tests match a run's backend against it.
#[cfg(feature = "test-support")]
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

/// Launches `plan` in Tier B.
pub fn launch(plan: &Plan, opts: &LaunchOptions) -> Result<RunningSandbox, LaunchError> {
    let facts = host_facts();
    let mut missing = crate::layers::layers_for(Tier::B, plan, facts)?;
    // `strict` egress with an allowlist: the proxy listens on a fresh host loopback port
    // before the launch, and that port becomes the only one the child may connect to.
    let egress_listener = proxy_listener(plan)?;
    let proxy_port = egress_listener.as_ref().map(|(_, port)| *port);
    let network = network_rules(plan, facts, proxy_port)?;
    // Identity: a root supervisor runs the child as the workspace owner when that is not
    // root, so ordinary file permissions apply on top of landlock.
    let ids = child_ids(facts, &plan.workspace);
    // Landlock does not mediate chmod: every run has its chmod calls performed by the
    // supervisor, beneath its writable grants only. Without seccomp user notification, a
    // run that keeps uid 0 gets them denied instead.
    let mediate_chmod = facts.seccomp && user_notif_available();
    let (slot, whole) = acquire_slot(plan, opts, facts, &network, ids, &mut missing)?;
    let slot = SlotGuard::new(slot);
    // From here on every failure hands the slot back (its guard, dropped after the
    // placeholders' claim).
    let mut claim = crate::placeholders::claim(&[]);
    let running = launch_in_slot(
        plan,
        opts,
        facts,
        (&network, egress_listener.map(|(listener, _)| listener)),
        (&slot, whole.as_ref()),
        ids,
        mediate_chmod,
        &mut missing,
        &mut claim,
    )?;
    Ok(running.in_slot(slot).with_placeholders(claim.keep()))
}

/// [`launch`] in `slot`: the run's namespace planned (its placeholders claimed in
/// `claim` and made, the covers `whole` names when the slot needs them), the child
/// started, what was enforced reported. The caller puts the slot and the placeholders
/// into the returned handle; `network` comes with the egress proxy's listener when the
/// rules name its port.
#[allow(clippy::too_many_arguments)]
fn launch_in_slot(
    plan: &Plan,
    opts: &LaunchOptions,
    facts: &HostFacts,
    (network, egress_listener): (&NetworkRules, Option<std::net::TcpListener>),
    (slot, whole): (&Slot, Option<&hide::WholeRoots>),
    ids: (u32, u32, bool),
    mediate_chmod: bool,
    missing: &mut Vec<Layer>,
    claim: &mut crate::placeholders::Claim,
) -> Result<RunningSandbox, LaunchError> {
    // A root supervisor that could not mount the bounded tmp (a container withholding
    // CAP_SYS_ADMIN) lacks the disk layer after all (an unprivileged one was judged by
    // `layers_for`).
    if slot.tmp_bytes.is_none() && facts.euid == 0 {
        let why = &slot.tmp_unbounded_why;
        crate::launch::require(plan, Tier::B, Layer::Disk, false, why, missing)?;
    }
    // The bounded tmp's root, for the supervisor to see whether it filled up.
    let tmp_fs = slot.tmp_bytes.and_then(|_| {
        rustix::fs::open(
            &slot.tmp,
            rustix::fs::OFlags::PATH
                | rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::NOFOLLOW
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .ok()
    });
    if let Some(trust) = &opts.trust {
        place_trust_bundle(slot, trust)?;
    }
    let private = private_namespace(plan, facts, (slot, whole), ids, missing, claim)?;
    let (mut child, seccomp_layout, audit) = spawn_in_slot(
        plan,
        opts,
        facts,
        network,
        slot,
        ids,
        mediate_chmod,
        private.as_ref(),
    )?;
    missing.sort();
    missing.dedup();
    let enforcement = enforcement_report(
        plan,
        facts,
        network,
        slot,
        seccomp_layout,
        ids,
        mediate_chmod,
        private.as_ref(),
        std::mem::take(missing),
    );
    // The verdicts that answer the refusals the filter hands off with the chmod calls
    // (`notify_refusals` follows `mediate_chmod`).
    let seccomp_hand_off = child.chmod_listener.take().map(|listener| SeccompHandOff {
        listener,
        pending: false,
        refusals: SeccompProgram::cached(
            &seccomp_spec(network, (ids.0, ids.1), mediate_chmod).enforcing(),
        )
        .ok(),
        mediate_chmod,
        views: private.as_ref().map_or_else(Vec::new, |p| p.views.clone()),
    });
    let root = Root::spawned(child, (ids.0, ids.1));
    let backend = Running::TierB {
        tmp_fs,
        egress_listener,
    };
    Ok(RunningSandbox::new(root, enforcement, audit, backend).with_hand_off(seccomp_hand_off))
}

/// The run's own mount namespace ([`namespace`]): its private `/tmp` and `/dev/shm`, and
/// its protected paths bound (their placeholders claimed in `claim` and made) — or,
/// where no namespace can be made here, `None`, with the protected paths recorded
/// missing or the run refused as the policy says.
fn private_namespace(
    plan: &Plan,
    facts: &HostFacts,
    (slot, whole): (&Slot, Option<&hide::WholeRoots>),
    (uid, gid, _): (u32, u32, bool),
    missing: &mut Vec<Layer>,
    claim: &mut crate::placeholders::Claim,
) -> Result<Option<PrivateMounts>, LaunchError> {
    // The covers the slot's landlock grants rely on: a run without them never starts.
    let covers = match (slot.key.needs_covers, whole) {
        (false, _) => None,
        (true, Some(whole)) => Some(whole),
        (true, None) => {
            return Err(LaunchError::Setup {
                what: "the covers of the host's secrets".to_owned(),
                source: std::io::Error::other(
                    "the run's landlock grants the system roots whole, and its plan names no covers",
                ),
            });
        }
    };
    let kind = match namespace::kind_for(facts, slot) {
        Ok(kind) => kind,
        Err(_) if covers.is_some() => {
            return Err(LaunchError::Setup {
                what: "the covers of the host's secrets".to_owned(),
                source: std::io::Error::other(
                    "the run's landlock grants the system roots whole, and it has no mount namespace to cover them in",
                ),
            });
        }
        Err(none) => {
            let why = none.to_string();
            namespace::refuse_scratch_args(plan, &why)?;
            if !plan.filesystem.protected.is_empty() {
                let layer = Layer::ProtectedPaths;
                crate::launch::require(plan, Tier::B, layer, false, &why, missing)?;
            }
            return Ok(None);
        }
    };
    let (read_only, read_write) = landlock_paths(plan, uid, covers);
    let grants = (read_only.as_slice(), read_write.as_slice());
    let mut private = PrivateMounts::plan(plan, facts, slot, kind, (uid, gid), grants)
        .map_err(LaunchError::setup("the private /tmp and /dev/shm"))?;
    if let Some(whole) = covers {
        private
            .hide(whole)
            .map_err(LaunchError::setup("the covers of the host's secrets"))?;
    }
    if !plan.filesystem.protected.is_empty() {
        let protection = protect::plan_protection(plan).map_err(|e| LaunchError::Setup {
            what: "the protected paths (filesystem.protected)".to_owned(),
            source: std::io::Error::other(protect::planning_error(e)),
        })?;
        let placeholders: Vec<PathBuf> = protection
            .placeholders()
            .map(|(p, _)| p.to_path_buf())
            .collect();
        // Claimed before they are made; released after the run (or on a failure here).
        *claim = crate::placeholders::claim(&placeholders);
        protect::make_placeholders(&protection)
            .map_err(LaunchError::setup("the protected paths' placeholders"))?;
        private
            .protect(plan, &protection)
            .map_err(LaunchError::setup(
                "the protected paths (filesystem.protected)",
            ))?;
    }
    Ok(Some(private))
}

/// A warm slot with the shape of this run, or fresh resources; with the system roots
/// whole and their covers when the run can have them ([`hide`]: a run with a mount
/// namespace of its own), which the slot's key says it relies on.
fn acquire_slot(
    plan: &Plan,
    opts: &LaunchOptions,
    facts: &HostFacts,
    network: &NetworkRules,
    (uid, gid, _): (u32, u32, bool),
    missing: &mut Vec<Layer>,
) -> Result<(Slot, Option<hide::WholeRoots>), LaunchError> {
    let abi = facts.landlock_abi.unwrap_or(0);
    let landlock = facts.landlock_abi.is_some();
    let (read_only, read_write) = if landlock {
        landlock_paths(plan, uid, None)
    } else {
        (Vec::new(), Vec::new())
    };
    let whole = if landlock && namespace::available(facts).is_ok() {
        hide::whole_roots(plan, &[&opts.tmp_base])
    } else {
        None
    };
    let covered = whole.as_ref().map(|w| landlock_paths(plan, uid, Some(w)).0);
    let cgroup_limits = cgroup_limits(plan);
    let mut key = SlotKey {
        backend: BACKEND,
        tmp_base: opts.tmp_base.clone(),
        uid,
        gid,
        read_only: Vec::new(),
        read_write: Vec::new(),
        scopes: landlock && abi >= 6,
        tcp_connect_ports: network.tcp_ports.clone(),
        landlock,
        cgroup_limits,
        cgroup: facts.cgroup.is_usable(),
        tmp_bytes: (facts.euid == 0).then(|| crate::linux::mounts::tmp_size_bytes(plan)),
        userns: facts.euid != 0 && namespace::available(facts).is_ok(),
        needs_covers: false,
    };
    if let Some(covered) = &covered {
        let key = SlotKey {
            needs_covers: true,
            ..key.clone()
        };
        if let Some(slot) = slots::take_with_paths(&key, covered, &read_write) {
            return Ok((slot, whole));
        }
    }
    if let Some(slot) = slots::take_with_paths(&key, &read_only, &read_write) {
        return Ok((slot, None));
    }
    // A new slot: only now are the paths copied.
    let owned = |paths: Vec<&Path>| paths.into_iter().map(Path::to_path_buf).collect::<Vec<_>>();
    key.read_only = owned(read_only);
    key.read_write = owned(read_write);
    let spec = landlock.then(|| LandlockBase {
        spec: LandlockSpec {
            read_only: key.read_only.clone(),
            read_write: key.read_write.clone(),
            scope_signals: abi >= 6,
            scope_abstract_unix: abi >= 6,
            tcp_connect_ports: network.tcp_ports.clone(),
        },
        covered: covered.map(owned),
    });
    let mut slot = new_slot(plan, opts, key, spec, &cgroup_limits, missing)?;
    // No bounded tmp was asked for (an unprivileged supervisor): why not.
    if slot.tmp_bytes.is_none() && slot.tmp_unbounded_why.is_empty() {
        slot.tmp_unbounded_why = namespace::unbounded_tmp_why(facts);
    }
    let whole = whole.filter(|_| slot.key.needs_covers);
    Ok((slot, whole))
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
    private: Option<&PrivateMounts>,
    missing: Vec<Layer>,
) -> Enforcement {
    let limits = &plan.limits;
    let in_userns = private.is_some_and(|p| p.kind == NsKind::User);
    Enforcement {
        tier: Some(Tier::B),
        backend: BACKEND,
        kernel: facts.kernel.clone(),
        uid: Some(uid),
        gid: Some(gid),
        capabilities: if facts.euid == 0 {
            "none: bounding, ambient, effective, permitted and inheritable sets cleared; securebits NOROOT locked".to_owned()
        } else if in_userns {
            "none: every capability the run held in its own user namespace dropped (bounding, ambient, effective, permitted and inheritable sets cleared, securebits NOROOT locked); none ever held in the host's".to_owned()
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
                        "{base} instructions inherited from the launcher thread, plus a {}-instruction hand-off filter",
                        layout.attached
                    ),
                },
                "; SysV IPC and POSIX message queues denied (no IPC namespace)",
                match (uid, mediate_chmod) {
                    (0, true) =>
                        "; chmod performed by the supervisor beneath the writable grants only, the argument rules' refusals answered and recorded by it; the run keeps uid 0: chown only to root's own ids, as a no-op, xattr changes EOPNOTSUPP",
                    (0, false) =>
                        "; the run keeps uid 0: chmod denied, chown only to root's own ids, as a no-op, xattr changes EOPNOTSUPP",
                    (_, true) =>
                        "; chmod performed by the supervisor beneath the writable grants only, the argument rules' refusals answered and recorded by it",
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
        namespaces: namespace_report(private),
        rlimits: rlimit_report(
            limits,
            if uid == 0 {
                " (not enforced by the kernel for uid 0)"
            } else {
                ""
            },
        ),
        network: network.description.clone(),
        protected_paths: match (
            plan.filesystem.protected.is_empty(),
            private.and_then(|p| p.protected),
        ) {
            (true, _) => LayerReport::applied("none requested"),
            (false, Some((targets, placeholders))) => LayerReport::applied(format!(
                "{} protected path(s) as {targets} target(s) bound read-only over themselves or covered in the run's mount namespace, the directories leading to them pinned; {placeholders} placeholder(s) created in the workspace",
                plan.filesystem.protected.len()
            )),
            (false, None) => LayerReport::missing(
                "no mount namespace for this run: tier b cannot keep paths inside the writable workspace read-only without one",
            ),
        },
        disk: match slot.tmp_bytes {
            Some(bytes) => LayerReport::applied(format!(
                "/tmp (the run's TMPDIR, with its private HOME and /dev/shm): a tmpfs of {bytes} bytes mounted by the supervisor; the workspace is bounded per file only"
            )),
            None => LayerReport::missing(slot.tmp_unbounded_why.clone()),
        },
        missing_layers: missing,
        passed_over: None,
        grants: Vec::new(),
        denial_reports: std::collections::BTreeMap::new(),
    }
}

/// The enforcement report's namespace lines for a run with `private` (none without).
fn namespace_report(private: Option<&PrivateMounts>) -> Vec<String> {
    let Some(p) = private else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    if let Some((uid, gid)) = p.ns.userns {
        lines.push(format!(
            "user: the run's own, mapping only uid {uid} and gid {gid} to themselves (setgroups denied), made so that it may mount; every capability in it dropped before landlock and seccomp, which refuse nested namespaces"
        ));
    }
    lines.push(format!(
        "mount: a private /tmp (the run's TMPDIR{}) and /dev/shm (its {} directory), the grants beneath /tmp bound back at their paths{}{}; every other path the host's",
        if p.kind == NsKind::User {
            ", a directory of the supervisor's: not size-bounded"
        } else {
            ""
        },
        mounts::SHM_DIR,
        if p.protected.is_some() {
            ", the protected paths bound read-only"
        } else {
            ""
        },
        match p.hidden {
            Some(n) => format!(
                ", {n} host secret(s) beneath the system roots covered (empty and read-only; landlock grants the roots whole)"
            ),
            None => String::new(),
        },
    ));
    lines
}

/// The child's complete environment: the Plan's, plus the private `HOME` and `TMPDIR`,
/// and `USER`/`LOGNAME` naming the run's own uid ([`identity_env`]).
fn child_env(
    plan: &Plan,
    slot: &Slot,
    network: &NetworkRules,
    uid: u32,
    private_mounts: bool,
    trust: Option<&crate::egress::SandboxTrust>,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = plan.env.clone();
    let passwd = std::fs::read_to_string(crate::linux::identity::PASSWD_FILE).unwrap_or_default();
    identity_env(&mut env, &passwd, uid);
    if let Some(port) = network.proxy_port {
        crate::egress::set_proxy_env(&mut env, port);
    }
    // With a private /tmp, the private tmp is `/tmp` (its host path may be hidden by it).
    let tmp = if private_mounts {
        PathBuf::from(mounts::TMP_VIEW)
    } else {
        slot.tmp.clone()
    };
    if plan.filesystem.private_home {
        env.push((
            "HOME".to_owned(),
            tmp.join("home").to_string_lossy().into_owned(),
        ));
    }
    for key in ["TMPDIR", "TMP", "TEMP"] {
        if !env.iter().any(|(k, _)| k == key) {
            env.push((key.to_owned(), tmp.to_string_lossy().into_owned()));
        }
    }
    if let Some(trust) = trust {
        let bundle = tmp.join(crate::egress::CA_BUNDLE_FILE);
        crate::egress::set_trust_env(&mut env, trust, &bundle.to_string_lossy());
    }
    env.sort();
    env
}

/// Puts the trust bundle in the run's tmp (its `TMPDIR`, `/tmp` in its namespace), mode
/// 0444, before the child starts. The directory is the run's (a pooled slot's, emptied
/// after the previous run): the file is made relative to an fd of it, never following a
/// symlink, and whatever a previous run left under the name is removed first.
fn place_trust_bundle(slot: &Slot, trust: &crate::egress::SandboxTrust) -> Result<(), LaunchError> {
    use rustix::fs::{AtFlags, Mode, OFlags};
    let setup = LaunchError::setup("the trust bundle in the run's tmp");
    let dir = rustix::fs::open(
        &slot.tmp,
        OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::RDONLY,
        Mode::empty(),
    )
    .map_err(|e| setup(e.into()))?;
    let name = crate::egress::CA_BUNDLE_FILE;
    match rustix::fs::unlinkat(&dir, name, AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => {}
        Err(e) => {
            return Err(LaunchError::setup("the trust bundle in the run's tmp")(
                e.into(),
            ));
        }
    }
    let fd = rustix::fs::openat(
        &dir,
        name,
        OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::WRONLY | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o444),
    )
    .map_err(|e| LaunchError::setup("the trust bundle in the run's tmp")(e.into()))?;
    let mut file = std::fs::File::from(fd);
    std::io::Write::write_all(&mut file, trust.bundle.as_bytes())
        .map_err(LaunchError::setup("the trust bundle in the run's tmp"))
}

/// `USER` and `LOGNAME` as the run's uid has them in `passwd`: its account's name, so that
/// `$USER`, `whoami` and `id -un` agree (a passed `USER` is the supervisor's, and a root
/// supervisor runs the child as the workspace owner); removed when the uid has no
/// account (the sandbox's unprivileged id), where `whoami` fails too. Pure.
fn identity_env(env: &mut Vec<(String, String)>, passwd: &str, uid: u32) {
    env.retain(|(k, _)| k != "USER" && k != "LOGNAME");
    if let Some(name) = crate::linux::identity::account_name(passwd, uid) {
        env.push(("USER".to_owned(), name.clone()));
        env.push(("LOGNAME".to_owned(), name));
    }
}

/// Prepares everything the child needs (strings, pipes, the seccomp program, the
/// listener socket), clones it, and collects the seccomp listener. Returns the child and
/// the seccomp program's length.
#[allow(clippy::too_many_arguments)]
fn spawn_in_slot(
    plan: &Plan,
    opts: &LaunchOptions,
    facts: &HostFacts,
    network: &NetworkRules,
    slot: &Slot,
    (uid, gid, change_ids): (u32, u32, bool),
    mediate_chmod: bool,
    private: Option<&PrivateMounts>,
) -> Result<(SpawnedChild, Option<SeccompLayout>, RunAudit), LaunchError> {
    // With the kernel's audit records readable, a pooled slot's launcher thread is armed
    // with the log flags and has an audit session the run registers; otherwise the
    // child applies landlock and seccomp itself, with the log flags, in a session of its
    // own (see `Launcher::choose`).
    let mut audit = RunAudit::plan(slot.landlock.is_some(), facts.landlock_abi, facts.seccomp);
    let launcher = Launcher::choose(
        facts,
        network,
        slot,
        (uid, gid),
        mediate_chmod,
        private,
        &mut audit,
    )?;
    let strings = ExecStrings::new(
        plan,
        &child_env(
            plan,
            slot,
            network,
            uid,
            private.is_some(),
            opts.trust.as_deref(),
        ),
        |what, bytes| cstring(bytes, what),
    )?;
    let StdioPipes {
        child: child_stdio,
        parent: parent_stdio,
        terminal,
    } = stdio_pipes(plan, opts)?;
    let (cgroup_fds, n_cgroup_fds) = cgroup_fd_array(slot);
    // The run's namespace: the child's first step after joining its cgroup, unless the
    // slot's launcher thread holds it already.
    let mut raw_ns = match private {
        Some(p) if !launcher.mounts_inherited => {
            p.prepare()
                .map_err(LaunchError::setup("the private /tmp and /dev/shm"))?;
            Some(launcher::RawNs::new(&p.ns, p.userns()))
        }
        _ => None,
    };
    let ns_spec = raw_ns.as_mut().map(launcher::RawNs::spec);
    // In a user namespace of its own the child holds every capability there: it drops
    // them all, as a root supervisor's child does.
    let in_userns = private.is_some_and(|p| p.kind == NsKind::User);
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
        controlling_terminal: terminal.is_some(),
        cgroup_fds,
        n_cgroup_fds,
        drop_privileged: (facts.euid == 0 && !launcher.privileges_inherited) || in_userns,
        ids: change_ids.then_some((uid, gid)),
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
        private_ns: ns_spec
            .as_ref()
            .map_or(std::ptr::null(), |ns| ns as *const sys::PrivateNs),
        // Only a child that restricts itself needs the flags (and a session): an armed
        // slot thread's domain and filter carry them already.
        log_landlock: launcher.child_session && audit.landlock.is_ok(),
        log_seccomp: launcher.child_session && audit.seccomp.is_ok(),
        audit_session: launcher
            .child_session
            .then(crate::linux::audit::SessionWants::default),
        ..sys::ChildSpec::new(
            strings.program.as_ptr(),
            strings.argv(),
            strings.envp(),
            strings.cwd.as_ptr(),
            child_stdio.raw_fds(),
            rlimit64_table(plan),
        )
    };

    let cloned = clone_on(opts, launcher.armed.as_ref(), &mut spec);
    // The child's ends are closed in the parent whatever happened.
    drop(child_stdio);
    let mut cloned = cloned?;
    if let Some(session) = cloned.audit.take() {
        audit.attach(session);
    }
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
        stdio: parent_stdio,
        chmod_listener,
        terminal,
    };
    Ok((child, launcher.layout, audit))
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
    /// The child restricts itself with the log flags, in an audit session started for
    /// it at the clone (audit on, no armed slot thread for it).
    child_session: bool,
    /// The armed thread emptied its bounding and ambient sets and locked securebits, and
    /// the child inherits all three at `clone` (none of them can grow back): the child
    /// skips those steps — 43 `prctl`s through the filter, each only confirming what
    /// the kernel already guarantees — and still empties its capability sets itself.
    privileges_inherited: bool,
    /// The armed slot thread holds the run's private `/tmp` and `/dev/shm` in its mount
    /// namespace, which the child inherits at `clone`.
    mounts_inherited: bool,
}

impl Launcher {
    fn choose(
        facts: &HostFacts,
        network: &NetworkRules,
        slot: &Slot,
        ids: (u32, u32),
        mediate_chmod: bool,
        private: Option<&PrivateMounts>,
        audit: &mut RunAudit,
    ) -> Result<Self, LaunchError> {
        let seccomp_spec = seccomp_spec(network, ids, mediate_chmod);
        let audited = audit.wants_session();
        let drops_privileges = facts.euid == 0;
        let arming = Arming {
            drop_privileges: drops_privileges,
            seccomp: facts.seccomp.then_some(seccomp_spec),
            audit: audited,
        };
        // A private /tmp and /dev/shm is made before anything restricts the process that
        // makes it (landlock and the filter both refuse `unshare` and `mount`): a pooled
        // slot's thread makes it for itself before it arms itself; otherwise (unpooled,
        // or the thread could not be started) the child makes it and restricts itself
        // entirely, inheriting nothing.
        // A thread holds what it can check before each run: a root supervisor's tmp
        // trees and protected paths needing no placeholder (`ThreadNs`), never a user
        // namespace (a thread cannot join one).
        let prepare = || private.map_or(Ok(()), PrivateMounts::prepare);
        let thread_mounts = match private {
            None => None,
            Some(p) if slots::pooling() => match p.for_thread(&prepare) {
                Some(mounts) => Some(mounts),
                None => return Self::restricting_itself(facts, &seccomp_spec, audited),
            },
            Some(_) => return Self::restricting_itself(facts, &seccomp_spec, audited),
        };
        // A pooled slot has a thread that also holds its landlock domain (audited: with
        // the log flags and a session the run adopts); otherwise a process-wide one per
        // arming, from the process's second launch with it, and the child applies
        // landlock itself. The child restricts itself entirely on the first launch, and
        // when audited: then in a session of its own (a process-wide thread's session
        // would be shared by concurrent runs).
        let slot_armed = if slots::pooling() {
            slot_launcher(slot, arming, thread_mounts.as_ref()).and_then(|a| {
                if !audited {
                    return Some(a);
                }
                let session = crate::linux::audit::AuditSession::adopt(a.session?).ok()?;
                audit.attach(Ok(session));
                Some(a)
            })
        } else {
            None
        };
        let mounts_inherited = private.is_some();
        if mounts_inherited && slot_armed.is_none() {
            return Self::restricting_itself(facts, &seccomp_spec, audited);
        }
        let unarmed = audited && slot_armed.is_none();
        let landlock_inherited = slot_armed.is_some();
        let (armed, slot_listener) = match slot_armed {
            Some(a) => (Some(a.tx), a.listener),
            None if arming.is_empty() || unarmed => (None, None),
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
            (true, true, true) => Some(SeccompProgram::cached_notifier(&seccomp_spec)),
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
                        len(SeccompProgram::cached_notifier(&seccomp_spec))
                    } else {
                        0
                    }
            }),
            attached: seccomp.as_deref().map_or(0, SeccompProgram::len),
        });
        let privileges_inherited = drops_privileges && armed.is_some();
        Ok(Self {
            armed,
            slot_listener,
            landlock_inherited,
            seccomp,
            layout,
            child_session: unarmed,
            privileges_inherited,
            mounts_inherited,
        })
    }

    /// A child that makes its own private mounts and then restricts itself entirely,
    /// inheriting nothing (in an audit session of its own when `audited`).
    fn restricting_itself(
        facts: &HostFacts,
        seccomp_spec: &SeccompSpec,
        audited: bool,
    ) -> Result<Self, LaunchError> {
        let seccomp = facts
            .seccomp
            .then(|| SeccompProgram::cached(seccomp_spec))
            .transpose()
            .map_err(|e| LaunchError::Setup {
                what: "seccomp program".to_owned(),
                source: std::io::Error::other(e.to_string()),
            })?;
        let layout = seccomp.as_deref().map(|p| SeccompLayout {
            inherited: None,
            attached: p.len(),
        });
        Ok(Self {
            armed: None,
            slot_listener: None,
            landlock_inherited: false,
            seccomp,
            layout,
            child_session: audited,
            privileges_inherited: false,
            mounts_inherited: false,
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

/// `strict` egress with an allowlist: the run's egress proxy listener on a fresh port of
/// the host's loopback, and that port; `None` when the plan needs no proxy.
fn proxy_listener(plan: &Plan) -> Result<Option<(std::net::TcpListener, u16)>, LaunchError> {
    if !plan.network.needs_proxy() {
        return Ok(None);
    }
    let listener = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .map_err(LaunchError::setup("bind the egress proxy on 127.0.0.1"))?;
    let port = listener
        .local_addr()
        .map_err(LaunchError::setup("the egress proxy's address"))?
        .port();
    Ok(Some((listener, port)))
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
                unavailable("strict egress with an allowlist needs the egress proxy's listener, and none was bound".to_owned())
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

fn seccomp_spec(
    net: &NetworkRules,
    (child_uid, child_gid): (u32, u32),
    mediate_chmod: bool,
) -> SeccompSpec {
    SeccompSpec {
        deny_namespaces: true,
        // A child that keeps uid 0 owns every root-owned file; landlock cannot stop it from
        // changing their modes, owners or attributes, so seccomp does.
        deny_file_metadata: child_uid == 0,
        mediate_chmod,
        // The same listener carries the argument rules' refusals, recorded with their
        // arguments for the denial report.
        notify_refusals: mediate_chmod,
        // It stands for root, the workspace's owner: restoring `root:root` (`tar -x`,
        // `cp -a`) succeeds without changing anything.
        chown_noop_gid: (child_uid == 0).then_some(child_gid),
        // Tier B has no IPC namespace: SysV IPC and message queues would reach the host's
        // objects of the run's uid (root's, for a run that keeps uid 0).
        deny_ipc: true,
        inet: net.inet,
        allow_unix_sockets: net.allow_unix,
    }
}

/// The paths a Tier B run's landlock ruleset grants, borrowed from `plan` (the system
/// roots whole from `whole`, when its namespace covers what they hold): read-only
/// (the system roots, the policy's grants, a few devices and pseudo-files) and
/// read-write (the workspace, the writable grants, the null devices, and the terminal
/// devices unless the run keeps uid 0).
fn landlock_paths<'p>(
    plan: &'p Plan,
    child_uid: u32,
    whole: Option<&'p hide::WholeRoots>,
) -> (Vec<&'p Path>, Vec<&'p Path>) {
    let fs = &plan.filesystem;
    let system: &[PathBuf] = match whole {
        Some(w) => &w.roots,
        None => &fs.system_read_only,
    };
    let read_only = system
        .iter()
        .chain(&fs.read_only)
        .map(PathBuf::as_path)
        .chain(
            READABLE_DEVICES
                .iter()
                .chain(READABLE_PSEUDO)
                .map(Path::new),
        )
        .collect();
    let mut read_write: Vec<&Path> = std::iter::once(plan.workspace.as_path())
        .chain(fs.writable.iter().map(PathBuf::as_path))
        .chain(WRITABLE_DEVICES.iter().map(Path::new))
        .collect();
    if child_uid != 0 {
        read_write.extend(PTY_DEVICES.iter().map(Path::new));
    }
    (read_only, read_write)
}

fn child_ids(facts: &HostFacts, workspace: &Path) -> (u32, u32, bool) {
    if facts.euid != 0 {
        return (facts.euid, facts.egid, false);
    }
    // The group never comes from the workspace directory (a `1500:0` workspace would hand
    // the run group 0) and is never 0: a root-owned workspace's run keeps uid 0 (it must
    // write root's files; landlock bounds where) with the sandbox's unprivileged gid.
    match sys::owner_of(workspace) {
        Ok((uid, _)) if uid != 0 => (uid, crate::linux::identity::run_gid(uid), true),
        _ => (0, crate::linux::identity::root_workspace_ids().0.1, true),
    }
}

pub(crate) mod hide;
pub(crate) mod launcher;
pub mod mounts;
pub(crate) mod namespace;
pub(crate) mod protect;

use namespace::{NsKind, PrivateMounts};

#[cfg(test)]
mod review;

#[cfg(test)]
mod tests {
    use super::identity_env;

    /// `USER`/`LOGNAME` name the run's uid: the supervisor's passed `USER` is replaced,
    /// and a uid without an account gets neither.
    #[test]
    fn user_and_logname_name_the_runs_uid() {
        let passwd = "root:x:0:0:root:/root:/bin/sh\ndev:x:1000:1000::/home/dev:/bin/sh\n";
        let base = vec![
            ("USER".to_owned(), "root".to_owned()),
            ("LANG".to_owned(), "C.UTF-8".to_owned()),
        ];
        let get = |env: &[(String, String)], k: &str| {
            env.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone())
        };
        let mut env = base.clone();
        identity_env(&mut env, passwd, 1000);
        assert_eq!(get(&env, "USER").as_deref(), Some("dev"));
        assert_eq!(get(&env, "LOGNAME").as_deref(), Some("dev"));
        assert_eq!(get(&env, "LANG").as_deref(), Some("C.UTF-8"));
        assert_eq!(env.iter().filter(|(k, _)| k == "USER").count(), 1);
        let mut env = base.clone();
        identity_env(&mut env, passwd, 0);
        assert_eq!(get(&env, "LOGNAME").as_deref(), Some("root"));
        let mut env = base;
        identity_env(&mut env, passwd, 4242);
        assert_eq!((get(&env, "USER"), get(&env, "LOGNAME")), (None, None));
    }
}
