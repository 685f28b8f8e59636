//! A run's per-run resources when no warm slot fits: its private tmp (a bounded tmpfs
//! under a root supervisor), landlock ruleset and cgroup.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use tierbox_policy::enforcement::BackendId;
use tierbox_policy::plan::Plan;
use tierbox_policy::{Layer, Tier};

use super::owner::{owner_prefix, sweep_orphaned_groups_once};
use super::slots::SlotKey;
use super::{
    LaunchError, LaunchOptions, Slot, cgroup_limits, require, slots, sweep_orphaned_tmp, sys,
};
use crate::linux::cgroup::{CgroupLimits, RunCgroup};
use crate::linux::landlock::{LandlockSpec, PreparedLandlock};
use crate::probe::host_facts;

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
        needs_covers: false,
    };
    match slots::take(&key) {
        Some(slot) => Ok(slot),
        None => new_slot(plan, opts, key, None, &limits, missing),
    }
}

/// A new slot's landlock grants: `spec` as it is, or — when the run gets a mount
/// namespace of its own (a bounded tmp, or a user namespace) — `spec` with its read-only
/// paths replaced by `covered`, wider grants whose extra reach that namespace covers (the
/// slot's key then says so: [`SlotKey::needs_covers`]).
pub(crate) struct LandlockBase {
    pub(crate) spec: LandlockSpec,
    pub(crate) covered: Option<Vec<PathBuf>>,
}

/// Builds fresh per-run resources: the private tmp (with `home/`), the landlock ruleset
/// granting it, and the cgroup.
pub(crate) fn new_slot(
    plan: &Plan,
    opts: &LaunchOptions,
    mut key: SlotKey,
    landlock_base: Option<LandlockBase>,
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
    let shm = tmp.join(slots::SHM_DIR);
    let private = matches!(bounded, Some(Ok(_))) || key.userns;
    if private && let Err(e) = make_owned_dir(&shm, key.uid, key.gid) {
        if matches!(bounded, Some(Ok(_))) {
            unmount_private_tmp(&tmp);
        }
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    let landlock = match landlock_base {
        Some(LandlockBase { mut spec, covered }) => {
            if private && let Some(read_only) = covered {
                spec.read_only.clone_from(&read_only);
                key.read_only = read_only;
                key.needs_covers = true;
            }
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
                let tier = if key.backend == BackendId::TierBLinux {
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
        // The backend says why (Tier B's reason names its mount namespace).
        None => {}
    }
    Ok(slot)
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

/// Creates `<base>/run-<id>` with mode 0700, owned by the child's uid.
fn make_private_tmp(base: &Path, run_id: &str, uid: u32, gid: u32) -> Result<PathBuf, LaunchError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(base)
        .map_err(LaunchError::setup(format!("create {}", base.display())))?;
    let _ = std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o711));
    crate::watchdog::note_tmp_base(base);
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
