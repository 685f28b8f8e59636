//! The bubblewrap argument vector of a run: its mount steps, the protected and denied
//! paths, and its environment.

use super::*;

/// One mount-namespace step, before rendering.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Step {
    /// `--symlink TARGET PATH`: a system symlink reproduced verbatim.
    Symlink { target: PathBuf },
    /// `--bind PATH PATH`.
    BindRw,
    /// `--ro-bind PATH PATH`.
    BindRo,
    /// `--tmpfs PATH --remount-ro PATH`: an empty read-only directory.
    EmptyRo,
    /// `--ro-bind PATH PATH` of a placeholder file the supervisor creates on the host
    /// first: empty, or holding what git must read in it (a missing `.git/commondir`:
    /// `.`).
    PlaceholderRo,
    /// `--ro-bind-fd FD PATH`: a granted host socket, from the supervisor's `O_PATH` fd.
    SocketFd { fd: i32 },
}

/// A hidden path, rendered after every bind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Deny {
    /// `--tmpfs PATH --remount-ro PATH`.
    Dir(PathBuf),
    /// `--ro-bind /dev/null PATH` (bound `nodev`, so it cannot even be opened).
    File(PathBuf),
}

/// Builds the `bwrap` argv (without the program name `bwrap` itself) that carries out
/// `plan`: namespaces and privileges first, then the environment, the fixed mounts
/// (`/proc`, `/dev`, `/tmp`), the binds ancestor-first, the protected-path and
/// `deny_read` covers, `--remount-ro /`, `--chdir`, `--seccomp`, and after `--` the
/// program and its arguments.
///
/// Pure: reads only `plan` and `opts` (host facts come in `opts.host`).
pub fn bwrap_argv(plan: &Plan, opts: &BwrapOptions) -> Result<Vec<OsString>, BwrapError> {
    opts.check()?;
    let mounts = with_sockets(mount_steps(plan, &opts.host)?, plan, opts)?;
    let denies = deny_steps(plan, &opts.host, &mounts);
    let env = sandbox_env(plan, opts)?;

    let mut argv = Argv::default();
    push_privileges(&mut argv, plan, opts)?;

    push_env(&mut argv, opts, &env);
    push_fixed_mounts(&mut argv, plan, opts);
    // A grant's ancestors under /tmp would be directories of the run's writable scratch,
    // where a write beside the grant would look as if it reached the host: each gets a
    // small tmpfs of its own, read-only once the grants are mounted in it.
    let skeletons = skeleton_tops(&mounts);
    for top in &skeletons {
        argv.flag_value("--tmpfs", top);
    }

    for (path, step) in &mounts {
        match step {
            Step::Symlink { target } => argv.flag_pair("--symlink", target, path),
            Step::BindRw => argv.flag_pair("--bind", path, path),
            Step::BindRo => argv.flag_pair("--ro-bind", path, path),
            Step::EmptyRo => argv.empty_ro(path),
            Step::PlaceholderRo => argv.flag_pair("--ro-bind", path, path),
            Step::SocketFd { fd } => argv.flag_pair("--ro-bind-fd", fd.to_string(), path),
        }
    }
    for deny in &denies {
        match deny {
            Deny::Dir(path) => argv.empty_ro(path),
            Deny::File(path) => argv.flag_pair("--ro-bind", "/dev/null", path),
        }
    }
    for top in &skeletons {
        argv.flag_value("--remount-ro", top);
    }
    // Every mount point now exists: freeze the root tmpfs (not recursive, so /tmp,
    // /dev/shm and the writable binds stay writable).
    argv.flag_value("--remount-ro", "/");

    push_program(&mut argv, plan, opts)?;
    argv.finish()
}

