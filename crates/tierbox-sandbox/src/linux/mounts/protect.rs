//! What the protected paths of a run need (the table in the module documentation of
//! [`super`]): one walk, shared by every mount-based backend that keeps them — native
//! Tier C's planner, which turns the answer into its ops, and Tier B's mount namespace
//! (`tier_b::protect`), which binds them in the host's own tree.
//!
//! The walk asks its caller three questions about the run's view ([`ProtectView`]): what
//! the host has at a path, which sandbox-writable tree (if any) shows a path, and where a
//! path leads through the host's symlinks. The answer ([`Protection`]) is pure data: the
//! directories to pin and each outermost protected target with what it needs.

use super::model::normalize;
use super::*;

/// What a protected path needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protect {
    /// Bind the existing entry over itself, read-only.
    BindSelf(EntryKind),
    /// Cover a symlink with `/dev/null`.
    CoverSymlink,
    /// Create a placeholder of this kind and cover it.
    CoverMissing(EntryKind),
}

/// The run's view, as the walk needs it.
pub(crate) trait ProtectView {
    /// What the host has at `path` (`lstat`; a placeholder another run claims is missing).
    fn lookup(&mut self, path: &Path) -> Result<HostNode, MountPlanError>;
    /// The sandbox-writable tree that shows `path` to the run, as its root and kind;
    /// `None` when the run cannot write there (nothing it could create needs covering).
    fn writable_tree(&self, path: &Path) -> Option<(PathBuf, EntryKind)>;
}

/// The protection of a run's protected paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Protection {
    /// Every directory between the workspace and a protected target, ancestors first,
    /// that is a sandbox-writable directory: pinned with a writable self-bind, because a
    /// mount point can be neither renamed nor removed (`EBUSY`), so `mv .git x` followed
    /// by a fresh `.git/hooks` is impossible.
    pub(crate) pins: Vec<PathBuf>,
    /// Each protected target (none inside another), sorted, with what it needs.
    pub(crate) targets: Vec<(PathBuf, Protect)>,
}

impl Protection {
    /// The placeholders the targets need, with their kinds.
    pub(crate) fn placeholders(&self) -> impl Iterator<Item = (&Path, EntryKind)> {
        self.targets.iter().filter_map(|(p, t)| match t {
            Protect::CoverMissing(kind) => Some((p.as_path(), *kind)),
            _ => None,
        })
    }
}

/// The protection of `protected` (absolute paths strictly inside `workspace`, which is
/// normalised) in `view`: see the module documentation of [`super`] for the table.
pub(crate) fn protection(
    view: &mut impl ProtectView,
    protected: &[PathBuf],
    workspace: &Path,
) -> Result<Protection, MountPlanError> {
    let mut targets = BTreeMap::new();
    for raw in protected {
        let path = normalize("filesystem.protected", raw)?;
        if path == workspace || !path.starts_with(workspace) {
            return Err(MountPlanError::ProtectedOutsideWorkspace {
                path,
                workspace: workspace.to_path_buf(),
            });
        }
        walk(view, &path, workspace, true, &mut targets)?;
    }
    // A target inside another is already read-only or hidden by it.
    let mut kept: Vec<(PathBuf, Protect)> = Vec::new();
    for (q, t) in targets {
        if !kept.iter().any(|(k, _)| q.starts_with(k)) {
            kept.push((q, t));
        }
    }
    let mut pins: std::collections::BTreeSet<PathBuf> = std::collections::BTreeSet::new();
    for (q, _) in &kept {
        for anc in q.ancestors().skip(1) {
            if anc == workspace || !anc.starts_with(workspace) {
                break;
            }
            pins.insert(anc.to_path_buf());
        }
    }
    let mut pinned = Vec::new();
    for pin in pins {
        if view.writable_tree(&pin).is_some() && view.lookup(&pin)? == HostNode::Dir {
            pinned.push(pin);
        }
    }
    Ok(Protection {
        pins: pinned,
        targets: kept,
    })
}

