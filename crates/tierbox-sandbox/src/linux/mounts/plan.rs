//! The planner: the mount ops for a plan, phase by phase, in the order of the module
//! documentation.

use super::model::*;
use super::protect::{Protect, ProtectView, Protection, protection};
use super::*;
use tierbox_policy::WorkspaceMode;

pub(super) type Lookup<'a> = dyn FnMut(&Path) -> Result<HostNode, MountPlanError> + 'a;

pub(super) fn build(
    plan: &Plan,
    lookup: &mut Lookup<'_>,
    files: &[TmpFile],
) -> Result<MountPlan, MountPlanError> {
    let fs = &plan.filesystem;
    let count = fs.system_read_only.len()
        + fs.system_roots.len()
        + fs.system_hidden.len()
        + fs.read_only_binds().len()
        + fs.writable_binds().len()
        + fs.deny_read.len()
        + fs.protected.len()
        + plan.network.unix_sockets.len()
        + 1;
    if count > MAX_PLAN_PATHS {
        return Err(MountPlanError::TooManyPaths { count });
    }
    let mut p = Planner {
        lookup,
        ops: Vec::new(),
        mounts: Vec::new(),
        created: BTreeMap::new(),
        placeholders: Vec::new(),
        skeletons: Vec::new(),
    };
    let workspace = normalize("workspace", &plan.workspace)?;
    let home = fs.private_home.then(|| PathBuf::from(PRIVATE_HOME));

    // 1. The root: everything else lands in it.
    p.ops.push(MountOp::TmpfsRoot {
        size_bytes: ROOT_TMPFS_BYTES,
        mode: ROOT_DIR_MODE,
    });
    p.mounts
        .push(Mounted::new("/", Backing::Tmpfs, EntryKind::Dir));

    // 2. The sandbox's own kernel and scratch filesystems, before any bind: a policy path
    //    under /tmp needs the /tmp tmpfs below it.
    p.proc()?;
    p.dev(plan)?;
    p.tmp(plan, home.as_deref(), files)?;

    // 3. Binds: outside the workspace (sorted: ancestors first), the workspace, inside it.
    let binds = classify_binds(&mut p, plan, &workspace, home.as_deref())?;
    for b in binds.iter().filter(|b| !b.dst().starts_with(&workspace)) {
        p.emit_bind(b)?;
    }
    match plan.workspace_mode {
        WorkspaceMode::Direct => p.emit_bind(&Bind::Mount {
            path: workspace.clone(),
            kind: EntryKind::Dir,
            writable: true,
        })?,
        // Review mode: the workspace is the lower layer of an overlay; the sandbox
        // writes into an upper layer of its own.
        WorkspaceMode::Overlay => p.mount(
            MountOp::Overlay {
                lower: workspace.clone(),
                dst: workspace.clone(),
                size_bytes: plan.limits.disk_bytes,
            },
            Backing::HostRw,
        )?,
    }
    for b in binds.iter().filter(|b| b.dst().starts_with(&workspace)) {
        p.emit_bind(b)?;
    }

    // 4. Protected paths, after the workspace bind they live in.
    p.protect(&fs.protected, &workspace)?;

    // 5. Host secrets under the system roots, and denied paths, last: they hide
    //    whatever grant contains them.
    p.deny("filesystem.system_hidden", fs.system_covers(), &workspace)?;
    p.deny("filesystem.deny_read", &fs.deny_read, &workspace)?;
    // Skeletons in scratch, once everything inside them is mounted.
    for skeleton in std::mem::take(&mut p.skeletons) {
        p.ops.push(MountOp::SealSkeleton { dst: skeleton });
    }

    // 6. Switch roots, then seal the root tmpfs.
    p.ops.push(MountOp::PivotRoot);
    p.ops.push(MountOp::RemountRootRo);

    let Planner {
        lookup,
        ops,
        placeholders,
        ..
    } = p;
    check_ops(&ops, lookup)?;
    Ok(MountPlan {
        ops,
        host_placeholders: placeholders,
        home,
        sockets: plan
            .network
            .unix_sockets
            .iter()
            .map(|s| s.path.clone())
            .collect(),
    })
}