/// Namespaces and privileges: the namespaces bwrap makes (or the prepared user namespace
/// it joins), the network it shares, and the identity and capabilities inside.
fn push_privileges(argv: &mut Argv, plan: &Plan, opts: &BwrapOptions) -> Result<(), BwrapError> {
    // Namespaces and privileges. `--unshare-user` explicitly: bwrap skips the automatic
    // user namespace when run by uid 0, and without it a root caller keeps every
    // capability inside (observed with Palyra's argv). A prepared user namespace
    // (`--userns`) excludes `--unshare-all`, which implies `--unshare-user-try`: every
    // other namespace is then named.
    match opts.userns_fd {
        None => argv.flags(&["--unshare-all", "--unshare-user"]),
        Some(fd) => {
            argv.flag_value("--userns", fd.to_string());
            argv.flags(&[
                "--unshare-ipc",
                "--unshare-pid",
                "--unshare-net",
                "--unshare-uts",
                "--unshare-cgroup-try",
            ]);
        }
    }
    match (plan.network.needs_proxy(), opts.egress_proxy_port) {
        // The namespace bwrap starts in is the supervisor's loopback-only one.
        (true, Some(_)) => argv.flags(&["--share-net"]),
        // Host ports and published ports: the same, without the proxy.
        (false, None) if plan.network.has_reach() => match opts.reach_netns {
            true => argv.flags(&["--share-net"]),
            false => {
                return Err(BwrapError::PlanNotExpressible {
                    what: "egress.publish and egress.host_ports need the supervisor's network namespace (reach_netns)".to_owned(),
                });
            }
        },
        (false, None) if opts.reach_netns => {
            return Err(BwrapError::InvalidOption {
                option: "reach_netns",
                reason: "set, but the plan has no host port or published port".to_owned(),
            });
        }
        (false, None) => {}
        (true, None) => {
            return Err(BwrapError::PlanNotExpressible {
                what: "strict egress with an allowlist needs the egress proxy's network namespace (egress_proxy_port)".to_owned(),
            });
        }
        (false, Some(_)) => {
            return Err(BwrapError::InvalidOption {
                option: "egress_proxy_port",
                reason: "set, but the plan does not use the egress proxy".to_owned(),
            });
        }
    }
    // bwrap refuses `--disable-userns` with `--userns`; the seccomp filter's namespace
    // rules still deny nested user namespaces.
    if opts.features.disable_userns && opts.userns_fd.is_none() {
        argv.flags(&["--disable-userns"]);
    }
    argv.flags(&["--die-with-parent", "--new-session", "--cap-drop", "ALL"]);
    argv.flag_value("--uid", opts.uid.to_string());
    argv.flag_value("--gid", opts.gid.to_string());
    argv.flag_value("--hostname", &opts.hostname);
    Ok(())
}

/// The environment, cleared first: bwrap applies these while parsing.
fn push_env(argv: &mut Argv, opts: &BwrapOptions, env: &[(String, String)]) {
    // Environment: bwrap applies these while parsing, so `--clearenv` must come first.
    // With `env_args_fd` the `--setenv` triples are read from that fd (`--args`), so the
    // values never appear in bwrap's command line, which any process may read.
    argv.flags(&["--clearenv"]);
    match opts.env_args_fd {
        Some(fd) => argv.flag_value("--args", fd.to_string()),
        None => {
            for (name, value) in env {
                argv.flags(&["--setenv"]);
                argv.push(name);
                argv.push(value);
            }
        }
    }
}

