//! The host filesystem as the planner sees it: a [`HostView`] that answers what is at a
//! path (kind, symlink target) from the real host or from a description in tests.

use super::*;

/// What the host has at a path, as seen by `lstat` (symlinks not followed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostNode {
    /// A directory.
    Dir,
    /// A regular file, fifo or socket.
    File,
    /// A character or block device node.
    Device,
    /// A symlink and its content.
    Symlink {
        /// The link's content, verbatim.
        target: PathBuf,
    },
    /// Nothing there (`ENOENT`, or `ENOTDIR` for a path below a non-directory).
    Missing,
    /// `lstat` failed otherwise (`EACCES`, …): the planner fails closed on it.
    Inaccessible {
        /// The `errno`.
        errno: i32,
    },
}

/// The host filesystem facts [`mount_plan`] needs, recorded up front so that planning is
/// pure. [`HostView::probe`] reads the real host; `HostView::assume_missing` and the
/// `with_*` methods build one by hand for tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostView {
    pub(super) nodes: BTreeMap<PathBuf, HostNode>,
    /// Paths not recorded are missing (hand-built views) rather than unknown (probed
    /// views, where an unrecorded path is a planner bug reported as an error).
    pub(super) unrecorded_missing: bool,
}

impl HostView {
    /// Reads the host: `lstat` (and `readlink` for symlinks) of exactly the paths
    /// [`mount_plan`] will ask about for `plan`, which it finds by running the planner
    /// against the live filesystem and recording each answer. Read-only; never fails
    /// (a path that cannot be read is recorded as [`HostNode::Inaccessible`], and the
    /// planner's own errors reappear when [`mount_plan`] runs on the result).
    pub fn probe(plan: &Plan) -> Self {
        let mut nodes = BTreeMap::new();
        crate::placeholders::observing(|claims| {
            let mut lookup = |p: &Path| -> Result<HostNode, MountPlanError> {
                let node = nodes
                    .entry(p.to_path_buf())
                    .or_insert_with(|| lstat_host(claims, p))
                    .clone();
                Ok(node)
            };
            let _ = build(plan, &mut lookup, &[]);
        });
        Self {
            nodes,
            unrecorded_missing: false,
        }
    }

    /// Whether the host still looks exactly as recorded: every recorded path is
    /// `lstat`ed again (one system call each, and `readlink` for symlinks) and compared.
    /// A view built by hand is never current. Because [`mount_plan`] is a pure function of
    /// the Plan and the view, a current view means the plan built from it is still right.
    pub fn is_current(&self) -> bool {
        !self.unrecorded_missing
            && crate::placeholders::observing(|claims| {
                self.nodes
                    .iter()
                    .all(|(path, node)| lstat_host(claims, path) == *node)
            })
    }

    /// How many host paths the view records.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the view records no path.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// An empty hand-built view in which every path not added with a `with_*` method is
    /// missing.
    #[cfg(test)]
    pub fn assume_missing() -> Self {
        Self {
            nodes: BTreeMap::new(),
            unrecorded_missing: true,
        }
    }

    /// Adds a directory (and its ancestors as directories).
    #[must_use]
    #[cfg(test)]
    pub fn with_dir(self, path: impl AsRef<Path>) -> Self {
        self.with(path.as_ref(), HostNode::Dir)
    }

    /// Adds a regular file (and its ancestors as directories).
    #[must_use]
    #[cfg(test)]
    pub fn with_file(self, path: impl AsRef<Path>) -> Self {
        self.with(path.as_ref(), HostNode::File)
    }

    /// Adds a device node (and its ancestors as directories).
    #[must_use]
    #[cfg(test)]
    pub fn with_device(self, path: impl AsRef<Path>) -> Self {
        self.with(path.as_ref(), HostNode::Device)
    }

    /// Adds a symlink with content `target` (and the link's ancestors as directories).
    #[must_use]
    #[cfg(test)]
    pub fn with_symlink(self, path: impl AsRef<Path>, target: impl AsRef<Path>) -> Self {
        let target = target.as_ref().to_path_buf();
        self.with(path.as_ref(), HostNode::Symlink { target })
    }

    /// Records `node` at `path`, replacing what was there; ancestors not yet recorded
    /// become directories.
    #[must_use]
    #[cfg(test)]
    pub fn with(mut self, path: &Path, node: HostNode) -> Self {
        for anc in path.ancestors().skip(1) {
            self.nodes.entry(anc.to_path_buf()).or_insert(HostNode::Dir);
        }
        self.nodes.insert(path.to_path_buf(), node);
        self
    }

    /// What the view knows about `path`.
    pub fn node(&self, path: &Path) -> Result<HostNode, MountPlanError> {
        match self.nodes.get(path) {
            Some(node) => Ok(node.clone()),
            None if self.unrecorded_missing => Ok(HostNode::Missing),
            None => Err(MountPlanError::NotProbed {
                path: path.to_path_buf(),
            }),
        }
    }
}

/// `lstat` + `readlink` of one host path.
pub(crate) fn lstat_host(claims: &crate::placeholders::Observer<'_>, path: &Path) -> HostNode {
    // A placeholder a concurrent run claims is missing as far as planning goes.
    match claims.observe(path, || std::fs::symlink_metadata(path)) {
        None => HostNode::Missing,
        Some(meta) => host_node(path, meta),
    }
}

pub(super) fn host_node(path: &Path, meta: std::io::Result<std::fs::Metadata>) -> HostNode {
    let meta = match meta {
        Ok(m) => m,
        Err(e) => {
            return match e.raw_os_error() {
                Some(libc::ENOENT | libc::ENOTDIR) => HostNode::Missing,
                errno => HostNode::Inaccessible {
                    errno: errno.unwrap_or(libc::EIO),
                },
            };
        }
    };
    let ft = meta.file_type();
    if ft.is_symlink() {
        match std::fs::read_link(path) {
            Ok(target) => HostNode::Symlink { target },
            Err(e) => HostNode::Inaccessible {
                errno: e.raw_os_error().unwrap_or(libc::EIO),
            },
        }
    } else if ft.is_dir() {
        HostNode::Dir
    } else {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_char_device() || ft.is_block_device() {
            HostNode::Device
        } else {
            HostNode::File
        }
    }
}