/// A bind (or symlink) derived from the Plan's path lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Bind {
    Mount {
        path: PathBuf,
        kind: EntryKind,
        writable: bool,
    },
    Symlink {
        link: PathBuf,
        target: PathBuf,
    },
}

impl Bind {
    fn dst(&self) -> &Path {
        match self {
            Self::Mount { path, .. } => path,
            Self::Symlink { link, .. } => link,
        }
    }
}

/// The system, read-only and writable paths as binds, validated, deduplicated and sorted
/// (component-wise, so every ancestor sorts before its descendants).
pub(super) fn classify_binds(
    p: &mut Planner<'_, '_>,
    plan: &Plan,
    workspace: &Path,
    home: Option<&Path>,
) -> Result<Vec<Bind>, MountPlanError> {
    let fs = &plan.filesystem;
    check_destination("workspace", workspace, home)?;
    // dst -> (bind, field)
    let mut by_dst: BTreeMap<PathBuf, (Bind, &'static str)> = BTreeMap::new();
    // Host sockets: read-only binds of exactly the socket (connecting needs no write
    // access to the mount, only permission on the socket).
    let sockets: Vec<PathBuf> = plan
        .network
        .unix_sockets
        .iter()
        .map(|s| s.path.clone())
        .collect();
    let lists: [(&'static str, &[PathBuf], bool); 4] = [
        ("filesystem.system_read_only", fs.system_binds(), false),
        ("filesystem.read_only", fs.read_only_binds(), false),
        ("filesystem.writable", fs.writable_binds(), true),
        ("egress.unix_sockets", &sockets, false),
    ];
    for (field, list, writable) in lists {
        let system = field == "filesystem.system_read_only";
        for raw in list {
            let path = normalize(field, raw)?;
            // The sandbox's own /dev/shm serves this grant (see `Planner::dev`).
            if !system && FsPlan::sandbox_provides(&path) {
                continue;
            }
            check_destination(field, &path, home)?;
            if path == workspace {
                return Err(MountPlanError::ConflictingGrant {
                    path,
                    first: "workspace",
                    second: field,
                });
            }
            // Writable inside the writable workspace: already granted.
            if writable && path.starts_with(workspace) {
                continue;
            }
            let bind = match p.lookup(&path)? {
                HostNode::Dir => Bind::Mount {
                    path: path.clone(),
                    kind: EntryKind::Dir,
                    writable,
                },
                HostNode::File | HostNode::Device => Bind::Mount {
                    path: path.clone(),
                    kind: EntryKind::File,
                    writable,
                },
                HostNode::Symlink { target } if system => Bind::Symlink {
                    link: path.clone(),
                    target,
                },
                HostNode::Symlink { target } => {
                    return Err(MountPlanError::UnexpectedSymlink {
                        field,
                        path,
                        target,
                    });
                }
                // A system entry removed since validation has nothing to show.
                HostNode::Missing if system => continue,
                HostNode::Missing => return Err(MountPlanError::Missing { field, path }),
                HostNode::Inaccessible { errno } => {
                    return Err(MountPlanError::Inaccessible { path, errno });
                }
            };
            match by_dst.get(&path) {
                None => {
                    by_dst.insert(path, (bind, field));
                }
                Some((existing, _)) if *existing == bind => {}
                Some((_, first)) => {
                    return Err(MountPlanError::ConflictingGrant {
                        path,
                        first,
                        second: field,
                    });
                }
            }
        }
    }
    Ok(by_dst.into_values().map(|(b, _)| b).collect())
}

/// Rejects bind destinations that are `/`, reserved, or in the private home's way.
pub(super) fn check_destination(
    field: &'static str,
    path: &Path,
    home: Option<&Path>,
) -> Result<(), MountPlanError> {
    if path == Path::new("/") {
        return Err(MountPlanError::BindsRoot {
            field,
            path: path.to_path_buf(),
        });
    }
    for reserved in RESERVED_DESTINATIONS {
        if path.starts_with(reserved) {
            return Err(MountPlanError::Reserved {
                field,
                path: path.to_path_buf(),
                reserved,
            });
        }
    }
    if let Some(home) = home
        && (path.starts_with(home) || home.parent().is_some_and(|tmp| path == tmp))
    {
        return Err(MountPlanError::Reserved {
            field,
            path: path.to_path_buf(),
            reserved: PRIVATE_HOME,
        });
    }
    Ok(())
}

pub(super) struct Planner<'l, 'a> {
    lookup: &'l mut Lookup<'a>,
    ops: Vec<MountOp>,
    /// Mounts in the order made; the last one containing a path is what shows there.
    mounts: Vec<Mounted>,
    /// Entries created in tmpfs mounts.
    created: BTreeMap<PathBuf, Created>,
    placeholders: Vec<PathBuf>,
    /// Skeleton tmpfs mounts made in scratch, sealed read-only before the pivot.
    skeletons: Vec<PathBuf>,
}

impl ProtectView for Planner<'_, '_> {
    fn lookup(&mut self, path: &Path) -> Result<HostNode, MountPlanError> {
        (self.lookup)(path)
    }

    fn writable_tree(&self, path: &Path) -> Option<(PathBuf, EntryKind)> {
        self.visible(path)
            .filter(|m| m.backing == Backing::HostRw)
            .map(|m| (m.dst.clone(), m.kind))
    }
}

impl Planner<'_, '_> {
    /// The mount that shows at `path`: the last one made at or above it.
    fn visible(&self, path: &Path) -> Option<&Mounted> {
        self.mounts
            .iter()
            .rev()
            .find(|m| is_at_or_under(path, &m.dst))
    }

    /// Makes sure `path` exists as a directory, creating missing ancestors and `path`
    /// itself in a tmpfs; under a host bind it must already exist on the host.
    fn ensure_dir(&mut self, path: &Path) -> Result<(), MountPlanError> {
        let mut prefix = PathBuf::from("/");
        for c in path.components().skip(1) {
            prefix.push(c);
            self.ensure_entry_as(&prefix, EntryKind::Dir, MOUNTPOINT_DIR_MODE, true)?;
        }
        Ok(())
    }

    /// Makes sure `path` exists as `kind` (its parent must already exist).
    fn ensure_entry(
        &mut self,
        path: &Path,
        kind: EntryKind,
        mode: u32,
    ) -> Result<(), MountPlanError> {
        self.ensure_entry_as(path, kind, mode, false)
    }

    /// [`Planner::ensure_entry`]; `ancestor` says `path` is only on the way to a mount
    /// point (in scratch it then becomes a skeleton tmpfs, see [`Backing::Scratch`]).
    fn ensure_entry_as(
        &mut self,
        path: &Path,
        kind: EntryKind,
        mode: u32,
        ancestor: bool,
    ) -> Result<(), MountPlanError> {
        let Some(m) = self.visible(path).cloned() else {
            return Err(not_a_dir(path, "outside every mount"));
        };
        if m.dst == path {
            return if m.kind == kind {
                Ok(())
            } else {
                Err(not_a_dir(path, "a file mount"))
            };
        }
        match m.backing {
            Backing::Scratch
                if ancestor && kind == EntryKind::Dir && !self.created.contains_key(path) =>
            {
                // A grant's ancestor in scratch: its own small tmpfs, sealed later.
                self.created.insert(path.to_path_buf(), Created::Dir);
                self.ops.push(MountOp::Dir {
                    path: path.to_path_buf(),
                    mode,
                });
                self.ops.push(MountOp::Tmpfs {
                    dst: path.to_path_buf(),
                    size_bytes: SKELETON_TMPFS_BYTES,
                    mode: MOUNTPOINT_DIR_MODE,
                });
                self.mounts
                    .push(Mounted::new(path, Backing::Tmpfs, EntryKind::Dir));
                self.skeletons.push(path.to_path_buf());
                Ok(())
            }
            Backing::Tmpfs | Backing::SealedTmpfs | Backing::Scratch => {
                match (self.created.get(path), kind) {
                    (Some(Created::Dir), EntryKind::Dir)
                    | (Some(Created::File), EntryKind::File) => Ok(()),
                    (Some(Created::Symlink), _) => Err(not_a_dir(path, "a symlink")),
                    (Some(_), _) => Err(not_a_dir(path, "of another kind")),
                    (None, _) if m.backing == Backing::SealedTmpfs => {
                        Err(not_a_dir(path, "inside a tmpfs already sealed read-only"))
                    }
                    (None, EntryKind::Dir) => {
                        self.created.insert(path.to_path_buf(), Created::Dir);
                        self.ops.push(MountOp::Dir {
                            path: path.to_path_buf(),
                            mode,
                        });
                        Ok(())
                    }
                    (None, EntryKind::File) => {
                        self.created.insert(path.to_path_buf(), Created::File);
                        self.ops.push(MountOp::File {
                            path: path.to_path_buf(),
                            mode,
                            contents: None,
                        });
                        Ok(())
                    }
                }
            }
            Backing::HostRo | Backing::HostRw => match (self.lookup(path)?, kind) {
                (HostNode::Dir, EntryKind::Dir) => Ok(()),
                (HostNode::File | HostNode::Device, EntryKind::File) => Ok(()),
                (HostNode::Missing, _) => Err(MountPlanError::Missing {
                    field: "mountpoint",
                    path: path.to_path_buf(),
                }),
                (HostNode::Inaccessible { errno }, _) => Err(MountPlanError::Inaccessible {
                    path: path.to_path_buf(),
                    errno,
                }),
                (HostNode::Symlink { .. }, _) => Err(not_a_dir(path, "a symlink on the host")),
                _ => Err(not_a_dir(path, "of another kind on the host")),
            },
            Backing::Kernel | Backing::Cover => {
                Err(not_a_dir(path, "inside a mount nothing is created in"))
            }
        }
    }

    /// A mountpoint of `kind` at `path`, with its ancestors.
    fn ensure_mountpoint(&mut self, path: &Path, kind: EntryKind) -> Result<(), MountPlanError> {
        if let Some(parent) = path.parent() {
            self.ensure_dir(parent)?;
        }
        let mode = match kind {
            EntryKind::Dir => MOUNTPOINT_DIR_MODE,
            EntryKind::File => MOUNTPOINT_FILE_MODE,
        };
        self.ensure_entry(path, kind, mode)
    }

    fn symlink(&mut self, link: &Path, target: &Path) -> Result<(), MountPlanError> {
        if let Some(parent) = link.parent() {
            self.ensure_dir(parent)?;
        }
        match self.visible(link).map(|m| (m.backing, m.dst == link)) {
            Some((Backing::Tmpfs, false)) if !self.created.contains_key(link) => {
                self.created.insert(link.to_path_buf(), Created::Symlink);
                self.ops.push(MountOp::Symlink {
                    target: target.to_path_buf(),
                    link: link.to_path_buf(),
                });
                Ok(())
            }
            _ => Err(not_a_dir(link, "not creatable as a symlink")),
        }
    }

    fn mount(&mut self, op: MountOp, backing: Backing) -> Result<(), MountPlanError> {
        let (Some(dst), Some(kind)) = (op.dst().map(Path::to_path_buf), op.mountpoint_kind())
        else {
            return Err(MountPlanError::Invariant {
                index: self.ops.len(),
                op: op.to_string(),
                rule: "not a mount",
            });
        };
        self.ensure_mountpoint(&dst, kind)?;
        self.ops.push(op);
        self.mounts.push(Mounted::new(dst, backing, kind));
        Ok(())
    }

    fn remount_ro(&mut self, dst: &Path, allow_devices: bool) {
        self.ops.push(MountOp::RemountRo {
            dst: dst.to_path_buf(),
            allow_devices,
        });
    }

    fn proc(&mut self) -> Result<(), MountPlanError> {
        self.mount(
            MountOp::Proc {
                dst: PathBuf::from("/proc"),
            },
            Backing::Kernel,
        )?;
        // Host-wide state masked in the proc mount itself: no host lookup (the sandbox's
        // proc is the kernel's, whatever the host's /proc shows).
        for (path, cover) in PROC_MASKED {
            self.ops.push(MountOp::ProcKnob {
                dst: PathBuf::from(path),
                cover: *cover,
            });
        }
        Ok(())
    }

    /// `/dev`: tmpfs, device binds, directories and symlinks, sealed read-only (devices
    /// allowed), then the writable `/dev/shm` (unless `dev_shm = "none"`) and the private `/dev/pts` on top.
    fn dev(&mut self, plan: &Plan) -> Result<(), MountPlanError> {
        let dev = PathBuf::from("/dev");
        self.mount(
            MountOp::Tmpfs {
                dst: dev.clone(),
                size_bytes: DEV_TMPFS_BYTES,
                mode: DEV_DIR_MODE,
            },
            Backing::Tmpfs,
        )?;
        for node in DEV_NODES {
            let path = PathBuf::from(node);
            match self.lookup(&path)? {
                HostNode::Device => self.mount(
                    MountOp::DevNode {
                        src: path.clone(),
                        dst: path,
                    },
                    Backing::HostRo,
                )?,
                other if *node == "/dev/null" => {
                    return Err(MountPlanError::NoDevNull {
                        found: node_name(&other),
                    });
                }
                _ => {}
            }
        }
        let (shm, pts) = (PathBuf::from("/dev/shm"), PathBuf::from("/dev/pts"));
        self.ensure_mountpoint(&shm, EntryKind::Dir)?;
        self.ensure_mountpoint(&pts, EntryKind::Dir)?;
        for (link, target) in DEV_SYMLINKS {
            self.symlink(Path::new(link), Path::new(target))?;
        }
        self.remount_ro(&dev, true);
        if let Some(m) = self.mounts.iter_mut().find(|m| m.dst == dev) {
            m.backing = Backing::SealedTmpfs;
        }
        // `dev_shm = "none"`: the empty directory of the sealed /dev.
        if plan.filesystem.dev_shm == DevShm::Private {
            self.mount(
                MountOp::Tmpfs {
                    dst: shm,
                    size_bytes: dev_shm_size_bytes(plan),
                    mode: SCRATCH_DIR_MODE,
                },
                Backing::Scratch,
            )?;
        }
        self.mount(MountOp::DevPts { dst: pts }, Backing::Kernel)
    }

    fn tmp(
        &mut self,
        plan: &Plan,
        home: Option<&Path>,
        files: &[TmpFile],
    ) -> Result<(), MountPlanError> {
        self.mount(
            MountOp::Tmpfs {
                dst: PathBuf::from("/tmp"),
                size_bytes: tmp_size_bytes(plan),
                mode: SCRATCH_DIR_MODE,
            },
            Backing::Scratch,
        )?;
        for file in files {
            let one_name = !file.name.is_empty()
                && file.name != "."
                && file.name != ".."
                && !file.name.contains(['/', '\0']);
            let path = Path::new("/tmp").join(&file.name);
            let broken = |rule| MountPlanError::Invariant {
                index: self.ops.len(),
                op: format!("file {}", path.display()),
                rule,
            };
            if !one_name {
                return Err(broken(
                    "a file given in /tmp is named by one path component",
                ));
            }
            if self.created.contains_key(&path) {
                return Err(broken("two files given in /tmp have one name"));
            }
            self.created.insert(path.clone(), Created::File);
            self.ops.push(MountOp::File {
                path,
                mode: TMP_FILE_MODE,
                contents: Some(file.contents.clone()),
            });
        }
        if let Some(home) = home {
            // The private home is the program's own scratch, not a skeleton.
            self.created.insert(home.to_path_buf(), Created::Dir);
            self.ops.push(MountOp::Dir {
                path: home.to_path_buf(),
                mode: PRIVATE_HOME_MODE,
            });
        }
        Ok(())
    }

    fn emit_bind(&mut self, bind: &Bind) -> Result<(), MountPlanError> {
        match bind {
            Bind::Symlink { link, target } => self.symlink(link, target),
            Bind::Mount {
                path,
                kind,
                writable: true,
            } => self.mount(
                MountOp::BindRw {
                    src: path.clone(),
                    dst: path.clone(),
                    kind: *kind,
                },
                Backing::HostRw,
            ),
            Bind::Mount {
                path,
                kind,
                writable: false,
            } => {
                self.mount(
                    MountOp::BindRo {
                        src: path.clone(),
                        dst: path.clone(),
                        kind: *kind,
                    },
                    Backing::HostRo,
                )?;
                self.remount_ro(path, false);
                Ok(())
            }
        }
    }

    /// Resolves `path` through host symlinks, as the kernel would (lexically below the
    /// first missing or non-directory component).
    fn resolve(&mut self, field: &'static str, path: &Path) -> Result<PathBuf, MountPlanError> {
        super::protect::resolve(&mut |p| (self.lookup)(p), field, path)
    }

    fn protect(&mut self, protected: &[PathBuf], workspace: &Path) -> Result<(), MountPlanError> {
        let Protection { pins, targets } = protection(self, protected, workspace)?;
        let kept = targets;
        // Pins first, ancestors before the binds and covers inside them.
        for pin in pins {
            self.emit_bind(&Bind::Mount {
                path: pin,
                kind: EntryKind::Dir,
                writable: true,
            })?;
        }
        // Placeholders first, while everything they are created in is still writable.
        for (q, t) in &kept {
            if let Protect::CoverMissing(kind) = t {
                self.ops.push(MountOp::HostPlaceholder {
                    path: q.clone(),
                    kind: *kind,
                });
                self.placeholders.push(q.clone());
            }
        }
        for (q, t) in kept {
            match t {
                Protect::BindSelf(kind) => {
                    self.emit_bind(&Bind::Mount {
                        path: q,
                        kind,
                        writable: false,
                    })?;
                }
                Protect::CoverSymlink => self.cover_dev_null(&q),
                Protect::CoverMissing(EntryKind::File) => self.cover_empty_file(&q),
                Protect::CoverMissing(EntryKind::Dir) => self.cover_empty_dir(&q),
            }
        }
        Ok(())
    }

    fn cover_dev_null(&mut self, dst: &Path) {
        self.ops.push(MountOp::CoverWithDevNull {
            dst: dst.to_path_buf(),
        });
        self.mounts
            .push(Mounted::new(dst, Backing::Cover, EntryKind::File));
        self.remount_ro(dst, false);
    }

    /// A missing protected file: its empty host placeholder (created by the op just
    /// before) bound onto itself read-only, so it reads as an empty regular file — what
    /// git takes for "absent" (an empty `commondir` is ignored, where an unreadable one
    /// is fatal) — and cannot be written, replaced or removed.
    fn cover_empty_file(&mut self, dst: &Path) {
        self.ops.push(MountOp::BindRo {
            src: dst.to_path_buf(),
            dst: dst.to_path_buf(),
            kind: EntryKind::File,
        });
        self.mounts
            .push(Mounted::new(dst, Backing::HostRo, EntryKind::File));
        self.remount_ro(dst, false);
    }

    fn cover_empty_dir(&mut self, dst: &Path) {
        self.ops.push(MountOp::CoverWithEmptyDir {
            dst: dst.to_path_buf(),
        });
        self.mounts
            .push(Mounted::new(dst, Backing::Cover, EntryKind::Dir));
    }

    fn deny(
        &mut self,
        field: &'static str,
        deny: &[PathBuf],
        workspace: &Path,
    ) -> Result<(), MountPlanError> {
        let mut targets: BTreeMap<PathBuf, EntryKind> = BTreeMap::new();
        for raw in deny {
            let path = normalize(field, raw)?;
            let resolved = self.resolve(field, &path)?;
            if workspace.starts_with(&resolved) {
                return Err(MountPlanError::DenyHidesWorkspace {
                    path: resolved,
                    workspace: workspace.to_path_buf(),
                });
            }
            let visible = self
                .visible(&resolved)
                .is_some_and(|m| matches!(m.backing, Backing::HostRo | Backing::HostRw));
            if !visible {
                continue;
            }
            let kind = match self.lookup(&resolved)? {
                HostNode::Dir => EntryKind::Dir,
                HostNode::File | HostNode::Device | HostNode::Symlink { .. } => EntryKind::File,
                HostNode::Missing => continue,
                HostNode::Inaccessible { errno } => {
                    return Err(MountPlanError::Inaccessible {
                        path: resolved,
                        errno,
                    });
                }
            };
            targets.insert(resolved, kind);
        }
        let mut kept: Vec<PathBuf> = Vec::new();
        for (q, kind) in targets {
            if kept.iter().any(|k| q.starts_with(k)) {
                continue;
            }
            match kind {
                EntryKind::Dir => self.cover_empty_dir(&q),
                EntryKind::File => self.cover_dev_null(&q),
            }
            kept.push(q);
        }
        Ok(())
    }
}
