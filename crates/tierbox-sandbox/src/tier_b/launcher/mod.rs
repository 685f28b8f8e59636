//! Tier B's armed launcher threads: what every child would otherwise redo identically
//! is done once by the thread that clones it, and inherited at `clone`
//! (`crate::launch`'s launcher threads clone; this module arms them).
//!
//! Invariants:
//! - A Tier B launcher thread of a root supervisor empties its own bounding set and locks
//!   its securebits (41 credential commits per run saved), and attaches the run's base
//!   seccomp filter to itself ([`SeccompProgram::build_base`]: the filter copy, JIT and
//!   action-cache build saved). One such thread exists per distinct arming (at most
//!   [`MAX_ARMED_LAUNCHERS`]), started at a process's second launch with it: a one-shot
//!   process's only child restricts itself ([`armed_launcher`]). The child still checks
//!   both capability sets itself (41 reads), and attaches only the short hand-off filter
//!   stacked on the inherited one when chmod is mediated.
//! - These threads only ever clone Tier B programs: a helper such as `bwrap`, which needs
//!   its capabilities after exec, is cloned on the unarmed launcher or the calling
//!   thread. A thread's capability sets and seccomp filters are its own (no
//!   `SECCOMP_FILTER_FLAG_TSYNC`), so the rest of the supervisor keeps every privilege and
//!   system call it had.
//! - A warm slot's launcher thread ([`slot_launcher`]) also holds the slot's landlock
//!   domain and, when asked, the run's mount namespace ([`ThreadMounts`]), made by
//!   `launch::private_ns` (which a cloned child runs itself when no thread made it).

use std::ffi::{CString, c_char, c_int};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::mpsc;

use crate::launch::private_ns::{FileId, NsProtect, NsTree, PrivateNs, private_ns};
use crate::launch::slots::{Resident, Slot};
use crate::launch::{Job, serve_jobs};
use crate::linux::caps;
use crate::linux::seccomp::{SeccompProgram, SeccompSpec};
use crate::linux::step::Step;

/// Most armed launcher threads one process starts (see the module docs). The arming
/// depends on whether the supervisor is root and on the base seccomp filter, which the
/// run's egress mode and uid pick: a handful in practice. A launch whose arming finds
/// no thread clones on the unarmed launcher, and its child does everything itself.
pub const MAX_ARMED_LAUNCHERS: usize = 8;

/// Most launcher threads one pooled slot keeps, one per arming (the egress mode's base
/// filter, audit on or off): two cover a host switching audit, or a policy alternating
/// two egress modes, without re-arming a thread per run.
pub const MAX_SLOT_LAUNCHERS: usize = 2;

/// What an armed launcher thread applied to itself, for its children to inherit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Arming {
    /// Empty bounding set, empty ambient set, securebits locked (root supervisor).
    pub(crate) drop_privileges: bool,
    /// `no_new_privs` and the base filter of this spec attached.
    pub(crate) seccomp: Option<SeccompSpec>,
    /// The landlock domain and the base filter log what they refuse to the kernel's
    /// audit subsystem, and the thread has an audit session of its own, which the runs
    /// it clones share one at a time (see [`SlotLauncher`]).
    pub(crate) audit: bool,
}

impl Arming {
    pub(crate) fn is_empty(&self) -> bool {
        !self.drop_privileges && self.seccomp.is_none()
    }

