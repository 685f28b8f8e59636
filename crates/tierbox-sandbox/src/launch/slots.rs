//! Warm launch slots: a run's private `TMPDIR`, its landlock ruleset and its cgroup,
//! reused by the next run with the same shape.
//!
//! Building these costs more than the spawn itself (about 150 landlock rules once host
//! secrets are carved out of `/etc`, two directories, four cgroup directories with their
//! limit files, and their removal). A slot is returned to the pool only when reuse cannot
//! leak anything between runs:
//!
//! - the slot has a cgroup (so the previous run's whole tree is provably gone) and the
//!   cgroup is empty after the kill;
//! - the temporary directory is emptied *in place*: landlock rules bind to inodes, so the
//!   directory itself is kept and only its contents are removed (and `home/` recreated);
//! - cgroup usage is reset (v1 `memory.max_usage_in_bytes`) or measured as a delta from a
//!   baseline (OOM kills, `pids.max` hits); v2 groups are not pooled, because `memory.peak`
//!   cannot be reset for every reader;
//! - the slot key covers everything the ruleset and the cgroup encode: every granted path,
//!   the scopes, the TCP rule, the limits and the child's uid/gid; and the backend, so a
//!   bubblewrap run (whose slot may not be recyclable) never takes a native run's.
//!
//! Any failure while recycling destroys the slot instead.
//!
//! Pooling is off by default: a process that exits with idle slots would leave their
//! directories and cgroups behind. Long-lived supervisors (the server, benchmarks, library
//! users with many runs) turn it on with [`set_pooling`] and call [`drain`] before they
//! exit.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::linux::cgroup::{CgroupLimits, CgroupStats, CgroupVersion, RunCgroup};
use crate::linux::landlock::PreparedLandlock;

/// The directory of a run's private tmp that is its `/dev/shm` (Tier B's mount namespace
/// mounts it there): made with the tmp when the run gets a private one, and emptied in
/// place when the slot is recycled (its inode carries a landlock rule of its own).
pub const SHM_DIR: &str = ".dev-shm";

/// Most idle slots kept, across all keys. Each holds one directory, one ruleset fd and
/// up to four cgroup directories with their open attach files.
pub const MAX_IDLE_SLOTS: usize = 8;

/// Everything a slot's resources encode; two runs with equal keys can share a slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlotKey {
    /// The backend whose runs use the slot (Tier B and the Tier C ones). A bubblewrap run's slot cannot always be recycled (bwrap's own pid 1 may
    /// outlive the monitor the supervisor reaps, still charged to the group), so it must
    /// never take, and then destroy, the warm slot of another backend's runs.
    pub backend: tierbox_policy::enforcement::BackendId,
    pub tmp_base: PathBuf,
    pub uid: u32,
    pub gid: u32,
    pub read_only: Vec<PathBuf>,
    pub read_write: Vec<PathBuf>,
    pub scopes: bool,
    pub tcp_connect_ports: Option<Vec<u16>>,
    pub landlock: bool,
    pub cgroup_limits: CgroupLimits,
    pub cgroup: bool,
    /// Tier B under a root supervisor: the size of the tmpfs the private tmp is to be
    /// (`limits.disk_bytes`, capped as Tier C's `/tmp`); `None`: a plain directory.
    pub tmp_bytes: Option<u64>,
    /// Tier B under an unprivileged supervisor: the run's mount namespace is made in a
    /// user namespace of its own (`tier_b::namespace`), so the private tmp has its
    /// shared-memory directory, with a landlock rule of its own (as a bounded tmp does).
    pub userns: bool,
    /// `read_only` grants paths whole that hold what the run must not read (Tier B's
    /// system roots, `tier_b::hide`): a run in this slot must have its mount namespace
    /// cover those first.
    pub needs_covers: bool,
}

impl SlotKey {
    /// The key of a slot of `backend` under `tmp_base` that encodes nothing: no grants,
    /// no landlock, no cgroup, zero limits, uid and gid 0.
    pub(crate) fn nothing(
        backend: tierbox_policy::enforcement::BackendId,
        tmp_base: &Path,
    ) -> Self {
        Self {
            backend,
            tmp_base: tmp_base.to_path_buf(),
            uid: 0,
            gid: 0,
            read_only: Vec::new(),
            read_write: Vec::new(),
            scopes: false,
            tcp_connect_ports: None,
            landlock: false,
            cgroup_limits: CgroupLimits {
                memory_bytes: 0,
                max_processes: 0,
                cpu_quota_percent: None,
            },
            cgroup: false,
            tmp_bytes: None,
            userns: false,
            needs_covers: false,
        }
    }
}