/// Walks `path` below `base` (both normalised, `path` strictly inside `base`) and records
/// what protects it.
fn walk(
    view: &mut impl ProtectView,
    path: &Path,
    base: &Path,
    follow_links: bool,
    targets: &mut BTreeMap<PathBuf, Protect>,
) -> Result<(), MountPlanError> {
    let Ok(rel) = path.strip_prefix(base) else {
        return Ok(());
    };
    let comps: Vec<_> = rel.components().collect();
    let mut q = base.to_path_buf();
    for (i, c) in comps.iter().enumerate() {
        q.push(c);
        let last = i + 1 == comps.len();
        let found = match view.lookup(&q)? {
            HostNode::Dir if !last => continue,
            HostNode::Dir => Protect::BindSelf(EntryKind::Dir),
            HostNode::File | HostNode::Device => Protect::BindSelf(EntryKind::File),
            HostNode::Symlink { .. } => {
                if follow_links {
                    protect_link_target(view, path, targets)?;
                }
                Protect::CoverSymlink
            }
            HostNode::Missing => {
                // Only what the sandbox could create needs covering.
                if view.writable_tree(&q).is_none() {
                    return Ok(());
                }
                // A protected entry of a repository that does not exist: a run may make
                // its own (reported after the run as `created_git_dirs`).
                if tierbox_policy::validate::run_may_create(c.as_os_str(), last) {
                    return Ok(());
                }
                // A missing last component is covered as a file, except a git directory:
                // an empty `.git` directory is no repository to git, which goes on
                // searching above, where an empty `.git` file is fatal.
                Protect::CoverMissing(if last && c.as_os_str() != ".git" {
                    EntryKind::File
                } else {
                    EntryKind::Dir
                })
            }
            HostNode::Inaccessible { errno } => {
                return Err(MountPlanError::Inaccessible { path: q, errno });
            }
        };
        let merged = match (targets.get(&q), found) {
            (Some(Protect::CoverMissing(EntryKind::Dir)), Protect::CoverMissing(_)) => {
                Protect::CoverMissing(EntryKind::Dir)
            }
            _ => found,
        };
        targets.insert(q, merged);
        return Ok(());
    }
    Ok(())
}

/// The host's git follows a protected symlink: when the fully resolved path lands in a
/// sandbox-writable tree, protect it there too.
fn protect_link_target(
    view: &mut impl ProtectView,
    path: &Path,
    targets: &mut BTreeMap<PathBuf, Protect>,
) -> Result<(), MountPlanError> {
    let resolved = match resolve(&mut |p| view.lookup(p), "filesystem.protected", path) {
        Ok(r) => r,
        // A loop cannot be followed by the host either; the symlink is covered.
        Err(MountPlanError::SymlinkLoop { .. }) => return Ok(()),
        Err(e) => return Err(e),
    };
    let Some((root, kind)) = view.writable_tree(&resolved) else {
        return Ok(());
    };
    if resolved == root {
        targets.insert(resolved, Protect::BindSelf(kind));
        return Ok(());
    }
    walk(view, &resolved, &root, false, targets)
}

/// Resolves `path` through host symlinks as `lookup` reports them, as the kernel would
/// (lexically below the first missing or non-directory component).
pub(super) fn resolve(
    lookup: &mut dyn FnMut(&Path) -> Result<HostNode, MountPlanError>,
    field: &'static str,
    path: &Path,
) -> Result<PathBuf, MountPlanError> {
    let mut rest: VecDeque<PathBuf> = path
        .components()
        .skip(1)
        .map(|c| PathBuf::from(c.as_os_str()))
        .collect();
    let mut resolved = PathBuf::from("/");
    let mut hops = 0;
    let mut missing = false;
    while let Some(c) = rest.pop_front() {
        if c == Path::new("..") {
            resolved.pop();
            continue;
        }
        if c == Path::new(".") {
            continue;
        }
        let next = resolved.join(&c);
        if missing {
            resolved = next;
            continue;
        }
        match lookup(&next)? {
            HostNode::Dir => resolved = next,
            HostNode::Symlink { target } => {
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return Err(MountPlanError::SymlinkLoop {
                        field,
                        path: path.to_path_buf(),
                    });
                }
                if target.is_absolute() {
                    resolved = PathBuf::from("/");
                }
                for tc in target.components().rev() {
                    if !matches!(tc, Component::RootDir) {
                        rest.push_front(PathBuf::from(tc.as_os_str()));
                    }
                }
            }
            HostNode::File | HostNode::Device | HostNode::Missing => {
                resolved = next;
                missing = true;
            }
            HostNode::Inaccessible { errno } => {
                return Err(MountPlanError::Inaccessible { path: next, errno });
            }
        }
    }
    Ok(resolved)
}
