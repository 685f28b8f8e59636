//! The model checker: replays the ops over a model of the sandbox's tree and refuses a
//! plan that breaks an invariant of the module documentation (fail closed).

use super::model::*;
use super::*;

/// Re-checks a finished op list against the module's invariants by replaying it on a
/// model of the new root (host facts from `lookup`). Used by [`mount_plan`] on its own
/// output and by the tests on hand-made lists.
pub(crate) fn check_ops(ops: &[MountOp], lookup: &mut Lookup<'_>) -> Result<(), MountPlanError> {
    let fail = |index: usize, rule: &'static str| invariant(ops, index, rule);
    if !matches!(ops.first(), Some(MountOp::TmpfsRoot { .. })) {
        return Err(fail(0, "the first op must be the root tmpfs"));
    }
    let pivot = ops
        .iter()
        .position(|op| *op == MountOp::PivotRoot)
        .ok_or_else(|| fail(ops.len(), "no pivot_root"))?;
    if ops.get(pivot + 1..) != Some(&[MountOp::RemountRootRo][..]) {
        return Err(fail(
            pivot,
            "pivot_root must be followed by the root remount, last",
        ));
    }
    let mut model = Model {
        mounts: vec![Mounted::new("/", Backing::Tmpfs, EntryKind::Dir)],
        created: BTreeMap::new(),
        host_created: BTreeMap::new(),
    };
    for (i, op) in ops.iter().enumerate().take(pivot).skip(1) {
        let Some(dst) = op.dst() else {
            return Err(fail(i, "a root op in the middle of the list"));
        };
        if normalize("op", dst).ok().as_deref() != Some(dst) || dst == Path::new("/") {
            return Err(fail(i, "path not absolute, normalised and below /"));
        }
        let parent = dst.parent().unwrap_or(Path::new("/"));
        if !model.is(parent, EntryKind::Dir, lookup)? {
            return Err(fail(i, "parent directory does not exist yet"));
        }
        if let Some(src) = op.bind_src() {
            let ok = match op {
                MountOp::DevNode { .. } => DEV_NODES.iter().any(|n| src == Path::new(n)),
                _ => src == dst,
            };
            if !ok {
                return Err(fail(i, "bind source differs from its destination"));
            }
        }
        match op {
            MountOp::Dir { .. } | MountOp::File { .. } | MountOp::Symlink { .. } => {
                let in_tmpfs = model
                    .visible(dst)
                    .is_some_and(|m| m.backing == Backing::Tmpfs && m.dst != dst);
                if !in_tmpfs {
                    return Err(fail(i, "created outside a writable tmpfs"));
                }
                if model.exists(dst, lookup)? {
                    return Err(fail(i, "created twice"));
                }
                let c = match op {
                    MountOp::Dir { .. } => Created::Dir,
                    MountOp::File { .. } => Created::File,
                    _ => Created::Symlink,
                };
                model.created.insert(dst.to_path_buf(), c);
            }
            MountOp::HostPlaceholder { kind, .. } => {
                if model.visible(dst).map(|m| m.backing) != Some(Backing::HostRw)
                    || model.exists(dst, lookup)?
                {
                    return Err(fail(i, "placeholder not new in a writable host bind"));
                }
                model.host_created.insert(dst.to_path_buf(), *kind);
            }
            MountOp::ProcKnob { .. } => {
                let in_proc = model
                    .visible(dst)
                    .is_some_and(|m| m.backing == Backing::Kernel && m.dst == Path::new("/proc"))
                    && parent == Path::new("/proc");
                if !in_proc {
                    return Err(fail(i, "a proc mask outside the sandbox's /proc"));
                }
            }
            MountOp::SealSkeleton { .. } => {
                let Some(m) = model.mounts.iter_mut().rev().find(|m| m.dst == dst) else {
                    return Err(fail(i, "seal of something that is not a mount"));
                };
                if m.backing != Backing::Tmpfs {
                    return Err(fail(i, "seal of a mount that is not a tmpfs"));
                }
                m.backing = Backing::SealedTmpfs;
            }
            MountOp::RemountRo { allow_devices, .. } => {
                let Some(m) = model.mounts.iter_mut().rev().find(|m| m.dst == dst) else {
                    return Err(fail(i, "remount of something that is not a mount"));
                };
                if *allow_devices && dst != Path::new("/dev") {
                    return Err(fail(i, "devices allowed outside /dev"));
                }
                if m.backing == Backing::Tmpfs {
                    m.backing = Backing::SealedTmpfs;
                }
            }
            _ => {
                let kind = op.mountpoint_kind().ok_or_else(|| fail(i, "unknown op"))?;
                let on_symlink = matches!(op, MountOp::CoverWithDevNull { .. })
                    && model.is_symlink(dst, lookup)?;
                if !on_symlink && !model.is(dst, kind, lookup)? {
                    return Err(fail(i, "mountpoint missing or of the wrong kind"));
                }
                let backing = match op {
                    MountOp::Tmpfs { .. } => Backing::Tmpfs,
                    MountOp::Proc { .. } | MountOp::DevPts { .. } => Backing::Kernel,
                    MountOp::BindRw { .. } | MountOp::Overlay { .. } => Backing::HostRw,
                    MountOp::CoverWithDevNull { .. } | MountOp::CoverWithEmptyDir { .. } => {
                        Backing::Cover
                    }
                    _ => Backing::HostRo,
                };
                model.mounts.push(Mounted::new(dst, backing, kind));
            }
        }
    }
    check_remounted(ops, pivot)?;
    check_unshadowed(ops, pivot)
}