/// The fixed mounts (`/proc` with its masks, `/dev`, `/dev/shm`, `/tmp`, the home), before
/// any bind.
fn push_fixed_mounts(argv: &mut Argv, plan: &Plan, opts: &BwrapOptions) {
    // Fixed mounts before any bind, so a grant below them (e.g. a workspace under the
    // host's /tmp) is bound on top of them rather than hidden by them.
    argv.flag_value("--proc", "/proc");
    // Host-wide state masked as the native backend does (what each entry is here: the
    // supervisor's own /proc may have had one masked by a container runtime already).
    for (path, _) in PROC_MASKED {
        let path = Path::new(path);
        match opts.host.kind(path) {
            PathKind::Missing | PathKind::Symlink { .. } => {}
            PathKind::Dir => argv.empty_ro(path),
            PathKind::File => argv.flag_pair("--ro-bind", "/dev/null", path),
        }
    }
    // The whole /proc read-only (`MountOp::Proc` says why): bwrap covers /proc/sys and
    // friends only when they are writable for the user it maps, and a directory of mode
    // 555 is not, though the root-owned files under it are.
    argv.flag_value("--remount-ro", "/proc");
    argv.flag_value("--dev", "/dev");
    // The run's own /dev/shm, sized as the native backend's; `dev_shm = "none"`: an empty,
    // read-only one (a grant of the host's is never bound, see `mount_steps`).
    let shm = Path::new(tierbox_policy::plan::DEV_SHM);
    match plan.filesystem.dev_shm {
        DevShm::Private => {
            if opts.features.tmpfs_size {
                argv.flag_value("--size", dev_shm_size_bytes(plan).to_string());
            }
            argv.flag_value("--tmpfs", shm);
        }
        DevShm::None => argv.empty_ro(shm),
    }
    if opts.features.tmpfs_size {
        argv.flag_value("--size", opts.tmp_size_bytes.to_string());
    }
    argv.flag_value("--tmpfs", SANDBOX_TMP);
    if let Some(t) = &opts.trust {
        // Read-only for the program's user (bwrap 0.5 and later take `--perms`).
        if opts.features.tmpfs_size {
            argv.flag_value("--perms", "0444");
        }
        let bundle = format!("{SANDBOX_TMP}/{}", crate::egress::CA_BUNDLE_FILE);
        argv.flag_pair("--file", t.fd.to_string(), bundle);
    }
    if plan.filesystem.private_home {
        argv.flag_value("--dir", SANDBOX_HOME);
    }
}

/// The working directory, the seccomp filter, and after `--` the program (through
/// tierbox-init as pid 1 when it is given) and its arguments.
fn push_program(argv: &mut Argv, plan: &Plan, opts: &BwrapOptions) -> Result<(), BwrapError> {
    argv.flag_value("--chdir", absolute(&plan.cwd, "cwd")?);
    if let Some(fd) = opts.seccomp_fd {
        argv.flag_value("--seccomp", fd.to_string());
    }
    let program = absolute(&plan.program, "program")?;
    match opts.init_fd {
        // pid 1 is tierbox-init, which execs the program with the Plan's argv whole.
        Some(fd) => {
            argv.flags(&["--as-pid-1", "--"]);
            argv.push(format!("/proc/self/fd/{fd}"));
            if let Some(alive) = opts.alive_fd {
                argv.flags(&[INIT_ALIVE_FLAG]);
                argv.push(alive.to_string());
            }
            if let Some(t) = opts.terminal {
                argv.flags(&[INIT_PTY_FLAG]);
                argv.push(t.sock.to_string());
                argv.push(t.size.rows.to_string());
                argv.push(t.size.cols.to_string());
            }
            match opts.stacked_filter {
                Some(f) => {
                    argv.flags(&[INIT_RUN_STACKED_FLAG]);
                    f.init_args().iter().for_each(|a| argv.push(a));
                }
                None => argv.flags(&[INIT_RUN_FLAG]),
            }
            argv.push(program);
            match plan.argv.first() {
                Some(_) => plan.argv.iter().for_each(|a| argv.push(a)),
                None => argv.push(program),
            }
        }
        None => {
            if opts.features.argv0
                && let Some(arg0) = plan.argv.first()
            {
                argv.flag_value("--argv0", arg0);
            }
            argv.flags(&["--"]);
            argv.push(program);
            for arg in plan.argv.iter().skip(1) {
                argv.push(arg);
            }
        }
    }
    Ok(())
}

