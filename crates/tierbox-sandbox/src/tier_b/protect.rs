//! Tier B's protected paths (`filesystem.protected`: `.git`, or the entries git executes
//! or follows): bound read-only over themselves in the run's own mount namespace, as
//! native Tier C does in its own root, so a run can neither write them nor swap them.
//!
//! The walk is Tier C's ([`crate::linux::mounts::protect`], the table in the module
//! documentation of [`crate::linux::mounts`]), asked about the host's tree as a Tier B
//! run sees it: the workspace and every writable grant are the sandbox-writable trees
//! (landlock's rights add up along a path, so a read-only grant inside them is writable
//! too). Each answer becomes one step of the run's namespace ([`NsProtectPlan`]):
//!
//! - a directory between the workspace and a protected target is *pinned*, bound
//!   writable onto itself: a mount point can be neither renamed nor removed (`EBUSY`), so
//!   `mv .git x` and a fresh `.git/hooks` in its place is impossible;
//! - an existing target is bound read-only onto itself;
//! - a symlink is covered with `/dev/null` (read-only, `nodev`: it cannot even be
//!   opened), never followed;
//! - a missing target the run could create gets a placeholder the supervisor makes on
//!   the host ([`crate::placeholders`]: claimed, and removed after the run when still
//!   empty), bound read-only onto itself.
//!
//! Invariants: **nothing is bound by name.** The supervisor records each target's
//! `(device, inode)` and type when it plans (after making the placeholders); the process
//! that makes the namespace opens the target beneath its base with `openat2(RESOLVE_BENEATH
//! | RESOLVE_NO_SYMLINKS)`, checks it is that object, and moves the clone onto that very
//! descriptor (`MOVE_MOUNT_T_EMPTY_PATH`). A target the workspace's owner or a concurrent
//! run swaps for a symlink, or replaces, between planning and binding fails the launch
//! (`ESTALE`, `ELOOP`): a host directory never becomes a bind's source or destination.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use tierbox_policy::plan::Plan;

use crate::launch::private_ns::FileId;
use crate::linux::mounts::protect::{Protect, ProtectView, Protection, protection};
use crate::linux::mounts::{EntryKind, HostNode, MountPlanError, lstat_host};
use crate::linux::ns::sys::{
    MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY,
};
use crate::tier_b::launcher::NsProtectPlan;

/// The host as a Tier B run sees it, for the walk: `lstat` through the placeholder
/// registry (a placeholder another run claims is missing), and the writable trees.
struct TierBView<'c> {
    claims: &'c crate::placeholders::Observer<'c>,
    seen: BTreeMap<PathBuf, HostNode>,
    /// The workspace and the writable grants, with their kinds.
    writable: Vec<(PathBuf, EntryKind)>,
}

impl ProtectView for TierBView<'_> {
    fn lookup(&mut self, path: &Path) -> Result<HostNode, MountPlanError> {
        let claims = self.claims;
        Ok(self
            .seen
            .entry(path.to_path_buf())
            .or_insert_with(|| lstat_host(claims, path))
            .clone())
    }

    fn writable_tree(&self, path: &Path) -> Option<(PathBuf, EntryKind)> {
        self.writable
            .iter()
            .filter(|(root, _)| path.starts_with(root))
            .max_by_key(|(root, _)| root.as_os_str().len())
            .cloned()
    }
}

/// The sandbox-writable trees of `plan` in Tier B: the workspace and the writable grants
/// whole.
fn writable_trees(plan: &Plan) -> Vec<(PathBuf, EntryKind)> {
    std::iter::once(&plan.workspace)
        .chain(plan.filesystem.writable_binds())
        .map(|p| {
            let kind = if p.is_dir() {
                EntryKind::Dir
            } else {
                EntryKind::File
            };
            (p.clone(), kind)
        })
        .collect()
}

/// What `plan`'s protected paths need on this host now (empty without any).
pub(crate) fn plan_protection(plan: &Plan) -> Result<Protection, MountPlanError> {
    if plan.filesystem.protected.is_empty() {
        return Ok(Protection::default());
    }
    crate::placeholders::observing(|claims| {
        let mut view = TierBView {
            claims,
            seen: BTreeMap::new(),
            writable: writable_trees(plan),
        };
        protection(&mut view, &plan.filesystem.protected, &plan.workspace)
    })
}

/// What a failed walk says: a path that stopped being a symlink between its `lstat` and
/// its `readlink` (`EINVAL`) was swapped while the run was planned, and says so.
pub(crate) fn planning_error(e: MountPlanError) -> String {
    match e {
        MountPlanError::Inaccessible {
            path,
            errno: libc::EINVAL,
        } => format!(
            "{} changed between planning and binding (a symbolic link replaced while it was read); nothing was bound",
            path.display()
        ),
        other => other.to_string(),
    }
}