/// The refusal of `ops` at `index` for breaking `rule`.
fn invariant(ops: &[MountOp], index: usize, rule: &'static str) -> MountPlanError {
    MountPlanError::Invariant {
        index,
        op: ops.get(index).map(ToString::to_string).unwrap_or_default(),
        rule,
    }
}

/// Every bind before `pivot` that must end read-only is followed by a remount of it or of
/// a mount containing it, before the pivot.
fn check_remounted(ops: &[MountOp], pivot: usize) -> Result<(), MountPlanError> {
    let fail = |index: usize, rule: &'static str| invariant(ops, index, rule);
    // Every bind that must end read-only is followed by a remount of it or of a mount
    // containing it, before the pivot.
    for (i, op) in ops.iter().enumerate().take(pivot) {
        let needs = matches!(
            op,
            MountOp::BindRo { .. } | MountOp::DevNode { .. } | MountOp::CoverWithDevNull { .. }
        );
        let Some(dst) = op.dst().filter(|_| needs) else {
            continue;
        };
        let sealed = ops.get(i + 1..pivot).is_some_and(|later| {
            later
                .iter()
                .any(|l| matches!(l, MountOp::RemountRo { dst: d, .. } if dst.starts_with(d)))
        });
        if !sealed {
            return Err(fail(i, "read-only bind never remounted read-only"));
        }
    }
    Ok(())
}

/// No mount before `pivot` is hidden by a later non-cover mount at one of its ancestors.
fn check_unshadowed(ops: &[MountOp], pivot: usize) -> Result<(), MountPlanError> {
    let fail = |index: usize, rule: &'static str| invariant(ops, index, rule);
    // No mount is hidden by a later non-cover mount at one of its ancestors.
    for (i, op) in ops.iter().enumerate().take(pivot) {
        let Some(dst) = op.dst().filter(|_| op.is_mount()) else {
            continue;
        };
        let shadowed = ops.get(i + 1..pivot).is_some_and(|later| {
            later.iter().any(|l| {
                l.is_mount()
                    && !matches!(
                        l,
                        MountOp::CoverWithDevNull { .. }
                            | MountOp::CoverWithEmptyDir { .. }
                            | MountOp::ProcKnob { .. }
                    )
                    && l.dst().is_some_and(|d| dst.starts_with(d) && dst != d)
            })
        });
        if shadowed {
            return Err(fail(i, "hidden by a later mount above it"));
        }
    }
    Ok(())
}

/// The op-list replay model of [`check_ops`].
pub(super) struct Model {
    mounts: Vec<Mounted>,
    created: BTreeMap<PathBuf, Created>,
    host_created: BTreeMap<PathBuf, EntryKind>,
}

impl Model {
    fn visible(&self, path: &Path) -> Option<&Mounted> {
        self.mounts
            .iter()
            .rev()
            .find(|m| is_at_or_under(path, &m.dst))
    }

    /// What is at `path` in the new root, as (exists, kind, is_symlink).
    fn at(
        &self,
        path: &Path,
        lookup: &mut Lookup<'_>,
    ) -> Result<Option<(EntryKind, bool)>, MountPlanError> {
        let Some(m) = self.visible(path) else {
            return Ok(None);
        };
        if m.dst == path {
            return Ok(Some((m.kind, false)));
        }
        Ok(match m.backing {
            Backing::Tmpfs | Backing::SealedTmpfs | Backing::Scratch => {
                match self.created.get(path) {
                    Some(Created::Dir) => Some((EntryKind::Dir, false)),
                    Some(Created::File) => Some((EntryKind::File, false)),
                    Some(Created::Symlink) => Some((EntryKind::File, true)),
                    None => None,
                }
            }
            Backing::HostRo | Backing::HostRw => {
                if let Some(kind) = self.host_created.get(path) {
                    return Ok(Some((*kind, false)));
                }
                match lookup(path)? {
                    HostNode::Dir => Some((EntryKind::Dir, false)),
                    HostNode::File | HostNode::Device => Some((EntryKind::File, false)),
                    HostNode::Symlink { .. } => Some((EntryKind::File, true)),
                    HostNode::Missing | HostNode::Inaccessible { .. } => None,
                }
            }
            Backing::Kernel | Backing::Cover => None,
        })
    }

    fn exists(&self, path: &Path, lookup: &mut Lookup<'_>) -> Result<bool, MountPlanError> {
        Ok(self.at(path, lookup)?.is_some())
    }

    fn is(
        &self,
        path: &Path,
        kind: EntryKind,
        lookup: &mut Lookup<'_>,
    ) -> Result<bool, MountPlanError> {
        if path == Path::new("/") {
            return Ok(kind == EntryKind::Dir);
        }
        Ok(self.at(path, lookup)? == Some((kind, false)))
    }

    fn is_symlink(&self, path: &Path, lookup: &mut Lookup<'_>) -> Result<bool, MountPlanError> {
        Ok(matches!(self.at(path, lookup)?, Some((_, true))))
    }
}
