//! What the host's filesystem holds at the paths a run's mounts name (lstat, never
//! following a final symlink).

use super::*;

/// What a host path is (`lstat`, not following a final symlink).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathKind {
    /// Nothing there (or it could not be inspected).
    Missing,
    /// A directory.
    Dir,
    /// Anything else that is not a symlink: regular file, device, fifo, socket.
    File,
    /// A symlink.
    Symlink {
        /// The link text (`readlink`), reproduced verbatim for system paths.
        target: PathBuf,
        /// The fully resolved path when the link resolves (`realpath`), else `None`.
        resolved: Option<PathBuf>,
    },
}

/// The host facts [`bwrap_argv`] needs, gathered beforehand so the argv builder stays pure:
/// the kind of every path the Plan names (system paths, grants, the workspace, each
/// component of each protected path, deny paths) and of every symlink's resolution.
///
/// A path not recorded is treated as [`PathKind::Missing`]: system paths and grants are
/// then skipped, and protected paths covered as missing (if the host disagrees, bwrap
/// fails to mount and the run does not start — fail closed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostLayout {
    pub(super) entries: BTreeMap<PathBuf, PathKind>,
}

impl HostLayout {
    /// An empty layout (every path missing); add facts with `HostLayout::with`.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same layout with `path` recorded as `kind` (for tests and callers that already
    /// know the host).
    #[cfg(test)]
    pub fn with(mut self, path: impl Into<PathBuf>, kind: PathKind) -> Self {
        self.entries.insert(path.into(), kind);
        self
    }

    /// What `path` is; [`PathKind::Missing`] when not recorded.
    pub fn kind(&self, path: &Path) -> &PathKind {
        const MISSING: &PathKind = &PathKind::Missing;
        self.entries.get(path).unwrap_or(MISSING)
    }

    /// Reads the host: `lstat` of every path `plan` names, and of each symlink's
    /// resolution. This is the only host I/O behind [`bwrap_argv`]; call it right before
    /// building the argv. bwrap resolves the paths again at setup time, so a path that
    /// changes kind in between (by the host user: a running sandbox cannot change
    /// protected paths) makes bwrap fail to mount and the run not start.
    pub fn probe(plan: &Plan) -> Self {
        let fs = &plan.filesystem;
        crate::placeholders::observing(|claims| {
            let mut layout = Self::new();
            let direct = fs
                .system_binds()
                .iter()
                .chain(fs.system_covers())
                .chain(fs.read_only_binds())
                .chain(fs.writable_binds())
                .chain(std::iter::once(&plan.workspace))
                .chain(&fs.deny_read);
            for path in direct {
                layout.record(claims, path);
            }
            // Which of the masked proc entries exist (the sandbox's proc is this
            // kernel's, as the host's is).
            for (path, _) in PROC_MASKED {
                layout.record(claims, Path::new(path));
            }
            for protected in &fs.protected {
                let Ok(rel) = protected.strip_prefix(&plan.workspace) else {
                    continue;
                };
                let mut at = plan.workspace.clone();
                for component in rel.components() {
                    at.push(component);
                    if layout.record(claims, &at) != PathKind::Dir {
                        break;
                    }
                }
            }
            layout
        })
    }

    /// Records `path` (and, for a symlink, its resolution); returns its kind.
    pub(super) fn record(&mut self, claims: &Observer<'_>, path: &Path) -> PathKind {
        let kind = lstat_kind(claims, path);
        if let PathKind::Symlink {
            resolved: Some(resolved),
            ..
        } = &kind
        {
            let resolved_kind = lstat_kind(claims, resolved);
            self.entries.insert(resolved.clone(), resolved_kind);
        }
        self.entries.insert(path.to_path_buf(), kind.clone());
        kind
    }

    /// The layout of the top-level system directories only (`/usr` and the merged-/usr
    /// candidates), for the user-namespace check.
    pub(super) fn probe_top_level() -> Self {
        crate::placeholders::observing(|claims| {
            let mut layout = Self::new();
            for path in std::iter::once("/usr").chain(MERGED_USR_LINKS.iter().copied()) {
                layout.record(claims, Path::new(path));
            }
            layout
        })
    }
}

pub(super) fn lstat_kind(claims: &Observer<'_>, path: &Path) -> PathKind {
    // A placeholder a concurrent run claims is missing as far as planning goes.
    let Some(meta) = claims.observe(path, || std::fs::symlink_metadata(path)) else {
        return PathKind::Missing;
    };
    match meta {
        Err(_) => PathKind::Missing,
        Ok(meta) if meta.file_type().is_symlink() => PathKind::Symlink {
            target: std::fs::read_link(path).unwrap_or_default(),
            resolved: std::fs::canonicalize(path).ok(),
        },
        Ok(meta) if meta.is_dir() => PathKind::Dir,
        Ok(_) => PathKind::File,
    }
}