/// The per-run resources of a launch.
#[derive(Debug)]
pub struct Slot {
    pub(crate) key: SlotKey,
    /// The run's private temporary directory (`TMPDIR`); `home/` inside it is the private
    /// `HOME` when the plan asks for one.
    pub tmp: PathBuf,
    /// `tmp` is a tmpfs of this many bytes the supervisor mounted (Tier B's disk bound).
    pub tmp_bytes: Option<u64>,
    /// Why `tmp` is not bounded (a mount that failed; or, set by the backend, that it
    /// asked for none: an unprivileged supervisor).
    pub tmp_unbounded_why: String,
    pub(crate) landlock: Option<PreparedLandlock>,
    pub(crate) cgroup: Option<RunCgroup>,
    baseline: CgroupStats,
    /// This slot was reused from the pool (for the enforcement report and benchmarks).
    pub reused: bool,
    /// What a backend keeps with the slot while it is pooled ([`Resident`]: Tier B's
    /// launcher threads that hold its landlock domain); `None` until one does.
    pub(crate) launcher: Mutex<Option<Box<dyn Resident>>>,
}

/// What a backend keeps with a warm slot between its runs (Tier B's launcher threads,
/// each in a mount namespace whose trees cover mount points in the slot's tmp): recycling
/// keeps those mount points while it empties the tmp (removing one would detach what is
/// mounted on it in that namespace), then lets the resident drop what no longer fits.
/// Dropped with the slot.
pub(crate) trait Resident: std::fmt::Debug + Send + std::any::Any {
    /// The paths (relative to the slot's tmp) that emptying it must keep.
    fn mount_points(&self) -> Vec<PathBuf>;
    /// After the slot's tmp `tmp` was emptied: drops what relies on a mount point that is
    /// not where it was left (the run renamed a directory holding it).
    fn retain_in_place(&mut self, tmp: &Path);
}

impl Slot {
    pub(crate) fn new(
        key: SlotKey,
        tmp: PathBuf,
        landlock: Option<PreparedLandlock>,
        cgroup: Option<RunCgroup>,
    ) -> Self {
        let baseline = cgroup.as_ref().map(RunCgroup::stats).unwrap_or_default();
        Self {
            key,
            tmp,
            tmp_bytes: None,
            tmp_unbounded_why: String::new(),
            landlock,
            cgroup,
            baseline,
            launcher: Mutex::new(None),
            reused: false,
        }
    }

    /// A slot that holds nothing (no directory, ruleset or cgroup): what a guard leaves in
    /// place of the slot it gave away. Never released.
    fn vacant() -> Self {
        let key = SlotKey::nothing(
            tierbox_policy::enforcement::BackendId::TierBLinux,
            Path::new(""),
        );
        Self::new(key, PathBuf::new(), None, None)
    }

    /// The run's cgroup.
    pub fn cgroup(&self) -> Option<&RunCgroup> {
        self.cgroup.as_ref()
    }

    /// Usage of this run: the cgroup's figures minus what earlier runs of the slot left.
    pub fn stats(&self) -> Option<CgroupStats> {
        let now = self.cgroup.as_ref()?.stats();
        Some(CgroupStats {
            memory_peak_bytes: now.memory_peak_bytes,
            oom_kills: now.oom_kills.saturating_sub(self.baseline.oom_kills),
            pids_limit_hit: now
                .pids_limit_hit
                .saturating_sub(self.baseline.pids_limit_hit),
        })
    }
}

static POOLING: AtomicBool = AtomicBool::new(false);

/// Turns slot reuse on or off; turning it off destroys the idle slots. Turned on, the
/// idle slots are also destroyed when the process ends normally without [`drain`] (an
/// embedder, or a test binary, that returns from `main`): an idle Tier B slot holds a
/// tmpfs mounted on the host, which nothing else would remove (a process killed by a
/// signal has its watchdog for that, `crate::watchdog`).
pub fn set_pooling(on: bool) {
    POOLING.store(on, Ordering::SeqCst);
    if on {
        static AT_EXIT: std::sync::Once = std::sync::Once::new();
        AT_EXIT.call_once(|| {
            let _ = super::sys::at_exit(destroy_idle_at_exit);
        });
    } else {
        drain();
    }
}

/// The exit handler of [`set_pooling`]: destroys the idle slots, without waiting for
/// anything (a thread still holding the pool keeps it: never a deadlock at exit).
extern "C" fn destroy_idle_at_exit() {
    let idle: Vec<Slot> = match pool().try_lock() {
        Ok(mut pool) => pool.drain(..).collect(),
        Err(_) => Vec::new(),
    };
    idle.into_iter().for_each(destroy);
}