    /// Applies the arming, and the landlock ruleset `landlock` when given, to the calling
    /// thread (a new launcher thread, before it clones anything), in the child's order:
    /// capabilities, `no_new_privs`, landlock, seccomp. With `hand_off` and a spec that
    /// hands calls to the supervisor (chmod, the argument rules' refusals), the hand-off
    /// filter is attached too, and its listener returned. A failure leaves the thread
    /// unusable.
    fn apply_to_this_thread(
        &self,
        landlock: Option<std::os::fd::RawFd>,
        hand_off: bool,
    ) -> Result<Option<OwnedFd>, i32> {
        use crate::linux::sys as lsys;
        // The same flags the child would use when it restricts itself.
        let (landlock_flags, seccomp_flags) = if self.audit {
            (
                lsys::LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON,
                libc::SECCOMP_FILTER_FLAG_LOG,
            )
        } else {
            (0, 0)
        };
        if self.drop_privileges {
            lsys::set_securebits_noroot()?;
            lsys::drop_bounding_set(caps::last_cap())?;
            lsys::clear_ambient()?;
        }
        if landlock.is_some() || self.seccomp.is_some() {
            lsys::set_no_new_privs()?;
        }
        if let Some(fd) = landlock {
            lsys::landlock_restrict_self(fd, landlock_flags)?;
        }
        let Some(spec) = &self.seccomp else {
            return Ok(None);
        };
        let base = SeccompProgram::cached_base(spec).map_err(|_| libc::EINVAL)?;
        lsys::seccomp_set_filter(&base.as_fprog(), seccomp_flags)?;
        if !(hand_off && spec.needs_listener()) {
            return Ok(None);
        }
        let notifier = SeccompProgram::cached_notifier(spec).map_err(|_| libc::EINVAL)?;
        crate::launch::sys::seccomp_attach_with_listener(&notifier.as_fprog()).map(Some)
    }
}

/// A launcher thread armed for one pooled slot: with [`Arming`], the slot's landlock
/// ruleset and (when chmod is mediated) the hand-off filter applied to itself, so
/// its children inherit all of it and restrict nothing themselves. A slot's ruleset
/// never changes and a landlock domain cannot be left, so the thread lives and dies with
/// the slot: dropping the slot drops the sender, and the thread ends (it is idle: the
/// slot is only dropped after its runs are over). So there are at most as many as slots:
/// [`crate::launch::slots::MAX_IDLE_SLOTS`] idle ones and one per run in progress.
///
/// The hand-off filter's listener belongs to the slot: a slot serves one run at a time,
/// so the calls arriving on it are that run's, and the run's mediator serves it with the
/// run's own grants (a process of an earlier run is dead before its slot is reused, and
/// a dead process's pending call is withdrawn by the kernel).
///
/// Armed for audit ([`Arming::audit`]), the thread also has an audit session of its own,
/// and the run using the slot registers it for its duration: every process of the run
/// is cloned by this thread and dead before the run's barrier comes back, so what the
/// session logs meanwhile is that run's. A run whose barrier did not come back retires
/// the session ([`crate::linux::audit::session_retired`]): late records could still
/// arrive, so the slot gets a new thread and session before its next run.
#[derive(Debug)]
pub(crate) struct SlotLauncher {
    arming: Arming,
    /// The mount namespace the thread made for itself ([`ThreadMounts`]); `None`: the
    /// supervisor's.
    mounts: Option<NsPlan>,
    /// What it holds of the run's protected paths there, checked before each run.
    held: ThreadNs,
    /// The mount points those trees cover in the slot's tmp (relative to it), with the
    /// `(device, inode)` each had when the thread moved a tree onto it.
    mount_points: Vec<(PathBuf, (u64, u64))>,
    tx: mpsc::Sender<Job>,
    listener: Option<OwnedFd>,
    session: Option<u32>,
}

impl SlotLauncher {
    /// The mount points of the thread's trees in the slot's tmp ([`SlotLauncher::mounts`]).
    pub(crate) fn mount_points(&self) -> &[(PathBuf, (u64, u64))] {
        &self.mount_points
    }
}

/// A pooled slot's launcher threads, one per arming in use, at most
/// [`MAX_SLOT_LAUNCHERS`], newest last: what Tier B keeps with the slot ([`Resident`]).
#[derive(Debug, Default)]
struct SlotLaunchers(Vec<SlotLauncher>);

impl SlotLaunchers {
    /// The launchers `resident` (a slot's) holds, made empty when it holds none yet;
    /// `None` if another backend's resident is there (never: only Tier B keeps one).
    fn of(resident: &mut Option<Box<dyn Resident>>) -> Option<&mut Vec<SlotLauncher>> {
        let resident: &mut dyn std::any::Any =
            &mut **resident.get_or_insert_with(|| Box::new(Self::default()));
        resident.downcast_mut::<Self>().map(|l| &mut l.0)
    }
}