/// The first directory below [`SANDBOX_TMP`] on the way to each mount under it that is
/// not itself mounted: where the mounts' ancestors would be created in the scratch tmpfs.
/// Sorted, outermost only.
pub(super) fn skeleton_tops(mounts: &[(PathBuf, Step)]) -> Vec<PathBuf> {
    let tmp = Path::new(SANDBOX_TMP);
    let mut tops: BTreeSet<PathBuf> = BTreeSet::new();
    for (path, _) in mounts {
        let Ok(rel) = path.strip_prefix(tmp) else {
            continue;
        };
        let mut parts = rel.components();
        let (Some(first), Some(_)) = (parts.next(), parts.next()) else {
            continue;
        };
        let top = tmp.join(first);
        if !mounts.iter().any(|(p, _)| *p == top) {
            tops.insert(top);
        }
    }
    tops.into_iter().collect()
}

/// The directories bwrap will create in the host's filesystem for `plan`: the covers of
/// missing protected components (e.g. `<workspace>/.git`). They are empty mount points;
/// remove them after the run with [`remove_host_mount_points`].
pub fn host_mount_points(plan: &Plan, opts: &BwrapOptions) -> Result<Vec<PathBuf>, BwrapError> {
    let points: BTreeSet<PathBuf> = protected_mounts(plan, &opts.host)?
        .into_iter()
        .filter(|(_, step)| matches!(step, Step::EmptyRo | Step::PlaceholderRo))
        .map(|(path, _)| path)
        .collect();
    // Sorted ancestor-first; removal walks them in reverse.
    Ok(points.into_iter().collect())
}

/// The entries among [`host_mount_points`] that the supervisor creates on the host
/// itself before bwrap starts ([`crate::placeholders::create`]): `true` for a directory
/// (an empty read-only tmpfs is mounted on it), `false` for a file holding what git must
/// read in it (a `commondir` of `.`: bwrap would create an empty one, which git finds
/// fatal). Made by the supervisor, not by bwrap, whose setup identity may not write a git
/// directory a run created (it belongs to the sandbox's group).
pub fn host_placeholders(
    plan: &Plan,
    opts: &BwrapOptions,
) -> Result<Vec<(PathBuf, bool)>, BwrapError> {
    Ok(protected_mounts(plan, &opts.host)?
        .into_iter()
        .filter_map(|(path, step)| match step {
            Step::EmptyRo => Some((path, true)),
            Step::PlaceholderRo => Some((path, false)),
            _ => None,
        })
        .collect())
}

/// Releases the mount points [`host_mount_points`] listed (claimed by the launch, see
/// [`crate::placeholders`]); each is removed when no concurrent run still covers it, and
/// only if it is still empty, so nothing a concurrent run or the user put there is lost.
/// Returns the ones that could not be removed, with the reason; a point already gone is
/// not an error.
pub fn remove_host_mount_points(points: &[PathBuf]) -> Vec<(PathBuf, String)> {
    crate::placeholders::release(points)
}

/// Whether the bwrap backend can carry out `plan`'s filesystem (its binds, system
/// symlinks, protected covers and denied paths) on this host, without launching
/// anything: the part of [`bwrap_argv`] that depends on the grants.
pub fn check_filesystem(plan: &Plan, host: &HostLayout) -> Result<(), BwrapError> {
    let mounts = mount_steps(plan, host)?;
    deny_steps(plan, host, &mounts);
    Ok(())
}