/// The namespace steps of `protection` (its placeholders made already), each target and
/// its base with the object they are now.
pub(crate) fn steps(plan: &Plan, protection: &Protection) -> std::io::Result<Vec<NsProtectPlan>> {
    let writable = writable_trees(plan);
    let rw = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    let ro = rw | MOUNT_ATTR_RDONLY;
    let pins = protection
        .pins
        .iter()
        .map(|p| (p, Protect::BindSelf(EntryKind::Dir), rw));
    let targets = protection.targets.iter().map(|(p, t)| match t {
        Protect::BindSelf(_) | Protect::CoverMissing(_) => (p, *t, ro),
        Protect::CoverSymlink => (p, *t, ro | MOUNT_ATTR_NOEXEC),
    });
    pins.chain(targets)
        .map(|(path, what, attr)| {
            let base = writable
                .iter()
                .filter(|(root, _)| path.starts_with(root) && path != root)
                .max_by_key(|(root, _)| root.as_os_str().len())
                .map(|(root, _)| root)
                .ok_or_else(|| {
                    std::io::Error::other(format!(
                        "protected path {} lies in no writable tree",
                        path.display()
                    ))
                })?;
            let rel = path.strip_prefix(base).map_err(std::io::Error::other)?;
            let expect = FileId::of_metadata(&std::fs::symlink_metadata(path)?);
            // What is there now must be what the walk planned for: a directory to pin
            // or bind, a file, a symlink to cover, the placeholder just made.
            let kind_ok = match what {
                Protect::BindSelf(EntryKind::Dir) | Protect::CoverMissing(EntryKind::Dir) => {
                    expect.fmt == libc::S_IFDIR
                }
                Protect::BindSelf(EntryKind::File) | Protect::CoverMissing(EntryKind::File) => {
                    expect.fmt != libc::S_IFDIR && expect.fmt != libc::S_IFLNK
                }
                Protect::CoverSymlink => expect.fmt == libc::S_IFLNK,
            };
            if !kind_ok {
                return Err(std::io::Error::other(format!(
                    "{} changed between planning and binding (replaced, or swapped for a symbolic link); nothing was bound",
                    path.display()
                )));
            }
            Ok(NsProtectPlan {
                base: cstring(base)?,
                base_id: FileId::of_metadata(&std::fs::symlink_metadata(base)?),
                rel: cstring(rel)?,
                expect,
                cover: what == Protect::CoverSymlink,
                attr,
            })
        })
        .collect()
}

/// Makes the placeholders `protection` needs on the host (claimed by the caller first),
/// without following a symlink; one a concurrent run made already is accepted when it is
/// of the same kind.
pub(crate) fn make_placeholders(protection: &Protection) -> std::io::Result<()> {
    for (path, kind) in protection.placeholders() {
        let content = tierbox_policy::validate::placeholder_content(path);
        crate::placeholders::create(path, kind == EntryKind::Dir, content).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!(
                    "create the placeholder {} (filesystem.protected): {e}",
                    path.display()
                ),
            )
        })?;
    }
    Ok(())
}

fn cstring(p: &Path) -> std::io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A workspace with `.git/hooks` and `.git/config`, `.git/info` missing, and the
    /// default-like protected list: the git directory is pinned, the existing entries
    /// bound, a symlink covered, the missing entry given a placeholder, nothing outside
    /// the workspace touched.
    #[test]
    fn the_walk_pins_binds_covers_and_fills_in() {
        let dir = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        std::fs::write(ws.join(".git/config"), "").unwrap();
        std::os::unix::fs::symlink("/etc", ws.join(".git/modules")).unwrap();
        let mut plan = crate::test_fixtures::golden_plan("strict.toml");
        plan.workspace = ws.clone();
        plan.filesystem.protected = [".git/hooks", ".git/config", ".git/info", ".git/modules"]
            .iter()
            .map(|p| ws.join(p))
            .collect();
        let p = plan_protection(&plan).unwrap();
        assert_eq!(p.pins, vec![ws.join(".git")]);
        assert_eq!(
            p.targets,
            vec![
                (ws.join(".git/config"), Protect::BindSelf(EntryKind::File)),
                (ws.join(".git/hooks"), Protect::BindSelf(EntryKind::Dir)),
                (ws.join(".git/info"), Protect::CoverMissing(EntryKind::File)),
                (ws.join(".git/modules"), Protect::CoverSymlink),
            ]
        );
        // Steps need the placeholders made; without them the missing one has no object.
        assert!(steps(&plan, &p).is_err());
        make_placeholders(&p).unwrap();
        let s = steps(&plan, &p).unwrap();
        assert_eq!(s.len(), 5);
        assert_eq!(s[0].rel.as_bytes(), b".git");
        assert_eq!(s[0].attr & MOUNT_ATTR_RDONLY, 0, "a pin stays writable");
        assert!(s[1..].iter().all(|t| t.attr & MOUNT_ATTR_RDONLY != 0));
        assert!(s[4].cover && s[4].expect.fmt == libc::S_IFLNK);
        assert!(
            s.iter()
                .all(|t| t.base.as_bytes() == ws.as_os_str().as_bytes())
        );
        let _ = crate::placeholders::release(&[ws.join(".git/info")]);
        assert!(!ws.join(".git/info").exists());
    }
}