impl Resident for SlotLaunchers {
    fn mount_points(&self) -> Vec<PathBuf> {
        self.0
            .iter()
            .flat_map(|l| l.mount_points().iter().map(|(rel, _)| rel.clone()))
            .collect()
    }

    fn retain_in_place(&mut self, tmp: &Path) {
        self.0
            .retain(|l| mount_points_in_place(tmp, l.mount_points()));
    }
}

/// Whether each of `points` (relative to the slot's tmp `tmp`) is still the file it was.
pub(crate) fn mount_points_in_place(tmp: &Path, points: &[(PathBuf, (u64, u64))]) -> bool {
    points
        .iter()
        .all(|(rel, id)| file_id(&tmp.join(rel)).is_some_and(|now| now == *id))
}

/// `(device, inode)` of `path`, not following a final symlink.
fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// A Tier B run's mount namespace, owned (what [`PrivateNs`] points into while it is
/// made): the trees moved into it, in order, then its protected paths. Equal plans make
/// equal namespaces, so a warm slot's launcher thread that made one serves only runs
/// whose plan is the same ([`ThreadMounts`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NsPlan {
    /// The run's own `(uid, gid)`, mapped to themselves in a user namespace made with the
    /// mount namespace (an unprivileged supervisor); `None`: a mount namespace only.
    pub(crate) userns: Option<(u32, u32)>,
    /// The trees, in order (every one cloned before the first is moved).
    pub(crate) trees: Vec<NsTreePlan>,
    /// The protected paths, after the trees.
    pub(crate) protect: Vec<NsProtectPlan>,
    /// The host secrets covered last (`tier_b::hide`), absolute.
    pub(crate) hide: Vec<CString>,
    /// What `/dev/null`, the source of a cover, is.
    pub(crate) dev_null: FileId,
}

/// One tree of an [`NsPlan`] (see [`NsTree`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NsTreePlan {
    pub(crate) source: CString,
    pub(crate) expect: FileId,
    pub(crate) attr: u64,
    pub(crate) dest: CString,
}

/// One protected path of an [`NsPlan`] (see [`NsProtect`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NsProtectPlan {
    pub(crate) base: CString,
    pub(crate) base_id: FileId,
    pub(crate) rel: CString,
    pub(crate) expect: FileId,
    pub(crate) cover: bool,
    pub(crate) attr: u64,
}

/// An [`NsPlan`] in the form [`private_ns`] reads: the raw entries and the slots
/// for the cloned trees, borrowing the plan's strings.
pub(crate) struct RawNs<'a> {
    plan: &'a NsPlan,
    userns: Option<BorrowedFd<'a>>,
    trees: Vec<NsTree>,
    tree_fds: Vec<c_int>,
    protect: Vec<NsProtect>,
    hide: Vec<*const c_char>,
}

impl<'a> RawNs<'a> {
    /// `plan`, joining `userns` first when given (the plan's user namespace).
    pub(crate) fn new(plan: &'a NsPlan, userns: Option<BorrowedFd<'a>>) -> Self {
        let trees: Vec<NsTree> = plan
            .trees
            .iter()
            .map(|t| NsTree {
                source: t.source.as_ptr(),
                expect: t.expect,
                attr: t.attr,
                dest: t.dest.as_ptr(),
            })
            .collect();
        let protect = plan
            .protect
            .iter()
            .map(|p| NsProtect {
                base: p.base.as_ptr(),
                base_id: p.base_id,
                rel: p.rel.as_ptr(),
                expect: p.expect,
                cover: p.cover,
                attr: p.attr,
            })
            .collect();
        let hide = plan.hide.iter().map(|p| p.as_ptr()).collect();
        Self {
            plan,
            userns,
            tree_fds: vec![-1; trees.len()],
            trees,
            protect,
            hide,
        }
    }