/// `mounts` with the plan's host sockets, each bound from its fd in
/// [`BwrapOptions::unix_socket_fds`], in destination order.
fn with_sockets(
    mounts: Vec<(PathBuf, Step)>,
    plan: &Plan,
    opts: &BwrapOptions,
) -> Result<Vec<(PathBuf, Step)>, BwrapError> {
    let sockets = &plan.network.unix_sockets;
    if sockets.is_empty() {
        return Ok(mounts);
    }
    if !opts.features.bind_fd {
        return Err(BwrapError::PlanNotExpressible {
            what: "egress.unix_sockets needs bwrap 0.5.0 or later (--ro-bind-fd)".to_owned(),
        });
    }
    if opts.unix_socket_fds.len() != sockets.len() || opts.unix_socket_fds.iter().any(|fd| *fd < 0)
    {
        return Err(BwrapError::InvalidOption {
            option: "unix_socket_fds",
            reason: format!(
                "{:?}: one non-negative fd per host socket of the plan ({})",
                opts.unix_socket_fds,
                sockets.len()
            ),
        });
    }
    let mut all: BTreeSet<(PathBuf, Step)> = mounts.into_iter().collect();
    for (socket, fd) in sockets.iter().zip(&opts.unix_socket_fds) {
        let path = absolute(&socket.path, "host socket")?;
        // /tmp is the run's own tmpfs, where a socket's directories are a skeleton; /proc
        // and /dev are the sandbox's.
        if let Some(fixed) = crate::linux::mounts::RESERVED_DESTINATIONS
            .iter()
            .find(|f| path.starts_with(f))
        {
            return Err(BwrapError::PlanNotExpressible {
                what: format!(
                    "host socket {} is under the sandbox's own {fixed}",
                    path.display()
                ),
            });
        }
        all.insert((path.to_path_buf(), Step::SocketFd { fd: *fd }));
    }
    Ok(all.into_iter().collect())
}

/// Every bind, system symlink and protected cover, keyed by destination path so they
/// render ancestor-first; on the same path the more restrictive step renders last.
pub(super) fn mount_steps(
    plan: &Plan,
    host: &HostLayout,
) -> Result<Vec<(PathBuf, Step)>, BwrapError> {
    let fs = &plan.filesystem;
    let mut steps: BTreeSet<(PathBuf, Step)> = BTreeSet::new();
    for path in fs.system_binds() {
        let path = absolute(path, "system path")?;
        match host.kind(path) {
            PathKind::Missing => {}
            PathKind::Dir | PathKind::File => {
                steps.insert((path.to_path_buf(), Step::BindRo));
            }
            PathKind::Symlink { target, .. } => {
                steps.insert((
                    path.to_path_buf(),
                    Step::Symlink {
                        target: target.clone(),
                    },
                ));
            }
        }
    }
    let grants = fs
        .read_only_binds()
        .iter()
        .map(|p| (p, Step::BindRo, "read-only path"))
        .chain(
            fs.writable_binds()
                .iter()
                .map(|p| (p, Step::BindRw, "writable path")),
        )
        .chain(std::iter::once((
            &plan.workspace,
            Step::BindRw,
            "workspace",
        )));
    for (path, step, what) in grants {
        let path = absolute(path, what)?;
        // The sandbox's own /dev/shm serves this grant; the host's is never bound.
        if FsPlan::sandbox_provides(path) {
            continue;
        }
        match host.kind(path) {
            // Validation keeps only existing, canonical grants; a vanished one is skipped.
            PathKind::Missing => {}
            PathKind::Dir | PathKind::File => {
                steps.insert((path.to_path_buf(), step));
            }
            PathKind::Symlink { .. } => {
                return Err(BwrapError::PlanNotExpressible {
                    what: format!(
                        "{what} {} is a symlink (grants must be canonical)",
                        path.display()
                    ),
                });
            }
        }
    }
    if host.kind(&plan.workspace) == &PathKind::Missing {
        return Err(BwrapError::PlanNotExpressible {
            what: format!("workspace {} does not exist", plan.workspace.display()),
        });
    }
    steps.extend(protected_mounts(plan, host)?);

    for (path, _) in &steps {
        if path == Path::new("/") {
            return Err(BwrapError::PlanNotExpressible {
                what: "a bind of / would expose the whole host".to_owned(),
            });
        }
        if let Some(fixed) = FIXED_MOUNTS.iter().find(|f| Path::new(f).starts_with(path)) {
            return Err(BwrapError::PlanNotExpressible {
                what: format!("{} would hide the sandbox's own {fixed}", path.display()),
            });
        }
    }
    Ok(steps.into_iter().collect())
}

