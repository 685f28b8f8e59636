//! Compiling the mount plan: the planner's [`MountOp`]s turned into `NsOp`s with owned C
//! strings, prefixed for the staging layout; pure, so it is tested without root.

use super::*;

/// An `NsOp` with owned strings, plus a description for error messages.
#[derive(Debug, Clone)]
pub struct OwnedOp {
    kind: OpKind,
    src: Option<CString>,
    dst: CString,
    fstype: Option<&'static CStr>,
    data: Option<CString>,
    flags: libc::c_ulong,
    attr: u64,
    recursive: bool,
    mode: u32,
    expect: Expect,
    if_present: bool,
    plain_bind: bool,
    chown_to_sandbox: bool,
    /// The planner's op (or the staging step) this came from.
    pub describe: String,
}

impl OwnedOp {
    pub(crate) fn new(kind: OpKind, dst: CString, describe: String) -> Self {
        Self {
            kind,
            src: None,
            dst,
            fstype: None,
            data: None,
            flags: 0,
            attr: 0,
            recursive: false,
            mode: 0,
            expect: Expect::Any,
            if_present: false,
            plain_bind: false,
            chown_to_sandbox: false,
            describe,
        }
    }

    /// The borrowed form the child executes.
    pub fn borrow(&self) -> NsOp<'_> {
        NsOp {
            kind: self.kind,
            src: self.src.as_deref(),
            dst: &self.dst,
            fstype: self.fstype,
            data: self.data.as_deref(),
            flags: self.flags,
            attr: self.attr,
            recursive: self.recursive,
            mode: self.mode,
            expect: self.expect,
            if_present: self.if_present,
            plain_bind: self.plain_bind,
            chown_to_sandbox: self.chown_to_sandbox,
        }
    }

    /// The op's kind.
    #[cfg(test)]
    pub fn kind(&self) -> OpKind {
        self.kind
    }

    /// Its destination.
    #[cfg(test)]
    pub fn dst(&self) -> &CStr {
        &self.dst
    }

    /// Its source.
    #[cfg(test)]
    pub fn src(&self) -> Option<&CStr> {
        self.src.as_deref()
    }
}

pub(super) fn path_c(what: &'static str, p: &Path) -> Result<CString, NativeError> {
    cstring(what, p.as_os_str().as_bytes())
}

/// `prefix` + absolute `p` (`/newroot` + `/usr` = `/newroot/usr`).
pub(super) fn under(prefix: &str, p: &Path) -> Result<CString, NativeError> {
    let mut bytes = prefix.as_bytes().to_vec();
    bytes.extend_from_slice(p.as_os_str().as_bytes());
    cstring("mount path", &bytes)
}

pub(super) fn tmpfs_data(size: u64, mode: u32) -> Result<CString, NativeError> {
    cstring(
        "tmpfs options",
        format!("size={size},mode={mode:o}").as_bytes(),
    )
}

/// Turns a mount plan into the child's op list: the staging prologue, then one or more
/// `NsOp`s per [`MountOp`], paths prefixed with [`NEW_ROOT`] (destinations) and
/// [`OLD_ROOT`] (bind sources) until the final pivot; with, for each planner op, the
/// index of the compiled op that binds its tree ([`PreparedMounts::bind_at`]). Pure.
pub fn compile_ops(mplan: &MountPlan) -> Result<(Vec<OwnedOp>, Vec<usize>), NativeError> {
    let mut out = staging_prologue()?;
    out.reserve(mplan.ops.len());
    let mut bind_at = Vec::with_capacity(mplan.ops.len());
    let mut compiler = OpCompiler {
        new_root: cstring("staging path", NEW_ROOT.as_bytes())?,
        writable_binds: Vec::new(),
        sockets: &mplan.sockets,
    };
    for op in &mplan.ops {
        match op {
            MountOp::Overlay {
                lower,
                dst,
                size_bytes,
            } => {
                let at = compiler.overlay(lower, dst, *size_bytes, op.to_string(), &mut out)?;
                bind_at.push(at);
            }
            _ => {
                bind_at.push(out.len());
                let compiled = compiler.compile(op, out.len())?;
                out.push(compiled);
                if MountPlan::is_sent(op) {
                    let dst = under(NEW_ROOT, op.dst().unwrap_or(Path::new("/")))?;
                    let describe = format!(
                        "send {} to the supervisor",
                        op.dst().unwrap_or(Path::new("/")).display()
                    );
                    out.push(OwnedOp::new(OpKind::SendFd, dst, describe));
                }
            }
        }
    }
    Ok((out, bind_at))
}

