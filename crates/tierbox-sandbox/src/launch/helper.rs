//! Starting a trusted helper program (`bwrap`, a container engine's client) like a Tier B
//! child, without the layers it applies itself ([`HelperSpawn`]).

use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use tierbox_policy::plan::Plan;

use super::launcher::clone_child;
use super::{
    LaunchError, LaunchOptions, Slot, SpawnedChild, StdioPipes, cgroup_fd_array, cstring,
    rlimit64_table, stdio_pipes, sys,
};
use crate::linux::exec::null_terminated;

/// A trusted helper program (`bwrap`) started like a Tier B child — new session,
/// `PR_SET_PDEATHSIG`, the run's cgroup joined before exec, rlimits, stdio pipes, every
/// other fd closed, `no_new_privs` — but without landlock, seccomp or a capability drop,
/// which the helper applies itself inside the sandbox it builds.
pub(crate) struct HelperSpawn<'a> {
    pub program: &'a Path,
    pub argv: &'a [std::ffi::OsString],
    pub env: &'a [(String, String)],
    /// Fds the helper receives at fixed numbers (3 and up; at most
    /// [`sys::MAX_INHERITED_FDS`]).
    pub inherit: &'a [(BorrowedFd<'a>, i32)],
    /// A network namespace the helper starts in.
    pub netns: Option<&'a OwnedFd>,
    /// Detached trees moved over these paths in a private mount namespace of the
    /// helper's (a root supervisor's idmapped writable grants for bwrap).
    pub mount_moves: &'a [(&'a OwnedFd, &'a Path)],
    /// Drop the supervisor's supplementary groups before exec.
    pub clear_groups: bool,
    /// Start the helper in an audit session of its own (see [`crate::linux::audit`]):
    /// its refused calls are logged and attributed to the run (`None`: no session).
    pub audit_session: Option<crate::linux::audit::SessionWants>,
}

impl HelperSpawn<'_> {
    /// The fields every helper without extras has.
    pub(crate) fn plain<'a>(
        program: &'a Path,
        argv: &'a [std::ffi::OsString],
        env: &'a [(String, String)],
    ) -> HelperSpawn<'a> {
        HelperSpawn {
            program,
            argv,
            env,
            inherit: &[],
            netns: None,
            mount_moves: &[],
            clear_groups: false,
            audit_session: None,
        }
    }
}

/// A memory file (`memfd`, close-on-exec) holding `bytes`, positioned at its start: data a
/// helper reads from an inherited fd to its end (bwrap's `--args`, a container engine's
/// `--env-file /dev/fd/N`), kept out of its command line. Not a pipe: the data may exceed
/// a pipe's buffer, and nothing has to write while the helper reads.
pub(crate) fn data_fd(
    name: &std::ffi::CStr,
    bytes: &[u8],
    what: &str,
) -> Result<OwnedFd, LaunchError> {
    use std::io::{Seek, SeekFrom, Write};
    let setup = |source: std::io::Error| LaunchError::Setup {
        what: format!("memory file for {what}"),
        source,
    };
    let fd = rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC)
        .map_err(|e| setup(e.into()))?;
    let mut file = std::fs::File::from(fd);
    file.write_all(bytes).map_err(setup)?;
    file.seek(SeekFrom::Start(0)).map_err(setup)?;
    Ok(file.into())
}

/// The audit session a helper was started in, when it asked for one.
pub(crate) type HelperAudit =
    Option<Result<crate::linux::audit::AuditSession, crate::linux::audit::NotRecorded>>;

