//! What the planner and the checker both reason about: normalised paths and the mounts
//! and entries of the sandbox's tree as it is being built.

use super::*;

/// Validates `path` and returns it normalised: absolute, no NUL, no `..`, no `.` or
/// repeated separators.
pub(super) fn normalize(field: &'static str, path: &Path) -> Result<PathBuf, MountPlanError> {
    if path.as_os_str().as_bytes().contains(&0) {
        return Err(MountPlanError::NulByte {
            field,
            path: path.to_path_buf(),
        });
    }
    if !path.is_absolute() {
        return Err(MountPlanError::NotAbsolute {
            field,
            path: path.to_path_buf(),
        });
    }
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => out.push(n),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(MountPlanError::ParentComponent {
                    field,
                    path: path.to_path_buf(),
                });
            }
        }
    }
    Ok(out)
}

/// What backs a mount in the new root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Backing {
    /// A tmpfs the plan populates (writable during setup).
    Tmpfs,
    /// The sandbox's scratch tmpfs (`/tmp`, `/dev/shm`): writable by the program for good.
    /// A directory the plan needs there for a grant's ancestors becomes a skeleton tmpfs,
    /// sealed read-only before the pivot, so nothing the program writes beside a grant
    /// lands in scratch as if it were on the host.
    Scratch,
    /// A tmpfs already sealed read-only (`/dev` after its remount).
    SealedTmpfs,
    /// procfs or devpts: nothing is created in them.
    Kernel,
    /// A read-only host bind.
    HostRo,
    /// A writable host bind.
    HostRw,
    /// A cover: `/dev/null` or an empty read-only tmpfs.
    Cover,
}

#[derive(Debug, Clone)]
pub(super) struct Mounted {
    pub(super) dst: PathBuf,
    pub(super) backing: Backing,
    pub(super) kind: EntryKind,
}

impl Mounted {
    pub(super) fn new(dst: impl Into<PathBuf>, backing: Backing, kind: EntryKind) -> Self {
        Self {
            dst: dst.into(),
            backing,
            kind,
        }
    }
}

/// What the plan created inside a tmpfs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Created {
    Dir,
    File,
    Symlink,
}

/// `path.starts_with(prefix)` for normalised absolute paths, on bytes: `Path::starts_with`
/// parses both paths into components on every call, which made the planner's
/// mount-visibility lookups its main cost.
pub(super) fn is_at_or_under(path: &Path, prefix: &Path) -> bool {
    let (p, q) = (path.as_os_str().as_bytes(), prefix.as_os_str().as_bytes());
    if q == b"/" {
        return p.first() == Some(&b'/');
    }
    p.starts_with(q) && (p.len() == q.len() || p[q.len()] == b'/')
}

pub(super) fn not_a_dir(path: &Path, found: &'static str) -> MountPlanError {
    MountPlanError::NotADirectory {
        path: path.to_path_buf(),
        found,
    }
}

pub(super) fn node_name(node: &HostNode) -> &'static str {
    match node {
        HostNode::Dir => "a directory",
        HostNode::File => "a file",
        HostNode::Device => "a device",
        HostNode::Symlink { .. } => "a symlink",
        HostNode::Missing => "missing",
        HostNode::Inaccessible { .. } => "inaccessible",
    }
}