pub(super) const TMPFS: &CStr = c"tmpfs";
pub(super) const OVERLAY: &CStr = c"overlay";

/// The prologue: private propagation, the staging tmpfs, its two directories, the first
/// pivot.
pub(super) fn staging_prologue() -> Result<Vec<OwnedOp>, NativeError> {
    let stage = |p: &str| cstring("staging path", format!("{STAGE_BASE}{p}").as_bytes());
    let mut out = Vec::with_capacity(5);
    let mut private = OwnedOp::new(
        OpKind::Mount,
        c"/".to_owned(),
        "mount(NULL, /, NULL, MS_REC | MS_PRIVATE)".to_owned(),
    );
    private.flags = libc::MS_REC | libc::MS_PRIVATE;
    out.push(private);
    out.push(tmpfs(
        cstring("staging path", STAGE_BASE.as_bytes())?,
        format!("staging tmpfs on {STAGE_BASE}"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        STAGE_TMPFS_BYTES,
        STAGE_DIR_MODE,
    )?);
    for dir in [NEW_ROOT, OLD_ROOT] {
        let mut d = OwnedOp::new(
            OpKind::Mkdir,
            stage(dir)?,
            format!("mkdir {STAGE_BASE}{dir}"),
        );
        d.mode = STAGE_DIR_MODE;
        out.push(d);
    }
    let mut pivot = OwnedOp::new(
        OpKind::PivotInto,
        cstring("staging path", STAGE_BASE.as_bytes())?,
        format!("pivot_root({STAGE_BASE}, {STAGE_BASE}{OLD_ROOT})"),
    );
    pivot.src = Some(stage(OLD_ROOT)?);
    out.push(pivot);
    Ok(out)
}

/// A tmpfs of `size` bytes and root `mode` mounted on `dst` with `flags`.
pub(super) fn tmpfs(
    dst: CString,
    describe: String,
    flags: libc::c_ulong,
    size: u64,
    mode: u32,
) -> Result<OwnedOp, NativeError> {
    let mut o = OwnedOp::new(OpKind::Mount, dst, describe);
    o.src = Some(TMPFS.to_owned());
    o.fstype = Some(TMPFS);
    o.flags = flags;
    o.data = Some(tmpfs_data(size, mode)?);
    Ok(o)
}

/// An empty read-only directory over `dst` (a tiny tmpfs): what hides a directory.
pub(super) fn empty_cover(dst: CString, describe: String) -> Result<OwnedOp, NativeError> {
    tmpfs(
        dst,
        describe,
        libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        COVER_TMPFS_BYTES,
        COVER_DIR_MODE,
    )
}

/// `mount_setattr` of `dst` (recursively or not) setting `attr`.
pub(super) fn setattr(dst: CString, describe: String, recursive: bool, attr: u64) -> OwnedOp {
    let mut o = OwnedOp::new(OpKind::Setattr, dst, describe);
    o.recursive = recursive;
    o.attr = attr;
    o
}

/// Compiles the planner's ops one by one, remembering the writable binds made so far.
pub(super) struct OpCompiler<'p> {
    new_root: CString,
    /// Writable host binds so far: a destination below one lies in a tree other
    /// sandboxes (runs on the same workspace) can change under us, so binds there keep
    /// the symlink-proof `open_tree` + `move_mount`. Every other bind lands on a mount
    /// point pid 1 made itself in its private tmpfs, and takes a plain `mount(MS_BIND)`
    /// (see `NsOp::plain_bind`).
    writable_binds: Vec<&'p Path>,
    /// Bind sources that must be sockets ([`MountPlan::sockets`]).
    pub(super) sockets: &'p [PathBuf],
}