    /// The spec [`private_ns`] (or a cloned child, [`crate::launch::sys::ChildSpec::private_ns`]) reads; its
    /// pointers are valid while `self` lives and is not changed.
    pub(crate) fn spec(&mut self) -> PrivateNs {
        use std::os::fd::AsRawFd;
        PrivateNs {
            userns_fd: self.userns.map_or(-1, |fd| fd.as_raw_fd()),
            trees: self.trees.as_ptr(),
            n_trees: self.trees.len(),
            tree_fds: self.tree_fds.as_mut_ptr(),
            protect: self.protect.as_ptr(),
            n_protect: self.protect.len(),
            hide: self.hide.as_ptr(),
            n_hide: self.hide.len(),
            dev_null: self.plan.dev_null,
        }
    }

    /// Makes the namespace for the calling thread (a launcher thread arming itself).
    pub(crate) fn make(mut self) -> Result<(), (Step, i32)> {
        let spec = self.spec();
        private_ns(&spec)
    }
}

/// A slot's launcher thread makes the run's mount namespace for itself before it arms
/// itself (Tier B's private `/tmp` and `/dev/shm`, the grants beneath `/tmp` bound back,
/// and protected paths that need no placeholder, checked before each run: [`ThreadNs`];
/// never a user namespace, which a thread cannot join), so the children it clones
/// inherit that namespace with the rest and make no mount of their own. The mount points made for the
/// grants in the slot's tmp are kept by the slot's recycling (removing one detaches what
/// is mounted on it, in every namespace), and checked by inode after each run: a thread
/// whose mount point moved is dropped.
pub(crate) struct ThreadMounts<'a> {
    /// The namespace: a thread serves only runs with the same.
    pub(crate) ns: &'a NsPlan,
    /// The mount points [`ThreadMounts::prepare`] makes in the slot's tmp, relative to it.
    pub(crate) mount_points: Vec<PathBuf>,
    /// Makes the mount points; called only to start a thread.
    pub(crate) prepare: &'a dyn Fn() -> std::io::Result<()>,
}

/// The launcher of a slot, as a run uses it.
pub(crate) struct SlotArmed {
    pub(crate) tx: mpsc::Sender<Job>,
    /// A duplicate of the slot's chmod listener, for this run's mediator.
    pub(crate) listener: Option<OwnedFd>,
    /// The thread's audit session, when armed for audit.
    pub(crate) session: Option<u32>,
}

/// The launcher thread of `slot` armed with `arming` and the slot's ruleset, in a mount
/// namespace of its own with `mounts` when given, started on first use; `None` when the
/// slot has no ruleset or the thread cannot be started, moved or armed (the caller falls
/// back to a process-wide armed launcher, or the child restricts itself).
pub(crate) fn slot_launcher(
    slot: &Slot,
    arming: Arming,
    mounts: Option<&ThreadMounts<'_>>,
) -> Option<SlotArmed> {
    let landlock = slot.landlock.as_ref()?;
    let key: Option<&NsPlan> = mounts.map(|m| m.ns);
    let mut resident = slot.launcher.lock().ok()?;
    let launchers = SlotLaunchers::of(&mut resident)?;
    // A thread whose audit session is retired is of no use any more.
    launchers.retain(|l| !l.session.is_some_and(crate::linux::audit::session_retired));
    // A thread whose protected paths' mounts the host undid is of no use any more.
    launchers.retain(|l| match &l.mounts {
        Some(ns) if !ns.protect.is_empty() && Some(ns) == key => l.held.in_place(ns),
        _ => true,
    });
    let at = match launchers
        .iter()
        .position(|l| l.arming == arming && l.mounts.as_ref() == key)
    {
        Some(at) => at,
        None => {
            // None for this arming and these mounts yet (the base filter follows the
            // egress mode, which a slot key does not cover; audit may be turned on or
            // off; `/dev/shm` may be the run's or the host's): a new thread, the oldest
            // one dropped past the bound (it ends when its sender drops).
            let mount_points = match mounts {
                Some(m) => {
                    (m.prepare)().ok()?;
                    m.mount_points
                        .iter()
                        .map(|rel| file_id(&slot.tmp.join(rel)).map(|id| (rel.clone(), id)))
                        .collect::<Option<Vec<_>>>()?
                }
                None => Vec::new(),
            };
            if launchers.len() >= MAX_SLOT_LAUNCHERS {
                launchers.remove(0);
            }
            let StartedLauncher {
                tx,
                listener,
                session,
                held,
            } = start_launcher(
                "tierbox-launcher-slot",
                arming,
                Some(landlock.raw_fd()),
                true,
                key.cloned(),
            )?;
            launchers.push(SlotLauncher {
                arming,
                held,
                mounts: key.cloned(),
                mount_points,
                tx,
                listener,
                session,
            });
            launchers.len() - 1
        }
    };
    let l = launchers.get(at)?;
    let listener = match &l.listener {
        Some(fd) => Some(fd.try_clone().ok()?),
        None => None,
    };
    Some(SlotArmed {
        tx: l.tx.clone(),
        listener,
        session: l.session,
    })
}