/// Whether slot reuse is on: the process is a long-lived supervisor that calls [`drain`]
/// before it exits.
pub fn pooling() -> bool {
    POOLING.load(Ordering::SeqCst)
}

/// Longest [`drain`] waits for the slots of runs whose last process is still being reaped
/// ([`super::reaper`]), in milliseconds. Each such process has been SIGKILLed and only
/// has its namespaces to tear down (well under a millisecond).
pub const DRAIN_SETTLE_MS: u64 = 2_000;

/// Destroys every idle slot (their directories and cgroups), after waiting (at most
/// `DRAIN_SETTLE_MS`) for the slots still held by processes being reaped.
pub fn drain() {
    super::reaper::settle(std::time::Duration::from_millis(DRAIN_SETTLE_MS));
    let idle: Vec<Slot> = match pool().lock() {
        Ok(mut pool) => pool.drain(..).collect(),
        Err(_) => Vec::new(),
    };
    idle.into_iter().for_each(destroy);
}

fn pool() -> &'static Mutex<Vec<Slot>> {
    static POOL: Mutex<Vec<Slot>> = Mutex::new(Vec::new());
    &POOL
}

/// Takes an idle slot with `key`, if any.
pub(crate) fn take(key: &SlotKey) -> Option<Slot> {
    take_where(|k| k == key)
}

/// Takes an idle slot whose key is `key` with `read_only` and `read_write` as its
/// landlock paths (`key`'s own path lists are not looked at): a run compares its grants,
/// borrowed from its plan, with the pooled keys, and clones them only for a new slot.
pub(crate) fn take_with_paths(
    key: &SlotKey,
    read_only: &[&Path],
    read_write: &[&Path],
) -> Option<Slot> {
    let same = |owned: &[PathBuf], borrowed: &[&Path]| {
        owned.len() == borrowed.len() && owned.iter().zip(borrowed).all(|(a, b)| a == b)
    };
    take_where(|k| {
        k.same_but_paths(key) && same(&k.read_only, read_only) && same(&k.read_write, read_write)
    })
}

fn take_where(matches: impl Fn(&SlotKey) -> bool) -> Option<Slot> {
    let mut pool = pool().lock().ok()?;
    let idx = pool.iter().position(|s| matches(&s.key))?;
    let mut slot = pool.swap_remove(idx);
    slot.reused = true;
    Some(slot)
}

impl SlotKey {
    /// Equal in every field but the landlock path lists.
    fn same_but_paths(&self, other: &SlotKey) -> bool {
        let SlotKey {
            backend,
            tmp_base,
            uid,
            gid,
            read_only: _,
            read_write: _,
            scopes,
            tcp_connect_ports,
            landlock,
            cgroup_limits,
            cgroup,
            tmp_bytes,
            userns,
            needs_covers,
        } = self;
        *backend == other.backend
            && *tmp_base == other.tmp_base
            && *uid == other.uid
            && *gid == other.gid
            && *scopes == other.scopes
            && *tcp_connect_ports == other.tcp_connect_ports
            && *landlock == other.landlock
            && *tmp_bytes == other.tmp_bytes
            && *userns == other.userns
            && *needs_covers == other.needs_covers
            && *cgroup_limits == other.cgroup_limits
            && *cgroup == other.cgroup
    }
}

/// A launch's slot, handed back ([`release`]) when the guard is dropped: a launch that
/// fails after taking its slot returns with `?` and loses nothing, and a running sandbox
/// holds its slot in one until [`crate::running::RunningSandbox::release`] takes it.
#[derive(Debug)]
pub(crate) struct SlotGuard {
    slot: Slot,
    /// The guard still owns `slot` (not yet taken by [`SlotGuard::into_inner`]).
    held: bool,
}

impl SlotGuard {
    pub(crate) fn new(slot: Slot) -> Self {
        Self { slot, held: true }
    }

    /// The slot, which the caller now hands back itself.
    pub(crate) fn into_inner(mut self) -> Slot {
        self.held = false;
        std::mem::replace(&mut self.slot, Slot::vacant())
    }
}

impl std::ops::Deref for SlotGuard {
    type Target = Slot;

    fn deref(&self) -> &Slot {
        &self.slot
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        if self.held {
            release(std::mem::replace(&mut self.slot, Slot::vacant()));
        }
    }
}

/// Ends a run's use of `slot`: recycles it into the pool when that is provably clean,
/// destroys it otherwise. The run's processes must already have been killed.
pub fn release(mut slot: Slot) {
    if !POOLING.load(Ordering::SeqCst) {
        destroy(slot);
        return;
    }
    match recycle(&mut slot) {
        Ok(()) => {
            let evicted = match pool().lock() {
                Ok(mut pool) => {
                    pool.push(slot);
                    if pool.len() > MAX_IDLE_SLOTS {
                        Some(pool.remove(0))
                    } else {
                        None
                    }
                }
                Err(_) => Some(slot),
            };
            if let Some(old) = evicted {
                destroy(old);
            }
        }
        Err(()) => destroy(slot),
    }
}