/// Starts `helper` in `slot`'s cgroup with the Plan's stdin and rlimits; see
/// [`HelperSpawn`].
pub(crate) fn spawn_helper(
    plan: &Plan,
    opts: &LaunchOptions,
    slot: &Slot,
    helper: &HelperSpawn<'_>,
) -> Result<(SpawnedChild, HelperAudit), LaunchError> {
    let program = cstring(helper.program.as_os_str().as_bytes(), "helper path")?;
    let argv: Vec<CString> = helper
        .argv
        .iter()
        .map(|a| cstring(a.as_bytes(), "helper argument"))
        .collect::<Result<_, _>>()?;
    let envp: Vec<CString> = helper
        .env
        .iter()
        .map(|(k, v)| cstring(format!("{k}={v}").as_bytes(), "environment entry"))
        .collect::<Result<_, _>>()?;
    let cwd = cstring(b"/", "cwd")?;
    let argv_ptrs = null_terminated(&argv);
    let envp_ptrs = null_terminated(&envp);
    if helper.inherit.len() > sys::MAX_INHERITED_FDS {
        return Err(LaunchError::Setup {
            what: "helper fds".to_owned(),
            source: std::io::Error::other(format!(
                "{} fds to inherit, at most {}",
                helper.inherit.len(),
                sys::MAX_INHERITED_FDS
            )),
        });
    }
    // Sources at INHERIT_SOURCE_MIN_FD or above (see `HelperSetup::inherit`).
    let inherit_sources: Vec<(OwnedFd, i32)> = helper
        .inherit
        .iter()
        .map(|(fd, at)| {
            super::pipes::dup_at_least(*fd, sys::INHERIT_SOURCE_MIN_FD)
                .map(|d| (d, *at))
                .map_err(|source| LaunchError::Setup {
                    what: "dup of an fd for the helper".to_owned(),
                    source,
                })
        })
        .collect::<Result<_, _>>()?;
    let mut inherit = [(-1, -1); sys::MAX_INHERITED_FDS];
    for (slot, (fd, at)) in inherit.iter_mut().zip(&inherit_sources) {
        *slot = (fd.as_raw_fd(), *at);
    }
    let move_paths: Vec<CString> = helper
        .mount_moves
        .iter()
        .map(|(_, path)| cstring(path.as_os_str().as_bytes(), "mount point"))
        .collect::<Result<_, _>>()?;
    let mount_moves: Vec<sys::MountMove> = helper
        .mount_moves
        .iter()
        .zip(&move_paths)
        .map(|((tree, _), path)| sys::MountMove {
            tree: tree.as_raw_fd(),
            path: path.as_ptr(),
        })
        .collect();
    let StdioPipes {
        child,
        parent,
        terminal,
    } = stdio_pipes(plan, opts)?;
    let (cgroup_fds, n_cgroup_fds) = cgroup_fd_array(slot);
    let mut spec = sys::ChildSpec {
        cgroup_fds,
        n_cgroup_fds,
        helper: sys::HelperSetup {
            inherit,
            mount_moves: if mount_moves.is_empty() {
                std::ptr::null()
            } else {
                mount_moves.as_ptr()
            },
            n_mount_moves: mount_moves.len(),
            clear_groups: helper.clear_groups,
        },
        keep_caps: true,
        // A helper on the run's terminal (a container engine's CLI) has it as its
        // controlling terminal: the kernel then tells it of a resize (`SIGWINCH`).
        controlling_terminal: terminal.is_some(),
        netns_fd: helper.netns.map_or(-1, |fd| fd.as_raw_fd()),
        // A helper builds its own sandbox: what it applies is logged or not by its own
        // flags (bwrap's filter is not; tierbox-init stacks a logged one), so the log
        // flags stay off here.
        audit_session: helper.audit_session.clone(),
        ..sys::ChildSpec::new(
            program.as_ptr(),
            argv_ptrs.as_ptr(),
            envp_ptrs.as_ptr(),
            cwd.as_ptr(),
            child.raw_fds(),
            rlimit64_table(plan),
        )
    };
    let cloned = clone_child(opts, &mut spec);
    // The child's ends are closed in the parent whatever happened.
    drop(child);
    let cloned = cloned?;
    Ok((
        SpawnedChild {
            pid: cloned.pid,
            pidfd: cloned.pidfd,
            stdio: parent,
            chmod_listener: None,
            terminal,
        },
        cloned.audit,
    ))
}