/// The steps that keep each protected path read-only. Walking from the workspace root
/// down to the protected path `P`, the first component `C` that is not a directory
/// decides:
///
/// - `P` itself is a directory, or `C` is a file (regular, device, fifo, socket — e.g. a
///   worktree's `.git` file): `--ro-bind` it. A file `C` above `P` also stops `P` from
///   being created (`ENOTDIR`), and the bind stops `C` from being replaced.
/// - `C` is a missing `.git` and `P` lies inside it: nothing (the run may make its own
///   repository, reported after the run).
/// - `C` is missing and is `P` itself (not `.git`): a placeholder file made by the
///   supervisor and bound read-only onto itself, as the native backend covers it (so
///   concurrent runs of both backends agree): empty, or for a `commondir` holding `.`,
///   since git reads it and finds a directory or an empty file fatal.
/// - `C` is missing otherwise: cover `C` with an empty read-only tmpfs. Neither `C` nor anything
///   below it can be created (`mkdir .git` fails with `EEXIST`, `.git/hooks` with
///   `EROFS`), and a mount point cannot be renamed or removed (`EBUSY`). A directory
///   rather than `/dev/null`: bwrap creates the mount point in the host's workspace, and
///   an empty directory left behind is harmless to git where an empty `.git` *file*
///   breaks it; [`host_mount_points`] lists these for removal.
/// - `C` is a symlink: bwrap's `mount(2)` follows symlinks, so nothing can be mounted
///   over the link itself (a cover would land on its target, leaving the link free to be
///   replaced). Instead the link's parent directory is re-bound read-only, which pins
///   the link; and when the link resolves to a place the run may write (the workspace or
///   a writable grant), that target is re-bound read-only too, so the content behind the
///   link cannot change either. This is broader than asked (the whole parent becomes
///   read-only, e.g. all of `.git` for a symlinked `.git/hooks`), never narrower. A
///   symlink directly in the workspace root is an error: pinning it would make the whole
///   workspace read-only.
///
/// A cover inside a directory re-bound read-only by another protected path is dropped:
/// that directory already stops the path from being created.
pub(super) fn protected_mounts(
    plan: &Plan,
    host: &HostLayout,
) -> Result<Vec<(PathBuf, Step)>, BwrapError> {
    let workspace = absolute(&plan.workspace, "workspace")?;
    let mut steps = Vec::new();
    for protected in &plan.filesystem.protected {
        let not_coverable = |reason: &str| BwrapError::ProtectedPathNotCoverable {
            path: protected.clone(),
            reason: reason.to_owned(),
        };
        let rel = protected
            .strip_prefix(workspace)
            .map_err(|_| not_coverable("it is not inside the workspace"))?;
        if rel.as_os_str().is_empty()
            || !rel.components().all(|c| matches!(c, Component::Normal(_)))
        {
            return Err(not_coverable(
                "it must name an entry strictly inside the workspace, without `.` or `..`",
            ));
        }
        let mut at = workspace.to_path_buf();
        let components: Vec<_> = rel.components().collect();
        for (i, component) in components.iter().enumerate() {
            let parent = at.clone();
            at.push(component);
            let last = i + 1 == components.len();
            match host.kind(&at) {
                PathKind::Dir if !last => {
                    // Pin the directory on the way (a mount point cannot be renamed or
                    // removed), so `mv .git x && mkdir -p .git/hooks` cannot replace it.
                    steps.push((at.clone(), Step::BindRw));
                    continue;
                }
                PathKind::Dir | PathKind::File => steps.push((at.clone(), Step::BindRo)),
                // A protected entry of a repository that does not exist: a run may make
                // its own (reported after the run as `created_git_dirs`).
                PathKind::Missing
                    if tierbox_policy::validate::run_may_create(component.as_os_str(), last) => {}
                // A missing last component is a file, as the native backend makes it (so
                // concurrent runs of both agree on the placeholder), except a git
                // directory: an empty `.git` file is fatal to git, an empty directory is
                // no repository.
                PathKind::Missing if last && component.as_os_str() != ".git" => {
                    steps.push((at.clone(), Step::PlaceholderRo));
                }
                PathKind::Missing => steps.push((at.clone(), Step::EmptyRo)),
                PathKind::Symlink { resolved, .. } => {
                    if parent == workspace {
                        return Err(not_coverable(&format!(
                            "{} is a symlink directly in the workspace root; bwrap cannot mount over a symlink, and pinning it would make the whole workspace read-only",
                            at.display()
                        )));
                    }
                    steps.push((parent.clone(), Step::BindRo));
                    if let Some(target) = resolved
                        && !target.starts_with(&parent)
                        && writable_roots(plan).any(|root| target.starts_with(root))
                        && matches!(host.kind(target), PathKind::Dir | PathKind::File)
                    {
                        steps.push((target.clone(), Step::BindRo));
                    }
                }
            }
            break;
        }
    }
    // A missing path inside a directory that is itself re-bound read-only (a protected
    // directory, or a symlink's pinned parent) cannot be created anyway, and its cover
    // could not be: bwrap would have to create the mount point in a read-only directory.
    let read_only: Vec<PathBuf> = steps
        .iter()
        .filter(|(_, step)| *step == Step::BindRo)
        .map(|(path, _)| path.clone())
        .collect();
    steps.retain(|(path, step)| {
        !matches!(step, Step::EmptyRo | Step::PlaceholderRo)
            || !read_only
                .iter()
                .any(|ro| path.starts_with(ro) && path != ro)
    });
    Ok(steps)
}