fn recycle(slot: &mut Slot) -> Result<(), ()> {
    let Some(cg) = slot.cgroup.as_ref() else {
        return Err(());
    };
    if cg.version() != CgroupVersion::V1 {
        return Err(());
    }
    // The supervisor killed the tree already; a slot is reused only if that provably
    // worked, and every one of its processes was reaped: an exited but unreaped task
    // (e.g. bwrap's pid 1, orphaned to init when its monitor exits first) still holds a
    // place under `pids.max`, and a reused group would start the next run short of it.
    // Zero charged tasks means none in any controller (see `RunCgroup::is_empty`).
    if cg.charged_pids() != Some(0) {
        return Err(());
    }
    // The mount points a slot's resident moved trees onto (Tier B's `ThreadMounts`)
    // stay: removing one would detach what is mounted on it in that thread's namespace.
    // One that is not where the thread left it (the run renamed a directory holding it)
    // makes that thread useless: it is dropped, and the slot's next run starts another.
    let keep: Vec<PathBuf> = match slot.launcher.lock() {
        Ok(resident) => resident
            .as_ref()
            .map(|r| r.mount_points())
            .unwrap_or_default(),
        Err(_) => return Err(()),
    };
    empty_dir_in_place(&slot.tmp, &keep).map_err(|_| ())?;
    if !keep.is_empty()
        && let Ok(mut resident) = slot.launcher.lock()
        && let Some(resident) = resident.as_mut()
    {
        resident.retain_in_place(&slot.tmp);
    }
    cg.reset_peak().map_err(|_| ())?;
    slot.baseline = cg.stats();
    Ok(())
}

/// Removes everything inside `dir` but keeps `dir` itself (its inode carries the landlock
/// rule), and each path of `keep` (relative to `dir`, with the directories that lead to
/// it), then recreates `home/` with the same owner and mode as `dir`. The shared-memory
/// directory of a bounded tmp ([`SHM_DIR`]) carries a rule too: it is
/// emptied in place as well.
fn empty_dir_in_place(dir: &Path, keep: &[PathBuf]) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let home = dir.join("home");
    let shm = dir.join(SHM_DIR);
    if shm.is_dir() {
        empty_except(&shm, Path::new(""), &[])?;
    }
    if keep.is_empty() && untouched(dir, &home)? {
        return Ok(());
    }
    let meta = std::fs::symlink_metadata(dir)?;
    let mut keep = keep.to_vec();
    keep.push(PathBuf::from(SHM_DIR));
    empty_except(dir, Path::new(""), &keep)?;
    if !home.exists() {
        std::fs::DirBuilder::new().mode(0o700).create(&home)?;
    }
    std::os::unix::fs::chown(&home, Some(meta.uid()), Some(meta.gid()))
}

/// Removes every entry of `dir` (which is `rel` beneath the directory being emptied)
/// except those of `keep`; a directory on the way to one of them is entered and emptied
/// the same way instead (never a symlink: only what `lstat` calls a directory).
fn empty_except(dir: &Path, rel: &Path, keep: &[PathBuf]) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let entry_rel = rel.join(entry.file_name());
        let kind = entry.file_type()?;
        if keep.contains(&entry_rel) {
            continue;
        }
        if kind.is_dir() {
            if keep.iter().any(|k| k.starts_with(&entry_rel)) {
                empty_except(&path, &entry_rel, keep)?;
            } else {
                std::fs::remove_dir_all(&path)?;
            }
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

/// The run left the directory as it found it: only an empty `home/` inside (and the
/// shared-memory directory, emptied already).
fn untouched(dir: &Path, home: &Path) -> std::io::Result<bool> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        names.push(entry?.file_name());
        if names.len() > 2 {
            return Ok(false);
        }
    }
    names.retain(|n| n != SHM_DIR);
    Ok(names.len() == 1 && names[0] == "home" && std::fs::read_dir(home)?.next().is_none())
}

fn destroy(slot: Slot) {
    if let Some(cg) = slot.cgroup {
        let _ = cg.kill_all();
        let _ = cg.remove();
    }
    if slot.tmp_bytes.is_some() {
        super::unmount_private_tmp(&slot.tmp);
    }
    let _ = std::fs::remove_dir_all(&slot.tmp);
}

#[cfg(test)]
#[path = "slots_tests.rs"]
mod tests;