impl<'p> OpCompiler<'p> {
    pub(super) fn plain_ok(&self, dst: &Path) -> bool {
        !self
            .writable_binds
            .iter()
            .any(|w| dst.starts_with(w) && dst != *w)
    }

    /// The `NsOp` for `op`, the `index`th of the compiled list.
    pub(super) fn compile(
        &mut self,
        op: &'p MountOp,
        index: usize,
    ) -> Result<OwnedOp, NativeError> {
        const RO_NOSUID_NODEV: u64 =
            nsys::MOUNT_ATTR_RDONLY | nsys::MOUNT_ATTR_NOSUID | nsys::MOUNT_ATTR_NODEV;
        let describe = op.to_string();
        let new = |p: &Path| under(NEW_ROOT, p);
        Ok(match op {
            MountOp::TmpfsRoot { size_bytes, mode } => tmpfs(
                self.new_root.clone(),
                describe,
                libc::MS_NOSUID | libc::MS_NODEV,
                *size_bytes,
                *mode,
            )?,
            MountOp::Dir { path, mode } => {
                let mut o = OwnedOp::new(OpKind::Mkdir, new(path)?, describe);
                o.mode = *mode;
                // The private HOME is the program's: pid 1 makes it during setup, as ns
                // uid 0 under a root supervisor.
                o.chown_to_sandbox = path == Path::new(crate::linux::mounts::PRIVATE_HOME);
                o
            }
            MountOp::File {
                path,
                mode,
                contents,
            } => {
                let mut o = OwnedOp::new(OpKind::MkFile, new(path)?, describe);
                o.mode = *mode;
                if let Some(c) = contents {
                    o.data = Some(cstring("a file's contents in /tmp", c.0.as_bytes())?);
                }
                o
            }
            MountOp::Symlink { target, link } => {
                let mut o = OwnedOp::new(OpKind::Symlink, new(link)?, describe);
                o.src = Some(path_c("symlink target", target)?);
                o
            }
            MountOp::Proc { dst } => {
                let mut o = OwnedOp::new(OpKind::Mount, new(dst)?, describe);
                o.src = Some(c"proc".to_owned());
                o.fstype = Some(c"proc");
                o.flags = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
                o
            }
            MountOp::ProcKnob { dst, cover } => {
                let mut o = match cover {
                    // A plain bind of the host's /dev/null (no clone of a mount tree: a
                    // bind through `open_tree` onto a proc entry costs ~50 µs, this ~5).
                    // Nothing can race it: the host root is trusted, and no sandboxed
                    // process exists yet.
                    ProcCover::MaskFile => {
                        let mut o = OwnedOp::new(OpKind::Mount, new(dst)?, describe);
                        o.src = Some(under(OLD_ROOT, Path::new("/dev/null"))?);
                        o.flags = libc::MS_BIND;
                        o
                    }
                    ProcCover::MaskDir => empty_cover(new(dst)?, describe)?,
                };
                o.if_present = true;
                o
            }
            MountOp::Tmpfs {
                dst,
                size_bytes,
                mode,
            } => tmpfs(
                new(dst)?,
                describe,
                libc::MS_NOSUID | libc::MS_NODEV,
                *size_bytes,
                *mode,
            )?,
            MountOp::DevNode { src, dst } => {
                let mut o = OwnedOp::new(OpKind::BindTree, new(dst)?, describe);
                o.src = Some(under(OLD_ROOT, src)?);
                o.expect = Expect::CharDev;
                o.plain_bind = self.plain_ok(dst);
                o
            }
            MountOp::DevPts { dst } => {
                let mut o = OwnedOp::new(OpKind::Mount, new(dst)?, describe);
                o.src = Some(c"devpts".to_owned());
                o.fstype = Some(c"devpts");
                o.flags = libc::MS_NOSUID | libc::MS_NOEXEC;
                o.data = Some(cstring(
                    "devpts options",
                    format!("newinstance,ptmxmode={PTMX_MODE:04o},mode={PTS_MODE:04o}").as_bytes(),
                )?);
                o
            }
            MountOp::BindRo { src, dst, kind } | MountOp::BindRw { src, dst, kind } => self.bind(
                src,
                dst,
                *kind,
                matches!(op, MountOp::BindRw { .. }),
                describe,
            )?,
            MountOp::HostPlaceholder { path, kind } => placeholder(path, *kind, index, describe)?,
            // Several ops: compiled by `OpCompiler::overlay`.
            MountOp::Overlay { .. } => {
                return Err(NativeError::MountPlan(MountPlanError::Invariant {
                    index,
                    op: describe,
                    rule: "an overlay compiles to several ops",
                }));
            }
            MountOp::CoverWithDevNull { dst } => {
                let mut o = OwnedOp::new(OpKind::BindTree, new(dst)?, describe);
                o.src = Some(under(OLD_ROOT, Path::new("/dev/null"))?);
                o.expect = Expect::CharDev;
                o
            }
            MountOp::CoverWithEmptyDir { dst } => empty_cover(new(dst)?, describe)?,
            MountOp::RemountRo { dst, allow_devices } => {
                let attr = nsys::MOUNT_ATTR_RDONLY
                    | nsys::MOUNT_ATTR_NOSUID
                    | if *allow_devices {
                        0
                    } else {
                        nsys::MOUNT_ATTR_NODEV
                    };
                setattr(new(dst)?, describe, true, attr)
            }
            MountOp::SealSkeleton { dst } => setattr(new(dst)?, describe, false, RO_NOSUID_NODEV),
            MountOp::PivotRoot => OwnedOp::new(OpKind::PivotFinal, self.new_root.clone(), describe),
            MountOp::RemountRootRo => setattr(c"/".to_owned(), describe, false, RO_NOSUID_NODEV),
        })
    }