/// Starts a launcher thread, makes the mount namespace `mounts` for itself (when any),
/// arms it (with `landlock` and the chmod hand-off as well, when asked) and waits
/// until it is armed; `None` when the thread cannot start or a step fails. Returns the
/// hand-off filter's listener when one was attached, and the thread's audit session when
/// armed for audit.
fn start_launcher(
    name: &str,
    arming: Arming,
    landlock: Option<std::os::fd::RawFd>,
    hand_off: bool,
    mounts: Option<NsPlan>,
) -> Option<StartedLauncher> {
    type Armed = Result<(Option<OwnedFd>, Option<u32>, ThreadNs), i32>;
    let (tx, rx) = mpsc::channel::<Job>();
    let (ready_tx, ready_rx) = mpsc::sync_channel::<Armed>(1);
    let spawned = std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            crate::launch::sys::block_all_signals_on_this_thread();
            // The session first: once landlocked, the thread cannot write its loginuid.
            let session = if arming.audit {
                crate::linux::audit::thread_session()
                    .map(Some)
                    .map_err(|_| libc::EPERM)
            } else {
                Ok(None)
            };
            // The mounts next: landlock and the filter both refuse mount operations. What
            // the protected paths' mounts are, to check them before each later run.
            let moved = session.and_then(|session| match &mounts {
                None => Ok((session, ThreadNs::default())),
                Some(ns) => RawNs::new(ns, None)
                    .make()
                    .map_err(|(_, errno)| errno)
                    .and_then(|()| ThreadNs::of_this_thread(ns).ok_or(libc::ESTALE))
                    .map(|held| (session, held)),
            });
            let applied = moved.and_then(|(session, held)| {
                arming
                    .apply_to_this_thread(landlock, hand_off)
                    .map(|listener| (listener, session, held))
            });
            let ok = applied.is_ok();
            let _ = ready_tx.send(applied);
            if !ok {
                return;
            }
            serve_jobs(rx);
        });
    // `landlock` (the slot's ruleset fd) stays open until the thread has applied it.
    spawned.ok()?;
    let (listener, session, held) = ready_rx.recv().ok()?.ok()?;
    Some(StartedLauncher {
        tx,
        listener,
        session,
        held,
    })
}

/// A launcher thread [`start_launcher`] started and armed.
struct StartedLauncher {
    tx: mpsc::Sender<Job>,
    /// The hand-off filter's listener, when one was attached.
    listener: Option<OwnedFd>,
    /// The thread's audit session, when armed for audit.
    session: Option<u32>,
    /// What it holds of protected paths in its mount namespace.
    held: ThreadNs,
}

/// What a slot's launcher thread holds in its mount namespace of the run's protected
/// paths: its thread id, and the mount each protected path showed right after the
/// thread bound it. The host may undo a bind between runs (unlinking or renaming over a
/// mount point on the host detaches every mount on it, in every namespace), so before
/// each run the paths are looked up again in the thread's namespace
/// (`/proc/self/task/<tid>/root`), and a thread whose mounts are not all where it left
/// them is dropped.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct ThreadNs {
    tid: i32,
    /// One `(mount id, object)` per protected path of the thread's plan, in order.
    protected: Vec<(u64, FileId)>,
}