/// The paths a run may write: the workspace and the writable grants.
pub(crate) fn writable_roots(plan: &Plan) -> impl Iterator<Item = &PathBuf> {
    std::iter::once(&plan.workspace).chain(
        plan.filesystem
            .writable_binds()
            .iter()
            .filter(|p| !FsPlan::sandbox_provides(p)),
    )
}

/// Covers for `deny_read` paths that are visible in the sandbox: resolved through a
/// symlink (the denial applies to what the path reaches), and only when under a bound
/// path (anything else is absent from the sandbox anyway) and not already inside an
/// empty cover or a denied directory. Directories get an empty read-only tmpfs, files a
/// `nodev` `/dev/null`. Sorted by path.
pub(super) fn deny_steps(plan: &Plan, host: &HostLayout, mounts: &[(PathBuf, Step)]) -> Vec<Deny> {
    let bound: Vec<&PathBuf> = mounts
        .iter()
        .filter(|(_, s)| matches!(s, Step::BindRo | Step::BindRw))
        .map(|(p, _)| p)
        .collect();
    let mut hidden: Vec<PathBuf> = mounts
        .iter()
        .filter(|(_, s)| *s == Step::EmptyRo)
        .map(|(p, _)| p.clone())
        .collect();
    let mut wanted: BTreeMap<PathBuf, bool> = BTreeMap::new();
    let fs = &plan.filesystem;
    for path in fs.system_covers().iter().chain(&fs.deny_read) {
        let (real, kind) = match host.kind(path) {
            PathKind::Symlink {
                resolved: Some(resolved),
                ..
            } => (resolved.clone(), host.kind(resolved).clone()),
            kind => (path.clone(), kind.clone()),
        };
        if !real.is_absolute() || !bound.iter().any(|b| real.starts_with(b)) {
            continue;
        }
        match kind {
            PathKind::Dir => {
                wanted.insert(real, true);
            }
            PathKind::File => {
                wanted.entry(real).or_insert(false);
            }
            PathKind::Missing | PathKind::Symlink { .. } => {}
        }
    }
    let mut out = Vec::new();
    // Ancestor-first, so a covered directory is seen before anything inside it (which is
    // then already hidden, and could not be mounted on inside the read-only cover).
    for (path, is_dir) in wanted {
        if hidden.iter().any(|h| path.starts_with(h)) {
            continue;
        }
        if is_dir {
            hidden.push(path.clone());
            out.push(Deny::Dir(path));
        } else {
            out.push(Deny::File(path));
        }
    }
    out
}