    /// The ops of a [`MountOp::Overlay`], appended to `out`: the lower layer bound in the
    /// staging tmpfs, the upper layer's tmpfs with its two directories, the overlay on
    /// `dst`, the upper layer sent to the supervisor. Returns the index of the lower
    /// layer's bind (where an idmapped tree is moved in instead).
    pub(super) fn overlay(
        &mut self,
        lower: &'p Path,
        dst: &'p Path,
        size_bytes: u64,
        describe: String,
        out: &mut Vec<OwnedOp>,
    ) -> Result<usize, NativeError> {
        let step = |what: &str| format!("{describe}: {what}");
        let staged = |p: &str| cstring("staging path", p.as_bytes());
        let in_layer = |name: &str| staged(&format!("{OVERLAY_LAYER}/{name}"));
        for dir in [OVERLAY_LOWER, OVERLAY_LAYER] {
            let mut d = OwnedOp::new(OpKind::Mkdir, staged(dir)?, step(&format!("mkdir {dir}")));
            d.mode = STAGE_DIR_MODE;
            out.push(d);
        }
        // The workspace, symlink-proof (a tree other runs can change), never plain.
        let bind_at = out.len();
        let mut bind = OwnedOp::new(
            OpKind::BindTree,
            staged(OVERLAY_LOWER)?,
            step("bind the lower layer"),
        );
        bind.src = Some(under(OLD_ROOT, lower)?);
        bind.expect = Expect::Dir;
        out.push(bind);
        out.push(tmpfs(
            staged(OVERLAY_LAYER)?,
            step("the upper layer's tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV,
            size_bytes,
            OVERLAY_LAYER_MODE,
        )?);
        for (name, mode) in [(OVERLAY_UPPER, 0o755), (OVERLAY_WORK, OVERLAY_LAYER_MODE)] {
            let mut d = OwnedOp::new(
                OpKind::Mkdir,
                in_layer(name)?,
                step(&format!("mkdir {name}")),
            );
            d.mode = mode;
            out.push(d);
        }
        let mut owner = OwnedOp::new(
            OpKind::CopyOwner,
            in_layer(OVERLAY_UPPER)?,
            step("the upper directory takes the workspace root's owner and mode"),
        );
        owner.src = Some(staged(OVERLAY_LOWER)?);
        out.push(owner);
        let mut mount = OwnedOp::new(OpKind::Mount, under(NEW_ROOT, dst)?, step("mount"));
        mount.src = Some(OVERLAY.to_owned());
        mount.fstype = Some(OVERLAY);
        mount.flags = libc::MS_NOSUID | libc::MS_NODEV;
        mount.data = Some(cstring(
            "overlay options",
            format!(
                "lowerdir={OVERLAY_LOWER},upperdir={OVERLAY_LAYER}/{OVERLAY_UPPER},workdir={OVERLAY_LAYER}/{OVERLAY_WORK},redirect_dir=nofollow"
            )
            .as_bytes(),
        )?);
        out.push(mount);
        out.push(OwnedOp::new(
            OpKind::SendFd,
            staged(OVERLAY_LAYER)?,
            step("send the upper layer to the supervisor"),
        ));
        self.writable_binds.push(dst);
        Ok(bind_at)
    }

    /// A bind of `src` onto `dst` (writable or not).
    pub(super) fn bind(
        &mut self,
        src: &'p Path,
        dst: &'p Path,
        kind: EntryKind,
        writable: bool,
        describe: String,
    ) -> Result<OwnedOp, NativeError> {
        let mut o = OwnedOp::new(OpKind::BindTree, under(NEW_ROOT, dst)?, describe);
        // Inside a writable bind (a protected path in the workspace, a pin) the source is
        // the sandbox's own view of it, which an idmapped workspace shows with the
        // sandbox's ids (git refuses a repository whose `.git` it does not own);
        // elsewhere the host's.
        let inside_writable = self.writable_binds.iter().any(|w| src.starts_with(w));
        o.src = Some(if inside_writable {
            under(NEW_ROOT, src)?
        } else {
            under(OLD_ROOT, src)?
        });
        o.expect = match kind {
            EntryKind::Dir => Expect::Dir,
            EntryKind::File if self.sockets.iter().any(|s| s == src) => Expect::Socket,
            EntryKind::File => Expect::NotDir,
        };
        if writable {
            o.attr = nsys::MOUNT_ATTR_NOSUID | nsys::MOUNT_ATTR_NODEV;
        }
        o.plain_bind = self.plain_ok(dst);
        if writable {
            self.writable_binds.push(dst);
        }
        Ok(o)
    }
}

/// A mount point created in the host's workspace (the `index`th compiled op).
pub(super) fn placeholder(
    path: &Path,
    kind: EntryKind,
    index: usize,
    describe: String,
) -> Result<OwnedOp, NativeError> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(NativeError::MountPlan(MountPlanError::Invariant {
            index,
            op: describe,
            rule: "placeholder without a parent",
        }));
    };
    let (k, mode) = match kind {
        EntryKind::Dir => (OpKind::PlaceholderDir, MOUNTPOINT_DIR_MODE),
        EntryKind::File => (OpKind::PlaceholderFile, MOUNTPOINT_FILE_MODE),
    };
    let mut o = OwnedOp::new(k, cstring("placeholder", name.as_bytes())?, describe);
    // Through the host's path, not the sandbox's view of it: an idmapped workspace has no
    // id for pid 1's setup identity (host root) to create as; on the host the placeholder
    // belongs to root, as before.
    o.src = Some(under(OLD_ROOT, parent)?);
    o.mode = mode;
    // What git must read in it (a `commondir` naming the git directory itself).
    let content = tierbox_policy::validate::placeholder_content(path);
    if kind == EntryKind::File && !content.is_empty() {
        o.data = Some(cstring("placeholder content", content)?);
    }
    Ok(o)
}