impl ThreadNs {
    /// Of the calling thread, which has just made `ns`.
    fn of_this_thread(ns: &NsPlan) -> Option<Self> {
        let protected = ns
            .protect
            .iter()
            .map(|p| mount_of(&protected_path(p)))
            .collect::<Option<Vec<_>>>()?;
        Some(Self {
            tid: rustix::thread::gettid().as_raw_nonzero().get(),
            protected,
        })
    }

    /// Whether every protected path of `ns` still shows, in the thread's namespace, the
    /// mount the thread made and the object `ns` planned.
    fn in_place(&self, ns: &NsPlan) -> bool {
        let root = PathBuf::from(format!("/proc/self/task/{}/root", self.tid));
        self.protected.len() == ns.protect.len()
            && ns
                .protect
                .iter()
                .zip(&self.protected)
                .all(|(p, (mnt, id))| {
                    let path = protected_path(p);
                    let seen = root.join(path.strip_prefix("/").unwrap_or(&path));
                    mount_of(&seen)
                        .is_some_and(|(m, now)| m == *mnt && now == *id && now == p.expect)
                })
    }
}

/// The absolute path of a protected path of a namespace plan.
fn protected_path(p: &NsProtectPlan) -> PathBuf {
    use std::ffi::OsStr;
    Path::new(OsStr::from_bytes(p.base.as_bytes())).join(OsStr::from_bytes(p.rel.as_bytes()))
}

/// The mount id of `path` (a final symlink not followed) and the object it names.
fn mount_of(path: &Path) -> Option<(u64, FileId)> {
    use rustix::fs::{AtFlags, StatxFlags};
    let st = rustix::fs::statx(
        rustix::fs::CWD,
        path,
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::BASIC_STATS | StatxFlags::MNT_ID,
    )
    .ok()?;
    Some((
        st.stx_mnt_id,
        FileId {
            dev: libc::makedev(st.stx_dev_major, st.stx_dev_minor),
            ino: st.stx_ino,
            fmt: u32::from(st.stx_mode) & libc::S_IFMT,
        },
    ))
}

/// The launcher thread armed with `arming`, started at the process's *second* launch
/// with that arming; `None` for the first, and when there is none and cannot be one
/// (arming failed on this host, or [`MAX_ARMED_LAUNCHERS`] are taken by other armings).
///
/// Arming a thread does what one child restricting itself does (the bounding-set
/// drops, the filter's attach) plus the thread's start and two wake-ups to hand it the
/// clone. A process that launches once, such as the CLI, never gets it back, so its
/// first launch with an arming has the child restrict itself (cloned as
/// [`crate::launch::LaunchOptions::launcher_thread`] says); a process that launches again arms the
/// thread then, and every later child inherits. The layers are the same either way.
pub(crate) fn armed_launcher(arming: Arming) -> Option<mpsc::Sender<Job>> {
    static ARMED: Mutex<Vec<(Arming, ArmedLauncher)>> = Mutex::new(Vec::new());
    let mut armed = ARMED.lock().ok()?;
    if let Some((_, launcher)) = armed.iter_mut().find(|(a, _)| *a == arming) {
        if let ArmedLauncher::SeenOnce = launcher {
            *launcher = match start_launcher("tierbox-launcher-armed", arming, None, false, None) {
                Some(started) => ArmedLauncher::Started(started.tx),
                None => ArmedLauncher::Failed,
            };
        }
        return match launcher {
            ArmedLauncher::Started(tx) => Some(tx.clone()),
            ArmedLauncher::SeenOnce | ArmedLauncher::Failed => None,
        };
    }
    if armed.len() < MAX_ARMED_LAUNCHERS {
        armed.push((arming, ArmedLauncher::SeenOnce));
    }
    None
}

/// What [`armed_launcher`] knows of one arming.
enum ArmedLauncher {
    /// Launched with once: its child restricted itself.
    SeenOnce,
    /// Its thread, armed.
    Started(mpsc::Sender<Job>),
    /// Its thread could not start or be armed on this host (not retried).
    Failed,
}