/// The `--setenv NAME VALUE` arguments of `plan`'s environment, NUL-separated as bwrap's
/// `--args FD` reads them ([`BwrapOptions::env_args_fd`]). Pure.
pub fn bwrap_env_args(plan: &Plan, opts: &BwrapOptions) -> Result<Vec<u8>, BwrapError> {
    let mut out = Vec::new();
    for (name, value) in sandbox_env(plan, opts)? {
        for word in ["--setenv", name.as_str(), value.as_str()] {
            if word.as_bytes().contains(&0) {
                return Err(BwrapError::PlanNotExpressible {
                    what: format!("environment variable {name:?} contains a NUL byte"),
                });
            }
            out.extend_from_slice(word.as_bytes());
            out.push(0);
        }
    }
    Ok(out)
}

/// The sandbox's environment: the Plan's, plus `HOME` for a private home and the
/// temporary-directory variables it does not set; sorted by name.
pub(super) fn sandbox_env(
    plan: &Plan,
    opts: &BwrapOptions,
) -> Result<Vec<(String, String)>, BwrapError> {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in &plan.env {
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            return Err(BwrapError::PlanNotExpressible {
                what: format!("environment variable name {name:?} is not valid for setenv"),
            });
        }
        env.insert(name.clone(), value.clone());
    }
    if plan.filesystem.private_home {
        env.insert("HOME".to_owned(), SANDBOX_HOME.to_owned());
    }
    for name in TMP_VARS {
        env.entry((*name).to_owned())
            .or_insert_with(|| SANDBOX_TMP.to_owned());
    }
    if let Some(port) = opts.egress_proxy_port {
        env.extend(crate::egress::proxy_env(port));
    }
    let mut env: Vec<(String, String)> = env.into_iter().collect();
    if let Some(t) = &opts.trust {
        let bundle = format!("{SANDBOX_TMP}/{}", crate::egress::CA_BUNDLE_FILE);
        crate::egress::set_trust_env(&mut env, &t.trust, &bundle);
        env.sort();
    }
    Ok(env)
}

pub(super) fn absolute<'a>(path: &'a Path, what: &str) -> Result<&'a Path, BwrapError> {
    if path.is_absolute() {
        Ok(path)
    } else {
        Err(BwrapError::PlanNotExpressible {
            what: format!("{what} {} is not absolute", path.display()),
        })
    }
}

/// The argv under construction.
#[derive(Debug, Default)]
pub(super) struct Argv(pub(super) Vec<OsString>);

impl Argv {
    pub(super) fn push(&mut self, arg: impl AsRef<OsStr>) {
        self.0.push(arg.as_ref().to_os_string());
    }

    pub(super) fn flags(&mut self, flags: &[&str]) {
        self.0.extend(flags.iter().map(OsString::from));
    }

    pub(super) fn flag_value(&mut self, flag: &str, value: impl AsRef<OsStr>) {
        self.push(flag);
        self.push(value);
    }

    pub(super) fn flag_pair(&mut self, flag: &str, a: impl AsRef<OsStr>, b: impl AsRef<OsStr>) {
        self.push(flag);
        self.push(a);
        self.push(b);
    }

    pub(super) fn empty_ro(&mut self, path: &Path) {
        self.flag_value("--tmpfs", path);
        self.flag_value("--remount-ro", path);
    }

    /// The argv, checked: an argument cannot carry a NUL byte through `execve`.
    pub(super) fn finish(self) -> Result<Vec<OsString>, BwrapError> {
        if let Some(i) = self.0.iter().position(|a| a.as_bytes().contains(&0)) {
            return Err(BwrapError::PlanNotExpressible {
                what: format!("argument {i} ({:?}) contains a NUL byte", self.0[i]),
            });
        }
        Ok(self.0)
    }
}
